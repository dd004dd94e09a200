//! `PoptrieLpm` and `MultibitLpm` must answer exactly like the naive
//! `ReferenceLpm` (STYLE.md §10), for random route sets and random
//! insert/remove/replace sequences. `PoptrieLpm` must also agree when
//! bulk-loaded, and every snapshot taken mid-sequence must keep answering as
//! of its time while the table goes on changing.
//!
//! Route sets are built to hit the trie's edge cases:
//! - addresses share a few random "bases", so prefixes nest and collide;
//! - lengths cluster at 0, the address width and each stride boundary ±1
//!   (7/8/9, 15/16/17, ...), where prefix expansion changes level;
//! - next hops come from a handful of values, so replacements and sibling
//!   routes with equal leaves happen often.
//!
//! Probe addresses are drawn uniformly, from inside inserted prefixes, and at
//! each prefix's first and last address and just outside them.

mod prefetch_lines;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use proptest::sample::select;
use vrhost_fib::{
    FibAddr, FibHandle, FibSnapshot, Lpm, MultibitLpm, NextHopId, PoptrieLpm, Prefix, ReferenceLpm,
};

/// The low `A::BITS` bits.
fn width<A: FibAddr>() -> u128 {
    u128::MAX >> (128 - u32::from(A::BITS))
}

/// The network mask of `len` bits, in the low `A::BITS` bits.
fn net_mask<A: FibAddr>(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        // Set the top `len` of 128 bits, then move them down to the family's width.
        (u128::MAX << (128 - u32::from(len))) >> (128 - u32::from(A::BITS))
    }
}

/// Prefix lengths: uniform half the time, stride boundaries ±1 otherwise.
fn length<A: FibAddr>() -> impl Strategy<Value = u8> {
    let mut edges = vec![0, A::BITS];
    for boundary in (8..A::BITS).step_by(8) {
        edges.extend([boundary - 1, boundary, boundary + 1]);
    }
    prop_oneof![0..=A::BITS, select(edges)]
}

/// Raw material for one route: (base index, noise, bits kept from the base, len, nh).
type RouteSeed = (usize, u128, u8, u8, u32);

fn route_seed<A: FibAddr>() -> impl Strategy<Value = RouteSeed> {
    (
        any::<usize>(),
        any::<u128>(),
        0..=A::BITS,
        length::<A>(),
        // Mostly a few next hops (4-bit leaves); now and then one that
        // needs 8, 16 or 32 bits, so that groups widen under churn.
        prop_oneof![8 => 0u32..6, 1 => 0u32..40, 1 => 250u32..70_000],
    )
}

/// Turns a seed into a route: the top `keep` bits come from one of `bases`.
fn route<A: FibAddr>(bases: &[u128], seed: RouteSeed) -> (Prefix<A>, NextHopId) {
    let (base, noise, keep, len, nh) = seed;
    let base = bases[base % bases.len()];
    let keep = net_mask::<A>(keep);
    let addr = ((base & keep) | (noise & !keep)) & width::<A>();
    let prefix = Prefix::new_truncating(A::from_u128(addr), len).unwrap();
    (prefix, NextHopId(nh))
}

/// Probe addresses around and inside `prefix`.
fn probes_for<A: FibAddr>(prefix: &Prefix<A>, noise: u128, out: &mut Vec<A>) {
    let first = prefix.addr().to_u128();
    let last = first | (!net_mask::<A>(prefix.len()) & width::<A>());
    let inside = first | (noise & !net_mask::<A>(prefix.len()) & width::<A>());
    for addr in [
        first,
        last,
        inside,
        first.wrapping_sub(1) & width::<A>(),
        last.wrapping_add(1) & width::<A>(),
    ] {
        out.push(A::from_u128(addr));
    }
}

fn routes_of<A: FibAddr>(t: &dyn Lpm<A>) -> BTreeMap<Prefix<A>, NextHopId> {
    let mut routes = BTreeMap::new();
    t.for_each(&mut |prefix, nh| {
        assert!(routes.insert(prefix, nh).is_none(), "{prefix} listed twice");
    });
    routes
}

