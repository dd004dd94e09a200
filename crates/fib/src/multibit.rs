//! A multibit trie with controlled prefix expansion and leaf pushing.
//!
//! Every level consumes [`STRIDE`] = 8 address bits, so IPv4 has at most 4
//! levels and IPv6 at most 16. A node is 256 `u32` entries:
//!
//! ```text
//!   entry (u32)   0                     no route
//!                 1 ..= 0x7fff_ffff     leaf: next hop + 1
//!                 0x8000_0000 | i       child: node i of the arena
//!
//!   lookup 10.1.2.3:   root[10] ──child──▶ n7[1] ──child──▶ n9[2] = leaf(nh 4 + 1)
//! ```
//!
//! *Prefix expansion*: a prefix ends in the level that holds its last bit and
//! fills `2^(8 - len % 8)` entries there (`2^0 = 1` when `len` is a multiple of 8).
//! *Leaf pushing*: when an entry becomes a child pointer, its leaf is copied into
//! all 256 entries of the new child, and a route written over a child pointer is
//! written into the whole subtree. So every leaf already holds the longest match
//! for its addresses and a lookup returns the first leaf it meets: no
//! backtracking, no "best so far", no allocation.
//!
//! Control-only metadata stays out of the lookup arrays:
//! - `depths`, parallel to `nodes`, records the length of the prefix that set each
//!   leaf, so a shorter prefix never overwrites a longer one, and a remove rewrites
//!   exactly the entries of the removed prefix;
//! - `routes`, an exact-match map, answers `get`, `len`, `for_each` and finds the
//!   covering route on remove.
//!
//! Shape invariant: a node at level `m ≥ 1` (it covers an `8m`-bit prefix) exists
//! exactly when some route longer than `8m` bits lies under it. Remove restores it by
//! collapsing nodes on the removed prefix's path, so the node count depends only
//! on the route set, never on the history of inserts and removes; freed nodes are
//! reused before the arena grows.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use crate::{FibAddr, Lpm, NextHopId, Prefix};

/// Address bits consumed per level.
///
/// 8 rather than a DIR-24-8 style 16- or 24-bit root: a 16-bit root alone is
/// 256 KiB, and DESIGN.md asks for thousands of small VRs. With 8, a table of a
/// few routes is a few KiB. The price is up to 4 (IPv4) or 16 (IPv6) dependent
/// loads per lookup, which a later compressed trie addresses.
const STRIDE: u8 = 8;
/// Entries per node.
const FANOUT: usize = 1 << STRIDE;
/// Levels of the deepest family (IPv6: 128 / 8); sizes the path arrays.
const MAX_LEVELS: usize = 128 / STRIDE as usize;

/// Tag of a child-pointer entry; the low 31 bits are the node's arena index.
const CHILD: u32 = 1 << 31;
/// The "no route" entry.
const EMPTY: u32 = 0;

/// The lookup half of a node.
type Node = [u32; FANOUT];
/// The control half of a node: for each leaf entry, the length of the prefix
/// that set it (0 for empty entries, which any prefix may overwrite).
type Depths = [u8; FANOUT];

/// The multibit-trie FIB. See the module documentation for the layout.
///
/// Lookups read only `nodes` and never allocate. An empty table owns no node;
/// the root (arena index 0) is allocated by the first insert and everything is
/// released when the last route is removed.
#[derive(Clone)]
pub struct MultibitLpm<A> {
    /// Lookup arena; node 0 is the root whenever the table is non-empty.
    nodes: Vec<Node>,
    /// Control arena, parallel to `nodes`.
    depths: Vec<Depths>,
    /// Arena indices of freed nodes, reused before the arena grows.
    free: Vec<u32>,
    /// Every route, by exact prefix.
    routes: HashMap<Prefix<A>, NextHopId>,
}

