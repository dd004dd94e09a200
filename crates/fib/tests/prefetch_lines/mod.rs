//! A stand-in for the CPU's prefetch in tests of
//! `FibSnapshot::lookup_batch_prefetch`: it counts the cache lines it is
//! asked for (this thread's), so a test can check that every address was
//! prefetched twice (its direct entry, then its leaf block).

use std::cell::Cell;

thread_local! {
    static LINES: Cell<usize> = const { Cell::new(0) };
}

/// The `Prefetch` under test: counts, touches nothing.
pub fn record(lines: &[*const u8]) {
    LINES.with(|n| n.set(n.get() + lines.len()));
}

/// Runs `f` and returns its result with the lines `record` saw meanwhile.
pub fn count<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LINES.with(Cell::get);
    let out = f();
    (out, LINES.with(Cell::get) - before)
}

/// A table with routes prefetches two lines per address. An empty one
/// prefetches nothing if it never held a route (it has no top array yet),
/// and two lines per address if it did.
pub fn assert_two_per_address(empty: bool, addresses: usize, lines: usize) {
    if empty {
        assert!(
            lines == 0 || lines == 2 * addresses,
            "{lines} lines for {addresses} addresses"
        );
    } else {
        assert_eq!(
            lines,
            2 * addresses,
            "prefetched lines for {addresses} addresses"
        );
    }
}
