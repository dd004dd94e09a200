//! The `tap` port: a TAP device, for control-plane mirrors and labs.
//!
//! `/dev/net/tun` opened non-blocking, `TUNSETIFF` with
//! `IFF_TAP | IFF_NO_PI` (plain Ethernet frames, no packet-info header),
//! then the interface is brought up. A frame the port *sends* is *received*
//! by the Linux interface (it enters that namespace's stack); a frame the
//! stack sends out of the interface is what the port *receives*.
//!
//! A device made by [`TapPort::create`] is not persistent: it disappears
//! when the port is dropped. Control-plane mirrors ([`TapPort::create_multi`])
//! are made persistent ([`TapPort::set_persist`]), so that they outlive a
//! restart of vrhost, and a [`TapHold`] keeps their carrier up meanwhile.
//! One `read` or `write` per frame: TAP exists for control traffic, not
//! line rate. The device appears in the calling thread's network namespace
//! ([`crate::netns`]).
#![allow(unsafe_code)]

use std::ffi::c_short;
use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use vrhost_dataplane::mbuf::MAX_FRAME;
use vrhost_dataplane::{offload, Mbuf, MbufPool};

use crate::sys::{self, last_err, sys_err, zeroed};
use crate::{netdev, IoError, Port, PortStats};

const TUN_PATH: &str = "/dev/net/tun";

/// A TAP device and its file descriptor.
pub struct TapPort {
    fd: OwnedFd,
    name: String,
    stats: PortStats,
    /// Spare vector for [`offload::resolve`].
    scratch: Vec<Mbuf>,
}

impl TapPort {
    /// Creates TAP device `name` (a `%d` in it lets the kernel number it)
    /// and brings it up.
    pub fn create(name: &str) -> Result<Self, IoError> {
        let (fd, actual) = Self::open_queue(name, (libc::IFF_TAP | libc::IFF_NO_PI) as c_short)?;
        netdev::set_up(&actual)?;
        Ok(TapPort {
            fd,
            name: actual,
            stats: PortStats::default(),
            scratch: Vec::new(),
        })
    }

    /// Creates multi-queue TAP device `name` (`IFF_MULTI_QUEUE`) with
    /// `queues` queues, one port per queue, so that each data-plane worker
    /// owns one queue's file descriptor. The kernel spreads what the stack
    /// sends out of the device over the queues by flow hash.
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
        let flags = (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE) as c_short;
        (0..queues)
            .map(|_| {
                let (fd, actual) = Self::open_queue(name, flags)?;
                Ok(TapPort {
                    fd,
                    name: actual,
                    stats: PortStats::default(),
                    scratch: Vec::new(),
                })
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
}

/// One disabled queue of a multi-queue TAP (`TUNSETQUEUE` with
/// `IFF_DETACH_QUEUE`): the kernel steers no frame to it, but while it is
/// open the device keeps its carrier when every other queue closes. Without
/// it, a TAP whose last reader goes (vrhost restarting) loses its carrier,
/// and a routing daemon behind it (FRR's zebra) takes the interface down
/// and drops its BGP sessions at once.
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
        let flags = (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE) as c_short;
        let (fd, actual) = TapPort::open_queue(name, flags)?;
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
            let mut m = pool.get();
            let buf = m.set_len_from_start(MAX_FRAME);
            // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes;
            // read() writes at most that many.
            let got =
                unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if got <= 0 {
                // EAGAIN: nothing queued. EIO and friends: the device is
                // gone or down; the next burst tries again.
                pool.put(m);
                break;
            }
            let len = got as usize;
            if len < 14 {
                self.stats.dropped += 1;
                pool.put(m);
                continue;
            }
            m.truncate(len);
            m.port = port_index;
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
            rx.push(m);
            n += 1;
        }
        n
    }

    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        _now_ns: u64,
    ) -> Result<(), IoError> {
        // The device takes plain frames: finish what a peer left.
        self.stats.dropped += offload::resolve(tx, &mut self.scratch, pool);
        let mut result = Ok(());
        for m in tx.drain(..) {
            let data = m.data();
            // SAFETY: `data` is a live slice of `data.len()` bytes that
            // write() only reads.
            let rc = unsafe { libc::write(self.fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
            if rc == data.len() as isize {
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += data.len() as u64;
            } else {
                self.stats.dropped += 1;
                if rc < 0 && result.is_ok() {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != ErrorKind::WouldBlock && !sys::is_transient(&e) {
                        result = Err(sys_err(&self.name, "write(tap)", e));
                    }
                }
            }
            pool.put(m);
        }
        result
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}
