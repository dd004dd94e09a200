//! A small table as sorted address intervals: the form a snapshot of a
//! table with few routes hands its readers, so that what a lookup touches
//! grows with the routes, not with the 256 top slots and a group per /8.
//! IPv4 (`Flat<u32>`) and IPv6 (`Flat<u64>`, see below) alike.
//!
//! ```text
//!   address - base    [ k bits ][ the rest ]   (clamped to the last bucket)
//!                         │
//!   words[bucket / 32]    ▼  32 bits: which buckets open a line; 32 bits:
//!                            the lines opened before ──▶ line = before +
//!                            popcount(bits up to the bucket) - 1
//!   lines[line]   8 entries (start, value), sorted: the last one starting
//!                 at or before the address is the answer (or, marked NEXT,
//!                 the overflow line to read on in)
//! ```
//!
//! A poptrie of 1,000 scattered IPv4 routes spreads over ~220 groups (a
//! header, a direct array, nodes and leaf blocks each: ~83 bytes a route, and
//! 4 to 6 dependent loads below the snapshot). The same routes as intervals
//! are at most 2,001 entries, packed eight to a cache line, and a bitmap of
//! one bit a bucket: about 25 bytes a route, and one cache line of entries a
//! lookup (IPv4; two adjacent ones for IPv6; more for the few lookups that
//! land in a crowded bucket's overflow lines). With a thousand VRs, that is what decides whether their tables
//! stay in the caches: a thousand VRs' bitmaps are a quarter of a megabyte
//! (1,000 routes each), where an index of a `u16` a bucket was two
//! megabytes, and a lookup reads one line of entries, where the index's
//! window of entries straddled two lines seven times in eight.
//!
//! A line holds whole buckets: the interval in force at the first bucket's
//! first address, then every interval starting in it and in the buckets
//! after it that share the line, padded with copies of its last entry, so
//! that a lookup counts the entries starting at or before its address
//! (eight comparisons, no branch) and reads the last of them. A bucket with
//! more than eight intervals goes on in a run of overflow lines after the
//! others: its line's last entry starts where the run does and names it,
//! and a lookup past it binary-searches the run's lines by their first
//! entries (a crowded range: many long routes inside one bucket), then
//! reads the line it lands on as any other.
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

/// Entries a line holds: one cache line of IPv4's 8-byte entries, two of
/// IPv6's 16-byte ones.
const LINE: usize = 8;

/// The buckets are halved, up to this many times, while more than one
/// interval in [`OVERFLOW_SHARE`] would be in an overflow line: a crowded
/// range (IPv6's routes inside a few /12s of 2000::/3) would otherwise send
/// most lookups to the overflow path (62% of them with 1,000 IPv6 routes).
const FINER_MAX: u32 = 4;

/// See [`FINER_MAX`].
const OVERFLOW_SHARE: usize = 16;

/// Most lines a table may have: a [`NEXT`] value names a run of overflow
/// lines by its first line and its length, 15 bits each.
const RUN_MAX: usize = 1 << 15;

/// A leaf value with this bit set is not an answer but the run of overflow
/// lines where the bucket's intervals go on: its first line in bits 0-14,
/// how many lines in bits 15-29 (see the module documentation).
const NEXT: u32 = 1 << 30;

/// An address the flat form is built over: `u32` (IPv4), or `u64` (either
/// half of an IPv6 address).
pub(crate) trait FlatKey: Copy + Ord + Default + core::fmt::Debug {
    /// Whether an answer may be [`REFINE`]: an IPv6 table's top half, whose
    /// blocks with longer routes hold a table of the low 64 bits.
    const REFINES: bool;
    /// One interval: its start and leaf value.
    type Entry: Copy + core::fmt::Debug + Default;
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
    last: u32,
    /// Per 32 buckets: in the low half, bit `j` set where bucket `32w + j`
    /// opens a line (bucket 0 always does; the others share the line
    /// before); in the high half, how many lines the buckets before opened.
    words: Arc<[u64]>,
    /// The buckets' lines, in address order, then the overflow lines.
    lines: Arc<[Line<K::Entry>]>,
    /// An IPv6 table's blocks of 2^64 addresses that longer routes divide:
    /// the table of their low 64 bits, which a [`REFINE`] value names.
    /// `None` for IPv4 and for the blocks' own tables. (One pointer, so
    /// that the fields a lookup reads and the family's tag fit one cache
    /// line of the snapshot.)
    refine: Option<Arc<Vec<Flat<u64>>>>,
}

