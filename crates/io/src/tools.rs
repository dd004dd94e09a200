//! pfsend / pfcount-style traffic tools that run on any [`Port`]:
//! [`generate`] sends synthetic UDP flows or replayed pcap frames, flat out
//! or at a packet or bit rate, for a count or a duration; [`count`]
//! receives and counts. `vrhost gen` / `vrhost count` are thin wrappers
//! that print what these report.
//!
//! Both report once a second through a callback and return a summary.
//! Rates count Ethernet frame bytes as handed to the port (no preamble,
//! FCS or gap); `line_bps` adds the 24 bytes per frame an Ethernet wire
//! also spends (8 preamble + 4 FCS + 12 gap).
//!
//! The generator copies pre-built frames into `Mbuf`s through a
//! [`MemoryPort`], so its per-packet cost is one copy, as a real
//! workload's would be.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vrhost_dataplane::mbuf::MAX_FRAME;
use vrhost_dataplane::MbufPool;
use vrhost_wire::{
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr,
    UdpPacket, UdpRepr,
};

use crate::{IoError, MemoryPort, PcapFrames, Port, PortStats};

/// Preamble + start delimiter (8), FCS (4) and inter-frame gap (12).
const WIRE_OVERHEAD: u64 = 24;
/// Smallest Ethernet frame without FCS.
pub const MIN_FRAME: usize = 60;
/// Most distinct flows [`udp_frames`] builds (16 MiB of 64-byte frames).
pub const MAX_FLOWS: u32 = 1 << 18;
const ETH_IP_UDP: usize = 14 + 20 + 8;

/// An inclusive range of IPv4 addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Range {
    /// First address.
    pub first: Ipv4Addr,
    /// Last address (inclusive); at or after `first`.
    pub last: Ipv4Addr,
}

impl Ipv4Range {
    /// A range of one address.
    pub fn single(a: Ipv4Addr) -> Self {
        Ipv4Range { first: a, last: a }
    }

    /// Number of addresses (0 if `last` is before `first`).
    pub fn len(&self) -> u64 {
        let (f, l) = (u32::from(self.first), u32::from(self.last));
        if l < f {
            0
        } else {
            u64::from(l - f) + 1
        }
    }

    /// True when the range holds no address.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th address, wrapping around the range.
    pub fn nth(&self, i: u64) -> Ipv4Addr {
        let n = self.len().max(1);
        Ipv4Addr::from(u32::from(self.first).wrapping_add((i % n) as u32))
    }
}

/// Synthetic UDP/IPv4 traffic: `flows` distinct 5-tuples of frames of
/// `frame_len` bytes.
///
/// Flow `i` goes to the `i`-th destination address, from the
/// `i / |dst|`-th source address; once every address pair is used, the
/// source port counts up from `src_port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpFlows {
    /// Source MAC (the generator's port).
    pub src_mac: [u8; 6],
    /// Destination MAC (the router's interface).
    pub dst_mac: [u8; 6],
    /// Source addresses.
    pub src_ip: Ipv4Range,
    /// Destination addresses.
    pub dst_ip: Ipv4Range,
    /// First source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Distinct flows, 1 to [`MAX_FLOWS`].
    pub flows: u32,
    /// Ethernet frame length without FCS, [`MIN_FRAME`] to `MAX_FRAME`.
    pub frame_len: usize,
}

impl Default for UdpFlows {
    fn default() -> Self {
        UdpFlows {
            src_mac: [0x02, 0, 0, 0, 0, 0x01],
            dst_mac: [0x02, 0, 0, 0, 0, 0x02],
            src_ip: Ipv4Range::single(Ipv4Addr::new(10, 0, 0, 1)),
            dst_ip: Ipv4Range::single(Ipv4Addr::new(10, 1, 0, 1)),
            src_port: 1024,
            dst_port: 9, // discard
            flows: 1,
            frame_len: MIN_FRAME,
        }
    }
}

/// Where generated frames come from.
#[derive(Clone, Debug)]
pub enum GenSource {
    /// Synthetic UDP flows.
    Udp(UdpFlows),
    /// Every frame of a pcap file, replayed in a loop.
    Pcap(PathBuf),
    /// These frames, replayed in a loop.
    Frames(Vec<Vec<u8>>),
}

/// How fast to send.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// As fast as the port takes them.
    Max,
    /// Packets per second.
    Pps(f64),
    /// Frame bits per second (converted to packets with the mean frame length).
    Bps(f64),
}

