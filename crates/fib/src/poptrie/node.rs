//! The lookup-side encoding: keys, direct entries, 64-way nodes and leaf blocks.
//!
//! Everything here is plain integers so that a lookup is shifts, one
//! `popcnt` per level and array loads: no pointer chasing through `Box`es.

/// Address bits consumed by the top level: 256 slots, one per /8 (IPv4) or
/// 0x00..0xff::/8 (IPv6). Each slot is one copy-on-write [`super::Group`].
///
/// 8 because the top array must stay small for thousands of small VRs
/// (256 × 16 B = 4 KiB) and a group is the unit a publication copies: a /8 of
/// a full IPv4 table holds ~4k routes on average.
pub(crate) const TOP_BITS: u32 = 8;
/// Slots in the top array.
pub(crate) const TOP_SLOTS: usize = 1 << TOP_BITS;
/// Address bits consumed by one node: 2^6 = 64 children, one `u64` bitmap.
pub(crate) const STRIDE: u32 = 6;
/// Node levels a walk may take at most: (128 − 8 − 4) / 6 rounded up, with
/// room to spare. Only bounds the loop against a broken invariant.
pub(crate) const MAX_NODE_DEPTH: usize = 22;

/// Walk state / direct entry tag: a leaf; the low 31 bits are its value.
pub(crate) const LEAF: u32 = 1 << 31;
/// Walk state / direct entry tag: a leaf block (a subtree without inner
/// nodes); the low 30 bits are its word offset. Neither tag: a node index.
pub(crate) const BLOCK: u32 = 1 << 30;
/// The largest node index or block offset (30 bits).
pub(crate) const MAX_INDEX: usize = (BLOCK - 1) as usize;

/// A 64-way node (Poptrie, Asai & Ohara, SIGCOMM 2015), 16 bytes, in one of
/// three forms:
///
/// ```text
///   inner      vector   bit i = 1: child i is a node → nodes[base1 + popcnt(vector & ≤i) - 1]
///                       bit i = 0: child i is a leaf → the leaf block at words[base0]
///   leaf-only  vector   the leafvec itself (no child), runs from words[base0];
///              base1 = LEAF_ONLY
///   path       vector   the one route's next k bits (k ≤ PATH_MAX_BITS), then k
///                       in the low 8 bits; base0 = its value,
///                       base1 = PATH | the value of every other address
/// ```
///
/// The leaf-only form saves the leafvec word of a block for the many nodes
/// at the bottom of a walk (most nodes of an IPv6 table). The path form
/// stands for a subtree that holds one route reaching more than a level
/// below it (path compression): an IPv6 /48 alone under its direct entry,
/// as most are in a table spread over 2000::/3, is one node where it was a
/// chain of four nodes and a leaf block, so one dependent load instead of
/// five.
///
/// The children of a node are contiguous in the node array and always sit
/// after their parent, so a walk cannot loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Node {
    /// Child positions that are nodes.
    pub(crate) vector: u64,
    /// Word offset of the node's leaf block (unused when every child is a node).
    pub(crate) base0: u32,
    /// Index of the node's first child in the node array, or [`LEAF_ONLY`].
    pub(crate) base1: u32,
}

/// `Node::base1` of a leaf-only node (no node index comes near it).
pub(crate) const LEAF_ONLY: u32 = u32::MAX;

/// `Node::base1` tag of a path node; the bits below it hold the value of
/// the addresses outside its route (below [`BLOCK`], so never
/// [`LEAF_ONLY`]). Node indices stay below it.
pub(crate) const PATH: u32 = 1 << 31;

/// The most key bits a path node holds (the rest of its `u64` is their
/// count).
pub(crate) const PATH_MAX_BITS: u32 = 56;

/// Bits `0..=idx` of a 64-bit map (idx < 64).
#[inline(always)]
pub(crate) fn upto(idx: u32) -> u64 {
    // `<< 1` of bit 63 is 0, and 0 - 1 is all ones.
    ((1u64 << idx) << 1).wrapping_sub(1)
}

