//! The `vhost_user` port: vrhost is the vhost-user backend of a VM's
//! virtio-net device. QEMU (`-netdev vhost-user,chardev=…`) connects to
//! the port's Unix socket and hands over the guest's memory and rings;
//! the workers then move frames straight between those rings and
//! [`Mbuf`]s, with the virtio-net header's checksum and segmentation
//! state ([`crate::vnet`]) both ways.
//!
//! - Queue pair `i` of the device is port queue `i` (one per worker): the
//!   guest's transmit queue (`2i + 1`) is what the port receives, its
//!   receive queue (`2i`) what the port sends into.
//! - Mergeable receive buffers (`VIRTIO_NET_F_MRG_RXBUF`): a frame longer
//!   than one of the guest's buffers spans several, `num_buffers` says
//!   how many.
//! - Offloads: the guest's partial checksums and TSO super-frames arrive
//!   described (and are cut to fit a buffer, as af_packet does); frames
//!   go to the guest with theirs when it acked `GUEST_CSUM` and
//!   `GUEST_TSO4/6`, and finished in software otherwise.
//! - Reconnection: when QEMU goes (a restart, a guest power-off), the
//!   port drops what it sends until the next QEMU connects
//!   (the `backend` module's control thread serves one connection after another).
//!
//! No `unsafe` here: guest memory is reached through `vm-memory`, the
//! rings through `virtio-queue`.

mod backend;

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use virtio_queue::{DescriptorChain, QueueT};
use vm_memory::{Bytes, GuestAddressSpace, GuestMemory};
use vrhost_dataplane::{offload, Mbuf, MbufPool};

use crate::rx_frame::{self, Received};
use crate::{vnet, IoError, Port, PortStats};
use backend::{feature, Conn, Link};

/// Bytes of the virtio-net header with `num_buffers` (virtio 1.0, or
/// legacy with mergeable buffers).
const HDR_LEN: usize = 12;
/// The longest frame a guest sends: a 64 KiB TSO super-frame and its
/// Ethernet header, behind its header.
const MAX_READ: usize = HDR_LEN + 65_536 + 22;

/// A vhost-user device's queues, shared by its ports. The socket closes
/// when this and every port made from it are gone.
pub struct VhostUserSocket {
    link: Arc<Link>,
    open: Arc<Open>,
    pairs: usize,
}

/// Closes the socket when the last holder goes.
struct Open(Arc<Link>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.shut();
    }
}

impl VhostUserSocket {
    /// Listens on `path` for a frontend with `pairs` queue pairs; `name`
    /// is the port's, for logs.
    pub fn listen(name: &str, path: &std::path::Path, pairs: u16) -> Result<Self, IoError> {
        let pairs = usize::from(pairs.max(1));
        let link = backend::listen(name, path, pairs)?;
        Ok(VhostUserSocket {
            open: Arc::new(Open(link.clone())),
            link,
            pairs,
        })
    }

    /// The port of queue pair `pair`.
    pub fn port(&self, pair: u16) -> Result<VhostUserPort, IoError> {
        if usize::from(pair) >= self.pairs {
            return Err(IoError::Setup {
                ifname: self.link.name.clone(),
                reason: format!("queue {pair} out of range for {} queue(s)", self.pairs),
            });
        }
        Ok(VhostUserPort {
            link: self.link.clone(),
            _open: self.open.clone(),
            pair: usize::from(pair),
            generation: u64::MAX,
            conn: None,
            read: vec![0u8; MAX_READ].into_boxed_slice(),
            pending: None,
            scratch: Vec::new(),
            stats: PortStats::default(),
        })
    }
}

/// One queue pair of a vhost-user device.
pub struct VhostUserPort {
    link: Arc<Link>,
    _open: Arc<Open>,
    pair: usize,
    /// The link's generation `conn` was taken at.
    generation: u64,
    /// The connection served, while a frontend is attached.
    conn: Option<Arc<Conn>>,
    /// A frame the guest sent, whole (header, frame).
    read: Box<[u8]>,
    /// The length of a frame in `read` that the last burst had no room
    /// for.
    pending: Option<usize>,
    /// Spare vector for [`offload::resolve`].
    scratch: Vec<Mbuf>,
    stats: PortStats,
}

