//! `vrhost`: many isolated virtual routers on one shared user-space data plane.
//!
//! This binary is the command line only; the work lives in the library crates.

mod bench;
mod demo;
mod lab;
mod replay;
mod report;
mod worker;
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
        /// Config file (TOML) whose ports are memory ports.
        #[arg(long)]
        config: PathBuf,
        /// How long to measure.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
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
    /// List every drop reason with its counter name and rule.
    DropReasons {
        /// Print the Markdown table of docs/drop-reasons.md.
        #[arg(long)]
        markdown: bool,
    },
    /// Make a synthetic benchmark workload: an Internet-like table, a pcap of
    /// 64-byte UDP frames to random destinations inside it, and a bench config.
    Workload {
        /// Number of prefixes (up to 1,000,000+).
        #[arg(long, default_value_t = 1000)]
        routes: usize,
        /// Distinct frames in the pcap.
        #[arg(long, default_value_t = 65536)]
        frames: usize,
        /// Output directory (created).
        #[arg(long)]
        out: PathBuf,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
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
        } => bench::run(&config, seconds, json),
        Command::Run {
            config,
            stats_interval,
        } => worker::run_foreground(&config, stats_interval),
        Command::Demo { seconds, routes } => demo::run(seconds, routes),
        Command::Workload {
            routes,
            frames,
            out,
            seed,
        } => workload::run(routes, frames, &out, seed),
        Command::Lab { action, spec } => lab::run(&action, &spec),
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

fn check(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    match vrhost_control::Config::load(path) {
        Ok(cfg) => {
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
        Err(errors) => {
            eprintln!("{}: invalid config", path.display());
            for e in &errors.0 {
                eprintln!("  {e}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
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
