//! The fast path, IPv4 and IPv6, changes nothing but speed: the same bursts through an
//! engine with it and one without leave the same frames on the same ports
//! with the same counters, whatever the frames hold.
//!
//! ```text
//!   port 0 ── in0 10.0.0.1/24 ── r ──┬─ out0 10.1.0.1/24 (MTU 1400) ── port 1: gw 10.1.0.2 (static),
//!                                    │                                  host 10.1.0.5 (static), 10.1.0.9 (unresolved)
//!                                    ├─ tag0 10.2.0.1/24 VLAN 7 ──────── port 2: gw 10.2.0.2 (static)
//!                                    └─ out1 10.3.0.1/24 ─────────────── port 3: gw 10.3.0.2 (static)
//!   port 0 ── tin0 10.5.0.1/24 VLAN 5 ── r  (tagged frames in: to out0 a tag is popped,
//!                                            to tag0 rewritten; in0's frames to tag0 get one pushed)
//! ```
//!
//! IPv6 mirrors it: interface `k` holds 2001:db8:k::1/64 (tin0: :5::), with
//! static neighbors 2001:db8:1::2 (gw), 2001:db8:1::5 (host) and
//! 2001:db8:2::2 (behind the tag).

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::{eth, fix_ipv4_checksum, ipv4, send_burst, udp, Out, HOST_MAC, SEC};
use proptest::prelude::*;
use vrhost_dataplane::{
    Action, Engine, EngineSpec, FilterSpec, IfaceId, InterfaceSpec, Limits, PortId, PortRange,
    PortSpec, RouteTarget, RouterSpec, Rule, VrId,
};
use vrhost_fib::IpPrefix;
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::ip::IpProtocol;

const IN_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const OUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x11]);
const TAG_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x21]);
const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0xbb, 0, 0, 0, 0x02]);
const HOST5_MAC: EthernetAddress = EthernetAddress([0x02, 0xbb, 0, 0, 0, 0x05]);
const GW2_MAC: EthernetAddress = EthernetAddress([0x02, 0xcc, 0, 0, 0, 0x02]);
const OUT1_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x31]);
const GW3_MAC: EthernetAddress = EthernetAddress([0x02, 0xdd, 0, 0, 0, 0x02]);

fn iface(
    name: &str,
    port: u16,
    vlan: Option<u16>,
    mac: EthernetAddress,
    mtu: u16,
    a: [u8; 4],
) -> InterfaceSpec {
    InterfaceSpec {
        inner_vlan: None,
        tpid: Default::default(),
        urpf: Default::default(),
        name: name.into(),
        port,
        vlan,
        mac,
        mtu,
        addrs4: vec![(Ipv4Addr::from(a), 24)],
        addrs6: vec![(v6(u16::from(a[1]), 1), 64)],
        filters: Default::default(),
    }
}

/// 2001:db8:`net`::`host`.
fn v6(net: u16, host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, net, 0, 0, 0, 0, host)
}

fn spec() -> EngineSpec {
    let port = |name: &str| PortSpec {
        name: name.into(),
        mtu: 1500,
    };
    let via = |a: [u8; 4]| RouteTarget::Via(IpAddr::V4(Ipv4Addr::from(a)));
    let via6 = |a: Ipv6Addr| RouteTarget::Via(IpAddr::V6(a));
    EngineSpec {
        ports: vec![port("p0"), port("p1"), port("p2"), port("p3")],
        routers: vec![RouterSpec {
            name: "r".into(),
            interfaces: vec![
                iface("in0", 0, None, IN_MAC, 1500, [10, 0, 0, 1]),
                iface("out0", 1, None, OUT_MAC, 1400, [10, 1, 0, 1]),
                iface("tag0", 2, Some(7), TAG_MAC, 1500, [10, 2, 0, 1]),
                iface("out1", 3, None, OUT1_MAC, 1500, [10, 3, 0, 1]),
                iface("tin0", 0, Some(5), IN_MAC, 1500, [10, 5, 0, 1]),
            ],
            routes4: vec![
                ("192.0.2.0/24".parse().unwrap(), via([10, 1, 0, 2])),
                ("198.18.0.0/15".parse().unwrap(), via([10, 2, 0, 2])),
                ("100.64.0.0/10".parse().unwrap(), via([10, 1, 0, 3])),
                ("203.0.113.0/24".parse().unwrap(), RouteTarget::Blackhole),
                ("198.51.100.0/24".parse().unwrap(), RouteTarget::Unreachable),
                ("172.20.0.0/16".parse().unwrap(), via([10, 3, 0, 2])),
            ],
            routes6: vec![
                ("2001:db8:100::/48".parse().unwrap(), via6(v6(1, 2))),
                ("2001:db8:200::/48".parse().unwrap(), via6(v6(2, 2))),
                ("2001:db8:300::/48".parse().unwrap(), RouteTarget::Blackhole),
                (
                    "2001:db8:400::/48".parse().unwrap(),
                    RouteTarget::Unreachable,
                ),
                ("2001:db8:500::/48".parse().unwrap(), via6(v6(1, 3))),
                ("2001:db8:600::/48".parse().unwrap(), via6(v6(3, 2))),
            ],
            neighbors: vec![
                (IpAddr::V6(v6(1, 2)), GW_MAC),
                (IpAddr::V6(v6(1, 5)), HOST5_MAC),
                (IpAddr::V6(v6(2, 2)), GW2_MAC),
                (IpAddr::V6(v6(3, 2)), GW3_MAC),
                (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)), GW_MAC),
                (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 5)), HOST5_MAC),
                (IpAddr::V4(Ipv4Addr::new(10, 2, 0, 2)), GW2_MAC),
                (IpAddr::V4(Ipv4Addr::new(10, 3, 0, 2)), GW3_MAC),
            ],
            limits: Limits {
                icmp_rate: 1_000_000,
                ..Limits::default()
            },
            filters: vec![],
        }],
    }
}