/// [`LINE`] entries, sorted by start, each with its leaf value (next hop
/// + 1; 0: no route), aligned so that IPv4's are one cache line.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct Line<E>([E; LINE]);

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
    /// Heap bytes of the bitmap, the lines and the block tables.
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

/// How many of the intervals `out` buckets of `2^shift` addresses from
/// `base` would put in overflow lines, at most: those past the first seven
/// of each bucket of more than eight (its line's eighth entry names the
/// run), the interval in force at its first address counted as one. The
/// intervals after the first all start at or after `base`; a bucket's are
/// consecutive.
fn overflowing(out: &[(u128, u32)], base: u128, shift: u32) -> usize {
    let bucket = |start| bucket_at(start, base, shift);
    let mut over = 0;
    let mut i = 1;
    while let Some(&(start, _)) = out.get(i) {
        let b = bucket(start);
        let k = out[i..].iter().take_while(|e| bucket(e.0) == b).count();
        if k + 1 > LINE {
            over += k + 1 - (LINE - 1);
        }
        i += k;
    }
    over
}

/// The bucket of an interval starting at `start` (at or after `base`, at
/// most the last interval's start, so never past the last bucket).
fn bucket_at(start: u128, base: u128, shift: u32) -> usize {
    (start - base).checked_shr(shift).unwrap_or(0) as usize
}

/// A table's buckets packed into lines: [`pack`]'s result.
struct Packed<E> {
    /// As [`Flat::words`].
    words: Vec<u64>,
    /// As [`Flat::lines`].
    lines: Vec<Line<E>>,
}

/// Writes `from` into `line` at `at` (in the family's form), and fills the
/// rest of the line with copies of its last entry.
fn write<K: FlatKey>(line: &mut Line<K::Entry>, at: usize, from: &[(u128, u32)]) {
    for (slot, &(pos, v)) in line.0[at..].iter_mut().zip(from) {
        *slot = K::entry(K::from_u128(pos), v);
    }
    let used = at + from.len();
    if let Some(&last) = line.0.get(used.max(1) - 1) {
        line.0[used.min(LINE)..].fill(last);
    }
}

