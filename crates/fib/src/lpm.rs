//! The longest-prefix-match table interface every FIB layout implements.

use crate::{FibAddr, NextHopId, Prefix};

/// A longest-prefix-match table mapping prefixes to next-hop indices.
///
/// Mutation (`insert`, `remove`) is control-plane work; a VR's workers read a
/// published copy through `&self` only (`lookup`, `lookup_batch`), which is why
/// the trait requires `Send + Sync`. Publication itself (build or patch, swap,
/// reclaim after a grace period) lives outside the table, in
/// [`crate::FibHandle`] (DESIGN.md, "FIB").
pub trait Lpm<A: FibAddr>: Send + Sync {
    /// Adds `prefix → nh`, or replaces the next hop of an existing route.
    /// Returns the previous next hop of exactly this prefix.
    ///
    /// `nh` must be at most [`NextHopId::MAX`]; a table may panic otherwise.
    fn insert(&mut self, prefix: Prefix<A>, nh: NextHopId) -> Option<NextHopId>;

    /// Removes the route for exactly `prefix` and returns its next hop.
    fn remove(&mut self, prefix: &Prefix<A>) -> Option<NextHopId>;

    /// The next hop of exactly `prefix` (no longest-match).
    fn get(&self, prefix: &Prefix<A>) -> Option<NextHopId>;

    /// The next hop of the longest prefix containing `addr`.
    fn lookup(&self, addr: A) -> Option<NextHopId>;

    /// Looks up every address of `addrs` into the same position of `out`.
    ///
    /// The slices should be the same length; if not, the extra tail of the
    /// longer one is ignored (and debug builds panic, since that is a caller bug).
    fn lookup_batch(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        debug_assert_eq!(addrs.len(), out.len(), "lookup_batch slice lengths differ");
        for (addr, slot) in addrs.iter().zip(out.iter_mut()) {
            *slot = self.lookup(*addr);
        }
    }

    /// The number of routes.
    fn len(&self) -> usize;

    /// Whether the table holds no route.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes the table holds, approximately (allocated capacity, not just
    /// what is in use). Used to enforce per-VR memory limits.
    fn memory_bytes(&self) -> usize;

    /// Calls `f` once for every route, in no particular order.
    fn for_each(&self, f: &mut dyn FnMut(Prefix<A>, NextHopId));
}
