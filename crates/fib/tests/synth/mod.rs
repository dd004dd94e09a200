//! Deterministic synthetic Internet-like route tables, shared by the scale
//! tests and the lookup benchmark (`#[path]`-included there), so both use the
//! very same table for a given seed.
//!
//! Real tables are not uniform: routes cluster in allocations that RIRs handed
//! out, and most /24s sit next to other /24s of the same holder. The model:
//! 1. allocations: random aligned blocks (IPv4 /12../22 inside unicast /8s;
//!    IPv6 /24../48 inside the RIR pools), one per ~40 (v4) or ~6 (v6) routes;
//! 2. each route picks an allocation (skewed: a few hold many routes), a
//!    length from the Internet's length mix (v4: 60% /24, then /22, /23, /21,
//!    /20, /19, /16, ...), and random bits inside the allocation. A length
//!    shorter than the allocation announces the allocation itself, so
//!    aggregates and their more-specifics nest as in a real table;
//! 3. next hops are one of 32 (peers/upstreams), skewed towards a few, and
//!    follow the origin: 80% of an allocation's routes share its next hop
//!    (same origin, same best path), the rest pick one at random (traffic
//!    engineering, other paths).
//!
//! Calibration: the IPv4 density (routes per allocation) was set against
//! 565k real prefixes (npm `@ip-location-db/asn`, ranges split into
//! prefixes): those fill 44k distinct /18s with routes longer than /18; 565k
//! synthetic routes fill 47k (1M fill about 70k). A uniform spread would fill
//! ~200k and overstate every trie's size.
#![allow(dead_code)] // each includer uses a different part

use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrhost_fib::{FibAddr, NextHopId, Prefix};

/// IPv4 length mix, per 10,000 routes (about a 2024 DFZ table).
const V4_LENGTHS: &[(u8, u32)] = &[
    (8, 1),
    (10, 1),
    (11, 2),
    (12, 5),
    (13, 9),
    (14, 17),
    (15, 25),
    (16, 130),
    (17, 80),
    (18, 140),
    (19, 250),
    (20, 400),
    (21, 450),
    (22, 1150),
    (23, 950),
    (24, 6000),
    (25, 6),
    (26, 6),
    (27, 4),
    (28, 3),
    (29, 3),
    (30, 3),
    (32, 3),
];

/// IPv4 allocation sizes, relative weights.
const V4_ALLOCATIONS: &[(u8, u32)] = &[
    (12, 1),
    (13, 2),
    (14, 4),
    (15, 6),
    (16, 14),
    (17, 8),
    (18, 10),
    (19, 14),
    (20, 14),
    (21, 10),
    (22, 17),
];

/// IPv6 length mix, per 1,000 routes (about a 2024 DFZ table: /48 first,
/// then /32 and /44../29).
const V6_LENGTHS: &[(u8, u32)] = &[
    (19, 1),
    (20, 1),
    (22, 1),
    (24, 2),
    (28, 6),
    (29, 40),
    (30, 8),
    (31, 4),
    (32, 150),
    (33, 8),
    (34, 8),
    (35, 6),
    (36, 40),
    (38, 8),
    (40, 60),
    (42, 10),
    (44, 80),
    (45, 8),
    (46, 20),
    (47, 20),
    (48, 500),
    (56, 3),
    (64, 3),
];

/// IPv6 allocation sizes, relative weights (LIR /29../32, PI /48).
const V6_ALLOCATIONS: &[(u8, u32)] = &[
    (24, 1),
    (28, 3),
    (29, 30),
    (32, 50),
    (36, 3),
    (40, 3),
    (44, 2),
    (48, 8),
];

/// IPv6 RIR pools (prefix, length, weight).
const V6_POOLS: &[(u128, u8, u32)] = &[
    (0x2001 << 112, 16, 10),
    (0x2400 << 112, 12, 22),
    (0x2600 << 112, 12, 28),
    (0x2800 << 112, 12, 8),
    (0x2a00 << 112, 12, 30),
    (0x2c00 << 112, 12, 2),
];

