//! Packet trace: `GET /v1/vrs/{vr}/trace` and what it answers.

use std::net::{IpAddr, Ipv4Addr};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{MacAddr, Prefix};

/// Packets a trace records when the query gives no `count`.
pub const TRACE_COUNT_DEFAULT: u32 = 10;
/// Most packets one trace records.
pub const TRACE_COUNT_MAX: u32 = 1000;
/// Seconds a trace waits when the query gives no `seconds`.
pub const TRACE_SECONDS_DEFAULT: u64 = 10;
/// Most seconds a trace waits.
pub const TRACE_SECONDS_MAX: u64 = 120;

/// `GET /v1/vrs/{vr}/trace` query: which packets to trace, and how long to
/// wait for them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceQuery {
    /// Packets to trace (default 10, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Only packets that come in on this interface of the VR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Answer after this many seconds with what was traced by then
    /// (default 10, at most 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
}

/// The packets a trace recorded, in the order they were run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TraceReport {
    /// The VR.
    pub vr: String,
    /// Packets asked for; `packets` holds fewer when the time ran out.
    pub count: u32,
    /// The traced packets.
    pub packets: Vec<PacketTrace>,
}

/// One traced packet: every decision the stages made about it, in order,
/// and where it went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PacketTrace {
    /// The worker that ran it.
    pub worker: u32,
    /// The port it came in on.
    pub port: String,
    /// Frame length.
    pub length: u32,
    /// Each decision with what it was made on.
    pub steps: Vec<TraceStep>,
    /// Where it went.
    pub outcome: TraceOutcome,
}

/// One decision of the stages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum TraceStep {
    /// (port, VLAN) → interface.
    Demux {
        /// Port.
        port: String,
        /// The outer tag's TPID (`0x8100`, `0x88a8`), if tagged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tpid: Option<String>,
        /// The outer VLAN, if tagged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vlan: Option<u16>,
        /// The inner VLAN of a double-tagged frame.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        inner_vlan: Option<u16>,
        /// The interface they lead to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interface: Option<String>,
        /// The drop reason, when demux refused the frame.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        drop: Option<String>,
    },
    /// The destination MAC against the interface's.
    L2Accept {
        /// Destination MAC.
        dst_mac: MacAddr,
        /// Source MAC.
        src_mac: MacAddr,
        /// The innermost EtherType, `0x0800`.
        ethertype: String,
        /// `interface MAC`, `broadcast` or `multicast group`; absent when
        /// the frame is not for the interface.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        accepted_as: Option<String>,
    },
    /// The VR's rate ceiling (`pps`, `bps`).
    RateCeiling {
        /// Admitted.
        admitted: bool,
    },
    /// The VR's fair share of a saturated worker.
    FairShare {
        /// Admitted.
        admitted: bool,
    },
    /// An ARP message.
    Arp {
        /// `request`, `reply` or the operation's number.
        operation: String,
        /// Sender's address.
        sender: Ipv4Addr,
        /// Sender's MAC.
        sender_mac: MacAddr,
        /// Target address.
        target: Ipv4Addr,
    },
    /// The IP header and the input checks: length, version, checksum,
    /// martian addresses, options.
    Ip {
        /// The header, when long enough to read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        header: Option<TraceIp>,
        /// The check that failed, as a drop reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        drop: Option<String>,
    },
    /// The reverse-path check of the source (RFC 3704).
    Urpf {
        /// `loose` or `strict`.
        mode: String,
        /// The source address.
        source: IpAddr,
        /// The source's route; absent: none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route: Option<TraceHop>,
        /// Passed.
        pass: bool,
    },
    /// A rule list.
    Filter {
        /// `in` (the ingress interface's `filter_in`) or `out` (the egress
        /// interface's `filter_out`).
        direction: String,
        /// The list.
        list: String,
        /// The rule that decided, counted from 1; absent: the list's
        /// default (or neighbour discovery, let through).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<u32>,
        /// Permitted.
        permit: bool,
    },
    /// The FIB's answer for the destination.
    Route {
        /// The destination.
        destination: IpAddr,
        /// The route it matched (longest prefix, as the table holds it
        /// when the trace is answered); absent: no route.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<Prefix>,
        /// The FIB leaf's next-hop id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_hop: Option<u32>,
        /// What the route points at; absent: no route.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<TraceHop>,
        /// For a multipath route, the gateway the packet's flow picked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        member: Option<TraceHop>,
    },
    /// For the router itself.
    ForUs {
        /// To a multicast group or the broadcast address rather than one of
        /// the VR's own addresses.
        group: bool,
    },
    /// TTL or hop limit, before the decrement.
    Ttl {
        /// The value.
        ttl: u8,
        /// More than 1.
        pass: bool,
    },
    /// The egress MTU.
    Mtu {
        /// The packet's length (a super-frame's longest segment).
        length: u32,
        /// The egress interface's MTU.
        mtu: u16,
        /// IPv4 Don't Fragment.
        df: bool,
        /// `fits`, `fragment` or `too_big`.
        verdict: String,
    },
    /// The next hop's neighbour entry as this packet found it.
    Neighbor {
        /// Egress interface.
        interface: String,
        /// The neighbour's address.
        address: IpAddr,
        /// `none` (no entry yet), `unresolved`, `incomplete`, `reachable`,
        /// `stale`, `failed` or `static`.
        state: String,
        /// Its MAC, when it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mac: Option<MacAddr>,
    },
}

