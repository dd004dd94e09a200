//! QinQ (802.1ad) with golden frames: red and blue share port 0's outer
//! VLAN 100 (TPID 0x88a8), red on inner VLAN 200 and blue on 201; each has
//! an untagged interface on its own port toward its gateway.
//!
//! ```text
//!   port 0: 88a8/100 8100/200 ── red0 10.0.0.1/24 ── red ── red1 10.1.0.1/24 ── port 1 ── gw 10.1.0.2
//!   port 0: 88a8/100 8100/201 ── blue0 (same addresses) ── blue ── blue1 ───── port 2 ── gw
//! ```
//!
//! - a double-tagged frame reaches its own VR only, and leaves untagged;
//! - what is routed back out leaves with both tags, outer TPID as
//!   configured;
//! - a frame with the wrong outer TPID, an unknown inner VLAN or only the
//!   outer tag reaches no interface;
//! - ARP and ICMP answers go back double-tagged;
//! - the TAP sees the frames without tags, and frames from the TAP get both.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::{arp, ipv4, send, udp, Out, GW, HOST, REMOTE, SEC};
use vrhost_dataplane::drop_reason::DropReason;
use vrhost_dataplane::{
    Engine, EngineSpec, IfaceId, InterfaceSpec, Limits, MbufPool, PortSpec, RouteTarget,
    RouterSpec, Tpid,
};
use vrhost_wire::arp::Operation;
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::ip::IpProtocol;

const RED0_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const BLUE0_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0xaa, 0, 0, 0, 0x02]);
const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0xbb, 0, 0, 0, 0x02]);
const RED0: IfaceId = IfaceId::new(0);

fn iface(
    name: &str,
    port: u16,
    tags: Option<(u16, u16)>,
    mac: EthernetAddress,
    net: u8,
) -> InterfaceSpec {
    InterfaceSpec {
        name: name.into(),
        port,
        vlan: tags.map(|t| t.0),
        inner_vlan: tags.map(|t| t.1),
        tpid: if tags.is_some() {
            Tpid::Dot1ad
        } else {
            Tpid::Dot1q
        },
        mac,
        mtu: 1500,
        addrs4: vec![(Ipv4Addr::new(10, net, 0, 1), 24)],
        addrs6: vec![],
        urpf: Default::default(),
        filters: Default::default(),
    }
}

fn router(name: &str, inner: u16, port: u16, mac: EthernetAddress) -> RouterSpec {
    RouterSpec {
        name: name.into(),
        interfaces: vec![
            iface(&format!("{name}0"), 0, Some((100, inner)), mac, 0),
            iface(
                &format!("{name}1"),
                port,
                None,
                EthernetAddress([0x02, 0, 0, 0, 1, port as u8]),
                1,
            ),
        ],
        routes4: vec![(
            "192.0.2.0/24".parse().unwrap(),
            RouteTarget::Via(IpAddr::V4(GW)),
        )],
        routes6: vec![],
        neighbors: vec![(IpAddr::V4(GW), GW_MAC), (IpAddr::V4(HOST), HOST_MAC)],
        limits: Limits::default(),
        filters: Vec::new(),
    }
}

fn engine() -> Engine {
    let ports = (0..3)
        .map(|i| PortSpec {
            name: format!("p{i}"),
            mtu: 1500,
        })
        .collect();
    let spec = EngineSpec {
        ports,
        routers: vec![
            router("red", 200, 1, RED0_MAC),
            router("blue", 201, 2, BLUE0_MAC),
        ],
    };
    Engine::new(&spec).expect("spec builds")
}

/// A frame with two tags: outer `tpid`/`outer`, inner 0x8100/`inner`.
fn qinq(
    dst: EthernetAddress,
    tpid: u16,
    outer: u16,
    inner: u16,
    ethertype: EtherType,
    l3: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(22 + l3.len());
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&HOST_MAC.0);
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&outer.to_be_bytes());
    f.extend_from_slice(&0x8100u16.to_be_bytes());
    f.extend_from_slice(&inner.to_be_bytes());
    f.extend_from_slice(&u16::from(ethertype).to_be_bytes());
    f.extend_from_slice(l3);
    f
}

