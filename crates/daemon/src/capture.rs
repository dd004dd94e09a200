//! Live capture: the frames a VR interface receives and sends, copied by
//! the workers into bounded per-worker buffers and streamed as pcap through
//! the management API (`vrhost ctl capture VR IFACE --write -`).
//!
//! ```text
//!   worker k, per burst:  rx_burst ─▶ [armed? one atomic load] ─▶ process_burst ─▶ … ─▶ [armed?] ─▶ flush
//!                                          │ match port + VLAN tags, filter,                │
//!                                          │ rate bucket; copy into session ring k ◀────────┘
//!                                          ▼ (try_lock: never waits)
//!   API request thread:  Stream::next_chunk ── swap ring k with an empty one ─▶ sort by time ─▶ pcap bytes ─▶ client
//! ```
//!
//! What it costs forwarding: with nothing armed, one relaxed atomic load per
//! loop turn. Armed, per burst: a look at each frame's port and tags, the
//! filter for frames of the interface, and the copy of those that pass, into
//! a buffer reserved when the capture starts (no allocation, no lock wait: a
//! ring its reader holds at that instant drops the frame, counted).
//!
//! Bounds: [`MAX_CAPTURES`] at once, [`MAX_PER_VR`] per VR (429 past them);
//! per capture [`RATE`] frames a second and [`RING_BYTES`] of buffer per
//! worker; frames past either are dropped and counted (logged when it ends).
//! A capture is tenant-scoped: it names one VR interface, and a VR token may
//! capture only its own VR's (the API's scope check).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vrhost_api::{ApiError, CaptureStream};
use vrhost_dataplane::{IfaceId, Mbuf, Shared, TableWriter, TxBatch};

pub mod filter;

pub use filter::Filter;

/// Captures running at once, all VRs.
pub const MAX_CAPTURES: usize = 8;
/// Captures running at once on one VR.
pub const MAX_PER_VR: usize = 2;
/// Frames a second one capture copies, all workers together.
pub const RATE: u64 = 20_000;
/// Buffer per worker per capture: about 30 ms of a 1 Gbit/s interface's
/// worth of full frames; the reader empties it every few milliseconds.
pub const RING_BYTES: usize = 4 << 20;
/// Bytes kept of each frame by default (and at most).
pub const SNAPLEN: u32 = 65_535;
/// A pcap record header.
const RECORD: usize = 16;

/// The registry of running captures, shared by the API and every worker.
pub struct CaptureHub {
    /// Bumped on every arm and disarm; workers re-read `sessions` when it
    /// moved.
    generation: AtomicU64,
    sessions: Mutex<Vec<Arc<Session>>>,
    workers: usize,
}

impl CaptureHub {
    /// A hub for `workers` workers.
    pub fn new(workers: usize) -> Arc<CaptureHub> {
        Arc::new(CaptureHub {
            generation: AtomicU64::new(0),
            sessions: Mutex::new(Vec::new()),
            workers: workers.max(1),
        })
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Arms a capture of interface `iface` (global index) of VR `vr` in
    /// `shared`; 429 past the limits.
    pub fn arm(
        self: &Arc<Self>,
        shared: &Shared,
        vr: u16,
        iface: IfaceId,
        filter: Filter,
        snaplen: u32,
    ) -> Result<Arc<Session>, ApiError> {
        let f = shared
            .ifaces()
            .get(iface.index())
            .ok_or_else(|| ApiError::NotFound("no such interface".into()))?;
        let mut tags = Vec::new();
        if let Some(v) = f.vlan {
            tags.push((f.tpid.value(), v));
            if let Some(i) = f.inner_vlan {
                tags.push((0x8100, i));
            }
        }
        let mut sessions = self.sessions();
        if sessions.len() >= MAX_CAPTURES {
            return Err(ApiError::TooMany(format!(
                "{MAX_CAPTURES} captures run already; retry later"
            )));
        }
        if sessions.iter().filter(|s| s.vr == vr).count() >= MAX_PER_VR {
            return Err(ApiError::TooMany(format!(
                "{MAX_PER_VR} captures run on this VR already; retry later"
            )));
        }
        let per_worker = (RATE / self.workers as u64).max(1);
        let s = Arc::new(Session {
            vr,
            iface,
            port: f.port,
            tags,
            filter,
            snaplen: snaplen.clamp(1, SNAPLEN),
            rings: (0..self.workers)
                .map(|_| Mutex::new(Ring::new(RING_BYTES, per_worker)))
                .collect(),
            over_rate: AtomicU64::new(0),
            over_buffer: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            done: AtomicBool::new(false),
        });
        sessions.push(s.clone());
        self.generation.fetch_add(1, Ordering::Release);
        Ok(s)
    }

    fn disarm(&self, s: &Arc<Session>) {
        s.done.store(true, Ordering::Relaxed);
        self.sessions().retain(|x| !Arc::ptr_eq(x, s));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Captures running now.
    pub fn running(&self) -> usize {
        self.sessions().len()
    }
}

/// One running capture.
pub struct Session {
    vr: u16,
    iface: IfaceId,
    port: u16,
    /// The interface's tags, outer first: (TPID, VLAN id).
    tags: Vec<(u16, u16)>,
    filter: Filter,
    snaplen: u32,
    /// One per worker: pcap records, written by that worker only.
    rings: Vec<Mutex<Ring>>,
    over_rate: AtomicU64,
    over_buffer: AtomicU64,
    /// Frames dropped because the reader held the ring at that instant.
    busy: AtomicU64,
    done: AtomicBool,
}

/// A worker's buffer of one capture: whole pcap records, and its rate
/// bucket.
struct Ring {
    buf: Vec<u8>,
    tokens: u64,
    per_second: u64,
    last_ns: u64,
}

impl Ring {
    fn new(bytes: usize, per_second: u64) -> Ring {
        Ring {
            buf: Vec::with_capacity(bytes),
            tokens: per_second,
            per_second,
            last_ns: 0,
        }
    }

    fn refill(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last_ns);
        let add = dt.saturating_mul(self.per_second) / 1_000_000_000;
        if add > 0 {
            self.tokens = (self.tokens + add).min(self.per_second);
            self.last_ns = now;
        }
    }
}

impl Session {
    /// Whether `frame`, seen on port `port`, belongs to the interface: its
    /// port, and exactly the interface's VLAN tags.
    fn on_interface(&self, port: u16, frame: &[u8]) -> bool {
        if port != self.port {
            return false;
        }
        let mut at = 12;
        for &(tpid, vid) in &self.tags {
            let Some(t) = frame.get(at..at + 4) else {
                return false;
            };
            if u16::from_be_bytes([t[0], t[1]]) != tpid
                || u16::from_be_bytes([t[2], t[3]]) & 0x0fff != vid
            {
                return false;
            }
            at += 4;
        }
        // Nothing more tagged than the interface is.
        !matches!(
            frame
                .get(at..at + 2)
                .map(|t| u16::from_be_bytes([t[0], t[1]])),
            Some(0x8100 | 0x88a8 | 0x9100)
        )
    }

