//! Port drivers behind one trait.
//!
//! A driver moves frames between the outside and [`Mbuf`]s from the
//! engine's pool. `memory` replays a pcap without end and discards what it
//! sends (the benchmark port); `pcap` reads and writes files (the offline
//! test port).

pub mod memory;
pub mod pcap;

use vrhost_dataplane::{Mbuf, MbufPool};

pub use memory::MemoryPort;
pub use pcap::{PcapFrames, PcapPort, PcapSink};

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

    /// Flushes buffered output.
    fn flush(&mut self) -> Result<(), IoError> {
        Ok(())
    }

    /// Driver counters.
    fn stats(&self) -> PortStats;
}
