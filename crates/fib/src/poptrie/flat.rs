//! A small table as sorted address intervals: the form a snapshot of a
//! table with few routes hands its readers, so that what a lookup touches
//! grows with the routes, not with the 256 top slots and a group per /8.
//! IPv4 (`Flat<u32>`) and IPv6 (`Flat<u64>`, see below) alike.
//!
//! ```text
//!   address - base    [ k bits ][ the rest ]   (clamped to the last bucket)
//!                         │
//!   index[buckets + 1]    │  u16: the last interval starting at or before
//!                         ▼       the bucket's first address ──┐
//!   entries[n]   (start, value)                                ▼
//!                [0, v0] [base, v1] [s2, v2] …  scan the bucket's few entries
//!                                               for the last start ≤ address
//! ```
//!
//! A poptrie of 1,000 scattered IPv4 routes spreads over ~220 groups (a
//! header, a direct array, nodes and leaf blocks each: ~83 bytes a route, and
//! 4 to 6 dependent loads below the snapshot). The same routes as intervals
//! are at most 2,001 entries of 8 bytes and an index of ~1,000 `u16`s: ~18
//! bytes a route, and two dependent loads (the index entry, then one or two
//! cache lines of entries). With a thousand VRs, that is what decides whether
//! their tables stay in the caches. An IPv6 /48 in a sparse table sits six
//! node steps below its group's direct entry; here it is the same two loads.
//!
//! The buckets cover the addresses from the second interval's start (`base`:
//! everything before it is in the first interval) to the last interval's,
//! `2^shift` addresses each, so that an IPv6 table inside 2000::/3 spends no
//! bucket on the rest of the space.
//!
//! IPv6 is keyed by the top 64 bits of the address (`Flat::build6`): the
//! real table is /64 and shorter, so its lookups compare 64-bit keys in
//! 16-byte entries, as cheap as IPv4's. A block of 2^64 addresses that a
//! longer route divides (the router's own /128s, a /127 link) is one
//! interval whose value is [`REFINE`] and the index of that block's own
//! table, keyed by the low 64 bits; only addresses in such a block take the
//! second lookup.
//!
//! ```text
//!   top 64 bits ──▶ top table ──▶ value ─┬─▶ next hop + 1
//!                                        └─▶ REFINE | b ──▶ low 64 bits ──▶ refine[b] ──▶ next hop + 1
//! ```
//!
//! Built whole from the route map at each snapshot (`PoptrieLpm::snapshot`),
//! which costs O(routes): hence only for tables of at most
//! [`FLAT_MAX_ROUTES`].

use std::sync::Arc;

/// Tables of at most this many routes get a flat form in their snapshots;
/// larger ones are read through the Poptrie alone.
pub const FLAT_MAX_ROUTES: usize = 4_096;

/// Above this many entries in one bucket, a lookup binary-searches the
/// bucket instead of scanning it (a table with many routes inside one
/// small range).
const SCAN_MAX: usize = 8;

/// An address the flat form is built over: `u32` (IPv4), or `u64` (either
/// half of an IPv6 address).
pub(crate) trait FlatKey: Copy + Ord + Default + core::fmt::Debug {
    /// Whether an answer may be [`REFINE`]: an IPv6 table's top half, whose
    /// blocks with longer routes hold a table of the low 64 bits.
    const REFINES: bool;
    /// A bucket with at most this many entries after its first is scanned
    /// without a branch: a fixed window of this many entries, all compared.
    /// Those past the bucket start after every address in it, so they
    /// count only as the padding at the end of the entries, which the
    /// bucket's length caps. A loop that stops at the first larger start
    /// mispredicts its exit about once a lookup, the count varying from
    /// lookup to lookup (callgrind's branch simulation: 0.7 a packet with
    /// ten VRs' tables). A lookup's bucket holds more routes than the
    /// average one (each route draws its own traffic): with two entries a
    /// bucket, a window of 8 covers about 98% of lookups.
    const WINDOW: usize;
    /// One interval: its start and leaf value.
    type Entry: Copy + core::fmt::Debug;
    /// The address of a value that fits the key.
    fn from_u128(v: u128) -> Self;
    fn entry(start: Self, value: u32) -> Self::Entry;
    /// Whether `e` starts at or before `self`.
    fn after(self, e: &Self::Entry) -> bool;
    fn value(e: Self::Entry) -> u32;
    /// `(self - base) >> shift`, 0 below `base`, at most `last`.
    fn bucket(self, base: Self, shift: u32, last: usize) -> usize;
    /// This family's flat form in `any`, if `any` is of this family.
    fn of(any: &FlatAny) -> Option<&Flat<Self>>;
}

