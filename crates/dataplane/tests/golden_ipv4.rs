//! Golden scenarios for IPv4: RFC 1812 forwarding behaviour, frame by frame.
//! Inputs are built here; outputs are parsed and checked field by field.

mod common;

use std::net::Ipv4Addr;

use common::*;
use vrhost_dataplane::{DropReason, IfaceId, Limits, PortId, VrId};
use vrhost_wire::arp::Operation;
use vrhost_wire::ethernet::EtherType;
use vrhost_wire::icmpv4::Icmpv4Repr;
use vrhost_wire::ip::IpProtocol;

fn drops(e: &vrhost_dataplane::Engine, port: usize, d: DropReason) -> u64 {
    e.port_counters(PortId::from_index(port)).drop_count(d)
}

#[test]
fn forwards_via_gateway_pushing_the_vlan_tag() {
    let mut e = engine();
    let input = udp4_frame(REMOTE, 64, false, 100);
    let out = send(&mut e, 0, &input, 0);
    assert_eq!(out.len(), 1);
    let o = &out[0];
    assert_eq!(o.port, 1);
    assert_eq!(o.vlan(), Some(100), "red1 is VLAN 100 on p1");
    assert_eq!(o.eth().dst_addr(), GW_MAC);
    assert_eq!(o.eth().src_addr(), RED1_MAC);
    assert_eq!(o.ethertype(), EtherType::Ipv4);
    let ip = o.ipv4();
    assert_eq!(ip.ttl(), 63, "TTL decremented");
    assert_eq!(ip.src_addr(), HOST);
    assert_eq!(ip.dst_addr(), REMOTE);
    assert_eq!(ip.payload(), &input[14 + 20..], "payload untouched");
    let c = e.iface_counters(IfaceId::new(0));
    assert_eq!((c.rx_packets, c.forwarded), (1, 1));
    assert_eq!(e.iface_counters(IfaceId::new(1)).tx_packets, 1);
}

#[test]
fn pops_the_vlan_tag_toward_an_untagged_interface() {
    let mut e = engine();
    // From the gateway side (VLAN 100) to a host on red0 with a known MAC.
    let mut out = send(
        &mut e,
        0,
        &arp(Operation::Reply, HOST_MAC, HOST, RED0, RED0_MAC, None),
        0,
    );
    assert!(out.is_empty());
    let f = eth(
        RED1_MAC,
        GW_MAC,
        Some(100),
        EtherType::Ipv4,
        &ipv4(REMOTE, HOST, IpProtocol::Udp, 9, false, &udp(10)),
    );
    out = send(&mut e, 1, &f, 1);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port, 0);
    assert_eq!(out[0].vlan(), None);
    assert_eq!(out[0].eth().dst_addr(), HOST_MAC);
    assert_eq!(out[0].ipv4().ttl(), 8);
    assert_eq!(out[0].frame.len(), 14 + 20 + 18);
}

#[test]
fn ttl_one_gets_time_exceeded_from_the_ingress_address() {
    let mut e = engine();
    let input = udp4_frame(REMOTE, 1, false, 100);
    let out = send(&mut e, 0, &input, 0);
    assert_eq!(drops(&e, 0, DropReason::TtlExpired), 1);
    // Host 10.0.0.2 is unresolved: the error waits on an ARP request.
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ethertype(), EtherType::Arp);
    let out = send(
        &mut e,
        0,
        &arp(Operation::Reply, HOST_MAC, HOST, RED0, RED0_MAC, None),
        1,
    );
    assert_eq!(out.len(), 1, "held ICMP error released by the ARP reply");
    let o = &out[0];
    assert_eq!((o.port, o.eth().dst_addr()), (0, HOST_MAC));
    let ip = o.ipv4();
    assert_eq!(
        ip.src_addr(),
        RED0,
        "source is the ingress interface's address"
    );
    assert_eq!(ip.dst_addr(), HOST);
    assert_eq!(ip.protocol(), IpProtocol::Icmp);
    match o.icmpv4() {
        Icmpv4Repr::TimeExceeded { code, data } => {
            assert_eq!(code, 0);
            assert_eq!(data, &input[14..14 + 28], "quotes the header and 8 bytes");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.iface_counters(IfaceId::new(0)).icmp_errors, 1);
}