/// What [`generate`] sends.
#[derive(Clone, Debug)]
pub struct GenSpec {
    /// The frames.
    pub source: GenSource,
    /// The pace.
    pub rate: Rate,
    /// Stop after handing this many frames to the port.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Frames per `tx_burst` (1 to 1024).
    pub burst: usize,
}

impl Default for GenSpec {
    fn default() -> Self {
        GenSpec {
            source: GenSource::Udp(UdpFlows::default()),
            rate: Rate::Max,
            count: None,
            duration: None,
            burst: 32,
        }
    }
}

/// Rates over one reporting interval (about a second) or a whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Frames.
    pub packets: u64,
    /// Frame bytes.
    pub bytes: u64,
    /// Frames the port dropped (ring full, oversize; for `count`, the
    /// kernel's ring drops too).
    pub dropped: u64,
    /// Length of the interval.
    pub elapsed: Duration,
    /// Frames per second.
    pub pps: f64,
    /// Frame bits per second.
    pub bps: f64,
    /// Bits per second on an Ethernet wire (24 more bytes per frame).
    pub line_bps: f64,
}

impl Rates {
    fn new(packets: u64, bytes: u64, dropped: u64, elapsed: Duration) -> Rates {
        let s = elapsed.as_secs_f64();
        let per = |x: f64| if s > 0.0 { x / s } else { 0.0 };
        Rates {
            packets,
            bytes,
            dropped,
            elapsed,
            pps: per(packets as f64),
            bps: per(bytes as f64 * 8.0),
            line_bps: per((bytes + packets * WIRE_OVERHEAD) as f64 * 8.0),
        }
    }

    fn between(a: &PortStats, b: &PortStats, tx: bool, elapsed: Duration) -> Rates {
        let (p, by) = if tx {
            (b.tx_packets - a.tx_packets, b.tx_bytes - a.tx_bytes)
        } else {
            (b.rx_packets - a.rx_packets, b.rx_bytes - a.rx_bytes)
        };
        Rates::new(p, by, b.dropped.saturating_sub(a.dropped), elapsed)
    }
}

/// One second of [`generate`]: frames the port accepted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenSecond {
    /// 1 for the first second, and so on.
    pub second: u64,
    /// The interval's rates.
    pub rates: Rates,
}

/// One second of [`count`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CountSecond {
    /// 1 for the first second, and so on.
    pub second: u64,
    /// The interval's rates.
    pub rates: Rates,
}

/// The whole run of [`generate`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenSummary {
    /// Frames handed to the port (what `count` limits).
    pub offered: u64,
    /// What the port accepted, over the whole run.
    pub rates: Rates,
}

/// The whole run of [`count`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CountSummary {
    /// What arrived, over the whole run; `dropped` includes ring drops.
    pub rates: Rates,
}

/// Builds one frame per flow of `spec`.
pub fn udp_frames(spec: &UdpFlows) -> Result<Vec<Vec<u8>>, IoError> {
    if !(MIN_FRAME..=MAX_FRAME).contains(&spec.frame_len) {
        return Err(IoError::Spec(format!(
            "frame length {} outside {MIN_FRAME}..={MAX_FRAME}",
            spec.frame_len
        )));
    }
    if spec.frame_len - 14 > 65535 {
        return Err(IoError::Spec(format!(
            "frame length {} too long for IPv4",
            spec.frame_len
        )));
    }
    if spec.flows == 0 || spec.flows > MAX_FLOWS {
        return Err(IoError::Spec(format!(
            "{} flows outside 1..={MAX_FLOWS}",
            spec.flows
        )));
    }
    if spec.src_ip.is_empty() || spec.dst_ip.is_empty() {
        return Err(IoError::Spec(
            "an address range ends before it starts".into(),
        ));
    }
    let ndst = spec.dst_ip.len();
    let npairs = ndst.saturating_mul(spec.src_ip.len());
    let ip_len = spec.frame_len - 14;
    let udp_payload = spec.frame_len - ETH_IP_UDP;
    let mut out = Vec::with_capacity(spec.flows as usize);
    for i in 0..u64::from(spec.flows) {
        let dst = spec.dst_ip.nth(i);
        let src = spec.src_ip.nth(i / ndst);
        let sport = spec.src_port.wrapping_add((i / npairs) as u16);
        let mut f = vec![0u8; spec.frame_len];
        let eth = EthernetRepr {
            src_addr: EthernetAddress(spec.src_mac),
            dst_addr: EthernetAddress(spec.dst_mac),
            ethertype: EtherType::Ipv4,
        };
        eth.emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            protocol: IpProtocol::Udp,
            payload_len: ip_len - 20,
            ttl: 64,
            dscp_ecn: 0,
            ident: i as u16,
            dont_frag: false,
        };
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut f[14..]));
        let udp = UdpRepr {
            src_port: sport,
            dst_port: spec.dst_port,
        };
        let mut u = UdpPacket::new_unchecked(&mut f[34..]);
        udp.emit(&mut u, udp_payload);
        u.fill_checksum_v4(&src, &dst);
        out.push(f);
    }
    Ok(out)
}

