//! Multipath routes on the two-tenant topology of `common`: red's
//! 100.64.0.0/24 and 2001:db8:64::/48 go through several gateways on red1
//! (10.1.0.2-5, 2001:db8:1::2-5), each with its own static MAC, so the
//! destination MAC of a forwarded frame names the gateway a flow took.
//!
//! - every flow sticks to one gateway, in the fast path and the full
//!   stages alike (a packet with IP options takes the full stages);
//! - all gateways are used, in shares that follow the weights;
//! - removing a gateway moves only the flows that used it;
//! - uRPF strict passes a source whose multipath route has any gateway on
//!   the ingress interface.

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::{eth, ipv4, ipv6, send, spec, Out, HOST, HOST6, HOST_MAC, RED0_MAC, SEC};
use proptest::prelude::*;
use vrhost_dataplane::{Engine, Limits, Path, Paths, RouteTarget, Urpf, VrId};
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::ip::IpProtocol;

const RED: VrId = VrId::new(0);
const NET4: &str = "100.64.0.0/24";
const NET6: &str = "2001:db8:64::/48";

fn gw4(k: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2 + k))
}

fn gw6(k: u8) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(
        0x2001,
        0xdb8,
        1,
        0,
        0,
        0,
        0,
        2 + u16::from(k),
    ))
}

fn gw_mac(k: u8) -> EthernetAddress {
    EthernetAddress([0x02, 0xbb, 0, 0, 1, k])
}

/// Red with static neighbours for four gateways of each family.
fn engine() -> Engine {
    let mut e = Engine::new(&spec(Limits::default())).expect("spec builds");
    for k in 0..4 {
        e.set_static_neighbor(RED, gw4(k), gw_mac(k)).unwrap();
        e.set_static_neighbor(RED, gw6(k), gw_mac(k)).unwrap();
    }
    e
}

fn multipath(gws: impl IntoIterator<Item = (IpAddr, u16)>) -> RouteTarget {
    Paths::target(gws.into_iter().map(|(via, weight)| Path { via, weight })).unwrap()
}

/// TCP-ish payload: ports `sport` → 443.
fn l4(sport: u16) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&443u16.to_be_bytes());
    t
}

/// A TCP packet of flow `sport` from the host to 100.64.0.7, into red0.
fn flow4(sport: u16) -> Vec<u8> {
    let l3 = ipv4(
        HOST,
        Ipv4Addr::new(100, 64, 0, 7),
        IpProtocol::Tcp,
        64,
        false,
        &l4(sport),
    );
    eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &l3)
}

/// The same flow with a 4-byte IP option (NOP × 4): the full stages.
fn flow4_with_options(sport: u16) -> Vec<u8> {
    let mut l3 = ipv4(
        HOST,
        Ipv4Addr::new(100, 64, 0, 7),
        IpProtocol::Tcp,
        64,
        false,
        &[],
    );
    l3[0] = 0x46;
    l3.extend([1, 1, 1, 1]);
    l3.extend(l4(sport));
    let len = l3.len() as u16;
    l3[2..4].copy_from_slice(&len.to_be_bytes());
    l3[10..12].copy_from_slice(&[0, 0]);
    let sum = vrhost_wire::checksum::checksum(&l3[..24]);
    l3[10..12].copy_from_slice(&sum.to_be_bytes());
    eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &l3)
}

fn flow6(sport: u16, label: u32) -> Vec<u8> {
    let mut l3 = ipv6(
        HOST6,
        Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0, 7),
        IpProtocol::Tcp,
        64,
        &l4(sport),
    );
    l3[1] |= ((label >> 16) & 0x0f) as u8;
    l3[2] = (label >> 8) as u8;
    l3[3] = label as u8;
    eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv6, &l3)
}

/// The gateway (by its MAC's last byte) a frame left red1 for.
fn gateway_of(out: &[Out]) -> u8 {
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].port, 1);
    let dst = out[0].eth().dst_addr();
    assert_eq!(&dst.0[..5], &gw_mac(0).0[..5], "to a gateway: {out:?}");
    dst.0[5]
}

