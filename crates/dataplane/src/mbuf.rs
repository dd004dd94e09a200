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

/// One packet buffer. `data()` is the frame, starting at its Ethernet header.
pub struct Mbuf {
    buf: Box<[u8]>,
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
}

impl Mbuf {
    fn new() -> Self {
        Mbuf {
            buf: vec![0u8; CAPACITY].into_boxed_slice(),
            head: HEADROOM,
            len: 0,
            port: 0,
            iface: 0,
            l3_off: 0,
            local_origin: false,
        }
    }

    /// Resets metadata and leaves an empty frame at the default headroom.
    pub fn reset(&mut self) {
        self.head = HEADROOM;
        self.len = 0;
        self.port = 0;
        self.iface = 0;
        self.l3_off = 0;
        self.local_origin = false;
    }

    /// The L3 packet: the frame from `l3_off` on.
    #[inline]
    pub fn l3(&self) -> &[u8] {
        &self.buf[self.head + self.l3_off as usize..self.head + self.len]
    }

    /// The L3 packet, writable.
    #[inline]
    pub fn l3_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.head + self.l3_off as usize..self.head + self.len]
    }

    /// The frame.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.head..self.head + self.len]
    }

    /// The frame, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.head..self.head + self.len]
    }

    /// Frame length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Replaces the frame with a copy of `frame`, truncated to [`MAX_FRAME`].
    /// Returns the number of bytes kept.
    pub fn fill(&mut self, frame: &[u8]) -> usize {
        let n = frame.len().min(MAX_FRAME);
        self.head = HEADROOM;
        self.len = n;
        self.buf[HEADROOM..HEADROOM + n].copy_from_slice(&frame[..n]);
        n
    }

    /// Sets the frame to `len` bytes from the default headroom and returns
    /// them for writing (contents are whatever the buffer held).
    pub fn set_len_from_start(&mut self, len: usize) -> &mut [u8] {
        let n = len.min(MAX_FRAME);
        self.head = HEADROOM;
        self.len = n;
        &mut self.buf[HEADROOM..HEADROOM + n]
    }

    /// Shortens the frame to `len` bytes (drops Ethernet padding).
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Moves the frame start by `delta` bytes: negative grows the front
    /// (uses headroom), positive trims it. Returns false, changing nothing,
    /// when the headroom or the frame is too short.
    #[inline]
    pub fn adjust_head(&mut self, delta: isize) -> bool {
        let new_head = self.head as isize + delta;
        let new_len = self.len as isize - delta;
        if new_head < 0 || new_len < 0 || new_head as usize + new_len as usize > self.buf.len() {
            return false;
        }
        self.head = new_head as usize;
        self.len = new_len as usize;
        true
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.len)
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
    fn fill_truncates_oversized_frames() {
        let mut pool = MbufPool::new(1);
        let mut m = pool.get();
        assert_eq!(m.fill(&vec![0u8; MAX_FRAME + 100]), MAX_FRAME);
    }
}
