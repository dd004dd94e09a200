//! Quick lookup timing (ignored; `cargo test -p vrhost-fib --release --test
//! lookup_timing -- --ignored --nocapture`): `lookup` against `lookup_batch`
//! in interleaved rounds, best round of each, so that load from other
//! processes on a shared machine hits both alike. Used to choose between
//! lookup variants; the benchmark proper is `benches/lookup.rs`.

mod synth;

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant;

use vrhost_fib::{Lpm, NextHopId, PoptrieLpm};

#[test]
#[ignore]
fn lookup_vs_batch() {
    for n in [565_000, 1_000_000] {
        let routes = synth::ipv4_table(n, 0x1f1b);
        let fib = PoptrieLpm::from_routes(routes.iter().copied());
        for (name, addrs) in [
            ("uniform", synth::uniform_addrs::<Ipv4Addr>(1 << 18, 1)),
            ("inside", synth::addrs_inside(&routes, 1 << 18, 2)),
        ] {
            let mut best = [f64::MAX; 2];
            let mut out = [None; 256];
            for _ in 0..20 {
                for (variant, best) in best.iter_mut().enumerate() {
                    let start = Instant::now();
                    let mut sum = 0u32;
                    for burst in addrs.chunks(256) {
                        if variant == 0 {
                            for (a, o) in burst.iter().zip(out.iter_mut()) {
                                *o = fib.lookup(*a);
                            }
                        } else {
                            fib.lookup_batch(burst, &mut out[..burst.len()]);
                        }
                        sum = out.iter().fold(sum, |s, nh: &Option<NextHopId>| {
                            s.wrapping_add(nh.map_or(0, |n| n.0))
                        });
                    }
                    black_box(sum);
                    *best = best.min(start.elapsed().as_secs_f64());
                }
            }
            let rate = |t: f64| addrs.len() as f64 / t / 1e6;
            println!(
                "{n} routes, {name}: lookup {:.1} M/s, lookup_batch {:.1} M/s",
                rate(best[0]),
                rate(best[1])
            );
        }
    }
}
