//! The per-packet path does not allocate: after warm-up, memory port → engine
//! → memory port runs thousands of bursts with zero heap allocations, for
//! forwarded traffic, ICMP errors, echo replies and VLAN rewrites alike.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use vrhost_dataplane::{
    Engine, EngineSpec, InterfaceSpec, Limits, PortSpec, RouteTarget, RouterSpec, TxBatch, VrId,
};
use vrhost_io::{MemoryPort, Port};
use vrhost_wire::ethernet::{EtherType, EthernetAddress, EthernetFrame};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv4::{Ipv4Packet, Ipv4Repr};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds GlobalAlloc's contract; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same layout the caller gave us, per GlobalAlloc::alloc.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: ptr came from System with `layout`, as realloc requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const IN_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const OUT_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

fn frame(dst: Ipv4Addr, proto: IpProtocol, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + payload.len()];
    let mut e = EthernetFrame::new_unchecked(&mut f[..]);
    e.set_dst_addr(IN_MAC);
    e.set_src_addr(EthernetAddress([2, 9, 9, 9, 9, 9]));
    e.set_ethertype(EtherType::Ipv4);
    let r = Ipv4Repr {
        src_addr: Ipv4Addr::new(10, 0, 0, 2),
        dst_addr: dst,
        protocol: proto,
        payload_len: payload.len(),
        ttl,
        dscp_ecn: 0,
        ident: 1,
        dont_frag: false,
    };
    r.emit(&mut Ipv4Packet::new_unchecked(&mut f[14..34]));
    f[34..].copy_from_slice(payload);
    f
}

#[test]
fn steady_state_forwarding_allocates_nothing() {
    let spec = EngineSpec {
        ports: vec![
            PortSpec {
                name: "in".into(),
                mtu: 1500,
            },
            PortSpec {
                name: "out".into(),
                mtu: 1500,
            },
        ],
        routers: vec![RouterSpec {
            name: "r".into(),
            interfaces: vec![
                InterfaceSpec {
                    inner_vlan: None,
                    tpid: Default::default(),
                    urpf: Default::default(),
                    name: "in0".into(),
                    port: 0,
                    vlan: None,
                    mac: IN_MAC,
                    mtu: 1500,
                    addrs4: vec![(Ipv4Addr::new(10, 0, 0, 1), 24)],
                    addrs6: vec![],
                    filters: Default::default(),
                },
                InterfaceSpec {
                    inner_vlan: None,
                    tpid: Default::default(),
                    urpf: Default::default(),
                    name: "out0".into(),
                    port: 1,
                    vlan: Some(7),
                    mac: OUT_MAC,
                    mtu: 1500,
                    addrs4: vec![(Ipv4Addr::new(10, 1, 0, 1), 24)],
                    addrs6: vec![],
                    filters: Default::default(),
                },
            ],
            routes4: (0..1000u32)
                .map(|i| {
                    (
                        vrhost_fib::Prefix4::new(Ipv4Addr::from((20 << 24) | (i << 8)), 24)
                            .unwrap(),
                        RouteTarget::Via(IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2))),
                    )
                })
                .collect(),
            routes6: vec![],
            neighbors: vec![
                (
                    IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)),
                    EthernetAddress([2, 8, 8, 8, 8, 8]),
                ),
                (
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                    EthernetAddress([2, 9, 9, 9, 9, 9]),
                ),
            ],
            filters: Vec::new(),
            limits: Limits {
                icmp_rate: 1000,
                ..Limits::default()
            },
        }],
    };
    let mut engine = Engine::new(&spec).unwrap();
    let echo = [8u8, 0, 0xf7, 0xfe, 0, 1, 0, 0]; // echo request, checksum precomputed
    let mut frames: Vec<Vec<u8>> = (0..1000u32)
        .map(|i| {
            frame(
                Ipv4Addr::from((20 << 24) | (i << 8) | 5),
                IpProtocol::Udp,
                64,
                &[0u8; 26],
            )
        })
        .collect();
    frames.push(frame(
        Ipv4Addr::new(20, 0, 0, 9),
        IpProtocol::Udp,
        1,
        &[0u8; 26],
    )); // TTL expired
    frames.push(frame(
        Ipv4Addr::new(99, 0, 0, 1),
        IpProtocol::Udp,
        64,
        &[0u8; 26],
    )); // no route
    frames.push(frame(
        Ipv4Addr::new(10, 0, 0, 1),
        IpProtocol::Icmp,
        64,
        &echo,
    )); // echo
    frames.push(frame(
        Ipv4Addr::new(10, 0, 0, 1),
        IpProtocol::Tcp,
        64,
        &[0u8; 20],
    )); // punt
    let mut ports: Vec<MemoryPort> = vec![
        MemoryPort::from_frames(frames.iter().map(Vec::as_slice)),
        MemoryPort::sink(),
    ];
    let mut rx = Vec::with_capacity(64);
    let mut tx = TxBatch::new(2);
    let mut now = 0u64;
    let mut poll = |engine: &mut Engine, rx: &mut Vec<_>, tx: &mut TxBatch, now: u64| {
        ports[0].rx_burst(engine.pool(), rx, 64, 0);
        engine.process_burst(rx, now, tx);
        for (i, p) in ports.iter_mut().enumerate() {
            p.tx_burst(&mut tx.ports[i], engine.pool(), now).unwrap();
        }
        engine.drain_all_punted(|_, _| {});
    };
    for _ in 0..200 {
        now += 10_000;
        poll(&mut engine, &mut rx, &mut tx, now);
    }
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..20_000 {
        now += 10_000;
        poll(&mut engine, &mut rx, &mut tx, now);
    }
    COUNTING.store(false, Ordering::SeqCst);
    let c = engine.vr_counters(VrId::new(0));
    assert!(c.forwarded > 1_000_000, "{c:?}");
    assert!(c.icmp_errors > 0 && c.local > 0 && c.punted > 0, "{c:?}");
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        0,
        "heap allocations on the per-packet path"
    );
}
