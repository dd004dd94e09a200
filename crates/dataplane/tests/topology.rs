//! VRs and addresses created and deleted while traffic flows: the other
//! VRs keep forwarding every frame, and a refused change changes nothing.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::*;
use vrhost_dataplane::{
    BuildError, DropReason, InterfaceSpec, Limits, PortId, RouteTarget, RouterSpec, VrId,
};
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::icmpv4::Icmpv4Repr;
use vrhost_wire::ip::IpProtocol;

const RED: VrId = VrId::new(0);
const BLUE: VrId = VrId::new(1);
const GREEN_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x03]);

/// A frame from the host behind port `port`'s untagged interface with MAC `mac`.
fn udp_on(mac: EthernetAddress) -> Vec<u8> {
    eth(
        mac,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(HOST, REMOTE, IpProtocol::Udp, 64, false, &udp(18)),
    )
}

/// Forwards one frame and says on which (port, VLAN) it left, if any.
fn forward(
    e: &mut vrhost_dataplane::Engine,
    port: u16,
    frame: &[u8],
) -> Option<(u16, Option<u16>)> {
    let out = send(e, port, frame, SEC);
    assert!(out.len() <= 1, "{} frames out", out.len());
    out.first().map(|o| (o.port, o.vlan()))
}

fn green() -> RouterSpec {
    RouterSpec {
        name: "green".into(),
        interfaces: vec![
            InterfaceSpec {
                inner_vlan: None,
                tpid: Default::default(),
                urpf: Default::default(),
                name: "green0".into(),
                port: 2,
                vlan: Some(7),
                mac: GREEN_MAC,
                mtu: 1500,
                addrs4: vec![(RED0, 24)],
                addrs6: vec![],
                filters: Default::default(),
            },
            InterfaceSpec {
                inner_vlan: None,
                tpid: Default::default(),
                urpf: Default::default(),
                name: "green1".into(),
                port: 1,
                vlan: Some(300),
                mac: GREEN_MAC,
                mtu: 1500,
                addrs4: vec![(RED1, 24)],
                addrs6: vec![],
                filters: Default::default(),
            },
        ],
        routes4: vec![(
            "192.0.2.0/24".parse().expect("prefix"),
            RouteTarget::Via(IpAddr::V4(GW)),
        )],
        routes6: vec![],
        neighbors: vec![(IpAddr::V4(GW), GW_MAC)],
        limits: Limits::default(),
        filters: Vec::new(),
    }
}

#[test]
fn vrs_come_and_go_while_the_others_forward() {
    let mut e = engine();
    let red_frame = udp_on(RED0_MAC);
    let blue_frame = udp_on(BLUE0_MAC);
    assert_eq!(forward(&mut e, 0, &red_frame), Some((1, Some(100))));
    assert_eq!(forward(&mut e, 2, &blue_frame), Some((1, Some(200))));

    // Create green (VLAN 7 on blue's port): it forwards at once.
    let g = e.add_vr(&green()).expect("green");
    assert_eq!(g, VrId::new(2));
    let mut green_frame = udp_on(GREEN_MAC);
    green_frame = {
        // Tag it for VLAN 7.
        let l3 = green_frame[14..].to_vec();
        eth(GREEN_MAC, HOST_MAC, Some(7), EtherType::Ipv4, &l3)
    };
    assert_eq!(forward(&mut e, 2, &green_frame), Some((1, Some(300))));
    assert_eq!(forward(&mut e, 0, &red_frame), Some((1, Some(100))));
    assert_eq!(forward(&mut e, 2, &blue_frame), Some((1, Some(200))));

    // Delete blue: its frames now belong to no interface; red and green carry on.
    e.remove_vr(BLUE).expect("remove blue");
    assert_eq!(forward(&mut e, 2, &blue_frame), None);
    assert_eq!(
        e.port_counters(PortId::new(2)).drops[DropReason::NoInterface as usize],
        1
    );
    assert_eq!(forward(&mut e, 0, &red_frame), Some((1, Some(100))));
    assert_eq!(forward(&mut e, 2, &green_frame), Some((1, Some(300))));
    assert!(matches!(
        e.remove_vr(BLUE),
        Err(BuildError::NoSuchRouter(1))
    ));

    // Red forwarded every frame it was given, across every change.
    assert_eq!(e.vr_counters(RED).rx_packets, 3);
    assert_eq!(e.vr_counters(RED).tx_packets, 3);
}

