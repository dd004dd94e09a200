//! The vrhost daemon as a library: the workers on their cores, the per-VR
//! control planes and the management API over one running data plane.
//!
//! ```text
//!                    ┌──────────────────────── Daemon ────────────────────────┐
//!   config (TOML) ──▶│ runtime::Runtime ── start ──▶ runtime::Running          │
//!                    │   workers on cores: rx → pipeline → tx  (taps: punts)   │
//!                    │   Arc<Mutex<TableWriter>>: the one writer of the tables │
//!                    │        ▲                 ▲                  ▲           │
//!                    │  cplane (route sync) api_backend (API)  maintain (tick) │
//!                    └────────────────────────────────────────────────────────┘
//! ```
//!
//! Modules, each importing only those listed before it:
//! * [`restart`]: what one run leaves for the next (runtime directory, TAP
//!   keeper, FPM snapshot);
//! * [`capture`]: live capture, the workers' copies and the API's pcap stream;
//! * [`trace`]: packet trace through the API, its records given names;
//! * [`taps`]: TAP mirrors of VR interfaces and the worker side of punts;
//! * [`runtime`]: queues to workers to cores, the worker loops, counters;
//! * [`cplane`]: namespace and FPM route/address sync into the tables;
//! * [`reload`]: a new config file as table operations (pure, then applied);
//! * [`journal`]: API changes written down and replayed at start;
//! * [`notify`]: readiness and watchdog for a service manager;
//! * [`api_backend`]: the management API's [`vrhost_api::Backend`];
//! * [`report`]: counter tables and JSON.
//!
//! [`Daemon`] ties them together; `vrhost run` is [`run_foreground`].

#![forbid(unsafe_code)]

pub mod api_backend;
mod api_filters;
pub mod capture;
pub mod cplane;
pub mod huge_heap;
pub mod journal;
pub mod notify;
pub mod reload;
pub mod report;
pub mod restart;
pub mod runtime;
mod tables_lock;
pub mod taps;
pub mod trace;

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use vrhost_api::ApiHandle;
use vrhost_config::Config;
use vrhost_io::PortStats;

use crate::cplane::ControlPlanes;
use crate::runtime::{lock, Mode, Running, Runtime, WorkerReport};
use crate::taps::CpStats;

/// Logs to standard error through `tracing`, filtered by `VRHOST_LOG`
/// (`info` when unset; the `tracing_subscriber` env-filter syntax). With
/// `VRHOST_LOG_FORMAT=json`, one JSON object a line, every field (the VR as
/// `router`) a key, for a log collector.
pub fn init_logging() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("VRHOST_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("VRHOST_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Makes any panic stop the whole process: the panic is logged as an error
/// naming the thread, then the process aborts (SIGABRT, exit status 134 in
/// a shell), so a supervisor restarts it. `vrhost run` installs this first;
/// the release profile also builds with `panic = "abort"`.
///
/// Without it a panicking worker would die alone: its queues would stop
/// (or, on AF_XDP, fall through to the host kernel) while the rest ran on,
/// and a lock it held would be poisoned.
pub fn abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("unnamed");
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(
            thread,
            %location,
            "panic: {message}; vrhost stops now (abort) so that its supervisor restarts it"
        );
        default(info);
        std::process::abort();
    }));
}

