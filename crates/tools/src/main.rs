//! `vrhost-tools`: the measurement and lab tools. `vrhost TOOL ...` runs
//! `vrhost-tools TOOL ...`; see `vrhost_tools` for what each does.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use vrhost_tools::{bench, demo, fairness, lab, route_bench, sweep, traffic, workload};

#[derive(Parser)]
#[command(
    name = "vrhost",
    bin_name = "vrhost",
    version,
    about = "vrhost's measurement and lab tools (run as `vrhost TOOL`)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Forward from memory ports for N seconds and print throughput.
    Bench(bench::Args),
    /// Route-update throughput: bulk load through the API, and churn while forwarding.
    BenchRoutes(route_bench::Args),
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
        spec: std::path::PathBuf,
    },
    /// Send traffic on a real port (pfsend-like): synthetic UDP or a pcap, flat out or at a rate.
    Gen(traffic::GenArgs),
    /// Receive and count on a real port (pfcount-like): pps and bps every second, then totals.
    Count(traffic::CountArgs),
    /// Make a synthetic benchmark workload: an Internet-like table, a pcap of
    /// 64-byte UDP frames to random destinations inside it, and a bench config.
    Workload(workload::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Whatever forwards runs on a heap of huge pages, as `vrhost run` does
    // (`vrhost_daemon::huge_heap`); `vr-memory` measures 4 KiB pages.
    if !matches!(cli.command, Command::VrMemory { .. }) {
        vrhost_daemon::huge_heap::reexec();
    }
    vrhost_daemon::init_logging();
    vrhost_daemon::huge_heap::report();
    let result = match cli.command {
        Command::Bench(a) => bench::run(a),
        Command::BenchRoutes(a) => route_bench::run(a),
        Command::Fairness(a) => fairness::run(a),
        Command::VrMemory { vrs } => sweep::one_vr_engine_bytes().and_then(|fixed| {
            let b = sweep::idle_vr_bytes(vrs.max(1))?;
            println!(
                "{:.0} bytes of resident memory per idle VR ({} VRs beyond a first, one worker)",
                b,
                vrs.max(1)
            );
            println!(
                "{fixed} bytes for a whole engine with one idle VR and one worker (buffer pool included)"
            );
            Ok(ExitCode::SUCCESS)
        }),
        Command::Demo { seconds, routes } => demo::run(seconds, routes),
        Command::Lab { action, spec } => lab::run(&action, &spec),
        Command::Gen(a) => traffic::gen(a),
        Command::Count(a) => traffic::count(a),
        Command::Workload(a) => workload::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vrhost: {e:#}");
            ExitCode::FAILURE
        }
    }
}
