//! One tenant cannot use up another's resources (issue 7, item 5): rate
//! ceilings, the route limit, neighbor tables and hold queues, punt queues.
//!
//! Every test drives the real [`Engine`] frame by frame with an explicit
//! `now`, and checks exact counters against a small oracle of the documented
//! contract, so a limit that is too loose, too tight or shared between VRs
//! fails. Red is the noisy tenant, blue the one that must not notice.
//!
//! ```text
//!  port 0 ── red0  10.0.0.1/24 ── red  ── red1  10.1.0.1/24 ── port 1 VLAN 100 ── gw 10.1.0.2
//!  port 2 ── blue0 10.0.0.1/24 ── blue ── blue1 10.1.0.1/24 ── port 1 VLAN 200 ── gw 10.1.0.2
//! ```

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vrhost_dataplane::{
    BuildError, Counters, DropReason, Engine, IfaceId, Limits, RouteTarget, VrId,
};
use vrhost_wire::arp::{ArpPacket, ArpRepr, Operation};
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::ip::IpProtocol;

const MS: u64 = 1_000_000;
const RED: VrId = VrId::new(0);
const BLUE: VrId = VrId::new(1);
/// Blue's uplink address, identical to red's.
const BLUE1_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);

/// The token-bucket contract the limits document: `rate` tokens a second
/// accrue continuously (no fraction is ever lost), at most `burst` are
/// saved, and the bucket starts full.
struct Bucket {
    rate: u64,
    burst: u64,
    tokens: u64,
    /// Accrued token·nanoseconds not yet worth a whole token.
    frac: u128,
    last: Option<u64>,
}

impl Bucket {
    fn new(rate: u64, burst: u64) -> Self {
        Bucket {
            rate,
            burst,
            tokens: burst,
            frac: 0,
            last: None,
        }
    }

