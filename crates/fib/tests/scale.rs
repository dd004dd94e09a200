//! `PoptrieLpm` at scale, against `MultibitLpm` as the oracle (`ReferenceLpm`
//! is O(n) per lookup): synthetic Internet-like tables big enough to use
//! every direct-array size (d = 4, 10 and, for IPv6, 16), group resizing,
//! subtree rebuilds and compaction, and snapshots that must not move.
//!
//! Meant for `cargo test -p vrhost-fib --release` (a few seconds there).

mod prefetch_lines;
mod synth;

use std::net::{Ipv4Addr, Ipv6Addr};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrhost_fib::{FibAddr, FibSnapshot, Lpm, MultibitLpm, NextHopId, PoptrieLpm, Prefix};

fn probes<A: FibAddr>(routes: &[(Prefix<A>, NextHopId)], seed: u64) -> Vec<A> {
    let mut probes = synth::uniform_addrs(20_000, seed);
    probes.extend(synth::addrs_inside(routes, 40_000, seed + 1));
    probes
}

fn assert_same<A: FibAddr>(
    fast: &FibSnapshot<A>,
    oracle: &MultibitLpm<A>,
    probes: &[A],
    what: &str,
) {
    let mut batch = vec![None; probes.len()];
    fast.lookup_batch(probes, &mut batch);
    let prefetched = prefetch_lines::lookup_batch(fast, probes);
    for (addr, (got, got_prefetched)) in probes.iter().zip(batch.iter().zip(&prefetched)) {
        let want = oracle.lookup(*addr);
        assert_eq!(fast.lookup(*addr), want, "{what}: lookup {addr}");
        assert_eq!(*got, want, "{what}: lookup_batch {addr}");
        assert_eq!(
            *got_prefetched, want,
            "{what}: lookup_batch_prefetch {addr}"
        );
    }
}

/// Bulk load, incremental build, churn (remove, replace, re-add, short
/// prefixes that repaint many entries) and an old snapshot, all checked.
fn check<A: FibAddr + std::str::FromStr>(
    routes: Vec<(Prefix<A>, NextHopId)>,
    short: &[&str],
    seed: u64,
) {
    let probes = probes(&routes, seed);
    let mut oracle = MultibitLpm::new();
    for (p, nh) in &routes {
        oracle.insert(*p, *nh);
    }
    let bulk = PoptrieLpm::from_routes(routes.iter().copied());
    assert_eq!(bulk.len(), routes.len());
    assert_same(bulk.as_snapshot(), &oracle, &probes, "bulk");

    let mut fast = PoptrieLpm::new();
    for (p, nh) in &routes {
        fast.insert(*p, *nh);
    }
    assert_same(fast.as_snapshot(), &oracle, &probes, "incremental");
    let before = fast.snapshot();
    let oracle_before = oracle.clone();

    let mut rng = SmallRng::seed_from_u64(seed);
    let mut extra: Vec<(Prefix<A>, NextHopId)> = short
        .iter()
        .map(|s| (s.parse().unwrap_or_else(|_| panic!("{s}")), NextHopId(77)))
        .collect();
    for round in 0..4 {
        for (p, nh) in &extra {
            assert_eq!(fast.insert(*p, *nh), oracle.insert(*p, *nh), "{p}");
        }
        for _ in 0..routes.len() / 8 {
            let (p, _) = routes[rng.gen_range(0..routes.len())];
            match rng.gen_range(0..3) {
                0 => assert_eq!(fast.remove(&p), oracle.remove(&p), "{p}"),
                _ => {
                    let nh = NextHopId(rng.gen_range(0..40));
                    assert_eq!(fast.insert(p, nh), oracle.insert(p, nh), "{p}");
                }
            }
        }
        assert_same(
            fast.as_snapshot(),
            &oracle,
            &probes,
            &format!("churn {round}"),
        );
        for (p, _) in &extra {
            assert_eq!(fast.remove(p), oracle.remove(p), "{p}");
        }
        assert_same(
            fast.as_snapshot(),
            &oracle,
            &probes,
            &format!("churn {round}, short removed"),
        );
        extra.iter_mut().for_each(|e| e.1 .0 += 1);
    }
    assert_eq!(fast.len(), oracle.len());
    assert_same(&before, &oracle_before, &probes, "old snapshot");

    // Removing everything returns every byte.
    let all: Vec<_> = {
        let mut v = Vec::new();
        fast.for_each(&mut |p, _| v.push(p));
        v
    };
    for p in &all {
        assert!(fast.remove(p).is_some());
    }
    assert_eq!(fast.memory_bytes(), 0);
    assert_same(
        &before,
        &oracle_before,
        &probes,
        "old snapshot after the table emptied",
    );
}

#[test]
fn ipv4_synthetic_table() {
    let routes = synth::ipv4_table(150_000, 4);
    check::<Ipv4Addr>(
        routes,
        &[
            "0.0.0.0/0",
            "1.0.0.0/8",
            "64.0.0.0/3",
            "100.0.0.0/9",
            "100.128.0.0/12",
            "200.1.0.0/16",
        ],
        40,
    );
}

#[test]
fn ipv6_synthetic_table() {
    // Enough for the busiest /8s (2a00::/12, 2600::/12) to pass 16k routes.
    let routes = synth::ipv6_table(80_000, 6);
    check::<Ipv6Addr>(
        routes,
        &[
            "::/0",
            "2000::/3",
            "2a00::/8",
            "2600::/9",
            "2001:db8::/32",
            "2a00::/20",
        ],
        60,
    );
}

