//! One AF_XDP socket with its own UMEM and its four rings, set up in the
//! order the kernel requires: register the UMEM, size the rings, map them,
//! prime FILL, bind to (interface, queue).
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::os::fd::OwnedFd;

use super::ring::Ring;
use crate::sys::{self, getsockopt, setsockopt, sys_err, zeroed, Mmap};
use crate::IoError;

/// UMEM frames per socket: the first [`RX_FRAMES`] circulate through
/// FILL → RX, the rest through TX → COMPLETION.
pub(crate) const FRAMES: u32 = RX_FRAMES + TX_FRAMES;
/// Frames owned by the receive side; also the FILL and RX ring sizes, so
/// FILL can always take back every frame.
pub(crate) const RX_FRAMES: u32 = 2048;
/// Frames owned by the transmit side; also the TX and COMPLETION ring
/// sizes, so COMPLETION can never overflow.
pub(crate) const TX_FRAMES: u32 = 2048;
/// `XDP_PACKET_HEADROOM`: in copy mode the kernel writes a received frame
/// this far into its chunk, which bounds the receivable frame size.
pub(crate) const XDP_PACKET_HEADROOM: u32 = 256;
/// `XDP_MAX_TX_SKB_BUDGET` (Linux 6.17): descriptors one copy-mode
/// `sendto` may process. Older kernels fix it at 32 and refuse the option.
const XDP_MAX_TX_SKB_BUDGET: c_int = 9;

/// A bound AF_XDP socket. Field order is drop order: rings, socket, UMEM.
pub(crate) struct Xsk {
    pub(crate) fill: Ring<u64>,
    pub(crate) comp: Ring<u64>,
    pub(crate) rx: Ring<libc::xdp_desc>,
    pub(crate) tx: Ring<libc::xdp_desc>,
    pub(crate) fd: OwnedFd,
    umem: Mmap,
    pub(crate) frame_size: u32,
}

impl Xsk {
    /// Creates the socket and UMEM, and binds them to `queue` of
    /// `ifindex`, with `XDP_ZEROCOPY` or `XDP_COPY`, always with
    /// `XDP_USE_NEED_WAKEUP`.
    pub(crate) fn open(
        ifname: &str,
        ifindex: u32,
        queue: u32,
        frame_size: u32,
        zerocopy: bool,
    ) -> Result<Xsk, IoError> {
        let e = |call| move |err| sys_err(ifname, call, err);
        let umem =
            Mmap::anonymous(FRAMES as usize * frame_size as usize).map_err(e("mmap(UMEM)"))?;
        let fd = sys::socket(libc::AF_XDP, libc::SOCK_RAW, 0).map_err(e("socket(AF_XDP)"))?;

        let reg = libc::xdp_umem_reg {
            addr: umem.ptr() as u64,
            len: umem.len() as u64,
            chunk_size: frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
            .map_err(e("setsockopt(XDP_UMEM_REG)"))?;
        let size = |name: c_int, n: u32, call: &'static str| {
            setsockopt(&fd, libc::SOL_XDP, name, &(n as c_int)).map_err(e(call))
        };
        size(
            libc::XDP_UMEM_FILL_RING,
            RX_FRAMES,
            "setsockopt(XDP_UMEM_FILL_RING)",
        )?;
        size(
            libc::XDP_UMEM_COMPLETION_RING,
            TX_FRAMES,
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        )?;
        size(libc::XDP_RX_RING, RX_FRAMES, "setsockopt(XDP_RX_RING)")?;
        size(libc::XDP_TX_RING, TX_FRAMES, "setsockopt(XDP_TX_RING)")?;
        // Best effort: one kick may then send a whole burst in copy mode.
        let _ = size(
            XDP_MAX_TX_SKB_BUDGET,
            TX_FRAMES,
            "setsockopt(XDP_MAX_TX_SKB_BUDGET)",
        );

        let off: libc::xdp_mmap_offsets = getsockopt(&fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)
            .map_err(e("getsockopt(XDP_MMAP_OFFSETS)"))?;
        let mut fill = Ring::<u64>::map(
            &fd,
            &off.fr,
            RX_FRAMES,
            libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t,
            true,
        )
        .map_err(e("mmap(XDP_UMEM_PGOFF_FILL_RING)"))?;
        let comp = Ring::<u64>::map(
            &fd,
            &off.cr,
            TX_FRAMES,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING as libc::off_t,
            false,
        )
        .map_err(e("mmap(XDP_UMEM_PGOFF_COMPLETION_RING)"))?;
        let rx = Ring::<libc::xdp_desc>::map(
            &fd,
            &off.rx,
            RX_FRAMES,
            libc::XDP_PGOFF_RX_RING as libc::off_t,
            false,
        )
        .map_err(e("mmap(XDP_PGOFF_RX_RING)"))?;
        let tx = Ring::<libc::xdp_desc>::map(
            &fd,
            &off.tx,
            TX_FRAMES,
            libc::XDP_PGOFF_TX_RING as libc::off_t,
            true,
        )
        .map_err(e("mmap(XDP_PGOFF_TX_RING)"))?;

        // Give the kernel every receive frame before any packet can arrive.
        let n = fill.free(RX_FRAMES).min(RX_FRAMES);
        for i in 0..n {
            fill.write(i, u64::from(i) * u64::from(frame_size));
        }
        fill.submit(n);

        let mut sxdp: libc::sockaddr_xdp = zeroed();
        sxdp.sxdp_family = libc::AF_XDP as u16;
        sxdp.sxdp_flags = (if zerocopy {
            libc::XDP_ZEROCOPY
        } else {
            libc::XDP_COPY
        }) | libc::XDP_USE_NEED_WAKEUP;
        sxdp.sxdp_ifindex = ifindex;
        sxdp.sxdp_queue_id = queue;
        sys::bind(&fd, &sxdp).map_err(e(if zerocopy {
            "bind(AF_XDP, XDP_ZEROCOPY)"
        } else {
            "bind(AF_XDP, XDP_COPY)"
        }))?;

        Ok(Xsk {
            fill,
            comp,
            rx,
            tx,
            fd,
            umem,
            frame_size,
        })
    }

