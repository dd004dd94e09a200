//! Many VRs interleaved in every burst: nothing crosses between them.
//!
//! Twelve VRs with identical addresses share two ports, one VLAN each per
//! port (VR `i`: port 0 VLAN 10+i toward its host, port 1 VLAN 100+i toward
//! its gateway). Every burst mixes frames of random VRs and kinds, so it
//! takes the frame-by-frame path with one FIB batch across all the VRs'
//! tables, and every frame that leaves must leave on its own VR's VLANs:
//!
//! - forwarded frames go to the VR's own gateway MAC (02:bb::i) behind VLAN 100+i;
//! - ICMP errors and echo replies go to the VR's own host MAC (02:aa::i) behind VLAN 10+i;
//! - ARP requests ask for the VR's own addresses: 10.1.0.(50+i) behind VLAN 100+i,
//!   its host 10.0.0.2 behind VLAN 10+i.
//!
//! The same bursts also go through an engine without the fast path: the
//! same frames must leave, with the same counters. A burst of few VRs with
//! many frames each is split by interface and each part run as a burst of
//! its own: what leaves, and every counter, must be what the same frames
//! give one by one.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::{
    eth, fix_ipv4_checksum, gw_mac, host_mac, ipv4, send_burst, tagged_vrs, udp, Out, DOWN_MAC, SEC,
};
use proptest::prelude::*;
use vrhost_dataplane::{Engine, EngineSpec, VrId};
use vrhost_wire::arp::ArpPacket;
use vrhost_wire::ethernet::EtherType;
use vrhost_wire::ip::IpProtocol;

const VRS: usize = 12;

fn spec() -> EngineSpec {
    tagged_vrs(VRS)
}

/// A frame from VR `vr`'s host, of kind `kind`: 0 a forward, 1 TTL 1 (an
/// ICMP error), 2 a ping to the router, 3 to an unresolved host of the VR
/// (an ARP request), 4 an IPv6 forward, 5 UDP to the router's other
/// address (local).
fn frame(vr: usize, kind: u8, last: u8) -> (u16, Vec<u8>) {
    let src = Ipv4Addr::new(10, 0, 0, 2);
    let l3 = match kind % 6 {
        0 => ipv4(
            src,
            Ipv4Addr::new(192, 0, 2, last),
            IpProtocol::Udp,
            64,
            false,
            &udp(18),
        ),
        1 => ipv4(
            src,
            Ipv4Addr::new(192, 0, 2, last),
            IpProtocol::Udp,
            1,
            false,
            &udp(18),
        ),
        2 => ipv4(
            src,
            Ipv4Addr::new(10, 0, 0, 1),
            IpProtocol::Icmp,
            64,
            false,
            &echo(),
        ),
        3 => ipv4(
            src,
            Ipv4Addr::new(10, 1, 0, 50 + vr as u8),
            IpProtocol::Udp,
            64,
            false,
            &udp(18),
        ),
        4 => {
            let v6 = |net: u16, h: u16| Ipv6Addr::new(0x2001, 0xdb8, net, 0, 0, 0, 0, h);
            let p = common::ipv6(
                v6(0, 2),
                v6(0x99, u16::from(last)),
                IpProtocol::Udp,
                64,
                &udp(18),
            );
            return (
                0,
                eth(
                    DOWN_MAC,
                    host_mac(vr),
                    Some(10 + vr as u16),
                    EtherType::Ipv6,
                    &p,
                ),
            );
        }
        _ => ipv4(
            src,
            Ipv4Addr::new(10, 1, 0, 1),
            IpProtocol::Udp,
            64,
            false,
            &udp(18),
        ),
    };
    from_host(vr, &l3)
}

/// IPv4 packet `l3` from VR `vr`'s host, on port 0 in its VLAN.
fn from_host(vr: usize, l3: &[u8]) -> (u16, Vec<u8>) {
    let mut f = eth(
        DOWN_MAC,
        host_mac(vr),
        Some(10 + vr as u16),
        EtherType::Ipv4,
        l3,
    );
    fix_ipv4_checksum(&mut f, 18);
    (0, f)
}

/// An ICMP echo request.
fn echo() -> Vec<u8> {
    common::echo4(7, 1, b"ping")
}

