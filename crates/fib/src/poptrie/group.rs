//! One top-level slot's subtrie: a direct-pointing array and a Poptrie below it.
//!
//! A group holds only the routes *longer* than the top level (> /8) inside its
//! /8; routes of /8 or shorter live in the top slot's default leaf, so a group
//! is a function of its own routes alone and can be rebuilt, patched and
//! copied (copy-on-write for publication) independently of every other group.
//!
//! ```text
//!   key bits:  [0, 8)     [8, 8+d)              [8+d, 8+d+6)          [.. +6) ...
//!              top slot   direct[2^d] ─┬─ LEAF | value                 (done)
//!                                      ├─ BLOCK | offset ──▶ leaf block (one more load)
//!                                      └─ node index ────▶ Node ──▶ Node ... ──▶ leaf
//! ```
//!
//! `d` ("direct bits") grows with the group: 1 for a group with no route, 4
//! for a few routes (16 entries), 10 for a busy IPv4 /8 (1024 entries, 2 KiB,
//! and /24s then end in the block right below: 8 + 10 + 6 = 24) and 16 for
//! a busy IPv6 /8 (128 KiB; /48s then end on a node boundary: 24 + 6·4).

use super::node::{
    upto, Key, Node, Packing, BLOCK, LEAF, LEAF_ONLY, MAX_INDEX, MAX_NODE_DEPTH, PATH,
    PATH_MAX_BITS, STRIDE, TOP_BITS,
};

/// A route as the builder sees it: the address left-aligned in 128 bits, the
/// length, and the leaf value (next hop + 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BuildRoute {
    /// Address, left-aligned (IPv4 in the top 32 bits).
    pub(crate) key: u128,
    /// Prefix length.
    pub(crate) len: u8,
    /// Next hop + 1; never 0.
    pub(crate) leaf: u32,
}

/// `n` bits of a left-aligned key starting `off` bits from the left.
#[inline]
pub(crate) fn bits128(key: u128, off: u32, n: u32) -> usize {
    if n == 0 {
        0
    } else {
        ((key << off) >> (128 - n)) as usize
    }
}

/// The subtrie of one top slot. See the module documentation.
///
/// A walk state (and a direct entry) is one `u32`: `LEAF | value` (done),
/// `BLOCK | offset` (a leaf block: one more load), or a node index. Leaf
/// values are next hop + 1; 0 means "no route longer than /8 here", and the
/// lookup falls back to the slot's default.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    /// Direct-pointing bits `d`: `direct` has `2^d` entries.
    dbits: u32,
    /// How leaf values are packed into `words`.
    packing: Packing,
    /// One walk state per `d`-bit value.
    direct: Direct,
    /// Inner nodes; a node's children are contiguous.
    nodes: Vec<Node>,
    /// Leaf blocks (see [`Packing`]).
    words: Vec<u64>,
    /// Nodes no longer reachable (left behind by subtree rebuilds).
    garbage_nodes: u32,
    /// Words no longer reachable.
    garbage_words: u32,
}

/// A group's direct array: 16-bit entries when every walk state fits
/// (leaf values, node indices and block offsets < 2^14 — nearly every
/// group of a real table, whose next hops number in the hundreds),
/// halving the array that every lookup touches; 32-bit entries otherwise.
///
/// ```text
///   16-bit entry   10vv vvvv vvvv vvvv   LEAF  | v
///                  01oo oooo oooo oooo   BLOCK | o
///                  00nn nnnn nnnn nnnn   node n
///                  11.. .... .... ....   never written
/// ```
///
/// The tag is the walk state's own two top bits, so widening is two masks
/// and a shift, where a 15-bit leaf value would need several more
/// instructions to widen without a branch.
#[derive(Clone, Debug)]
enum Direct {
    Narrow(Box<[u16]>),
    Wide(Box<[u32]>),
}

impl Direct {
    /// The narrow form of `entries` if they all fit, else the wide one.
    fn new(entries: Vec<u32>) -> Self {
        match entries
            .iter()
            .map(|&e| narrow(e))
            .collect::<Option<Box<[u16]>>>()
        {
            Some(narrow) => Direct::Narrow(narrow),
            None => Direct::Wide(entries.into_boxed_slice()),
        }
    }

    /// Entry `i` as a walk state.
    #[inline(always)]
    fn get(&self, i: usize) -> u32 {
        match self {
            Direct::Narrow(entries) => widen(entries[i]),
            Direct::Wide(entries) => entries[i],
        }
    }

