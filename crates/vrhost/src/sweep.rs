//! The synthetic multi-VR workload of `vrhost bench --vrs N`, and the CSV
//! and SVG output of sweeps.
//!
//! N VRs share two memory ports, `in` and `out`, one VLAN per VR (VR `i` on
//! VLAN `i + 1`), all with the same addresses: 10.0.0.1/24 toward the
//! traffic source, 10.1.0.1/24 toward a gateway 10.1.0.2 with a static MAC.
//! Each VR has its own table of `routes_per_vr` Internet-like prefixes. The
//! traffic is 64-byte UDP, spread evenly over the VRs, to random
//! destinations inside each VR's own table.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrhost_dataplane::{EngineSpec, InterfaceSpec, Limits, PortSpec, RouteTarget, RouterSpec};
use vrhost_fib::Prefix4;
use vrhost_io::{MemoryPort, Port};
use vrhost_wire::ethernet::EthernetAddress;

use crate::runtime::{Mode, PortQueues, Runtime, TxQueue};
use crate::workload::{self, FrameSpec};

const IN_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const OUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x01, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x02, 0x02]);
/// Distinct frames in the synthetic pcap.
const FRAMES: usize = 65_536;

/// The spec of `vrs` VRs, each with `routes` prefixes; also returns each VR's table.
pub fn spec(vrs: usize, routes: usize, seed: u64) -> (EngineSpec, Vec<Vec<(Ipv4Addr, u8)>>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let tagged = vrs > 1;
    let tables: Vec<_> = (0..vrs)
        .map(|_| workload::table(routes.max(1), &mut rng))
        .collect();
    let iface = |name: String, port: u16, vlan: Option<u16>, mac, addr| InterfaceSpec {
        name,
        port,
        vlan,
        mac,
        mtu: 1500,
        addrs4: vec![(addr, 24)],
        addrs6: vec![],
    };
    let routers = tables
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let vlan = tagged.then_some(i as u16 + 1);
            RouterSpec {
                name: format!("vr{i}"),
                interfaces: vec![
                    iface(
                        format!("vr{i}-in"),
                        0,
                        vlan,
                        IN_MAC,
                        Ipv4Addr::new(10, 0, 0, 1),
                    ),
                    iface(
                        format!("vr{i}-out"),
                        1,
                        vlan,
                        OUT_MAC,
                        Ipv4Addr::new(10, 1, 0, 1),
                    ),
                ],
                routes4: t
                    .iter()
                    .filter_map(|&(a, l)| Prefix4::new(a, l).ok())
                    .map(|p| (p, RouteTarget::Via(IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)))))
                    .collect(),
                routes6: vec![],
                neighbors: vec![(IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)), GW_MAC)],
                limits: Limits::default(),
            }
        })
        .collect();
    let ports = vec![
        PortSpec {
            name: "in".into(),
            mtu: 1500,
        },
        PortSpec {
            name: "out".into(),
            mtu: 1500,
        },
    ];
    (EngineSpec { ports, routers }, tables)
}

/// 64-byte frames spread evenly over the VRs, to destinations in each VR's table.
pub fn frames(tables: &[Vec<(Ipv4Addr, u8)>], seed: u64) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let tagged = tables.len() > 1;
    (0..FRAMES)
        .map(|i| {
            let v = i % tables.len();
            let t = &tables[v];
            workload::udp4_frame(&FrameSpec {
                src_mac: HOST_MAC,
                dst_mac: IN_MAC,
                vlan: tagged.then_some(v as u16 + 1),
                src: Ipv4Addr::new(10, 0, 0, 2),
                dst: workload::inside(t[rng.gen_range(0..t.len())], &mut rng),
                ttl: 64,
                src_port: 1024 + (i % 50_000) as u16,
                dst_port: 9,
            })
        })
        .collect()
}

/// A runtime for the synthetic workload with `workers` workers, each
/// generating from its own queue of port `in`.
pub fn runtime(
    vrs: usize,
    routes: usize,
    workers: usize,
    cores: &[usize],
    mode: Mode,
) -> Result<Runtime> {
    let (spec, tables) = spec(vrs, routes, 1);
    let frames = frames(&tables, 1);
    let queues = MemoryPort::from_frames(frames.iter().map(Vec::as_slice)).split_by_flow(workers);
    let ports = vec![
        PortQueues {
            name: "in".into(),
            rx: queues
                .into_iter()
                .map(|q| Box::new(q) as Box<dyn Port>)
                .collect(),
            tx: TxQueue::discard(),
        },
        PortQueues {
            name: "out".into(),
            rx: vec![],
            tx: TxQueue::discard(),
        },
    ];
    Runtime::new(&spec, ports, cores, mode)
}

/// Resident memory of this process, bytes (Linux `/proc/self/statm`).
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Bytes one idle VR costs: resident memory of the tables and one worker
/// for `n` VRs with no routes beyond their interfaces, divided by `n`.
pub fn idle_vr_bytes(n: usize) -> Result<f64> {
    let before = rss_bytes().context("reading /proc/self/statm")?;
    let (spec, _) = spec(n, 1, 7);
    let spec = EngineSpec {
        routers: spec
            .routers
            .into_iter()
            .map(|r| RouterSpec {
                routes4: vec![],
                ..r
            })
            .collect(),
        ..spec
    };
    let mut control = vrhost_dataplane::Control::new(&spec)?;
    let workers = vrhost_dataplane::Worker::create(&mut control, 1);
    let after = rss_bytes().context("reading /proc/self/statm")?;
    drop(workers);
    drop(control);
    Ok(after.saturating_sub(before) as f64 / n as f64)
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
