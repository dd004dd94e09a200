//! Golden scenarios for ARP (RFC 826, RFC 1122 §2.3.2) and neighbor timers.

mod common;

use std::net::Ipv4Addr;

use common::*;
use vrhost_dataplane::{DropReason, Engine, IfaceId, Limits, PortId, VrId};
use vrhost_wire::arp::{ArpPacket, ArpRepr, Operation};
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::ip::IpProtocol;

fn parse_arp(o: &Out) -> ArpRepr {
    assert_eq!(o.ethertype(), EtherType::Arp);
    ArpRepr::parse(&ArpPacket::new_checked(o.l3()).unwrap()).unwrap()
}

const NEW_HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 50);
const NEW_MAC: EthernetAddress = EthernetAddress([0x02, 0xee, 0, 0, 0, 0x50]);

fn toward_new_host() -> Vec<u8> {
    toward(NEW_HOST)
}

/// A UDP frame from the gateway's side (red1, VLAN 100) to `dst`.
fn toward(dst: Ipv4Addr) -> Vec<u8> {
    eth(
        RED1_MAC,
        GW_MAC,
        Some(100),
        EtherType::Ipv4,
        &ipv4(REMOTE, dst, IpProtocol::Udp, 64, false, &udp(8)),
    )
}

#[test]
fn requests_for_our_address_are_answered() {
    let mut e = engine();
    let out = send(
        &mut e,
        0,
        &arp(
            Operation::Request,
            HOST_MAC,
            HOST,
            RED0,
            EthernetAddress::BROADCAST,
            None,
        ),
        0,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(
        (
            out[0].port,
            out[0].eth().dst_addr(),
            out[0].eth().src_addr()
        ),
        (0, HOST_MAC, RED0_MAC)
    );
    let r = parse_arp(&out[0]);
    assert_eq!(r.operation, Operation::Reply);
    assert_eq!(
        (r.source_hardware_addr, r.source_protocol_addr),
        (RED0_MAC, RED0)
    );
    assert_eq!(
        (r.target_hardware_addr, r.target_protocol_addr),
        (HOST_MAC, HOST)
    );
    // The request taught the router the host's MAC: a packet to it goes straight out.
    let f = eth(
        RED1_MAC,
        GW_MAC,
        Some(100),
        EtherType::Ipv4,
        &ipv4(REMOTE, HOST, IpProtocol::Udp, 64, false, &udp(8)),
    );
    let out = send(&mut e, 1, &f, 1);
    assert_eq!(out[0].eth().dst_addr(), HOST_MAC);
}

#[test]
fn learning_holds_at_wall_clock_timestamps() {
    // replay feeds pcap timestamps (nanoseconds since 1970): timers must not
    // mistake a fresh entry for an idle one.
    const T0: u64 = 1_700_000_000 * SEC;
    let mut e = engine();
    assert_eq!(
        send(
            &mut e,
            0,
            &arp(
                Operation::Request,
                HOST_MAC,
                HOST,
                RED0,
                EthernetAddress::BROADCAST,
                None
            ),
            T0
        )
        .len(),
        1
    );
    let f = eth(
        RED1_MAC,
        GW_MAC,
        Some(100),
        EtherType::Ipv4,
        &ipv4(REMOTE, HOST, IpProtocol::Udp, 64, false, &udp(8)),
    );
    let out = send(&mut e, 1, &f, T0 + 1_000_000);
    assert_eq!(
        out.len(),
        1,
        "sent straight to the learned MAC, no ARP request"
    );
    assert_eq!(out[0].eth().dst_addr(), HOST_MAC);
}

#[test]
fn requests_for_other_addresses_are_ignored() {
    let mut e = engine();
    assert!(send(
        &mut e,
        0,
        &arp(
            Operation::Request,
            HOST_MAC,
            HOST,
            Ipv4Addr::new(10, 0, 0, 9),
            EthernetAddress::BROADCAST,
            None
        ),
        0
    )
    .is_empty());
    assert!(
        send(
            &mut e,
            0,
            &arp(
                Operation::Request,
                HOST_MAC,
                HOST,
                RED1,
                EthernetAddress::BROADCAST,
                None
            ),
            0
        )
        .is_empty(),
        "red1's address is not on red0's link"
    );
    assert_eq!(
        e.port_counters(PortId::new(0))
            .drop_count(DropReason::NeighborNotForUs),
        2
    );
    // Someone claiming our address.
    assert!(send(
        &mut e,
        0,
        &arp(
            Operation::Request,
            HOST_MAC,
            RED0,
            RED0,
            EthernetAddress::BROADCAST,
            None
        ),
        0
    )
    .is_empty());
    assert_eq!(
        e.port_counters(PortId::new(0))
            .drop_count(DropReason::AddressConflict),
        1
    );
}

#[test]
fn unresolved_next_hop_is_requested_once_per_second_and_released_on_reply() {
    let mut e = engine();
    let out = send(&mut e, 1, &toward_new_host(), 0);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].port, out[0].eth().dst_addr()),
        (0, EthernetAddress::BROADCAST)
    );
    let r = parse_arp(&out[0]);
    assert_eq!(
        (r.operation, r.source_protocol_addr, r.target_protocol_addr),
        (Operation::Request, RED0, NEW_HOST)
    );
    assert!(
        send(&mut e, 1, &toward_new_host(), SEC / 2).is_empty(),
        "held, no new request"
    );
    assert!(
        poll(&mut e, SEC / 2 + 1).is_empty(),
        "timer: still inside the second"
    );
    let retry = poll(&mut e, SEC + 1);
    assert_eq!(retry.len(), 1, "one retransmission after a second");
    let out = send(
        &mut e,
        0,
        &arp(Operation::Reply, NEW_MAC, NEW_HOST, RED0, RED0_MAC, None),
        SEC + 2,
    );
    assert_eq!(out.len(), 2, "both held packets");
    assert!(out
        .iter()
        .all(|o| o.eth().dst_addr() == NEW_MAC && o.ipv4().ttl() == 63));
    assert_eq!(
        e.iface_counters(IfaceId::new(2)).forwarded + e.iface_counters(IfaceId::new(1)).forwarded,
        2
    );
}

