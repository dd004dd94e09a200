//! The namespace → VR direction: addresses and main-table routes that the
//! tenant's control plane (FRR, BIRD, `ip`) installs in the VR's namespace,
//! streamed as [`CpEvent`]s.
//!
//! ```text
//!   VR namespace (kernel)                       vrhost
//!   ┌───────────────────────┐   multicast    ┌────────── watcher thread (setns'd) ─┐
//!   │ links, addrs, routes ─┼───────────────►│ events socket (subscribed 1st)      │
//!   │                       │   dump replies │ dump socket (links, addrs, routes)  │
//!   │                       ├───────────────►│   ↓ filter, ifindex → name,         │
//!   └───────────────────────┘                │     best route per prefix           │
//!                                            └───────────────┬─────────────────────┘
//!                                                            │ mpsc::EventSender
//!                                                            ▼  data-plane control loop
//! ```
//!
//! Subscribe before you dump: the events socket joins the groups first, so
//! every change after that instant is queued; the dump (on a second socket)
//! then gives a state at least that recent, and replaying the queued
//! changes on top of it converges, because each one is keyed "set/remove
//! this route" and the last change of each key wins.
//!
//! On `ENOBUFS` (the events socket overflowed: changes were lost) the queue
//! is discarded, everything is dumped again, and a [`CpEvent::Resync`]
//! replaces the consumer's whole set. The same happens when the kernel may
//! have removed routes without telling (IPv4 routes through an interface
//! that went down or away, or that depended on a removed IPv4 address).
//! Resyncs are at least [`RESYNC_GAP`] apart: one asked for sooner waits
//! for the rest of the gap while changes keep streaming.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use crate::queue::EventSender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netlink_packet_core::NetlinkPayload;
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::route::RouteMessage;
use netlink_packet_route::RouteNetlinkMessage;

use crate::event::{Addr, CpEvent, Hop, IpPrefix, Op, RouteTarget};
use crate::rtnl::{self, DumpError, RawTarget, Rtnl};
use crate::CpError;

/// How often the blocked thread wakes to see whether it should stop.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Resyncs come at most this often: one asked for sooner (a link or IPv4
/// address change, an overrun) waits for the rest of the gap while changes
/// keep streaming, so a tenant that flaps a link or floods its table costs
/// at most one dump of it per gap, however fast it goes.
pub const RESYNC_GAP: Duration = Duration::from_millis(500);

/// Give up on a dump that keeps being interrupted by changes after this
/// many tries (then resync again on the next event).
const DUMP_TRIES: usize = 20;

/// Which interfaces of the namespace are VR mirrors, and socket tuning.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// Names of the mirrored interfaces. `None`: every TAP device
    /// (link kind `tun`) in the namespace.
    pub interfaces: Option<HashSet<String>>,
    /// `SO_RCVBUF` of the events socket, in bytes (the kernel doubles it).
    /// `None`: the system default. Tests make it tiny to force `ENOBUFS`.
    pub rcvbuf: Option<usize>,
    /// Most prefixes the watcher keeps (the VR's route limit, both
    /// families): routes for further prefixes are not kept or sent, only
    /// counted (`over_limit`). `None`: no limit.
    pub max_routes: Option<usize>,
}

/// Counters of one watcher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// `ENOBUFS` (or truncated datagrams): changes the kernel dropped.
    pub overruns: u64,
    /// Full snapshots sent (the first one included).
    pub resyncs: u64,
    /// Route and address events sent.
    pub events: u64,
    /// Route messages dropped by a filter.
    pub filtered: u64,
    /// Netlink messages that could not be decoded.
    pub undecodable: u64,
    /// Next hops of multipath routes left out: no gateway, or not out of a
    /// mirrored interface.
    pub ignored_next_hops: u64,
    /// Routes for new prefixes past `max_routes`, not kept.
    pub over_limit: u64,
}

#[derive(Default)]
struct Counters {
    over_limit: AtomicU64,
    overruns: AtomicU64,
    resyncs: AtomicU64,
    events: AtomicU64,
    filtered: AtomicU64,
    undecodable: AtomicU64,
    ignored_next_hops: AtomicU64,
    /// A route naming only a next-hop object was logged (once per watcher).
    warned_next_hop_object: std::sync::atomic::AtomicBool,
}

