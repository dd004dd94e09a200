//! No packet that enters one VR ever leaves on another VR's interface:
//! forwarded traffic, ICMP errors, echo replies, ARP and NDP answers and
//! probes, broadcasts, punts. Red and blue use identical addresses and share
//! port p1 (VLAN 100 vs 200), so any leak would be easy to make.

mod common;

use common::*;
use proptest::prelude::*;
use vrhost_dataplane::PortId;
use vrhost_wire::arp::Operation;
use vrhost_wire::ethernet::{ipv6_multicast_mac, EtherType, EthernetAddress};
use vrhost_wire::icmpv6::{Icmpv6Repr, NdiscNeighborFlags, NdiscRepr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv6::solicited_node;

/// (port, VLAN) pairs of each VR: red = p0 untagged + p1/100, blue = p2 untagged + p1/200.
fn owner(port: u16, vlan: Option<u16>) -> Option<usize> {
    match (port, vlan) {
        (0, None) | (1, Some(100)) => Some(0),
        (2, None) | (1, Some(200)) => Some(1),
        _ => None,
    }
}

/// A frame for VR `vr`'s host side or uplink side, of one of several kinds.
fn frame(vr: usize, uplink: bool, kind: u8, dst_last: u8, ttl: u8) -> (u16, Vec<u8>) {
    let (port, vlan, mac) = match (vr, uplink) {
        (0, false) => (0, None, RED0_MAC),
        (0, true) => (1, Some(100), RED1_MAC),
        (_, false) => (2, None, BLUE0_MAC),
        (_, true) => (1, Some(200), BLUE1_MAC),
    };
    let src = if uplink { REMOTE } else { HOST };
    let dst = match kind % 4 {
        0 => std::net::Ipv4Addr::new(10, 0, 0, dst_last), // host side subnet (maybe unresolved)
        1 => std::net::Ipv4Addr::new(10, 1, 0, dst_last), // uplink subnet
        2 => std::net::Ipv4Addr::new(192, 0, 2, dst_last), // via the gateway
        _ => std::net::Ipv4Addr::new(8, 8, 8, dst_last),  // no route: ICMP error
    };
    let f = match kind % 8 {
        4 => arp(
            Operation::Request,
            HOST_MAC,
            if uplink { GW } else { HOST },
            if uplink { RED1 } else { RED0 },
            EthernetAddress::BROADCAST,
            vlan,
        ),
        5 => {
            let target = if uplink {
                "2001:db8:1::1".parse().unwrap()
            } else {
                RED0_6
            };
            let d = solicited_node(&target);
            let r = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: target,
                lladdr: Some(HOST_MAC),
            });
            let src6 = if uplink { GW6 } else { HOST6 };
            eth(
                ipv6_multicast_mac(&d),
                HOST_MAC,
                vlan,
                EtherType::Ipv6,
                &icmpv6(src6, d, 255, &r),
            )
        }
        6 => {
            let d6 = if kind & 8 == 0 {
                REMOTE6
            } else {
                "2001:db8::77".parse().unwrap()
            };
            let src6 = if uplink { GW6 } else { HOST6 };
            eth(
                mac,
                HOST_MAC,
                vlan,
                EtherType::Ipv6,
                &ipv6(src6, d6, IpProtocol::Udp, ttl, &udp(8)),
            )
        }
        _ => {
            let dmac = if kind & 16 != 0 {
                EthernetAddress::BROADCAST
            } else {
                mac
            };
            eth(
                dmac,
                HOST_MAC,
                vlan,
                EtherType::Ipv4,
                &ipv4(
                    src,
                    dst,
                    IpProtocol::Udp,
                    ttl,
                    kind & 32 != 0,
                    &udp(if kind & 64 != 0 { 1500 } else { 8 }),
                ),
            )
        }
    };
    (port, mark(f, vr))
}

/// Marks a frame as VR `vr`'s: IPv4 ident 0x1000 + vr, IPv6 flow label vr + 1.
/// ICMP errors quote the marked header, so the mark survives into them.
fn mark(mut f: Vec<u8>, vr: usize) -> Vec<u8> {
    let l3 = if f[12..14] == [0x81, 0x00] { 18 } else { 14 };
    let et = u16::from_be_bytes([f[l3 - 2], f[l3 - 1]]);
    match et {
        0x0800 => {
            f[l3 + 4..l3 + 6].copy_from_slice(&(0x1000 + vr as u16).to_be_bytes());
            fix_ipv4_checksum(&mut f, l3);
        }
        0x86dd if f[l3 + 6] == 17 => f[l3 + 1..l3 + 4].copy_from_slice(&[0, 0, vr as u8 + 1]),
        _ => {}
    }
    f
}

