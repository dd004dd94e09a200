//! What publishing a snapshot of a small IPv6 table costs: its flat form is
//! built afresh each time (`PoptrieLpm::snapshot`). Two tables of 4,096
//! routes: /48s, and /128s each in its own /64 (every one a divided block).
//! `cargo run -p vrhost-fib --release --example snapshot_build`.

use std::net::Ipv6Addr;
use std::time::Instant;

use vrhost_fib::{NextHopId, PoptrieLpm, Prefix};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for (name, len) in [("/48s", 48u8), ("/128s in distinct /64s", 128)] {
        let mut routes: Vec<(Prefix<Ipv6Addr>, NextHopId)> = Vec::new();
        for i in 0..4096u128 {
            let addr = match len {
                48 => 0x2400u128 << 112 | i << 80,
                _ => 0x2001_0db8u128 << 96 | (i * 7919 % 65536) << 64 | (i + 1),
            };
            routes.push((
                Prefix::new(Ipv6Addr::from(addr), len)?,
                NextHopId((i % 4) as u32),
            ));
        }
        let fib = PoptrieLpm::from_routes(routes);
        let rounds = 100u32;
        let t = Instant::now();
        let mut bytes = 0;
        for _ in 0..rounds {
            bytes = fib.snapshot().memory_bytes();
        }
        println!(
            "{name}: {:?} a snapshot, {bytes} bytes",
            t.elapsed() / rounds
        );
    }
    Ok(())
}