/// The VR a frame that left belongs to, from its VLAN; asserts that what it
/// carries (MAC, ARP target) is that VR's.
fn owner(o: &Out) -> Result<usize, TestCaseError> {
    let vlan = o
        .vlan()
        .ok_or_else(|| TestCaseError::fail("untagged frame left"))?;
    let (vr, up) = match vlan {
        10..=21 => (usize::from(vlan - 10), false),
        100..=111 => (usize::from(vlan - 100), true),
        _ => return Err(TestCaseError::fail(format!("VLAN {vlan}"))),
    };
    prop_assert_eq!(o.port, u16::from(up));
    let dst = o.eth().dst_addr();
    if dst.is_broadcast() {
        // ARP requests: for the VR's own unresolved host on the uplink,
        // for its host 10.0.0.2 (replies and errors go there) downstream.
        let arp =
            ArpPacket::new_checked(o.l3()).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let want = if up {
            Ipv4Addr::new(10, 1, 0, 50 + vr as u8)
        } else {
            Ipv4Addr::new(10, 0, 0, 2)
        };
        prop_assert_eq!(arp.target_protocol_addr(), &want.octets()[..]);
    } else if dst.is_multicast() {
        // Neighbor Solicitations: nothing here to attribute beyond the VLAN.
    } else if up {
        prop_assert_eq!(dst, gw_mac(vr));
    } else {
        prop_assert_eq!(dst, host_mac(vr));
    }
    Ok(vr)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn nothing_crosses_between_many_interleaved_vrs(
        bursts in proptest::collection::vec(
            proptest::collection::vec((0..VRS, 0u8..6, 1u8..250), 2..64),
            1..4,
        ),
    ) {
        let mut fast = Engine::new(&spec()).expect("spec builds");
        let mut slow = Engine::new(&spec()).expect("spec builds");
        slow.set_fast_path(false);
        for (k, burst) in bursts.iter().enumerate() {
            let frames: Vec<_> = burst.iter().map(|&(vr, kind, last)| frame(vr, kind, last)).collect();
            let refs: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, f.as_slice())).collect();
            let now = (k as u64 + 1) * SEC;
            let a = send_burst(&mut fast, &refs, now);
            let b = send_burst(&mut slow, &refs, now);
            let sent = |o: &[Out]| o.iter().map(|o| (o.port, o.frame.clone())).collect::<Vec<_>>();
            prop_assert_eq!(sent(&a), sent(&b));
            // Timers run between bursts (ARP retransmits), so a VR may send
            // for a frame of an earlier burst, never for none.
            for o in &a {
                let vr = owner(o)?;
                let got = bursts[..=k].iter().flatten().any(|&(v, _, _)| v == vr);
                prop_assert!(got, "VR {} sent but got no frame", vr);
            }
            // Forwards (IPv4 and IPv6) each left, to their own VR's gateway.
            let forwards = burst.iter().filter(|&&(_, kind, _)| kind % 6 == 0 || kind % 6 == 4).count();
            let to_gw = a.iter().filter(|o| o.port == 1 && !o.eth().dst_addr().is_multicast()).count();
            prop_assert_eq!(to_gw, forwards);
        }
        for vr in 0..VRS {
            prop_assert_eq!(fast.vr_counters(VrId::new(vr)).forwarded, slow.vr_counters(VrId::new(vr)).forwarded);
        }
    }
}

/// Every counter of every interface and port of `e`.
fn counters(e: &Engine) -> Vec<vrhost_dataplane::Counters> {
    let mut c: Vec<_> = (0..VRS).map(|vr| e.vr_counters(VrId::new(vr))).collect();
    c.extend((0..2).map(|p| e.port_counters(vrhost_dataplane::PortId::new(p))));
    // And each interface's own: what came in on one and left by the other
    // is counted on the right one.
    c.extend(
        (0..VRS)
            .flat_map(|vr| e.vr(VrId::new(vr)).ifaces)
            .map(|i| e.iface_counters(i)),
    );
    c
}

