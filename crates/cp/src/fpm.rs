//! FRR FPM server: routes from a zebra that lives elsewhere (a VM, another
//! host) over TCP, for one VR.
//!
//! zebra's `dplane_fpm_nl` module connects out to us and streams netlink
//! route messages, each batch wrapped in a 4-byte frame header:
//!
//! ```text
//!   0        1        2                 4
//!   ┌────────┬────────┬─────────────────┬──────────────────────────────┐
//!   │ ver=1  │ type=1 │ length (BE u16) │ netlink messages (1 or more) │
//!   └────────┴────────┴─────────────────┴──────────────────────────────┘
//!             1 = netlink      length counts the header too
//! ```
//!
//! - `RTM_NEWROUTE` (zebra sets `NLM_F_REPLACE`) → `CpEvent::Route { op: Add }`;
//!   `RTM_DELROUTE` → `Op::Del`. Other message types (neighbours, MACs,
//!   next-hop groups) are counted and ignored.
//! - The same filters as for namespace routes apply (the `rtnl` module):
//!   main table only, unicast/blackhole/unreachable/prohibit only.
//! - Interface indexes in these messages are the zebra host's, meaningless
//!   here, so a route through a gateway becomes `Via { gw, ifname: None }`
//!   and the VR resolves `gw` against its connected prefixes; a route with
//!   only an interface (no gateway) is counted and skipped.
//! - Multipath (`RTA_MULTIPATH`) becomes a multipath target with every
//!   gateway and its weight; next hops without a gateway are counted
//!   (`ignored_next_hops`).
//! - Next-hop objects (`RTM_NEWNEXTHOP`/`RTM_DELNEXTHOP`, zebra's default
//!   `fpm use-next-hop-groups`) are kept, and routes that name one by id
//!   resolve through it ([`crate::nexthop`]); when an object changes or
//!   goes, every route that uses it follows at once. A route whose object
//!   is unknown or has no gateway is not installed until it resolves
//!   (counted in `unresolved`, logged at most every 10 s).
//! - A malformed frame (bad version/type/length, undecodable netlink) is
//!   counted and logged, and the connection is closed; zebra reconnects.
//!
//! **Reconnects: mark and sweep.** Routes stay when a connection drops, so
//! forwarding continues while zebra restarts. zebra resends its whole table
//! on every new connection; routes it no longer has would linger, so each
//! route remembers the connection that last sent it, and once the new
//! connection has been quiet for [`FpmOptions::sweep_after`] (the resend is
//! over), every route not re-sent by it is withdrawn. One zebra per server:
//! a new connection supersedes (shuts down) the previous one. The table
//! holds at most `max_routes` prefixes over all sessions: a new prefix past
//! that withdraws one an older session sent and the new one has not resent
//! (its sweep, early), so a sender that reconnects again and again cannot
//! grow it.

use crate::queue::EventSender;
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::route::RouteType;
use netlink_packet_route::RouteNetlinkMessage;

use crate::event::{CpEvent, Hop, IpPrefix, Op, RouteTarget};
use crate::nexthop::{self, NextHop, NextHops};
use crate::rtnl::{self, RawTarget};
use crate::CpError;

/// Frame header length.
pub const HEADER_LEN: usize = 4;
/// The only FPM protocol version there is.
pub const VERSION: u8 = 1;
/// Frame type: netlink messages (2 would be protobuf, which zebra's
/// `dplane_fpm_nl` never sends).
pub const MSG_NETLINK: u8 = 1;
/// zebra's default FPM port.
pub const DEFAULT_PORT: u16 = 2620;

/// A frame or message we cannot accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FpmError {
    /// Header version is not 1.
    #[error("FPM frame version {0} (expected 1)")]
    Version(u8),
    /// Header type is not 1 (netlink).
    #[error("FPM frame type {0} (expected 1 = netlink)")]
    Type(u8),
    /// Length field shorter than the header itself.
    #[error("FPM frame length {0} shorter than its header")]
    Length(u16),
    /// The netlink messages in the frame do not decode.
    #[error("FPM frame payload: {0}")]
    Netlink(String),
    /// Too many bytes to fit one frame (encoding).
    #[error("{0} bytes do not fit one FPM frame")]
    TooLong(usize),
}