impl FlatKey for u32 {
    const REFINES: bool = false;
    /// One cache line of 8-byte entries.
    const WINDOW: usize = 8;
    /// `start << 32 | value`.
    type Entry = u64;

    fn from_u128(v: u128) -> Self {
        v as u32
    }

    #[inline(always)]
    fn entry(start: Self, value: u32) -> u64 {
        u64::from(start) << 32 | u64::from(value)
    }

    /// One comparison: `e` is at most the largest entry starting at `self`.
    #[inline(always)]
    fn after(self, e: &u64) -> bool {
        *e <= Self::entry(self, u32::MAX)
    }

    #[inline(always)]
    fn value(e: u64) -> u32 {
        e as u32
    }

    #[inline(always)]
    fn bucket(self, base: Self, shift: u32, last: usize) -> usize {
        // `shift` ≤ 32: a u64 shift never overflows.
        ((u64::from(self.saturating_sub(base)) >> shift) as usize).min(last)
    }

    #[inline(always)]
    fn of(any: &FlatAny) -> Option<&Flat<Self>> {
        match any {
            FlatAny::V4(f) => Some(f),
            FlatAny::V6(_) => None,
        }
    }
}

impl FlatKey for u64 {
    const REFINES: bool = true;
    /// As for IPv4: four left about 0.7 mispredicted scans a packet with
    /// 16 IPv6 routes (callgrind's branch simulation), though eight 16-byte
    /// entries span two or three lines.
    const WINDOW: usize = 8;
    /// `(start, value)`.
    type Entry = (u64, u32);

    fn from_u128(v: u128) -> Self {
        v as u64
    }

    #[inline(always)]
    fn entry(start: Self, value: u32) -> (u64, u32) {
        (start, value)
    }

    #[inline(always)]
    fn after(self, e: &(u64, u32)) -> bool {
        e.0 <= self
    }

    #[inline(always)]
    fn value(e: (u64, u32)) -> u32 {
        e.1
    }

    #[inline(always)]
    fn bucket(self, base: Self, shift: u32, last: usize) -> usize {
        // `shift` < 64 (a table of two intervals or more has `k` ≥ 1).
        ((self.saturating_sub(base).wrapping_shr(shift)) as usize).min(last)
    }

    #[inline(always)]
    fn of(any: &FlatAny) -> Option<&Flat<Self>> {
        match any {
            FlatAny::V6(f) => Some(f),
            FlatAny::V4(_) => None,
        }
    }
}

/// The interval form of a small table. See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Flat<K: FlatKey> {
    /// The first address of bucket 0 (the second interval's start).
    base: K,
    /// A bucket is `2^shift` addresses.
    shift: u32,
    /// The last bucket: addresses past it are in it.
    last: usize,
    /// Per bucket, and one past the last: the position in `entries` of the
    /// last interval starting at or before the bucket's first address (0
    /// for bucket 0, so that addresses before `base` find the first).
    index: Arc<[u16]>,
    /// Intervals in address order, each with its leaf value (next hop + 1;
    /// 0: no route). `entries[0]` starts at 0; neighbours never share a
    /// value.
    entries: Arc<[K::Entry]>,
    /// An IPv6 table's blocks of 2^64 addresses that longer routes divide:
    /// the table of their low 64 bits, which a [`REFINE`] value names.
    /// Empty for IPv4 and for the blocks' own tables.
    refine: Arc<[Flat<u64>]>,
}

/// A leaf value with this bit set is not an answer but the block table
/// (`Flat::refine`) to look the low 64 bits up in.
pub(crate) const REFINE: u32 = 1 << 31;

/// The flat form of either family, as a snapshot holds it.
#[derive(Clone, Debug)]
pub(crate) enum FlatAny {
    V4(Flat<u32>),
    V6(Flat<u64>),
}

impl FlatAny {
    /// Heap bytes of the index and the entries.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            FlatAny::V4(f) => f.memory_bytes(),
            FlatAny::V6(f) => f.memory_bytes(),
        }
    }
}

