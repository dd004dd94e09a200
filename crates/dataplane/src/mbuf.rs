//! Packet buffers and their pool.
//!
//! An [`Mbuf`] owns one fixed-size buffer with [`HEADROOM`] bytes in front of
//! the frame, so the pipeline can push an 802.1Q tag or a longer L2 header
//! without moving the payload. Buffers circulate between the driver, the
//! pipeline and the [`MbufPool`]; after warm-up nothing on the per-packet path
//! allocates.
//!
//! A super-frame (a TCP or UDP send of up to 64 KiB that the sender left
//! for the link to cut, [`Offload`]) longer than a buffer is carried whole
//! in a *large* buffer ([`MbufPool::get_large`]), so that it crosses the
//! pipeline as one frame (one lookup, one TTL update) where it would
//! otherwise be cut into several. A large buffer is an [`Mbuf`] like any
//! other, its bytes [`MAX_SUPER_FRAME`] long: the buffer's length travels
//! in the [`Mbuf`] itself (a slice's), so an access to an ordinary
//! buffer's frame costs what it did when every buffer had one size.

/// Bytes reserved in front of a received frame (room for L2 rewrites).
pub const HEADROOM: usize = 128;
/// Largest frame a buffer holds: a 9000-byte jumbo MTU plus Ethernet, one
/// VLAN tag and slack, rounded to 9216 as NICs commonly do.
pub const MAX_FRAME: usize = 9216;
const CAPACITY: usize = HEADROOM + MAX_FRAME;
/// Largest frame a large buffer holds: a 64 KiB IP packet (what veth, TAP
/// and virtio-net send as one super-frame without BIG TCP) behind an
/// Ethernet header with two VLAN tags, rounded up to whole cache lines.
pub const MAX_SUPER_FRAME: usize = 65_536 + 64;
const LARGE_CAPACITY: usize = HEADROOM + MAX_SUPER_FRAME;
/// Large buffers one pool makes at most: enough for a few bursts of
/// super-frames in flight on every port; past it, a super-frame is cut
/// into ordinary buffers as before. Counted over the pool's life: a large
/// buffer that another pool keeps for good is not made again.
pub const MAX_LARGE: usize = 256;
/// How far back from its end [`MbufPool::get_large`] looks in the free
/// list for a large buffer returned with [`MbufPool::put_all`], once all
/// [`MAX_LARGE`] are made: a burst's worth and more, at a bounded cost.
const LARGE_SCAN: usize = 64;

/// One packet buffer: a pointer to its metadata and bytes and the bytes'
/// length, so handing a frame from stage to stage, queue to queue and
/// back to the pool moves sixteen bytes. `data()` is the frame, starting
/// at its Ethernet header; the metadata (`m.port`, `m.iface`, ...) is the
/// buffer's, reached through `Deref`.
pub struct Mbuf(Box<Block<[u8]>>);

/// What an [`Mbuf`] points at: its metadata, then headroom and frame, in
/// one allocation (the layout of DPDK's `rte_mbuf`). The metadata fills the
/// first cache line; the frame starts [`HEADROOM`] bytes into the next.
/// `B` is `[u8; N]` when a buffer is made, `[u8]` once it is one.
#[repr(C)]
struct Block<B: ?Sized> {
    meta: Buffer,
    buf: B,
}

/// A buffer's metadata: one cache line.
#[repr(C, align(64))]
pub struct Buffer {
    head: usize,
    len: usize,
    /// Port the frame arrived on, or leaves by.
    pub port: u16,
    /// Interface the frame belongs to, once demux has run.
    pub iface: u16,
    /// Offset of the L3 header inside `data()` (14, or 18 with a VLAN tag).
    pub l3_off: u16,
    /// Built by the router itself (an ICMP error, reply or probe) rather than forwarded.
    pub local_origin: bool,
    /// Checksum and segmentation work the sender left to the link
    /// ([`crate::offload`]); [`Offload::NONE`] for an ordinary frame.
    pub offload: Offload,
}

