//! The traced path: a traced VR's frames, one by one through the full
//! stages, each decision recorded with its inputs ([`crate::trace`]).
//!
//! ```text
//!   burst ─▶ [a trace armed?] ─▶ split: traced VRs' frames │ the rest (stays in the burst, in order)
//!                                       ▼
//!   per frame: claim it for each trace that wants it (port, tags → interface → VR)
//!     record demux, L2 accept          ─▶ pipeline::classify (counters, demux, rate ceiling)
//!     record the fair share            ─▶ admission, as a mixed burst's
//!     record the input stage's answer  ─▶ pipeline::stages_seen (ip input, forward, output, ...)
//!     and what it was made on (header, source route, lists, FIB answer, TTL, MTU, neighbor)
//!   outcome: what the worker's counters and transmit queues gained meanwhile
//! ```
//!
//! Every input is read before the stage that uses it runs, without
//! changing anything the stage reads, and where the frame went is read
//! from the counters and queues the stages write: a trace shows what the
//! stages did, not what the tracer thinks they would do. A traced frame is
//! forwarded as any other (`tests/trace.rs` compares both).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use vrhost_wire::ethernet::EthernetAddress;
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv6 as wire6;

use crate::demux;
use crate::drop_reason::DropReason;
use crate::ecmp;
use crate::filter::Filter;
use crate::iface::NO_IFACE;
use crate::ipv4_input;
use crate::ipv6_input;
use crate::mbuf::{Gso, Mbuf};
use crate::neighbor::State;
use crate::offload;
use crate::output::Ctx;
use crate::pipeline::{classify, stages_seen, Observe};
use crate::spec::{IfaceId, Urpf, VrId};
use crate::tables::{RouteHop, Shared};
use crate::trace::{
    FilterDir, Hop, IpHeader, L2Accept, MtuVerdict, Outcome, PacketTrace, SentFrame, Step,
};
use crate::urpf;
use crate::worker::{NextHop, TxBatch, Vr, Worker, WorkerCounters};

impl Worker {
    /// Takes the frames of every VR a trace wants out of `rx` and runs
    /// them one by one through the full stages, recording those the traces
    /// claim; the rest of `rx` stays, in order, for the usual passes. All
    /// of a VR's frames go, so its frames keep their order.
    #[cold]
    #[inline(never)]
    pub(crate) fn trace_frames(&mut self, rx: &mut Vec<Mbuf>, now: u64, tx: &mut TxBatch) {
        self.trace.refresh();
        let mut frames = std::mem::take(&mut self.trace.frames);
        let mut rest = std::mem::take(&mut self.trace.rest);
        let (shared, trace) = (&self.shared, &self.trace);
        let traced = |m: &Mbuf| owner(shared, m).is_some_and(|(vr, _)| trace.wants_vr(vr));
        if rx.iter().any(traced) {
            for m in rx.drain(..) {
                if traced(&m) {
                    frames.push(m);
                } else {
                    rest.push(m);
                }
            }
            rx.append(&mut rest);
        }
        for m in frames.drain(..) {
            self.trace_one(m, now, tx);
        }
        (self.trace.frames, self.trace.rest) = (frames, rest);
    }

    /// One frame of a traced VR, through the full stages; recorded and
    /// handed to every trace that claims it.
    fn trace_one(&mut self, mut m: Mbuf, now: u64, tx: &mut TxBatch) {
        let Some((vr_index, iface)) = owner(&self.shared, &m) else {
            // Not a traced VR's after all (the caller tested it): run as usual.
            return self.run_one(m, now, tx, &mut ());
        };
        let mut claims = 0u32;
        for (k, s) in self.trace.active.iter().enumerate() {
            if s.claim(vr_index, iface) {
                claims |= 1 << k;
            }
        }
        if claims == 0 {
            return self.run_one(m, now, tx, &mut ());
        }
        let port = m.port;
        let len = m.len();
        let mut rec = Recorder::default();
        rec.demux(&self.shared, &mut m);
        let before = Snapshot::take(&self.counters, port, iface, tx);
        let held = self.vrs.get(usize::from(vr_index)).map(Vr::waiting);
        self.run_one(m, now, tx, &mut rec);
        let after = Snapshot::take(&self.counters, port, iface, tx);
        let mut outcome = before.outcome(&after, &self.shared, tx);
        if let (Some(v), Some((held, punted))) = (self.vrs.get(usize::from(vr_index)), held) {
            let (h, p) = v.waiting();
            outcome.held = h > held;
            outcome.punted = p > punted;
        }
        let t = PacketTrace {
            worker: self.counters.index,
            now,
            vr: VrId::new(usize::from(vr_index)),
            port,
            len,
            steps: rec.steps,
            outcome,
        };
        for (k, s) in self.trace.active.iter().enumerate() {
            if claims & (1 << k) != 0 {
                s.deliver(t.clone());
            }
        }
    }