/// Splits a TCP byte stream into frame payloads. Sans-IO: feed it what
/// `read` returned, then take frames until it says `None`.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame's payload (the netlink messages), `None` if
    /// more bytes are needed. After an error the stream cannot be resynced
    /// (there are no frame markers): close the connection.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FpmError> {
        let Some(h) = self.buf.get(..HEADER_LEN) else {
            return Ok(None);
        };
        if h[0] != VERSION {
            return Err(FpmError::Version(h[0]));
        }
        if h[1] != MSG_NETLINK {
            return Err(FpmError::Type(h[1]));
        }
        let len = u16::from_be_bytes([h[2], h[3]]);
        if usize::from(len) < HEADER_LEN {
            return Err(FpmError::Length(len));
        }
        let len = usize::from(len);
        if self.buf.len() < len {
            return Ok(None);
        }
        let payload = self.buf[HEADER_LEN..len].to_vec();
        self.buf.drain(..len);
        Ok(Some(payload))
    }

    /// Bytes held that do not form a complete frame yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// One route or next-hop change from zebra, in the order sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Install or replace the route for the prefix.
    Add(IpPrefix, RouteTarget),
    /// Install or replace the route for the prefix, through next-hop object
    /// `id` (`fpm use-next-hop-groups`).
    AddByNextHop(IpPrefix, u32),
    /// Remove the route for the prefix (zebra's deletes carry no next hops).
    Del(IpPrefix),
    /// Next-hop object `id` is new or changed.
    NextHop(u32, NextHop),
    /// Next-hop object `id` is gone.
    NextHopDel(u32),
}

/// What one frame payload holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Route and next-hop changes, in order.
    pub routes: Vec<Change>,
    /// Messages of other types (ignored).
    pub ignored: usize,
    /// Route messages a filter dropped (other table, local, interface
    /// only, ...), and next-hop messages that did not decode.
    pub skipped: usize,
    /// Multipath next hops left out (no gateway).
    pub extra_hops: usize,
}

/// Decodes one frame payload. Any message that does not decode makes the
/// whole frame malformed.
pub fn decode_payload(payload: &[u8]) -> Result<Decoded, FpmError> {
    let (msgs, bad) = rtnl::parse_ordered(payload);
    if bad > 0 {
        return Err(FpmError::Netlink(format!(
            "{bad} undecodable netlink message(s)"
        )));
    }
    let mut out = Decoded::default();
    for m in msgs {
        let m = match m {
            rtnl::Parsed::NextHop { del, body } => {
                match nexthop::decode(&body) {
                    Ok((id, _)) if del => out.routes.push(Change::NextHopDel(id)),
                    Ok((id, obj)) => out.routes.push(Change::NextHop(id, obj)),
                    Err(e) => {
                        tracing::debug!(error = %e, "next-hop message skipped");
                        out.skipped += 1;
                    }
                }
                continue;
            }
            rtnl::Parsed::Route(m) => m,
        };
        let r = match m.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r)) => r,
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelRoute(r)) => {
                match rtnl::decode_route_key(&r) {
                    Ok((prefix, _)) => out.routes.push(Change::Del(prefix)),
                    Err(_) => out.skipped += 1,
                }
                continue;
            }
            _ => {
                out.ignored += 1;
                continue;
            }
        };
        let raw = match rtnl::decode_route(&r) {
            Ok(raw) => raw,
            Err(_) => {
                out.skipped += 1;
                continue;
            }
        };
        let target = match raw.target {
            RawTarget::Via { gw, .. } => RouteTarget::Via { gw, ifname: None },
            RawTarget::Multipath(gws) => RouteTarget::Multipath(
                gws.into_iter()
                    .map(|(gw, _, weight)| Hop {
                        gw,
                        ifname: None,
                        weight,
                    })
                    .collect(),
            ),
            RawTarget::Group(id) => {
                out.routes.push(Change::AddByNextHop(raw.prefix, id));
                continue;
            }
            // The interface index is the remote host's: nothing to map it to.
            RawTarget::Dev { .. } => {
                out.skipped += 1;
                continue;
            }
            RawTarget::Blackhole => RouteTarget::Blackhole,
            RawTarget::Unreachable => RouteTarget::Unreachable,
            RawTarget::Prohibit => RouteTarget::Prohibit,
        };
        out.extra_hops += raw.extra_hops;
        out.routes.push(Change::Add(raw.prefix, target));
    }
    Ok(out)
}