/// What a frame's sender left undone for the link to finish, as a
/// virtio-net header says it (virtio 1.2 §5.1.6, "Packet Transmission"):
/// the transport checksum, and the cutting of a super-frame into
/// segments. Offsets count from the L3 header, not the frame, so L2
/// rewrites (a tag pushed or popped) leave them valid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    /// The transport checksum is partial (`VIRTIO_NET_HDR_F_NEEDS_CSUM`):
    /// its field holds the pseudo-header's folded sum, and the ones'
    /// complement sum from `csum_start` to the end still has to go there.
    pub partial: bool,
    /// How the super-frame is cut; [`Gso::None`] for a frame that leaves
    /// as it is.
    pub gso: Gso,
    /// Transport payload bytes per segment (the MSS for TCP); 0 without GSO.
    pub gso_size: u16,
    /// Where the checksummed range starts: the transport header, in bytes
    /// from the L3 header.
    pub csum_start: u16,
    /// Where the checksum field sits, in bytes from `csum_start` (16 for
    /// TCP, 6 for UDP).
    pub csum_offset: u16,
}

/// The segmentation a super-frame asks for (`VIRTIO_NET_HDR_GSO_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Gso {
    /// Not a super-frame.
    #[default]
    None,
    /// TCP over IPv4 (TSO4): segments of `gso_size` payload bytes, each
    /// with its own sequence number and IPv4 identification.
    Tcp4,
    /// TCP over IPv6 (TSO6).
    Tcp6,
    /// UDP segmentation (USO, `VIRTIO_NET_HDR_GSO_UDP_L4`): each segment a
    /// datagram of its own, over either family.
    Udp,
}

impl Offload {
    /// Nothing left to do.
    pub const NONE: Offload = Offload {
        partial: false,
        gso: Gso::None,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
    };

    /// Whether anything is left for the link.
    #[inline(always)]
    pub fn any(&self) -> bool {
        self.partial || self.gso != Gso::None
    }
}

// The frame's bytes start on the line after the metadata's.
const _: () = assert!(std::mem::offset_of!(Block<[u8; 8]>, buf) == 64);

impl std::ops::Deref for Mbuf {
    type Target = Buffer;

    #[inline(always)]
    fn deref(&self) -> &Buffer {
        &self.0.meta
    }
}

impl std::ops::DerefMut for Mbuf {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Buffer {
        &mut self.0.meta
    }
}

impl Mbuf {
    /// A buffer of `N` bytes, headroom included: [`CAPACITY`], or
    /// [`LARGE_CAPACITY`] for a large one ([`MbufPool::get_large`]).
    fn with<const N: usize>() -> Self {
        Mbuf(Box::new(Block {
            meta: Buffer::EMPTY,
            buf: [0u8; N],
        }))
    }

    /// Resets metadata and leaves an empty frame at the default headroom.
    #[inline]
    pub fn reset(&mut self) {
        // Field by field: copying `Buffer::EMPTY` whole writes its padding
        // too, four more instructions a packet.
        let b = &mut self.0.meta;
        b.head = HEADROOM;
        b.len = 0;
        b.port = 0;
        b.iface = 0;
        b.l3_off = 0;
        b.local_origin = false;
        b.offload = Offload::NONE;
    }

    /// The L3 packet: the frame from `l3_off` on.
    #[inline]
    pub fn l3(&self) -> &[u8] {
        let Block { meta: b, buf } = &*self.0;
        &buf[b.head + b.l3_off as usize..b.head + b.len]
    }

    /// The L3 packet, writable.
    #[inline]
    pub fn l3_mut(&mut self) -> &mut [u8] {
        let Block { meta: b, buf } = &mut *self.0;
        &mut buf[b.head + b.l3_off as usize..b.head + b.len]
    }

    /// Whether this is a large buffer ([`MbufPool::get_large`]).
    #[inline]
    pub fn is_large(&self) -> bool {
        self.0.buf.len() > CAPACITY
    }

    /// The longest frame this buffer holds: [`MAX_FRAME`], or
    /// [`MAX_SUPER_FRAME`] for a large buffer.
    #[inline]
    pub fn max_frame(&self) -> usize {
        self.0.buf.len() - HEADROOM
    }