    /// Runs one frame through the full stages as a mixed burst would
    /// (classified, admitted by the fair share, timed and charged to its
    /// VR), its input stages' decisions shown to `seen`.
    fn run_one(&mut self, m: Mbuf, now: u64, tx: &mut TxBatch, seen: &mut impl Record) {
        let mut ctx = Ctx {
            now,
            ports: &self.shared.ports,
            ifaces: &self.shared.ifaces,
            pool: &mut self.pool,
            counters: &self.counters,
            tx,
            peers: &self.peers,
            events_lost: &mut self.events_lost,
            punt_dirty: &mut self.punt_dirty,
            tally: Default::default(),
        };
        let ceiling = |vrs: &[Vr], vr: u16| {
            vrs.get(usize::from(vr))
                .is_some_and(|v| v.ceiling.is_some())
        };
        let Some((next, (vr, _), m)) = classify(&mut ctx, &mut self.vrs, m) else {
            // Refused by demux (recorded already) or the VR's rate ceiling.
            if let Some(vr) = seen.demuxed_to() {
                if ceiling(&self.vrs, vr) {
                    seen.step(Step::RateCeiling { admitted: false });
                }
            }
            return;
        };
        if ceiling(&self.vrs, vr) {
            seen.step(Step::RateCeiling { admitted: true });
        }
        let fair = &mut self.fair;
        let index = usize::from(vr);
        if fair.active() {
            let full = self.full_burst > 0 && self.burst_len >= self.full_burst;
            let admitted = fair.admit_run(index, full)
                || self
                    .vrs
                    .get_mut(index)
                    .is_some_and(|v| v.protected(&m, ctx.now));
            seen.step(Step::FairShare { admitted });
            if !admitted {
                return ctx.drop(m, DropReason::OverShare);
            }
        }
        let Some(v) = self.vrs.get_mut(index) else {
            return ctx.drop(m, DropReason::NoInterface);
        };
        if next == demux::Next::Arp {
            seen.arp(&m);
        }
        let t0 = fair.now();
        stages_seen(&mut ctx, v, next, m, None, seen);
        if fair.active() {
            let ticks = fair.now().saturating_sub(t0);
            fair.charge(index, ticks);
        }
    }
}

impl Vr {
    /// Packets held by neighbor resolution and on the punt queue.
    fn waiting(&self) -> (usize, usize) {
        (self.neighbors.held(), self.punt.len())
    }
}

/// The interface (and its VR) a frame's port and readable tags lead to,
/// whatever the tag's TPID (a frame refused for it is still that
/// interface's to trace). A frame whose tags are cut before their VLAN
/// leads nowhere: it could be any VLAN's.
fn owner(shared: &Shared, m: &Mbuf) -> Option<(u16, u16)> {
    let d = m.data();
    let (vlan, inner) = match tags(d)? {
        (None, _) => (None, None),
        (Some((_, vid)), inner) => (Some(vid), inner),
    };
    let iface = shared.demux_slot(m.port, vlan, inner)?;
    let i = shared.ifaces.get(usize::from(iface))?;
    shared
        .vr_alive(VrId::new(usize::from(i.vr)))
        .then_some((i.vr, iface))
}

