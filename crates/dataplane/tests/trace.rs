//! Packet trace: every drop reason a frame can meet is named by the trace
//! of that frame; a traced frame leaves exactly as an untraced one; a
//! trace records only its own VR (and interface), and no more packets than
//! asked.
//!
//! ```text
//!  port 0 ── red0 10.0.0.1/24 ── red ── red1 (port 1, VLAN 100, MTU 1400) ── gw 10.1.0.2
//!  port 2 ── blue0             ── blue ── blue1 (port 1, VLAN 200)
//! ```

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use common::*;
use vrhost_dataplane::trace::{Hop, L2Accept, MtuVerdict, PacketTrace, Step};
use vrhost_dataplane::{
    Action, DropReason, Engine, EngineSpec, FilterSpec, IfaceFilters, IfaceId, Limits, TraceError,
    Urpf, VrId,
};
use vrhost_wire::arp::Operation;
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::icmpv6::{Icmpv6Repr, NdiscRepr};
use vrhost_wire::ip::IpProtocol;

const RED: VrId = VrId::new(0);
const BLUE: VrId = VrId::new(1);
const T: u64 = SEC;

/// How to make a frame be dropped for one reason: the engine, what to send
/// before arming the trace, and the frame (port, bytes).
struct Case {
    spec: EngineSpec,
    before: Vec<(u16, Vec<u8>)>,
    frame: (u16, Vec<u8>),
}

fn case(frame: (u16, Vec<u8>)) -> Case {
    Case {
        spec: spec(Limits::default()),
        before: Vec::new(),
        frame,
    }
}

/// A UDP frame from the host on red0 to `dst`.
fn udp_to(dst: Ipv4Addr) -> (u16, Vec<u8>) {
    (0, udp4_frame(dst, 64, false, 18))
}

/// An IPv4 frame on red0 whose header bytes `edit` changes (the checksum
/// fixed after, unless `keep_checksum`).
fn edited(edit: impl FnOnce(&mut Vec<u8>), keep_checksum: bool) -> (u16, Vec<u8>) {
    let mut f = udp4_frame(REMOTE, 64, false, 18);
    edit(&mut f);
    if !keep_checksum {
        fix_ipv4_checksum(&mut f, 14);
    }
    (0, f)
}

/// An IPv6 frame from the host on red0.
fn v6_frame(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    nh: IpProtocol,
    hop: u8,
    payload: &[u8],
) -> (u16, Vec<u8>) {
    let l3 = ipv6(src, dst, nh, hop, payload);
    (0, eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv6, &l3))
}

fn echo_frame(src: Ipv4Addr, bad_checksum: bool) -> (u16, Vec<u8>) {
    let mut icmp = echo4(7, 1, b"trace");
    if bad_checksum {
        icmp[2] ^= 0xff;
    }
    let l3 = ipv4(src, RED0, IpProtocol::Icmp, 64, false, &icmp);
    (0, eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &l3))
}

fn syn_to_router() -> (u16, Vec<u8>) {
    // SSH: BGP would pass the punt limits within the protected share.
    let l3 = ipv4(HOST, RED0, IpProtocol::Tcp, 64, false, &tcp_syn(22, 1));
    (0, eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &l3))
}

/// Red's limits changed by `f`, blue's the default.
fn red_limits(f: impl FnOnce(&mut Limits)) -> EngineSpec {
    let mut l = Limits::default();
    f(&mut l);
    spec2(l, Limits::default())
}