/// Encodes one route change as a netlink message the way zebra does
/// (`RTM_NEWROUTE` with `NLM_F_CREATE|NLM_F_REPLACE`, or `RTM_DELROUTE`),
/// in the main table. For tests and tools. A `Connected` target has no
/// interface index to carry, so it encodes as a unicast route with no next
/// hop (which the decoder skips).
pub fn encode_route(op: Op, prefix: IpPrefix, target: &RouteTarget) -> Vec<u8> {
    let (kind, gw) = match target {
        RouteTarget::Via { gw, .. } => (RouteType::Unicast, Some(*gw)),
        RouteTarget::Multipath(_) | RouteTarget::Connected { .. } => (RouteType::Unicast, None),
        RouteTarget::Blackhole => (RouteType::BlackHole, None),
        RouteTarget::Unreachable => (RouteType::Unreachable, None),
        RouteTarget::Prohibit => (RouteType::Prohibit, None),
    };
    let mut rm = rtnl::route_message(prefix, kind, gw);
    if let RouteTarget::Multipath(hops) = target {
        rm.attributes.push(rtnl::multipath_attr(hops));
    }
    let (inner, flags) = match op {
        Op::Add => (
            RouteNetlinkMessage::NewRoute(rm),
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE,
        ),
        Op::Del => (RouteNetlinkMessage::DelRoute(rm), NLM_F_REQUEST),
    };
    serialize(inner, flags)
}

/// One netlink message's bytes.
fn serialize(inner: RouteNetlinkMessage, flags: u16) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    let mut nl = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(inner));
    nl.finalize();
    let mut bytes = vec![0u8; nl.buffer_len()];
    nl.serialize(&mut bytes);
    bytes
}

/// Encodes a route that names next-hop object `id` (`RTA_NH_ID`, no next
/// hops of its own), as zebra sends it with `fpm use-next-hop-groups`.
pub fn encode_route_by_next_hop(prefix: IpPrefix, id: u32) -> Vec<u8> {
    let mut rm = rtnl::route_message(prefix, RouteType::Unicast, None);
    rm.attributes
        .push(netlink_packet_route::route::RouteAttribute::NhId(id));
    serialize(
        RouteNetlinkMessage::NewRoute(rm),
        NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE,
    )
}

/// Wraps netlink messages (already 4-byte aligned, as [`encode_route`]
/// makes them) in one FPM frame.
pub fn frame(messages: &[u8]) -> Result<Vec<u8>, FpmError> {
    let len = messages.len() + HEADER_LEN;
    let len16 = u16::try_from(len).map_err(|_| FpmError::TooLong(len))?;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&[VERSION, MSG_NETLINK]);
    out.extend_from_slice(&len16.to_be_bytes());
    out.extend_from_slice(messages);
    Ok(out)
}

/// Server tuning and who may connect.
///
/// A new connection is a candidate until it sends its first valid FPM
/// frame: only then does it supersede the session in place (whose routes
/// it must resend before the sweep). A stranger that connects and stays
/// silent, or sends garbage, changes nothing.
#[derive(Clone, Debug)]
pub struct FpmOptions {
    /// How long a session must stay quiet, after its first frame, before
    /// routes it did not resend are withdrawn (the end of zebra's
    /// full-table resend).
    pub sweep_after: Duration,
    /// Peer addresses allowed to connect; empty allows any.
    pub allowed_peers: Vec<std::net::IpAddr>,
    /// How long a candidate may stay without a valid frame before it is
    /// closed.
    pub candidate_timeout: Duration,
    /// Connections open at once, the session included; more are closed at
    /// once.
    pub max_connections: usize,
    /// Most prefixes held (the VR's route limit, both families): routes for
    /// further prefixes are not kept or passed on, only counted
    /// (`over_limit`).
    pub max_routes: usize,
    /// Routes an earlier run of vrhost held for the VR when it stopped
    /// (its FPM snapshot), installed at once as if an earlier session had
    /// sent them: the first session's sweep withdraws those it does not
    /// resend, so zebra's reconnect after a restart of vrhost loses no
    /// route and leaves none stale.
    pub restored: Vec<(IpPrefix, RouteTarget)>,
    /// How long restored routes stay when no session starts at all (zebra
    /// gone for good): then they are withdrawn.
    pub restored_grace: Duration,
}

impl Default for FpmOptions {
    fn default() -> Self {
        // zebra resends the table in one burst right after connecting;
        // 5 s of silence is far beyond its inter-batch gaps.
        FpmOptions {
            sweep_after: Duration::from_secs(5),
            allowed_peers: Vec::new(),
            candidate_timeout: Duration::from_secs(30),
            max_connections: 4,
            max_routes: usize::MAX,
            restored: Vec::new(),
            restored_grace: Duration::from_secs(60),
        }
    }
}

/// Counters of one FPM server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FpmStats {
    /// Connections accepted.
    pub connections: u64,
    /// Frames decoded.
    pub frames: u64,
    /// Route events sent.
    pub routes: u64,
    /// Malformed frames (each closed its connection).
    pub malformed: u64,
    /// Non-route messages ignored.
    pub ignored: u64,
    /// Route messages dropped by a filter.
    pub skipped: u64,
    /// Multipath next hops left out (no gateway).
    pub ignored_next_hops: u64,
    /// Routes naming a next-hop object that is unknown or has no gateway:
    /// not installed (or withdrawn) until the object resolves.
    pub unresolved: u64,
    /// Next-hop objects held.
    pub next_hop_objects: u64,
    /// Routes withdrawn by a sweep after a reconnect.
    pub swept: u64,
    /// Connections refused: a peer not in `allowed_peers`, or past
    /// `max_connections`.
    pub refused: u64,
    /// Candidates closed without ever sending a valid frame.
    pub silent: u64,
    /// Routes for new prefixes past `max_routes`, not kept.
    pub over_limit: u64,
}

