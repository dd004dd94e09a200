//! The vhost-user protocol side of the `vhost_user` port: the Unix socket,
//! one connection at a time, through the rust-vmm `vhost-user-backend`
//! crate, and what each connection hands the data path.
//!
//! ```text
//!   control thread "vhost-user NAME"          workers (one per queue pair)
//!   ───────────────────────────────          ────────────────────────────
//!   loop:                                     per burst:
//!     Conn { memory, vrings }  ─ publish ─▶   generation changed? take the Conn
//!     VhostUserDaemon::start (accept)          lock its vrings (one uncontended
//!     …messages: memory table, vring            mutex per queue per burst) and
//!        addresses, kick/call fds, enable       copy frames in and out
//!     wait (QEMU gone) ─ withdraw ─▶           the Conn goes with the last Arc:
//!   next connection (QEMU restarted)            guest memory unmapped then
//! ```
//!
//! The crate's own event thread reads the guest's kicks; the workers poll
//! the rings. A worker that waits for work ([`crate::Port::wait_fds`]) arms
//! its queue pair's [`Doorbell`], and a kick on the guest's transmit queue
//! then rings it. `VIRTIO_RING_F_EVENT_IDX` is not offered, so that flag
//! and the guest's `VRING_AVAIL_F_NO_INTERRUPT` are what decide
//! notifications.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost::vhost_user::Listener;
use vhost_user_backend::{
    VhostUserBackend, VhostUserDaemon, VringMutex, VringState, VringStateGuard, VringStateMutGuard,
    VringT,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_net::{
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_ECN, VIRTIO_NET_F_GUEST_TSO4,
    VIRTIO_NET_F_GUEST_TSO6, VIRTIO_NET_F_HOST_ECN, VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_HOST_TSO6,
    VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF,
};
use virtio_bindings::virtio_ring::VIRTIO_RING_F_INDIRECT_DESC;
use virtio_queue::Error as QueueError;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

use crate::IoError;

/// Queue pairs whose kicks reach [`Backend::handle_event`], and so have a
/// [`Doorbell`]: the event loop serves the first 32 vrings (its default
/// queue mask). A worker serving a pair past them naps instead of waiting.
const RUNG_PAIRS: usize = 16;

/// Guest memory as the workers and the protocol handler share it.
pub(crate) type Mem = GuestMemoryAtomic<GuestMemoryMmap<()>>;

/// The largest ring the port accepts (QEMU's `rx_queue_size` and
/// `tx_queue_size` go up to 1024).
const MAX_QUEUE_SIZE: usize = 1024;

/// Bit `n` of a feature word.
const fn bit(n: u32) -> u64 {
    1 << n
}

/// What the device offers: virtio 1.0 (12-byte headers), mergeable rx
/// buffers, checksum offload and TSO both ways with ECN, indirect
/// descriptors, several queue pairs (QEMU handles the control queue
/// itself), and vhost-user protocol features.
pub(crate) const FEATURES: u64 = bit(VIRTIO_F_VERSION_1)
    | bit(VIRTIO_NET_F_MRG_RXBUF)
    | bit(VIRTIO_NET_F_CSUM)
    | bit(VIRTIO_NET_F_GUEST_CSUM)
    | bit(VIRTIO_NET_F_HOST_TSO4)
    | bit(VIRTIO_NET_F_HOST_TSO6)
    | bit(VIRTIO_NET_F_HOST_ECN)
    | bit(VIRTIO_NET_F_GUEST_TSO4)
    | bit(VIRTIO_NET_F_GUEST_TSO6)
    | bit(VIRTIO_NET_F_GUEST_ECN)
    | bit(VIRTIO_NET_F_MQ)
    | bit(VIRTIO_RING_F_INDIRECT_DESC);

/// Feature bits the data path looks at.
pub(crate) mod feature {
    use super::bit;
    use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
    use virtio_bindings::virtio_net::{
        VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6,
        VIRTIO_NET_F_MRG_RXBUF,
    };
    /// 12-byte headers with `num_buffers`.
    pub const VERSION_1: u64 = bit(VIRTIO_F_VERSION_1);
    /// A received frame may span several rx buffers.
    pub const MRG_RXBUF: u64 = bit(VIRTIO_NET_F_MRG_RXBUF);
    /// The guest takes partial checksums.
    pub const GUEST_CSUM: u64 = bit(VIRTIO_NET_F_GUEST_CSUM);
    /// The guest takes TCP super-frames (IPv4, IPv6).
    pub const GUEST_TSO4: u64 = bit(VIRTIO_NET_F_GUEST_TSO4);
    /// See [`GUEST_TSO4`].
    pub const GUEST_TSO6: u64 = bit(VIRTIO_NET_F_GUEST_TSO6);
}

/// A vring as the protocol handler makes it, a [`VringMutex`]; made
/// through [`VringT::new`] while [`collect_vrings`] listens, which is how
/// the workers get them (the crate keeps its own copies private).
#[derive(Clone)]
pub(crate) struct Vring(VringMutex<Mem>);

thread_local! {
    /// Vrings made on this thread since [`collect_vrings`] began.
    static MADE: RefCell<Option<Vec<Vring>>> = const { RefCell::new(None) };
}

/// Runs `f` (which makes a daemon, and with it its vrings, on this
/// thread) and returns what it returned with every vring made meanwhile,
/// in the order made (queue index order).
fn collect_vrings<T>(f: impl FnOnce() -> T) -> (T, Vec<Vring>) {
    MADE.with(|m| *m.borrow_mut() = Some(Vec::new()));
    let out = f();
    let made = MADE.with(|m| m.borrow_mut().take()).unwrap_or_default();
    (out, made)
}

/// A ring the tests set up themselves, as a connection's.
#[cfg(test)]
impl From<VringMutex<Mem>> for Vring {
    fn from(v: VringMutex<Mem>) -> Vring {
        Vring(v)
    }
}

impl Vring {
    /// The vring's state, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, VringState<Mem>> {
        self.0.get_mut()
    }
}

