//! Workers on cores: who owns which receive queue, and the loops they run.
//!
//! ```text
//!   main thread: TableWriter (routes, neighbors) ─ publish ─▶ Shared ◀─ read ─┬─ worker 0 (core a): rx queues {p0q0, p1q0} → pipeline → tx p0', p1'
//!                stats: sums every worker's counters                            └─ worker 1 (core b): rx queues {p0q1, p1q1} → pipeline → tx p0'', p1''
//!
//!   --mode pipeline (the paper's cross-core handoff, for measurement):
//!   rx thread (core a): rx queues ──▶ batch ring ──▶ worker (core b): pipeline → tx
//!                       ◀── buffers back ◀────────────────┘
//! ```
//!
//! Each receive queue has exactly one owner; each worker has its own transmit
//! queue on every port; workers share no lock and no read-modify-write atomic
//! on the per-packet path. Run-to-completion is the default.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use vrhost_config::{Config, Driver};
use vrhost_dataplane::{
    sum_ifaces, sum_ports, sum_vr_busy_ns, Clock, Counters, EngineSpec, Mbuf, Shared, TableWriter,
    TxBatch, Worker, WorkerCounters,
};
use vrhost_dataplane::{PortId, VrId};
use vrhost_io::af_packet::AfPacketPort;
use vrhost_io::af_xdp::AfXdpPort;
use vrhost_io::tap::TapPort;
use vrhost_io::wait::Waited;
use vrhost_io::{MemoryPort, PcapPort, Port, PortStats, VhostUserSocket};

/// Frames taken from one queue per poll (DPDK's usual burst).
pub const BURST: usize = 64;

/// How work is mapped to cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every worker receives, forwards and transmits its own packets.
    Rtc,
    /// One core receives, another forwards and transmits (needs two cores per pair).
    Pipeline,
}

/// One receive queue and where it runs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Assignment {
    /// Port name.
    pub port: String,
    /// Queue number on that port.
    pub queue: u16,
    /// Worker index.
    pub worker: usize,
    /// Core the worker (or its rx thread, in pipeline mode) is pinned to.
    pub core: usize,
}

/// What one worker owns before it starts.
pub struct Plan {
    /// Core to pin to.
    pub core: usize,
    /// Core of the receive thread in pipeline mode.
    pub rx_core: Option<usize>,
    /// Every driver queue this worker owns.
    pub queues: Vec<Box<dyn Port>>,
    /// Receive queues: engine port index and index into `queues`.
    pub rx: Vec<(u16, usize)>,
    /// Per port, the index into `queues` this worker transmits with.
    pub tx: Vec<usize>,
    /// This worker's queue of every TAP mirror (VRs with a control plane).
    pub taps: Vec<crate::taps::TapQueue>,
}

/// Workers ready to start.
pub struct Runtime {
    /// The table writer, with the tables every worker will read.
    pub writer: TableWriter,
    /// One engine per worker, in worker order.
    pub workers: Vec<Worker>,
    /// What each worker owns, in worker order.
    pub plans: Vec<Plan>,
    /// Every receive queue, its worker and its core.
    pub assignment: Vec<Assignment>,
    /// How work maps to cores.
    pub mode: Mode,
    /// The clock workers measure each VR's cost with, and its ticks per
    /// second; `None` turns cost accounting and fair sharing off.
    pub clock: Option<(Clock, u64)>,
    /// With a clock: hold VRs to their weighted shares when saturated
    /// (true), or only measure.
    pub fair_share: bool,
    /// Plain IPv4 forwards take the fast path (the default; off for A/B
    /// benchmarks of it).
    pub fast_path: bool,
    /// Batch FIB lookups prefetch with the CPU's prefetch while a worker's
    /// VRs hold at least this many IPv4 routes together (default
    /// [`vrhost_fib::PREFETCH_MIN_ROUTES`]; 0: always; `None`: never, for
    /// A/B benchmarks). See `Worker::set_prefetch`.
    pub prefetch_min_routes: Option<usize>,
    /// With control planes: the locked runtime directory and the mirrors
    /// made or adopted ([`crate::restart`]).
    pub restart: Option<Restart>,
}

/// What [`Runtime::attach_mirrors`] leaves for the daemon: the locked
/// runtime directory and every mirror.
pub struct Restart {
    /// `[dataplane] runtime_dir`, locked.
    pub dir: crate::restart::RuntimeDir,
    /// Every mirror: (global interface index, record).
    pub mirrors: Vec<(vrhost_dataplane::IfaceId, crate::restart::MirrorRecord)>,
}