    /// Sets entry `i`, going wide first if `state` does not fit 16 bits.
    fn set(&mut self, i: usize, state: u32) {
        match self {
            Direct::Narrow(entries) => match narrow(state) {
                Some(e) => entries[i] = e,
                None => {
                    let mut wide: Vec<u32> = entries.iter().map(|&e| widen(e)).collect();
                    wide[i] = state;
                    *self = Direct::Wide(wide.into_boxed_slice());
                }
            },
            Direct::Wide(entries) => entries[i] = state,
        }
    }

    fn len(&self) -> usize {
        match self {
            Direct::Narrow(entries) => entries.len(),
            Direct::Wide(entries) => entries.len(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Direct::Narrow(entries) => entries.len() * 2,
            Direct::Wide(entries) => entries.len() * 4,
        }
    }

    /// Where [`Direct::get`] reads entry `i`: a cache line to prefetch,
    /// never dereferenced here.
    #[inline(always)]
    fn line(&self, i: usize) -> *const u8 {
        match self {
            Direct::Narrow(entries) => entries.as_ptr().wrapping_add(i).cast(),
            Direct::Wide(entries) => entries.as_ptr().wrapping_add(i).cast(),
        }
    }
}

/// The word offset of walk state `state`'s leaf block, or 0 when it is no
/// block: what [`Group::block_leafvec`] reads and [`Group::block_line`]
/// prefetches, chosen without a branch.
#[inline(always)]
fn block_offset(state: u32) -> usize {
    if state & (LEAF | BLOCK) == BLOCK {
        (state & !BLOCK) as usize
    } else {
        0
    }
}

/// The 16-bit form of a walk state, if it has one.
fn narrow(state: u32) -> Option<u16> {
    let (tag, payload, limit) = if state & LEAF != 0 {
        (0x8000, state & !LEAF, 0x3fff)
    } else if state & BLOCK != 0 {
        (0x4000, state & !BLOCK, 0x3fff)
    } else {
        (0, state, 0x3fff)
    };
    (payload <= limit).then_some((tag | payload) as u16)
}

/// The walk state of a 16-bit entry: its tag bits moved to the top.
#[inline(always)]
fn widen(entry: u16) -> u32 {
    let entry = u32::from(entry);
    ((entry & 0xc000) << 16) | (entry & 0x3fff)
}

/// One node's 64 positions after painting the routes that end in it.
struct Painted {
    /// The longest match of each position among routes ending here (or the default).
    values: [u32; 64],
    /// Positions that longer routes fall in: they become child nodes.
    vector: u64,
    /// Per child, in position order: (position, first route, end of routes).
    children: [(usize, usize, usize); 64],
    /// Children used in `children`.
    child_count: usize,
}

impl Painted {
    /// Paints `routes` (all longer than `off`, sorted) into the 64 positions
    /// of a node at `off`, over `default`.
    ///
    /// In (address, length) order a route follows every route covering it, so
    /// painting in order leaves each position with its longest match, and a
    /// child's covering value is final when its first route is met.
    fn new(routes: &[BuildRoute], default: u32, off: u32) -> Self {
        let end_bit = off + STRIDE;
        let mut painted = Painted {
            values: [default; 64],
            vector: 0,
            children: [(0, 0, 0); 64],
            child_count: 0,
        };
        let mut i = 0;
        while i < routes.len() {
            let route = routes[i];
            let pos = bits128(route.key, off, STRIDE);
            if u32::from(route.len) <= end_bit {
                let span = 1usize << (end_bit - u32::from(route.len));
                painted.values[pos..pos + span].fill(route.leaf);
                i += 1;
            } else {
                let end = i + run_len(&routes[i..], off, STRIDE, pos);
                painted.children[painted.child_count] = (pos, i, end);
                painted.child_count += 1;
                painted.vector |= 1 << pos;
                i = end;
            }
        }
        painted
    }

    /// The leaf positions' values, `None` at child positions.
    fn leaf_values(&self) -> [Option<u32>; 64] {
        let mut out = [None; 64];
        for (pos, value) in self.values.iter().enumerate() {
            if self.vector & (1 << pos) == 0 {
                out[pos] = Some(*value);
            }
        }
        out
    }
}

impl Group {
    /// A group with no route: two empty leaves.
    pub(crate) fn empty() -> Self {
        Self {
            dbits: 1,
            packing: Packing::BYTE,
            direct: Direct::Narrow(vec![0x8000; 2].into_boxed_slice()),
            nodes: Vec::new(),
            words: Vec::new(),
            garbage_nodes: 0,
            garbage_words: 0,
        }
    }

