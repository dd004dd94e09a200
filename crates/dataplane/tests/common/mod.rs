//! A two-tenant test topology and frame builders for the golden scenarios.
//!
//! ```text
//!            port 0 (untagged)               port 1 (VLAN 100 red, VLAN 200 blue)
//!  host ── red0 10.0.0.1/24 2001:db8::1/64 ── red ── red1 10.1.0.1/24 2001:db8:1::1/64 (mtu 1400) ── gw 10.1.0.2 / 2001:db8:1::2
//!  host ── blue0 (same addresses, port 2) ──── blue ── blue1 (same addresses, VLAN 200) ─────────────── gw (other MACs)
//! ```
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use vrhost_dataplane::{
    Engine, EngineSpec, InterfaceSpec, Limits, PortSpec, RouteTarget, RouterSpec, TxBatch,
};
use vrhost_wire::arp::{ArpPacket, ArpRepr, Operation};
use vrhost_wire::checksum;
use vrhost_wire::ethernet::{EtherType, EthernetAddress, EthernetFrame};
use vrhost_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use vrhost_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use vrhost_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use vrhost_wire::vlan::VlanHeader;

pub const SEC: u64 = 1_000_000_000;
pub const RED0_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
pub const RED1_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x11]);
pub const BLUE0_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
pub const BLUE1_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x12]);
pub const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0xaa, 0, 0, 0, 0x02]);
pub const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0xbb, 0, 0, 0, 0x02]);
pub const BLUE_GW_MAC: EthernetAddress = EthernetAddress([0x02, 0xcc, 0, 0, 0, 0x02]);
pub const HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const RED0: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const RED1: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
pub const GW: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
pub const REMOTE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);
pub const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
pub const RED0_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
pub const GW6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
pub const REMOTE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 9);
pub const RED1_MTU: u16 = 1400;

fn router(
    name: &str,
    ports: (u16, u16),
    vlan: u16,
    macs: (EthernetAddress, EthernetAddress),
    gw_mac: EthernetAddress,
    limits: Limits,
) -> RouterSpec {
    RouterSpec {
        name: name.into(),
        interfaces: vec![
            InterfaceSpec {
                inner_vlan: None,
                tpid: Default::default(),
                urpf: Default::default(),
                name: format!("{name}0"),
                port: ports.0,
                vlan: None,
                mac: macs.0,
                mtu: 1500,
                addrs4: vec![(RED0, 24)],
                addrs6: vec![(RED0_6, 64)],
                filters: Default::default(),
            },
            InterfaceSpec {
                inner_vlan: None,
                tpid: Default::default(),
                urpf: Default::default(),
                name: format!("{name}1"),
                port: ports.1,
                vlan: Some(vlan),
                mac: macs.1,
                mtu: RED1_MTU,
                addrs4: vec![(RED1, 24)],
                addrs6: vec![(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1), 64)],
                filters: Default::default(),
            },
        ],
        routes4: vec![
            (
                "192.0.2.0/24".parse().unwrap(),
                RouteTarget::Via(IpAddr::V4(GW)),
            ),
            ("203.0.113.0/24".parse().unwrap(), RouteTarget::Blackhole),
            ("198.51.100.0/24".parse().unwrap(), RouteTarget::Unreachable),
        ],
        routes6: vec![
            (
                "2001:db8:ff::/48".parse().unwrap(),
                RouteTarget::Via(IpAddr::V6(GW6)),
            ),
            (
                "2001:db8:dead::/48".parse().unwrap(),
                RouteTarget::Unreachable,
            ),
        ],
        neighbors: vec![(IpAddr::V4(GW), gw_mac), (IpAddr::V6(GW6), gw_mac)],
        limits,
        filters: Vec::new(),
    }
}

pub fn spec(limits: Limits) -> EngineSpec {
    spec2(limits, limits)
}