/// What a worker thread reports when it stops.
#[derive(Clone, Debug, Default)]
pub struct WorkerReport {
    /// Driver counters of every receive queue it owned, by engine port index.
    pub queues: Vec<(u16, PortStats)>,
    /// Ticks of the worker's clock from start to stop (0 without a clock).
    pub ticks: u64,
    /// Rounds in which fair-share budgets were enforced.
    pub rounds_enforced: u64,
    /// Ticks of the worker's clock each VR's runs took, by VR index (empty
    /// without a clock).
    pub charged: Vec<u64>,
    /// Punts and TAP traffic of the control planes.
    pub cp: crate::taps::CpStats,
}

/// Started workers.
pub struct Running {
    /// The one writer of the tables; the API, the control-plane sync and
    /// the stats loop take turns through the lock (never a worker).
    pub writer: Arc<Mutex<TableWriter>>,
    /// Each worker's counters (workers write them, anyone reads).
    pub counters: Vec<Arc<WorkerCounters>>,
    /// The published tables and names workers read.
    pub shared: Arc<Shared>,
    /// Every receive queue, its worker and its core.
    pub assignment: Vec<Assignment>,
    /// Live captures the workers copy frames for.
    pub capture: Arc<crate::capture::CaptureHub>,
    stop: Arc<AtomicBool>,
    go: Arc<AtomicBool>,
    threads: Vec<JoinHandle<WorkerReport>>,
}

/// How a worker gets its transmit queue on a port.
pub enum TxQueue {
    /// A queue of its own from this factory (memory and pcap ports).
    Own(Box<dyn FnMut() -> Box<dyn Port>>),
    /// The socket of the receive queue it owns on that port (af_packet,
    /// af_xdp, tap: one socket per queue, and one queue per worker).
    SameAsRx,
}

impl TxQueue {
    /// Each worker gets its own memory sink: counted, then discarded.
    pub fn discard() -> Self {
        TxQueue::Own(Box::new(|| Box::new(MemoryPort::sink())))
    }
}

/// The receive queues of one port and how workers transmit on it.
pub struct PortQueues {
    /// The port's name.
    pub name: String,
    /// Its receive queues; each goes to one worker.
    pub rx: Vec<Box<dyn Port>>,
    /// How each worker gets its transmit queue.
    pub tx: TxQueue,
}

impl Runtime {
    /// Spreads every port's queues over the workers (queue `q` of a port to
    /// worker `q mod n`) and builds one transmit queue per worker per port.
    pub fn new(
        spec: &EngineSpec,
        ports: Vec<PortQueues>,
        cores: &[usize],
        mode: Mode,
    ) -> Result<Runtime> {
        if cores.is_empty() {
            bail!("no worker cores");
        }
        let (n, fwd_cores, rx_cores): (usize, Vec<usize>, Vec<Option<usize>>) = match mode {
            Mode::Rtc => (cores.len(), cores.to_vec(), vec![None; cores.len()]),
            Mode::Pipeline => {
                if cores.len() < 2 || !cores.len().is_multiple_of(2) {
                    bail!("pipeline mode pairs an rx core with a forwarding core: give an even number of cores");
                }
                let pairs = cores.len() / 2;
                (
                    pairs,
                    cores[pairs..].to_vec(),
                    cores[..pairs].iter().map(|&c| Some(c)).collect(),
                )
            }
        };
        let mut writer = TableWriter::new(spec).context("building the tables")?;
        let workers = Worker::create(&mut writer, n);
        let mut plans: Vec<Plan> = (0..n)
            .map(|k| Plan {
                core: fwd_cores[k],
                rx_core: rx_cores[k],
                queues: Vec::new(),
                rx: Vec::new(),
                tx: Vec::new(),
                taps: Vec::new(),
            })
            .collect();
        let mut assignment = Vec::new();
        for (pi, p) in ports.into_iter().enumerate() {
            let PortQueues { name, rx, tx } = p;
            if matches!(tx, TxQueue::SameAsRx) {
                if rx.len() != n {
                    bail!("port {name:?}: give it queues = {n}, one per worker, so every worker has its own socket");
                }
                if mode == Mode::Pipeline {
                    bail!("port {name:?}: pipeline mode needs memory ports (rx and tx must be separate queues)");
                }
            }
            let mut first_rx_of = vec![None; n];
            for (q, queue) in rx.into_iter().enumerate() {
                let k = q % n;
                assignment.push(Assignment {
                    port: name.clone(),
                    queue: q as u16,
                    worker: k,
                    core: plans[k].rx_core.unwrap_or(plans[k].core),
                });
                let plan = &mut plans[k];
                plan.queues.push(queue);
                let idx = plan.queues.len() - 1;
                plan.rx.push((pi as u16, idx));
                first_rx_of[k].get_or_insert(idx);
            }
            match tx {
                TxQueue::Own(mut make) => {
                    for plan in plans.iter_mut() {
                        plan.queues.push(make());
                        plan.tx.push(plan.queues.len() - 1);
                    }
                }
                TxQueue::SameAsRx => {
                    for (k, plan) in plans.iter_mut().enumerate() {
                        plan.tx
                            .push(first_rx_of[k].context("every worker owns one queue")?);
                    }
                }
            }
        }
        Ok(Runtime {
            writer,
            workers,
            plans,
            assignment,
            mode,
            clock: Some((vrhost_io::clock::tsc as Clock, vrhost_io::clock::tsc_hz())),
            fair_share: true,
            fast_path: true,
            prefetch_min_routes: Some(vrhost_fib::PREFETCH_MIN_ROUTES),
            restart: None,
        })
    }