/// Appends the interval starting at `pos` with `value`, merging it into its
/// neighbours; positions arrive in non-decreasing order.
fn emit(out: &mut Vec<(u128, u32)>, pos: u128, value: u32) {
    let n = out.len();
    match out.last_mut() {
        Some(last) if last.0 == pos => {
            last.1 = value;
            if n >= 2 && out[n - 2].1 == value {
                out.pop();
            }
        }
        Some(last) if last.1 == value => {}
        _ => out.push((pos, value)),
    }
}

/// The intervals of `routes` over a space of `bits` bits: (address,
/// length, next hop + 1), in (address, length) order, so that a route
/// follows every route covering it. Sorted by start, the first at 0, no two
/// neighbours with the same value.
fn intervals(routes: impl Iterator<Item = (u128, u8, u32)>, bits: u32) -> Vec<(u128, u32)> {
    // The end of a route, `None` for the end of the address space.
    let end_of = |start: u128, len: u8| {
        1u128
            .checked_shl(bits - u32::from(len).min(bits))
            .and_then(|size| start.checked_add(size))
            .filter(|&end| bits == 128 || end >> bits == 0)
    };
    let mut out: Vec<(u128, u32)> = vec![(0, 0)];
    // Routes covering the current position: (end, value); the bottom is
    // the whole space with no route.
    let mut stack: Vec<(Option<u128>, u32)> = vec![(None, 0)];
    for (start, len, value) in routes {
        while let Some(&(Some(end), _)) = stack.last() {
            if end > start {
                break;
            }
            stack.pop();
            let under = stack.last().map_or(0, |&(_, v)| v);
            emit(&mut out, end, under);
        }
        emit(&mut out, start, value);
        stack.push((end_of(start, len), value));
    }
    while stack.len() > 1 {
        let Some((end, _)) = stack.pop() else { break };
        let under = stack.last().map_or(0, |&(_, v)| v);
        if let Some(end) = end {
            emit(&mut out, end, under);
        }
    }
    out
}

impl Flat<u32> {
    /// The flat form of an IPv4 table: `routes` as (address, length, next
    /// hop + 1) in (address, length) order. `None` if it has more intervals
    /// than a `u16` index can point at (never for [`FLAT_MAX_ROUTES`]
    /// routes: at most 2 × routes + 1).
    pub(crate) fn build(routes: impl Iterator<Item = (u128, u8, u32)>) -> Option<Flat<u32>> {
        Flat::from_intervals(intervals(routes, 32), Arc::from([]))
    }
}

impl Flat<u64> {
    /// The flat form of an IPv6 table, over the addresses' top 64 bits: a
    /// table of /64s and shorter routes is then looked up as cheaply as an
    /// IPv4 one (64-bit keys, 16-byte entries). A block of 2^64 addresses
    /// that a longer route divides (a /128 of the router's own, say) is one
    /// top interval whose value is [`REFINE`] and the index of the block's
    /// own table of its low 64 bits. `routes` as for [`Flat::build`].
    pub(crate) fn build6(routes: impl Iterator<Item = (u128, u8, u32)>) -> Option<Flat<u64>> {
        let all = intervals(routes, 128);
        if all.iter().any(|&(_, v)| v >= REFINE) {
            return None;
        }
        let mut top: Vec<(u128, u32)> = Vec::new();
        let mut blocks: Vec<Flat<u64>> = Vec::new();
        let mut i = 0;
        while let Some(&(pos, value)) = all.get(i) {
            let block = pos >> 64;
            let aligned = pos as u64 == 0;
            // The intervals starting inside this block: [i, j).
            let j = i + all[i..].iter().take_while(|e| e.0 >> 64 == block).count();
            if aligned && j == i + 1 {
                top.push((block, value));
                i = j;
                continue;
            }
            // The value at the block's first address: this interval's, or
            // the one that runs into the block (`all[0]` starts at 0, so
            // an unaligned start has one before it).
            let entering = if aligned { value } else { all[i - 1].1 };
            let mut low: Vec<(u128, u32)> = vec![(0, entering)];
            low.extend(
                all[i..j]
                    .iter()
                    .filter(|e| e.0 as u64 != 0)
                    .map(|&(p, v)| (p & u128::from(u64::MAX), v)),
            );
            let index = u32::try_from(blocks.len()).ok().filter(|&b| b < REFINE)?;
            blocks.push(Flat::from_intervals(low, Arc::from([]))?);
            top.push((block, REFINE | index));
            // What runs on past the block, unless the next interval starts
            // right at its end (or the block ends the space).
            let after = block + 1;
            if after >> 64 == 0 && all.get(j).is_none_or(|e| e.0 >> 64 > after) {
                top.push((after, all[j - 1].1));
            }
            i = j;
        }
        Flat::from_intervals(top, blocks.into())
    }
}

