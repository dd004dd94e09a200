//! One worker's state: its view of every VR, its neighbor tables, punt
//! queues, rate limiters, buffer pool and counters.
//!
//! Workers share nothing writable with each other. What one worker learns
//! about a neighbor (an ARP reply, a Neighbor Advertisement) it applies to its
//! own table and sends to every other worker as an [`Event`] through a
//! bounded queue; each worker drains its inbox between bursts. Static
//! neighbors from the control side come on a queue of their own, which a
//! flood of learned ones cannot fill. A worker's
//! counters are [`CounterCells`] that only it writes and anyone may read.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use vrhost_fib::{FibSnapshot, NextHopId, Prefetch};
use vrhost_wire::ethernet::EthernetAddress;

use crate::counters::CounterCells;
use crate::fair::{Clock, Fair};
use crate::filter::Verdict;
use crate::iface::Egress;
use crate::mbuf::{Mbuf, MbufPool};
use crate::neighbor::Event;
use crate::neighbor::{NeighborTable, Probe, HOLD_MAX};
use crate::spec::{Limits, VrId};
use crate::tables::{NextHops, RouteHop, Shared, TableWriter, Tables};

/// Frames to transmit, one queue per port, filled by the pipeline and
/// drained by the drivers.
#[derive(Debug, Default)]
pub struct TxBatch {
    /// Per-port transmit queues, indexed like the ports.
    pub ports: Vec<Vec<Mbuf>>,
}

impl TxBatch {
    /// Queues for `n` ports.
    pub fn new(n: usize) -> Self {
        TxBatch {
            ports: (0..n).map(|_| Vec::with_capacity(1024)).collect(),
        }
    }

    /// Total frames queued.
    pub fn len(&self) -> usize {
        self.ports.iter().map(Vec::len).sum()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a FIB leaf means to the stages of one worker: a [`RouteHop`] with
/// the gateway's neighbor slot resolved in this worker's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NextHop {
    /// One of the VR's own addresses.
    Local,
    /// The directed broadcast address of an attached subnet.
    Broadcast,
    /// Drop silently.
    Blackhole,
    /// Drop with ICMP unreachable.
    Unreachable,
    /// An attached subnet: the destination itself is the neighbor.
    Connected {
        /// Egress interface (global index).
        iface: u16,
    },
    /// Through a gateway whose neighbor entry is `neigh` in this worker's
    /// table (`u32::MAX` when the table had no room).
    Gateway {
        /// Egress interface (global index).
        iface: u16,
        /// Neighbor slot.
        neigh: u32,
    },
    /// A multipath group whose member the flow picks; never the answer of
    /// [`Vr::lookup4`] or [`Vr::lookup6`], which pick it.
    Group {
        /// The group's first bucket.
        base: u32,
    },
}

/// Token bucket on the caller's nanosecond clock: ICMP error, punt and
/// receive-rate limits.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    rate_per_s: u64,
    burst: u64,
    tokens: u64,
    last: u64,
}

impl TokenBucket {
    /// `rate_per_s` tokens a second; the burst equals one second's worth.
    pub fn new(rate_per_s: u32) -> Self {
        Self::with_burst(u64::from(rate_per_s), u64::from(rate_per_s))
    }

    /// `rate_per_s` tokens a second, at most `burst` saved up.
    pub fn with_burst(rate_per_s: u64, burst: u64) -> Self {
        TokenBucket {
            rate_per_s,
            burst,
            tokens: burst,
            last: 0,
        }
    }

    /// Takes one token if available.
    #[inline]
    pub fn take(&mut self, now: u64) -> bool {
        self.take_n(now, 1)
    }

    /// Takes `n` tokens if that many are available.
    #[inline]
    pub fn take_n(&mut self, now: u64, n: u64) -> bool {
        self.refill(now);
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }

    /// Whether `n` tokens are available now, taking none.
    #[inline]
    pub fn has(&mut self, now: u64, n: u64) -> bool {
        self.refill(now);
        self.tokens >= n
    }

    /// Credits the tokens earned since `last`. Only the time turned into
    /// whole tokens is consumed, so fractions are never lost however the
    /// packets are spaced; a full bucket earns nothing.
    #[inline]
    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.last);
        if self.rate_per_s == 0 {
            self.last = now;
            return;
        }
        let earned = (elapsed as u128 * self.rate_per_s as u128 / 1_000_000_000) as u64;
        if earned == 0 {
            return;
        }
        if self.tokens.saturating_add(earned) >= self.burst {
            self.tokens = self.burst;
            self.last = now;
        } else {
            self.tokens += earned;
            // Advance by exactly the time those tokens took.
            self.last += (earned as u128 * 1_000_000_000 / self.rate_per_s as u128) as u64;
        }
    }
}

/// A VR's receive-rate ceilings in one worker (its share of `pps` and `bps`).
#[derive(Debug)]
pub(crate) struct Ceiling {
    pps: Option<TokenBucket>,
    bytes: Option<TokenBucket>,
}

impl Ceiling {
    /// The ceilings of `limits` split over `n_workers`; `None` when there are none.
    fn new(l: &Limits, n_workers: u64) -> Option<Ceiling> {
        // A 10 ms burst, and never less than one receive burst of frames.
        let pps = (l.pps > 0).then(|| {
            let rate = l.pps.div_ceil(n_workers);
            TokenBucket::with_burst(rate, (rate / 100).max(64))
        });
        let bytes = (l.bps > 0).then(|| {
            let rate = (l.bps / 8).div_ceil(n_workers);
            TokenBucket::with_burst(rate, (rate / 100).max(64 * 1518))
        });
        (pps.is_some() || bytes.is_some()).then_some(Ceiling { pps, bytes })
    }

