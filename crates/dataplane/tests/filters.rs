//! Per-interface rule lists, golden frames on the two-tenant topology of
//! `common` (red0: host side, port 0; red1: gateway side, port 1 VLAN 100):
//!
//! - `filter_in` on red0 drops what it denies, as `filtered`, without an
//!   answer, whether the packet would be forwarded or is for the router,
//!   and counts each rule's matches;
//! - `filter_out` on red1 drops what would leave there, after the TTL
//!   check and before fragmenting;
//! - neighbor discovery passes a list that denies everything;
//! - lists change as a whole: a bad list, or one an interface still names,
//!   is refused and nothing changes; an unchanged list keeps its counters.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::{
    echo4, eth, icmpv6, ipv4, send, spec, udp, udp4_frame, udp6_frame, Out, GW_MAC, HOST, HOST6,
    HOST_MAC, RED0, RED0_6, RED0_MAC, REMOTE, REMOTE6, SEC,
};
use vrhost_dataplane::drop_reason::DropReason;
use vrhost_dataplane::{
    Action, BuildError, Engine, FilterSpec, IfaceFilters, IfaceId, Limits, PortRange, Rule, VrId,
};
use vrhost_fib::IpPrefix;
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::icmpv6::{Icmpv6Repr, NdiscRepr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv6 as wire6;

const RED: VrId = VrId::new(0);
const RED0_IF: IfaceId = IfaceId::new(0);
const RED1_IF: IfaceId = IfaceId::new(1);

fn p(s: &str) -> Option<IpPrefix> {
    let (a, l) = s.split_once('/').expect("prefix");
    Some(IpPrefix::new(a.parse().expect("addr"), l.parse().expect("len")).expect("prefix"))
}

/// `edge`, on what enters red0: deny UDP to port 9 (the test UDP's
/// destination) toward 192.0.2.128/25, deny pings to the router, deny
/// anything with VLAN priority 5; permit the rest.
/// `up`, on what leaves red1: permit 192.0.2.0/24 and 2001:db8:ff::/48
/// except UDP toward 192.0.2.100; deny the rest.
fn lists() -> Vec<FilterSpec> {
    vec![
        FilterSpec {
            name: "edge".into(),
            default: Action::Permit,
            rules: vec![
                Rule {
                    action: Action::Deny,
                    dst: p("192.0.2.128/25"),
                    protocol: Some(17),
                    dst_port: Some(PortRange::one(9)),
                    ..Rule::default()
                },
                Rule {
                    action: Action::Deny,
                    dst: p("10.0.0.1/32"),
                    protocol: Some(1),
                    icmp_type: Some(8),
                    ..Rule::default()
                },
                Rule {
                    action: Action::Deny,
                    pcp: Some(5),
                    ..Rule::default()
                },
            ],
        },
        FilterSpec {
            name: "up".into(),
            default: Action::Deny,
            rules: vec![
                Rule {
                    action: Action::Deny,
                    dst: p("192.0.2.100/32"),
                    protocol: Some(17),
                    ..Rule::default()
                },
                Rule {
                    action: Action::Permit,
                    dst: p("192.0.2.0/24"),
                    ..Rule::default()
                },
                Rule {
                    action: Action::Permit,
                    dst: p("2001:db8:ff::/48"),
                    ..Rule::default()
                },
            ],
        },
    ]
}

fn engine() -> Engine {
    let mut s = spec(Limits {
        icmp_rate: 1000,
        ..Limits::default()
    });
    let red = &mut s.routers[0];
    red.filters = lists();
    red.interfaces[0].filters.input = Some("edge".into());
    red.interfaces[1].filters.output = Some("up".into());
    Engine::new(&s).expect("spec builds")
}

fn filtered(e: &Engine, iface: IfaceId) -> u64 {
    e.iface_counters(iface).drops[DropReason::Filtered as usize]
}

fn hits(e: &Engine, iface: IfaceId, input: bool) -> Vec<u64> {
    let i = &e.ifaces()[iface.index()];
    let f = if input { &i.filter_in } else { &i.filter_out };
    f.as_ref().expect("a list").hits()
}

fn udp_to(dst: Ipv4Addr) -> Vec<u8> {
    udp4_frame(dst, 64, false, 18)
}

fn forwarded(out: &[Out], dst: Ipv4Addr) -> bool {
    out.iter()
        .any(|o| o.port == 1 && o.ethertype() == EtherType::Ipv4 && o.ipv4().dst_addr() == dst)
}

#[test]
fn ingress_denies_are_dropped_as_filtered_and_counted_per_rule() {
    let mut e = engine();
    let pass = Ipv4Addr::new(192, 0, 2, 9);
    let denied = Ipv4Addr::new(192, 0, 2, 130);
    let out = send(&mut e, 0, &udp_to(pass), SEC);
    assert!(forwarded(&out, pass), "{out:?}");
    let out = send(&mut e, 0, &udp_to(denied), SEC);
    assert!(out.is_empty(), "denied silently: {out:?}");
    assert_eq!(filtered(&e, RED0_IF), 1);
    // TTL 1 toward a denied destination: the list decides before the hop
    // does, so no Time Exceeded either.
    let out = send(&mut e, 0, &udp4_frame(denied, 1, false, 18), SEC);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(filtered(&e, RED0_IF), 2);
    // Rules 1..3, then the default: two denied, one permitted by default.
    assert_eq!(hits(&e, RED0_IF, true), vec![2, 0, 0, 1]);
    // The permitted frame took the fast path, and counted there.
    assert_eq!(e.iface_counters(RED0_IF).fast_path, 1);
}

#[test]
fn ingress_applies_to_packets_for_the_router() {
    let mut e = engine();
    let ping = |id| {
        let l3 = ipv4(
            HOST,
            RED0,
            IpProtocol::Icmp,
            64,
            false,
            &echo4(id, 1, b"hi"),
        );
        eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &l3)
    };
    let out = send(&mut e, 0, &ping(1), SEC);
    assert!(out.is_empty(), "the router does not answer: {out:?}");
    assert_eq!(filtered(&e, RED0_IF), 1);
    assert_eq!(hits(&e, RED0_IF, true)[1], 1);
    // With the list off the interface, it answers.
    e.set_interface_filters(RED, "red0", &IfaceFilters::default())
        .expect("set");
    let out = send(&mut e, 0, &ping(2), SEC);
    assert_eq!(out.len(), 1, "echo reply: {out:?}");
}

