//! Neighbor tables (ARP, RFC 826 / RFC 1122 §2.3.2; NDP, RFC 4861 §7.3).
//!
//! One table per VR holds both families. Entries live in a slab so next
//! hops can point at them by index; a gateway's entry is *pinned* and never
//! freed, so an ARP/ND change updates the entry and never touches the FIB.
//!
//! ```text
//!   Unresolved ──first packet──▶ Incomplete ──reply──▶ Reachable ◀─┐
//!                                   │ MAX_PROBES, no reply   │ timeout │ reply
//!                                   ▼                         ▼        │
//!                                Failed ──holddown──▶ (retry)  Stale ───┘
//!                                                        │ MAX_PROBES unicast, no reply
//!                                                        ▼
//!                                                    Incomplete
//! ```
//!
//! The table is sans-IO: it says which probes to send and which held
//! packets are released or dropped; the caller builds and sends frames.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

use vrhost_wire::ethernet::EthernetAddress;

use crate::mbuf::Mbuf;

/// Most packets held for one unresolved neighbor.
pub const HOLD_MAX: usize = 8;

/// How long after a neighbor's last confirmation another one is news for
/// the other workers ([`NeighborTable::learn`]): their entries stay
/// reachable for the reachable time (30 s by default) from the last they
/// heard of.
pub const CONFIRM_NEWS_NS: u64 = 1_000_000_000;

/// Most packets one table (a VR's, on one worker) holds for all its
/// unresolved neighbors together: 64 neighbors' worth at the default
/// `arp_hold` of 4. Without it, a tenant that sends to thousands of
/// addresses nobody answers on a connected prefix would have `hold` of
/// its packets kept for each (16,384 at the defaults), each in a buffer
/// the worker's pool then keeps: 150 MB a VR.
pub const HELD_MAX_TOTAL: usize = 256;
/// Probes sent before giving up (RFC 4861 §10 MAX_MULTICAST_SOLICIT = 3).
pub const MAX_PROBES: u8 = 3;
/// Interval between probes: at most one per second per destination (RFC 1122 §2.3.2.1).
pub const PROBE_INTERVAL_NS: u64 = 1_000_000_000;
/// A stale entry in use waits this long before the first unicast probe
/// (RFC 4861 §10 DELAY_FIRST_PROBE_TIME), giving upper layers time to confirm it.
pub const DELAY_FIRST_PROBE_NS: u64 = 5_000_000_000;
/// How long a failed entry drops packets before resolution is tried again.
pub const FAILED_HOLDDOWN_NS: u64 = 1_000_000_000;
/// Unused dynamic entries that stay stale this long are freed.
pub const STALE_GC_NS: u64 = 60_000_000_000;

/// Resolution state of one neighbor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Known to be needed (a gateway) but never asked for.
    Unresolved,
    /// Broadcast/multicast probes outstanding; packets are held.
    Incomplete,
    /// Confirmed within the reachable time.
    Reachable,
    /// MAC known but unconfirmed; used, and refreshed with unicast probes.
    Stale,
    /// Resolution failed recently; packets are dropped until the hold-down ends.
    Failed,
    /// Configured; never ages.
    Static,
}

/// One neighbor entry.
#[derive(Debug)]
#[repr(C, align(32))]
pub struct Neighbor {
    // What the fast path reads and writes, first: one aligned 32 bytes
    // (`repr(C)` keeps this order), so a cold entry is one cache miss.
    /// State.
    pub state: State,
    /// Link-layer address, meaningful in Reachable, Stale and Static.
    pub mac: EthernetAddress,
    /// Interface (global index) the neighbor is on.
    pub iface: u16,
    /// When the entry was last confirmed (ns).
    pub confirmed: u64,
    /// When the entry was last used to send (ns).
    pub used: u64,
    /// Protocol address.
    pub addr: IpAddr,
    probes: u8,
    pinned: bool,
    held_len: u8,
    in_use: bool,
    next_probe: u64,
    /// Packets waiting for the MAC: boxed on the first one held, so that
    /// the entries of a VR that never waits (static or resolved neighbors,
    /// the many idle VRs) carry one word, not a queue of `HOLD_MAX` buffers.
    held: Option<Box<[Option<Mbuf>; HOLD_MAX]>>,
}

