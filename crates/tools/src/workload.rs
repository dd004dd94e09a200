//! Synthetic benchmark workloads: an Internet-like IPv4 table and 64-byte
//! UDP frames to random destinations inside it.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use pcap_file::pcap::{PcapPacket, PcapWriter};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrhost_wire::checksum;
use vrhost_wire::ethernet::{EtherType, EthernetAddress, EthernetFrame};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use vrhost_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use vrhost_wire::vlan::VlanHeader;

/// Prefix-length mix of the public IPv4 table, in per-mille: about 60% /24,
/// then /22, /23, /21, /20, /19, /16 … (shape of the 2024 RouteViews tables).
const LENGTH_MIX: &[(u8, u32)] = &[
    (24, 600),
    (23, 95),
    (22, 110),
    (21, 45),
    (20, 45),
    (19, 30),
    (18, 15),
    (17, 10),
    (16, 25),
    (15, 5),
    (14, 5),
    (13, 4),
    (12, 3),
    (11, 1),
    (10, 1),
    (9, 1),
    (8, 1),
    (25, 2),
    (26, 1),
    (27, 1),
    (28, 1),
];

fn random_length(rng: &mut SmallRng) -> u8 {
    let total: u32 = LENGTH_MIX.iter().map(|(_, w)| w).sum();
    let mut x = rng.gen_range(0..total);
    for &(len, w) in LENGTH_MIX {
        if x < w {
            return len;
        }
        x -= w;
    }
    24
}

/// `n` distinct prefixes with the Internet length mix, in public unicast
/// space outside 10/8 (which the generated configs use for interfaces).
pub fn table(n: usize, rng: &mut SmallRng) -> Vec<(Ipv4Addr, u8)> {
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let len = random_length(rng);
        let first = loop {
            let o = rng.gen_range(1u32..=223);
            if o != 10 && o != 127 {
                break o;
            }
        };
        let addr = (first << 24) | (rng.gen::<u32>() & 0x00ff_ffff);
        let masked = addr & (u32::MAX << (32 - len));
        if (masked >> 24) != first {
            continue; // a short prefix spilled into another /8; draw again
        }
        if seen.insert((masked, len)) {
            out.push((Ipv4Addr::from(masked), len));
        }
    }
    out
}

/// A random address inside `prefix`.
pub fn inside(prefix: (Ipv4Addr, u8), rng: &mut SmallRng) -> Ipv4Addr {
    let host_bits = 32 - prefix.1 as u32;
    let host = if host_bits == 0 {
        0
    } else {
        rng.gen::<u32>() & (u32::MAX >> (32 - host_bits))
    };
    Ipv4Addr::from(u32::from(prefix.0) | host)
}

/// Prefix-length mix of the public IPv6 table, in per-mille: about half
/// /48, then /32, /44, /40, /36 … (shape of the 2024 RouteViews tables,
/// mostly /32–/48 inside 2000::/3).
const LENGTH_MIX6: &[(u8, u32)] = &[
    (48, 480),
    (32, 120),
    (44, 80),
    (40, 70),
    (36, 40),
    (46, 25),
    (47, 25),
    (42, 20),
    (45, 20),
    (29, 20),
    (56, 20),
    (33, 15),
    (64, 15),
    (34, 10),
    (35, 10),
    (38, 10),
    (28, 10),
    (30, 10),
];

/// `n` distinct IPv6 prefixes with the Internet length mix, in 2000::/3
/// outside 2001:db8::/32 (which the generated configs use for interfaces).
pub fn table6(n: usize, rng: &mut SmallRng) -> Vec<(Ipv6Addr, u8)> {
    const DOC: u128 = 0x2001_0db8 << 96;
    let total: u32 = LENGTH_MIX6.iter().map(|(_, w)| w).sum();
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let mut x = rng.gen_range(0..total);
        let len = LENGTH_MIX6
            .iter()
            .find(|&&(_, w)| {
                let hit = x < w;
                x = x.saturating_sub(w);
                hit
            })
            .map_or(48, |&(l, _)| l);
        // 2000::/3: the top three bits 001.
        let addr = (1u128 << 125) | (rng.gen::<u128>() >> 3);
        let masked = addr & (u128::MAX << (128 - u32::from(len)));
        let covers_doc = (masked ^ DOC) >> (128 - u32::from(len.min(32))) == 0;
        if !covers_doc && seen.insert((masked, len)) {
            out.push((Ipv6Addr::from(masked), len));
        }
    }
    out
}

