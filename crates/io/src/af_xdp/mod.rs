//! The `af_xdp` port: kernel bypass through AF_XDP sockets, one per queue,
//! fed by our own six-instruction XDP program.
//!
//! # Kernel features used
//!
//! - `bpf(BPF_MAP_CREATE)`: an XSKMAP (`BPF_MAP_TYPE_XSKMAP`), rx queue →
//!   socket, shared by every queue of the interface.
//! - `bpf(BPF_PROG_LOAD)`: a redirect program assembled by hand in
//!   `af_xdp/bpf.rs`: no clang, libbpf or ELF at build or run time.
//!
//!   ```text
//!   r2 = *(u32 *)(r1 + 16)      ; xdp_md.rx_queue_index
//!   r1 = map[xskmap]            ; ld_imm64 (two slots), BPF_PSEUDO_MAP_FD
//!   r3 = XDP_PASS               ; what to do when no socket sits on this queue
//!   call bpf_redirect_map       ; helper 51 → XDP_REDIRECT, or XDP_PASS
//!   exit
//!   ```
//!
//!   The `XDP_PASS` fallback keeps ARP, ND and every queue without a socket
//!   flowing to the kernel stack.
//! - `bpf(BPF_LINK_CREATE)` with `BPF_XDP`: native (driver) mode first, then
//!   generic (skb) mode. A link dies with its fd, so a crashed vrhost never
//!   leaves a program behind; closing the last queue of an interface
//!   detaches it.
//! - rtnetlink `IFLA_XDP` (`af_xdp/netlink.rs`): finds, and removes, a program of
//!   ours left attached the old way (which does outlive its process).
//!   Another tool's program is never touched: `open` fails and says so.
//! - `AF_XDP` sockets: `XDP_UMEM_REG`, the four rings through
//!   `XDP_MMAP_OFFSETS` + `mmap`, `bind` with `XDP_ZEROCOPY` first and
//!   `XDP_COPY` second, always with `XDP_USE_NEED_WAKEUP`.
//!   `XDP_STATISTICS` feeds [`PortStats::dropped`].
//!
//! # Rings and frames of one queue
//!
//! ```text
//!  UMEM: 4096 frames × 2 KiB (4 KiB for MTUs above 1774), one per socket
//!  ┌────────── rx frames 0..2047 ──────────┬────────── tx frames 2048..4095 ─────────┐
//!  └───────────────────────────────────────┴─────────────────────────────────────────┘
//!
//!  receive                                  transmit
//!
//!  rx_burst: copy frame into an Mbuf        tx_burst: copy an Mbuf into a free frame
//!     ▲                  │ frame addr          │ desc{addr,len}        ▲ frame addr
//!     │ desc{addr,len}   │ (at once)           │                       │ (free list)
//!     │                  ▼                     ▼                       │
//!  RX ring           FILL ring              TX ring             COMPLETION ring
//!     ▲                  │                     │ sendto() kick         ▲
//!     │                  ▼                     ▼                       │ addr
//!     └─── kernel: XDP program redirects   kernel: sends the frame ────┘
//!          the frame into a FILL frame     (copy mode: through an skb)
//! ```
//!
//! Each ring is single-producer single-consumer between this port and the
//! kernel (`af_xdp/ring.rs`). Every receive frame is always on FILL, in the
//! kernel, on RX, or being copied; every transmit frame is on the free
//! list, on TX, in the kernel, or on COMPLETION. FILL/RX hold 2048 entries
//! and TX/COMPLETION 2048, so no ring can overflow.
//!
//! # Queues
//!
//! Socket `q` receives what the NIC steers to its rx queue `q`. Frames on
//! a queue without a socket go to the kernel stack (the `XDP_PASS`
//! fallback), so give the NIC as many queues as the port has
//! (`ethtool -L DEV combined N`) and spread flows with RSS. veth has one
//! rx queue unless created with `numrxqueues`.
//!
//! # Modes
//!
//! The kernel decides what works; [`AfXdpPort::open`] takes the best it
//! gets and logs one `info` line naming it (`xdp=drv|skb`,
//! `bind=zerocopy|copy`). [`AfXdpPort::open_with`] forces a mode.
//!
//! # Fast path
//!
//! `rx_burst` and `tx_burst` allocate nothing and take no lock: the free
//! lists are `Vec`s sized at open. At most one `recvfrom` (when FILL asks
//! for a wakeup) per rx burst, and one or a few `sendto` per tx burst.
//! `stats()` costs one `getsockopt(XDP_STATISTICS)`: call it off the fast
//! path (once a second, say).
#![allow(unsafe_code)]