/// Which leaf entries a fill may overwrite.
#[derive(Clone, Copy)]
enum Overwrite {
    /// Insert: entries set by a prefix no longer than this (a longer prefix's
    /// entries keep their more specific match). Equal length means the same
    /// prefix, i.e. a replacement.
    AtMost(u8),
    /// Remove: exactly the entries set by the removed prefix. Within its range,
    /// only that prefix can have set entries at its length.
    Exactly(u8),
}

impl Overwrite {
    #[inline]
    fn allows(self, depth: u8) -> bool {
        match self {
            Overwrite::AtMost(len) => depth <= len,
            Overwrite::Exactly(len) => depth == len,
        }
    }
}

/// The leaf entry for `nh`.
#[inline]
fn leaf(nh: NextHopId) -> u32 {
    nh.0 + 1
}

/// The stride of `key` consumed at `level`, as an entry index.
#[inline(always)]
fn stride_index<A: FibAddr>(key: u128, level: u8) -> usize {
    ((key >> (A::BITS - STRIDE * (level + 1))) as usize) & (FANOUT - 1)
}

/// The level a prefix of `len` bits ends in, and the entries it expands to there.
fn expansion<A: FibAddr>(key: u128, len: u8) -> (u8, Range<usize>) {
    if len == 0 {
        // /0 covers the whole root.
        return (0, 0..FANOUT);
    }
    let level = (len - 1) / STRIDE;
    // Bits of the prefix inside this level's stride: 1..=8.
    let bits = len - level * STRIDE;
    let span = 1usize << (STRIDE - bits);
    // The low (8 - bits) bits of the index are host bits, already zero.
    let first = stride_index::<A>(key, level);
    debug_assert_eq!(first % span, 0);
    (level, first..first + span)
}

impl<A: FibAddr> MultibitLpm<A> {
    /// An empty table; it allocates nothing until the first insert.
    pub fn new() -> Self {
        Self {
            nodes: Vec::new(),
            depths: Vec::new(),
            free: Vec::new(),
            routes: HashMap::new(),
        }
    }

    /// Trie nodes in use (1 KiB of lookup data each, plus 256 bytes of control data).
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Allocates a node with every entry set to `value` set by a `depth`-bit prefix.
    fn alloc(&mut self, value: u32, depth: u8) -> u32 {
        if let Some(index) = self.free.pop() {
            self.nodes[index as usize] = [value; FANOUT];
            self.depths[index as usize] = [depth; FANOUT];
            return index;
        }
        let index = self.nodes.len();
        // The child tag leaves 31 bits of index: 2^31 KiB of nodes, never reached.
        assert!(index < CHILD as usize, "FIB node arena exhausted");
        self.nodes.push([value; FANOUT]);
        self.depths.push([depth; FANOUT]);
        index as u32
    }

    /// Walks from the root to `level` along `key`, turning leaf entries into
    /// child nodes (leaf pushed) where needed. Returns the node at each level
    /// of the path: `path[0]` is the root, `path[level]` the target.
    fn descend(&mut self, key: u128, level: u8) -> [u32; MAX_LEVELS] {
        let mut path = [0u32; MAX_LEVELS];
        let mut node = 0u32;
        for l in 0..level {
            let index = stride_index::<A>(key, l);
            let entry = self.nodes[node as usize][index];
            node = if entry & CHILD != 0 {
                entry & !CHILD
            } else {
                let child = self.alloc(entry, self.depths[node as usize][index]);
                self.nodes[node as usize][index] = CHILD | child;
                child
            };
            path[usize::from(l) + 1] = node;
        }
        path
    }

    /// Writes the leaf (`value`, `depth`) into the entries `range` of `node` that
    /// `rule` allows, and into every allowed entry of the subtrees below them.
    fn fill(&mut self, node: u32, range: Range<usize>, value: u32, depth: u8, rule: Overwrite) {
        let n = node as usize;
        for index in range {
            let entry = self.nodes[n][index];
            if entry & CHILD != 0 {
                // Recursion depth is bounded by the 16 levels of IPv6.
                self.fill(entry & !CHILD, 0..FANOUT, value, depth, rule);
            } else if rule.allows(self.depths[n][index]) {
                self.nodes[n][index] = value;
                self.depths[n][index] = depth;
            }
        }
    }