/// A running watcher of one namespace. Dropping it stops the thread.
pub struct NsWatcher {
    netns: String,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl NsWatcher {
    /// Starts watching namespace `netns` (every TAP in it is a mirror).
    /// Returns once the first [`CpEvent::Resync`] has been sent.
    pub fn start(netns: &str, tx: EventSender) -> Result<Self, CpError> {
        Self::start_with(netns, tx, WatchOptions::default())
    }

    /// [`NsWatcher::start`] with options.
    pub fn start_with(netns: &str, tx: EventSender, opts: WatchOptions) -> Result<Self, CpError> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), CpError>>();
        let thread = {
            let stop = stop.clone();
            let counters = counters.clone();
            let name = netns.to_string();
            std::thread::Builder::new()
                .name(format!("cp-watch-{netns}"))
                .spawn(move || {
                    let setup = Watcher::setup(&name, tx, opts, stop, counters);
                    match setup {
                        Ok(mut w) => {
                            let _ = ready_tx.send(Ok(()));
                            w.run();
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                })
                .map_err(|e| CpError::io(netns, "spawn watcher thread", e))?
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(NsWatcher {
                netns: netns.to_string(),
                stop,
                counters,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(CpError::Netlink {
                    netns: netns.into(),
                    what: "watcher thread ended during setup".into(),
                    source: io::Error::other("thread panicked"),
                })
            }
        }
    }

    /// The namespace watched.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> WatchStats {
        let c = &self.counters;
        WatchStats {
            overruns: c.overruns.load(Ordering::Relaxed),
            resyncs: c.resyncs.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            filtered: c.filtered.load(Ordering::Relaxed),
            undecodable: c.undecodable.load(Ordering::Relaxed),
            ignored_next_hops: c.ignored_next_hops.load(Ordering::Relaxed),
            over_limit: c.over_limit.load(Ordering::Relaxed),
        }
    }

    /// True while the thread runs (it ends on a fatal socket error or when
    /// the receiver is dropped).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread and waits for it (at most about 100 ms).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for NsWatcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One interface of the namespace.
#[derive(Clone, Debug)]
struct Link {
    name: String,
    mirrored: bool,
    up: bool,
}

/// What handling one message asks for.
#[derive(PartialEq, Eq)]
enum After {
    Nothing,
    /// The kernel may have changed routes without notifying: resync.
    Resync,
}

/// The receiver is gone: stop.
struct Closed;

/// Most metrics kept for one prefix: its lowest, of which the lowest is
/// the one reported. A namespace's owner could otherwise add a route for
/// one prefix at every metric (`ip route add P via G metric $i`), each
/// kept, while `max_routes` counts prefixes.
const MAX_METRICS: usize = 16;

/// prefix → metric → target.
type Routes = BTreeMap<IpPrefix, BTreeMap<u32, RouteTarget>>;

/// Keeps `target` for `prefix` at `metric` in `routes`, unless the prefix
/// is new and `routes` holds `max_routes` already, or the prefix holds
/// [`MAX_METRICS`] metrics all lower than this one (a lower one takes the
/// place of its highest). Returns whether it was kept.
fn keep(
    routes: &mut Routes,
    max_routes: Option<usize>,
    prefix: IpPrefix,
    metric: u32,
    target: RouteTarget,
) -> bool {
    let full = max_routes.is_some_and(|m| routes.len() >= m);
    if full && !routes.contains_key(&prefix) {
        return false;
    }
    let m = routes.entry(prefix).or_default();
    if m.len() >= MAX_METRICS && !m.contains_key(&metric) {
        match m.last_key_value() {
            Some((&worst, _)) if metric < worst => {
                m.remove(&worst);
            }
            _ => return false,
        }
    }
    m.insert(metric, target);
    true
}

/// The watcher thread's state.
struct Watcher {
    netns: String,
    opts: WatchOptions,
    tx: EventSender,
    stop: Arc<AtomicBool>,
    c: Arc<Counters>,
    events: Rtnl,
    dumper: Rtnl,
    links: HashMap<u32, Link>,
    /// prefix → metric → target: every main-table route that passed the
    /// filters; the lowest metric is the one reported.
    routes: Routes,
    addrs: BTreeSet<Addr>,
    /// When the last resync began.
    last_resync: Instant,
    /// A resync is asked for: it runs [`RESYNC_GAP`] after the last began.
    resync_wanted: bool,
}

impl Watcher {
    /// Enters the namespace, subscribes, dumps, sends the first `Resync`.
    fn setup(
        netns: &str,
        tx: EventSender,
        opts: WatchOptions,
        stop: Arc<AtomicBool>,
        c: Arc<Counters>,
    ) -> Result<Self, CpError> {
        vrhost_io::netns::enter(netns).map_err(|e| CpError::Io(e.to_string()))?;
        let nl = |what: &str, source: io::Error| CpError::Netlink {
            netns: netns.into(),
            what: what.into(),
            source,
        };
        // Subscribe first, then dump (STYLE.md §8).
        let events = Rtnl::open(rtnl::GROUPS).map_err(|e| nl("open events socket", e))?;
        if let Some(b) = opts.rcvbuf {
            events
                .set_rcvbuf(b)
                .map_err(|e| nl("setsockopt(SO_RCVBUF)", e))?;
        }
        events
            .set_recv_timeout(STOP_POLL)
            .map_err(|e| nl("setsockopt(SO_RCVTIMEO)", e))?;
        let dumper = Rtnl::open(0).map_err(|e| nl("open dump socket", e))?;
        let mut w = Watcher {
            netns: netns.into(),
            opts,
            tx,
            stop,
            c,
            events,
            dumper,
            links: HashMap::new(),
            routes: BTreeMap::new(),
            addrs: BTreeSet::new(),
            last_resync: Instant::now(),
            resync_wanted: false,
        };
        w.resync().map_err(|e| match e {
            ResyncError::Closed => CpError::Io("event receiver dropped".into()),
            ResyncError::Io(e) => nl("initial dump", e),
        })?;
        Ok(w)
    }

    fn run(&mut self) {
        tracing::info!(netns = %self.netns, "watching namespace");
        while !self.stop.load(Ordering::Relaxed) {
            if self.resync_wanted && self.last_resync.elapsed() >= RESYNC_GAP {
                self.resync_wanted = false;
                if !self.resync_or_stop() {
                    return;
                }
            }
            let (msgs, bad) = match self.events.recv(0) {
                Ok(r) => r,
                Err(e) if e.raw_os_error() == Some(rtnl::ENOBUFS) => {
                    self.c.overruns.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(netns = %self.netns, "netlink overrun (ENOBUFS): changes lost, resyncing");
                    self.discard_queue();
                    self.resync_wanted = true;
                    continue;
                }
                Err(e) if crate::is_poll_timeout(&e) => {
                    continue;
                }
                Err(e) => {
                    tracing::error!(netns = %self.netns, error = %e, "netlink receive failed; watcher stops");
                    return;
                }
            };
            self.c.undecodable.fetch_add(bad as u64, Ordering::Relaxed);
            let mut after = After::Nothing;
            for m in msgs {
                if let NetlinkPayload::InnerMessage(inner) = m.payload {
                    match self.handle(inner) {
                        Ok(After::Resync) => after = After::Resync,
                        Ok(After::Nothing) => {}
                        Err(Closed) => return,
                    }
                }
            }
            if after == After::Resync {
                tracing::debug!(netns = %self.netns, "link or IPv4 address change: resyncing");
                // At once if the last one began a gap ago, else when it
                // has (one pending resync covers every request until then).
                self.resync_wanted = true;
            }
        }
    }

    /// Resyncs; false when the watcher should stop.
    fn resync_or_stop(&mut self) -> bool {
        match self.resync() {
            Ok(()) => true,
            Err(ResyncError::Closed) => false,
            Err(ResyncError::Io(e)) => {
                // Keep running: the next change or overrun tries again.
                tracing::error!(netns = %self.netns, error = %e, "resync dump failed");
                true
            }
        }
    }

    /// Throws away what is queued on the events socket: after an overrun
    /// it may be followed by a gap, so replaying it on top of a fresh dump
    /// could resurrect removed routes.
    fn discard_queue(&mut self) {
        // A bound, in case changes arrive faster than we read them: the
        // next overrun then resyncs again.
        for _ in 0..1_000_000 {
            match self.events.recv(rtnl::MSG_DONTWAIT) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(rtnl::ENOBUFS) => {}
                Err(_) => return,
            }
        }
    }

    /// Dumps links, addresses and routes into fresh tables and sends them
    /// as one `Resync`.
    fn resync(&mut self) -> Result<(), ResyncError> {
        self.last_resync = Instant::now();
        let mut tries = 0;
        let (links, addrs, routes) = loop {
            tries += 1;
            match self.dump_all() {
                Ok(r) => break r,
                Err(DumpError::Interrupted) if tries < DUMP_TRIES => continue,
                Err(DumpError::Interrupted) => {
                    return Err(ResyncError::Io(io::Error::other(
                        "dump interrupted by changes too many times",
                    )))
                }
                Err(DumpError::Io(e)) => return Err(ResyncError::Io(e)),
            }
        };
        self.links.clear();
        for l in links {
            self.update_link(&l);
        }
        self.addrs.clear();
        for a in addrs {
            if let Some(a) = self.addr_of(&a) {
                self.addrs.insert(a);
            }
        }
        self.routes.clear();
        for r in routes {
            if let Some((prefix, metric, target)) = self.route_of(&r) {
                self.keep_route(prefix, metric, target);
            }
        }
        let routes = self
            .routes
            .iter()
            .filter_map(|(p, m)| m.values().next().map(|t| (*p, t.clone())))
            .collect();
        let addrs = self.addrs.iter().cloned().collect();
        self.c.resyncs.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send(CpEvent::Resync { routes, addrs })
            .map_err(|_| ResyncError::Closed)
    }

    #[allow(clippy::type_complexity)]
    fn dump_all(
        &mut self,
    ) -> Result<(Vec<LinkMessage>, Vec<AddressMessage>, Vec<RouteMessage>), DumpError> {
        let links = self
            .dumper
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .collect();
        let addrs = self
            .dumper
            .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))?
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => Some(a),
                _ => None,
            })
            .collect();
        let routes = self
            .dumper
            .dump(RouteNetlinkMessage::GetRoute(RouteMessage::default()))?
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => Some(r),
                _ => None,
            })
            .collect();
        Ok((links, addrs, routes))
    }

    /// Records a link; returns the previous record.
    fn update_link(&mut self, l: &LinkMessage) -> Option<Link> {
        let name = l.attributes.iter().find_map(|a| match a {
            LinkAttribute::IfName(n) => Some(n.clone()),
            _ => None,
        });
        let Some(name) = name else {
            return self.links.get(&l.header.index).cloned();
        };
        let is_tap = l.attributes.iter().any(|a| match a {
            LinkAttribute::LinkInfo(infos) => infos
                .iter()
                .any(|i| matches!(i, LinkInfo::Kind(InfoKind::Tun))),
            _ => false,
        });
        let mirrored = match &self.opts.interfaces {
            Some(set) => set.contains(&name),
            None => is_tap,
        };
        let up = l.header.flags.contains(LinkFlags::Up);
        self.links
            .insert(l.header.index, Link { name, mirrored, up })
    }

    /// The mirrored interface named by index `i`.
    fn mirrored(&self, i: u32) -> Option<&str> {
        self.links
            .get(&i)
            .filter(|l| l.mirrored)
            .map(|l| l.name.as_str())
    }

    /// An address message as an [`Addr`] of a mirrored interface, or `None`
    /// for addresses we do not mirror: those of other interfaces (`lo`:
    /// loopback addresses are not the VR's), and IPv6 link-local ones (the
    /// kernel makes one per interface from the MAC; the VR derives its own).
    fn addr_of(&self, a: &AddressMessage) -> Option<Addr> {
        let ifname = self.mirrored(a.header.index)?;
        let addr = rtnl::own_address(a)?;
        Some(Addr {
            ifname: ifname.to_string(),
            addr,
            len: a.header.prefix_len,
        })
    }

    /// A route message as (prefix, metric, target), or `None` if a filter
    /// drops it (see [`rtnl::Skip`]), or if its interface is not a mirror:
    /// the data plane can only send out of VR interfaces, so routes through
    /// `lo` or a tenant's own dummy devices mean nothing to it.
    fn route_of(&self, r: &RouteMessage) -> Option<(IpPrefix, u32, RouteTarget)> {
        // A multipath route's next hops out of other interfaces are left
        // out before it is cut to a group's size.
        let out = |oif: Option<u32>| oif.is_some_and(|i| self.mirrored(i).is_some());
        let raw = match rtnl::decode_route_out_of(r, out) {
            Ok(raw) => raw,
            Err(skip) => {
                if let rtnl::Skip::NoNextHopTaken(hops) = skip {
                    self.c
                        .ignored_next_hops
                        .fetch_add(hops as u64, Ordering::Relaxed);
                }
                self.c.filtered.fetch_add(1, Ordering::Relaxed);
                tracing::trace!(netns = %self.netns, ?skip, "route filtered");
                return None;
            }
        };
        let target = match raw.target {
            RawTarget::Via { gw, oif } => {
                let ifname = oif.and_then(|i| self.mirrored(i));
                match ifname {
                    Some(n) => RouteTarget::Via {
                        gw,
                        ifname: Some(n.to_string()),
                    },
                    None => {
                        self.c.filtered.fetch_add(1, Ordering::Relaxed);
                        return None;
                    }
                }
            }
            RawTarget::Multipath(gws) => {
                // Only next hops out of a mirror mean anything to the VR.
                let hops: Vec<Hop> = gws
                    .iter()
                    .filter_map(|&(gw, oif, weight)| {
                        let ifname = self.mirrored(oif?)?;
                        Some(Hop {
                            gw,
                            ifname: Some(ifname.to_string()),
                            weight,
                        })
                    })
                    .collect();
                let left_out = gws.len() - hops.len();
                if left_out > 0 {
                    self.c
                        .ignored_next_hops
                        .fetch_add(left_out as u64, Ordering::Relaxed);
                }
                match hops.len() {
                    0 => {
                        self.c.filtered.fetch_add(1, Ordering::Relaxed);
                        return None;
                    }
                    1 => RouteTarget::Via {
                        gw: hops[0].gw,
                        ifname: hops[0].ifname.clone(),
                    },
                    _ => RouteTarget::Multipath(hops),
                }
            }
            RawTarget::Dev { oif } => match self.mirrored(oif) {
                Some(n) => RouteTarget::Connected {
                    ifname: n.to_string(),
                },
                None => {
                    self.c.filtered.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            },
            // Only with `net.ipv4.nexthop_compat_mode = 0`: by default the
            // kernel sends a route's next hops along with its object's id.
            RawTarget::Group(id) => {
                self.c.filtered.fetch_add(1, Ordering::Relaxed);
                if self.c.warned_next_hop_object.swap(true, Ordering::Relaxed) {
                    tracing::debug!(netns = %self.netns, prefix = %raw.prefix, id, "route names only a next-hop object; skipped");
                } else {
                    tracing::warn!(netns = %self.netns, prefix = %raw.prefix, id, "routes that name only a next-hop object are skipped (net.ipv4.nexthop_compat_mode is 0 in the namespace; 1, the default, sends their next hops too); counted in filtered, logged once");
                }
                return None;
            }
            // No interface check: the kernel files IPv6 blackhole and
            // unreachable routes under `lo`, and they send nowhere anyway.
            RawTarget::Blackhole => RouteTarget::Blackhole,
            RawTarget::Unreachable => RouteTarget::Unreachable,
            RawTarget::Prohibit => RouteTarget::Prohibit,
        };
        if raw.extra_hops > 0 {
            self.c
                .ignored_next_hops
                .fetch_add(raw.extra_hops as u64, Ordering::Relaxed);
            tracing::debug!(netns = %self.netns, prefix = %raw.prefix, left_out = raw.extra_hops, "multipath route: next hops without a gateway, out of no VR interface or past a group's size left out");
        }
        Some((raw.prefix, raw.metric, target))
    }

    fn send(&self, ev: CpEvent) -> Result<(), Closed> {
        self.c.events.fetch_add(1, Ordering::Relaxed);
        self.tx.send(ev).map_err(|_| Closed)
    }

    /// Applies one notification to the tables and sends what changed.
    fn handle(&mut self, msg: RouteNetlinkMessage) -> Result<After, Closed> {
        match msg {
            RouteNetlinkMessage::NewLink(l) => {
                let prev = self.update_link(&l);
                let now = self.links.get(&l.header.index);
                let changed = match (prev, now) {
                    (Some(p), Some(n)) => {
                        p.name != n.name || p.mirrored != n.mirrored || (p.up && !n.up)
                    }
                    // A new link carries no routes or addresses yet.
                    _ => false,
                };
                Ok(if changed {
                    After::Resync
                } else {
                    After::Nothing
                })
            }
            RouteNetlinkMessage::DelLink(l) => {
                let gone = self.links.remove(&l.header.index);
                Ok(if gone.is_some_and(|g| g.mirrored) {
                    After::Resync
                } else {
                    After::Nothing
                })
            }
            RouteNetlinkMessage::NewAddress(a) => {
                if let Some(a) = self.addr_of(&a) {
                    if self.addrs.insert(a.clone()) {
                        self.send(CpEvent::Addr {
                            op: Op::Add,
                            ifname: a.ifname,
                            addr: a.addr,
                            len: a.len,
                        })?;
                    }
                }
                Ok(After::Nothing)
            }
            RouteNetlinkMessage::DelAddress(msg) => {
                let Some(a) = self.addr_of(&msg) else {
                    return Ok(After::Nothing);
                };
                if self.addrs.remove(&a) {
                    self.send(CpEvent::Addr {
                        op: Op::Del,
                        ifname: a.ifname.clone(),
                        addr: a.addr,
                        len: a.len,
                    })?;
                }
                // Removing an IPv4 address silently flushes the routes
                // that used it (fib_sync_down_addr): resync.
                Ok(if a.addr.is_ipv4() {
                    After::Resync
                } else {
                    After::Nothing
                })
            }
            RouteNetlinkMessage::NewRoute(r) => {
                if let Some((prefix, metric, target)) = self.route_of(&r) {
                    let before = self.best(&prefix);
                    if self.keep_route(prefix, metric, target) {
                        self.report(prefix, before)?;
                    }
                }
                Ok(After::Nothing)
            }
            RouteNetlinkMessage::DelRoute(r) => {
                // Decode without the interface check so that a route whose
                // interface just went away can still be removed by key.
                if let Ok((prefix, metric)) = rtnl::decode_route_key(&r) {
                    let before = self.best(&prefix);
                    if let Some(m) = self.routes.get_mut(&prefix) {
                        m.remove(&metric);
                        if m.is_empty() {
                            self.routes.remove(&prefix);
                        }
                    }
                    self.report(prefix, before)?;
                }
                Ok(After::Nothing)
            }
            _ => Ok(After::Nothing),
        }
    }

    /// Keeps a route unless it is for a new prefix past `max_routes`, or a
    /// prefix's metric past its [`MAX_METRICS`] lowest ([`keep`]).
    fn keep_route(&mut self, prefix: IpPrefix, metric: u32, target: RouteTarget) -> bool {
        let kept = keep(
            &mut self.routes,
            self.opts.max_routes,
            prefix,
            metric,
            target,
        );
        if !kept {
            self.c.over_limit.fetch_add(1, Ordering::Relaxed);
        }
        kept
    }

    fn best(&self, p: &IpPrefix) -> Option<RouteTarget> {
        self.routes.get(p).and_then(|m| m.values().next().cloned())
    }

    /// Sends an event if the effective route of `prefix` changed.
    fn report(&mut self, prefix: IpPrefix, before: Option<RouteTarget>) -> Result<(), Closed> {
        let after = self.best(&prefix);
        match (before, after) {
            (b, Some(a)) if b.as_ref() != Some(&a) => self.send(CpEvent::Route {
                op: Op::Add,
                prefix,
                target: a,
            }),
            (Some(b), None) => self.send(CpEvent::Route {
                op: Op::Del,
                prefix,
                target: b,
            }),
            _ => Ok(()),
        }
    }
}

