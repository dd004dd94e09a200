//! Per-VR control planes in `vrhost run` (`[router.control]`).
//!
//! ```text
//!   tenant FRR/BIRD in netns NAME              vrhost
//!   ┌──────────────────────────────┐
//!   │ TAP "to-h1" (same MAC, MTU,  │◀─ punted frames, untagged ──── worker k: drain_all_punted
//!   │  addresses as the VR iface)  │── frames the kernel sends ───▶ worker k: check, tag, tx on the port
//!   │ main table ──────────────────┼── rtnetlink ─▶ NsWatcher ─▶ sync thread ─┐
//!   └──────────────────────────────┘                                          ├─▶ lock(TableWriter): routes,
//!   remote zebra ── TCP, FPM framing ──────────▶ fpm::serve ─▶ sync thread ───┘   addresses; commit()
//! ```
//!
//! * The TAP mirrors and the worker side are in [`crate::taps`].
//! * [`start`] runs one sync thread per producer ([`RouteSync`]): it applies
//!   [`CpEvent`]s to the VR's tables in batches, one `commit` per batch.
//!
//! See `docs/control-plane.md` for the semantics (which routes, which
//! source wins, ARP/ND handling).

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use vrhost_config::{Config, FpmIn};
use vrhost_cp::fpm::{self, FpmServer};
use vrhost_cp::queue::RecvError;
use vrhost_cp::{
    CpEvent, EventReceiver, EventSender, IpPrefix, NsWatcher, Op, RouteTarget, WatchOptions,
};
use vrhost_dataplane::spec::RouteTarget as EngineTarget;
use vrhost_dataplane::{Path, Paths, TableWriter, VrId};

// -------------------------------------------------------------- sync side --

/// Running producers (namespace watchers, FPM servers) and the threads that
/// apply their events, per VR. Dropping it stops them all.
#[derive(Default)]
pub struct ControlPlanes {
    planes: Vec<Plane>,
}

