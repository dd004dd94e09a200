//! The synthetic multi-VR workload of `vrhost bench --vrs N`, and the CSV
//! and SVG output of sweeps.
//!
//! N VRs share memory ports, `in` and `out`, one VLAN per VR (VR `i` on
//! VLAN `i % 4000 + 1`; past 4,000 VRs, every 4,000 more get their own
//! pair of ports, `in1`/`out1` and so on, since a port has 4,094 VLANs),
//! all with the same addresses: 10.0.0.1/24 toward the traffic source,
//! 10.1.0.1/24 toward a gateway 10.1.0.2 with a static MAC. Each VR has its
//! own table of `routes_per_vr` Internet-like prefixes. The traffic is
//! 64-byte UDP, spread evenly over the VRs (frame `i` is VR `i % N`'s), to
//! random destinations inside each VR's own table.
//!
//! The baseline (`--one-vr`) is the same frames, untagged, to one VR that
//! holds every VR's routes: what the N VRs should cost if many VRs cost what
//! one does.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrhost_daemon::runtime::{Mode, PortQueues, Runtime, TxQueue};
use vrhost_dataplane::{
    Action, EngineSpec, FilterSpec, InterfaceSpec, Limits, Path as Gateway, Paths, PortRange,
    PortSpec, RouteTarget, RouterSpec, Rule,
};
use vrhost_fib::{IpPrefix, Prefix4, Prefix6};
use vrhost_io::{MemoryPort, Port};
use vrhost_wire::ethernet::EthernetAddress;

use crate::workload::{self, Family, FrameSpec};

const IN_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const OUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x01, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x02, 0x02]);
/// Distinct frames in the synthetic pcap.
const FRAMES: usize = 65_536;
/// VRs per pair of ports: VLANs 1-4000 of each.
const VRS_PER_PORT: usize = 4000;

/// The shape of a synthetic workload.
#[derive(Clone, Copy, Debug)]
pub struct Synthetic {
    /// VRs sharing the traffic.
    pub vrs: usize,
    /// Routes in each VR's table.
    pub routes_per_vr: usize,
    /// Tag the frames even when there is one VR (VLAN 1); several VRs are
    /// always tagged, one VLAN each.
    pub tagged: bool,
    /// The baseline: the same routes and frames, all in one VR.
    pub one_vr: bool,
    /// With `one_vr`: each VR's routes keep a gateway of their own in the
    /// one VR (VR `i`'s via the first gateway's address plus `i`, each with
    /// a static MAC), as the N VRs' routes each go to their own VR's
    /// gateway; otherwise every route of the baseline shares one gateway.
    pub gateway_per_vr: bool,
    /// The family of the tables and frames.
    pub family: Family,
    /// Gateways of every route: 1, or 2-4 for equal-cost multipath
    /// (10.1.0.2, .3, ... each with a static MAC).
    pub paths: usize,
    /// Rules of a list every VR applies to what enters (`filter_in`), 0 for
    /// none ([`edge_filter`]).
    pub filter_rules: usize,
}

impl Synthetic {
    /// VRs in the engine: one for the baseline.
    fn engine_vrs(&self) -> usize {
        if self.one_vr {
            1
        } else {
            self.vrs
        }
    }

    /// VLAN of the frames and interfaces of engine VR `i`, if tagged.
    fn vlan(&self, i: usize) -> Option<u16> {
        (self.tagged || self.engine_vrs() > 1).then_some((i % VRS_PER_PORT) as u16 + 1)
    }

    /// Whether the baseline's routes keep a gateway per VR they came from.
    fn gateways_by_vr(&self) -> bool {
        self.one_vr && self.gateway_per_vr
    }

    /// Pairs of ports (`in`/`out`, then `in1`/`out1`, ...).
    fn port_pairs(&self) -> usize {
        self.engine_vrs().div_ceil(VRS_PER_PORT)
    }
}

/// Name of port `kind` ("in" or "out") of pair `pair`.
fn port_name(kind: &str, pair: usize) -> String {
    match pair {
        0 => kind.to_string(),
        n => format!("{kind}{n}"),
    }
}

/// A prefix of either family.
type Route = (IpAddr, u8);

/// The tables of the workload's `vrs` VRs (each `routes_per_vr` prefixes).
fn tables(w: &Synthetic, seed: u64) -> Vec<Vec<Route>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let n = w.routes_per_vr.max(1);
    (0..w.vrs)
        .map(|_| match w.family {
            Family::Ipv4 => workload::table(n, &mut rng)
                .into_iter()
                .map(|(a, l)| (IpAddr::V4(a), l))
                .collect(),
            Family::Ipv6 => workload::table6(n, &mut rng)
                .into_iter()
                .map(|(a, l)| (IpAddr::V6(a), l))
                .collect(),
        })
        .collect()
}