    /// The leaf a node at `level` collapses into, if it is redundant: every entry
    /// is a leaf set by a prefix covering the whole node (length ≤ `8 * level`).
    /// Such entries all hold the same leaf, the longest of those covering prefixes.
    fn collapsible(&self, node: u32, level: u8) -> Option<(u32, u8)> {
        let (entries, depths) = (&self.nodes[node as usize], &self.depths[node as usize]);
        let covering = level * STRIDE;
        let redundant =
            entries.iter().all(|e| e & CHILD == 0) && depths.iter().all(|&d| d <= covering);
        if !redundant {
            return None;
        }
        debug_assert!(entries.iter().all(|&e| e == entries[0]));
        debug_assert!(depths.iter().all(|&d| d == depths[0]));
        Some((entries[0], depths[0]))
    }

    /// The leaf of the longest route strictly covering `prefix`, or empty.
    fn covering_leaf(&self, prefix: &Prefix<A>) -> (u32, u8) {
        (0..prefix.len())
            .rev()
            .find_map(|len| {
                self.routes
                    .get(&prefix.supernet(len))
                    .map(|nh| (leaf(*nh), len))
            })
            .unwrap_or((EMPTY, 0))
    }

    /// Drops every node and route, returning the memory.
    fn release(&mut self) {
        *self = Self::new();
    }
}

impl<A: FibAddr> Default for MultibitLpm<A> {
    fn default() -> Self {
        Self::new()
    }
}

/// A summary, not the 256-entry arrays.
impl<A: FibAddr> fmt::Debug for MultibitLpm<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultibitLpm")
            .field("routes", &self.routes.len())
            .field("nodes", &self.node_count())
            .field("free_nodes", &self.free.len())
            .finish()
    }
}

impl<A: FibAddr> Lpm<A> for MultibitLpm<A> {
    /// # Panics
    ///
    /// If `nh` is above [`NextHopId::MAX`] (its leaf encoding would collide
    /// with the child-pointer tag).
    fn insert(&mut self, prefix: Prefix<A>, nh: NextHopId) -> Option<NextHopId> {
        assert!(nh <= NextHopId::MAX, "next hop {nh} above NextHopId::MAX");
        let old = self.routes.insert(prefix, nh);
        if old == Some(nh) {
            return old;
        }
        if self.nodes.is_empty() {
            self.alloc(EMPTY, 0); // the root, index 0
        }
        let key = prefix.addr().to_u128();
        let (level, range) = expansion::<A>(key, prefix.len());
        let path = self.descend(key, level);
        self.fill(
            path[usize::from(level)],
            range,
            leaf(nh),
            prefix.len(),
            Overwrite::AtMost(prefix.len()),
        );
        old
    }

    fn remove(&mut self, prefix: &Prefix<A>) -> Option<NextHopId> {
        let old = self.routes.remove(prefix)?;
        if self.routes.is_empty() {
            self.release();
            return Some(old);
        }
        // Hand the removed prefix's entries to the next-longest route covering it.
        let (value, depth) = self.covering_leaf(prefix);
        let key = prefix.addr().to_u128();
        let (level, range) = expansion::<A>(key, prefix.len());
        // The path exists: nodes down to `level` were created by this prefix's
        // insert, and the shape invariant kept them while it was present.
        let path = self.descend(key, level);
        self.fill(
            path[usize::from(level)],
            range,
            value,
            depth,
            Overwrite::Exactly(prefix.len()),
        );
        // Only nodes on this path can have become redundant. Stop at the first
        // that has not: its parent still points to it, so is not redundant either.
        for l in (1..=level).rev() {
            let node = path[usize::from(l)];
            let Some((value, depth)) = self.collapsible(node, l) else {
                break;
            };
            let parent = path[usize::from(l) - 1] as usize;
            let index = stride_index::<A>(key, l - 1);
            self.nodes[parent][index] = value;
            self.depths[parent][index] = depth;
            self.free.push(node);
        }
        Some(old)
    }

