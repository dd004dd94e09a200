//! Quick lookup timing (`cargo run -p vrhost-fib --release --example
//! lookup_timing`): `PoptrieLpm::lookup` and
//! `lookup_batch` against `MultibitLpm`, answers stored per 256-address
//! burst or folded, in interleaved rounds (best round of each), so that load
//! from other processes on a shared machine hits every variant alike and no
//! variant runs with the caches to itself. Used to choose between lookup
//! variants; the benchmark proper is `benches/lookup.rs`.

#[path = "../tests/synth/mod.rs"]
mod synth;

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant;

use vrhost_fib::{Lpm, MultibitLpm, NextHopId, PoptrieLpm};

fn main() {
    for n in [1_000_000] {
        let routes = synth::ipv4_table(n, 0x1f1b);
        let fib = PoptrieLpm::from_routes(routes.iter().copied());
        let mut multibit = MultibitLpm::new();
        for (p, nh) in &routes {
            multibit.insert(*p, *nh);
        }
        for (name, addrs) in [
            ("uniform", synth::uniform_addrs::<Ipv4Addr>(1 << 20, 1)),
            ("inside", synth::addrs_inside(&routes, 1 << 20, 2)),
        ] {
            let mut best = [f64::MAX; 5];
            let mut out = [None; 256];
            for _ in 0..8 {
                for (variant, best) in best.iter_mut().enumerate() {
                    let start = Instant::now();
                    let mut sum = 0u32;
                    for burst in addrs.chunks(256) {
                        match variant {
                            0 => {
                                for (a, o) in burst.iter().zip(out.iter_mut()) {
                                    *o = fib.lookup(*a);
                                }
                            }
                            1 => fib.lookup_batch(burst, &mut out[..burst.len()]),
                            2 => {
                                for (a, o) in burst.iter().zip(out.iter_mut()) {
                                    *o = multibit.lookup(*a);
                                }
                            }
                            3 => {
                                sum = burst.iter().fold(sum, |s, a| {
                                    s.wrapping_add(multibit.lookup(*a).map_or(0, |n| n.0))
                                })
                            }
                            _ => {
                                sum = burst.iter().fold(sum, |s, a| {
                                    s.wrapping_add(fib.lookup(*a).map_or(0, |n| n.0))
                                })
                            }
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
                "{n} routes, {name}: lookup {:.1} M/s, lookup_batch {:.1} M/s, MultibitLpm {:.1} M/s; \
                 folded: MultibitLpm {:.1} M/s, lookup {:.1} M/s",
                rate(best[0]),
                rate(best[1]),
                rate(best[2]),
                rate(best[3]),
                rate(best[4])
            );
        }
    }
}
