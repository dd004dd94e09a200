//! The `tap` port: a TAP device, for control-plane mirrors and labs.
//!
//! `/dev/net/tun` opened non-blocking, `TUNSETIFF` with
//! `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR` (Ethernet frames, no packet-info
//! header, a virtio-net header in front of each), then the interface is
//! brought up. A frame the port *sends* is *received* by the Linux
//! interface (it enters that namespace's stack); a frame the stack sends
//! out of the interface is what the port *receives*.
//!
//! # Offloads
//!
//! Every frame carries a virtio-net header ([`crate::vnet`]) both ways, as
//! on `af_packet`: what the port sends may leave its checksum partial or be
//! a super-frame, and the kernel finishes it (the namespace's stack takes
//! a super-frame whole). What the kernel may hand the port undone is set
//! with `TUNSETOFFLOAD`, and differs by use:
//!
//! - a `tap` port ([`TapPort::create`]) takes everything the header can
//!   describe (`TUN_F_CSUM`, TSO for IPv4 and IPv6 with ECN, USO where the
//!   kernel has it, Linux 6.2): a host's TCP comes in super-frames of up
//!   to 64 KiB, read whole and cut into buffers of at most six segments
//!   ([`offload::segment`], checksums left partial) as `af_packet` does;
//! - a control-plane mirror ([`TapPort::create_multi`]) takes nothing: the
//!   tenant's kernel finishes its own frames (its CPU, not the worker's,
//!   and each frame is held to the interface's MTU by
//!   [`vrhost_dataplane::tap::judge`]).
//!
//! The header flag is the device's, set by whichever queue attaches first
//! ([`TapHold`] asks for the same flags). A device adopted from a run
//! before this (no `IFF_VNET_HDR`, kept alive by a hold) is read with
//! `TUNGETIFF` and used with plain frames, offloads finished in software
//! ([`offload::resolve`]), until it is made anew.
//!
//! # Lifetime
//!
//! A device made by [`TapPort::create`] is not persistent: it disappears
//! when the port is dropped (unless it existed before, made persistent by
//! `ip tuntap add`, as a lab's host link is). Control-plane mirrors
//! ([`TapPort::create_multi`]) are made persistent ([`TapPort::set_persist`]),
//! so that they outlive a restart of vrhost, and a [`TapHold`] keeps their
//! carrier up meanwhile. One `read` or `write` per frame (a super-frame is
//! one, read whole into a large buffer,
//! [`vrhost_dataplane::MbufPool::get_large`], or cut into ordinary ones
//! where none is left); the buffers of a super-frame cut on the way in are joined again
//! on the way out ([`coalesce`]: one `writev`, one skb in the receiving
//! kernel). The device appears in the calling thread's network namespace
//! ([`crate::netns`]).
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::ffi::{c_short, c_uint};
use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use vrhost_dataplane::coalesce;
use vrhost_dataplane::mbuf::{HEADROOM, MAX_FRAME};
use vrhost_dataplane::offload;
use vrhost_dataplane::{Mbuf, MbufPool};

use crate::sys::{self, last_err, sys_err, zeroed};
use crate::{netdev, rx_frame, vnet, IoError, Port, PortStats};

const TUN_PATH: &str = "/dev/net/tun";

/// `TUNSETIFF` flags of every queue and hold: Ethernet, no packet-info
/// header, a virtio-net header.
const FLAGS: c_short = (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as c_short;

/// The largest frame the kernel hands a TAP that takes TSO: a 64 KiB
/// super-frame (`tso_max_size`) with its Ethernet header and a tag.
const MAX_READ: usize = 65_536 + 22;

/// What the kernel may leave undone in the frames it hands the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapOffloads {
    /// Partial checksums and TCP/UDP super-frames (a `tap` port).
    All,
    /// Nothing: the kernel finishes every frame (a control-plane mirror).
    None,
}

