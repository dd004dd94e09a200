//! One worker: the engine plus its ports, polled in a run-to-completion loop.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use vrhost_control::{Config, Driver};
use vrhost_dataplane::{Engine, Mbuf, TxBatch};
use vrhost_io::{MemoryPort, PcapPort, Port};

/// Frames taken from one port per poll (DPDK's usual burst).
pub const BURST: usize = 64;

/// The engine and the ports it polls.
pub struct Worker {
    pub engine: Engine,
    pub ports: Vec<Box<dyn Port>>,
    rx: Vec<Mbuf>,
    tx: TxBatch,
    start: Instant,
}

impl Worker {
    /// A worker over already-opened ports (the demo builds its own).
    pub fn new(engine: Engine, ports: Vec<Box<dyn Port>>) -> Self {
        let n = ports.len();
        Worker {
            engine,
            ports,
            rx: Vec::with_capacity(BURST),
            tx: TxBatch::new(n),
            start: Instant::now(),
        }
    }

    /// Builds the engine and opens every port of `cfg`.
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let spec = vrhost_control::engine_spec(cfg, |_| [0x02, 0, 0, 0, 0, 0]);
        let engine = Engine::new(&spec).context("building the engine")?;
        let mut ports: Vec<Box<dyn Port>> = Vec::new();
        for p in &cfg.ports {
            let port: Box<dyn Port> = match p.driver {
                Driver::Memory => match &p.rx {
                    Some(rx) => Box::new(
                        MemoryPort::open(rx).with_context(|| format!("port {:?}", p.name))?,
                    ),
                    None => Box::new(MemoryPort::from_frames(std::iter::empty())),
                },
                Driver::Pcap => Box::new(
                    PcapPort::open(p.rx.as_deref(), p.tx.as_deref())
                        .with_context(|| format!("port {:?}", p.name))?,
                ),
                other => bail!(
                    "port {:?}: driver {other} is not available yet; use memory or pcap",
                    p.name
                ),
            };
            ports.push(port);
        }
        Ok(Worker::new(engine, ports))
    }

    /// Nanoseconds since the worker started: the engine's clock.
    #[inline]
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// One pass over every port: receive a burst, process, transmit.
    /// Returns the frames received.
    #[inline]
    pub fn poll_once(&mut self) -> usize {
        let now = self.now();
        let mut received = 0;
        for (i, port) in self.ports.iter_mut().enumerate() {
            received += port.rx_burst(self.engine.pool(), &mut self.rx, BURST, i as u16);
            if !self.rx.is_empty() {
                self.engine.process_burst(&mut self.rx, now, &mut self.tx);
            }
        }
        if received == 0 {
            self.engine.poll(now, &mut self.tx);
        }
        for (i, port) in self.ports.iter_mut().enumerate() {
            if !self.tx.ports[i].is_empty() {
                if let Err(e) = port.tx_burst(&mut self.tx.ports[i], self.engine.pool(), now) {
                    tracing::error!("{e}");
                }
            }
        }
        // Nothing consumes punted packets until a control plane is attached.
        for vr in 0..self.engine.vrs().len() {
            if self.engine.vrs()[vr].punt_len() > 0 {
                self.engine.drain_punted(vr, |_| {});
            }
        }
        received
    }
}

/// Pins the calling thread to `core`, warning when that is impossible.
pub fn pin(core: usize) {
    let ok = core_affinity::get_core_ids()
        .and_then(|ids| ids.into_iter().find(|c| c.id == core))
        .map(core_affinity::set_for_current)
        .unwrap_or(false);
    if ok {
        tracing::info!(core, "worker pinned");
    } else {
        tracing::warn!(core, "could not pin the worker to this core");
    }
}

/// `vrhost run`: forward until SIGINT or SIGTERM.
pub fn run_foreground(path: &Path, stats_interval: u64) -> Result<ExitCode> {
    let cfg = match Config::load(path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{}: invalid config", path.display());
            for e in &errors.0 {
                eprintln!("  {e}");
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the signal handler")?;
    let mut worker = Worker::from_config(&cfg)?;
    if cfg.dataplane.workers.len() > 1 {
        tracing::warn!(
            "one worker for now; using core {}",
            cfg.dataplane.workers[0]
        );
    }
    pin(cfg.dataplane.workers[0]);
    tracing::info!(
        ports = cfg.ports.len(),
        routers = cfg.routers.len(),
        "running; SIGINT or SIGTERM stops"
    );
    let mut last_stats = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if worker.poll_once() == 0 {
            // Idle: the pcap and memory ports never block, so yield briefly.
            std::thread::sleep(Duration::from_micros(50));
        }
        if stats_interval > 0 && last_stats.elapsed() >= Duration::from_secs(stats_interval) {
            last_stats = Instant::now();
            println!("{}", crate::report::table(&worker.engine));
        }
    }
    tracing::info!("stopping");
    println!("{}", crate::report::table(&worker.engine));
    Ok(ExitCode::SUCCESS)
}
