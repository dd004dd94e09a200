//! The per-burst loop: every frame runs to completion through the stages.
//!
//! A burst takes one of three ways in. Most bursts are plain: IPv4, or IPv6,
//! from one port and one VLAN (or none) to the MAC of the interface there,
//! one VR with no rate ceiling. Those skip per-frame demux and staging
//! ([`Worker::plain_burst`]). A burst of a few VRs with many frames each is
//! split by (port, VLAN) and each part run as a burst of its own
//! ([`Worker::split_burst`]). Any other burst is demuxed frame by frame and
//! run frame by frame in arrival order, whatever VRs its frames belong to.
//!
//! ```text
//!  plain burst: one MAC/EtherType test per frame ─▶ (with a clock: admit, charge)
//!    ─▶ one FIB batch ─▶ fast::v4 / fast::v6 (the common forward) ─▶ output
//!                                │ anything else
//!                                └─▶ ipv4_input / ipv6_input ... (below)
//!
//!  any burst: demux ─▶ rate ceilings ─▶ one IPv4 FIB batch, each frame in its own VR's table
//!    │   ─▶ per frame: (with a clock: admit by its VR's fair share)
//!    │       ─▶ fast::v4 / fast::v6 (the common forward) ─▶ output
//!    │           │ anything else (timed and charged to its VR, with a clock)
//!    └────┬─ ARP ───────────────────────────────▶ arp_input (answer / learn)
//!         ├─ IPv4 ─▶ ipv4_input ─┬─ Forward ─▶ ip_forward::v4 ─▶ (fragment) ─▶ output
//!         │                      ├─ Local ───▶ local::v4 (echo / punt)
//!         │                      ├─ Punt ────▶ VR punt queue
//!         │                      └─ Icmp ────▶ icmp_error::send_v4
//!         └─ IPv6 ─▶ ipv6_input ─┬─ Forward ─▶ ip_forward::v6 ─▶ output
//!                                ├─ Local ───▶ local::v6 (echo / NDP / punt)
//!                                └─ Icmp ────▶ icmp_error::send_v6
//! ```

use std::net::{Ipv4Addr, Ipv6Addr};

use vrhost_fib::{lookup_batch_each, FibAddr, FibSnapshot, NextHopId, Prefetch};

use crate::demux;
use crate::drop_reason::DropReason;
use crate::fast;
use crate::filter::{Filter, Verdict};
use crate::iface::NO_IFACE;
use crate::ip_forward;
use crate::ipv4_input;
use crate::ipv6_input;
use crate::local;
use crate::mbuf::Mbuf;
use crate::neighbor::Event;
use crate::output::Ctx;
use crate::spec::{IfaceId, Urpf};
use crate::tables::RouteHop;
use crate::worker::{Lane, Staged, TxBatch, VlanLane, Vr, Worker, LISTS_IN};
use crate::{arp_input, icmp_error, tap};

/// A [`Ctx`] over a worker's fields, borrowed field by field so the VRs stay
/// free; `$peers` are the workers to tell what this one learns.
macro_rules! ctx {
    ($w:ident, $now:expr, $tx:expr, $peers:expr) => {
        Ctx {
            now: $now,
            ports: &$w.shared.ports,
            ifaces: &$w.shared.ifaces,
            pool: &mut $w.pool,
            counters: &$w.counters,
            tx: $tx,
            peers: $peers,
            events_lost: &mut $w.events_lost,
            punt_dirty: &mut $w.punt_dirty,
            tally: crate::output::Tally::default(),
        }
    };
}

/// Bursts shorter than this are never split by interface
/// ([`Worker::split_burst`]).
const SPLIT_MIN_FRAMES: usize = 8;
/// A burst is split by interface only if its parts average at least this
/// many frames: below it, what a part costs as a burst of its own (its
/// set-up, its FIB batch, its counters, its fair-share admission) is more
/// than what it saves over the frame-by-frame path.
const SPLIT_MIN_RUN: usize = 4;

/// The part of a burst a frame goes to: its port, and its VLAN (or none).
/// Frames too short to tell land somewhere; their part's demux refuses them.
#[inline(always)]
fn part_key(m: &Mbuf) -> u32 {
    let tag = match m.data().get(12..16) {
        Some(&[0x81, 0x00, hi, lo]) => 0x1_0000 | u32::from(u16::from_be_bytes([hi, lo]) & 0x0fff),
        _ => 0,
    };
    u32::from(m.port) << 17 | tag
}

/// How often neighbor timers run at most, in nanoseconds.
const POLL_INTERVAL_NS: u64 = 100_000_000;

impl Worker {
    /// Processes received frames (each with `port` set), queuing what leaves
    /// on `tx`. `now` is the caller's clock in nanoseconds; it only needs to
    /// be monotonic. Published tables and neighbor events are picked up
    /// first; timers run from here, at most every 100 ms.
    pub fn process_burst(&mut self, rx: &mut Vec<Mbuf>, now: u64, tx: &mut TxBatch) {
        self.refresh();
        self.apply_events(now, tx);
        self.burst_len = rx.len();
        // A traced VR's frames leave the burst here, one by one through
        // the full stages (`crate::traced`); nothing else changes.
        if self.trace.armed() {
            self.trace_frames(rx, now, tx);
        }
        if !self.plain_burst(rx, now, tx)
            && !self.many_burst(rx, now, tx)
            && !self.split_burst(rx, now, tx)
        {
            self.mixed_burst(rx, now, tx);
        }
        if now >= self.next_poll {
            self.poll(now, tx);
        }
        // A receive that no way in charged (every frame traced) is not
        // carried to the next burst.
        self.fair.take_receive_start();
        let t = self.fair.now();
        self.fair.end_call(t, false);
        self.counters.load_permille.set(self.fair.load_permille);
    }

    /// The common burst, in three tight passes: every frame is IPv4, or
    /// every frame IPv6, from one port and one VLAN (or none), addressed to
    /// the MAC of that port's interface there, whose VR has no rate
    /// ceiling. Then demux is one comparison per frame (two with a tag),
    /// the receive counters are written once, the whole burst is one FIB
    /// batch, and each frame takes the fast path or, refused there, the
    /// full stages, in arrival order (the fast path's frames up to the
    /// first refused one are queued together). Returns false for any other
    /// burst, which [`Worker::mixed_burst`] then demuxes afresh.
    fn plain_burst(&mut self, rx: &mut Vec<Mbuf>, now: u64, tx: &mut TxBatch) -> bool {
        let Some(first) = rx.first() else {
            return false;
        };
        // The first frame's tags, if any, name the burst's VLAN (or QinQ
        // pair), and its EtherType the burst's family.
        let (tag, ethertype) = match first.data().get(12..22) {
            Some(&[0x81, 0x00, hi, lo, e0, e1, ..]) if [e0, e1] != [0x81, 0x00] => {
                (Tag::One(u16::from_be_bytes([hi, lo]) & 0x0fff), [e0, e1])
            }
            Some(&[t0, t1, o0, o1, 0x81, 0x00, i0, i1, e0, e1])
                if [t0, t1] == [0x88, 0xa8] || [t0, t1] == [0x81, 0x00] =>
            {
                (
                    Tag::Two([t0, t1, o0 & 0x0f, o1, 0x81, 0x00, i0 & 0x0f, i1]),
                    [e0, e1],
                )
            }
            Some(&[0x81, 0x00, ..] | &[0x88, 0xa8, ..]) => return false,
            Some(&[e0, e1, ..]) => (Tag::None, [e0, e1]),
            // Shorter than 22 bytes: the full demux judges it.
            _ => return false,
        };
        // One copy of the passes for each family and tagging, each with
        // its header offsets constant (QinQ IPv6, whose header ends past
        // the 58 bytes the passes read, is demuxed frame by frame).
        let v6 = ethertype == Ipv6Addr::ETHERTYPE;
        let mut dsts4 = std::mem::take(&mut self.dsts);
        let mut dsts6 = std::mem::take(&mut self.dsts6);
        let plain = match (v6, tag) {
            (false, Tag::None) => self.plain_family::<Ipv4Addr, 14>(rx, now, tx, tag, &mut dsts4),
            (false, Tag::One(_)) => self.plain_family::<Ipv4Addr, 18>(rx, now, tx, tag, &mut dsts4),
            (false, Tag::Two(_)) => self.plain_family::<Ipv4Addr, 22>(rx, now, tx, tag, &mut dsts4),
            (true, Tag::None) => self.plain_family::<Ipv6Addr, 14>(rx, now, tx, tag, &mut dsts6),
            (true, Tag::One(_)) => self.plain_family::<Ipv6Addr, 18>(rx, now, tx, tag, &mut dsts6),
            (true, Tag::Two(_)) => false,
        };
        (self.dsts, self.dsts6) = (dsts4, dsts6);
        plain
    }

