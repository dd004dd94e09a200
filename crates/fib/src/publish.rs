//! RCU-style publication of a FIB: one writer changes routes, any number of
//! workers read immutable snapshots without locks (DESIGN.md, "FIB";
//! STYLE.md §6, "Build, then swap").
//!
//! ```text
//!   control thread                          shared                        workers (one per core)
//!   ──────────────                          ──────                        ──────────────────────
//!   FibHandle
//!     table: PoptrieLpm ─ insert/remove
//!       (copies only the /8 groups a
//!        published snapshot still shares)
//!     publish() ── snapshot ── swap ──▶ ArcSwap<FibSnapshot> ◀── load() ── FibReader, per burst:
//!        │                                                                  guard = reader.load();
//!        └─ old snapshot ──▶ retired ─ reclaim(): free when                 lookup_batch(...) ...
//!                                      strong_count == 1                    drop(guard)  ← quiescent
//! ```
//!
//! Grace period: a snapshot is reference counted. A worker's `load()` guard
//! keeps the snapshot it saw alive until the end of its burst, however many
//! publications happen meanwhile. A replaced snapshot goes to the handle's
//! `retired` list; [`FibHandle::reclaim`] (called by every publish) frees
//! those whose count is down to the handle's own reference, i.e. after every
//! worker that could see it has passed a quiescent point (dropped its
//! guard). Freeing therefore happens on the control thread, never in a
//! worker. Readers never block, and the writer never waits for readers.

use std::ops::Deref;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use crate::{FibAddr, FibSnapshot, Lpm, NextHopId, PoptrieLpm, Prefix};

/// The control side of a published FIB: the only writer.
///
/// Changes go to a private [`PoptrieLpm`] and become visible to readers at
/// the next [`FibHandle::publish`], all at once (batch as many as you like in
/// between). Publishing costs a 4 KiB top-array copy; the next change to a
/// group that the published snapshot shares copies that group (O(its /8)).
pub struct FibHandle<A> {
    /// The writer's table; readers never see it directly.
    table: PoptrieLpm<A>,
    /// The published snapshot.
    shared: Arc<ArcSwap<FibSnapshot<A>>>,
    /// Replaced snapshots that a reader may still hold, with the version
    /// each had while it was the published one.
    retired: Vec<(u64, Arc<FibSnapshot<A>>)>,
    /// The published snapshot's version: 0 at first, one more per publish.
    version: u64,
}

impl<A: FibAddr> FibHandle<A> {
    /// A handle publishing an empty table.
    pub fn new() -> Self {
        Self::with_table(PoptrieLpm::new())
    }

    /// A handle publishing `table` as it is.
    pub fn with_table(table: PoptrieLpm<A>) -> Self {
        let shared = Arc::new(ArcSwap::new(table.snapshot()));
        Self {
            table,
            shared,
            retired: Vec::new(),
            version: 0,
        }
    }

    /// A handle publishing a table bulk-loaded from `routes`
    /// ([`PoptrieLpm::from_routes`]).
    pub fn from_routes<I>(routes: I) -> Self
    where
        I: IntoIterator<Item = (Prefix<A>, NextHopId)>,
    {
        Self::with_table(PoptrieLpm::from_routes(routes))
    }

    /// A reader for a worker; clone it freely.
    pub fn reader(&self) -> FibReader<A> {
        FibReader {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Adds or replaces a route; readers see it after the next publish.
    pub fn insert(&mut self, prefix: Prefix<A>, nh: NextHopId) -> Option<NextHopId> {
        self.table.insert(prefix, nh)
    }

    /// Removes a route; readers see it gone after the next publish.
    pub fn remove(&mut self, prefix: &Prefix<A>) -> Option<NextHopId> {
        self.table.remove(prefix)
    }

    /// Replaces every route by `routes` (a bulk reload, e.g. after a control
    /// plane resync); readers see the new table after the next publish.
    pub fn replace_all<I>(&mut self, routes: I)
    where
        I: IntoIterator<Item = (Prefix<A>, NextHopId)>,
    {
        self.table = PoptrieLpm::from_routes(routes);
    }

    /// The writer's current table, unpublished changes included.
    pub fn table(&self) -> &PoptrieLpm<A> {
        &self.table
    }

    /// The writer's table, for any [`Lpm`] operation; changes are published
    /// by the next [`FibHandle::publish`].
    pub fn table_mut(&mut self) -> &mut PoptrieLpm<A> {
        &mut self.table
    }

    /// [`PoptrieLpm::compact`] on the writer's table; readers see the
    /// compacted groups after the next [`FibHandle::publish`].
    pub fn compact(&mut self, route_budget: usize) -> usize {
        self.table.compact(route_budget)
    }

    /// Makes every change so far visible to readers with one atomic swap,
    /// then frees the snapshots no reader holds any more.
    pub fn publish(&mut self) {
        let old = self.shared.swap(self.table.snapshot());
        self.retired.push((self.version, old));
        self.version += 1;
        self.reclaim();
    }

    /// The published snapshot's version: 0 for the first, one more at
    /// every [`FibHandle::publish`].
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The version of the oldest replaced snapshot a reader still holds,
    /// after freeing those none does; `None` when readers hold only the
    /// published one. Whatever only older versions named, no reader can
    /// meet any more.
    pub fn oldest_held(&mut self) -> Option<u64> {
        self.reclaim();
        self.retired.first().map(|&(v, _)| v)
    }

    /// Frees retired snapshots that no reader holds; returns how many are
    /// still held. Readers drop their guard at the end of a burst, so a
    /// retired snapshot lives about one burst after the publish that
    /// replaced it.
    pub fn reclaim(&mut self) -> usize {
        // Only this handle can still take new references to a retired
        // snapshot (it is no longer in `shared`), so a count of 1 is final.
        self.retired.retain(|(_, s)| Arc::strong_count(s) > 1);
        self.retired.len()
    }

    /// The snapshot readers currently get.
    pub fn published(&self) -> Arc<FibSnapshot<A>> {
        self.shared.load_full()
    }
}

impl<A: FibAddr> Default for FibHandle<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: FibAddr> core::fmt::Debug for FibHandle<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FibHandle")
            .field("table", &self.table)
            .field("retired", &self.retired.len())
            .finish()
    }
}