/// [`spec`] with rule lists: `in` on what enters in0 and tin0 (deny
/// UDP to port 9 toward 172.20/16, PCP 3 toward 198.18/15, UDP to ports
/// 10–100 from 2001:db8::/64 toward 2001:db8:100::/48; default permit),
/// and `out` on what leaves out0 (permit 192.0.2/24, 2001:db8:100::/48 and
/// ICMP of both families; default deny).
fn filtered_spec() -> EngineSpec {
    let p = |s: &str| {
        let (a, l) = s.split_once('/').expect("prefix");
        IpPrefix::new(a.parse().expect("addr"), l.parse().expect("len")).expect("prefix")
    };
    let deny = Action::Deny;
    let permit = Action::Permit;
    let input = FilterSpec {
        name: "in".into(),
        default: permit,
        rules: vec![
            Rule {
                action: deny,
                dst: Some(p("172.20.0.0/16")),
                protocol: Some(17),
                dst_port: Some(PortRange::one(9)),
                ..Rule::default()
            },
            Rule {
                action: deny,
                dst: Some(p("198.18.0.0/15")),
                pcp: Some(3),
                ..Rule::default()
            },
            Rule {
                action: permit,
                src: Some(p("10.0.0.2/32")),
                ..Rule::default()
            },
            Rule {
                action: deny,
                src: Some(p("2001:db8::/64")),
                dst: Some(p("2001:db8:100::/48")),
                protocol: Some(17),
                dst_port: Some(PortRange { lo: 10, hi: 100 }),
                ..Rule::default()
            },
            Rule {
                action: deny,
                protocol: Some(1),
                icmp_type: Some(3),
                ..Rule::default()
            },
            Rule {
                action: deny,
                protocol: Some(58),
                icmp_type: Some(1),
                icmp_code: Some(4),
                ..Rule::default()
            },
            Rule {
                action: deny,
                dst: Some(p("192.0.2.0/24")),
                protocol: Some(6),
                src_port: Some(PortRange { lo: 3000, hi: 4000 }),
                ..Rule::default()
            },
            Rule {
                action: deny,
                protocol: Some(17),
                src_port: Some(PortRange::one(53)),
                dst_port: Some(PortRange { lo: 40, hi: 60 }),
                ..Rule::default()
            },
        ],
    };
    let output = FilterSpec {
        name: "out".into(),
        default: deny,
        rules: vec![
            Rule {
                action: permit,
                dst: Some(p("192.0.2.0/24")),
                ..Rule::default()
            },
            Rule {
                action: permit,
                dst: Some(p("2001:db8:100::/48")),
                ..Rule::default()
            },
            Rule {
                action: permit,
                protocol: Some(1),
                ..Rule::default()
            },
            Rule {
                action: permit,
                protocol: Some(58),
                ..Rule::default()
            },
        ],
    };
    let mut s = spec();
    let r = &mut s.routers[0];
    r.filters = vec![input, output];
    for i in &mut r.interfaces {
        match i.name.as_str() {
            "in0" | "tin0" => i.filters.input = Some("in".into()),
            "out0" => i.filters.output = Some("out".into()),
            _ => {}
        }
    }
    s
}

/// Destinations that reach every kind of next hop and every special case of input.
const DESTINATIONS: [[u8; 4]; 18] = [
    [192, 0, 2, 7],    // gateway, untagged: the fast path
    [10, 1, 0, 5],     // attached host with a static entry: the fast path
    [10, 1, 0, 9],     // attached host never resolved: held, ARP
    [198, 18, 3, 4],   // gateway behind a VLAN tag
    [100, 64, 1, 1],   // gateway never resolved
    [203, 0, 113, 1],  // blackhole
    [198, 51, 100, 1], // unreachable
    [8, 8, 8, 8],      // no route
    [10, 0, 0, 1],     // the router itself
    [10, 1, 0, 255],   // directed broadcast
    [255, 255, 255, 255],
    [224, 0, 0, 5],
    [239, 1, 2, 3],
    [240, 0, 0, 1],
    [0, 1, 2, 3],
    [127, 0, 0, 1],
    [10, 0, 0, 2],   // back out of the ingress interface
    [172, 20, 1, 1], // gateway, untagged, on another port: the fast path
];

/// The IPv6 destinations: the same kinds as [`DESTINATIONS`], and scopes.
const DESTINATIONS6: [&str; 16] = [
    "2001:db8:100::7", // gateway, untagged: the fast path
    "2001:db8:1::5",   // attached host with a static entry
    "2001:db8:1::9",   // attached host never resolved: held, NS
    "2001:db8:200::4", // gateway behind a VLAN tag
    "2001:db8:500::1", // gateway never resolved
    "2001:db8:300::1", // blackhole
    "2001:db8:400::1", // unreachable
    "2001:db8:999::1", // no route
    "2001:db8::1",     // the router itself
    "fe80::1",         // link-local
    "ff02::1",         // link-scope group
    "ff0e::1",         // global multicast
    "::1",
    "::",
    "2001:db8::2",     // back out of the ingress interface
    "2001:db8:600::1", // gateway, untagged, on another port
];

/// IPv6 sources.
const SOURCES6: [&str; 5] = ["2001:db8::2", "fe80::2", "::", "ff02::1", "::1"];

const SOURCES: [[u8; 4]; 5] = [
    [10, 0, 0, 2],
    [172, 16, 0, 1],
    [0, 0, 0, 1],
    [127, 0, 0, 1],
    [224, 0, 0, 1],
];