/// The address of the host behind `in` (the frames' source) and of the
/// gateway behind `out`, in the workload's family.
fn host_and_gateway(family: Family) -> (IpAddr, IpAddr) {
    match family {
        Family::Ipv4 => (
            Ipv4Addr::new(10, 0, 0, 2).into(),
            Ipv4Addr::new(10, 1, 0, 2).into(),
        ),
        Family::Ipv6 => (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).into(),
            Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2).into(),
        ),
    }
}

/// Gateway `k` of a multipath workload: the first one's address plus `k`.
fn nth_gateway(first: IpAddr, k: u32) -> IpAddr {
    match first {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + k)),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) + u128::from(k))),
    }
}

/// The engine spec of workload `w`; also returns each VR's table (the N
/// VRs', also for the baseline, whose one VR holds them all).
pub fn spec(w: &Synthetic, seed: u64) -> (EngineSpec, Vec<Vec<Route>>) {
    let tables = tables(w, seed);
    // 10.k.0.1/24 on every interface, and 2001:db8:k::1/64 for IPv6 (an
    // IPv4 workload's VRs have no IPv6, as before, so their memory is
    // comparable).
    let v6 = w.family == Family::Ipv6;
    let iface = |name: String, port: u16, vlan: Option<u16>, mac, k: u8| InterfaceSpec {
        inner_vlan: None,
        tpid: Default::default(),
        urpf: Default::default(),
        name,
        port,
        vlan,
        mac,
        mtu: 1500,
        addrs4: vec![(Ipv4Addr::new(10, k, 0, 1), 24)],
        addrs6: v6
            .then(|| {
                (
                    Ipv6Addr::new(0x2001, 0xdb8, u16::from(k), 0, 0, 0, 0, 1),
                    64,
                )
            })
            .into_iter()
            .collect(),
        filters: Default::default(),
    };
    // Toward the gateways: a /16, so that a baseline with a gateway per VR
    // has room for 10,000 of them.
    let out_iface = |name, port, vlan| {
        let mut i = iface(name, port, vlan, OUT_MAC, 1);
        if w.gateways_by_vr() {
            for (_, len) in &mut i.addrs4 {
                *len = 16;
            }
        }
        i
    };
    let (_, gw) = host_and_gateway(w.family);
    let gws: Vec<IpAddr> = if w.gateways_by_vr() {
        (0..w.vrs).map(|v| nth_gateway(gw, v as u32)).collect()
    } else {
        (0..w.paths.max(1) as u32)
            .map(|k| nth_gateway(gw, k))
            .collect()
    };
    let via = match w.gateways_by_vr() {
        true => RouteTarget::Via(gw),
        false => Paths::target(gws.iter().map(|&via| Gateway { via, weight: 1 }))
            .unwrap_or(RouteTarget::Via(gw)),
    };
    // Each VR's table split by family; `via` for every route, but for a
    // baseline that keeps the VRs' gateways apart (`gws[v]` for VR `v`'s).
    let routes = |t: &[(Route, usize)]| {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for &((a, l), v) in t {
            let via = match gws.get(v) {
                Some(&g) if w.gateways_by_vr() => RouteTarget::Via(g),
                _ => via.clone(),
            };
            match a {
                IpAddr::V4(a) => v4.extend(Prefix4::new(a, l).ok().map(|p| (p, via.clone()))),
                IpAddr::V6(a) => v6.extend(Prefix6::new(a, l).ok().map(|p| (p, via.clone()))),
            }
        }
        (v4, v6)
    };
    fn by_vr((v, t): (usize, &Vec<Route>)) -> impl Iterator<Item = (Route, usize)> + '_ {
        t.iter().map(move |&r| (r, v))
    }
    let per_vr: Vec<(Vec<_>, Vec<_>)> = if w.one_vr {
        // The union: a prefix two VRs drew is one route (the first VR's).
        let mut seen = HashSet::new();
        let all = tables.iter().enumerate().flat_map(by_vr);
        vec![routes(
            &all.filter(|(p, _)| seen.insert(*p)).collect::<Vec<_>>(),
        )]
    } else {
        tables
            .iter()
            .enumerate()
            .map(|t| routes(&by_vr(t).collect::<Vec<_>>()))
            .collect()
    };
    let filters: Vec<FilterSpec> = (w.filter_rules > 0)
        .then(|| edge_filter(w.filter_rules, &tables, seed))
        .into_iter()
        .collect();
    let routers = per_vr
        .into_iter()
        .enumerate()
        .map(|(i, (routes4, routes6))| {
            let vlan = w.vlan(i);
            let pair = (i / VRS_PER_PORT) as u16;
            let mut input = iface(format!("vr{i}-in"), 2 * pair, vlan, IN_MAC, 0);
            input.filters.input = filters.first().map(|f| f.name.clone());
            RouterSpec {
                name: format!("vr{i}"),
                interfaces: vec![input, out_iface(format!("vr{i}-out"), 2 * pair + 1, vlan)],
                routes4,
                routes6,
                neighbors: gws
                    .iter()
                    .enumerate()
                    .map(|(k, &g)| {
                        let mut mac = GW_MAC;
                        let [_, _, hi, lo] = (k as u32).to_be_bytes();
                        mac.0[1] = hi;
                        mac.0[2] = lo;
                        (g, mac)
                    })
                    .collect(),
                // Room for a baseline's gateway per VR.
                limits: Limits {
                    max_neighbors: Limits::default()
                        .max_neighbors
                        .max(u32::try_from(gws.len() + 16).unwrap_or(u32::MAX)),
                    ..Limits::default()
                },
                filters: filters.clone(),
            }
        })
        .collect();
    let ports = (0..w.port_pairs())
        .flat_map(|pair| ["in", "out"].map(|kind| port_name(kind, pair)))
        .map(|name| PortSpec { name, mtu: 1500 })
        .collect();
    (EngineSpec { ports, routers }, tables)
}

