//! With a clock, a VR that sends past its share of a saturated worker has
//! frames dropped as `over_share`, and those drops are counted on its own
//! ingress interface, whichever way the burst came in.
//!
//! ```text
//!   port 0 ── red0 (iface 0) ── red   ──▶ red1 (port 1, VLAN 100) ──▶ gw
//!   port 2 ── blue0 (iface 2) ── blue ──▶ blue1 (port 1, VLAN 200) ──▶ gw
//! ```
//!
//! The clock is a counter that moves 10 ticks per read, so the run is the
//! same every time.

mod common;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use common::{send_burst, udp4_frame, BLUE0_MAC, RED0_MAC, REMOTE, SEC};
use vrhost_dataplane::{DropReason, Engine, IfaceId, Limits, VrId};
use vrhost_wire::ethernet::EthernetAddress;

static TICKS: AtomicU64 = AtomicU64::new(0);

/// The tests share the clock: one at a time, so each run is the same.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn clock() -> u64 {
    TICKS.fetch_add(10, Relaxed)
}

/// A UDP frame from the host to a remote address, sent to MAC `to`.
fn frame(to: EthernetAddress) -> Vec<u8> {
    let mut f = udp4_frame(REMOTE, 64, false, 18);
    f[..6].copy_from_slice(&to.0);
    f
}

/// Blue floods (four full bursts for each of red's), red stays light. Every
/// burst is plain when `stranger` is false; with it, each burst also holds a
/// frame to another MAC, so it takes the frame-by-frame path.
fn run(stranger: bool) -> Engine {
    let mut e = Engine::new(&common::spec(Limits::default())).expect("spec builds");
    // 1000 ticks per 1 ms round; a burst of 8 or more is full.
    e.set_clock(clock, 1_000_000, 8);
    let red = frame(RED0_MAC);
    let blue = frame(BLUE0_MAC);
    let other = frame(EthernetAddress([0x02, 0xee, 0, 0, 0, 1]));
    let burst = |f: &[u8], port: u16| -> Vec<(u16, Vec<u8>)> {
        let mut v: Vec<(u16, Vec<u8>)> = (0..16).map(|_| (port, f.to_vec())).collect();
        if stranger {
            v.push((port, other.clone()));
        }
        v
    };
    let send = |e: &mut Engine, frames: Vec<(u16, Vec<u8>)>, now: u64| {
        let refs: Vec<(u16, &[u8])> = frames.iter().map(|(p, f)| (*p, f.as_slice())).collect();
        send_burst(e, &refs, now);
    };
    for i in 0..400u64 {
        let now = SEC + i * 1000;
        for _ in 0..4 {
            send(&mut e, burst(&blue, 2), now);
        }
        send(&mut e, burst(&red, 0), now);
    }
    e
}

#[test]
fn over_share_drops_count_on_the_flooding_vrs_interface() {
    let _one = one_at_a_time();
    for stranger in [false, true] {
        let e = run(stranger);
        let red0 = e
            .iface_counters(IfaceId::new(0))
            .drop_count(DropReason::OverShare);
        let blue0 = e
            .iface_counters(IfaceId::new(2))
            .drop_count(DropReason::OverShare);
        assert!(blue0 > 0, "blue was policed (stranger frames: {stranger})");
        assert_eq!(
            red0, 0,
            "red's interface counts none of blue's drops (stranger frames: {stranger})"
        );
        assert_eq!(
            e.vr_counters(VrId::new(1))
                .drop_count(DropReason::OverShare),
            blue0
        );
        // Every blue frame received was either forwarded or dropped over share.
        let b = e.iface_counters(IfaceId::new(2));
        assert_eq!(b.forwarded + blue0, b.rx_packets);
    }
}