/// How a group packs leaf values into the `u64` words of its leaf blocks.
///
/// ```text
///   leaf block at word o:  words[o]      leafvec: bit i = 1 where a run of
///                                        equal leaves starts (leaf positions only)
///                          words[o+1..]  the runs' values, 16 per word (4 bits),
///                                        8 (u8), 4 (u16) or 2 per word (u32)
///   leaf at position idx:  run r = popcnt(leafvec & ≤idx) - 1
///                          words[o + 1 + r / per_word] >> (r % per_word · width)
/// ```
///
/// A group uses the narrowest packing its values fit: a value is a next
/// hop id + 1, and a VR with a full table often has a handful of upstreams
/// (ids up to 14: 4 bits; the engine numbers four fixed next hops, then each
/// gateway and attached interface it has used), usually fewer than 255
/// (u8), almost always fewer than 65535 (u16). Narrower leaves mean a smaller table, and
/// on this machine kind a smaller table is a faster one (more of it stays
/// in L2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Packing {
    /// log2 of leaves per word: 4 (4 bits), 3 (u8), 2 (u16) or 1 (u32).
    shift: u32,
}

impl Packing {
    /// 16 leaves of 4 bits per word.
    pub(crate) const NIBBLE: Packing = Packing { shift: 4 };
    /// 8 leaves of 8 bits per word.
    pub(crate) const BYTE: Packing = Packing { shift: 3 };
    /// 4 leaves of 16 bits per word.
    pub(crate) const NARROW: Packing = Packing { shift: 2 };
    /// 2 leaves of 32 bits per word.
    pub(crate) const WIDE: Packing = Packing { shift: 1 };

    /// The narrowest packing that holds every value up to `max`.
    pub(crate) fn for_max(max: u32) -> Self {
        if max <= 0xf {
            Self::NIBBLE
        } else if max <= u32::from(u8::MAX) {
            Self::BYTE
        } else if max <= u32::from(u16::MAX) {
            Self::NARROW
        } else {
            Self::WIDE
        }
    }

    /// Whether `value` fits.
    pub(crate) fn fits(self, value: u32) -> bool {
        value <= u32::MAX >> (32 - self.width())
    }

    /// Leaves per word.
    pub(crate) fn per_word(self) -> usize {
        1 << self.shift
    }

    /// Bits per leaf.
    pub(crate) fn width(self) -> u32 {
        64 >> self.shift
    }

    /// Run `run` of the runs starting at word `first`: (word index, bit shift).
    #[inline(always)]
    pub(crate) fn locate(self, first: usize, run: usize) -> (usize, u32) {
        let lane = run & ((1 << self.shift) - 1);
        (
            first + (run >> self.shift),
            (lane as u32) << (6 - self.shift),
        )
    }

    /// The value at `shift` in `word`.
    #[inline(always)]
    pub(crate) fn extract(self, word: u64, shift: u32) -> u32 {
        let mask = u64::MAX >> (64 - self.width());
        ((word >> shift) & mask) as u32
    }

    /// Appends the runs of `values` (one per position, `None` at node
    /// positions) to `words`: returns the leafvec and the first run word.
    pub(crate) fn push_runs(
        self,
        words: &mut Vec<u64>,
        values: &[Option<u32>; 64],
    ) -> (u64, usize) {
        let first = words.len();
        let mut leafvec = 0u64;
        let mut runs = 0usize;
        let mut previous = None;
        for (pos, value) in values.iter().enumerate() {
            let Some(value) = *value else { continue };
            if previous == Some(value) {
                continue;
            }
            previous = Some(value);
            leafvec |= 1 << pos;
            let (word, shift) = self.locate(first, runs);
            if word == words.len() {
                words.push(0);
            }
            words[word] |= u64::from(value) << shift;
            runs += 1;
        }
        (leafvec, first)
    }

    /// Appends a leaf block (leafvec word, then runs) for `values`; returns
    /// its offset.
    pub(crate) fn push_block(self, words: &mut Vec<u64>, values: &[Option<u32>; 64]) -> usize {
        let block = words.len();
        words.push(0);
        let (leafvec, _) = self.push_runs(words, values);
        words[block] = leafvec;
        block
    }

