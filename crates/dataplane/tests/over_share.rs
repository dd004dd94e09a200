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
