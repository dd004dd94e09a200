//! The engine's FIB: a Poptrie (Asai & Ohara, SIGCOMM 2015) split into 256
//! copy-on-write groups, one per /8, each with its own direct-pointing array.
//!
//! ```text
//!  PoptrieLpm<A>
//!  ├── routes: BTreeMap<Prefix, NextHopId>     control side: get, for_each, rebuilds
//!  ├── counts[256]                             routes > /8 per group (sizes `d`)
//!  └── table: FibSnapshot<A>                   what workers read (see snapshot.rs)
//!        slots[256] ─┬─ default  (longest route ≤ /8 covering the slot)
//!                    └─ Arc<Group> ── direct[2^d] ──▶ Node ──▶ … ──▶ leaf block
//! ```
//!
//! Lookup of `a`: `slot = slots[a >> 24]`; `v = slot.group.lookup(a)`
//! (direct entry, then one `popcnt` step per 6 bits); `v` or, if 0,
//! `slot.default`. In a full IPv4 table a /24 takes 2 dependent loads
//! (direct entry, leaf block) after two L1-resident ones (slot, group header).
//!
//! Updates change the route map, then rebuild only what the changed prefix
//! can affect ([`PoptrieLpm::insert`] via `apply`):
//! - ≤ /8: the `default` of the slots it covers; no group is touched;
//! - inside a group's direct range (/9 .. /8+d): the direct entries it covers
//!   whose longest match is not longer, and the subtrees under them;
//! - longer: the one subtree under its direct entry.
//!
//! A group is changed through `Arc::make_mut`, so a group still referenced by
//! a published [`FibSnapshot`] is copied first (O(group), never O(table)),
//! and the snapshot keeps answering as of its time.

mod flat;
mod group;
mod node;
mod snapshot;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

pub use flat::FLAT_MAX_ROUTES;
pub use snapshot::{lookup_batch_each, FibSnapshot, PREFETCH_MIN_ROUTES};

use crate::{FibAddr, Lpm, NextHopId, Prefix};
use flat::{Flat, FlatAny};
use group::{bits128, BuildRoute, Group};
use node::{TOP_BITS, TOP_SLOTS};
use snapshot::Slot;

/// Groups with fewer routes than this use a 4-bit direct array (64 bytes).
const SMALL_GROUP: u32 = 64;
/// IPv6 groups with at least this many routes use a 16-bit direct array
/// (128–256 KiB): the /8s that hold an IPv6 table's bulk, where a /48 then
/// takes four 6-bit node steps below the direct entry instead of five.
/// The threshold trades FIB memory for lookup depth; its figures are in
/// docs/fib.md and docs/benchmarks.md.
const HUGE_GROUP_V6: u32 = 1_024;

/// Direct-pointing bits for a group with `count` routes longer than /8.
///
/// Only 4, 10 and 16 (and 1 for an empty group) are used, so that the most
/// common length ends on a node boundary: 8+10+6 = 8+4+6+6 = 24 for IPv4
/// /24s; 8+16+6·4 = 8+10+6·5 = 8+4+6·6 = 48 for IPv6 /48s.
fn dbits_for<A: FibAddr>(count: u32) -> u32 {
    if count == 0 {
        1
    } else if count < SMALL_GROUP {
        4
    } else if A::BITS <= 32 || count < HUGE_GROUP_V6 {
        10
    } else {
        16
    }
}

/// The address of a prefix left-aligned in 128 bits.
fn left<A: FibAddr>(addr: A) -> u128 {
    addr.to_u128() << (128 - u32::from(A::BITS))
}

/// The `len`-bit prefix whose left-aligned address is `key`.
fn prefix_at<A: FibAddr>(key: u128, len: u32) -> Prefix<A> {
    let addr = A::from_u128(key >> (128 - u32::from(A::BITS)));
    // `len` ≤ 8 + 16 < A::BITS for every caller.
    Prefix::new_truncating(addr, len as u8).expect("length within the family")
}

/// The builder's view of a route.
fn build_route<A: FibAddr>(prefix: &Prefix<A>, nh: NextHopId) -> BuildRoute {
    BuildRoute {
        key: left(prefix.addr()),
        len: prefix.len(),
        leaf: nh.0 + 1,
    }
}