/// The frame and set-up that make `reason` drop a frame of red, or why no
/// frame can meet it. A reason added to `DropReason` without a case here
/// does not compile.
fn drop_case(reason: DropReason) -> Result<Case, &'static str> {
    use DropReason as D;
    let host_on_red1 = Ipv4Addr::new(10, 1, 0, 77);
    Ok(match reason {
        // red1's VLAN with the 802.1ad TPID: red1 takes 802.1Q only.
        D::NoInterface => {
            let mut f = eth(GW_MAC, RED1_MAC, Some(100), EtherType::Ipv4, &[0; 46]);
            f[12..14].copy_from_slice(&[0x88, 0xa8]);
            f[..6].copy_from_slice(&RED1_MAC.0);
            case((1, f))
        }
        // Cut inside red1's tag, after its VLAN.
        D::TruncatedL2 => {
            let f = eth(RED1_MAC, GW_MAC, Some(100), EtherType::Ipv4, &[0; 46]);
            case((1, f[..16].to_vec()))
        }
        D::NotForUs => {
            let (p, mut f) = udp_to(REMOTE);
            f[..6].copy_from_slice(&[0x02, 0xee, 0, 0, 0, 1]);
            case((p, f))
        }
        D::UnsupportedEthertype => case((
            0,
            eth(RED0_MAC, HOST_MAC, None, EtherType::from(0x88cc), &[0; 46]),
        )),
        D::BadArp => case((0, eth(RED0_MAC, HOST_MAC, None, EtherType::Arp, &[0; 46]))),
        D::NeighborNotForUs => case((
            0,
            arp(
                Operation::Request,
                HOST_MAC,
                HOST,
                Ipv4Addr::new(10, 0, 0, 77),
                EthernetAddress::BROADCAST,
                None,
            ),
        )),
        D::AddressConflict => case((
            0,
            arp(
                Operation::Request,
                HOST_MAC,
                RED0,
                HOST,
                EthernetAddress::BROADCAST,
                None,
            ),
        )),
        // A solicitation for red0's address with hop limit 64, not 255.
        D::BadNdp => {
            let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: RED0_6,
                lladdr: Some(HOST_MAC),
            });
            let l3 = icmpv6(HOST6, RED0_6, 64, &ns);
            case((0, eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv6, &l3)))
        }
        D::Ipv4Truncated => case(edited(
            |f| f[16..18].copy_from_slice(&1000u16.to_be_bytes()),
            false,
        )),
        D::Ipv4BadVersion => case(edited(|f| f[14] = 0x55, false)),
        D::Ipv4BadChecksum => case(edited(|f| f[24] ^= 0xff, true)),
        // A loose source route option (RFC 7126 §4.3).
        D::Ipv4BadOptions => {
            let (p, f) = udp_to(REMOTE);
            let mut g = f[..34].to_vec();
            g.extend_from_slice(&[0x83, 3, 4, 0]);
            g.extend_from_slice(&f[34..]);
            g[14] = 0x46;
            let total = (g.len() - 14) as u16;
            g[16..18].copy_from_slice(&total.to_be_bytes());
            fix_ipv4_checksum(&mut g, 14);
            case((p, g))
        }
        D::MartianSource => case(edited(|f| f[26] = 127, false)),
        D::MartianDestination => case(udp_to(Ipv4Addr::new(0, 1, 2, 3))),
        // red1's subnet broadcast, from red0.
        D::DirectedBroadcast => case(udp_to(Ipv4Addr::new(10, 1, 0, 255))),
        D::MulticastNotRouted => {
            let (p, mut f) = udp_to(Ipv4Addr::new(239, 1, 1, 1));
            f[..6].copy_from_slice(&EthernetAddress::BROADCAST.0);
            case((p, f))
        }
        D::Ipv6Truncated => {
            let (p, mut f) = udp6_frame_at(REMOTE6);
            f[18..20].copy_from_slice(&1000u16.to_be_bytes());
            case((p, f))
        }
        D::Ipv6BadVersion => {
            let (p, mut f) = udp6_frame_at(REMOTE6);
            f[14] = 0x70;
            case((p, f))
        }
        // For red0's address: a hop-by-hop header whose length runs past
        // the packet.
        D::Ipv6BadExtension => case(v6_frame(
            HOST6,
            RED0_6,
            IpProtocol::HopByHop,
            64,
            &[17, 9, 0, 0, 0, 0, 0, 0],
        )),
        D::Ipv6MartianAddress => case(v6_frame(
            "ff02::1".parse().expect("address"),
            REMOTE6,
            IpProtocol::Udp,
            64,
            &udp(8),
        )),
        D::Ipv6LinkLocalNotForwarded => case(v6_frame(
            HOST6,
            "fe80::99".parse().expect("address"),
            IpProtocol::Udp,
            64,
            &udp(8),
        )),
        D::TtlExpired => case((0, udp4_frame(REMOTE, 1, false, 18))),
        D::NoRoute => case(udp_to(Ipv4Addr::new(8, 8, 8, 8))),
        D::Blackhole => case(udp_to(Ipv4Addr::new(203, 0, 113, 5))),
        D::Unreachable => case(udp_to(Ipv4Addr::new(198, 51, 100, 5))),
        // 1428 bytes with DF to red1 (MTU 1400).
        D::MtuExceeded => case((0, udp4_frame(REMOTE, 64, true, 1400))),
        // 4000 bytes without DF into an MTU of 68: 83 fragments, more than
        // the 64 allowed.
        D::FragmentFailed => {
            let mut s = spec(Limits::default());
            s.routers[0].interfaces[1].mtu = 68;
            Case {
                spec: s,
                before: Vec::new(),
                frame: (0, udp4_frame(REMOTE, 64, false, 3972)),
            }
        }
        // The fifth frame for a host red1 is still resolving (four held).
        D::NeighborUnresolved => {
            let f = udp_to(host_on_red1);
            Case {
                spec: spec(Limits::default()),
                before: vec![f.clone(); 4],
                frame: f,
            }
        }
        // Red may hold two neighbours, its two static gateways.
        D::NeighborTableFull => Case {
            spec: red_limits(|l| l.max_neighbors = 2),
            before: Vec::new(),
            frame: udp_to(host_on_red1),
        },
        // A ping from a source red has no route back to.
        D::NoRouteLocal => case(echo_frame(Ipv4Addr::new(172, 16, 0, 9), false)),
        D::BadLocal => case(echo_frame(HOST, true)),
        D::PuntQueueFull => Case {
            spec: red_limits(|l| l.punt_queue = 1),
            before: vec![syn_to_router()],
            frame: syn_to_router(),
        },
        D::NoBuffer => {
            return Err(
                "unreachable by a frame: every buffer has 128 bytes of headroom and \
                        an L2 header is at most 22, and the pool allocates rather than fail",
            )
        }
        // Reached under a flood with a clock: `over_share_is_traced` below.
        D::OverShare => return Err("needs a saturated worker: over_share_is_traced"),
        // 64 frames use the ceiling's burst (pps 1: a burst of 64).
        D::RateCeiling => {
            let f = udp_to(REMOTE);
            Case {
                spec: red_limits(|l| l.pps = 1),
                before: vec![f.clone(); 64],
                frame: f,
            }
        }
        D::PuntRateLimit => Case {
            spec: red_limits(|l| l.punt_rate = 1),
            before: vec![syn_to_router()],
            frame: syn_to_router(),
        },
        // From a source red routes out of red1, arriving on strict red0.
        D::Urpf => {
            let mut s = spec(Limits::default());
            s.routers[0].interfaces[0].urpf = Urpf::Strict;
            let (p, mut f) = udp_to(REMOTE);
            f[26..30].copy_from_slice(&[192, 0, 2, 7]);
            fix_ipv4_checksum(&mut f, 14);
            Case {
                spec: s,
                before: Vec::new(),
                frame: (p, f),
            }
        }
        // red0 denies everything that enters (set up in `engine_for`).
        D::Filtered => case(udp_to(REMOTE)),
    })
}