/// UDP from a remote host to the host, untagged into red1 from its
/// gateway: the L3 packet and the frame.
fn from_the_gateway() -> (Vec<u8>, Vec<u8>) {
    let l3 = ipv4(REMOTE, HOST, IpProtocol::Udp, 64, false, &udp(18));
    let red1_mac = EthernetAddress([0x02, 0, 0, 0, 1, 1]);
    let f = common::eth(red1_mac, GW_MAC, None, EtherType::Ipv4, &l3);
    (l3, f)
}

/// UDP to a remote host from the host behind VR `inner`'s QinQ interface
/// (200 red, 201 blue).
fn remote_via(inner: u16) -> Vec<u8> {
    let mac = if inner == 200 { RED0_MAC } else { BLUE0_MAC };
    qinq(mac, 0x88a8, 100, inner, EtherType::Ipv4, &udp_to(REMOTE))
}

fn udp_to(dst: Ipv4Addr) -> Vec<u8> {
    ipv4(HOST, dst, IpProtocol::Udp, 64, false, &udp(18))
}

/// The outer TPID, outer VID, inner TPID and inner VID of a frame.
fn tags(o: &Out) -> [u16; 4] {
    let w = |at: usize| u16::from_be_bytes([o.frame[at], o.frame[at + 1]]);
    [w(12), w(14) & 0x0fff, w(16), w(18) & 0x0fff]
}

fn drops(e: &Engine, reason: DropReason) -> u64 {
    e.port_counters(vrhost_dataplane::PortId::new(0)).drops[reason as usize]
}

#[test]
fn a_double_tagged_frame_reaches_its_own_vr_and_leaves_untagged() {
    let mut e = engine();
    for (inner, mac, out_port) in [(200, RED0_MAC, 1), (201, BLUE0_MAC, 2)] {
        let f = qinq(mac, 0x88a8, 100, inner, EtherType::Ipv4, &udp_to(REMOTE));
        let out = send(&mut e, 0, &f, SEC);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].port, out_port);
        assert_eq!(out[0].vlan(), None);
        assert_eq!(out[0].eth().dst_addr(), GW_MAC);
        assert_eq!(out[0].ipv4().ttl(), 63);
        assert_eq!(out[0].frame.len(), f.len() - 8, "both tags popped");
    }
    // Both took the fast path, which pops and pushes tags in place.
    assert_eq!(
        e.port_counters(vrhost_dataplane::PortId::new(1)).tx_packets,
        1
    );
    let red0 = e.iface_counters(RED0);
    assert_eq!((red0.fast_path, red0.forwarded), (1, 1));
}

#[test]
fn what_goes_back_leaves_with_both_tags() {
    let mut e = engine();
    // From red's gateway side to the host behind the QinQ interface.
    let (l3, f) = from_the_gateway();
    let out = send(&mut e, 1, &f, SEC);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].port, 0);
    assert_eq!(tags(&out[0]), [0x88a8, 100, 0x8100, 200]);
    assert_eq!(
        u16::from_be_bytes([out[0].frame[20], out[0].frame[21]]),
        0x0800
    );
    assert_eq!(out[0].frame[22..].len(), l3.len());
    assert_eq!(out[0].frame[22 + 8], 63, "TTL decremented");
}

