//! LPM micro-benchmark: vrhost's Poptrie FIB against the alternatives, on the
//! same synthetic tables and the same addresses, in one run.
//!
//! Run (about 5 minutes; needs ~1.5 GiB of memory for the 1M-route builds):
//!
//! ```text
//! cargo bench -p vrhost-fib --bench lookup
//! ```
//!
//! Add `-- v4_uniform` (any criterion filter) to run some lookup groups only
//! (`-- "small_|many_vrs"`: small tables and 1000 VRs, flat form against
//! Poptrie);
//! the summary table (build time, memory, lookups/s by best of 7 passes) is
//! printed first, on stderr (`FIB_BENCH_NO_SUMMARY=1` skips it).
//! `FIB_BENCH_ROUTES=N` shrinks the IPv4 table for a quick try.
//!
//! Tables (tests/synth/mod.rs, fixed seeds): 1M IPv4 routes with the
//! Internet's length mix (60% /24, then /22, /23, /21, /20, /19, /16, ...),
//! clustered in allocations with nested aggregates; 230k IPv6 routes (mostly
//! /48, /32, /44, /40, /29). Addresses: 1M uniformly random, and 1M inside
//! random routes of the table.
//!
//! Contenders: `PoptrieLpm` (`lookup` one by one, and `lookup_batch`),
//! `MultibitLpm` (8-bit strides), the `prefix-trie` crate (`PrefixMap`),
//! the `iptrie` crate (LC-trie after `compress`), and a plain DIR-24-8
//! (below) as the speed yardstick. Memory: `memory_bytes()` where the table
//! reports it; for the crates, the resident-set growth of a child process
//! that builds only that table (an estimate, labelled "rss").

#[path = "../tests/synth/mod.rs"]
mod synth;

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use vrhost_fib::{
    lookup_batch_each, FibAddr, FibSnapshot, Lpm, MultibitLpm, NextHopId, PoptrieLpm, Prefix,
};

/// IPv4 routes in the full table.
const V4_ROUTES: usize = 1_000_000;
/// IPv6 routes in the full table.
const V6_ROUTES: usize = 230_000;
/// Addresses per set. A million, so that every structure sees its whole
/// working set: with a few thousand addresses even a 64 MiB DIR-24-8 runs
/// from cache.
const ADDRS: usize = 1 << 20;
/// `lookup_batch` is called on bursts of this many addresses, as the
/// dataplane does (DESIGN.md: rx bursts of up to 256 frames).
const BURST: usize = 256;