/// Loads a config, or prints every error with its key to standard error
/// (`PATH: invalid config`, then one `  key: reason` line each) and returns
/// `None`: the command line's way of reporting a bad file.
pub fn load_config(path: &Path) -> Option<Config> {
    match Config::load(path) {
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

/// Routes' worth of FIB groups [`Daemon::maintain`] may rebuild per call in
/// tables whose routes stopped changing. With this budget, and one call
/// every 100 ms, the garbage of an incrementally grown 1M-route IPv4 table
/// goes in 20 calls of at most 2 ms of control-lock time each; one busy
/// IPv6 /8 (a single group) can take about 20 ms (`docs/fib.md`,
/// "Compaction").
pub const COMPACT_ROUTES_PER_TICK: usize = 50_000;

/// How long [`Daemon::start`] holds the workers back while the control
/// planes' first state (each namespace's tables, restored FPM routes) goes
/// into the tables: a restart forwards with the routes it had, not without
/// them. Past it, workers start anyway (logged) and the rest follows.
pub const INITIAL_SYNC_WAIT: Duration = Duration::from_secs(5);

/// A running router: workers forwarding, the control planes syncing routes
/// into the tables, and the management API (when the config has `[api]`).
pub struct Daemon {
    running: Running,
    /// Stopped before the workers (dropping it joins the sync threads).
    planes: Option<ControlPlanes>,
    /// Stopped when the daemon is dropped.
    api: Option<ApiHandle>,
    /// Changes the running tables for the API and for reloads.
    backend: Arc<api_backend::RuntimeBackend>,
    /// Where the config was read, for reloads.
    config_path: std::path::PathBuf,
    /// Whether any router has a control plane (for the stop report).
    has_control_planes: bool,
    /// The runtime directory and the TAP mirrors, with control planes.
    restart: Option<runtime::Restart>,
    /// Holds the mirrors' carrier across a restart.
    keeper: Option<restart::Keeper>,
    /// How long the keeper holds once this process is gone.
    tap_hold: Duration,
}

/// What the workers counted by the time they stopped.
pub struct StopReport {
    /// Driver counters of every receive queue: (port name, counters).
    pub queues: Vec<(String, PortStats)>,
    /// Punts and TAP traffic of the control planes, summed over workers.
    pub cp: CpStats,
    /// Whether to print `cp` (a router has a control plane, or punts were
    /// discarded).
    pub show_cp: bool,
}

impl Daemon {
    /// Starts workers for `cfg` on its configured cores, then the API and
    /// the control planes. `config_path` is where a reload reads the config
    /// again.
    pub fn start(cfg: &Config, config_path: &Path, mode: Mode) -> Result<Daemon> {
        let t0 = Instant::now();
        let mut rt = Runtime::from_config(cfg, &cfg.dataplane.workers, mode)?;
        for a in &rt.assignment {
            tracing::info!(
                port = a.port,
                queue = a.queue,
                worker = a.worker,
                core = a.core,
                "rx queue"
            );
        }
        let restart_state = rt.restart.take();
        let taps: Vec<(String, String)> = restart_state
            .iter()
            .flat_map(|r| r.mirrors.iter())
            .map(|(_, m)| (m.netns.clone(), m.tap.clone()))
            .collect();
        // Workers own their queues (the TAPs are read again from here on)
        // but forward only once the tables hold what the tenants had.
        let running = rt.start_held();
        let keeper = match restart::Keeper::spawn(&taps, cfg.dataplane.tap_hold) {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!("{e:#}; a restart will show the tenants a link down");
                None
            }
        };
        let (backend, api) = api_backend::start(cfg, config_path, &running)?;
        // Routes and addresses from the tenants' namespaces and FPM streams.
        let dir = restart_state.as_ref().map(|r| &r.dir);
        let planes = cplane::start(cfg, &running.writer, &|router| {
            dir.map(|d| d.fpm_routes(router)).unwrap_or_default()
        })?;
        let behind = planes.wait_synced(INITIAL_SYNC_WAIT);
        if !behind.is_empty() {
            tracing::warn!(
                routers = ?behind,
                "forwarding starts before these routers' control planes are in the tables"
            );
        }
        running.release();
        tracing::info!(
            ms = t0.elapsed().as_millis() as u64,
            mirrors = taps.len(),
            "workers forward"
        );
        Ok(Daemon {
            running,
            planes: Some(planes),
            api,
            backend,
            config_path: config_path.to_path_buf(),
            has_control_planes: cfg.routers.iter().any(|r| r.control.is_some()),
            restart: restart_state,
            keeper,
            tap_hold: cfg.dataplane.tap_hold,
        })
    }

    /// The TAP keeper's process id, when one runs.
    pub fn keeper_pid(&self) -> Option<u32> {
        self.keeper.as_ref().map(restart::Keeper::pid)
    }

    /// The running workers, their counters and the table writer.
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// The management API, when the config has `[api]`.
    pub fn api(&self) -> Option<&ApiHandle> {
        self.api.as_ref()
    }

    /// Periodic upkeep, to call about every 100 ms: the control planes of
    /// deleted VRs are stopped, and tables fed route by route shrink to their
    /// bulk-loaded size once their feed pauses, a few /8 groups per call.
    /// Returns the routes whose groups were rebuilt.
    pub fn maintain(&mut self) -> usize {
        if let Some(planes) = self.planes.as_mut() {
            let writer = &self.running.writer;
            planes.reap(|vr| lock(writer).working().vr_alive(vr));
        }
        self.delete_detached_mirrors();
        lock(&self.running.writer).compact_quiet_fibs(COMPACT_ROUTES_PER_TICK)
    }

    /// Deletes the TAP mirrors of interfaces (or VRs) deleted since the last
    /// call: persistent TAPs outlive their queues, so they go explicitly.
    fn delete_detached_mirrors(&mut self) {
        let Some(r) = self.restart.as_mut() else {
            return;
        };
        let shared = self.running.writer.lock().map(|w| w.shared().clone());
        let Ok(shared) = shared else { return };
        let before = r.mirrors.len();
        r.mirrors.retain(|(iface, m)| {
            if shared.iface_attached(*iface) {
                return true;
            }
            if let Err(e) = vrhost_cp::delete_mirror(&m.netns, &m.tap) {
                tracing::warn!("{e}");
            }
            false
        });
        if r.mirrors.len() != before {
            let list: Vec<_> = r.mirrors.iter().map(|(_, m)| m.clone()).collect();
            if let Err(e) = r.dir.save_mirrors(&list) {
                tracing::warn!("{e:#}");
            }
        }
    }

    /// Reads the config file again and applies it as `vrhost ctl reload`
    /// does: all or nothing, refused by key.
    pub fn reload(&self) -> Result<vrhost_api::types::ReloadReport, vrhost_api::ApiError> {
        use vrhost_api::Backend as _;
        let text = std::fs::read_to_string(&self.config_path).map_err(|e| {
            vrhost_api::ApiError::Config(vec![vrhost_api::ConfigIssue {
                key: "config".into(),
                reason: format!("{}: {e}", self.config_path.display()),
            }])
        })?;
        self.backend.reload(&text)
    }

    /// The per-port and per-VR counter table `vrhost run` prints.
    pub fn stats_table(&self) -> String {
        report::table(&report::Source::Running(&self.running))
    }

    /// Stops the control planes, then the workers, and returns what the
    /// workers counted. The API stops when the daemon is dropped.
    pub fn stop(mut self) -> StopReport {
        // What the next run restores: each router's FPM routes.
        if let (Some(planes), Some(r)) = (self.planes.as_ref(), self.restart.as_ref()) {
            for (router, routes) in planes.fpm_routes() {
                match r.dir.save_fpm_routes(&router, &routes) {
                    Ok(()) => tracing::info!(
                        router,
                        routes = routes.len(),
                        "FPM routes saved for the next run"
                    ),
                    Err(e) => tracing::warn!(router, "saving the FPM routes: {e:#}"),
                }
            }
        }
        drop(self.planes.take());
        let shared = &self.running.shared;
        let names: Vec<String> = shared
            .port_ids()
            .map(|p| shared.port_name(p).to_string())
            .collect();
        let reports: Vec<WorkerReport> = self.running.stop_with_reports();
        let mut cp = CpStats::default();
        for r in &reports {
            cp.add(&r.cp);
        }
        let queues = reports
            .into_iter()
            .flat_map(|r| r.queues)
            .map(|(p, st)| {
                let name = names.get(usize::from(p)).map_or("?", String::as_str);
                (name.to_string(), st)
            })
            .collect();
        if let Some(k) = self.keeper.take() {
            tracing::info!(
                pid = k.pid(),
                hold_s = self.tap_hold.as_secs(),
                "the TAP keeper holds the mirrors' carrier for the next run"
            );
        }
        StopReport {
            show_cp: self.has_control_planes || cp.punt_discarded > 0,
            queues,
            cp,
        }
    }
}

impl std::fmt::Display for StopReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cp = &self.cp;
        if self.show_cp {
            writeln!(
                f,
                "control planes: {} punted to TAPs, {} punts discarded (no control plane), {} TAP writes failed, \
                 {} injected from TAPs, {} duplicate ARP/NA answers dropped, {} bad frames from TAPs, \
                 {} TAP frames over the VR's ceiling or share, {} TAP queues closed (VR or interface deleted)",
                cp.to_tap, cp.punt_discarded, cp.tap_write_failed, cp.injected, cp.duplicate_answers, cp.bad_from_tap,
                cp.tap_limited, cp.taps_closed
            )?;
        }
        writeln!(
            f,
            "driver receive queues (port, received, dropped by the ring):"
        )?;
        for (name, st) in &self.queues {
            writeln!(f, "  {name:<16} {:>12} {:>12}", st.rx_packets, st.dropped)?;
        }
        Ok(())
    }
}

