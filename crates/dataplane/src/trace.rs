//! Packet trace: the next frames of one VR, each with every decision the
//! stages made about it, what that decision was made on, and where the
//! frame went (`vrhost ctl trace VR`).
//!
//! ```text
//!   control (API thread)                       worker k, per burst
//!   TraceHub::arm(vr, iface, count) ──┐
//!        │                            └─▶ armed ──▶ process_burst: [armed? one relaxed load]
//!        │                                              │ no: plain / many / split / mixed, untouched
//!        │                                              ▼ yes
//!        │                          the traced VRs' frames, one by one, through the full
//!        │                          stages (crate::traced); each claimed frame's Steps and
//!        │                          Outcome recorded ──▶ session queue (bounded: count)
//!   Trace::wait(deadline) ◀──────────────────────────────────────────┘
//!   Trace dropped ──▶ disarmed
//! ```
//!
//! What it costs forwarding: with no trace armed, one relaxed atomic load
//! per burst; no stage's code changes (the traced driver reads what the
//! stages decide through a generic observer that the untraced path
//! instantiates with `()`). Armed, the bursts that hold a traced VR's
//! frames send those frames through the full stages, frame by frame (the
//! fast path decides as they do: `tests/fast_path.rs`), and every other
//! frame the usual way.
//!
//! Bounds: [`MAX_TRACES`] traces at once, [`MAX_PER_VR`] per VR,
//! [`MAX_COUNT`] packets each; every worker claims a packet from the
//! trace's count before recording it, so a trace never holds more. A
//! recorded packet allocates its steps and outcome (a traced packet only:
//! at most `MAX_COUNT` per trace).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use vrhost_wire::ethernet::EthernetAddress;

use crate::drop_reason::DropReason;
use crate::mbuf::Mbuf;
use crate::neighbor::State;
use crate::spec::{IfaceId, Urpf, VrId};

/// Traces armed at once, all VRs.
pub const MAX_TRACES: usize = 8;
/// Traces armed at once on one VR.
pub const MAX_PER_VR: usize = 2;
/// Packets one trace records at most.
pub const MAX_COUNT: u32 = 1000;

/// Why a trace was not armed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// [`MAX_TRACES`] traces are armed already.
    #[error("{MAX_TRACES} traces run already; retry later")]
    TooMany,
    /// [`MAX_PER_VR`] traces are armed on this VR already.
    #[error("{MAX_PER_VR} traces run on this VR already; retry later")]
    TooManyOnVr,
    /// The count is 0 or above [`MAX_COUNT`].
    #[error("count must be 1 to {MAX_COUNT}, not {0}")]
    Count(u32),
}

// ------------------------------------------------------------- records --

/// How the destination MAC was accepted by the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2Accept {
    /// The interface's own MAC.
    Own,
    /// Broadcast.
    Broadcast,
    /// A multicast group the VR joined.
    Multicast,
}

/// The direction of a rule list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterDir {
    /// `filter_in` of the ingress interface.
    In,
    /// `filter_out` of the egress interface.
    Out,
}

/// What the MTU check made of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtuVerdict {
    /// It fits the egress MTU.
    Fits,
    /// Too large, no DF (IPv4): fragmented.
    Fragment,
    /// Too large with DF, or IPv6: refused with Fragmentation Needed /
    /// Packet Too Big.
    TooBig,
}

/// The IP header of a traced packet, as read before the checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpHeader {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Protocol (IPv4) or next header (IPv6).
    pub protocol: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// Total length (IPv4) or 40 + payload length (IPv6).
    pub len: u16,
    /// IPv4 DF.
    pub df: bool,
    /// An IPv4 fragment (MF or an offset).
    pub fragment: bool,
    /// TCP, UDP or SCTP ports, when the header is there to read.
    pub ports: Option<(u16, u16)>,
    /// ICMP or ICMPv6 type and code, when there to read.
    pub icmp: Option<(u8, u8)>,
}