#[test]
fn hold_queue_is_bounded_and_failed_resolution_drops() {
    let mut e = Engine::new(&spec(Limits {
        arp_hold: 2,
        ..Limits::default()
    }))
    .unwrap();
    for i in 0..4 {
        send(&mut e, 1, &toward_new_host(), i);
    }
    assert_eq!(e.held(), 2);
    assert_eq!(
        e.port_counters(PortId::new(1))
            .drop_count(DropReason::NeighborUnresolved),
        2
    );
    let mut requests = 1;
    for s in 1..=4 {
        requests += poll(&mut e, s * SEC + 10).len();
    }
    assert_eq!(
        requests, 3,
        "three requests in all (RFC 4861 MAX_MULTICAST_SOLICIT)"
    );
    assert_eq!(e.held(), 0);
    assert_eq!(
        e.port_counters(PortId::new(1))
            .drop_count(DropReason::NeighborUnresolved),
        4
    );
    assert_eq!(
        e.pool().allocated(),
        e.pool().available(),
        "no buffer leaked"
    );
}

#[test]
fn entries_age_and_are_refreshed_with_unicast_requests() {
    let mut e = Engine::new(&spec(Limits {
        neighbor_timeout_ms: 1000,
        ..Limits::default()
    }))
    .unwrap();
    send(&mut e, 1, &toward_new_host(), 0);
    send(
        &mut e,
        0,
        &arp(Operation::Reply, NEW_MAC, NEW_HOST, RED0, RED0_MAC, None),
        1,
    );
    // Reachable: forwarded without a probe.
    assert_eq!(send(&mut e, 1, &toward_new_host(), SEC / 2).len(), 1);
    // Past the reachable time: still forwarded, without a probe at first...
    assert_eq!(send(&mut e, 1, &toward_new_host(), 2 * SEC).len(), 1);
    // ... then, after DELAY_FIRST_PROBE_TIME (RFC 4861 §7.3.3), with a unicast refresh.
    let out = send(&mut e, 1, &toward_new_host(), 8 * SEC);
    assert_eq!(out.len(), 2);
    let probe = out
        .iter()
        .find(|o| o.ethertype() == EtherType::Arp)
        .expect("refresh");
    assert_eq!(probe.eth().dst_addr(), NEW_MAC, "unicast to the cached MAC");
    assert_eq!(parse_arp(probe).target_protocol_addr, NEW_HOST);
}