    fn get(&self, prefix: &Prefix<A>) -> Option<NextHopId> {
        self.routes.get(prefix).copied()
    }

    #[inline]
    fn lookup(&self, addr: A) -> Option<NextHopId> {
        let key = addr.to_u128();
        let mut node = self.nodes.first()?;
        // A bounded loop: the trip count is a constant the compiler can unroll,
        // and a broken invariant cannot turn into an endless walk.
        for level in 0..A::BITS / STRIDE {
            let entry = node[stride_index::<A>(key, level)];
            if entry & CHILD == 0 {
                // Leaf pushing: the first leaf met is the longest match.
                return entry.checked_sub(1).map(NextHopId);
            }
            node = &self.nodes[(entry & !CHILD) as usize];
        }
        // Unreachable: nodes of the last level hold leaves only.
        debug_assert!(false, "child pointer in the last trie level");
        None
    }

    fn len(&self) -> usize {
        self.routes.len()
    }

    fn memory_bytes(&self) -> usize {
        use core::mem::size_of;
        // hashbrown keeps one control byte per bucket next to each entry.
        let route_bytes = size_of::<(Prefix<A>, NextHopId)>() + 1;
        self.nodes.capacity() * size_of::<Node>()
            + self.depths.capacity() * size_of::<Depths>()
            + self.free.capacity() * size_of::<u32>()
            + self.routes.capacity() * route_bytes
    }