/// One VR's producers and sync threads.
struct Plane {
    vr: VrId,
    router: String,
    watcher: Option<NsWatcher>,
    fpm: Option<FpmServer>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Per sync thread: its first batch (the namespace's dump, the restored
    /// FPM routes) is in the tables.
    synced: Vec<Arc<AtomicBool>>,
}

impl Drop for Plane {
    fn drop(&mut self) {
        // Producers first (their channels close), then the sync threads.
        self.watcher.take();
        self.fpm.take();
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl ControlPlanes {
    /// Stops the producers and sync threads of every VR that no longer
    /// exists (deleted through the API or by a reload): its FPM listener
    /// closes and its namespace is no longer watched. Returns their names.
    /// `alive` answers for one VR at a time; the planes are stopped after
    /// the last answer, since their sync threads may be waiting for the
    /// lock that `alive` takes.
    pub fn reap(&mut self, alive: impl Fn(VrId) -> bool) -> Vec<String> {
        let (keep, gone): (Vec<Plane>, Vec<Plane>) =
            self.planes.drain(..).partition(|p| alive(p.vr));
        self.planes = keep;
        let names: Vec<String> = gone.iter().map(|p| p.router.clone()).collect();
        drop(gone);
        for router in &names {
            tracing::info!(
                router,
                "VR deleted: its FPM listener, namespace watcher and sync threads are stopped"
            );
        }
        names
    }

    /// Waits until every producer's first state (the namespace's tables as
    /// dumped at start, the FPM routes restored from the last run) is in
    /// the tables, or `limit` passes; returns the routers not in sync by
    /// then.
    pub fn wait_synced(&self, limit: Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let behind: Vec<String> = self
                .planes
                .iter()
                .filter(|p| p.synced.iter().any(|s| !s.load(Ordering::Acquire)))
                .map(|p| p.router.clone())
                .collect();
            if behind.is_empty() || std::time::Instant::now() >= deadline {
                return behind;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Every FPM server's routes, by router: what the next run restores.
    pub fn fpm_routes(&self) -> Vec<(String, Vec<(IpPrefix, RouteTarget)>)> {
        self.planes
            .iter()
            .filter_map(|p| Some((p.router.clone(), p.fpm.as_ref()?.routes())))
            .collect()
    }
}

/// Starts, for every router with `[router.control]`, the namespace watcher
/// and (with `fpm`) the FPM server, each with a thread applying its events
/// to the VR's tables through `control`.
///
/// Routes come from exactly one producer per VR: the FPM stream when `fpm`
/// is set (zebra then also installs them in the namespace, and taking them
/// twice would let two producers' snapshots fight), the namespace's main
/// table otherwise. Addresses always come from the namespace.
///
/// `restored` gives, per router, the FPM routes the last run held
/// ([`crate::restart`]): they are installed at once and swept once zebra has
/// resent its table.
pub fn start(
    cfg: &Config,
    writer: &Arc<Mutex<TableWriter>>,
    restored: &dyn Fn(&str) -> Vec<(IpPrefix, RouteTarget)>,
) -> Result<ControlPlanes> {
    let mut cps = ControlPlanes::default();
    for (vr, r) in cfg.routers.iter().enumerate() {
        let Some(c) = &r.control else { continue };
        // Pushed first, so that a failure below stops what started.
        cps.planes.push(Plane {
            vr: VrId::new(vr),
            router: r.name.clone(),
            watcher: None,
            fpm: None,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            synced: Vec::new(),
        });
        let Some(plane) = cps.planes.last_mut() else {
            continue;
        };
        let base = RouteSync::new(cfg, vr);
        // Both families: the most prefixes a producer keeps for the VR.
        let max_prefixes = 2 * r.limits.max_routes as usize;
        if let Some(addr) = c.fpm {
            let (tx, rx) = vrhost_cp::channel(max_prefixes + QUEUE_SLACK);
            let before = restored(&r.name);
            // Nothing restored: nothing to wait for.
            let synced = Arc::new(AtomicBool::new(before.is_empty()));
            let server = fpm_listener(c, addr, tx, max_prefixes, before)
                .with_context(|| format!("router {:?}: FPM listener {addr}", r.name))?;
            let mut s = base.clone();
            s.source = format!("fpm {}", server.local_addr());
            s.addrs = false;
            plane
                .threads
                .push(spawn_sync(s, rx, writer, &plane.stop, &synced)?);
            plane.synced.push(synced);
            plane.fpm = Some(server);
        }
        let (tx, rx) = vrhost_cp::channel(max_prefixes + QUEUE_SLACK);
        let mut s = base;
        s.source = format!("netns {}", c.netns);
        s.routes = c.fpm.is_none();
        // The watcher's first event is always its dump (a resync).
        let synced = Arc::new(AtomicBool::new(false));
        plane
            .threads
            .push(spawn_sync(s, rx, writer, &plane.stop, &synced)?);
        plane.synced.push(synced);
        let opts = WatchOptions {
            interfaces: Some(r.interfaces.iter().map(|i| i.name.clone()).collect()),
            rcvbuf: None,
            max_routes: Some(max_prefixes),
        };
        let w = NsWatcher::start_with(&c.netns, tx, opts)
            .with_context(|| format!("router {:?}: watching namespace {}", r.name, c.netns))?;
        plane.watcher = Some(w);
    }
    Ok(cps)
}

/// The FPM listener of a router's control plane: bound inside its
/// namespace (so only the tenant's own processes reach it) unless
/// `fpm_in = "host"`, and accepting only `fpm_peers` when given.
fn fpm_listener(
    c: &vrhost_config::ControlPlane,
    addr: std::net::SocketAddr,
    tx: EventSender,
    max_routes: usize,
    restored: Vec<(IpPrefix, RouteTarget)>,
) -> Result<FpmServer> {
    let listener = match c.fpm_in {
        FpmIn::Host => std::net::TcpListener::bind(addr)?,
        FpmIn::Netns => vrhost_io::netns::run_in(&c.netns, || std::net::TcpListener::bind(addr))
            .with_context(|| format!("entering namespace {}", c.netns))??,
    };
    let opts = fpm::FpmOptions {
        allowed_peers: c.fpm_peers.clone(),
        max_routes,
        restored,
        ..fpm::FpmOptions::default()
    };
    Ok(fpm::serve_listener(listener, tx, opts)?)
}

/// Changes applied under one hold of the control lock, at most: a tenant's
/// full resync of a large table goes in slices of this many, each
/// committed, so another tenant's update waits for one slice (about a
/// millisecond), never for the whole table.
pub const SLICE: usize = 1024;

/// How long a resync waits for a newer one before it is applied: a link
/// flapping in a namespace makes the watcher dump again and again, and only
/// the last dump matters.
pub const RESYNC_DEBOUNCE: Duration = Duration::from_millis(50);

/// Queued changes per VR the producer may have waiting, beyond its routes.
const QUEUE_SLACK: usize = 4096;

fn spawn_sync(
    mut s: RouteSync,
    rx: EventReceiver,
    writer: &Arc<Mutex<TableWriter>>,
    stop: &Arc<AtomicBool>,
    synced: &Arc<AtomicBool>,
) -> Result<JoinHandle<()>> {
    let writer = writer.clone();
    let stop = stop.clone();
    let synced = synced.clone();
    std::thread::Builder::new()
        .name(format!("cp-sync-{}", s.router))
        .spawn(move || {
            let mut last_dropped = 0;
            while !stop.load(Ordering::Relaxed) {
                let ev = match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(ev) => ev,
                    Err(RecvError::Timeout) => {
                        s.refusals.flush(&s.router, &s.source);
                        continue;
                    }
                    Err(RecvError::Disconnected) => break,
                };
                let (ev, next) = debounce(ev, &rx);
                s.queue(ev);
                if let Some(ev) = next {
                    s.queue(ev);
                }
                while let Some(ev) = rx.try_recv() {
                    s.queue(ev);
                    if s.backlog() >= SLICE {
                        break;
                    }
                }
                let mut changed = 0;
                while s.backlog() > 0 && !stop.load(Ordering::Relaxed) {
                    let mut c = crate::runtime::lock(&writer);
                    let n = s.step(&mut c, SLICE);
                    if n > 0 {
                        c.commit();
                    }
                    drop(c);
                    changed += n;
                }
                if s.backlog() == 0 {
                    synced.store(true, Ordering::Release);
                }
                s.refusals.flush(&s.router, &s.source);
                let dropped = rx.dropped();
                if dropped > last_dropped {
                    // Cannot happen while the producers keep to their
                    // bounds; said loudly if it does.
                    tracing::error!(
                        router = s.router,
                        source = s.source,
                        dropped = dropped - last_dropped,
                        "control plane: the change queue was full and dropped changes; \
                         the VR may hold stale routes until the next resync"
                    );
                    last_dropped = dropped;
                }
                if changed > 0 {
                    tracing::info!(
                        router = s.router,
                        source = s.source,
                        changed,
                        routes = s.installed.len(),
                        "control plane: tables updated"
                    );
                }
            }
        })
        .context("spawning a control-plane sync thread")
}

/// A resync waits [`RESYNC_DEBOUNCE`] for a newer one, which replaces it
/// (the queue has already dropped whatever came between). Returns the event
/// to apply and, when something else arrived meanwhile, the one after it.
fn debounce(ev: CpEvent, rx: &EventReceiver) -> (CpEvent, Option<CpEvent>) {
    if !matches!(ev, CpEvent::Resync { .. }) {
        return (ev, None);
    }
    let mut latest = ev;
    let deadline = std::time::Instant::now() + RESYNC_DEBOUNCE;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.try_recv() {
            Some(newer @ CpEvent::Resync { .. }) => latest = newer,
            Some(other) => return (latest, Some(other)),
            None => std::thread::sleep(left.min(Duration::from_millis(10))),
        }
    }
    (latest, None)
}

/// Most often a producer logs the changes it refused.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The changes one producer refused, for the operator's log: the first one
/// at once, then one summary line per [`REFUSAL_LOG_INTERVAL`] at most, with
/// the count and the latest, so that a tenant flooding routes past its
/// limit writes a few lines, not one per route.
#[derive(Clone, Debug, Default)]
pub struct Refusals {
    /// Refused since the start.
    pub total: u64,
    /// Lines written so far.
    pub lines: u64,
    /// Refused since the last line.
    pending: u64,
    /// The latest refusal not yet in a line.
    latest: Option<String>,
    last_line: Option<std::time::Instant>,
}

impl Refusals {
    /// Counts one refusal; writes it now if no line was written for an
    /// interval, else keeps it for the next summary.
    pub fn note(&mut self, router: &str, source: &str, what: std::fmt::Arguments<'_>) {
        self.total += 1;
        self.pending += 1;
        self.latest = Some(what.to_string());
        self.flush(router, source);
    }

    /// Writes the summary line if refusals are waiting and an interval has
    /// passed since the last one.
    pub fn flush(&mut self, router: &str, source: &str) {
        let due = self
            .last_line
            .is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL);
        if self.pending == 0 || !due {
            return;
        }
        let latest = self.latest.take().unwrap_or_default();
        if self.pending == 1 {
            tracing::warn!(router, source, "control plane: refused {latest}");
        } else {
            tracing::warn!(
                router,
                source,
                refused = self.pending,
                total = self.total,
                "control plane: {} changes refused in the last {} s; the latest: {latest}",
                self.pending,
                self.last_line.map_or(0, |t| t.elapsed().as_secs())
            );
        }
        self.pending = 0;
        self.lines += 1;
        self.last_line = Some(std::time::Instant::now());
    }
}

/// One producer's view of one VR: what it installed, so that a `Resync`
/// replaces exactly that, and what it must never touch.
#[derive(Clone)]
pub struct RouteSync {
    vr: VrId,
    router: String,
    source: String,
    /// Apply route events.
    routes: bool,
    /// Apply address events.
    addrs: bool,
    /// Prefixes of the config's static routes: never replaced or removed.
    config_routes: HashSet<IpPrefix>,
    /// Routes this producer installed, and with which target.
    installed: BTreeMap<IpPrefix, EngineTarget>,
    /// Changes refused (config conflicts, limits, unusable targets), logged
    /// as a summary line at most every [`REFUSAL_LOG_INTERVAL`].
    refusals: Refusals,
    /// The VR's interfaces.
    ifaces: HashSet<String>,
    /// Addresses the VR has, as far as this producer knows (config ones at start).
    vr_addrs: BTreeSet<(String, IpAddr, u8)>,
    /// Changes received and not applied yet.
    backlog: VecDeque<Work>,
}

/// A queued change: an event, or a resync under way.
#[derive(Clone)]
enum Work {
    Event(CpEvent),
    Resync(ResyncWork),
}

/// What is left of a resync: stale routes to delete, then the snapshot's
/// routes (unchanged ones cost a lookup), then address changes.
#[derive(Clone, Default)]
struct ResyncWork {
    stale: std::vec::IntoIter<IpPrefix>,
    want: std::vec::IntoIter<(IpPrefix, RouteTarget)>,
    addrs: std::vec::IntoIter<(Op, String, IpAddr, u8)>,
}

/// One change to apply.
enum One {
    Event(CpEvent),
    DelRoute(IpPrefix),
    AddRoute(IpPrefix, RouteTarget),
    Addr(Op, String, IpAddr, u8),
}

impl Iterator for ResyncWork {
    type Item = One;

