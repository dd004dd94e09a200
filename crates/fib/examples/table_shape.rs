//! Prints the shape (groups, nodes, leaves, bytes) of the synthetic tables:
//! `cargo run -p vrhost-fib --release --example table_shape`, or of a routes
//! file (`PREFIX NEXT-HOP` per line, as `vrhost workload` writes
//! `table.txt`): `... --example table_shape -- FILE`.

#[path = "../tests/synth/mod.rs"]
mod synth;

use std::collections::HashMap;
use std::net::Ipv4Addr;

use vrhost_fib::{NextHopId, PoptrieLpm, Prefix};

/// Prints the shape of the synthetic tables, to
/// compare with real data: 565k real IPv4 prefixes (ip-location-db/asn,
/// next hop = ASN mod 32) fill 44k /18s and make ~450k /24-level leaf runs.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(path) = std::env::args().nth(1) {
        let text = std::fs::read_to_string(&path)?;
        let mut hops: HashMap<&str, u32> = HashMap::new();
        let mut routes = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut fields = line.split_whitespace();
            let (Some(prefix), Some(hop)) = (fields.next(), fields.next()) else {
                return Err(format!("{path}: not `PREFIX NEXT-HOP`: {line}").into());
            };
            let prefix: Prefix<Ipv4Addr> = prefix.parse()?;
            let next = hops.len() as u32;
            let id = *hops.entry(hop).or_insert(next);
            routes.push((prefix, NextHopId(id)));
        }
        let fib = PoptrieLpm::from_routes(routes);
        println!("{path} ({} next hops): {:?}", hops.len(), fib.stats());
        // A snapshot of a small table carries its flat form as well.
        let flat = fib.snapshot().memory_bytes() - fib.lookup_bytes();
        if flat > 0 {
            println!("flat form in snapshots: {flat} bytes");
        }
        return Ok(());
    }
    for n in [565_000, 1_000_000] {
        let fib = PoptrieLpm::from_routes(synth::ipv4_table(n, 0x1f1b));
        println!("v4 {n}: {:?}", fib.stats());
    }
    let fib = PoptrieLpm::from_routes(synth::ipv6_table(230_000, 0x6f1b));
    println!("v6 230k: {:?}", fib.stats());
    Ok(())
}