/// One decision of the stages, with what it was made on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Demux: the port and tags of the frame, and the interface they lead
    /// to (`None` when they lead nowhere: `result` says why).
    Demux {
        /// Port.
        port: u16,
        /// Outer tag's TPID and VLAN, if tagged.
        tag: Option<(u16, u16)>,
        /// Inner VLAN of a QinQ frame.
        inner_vlan: Option<u16>,
        /// The interface.
        iface: Option<IfaceId>,
        /// Passed, or the drop reason.
        result: Result<(), DropReason>,
    },
    /// L2 accept: the destination MAC against the interface's.
    L2 {
        /// Destination MAC.
        dst: EthernetAddress,
        /// Source MAC.
        src: EthernetAddress,
        /// The (innermost) EtherType.
        ethertype: u16,
        /// How it was accepted; `None`: not for us.
        accepted: Option<L2Accept>,
    },
    /// The VR's rate ceiling (only for a VR with one).
    RateCeiling {
        /// Admitted.
        admitted: bool,
    },
    /// The VR's fair share of a saturated worker (only while enforced).
    FairShare {
        /// Admitted.
        admitted: bool,
    },
    /// An ARP message.
    Arp {
        /// Operation (1 request, 2 reply).
        operation: u16,
        /// Sender's protocol address.
        sender: Ipv4Addr,
        /// Sender's MAC.
        sender_mac: EthernetAddress,
        /// Target protocol address.
        target: Ipv4Addr,
    },
    /// The IP header and its checks: version, length, checksum, martian
    /// addresses and options (the family's input stage).
    Ip {
        /// The header, unless too short to read.
        header: Option<IpHeader>,
        /// Passed, or the check that failed.
        checks: Result<(), DropReason>,
    },
    /// The reverse-path check of the source (RFC 3704).
    Urpf {
        /// The interface's mode.
        mode: Urpf,
        /// The source.
        src: IpAddr,
        /// What the VR's table says about it (`None`: no route).
        route: Option<Hop>,
        /// Passed.
        pass: bool,
    },
    /// A rule list.
    Filter {
        /// Which of the two.
        dir: FilterDir,
        /// The list's name.
        list: String,
        /// The rule that decided (0-based), `None` for the list's default
        /// or neighbor discovery let through.
        rule: Option<u32>,
        /// Permitted.
        permit: bool,
    },
    /// The FIB's answer for the destination.
    Route {
        /// The destination looked up.
        dst: IpAddr,
        /// The next-hop id of the FIB leaf (`None`: no route).
        next_hop: Option<u32>,
        /// What it means.
        hop: Option<Hop>,
        /// For a multipath route, the gateway the flow's hash picked.
        member: Option<Hop>,
    },
    /// A packet for the router itself: local delivery (answered in the
    /// worker or punted to the VR's control plane).
    ForUs {
        /// Multicast or broadcast control traffic rather than one of the
        /// VR's own addresses.
        group: bool,
    },
    /// TTL or hop limit before the decrement.
    Ttl {
        /// The value.
        ttl: u8,
        /// More than 1.
        pass: bool,
    },
    /// The egress MTU.
    Mtu {
        /// The packet's length (a super-frame's longest segment).
        len: usize,
        /// The egress interface's MTU.
        mtu: u16,
        /// IPv4 DF.
        df: bool,
        /// What was made of it.
        verdict: MtuVerdict,
    },
    /// The next hop's neighbor entry, before this packet used it.
    Neighbor {
        /// Egress interface.
        iface: IfaceId,
        /// The neighbor's address.
        addr: IpAddr,
        /// Its state (`None`: no entry yet).
        state: Option<State>,
        /// Its MAC, when it has one.
        mac: Option<EthernetAddress>,
    },
}