/// Frames of a few VRs, each VR's many: the burst is split by interface
/// (at most a quarter as many interfaces as frames), every part runs as a
/// burst of its own, and the result is that of the frames one by one.
/// What left, per port and VLAN, in order: each VR's frames must leave in
/// the order they came, whatever order the VRs take turns in.
fn per_vlan(o: &[Out]) -> std::collections::BTreeMap<(u16, Option<u16>), Vec<Vec<u8>>> {
    let mut by: std::collections::BTreeMap<_, Vec<Vec<u8>>> = Default::default();
    for o in o {
        by.entry((o.port, o.vlan()))
            .or_default()
            .push(o.frame.clone());
    }
    by
}

/// `frames` as one burst through one engine and one by one through
/// another: what leaves and the counters.
fn split_and_one_by_one(frames: &[(u16, Vec<u8>)]) -> ((Vec<Out>, Engine), (Vec<Out>, Engine)) {
    let mut split = Engine::new(&spec()).expect("spec builds");
    let mut one_by_one = Engine::new(&spec()).expect("spec builds");
    let refs: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, f.as_slice())).collect();
    let a = send_burst(&mut split, &refs, SEC);
    let mut b = Vec::new();
    for r in &refs {
        b.extend(send_burst(&mut one_by_one, std::slice::from_ref(r), SEC));
    }
    ((a, split), (b, one_by_one))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Bursts of 8 to 64 frames of 1 to 4 VRs, every kind: most are split
    /// (at least 4 frames a VR on average), and change nothing.
    #[test]
    fn split_bursts_send_and_count_what_the_frames_one_by_one_do(
        vrs in proptest::collection::vec(0..VRS, 1..=4),
        picks in proptest::collection::vec((any::<usize>(), 0u8..6, 1u8..250), 8..64),
    ) {
        let frames: Vec<_> = picks
            .iter()
            .map(|&(v, kind, last)| frame(vrs[v % vrs.len()], kind, last))
            .collect();
        let ((a, split), (b, one_by_one)) = split_and_one_by_one(&frames);
        prop_assert_eq!(per_vlan(&a), per_vlan(&b));
        prop_assert_eq!(counters(&split), counters(&one_by_one));
    }
}

#[test]
fn a_burst_of_few_interfaces_is_split_and_changes_nothing() {
    // 48 frames of 4 VRs, interleaved, with some of every kind.
    let frames: Vec<_> = (0..48usize)
        .map(|i| frame(i % 4 * 3, [0, 0, 0, 4, 1, 2, 3, 5][i % 8], i as u8 + 1))
        .collect();
    let ((a, split), (b, one_by_one)) = split_and_one_by_one(&frames);
    assert_eq!(per_vlan(&a), per_vlan(&b));
    assert!(
        a.len() >= 24,
        "forwards, errors, replies and ARP left: {}",
        a.len()
    );
    assert_eq!(counters(&split), counters(&one_by_one));
    let fast: u64 = (0..VRS)
        .map(|vr| split.vr_counters(VrId::new(vr)).fast_path)
        .sum();
    assert_eq!(fast, 24, "the IPv4 and IPv6 forwards took the fast path");
}

/// A frame no interface takes (VLAN 999 on port 0): appended to a burst,
/// it keeps the burst off the pass for bursts of many VRs.
fn stranger() -> (u16, Vec<u8>) {
    let l3 = ipv4(
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(192, 0, 2, 1),
        IpProtocol::Udp,
        64,
        false,
        &udp(18),
    );
    let mut f = eth(DOWN_MAC, host_mac(0), Some(999), EtherType::Ipv4, &l3);
    fix_ipv4_checksum(&mut f, 18);
    (0, f)
}