/// How a frame is bent away from a plain forward.
#[derive(Clone, Debug)]
struct Frame {
    dst: usize,
    src: usize,
    ttl: u8,
    df: bool,
    payload: usize,
    /// 0: none, 1: bad checksum, 2: total length short of the frame (padding),
    /// 3: total length past the frame, 4: version 6 in an IPv4 ethertype,
    /// 5: a NOP option (IHL 6), 6: a source-route option, 7: IHL 4,
    /// 8: to another MAC, 9: tagged VLAN 7 on port 0, 10: cut to 30 bytes.
    bend: u8,
    port: u16,
    /// 0: untagged, 1: VLAN 5 (tin0) with PCP 3, 2: a priority tag (VID 0: in0).
    tag: u8,
    /// IPv6 ([`DESTINATIONS6`], [`SOURCES6`], the TTL as hop limit; bends
    /// 1: a Hop-by-Hop header, 4: version 4, 5-7: none, the rest as IPv4).
    v6: bool,
    /// What the UDP datagram's bytes are sent as ([`transport`]).
    l4: u8,
}

/// The protocol and the first bytes of the transport header that `l4`
/// makes of a UDP datagram `u` ([`Frame::l4`]): 0 as it is (ports 4000 and
/// 9), 1 ports 53 and 50, 2 TCP, 3 an ICMP (ICMPv6 with `v6`) echo request,
/// 4 destination unreachable, code 4, 5 GRE.
fn transport(l4: u8, v6: bool, u: &mut [u8]) -> IpProtocol {
    let icmp = if v6 {
        IpProtocol::Icmpv6
    } else {
        IpProtocol::Icmp
    };
    match l4 {
        1 => {
            u[0..2].copy_from_slice(&53u16.to_be_bytes());
            u[2..4].copy_from_slice(&50u16.to_be_bytes());
            IpProtocol::Udp
        }
        2 => IpProtocol::Tcp,
        3 => {
            u[0..2].copy_from_slice(&[if v6 { 128 } else { 8 }, 0]);
            icmp
        }
        4 => {
            u[0..2].copy_from_slice(&[if v6 { 1 } else { 3 }, 4]);
            icmp
        }
        5 => IpProtocol::Gre,
        _ => IpProtocol::Udp,
    }
}

fn frame_strategy() -> impl Strategy<Value = Frame> {
    (
        0..DESTINATIONS.len(),
        prop_oneof![4 => Just(0usize), 1 => 1..SOURCES.len()],
        prop_oneof![Just(0u8), Just(1), Just(2), Just(64), Just(255)],
        any::<bool>(),
        prop_oneof![Just(18usize), Just(100), Just(1372), Just(1373), Just(1480)],
        prop_oneof![6 => Just(0u8), 10 => 1u8..=10],
        prop_oneof![9 => Just(0u16), 1 => Just(1u16)],
        prop_oneof![6 => Just(0u8), 3 => Just(1u8), 1 => Just(2u8)],
        any::<bool>(),
        prop_oneof![5 => Just(0u8), 5 => 1u8..=5],
    )
        .prop_map(
            |(dst, src, ttl, df, payload, bend, port, tag, v6, l4)| Frame {
                dst,
                src,
                ttl,
                df,
                payload,
                bend,
                port,
                tag,
                v6,
                l4,
            },
        )
}

fn build(f: &Frame) -> Vec<u8> {
    if f.v6 {
        return build6(f);
    }
    let dst = Ipv4Addr::from(DESTINATIONS[f.dst]);
    let src = Ipv4Addr::from(SOURCES[f.src]);
    let mut u = udp(f.payload);
    let protocol = transport(f.l4, false, &mut u);
    let mut p = ipv4(src, dst, protocol, f.ttl, f.df, &u);
    match f.bend {
        2 => p.extend_from_slice(&[0xee; 12]),
        3 => {
            let t = (p.len() + 8) as u16;
            p[2..4].copy_from_slice(&t.to_be_bytes());
        }
        4 => p[0] = 0x65,
        5 | 6 => {
            // A 4-byte option word after the fixed header.
            let opt: [u8; 4] = if f.bend == 5 {
                [1, 1, 1, 0]
            } else {
                [0x83, 3, 4, 0]
            };
            p.splice(20..20, opt);
            p[0] = 0x46;
            let t = p.len() as u16;
            p[2..4].copy_from_slice(&t.to_be_bytes());
        }
        7 => p[0] = 0x44,
        _ => {}
    }
    if f.bend != 1 && f.bend != 4 && f.bend != 7 {
        fix_ipv4_checksum(&mut p, 0);
    } else if f.bend == 1 {
        fix_ipv4_checksum(&mut p, 0);
        p[10] ^= 0x5a;
    }
    l2(f, EtherType::Ipv4, &p)
}

/// [`build`] for IPv6.
fn build6(f: &Frame) -> Vec<u8> {
    let parse = |a: &str| a.parse::<Ipv6Addr>().expect("a valid address");
    let dst = parse(DESTINATIONS6[f.dst % DESTINATIONS6.len()]);
    let src = parse(SOURCES6[f.src % SOURCES6.len()]);
    let mut u = udp(f.payload);
    let protocol = transport(f.l4, true, &mut u);
    let nh = if f.bend == 1 {
        IpProtocol::HopByHop
    } else {
        protocol
    };
    let mut p = common::ipv6(src, dst, nh, f.ttl, &u);
    match f.bend {
        2 => p.extend_from_slice(&[0xee; 12]),
        3 => {
            let l = (p.len() - 40 + 8) as u16;
            p[4..6].copy_from_slice(&l.to_be_bytes());
        }
        4 => p[0] = 0x40 | (p[0] & 0x0f),
        _ => {}
    }
    l2(f, EtherType::Ipv6, &p)
}