/// Next hops of every width: groups whose leaves are 4, 8, 16 and 32 bits,
/// and groups that must widen when a large next hop arrives.
#[test]
fn leaf_widths() {
    let routes: Vec<_> = synth::ipv4_table(60_000, 9)
        .into_iter()
        .map(|(p, nh)| {
            let nh = match p.addr().octets()[0] % 4 {
                0 => nh.0 % 8,
                1 => nh.0 + 16,
                2 => nh.0 * 2_000,
                _ => nh.0 * 70_000,
            };
            (p, NextHopId(nh))
        })
        .collect();
    let probes = probes(&routes, 90);
    let mut oracle = MultibitLpm::new();
    let mut fast = PoptrieLpm::new();
    for (p, nh) in &routes {
        oracle.insert(*p, *nh);
        fast.insert(*p, *nh);
    }
    let bulk = PoptrieLpm::from_routes(routes.iter().copied());
    let widths = bulk.stats().groups_by_leaf_bits;
    assert!(widths.iter().all(|&n| n > 0), "{widths:?}");
    assert_same(bulk.as_snapshot(), &oracle, &probes, "bulk");
    assert_same(fast.as_snapshot(), &oracle, &probes, "incremental");
    let before = fast.snapshot();
    // Widen: larger next hops into groups that were 4 or 8 bits wide.
    let mut rng = SmallRng::seed_from_u64(91);
    let narrow: Vec<_> = routes
        .iter()
        .filter(|(p, _)| p.addr().octets()[0] % 4 < 2)
        .collect();
    for _ in 0..500 {
        let (p, _) = narrow[rng.gen_range(0..narrow.len())];
        let nh = NextHopId([1, 100, 40_001, 80_001][rng.gen_range(0..4)]);
        assert_eq!(fast.insert(*p, nh), oracle.insert(*p, nh), "{p}");
    }
    assert_same(fast.as_snapshot(), &oracle, &probes, "widened");
    assert_same(
        &before,
        &MultibitLpm::from_iter_routes(&routes),
        &probes,
        "old snapshot",
    );
    assert_eq!(
        fast.insert("10.0.0.0/8".parse().unwrap(), NextHopId::MAX),
        oracle.insert("10.0.0.0/8".parse().unwrap(), NextHopId::MAX)
    );
    assert_same(fast.as_snapshot(), &oracle, &probes, "max next hop");
}

/// Test helper: a `MultibitLpm` of `routes`.
trait FromRoutes<A> {
    fn from_iter_routes(routes: &[(Prefix<A>, NextHopId)]) -> Self;
}

impl<A: FibAddr> FromRoutes<A> for MultibitLpm<A> {
    fn from_iter_routes(routes: &[(Prefix<A>, NextHopId)]) -> Self {
        let mut t = MultibitLpm::new();
        for (p, nh) in routes {
            t.insert(*p, *nh);
        }
        t
    }
}

#[test]
fn small_tables_are_small() {
    let mut fib = PoptrieLpm::<Ipv4Addr>::new();
    for (p, nh) in synth::ipv4_table(10, 1) {
        fib.insert(p, nh);
    }
    assert!(
        fib.memory_bytes() < 16 * 1024,
        "{} bytes",
        fib.memory_bytes()
    );
    let mut fib = PoptrieLpm::<Ipv6Addr>::new();
    for (p, nh) in synth::ipv6_table(10, 1) {
        fib.insert(p, nh);
    }
    assert!(
        fib.memory_bytes() < 16 * 1024,
        "{} bytes",
        fib.memory_bytes()
    );
}

/// An incrementally grown table carries garbage and spare room; `compact`
/// rebuilds its sparse groups and shrinks the others within a route budget
/// per call until nothing is left, without changing an answer, and an older
/// snapshot keeps answering as before.
#[test]
fn compaction_removes_garbage() {
    let routes = synth::ipv4_table(200_000, 0x5eed);
    let probes = probes(&routes, 77);
    let oracle = MultibitLpm::from_iter_routes(&routes);
    let mut grown = PoptrieLpm::new();
    for (p, nh) in &routes {
        grown.insert(*p, *nh);
    }
    let bulk = PoptrieLpm::from_routes(routes.iter().copied());
    let bulk_bytes = bulk.as_snapshot().memory_bytes();
    let bulk = bulk.stats();
    let before = grown.stats();
    assert!(
        before.garbage_words * 4 > before.words,
        "grown {before:?} bulk {bulk:?}"
    );
    let snapshot = grown.snapshot();
    // 10k routes' worth of groups per call, as the control plane does when
    // updates pause: several calls, each within its budget but for the
    // last group it rebuilt.
    let mut calls = 0;
    loop {
        let spent = grown.compact(10_000);
        if spent == 0 {
            break;
        }
        assert!(spent < 10_000 + 5_000, "{spent} routes in one call");
        calls += 1;
        assert!(calls < 100, "compaction does not finish");
    }
    assert!(calls > 5, "{calls} calls");
    // Groups whose garbage is under a quarter of their size are left alone.
    let after = grown.stats();
    assert!(after.garbage_words * 4 < after.words, "{after:?}");
    assert!(
        after.garbage_words * 10 < before.garbage_words,
        "{after:?} {before:?}"
    );
    assert!(
        after.words <= bulk.words + bulk.words / 20,
        "compacted {after:?} bulk {bulk:?}"
    );
    // The spare room of grown arrays is given back too (what is left: groups
    // with under a quarter of garbage or spare room). Here that is 5.8% over
    // the bulk load; without the shrinking, 8.2%.
    let bytes = grown.as_snapshot().memory_bytes();
    assert!(
        bytes * 100 <= bulk_bytes * 107,
        "compacted {bytes} bytes, bulk-loaded {bulk_bytes}"
    );
    assert_same(grown.as_snapshot(), &oracle, &probes, "compacted");
    assert_same(&snapshot, &oracle, &probes, "snapshot before compaction");
    assert_eq!(grown.compact(usize::MAX), 0);
}