impl<'a> VringStateGuard<'a, Mem> for Vring {
    type G = MutexGuard<'a, VringState<Mem>>;
}

impl<'a> VringStateMutGuard<'a, Mem> for Vring {
    type G = MutexGuard<'a, VringState<Mem>>;
}

impl VringT<Mem> for Vring {
    fn new(mem: Mem, max_queue_size: u16) -> Result<Self, QueueError> {
        let v = Vring(VringMutex::new(mem, max_queue_size)?);
        MADE.with(|m| {
            if let Some(made) = m.borrow_mut().as_mut() {
                made.push(v.clone());
            }
        });
        Ok(v)
    }
    fn get_ref(&self) -> <Self as VringStateGuard<'_, Mem>>::G {
        self.0.get_ref()
    }
    fn get_mut(&self) -> <Self as VringStateMutGuard<'_, Mem>>::G {
        self.0.get_mut()
    }
    fn add_used(&self, desc_index: u16, len: u32) -> Result<(), QueueError> {
        self.0.add_used(desc_index, len)
    }
    fn signal_used_queue(&self) -> io::Result<()> {
        self.0.signal_used_queue()
    }
    fn enable_notification(&self) -> Result<bool, QueueError> {
        self.0.enable_notification()
    }
    fn disable_notification(&self) -> Result<(), QueueError> {
        self.0.disable_notification()
    }
    fn needs_notification(&self) -> Result<bool, QueueError> {
        self.0.needs_notification()
    }
    fn set_enabled(&self, enabled: bool) {
        self.0.set_enabled(enabled)
    }
    fn set_queue_info(&self, desc: u64, avail: u64, used: u64) -> Result<(), QueueError> {
        self.0.set_queue_info(desc, avail, used)
    }
    fn queue_next_avail(&self) -> u16 {
        self.0.queue_next_avail()
    }
    fn set_queue_next_avail(&self, base: u16) {
        self.0.set_queue_next_avail(base)
    }
    fn set_queue_next_used(&self, idx: u16) {
        self.0.set_queue_next_used(idx)
    }
    fn queue_used_idx(&self) -> Result<u16, QueueError> {
        self.0.queue_used_idx()
    }
    fn set_queue_size(&self, num: u16) {
        self.0.set_queue_size(num)
    }
    fn set_queue_event_idx(&self, enabled: bool) {
        self.0.set_queue_event_idx(enabled)
    }
    fn set_queue_ready(&self, ready: bool) {
        self.0.set_queue_ready(ready)
    }
    fn set_kick(&self, file: Option<std::fs::File>) {
        self.0.set_kick(file)
    }
    fn read_kick(&self) -> io::Result<bool> {
        self.0.read_kick()
    }
    fn set_call(&self, file: Option<std::fs::File>) {
        self.0.set_call(file)
    }
    fn set_err(&self, file: Option<std::fs::File>) {
        self.0.set_err(file)
    }
}