#[derive(Default)]
struct Counters {
    over_limit: AtomicU64,
    refused: AtomicU64,
    silent: AtomicU64,
    open: AtomicU64,
    connections: AtomicU64,
    frames: AtomicU64,
    routes: AtomicU64,
    malformed: AtomicU64,
    ignored: AtomicU64,
    skipped: AtomicU64,
    ignored_next_hops: AtomicU64,
    unresolved: AtomicU64,
    swept: AtomicU64,
}

/// Routes held for the VR, and which connection sent each.
#[derive(Default)]
struct Table {
    /// prefix → (target, generation of the connection that sent it).
    routes: BTreeMap<IpPrefix, (RouteTarget, u64)>,
    /// Generation of the newest connection.
    generation: u64,
    /// Routes the newest session sent (those of older ones await the
    /// sweep): what counts against `max_routes`.
    current_count: usize,
    /// The newest connection, to shut it down when superseded.
    current: Option<TcpStream>,
    /// Next-hop objects, and the prefixes whose routes name them.
    nexthops: NextHops,
    /// Prefixes older sessions sent, to withdraw early when the table is
    /// full ([`evict_stale`]), and the generation they were gathered for.
    stale: (u64, Vec<IpPrefix>),
}

struct Shared {
    table: Mutex<Table>,
    last_refusal_log: Mutex<Option<Instant>>,
    last_unresolved_log: Mutex<Option<Instant>>,
    c: Counters,
    stop: AtomicBool,
    tx: EventSender,
    opts: FpmOptions,
}