/// A next hop as a trace shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// One of the VR's own addresses.
    Local,
    /// A directed broadcast address.
    Broadcast,
    /// A blackhole route.
    Blackhole,
    /// An unreachable route.
    Unreachable,
    /// An attached subnet.
    Connected {
        /// Egress interface.
        iface: IfaceId,
    },
    /// A gateway.
    Gateway {
        /// Egress interface.
        iface: IfaceId,
        /// The gateway's address.
        addr: IpAddr,
    },
    /// A multipath group.
    Multipath {
        /// Its gateways.
        members: u16,
    },
}

/// A frame the traced packet left as, or made the router send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentFrame {
    /// Egress port.
    pub port: u16,
    /// The interface of that port and the frame's tags, if there is one.
    pub iface: Option<IfaceId>,
    /// Outer tag's TPID and VLAN, if tagged.
    pub tag: Option<(u16, u16)>,
    /// Inner VLAN of a QinQ frame.
    pub inner_vlan: Option<u16>,
    /// Destination MAC.
    pub dst: EthernetAddress,
    /// The innermost EtherType.
    pub ethertype: u16,
    /// Built by the router (an ICMP error, a reply, an ARP or NDP probe,
    /// a fragment) rather than the packet itself, forwarded.
    pub generated: bool,
    /// Its IP header, for IP frames.
    pub ip: Option<IpHeader>,
    /// Frame length.
    pub len: usize,
}

/// Where a traced packet went, as the worker's counters and queues saw it
/// change while the stages ran it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Drop reasons counted (the packet's own, and any of what it made
    /// the router send).
    pub drops: Vec<DropReason>,
    /// Frames queued for transmission: the packet forwarded (or its
    /// fragments), and what it made the router send.
    pub sent: Vec<SentFrame>,
    /// Held while its next hop's MAC is resolved.
    pub held: bool,
    /// Put on the VR's punt queue for its control plane.
    pub punted: bool,
    /// Answered or learned from in the data plane (echo, ARP, NDP).
    pub local: bool,
    /// An ICMP error was due but not sent: rate limit, RFC 1812
    /// §4.3.2.7 / RFC 4443 §2.4(e), or no source address.
    pub icmp_not_sent: Option<&'static str>,
}

/// One traced packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketTrace {
    /// The worker that ran it.
    pub worker: usize,
    /// The worker's clock when it ran, in nanoseconds.
    pub now: u64,
    /// The VR.
    pub vr: VrId,
    /// The port it came in on.
    pub port: u16,
    /// Its length.
    pub len: usize,
    /// Every decision, in order.
    pub steps: Vec<Step>,
    /// Where it went.
    pub outcome: Outcome,
}

// ----------------------------------------------------------------- hub --

/// The registry of armed traces, shared by the control side and every
/// worker of one set of tables ([`crate::TableWriter::trace_hub`]).
#[derive(Debug, Default)]
pub struct TraceHub {
    /// Some trace is armed: the one load a burst pays.
    armed: AtomicBool,
    /// Bumped on every arm and disarm; workers re-read `sessions` when it
    /// moved.
    generation: AtomicU64,
    sessions: Mutex<Vec<Arc<Session>>>,
}