    /// [`Worker::plain_burst`] for the family of `A`, untagged (`L2` 14)
    /// or in VLAN `vid` (`L2` 18), as the first frame named them; `dsts`
    /// holds the destinations (reused).
    #[inline(always)]
    fn plain_family<A: Family, const L2: usize>(
        &mut self,
        rx: &mut Vec<Mbuf>,
        now: u64,
        tx: &mut TxBatch,
        tag: Tag,
        dsts: &mut Vec<A>,
    ) -> bool {
        let port = match rx.first() {
            Some(m) => m.port,
            None => return false,
        };
        let Some(p) = self.shared.ports.get(usize::from(port)) else {
            return false;
        };
        let found = match tag {
            Tag::None => p.demux.first(),
            Tag::One(vid) => p.demux.get(usize::from(vid)),
            Tag::Two(t) => p.qinq.get(&crate::iface::qinq_key(
                u16::from_be_bytes([t[2], t[3]]),
                u16::from_be_bytes([t[6], t[7]]),
            )),
        };
        let Some(&iface) = found else {
            return false;
        };
        // The interface must take the burst's tags as they are: an
        // 802.1Q tag is 0x8100, a QinQ outer tag the interface's TPID.
        let Some((vr, mac, urpf)) = self
            .shared
            .ifaces
            .get(usize::from(iface))
            .filter(|i| match tag {
                Tag::None => true,
                Tag::One(_) => i.tpid == crate::spec::Tpid::Dot1q,
                Tag::Two(t) => i.tpid.value().to_be_bytes() == [t[0], t[1]],
            })
            .map(|i| (i.vr, i.mac.0, i.urpf))
        else {
            return false;
        };
        let Some(v) = self.vrs.get_mut(usize::from(vr)) else {
            return false;
        };
        if v.ceiling.is_some() {
            return false;
        }
        // Each frame's destination is written in place: no capacity test
        // and length update per frame, as a push has. The buffers only
        // grow, so a burst does not pay to clear them.
        let n = rx.len();
        if dsts.len() < n {
            dsts.resize(n, A::UNSPECIFIED);
        }
        let dsts = &mut dsts[..n];
        let Some(bytes) = plain_demux::<L2, A>(rx, dsts, port, iface, mac, tag) else {
            return false;
        };
        let mut ctx = ctx!(self, now, tx, &self.peers);
        for c in [
            ctx.counters.ports.get(usize::from(port)),
            ctx.counters.ifaces.get(usize::from(iface)),
        ]
        .into_iter()
        .flatten()
        {
            c.rx_packets.add(n as u64);
            c.rx_bytes.add(bytes);
        }
        let fair = &mut self.fair;
        let fair_share = fair.active();
        // A part of a split burst is not timed as a whole: the burst shares
        // out the cost of its parts' fast-path frames at the end (clock
        // reads cost here). What its frames cost in the full stages is
        // timed, below, and charged to this VR alone.
        let splitting = fair.splitting();
        let timed = fair_share && !splitting;
        // Timed from the start of its receive, which is this VR's alone
        // (in a part of a split burst, the burst shares its receive out by
        // the parts' bytes).
        let t0 = match timed {
            true => fair.take_receive_start().unwrap_or_else(|| fair.now()),
            false => 0,
        };
        if fair_share {
            let full = self.full_burst > 0 && self.burst_len >= self.full_burst;
            let admitted = fair.admit_run(usize::from(vr), full);
            fair.note_refused_burst(!admitted);
            if !admitted {
                // Its control protocols' frames, within their own rate, go
                // on through the full stages (crate::protocol).
                for m in rx.extract_if(.., |m| !v.protected(m, now)) {
                    ctx.drop(m, DropReason::OverShare);
                }
                // What reading and demuxing it took is charged to nobody,
                // as a refused frame's in a burst of many VRs (charged to
                // its VR, a flooding VR's budget went on reading what it
                // may not send): only what its protected frames take.
                let t_stages = (fair_share && !rx.is_empty()).then(|| fair.now());
                for m in rx.drain(..) {
                    A::stages_unrouted(&mut ctx, v, m);
                }
                if let Some(t) = t_stages {
                    fair.charge(usize::from(vr), fair.now().saturating_sub(t));
                }
                return true;
            }
        }
        if self.routes.len() < n {
            self.routes.resize(n, None);
        }
        A::lookup_many(v, dsts, &mut self.routes[..n], self.prefetch);
        // The fast path rewrites frames where they lie, up to the first it
        // refuses; that prefix is queued as a whole, appended in one copy
        // when it all goes to one port, rather than pushed frame by frame
        // through an out-of-line call.
        let (mut done, mut to) = (0, None);
        // The interface's input list, if the VR applies one, judges every
        // frame first; the fast path stops at the first frame it denies.
        let input = (v.filtered & LISTS_IN != 0)
            .then(|| ctx.ifaces.get(usize::from(iface))?.filter_in.as_deref())
            .flatten();
        if self.fast_path {
            let routes = &self.routes[..n];
            if let Some(f) = input {
                let worker = ctx.counters.index;
                let verdicts = &mut self.verdicts;
                if verdicts.len() < n {
                    verdicts.resize(n, Verdict::REFUSED);
                }
                let permitted = A::judge_burst::<L2>(f, worker, rx, &mut verdicts[..n]);
                let rx = &mut rx[..permitted];
                (done, to) = fast_run::<A, L2, true>(&mut ctx, v, (rx, routes), iface, urpf);
                f.count_each(worker, &verdicts[..done]);
            } else {
                (done, to) = fast_run::<A, L2, false>(&mut ctx, v, (rx, routes), iface, urpf);
            }
        }
        if let Some((port, one_port)) = to {
            if one_port {
                queue_front(&mut ctx.tx.ports[usize::from(port)], rx, done);
            } else {
                for m in rx.drain(..done) {
                    ctx.push_tx(m);
                }
            }
        }
        // From the first refused frame on, frame by frame and in order: that
        // one goes straight to the full stages. In a part of a split burst
        // they are timed together, their cost this VR's alone.
        let t_rest = (fair_share && splitting && done < n).then(|| fair.now());
        let mut rest = rx.drain(..).zip(&self.routes[done..]);
        if let Some((m, &route)) = rest.next() {
            A::stages(&mut ctx, v, m, route);
        }
        for (m, &route) in rest {
            forward::<A, L2>(&mut ctx, v, self.fast_path, m, route, urpf);
        }
        if fair_share {
            // What sending them takes is this VR's alone too.
            fair.note_burst_bytes(bytes);
            fair.note_own_bytes(usize::from(vr), bytes);
            if timed {
                let ticks = fair.now().saturating_sub(t0);
                fair.charge_run(usize::from(vr), n as u64, bytes, ticks);
            } else {
                if let Some(t) = t_rest {
                    fair.charge(usize::from(vr), fair.now().saturating_sub(t));
                }
                // The fast path's frames share the burst's cost left over,
                // and all of them its receive by bytes.
                fair.charge_run(usize::from(vr), done as u64, bytes, 0);
            }
        }
        true
    }

    /// A burst of many VRs' frames in any order, the multi-tenant common
    /// case: every frame IPv4, or every frame IPv6, from one port, each in
    /// one 802.1Q VLAN and addressed to the MAC of the port's interface
    /// there, whose VR has no rate ceiling. It runs in the plain burst's
    /// three passes, each frame with its own interface and VR instead of
    /// the burst's: a demux pass (the tag's VLAN, the interface, its MAC,
    /// its VR; nothing is written unless every frame passes), one FIB batch
    /// in which each lane reads its own VR's table, then each frame to the
    /// fast path, whose frames up to the first refused one are queued
    /// together. Nothing is paid per VR or per run of one VR's frames: the
    /// receive counters are written per frame; the fair share admits each
    /// VR as the burst found it and counts each fast frame in its VR's
    /// tally after the loop (an equal share of the fast path's time, as
    /// [`Worker::mixed_burst`] charges).
    ///
    /// Returns false for any other burst, untouched but for fields the
    /// full demux sets again.
    fn many_burst(&mut self, rx: &mut Vec<Mbuf>, now: u64, tx: &mut TxBatch) -> bool {
        let Some(first) = rx.first() else {
            return false;
        };
        let ethertype = match first.data().get(12..18) {
            Some(&[0x81, 0x00, _, _, e0, e1]) => [e0, e1],
            _ => return false,
        };
        let mut dsts4 = std::mem::take(&mut self.dsts);
        let mut dsts6 = std::mem::take(&mut self.dsts6);
        let many = match ethertype {
            Ipv4Addr::ETHERTYPE => self.many_family::<Ipv4Addr, 18>(rx, now, tx, &mut dsts4),
            Ipv6Addr::ETHERTYPE => self.many_family::<Ipv6Addr, 18>(rx, now, tx, &mut dsts6),
            _ => false,
        };
        (self.dsts, self.dsts6) = (dsts4, dsts6);
        many
    }

