//! Golden scenarios for IPv6 forwarding (RFC 8200, RFC 4443) and NDP (RFC 4861).

mod common;

use std::net::Ipv6Addr;

use common::*;
use vrhost_dataplane::{link_local_from_mac, DropReason, Engine, IfaceId, PortId};
use vrhost_wire::ethernet::{ipv6_multicast_mac, EtherType, EthernetAddress};
use vrhost_wire::icmpv6::{Icmpv6Repr, NdiscNeighborFlags, NdiscRepr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv6::{solicited_node, ALL_NODES};

fn drops(e: &Engine, port: usize, d: DropReason) -> u64 {
    e.port_counters(PortId::from_index(port)).drop_count(d)
}

fn na_from_host(target: Ipv6Addr, mac: EthernetAddress, dst: Ipv6Addr) -> Vec<u8> {
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
        target_addr: target,
        lladdr: Some(mac),
    });
    eth(
        RED0_MAC,
        mac,
        None,
        EtherType::Ipv6,
        &icmpv6(target, dst, 255, &na),
    )
}

/// Makes the router learn HOST6 (it solicits, the host answers).
fn learn_host6(e: &mut Engine) {
    let out = send(e, 0, &ns(HOST6, RED0_6, Some(HOST_MAC)), 0);
    assert_eq!(out.len(), 1, "NA for our address");
}

fn ns(src: Ipv6Addr, target: Ipv6Addr, lladdr: Option<EthernetAddress>) -> Vec<u8> {
    let dst = solicited_node(&target);
    let repr = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: target,
        lladdr,
    });
    eth(
        ipv6_multicast_mac(&dst),
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &icmpv6(src, dst, 255, &repr),
    )
}

#[test]
fn forwards_via_gateway_decrementing_the_hop_limit() {
    let mut e = engine();
    let input = udp6_frame(REMOTE6, 64, 100);
    let out = send(&mut e, 0, &input, 0);
    assert_eq!(out.len(), 1);
    let o = &out[0];
    assert_eq!(
        (o.port, o.vlan(), o.eth().dst_addr(), o.eth().src_addr()),
        (1, Some(100), GW_MAC, RED1_MAC)
    );
    assert_eq!(o.ethertype(), EtherType::Ipv6);
    let ip = o.ipv6();
    assert_eq!(ip.hop_limit(), 63);
    assert_eq!((ip.src_addr(), ip.dst_addr()), (HOST6, REMOTE6));
    assert_eq!(ip.payload(), &input[14 + 40..]);
}

#[test]
fn hop_limit_one_gets_time_exceeded() {
    let mut e = engine();
    learn_host6(&mut e);
    let input = udp6_frame(REMOTE6, 1, 100);
    let out = send(&mut e, 0, &input, 1);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].eth().dst_addr(), HOST_MAC);
    assert_eq!(
        out[0].ipv6().src_addr(),
        RED0_6,
        "from the ingress interface's address"
    );
    match out[0].icmpv6() {
        Icmpv6Repr::TimeExceeded { code: 0, data } => assert_eq!(data, &input[14..]),
        other => panic!("{other:?}"),
    }
    assert_eq!(drops(&e, 0, DropReason::TtlExpired), 1);
}

#[test]
fn quotes_at_most_what_fits_in_1280_bytes() {
    let mut e = engine();
    learn_host6(&mut e);
    let out = send(&mut e, 0, &udp6_frame(REMOTE6, 1, 1400), 1);
    let ip = out[0].ipv6();
    assert_eq!(40 + ip.payload_len() as usize, 1280);
}

#[test]
fn no_route_and_reject_routes_get_destination_unreachable() {
    let mut e = engine();
    learn_host6(&mut e);
    let out = send(
        &mut e,
        0,
        &udp6_frame("2001:db8:77::1".parse().unwrap(), 64, 8),
        1,
    );
    assert!(matches!(
        out[0].icmpv6(),
        Icmpv6Repr::DstUnreachable { code: 0, .. }
    ));
    let out = send(
        &mut e,
        0,
        &udp6_frame("2001:db8:dead::1".parse().unwrap(), 64, 8),
        1,
    );
    assert!(matches!(
        out[0].icmpv6(),
        Icmpv6Repr::DstUnreachable { code: 6, .. }
    ));
    assert_eq!(drops(&e, 0, DropReason::NoRoute), 1);
    assert_eq!(drops(&e, 0, DropReason::Unreachable), 1);
}

#[test]
fn too_big_gets_packet_too_big_and_is_never_fragmented() {
    let mut e = engine();
    learn_host6(&mut e);
    let out = send(&mut e, 0, &udp6_frame(REMOTE6, 64, 1400), 1);
    assert_eq!(out.len(), 1);
    match out[0].icmpv6() {
        Icmpv6Repr::PacketTooBig { mtu, .. } => assert_eq!(mtu, RED1_MTU as u32),
        other => panic!("{other:?}"),
    }
    assert_eq!(drops(&e, 0, DropReason::MtuExceeded), 1);
}