/// A UDP/IPv6 frame from the host on red0.
fn udp6_frame_at(dst: Ipv6Addr) -> (u16, Vec<u8>) {
    (0, udp6_frame(dst, 64, 8))
}

fn engine_for(reason: DropReason, c: &Case) -> Engine {
    let mut e = Engine::new(&c.spec).expect("spec builds");
    if reason == DropReason::Filtered {
        let deny = FilterSpec {
            name: "closed".into(),
            default: Action::Deny,
            rules: Vec::new(),
        };
        e.set_filters(RED, &[deny]).expect("filters");
        let names = IfaceFilters {
            input: Some("closed".into()),
            output: None,
        };
        e.set_interface_filters(RED, "red0", &names)
            .expect("red0 applies it");
    }
    e
}

/// Sends `frame` while a trace of red counts one packet; returns the
/// traces it recorded.
fn traced(e: &mut Engine, frame: &(u16, Vec<u8>), now: u64) -> Vec<PacketTrace> {
    let trace = e.trace_hub().arm(RED, None, 1).expect("armed");
    send(e, frame.0, &frame.1, now);
    trace.wait(Instant::now())
}

#[test]
fn the_trace_of_each_drop_reason_names_it() {
    let mut unreachable = Vec::new();
    for &reason in DropReason::ALL {
        let c = match drop_case(reason) {
            Ok(c) => c,
            Err(why) => {
                unreachable.push((reason, why));
                continue;
            }
        };
        let mut e = engine_for(reason, &c);
        for (port, f) in &c.before {
            send(&mut e, *port, f, T);
        }
        let got = traced(&mut e, &c.frame, T);
        assert_eq!(got.len(), 1, "{reason:?}: one packet traced");
        assert_eq!(
            got[0].outcome.drops,
            [reason],
            "{reason:?}: the trace names exactly that reason; steps {:#?}",
            got[0].steps
        );
        // Nothing that left was the packet itself.
        assert!(
            got[0].outcome.sent.iter().all(|s| s.generated),
            "{reason:?}: {:#?}",
            got[0].outcome
        );
    }
    // Only these are reached otherwise, each for the reason given.
    let names: Vec<_> = unreachable.iter().map(|(r, _)| *r).collect();
    assert_eq!(names, [DropReason::NoBuffer, DropReason::OverShare]);
}

