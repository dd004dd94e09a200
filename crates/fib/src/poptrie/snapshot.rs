//! The read side of a [`super::PoptrieLpm`]: the lookup structure alone,
//! immutable once published, shared by every worker.

use std::marker::PhantomData;
use std::sync::Arc;

use super::flat::{Flat, FlatAny, FlatKey};
use super::group::Group;
use super::node::{Key, TOP_BITS};
use crate::{FibAddr, NextHopId, Prefetch};

/// One top-level slot: the subtrie of one /8, and the longest route of /8 or
/// shorter that covers the slot (next hop + 1, or 0).
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    /// Routes longer than /8 inside the slot. Shared copy-on-write between
    /// the table and its snapshots, and among slots that hold no route.
    pub(crate) group: Arc<Group>,
    /// The answer where the group has none.
    pub(crate) default: u32,
}

impl Slot {
    /// The next hop for the group's leaf value `value` (0: no route longer
    /// than /8 here, so the slot's default).
    #[inline(always)]
    fn answer(&self, value: u32) -> Option<NextHopId> {
        let value = if value == 0 { self.default } else { value };
        value.checked_sub(1).map(NextHopId)
    }
}

/// An immutable lookup table: what a worker reads.
///
/// Obtained from [`super::PoptrieLpm::snapshot`] or a
/// [`crate::FibReader`]. It answers as of the moment it was taken, however the
/// table changes afterwards, and costs little: it shares every unchanged
/// group with the table and with other snapshots (`Arc` per /8 group).
///
/// ```text
///   FibSnapshot ── slots[256] ──┬─▶ Arc<Group 10/8>  ◀── also the table, older snapshots
///                  (+ default)  ├─▶ Arc<Group 11/8>
///                               └─▶ Arc<empty group> ◀── every slot with no route > /8
/// ```
#[repr(C, align(64))]
pub struct FibSnapshot<A> {
    /// The same routes as address intervals, for small tables (see
    /// [`Flat`]); lookups read it instead of `slots` when present. First,
    /// and the snapshot aligned, so that what an IPv4 lookup reads of the
    /// snapshot is one cache line (with a thousand VRs taking turns, it is
    /// a miss of its own).
    pub(crate) flat: Option<FlatAny>,
    /// Empty (no route) or [`super::node::TOP_SLOTS`] long; shared between
    /// the table and its snapshots until the table changes.
    pub(crate) slots: Arc<[Slot]>,
    /// Routes in the table when the snapshot was taken.
    pub(crate) len: usize,
    pub(crate) family: PhantomData<fn() -> A>,
}

impl<A> Clone for FibSnapshot<A> {
    fn clone(&self) -> Self {
        Self {
            slots: self.slots.clone(),
            flat: self.flat.clone(),
            len: self.len,
            family: PhantomData,
        }
    }
}

impl<A: FibAddr> core::fmt::Debug for FibSnapshot<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FibSnapshot")
            .field("routes", &self.len)
            .field("bytes", &self.memory_bytes())
            .finish()
    }
}

/// Lookups `lookup_batch` walks in lockstep (see `finish_lanes`).
const LANES: usize = 8;

/// The lanes of one chunk after stage 1.
struct Lanes<'a, K> {
    keys: [K; LANES],
    slots: [&'a Slot; LANES],
    /// Each lane's direct entry (a walk state, see `Group`).
    state: [u32; LANES],
}

/// Stages 2 and 3: every lane's first leaf-block word, loaded without a
/// branch (an IPv4 /24 needs just this one more load), then each lane's
/// answer, walking the rare lanes still at an inner node.
///
/// Measured against alternatives on the 1M-route IPv4 table (interleaved
/// rounds, `examples/lookup_timing.rs`): one lookup at a time is 5–25% slower;
/// branching on the entry kind before the block load ~4% slower; a select
/// instead of the kind branch after it 10–30% slower; overlapping stage 1 of
/// the next chunk with these stages (software pipelining across chunks) ~5%
/// slower; 4, 16 or 32 lanes within noise of 8.
#[inline(always)]
fn finish_lanes<K: Key>(lanes: Lanes<'_, K>, out: &mut [Option<NextHopId>; LANES]) {
    let leafvec: [u64; LANES] =
        core::array::from_fn(|l| lanes.slots[l].group.block_leafvec(lanes.state[l]));
    for l in 0..LANES {
        let slot = lanes.slots[l];
        out[l] = slot.answer(
            slot.group
                .finish_with(lanes.state[l], lanes.keys[l], leafvec[l]),
        );
    }
}

