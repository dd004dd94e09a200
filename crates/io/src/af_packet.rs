//! The `af_packet` port: a `PF_PACKET` socket with `TPACKET_V2` mmap rings.
//! It works on any Linux interface, which makes it the fallback driver.
//!
//! # Kernel features used
//!
//! - `PACKET_VERSION = TPACKET_V2`, `PACKET_RX_RING`: a ring of fixed-size
//!   frame slots, each handed to user space as soon as the kernel has
//!   filled it. (`TPACKET_V3` packs frames densely into blocks, but hands a
//!   block over only when it is full or after its timeout, at least 1 ms:
//!   a light flow, TCP's ACKs, then waited up to a millisecond per hop,
//!   which bounded one TCP stream at 0.54–0.64× kernel forwarding; see
//!   docs/benchmarks.md.)
//! - `PACKET_COPY_THRESH`: a frame longer than a slot (a super-frame, up to
//!   64 KiB) takes its slot truncated with `TP_STATUS_COPY`, and the kernel
//!   queues the whole frame on the socket, where `recvmsg` reads it, vnet
//!   header first, in slot order. Slots stay sized for the MTU, so small
//!   frames keep a small ring.
//! - `PACKET_TX_RING` (fixed-size frames), kicked by one
//!   `sendto(MSG_DONTWAIT)` per burst, with `PACKET_QDISC_BYPASS` (straight
//!   to the driver, as a router's own queueing replaces the qdisc) and
//!   `PACKET_LOSS` (a malformed frame is skipped rather than wedging the
//!   ring).
//! - `PACKET_ADD_MEMBERSHIP` / `PACKET_MR_PROMISC`: frames addressed to the
//!   VR interfaces' MACs, not only the Linux interface's, arrive. The kernel
//!   undoes it when the socket closes.
//! - `PACKET_IGNORE_OUTGOING` (Linux 4.20): the router never receives its
//!   own transmissions (or another queue's). The per-frame `sll_pkttype`
//!   check backs it up on older kernels.
//! - `PACKET_FANOUT` (`PACKET_FANOUT_HASH`) when `queues > 1`: the queues of
//!   one interface form a fanout group whose id is the interface index, and
//!   the kernel spreads flows over them by hash.
//! - With a control queue ([`AfPacketPort::open_steered`], as `vrhost run`
//!   opens its ports): `PACKET_FANOUT_CBPF` instead, with a classic BPF
//!   program ([`crate::steer`]) that sends the control protocols' frames
//!   (ARP, BFD, BGP, OSPF, IPv6 neighbor discovery) to a ring-less socket of
//!   their own, which queue 0 reads first and the driver loop reads even
//!   while the port's VRs are over their share; the rest are spread over
//!   the queues by a hash. A flood that overflows the data ring then does
//!   not take a VR's BFD with it. The control socket's 4 MiB receive buffer
//!   holds thousands of them.
//! - `PACKET_VNET_HDR`: a virtio-net header ([`crate::vnet`]) in front of
//!   every frame, both ways, so that a peer's partial checksums and TCP/UDP
//!   super-frames (veth with its default offloads) arrive described, and
//!   leave described to a kernel that finishes them. Without it (a kernel
//!   that refuses it) the port falls back to plain frames and finishes
//!   such frames itself ([`vrhost_dataplane::offload::resolve`]); a partial
//!   checksum then cannot be seen on receive, so a peer's offloads must be
//!   off.
//! - `PACKET_STATISTICS`: ring-full drops, reported in
//!   [`PortStats::dropped`]. Reading them resets the kernel's counters, so
//!   the port accumulates them.
//!
//! # Memory layout
//!
//! ```text
//!  one mmap, shared with the kernel
//!  ┌──────── rx: N slots of one size ──────────┬───── tx: M frames of one size ─────┐
//!  │ slot 0         │ slot 1         │ …       │ frame 0 │ frame 1 │ …              │
//!  │ status USER:   │ status KERNEL: │         │ each: tpacket2_hdr + frame bytes   │
//!  │ ours; rx_burst │ the kernel     │         │ AVAILABLE ─(tx_burst)─► SEND_REQ.  │
//!  │ copies it out  │ fills it next  │         │ ─(kernel, on sendto)─► AVAILABLE   │
//!  └────────────────┴────────────────┴─────────┴────────────────────────────────────┘
//!   a slot: [ tpacket2_hdr | sockaddr_ll | … | vnet hdr | frame ]  → KERNEL once copied
//!   TP_STATUS_COPY on a slot: its frame is whole on the socket's queue (recvmsg)
//! ```
//!
//! # Fast path
//!
//! `rx_burst` makes no syscall for frames that fit a slot, and one
//! `recvmsg` per super-frame; `tx_burst` makes one `sendto` per burst.
//! Neither allocates nor locks. `stats()` costs one
//! `getsockopt(PACKET_STATISTICS)`: call it off the fast path.
//!
//! # Super-frames
//!
//! A received super-frame of up to 64 KiB is longer than an ordinary
//! [`Mbuf`] ([`MAX_FRAME`]): `recv` reads it off the socket's queue
//! straight into a large buffer ([`MbufPool::get_large`]; its vnet header
//! into the end of the headroom), so the pipeline forwards it as one frame:
//! one lookup, one TTL update. Where the pool has no large buffer left, or
//! the device stripped a tag that goes back in front, it is copied and cut
//! into super-frames that fit one ordinary buffer (six 1448-byte segments
//! each), checksums left partial. With the vnet header, tx frames are 16
//! KiB, so any ordinary [`Mbuf`] fits one. A large buffer's frame, and the
//! buffers of one cut super-frame joined again ([`coalesce`]), leave as
//! one frame of up to 64 KiB through a second, ring-less socket
//! (`sendmsg`, after the ring is kicked, so order holds):
//! the receiving kernel takes one skb where the sender made one. Both
//! sockets get a 32 MiB send buffer (`SO_SNDBUFFORCE`): frames a veth
//! peer's sockets still hold count against it; the ring socket a 32 MiB
//! receive buffer too, which bounds the super-frames queued for `recvmsg`.
//!
//! # VLAN tags
//!
//! When the device strips an 802.1Q tag into metadata (`TP_STATUS_VLAN_VALID`),
//! `rx_burst` writes it back into the frame, because VR interfaces are
//! selected by (port, VLAN).
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::c_int;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use vrhost_dataplane::coalesce;
use vrhost_dataplane::mbuf::{HEADROOM, MAX_FRAME};
use vrhost_dataplane::offload;
use vrhost_dataplane::{Mbuf, MbufPool};