    /// Admits a frame of `len` bytes at `now`.
    #[inline]
    pub fn admit(&mut self, now: u64, len: usize) -> bool {
        // Check both before taking from either, so a refused frame costs nothing.
        let len = len as u64;
        if !self.bytes.as_mut().is_none_or(|b| b.has(now, len))
            || !self.pps.as_mut().is_none_or(|p| p.has(now, 1))
        {
            return false;
        }
        if let Some(b) = &mut self.bytes {
            b.take_n(now, len);
        }
        if let Some(p) = &mut self.pps {
            p.take(now);
        }
        true
    }
}

/// One VR in one worker.
#[repr(C, align(64))]
pub struct Vr {
    // What a forwarded packet reads, first and together: with a thousand
    // VRs taking turns in a burst, each VR's state is cold, and every cache
    // line of it is a miss (`repr(C)` keeps this order).
    pub(crate) id: u16,
    /// Which rule lists some interface of the VR applies ([`LISTS_IN`],
    /// [`LISTS_OUT`]): the fast path looks for them only then.
    pub(crate) filtered: u8,
    pub(crate) fib4: Arc<FibSnapshot<Ipv4Addr>>,
    /// Each gateway next hop as this worker resolved it, by next-hop id
    /// ([`GatewaySlot`]): what the fast path reads instead of the shared
    /// next hops and their address. (A boxed slice, two words, so that the
    /// neighbor table's hot half fits this line too.)
    gateways: Box<[GatewaySlot]>,
    /// This worker's neighbor table for the VR: its first 32 bytes (its
    /// slots and generation) end the first line, so that a forwarded
    /// packet reads one line of its VR's here.
    pub neighbors: NeighborTable,
    pub(crate) nexthops: Arc<NextHops>,
    /// Rate ceilings, if the VR has any (boxed: one word). Bursts of one
    /// VR look once a burst; those of many VRs leave such a VR out when
    /// their VLAN lanes are built.
    pub(crate) ceiling: Option<Box<Ceiling>>,
    pub(crate) fib6: Arc<FibSnapshot<Ipv6Addr>>,
    pub(crate) limits: Limits,
    pub(crate) icmp_bucket: TokenBucket,
    pub(crate) punt_bucket: TokenBucket,
    /// The protected share of its control protocols ([`crate::protocol`]).
    pub(crate) protocol_bucket: TokenBucket,
    pub(crate) punt: VecDeque<Mbuf>,
}

impl Vr {
    /// Whether `m` is one of the VR's control protocols' frames within
    /// their protected rate (taking a token if so): it passes the limits
    /// that the VR's other traffic exceeds ([`crate::protocol`]).
    #[inline]
    pub(crate) fn protected(&mut self, m: &Mbuf, now: u64) -> bool {
        crate::protocol::control(m) && self.protocol_bucket.take(now)
    }

    /// [`Vr::protected`] for an untagged Ethernet frame from the control
    /// plane's TAP.
    #[inline]
    pub(crate) fn protected_frame(&mut self, frame: &[u8], now: u64) -> bool {
        crate::protocol::control_frame(frame) && self.protocol_bucket.take(now)
    }

    /// What next hop `id` of the VR's FIB means in this worker; `flow`
    /// gives the packet's flow hash ([`crate::ecmp`]), asked for only when
    /// `id` is a multipath group.
    #[inline]
    pub(crate) fn resolve_flow(&mut self, id: u32, flow: impl FnOnce() -> u32) -> Option<NextHop> {
        match self.resolve(id) {
            Some(NextHop::Group { base }) => self.resolve_member(base, flow()),
            other => other,
        }
    }

    /// The member of the group at `base` that bucket `hash` names, resolved
    /// (a gateway: a group never names a group).
    #[cold]
    #[inline(never)]
    pub(crate) fn resolve_member(&mut self, base: u32, hash: u32) -> Option<NextHop> {
        let member = self.nexthops.pick(base, hash)?;
        match self.resolve(member)? {
            NextHop::Group { .. } => None,
            plain => Some(plain),
        }
    }

    /// What next hop `id` means in this worker, a multipath group left as
    /// [`NextHop::Group`] for the caller to pick its member
    /// ([`Vr::resolve_member`]): the fast path's form, whose match on the
    /// answer takes the group case for one more arm. A gateway this worker
    /// already resolved is one read of its [`GatewaySlot`].
    #[inline(always)]
    pub(crate) fn resolve(&mut self, id: u32) -> Option<NextHop> {
        match self.gateways.get(id as usize)?.get() {
            Some((iface, neigh)) => Some(NextHop::Gateway { iface, neigh }),
            None => self.resolve_shared(id),
        }
    }

    /// Gateway `id` as the fast path last sent through it, if this worker
    /// has its egress view: its egress interface, neighbor slot and egress
    /// view, and the neighbor's MAC where the slot's copy of it is still
    /// true at `now`.
    #[inline(always)]
    pub(crate) fn gateway(&self, id: u32, now: u64) -> Option<Via> {
        let g = self.gateways.get(id as usize)?;
        match (g.resolved, g.egress) {
            (true, Some(egress)) => Some(Via {
                iface: g.iface,
                neigh: g.neigh,
                egress,
                mac: (g.generation == self.neighbors.generation() && now < g.until)
                    .then_some(g.mac),
                slot: Some(id),
            }),
            _ => None,
        }
    }

    /// Where the slot of gateway `id` lies: a cache line to prefetch
    /// before [`Vr::gateway`] reads it.
    #[inline(always)]
    pub(crate) fn gateway_line(&self, id: u32) -> *const u8 {
        self.gateways.as_ptr().wrapping_add(id as usize).cast()
    }

    /// The neighbor's MAC for `via` if it is usable as it is: the slot's
    /// copy where that is still true, else the neighbor entry's (marked
    /// used), which the slot then keeps for the frames after this one.
    #[inline(always)]
    pub(crate) fn via_mac(&mut self, via: &Via, now: u64) -> Option<EthernetAddress> {
        if via.mac.is_some() {
            return via.mac;
        }
        let (mac, until) = self.neighbors.usable_mac_until(via.neigh, now)?;
        if let Some(id) = via.slot {
            self.keep_mac(id, via.neigh, mac, until);
        }
        Some(mac)
    }

