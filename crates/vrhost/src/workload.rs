//! Synthetic benchmark workloads: an Internet-like IPv4 table and 64-byte
//! UDP frames to random destinations inside it.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
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

/// What one synthetic frame looks like.
#[derive(Clone, Copy, Debug)]
pub struct FrameSpec {
    pub src_mac: EthernetAddress,
    pub dst_mac: EthernetAddress,
    pub vlan: Option<u16>,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ttl: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

/// A minimum-size (60 bytes + FCS = 64 on the wire) Ethernet/IPv4/UDP frame;
/// with a VLAN tag it is 64 bytes before the FCS.
pub fn udp4_frame(f: &FrameSpec) -> Vec<u8> {
    let l2 = if f.vlan.is_some() { 18 } else { 14 };
    let l3_len = 60 - 14; // IPv4 20 + UDP 8 + 18 bytes of payload
    let mut buf = vec![0u8; l2 + l3_len];
    let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.set_dst_addr(f.dst_mac);
    eth.set_src_addr(f.src_mac);
    match f.vlan {
        Some(vid) => {
            eth.set_ethertype(EtherType::Vlan);
            let mut tag = VlanHeader::new_unchecked(&mut buf[14..18]);
            tag.set_vlan_id(vid);
            tag.set_ethertype(EtherType::Ipv4);
        }
        None => eth.set_ethertype(EtherType::Ipv4),
    }
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

/// `vrhost workload`: writes `table.txt`, `traffic.pcap` and `bench.toml` into `out`.
pub fn run(routes: usize, frames: usize, vrs: usize, out: &Path, seed: u64) -> Result<ExitCode> {
    anyhow::ensure!(
        routes > 0 && routes <= 4_000_000,
        "--routes must be between 1 and 4000000"
    );
    anyhow::ensure!(
        frames > 0 && frames <= 16_000_000,
        "--frames must be between 1 and 16000000"
    );
    anyhow::ensure!(vrs > 0 && vrs <= 64, "--vrs must be between 1 and 64");
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let t = table(routes, &mut rng);
    let mut text = String::with_capacity(routes * 28);
    for (i, (addr, len)) in t.iter().enumerate() {
        let _ = writeln!(text, "{addr}/{len} 10.1.0.{}", 2 + i % GATEWAYS);
    }
    std::fs::write(out.join("table.txt"), text)?;
    let pkts: Vec<Vec<u8>> = (0..frames)
        .map(|i| {
            let dst = inside(t[rng.gen_range(0..t.len())], &mut rng);
            udp4_frame(&FrameSpec {
                src_mac: HOST_MAC,
                dst_mac: IN_MAC,
                vlan: None,
                src: Ipv4Addr::new(10, 0, 0, 2),
                dst,
                ttl: 64,
                src_port: 1024 + (i % 50_000) as u16,
                dst_port: 9,
            })
        })
        .collect();
    write_pcap(&out.join("traffic.pcap"), &pkts)?;
    std::fs::write(out.join("bench.toml"), config(routes, frames, seed, vrs))?;
    println!(
        "wrote {}/table.txt ({routes} routes), traffic.pcap ({frames} frames), bench.toml ({vrs} VR{})",
        out.display(),
        if vrs == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}

/// The bench config: `vrs` VRs, each with its own "in" and "out" memory
/// port, the whole table and the whole pcap. One VR's ports are "in" and
/// "out" and the router "bench" (what `scripts/bench-l3fwd.sh` expects);
/// with more, the names are numbered.
fn config(routes: usize, frames: usize, seed: u64, vrs: usize) -> String {
    let mut cfg = String::new();
    let _ = writeln!(
        cfg,
        "# Made by `vrhost workload --routes {routes} --frames {frames} --vrs {vrs} --seed {seed}`.\n\
         # {vrs} VR(s), each with the whole table, forward 64-byte UDP from their port \"in\"\n\
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
    for n in &suffixes {
        let _ = writeln!(
            cfg,
            "\n[[router]]\nname = \"bench{n}\"\nroutes_file = \"table.txt\"\n\n\
             \x20 [[router.interface]]\n  name = \"in0\"\n  port = \"in{n}\"\n  addresses = [\"10.0.0.1/24\"]\n\n\
             \x20 [[router.interface]]\n  name = \"out0\"\n  port = \"out{n}\"\n  addresses = [\"10.1.0.1/24\"]"
        );
        for g in 0..GATEWAYS {
            let _ = writeln!(
                cfg,
                "\n  [[router.neighbor]]\n  address = \"10.1.0.{}\"\n  mac = \"02:00:00:00:02:{:02x}\"",
                2 + g,
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