impl VhostUserPort {
    /// Whether the link changed (a guest came or went) since `conn` was
    /// taken.
    fn stale(&self) -> bool {
        self.link.generation.load(Ordering::Acquire) != self.generation
    }

    /// The connection now served, re-read when the link changed.
    fn conn(&mut self) -> Option<Arc<Conn>> {
        if self.stale() {
            self.generation = self.link.generation.load(Ordering::Acquire);
            self.conn = self.link.current();
            self.pending = None;
        }
        self.conn.clone()
    }

    /// Whether the guest's transmit queue holds chains the port has not
    /// taken yet (false when that cannot be read: a guest whose ring is
    /// bad does not keep its worker from waiting, and a wait is 1 ms at
    /// most).
    fn guest_sent(&self) -> bool {
        let Some(conn) = &self.conn else {
            return false;
        };
        let Some(vring) = conn.vrings.get(2 * self.pair + 1) else {
            return false;
        };
        let st = vring.lock();
        if !st.is_enabled() || !st.get_queue().ready() {
            return false;
        }
        let mem = conn.mem.memory();
        st.get_queue()
            .avail_idx(&*mem, Ordering::Acquire)
            .is_ok_and(|avail| avail.0 != st.get_queue().next_avail())
    }
}

/// The features the guest acked.
fn acked(c: &Conn) -> u64 {
    c.features.load(Ordering::Acquire)
}

/// The most descriptors one chain may have, direct or in an indirect
/// table: a Linux guest's longest (a 64 KiB super-frame in
/// `MAX_SKB_FRAGS` fragments, at most 45, with its header) has fewer.
/// A chain with more is dropped, so that a guest cannot make one frame
/// cost the worker 65,535 descriptor reads.
const MAX_CHAIN_DESCRIPTORS: usize = 64;

/// A chain longer than [`MAX_CHAIN_DESCRIPTORS`].
struct TooLong;

/// The descriptors of `chain`, then `Err(TooLong)` in place of the first
/// past [`MAX_CHAIN_DESCRIPTORS`] (and nothing after it).
fn bounded<M>(
    chain: DescriptorChain<M>,
) -> impl Iterator<Item = Result<virtio_queue::desc::split::Descriptor, TooLong>>
where
    M: std::ops::Deref,
    M::Target: GuestMemory,
{
    chain
        .take(MAX_CHAIN_DESCRIPTORS + 1)
        .enumerate()
        .map(|(i, d)| {
            if i < MAX_CHAIN_DESCRIPTORS {
                Ok(d)
            } else {
                Err(TooLong)
            }
        })
}

/// Copies a chain's device-readable bytes into `buf`; `None` when they do
/// not fit, the chain has more than [`MAX_CHAIN_DESCRIPTORS`], or guest
/// memory cannot be read.
fn read_chain<M>(chain: DescriptorChain<M>, mem: &M::Target, buf: &mut [u8]) -> Option<usize>
where
    M: std::ops::Deref,
    M::Target: GuestMemory,
{
    let mut len = 0usize;
    for d in bounded(chain) {
        let d = d.ok()?;
        if d.is_write_only() {
            continue;
        }
        let n = d.len() as usize;
        let dst = buf.get_mut(len..len + n)?;
        mem.read_slice(dst, d.addr()).ok()?;
        len += n;
    }
    Some(len)
}