/// One connection's worth of state: the guest's memory and rings, and the
/// features it acked.
pub(crate) struct Conn {
    /// The guest's memory, replaced by every `SET_MEM_TABLE`.
    pub(crate) mem: Mem,
    /// Queue `2i` is pair `i`'s receive queue (the guest receives: the port
    /// transmits into it), `2i + 1` its transmit queue.
    pub(crate) vrings: Vec<Vring>,
    /// The virtio features the guest acked (0 until `SET_FEATURES`).
    pub(crate) features: Arc<AtomicU64>,
}

/// What the control thread and the ports share.
pub(crate) struct Link {
    /// The port's name, for logs.
    pub(crate) name: String,
    /// Bumped whenever `current` changes.
    pub(crate) generation: AtomicU64,
    /// The connection now served, if any.
    current: Mutex<Option<Arc<Conn>>>,
    /// Set when every port is gone: the control thread ends.
    stop: AtomicBool,
    /// The socket, to wake the control thread's accept when stopping.
    path: PathBuf,
    /// Per queue pair, what wakes its worker while it waits.
    pub(crate) bells: Vec<Doorbell>,
}

/// Wakes a queue pair's worker that waits for work when the guest kicks its
/// transmit queue: the worker arms it and waits on its descriptor (a
/// datagram socket pair), and the event thread that reads the guest's kicks
/// rings it, only while it is armed (a busy worker costs the kicks
/// nothing). Arming comes before the worker's last look at the ring, and a
/// kick comes after the guest's last write to it, so a frame the look
/// missed is always rung for. Each on its own cache line: the pairs'
/// workers read theirs every burst.
#[repr(align(64))]
pub(crate) struct Doorbell {
    /// The worker is about to wait, or waits.
    armed: AtomicBool,
    /// `ring` sent a byte that `bell` may still hold.
    rung: AtomicBool,
    ring: UnixDatagram,
    bell: UnixDatagram,
}

impl Doorbell {
    fn new() -> io::Result<Doorbell> {
        let (ring, bell) = UnixDatagram::pair()?;
        ring.set_nonblocking(true)?;
        bell.set_nonblocking(true)?;
        Ok(Doorbell {
            armed: AtomicBool::new(false),
            rung: AtomicBool::new(false),
            ring,
            bell,
        })
    }