/// Addresses per pass of [`FibSnapshot::lookup_batch_prefetch`]: one
/// engine burst.
const PREFETCH_BATCH: usize = 64;

/// Batches of at most this many addresses take a flat pass of this size.
const SHORT_PASS: usize = 16;

/// From how many routes on [`FibSnapshot::lookup_batch_prefetch`] pays, by
/// default, counting every table a worker reads: smaller tables stay in the
/// core's caches, and the prefetching passes would be pure cost (2–8%
/// slower with one table of 10k–30k routes; see `docs/benchmarks.md`,
/// "Prefetch"), while many tables that add up to more miss them as one big
/// table does.
pub const PREFETCH_MIN_ROUTES: usize = 100_000;

/// The address left-aligned in a `u64`; only for families of ≤ 64 bits.
#[inline(always)]
fn key64<A: FibAddr>(addr: A) -> u64 {
    (addr.to_u128() as u64) << (64u32.saturating_sub(u32::from(A::BITS)) & 63)
}

/// The address left-aligned in a `u128`.
#[inline(always)]
fn key128<A: FibAddr>(addr: A) -> u128 {
    addr.to_u128() << (128 - u32::from(A::BITS))
}

/// Looks up `addrs[i]` in `table(i)` into `out[i]`, for every `i`: one
/// batch over many tables, such as a burst whose frames belong to many VRs
/// (extra tail of the longer slice ignored). The answers are each table's
/// own [`FibSnapshot::lookup`].
///
/// Without `prefetch` the addresses go through the same 8 lanes as
/// [`FibSnapshot::lookup_batch`], each lane reading its own table. With it,
/// for tables that miss the caches, every level a lookup depends on is
/// prefetched for a pass of up to 64 addresses before any is read, so a
/// pass has up to 64 misses in flight at each level instead of one chain
/// of dependent misses per address; a small table's top levels are as
/// cold as its leaves when thousands of tables take turns:
///
/// ```text
///   pass 1: table        ──▶ prefetch the snapshot
///   pass 2: top slot     ──▶ prefetch its line of slots
///   pass 3: group        ──▶ prefetch the group
///   pass 4: direct index ──▶ prefetch the direct entry
///   pass 5: direct entry ──▶ prefetch the leaf block or node
///   pass 6: 8 lanes at a time: leaf-block word, answer
/// ```
pub fn lookup_batch_each<'t, A: FibAddr>(
    table: impl Fn(usize) -> &'t FibSnapshot<A>,
    addrs: &[A],
    out: &mut [Option<NextHopId>],
    prefetch: Option<Prefetch>,
) {
    let n = addrs.len().min(out.len());
    for (c, (a, o)) in addrs[..n]
        .chunks(PREFETCH_BATCH)
        .zip(out[..n].chunks_mut(PREFETCH_BATCH))
        .enumerate()
    {
        let at = c * PREFETCH_BATCH;
        let t = |i: usize| table(at + i);
        if A::BITS <= 64 {
            each_pass(t, a.iter().map(|&a| key64(a)), o, prefetch);
        } else {
            each_pass(t, a.iter().map(|&a| key128(a)), o, prefetch);
        }
    }
}

