//! `vrhost`: many isolated virtual routers on one shared user-space data plane.
//!
//! This binary is the command line only; the work lives in the library crates.

mod bench;
mod cplane;
mod demo;
mod fairness;
mod lab;
mod mgmt;
mod replay;
mod report;
mod route_bench;
mod runtime;
mod sweep;
mod tools_cli;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "vrhost",
    version,
    about = "Many isolated virtual routers on one shared user-space data plane"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the router in the foreground; SIGINT/SIGTERM stop it cleanly.
    Run {
        /// Config file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Print counters every N seconds (0: only at exit).
        #[arg(long, default_value_t = 0)]
        stats_interval: u64,
        /// Core mapping: run-to-completion, or rx and forwarding on separate cores.
        #[arg(long, value_enum, default_value = "rtc")]
        mode: runtime::Mode,
    },
    /// Validate a config: exit 0, or print every error with its key and exit 1.
    Check {
        /// Config file (TOML).
        #[arg(long)]
        config: PathBuf,
    },
    /// Process every pcap port's rx file in timestamp order, write the tx files, print counters.
    Replay {
        /// Config file (TOML) whose ports are pcap ports.
        #[arg(long)]
        config: PathBuf,
        /// Print counters as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Forward from memory ports for N seconds and print throughput.
    Bench {
        /// Config file (TOML) whose ports are memory ports. Without it, --vrs
        /// builds the synthetic multi-VR workload.
        #[arg(long)]
        config: Option<PathBuf>,
        /// How long to measure each point.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Print one JSON object per measurement.
        #[arg(long)]
        json: bool,
        /// Worker counts to measure (comma-separated); default: the config's.
        #[arg(long, value_delimiter = ',')]
        workers: Vec<usize>,
        /// Synthetic workload: numbers of VRs sharing the traffic (comma-separated).
        #[arg(long, value_delimiter = ',')]
        vrs: Vec<usize>,
        /// Synthetic workload: routes in each VR's table.
        #[arg(long, default_value_t = 1000)]
        routes_per_vr: usize,
        /// Synthetic workload: tag the frames with a VLAN even for one VR
        /// (several VRs always get one VLAN each).
        #[arg(long)]
        tagged: bool,
        /// Synthetic workload, the baseline: the same routes and frames
        /// (untagged unless --tagged), all in one VR.
        #[arg(long)]
        one_vr: bool,
        /// Synthetic workload: the family of the tables and frames.
        #[arg(long, value_enum, default_value = "ipv4")]
        family: sweep::Family,
        /// Core mappings to measure (comma-separated): rtc, pipeline.
        #[arg(long, value_enum, value_delimiter = ',', default_value = "rtc")]
        mode: Vec<runtime::Mode>,
        /// Also write the measurements as CSV.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Also draw SVG plots into this directory.
        #[arg(long)]
        plots: Option<PathBuf>,
        /// Per-VR cost accounting and fair sharing (on, as `vrhost run` does; off to measure its cost).
        #[arg(long, value_enum, default_value = "on")]
        fair_share: OnOff,
        /// The IPv4 and IPv6 fast path for plain forwards (on; off sends every frame
        /// through the full stages, to measure what it buys).
        #[arg(long, value_enum, default_value = "on")]
        fast_path: OnOff,
        /// Prefetch in batch FIB lookups: auto (when the VRs' IPv4 tables
        /// hold 100,000 routes or more together, as `vrhost run` does), on
        /// (always) or off.
        #[arg(long, value_enum, default_value = "auto")]
        prefetch: bench::Prefetch,
    },
    /// Route-update throughput: bulk load through the API, and churn while forwarding.
    BenchRoutes(route_bench::Args),
    /// Manage a running vrhost through its API (docs/api.md).
    Ctl(vrhost_api::CtlArgs),
    /// Print a new random API token and the SHA-256 to put in the config.
    Token,
    /// Overload scenarios between two VRs: fair share, weights, slow-path floods (docs/isolation.md).
    Fairness(fairness::Args),
    /// Report the memory an idle VR costs (resident bytes per VR, for N VRs).
    VrMemory {
        /// How many idle VRs to create.
        #[arg(long, default_value_t = 1000)]
        vrs: usize,
    },
    /// The embedded default: several VRs on in-memory ports, live per-VR stats.
    Demo {
        /// How long to run.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Routes per VR.
        #[arg(long, default_value_t = 10_000)]
        routes: usize,
    },
    /// Build (up) or remove (down) a lab of host namespaces wired to vrhost by veth pairs.
    Lab {
        /// up | down
        action: String,
        /// Lab spec (TOML); see docs/lab.md.
        spec: PathBuf,
    },
    /// Send traffic on a real port (pfsend-like): synthetic UDP or a pcap, flat out or at a rate.
    Gen(tools_cli::GenArgs),
    /// Receive and count on a real port (pfcount-like): pps and bps every second, then totals.
    Count(tools_cli::CountArgs),
    /// List every drop reason with its counter name and rule.
    DropReasons {
        /// Print the Markdown table of docs/drop-reasons.md.
        #[arg(long)]
        markdown: bool,
    },
    /// Make a synthetic benchmark workload: an Internet-like table, a pcap of
    /// 64-byte UDP frames to random destinations inside it, and a bench config.
    Workload(workload::Args),
}