#[test]
fn a_refused_vr_changes_nothing() {
    let mut e = engine();
    let count = e.vr_count();
    // Same name as red.
    let mut dup = green();
    dup.name = "red".into();
    assert_eq!(
        e.add_vr(&dup),
        Err(BuildError::DuplicateRouter("red".into()))
    );
    // Claims red's port 1 VLAN 100, after a valid first interface.
    let mut clash = green();
    clash.interfaces[1].vlan = Some(100);
    assert!(matches!(
        e.add_vr(&clash),
        Err(BuildError::DuplicateDemux { .. })
    ));
    // A gateway on no subnet fails after the interfaces were built.
    let mut off = green();
    off.routes4[0].1 = RouteTarget::Via(IpAddr::V4(Ipv4Addr::new(172, 16, 0, 1)));
    assert!(matches!(
        e.add_vr(&off),
        Err(BuildError::GatewayOffLink { .. })
    ));
    assert_eq!(e.vr_count(), count);
    // Green's VLAN 7 was not left claimed: green itself can now be created.
    assert_eq!(e.add_vr(&green()), Ok(VrId::new(count)));
    assert_eq!(forward(&mut e, 0, &udp_on(RED0_MAC)), Some((1, Some(100))));
}

#[test]
fn addresses_come_and_go() {
    let mut e = engine();
    e.set_static_neighbor(RED, IpAddr::V4(HOST), HOST_MAC)
        .expect("neighbor");
    let new = Ipv4Addr::new(10, 9, 0, 1);
    let ping = |dst| {
        eth(
            RED0_MAC,
            HOST_MAC,
            None,
            EtherType::Ipv4,
            &ipv4(
                HOST,
                dst,
                IpProtocol::Icmp,
                64,
                false,
                &echo4(7, 1, b"hello"),
            ),
        )
    };
    let reply = |e: &mut vrhost_dataplane::Engine| {
        let out = send(e, 0, &ping(new), SEC);
        assert_eq!(out.len(), 1);
        out[0].icmpv4().clone_type()
    };
    // Before: 10.9.0.1 is nobody's: no route, so destination unreachable.
    assert_eq!(reply(&mut e), "unreachable");
    assert_eq!(e.add_address(RED, "red0", IpAddr::V4(new), 24), Ok(true));
    assert_eq!(e.add_address(RED, "red0", IpAddr::V4(new), 24), Ok(false));
    assert_eq!(reply(&mut e), "echo-reply");
    assert_eq!(e.remove_address(RED, "red0", IpAddr::V4(new), 24), Ok(true));
    assert_eq!(reply(&mut e), "unreachable");
    assert_eq!(
        e.remove_address(RED, "red0", IpAddr::V4(new), 24),
        Ok(false)
    );
    // Red's original address still answers; blue never noticed.
    assert_eq!(send(&mut e, 0, &ping(RED0), SEC).len(), 1);
    assert!(matches!(
        e.add_address(RED, "nope", IpAddr::V4(new), 24),
        Err(BuildError::NoSuchInterface { .. })
    ));
    assert!(matches!(
        e.add_address(RED, "red0", IpAddr::V4(Ipv4Addr::new(10, 9, 0, 0)), 24),
        Err(BuildError::BadAddress { .. })
    ));
    assert_eq!(e.vr_counters(BLUE).rx_packets, 0);
}

trait Kind {
    fn clone_type(&self) -> &'static str;
}

impl Kind for Icmpv4Repr<'_> {
    fn clone_type(&self) -> &'static str {
        match self {
            Icmpv4Repr::EchoReply { .. } => "echo-reply",
            Icmpv4Repr::DstUnreachable { .. } => "unreachable",
            _ => "other",
        }
    }
}