impl<K: FlatKey> Flat<K> {
    /// The form of `out` (from [`intervals`], positions within `K`), with
    /// `refine` as its block tables.
    fn from_intervals(out: Vec<(u128, u32)>, refine: Arc<[Flat<u64>]>) -> Option<Flat<K>> {
        let n = out.len();
        if n > usize::from(u16::MAX) {
            return None;
        }
        // About two entries a bucket, over [base, last start].
        let bits = usize::BITS - (n / 2).leading_zeros();
        let base = out.get(1).map_or(0, |e| e.0);
        // Sorted: `base` is at most the last start.
        let span = out[n - 1].0 - base;
        let shift = (u128::BITS - span.leading_zeros()).saturating_sub(bits);
        let buckets = usize::try_from(span.checked_shr(shift).unwrap_or(0)).ok()? + 1;
        let mut index = Vec::with_capacity(buckets + 1);
        index.push(0u16);
        let mut last = 0usize;
        for b in 1..=buckets as u128 {
            // `None` past the end of the space (`checked_shl` would drop
            // the bits shifted out).
            let first = 1u128
                .checked_shl(shift)
                .and_then(|width| b.checked_mul(width))
                .and_then(|o| base.checked_add(o));
            while last + 1 < n && first.is_none_or(|f| out[last + 1].0 <= f) {
                last += 1;
            }
            index.push(u16::try_from(last).ok()?);
        }
        Some(Flat {
            base: K::from_u128(base),
            shift,
            last: buckets - 1,
            index: index.into(),
            // The window of the last bucket reads past the last entry:
            // padding at the last address, which only that address counts,
            // and the bucket's length caps.
            entries: out
                .into_iter()
                .chain(std::iter::repeat_n((u128::MAX, 0), K::WINDOW))
                .map(|(pos, value)| K::entry(K::from_u128(pos), value))
                .collect(),
            refine,
        })
    }

    /// The bucket of `addr`.
    #[inline(always)]
    pub(crate) fn bucket(&self, addr: K) -> usize {
        addr.bucket(self.base, self.shift, self.last)
    }

    /// Where the index entry of bucket `b` lies: a cache line to prefetch.
    #[inline(always)]
    pub(crate) fn index_line(&self, b: usize) -> *const u8 {
        self.index.as_ptr().wrapping_add(b).cast()
    }

    /// The first entry bucket `b` can answer with.
    #[inline(always)]
    pub(crate) fn first(&self, b: usize) -> usize {
        usize::from(self.index[b])
    }

    /// Where entry `i` lies: a cache line to prefetch.
    #[inline(always)]
    pub(crate) fn entry_line(&self, i: usize) -> *const u8 {
        self.entries.as_ptr().wrapping_add(i).cast()
    }

    /// The leaf value (next hop + 1, 0 for none) of `addr`, in bucket `b`
    /// whose first candidate is `lo` ([`Flat::first`]); `low` is the
    /// address's low 64 bits, looked up in its block when `addr` falls in
    /// a divided one (IPv6; IPv4 passes 0).
    #[inline(always)]
    pub(crate) fn finish(&self, addr: K, low: u64, b: usize, lo: usize) -> u32 {
        self.scan(addr, low, lo, usize::from(self.index[b + 1]))
    }

    /// Where the window of a bucket whose first entry is `i` ends: its
    /// last cache line, to prefetch with [`Flat::entry_line`]'s, since
    /// the window is read whole.
    #[inline(always)]
    pub(crate) fn window_line(&self, i: usize) -> *const u8 {
        self.entry_line(i + K::WINDOW)
    }

    /// The first and last candidates of bucket `b`: its entry of the index
    /// and the next, read together.
    #[inline(always)]
    pub(crate) fn span(&self, b: usize) -> (usize, usize) {
        match self.index.get(b..b + 2) {
            Some(&[lo, hi]) => (usize::from(lo), usize::from(hi)),
            _ => (0, 0),
        }
    }