/// A switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VRHOST_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { config } => check(&config),
        Command::Replay { config, json } => replay::run(&config, json),
        Command::Bench {
            config,
            seconds,
            json,
            workers,
            vrs,
            routes_per_vr,
            tagged,
            one_vr,
            family,
            mode,
            csv,
            plots,
            fair_share,
            fast_path,
            prefetch,
        } => bench::run(bench::Args {
            config,
            seconds,
            json,
            workers,
            vrs,
            routes_per_vr,
            tagged,
            one_vr,
            family,
            modes: mode,
            csv,
            plots,
            fair_share: fair_share == OnOff::On,
            fast_path: fast_path == OnOff::On,
            prefetch_min_routes: prefetch.min_routes(),
        }),
        Command::Fairness(a) => fairness::run(a),
        Command::Ctl(a) => vrhost_api::ctl_main(a),
        Command::BenchRoutes(a) => route_bench::run(a),
        Command::Token => {
            let t = vrhost_api::generate_token();
            println!("token:  {t}");
            println!("sha256: {}", vrhost_api::hash_token(&t));
            println!("Give the token to its user (VRHOST_TOKEN or --token); put only the sha256 in the config.");
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            config,
            stats_interval,
            mode,
        } => runtime::run_foreground(&config, stats_interval, mode),
        Command::VrMemory { vrs } => sweep::idle_vr_bytes(vrs.max(1)).map(|b| {
            println!(
                "{:.0} bytes of resident memory per idle VR ({} VRs, one worker)",
                b,
                vrs.max(1)
            );
            ExitCode::SUCCESS
        }),
        Command::Demo { seconds, routes } => demo::run(seconds, routes),
        Command::Workload(a) => workload::run(a),
        Command::Lab { action, spec } => lab::run(&action, &spec),
        Command::Gen(a) => tools_cli::gen(a),
        Command::Count(a) => tools_cli::count(a),
        Command::DropReasons { markdown } => {
            print!("{}", drop_reasons(markdown));
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vrhost: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Loads a config, or prints every error with its key and returns `None`.
pub(crate) fn load_config(path: &std::path::Path) -> Option<vrhost_control::Config> {
    match vrhost_control::Config::load(path) {
        Ok(cfg) => Some(cfg),
        Err(errors) => {
            eprintln!("{}: invalid config", path.display());
            for e in &errors.0 {
                eprintln!("  {e}");
            }
            None
        }
    }
}

fn check(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let Some(cfg) = load_config(path) else {
        return Ok(ExitCode::FAILURE);
    };
    let routes: usize = cfg.routers.iter().map(|r| r.routes.len()).sum();
    println!(
        "{}: ok ({} ports, {} routers, {} routes)",
        path.display(),
        cfg.ports.len(),
        cfg.routers.len(),
        routes
    );
    Ok(ExitCode::SUCCESS)
}

/// Every drop reason: the counter name and the variant's doc comment.
fn drop_reasons(markdown: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if markdown {
        out.push_str(
            "# Drop reasons\n\n\
             Every packet vrhost discards is counted under exactly one of these reasons, per port \
             and per interface (and so per VR). This file is the output of \
             `vrhost drop-reasons --markdown`; a test keeps it in step with the code, where each \
             description is the doc comment of its `Drop` variant.\n\n\
             | counter | rule |\n|---|---|\n",
        );
    }
    for d in vrhost_dataplane::Drop::ALL {
        if markdown {
            let _ = writeln!(out, "| `{}` | {} |", d.name(), d.description());
        } else {
            let _ = writeln!(out, "{:<30} {}", d.name(), d.description());
        }
    }
    out
}