/// One pass of [`lookup_batch_each`]: `keys` yields `out.len()` ≤
/// [`PREFETCH_BATCH`] keys, key `i` for `table(i)`. Lanes whose table has a
/// flat form ([`Flat`]) are answered from it (two levels: bitmap word, line);
/// the others walk their Poptrie (top slot, group, direct entry, block).
#[inline(always)]
fn each_pass<'t, A: FibAddr, K: Key>(
    table: impl Fn(usize) -> &'t FibSnapshot<A>,
    keys: impl Iterator<Item = K>,
    out: &mut [Option<NextHopId>],
    prefetch: Option<Prefetch>,
) {
    let mut key = [K::default(); PREFETCH_BATCH];
    let mut m = 0;
    for (k, i) in keys.zip(0..PREFETCH_BATCH) {
        key[i] = k;
        m = i + 1;
    }
    if m == 0 {
        return;
    }
    // Each lane's table, asked for once (the caller's closure may be a few
    // dependent loads: a burst's frame, its VR, the VR's table).
    let mut tables = [table(0); PREFETCH_BATCH];
    for (i, t) in tables.iter_mut().enumerate().take(m).skip(1) {
        *t = table(i);
    }
    // The lines to prefetch at each level, gathered without gaps.
    let mut line = [core::ptr::null::<u8>(); PREFETCH_BATCH];
    let mut lines = 0;
    let hint = |line: &[*const u8]| {
        if let Some(p) = prefetch {
            p(line)
        }
    };
    if prefetch.is_some() {
        for (l, &t) in line[..m].iter_mut().zip(&tables[..m]) {
            *l = core::ptr::from_ref(t).cast();
        }
        hint(&line[..m]);
    }
    // Every lane's table flat (the common case with many small VRs): the
    // passes with nothing of the Poptrie's.
    if let Some(first) = tables[0].flat.as_ref().and_then(K::Flat::of) {
        let mut flats = [first; PREFETCH_BATCH];
        let all = (1..m).all(|i| match tables[i].flat.as_ref().and_then(K::Flat::of) {
            Some(f) => {
                flats[i] = f;
                true
            }
            None => false,
        });
        if all {
            return flat_lanes(&flats[..m], &key[..m], out, prefetch);
        }
    }
    let mut flat: [Option<&Flat<K::Flat>>; PREFETCH_BATCH] = [None; PREFETCH_BATCH];
    // Each flat lane's bucket, then its line.
    let mut at = [0usize; PREFETCH_BATCH];
    // Lanes that walk a Poptrie (their tables are too big for a flat form).
    let mut walks = 0;
    for i in 0..m {
        let t = tables[i];
        line[lines] = match t.flat.as_ref().and_then(K::Flat::of) {
            Some(f) => {
                at[i] = f.bucket(key[i].flat());
                flat[i] = Some(f);
                f.index_line(at[i])
            }
            None => {
                walks += 1;
                t.slots
                    .as_ptr()
                    .wrapping_add(key[i].bits(0, TOP_BITS))
                    .cast()
            }
        };
        lines += 1;
    }
    if prefetch.is_some() {
        hint(&line[..lines]);
    }
    lines = 0;
    // Flat lanes: their line; Poptrie lanes: their slot (none for an empty
    // table, answered in `each_lanes`).
    let mut slot: [Option<&Slot>; PREFETCH_BATCH] = [None; PREFETCH_BATCH];
    for i in 0..m {
        line[lines] = match flat[i] {
            Some(f) => {
                at[i] = f.first(at[i]);
                f.entry_line(at[i])
            }
            None => match tables[i].slots.get(key[i].bits(0, TOP_BITS)) {
                Some(s) => {
                    slot[i] = Some(s);
                    Arc::as_ptr(&s.group).cast()
                }
                None => continue,
            },
        };
        lines += 1;
    }
    let finish_flat = |out: &mut [Option<NextHopId>]| {
        for i in 0..m {
            if let Some(f) = flat[i] {
                out[i] = leaf(f.finish(key[i].flat(), key[i].low(), at[i]));
            }
        }
    };
    // Flat lanes read their line whole: its last cache line too (IPv6's
    // lines are two).
    let window_lines = |line: &mut [*const u8]| {
        let mut lines = 0;
        for i in 0..m {
            if let Some(f) = flat[i] {
                line[lines] = f.window_line(at[i]);
                lines += 1;
            }
        }
        lines
    };
    if walks == 0 {
        // Every lane's table is flat: no Poptrie level to walk.
        hint(&line[..lines]);
        if prefetch.is_some() && Flat::<K::Flat>::TWO_LINES {
            let lines = window_lines(&mut line);
            hint(&line[..lines]);
        }
        return finish_flat(out);
    }
    if prefetch.is_none() {
        each_lanes(&key[..m], &slot[..m], out);
        return finish_flat(out);
    }
    hint(&line[..lines]);
    if Flat::<K::Flat>::TWO_LINES {
        lines = window_lines(&mut line);
        hint(&line[..lines]);
    }
    lines = 0;
    let mut direct = [0usize; PREFETCH_BATCH];
    for i in 0..m {
        if let Some(s) = slot[i] {
            direct[i] = s.group.direct_index(key[i]);
            line[lines] = s.group.direct_line(direct[i]);
            lines += 1;
        }
    }
    hint(&line[..lines]);
    lines = 0;
    let mut state = [0u32; PREFETCH_BATCH];
    for i in 0..m {
        if let Some(s) = slot[i] {
            state[i] = s.group.direct_at(direct[i]);
            line[lines] = s.group.next_line::<K>(state[i]);
            lines += 1;
        }
    }
    hint(&line[..lines]);
    for i in 0..m {
        out[i] = slot[i].and_then(|s| {
            s.answer(
                s.group
                    .finish_with(state[i], key[i], s.group.block_leafvec(state[i])),
            )
        });
    }
    finish_flat(out);
}

