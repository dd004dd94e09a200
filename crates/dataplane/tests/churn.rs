//! Routes change at a high rate while two workers forward: every packet whose
//! destination keeps its route throughout is forwarded, to the right
//! gateway, with no loss; packets to churning prefixes go either to their
//! gateway or to the covering blackhole, never anywhere else.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use vrhost_dataplane::{
    DropReason, EngineSpec, InterfaceSpec, Limits, PortId, PortSpec, RouteTarget, RouterSpec,
    TableWriter, TxBatch, VrId, Worker,
};
use vrhost_fib::Prefix4;
use vrhost_wire::ethernet::{EtherType, EthernetAddress};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv4::Ipv4Packet;

const GW_A: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const GW_B: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 3);
const MAC_A: EthernetAddress = EthernetAddress([2, 0xaa, 0, 0, 0, 2]);
const MAC_B: EthernetAddress = EthernetAddress([2, 0xbb, 0, 0, 0, 3]);
const PREFIXES: u32 = 200;

fn stable(i: u32) -> Prefix4 {
    Prefix4::new(Ipv4Addr::new(20, (i >> 8) as u8, i as u8, 0), 24).unwrap()
}

fn churning(i: u32) -> Prefix4 {
    Prefix4::new(Ipv4Addr::new(30, 0, i as u8, 0), 24).unwrap()
}

fn spec() -> EngineSpec {
    let iface = |name: &str, port, mac, addr| InterfaceSpec {
        inner_vlan: None,
        tpid: Default::default(),
        urpf: Default::default(),
        name: name.into(),
        port,
        vlan: None,
        mac,
        mtu: 1500,
        addrs4: vec![(addr, 24)],
        addrs6: vec![],
        filters: Default::default(),
    };
    let mut routes4: Vec<_> = (0..PREFIXES)
        .map(|i| (stable(i), RouteTarget::Via(IpAddr::V4(GW_A))))
        .collect();
    routes4.push(("30.0.0.0/16".parse().unwrap(), RouteTarget::Blackhole));
    EngineSpec {
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
                iface("in0", 0, RED0_MAC, RED0),
                iface("out0", 1, RED1_MAC, RED1),
            ],
            routes4,
            routes6: vec![],
            neighbors: vec![(IpAddr::V4(GW_A), MAC_A), (IpAddr::V4(GW_B), MAC_B)],
            limits: Limits::default(),
            filters: Vec::new(),
        }],
    }
}

/// A UDP frame from the host on port 0 to `dst`.
fn udp_to(dst: Ipv4Addr) -> Vec<u8> {
    eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(HOST, dst, IpProtocol::Udp, 64, false, &udp(18)),
    )
}

#[derive(Default, Debug)]
struct Tally {
    stable_in: u64,
    stable_out: u64,
    churn_in: u64,
    churn_out: u64,
    misforwarded: u64,
}

/// Forwards `bursts` bursts of `frames`, tallying where they went: a
/// churning prefix's packets must reach `churn_mac` of its third octet.
fn forward(
    mut w: Worker,
    frames: Arc<Vec<Vec<u8>>>,
    bursts: usize,
    done: Arc<AtomicBool>,
    churn_mac: fn(u8) -> EthernetAddress,
) -> (Tally, Worker) {
    let mut t = Tally::default();
    let mut tx = TxBatch::new(2);
    let mut rx = Vec::with_capacity(64);
    let mut now = 0u64;
    let mut next = 0usize;
    for _ in 0..bursts {
        for _ in 0..64 {
            let f = &frames[next % frames.len()];
            next += 1;
            if f[14 + 16] == 20 {
                t.stable_in += 1;
            } else {
                t.churn_in += 1;
            }
            let mut m = w.pool().get();
            m.fill(f);
            m.port = 0;
            rx.push(m);
        }
        now += 1_000;
        w.process_burst(&mut rx, now, &mut tx);
        for (p, q) in tx.ports.iter_mut().enumerate() {
            for m in q.drain(..) {
                let d = m.data();
                let dst = Ipv4Packet::new_checked(&d[14..])
                    .map(|ip| ip.dst_addr().octets())
                    .unwrap_or_default();
                let mac = EthernetAddress::from_bytes(&d[0..6]);
                match (p, dst[0], mac) {
                    (1, 20, MAC_A) => t.stable_out += 1,
                    (1, 30, mac) if mac == churn_mac(dst[2]) => t.churn_out += 1,
                    _ => t.misforwarded += 1,
                }
                w.pool().put(m);
            }
        }
    }
    done.store(true, Ordering::Release);
    (t, w)
}