    fn next(&mut self) -> Option<One> {
        if let Some(p) = self.stale.next() {
            return Some(One::DelRoute(p));
        }
        if let Some((p, t)) = self.want.next() {
            return Some(One::AddRoute(p, t));
        }
        self.addrs
            .next()
            .map(|(op, i, a, l)| One::Addr(op, i, a, l))
    }
}

impl RouteSync {
    /// A producer for router `vr` of `cfg`, applying routes and addresses.
    pub fn new(cfg: &Config, vr: usize) -> RouteSync {
        let r = &cfg.routers[vr];
        let config_routes = r.routes.iter().map(|rt| rt.prefix).collect();
        let vr_addrs = r
            .interfaces
            .iter()
            .flat_map(|i| {
                i.addresses
                    .iter()
                    .map(move |a| (i.name.clone(), a.addr, a.prefix_len))
            })
            .collect();
        RouteSync {
            vr: VrId::new(vr),
            router: r.name.clone(),
            source: String::new(),
            routes: true,
            addrs: true,
            config_routes,
            installed: BTreeMap::new(),
            refusals: Refusals::default(),
            backlog: VecDeque::new(),
            ifaces: r.interfaces.iter().map(|i| i.name.clone()).collect(),
            vr_addrs,
        }
    }

    /// Applies one event to `c` (uncommitted), after whatever was queued;
    /// returns how many table changes it made.
    pub fn apply(&mut self, c: &mut TableWriter, ev: CpEvent) -> usize {
        self.queue(ev);
        let mut n = 0;
        while self.backlog() > 0 {
            n += self.step(c, usize::MAX);
        }
        n
    }