    /// Builds a group from its routes: all longer than [`TOP_BITS`], inside
    /// one /8, sorted by (address, length) and free of duplicates.
    ///
    /// The order is what makes a single pass enough: a route comes after every
    /// route covering it, so painting entries in order leaves each entry with
    /// its longest match, and when the first route below a direct entry (or
    /// node position) is met, that entry's covering value is already final.
    pub(crate) fn build(routes: &[BuildRoute], dbits: u32) -> Self {
        let max = routes.iter().map(|r| r.leaf).max().unwrap_or(0);
        let mut group = Self {
            dbits,
            packing: Packing::for_max(max),
            direct: Direct::Wide(vec![LEAF; 1 << dbits].into_boxed_slice()),
            nodes: Vec::new(),
            words: Vec::new(),
            garbage_nodes: 0,
            garbage_words: 0,
        };
        let split = TOP_BITS + dbits;
        let mut direct = vec![LEAF; 1 << dbits];
        let mut i = 0;
        while i < routes.len() {
            let route = routes[i];
            let slot = bits128(route.key, TOP_BITS, dbits);
            if u32::from(route.len) <= split {
                let span = 1usize << (split - u32::from(route.len));
                direct[slot..slot + span].fill(LEAF | route.leaf);
                i += 1;
            } else {
                let end = i + run_len(&routes[i..], TOP_BITS, dbits, slot);
                let default = direct[slot] & !LEAF;
                direct[slot] = group.build_subtree(&routes[i..end], default, split);
                i = end;
            }
        }
        group.direct = Direct::new(direct);
        group.nodes.shrink_to_fit();
        group.words.shrink_to_fit();
        group
    }

    /// Direct-pointing bits of this group.
    pub(crate) fn dbits(&self) -> u32 {
        self.dbits
    }

    /// Address bits from the left where this group's subtrees start.
    #[inline(always)]
    pub(crate) fn split(&self) -> u32 {
        TOP_BITS + self.dbits
    }

    /// Whether the group can hold the leaf value `value` without a rebuild.
    pub(crate) fn fits(&self, value: u32) -> bool {
        self.packing.fits(value)
    }

    /// The value of `key` in this group: next hop + 1, or 0 for "no route
    /// longer than /8".
    #[inline(always)]
    pub(crate) fn lookup<K: Key>(&self, key: K) -> u32 {
        let state = self.direct_entry(key);
        if state & LEAF != 0 {
            state & !LEAF
        } else if state & BLOCK != 0 {
            self.leaf(
                (state & !BLOCK) as usize,
                key.bits(self.split(), STRIDE) as u32,
            )
        } else {
            self.walk(state, key)
        }
    }

    /// The direct entry for `key`: the walk's first state.
    #[inline(always)]
    pub(crate) fn direct_entry<K: Key>(&self, key: K) -> u32 {
        self.direct_at(self.direct_index(key))
    }

    /// The leafvec word of `state`'s leaf block if it is one, else any word
    /// (0 if the group has none): a load without a branch, so that a batch
    /// can issue every lane's block load before it inspects any of them.
    #[inline(always)]
    pub(crate) fn block_leafvec(&self, state: u32) -> u64 {
        self.words.get(block_offset(state)).copied().unwrap_or(0)
    }

    /// The index of `key`'s direct entry, for [`Group::direct_line`] and
    /// [`Group::direct_at`] (a pass that needs both computes it once).
    #[inline(always)]
    pub(crate) fn direct_index<K: Key>(&self, key: K) -> usize {
        key.bits(TOP_BITS, self.dbits)
    }

    /// Direct entry `i` (from [`Group::direct_index`]) as a walk state:
    /// [`Group::direct_entry`] of that key.
    #[inline(always)]
    pub(crate) fn direct_at(&self, i: usize) -> u32 {
        self.direct.get(i)
    }

    /// Where [`Group::direct_at`] will read entry `i`: a cache line to
    /// prefetch, never dereferenced here.
    #[inline(always)]
    pub(crate) fn direct_line(&self, i: usize) -> *const u8 {
        self.direct.line(i)
    }

    /// Where [`Group::block_leafvec`] will read for `state`: a cache line
    /// to prefetch (the group's first word when `state` is no block).
    #[inline(always)]
    pub(crate) fn block_line(&self, state: u32) -> *const u8 {
        self.words.as_ptr().wrapping_add(block_offset(state)).cast()
    }

    /// Where a lookup of a key of kind `K` reads next from walk state
    /// `state`, a cache line to prefetch (never dereferenced here): where
    /// `K` [walks](Key::WALKS), its node if it is one (with a lone route
    /// below most direct entries, as in an IPv6 table, a path node and the
    /// lookup's last load), else [`Group::block_line`].
    #[inline(always)]
    pub(crate) fn next_line<K: Key>(&self, state: u32) -> *const u8 {
        if !K::WALKS {
            return self.block_line(state);
        }
        // A select, not a branch: a batch's lanes mix leaves, blocks and
        // nodes at random.
        core::hint::select_unpredictable(
            state & (LEAF | BLOCK) == 0,
            self.nodes.as_ptr().wrapping_add(state as usize).cast(),
            self.block_line(state),
        )
    }

