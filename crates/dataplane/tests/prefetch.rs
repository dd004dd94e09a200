//! Whether a worker's batch lookups prefetch depends on how many routes
//! all its VRs' tables hold together, each VR counting for some more, not
//! on the table looked up: many medium tables, or thousands of small VRs,
//! miss the caches as one big table does.

mod common;

use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};

use common::*;
use vrhost_dataplane::{Limits, RouteTarget, TableWriter, TxBatch, VrId, Worker};
use vrhost_fib::Prefix4;

thread_local! {
    static LINES: Cell<usize> = const { Cell::new(0) };
}

/// A `Prefetch` that counts lines (on this thread) and touches nothing.
fn count_lines(lines: &[*const u8]) {
    LINES.with(|n| n.set(n.get() + lines.len()));
}

/// Lines prefetched while `w` forwards a burst of eight frames into red.
fn lines_for_a_burst(w: &mut Worker) -> usize {
    let before = LINES.with(Cell::get);
    let mut rx: Vec<_> = (0..8)
        .map(|_| {
            let mut m = w.pool().get();
            m.fill(&udp4_frame(REMOTE, 64, false, 18));
            m.port = 0;
            m
        })
        .collect();
    let mut tx = TxBatch::new(3);
    w.process_burst(&mut rx, SEC, &mut tx);
    let sent: usize = tx.ports.iter().map(Vec::len).sum();
    assert_eq!(sent, 8, "every frame forwarded");
    for q in &mut tx.ports {
        for m in q.drain(..) {
            w.pool().put(m);
        }
    }
    LINES.with(Cell::get) - before
}

/// `n` /24s in `first`.0.0.0/8 onwards, via red's and blue's gateway.
fn add_routes(writer: &mut TableWriter, vr: usize, first: u8, n: u32) {
    for i in 0..n {
        let p = Prefix4::new(
            Ipv4Addr::new(first + (i >> 16) as u8, (i >> 8) as u8, i as u8, 0),
            24,
        )
        .unwrap();
        writer
            .add_route(VrId::new(vr), p, RouteTarget::Via(IpAddr::V4(GW)))
            .unwrap();
    }
    writer.commit();
}

#[test]
fn prefetch_follows_the_routes_of_all_tables_together() {
    let mut writer = TableWriter::new(&spec(Limits::default())).unwrap();
    add_routes(&mut writer, 0, 20, 3000);
    add_routes(&mut writer, 1, 20, 3000);
    let mut workers = Worker::create(&mut writer, 3);
    let mut always = workers.pop().unwrap();
    let mut high = workers.pop().unwrap();
    let mut low = workers.pop().unwrap();
    always.set_prefetch(count_lines, 0);
    // Red alone holds ~3000 routes; red and blue together ~6000.
    low.set_prefetch(count_lines, 4000);
    high.set_prefetch(count_lines, 10_000);
    // Red's ~3000 routes are a flat table: two lines per lookup (its
    // bitmap word and its line of entries, one cache line for IPv4).
    assert_eq!(
        lines_for_a_burst(&mut always),
        2 * 8,
        "two lines per lookup"
    );
    assert_eq!(
        lines_for_a_burst(&mut low),
        2 * 8,
        "red's table is under 4000 routes, the two together over"
    );
    assert_eq!(lines_for_a_burst(&mut high), 0, "under 10,000 in all");
    // Blue grows past the threshold: red's lookups prefetch from the next
    // burst on, as the worker picks the new tables up.
    add_routes(&mut writer, 1, 40, 5000);
    assert_eq!(lines_for_a_burst(&mut high), 2 * 8, "over 10,000 in all");
    // Blue goes away: back under.
    writer.remove_vr(VrId::new(1)).unwrap();
    writer.commit();
    assert_eq!(lines_for_a_burst(&mut high), 0, "blue's routes are gone");
    assert_eq!(lines_for_a_burst(&mut low), 0, "red alone is under 4000");
    assert_eq!(lines_for_a_burst(&mut always), 2 * 8);
}

/// Lines prefetched while `w` forwards a burst of eight frames of four
/// tagged VRs (`tagged_vrs(4)`), two each.
fn many_vr_burst(w: &mut Worker) -> usize {
    use vrhost_wire::ethernet::EtherType;
    use vrhost_wire::ip::IpProtocol;
    let before = LINES.with(Cell::get);
    let mut rx: Vec<_> = (0..8u16)
        .map(|i| {
            let frame = eth(
                DOWN_MAC,
                host_mac(usize::from(i % 4)),
                Some(10 + i % 4),
                EtherType::Ipv4,
                &ipv4(
                    Ipv4Addr::new(10, 0, 0, 2),
                    Ipv4Addr::new(192, 0, 2, i as u8),
                    IpProtocol::Udp,
                    64,
                    false,
                    &udp(18),
                ),
            );
            let mut m = w.pool().get();
            m.fill(&frame);
            m.port = 0;
            m
        })
        .collect();
    let mut tx = TxBatch::new(2);
    w.process_burst(&mut rx, SEC, &mut tx);
    assert_eq!(tx.ports[1].len(), 8, "every frame forwarded");
    for m in tx.ports.iter_mut().flat_map(|q| q.drain(..)) {
        w.pool().put(m);
    }
    LINES.with(Cell::get) - before
}

/// A burst of frames of many VRs prefetches, besides each lookup's lines,
/// each frame's gateway slot: the per-VR line that the fast path reads
/// next, which holds the neighbor's MAC once a frame has gone through it
/// (the neighbor entry is not prefetched: it is not read).
#[test]
fn bursts_of_many_vrs_prefetch_each_frames_gateway() {
    let mut writer = TableWriter::new(&tagged_vrs(4)).unwrap();
    let mut w = Worker::create(&mut writer, 1).pop().unwrap();
    w.set_prefetch(count_lines, 0);
    // Each lookup: its table, bitmap word and line (one cache line for
    // IPv4), and each frame's gateway slot, whether resolved yet (the
    // first burst) or not.
    assert_eq!(many_vr_burst(&mut w), 8 * 3 + 8);
    assert_eq!(many_vr_burst(&mut w), 8 * 3 + 8);
}

/// Each VR counts as `PREFETCH_ROUTES_PER_VR` routes towards the
/// threshold: thousands of VRs of a route or two miss the caches as a large
/// table does (their own lines are read by every lookup).
#[test]
fn each_vr_counts_towards_the_prefetch_threshold() {
    use vrhost_dataplane::worker::PREFETCH_ROUTES_PER_VR;
    let mut writer = TableWriter::new(&tagged_vrs(4)).unwrap();
    let mut workers = Worker::create(&mut writer, 2);
    let (mut under, mut over) = (workers.pop().unwrap(), workers.pop().unwrap());
    // The four VRs hold a few connected routes each: under 100, where
    // the four of them weigh more.
    const { assert!(4 * PREFETCH_ROUTES_PER_VR >= 100) };
    over.set_prefetch(count_lines, 100);
    under.set_prefetch(count_lines, 4 * PREFETCH_ROUTES_PER_VR + 100);
    assert_eq!(many_vr_burst(&mut over), 8 * 3 + 8, "four VRs weigh enough");
    assert_eq!(
        many_vr_burst(&mut under),
        0,
        "their routes do not make up the rest"
    );
}