use crate::bpf;
mod netlink;
mod ring;
mod socket;

use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use vrhost_dataplane::{offload, Mbuf, MbufPool};

pub use netlink::XdpAttached;

use crate::sys::{self, sys_err};
use crate::{netdev, netns, IoError, Port, PortStats};
use socket::{Xsk, RX_FRAMES, TX_FRAMES, XDP_PACKET_HEADROOM};

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// Native: the driver runs it before building an skb (veth, virtio,
    /// most 10G+ NICs).
    Drv,
    /// Generic: the stack runs it on the skb. Works on every device.
    Skb,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            XdpMode::Drv => bpf::XDP_FLAGS_DRV_MODE,
            XdpMode::Skb => bpf::XDP_FLAGS_SKB_MODE,
        }
    }
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XdpMode::Drv => "drv",
            XdpMode::Skb => "skb",
        })
    }
}

/// How frames move between the NIC and the UMEM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindMode {
    /// The driver DMAs straight into the UMEM (needs driver support).
    ZeroCopy,
    /// The kernel copies between its buffers and the UMEM.
    Copy,
}

impl fmt::Display for BindMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BindMode::ZeroCopy => "zerocopy",
            BindMode::Copy => "copy",
        })
    }
}

/// What to try when opening. `None` means "the best that works": native
/// before generic, zero-copy before copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpOptions {
    /// Force native or generic XDP.
    pub mode: Option<XdpMode>,
    /// Force zero-copy or copy.
    pub bind: Option<BindMode>,
}

/// `struct xdp_statistics`: what the kernel counted on one socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpSocketStats {
    /// Frames dropped for other reasons (e.g. too long for a frame).
    pub rx_dropped: u64,
    /// Bad descriptors we put on FILL.
    pub rx_invalid_descs: u64,
    /// Bad descriptors we put on TX.
    pub tx_invalid_descs: u64,
    /// Frames dropped because RX was full (we polled too slowly).
    pub rx_ring_full: u64,
    /// Times FILL was empty when a frame arrived (the frame is dropped).
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found TX empty when woken.
    pub tx_ring_empty_descs: u64,
}

/// The XSKMAP, the program, and the link attaching it to one interface,
/// shared by that interface's queues in this process. Field order is drop
/// order: the link goes first, which detaches the program.
struct Attachment {
    _link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    mode: XdpMode,
    entries: u32,
}

/// (network namespace, interface index): interface indexes repeat across
/// namespaces.
type AttachKey = ((u64, u64), u32);

/// Live attachments of this process. Locked only while a port opens.
static ATTACHED: Mutex<Vec<(AttachKey, Weak<Attachment>)>> = Mutex::new(Vec::new());

/// One queue of a Linux interface through an AF_XDP socket.
pub struct AfXdpPort {
    xsk: Xsk,
    attachment: Arc<Attachment>,
    ifname: String,
    queue: u32,
    bind: BindMode,
    /// Transmit frames we own (capacity `TX_FRAMES`, never grows).
    tx_free: Vec<u64>,
    /// Receive frames copied out, waiting for room on FILL (capacity
    /// `RX_FRAMES`, never grows).
    recycle: Vec<u64>,
    /// A tx kick was refused transiently; retry on the next burst or flush.
    kick_pending: bool,
    stats: PortStats,
    /// Spare vector for [`vrhost_dataplane::offload::resolve`].
    scratch: Vec<Mbuf>,
}

impl AfXdpPort {
    /// Opens queue `queue` of `queues` on `ifname` in the best mode that
    /// works. The first queue opened on an interface loads and attaches the
    /// program (replacing a stale one of ours); the last one closed
    /// detaches it.
    pub fn open(ifname: &str, queue: u16, queues: u16) -> Result<Self, IoError> {
        Self::open_with(ifname, queue, queues, &XdpOptions::default())
    }