    /// Queues `ev` behind what is queued, for [`RouteSync::step`].
    pub fn queue(&mut self, ev: CpEvent) {
        self.backlog.push_back(Work::Event(ev));
    }

    /// Work items queued (a resync counts as one until it starts).
    pub fn backlog(&self) -> usize {
        self.backlog.len()
    }

    /// Applies up to `budget` queued changes to `c` (uncommitted); returns
    /// how many table changes they made. A resync is compared with what is
    /// installed when it starts, then applied change by change, so it can
    /// span several calls.
    pub fn step(&mut self, c: &mut TableWriter, budget: usize) -> usize {
        let (mut done, mut changed) = (0, 0);
        while done < budget {
            let Some(work) = self.backlog.front_mut() else {
                break;
            };
            let one = match work {
                Work::Event(CpEvent::Resync { routes, addrs }) => {
                    let (routes, addrs) = (std::mem::take(routes), std::mem::take(addrs));
                    let started = self.start_resync(routes, addrs);
                    self.backlog[0] = Work::Resync(started);
                    continue;
                }
                Work::Event(_) => match self.backlog.pop_front() {
                    Some(Work::Event(ev)) => One::Event(ev),
                    _ => break,
                },
                Work::Resync(r) => match r.next() {
                    Some(one) => one,
                    None => {
                        self.backlog.pop_front();
                        continue;
                    }
                },
            };
            changed += match one {
                One::Event(ev) => self.apply_one(c, ev),
                One::DelRoute(p) => self.del_route(c, p),
                One::AddRoute(p, t) => self.add_route(c, p, &t),
                One::Addr(op, i, a, l) => self.address(c, op, i, a, l),
            };
            done += 1;
        }
        changed
    }