    /// [`Worker::many_burst`] for the family of `A`, with one tag (`L2`
    /// 18); `dsts` holds the destinations (reused).
    #[inline(always)]
    fn many_family<A: Family, const L2: usize>(
        &mut self,
        rx: &mut Vec<Mbuf>,
        now: u64,
        tx: &mut TxBatch,
        dsts: &mut Vec<A>,
    ) -> bool {
        let Some(port) = rx.first().map(|m| m.port) else {
            return false;
        };
        let Some(Some(vlans)) = self.vlans.get(usize::from(port)) else {
            return false;
        };
        let n = rx.len();
        if dsts.len() < n {
            dsts.resize(n, A::UNSPECIFIED);
        }
        if self.lanes.len() < n {
            self.lanes.resize(n, Lane::default());
        }
        let (dsts, lanes) = (&mut dsts[..n], &mut self.lanes[..n]);
        let Some(bytes) = many_demux::<L2, A>(rx, dsts, lanes, port, vlans) else {
            return false;
        };
        let mut ctx = ctx!(self, now, tx, &self.peers);
        let counters = ctx.counters;
        if let Some(c) = counters.ports.get(usize::from(port)) {
            c.rx_packets.add(n as u64);
            c.rx_bytes.add(bytes);
        }
        if self.routes.len() < n {
            self.routes.resize(n, None);
        }
        let vrs = &self.vrs;
        let lanes = &*lanes;
        A::lookup_each(
            |j| A::table(&vrs[usize::from(lanes[j].vr)]),
            dsts,
            &mut self.routes[..n],
            self.prefetch,
        );
        if let Some(prefetch) = self.prefetch {
            prefetch_egress(prefetch, &self.vrs, lanes, &self.routes[..n]);
        }
        let fair = &mut self.fair;
        let fair_share = fair.active();
        // While shares are not enforced (the worker is not saturated) every
        // frame is admitted; the fast path's frames are counted per VR
        // (`Fair::count_fast`), and the burst timed once. A VR whose frames
        // a burst holds several of may so pass its room by a burst's worth
        // before its record is read: the excess is a deficit carried into
        // its next refill, as for a plain burst's run.
        let police = fair_share && fair.enforcing();
        let full = self.full_burst > 0 && self.burst_len >= self.full_burst;
        let start = fair.now();
        // What reading, demuxing and looking the burst up took: a long
        // frame is charged its share by bytes, the rest is shared with the
        // fast path's cost.
        let (receive, bytes) = fair.receive_by_bytes(start, bytes);
        let long = long_from(fair_share);
        let mut receive_charged = 0;
        // The fast path's frames up to the first it refuses (or the fair
        // share does), queued as a block when they all leave by one port.
        // Each is counted here, in one go on its interfaces' counter
        // lines: received, forwarded and sent (every frame has other
        // interfaces than the one before it, so a tally would write them
        // anyway); what its port sent is summed.
        let mut done = 0;
        let mut out = PortTally::default();
        let mut refused_fast = false;
        if self.fast_path {
            // The frames before the first whose VR the fair share refuses:
            // each VR admitted as the burst found it (as a plain burst's run
            // is), and its fast frames counted after the loop.
            let refused = |l: &Lane| !fair.admit_fast(usize::from(l.vr));
            let admitted = match police {
                true => lanes.iter().position(refused).unwrap_or(n),
                false => n,
            };
            let each = rx[..admitted].iter_mut().zip(&self.routes[..admitted]);
            for ((m, &route), lane) in each.zip(&lanes[..admitted]) {
                let Some(v) = self.vrs.get_mut(usize::from(lane.vr)) else {
                    break;
                };
                let len_in = m.len() as u64;
                let Some(sent) =
                    route.and_then(|id| A::fast_at::<L2, false>(&mut ctx, v, m, id, lane.urpf))
                else {
                    refused_fast = true;
                    break;
                };
                let len_out = m.len() as u64;
                if let Some(c) = counters.ifaces.get(usize::from(m.iface)) {
                    c.rx_packets.inc();
                    c.rx_bytes.add(len_in);
                    c.forwarded.inc();
                    c.fast_path.inc();
                }
                if len_in > long {
                    let vr = usize::from(lane.vr);
                    receive_charged += fair.charge_frame(vr, len_in, receive, bytes);
                }
                if let Some(c) = counters.ifaces.get(usize::from(sent.egress)) {
                    c.tx_packets.inc();
                    c.tx_bytes.add(len_out);
                }
                out.add(counters, sent.port, len_out);
                done += 1;
            }
            if fair_share {
                for lane in &lanes[..done] {
                    fair.count_fast(usize::from(lane.vr), full);
                }
            }
        }
        out.flush(counters);
        if let Some(port) = out.one_port() {
            queue_front(&mut ctx.tx.ports[usize::from(port)], rx, done);
        } else {
            for m in rx.drain(..done) {
                ctx.push_tx(m);
            }
        }
        // The rest frame by frame, in order: counted as received, admitted,
        // then the fast path (but for the frame it just refused) or the
        // full stages, which are timed on their own.
        let (mut any_admitted, mut any_refused) = (done > 0, false);
        let mut timed = 0u64;
        let mut fast = done as u64;
        // Bytes of frames dropped as over their VR's share: not sent.
        let mut refused_bytes = 0;
        let rest = rx.drain(..).zip(&self.routes[done..n]).zip(&lanes[done..]);
        for (k, ((mut m, &route), lane)) in rest.enumerate() {
            let len = m.len() as u64;
            if let Some(c) = counters.ifaces.get(usize::from(m.iface)) {
                c.rx_packets.inc();
                c.rx_bytes.add(len);
            }
            let vr = usize::from(lane.vr);
            let Some(v) = self.vrs.get_mut(vr) else {
                ctx.drop(m, DropReason::NoInterface);
                continue;
            };
            let retried = k == 0 && refused_fast;
            if fair_share && !retried && !fair.admit_run(vr, full) && !v.protected(&m, now) {
                // What reading it took is charged to nobody, as what the
                // demux took never was: not to the others (their shares
                // must not pay for a VR over its own), nor to its VR, whose
                // budget would go on reading what it may not send (tried:
                // `vrhost demo`'s flooding tenant then forwarded less than
                // half of its share, and the worker 26% less in all).
                receive_charged += crate::fair::share_by_bytes(receive, len, bytes);
                refused_bytes += len;
                any_refused = true;
                ctx.drop(m, DropReason::OverShare);
                continue;
            }
            if len > long {
                receive_charged += fair.charge_frame(vr, len, receive, bytes);
            }
            any_admitted = true;
            if let (true, false, Some(id)) = (self.fast_path, retried, route) {
                if let Some(sent) = A::fast_at::<L2, false>(&mut ctx, v, &mut m, id, lane.urpf) {
                    ctx.count_fast_path(m.iface, sent, m.len());
                    ctx.push_tx(m);
                    if fair_share {
                        fair.count_fast(vr, full);
                        fast += 1;
                    }
                    continue;
                }
            }
            let t0 = fair.now();
            A::stages(&mut ctx, v, m, route);
            if fair_share {
                let ticks = fair.now().saturating_sub(t0);
                fair.charge(vr, ticks);
                timed += ticks;
            }
        }
        if fair_share {
            // What the fast path's frames cost together, and the short
            // frames' part of the receive.
            let fast_ticks = fair.now().saturating_sub(start).saturating_sub(timed);
            fair.fast_burst(fast, fast_ticks + receive.saturating_sub(receive_charged));
            fair.note_burst_bytes(bytes - refused_bytes);
            fair.note_refused_burst(any_refused && !any_admitted);
        }
        true
    }