    /// [`Flat::finish`] with the bucket's candidates `lo..=hi` at hand
    /// ([`Flat::span`]).
    #[inline(always)]
    pub(crate) fn scan(&self, addr: K, low: u64, lo: usize, hi: usize) -> u32 {
        // The bucket's entries after the first: those starting at or
        // before `addr` come first (the entries are sorted), so their count
        // is the answer's offset from `lo`.
        let len = hi.saturating_sub(lo);
        let window = self.entries.get(lo + 1..lo + 1 + K::WINDOW);
        let found = match (window, self.entries.get(lo + 1..=hi)) {
            (Some(w), _) if len <= K::WINDOW => {
                lo + w.iter().filter(|e| addr.after(e)).count().min(len)
            }
            (_, Some(s)) if s.len() <= SCAN_MAX => {
                lo + s.iter().take_while(|e| addr.after(e)).count()
            }
            (_, Some(s)) => lo + s.partition_point(|e| addr.after(e)),
            (_, None) => lo,
        };
        let value = self.entries.get(found).map_or(0, |&e| K::value(e));
        if K::REFINES && value & REFINE != 0 {
            return self.in_block(value, low);
        }
        value
    }

    /// The leaf value of the address `addr` (then `low`, as for
    /// [`Flat::finish`]).
    #[inline(always)]
    pub(crate) fn lookup(&self, addr: K, low: u64) -> u32 {
        let b = self.bucket(addr);
        self.finish(addr, low, b, self.first(b))
    }

    /// The leaf value of `low` in the divided block that the [`REFINE`]
    /// value `value` names: [`Flat::finish`]'s rare case, out of the
    /// lookups' loops. A block's own table holds no [`REFINE`] value.
    #[cold]
    #[inline(never)]
    fn in_block(&self, value: u32, low: u64) -> u32 {
        self.refine
            .get((value & !REFINE) as usize)
            .map_or(0, |b| b.lookup(low, 0))
    }

    /// Heap bytes of the index, the entries and the block tables.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.index.len() * 2
            + self.entries.len() * size_of::<K::Entry>()
            + self.refine.iter().map(Flat::memory_bytes).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat4(routes: &[(u32, u8, u32)]) -> Flat<u32> {
        Flat::build(routes.iter().map(|&(a, l, v)| (u128::from(a), l, v))).expect("small")
    }

    #[test]
    fn nested_routes_become_intervals() {
        // 0.0.0.0/0 → 4, 10.0.0.0/8 → 1, 10.1.0.0/16 → 2, 10.1.2.0/24 → 3
        let flat = flat4(&[
            (0, 0, 4),
            (0x0a00_0000, 8, 1),
            (0x0a01_0000, 16, 2),
            (0x0a01_0200, 24, 3),
        ]);
        for (addr, want) in [
            (0, 4),
            (0x09ff_ffff, 4),
            (0x0a00_0000, 1),
            (0x0a01_0000, 2),
            (0x0a01_0200, 3),
            (0x0a01_02ff, 3),
            (0x0a01_0300, 2),
            (0x0a02_0000, 1),
            (0x0b00_0000, 4),
            (u32::MAX, 4),
        ] {
            assert_eq!(flat.lookup(addr, 0), want, "{addr:#x}");
        }
        // 0/0, 10/8, 10.1/16, 10.1.2/24, back to 10.1/16, 10/8, 0/0.
        assert_eq!(flat.entries.len() - u32::WINDOW, 7);
    }

    #[test]
    fn equal_neighbours_merge_and_host_routes_end_the_space() {
        let flat = flat4(&[(0x0a00_0000, 8, 1), (0x0a80_0000, 9, 1), (u32::MAX, 32, 2)]);
        assert_eq!(flat.lookup(0x0a7f_ffff, 0), 1);
        assert_eq!(flat.lookup(0x0aff_ffff, 0), 1);
        assert_eq!(flat.lookup(0x0b00_0000, 0), 0);
        assert_eq!(flat.lookup(u32::MAX - 1, 0), 0);
        assert_eq!(flat.lookup(u32::MAX, 0), 2);
        assert_eq!(flat.lookup(0x09ff_ffff, 0), 0);
        // [0, none) [10/8, 1) [11/8, none) [255.255.255.255, 2)
        assert_eq!(flat.entries.len() - u32::WINDOW, 4);
    }