/// A frame's outer tag (TPID, VLAN) and inner VLAN.
type Tags = (Option<(u16, u16)>, Option<u16>);

/// A frame's [`Tags`] as far as they can be read, or `None` when it is cut
/// inside a VLAN it needs.
fn tags(d: &[u8]) -> Option<Tags> {
    let word = |at: usize| d.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let outer = word(12)?;
    if outer != 0x8100 && outer != 0x88a8 {
        return Some((None, None));
    }
    let vid = word(14)? & 0x0fff;
    // An inner tag whose VLAN is cut off: the frame is no interface's.
    let inner = match word(16) {
        Some(0x8100) => Some(word(18)? & 0x0fff),
        _ => None,
    };
    Some((Some((outer, vid)), inner))
}

/// What the traced path tells a [`Recorder`] besides the input stages'
/// decisions; `()` is told nothing.
trait Record: Observe {
    /// A decision.
    #[inline(always)]
    fn step(&mut self, _step: Step) {}
    /// The VR of the frame, if demux let it through.
    #[inline(always)]
    fn demuxed_to(&self) -> Option<u16> {
        None
    }
    /// An ARP frame for the ARP stage.
    #[inline(always)]
    fn arp(&mut self, _m: &Mbuf) {}
}

impl Record for () {}

/// One frame's decisions, in order.
#[derive(Default)]
struct Recorder {
    steps: Vec<Step>,
    /// The VR of a frame demux let through.
    vr: Option<u16>,
}

impl Record for Recorder {
    fn step(&mut self, step: Step) {
        self.steps.push(step);
    }

    fn demuxed_to(&self) -> Option<u16> {
        self.vr
    }

    fn arp(&mut self, m: &Mbuf) {
        let a = m.l3();
        let Some(a) = a.get(..28) else { return };
        let ip = |at: usize| Ipv4Addr::new(a[at], a[at + 1], a[at + 2], a[at + 3]);
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&a[8..14]);
        self.step(Step::Arp {
            operation: u16::from_be_bytes([a[6], a[7]]),
            sender: ip(14),
            sender_mac: EthernetAddress(mac),
            target: ip(24),
        });
    }
}

impl Recorder {
    /// Demux and L2 accept as [`demux::process`] decides them (which sets
    /// only what `classify` sets again).
    fn demux(&mut self, shared: &Shared, m: &mut Mbuf) {
        m.iface = NO_IFACE;
        let next = demux::process(&shared.ports, &shared.ifaces, m);
        let d = m.data();
        let (tag, inner_vlan) = tags(d).unwrap_or((None, None));
        let iface = (m.iface != NO_IFACE)
            .then(|| shared.ifaces.get(usize::from(m.iface)).map(|_| m.iface))
            .flatten()
            .filter(|_| !matches!(next, demux::Next::Drop(DropReason::NoInterface)));
        let result = match next {
            demux::Next::Drop(r @ (DropReason::NoInterface | DropReason::TruncatedL2)) => Err(r),
            _ => Ok(()),
        };
        self.steps.push(Step::Demux {
            port: m.port,
            tag,
            inner_vlan,
            iface: iface.map(IfaceId::new),
            result,
        });
        let Some(i) = iface.and_then(|i| shared.ifaces.get(usize::from(i))) else {
            return;
        };
        if !matches!(next, demux::Next::Drop(_)) {
            self.vr = Some(i.vr);
        }
        let mac = |at: usize| {
            let mut b = [0u8; 6];
            b.copy_from_slice(&d[at..at + 6]);
            EthernetAddress(b)
        };
        let (dst, src) = (mac(0), mac(6));
        let l3 = usize::from(m.l3_off);
        let ethertype = d
            .get(l3.saturating_sub(2)..l3)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        let accepted = match next {
            demux::Next::Drop(DropReason::NotForUs) => None,
            _ if dst == i.mac => Some(L2Accept::Own),
            _ if dst.is_broadcast() => Some(L2Accept::Broadcast),
            _ => Some(L2Accept::Multicast),
        };
        self.steps.push(Step::L2 {
            dst,
            src,
            ethertype,
            accepted,
        });
    }