impl Neighbor {
    /// Hands every packet held to `f`, in the order they came; returns
    /// how many there were.
    fn release_held(&mut self, mut f: impl FnMut(Mbuf)) -> usize {
        let held = self.held_len as usize;
        self.held_len = 0;
        let queue = self.held.iter_mut().flat_map(|q| q[..held].iter_mut());
        for m in queue.filter_map(Option::take) {
            f(m);
        }
        held
    }
}

/// What the caller must do after asking to resolve a neighbor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// Send now to this MAC.
    Ready(EthernetAddress),
    /// Send now to this MAC, and also send a unicast probe to refresh it.
    ReadyAndProbe(EthernetAddress),
    /// Give the packet to [`NeighborTable::hold`] (which refuses it when the
    /// queue is full); send a broadcast probe if `probe`.
    Hold {
        /// Whether to send a probe now.
        probe: bool,
    },
    /// The packet cannot be held (queue full, or resolution failed recently).
    Reject,
}

/// A probe the caller must send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Neighbor slot.
    pub index: u32,
    /// Unicast to the cached MAC (a refresh) rather than broadcast/multicast.
    pub unicast: Option<EthernetAddress>,
}

impl Neighbor {
    /// Usable as it is at `now`: static, or reachable and confirmed within
    /// `reachable_ns`, so no probe is due.
    #[inline(always)]
    fn usable(&self, now: u64, reachable_ns: u64) -> bool {
        match self.state {
            State::Static => true,
            State::Reachable => now.saturating_sub(self.confirmed) < reachable_ns,
            _ => false,
        }
    }
}

/// A neighbor table.
#[repr(C)]
pub struct NeighborTable {
    // What the fast path reads, first (`repr(C)` keeps this order): the
    // generation alone while its gateway slots hold their MACs, the slots
    // too (and the reachable time, in the next line) when one does not.
    slots: Vec<Neighbor>,
    /// Changes whenever an entry's MAC, state or place may have changed
    /// in a way that ends its use ([`NeighborTable::generation`]).
    generation: u32,
    reachable_ns: u64,
    free: Vec<u32>,
    index: HashMap<(u16, IpAddr), u32, BuildHasherDefault<FxHasher>>,
    live: usize,
    max: usize,
    hold: usize,
    /// Packets held across all entries, at most [`HELD_MAX_TOTAL`].
    held_total: usize,
}

impl NeighborTable {
    /// An empty table holding at most `max` entries, `hold` packets each.
    pub fn new(max: usize, hold: usize, reachable_ns: u64) -> Self {
        // Start small: most VRs know a handful of neighbors, and an idle VR
        // must cost little. Tables grow on the (rare) creation path.
        let mut index = HashMap::default();
        index.reserve(max.min(8));
        NeighborTable {
            slots: Vec::with_capacity(max.min(8)),
            generation: 0,
            free: Vec::new(),
            index,
            live: 0,
            max,
            hold: hold.min(HOLD_MAX),
            held_total: 0,
            reachable_ns,
        }
    }

    /// Empties the table, handing every held packet to `f`.
    pub fn clear(&mut self, mut f: impl FnMut(Mbuf)) {
        for n in &mut self.slots {
            n.release_held(&mut f);
        }
        self.held_total = 0;
        self.slots.clear();
        self.free.clear();
        self.index.clear();
        self.live = 0;
        self.changed();
    }

    /// The table's generation: it changes whenever an entry that was
    /// usable may have stopped being so before its reachable time ran
    /// out, or changed its MAC (learnt anew, made or unmade static, freed,
    /// the table cleared). A copy of an entry's MAC taken from
    /// [`NeighborTable::usable_mac_until`] stays true while the generation
    /// is the one it was taken in and its deadline has not passed: what a
    /// gateway slot keeps so that the fast path need not read the entry.
    #[inline(always)]
    pub fn generation(&self) -> u32 {
        self.generation
    }