/// The routes strictly inside `outer` (longer than it), sorted.
fn routes_below<A: FibAddr>(
    routes: &BTreeMap<Prefix<A>, NextHopId>,
    outer: Prefix<A>,
) -> Vec<BuildRoute> {
    let host_bits = !crate::addr::mask::<A>(outer.len()) & crate::addr::mask::<A>(A::BITS);
    let last = Prefix::new(A::from_u128(outer.addr().to_u128() | host_bits), A::BITS)
        .expect("a host route is always valid");
    // In (address, length) order, everything inside `outer` lies between
    // `outer` itself and its last host route; routes covering `outer` share
    // its address with a shorter length, so they sort before it.
    routes
        .range(outer..=last)
        .filter(|(p, _)| p.len() > outer.len())
        .map(|(p, nh)| build_route(p, *nh))
        .collect()
}

/// The longest route covering `prefix` (itself included) no shorter than
/// `min_len`: its length and leaf value.
fn covering<A: FibAddr>(
    routes: &BTreeMap<Prefix<A>, NextHopId>,
    prefix: Prefix<A>,
    min_len: u8,
) -> Option<(u8, u32)> {
    (min_len..=prefix.len())
        .rev()
        .find_map(|len| routes.get(&prefix.supernet(len)).map(|nh| (len, nh.0 + 1)))
}

/// The shape of a [`PoptrieLpm`]'s lookup structure, for sizing and benchmarks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoptrieStats {
    /// Distinct groups (a group shared by routeless slots counts once).
    pub groups: usize,
    /// Groups by direct-pointing bits `d` (index = `d`).
    pub groups_by_dbits: [usize; 17],
    /// Direct-array entries, all groups.
    pub direct_entries: usize,
    /// Bytes of the direct arrays (16-bit entries where they fit).
    pub direct_bytes: usize,
    /// Direct entries that point straight at a leaf block (a subtree with no
    /// inner node).
    pub blocks: usize,
    /// Reachable 16-byte inner nodes.
    pub nodes: usize,
    /// Of `nodes`, path nodes: a lone route more than a level below its
    /// direct entry or parent, held whole in one node.
    pub path_nodes: usize,
    /// Reachable 8-byte words of leaf blocks.
    pub words: usize,
    /// Nodes left unreachable by incremental rebuilds, awaiting compaction.
    pub garbage_nodes: usize,
    /// Words left unreachable by incremental rebuilds.
    pub garbage_words: usize,
    /// Groups by leaf width: 4, 8, 16 and 32 bits (a group's largest next
    /// hop decides: below 15, below 255, below 65535, the rest).
    pub groups_by_leaf_bits: [usize; 4],
    /// [`PoptrieLpm::lookup_bytes`].
    pub lookup_bytes: usize,
}

/// The engine's longest-prefix-match table: a Poptrie with a copy-on-write
/// group per /8. See the module documentation for the layout.
///
/// - Lookups (`lookup`, `lookup_batch`, or a [`FibSnapshot`] from
///   [`PoptrieLpm::snapshot`]) read only the lookup structure and never allocate.
/// - [`PoptrieLpm::from_routes`] bulk-loads a table; `insert`/`remove`
///   rebuild only the affected subtree.
/// - An empty table owns no memory; one with a few routes owns a few KiB.
#[derive(Clone)]
pub struct PoptrieLpm<A> {
    /// Every route, by exact prefix, in (address, length) order.
    routes: BTreeMap<Prefix<A>, NextHopId>,
    /// Per top slot: routes longer than /8 inside it. Empty when `table` is.
    counts: Vec<u32>,
    /// The lookup structure.
    table: FibSnapshot<A>,
}

impl<A: FibAddr> PoptrieLpm<A> {
    /// An empty table; it allocates nothing until the first insert.
    pub fn new() -> Self {
        Self {
            routes: BTreeMap::new(),
            counts: Vec::new(),
            table: FibSnapshot::empty(),
        }
    }

