//! Packet buffers and their pool.
//!
//! An [`Mbuf`] owns one fixed-size buffer with [`HEADROOM`] bytes in front of
//! the frame, so the pipeline can push an 802.1Q tag or a longer L2 header
//! without moving the payload. Buffers circulate between the driver, the
//! pipeline and the [`MbufPool`]; after warm-up nothing on the per-packet path
//! allocates.

/// Bytes reserved in front of a received frame (room for L2 rewrites).
pub const HEADROOM: usize = 128;
/// Largest frame a buffer holds: a 9000-byte jumbo MTU plus Ethernet, one
/// VLAN tag and slack, rounded to 9216 as NICs commonly do.
pub const MAX_FRAME: usize = 9216;
const CAPACITY: usize = HEADROOM + MAX_FRAME;

/// One packet buffer: a single pointer to its [`Buffer`], so handing a
/// frame from stage to stage, queue to queue and back to the pool moves
/// eight bytes. `data()` is the frame, starting at its Ethernet header; the
/// metadata (`m.port`, `m.iface`, ...) is the buffer's, reached through
/// `Deref`.
pub struct Mbuf(Box<Buffer>);

/// What an [`Mbuf`] points at: its metadata, then headroom and frame, in one
/// allocation (the layout of DPDK's `rte_mbuf`). The metadata fills the
/// first cache line; the frame starts [`HEADROOM`] bytes into the next.
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
    buf: Bytes,
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

/// Headroom and frame, starting on a cache line.
#[repr(C, align(64))]
struct Bytes([u8; CAPACITY]);

impl std::ops::Deref for Mbuf {
    type Target = Buffer;

    #[inline(always)]
    fn deref(&self) -> &Buffer {
        &self.0
    }
}

impl std::ops::DerefMut for Mbuf {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Buffer {
        &mut self.0
    }
}

impl Mbuf {
    fn new() -> Self {
        Mbuf(Box::new(Buffer {
            head: HEADROOM,
            len: 0,
            port: 0,
            iface: 0,
            l3_off: 0,
            local_origin: false,
            offload: Offload::NONE,
            buf: Bytes([0u8; CAPACITY]),
        }))
    }

    /// Resets metadata and leaves an empty frame at the default headroom.
    #[inline]
    pub fn reset(&mut self) {
        let b = &mut *self.0;
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
        let b = &*self.0;
        &b.buf.0[b.head + b.l3_off as usize..b.head + b.len]
    }

    /// The L3 packet, writable.
    #[inline]
    pub fn l3_mut(&mut self) -> &mut [u8] {
        let b = &mut *self.0;
        &mut b.buf.0[b.head + b.l3_off as usize..b.head + b.len]
    }

    /// Marks the frame as received on interface `iface` (not built by the
    /// router), its L3 header `l3_off` bytes in: what demux sets. The three
    /// fields are written through one borrow of the buffer, so a loop over
    /// a burst does not reload the buffer's address between them.
    #[inline(always)]
    pub fn set_received(&mut self, iface: u16, l3_off: u16) {
        let b = &mut *self.0;
        b.iface = iface;
        b.l3_off = l3_off;
        b.local_origin = false;
    }

    /// The frame.
    #[inline]
    pub fn data(&self) -> &[u8] {
        let b = &*self.0;
        &b.buf.0[b.head..b.head + b.len]
    }

    /// The frame, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let b = &mut *self.0;
        &mut b.buf.0[b.head..b.head + b.len]
    }

    /// Bytes free in front of the frame.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.0.head
    }

    /// Frame length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// True when the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Replaces the frame with a copy of `frame`, truncated to [`MAX_FRAME`].
    /// Returns the number of bytes kept.
    pub fn fill(&mut self, frame: &[u8]) -> usize {
        let n = frame.len().min(MAX_FRAME);
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
        let dst = self.set_len_from_start(lines.len());
        let (head, tail) = dst.split_at_mut(64);
        head.copy_from_slice(first);
        if !rest.is_empty() {
            tail.copy_from_slice(rest);
        }
        self.0.len = len;
    }

    /// Sets the frame to `len` bytes from the default headroom and returns
    /// them for writing (contents are whatever the buffer held).
    #[inline]
    pub fn set_len_from_start(&mut self, len: usize) -> &mut [u8] {
        let b = &mut *self.0;
        let n = len.min(MAX_FRAME);
        b.head = HEADROOM;
        b.len = n;
        &mut b.buf.0[HEADROOM..HEADROOM + n]
    }

    /// Shortens the frame to `len` bytes (drops Ethernet padding).
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.0.len = self.0.len.min(len);
    }

    /// Moves the frame start by `delta` bytes: negative grows the front
    /// (uses headroom), positive trims it. Returns false, changing nothing,
    /// when the headroom or the frame is too short.
    #[inline]
    pub fn adjust_head(&mut self, delta: isize) -> bool {
        let b = &mut *self.0;
        let new_head = b.head as isize + delta;
        let new_len = b.len as isize - delta;
        if new_head < 0 || new_len < 0 || new_head as usize + new_len as usize > CAPACITY {
            return false;
        }
        b.head = new_head as usize;
        b.len = new_len as usize;
        true
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.0.len)
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
}

impl MbufPool {
    /// A pool holding `n` ready buffers.
    pub fn new(n: usize) -> Self {
        MbufPool {
            free: (0..n).map(|_| Mbuf::new()).collect(),
            allocated: n,
        }
    }

    /// Takes a buffer, reset.
    #[inline]
    pub fn get(&mut self) -> Mbuf {
        match self.free.pop() {
            Some(mut m) => {
                m.reset();
                m
            }
            None => {
                self.allocated += 1;
                Mbuf::new()
            }
        }
    }

    /// Returns a buffer.
    #[inline]
    pub fn put(&mut self, m: Mbuf) {
        self.free.push(m);
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
}
