//! A small IPv4 table as sorted address intervals: the form a snapshot of a
//! table with few routes hands its readers, so that what a lookup touches
//! grows with the routes, not with the 256 top slots and a group per /8.
//!
//! ```text
//!   address    [ k bits ][ 32 - k bits ]
//!                  │
//!   index[2^k + 1] │  u16: the last interval starting at or before the
//!                  ▼       bucket's first address ──┐
//!   entries[n]   start << 32 | value                ▼
//!                [0, v0] [s1, v1] [s2, v2] … scan the bucket's few entries
//!                                                 for the last start ≤ address
//! ```
//!
//! A poptrie of 1,000 scattered routes spreads over ~220 groups (a header, a
//! direct array, nodes and leaf blocks each: ~83 bytes a route, and 4 to 6
//! dependent loads below the snapshot). The same routes as intervals are at
//! most 2,001 entries of 8 bytes and an index of ~1,000 `u16`s: ~18 bytes a
//! route, and two dependent loads (the index entry, then one or two cache
//! lines of entries). With a thousand VRs, that is what decides whether their
//! tables stay in the last-level cache.
//!
//! Built whole from the route map at each snapshot (`PoptrieLpm::snapshot`),
//! which costs O(routes): hence only for tables of at most
//! [`FLAT_MAX_ROUTES`].

use std::sync::Arc;

/// IPv4 tables of at most this many routes get a flat form in their
/// snapshots; larger ones are read through the Poptrie alone.
pub const FLAT_MAX_ROUTES: usize = 4_096;

/// Above this many entries in one bucket, a lookup binary-searches the
/// bucket instead of scanning it (a table with many routes inside one
/// small range).
const SCAN_MAX: usize = 8;

/// The interval form of a small IPv4 table. See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Flat {
    /// Index bits `k`: the bucket of an address is its top `k` bits.
    bits: u32,
    /// Per bucket, and one past the last: the position in `entries` of the
    /// last interval starting at or before the bucket's first address.
    index: Arc<[u16]>,
    /// Intervals in address order, `start << 32 | value`, where `value` is
    /// the next hop + 1 (0: no route). `entries[0]` starts at 0; neighbours
    /// never share a value.
    entries: Arc<[u64]>,
}

/// Appends the interval starting at `pos` with `value`, merging it into its
/// neighbours; positions arrive in non-decreasing order.
fn emit(out: &mut Vec<u64>, pos: u64, value: u32) {
    if pos >= 1 << 32 {
        return;
    }
    let entry = pos << 32 | u64::from(value);
    let n = out.len();
    match out.last_mut() {
        Some(last) if *last >> 32 == pos => {
            *last = entry;
            if n >= 2 && out[n - 2] as u32 == value {
                out.pop();
            }
        }
        Some(last) if *last as u32 == value => {}
        _ => out.push(entry),
    }
}

impl Flat {
    /// The intervals of `routes`: (address, length, next hop + 1), in
    /// (address, length) order, so that a route follows every route
    /// covering it. `None` if the table has more intervals than a `u16`
    /// index can point at (never for [`FLAT_MAX_ROUTES`] routes: at most
    /// 2 × routes + 1).
    pub(crate) fn build(routes: impl Iterator<Item = (u32, u8, u32)>) -> Option<Flat> {
        let mut out: Vec<u64> = vec![0];
        // Routes covering the current position: (end, value); the bottom is
        // the whole space with no route.
        let mut stack: Vec<(u64, u32)> = vec![(1 << 32, 0)];
        for (addr, len, value) in routes {
            let start = u64::from(addr);
            let end = start + (1u64 << (32 - u32::from(len.min(32))));
            while let Some(&(top_end, _)) = stack.last() {
                if top_end > start || stack.len() == 1 {
                    break;
                }
                stack.pop();
                let under = stack.last().map_or(0, |&(_, v)| v);
                emit(&mut out, top_end, under);
            }
            emit(&mut out, start, value);
            stack.push((end, value));
        }
        while stack.len() > 1 {
            let Some((end, _)) = stack.pop() else { break };
            let under = stack.last().map_or(0, |&(_, v)| v);
            emit(&mut out, end, under);
        }
        let n = out.len();
        if n > usize::from(u16::MAX) {
            return None;
        }
        // About two entries a bucket.
        let bits = (usize::BITS - (n / 2).leading_zeros()).min(16);
        let buckets = 1usize << bits;
        let mut index = Vec::with_capacity(buckets + 1);
        let mut last = 0usize;
        for b in 0..=buckets as u64 {
            let first = b << (32 - bits);
            while last + 1 < n && out[last + 1] >> 32 <= first {
                last += 1;
            }
            index.push(u16::try_from(last).ok()?);
        }
        Some(Flat {
            bits,
            index: index.into(),
            entries: out.into(),
        })
    }