    /// Marks the frame as received on interface `iface` (not built by the
    /// router), its L3 header `l3_off` bytes in: what demux sets. The three
    /// fields are written through one borrow of the buffer, so a loop over
    /// a burst does not reload the buffer's address between them.
    #[inline(always)]
    pub fn set_received(&mut self, iface: u16, l3_off: u16) {
        let b = &mut self.0.meta;
        b.iface = iface;
        b.l3_off = l3_off;
        b.local_origin = false;
    }

    /// The frame.
    #[inline]
    pub fn data(&self) -> &[u8] {
        let Block { meta: b, buf } = &*self.0;
        &buf[b.head..b.head + b.len]
    }

    /// The frame, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let Block { meta: b, buf } = &mut *self.0;
        &mut buf[b.head..b.head + b.len]
    }

    /// Bytes free in front of the frame.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.0.meta.head
    }

    /// Frame length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.meta.len
    }

    /// True when the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.meta.len == 0
    }

    /// Replaces the frame with a copy of `frame`, truncated to
    /// [`Mbuf::max_frame`]. Returns the number of bytes kept.
    pub fn fill(&mut self, frame: &[u8]) -> usize {
        let n = frame.len().min(self.max_frame());
        self.set_len_from_start(n).copy_from_slice(&frame[..n]);
        n
    }

    /// Replaces the frame with the first `len` bytes of `lines`, copied as
    /// whole 64-byte lines the way a NIC's DMA writes them: `lines` is the
    /// frame padded to a multiple of 64 bytes. The first line is a
    /// fixed-size copy with no call (a minimum-size frame needs no other);
    /// falls back to [`Mbuf::fill`] for anything else.
    #[inline]
    pub fn fill_lines(&mut self, lines: &[u8], len: usize) {
        let whole = lines
            .split_first_chunk::<64>()
            .filter(|(_, rest)| rest.len().is_multiple_of(64))
            .filter(|_| lines.len() <= MAX_FRAME && len <= lines.len());
        let Some((first, rest)) = whole else {
            self.fill(&lines[..len.min(lines.len())]);
            return;
        };
        // Every buffer holds MAX_FRAME: one bounds check, no clamp.
        let Block { meta, buf } = &mut *self.0;
        let (head, tail) = buf[HEADROOM..HEADROOM + lines.len()].split_at_mut(64);
        head.copy_from_slice(first);
        if !rest.is_empty() {
            tail.copy_from_slice(rest);
        }
        (meta.head, meta.len) = (HEADROOM, len);
    }

    /// Sets the frame to `len` bytes from the default headroom and returns
    /// them for writing (contents are whatever the buffer held).
    #[inline]
    pub fn set_len_from_start(&mut self, len: usize) -> &mut [u8] {
        let Block { meta: b, buf } = &mut *self.0;
        let n = len.min(buf.len() - HEADROOM);
        b.head = HEADROOM;
        b.len = n;
        &mut buf[HEADROOM..HEADROOM + n]
    }

    /// The whole buffer from its start, headroom included, for a driver
    /// that reads a frame straight into it (then [`Mbuf::set_frame`]).
    #[inline]
    pub fn raw_mut(&mut self) -> &mut [u8] {
        &mut self.0.buf
    }

    /// Makes bytes `head..head + len` of [`Mbuf::raw_mut`] the frame.
    /// Returns false, changing nothing, when they do not lie inside the
    /// buffer.
    #[inline]
    pub fn set_frame(&mut self, head: usize, len: usize) -> bool {
        let Block { meta: b, buf } = &mut *self.0;
        if head.checked_add(len).is_none_or(|end| end > buf.len()) {
            return false;
        }
        (b.head, b.len) = (head, len);
        true
    }

    /// Shortens the frame to `len` bytes (drops Ethernet padding).
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.0.meta.len = self.0.meta.len.min(len);
    }

    /// Moves the frame start by `delta` bytes: negative grows the front
    /// (uses headroom), positive trims it. Returns false, changing nothing,
    /// when the headroom or the frame is too short.
    #[inline]
    pub fn adjust_head(&mut self, delta: isize) -> bool {
        let Block { meta: b, buf } = &mut *self.0;
        let new_head = b.head as isize + delta;
        let new_len = b.len as isize - delta;
        if new_head < 0 || new_len < 0 || new_head as usize + new_len as usize > buf.len() {
            return false;
        }
        b.head = new_head as usize;
        b.len = new_len as usize;
        true
    }
}