    /// The value of `key` from its direct entry `state`, given `leafvec` =
    /// [`Group::block_leafvec`]`(state)` (loaded earlier, for all lanes of a
    /// batch). Branches on the entry's kind rather than computing the block
    /// answer for leaves too and selecting (slower: docs/fib.md).
    #[inline(always)]
    pub(crate) fn finish_with<K: Key>(&self, state: u32, key: K, leafvec: u64) -> u32 {
        if state & LEAF != 0 {
            state & !LEAF
        } else if state & BLOCK != 0 {
            let idx = key.bits(self.split(), STRIDE) as u32;
            let run = (leafvec & upto(idx)).count_ones() as usize - 1;
            self.run((state & !BLOCK) as usize + 1, run)
        } else {
            self.walk(state, key)
        }
    }

    /// Walks from node `state` to the leaf; `key`'s bits for the node start
    /// at [`Group::split`]. The value, as [`Group::lookup`].
    ///
    /// Out of line: IPv4 lookups rarely get here (only below /24), and
    /// keeping the loop out of every caller keeps the common path short.
    /// One loop per packing, so each has its shifts as constants and no
    /// setup, rather than one loop that reads the packing. The arms stay spelled out: written as one helper
    /// that calls a closure per packing, LLVM merged them back into one loop.
    #[inline(never)]
    pub(crate) fn walk<K: Key>(&self, state: u32, key: K) -> u32 {
        match self.packing {
            Packing::NIBBLE => self.walk_packed(state, key, Packing::NIBBLE),
            Packing::BYTE => self.walk_packed(state, key, Packing::BYTE),
            Packing::NARROW => self.walk_packed(state, key, Packing::NARROW),
            _ => self.walk_packed(state, key, Packing::WIDE),
        }
    }

    #[inline(always)]
    fn walk_packed<K: Key>(&self, mut state: u32, key: K, packing: Packing) -> u32 {
        let mut off = self.split();
        for _ in 0..MAX_NODE_DEPTH {
            if state & LEAF != 0 {
                return state & !LEAF;
            }
            state = self.node_step(state, key, off, packing);
            off += STRIDE;
        }
        debug_assert!(false, "walk deeper than any address");
        0
    }

    /// One walk step from node `state` for `key`, whose bits for this level
    /// start at `off`: the next node's index, or `LEAF | value`.
    #[inline(always)]
    fn node_step<K: Key>(&self, state: u32, key: K, off: u32, packing: Packing) -> u32 {
        let idx = key.bits(off, STRIDE) as u32;
        let node = self.nodes[state as usize];
        if node.base1 & PATH != 0 {
            if node.base1 == LEAF_ONLY {
                let run = (node.vector & upto(idx)).count_ones() as usize - 1;
                return LEAF | self.run_packed(node.base0 as usize, run, packing);
            }
            let k = (node.vector & 0xff) as u32;
            return LEAF
                | if key.bits(off, k) as u64 == node.vector >> 8 {
                    node.base0
                } else {
                    node.base1 & !PATH
                };
        }
        if node.vector & (1 << idx) != 0 {
            node.base1 + (node.vector & upto(idx)).count_ones() - 1
        } else {
            let block = node.base0 as usize;
            LEAF | self.run_packed(block + 1, self.block_run(block, idx), packing)
        }
    }

    /// The leaf at position `idx` of the block at `block`.
    #[inline(always)]
    fn leaf(&self, block: usize, idx: u32) -> u32 {
        self.run(block + 1, self.block_run(block, idx))
    }

    /// Which run of the block at `block` position `idx` falls in.
    #[inline(always)]
    fn block_run(&self, block: usize, idx: u32) -> usize {
        (self.words[block] & upto(idx)).count_ones() as usize - 1
    }

    /// The value of run `run` of the runs starting at word `first`.
    #[inline(always)]
    fn run(&self, first: usize, run: usize) -> u32 {
        // Arms with constant shifts; the branch always goes the same way.
        match self.packing {
            Packing::NIBBLE => self.run_packed(first, run, Packing::NIBBLE),
            Packing::BYTE => self.run_packed(first, run, Packing::BYTE),
            Packing::NARROW => self.run_packed(first, run, Packing::NARROW),
            _ => self.run_packed(first, run, Packing::WIDE),
        }
    }