/// A random address inside the IPv6 `prefix`.
pub fn inside6(prefix: (Ipv6Addr, u8), rng: &mut SmallRng) -> Ipv6Addr {
    let host = u128::MAX.checked_shr(u32::from(prefix.1)).unwrap_or(0);
    Ipv6Addr::from(u128::from(prefix.0) | (rng.gen::<u128>() & host))
}

/// A random address inside `prefix`, of either family.
pub fn inside_ip(prefix: (IpAddr, u8), rng: &mut SmallRng) -> IpAddr {
    match prefix.0 {
        IpAddr::V4(a) => IpAddr::V4(inside((a, prefix.1), rng)),
        IpAddr::V6(a) => IpAddr::V6(inside6((a, prefix.1), rng)),
    }
}

/// A UDP frame of either family: [`udp4_frame`], or for IPv6 addresses the
/// smallest UDP/IPv6 frame, 62 bytes (66 on the wire) untagged, with the
/// TTL as hop limit.
pub fn udp_frame(f: &FrameSpec, src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let (src, dst) = match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => return udp4_frame(&FrameSpec { src, dst, ..*f }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => (src, dst),
        // Mixed families: the IPv4 frame of the spec.
        _ => return udp4_frame(f),
    };
    let l2 = if f.vlan.is_some() { 18 } else { 14 };
    let mut buf = vec![0u8; l2 + 40 + 8];
    write_l2(&mut buf, f, EtherType::Ipv6);
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Udp,
        payload_len: 8,
        hop_limit: f.ttl,
    };
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut buf[l2..l2 + 40]));
    let udp = &mut buf[l2 + 40..];
    udp[0..2].copy_from_slice(&f.src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&f.dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&8u16.to_be_bytes());
    let sum = checksum::pseudo_header_v6(&src, &dst, 17, 8) + checksum::sum(udp);
    let c = !checksum::fold(sum);
    udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    buf
}

/// Writes the Ethernet header (and tag) of `f` for `ethertype` into `buf`.
fn write_l2(buf: &mut [u8], f: &FrameSpec, ethertype: EtherType) {
    let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.set_dst_addr(f.dst_mac);
    eth.set_src_addr(f.src_mac);
    match f.vlan {
        Some(vid) => {
            eth.set_ethertype(EtherType::Vlan);
            let mut tag = VlanHeader::new_unchecked(&mut buf[14..18]);
            tag.set_vlan_id(vid);
            tag.set_ethertype(ethertype);
        }
        None => eth.set_ethertype(ethertype),
    }
}

/// The family of a synthetic workload's tables and frames (`vrhost
/// workload --family`, `vrhost bench --family`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Internet-like IPv4 tables (about 60% /24), 64-byte UDP/IPv4 frames.
    Ipv4,
    /// Internet-like IPv6 tables (about half /48, inside 2000::/3),
    /// 62-byte UDP/IPv6 frames (the smallest).
    Ipv6,
}