    /// A burst of several VRs' frames, each VR's many: split by (port,
    /// VLAN) into parts, keeping each part's frames in arrival order, and
    /// each part run as a burst of its own (plain where it is, else frame
    /// by frame). Returns false, the burst untouched, for a burst of fewer
    /// than [`SPLIT_MIN_FRAMES`] frames, whose parts would average fewer
    /// than [`SPLIT_MIN_RUN`] frames (those are cheaper frame by frame,
    /// [`Worker::mixed_burst`]), or in which one VR has frames on two
    /// interfaces.
    ///
    /// So a split never reorders one VR's frames; frames of different VRs
    /// may leave in another order than they came. The fair share sees one
    /// burst: full or not as a whole, and refused only if every part was.
    fn split_burst(&mut self, rx: &mut Vec<Mbuf>, now: u64, tx: &mut TxBatch) -> bool {
        // At most 255 parts, so a part's index is a `u8`.
        let most = (rx.len() / SPLIT_MIN_RUN).min(usize::from(u8::MAX));
        if rx.len() < SPLIT_MIN_FRAMES || most < 2 {
            return false;
        }
        self.part_of.clear();
        self.part_keys.clear();
        self.part_vrs.clear();
        let shared = &self.shared;
        let vr_of = |key: u32| {
            let port = shared.ports.get((key >> 17) as usize)?;
            let iface = *port.demux.get((key & 0x0fff) as usize)?;
            shared.ifaces.get(usize::from(iface)).map(|i| i.vr)
        };
        let mut last = (u32::MAX, 0u8);
        let mut bytes = 0;
        for m in rx.iter() {
            bytes += m.len() as u64;
            let key = part_key(m);
            if key != last.0 {
                let part = match self.part_keys.iter().position(|&k| k == key) {
                    Some(p) => p,
                    None if self.part_keys.len() < most => {
                        // Each VR's frames must stay in one part, in their
                        // order: its punt queue, rate limits and neighbor
                        // requests see them as they came.
                        let vr = vr_of(key);
                        if vr.is_some() && self.part_vrs.contains(&vr) {
                            return false;
                        }
                        self.part_keys.push(key);
                        self.part_vrs.push(vr);
                        self.part_keys.len() - 1
                    }
                    None => return false,
                };
                last = (key, part as u8);
            }
            self.part_of.push(last.1);
        }
        if self.part_keys.len() < 2 {
            return false;
        }
        let mut parts = std::mem::take(&mut self.parts);
        if parts.len() < self.part_keys.len() {
            parts.resize_with(self.part_keys.len(), Vec::new);
        }
        for (m, &p) in rx.drain(..).zip(&self.part_of) {
            parts[usize::from(p)].push(m);
        }
        // The clock is read only once the burst is split (under KVM a read
        // can cost a microsecond; most bursts that try are not split).
        let start = self.fair.now();
        self.fair.defer_burst(start, bytes);
        for part in parts.iter_mut().take(self.part_keys.len()) {
            if !self.plain_burst(part, now, tx) {
                self.mixed_burst(part, now, tx);
            }
        }
        let end = self.fair.now();
        self.fair.end_deferred_burst(end);
        self.parts = parts;
        true
    }

    /// Any burst: demuxed frame by frame, every IPv4 destination looked up
    /// in one FIB batch over all the burst's VRs, and every IPv6 one in
    /// another, then each frame to completion in arrival order.
    ///
    /// Nothing is paid per run of one VR's frames, so a burst whose frames
    /// belong to a different VR each costs what one VR's burst does: the
    /// batch reads each lane's own table ([`lookup_batch_each`]), and with a
    /// clock, a frame that the fast path sends is charged an equal share of
    /// what all of them cost together (one clock difference per burst),
    /// while a frame that takes the full stages, whose cost depends on what
    /// it is (an ICMP error, a punt, a neighbor miss), is timed on its own.
    fn mixed_burst(&mut self, rx: &mut Vec<Mbuf>, now: u64, tx: &mut TxBatch) {
        let mut ctx = ctx!(self, now, tx, &self.peers);
        let fair_share = self.fair.active();
        let full = self.full_burst > 0 && self.burst_len >= self.full_burst;
        self.dsts.clear();
        self.dsts6.clear();
        self.at4.clear();
        self.at6.clear();
        let mut bytes = 0;
        for m in rx.drain(..) {
            bytes += m.len() as u64;
            if let Some((next, (vr, urpf), m)) = classify(&mut ctx, &mut self.vrs, m) {
                let at = self.staged.len();
                let looked_up = match next {
                    demux::Next::Ipv4 => Ipv4Addr::read_dst(m.l3()).map(|d| {
                        self.dsts.push(d);
                        self.at4.push(at);
                    }),
                    demux::Next::Ipv6 => Ipv6Addr::read_dst(m.l3()).map(|d| {
                        self.dsts6.push(d);
                        self.at6.push(at);
                    }),
                    _ => None,
                }
                .is_some();
                self.staged.push(Staged {
                    vr,
                    urpf,
                    next,
                    m: Some(m),
                    looked_up,
                });
            }
        }
        self.routes.clear();
        self.routes.resize(self.staged.len(), None);
        let (vrs, staged) = (&self.vrs, &self.staged[..]);
        let (routes, answers) = (&mut self.routes[..], &mut self.answers);
        each_family(
            staged,
            &self.dsts,
            &self.at4,
            routes,
            answers,
            self.prefetch,
            |i| &*vrs[usize::from(staged[i].vr)].fib4,
        );
        each_family(
            staged,
            &self.dsts6,
            &self.at6,
            routes,
            answers,
            self.prefetch,
            |i| &*vrs[usize::from(staged[i].vr)].fib6,
        );
        let fair = &mut self.fair;
        let fast_path = self.fast_path;
        let (mut any_admitted, mut any_refused) = (false, false);
        let start = fair.now();
        let mut timed = 0u64;
        // What reading, demuxing and looking the burst up took (in a part
        // of a split burst, the whole burst's): each frame its share by
        // bytes, charged as it goes (as every frame here is), and what
        // sending the admitted ones takes by theirs.
        let (receive, of) = fair.receive_by_bytes(start, bytes);
        let mut sent_bytes = 0;
        self.fast_vrs.clear();
        for (s, &route) in self.staged.iter_mut().zip(&self.routes) {
            let Some(mut m) = s.m.take() else { continue };
            let vr = usize::from(s.vr);
            let Some(v) = self.vrs.get_mut(vr) else {
                ctx.drop(m, DropReason::NoInterface);
                continue;
            };
            let len = m.len() as u64;
            if fair_share && !fair.admit_run(vr, full) && !v.protected(&m, ctx.now) {
                // Its reading charged to nobody, as in a burst of many VRs.
                any_refused = true;
                ctx.drop(m, DropReason::OverShare);
                continue;
            }
            any_admitted = true;
            if fair_share {
                fair.charge_frame(vr, len, receive, of);
                sent_bytes += len;
            }
            let route = s.looked_up.then_some(route);
            let fast_id = route.flatten().filter(|_| fast_path);
            if let Some(id) = fast_id {
                let urpf = s.urpf;
                let fast = match s.next {
                    demux::Next::Ipv6 => fast::v6(&mut ctx, v, &mut m, id, urpf),
                    _ => fast::v4(&mut ctx, v, &mut m, id, urpf),
                };
                if let Some(sent) = fast {
                    ctx.count_fast_path(m.iface, sent, m.len());
                    ctx.push_tx(m);
                    if fair_share {
                        self.fast_vrs.push(s.vr);
                    }
                    continue;
                }
            }
            let t0 = fair.now();
            stages(&mut ctx, v, s.next, m, route);
            if fair_share {
                let ticks = fair.now().saturating_sub(t0);
                fair.charge(vr, ticks);
                timed += ticks;
            }
        }
        self.staged.clear();
        if fair_share {
            // What the fast path's frames cost together, in equal shares
            // (the remainder one tick each to the first frames: nothing is
            // lost, however coarse the clock).
            let fast_ticks = fair.now().saturating_sub(start).saturating_sub(timed);
            fair.note_burst_bytes(sent_bytes);
            let n = self.fast_vrs.len() as u64;
            if let (Some(share), Some(rest)) =
                (fast_ticks.checked_div(n), fast_ticks.checked_rem(n))
            {
                for (k, &vr) in self.fast_vrs.iter().enumerate() {
                    fair.charge(usize::from(vr), share + u64::from((k as u64) < rest));
                }
            }
            if any_refused || any_admitted {
                fair.note_refused_burst(any_refused && !any_admitted);
            }
        }
    }

    /// Between bursts when nothing arrived: picks up tables and neighbor
    /// events, and runs timers when due.
    pub fn idle(&mut self, now: u64, tx: &mut TxBatch) {
        self.refresh();
        self.apply_events(now, tx);
        if now >= self.next_poll {
            self.poll(now, tx);
        }
        let t = self.fair.now();
        self.fair.end_call(t, true);
        self.counters.load_permille.set(self.fair.load_permille);
    }