    /// Keeps in the slot of gateway `id`, resolved to neighbor slot
    /// `neigh`, that neighbor's MAC until `until`
    /// ([`NeighborTable::usable_mac_until`]), for [`Vr::gateway`].
    #[inline]
    fn keep_mac(&mut self, id: u32, neigh: u32, mac: EthernetAddress, until: u64) {
        let generation = self.neighbors.generation();
        if let Some(g) = self
            .gateways
            .get_mut(id as usize)
            .filter(|g| g.resolved && g.neigh == neigh)
        {
            (g.mac, g.until, g.generation) = (mac, until, generation);
        }
    }

    /// Keeps the egress view `e` of gateway `id`, resolved already
    /// ([`Vr::resolve`]), for [`Vr::gateway`].
    #[inline]
    pub(crate) fn keep_egress(&mut self, id: u32, e: Egress) {
        if let Some(g) = self.gateways.get_mut(id as usize).filter(|g| g.resolved) {
            g.egress = Some(e);
        }
    }

    /// [`Vr::resolve`] from the shared next hops, for every next hop but a
    /// gateway resolved before (whose slot this records).
    #[inline]
    fn resolve_shared(&mut self, id: u32) -> Option<NextHop> {
        // Matched by reference: the gateway's address is read only when its
        // slot is not yet resolved.
        Some(match self.nexthops.get(id as usize)? {
            RouteHop::Local => NextHop::Local,
            RouteHop::Broadcast => NextHop::Broadcast,
            RouteHop::Blackhole => NextHop::Blackhole,
            RouteHop::Unreachable => NextHop::Unreachable,
            &RouteHop::Connected { iface } => NextHop::Connected { iface },
            &RouteHop::Gateway { iface, ref addr } => {
                // A full table leaves the slot unresolved (tried again).
                let neigh = self
                    .neighbors
                    .ensure(iface, *addr, true)
                    .unwrap_or(u32::MAX);
                if let Some(g) = self.gateways.get_mut(id as usize) {
                    *g = GatewaySlot::new(iface, neigh);
                }
                NextHop::Gateway { iface, neigh }
            }
            &RouteHop::Group { base, .. } => NextHop::Group { base },
        })
    }

    /// The route of IPv4 source `src` as the FIB holds it, for a
    /// reverse-path check ([`crate::urpf`]): no neighbor entry is made.
    #[inline]
    pub(crate) fn source_route4(&self, src: Ipv4Addr) -> Option<&RouteHop> {
        self.nexthops.get(self.fib4.lookup(src)?.0 as usize)
    }

    /// [`Vr::source_route4`] for IPv6.
    #[inline]
    pub(crate) fn source_route6(&self, src: Ipv6Addr) -> Option<&RouteHop> {
        self.nexthops.get(self.fib6.lookup(src)?.0 as usize)
    }

    /// Longest-prefix match for IPv4; `flow` gives the packet's flow hash
    /// for a multipath route (addresses, protocol, ports, IPv6 flow label).
    #[inline]
    pub fn lookup4(&mut self, dst: Ipv4Addr, flow: impl FnOnce() -> u32) -> Option<NextHop> {
        let id = self.fib4.lookup(dst)?;
        self.resolve_flow(id.0, flow)
    }

    /// Longest-prefix match for IPv4, or the answer the burst's batch lookup
    /// already found for this destination.
    #[inline]
    pub(crate) fn lookup4_or(
        &mut self,
        dst: Ipv4Addr,
        route: Option<Option<NextHopId>>,
        flow: impl FnOnce() -> u32,
    ) -> Option<NextHop> {
        match route {
            Some(found) => self.resolve_flow(found?.0, flow),
            None => self.lookup4(dst, flow),
        }
    }

    /// The FIB's answers for `addrs`, in one batch: with the prefetching
    /// passes when the worker prefetches ([`Worker::set_prefetch`]), else
    /// the plain lanes.
    #[inline]
    pub(crate) fn lookup4_many(
        &self,
        addrs: &[Ipv4Addr],
        out: &mut [Option<NextHopId>],
        prefetch: Option<Prefetch>,
    ) {
        match prefetch {
            Some(prefetch) => self.fib4.lookup_batch_prefetch(addrs, out, prefetch),
            None => self.fib4.lookup_batch(addrs, out),
        }
    }

    /// [`Vr::lookup4_many`] for IPv6.
    #[inline]
    pub(crate) fn lookup6_many(
        &self,
        addrs: &[Ipv6Addr],
        out: &mut [Option<NextHopId>],
        prefetch: Option<Prefetch>,
    ) {
        match prefetch {
            Some(prefetch) => self.fib6.lookup_batch_prefetch(addrs, out, prefetch),
            None => self.fib6.lookup_batch(addrs, out),
        }
    }

    /// Longest-prefix match for IPv6; `flow` as for [`Vr::lookup4`].
    #[inline]
    pub fn lookup6(&mut self, dst: Ipv6Addr, flow: impl FnOnce() -> u32) -> Option<NextHop> {
        let id = self.fib6.lookup(dst)?;
        self.resolve_flow(id.0, flow)
    }

    /// Packets waiting on this worker's punt queue.
    pub fn punt_len(&self) -> usize {
        self.punt.len()
    }
}

/// A gateway next hop as one worker resolved it: its egress interface
/// and its neighbor slot in the worker's table, and, once the fast path
/// has sent through it, what it writes for the egress interface
/// ([`Egress`]) and the neighbor's MAC while that stays usable; or nothing
/// yet (any other next hop, or a gateway the table had no room for). One
/// 64-byte line: the one line per packet the fast path reads for its next
/// hop instead of the shared next hops, the egress interface and the
/// neighbor entry. Pinned neighbor slots never move, every slot is cleared
/// when the topology is republished, and when the VR's next hops are, a
/// slot is kept only where its id still names the same next hop
/// ([`carry_slots`]), so what it holds stays true while it is held; the
/// MAC, while the neighbor
/// table's generation is the one it was copied in and its deadline has not
/// passed ([`NeighborTable::usable_mac_until`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct GatewaySlot {
    /// Until when `mac` may be used (ns; 0: no MAC kept).
    until: u64,
    neigh: u32,
    /// The neighbor table's generation `mac` was copied in.
    generation: u32,
    iface: u16,
    resolved: bool,
    mac: EthernetAddress,
    egress: Option<Egress>,
}