enum ResyncError {
    Closed,
    Io(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn via(last: u8) -> RouteTarget {
        RouteTarget::Via {
            gw: std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, last)),
            ifname: None,
        }
    }

    /// A prefix keeps its lowest metrics, at most [`MAX_METRICS`]; new
    /// prefixes stop at `max_routes`, more metrics of a kept one do not
    /// count against it.
    #[test]
    fn a_prefix_keeps_its_lowest_metrics_only() {
        let mut routes = Routes::new();
        let p: IpPrefix = "203.0.113.0/24".parse().expect("prefix");
        for metric in 100..1100 {
            keep(&mut routes, Some(2), p, metric, via(2));
        }
        assert_eq!(routes[&p].len(), MAX_METRICS);
        assert_eq!(
            routes[&p].keys().next_back(),
            Some(&(100 + MAX_METRICS as u32 - 1))
        );
        // A lower one takes the highest's place; the best is reported.
        assert!(keep(&mut routes, Some(2), p, 5, via(3)));
        assert_eq!(routes[&p].len(), MAX_METRICS);
        assert_eq!(routes[&p].values().next(), Some(&via(3)));
        let q: IpPrefix = "198.51.100.0/24".parse().expect("prefix");
        let r: IpPrefix = "192.0.2.0/24".parse().expect("prefix");
        assert!(keep(&mut routes, Some(2), q, 1, via(2)));
        assert!(!keep(&mut routes, Some(2), r, 1, via(2)), "a third prefix");
    }
}