fn learn_host(e: &mut vrhost_dataplane::Engine) {
    let out = send(
        e,
        0,
        &arp(Operation::Reply, HOST_MAC, HOST, RED0, RED0_MAC, None),
        0,
    );
    assert!(out.is_empty());
}

fn single_icmp(out: &[Out]) -> Icmpv4Repr<'_> {
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].ipv4().dst_addr(), HOST);
    out[0].icmpv4()
}

#[test]
fn no_route_gets_net_unreachable() {
    let mut e = engine();
    learn_host(&mut e);
    let out = send(
        &mut e,
        0,
        &udp4_frame(Ipv4Addr::new(8, 8, 8, 8), 64, false, 10),
        1,
    );
    assert!(matches!(
        single_icmp(&out),
        Icmpv4Repr::DstUnreachable { code: 0, .. }
    ));
    assert_eq!(drops(&e, 0, DropReason::NoRoute), 1);
}

#[test]
fn unreachable_route_answers_and_blackhole_is_silent() {
    let mut e = engine();
    learn_host(&mut e);
    let out = send(
        &mut e,
        0,
        &udp4_frame(Ipv4Addr::new(198, 51, 100, 1), 64, false, 10),
        1,
    );
    assert!(matches!(
        single_icmp(&out),
        Icmpv4Repr::DstUnreachable { code: 1, .. }
    ));
    let out = send(
        &mut e,
        0,
        &udp4_frame(Ipv4Addr::new(203, 0, 113, 1), 64, false, 10),
        2,
    );
    assert!(out.is_empty());
    assert_eq!(drops(&e, 0, DropReason::Blackhole), 1);
    assert_eq!(drops(&e, 0, DropReason::Unreachable), 1);
}

#[test]
fn df_over_mtu_gets_fragmentation_needed_with_the_mtu() {
    let mut e = engine();
    learn_host(&mut e);
    let out = send(&mut e, 0, &udp4_frame(REMOTE, 64, true, 1450), 1);
    match single_icmp(&out) {
        Icmpv4Repr::DstUnreachable {
            code: 4,
            next_hop_mtu,
            ..
        } => assert_eq!(next_hop_mtu, RED1_MTU),
        other => panic!("{other:?}"),
    }
    assert_eq!(drops(&e, 0, DropReason::MtuExceeded), 1);
}

#[test]
fn fragments_without_df_and_reassemble_to_the_original() {
    let mut e = engine();
    let input = udp4_frame(REMOTE, 64, false, 3000);
    let original = &input[14..];
    let out = send(&mut e, 0, &input, 0);
    assert_eq!(out.len(), 3, "3008 bytes of payload over 1380-byte pieces");
    let mut payload = Vec::new();
    for (i, o) in out.iter().enumerate() {
        let ip = o.ipv4();
        assert!(ip.total_len() <= RED1_MTU);
        assert_eq!(ip.ttl(), 63);
        assert_eq!(ip.ident(), 0x4242);
        assert_eq!(ip.frag_offset() as usize, payload.len());
        assert_eq!(ip.more_frags(), i < 2);
        if i < 2 {
            assert_eq!(ip.payload().len() % 8, 0);
        }
        payload.extend_from_slice(ip.payload());
    }
    assert_eq!(payload, &original[20..]);
    assert_eq!(e.iface_counters(IfaceId::new(0)).forwarded, 1);
    assert_eq!(e.iface_counters(IfaceId::new(1)).tx_packets, 3);
}