#[test]
fn link_local_control_groups_reach_only_vrs_with_a_control_plane() {
    // Red has a control plane, blue has none; both get an OSPF hello.
    let mut e = vrhost_dataplane::Engine::new(&spec2(
        Limits {
            control_plane: true,
            ..Limits::default()
        },
        Limits::default(),
    ))
    .expect("engine");
    let ospf_mac = EthernetAddress([0x01, 0x00, 0x5e, 0x00, 0x00, 0x05]);
    let hello = || {
        eth(
            ospf_mac,
            HOST_MAC,
            None,
            EtherType::Ipv4,
            &ipv4(
                HOST,
                Ipv4Addr::new(224, 0, 0, 5),
                IpProtocol::Unknown(89),
                1,
                false,
                &[0u8; 44],
            ),
        )
    };
    assert!(send(&mut e, 0, &hello(), SEC).is_empty());
    assert!(send(&mut e, 2, &hello(), SEC).is_empty());
    let mut punted = Vec::new();
    e.drain_all_punted(|vr, m| punted.push((vr, m.data().to_vec())));
    assert_eq!(punted.len(), 1, "only red's hello is punted");
    assert_eq!(punted[0].0, RED.index());
    assert_eq!(punted[0].1, hello());
    assert_eq!(
        e.vr_counters(BLUE).drops[DropReason::NotForUs as usize],
        1,
        "a VR without a control plane does not join the groups"
    );
}

#[test]
fn interfaces_come_and_go_while_the_vr_forwards() {
    let mut e = engine();
    let red_frame = udp_on(RED0_MAC);
    let extra = InterfaceSpec {
        inner_vlan: None,
        tpid: Default::default(),
        urpf: Default::default(),
        name: "red9".into(),
        port: 2,
        vlan: Some(9),
        mac: RED0_MAC,
        mtu: 1500,
        addrs4: vec![(Ipv4Addr::new(10, 9, 0, 1), 24)],
        addrs6: vec![],
        filters: Default::default(),
    };
    assert_eq!(e.add_interface(RED, &extra), Ok(true));
    assert_eq!(e.add_interface(RED, &extra), Ok(false), "idempotent");
    // Blue's port 2 untagged stays blue's; VLAN 9 of it is red's now.
    let mut clash = extra.clone();
    clash.name = "red10".into();
    assert!(matches!(
        e.add_interface(RED, &clash),
        Err(BuildError::DuplicateDemux { .. })
    ));
    // A route through the new interface, with its gateway's MAC.
    let gw9 = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2));
    e.set_static_neighbor(RED, gw9, GW_MAC).expect("neighbor");
    e.add_route(
        RED,
        "198.18.0.0/15"
            .parse::<vrhost_fib::IpPrefix>()
            .expect("prefix"),
        RouteTarget::Via(gw9),
    )
    .expect("route");
    let to_new = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(
            HOST,
            Ipv4Addr::new(198, 18, 0, 1),
            IpProtocol::Udp,
            64,
            false,
            &udp(18),
        ),
    );
    assert_eq!(forward(&mut e, 0, &to_new), Some((2, Some(9))));
    assert!(matches!(
        e.remove_interface(RED, "red9"),
        Err(BuildError::InterfaceInUse { routes: 1, .. })
    ));
    assert!(e.remove_route(
        RED,
        "198.18.0.0/15"
            .parse::<vrhost_fib::IpPrefix>()
            .expect("prefix")
    ));
    assert_eq!(e.remove_interface(RED, "red9"), Ok(true));
    assert_eq!(e.remove_interface(RED, "red9"), Ok(false));
    // Frames on VLAN 9 of port 2 now belong to nobody; red forwards on.
    let tagged = eth(
        RED0_MAC,
        HOST_MAC,
        Some(9),
        EtherType::Ipv4,
        &red_frame[14..],
    );
    assert_eq!(forward(&mut e, 2, &tagged), None);
    assert_eq!(forward(&mut e, 0, &red_frame), Some((1, Some(100))));
    // The name is free again.
    assert_eq!(e.add_interface(RED, &extra), Ok(true));
}