/// What one synthetic frame looks like.
#[derive(Clone, Copy, Debug)]
pub struct FrameSpec {
    /// Ethernet source.
    pub src_mac: EthernetAddress,
    /// Ethernet destination.
    pub dst_mac: EthernetAddress,
    /// 802.1Q VLAN ID, or untagged.
    pub vlan: Option<u16>,
    /// IPv4 source.
    pub src: Ipv4Addr,
    /// IPv4 destination.
    pub dst: Ipv4Addr,
    /// IPv4 time to live.
    pub ttl: u8,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

/// A minimum-size (60 bytes + FCS = 64 on the wire) Ethernet/IPv4/UDP frame;
/// with a VLAN tag it is 64 bytes before the FCS.
pub fn udp4_frame(f: &FrameSpec) -> Vec<u8> {
    udp4_packet(f, 60 - 14) // IPv4 20 + UDP 8 + 18 bytes of payload
}

/// An Ethernet/IPv4/UDP frame whose IPv4 packet is `l3_len` bytes (at
/// least 28), its payload counting up from 0.
pub fn udp4_packet(f: &FrameSpec, l3_len: usize) -> Vec<u8> {
    let l2 = if f.vlan.is_some() { 18 } else { 14 };
    let l3_len = l3_len.max(28);
    let mut buf = vec![0u8; l2 + l3_len];
    write_l2(&mut buf, f, EtherType::Ipv4);
    let ip = Ipv4Repr {
        src_addr: f.src,
        dst_addr: f.dst,
        protocol: IpProtocol::Udp,
        payload_len: l3_len - 20,
        ttl: f.ttl,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: false,
    };
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[l2..l2 + 20]));
    let udp = &mut buf[l2 + 20..];
    let udp_len = udp.len() as u16;
    udp[0..2].copy_from_slice(&f.src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&f.dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    for (i, b) in udp[8..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let sum = checksum::pseudo_header_v4(&f.src, &f.dst, 17, udp_len as u32) + checksum::sum(udp);
    let c = !checksum::fold(sum);
    udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    buf
}

/// Writes frames to a pcap file, 1 µs apart.
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(file))?;
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_micros(i as u64),
            f.len() as u32,
            f,
        ))?;
    }
    Ok(())
}

const IN_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const OUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x01, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const GATEWAYS: usize = 4;

/// `vrhost workload`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of prefixes (up to 1,000,000+).
    #[arg(long, default_value_t = 1000)]
    pub routes: usize,
    /// Distinct frames in the pcap.
    #[arg(long, default_value_t = 65536)]
    pub frames: usize,
    /// VRs in bench.toml, each with the whole table and its own pair of
    /// memory ports replaying the whole pcap (up to 64).
    #[arg(long, default_value_t = 1)]
    pub vrs: usize,
    /// Output directory (created).
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The family of the table and frames: IPv4 (60-byte frames, about 60%
    /// /24) or IPv6 (62-byte frames, about half /48, inside 2000::/3).
    #[arg(long, value_enum, default_value = "ipv4")]
    pub family: Family,
    /// Tag every frame, and every VR's interfaces, with this VLAN (1-4094).
    #[arg(long)]
    pub vlan: Option<u16>,
}