/// The two-tenant topology with different limits for red and blue.
pub fn spec2(red: Limits, blue: Limits) -> EngineSpec {
    EngineSpec {
        ports: vec![
            PortSpec {
                name: "p0".into(),
                mtu: 1500,
            },
            PortSpec {
                name: "p1".into(),
                mtu: 1500,
            },
            PortSpec {
                name: "p2".into(),
                mtu: 1500,
            },
        ],
        routers: vec![
            router("red", (0, 1), 100, (RED0_MAC, RED1_MAC), GW_MAC, red),
            router(
                "blue",
                (2, 1),
                200,
                (BLUE0_MAC, BLUE1_MAC),
                BLUE_GW_MAC,
                blue,
            ),
        ],
    }
}

pub fn engine() -> Engine {
    Engine::new(&spec(Limits {
        icmp_rate: 1000,
        ..Limits::default()
    }))
    .unwrap()
}

/// A frame that left: its port and bytes.
#[derive(Clone, Debug)]
pub struct Out {
    pub port: u16,
    pub frame: Vec<u8>,
}

impl Out {
    pub fn eth(&self) -> EthernetFrame<&[u8]> {
        EthernetFrame::new_checked(&self.frame[..]).unwrap()
    }
    /// VLAN ID, if tagged.
    pub fn vlan(&self) -> Option<u16> {
        (self.eth().ethertype() == EtherType::Vlan).then(|| {
            VlanHeader::new_checked(&self.frame[14..18])
                .unwrap()
                .vlan_id()
        })
    }
    pub fn l3(&self) -> &[u8] {
        if self.vlan().is_some() {
            &self.frame[18..]
        } else {
            &self.frame[14..]
        }
    }
    pub fn ethertype(&self) -> EtherType {
        match self.vlan() {
            Some(_) => VlanHeader::new_checked(&self.frame[14..18])
                .unwrap()
                .ethertype(),
            None => self.eth().ethertype(),
        }
    }
    pub fn ipv4(&self) -> Ipv4Packet<&[u8]> {
        let p = Ipv4Packet::new_checked(self.l3()).expect("valid IPv4");
        assert!(p.verify_checksum(), "IPv4 header checksum");
        p
    }
    pub fn ipv6(&self) -> Ipv6Packet<&[u8]> {
        Ipv6Packet::new_checked(self.l3()).expect("valid IPv6")
    }
    pub fn icmpv4(&self) -> Icmpv4Repr<'_> {
        let ip = Ipv4Packet::new_checked(self.l3()).unwrap();
        let hl = ip.header_len() as usize;
        let total = ip.total_len() as usize;
        let icmp = Icmpv4Packet::new_checked(&self.l3()[hl..total]).expect("ICMP");
        Icmpv4Repr::parse(&icmp).expect("ICMP parses with a valid checksum")
    }
    pub fn icmpv6(&self) -> Icmpv6Repr<'_> {
        let ip = self.ipv6();
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let len = ip.payload_len() as usize;
        let icmp = Icmpv6Packet::new_checked(&self.l3()[40..40 + len]).expect("ICMPv6");
        Icmpv6Repr::parse(&src, &dst, &icmp).expect("ICMPv6 parses with a valid checksum")
    }
}

/// Feeds one frame on `port` at time `now` and returns what left.
pub fn send(e: &mut Engine, port: u16, frame: &[u8], now: u64) -> Vec<Out> {
    let mut m = e.pool().get();
    m.fill(frame);
    m.port = port;
    let mut rx = vec![m];
    let mut tx = TxBatch::new(e.port_count());
    e.process_burst(&mut rx, now, &mut tx);
    collect(e, &mut tx)
}

/// Feeds `frames` (port, bytes) as one burst at time `now` and returns what left.
pub fn send_burst(e: &mut Engine, frames: &[(u16, &[u8])], now: u64) -> Vec<Out> {
    let mut rx = Vec::with_capacity(frames.len());
    for &(port, frame) in frames {
        let mut m = e.pool().get();
        m.fill(frame);
        m.port = port;
        rx.push(m);
    }
    let mut tx = TxBatch::new(e.port_count());
    e.process_burst(&mut rx, now, &mut tx);
    collect(e, &mut tx)
}

/// Runs timers at `now` and returns what left.
pub fn poll(e: &mut Engine, now: u64) -> Vec<Out> {
    let mut tx = TxBatch::new(e.port_count());
    e.poll(now, &mut tx);
    collect(e, &mut tx)
}