/// [`each_pass`] when every lane's table is flat: lane `i` looks `key[i]`
/// up in `flats[i]`, in three passes (bucket, its line from the bitmap,
/// the scan), each prefetching what the next reads.
#[inline(always)]
fn flat_lanes<K: Key>(
    flats: &[&Flat<K::Flat>],
    key: &[K],
    out: &mut [Option<NextHopId>],
    prefetch: Option<Prefetch>,
) {
    let m = flats
        .len()
        .min(key.len())
        .min(out.len())
        .min(PREFETCH_BATCH);
    // Each lane's bucket, then its line.
    let mut at = [0usize; PREFETCH_BATCH];
    let mut line = [core::ptr::null::<u8>(); PREFETCH_BATCH];
    for i in 0..m {
        at[i] = flats[i].bucket(key[i].flat());
        line[i] = flats[i].index_line(at[i]);
    }
    if let Some(p) = prefetch {
        p(&line[..m]);
    }
    for i in 0..m {
        at[i] = flats[i].first(at[i]);
        line[i] = flats[i].entry_line(at[i]);
    }
    if let Some(p) = prefetch {
        p(&line[..m]);
        if Flat::<K::Flat>::TWO_LINES {
            for i in 0..m {
                line[i] = flats[i].window_line(at[i]);
            }
            p(&line[..m]);
        }
    }
    for i in 0..m {
        out[i] = leaf(flats[i].finish(key[i].flat(), key[i].low(), at[i]));
    }
}

/// The next hop of a leaf value (next hop + 1, 0 for none).
#[inline(always)]
fn leaf(value: u32) -> Option<NextHopId> {
    value.checked_sub(1).map(NextHopId)
}

/// The lanes of [`lookup_batch_each`] without prefetching: 8 at a time
/// where all 8 tables have routes, one by one otherwise.
#[inline(always)]
fn each_lanes<K: Key>(key: &[K], slot: &[Option<&Slot>], out: &mut [Option<NextHopId>]) {
    for ((k, s), o) in key
        .chunks(LANES)
        .zip(slot.chunks(LANES))
        .zip(out.chunks_mut(LANES))
    {
        let whole = (
            <&[K; LANES]>::try_from(k),
            <&[Option<&Slot>; LANES]>::try_from(s),
            <&mut [Option<NextHopId>; LANES]>::try_from(&mut *o),
        );
        if let (Ok(k), Ok(s), Ok(o)) = whole {
            if s.iter().all(Option::is_some) {
                let slots = s.map(|s| s.expect("tested above"));
                let state = core::array::from_fn(|l| slots[l].group.direct_entry(k[l]));
                finish_lanes(
                    Lanes {
                        keys: *k,
                        slots,
                        state,
                    },
                    o,
                );
                continue;
            }
        }
        for ((&k, s), o) in k.iter().zip(s).zip(o.iter_mut()) {
            *o = s.and_then(|s| s.answer(s.group.lookup(k)));
        }
    }
}