    /// What a snapshot changes, against what this producer installed now.
    fn start_resync(
        &mut self,
        routes: Vec<(IpPrefix, RouteTarget)>,
        addrs: Vec<vrhost_cp::Addr>,
    ) -> ResyncWork {
        let mut w = ResyncWork::default();
        if self.routes {
            let want: HashSet<IpPrefix> = routes.iter().map(|(p, _)| *p).collect();
            w.stale = self
                .installed
                .keys()
                .filter(|p| !want.contains(p))
                .copied()
                .collect::<Vec<_>>()
                .into_iter();
            w.want = routes.into_iter();
        }
        if self.addrs {
            let want: BTreeSet<(String, IpAddr, u8)> = addrs
                .into_iter()
                .filter(|a| self.ifaces.contains(&a.ifname))
                .map(|a| (a.ifname, a.addr, a.len))
                .collect();
            let gone = self
                .vr_addrs
                .iter()
                .filter(|a| !want.contains(a) && !is_link_local(a.1))
                .map(|(i, a, l)| (Op::Del, i.clone(), *a, *l));
            let new = want
                .iter()
                .filter(|a| !self.vr_addrs.contains(a))
                .map(|(i, a, l)| (Op::Add, i.clone(), *a, *l));
            w.addrs = gone.chain(new).collect::<Vec<_>>().into_iter();
        }
        w
    }

    fn apply_one(&mut self, c: &mut TableWriter, ev: CpEvent) -> usize {
        match ev {
            CpEvent::Route { op, prefix, target } if self.routes => match op {
                Op::Add => self.add_route(c, prefix, &target),
                Op::Del => self.del_route(c, prefix),
            },
            CpEvent::Addr {
                op,
                ifname,
                addr,
                len,
            } if self.addrs => self.address(c, op, ifname, addr, len),
            _ => 0,
        }
    }

    fn refuse(&mut self, what: std::fmt::Arguments<'_>) {
        self.refusals.note(&self.router, &self.source, what);
    }

    /// What this producer had refused so far.
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    fn add_route(&mut self, c: &mut TableWriter, p: IpPrefix, t: &RouteTarget) -> usize {
        if self.config_routes.contains(&p) {
            self.refuse(format_args!(
                "{p}: the config has a static route for this prefix; it stays"
            ));
            return 0;
        }
        let target = match t {
            RouteTarget::Via { gw, .. } => EngineTarget::Via(*gw),
            RouteTarget::Multipath(hops) => {
                let paths = hops.iter().map(|h| Path {
                    via: h.gw,
                    weight: h.weight,
                });
                match Paths::merged(paths) {
                    Ok((target, 0)) => target,
                    Ok((target, dropped)) => {
                        self.refuse(format_args!(
                            "{p}: {dropped} next hops past {} left out",
                            Paths::MAX
                        ));
                        target
                    }
                    Err(e) => {
                        self.refuse(format_args!("{p} {t}: not installed: {e}"));
                        return self.del_route(c, p);
                    }
                }
            }
            RouteTarget::Blackhole => EngineTarget::Blackhole,
            // The FIB has no "prohibit": both answer destination unreachable.
            RouteTarget::Unreachable | RouteTarget::Prohibit => EngineTarget::Unreachable,
            // The VR has its connected prefixes from its addresses; a
            // device route without a gateway has no VR equivalent.
            RouteTarget::Connected { .. } => {
                tracing::debug!(router = self.router, "{p}: {t}: skipped (no gateway)");
                return self.del_route(c, p);
            }
        };
        if self.installed.get(&p) == Some(&target) {
            return 0;
        }
        match c.add_route(self.vr, p, target.clone()) {
            Ok(()) => {
                tracing::debug!(router = self.router, source = self.source, "add {p} {t}");
                self.installed.insert(p, target);
                1
            }
            Err(e) => {
                self.refuse(format_args!("{p} {t}: not installed: {e}"));
                // What was there before is no longer the namespace's route.
                self.del_route(c, p)
            }
        }
    }

