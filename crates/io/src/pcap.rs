//! pcap files: a frame source with timestamps, and a sink.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use vrhost_dataplane::{offload, Mbuf, MbufPool};

use crate::{IoError, Port, PortStats};

/// Reads Ethernet frames and their timestamps from a pcap file.
pub struct PcapFrames {
    path: PathBuf,
    reader: PcapReader<BufReader<File>>,
}

impl PcapFrames {
    /// Opens `path`, which must be a classic pcap file of Ethernet frames.
    pub fn open(path: &Path) -> Result<Self, IoError> {
        let file = File::open(path).map_err(|source| IoError::File {
            path: path.display().to_string(),
            source,
        })?;
        let reader = PcapReader::new(BufReader::new(file)).map_err(|e| IoError::Pcap {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        if reader.header().datalink != DataLink::ETHERNET {
            return Err(IoError::Pcap {
                path: path.display().to_string(),
                reason: format!(
                    "link type {:?}, only Ethernet is supported",
                    reader.header().datalink
                ),
            });
        }
        Ok(PcapFrames {
            path: path.to_path_buf(),
            reader,
        })
    }

    /// The next frame: `(timestamp in ns, bytes)`, or `None` at the end.
    pub fn next_frame(&mut self) -> Option<Result<(u64, Vec<u8>), IoError>> {
        let p = self.reader.next_packet()?;
        Some(match p {
            Ok(p) => Ok((p.timestamp.as_nanos() as u64, p.data.into_owned())),
            Err(e) => Err(IoError::Pcap {
                path: self.path.display().to_string(),
                reason: e.to_string(),
            }),
        })
    }

    /// Every frame of the file.
    pub fn read_all(path: &Path) -> Result<Vec<(u64, Vec<u8>)>, IoError> {
        let mut r = PcapFrames::open(path)?;
        let mut out = Vec::new();
        while let Some(f) = r.next_frame() {
            out.push(f?);
        }
        Ok(out)
    }
}

/// Writes frames to a pcap file that tcpdump opens.
pub struct PcapSink {
    path: PathBuf,
    writer: PcapWriter<BufWriter<File>>,
    stats: PortStats,
    /// Spare vector for [`vrhost_dataplane::offload::resolve`].
    scratch: Vec<Mbuf>,
}

impl PcapSink {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<Self, IoError> {
        let file = File::create(path).map_err(|source| IoError::File {
            path: path.display().to_string(),
            source,
        })?;
        let writer = PcapWriter::new(BufWriter::new(file)).map_err(|e| IoError::Pcap {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(PcapSink {
            path: path.to_path_buf(),
            writer,
            stats: PortStats::default(),
            scratch: Vec::new(),
        })
    }

    /// Appends one frame stamped `ts_ns`.
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), IoError> {
        let p = PcapPacket::new(Duration::from_nanos(ts_ns), frame.len() as u32, frame);
        self.writer.write_packet(&p).map_err(|e| IoError::Pcap {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        })?;
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += frame.len() as u64;
        Ok(())
    }
}

impl Port for PcapSink {
    fn rx_burst(&mut self, _: &mut MbufPool, _: &mut Vec<Mbuf>, _: usize, _: u16) -> usize {
        0
    }

    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        now_ns: u64,
    ) -> Result<(), IoError> {
        // A capture shows what a receiver would get: checksums whole,
        // super-frames as their segments.
        self.stats.dropped += offload::resolve(tx, &mut self.scratch, pool);
        let mut result = Ok(());
        for m in tx.drain(..) {
            if result.is_ok() {
                result = self.write(now_ns, m.data());
            }
            pool.put(m);
        }
        result
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

impl PcapSink {
    /// Flushes and closes the file.
    pub fn finish(self) -> Result<PortStats, IoError> {
        use std::io::Write;
        let stats = self.stats;
        let path = self.path.display().to_string();
        let mut inner = self.writer.into_writer();
        inner
            .flush()
            .map_err(|source| IoError::File { path, source })?;
        Ok(stats)
    }
}

/// A pcap port for `vrhost run`: receives its rx file once, as fast as the
/// worker polls, and writes what it sends to its tx file.
pub struct PcapPort {
    rx: Option<PcapFrames>,
    tx: Option<PcapSink>,
    stats: PortStats,
    /// Spare vector for [`vrhost_dataplane::offload::resolve`].
    scratch: Vec<Mbuf>,
}

impl PcapPort {
    /// Opens the rx file (if any) and creates the tx file (if any).
    pub fn open(rx: Option<&Path>, tx: Option<&Path>) -> Result<Self, IoError> {
        Ok(PcapPort {
            rx: rx.map(PcapFrames::open).transpose()?,
            tx: tx.map(PcapSink::create).transpose()?,
            stats: PortStats::default(),
            scratch: Vec::new(),
        })
    }

    /// Flushes and closes the tx file.
    pub fn finish(self) -> Result<PortStats, IoError> {
        if let Some(tx) = self.tx {
            tx.finish()?;
        }
        Ok(self.stats)
    }
}

impl Port for PcapPort {
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        let Some(src) = self.rx.as_mut() else {
            return 0;
        };
        let mut n = 0;
        while n < max {
            match src.next_frame() {
                Some(Ok((_, frame))) => {
                    let mut m = pool.get();
                    if m.fill(&frame) < frame.len() {
                        self.stats.dropped += 1;
                        pool.put(m);
                        continue;
                    }
                    m.port = port_index;
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += frame.len() as u64;
                    rx.push(m);
                    n += 1;
                }
                Some(Err(e)) => {
                    tracing::warn!("{e}; no more frames from this file");
                    self.rx = None;
                    break;
                }
                None => {
                    self.rx = None;
                    break;
                }
            }
        }
        n
    }

    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        now_ns: u64,
    ) -> Result<(), IoError> {
        self.stats.dropped += offload::resolve(tx, &mut self.scratch, pool);
        let mut result = Ok(());
        for m in tx.drain(..) {
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += m.len() as u64;
            if let (Some(sink), true) = (self.tx.as_mut(), result.is_ok()) {
                result = sink.write(now_ns, m.data());
            }
            pool.put(m);
        }
        result
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}