impl TraceHub {
    fn sessions(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Arms a trace of the next `count` packets of VR `vr` (of its
    /// interface `iface` only, if given). The packets arrive on the
    /// returned [`Trace`]; dropping it disarms.
    pub fn arm(
        self: &Arc<Self>,
        vr: VrId,
        iface: Option<IfaceId>,
        count: u32,
    ) -> Result<Trace, TraceError> {
        if count == 0 || count > MAX_COUNT {
            return Err(TraceError::Count(count));
        }
        let vr = u16::try_from(vr.index()).unwrap_or(u16::MAX);
        let mut sessions = self.sessions();
        if sessions.len() >= MAX_TRACES {
            return Err(TraceError::TooMany);
        }
        if sessions.iter().filter(|s| s.vr == vr).count() >= MAX_PER_VR {
            return Err(TraceError::TooManyOnVr);
        }
        // Room for every packet the count lets workers claim: a send
        // never waits and never fails.
        let (tx, rx) = std::sync::mpsc::sync_channel(count as usize);
        let session = Arc::new(Session {
            vr,
            iface: iface.map(IfaceId::get),
            left: AtomicU32::new(count),
            tx,
        });
        sessions.push(session.clone());
        self.armed.store(true, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(Trace {
            hub: self.clone(),
            session,
            rx,
            count,
        })
    }

    fn disarm(&self, s: &Arc<Session>) {
        let mut sessions = self.sessions();
        sessions.retain(|x| !Arc::ptr_eq(x, s));
        self.armed.store(!sessions.is_empty(), Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Traces armed now.
    pub fn running(&self) -> usize {
        self.sessions().len()
    }
}

/// One armed trace, as workers see it.
#[derive(Debug)]
pub(crate) struct Session {
    vr: u16,
    iface: Option<u16>,
    /// Packets still to claim.
    left: AtomicU32,
    tx: SyncSender<PacketTrace>,
}

impl Session {
    /// Whether the trace is of VR `vr` and is still counting.
    fn wants_vr(&self, vr: u16) -> bool {
        self.vr == vr && self.left.load(Ordering::Relaxed) > 0
    }

    /// Claims one packet of interface `iface` of VR `vr`, if the trace
    /// wants it and has any left.
    pub(crate) fn claim(&self, vr: u16, iface: u16) -> bool {
        self.vr == vr
            && self.iface.is_none_or(|i| i == iface)
            && self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }

    /// Hands a claimed packet's trace over (the queue holds every claim).
    pub(crate) fn deliver(&self, t: PacketTrace) {
        let _ = self.tx.try_send(t);
    }
}

/// An armed trace, on the control side.
pub struct Trace {
    hub: Arc<TraceHub>,
    session: Arc<Session>,
    rx: Receiver<PacketTrace>,
    count: u32,
}

impl Trace {
    /// The packets traced so far, waiting until all of them are or
    /// `deadline` passes (whichever comes first).
    pub fn wait(&self, deadline: Instant) -> Vec<PacketTrace> {
        let mut out = Vec::new();
        while out.len() < self.count as usize {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(t) => out.push(t),
                Err(_) => break,
            }
        }
        out
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.hub.disarm(&self.session);
    }
}

// -------------------------------------------------------- worker side --

/// One worker's view of the armed traces, and the buffers its traced
/// bursts reuse.
#[derive(Debug)]
pub(crate) struct WorkerTrace {
    hub: Arc<TraceHub>,
    seen: u64,
    pub(crate) active: Vec<Arc<Session>>,
    /// The traced VRs' frames of a burst.
    pub(crate) frames: Vec<Mbuf>,
    /// The rest of the burst.
    pub(crate) rest: Vec<Mbuf>,
}

impl WorkerTrace {
    /// A worker's side of `hub`.
    pub(crate) fn new(hub: Arc<TraceHub>) -> WorkerTrace {
        WorkerTrace {
            hub,
            seen: 0,
            active: Vec::new(),
            frames: Vec::new(),
            rest: Vec::new(),
        }
    }

    /// Whether any trace is armed: one relaxed load.
    #[inline(always)]
    pub(crate) fn armed(&self) -> bool {
        self.hub.armed.load(Ordering::Relaxed)
    }

    /// Re-reads the armed traces when they changed.
    pub(crate) fn refresh(&mut self) {
        let g = self.hub.generation.load(Ordering::Acquire);
        if g != self.seen {
            self.seen = g;
            self.active = self.hub.sessions().clone();
        }
    }

    /// Whether a trace still counting wants frames of VR `vr`.
    pub(crate) fn wants_vr(&self, vr: u16) -> bool {
        self.active.iter().any(|s| s.wants_vr(vr))
    }
}