/// A worker's read access to a published FIB: `Send`, `Sync`, cheap to clone.
pub struct FibReader<A> {
    shared: Arc<ArcSwap<FibSnapshot<A>>>,
}

impl<A> Clone for FibReader<A> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<A: FibAddr> FibReader<A> {
    /// The current snapshot, for one burst. Lock-free, no allocation, no
    /// reference-count traffic in the common case (arc-swap's per-thread
    /// debt slots). Hold it for a burst, not forever: a held guard keeps
    /// its snapshot's memory alive.
    #[inline]
    pub fn load(&self) -> SnapshotGuard<A> {
        SnapshotGuard(self.shared.load())
    }

    /// The current snapshot as an owned `Arc`, for keeping longer than a
    /// burst (one atomic increment on a shared counter).
    pub fn load_full(&self) -> Arc<FibSnapshot<A>> {
        self.shared.load_full()
    }
}

impl<A: FibAddr> core::fmt::Debug for FibReader<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FibReader").finish_non_exhaustive()
    }
}

/// A snapshot loaded by [`FibReader::load`]; dereferences to [`FibSnapshot`].
/// Dropping it is the worker's quiescent point for that snapshot.
pub struct SnapshotGuard<A>(Guard<Arc<FibSnapshot<A>>>);

impl<A> Deref for SnapshotGuard<A> {
    type Target = FibSnapshot<A>;

    #[inline]
    fn deref(&self) -> &FibSnapshot<A> {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn p4(s: &str) -> Prefix<Ipv4Addr> {
        s.parse().unwrap()
    }

    #[test]
    fn readers_see_changes_only_after_publish() {
        let mut handle = FibHandle::new();
        let reader = handle.reader();
        let addr = Ipv4Addr::new(10, 1, 2, 3);
        handle.insert(p4("10.0.0.0/8"), NextHopId(1));
        assert_eq!(reader.load().lookup(addr), None);
        handle.publish();
        let before = reader.load();
        assert_eq!(before.lookup(addr), Some(NextHopId(1)));
        handle.insert(p4("10.1.0.0/16"), NextHopId(2));
        handle.publish();
        // The old guard still answers as of its time; a new load sees the change.
        assert_eq!(before.lookup(addr), Some(NextHopId(1)));
        assert_eq!(reader.load().lookup(addr), Some(NextHopId(2)));
        // The guard holds the replaced snapshot until dropped.
        assert_eq!(handle.reclaim(), 1);
        drop(before);
        assert_eq!(handle.reclaim(), 0);
    }

    #[test]
    fn concurrent_readers_never_misforward() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::thread;

        // Two next hops that both forward 10.1.2.3 correctly; the reader must
        // only ever see one of them (never "no route") while the writer flips
        // between a /16 and a /24 and republishes.
        let mut handle = FibHandle::new();
        handle.insert(p4("10.1.0.0/16"), NextHopId(1));
        handle.publish();
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let reader = handle.reader();
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    let mut bursts = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let fib = reader.load();
                        for _ in 0..64 {
                            let got = fib.lookup(Ipv4Addr::new(10, 1, 2, 3));
                            assert!(matches!(got, Some(NextHopId(1 | 2))), "{got:?}");
                        }
                        bursts += 1;
                    }
                    bursts
                })
            })
            .collect();
        for i in 0..2_000 {
            if i % 2 == 0 {
                handle.insert(p4("10.1.2.0/24"), NextHopId(2));
            } else {
                handle.remove(&p4("10.1.2.0/24"));
            }
            handle.publish();
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            assert!(w.join().unwrap() > 0);
        }
        assert_eq!(handle.reclaim(), 0);
    }
}