/// `c` with what one stranger per burst adds on port 0 cleared: its
/// receive counts and its `no-interface` drop.
fn without_strangers(mut c: Vec<vrhost_dataplane::Counters>) -> Vec<vrhost_dataplane::Counters> {
    let port0 = VRS;
    c[port0].rx_packets = 0;
    c[port0].rx_bytes = 0;
    c[port0].drops[vrhost_dataplane::DropReason::NoInterface as usize] = 0;
    c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// Bursts of one family whose frames are each any VR's, in any order
    /// (the pass for bursts of many VRs: per-frame demux, one FIB batch,
    /// the fast path's frames queued as a block, counters written per
    /// frame), against the same bursts sent down another path by one more
    /// frame no interface takes (frame by frame, or split by interface):
    /// the same frames leave, in the same order on each VLAN, and every
    /// counter but the stranger's agrees.
    #[test]
    fn bursts_of_many_vrs_agree_with_frame_by_frame_demux(
        bursts in proptest::collection::vec(
            proptest::collection::vec((0..VRS, 0u8..5, 1u8..250), 2..64),
            1..4,
        ),
        v6 in any::<bool>(),
        fast_path in any::<bool>(),
    ) {
        let mut many = Engine::new(&spec()).expect("spec builds");
        let mut mixed = Engine::new(&spec()).expect("spec builds");
        many.set_fast_path(fast_path);
        mixed.set_fast_path(fast_path);
        for (k, burst) in bursts.iter().enumerate() {
            // One family: IPv6 forwards, or the IPv4 kinds (forward, TTL
            // 1, ping, unresolved host, local UDP).
            let frames: Vec<_> = burst
                .iter()
                .map(|&(vr, kind, last)| frame(vr, if v6 { 4 } else { [0, 1, 2, 3, 5][usize::from(kind)] }, last))
                .collect();
            let mut with_stranger = frames.clone();
            with_stranger.push(stranger());
            let refs = |f: &[(u16, Vec<u8>)]| f.iter().map(|(p, f)| (*p, f.to_vec())).collect::<Vec<_>>();
            let (a_in, b_in) = (refs(&frames), refs(&with_stranger));
            let a_refs: Vec<(u16, &[u8])> = a_in.iter().map(|(p, f)| (*p, f.as_slice())).collect();
            let b_refs: Vec<(u16, &[u8])> = b_in.iter().map(|(p, f)| (*p, f.as_slice())).collect();
            let now = (k as u64 + 1) * SEC;
            let a = send_burst(&mut many, &a_refs, now);
            let b = send_burst(&mut mixed, &b_refs, now);
            // In order per VLAN: with the stranger, a burst of few VRs is
            // split by interface, which may reorder frames of different VRs.
            prop_assert_eq!(per_vlan(&a), per_vlan(&b));
            for o in &a {
                owner(o)?;
            }
        }
        prop_assert_eq!(without_strangers(counters(&many)), without_strangers(counters(&mixed)));
        let fast: u64 = (0..VRS).map(|vr| many.vr_counters(VrId::new(vr)).fast_path).sum();
        let forwards = bursts.iter().flatten().filter(|&&(_, kind, _)| v6 || kind == 0).count() as u64;
        if fast_path {
            prop_assert_eq!(fast, forwards, "every plain forward took the fast path");
        }
    }
}

/// A VR with a rate ceiling in a burst of many VRs: its frames pass its
/// ceiling first (the pass for many VRs leaves such a burst to the
/// frame-by-frame path), the others all leave.
#[test]
fn a_rate_ceiling_holds_in_a_burst_of_many_vrs() {
    let mut spec = spec();
    // 1,000 frames a second: a bucket of 64 (never less than one burst).
    spec.routers[0].limits.pps = 1_000;
    let mut e = Engine::new(&spec).expect("spec builds");
    let (mut ours, mut others) = (0u64, 0u64);
    for k in 0..3u64 {
        let frames: Vec<_> = (0..60usize)
            .map(|i| {
                let vr = if i % 2 == 0 { 0 } else { 1 + i % (VRS - 1) };
                frame(vr, 0, i as u8 + 1)
            })
            .collect();
        ours += 30;
        others += 30;
        let refs: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, f.as_slice())).collect();
        // All three bursts within one millisecond: no token is earned.
        send_burst(&mut e, &refs, SEC + k);
    }
    let c = e.vr_counters(VrId::new(0));
    assert_eq!(c.forwarded, 64, "the bucket's 64 frames");
    assert_eq!(
        c.drops[vrhost_dataplane::DropReason::RateCeiling as usize],
        ours - 64
    );
    let rest: u64 = (1..VRS)
        .map(|vr| e.vr_counters(VrId::new(vr)).forwarded)
        .sum();
    assert_eq!(rest, others, "every other VR's frame left");
}

static TICKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A clock that moves 10 ticks per read: the run is the same every time.
fn clock() -> u64 {
    TICKS.fetch_add(10, std::sync::atomic::Ordering::Relaxed)
}