    fn take(&mut self, now: u64, n: u64) -> bool {
        if let Some(last) = self.last {
            let acc = u128::from(now - last) * u128::from(self.rate) + self.frac;
            let whole = (acc / 1_000_000_000) as u64;
            self.frac = acc % 1_000_000_000;
            self.tokens = self.tokens.saturating_add(whole);
            if self.tokens >= self.burst {
                self.tokens = self.burst;
                self.frac = 0;
            }
        }
        self.last = Some(now);
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

/// The receive ceilings' documented burst: 10 ms worth, at least 64 frames
/// (or 64 full-size frames' bytes).
fn pps_burst(pps: u64) -> u64 {
    (pps / 100).max(64)
}
fn byte_burst(bps: u64) -> u64 {
    (bps / 8 / 100).max(64 * 1518)
}

/// A UDP frame from the host into VR `vr`'s host-side interface, toward
/// `dst`, `len` bytes long on the wire, with IPv4 ident `ident`.
fn host_frame(vr: usize, dst: Ipv4Addr, len: usize, ident: u16) -> Vec<u8> {
    let (mac, payload) = (
        if vr == RED.index() {
            RED0_MAC
        } else {
            BLUE0_MAC
        },
        len - 42,
    );
    let mut ip = ipv4(HOST, dst, IpProtocol::Udp, 64, false, &udp(payload));
    ip[4..6].copy_from_slice(&ident.to_be_bytes());
    let mut f = eth(mac, HOST_MAC, None, EtherType::Ipv4, &ip);
    fix_ipv4_checksum(&mut f, 14);
    assert_eq!(f.len(), len);
    f
}

/// VR `vr`'s uplink VLAN on port 1.
fn uplink_vlan(vr: usize) -> u16 {
    if vr == RED.index() {
        100
    } else {
        200
    }
}

/// Frames that left on VR `vr`'s uplink (port 1, its VLAN).
fn on_uplink(out: &[Out], vr: usize) -> Vec<&Out> {
    out.iter()
        .filter(|o| o.port == 1 && o.vlan() == Some(uplink_vlan(vr)))
        .collect()
}

/// The counters of VR `vr`'s interface `k` (0: host side, 1: uplink).
fn iface(e: &Engine, vr: usize, k: usize) -> Counters {
    e.iface_counters(IfaceId::from_index(e.vr(VrId::new(vr)).ifaces[k].index()))
}

/// The two-tenant engine with `red` limits on red and the defaults on blue.
fn red_limited(red: Limits) -> Engine {
    Engine::new(&spec2(red, Limits::default())).unwrap()
}

/// (name, count) of every drop reason with a non-zero count.
fn drops(c: &Counters) -> Vec<(&'static str, u64)> {
    c.nonzero_drops().collect()
}

// ---------------------------------------------------------------------------
// 1. Receive-rate ceilings
// ---------------------------------------------------------------------------

/// Red has a `pps` ceiling, blue none; both send through their gateway
/// (static neighbors) on the same uplink port. Phase 1 is one instant far
/// over the ceiling, phase 2 a second of 10× the ceiling in steps, phase 3 a
/// burst after idling, which must find only the burst saved up, not more.
fn pps_ceiling_case(pps: u64, step: u64, per_step: usize) {
    let mut e = red_limited(Limits {
        pps,
        ..Limits::default()
    });
    let red = host_frame(RED.index(), REMOTE, 60, 1);
    let blue = host_frame(BLUE.index(), REMOTE, 60, 2);
    let mut oracle = Bucket::new(pps, pps_burst(pps));
    let (mut red_sent, mut red_admitted, mut blue_sent) = (0u64, 0u64, 0u64);
    let t0 = 5 * SEC;
    let mut run = |e: &mut Engine, now: u64, n_red: usize, n_blue: usize| {
        // Blue's frames interleaved with red's, in one burst.
        let mut frames = Vec::new();
        let mut expect_red = 0;
        for i in 0..n_red.max(n_blue) {
            if i < n_red {
                frames.push((0u16, &red[..]));
                expect_red += u64::from(oracle.take(now, 1));
            }
            if i < n_blue {
                frames.push((2u16, &blue[..]));
            }
        }
        let out = send_burst(e, &frames, now);
        assert_eq!(
            on_uplink(&out, RED.index()).len() as u64,
            expect_red,
            "red forwarded at {now}"
        );
        assert_eq!(
            on_uplink(&out, BLUE.index()).len(),
            n_blue,
            "blue forwarded at {now}"
        );
        assert_eq!(out.len() as u64, expect_red + n_blue as u64);
        (n_red as u64, expect_red, n_blue as u64)
    };
    let mut tally = |(r, a, b): (u64, u64, u64)| {
        red_sent += r;
        red_admitted += a;
        blue_sent += b;
        red_admitted
    };

    // Phase 1: one instant, 10× the ceiling: exactly the burst gets through.
    assert_eq!(
        tally(run(&mut e, t0, 10 * pps as usize, 100)),
        pps_burst(pps)
    );

    // Phase 2: the rest of the second at 10× the ceiling.
    let steps = SEC / step;
    for k in 1..steps {
        tally(run(&mut e, t0 + k * step, per_step, 3));
    }
    let admitted = tally((0, 0, 0));
    // Within one second: at most the rate plus the burst, and (the bucket
    // being empty all along) no less than the rate minus one step's refill.
    assert!(admitted <= pps + pps_burst(pps), "{admitted}");
    assert!(admitted >= pps + pps_burst(pps) - pps * step / SEC);

    // Phase 3: after idling well over a second, only the burst is saved up.
    let after = tally(run(&mut e, t0 + 3 * SEC, 10 * pps as usize, 100));
    assert_eq!(after - admitted, pps_burst(pps));
    let _ = tally;

    let r = iface(&e, RED.index(), 0);
    assert_eq!(r.rx_packets, red_sent);
    assert_eq!(r.forwarded, red_admitted);
    assert_eq!(
        drops(&r),
        vec![("rate-ceiling", red_sent - red_admitted)],
        "red's excess counted as rate-ceiling on its ingress interface, nothing else"
    );
    assert_eq!(iface(&e, RED.index(), 1).tx_packets, red_admitted);
    let b = iface(&e, BLUE.index(), 0);
    assert_eq!((b.rx_packets, b.forwarded), (blue_sent, blue_sent));
    assert_eq!(drops(&b), vec![], "blue untouched");
    assert_eq!(iface(&e, BLUE.index(), 1).tx_packets, blue_sent);
    assert_eq!(DropReason::RateCeiling.name(), "rate-ceiling");
}

#[test]
fn pps_ceiling_polices_only_its_vr() {
    // 1000 pps: the 64-frame floor is the burst; 1 ms steps of 10 frames.
    pps_ceiling_case(1_000, MS, 10);
    // 20 000 pps: 10 ms worth (200) is the burst; 10 ms steps of 2000 frames.
    pps_ceiling_case(20_000, 10 * MS, 2_000);
}

#[test]
fn bps_ceiling_counts_bytes_of_large_frames() {
    // 8 Mb/s = 1 MB/s; burst max(10 ms = 10 kB, 64 × 1518 B) = 97 152 B.
    let bps = 8_000_000;
    let mut e = red_limited(Limits {
        bps,
        ..Limits::default()
    });
    // 1000-byte frames: one per millisecond of refill; 1400 would not fit red1's MTU.
    let red = host_frame(RED.index(), REMOTE, 1000, 1);
    let blue = host_frame(BLUE.index(), REMOTE, 1000, 2);
    let small = host_frame(RED.index(), REMOTE, 60, 3);
    let mut oracle = Bucket::new(bps / 8, byte_burst(bps));
    let (mut red_sent, mut red_admitted) = (0u64, 0u64);
    let t0 = 7 * SEC;
    for k in 0..1000u64 {
        let now = t0 + k * MS;
        // 10 MB/s offered (10× the ceiling), 100 frames at the first instant.
        let n = if k == 0 { 100 } else { 10 };
        let mut frames = vec![(2u16, &blue[..])];
        let mut expect = 0;
        for _ in 0..n {
            frames.push((0, &red[..]));
            expect += u64::from(oracle.take(now, 1000));
        }
        let out = send_burst(&mut e, &frames, now);
        assert_eq!(
            on_uplink(&out, RED.index()).len() as u64,
            expect,
            "step {k}"
        );
        assert_eq!(on_uplink(&out, BLUE.index()).len(), 1, "step {k}");
        if k == 0 {
            assert_eq!(expect, 97, "the burst: 97 152 bytes hold 97 frames");
        }
        red_sent += n;
        red_admitted += expect;
    }
    // One second: at most 1 MB plus the burst, i.e. 1097 frames; the bucket
    // was empty from the first step, so 97 + 999 exactly.
    assert_eq!(red_admitted, 97 + 999);
    assert!(red_admitted * 1000 <= bps / 8 + byte_burst(bps));
    // The ceiling counts bytes, not frames: 152 bytes are left, enough for
    // two small frames but not a third, nor a large one.
    let out = send_burst(
        &mut e,
        &[
            (0, &small[..]),
            (0, &small[..]),
            (0, &small[..]),
            (0, &red[..]),
        ],
        t0 + 999 * MS,
    );
    assert_eq!(on_uplink(&out, RED.index()).len(), 2);
    let r = iface(&e, RED.index(), 0);
    assert_eq!(r.forwarded, red_admitted + 2);
    assert_eq!(
        drops(&r),
        vec![("rate-ceiling", red_sent - red_admitted + 2)]
    );
    let b = iface(&e, BLUE.index(), 0);
    assert_eq!((b.forwarded, b.dropped()), (1000, 0), "blue untouched");
}

/// With both ceilings set, a frame the packet ceiling refuses must not use up
/// the byte ceiling (worker.rs says "check both before taking from either").
#[test]
fn refused_frame_costs_nothing_from_the_other_ceiling() {
    // 1000 pps (burst 64) and 200 kB/s (burst 97 152 B, refill 2 kB per 10 ms).
    let (pps, bps) = (1_000, 1_600_000);
    let mut e = red_limited(Limits {
        pps,
        bps,
        ..Limits::default()
    });
    let red = host_frame(RED.index(), REMOTE, 1000, 1);
    let t0 = 9 * SEC;
    // 200 frames at once: the packet ceiling admits 64 (64 000 bytes of 97 152).
    let out = send_burst(&mut e, &vec![(0u16, &red[..]); 200], t0);
    assert_eq!(on_uplink(&out, RED.index()).len(), 64);
    // The next 33 frames fit the byte ceiling but not the packet one, and
    // must leave its 33 152 bytes alone. 10 ms later the packet ceiling
    // has 10 more and the byte ceiling 35 152 bytes, so all 10 go (with the
    // bytes taken by refused frames, only 2 152 would be left: 2 frames).
    let out = send_burst(&mut e, &vec![(0u16, &red[..]); 10], t0 + 10 * MS);
    assert_eq!(on_uplink(&out, RED.index()).len(), 10);
}

/// The ceiling admits its configured rate whatever the arrival spacing: a
/// refill that is not yet a whole token must not be thrown away.
#[test]
fn pps_ceiling_keeps_fractional_refill() {
    let pps = 1_000;
    let mut e = red_limited(Limits {
        pps,
        ..Limits::default()
    });
    let red = host_frame(RED.index(), REMOTE, 60, 1);
    let mut oracle = Bucket::new(pps, pps_burst(pps));
    let (mut got, mut want) = (0, 0);
    // One frame every 0.6 ms (1667 pps offered) for two seconds.
    for k in 0..3334u64 {
        let now = SEC + k * 600_000;
        got += on_uplink(&send(&mut e, 0, &red, now), RED.index()).len() as u64;
        want += u64::from(oracle.take(now, 1));
    }
    assert_eq!(got, want, "admitted vs the 1000 pps contract");
}

// ---------------------------------------------------------------------------
// 2. Route limit
// ---------------------------------------------------------------------------

fn p4(s: &str) -> vrhost_fib::Prefix4 {
    s.parse().unwrap()
}

fn p6(s: &str) -> vrhost_fib::Prefix6 {
    s.parse().unwrap()
}

#[test]
fn route_limit_is_per_vr_per_family_and_names_the_router() {
    let base = Engine::new(&spec(Limits::default())).unwrap();
    let (base4, base6) = (base.vr(RED).routes4, base.vr(RED).routes6);
    assert_eq!(base.vr(BLUE).routes4, base4, "same topology");
    let limit = base4.max(base6) as u32 + 2;
    let mut e = Engine::new(&spec2(
        Limits {
            max_routes: limit,
            ..Limits::default()
        },
        Limits::default(),
    ))
    .unwrap();
    let via = RouteTarget::Via(IpAddr::V4(GW));
    // Fill red's IPv4 table to the limit.
    let room4 = limit as usize - base4;
    for i in 0..room4 {
        e.add_route(RED, p4(&format!("100.64.{i}.0/24")), via.clone())
            .unwrap();
    }
    assert_eq!(e.vr(RED).routes4, limit as usize);
    let full = p4("100.65.0.0/24");
    let err = e.add_route(RED, full, RouteTarget::Blackhole).unwrap_err();
    assert_eq!(
        err,
        BuildError::RouteLimit {
            router: "red".into(),
            limit
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("\"red\"") && msg.contains("max_routes"),
        "{msg}"
    );
    // Refused with a gateway target too, and the table did not change.
    assert!(matches!(
        e.add_route(RED, full, via.clone()),
        Err(BuildError::RouteLimit { .. })
    ));
    assert_eq!(e.vr(RED).routes4, limit as usize);
    // The refused prefix really is absent: network unreachable.
    let out = send(
        &mut e,
        0,
        &host_frame(RED.index(), Ipv4Addr::new(100, 65, 0, 9), 60, 1),
        SEC,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(iface(&e, RED.index(), 0).drop_count(DropReason::NoRoute), 1);

    // Replacing an existing prefix at the limit is allowed and takes effect.
    e.add_route(RED, p4("100.64.0.0/24"), RouteTarget::Blackhole)
        .unwrap();
    assert_eq!(e.vr(RED).routes4, limit as usize);
    let out = send(
        &mut e,
        0,
        &host_frame(RED.index(), Ipv4Addr::new(100, 64, 0, 9), 60, 2),
        SEC,
    );
    assert!(out.is_empty());
    assert_eq!(
        iface(&e, RED.index(), 0).drop_count(DropReason::Blackhole),
        1
    );

    // The limit is per family: IPv6 still has its own room.
    let via6 = RouteTarget::Via(IpAddr::V6(GW6));
    let room6 = limit as usize - base6;
    for i in 0..room6 {
        e.add_route(RED, p6(&format!("2001:db8:100:{i:x}::/64")), via6.clone())
            .unwrap();
    }
    assert_eq!(
        e.add_route(RED, p6("2001:db8:200::/64"), via6),
        Err(BuildError::RouteLimit {
            router: "red".into(),
            limit
        })
    );

    // Blue is unaffected: it takes the refused prefix and a thousand more.
    e.add_route(BLUE, full, RouteTarget::Via(IpAddr::V4(GW)))
        .unwrap();
    for i in 0..1000u32 {
        let p = format!("100.{}.{}.0/24", 66 + i / 256, i % 256);
        e.add_route(BLUE, p4(&p), RouteTarget::Blackhole).unwrap();
    }
    assert_eq!(e.vr(BLUE).routes4, base4 + 1001);
    assert_eq!(e.vr(RED).routes4, limit as usize);
    let out = send(
        &mut e,
        2,
        &host_frame(BLUE.index(), Ipv4Addr::new(100, 65, 0, 9), 60, 3),
        SEC,
    );
    assert_eq!(on_uplink(&out, BLUE.index()).len(), 1, "{out:?}");
    assert_eq!(out[0].eth().dst_addr(), BLUE_GW_MAC);

    // Removing one of red's routes makes room for exactly one.
    assert!(e.remove_route(RED, p4("100.64.1.0/24")));
    e.add_route(RED, full, via.clone()).unwrap();
    assert!(matches!(
        e.add_route(RED, p4("100.64.1.0/24"), via),
        Err(BuildError::RouteLimit { .. })
    ));
    let out = send(
        &mut e,
        0,
        &host_frame(RED.index(), Ipv4Addr::new(100, 65, 0, 9), 60, 4),
        SEC,
    );
    assert_eq!(on_uplink(&out, RED.index()).len(), 1, "{out:?}");
    assert_eq!(out[0].eth().dst_addr(), GW_MAC);
    assert!(!e.remove_route(RED, p4("100.64.1.0/24")), "gone");
}

#[test]
fn configured_routes_beyond_the_limit_fail_the_build_naming_the_router() {
    let base = Engine::new(&spec(Limits::default())).unwrap();
    let tight = Limits {
        max_routes: base.vr(RED).routes4 as u32 - 1,
        ..Limits::default()
    };
    for (red, blue, name) in [
        (tight, Limits::default(), "red"),
        (Limits::default(), tight, "blue"),
    ] {
        match Engine::new(&spec2(red, blue)) {
            Err(BuildError::RouteLimit { router, limit }) => {
                assert_eq!((router.as_str(), limit), (name, tight.max_routes))
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("{name}'s routes exceed its limit"),
        }
    }
}

/// A prefix configured twice is one route against the limit, and the later
/// target wins, as when the routes go in one by one.
#[test]
fn a_configured_prefix_given_twice_is_one_route_and_the_later_wins() {
    let base = Engine::new(&spec(Limits::default())).unwrap();
    let exact = Limits {
        max_routes: base.vr(RED).routes4 as u32,
        ..Limits::default()
    };
    let mut s = spec(exact);
    s.routers[RED.index()]
        .routes4
        .push(("203.0.113.0/24".parse().unwrap(), RouteTarget::Unreachable));
    let mut e = Engine::new(&s).unwrap();
    assert_eq!(e.vr(RED).routes4, exact.max_routes as usize);
    // 203.0.113.0/24 was a blackhole, then unreachable: an ICMP error comes back.
    let out = send(
        &mut e,
        0,
        &host_frame(RED.index(), Ipv4Addr::new(203, 0, 113, 9), 60, 1),
        SEC,
    );
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        iface(&e, RED.index(), 0).drop_count(DropReason::Blackhole),
        0
    );
}

// ---------------------------------------------------------------------------
// 3. Neighbor exhaustion
// ---------------------------------------------------------------------------

/// An ARP reply from `spa` on VR `vr`'s uplink.
fn uplink_arp_reply(vr: usize, sha: EthernetAddress, spa: Ipv4Addr) -> Vec<u8> {
    let mac = if vr == RED.index() {
        RED1_MAC
    } else {
        BLUE1_MAC
    };
    arp(Operation::Reply, sha, spa, RED1, mac, Some(uplink_vlan(vr)))
}

/// The target of an ARP request, if `o` is one.
fn arp_request_target(o: &Out) -> Option<Ipv4Addr> {
    if o.ethertype() != EtherType::Arp {
        return None;
    }
    let r = ArpRepr::parse(&ArpPacket::new_checked(o.l3()).ok()?).ok()?;
    (r.operation == Operation::Request).then_some(r.target_protocol_addr)
}

/// IPv4 ident of a forwarded frame (our sequence number).
fn ident(o: &Out) -> u16 {
    o.ipv4().ident()
}

#[test]
fn neighbor_flood_in_one_vr_leaves_the_other_resolving() {
    let (max_neighbors, arp_hold) = (16usize, 4usize);
    let mut s = spec2(
        Limits {
            max_neighbors: max_neighbors as u32,
            arp_hold: arp_hold as u32,
            ..Limits::default()
        },
        Limits {
            arp_hold: arp_hold as u32,
            ..Limits::default()
        },
    );
    // Both uplinks are a /16 with identical addresses; blue must ARP for its gateway.
    for r in &mut s.routers {
        r.interfaces[1].addrs4 = vec![(RED1, 16)];
    }
    s.routers[BLUE.index()].neighbors.clear();
    let mut e = Engine::new(&s).unwrap();
    // Red's static gateway entries (IPv4 and IPv6) take two of its slots.
    assert_eq!(e.vr(RED).neighbors, 2);
    assert_eq!(e.vr(BLUE).neighbors, 0);
    let dynamic = max_neighbors - 2;

    // 3000 random destinations in red's /16, 6000 packets: many repeats, so
    // hold queues fill as well as the table.
    let mut rng = StdRng::seed_from_u64(7);
    let pool: Vec<Ipv4Addr> = (0..3000)
        .map(|_| loop {
            let a = Ipv4Addr::new(10, 1, rng.gen(), rng.gen());
            if a.octets()[2..] != [0, 0] && a.octets()[2..] != [255, 255] && a != RED1 && a != GW {
                break a;
            }
        })
        .collect();
    let flood: Vec<Vec<u8>> = (0..6000)
        .map(|i| {
            host_frame(
                RED.index(),
                pool[rng.gen_range(0..pool.len())],
                60,
                i as u16,
            )
        })
        .collect();

    // The oracle: the first `dynamic` distinct destinations get entries and
    // one ARP request each; each entry holds `arp_hold` packets.
    let mut slots: HashMap<Ipv4Addr, usize> = HashMap::new();
    let (mut table_full, mut unresolved, mut red_held) = (0u64, 0u64, 0usize);
    let mut red_requests: Vec<Ipv4Addr> = Vec::new();
    let mut requested = 0;

    let t0 = 11 * SEC;
    let blue_frame = |seq: u16| host_frame(BLUE.index(), REMOTE, 60, seq);
    let mut blue_seq = 0u16;
    let mut blue_out: Vec<u16> = Vec::new();
    let mut blue_held = 0usize;
    for (b, chunk) in flood.chunks(200).enumerate() {
        let now = t0 + b as u64 * MS;
        let mut frames: Vec<(u16, Vec<u8>)> = Vec::new();
        for f in chunk {
            let dst = Ipv4Addr::new(f[30], f[31], f[32], f[33]);
            let n = slots.len();
            match slots.get_mut(&dst) {
                Some(c) => *c += 1,
                None if n < dynamic => {
                    slots.insert(dst, 1);
                    red_requests.push(dst);
                }
                None => {
                    table_full += 1;
                    frames.push((0, f.clone()));
                    continue;
                }
            }
            if slots[&dst] <= arp_hold {
                red_held += 1;
            } else {
                unresolved += 1;
            }
            frames.push((0, f.clone()));
        }
        // Blue, in the middle of red's flood: four packets while its own
        // gateway is unresolved, then the gateway's reply, then a steady trickle.
        let mut expect_blue_now: Vec<u16> = Vec::new();
        let mut expect_blue_request = false;
        match b {
            5 => {
                for i in 0..arp_hold {
                    frames.insert(100 + i, (2, blue_frame(blue_seq)));
                    blue_seq += 1;
                }
                blue_held = arp_hold;
                expect_blue_request = true;
            }
            15 => {
                frames.insert(50, (1, uplink_arp_reply(BLUE.index(), BLUE_GW_MAC, GW)));
                expect_blue_now.extend(0..arp_hold as u16);
                blue_held = 0;
            }
            16.. => {
                let mut at: Vec<usize> = (0..4).map(|_| rng.gen_range(0..=200)).collect();
                at.sort_unstable();
                for (i, p) in at.into_iter().enumerate() {
                    // Ascending positions keep blue's packets in sequence order.
                    frames.insert(p + i, (2, blue_frame(blue_seq)));
                    expect_blue_now.push(blue_seq);
                    blue_seq += 1;
                }
            }
            _ => {}
        }
        let refs: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, &f[..])).collect();
        let out = send_burst(&mut e, &refs, now);

        // Red: only ARP requests for new entries, on its own uplink, from its MAC.
        let red_out = on_uplink(&out, RED.index());
        let new_requests: Vec<Ipv4Addr> = red_out
            .iter()
            .filter_map(|o| arp_request_target(o))
            .collect();
        assert_eq!(
            new_requests.len(),
            red_out.len(),
            "red forwards nothing unresolved"
        );
        assert_eq!(
            new_requests,
            red_requests[requested..],
            "one request per new entry, burst {b}"
        );
        requested = red_requests.len();
        assert!(red_out.iter().all(|o| o.eth().src_addr() == RED1_MAC));
        // Blue: its ARP request, then every packet in order to its gateway.
        let blue_up = on_uplink(&out, BLUE.index());
        assert_eq!(
            blue_up.len() + red_out.len(),
            out.len(),
            "nothing elsewhere"
        );
        if expect_blue_request {
            assert_eq!(blue_up.len(), 1);
            assert_eq!(arp_request_target(blue_up[0]), Some(GW));
            assert_eq!(blue_up[0].eth().src_addr(), BLUE1_MAC);
        } else {
            let got: Vec<u16> = blue_up.iter().map(|o| ident(o)).collect();
            assert_eq!(got, expect_blue_now, "blue's packets at burst {b}");
            assert!(blue_up
                .iter()
                .all(|o| o.eth().dst_addr() == BLUE_GW_MAC && o.eth().src_addr() == BLUE1_MAC));
            blue_out.extend(got);
        }
        // Bounded: red's table and hold queues, and nothing of blue's lost.
        assert!(e.vr(RED).neighbors <= max_neighbors);
        assert_eq!(e.vr(RED).neighbors, 2 + slots.len());
        assert_eq!(e.held(), red_held + blue_held, "burst {b}");
        assert!(e.held() - blue_held <= max_neighbors * arp_hold);
    }
    assert_eq!(e.vr(RED).neighbors, max_neighbors);
    assert_eq!(e.vr(BLUE).neighbors, 1);
    let expect_held: usize = slots.values().map(|&c| c.min(arp_hold)).sum();
    assert_eq!(red_held, expect_held);
    assert_eq!(
        unresolved,
        slots
            .values()
            .map(|&c| c.saturating_sub(arp_hold) as u64)
            .sum::<u64>()
    );
    assert!(
        table_full > 5000,
        "the flood did overflow the table: {table_full}"
    );
    let r = iface(&e, RED.index(), 0);
    assert_eq!(
        drops(&r),
        vec![
            ("neighbor-unresolved", unresolved),
            ("neighbor-table-full", table_full)
        ]
    );
    assert_eq!(r.forwarded, 0);
    assert_eq!(
        iface(&e, RED.index(), 1).tx_packets,
        dynamic as u64,
        "one ARP request per entry"
    );
    assert_eq!(
        blue_out,
        (0..blue_seq).collect::<Vec<_>>(),
        "every blue packet, in order"
    );
    let b = iface(&e, BLUE.index(), 0);
    assert_eq!((b.forwarded, b.dropped()), (u64::from(blue_seq), 0));

    // Red's entries retry twice, then fail and drop what they held; blue
    // forwards all along.
    let mut retries = 0;
    for k in 1..=5u64 {
        let now = t0 + k * 1_100 * MS;
        let out = poll(&mut e, now);
        retries += on_uplink(&out, RED.index()).len();
        assert!(on_uplink(&out, BLUE.index()).is_empty());
        let out = send(&mut e, 2, &blue_frame(blue_seq), now + 1);
        assert_eq!(
            on_uplink(&out, BLUE.index())
                .iter()
                .map(|o| ident(o))
                .collect::<Vec<_>>(),
            vec![blue_seq]
        );
        blue_seq += 1;
    }
    assert_eq!(
        retries,
        2 * dynamic,
        "MAX_PROBES = 3 requests per entry in all"
    );
    assert_eq!(e.held(), 0);
    assert_eq!(
        iface(&e, RED.index(), 0).drop_count(DropReason::NeighborUnresolved),
        unresolved + red_held as u64
    );
    assert_eq!(
        e.vr(RED).neighbors,
        2,
        "failed entries collected, static ones kept"
    );
}

// ---------------------------------------------------------------------------
// 4. Punt flood
// ---------------------------------------------------------------------------

/// A TCP SYN to port 179 from the gateway to VR `vr`'s uplink address,
/// IPv4 or IPv6, with sequence number `seq`.
fn bgp_syn(vr: usize, seq: u32, v6: bool) -> Vec<u8> {
    let mac = if vr == RED.index() {
        RED1_MAC
    } else {
        BLUE1_MAC
    };
    let vlan = Some(uplink_vlan(vr));
    if v6 {
        let ip = ipv6(GW6, BLUE1_6, IpProtocol::Tcp, 64, &tcp_syn(179, seq));
        eth(mac, GW_MAC, vlan, EtherType::Ipv6, &ip)
    } else {
        let ip = ipv4(GW, RED1, IpProtocol::Tcp, 64, true, &tcp_syn(179, seq));
        eth(mac, GW_MAC, vlan, EtherType::Ipv4, &ip)
    }
}

/// Red's flood, for its own addresses: UDP and TCP over IPv4, TCP over IPv6,
/// limited broadcast.
fn red_punt_flood(i: usize) -> (u16, Vec<u8>) {
    match i % 4 {
        0 => (0, host_frame(RED.index(), RED0, 60, i as u16)),
        1 => (
            0,
            eth(
                RED0_MAC,
                HOST_MAC,
                None,
                EtherType::Ipv4,
                &ipv4(
                    HOST,
                    RED0,
                    IpProtocol::Tcp,
                    64,
                    true,
                    &tcp_syn(22, i as u32),
                ),
            ),
        ),
        2 => (
            0,
            eth(
                RED0_MAC,
                HOST_MAC,
                None,
                EtherType::Ipv6,
                &ipv6(HOST6, RED0_6, IpProtocol::Tcp, 64, &tcp_syn(179, i as u32)),
            ),
        ),
        _ => (
            1,
            eth(
                EthernetAddress::BROADCAST,
                GW_MAC,
                Some(100),
                EtherType::Ipv4,
                &ipv4(GW, Ipv4Addr::BROADCAST, IpProtocol::Udp, 1, false, &udp(8)),
            ),
        ),
    }
}

/// Red floods punts at 50 000/s against a punt rate of 100/s and a queue of
/// 32; blue, with the same limits, sends a BGP SYN every 10 ms, within them.
/// With `drain_red` red's control plane reads its queue every millisecond;
/// without, it is stuck and red's queue stays full.
fn punt_flood_case(drain_red: bool) {
    // The flood holds BGP segments, which the protected share would let
    // past the punt rate and queue (tests/over_share.rs): none here, so the
    // oracle is the punt rate and queue alone.
    let limits = Limits {
        punt_rate: 100,
        punt_queue: 32,
        protocol_rate: 0,
        ..Limits::default()
    };
    let mut e = Engine::new(&spec2(limits, limits)).unwrap();
    let mut oracle = Bucket::new(100, 100);
    let (mut queued, mut full, mut limited) = (Vec::new(), 0u64, 0u64);
    let (mut red_punted, mut red_drained) = (0u64, 0u64);
    let t0 = 13 * SEC;
    let mut blue_sent = 0u64;
    for k in 0..500u32 {
        let now = t0 + u64::from(k) * MS;
        let mut frames: Vec<(u16, Vec<u8>)> = (0..50)
            .map(|i| red_punt_flood(k as usize * 50 + i))
            .collect();
        for (_, f) in &frames {
            if queued.len() >= 32 {
                full += 1;
            } else if oracle.take(now, 1) {
                queued.push(f.clone());
                red_punted += 1;
            } else {
                limited += 1;
            }
        }
        let blue = (k % 10 == 0).then(|| bgp_syn(BLUE.index(), k, k % 20 == 10));
        if let Some(f) = &blue {
            frames.insert(25, (1, f.clone()));
            blue_sent += 1;
        }
        let refs: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, &f[..])).collect();
        let out = send_burst(&mut e, &refs, now);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(e.vr(RED).punt_len, queued.len(), "red's queue at step {k}");
        assert!(e.vr(RED).punt_len <= 32);
        // Blue's control plane gets this step's SYN at once, intact.
        let mut got = Vec::new();
        e.drain_punted(BLUE, |m| got.push(m.data().to_vec()));
        assert_eq!(got, Vec::from_iter(blue), "blue's punts at step {k}");
        if drain_red {
            let mut got = Vec::new();
            e.drain_punted(RED, |m| got.push(m.data().to_vec()));
            assert!(got == queued, "red's punts at step {k}, in order");
            red_drained += got.len() as u64;
            queued.clear();
        }
    }
    // A stuck control plane finds the first 32, in order, and nothing else.
    let mut got = Vec::new();
    e.drain_all_punted(|vr, m| {
        assert_eq!(vr, RED.index());
        got.push(m.data().to_vec());
    });
    assert!(got == queued);
    red_drained += got.len() as u64;
    assert_eq!(red_drained, red_punted);
    assert_eq!(e.punt_queued(), 0);
    let mut red = iface(&e, RED.index(), 0);
    red.add(&iface(&e, RED.index(), 1));
    assert_eq!(red.punted, red_punted);
    let mut want = vec![("punt-queue-full", full), ("punt-rate-limit", limited)];
    want.retain(|(_, n)| *n != 0);
    assert_eq!(drops(&red), want);
    if drain_red {
        // 100 at once, then one per 10 ms.
        assert_eq!(red_punted, 100 + 49);
        assert!(full > 0 && limited > 0, "both limits exercised");
    } else {
        assert_eq!((red_punted, limited), (32, 0));
    }
    let b = iface(&e, BLUE.index(), 1);
    assert_eq!(
        (b.punted, b.dropped()),
        (blue_sent, 0),
        "none of blue's lost"
    );
    assert_eq!(blue_sent, 50);
}

#[test]
fn punt_flood_in_one_vr_does_not_delay_the_others_control_plane() {
    punt_flood_case(true);
    punt_flood_case(false);
}