#[test]
fn later_fragments_keep_only_copied_options() {
    let mut e = engine();
    // Header with options: Router Alert (copied, 4 bytes) + Record Route (not copied, 8 bytes).
    let body = udp(2000);
    let mut p = ipv4(HOST, REMOTE, IpProtocol::Udp, 64, false, &body);
    let opts = [0x94, 4, 0, 0, 0x07, 7, 4, 0, 0, 0, 0, 0];
    p.splice(20..20, opts);
    p[0] = 0x45 + 3;
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    let mut f = eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &p);
    fix_ipv4_checksum(&mut f, 14);
    let out = send(&mut e, 0, &f, 0);
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[0].ipv4().header_len(),
        32,
        "first fragment keeps every option"
    );
    assert_eq!(out[0].ipv4().options(), &opts);
    assert_eq!(
        out[1].ipv4().header_len(),
        24,
        "later fragments keep Router Alert only"
    );
    assert_eq!(out[1].ipv4().options(), &opts[..4]);
    let joined: Vec<u8> = out
        .iter()
        .flat_map(|o| o.ipv4().payload().to_vec())
        .collect();
    assert_eq!(joined, body);
}

#[test]
fn fragments_of_a_fragment_keep_offsets_and_more_fragments() {
    let mut e = engine();
    let mut f = udp4_frame(REMOTE, 64, false, 2000);
    // Mark the input as a middle fragment at offset 800 with MF set.
    f[14 + 6..14 + 8].copy_from_slice(&(0x2000u16 | 100).to_be_bytes());
    fix_ipv4_checksum(&mut f, 14);
    let out = send(&mut e, 0, &f, 0);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].ipv4().frag_offset(), 800);
    assert_eq!(out[1].ipv4().frag_offset(), 800 + 1376);
    assert!(out[1].ipv4().more_frags(), "the last piece inherits MF");
}

/// A fragment at offset 65,000 with 2,000 bytes would end past 65,535:
/// its pieces' offsets cannot be written (they wrapped to small ones), so
/// it is dropped as `fragment-failed`, not sent with offsets that lie.
#[test]
fn a_fragment_ending_past_65535_is_not_cut_into_lying_offsets() {
    let mut e = engine();
    let mut f = udp4_frame(REMOTE, 64, false, 2000);
    f[14 + 6..14 + 8].copy_from_slice(&(65_000u16 / 8).to_be_bytes());
    fix_ipv4_checksum(&mut f, 14);
    assert!(send(&mut e, 0, &f, 0).is_empty());
    assert_eq!(drops(&e, 0, DropReason::FragmentFailed), 1);
}

#[test]
fn invalid_headers_are_counted_drops() {
    let mut e = engine();
    let good = udp4_frame(REMOTE, 64, false, 10);
    let mut bad_sum = good.clone();
    bad_sum[14 + 10] ^= 0xff;
    let mut bad_ver = good.clone();
    bad_ver[14] = 0x65;
    fix_ipv4_checksum(&mut bad_ver, 14);
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x44;
    let mut too_long = good.clone();
    too_long[14 + 2..14 + 4].copy_from_slice(&1000u16.to_be_bytes());
    fix_ipv4_checksum(&mut too_long, 14);
    let short = good[..14 + 12].to_vec();
    for f in [&bad_sum, &bad_ver, &bad_ihl, &too_long, &short] {
        assert!(send(&mut e, 0, f, 0).is_empty());
    }
    assert_eq!(drops(&e, 0, DropReason::Ipv4BadChecksum), 1);
    assert_eq!(drops(&e, 0, DropReason::Ipv4BadVersion), 1);
    assert_eq!(drops(&e, 0, DropReason::Ipv4Truncated), 3);
}

#[test]
fn ethernet_padding_is_trimmed() {
    let mut e = engine();
    let mut f = udp4_frame(REMOTE, 64, false, 0);
    f.resize(60, 0xee); // minimum Ethernet frame
    let out = send(&mut e, 0, &f, 0);
    assert_eq!(out[0].frame.len(), 18 + 28, "no padding forwarded");
}