/// The fair share's accounting in bursts of many VRs: the fast path's
/// frames are counted per VR and charged, when a round ends, what such a
/// frame cost on average, so every VR pays per frame. VR 0 sends 56 frames
/// of every 64, VRs 1, 2 and 3 send 3, 3 and 2, interleaved in every burst.
#[test]
fn bursts_of_many_vrs_are_charged_per_frame() {
    let mut e = Engine::new(&spec()).expect("spec builds");
    // 1000 ticks per 1 ms round; a burst of 8 or more is full. Costs are
    // measured, shares not enforced: every frame is sent.
    e.set_clock(clock, 1_000_000, 8);
    e.set_fair_share(false);
    let rounds = 200u64;
    for i in 0..rounds {
        let frames: Vec<_> = (0..64usize)
            .map(|k| frame(if k % 8 == 7 { 1 + k / 8 % 3 } else { 0 }, 0, k as u8 + 1))
            .collect();
        let refs: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, f.as_slice())).collect();
        send_burst(&mut e, &refs, SEC + i * 1000);
    }
    for vr in 0..4 {
        let c = e.vr_counters(VrId::new(vr));
        assert_eq!(
            c.fast_path, c.rx_packets,
            "VR {vr}: every frame by the fast path"
        );
    }
    let charged = e.fair().charged();
    let frames = [56u64, 3, 3, 2];
    let total: u64 = charged[..4].iter().sum();
    assert!(total > 0, "the bursts were timed");
    // Each VR's share of the ticks is its share of the frames, to within
    // 1/64 of the total and a few ticks (each round's settlement rounds
    // down; the round still open is charged at the last round's cost).
    // Equal shares of each burst's ticks, the remainder a tick each to the
    // first frames, charged VRs 1, 2 and 3 200, 0 and 0 of 2,000 here.
    for (vr, &n) in frames.iter().enumerate() {
        let want = total * n / 64;
        let slack = total / 64 + 8;
        assert!(
            charged[vr].abs_diff(want) <= slack,
            "VR {vr}: {} ticks of {total}, want about {want}",
            charged[vr]
        );
    }
    assert_eq!(
        charged[4..].iter().sum::<u64>(),
        0,
        "silent VRs pay nothing"
    );
}

static RECEIVE_TICKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// [`clock`]'s twin for one test alone, so that its reads are not shared
/// with another test running at the same time.
fn receive_clock() -> u64 {
    RECEIVE_TICKS.fetch_add(10, std::sync::atomic::Ordering::Relaxed)
}

/// A 1,218-byte UDP frame from VR `vr`'s host to 192.0.2.`k + 1`.
fn long_frame(vr: usize, k: usize) -> (u16, Vec<u8>) {
    let l3 = ipv4(
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(192, 0, 2, k as u8 + 1),
        IpProtocol::Udp,
        64,
        false,
        &udp(1172),
    );
    from_host(vr, &l3)
}

/// What each VR is charged after `bursts` runs of `frames` through an
/// engine that measures (and does not enforce) shares on a deterministic
/// clock, each burst's receive said to have begun `receive` ticks before
/// the worker looked at it, and each turn's send to have taken `send`.
fn charged(frames: &[(u16, Vec<u8>)], bursts: u64, receive: u64, send: u64) -> Vec<u64> {
    // The runs share the clock: one at a time, so each is the same.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut e = Engine::new(&spec()).expect("spec builds");
    RECEIVE_TICKS.store(1 << 40, std::sync::atomic::Ordering::Relaxed);
    e.set_clock(receive_clock, 1_000_000, 8);
    e.set_fair_share(false);
    for i in 0..bursts {
        if receive > 0 {
            // The burst's first clock reading will be what the clock reads
            // now: the receive began `receive` ticks before.
            let now = RECEIVE_TICKS.load(std::sync::atomic::Ordering::Relaxed);
            e.note_receive(now - receive);
        }
        let burst: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, &f[..])).collect();
        let out = send_burst(&mut e, &burst, SEC + i * 1000);
        assert_eq!(out.len(), frames.len(), "every frame forwarded");
        if send > 0 {
            // Sending took `send` ticks from the burst's last reading.
            let now = RECEIVE_TICKS.load(std::sync::atomic::Ordering::Relaxed);
            e.end_turn(now - 10 + send, true);
        }
    }
    e.fair().charged()
}

