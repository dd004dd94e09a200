//! Millions of random and mutated frames: the pipeline never panics, and
//! every buffer is accounted for afterwards (sent, held, queued or free).

mod common;

use common::*;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrhost_dataplane::{Engine, Limits, PortId, TxBatch, VrId};
use vrhost_wire::arp::Operation;
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::icmpv6::{Icmpv6Repr, NdiscRepr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv6::solicited_node;

/// Valid frames of every kind the pipeline handles, as mutation seeds.
fn seeds() -> Vec<(u16, Vec<u8>)> {
    let arp = arp(
        Operation::Request,
        HOST_MAC,
        HOST,
        RED0,
        EthernetAddress::BROADCAST,
        None,
    );
    let ns = {
        let dst = solicited_node(&RED0_6);
        let r = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: RED0_6,
            lladdr: Some(HOST_MAC),
        });
        eth(
            vrhost_wire::ethernet::ipv6_multicast_mac(&dst),
            HOST_MAC,
            None,
            EtherType::Ipv6,
            &icmpv6(HOST6, dst, 255, &r),
        )
    };
    let echo6 = {
        let r = Icmpv6Repr::EchoRequest {
            ident: 1,
            seq_no: 2,
            data: b"x",
        };
        eth(
            RED0_MAC,
            HOST_MAC,
            None,
            EtherType::Ipv6,
            &icmpv6(HOST6, RED0_6, 64, &r),
        )
    };
    let mut with_opts = ipv4(HOST, REMOTE, IpProtocol::Udp, 64, false, &udp(1500));
    with_opts.splice(20..20, [0x94, 4, 0, 0, 0x07, 7, 4, 0, 0, 0, 0, 0]);
    with_opts[0] = 0x48;
    let total = with_opts.len() as u16;
    with_opts[2..4].copy_from_slice(&total.to_be_bytes());
    let mut with_opts = eth(RED0_MAC, HOST_MAC, None, EtherType::Ipv4, &with_opts);
    fix_ipv4_checksum(&mut with_opts, 14);
    vec![
        (0, udp4_frame(REMOTE, 64, false, 18)),
        (0, udp4_frame(REMOTE, 1, false, 18)),
        (0, udp4_frame(REMOTE, 64, false, 3000)),
        (0, udp4_frame(REMOTE, 64, true, 3000)),
        (0, udp4_frame("8.8.8.8".parse().unwrap(), 64, false, 18)),
        (0, udp4_frame("10.0.0.77".parse().unwrap(), 64, false, 18)),
        (
            0,
            eth(
                RED0_MAC,
                HOST_MAC,
                None,
                EtherType::Ipv4,
                &ipv4(
                    HOST,
                    RED0,
                    IpProtocol::Icmp,
                    64,
                    false,
                    &echo4(1, 1, b"abc"),
                ),
            ),
        ),
        (
            0,
            eth(
                RED0_MAC,
                HOST_MAC,
                None,
                EtherType::Ipv4,
                &ipv4(HOST, RED0, IpProtocol::Tcp, 64, false, &[0; 20]),
            ),
        ),
        (0, with_opts),
        (0, arp),
        (0, ns),
        (0, echo6),
        (0, udp6_frame(REMOTE6, 64, 18)),
        (0, udp6_frame(REMOTE6, 1, 18)),
        (0, udp6_frame(REMOTE6, 64, 1400)),
        (0, udp6_frame("2001:db8::99".parse().unwrap(), 64, 18)),
        (
            1,
            eth(
                RED1_MAC,
                GW_MAC,
                Some(100),
                EtherType::Ipv4,
                &ipv4(REMOTE, HOST, IpProtocol::Udp, 64, false, &udp(18)),
            ),
        ),
        (
            1,
            eth(
                BLUE1_MAC,
                GW_MAC,
                Some(200),
                EtherType::Ipv6,
                &ipv6(REMOTE6, HOST6, IpProtocol::Udp, 64, &udp(18)),
            ),
        ),
    ]
}

