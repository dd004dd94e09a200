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

    /// A port that never receives: the transmit side of a benchmark, which
    /// counts and discards.
    pub fn sink() -> Self {
        Self::from_frames(std::iter::empty())
    }

    /// Number of distinct frames replayed.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Splits the frames into `n` queues the way RSS would: every frame of one
    /// flow (addresses, protocol and ports) lands in the same queue.
    pub fn split_by_flow(self, n: usize) -> Vec<MemoryPort> {
        let n = n.max(1);
        let mut shares: Vec<Vec<&[u8]>> = vec![Vec::new(); n];
        for &(s, l) in &self.frames {
            let f = &self.arena[s..s + l];
            shares[(flow_hash(f) % n as u64) as usize].push(f);
        }
        shares.into_iter().map(MemoryPort::from_frames).collect()
    }
}

/// A hash of the frame's flow: IPv4/IPv6 addresses, protocol and the first
/// four bytes of the transport header (the ports), after an optional 802.1Q
/// tag. Frames that are not IP hash their Ethernet header.
pub fn flow_hash(f: &[u8]) -> u64 {
    let mut l3 = 14;
    let mut et = f
        .get(12..14)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    if et == 0x8100 {
        l3 = 18;
        et = f
            .get(16..18)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    }
    let key: &[u8] = match et {
        0x0800 => {
            let ihl = f.get(l3).map_or(20, |b| ((b & 0x0f) as usize) * 4);
            match (f.get(l3 + 12..l3 + 20), f.get(l3 + ihl..l3 + ihl + 4)) {
                (Some(addrs), Some(ports)) => {
                    return mix(mix(hash_bytes(addrs), f[l3 + 9] as u64), hash_bytes(ports))
                }
                (Some(addrs), None) => addrs,
                _ => &f[..f.len().min(14)],
            }
        }
        0x86dd => match (f.get(l3 + 8..l3 + 40), f.get(l3 + 40..l3 + 44)) {
            (Some(addrs), Some(ports)) => {
                return mix(mix(hash_bytes(addrs), f[l3 + 6] as u64), hash_bytes(ports))
            }
            (Some(addrs), None) => addrs,
            _ => &f[..f.len().min(14)],
        },
        _ => &f[..f.len().min(14)],
    };
    hash_bytes(key)
}

fn mix(h: u64, v: u64) -> u64 {
    (h.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

fn hash_bytes(b: &[u8]) -> u64 {
    b.chunks(8).fold(0, |h, c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        mix(h, u64::from_le_bytes(w))
    })
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
        // `extend` over a counted range reserves once and writes each buffer
        // in place, with no per-frame capacity check or call.
        let (frames, arena, next, bytes) = (
            &self.frames,
            &self.arena,
            &mut self.next,
            &mut self.stats.rx_bytes,
        );
        rx.extend((0..max).map(|_| {
            let (start, len) = frames[*next];
            *next += 1;
            if *next == frames.len() {
                *next = 0;
            }
            let mut m = pool.get();
            // Every frame starts on a line of the arena and is padded to one.
            let end = (start + len).next_multiple_of(64).min(arena.len());
            m.fill_lines(&arena[start..end], len);
            m.port = port_index;
            *bytes += len as u64;
            m
        }));
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
        self.stats.tx_bytes += tx.iter().map(|m| m.len() as u64).sum::<u64>();
        pool.put_all(tx);
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
    fn split_by_flow_keeps_each_flow_in_one_queue() {
        let frame = |src: u8, sport: u8| {
            let mut f = vec![0u8; 60];
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[14 + 9] = 17;
            f[14 + 12..14 + 16].copy_from_slice(&[10, 0, 0, src]);
            f[34..36].copy_from_slice(&[0, sport]);
            f
        };
        let frames: Vec<Vec<u8>> = (0..64).map(|i| frame(i % 8, i % 16)).collect();
        let queues = MemoryPort::from_frames(frames.iter().map(|f| f.as_slice())).split_by_flow(4);
        assert_eq!(
            queues.iter().map(MemoryPort::frame_count).sum::<usize>(),
            64
        );
        assert!(
            queues.iter().filter(|q| q.frame_count() > 0).count() >= 2,
            "flows spread"
        );
        for f in &frames {
            let owners = queues
                .iter()
                .filter(|q| {
                    q.frames
                        .iter()
                        .any(|&(s, l)| &q.arena[s..s + l] == f.as_slice())
                })
                .count();
            assert_eq!(owners, 1);
        }
    }
}