#[test]
fn vlan_priority_is_that_of_the_frame_as_received() {
    let mut e = engine();
    // red1 is on VLAN 100: give it `edge` too, and send from the gateway
    // with PCP 5 and then PCP 0.
    e.set_interface_filters(
        RED,
        "red1",
        &IfaceFilters {
            input: Some("edge".into()),
            output: Some("up".into()),
        },
    )
    .expect("set");
    let frame = |pcp: u8| {
        let l3 = ipv4(REMOTE, HOST, IpProtocol::Udp, 64, false, &udp(18));
        let mut f = eth(common::RED1_MAC, GW_MAC, Some(100), EtherType::Ipv4, &l3);
        f[14] |= pcp << 5;
        f
    };
    send(&mut e, 1, &frame(5), SEC);
    assert_eq!(filtered(&e, RED1_IF), 1);
    send(&mut e, 1, &frame(0), SEC);
    assert_eq!(filtered(&e, RED1_IF), 1, "PCP 0 passes");
    assert_eq!(hits(&e, RED1_IF, true), vec![0, 0, 1, 1]);
}

#[test]
fn egress_denies_what_would_leave_and_lets_the_rest_through() {
    let mut e = engine();
    let to = |a: [u8; 4]| Ipv4Addr::from(a);
    // Permitted by `up` rule 2; denied by rule 1 (UDP to .100); denied by
    // the default (the gateway itself, on red1's subnet, which `up` does
    // not name).
    assert!(forwarded(
        &send(&mut e, 0, &udp_to(to([192, 0, 2, 7])), SEC),
        to([192, 0, 2, 7])
    ));
    assert!(send(&mut e, 0, &udp_to(to([192, 0, 2, 100])), SEC).is_empty());
    assert!(send(&mut e, 0, &udp_to(common::GW), SEC).is_empty());
    assert_eq!(filtered(&e, RED0_IF), 2, "counted on the ingress interface");
    assert_eq!(hits(&e, RED1_IF, false), vec![1, 1, 0, 1]);
    // An IPv6 packet toward 2001:db8:ff::/48 passes rule 3.
    let out = send(&mut e, 0, &udp6_frame(REMOTE6, 64, 18), SEC);
    assert!(out.iter().any(|o| o.port == 1), "{out:?}");
    assert_eq!(hits(&e, RED1_IF, false), vec![1, 1, 1, 1]);
}

#[test]
fn egress_decides_before_fragmenting_and_after_the_hop() {
    let mut e = engine();
    // 1400-byte MTU on red1: a 1450-byte UDP packet without DF to a denied
    // destination is dropped whole, not fragmented.
    let big = udp4_frame(Ipv4Addr::new(192, 0, 2, 100), 64, false, 1422);
    assert!(send(&mut e, 0, &big, SEC).is_empty());
    assert_eq!(hits(&e, RED1_IF, false)[0], 1);
    // A permitted one is fragmented.
    let big = udp4_frame(Ipv4Addr::new(192, 0, 2, 7), 64, false, 1422);
    assert_eq!(send(&mut e, 0, &big, SEC).len(), 2);
    // TTL 1 toward a denied destination: Time Exceeded, as for any packet
    // that dies here; the list never saw it.
    let out = send(
        &mut e,
        0,
        &udp4_frame(Ipv4Addr::new(192, 0, 2, 100), 1, false, 18),
        SEC,
    );
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(hits(&e, RED1_IF, false)[0], 1);
}