    /// An input stage's decision, `ingress` its interface, and what it
    /// and the forwarding after it are made on.
    fn input(&mut self, ctx: &Ctx<'_>, vr: &Vr, m: &Mbuf, decided: Decided) {
        let l3 = m.l3();
        let l3_off = usize::from(m.l3_off);
        let v6 = m.data().get(l3_off.saturating_sub(2)..l3_off) == Some(&[0x86, 0xdd]);
        let header = read_ip(l3, v6);
        let Some(ingress) = ctx.ifaces.get(usize::from(m.iface)) else {
            return;
        };
        let src_unspecified = header
            .as_ref()
            .is_some_and(|h| h.src == IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        let reached = match decided {
            Decided::Drop(r) | Decided::Icmp(r) => level(r, src_unspecified),
            _ => Level::Past,
        };
        let checks = match decided {
            Decided::Drop(r) if matches!(reached, Level::Header | Level::Options) => Err(r),
            _ => Ok(()),
        };
        self.step(Step::Ip {
            header: header.clone(),
            checks,
        });
        let Some(h) = header else { return };
        if reached <= Level::Header {
            return;
        }
        // RFC 3704, as the input stage asks it (IPv6 link-local and
        // unspecified sources are not checked).
        let checked = match h.src {
            IpAddr::V4(_) => true,
            IpAddr::V6(s) => !s.is_unspecified() && !wire6::is_link_local(&s),
        };
        if ingress.urpf != Urpf::Off && checked {
            let route = match h.src {
                IpAddr::V4(s) => vr.source_route4(s),
                IpAddr::V6(s) => vr.source_route6(s),
            };
            self.step(Step::Urpf {
                mode: ingress.urpf,
                src: h.src,
                route: route.map(hop_of),
                pass: urpf::passes(ingress.urpf, route, &vr.nexthops, m.iface),
            });
        }
        if reached <= Level::Options {
            return;
        }
        let pcp = crate::filter::pcp_of(m.data(), usize::from(m.l3_off));
        let packet = l3.get(..usize::from(h.len)).unwrap_or(l3);
        if let Some(f) = &ingress.filter_in {
            let nd = match h.dst {
                IpAddr::V6(d) => {
                    wire6::is_link_local(&d) || d.segments()[0] == 0xff02 || ingress.owns6(&d)
                }
                IpAddr::V4(_) => false,
            };
            self.filter(ctx, FilterDir::In, f, packet, pcp, nd);
        }
        if reached <= Level::Filter {
            return;
        }
        let multicast = match h.dst {
            IpAddr::V4(d) => d.is_multicast() || d.is_broadcast(),
            IpAddr::V6(d) => d.is_multicast(),
        };
        if multicast {
            if matches!(decided, Decided::Local | Decided::Punt) {
                self.step(Step::ForUs { group: true });
            }
            return;
        }
        let id = match h.dst {
            IpAddr::V4(d) => vr.fib4.lookup(d),
            IpAddr::V6(d) => vr.fib6.lookup(d),
        };
        let route = id.and_then(|id| vr.nexthops.get(id.0 as usize));
        let member = match route {
            Some(&RouteHop::Group { base, .. }) => {
                let hash = match h.dst {
                    IpAddr::V4(_) => ecmp::flow4_of(packet),
                    IpAddr::V6(_) => ecmp::flow6_of(packet),
                };
                vr.nexthops
                    .pick(base, hash)
                    .and_then(|k| vr.nexthops.get(k as usize))
            }
            _ => None,
        };
        self.step(Step::Route {
            dst: h.dst,
            next_hop: id.map(|id| id.0),
            hop: route.map(hop_of),
            member: member.map(hop_of),
        });
        let nh = match decided {
            Decided::Local => return self.step(Step::ForUs { group: false }),
            Decided::Forward(nh) => nh,
            _ => return,
        };
        let (egress, addr) = match (nh, member.or(route)) {
            (NextHop::Connected { iface }, _) => (iface, h.dst),
            (NextHop::Gateway { iface, .. }, Some(&RouteHop::Gateway { addr, .. })) => {
                (iface, addr)
            }
            _ => return,
        };
        let pass = h.ttl > 1;
        self.step(Step::Ttl { ttl: h.ttl, pass });
        let Some(out) = ctx.ifaces.get(usize::from(egress)) else {
            return;
        };
        if !pass {
            return;
        }
        if let Some(f) = &out.filter_out {
            if !self.filter(ctx, FilterDir::Out, f, packet, pcp, false) {
                return;
            }
        }
        let len = match m.offload.gso {
            Gso::None => usize::from(h.len),
            _ => offload::segment_len(l3, &m.offload).unwrap_or(usize::from(h.len)),
        };
        let v4 = matches!(h.dst, IpAddr::V4(_));
        let verdict = if len <= usize::from(out.mtu) {
            MtuVerdict::Fits
        } else if v4 && !h.df {
            MtuVerdict::Fragment
        } else {
            MtuVerdict::TooBig
        };
        self.step(Step::Mtu {
            len,
            mtu: out.mtu,
            df: h.df,
            verdict,
        });
        if verdict == MtuVerdict::TooBig {
            return;
        }
        self.neighbor(vr, egress, addr);
    }

    /// A rule list's verdict on `packet`, counting nothing; whether it
    /// permits.
    fn filter(
        &mut self,
        ctx: &Ctx<'_>,
        dir: FilterDir,
        f: &Filter,
        packet: &[u8],
        pcp: u8,
        nd: bool,
    ) -> bool {
        let worker = ctx.counters.index;
        let verdict = if let Some((h, rest)) = packet.split_first_chunk::<20>() {
            match packet.split_first_chunk::<40>() {
                Some((h6, rest6)) if packet[0] >> 4 == 6 => {
                    Some(f.judge6(worker, h6, rest6, pcp, nd))
                }
                _ if packet[0] >> 4 == 4 => Some(f.judge4(worker, h, rest, pcp)),
                _ => None,
            }
        } else {
            None
        };
        let permit = verdict.is_some_and(|v| v.permit());
        let rule = verdict
            .map(|v| v.entry())
            .filter(|&e| (e as usize) < f.spec().rules.len());
        self.step(Step::Filter {
            dir,
            list: f.name().to_string(),
            rule,
            permit,
        });
        permit
    }

    /// The neighbor entry of `addr` on `egress` as this packet finds it.
    fn neighbor(&mut self, vr: &Vr, egress: u16, addr: IpAddr) {
        let n = vr.neighbors.find(egress, addr).map(|i| vr.neighbors.get(i));
        let state = n.map(|n| n.state);
        let mac = n
            .filter(|n| matches!(n.state, State::Reachable | State::Stale | State::Static))
            .map(|n| n.mac);
        self.step(Step::Neighbor {
            iface: IfaceId::new(egress),
            addr,
            state,
            mac,
        });
    }
}

impl Observe for Recorder {
    fn ipv4(&mut self, ctx: &Ctx<'_>, vr: &Vr, m: &Mbuf, next: &ipv4_input::Next) {
        let decided = match *next {
            ipv4_input::Next::Forward(nh) => Decided::Forward(nh),
            ipv4_input::Next::Local => Decided::Local,
            ipv4_input::Next::Punt => Decided::Punt,
            ipv4_input::Next::Icmp(_, r) => Decided::Icmp(r),
            ipv4_input::Next::Drop(r) => Decided::Drop(r),
        };
        self.input(ctx, vr, m, decided);
    }