    fn del_route(&mut self, c: &mut TableWriter, p: IpPrefix) -> usize {
        if self.installed.remove(&p).is_none() {
            return 0;
        }
        tracing::debug!(router = self.router, source = self.source, "del {p}");
        usize::from(c.remove_route(self.vr, p))
    }

    fn address(
        &mut self,
        c: &mut TableWriter,
        op: Op,
        ifname: String,
        addr: IpAddr,
        len: u8,
    ) -> usize {
        if !self.ifaces.contains(&ifname) || is_link_local(addr) {
            return 0;
        }
        let key = (ifname, addr, len);
        let done = match op {
            Op::Add => c.add_address(self.vr, &key.0, addr, len),
            Op::Del => c.remove_address(self.vr, &key.0, addr, len),
        };
        match done {
            Ok(changed) => {
                match op {
                    Op::Add => self.vr_addrs.insert(key.clone()),
                    Op::Del => self.vr_addrs.remove(&key),
                };
                if changed {
                    tracing::info!(
                        router = self.router,
                        iface = key.0,
                        "address {op:?} {addr}/{len} from the namespace"
                    );
                }
                usize::from(changed)
            }
            Err(e) => {
                self.refuse(format_args!(
                    "address {op:?} {addr}/{len} on {}: {e}",
                    key.0
                ));
                0
            }
        }
    }
}

fn is_link_local(a: IpAddr) -> bool {
    match a {
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
        IpAddr::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
[[port]]
name = "p0"
driver = "memory"
mac = "02:00:00:00:00:01"

[[router]]
name = "red"

  [router.control]
  netns = "vr-red"

  [[router.interface]]
  name = "r0"
  port = "p0"
  addresses = ["10.0.0.1/24", "2001:db8::1/64"]

  [[router.route]]
  prefix = "10.9.0.0/16"
  via = "10.0.0.9"
"#;

    fn setup() -> (RouteSync, TableWriter) {
        let cfg = Config::from_toml_str(CFG, std::path::Path::new(".")).expect("config");
        let writer = TableWriter::new(&vrhost_config::engine_spec(&cfg, |_| [2, 0, 0, 0, 0, 1]))
            .expect("tables");
        let mut s = RouteSync::new(&cfg, 0);
        s.source = "test".into();
        (s, writer)
    }

    fn p(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

    fn via(gw: &str) -> RouteTarget {
        RouteTarget::Via {
            gw: gw.parse().unwrap(),
            ifname: Some("r0".into()),
        }
    }

    fn hop(c: &TableWriter, prefix: &str) -> Option<vrhost_dataplane::RouteHop> {
        let p = p(prefix);
        c.route(VrId::new(0), p.addr(), p.len())
    }

    fn resync(routes: Vec<(IpPrefix, RouteTarget)>, addrs: Vec<vrhost_cp::Addr>) -> CpEvent {
        CpEvent::Resync { routes, addrs }
    }

    fn addr(a: &str, len: u8) -> vrhost_cp::Addr {
        vrhost_cp::Addr {
            ifname: "r0".into(),
            addr: a.parse().unwrap(),
            len,
        }
    }

    fn config_addrs() -> Vec<vrhost_cp::Addr> {
        vec![addr("10.0.0.1", 24), addr("2001:db8::1", 64)]
    }

    #[test]
    fn a_flood_past_the_limit_is_refused_in_a_few_log_lines() {
        let cfg = Config::from_toml_str(
            &CFG.replace(
                "  [[router.route]]",
                "  [router.limits]\n  max_routes = 100\n  max_addresses = 4\n  [[router.route]]",
            ),
            std::path::Path::new("."),
        )
        .expect("config");
        let mut c = TableWriter::new(&vrhost_config::engine_spec(&cfg, |_| [2, 0, 0, 0, 0, 1]))
            .expect("tables");
        let mut s = RouteSync::new(&cfg, 0);
        let mut installed = 0;
        for i in 0..10_000u32 {
            let prefix = IpPrefix::new(std::net::Ipv4Addr::from(0x0b00_0000 + (i << 8)).into(), 24)
                .expect("prefix");
            installed += s.apply(
                &mut c,
                CpEvent::Route {
                    op: Op::Add,
                    prefix,
                    target: via("10.0.0.7"),
                },
            );
        }
        assert!(installed > 50 && installed < 100, "{installed}");
        assert_eq!(s.refusals().total, 10_000 - installed as u64);
        assert_eq!(s.refusals().lines, 1, "one line now, the rest in summaries");
        // Addresses past max_addresses (4: two configured, the link-local,
        // one more) are refused and counted the same way.
        for i in 2..10u8 {
            s.apply(
                &mut c,
                CpEvent::Addr {
                    op: Op::Add,
                    ifname: "r0".into(),
                    addr: std::net::Ipv4Addr::new(10, 0, i, 1).into(),
                    len: 24,
                },
            );
        }
        let held = &c.working().ifaces()[0];
        assert_eq!(held.addrs4.len() + held.addrs6.len(), 4);
        assert_eq!(s.refusals().total, 10_000 - installed as u64 + 7);
        assert_eq!(s.refusals().lines, 1);
    }

    #[test]
    fn a_large_resync_is_applied_in_slices_with_the_same_result() {
        let routes: Vec<(IpPrefix, RouteTarget)> = (0..5000u32)
            .map(|i| {
                let p = IpPrefix::new(std::net::Ipv4Addr::from(0x0b00_0000 + (i << 8)).into(), 24)
                    .expect("prefix");
                (p, via("10.0.0.7"))
            })
            .collect();
        let (mut whole, mut c1) = setup();
        let n1 = whole.apply(&mut c1, resync(routes.clone(), config_addrs()));
        let (mut sliced, mut c2) = setup();
        sliced.queue(resync(routes.clone(), config_addrs()));
        // Behind the resync, a change of one of its routes: applied after it.
        sliced.queue(CpEvent::Route {
            op: Op::Del,
            prefix: routes[0].0,
            target: via("10.0.0.7"),
        });
        let (mut n2, mut steps) = (0, 0);
        while sliced.backlog() > 0 {
            let n = sliced.step(&mut c2, SLICE);
            assert!(n <= SLICE);
            n2 += n;
            steps += 1;
        }
        assert_eq!(n1, 5000);
        assert_eq!(n2, 5001);
        assert!(steps >= 5, "{steps} steps");
        assert_eq!(hop(&c2, "11.0.0.0/24"), None, "the later delete won");
        assert_eq!(hop(&c1, "11.0.19.0/24"), hop(&c2, "11.0.19.0/24"));
        assert!(hop(&c2, "11.0.19.0/24").is_some());
    }

    #[test]
    fn a_flapping_namespaces_resyncs_collapse_to_the_last() {
        let (tx, rx) = vrhost_cp::channel(16);
        let first = resync(vec![(p("10.1.0.0/16"), via("10.0.0.7"))], vec![]);
        let last = resync(vec![(p("10.2.0.0/16"), via("10.0.0.7"))], vec![]);
        tx.send(first.clone()).expect("send");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.send(last).expect("send");
        });
        let taken = rx.recv_timeout(Duration::from_secs(1)).expect("first");
        let (got, next) = debounce(taken, &rx);
        t.join().expect("sender");
        assert!(next.is_none());
        match got {
            CpEvent::Resync { routes, .. } => assert_eq!(routes[0].0, p("10.2.0.0/16")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn resync_replaces_exactly_what_the_sync_installed() {
        let (mut s, mut c) = setup();
        let gw = vrhost_dataplane::RouteHop::Gateway {
            iface: 0,
            addr: "10.0.0.2".parse().unwrap(),
        };
        let n = s.apply(
            &mut c,
            resync(
                vec![
                    (p("10.1.0.0/16"), via("10.0.0.2")),
                    (p("10.2.0.0/16"), RouteTarget::Blackhole),
                    (p("2001:db8:5::/48"), RouteTarget::Prohibit),
                    // The config's static route wins over the namespace's.
                    (p("10.9.0.0/16"), via("10.0.0.2")),
                    // Connected routes are the VR's own already.
                    (
                        p("10.0.0.0/24"),
                        RouteTarget::Connected {
                            ifname: "r0".into(),
                        },
                    ),
                ],
                config_addrs(),
            ),
        );
        assert_eq!(n, 3);
        assert_eq!(hop(&c, "10.1.0.0/16"), Some(gw));
        assert_eq!(
            hop(&c, "10.2.0.0/16"),
            Some(vrhost_dataplane::RouteHop::Blackhole)
        );
        assert_eq!(
            hop(&c, "2001:db8:5::/48"),
            Some(vrhost_dataplane::RouteHop::Unreachable)
        );
        let config_route = hop(&c, "10.9.0.0/16");
        assert!(
            matches!(config_route, Some(vrhost_dataplane::RouteHop::Gateway { addr, .. }) if addr.to_string() == "10.0.0.9")
        );
        assert!(matches!(
            hop(&c, "10.0.0.0/24"),
            Some(vrhost_dataplane::RouteHop::Connected { .. })
        ));
        // A Del for the config's prefix leaves it alone.
        s.apply(
            &mut c,
            CpEvent::Route {
                op: Op::Del,
                prefix: p("10.9.0.0/16"),
                target: via("10.0.0.2"),
            },
        );
        assert_eq!(hop(&c, "10.9.0.0/16"), config_route);
        // A second snapshot: one route stays, one changes, the rest go.
        s.apply(
            &mut c,
            resync(
                vec![
                    (p("10.1.0.0/16"), via("10.0.0.2")),
                    (p("10.3.0.0/16"), RouteTarget::Unreachable),
                ],
                config_addrs(),
            ),
        );
        assert_eq!(hop(&c, "10.1.0.0/16"), Some(gw));
        assert_eq!(hop(&c, "10.2.0.0/16"), None);
        assert_eq!(hop(&c, "2001:db8:5::/48"), None);
        assert_eq!(
            hop(&c, "10.3.0.0/16"),
            Some(vrhost_dataplane::RouteHop::Unreachable)
        );
        assert_eq!(hop(&c, "10.9.0.0/16"), config_route);
        // A route whose gateway is off-link replaces nothing with garbage:
        // the old route goes, the new one is not installed.
        s.apply(
            &mut c,
            CpEvent::Route {
                op: Op::Add,
                prefix: p("10.1.0.0/16"),
                target: via("192.0.2.1"),
            },
        );
        assert_eq!(hop(&c, "10.1.0.0/16"), None);
    }

    #[test]
    fn namespace_addresses_become_the_vrs() {
        let (mut s, mut c) = setup();
        let ev = |op, a: &str, len| CpEvent::Addr {
            op,
            ifname: "r0".into(),
            addr: a.parse().unwrap(),
            len,
        };
        assert_eq!(s.apply(&mut c, ev(Op::Add, "10.5.0.1", 24)), 1);
        assert_eq!(
            hop(&c, "10.5.0.1/32"),
            Some(vrhost_dataplane::RouteHop::Local)
        );
        // Unknown interfaces and link-local addresses are not the VR's business.
        let other = CpEvent::Addr {
            op: Op::Add,
            ifname: "lo".into(),
            addr: "10.6.0.1".parse().unwrap(),
            len: 8,
        };
        assert_eq!(s.apply(&mut c, other), 0);
        assert_eq!(s.apply(&mut c, ev(Op::Add, "fe80::1", 64)), 0);
        // A snapshot without 10.5.0.1 and without the config's IPv6 address.
        s.apply(&mut c, resync(vec![], vec![addr("10.0.0.1", 24)]));
        assert_eq!(hop(&c, "10.5.0.1/32"), None);
        assert_eq!(hop(&c, "2001:db8::1/128"), None);
        assert_eq!(
            hop(&c, "10.0.0.1/32"),
            Some(vrhost_dataplane::RouteHop::Local)
        );
        assert_eq!(s.apply(&mut c, ev(Op::Add, "2001:db8::1", 64)), 1);
        assert_eq!(
            hop(&c, "2001:db8::1/128"),
            Some(vrhost_dataplane::RouteHop::Local)
        );
    }
}