    /// Sends a frame the tenant's kernel wrote on the TAP mirror of
    /// interface `iface` (global index): judged ([`tap::judge`]), given the
    /// interface's MAC and 802.1Q tag ([`tap::tag_for_port`]), counted as
    /// transmitted on the interface and its port through the output tally,
    /// and queued on `tx`. Returns the verdict: a frame that is not sent
    /// (a duplicate answer, bad, or for an interface or port that is gone)
    /// goes back to the pool.
    pub fn send_from_tap(
        &mut self,
        iface: IfaceId,
        mut m: Mbuf,
        now: u64,
        tx: &mut TxBatch,
    ) -> tap::Verdict {
        let Some(i) = self.shared.ifaces.get(iface.index()) else {
            self.pool.put(m);
            return tap::Verdict::Bad;
        };
        if !self.shared.iface_attached(iface) {
            self.pool.put(m);
            return tap::Verdict::Detached;
        }
        let verdict = tap::judge(i, m.data());
        let port = i.port;
        if verdict != tap::Verdict::Send
            || usize::from(port) >= tx.ports.len()
            || !tap::tag_for_port(i, &mut m)
        {
            self.pool.put(m);
            return match verdict {
                tap::Verdict::Duplicate | tap::Verdict::Detached => verdict,
                _ => tap::Verdict::Bad,
            };
        }
        m.iface = iface.get();
        m.port = port;
        m.local_origin = true;
        // What the tenant's kernel sends is the tenant's traffic: it passes
        // the VR's rate ceiling and is charged to its fair share like any.
        let vr = usize::from(i.vr);
        let fair_share = self.fair.active();
        let mut ctx = ctx!(self, now, tx, &[]);
        // Its control protocols' replies leave within their own rate
        // whatever the VR's other traffic (crate::protocol): a rate-limited
        // BFD reply is a session lost.
        let Some(v) = self.vrs.get_mut(vr) else {
            ctx.drop(m, DropReason::NoInterface);
            return tap::Verdict::Limited;
        };
        if let Some(ceiling) = v.ceiling.as_mut() {
            if !ceiling.admit(now, m.len()) && !v.protected_frame(m.data(), now) {
                ctx.drop(m, DropReason::RateCeiling);
                return tap::Verdict::Limited;
            }
        }
        if fair_share && !self.fair.admit(vr) && !v.protected_frame(m.data(), now) {
            ctx.drop(m, DropReason::OverShare);
            return tap::Verdict::Limited;
        }
        let t0 = self.fair.now();
        ctx.queue(m, iface.get(), port);
        drop(ctx);
        if fair_share {
            let t = self.fair.now();
            self.fair.charge(vr, t.saturating_sub(t0));
        }
        tap::Verdict::Send
    }

    /// Applies what other workers learned and the control side installed,
    /// releasing packets held for those neighbors.
    fn apply_events(&mut self, now: u64, tx: &mut TxBatch) {
        let control = std::mem::take(&mut self.control_pending).then(|| self.control.try_iter());
        let mut ctx = ctx!(self, now, tx, &[]);
        for ev in control.into_iter().flatten().chain(self.inbox.try_iter()) {
            let (vr, iface, addr, mac, confirmed, pin) = match ev {
                Event::Unstatic { vr, iface, addr } => {
                    if let Some(v) = self.vrs.get_mut(vr as usize) {
                        v.neighbors.unset_static(iface, addr);
                    }
                    continue;
                }
                Event::Learned {
                    vr,
                    iface,
                    addr,
                    mac,
                    confirmed,
                } => (vr, iface, addr, mac, confirmed, false),
                Event::Static {
                    vr,
                    iface,
                    addr,
                    mac,
                } => (vr, iface, addr, mac, true, true),
            };
            let Some(v) = self.vrs.get_mut(vr as usize) else {
                // Facts about VRs are sent after their topology is published;
                // a VR this worker has not seen yet is picked up next burst,
                // and learning by ARP/ND covers what is skipped here.
                continue;
            };
            // Another worker's news only updates entries this worker uses,
            // plus static ones; it never fills the table with strangers.
            let slot = if pin {
                v.neighbors.ensure(iface, addr, true)
            } else {
                v.neighbors.find(iface, addr)
            };
            let Some(i) = slot else { continue };
            ctx.release(v, i, iface, addr, mac, confirmed);
            if pin {
                v.neighbors.set_static(iface, addr, mac);
            }
        }
        // The first worker asks for the gateways of new next hops (the
        // others learn the answers from it, Event::Learned).
        if !self.solicit.is_empty() {
            if ctx.counters.index == 0 {
                for &vr in &self.solicit {
                    if let Some(v) = self.vrs.get_mut(usize::from(vr)) {
                        solicit_gateways(&mut ctx, v);
                    }
                }
            }
            self.solicit.clear();
        }
    }

    /// Runs neighbor timers: retransmits ARP requests and solicitations,
    /// and drops packets held for neighbors that never answered. Publishes
    /// each VR's worker time ([`crate::worker::WorkerCounters::vr_busy_ns`]).
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        self.next_poll = now + POLL_INTERVAL_NS;
        let mut ctx = ctx!(self, now, tx, &self.peers);
        for vr in self.vrs.iter_mut() {
            self.probes.clear();
            vr.neighbors.poll(now, &mut self.probes, |m| {
                ctx.drop(m, DropReason::NeighborUnresolved)
            });
            for &p in &self.probes {
                ctx.send_probe(vr, p);
            }
        }
        if let Some(charged) = self.fair.charged_ns() {
            // The open round's fast frames are an estimate that its end may
            // settle lower: the published figure never goes back.
            for (c, ns) in self.counters.vr_busy_ns.iter().zip(charged) {
                c.raise(ns);
            }
        }
    }
}

/// Bytes `AT..AT + 8` of a frame's first 58, as one load (gathering them
/// byte by byte cost 11 instructions a frame in callgrind).
#[inline(always)]
fn word_at<const AT: usize>(h: &[u8; 58]) -> [u8; 8] {
    const { assert!(AT + 8 <= 58) };
    let mut w = [0u8; 8];
    w.copy_from_slice(&h[AT..AT + 8]);
    w
}

/// The tags of a plain burst's frames, as its first frame has them.
#[derive(Clone, Copy)]
enum Tag {
    /// Untagged (`L2` 14).
    None,
    /// One 802.1Q tag with this VLAN (`L2` 18).
    One(u16),
    /// QinQ (`L2` 22): bytes 12-19 of the frame, outer TPID and TCI then
    /// 0x8100 and the inner TCI, with PCP and DEI cleared.
    Two([u8; 8]),
}

/// The demux of a plain burst ([`Worker::plain_burst`]): checks that every
/// frame of `rx` came on `port`, is addressed to `mac` and carries the
/// family of `A`, untagged (`L2` 14), in one VLAN (`L2` 18) or one QinQ pair
/// (`L2` 22) as `tag` says, writes each
/// destination address into `dsts` and marks the frame demuxed to `iface`.
/// Returns the burst's bytes, or `None` at the first frame that differs
/// (the fields already set are set again by the full demux), or that is
/// shorter than 58 bytes (a tagged IPv6 header; no minimum-size frame is).
#[inline(always)]
fn plain_demux<const L2: usize, A: Family>(
    rx: &mut [Mbuf],
    dsts: &mut [A],
    port: u16,
    iface: u16,
    mac: [u8; 6],
    tag: Tag,
) -> Option<u64> {
    // Destination MAC and EtherType as one word: the interface's MAC in
    // bytes 0-5 and the EtherType in bytes 6-7, compared with the frame's
    // bytes 0-5 and 12-13. Tagged, the MAC alone, then bytes 12-19 as a
    // second word: TPID 81 00, the TCI's VID (its PCP and DEI masked off)
    // and the inner EtherType; with two tags, both tags, and the EtherType
    // at 20-21 on its own.
    const { assert!(L2 == 14 || L2 == 18 || L2 == 22) };
    let tagged = L2 > 14;
    let [m0, m1, m2, m3, m4, m5] = mac;
    let [e0, e1] = A::ETHERTYPE;
    let want = match tagged {
        false => u64::from_le_bytes([m0, m1, m2, m3, m4, m5, e0, e1]),
        true => u64::from_le_bytes([m0, m1, m2, m3, m4, m5, 0, 0]),
    };
    let (want_tag, tag_mask) = match tag {
        Tag::Two(t) => (
            u64::from_le_bytes(t),
            u64::from_le_bytes([0xff, 0xff, 0x0f, 0xff, 0xff, 0xff, 0x0f, 0xff]),
        ),
        Tag::One(vid) => {
            let [v0, v1] = vid.to_be_bytes();
            (
                u64::from_le_bytes([0x81, 0x00, v0, v1, e0, e1, 0, 0]),
                u64::from_le_bytes([0xff, 0xff, 0x0f, 0xff, 0xff, 0xff, 0, 0]),
            )
        }
        Tag::None => (0, 0),
    };
    let mut bytes = 0u64;
    for (m, dst) in rx.iter_mut().zip(dsts.iter_mut()) {
        let d = m.data();
        // One length test: every offset below is a constant inside it.
        let h = d.first_chunk::<58>()?;
        // Bytes 0-7 as one load, bytes 6-7 (the source MAC's first two)
        // replaced by the EtherType untagged, instead of gathering the 8
        // bytes one by one.
        let head = u64::from_le_bytes(word_at::<0>(h));
        let (got, tag_ok) = if L2 == 22 {
            let tags = u64::from_le_bytes(word_at::<12>(h));
            let et_ok = [h[20], h[21]] == [e0, e1];
            (
                head & 0x0000_ffff_ffff_ffff,
                tags & tag_mask == want_tag && et_ok,
            )
        } else if tagged {
            let tag = u64::from_le_bytes(word_at::<12>(h));
            (head & 0x0000_ffff_ffff_ffff, tag & tag_mask == want_tag)
        } else {
            let et = u64::from(u16::from_le_bytes([h[12], h[13]])) << 48;
            (head & 0x0000_ffff_ffff_ffff | et, true)
        };
        if got != want || !tag_ok || m.port != port {
            return None;
        }
        *dst = A::dst_at::<L2>(h);
        bytes += d.len() as u64;
        m.set_received(iface, L2 as u16);
    }
    Some(bytes)
}