fn pick<T: Copy>(rng: &mut SmallRng, table: &[(T, u32)]) -> T {
    let total: u32 = table.iter().map(|e| e.1).sum();
    let mut x = rng.gen_range(0..total);
    for &(value, weight) in table {
        if x < weight {
            return value;
        }
        x -= weight;
    }
    unreachable!()
}

/// Skewed next hop: half the routes on 4 next hops, the rest on 32.
fn next_hop(rng: &mut SmallRng) -> NextHopId {
    NextHopId(if rng.gen_bool(0.5) {
        rng.gen_range(0..4)
    } else {
        rng.gen_range(0..32)
    })
}

/// Random bits of `width` under the top `len` bits of `base`.
fn inside(rng: &mut SmallRng, base: u128, len: u8, width: u8) -> u128 {
    let host = if len >= width {
        0
    } else {
        (u128::MAX >> (128 - u32::from(width))) >> len
    };
    base | (rng.gen::<u128>() & host)
}

fn table<A: FibAddr>(
    n: usize,
    seed: u64,
    routes_per_allocation: usize,
    lengths: &[(u8, u32)],
    allocation: impl Fn(&mut SmallRng) -> (u128, u8),
) -> Vec<(Prefix<A>, NextHopId)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let allocations: Vec<(u128, u8, NextHopId)> = (0..n / routes_per_allocation + 1)
        .map(|_| {
            let (base, len) = allocation(&mut rng);
            (base, len, next_hop(&mut rng))
        })
        .collect();
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        // u² skews the choice towards the first allocations.
        let u: f64 = rng.gen();
        let (base, alloc_len, origin_nh) = allocations[(u * u * allocations.len() as f64) as usize];
        let len = pick(&mut rng, lengths).max(alloc_len);
        let addr = inside(&mut rng, base, alloc_len, A::BITS);
        let prefix = Prefix::new_truncating(A::from_u128(addr), len).unwrap();
        let nh = if rng.gen_bool(0.8) {
            origin_nh
        } else {
            next_hop(&mut rng)
        };
        if seen.insert(prefix) {
            out.push((prefix, nh));
        }
    }
    out
}

/// `n` IPv4 routes; the same `(n, seed)` always gives the same list.
pub fn ipv4_table(n: usize, seed: u64) -> Vec<(Prefix<Ipv4Addr>, NextHopId)> {
    table(n, seed, 40, V4_LENGTHS, |rng| {
        // Unicast /8s, without 0, 10 and 127.
        let slash8 = loop {
            let b = rng.gen_range(1u128..224);
            if b != 10 && b != 127 {
                break b;
            }
        };
        let len = pick(rng, V4_ALLOCATIONS);
        let addr = inside(rng, slash8 << 24, 8, 32) & (u128::MAX << (32 - len));
        (addr & 0xffff_ffff, len)
    })
}

/// `n` IPv6 routes; the same `(n, seed)` always gives the same list.
pub fn ipv6_table(n: usize, seed: u64) -> Vec<(Prefix<Ipv6Addr>, NextHopId)> {
    let pools: Vec<((u128, u8), u32)> = V6_POOLS.iter().map(|&(p, l, w)| ((p, l), w)).collect();
    table(n, seed, 6, V6_LENGTHS, move |rng| {
        let (pool, pool_len) = pick(rng, &pools);
        let len = pick(rng, V6_ALLOCATIONS);
        let addr = inside(rng, pool, pool_len, 128) & (u128::MAX << (128 - len));
        (addr, len)
    })
}

/// `n` addresses drawn uniformly from the whole address space.
pub fn uniform_addrs<A: FibAddr>(n: usize, seed: u64) -> Vec<A> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| A::from_u128(rng.gen())).collect()
}

/// `n` addresses inside routes of `routes` (a random route, a random host).
pub fn addrs_inside<A: FibAddr>(routes: &[(Prefix<A>, NextHopId)], n: usize, seed: u64) -> Vec<A> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let (prefix, _) = routes[rng.gen_range(0..routes.len())];
            A::from_u128(inside(
                &mut rng,
                prefix.addr().to_u128(),
                128 - A::BITS + prefix.len(),
                128,
            ))
        })
        .collect()
}