#[test]
fn gratuitous_arp_updates_a_known_neighbor_only() {
    let mut e = engine();
    // Unknown sender announcing itself: not learned (RFC 826 merge needs an existing entry).
    let garp = arp(
        Operation::Request,
        NEW_MAC,
        NEW_HOST,
        NEW_HOST,
        EthernetAddress::BROADCAST,
        None,
    );
    assert!(send(&mut e, 0, &garp, 0).is_empty());
    assert_eq!(
        e.vr(VrId::new(0)).neighbors,
        2,
        "only the static gateway entries"
    );
    // After the router learned the host, a changed MAC is taken.
    send(
        &mut e,
        0,
        &arp(
            Operation::Request,
            HOST_MAC,
            HOST,
            RED0,
            EthernetAddress::BROADCAST,
            None,
        ),
        0,
    );
    let moved = EthernetAddress([0x02, 0xaa, 0, 0, 0, 0x99]);
    send(
        &mut e,
        0,
        &arp(
            Operation::Request,
            moved,
            HOST,
            HOST,
            EthernetAddress::BROADCAST,
            None,
        ),
        1,
    );
    let f = eth(
        RED1_MAC,
        GW_MAC,
        Some(100),
        EtherType::Ipv4,
        &ipv4(REMOTE, HOST, IpProtocol::Udp, 64, false, &udp(8)),
    );
    assert_eq!(send(&mut e, 1, &f, 2)[0].eth().dst_addr(), moved);
}

#[test]
fn static_neighbors_are_used_without_resolution() {
    let mut e = engine();
    let out = send(&mut e, 0, &udp4_frame(REMOTE, 64, false, 8), 0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].eth().dst_addr(), GW_MAC);
}

#[test]
fn a_deleted_static_neighbor_is_resolved_afresh() {
    // The host's MAC is configured, then deleted: the data plane must stop
    // using it, hold the next packet and ask by ARP, as after `ip neigh del`.
    let mut e = engine();
    let host = std::net::IpAddr::V4(NEW_HOST);
    e.set_static_neighbor(VrId::new(0), host, GW_MAC)
        .expect("static neighbor");
    let out = send(&mut e, 1, &toward_new_host(), SEC);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].eth().dst_addr(), GW_MAC, "the configured MAC");
    assert_eq!(e.remove_static_neighbor(VrId::new(0), host), Ok(true));
    assert_eq!(
        e.remove_static_neighbor(VrId::new(0), host),
        Ok(false),
        "already gone"
    );
    let out = send(&mut e, 1, &toward_new_host(), 2 * SEC);
    assert_eq!(out.len(), 1, "the packet is held, a request goes out");
    assert_eq!(out[0].eth().dst_addr(), EthernetAddress::BROADCAST);
    assert_eq!(parse_arp(&out[0]).target_protocol_addr, NEW_HOST);
    // The real owner answers: the held packet leaves toward its MAC.
    let reply = arp(Operation::Reply, NEW_MAC, NEW_HOST, RED0, RED0_MAC, None);
    let out = send(&mut e, 0, &reply, 2 * SEC);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].eth().dst_addr(), NEW_MAC);
}

#[test]
fn a_new_routes_gateway_is_solicited_before_its_first_packet() {
    // As a copy restarted behind an ECMP pair: its control plane installs
    // a route through a gateway it has not resolved, and the flows come
    // back at once when the route is announced.
    let mut e = engine();
    let gw = Ipv4Addr::new(10, 0, 0, 60);
    let gw_mac = EthernetAddress([0x02, 0xee, 0, 0, 0, 0x60]);
    e.add_route(
        VrId::new(0),
        "198.18.0.0/15".parse::<vrhost_fib::IpPrefix>().unwrap(),
        vrhost_dataplane::RouteTarget::Via(gw.into()),
    )
    .expect("route");
    // The next burst (here, one frame toward a blackhole) picks the route
    // up, and the ARP request for its gateway goes out with it.
    let black = toward(Ipv4Addr::new(203, 0, 113, 5));
    let out = send(&mut e, 1, &black, SEC);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].port, out[0].eth().dst_addr()),
        (0, EthernetAddress::BROADCAST)
    );
    let r = parse_arp(&out[0]);
    assert_eq!(
        (r.operation, r.source_protocol_addr, r.target_protocol_addr),
        (Operation::Request, RED0, gw)
    );
    assert!(send(&mut e, 1, &black, SEC + 1).is_empty(), "asked once");
    // The answer comes; the route's first packet leaves at once.
    let reply = arp(Operation::Reply, gw_mac, gw, RED0, RED0_MAC, None);
    assert!(send(&mut e, 0, &reply, SEC + 2).is_empty());
    let first = toward(Ipv4Addr::new(198, 18, 0, 1));
    let out = send(&mut e, 1, &first, SEC + 3);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].port, out[0].eth().dst_addr()), (0, gw_mac));
    assert_eq!(
        e.vr_counters(VrId::new(0))
            .drop_count(DropReason::NeighborUnresolved),
        0
    );
}