    /// Words holding the runs of `leafvec`.
    pub(crate) fn run_words(self, leafvec: u64) -> usize {
        (leafvec.count_ones() as usize).div_ceil(self.per_word())
    }
}

/// An address left-aligned in an integer: IPv4 in a `u64`, IPv6 in a `u128`.
///
/// Bits past the address are zero, so a node straddling the end of the
/// address (IPv4 bits 30..36) simply sees zeros there.
pub(crate) trait Key: Copy + Default {
    /// `n` bits (1..=56) starting `off` bits from the left, as an index.
    fn bits(self, off: u32, n: u32) -> usize;
    /// Whether most lookups walk a node below their direct entry, so that
    /// a batch prefetches it ([`super::group::Group::next_line`]): IPv6,
    /// whose /32–/48 routes end below the /24 its large groups split at.
    /// IPv4's end in the leaf block under their direct entry, and a batch
    /// prefetches that alone, without the select.
    const WALKS: bool;
    /// The address as the flat form of small tables keys it.
    type Flat: super::flat::FlatKey;
    fn flat(self) -> Self::Flat;
    /// The bits below the flat key (an IPv6 address's low 64 bits), which
    /// a divided block's table is keyed by.
    fn low(self) -> u64;
}

impl Key for u64 {
    const WALKS: bool = false;
    #[inline(always)]
    fn bits(self, off: u32, n: u32) -> usize {
        ((self << off) >> (64 - n)) as usize
    }
    /// The IPv4 address: the top 32 bits.
    type Flat = u32;
    #[inline(always)]
    fn flat(self) -> u32 {
        (self >> 32) as u32
    }
    #[inline(always)]
    fn low(self) -> u64 {
        0
    }
}

impl Key for u128 {
    const WALKS: bool = true;
    #[inline(always)]
    fn bits(self, off: u32, n: u32) -> usize {
        ((self << off) >> (128 - n)) as usize
    }
    /// The top 64 bits (see `Flat::build6`).
    type Flat = u64;
    #[inline(always)]
    fn flat(self) -> u64 {
        (self >> 64) as u64
    }
    #[inline(always)]
    fn low(self) -> u64 {
        self as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upto_covers_the_index() {
        assert_eq!(upto(0), 1);
        assert_eq!(upto(5), 0b11_1111);
        assert_eq!(upto(63), u64::MAX);
    }

    #[test]
    fn blocks_pack_runs() {
        for packing in [
            Packing::NIBBLE,
            Packing::BYTE,
            Packing::NARROW,
            Packing::WIDE,
        ] {
            let top = u32::MAX >> (32 - packing.width());
            let mut values = [Some(7); 64];
            values[3] = None;
            values[10..20].fill(Some(9));
            values[20..].fill(Some(top));
            let mut words = vec![42];
            let block = packing.push_block(&mut words, &values);
            assert_eq!(block, 1);
            assert_eq!(words[block], 1 | (1 << 10) | (1 << 20));
            assert_eq!(words.len(), 2 + packing.run_words(words[block]));
            assert!(packing.fits(top));
            assert!(top == u32::MAX || !packing.fits(top + 1));
            for (run, want) in [7, 9, top].into_iter().enumerate() {
                let (word, shift) = packing.locate(block + 1, run);
                assert_eq!(packing.extract(words[word], shift), want);
            }
        }
        let mut words = Vec::new();
        let values = [Some(0x1_0000); 64];
        Packing::WIDE.push_block(&mut words, &values);
        assert_eq!(Packing::WIDE.extract(words[1], 0), 0x1_0000);
    }

    #[test]
    fn key_bits() {
        let k4 = 0x0a01_0203u64 << 32;
        assert_eq!(k4.bits(0, 8), 0x0a);
        assert_eq!(k4.bits(8, 10), 0x01 << 2);
        // Past the end of a 32-bit address: zeros.
        assert_eq!(k4.bits(30, 6), 0b11 << 4);
        let k6 = 0x2001_0db8u128 << 96;
        assert_eq!(k6.bits(0, 16), 0x2001);
        assert_eq!(k6.bits(126, 6), 0);
    }
}