    /// [`Self::open`] with a forced XDP mode and/or bind mode.
    pub fn open_with(
        ifname: &str,
        queue: u16,
        queues: u16,
        opts: &XdpOptions,
    ) -> Result<Self, IoError> {
        if queues == 0 || queue >= queues {
            return Err(IoError::Setup {
                ifname: ifname.to_string(),
                reason: format!("queue {queue} out of range for {queues} queue(s)"),
            });
        }
        let ifindex = sys::ifindex(ifname)?;
        let mtu = netdev::mtu(ifname)?;
        // A received frame lands XDP_PACKET_HEADROOM into its chunk; the
        // chunk must hold that plus Ethernet, one VLAN tag and the MTU.
        let frame_size = [2048u32, 4096]
            .into_iter()
            .find(|fs| mtu + 18 + XDP_PACKET_HEADROOM <= *fs)
            .ok_or_else(|| IoError::Setup {
                ifname: ifname.to_string(),
                reason: format!(
                    "MTU {mtu} too large for AF_XDP copy frames (at most {})",
                    4096 - 18 - XDP_PACKET_HEADROOM
                ),
            })?;

        let attachment = attach(ifname, ifindex, queues, opts.mode)?;
        if u32::from(queue) >= attachment.entries {
            return Err(IoError::Setup {
                ifname: ifname.to_string(),
                reason: format!(
                    "queue {queue} beyond the {} slots of the XSKMAP attached by this process",
                    attachment.entries
                ),
            });
        }

        let tries: &[BindMode] = match opts.bind {
            Some(BindMode::ZeroCopy) => &[BindMode::ZeroCopy],
            Some(BindMode::Copy) => &[BindMode::Copy],
            None => &[BindMode::ZeroCopy, BindMode::Copy],
        };
        let mut last = None;
        let mut bound = None;
        for &b in tries {
            match Xsk::open(
                ifname,
                ifindex,
                u32::from(queue),
                frame_size,
                b == BindMode::ZeroCopy,
            ) {
                Ok(x) => {
                    bound = Some((x, b));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let (xsk, bind) = match (bound, last) {
            (Some(b), _) => b,
            (None, Some(e)) => return Err(e),
            (None, None) => {
                return Err(IoError::Setup {
                    ifname: ifname.to_string(),
                    reason: "no AF_XDP bind mode to try".into(),
                })
            }
        };
        bpf::map_set(&attachment.map, u32::from(queue), &xsk.fd)
            .map_err(|e| sys_err(ifname, "bpf(BPF_MAP_UPDATE_ELEM, XSKMAP)", e))?;

        let first_tx = xsk.first_tx_frame();
        let mut tx_free = Vec::with_capacity(TX_FRAMES as usize);
        tx_free.extend(
            (0..u64::from(TX_FRAMES))
                .rev()
                .map(|i| first_tx + i * u64::from(frame_size)),
        );
        tracing::info!(
            "af_xdp {ifname} queue {queue}: XDP in {} mode, socket bound in {} mode",
            attachment.mode,
            bind
        );
        if queue == 0 {
            // XDP hands over bare frames: a peer's partial checksums and
            // super-frames arrive without the metadata that says so.
            tracing::warn!(
                "af_xdp {ifname}: frames carry no offload metadata, so a veth or TAP peer \
                 must turn checksum and segmentation offloads off \
                 (ethtool -K DEV tx off tso off gso off) for TCP and UDP to pass; \
                 driver = \"af_packet\" carries them"
            );
        }
        Ok(AfXdpPort {
            xsk,
            attachment,
            ifname: ifname.to_string(),
            queue: u32::from(queue),
            bind,
            tx_free,
            recycle: Vec::with_capacity(RX_FRAMES as usize),
            kick_pending: false,
            stats: PortStats::default(),
            scratch: Vec::new(),
        })
    }

    /// Where the XDP program runs and how this socket is bound.
    pub fn mode(&self) -> (XdpMode, BindMode) {
        (self.attachment.mode, self.bind)
    }

    /// The interface this port is bound to.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Largest frame `tx_burst` accepts; longer ones are dropped.
    pub fn max_tx_frame(&self) -> usize {
        self.xsk.frame_size as usize
    }

    /// The kernel's per-socket counters (`XDP_STATISTICS`), for diagnosis:
    /// [`PortStats::dropped`] sums the ones that lose frames.
    pub fn socket_stats(&self) -> Option<XdpSocketStats> {
        self.xsk.statistics().map(|x| XdpSocketStats {
            rx_dropped: x.rx_dropped,
            rx_invalid_descs: x.rx_invalid_descs,
            tx_invalid_descs: x.tx_invalid_descs,
            rx_ring_full: x.rx_ring_full,
            rx_fill_ring_empty_descs: x.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: x.tx_ring_empty_descs,
        })
    }

    /// Moves finished transmit frames back to the free list.
    #[inline]
    fn reap(&mut self) {
        let n = self.xsk.comp.available(TX_FRAMES);
        for i in 0..n {
            let addr = self.xsk.chunk_of(self.xsk.comp.read(i));
            if self.tx_free.len() < self.tx_free.capacity() {
                self.tx_free.push(addr);
            }
        }
        self.xsk.comp.release(n);
    }

    /// Makes the kernel process TX. In copy mode only a `sendto` sends,
    /// and each processes a bounded budget (32 descriptors before Linux
    /// 6.17's `XDP_MAX_TX_SKB_BUDGET`), so repeat while it asks (EAGAIN)
    /// and work remains; in zero-copy mode only when the driver asks.
    fn kick(&mut self) -> Result<(), IoError> {
        if self.bind == BindMode::ZeroCopy && !self.xsk.tx.needs_wakeup() {
            self.kick_pending = false;
            self.reap();
            return Ok(());
        }
        let rounds = TX_FRAMES / 32 + 2;
        self.kick_pending = false;
        for _ in 0..rounds {
            match sys::kick_tx(&self.xsk.fd) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) if sys::is_transient(&e) => {
                    self.kick_pending = true;
                    break;
                }
                Err(e) => {
                    self.kick_pending = true;
                    return Err(sys_err(&self.ifname, "sendto(AF_XDP)", e));
                }
            }
            if self.xsk.tx.outstanding() == 0 {
                break;
            }
        }
        if self.xsk.tx.outstanding() != 0 {
            self.kick_pending = true;
        }
        self.reap();
        Ok(())
    }
}

impl Port for AfXdpPort {
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        let want = u32::try_from(max).unwrap_or(u32::MAX);
        let n = self.xsk.rx.available(want);
        for i in 0..n {
            let d = self.xsk.rx.read(i);
            // SAFETY: the frame was just consumed from RX and goes back to
            // FILL only below, after this copy, so the kernel is not
            // writing it.
            match unsafe { self.xsk.frame(d.addr, d.len as usize) } {
                Some(bytes) if bytes.len() >= 14 => {
                    let mut m = pool.get();
                    m.fill(bytes);
                    m.port = port_index;
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += bytes.len() as u64;
                    rx.push(m);
                }
                _ => self.stats.dropped += 1,
            }
            if self.recycle.len() < self.recycle.capacity() {
                self.recycle.push(self.xsk.chunk_of(d.addr));
            }
        }
        self.xsk.rx.release(n);