/// The length past which a frame of a burst of many VRs is charged its own
/// share by bytes of what reading and sending its burst took
/// ([`crate::Fair::charge_frame`]): never without a clock.
#[inline(always)]
fn long_from(fair_share: bool) -> u64 {
    if fair_share {
        crate::fair::LONG_FRAME
    } else {
        u64::MAX
    }
}

/// Moves the first `done` frames of `rx` to the end of `queue`: the
/// whole burst in one copy of the buffer handles when it all goes
/// (`append`), else a drain.
#[inline(always)]
fn queue_front(queue: &mut Vec<Mbuf>, rx: &mut Vec<Mbuf>, done: usize) {
    if done == rx.len() {
        queue.append(rx);
    } else {
        queue.extend(rx.drain(..done));
    }
}

/// What the fast path's frames of a burst of many VRs sent, per port:
/// summed while consecutive frames leave by one port, written when the
/// port changes and at the end ([`PortTally::flush`]).
#[derive(Default)]
struct PortTally {
    port: Option<u16>,
    /// Frames left by another port than the first.
    mixed: bool,
    packets: u64,
    bytes: u64,
}

impl PortTally {
    #[inline(always)]
    fn add(&mut self, counters: &crate::worker::WorkerCounters, port: u16, len: u64) {
        if self.port != Some(port) {
            if self.port.is_some() {
                self.mixed = true;
                self.flush(counters);
            }
            self.port = Some(port);
        }
        self.packets += 1;
        self.bytes += len;
    }

    fn flush(&mut self, counters: &crate::worker::WorkerCounters) {
        if let Some(c) = self.port.and_then(|p| counters.ports.get(usize::from(p))) {
            c.tx_packets.add(self.packets);
            c.tx_bytes.add(self.bytes);
        }
        (self.packets, self.bytes) = (0, 0);
    }

    /// The one port every frame left by, if they did.
    fn one_port(&self) -> Option<u16> {
        self.port.filter(|_| !self.mixed)
    }
}

/// Prefetches, for the fast path of a burst of many VRs' frames, each
/// lane's gateway slot: a per-VR line that a burst of a thousand VRs finds
/// cold. Every lane's line is issued before the fast path reads any, so
/// their misses overlap. The slot holds the neighbor's MAC while it stays
/// usable ([`crate::worker::Vr::gateway`]), so the neighbor entry is read
/// only when it does not.
#[inline(always)]
fn prefetch_egress(prefetch: Prefetch, vrs: &[Vr], lanes: &[Lane], routes: &[Option<NextHopId>]) {
    const CHUNK: usize = 64;
    let mut line = [core::ptr::null::<u8>(); CHUNK];
    for (lanes, routes) in lanes.chunks(CHUNK).zip(routes.chunks(CHUNK)) {
        let mut lines = 0;
        for (lane, route) in lanes.iter().zip(routes) {
            if let (Some(v), Some(id)) = (vrs.get(usize::from(lane.vr)), route) {
                line[lines] = v.gateway_line(id.0);
                lines += 1;
            }
        }
        prefetch(&line[..lines]);
    }
}

/// The demux of a burst of many VRs ([`Worker::many_burst`]): checks that
/// every frame of `rx` came on `port`, carries one 802.1Q tag (`L2` 18)
/// and the family of `A`, and is addressed to the MAC of the interface on
/// its VLAN that the pass takes (`vlans`, the port's [`VlanLane`]s: one
/// read and one comparison a frame); writes each destination into `dsts`
/// and each frame's VR and reverse-path check into `lanes`, and marks the
/// frame demuxed to its interface. Returns the burst's bytes, or `None` at
/// the first frame that differs (the full demux then sets the fields
/// again).
fn many_demux<const L2: usize, A: Family>(
    rx: &mut [Mbuf],
    dsts: &mut [A],
    lanes: &mut [Lane],
    port: u16,
    vlans: &[VlanLane; 4096],
) -> Option<u64> {
    const { assert!(L2 == 18) };
    // TPID 81 00 and the inner EtherType of bytes 12-19; the TCI (bytes
    // 14-15) is the frame's own.
    let [e0, e1] = A::ETHERTYPE;
    let want_tag = u64::from_le_bytes([0x81, 0x00, 0, 0, e0, e1, 0, 0]);
    let tag_mask = u64::from_le_bytes([0xff, 0xff, 0, 0, 0xff, 0xff, 0, 0]);
    let mut bytes = 0u64;
    for ((m, dst), lane) in rx.iter_mut().zip(dsts.iter_mut()).zip(lanes.iter_mut()) {
        let d = m.data();
        let h = d.first_chunk::<58>()?;
        let tag = u64::from_le_bytes(word_at::<12>(h));
        let vid = usize::from(u16::from_be_bytes([h[14], h[15]]) & 0x0fff);
        let v = &vlans[vid];
        let mac = u64::from_le_bytes(word_at::<0>(h)) & 0x0000_ffff_ffff_ffff;
        if tag & tag_mask != want_tag || m.port != port || mac != v.mac {
            return None;
        }
        *dst = A::dst_at::<L2>(h);
        *lane = v.lane;
        bytes += d.len() as u64;
        m.set_received(v.iface, L2 as u16);
    }
    Some(bytes)
}

/// Most gateways of one VR solicited when its next hops change: a VR with
/// more next hops has the rest resolved by its traffic, as before.
const SOLICIT_MAX: usize = 1024;

/// Asks for the MAC of each gateway of `v`'s next hops that has no
/// neighbor entry yet, as soon as a route names it rather than when the
/// first packet needs it: a route's first packets then find the neighbor
/// resolved instead of waiting behind `arp_hold` (a copy restarted behind
/// an ECMP pair gets the flows back as soon as its routes are announced,
/// while its control plane's kernel already knows the neighbors and sends
/// no ARP of its own that the VR could learn from).
#[cold]
fn solicit_gateways(ctx: &mut Ctx<'_>, v: &mut Vr) {
    let nexthops = std::sync::Arc::clone(&v.nexthops);
    for hop in nexthops.iter().take(SOLICIT_MAX) {
        let &RouteHop::Gateway { iface, addr } = hop else {
            continue;
        };
        // An interface this worker's topology does not have (yet): left
        // to the traffic, once it has.
        if usize::from(iface) >= ctx.ifaces.len() || v.neighbors.find(iface, addr).is_some() {
            continue;
        }
        let Some(n) = v.neighbors.ensure(iface, addr, true) else {
            // A full table: the rest are resolved by their traffic.
            return;
        };
        if let crate::neighbor::Resolve::Hold { probe: true } = v.neighbors.resolve(n, ctx.now) {
            ctx.send_probe(
                v,
                crate::neighbor::Probe {
                    index: n,
                    unicast: None,
                },
            );
        }
    }
}

/// What the burst passes need of an IP family: the plain-burst demux, the
/// batch lookup, the fast path and the full stages of `Ipv4Addr` (IPv4)
/// and `Ipv6Addr` (IPv6).
trait Family: FibAddr + Copy {
    /// The filler of a destination buffer.
    const UNSPECIFIED: Self;
    /// The family's EtherType, as the frame's two bytes.
    const ETHERTYPE: [u8; 2];
    /// The destination of the header at the start of `l3`, if it holds one.
    fn read_dst(l3: &[u8]) -> Option<Self>;
    /// The destination of the header `L2` bytes into `h`, a frame's start
    /// (`L2` 14 or 18).
    fn dst_at<const L2: usize>(h: &[u8; 58]) -> Self;
    /// `vr`'s table of this family.
    fn table(vr: &Vr) -> &FibSnapshot<Self>;
    /// The FIB's answers for `addrs`, address `j` in table `table(j)`.
    #[inline(always)]
    fn lookup_each<'t>(
        table: impl Fn(usize) -> &'t FibSnapshot<Self>,
        addrs: &[Self],
        out: &mut [Option<NextHopId>],
        prefetch: Option<vrhost_fib::Prefetch>,
    ) where
        Self: 't,
    {
        lookup_batch_each(table, addrs, out, prefetch);
    }
    /// The FIB's answers for `addrs` in `vr`'s table of this family.
    fn lookup_many(
        vr: &Vr,
        addrs: &[Self],
        out: &mut [Option<NextHopId>],
        prefetch: Option<vrhost_fib::Prefetch>,
    );
    /// The fast path ([`fast::v4_at`], [`fast::v6_at`]) for a frame whose
    /// L3 header is `L2` bytes in.
    /// `urpf` is the ingress interface's reverse-path check; with
    /// `JUDGED`, the caller has asked the ingress interface's input list.
    fn fast_at<const L2: usize, const JUDGED: bool>(
        ctx: &mut Ctx<'_>,
        vr: &mut Vr,
        m: &mut Mbuf,
        id: NextHopId,
        urpf: Urpf,
    ) -> Option<crate::output::Sent>;
    /// Input list `f`'s verdicts on a plain burst's frames
    /// ([`Filter::judge4_burst`]), and how many frames come before the
    /// first it denies.
    fn judge_burst<const L2: usize>(
        f: &Filter,
        worker: usize,
        rx: &[Mbuf],
        out: &mut [Verdict],
    ) -> usize;
    /// The full stages, for a frame whose FIB answer is `route`.
    fn stages(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, route: Option<NextHopId>);
    /// The full stages, for a frame not looked up.
    fn stages_unrouted(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf);
}