    /// [`Group::run`] for a packing the caller knows.
    #[inline(always)]
    fn run_packed(&self, first: usize, run: usize, packing: Packing) -> u32 {
        let (word, shift) = packing.locate(first, run);
        packing.extract(self.words[word], shift)
    }

    /// Replaces whatever is below direct entry `slot` by `routes` (the routes
    /// inside that entry and longer than [`Group::split`], sorted) over the
    /// covering value `default`. Only that subtree is rebuilt; the old one
    /// becomes garbage until [`Group::wants_compaction`] says to rebuild.
    pub(crate) fn rebuild_slot(&mut self, slot: usize, routes: &[BuildRoute], default: u32) {
        let (nodes, words) = self.subtree_size(self.direct.get(slot));
        self.garbage_nodes += nodes;
        self.garbage_words += words;
        let state = if routes.is_empty() {
            LEAF | default
        } else {
            self.build_subtree(routes, default, self.split())
        };
        self.direct.set(slot, state);
    }

    /// Whether unreachable nodes and words have come to outweigh live ones,
    /// so that rebuilding the group from its routes pays off.
    pub(crate) fn wants_compaction(&self) -> bool {
        let garbage = self.garbage_bytes();
        garbage > 4096 && garbage > self.live_bytes()
    }

    /// Whether incremental updates left this group's live data spread out:
    /// unreachable nodes and words over a quarter of the live bytes (and
    /// over 1 KiB, so that small groups are left alone). Spare capacity of
    /// the grown arrays is not counted: lookups never touch it, and counting
    /// it would mark every group after its first update since a publication.
    pub(crate) fn is_sparse(&self) -> bool {
        let garbage = self.garbage_bytes();
        garbage > 1024 && garbage * 4 > self.live_bytes()
    }

    /// Whether the grown arrays hold spare room over a quarter of the live
    /// bytes (and over 1 KiB): memory that lookups never touch, returned by
    /// [`Group::shrink`] without a rebuild.
    pub(crate) fn has_spare(&self) -> bool {
        let spare = (self.nodes.capacity() - self.nodes.len()) * size_of::<Node>()
            + (self.words.capacity() - self.words.len()) * 8;
        spare > 1024 && spare * 4 > self.live_bytes()
    }

    /// Gives the arrays' spare room back.
    pub(crate) fn shrink(&mut self) {
        self.nodes.shrink_to_fit();
        self.words.shrink_to_fit();
    }

    /// Bytes of nodes and words no longer reachable.
    fn garbage_bytes(&self) -> usize {
        self.garbage_nodes as usize * size_of::<Node>() + self.garbage_words as usize * 8
    }

    /// Bytes of reachable lookup data.
    fn live_bytes(&self) -> usize {
        (self.nodes.len() - self.garbage_nodes as usize) * size_of::<Node>()
            + (self.words.len() - self.garbage_words as usize) * 8
            + self.direct.bytes()
    }

    /// Heap bytes, allocated capacity included, plus the struct itself (it
    /// lives in an `Arc` allocation with two counters).
    pub(crate) fn memory_bytes(&self) -> usize {
        size_of::<Self>()
            + 2 * size_of::<usize>()
            + self.direct.bytes()
            + self.nodes.capacity() * size_of::<Node>()
            + self.words.capacity() * 8
    }

    /// Adds this group's shape to `stats`.
    pub(crate) fn add_stats(&self, stats: &mut super::PoptrieStats) {
        stats.groups += 1;
        stats.groups_by_dbits[self.dbits as usize] += 1;
        stats.direct_entries += self.direct.len();
        stats.direct_bytes += self.direct.bytes();
        stats.blocks += (0..self.direct.len())
            .filter(|&i| self.direct.get(i) & (LEAF | BLOCK) == BLOCK)
            .count();
        stats.nodes += self.nodes.len() - self.garbage_nodes as usize;
        stats.path_nodes += (0..self.direct.len())
            .map(|i| self.path_nodes(self.direct.get(i)))
            .sum::<usize>();
        stats.words += self.words.len() - self.garbage_words as usize;
        stats.garbage_nodes += self.garbage_nodes as usize;
        stats.garbage_words += self.garbage_words as usize;
        stats.groups_by_leaf_bits[self.packing.width().trailing_zeros() as usize - 2] += 1;
    }

    /// Path nodes reachable from the walk state `state`.
    fn path_nodes(&self, state: u32) -> usize {
        if state & (LEAF | BLOCK) != 0 {
            return 0;
        }
        let node = self.nodes[state as usize];
        match node.base1 {
            LEAF_ONLY => 0,
            b if b & PATH != 0 => 1,
            b => (0..node.vector.count_ones())
                .map(|k| self.path_nodes(b + k))
                .sum(),
        }
    }