fn spread(
    e: &mut Engine,
    flows: impl Iterator<Item = u16>,
    frame: impl Fn(u16) -> Vec<u8>,
) -> HashMap<u16, u8> {
    flows
        .map(|f| (f, gateway_of(&send(e, 0, &frame(f), SEC))))
        .collect()
}

#[test]
fn every_flow_sticks_to_one_gateway_and_all_are_used() {
    let mut e = engine();
    let route = multipath((0..4).map(|k| (gw4(k), 1)));
    e.add_route(RED, NET4.parse::<vrhost_fib::Prefix4>().unwrap(), route)
        .unwrap();
    let first = spread(&mut e, 1000..1400, flow4);
    let mut count = [0usize; 4];
    for &g in first.values() {
        count[usize::from(g)] += 1;
    }
    // 400 flows over 4: each well within ±40% of 100.
    for (k, &n) in count.iter().enumerate() {
        assert!(
            (60..=140).contains(&n),
            "gateway {k}: {n} of 400 flows ({count:?})"
        );
    }
    // Again, and through the full stages: the same gateway per flow.
    assert_eq!(spread(&mut e, 1000..1400, flow4), first);
    assert_eq!(spread(&mut e, 1000..1400, flow4_with_options), first);
    let c = e.iface_counters(vrhost_dataplane::IfaceId::new(0));
    assert_eq!(c.fast_path, 800, "options took the full stages");
    assert_eq!(c.forwarded, 1200);
}

#[test]
fn weights_set_the_shares() {
    let mut e = engine();
    let route = multipath([(gw4(0), 1), (gw4(1), 3)]);
    e.add_route(RED, NET4.parse::<vrhost_fib::Prefix4>().unwrap(), route)
        .unwrap();
    let heavy = spread(&mut e, 0..1000, flow4)
        .values()
        .filter(|&&g| g == 1)
        .count();
    assert!(
        (650..=850).contains(&heavy),
        "weight 3 of 4 got {heavy} of 1000 flows"
    );
}

#[test]
fn removing_a_gateway_moves_only_its_flows() {
    let mut e = engine();
    let p4 = NET4.parse::<vrhost_fib::Prefix4>().unwrap();
    e.add_route(RED, p4, multipath((0..4).map(|k| (gw4(k), 1))))
        .unwrap();
    let before = spread(&mut e, 0..600, flow4);
    // Gateway 2 goes away (as a routing protocol would withdraw it).
    e.add_route(RED, p4, multipath([0, 1, 3].map(|k| (gw4(k), 1))))
        .unwrap();
    let after = spread(&mut e, 0..600, flow4);
    let mut moved = 0;
    for (f, g) in &before {
        if *g == 2 {
            assert_ne!(after[f], 2);
            moved += 1;
        } else {
            assert_eq!(after[f], *g, "flow {f} moved off a surviving gateway");
        }
    }
    assert!(moved > 0);
    // And back: the flows return where they were.
    e.add_route(RED, p4, multipath((0..4).map(|k| (gw4(k), 1))))
        .unwrap();
    assert_eq!(spread(&mut e, 0..600, flow4), before);
}

#[test]
fn ipv6_hashes_ports_and_the_flow_label() {
    let mut e = engine();
    let p6 = NET6.parse::<vrhost_fib::Prefix6>().unwrap();
    e.add_route(RED, p6, multipath((0..4).map(|k| (gw6(k), 1))))
        .unwrap();
    let by_port = spread(&mut e, 0..200, |f| flow6(f, 0));
    let used: std::collections::HashSet<u8> = by_port.values().copied().collect();
    assert_eq!(used.len(), 4, "{by_port:?}");
    assert_eq!(spread(&mut e, 0..200, |f| flow6(f, 0)), by_port);
    // One port, the label varies: still spread.
    let by_label = spread(&mut e, 0..200, |f| flow6(7, u32::from(f) + 1));
    let used: std::collections::HashSet<u8> = by_label.values().copied().collect();
    assert!(used.len() >= 3, "{by_label:?}");
}