    /// The worker is about to wait: from now on a kick rings. Returns what
    /// to wait on.
    pub(crate) fn arm(&self) -> BorrowedFd<'_> {
        self.armed.store(true, Ordering::SeqCst);
        // The flag before the worker's last look at the ring, which is a
        // plain acquire load of guest memory.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.bell.as_fd()
    }

    /// The guest kicked: rings if the worker is armed. A kick while the
    /// worker is busy only reads the flag, so the line its bursts read
    /// stays theirs.
    pub(crate) fn kicked(&self) {
        if self.armed.load(Ordering::SeqCst) && self.armed.swap(false, Ordering::SeqCst) {
            self.ring();
        }
    }

    /// Makes the descriptor readable (a full socket already is). The byte
    /// goes before the flag: a burst that sees the flag finds the byte to
    /// read, and one that reads between the two leaves the byte to the
    /// next (one wait that ends at once), never a byte nobody reads.
    pub(crate) fn ring(&self) {
        let _ = self.ring.send(&[1]);
        self.rung.store(true, Ordering::SeqCst);
    }

    /// The worker is back at work: kicks ring no more, and what rang is
    /// read. Two loads when nothing rang.
    pub(crate) fn settle(&self) {
        if self.armed.load(Ordering::Relaxed) {
            self.armed.store(false, Ordering::Relaxed);
        }
        if self.rung.load(Ordering::Relaxed) && self.rung.swap(false, Ordering::SeqCst) {
            let mut byte = [0u8; 8];
            while self.bell.recv(&mut byte).is_ok() {}
        }
    }
}

impl Link {
    /// The connection now served.
    pub(crate) fn current(&self) -> Option<Arc<Conn>> {
        self.current.lock().ok().and_then(|c| c.clone())
    }

    fn publish(&self, conn: Option<Arc<Conn>>) {
        if let Ok(mut c) = self.current.lock() {
            *c = conn;
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Ends the control thread: no connection is accepted any more, and the
    /// socket file goes.
    pub(crate) fn shut(&self) {
        self.stop.store(true, Ordering::Release);
        // Wake an accept() that waits for the next guest.
        let _ = std::os::unix::net::UnixStream::connect(&self.path);
    }
}

/// The device, as the protocol handler asks about it.
#[derive(Clone)]
struct Backend {
    pairs: usize,
    features: Arc<AtomicU64>,
    /// For the doorbells of its queue pairs.
    link: Arc<Link>,
}

impl VhostUserBackend for Backend {
    type Bitmap = ();
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        2 * self.pairs
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        // VHOST_USER_F_PROTOCOL_FEATURES always: QEMU's virtio-net cannot
        // start vhost without it (it falls back to its own virtio, which
        // drops every frame). QEMU 7.2 enables the rings before it acks the
        // bit, which the patched vhost crates accept once the bit is offered
        // (third_party/README.md). MQ only with several queue pairs.
        let f = FEATURES | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
        if self.pairs > 1 {
            f
        } else {
            f & !bit(VIRTIO_NET_F_MQ)
        }
    }

    fn acked_features(&self, features: u64) {
        self.features.store(features, Ordering::Release);
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK
    }

    fn reset_device(&self) {
        self.features.store(0, Ordering::Release);
    }

    fn set_event_idx(&self, _enabled: bool) {}

    fn update_memory(&self, _mem: Mem) -> io::Result<()> {
        // The workers read the same GuestMemoryAtomic, now holding the new
        // table.
        Ok(())
    }

    fn handle_event(
        &self,
        device_event: u16,
        _evset: EventSet,
        _vrings: &[Vring],
        _thread_id: usize,
    ) -> io::Result<()> {
        // Kicks only: the workers poll the rings, but one that waits is
        // rung when the guest sent (its transmit queue, 2i + 1, is what
        // pair i receives).
        let queue = usize::from(device_event);
        if queue % 2 == 1 {
            if let Some(bell) = self.link.bells.get(queue / 2) {
                bell.kicked();
            }
        }
        Ok(())
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()
    }
}

/// Listens on `path` (replacing a stale socket file) and starts the
/// control thread, which serves one frontend (QEMU) at a time and the next
/// when it goes, for as long as the returned link is not [`Link::shut`].
pub(crate) fn listen(name: &str, path: &Path, pairs: usize) -> Result<Arc<Link>, IoError> {
    let mut listener = Listener::new(path, true).map_err(|e| IoError::Setup {
        ifname: name.to_string(),
        reason: format!("vhost-user socket {}: {e}", path.display()),
    })?;
    let bells = (0..pairs.min(RUNG_PAIRS))
        .map(|_| Doorbell::new())
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| IoError::Setup {
            ifname: name.to_string(),
            reason: format!("a doorbell for the workers: {e}"),
        })?;
    let link = Arc::new(Link {
        name: name.to_string(),
        generation: AtomicU64::new(0),
        current: Mutex::new(None),
        stop: AtomicBool::new(false),
        path: path.to_path_buf(),
        bells,
    });
    let l = link.clone();
    std::thread::Builder::new()
        .name(format!("vhost-user {name}"))
        .spawn(move || serve(&l, &mut listener, pairs))
        .map_err(|e| IoError::Setup {
            ifname: name.to_string(),
            reason: format!("starting the vhost-user thread: {e}"),
        })?;
    Ok(link)
}