/// Packs the intervals `out` into lines, bucket by bucket (`buckets` of
/// `2^shift` addresses from `base`): a bucket shares the line before while
/// its intervals fit there and opens a line otherwise; past eight, its line
/// ends with a [`NEXT`] entry naming the run of overflow lines that holds
/// the rest, eight to a line. `None` if the lines are too many to name
/// (2^15).
fn pack<K: FlatKey>(
    out: &[(u128, u32)],
    base: u128,
    shift: u32,
    buckets: usize,
) -> Option<Packed<K::Entry>> {
    let empty = || Line([K::Entry::default(); LINE]);
    // The bucket of an interval after the first, and a bucket's first
    // address.
    let bucket_of = |start| bucket_at(start, base, shift);
    let first_of = |b: usize| base + (b as u128).checked_shl(shift).unwrap_or(0);
    let mut words = vec![0u64; buckets.div_ceil(32)];
    let mut main: Vec<Line<K::Entry>> = Vec::new();
    let mut over: Vec<Line<K::Entry>> = Vec::new();
    // Main lines ending in a NEXT entry: (line, its start, first overflow
    // line, lines).
    let mut runs: Vec<(usize, u128, usize, usize)> = Vec::new();
    // Entries in the last main line while it takes more; `None` once closed.
    let mut open: Option<usize> = None;
    // The first interval in no line yet, and the first bucket not placed.
    let mut next = 0usize;
    let mut b0 = 0usize;
    // Bucket by bucket, skipping those no interval starts in: they share
    // the line before when it is open; after a closed line, the first of
    // them opens one with the interval in force, which the rest share.
    while b0 < buckets {
        // The next bucket an interval starts in (bucket 0 takes the first
        // interval and the addresses before `base`), or past the last.
        let b = match out.get(next) {
            Some(_) if next == 0 => 0,
            Some(e) => bucket_of(e.0),
            None => buckets,
        };
        if b > b0 && open.is_none() {
            // An empty bucket after a closed line: the interval in force.
            words[b0 / 32] |= 1 << (b0 % 32);
            let mut line = empty();
            write::<K>(&mut line, 0, &out[next - 1..next]);
            main.push(line);
            open = Some(1);
        }
        if b >= buckets {
            break;
        }
        // The bucket's intervals: the one in force at its first address
        // (one that starts right there is the bucket's own), then those
        // starting in it.
        let lo = if b > 0 && out[next].0 > first_of(b) {
            next - 1
        } else {
            next
        };
        let from = next.max(1);
        let hi = from
            + out[from..]
                .iter()
                .take_while(|e| bucket_of(e.0) == b)
                .count();
        b0 = b + 1;
        if let (Some(used), Some(line)) = (open, main.last_mut()) {
            if used + (hi - next) <= LINE {
                write::<K>(line, used, &out[next..hi]);
                open = Some(used + hi - next);
                next = hi;
                continue;
            }
        }
        // A line of its own, from the interval in force.
        words[b / 32] |= 1 << (b % 32);
        let rest = &out[lo..hi];
        let mut line = empty();
        if rest.len() <= LINE {
            write::<K>(&mut line, 0, rest);
            open = Some(rest.len());
        } else {
            let (now, later) = rest.split_at(LINE - 1);
            write::<K>(&mut line, 0, now);
            runs.push((
                main.len(),
                later[0].0,
                over.len(),
                later.len().div_ceil(LINE),
            ));
            for chunk in later.chunks(LINE) {
                let mut o = empty();
                write::<K>(&mut o, 0, chunk);
                over.push(o);
            }
            open = None;
        }
        main.push(line);
        next = hi;
    }
    // The overflow lines follow the main ones; a NEXT value holds the run's
    // first line and its length, 15 bits each.
    if main.len() + over.len() > RUN_MAX {
        return None;
    }
    let lines = main.len();
    for (line, start, first, count) in runs {
        let value = NEXT | ((count as u32) << 15) | (lines + first) as u32;
        main[line].0[LINE - 1] = K::entry(K::from_u128(start), value);
    }
    let mut before = 0u64;
    for w in &mut words {
        let opened = u64::from((*w as u32).count_ones());
        *w |= before << 32;
        before += opened;
    }
    main.extend(over);
    Some(Packed { words, lines: main })
}

impl Flat<u32> {
    /// The flat form of an IPv4 table: `routes` as (address, length, next
    /// hop + 1) in (address, length) order. `None` where a next hop is
    /// too large to be a leaf value (2^30 or more) or the lines too many to
    /// name (never for [`FLAT_MAX_ROUTES`] routes: at most 2 × routes + 1
    /// intervals).
    pub(crate) fn build(routes: impl Iterator<Item = (u128, u8, u32)>) -> Option<Flat<u32>> {
        Flat::from_intervals(intervals(routes, 32), None)
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
            blocks.push(Flat::from_intervals(low, None)?);
            top.push((block, REFINE | index));
            // What runs on past the block, unless the next interval starts
            // right at its end (or the block ends the space).
            let after = block + 1;
            if after >> 64 == 0 && all.get(j).is_none_or(|e| e.0 >> 64 > after) {
                top.push((after, all[j - 1].1));
            }
            i = j;
        }
        Flat::from_intervals(top, (!blocks.is_empty()).then(|| Arc::new(blocks)))
    }
}

