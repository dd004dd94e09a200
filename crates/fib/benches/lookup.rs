//! Lookup throughput of `MultibitLpm` on a synthetic IPv4 table:
//! 100k random prefixes of length /16 to /24 and uniformly random destinations.
//!
//! Run with `cargo bench -p vrhost-fib --bench lookup`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vrhost_fib::{Fib4, Lpm, NextHopId, Prefix};

/// Routes in the table: about 49k trie nodes, ~48 MiB of lookup arrays, far
/// out of cache, so this measures dependent memory loads, as a full table would.
const ROUTES: usize = 100_000;
/// Destinations per iteration: a few bursts' worth, so one iteration amortises timing.
const ADDRS: usize = 4096;

fn table(rng: &mut SmallRng) -> Fib4 {
    let mut fib = Fib4::new();
    while fib.len() < ROUTES {
        let addr = Ipv4Addr::from_bits(rng.gen());
        let prefix = Prefix::new_truncating(addr, rng.gen_range(16..=24)).unwrap();
        fib.insert(prefix, NextHopId(rng.gen_range(0..1024)));
    }
    fib
}

fn lookup(c: &mut Criterion) {
    let mut rng = SmallRng::seed_from_u64(0xf1b);
    let fib = table(&mut rng);
    let mut group = c.benchmark_group("multibit_v4_100k");
    group.throughput(Throughput::Elements(ADDRS as u64));

    group.bench_function("lookup", |b| {
        b.iter_batched_ref(
            || random_addrs(&mut rng),
            |addrs| {
                for addr in addrs.iter() {
                    black_box(fib.lookup(*addr));
                }
            },
            BatchSize::SmallInput,
        )
    });

    let mut out = vec![None; ADDRS];
    group.bench_function("lookup_batch", |b| {
        b.iter_batched_ref(
            || random_addrs(&mut rng),
            |addrs| {
                fib.lookup_batch(addrs, &mut out);
                black_box(&out);
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn random_addrs(rng: &mut SmallRng) -> Vec<Ipv4Addr> {
    (0..ADDRS).map(|_| Ipv4Addr::from_bits(rng.gen())).collect()
}

criterion_group!(benches, lookup);
criterion_main!(benches);