/// The control thread: one daemon per connection, since the handler's
/// state (owner, features, rings) belongs to one frontend.
fn serve(link: &Arc<Link>, listener: &mut Listener, pairs: usize) {
    let name = link.name.as_str();
    while !link.stop.load(Ordering::Acquire) {
        let mem: Mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let features = Arc::new(AtomicU64::new(0));
        let backend = Backend {
            pairs,
            features: features.clone(),
            link: link.clone(),
        };
        let (daemon, vrings) = collect_vrings(|| {
            VhostUserDaemon::new(format!("vhost-user {name} requests"), backend, mem.clone())
        });
        let mut daemon = match daemon {
            Ok(d) if vrings.len() == 2 * pairs => d,
            Ok(_) => {
                tracing::error!(
                    port = name,
                    "vhost-user: the backend made no rings; port stopped"
                );
                return;
            }
            Err(e) => {
                tracing::error!(port = name, "vhost-user: {e}; port stopped");
                return;
            }
        };
        link.publish(Some(Arc::new(Conn {
            mem,
            vrings,
            features,
        })));
        if let Err(e) = daemon.start(listener) {
            tracing::warn!(port = name, "vhost-user: accepting a connection: {e}");
            std::thread::sleep(Duration::from_millis(100));
        } else if !link.stop.load(Ordering::Acquire) {
            tracing::info!(port = name, "vhost-user frontend connected");
            match daemon.wait() {
                Ok(()) => tracing::info!(port = name, "vhost-user frontend disconnected"),
                Err(e) => tracing::warn!(port = name, "vhost-user frontend gone: {e}"),
            }
        }
        link.publish(None);
        for h in daemon.get_epoll_handlers() {
            h.send_exit_event();
        }
    }
    let _ = std::fs::remove_file(&link.path);
    tracing::info!(port = name, "vhost-user socket closed");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait::{readable, Waited};

    /// A kick on vring `2i + 1` (the guest's transmit queue of pair `i`)
    /// rings pair `i`'s doorbell while it is armed; a kick on its receive
    /// queue does not. Pairs past [`RUNG_PAIRS`] have none.
    #[test]
    fn a_kick_on_a_pairs_transmit_queue_rings_that_pair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let link = listen("vm", &dir.path().join("vm.sock"), 20).expect("listen");
        assert_eq!(link.bells.len(), RUNG_PAIRS);
        let backend = Backend {
            pairs: 20,
            features: Arc::new(AtomicU64::new(0)),
            link: link.clone(),
        };
        let quiet = Duration::from_millis(30);
        let kick = |vring| {
            backend
                .handle_event(vring, EventSet::IN, &[], 0)
                .expect("event")
        };
        let fd = link.bells[1].arm();
        kick(2);
        assert_eq!(
            readable(&[fd], quiet),
            Waited::TimedOut,
            "pair 1's receive queue"
        );
        kick(1);
        assert_eq!(
            readable(&[fd], quiet),
            Waited::TimedOut,
            "pair 0's transmit queue"
        );
        kick(3);
        assert_eq!(readable(&[fd], Duration::from_secs(5)), Waited::Readable);
        // Past the pairs with doorbells, and past the rings: nothing.
        kick(41);
        kick(1001);
        link.shut();
    }
}