fn v4_routes() -> Vec<(Prefix<Ipv4Addr>, NextHopId)> {
    let n = std::env::var("FIB_BENCH_ROUTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(V4_ROUTES);
    synth::ipv4_table(n, 0x1f1b)
}

fn v6_routes() -> Vec<(Prefix<Ipv6Addr>, NextHopId)> {
    synth::ipv6_table(V6_ROUTES, 0x6f1b)
}

// ---------------------------------------------------------------------------
// DIR-24-8 (Gupta, Lin, McKeown 1998), the yardstick: 2^24 × 4-byte first
// level (64 MiB), 256-entry second-level groups for /25../32.

/// Entry tag: the low bits index a 256-entry tbl8 group.
const TBL8: u32 = 1 << 31;

struct Dir248 {
    /// Indexed by the top 24 bits; `Box<[_; N]>` so `addr >> 8` needs no bounds check.
    tbl24: Box<[u32; 1 << 24]>,
    tbl8: Vec<u32>,
}

impl Dir248 {
    fn build(routes: &[(Prefix<Ipv4Addr>, NextHopId)]) -> Self {
        let mut sorted: Vec<_> = routes.to_vec();
        // Shorter first, so longer prefixes paint over them.
        sorted.sort_by_key(|(p, _)| p.len());
        let mut tbl24: Box<[u32; 1 << 24]> = vec![0u32; 1 << 24].try_into().unwrap();
        let mut tbl8 = Vec::new();
        for (p, nh) in sorted {
            let value = nh.0 + 1;
            let addr = p.addr().to_bits();
            if p.len() <= 24 {
                let first = (addr >> 8) as usize;
                for e in &mut tbl24[first..first + (1 << (24 - p.len()))] {
                    // Entries already split by a longer route cannot exist
                    // yet: those are painted after every ≤ /24.
                    *e = value;
                }
            } else {
                let e = &mut tbl24[(addr >> 8) as usize];
                if *e & TBL8 == 0 {
                    let group = (tbl8.len() >> 8) as u32;
                    tbl8.extend(std::iter::repeat_n(*e, 256));
                    *e = TBL8 | group;
                }
                let base = ((*e & !TBL8) as usize) << 8;
                let first = base + (addr & 0xff) as usize;
                tbl8[first..first + (1 << (32 - p.len()))].fill(value);
            }
        }
        Self { tbl24, tbl8 }
    }

    #[inline]
    fn lookup(&self, addr: Ipv4Addr) -> Option<NextHopId> {
        let a = addr.to_bits();
        let mut e = self.tbl24[(a >> 8) as usize];
        if e & TBL8 != 0 {
            e = self.tbl8[(((e & !TBL8) as usize) << 8) | (a & 0xff) as usize];
        }
        e.checked_sub(1).map(NextHopId)
    }

    fn memory_bytes(&self) -> usize {
        self.tbl24.len() * 4 + self.tbl8.capacity() * 4
    }
}

// ---------------------------------------------------------------------------
// The crates, behind one shape.

type PrefixTrie4 = prefix_trie::PrefixMap<(u32, u8), u32>;
type PrefixTrie6 = prefix_trie::PrefixMap<(u128, u8), u32>;

fn prefix_trie4(routes: &[(Prefix<Ipv4Addr>, NextHopId)]) -> PrefixTrie4 {
    let mut map = PrefixTrie4::new();
    for (p, nh) in routes {
        map.insert((p.addr().to_bits(), p.len()), nh.0);
    }
    map
}

fn prefix_trie6(routes: &[(Prefix<Ipv6Addr>, NextHopId)]) -> PrefixTrie6 {
    let mut map = PrefixTrie6::new();
    for (p, nh) in routes {
        map.insert((p.addr().to_bits(), p.len()), nh.0);
    }
    map
}

type IpTrie4 = iptrie::Ipv4LCTrieMap<u32>;
type IpTrie6 = iptrie::Ipv6LCTrieMap<u32>;

/// `u32::MAX` on the root prefix means "no route".
fn iptrie4(routes: &[(Prefix<Ipv4Addr>, NextHopId)]) -> IpTrie4 {
    let mut map = iptrie::Ipv4RTrieMap::with_root(u32::MAX);
    for (p, nh) in routes {
        map.insert(iptrie::Ipv4Prefix::new(p.addr(), p.len()).unwrap(), nh.0);
    }
    map.compress()
}

fn iptrie6(routes: &[(Prefix<Ipv6Addr>, NextHopId)]) -> IpTrie6 {
    let mut map = iptrie::Ipv6RTrieMap::with_root(u32::MAX);
    for (p, nh) in routes {
        map.insert(iptrie::Ipv6Prefix::new(p.addr(), p.len()).unwrap(), nh.0);
    }
    map.compress()
}

fn multibit<A: FibAddr>(routes: &[(Prefix<A>, NextHopId)]) -> MultibitLpm<A> {
    let mut t = MultibitLpm::new();
    for (p, nh) in routes {
        t.insert(*p, *nh);
    }
    t
}

fn poptrie_inserts<A: FibAddr>(routes: &[(Prefix<A>, NextHopId)]) -> PoptrieLpm<A> {
    let mut t = PoptrieLpm::new();
    for (p, nh) in routes {
        t.insert(*p, *nh);
    }
    t
}

// ---------------------------------------------------------------------------
// Measurement helpers.

/// Looks `addrs` up one burst at a time, as a worker would; folds the
/// answers so that none can be optimised away.
#[inline(always)]
fn bursts<A: Copy>(addrs: &[A], batch: impl Fn(&[A], &mut [Option<NextHopId>])) -> u32 {
    let mut out = [None; BURST];
    let mut sum = 0u32;
    for burst in addrs.chunks(BURST) {
        let out = &mut out[..burst.len()];
        batch(burst, out);
        sum = out
            .iter()
            .fold(sum, |s, nh| s.wrapping_add(nh.map_or(0, |n| n.0)));
    }
    black_box(sum)
}

/// Resident set size of this process, from /proc/self/statm.
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Child-process mode: build one structure, print the RSS it added.
fn measure_child(which: &str) {
    let v4 = v4_routes();
    let v6 = v6_routes();
    let before = rss_bytes();
    let kept: Box<dyn std::any::Any> = match which {
        "prefix_trie_v4" => Box::new(prefix_trie4(&v4)),
        "iptrie_v4" => Box::new(iptrie4(&v4)),
        "prefix_trie_v6" => Box::new(prefix_trie6(&v6)),
        "iptrie_v6" => Box::new(iptrie6(&v6)),
        "poptrie_v4" => Box::new(PoptrieLpm::from_routes(v4.iter().copied())),
        _ => panic!("unknown structure {which}"),
    };
    let grown = rss_bytes().saturating_sub(before);
    black_box(&kept);
    println!("{grown}");
}

/// RSS growth of building `which` in a fresh child process.
fn child_rss(which: &str) -> Option<usize> {
    let out = std::process::Command::new(std::env::current_exe().ok()?)
        .env("FIB_BENCH_MEASURE", which)
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// Best-of-`runs` time of `f`.
fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        let out = f();
        best = best.min(start.elapsed());
        last = Some(out);
    }
    (best, last.unwrap())
}

