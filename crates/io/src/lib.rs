//! Port drivers behind one trait.
//!
//! A driver moves frames between the outside and [`Mbuf`]s from the
//! engine's pool. Every driver copies: a received frame is copied into an
//! `Mbuf`, a sent one is copied out of it and the `Mbuf` goes back to the
//! pool (zero-copy into `Mbuf`s is future work).
//!
//! | driver | module | what it is for |
//! |---|---|---|
//! | [`MemoryPort`] | [`memory`] | replays a pcap without end, discards what it sends: the benchmark port |
//! | [`PcapPort`] | [`pcap`] | reads and writes pcap files: the offline test port |
//! | [`AfPacketPort`] | [`af_packet`] | TPACKET_V2 mmap rings on any Linux interface: the fallback that works everywhere |
//! | [`AfXdpPort`] | [`af_xdp`] | AF_XDP sockets fed by our own six-instruction XDP program: kernel bypass |
//! | [`TapPort`] | [`tap`] | a TAP device: control-plane mirrors and labs |
//! | [`VhostUserPort`] | [`vhost_user`] | the vhost-user backend of a VM's virtio-net device (QEMU `-netdev vhost-user`) |
//!
//! [`tools`] holds the pfsend / pfcount-style generator and counter that
//! `vrhost gen` / `vrhost count` run on any of them; [`netdev`] reads and sets
//! interface properties (MAC, MTU, up); [`netns`] moves a thread into a
//! network namespace. [`clock`] and [`mod@prefetch`] are the two CPU
//! instructions the sans-IO engine is handed by the runtime: the time-stamp
//! counter and the cache prefetch.
//!
//! # Unsafe code
//!
//! This is the only crate of the workspace that may contain `unsafe`. It is
//! denied crate-wide and allowed per module only where the kernel is
//! reached through raw system calls and shared ring memory (`sys`, `netdev`,
//! `netns`, `af_packet`, `af_xdp`, `tap`, `wait`), and for the two CPU instructions
//! (`clock`, `prefetch`). Every block carries a
//! `// SAFETY:` comment; `clippy::undocumented_unsafe_blocks` is denied.

pub mod af_packet;
pub mod af_xdp;
mod bpf;
pub mod clock;
pub mod memory;
pub mod netdev;
pub mod netns;
pub mod paced;
pub mod pcap;
pub mod prefetch;
pub mod rps;
mod rx_frame;
pub mod steer;
mod sys;
pub mod tap;
pub mod tools;
pub mod vhost_user;
pub mod vnet;
pub mod wait;

use std::os::fd::BorrowedFd;

use vrhost_dataplane::{Mbuf, MbufPool};

pub use af_packet::AfPacketPort;
pub use af_xdp::AfXdpPort;
pub use memory::MemoryPort;
pub use netdev::{mac, mtu};
pub use paced::PacedPort;
pub use pcap::{PcapFrames, PcapPort, PcapSink};
pub use prefetch::prefetch;
pub use tap::{TapHold, TapPort};
pub use vhost_user::{VhostUserPort, VhostUserSocket};

/// Errors from drivers.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A pcap file is malformed or of an unsupported kind.
    #[error("{path}: {reason}")]
    Pcap {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A system call on a network interface failed.
    #[error("{ifname}: {call}: {source}")]
    Sys {
        /// The interface (or device path) the call was about.
        ifname: String,
        /// The system call and its option, e.g. `setsockopt(PACKET_RX_RING)`.
        call: &'static str,
        /// The error the kernel returned.
        source: std::io::Error,
    },
    /// An interface cannot be used the way it was asked to, for a reason
    /// that is not one failed call (a queue out of range, a foreign XDP
    /// program in the way, no XDP mode that attaches).
    #[error("{ifname}: {reason}")]
    Setup {
        /// The interface.
        ifname: String,
        /// What is wrong, and what to do about it where we know.
        reason: String,
    },
    /// A traffic-generator spec that cannot be turned into frames.
    #[error("generator: {0}")]
    Spec(String),
}

/// Driver-side counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames handed to the engine.
    pub rx_packets: u64,
    /// Bytes handed to the engine.
    pub rx_bytes: u64,
    /// Frames sent (or, for memory ports, counted and discarded).
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames the driver itself dropped (ring full, truncated on read).
    pub dropped: u64,
}

/// A packet I/O endpoint with one queue.
pub trait Port: Send {
    /// Receives up to `max` frames onto `rx`, with buffers from `pool` and
    /// `Mbuf::port` set to `port_index`. Returns how many arrived.
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize;

    /// Sends every frame on `tx` (draining it) and returns the buffers to
    /// `pool`. `now_ns` stamps captures.
    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        now_ns: u64,
    ) -> Result<(), IoError>;

    /// Receives the control protocols' frames alone (BFD, BGP, ARP, ...),
    /// from a queue of their own where the driver keeps one (`af_packet`
    /// opened with `open_steered`, queue 0), else nothing: what the driver
    /// loop reads from a queue it otherwise leaves unread while every VR
    /// behind it is over its share, so their control planes stay up.
    fn rx_control(
        &mut self,
        _pool: &mut MbufPool,
        _rx: &mut Vec<Mbuf>,
        _max: usize,
        _port_index: u16,
    ) -> usize {
        0
    }

    /// Flushes buffered output.
    fn flush(&mut self) -> Result<(), IoError> {
        Ok(())
    }

    /// Pushes onto `fds` the file descriptors that become readable when
    /// this queue has frames to receive (its control queue's too), for an
    /// idle worker to wait on ([`wait::readable`]) instead of spinning, and
    /// returns true. Returns false, pushing nothing, where the driver has
    /// no such descriptor (memory, pcap and paced ports): a
    /// worker reading such a queue naps briefly instead.
    fn wait_fds<'a>(&'a self, _fds: &mut Vec<BorrowedFd<'a>>) -> bool {
        false
    }

    /// Driver counters.
    fn stats(&self) -> PortStats;
}