static TICKS: AtomicU64 = AtomicU64::new(0);

fn clock() -> u64 {
    TICKS.fetch_add(10, Relaxed)
}

/// Blue floods a worker with a clock until it is over its share; a trace
/// of blue armed then names `over-share` for the frames refused.
#[test]
fn over_share_is_traced() {
    let mut e = Engine::new(&spec(Limits::default())).expect("spec builds");
    e.set_clock(clock, 1_000_000, 8);
    let mut blue = udp4_frame(REMOTE, 64, false, 18);
    blue[..6].copy_from_slice(&BLUE0_MAC.0);
    let red = udp4_frame(REMOTE, 64, false, 18);
    let burst = |f: &[u8], port: u16| -> Vec<(u16, Vec<u8>)> {
        (0..16).map(|_| (port, f.to_vec())).collect()
    };
    let send_all = |e: &mut Engine, frames: Vec<(u16, Vec<u8>)>, now: u64| {
        let refs: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, f.as_slice())).collect();
        send_burst(e, &refs, now);
    };
    let mut trace = None;
    let mut seen = Vec::new();
    for i in 0..400u64 {
        let now = SEC + i * 1000;
        if i == 100 {
            trace = Some(e.trace_hub().arm(BLUE, None, 1000).expect("armed"));
        }
        for _ in 0..4 {
            send_all(&mut e, burst(&blue, 2), now);
        }
        send_all(&mut e, burst(&red, 0), now);
        if let Some(t) = &trace {
            seen.extend(t.wait(Instant::now()));
        }
    }
    assert_eq!(seen.len(), 1000, "blue's frames were traced");
    let refused: Vec<_> = seen
        .iter()
        .filter(|t| t.outcome.drops == [DropReason::OverShare])
        .collect();
    assert!(
        !refused.is_empty(),
        "some traced frame was over blue's share"
    );
    for t in refused {
        assert!(
            t.steps.contains(&Step::FairShare { admitted: false }),
            "{t:#?}"
        );
        assert!(t.outcome.sent.is_empty());
    }
    assert!(seen.iter().all(|t| t.vr == BLUE));
}

/// A forwarded packet's trace: every decision, with what it was made on.
#[test]
fn a_forwarded_packet_shows_every_decision() {
    let mut e = engine();
    let got = traced(&mut e, &udp_to(REMOTE), T);
    assert_eq!(got.len(), 1);
    let t = &got[0];
    let steps = &t.steps;
    assert_eq!(
        steps[0],
        Step::Demux {
            port: 0,
            tag: None,
            inner_vlan: None,
            iface: Some(IfaceId::new(0)),
            result: Ok(())
        }
    );
    assert!(matches!(
        steps[1],
        Step::L2 { dst, accepted: Some(L2Accept::Own), ethertype: 0x0800, .. } if dst == RED0_MAC
    ));
    assert!(
        matches!(&steps[2], Step::Ip { header: Some(h), checks: Ok(()) }
        if h.dst == IpAddr::V4(REMOTE) && h.ttl == 64 && h.ports == Some((4000, 9)))
    );
    let red1 = IfaceId::new(1);
    assert!(
        matches!(steps[3], Step::Route { dst, next_hop: Some(_), hop: Some(Hop::Gateway { iface, addr }), member: None }
            if dst == IpAddr::V4(REMOTE) && iface == red1 && addr == IpAddr::V4(GW)),
        "{:?}",
        steps[3]
    );
    assert_eq!(
        steps[4],
        Step::Ttl {
            ttl: 64,
            pass: true
        }
    );
    assert!(matches!(
        steps[5],
        Step::Mtu {
            mtu: RED1_MTU,
            verdict: MtuVerdict::Fits,
            ..
        }
    ));
    assert!(matches!(
        steps[6],
        Step::Neighbor { iface, addr, state: Some(vrhost_dataplane::neighbor::State::Static), mac: Some(m) }
            if iface == red1 && addr == IpAddr::V4(GW) && m == GW_MAC
    ));
    assert_eq!(steps.len(), 7, "{steps:#?}");
    let o = &t.outcome;
    assert!(o.drops.is_empty());
    assert_eq!(o.sent.len(), 1);
    let s = &o.sent[0];
    assert_eq!(
        (s.port, s.iface, s.tag, s.dst, s.generated),
        (1, Some(red1), Some((0x8100, 100)), GW_MAC, false)
    );
    assert_eq!(s.ip.as_ref().map(|h| h.ttl), Some(63));
}