impl<K: FlatKey> Flat<K> {
    /// The form of `out` (from [`intervals`], positions within `K`), with
    /// `refine` as its block tables: about two intervals a bucket, or up to
    /// 16 times finer buckets where a range is crowded ([`FINER_MAX`]). `None`
    /// where a value is [`NEXT`]-marked or the lines are more than
    /// [`RUN_MAX`].
    fn from_intervals(
        out: Vec<(u128, u32)>,
        refine: Option<Arc<Vec<Flat<u64>>>>,
    ) -> Option<Flat<K>> {
        if out.iter().any(|&(_, v)| v & NEXT != 0) {
            return None;
        }
        let n = out.len();
        let base = out.get(1).map_or(0, |e| e.0);
        // Sorted: `base` is at most the last start.
        let span = out.last()?.0 - base;
        let bits = usize::BITS - (n / 2).leading_zeros();
        // The coarsest buckets (from about two intervals a bucket) that
        // leave at most one interval in OVERFLOW_SHARE to overflow lines,
        // or the finest tried that leaves the fewest.
        let top = u128::BITS - span.leading_zeros();
        let mut best = (u128::BITS, usize::MAX);
        for finer in 0..=FINER_MAX {
            let shift = top.saturating_sub(bits + finer);
            let over = overflowing(&out, base, shift);
            if over < best.1 {
                best = (shift, over);
            }
            if over * OVERFLOW_SHARE <= n || shift == 0 {
                break;
            }
        }
        let shift = best.0;
        let buckets = usize::try_from(span.checked_shr(shift).unwrap_or(0)).ok()? + 1;
        let packed = pack::<K>(&out, base, shift, buckets)?;
        Some(Flat {
            base: K::from_u128(base),
            shift,
            last: u32::try_from(buckets - 1).ok()?,
            words: packed.words.into(),
            lines: packed.lines.into(),
            refine,
        })
    }

    /// The bucket of `addr`.
    #[inline(always)]
    pub(crate) fn bucket(&self, addr: K) -> usize {
        addr.bucket(self.base, self.shift, self.last as usize)
    }

    /// Where the bitmap word of bucket `b` lies: a cache line to prefetch.
    #[inline(always)]
    pub(crate) fn index_line(&self, b: usize) -> *const u8 {
        self.words.as_ptr().wrapping_add(b / 32).cast()
    }

    /// The line of bucket `b`.
    #[inline(always)]
    pub(crate) fn first(&self, b: usize) -> usize {
        let word = self.words.get(b / 32).copied().unwrap_or(0);
        let opened = (word as u32) & (u32::MAX >> (31 - b % 32));
        ((word >> 32) as usize + opened.count_ones() as usize).saturating_sub(1)
    }

    /// Where line `i` starts: a cache line to prefetch.
    #[inline(always)]
    pub(crate) fn entry_line(&self, i: usize) -> *const u8 {
        self.lines.as_ptr().wrapping_add(i).cast()
    }

    /// Whether a line spans two cache lines (IPv6's 16-byte entries; an
    /// IPv4 line is one), so that its last one is prefetched as well
    /// ([`Flat::window_line`]).
    pub(crate) const TWO_LINES: bool = size_of::<Line<K::Entry>>() > 64;

    /// Where line `i` ends: its last cache line (the same one for IPv4, the
    /// second for IPv6), to prefetch with [`Flat::entry_line`]'s, since the
    /// line is read whole. The batch passes ask only where
    /// [`Flat::TWO_LINES`].
    #[inline(always)]
    pub(crate) fn window_line(&self, i: usize) -> *const u8 {
        self.entry_line(i)
            .wrapping_add(size_of::<Line<K::Entry>>() - 64)
    }

    /// The leaf value (next hop + 1, 0 for none) of `addr`, whose bucket's
    /// line is `line` ([`Flat::first`]); `low` is the address's low
    /// 64 bits, looked up in its block when `addr` falls in a divided one
    /// (IPv6; IPv4 passes 0).
    #[inline(always)]
    pub(crate) fn finish(&self, addr: K, low: u64, line: usize) -> u32 {
        let mut value = self.scan(addr, line);
        if value & NEXT != 0 {
            value = self.overflow(addr, value);
        }
        if K::REFINES && value & REFINE != 0 {
            return self.in_block(value, low);
        }
        value
    }

    /// The value of the last entry of line `i` starting at or before
    /// `addr`: the count of those entries (at least one: a line's first
    /// entry starts at or before every address that reads it) is its
    /// position plus one.
    #[inline(always)]
    fn scan(&self, addr: K, i: usize) -> u32 {
        let Some(line) = self.lines.get(i) else {
            return 0;
        };
        let n = line.0.iter().filter(|e| addr.after(e)).count();
        debug_assert!(n > 0, "a line's first entry starts after {addr:?}");
        K::value(line.0[n.wrapping_sub(1) % LINE])
    }