/// Takes the frames the guest sent on transmit queue `st`, read into
/// `read` chain by chain and each handed to `take` (its vnet header, its
/// frame), until `max` frames are taken or `max` chains were popped,
/// whichever comes first: a chain dropped (malformed, too long) counts
/// against the burst too, so a guest that keeps posting bad chains cannot
/// hold the worker here. `pending` is a frame read by an earlier burst
/// that had no room for it, and keeps the next one that has none.
/// Returns the frames taken and whether a chain went back to the guest.
fn take_sent<M: GuestMemory>(
    st: &mut vhost_user_backend::VringState<backend::Mem>,
    mem: &M,
    read: &mut [u8],
    pending: &mut Option<usize>,
    (hdr, max): (usize, usize),
    stats: &mut PortStats,
    mut take: impl FnMut(&mut PortStats, &[u8], &[u8], usize) -> Received,
) -> (usize, bool) {
    let (mut n, mut popped, mut used) = (0, 0, false);
    while n < max {
        let len = match pending.take() {
            Some(len) => len,
            None => {
                if popped == max {
                    break;
                }
                let Some(chain) = st.get_queue_mut().pop_descriptor_chain(mem) else {
                    break;
                };
                popped += 1;
                let head = chain.head_index();
                // The frame is copied out: the guest may reuse the
                // buffer at once.
                let len = read_chain(chain, mem, read);
                let _ = st.add_used(head, 0);
                used = true;
                match len {
                    Some(len) => len,
                    None => {
                        stats.dropped += 1;
                        continue;
                    }
                }
            }
        };
        if len < hdr + 14 {
            stats.dropped += 1;
            continue;
        }
        let (vh, frame) = read[..len].split_at(hdr);
        match take(stats, &vh[..vnet::LEN], frame, n) {
            Received::Frames(k) => n += k,
            Received::Dropped => stats.dropped += 1,
            Received::NoRoom => {
                *pending = Some(len);
                break;
            }
        }
    }
    (n, used)
}