impl Buffer {
    const EMPTY: Buffer = Buffer {
        head: HEADROOM,
        len: 0,
        port: 0,
        iface: 0,
        l3_off: 0,
        local_origin: false,
        offload: Offload::NONE,
    };
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.len())
            .field("port", &self.port)
            .field("iface", &self.iface)
            .finish()
    }
}

/// A free list of buffers. `get` only allocates when the pool is empty,
/// which a correctly sized pool never is once warm.
pub struct MbufPool {
    free: Vec<Mbuf>,
    allocated: usize,
    /// Large buffers not in use ([`MbufPool::get_large`]).
    large: Vec<Mbuf>,
    /// Large buffers made over the pool's life, at most [`MAX_LARGE`].
    large_made: usize,
}

impl MbufPool {
    /// A pool holding `n` ready buffers.
    pub fn new(n: usize) -> Self {
        MbufPool {
            free: (0..n).map(|_| Mbuf::with::<CAPACITY>()).collect(),
            allocated: n,
            large: Vec::new(),
            large_made: 0,
        }
    }

    /// Takes a buffer, reset: an ordinary one (a large buffer returned to
    /// the pool is set aside here for [`MbufPool::get_large`]).
    #[inline]
    pub fn get(&mut self) -> Mbuf {
        match self.free.pop() {
            Some(mut m) if !m.is_large() => {
                m.reset();
                m
            }
            popped => self.get_other(popped),
        }
    }

    /// [`MbufPool::get`] when the free list is empty or its last buffer is
    /// a large one.
    #[cold]
    fn get_other(&mut self, mut popped: Option<Mbuf>) -> Mbuf {
        while let Some(m) = popped {
            if !m.is_large() {
                let mut m = m;
                m.reset();
                return m;
            }
            self.large.push(m);
            popped = self.free.pop();
        }
        self.allocated += 1;
        Mbuf::with::<CAPACITY>()
    }

    /// Takes a large buffer, reset, that holds a frame of up to
    /// [`MAX_SUPER_FRAME`] bytes; `None` once the pool has made
    /// [`MAX_LARGE`] and none is free.
    pub fn get_large(&mut self) -> Option<Mbuf> {
        let mut m = match self.large.pop() {
            Some(m) => m,
            None if self.large_made < MAX_LARGE => {
                self.large_made += 1;
                Mbuf::with::<LARGE_CAPACITY>()
            }
            // Returned with `put_all`, not yet set aside by `get`: among
            // the buffers returned last.
            None => {
                let recent = self.free.len().saturating_sub(LARGE_SCAN);
                let at = self.free[recent..].iter().rposition(Mbuf::is_large)?;
                self.free.swap_remove(recent + at)
            }
        };
        m.reset();
        Some(m)
    }

    /// A buffer that holds a frame of `len` bytes: an ordinary one, or a
    /// large one for a longer frame; `None` when none is left
    /// ([`MbufPool::get_large`]) or `len` is longer than any.
    #[inline]
    pub fn get_fitting(&mut self, len: usize) -> Option<Mbuf> {
        match len {
            0..=MAX_FRAME => Some(self.get()),
            _ if len <= MAX_SUPER_FRAME => self.get_large(),
            _ => None,
        }
    }

    /// Large buffers made over the pool's life.
    pub fn large_made(&self) -> usize {
        self.large_made
    }

    /// Returns a buffer (a large one where [`MbufPool::get_large`] finds
    /// it first).
    #[inline]
    pub fn put(&mut self, m: Mbuf) {
        match m.is_large() {
            false => self.free.push(m),
            true => self.large.push(m),
        }
    }

    /// Returns every buffer of `v`, leaving it empty (one copy of the
    /// pointers, not a push per buffer).
    #[inline]
    pub fn put_all(&mut self, v: &mut Vec<Mbuf>) {
        self.free.append(v);
    }

    /// Buffers created over the pool's life.
    pub fn allocated(&self) -> usize {
        self.allocated
    }