/// A TAP device and its file descriptor.
pub struct TapPort {
    fd: OwnedFd,
    name: String,
    stats: PortStats,
    /// Frames carry a virtio-net header both ways (the device has
    /// `IFF_VNET_HDR`).
    vnet: bool,
    /// Spare vector for [`offload::resolve`] (without `vnet`), and for the
    /// buffers a super-frame is received into.
    scratch: Vec<Mbuf>,
    /// Where a super-frame longer than a buffer is read: its first
    /// [`MAX_FRAME`] bytes are read into the buffer and copied here in
    /// front of the rest. Only with [`TapOffloads::All`].
    big: Option<Box<[u8]>>,
    /// A large buffer ([`MbufPool::get_large`]) whose bytes past the first
    /// [`MAX_FRAME`] take the rest of a super-frame instead of `big`: the
    /// frame's head is then copied in front of it and the buffer goes up
    /// the pipeline as it is, where through `big` the whole frame is
    /// copied once more. Taken from the pool again after each super-frame;
    /// `None` (then `big`) while the pool has none left.
    spare: Option<Mbuf>,
    /// Buffers of a super-frame that the last burst had no room for.
    pending: VecDeque<Mbuf>,
}

impl TapPort {
    /// Creates TAP device `name` (a `%d` in it lets the kernel number it),
    /// or attaches to a persistent one of that name, takes every offload
    /// ([`TapOffloads::All`]) and brings it up.
    pub fn create(name: &str) -> Result<Self, IoError> {
        let (fd, actual) = Self::open_queue(name, FLAGS)?;
        let port = Self::ready(fd, actual, TapOffloads::All)?;
        netdev::set_up(&port.name)?;
        Ok(port)
    }

    /// Creates multi-queue TAP device `name` (`IFF_MULTI_QUEUE`) with
    /// `queues` queues, one port per queue, so that each data-plane worker
    /// owns one queue's file descriptor. The kernel spreads what the stack
    /// sends out of the device over the queues by flow hash. The kernel
    /// finishes what it sends ([`TapOffloads::None`]); what the ports send
    /// may be left partial.
    ///
    /// Unlike [`TapPort::create`] the device is left as it is (a new one
    /// **down**): a mirror sets MAC and MTU first and then brings it up
    /// ([`netdev::set_up`]). `name` must be a full name (no `%d`), since
    /// every queue attaches to it by name. When a multi-queue TAP of that
    /// name exists (a persistent one left by an earlier run), the queues
    /// attach to it. Unless made persistent, the device disappears when the
    /// last of the ports is dropped.
    pub fn create_multi(name: &str, queues: usize) -> Result<Vec<Self>, IoError> {
        if queues == 0 {
            return Err(IoError::Setup {
                ifname: name.into(),
                reason: "a TAP device needs at least one queue".into(),
            });
        }
        if name.contains('%') {
            return Err(IoError::Setup {
                ifname: name.into(),
                reason: "a multi-queue TAP needs a full name, not a %d pattern".into(),
            });
        }
        (0..queues)
            .map(|_| {
                let (fd, actual) =
                    Self::open_queue(name, FLAGS | libc::IFF_MULTI_QUEUE as c_short)?;
                Self::ready(fd, actual, TapOffloads::None)
            })
            .collect()
    }