fn mutate(rng: &mut SmallRng, frame: &mut Vec<u8>) {
    match rng.gen_range(0..6) {
        0 => {
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..frame.len());
                frame[i] ^= 1 << rng.gen_range(0..8);
            }
        }
        1 => {
            let i = rng.gen_range(0..frame.len());
            frame[i] = rng.gen();
        }
        2 => frame.truncate(rng.gen_range(0..frame.len())),
        3 => frame.extend((0..rng.gen_range(1..64)).map(|_| rng.gen::<u8>())),
        4 => {
            // Hit the header fields most checks look at.
            let i = rng.gen_range(12..frame.len().min(80));
            frame[i] = rng.gen();
        }
        _ => {
            let i = rng.gen_range(0..frame.len());
            let j = rng.gen_range(i..frame.len());
            frame[i..j].fill(rng.gen());
        }
    }
}

fn check_conservation(e: &mut Engine) {
    let (held, queued) = (e.held(), e.punt_queued());
    let pool = e.pool();
    assert_eq!(
        pool.allocated(),
        pool.available() + held + queued,
        "a buffer leaked or was double-freed"
    );
}

#[test]
fn millions_of_random_and_mutated_frames_never_panic() {
    let total: usize = std::env::var("VRHOST_FUZZ_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let mut e = Engine::new(&spec(Limits {
        icmp_rate: 1_000_000,
        punt_queue: 64,
        ..Limits::default()
    }))
    .unwrap();
    let seeds = seeds();
    let mut tx = TxBatch::new(e.port_count());
    let mut rx = Vec::with_capacity(32);
    let mut now = 0u64;
    let mut frame = Vec::with_capacity(4096);
    for i in 0..total {
        frame.clear();
        let port = if rng.gen_bool(0.3) {
            // Pure noise, sometimes addressed to an interface so it reaches L3.
            frame.extend((0..rng.gen_range(0..128)).map(|_| rng.gen::<u8>()));
            if frame.len() >= 14 && rng.gen_bool(0.7) {
                frame[..6].copy_from_slice(&RED0_MAC.0);
                frame[12..14].copy_from_slice(
                    &[[0x08, 0x00], [0x86, 0xdd], [0x08, 0x06], [0x81, 0x00]][rng.gen_range(0..4)],
                );
            }
            rng.gen_range(0..4u16) // port 3 does not exist
        } else {
            let (port, seed) = &seeds[rng.gen_range(0..seeds.len())];
            frame.extend_from_slice(seed);
            if !frame.is_empty() {
                mutate(&mut rng, &mut frame);
            }
            *port
        };
        let mut m = e.pool().get();
        m.fill(&frame);
        m.port = port;
        rx.push(m);
        if rx.len() == 32 || i + 1 == total {
            now += rng.gen_range(0..50_000_000);
            e.process_burst(&mut rx, now, &mut tx);
            for q in tx.ports.iter_mut() {
                for m in q.drain(..) {
                    e.pool().put(m);
                }
            }
            for vr in 0..e.vr_count() {
                e.drain_punted(VrId::new(vr), |_| {});
            }
        }
    }
    check_conservation(&mut e);
    // Every frame is accounted for on its port.
    let rx_total: u64 = (0..e.port_count())
        .map(|p| e.port_counters(PortId::from_index(p)).rx_packets)
        .sum();
    assert!(rx_total > 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Shrinkable variant: one arbitrary frame on an arbitrary port.
    #[test]
    fn any_single_frame_is_handled(port in 0u16..4, to_us in any::<bool>(), ethertype in 0usize..5, mut bytes in proptest::collection::vec(any::<u8>(), 0..1600)) {
        let mut e = engine();
        if bytes.len() >= 14 && to_us {
            bytes[..6].copy_from_slice(&RED0_MAC.0);
            if ethertype < 4 {
                bytes[12..14].copy_from_slice(&[[0x08, 0x00], [0x86, 0xdd], [0x08, 0x06], [0x81, 0x00]][ethertype]);
            }
        }
        let _ = send(&mut e, port, &bytes, 0);
        let _ = poll(&mut e, 10 * SEC);
        check_conservation(&mut e);
    }
}
