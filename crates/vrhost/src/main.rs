//! `vrhost`: many isolated virtual routers on one shared user-space data plane.
//!
//! This binary parses the command line and dispatches: the router is
//! `vrhost_daemon`, and the measurement and lab tools are the separate
//! `vrhost-tools` binary (`vrhost_tools`), which `vrhost TOOL ...` runs.

#![forbid(unsafe_code)]

mod replay;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use vrhost_daemon::runtime;

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
    /// Run the router in the foreground; SIGINT/SIGTERM stop it cleanly, SIGHUP reloads the config.
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
    /// Manage a running vrhost through its API (docs/api.md).
    Ctl(Box<vrhost_api::CtlArgs>),
    /// Print a new random API token and the SHA-256 to put in the config.
    Token,
    /// List every drop reason with its counter name and rule.
    DropReasons {
        /// Print the Markdown table of docs/drop-reasons.md.
        #[arg(long)]
        markdown: bool,
    },
    /// Forward from memory ports for N seconds and print throughput (vrhost-tools).
    #[command(disable_help_flag = true)]
    Bench(ToolArgs),
    /// Route-update throughput: bulk load through the API, and churn while forwarding (vrhost-tools).
    #[command(disable_help_flag = true)]
    BenchRoutes(ToolArgs),
    /// Overload scenarios between two VRs: fair share, weights, slow-path floods (vrhost-tools).
    #[command(disable_help_flag = true)]
    Fairness(ToolArgs),
    /// Report the memory an idle VR costs (vrhost-tools).
    #[command(disable_help_flag = true)]
    VrMemory(ToolArgs),
    /// The embedded default: several VRs on in-memory ports, live per-VR stats (vrhost-tools).
    #[command(disable_help_flag = true)]
    Demo(ToolArgs),
    /// Build (up) or remove (down) a lab of host namespaces wired to vrhost by veth pairs (vrhost-tools).
    #[command(disable_help_flag = true)]
    Lab(ToolArgs),
    /// Send traffic on a real port, pfsend-like (vrhost-tools).
    #[command(disable_help_flag = true)]
    Gen(ToolArgs),
    /// Receive and count on a real port, pfcount-like (vrhost-tools).
    #[command(disable_help_flag = true)]
    Count(ToolArgs),
    /// Make a synthetic benchmark workload: table, pcap and bench config (vrhost-tools).
    #[command(disable_help_flag = true)]
    Workload(ToolArgs),
    /// Hold TAP mirrors' carrier while no vrhost runs (started by `vrhost run`).
    #[command(hide = true)]
    KeepTaps {
        /// How long to hold once the vrhost that started it is gone, in ms.
        #[arg(long)]
        hold_ms: u64,
        /// NETNS/TAP of each mirror.
        taps: Vec<String>,
    },
}

/// Everything after a tool's name, handed to `vrhost-tools` as it is.
#[derive(clap::Args)]
struct ToolArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The router forwards from a heap on huge pages (it starts itself again
    // with them); the tools that forward get them from `tool`.
    if matches!(cli.command, Command::Run { .. } | Command::Replay { .. }) {
        vrhost_daemon::huge_heap::reexec();
    }
    vrhost_daemon::init_logging();
    vrhost_daemon::huge_heap::report();
    let result = match cli.command {
        Command::Check { config } => check(&config),
        Command::Replay { config, json } => replay::run(&config, json),
        Command::Ctl(a) => vrhost_api::ctl_main(*a),
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
        } => {
            // The TAP keeper is this very binary (`vrhost keep-taps`).
            if let Ok(exe) = std::env::current_exe() {
                vrhost_daemon::restart::use_keeper(exe);
            }
            vrhost_daemon::run_foreground(&config, stats_interval, mode)
        }
        Command::KeepTaps { hold_ms, taps } => Ok(vrhost_daemon::restart::keeper_main(
            std::time::Duration::from_millis(hold_ms),
            &taps,
        )),
        Command::Bench(a) => tool("bench", a),
        Command::BenchRoutes(a) => tool("bench-routes", a),
        Command::Fairness(a) => tool("fairness", a),
        Command::VrMemory(a) => tool("vr-memory", a),
        Command::Demo(a) => tool("demo", a),
        Command::Lab(a) => tool("lab", a),
        Command::Gen(a) => tool("gen", a),
        Command::Count(a) => tool("count", a),
        Command::Workload(a) => tool("workload", a),
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

/// The tools binary: `vrhost-tools` beside this executable, else on `PATH`.
fn tools_binary() -> PathBuf {
    const NAME: &str = "vrhost-tools";
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(NAME))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(NAME))
}

/// Runs `vrhost-tools NAME ARGS...` in place of this process (its exit
/// status is ours); returns only if it cannot start.
fn tool(name: &str, a: ToolArgs) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt as _;
    let bin = tools_binary();
    // The tools that forward start themselves again with a heap on huge
    // pages (`vrhost_daemon::huge_heap`), as `vrhost run` does.
    let mut cmd = std::process::Command::new(&bin);
    let err = cmd.arg(name).args(a.args).exec();
    anyhow::bail!(
        "`vrhost {name}` is in the vrhost-tools binary, which could not run ({}: {err}); \
         build it with `cargo build --release -p vrhost-tools` (it belongs beside vrhost)",
        bin.display()
    )
}

fn check(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let Some(cfg) = vrhost_daemon::load_config(path) else {
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
             description is the doc comment of its `DropReason` variant.\n\n\
             | counter | rule |\n|---|---|\n",
        );
    }
    for d in vrhost_dataplane::DropReason::ALL {
        if markdown {
            let _ = writeln!(out, "| `{}` | {} |", d.name(), d.description());
        } else {
            let _ = writeln!(out, "{:<30} {}", d.name(), d.description());
        }
    }
    out
}