/// `n` rules of an edge list none of which the workload's frames (UDP
/// from the host to port 9) match, so that each frame is classified
/// through to the list's default, permit. A tenth of them each:
///
/// - 4: deny a source prefix (a /16-/24 inside a table prefix);
/// - 3: deny TCP to a destination prefix of the tables (where the frames
///   go) and a port range;
/// - 2: deny UDP to a port range above 9;
/// - 1: deny an ICMP type.
///
/// Prefixes are of the tables' family, so every field of the frames is
/// looked at.
pub fn edge_filter(n: usize, tables: &[Vec<Route>], seed: u64) -> FilterSpec {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xf11e);
    let all: Vec<Route> = tables.iter().flatten().copied().collect();
    let pick = |rng: &mut SmallRng, min: u8| -> Option<IpPrefix> {
        let (a, l) = *all.get(rng.gen_range(0..all.len().max(1)))?;
        let max = if a.is_ipv4() { 32 } else { 128 };
        let len = rng.gen_range(l.max(min)..=(l.max(min) + 8).min(max));
        IpPrefix::new_truncating(a, len).ok()
    };
    let ports = |rng: &mut SmallRng| {
        let lo = rng.gen_range(10..60_000u16);
        PortRange {
            lo,
            hi: lo + rng.gen_range(0..100),
        }
    };
    let v6 = all.first().is_some_and(|(a, _)| a.is_ipv6());
    let rules = (0..n)
        .map(|i| {
            let mut r = Rule {
                action: Action::Deny,
                ..Rule::default()
            };
            match i % 10 {
                0..=3 => r.src = pick(&mut rng, 16),
                4..=6 => {
                    r.dst = pick(&mut rng, 8);
                    r.protocol = Some(6);
                    r.dst_port = Some(ports(&mut rng));
                }
                7 | 8 => {
                    r.protocol = Some(17);
                    r.dst_port = Some(ports(&mut rng));
                }
                _ => {
                    r.protocol = Some(if v6 { 58 } else { 1 });
                    r.icmp_type = Some(rng.gen_range(0..=255));
                }
            }
            r
        })
        .collect();
    FilterSpec {
        name: "edge".into(),
        default: Action::Permit,
        rules,
    }
}

/// 64-byte frames spread evenly over the VRs, to destinations in each VR's
/// table, grouped by the pair of ports they arrive on (for the baseline,
/// all on the first, untagged unless `tagged`).
pub fn frames(w: &Synthetic, tables: &[Vec<Route>], seed: u64) -> Vec<Vec<Vec<u8>>> {
    let (host, _) = host_and_gateway(w.family);
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let mut by_pair = vec![Vec::new(); w.port_pairs()];
    for i in 0..FRAMES.max(tables.len()) {
        let v = i % tables.len();
        let t = &tables[v];
        let engine_vr = if w.one_vr { 0 } else { v };
        let dst = workload::inside_ip(t[rng.gen_range(0..t.len())], &mut rng);
        let spec = FrameSpec {
            src_mac: HOST_MAC,
            dst_mac: IN_MAC,
            vlan: w.vlan(engine_vr),
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::UNSPECIFIED,
            ttl: 64,
            src_port: 1024 + (i % 50_000) as u16,
            dst_port: 9,
        };
        by_pair[engine_vr / VRS_PER_PORT].push(workload::udp_frame(&spec, host, dst));
    }
    by_pair
}