/// Millions of lookups per second of `look` over `addrs`, best of 7 passes.
fn mlps<A: Copy>(addrs: &[A], mut look: impl FnMut(A) -> Option<NextHopId>) -> f64 {
    let (t, _) = best(7, || {
        let mut hits = 0u32;
        for &a in addrs {
            hits = hits.wrapping_add(look(a).map_or(0, |nh| nh.0));
        }
        black_box(hits)
    });
    addrs.len() as f64 / t.as_secs_f64() / 1e6
}

/// Same, through a batch call per burst of [`BURST`] addresses.
fn mlps_batch<A: Copy>(addrs: &[A], batch: impl Fn(&[A], &mut [Option<NextHopId>])) -> f64 {
    let (t, _) = best(7, || bursts(addrs, &batch));
    addrs.len() as f64 / t.as_secs_f64() / 1e6
}

fn mib(bytes: usize) -> String {
    format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64)
}

/// One row of the summary table.
fn row(name: &str, build: Duration, memory: &str, uniform: f64, inside: f64) {
    eprintln!(
        "| {name:<28} | {:>9.0} ms | {memory:>18} | {uniform:>8.1} M/s | {inside:>8.1} M/s |",
        build.as_secs_f64() * 1e3
    );
}

fn header(title: &str) {
    eprintln!("\n{title}");
    eprintln!("| structure                    | build        | memory             | uniform      | inside       |");
    eprintln!("|------------------------------|--------------|--------------------|--------------|--------------|");
}

// ---------------------------------------------------------------------------
// The summary: build, memory, lookups/s for every contender.