impl GatewaySlot {
    /// Not resolved.
    pub const NONE: GatewaySlot = GatewaySlot {
        until: 0,
        neigh: u32::MAX,
        generation: 0,
        iface: 0,
        resolved: false,
        mac: EthernetAddress([0; 6]),
        egress: None,
    };

    /// Interface `iface` and neighbor slot `neigh` (`u32::MAX`: none,
    /// which is left unresolved).
    fn new(iface: u16, neigh: u32) -> GatewaySlot {
        GatewaySlot {
            neigh,
            iface,
            resolved: neigh != u32::MAX,
            ..GatewaySlot::NONE
        }
    }

    /// The interface and neighbor slot, if resolved.
    #[inline(always)]
    fn get(&self) -> Option<(u16, u32)> {
        self.resolved.then_some((self.iface, self.neigh))
    }
}

/// The gateway slots for next hops `new`: each id that names the same
/// next hop in `old` keeps what its slot learned (a route added, or one
/// let go elsewhere in the table, costs the other gateways nothing); an id
/// new, or reused for another next hop, starts unresolved.
fn carry_slots(old: &NextHops, new: &NextHops, slots: &[GatewaySlot]) -> Box<[GatewaySlot]> {
    let mut out = vec![GatewaySlot::NONE; new.len()].into_boxed_slice();
    for (i, slot) in out.iter_mut().enumerate() {
        if let (Some(a), Some(b), Some(kept)) = (old.get(i), new.get(i), slots.get(i)) {
            if a == b {
                *slot = *kept;
            }
        }
    }
    out
}

/// Where the fast path sends a frame: a gateway as it found it in its
/// slot ([`Vr::gateway`]), or a next hop it resolved itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Via {
    /// The egress interface.
    pub iface: u16,
    /// The neighbor slot.
    pub neigh: u32,
    /// What the fast path writes for the egress interface.
    pub egress: Egress,
    /// The neighbor's MAC, where the slot's copy is still true: then the
    /// neighbor entry need not be read.
    pub mac: Option<EthernetAddress>,
    /// The next-hop id of the gateway slot (a multipath group's member)
    /// that keeps the MAC once read; `None` for an attached host.
    pub slot: Option<u32>,
}

impl Via {
    /// A next hop the fast path resolved itself, no MAC kept yet.
    pub fn new(iface: u16, neigh: u32, egress: Egress, slot: Option<u32>) -> Via {
        Via {
            iface,
            neigh,
            egress,
            mac: None,
            slot,
        }
    }
}

/// Per-worker counters: one set per port and per interface.
#[derive(Debug)]
pub struct WorkerCounters {
    /// Per port.
    pub ports: Vec<CounterCells>,
    /// Per interface (global index).
    pub ifaces: Vec<CounterCells>,
    /// Busy fraction of the worker's last 1 ms round, in thousandths (only
    /// with a clock; see [`Worker::set_clock`]).
    pub load_permille: crate::counters::Cell,
    /// Turns of the worker's driver loop so far: a watchdog that sees it
    /// stop moving knows the worker is stuck.
    pub heartbeat: crate::counters::Cell,
    /// Per VR (its index): nanoseconds of this worker's time charged to the
    /// VR, as the fair share measures it (its frames through the stages and
    /// the fast path, and its part of the driver's receive and send),
    /// published every 100 ms (the worker's poll). Room is made at start
    /// for every VR there is and every one that run-time changes can add
    /// with an interface; one past the end (only a VR created empty, past
    /// that headroom, and given an interface later) is not measured
    /// ([`crate::sum_vr_busy_ns`] says `None`).
    pub vr_busy_ns: Vec<crate::counters::Cell>,
    /// 1 once the worker has a clock ([`Worker::set_clock`]): without one
    /// `vr_busy_ns` measures nothing.
    pub clocked: crate::counters::Cell,
    /// The worker's index among its peers: its row of each rule list's
    /// counters ([`crate::filter::Filter::hits`]).
    pub index: usize,
}