impl Port for VhostUserPort {
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        if let Some(bell) = self.link.bells.get(self.pair) {
            bell.settle();
        }
        let Some(conn) = self.conn() else {
            return 0;
        };
        let Some(vring) = conn.vrings.get(2 * self.pair + 1) else {
            return 0;
        };
        let hdr = if acked(&conn) & (feature::VERSION_1 | feature::MRG_RXBUF) != 0 {
            HDR_LEN
        } else {
            vnet::LEN
        };
        let mut st = vring.lock();
        if !st.is_enabled() || !st.get_queue().ready() {
            return 0;
        }
        // One guard for the burst; each chain borrows guest memory through
        // it (no reference count taken a frame).
        let guard = conn.mem.memory();
        let VhostUserPort {
            read,
            pending,
            stats,
            ..
        } = self;
        let (n, used) = take_sent(
            &mut st,
            &*guard,
            read,
            pending,
            (hdr, max),
            stats,
            |stats, vh, frame, n| {
                rx_frame::receive(stats, frame, vh, None, pool, rx, (n, max), port_index)
            },
        );
        if used && st.needs_notification().unwrap_or(true) {
            let _ = st.signal_used_queue();
        }
        n
    }

    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        _now_ns: u64,
    ) -> Result<(), IoError> {
        let Some(conn) = self.conn() else {
            self.stats.dropped += tx.len() as u64;
            for m in tx.drain(..) {
                pool.put(m);
            }
            return Ok(());
        };
        let features = acked(&conn);
        let takes_all = feature::GUEST_CSUM | feature::GUEST_TSO4 | feature::GUEST_TSO6;
        if features & takes_all != takes_all {
            self.stats.dropped += offload::resolve(tx, &mut self.scratch, pool);
        }
        let mergeable = features & feature::MRG_RXBUF != 0;
        let hdr = if features & (feature::VERSION_1 | feature::MRG_RXBUF) != 0 {
            HDR_LEN
        } else {
            vnet::LEN
        };
        let sent = match conn.vrings.get(2 * self.pair) {
            Some(vring) => {
                let mut st = vring.lock();
                if st.is_enabled() && st.get_queue().ready() {
                    let mem = conn.mem.memory();
                    let mut sent = 0usize;
                    for (i, m) in tx.iter().enumerate() {
                        let Some(vh) = vnet::emit(&m.offload, m.data()) else {
                            self.stats.dropped += 1;
                            continue;
                        };
                        let mut h = [0u8; HDR_LEN];
                        h[..vnet::LEN].copy_from_slice(&vh);
                        let bytes = [&h[..hdr], m.data()];
                        if !write_frame(&mut st, &*mem, &bytes, mergeable) {
                            // The guest's ring did not take it (no buffers
                            // posted, or a bad chain): the rest of the
                            // burst is dropped, not tried chain by chain.
                            self.stats.dropped += (tx.len() - i) as u64;
                            break;
                        }
                        self.stats.tx_packets += 1;
                        self.stats.tx_bytes += m.len() as u64;
                        sent += 1;
                    }
                    if sent > 0 && st.needs_notification().unwrap_or(true) {
                        let _ = st.signal_used_queue();
                    }
                    true
                } else {
                    false
                }
            }
            None => false,
        };
        if !sent {
            self.stats.dropped += tx.len() as u64;
        }
        for m in tx.drain(..) {
            pool.put(m);
        }
        Ok(())
    }

    /// The queue pair's doorbell, armed: the event thread rings it when the
    /// guest kicks its transmit queue. Rung at once if the guest already
    /// posted frames since the last burst, or a new guest came since (its
    /// ring is not the one this port last read). False for a pair past
    /// the ones the event thread rings for (the worker naps).
    fn wait_fds<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) -> bool {
        let Some(bell) = self.link.bells.get(self.pair) else {
            return false;
        };
        fds.push(bell.arm());
        if self.stale() || self.guest_sent() {
            bell.ring();
        }
        true
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// Writes `parts` (header, frame) into the guest's receive buffers: one
/// chain, or with `mergeable` as many as it takes, `num_buffers` (bytes
/// 10–11 of the header) set to their count. False when the frame is
/// dropped: the guest has not posted enough buffers (the chains taken go
/// back on the available ring, for the next frame), or a buffer is not in
/// guest memory or a chain has more than [`MAX_CHAIN_DESCRIPTORS`] (the
/// chains taken are returned empty).
fn write_frame<M: GuestMemory>(
    st: &mut vhost_user_backend::VringState<backend::Mem>,
    mem: &M,
    parts: &[&[u8]; 2],
    mergeable: bool,
) -> bool {
    let total = parts[0].len() + parts[1].len();
    // (head, bytes written) of each chain used, at most a frame's worth.
    let mut chains: [(u16, u32); 64] = [(0, 0); 64];
    let mut used = 0usize;
    let mut at = 0usize;
    let mut first: Option<vm_memory::GuestAddress> = None;
    while at < total {
        if used == chains.len() || (used == 1 && !mergeable) {
            break;
        }
        let Some(chain) = st.get_queue_mut().pop_descriptor_chain(mem) else {
            break;
        };
        let head = chain.head_index();
        let start = at;
        for d in bounded(chain) {
            let Ok(d) = d else {
                // Returned empty, as a buffer outside guest memory is.
                at = usize::MAX;
                break;
            };
            if !d.is_write_only() {
                continue;
            }
            let mut room = d.len() as usize;
            let mut addr = d.addr();
            if first.is_none() {
                first = Some(addr);
            }
            while room > 0 && at < total {
                let (part, off) = if at < parts[0].len() {
                    (parts[0], at)
                } else {
                    (parts[1], at - parts[0].len())
                };
                let n = room.min(part.len() - off);
                if mem.write_slice(&part[off..off + n], addr).is_err() {
                    at = usize::MAX;
                    break;
                }
                at += n;
                room -= n;
                addr = vm_memory::GuestAddress(addr.0 + n as u64);
            }
            if at >= total {
                break;
            }
        }
        chains[used] = (head, at.min(total).saturating_sub(start) as u32);
        used += 1;
    }
    if at < total {
        // Out of buffers (a write error sets `at` past `total`): not taken
        // after all, the guest's buffers stay available.
        let q = st.get_queue_mut();
        q.set_next_avail(q.next_avail().wrapping_sub(used as u16));
        return false;
    }
    let ok = at == total;
    if ok && mergeable {
        // num_buffers, little-endian, in the first buffer's header.
        let count = (used as u16).to_le_bytes();
        if let Some(a) = first {
            let _ = mem.write_slice(&count, vm_memory::GuestAddress(a.0 + 10));
        }
    }
    for &(head, len) in &chains[..used] {
        let _ = st.add_used(head, if ok { len } else { 0 });
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use vhost_user_backend::{VringMutex, VringT};
    use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
    use virtio_queue::desc::{split::Descriptor, RawDescriptor};
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

    /// A queue of `size` entries at address 0 whose driver posted `descs`
    /// (chains as their `NEXT` flags join them).
    fn queue(size: u16, descs: &[RawDescriptor]) -> (backend::Mem, VringMutex<backend::Mem>) {
        let gm = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x20_0000)])
            .expect("guest memory");
        let mock = MockSplitQueue::new(&gm, size);
        mock.add_desc_chains(descs, 0).expect("chains");
        let (desc, avail, used) = (mock.desc_table_addr(), mock.avail_addr(), mock.used_addr());
        let mem = GuestMemoryAtomic::new(gm);
        let vring = VringMutex::new(mem.clone(), size).expect("vring");
        {
            let mut st = vring.get_mut();
            st.set_queue_info(desc.0, avail.0, used.0)
                .expect("addresses");
            st.get_queue_mut().set_size(size);
            st.get_queue_mut().set_ready(true);
        }
        (mem, vring)
    }

    /// Descriptors `first..first + n` as one chain, each of `len` bytes
    /// at its own 256 bytes from 1 MiB up, writable (the device's to
    /// fill) or readable.
    fn chain(first: u16, n: u16, len: u32, writable: bool) -> Vec<RawDescriptor> {
        (first..first + n)
            .map(|i| {
                let addr = 0x10_0000 + u64::from(i) * 0x100;
                let mut flags = if writable {
                    VRING_DESC_F_WRITE as u16
                } else {
                    0
                };
                let next = if i + 1 < first + n {
                    flags |= VRING_DESC_F_NEXT as u16;
                    i + 1
                } else {
                    0
                };
                RawDescriptor::from(Descriptor::new(addr, len, flags, next))
            })
            .collect()
    }

    /// A receive queue of 16 entries whose driver posted `buffers`
    /// one-descriptor chains of 64 bytes each.
    fn rx_queue(buffers: u16) -> (backend::Mem, VringMutex<backend::Mem>) {
        let descs: Vec<RawDescriptor> = (0..buffers).flat_map(|i| chain(i, 1, 64, true)).collect();
        queue(16, &descs)
    }

    /// The used ring's index: chains handed back to the guest.
    fn used_idx(mem: &backend::Mem, vring: &VringMutex<backend::Mem>) -> u16 {
        let used = vring.get_mut().get_queue().used_ring();
        mem.memory()
            .read_obj::<u16>(GuestAddress(used + 2))
            .expect("used idx")
    }

    #[test]
    fn a_frame_the_posted_buffers_cannot_hold_leaves_them_for_the_next() {
        let (mem, vring) = rx_queue(2);
        let hdr = [0u8; HDR_LEN];
        // 12 + 188 bytes: four 64-byte buffers, and the guest posted two.
        let big = [0xabu8; 188];
        {
            let mut st = vring.get_mut();
            assert!(!write_frame(&mut st, &*mem.memory(), &[&hdr, &big], true));
            assert_eq!(st.get_queue().next_avail(), 0, "both chains given back");
        }
        assert_eq!(
            used_idx(&mem, &vring),
            0,
            "no empty frame handed to the guest"
        );
        // 12 + 100 bytes fit the two buffers the guest still has.
        let small = [0xcdu8; 100];
        {
            let mut st = vring.get_mut();
            assert!(write_frame(&mut st, &*mem.memory(), &[&hdr, &small], true));
            assert_eq!(st.get_queue().next_avail(), 2);
        }
        assert_eq!(used_idx(&mem, &vring), 2);
        let m = mem.memory();
        let num_buffers = m
            .read_obj::<u16>(GuestAddress(0x10_0000 + 10))
            .expect("header");
        assert_eq!(num_buffers, 2, "num_buffers counts both buffers");
        let last = m
            .read_obj::<u8>(GuestAddress(0x10_0100 + 47))
            .expect("tail");
        assert_eq!(last, 0xcd, "the frame's last byte in the second buffer");
    }

    /// The element the used ring holds at `i`: (chain head, bytes written).
    fn used_elem(mem: &backend::Mem, vring: &VringMutex<backend::Mem>, i: u64) -> (u32, u32) {
        let used = vring.get_mut().get_queue().used_ring();
        let m = mem.memory();
        let at = |o: u64| m.read_obj::<u32>(GuestAddress(used + 4 + 8 * i + o));
        (at(0).expect("id"), at(4).expect("len"))
    }

    /// What a burst of `max` frames takes from `st`: the frames' lengths.
    fn take_all(
        st: &mut vhost_user_backend::VringState<backend::Mem>,
        mem: &backend::Mem,
        max: usize,
        stats: &mut PortStats,
    ) -> Vec<usize> {
        let (mut read, mut pending) = (vec![0u8; MAX_READ], None);
        let mut frames = Vec::new();
        take_sent(
            st,
            &*mem.memory(),
            &mut read,
            &mut pending,
            (HDR_LEN, max),
            stats,
            |_, _, f, _| {
                frames.push(f.len());
                Received::Frames(1)
            },
        );
        frames
    }

    #[test]
    fn a_guest_posting_bad_chains_cannot_hold_the_burst() {
        // Sixteen chains of one 4-byte descriptor, each too short for a
        // frame: a burst of four pops four, whatever else is posted.
        let descs: Vec<RawDescriptor> = (0..16).flat_map(|i| chain(i, 1, 4, false)).collect();
        let (mem, vring) = queue(16, &descs);
        let mut stats = PortStats::default();
        let mut st = vring.get_mut();
        assert!(take_all(&mut st, &mem, 4, &mut stats).is_empty());
        assert_eq!(st.get_queue().next_avail(), 4, "a burst's worth of chains");
        assert_eq!(stats.dropped, 4);
        assert!(take_all(&mut st, &mem, 4, &mut stats).is_empty());
        assert_eq!(st.get_queue().next_avail(), 8);
    }

    #[test]
    fn a_chain_of_more_descriptors_than_any_frame_needs_is_dropped() {
        // 64 descriptors of 2 bytes (a header and a 116-byte frame), then
        // 65 of them.
        let mut descs = chain(0, 64, 2, false);
        descs.extend(chain(64, 65, 2, false));
        let (mem, vring) = queue(256, &descs);
        let mut stats = PortStats::default();
        let mut st = vring.get_mut();
        assert_eq!(take_all(&mut st, &mem, 8, &mut stats), [128 - HDR_LEN]);
        assert_eq!(stats.dropped, 1);
        assert_eq!(st.get_queue().next_avail(), 2, "both chains handed back");
    }

    #[test]
    fn a_receive_chain_of_too_many_descriptors_is_handed_back_empty() {
        // 64 empty descriptors, then one of 256 bytes: the frame would fit
        // the last one, but the chain is not walked that far.
        let mut descs = chain(0, 66, 0, true);
        descs[65] = RawDescriptor::from(Descriptor::new(
            0x10_0000 + 65 * 0x100,
            256,
            VRING_DESC_F_WRITE as u16,
            0,
        ));
        let (mem, vring) = queue(256, &descs);
        let (hdr, frame) = ([0u8; HDR_LEN], [0xabu8; 100]);
        {
            let mut st = vring.get_mut();
            assert!(!write_frame(&mut st, &*mem.memory(), &[&hdr, &frame], true));
        }
        assert_eq!(used_idx(&mem, &vring), 1, "handed back");
        assert_eq!(used_elem(&mem, &vring, 0), (0, 0), "empty");
    }

    /// A vhost-user socket of `pairs` queue pairs in a fresh directory,
    /// once its control thread published its first (not yet connected)
    /// connection: no guest comes, so the link's generation holds from
    /// then on.
    fn listening(pairs: u16) -> (tempfile::TempDir, VhostUserSocket) {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket =
            VhostUserSocket::listen("vm", &dir.path().join("vm.sock"), pairs).expect("listen");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while socket.link.generation.load(Ordering::Acquire) == 0
            && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        (dir, socket)
    }

    /// An idle worker's wait on a vhost-user port (`Port::wait_fds`) ends
    /// when the guest kicks its transmit queue while the worker is armed,
    /// and not otherwise: a kick while the worker is busy rings nothing,
    /// and a burst disarms it and reads what rang.
    #[test]
    fn a_guest_kick_ends_a_waiting_workers_wait_and_only_then() {
        use crate::wait::{self, readable, Waited};
        use std::time::Duration;
        let (_dir, socket) = listening(2);
        let mut port = socket.port(1).expect("port");
        let (bell, other) = (&socket.link.bells[1], &socket.link.bells[0]);
        let quiet = Duration::from_millis(30);
        let (mut pool, mut rx) = (MbufPool::new(16), Vec::new());
        // A port that has not read the link's connection yet (none, or a
        // new guest's) rings itself: its first wait ends at once.
        let mut fds = Vec::new();
        assert!(
            port.wait_fds(&mut fds),
            "a vhost-user port can be waited on"
        );
        assert_eq!(fds.len(), 1);
        assert_eq!(readable(&fds, quiet), Waited::Readable);
        drop(fds);
        // A burst takes the connection, and reads what rang.
        assert_eq!(port.rx_burst(&mut pool, &mut rx, 64, 0), 0);
        // Busy: a kick rings nothing.
        bell.kicked();
        assert_eq!(wait::port(&port, quiet), Some(Waited::TimedOut));
        // Armed (a wait arms it, and it stays armed until a burst): another
        // pair's kick does not ring it, its own does.
        other.kicked();
        assert_eq!(wait::port(&port, quiet), Some(Waited::TimedOut));
        bell.kicked();
        let woke = wait::port(&port, Duration::from_secs(5));
        assert_eq!(woke, Some(Waited::Readable));
        // A burst (no guest attached: nothing to read) settles it: what rang
        // is read, and kicks ring nothing until it is armed again.
        assert_eq!(port.rx_burst(&mut pool, &mut rx, 64, 0), 0);
        bell.kicked();
        assert_eq!(wait::port(&port, quiet), Some(Waited::TimedOut));
    }

    /// A connection whose pair 0 transmit queue (vring 1) has `chains`
    /// one-descriptor chains posted by the guest, enabled and ready.
    fn posted(chains: u16) -> Arc<Conn> {
        let descs: Vec<RawDescriptor> = (0..chains).flat_map(|i| chain(i, 1, 64, false)).collect();
        let (mem, tx) = queue(16, &descs);
        tx.get_mut().set_enabled(true);
        // Pair 0's receive queue, which the look does not read.
        let rx = VringMutex::new(mem.clone(), 16).expect("vring");
        Arc::new(Conn {
            mem,
            vrings: vec![rx.into(), tx.into()],
            features: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        })
    }

    /// Arming comes before the worker's last look at the guest's transmit
    /// ring: chains the guest posted since the last burst end the wait at
    /// once (their kick may have come before the worker armed); an empty
    /// ring leaves it to the kick.
    #[test]
    fn chains_posted_before_the_wait_end_it_at_once() {
        use crate::wait::{self, Waited};
        use std::time::Duration;
        let (_dir, socket) = listening(1);
        for (chains, want) in [(2, Waited::Readable), (0, Waited::TimedOut)] {
            let mut port = socket.port(0).expect("port");
            port.conn = Some(posted(chains));
            port.generation = socket.link.generation.load(Ordering::Acquire);
            assert_eq!(
                wait::port(&port, Duration::from_millis(100)),
                Some(want),
                "{chains} chains posted"
            );
            socket.link.bells[0].settle();
        }
    }
}