/// Drains `tx`, port by port in queue order, recycling the buffers.
pub fn collect(e: &mut Engine, tx: &mut TxBatch) -> Vec<Out> {
    let mut out = Vec::new();
    for (p, q) in tx.ports.iter_mut().enumerate() {
        for m in q.drain(..) {
            out.push(Out {
                port: p as u16,
                frame: m.data().to_vec(),
            });
            e.pool().put(m);
        }
    }
    out
}

/// Ethernet (+ optional tag) header followed by `l3`.
pub fn eth(
    dst: EthernetAddress,
    src: EthernetAddress,
    vlan: Option<u16>,
    ethertype: EtherType,
    l3: &[u8],
) -> Vec<u8> {
    let l2 = if vlan.is_some() { 18 } else { 14 };
    let mut f = vec![0xa5; l2 + l3.len()];
    let mut e = EthernetFrame::new_unchecked(&mut f[..]);
    e.set_dst_addr(dst);
    e.set_src_addr(src);
    match vlan {
        Some(v) => {
            e.set_ethertype(EtherType::Vlan);
            let mut t = VlanHeader::new_unchecked(&mut f[14..18]);
            t.set_pcp(0);
            t.set_dei(false);
            t.set_vlan_id(v);
            t.set_ethertype(ethertype);
        }
        None => e.set_ethertype(ethertype),
    }
    f[l2..].copy_from_slice(l3);
    f
}

/// An ARP request or reply from `sha`/`spa` about `tpa`, sent to `dst`,
/// padded to the Ethernet minimum as on the wire.
pub fn arp(
    op: Operation,
    sha: EthernetAddress,
    spa: Ipv4Addr,
    tpa: Ipv4Addr,
    dst: EthernetAddress,
    vlan: Option<u16>,
) -> Vec<u8> {
    let r = ArpRepr {
        operation: op,
        source_hardware_addr: sha,
        source_protocol_addr: spa,
        target_hardware_addr: if op == Operation::Reply {
            dst
        } else {
            EthernetAddress([0; 6])
        },
        target_protocol_addr: tpa,
    };
    let mut b = vec![0xa5; r.buffer_len()];
    r.emit(&mut ArpPacket::new_unchecked(&mut b[..]));
    let mut f = eth(dst, sha, vlan, EtherType::Arp, &b);
    f.resize(f.len().max(60), 0);
    f
}

/// An IPv4 packet with `payload` after a 20-byte header.
pub fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: IpProtocol,
    ttl: u8,
    df: bool,
    payload: &[u8],
) -> Vec<u8> {
    let repr = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: proto,
        payload_len: payload.len(),
        ttl,
        dscp_ecn: 0,
        ident: 0x4242,
        dont_frag: df,
    };
    let mut p = vec![0xa5; 20 + payload.len()];
    repr.emit(&mut Ipv4Packet::new_unchecked(&mut p[..]));
    p[20..].copy_from_slice(payload);
    p
}

/// A UDP datagram (checksum 0: none) with `len` bytes of patterned payload.
pub fn udp(len: usize) -> Vec<u8> {
    let mut u = vec![0u8; 8 + len];
    u[0..2].copy_from_slice(&4000u16.to_be_bytes());
    u[2..4].copy_from_slice(&9u16.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    for (i, b) in u[8..].iter_mut().enumerate() {
        *b = (i * 7) as u8;
    }
    u
}

/// A 20-byte TCP SYN from port 40000 to `dport` with sequence number `seq`
/// (checksum left 0: the data plane punts TCP without looking at it).
pub fn tcp_syn(dport: u16, seq: u32) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[12] = 5 << 4; // data offset: 5 words
    t[13] = 0x02; // SYN
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t
}

/// An ICMP echo request.
pub fn echo4(ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let repr = Icmpv4Repr::EchoRequest {
        ident,
        seq_no: seq,
        data,
    };
    let mut b = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut b[..]));
    b
}

/// A UDP/IPv4 frame from the host into red0.
pub fn udp4_frame(dst: Ipv4Addr, ttl: u8, df: bool, payload_len: usize) -> Vec<u8> {
    eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(HOST, dst, IpProtocol::Udp, ttl, df, &udp(payload_len)),
    )
}

