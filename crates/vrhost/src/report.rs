//! Counter reports: JSON for scripts, a table for people.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};
use vrhost_dataplane::{Counters, Engine};

fn counters_json(c: &Counters) -> Value {
    let drops: Map<String, Value> = c
        .nonzero_drops()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "rx_packets": c.rx_packets,
        "rx_bytes": c.rx_bytes,
        "tx_packets": c.tx_packets,
        "tx_bytes": c.tx_bytes,
        "forwarded": c.forwarded,
        "local": c.local,
        "punted": c.punted,
        "icmp_errors": c.icmp_errors,
        "icmp_rate_limited": c.icmp_rate_limited,
        "icmp_suppressed": c.icmp_suppressed,
        "icmp_no_source": c.icmp_no_source,
        "dropped": c.dropped(),
        "drops": drops,
    })
}

/// Every port, VR and interface counter as one JSON object.
pub fn json(engine: &Engine) -> Value {
    let ports: Vec<Value> = (0..engine.port_count())
        .map(|p| {
            let mut v = counters_json(engine.port_counters(p));
            v["name"] = json!(engine.port_name(p));
            v
        })
        .collect();
    let routers: Vec<Value> = engine
        .vrs()
        .iter()
        .enumerate()
        .map(|(i, vr)| {
            let mut v = counters_json(&engine.vr_counters(i));
            v["name"] = json!(vr.name);
            v["routes4"] = json!(vr.routes4());
            v["routes6"] = json!(vr.routes6());
            v["neighbors"] = json!(vr.neighbors.len());
            v["interfaces"] = vr
                .ifaces
                .iter()
                .map(|&gi| {
                    let mut c = counters_json(engine.iface_counters(gi as usize));
                    c["name"] = json!(engine.ifaces()[gi as usize].name);
                    c
                })
                .collect();
            v
        })
        .collect();
    json!({ "ports": ports, "routers": routers })
}

fn row(out: &mut String, kind: &str, name: &str, c: &Counters) {
    let _ = writeln!(
        out,
        "{kind:<6} {name:<16} {:>12} {:>12} {:>12} {:>8} {:>8} {:>10}",
        c.rx_packets,
        c.tx_packets,
        c.forwarded,
        c.local,
        c.punted,
        c.dropped()
    );
}

/// A human-readable table: ports, then each VR with its interfaces, then drop reasons.
pub fn table(engine: &Engine) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:>12} {:>12} {:>12} {:>8} {:>8} {:>10}",
        "", "name", "rx", "tx", "forwarded", "local", "punted", "dropped"
    );
    for p in 0..engine.port_count() {
        row(
            &mut out,
            "port",
            engine.port_name(p),
            engine.port_counters(p),
        );
    }
    for (i, vr) in engine.vrs().iter().enumerate() {
        row(&mut out, "vr", &vr.name, &engine.vr_counters(i));
        for &gi in &vr.ifaces {
            let name = format!("  {}", engine.ifaces()[gi as usize].name);
            row(&mut out, "iface", &name, engine.iface_counters(gi as usize));
        }
    }
    let mut any = false;
    for p in 0..engine.port_count() {
        for (reason, n) in engine.port_counters(p).nonzero_drops() {
            if !any {
                let _ = writeln!(out, "\ndrops by reason (port, reason, count):");
                any = true;
            }
            let _ = writeln!(out, "  {:<16} {:<28} {n}", engine.port_name(p), reason);
        }
    }
    out
}