#[test]
fn wrong_tpid_unknown_inner_vlan_or_one_tag_reach_no_interface() {
    let mut e = engine();
    let cases = [
        qinq(RED0_MAC, 0x8100, 100, 200, EtherType::Ipv4, &udp_to(REMOTE)),
        qinq(RED0_MAC, 0x88a8, 100, 202, EtherType::Ipv4, &udp_to(REMOTE)),
        qinq(RED0_MAC, 0x88a8, 101, 200, EtherType::Ipv4, &udp_to(REMOTE)),
        common::eth(
            RED0_MAC,
            HOST_MAC,
            Some(100),
            EtherType::Ipv4,
            &udp_to(REMOTE),
        ),
    ];
    for (k, f) in cases.iter().enumerate() {
        assert!(send(&mut e, 0, f, SEC).is_empty(), "case {k}");
        assert_eq!(drops(&e, DropReason::NoInterface), k as u64 + 1, "case {k}");
    }
    // A frame cut inside the inner tag.
    let f = qinq(RED0_MAC, 0x88a8, 100, 200, EtherType::Ipv4, &[]);
    assert!(send(&mut e, 0, &f[..20], SEC).is_empty());
    assert_eq!(drops(&e, DropReason::TruncatedL2), 1);
}

#[test]
fn arp_and_icmp_answers_go_back_double_tagged() {
    let mut e = engine();
    let req = arp(
        Operation::Request,
        HOST_MAC,
        HOST,
        Ipv4Addr::new(10, 0, 0, 1),
        EthernetAddress::BROADCAST,
        None,
    );
    // `arp` builds an untagged frame; put both tags in.
    let f = qinq(
        EthernetAddress::BROADCAST,
        0x88a8,
        100,
        200,
        EtherType::Arp,
        &req[14..],
    );
    let out = send(&mut e, 0, &f, SEC);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(tags(&out[0]), [0x88a8, 100, 0x8100, 200]);
    assert_eq!(
        u16::from_be_bytes([out[0].frame[20], out[0].frame[21]]),
        0x0806
    );
    // TTL 1 toward a remote: Time Exceeded back through both tags.
    let l3 = ipv4(HOST, REMOTE, IpProtocol::Udp, 1, false, &udp(18));
    let out = send(
        &mut e,
        0,
        &qinq(RED0_MAC, 0x88a8, 100, 200, EtherType::Ipv4, &l3),
        SEC,
    );
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(tags(&out[0]), [0x88a8, 100, 0x8100, 200]);
    assert_eq!(out[0].frame[22 + 9], 1, "ICMP");
    assert_eq!(out[0].frame[22 + 20], 11, "Time Exceeded");
}

#[test]
fn the_tap_sees_no_tags_and_its_frames_get_both() {
    let e = engine();
    let red0 = e.ifaces()[RED0.index()].clone();
    let mut pool = MbufPool::new(4);
    let mut m = pool.get();
    let f = qinq(
        RED0_MAC,
        0x88a8,
        100,
        200,
        EtherType::Ipv4,
        &udp_to(Ipv4Addr::new(10, 0, 0, 1)),
    );
    m.fill(&f);
    m.l3_off = 22;
    let mut out = pool.get();
    vrhost_dataplane::tap::untagged_copy(&m, &mut out);
    assert_eq!(out.len(), f.len() - 8);
    assert_eq!(&out.data()[12..14], &[0x08, 0x00]);
    // What the kernel sends on the TAP: untagged; out of the port: both.
    let mut back = pool.get();
    back.fill(out.data());
    assert!(vrhost_dataplane::tap::tag_for_port(&red0, &mut back));
    assert_eq!(back.l3_off, 22);
    assert_eq!(back.data().len(), f.len());
    assert_eq!(&back.data()[12..22], &f[12..22]);
    assert_eq!(&back.data()[6..12], &RED0_MAC.0);
}

