//! Counter reports: JSON for scripts, a table for people.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};
use vrhost_dataplane::{sum_ifaces, Counters, Engine, IfaceId, PortId, Shared, VrId};

use crate::runtime::Running;

/// Where counters come from: a single-threaded engine or running workers.
pub enum Source<'a> {
    /// `replay`, the demo and tests.
    Engine(&'a Engine),
    /// `run` and `bench`.
    Running(&'a Running),
}

impl Source<'_> {
    fn shared(&self) -> Option<&Shared> {
        match self {
            Source::Engine(_) => None,
            Source::Running(r) => Some(&r.shared),
        }
    }

    /// Every port, in order.
    fn ports(&self) -> impl Iterator<Item = PortId> {
        let n = match self {
            Source::Engine(e) => e.port_count(),
            Source::Running(r) => r.shared.port_count(),
        };
        (0..n).map(PortId::from_index)
    }

    fn port_name(&self, p: PortId) -> String {
        match self {
            Source::Engine(e) => e.port_name(p).to_string(),
            Source::Running(r) => r.shared.port_name(p).to_string(),
        }
    }

    fn port_counters(&self, p: PortId) -> Counters {
        match self {
            Source::Engine(e) => e.port_counters(p),
            Source::Running(r) => r.port_counters(p),
        }
    }

    /// Every VR, in order (deleted ones included: their counters stay).
    fn vrs(&self) -> impl Iterator<Item = VrId> {
        let n = match self {
            Source::Engine(e) => e.vr_count(),
            Source::Running(r) => r.shared.vr_count(),
        };
        (0..n).map(VrId::new)
    }

    fn vr_name(&self, v: VrId) -> String {
        match (self, self.shared()) {
            (_, Some(s)) => s.vr_name(v).to_string(),
            (Source::Engine(e), None) => e.vr(v).name,
            _ => String::new(),
        }
    }

    fn vr_ifaces(&self, v: VrId) -> Vec<IfaceId> {
        match (self, self.shared()) {
            (_, Some(s)) => s.vr_ifaces(v).to_vec(),
            (Source::Engine(e), None) => e.vr(v).ifaces,
            _ => Vec::new(),
        }
    }

    fn iface_name(&self, i: IfaceId) -> String {
        match self {
            Source::Engine(e) => e.ifaces()[i.index()].name.clone(),
            Source::Running(r) => r.shared.ifaces()[i.index()].name.clone(),
        }
    }

    fn iface_counters(&self, i: IfaceId) -> Counters {
        match self {
            Source::Engine(e) => e.iface_counters(i),
            Source::Running(r) => sum_ifaces(&r.counters, &[i]),
        }
    }

    fn vr_counters(&self, v: VrId) -> Counters {
        match self {
            Source::Engine(e) => e.vr_counters(v),
            Source::Running(r) => r.vr_counters(v),
        }
    }

    fn vr_extra(&self, v: VrId) -> Value {
        match self {
            Source::Engine(e) => {
                let i = e.vr(v);
                json!({ "routes4": i.routes4, "routes6": i.routes6, "neighbors": i.neighbors, "fib_bytes": i.fib_bytes })
            }
            Source::Running(r) => {
                let (routes4, routes6) = r.writer().routes(v);
                json!({ "routes4": routes4, "routes6": routes6, "fib_bytes": r.writer().fib_memory(v) })
            }
        }
    }
}

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
        "fast_path": c.fast_path,
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
pub fn json(src: &Source<'_>) -> Value {
    let ports: Vec<Value> = src
        .ports()
        .map(|p| {
            let mut v = counters_json(&src.port_counters(p));
            v["name"] = json!(src.port_name(p));
            v
        })
        .collect();
    let routers: Vec<Value> = src
        .vrs()
        .map(|i| {
            let mut v = counters_json(&src.vr_counters(i));
            v["name"] = json!(src.vr_name(i));
            if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), src.vr_extra(i)) {
                obj.extend(extra);
            }
            v["interfaces"] = src
                .vr_ifaces(i)
                .iter()
                .map(|&gi| {
                    let mut c = counters_json(&src.iface_counters(gi));
                    c["name"] = json!(src.iface_name(gi));
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
pub fn table(src: &Source<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:>12} {:>12} {:>12} {:>8} {:>8} {:>10}",
        "", "name", "rx", "tx", "forwarded", "local", "punted", "dropped"
    );
    for p in src.ports() {
        row(&mut out, "port", &src.port_name(p), &src.port_counters(p));
    }
    for v in src.vrs() {
        row(&mut out, "vr", &src.vr_name(v), &src.vr_counters(v));
        for gi in src.vr_ifaces(v) {
            row(
                &mut out,
                "iface",
                &format!("  {}", src.iface_name(gi)),
                &src.iface_counters(gi),
            );
        }
    }
    let mut any = false;
    for p in src.ports() {
        for (reason, n) in src.port_counters(p).nonzero_drops() {
            if !any {
                let _ = writeln!(out, "\ndrops by reason (port, reason, count):");
                any = true;
            }
            let _ = writeln!(out, "  {:<16} {:<28} {n}", src.port_name(p), reason);
        }
    }
    out
}