#[test]
fn link_local_is_never_forwarded() {
    let mut e = engine();
    let ll_src: Ipv6Addr = "fe80::2".parse().unwrap();
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &ipv6(ll_src, REMOTE6, IpProtocol::Udp, 64, &udp(8)),
    );
    let out = send(&mut e, 0, &f, 0);
    // Beyond-scope error goes back to fe80::2, which must be resolved first.
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].ipv6().dst_addr(),
        solicited_node(&ll_src),
        "NS for the link-local sender"
    );
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &ipv6(
            HOST6,
            "fe80::99".parse().unwrap(),
            IpProtocol::Udp,
            64,
            &udp(8),
        ),
    );
    assert!(send(&mut e, 0, &f, 0).is_empty());
    assert_eq!(drops(&e, 0, DropReason::Ipv6LinkLocalNotForwarded), 2);
}

#[test]
fn martian_addresses_are_dropped() {
    let mut e = engine();
    for (src, dst) in [
        ("ff02::1", "2001:db8:ff::1"),
        ("::1", "2001:db8:ff::1"),
        ("2001:db8::2", "::1"),
        ("::", "2001:db8:ff::1"),
    ] {
        let f = eth(
            RED0_MAC,
            HOST_MAC,
            None,
            EtherType::Ipv6,
            &ipv6(
                src.parse().unwrap(),
                dst.parse().unwrap(),
                IpProtocol::Udp,
                64,
                &udp(8),
            ),
        );
        assert!(send(&mut e, 0, &f, 0).is_empty(), "{src} -> {dst}");
    }
    assert_eq!(drops(&e, 0, DropReason::Ipv6MartianAddress), 4);
    let global_mcast = eth(
        ipv6_multicast_mac(&"ff0e::1".parse().unwrap()),
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &ipv6(
            HOST6,
            "ff0e::1".parse().unwrap(),
            IpProtocol::Udp,
            64,
            &udp(8),
        ),
    );
    // 33:33:00:00:00:01 is also all-nodes' MAC, so it passes L2; L3 refuses to route it.
    send(&mut e, 0, &global_mcast, 0);
    assert_eq!(drops(&e, 0, DropReason::MulticastNotRouted), 1);
}

#[test]
fn bad_headers_are_counted() {
    let mut e = engine();
    let good = udp6_frame(REMOTE6, 64, 8);
    let mut ver = good.clone();
    ver[14] = 0x40;
    let mut long = good.clone();
    long[14 + 4..14 + 6].copy_from_slice(&900u16.to_be_bytes());
    for f in [&ver, &long, &good[..40].to_vec()] {
        assert!(send(&mut e, 0, f, 0).is_empty());
    }
    assert_eq!(drops(&e, 0, DropReason::Ipv6BadVersion), 1);
    assert_eq!(drops(&e, 0, DropReason::Ipv6Truncated), 2);
}

#[test]
fn solicitation_for_our_address_is_answered() {
    let mut e = engine();
    let out = send(&mut e, 0, &ns(HOST6, RED0_6, Some(HOST_MAC)), 0);
    assert_eq!(out.len(), 1);
    let o = &out[0];
    assert_eq!(
        (o.port, o.eth().dst_addr(), o.eth().src_addr()),
        (0, HOST_MAC, RED0_MAC)
    );
    let ip = o.ipv6();
    assert_eq!(
        (ip.src_addr(), ip.dst_addr(), ip.hop_limit()),
        (RED0_6, HOST6, 255)
    );
    match o.icmpv6() {
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags,
            target_addr,
            lladdr,
        }) => {
            assert_eq!(target_addr, RED0_6);
            assert_eq!(lladdr, Some(RED0_MAC));
            assert!(flags.contains(NdiscNeighborFlags::SOLICITED));
            assert!(flags.contains(NdiscNeighborFlags::ROUTER));
            assert!(flags.contains(NdiscNeighborFlags::OVERRIDE));
        }
        other => panic!("{other:?}"),
    }
    // The link-local address is answered too.
    let ll = link_local_from_mac(RED0_MAC);
    assert_eq!(
        send(
            &mut e,
            0,
            &ns("fe80::2".parse().unwrap(), ll, Some(HOST_MAC)),
            0
        )
        .len(),
        1
    );
    // Somebody else's address is not: its solicited-node group is not joined...
    assert!(send(
        &mut e,
        0,
        &ns(HOST6, "2001:db8::77".parse().unwrap(), Some(HOST_MAC)),
        0
    )
    .is_empty());
    assert_eq!(drops(&e, 0, DropReason::NotForUs), 1);
    // ... and a unicast solicitation for it is not answered either.
    let other: Ipv6Addr = "2001:db8::77".parse().unwrap();
    let repr = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: other,
        lladdr: Some(HOST_MAC),
    });
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &icmpv6(HOST6, RED0_6, 255, &repr),
    );
    assert!(send(&mut e, 0, &f, 0).is_empty());
    assert_eq!(drops(&e, 0, DropReason::NeighborNotForUs), 1);
}

