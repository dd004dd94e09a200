//! `vrhost ctl trace`: a packet trace as text, one block per packet, one
//! line per decision.
//!
//! ```text
//! packet 1 of 3: 60 bytes in on p0, worker 0 → forwarded
//!   demux       p0 untagged → red0
//!   l2          02:00:00:00:00:01 ← 02:aa:00:00:00:02 0x0800: interface MAC
//!   ip          10.0.0.2 → 192.0.2.9 udp 4000 → 9, ttl 64, 46 bytes: checks pass
//!   route       192.0.2.9 → 192.0.2.0/24 (next hop 6): gateway 10.1.0.2 on red1
//!   ttl         64 > 1: pass
//!   mtu         46 ≤ 1400: fits
//!   neighbour   10.1.0.2 on red1: static 02:bb:00:00:00:02
//!   sent        p1 (red1) vlan 100 to 02:bb:00:00:00:02: 10.0.0.2 → 192.0.2.9 udp, ttl 63
//! ```

use std::fmt::Write as _;

use crate::types::{TraceHop, TraceIp, TraceReport, TraceSent, TraceStep};

/// The whole report.
pub fn render(r: &TraceReport) -> String {
    let mut out = String::new();
    if r.packets.is_empty() {
        let _ = writeln!(out, "no packet of {} was traced in time", r.vr);
        return out;
    }
    let n = r.packets.len();
    for (i, p) in r.packets.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "packet {} of {n}: {} bytes in on {}, worker {} → {}",
            i + 1,
            p.length,
            p.port,
            p.worker,
            p.outcome.verdict
        );
        for s in &p.steps {
            let (what, line) = step(s);
            let _ = writeln!(out, "  {what:<11} {line}");
        }
        let o = &p.outcome;
        for d in &o.drops {
            let _ = writeln!(out, "  {:<11} {}: {}", "dropped", d.reason, d.description);
        }
        for s in &o.sent {
            let _ = writeln!(out, "  {:<11} {}", "sent", sent(s));
        }
        if let Some(why) = &o.icmp_not_sent {
            let _ = writeln!(out, "  {:<11} no ICMP error: {why}", "icmp");
        }
        if o.held {
            let _ = writeln!(out, "  {:<11} waits for a neighbour's MAC", "held");
        }
        if o.punted {
            let _ = writeln!(out, "  {:<11} to the VR's control plane", "punted");
        }
    }
    if n < r.count as usize {
        let _ = writeln!(
            out,
            "\n{n} of {} packets traced before the time ran out",
            r.count
        );
    }
    out
}

/// One decision: its stage's name and what it says.
fn step(s: &TraceStep) -> (&'static str, String) {
    let pass = |p: bool| if p { "pass" } else { "FAIL" };
    match s {
        TraceStep::Demux {
            port,
            tpid,
            vlan,
            inner_vlan,
            interface,
            drop,
        } => {
            let mut tags = match (tpid, vlan) {
                (Some(t), Some(v)) if t == "0x8100" => format!("vlan {v}"),
                (Some(t), Some(v)) => format!("tpid {t} vlan {v}"),
                _ => "untagged".to_string(),
            };
            if let Some(i) = inner_vlan {
                let _ = write!(tags, " inner vlan {i}");
            }
            let to = interface.as_deref().unwrap_or("no interface");
            let tail = drop.as_ref().map_or(String::new(), |d| format!(": {d}"));
            ("demux", format!("{port} {tags} → {to}{tail}"))
        }
        TraceStep::L2Accept {
            dst_mac,
            src_mac,
            ethertype,
            accepted_as,
        } => (
            "l2",
            format!(
                "{dst_mac} ← {src_mac} {ethertype}: {}",
                accepted_as.as_deref().unwrap_or("not for this interface")
            ),
        ),
        TraceStep::RateCeiling { admitted } => (
            "ceiling",
            format!("VR rate ceiling: {}", admitted_word(*admitted)),
        ),
        TraceStep::FairShare { admitted } => (
            "fair share",
            format!("VR share of the worker: {}", admitted_word(*admitted)),
        ),
        TraceStep::Arp {
            operation,
            sender,
            sender_mac,
            target,
        } => (
            "arp",
            format!("{operation} from {sender} ({sender_mac}) for {target}"),
        ),
        TraceStep::Ip { header, drop } => {
            let h = header
                .as_ref()
                .map_or("header too short to read".to_string(), ip);
            let verdict = drop
                .as_deref()
                .map_or("checks pass".to_string(), |d| format!("FAIL {d}"));
            ("ip", format!("{h}: {verdict}"))
        }
        TraceStep::Urpf {
            mode,
            source,
            route,
            pass: p,
        } => (
            "urpf",
            format!(
                "{mode}: source {source} → {}: {}",
                route.as_ref().map_or("no route".to_string(), hop),
                pass(*p)
            ),
        ),
        TraceStep::Filter {
            direction,
            list,
            rule,
            permit,
        } => (
            if direction == "in" {
                "filter_in"
            } else {
                "filter_out"
            },
            format!(
                "{list}: {} by {}",
                if *permit { "permit" } else { "DENY" },
                rule.map_or("its default".to_string(), |r| format!("rule {r}"))
            ),
        ),
        TraceStep::Route {
            destination,
            prefix,
            next_hop,
            target,
            member,
        } => {
            let mut line = format!("{destination} → ");
            match (prefix, target) {
                (Some(p), Some(t)) => {
                    let _ = write!(line, "{p}");
                    if let Some(n) = next_hop {
                        let _ = write!(line, " (next hop {n})");
                    }
                    let _ = write!(line, ": {}", hop(t));
                }
                (None, Some(t)) => {
                    let _ = write!(line, "{}", hop(t));
                }
                _ => line.push_str("no route"),
            }
            if let Some(m) = member {
                let _ = write!(line, "; this flow: {}", hop(m));
            }
            ("route", line)
        }
        TraceStep::ForUs { group } => (
            "for us",
            if *group {
                "a group or broadcast the router listens to".to_string()
            } else {
                "one of the VR's addresses".to_string()
            },
        ),
        TraceStep::Ttl { ttl, pass: p } => ("ttl", format!("{ttl}: {}", pass(*p))),
        TraceStep::Mtu {
            length,
            mtu,
            df,
            verdict,
        } => (
            "mtu",
            format!(
                "{length} bytes, mtu {mtu}{}: {}",
                if *df { ", DF" } else { "" },
                verdict.replace('_', " ")
            ),
        ),
        TraceStep::Neighbor {
            interface,
            address,
            state,
            mac,
        } => (
            "neighbour",
            format!(
                "{address} on {interface}: {state}{}",
                mac.map_or(String::new(), |m| format!(" {m}"))
            ),
        ),
    }
}