/// The VR whose mark an outgoing frame carries, if it carries one.
fn marked(o: &Out) -> Option<usize> {
    let l3 = o.l3();
    match o.ethertype() {
        EtherType::Ipv4 => {
            let ip = o.ipv4();
            let hl = ip.header_len() as usize;
            let ident = match ip.protocol() {
                IpProtocol::Udp => ip.ident(),
                // An ICMP error quotes the offending header after its own 8 bytes.
                IpProtocol::Icmp if l3.len() >= hl + 8 + 6 && l3[hl] != 0 => {
                    u16::from_be_bytes([l3[hl + 12], l3[hl + 13]])
                }
                _ => return None,
            };
            ident.checked_sub(0x1000).map(|v| v as usize)
        }
        EtherType::Ipv6 => {
            let label = match l3[6] {
                17 => l3[3],
                58 if l3.len() >= 48 + 4 && l3[40] < 128 => l3[48 + 3],
                _ => return None,
            };
            (label as usize).checked_sub(1)
        }
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn nothing_crosses_between_vrs(
        packets in proptest::collection::vec((0usize..2, any::<bool>(), any::<u8>(), 1u8..255, 1u8..4), 1..60),
        timers in proptest::collection::vec(any::<bool>(), 60),
    ) {
        let mut e = engine();
        let mut now = 0;
        for (i, &(vr, uplink, kind, last, ttl)) in packets.iter().enumerate() {
            let (port, f) = frame(vr, uplink, kind, last, ttl);
            now += 300_000_000;
            let mut out = send(&mut e, port, &f, now);
            if timers[i % timers.len()] {
                out.extend(poll(&mut e, now + 1));
            }
            for o in &out {
                // Anything a VR sends leaves on one of its own (port, VLAN)
                // pairs, from its own MAC, and carries only its own packets.
                let Some(egress_vr) = owner(o.port, o.vlan()) else {
                    return Err(TestCaseError::fail(format!("left on no VR's interface: port {} vlan {:?}", o.port, o.vlan())));
                };
                let allowed = if egress_vr == 0 { [RED0_MAC, RED1_MAC] } else { [BLUE0_MAC, BLUE1_MAC] };
                prop_assert!(allowed.contains(&o.eth().src_addr()), "VR {}'s interface sent another VR's MAC", egress_vr);
                if let Some(m) = marked(o) {
                    prop_assert_eq!(m, egress_vr, "a packet of VR {} left on VR {}'s interface", m, egress_vr);
                }
            }
        }
    }
}

/// The mark survives forwarding and ICMP errors, so the property above checks
/// something: a forwarded packet and an error about one both carry it.
#[test]
fn marks_are_visible_on_forwarded_packets_and_icmp_errors() {
    let mut e = engine();
    for vr in 0..2 {
        let (port, f) = frame(vr, false, 2, 9, 64); // forwarded via the gateway
        let out = send(&mut e, port, &f, 1);
        assert_eq!(out.len(), 1);
        assert_eq!(marked(&out[0]), Some(vr));
        let (port, f) = frame(vr, true, 3, 9, 64); // no route: ICMP error back to the uplink
        let out = send(&mut e, port, &f, 2);
        let errors: Vec<_> = out
            .iter()
            .filter(|o| o.ethertype() == EtherType::Ipv4)
            .collect();
        assert_eq!(errors.len(), 1, "{out:?}");
        assert_eq!(marked(errors[0]), Some(vr));
        let (port, f) = frame(vr, false, 6, 9, 64); // IPv6 forwarded
        let out = send(&mut e, port, &f, 3);
        assert_eq!(marked(&out[0]), Some(vr));
    }
}

/// Both VRs' frames in one burst. The pipeline looks each burst's IPv4
/// destinations up in one FIB batch per run of a VR's frames (alternating
/// frames make runs of one; 70 in a row make a run longer than a batch);
/// every frame must still be answered from its own VR's table, and a frame
/// too short for an IPv4 header in the middle of a run changes nothing.
#[test]
fn one_burst_of_both_vrs_is_routed_per_vr() {
    let mut e = engine();
    let mut frames = Vec::new();
    // [vr][forwarded, ICMP error]; all frames come from the uplinks, whose
    // gateways are resolved, so nothing waits for ARP.
    let mut expect = [[0usize; 2]; 2];
    for i in 0..40usize {
        let (vr, kind) = (i % 2, 2 + (i / 2 % 2) as u8); // 2: via the gateway, 3: no route
        frames.push(frame(vr, true, kind, 9 + i as u8, 64));
        expect[vr][kind as usize - 2] += 1;
    }
    for i in 0..140usize {
        let (vr, kind) = (i / 70, 2 + (i % 3 == 0) as u8);
        frames.push(frame(vr, true, kind, 100 + (i % 70) as u8, 64));
        expect[vr][kind as usize - 2] += 1;
        if i == 35 {
            // Ethernet + the first 10 bytes of an IPv4 header.
            let (port, mut short) = frame(0, true, 2, 1, 64);
            short.truncate(18 + 10);
            frames.push((port, short));
        }
    }
    let burst: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, &f[..])).collect();
    let out = send_burst(&mut e, &burst, 1);
    let mut seen = [[0usize; 2]; 2];
    for o in &out {
        let vr = owner(o.port, o.vlan()).expect("left on a VR's interface");
        assert_eq!(marked(o), Some(vr), "{o:?}");
        let kind = match o.ipv4().protocol() {
            IpProtocol::Udp => 0,
            IpProtocol::Icmp => 1,
            p => panic!("unexpected {p:?}"),
        };
        seen[vr][kind] += 1;
    }
    assert_eq!(seen, expect);
    assert_eq!(
        e.port_counters(PortId::new(1))
            .drop_count(vrhost_dataplane::DropReason::Ipv4Truncated),
        1
    );
}