    #[test]
    fn a_crowded_bucket_is_searched() {
        // 300 host routes close together: few buckets hold them all.
        let routes: Vec<_> = (0..300u32)
            .map(|i| (0xc000_0200 + i * 2, 32, i + 1))
            .collect();
        let flat = flat4(&routes);
        for i in 0..300u32 {
            assert_eq!(flat.lookup(0xc000_0200 + i * 2, 0), i + 1);
            assert_eq!(flat.lookup(0xc000_0200 + i * 2 + 1, 0), 0);
        }
        assert_eq!(flat.lookup(0, 0), 0);
        assert_eq!(flat.lookup(u32::MAX, 0), 0);
    }

    #[test]
    fn an_empty_table_has_one_interval() {
        let flat = flat4(&[]);
        assert_eq!(flat.lookup(0, 0), 0);
        assert_eq!(flat.lookup(u32::MAX, 0), 0);
        assert_eq!(flat.memory_bytes(), 2 * 2 + 8 * (1 + u32::WINDOW));
    }

    /// The answer of `flat` (an IPv6 table) for `addr`.
    fn lookup6(flat: &Flat<u64>, addr: u128) -> u32 {
        flat.lookup((addr >> 64) as u64, addr as u64)
    }

    #[test]
    fn ipv6_buckets_cover_only_the_routes_span() {
        // Three /48s inside 2001:db8::/32, a /0, and a /128 at the very end.
        let p = |hi: u128| hi << 80;
        let routes = [
            (0u128, 0u8, 9u32),
            (p(0x2001_0db8_0001), 48, 1),
            (p(0x2001_0db8_0002), 48, 2),
            (p(0x2001_0db8_ffff), 48, 3),
            (u128::MAX, 128, 4),
        ];
        let flat = Flat::build6(routes.into_iter()).expect("small");
        assert_eq!(lookup6(&flat, 0), 9);
        assert_eq!(lookup6(&flat, p(0x2001_0db8_0001)), 1);
        assert_eq!(lookup6(&flat, p(0x2001_0db8_0001) | 0xffff), 1);
        assert_eq!(lookup6(&flat, p(0x2001_0db8_0002) - 1), 1);
        assert_eq!(lookup6(&flat, p(0x2001_0db8_0002)), 2);
        assert_eq!(lookup6(&flat, p(0x2001_0db8_0003)), 9);
        assert_eq!(lookup6(&flat, p(0x2001_0db8_ffff) + 5), 3);
        assert_eq!(lookup6(&flat, u128::MAX - 1), 9);
        assert_eq!(lookup6(&flat, u128::MAX), 4);
        assert_eq!(flat.base, (p(0x2001_0db8_0001) >> 64) as u64);
        // The /128 divides the last block of 2^64 addresses; nothing else
        // is longer than /64.
        assert_eq!(flat.refine.len(), 1);
    }

    #[test]
    fn ipv6_routes_longer_than_64_bits_divide_their_block() {
        // 2001:db8::/64 connected, 2001:db8::1/128 local, 2001:db8::8000:0:0:0/65,
        // a /127 in the next /64, and a /64 right after that one.
        let a = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().expect("address"));
        let mut routes = [
            (a("2001:db8::"), 64u8, 1u32),
            (a("2001:db8::1"), 128, 2),
            (a("2001:db8::8000:0:0:0"), 65, 3),
            (a("2001:db8:0:1::10"), 127, 4),
            (a("2001:db8:0:2::"), 64, 5),
        ];
        routes.sort_unstable_by_key(|&(p, l, _)| (p, l));
        let flat = Flat::build6(routes.into_iter()).expect("small");
        for (addr, want) in [
            ("::", 0),
            ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", 0),
            ("2001:db8::", 1),
            ("2001:db8::1", 2),
            ("2001:db8::2", 1),
            ("2001:db8::7fff:ffff:ffff:ffff", 1),
            ("2001:db8::8000:0:0:0", 3),
            ("2001:db8::ffff:ffff:ffff:ffff", 3),
            ("2001:db8:0:1::", 0),
            ("2001:db8:0:1::f", 0),
            ("2001:db8:0:1::10", 4),
            ("2001:db8:0:1::11", 4),
            ("2001:db8:0:1::12", 0),
            ("2001:db8:0:2::", 5),
            ("2001:db8:0:2:ffff:ffff:ffff:ffff", 5),
            ("2001:db8:0:3::", 0),
        ] {
            assert_eq!(lookup6(&flat, a(addr)), want, "{addr}");
        }
        // Two divided blocks: 2001:db8::/64 and 2001:db8:0:1::/64.
        assert_eq!(flat.refine.len(), 2);
    }
}