        if !self.recycle.is_empty() {
            let k = self
                .xsk
                .fill
                .free(self.recycle.len() as u32)
                .min(self.recycle.len() as u32);
            let keep = self.recycle.len() - k as usize;
            for (i, &addr) in self.recycle[keep..].iter().enumerate() {
                self.xsk.fill.write(i as u32, addr);
            }
            self.xsk.fill.submit(k);
            self.recycle.truncate(keep);
        }
        if self.xsk.fill.needs_wakeup() {
            // Only a "please poll me" hint; failure just means no wakeup.
            let _ = sys::kick_rx(&self.xsk.fd);
        }
        n as usize
    }

    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        _now_ns: u64,
    ) -> Result<(), IoError> {
        self.reap();
        // XDP frames carry no offload metadata: finish what a peer left.
        self.stats.dropped += offload::resolve(tx, &mut self.scratch, pool);
        let room = self
            .xsk
            .tx
            .free(u32::try_from(tx.len()).unwrap_or(u32::MAX));
        let max = self.xsk.frame_size as usize;
        let mut k = 0u32;
        for m in tx.drain(..) {
            let data = m.data();
            let slot = if k < room && (14..=max).contains(&data.len()) {
                self.tx_free.pop()
            } else {
                None
            };
            match slot {
                Some(addr) => {
                    // SAFETY: `addr` came off the free list: it is neither on
                    // TX nor in the kernel, so nobody else touches it until
                    // the descriptor below is submitted.
                    match unsafe { self.xsk.frame_mut(addr, data.len()) } {
                        Some(buf) => {
                            buf.copy_from_slice(data);
                            self.xsk.tx.write(
                                k,
                                libc::xdp_desc {
                                    addr,
                                    len: data.len() as u32,
                                    options: 0,
                                },
                            );
                            k += 1;
                            self.stats.tx_packets += 1;
                            self.stats.tx_bytes += data.len() as u64;
                        }
                        None => {
                            self.tx_free.push(addr);
                            self.stats.dropped += 1;
                        }
                    }
                }
                None => self.stats.dropped += 1,
            }
            pool.put(m);
        }
        if k > 0 {
            self.xsk.tx.submit(k);
        }
        if k > 0 || self.kick_pending {
            self.kick()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), IoError> {
        if self.kick_pending {
            self.kick()?;
        } else {
            self.reap();
        }
        Ok(())
    }

    /// The XDP socket, readable when its rx ring holds descriptors (a
    /// `poll` on it also wakes a zero-copy driver that asked for it).
    fn wait_fds<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) -> bool {
        fds.push(self.xsk.fd.as_fd());
        true
    }

    fn stats(&self) -> PortStats {
        let mut s = self.stats;
        if let Some(x) = self.xsk.statistics() {
            s.dropped += x.rx_dropped + x.rx_ring_full + x.rx_invalid_descs + x.tx_invalid_descs;
        }
        s
    }
}