    /// Nodes and words reachable from the walk state `state`.
    fn subtree_size(&self, state: u32) -> (u32, u32) {
        if state & LEAF != 0 {
            return (0, 0);
        }
        if state & BLOCK != 0 {
            let block = (state & !BLOCK) as usize;
            return (0, 1 + self.packing.run_words(self.words[block]) as u32);
        }
        let node = self.nodes[state as usize];
        if node.base1 == LEAF_ONLY {
            return (1, self.packing.run_words(node.vector) as u32);
        }
        if node.base1 & PATH != 0 {
            return (1, 0);
        }
        let mut nodes = 1;
        let mut words = 0;
        if node.vector != u64::MAX {
            words += 1 + self.packing.run_words(self.words[node.base0 as usize]) as u32;
        }
        for k in 0..node.vector.count_ones() {
            let (n, w) = self.subtree_size(node.base1 + k);
            nodes += n;
            words += w;
        }
        (nodes, words)
    }

    /// Appends a subtree for `routes` (all longer than `off`, inside one
    /// `off`-bit prefix, sorted) over `default`; returns its walk state: a
    /// leaf when the routes all end here with one value, a bare leaf block
    /// when none goes deeper than this level (the common case: IPv4
    /// /19../24 under a /18 entry), else a node.
    ///
    /// So a direct entry that is a leaf may still have routes below it.
    fn build_subtree(&mut self, routes: &[BuildRoute], default: u32, off: u32) -> u32 {
        if let Some(node) = path_node(routes, default, off) {
            assert!(self.nodes.len() <= MAX_INDEX, "group node array exhausted");
            self.nodes.push(node);
            return (self.nodes.len() - 1) as u32;
        }
        let painted = Painted::new(routes, default, off);
        if painted.vector == 0 && painted.values.iter().all(|&v| v == painted.values[0]) {
            // Routes below, but all with the covering value: a plain leaf.
            return LEAF | painted.values[0];
        }
        if painted.vector == 0 {
            let block = self
                .packing
                .push_block(&mut self.words, &painted.leaf_values());
            assert!(block <= MAX_INDEX, "group leaf words exhausted");
            return BLOCK | block as u32;
        }
        let index = self.nodes.len();
        self.nodes.push(Node::default());
        self.emit_node(index, routes, &painted, off);
        index as u32
    }