/// One worker's whole state.
pub struct Worker {
    tables: Arc<Tables>,
    /// The topology this worker runs on (refreshed with the tables).
    pub(crate) shared: Arc<Shared>,
    pub(crate) vrs: Vec<Vr>,
    n_workers: usize,
    pub(crate) pool: MbufPool,
    pub(crate) counters: Arc<WorkerCounters>,
    pub(crate) probes: Vec<Probe>,
    pub(crate) next_poll: u64,
    seen_generation: u64,
    /// VRs whose next hops changed since the last events were applied:
    /// their gateways are solicited then ([`Worker::solicit_gateways`]).
    pub(crate) solicit: Vec<u16>,
    /// What other workers learned (bounded: what does not fit is lost and
    /// learned again by ARP/ND).
    pub(crate) inbox: Receiver<Event>,
    /// The control side's static neighbors, added and removed (unbounded:
    /// none is lost). Sent before the generation that publishes them moves,
    /// so read only once it has ([`Worker::refresh`] sets
    /// `control_pending`): an empty queue costs a burst nothing.
    pub(crate) control: Receiver<Event>,
    pub(crate) control_pending: bool,
    pub(crate) peers: Vec<SyncSender<Event>>,
    /// Events that did not fit a peer's inbox (counted, not retried).
    pub events_lost: u64,
    /// VRs with something on their punt queue, so draining visits only those.
    pub(crate) punt_dirty: Vec<u16>,
    /// Per-VR cost accounting and fair-share budgets.
    pub(crate) fair: Fair,
    /// A burst at least this long means its queue had more waiting (0: never).
    pub(crate) full_burst: usize,
    /// Frames in the receive burst being processed (a burst split by
    /// interface is full or not as a whole).
    pub(crate) burst_len: usize,
    /// A burst split by (port, VLAN): each frame's part, the parts' keys
    /// and VRs, and the parts (reused; see `Worker::split_burst`).
    pub(crate) part_of: Vec<u8>,
    pub(crate) part_keys: Vec<u32>,
    pub(crate) part_vrs: Vec<Option<u16>>,
    pub(crate) parts: Vec<Vec<Mbuf>>,
    /// One mixed burst, demuxed (reused; never shrinks).
    pub(crate) staged: Vec<Staged>,
    /// A burst's IPv4 and IPv6 destinations (reused). In a mixed burst,
    /// `at4`/`at6` say whose they are (positions in `staged`), and
    /// `routes` holds each staged frame's FIB answer (`answers`: one
    /// family's, before they are put in place).
    pub(crate) dsts: Vec<Ipv4Addr>,
    pub(crate) dsts6: Vec<Ipv6Addr>,
    pub(crate) at4: Vec<usize>,
    pub(crate) at6: Vec<usize>,
    pub(crate) routes: Vec<Option<NextHopId>>,
    /// A plain burst's verdicts of its interface's input list, judged
    /// before the fast path (reused).
    pub(crate) verdicts: Vec<Verdict>,
    pub(crate) answers: Vec<Option<NextHopId>>,
    /// The VR of each frame a mixed burst sent by the fast path, charged
    /// its share of their cost at the end of the burst (reused).
    pub(crate) fast_vrs: Vec<u16>,
    /// Each frame's VR and reverse-path check in a burst of many VRs
    /// (reused; see `Worker::many_burst`).
    pub(crate) lanes: Vec<Lane>,
    /// Each port's VLANs for bursts of many VRs ([`VlanLane`]).
    pub(crate) vlans: Vec<Option<Box<[VlanLane; 4096]>>>,
    /// Plain IPv4 and IPv6 forwards take [`crate::fast`] (the default); off, every
    /// frame runs the full stages.
    pub(crate) fast_path: bool,
    /// The CPU's prefetch for the FIB's batch lookups, and from how many
    /// IPv4 routes in all the VRs' tables together it is used
    /// ([`Worker::set_prefetch`]).
    pub(crate) prefetch_with: Option<(Prefetch, usize)>,
    /// The prefetch while the tables hold that many routes, else `None`:
    /// what the lookups use, decided whenever the tables change.
    pub(crate) prefetch: Option<Prefetch>,
    /// Packet traces armed on this worker's tables ([`crate::trace`]).
    pub(crate) trace: crate::trace::WorkerTrace,
}

/// A frame's VR and its interface's reverse-path check, as the demux of
/// a burst of many VRs found them (`Worker::many_burst`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Lane {
    pub vr: u16,
    pub urpf: crate::spec::Urpf,
}

/// One VLAN of a port as a burst of many VRs demuxes it
/// (`Worker::many_burst`): the interface there, its VR and reverse-path
/// check, and its MAC as the low 48 bits of a word, so that a frame's
/// demux is one read of this table and one comparison. Where the pass does
/// not apply (no interface, a QinQ TPID, a VR with a rate ceiling) the
/// word is `u64::MAX`, which no frame's 48-bit MAC equals.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
pub(crate) struct VlanLane {
    pub mac: u64,
    pub iface: u16,
    pub lane: Lane,
}

impl VlanLane {
    const NONE: VlanLane = VlanLane {
        mac: u64::MAX,
        iface: 0,
        lane: Lane {
            vr: 0,
            urpf: crate::spec::Urpf::Off,
        },
    };
}

/// Each port's VLANs as a burst of many VRs demuxes them, indexed by VLAN
/// ID; `None` for a port with no 802.1Q interface, which the pass never
/// takes. Built from the topology and the VRs' ceilings: in a new worker
/// and whenever it adopts a topology.
fn vlan_lanes(topo: &Shared, vrs: &[Vr]) -> Vec<Option<Box<[VlanLane; 4096]>>> {
    topo.ports
        .iter()
        .map(|p| {
            let tagged = p.demux[1..].iter().any(|&i| {
                topo.ifaces
                    .get(usize::from(i))
                    .is_some_and(|f| f.tpid == crate::spec::Tpid::Dot1q)
            });
            if !tagged {
                return None;
            }
            let mut t = Box::new([VlanLane::NONE; 4096]);
            for (vid, (slot, &i)) in t.iter_mut().zip(p.demux.iter()).enumerate() {
                let Some(f) = topo.ifaces.get(usize::from(i)) else {
                    continue;
                };
                let ceiling = vrs
                    .get(usize::from(f.vr))
                    .is_none_or(|v| v.ceiling.is_some());
                if vid == 0 || f.tpid != crate::spec::Tpid::Dot1q || ceiling {
                    continue;
                }
                let [m0, m1, m2, m3, m4, m5] = f.mac.0;
                *slot = VlanLane {
                    mac: u64::from_le_bytes([m0, m1, m2, m3, m4, m5, 0, 0]),
                    iface: i,
                    lane: Lane {
                        vr: f.vr,
                        urpf: f.urpf,
                    },
                };
            }
            Some(t)
        })
        .collect()
}

/// A demuxed frame of a mixed burst, waiting for the burst's FIB batch.
pub(crate) struct Staged {
    /// Its VR.
    pub vr: u16,
    /// Its interface's reverse-path check.
    pub urpf: crate::spec::Urpf,
    pub next: crate::demux::Next,
    /// Taken when the frame is dispatched or dropped.
    pub m: Option<Mbuf>,
    /// IPv4 or IPv6 with a whole header: its destination is in the burst's
    /// batch lookups (`Worker::dsts`/`dsts6`, answer in `Worker::routes`).
    pub looked_up: bool,
}