#[test]
fn martians_are_dropped() {
    let mut e = engine();
    let cases = [
        (
            Ipv4Addr::new(127, 0, 0, 1),
            REMOTE,
            DropReason::MartianSource,
        ),
        (Ipv4Addr::new(0, 1, 2, 3), REMOTE, DropReason::MartianSource),
        (
            Ipv4Addr::new(224, 0, 0, 5),
            REMOTE,
            DropReason::MartianSource,
        ),
        (
            Ipv4Addr::new(240, 0, 0, 1),
            REMOTE,
            DropReason::MartianSource,
        ),
        (Ipv4Addr::BROADCAST, REMOTE, DropReason::MartianSource),
        (
            HOST,
            Ipv4Addr::new(127, 0, 0, 1),
            DropReason::MartianDestination,
        ),
        (
            HOST,
            Ipv4Addr::new(0, 0, 0, 9),
            DropReason::MartianDestination,
        ),
        (
            HOST,
            Ipv4Addr::new(250, 1, 1, 1),
            DropReason::MartianDestination,
        ),
        (
            HOST,
            Ipv4Addr::new(10, 0, 0, 255),
            DropReason::DirectedBroadcast,
        ),
        (
            HOST,
            Ipv4Addr::new(10, 1, 0, 255),
            DropReason::DirectedBroadcast,
        ),
        (
            HOST,
            Ipv4Addr::new(239, 1, 1, 1),
            DropReason::MulticastNotRouted,
        ),
    ];
    for (src, dst, reason) in cases {
        let before = drops(&e, 0, reason);
        let f = eth(
            RED0_MAC,
            HOST_MAC,
            None,
            EtherType::Ipv4,
            &ipv4(src, dst, IpProtocol::Udp, 64, false, &udp(4)),
        );
        assert!(send(&mut e, 0, &f, 0).is_empty(), "{src} -> {dst}");
        assert_eq!(
            drops(&e, 0, reason),
            before + 1,
            "{src} -> {dst}: {reason:?}"
        );
    }
}

#[test]
fn source_routed_packets_are_dropped() {
    let mut e = engine();
    let mut p = ipv4(HOST, REMOTE, IpProtocol::Udp, 64, false, &udp(8));
    p.splice(20..20, [0x83, 7, 4, 1, 2, 3, 4, 0]); // LSRR + EOL
    p[0] = 0x47;
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    let mut f = eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &p);
    fix_ipv4_checksum(&mut f, 14);
    assert!(send(&mut e, 0, &f, 0).is_empty());
    assert_eq!(drops(&e, 0, DropReason::Ipv4BadOptions), 1);
}

#[test]
fn l2_and_demux_filters() {
    let mut e = engine();
    let mut f = udp4_frame(REMOTE, 64, false, 10);
    f[0..6].copy_from_slice(&[0x02, 9, 9, 9, 9, 9]);
    assert!(send(&mut e, 0, &f, 0).is_empty());
    assert_eq!(drops(&e, 0, DropReason::NotForUs), 1);
    let tagged = eth(
        RED1_MAC,
        GW_MAC,
        Some(999),
        EtherType::Ipv4,
        &ipv4(GW, HOST, IpProtocol::Udp, 64, false, &udp(4)),
    );
    assert!(send(&mut e, 1, &tagged, 0).is_empty());
    assert_eq!(drops(&e, 1, DropReason::NoInterface), 1);
    assert!(send(&mut e, 0, &[0u8; 10], 0).is_empty());
    assert_eq!(drops(&e, 0, DropReason::TruncatedL2), 1);
    let other = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Unknown(0x88cc),
        &[0u8; 46],
    );
    assert!(send(&mut e, 0, &other, 0).is_empty());
    assert_eq!(drops(&e, 0, DropReason::UnsupportedEthertype), 1);
}