#[test]
fn strict_urpf_passes_a_source_with_any_gateway_on_the_ingress() {
    let mut s = spec(Limits::default());
    s.routers[0].interfaces[1].urpf = Urpf::Strict;
    let mut e = Engine::new(&s).unwrap();
    // 198.18.0.0/24 through a gateway on red0 and one on red1.
    let both = multipath([(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 1), (gw4(0), 1)]);
    e.add_route(
        RED,
        "198.18.0.0/24".parse::<vrhost_fib::Prefix4>().unwrap(),
        both,
    )
    .unwrap();
    // 198.18.1.0/24 only through red0.
    e.add_route(
        RED,
        "198.18.1.0/24".parse::<vrhost_fib::Prefix4>().unwrap(),
        RouteTarget::Via(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9))),
    )
    .unwrap();
    let into_red1 = |src: Ipv4Addr| {
        let l3 = ipv4(src, HOST, IpProtocol::Udp, 64, false, &common::udp(18));
        eth(
            common::RED1_MAC,
            common::GW_MAC,
            Some(100),
            EtherType::Ipv4,
            &l3,
        )
    };
    let urpf = |e: &Engine| {
        e.iface_counters(vrhost_dataplane::IfaceId::new(1)).drops
            [vrhost_dataplane::drop_reason::DropReason::Urpf as usize]
    };
    send(&mut e, 1, &into_red1(Ipv4Addr::new(198, 18, 0, 5)), SEC);
    assert_eq!(urpf(&e), 0, "one of the gateways is on red1");
    send(&mut e, 1, &into_red1(Ipv4Addr::new(198, 18, 1, 5)), SEC);
    assert_eq!(urpf(&e), 1, "no gateway on red1");
}

#[test]
fn a_gateway_off_every_subnet_refuses_the_whole_route() {
    let mut e = engine();
    let p4 = NET4.parse::<vrhost_fib::Prefix4>().unwrap();
    let bad = multipath([(gw4(0), 1), (IpAddr::V4(Ipv4Addr::new(172, 16, 0, 1)), 1)]);
    assert!(e.add_route(RED, p4, bad).is_err());
    // Nothing was installed.
    let out = send(&mut e, 0, &flow4(1), SEC);
    assert!(out.iter().all(|o| o.port != 1), "{out:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any set of 2-4 gateways with any weights: the same flow always gets
    /// the same gateway, one of the route's, and with equal weights every
    /// gateway gets some of 256 flows.
    #[test]
    fn the_same_flow_always_gets_the_same_gateway(
        members in proptest::sample::subsequence(vec![0u8, 1, 2, 3], 2..=4),
        weights in proptest::collection::vec(1u16..=4, 4),
        equal in any::<bool>(),
        flows in proptest::collection::vec(any::<u16>(), 1..40),
    ) {
        let mut e = engine();
        let p4 = NET4.parse::<vrhost_fib::Prefix4>().unwrap();
        let route = multipath(members.iter().map(|&k| (gw4(k), if equal { 1 } else { weights[usize::from(k)] })));
        e.add_route(RED, p4, route).unwrap();
        for &f in &flows {
            let a = gateway_of(&send(&mut e, 0, &flow4(f), SEC));
            prop_assert!(members.contains(&a));
            prop_assert_eq!(gateway_of(&send(&mut e, 0, &flow4_with_options(f), SEC)), a);
            prop_assert_eq!(gateway_of(&send(&mut e, 0, &flow4(f), SEC)), a);
        }
        if equal {
            let used: std::collections::HashSet<u8> =
                spread(&mut e, 0..256, flow4).into_values().collect();
            prop_assert_eq!(used.len(), members.len());
        }
    }
}