/// `vrhost workload`: writes `table.txt`, `traffic.pcap` and `bench.toml` into `out`.
pub fn run(a: Args) -> Result<ExitCode> {
    let Args {
        routes,
        frames,
        vrs,
        ref out,
        seed,
        family,
        vlan,
    } = a;
    anyhow::ensure!(
        routes > 0 && routes <= 4_000_000,
        "--routes must be between 1 and 4000000"
    );
    anyhow::ensure!(
        frames > 0 && frames <= 16_000_000,
        "--frames must be between 1 and 16000000"
    );
    anyhow::ensure!(vrs > 0 && vrs <= 64, "--vrs must be between 1 and 64");
    anyhow::ensure!(
        vlan.is_none_or(|v| (1..=4094).contains(&v)),
        "--vlan must be between 1 and 4094"
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let v6 = family == Family::Ipv6;
    let t: Vec<(IpAddr, u8)> = if v6 {
        table6(routes, &mut rng)
            .into_iter()
            .map(|(a, l)| (a.into(), l))
            .collect()
    } else {
        table(routes, &mut rng)
            .into_iter()
            .map(|(a, l)| (a.into(), l))
            .collect()
    };
    let mut text = String::with_capacity(routes * 28);
    for (i, (addr, len)) in t.iter().enumerate() {
        let _ = writeln!(text, "{addr}/{len} {}", gateway(v6, i % GATEWAYS));
    }
    std::fs::write(out.join("table.txt"), text)?;
    let host: IpAddr = if v6 {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).into()
    } else {
        Ipv4Addr::new(10, 0, 0, 2).into()
    };
    let pkts: Vec<Vec<u8>> = (0..frames)
        .map(|i| {
            let dst = inside_ip(t[rng.gen_range(0..t.len())], &mut rng);
            let spec = FrameSpec {
                src_mac: HOST_MAC,
                dst_mac: IN_MAC,
                vlan,
                src: Ipv4Addr::new(10, 0, 0, 2),
                dst: Ipv4Addr::UNSPECIFIED,
                ttl: 64,
                src_port: 1024 + (i % 50_000) as u16,
                dst_port: 9,
            };
            udp_frame(&spec, host, dst)
        })
        .collect();
    write_pcap(&out.join("traffic.pcap"), &pkts)?;
    std::fs::write(out.join("bench.toml"), config(&a))?;
    println!(
        "wrote {}/table.txt ({routes} {} routes), traffic.pcap ({frames} frames{}), bench.toml ({vrs} VR{})",
        out.display(),
        if v6 { "IPv6" } else { "IPv4" },
        vlan.map(|v| format!(", VLAN {v}")).unwrap_or_default(),
        if vrs == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}

/// Gateway `g` (of [`GATEWAYS`]) behind port "out": 10.1.0.(2+g) or
/// 2001:db8:1::(2+g).
fn gateway(v6: bool, g: usize) -> IpAddr {
    if v6 {
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2 + g as u16).into()
    } else {
        Ipv4Addr::new(10, 1, 0, 2 + g as u8).into()
    }
}