/// A runtime for the synthetic workload with `workers` workers, each
/// generating from its own queue of every `in` port.
pub fn runtime(w: &Synthetic, workers: usize, cores: &[usize], mode: Mode) -> Result<Runtime> {
    let (spec, tables) = spec(w, 1);
    let ports = frames(w, &tables, 1)
        .into_iter()
        .enumerate()
        .flat_map(|(pair, frames)| {
            let queues =
                MemoryPort::from_frames(frames.iter().map(Vec::as_slice)).split_by_flow(workers);
            [
                PortQueues {
                    name: port_name("in", pair),
                    rx: queues
                        .into_iter()
                        .map(|q| Box::new(q) as Box<dyn Port>)
                        .collect(),
                    tx: TxQueue::discard(),
                },
                PortQueues {
                    name: port_name("out", pair),
                    rx: vec![],
                    tx: TxQueue::discard(),
                },
            ]
        })
        .collect();
    Runtime::new(&spec, ports, cores, mode)
}

/// Resident memory of this process, bytes (Linux `/proc/self/statm`).
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The idle-VR engine's spec: `vrs` VRs of two interfaces each, with no
/// routes beyond their interfaces'.
fn idle_spec(vrs: usize) -> EngineSpec {
    let shape = Synthetic {
        vrs,
        routes_per_vr: 1,
        tagged: false,
        one_vr: false,
        gateway_per_vr: false,
        family: Family::Ipv4,
        paths: 1,
        filter_rules: 0,
    };
    let (spec, _) = spec(&shape, 7);
    EngineSpec {
        routers: spec
            .routers
            .into_iter()
            .map(|r| RouterSpec {
                routes4: vec![],
                ..r
            })
            .collect(),
        ..spec
    }
}

/// An engine held alive while another is measured.
type Held = (vrhost_dataplane::TableWriter, Vec<vrhost_dataplane::Worker>);

/// Builds tables and one worker for `spec`, lets the worker build its
/// per-VR state (neighbor tables, punt queues, as it does when it first
/// looks at the tables), and returns how much resident memory that took.
fn resident_engine(spec: &EngineSpec) -> Result<(u64, Held)> {
    let before = rss_bytes().context("reading /proc/self/statm")?;
    let mut writer = vrhost_dataplane::TableWriter::new(spec)?;
    let mut workers = vrhost_dataplane::Worker::create(&mut writer, 1);
    let mut tx = vrhost_dataplane::TxBatch::new(spec.ports.len());
    for w in &mut workers {
        w.process_burst(&mut Vec::new(), 0, &mut tx);
    }
    let after = rss_bytes().context("reading /proc/self/statm")?;
    Ok((after.saturating_sub(before), (writer, workers)))
}

/// Bytes one idle VR costs: the resident memory that `n` VRs with no
/// routes beyond their interfaces' add to the tables and one worker, per VR.
///
/// Two engines are built and both kept: one with a single VR, then one with
/// `n + 1`; the difference of their resident growth, over `n`, leaves out
/// what every engine has whatever its VRs (the worker's buffer pool, its
/// counter arrays' headroom, channels).
pub fn idle_vr_bytes(n: usize) -> Result<f64> {
    let all = idle_spec(n + 1);
    let one = EngineSpec {
        routers: all.routers[..1].to_vec(),
        ports: all.ports.clone(),
    };
    let (one_bytes, _held) = resident_engine(&one)?;
    let (all_bytes, _held_too) = resident_engine(&all)?;
    Ok(all_bytes.saturating_sub(one_bytes) as f64 / n as f64)
}

/// Resident bytes of a whole engine with one idle VR and one worker: what
/// [`idle_vr_bytes`] leaves out.
pub fn one_vr_engine_bytes() -> Result<u64> {
    resident_engine(&idle_spec(1)).map(|(bytes, _)| bytes)
}