/// A running FPM server. Dropping it stops accepting and closes the
/// connection; the routes already sent stay with the consumer.
pub struct FpmServer {
    local: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Listens on `addr` and feeds the routes zebra sends into `tx`.
pub fn serve(addr: SocketAddr, tx: EventSender) -> Result<FpmServer, CpError> {
    let l = TcpListener::bind(addr).map_err(|e| CpError::io(&addr.to_string(), "bind", e))?;
    serve_listener(l, tx, FpmOptions::default())
}

/// Serves on a listener bound elsewhere (for example on a thread inside a
/// namespace with [`vrhost_io::netns::run_in`], so zebra reaches it there).
pub fn serve_listener(
    listener: TcpListener,
    tx: EventSender,
    opts: FpmOptions,
) -> Result<FpmServer, CpError> {
    let local = listener
        .local_addr()
        .map_err(|e| CpError::io("fpm", "local_addr", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| CpError::io(&local.to_string(), "set_nonblocking", e))?;
    let shared = Arc::new(Shared {
        table: Mutex::new(Table::default()),
        last_refusal_log: Mutex::new(None),
        last_unresolved_log: Mutex::new(None),
        c: Counters::default(),
        stop: AtomicBool::new(false),
        tx,
        opts,
    });
    {
        // Generation 0: older than any session, so the first one's sweep
        // takes what it does not resend.
        let mut t = lock(&shared.table);
        let restored: Vec<(IpPrefix, RouteTarget)> = shared
            .opts
            .restored
            .iter()
            .take(shared.opts.max_routes)
            .cloned()
            .collect();
        for (prefix, target) in &restored {
            t.routes.insert(*prefix, (target.clone(), 0));
        }
        if !restored.is_empty() {
            // One snapshot, applied whole before the consumer says it is
            // in sync.
            shared
                .c
                .routes
                .fetch_add(restored.len() as u64, Ordering::Relaxed);
            let _ = shared.tx.send(CpEvent::Resync {
                routes: restored,
                addrs: Vec::new(),
            });
        }
        if !t.routes.is_empty() {
            tracing::info!(
                %local,
                routes = t.routes.len(),
                grace_s = shared.opts.restored_grace.as_secs(),
                "FPM routes restored from before the restart; swept once zebra has resent its table"
            );
        }
    }
    let s = shared.clone();
    let thread = std::thread::Builder::new()
        .name(format!("fpm-{local}"))
        .spawn(move || accept_loop(listener, s))
        .map_err(|e| CpError::io(&local.to_string(), "spawn FPM thread", e))?;
    tracing::info!(%local, "FPM server listening");
    Ok(FpmServer {
        local,
        shared,
        thread: Some(thread),
    })
}

impl FpmServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> FpmStats {
        let c = &self.shared.c;
        FpmStats {
            connections: c.connections.load(Ordering::Relaxed),
            frames: c.frames.load(Ordering::Relaxed),
            routes: c.routes.load(Ordering::Relaxed),
            malformed: c.malformed.load(Ordering::Relaxed),
            ignored: c.ignored.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            ignored_next_hops: c.ignored_next_hops.load(Ordering::Relaxed),
            unresolved: c.unresolved.load(Ordering::Relaxed),
            next_hop_objects: lock(&self.shared.table).nexthops.len() as u64,
            swept: c.swept.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            silent: c.silent.load(Ordering::Relaxed),
            over_limit: c.over_limit.load(Ordering::Relaxed),
        }
    }

    /// The routes currently held (what the consumer has been told).
    pub fn routes(&self) -> Vec<(IpPrefix, RouteTarget)> {
        lock(&self.shared.table)
            .routes
            .iter()
            .map(|(p, (t, _))| (*p, t.clone()))
            .collect()
    }
}

impl Drop for FpmServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(s) = lock(&self.shared.table).current.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Locks, surviving a poisoned mutex (a panicking connection thread must
/// not take the server down).
fn lock(m: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How often blocked threads wake to check for stop (and the sweep).
const POLL: Duration = Duration::from_millis(100);

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let started = Instant::now();
    let mut restored_pending = !shared.opts.restored.is_empty();
    while !shared.stop.load(Ordering::Relaxed) {
        if restored_pending && started.elapsed() >= shared.opts.restored_grace {
            restored_pending = false;
            expire_restored(&shared);
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                let allowed = &shared.opts.allowed_peers;
                let open = shared.c.open.load(Ordering::Relaxed);
                if !allowed.is_empty() && !allowed.contains(&peer.ip()) {
                    refuse(&shared, peer, "not in fpm_peers");
                    continue;
                }
                if open >= shared.opts.max_connections as u64 {
                    refuse(&shared, peer, "too many FPM connections open");
                    continue;
                }
                shared.c.open.fetch_add(1, Ordering::Relaxed);
                let s = shared.clone();
                match std::thread::Builder::new()
                    .name(format!("fpm-conn-{peer}"))
                    .spawn(move || connection(stream, peer, s))
                {
                    Ok(h) => conns.push(h),
                    Err(e) => {
                        shared.c.open.fetch_sub(1, Ordering::Relaxed);
                        tracing::error!(%peer, error = %e, "cannot spawn FPM connection thread")
                    }
                }
                conns.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                tracing::warn!(error = %e, "FPM accept failed");
                std::thread::sleep(POLL);
            }
        }
    }
    for h in conns {
        let _ = h.join();
    }
}

/// A refused connection: counted, and logged at most once a minute.
fn refuse(shared: &Shared, peer: SocketAddr, why: &str) {
    let n = shared.c.refused.fetch_add(1, Ordering::Relaxed);
    let mut last = shared
        .last_refusal_log
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
        *last = Some(Instant::now());
        tracing::warn!(%peer, refused_so_far = n + 1, "FPM connection refused: {why}");
    }
}

/// Makes the connection from `peer` the session: the one before it is shut
/// down, and its routes are swept unless this one resends them.
fn promote(shared: &Shared, stream: &TcpStream, peer: SocketAddr) -> u64 {
    let mut t = lock(&shared.table);
    t.generation += 1;
    t.current_count = 0;
    let clone = stream.try_clone().ok();
    if let Some(old) = std::mem::replace(&mut t.current, clone) {
        tracing::info!(%peer, "FPM connection sent a valid frame; it supersedes the previous session");
        let _ = old.shutdown(Shutdown::Both);
    }
    t.generation
}