#[test]
fn echo_to_any_own_address_is_answered() {
    let mut e = engine();
    learn_host(&mut e);
    for dst in [RED0, RED1] {
        let req = echo4(0x77, 3, b"hello vrhost");
        let f = eth(
            RED0_MAC,
            HOST_MAC,
            None,
            EtherType::Ipv4,
            &ipv4(HOST, dst, IpProtocol::Icmp, 64, false, &req),
        );
        let out = send(&mut e, 0, &f, 1);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].port, out[0].eth().dst_addr()), (0, HOST_MAC));
        let ip = out[0].ipv4();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (dst, HOST));
        match out[0].icmpv4() {
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                assert_eq!((ident, seq_no, data), (0x77, 3, &b"hello vrhost"[..]));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        e.iface_counters(IfaceId::new(0)).local,
        2 + 1,
        "two echoes and one ARP reply learned"
    );
}

#[test]
fn other_traffic_for_the_router_is_punted_into_a_bounded_queue() {
    let mut e = vrhost_dataplane::Engine::new(&spec(Limits {
        punt_queue: 2,
        ..Limits::default()
    }))
    .unwrap();
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(HOST, RED0, IpProtocol::Tcp, 64, false, &[0u8; 20]),
    );
    for _ in 0..3 {
        assert!(send(&mut e, 0, &f, 0).is_empty());
    }
    assert_eq!(e.vr(VrId::new(0)).punt_len, 2);
    assert_eq!(e.iface_counters(IfaceId::new(0)).punted, 2);
    assert_eq!(drops(&e, 0, DropReason::PuntQueueFull), 1);
    let mut seen = 0;
    e.drain_punted(VrId::new(0), |m| {
        assert_eq!(&m.data()[14..], &f[14..]);
        seen += 1;
    });
    assert_eq!(seen, 2);
    // OSPF to 224.0.0.5 is control traffic too.
    let mcast = vrhost_wire::ethernet::ipv4_multicast_mac(&Ipv4Addr::new(224, 0, 0, 5));
    let ospf = eth(
        mcast,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(
            HOST,
            Ipv4Addr::new(224, 0, 0, 5),
            IpProtocol::Ospf,
            1,
            false,
            &[0u8; 24],
        ),
    );
    send(&mut e, 0, &ospf, 0);
    assert_eq!(
        drops(&e, 0, DropReason::NotForUs),
        1,
        "224.0.0.5 not joined: filtered at L2"
    );
}

#[test]
fn icmp_errors_are_never_sent_about_icmp_errors_broadcasts_or_later_fragments() {
    let mut e = engine();
    learn_host(&mut e);
    // An ICMP error (dest unreachable) with TTL 1.
    let err = {
        let r = Icmpv4Repr::DstUnreachable {
            code: 3,
            next_hop_mtu: 0,
            data: &[0u8; 28],
        };
        let mut b = vec![0; r.buffer_len()];
        r.emit(&mut vrhost_wire::icmpv4::Icmpv4Packet::new_unchecked(
            &mut b[..],
        ));
        b
    };
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(HOST, REMOTE, IpProtocol::Icmp, 1, false, &err),
    );
    assert!(send(&mut e, 0, &f, 1).is_empty());
    // A link-layer broadcast with no route.
    let mut b = udp4_frame(Ipv4Addr::new(8, 8, 8, 8), 64, false, 4);
    b[0..6].copy_from_slice(&[0xff; 6]);
    assert!(send(&mut e, 0, &b, 1).is_empty());
    // A non-first fragment with TTL 1.
    let mut frag = udp4_frame(REMOTE, 1, false, 8);
    frag[14 + 6..14 + 8].copy_from_slice(&10u16.to_be_bytes());
    fix_ipv4_checksum(&mut frag, 14);
    assert!(send(&mut e, 0, &frag, 1).is_empty());
    assert_eq!(e.iface_counters(IfaceId::new(0)).icmp_suppressed, 3);
    assert_eq!(e.iface_counters(IfaceId::new(0)).icmp_errors, 0);
}