use crate::netdev;
use crate::rx_frame::{self, VLAN_LEN};
use crate::sys::{self, getsockopt, setsockopt, sys_err, zeroed, Mmap};
use crate::vnet;
use crate::{IoError, Port, PortStats};

pub use crate::netdev::{mac, mtu};

/// Size of one ring block: a power-of-two number of pages that slots and
/// tx frames divide (they never straddle a block).
pub const BLOCK_SIZE: usize = 1 << 20;
/// Bytes of rx ring per queue: 16 MiB, 8192 slots of 2 KiB at a 1500-byte
/// MTU, absorbs about 10 ms of a 10 GbE line.
pub const RX_RING_BYTES: usize = 16 << 20;
/// Bytes of tx ring per queue: 4096 frames of 2 KiB at a 1500-byte MTU.
pub const TX_RING_BYTES: usize = 8 << 20;
/// `TPACKET_ALIGN(sizeof(struct tpacket2_hdr))`: where the `sockaddr_ll`
/// sits behind each rx slot's header.
const HDR_LEN: usize = (size_of::<libc::tpacket2_hdr>() + libc::TPACKET_ALIGNMENT - 1)
    & !(libc::TPACKET_ALIGNMENT - 1);
/// Where a tx frame's data starts: `tp_hdrlen - sizeof(struct sockaddr_ll)`
/// (kernel `tpacket_parse_header`).
const TX_DATA_OFF: usize = libc::TPACKET2_HDRLEN - size_of::<libc::sockaddr_ll>();
/// Where the kernel puts a frame's network header in an rx slot
/// (`tpacket_rcv`: `TPACKET_ALIGN(tp_hdrlen + max(16, L2 length))`, then
/// the vnet header; the L2 header goes just before it), for L2 headers of
/// up to 28 bytes (two VLAN tags): a slot of this plus the MTU holds any
/// frame the MTU allows.
const RX_NET_OFF: usize = ((libc::TPACKET2_HDRLEN + 16 + libc::TPACKET_ALIGNMENT - 1)
    & !(libc::TPACKET_ALIGNMENT - 1))
    + vnet::LEN;
// A full frame of the default 1500-byte MTU fits the smallest slot.
const _: () = assert!(RX_NET_OFF + 1500 <= 2048);
/// The longest frame `recvmsg` takes off the socket's queue: a 64 KiB
/// super-frame (`GSO_MAX_SIZE`, what veth and TAP send without BIG TCP)
/// and its Ethernet header, behind its vnet header.
const MAX_COPY: usize = vnet::LEN + 65_536 + 22;
/// The socket's receive buffer (`SO_RCVBUFFORCE`), which bounds the
/// super-frames queued for `recvmsg`: the kernel stops queueing, and
/// truncates them into their slots (dropped), beyond it.
const RECV_BUFFER: c_int = 32 << 20;

/// One queue of a Linux interface, through a `TPACKET_V2` socket.
pub struct AfPacketPort {
    ifname: String,
    fd: OwnedFd,
    /// Rx slots, then tx frames.
    ring: Mmap,
    rx_slot_size: usize,
    rx_slots: usize,
    /// Rx slot we read next.
    rx_head: usize,
    /// Where a `TP_STATUS_COPY` frame lands, whole (vnet header, frame),
    /// from `recvmsg`; empty without `vnet`.
    copy: Box<[u8]>,
    /// How much of `copy` is the head slot's frame, read but not taken
    /// (the burst had no room for its cut).
    copied: Option<usize>,
    /// Where the tx frames start in `ring`.
    tx_base: usize,
    tx_frame_size: usize,
    tx_frames: usize,
    /// Tx frame we fill next.
    tx_head: usize,
    /// A kick failed transiently; retry on the next burst or flush.
    kick_pending: bool,
    stats: PortStats,
    /// Ring drops read so far (`PACKET_STATISTICS` resets on read).
    ring_drops: Cell<u64>,
    /// Frames carry a virtio-net header both ways (`PACKET_VNET_HDR`).
    vnet: bool,
    /// Spare vector for [`offload::resolve`] when `vnet` is off.
    scratch: Vec<Mbuf>,
    /// A second socket of the interface, without rings, that sends the
    /// super-frames [`coalesce`] joins (longer than a tx ring frame) with
    /// one `sendmsg`; `None` without `vnet`.
    join: Option<OwnedFd>,
    /// Queue 0 of a port opened with [`AfPacketPort::open_steered`]: the
    /// socket the fanout program gives the control protocols' frames.
    control: Option<Control>,
    /// The tc ingress link that keeps the host's own stack off the
    /// interface ([`AfPacketPort::keep_host_stack_off`]); detached when the
    /// port is dropped.
    host_drop: Option<OwnedFd>,
    /// RPS on the interface's receive queues, set by
    /// [`AfPacketPort::steer_receive`]; emptied when the port is dropped.
    steering: Option<crate::rps::Steering>,
}

