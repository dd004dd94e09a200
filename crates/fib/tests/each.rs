//! `lookup_batch_each`, one batch over many tables (a burst whose frames
//! belong to many VRs), answers for each address exactly what its own
//! table's `lookup` and the naive `ReferenceLpm` answer, with and without
//! prefetching, for tables with routes, tables that never had one, tables
//! emptied again, and, in one batch, small tables (read through their flat
//! form) beside one too big for it.

use std::cell::Cell;
use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use vrhost_fib::{
    lookup_batch_each, FibAddr, Lpm, NextHopId, PoptrieLpm, Prefix, ReferenceLpm, FLAT_MAX_ROUTES,
};

thread_local! {
    static LINES: Cell<usize> = const { Cell::new(0) };
}

/// The prefetch under test: counts the lines asked for, touches nothing.
fn record(lines: &[*const u8]) {
    LINES.with(|n| n.set(n.get() + lines.len()));
}

/// One table's routes: (address bits, length, next hop), the address drawn
/// near one of a few bases so that prefixes nest.
fn routes_strategy(bits: u8) -> impl Strategy<Value = Vec<(u128, u8, u32)>> {
    let width = u128::MAX >> (128 - u32::from(bits));
    proptest::collection::vec(
        (
            prop_oneof![
                Just(0u128),
                Just(0x0a << (bits - 8)),
                Just(0xc6 << (bits - 8)),
                any::<u128>()
            ],
            any::<u128>(),
            0..=bits,
            0u32..40,
        )
            .prop_map(move |(base, noise, len, nh)| {
                // The base's network bits, noise below them.
                let host = width.checked_shr(u32::from(len)).unwrap_or(0);
                ((base & !host | noise & host) & width, len, nh)
            }),
        0..60,
    )
}

/// Host routes that make a table too big for the flat form: the first
/// `FLAT_MAX_ROUTES + 1` addresses of 11.0.0.0/8 (or 0b00::/8), next hops
/// 40 to 49.
fn filler<A: FibAddr>() -> impl Iterator<Item = (Prefix<A>, NextHopId)> {
    let base = 0x0bu128 << (A::BITS - 8);
    (0..=FLAT_MAX_ROUTES as u128).map(move |i| {
        let p = Prefix::new_truncating(A::from_u128(base | i), A::BITS)
            .expect("length within the family");
        (p, NextHopId(40 + (i % 10) as u32))
    })
}

fn check<A: FibAddr>(
    tables: &[Vec<(u128, u8, u32)>],
    probes: &[(usize, u128)],
    emptied: usize,
    big: bool,
) {
    let mut fibs = Vec::new();
    let mut oracles = Vec::new();
    for (t, routes) in tables.iter().enumerate() {
        let (mut fib, mut oracle) = (PoptrieLpm::<A>::new(), ReferenceLpm::<A>::new());
        if big && t == 0 {
            fib = PoptrieLpm::from_routes(filler::<A>());
            for (p, nh) in filler::<A>() {
                oracle.insert(p, nh);
            }
        }
        for &(addr, len, nh) in routes {
            let p =
                Prefix::new_truncating(A::from_u128(addr), len).expect("length within the family");
            fib.insert(p, NextHopId(nh));
            oracle.insert(p, NextHopId(nh));
        }
        // One table loses every route again: its top array stays.
        if t == emptied {
            for &(addr, len, _) in routes {
                let p = Prefix::new_truncating(A::from_u128(addr), len)
                    .expect("length within the family");
                fib.remove(&p);
                oracle.remove(&p);
            }
        }
        fibs.push(fib.snapshot());
        oracles.push(oracle);
    }
    let addrs: Vec<A> = probes.iter().map(|&(_, a)| A::from_u128(a)).collect();
    let table = |i: usize| &*fibs[probes[i].0 % fibs.len()];
    for prefetch in [None, Some(record as fn(&[*const u8]))] {
        let mut out = vec![Some(NextHopId(u32::MAX)); addrs.len()];
        let before = LINES.with(Cell::get);
        lookup_batch_each(table, &addrs, &mut out, prefetch);
        let lines = LINES.with(Cell::get) - before;
        for (i, (&addr, got)) in addrs.iter().zip(&out).enumerate() {
            let t = probes[i].0 % fibs.len();
            assert_eq!(*got, oracles[t].lookup(addr), "table {t}, {addr}");
            assert_eq!(*got, fibs[t].lookup(addr), "table {t}, {addr}");
        }
        // Every level prefetched for every address when asked, none when
        // not: five for a Poptrie (table, slot, group, direct entry, block),
        // three for a flat IPv4 table (table, bitmap word, line) and four
        // for a flat IPv6 one (its line is two cache lines), two for an
        // empty one (table, and where its top slot would be).
        let levels = |t: usize| {
            if fibs[t].is_empty() {
                2
            } else if fibs[t].is_flat() {
                if A::BITS == 32 {
                    3
                } else {
                    4
                }
            } else {
                5
            }
        };
        let want: usize = match prefetch {
            Some(_) => (0..addrs.len())
                .map(|i| levels(probes[i].0 % fibs.len()))
                .sum(),
            None => 0,
        };
        assert_eq!(lines, want);
    }
}

/// Probes: a table index and an address, from a base or anywhere.
fn probes_strategy(bits: u8) -> impl Strategy<Value = Vec<(usize, u128)>> {
    let width = u128::MAX >> (128 - u32::from(bits));
    proptest::collection::vec(
        (
            0usize..8,
            prop_oneof![
                Just(0u128),
                Just(0x0a << (bits - 8)),
                Just(0xc6 << (bits - 8)),
                Just(0x0b << (bits - 8)),
                any::<u128>()
            ],
            any::<u16>(),
        )
            .prop_map(move |(t, base, low)| (t, (base | u128::from(low)) & width)),
        0..150,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn ipv4_each_table_answers_for_its_own_addresses(
        tables in proptest::collection::vec(routes_strategy(32), 1..8),
        probes in probes_strategy(32),
        emptied in 0usize..10,
        big in proptest::bool::weighted(0.25),
    ) {
        check::<Ipv4Addr>(&tables, &probes, emptied, big);
    }

    #[test]
    fn ipv6_each_table_answers_for_its_own_addresses(
        tables in proptest::collection::vec(routes_strategy(128), 1..8),
        probes in probes_strategy(128),
        emptied in 0usize..10,
        big in proptest::bool::weighted(0.25),
    ) {
        check::<Ipv6Addr>(&tables, &probes, emptied, big);
    }
}