    /// Opens `/dev/net/tun` and attaches it to device `name` with `flags`
    /// (`TUNSETIFF`): the first call creates the device, later ones with
    /// `IFF_MULTI_QUEUE` add a queue to it. Returns the descriptor and the
    /// device's final name (the kernel fills in a `%d`).
    fn open_queue(name: &str, flags: c_short) -> Result<(OwnedFd, String), IoError> {
        let mut req: libc::ifreq = zeroed();
        req.ifr_name = sys::ifname_array(name)?;
        req.ifr_ifru.ifru_flags = flags;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(TUN_PATH)
            .map_err(|e| sys_err(name, "open(/dev/net/tun)", e))?;
        let fd = OwnedFd::from(file);
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, and `req` is
        // a live, writable one.
        let rc = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNSETIFF,
                &mut req as *mut libc::ifreq,
            )
        };
        if rc < 0 {
            return Err(last_err(name, "ioctl(TUNSETIFF)"));
        }
        let end = req
            .ifr_name
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(req.ifr_name.len());
        let actual: String = req.ifr_name[..end]
            .iter()
            .map(|&c| c as u8 as char)
            .collect();
        Ok((fd, actual))
    }

    /// The device's `TUNSETIFF` flags, as the first queue set them.
    fn device_flags(fd: &OwnedFd, name: &str) -> Result<c_short, IoError> {
        let mut req: libc::ifreq = zeroed();
        // SAFETY: TUNGETIFF writes one `struct ifreq`, and `req` is a live,
        // writable one.
        let rc = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNGETIFF,
                &mut req as *mut libc::ifreq,
            )
        };
        if rc < 0 {
            return Err(last_err(name, "ioctl(TUNGETIFF)"));
        }
        // SAFETY: TUNGETIFF filled the flags member of the union.
        Ok(unsafe { req.ifr_ifru.ifru_flags })
    }

    /// Sets the header size and what the kernel may leave undone on a
    /// freshly attached queue, and makes the port.
    fn ready(fd: OwnedFd, name: String, offloads: TapOffloads) -> Result<Self, IoError> {
        let vnet = Self::device_flags(&fd, &name)? & libc::IFF_VNET_HDR as c_short != 0;
        let mut take = offloads;
        if vnet {
            let size = vnet::LEN as libc::c_int;
            // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer,
            // which points at a live one.
            let rc = unsafe {
                libc::ioctl(
                    fd.as_raw_fd(),
                    libc::TUNSETVNETHDRSZ,
                    &size as *const libc::c_int,
                )
            };
            if rc < 0 {
                return Err(last_err(&name, "ioctl(TUNSETVNETHDRSZ)"));
            }
        } else {
            tracing::info!(
                tap = name,
                "TAP device without virtio-net headers (made by an earlier run): plain \
                 frames until it is made anew"
            );
            take = TapOffloads::None;
        }
        let tso = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
        let wanted: &[c_uint] = match take {
            // USO (Linux 6.2) first; an older kernel refuses it.
            TapOffloads::All => &[tso | libc::TUN_F_USO4 | libc::TUN_F_USO6, tso],
            TapOffloads::None => &[0],
        };
        let mut set = Err(last_err(&name, "ioctl(TUNSETOFFLOAD)"));
        for &f in wanted {
            // SAFETY: TUNSETOFFLOAD takes its argument by value (an integer,
            // no pointer); the descriptor is a live TAP queue.
            let rc =
                unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, libc::c_ulong::from(f)) };
            if rc == 0 {
                set = Ok(());
                break;
            }
            set = Err(last_err(&name, "ioctl(TUNSETOFFLOAD)"));
        }
        set?;
        Ok(TapPort {
            fd,
            name,
            stats: PortStats::default(),
            vnet,
            scratch: Vec::new(),
            big: (take == TapOffloads::All).then(|| vec![0u8; MAX_READ].into_boxed_slice()),
            spare: None,
            pending: VecDeque::new(),
        })
    }

    /// Makes the device persistent (`TUNSETPERSIST`): it stays, with its
    /// addresses and routes, when every queue is closed, until it is deleted
    /// (`ip link del`, or [`TapPort::set_persist`] `false` and every queue
    /// closed).
    pub fn set_persist(&self, on: bool) -> Result<(), IoError> {
        // SAFETY: TUNSETPERSIST takes its argument by value (an integer, no
        // pointer); the descriptor is a live TAP queue.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::TUNSETPERSIST,
                libc::c_ulong::from(on),
            )
        };
        if rc < 0 {
            return Err(last_err(&self.name, "ioctl(TUNSETPERSIST)"));
        }
        Ok(())
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether frames carry virtio-net headers (partial checksums and
    /// super-frames pass both ways).
    pub fn offloads(&self) -> bool {
        self.vnet
    }

    /// The device's MAC address.
    pub fn mac(&self) -> Result<[u8; 6], IoError> {
        netdev::mac(&self.name)
    }

    /// Sets the device's MAC (a mirror copies its VR interface's).
    pub fn set_mac(&self, mac: [u8; 6]) -> Result<(), IoError> {
        netdev::set_mac(&self.name, mac)
    }

    /// Sets the device's MTU.
    pub fn set_mtu(&self, mtu: u32) -> Result<(), IoError> {
        netdev::set_mtu(&self.name, mtu)
    }

    /// Reads one frame into `m` (and, for a super-frame longer than a
    /// buffer, `spare` or else `big`). Returns the frame's length and its
    /// header; `None` when nothing is queued or the device is gone or down
    /// (the next burst tries again).
    fn read_one(&mut self, m: &mut Mbuf) -> Option<(usize, [u8; vnet::LEN])> {
        let mut h = [0u8; vnet::LEN];
        let buf = m.set_len_from_start(MAX_FRAME);
        let mut iov = [
            libc::iovec {
                iov_base: h.as_mut_ptr().cast(),
                iov_len: h.len(),
            },
            libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            },
            libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            },
        ];
        let mut n = 2;
        let rest = match (self.spare.as_mut(), self.big.as_mut()) {
            (Some(spare), Some(_)) => spare
                .raw_mut()
                .get_mut(HEADROOM + MAX_FRAME..HEADROOM + MAX_READ),
            (None, Some(big)) => big.get_mut(MAX_FRAME..),
            (_, None) => None,
        };
        if let Some(rest) = rest {
            iov[2] = libc::iovec {
                iov_base: rest.as_mut_ptr().cast(),
                iov_len: rest.len(),
            };
            n = 3;
        }
        let (iov, n) = if self.vnet {
            (&iov[..], n)
        } else {
            (&iov[1..], 1)
        };
        // SAFETY: every iovec points at a live, writable slice of its
        // length (the header, the buffer, the tail of `spare` or `big`),
        // none of which is touched until readv() returns; readv() writes at
        // most their total.
        let got = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), n as libc::c_int) };
        if got <= 0 {
            return None;
        }
        let skip = if self.vnet { vnet::LEN } else { 0 };
        Some(((got as usize).saturating_sub(skip), h))
    }
}

