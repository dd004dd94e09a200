//! `FibSnapshot::lookup_batch_prefetch` under test, with a stand-in for the
//! CPU's prefetch that counts the cache lines it is asked for (this
//! thread's), so that every address can be checked to be prefetched at
//! each level: its direct entry, then its leaf block (a Poptrie); its bitmap
//! word, then the first and last cache line of the line of entries it reads
//! (a flat table).

use std::cell::Cell;

use vrhost_fib::{FibAddr, FibSnapshot, NextHopId};

thread_local! {
    static LINES: Cell<usize> = const { Cell::new(0) };
}

/// The `Prefetch` under test: counts, touches nothing.
fn record(lines: &[*const u8]) {
    LINES.with(|n| n.set(n.get() + lines.len()));
}

/// `snapshot`'s answers for `probes` from `lookup_batch_prefetch` (into an
/// output pre-filled with junk), after asserting the lines it prefetched:
/// two per address for a Poptrie with routes, two for a flat IPv4 table
/// (bitmap word, line) and three for a flat IPv6 one (its line's two cache
/// lines); for
/// an empty one, none if it never held a route (it has no top array yet)
/// and two per address if it did.
pub fn lookup_batch<A: FibAddr>(snapshot: &FibSnapshot<A>, probes: &[A]) -> Vec<Option<NextHopId>> {
    let mut out = vec![Some(NextHopId(u32::MAX)); probes.len()];
    let before = LINES.with(Cell::get);
    snapshot.lookup_batch_prefetch(probes, &mut out, record);
    let lines = LINES.with(Cell::get) - before;
    let addresses = probes.len();
    if snapshot.is_empty() {
        assert!(
            lines == 0 || lines == 2 * addresses,
            "{lines} lines for {addresses} addresses"
        );
    } else {
        let levels = 2 + usize::from(snapshot.is_flat() && A::BITS > 32);
        assert_eq!(
            lines,
            levels * addresses,
            "prefetched lines for {addresses} addresses"
        );
    }
    out
}