fn admitted_word(a: bool) -> &'static str {
    if a {
        "admitted"
    } else {
        "REFUSED"
    }
}

/// An IP header on one line.
fn ip(h: &TraceIp) -> String {
    let mut s = format!("{} → {} {}", h.src, h.dst, h.protocol);
    if let (Some(a), Some(b)) = (h.src_port, h.dst_port) {
        let _ = write!(s, " {a} → {b}");
    }
    if let Some(t) = h.icmp_type {
        let _ = write!(s, " type {t} code {}", h.icmp_code.unwrap_or(0));
    }
    let _ = write!(s, ", ttl {}, {} bytes", h.ttl, h.length);
    if h.df {
        s.push_str(", DF");
    }
    if h.fragment {
        s.push_str(", fragment");
    }
    s
}

/// A next hop in words.
fn hop(h: &TraceHop) -> String {
    let on = h
        .interface
        .as_deref()
        .map_or(String::new(), |i| format!(" on {i}"));
    match (h.kind.as_str(), h.via) {
        ("gateway", Some(v)) => format!("gateway {v}{on}"),
        ("multipath", _) => format!("multipath, {} gateways", h.gateways.unwrap_or(0)),
        (kind, _) => format!("{kind}{on}"),
    }
}

/// A frame that left.
fn sent(s: &TraceSent) -> String {
    let mut line = s.port.clone();
    if let Some(i) = &s.interface {
        let _ = write!(line, " ({i})");
    }
    if let Some(v) = s.vlan {
        let _ = write!(line, " vlan {v}");
    }
    if let Some(v) = s.inner_vlan {
        let _ = write!(line, " inner vlan {v}");
    }
    let _ = write!(line, " to {}", s.dst_mac);
    let what = match (&s.ip, s.ethertype.as_str()) {
        (Some(h), _) => ip(h),
        (None, "0x0806") => "ARP".to_string(),
        (None, e) => e.to_string(),
    };
    let _ = write!(
        line,
        ": {what}{}",
        if s.generated {
            " (made by the router)"
        } else {
            ""
        }
    );
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PacketTrace, TraceDrop, TraceOutcome};

    fn packet(steps: Vec<TraceStep>, outcome: TraceOutcome) -> PacketTrace {
        PacketTrace {
            worker: 1,
            port: "p1".into(),
            length: 64,
            steps,
            outcome,
        }
    }

    fn outcome(verdict: &str) -> TraceOutcome {
        TraceOutcome {
            verdict: verdict.into(),
            drops: Vec::new(),
            sent: Vec::new(),
            held: false,
            punted: false,
            local: false,
            icmp_not_sent: None,
        }
    }

    #[test]
    fn a_drop_reads_as_its_reason_and_rule() {
        let mut o = outcome("dropped");
        o.drops.push(TraceDrop {
            reason: "no-interface".into(),
            description: "The (port, VLAN) pair of the frame maps to no interface of any VR."
                .into(),
        });
        let r = TraceReport {
            vr: "red".into(),
            count: 2,
            packets: vec![packet(
                vec![TraceStep::Demux {
                    port: "p1".into(),
                    tpid: Some("0x88a8".into()),
                    vlan: Some(100),
                    inner_vlan: None,
                    interface: None,
                    drop: Some("no-interface".into()),
                }],
                o,
            )],
        };
        assert_eq!(
            render(&r),
            "packet 1 of 1: 64 bytes in on p1, worker 1 → dropped\n  \
             demux       p1 tpid 0x88a8 vlan 100 → no interface: no-interface\n  \
             dropped     no-interface: The (port, VLAN) pair of the frame maps to no interface of any VR.\n\
             \n1 of 2 packets traced before the time ran out\n"
        );
    }

    #[test]
    fn checks_that_fail_say_so() {
        let mut o = outcome("held");
        o.held = true;
        o.icmp_not_sent = Some("the VR's ICMP rate limit".into());
        let r = TraceReport {
            vr: "red".into(),
            count: 1,
            packets: vec![packet(
                vec![
                    TraceStep::Filter {
                        direction: "out".into(),
                        list: "edge".into(),
                        rule: Some(2),
                        permit: true,
                    },
                    TraceStep::Ttl {
                        ttl: 1,
                        pass: false,
                    },
                ],
                o,
            )],
        };
        let text = render(&r);
        assert!(
            text.contains("  filter_out  edge: permit by rule 2\n"),
            "{text}"
        );
        assert!(text.contains("  ttl         1: FAIL\n"), "{text}");
        assert!(text.contains("  icmp        no ICMP error: the VR's ICMP rate limit\n"));
        assert!(text.contains("  held        waits for a neighbour's MAC\n"));
    }
}
