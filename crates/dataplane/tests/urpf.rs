//! Unicast reverse-path forwarding (RFC 3704), golden frames on the
//! two-tenant topology of `common`: red0 (the host side, port 0) checks
//! strictly, red1 (the gateway side, port 1 VLAN 100) loosely, blue none.
//!
//! - strict: a source whose route leaves by red0 passes; one routed out of
//!   red1, or with no route, is dropped as `urpf`;
//! - loose: any source with a real route passes, from either side; no
//!   route, a blackhole, an unreachable route or the VR's own address is
//!   dropped;
//! - IPv6 alike, except link-local and unspecified sources (neighbor
//!   discovery), which are not checked;
//! - blue, with the same addresses and no check, forwards what red drops.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::{eth, ipv4, ipv6, send, spec, udp, Out, BLUE0_MAC, GW_MAC, HOST, HOST6, HOST_MAC};
use common::{RED0_MAC, RED1, RED1_MAC, REMOTE, REMOTE6, SEC};
use vrhost_dataplane::drop_reason::DropReason;
use vrhost_dataplane::{Engine, IfaceId, Limits, Urpf, VrId};
use vrhost_wire::ethernet::EtherType;
use vrhost_wire::ip::IpProtocol;

const RED0: IfaceId = IfaceId::new(0);
const RED1_IF: IfaceId = IfaceId::new(1);

fn engine() -> Engine {
    let mut s = spec(Limits {
        icmp_rate: 1000,
        ..Limits::default()
    });
    s.routers[0].interfaces[0].urpf = Urpf::Strict;
    s.routers[0].interfaces[1].urpf = Urpf::Loose;
    Engine::new(&s).expect("spec builds")
}

fn urpf_drops(e: &Engine, iface: IfaceId) -> u64 {
    e.iface_counters(iface).drops[DropReason::Urpf as usize]
}

/// UDP from `src` to `dst`, into red0 (port 0, untagged) from the host.
fn into_red0(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let l3 = ipv4(src, dst, IpProtocol::Udp, 64, false, &udp(18));
    eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &l3)
}

/// UDP from `src` to the host, into red1 (port 1, VLAN 100) from the gateway.
fn into_red1(src: Ipv4Addr) -> Vec<u8> {
    let l3 = ipv4(src, HOST, IpProtocol::Udp, 64, false, &udp(18));
    eth(RED1_MAC, GW_MAC, Some(100), EtherType::Ipv4, &l3)
}

fn into_red0_v6(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let l3 = ipv6(src, dst, IpProtocol::Udp, 64, &udp(18));
    eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv6, &l3)
}

/// Whether a UDP packet from `src` left on port 1 (toward the gateway).
fn forwarded_from(out: &[Out], src: Ipv4Addr) -> bool {
    out.iter()
        .any(|o| o.port == 1 && o.ethertype() == EtherType::Ipv4 && o.ipv4().src_addr() == src)
}

#[test]
fn strict_passes_only_sources_routed_back_out_of_the_ingress_interface() {
    let mut e = engine();
    // The host's own subnet: routed back out of red0.
    let out = send(&mut e, 0, &into_red0(HOST, REMOTE), SEC);
    assert!(forwarded_from(&out, HOST), "{out:?}");
    assert_eq!(urpf_drops(&e, RED0), 0);
    // A source routed out of red1 (192.0.2.0/24 via the gateway), and one
    // with no route at all: spoofed, dropped without an answer.
    for (k, src) in [Ipv4Addr::new(192, 0, 2, 50), Ipv4Addr::new(8, 8, 8, 8)]
        .into_iter()
        .enumerate()
    {
        let out = send(&mut e, 0, &into_red0(src, REMOTE), SEC);
        assert!(out.is_empty(), "{src}: {out:?}");
        assert_eq!(urpf_drops(&e, RED0), k as u64 + 1);
    }
    // The legitimate frame took the fast path, which checks the source too;
    // the spoofed ones fell to the full stages, which dropped them.
    assert_eq!(e.iface_counters(RED0).fast_path, 1);
    assert_eq!(e.iface_counters(RED0).forwarded, 1);
}

#[test]
fn loose_passes_any_real_route_and_drops_the_rest() {
    let mut e = engine();
    // Routed out of red1 itself, and out of red0: both pass loose. The host
    // is not resolved yet, so each is held behind an ARP request.
    for src in [REMOTE, Ipv4Addr::new(10, 0, 0, 77)] {
        let before = e.iface_counters(RED1_IF).drops;
        send(&mut e, 1, &into_red1(src), SEC);
        assert_eq!(e.iface_counters(RED1_IF).drops, before, "{src} passes");
    }
    // No route, a blackhole, an unreachable route, the VR's own address.
    let fails = [
        Ipv4Addr::new(8, 8, 8, 8),
        Ipv4Addr::new(203, 0, 113, 5),
        Ipv4Addr::new(198, 51, 100, 5),
        RED1,
    ];
    for (k, src) in fails.into_iter().enumerate() {
        let out = send(&mut e, 1, &into_red1(src), SEC);
        assert!(out.is_empty(), "{src}: {out:?}");
        assert_eq!(urpf_drops(&e, RED1_IF), k as u64 + 1, "{src}");
    }
}

#[test]
fn ipv6_is_checked_alike_except_link_local_sources() {
    let mut e = engine();
    let out = send(&mut e, 0, &into_red0_v6(HOST6, REMOTE6), SEC);
    assert!(out.iter().any(|o| o.port == 1), "{out:?}");
    let spoofed = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 7);
    assert!(send(&mut e, 0, &into_red0_v6(spoofed, REMOTE6), SEC).is_empty());
    assert_eq!(urpf_drops(&e, RED0), 1);
    // A link-local source has no route anywhere but its link: not checked
    // (this one is then not forwarded, as RFC 4291 says, for its own reason).
    let ll = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);
    send(&mut e, 0, &into_red0_v6(ll, REMOTE6), SEC);
    assert_eq!(urpf_drops(&e, RED0), 1);
    assert_eq!(
        e.iface_counters(RED0).drops[DropReason::Ipv6LinkLocalNotForwarded as usize],
        1
    );
}

#[test]
fn a_vr_without_the_check_forwards_what_red_drops() {
    let mut e = engine();
    let spoofed = Ipv4Addr::new(192, 0, 2, 50);
    let l3 = ipv4(spoofed, REMOTE, IpProtocol::Udp, 64, false, &udp(18));
    let out = send(
        &mut e,
        2,
        &eth(BLUE0_MAC, HOST_MAC, None, EtherType::Ipv4, &l3),
        SEC,
    );
    assert!(forwarded_from(&out, spoofed), "{out:?}");
    assert_eq!(
        e.vr_counters(VrId::new(1)).drops[DropReason::Urpf as usize],
        0
    );
    assert_eq!(e.vr_counters(VrId::new(1)).fast_path, 1);
}