    fn for_each(&self, f: &mut dyn FnMut(Prefix<A>, NextHopId)) {
        for (prefix, nh) in &self.routes {
            f(*prefix, *nh);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReferenceLpm;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn p4(s: &str) -> Prefix<Ipv4Addr> {
        s.parse().unwrap()
    }

    fn ip4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    /// Checks the shape invariant and the leaf contents against the route map:
    /// every leaf holds the longest route covering its range, at that route's depth.
    fn check_invariants<A: FibAddr>(t: &MultibitLpm<A>) {
        if t.routes.is_empty() {
            assert!(t.nodes.is_empty(), "empty table still holds nodes");
            return;
        }
        let reference = {
            let mut r = ReferenceLpm::new();
            t.for_each(&mut |p, nh| {
                r.insert(p, nh);
            });
            r
        };
        let mut seen = 0;
        let mut stack = vec![(0u32, 0u8, 0u128)];
        while let Some((node, level, base)) = stack.pop() {
            seen += 1;
            if level > 0 {
                assert!(
                    t.collapsible(node, level).is_none(),
                    "redundant node {node}"
                );
            }
            for index in 0..FANOUT {
                let shift = A::BITS - STRIDE * (level + 1);
                let start = base | ((index as u128) << shift);
                let entry = t.nodes[node as usize][index];
                if entry & CHILD != 0 {
                    assert!(level + 1 < A::BITS / STRIDE, "child in the last level");
                    stack.push((entry & !CHILD, level + 1, start));
                } else {
                    // The whole entry range shares one longest match when the
                    // trie is correct; sample its first address.
                    let want = reference.lookup(A::from_u128(start));
                    assert_eq!(entry.checked_sub(1).map(NextHopId), want);
                }
            }
        }
        assert_eq!(seen, t.node_count(), "unreachable live nodes");
    }

    #[test]
    fn empty_table_owns_nothing() {
        let t = MultibitLpm::<Ipv6Addr>::new();
        assert_eq!(t.memory_bytes(), 0);
        assert_eq!(t.lookup(Ipv6Addr::LOCALHOST), None);
        assert!(t.is_empty());
    }

    #[test]
    fn expands_non_octet_lengths() {
        let mut t = MultibitLpm::<Ipv4Addr>::new();
        t.insert(p4("10.0.0.0/9"), NextHopId(1));
        assert_eq!(t.node_count(), 2);
        assert_eq!(t.lookup(ip4("10.127.255.255")), Some(NextHopId(1)));
        assert_eq!(t.lookup(ip4("10.128.0.0")), None);
        t.insert(p4("10.0.0.0/7"), NextHopId(2));
        assert_eq!(t.lookup(ip4("11.0.0.0")), Some(NextHopId(2)));
        assert_eq!(t.lookup(ip4("10.128.0.0")), Some(NextHopId(2)));
        assert_eq!(t.lookup(ip4("10.1.0.0")), Some(NextHopId(1)));
        check_invariants(&t);
    }

    #[test]
    fn shorter_prefix_never_overwrites_longer() {
        let mut t = MultibitLpm::<Ipv4Addr>::new();
        t.insert(p4("10.1.2.0/24"), NextHopId(3));
        t.insert(p4("10.1.0.0/16"), NextHopId(2));
        t.insert(p4("0.0.0.0/0"), NextHopId(0));
        assert_eq!(t.lookup(ip4("10.1.2.9")), Some(NextHopId(3)));
        assert_eq!(t.lookup(ip4("10.1.3.9")), Some(NextHopId(2)));
        assert_eq!(t.lookup(ip4("9.9.9.9")), Some(NextHopId(0)));
        assert_eq!(
            t.insert(p4("10.1.0.0/16"), NextHopId(5)),
            Some(NextHopId(2))
        );
        assert_eq!(t.lookup(ip4("10.1.3.9")), Some(NextHopId(5)));
        assert_eq!(t.lookup(ip4("10.1.2.9")), Some(NextHopId(3)));
        check_invariants(&t);
    }

    #[test]
    fn remove_restores_covering_route_and_collapses() {
        let mut t = MultibitLpm::<Ipv4Addr>::new();
        t.insert(p4("10.0.0.0/8"), NextHopId(1));
        let base = t.node_count();
        t.insert(p4("10.1.2.128/25"), NextHopId(7));
        t.insert(p4("10.1.2.0/25"), NextHopId(7));
        assert_eq!(t.node_count(), base + 3);
        // Two sibling /25s with the same next hop leave a uniform node, which
        // must NOT collapse: its entries come from two /25s, not one prefix
        // covering the node.
        check_invariants(&t);
        assert_eq!(t.remove(&p4("10.1.2.0/25")), Some(NextHopId(7)));
        assert_eq!(t.lookup(ip4("10.1.2.1")), Some(NextHopId(1)));
        assert_eq!(t.lookup(ip4("10.1.2.129")), Some(NextHopId(7)));
        check_invariants(&t);
        assert_eq!(t.remove(&p4("10.1.2.128/25")), Some(NextHopId(7)));
        assert_eq!(t.node_count(), base);
        assert_eq!(t.remove(&p4("10.1.2.128/25")), None);
        check_invariants(&t);
        assert_eq!(t.remove(&p4("10.0.0.0/8")), Some(NextHopId(1)));
        assert_eq!(t.memory_bytes(), 0);
    }

    #[test]
    fn default_and_host_routes_v6() {
        let mut t = MultibitLpm::<Ipv6Addr>::new();
        let default: Prefix<Ipv6Addr> = "::/0".parse().unwrap();
        let host: Prefix<Ipv6Addr> = "2001:db8::1".parse().unwrap();
        t.insert(default, NextHopId(0));
        t.insert(host, NextHopId(1));
        assert_eq!(t.node_count(), 16);
        assert_eq!(t.lookup("2001:db8::1".parse().unwrap()), Some(NextHopId(1)));
        assert_eq!(t.lookup("2001:db8::2".parse().unwrap()), Some(NextHopId(0)));
        check_invariants(&t);
        t.remove(&host);
        assert_eq!(t.node_count(), 1);
        assert_eq!(t.lookup("2001:db8::1".parse().unwrap()), Some(NextHopId(0)));
    }

    #[test]
    fn largest_next_hop_round_trips() {
        let mut t = MultibitLpm::<Ipv4Addr>::new();
        t.insert(p4("10.0.0.0/8"), NextHopId::MAX);
        assert_eq!(t.lookup(ip4("10.0.0.1")), Some(NextHopId::MAX));
    }

    #[test]
    #[should_panic(expected = "above NextHopId::MAX")]
    fn rejects_next_hop_above_max() {
        let mut t = MultibitLpm::<Ipv4Addr>::new();
        t.insert(p4("10.0.0.0/8"), NextHopId(u32::MAX));
    }

    #[test]
    fn small_table_is_small() {
        // Ten host routes in ten different /8s: the worst case for 10 IPv4
        // routes, 1 root + 3 nodes each.
        let mut t = MultibitLpm::<Ipv4Addr>::new();
        for i in 0..10u8 {
            t.insert(
                Prefix::new(Ipv4Addr::new(i * 20, i, i, i), 32).unwrap(),
                NextHopId(i.into()),
            );
        }
        assert_eq!(t.node_count(), 31);
        assert!(t.memory_bytes() < 64 * 1024, "{} bytes", t.memory_bytes());
    }

    #[test]
    fn churn_does_not_grow_the_arena() {
        let mut rng = SmallRng::seed_from_u64(0x5eed);
        let mut t = MultibitLpm::<Ipv4Addr>::new();
        // Long-lived routes, so the table never empties and releases everything.
        t.insert(p4("0.0.0.0/0"), NextHopId(0));
        t.insert(p4("192.0.2.0/24"), NextHopId(1));
        let baseline = t.node_count();
        let mut peak_slots = 0;
        for _ in 0..4 {
            let routes: Vec<_> = (0..10_000)
                .map(|_| Prefix::new_truncating(Ipv4Addr::from_bits(rng.gen()), 24).unwrap())
                .collect();
            for (i, p) in routes.iter().enumerate() {
                t.insert(*p, NextHopId(i as u32 % 64 + 2));
            }
            // 10k /24s need at most 256 level-1 and 10k level-2 nodes.
            assert!(
                t.nodes.len() <= baseline + 256 + 10_000,
                "{} slots",
                t.nodes.len()
            );
            peak_slots = peak_slots.max(t.nodes.len());
            for p in &routes {
                t.remove(p);
            }
            assert_eq!(t.node_count(), baseline);
            assert_eq!(t.len(), 2);
        }
        // Freed nodes are reused: the arena stays at the first round's order.
        assert!(t.nodes.len() <= peak_slots);
        check_invariants(&t);
    }

    #[test]
    fn node_count_depends_only_on_route_set() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut t = MultibitLpm::<Ipv4Addr>::new();
        let mut live = Vec::new();
        for step in 0..3_000 {
            if live.is_empty() || rng.gen_bool(0.6) {
                // Cluster addresses under 10.0.0.0/14 so routes nest and collide.
                let addr = Ipv4Addr::from_bits(0x0a00_0000 | rng.gen_range(0..1u32 << 18));
                let p = Prefix::new_truncating(addr, rng.gen_range(6..=32)).unwrap();
                t.insert(p, NextHopId(rng.gen_range(0..4)));
                live.push(p);
            } else {
                let p = live.swap_remove(rng.gen_range(0..live.len()));
                t.remove(&p);
            }
            if step % 250 == 0 {
                check_invariants(&t);
                let mut fresh = MultibitLpm::new();
                t.for_each(&mut |p, nh| {
                    fresh.insert(p, nh);
                });
                assert_eq!(t.node_count(), fresh.node_count());
            }
        }
    }
}