#[test]
fn a_qinq_interface_needs_an_outer_vlan_and_its_own_pair() {
    let ports = vec![PortSpec {
        name: "p0".into(),
        mtu: 1500,
    }];
    // One QinQ interface each, no gateway side.
    let one = |name: &str, mac| {
        let mut r = router(name, 200, 0, mac);
        r.interfaces.truncate(1);
        r.routes4.clear();
        r.neighbors.retain(|(a, _)| *a == IpAddr::V4(HOST));
        r
    };
    let mut r = one("red", RED0_MAC);
    r.interfaces[0].vlan = None;
    let err = Engine::new(&EngineSpec {
        ports: ports.clone(),
        routers: vec![r],
    })
    .err()
    .expect("refused");
    assert!(err.to_string().contains("inner_vlan needs vlan"), "{err}");
    let (a, b) = (one("red", RED0_MAC), one("blue", BLUE0_MAC));
    let err = Engine::new(&EngineSpec {
        ports,
        routers: vec![a, b],
    })
    .err()
    .expect("refused");
    assert!(err.to_string().contains("VLAN 100.200"), "{err}");
}

#[test]
fn an_8021ad_interface_with_one_tag() {
    let mut r = router("red", 200, 1, RED0_MAC);
    r.interfaces[0].inner_vlan = None;
    r.interfaces[0].vlan = Some(300);
    let spec = EngineSpec {
        ports: (0..2)
            .map(|i| PortSpec {
                name: format!("p{i}"),
                mtu: 1500,
            })
            .collect(),
        routers: vec![r],
    };
    let mut e = Engine::new(&spec).unwrap();
    let single = |tpid: u16| {
        let mut f = common::eth(
            RED0_MAC,
            HOST_MAC,
            Some(300),
            EtherType::Ipv4,
            &udp_to(REMOTE),
        );
        f[12..14].copy_from_slice(&tpid.to_be_bytes());
        f
    };
    let out = send(&mut e, 0, &single(0x88a8), SEC);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].port, out[0].vlan()), (1, None));
    assert!(send(&mut e, 0, &single(0x8100), SEC).is_empty());
    assert_eq!(drops(&e, DropReason::NoInterface), 1);
    let (_, f) = from_the_gateway();
    let out = send(&mut e, 1, &f, SEC);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(&out[0].frame[12..18], &[0x88, 0xa8, 0x01, 0x2c, 0x08, 0x00]);
}

#[test]
fn the_fast_path_and_the_full_stages_write_the_same_frames() {
    let frames = [
        (0, remote_via(200)),
        (0, remote_via(201)),
        (1, from_the_gateway().1),
    ];
    let run = |fast: bool| {
        let mut e = engine();
        e.set_fast_path(fast);
        let out: Vec<(u16, Vec<u8>)> = frames
            .iter()
            .flat_map(|(port, f)| send(&mut e, *port, f, SEC))
            .map(|o| (o.port, o.frame))
            .collect();
        (out, e.iface_counters(RED0).fast_path)
    };
    let (fast, fast_count) = run(true);
    let (full, full_count) = run(false);
    assert_eq!(fast, full);
    assert_eq!(fast.len(), 3);
    assert_eq!((fast_count, full_count), (1, 0));
}

#[test]
fn a_burst_of_several_qinq_pairs_goes_each_frame_to_its_own_vr() {
    let mut e = engine();
    let (red, blue) = (remote_via(200), remote_via(201));
    let wrong = qinq(RED0_MAC, 0x8100, 100, 200, EtherType::Ipv4, &udp_to(REMOTE));
    // All of one pair (the plain burst), then mixed pairs and a wrong TPID.
    let out = common::send_burst(&mut e, &[(0, &red), (0, &red), (0, &red)], SEC);
    assert_eq!(out.iter().map(|o| o.port).collect::<Vec<_>>(), [1, 1, 1]);
    let out = common::send_burst(
        &mut e,
        &[(0, &red), (0, &blue), (0, &wrong), (0, &red)],
        SEC,
    );
    let mut ports: Vec<u16> = out.iter().map(|o| o.port).collect();
    ports.sort_unstable();
    assert_eq!(ports, [1, 1, 2]);
    assert_eq!(drops(&e, DropReason::NoInterface), 1);
    assert_eq!(e.iface_counters(RED0).forwarded, 5);
}