#[test]
fn icmp_errors_are_rate_limited_per_vr() {
    let mut e = vrhost_dataplane::Engine::new(&spec(Limits {
        icmp_rate: 2,
        ..Limits::default()
    }))
    .unwrap();
    learn_host(&mut e);
    let f = udp4_frame(Ipv4Addr::new(8, 8, 8, 8), 64, false, 4);
    let sent: usize = (0..5).map(|i| send(&mut e, 0, &f, SEC + i).len()).sum();
    assert_eq!(sent, 2, "burst of 2");
    assert_eq!(e.iface_counters(IfaceId::new(0)).icmp_rate_limited, 3);
    // Half a second later one more token is there.
    assert_eq!(send(&mut e, 0, &f, SEC + SEC / 2).len(), 1);
    // Blue's budget is its own.
    let blue = eth(
        BLUE0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(
            HOST,
            Ipv4Addr::new(8, 8, 8, 8),
            IpProtocol::Udp,
            64,
            false,
            &udp(4),
        ),
    );
    send(&mut e, 2, &blue, SEC + SEC / 2);
    assert_eq!(e.iface_counters(IfaceId::new(2)).icmp_errors, 1);
}

#[test]
fn tenants_with_identical_addresses_stay_apart() {
    let mut e = engine();
    // The same packet into red (p0) and into blue (p2).
    let red = udp4_frame(REMOTE, 64, false, 10);
    let blue = eth(BLUE0_MAC, HOST_MAC, None, EtherType::Ipv4, &red[14..]);
    let r = send(&mut e, 0, &red, 0);
    let b = send(&mut e, 2, &blue, 0);
    assert_eq!(
        (r[0].port, r[0].vlan(), r[0].eth().dst_addr()),
        (1, Some(100), GW_MAC)
    );
    assert_eq!(
        (b[0].port, b[0].vlan(), b[0].eth().dst_addr()),
        (1, Some(200), BLUE_GW_MAC)
    );
    assert_eq!(e.vr_counters(VrId::new(0)).rx_packets, 1);
    assert_eq!(e.vr_counters(VrId::new(1)).rx_packets, 1);
    // Red's MAC on blue's port is not blue's.
    assert!(send(&mut e, 2, &red, 0).is_empty());
    assert_eq!(drops(&e, 2, DropReason::NotForUs), 1);
}

#[test]
fn rewrites_the_vlan_tag_between_tagged_interfaces() {
    use std::net::IpAddr;
    use vrhost_dataplane::{EngineSpec, InterfaceSpec, PortSpec, RouteTarget, RouterSpec};
    let iface = |name: &str, vlan: u16, addr: Ipv4Addr| InterfaceSpec {
        inner_vlan: None,
        tpid: Default::default(),
        urpf: Default::default(),
        name: name.into(),
        port: 0,
        vlan: Some(vlan),
        mac: RED0_MAC,
        mtu: 1500,
        addrs4: vec![(addr, 24)],
        addrs6: vec![],
        filters: Default::default(),
    };
    let spec = EngineSpec {
        ports: vec![PortSpec {
            name: "trunk".into(),
            mtu: 1500,
        }],
        routers: vec![RouterSpec {
            name: "r".into(),
            interfaces: vec![
                iface("a", 10, Ipv4Addr::new(10, 0, 0, 1)),
                iface("b", 20, Ipv4Addr::new(10, 1, 0, 1)),
            ],
            routes4: vec![(
                "192.0.2.0/24".parse().unwrap(),
                RouteTarget::Via(IpAddr::V4(GW)),
            )],
            neighbors: vec![(IpAddr::V4(GW), GW_MAC)],
            ..Default::default()
        }],
    };
    let mut e = vrhost_dataplane::Engine::new(&spec).unwrap();
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        Some(10),
        EtherType::Ipv4,
        &ipv4(HOST, REMOTE, IpProtocol::Udp, 64, false, &udp(8)),
    );
    let out = send(&mut e, 0, &f, 0);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].port, out[0].vlan(), out[0].eth().dst_addr()),
        (0, Some(20), GW_MAC)
    );
    assert_eq!(
        out[0].frame.len(),
        f.len(),
        "same length: tag rewritten in place"
    );
    assert_eq!(out[0].ipv4().ttl(), 63);
}