/// One disabled queue of a multi-queue TAP (`TUNSETQUEUE` with
/// `IFF_DETACH_QUEUE`): the kernel steers no frame to it, but while it is
/// open the device keeps its carrier when every other queue closes. Without
/// it, a TAP whose last reader goes (vrhost restarting) loses its carrier,
/// and a routing daemon behind it (FRR's zebra) takes the interface down
/// and drops its BGP sessions at once. It asks for the same flags as the
/// ports, since a device's flags are those of whichever queue attached
/// first.
pub struct TapHold {
    fd: OwnedFd,
    name: String,
}

impl TapHold {
    /// Attaches a queue to the existing multi-queue TAP `name` in the
    /// calling thread's namespace and disables it. A device that does not
    /// exist is an error: a hold never creates one.
    pub fn open(name: &str) -> Result<Self, IoError> {
        netdev::ifindex(name)?;
        let (fd, actual) = TapPort::open_queue(name, FLAGS | libc::IFF_MULTI_QUEUE as c_short)?;
        let mut req: libc::ifreq = zeroed();
        req.ifr_ifru.ifru_flags = libc::IFF_DETACH_QUEUE as c_short;
        // SAFETY: TUNSETQUEUE reads one `struct ifreq`, and `req` is a live one.
        let rc = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNSETQUEUE,
                &mut req as *mut libc::ifreq,
            )
        };
        if rc < 0 {
            return Err(last_err(name, "ioctl(TUNSETQUEUE, IFF_DETACH_QUEUE)"));
        }
        Ok(TapHold { fd, name: actual })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for TapHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TapHold({}, fd {})", self.name, self.fd.as_raw_fd())
    }
}