fn source_frames(source: &GenSource) -> Result<Vec<Vec<u8>>, IoError> {
    let frames = match source {
        GenSource::Udp(u) => udp_frames(u)?,
        GenSource::Pcap(p) => PcapFrames::read_all(p)?
            .into_iter()
            .map(|(_, f)| f)
            .collect(),
        GenSource::Frames(f) => f.clone(),
    };
    if frames.is_empty() {
        return Err(IoError::Spec("no frames to send".into()));
    }
    if let Some(f) = frames.iter().find(|f| f.len() < 14 || f.len() > MAX_FRAME) {
        return Err(IoError::Spec(format!(
            "a {}-byte frame cannot be sent",
            f.len()
        )));
    }
    Ok(frames)
}

/// Sends `spec` on `port` until its count or duration is reached, or
/// `stop` is set. Calls `report` about once a second with what the port
/// accepted that second.
pub fn generate(
    port: &mut dyn Port,
    pool: &mut MbufPool,
    spec: &GenSpec,
    stop: &AtomicBool,
    mut report: impl FnMut(GenSecond),
) -> Result<GenSummary, IoError> {
    let frames = source_frames(&spec.source)?;
    let mean_len = frames.iter().map(Vec::len).sum::<usize>() as f64 / frames.len() as f64;
    let target_pps = match spec.rate {
        Rate::Max => None,
        Rate::Pps(p) if p > 0.0 => Some(p),
        Rate::Bps(b) if b > 0.0 => Some(b / (8.0 * mean_len)),
        _ => return Err(IoError::Spec("rate must be positive".into())),
    };
    let mut src = MemoryPort::from_frames(frames.iter().map(Vec::as_slice));
    drop(frames);
    let burst = spec.burst.clamp(1, 1024);
    let mut batch = Vec::with_capacity(burst);

    let first = port.stats();
    let start = Instant::now();
    let (mut mark_t, mut mark) = (start, first);
    let mut second = 0u64;
    let mut offered = 0u64;
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        let elapsed = now - start;
        if spec.duration.is_some_and(|d| elapsed >= d) || spec.count.is_some_and(|c| offered >= c) {
            break;
        }
        if now - mark_t >= Duration::from_secs(1) {
            let s = port.stats();
            second += 1;
            report(GenSecond {
                second,
                rates: Rates::between(&mark, &s, true, now - mark_t),
            });
            (mark_t, mark) = (now, s);
        }
        let mut n = burst as u64;
        if let Some(c) = spec.count {
            n = n.min(c - offered);
        }
        if let Some(pps) = target_pps {
            let allowed = (elapsed.as_secs_f64() * pps) as u64;
            if allowed <= offered {
                let due = Duration::from_secs_f64((offered + 1) as f64 / pps);
                let wait = due.saturating_sub(elapsed);
                if wait > Duration::from_micros(200) {
                    std::thread::sleep(
                        (wait - Duration::from_micros(100)).min(Duration::from_millis(100)),
                    );
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            n = n.min(allowed - offered);
        }
        src.rx_burst(pool, &mut batch, n as usize, 0);
        port.tx_burst(&mut batch, pool, elapsed.as_nanos() as u64)?;
        offered += n;
    }
    port.flush()?;
    let last = port.stats();
    Ok(GenSummary {
        offered,
        rates: Rates::between(&first, &last, true, start.elapsed()),
    })
}

/// Receives on `port`, counting and discarding, until `stop` is set. Calls
/// `report` about once a second. When nothing arrives for a while it naps
/// 20 µs at a time instead of spinning, so it leaves the CPU to a
/// generator on the same core.
pub fn count(
    port: &mut dyn Port,
    pool: &mut MbufPool,
    stop: &AtomicBool,
    mut report: impl FnMut(CountSecond),
) -> CountSummary {
    let mut rx = Vec::with_capacity(256);
    let first = port.stats();
    let start = Instant::now();
    let (mut mark_t, mut mark) = (start, first);
    let mut second = 0u64;
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let n = port.rx_burst(pool, &mut rx, 256, 0);
        for m in rx.drain(..) {
            pool.put(m);
        }
        if n == 0 {
            idle += 1;
            if idle > 64 {
                std::thread::sleep(Duration::from_micros(20));
            }
        } else {
            idle = 0;
        }
        let now = Instant::now();
        if now - mark_t >= Duration::from_secs(1) {
            let s = port.stats();
            second += 1;
            report(CountSecond {
                second,
                rates: Rates::between(&mark, &s, false, now - mark_t),
            });
            (mark_t, mark) = (now, s);
        }
    }
    let last = port.stats();
    CountSummary {
        rates: Rates::between(&first, &last, false, start.elapsed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryPort;

    #[test]
    fn udp_frames_parse_back_with_the_asked_tuples() {
        let spec = UdpFlows {
            flows: 6,
            frame_len: 64,
            src_ip: Ipv4Range {
                first: Ipv4Addr::new(10, 0, 0, 1),
                last: Ipv4Addr::new(10, 0, 0, 2),
            },
            dst_ip: Ipv4Range {
                first: Ipv4Addr::new(10, 1, 0, 1),
                last: Ipv4Addr::new(10, 1, 0, 2),
            },
            ..UdpFlows::default()
        };
        let frames = udp_frames(&spec).unwrap();
        assert_eq!(frames.len(), 6);
        let mut tuples = Vec::new();
        for f in &frames {
            assert_eq!(f.len(), 64);
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            assert_eq!(
                EthernetRepr::parse(&eth).unwrap().ethertype,
                EtherType::Ipv4
            );
            let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
            let ipr = Ipv4Repr::parse(&ip).unwrap();
            let udp = UdpPacket::new_checked(ip.payload()).unwrap();
            assert!(udp.verify_checksum_v4(&ipr.src_addr, &ipr.dst_addr));
            let u = UdpRepr::parse(&udp).unwrap();
            tuples.push((ipr.src_addr, ipr.dst_addr, u.src_port));
        }
        tuples.sort();
        tuples.dedup();
        assert_eq!(tuples.len(), 6, "every flow distinct");
        // 4 address pairs, then the source port moves on.
        assert!(tuples.iter().any(|t| t.2 == 1025));
    }

    #[test]
    fn bad_specs_are_refused() {
        let bad = |u: UdpFlows| matches!(udp_frames(&u), Err(IoError::Spec(_)));
        assert!(bad(UdpFlows {
            frame_len: 59,
            ..UdpFlows::default()
        }));
        assert!(bad(UdpFlows {
            flows: 0,
            ..UdpFlows::default()
        }));
        assert!(bad(UdpFlows {
            src_ip: Ipv4Range {
                first: Ipv4Addr::new(10, 0, 0, 2),
                last: Ipv4Addr::new(10, 0, 0, 1)
            },
            ..UdpFlows::default()
        }));
    }

    #[test]
    fn generate_stops_at_count_and_counts_everything() {
        let mut sink = MemoryPort::from_frames([]);
        let mut pool = MbufPool::new(64);
        let spec = GenSpec {
            count: Some(1000),
            burst: 64,
            ..GenSpec::default()
        };
        let stop = AtomicBool::new(false);
        let s = generate(&mut sink, &mut pool, &spec, &stop, |_| {}).unwrap();
        assert_eq!(s.offered, 1000);
        assert_eq!(s.rates.packets, 1000);
        assert_eq!(s.rates.bytes, 60_000);
        assert_eq!(pool.available(), pool.allocated(), "every buffer went back");
    }

    #[test]
    fn generate_paces_to_the_asked_rate() {
        let mut sink = MemoryPort::from_frames([]);
        let mut pool = MbufPool::new(64);
        let spec = GenSpec {
            rate: Rate::Pps(2000.0),
            duration: Some(Duration::from_millis(300)),
            ..GenSpec::default()
        };
        let stop = AtomicBool::new(false);
        let s = generate(&mut sink, &mut pool, &spec, &stop, |_| {}).unwrap();
        // 600 at 2000 pps over 0.3 s; allow scheduling slack.
        assert!(
            (450..=650).contains(&s.rates.packets),
            "sent {}",
            s.rates.packets
        );
    }

    #[test]
    fn count_counts_until_stopped() {
        let mut src = MemoryPort::from_frames([&[0u8; 60][..]]);
        let mut pool = MbufPool::new(512);
        let stop = AtomicBool::new(false);
        let s = std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                stop.store(true, Ordering::Relaxed);
            });
            count(&mut src, &mut pool, &stop, |_| {})
        });
        assert!(s.rates.packets > 0);
        assert_eq!(s.rates.bytes, s.rates.packets * 60);
        assert_eq!(pool.available(), pool.allocated(), "every buffer went back");
    }
}