    fn ipv6(&mut self, ctx: &Ctx<'_>, vr: &Vr, m: &Mbuf, next: &ipv6_input::Next) {
        let decided = match *next {
            ipv6_input::Next::Forward(nh) => Decided::Forward(nh),
            ipv6_input::Next::Local => Decided::Local,
            ipv6_input::Next::Icmp(_, r) => Decided::Icmp(r),
            ipv6_input::Next::Drop(r) => Decided::Drop(r),
        };
        self.input(ctx, vr, m, decided);
    }
}

/// An input stage's decision, either family.
#[derive(Clone, Copy)]
enum Decided {
    Forward(NextHop),
    /// For one of the VR's addresses, or a group it listens to (IPv6).
    Local,
    /// Control traffic to a group or the limited broadcast (IPv4).
    Punt,
    Icmp(DropReason),
    Drop(DropReason),
}

/// How far the input stages got before a drop reason stopped a packet,
/// in their order (`ipv4_input::process`, `ipv6_input::process`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    /// The header: length, version, checksum, martian addresses.
    Header,
    /// The reverse-path check.
    Urpf,
    /// IPv4 options.
    Options,
    /// The ingress rule list.
    Filter,
    /// Past all of them: at the FIB's answer or after it.
    Past,
}

fn level(reason: DropReason, src_unspecified: bool) -> Level {
    use DropReason as D;
    match reason {
        D::Ipv4Truncated
        | D::Ipv4BadVersion
        | D::Ipv4BadChecksum
        | D::MartianSource
        | D::MartianDestination
        | D::Ipv6Truncated
        | D::Ipv6BadVersion => Level::Header,
        // The unspecified source is refused only once the packet is
        // known not to be for the router (DAD is).
        D::Ipv6MartianAddress if !src_unspecified => Level::Header,
        D::Urpf => Level::Urpf,
        D::Ipv4BadOptions => Level::Options,
        D::Filtered => Level::Filter,
        _ => Level::Past,
    }
}