/// Counts the connection closed when it ends, however it ends.
struct Open<'a>(&'a Shared);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.c.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One zebra connection: a candidate until its first valid frame, then the
/// session.
fn connection(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let _open = Open(&shared);
    shared.c.connections.fetch_add(1, Ordering::Relaxed);
    tracing::info!(%peer, "FPM connection (a candidate until its first valid frame)");
    let opened = Instant::now();
    let mut generation: Option<u64> = None;
    let mut stream = stream;
    if let Err(e) = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(POLL)))
    {
        tracing::error!(%peer, error = %e, "FPM socket setup failed");
        return;
    }
    let mut dec = FrameDecoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_data = Instant::now();
    let mut sweep_pending = true;
    while !shared.stop.load(Ordering::Relaxed) {
        if generation.is_none() && opened.elapsed() >= shared.opts.candidate_timeout {
            shared.c.silent.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%peer, "FPM connection sent no valid frame in time; closed, nothing changed");
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                tracing::info!(%peer, "FPM connection closed by peer; routes kept until resent or swept");
                return;
            }
            Ok(n) => {
                last_data = Instant::now();
                dec.push(&buf[..n]);
                loop {
                    let payload = match dec.next_frame() {
                        Ok(Some(p)) => p,
                        Ok(None) => break,
                        Err(e) => {
                            malformed(&shared, peer, &e);
                            return;
                        }
                    };
                    let d = match decode_payload(&payload) {
                        Ok(d) => d,
                        Err(e) => {
                            malformed(&shared, peer, &e);
                            return;
                        }
                    };
                    let generation = match generation {
                        Some(g) => g,
                        None => {
                            let g = promote(&shared, &stream, peer);
                            generation = Some(g);
                            last_data = Instant::now();
                            g
                        }
                    };
                    if !apply(&shared, generation, d) {
                        tracing::info!(%peer, "FPM connection superseded; closing");
                        return;
                    }
                }
            }
            Err(e) if crate::is_poll_timeout(&e) => {}
            Err(e) => {
                tracing::info!(%peer, error = %e, "FPM connection failed; routes kept until resent or swept");
                return;
            }
        }
        if let Some(g) = generation.filter(|_| sweep_pending) {
            if last_data.elapsed() >= shared.opts.sweep_after {
                sweep_pending = false;
                sweep(&shared, g);
            }
        }
    }
}

fn malformed(shared: &Shared, peer: SocketAddr, e: &FpmError) {
    shared.c.malformed.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(%peer, error = %e, "malformed FPM frame; closing the connection");
}