    /// [`Flat::finish`]'s rare case, out of the lookups' loops: `value`
    /// names the run of overflow lines where the bucket goes on. The run is
    /// sorted, so the line to read is the last whose first entry starts at
    /// or before `addr` (binary search over the lines' first entries).
    #[cold]
    #[inline(never)]
    fn overflow(&self, addr: K, value: u32) -> u32 {
        let first = (value & 0x7fff) as usize;
        let count = ((value >> 15) & 0x7fff) as usize;
        let Some(run) = self.lines.get(first..first + count) else {
            return 0;
        };
        let at = run.partition_point(|l| addr.after(&l.0[0]));
        self.scan(addr, first + at.saturating_sub(1))
    }

    /// The leaf value of the address `addr` (then `low`, as for
    /// [`Flat::finish`]).
    #[inline(always)]
    pub(crate) fn lookup(&self, addr: K, low: u64) -> u32 {
        self.finish(addr, low, self.first(self.bucket(addr)))
    }

    /// The leaf value of `low` in the divided block that the [`REFINE`]
    /// value `value` names: [`Flat::finish`]'s rare case, out of the
    /// lookups' loops. A block's own table holds no [`REFINE`] value.
    #[cold]
    #[inline(never)]
    fn in_block(&self, value: u32, low: u64) -> u32 {
        self.refine
            .as_ref()
            .and_then(|r| r.get((value & !REFINE) as usize))
            .map_or(0, |b| b.lookup(low, 0))
    }