/// A next hop as a trace shows it.
fn hop_of(r: &RouteHop) -> Hop {
    match *r {
        RouteHop::Local => Hop::Local,
        RouteHop::Broadcast => Hop::Broadcast,
        RouteHop::Blackhole => Hop::Blackhole,
        RouteHop::Unreachable => Hop::Unreachable,
        RouteHop::Connected { iface } => Hop::Connected {
            iface: IfaceId::new(iface),
        },
        RouteHop::Gateway { iface, addr } => Hop::Gateway {
            iface: IfaceId::new(iface),
            addr,
        },
        RouteHop::Group { members, .. } => Hop::Multipath { members },
    }
}

/// The IP header at the start of `l3`, as far as it can be read.
fn read_ip(l3: &[u8], v6: bool) -> Option<IpHeader> {
    let word = |at: usize| l3.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    if v6 {
        let h = l3.get(..40)?;
        let addr = |at: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&h[at..at + 16]);
            IpAddr::V6(Ipv6Addr::from(a))
        };
        let payload = l3.get(40..).unwrap_or(&[]);
        let walk = wire6::walk_extension_headers(IpProtocol::from(h[6]), payload).ok();
        let (protocol, at, fragment) = match &walk {
            Some(w) => (u8::from(w.upper), 40 + w.offset, w.fragment.is_some()),
            None => (h[6], 40, false),
        };
        let (ports, icmp) = upper(l3, protocol, at, !fragment);
        return Some(IpHeader {
            src: addr(8),
            dst: addr(24),
            protocol,
            ttl: h[7],
            len: word(4)?.saturating_add(40),
            df: false,
            fragment,
            ports,
            icmp,
        });
    }
    let h = l3.get(..20)?;
    let ip = |at: usize| IpAddr::V4(Ipv4Addr::new(h[at], h[at + 1], h[at + 2], h[at + 3]));
    let flags = word(6)?;
    let fragment = flags & 0x3fff != 0;
    let (ports, icmp) = upper(l3, h[9], usize::from(h[0] & 0x0f) * 4, flags & 0x1fff == 0);
    Some(IpHeader {
        src: ip(12),
        dst: ip(16),
        protocol: h[9],
        ttl: h[8],
        len: word(2)?,
        df: flags & 0x4000 != 0,
        fragment,
        ports,
        icmp,
    })
}

/// A transport header's ports, or an ICMP message's type and code.
type Upper = (Option<(u16, u16)>, Option<(u8, u8)>);

