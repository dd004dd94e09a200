//! What a snapshot of a small table costs to take (`cargo run -p vrhost-fib
//! --release --example snapshot_timing`): tables of 100, 1,000 and 4,096
//! routes sampled from the synthetic IPv4 and IPv6 tables, best of 30 rounds
//! of 20 snapshots each. A snapshot of a table of at most
//! `FLAT_MAX_ROUTES` routes builds its flat form, so this is the cost a
//! publish of a small VR's table pays.

#[path = "../tests/synth/mod.rs"]
mod synth;

use std::hint::black_box;
use std::time::Instant;

use vrhost_fib::PoptrieLpm;

fn main() {
    let all = synth::ipv4_table(1_000_000, 0x1f1b);
    let all6 = synth::ipv6_table(230_000, 0x6f1b);
    for n in [100usize, 1000, 4096] {
        let t = PoptrieLpm::from_routes(all.iter().step_by(all.len() / n).take(n).copied());
        let t6 = PoptrieLpm::from_routes(all6.iter().step_by(all6.len() / n).take(n).copied());
        let (mut best, mut best6) = (f64::MAX, f64::MAX);
        for _ in 0..30 {
            let start = Instant::now();
            for _ in 0..20 {
                black_box(t.snapshot());
            }
            best = best.min(start.elapsed().as_secs_f64() / 20.0);
            let start = Instant::now();
            for _ in 0..20 {
                black_box(t6.snapshot());
            }
            best6 = best6.min(start.elapsed().as_secs_f64() / 20.0);
        }
        println!(
            "{n} routes: IPv4 {:.1} µs (flat form: {}), IPv6 {:.1} µs (flat form: {})",
            best * 1e6,
            t.snapshot().is_flat(),
            best6 * 1e6,
            t6.snapshot().is_flat()
        );
    }
}