    /// Builds a table from `routes` in one pass; faster than inserting them
    /// one by one. If a prefix appears twice, the later next hop wins, as
    /// with successive inserts.
    ///
    /// # Panics
    ///
    /// If a next hop is above [`NextHopId::MAX`].
    pub fn from_routes<I>(routes: I) -> Self
    where
        I: IntoIterator<Item = (Prefix<A>, NextHopId)>,
    {
        let mut list: Vec<(Prefix<A>, NextHopId)> = routes.into_iter().collect();
        for (_, nh) in &list {
            assert!(*nh <= NextHopId::MAX, "next hop {nh} above NextHopId::MAX");
        }
        // Stable, so among equal prefixes the input order survives.
        list.sort_by_key(|(p, _)| *p);
        list.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 = later.1;
            }
            same
        });
        let mut table = Self::new();
        if list.is_empty() {
            return table;
        }
        table.init_slots();
        let mut batch = Vec::new();
        let mut i = 0;
        while i < list.len() {
            let (prefix, nh) = list[i];
            let key = left(prefix.addr());
            let slot = bits128(key, 0, TOP_BITS);
            if u32::from(prefix.len()) <= TOP_BITS {
                // In (address, length) order a route follows every route
                // covering it, so painting in order leaves the longest match.
                let span = 1 << (TOP_BITS - u32::from(prefix.len()));
                for s in &mut Arc::make_mut(&mut table.table.slots)[slot..slot + span] {
                    s.default = nh.0 + 1;
                }
                i += 1;
                continue;
            }
            batch.clear();
            while let Some((p, nh)) = list.get(i) {
                if u32::from(p.len()) <= TOP_BITS || bits128(left(p.addr()), 0, TOP_BITS) != slot {
                    break;
                }
                batch.push(build_route(p, *nh));
                i += 1;
            }
            let count = u32::try_from(batch.len()).expect("routes per group fit u32");
            table.counts[slot] = count;
            Arc::make_mut(&mut table.table.slots)[slot].group =
                Arc::new(Group::build(&batch, dbits_for::<A>(count)));
        }
        table.routes = list.into_iter().collect();
        table.table.len = table.routes.len();
        table
    }

    /// Every route in prefix order (address, then length): what
    /// [`Lpm::for_each`] visits, as an iterator that can stop or skip.
    pub fn iter(&self) -> impl Iterator<Item = (Prefix<A>, NextHopId)> + '_ {
        self.routes.iter().map(|(p, nh)| (*p, *nh))
    }

    /// An immutable copy of the lookup structure as it is now, for readers on
    /// other threads. Cheap: 256 reference-count increments; groups are
    /// shared until this table next changes them (then it copies just those).
    ///
    /// A table of at most [`FLAT_MAX_ROUTES`] routes also gets its
    /// routes as address intervals (`flat.rs`), built here in O(routes),
    /// which its readers look up instead of the 256 slots and their groups:
    /// what a lookup touches then grows with the routes.
    pub fn snapshot(&self) -> Arc<FibSnapshot<A>> {
        let mut table = self.table.clone();
        if !self.routes.is_empty() && self.routes.len() <= FLAT_MAX_ROUTES {
            let routes = || {
                self.routes
                    .iter()
                    .map(|(p, nh)| (p.addr().to_u128(), p.len(), nh.0 + 1))
            };
            table.flat = if A::BITS == 32 {
                Flat::<u32>::build(routes()).map(FlatAny::V4)
            } else {
                Flat::<u64>::build6(routes()).map(FlatAny::V6)
            };
        }
        Arc::new(table)
    }

    /// The lookup structure, for reading without taking a snapshot.
    pub fn as_snapshot(&self) -> &FibSnapshot<A> {
        &self.table
    }

    /// Heap bytes of the lookup structure alone (what a snapshot costs;
    /// [`Lpm::memory_bytes`] adds the route map).
    pub fn lookup_bytes(&self) -> usize {
        self.table.memory_bytes()
    }

    /// The shape of the lookup structure (groups shared by several slots
    /// are counted once).
    pub fn stats(&self) -> PoptrieStats {
        let mut stats = PoptrieStats::default();
        let mut groups: Vec<&Arc<Group>> = self.table.slots.iter().map(|s| &s.group).collect();
        groups.sort_unstable_by_key(|g| Arc::as_ptr(g));
        groups.dedup_by(|a, b| Arc::ptr_eq(a, b));
        for group in groups {
            group.add_stats(&mut stats);
        }
        stats.lookup_bytes = self.lookup_bytes();
        stats
    }

    /// Makes the table non-empty: 256 slots sharing one empty group.
    fn init_slots(&mut self) {
        let empty = Arc::new(Group::empty());
        self.table.slots = vec![
            Slot {
                group: empty,
                default: 0,
            };
            TOP_SLOTS
        ]
        .into();
        self.counts = vec![0; TOP_SLOTS];
    }

    /// The top array, to change: shared with the last snapshot taken until
    /// the first change after it, which copies it (4 KiB) so that the
    /// snapshot keeps what it had; every group it points to then has two
    /// owners, so a group changed in place is copied too.
    fn slots_mut(&mut self) -> &mut [Slot] {
        Arc::make_mut(&mut self.table.slots)
    }

    /// The slot prefix (/8) of slot `s`.
    fn slot_prefix(s: usize) -> Prefix<A> {
        prefix_at((s as u128) << (128 - TOP_BITS), TOP_BITS)
    }

    /// Brings the lookup structure in line with the route map after the route
    /// for exactly `prefix` was added, replaced or removed.
    fn apply(&mut self, prefix: Prefix<A>) {
        let len = u32::from(prefix.len());
        let key = left(prefix.addr());
        let s = bits128(key, 0, TOP_BITS);
        if len <= TOP_BITS {
            let span = 1 << (TOP_BITS - len);
            for slot in s..s + span {
                let value = covering(&self.routes, Self::slot_prefix(slot), 0).map_or(0, |c| c.1);
                self.slots_mut()[slot].default = value;
            }
            return;
        }
        let count = self.counts[s];
        let group = &self.table.slots[s].group;
        let dbits = group.dbits();
        let value = self.routes.get(&prefix).map_or(0, |nh| nh.0 + 1);
        // Resize with hysteresis: grow at once, shrink only at half the
        // threshold. Widen the leaves when a next hop needs it.
        if count == 0
            || dbits_for::<A>(count) > dbits
            || dbits_for::<A>(count.saturating_mul(2)) < dbits
            || !group.fits(value)
        {
            self.rebuild_group(s);
            return;
        }
        let split = TOP_BITS + dbits;
        // A route ending in the direct range covers 2^(split - len) entries;
        // a longer one lies below exactly one.
        let span = 1usize << split.saturating_sub(len);
        if span * 8 > 1 << dbits {
            // A short route over more than an eighth of the group: one pass
            // over the group's routes beats a lookup per entry.
            self.rebuild_group(s);
            return;
        }
        let group = Arc::make_mut(&mut Arc::make_mut(&mut self.table.slots)[s].group);
        let first = bits128(key, TOP_BITS, dbits);
        for entry in first..first + span {
            let group_bits = key & (u128::MAX << (128 - TOP_BITS));
            let entry_prefix = prefix_at(group_bits | (entry as u128) << (128 - split), split);
            let cover = covering(&self.routes, entry_prefix, TOP_BITS as u8 + 1);
            if len <= split && cover.is_some_and(|(l, _)| u32::from(l) > len) {
                // A longer route decides this entry; the change is hidden.
                continue;
            }
            let value = cover.map_or(0, |c| c.1);
            group.rebuild_slot(entry, &routes_below(&self.routes, entry_prefix), value);
        }
        if group.wants_compaction() {
            self.rebuild_group(s);
        }
    }

    /// Rebuilds, in slot order, the groups that incremental updates left
    /// sparse (unreachable subtrees over a quarter of their live bytes),
    /// each from the route map as a bulk load would build it, and gives back
    /// the spare room of grown arrays (over a quarter of the live bytes),
    /// until the groups' routes add up to `route_budget` (at least one
    /// group, whatever its size). Returns how many routes' groups it
    /// compacted (an empty group counts one): 0 once nothing is left to do.
    ///
    /// Answers do not change, and a published snapshot keeps its groups
    /// (they are replaced, not changed in place). Meant for when updates
    /// pause: an incrementally grown table carries up to its live size in
    /// garbage (see `docs/fib.md`), which spreads the live data over more
    /// cache lines, and about as much again in spare room. The budget
    /// bounds the time one call takes: rebuilding costs about 40 ns per
    /// IPv4 route here.
    pub fn compact(&mut self, route_budget: usize) -> usize {
        let mut spent = 0;
        for s in 0..self.table.slots.len() {
            if spent > 0 && spent >= route_budget {
                break;
            }
            let routes = self.counts.get(s).map_or(1, |&n| (n as usize).max(1));
            let group = &self.table.slots[s].group;
            if group.is_sparse() {
                self.rebuild_group(s);
                spent += routes;
            } else if group.has_spare() {
                // A group a snapshot still holds is copied, at its length.
                Arc::make_mut(&mut self.slots_mut()[s].group).shrink();
                spent += routes;
            }
        }
        spent
    }

    /// Rebuilds group `s` from the route map.
    fn rebuild_group(&mut self, s: usize) {
        let routes = routes_below(&self.routes, Self::slot_prefix(s));
        debug_assert_eq!(routes.len(), self.counts[s] as usize);
        self.slots_mut()[s].group = Arc::new(if routes.is_empty() {
            Group::empty()
        } else {
            Group::build(&routes, dbits_for::<A>(self.counts[s]))
        });
    }

    /// Counts a route added to (`+1`) or removed from (`-1`) its group.
    fn count(&mut self, prefix: &Prefix<A>, added: bool) {
        if u32::from(prefix.len()) > TOP_BITS {
            let s = bits128(left(prefix.addr()), 0, TOP_BITS);
            if added {
                self.counts[s] += 1;
            } else {
                self.counts[s] -= 1;
            }
        }
    }
}