fn ns(src: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let dst = wire6::solicited_node(&target);
    let repr = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: target,
        lladdr: Some(HOST_MAC),
    });
    let mac = EthernetAddress([0x33, 0x33, 0xff, 0, 0, 1]);
    eth(
        mac,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &icmpv6(src, dst, 255, &repr),
    )
}

#[test]
fn neighbor_discovery_passes_a_list_that_denies_everything() {
    let mut e = engine();
    let mut l = lists();
    l.push(FilterSpec {
        name: "shut".into(),
        default: Action::Deny,
        rules: vec![],
    });
    e.set_filters(RED, &l).expect("set");
    let shut = IfaceFilters {
        input: Some("shut".into()),
        output: None,
    };
    e.set_interface_filters(RED, "red0", &shut).expect("set");
    let out = send(&mut e, 0, &ns(HOST6, RED0_6), SEC);
    assert_eq!(out.len(), 1, "neighbor advertisement: {out:?}");
    // Anything else is denied, neighbor discovery messages that would be
    // forwarded included.
    assert!(send(&mut e, 0, &udp6_frame(REMOTE6, 64, 18), SEC).is_empty());
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: REMOTE6,
        lladdr: Some(HOST_MAC),
    });
    let through = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &icmpv6(HOST6, REMOTE6, 255, &na),
    );
    assert!(send(&mut e, 0, &through, SEC).is_empty());
    assert_eq!(filtered(&e, RED0_IF), 2);
    assert_eq!(hits(&e, RED0_IF, true), vec![2]);
}

#[test]
fn lists_change_as_a_whole_or_not_at_all() {
    let mut e = engine();
    send(&mut e, 0, &udp_to(Ipv4Addr::new(192, 0, 2, 130)), SEC);
    assert_eq!(hits(&e, RED0_IF, true)[0], 1);
    // A bad rule in the second list: refused, with its list and rule.
    let mut bad = lists();
    bad[1].rules[2].dst_port = Some(PortRange::one(80));
    let err = e.set_filters(RED, &bad).expect_err("refused");
    assert!(
        err.to_string().contains("\"up\" rule 3") && err.to_string().contains("ports"),
        "{err}"
    );
    // Dropping a list red0 still names: refused.
    let err = e.set_filters(RED, &lists()[1..]).expect_err("refused");
    assert!(
        matches!(err, BuildError::NoSuchFilter { ref filter, .. } if filter == "edge"),
        "{err}"
    );
    // More rules in all than a router may hold: refused.
    let mut big = lists();
    big.push(FilterSpec {
        name: "big".into(),
        default: Action::Permit,
        rules: vec![Rule::default(); vrhost_dataplane::filter::MAX_VR_RULES],
    });
    assert!(matches!(
        e.set_filters(RED, &big),
        Err(BuildError::FilterLimit { .. })
    ));
    // Two lists of one name: refused.
    let mut twice = lists();
    twice.push(twice[0].clone());
    assert!(matches!(
        e.set_filters(RED, &twice),
        Err(BuildError::DuplicateFilter { .. })
    ));
    // Nothing changed: the same lists, still counting.
    assert_eq!(hits(&e, RED0_IF, true)[0], 1);
    assert_eq!(e.set_filters(RED, &lists()), Ok(false));
    // `up` changed, `edge` did not: edge keeps its counters, red0 and red1
    // point at the new lists in the same publication.
    let mut next = lists();
    next[1].default = Action::Permit;
    assert_eq!(e.set_filters(RED, &next), Ok(true));
    assert_eq!(hits(&e, RED0_IF, true)[0], 1);
    assert!(forwarded(
        &send(&mut e, 0, &udp_to(common::GW), SEC),
        common::GW
    ));
    // An interface may name only a list its VR has.
    let unknown = IfaceFilters {
        input: Some("nope".into()),
        output: None,
    };
    assert!(matches!(
        e.set_interface_filters(RED, "red0", &unknown),
        Err(BuildError::NoSuchFilter { .. })
    ));
    // Blue has no lists: red's are its own.
    assert!(matches!(
        e.set_interface_filters(
            VrId::new(1),
            "blue0",
            &IfaceFilters {
                input: Some("edge".into()),
                output: None
            }
        ),
        Err(BuildError::NoSuchFilter { .. })
    ));
    let _ = IpAddr::V4(HOST);
}