/// The bench config: `vrs` VRs, each with its own "in" and "out" memory
/// port, the whole table and the whole pcap. One VR's ports are "in" and
/// "out" and the router "bench" (what `scripts/bench-l3fwd.sh` expects);
/// with more, the names are numbered.
fn config(a: &Args) -> String {
    let Args {
        routes,
        frames,
        seed,
        vrs,
        vlan,
        ..
    } = *a;
    let v6 = a.family == Family::Ipv6;
    let mut cfg = String::new();
    let flags = format!(
        "{}{}",
        if v6 { " --family ipv6" } else { "" },
        vlan.map(|v| format!(" --vlan {v}")).unwrap_or_default()
    );
    let _ = writeln!(
        cfg,
        "# Made by `vrhost workload --routes {routes} --frames {frames} --vrs {vrs} --seed {seed}{flags}`.\n\
         # {vrs} VR(s), each with the whole table, forward minimum-size UDP from their port \"in\"\n\
         # to {GATEWAYS} gateways on their port \"out\"."
    );
    // One VR keeps the plain names; more are numbered.
    let suffixes: Vec<String> = match vrs {
        1 => vec![String::new()],
        _ => (0..vrs).map(|v| v.to_string()).collect(),
    };
    for n in &suffixes {
        let _ = writeln!(
            cfg,
            "\n[[port]]\nname = \"in{n}\"\ndriver = \"memory\"\nrx = \"traffic.pcap\"\nmac = \"{IN_MAC}\"\n\n\
             [[port]]\nname = \"out{n}\"\ndriver = \"memory\"\nmac = \"{OUT_MAC}\""
        );
    }
    let vlan_line = vlan.map(|v| format!("  vlan = {v}\n")).unwrap_or_default();
    for n in &suffixes {
        let _ = writeln!(
            cfg,
            "\n[[router]]\nname = \"bench{n}\"\nroutes_file = \"table.txt\"\n\n\
             \x20 [[router.interface]]\n  name = \"in0\"\n  port = \"in{n}\"\n{vlan_line}  addresses = [\"10.0.0.1/24\", \"2001:db8::1/64\"]\n\n\
             \x20 [[router.interface]]\n  name = \"out0\"\n  port = \"out{n}\"\n{vlan_line}  addresses = [\"10.1.0.1/24\", \"2001:db8:1::1/64\"]"
        );
        for g in 0..GATEWAYS {
            let _ = writeln!(
                cfg,
                "\n  [[router.neighbor]]\n  address = \"{}\"\n  mac = \"02:00:00:00:02:{:02x}\"",
                gateway(v6, g),
                2 + g
            );
        }
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_the_internet_mix_and_no_duplicates() {
        let mut rng = SmallRng::seed_from_u64(7);
        let t = table(20_000, &mut rng);
        let set: HashSet<_> = t.iter().collect();
        assert_eq!(set.len(), t.len());
        let share24 = t.iter().filter(|(_, l)| *l == 24).count() as f64 / t.len() as f64;
        assert!((0.55..0.65).contains(&share24), "{share24}");
        for (a, l) in &t {
            let o = a.octets()[0];
            assert!(o != 10 && o != 127 && o != 0 && o < 224);
            assert_eq!(
                u32::from(*a) & !(u32::MAX << (32 - l)),
                0,
                "host bits in {a}/{l}"
            );
        }
    }

    #[test]
    fn table6_has_the_internet_mix_inside_2000_3_and_not_the_documentation_block() {
        let mut rng = SmallRng::seed_from_u64(7);
        let t = table6(20_000, &mut rng);
        let set: HashSet<_> = t.iter().collect();
        assert_eq!(set.len(), t.len());
        let share48 = t.iter().filter(|(_, l)| *l == 48).count() as f64 / t.len() as f64;
        assert!((0.43..0.53).contains(&share48), "{share48}");
        let doc: Ipv6Addr = "2001:db8::".parse().unwrap();
        for &(a, l) in &t {
            let bits = u128::from(a);
            assert_eq!(bits >> 125, 1, "{a}/{l} outside 2000::/3");
            assert_eq!(
                bits & !(u128::MAX << (128 - u32::from(l))),
                0,
                "host bits in {a}/{l}"
            );
            let covers = (bits ^ u128::from(doc)) >> (128 - u32::from(l.min(32))) == 0;
            assert!(!covers, "{a}/{l} overlaps 2001:db8::/32");
            let inner = inside6((a, l), &mut rng);
            assert_eq!(
                u128::from(inner) >> (128 - u32::from(l)),
                bits >> (128 - u32::from(l))
            );
        }
    }

    #[test]
    fn ipv6_frames_are_valid_udp() {
        let spec = FrameSpec {
            src_mac: HOST_MAC,
            dst_mac: IN_MAC,
            vlan: Some(7),
            src: Ipv4Addr::UNSPECIFIED,
            dst: Ipv4Addr::UNSPECIFIED,
            ttl: 64,
            src_port: 1,
            dst_port: 9,
        };
        let (src, dst): (Ipv6Addr, Ipv6Addr) =
            ("2001:db8::2".parse().unwrap(), "2a00::1".parse().unwrap());
        let f = udp_frame(&spec, src.into(), dst.into());
        assert_eq!(f.len(), 18 + 40 + 8);
        let ip = Ipv6Packet::new_checked(&f[18..]).unwrap();
        assert_eq!(
            (ip.src_addr(), ip.dst_addr(), ip.hop_limit()),
            (src, dst, 64)
        );
        let sum = checksum::pseudo_header_v6(&src, &dst, 17, 8) + checksum::sum(&f[18 + 40..]);
        assert_eq!(checksum::fold(sum), 0xffff, "UDP checksum verifies");
    }

    #[test]
    fn frames_are_valid_64_byte_udp() {
        let f = udp4_frame(&FrameSpec {
            src_mac: HOST_MAC,
            dst_mac: IN_MAC,
            vlan: None,
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::new(1, 2, 3, 4),
            ttl: 64,
            src_port: 1,
            dst_port: 9,
        });
        assert_eq!(f.len(), 60);
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.total_len(), 46);
        let sum = checksum::pseudo_header_v4(&ip.src_addr(), &ip.dst_addr(), 17, 26)
            + checksum::sum(ip.payload());
        assert_eq!(checksum::fold(sum), 0xffff, "UDP checksum verifies");
    }
}