/// What the driver takes to read a burst and to send what it forwarded
/// (its copies and system calls) is charged to the frames' VRs by bytes,
/// in a burst of many VRs: a frame longer than 512 bytes pays its own
/// share, and the rest is shared with the fast path's cost, per frame.
/// VR 0 sends 56 frames of 1,218 bytes in every burst of 64, VRs 1, 2 and
/// 3 send 3, 3 and 2 of 64; the same bursts run through engines on the
/// same deterministic clock, one told that each burst's reading began
/// 100,000 ticks before the worker looked at its frames, another that
/// sending it took 100,000 ticks: what each VR was charged more than with
/// neither is its share.
#[test]
fn what_reading_and_sending_take_is_charged_to_the_vrs_by_bytes() {
    const TICKS: u64 = 100_000;
    const BURSTS: u64 = 200;
    let frames: Vec<_> = (0..64usize)
        .map(|k| match k % 8 {
            7 => frame(1 + k / 8 % 3, 0, k as u8 + 1),
            _ => long_frame(0, k),
        })
        .collect();
    let (big_len, small_len) = (frames[0].1.len() as u64, frames[7].1.len() as u64);
    assert_eq!((big_len, small_len), (1218, 64));
    let bytes = 56 * big_len + 8 * small_len;
    // The long frames their share by bytes (rounded down); what is left is
    // shared per frame by all 64, with the fast path's cost.
    let own = 56 * big_len * TICKS / bytes;
    let pool = TICKS - own;
    let want = [
        BURSTS * (own + pool * 56 / 64),
        BURSTS * pool * 3 / 64,
        BURSTS * pool * 3 / 64,
        BURSTS * pool * 2 / 64,
    ];
    let neither = charged(&frames, BURSTS, 0, 0);
    let runs = [
        ("reading", charged(&frames, BURSTS, TICKS, 0)),
        ("sending", charged(&frames, BURSTS, 0, TICKS)),
    ];
    for (what, charged) in runs {
        let extra: Vec<u64> = (0..4).map(|vr| charged[vr] - neither[vr]).collect();
        for vr in 0..4 {
            assert!(
                extra[vr].abs_diff(want[vr]) <= want[vr] / 100 + 200,
                "{what}: VR {vr} charged {} more, want about {}",
                extra[vr],
                want[vr]
            );
        }
        // All of it, to a tick a round.
        let total: u64 = extra.iter().sum();
        assert!(
            total.abs_diff(BURSTS * TICKS) <= 1000,
            "{what}: charged {total} in all"
        );
        assert_eq!(charged[4..], neither[4..], "silent VRs pay nothing");
    }
}

/// The same in a burst that takes the frame-by-frame path (seven frames,
/// one of them IPv6, too few to split): every frame is charged its own
/// share by bytes, short ones too, of both the reading and the sending.
#[test]
fn a_mixed_bursts_reading_and_sending_are_charged_by_bytes() {
    const TICKS: u64 = 100_000;
    const BURSTS: u64 = 200;
    let frames = [
        long_frame(0, 1),
        long_frame(0, 2),
        long_frame(0, 3),
        long_frame(0, 4),
        frame(1, 4, 5),
        frame(2, 0, 6),
        frame(3, 0, 7),
    ];
    let bytes: u64 = frames.iter().map(|(_, f)| f.len() as u64).sum();
    let share = |k: usize| TICKS * frames[k].1.len() as u64 / bytes;
    let want = [
        BURSTS * (0..4).map(share).sum::<u64>(),
        BURSTS * share(4),
        BURSTS * share(5),
        BURSTS * share(6),
    ];
    assert!(want[1] > want[2], "the IPv6 frame is the longer short one");
    let neither = charged(&frames, BURSTS, 0, 0);
    let runs = [
        ("reading", charged(&frames, BURSTS, TICKS, 0)),
        ("sending", charged(&frames, BURSTS, 0, TICKS)),
    ];
    for (what, charged) in runs {
        for vr in 0..4 {
            let extra = charged[vr] - neither[vr];
            assert!(
                extra.abs_diff(want[vr]) <= BURSTS,
                "{what}: VR {vr} charged {extra} more, want {}",
                want[vr]
            );
        }
        assert_eq!(charged[4..], neither[4..], "silent VRs pay nothing");
    }
}