#[test]
fn duplicate_address_detection_is_answered_to_all_nodes() {
    let mut e = engine();
    let out = send(&mut e, 0, &ns(Ipv6Addr::UNSPECIFIED, RED0_6, None), 0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].eth().dst_addr(), ipv6_multicast_mac(&ALL_NODES));
    assert_eq!(out[0].ipv6().dst_addr(), ALL_NODES);
    match out[0].icmpv6() {
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert { flags, .. }) => {
            assert!(!flags.contains(NdiscNeighborFlags::SOLICITED))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ndp_with_a_hop_limit_below_255_is_rejected() {
    let mut e = engine();
    let mut f = ns(HOST6, RED0_6, Some(HOST_MAC));
    f[14 + 7] = 64;
    assert!(send(&mut e, 0, &f, 0).is_empty());
    assert_eq!(drops(&e, 0, DropReason::BadNdp), 1);
}

#[test]
fn unresolved_neighbors_are_solicited_and_held_packets_released() {
    let mut e = engine();
    let host: Ipv6Addr = "2001:db8::50".parse().unwrap();
    let f = eth(
        RED1_MAC,
        GW_MAC,
        Some(100),
        EtherType::Ipv6,
        &ipv6(REMOTE6, host, IpProtocol::Udp, 30, &udp(8)),
    );
    let out = send(&mut e, 1, &f, 0);
    assert_eq!(out.len(), 1, "one NS");
    let o = &out[0];
    assert_eq!(
        (o.port, o.eth().dst_addr()),
        (0, ipv6_multicast_mac(&solicited_node(&host)))
    );
    assert_eq!(o.ipv6().dst_addr(), solicited_node(&host));
    assert_eq!(o.ipv6().hop_limit(), 255);
    match o.icmpv6() {
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr,
            lladdr,
        }) => {
            assert_eq!(target_addr, host);
            assert_eq!(lladdr, Some(RED0_MAC));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        send(&mut e, 1, &f, 1).is_empty(),
        "second packet held, no second NS within a second"
    );
    let host_mac = EthernetAddress([0x02, 0xdd, 0, 0, 0, 0x50]);
    let out = send(&mut e, 0, &na_from_host(host, host_mac, RED0_6), 2);
    assert_eq!(out.len(), 2, "both held packets sent");
    for o in &out {
        assert_eq!((o.port, o.eth().dst_addr()), (0, host_mac));
        assert_eq!(o.ipv6().hop_limit(), 29);
    }
}

#[test]
fn echo_to_our_address_is_answered() {
    let mut e = engine();
    learn_host6(&mut e);
    let req = Icmpv6Repr::EchoRequest {
        ident: 9,
        seq_no: 1,
        data: b"ping6",
    };
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &icmpv6(HOST6, RED0_6, 64, &req),
    );
    let out = send(&mut e, 0, &f, 1);
    assert_eq!(out.len(), 1);
    let ip = out[0].ipv6();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (RED0_6, HOST6));
    assert!(
        matches!(out[0].icmpv6(), Icmpv6Repr::EchoReply { ident: 9, seq_no: 1, data } if data == b"ping6")
    );
}

#[test]
fn icmpv6_errors_are_not_sent_about_icmpv6_errors_or_multicast() {
    let mut e = engine();
    learn_host6(&mut e);
    // An ICMPv6 Destination Unreachable with hop limit 1.
    let err = Icmpv6Repr::DstUnreachable {
        code: 0,
        data: &[0u8; 48],
    };
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &icmpv6(HOST6, REMOTE6, 1, &err),
    );
    assert!(send(&mut e, 0, &f, 1).is_empty());
    // A frame to the all-nodes MAC but a unicast IPv6 destination without a route.
    let mut m = udp6_frame("2001:db8:77::1".parse().unwrap(), 64, 8);
    m[..6].copy_from_slice(&ipv6_multicast_mac(&ALL_NODES).0);
    assert!(send(&mut e, 0, &m, 1).is_empty());
    assert_eq!(e.iface_counters(IfaceId::new(0)).icmp_suppressed, 2);
    assert_eq!(e.iface_counters(IfaceId::new(0)).icmp_errors, 0);
}