/// Frames the generator above lacks: packets for the router itself (punted:
/// UDP and TCP to its own addresses, limited broadcast), directed broadcasts,
/// echo requests, and ARP replies and Neighbor Advertisements from hosts,
/// which release whatever the VR held for them. Red and blue hold packets
/// for the same addresses, so a reply in one must release only its own.
fn control_frame(vr: usize, uplink: bool, kind: u8, last: u8) -> (u16, Vec<u8>) {
    let (port, vlan, mac) = match (vr, uplink) {
        (0, false) => (0, None, RED0_MAC),
        (0, true) => (1, Some(100), RED1_MAC),
        (_, false) => (2, None, BLUE0_MAC),
        (_, true) => (1, Some(200), BLUE1_MAC),
    };
    let net = if uplink { 1 } else { 0 };
    let own = std::net::Ipv4Addr::new(10, net, 0, 1);
    let peer = std::net::Ipv4Addr::new(10, net, 0, last);
    let own6: std::net::Ipv6Addr = if uplink {
        "2001:db8:1::1"
    } else {
        "2001:db8::1"
    }
    .parse()
    .unwrap();
    let peer6 = std::net::Ipv6Addr::new(0x2001, 0xdb8, u16::from(uplink), 0, 0, 0, 0, last.into());
    let v4 = |dmac, dst, proto, payload: &[u8]| {
        eth(
            dmac,
            HOST_MAC,
            vlan,
            EtherType::Ipv4,
            &ipv4(peer, dst, proto, 64, false, payload),
        )
    };
    let f = match kind % 8 {
        0 => v4(mac, own, IpProtocol::Udp, &udp(8)),
        1 => v4(mac, own, IpProtocol::Tcp, &tcp_syn(179, last.into())),
        2 => v4(
            EthernetAddress::BROADCAST,
            std::net::Ipv4Addr::BROADCAST,
            IpProtocol::Udp,
            &udp(8),
        ),
        3 => v4(
            EthernetAddress::BROADCAST,
            std::net::Ipv4Addr::new(10, net, 0, 255),
            IpProtocol::Udp,
            &udp(8),
        ),
        4 => eth(
            mac,
            HOST_MAC,
            vlan,
            EtherType::Ipv6,
            &ipv6(peer6, own6, IpProtocol::Tcp, 64, &tcp_syn(179, 1)),
        ),
        5 => arp(Operation::Reply, HOST_MAC, peer, own, mac, vlan),
        6 => v4(mac, own, IpProtocol::Icmp, &echo4(7, last.into(), b"ping")),
        _ => {
            let r = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                target_addr: peer6,
                lladdr: Some(HOST_MAC),
            });
            eth(
                mac,
                HOST_MAC,
                vlan,
                EtherType::Ipv6,
                &icmpv6(peer6, own6, 255, &r),
            )
        }
    };
    (port, mark(f, vr))
}

