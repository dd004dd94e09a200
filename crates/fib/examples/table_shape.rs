//! Prints the shape (groups, nodes, leaves, bytes) of the synthetic tables:
//! `cargo run -p vrhost-fib --release --example table_shape`.

#[path = "../tests/synth/mod.rs"]
mod synth;

use vrhost_fib::PoptrieLpm;

/// Prints the shape of the synthetic tables, to
/// compare with real data: 565k real IPv4 prefixes (ip-location-db/asn,
/// next hop = ASN mod 32) fill 44k /18s and make ~450k /24-level leaf runs.
fn main() {
    for n in [565_000, 1_000_000] {
        let fib = PoptrieLpm::from_routes(synth::ipv4_table(n, 0x1f1b));
        println!("v4 {n}: {:?}", fib.stats());
    }
    let fib = PoptrieLpm::from_routes(synth::ipv6_table(230_000, 0x6f1b));
    println!("v6 230k: {:?}", fib.stats());
}