/// Up to `N` lookups in a flat table: every key's bucket (its bitmap word),
/// then its line, then the answer, each step over the whole pass
/// (with `prefetch`, each step's cache lines prefetched before the next
/// reads them).
#[inline(always)]
fn flat_pass<K: Key, const N: usize>(
    flat: &Flat<K::Flat>,
    keys: impl Iterator<Item = K>,
    out: &mut [Option<NextHopId>],
    prefetch: Option<Prefetch>,
) {
    let mut key = [<K::Flat>::default(); N];
    let mut low = [0u64; N];
    let mut line = [core::ptr::null::<u8>(); N];
    // Each key's bucket, then its line.
    let mut at = [0usize; N];
    let mut m = 0;
    for (k, i) in keys.zip(0..N.min(out.len())) {
        key[i] = k.flat();
        low[i] = k.low();
        at[i] = flat.bucket(key[i]);
        line[i] = flat.index_line(at[i]);
        m = i + 1;
    }
    if let Some(p) = prefetch {
        p(&line[..m]);
    }
    for i in 0..m {
        at[i] = flat.first(at[i]);
        line[i] = flat.entry_line(at[i]);
    }
    if let Some(p) = prefetch {
        p(&line[..m]);
        if Flat::<K::Flat>::TWO_LINES {
            for i in 0..m {
                line[i] = flat.window_line(at[i]);
            }
            p(&line[..m]);
        }
    }
    for i in 0..m {
        out[i] = leaf(flat.finish(key[i], low[i], at[i]));
    }
}

/// [`flat_pass`] through arrays sized for `out`: a short batch (one VR's
/// part of a split burst, a few frames) through [`SHORT_PASS`] slots, since
/// zeroing 64-slot arrays cost it more than its lookups.
#[inline(always)]
fn flat_pass_sized<K: Key>(
    flat: &Flat<K::Flat>,
    keys: impl Iterator<Item = K>,
    out: &mut [Option<NextHopId>],
    prefetch: Option<Prefetch>,
) {
    if out.len() <= SHORT_PASS {
        flat_pass::<K, SHORT_PASS>(flat, keys, out, prefetch);
    } else {
        flat_pass::<K, PREFETCH_BATCH>(flat, keys, out, prefetch);
    }
}

impl<A: FibAddr> FibSnapshot<A> {
    /// A snapshot with no route.
    pub(crate) fn empty() -> Self {
        Self {
            slots: Arc::from([]),
            flat: None,
            len: 0,
            family: PhantomData,
        }
    }

    /// The next hop of the longest prefix containing `addr`.
    #[inline(always)]
    pub fn lookup(&self, addr: A) -> Option<NextHopId> {
        // A::BITS is a constant: each family keeps one arm. IPv4 works on a
        // u64, whose shifts are single instructions.
        if A::BITS <= 64 {
            self.answer(key64(addr))
        } else {
            self.answer(key128(addr))
        }
    }

    /// Looks up every address of `addrs` into the same position of `out`
    /// (extra tail of the longer slice ignored, as [`crate::Lpm::lookup_batch`]).
    pub fn lookup_batch(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        debug_assert_eq!(addrs.len(), out.len(), "lookup_batch slice lengths differ");
        let n = addrs.len().min(out.len());
        if self.batch_flat() {
            return self.flat_lookups(&addrs[..n], &mut out[..n], None);
        }
        if self.slots.is_empty() {
            out[..n].fill(None);
            return;
        }
        let mut addr_chunks = addrs[..n].chunks_exact(LANES);
        let mut out_chunks = out[..n].chunks_exact_mut(LANES);
        for (a, o) in (&mut addr_chunks).zip(&mut out_chunks) {
            let a: &[A; LANES] = a.try_into().expect("chunks_exact");
            let o: &mut [Option<NextHopId>; LANES] = o.try_into().expect("chunks_exact");
            if A::BITS <= 64 {
                finish_lanes(self.start_lanes(a.map(key64)), o);
            } else {
                finish_lanes(self.start_lanes(a.map(key128)), o);
            }
        }
        let rest = addr_chunks.remainder();
        for (addr, slot) in rest.iter().zip(out_chunks.into_remainder()) {
            *slot = self.lookup(*addr);
        }
    }