/// An IPv6 packet.
pub fn ipv6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    nh: IpProtocol,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    let repr = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: nh,
        payload_len: payload.len(),
        hop_limit,
    };
    let mut p = vec![0xa5; 40 + payload.len()];
    repr.emit(&mut Ipv6Packet::new_unchecked(&mut p[..]));
    p[40..].copy_from_slice(payload);
    p
}

/// An ICMPv6 message inside IPv6.
pub fn icmpv6(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, repr: &Icmpv6Repr<'_>) -> Vec<u8> {
    let mut b = vec![0xa5; repr.buffer_len()];
    repr.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(&mut b[..]));
    ipv6(src, dst, IpProtocol::Icmpv6, hop_limit, &b)
}

/// A UDP/IPv6 frame from the IPv6 host into red0.
pub fn udp6_frame(dst: Ipv6Addr, hop_limit: u8, payload_len: usize) -> Vec<u8> {
    eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &ipv6(HOST6, dst, IpProtocol::Udp, hop_limit, &udp(payload_len)),
    )
}

/// Recomputes the checksum of an IPv4 header in `frame` at `l3`.
pub fn fix_ipv4_checksum(frame: &mut [u8], l3: usize) {
    let hl = ((frame[l3] & 0x0f) as usize) * 4;
    frame[l3 + 10..l3 + 12].fill(0);
    let c = checksum::checksum(&frame[l3..l3 + hl]);
    frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// The MAC of every VR's host-side interface in [`tagged_vrs`].
pub const DOWN_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
/// The MAC of every VR's gateway-side interface in [`tagged_vrs`].
pub const UP_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x11]);

/// VR `vr`'s host in [`tagged_vrs`].
pub fn host_mac(vr: usize) -> EthernetAddress {
    EthernetAddress([0x02, 0xaa, 0, 0, 0, vr as u8])
}

/// VR `vr`'s gateway in [`tagged_vrs`].
pub fn gw_mac(vr: usize) -> EthernetAddress {
    EthernetAddress([0x02, 0xbb, 0, 0, 0, vr as u8])
}

/// `n` VRs with identical addresses on two ports, one VLAN each per port
/// (VR `i`: port 0 VLAN 10+i toward its host, port 1 VLAN 100+i toward
/// its gateway 10.1.0.2 / 2001:db8:1::2, static neighbors with MAC
/// [`gw_mac`]), each with default routes of both families.
pub fn tagged_vrs(n: usize) -> EngineSpec {
    let iface = |name: String, port: u16, vlan: u16, mac, net: u8| InterfaceSpec {
        inner_vlan: None,
        tpid: Default::default(),
        urpf: Default::default(),
        name,
        port,
        vlan: Some(vlan),
        mac,
        mtu: 1500,
        addrs4: vec![(Ipv4Addr::new(10, net, 0, 1), 24)],
        addrs6: vec![(
            Ipv6Addr::new(0x2001, 0xdb8, u16::from(net), 0, 0, 0, 0, 1),
            64,
        )],
        filters: Default::default(),
    };
    let routers = (0..n)
        .map(|i| RouterSpec {
            name: format!("vr{i}"),
            interfaces: vec![
                iface(format!("down{i}"), 0, 10 + i as u16, DOWN_MAC, 0),
                iface(format!("up{i}"), 1, 100 + i as u16, UP_MAC, 1),
            ],
            routes4: vec![(
                "0.0.0.0/0".parse().unwrap(),
                RouteTarget::Via(IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2))),
            )],
            routes6: vec![(
                "::/0".parse().unwrap(),
                RouteTarget::Via(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2))),
            )],
            neighbors: vec![
                (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)), gw_mac(i)),
                (
                    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2)),
                    gw_mac(i),
                ),
            ],
            limits: Limits {
                icmp_rate: 1_000_000,
                ..Limits::default()
            },
            filters: Vec::new(),
        })
        .collect();
    let port = |name: &str| PortSpec {
        name: name.into(),
        mtu: 1500,
    };
    EngineSpec {
        ports: vec![port("p0"), port("p1")],
        routers,
    }
}