impl<A: FibAddr> Default for PoptrieLpm<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: FibAddr> FromIterator<(Prefix<A>, NextHopId)> for PoptrieLpm<A> {
    fn from_iter<I: IntoIterator<Item = (Prefix<A>, NextHopId)>>(routes: I) -> Self {
        Self::from_routes(routes)
    }
}

/// A summary, not the arrays.
impl<A: FibAddr> fmt::Debug for PoptrieLpm<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoptrieLpm")
            .field("routes", &self.routes.len())
            .field("lookup_bytes", &self.lookup_bytes())
            .finish()
    }
}

impl<A: FibAddr> Lpm<A> for PoptrieLpm<A> {
    /// # Panics
    ///
    /// If `nh` is above [`NextHopId::MAX`] (leaf values are `nh + 1` in 31 bits).
    fn insert(&mut self, prefix: Prefix<A>, nh: NextHopId) -> Option<NextHopId> {
        assert!(nh <= NextHopId::MAX, "next hop {nh} above NextHopId::MAX");
        let old = self.routes.insert(prefix, nh);
        if old == Some(nh) {
            return old;
        }
        if self.table.slots.is_empty() {
            self.init_slots();
        }
        if old.is_none() {
            self.count(&prefix, true);
        }
        self.table.len = self.routes.len();
        self.apply(prefix);
        old
    }