impl Worker {
    /// Creates `n` workers reading `control`'s tables, wired to each other
    /// and to `control` for neighbor events.
    pub fn create(writer: &mut TableWriter, n: usize) -> Vec<Worker> {
        let n = n.max(1);
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..n).map(|_| std::sync::mpsc::sync_channel(4096)).unzip();
        // The control side's neighbor facts come on a channel of their own,
        // unbounded: what a tenant's ARP fills the peers' inboxes with
        // cannot crowd out another VR's static neighbor (the operator's
        // changes, at the pace of its commits).
        let (control, from_control): (Vec<_>, Vec<_>) =
            (0..n).map(|_| std::sync::mpsc::channel()).unzip();
        for s in control {
            writer.attach_worker(s);
        }
        // Rule lists built before the workers existed get their rows.
        writer.size_filters();
        receivers
            .into_iter()
            .zip(from_control)
            .enumerate()
            .map(|(k, inboxes)| {
                let peers = senders
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != k)
                    .map(|(_, s)| s.clone())
                    .collect();
                Worker::new(writer, (k, n), inboxes, peers)
            })
            .collect()
    }

    fn new(
        writer: &TableWriter,
        (index, n_workers): (usize, usize),
        (inbox, control): (Receiver<Event>, Receiver<Event>),
        peers: Vec<SyncSender<Event>>,
    ) -> Worker {
        let tables = writer.tables().clone();
        let shared = tables.load();
        let vrs = (0..shared.vrs.len())
            .map(|i| {
                let mut v = vr_state(&shared, i, n_workers);
                for &(iface, addr, mac) in writer.static_neighbors(i) {
                    v.neighbors.set_static(iface, addr, mac);
                }
                v
            })
            .collect();
        // Interfaces created at run time need counters too: room for them
        // is made now, so readers never see this worker's counters move.
        let counters = Arc::new(WorkerCounters {
            ports: (0..shared.ports.len())
                .map(|_| CounterCells::default())
                .collect(),
            ifaces: (0..tables.iface_capacity.max(shared.ifaces.len()))
                .map(|_| CounterCells::default())
                .collect(),
            load_permille: crate::counters::Cell::default(),
            heartbeat: crate::counters::Cell::default(),
            // Room for every VR a run-time change can add with an interface.
            vr_busy_ns: (0..shared.vrs.len() + tables.iface_capacity)
                .map(|_| crate::counters::Cell::default())
                .collect(),
            clocked: crate::counters::Cell::default(),
            index,
        });
        let (weights, vr_ports) = fair_inputs(&shared);
        let fair = Fair::new(&weights, &vr_ports, shared.ports.len());
        let shared_vr_count = shared.vrs.len();
        let trace = crate::trace::WorkerTrace::new(tables.trace.clone());
        let mut w = Worker {
            tables,
            shared,
            vrs,
            n_workers,
            pool: MbufPool::new(4096),
            counters,
            probes: Vec::with_capacity(1024),
            next_poll: 0,
            seen_generation: u64::MAX,
            solicit: Vec::new(),
            inbox,
            control,
            control_pending: true,
            peers,
            events_lost: 0,
            punt_dirty: Vec::with_capacity(shared_vr_count),
            fair,
            full_burst: 0,
            burst_len: 0,
            part_of: Vec::with_capacity(256),
            part_keys: Vec::with_capacity(64),
            part_vrs: Vec::with_capacity(64),
            parts: Vec::new(),
            staged: Vec::with_capacity(256),
            dsts: Vec::with_capacity(256),
            dsts6: Vec::with_capacity(256),
            at4: Vec::with_capacity(256),
            at6: Vec::with_capacity(256),
            routes: Vec::with_capacity(256),
            verdicts: Vec::with_capacity(256),
            answers: Vec::with_capacity(256),
            fast_vrs: Vec::with_capacity(256),
            lanes: Vec::with_capacity(256),
            vlans: Vec::new(),
            fast_path: true,
            prefetch_with: None,
            prefetch: None,
            trace,
        };
        w.vlans = vlan_lanes(&w.shared, &w.vrs);
        w.refresh();
        w
    }

    /// Picks up newly published tables and neighbor events. Called before
    /// every burst: one atomic load when nothing changed.
    #[inline]
    pub(crate) fn refresh(&mut self) {
        let g = self.tables.generation.load(Ordering::Acquire);
        if g != self.seen_generation {
            self.seen_generation = g;
            self.control_pending = true;
            let topo = self.tables.load();
            if !Arc::ptr_eq(&topo, &self.shared) {
                self.adopt(topo);
            }
            for (i, (vr, s)) in self.vrs.iter_mut().zip(self.shared.vrs.iter()).enumerate() {
                vr.filtered = filtered(&self.shared, i);
                // FIB first, then next hops: next hops are published before the
                // FIBs that name them, so these next hops cover this FIB.
                vr.fib4 = s.fib4.load_full();
                vr.fib6 = s.fib6.load_full();
                let nh = s.nexthops.load_full();
                if !Arc::ptr_eq(&nh, &vr.nexthops) {
                    vr.gateways = carry_slots(&vr.nexthops, &nh, &vr.gateways);
                    vr.nexthops = nh;
                    self.solicit.push(i as u16);
                }
            }
            self.choose_prefetch();
        }
    }

    /// Prefetches in every VR's batch lookups when the tables (both
    /// families; until 2026-12-07 IPv4's alone, so a large IPv6 table was
    /// never prefetched) hold at least the routes given to
    /// [`Worker::set_prefetch`] together. What
    /// matters is whether the tables a worker reads still fit the caches:
    /// 50 tables of 20,000 routes miss them as one of 1M routes does, which
    /// a threshold per table would never prefetch (docs/benchmarks.md,
    /// "Prefetch").
    ///
    /// Each VR also counts as [`PREFETCH_ROUTES_PER_VR`] routes: its own
    /// lines (its VR line, its tables' snapshots, a flat table's bitmap and
    /// entries) are read by every lookup, so thousands of VRs of a route or
    /// two miss the caches as a large table does.
    fn choose_prefetch(&mut self) {
        let routes: usize = self
            .vrs
            .iter()
            .map(|vr| vr.fib4.len() + vr.fib6.len())
            .sum();
        let weight = routes + self.vrs.len() * PREFETCH_ROUTES_PER_VR;
        self.prefetch = self
            .prefetch_with
            .and_then(|(prefetch, min_routes)| (weight >= min_routes).then_some(prefetch));
    }

    /// Switches to a new topology: state for VRs created since, and the
    /// buffers of deleted ones back to the pool. Other VRs keep their
    /// neighbors, queues and budgets untouched.
    #[cold]
    fn adopt(&mut self, topo: Arc<Shared>) {
        for i in 0..topo.vrs.len() {
            if i >= self.vrs.len() {
                self.vrs.push(vr_state(&topo, i, self.n_workers));
            } else if !topo.vrs[i].alive && self.shared.vr_alive(VrId::new(i)) {
                let dead = std::mem::replace(&mut self.vrs[i], vr_state(&topo, i, self.n_workers));
                let Vr {
                    mut neighbors,
                    punt,
                    ..
                } = dead;
                for m in punt {
                    self.pool.put(m);
                }
                neighbors.clear(|m| self.pool.put(m));
            }
        }
        // Interfaces may have changed (MTU, tags, MAC): the egress views
        // kept with resolved gateways are dropped, and rebuilt as used.
        for vr in &mut self.vrs {
            vr.gateways.fill(GatewaySlot::NONE);
        }
        let (weights, vr_ports) = fair_inputs(&topo);
        self.fair.set_vrs(&weights, &vr_ports);
        self.vlans = vlan_lanes(&topo, &self.vrs);
        self.shared = topo;
    }

    /// Tells every other worker what this one learned.
    pub(crate) fn broadcast(peers: &[SyncSender<Event>], lost: &mut u64, ev: Event) {
        for p in peers {
            if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = p.try_send(ev) {
                *lost += 1;
            }
        }
    }

    /// Measures each VR's cost with `clock` (`ticks_per_second` of it) and,
    /// when the worker is saturated, holds every VR to its weighted share
    /// (see [`crate::fair`]). A receive burst of `full_burst` frames or more
    /// tells the worker its queue had more waiting.
    pub fn set_clock(&mut self, clock: Clock, ticks_per_second: u64, full_burst: usize) {
        self.fair.set_clock(clock, ticks_per_second);
        self.full_burst = full_burst;
        self.counters.clocked.set(1);
    }

    /// Should the driver loop read port `port` now? False while every VR
    /// on it has used its share of this saturated worker.
    #[inline]
    pub fn port_wanted(&self, port: usize) -> bool {
        self.fair.port_wanted(port)
    }

    /// Lets plain IPv4 and IPv6 forwards take the fast path (on by default), or sends
    /// every frame through the full stages: for A/B benchmarks and for tests
    /// that compare the two. Either way the output is the same.
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast_path = on;
    }

    /// Hands the worker the CPU's prefetch (`vrhost_io::prefetch`): while
    /// the VRs' tables (both families) hold `min_routes` routes or more together,
    /// each VR counting as [`PREFETCH_ROUTES_PER_VR`] more
    /// ([`vrhost_fib::PREFETCH_MIN_ROUTES`] by default, 0 for always), every
    /// batch lookup then prefetches each pass's direct entries and leaf
    /// blocks ([`FibSnapshot::lookup_batch_prefetch`]). Without it they
    /// never do; the answers are the same either way.
    pub fn set_prefetch(&mut self, prefetch: Prefetch, min_routes: usize) {
        self.prefetch_with = Some((prefetch, min_routes));
        self.choose_prefetch();
    }

    /// Enforce fair shares when saturated (`true`, the default once a clock
    /// is set), or only measure each VR's cost (`false`).
    pub fn set_fair_share(&mut self, on: bool) {
        self.fair.set_enforce(on);
    }

    /// The ports still wanted have no work: refill every VR's budget in
    /// proportion, so the spare capacity goes to the busy VRs by weight.
    pub fn replenish_shares(&mut self) {
        self.fair.replenish();
    }

    /// The driver began to read the burst that [`Worker::process_burst`]
    /// gets next at `start`, a reading of the worker's clock
    /// ([`Worker::fair`]`.now()`): its VRs are charged for the reading, by
    /// bytes ([`Fair::note_receive`]).
    #[inline]
    pub fn note_receive(&mut self, start: u64) {
        self.fair.note_receive(start);
    }

    /// A turn of the driver loop ended at `now` (a reading of the worker's
    /// clock, [`Fair::now`]); if it `sent` frames, what sending took, from
    /// the end of the last call into the worker, is charged to the VRs
    /// whose frames the turn forwarded, by bytes ([`Fair::charge_send`]).
    pub fn end_turn(&mut self, now: u64, sent: bool) {
        self.fair.charge_send(now, sent);
    }

    /// Fair-share state, for reports and tests.
    pub fn fair(&self) -> &Fair {
        &self.fair
    }

    /// The buffer pool drivers take receive buffers from and return sent ones to.
    pub fn pool(&mut self) -> &mut MbufPool {
        &mut self.pool
    }

    /// The tables this worker reads.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// This worker's counters, readable from any thread.
    pub fn counters(&self) -> Arc<WorkerCounters> {
        self.counters.clone()
    }

    /// This worker's state of VR `vr`.
    pub fn vr(&self, vr: VrId) -> &Vr {
        &self.vrs[vr.index()]
    }

    /// Hands every packet punted to VR `vr` by this worker to `f`, then recycles it.
    pub fn drain_punted(&mut self, vr: VrId, mut f: impl FnMut(&Mbuf)) {
        let vr = vr.index();
        while let Some(m) = self.vrs[vr].punt.pop_front() {
            f(&m);
            self.pool.put(m);
        }
        self.punt_dirty.retain(|&v| v as usize != vr);
    }

    /// Hands every punted packet of every VR to `f(vr, packet)`, visiting only
    /// the VRs that punted something, then recycles them.
    pub fn drain_all_punted(&mut self, mut f: impl FnMut(usize, &Mbuf)) {
        // Keep the list's allocation: taking it would make the next punt allocate.
        let mut dirty = std::mem::take(&mut self.punt_dirty);
        for &vr in &dirty {
            while let Some(m) = self.vrs[vr as usize].punt.pop_front() {
                f(vr as usize, &m);
                self.pool.put(m);
            }
        }
        dirty.clear();
        self.punt_dirty = dirty;
    }

    /// Packets held by neighbor resolution, all VRs.
    pub fn held(&self) -> usize {
        self.vrs.iter().map(|v| v.neighbors.held()).sum()
    }

    /// Packets on punt queues, all VRs.
    pub fn punt_queued(&self) -> usize {
        self.vrs.iter().map(|v| v.punt.len()).sum()
    }
}