impl Drop for AfXdpPort {
    fn drop(&mut self) {
        // Closing the socket removes it from the map as well; clearing the
        // slot first keeps the program from redirecting into a dying socket.
        // Nothing useful can be done about an error here.
        let _ = bpf::map_clear(&self.attachment.map, self.queue);
    }
}

/// Returns this process's attachment to `ifindex`, creating it if needed.
fn attach(
    ifname: &str,
    ifindex: u32,
    queues: u16,
    mode: Option<XdpMode>,
) -> Result<Arc<Attachment>, IoError> {
    let key: AttachKey = (netns::current_id()?, ifindex);
    let mut live = ATTACHED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    live.retain(|(_, w)| w.strong_count() > 0);
    if let Some(a) = live
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        if mode.is_some_and(|m| m != a.mode) {
            return Err(IoError::Setup {
                ifname: ifname.to_string(),
                reason: format!(
                    "this process already runs the XDP program here in {} mode",
                    a.mode
                ),
            });
        }
        return Ok(a);
    }

    remove_stale(ifname, ifindex)?;
    // Slots for every queue asked for, and spare ones so a NIC's other
    // queues simply miss (and XDP_PASS) rather than overflow the map.
    let entries = u32::from(queues).max(64);
    let map = bpf::create_xskmap(entries)
        .map_err(|e| sys_err(ifname, "bpf(BPF_MAP_CREATE, XSKMAP)", e))?;
    let prog = bpf::load_redirect_program(&map, bpf::PROG_NAME)
        .map_err(|e| sys_err(ifname, "bpf(BPF_PROG_LOAD)", e))?;
    let tries: &[XdpMode] = match mode {
        Some(XdpMode::Drv) => &[XdpMode::Drv],
        Some(XdpMode::Skb) => &[XdpMode::Skb],
        None => &[XdpMode::Drv, XdpMode::Skb],
    };
    let mut failures = Vec::new();
    for &m in tries {
        match bpf::link_create_xdp(&prog, ifindex, m.flags()) {
            Ok(link) => {
                let a = Arc::new(Attachment {
                    _link: link,
                    _prog: prog,
                    map,
                    mode: m,
                    entries,
                });
                live.push((key, Arc::downgrade(&a)));
                return Ok(a);
            }
            Err(e) => failures.push(format!("{m} mode: {e}")),
        }
    }
    Err(IoError::Setup {
        ifname: ifname.to_string(),
        reason: format!(
            "bpf(BPF_LINK_CREATE, BPF_XDP) failed: {}",
            failures.join("; ")
        ),
    })
}