/// Blue floods as in [`run`], and the first of each round's four bursts
/// also carries a BFD packet and a BGP segment for blue's own address, as
/// its control plane's peers would send. Returns the engine, how many of
/// those reached blue's punt queue, and how many were sent.
fn flood_with_protocols(protocol_rate: u32, stranger: bool) -> (Engine, u64, u64) {
    use common::{eth, ipv4, tcp_syn, HOST, HOST_MAC, RED0};
    use vrhost_wire::ethernet::EtherType;
    use vrhost_wire::ip::IpProtocol;
    let limits = Limits {
        protocol_rate,
        ..Limits::default()
    };
    let mut e = Engine::new(&common::spec(limits)).expect("spec builds");
    e.set_clock(clock, 1_000_000, 8);
    let blue = frame(BLUE0_MAC);
    let red = frame(RED0_MAC);
    let other = frame(EthernetAddress([0x02, 0xee, 0, 0, 0, 1]));
    // Blue's interface has red's addresses (10.0.0.1).
    let mut bfd = vec![0u8; 8 + 24];
    bfd[0..2].copy_from_slice(&49152u16.to_be_bytes());
    bfd[2..4].copy_from_slice(&3784u16.to_be_bytes());
    bfd[4..6].copy_from_slice(&32u16.to_be_bytes());
    let to_blue = |proto, l4: &[u8]| {
        eth(
            BLUE0_MAC,
            HOST_MAC,
            None,
            EtherType::Ipv4,
            &ipv4(HOST, RED0, proto, 255, true, l4),
        )
    };
    let bfd = to_blue(IpProtocol::Udp, &bfd);
    let bgp = to_blue(IpProtocol::Tcp, &tcp_syn(179, 1));
    let (mut punted, mut sent) = (0u64, 0u64);
    for i in 0..400u64 {
        let now = SEC + i * 1000;
        for k in 0..4 {
            let mut frames: Vec<(u16, &[u8])> = (0..16).map(|_| (2, blue.as_slice())).collect();
            if k == 0 {
                frames.insert(5, (2, bfd.as_slice()));
                frames.push((2, bgp.as_slice()));
                sent += 2;
            }
            if stranger {
                frames.push((2, other.as_slice()));
            }
            send_burst(&mut e, &frames, now);
        }
        let red: Vec<(u16, &[u8])> = (0..16).map(|_| (0, red.as_slice())).collect();
        send_burst(&mut e, &red, now);
        e.drain_punted(VrId::new(1), |_| punted += 1);
    }
    (e, punted, sent)
}

#[test]
fn control_protocols_pass_a_flooding_vrs_share() {
    let _one = one_at_a_time();
    for stranger in [false, true] {
        let (e, punted, sent) = flood_with_protocols(2_000, stranger);
        let c = e.iface_counters(IfaceId::new(2));
        assert!(
            c.drop_count(DropReason::OverShare) > 1_000,
            "blue was policed hard (stranger frames: {stranger})"
        );
        assert_eq!(
            punted, sent,
            "every BFD and BGP frame reached the control plane (stranger frames: {stranger})"
        );
        assert_eq!(c.punted, sent);
        // Without a protected share, the same flood takes them too.
        let (e, punted, sent) = flood_with_protocols(0, stranger);
        let lost = e
            .iface_counters(IfaceId::new(2))
            .drop_count(DropReason::OverShare);
        assert!(
            lost > 0 && punted < sent,
            "{punted} of {sent} punted (stranger frames: {stranger})"
        );
    }
}

#[test]
fn the_protected_share_is_bounded_by_its_rate() {
    let _one = one_at_a_time();
    // 100 a second: the bucket's burst of 100, then next to none (the run
    // lasts 0.4 ms of the packets' time).
    let (e, punted, sent) = flood_with_protocols(100, false);
    assert_eq!(sent, 800);
    // At least the bucket's 100 tokens' worth passed (a protected frame
    // takes one at the share and one at the punt), and not all: the rest
    // were policed with the flood.
    assert!((50..sent).contains(&punted), "{punted} of {sent} punted");
    assert!(
        e.iface_counters(IfaceId::new(2))
            .drop_count(DropReason::OverShare)
            > 0
    );
}

