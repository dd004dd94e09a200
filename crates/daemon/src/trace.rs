//! Packet trace through the API (`vrhost ctl trace VR`): arms a trace on the
//! workers, waits for its packets, and answers them with names.
//!
//! ```text
//!   API thread: lock tables ─ VR, interface by name ─ TraceHub::arm ─ unlock
//!                 └─ Trace::wait(count or seconds) ◀── workers' records (crate::trace in the data plane)
//!               lock tables ─ indices → names, destination → matched route ─ TraceReport
//!   (the trace is disarmed when its handle drops, whatever happens)
//! ```
//!
//! A trace is tenant-scoped as every VR path is: the API checks the token
//! against the VR before this runs, and a trace records that VR's packets
//! only. Bounds: `vrhost_dataplane::trace::MAX_TRACES` at once,
//! `MAX_PER_VR` per VR (429), `MAX_COUNT` packets each.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use vrhost_api::types::{
    MacAddr, PacketTrace as ApiPacket, Prefix, TraceDrop, TraceHop, TraceIp, TraceOutcome,
    TraceQuery, TraceReport, TraceSent, TraceStep, TRACE_COUNT_DEFAULT, TRACE_COUNT_MAX,
    TRACE_SECONDS_DEFAULT,
};
use vrhost_api::ApiError;
use vrhost_dataplane::neighbor::State;
use vrhost_dataplane::trace::{
    FilterDir, Hop, IpHeader, L2Accept, MtuVerdict, PacketTrace, SentFrame, Step, TraceError,
    MAX_COUNT,
};
use vrhost_dataplane::{DropReason, PortId, TableWriter, VrId};
use vrhost_wire::ethernet::EthernetAddress;

use crate::tables_lock::lock;

// The API's bound is the data plane's.
const _: () = assert!(TRACE_COUNT_MAX == MAX_COUNT);

/// Traces the next packets of VR `vr` as `q` asks; see
/// [`vrhost_api::Backend::trace`].
pub fn run(writer: &Mutex<TableWriter>, vr: &str, q: &TraceQuery) -> Result<TraceReport, ApiError> {
    let count = q.count.unwrap_or(TRACE_COUNT_DEFAULT);
    let seconds = q.seconds.unwrap_or(TRACE_SECONDS_DEFAULT);
    let trace = {
        let c = lock(writer);
        let s = c.working();
        let id = s.vr_index(vr).ok_or(ApiError::NoSuchVr)?;
        let iface = match &q.interface {
            None => None,
            Some(name) => Some(
                s.vr_ifaces(id)
                    .iter()
                    .copied()
                    .find(|i| s.ifaces()[i.index()].name == *name)
                    .ok_or_else(|| ApiError::NotFound(format!("no interface {name:?}")))?,
            ),
        };
        c.trace_hub().arm(id, iface, count).map_err(|e| match e {
            TraceError::Count(_) => ApiError::bad("count", e.to_string()),
            TraceError::TooMany | TraceError::TooManyOnVr => ApiError::TooMany(e.to_string()),
        })?
    };
    tracing::info!(router = vr, count, seconds, interface = ?q.interface, "packet trace started");
    let packets = trace.wait(Instant::now() + Duration::from_secs(seconds));
    drop(trace);
    tracing::info!(router = vr, packets = packets.len(), "packet trace ended");
    let c = lock(writer);
    Ok(TraceReport {
        vr: vr.to_string(),
        count,
        packets: packets.iter().map(|p| Names { c: &c }.packet(p)).collect(),
    })
}

/// The tables' names for the indices in a record.
struct Names<'a> {
    c: &'a TableWriter,
}