fn summary_v4() {
    let routes = v4_routes();
    let uniform: Vec<Ipv4Addr> = synth::uniform_addrs(ADDRS, 1);
    let inside: Vec<Ipv4Addr> = synth::addrs_inside(&routes, ADDRS, 2);
    header(&format!(
        "IPv4, {} routes, {} addresses per set",
        routes.len(),
        ADDRS
    ));

    let (t, fib) = best(3, || PoptrieLpm::from_routes(routes.iter().copied()));
    let mem = format!(
        "{} (+{} rib)",
        mib(fib.lookup_bytes()),
        mib(fib.memory_bytes() - fib.lookup_bytes())
    );
    row(
        "PoptrieLpm lookup",
        t,
        &mem,
        mlps(&uniform, |a| fib.lookup(a)),
        mlps(&inside, |a| fib.lookup(a)),
    );
    row(
        "PoptrieLpm lookup_batch",
        t,
        &mem,
        mlps_batch(&uniform, |a, o| fib.lookup_batch(a, o)),
        mlps_batch(&inside, |a, o| fib.lookup_batch(a, o)),
    );
    eprintln!(
        "|   bulk load: {:.2} M routes/s; stats: {:?}",
        routes.len() as f64 / t.as_secs_f64() / 1e6,
        fib.stats()
    );
    let (t, inc) = best(1, || poptrie_inserts(&routes));
    eprintln!(
        "|   1 by 1 inserts: {:.0} ms ({:.2} M routes/s), lookup {}",
        t.as_secs_f64() * 1e3,
        routes.len() as f64 / t.as_secs_f64() / 1e6,
        mib(inc.lookup_bytes())
    );
    drop(inc);

    let (t, dir) = best(1, || Dir248::build(&routes));
    row(
        "DIR-24-8",
        t,
        &mib(dir.memory_bytes()),
        mlps(&uniform, |a| dir.lookup(a)),
        mlps(&inside, |a| dir.lookup(a)),
    );
    drop(dir);

    let (t, mb) = best(1, || multibit(&routes));
    row(
        "MultibitLpm (stride 8)",
        t,
        &mib(mb.memory_bytes()),
        mlps(&uniform, |a| mb.lookup(a)),
        mlps(&inside, |a| mb.lookup(a)),
    );
    drop(mb);

    let (t, pt) = best(1, || prefix_trie4(&routes));
    let mem = child_rss("prefix_trie_v4").map_or("?".into(), |b| format!("{} rss", mib(b)));
    let look = |a: Ipv4Addr| pt.get_lpm(&(a.to_bits(), 32)).map(|(_, v)| NextHopId(*v));
    row(
        "prefix-trie 0.10 PrefixMap",
        t,
        &mem,
        mlps(&uniform, look),
        mlps(&inside, look),
    );
    drop(pt);

    let (t, ip) = best(1, || iptrie4(&routes));
    let mem = child_rss("iptrie_v4").map_or("?".into(), |b| format!("{} rss", mib(b)));
    let look = |a: Ipv4Addr| {
        Some(*ip.lookup(&a).1)
            .filter(|v| *v != u32::MAX)
            .map(NextHopId)
    };
    row(
        "iptrie 0.11 LC-trie",
        t,
        &mem,
        mlps(&uniform, look),
        mlps(&inside, look),
    );
    if let Some(b) = child_rss("poptrie_v4") {
        eprintln!(
            "|   (rss method on PoptrieLpm::from_routes for calibration: {})",
            mib(b)
        );
    }
}

fn summary_v6() {
    let routes = v6_routes();
    // Uniform IPv6 addresses almost never match; draw them from 2000::/3.
    let uniform: Vec<Ipv6Addr> = synth::uniform_addrs::<Ipv6Addr>(ADDRS, 3)
        .into_iter()
        .map(|a| Ipv6Addr::from_bits(a.to_bits() >> 3 | 0x2000 << 112))
        .collect();
    let inside: Vec<Ipv6Addr> = synth::addrs_inside(&routes, ADDRS, 4);
    header(&format!(
        "IPv6, {} routes (\"uniform\" = uniform in 2000::/3)",
        routes.len()
    ));
    let (t, fib) = best(3, || PoptrieLpm::from_routes(routes.iter().copied()));
    let mem = format!(
        "{} (+{} rib)",
        mib(fib.lookup_bytes()),
        mib(fib.memory_bytes() - fib.lookup_bytes())
    );
    row(
        "PoptrieLpm lookup",
        t,
        &mem,
        mlps(&uniform, |a| fib.lookup(a)),
        mlps(&inside, |a| fib.lookup(a)),
    );
    row(
        "PoptrieLpm lookup_batch",
        t,
        &mem,
        mlps_batch(&uniform, |a, o| fib.lookup_batch(a, o)),
        mlps_batch(&inside, |a, o| fib.lookup_batch(a, o)),
    );
    eprintln!("|   stats: {:?}", fib.stats());
    drop(fib);
    let (t, mb) = best(1, || multibit(&routes));
    row(
        "MultibitLpm (stride 8)",
        t,
        &mib(mb.memory_bytes()),
        mlps(&uniform, |a| mb.lookup(a)),
        mlps(&inside, |a| mb.lookup(a)),
    );
    drop(mb);
    let (t, pt) = best(1, || prefix_trie6(&routes));
    let mem = child_rss("prefix_trie_v6").map_or("?".into(), |b| format!("{} rss", mib(b)));
    let look = |a: Ipv6Addr| pt.get_lpm(&(a.to_bits(), 128)).map(|(_, v)| NextHopId(*v));
    row(
        "prefix-trie 0.10 PrefixMap",
        t,
        &mem,
        mlps(&uniform, look),
        mlps(&inside, look),
    );
    drop(pt);
    let (t, ip) = best(1, || iptrie6(&routes));
    let mem = child_rss("iptrie_v6").map_or("?".into(), |b| format!("{} rss", mib(b)));
    let look = |a: Ipv6Addr| {
        Some(*ip.lookup(&a).1)
            .filter(|v| *v != u32::MAX)
            .map(NextHopId)
    };
    row(
        "iptrie 0.11 LC-trie",
        t,
        &mem,
        mlps(&uniform, look),
        mlps(&inside, look),
    );
}