/// Asserts that both tables hold the same routes and answer `probes` alike.
fn assert_agree<A: FibAddr>(fast: &dyn Lpm<A>, oracle: &ReferenceLpm<A>, probes: &[A]) {
    assert_eq!(fast.len(), oracle.len());
    assert_eq!(fast.is_empty(), oracle.is_empty());
    let routes = routes_of(oracle);
    assert_eq!(routes_of(fast), routes);
    for prefix in routes.keys() {
        assert_eq!(fast.get(prefix), oracle.get(prefix), "get {prefix}");
    }
    for addr in probes {
        assert_eq!(fast.lookup(*addr), oracle.lookup(*addr), "lookup {addr}");
    }
    let mut batch = vec![Some(NextHopId(u32::MAX)); probes.len()];
    fast.lookup_batch(probes, &mut batch);
    for (addr, got) in probes.iter().zip(&batch) {
        assert_eq!(*got, oracle.lookup(*addr), "lookup_batch {addr}");
    }
}

/// The trie's shape depends only on its route set: no node is leaked or
/// kept alive by the history of inserts and removes.
fn assert_canonical<A: FibAddr>(fast: &MultibitLpm<A>) {
    let mut fresh = MultibitLpm::new();
    fast.for_each(&mut |prefix, nh| {
        fresh.insert(prefix, nh);
    });
    assert_eq!(fast.node_count(), fresh.node_count());
}

/// Asserts that `snapshot` answers `probes` as `oracle` does.
fn assert_snapshot_agrees<A: FibAddr>(
    snapshot: &FibSnapshot<A>,
    oracle: &ReferenceLpm<A>,
    probes: &[A],
) {
    assert_eq!(snapshot.len(), oracle.len());
    let mut batch = vec![None; probes.len()];
    snapshot.lookup_batch(probes, &mut batch);
    let prefetched = prefetch_lines::lookup_batch(snapshot, probes);
    for (addr, (got, got_prefetched)) in probes.iter().zip(batch.iter().zip(&prefetched)) {
        let want = oracle.lookup(*addr);
        assert_eq!(snapshot.lookup(*addr), want, "snapshot lookup {addr}");
        assert_eq!(*got, want, "snapshot lookup_batch {addr}");
        assert_eq!(
            *got_prefetched, want,
            "snapshot lookup_batch_prefetch {addr}"
        );
    }
}

/// Inserts every seed's route into a fresh `T` and the oracle, then compares.
/// Returns the oracle and the probes for further checks.
fn check_route_set<A: FibAddr, T: Lpm<A> + Default>(
    bases: &[u128],
    seeds: &[RouteSeed],
    uniform: &[u128],
    noises: &[u128],
) -> (T, ReferenceLpm<A>, Vec<A>) {
    let mut fast = T::default();
    let mut oracle = ReferenceLpm::<A>::new();
    let mut probes: Vec<A> = uniform
        .iter()
        .map(|a| A::from_u128(a & width::<A>()))
        .collect();
    for (i, seed) in seeds.iter().enumerate() {
        let (prefix, nh) = route::<A>(bases, *seed);
        assert_eq!(
            fast.insert(prefix, nh),
            oracle.insert(prefix, nh),
            "insert {prefix}"
        );
        probes_for(&prefix, noises[i % noises.len()], &mut probes);
    }
    assert_agree(&fast, &oracle, &probes);
    // Exact match must not fall back to a covering route.
    for seed in seeds {
        let (prefix, _) = route::<A>(bases, *seed);
        let other = Prefix::new_truncating(prefix.addr(), prefix.len() / 2).unwrap();
        assert_eq!(fast.get(&other), oracle.get(&other), "get {other}");
    }
    (fast, oracle, probes)
}

fn check_multibit_route_set<A: FibAddr>(
    bases: &[u128],
    seeds: &[RouteSeed],
    uniform: &[u128],
    noises: &[u128],
) {
    let (fast, _, _) = check_route_set::<A, MultibitLpm<A>>(bases, seeds, uniform, noises);
    assert_canonical(&fast);
}

/// Incremental inserts, then the same routes bulk-loaded (in seed order, so
/// later duplicates win as with inserts), must agree with the oracle.
fn check_poptrie_route_set<A: FibAddr>(
    bases: &[u128],
    seeds: &[RouteSeed],
    uniform: &[u128],
    noises: &[u128],
) {
    let (fast, oracle, probes) = check_route_set::<A, PoptrieLpm<A>>(bases, seeds, uniform, noises);
    assert_snapshot_agrees(&fast.snapshot(), &oracle, &probes);
    let bulk = PoptrieLpm::from_routes(seeds.iter().map(|seed| route::<A>(bases, *seed)));
    assert_agree(&bulk, &oracle, &probes);
    // A bulk load is never bigger than the same routes inserted one by one
    // (which may carry garbage until compaction).
    assert!(bulk.lookup_bytes() <= fast.lookup_bytes());
}