/// The ports (TCP, UDP, SCTP) or ICMP type and code at `at` of `l3`,
/// where there are any to read (`first`: no later fragment).
fn upper(l3: &[u8], protocol: u8, at: usize, first: bool) -> Upper {
    let Some(b) = l3.get(at..at + 4).filter(|_| first) else {
        return (None, None);
    };
    match protocol {
        6 | 17 | 132 => (
            Some((
                u16::from_be_bytes([b[0], b[1]]),
                u16::from_be_bytes([b[2], b[3]]),
            )),
            None,
        ),
        1 | 58 => (None, Some((b[0], b[1]))),
        _ => (None, None),
    }
}

/// What the counters of a traced frame's port and interface, and the
/// transmit queues, held at one instant.
struct Snapshot {
    drops: [u64; DropReason::COUNT],
    local: u64,
    icmp_rate_limited: u64,
    icmp_suppressed: u64,
    icmp_no_source: u64,
    queued: Vec<usize>,
}

impl Snapshot {
    fn take(c: &WorkerCounters, port: u16, iface: u16, tx: &TxBatch) -> Snapshot {
        let p = c.ports.get(usize::from(port));
        let i = c.ifaces.get(usize::from(iface));
        let get = |f: fn(&crate::counters::CounterCells) -> u64| i.map_or(0, f);
        Snapshot {
            drops: std::array::from_fn(|r| p.map_or(0, |p| p.drops[r].get())),
            local: get(|c| c.local.get()),
            icmp_rate_limited: get(|c| c.icmp_rate_limited.get()),
            icmp_suppressed: get(|c| c.icmp_suppressed.get()),
            icmp_no_source: get(|c| c.icmp_no_source.get()),
            queued: tx.ports.iter().map(Vec::len).collect(),
        }
    }

    /// What changed from `self` to `after`: the frame's outcome (`held`
    /// and `punted` are the caller's).
    fn outcome(&self, after: &Snapshot, shared: &Shared, tx: &TxBatch) -> Outcome {
        let drops = DropReason::ALL
            .iter()
            .copied()
            .filter(|&r| after.drops[r as usize] > self.drops[r as usize])
            .collect();
        let sent = tx
            .ports
            .iter()
            .zip(&self.queued)
            .flat_map(|(q, &from)| q.get(from..).unwrap_or(&[]))
            .map(|m| sent_frame(shared, m))
            .collect();
        let icmp_not_sent = if after.icmp_rate_limited > self.icmp_rate_limited {
            Some("the VR's ICMP rate limit")
        } else if after.icmp_suppressed > self.icmp_suppressed {
            Some("not about this packet (RFC 1812 §4.3.2.7, RFC 4443 §2.4(e))")
        } else if after.icmp_no_source > self.icmp_no_source {
            Some("no address of the family on the ingress interface")
        } else {
            None
        };
        Outcome {
            drops,
            sent,
            held: false,
            punted: false,
            local: after.local > self.local,
            icmp_not_sent,
        }
    }
}

/// A queued frame as a trace shows it.
fn sent_frame(shared: &Shared, m: &Mbuf) -> SentFrame {
    let d = m.data();
    let (tag, inner_vlan) = tags(d).unwrap_or((None, None));
    let l2 = 14 + 4 * (usize::from(tag.is_some()) + usize::from(inner_vlan.is_some()));
    let ethertype = d
        .get(l2 - 2..l2)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    let mut dst = [0u8; 6];
    if let Some(b) = d.get(..6) {
        dst.copy_from_slice(b);
    }
    let l3 = d.get(l2..).unwrap_or(&[]);
    let ip = match ethertype {
        0x0800 => read_ip(l3, false),
        0x86dd => read_ip(l3, true),
        _ => None,
    };
    let iface = shared
        .demux_slot(m.port, tag.map(|t| t.1), inner_vlan)
        .filter(|&i| i != NO_IFACE && usize::from(i) < shared.ifaces.len())
        .map(IfaceId::new);
    SentFrame {
        port: m.port,
        iface,
        tag,
        inner_vlan,
        dst: EthernetAddress(dst),
        ethertype,
        generated: m.local_origin,
        ip,
        len: d.len(),
    }
}