/// An IP header in a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TraceIp {
    /// Source.
    pub src: IpAddr,
    /// Destination.
    pub dst: IpAddr,
    /// Protocol: a name (`udp`, `tcp`, `icmp`, `icmpv6`, ...) or a number.
    pub protocol: String,
    /// TTL or hop limit.
    pub ttl: u8,
    /// Total length (IPv6: with the 40-byte header).
    pub length: u16,
    /// IPv4 Don't Fragment.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub df: bool,
    /// A fragment.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fragment: bool,
    /// Source port (TCP, UDP, SCTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_port: Option<u16>,
    /// Destination port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_port: Option<u16>,
    /// ICMP or ICMPv6 type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP or ICMPv6 code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<u8>,
}

/// A next hop in a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TraceHop {
    /// `local`, `broadcast`, `blackhole`, `unreachable`, `connected`,
    /// `gateway` or `multipath`.
    pub kind: String,
    /// The gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<IpAddr>,
    /// The egress interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// A multipath route's gateway count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateways: Option<u16>,
}

/// Where a traced packet went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TraceOutcome {
    /// In one word: `forwarded`, `dropped`, `held` (waiting for its next
    /// hop's MAC), `punted` (to the VR's control plane) or `local`
    /// (answered or learned from in the data plane).
    pub verdict: String,
    /// The drop reasons counted: the packet's own, and any of what it made
    /// the router send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drops: Vec<TraceDrop>,
    /// What was queued to leave: the packet (or its fragments), and what it
    /// made the router send (ICMP errors, replies, ARP and ND probes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sent: Vec<TraceSent>,
    /// It (or what it made the router send) waits for a neighbour's MAC.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// Put on the VR's punt queue.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub punted: bool,
    /// Answered or learned from in the data plane.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local: bool,
    /// Why an ICMP error that was due was not sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_not_sent: Option<String>,
}

/// A drop reason in a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TraceDrop {
    /// The counter's name (`vrhost drop-reasons`).
    pub reason: String,
    /// The rule it stands for.
    pub description: String,
}

/// A frame queued to leave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TraceSent {
    /// Egress port.
    pub port: String,
    /// Egress interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Outer VLAN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// Inner VLAN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner_vlan: Option<u16>,
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// The innermost EtherType, `0x0800`.
    pub ethertype: String,
    /// Built by the router (an ICMP error, a reply, a probe, a fragment)
    /// rather than the packet itself.
    pub generated: bool,
    /// Its IP header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<TraceIp>,
    /// Frame length.
    pub length: u32,
}