impl Family for Ipv4Addr {
    const UNSPECIFIED: Self = Ipv4Addr::UNSPECIFIED;
    const ETHERTYPE: [u8; 2] = [0x08, 0x00];

    #[inline(always)]
    fn read_dst(l3: &[u8]) -> Option<Self> {
        let h = l3.first_chunk::<20>()?;
        Some(Ipv4Addr::new(h[16], h[17], h[18], h[19]))
    }

    #[inline(always)]
    fn dst_at<const L2: usize>(h: &[u8; 58]) -> Self {
        Ipv4Addr::new(h[L2 + 16], h[L2 + 17], h[L2 + 18], h[L2 + 19])
    }

    #[inline(always)]
    fn table(vr: &Vr) -> &FibSnapshot<Self> {
        &vr.fib4
    }

    #[inline(always)]
    fn lookup_many(
        vr: &Vr,
        addrs: &[Self],
        out: &mut [Option<NextHopId>],
        prefetch: Option<vrhost_fib::Prefetch>,
    ) {
        vr.lookup4_many(addrs, out, prefetch);
    }

    #[inline(always)]
    fn fast_at<const L2: usize, const JUDGED: bool>(
        ctx: &mut Ctx<'_>,
        vr: &mut Vr,
        m: &mut Mbuf,
        id: NextHopId,
        urpf: Urpf,
    ) -> Option<crate::output::Sent> {
        fast::v4_in::<L2, JUDGED>(ctx, vr, m, id, urpf)
    }

    #[inline(always)]
    fn judge_burst<const L2: usize>(
        f: &Filter,
        worker: usize,
        rx: &[Mbuf],
        out: &mut [Verdict],
    ) -> usize {
        f.judge4_burst::<L2>(worker, rx, out)
    }

    #[inline]
    fn stages(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, route: Option<NextHopId>) {
        stages(ctx, vr, demux::Next::Ipv4, m, Some(route));
    }

    #[cold]
    fn stages_unrouted(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf) {
        stages(ctx, vr, demux::Next::Ipv4, m, None);
    }
}

impl Family for Ipv6Addr {
    const UNSPECIFIED: Self = Ipv6Addr::UNSPECIFIED;
    const ETHERTYPE: [u8; 2] = [0x86, 0xdd];

    #[inline(always)]
    fn read_dst(l3: &[u8]) -> Option<Self> {
        let h = l3.first_chunk::<40>()?;
        Some(Ipv6Addr::from(*h[24..].first_chunk::<16>()?))
    }

    #[inline(always)]
    fn dst_at<const L2: usize>(h: &[u8; 58]) -> Self {
        Ipv6Addr::from(core::array::from_fn::<u8, 16, _>(|i| h[L2 + 24 + i]))
    }

    #[inline(always)]
    fn table(vr: &Vr) -> &FibSnapshot<Self> {
        &vr.fib6
    }

    #[inline(always)]
    fn lookup_many(
        vr: &Vr,
        addrs: &[Self],
        out: &mut [Option<NextHopId>],
        prefetch: Option<vrhost_fib::Prefetch>,
    ) {
        vr.lookup6_many(addrs, out, prefetch);
    }

    #[inline(always)]
    fn fast_at<const L2: usize, const JUDGED: bool>(
        ctx: &mut Ctx<'_>,
        vr: &mut Vr,
        m: &mut Mbuf,
        id: NextHopId,
        urpf: Urpf,
    ) -> Option<crate::output::Sent> {
        fast::v6_in::<L2, JUDGED>(ctx, vr, m, id, urpf)
    }

    #[inline(always)]
    fn judge_burst<const L2: usize>(
        f: &Filter,
        worker: usize,
        rx: &[Mbuf],
        out: &mut [Verdict],
    ) -> usize {
        f.judge6_burst::<L2>(worker, rx, out)
    }

    /// IPv6 input looks the destination up itself.
    #[inline]
    fn stages(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, _route: Option<NextHopId>) {
        stages(ctx, vr, demux::Next::Ipv6, m, None);
    }

    #[cold]
    fn stages_unrouted(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf) {
        stages(ctx, vr, demux::Next::Ipv6, m, None);
    }
}

/// Counts the frame, finds its interface and VR, and applies the VR's rate
/// ceilings: everything that happens before the VR's own stages. Returns
/// where the frame goes next, its VR and its interface's reverse-path check
/// (read here, where the interface's line is at hand: with many VRs it is
/// cold again by the time the frame is forwarded).
#[inline]
pub(crate) fn classify(
    ctx: &mut Ctx<'_>,
    vrs: &mut [Vr],
    mut m: Mbuf,
) -> Option<(demux::Next, (u16, Urpf), Mbuf)> {
    m.iface = NO_IFACE;
    m.local_origin = false;
    let len = m.len() as u64;
    if let Some(p) = ctx.counters.ports.get(m.port as usize) {
        p.rx_packets.inc();
        p.rx_bytes.add(len);
    }
    let next = demux::process(ctx.ports, ctx.ifaces, &mut m);
    if let demux::Next::Drop(reason) = next {
        ctx.drop(m, reason);
        return None;
    }
    let c = &ctx.counters.ifaces[m.iface as usize];
    c.rx_packets.inc();
    c.rx_bytes.add(len);
    let i = &ctx.ifaces[m.iface as usize];
    let (vr, urpf) = (i.vr, i.urpf);
    let v = &mut vrs[vr as usize];
    if let Some(ceiling) = &mut v.ceiling {
        if !ceiling.admit(ctx.now, m.len()) && !v.protected(&m, ctx.now) {
            ctx.drop(m, DropReason::RateCeiling);
            return None;
        }
    }
    Some((next, (vr, urpf), m))
}

/// The fast path over a plain burst's frames `rx` of `vr`, whose FIB
/// answers are `routes`, that came in on interface `iface` (reverse-path
/// check `urpf`; its input list already asked if `JUDGED`), up to the first
/// frame it refuses: how many it sent, and the port of the first with
/// whether all left by it.
#[inline(always)]
fn fast_run<A: Family, const L2: usize, const JUDGED: bool>(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    (rx, routes): (&mut [Mbuf], &[Option<NextHopId>]),
    iface: u16,
    urpf: Urpf,
) -> (usize, Option<(u16, bool)>) {
    let (mut done, mut to, mut one_port) = (0, None, true);
    for (m, &route) in rx.iter_mut().zip(routes) {
        let Some(sent) = route.and_then(|id| A::fast_at::<L2, JUDGED>(ctx, vr, m, id, urpf)) else {
            break;
        };
        ctx.count_fast_path(iface, sent, m.len());
        one_port &= *to.get_or_insert(sent.port) == sent.port;
        done += 1;
    }
    (done, to.map(|port| (port, one_port)))
}

/// A frame of `vr` of the family of `A` whose FIB answer is `route`, that
/// came in on an interface with reverse-path check `urpf`: the fast path
/// when it is on and takes the frame, else the full stages.
#[inline(always)]
fn forward<A: Family, const L2: usize>(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    fast_path: bool,
    mut m: Mbuf,
    route: Option<NextHopId>,
    urpf: Urpf,
) {
    if let (true, Some(id)) = (fast_path, route) {
        if let Some(sent) = A::fast_at::<L2, false>(ctx, vr, &mut m, id, urpf) {
            ctx.count_fast_path(m.iface, sent, m.len());
            return ctx.push_tx(m);
        }
    }
    A::stages(ctx, vr, m, route);
}