/// The Ethernet frame of `f` around the L3 packet `p`.
fn l2(f: &Frame, ethertype: EtherType, p: &[u8]) -> Vec<u8> {
    let mac = if f.bend == 8 { HOST5_MAC } else { IN_MAC };
    let vlan = match (f.bend, f.tag) {
        (9, _) => Some(7),
        (_, 1) => Some(5),
        (_, 2) => Some(0),
        _ => None,
    };
    let mut frame = eth(mac, HOST_MAC, vlan, ethertype, p);
    if f.tag == 1 && f.bend != 9 {
        frame[14] |= 3 << 5; // PCP 3: demux ignores it, egress writes 0
    }
    if f.bend == 10 {
        frame.truncate(30);
    }
    frame.resize(frame.len().max(60), 0);
    frame
}

fn run(e: &mut Engine, frames: &[(u16, Vec<u8>)], now: u64) -> Vec<Out> {
    let frames: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, f.as_slice())).collect();
    send_burst(e, &frames, now)
}

fn engines() -> (Engine, Engine) {
    engines_of(&spec())
}

fn engines_of(spec: &EngineSpec) -> (Engine, Engine) {
    let fast = Engine::new(spec).expect("spec builds");
    let mut slow = Engine::new(spec).expect("spec builds");
    slow.set_fast_path(false);
    (fast, slow)
}

/// Each rule list's counters: (interface, in or out, per-rule hits).
fn filter_hits(e: &Engine) -> Vec<(String, &'static str, Vec<u64>)> {
    let mut v = Vec::new();
    for i in e.ifaces() {
        for (dir, f) in [("in", &i.filter_in), ("out", &i.filter_out)] {
            if let Some(f) = f {
                v.push((i.name.clone(), dir, f.hits()));
            }
        }
    }
    v
}

/// Every counter of every port, interface and the VR, as comparable values.
fn all_counters(e: &Engine) -> Vec<vrhost_dataplane::Counters> {
    let mut c: Vec<_> = (0..e.port_count())
        .map(|p| e.port_counters(PortId::from_index(p)))
        .collect();
    c.extend((0..e.ifaces().len()).map(|i| e.iface_counters(IfaceId::from_index(i))));
    c.push(e.vr_counters(VrId::new(0)));
    c
}

/// The counters with the fast path's own count cleared (the one figure that
/// is meant to differ).
fn without_fast_count(mut c: Vec<vrhost_dataplane::Counters>) -> Vec<vrhost_dataplane::Counters> {
    for x in &mut c {
        x.fast_path = 0;
    }
    c
}

