//! What compaction does to tables grown route by route
//! (`cargo run -p vrhost-fib --release --example compaction`): the synthetic
//! 1M-route IPv4 and 230k-route IPv6 tables inserted one by one, then
//! `compact` with the budget `vrhost run` uses, against a bulk load.

#[path = "../tests/synth/mod.rs"]
mod synth;

use std::time::Instant;

use vrhost_fib::{FibAddr, Lpm, NextHopId, PoptrieLpm, Prefix};

/// The route budget per call of `vrhost run` (`COMPACT_ROUTES_PER_TICK`).
const BUDGET: usize = 50_000;

fn report<A: FibAddr>(name: &str, routes: Vec<(Prefix<A>, NextHopId)>) {
    let bulk = PoptrieLpm::from_routes(routes.iter().copied());
    let mut grown = PoptrieLpm::new();
    for (p, nh) in &routes {
        grown.insert(*p, *nh);
    }
    let before = grown.as_snapshot().memory_bytes();
    let start = Instant::now();
    let (mut calls, mut longest) = (0, 0.0f64);
    loop {
        let t = Instant::now();
        if grown.compact(BUDGET) == 0 {
            break;
        }
        calls += 1;
        longest = longest.max(t.elapsed().as_secs_f64());
    }
    let stats = grown.stats();
    println!(
        "{name}: {before} bytes grown -> {} compacted ({} bulk-loaded); {calls} calls of \
         {BUDGET} routes, {:.1} ms in all, longest {:.1} ms; garbage words left {} of {}",
        grown.as_snapshot().memory_bytes(),
        bulk.as_snapshot().memory_bytes(),
        start.elapsed().as_secs_f64() * 1e3,
        longest * 1e3,
        stats.garbage_words,
        stats.words
    );
}

fn main() {
    report("IPv4 1M", synth::ipv4_table(1_000_000, 0x1f1b));
    report("IPv6 230k", synth::ipv6_table(230_000, 0x6f1b));
}