/// One family's FIB batch of a mixed burst: `dsts[j]` belongs to staged
/// frame `at[j]`, and is looked up in `table(at[j])`, its answer put in
/// `routes[at[j]]` (through `answers`, unless every staged frame is of this
/// family: then in place).
#[inline(always)]
fn each_family<'t, A: FibAddr>(
    staged: &[Staged],
    dsts: &[A],
    at: &[usize],
    routes: &mut [Option<NextHopId>],
    answers: &mut Vec<Option<NextHopId>>,
    prefetch: Option<vrhost_fib::Prefetch>,
    table: impl Fn(usize) -> &'t FibSnapshot<A>,
) {
    if dsts.is_empty() {
        return;
    }
    if dsts.len() == staged.len() {
        return lookup_batch_each(table, dsts, routes, prefetch);
    }
    answers.clear();
    answers.resize(dsts.len(), None);
    lookup_batch_each(|j| table(at[j]), dsts, answers, prefetch);
    for (&i, &answer) in at.iter().zip(answers.iter()) {
        routes[i] = answer;
    }
}

/// Runs a classified frame through the stages of `vr`, its interface's VR.
#[inline]
fn stages(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    next: demux::Next,
    m: Mbuf,
    route: Option<Option<NextHopId>>,
) {
    stages_seen(ctx, vr, next, m, route, &mut ());
}

/// What the full stages show an observer: each input stage's decision,
/// before it is carried out. A packet trace records them
/// (`crate::traced`); `()` sees nothing, and [`stages`] through it is the
/// code it was without.
pub(crate) trait Observe {
    /// IPv4 input decided `next` about `m`.
    #[inline(always)]
    fn ipv4(&mut self, _ctx: &Ctx<'_>, _vr: &Vr, _m: &Mbuf, _next: &ipv4_input::Next) {}
    /// IPv6 input decided `next` about `m`.
    #[inline(always)]
    fn ipv6(&mut self, _ctx: &Ctx<'_>, _vr: &Vr, _m: &Mbuf, _next: &ipv6_input::Next) {}
}

impl Observe for () {}

/// [`stages`], each input stage's decision shown to `seen`.
#[inline(always)]
pub(crate) fn stages_seen(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    next: demux::Next,
    mut m: Mbuf,
    route: Option<Option<NextHopId>>,
    seen: &mut impl Observe,
) {
    let iface = &ctx.ifaces[m.iface as usize];
    match next {
        demux::Next::Arp => arp_input::process(ctx, vr, m),
        demux::Next::Ipv4 => {
            let next = ipv4_input::process(vr, &mut m, route, (iface, ctx.counters.index));
            seen.ipv4(ctx, vr, &m, &next);
            match next {
                ipv4_input::Next::Forward(nh) => ip_forward::v4(ctx, vr, m, nh),
                ipv4_input::Next::Local => local::v4(ctx, vr, m),
                ipv4_input::Next::Punt => ctx.punt(vr, m),
                ipv4_input::Next::Icmp(err, reason) => icmp_error::send_v4(ctx, vr, m, err, reason),
                ipv4_input::Next::Drop(reason) => ctx.drop(m, reason),
            }
        }
        demux::Next::Ipv6 => {
            let next = ipv6_input::process(vr, (iface, ctx.counters.index), &mut m);
            seen.ipv6(ctx, vr, &m, &next);
            match next {
                ipv6_input::Next::Forward(nh) => ip_forward::v6(ctx, vr, m, nh),
                ipv6_input::Next::Local => local::v6(ctx, vr, m),
                ipv6_input::Next::Icmp(err, reason) => icmp_error::send_v6(ctx, vr, m, err, reason),
                ipv6_input::Next::Drop(reason) => ctx.drop(m, reason),
            }
        }
        demux::Next::Drop(reason) => ctx.drop(m, reason),
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use vrhost_wire::ethernet::EthernetAddress;

    use super::*;
    use crate::spec::EngineSpec;
    use crate::worker::NextHop;
    use crate::{TableWriter, TxBatch};

    /// One VR with one interface on one port, 10.0.0.1/24.
    fn one_iface() -> EngineSpec {
        crate::spec::one_vr(
            vec![(Ipv4Addr::new(10, 0, 0, 1), 24)],
            vec![],
            Default::default(),
        )
    }

    /// A next hop can name an interface the worker's topology does not
    /// have: one published before the topology that adds it, or after the
    /// one that removed it, reaches the worker first. A packet forwarded
    /// to it, and one sent there directly, are dropped and counted, where
    /// indexing the interfaces panicked.
    #[test]
    fn a_next_hop_on_an_unknown_interface_is_a_counted_drop() {
        let mut writer = TableWriter::new(&one_iface()).expect("valid spec");
        let mut workers = Worker::create(&mut writer, 1);
        let w = &mut workers[0];
        let mut tx = TxBatch::new(1);
        let peers = Vec::new();
        // A UDP packet from 10.0.0.2 to 192.0.2.9, TTL 64.
        let mut ip = [0u8; 28];
        vrhost_wire::ipv4::Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 2),
            dst_addr: Ipv4Addr::new(192, 0, 2, 9),
            protocol: vrhost_wire::ip::IpProtocol::Udp,
            payload_len: 8,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
        }
        .emit(&mut vrhost_wire::ipv4::Ipv4Packet::new_unchecked(
            &mut ip[..],
        ));
        let frame = |w: &mut Worker| {
            let mut m = w.pool.get();
            let d = m.set_len_from_start(14 + ip.len());
            d[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
            d[12..14].copy_from_slice(&[0x08, 0x00]);
            d[14..].copy_from_slice(&ip);
            m.port = 0;
            m.set_received(0, 14);
            m
        };
        let unknown = 7;
        let (m1, m2) = (frame(w), frame(w));
        {
            let mut ctx = ctx!(w, 0, &mut tx, &peers);
            let vr = &mut w.vrs[0];
            ip_forward::v4(&mut ctx, vr, m1, NextHop::Connected { iface: unknown });
            ctx.send(
                m2,
                unknown,
                EthernetAddress([2, 0, 0, 0, 0, 9]),
                vrhost_wire::ethernet::EtherType::Ipv4,
            );
        }
        assert!(tx.ports.iter().all(Vec::is_empty), "nothing was sent");
        let c = w.counters.ifaces[0].snapshot();
        assert_eq!(c.drop_count(DropReason::NoInterface), 2);
    }

    /// What other workers learn fills a worker's inbox (bounded: what does
    /// not fit is learned again by ARP/ND), and a tenant's ARP can keep it
    /// full. A static neighbor the control side installs meanwhile, another
    /// VR's as well, still reaches the worker: it comes on a queue of its
    /// own. Sent through the full inbox it was lost for good.
    #[test]
    fn a_static_neighbor_reaches_a_worker_whose_inbox_peers_filled() {
        let mut writer = TableWriter::new(&one_iface()).expect("valid spec");
        let mut workers = Worker::create(&mut writer, 2);
        let learned = Event::Learned {
            vr: 0,
            iface: 0,
            addr: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            mac: EthernetAddress([2, 0xaa, 0, 0, 0, 2]),
            confirmed: false,
        };
        let mut lost = 0;
        for _ in 0..5000 {
            Worker::broadcast(&workers[0].peers, &mut lost, learned);
        }
        assert_eq!(lost, 5000 - 4096, "worker 1's inbox is full");
        let addr = std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));
        let mac = EthernetAddress([2, 0xbb, 0, 0, 0, 3]);
        writer
            .set_static_neighbor(crate::VrId::new(0), addr, mac)
            .expect("on link");
        writer.commit();
        let mut tx = TxBatch::new(1);
        let w = &mut workers[1];
        let now = 1_000_000_000;
        w.refresh();
        w.apply_events(now, &mut tx);
        let n = w.vrs[0].neighbors.find(0, addr).expect("installed");
        assert_eq!(
            w.vrs[0].neighbors.resolve(n, now),
            crate::neighbor::Resolve::Ready(mac)
        );
    }

    /// A sender that repeats itself (a tenant's ARP flood from a known
    /// address) is learned once as far as the other workers go: only news
    /// is broadcast, so it neither fills their inboxes nor takes their time.
    #[test]
    fn a_repeated_arp_is_broadcast_once() {
        let mut writer = TableWriter::new(&one_iface()).expect("valid spec");
        let mut workers = Worker::create(&mut writer, 2);
        let (w0, rest) = workers.split_at_mut(1);
        let (w, peer) = (&mut w0[0], &rest[0]);
        let mut tx = TxBatch::new(1);
        let addr = std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let (a, b) = (
            EthernetAddress([2, 0xaa, 0, 0, 0, 2]),
            EthernetAddress([2, 0xaa, 0, 0, 0, 3]),
        );
        let peers = w.peers.clone();
        {
            let mut ctx = ctx!(w, 0, &mut tx, &peers);
            let vr = &mut w.vrs[0];
            for mac in [a; 100].into_iter().chain([b; 100]) {
                ctx.learn(vr, 0, addr, mac, false);
            }
        }
        assert_eq!(peer.inbox.try_iter().count(), 2, "one for each MAC");
    }
}