    /// The bucket of `addr`.
    #[inline(always)]
    pub(crate) fn bucket(&self, addr: u32) -> usize {
        ((u64::from(addr) << self.bits) >> 32) as usize
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
    /// whose first candidate is `lo` ([`Flat::first`]).
    #[inline(always)]
    pub(crate) fn finish(&self, addr: u32, b: usize, lo: usize) -> u32 {
        let hi = usize::from(self.index[b + 1]);
        // An entry is at or before `addr` iff it is ≤ this, whatever its value.
        let probe = u64::from(addr) << 32 | u64::from(u32::MAX);
        // The bucket's entries after the first, in one bounds check.
        let found = match self.entries.get(lo + 1..=hi) {
            Some(s) if s.len() <= SCAN_MAX => lo + s.iter().take_while(|&&e| e <= probe).count(),
            Some(s) => lo + s.partition_point(|&e| e <= probe),
            None => lo,
        };
        self.entries[found] as u32
    }

    /// The leaf value of `addr`.
    #[inline(always)]
    pub(crate) fn lookup(&self, addr: u32) -> u32 {
        let b = self.bucket(addr);
        self.finish(addr, b, self.first(b))
    }

    /// Heap bytes of the index and the entries.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.index.len() * 2 + self.entries.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(flat: &Flat, addr: u32) -> u32 {
        flat.lookup(addr)
    }

    #[test]
    fn nested_routes_become_intervals() {
        // 10.0.0.0/8 → 1, 10.1.0.0/16 → 2, 10.1.2.0/24 → 3, 0.0.0.0/0 → 4
        let routes = [
            (0u32, 0u8, 4u32),
            (0x0a00_0000, 8, 1),
            (0x0a01_0000, 16, 2),
            (0x0a01_0200, 24, 3),
        ];
        let flat = Flat::build(routes.into_iter()).expect("small");
        assert_eq!(value(&flat, 0), 4);
        assert_eq!(value(&flat, 0x09ff_ffff), 4);
        assert_eq!(value(&flat, 0x0a00_0000), 1);
        assert_eq!(value(&flat, 0x0a01_0000), 2);
        assert_eq!(value(&flat, 0x0a01_0200), 3);
        assert_eq!(value(&flat, 0x0a01_02ff), 3);
        assert_eq!(value(&flat, 0x0a01_0300), 2);
        assert_eq!(value(&flat, 0x0a02_0000), 1);
        assert_eq!(value(&flat, 0x0b00_0000), 4);
        assert_eq!(value(&flat, u32::MAX), 4);
        // 0/0, 10/8, 10.1/16, 10.1.2/24, back to 10.1/16, 10/8, 0/0.
        assert_eq!(flat.entries.len(), 7);
    }

    #[test]
    fn equal_neighbours_merge_and_host_routes_end_the_space() {
        let routes = [
            (0x0a00_0000u32, 8u8, 1u32),
            (0x0a80_0000, 9, 1),
            (u32::MAX, 32, 2),
        ];
        let flat = Flat::build(routes.into_iter()).expect("small");
        assert_eq!(value(&flat, 0x0a7f_ffff), 1);
        assert_eq!(value(&flat, 0x0aff_ffff), 1);
        assert_eq!(value(&flat, 0x0b00_0000), 0);
        assert_eq!(value(&flat, u32::MAX - 1), 0);
        assert_eq!(value(&flat, u32::MAX), 2);
        // [0, none) [10/8, 1) [11/8, none) [255.255.255.255, 2)
        assert_eq!(flat.entries.len(), 4);
    }

    #[test]
    fn a_crowded_bucket_is_searched() {
        // 300 host routes in one /24: one bucket holds them all.
        let routes = (0..300u32).map(|i| (0xc000_0200 + i * 2, 32u8, i + 1));
        let flat = Flat::build(routes).expect("small");
        for i in 0..300u32 {
            assert_eq!(value(&flat, 0xc000_0200 + i * 2), i + 1);
            assert_eq!(value(&flat, 0xc000_0200 + i * 2 + 1), 0);
        }
        assert_eq!(value(&flat, 0), 0);
    }

    #[test]
    fn an_empty_table_has_one_interval() {
        let flat = Flat::build(core::iter::empty()).expect("small");
        assert_eq!(value(&flat, 0), 0);
        assert_eq!(value(&flat, u32::MAX), 0);
        assert_eq!(flat.memory_bytes(), 2 * 2 + 8);
    }
}