    fn remove(&mut self, prefix: &Prefix<A>) -> Option<NextHopId> {
        let old = self.routes.remove(prefix)?;
        if self.routes.is_empty() {
            // Release everything; snapshots keep what they share.
            *self = Self::new();
            return Some(old);
        }
        self.count(prefix, false);
        self.table.len = self.routes.len();
        self.apply(*prefix);
        Some(old)
    }

    fn get(&self, prefix: &Prefix<A>) -> Option<NextHopId> {
        self.routes.get(prefix).copied()
    }

    #[inline(always)]
    fn lookup(&self, addr: A) -> Option<NextHopId> {
        self.table.lookup(addr)
    }

    fn lookup_batch(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        self.table.lookup_batch(addrs, out);
    }

    fn len(&self) -> usize {
        self.routes.len()
    }

    fn memory_bytes(&self) -> usize {
        // A B-tree leaf keeps keys and values in separate arrays of 11;
        // assume nodes three-quarters full. An estimate, as documented.
        let route_bytes = (size_of::<Prefix<A>>() + size_of::<NextHopId>()) * 4 / 3;
        self.routes.len() * route_bytes + self.counts.capacity() * 4 + self.table.memory_bytes()
    }

    fn for_each(&self, f: &mut dyn FnMut(Prefix<A>, NextHopId)) {
        for (prefix, nh) in &self.routes {
            f(*prefix, *nh);
        }
    }
}