/// A packet held for its next hop, and the ARP request it made.
#[test]
fn a_held_packet_shows_the_neighbour_and_the_request() {
    let mut e = engine();
    let got = traced(&mut e, &udp_to(Ipv4Addr::new(10, 1, 0, 77)), T);
    let t = &got[0];
    assert!(t.outcome.held, "{t:#?}");
    assert!(t
        .steps
        .iter()
        .any(|s| matches!(s, Step::Neighbor { state: None, .. })));
    assert_eq!(t.outcome.sent.len(), 1);
    assert_eq!(t.outcome.sent[0].ethertype, 0x0806);
    assert!(t.outcome.sent[0].generated);
}

/// What the trace of each kind of traffic does to it: nothing. The same
/// frames leave two engines, one tracing red all along, byte for byte,
/// with the same counters.
#[test]
fn a_traced_frame_leaves_as_an_untraced_one() {
    let frames: Vec<(u16, Vec<u8>)> = DropReason::ALL
        .iter()
        .filter_map(|&r| drop_case(r).ok())
        .filter(|c| c.before.is_empty())
        .map(|c| c.frame)
        .chain([
            udp_to(REMOTE),
            (0, udp4_frame(REMOTE, 64, false, 1472)),
            echo_frame(HOST, false),
            syn_to_router(),
            (0, udp6_frame(REMOTE6, 64, 20)),
            udp_to(Ipv4Addr::new(10, 1, 0, 77)),
        ])
        .collect();
    let mut plain = engine();
    let mut tracing = engine();
    let trace = tracing.trace_hub().arm(RED, None, 1000).expect("armed");
    for (i, (port, f)) in frames.iter().enumerate() {
        let now = T + i as u64 * 1000;
        let a = send(&mut plain, *port, f, now);
        let b = send(&mut tracing, *port, f, now);
        let bytes = |o: &[Out]| {
            o.iter()
                .map(|x| (x.port, x.frame.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(bytes(&a), bytes(&b), "frame {i}");
    }
    // Bursts of both VRs, mixed.
    let burst: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, f.as_slice())).collect();
    let mut blue = udp4_frame(REMOTE, 64, false, 18);
    blue[..6].copy_from_slice(&BLUE0_MAC.0);
    let burst: Vec<_> = burst.into_iter().chain([(2, blue.as_slice())]).collect();
    let a = send_burst(&mut plain, &burst, 2 * T);
    let b = send_burst(&mut tracing, &burst, 2 * T);
    let sorted = |o: &[Out]| {
        let mut v: Vec<_> = o.iter().map(|x| (x.port, x.frame.clone())).collect();
        v.sort();
        v
    };
    assert_eq!(sorted(&a), sorted(&b));
    // The same counters, but that a traced packet is forwarded by the full
    // stages: `fast_path` does not count it.
    for vr in [RED, BLUE] {
        let (mut a, b) = (plain.vr_counters(vr), tracing.vr_counters(vr));
        if vr == RED {
            assert_eq!(b.fast_path, 0);
            a.fast_path = 0;
        }
        assert_eq!(a, b, "{vr}");
    }
    assert_eq!(trace.wait(Instant::now()).len(), frames.len() * 2);
}

/// A trace records its VR's packets only, of one interface when asked,
/// and no more than its count.
#[test]
fn a_trace_keeps_to_its_vr_interface_and_count() {
    let mut e = engine();
    let hub = e.trace_hub();
    let red1_only = hub.arm(RED, Some(IfaceId::new(1)), 5).expect("armed");
    let two = hub.arm(RED, None, 2).expect("armed");
    assert_eq!(
        hub.arm(RED, None, 1).err(),
        Some(TraceError::TooManyOnVr),
        "two per VR"
    );
    assert_eq!(hub.arm(BLUE, None, 0).err(), Some(TraceError::Count(0)));
    let mut blue = udp4_frame(REMOTE, 64, false, 18);
    blue[..6].copy_from_slice(&BLUE0_MAC.0);
    for _ in 0..3 {
        send(&mut e, 2, &blue, T);
        send(&mut e, 0, &udp4_frame(REMOTE, 64, false, 18), T);
    }
    let got = two.wait(Instant::now());
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|t| t.vr == RED && t.port == 0));
    assert!(
        red1_only.wait(Instant::now()).is_empty(),
        "nothing came in on red1"
    );
    drop((two, red1_only));
    assert_eq!(hub.running(), 0);
    // Disarmed: nothing is recorded, bursts take the usual passes.
    send(&mut e, 0, &udp4_frame(REMOTE, 64, false, 18), T);
    assert_eq!(e.vr_counters(RED).fast_path, 1);
}
