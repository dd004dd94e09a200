//! `vrhost bench`: forwarding throughput on memory ports, from a config or
//! from a synthetic multi-VR workload, with sweeps over workers, VRs and
//! core-mapping modes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;
use vrhost_config::Driver;
use vrhost_daemon::runtime::{Mode, Running, Runtime};

use crate::sweep;

/// `vrhost bench`: forward from memory ports for N seconds and print throughput.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Config file (TOML) whose ports are memory ports. Without it, --vrs
    /// builds the synthetic multi-VR workload.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// How long to measure each point.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Print one JSON object per measurement.
    #[arg(long)]
    pub json: bool,
    /// Worker counts to measure (comma-separated); default: the config's.
    #[arg(long, value_delimiter = ',')]
    pub workers: Vec<usize>,
    /// Synthetic workload: numbers of VRs sharing the traffic (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub vrs: Vec<usize>,
    /// Synthetic workload: routes in each VR's table.
    #[arg(long, default_value_t = 1000)]
    pub routes_per_vr: usize,
    /// Synthetic workload: tag the frames with a VLAN even for one VR
    /// (several VRs always get one VLAN each).
    #[arg(long)]
    pub tagged: bool,
    /// Synthetic workload, the baseline: the same routes and frames
    /// (untagged unless --tagged), all in one VR.
    #[arg(long)]
    pub one_vr: bool,
    /// Synthetic workload, with --one-vr: each VR's routes keep a gateway
    /// of their own in the one VR (VR i's via 10.1.0.2 + i), as N VRs'
    /// routes each go to their own VR's gateway; without it every route of
    /// the baseline goes to 10.1.0.2.
    #[arg(long, requires = "one_vr", conflicts_with = "paths")]
    pub gateway_per_vr: bool,
    /// Synthetic workload: the family of the tables and frames.
    #[arg(long, value_enum, default_value = "ipv4")]
    pub family: crate::workload::Family,
    /// Synthetic workload: gateways of every route, 1 or 2-4 (equal-cost
    /// multipath, each flow hashed to one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub paths: u8,
    /// Synthetic workload: every VR applies a rule list of this many rules
    /// to what enters (none of which the frames match: each is classified
    /// through to the list's default, permit); 0 for none.
    #[arg(long, default_value_t = 0)]
    pub filter_rules: usize,
    /// Core mappings to measure (comma-separated): rtc, pipeline.
    #[arg(
        long = "mode",
        value_enum,
        value_delimiter = ',',
        default_value = "rtc"
    )]
    pub modes: Vec<Mode>,
    /// Also write the measurements as CSV.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Also draw SVG plots into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// Per-VR cost accounting and fair sharing (on, as `vrhost run` does; off to measure its cost).
    #[arg(long, value_enum, default_value = "on")]
    pub fair_share: OnOff,
    /// The IPv4 and IPv6 fast path for plain forwards (on; off sends every frame
    /// through the full stages, to measure what it buys).
    #[arg(long, value_enum, default_value = "on")]
    pub fast_path: OnOff,
    /// Prefetch in batch FIB lookups: auto (when the VRs' IPv4 tables
    /// hold 100,000 routes or more together, as `vrhost run` does), on
    /// (always) or off.
    #[arg(long, value_enum, default_value = "auto")]
    pub prefetch: Prefetch,
}

/// A switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

/// `vrhost bench --prefetch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Prefetch {
    /// While the VRs' tables (both families) hold
    /// [`vrhost_fib::PREFETCH_MIN_ROUTES`] routes or more together, each VR
    /// counting as `vrhost_dataplane::worker::PREFETCH_ROUTES_PER_VR` more.
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

impl Prefetch {
    /// The runtime's setting for this choice.
    pub fn min_routes(self) -> Option<usize> {
        match self {
            Prefetch::Auto => Some(vrhost_fib::PREFETCH_MIN_ROUTES),
            Prefetch::On => Some(0),
            Prefetch::Off => None,
        }
    }
}

/// Cores for `n` workers: the config's list when long enough, else the last `n` cores.
pub fn cores_for(n: usize, configured: &[usize]) -> Vec<usize> {
    if configured.len() >= n {
        return configured[..n].to_vec();
    }
    // The last cores this process may run on (taskset, cpuset), in order.
    let allowed = vrhost_config::allowed_cores();
    let total = allowed.len().max(1);
    (0..n)
        .map(|i| allowed[(total + i).saturating_sub(n) % total])
        .collect()
}