/// Workers forwarding 20,000 bursts each of packets to every stable and
/// every churning prefix, alternately, on threads of their own; each sets
/// its flag when done.
#[allow(clippy::type_complexity)]
fn start(
    workers: Vec<Worker>,
    churn_mac: fn(u8) -> EthernetAddress,
) -> (
    Vec<std::thread::JoinHandle<(Tally, Worker)>>,
    Vec<Arc<AtomicBool>>,
) {
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..PREFIXES * 2)
            .map(|i| {
                let dst = if i % 2 == 0 {
                    stable(i / 2).addr()
                } else {
                    churning(i / 2).addr()
                };
                udp_to(Ipv4Addr::from(u32::from(dst) | 7))
            })
            .collect(),
    );
    let done: Vec<Arc<AtomicBool>> = (0..workers.len())
        .map(|_| Arc::new(AtomicBool::new(false)))
        .collect();
    let handles = workers
        .into_iter()
        .zip(done.iter().cloned())
        .map(|(w, d)| {
            let f = frames.clone();
            std::thread::spawn(move || forward(w, f, 20_000, d, churn_mac))
        })
        .collect();
    (handles, done)
}

/// Waits for the workers; checks that each dropped nothing but churning
/// packets that met the blackhole, and sums their tallies.
fn join(handles: Vec<std::thread::JoinHandle<(Tally, Worker)>>) -> Tally {
    let mut total = Tally::default();
    for h in handles {
        let (t, w) = h.join().expect("worker panicked");
        let c = vrhost_dataplane::sum_ports(&[w.counters()], PortId::new(0));
        assert_eq!(c.dropped(), c.drop_count(DropReason::Blackhole), "{c:?}");
        assert_eq!(
            t.churn_in - t.churn_out,
            c.drop_count(DropReason::Blackhole)
        );
        total.stable_in += t.stable_in;
        total.stable_out += t.stable_out;
        total.churn_in += t.churn_in;
        total.churn_out += t.churn_out;
        total.misforwarded += t.misforwarded;
    }
    total
}

/// Removes churning prefix `k` if it is there, else adds it through its
/// own gateway.
fn flip(control: &mut TableWriter, k: u32) {
    let p = churning(k);
    if control.route(VrId::new(0), p.addr().into(), 24).is_some() {
        assert!(control.remove_route(VrId::new(0), p));
    } else {
        let via = RouteTarget::Via(IpAddr::V4(own_gw(k as u8)));
        control.add_route(VrId::new(0), p, via).unwrap();
    }
}

/// Cache lines the first worker's FIB lookups asked to prefetch.
static PREFETCHED: AtomicUsize = AtomicUsize::new(0);

/// A `Prefetch` that counts the lines and touches nothing.
fn count_prefetch(lines: &[*const u8]) {
    PREFETCHED.fetch_add(lines.len(), Ordering::Relaxed);
}