/// Detaches a program of ours that an earlier run left attached through
/// netlink. Fails, touching nothing, on a program that is not ours, or on
/// one held by a live `bpf_link` (another vrhost process).
fn remove_stale(ifname: &str, ifindex: u32) -> Result<(), IoError> {
    let now = netlink::query(ifindex)
        .map_err(|e| sys_err(ifname, "netlink(RTM_GETLINK, IFLA_XDP)", e.into()))?;
    for (mode, id) in [(XdpMode::Drv, now.drv), (XdpMode::Skb, now.skb)] {
        let Some(id) = id else { continue };
        let name =
            bpf::prog_name(id).map_err(|e| sys_err(ifname, "bpf(BPF_PROG_GET_FD_BY_ID)", e))?;
        if name != bpf::PROG_NAME {
            let off = if mode == XdpMode::Drv {
                "xdpdrv"
            } else {
                "xdpgeneric"
            };
            return Err(IoError::Setup {
                ifname: ifname.to_string(),
                reason: format!(
                    "XDP program {id} ({name:?}) is attached in {mode} mode and is not vrhost's; \
                     remove it (`ip link set dev {ifname} {off} off`) if it may go"
                ),
            });
        }
        match netlink::set(ifindex, -1, mode.flags()) {
            Ok(()) => {
                tracing::warn!(ifname, prog_id = id, %mode, "removed a stale vrhost XDP program left by an earlier run")
            }
            Err(e) if e.errno == libc::EBUSY => {
                return Err(IoError::Setup {
                    ifname: ifname.to_string(),
                    reason: format!(
                        "XDP program {id} ({name}) is held in {mode} mode by a live bpf_link: \
                         another vrhost process is using this interface"
                    ),
                })
            }
            Err(e) => {
                return Err(sys_err(
                    ifname,
                    "netlink(RTM_SETLINK, IFLA_XDP_FD=-1)",
                    e.into(),
                ))
            }
        }
    }
    Ok(())
}

/// Which XDP programs `ifname` runs, per mode (a status query; also how
/// tests check attach and detach).
pub fn attached(ifname: &str) -> Result<XdpAttached, IoError> {
    let ifindex = sys::ifindex(ifname)?;
    netlink::query(ifindex).map_err(|e| sys_err(ifname, "netlink(RTM_GETLINK, IFLA_XDP)", e.into()))
}

/// Loads the redirect program under `prog_name` and attaches it through
/// netlink, so that it stays attached after this process closes its fds or
/// dies: exactly what a crashed run of an older build, or
/// `ip link set dev X xdp ...`, leaves behind. For tests and tooling;
/// returns the program id. With `prog_name` = `"vrhost_xsk"`, the next
/// [`AfXdpPort::open`] treats it as a stale program of ours and replaces it.
pub fn attach_persistent(ifname: &str, mode: XdpMode, prog_name: &str) -> Result<u32, IoError> {
    let ifindex = sys::ifindex(ifname)?;
    let map =
        bpf::create_xskmap(1).map_err(|e| sys_err(ifname, "bpf(BPF_MAP_CREATE, XSKMAP)", e))?;
    let prog = bpf::load_redirect_program(&map, prog_name)
        .map_err(|e| sys_err(ifname, "bpf(BPF_PROG_LOAD)", e))?;
    netlink::set(ifindex, prog.as_raw_fd(), mode.flags())
        .map_err(|e| sys_err(ifname, "netlink(RTM_SETLINK, IFLA_XDP_FD)", e.into()))?;
    let now = attached(ifname)?;
    let id = match mode {
        XdpMode::Drv => now.drv,
        XdpMode::Skb => now.skb,
    };
    id.ok_or_else(|| IoError::Setup {
        ifname: ifname.to_string(),
        reason: "program attached but not reported".into(),
    })
}

/// Detaches a program attached through netlink in `mode` (the inverse of
/// [`attach_persistent`], or `ip link set dev X xdp off`).
pub fn detach_persistent(ifname: &str, mode: XdpMode) -> Result<(), IoError> {
    let ifindex = sys::ifindex(ifname)?;
    netlink::set(ifindex, -1, mode.flags())
        .map_err(|e| sys_err(ifname, "netlink(RTM_SETLINK, IFLA_XDP_FD=-1)", e.into()))
}