/// The control queue: a ring-less socket read with `recvmsg`, its frames
/// few and small.
struct Control {
    fd: OwnedFd,
    /// The vnet header (with `vnet`) and the frame of one `recvmsg`.
    buf: Box<[u8]>,
    /// Drops its receive buffer's overflow caused, read so far.
    drops: Cell<u64>,
    /// Polls left before the next `recvmsg` ([`CONTROL_EVERY`]).
    pause: u32,
}

/// An empty control queue is asked again only every this many bursts: a
/// `recvmsg` that finds nothing is a system call a burst, which with two
/// ports cost the worker more than its frames at low rates. Frames wait
/// at most this many polls (about a millisecond at 1 Mpps; a worker that
/// waits for work wakes for them, [`Port::wait_fds`], and reads them within
/// 16 turns); a read that finds frames reads again next burst.
const CONTROL_EVERY: u32 = 16;

/// The control socket's receive buffer (`SO_RCVBUFFORCE`; the kernel
/// doubles it): about 4,000 small frames' worth of skbs.
const CONTROL_BUFFER: c_int = 4 << 20;

impl AfPacketPort {
    /// Opens queue `queue` of `queues` on interface `ifname`. With more
    /// than one queue, every queue's socket joins one hash fanout group, so
    /// open them all (one per worker) with the same `queues`.
    pub fn open(ifname: &str, queue: u16, queues: u16) -> Result<Self, IoError> {
        Self::open_with(ifname, queue, queues, false)
    }

    /// [`AfPacketPort::open`], with the control protocols' frames steered
    /// to a queue of their own ([`crate::steer`]) that queue 0 reads
    /// first, and [`Port::rx_control`] alone. Open queue 0 first, then the
    /// others in order: the program names the sockets by the order they
    /// joined the fanout group. Where the kernel refuses the program, the
    /// port works as [`AfPacketPort::open`]'s, and says so once.
    pub fn open_steered(ifname: &str, queue: u16, queues: u16) -> Result<Self, IoError> {
        Self::open_with(ifname, queue, queues, true)
    }