    /// [`FibSnapshot::lookup_batch`] for tables that miss the caches: in
    /// passes of up to 64 addresses, `prefetch` is handed every address's
    /// direct entry, then every address's leaf block, before the lanes read
    /// them, so a pass has up to 64 misses in flight instead of 8, and the
    /// two dependent misses of a lookup cost two memory latencies per pass
    /// rather than per 8 addresses. Worth it once the tables a core reads
    /// hold [`PREFETCH_MIN_ROUTES`] or more together; the answers are those
    /// of `lookup_batch` either way.
    ///
    /// `prefetch` only hints: it must not read or write through the
    /// pointers (the I/O crate's `vrhost_io::prefetch` issues one
    /// `PREFETCHT0` each). Measured in `docs/benchmarks.md` ("Prefetch").
    ///
    /// ```text
    ///   pass 1: slot, direct-entry address ──▶ prefetch(64 lines)
    ///   pass 2: direct entry, leaf-block or node address ──▶ prefetch(64 lines)
    ///   pass 3: 8 lanes at a time: leaf-block word, answer
    /// ```
    pub fn lookup_batch_prefetch(
        &self,
        addrs: &[A],
        out: &mut [Option<NextHopId>],
        prefetch: Prefetch,
    ) {
        debug_assert_eq!(addrs.len(), out.len(), "lookup_batch slice lengths differ");
        let n = addrs.len().min(out.len());
        if self.batch_flat() {
            return self.flat_lookups(&addrs[..n], &mut out[..n], Some(prefetch));
        }
        if self.slots.is_empty() {
            out[..n].fill(None);
            return;
        }
        for (a, o) in addrs[..n]
            .chunks(PREFETCH_BATCH)
            .zip(out[..n].chunks_mut(PREFETCH_BATCH))
        {
            if A::BITS <= 64 {
                self.prefetched_pass(a.iter().map(|&a| key64(a)), o, prefetch);
            } else {
                self.prefetched_pass(a.iter().map(|&a| key128(a)), o, prefetch);
            }
        }
    }

    /// One pass of [`FibSnapshot::lookup_batch_prefetch`]: `keys` yields
    /// `out.len()` ≤ [`PREFETCH_BATCH`] keys. The table is not empty.
    #[inline(always)]
    fn prefetched_pass<K: Key>(
        &self,
        keys: impl Iterator<Item = K>,
        out: &mut [Option<NextHopId>],
        prefetch: Prefetch,
    ) {
        let mut key = [K::default(); PREFETCH_BATCH];
        let mut slot = [&self.slots[0]; PREFETCH_BATCH];
        let mut direct = [0usize; PREFETCH_BATCH];
        let mut line = [core::ptr::null::<u8>(); PREFETCH_BATCH];
        let mut m = 0;
        for (k, i) in keys.zip(0..PREFETCH_BATCH) {
            key[i] = k;
            slot[i] = &self.slots[k.bits(0, TOP_BITS)];
            direct[i] = slot[i].group.direct_index(k);
            line[i] = slot[i].group.direct_line(direct[i]);
            m = i + 1;
        }
        prefetch(&line[..m]);
        let mut state = [0u32; PREFETCH_BATCH];
        for i in 0..m {
            state[i] = slot[i].group.direct_at(direct[i]);
            line[i] = slot[i].group.next_line::<K>(state[i]);
        }
        prefetch(&line[..m]);
        for (c, o) in out[..m].chunks_mut(LANES).enumerate() {
            let at = c * LANES;
            if let Ok(o) = <&mut [Option<NextHopId>; LANES]>::try_from(&mut *o) {
                let lanes = Lanes {
                    keys: core::array::from_fn(|l| key[at + l]),
                    slots: core::array::from_fn(|l| slot[at + l]),
                    state: core::array::from_fn(|l| state[at + l]),
                };
                finish_lanes(lanes, o);
                continue;
            }
            for (l, o) in o.iter_mut().enumerate() {
                let (s, st) = (slot[at + l], state[at + l]);
                *o = s.answer(
                    s.group
                        .finish_with(st, key[at + l], s.group.block_leafvec(st)),
                );
            }
        }
    }