    /// Copies the frames of `frames` that are the interface's and pass the
    /// filter into worker `k`'s ring, at `unix_ns`.
    fn offer<'a>(
        &self,
        k: usize,
        port_of: impl Fn(&Mbuf) -> u16,
        frames: impl Iterator<Item = &'a Mbuf>,
        now: u64,
        unix_ns: u64,
    ) {
        let Some(ring) = self.rings.get(k) else {
            return;
        };
        let mut ring_guard = None;
        for m in frames {
            let data = m.data();
            if !self.on_interface(port_of(m), data) || !self.filter.matches(data) {
                continue;
            }
            let r = match &mut ring_guard {
                Some(r) => r,
                None => match ring.try_lock() {
                    Ok(g) => ring_guard.insert(g),
                    Err(_) => {
                        self.busy.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                },
            };
            r.refill(now);
            if r.tokens == 0 {
                self.over_rate.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let keep = data.len().min(self.snaplen as usize);
            if r.buf.len() + RECORD + keep > r.buf.capacity() {
                self.over_buffer.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            r.tokens -= 1;
            let (secs, usecs) = (unix_ns / 1_000_000_000, (unix_ns % 1_000_000_000) / 1_000);
            r.buf.extend_from_slice(&(secs as u32).to_le_bytes());
            r.buf.extend_from_slice(&(usecs as u32).to_le_bytes());
            r.buf.extend_from_slice(&(keep as u32).to_le_bytes());
            r.buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
            r.buf.extend_from_slice(&data[..keep]);
        }
    }
}

// ------------------------------------------------------------ worker side --

/// One worker's view of the running captures.
pub struct WorkerCapture {
    hub: Arc<CaptureHub>,
    worker: usize,
    seen: u64,
    active: Vec<Arc<Session>>,
    /// Wall-clock nanoseconds at the worker's time 0.
    epoch_unix_ns: u64,
}

impl WorkerCapture {
    /// Worker `worker`'s side of `hub`.
    pub fn new(hub: Arc<CaptureHub>, worker: usize) -> WorkerCapture {
        WorkerCapture {
            hub,
            worker,
            seen: 0,
            active: Vec::new(),
            epoch_unix_ns: 0,
        }
    }

    /// Sets the wall clock of the worker's time 0 (call where its clock
    /// starts): records carry wall-clock times without a clock read per
    /// frame.
    pub fn start_clock(&mut self) {
        self.epoch_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    }

    /// Whether a capture runs; re-reads the list when it changed. One
    /// atomic load when nothing changed.
    #[inline]
    fn armed(&mut self) -> bool {
        let g = self.hub.generation.load(Ordering::Acquire);
        if g != self.seen {
            self.seen = g;
            self.active = self.hub.sessions().clone();
        }
        !self.active.is_empty()
    }

    /// What a receive burst brought, before the pipeline touches it.
    #[inline]
    pub fn received(&mut self, frames: &[Mbuf], now: u64) {
        if !self.armed() {
            return;
        }
        for s in &self.active {
            s.offer(
                self.worker,
                |m| m.port,
                frames.iter(),
                now,
                self.epoch_unix_ns + now,
            );
        }
    }

    /// What is about to be sent, port by port.
    #[inline]
    pub fn sending(&mut self, tx: &TxBatch, now: u64) {
        if !self.armed() {
            return;
        }
        for s in &self.active {
            let Some(q) = tx.ports.get(usize::from(s.port)) else {
                continue;
            };
            if q.is_empty() {
                continue;
            }
            let port = s.port;
            s.offer(
                self.worker,
                move |_| port,
                q.iter(),
                now,
                self.epoch_unix_ns + now,
            );
        }
    }
}

// ------------------------------------------------------------ reader side --

/// A capture as the API streams it.
pub struct Stream {
    hub: Arc<CaptureHub>,
    session: Arc<Session>,
    writer: Arc<Mutex<TableWriter>>,
    header: Option<Vec<u8>>,
    remaining: Option<u64>,
    deadline: Option<Instant>,
    spare: Vec<u8>,
    frames: u64,
    last_check: Instant,
    label: String,
}

impl Stream {
    /// Streams `session` until `count` frames or `seconds` pass, or its
    /// interface goes; `label` (`red/red0`) names it in the log.
    pub fn new(
        hub: Arc<CaptureHub>,
        session: Arc<Session>,
        writer: Arc<Mutex<TableWriter>>,
        count: Option<u64>,
        seconds: Option<u64>,
        label: String,
    ) -> Stream {
        let mut header = Vec::with_capacity(24);
        header.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        header.extend_from_slice(&2u16.to_le_bytes());
        header.extend_from_slice(&4u16.to_le_bytes());
        header.extend_from_slice(&0i32.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        header.extend_from_slice(&session.snaplen.to_le_bytes());
        // LINKTYPE_ETHERNET.
        header.extend_from_slice(&1u32.to_le_bytes());
        tracing::info!(capture = label, "live capture started");
        Stream {
            hub,
            session,
            writer,
            header: Some(header),
            remaining: count,
            deadline: seconds.map(|s| Instant::now() + Duration::from_secs(s)),
            spare: Vec::with_capacity(RING_BYTES),
            frames: 0,
            last_check: Instant::now(),
            label,
        }
    }

    fn over(&mut self) -> bool {
        if self.remaining == Some(0) || self.deadline.is_some_and(|d| Instant::now() >= d) {
            return true;
        }
        if self.last_check.elapsed() >= Duration::from_millis(500) {
            self.last_check = Instant::now();
            let shared = crate::tables_lock::lock(&self.writer).shared().clone();
            if !shared.iface_attached(self.session.iface) {
                return true;
            }
        }
        false
    }

    /// Every record the workers wrote since the last call, oldest first.
    fn drain(&mut self) -> Vec<u8> {
        let mut records: Vec<(u64, Vec<u8>)> = Vec::new();
        for ring in &self.session.rings {
            {
                let mut r = ring.lock().unwrap_or_else(|p| p.into_inner());
                if r.buf.is_empty() {
                    continue;
                }
                std::mem::swap(&mut r.buf, &mut self.spare);
            }
            let mut at = 0;
            while at + RECORD <= self.spare.len() {
                let h = &self.spare[at..at + RECORD];
                let secs = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as u64;
                let usecs = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as u64;
                let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
                let end = (at + RECORD + len).min(self.spare.len());
                records.push((secs * 1_000_000 + usecs, self.spare[at..end].to_vec()));
                at = end;
            }
            self.spare.clear();
        }
        // Workers' records interleave by time.
        records.sort_by_key(|(t, _)| *t);
        if let Some(n) = self.remaining {
            records.truncate(usize::try_from(n).unwrap_or(usize::MAX));
            self.remaining = Some(n - records.len() as u64);
        }
        self.frames += records.len() as u64;
        records.into_iter().flat_map(|(_, r)| r).collect()
    }
}

impl CaptureStream for Stream {
    fn next_chunk(&mut self, wait: Duration) -> Option<Vec<u8>> {
        if let Some(h) = self.header.take() {
            return Some(h);
        }
        let until = Instant::now() + wait;
        loop {
            if self.over() {
                return None;
            }
            let out = self.drain();
            if !out.is_empty() {
                return Some(out);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Some(Vec::new());
            }
            std::thread::sleep(left.min(Duration::from_millis(5)));
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.hub.disarm(&self.session);
        let s = &self.session;
        tracing::info!(
            capture = self.label,
            frames = self.frames,
            over_rate = s.over_rate.load(Ordering::Relaxed),
            over_buffer = s.over_buffer.load(Ordering::Relaxed),
            reader_busy = s.busy.load(Ordering::Relaxed),
            "live capture ended"
        );
    }
}

/// Parses a capture filter; 400 naming `filter` when it does not parse.
pub fn parse_filter(expr: Option<&str>) -> Result<Filter, ApiError> {
    match expr {
        None => Ok(Filter::all()),
        Some(e) => Filter::parse(e).map_err(|m| ApiError::bad("filter", m)),
    }
}