    fn open_with(ifname: &str, queue: u16, queues: u16, steer: bool) -> Result<Self, IoError> {
        if queues == 0 || queue >= queues {
            return Err(IoError::Setup {
                ifname: ifname.to_string(),
                reason: format!("queue {queue} out of range for {queues} queue(s)"),
            });
        }
        let ifindex = sys::ifindex(ifname)?;
        let mtu = netdev::mtu(ifname)? as usize;
        let e = |call| move |err| sys_err(ifname, call, err);

        // Protocol 0: the socket receives nothing until `bind`, so no frame
        // lands before the rings exist.
        let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0).map_err(e("socket(AF_PACKET)"))?;
        let opt = |name: c_int, value: c_int, call: &'static str| {
            setsockopt(&fd, libc::SOL_PACKET, name, &value).map_err(e(call))
        };
        opt(
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V2 as c_int,
            "setsockopt(PACKET_VERSION)",
        )?;
        opt(libc::PACKET_LOSS, 1, "setsockopt(PACKET_LOSS)")?;
        opt(
            libc::PACKET_QDISC_BYPASS,
            1,
            "setsockopt(PACKET_QDISC_BYPASS)",
        )?;
        // Before the rings, as the kernel requires. Refused (an old kernel,
        // or a socket type without it), the port works with plain frames.
        let vnet = match opt(libc::PACKET_VNET_HDR, 1, "setsockopt(PACKET_VNET_HDR)") {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(
                    "{ifname}: {err}; frames carry no offload metadata, so peers must turn \
                     checksum and segmentation offloads off for TCP and UDP to pass"
                );
                false
            }
        };
        send_buffer(&fd);
        if vnet {
            // Super-frames longer than a slot reach recvmsg whole, up to
            // this much queued.
            opt(
                libc::PACKET_COPY_THRESH,
                1,
                "setsockopt(PACKET_COPY_THRESH)",
            )?;
            if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &RECV_BUFFER).is_err() {
                let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &RECV_BUFFER);
            }
        }
        // Older kernels lack it; rx_burst also skips PACKET_OUTGOING frames.
        let _ = opt(
            libc::PACKET_IGNORE_OUTGOING,
            1,
            "setsockopt(PACKET_IGNORE_OUTGOING)",
        );

        // A slot holds its header and any frame the MTU allows (capped by
        // the Mbuf size); longer ones (super-frames) take the copy path.
        let rx_slot_size = (RX_NET_OFF + mtu.min(MAX_FRAME))
            .next_power_of_two()
            .max(2048);
        let rx_slots = RX_RING_BYTES / rx_slot_size;
        let rx_req = libc::tpacket_req {
            tp_block_size: BLOCK_SIZE as u32,
            tp_block_nr: (RX_RING_BYTES / BLOCK_SIZE) as u32,
            tp_frame_size: rx_slot_size as u32,
            tp_frame_nr: rx_slots as u32,
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx_req)
            .map_err(e("setsockopt(PACKET_RX_RING)"))?;

        // A tx frame holds its header and the largest frame the MTU allows
        // (plus Ethernet and one VLAN tag), capped by the Mbuf size; with
        // the vnet header, any Mbuf (a super-frame), behind that header.
        let need = if vnet {
            TX_DATA_OFF + vnet::LEN + MAX_FRAME
        } else {
            TX_DATA_OFF + (mtu + 18).min(MAX_FRAME)
        };
        let tx_frame_size = need.next_power_of_two().clamp(
            2048,
            (TX_DATA_OFF + vnet::LEN + MAX_FRAME).next_power_of_two(),
        );
        let tx_block_size = BLOCK_SIZE.max(tx_frame_size);
        // At least 1024 frames, however large each is.
        let ring_bytes = TX_RING_BYTES.max(1024 * tx_frame_size);
        let tx_blocks = (ring_bytes / tx_block_size).max(1);
        let tx_frames = tx_blocks * (tx_block_size / tx_frame_size);
        let tx_req = libc::tpacket_req {
            tp_block_size: tx_block_size as u32,
            tp_block_nr: tx_blocks as u32,
            tp_frame_size: tx_frame_size as u32,
            tp_frame_nr: tx_frames as u32,
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx_req)
            .map_err(e("setsockopt(PACKET_TX_RING)"))?;

        let tx_base = RX_RING_BYTES;
        let ring = Mmap::shared(&fd, tx_base + tx_blocks * tx_block_size, 0)
            .map_err(e("mmap(PACKET rings)"))?;

        let mut sll: libc::sockaddr_ll = zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        sys::bind(&fd, &sll).map_err(e("bind(AF_PACKET)"))?;

        let mreq = libc::packet_mreq {
            mr_ifindex: ifindex as i32,
            mr_type: libc::PACKET_MR_PROMISC as u16,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
            .map_err(e("setsockopt(PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC)"))?;

        // Group ids are per network namespace; the interface index is
        // unique there, so every port of one interface meets in one group.
        let group = ifindex & 0xffff;
        let mut control = None;
        let mut steered = false;
        if steer {
            let steered_arg = (group
                | ((libc::PACKET_FANOUT_CBPF | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16))
                as c_int;
            let joined = if queue == 0 {
                match open_control(ifindex, vnet, steered_arg, queues) {
                    Ok(c) => {
                        control = Some(c);
                        Ok(())
                    }
                    Err(err) => Err(err),
                }
            } else {
                Ok(())
            };
            let joined = joined.and_then(|()| {
                setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &steered_arg)
            });
            match joined {
                Ok(()) if queue == 0 => {
                    tracing::info!(
                        "{ifname}: a control queue takes ARP, BFD, BGP, OSPF and neighbor \
                         discovery ahead of the {queues} data queue(s)"
                    );
                    steered = true;
                }
                Ok(()) => steered = true,
                Err(err) => {
                    control = None;
                    if queue == 0 {
                        tracing::warn!(
                            "{ifname}: no control queue ({err}): a flood that fills the receive \
                             ring drops the VRs' BFD, BGP and ARP frames with it"
                        );
                    }
                }
            }
        }
        if queues > 1 && !steered {
            let arg = (group | (libc::PACKET_FANOUT_HASH << 16)) as c_int;
            opt(libc::PACKET_FANOUT, arg, "setsockopt(PACKET_FANOUT)")?;
        }

        // Send-only (protocol 0 receives nothing), straight to the driver,
        // with vnet headers, like the ring socket.
        let join = if vnet {
            let open_join = || -> std::io::Result<OwnedFd> {
                let j = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)?;
                let one: c_int = 1;
                setsockopt(&j, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)?;
                setsockopt(&j, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)?;
                send_buffer(&j);
                let mut a: libc::sockaddr_ll = zeroed();
                a.sll_family = libc::AF_PACKET as u16;
                a.sll_ifindex = ifindex as i32;
                sys::bind(&j, &a)?;
                Ok(j)
            };
            match open_join() {
                Ok(j) => Some(j),
                Err(err) => {
                    tracing::warn!("{ifname}: send socket for joined super-frames: {err}");
                    None
                }
            }
        } else {
            None
        };

        Ok(AfPacketPort {
            join,
            control,
            host_drop: None,
            steering: None,
            ifname: ifname.to_string(),
            fd,
            ring,
            rx_slot_size,
            rx_slots,
            rx_head: 0,
            copy: vec![0u8; if vnet { MAX_COPY } else { 0 }].into_boxed_slice(),
            copied: None,
            tx_base,
            tx_frame_size,
            tx_frames,
            tx_head: 0,
            kick_pending: false,
            stats: PortStats::default(),
            ring_drops: Cell::new(0),
            vnet,
            scratch: Vec::new(),
        })
    }

    /// Stops the host's own network stack from receiving the interface's
    /// frames, as an AF_XDP port's redirect does: a tc ingress program
    /// (`tcx`) drops each frame after the packet sockets have taken it.
    /// Without it the namespace's kernel also takes every frame vrhost
    /// forwards through its IP input: a route lookup that finds no route
    /// (or forwards it a second time, where `ip_forward` is on), an ICMP
    /// error attempt, a route entry made and freed, on the same core. Call
    /// it on one queue of the port; it holds while that queue is open.
    pub fn keep_host_stack_off(&mut self) -> Result<(), IoError> {
        let ifname = &self.ifname;
        let ifindex = sys::ifindex(ifname)?;
        let e = |call| move |err| sys_err(ifname, call, err);
        let prog = crate::bpf::load_drop_program().map_err(e("bpf(BPF_PROG_LOAD, tc drop)"))?;
        let link = crate::bpf::link_create_tcx_ingress(&prog, ifindex)
            .map_err(e("bpf(BPF_LINK_CREATE, tcx ingress)"))?;
        self.host_drop = Some(link);
        Ok(())
    }

    /// Steers the kernel's receive work for the interface to `cpus` (from
    /// [`crate::rps::steer_cpus`]: no worker's) with RPS, where
    /// [`crate::rps`] allows it; it holds while this queue is open.
    pub fn steer_receive(
        &mut self,
        cpus: &[usize],
        workers: &[usize],
    ) -> Result<crate::rps::Applied, IoError> {
        let (applied, steering) = crate::rps::Steering::apply(&self.ifname, cpus, workers)?;
        self.steering = steering;
        Ok(applied)
    }

    /// Whether frames carry offload metadata (`PACKET_VNET_HDR` took).
    pub fn offloads(&self) -> bool {
        self.vnet
    }

    /// The interface this port is bound to.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Largest frame `tx_burst` accepts; longer ones are dropped.
    pub fn max_tx_frame(&self) -> usize {
        self.tx_frame_size - TX_DATA_OFF - if self.vnet { vnet::LEN } else { 0 }
    }

    /// The address of rx slot `i`.
    #[inline]
    fn rx_slot(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.rx_slots);
        // SAFETY: `i < rx_slots`, so the slot lies inside the rx part of the
        // mapping (`rx_slots * rx_slot_size <= RX_RING_BYTES` bytes).
        unsafe { self.ring.ptr().add(i * self.rx_slot_size) }
    }

    /// The `tp_status` word of rx slot `i`, shared with the kernel.
    #[inline]
    fn rx_status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the word starts slot `i` of the live mapping, is 4-byte
        // aligned (slots are at least 2 KiB aligned), and the kernel only
        // touches it with word-sized accesses, so it may be viewed as an
        // `AtomicU32` for as long as `self` lives.
        unsafe { AtomicU32::from_ptr(self.rx_slot(i).cast::<u32>()) }
    }

    /// Hands the head slot back to the kernel and moves to the next.
    #[inline]
    fn release_slot(&mut self) {
        self.rx_status(self.rx_head)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.rx_head = (self.rx_head + 1) % self.rx_slots;
    }

    /// Reads the head slot's `TP_STATUS_COPY` frame off the socket's queue
    /// into `copy` (once: a frame left for the next burst stays there).
    /// Returns its length, vnet header included; `None` when the queue has
    /// nothing or the frame is longer than `copy` (it is gone then).
    fn read_copy(&mut self) -> Option<usize> {
        if self.copied.is_none() {
            // SAFETY: `copy` is a live buffer of `copy.len()` bytes that
            // recv() may write; MSG_TRUNC makes it return the frame's real
            // length, so a frame that did not fit is seen as such.
            let rc = unsafe {
                libc::recv(
                    std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                    self.copy.as_mut_ptr().cast(),
                    self.copy.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            let len = usize::try_from(rc).ok()?;
            if len > self.copy.len() {
                return None;
            }
            self.copied = Some(len);
        }
        self.copied
    }

    /// Reads the head slot's `TP_STATUS_COPY` frame off the socket's queue
    /// straight into large buffer `m`: the vnet header into the end of its
    /// headroom, the frame behind it.
    fn read_large(
        &mut self,
        mut m: Mbuf,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        port_index: u16,
    ) -> rx_frame::Received {
        let at = HEADROOM - vnet::LEN;
        let room = &mut m.raw_mut()[at..];
        // SAFETY: `room` is a live, writable slice of `room.len()` bytes
        // that recv() may write; MSG_TRUNC makes it return the frame's real
        // length, so a frame that did not fit is seen as such.
        let rc = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                room.as_mut_ptr().cast(),
                room.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        let fits = usize::try_from(rc)
            .ok()
            .filter(|&len| len <= room.len() && len >= vnet::LEN);
        if !fits.is_some_and(|len| m.set_frame(HEADROOM, len - vnet::LEN)) {
            pool.put(m);
            return rx_frame::Received::Dropped;
        }
        let mut vh = [0u8; vnet::LEN];
        vh.copy_from_slice(&m.raw_mut()[at..HEADROOM]);
        rx_frame::take(&mut self.stats, m, &vh, pool, rx, port_index)
    }

    /// The address of tx frame `i`.
    #[inline]
    fn tx_frame(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.tx_frames);
        // SAFETY: `i < tx_frames`, so the frame lies inside the tx part of
        // the mapping, which starts at `tx_base`.
        unsafe { self.ring.ptr().add(self.tx_base + i * self.tx_frame_size) }
    }

    /// The `tp_status` word of tx frame `i`, shared with the kernel.
    #[inline]
    fn tx_status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: inside frame `i` of the live mapping, 4-byte aligned
        // (frames are at least 2 KiB aligned, the field is at offset 0),
        // accessed by the kernel with word-sized loads and stores.
        unsafe {
            AtomicU32::from_ptr(
                self.tx_frame(i)
                    .add(offset_of!(libc::tpacket2_hdr, tp_status))
                    .cast::<u32>(),
            )
        }
    }

    /// Sends `frames` as the one super-frame `off` describes (their first
    /// frame's headers already rewritten by [`coalesce::merge_head`]): the
    /// vnet header, the first frame, the later frames' payloads, with one
    /// `sendmsg` on the second socket. A failure drops them (counted).
    fn send_joined(&mut self, off: &vrhost_dataplane::Offload, frames: &[Mbuf]) {
        let n = frames.len() as u64;
        let (Some(join), Some(vh)) = (&self.join, vnet::emit(off, frames[0].data())) else {
            self.stats.dropped += n;
            return;
        };
        let iov = vnet::joined_iov(&vh, frames);
        let used = &iov[..frames.len() + 1];
        let len: usize = used.iter().map(|v| v.iov_len).sum();
        // SAFETY: msghdr is a C struct of integers and raw pointers, for
        // which all zeros (null pointers, lengths 0) is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = used.as_ptr().cast_mut();
        msg.msg_iovlen = used.len();
        // SAFETY: `msg` names no address and no control data, and its iovecs
        // point at live slices of their lengths (the header on the stack,
        // the frames in their buffers, unchanged until sendmsg() returns)
        // that sendmsg() only reads.
        let rc = unsafe {
            libc::sendmsg(
                std::os::fd::AsRawFd::as_raw_fd(join),
                &msg,
                libc::MSG_DONTWAIT,
            )
        };
        if rc == len as isize {
            self.stats.tx_packets += n;
            self.stats.tx_bytes += (len - vnet::LEN) as u64;
        } else {
            self.stats.dropped += n;
        }
    }

    fn kick(&mut self) -> Result<(), IoError> {
        match sys::kick_tx(&self.fd) {
            Ok(()) => {
                self.kick_pending = false;
                Ok(())
            }
            Err(e) if sys::is_transient(&e) => {
                self.kick_pending = true;
                Ok(())
            }
            Err(e) => {
                self.kick_pending = true;
                Err(sys_err(&self.ifname, "sendto(PACKET_TX_RING)", e))
            }
        }
    }
}