#[derive(Clone, Debug)]
enum Op {
    Insert(RouteSeed),
    /// Remove the n-th (mod count) route inserted so far, present or not.
    RemoveInserted(usize),
    /// Remove a route that is probably absent.
    RemoveOther(RouteSeed),
}

fn op<A: FibAddr>() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => route_seed::<A>().prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::RemoveInserted),
        1 => route_seed::<A>().prop_map(Op::RemoveOther),
    ]
}

/// Applies `ops` to a fresh `T` and the oracle, comparing after every op.
/// `after_op` sees both after each op (for snapshot checks).
fn check_churn<A: FibAddr, T: Lpm<A> + Default>(
    bases: &[u128],
    ops: &[Op],
    noise: u128,
    mut after_op: impl FnMut(&T, &ReferenceLpm<A>, &[A]),
) -> T {
    // Probes cover every prefix any op touches, so each op's effect is seen.
    let mut probes = Vec::new();
    for op in ops {
        if let Op::Insert(seed) | Op::RemoveOther(seed) = op {
            probes_for(&route::<A>(bases, *seed).0, noise, &mut probes);
        }
    }
    let mut fast = T::default();
    let mut oracle = ReferenceLpm::<A>::new();
    let mut inserted: Vec<Prefix<A>> = Vec::new();
    for op in ops {
        match op {
            Op::Insert(seed) => {
                let (prefix, nh) = route::<A>(bases, *seed);
                assert_eq!(
                    fast.insert(prefix, nh),
                    oracle.insert(prefix, nh),
                    "insert {prefix}"
                );
                inserted.push(prefix);
            }
            Op::RemoveInserted(n) if !inserted.is_empty() => {
                let prefix = inserted[n % inserted.len()];
                assert_eq!(
                    fast.remove(&prefix),
                    oracle.remove(&prefix),
                    "remove {prefix}"
                );
            }
            Op::RemoveInserted(_) => {}
            Op::RemoveOther(seed) => {
                let (prefix, _) = route::<A>(bases, *seed);
                assert_eq!(
                    fast.remove(&prefix),
                    oracle.remove(&prefix),
                    "remove {prefix}"
                );
            }
        }
        assert_agree(&fast, &oracle, &probes);
        after_op(&fast, &oracle, &probes);
    }
    if fast.is_empty() {
        assert_eq!(fast.memory_bytes(), 0, "an empty table keeps no memory");
    }
    fast
}

fn check_multibit_churn<A: FibAddr>(bases: &[u128], ops: &[Op], noise: u128) {
    let fast = check_churn::<A, MultibitLpm<A>>(bases, ops, noise, |_, _, _| {});
    assert_canonical(&fast);
}

/// Churn on a `PoptrieLpm`; every few ops a snapshot is taken with a copy of
/// the oracle, and at the end every snapshot must still answer as of its
/// time. The table then goes through a `FibHandle` the same way.
fn check_poptrie_churn<A: FibAddr>(bases: &[u128], ops: &[Op], noise: u128) {
    let mut snapshots = Vec::new();
    let mut step = 0;
    let fast = check_churn::<A, PoptrieLpm<A>>(bases, ops, noise, |fast, oracle, probes| {
        step += 1;
        if step % 4 == 1 {
            snapshots.push((fast.snapshot(), oracle.clone()));
        }
        assert_snapshot_agrees(fast.as_snapshot(), oracle, probes);
    });
    let mut probes = Vec::new();
    for op in ops {
        if let Op::Insert(seed) | Op::RemoveOther(seed) = op {
            probes_for(&route::<A>(bases, *seed).0, noise, &mut probes);
        }
    }
    for (snapshot, oracle) in &snapshots {
        assert_snapshot_agrees(snapshot, oracle, &probes);
    }
    // Bulk-loading the final route set answers the same.
    let mut oracle = ReferenceLpm::new();
    fast.for_each(&mut |p, nh| {
        oracle.insert(p, nh);
    });
    let bulk = PoptrieLpm::from_routes(routes_of(&fast));
    assert_agree(&bulk, &oracle, &probes);
}