    /// Writes node `index` from its painted positions, then its children.
    fn emit_node(&mut self, index: usize, routes: &[BuildRoute], painted: &Painted, off: u32) {
        if painted.vector == 0 {
            let (leafvec, first) = self
                .packing
                .push_runs(&mut self.words, &painted.leaf_values());
            assert!(first <= MAX_INDEX, "group leaf words exhausted");
            self.nodes[index] = Node {
                vector: leafvec,
                base0: first as u32,
                base1: LEAF_ONLY,
            };
            return;
        }
        // A child whose routes all end in it with one value is just a leaf.
        let mut painted_here = Painted {
            values: painted.values,
            vector: painted.vector,
            children: painted.children,
            child_count: 0,
        };
        for &(pos, start, end) in &painted.children[..painted.child_count] {
            let child = Painted::new(&routes[start..end], painted.values[pos], off + STRIDE);
            if child.vector == 0 && child.values.iter().all(|&v| v == child.values[0]) {
                painted_here.values[pos] = child.values[0];
                painted_here.vector &= !(1 << pos);
            } else {
                painted_here.children[painted_here.child_count] = (pos, start, end);
                painted_here.child_count += 1;
            }
        }
        let painted = &painted_here;
        if painted.vector == 0 {
            return self.emit_node(index, routes, painted, off);
        }
        let base0 = if painted.vector == u64::MAX {
            0 // no leaf position: no block
        } else {
            self.packing
                .push_block(&mut self.words, &painted.leaf_values())
        };
        let base1 = self.nodes.len();
        // Node indices share a u32 with the walk-state tags.
        assert!(
            base1 + painted.child_count <= MAX_INDEX,
            "group node array exhausted"
        );
        assert!(base0 <= MAX_INDEX, "group leaf words exhausted");
        self.nodes
            .resize(base1 + painted.child_count, Node::default());
        self.nodes[index] = Node {
            vector: painted.vector,
            base0: base0 as u32,
            base1: base1 as u32,
        };
        for (k, &(pos, start, end)) in painted.children[..painted.child_count].iter().enumerate() {
            let child_routes = &routes[start..end];
            let default = painted.values[pos];
            if let Some(node) = path_node(child_routes, default, off + STRIDE) {
                self.nodes[base1 + k] = node;
                continue;
            }
            let child = Painted::new(child_routes, default, off + STRIDE);
            self.emit_node(base1 + k, child_routes, &child, off + STRIDE);
        }
    }
}

/// The path node for a subtree at `off` that holds `routes` over `default`,
/// if it may be one: a single route that reaches more than one level below
/// `off` (within one level, a leaf block answers it in one load as well),
/// by at most [`PATH_MAX_BITS`].
fn path_node(routes: &[BuildRoute], default: u32, off: u32) -> Option<Node> {
    let &[route] = routes else {
        return None;
    };
    let k = u32::from(route.len).checked_sub(off)?;
    if k <= STRIDE || k > PATH_MAX_BITS || default >= BLOCK || route.leaf >= BLOCK {
        return None;
    }
    Some(Node {
        vector: (bits128(route.key, off, k) as u64) << 8 | u64::from(k),
        base0: route.leaf,
        base1: PATH | default,
    })
}

/// How many routes from the start of `routes` fall at index `slot` of the
/// `n` bits at `off`. They are contiguous because `routes` is sorted.
fn run_len(routes: &[BuildRoute], off: u32, n: u32, slot: usize) -> usize {
    routes
        .iter()
        .position(|r| bits128(r.key, off, n) != slot)
        .unwrap_or(routes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r4(a: [u8; 4], len: u8, leaf: u32) -> BuildRoute {
        BuildRoute {
            key: u128::from(u32::from_be_bytes(a)) << 96,
            len,
            leaf,
        }
    }

    fn look(g: &Group, a: [u8; 4]) -> u32 {
        g.lookup(u64::from(u32::from_be_bytes(a)) << 32)
    }

    #[test]
    fn builds_and_looks_up_nested_routes() {
        let routes = [
            r4([10, 0, 0, 0], 9, 1),
            r4([10, 1, 0, 0], 16, 2),
            r4([10, 1, 2, 0], 24, 3),
            r4([10, 1, 2, 128], 25, 4),
            r4([10, 1, 2, 255], 32, 5),
            r4([10, 200, 0, 0], 13, 6),
        ];
        for dbits in [1, 4, 10] {
            let g = Group::build(&routes, dbits);
            assert_eq!(look(&g, [10, 0, 0, 1]), 1, "d={dbits}");
            assert_eq!(look(&g, [10, 1, 3, 1]), 2);
            assert_eq!(look(&g, [10, 1, 2, 1]), 3);
            assert_eq!(look(&g, [10, 1, 2, 200]), 4);
            assert_eq!(look(&g, [10, 1, 2, 255]), 5);
            assert_eq!(look(&g, [10, 127, 255, 255]), 1);
            assert_eq!(look(&g, [10, 128, 0, 0]), 0);
            assert_eq!(look(&g, [10, 207, 0, 0]), 6);
            assert_eq!(look(&g, [10, 208, 0, 0]), 0);
        }
    }

    fn r6(a: u128, len: u8, leaf: u32) -> BuildRoute {
        BuildRoute { key: a, len, leaf }
    }

    /// A route alone below its direct entry, or alone at a child position,
    /// is one path node: the addresses inside it get its value, every other
    /// one the value around it, however close.
    #[test]
    fn a_lone_deep_route_is_one_path_node() {
        // IPv6, d = 16 (split at /24): a /48 alone under 2a00:1200::/24;
        // a /32, a /34 and a /48 together under 2a00:3400::/24, where the
        // /48 is alone below /36, with the /34's value around it.
        let lone = 0x2a00_1234_5678u128 << 80;
        let pair = 0x2a00_3456u128 << 96;
        let deep = pair | 0x0001_0203u128 << 64;
        let routes = [
            r6(lone, 48, 1),
            r6(pair, 32, 2),
            r6(deep & (u128::MAX << 94), 34, 3),
            r6(deep, 48, 4),
        ];
        let g = Group::build(&routes, 16);
        let look6 = |a: u128| g.lookup(a);
        assert_eq!(look6(lone | 0xffff), 1);
        assert_eq!(look6(lone ^ 1 << 80), 0, "the last bit of the /48 differs");
        assert_eq!(look6(lone ^ 1 << 103), 0, "the first bit below /24 differs");
        assert_eq!(look6(deep | 7), 4);
        assert_eq!(look6(deep ^ 1 << 80), 3, "inside the /34, outside the /48");
        assert_eq!(
            look6(pair | 0xc1ff_0000u128 << 64),
            2,
            "inside the /32 only"
        );
        assert_eq!(look6(pair ^ 1 << 96), 0);
        let path_nodes = g
            .nodes
            .iter()
            .filter(|n| n.base1 & PATH != 0 && n.base1 != LEAF_ONLY);
        assert_eq!(path_nodes.count(), 2, "{:?}", g.nodes);
        let mut stats = super::super::PoptrieStats::default();
        g.add_stats(&mut stats);
        assert_eq!((stats.path_nodes, stats.nodes), (2, g.nodes.len()));
        let slot = bits128(lone, TOP_BITS, 16);
        assert_eq!(g.subtree_size(g.direct.get(slot)), (1, 0));
        // IPv4, d = 10 (split at /18): a /30 alone under 10.1.0.0/18.
        let g = Group::build(&[r4([10, 0, 0, 0], 9, 5), r4([10, 1, 2, 4], 30, 6)], 10);
        assert_eq!(look(&g, [10, 1, 2, 7]), 6);
        assert_eq!(look(&g, [10, 1, 2, 8]), 5);
        assert_eq!(look(&g, [10, 1, 2, 3]), 5);
        assert_eq!(g.nodes.len(), 1);
    }

    /// A path node holds at most 56 bits: a lone /80 under a /24 entry is
    /// one node, a lone /81 walks one inner node to its path node, a /128
    /// eight; all answer alike.
    #[test]
    fn path_nodes_stop_at_56_bits() {
        let base = 0x2a00_5600_0000_0000_1234_5678_9abc_def0u128;
        for (len, nodes) in [(80u8, 1), (81, 2), (128, 9)] {
            let key = base & (u128::MAX << (128 - u32::from(len)));
            let g = Group::build(&[r6(key, len, 9)], 16);
            let paths = g
                .nodes
                .iter()
                .filter(|n| n.base1 & PATH != 0 && n.base1 != LEAF_ONLY);
            assert_eq!((paths.count(), g.nodes.len()), (1, nodes), "/{len}");
            assert_eq!(g.lookup(key), 9, "/{len}");
            let last = 1u128 << (128 - u32::from(len));
            assert_eq!(g.lookup(key ^ last), 0, "/{len}: its last bit flipped");
            assert_eq!(
                g.lookup(key ^ 1 << 103),
                0,
                "/{len}: the first bit below /24"
            );
        }
    }

    #[test]
    fn direct_entries_narrow_where_they_fit() {
        for state in [LEAF, LEAF | 0x3fff, BLOCK, BLOCK | 0x3fff, 0, 0x3fff] {
            assert_eq!(narrow(state).map(widen), Some(state), "{state:#x}");
        }
        for state in [LEAF | 0x4000, BLOCK | 0x4000, 0x4000, LEAF | 0x7fff_ffff] {
            assert_eq!(narrow(state), None, "{state:#x}");
        }
        let mut direct = Direct::new(vec![LEAF | 1, BLOCK | 2, 3]);
        assert!(matches!(direct, Direct::Narrow(_)));
        direct.set(1, LEAF | 0x1_0000);
        assert!(matches!(direct, Direct::Wide(_)));
        assert_eq!(
            (0..3).map(|i| direct.get(i)).collect::<Vec<_>>(),
            [LEAF | 1, LEAF | 0x1_0000, 3]
        );
    }

    #[test]
    fn rebuilding_a_slot_leaves_garbage_until_compaction() {
        // Every /24 of 10.1.0.0/16 with next hop (value) 7, but 10.1.1.0/24 with 8.
        let mut routes: Vec<_> = (0..=255u8)
            .map(|i| r4([10, 1, i, 0], 24, if i == 1 { 8 } else { 7 }))
            .collect();
        let mut g = Group::build(&routes, 10);
        let slot = bits128(routes[0].key, TOP_BITS, 10);
        // 10.1.64.0/18 and up are uniform: plain leaves, no block.
        assert_eq!(g.direct.get(slot + 1), LEAF | 7);
        routes.truncate(64);
        routes.push(r4([10, 1, 0, 0], 26, 9));
        routes.sort_by_key(|r| (r.key, r.len));
        g.rebuild_slot(slot, &routes[..65], 0);
        assert_eq!(look(&g, [10, 1, 0, 1]), 9);
        assert_eq!(look(&g, [10, 1, 0, 64]), 7);
        // The old subtree was a bare block (leafvec, one word of 3 runs);
        // the new one a node with a child.
        assert_eq!((g.garbage_nodes, g.garbage_words), (0, 2));
        assert_eq!(look(&g, [10, 1, 1, 1]), 8);
        g.rebuild_slot(slot, &[], 3);
        assert_eq!(look(&g, [10, 1, 0, 1]), 3);
        assert_eq!(g.garbage_nodes, 2);
    }
}