/// Runs `frames` through both engines; asserts they sent the same frames
/// on the same ports, and returns them.
fn both(fast: &mut Engine, slow: &mut Engine, frames: &[(u16, Vec<u8>)], now: u64) -> Vec<Out> {
    let a = run(fast, frames, now);
    let b = run(slow, frames, now);
    let sent = |o: &[Out]| {
        o.iter()
            .map(|o| (o.port, o.frame.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(sent(&a), sent(&b));
    a
}

/// A frame on port 0 from 10.0.0.2 with TTL 64 to destination `dst`, with
/// `payload` bytes of UDP payload, bent by `bend` and tagged by `tag` (see
/// [`Frame`]).
fn frame(dst: usize, payload: usize, bend: u8, tag: u8) -> (u16, Vec<u8>) {
    let f = Frame {
        dst,
        src: 0,
        ttl: 64,
        df: false,
        payload,
        bend,
        port: 0,
        tag,
        v6: false,
        l4: 0,
    };
    (0, build(&f))
}

/// A plain forward to destination `dst`.
fn plain(dst: usize) -> (u16, Vec<u8>) {
    frame(dst, 18, 0, 0)
}

#[test]
fn plain_forwards_take_the_fast_path_and_leave_as_the_full_stages_send_them() {
    let (mut fast, mut slow) = engines();
    // Gateway, attached host, a gateway behind a tag (one pushed), then
    // what the fast path leaves alone: an unresolved gateway, the router
    // itself.
    let frames: Vec<_> = [0, 1, 3, 4, 8].into_iter().map(plain).collect();
    let a = both(&mut fast, &mut slow, &frames, SEC);
    let to_gw = &a[0];
    assert_eq!(to_gw.port, 1);
    assert_eq!(&to_gw.frame[0..6], &GW_MAC.0);
    assert_eq!(&to_gw.frame[6..12], &OUT_MAC.0);
    assert_eq!(to_gw.frame[14 + 8], 63, "TTL decremented");
    let in0 = fast.iface_counters(IfaceId::new(0));
    assert_eq!(
        in0.fast_path, 3,
        "gateway, attached host and tagged gateway took the fast path"
    );
    assert_eq!(in0.forwarded, 3);
    let to_tagged = a.iter().find(|o| o.port == 2).expect("sent on port 2");
    assert_eq!(to_tagged.vlan(), Some(7), "a tag pushed");
    assert_eq!(&to_tagged.frame[14..16], &[0x00, 0x07], "PCP 0, DEI 0");
    assert_eq!(to_tagged.ipv4().ttl(), 63);
    assert_eq!(slow.iface_counters(IfaceId::new(0)).fast_path, 0);
    assert_eq!(
        without_fast_count(all_counters(&fast)),
        without_fast_count(all_counters(&slow))
    );
}

/// Frames of one burst that alternate between two egress interfaces (one
/// untagged, one tagged), some on the fast path and some, with an IPv4
/// option, through the full stages, are each counted once, on their own
/// interface and port: the per-frame counters are summed per run of frames
/// and written when the interface changes.
#[test]
fn counters_are_exact_when_a_burst_alternates_interfaces() {
    for fast_path in [true, false] {
        let mut e = Engine::new(&spec()).expect("spec builds");
        e.set_fast_path(fast_path);
        // Gateway on out0, gateway behind tag0, attached host on out0;
        // two of those behind tag0 with an option.
        let frames = vec![
            plain(0),
            refused(3, 18),
            plain(0),
            plain(3),
            plain(1),
            refused(3, 18),
            plain(0),
        ];
        let out = run(&mut e, &frames, SEC);
        let sent = |port: u16| {
            let o: Vec<_> = out.iter().filter(|o| o.port == port).collect();
            (
                o.len() as u64,
                o.iter().map(|o| o.frame.len() as u64).sum::<u64>(),
            )
        };
        assert_eq!(sent(1).0, 4, "{out:?}");
        assert_eq!(sent(2).0, 3, "{out:?}");
        for (port, iface) in [(1u16, 1usize), (2, 2)] {
            let (packets, bytes) = sent(port);
            let i = e.iface_counters(IfaceId::from_index(iface));
            let p = e.port_counters(PortId::from_index(usize::from(port)));
            assert_eq!(
                (i.tx_packets, i.tx_bytes),
                (packets, bytes),
                "iface {iface}"
            );
            assert_eq!((p.tx_packets, p.tx_bytes), (packets, bytes), "port {port}");
        }
        let in0 = e.iface_counters(IfaceId::new(0));
        assert_eq!(in0.forwarded, 7);
        assert_eq!(in0.fast_path, if fast_path { 5 } else { 0 });
    }
}

#[test]
fn padding_is_trimmed_on_the_fast_path() {
    let (mut fast, mut slow) = engines();
    let f = Frame {
        dst: 0,
        src: 0,
        ttl: 64,
        df: false,
        payload: 18,
        bend: 2,
        port: 0,
        tag: 0,
        v6: false,
        l4: 0,
    };
    let frames = vec![(0, build(&f))];
    let a = both(&mut fast, &mut slow, &frames, SEC);
    assert_eq!(fast.iface_counters(IfaceId::new(0)).fast_path, 1);
    assert_eq!(a[0].frame.len(), 14 + 20 + 8 + 18);
}

/// Tagged frames take the fast path both as a plain burst (all in tin0's
/// VLAN) and frame by frame: the tag popped toward out0, rewritten toward
/// tag0 (VLAN 7, PCP and DEI cleared), and the frames leave exactly as the
/// full stages send them.
#[test]
fn tagged_frames_take_the_fast_path_and_lose_or_change_their_tag() {
    let tagged = |dst: usize, tag: u8| frame(dst, 18, 0, tag);
    let (mut fast, mut slow) = engines();
    // A plain burst of VLAN 5: to out0, to tag0, to out1.
    let plain_burst = vec![tagged(0, 1), tagged(3, 1), tagged(17, 1)];
    let a = both(&mut fast, &mut slow, &plain_burst, SEC);
    assert_eq!(fast.iface_counters(IfaceId::new(4)).fast_path, 3, "{a:?}");
    assert_eq!((a[0].port, a[0].vlan()), (1, None), "popped");
    assert_eq!(a[0].frame.len(), 64 - 4);
    assert_eq!((a[1].port, a[1].vlan()), (2, Some(7)), "rewritten");
    assert_eq!(&a[1].frame[14..16], &[0x00, 0x07], "PCP 3 cleared");
    assert_eq!(a[1].ipv4().ttl(), 63);
    assert_eq!((a[2].port, a[2].vlan()), (3, None));
    // Interleaved with untagged and priority-tagged frames: the
    // frame-by-frame demux, and the fast path still.
    let mixed = vec![tagged(0, 0), tagged(3, 1), tagged(3, 2), tagged(0, 1)];
    let b = both(&mut fast, &mut slow, &mixed, 2 * SEC);
    assert_eq!(b.len(), 4);
    assert_eq!(fast.iface_counters(IfaceId::new(4)).fast_path, 5);
    assert_eq!(fast.iface_counters(IfaceId::new(0)).fast_path, 2);
    assert!(b.iter().all(|o| o.ipv4().ttl() == 63));
    assert_eq!(
        without_fast_count(all_counters(&fast)),
        without_fast_count(all_counters(&slow))
    );
}

/// IPv6 plain forwards take the fast path, as a plain burst and frame by
/// frame, and leave as the full stages send them: hop limit one less, a tag
/// pushed toward tag0, padding trimmed.
#[test]
fn ipv6_plain_forwards_take_the_fast_path() {
    let six = |dst: usize, tag: u8, bend: u8| {
        let f = Frame {
            dst,
            src: 0,
            ttl: 64,
            df: false,
            payload: 18,
            bend,
            port: 0,
            tag,
            v6: true,
            l4: 0,
        };
        (0u16, build(&f))
    };
    let (mut fast, mut slow) = engines();
    // Gateway, attached host, tagged gateway, padded, another port.
    let burst = vec![
        six(0, 0, 0),
        six(1, 0, 0),
        six(3, 0, 0),
        six(0, 0, 2),
        six(15, 0, 0),
    ];
    let a = both(&mut fast, &mut slow, &burst, SEC);
    assert_eq!(fast.iface_counters(IfaceId::new(0)).fast_path, 5, "{a:?}");
    assert!(a.iter().all(|o| o.ipv6().hop_limit() == 63));
    let tagged = a.iter().find(|o| o.port == 2).expect("sent behind the tag");
    assert_eq!(tagged.vlan(), Some(7));
    let padded = &a.iter().filter(|o| o.port == 1).collect::<Vec<_>>()[2];
    assert_eq!(padded.frame.len(), 14 + 40 + 8 + 18, "padding trimmed");
    // Interleaved with IPv4 and tagged frames: frame by frame, still fast;
    // a Hop-by-Hop header and the router's own address are not.
    let mixed = vec![
        six(0, 1, 0),
        plain(0),
        six(3, 2, 0),
        six(0, 0, 1),
        six(8, 0, 0),
    ];
    both(&mut fast, &mut slow, &mixed, 2 * SEC);
    assert_eq!(fast.iface_counters(IfaceId::new(4)).fast_path, 1);
    assert_eq!(fast.iface_counters(IfaceId::new(0)).fast_path, 5 + 2);
    assert_eq!(
        without_fast_count(all_counters(&fast)),
        without_fast_count(all_counters(&slow))
    );
}

#[test]
fn a_neighbor_past_its_reachable_time_goes_to_the_full_stages() {
    // An entry learned by ARP is reachable for a while, then stale: a stale
    // one needs a probe, which only the full stages send.
    let (mut fast, mut slow) = engines();
    let reply = common::arp(
        vrhost_wire::arp::Operation::Reply,
        EthernetAddress([0x02, 0xdd, 0, 0, 0, 9]),
        Ipv4Addr::new(10, 1, 0, 9),
        Ipv4Addr::new(10, 1, 0, 1),
        OUT_MAC,
        None,
    );
    let to9 = [plain(2)];
    // Ask first (the frame is held and an ARP request goes out), then answer.
    both(&mut fast, &mut slow, &to9, SEC);
    both(&mut fast, &mut slow, &[(1, reply)], SEC);
    both(&mut fast, &mut slow, &to9, 2 * SEC);
    assert_eq!(
        fast.iface_counters(IfaceId::new(0)).fast_path,
        1,
        "reachable: fast"
    );
    // Long after: stale, so the full stages forward it, and once the first
    // probe's delay (5 s) is over, also send a unicast ARP probe.
    let a = both(&mut fast, &mut slow, &to9, 600 * SEC);
    assert_eq!(a.len(), 1);
    let a = both(&mut fast, &mut slow, &to9, 606 * SEC);
    assert_eq!(a.len(), 2, "the frame and a unicast ARP probe");
    assert_eq!(
        fast.iface_counters(IfaceId::new(0)).fast_path,
        1,
        "stale: full stages"
    );
    assert_eq!(
        without_fast_count(all_counters(&fast)),
        without_fast_count(all_counters(&slow))
    );
}

/// A gateway's slot keeps its neighbor's MAC for the fast path, which then
/// does not read the neighbor entry: a new MAC learnt for the gateway is
/// used from the next frame on, and past its reachable time the frames go
/// to the full stages (which probe it), as they would without the copy.
#[test]
fn a_gateways_kept_mac_follows_what_arp_learns() {
    let (mut fast, mut slow) = engines();
    let mac_a = EthernetAddress([0x02, 0xee, 0, 0, 0, 0x0a]);
    let mac_b = EthernetAddress([0x02, 0xee, 0, 0, 0, 0x0b]);
    let reply = |mac| {
        common::arp(
            vrhost_wire::arp::Operation::Reply,
            mac,
            Ipv4Addr::new(10, 1, 0, 3),
            Ipv4Addr::new(10, 1, 0, 1),
            OUT_MAC,
            None,
        )
    };
    // 100.64.1.1, via 10.1.0.3: unresolved at first (held, ARP asked).
    let to_gw = [plain(4)];
    let fast_count = |e: &Engine| e.iface_counters(IfaceId::new(0)).fast_path;
    both(&mut fast, &mut slow, &to_gw, SEC);
    let released = both(&mut fast, &mut slow, &[(1, reply(mac_a))], SEC);
    assert_eq!(released.len(), 1, "the held frame");
    assert_eq!(&released[0].frame[0..6], &mac_a.0);
    // The first frame through the slot keeps the MAC, the second uses it.
    for k in 1..=2 {
        let out = both(&mut fast, &mut slow, &to_gw, 2 * SEC);
        assert_eq!(&out[0].frame[0..6], &mac_a.0);
        assert_eq!(fast_count(&fast), k, "reachable: fast");
    }
    // The gateway answers from another MAC: used at once.
    both(&mut fast, &mut slow, &[(1, reply(mac_b))], 3 * SEC);
    for k in 3..=4 {
        let out = both(&mut fast, &mut slow, &to_gw, 3 * SEC);
        assert_eq!(&out[0].frame[0..6], &mac_b.0, "the new MAC");
        assert_eq!(fast_count(&fast), k);
    }
    // Past its reachable time the kept MAC is not used: the full stages
    // forward the frame, and probe once the first probe's delay is over.
    let out = both(&mut fast, &mut slow, &to_gw, 600 * SEC);
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0].frame[0..6], &mac_b.0);
    assert_eq!(fast_count(&fast), 4, "stale: full stages");
    let out = both(&mut fast, &mut slow, &to_gw, 606 * SEC);
    assert_eq!(out.len(), 2, "the frame and a unicast ARP probe");
    assert_eq!(fast_count(&fast), 4);
    assert_eq!(
        without_fast_count(all_counters(&fast)),
        without_fast_count(all_counters(&slow))
    );
}

/// A plain burst whose fourth frame the input list denies: the three
/// before it leave by the fast path, judged with the whole burst before
/// it; the denied one is dropped and counted as `filtered`; the two after
/// it go frame by frame, through the fast path too. Every frame is counted
/// once by the rule that matched it.
#[test]
fn a_plain_burst_stops_at_the_frame_its_input_list_denies() {
    let (mut fast, mut slow) = engines_of(&filtered_spec());
    // 192.0.2.7: a gateway out of out0, whose output list permits it;
    // 172.20.1.1: UDP to port 9, which the input list denies (rule 1).
    let burst = [plain(0), plain(0), plain(0), plain(17), plain(0), plain(0)];
    let out = both(&mut fast, &mut slow, &burst, SEC);
    assert_eq!(out.len(), 5);
    let in0 = fast.iface_counters(IfaceId::new(0));
    assert_eq!(in0.fast_path, 5);
    assert_eq!(
        in0.drops[vrhost_dataplane::DropReason::Filtered as usize],
        1
    );
    let hits = filter_hits(&fast);
    let input = hits.iter().find(|(i, d, _)| i == "in0" && *d == "in");
    // Rule 1 denied one; rule 3 (from 10.0.0.2) permitted five.
    assert_eq!(input.map(|(_, _, h)| &h[..4]), Some(&[1, 0, 5, 0][..]));
    assert_eq!(hits, filter_hits(&slow));
}

/// Runs `bursts` through `e` one after the other into one transmit batch
/// (as a worker does between two flushes), then returns what left, port by
/// port in queue order.
fn run_into_one_batch(e: &mut Engine, bursts: &[Vec<(u16, Vec<u8>)>], now: u64) -> Vec<Out> {
    let mut tx = vrhost_dataplane::TxBatch::new(e.port_count());
    for burst in bursts {
        let mut rx: Vec<_> = burst
            .iter()
            .map(|(port, f)| {
                let mut m = e.pool().get();
                m.fill(f);
                m.port = *port;
                m
            })
            .collect();
        e.process_burst(&mut rx, now, &mut tx);
        assert!(rx.is_empty(), "the burst was consumed");
    }
    common::collect(e, &mut tx)
}

/// A plain forward to destination `dst` whose UDP payload is `mark` bytes
/// long, so that frames can be told apart.
fn marked(dst: usize, mark: usize) -> (u16, Vec<u8>) {
    frame(dst, mark, 0, 0)
}

/// What [`marked`] makes, with a NOP option (IHL 6): the full stages
/// forward it to the same place.
fn refused(dst: usize, mark: usize) -> (u16, Vec<u8>) {
    frame(dst, mark, 5, 0)
}

/// The fast path leaves forwarded frames in the burst and queues them
/// together: appended in one copy to an empty queue or to one that holds
/// frames already, or frame by frame when they go to several ports; from the first frame it refuses, frame by frame. Every
/// way, each port sends its frames in arrival order, as the full stages
/// alone send them. (Every burst here is plain: untagged IPv4 on port 0 to
/// in0's MAC, so `plain_burst` takes it.)
#[test]
fn forwarded_frames_leave_in_arrival_order_however_a_burst_is_queued() {
    // out0 (port 1): destination 0; out1 (port 3): destination 17; a
    // frame with an IPv4 option only the full stages forward.
    let one_port: Vec<_> = (0..6).map(|i| marked(0, 18 + i)).collect();
    let later: Vec<_> = (0..6).map(|i| marked(0, 50 + i)).collect();
    let mut refused_first = later.clone();
    refused_first[0] = refused(0, 56);
    let two_ports: Vec<_> = (0..6).map(|i| marked([0, 17][i % 2], 30 + i)).collect();
    let mut refused_midway: Vec<_> = (0..6).map(|i| marked(0, 40 + i)).collect();
    refused_midway[2] = refused(0, 46);
    refused_midway[4].1[14 + 8] = 1; // TTL 1: ICMP time exceeded, full stages
    fix_ipv4_checksum(&mut refused_midway[4].1, 14);
    type Bursts = Vec<Vec<(u16, Vec<u8>)>>;
    let cases: [(&str, Bursts, u64); 5] = [
        ("append to an empty queue", vec![one_port.clone()], 6),
        (
            "append to a queue that holds frames",
            vec![one_port.clone(), later.clone()],
            12,
        ),
        ("frame by frame to two ports", vec![two_ports.clone()], 6),
        (
            "the first refused, then the rest one by one",
            vec![one_port.clone(), refused_first],
            6 + 5,
        ),
        (
            "fast, refused, fast, then the rest one by one",
            vec![refused_midway, two_ports, one_port],
            4 + 6 + 6,
        ),
    ];
    for (what, bursts, fast_frames) in cases {
        let (mut fast, mut slow) = engines();
        let a = run_into_one_batch(&mut fast, &bursts, SEC);
        let b = run_into_one_batch(&mut slow, &bursts, SEC);
        let sent = |o: &[Out]| {
            o.iter()
                .map(|o| (o.port, o.frame.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(sent(&a), sent(&b), "{what}");
        assert_eq!(
            fast.iface_counters(IfaceId::new(0)).fast_path,
            fast_frames,
            "{what}"
        );
        assert_eq!(
            without_fast_count(all_counters(&fast)),
            without_fast_count(all_counters(&slow)),
            "{what}"
        );
        // Arrival order, port by port, spelled out: the frames to out0
        // and out1 (told apart by length), burst after burst.
        for (port, dst) in [(1u16, [192, 0, 2, 7]), (3, [172, 20, 1, 1])] {
            let arrived: Vec<usize> = bursts
                .iter()
                .flatten()
                .filter(|(_, f)| f[30..34] == dst && f[14 + 8] > 1)
                .map(|(_, f)| f.len())
                .collect();
            let left: Vec<usize> = a
                .iter()
                .filter(|o| o.port == port)
                .map(|o| o.frame.len())
                .collect();
            assert!(!arrived.is_empty() || port == 3, "{what}");
            assert_eq!(left, arrived, "{what}: port {port}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The same through rule lists on the way in and out: the fast path
    /// forwards only what both lists let through, and every rule counts
    /// what it matched once, whichever path the packet took.
    #[test]
    fn fast_and_full_stages_agree_through_filters(
        bursts in proptest::collection::vec(proptest::collection::vec(frame_strategy(), 1..40), 1..4),
    ) {
        let (mut fast, mut slow) = engines_of(&filtered_spec());
        for (i, burst) in bursts.iter().enumerate() {
            let frames: Vec<_> = burst.iter().map(|f| (f.port, build(f))).collect();
            let now = (i as u64 + 1) * SEC;
            both(&mut fast, &mut slow, &frames, now);
        }
        prop_assert_eq!(
            without_fast_count(all_counters(&fast)),
            without_fast_count(all_counters(&slow))
        );
        prop_assert_eq!(filter_hits(&fast), filter_hits(&slow));
    }

    /// Plain bursts (one port, one interface, one family) through the
    /// lists: the input list judges the whole burst before the fast path,
    /// which stops at the first frame it denies. The same output, the same
    /// counters and the same per-rule counts as the full stages.
    #[test]
    fn plain_bursts_through_filters_agree_with_the_full_stages(
        bursts in proptest::collection::vec(plain_burst_strategy(), 1..4),
    ) {
        let (mut fast, mut slow) = engines_of(&filtered_spec());
        for (i, burst) in bursts.iter().enumerate() {
            let frames: Vec<_> = burst.iter().map(|f| (0u16, build(f))).collect();
            both(&mut fast, &mut slow, &frames, (i as u64 + 1) * SEC);
        }
        prop_assert_eq!(
            without_fast_count(all_counters(&fast)),
            without_fast_count(all_counters(&slow))
        );
        prop_assert_eq!(filter_hits(&fast), filter_hits(&slow));
    }

    /// Any mix of frames, in bursts at advancing times: the same output,
    /// frame for frame, and the same counters.
    #[test]
    fn fast_and_full_stages_agree(
        bursts in proptest::collection::vec(proptest::collection::vec(frame_strategy(), 1..40), 1..4),
    ) {
        let (mut fast, mut slow) = engines();
        for (i, burst) in bursts.iter().enumerate() {
            let frames: Vec<_> = burst.iter().map(|f| (f.port, build(f))).collect();
            let now = (i as u64 + 1) * SEC;
            both(&mut fast, &mut slow, &frames, now);
        }
        prop_assert_eq!(
            without_fast_count(all_counters(&fast)),
            without_fast_count(all_counters(&slow))
        );
    }
}

/// Frames that all pass the plain-burst test (all IPv4 or all IPv6, on port
/// 0 to in0's MAC, all untagged, all priority-tagged, or all in tin0's
/// VLAN 5), however their IP headers are bent.
fn plain_burst_strategy() -> impl Strategy<Value = Vec<Frame>> {
    proptest::collection::vec(frame_strategy(), 1..80).prop_map(|mut v| {
        for f in &mut v {
            f.port = 0;
            if matches!(f.bend, 8 | 9) {
                f.bend = 0;
            }
        }
        // One VLAN (or none) and one family for the whole burst: the
        // first frame's.
        let (tag, v6) = (v[0].tag, v[0].v6);
        v.iter_mut().for_each(|f| (f.tag, f.v6) = (tag, v6));
        v
    })
}

/// The counters with the figures one extra frame to a stranger's MAC adds
/// cleared: receive counts and its drop.
fn without_rx_and_strangers(
    mut c: Vec<vrhost_dataplane::Counters>,
) -> Vec<vrhost_dataplane::Counters> {
    for x in &mut c {
        x.rx_packets = 0;
        x.rx_bytes = 0;
        x.drops[vrhost_dataplane::DropReason::NotForUs as usize] = 0;
    }
    c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A burst the plain-burst pass takes (one port, one interface, all
    /// IPv4) leaves exactly as the same frames demuxed one by one do: the
    /// second engine gets one more frame, to another MAC, which sends the
    /// burst down the frame-by-frame path and is dropped there.
    #[test]
    fn plain_bursts_agree_with_frame_by_frame_demux(
        bursts in proptest::collection::vec(plain_burst_strategy(), 1..4),
        fast_path in any::<bool>(),
    ) {
        let mut plain = Engine::new(&spec()).expect("spec builds");
        let mut mixed = Engine::new(&spec()).expect("spec builds");
        plain.set_fast_path(fast_path);
        mixed.set_fast_path(fast_path);
        let stranger = build(&Frame { dst: 0, src: 0, ttl: 64, df: false, payload: 18, bend: 8, port: 0, tag: 0, v6: false, l4: 0 });
        for (i, burst) in bursts.iter().enumerate() {
            let frames: Vec<_> = burst.iter().map(|f| (0u16, build(f))).collect();
            let mut with_stranger = frames.clone();
            with_stranger.push((0, stranger.clone()));
            let now = (i as u64 + 1) * SEC;
            let a = run(&mut plain, &frames, now);
            let b = run(&mut mixed, &with_stranger, now);
            let sent = |o: &[Out]| o.iter().map(|o| (o.port, o.frame.clone())).collect::<Vec<_>>();
            prop_assert_eq!(sent(&a), sent(&b));
        }
        let n: u64 = bursts.iter().map(|b| b.len() as u64).sum();
        let rx = plain.iface_counters(IfaceId::new(0)).rx_packets + plain.iface_counters(IfaceId::new(4)).rx_packets;
        prop_assert_eq!(rx, n);
        prop_assert_eq!(plain.port_counters(PortId::new(0)).rx_packets, n);
        prop_assert_eq!(mixed.port_counters(PortId::new(0)).rx_packets, n + bursts.len() as u64);
        prop_assert_eq!(
            without_rx_and_strangers(all_counters(&plain)),
            without_rx_and_strangers(all_counters(&mixed))
        );
    }
}