    /// Heap bytes of the bitmap, the lines and the block tables.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.words.len() * 8
            + self.lines.len() * size_of::<Line<K::Entry>>()
            + self
                .refine
                .iter()
                .flat_map(|r| r.iter())
                .map(Flat::memory_bytes)
                .sum::<usize>()
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
        assert_eq!(intervals_of(&flat), 7);
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
        assert_eq!(intervals_of(&flat), 4);
    }

    /// The distinct intervals in `flat`'s lines (overflow markers aside).
    fn intervals_of(flat: &Flat<u32>) -> usize {
        let mut starts: Vec<u64> = flat
            .lines
            .iter()
            .flat_map(|l| l.0)
            .filter(|&e| u32::value(e) & NEXT == 0)
            .collect();
        starts.sort_unstable();
        starts.dedup();
        starts.len()
    }

    #[test]
    fn lines_are_cache_lines() {
        assert_eq!(size_of::<Line<u64>>(), 64);
        assert_eq!(align_of::<Line<u64>>(), 64);
        assert_eq!(size_of::<Line<(u64, u32)>>(), 128);
        let flat = flat4(&[(0x0a00_0000, 8, 1)]);
        assert_eq!(flat.entry_line(0) as usize % 64, 0);
        assert_eq!(flat.window_line(0), flat.entry_line(0));
    }

    #[test]
    fn a_bucket_of_many_intervals_goes_on_in_overflow_lines() {
        // 40 host routes in one /26, and two far-off /8s that stretch the
        // span: the /26 is one bucket, its 81 intervals a line and a run of
        // ten overflow lines.
        let mut routes: Vec<_> = (0..40u32).map(|i| (0xc000_0200 + i, 32, i + 1)).collect();
        routes.insert(0, (0x0100_0000, 8, 100));
        routes.push((0xdf00_0000, 8, 101));
        let flat = flat4(&routes);
        let b = flat.bucket(0xc000_0200);
        assert_eq!(flat.bucket(0xc000_0227), b);
        assert!(
            flat.lines.len() > flat.first(flat.last as usize) + 1,
            "overflow lines"
        );
        for i in 0..40u32 {
            assert_eq!(flat.lookup(0xc000_0200 + i, 0), i + 1);
        }
        assert_eq!(flat.lookup(0xc000_0228, 0), 0);
        assert_eq!(flat.lookup(0xc000_01ff, 0), 0);
        assert_eq!(flat.lookup(0x0123_4567, 0), 100);
        assert_eq!(flat.lookup(0xdfff_ffff, 0), 101);
        assert_eq!(flat.lookup(0xe000_0000, 0), 0);
    }

    #[test]
    fn a_long_run_of_overflow_lines_is_searched() {
        // 2,000 host routes in one /20 and two far-off /8s: the /20 is one
        // bucket, its 4,001 intervals a run of 500 overflow lines.
        let mut routes: Vec<_> = (0..2000u32)
            .map(|i| (0xc000_0000 + 2 * i, 32, i + 1))
            .collect();
        routes.insert(0, (0x0100_0000, 8, 3000));
        routes.push((0xdf00_0000, 8, 3001));
        let flat = flat4(&routes);
        assert!(flat.lines.len() > 500);
        for i in 0..2000u32 {
            assert_eq!(flat.lookup(0xc000_0000 + 2 * i, 0), i + 1);
            assert_eq!(flat.lookup(0xc000_0000 + 2 * i + 1, 0), 0);
        }
        assert_eq!(flat.lookup(0xbfff_ffff, 0), 0);
        assert_eq!(flat.lookup(0x01ff_ffff, 0), 3000);
        assert_eq!(flat.lookup(0xdf00_0000, 0), 3001);
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

    /// The longest of `routes` (address, length, value, in a space of
    /// `bits` bits) containing `addr`: the definition, route by route.
    fn longest_match(routes: &[(u128, u8, u32)], bits: u32, addr: u128) -> u32 {
        routes
            .iter()
            .filter(|&&(a, l, _)| l == 0 || (a ^ addr) >> (bits - u32::from(l)) == 0)
            .max_by_key(|&&(_, l, _)| l)
            .map_or(0, |&(_, _, v)| v)
    }

    /// `routes` as a table takes them: each address masked to its length,
    /// sorted by (address, length), one route a prefix.
    fn tidy(routes: &mut Vec<(u128, u8, u32)>, bits: u32) {
        let max = u128::MAX >> (128 - bits);
        for r in routes.iter_mut() {
            r.0 &= max & !max.checked_shr(u32::from(r.1)).unwrap_or(0);
        }
        routes.sort_unstable_by_key(|&(a, l, _)| (a, l));
        routes.dedup_by_key(|r| (r.0, r.1));
    }

    /// Checks `lookup` against [`longest_match`] at every route's first and
    /// last address and their neighbours, at `probes`, and at both ends of
    /// the space.
    fn answers_as_defined(
        routes: &[(u128, u8, u32)],
        bits: u32,
        probes: impl Iterator<Item = u128>,
        lookup: impl Fn(u128) -> u32,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let max = u128::MAX >> (128 - bits);
        let edges = routes.iter().flat_map(|&(a, l, _)| {
            let end = a | max.checked_shr(u32::from(l)).unwrap_or(0);
            [a, a.wrapping_sub(1) & max, end, end.wrapping_add(1) & max]
        });
        for addr in edges.chain(probes).chain([0, max]) {
            proptest::prop_assert_eq!(
                lookup(addr),
                longest_match(routes, bits, addr),
                "{:#x}",
                addr
            );
        }
        Ok(())
    }

    proptest::proptest! {
        /// Crowded clusters (host routes and long prefixes inside a few
        /// /20s) beside scattered short routes: buckets that share lines,
        /// fill them and go on in overflow lines, at every bucket size the
        /// build tries. Every route's edges and neighbours answer as the
        /// definition does, or the table has no flat form.
        #[test]
        fn lines_answer_as_longest_match(
            clusters in proptest::collection::vec(
                (proptest::prelude::any::<u32>(),
                 proptest::collection::vec((0u32..4096, 20u8..=32, 1u32..50), 0..120)),
                1..4),
            wide in proptest::collection::vec((proptest::prelude::any::<u32>(), 0u8..20, 1u32..50), 0..30),
            probes in proptest::collection::vec(proptest::prelude::any::<u32>(), 64),
        ) {
            let mut routes: Vec<(u128, u8, u32)> = Vec::new();
            for (at, members) in &clusters {
                for &(off, len, v) in members {
                    routes.push((u128::from((at & !0xfff) | off), len, v));
                }
            }
            routes.extend(wide.iter().map(|&(a, l, v)| (u128::from(a), l, v)));
            tidy(&mut routes, 32);
            let Some(flat) = Flat::build(routes.iter().copied()) else {
                return Ok(());
            };
            answers_as_defined(&routes, 32, probes.into_iter().map(u128::from), |a| {
                flat.lookup(a as u32, 0)
            })?;
        }

        /// The same for IPv6: /40–/64s crowded inside a few /32s, some
        /// /65–/128s inside them (blocks divided by longer routes, whose
        /// values are REFINE), and scattered short routes.
        #[test]
        fn ipv6_lines_answer_as_longest_match(
            clusters in proptest::collection::vec(
                (proptest::prelude::any::<u64>(),
                 proptest::collection::vec(
                     (proptest::prelude::any::<u64>(), proptest::prelude::any::<u64>(), 40u8..=128, 1u32..50),
                     0..100)),
                1..4),
            wide in proptest::collection::vec((proptest::prelude::any::<u128>(), 0u8..32, 1u32..50), 0..20),
            probes in proptest::collection::vec(proptest::prelude::any::<u128>(), 64),
        ) {
            let mut routes: Vec<(u128, u8, u32)> = Vec::new();
            for (at, members) in &clusters {
                for &(hi, lo, len, v) in members {
                    // Inside the cluster's /32; mostly /64 and shorter.
                    let len = if lo % 4 == 0 { len } else { len.min(64) };
                    let top = (at & !0xffff_ffff) | (hi & 0xffff_ffff);
                    routes.push(((u128::from(top) << 64) | u128::from(lo), len, v));
                }
            }
            routes.extend(wide);
            tidy(&mut routes, 128);
            let Some(flat) = Flat::build6(routes.iter().copied()) else {
                return Ok(());
            };
            answers_as_defined(&routes, 128, probes.into_iter(), |a| lookup6(&flat, a))?;
        }
    }

    #[test]
    fn an_empty_table_has_one_interval() {
        let flat = flat4(&[]);
        assert_eq!(flat.lookup(0, 0), 0);
        assert_eq!(flat.lookup(u32::MAX, 0), 0);
        // One bucket, one word, one line.
        assert_eq!(flat.memory_bytes(), 8 + 64);
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
        assert_eq!(flat.refine.as_ref().map(|r| r.len()), Some(1));
    }

    #[test]
    fn ipv6_crowded_range_goes_on_in_overflow_lines() {
        // 60 /64s side by side in 2001:db8::/48, every third with a /128 of
        // its own (a REFINE value, some of them in overflow lines), and
        // two far-off /16s that stretch the span: at the finest buckets the
        // /48 is still one bucket, so its intervals need a run of overflow
        // lines.
        let a = |hi: u128| hi << 64;
        let db8 = 0x2001_0db8_0000_0000u128;
        let mut routes = vec![
            (0x2400u128 << 112, 16u8, 900u32),
            (0x2c00u128 << 112, 16, 901),
        ];
        for i in 0..60u32 {
            routes.push((a(db8 + u128::from(i)), 64, i + 1));
            if i % 3 == 0 {
                routes.push((a(db8 + u128::from(i)) | 1, 128, 100 + i));
            }
        }
        routes.sort_unstable_by_key(|&(p, l, _)| (p, l));
        let flat = Flat::build6(routes.into_iter()).expect("small");
        let b = flat.bucket((db8) as u64);
        assert_eq!(flat.bucket((db8 + 59) as u64), b);
        assert!(
            flat.lines.len() > flat.first(flat.last as usize) + 1,
            "overflow lines"
        );
        for i in 0..60u32 {
            let block = a(db8 + u128::from(i));
            assert_eq!(lookup6(&flat, block), i + 1);
            assert_eq!(lookup6(&flat, block | 2), i + 1);
            let host = if i % 3 == 0 { 100 + i } else { i + 1 };
            assert_eq!(lookup6(&flat, block | 1), host);
        }
        assert_eq!(lookup6(&flat, a(db8 + 60)), 0);
        assert_eq!(lookup6(&flat, a(db8) - 1), 0);
        assert_eq!(lookup6(&flat, 0x2400u128 << 112), 900);
        assert_eq!(lookup6(&flat, (0x2c00u128 << 112) | 5), 901);
        assert_eq!(lookup6(&flat, u128::MAX), 0);
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
        assert_eq!(flat.refine.as_ref().map(|r| r.len()), Some(2));
    }
}