/// A worker's fresh state for VR `i` of `topo`: empty neighbor table and
/// queues, its limits split over `n_workers`.
fn vr_state(topo: &Shared, i: usize, n_workers: usize) -> Vr {
    let s = &topo.vrs[i];
    let l = s.limits;
    let n = n_workers.max(1) as u32;
    let nexthops = s.nexthops.load_full();
    Vr {
        id: i as u16,
        fib4: s.fib4.load_full(),
        fib6: s.fib6.load_full(),
        gateways: vec![GatewaySlot::NONE; nexthops.len()].into_boxed_slice(),
        nexthops,
        neighbors: NeighborTable::new(
            l.max_neighbors as usize,
            (l.arp_hold as usize).min(HOLD_MAX),
            l.neighbor_timeout_ms.saturating_mul(1_000_000),
        ),
        limits: l,
        icmp_bucket: TokenBucket::new(l.icmp_rate.div_ceil(n)),
        punt_bucket: TokenBucket::new(l.punt_rate.div_ceil(n)),
        protocol_bucket: TokenBucket::new(l.protocol_rate.div_ceil(n)),
        ceiling: Ceiling::new(&l, u64::from(n)).map(Box::new),
        // Grows on first use, up to `punt_queue`; idle VRs stay small.
        punt: VecDeque::new(),
        filtered: filtered(topo, i),
    }
}