/// Many small VRs: total memory of 1000 tables of 1k routes (inserted one by
/// one, as the engine does), and of a 10-route table.
fn summary_many_vrs() {
    eprintln!(
        "\nMany VRs (routes inserted one by one; memory_bytes = lookup structure + route map)"
    );
    for (vrs, per_vr) in [(1, 10), (1000, 1000)] {
        let start = Instant::now();
        let (mut pop, mut pop_lookup, mut mb) = (0, 0, 0);
        for vr in 0..vrs {
            let routes = synth::ipv4_table(per_vr, 1000 + vr as u64);
            let t = poptrie_inserts(&routes);
            pop += t.memory_bytes();
            pop_lookup += t.lookup_bytes();
            mb += multibit(&routes).memory_bytes();
        }
        eprintln!(
            "| {vrs} VR(s) × {per_vr} IPv4 routes: PoptrieLpm {} (lookup part {}), MultibitLpm {} [{:.1} s]",
            if pop < 1 << 20 { format!("{:.1} KiB", pop as f64 / 1024.0) } else { mib(pop) },
            if pop_lookup < 1 << 20 { format!("{:.1} KiB", pop_lookup as f64 / 1024.0) } else { mib(pop_lookup) },
            if mb < 1 << 20 { format!("{:.1} KiB", mb as f64 / 1024.0) } else { mib(mb) },
            start.elapsed().as_secs_f64()
        );
    }
    let routes = synth::ipv6_table(10, 7);
    let t = poptrie_inserts(&routes);
    eprintln!(
        "| 1 VR × 10 IPv6 routes: PoptrieLpm {:.1} KiB",
        t.memory_bytes() as f64 / 1024.0
    );
    // Pessimistic: each VR's 1k routes drawn from the whole full table, so
    // they spread over ~200 /8s instead of clustering in a few allocations.
    let full = v4_routes();
    let (mut pop, mut pop_lookup) = (0, 0);
    for vr in 0..1000u64 {
        let mut x = vr.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let routes: Vec<_> = (0..1000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                full[(x % full.len() as u64) as usize]
            })
            .collect();
        let t = poptrie_inserts(&routes);
        pop += t.memory_bytes();
        pop_lookup += t.lookup_bytes();
    }
    eprintln!(
        "| 1000 VRs × 1000 IPv4 routes sampled across the full table: PoptrieLpm {} (lookup part {})",
        mib(pop),
        mib(pop_lookup)
    );
}

// ---------------------------------------------------------------------------
// Criterion: lookups/s with confidence intervals, same tables and addresses.