/// How many bytes a socket's sent frames may hold before sends fail
/// (`SO_SNDBUFFORCE`, as root; the kernel doubles it): what a veth peer's
/// receiving sockets keep queued counts against the sender until it is
/// read, and a TCP receiver holds megabytes (`tcp_rmem`). With the
/// default (about 200 KiB) a few super-frames in flight stop the port. A
/// TAP's socket has no such bound (`INT_MAX`).
const SEND_BUFFER: c_int = 32 << 20;

/// Raises a socket's send buffer to [`SEND_BUFFER`]; without the
/// privilege, to what `SO_SNDBUF` allows (`wmem_max`).
fn send_buffer(fd: &OwnedFd) {
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &SEND_BUFFER).is_err() {
        let _ = setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &SEND_BUFFER);
    }
}

/// Frames a burst must still have room for before the control queue is
/// read: a super-frame (a BGP table transfer from a peer with offloads)
/// takes up to this many buffers once cut.
const CONTROL_ROOM: usize = 16;

/// Opens the control queue of interface `ifindex` and makes its fanout
/// group (`fanout`, the `PACKET_FANOUT` argument) with the program that
/// steers the control protocols' frames to it, member 0, and the rest
/// over `queues` data queues.
fn open_control(ifindex: u32, vnet: bool, fanout: c_int, queues: u16) -> std::io::Result<Control> {
    let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)?;
    let one: c_int = 1;
    if vnet {
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)?;
    }
    // The tag the device moved into metadata comes with each frame.
    setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_AUXDATA, &one)?;
    let _ = setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one);
    if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &CONTROL_BUFFER).is_err() {
        let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &CONTROL_BUFFER);
    }
    let mut sll: libc::sockaddr_ll = zeroed();
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as i32;
    sys::bind(&fd, &sll)?;
    setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &fanout)?;
    let program = crate::steer::program(queues);
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT_DATA, &fprog)?;
    Ok(Control {
        fd,
        buf: vec![0u8; MAX_COPY].into_boxed_slice(),
        drops: Cell::new(0),
        pause: 0,
    })
}

