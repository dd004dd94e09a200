//! `vrhost demo`: the embedded default. No files, no privileges.
//!
//! Three tenants, red, blue and green, use the *same* addresses
//! (10.0.0.0/24 toward their hosts, 10.1.0.0/24 toward their upstream) on
//! two shared in-memory ports, separated by VLAN. Each has its own synthetic
//! table. The traffic mix is mostly forwardable UDP, with pings to the
//! router, TTL-expired packets and destinations without a route, so the
//! summary shows local answers, ICMP errors and drop reasons too.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrhost_daemon::runtime::{Mode, PortQueues, Runtime, TxQueue};
use vrhost_dataplane::{
    EngineSpec, InterfaceSpec, Limits, PortSpec, RouteTarget, RouterSpec, VrId,
};
use vrhost_fib::Prefix4;
use vrhost_io::MemoryPort;
use vrhost_wire::checksum;
use vrhost_wire::ethernet::EthernetAddress;

use crate::workload::{self, FrameSpec};

/// (name, VLAN, share of the offered traffic in percent)
const TENANTS: &[(&str, u16, u32)] = &[("red", 10, 50), ("blue", 20, 30), ("green", 30, 20)];
const DOWN_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const UP_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x01, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x02, 0x02]);
const FRAMES: usize = 32_768;

fn spec(tables: &[Vec<(Ipv4Addr, u8)>]) -> EngineSpec {
    let ports = vec![
        PortSpec {
            name: "down".into(),
            mtu: 1500,
        },
        PortSpec {
            name: "up".into(),
            mtu: 1500,
        },
    ];
    let routers = TENANTS
        .iter()
        .zip(tables)
        .map(|(&(name, vlan, _), table)| {
            let mut routes4: Vec<_> = table
                .iter()
                .filter_map(|&(a, l)| Prefix4::new(a, l).ok())
                .map(|p| (p, RouteTarget::Via(Ipv4Addr::new(10, 1, 0, 2).into())))
                .collect();
            // 198.51.100.0/24 (TEST-NET-2) is unreachable in every tenant.
            if let Ok(p) = "198.51.100.0/24".parse() {
                routes4.push((p, RouteTarget::Unreachable));
            }
            RouterSpec {
                name: name.into(),
                interfaces: vec![
                    InterfaceSpec {
                        inner_vlan: None,
                        tpid: Default::default(),
                        urpf: Default::default(),
                        name: format!("{name}-down"),
                        port: 0,
                        vlan: Some(vlan),
                        mac: DOWN_MAC,
                        mtu: 1500,
                        addrs4: vec![(Ipv4Addr::new(10, 0, 0, 1), 24)],
                        addrs6: vec![],
                        filters: Default::default(),
                    },
                    InterfaceSpec {
                        inner_vlan: None,
                        tpid: Default::default(),
                        urpf: Default::default(),
                        name: format!("{name}-up"),
                        port: 1,
                        vlan: Some(vlan),
                        mac: UP_MAC,
                        mtu: 1500,
                        addrs4: vec![(Ipv4Addr::new(10, 1, 0, 1), 24)],
                        addrs6: vec![],
                        filters: Default::default(),
                    },
                ],
                routes4,
                routes6: vec![],
                neighbors: vec![
                    (Ipv4Addr::new(10, 1, 0, 2).into(), GW_MAC),
                    (Ipv4Addr::new(10, 0, 0, 2).into(), HOST_MAC),
                ],
                limits: Limits {
                    icmp_rate: 1000,
                    ..Limits::default()
                },
                filters: Vec::new(),
            }
        })
        .collect();
    EngineSpec { ports, routers }
}

/// An ICMP echo request from the tenant's host to the router.
fn ping(vlan: u16, seq: u16) -> Vec<u8> {
    let mut f = workload::udp4_frame(&FrameSpec {
        src_mac: HOST_MAC,
        dst_mac: DOWN_MAC,
        vlan: Some(vlan),
        src: Ipv4Addr::new(10, 0, 0, 2),
        dst: Ipv4Addr::new(10, 0, 0, 1),
        ttl: 64,
        src_port: 0,
        dst_port: 0,
    });
    // Turn the UDP datagram into an echo request: protocol 1, ICMP header.
    let l3 = 18;
    f[l3 + 9] = 1;
    f[l3 + 10..l3 + 12].fill(0);
    let c = checksum::checksum(&f[l3..l3 + 20]);
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    let icmp = &mut f[l3 + 20..];
    icmp[..8].copy_from_slice(&[8, 0, 0, 0, 0x12, 0x34, (seq >> 8) as u8, seq as u8]);
    let c = checksum::checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    f
}