    /// Address of the first transmit frame.
    pub(crate) fn first_tx_frame(&self) -> u64 {
        u64::from(RX_FRAMES) * u64::from(self.frame_size)
    }

    /// The start of the chunk holding UMEM address `addr`.
    #[inline]
    pub(crate) fn chunk_of(&self, addr: u64) -> u64 {
        addr - addr % u64::from(self.frame_size)
    }

    /// `len` bytes of UMEM at `addr`, or `None` if that leaves the UMEM.
    ///
    /// # Safety
    ///
    /// The frame must be owned by user space: consumed from RX and not yet
    /// returned to FILL, so the kernel does not write it meanwhile.
    #[inline]
    pub(crate) unsafe fn frame(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(addr).ok()?;
        let end = start.checked_add(len)?;
        if end > self.umem.len() {
            return None;
        }
        // SAFETY: `start..end` lies inside the UMEM mapping, which lives as
        // long as `self`; the caller guarantees the kernel is not writing it.
        Some(unsafe { std::slice::from_raw_parts(self.umem.ptr().add(start), len) })
    }

    /// Writable `len` bytes of UMEM at `addr`, or `None` if that leaves
    /// the UMEM.
    ///
    /// # Safety
    ///
    /// The frame must be owned by user space: taken from the transmit free
    /// list (never on TX, or back from COMPLETION), so the kernel neither
    /// reads nor writes it meanwhile.
    #[inline]
    pub(crate) unsafe fn frame_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let start = usize::try_from(addr).ok()?;
        let end = start.checked_add(len)?;
        if end > self.umem.len() {
            return None;
        }
        // SAFETY: `start..end` lies inside the UMEM mapping, borrowed
        // mutably through `&mut self`; the caller guarantees the kernel does
        // not touch it.
        Some(unsafe { std::slice::from_raw_parts_mut(self.umem.ptr().add(start), len) })
    }

    /// The kernel's drop counters for this socket.
    pub(crate) fn statistics(&self) -> Option<libc::xdp_statistics> {
        getsockopt(&self.fd, libc::SOL_XDP, libc::XDP_STATISTICS).ok()
    }
}