/// Runs `vrhost bench`.
pub fn run(a: Args) -> Result<ExitCode> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        bail!("--seconds must be a positive number");
    }
    let span = Duration::from_secs_f64(a.seconds);
    let mut rows = Vec::new();
    match &a.config {
        Some(path) => {
            let Some(cfg) = vrhost_daemon::load_config(path) else {
                return Ok(std::process::ExitCode::FAILURE);
            };
            for p in &cfg.ports {
                if p.driver != Driver::Memory {
                    bail!(
                        "port {:?}: bench needs memory ports, this one is {}",
                        p.name,
                        p.driver
                    );
                }
            }
            let counts = if a.workers.is_empty() {
                vec![cfg.dataplane.workers.len()]
            } else {
                a.workers.clone()
            };
            for &mode in &a.modes {
                for &n in &counts {
                    let mut cfg = cfg.clone();
                    let threads = if mode == Mode::Pipeline { 2 * n } else { n };
                    // Each worker generates from its own queue of every port.
                    for p in cfg.ports.iter_mut() {
                        p.queues = p.queues.max(n as u16);
                    }
                    let cores = cores_for(threads, &cfg.dataplane.workers);
                    let mut rt = Runtime::from_config(&cfg, &cores, mode)?;
                    rt.fair_share = a.fair_share == OnOff::On;
                    rt.fast_path = a.fast_path == OnOff::On;
                    rt.prefetch_min_routes = a.prefetch.min_routes();
                    rows.push(measure(
                        rt.start(),
                        span,
                        n,
                        cfg.routers.len(),
                        mode,
                        &cores,
                    ));
                }
            }
        }
        None => {
            if a.vrs.is_empty() {
                bail!("give --config FILE, or --vrs N for the synthetic multi-VR workload");
            }
            let counts = if a.workers.is_empty() {
                vec![1]
            } else {
                a.workers.clone()
            };
            for &mode in &a.modes {
                for &vrs in &a.vrs {
                    for &n in &counts {
                        let threads = if mode == Mode::Pipeline { 2 * n } else { n };
                        let cores = cores_for(threads, &[]);
                        let shape = sweep::Synthetic {
                            vrs,
                            routes_per_vr: a.routes_per_vr,
                            tagged: a.tagged,
                            one_vr: a.one_vr,
                            gateway_per_vr: a.gateway_per_vr,
                            family: a.family,
                            paths: usize::from(a.paths),
                            filter_rules: a.filter_rules,
                        };
                        let mut rt = sweep::runtime(&shape, n, &cores, mode)?;
                        rt.fair_share = a.fair_share == OnOff::On;
                        rt.fast_path = a.fast_path == OnOff::On;
                        rt.prefetch_min_routes = a.prefetch.min_routes();
                        let mut row = measure(rt.start(), span, n, vrs, mode, &cores);
                        row["tagged"] = json!(a.tagged || (vrs > 1 && !a.one_vr));
                        row["one_vr"] = json!(a.one_vr);
                        row["gateway_per_vr"] = json!(a.gateway_per_vr);
                        row["family"] = json!(a.family);
                        row["paths"] = json!(a.paths);
                        row["filter_rules"] = json!(a.filter_rules);
                        rows.push(row);
                    }
                }
            }
        }
    }
    for r in &rows {
        if a.json {
            println!("{}", serde_json::to_string(r)?);
        } else {
            println!(
                "{:>2} worker(s) {:<8} {:>5} VR(s): {:>8.3} Mpps received, {:>8.3} Mpps sent, {:>6.1} core-ns/packet",
                r["workers"],
                r["mode"].as_str().unwrap_or(""),
                r["vrs"],
                r["rx_pps"].as_f64().unwrap_or(0.0) / 1e6,
                r["tx_pps"].as_f64().unwrap_or(0.0) / 1e6,
                r["core_ns_per_packet"].as_f64().unwrap_or(0.0),
            );
        }
    }
    if let Some(csv) = &a.csv {
        sweep::write_csv(csv, &rows)?;
    }
    if let Some(dir) = &a.plots {
        sweep::plot(dir, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Warms up for a quarter second, measures for `span`, stops the workers.
pub fn measure(
    running: Running,
    span: Duration,
    workers: usize,
    vrs: usize,
    mode: Mode,
    cores: &[usize],
) -> serde_json::Value {
    std::thread::sleep(Duration::from_millis(250));
    let before = running.all_ports();
    let start = Instant::now();
    std::thread::sleep(span);
    let all = running.all_ports();
    let secs = start.elapsed().as_secs_f64();
    let drops: serde_json::Map<String, serde_json::Value> = all
        .nonzero_drops()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let routes4: usize = running
        .shared
        .vr_ids()
        .map(|v| running.writer().routes(v).0)
        .sum();
    let fib_bytes: usize = running
        .shared
        .vr_ids()
        .map(|v| running.writer().fib_memory(v))
        .sum();
    let assignment = serde_json::to_value(&running.assignment).unwrap_or_default();
    running.stop();
    let rx_pps = (all.rx_packets - before.rx_packets) as f64 / secs;
    let tx_pps = (all.tx_packets - before.tx_packets) as f64 / secs;
    json!({
        "rx_pps": rx_pps,
        "tx_pps": tx_pps,
        "seconds": secs,
        "workers": workers,
        "mode": mode,
        "vrs": vrs,
        "cores": cores,
        "core_ns_per_packet": if rx_pps > 0.0 { 1e9 * cores.len() as f64 / rx_pps } else { 0.0 },
        "routes4": routes4,
        "fib_bytes": fib_bytes,
        "drops": drops,
        "assignment": assignment,
    })
}