/// The first worker looks its bursts up with the prefetching passes (every
/// table, however small), the second without: both must lose and misroute
/// nothing.
#[test]
fn route_churn_under_load_loses_and_misroutes_nothing() {
    let mut control = TableWriter::new(&spec()).unwrap();
    let mut workers = Worker::create(&mut control, 2);
    workers[0].set_prefetch(count_prefetch, 0);
    let (handles, done) = start(workers, |_| MAC_B);
    // The control thread churns: each churning prefix flips between "via B"
    // and "removed" (then the /16 blackhole covers it), committed in batches.
    let mut commits = 0u64;
    let mut changes = 0u64;
    let mut i = 0u32;
    while !done.iter().all(|d| d.load(Ordering::Acquire)) {
        for _ in 0..16 {
            let p = churning(i % PREFIXES);
            if (i / PREFIXES).is_multiple_of(2) {
                control
                    .add_route(VrId::new(0), p, RouteTarget::Via(IpAddr::V4(GW_B)))
                    .unwrap();
            } else {
                assert!(control.remove_route(VrId::new(0), p));
            }
            i += 1;
            changes += 1;
        }
        control.commit();
        commits += 1;
    }
    let total = join(handles);
    assert_eq!(total.misforwarded, 0, "{total:?}");
    assert_eq!(
        total.stable_out, total.stable_in,
        "no loss of packets whose route never changed: {total:?}"
    );
    assert_eq!(total.stable_in, 2 * 20_000 * 32);
    // Two lines per looked-up destination: the table of a few hundred
    // routes is flat (bitmap word, then the line of entries the lookup
    // reads, one cache line for IPv4).
    assert_eq!(PREFETCHED.load(Ordering::Relaxed), 2 * 20_000 * 64);
    assert!(
        commits >= 50 && changes >= 800,
        "the tables really changed under load: {commits} commits, {changes} changes"
    );
    assert!(
        total.churn_out > 0 && total.churn_out < total.churn_in,
        "both states of the churning routes were seen: {total:?}"
    );
}

/// Churning prefix `i`'s own gateway, and its MAC.
fn own_gw(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, 10 + i)
}

fn own_mac(i: u8) -> EthernetAddress {
    EthernetAddress([2, 0xcc, 0, 0, 0, i])
}

/// Each churning prefix has a gateway of its own, and flips between "via
/// it" and "removed": its next-hop id is let go and soon given to another
/// prefix's gateway while two workers forward. A packet that met the id
/// under its new meaning would reach another prefix's gateway: none does.
#[test]
fn reused_next_hop_ids_never_send_a_packet_to_another_gateway() {
    const N: u32 = PREFIXES;
    let mut spec = spec();
    for i in 0..N as u8 {
        spec.routers[0]
            .neighbors
            .push((IpAddr::V4(own_gw(i)), own_mac(i)));
    }
    let mut control = TableWriter::new(&spec).unwrap();
    let workers = Worker::create(&mut control, 2);
    let (handles, done) = start(workers, own_mac);
    let (mut i, mut changes) = (0u32, 0u64);
    // Prefixes flip in a stride, so that the ids freed by one commit's
    // removals go to other prefixes' gateways at the next.
    while !done.iter().all(|d| d.load(Ordering::Acquire)) {
        for _ in 0..16 {
            flip(&mut control, (i * 37) % N);
            i += 1;
            changes += 1;
        }
        control.commit();
    }
    let total = join(handles);
    assert_eq!(total.misforwarded, 0, "{total:?}");
    assert_eq!(total.stable_out, total.stable_in, "{total:?}");
    assert!(changes >= 800, "{changes} changes");
    assert!(
        total.churn_out > 0 && total.churn_out < total.churn_in,
        "both states of the churning routes were seen: {total:?}"
    );
    // Ids were let go and reused: far fewer than the gateways ever added
    // (each re-added prefix needs one; workers that lag keep some from reuse).
    let ids = control.nexthop_ids(VrId::new(0));
    assert!(
        ids < changes as usize / 4,
        "{ids} next-hop ids for {changes} changes"
    );
    // With no worker left holding an old FIB, churn needs no new id at all.
    control.commit();
    for i in 0..4000u32 {
        flip(&mut control, (i * 37) % N);
        if i % 16 == 15 {
            control.commit();
        }
    }
    assert_eq!(control.nexthop_ids(VrId::new(0)), ids);
}

