//! `/metrics`: Prometheus (OpenMetrics) text built from the backend at each
//! scrape.
//!
//! Series, each counter with the suffix `_total`:
//! - `vrhost_vr_<counter>{vr}` and `vrhost_vr_drops{vr,reason}`
//! - `vrhost_interface_<counter>{vr,interface}` and `vrhost_interface_drops{vr,interface,reason}`
//! - `vrhost_port_<counter>{port}` and `vrhost_port_drops{port,reason}` (admin only)
//! - `vrhost_vr_routes{vr,family}`, `vrhost_vr_fib_bytes{vr}` (gauges)
//! - `vrhost_vr_busy_seconds_total{vr}`: worker time the VR's traffic took,
//!   summed over the workers (its rate is the VR's share of the cores)
//! - `vrhost_worker_load{worker}` (gauge, 0 to 1), `vrhost_worker_packets{worker}` (admin only)
//!
//! `<counter>` is each of [`CounterSet::FIELDS`]. A per-VR token gets its own
//! VR's series and nothing else.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::auth::Principal;
use crate::backend::visible_counters;
use crate::backend::Backend;
use crate::error::ApiError;
use crate::types::CounterSet;

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The counter families of one kind of object (VR, interface, port).
struct CounterFamilies {
    fields: Vec<Family<Labels, Counter>>,
    drops: Family<Labels, Counter>,
}

impl CounterFamilies {
    fn register(reg: &mut Registry, scope: &str, per: &str) -> CounterFamilies {
        let fields = CounterSet::FIELDS
            .iter()
            .map(|(name, help)| {
                let family = Family::default();
                reg.register(
                    format!("vrhost_{scope}_{name}"),
                    format!("{help}, per {per}"),
                    family.clone(),
                );
                family
            })
            .collect();
        let drops = Family::default();
        reg.register(
            format!("vrhost_{scope}_drops"),
            format!("Packets dropped, per {per} and reason"),
            drops.clone(),
        );
        CounterFamilies { fields, drops }
    }

    fn record(&self, labels: &Labels, c: &CounterSet) {
        for (family, value) in self.fields.iter().zip(c.values()) {
            family.get_or_create(labels).inc_by(value);
        }
        for (reason, n) in &c.drops {
            let mut l = labels.clone();
            l.push(("reason".into(), reason.clone()));
            self.drops.get_or_create(&l).inc_by(*n);
        }
    }
}

fn gauge(reg: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let family = Family::default();
    reg.register(name, help, family.clone());
    family
}

fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The metrics text `p` may see.
pub fn render(b: &dyn Backend, p: &Principal) -> Result<String, ApiError> {
    let mut reg = Registry::default();
    let vr_families = CounterFamilies::register(&mut reg, "vr", "VR");
    let iface_families = CounterFamilies::register(&mut reg, "interface", "VR interface");
    let routes = gauge(
        &mut reg,
        "vrhost_vr_routes",
        "Routes in the VR's FIB, per family",
    );
    let fib = gauge(
        &mut reg,
        "vrhost_vr_fib_bytes",
        "FIB memory of the VR, both families",
    );

    for vr in b.list_vrs()?.iter().filter(|v| p.sees(&v.name)) {
        let l = labels(&[("vr", &vr.name)]);
        fib.get_or_create(&l).set(saturate(vr.fib_bytes));
        for (family, n) in [("ipv4", vr.routes_v4), ("ipv6", vr.routes_v6)] {
            routes
                .get_or_create(&labels(&[("vr", &vr.name), ("family", family)]))
                .set(saturate(n));
        }
    }
    let busy = Family::<Labels, Counter<f64, AtomicU64>>::default();
    reg.register(
        "vrhost_vr_busy_seconds",
        "Worker time the VR's traffic took, summed over the workers (its rate is the VR's share of the cores)",
        busy.clone(),
    );
    for vc in visible_counters(b, p)? {
        vr_families.record(&labels(&[("vr", &vc.vr)]), &vc.total);
        if let Some(ns) = vc.busy_ns {
            busy.get_or_create(&labels(&[("vr", &vc.vr)]))
                .inc_by(ns as f64 / 1e9);
        }
        for ic in &vc.interfaces {
            iface_families.record(
                &labels(&[("vr", &vc.vr), ("interface", &ic.name)]),
                &ic.counters,
            );
        }
    }

    if *p == Principal::Admin {
        let port_families = CounterFamilies::register(&mut reg, "port", "port");
        for port in b.ports()? {
            port_families.record(&labels(&[("port", &port.name)]), &port.counters);
        }
        let load = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        reg.register(
            "vrhost_worker_load",
            "Share of recent time the worker spent processing packets (0 to 1)",
            load.clone(),
        );
        let packets = Family::<Labels, Counter>::default();
        reg.register(
            "vrhost_worker_packets",
            "Packets processed by the worker",
            packets.clone(),
        );
        for w in b.workers()? {
            let l = labels(&[("worker", &w.index.to_string())]);
            load.get_or_create(&l).set(w.load);
            packets.get_or_create(&l).inc_by(w.packets);
        }
    }

    let mut out = String::new();
    encode(&mut out, &reg).map_err(|e| ApiError::Internal(format!("encoding metrics: {e}")))?;
    Ok(out)
}