/// `vrhost run`: forward until SIGINT or SIGTERM, printing the counter
/// table every `stats_interval` seconds (0: only at exit).
pub fn run_foreground(path: &Path, stats_interval: u64, mode: Mode) -> Result<ExitCode> {
    abort_on_panic();
    let Some(cfg) = load_config(path) else {
        return Ok(ExitCode::FAILURE);
    };
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing a signal handler")?;
    }
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(SIGHUP, hup.clone()).context("installing the SIGHUP handler")?;
    let notifier = notify::Notifier::from_env();
    let mut daemon = Daemon::start(&cfg, path, mode)?;
    notifier.send("READY=1\nSTATUS=forwarding");
    let counters = daemon.running.counters.clone();
    let watchdog = notify::Notifier::from_env().watch(
        move || counters.iter().map(|c| c.heartbeat.get()).collect(),
        stop.clone(),
    );
    tracing::info!(
        ports = cfg.ports.len(),
        routers = cfg.routers.len(),
        "running; SIGINT or SIGTERM stops, SIGHUP reloads the config"
    );
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if hup.swap(false, Ordering::Relaxed) {
            notifier.send("RELOADING=1\nSTATUS=reloading the config");
            let result = daemon.reload();
            notifier.send("READY=1\nSTATUS=forwarding");
            match result {
                Ok(r) => tracing::info!(
                    created = ?r.created,
                    deleted = ?r.deleted,
                    changed = ?r.changed,
                    "SIGHUP: config reloaded"
                ),
                Err(e) => tracing::error!("SIGHUP: config not reloaded, nothing changed: {e}"),
            }
        }
        let compacted = daemon.maintain();
        if compacted > 0 {
            tracing::debug!(routes = compacted, "FIB groups compacted");
        }
        if stats_interval > 0 && last.elapsed().as_secs() >= stats_interval {
            last = Instant::now();
            println!("{}", daemon.stats_table());
        }
    }
    tracing::info!("stopping");
    notifier.send("STOPPING=1");
    if let Some(w) = watchdog {
        let _ = w.join();
    }
    println!("{}", daemon.stats_table());
    print!("{}", daemon.stop());
    Ok(ExitCode::SUCCESS)
}