/// What one VR counts as, in routes, when a worker chooses to prefetch
/// ([`Worker::set_prefetch`]): with the default threshold of 100,000, 2,000
/// VRs turn it on whatever their tables hold. Measured (Intel Xeon guest,
/// 2 MiB L2 a core, `vrhost bench --vrs N --routes-per-vr 1`, prefetch off
/// against on, two runs each): 1,500 VRs 23.88/23.65, 23.91/23.09 Mpps;
/// 2,000 21.16/22.26, 21.92/22.54; 3,000 16.28/19.49, 16.17/19.20; 5,000
/// 13.36/16.95, 13.67/16.03 (docs/benchmarks.md, "Prefetch").
pub const PREFETCH_ROUTES_PER_VR: usize = 50;

/// [`Vr::filtered`]: some interface of the VR applies a list to what
/// enters it.
pub(crate) const LISTS_IN: u8 = 1;
/// [`Vr::filtered`]: some interface of the VR applies a list to what it
/// sends.
pub(crate) const LISTS_OUT: u8 = 2;

/// Which rule lists the interfaces of VR `i` apply ([`Vr::filtered`]).
fn filtered(topo: &Shared, i: usize) -> u8 {
    topo.vrs[i]
        .ifaces
        .iter()
        .filter_map(|g| topo.ifaces.get(g.index()))
        .fold(0, |lists, f| {
            lists
                | if f.filter_in.is_some() { LISTS_IN } else { 0 }
                | if f.filter_out.is_some() { LISTS_OUT } else { 0 }
        })
}

/// Weights and ports of every VR, for [`Fair`] (deleted VRs: no ports).
fn fair_inputs(topo: &Shared) -> (Vec<u32>, Vec<Vec<u16>>) {
    let weights = topo.vrs.iter().map(|v| v.limits.weight).collect();
    let ports = topo
        .vrs
        .iter()
        .map(|v| {
            v.ifaces
                .iter()
                .map(|&i| topo.ifaces[i.index()].port)
                .collect()
        })
        .collect();
    (weights, ports)
}

#[cfg(test)]
mod layout {
    use core::mem::{align_of, offset_of, size_of};

    use super::Vr;
    use crate::iface::Iface;
    use crate::neighbor::Neighbor;

    /// What a forwarded packet reads of its VR, its interfaces and its
    /// neighbor stays in one cache line of each (two of the VR): with many
    /// VRs taking turns, each line is a miss.
    #[test]
    fn hot_fields_share_a_line() {
        assert_eq!(align_of::<Iface>(), 64);
        assert!(offset_of!(Iface, filter_out) + size_of::<usize>() <= 64);
        assert_eq!(align_of::<Vr>(), 64);
        assert!(offset_of!(Vr, gateways) + 2 * size_of::<usize>() <= 64);
        // The neighbor table's slots (a `Vec`) and generation
        // ([`NeighborTable`]'s first 32 bytes, its own test says).
        assert!(offset_of!(Vr, neighbors) + 32 <= 64);
        assert_eq!(align_of::<Neighbor>(), 32);
        // A resolved gateway with its egress view and its neighbor's MAC:
        // one 64-byte slot, one line.
        assert_eq!(size_of::<super::GatewaySlot>(), 64);
        assert_eq!(align_of::<super::GatewaySlot>(), 64);
        assert!(offset_of!(Neighbor, used) + size_of::<u64>() <= 32);
    }
}