impl Names<'_> {
    fn iface(&self, i: vrhost_dataplane::IfaceId) -> String {
        self.c
            .working()
            .ifaces()
            .get(i.index())
            .map_or_else(|| format!("#{}", i.index()), |f| f.name.clone())
    }

    fn port(&self, p: u16) -> String {
        let s = self.c.working();
        if usize::from(p) < s.port_count() {
            s.port_name(PortId::new(p)).to_string()
        } else {
            format!("#{p}")
        }
    }

    fn hop(&self, h: &Hop) -> TraceHop {
        let (kind, via, interface, gateways) = match *h {
            Hop::Local => ("local", None, None, None),
            Hop::Broadcast => ("broadcast", None, None, None),
            Hop::Blackhole => ("blackhole", None, None, None),
            Hop::Unreachable => ("unreachable", None, None, None),
            Hop::Connected { iface } => ("connected", None, Some(self.iface(iface)), None),
            Hop::Gateway { iface, addr } => ("gateway", Some(addr), Some(self.iface(iface)), None),
            Hop::Multipath { members } => ("multipath", None, None, Some(members)),
        };
        TraceHop {
            kind: kind.into(),
            via,
            interface,
            gateways,
        }
    }

    fn packet(&self, p: &PacketTrace) -> ApiPacket {
        let steps: Vec<TraceStep> = p.steps.iter().map(|s| self.step(p.vr, s)).collect();
        let fragmented = p.steps.iter().any(|s| {
            matches!(
                s,
                Step::Mtu {
                    verdict: MtuVerdict::Fragment,
                    ..
                }
            )
        });
        ApiPacket {
            worker: p.worker as u32,
            port: self.port(p.port),
            length: p.len as u32,
            steps,
            outcome: self.outcome(&p.outcome, fragmented),
        }
    }

    fn step(&self, vr: VrId, s: &Step) -> TraceStep {
        match s {
            Step::Demux {
                port,
                tag,
                inner_vlan,
                iface,
                result,
            } => TraceStep::Demux {
                port: self.port(*port),
                tpid: tag.map(|(t, _)| format!("{t:#06x}")),
                vlan: tag.map(|(_, v)| v),
                inner_vlan: *inner_vlan,
                interface: iface.map(|i| self.iface(i)),
                drop: result.err().map(|r| r.name().to_string()),
            },
            Step::L2 {
                dst,
                src,
                ethertype,
                accepted,
            } => TraceStep::L2Accept {
                dst_mac: mac(*dst),
                src_mac: mac(*src),
                ethertype: format!("{ethertype:#06x}"),
                accepted_as: accepted.map(|a| {
                    match a {
                        L2Accept::Own => "interface MAC",
                        L2Accept::Broadcast => "broadcast",
                        L2Accept::Multicast => "multicast group",
                    }
                    .to_string()
                }),
            },
            Step::RateCeiling { admitted } => TraceStep::RateCeiling {
                admitted: *admitted,
            },
            Step::FairShare { admitted } => TraceStep::FairShare {
                admitted: *admitted,
            },
            Step::Arp {
                operation,
                sender,
                sender_mac,
                target,
            } => TraceStep::Arp {
                operation: match operation {
                    1 => "request".to_string(),
                    2 => "reply".to_string(),
                    n => format!("operation {n}"),
                },
                sender: *sender,
                sender_mac: mac(*sender_mac),
                target: *target,
            },
            Step::Ip { header, checks } => TraceStep::Ip {
                header: header.as_ref().map(ip),
                drop: checks.err().map(|r| r.name().to_string()),
            },
            Step::Urpf {
                mode,
                src,
                route,
                pass,
            } => TraceStep::Urpf {
                mode: mode.name().to_string(),
                source: *src,
                route: route.as_ref().map(|h| self.hop(h)),
                pass: *pass,
            },
            Step::Filter {
                dir,
                list,
                rule,
                permit,
            } => TraceStep::Filter {
                direction: match dir {
                    FilterDir::In => "in",
                    FilterDir::Out => "out",
                }
                .to_string(),
                list: list.clone(),
                rule: rule.map(|r| r + 1),
                permit: *permit,
            },
            Step::Route {
                dst,
                next_hop,
                hop,
                member,
            } => TraceStep::Route {
                destination: *dst,
                prefix: next_hop
                    .and_then(|_| self.matched(vr, *dst))
                    .and_then(|(a, l)| Prefix::new(a, l).ok()),
                next_hop: *next_hop,
                target: hop.as_ref().map(|h| self.hop(h)),
                member: member.as_ref().map(|h| self.hop(h)),
            },
            Step::ForUs { group } => TraceStep::ForUs { group: *group },
            Step::Ttl { ttl, pass } => TraceStep::Ttl {
                ttl: *ttl,
                pass: *pass,
            },
            Step::Mtu {
                len,
                mtu,
                df,
                verdict,
            } => TraceStep::Mtu {
                length: *len as u32,
                mtu: *mtu,
                df: *df,
                verdict: match verdict {
                    MtuVerdict::Fits => "fits",
                    MtuVerdict::Fragment => "fragment",
                    MtuVerdict::TooBig => "too_big",
                }
                .to_string(),
            },
            Step::Neighbor {
                iface,
                addr,
                state,
                mac: m,
            } => TraceStep::Neighbor {
                interface: self.iface(*iface),
                address: *addr,
                state: match state {
                    None => "none",
                    Some(State::Unresolved) => "unresolved",
                    Some(State::Incomplete) => "incomplete",
                    Some(State::Reachable) => "reachable",
                    Some(State::Stale) => "stale",
                    Some(State::Failed) => "failed",
                    Some(State::Static) => "static",
                }
                .to_string(),
                mac: m.map(mac),
            },
        }
    }

    /// The route of `vr` that `dst` matches now: the FIB's leaf says
    /// what, the route table which prefix.
    fn matched(&self, vr: VrId, dst: IpAddr) -> Option<(IpAddr, u8)> {
        self.c
            .longest_match(vr, dst)
            .map(|(p, _)| (p.addr(), p.len()))
    }

    fn outcome(&self, o: &vrhost_dataplane::trace::Outcome, fragmented: bool) -> TraceOutcome {
        // Fragments are built by the router, but they are the packet.
        let forwarded = o
            .sent
            .iter()
            .any(|s| !s.generated || (fragmented && s.ip.as_ref().is_some_and(|h| h.fragment)));
        let verdict = if forwarded {
            "forwarded"
        } else if !o.drops.is_empty() {
            "dropped"
        } else if o.held {
            "held"
        } else if o.punted {
            "punted"
        } else {
            "local"
        };
        TraceOutcome {
            verdict: verdict.to_string(),
            drops: o.drops.iter().map(|&r| drop_of(r)).collect(),
            sent: o.sent.iter().map(|s| self.sent(s)).collect(),
            held: o.held,
            punted: o.punted,
            local: o.local,
            icmp_not_sent: o.icmp_not_sent.map(str::to_string),
        }
    }

    fn sent(&self, s: &SentFrame) -> TraceSent {
        TraceSent {
            port: self.port(s.port),
            interface: s.iface.map(|i| self.iface(i)),
            vlan: s.tag.map(|(_, v)| v),
            inner_vlan: s.inner_vlan,
            dst_mac: mac(s.dst),
            ethertype: format!("{:#06x}", s.ethertype),
            generated: s.generated,
            ip: s.ip.as_ref().map(ip),
            length: s.len as u32,
        }
    }
}

fn drop_of(r: DropReason) -> TraceDrop {
    TraceDrop {
        reason: r.name().to_string(),
        description: r.description().to_string(),
    }
}

fn mac(m: EthernetAddress) -> MacAddr {
    MacAddr(m.0)
}

fn ip(h: &IpHeader) -> TraceIp {
    let protocol = match (h.protocol, h.src) {
        (58, IpAddr::V6(_)) => "icmpv6".to_string(),
        (p, _) => {
            vrhost_dataplane::filter::protocol_name(p).map_or_else(|| p.to_string(), str::to_string)
        }
    };
    TraceIp {
        src: h.src,
        dst: h.dst,
        protocol,
        ttl: h.ttl,
        length: h.len,
        df: h.df,
        fragment: h.fragment,
        src_port: h.ports.map(|(s, _)| s),
        dst_port: h.ports.map(|(_, d)| d),
        icmp_type: h.icmp.map(|(t, _)| t),
        icmp_code: h.icmp.map(|(_, c)| c),
    }
}
