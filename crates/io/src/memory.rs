//! The `memory` port: replays a pcap without end, copying every frame into
//! a fresh buffer the way a NIC's DMA would; its transmit side counts and
//! discards. It is the benchmark port: no syscall after start.

use std::path::Path;

use vrhost_dataplane::{Mbuf, MbufPool};

use crate::pcap::PcapFrames;
use crate::{IoError, Port, PortStats};

/// Frames held in one contiguous arena, replayed in a loop.
pub struct MemoryPort {
    arena: Vec<u8>,
    /// `(start, len)` of each frame in `arena`.
    frames: Vec<(usize, usize)>,
    next: usize,
    stats: PortStats,
}

impl MemoryPort {
    /// Loads every frame of the pcap at `path`. An empty file is an error:
    /// a port that can never receive is a config mistake.
    pub fn open(path: &Path) -> Result<Self, IoError> {
        let frames = PcapFrames::read_all(path)?;
        if frames.is_empty() {
            return Err(IoError::Pcap {
                path: path.display().to_string(),
                reason: "no frames to replay".into(),
            });
        }
        Ok(Self::from_frames(frames.iter().map(|(_, f)| f.as_slice())))
    }

    /// Builds a port from in-memory frames (the demo and tests use this).
    /// Returns a port that never receives if `frames` is empty.
    pub fn from_frames<'a>(frames: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut arena = Vec::new();
        let mut index = Vec::new();
        for f in frames {
            index.push((arena.len(), f.len()));
            arena.extend_from_slice(f);
            // Start each frame on a cache line, as DMA would.
            arena.resize(arena.len().next_multiple_of(64), 0);
        }
        MemoryPort {
            arena,
            frames: index,
            next: 0,
            stats: PortStats::default(),
        }
    }

    /// Number of distinct frames replayed.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Splits the frames into `n` ports, frame `i` going to port `i % n`.
    pub fn split(self, n: usize) -> Vec<MemoryPort> {
        let n = n.max(1);
        (0..n)
            .map(|q| {
                MemoryPort::from_frames(
                    self.frames
                        .iter()
                        .skip(q)
                        .step_by(n)
                        .map(|&(s, l)| &self.arena[s..s + l]),
                )
            })
            .collect()
    }
}

impl Port for MemoryPort {
    #[inline]
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        if self.frames.is_empty() {
            return 0;
        }
        for _ in 0..max {
            let (start, len) = self.frames[self.next];
            self.next += 1;
            if self.next == self.frames.len() {
                self.next = 0;
            }
            let mut m = pool.get();
            m.fill(&self.arena[start..start + len]);
            m.port = port_index;
            self.stats.rx_bytes += len as u64;
            rx.push(m);
        }
        self.stats.rx_packets += max as u64;
        max
    }

    #[inline]
    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        _now_ns: u64,
    ) -> Result<(), IoError> {
        self.stats.tx_packets += tx.len() as u64;
        for m in tx.drain(..) {
            self.stats.tx_bytes += m.len() as u64;
            pool.put(m);
        }
        Ok(())
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_in_a_loop_with_fresh_buffers() {
        let mut p = MemoryPort::from_frames([&[1u8; 60][..], &[2u8; 64][..]]);
        let mut pool = MbufPool::new(8);
        let mut rx = Vec::new();
        assert_eq!(p.rx_burst(&mut pool, &mut rx, 3, 7), 3);
        assert_eq!(rx[0].data(), &[1u8; 60][..]);
        assert_eq!(rx[1].data(), &[2u8; 64][..]);
        assert_eq!(rx[2].data(), &[1u8; 60][..]);
        assert!(rx.iter().all(|m| m.port == 7));
        p.tx_burst(&mut rx, &mut pool, 0).unwrap();
        assert!(rx.is_empty());
        assert_eq!(p.stats().tx_packets, 3);
        assert_eq!(pool.available(), 8);
    }

    #[test]
    fn split_shares_frames_round_robin() {
        let frames: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 60]).collect();
        let parts = MemoryPort::from_frames(frames.iter().map(|f| f.as_slice())).split(2);
        assert_eq!(parts[0].frame_count(), 3);
        assert_eq!(parts[1].frame_count(), 2);
    }
}