    /// Buffers currently free.
    pub fn available(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_adjust_respects_bounds() {
        let mut pool = MbufPool::new(1);
        let mut m = pool.get();
        m.fill(&[1, 2, 3, 4]);
        assert!(m.adjust_head(-4));
        assert_eq!(m.len(), 8);
        assert!(m.adjust_head(8));
        assert!(m.is_empty());
        assert!(!m.adjust_head(1));
        assert!(!m.adjust_head(-(CAPACITY as isize)));
    }

    #[test]
    fn fill_lines_copies_the_frame_not_the_padding() {
        let mut pool = MbufPool::new(1);
        let mut m = pool.get();
        let mut lines = [0u8; 128];
        lines[..70].fill(7);
        lines[70..].fill(9);
        m.fill_lines(&lines, 70);
        assert_eq!(m.data(), &[7u8; 70][..]);
        // Not padded to whole lines: copied as by `fill`.
        m.fill_lines(&lines[..100], 90);
        assert_eq!(m.len(), 90);
        assert_eq!(&m.data()[70..], &[9u8; 20][..]);
        // A length past the lines is cut to them.
        m.fill_lines(&lines[..64], 100);
        assert_eq!(m.len(), 64);
    }

    #[test]
    fn fill_truncates_oversized_frames() {
        let mut pool = MbufPool::new(1);
        let mut m = pool.get();
        assert_eq!(m.fill(&vec![0u8; MAX_FRAME + 100]), MAX_FRAME);
    }

    #[test]
    fn a_large_buffer_holds_a_super_frame_and_comes_back() {
        let mut pool = MbufPool::new(2);
        let mut m = pool.get_large().expect("a large buffer");
        assert!(m.is_large());
        assert_eq!(m.max_frame(), MAX_SUPER_FRAME);
        let frame: Vec<u8> = (0..65_550u32).map(|i| i as u8).collect();
        assert_eq!(m.fill(&frame), frame.len());
        assert_eq!(m.data(), &frame[..]);
        assert!(m.adjust_head(-4));
        assert_eq!(&m.data()[4..], &frame[..]);
        assert!(!m.adjust_head(-(LARGE_CAPACITY as isize)));
        m.port = 3;
        pool.put(m);
        // An ordinary get sets it aside; the next large get takes it back,
        // reset, rather than making another.
        let o = pool.get();
        assert!(!o.is_large());
        assert_eq!(o.max_frame(), MAX_FRAME);
        let again = pool.get_large().expect("reused");
        assert_eq!(pool.large_made(), 1);
        assert_eq!(
            (again.len(), again.headroom(), again.port),
            (0, HEADROOM, 0)
        );
    }

    #[test]
    fn large_buffers_stop_at_the_pools_bound() {
        let mut pool = MbufPool::new(0);
        let mut held: Vec<Mbuf> = (0..MAX_LARGE).map_while(|_| pool.get_large()).collect();
        assert_eq!(held.len(), MAX_LARGE);
        assert!(pool.get_large().is_none());
        // Back on the free list, found there without an ordinary get.
        pool.put_all(&mut held);
        assert!(pool.get_large().is_some());
        assert_eq!(pool.large_made(), MAX_LARGE);
        assert!(!pool.get().is_large());
    }

    #[test]
    fn a_fitting_buffer_is_large_only_for_a_long_frame() {
        let mut pool = MbufPool::new(1);
        assert!(!pool.get_fitting(MAX_FRAME).expect("ordinary").is_large());
        assert!(pool.get_fitting(MAX_FRAME + 1).expect("large").is_large());
        assert!(pool.get_fitting(MAX_SUPER_FRAME + 1).is_none());
    }

    #[test]
    fn set_frame_stays_inside_the_buffer() {
        let mut pool = MbufPool::new(1);
        let mut m = pool.get();
        m.raw_mut()[HEADROOM..HEADROOM + 3].copy_from_slice(&[7, 8, 9]);
        assert!(m.set_frame(HEADROOM, 3));
        assert_eq!(m.data(), &[7, 8, 9]);
        assert!(!m.set_frame(HEADROOM, MAX_FRAME + 1));
        assert!(!m.set_frame(usize::MAX, 2));
        assert_eq!(m.data(), &[7, 8, 9]);
    }
}