fn lookups(c: &mut Criterion) {
    let routes = v4_routes();
    let sets = [
        ("v4_uniform", synth::uniform_addrs::<Ipv4Addr>(ADDRS, 1)),
        ("v4_inside", synth::addrs_inside(&routes, ADDRS, 2)),
    ];
    let fib = PoptrieLpm::from_routes(routes.iter().copied());
    let dir = Dir248::build(&routes);
    let mb = multibit(&routes);
    let pt = prefix_trie4(&routes);
    let ip = iptrie4(&routes);
    for (name, addrs) in &sets {
        let mut group = c.benchmark_group(*name);
        group.throughput(Throughput::Elements(addrs.len() as u64));
        group.bench_function("poptrie_lookup", |b| {
            b.iter(|| {
                addrs
                    .iter()
                    .map(|a| fib.lookup(*a).map_or(0, |n| n.0))
                    .fold(0, u32::wrapping_add)
            })
        });
        group.bench_function("poptrie_lookup_batch", |b| {
            b.iter(|| bursts(addrs, |a, o| fib.lookup_batch(a, o)))
        });
        group.bench_function("dir24_8", |b| {
            b.iter(|| {
                addrs
                    .iter()
                    .map(|a| dir.lookup(*a).map_or(0, |n| n.0))
                    .fold(0, u32::wrapping_add)
            })
        });
        group.bench_function("multibit", |b| {
            b.iter(|| {
                addrs
                    .iter()
                    .map(|a| mb.lookup(*a).map_or(0, |n| n.0))
                    .fold(0, u32::wrapping_add)
            })
        });
        group.bench_function("prefix_trie", |b| {
            b.iter(|| {
                addrs
                    .iter()
                    .map(|a| pt.get_lpm(&(a.to_bits(), 32)).map_or(0, |(_, v)| *v))
                    .fold(0, u32::wrapping_add)
            })
        });
        group.bench_function("iptrie", |b| {
            b.iter(|| {
                addrs
                    .iter()
                    .map(|a| *ip.lookup(a).1)
                    .fold(0, u32::wrapping_add)
            })
        });
        group.finish();
    }
    drop((fib, dir, mb, pt, ip));

    let routes6 = v6_routes();
    let inside6: Vec<Ipv6Addr> = synth::addrs_inside(&routes6, ADDRS, 4);
    let fib6 = PoptrieLpm::from_routes(routes6.iter().copied());
    let mut group = c.benchmark_group("v6_inside");
    group.throughput(Throughput::Elements(ADDRS as u64));
    group.bench_function("poptrie_lookup", |b| {
        b.iter(|| {
            inside6
                .iter()
                .map(|a| fib6.lookup(*a).map_or(0, |n| n.0))
                .fold(0, u32::wrapping_add)
        })
    });
    group.bench_function("poptrie_lookup_batch", |b| {
        b.iter(|| bursts(&inside6, |a, o| fib6.lookup_batch(a, o)))
    });
    group.finish();

    let mut group = c.benchmark_group("bulk_load");
    group.sample_size(10);
    group.throughput(Throughput::Elements(routes.len() as u64));
    group.bench_function(BenchmarkId::new("poptrie_v4", routes.len()), |b| {
        b.iter(|| PoptrieLpm::from_routes(routes.iter().copied()))
    });
    group.finish();
}

// ---------------------------------------------------------------------------
// Small tables: the same snapshot read through its flat form (what
// `PoptrieLpm::snapshot` publishes for up to `FLAT_MAX_ROUTES` routes) and
// through the Poptrie alone (`as_snapshot`, the writer's own view, which
// has no flat form), side by side in one process.

/// `routes` drawn from `full` with a fixed xorshift, as one VR's table.
fn sample<A: FibAddr>(full: &[(Prefix<A>, NextHopId)], n: usize, seed: u64) -> PoptrieLpm<A> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut t = PoptrieLpm::new();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (p, nh) = full[(x % full.len() as u64) as usize];
        t.insert(p, nh);
    }
    t
}

/// The routes of `t`.
fn routes_of<A: FibAddr>(t: &PoptrieLpm<A>) -> Vec<(Prefix<A>, NextHopId)> {
    let mut r = Vec::new();
    t.for_each(&mut |p, nh| r.push((p, nh)));
    r
}

/// One table of `n` routes: `lookup_batch` through each form.
fn small_table<A: FibAddr>(
    c: &mut Criterion,
    name: &str,
    full: &[(Prefix<A>, NextHopId)],
    n: usize,
) {
    let table = sample(full, n, 3);
    let flat = table.snapshot();
    let addrs: Vec<A> = synth::addrs_inside(&routes_of(&table), ADDRS, 5);
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(addrs.len() as u64));
    group.bench_function("poptrie", |b| {
        b.iter(|| bursts(&addrs, |a, o| table.as_snapshot().lookup_batch(a, o)))
    });
    group.bench_function("flat", |b| {
        b.iter(|| bursts(&addrs, |a, o| flat.lookup_batch(a, o)))
    });
    group.finish();
}