    /// Builds the runtime for a config's memory and pcap ports.
    pub fn from_config(cfg: &Config, cores: &[usize], mode: Mode) -> Result<Runtime> {
        let macs = port_macs(cfg);
        let spec =
            vrhost_config::engine_spec(cfg, |port| macs.get(port).copied().unwrap_or(FALLBACK_MAC));
        let mut ports = Vec::new();
        for p in &cfg.ports {
            let queues: PortQueues = match p.driver {
                Driver::Memory => {
                    let base = match &p.rx {
                        Some(rx) => {
                            MemoryPort::open(rx).with_context(|| format!("port {:?}", p.name))?
                        }
                        None => MemoryPort::sink(),
                    };
                    PortQueues {
                        name: p.name.clone(),
                        rx: base
                            .split_by_flow(p.queues as usize)
                            .into_iter()
                            .map(|q| Box::new(q) as Box<dyn Port>)
                            .collect(),
                        tx: TxQueue::discard(),
                    }
                }
                Driver::Pcap => {
                    if cores.len() > 1 || p.queues > 1 {
                        bail!("port {:?}: a pcap port is one file; run it with one worker and one queue", p.name);
                    }
                    let name = || format!("port {:?}", p.name);
                    let rx = PcapPort::open(p.rx.as_deref(), None).with_context(name)?;
                    let mut tx = Some(PcapPort::open(None, p.tx.as_deref()).with_context(name)?);
                    PortQueues {
                        name: p.name.clone(),
                        rx: vec![Box::new(rx)],
                        // One worker, so one transmit queue: the file.
                        tx: TxQueue::Own(Box::new(move || match tx.take() {
                            Some(t) => Box::new(t) as Box<dyn Port>,
                            None => Box::new(MemoryPort::sink()),
                        })),
                    }
                }
                Driver::AfPacket | Driver::AfXdp => {
                    let ifname = p
                        .interface
                        .as_deref()
                        .context("validated: af_packet/af_xdp ports name an interface")?;
                    let q = p.queues;
                    let rx = (0..q)
                        .map(|i| -> Result<Box<dyn Port>> {
                            Ok(match p.driver {
                                Driver::AfPacket => {
                                    let mut port = if p.control_queue {
                                        AfPacketPort::open_steered(ifname, i, q)
                                    } else {
                                        AfPacketPort::open(ifname, i, q)
                                    }
                                    .with_context(|| format!("port {:?}", p.name))?;
                                    if i == 0 && !p.host_stack {
                                        if let Err(e) = port.keep_host_stack_off() {
                                            tracing::warn!(
                                                "port {:?}: the host's stack still receives its \
                                                 frames too: {e}",
                                                p.name
                                            );
                                        }
                                    }
                                    if i == 0 && p.rps {
                                        steer_receive(&mut port, &p.name, cores);
                                    }
                                    Box::new(port)
                                }
                                _ => Box::new(
                                    AfXdpPort::open(ifname, i, q)
                                        .with_context(|| format!("port {:?}", p.name))?,
                                ),
                            })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    PortQueues {
                        name: p.name.clone(),
                        rx,
                        tx: TxQueue::SameAsRx,
                    }
                }
                Driver::VhostUser => {
                    let path = p
                        .socket
                        .as_deref()
                        .context("validated: vhost_user ports name a socket")?;
                    let at = || format!("port {:?}", p.name);
                    let dev = VhostUserSocket::listen(&p.name, path, p.queues).with_context(at)?;
                    let rx = (0..p.queues)
                        .map(|i| -> Result<Box<dyn Port>> {
                            Ok(Box::new(dev.port(i).with_context(at)?))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    PortQueues {
                        name: p.name.clone(),
                        rx,
                        tx: TxQueue::SameAsRx,
                    }
                }
                Driver::Tap => {
                    let ifname = p.interface.as_deref().unwrap_or(&p.name);
                    if p.queues != 1 {
                        bail!("port {:?}: a tap port has one queue", p.name);
                    }
                    let open = || TapPort::create(ifname);
                    let tap = match &p.netns {
                        // The device is the namespace's; its descriptor
                        // works from any thread.
                        Some(ns) => vrhost_io::netns::run_in(ns, open)
                            .map_err(anyhow::Error::from)
                            .and_then(|r| r.map_err(anyhow::Error::from)),
                        None => open().map_err(anyhow::Error::from),
                    }
                    .with_context(|| format!("port {:?}", p.name))?;
                    PortQueues {
                        name: p.name.clone(),
                        rx: vec![Box::new(tap)],
                        tx: TxQueue::SameAsRx,
                    }
                }
            };
            ports.push(queues);
        }
        let mut rt = Runtime::new(&spec, ports, cores, mode)?;
        if cfg.routers.iter().any(|r| r.control.is_some()) {
            rt.attach_mirrors(cfg)?;
        } else if cfg.dataplane.runtime_dir.join("mirrors.json").exists() {
            // The last run had control planes and this config has none:
            // its mirrors go (the namespaces stay).
            let dir = crate::restart::RuntimeDir::open(&cfg.dataplane.runtime_dir)?;
            crate::taps::delete_stale(&dir.mirrors(), &[]);
            dir.save_mirrors(&[])?;
        }
        Ok(rt)
    }

    /// Creates the control-plane namespaces and TAP mirrors of `cfg` and
    /// gives every worker one queue of each TAP.
    pub fn attach_mirrors(&mut self, cfg: &Config) -> Result<()> {
        if self.mode == Mode::Pipeline {
            bail!("control-plane namespaces ([router.control]) need --mode rtc");
        }
        let dir = crate::restart::RuntimeDir::open(&cfg.dataplane.runtime_dir)?;
        let previous = dir.mirrors();
        let shared = self.writer.shared().clone();
        let n = self.plans.len();
        let mirrors = crate::taps::mirror_all(
            cfg,
            shared.ifaces(),
            |vr| shared.vr_ifaces(VrId::new(vr)).to_vec(),
            n,
            &previous,
        )?;
        let now: Vec<_> = mirrors.records.iter().map(|(_, r)| r.clone()).collect();
        crate::taps::delete_stale(&previous, &now);
        dir.save_mirrors(&now)?;
        for (iface, queues) in mirrors.ifaces {
            for (plan, port) in self.plans.iter_mut().zip(queues) {
                plan.taps.push(crate::taps::TapQueue { iface, port });
            }
        }
        self.restart = Some(Restart {
            dir,
            mirrors: mirrors.records,
        });
        Ok(())
    }

    /// Starts one thread per worker (two per pair in pipeline mode).
    pub fn start(self) -> Running {
        let running = self.start_held();
        running.release();
        running
    }

    /// Starts the worker threads held: they own their queues (TAP queues
    /// attached) but forward nothing until [`Running::release`], so the
    /// tables can be filled first (a restart reads the namespaces' routes
    /// before forwarding begins).
    pub fn start_held(self) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let go = Arc::new(AtomicBool::new(false));
        let capture = crate::capture::CaptureHub::new(self.workers.len());
        let counters = self.workers.iter().map(Worker::counters).collect();
        let shared = self.writer.shared().clone();
        let mut threads = Vec::new();
        let clock = self.clock.map(|(c, hz)| (c, hz, self.fair_share));
        for (i, (mut w, plan)) in self.workers.into_iter().zip(self.plans).enumerate() {
            w.set_fast_path(self.fast_path);
            if let Some(min_routes) = self.prefetch_min_routes {
                w.set_prefetch(vrhost_io::prefetch, min_routes);
            }
            match self.mode {
                Mode::Rtc => {
                    let stop = stop.clone();
                    let go = go.clone();
                    let cap = crate::capture::WorkerCapture::new(capture.clone(), i);
                    threads.push(spawn_named(format!("vrhost-worker-{i}"), move || {
                        if !wait_for_go(&go, &stop) {
                            return WorkerReport::default();
                        }
                        run_to_completion(w, plan, cap, clock, &stop)
                    }));
                }
                Mode::Pipeline => {
                    let (to_fwd, from_rx) = sync_channel::<Vec<Mbuf>>(RING_BATCHES);
                    let (to_rx, back) = sync_channel::<Vec<Mbuf>>(RING_BATCHES);
                    let rx_core = plan.rx_core.unwrap_or(plan.core);
                    // Memory ports only (checked in `new`): receive and transmit
                    // queues are distinct objects, so they can part ways.
                    let Plan {
                        core,
                        queues,
                        rx: rx_idx,
                        tx: tx_idx,
                        ..
                    } = plan;
                    let mut slots: Vec<Option<Box<dyn Port>>> =
                        queues.into_iter().map(Some).collect();
                    let rx: Vec<(u16, Box<dyn Port>)> = rx_idx
                        .iter()
                        .filter_map(|&(p, i)| slots[i].take().map(|q| (p, q)))
                        .collect();
                    let tx: Vec<Box<dyn Port>> = tx_idx
                        .iter()
                        .map(|&i| {
                            slots[i]
                                .take()
                                .unwrap_or_else(|| Box::new(MemoryPort::sink()))
                        })
                        .collect();
                    let (s1, g1) = (stop.clone(), go.clone());
                    threads.push(spawn_named(format!("vrhost-rx-{i}"), move || {
                        if !wait_for_go(&g1, &s1) {
                            return WorkerReport::default();
                        }
                        rx_thread(rx_core, rx, to_fwd, back, &s1)
                    }));
                    let (s2, g2) = (stop.clone(), go.clone());
                    threads.push(spawn_named(format!("vrhost-worker-{i}"), move || {
                        if !wait_for_go(&g2, &s2) {
                            return WorkerReport::default();
                        }
                        forward_thread(w, core, tx, from_rx, to_rx, clock, &s2)
                    }));
                }
            }
        }
        Running {
            writer: Arc::new(Mutex::new(self.writer)),
            counters,
            shared,
            assignment: self.assignment,
            capture,
            stop,
            go,
            threads,
        }
    }
}

/// Waits until `go` (true) or `stop` (false).
fn wait_for_go(go: &AtomicBool, stop: &AtomicBool) -> bool {
    while !go.load(Ordering::Acquire) {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    true
}

impl Running {
    /// Lets workers started by [`Runtime::start_held`] forward.
    pub fn release(&self) {
        self.go.store(true, Ordering::Release);
    }

    /// Whether the workers were released.
    pub fn released(&self) -> bool {
        self.go.load(Ordering::Acquire)
    }

    /// Port counters summed over the workers.
    pub fn port_counters(&self, port: PortId) -> Counters {
        sum_ports(&self.counters, port)
    }

    /// VR counters summed over the workers.
    pub fn vr_counters(&self, vr: VrId) -> Counters {
        sum_ifaces(&self.counters, self.shared.vr_ifaces(vr))
    }

    /// VR `vr`'s worker time in nanoseconds, summed over the workers
    /// ([`vrhost_dataplane::sum_vr_busy_ns`]).
    pub fn vr_busy_ns(&self, vr: VrId) -> Option<u64> {
        sum_vr_busy_ns(&self.counters, vr)
    }

    /// Counters summed over every port and worker.
    pub fn all_ports(&self) -> Counters {
        let mut all = Counters::default();
        for p in self.shared.port_ids() {
            all.add(&self.port_counters(p));
        }
        all
    }

    /// Stops every worker and waits for it.
    pub fn stop(self) {
        self.stop_with_stats();
    }

    /// The table writer, locked; a poisoned lock (a panic while holding it)
    /// still yields the tables, which are only changed through `commit`.
    pub fn writer(&self) -> MutexGuard<'_, TableWriter> {
        lock(&self.writer)
    }

    /// Stops every worker and returns the drivers' own counters of every
    /// receive queue, by engine port index (ring drops live there).
    pub fn stop_with_stats(self) -> Vec<(u16, PortStats)> {
        self.stop_with_reports()
            .into_iter()
            .flat_map(|r| r.queues)
            .collect()
    }

    /// Stops every worker and returns what each thread reports.
    pub fn stop_with_reports(self) -> Vec<WorkerReport> {
        self.stop.store(true, Ordering::Relaxed);
        let mut reports = Vec::new();
        for t in self.threads {
            match t.join() {
                Ok(r) => reports.push(r),
                Err(_) => tracing::error!("a worker thread panicked"),
            }
        }
        reports
    }
}

/// The MAC of a port that has none configured and no Linux interface to
/// take one from (memory ports in tests, an interface that went away).
pub const FALLBACK_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0];

/// Every port's MAC as the engine uses it: the configured one, else its
/// Linux interface's (af_packet, af_xdp), else [`FALLBACK_MAC`]. A tap
/// port's Linux interface is the *other* end of its link (the host's NIC,
/// as a guest's is), so its MAC is never the router's: a tap port without
/// one gets [`tap_mac`] of its name.
pub fn port_macs(cfg: &Config) -> Vec<[u8; 6]> {
    cfg.ports
        .iter()
        .map(|p| {
            p.mac
                .or_else(|| match p.driver {
                    Driver::Tap | Driver::VhostUser => Some(tap_mac(&p.name)),
                    _ => p
                        .interface
                        .as_deref()
                        .and_then(|i| vrhost_io::netdev::mac(i).ok()),
                })
                .unwrap_or(FALLBACK_MAC)
        })
        .collect()
}

/// The MAC of a tap port named `name` that has none configured: locally
/// administered and unicast (`02:`), then five bytes of the name's FNV-1a
/// hash, so that it stays the same across restarts and differs between
/// ports.
pub fn tap_mac(name: &str) -> [u8; 6] {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let b = h.to_be_bytes();
    [0x02, b[0], b[1], b[2], b[3], b[4]]
}

pub use crate::tables_lock::lock;

/// The environment variable that makes each worker panic this many
/// milliseconds after it starts: a test-only fault hook, read once per
/// worker at its start, for the test that a worker panic stops the process.
pub const FAULT_WORKER_PANIC_MS: &str = "VRHOST_FAULT_WORKER_PANIC_MS";

/// When this worker is to panic, in nanoseconds of its clock, if the fault
/// hook is set.
fn fault_panic_at() -> Option<u64> {
    let ms: u64 = std::env::var(FAULT_WORKER_PANIC_MS).ok()?.parse().ok()?;
    Some(ms.saturating_mul(1_000_000))
}

/// Starts a named thread (`vrhost-worker-2`), as panic messages and `top -H`
/// show it.
fn spawn_named<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    match std::thread::Builder::new().name(name.clone()).spawn(f) {
        Ok(h) => h,
        // Only the operating system refuses a thread: at start, with no
        // forwarding yet, nothing better can be done than to stop.
        Err(e) => panic!("cannot start thread {name}: {e}"),
    }
}

/// Sends the kernel's receive work for an af_packet port's interface to the
/// cores that run no worker (`vrhost_io::rps`), saying what it did.
fn steer_receive(port: &mut AfPacketPort, name: &str, workers: &[usize]) {
    use vrhost_io::rps::Applied;
    let Some(cpus) = vrhost_io::rps::steer_cpus(workers) else {
        tracing::info!("port {name:?}: RPS left alone: the online cores cannot be read");
        return;
    };
    match port.steer_receive(&cpus, workers) {
        Ok(Applied::Set { mask, adopted }) => {
            let ifname = port.ifname();
            let earlier = if adopted {
                ", as an earlier run left it"
            } else {
                ""
            };
            tracing::info!(
                "port {name:?}: the kernel receives {ifname}'s frames on the cores of mask \
                 {mask} (RPS{earlier}), off the workers' cores and in order per flow"
            );
        }
        Ok(Applied::Kept(why)) => tracing::info!("port {name:?}: RPS left alone: {why}"),
        Ok(Applied::OnWorkers(why)) => tracing::warn!(
            "port {name:?}: RPS left alone: {why}; the kernel's receive work for it shares \
             their cores"
        ),
        Err(e) => tracing::warn!(
            "port {name:?}: RPS left alone, so a flow's frames may reach the ring out of \
             order: {e}"
        ),
    }
}

/// Pins the calling thread to `core`, warning when that is impossible, and
/// makes its naps as short as asked ([`vrhost_io::clock::precise_sleeps`]:
/// an idle worker's 20 µs nap took 70 with the default timer slack).
pub fn pin(core: usize) {
    if !vrhost_io::clock::precise_sleeps() {
        tracing::debug!(core, "timer slack unchanged");
    }
    let ok = core_affinity::get_core_ids()
        .and_then(|ids| ids.into_iter().find(|c| c.id == core))
        .map(core_affinity::set_for_current)
        .unwrap_or(false);
    if !ok {
        tracing::warn!(core, "could not pin to this core");
    }
}

fn flush(
    w: &mut Worker,
    tx: &mut TxBatch,
    ports: &mut [Box<dyn Port>],
    tx_of: Option<&[usize]>,
    now: u64,
) {
    for p in 0..tx.ports.len() {
        if tx.ports[p].is_empty() {
            continue;
        }
        let q = tx_of.map_or(p, |t| t[p]);
        if let Err(e) = ports[q].tx_burst(&mut tx.ports[p], w.pool(), now) {
            tracing::error!("{e}");
            // Never keep what could not be sent: the buffers go back to the pool.
            for m in tx.ports[p].drain(..) {
                w.pool().put(m);
            }
        }
    }
}

fn rx_stats(rx: &[(u16, usize)], queues: &[Box<dyn Port>]) -> Vec<(u16, PortStats)> {
    rx.iter().map(|&(p, q)| (p, queues[q].stats())).collect()
}

/// Installs the cost clock on the worker's own thread: a thread-CPU clock
/// read anywhere else would measure the wrong thread.
fn start_clock(w: &mut Worker, clock: Option<(Clock, u64, bool)>) {
    if let Some((c, hz, fair)) = clock {
        w.set_clock(c, hz, BURST);
        w.set_fair_share(fair);
    }
}

fn run_to_completion(
    mut w: Worker,
    mut plan: Plan,
    mut cap: crate::capture::WorkerCapture,
    clock: Option<(Clock, u64, bool)>,
    stop: &AtomicBool,
) -> WorkerReport {
    pin(plan.core);
    start_clock(&mut w, clock);
    let start = Instant::now();
    cap.start_clock();
    let t0 = w.fair().now();
    let mut rx = Vec::with_capacity(BURST);
    let mut tx = TxBatch::new(plan.tx.len());
    let mut idle_polls = 0u32;
    let mut unwaitable_said = false;
    let mut taps = crate::taps::WorkerTaps::new(std::mem::take(&mut plan.taps));
    let panic_at = fault_panic_at();
    let counters = w.counters();
    // Whether the last turn sent frames: what that took, from the end of
    // the last call into the worker to the clock's first reading this turn,
    // is charged to the VRs whose frames it forwarded, by bytes.
    let mut sent = false;
    while !stop.load(Ordering::Relaxed) {
        counters.heartbeat.inc();
        let now = start.elapsed().as_nanos() as u64;
        if panic_at.is_some_and(|t| now >= t) {
            panic!("{FAULT_WORKER_PANIC_MS} is set: this worker panics, as a test asked");
        }
        // One clock reading a turn: it ends the last turn (and its send)
        // and starts the first receive; each later receive starts where the
        // last call into the worker ended. What reading takes is charged to
        // the burst's VRs, by bytes: copying a large frame costs the worker
        // more than forwarding it.
        let turn = w.fair().now();
        w.end_turn(turn, std::mem::take(&mut sent));
        let mut mark = turn;
        let mut got = 0;
        let mut skipped = false;
        for &(port, q) in plan.rx.iter() {
            // Every VR behind this queue used its share of a saturated core:
            // leave the frames in the ring, whose overflow costs us nothing.
            if !w.port_wanted(port as usize) {
                skipped = true;
                // Its control protocols' frames, where the driver steers
                // them to a queue of their own: the VRs' sessions stay up.
                if plan.queues[q].rx_control(w.pool(), &mut rx, BURST, port) > 0 {
                    w.note_receive(mark);
                    cap.received(&rx, now);
                    w.process_burst(&mut rx, now, &mut tx);
                    mark = w.fair().last_end();
                }
                continue;
            }
            got += plan.queues[q].rx_burst(w.pool(), &mut rx, BURST, port);
            if !rx.is_empty() {
                w.note_receive(mark);
                cap.received(&rx, now);
                w.process_burst(&mut rx, now, &mut tx);
                mark = w.fair().last_end();
            }
        }
        if skipped && got < BURST {
            // The VRs still under budget are not backlogged (their queues
            // gave less than a full burst): holding the others back would
            // only idle the core or spend it on tiny bursts. Refill by
            // weight and go round again (work-conserving); policing bites
            // while an under-budget VR has a full queue waiting.
            w.replenish_shares();
            taps.inject(&mut w, &mut tx, now, false);
            cap.sending(&tx, now);
            sent = !tx.is_empty();
            flush(&mut w, &mut tx, &mut plan.queues, Some(&plan.tx), now);
            taps.punted(&mut w, now);
            continue;
        }
        if got == 0 {
            w.idle(now, &mut tx);
        }
        // What the tenants' kernels sent leaves with this worker's packets.
        taps.inject(&mut w, &mut tx, now, got == 0);
        cap.sending(&tx, now);
        sent = !tx.is_empty();
        flush(&mut w, &mut tx, &mut plan.queues, Some(&plan.tx), now);
        taps.punted(&mut w, now);
        idle_polls = if got == 0 { idle_polls + 1 } else { 0 };
        if idle_polls > SPIN_POLLS {
            // Idle for a while: give the core back until frames arrive.
            wait_for_work(
                &mut plan.queues,
                &plan.rx,
                &plan.tx,
                &taps,
                &mut unwaitable_said,
            );
        }
    }
    WorkerReport {
        queues: rx_stats(&plan.rx, &plan.queues),
        ticks: w.fair().now().saturating_sub(t0),
        rounds_enforced: w.fair().rounds_enforced,
        charged: w.fair().charged(),
        cp: taps.stats,
    }
}

/// Empty polls in a row after which a worker stops spinning and waits for
/// frames ([`wait_for_work`]): a few hundred microseconds, longer than the
/// gaps between one TCP stream's super-frames, so a busy link keeps its
/// worker polling (a scratch build that waited after 16 lost about 4% of a
/// stream; docs/benchmarks.md, "Tried, not kept: the worker waits in
/// `poll(2)`").
const SPIN_POLLS: u32 = 1024;

/// The longest an idle worker waits on its queues before it looks again:
/// its timers (neighbor retries, at most every 100 ms), other workers' and
/// the control side's news, and the stop flag are never held up longer.
const WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(1);

/// A worker's nap where a queue it reads cannot be waited on (memory,
/// pcap ports): short, as it was before waits.
const NAP: std::time::Duration = std::time::Duration::from_micros(20);

/// An idle worker gives its core back until one of its queues (`rx`, into
/// `queues`) or its control-plane TAPs has a frame, at most [`WAIT_MAX`]:
/// blocked in the kernel, it costs a few percent of its core where empty
/// polls and 20 µs naps cost about half of it (docs/operations.md, "Idle
/// workers"). First its send queues (`tx`) finish any send the kernel
/// put off (`Port::flush`), which nothing else would retry meanwhile.
/// Where one of them has no descriptor to wait on, or one reports an error
/// that waiting cannot clear, it naps for [`NAP`] (the latter, every turn
/// until the descriptor goes, said once through `warned`); a worker with
/// nothing to read at all sleeps [`WAIT_MAX`].
fn wait_for_work(
    queues: &mut [Box<dyn Port>],
    rx: &[(u16, usize)],
    tx: &[usize],
    taps: &crate::taps::WorkerTaps,
    warned: &mut bool,
) {
    for &q in tx {
        if let Some(Err(e)) = queues.get_mut(q).map(|p| p.flush()) {
            tracing::debug!("{e}");
        }
    }
    let mut fds = Vec::new();
    let waitable = rx
        .iter()
        .all(|&(_, q)| queues.get(q).is_some_and(|p| p.wait_fds(&mut fds)))
        && taps.wait_fds(&mut fds);
    if !waitable {
        return std::thread::sleep(NAP);
    }
    if fds.is_empty() {
        return std::thread::sleep(WAIT_MAX);
    }
    if vrhost_io::wait::readable(&fds, WAIT_MAX) == Waited::Unwaitable {
        if !std::mem::replace(warned, true) {
            tracing::warn!(
                "a queue's descriptor reports an error that waiting cannot clear \
                 (a control-plane TAP deleted under the worker?): this worker naps \
                 instead of waiting until it goes"
            );
        }
        std::thread::sleep(NAP);
    }
}

/// Batches in flight between an rx thread and its forwarding worker.
const RING_BATCHES: usize = 64;

fn rx_thread(
    core: usize,
    mut queues: Vec<(u16, Box<dyn Port>)>,
    to_fwd: SyncSender<Vec<Mbuf>>,
    back: Receiver<Vec<Mbuf>>,
    stop: &AtomicBool,
) -> WorkerReport {
    pin(core);
    // The rx side has its own pool; buffers come back through `back`.
    let mut pool = vrhost_dataplane::MbufPool::new(RING_BATCHES * BURST * 2);
    let mut spare: Vec<Vec<Mbuf>> = (0..RING_BATCHES)
        .map(|_| Vec::with_capacity(BURST))
        .collect();
    while !stop.load(Ordering::Relaxed) {
        for returned in back.try_iter() {
            let mut returned = returned;
            for m in returned.drain(..) {
                pool.put(m);
            }
            spare.push(returned);
        }
        for (port, q) in queues.iter_mut() {
            let Some(mut batch) = spare.pop() else { break };
            if q.rx_burst(&mut pool, &mut batch, BURST, *port) == 0 {
                spare.push(batch);
                continue;
            }
            if let Err(TrySendError::Full(mut batch) | TrySendError::Disconnected(mut batch)) =
                to_fwd.try_send(batch)
            {
                // Ring full: the forwarding core is the bottleneck; drop the batch.
                for m in batch.drain(..) {
                    pool.put(m);
                }
                spare.push(batch);
            }
        }
    }
    WorkerReport {
        queues: queues.iter().map(|(p, q)| (*p, q.stats())).collect(),
        ..WorkerReport::default()
    }
}

fn forward_thread(
    mut w: Worker,
    core: usize,
    mut tx_ports: Vec<Box<dyn Port>>,
    from_rx: Receiver<Vec<Mbuf>>,
    to_rx: SyncSender<Vec<Mbuf>>,
    clock: Option<(Clock, u64, bool)>,
    stop: &AtomicBool,
) -> WorkerReport {
    pin(core);
    start_clock(&mut w, clock);
    let start = Instant::now();
    let mut tx = TxBatch::new(tx_ports.len());
    let mut cp = crate::taps::CpStats::default();
    let counters = w.counters();
    while !stop.load(Ordering::Relaxed) {
        counters.heartbeat.inc();
        let now = start.elapsed().as_nanos() as u64;
        match from_rx.try_recv() {
            Ok(mut batch) => {
                let n = batch.len();
                w.process_burst(&mut batch, now, &mut tx);
                flush(&mut w, &mut tx, &mut tx_ports, None, now);
                // What sending took is charged to the batch's VRs.
                w.end_turn(w.fair().now(), true);
                discard_punted(&mut w, &mut cp);
                // Hand as many buffers back as arrived, so both pools stay level.
                for _ in 0..n {
                    batch.push(w.pool().get());
                }
                let _ = to_rx.try_send(batch);
            }
            Err(_) => {
                w.idle(now, &mut tx);
                flush(&mut w, &mut tx, &mut tx_ports, None, now);
                discard_punted(&mut w, &mut cp);
                std::hint::spin_loop();
            }
        }
    }
    // The rx thread reports the receive queues.
    WorkerReport {
        rounds_enforced: w.fair().rounds_enforced,
        charged: w.fair().charged(),
        cp,
        ..WorkerReport::default()
    }
}

/// Pipeline mode has no control-plane mirrors: punted packets are counted
/// and recycled.
fn discard_punted(w: &mut Worker, cp: &mut crate::taps::CpStats) {
    w.drain_all_punted(|_, _| cp.punt_discarded += 1);
}