impl Port for TapPort {
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        let mut n = 0;
        while n < max {
            let Some(m) = self.pending.pop_front() else {
                break;
            };
            rx.push(m);
            n += 1;
        }
        // At most `max` reads a burst, dropped frames included: a flood of
        // frames that are dropped cannot hold the worker here.
        let mut reads = 0;
        while n < max && reads < max {
            reads += 1;
            if self.big.is_some() && self.spare.is_none() {
                self.spare = pool.get_large();
            }
            let mut m = pool.get();
            let Some((len, h)) = self.read_one(&mut m) else {
                pool.put(m);
                break;
            };
            if len <= MAX_FRAME {
                // Checked as every driver checks a frame read straight into
                // its buffer: short, or offloads it cannot carry, dropped.
                m.truncate(len);
                match rx_frame::take(&mut self.stats, m, &h, pool, rx, port_index) {
                    rx_frame::Received::Frames(k) => n += k,
                    _ => self.stats.dropped += 1,
                }
                continue;
            }
            // A super-frame longer than a buffer, its head in `m`: whole in
            // `spare` once the head is copied in front, taken as it lies
            // ([`rx_frame::take`]); else whole in `big`, then taken as every
            // driver takes one ([`rx_frame::receive`]: copied into a large
            // buffer, or cut into ordinary ones). What the burst has no
            // room for waits in `pending`.
            let TapPort {
                big,
                spare,
                pending,
                stats,
                scratch,
                ..
            } = self;
            let got = match (
                spare.take(),
                big.as_mut().and_then(|big| big.get_mut(..len)),
            ) {
                (Some(mut s), _) => {
                    s.raw_mut()[HEADROOM..HEADROOM + MAX_FRAME].copy_from_slice(m.data());
                    if s.set_frame(HEADROOM, len) {
                        rx_frame::take(stats, s, &h, pool, scratch, port_index)
                    } else {
                        pool.put(s);
                        rx_frame::Received::Dropped
                    }
                }
                (None, Some(frame)) => {
                    frame[..MAX_FRAME].copy_from_slice(m.data());
                    let all = (0, usize::MAX);
                    rx_frame::receive(stats, frame, &h, None, pool, scratch, all, port_index)
                }
                (None, None) => rx_frame::Received::Dropped,
            };
            pool.put(m);
            if matches!(got, rx_frame::Received::Dropped) {
                stats.dropped += 1;
            }
            for s in scratch.drain(..) {
                if n < max {
                    rx.push(s);
                    n += 1;
                } else {
                    pending.push_back(s);
                }
            }
        }
        n
    }

    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        _now_ns: u64,
    ) -> Result<(), IoError> {
        if !self.vnet {
            // The device takes plain frames: finish what a peer left.
            self.stats.dropped += offload::resolve(tx, &mut self.scratch, pool);
        }
        let mut result = Ok(());
        let mut i = 0;
        while i < tx.len() {
            // Buffers cut from one super-frame leave as one again
            // ([`coalesce`]): one write, one skb in the receiving kernel.
            let mut n = 1;
            let mut off = tx[i].offload;
            if self.vnet {
                let end = tx.len().min(i + vnet::MAX_JOIN);
                n = coalesce::run(&tx[i..end], 65_535).max(1);
                if n > 1 {
                    match coalesce::merge_head(&mut tx[i..i + n]) {
                        Some(o) => off = o,
                        None => n = 1,
                    }
                }
            }
            let frames = &tx[i..i + n];
            i += n;
            let h = if self.vnet {
                vnet::emit(&off, frames[0].data())
            } else {
                Some([0; vnet::LEN])
            };
            let Some(h) = h else {
                self.stats.dropped += n as u64;
                continue;
            };
            let iov = vnet::joined_iov(&h, frames);
            let used = &iov[usize::from(!self.vnet)..n + 1];
            let len: usize = used.iter().map(|v| v.iov_len).sum();
            // SAFETY: every iovec points at a live slice of its length (the
            // header on the stack, the frames in their buffers, none of
            // which changes before writev() returns) that writev() only
            // reads.
            let rc = unsafe {
                libc::writev(
                    self.fd.as_raw_fd(),
                    used.as_ptr(),
                    used.len() as libc::c_int,
                )
            };
            if rc == len as isize {
                self.stats.tx_packets += n as u64;
                self.stats.tx_bytes += frames.iter().map(|m| m.len() as u64).sum::<u64>();
            } else {
                self.stats.dropped += n as u64;
                if rc < 0 && result.is_ok() {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != ErrorKind::WouldBlock && !sys::is_transient(&e) {
                        result = Err(sys_err(&self.name, "write(tap)", e));
                    }
                }
            }
        }
        for m in tx.drain(..) {
            pool.put(m);
        }
        result
    }

    /// The TAP's file descriptor, readable when the kernel queued a frame.
    fn wait_fds<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) -> bool {
        fds.push(self.fd.as_fd());
        true
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}