    fn changed(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The slot for `(iface, addr)`, if any.
    #[inline]
    pub fn find(&self, iface: u16, addr: IpAddr) -> Option<u32> {
        self.index.get(&(iface, addr)).copied()
    }

    /// Entry at `index`.
    pub fn get(&self, index: u32) -> &Neighbor {
        &self.slots[index as usize]
    }

    /// Live entries.
    pub fn iter(&self) -> impl Iterator<Item = &Neighbor> {
        self.slots.iter().filter(|n| n.in_use)
    }

    /// Finds or creates the entry for `(iface, addr)`. Pinned entries (gateways)
    /// are never garbage collected. Returns `None` when the table is full.
    pub fn ensure(&mut self, iface: u16, addr: IpAddr, pinned: bool) -> Option<u32> {
        if let Some(i) = self.find(iface, addr) {
            if pinned {
                self.slots[i as usize].pinned = true;
            }
            return Some(i);
        }
        if self.live >= self.max {
            return None;
        }
        let fresh = Neighbor {
            addr,
            iface,
            state: State::Unresolved,
            mac: EthernetAddress([0; 6]),
            confirmed: 0,
            used: 0,
            probes: 0,
            next_probe: 0,
            pinned,
            held: Default::default(),
            held_len: 0,
            in_use: true,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = fresh;
                i
            }
            None => {
                self.slots.push(fresh);
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert((iface, addr), i);
        self.live += 1;
        self.changed();
        Some(i)
    }

    /// Installs a static entry.
    pub fn set_static(&mut self, iface: u16, addr: IpAddr, mac: EthernetAddress) -> Option<u32> {
        let i = self.ensure(iface, addr, true)?;
        let n = &mut self.slots[i as usize];
        n.state = State::Static;
        n.mac = mac;
        self.changed();
        Some(i)
    }

    /// Forgets the MAC of the static entry for `(iface, addr)`, if there is
    /// one: it becomes unresolved (packets for it are held while it is asked
    /// for again) and ages like a learnt entry. Returns whether it was static.
    pub fn unset_static(&mut self, iface: u16, addr: IpAddr) -> bool {
        let Some(i) = self.find(iface, addr) else {
            return false;
        };
        let n = &mut self.slots[i as usize];
        if n.state != State::Static {
            return false;
        }
        n.state = State::Unresolved;
        n.mac = EthernetAddress([0; 6]);
        n.probes = 0;
        self.changed();
        true
    }

    /// The MAC of neighbor `i` when it is usable as it is: static, or
    /// reachable and confirmed within the reachable time, so no probe is
    /// due. Marks the entry used, as [`NeighborTable::resolve`] does.
    #[inline(always)]
    pub fn usable_mac(&mut self, i: u32, now: u64) -> Option<EthernetAddress> {
        self.usable_mac_until(i, now).map(|(mac, _)| mac)
    }

    /// [`NeighborTable::usable_mac`], with the deadline before which it
    /// stays usable unless the table's [`NeighborTable::generation`]
    /// changes: `u64::MAX` for a static entry, the end of its reachable
    /// time for a reachable one.
    #[inline(always)]
    pub fn usable_mac_until(&mut self, i: u32, now: u64) -> Option<(EthernetAddress, u64)> {
        let reachable_ns = self.reachable_ns;
        let n = self.slots.get_mut(i as usize)?;
        n.used = now;
        let until = match n.state {
            State::Static => u64::MAX,
            // Usable while `now - confirmed < reachable_ns`, that is (the
            // clock being monotonic) while `now < confirmed + reachable_ns`.
            State::Reachable if n.usable(now, reachable_ns) => {
                n.confirmed.saturating_add(reachable_ns)
            }
            _ => return None,
        };
        Some((n.mac, until))
    }

    /// [`NeighborTable::usable_mac`] without marking the entry used: for a
    /// caller that may still not send (the fast path before the rule
    /// lists), which marks it with [`NeighborTable::mark_used`] once it does.
    #[inline(always)]
    pub(crate) fn peek_usable_mac(&self, i: u32, now: u64) -> Option<EthernetAddress> {
        let n = self.slots.get(i as usize)?;
        n.usable(now, self.reachable_ns).then_some(n.mac)
    }

    /// Marks neighbor `i` used at `now`.
    #[inline(always)]
    pub(crate) fn mark_used(&mut self, i: u32, now: u64) {
        if let Some(n) = self.slots.get_mut(i as usize) {
            n.used = now;
        }
    }

    /// Asks for the MAC of neighbor `i`. See [`Resolve`].
    #[inline]
    pub fn resolve(&mut self, i: u32, now: u64) -> Resolve {
        if let Some(mac) = self.usable_mac(i, now) {
            return Resolve::Ready(mac);
        }
        let n = &mut self.slots[i as usize];
        match n.state {
            // Static entries are always usable: answered above.
            State::Static => Resolve::Ready(n.mac),
            State::Reachable | State::Stale => {
                // RFC 4861 §7.3.3: a stale entry is still used; confirm it with
                // unicast probes, at most one per PROBE_INTERVAL.
                if n.state == State::Reachable {
                    n.state = State::Stale;
                    n.probes = 0;
                    n.next_probe = now + DELAY_FIRST_PROBE_NS;
                }
                if now >= n.next_probe && n.probes < MAX_PROBES {
                    n.probes += 1;
                    n.next_probe = now + PROBE_INTERVAL_NS;
                    Resolve::ReadyAndProbe(n.mac)
                } else {
                    Resolve::Ready(n.mac)
                }
            }
            State::Failed if now < n.next_probe => Resolve::Reject,
            State::Unresolved | State::Failed | State::Incomplete => {
                if n.state != State::Incomplete {
                    n.state = State::Incomplete;
                    n.probes = 0;
                    n.next_probe = now;
                }
                let probe = now >= n.next_probe && n.probes < MAX_PROBES;
                if probe {
                    n.probes += 1;
                    n.next_probe = now + PROBE_INTERVAL_NS;
                }
                Resolve::Hold { probe }
            }
        }
    }

    /// Holds `m` until neighbor `i` resolves; gives it back when its queue
    /// is full, or the table holds [`HELD_MAX_TOTAL`] packets already.
    pub fn hold(&mut self, i: u32, m: Mbuf) -> Result<(), Mbuf> {
        let n = &mut self.slots[i as usize];
        if n.held_len as usize >= self.hold || self.held_total >= HELD_MAX_TOTAL {
            return Err(m);
        }
        self.held_total += 1;
        let queue = n
            .held
            .get_or_insert_with(|| Box::new(core::array::from_fn(|_| None)));
        queue[n.held_len as usize] = Some(m);
        n.held_len += 1;
        Ok(())
    }

    /// Records a link-layer address learned for `i`. `confirmed` marks proof
    /// of reachability (an ARP reply, a solicited NA); otherwise the entry
    /// becomes Stale when the MAC changes (RFC 4861 §7.2.5, RFC 826 merge).
    /// Held packets are handed to `release` with the MAC to send them to.
    ///
    /// Returns whether this is news for the other workers: a new MAC, a
    /// new state, or a confirmation [`CONFIRM_NEWS_NS`] after the last one.
    /// A sender that repeats what the table knows (a tenant's ARP flood)
    /// then costs the other workers nothing.
    pub fn learn(
        &mut self,
        i: u32,
        mac: EthernetAddress,
        confirmed: bool,
        now: u64,
        mut release: impl FnMut(Mbuf, EthernetAddress),
    ) -> bool {
        if self.slots[i as usize].state == State::Static {
            return false;
        }
        let n = &mut self.slots[i as usize];
        let changed = n.mac != mac;
        let was = n.state;
        n.mac = mac;
        // Learning counts as activity: the entry is not idle garbage yet.
        n.used = n.used.max(now);
        let mut news = changed;
        if confirmed {
            news |= was != State::Reachable || now.saturating_sub(n.confirmed) >= CONFIRM_NEWS_NS;
            // Within a second of the last, a confirmation moves nothing: the
            // entry stays reachable from then, a second less at most.
            if news {
                n.confirmed = now;
            }
            n.state = State::Reachable;
            n.probes = 0;
        } else if changed
            || matches!(
                n.state,
                State::Unresolved | State::Incomplete | State::Failed
            )
        {
            news = true;
            n.state = State::Stale;
            n.probes = 0;
            n.next_probe = now + DELAY_FIRST_PROBE_NS;
        }
        // Gateway slots' copies of the MAC stay true unless the MAC or the
        // state moved: a repeat (a flood of the same ARP) keeps them.
        let moved = changed || n.state != was;
        self.held_total -= n.release_held(|m| release(m, mac));
        if moved {
            self.changed();
        }
        news
    }

    /// Runs timers: retransmits probes for incomplete entries (pushed onto
    /// `probes`), fails entries out of probes (their held packets go to
    /// `dropped`), demotes stale entries that did not answer to Incomplete,
    /// and frees unused dynamic entries.
    pub fn poll(&mut self, now: u64, probes: &mut Vec<Probe>, mut dropped: impl FnMut(Mbuf)) {
        for (i, n) in self.slots.iter_mut().enumerate() {
            if !n.in_use || now < n.next_probe {
                continue;
            }
            match n.state {
                State::Incomplete if n.probes < MAX_PROBES => {
                    n.probes += 1;
                    n.next_probe = now + PROBE_INTERVAL_NS;
                    probes.push(Probe {
                        index: i as u32,
                        unicast: None,
                    });
                }
                State::Incomplete => {
                    n.state = State::Failed;
                    n.next_probe = now + FAILED_HOLDDOWN_NS;
                    self.held_total -= n.release_held(&mut dropped);
                }
                State::Stale
                    if n.probes >= MAX_PROBES && now.saturating_sub(n.used) < STALE_GC_NS =>
                {
                    // Unicast refresh went unanswered while in use: ask everybody.
                    n.state = State::Incomplete;
                    n.probes = 0;
                }
                _ => {}
            }
        }
        // Free dynamic entries nobody uses.
        for i in 0..self.slots.len() {
            let n = &self.slots[i];
            let idle = now.saturating_sub(n.used.max(n.confirmed)) >= STALE_GC_NS;
            let collectable = match n.state {
                State::Failed => now >= n.next_probe,
                State::Stale | State::Reachable => idle,
                _ => false,
            };
            if n.in_use && !n.pinned && collectable {
                let key = (n.iface, n.addr);
                self.index.remove(&key);
                self.slots[i].in_use = false;
                self.free.push(i as u32);
                self.live -= 1;
                self.changed();
            }
        }
    }

    /// Packets currently held across all entries.
    pub fn held(&self) -> usize {
        self.held_total
    }
}

/// The Firefox/rustc multiply-rotate hasher: a few cycles for the small
/// fixed-size keys of the neighbor index, where SipHash's DoS resistance
/// buys nothing (keys are bounded by `max_neighbors`).
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.hash = (self.hash.rotate_left(5) ^ i).wrapping_mul(SEED);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mbuf::MbufPool;
    use std::net::Ipv4Addr;

    const SEC: u64 = 1_000_000_000;
    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 9]);

    fn addr(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    /// What the fast path reads of the table, its generation and its
    /// slots, is its first 32 bytes (the VR keeps them in its first line).
    #[test]
    fn the_fast_paths_fields_come_first() {
        use std::mem::offset_of;
        assert!(offset_of!(NeighborTable, slots) + size_of::<Vec<Neighbor>>() <= 32);
        assert!(offset_of!(NeighborTable, generation) + size_of::<u32>() <= 32);
    }

    /// An entry holds its waiting packets out of line: the entries a VR
    /// starts with (eight a worker) are three lines, not six, for the many
    /// VRs that never wait on a neighbor.
    #[test]
    fn an_entry_is_three_lines_at_most() {
        assert!(size_of::<Neighbor>() <= 96, "{}", size_of::<Neighbor>());
    }

    /// The queue, boxed on the first packet held, keeps its order, and is
    /// reused once released.
    #[test]
    fn held_packets_leave_in_order_and_the_queue_is_reused() {
        let mut pool = MbufPool::new(8);
        let mut t = NeighborTable::new(16, 3, 30 * SEC);
        let i = t.ensure(0, addr(2), false).unwrap();
        for round in 0..2u8 {
            for k in 0..3u8 {
                let mut m = pool.get();
                m.set_len_from_start(1)[0] = 10 * round + k;
                t.hold(i, m).unwrap();
            }
            assert!(t.hold(i, pool.get()).is_err(), "the queue holds 3");
            assert_eq!(t.held(), 3);
            let mut out = Vec::new();
            t.learn(i, MAC, true, SEC, |m, _| out.push(m.data()[0]));
            assert_eq!(out, [10 * round, 10 * round + 1, 10 * round + 2]);
            assert_eq!(t.held(), 0);
            // Unresolved again, for the next round.
            t.slots[i as usize].state = State::Incomplete;
        }
    }

    /// However many neighbors are unresolved, a table holds
    /// [`HELD_MAX_TOTAL`] packets at most; what a neighbor's reply or
    /// failure releases makes room again.
    #[test]
    fn a_table_holds_a_bounded_number_of_packets_in_all() {
        let mut pool = MbufPool::new(8);
        let mut t = NeighborTable::new(4096, 4, 30 * SEC);
        let mut refused = 0;
        let entries: Vec<u32> = (0..200u16)
            .map(|k| {
                let a = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + u32::from(k)));
                let i = t.ensure(0, a, false).unwrap();
                assert_eq!(t.resolve(i, 0), Resolve::Hold { probe: true });
                for _ in 0..4 {
                    if let Err(m) = t.hold(i, pool.get()) {
                        refused += 1;
                        pool.put(m);
                    }
                }
                i
            })
            .collect();
        assert_eq!(t.held(), HELD_MAX_TOTAL);
        assert_eq!(refused, 200 * 4 - HELD_MAX_TOTAL);
        // The first neighbor answers: its four leave, four more fit.
        let mut out = 0;
        t.learn(entries[0], MAC, true, SEC, |_, _| out += 1);
        assert_eq!((out, t.held()), (4, HELD_MAX_TOTAL - 4));
        for _ in 0..4 {
            t.hold(entries[100], pool.get()).unwrap();
        }
        assert!(t.hold(entries[101], pool.get()).is_err());
        // The rest fail out of their probes: nothing is left held.
        let (mut probes, mut dropped) = (Vec::new(), 0);
        for s in 1..=5 {
            t.poll(s * SEC, &mut probes, |_| dropped += 1);
        }
        assert_eq!((dropped, t.held()), (HELD_MAX_TOTAL, 0));
        t.hold(entries[150], pool.get()).unwrap();
        assert_eq!(t.held(), 1);
    }

    /// Only what changes is news for the other workers: a new MAC or
    /// state, a confirmation a second after the last; not a sender that
    /// repeats itself, and never a static entry.
    #[test]
    fn learning_what_the_table_knows_is_no_news() {
        let mut t = NeighborTable::new(16, 4, 30 * SEC);
        let i = t.ensure(0, addr(2), false).unwrap();
        let other = EthernetAddress([2, 0, 0, 0, 0, 0x77]);
        let mut learn = |mac, confirmed, now| t.learn(i, mac, confirmed, now, |_, _| {});
        assert!(learn(MAC, false, 0), "unresolved to stale");
        assert!(!learn(MAC, false, 1), "the same again");
        assert!(learn(other, false, 2), "a new MAC");
        assert!(learn(other, true, 3), "stale to reachable");
        assert!(!learn(other, true, 4), "confirmed again at once");
        assert!(!learn(other, false, 5));
        assert!(learn(other, true, 3 + CONFIRM_NEWS_NS), "a second later");
        let s = t.ensure(0, addr(3), true).unwrap();
        t.slots[s as usize].state = State::Static;
        assert!(!t.learn(s, other, true, 0, |_, _| {}), "static");
    }

    #[test]
    fn holds_then_releases_on_reply() {
        let mut pool = MbufPool::new(8);
        let mut t = NeighborTable::new(16, 2, 30 * SEC);
        let i = t.ensure(0, addr(2), false).unwrap();
        assert_eq!(t.resolve(i, 0), Resolve::Hold { probe: true });
        t.hold(i, pool.get()).unwrap();
        assert_eq!(t.resolve(i, 1), Resolve::Hold { probe: false });
        t.hold(i, pool.get()).unwrap();
        assert_eq!(t.resolve(i, 2), Resolve::Hold { probe: false });
        assert!(t.hold(i, pool.get()).is_err(), "queue of 2 is full");
        let mut released = 0;
        t.learn(i, MAC, true, 3, |_, mac| {
            assert_eq!(mac, MAC);
            released += 1;
        });
        assert_eq!(released, 2);
        assert_eq!(t.resolve(i, 4), Resolve::Ready(MAC));
    }

    #[test]
    fn probes_are_rate_limited_then_fail() {
        let mut pool = MbufPool::new(8);
        let mut t = NeighborTable::new(16, 4, 30 * SEC);
        let i = t.ensure(0, addr(2), false).unwrap();
        assert_eq!(t.resolve(i, 0), Resolve::Hold { probe: true });
        t.hold(i, pool.get()).unwrap();
        let mut probes = Vec::new();
        let mut dropped = 0;
        t.poll(SEC / 2, &mut probes, |_| dropped += 1);
        assert!(probes.is_empty(), "no second probe within a second");
        t.poll(SEC, &mut probes, |_| dropped += 1);
        t.poll(2 * SEC, &mut probes, |_| dropped += 1);
        assert_eq!(probes.len(), 2);
        t.poll(3 * SEC, &mut probes, |_| dropped += 1);
        assert_eq!(dropped, 1);
        assert_eq!(t.get(i).state, State::Failed);
        assert_eq!(t.resolve(i, 3 * SEC + 1), Resolve::Reject);
        // After the hold-down a new packet starts resolution again.
        assert_eq!(t.resolve(i, 4 * SEC + 1), Resolve::Hold { probe: true });
    }

    #[test]
    fn reachable_ages_to_stale_and_refreshes() {
        let mut t = NeighborTable::new(16, 4, 30 * SEC);
        let i = t.ensure(0, addr(2), false).unwrap();
        t.learn(i, MAC, true, 0, |_, _| {});
        assert_eq!(t.resolve(i, 29 * SEC), Resolve::Ready(MAC));
        assert_eq!(t.resolve(i, 31 * SEC), Resolve::Ready(MAC));
        assert_eq!(t.get(i).state, State::Stale);
        assert_eq!(
            t.resolve(i, 36 * SEC),
            Resolve::ReadyAndProbe(MAC),
            "after DELAY_FIRST_PROBE"
        );
        assert_eq!(t.resolve(i, 36 * SEC + 1), Resolve::Ready(MAC));
        t.learn(i, MAC, true, 37 * SEC, |_, _| {});
        assert_eq!(t.get(i).state, State::Reachable);
    }

    #[test]
    fn table_is_bounded_and_gc_frees_dynamic_entries() {
        let mut t = NeighborTable::new(2, 4, 30 * SEC);
        let a = t.ensure(0, addr(1), false).unwrap();
        t.ensure(0, addr(2), true).unwrap();
        assert!(t.ensure(0, addr(3), false).is_none());
        t.learn(a, MAC, false, 0, |_, _| {});
        let mut probes = Vec::new();
        t.poll(STALE_GC_NS + 1, &mut probes, |_| {});
        assert_eq!(t.len(), 1, "unused dynamic entry freed, pinned kept");
        assert!(t.ensure(0, addr(3), false).is_some());
    }

    #[test]
    fn static_entries_never_change() {
        let mut t = NeighborTable::new(4, 4, SEC);
        let i = t.set_static(0, addr(1), MAC).unwrap();
        t.learn(i, EthernetAddress([2, 0, 0, 0, 0, 1]), true, 0, |_, _| {});
        assert_eq!(t.resolve(i, 100 * SEC), Resolve::Ready(MAC));
    }

    /// A MAC copied with its deadline stays true while the generation does
    /// not change: anything that may end an entry's use or change its MAC
    /// changes it; using an entry, or learning what it knows, does not.
    #[test]
    fn usable_until_and_the_generation() {
        let mut t = NeighborTable::new(4, 4, 30 * SEC);
        let g = t.ensure(0, addr(1), true).unwrap();
        assert_eq!(t.usable_mac_until(g, SEC), None, "unresolved");
        let mut last = t.generation();
        let changed = |t: &NeighborTable, last: &mut u32, what: &str| {
            assert_ne!(t.generation(), *last, "{what}");
            *last = t.generation();
        };
        t.learn(g, MAC, true, 2 * SEC, |_, _| {});
        changed(&t, &mut last, "learnt");
        // The same again (a flood of one ARP reply) moves nothing.
        t.learn(g, MAC, true, 2 * SEC + 1, |_, _| {});
        assert_eq!(t.generation(), last, "a repeat");
        // Reachable until confirmed + the reachable time, not a tick more.
        assert_eq!(t.usable_mac_until(g, 3 * SEC), Some((MAC, 32 * SEC)));
        assert_eq!(t.usable_mac_until(g, 32 * SEC - 1), Some((MAC, 32 * SEC)));
        assert_eq!(t.usable_mac_until(g, 32 * SEC), None);
        assert_eq!(t.usable_mac(g, 32 * SEC), None, "the same rule");
        let other = EthernetAddress([2, 0, 0, 0, 0, 8]);
        t.learn(g, other, false, 40 * SEC, |_, _| {});
        changed(&t, &mut last, "a new MAC, unconfirmed");
        assert_eq!(t.usable_mac_until(g, 40 * SEC), None, "stale");
        // Using and resolving change nothing a copy relies on.
        t.resolve(g, 41 * SEC);
        t.usable_mac(g, 41 * SEC);
        assert_eq!(t.generation(), last);
        let s = t.set_static(0, addr(2), MAC).unwrap();
        changed(&t, &mut last, "made static");
        assert_eq!(t.usable_mac_until(s, 1000 * SEC), Some((MAC, u64::MAX)));
        assert!(t.unset_static(0, addr(2)));
        changed(&t, &mut last, "unmade static");
        assert_eq!(t.usable_mac_until(s, 1000 * SEC), None);
        // A dynamic entry collected as idle.
        let d = t.ensure(0, addr(3), false).unwrap();
        changed(&t, &mut last, "created");
        t.learn(d, MAC, true, 50 * SEC, |_, _| {});
        changed(&t, &mut last, "learnt");
        t.poll(50 * SEC + STALE_GC_NS, &mut Vec::new(), |_| {});
        assert!(t.find(0, addr(3)).is_none(), "collected");
        changed(&t, &mut last, "collected");
        t.poll(50 * SEC + STALE_GC_NS, &mut Vec::new(), |_| {});
        assert_eq!(t.generation(), last, "a poll that frees nothing");
        t.clear(|_| {});
        changed(&t, &mut last, "cleared");
    }
}

/// A neighbor fact sent between workers and from the control side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A worker learned `mac` for `addr` on `iface` (`confirmed`: reachability proven).
    Learned {
        /// VR index.
        vr: u16,
        /// Interface (global index).
        iface: u16,
        /// Neighbor address.
        addr: IpAddr,
        /// Its MAC.
        mac: EthernetAddress,
        /// An ARP reply or solicited NA, not just a claim.
        confirmed: bool,
    },
    /// The control side installed a static neighbor.
    Static {
        /// VR index.
        vr: u16,
        /// Interface (global index).
        iface: u16,
        /// Neighbor address.
        addr: IpAddr,
        /// Its MAC.
        mac: EthernetAddress,
    },
    /// The control side deleted a static neighbor: workers forget its MAC
    /// and resolve the address afresh the next time it is used.
    Unstatic {
        /// VR index.
        vr: u16,
        /// Interface (global index).
        iface: u16,
        /// Neighbor address.
        addr: IpAddr,
    },
}