/// The same ops through a `FibHandle`, publishing after every other op; a
/// reader's guards taken along the way keep answering as of their time.
fn check_handle_churn<A: FibAddr>(bases: &[u128], ops: &[Op], noise: u128) {
    let mut probes = Vec::new();
    for op in ops {
        if let Op::Insert(seed) | Op::RemoveOther(seed) = op {
            probes_for(&route::<A>(bases, *seed).0, noise, &mut probes);
        }
    }
    let mut handle = FibHandle::<A>::new();
    let reader = handle.reader();
    let mut oracle = ReferenceLpm::<A>::new();
    let mut published = oracle.clone();
    let mut held = Vec::new();
    let mut inserted: Vec<Prefix<A>> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Insert(seed) => {
                let (prefix, nh) = route::<A>(bases, *seed);
                assert_eq!(handle.insert(prefix, nh), oracle.insert(prefix, nh));
                inserted.push(prefix);
            }
            Op::RemoveInserted(n) if !inserted.is_empty() => {
                let prefix = inserted[n % inserted.len()];
                assert_eq!(handle.remove(&prefix), oracle.remove(&prefix));
            }
            Op::RemoveInserted(_) => {}
            Op::RemoveOther(seed) => {
                let (prefix, _) = route::<A>(bases, *seed);
                assert_eq!(handle.remove(&prefix), oracle.remove(&prefix));
            }
        }
        // Unpublished changes are invisible to readers.
        assert_snapshot_agrees(&reader.load(), &published, &probes);
        if i % 2 == 1 {
            handle.publish();
            published = oracle.clone();
            held.push((reader.load(), published.clone()));
        }
    }
    for (guard, oracle) in &held {
        assert_snapshot_agrees(guard, oracle, &probes);
    }
    drop(held);
    handle.publish();
    assert_eq!(handle.reclaim(), 0, "no reader holds an old snapshot");
}

proptest! {
    #[test]
    fn v4_route_sets_agree(
        bases in prop::collection::vec(any::<u128>(), 1..4),
        seeds in prop::collection::vec(route_seed::<Ipv4Addr>(), 0..64),
        uniform in prop::collection::vec(any::<u128>(), 0..64),
        noises in prop::collection::vec(any::<u128>(), 1..8),
    ) {
        check_multibit_route_set::<Ipv4Addr>(&bases, &seeds, &uniform, &noises);
        check_poptrie_route_set::<Ipv4Addr>(&bases, &seeds, &uniform, &noises);
    }

    #[test]
    fn v6_route_sets_agree(
        bases in prop::collection::vec(any::<u128>(), 1..4),
        seeds in prop::collection::vec(route_seed::<Ipv6Addr>(), 0..64),
        uniform in prop::collection::vec(any::<u128>(), 0..64),
        noises in prop::collection::vec(any::<u128>(), 1..8),
    ) {
        check_multibit_route_set::<Ipv6Addr>(&bases, &seeds, &uniform, &noises);
        check_poptrie_route_set::<Ipv6Addr>(&bases, &seeds, &uniform, &noises);
    }

    #[test]
    fn v4_insert_remove_sequences_agree(
        bases in prop::collection::vec(any::<u128>(), 1..3),
        ops in prop::collection::vec(op::<Ipv4Addr>(), 0..80),
        noise in any::<u128>(),
    ) {
        check_multibit_churn::<Ipv4Addr>(&bases, &ops, noise);
        check_poptrie_churn::<Ipv4Addr>(&bases, &ops, noise);
        check_handle_churn::<Ipv4Addr>(&bases, &ops, noise);
    }

    #[test]
    fn v6_insert_remove_sequences_agree(
        bases in prop::collection::vec(any::<u128>(), 1..3),
        ops in prop::collection::vec(op::<Ipv6Addr>(), 0..80),
        noise in any::<u128>(),
    ) {
        check_multibit_churn::<Ipv6Addr>(&bases, &ops, noise);
        check_poptrie_churn::<Ipv6Addr>(&bases, &ops, noise);
        check_handle_churn::<Ipv6Addr>(&bases, &ops, noise);
    }
}

#[test]
fn net_mask_helper() {
    assert_eq!(net_mask::<Ipv4Addr>(0), 0);
    assert_eq!(net_mask::<Ipv4Addr>(1), 0x8000_0000);
    assert_eq!(net_mask::<Ipv4Addr>(32), 0xffff_ffff);
    assert_eq!(net_mask::<Ipv6Addr>(128), u128::MAX);
    assert_eq!(net_mask::<Ipv6Addr>(64), u128::MAX << 64);
}