/// Writes one CSV line per measurement.
pub fn write_csv(path: &Path, rows: &[serde_json::Value]) -> Result<()> {
    let mut out = String::from(
        "mode,workers,vrs,rx_pps,tx_pps,seconds,core_ns_per_packet,routes4,fib_bytes\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{:.0},{:.0},{:.3},{:.2},{},{}",
            r["mode"].as_str().unwrap_or(""),
            r["workers"],
            r["vrs"],
            r["rx_pps"].as_f64().unwrap_or(0.0),
            r["tx_pps"].as_f64().unwrap_or(0.0),
            r["seconds"].as_f64().unwrap_or(0.0),
            r["core_ns_per_packet"].as_f64().unwrap_or(0.0),
            r["routes4"],
            r["fib_bytes"],
        );
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// One SVG per varied dimension: Mpps against workers, and against VRs.
pub fn plot(dir: &Path, rows: &[serde_json::Value]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let get = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(0.0);
    for (x_key, file, x_label) in [
        ("workers", "scaling-workers.svg", "workers"),
        ("vrs", "scaling-vrs.svg", "virtual routers"),
    ] {
        // One series per (mode, other dimension).
        let other = if x_key == "workers" { "vrs" } else { "workers" };
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for r in rows {
            let label = format!(
                "{} {}={}",
                r["mode"].as_str().unwrap_or(""),
                other,
                r[other]
            );
            let pt = (get(r, x_key), get(r, "tx_pps") / 1e6);
            match series.iter_mut().find(|(l, _)| *l == label) {
                Some((_, pts)) => pts.push(pt),
                None => series.push((label, vec![pt])),
            }
        }
        series.retain(|(_, pts)| pts.len() > 1);
        if series.is_empty() {
            continue;
        }
        let xmax = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.0))
            .fold(1.0, f64::max);
        let ymax = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.1))
            .fold(1.0, f64::max)
            * 1.15;
        let path = dir.join(file);
        let root = SVGBackend::new(&path, (720, 440)).into_drawing_area();
        root.fill(&WHITE)?;
        let log_x = x_key == "vrs";
        let title = format!("vrhost bench: forwarded Mpps vs {x_label}");
        if log_x {
            let mut chart = ChartBuilder::on(&root)
                .caption(&title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(50)
                .build_cartesian_2d((1f64..xmax * 1.2).log_scale(), 0f64..ymax)?;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc("Mpps")
                .draw()?;
            draw_series(&mut chart, &series)?;
        } else {
            let mut chart = ChartBuilder::on(&root)
                .caption(&title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(50)
                .build_cartesian_2d(0f64..xmax + 0.5, 0f64..ymax)?;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc("Mpps")
                .draw()?;
            draw_series(&mut chart, &series)?;
        }
        root.present()?;
    }
    Ok(())
}

fn draw_series<'a, DB: DrawingBackend + 'a, X: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    for (i, (label, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(vrs: usize, one_vr: bool, gateway_per_vr: bool) -> Synthetic {
        Synthetic {
            vrs,
            routes_per_vr: 50,
            tagged: false,
            one_vr,
            gateway_per_vr,
            family: Family::Ipv4,
            paths: 1,
            filter_rules: 0,
        }
    }

    /// The baseline with a gateway per VR: one VR holding every VR's
    /// routes, each (but a prefix an earlier VR drew too) to its own VR's
    /// gateway, each gateway with a static MAC of its own.
    #[test]
    fn the_baseline_keeps_each_vrs_gateway() {
        let (engine, tables) = spec(&shape(3, true, true), 5);
        let [vr] = &engine.routers[..] else {
            panic!("one VR, not {}", engine.routers.len());
        };
        let gw = |v: u8| IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2 + v));
        let macs: HashSet<_> = vr.neighbors.iter().map(|&(_, mac)| mac).collect();
        assert_eq!(vr.neighbors.len(), 3);
        assert_eq!(macs.len(), 3);
        let mut seen = HashSet::new();
        for (v, t) in tables.iter().enumerate() {
            for &(a, l) in t {
                let IpAddr::V4(a) = a else { continue };
                let Ok(p) = Prefix4::new(a, l) else { continue };
                if !seen.insert(p) {
                    continue;
                }
                let target = vr.routes4.iter().find(|(q, _)| *q == p).map(|(_, t)| t);
                assert_eq!(
                    target,
                    Some(&RouteTarget::Via(gw(v as u8))),
                    "{p:?} of VR {v}"
                );
            }
        }
        // Without the option, every route of the baseline shares one.
        let (engine, _) = spec(&shape(3, true, false), 5);
        let targets: HashSet<_> = engine.routers[0].routes4.iter().map(|(_, t)| t).collect();
        assert_eq!(
            targets.into_iter().collect::<Vec<_>>(),
            [&RouteTarget::Via(gw(0))]
        );
    }
}