fn small_tables(c: &mut Criterion) {
    let v4 = v4_routes();
    small_table(c, "small_v4_16", &v4, 16);
    small_table(c, "small_v4_1000", &v4, 1000);
    // 1000 VRs × 1000 routes sampled across the full table, every address
    // in its own VR's table, one `lookup_batch_each` per burst.
    let tables: Vec<PoptrieLpm<Ipv4Addr>> =
        (0..1000).map(|vr| sample(&v4, 1000, vr + 10)).collect();
    let flats: Vec<std::sync::Arc<FibSnapshot<Ipv4Addr>>> =
        tables.iter().map(PoptrieLpm::snapshot).collect();
    let vr_routes: Vec<_> = tables.iter().map(routes_of).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let lanes: Vec<(usize, Ipv4Addr)> = (0..ADDRS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let vr = (x % 1000) as usize;
            (vr, synth::addrs_inside(&vr_routes[vr], 1, x)[0])
        })
        .collect();
    drop(v4);
    let addrs: Vec<Ipv4Addr> = lanes.iter().map(|&(_, a)| a).collect();
    let mut group = c.benchmark_group("many_vrs_1000x1000");
    group.throughput(Throughput::Elements(addrs.len() as u64));
    for (form, flat) in [("poptrie", false), ("flat", true)] {
        group.bench_function(form, |b| {
            b.iter(|| {
                let mut out = vec![None; BURST];
                let mut sum = 0u32;
                for (k, a) in addrs.chunks(BURST).enumerate() {
                    let at = k * BURST;
                    let table = |i: usize| -> &FibSnapshot<Ipv4Addr> {
                        let vr = lanes[at + i].0;
                        if flat {
                            &flats[vr]
                        } else {
                            tables[vr].as_snapshot()
                        }
                    };
                    lookup_batch_each(table, a, &mut out[..a.len()], None);
                    sum = out[..a.len()]
                        .iter()
                        .fold(sum, |s, n| s.wrapping_add(n.map_or(0, |n| n.0)));
                }
                black_box(sum)
            })
        });
    }
    // The same snapshots by value, side by side: the flat header of every
    // VR in one dense array, so a lookup's first cold line is its index.
    let dense: Vec<FibSnapshot<Ipv4Addr>> = flats.iter().map(|s| (**s).clone()).collect();
    group.bench_function("flat_dense_headers", |b| {
        b.iter(|| {
            let mut out = vec![None; BURST];
            let mut sum = 0u32;
            for (k, a) in addrs.chunks(BURST).enumerate() {
                let at = k * BURST;
                lookup_batch_each(|i| &dense[lanes[at + i].0], a, &mut out[..a.len()], None);
                sum = out[..a.len()]
                    .iter()
                    .fold(sum, |s, n| s.wrapping_add(n.map_or(0, |n| n.0)));
            }
            black_box(sum)
        })
    });
    // The baseline of the issue's target: one table holding every VR's
    // routes, the same addresses looked up in it.
    let mut union = PoptrieLpm::new();
    for r in &vr_routes {
        for &(p, nh) in r {
            union.insert(p, nh);
        }
    }
    group.bench_function("one_table_same_routes", |b| {
        b.iter(|| bursts(&addrs, |a, o| union.as_snapshot().lookup_batch(a, o)))
    });
    group.finish();
    let v6 = v6_routes();
    small_table(c, "small_v6_16", &v6, 16);
    small_table(c, "small_v6_1000", &v6, 1000);
}

fn main() {
    if let Ok(which) = std::env::var("FIB_BENCH_MEASURE") {
        measure_child(&which);
        return;
    }
    // `cargo test --benches` runs bench targets with `--bench` absent; keep it quick.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::var_os("FIB_BENCH_NO_SUMMARY").is_none() {
        summary_v4();
        summary_v6();
        summary_many_vrs();
    }
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    lookups(&mut c);
    small_tables(&mut c);
    c.final_summary();
}