/// Applies one frame's routes; false if this connection was superseded.
fn apply(shared: &Shared, generation: u64, d: Decoded) -> bool {
    let c = &shared.c;
    c.frames.fetch_add(1, Ordering::Relaxed);
    c.ignored.fetch_add(d.ignored as u64, Ordering::Relaxed);
    c.skipped.fetch_add(d.skipped as u64, Ordering::Relaxed);
    c.ignored_next_hops
        .fetch_add(d.extra_hops as u64, Ordering::Relaxed);
    let mut t = lock(&shared.table);
    if t.generation != generation {
        return false;
    }
    // Objects a session may hold: as many as routes, and some room.
    let max_objects = shared.opts.max_routes.saturating_add(1024);
    for change in d.routes {
        match change {
            Change::Add(prefix, target) => {
                t.nexthops.forget(prefix);
                install(shared, &mut t, generation, prefix, Some(target));
            }
            Change::AddByNextHop(prefix, id) => {
                // A prefix that names an object is kept until the object
                // resolves, counted or not: as many as the routes allowed,
                // or a sender naming an object it never sends would grow
                // this without limit.
                let known = t.routes.contains_key(&prefix) || t.nexthops.id_of(&prefix).is_some();
                if !known && t.nexthops.prefixes() >= shared.opts.max_routes {
                    c.over_limit.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                t.nexthops.use_id(prefix, id);
                let target = t.nexthops.resolve(id);
                install(shared, &mut t, generation, prefix, target);
            }
            Change::Del(prefix) => {
                t.nexthops.forget(prefix);
                install(shared, &mut t, generation, prefix, None);
            }
            Change::NextHop(id, obj) => {
                if t.nexthops.len() >= max_objects && !t.nexthops.contains(id) {
                    c.over_limit.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                for p in t.nexthops.set(id, Some(obj)) {
                    follow(shared, &mut t, generation, p);
                }
            }
            Change::NextHopDel(id) => {
                for p in t.nexthops.set(id, None) {
                    follow(shared, &mut t, generation, p);
                }
            }
        }
    }
    true
}

/// Re-resolves `prefix`'s route after a next-hop object it uses changed:
/// a route the table holds keeps the generation that sent it (a change of
/// object is not a resend), one that could not resolve before is new.
fn follow(shared: &Shared, t: &mut Table, generation: u64, prefix: IpPrefix) {
    let target = t
        .nexthops
        .id_of(&prefix)
        .and_then(|id| t.nexthops.resolve(id));
    match (target, t.routes.get_mut(&prefix)) {
        (Some(target), Some((old, _))) => {
            if *old != target {
                *old = target.clone();
                send(
                    shared,
                    CpEvent::Route {
                        op: Op::Add,
                        prefix,
                        target,
                    },
                );
            }
        }
        (target, _) => install(shared, t, generation, prefix, target),
    }
}

/// Installs (or with `None`, withdraws) `prefix`'s route as sent by
/// session `generation`, within the route limit; tells the consumer what
/// changed.
fn install(
    shared: &Shared,
    t: &mut Table,
    generation: u64,
    prefix: IpPrefix,
    target: Option<RouteTarget>,
) {
    let c = &shared.c;
    // Routes an older session sent and this one has not resent yet do not
    // count: the sweep takes them.
    let resent = t.routes.get(&prefix).is_some_and(|(_, g)| *g == generation);
    let ev = match target {
        Some(_) if t.current_count >= shared.opts.max_routes && !resent => {
            c.over_limit.fetch_add(1, Ordering::Relaxed);
            None
        }
        Some(target) => {
            if !t.routes.contains_key(&prefix) && t.routes.len() >= shared.opts.max_routes {
                evict_stale(shared, t, generation);
            }
            if !resent {
                t.current_count += 1;
            }
            match t.routes.insert(prefix, (target.clone(), generation)) {
                Some((old, _)) if old == target => None,
                _ => Some(CpEvent::Route {
                    op: Op::Add,
                    prefix,
                    target,
                }),
            }
        }
        None => {
            if t.nexthops.id_of(&prefix).is_some() {
                // Names an object that is unknown or has no gateway.
                c.unresolved.fetch_add(1, Ordering::Relaxed);
                let mut last = shared
                    .last_unresolved_log
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                    *last = Some(Instant::now());
                    tracing::warn!(%prefix, "FPM route names a next-hop object that is unknown or has no gateway; not installed until it resolves");
                }
            }
            if resent {
                t.current_count -= 1;
            }
            t.routes.remove(&prefix).map(|(old, _)| CpEvent::Route {
                op: Op::Del,
                prefix,
                target: old,
            })
        }
    };
    if let Some(ev) = ev {
        send(shared, ev);
    }
}

/// Makes room for a new prefix of session `generation` in a full table:
/// withdraws one route an older session sent and this one has not resent,
/// as its sweep would. Without it every reconnect could add another
/// `max_routes` prefixes before the sweep. The caller has checked that the
/// session's own routes are under the limit, so such a route exists.
fn evict_stale(shared: &Shared, t: &mut Table, generation: u64) {
    if t.stale.0 != generation {
        t.stale = (generation, older(t, generation));
    }
    while let Some(p) = t.stale.1.pop() {
        if t.routes.get(&p).is_none_or(|(_, g)| *g >= generation) {
            continue; // resent or withdrawn since
        }
        shared.c.swept.fetch_add(1, Ordering::Relaxed);
        withdraw(shared, t, p);
        return;
    }
}

/// The prefixes whose routes a session older than `generation` sent and
/// that one has not resent.
fn older(t: &Table, generation: u64) -> Vec<IpPrefix> {
    t.routes
        .iter()
        .filter(|(_, (_, g))| *g < generation)
        .map(|(p, _)| *p)
        .collect()
}

fn send(shared: &Shared, ev: CpEvent) {
    shared.c.routes.fetch_add(1, Ordering::Relaxed);
    // A dropped receiver means nobody consumes this VR any more; keep the
    // table so `routes()` stays truthful.
    let _ = shared.tx.send(ev);
}

/// Withdraws the restored routes when no session started within the
/// grace period (a session's own sweep takes them otherwise).
fn expire_restored(shared: &Shared) {
    let mut t = lock(&shared.table);
    if t.generation != 0 {
        return;
    }
    let stale: Vec<IpPrefix> = t.routes.keys().copied().collect();
    shared
        .c
        .swept
        .fetch_add(stale.len() as u64, Ordering::Relaxed);
    tracing::warn!(
        routes = stale.len(),
        "no FPM session within the grace period after the restart: restored routes withdrawn"
    );
    for p in stale {
        withdraw(shared, &mut t, p);
    }
}

/// Takes `p`'s route out of the table, and out of the VR.
fn withdraw(shared: &Shared, t: &mut Table, p: IpPrefix) {
    t.nexthops.forget(p);
    if let Some((old, _)) = t.routes.remove(&p) {
        let _ = shared.tx.send(CpEvent::Route {
            op: Op::Del,
            prefix: p,
            target: old,
        });
    }
}

fn sweep(shared: &Shared, generation: u64) {
    let mut t = lock(&shared.table);
    if t.generation != generation {
        return;
    }
    let stale = older(&t, generation);
    // What eviction had gathered goes with them.
    t.stale = (0, Vec::new());
    // Counted before the events go out, so whoever sees a withdrawal also
    // sees it in the statistics.
    shared
        .c
        .swept
        .fetch_add(stale.len() as u64, Ordering::Relaxed);
    for p in &stale {
        withdraw(shared, &mut t, *p);
    }
    if !stale.is_empty() {
        tracing::info!(
            count = stale.len(),
            "FPM sweep: withdrew routes zebra did not resend"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// A target whose gateway (if any) has the family of `p`, as zebra
    /// sends it (an IPv4 route through an IPv6 gateway would use RTA_VIA).
    fn target(v4: bool) -> impl Strategy<Value = RouteTarget> {
        prop_oneof![
            any::<u128>().prop_map(move |a| RouteTarget::Via {
                gw: if v4 {
                    IpAddr::V4(Ipv4Addr::from(a as u32))
                } else {
                    IpAddr::V6(Ipv6Addr::from(a))
                },
                ifname: None
            }),
            Just(RouteTarget::Blackhole),
            Just(RouteTarget::Unreachable),
            Just(RouteTarget::Prohibit),
        ]
    }

    fn prefix() -> impl Strategy<Value = IpPrefix> {
        prop_oneof![
            (any::<u32>(), 0u8..=32)
                .prop_map(|(a, l)| IpPrefix::new_truncating(IpAddr::V4(a.into()), l)),
            (any::<u128>(), 0u8..=128)
                .prop_map(|(a, l)| IpPrefix::new_truncating(IpAddr::V6(a.into()), l)),
        ]
        .prop_filter_map("valid", |p| p.ok())
        // The decoder drops link-local and multicast destinations.
        .prop_filter("unicast", |p| match p.addr() {
            IpAddr::V6(a) => (a.segments()[0] & 0xffc0) != 0xfe80 && !a.is_multicast(),
            IpAddr::V4(a) => !a.is_multicast(),
        })
    }

    proptest! {
        /// Random bytes, split at a random point: the decoder returns frames
        /// or an error, never panics, and a frame's payload decodes or fails
        /// cleanly.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), cut in 0usize..2048) {
            let mut d = FrameDecoder::new();
            let cut = cut.min(bytes.len());
            d.push(&bytes[..cut]);
            d.push(&bytes[cut..]);
            while let Ok(Some(p)) = d.next_frame() {
                let _ = decode_payload(&p);
            }
        }

        /// Random bytes behind a valid header: the payload decoder must not
        /// panic on garbage netlink.
        #[test]
        fn random_payload_never_panics(payload in proptest::collection::vec(any::<u8>(), 0..1024)) {
            if let Ok(f) = frame(&payload) {
                let mut d = FrameDecoder::new();
                d.push(&f);
                let p = d.next_frame().unwrap().unwrap();
                prop_assert_eq!(&p, &payload);
                let _ = decode_payload(&p);
            }
        }

        /// Encoded routes, several per frame, decode to what was encoded.
        #[test]
        fn routes_roundtrip(routes in proptest::collection::vec(
            (any::<bool>(), prefix()).prop_flat_map(|(a, p)| (Just(a), Just(p), target(p.addr().is_ipv4()))),
            1..20,
        )) {
            let mut msgs = Vec::new();
            for (add, p, t) in &routes {
                let op = if *add { Op::Add } else { Op::Del };
                msgs.extend(encode_route(op, *p, t));
            }
            let f = frame(&msgs).unwrap();
            let mut d = FrameDecoder::new();
            // Byte by byte, as TCP may deliver it.
            let mut got = None;
            for b in &f {
                d.push(std::slice::from_ref(b));
                if let Some(p) = d.next_frame().unwrap() {
                    got = Some(p);
                }
            }
            let dec = decode_payload(&got.unwrap()).unwrap();
            let want: Vec<_> = routes
                .iter()
                .map(|(add, p, t)| if *add { Change::Add(*p, t.clone()) } else { Change::Del(*p) })
                .collect();
            prop_assert_eq!(dec.routes, want);
        }
    }

    #[test]
    fn header_errors() {
        for (bytes, err) in [
            (vec![2u8, 1, 0, 4], FpmError::Version(2)),
            (vec![1u8, 2, 0, 4], FpmError::Type(2)),
            (vec![1u8, 1, 0, 3], FpmError::Length(3)),
        ] {
            let mut d = FrameDecoder::new();
            d.push(&bytes);
            assert_eq!(d.next_frame(), Err(err));
        }
        let mut d = FrameDecoder::new();
        d.push(&[1, 1, 0, 4]);
        assert_eq!(d.next_frame(), Ok(Some(vec![])));
        assert_eq!(d.next_frame(), Ok(None));
    }

    #[test]
    fn garbage_payload_is_malformed() {
        assert!(decode_payload(&[0xff; 7]).is_err());
        // A netlink length running past the payload.
        let mut m = encode_route(
            Op::Add,
            "10.0.0.0/8".parse().unwrap(),
            &RouteTarget::Blackhole,
        );
        m[0] = 0xff;
        assert!(decode_payload(&m).is_err());
    }
}