fn traffic(tables: &[Vec<(Ipv4Addr, u8)>], rng: &mut SmallRng) -> Vec<Vec<u8>> {
    let mut frames = Vec::with_capacity(FRAMES);
    for i in 0..FRAMES {
        let mut pick = rng.gen_range(0..100);
        let t = TENANTS
            .iter()
            .position(|&(_, _, share)| {
                let hit = pick < share;
                pick = pick.saturating_sub(share);
                hit
            })
            .unwrap_or(0);
        let vlan = TENANTS[t].1;
        let kind = rng.gen_range(0..1000);
        let (dst, ttl) = match kind {
            0..=4 => {
                frames.push(ping(vlan, i as u16));
                continue;
            }
            5..=9 => (Ipv4Addr::new(203, 0, 113, 7), 64), // no route: ICMP net unreachable
            10..=14 => (workload::inside(tables[t][0], rng), 1), // TTL expires
            15..=16 => (Ipv4Addr::new(198, 51, 100, 1), 64), // unreachable route
            _ => (
                workload::inside(tables[t][rng.gen_range(0..tables[t].len())], rng),
                64,
            ),
        };
        frames.push(workload::udp4_frame(&FrameSpec {
            src_mac: HOST_MAC,
            dst_mac: DOWN_MAC,
            vlan: Some(vlan),
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst,
            ttl,
            src_port: 1024 + (i % 4096) as u16,
            dst_port: 9,
        }));
    }
    frames
}

/// Runs the demo for `seconds` with `routes` prefixes per tenant.
pub fn run(seconds: u64, routes: usize) -> Result<ExitCode> {
    let mut rng = SmallRng::seed_from_u64(2008);
    let routes = routes.clamp(1, 1_000_000);
    let tables: Vec<_> = TENANTS
        .iter()
        .map(|_| workload::table(routes, &mut rng))
        .collect();
    let frames = traffic(&tables, &mut rng);
    let ports = vec![
        PortQueues {
            name: "down".into(),
            rx: vec![Box::new(MemoryPort::from_frames(
                frames.iter().map(Vec::as_slice),
            ))],
            tx: TxQueue::discard(),
        },
        PortQueues {
            name: "up".into(),
            rx: vec![],
            tx: TxQueue::discard(),
        },
    ];
    let cores = crate::bench::cores_for(1, &[]);
    let running = Runtime::new(&spec(&tables), ports, &cores, Mode::Rtc)
        .context("building the demo")?
        .start();
    println!(
        "vrhost demo: {} tenants with the same addresses on VLANs of two memory ports, {routes} routes each",
        TENANTS.len()
    );
    // Each tenant's packets a second, and its share of the worker's time
    // in that second (what the fair share charged it).
    println!(
        "{:>4}  {}",
        "sec",
        TENANTS
            .iter()
            .map(|(n, _, _)| format!("{n:>19}"))
            .collect::<String>()
    );
    let start = Instant::now();
    let mut last = vec![(0u64, 0u64); TENANTS.len()];
    let mut then = start;
    for sec in 1..=seconds.max(1) {
        std::thread::sleep(
            (start + Duration::from_secs(sec)).saturating_duration_since(Instant::now()),
        );
        let now = Instant::now();
        let wall_ns = now.duration_since(then).as_nanos().max(1) as f64;
        then = now;
        let mut line = format!("{sec:>4}  ");
        for (v, (prev_rx, prev_busy)) in last.iter_mut().enumerate() {
            let rx = running.vr_counters(VrId::new(v)).rx_packets;
            let busy = running.vr_busy_ns(VrId::new(v)).unwrap_or(0);
            line.push_str(&format!(
                "{:>8.3} Mpps {:>4.0}%",
                (rx - *prev_rx) as f64 / 1e6,
                busy.saturating_sub(*prev_busy) as f64 / wall_ns * 100.0
            ));
            (*prev_rx, *prev_busy) = (rx, busy);
        }
        println!("{line}");
    }
    println!("\nsummary after {:.1} s:", start.elapsed().as_secs_f64());
    print!(
        "{}",
        vrhost_daemon::report::table(&vrhost_daemon::report::Source::Running(&running))
    );
    running.stop();
    Ok(ExitCode::SUCCESS)
}