/// Checks that `o` left on one of VR `vr`'s (port, VLAN) pairs, from that
/// interface's MAC, carrying no other VR's mark.
fn belongs_to(o: &Out, vr: usize) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        owner(o.port, o.vlan()),
        Some(vr),
        "left on port {} vlan {:?}",
        o.port,
        o.vlan()
    );
    let allowed = if vr == 0 {
        [RED0_MAC, RED1_MAC]
    } else {
        [BLUE0_MAC, BLUE1_MAC]
    };
    prop_assert!(allowed.contains(&o.eth().src_addr()));
    if let Some(m) = marked(o) {
        prop_assert_eq!(m, vr, "a packet of VR {} left on VR {}'s interface", m, vr);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Stricter than the property above: timers run apart from the input,
    /// so everything a `send` produces is due to that one frame of one VR,
    /// and must leave on that VR's interfaces; every punt it causes must land
    /// on that VR's queue, unchanged, from that VR's interface.
    #[test]
    fn each_frame_only_touches_its_own_vr(
        packets in proptest::collection::vec(
            (0usize..2, any::<bool>(), proptest::option::of(any::<u8>()), any::<u8>(), 2u8..6, 1u8..4),
            1..80,
        ),
    ) {
        let mut e = engine();
        let mut now = 0;
        for &(vr, uplink, control, kind, last, ttl) in &packets {
            now += 300_000_000;
            // Timers first (probes, held packets timing out): any VR's, but
            // each on its own interfaces, and they punt nothing.
            for o in &poll(&mut e, now) {
                let v = owner(o.port, o.vlan());
                prop_assert!(v.is_some());
                belongs_to(o, v.unwrap())?;
            }
            let (port, f) = match control {
                Some(c) => control_frame(vr, uplink, c, last),
                None => frame(vr, uplink, kind, last, ttl),
            };
            // The timers just ran, so this burst runs none: its output is the frame's.
            for o in &send(&mut e, port, &f, now) {
                belongs_to(o, vr)?;
            }
            let mut punts = Vec::new();
            e.drain_all_punted(|pvr, m| punts.push((pvr, m.iface, m.data().to_vec())));
            for (pvr, iface, data) in punts {
                prop_assert_eq!(pvr, vr, "VR {}'s frame punted to VR {}", vr, pvr);
                prop_assert_eq!(e.ifaces()[iface as usize].vr as usize, vr);
                prop_assert!(data == f, "the punt is the frame received");
            }
        }
    }
}

/// The control frames do what the property needs them to: punts land on the
/// sender's queue, and an ARP reply or NA in one VR releases only the
/// packets that VR held for an address both VRs are resolving.
#[test]
fn control_frames_punt_and_release_per_vr() {
    let mut e = engine();
    for kind in [0, 1, 2, 4] {
        for vr in 0..2 {
            let (port, f) = control_frame(vr, kind % 2 == 0, kind, 3);
            assert!(send(&mut e, port, &f, 1).is_empty());
            let mut punts = Vec::new();
            e.drain_all_punted(|pvr, m| punts.push((pvr, m.data().to_vec())));
            assert_eq!(punts, vec![(vr, f)], "kind {kind}");
        }
    }
    // Both VRs hold a packet for 10.0.0.3 and 2001:db8::3 (identical addresses).
    for vr in 0..2 {
        let (port, f) = frame(vr, false, 0, 3, 64);
        let out = send(&mut e, port, &f, 2);
        assert_eq!(out.len(), 1, "one ARP request");
        let (port, vlan, mac) = [(1, 100, RED1_MAC), (1, 200, BLUE1_MAC)][vr];
        let to_host = ipv6(
            GW6,
            "2001:db8::3".parse().unwrap(),
            IpProtocol::Udp,
            64,
            &udp(8),
        );
        let f = mark(
            eth(mac, HOST_MAC, Some(vlan), EtherType::Ipv6, &to_host),
            vr,
        );
        let out = send(&mut e, port, &f, 2);
        assert_eq!(out.len(), 1, "one solicitation");
    }
    assert_eq!(e.held(), 4);
    for (kind, family) in [(5, EtherType::Ipv4), (7, EtherType::Ipv6)] {
        let (port, f) = control_frame(1, false, kind, 3);
        let out = send(&mut e, port, &f, 3);
        let released: Vec<_> = out.iter().filter(|o| o.ethertype() == family).collect();
        assert_eq!(released.len(), 1, "{out:?}");
        assert_eq!((released[0].port, marked(released[0])), (2, Some(1)));
    }
    assert_eq!(e.held(), 2, "red's two are still held");
}