    /// Whether [`FibSnapshot::lookup_batch`] and
    /// [`FibSnapshot::lookup_batch_prefetch`] read the flat form: whenever
    /// the snapshot has one. (Before IPv6's flat form was keyed by the top
    /// 64 bits, its 32-byte entries compared in 128 bits lost to the
    /// Poptrie above 256 routes; keyed by 64 bits, one VR of 1,000 or 4,000
    /// IPv6 routes forwards 1.4–1.5× what it did through the Poptrie.)
    #[inline(always)]
    fn batch_flat(&self) -> bool {
        self.flat.is_some()
    }

    /// Every address of `addrs` through the flat form, in passes of
    /// [`PREFETCH_BATCH`] (see [`flat_pass`]).
    fn flat_lookups(&self, addrs: &[A], out: &mut [Option<NextHopId>], prefetch: Option<Prefetch>) {
        for (a, o) in addrs
            .chunks(PREFETCH_BATCH)
            .zip(out.chunks_mut(PREFETCH_BATCH))
        {
            if A::BITS <= 64 {
                if let Some(f) = self.flat.as_ref().and_then(u32::of) {
                    flat_pass_sized(f, a.iter().map(|&a| key64(a)), o, prefetch);
                }
            } else if let Some(f) = self.flat.as_ref().and_then(u64::of) {
                flat_pass_sized(f, a.iter().map(|&a| key128(a)), o, prefetch);
            }
        }
    }

    /// Stage 1: each lane's slot and direct entry.
    #[inline(always)]
    fn start_lanes<K: Key>(&self, keys: [K; LANES]) -> Lanes<'_, K> {
        let slots: [&Slot; LANES] = keys.map(|k| &self.slots[k.bits(0, TOP_BITS)]);
        let state = core::array::from_fn(|l| slots[l].group.direct_entry(keys[l]));
        Lanes { keys, slots, state }
    }

    #[inline(always)]
    fn answer<K: Key>(&self, key: K) -> Option<NextHopId> {
        if let Some(flat) = self.flat.as_ref().and_then(K::Flat::of) {
            return leaf(flat.lookup(key.flat(), key.low()));
        }
        let slot = self.slots.get(key.bits(0, TOP_BITS))?;
        slot.answer(slot.group.lookup(key))
    }

    /// Routes in the table when this snapshot was taken.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the snapshot holds no route.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether lookups read the snapshot's flat form (sorted intervals, a
    /// table of at most [`crate::FLAT_MAX_ROUTES`] routes whose flat form
    /// could be built) rather than its Poptrie.
    pub fn is_flat(&self) -> bool {
        self.flat.is_some()
    }

    /// Heap bytes of the lookup structure: the top array and every distinct
    /// group it points to. Groups shared with the table or with other
    /// snapshots are counted in each of them.
    pub fn memory_bytes(&self) -> usize {
        let mut groups: Vec<&Arc<Group>> = self.slots.iter().map(|s| &s.group).collect();
        groups.sort_unstable_by_key(|g| Arc::as_ptr(g));
        groups.dedup_by(|a, b| Arc::ptr_eq(a, b));
        self.flat.as_ref().map_or(0, FlatAny::memory_bytes)
            + self.slots.len() * size_of::<Slot>()
            + groups.iter().map(|g| g.memory_bytes()).sum::<usize>()
    }
}