/// A table fed route by route (as from a BGP feed) is compacted once the
/// feed pauses: not while updates keep coming, then a budget's worth of
/// groups per call until it is near its bulk-loaded size, with workers
/// forwarding as before.
#[test]
fn quiet_fibs_compact_to_their_bulk_size() {
    let mut control = TableWriter::new(&spec()).unwrap();
    let mut workers = Worker::create(&mut control, 1);
    let mut w = workers.pop().unwrap();
    // 60k /24s in 40.0.0.0 - 99.255.0.0, alternating gateways inside each
    // /8, committed in feed-sized batches.
    let gw = |i: usize| {
        if (i / 60).is_multiple_of(2) {
            GW_A
        } else {
            GW_B
        }
    };
    let fed: Vec<Prefix4> = (0..60_000u32)
        .map(|i| {
            let a = 40 + i % 60;
            let b = (i / 60) % 256;
            let c = (i * 7 / 15_360) % 256;
            Prefix4::new(Ipv4Addr::new(a as u8, b as u8, c as u8, 0), 24).unwrap()
        })
        .collect();
    for (i, p) in fed.iter().enumerate() {
        control
            .add_route(VrId::new(0), *p, RouteTarget::Via(IpAddr::V4(gw(i))))
            .unwrap();
        if i % 1000 == 999 {
            control.commit();
        }
    }
    control.commit();
    let grown = control.fib_memory(VrId::new(0));
    // Updates since the previous call: not quiet yet.
    assert_eq!(control.compact_quiet_fibs(5_000), 0);
    // Quiet: a first budget's worth.
    assert!(control.compact_quiet_fibs(5_000) > 0);
    // A new update makes the VR busy again: left alone for one call, though
    // sparse groups remain, then compaction resumes.
    control
        .add_route(
            VrId::new(0),
            "100.0.0.0/24".parse::<vrhost_fib::IpPrefix>().unwrap(),
            RouteTarget::Blackhole,
        )
        .unwrap();
    control.commit();
    assert_eq!(control.compact_quiet_fibs(5_000), 0);
    let mut calls = 0;
    while control.compact_quiet_fibs(5_000) > 0 {
        calls += 1;
        assert!(calls < 100, "compaction does not finish");
    }
    assert!(calls > 1, "{calls} calls");
    let compacted = control.fib_memory(VrId::new(0));
    let mut bulk = TableWriter::new(&spec()).unwrap();
    let mut routes: Vec<_> = fed
        .iter()
        .enumerate()
        .map(|(i, p)| (*p, RouteTarget::Via(IpAddr::V4(gw(i)))))
        .collect();
    routes.push(("100.0.0.0/24".parse().unwrap(), RouteTarget::Blackhole));
    bulk.add_routes(VrId::new(0), &routes, &[]).unwrap();
    bulk.commit();
    let bulk = bulk.fib_memory(VrId::new(0));
    assert!(
        compacted < grown && compacted <= bulk + bulk / 20,
        "grown {grown}, compacted {compacted}, bulk load {bulk}"
    );
    // Found compact: nothing more until the routes change.
    assert_eq!(control.compact_quiet_fibs(usize::MAX), 0);
    // The worker forwards on the compacted table: every sampled prefix to
    // its gateway.
    let sample: Vec<usize> = (0..fed.len()).step_by(997).collect();
    let mut tx = TxBatch::new(2);
    let mut rx = Vec::new();
    for &i in &sample {
        let mut m = w.pool().get();
        m.fill(&udp_to(Ipv4Addr::from(u32::from(fed[i].addr()) | 9)));
        m.port = 0;
        rx.push(m);
    }
    w.process_burst(&mut rx, 1_000, &mut tx);
    let out: Vec<_> = tx.ports[1].drain(..).collect();
    assert_eq!(out.len(), sample.len());
    for (m, &i) in out.iter().zip(&sample) {
        let want = if gw(i) == GW_A { MAC_A } else { MAC_B };
        assert_eq!(
            EthernetAddress::from_bytes(&m.data()[0..6]),
            want,
            "{}",
            fed[i]
        );
    }
}