/// The 802.1Q tag as the wire had it (TPID, then TCI), from a frame's
/// status and the tag the device moved into metadata.
fn wire_tag(status: u32, tci: u16, tpid: u16) -> Option<[u8; VLAN_LEN]> {
    (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
        let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
            tpid
        } else {
            0x8100
        };
        let mut t = [0u8; VLAN_LEN];
        t[..2].copy_from_slice(&tpid.to_be_bytes());
        t[2..].copy_from_slice(&tci.to_be_bytes());
        t
    })
}

impl AfPacketPort {
    /// Receives what the control queue holds, while the burst has room
    /// ([`CONTROL_ROOM`]); nothing without one.
    fn read_control(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        let Some(c) = self.control.as_mut() else {
            return 0;
        };
        if c.pause > 0 {
            c.pause -= 1;
            return 0;
        }
        let skip = if self.vnet { vnet::LEN } else { 0 };
        let (mut n, mut reads) = (0, 0);
        // Room for a cut super-frame, or an empty burst (however small);
        // at most `max` frames read, dropped ones included, so that a flood
        // of frames that are dropped cannot hold the worker here.
        while n < max && reads < max && (n == 0 || max - n >= CONTROL_ROOM) {
            reads += 1;
            let mut sll: libc::sockaddr_ll = zeroed();
            // Room for one PACKET_AUXDATA message, 8-byte aligned.
            let mut cmsgs = [0u64; 8];
            let mut iov = libc::iovec {
                iov_base: c.buf.as_mut_ptr().cast(),
                iov_len: c.buf.len(),
            };
            // SAFETY: msghdr is a C struct of integers and raw pointers, for
            // which all zeros is a valid value.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = core::ptr::from_mut(&mut sll).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cmsgs.as_mut_ptr().cast();
            msg.msg_controllen = size_of_val(&cmsgs);
            // SAFETY: every pointer in `msg` names a live local or `c.buf`
            // with the length given beside it, which recvmsg() may write
            // and does not keep; MSG_TRUNC makes it return the frame's
            // real length, so a frame that did not fit is seen as such.
            let rc = unsafe {
                libc::recvmsg(
                    std::os::fd::AsRawFd::as_raw_fd(&c.fd),
                    &mut msg,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            // Nothing left (EAGAIN), or an error the next burst sees again.
            let Ok(len) = usize::try_from(rc) else {
                break;
            };
            if len > c.buf.len() || len < skip + 14 {
                self.stats.dropped += 1;
                continue;
            }
            if sll.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let mut tag = None;
            // SAFETY: `msg` was filled by recvmsg() above, its control
            // buffer `cmsgs` is live, and CMSG_FIRSTHDR/CMSG_NXTHDR return
            // null or a header inside it (msg_controllen as the kernel
            // set it); a PACKET_AUXDATA message carries a whole
            // tpacket_auxdata, read unaligned.
            unsafe {
                let mut h = libc::CMSG_FIRSTHDR(&msg);
                while !h.is_null() {
                    if (*h).cmsg_level == libc::SOL_PACKET && (*h).cmsg_type == libc::PACKET_AUXDATA
                    {
                        let aux = std::ptr::read_unaligned(
                            libc::CMSG_DATA(h).cast::<libc::tpacket_auxdata>(),
                        );
                        tag = wire_tag(aux.tp_status, aux.tp_vlan_tci, aux.tp_vlan_tpid);
                    }
                    h = libc::CMSG_NXTHDR(&msg, h);
                }
            }
            let (vh, frame) = c.buf[..len].split_at(skip);
            let got = rx_frame::receive(
                &mut self.stats,
                frame,
                vh,
                tag,
                pool,
                rx,
                (n, max),
                port_index,
            );
            match got {
                rx_frame::Received::Frames(k) => n += k,
                rx_frame::Received::Dropped | rx_frame::Received::NoRoom => {
                    self.stats.dropped += 1;
                }
            }
        }
        if n == 0 {
            c.pause = CONTROL_EVERY - 1;
        }
        n
    }
}

impl Port for AfPacketPort {
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        // The control protocols' frames first.
        let mut n = self.read_control(pool, rx, max, port_index);
        let skip = if self.vnet { vnet::LEN } else { 0 };
        // At most `max` slots a burst, dropped frames included: the kernel
        // refills what is released, so a flood of frames that are dropped
        // could otherwise hold the worker here.
        let mut slots = 0;
        while n < max && slots < max {
            slots += 1;
            let status = self.rx_status(self.rx_head).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            let slot = self.rx_slot(self.rx_head);
            // SAFETY: the header and the `sockaddr_ll` behind it (`HDR_LEN +
            // 20 <= 2048 <= rx_slot_size`) lie inside this slot, which user
            // space owns while its status is TP_STATUS_USER (the Acquire load
            // above orders these reads after the kernel's writes).
            let (hdr, pkttype) = unsafe {
                let h = std::ptr::read_unaligned(slot.cast::<libc::tpacket2_hdr>());
                let pkttype = *slot.add(HDR_LEN + offset_of!(libc::sockaddr_ll, sll_pkttype));
                (h, pkttype)
            };
            let tag = wire_tag(status, hdr.tp_vlan_tci, hdr.tp_vlan_tpid);
            let copied = status & libc::TP_STATUS_COPY != 0;
            // Longer than an ordinary buffer: straight into a large one.
            let long = hdr.tp_len as usize > MAX_FRAME;
            let outgoing = pkttype == libc::PACKET_OUTGOING;
            let direct = copied && long && self.vnet && tag.is_none() && self.copied.is_none();
            let large = (direct && !outgoing).then(|| pool.get_large()).flatten();
            let got = if outgoing {
                rx_frame::Received::Frames(0)
            } else if let Some(m) = large {
                // Whole, from the socket's queue into a large buffer: no
                // copy between.
                self.read_large(m, pool, rx, port_index)
            } else {
                let bytes = if copied {
                    // Truncated into the slot, whole on the socket's queue.
                    self.read_copy()
                        .filter(|&len| len >= skip + 14)
                        .map(|len| self.copy[..len].split_at(skip))
                } else {
                    let mac = hdr.tp_mac as usize;
                    let snap = hdr.tp_snaplen as usize;
                    let fits = mac
                        .checked_add(snap)
                        .is_some_and(|end| end <= self.rx_slot_size)
                        && snap >= 14
                        && mac >= HDR_LEN + skip;
                    // Not whole (`tp_len > snap`): longer than a slot with
                    // no room left in the receive buffer for the copy.
                    (fits && hdr.tp_len as usize == snap).then(|| {
                        // SAFETY: `mac + snap <= rx_slot_size` and `tp_mac >=
                        // HDR_LEN + skip` were checked, so the vnet header and
                        // the frame behind it lie inside this user-owned slot;
                        // the kernel will not write them before
                        // `release_slot`, which comes after they are copied.
                        unsafe {
                            (
                                std::slice::from_raw_parts(slot.add(mac - skip), skip),
                                std::slice::from_raw_parts(slot.add(mac), snap),
                            )
                        }
                    })
                };
                match bytes {
                    Some((vh, frame)) => rx_frame::receive(
                        &mut self.stats,
                        frame,
                        vh,
                        tag,
                        pool,
                        rx,
                        (n, max),
                        port_index,
                    ),
                    None => rx_frame::Received::Dropped,
                }
            };
            if copied && !matches!(got, rx_frame::Received::NoRoom) {
                self.copied = None;
            }
            match got {
                rx_frame::Received::Frames(k) => n += k,
                rx_frame::Received::Dropped => self.stats.dropped += 1,
                // Leave the frame for the next burst, unread.
                rx_frame::Received::NoRoom => break,
            }
            self.release_slot();
        }
        n
    }

    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        _now_ns: u64,
    ) -> Result<(), IoError> {
        let max = self.max_tx_frame();
        // Without the headers, or without the second socket that sends
        // what a ring frame cannot hold (it failed to open), what a peer
        // left undone is finished here.
        let unsendable = || self.join.is_none() && tx.iter().any(|m| m.len() > max);
        if !self.vnet || unsendable() {
            self.stats.dropped += offload::resolve(tx, &mut self.scratch, pool);
        }
        let skip = if self.vnet { vnet::LEN } else { 0 };
        let mut queued = 0usize;
        let mut i = 0;
        while i < tx.len() {
            // Buffers cut from one super-frame leave as one again through
            // the second socket ([`coalesce`]), after what the ring holds.
            if self.join.is_some() {
                let end = tx.len().min(i + vnet::MAX_JOIN);
                let n = coalesce::run(&tx[i..end], 65_535).max(1);
                let joined = match n {
                    1 if tx[i].len() > max => Some(tx[i].offload),
                    1 => None,
                    _ => coalesce::merge_head(&mut tx[i..i + n]),
                };
                if let Some(off) = joined {
                    // A large buffer's super-frame, or buffers cut from one.
                    if queued > 0 {
                        self.kick()?;
                        queued = 0;
                    }
                    self.send_joined(&off, &tx[i..i + n]);
                    i += n;
                    continue;
                }
            }
            let m = &tx[i];
            i += 1;
            let data = m.data();
            let vh = if self.vnet {
                vnet::emit(&m.offload, data)
            } else {
                Some([0; vnet::LEN])
            };
            let status = self.tx_status(self.tx_head).load(Ordering::Acquire);
            let Some(vh) = vh.filter(|_| {
                data.len() >= 14
                    && data.len() <= max
                    && status & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) == 0
            }) else {
                // Too short, too long, or the ring is full.
                self.stats.dropped += 1;
                continue;
            };
            let frame = self.tx_frame(self.tx_head);
            let len = skip + data.len();
            // SAFETY: the frame's status is neither SEND_REQUEST nor SENDING,
            // so the kernel is done with it and will not read it before we
            // publish SEND_REQUEST below. `TX_DATA_OFF + skip + len <= frame
            // size` was checked (`len <= max`), so the copies and the header
            // writes stay inside this frame of the mapping.
            unsafe {
                std::ptr::copy_nonoverlapping(vh.as_ptr(), frame.add(TX_DATA_OFF), skip);
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    frame.add(TX_DATA_OFF + skip),
                    data.len(),
                );
                let h = frame.cast::<libc::tpacket2_hdr>();
                std::ptr::addr_of_mut!((*h).tp_len).write_unaligned(len as u32);
                std::ptr::addr_of_mut!((*h).tp_snaplen).write_unaligned(len as u32);
            }
            // Release: the bytes above are visible before the kernel sees
            // the request.
            self.tx_status(self.tx_head)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.tx_head = (self.tx_head + 1) % self.tx_frames;
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += data.len() as u64;
            queued += 1;
        }
        for m in tx.drain(..) {
            pool.put(m);
        }
        if queued > 0 || self.kick_pending {
            self.kick()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), IoError> {
        if self.kick_pending {
            self.kick()?;
        }
        Ok(())
    }

    fn rx_control(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        self.read_control(pool, rx, max, port_index)
    }

    /// The ring socket (readable once a slot is filled or a super-frame is
    /// queued for `recvmsg`) and the control socket, if any.
    fn wait_fds<'a>(&'a self, fds: &mut Vec<BorrowedFd<'a>>) -> bool {
        fds.push(self.fd.as_fd());
        if let Some(c) = &self.control {
            fds.push(c.fd.as_fd());
        }
        true
    }

    fn stats(&self) -> PortStats {
        let read = |fd: &OwnedFd, drops: &Cell<u64>| {
            let st =
                getsockopt::<libc::tpacket_stats>(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS);
            if let Ok(st) = st {
                drops.set(drops.get() + u64::from(st.tp_drops));
            }
            drops.get()
        };
        let control = self.control.as_ref().map_or(0, |c| read(&c.fd, &c.drops));
        PortStats {
            dropped: self.stats.dropped + read(&self.fd, &self.ring_drops) + control,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_the_kernel_layout() {
        assert_eq!(offset_of!(libc::tpacket2_hdr, tp_status), 0);
        assert_eq!(HDR_LEN, 32);
        assert_eq!(TX_DATA_OFF, 32);
        // tpacket_rcv: TPACKET_ALIGN(52 + 16) + 10 for an Ethernet frame.
        assert_eq!(RX_NET_OFF, 90);
    }

    #[test]
    fn bad_queue_numbers_are_rejected_before_any_syscall() {
        assert!(matches!(
            AfPacketPort::open("lo", 2, 2),
            Err(IoError::Setup { .. })
        ));
        assert!(matches!(
            AfPacketPort::open("lo", 0, 0),
            Err(IoError::Setup { .. })
        ));
    }
}