#[test]
fn control_protocols_pass_a_punt_flood() {
    use common::{eth, ipv4, tcp_syn, HOST, HOST_MAC, RED0};
    use vrhost_wire::ethernet::EtherType;
    use vrhost_wire::ip::IpProtocol;
    // No clock: no fair share; the punt rate and queue are what a flood of
    // SSH SYNs to red's address exhausts.
    let limits = Limits {
        punt_rate: 100,
        punt_queue: 32,
        ..Limits::default()
    };
    let mut e = Engine::new(&common::spec(limits)).expect("spec builds");
    let to_red = |proto, l4: &[u8]| {
        eth(
            RED0_MAC,
            HOST_MAC,
            None,
            EtherType::Ipv4,
            &ipv4(HOST, RED0, proto, 255, true, l4),
        )
    };
    let ssh = to_red(IpProtocol::Tcp, &tcp_syn(22, 1));
    let mut bfd = vec![0u8; 8 + 24];
    bfd[0..2].copy_from_slice(&49152u16.to_be_bytes());
    bfd[2..4].copy_from_slice(&3784u16.to_be_bytes());
    bfd[4..6].copy_from_slice(&32u16.to_be_bytes());
    let bfd = to_red(IpProtocol::Udp, &bfd);
    let red = VrId::new(0);
    let (mut bfd_punted, mut ssh_punted) = (0u64, 0u64);
    // 1,000 steps of a millisecond: 50 SYNs and one BFD packet each, the
    // control plane reading the queue every step. Then 400 more steps with
    // the control plane stuck: the queue fills.
    for k in 0..1_400u64 {
        let mut frames: Vec<(u16, &[u8])> = (0..50).map(|_| (0, ssh.as_slice())).collect();
        frames.insert(25, (0, bfd.as_slice()));
        send_burst(&mut e, &frames, SEC + k * 1_000_000);
        if k < 1_000 {
            e.drain_punted(red, |m| {
                if m.data().len() == bfd.len() && m.data()[36..38] == 3784u16.to_be_bytes() {
                    bfd_punted += 1;
                } else {
                    ssh_punted += 1;
                }
            });
        }
    }
    assert_eq!(bfd_punted, 1_000, "every BFD packet passed the punt rate");
    assert!(
        ssh_punted <= 100 + 100 + 1,
        "the SYNs were held to the punt rate: {ssh_punted} in one second"
    );
    let c = e.iface_counters(IfaceId::new(0));
    assert!(c.drop_count(DropReason::PuntRateLimit) > 40_000);
    // The stuck control plane: the queue's 32 places taken, then BFD
    // packets in the 64 kept for them, and nothing more.
    assert_eq!(e.vr(red).punt_len, 32 + 64);
    assert!(c.drop_count(DropReason::PuntQueueFull) > 0);
    let mut last = Vec::new();
    e.drain_punted(red, |m| last.push(m.data().to_vec()));
    assert!(
        last[32..].iter().all(|f| *f == bfd),
        "the kept places hold BFD only"
    );
}

/// Nanoseconds since the first read: a real clock, so that what a frame
/// costs is what it is charged.
fn wall_clock() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// A burst that holds both VRs' frames, each VR's on its own port, is split
/// and each part run as a burst of its own. Red's part goes by the fast
/// path; blue's are echo requests of 1,400 bytes to its own address, which
/// the full stages answer (two checksums and a reply each). What blue's
/// frames cost in the stages is charged to blue, not shared out over both
/// parts' frames: blue is charged several times what red is (4.2× here;
/// 1.0× when the split shared all of it out by frames).
#[test]
fn a_split_bursts_full_stages_are_charged_to_their_own_vr() {
    let _one = one_at_a_time();
    let mut e = Engine::new(&common::spec(Limits::default())).expect("spec builds");
    e.set_clock(wall_clock, 1_000_000_000, 8);
    e.set_fair_share(false);
    // Blue learns the host's MAC, so that its replies leave at once.
    let arp = common::arp(
        vrhost_wire::arp::Operation::Request,
        common::HOST_MAC,
        common::HOST,
        common::RED0,
        EthernetAddress::BROADCAST,
        None,
    );
    send_burst(&mut e, &[(2, &arp)], SEC);
    let red = frame(RED0_MAC);
    let echo = common::ipv4(
        common::HOST,
        common::RED0,
        vrhost_wire::ip::IpProtocol::Icmp,
        64,
        false,
        &common::echo4(7, 1, &[0x5a; 1400]),
    );
    let blue = common::eth(
        BLUE0_MAC,
        common::HOST_MAC,
        None,
        vrhost_wire::ethernet::EtherType::Ipv4,
        &echo,
    );
    let frames: Vec<(u16, &[u8])> = (0..16)
        .map(|_| (0, red.as_slice()))
        .chain((0..16).map(|_| (2, blue.as_slice())))
        .collect();
    for i in 0..2000u64 {
        send_burst(&mut e, &frames, 2 * SEC + i * 1000);
    }
    let sent = e.iface_counters(IfaceId::new(2)).tx_packets;
    assert_eq!(sent, 2000 * 16 + 1, "every echo answered, and the ARP");
    assert_eq!(e.iface_counters(IfaceId::new(0)).fast_path, 2000 * 16);
    let charged = e.fair().charged();
    assert!(
        charged[1] > 2 * charged[0],
        "blue {} ticks, red {}",
        charged[1],
        charged[0]
    );
}
