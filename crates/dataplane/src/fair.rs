//! Weighted fair sharing of a saturated worker between VRs, by measured cost.
//!
//! The PRESTO 2008 follow-up to the founding paper showed one router with
//! expensive packets taking CPU from the others on a shared engine. Counting
//! packets does not fix that; counting *cycles* does. So each worker:
//!
//! ```text
//!   burst ─▶ demux all ─▶ sort by VR ─▶ per VR run: admit? ──no──▶ drop (over-share), cost ≈ demux
//!                                                      │yes
//!                                                      ▼
//!                                          t0=clock · stages · charge(vr, clock−t0)
//!
//!   every round (1 ms per 1000 VRs): saturated = idle time < 5 % of the round
//!       saturated   → budgets by weighted max-min fairness over the cycles spent
//!       otherwise   → no budgets (nothing is policed)
//! ```
//!
//! - **Cost** is what the VR's packets took in the stages: ICMP errors,
//!   punts, fragmentation and neighbour misses all show up as cycles. What
//!   the driver took to read a burst ([`Fair::note_receive`]) and to send
//!   what it forwarded ([`Fair::charge_send`]) is charged to its VRs by
//!   bytes: large frames cost little in the stages and much to copy.
//! - **Budgets** are deficit-round-robin quanta: each VR active last round
//!   gets its weight's fraction of the cycles the worker spent on VRs, in
//!   eight refills per round; overshoot carries over as a deficit.
//! - **Work-conserving**: an unsaturated worker polices nobody, and
//!   [`Fair::port_wanted`] lets the driver loop leave an over-budget VR's
//!   receive queue unread (its NIC ring drops the excess at no cost to
//!   anyone) only while other queues have work; when they are empty the
//!   loop refills every budget in proportion ([`Fair::replenish`], deficit
//!   round robin's refill) and goes on. On a port shared by several VRs,
//!   two bursts in a row holding only over-budget VRs' frames count as the
//!   others having nothing, and refill too.
//!
//! The worker reads no clock unless the caller installs one
//! ([`Worker::set_clock`]); without one (tests, `vrhost replay`) nothing is
//! charged and nothing is policed, so the pipeline stays deterministic.
//!
//! [`Worker::set_clock`]: crate::Worker::set_clock

/// A cycle (or nanosecond) counter: `rdtsc`, or thread CPU time in tests.
pub type Clock = fn() -> u64;

/// Budgets are handed out in this many refills per round (deficit round
/// robin's quantum is a round's share over this), so an over-budget VR waits
/// at most a fraction of a round and a light VR's queue never waits long
/// enough to overflow.
const QUANTA: u64 = 8;

/// A quantum is at least this many fast-path frames: with a thousand VRs
/// sharing a worker, a round's share a refill is a few frames each, and
/// every refill reads every VR's record. Larger quanta refill less often;
/// they are all scaled alike, so the weights' proportions hold.
const MIN_QUANTUM_FRAMES: u64 = 64;

/// The estimated cost of a fast-path frame ([`Fair::count_fast`]) is kept
/// in 1/1024 ticks: a coarse clock may measure less than a tick a frame.
const FAST_COST_SHIFT: u32 = 10;

/// A frame of a burst of many VRs longer than this many bytes is charged
/// its own share, by bytes, of what reading its burst and sending it took
/// ([`Fair::charge_frame`]); shorter ones
/// share what is left equally, with the fast path's cost. Reading or
/// sending a frame costs about the same up to a few hundred bytes, and
/// charging each frame on its own reads its VR's record, which bursts of
/// many VRs avoid.
pub const LONG_FRAME: u64 = 512;

/// Runs and long frames [`Fair::note_own_bytes`] keeps between two sends;
/// past it their bytes are shared with the fast path's cost (a driver
/// loop's turn reads a burst of at most 64 frames from each queue).
const OWN_BYTES_KEPT: usize = 4096;

/// Idle time below this fraction of a round (1/20 = 5 %) means saturated.
const IDLE_FRACTION_DIVISOR: u64 = 20;

/// A round lasts a millisecond for every this many VRs the worker serves
/// (at least one): a round's end reads every VR's record, so with ten
/// thousand VRs, 1 ms rounds cost a quarter of the worker's speed.
const VRS_PER_ROUND_MS: usize = 1000;

/// Per-VR bookkeeping of one worker. A charge adds to `spent` alone: what
/// the VR used since its last refill, this round and since the start are
/// differences of `spent` from marks moved at refills and round ends, so
/// a charge is one add (and a budget test while shares are enforced). The
/// fast path's frames of bursts of many VRs are not charged here but
/// counted in the VR's [`Tally`].
#[derive(Clone, Debug)]
struct Share {
    /// Ticks charged since the worker started.
    spent: u64,
    /// `spent` less what the VR used since its budget was last refilled
    /// (its deficit counter, [`Share::used`]).
    credit: u64,
    /// Ticks allowed per refill; `u64::MAX` when nothing is enforced.
    budget: u64,
    /// Over its budget now.
    capped: bool,
    /// Hit its budget at least once this round.
    was_capped: bool,
    /// Arrived in a full receive burst this round: it had more waiting
    /// (the sign that the worker is saturated).
    backlogged: bool,
    /// `spent` when this round began.
    round_mark: u64,
    weight: u64,
}

/// What a VR's fast-path frames of bursts of many VRs touch, one 8-byte
/// word per VR in a dense array ([`Fair::count_fast`]): a thousand VRs'
/// tallies take 8 KiB, which stays in the cache, where their [`Share`]
/// records, read and written a frame each, were a cache miss a frame.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    /// Frames sent this round (the low 31 bits), converted into `spent`
    /// at what such a frame cost on average when the round ends; bit 31:
    /// one of them came from a full receive burst (the VR is backlogged).
    frames: u32,
    /// What the VR may still spend on fast frames before its record must
    /// be read, in 1/2^[`FAST_COST_SHIFT`] ticks (as a frame's estimate,
    /// which each frame takes off): while shares are enforced, spending
    /// less keeps it under its next limit (its budget, then twice its
    /// budget, [`Fair::admit`]); `u32::MAX` (or as much as fits) otherwise.
    /// 0: read the record.
    room: u32,
}

/// [`Tally::frames`]'s backlog bit.
const BACKLOGGED: u32 = 1 << 31;

impl Tally {
    fn frames(self) -> u64 {
        u64::from(self.frames & !BACKLOGGED)
    }

    fn backlogged(self) -> bool {
        self.frames & BACKLOGGED != 0
    }
}

impl Share {
    /// Whether the VR takes part in sharing the next round: it was served
    /// or held back this round. Fast frames must be settled first.
    fn active(&self) -> bool {
        self.round_used(0) > 0 || self.was_capped || self.backlogged
    }

    /// Ticks charged since the start, with `pending` (1/2^
    /// [`FAST_COST_SHIFT`] ticks: the estimate of this round's fast frames,
    /// [`Fair::pending`]).
    #[inline(always)]
    fn total(&self, pending: u64) -> u64 {
        self.spent + (pending >> FAST_COST_SHIFT)
    }

    /// Ticks charged since the budget was last refilled.
    #[inline(always)]
    fn used(&self, pending: u64) -> u64 {
        self.total(pending).saturating_sub(self.credit)
    }

    /// Sets what was used since the last refill.
    fn set_used(&mut self, pending: u64, used: u64) {
        let total = self.total(pending);
        self.credit = total - used.min(total);
    }

    /// Ticks charged this round (what it got; the demand estimate).
    fn round_used(&self, pending: u64) -> u64 {
        self.total(pending).saturating_sub(self.round_mark)
    }
}

/// A round summed up over its VRs ([`Fair::settle_fast`]).
#[derive(Debug, Default)]
struct Round {
    /// Some VR arrived in a full receive burst.
    backlog: bool,
    /// Ticks charged to all VRs.
    capacity: u64,
    /// VRs served or backlogged.
    busy: usize,
    /// The weights of the active VRs ([`Share::active`]): summed, and the
    /// least.
    weight: u64,
    least_weight: Option<u64>,
}

impl Round {
    fn add(&mut self, s: &Share) {
        let used = s.round_used(0);
        self.backlog |= s.backlogged;
        self.capacity += used;
        self.busy += usize::from(used > 0 || s.backlogged);
        if s.active() {
            self.weight += s.weight;
            self.least_weight = Some(self.least_weight.map_or(s.weight, |w| w.min(s.weight)));
        }
    }

    /// The next round's quanta, with fast frames estimated at `fast_cost`.
    fn quanta(&self, fast_cost: u64) -> Quanta {
        let mut q = Quanta {
            capacity: self.capacity,
            weight: self.weight.max(1),
            scale: 1,
        };
        // The smallest share's quantum holds at least MIN_QUANTUM_FRAMES
        // fast frames: every quantum is scaled up alike, keeping the
        // weights' proportions.
        let least = self.least_weight.map_or(1, |w| q.budget(w));
        let floor = mul_div(fast_cost, MIN_QUANTUM_FRAMES, 1) >> FAST_COST_SHIFT;
        q.scale = floor.div_ceil(least).max(1);
        q
    }
}

/// Each VR that was active last round gets its weighted share of what the
/// worker spent on all of them, in [`QUANTA`] refills. Shares are not
/// water-filled: a VR that left part of its share unused would otherwise
/// lengthen the others' turns and starve itself the moment it wants its
/// share back. Leftovers reach busy VRs through refills instead
/// ([`Fair::replenish`]) whenever nobody else has work. VRs that sent
/// nothing get no budget: they are served when they show up and judged from
/// the next round.
#[derive(Debug)]
struct Quanta {
    capacity: u64,
    weight: u64,
    scale: u64,
}

impl Quanta {
    /// The budget per refill of an active VR of `weight`.
    fn budget(&self, weight: u64) -> u64 {
        (mul_div(self.capacity, weight, self.weight) / QUANTA)
            .max(1)
            .saturating_mul(self.scale)
    }
}

/// One worker's fair-share state.
#[derive(Debug)]
pub struct Fair {
    clock: Option<Clock>,
    /// The clock's ticks in a millisecond (0 until it is installed).
    ticks_per_ms: u64,
    round_ticks: u64,
    round_start: u64,
    last_end: u64,
    idle_ticks: u64,
    enforcing: bool,
    /// Whether budgets may be enforced at all (off: costs are only measured).
    enforce: bool,
    vrs: Vec<Share>,
    /// Per VR, as `vrs`: the fast path's tally.
    tallies: Vec<Tally>,
    /// Per VR: the ports it has an interface on.
    vr_ports: Vec<Vec<u16>>,
    /// Per port: VRs with an interface on it, and how many are capped now.
    port_vrs: Vec<u32>,
    port_capped: Vec<u32>,
    /// Consecutive bursts whose every frame was refused.
    refused_bursts: u32,
    /// A burst running in several parts ([`Fair::defer_burst`]).
    deferred: Option<Deferred>,
    /// Each plain part's VR, frames and bytes while a burst runs in parts
    /// ([`Fair::charge_run`]; reused).
    split_runs: Vec<(usize, u64, u64)>,
    /// When the driver began to read the burst being processed
    /// ([`Fair::note_receive`]), until its VRs are charged for it.
    receive_from: Option<u64>,
    /// What the bursts since the driver last sent held: the bytes of each
    /// plain run and long frame with its VR (at most [`OWN_BYTES_KEPT`]),
    /// and all their bytes ([`Fair::charge_send`]).
    own_bytes: Vec<(usize, u64)>,
    burst_bytes: u64,
    /// What a frame of a burst of many VRs costs the fast path, as last
    /// measured (1/2^[`FAST_COST_SHIFT`] ticks; [`Fair::count_fast`]), and
    /// what such frames took this round and how many there were.
    fast_cost: u64,
    round_fast_ticks: u64,
    round_fast_frames: u64,
    /// Rounds so far that enforced budgets (for tests and reports).
    pub rounds_enforced: u64,
    /// Busy fraction of the last round, in thousandths.
    pub load_permille: u64,
}

/// A burst running in parts, from [`Fair::defer_burst`] to
/// [`Fair::end_deferred_burst`].
#[derive(Debug)]
struct Deferred {
    /// Whether every part noted so far was refused whole (`None`: none yet).
    refused_only: Option<bool>,
    /// When the burst started.
    start: u64,
    /// Ticks charged since (frames timed on their own).
    charged: u64,
    /// What the driver took to read the burst, and the bytes the burst
    /// held: a mixed part charges its frames their shares by bytes as it
    /// goes, the plain parts get theirs at the end.
    receive: u64,
    bytes: u64,
}

impl Fair {
    /// State for VRs with `weights`, whose interfaces sit on `vr_ports`, over
    /// `n_ports` ports.
    pub fn new(weights: &[u32], vr_ports: &[Vec<u16>], n_ports: usize) -> Fair {
        let mut port_vrs = vec![0u32; n_ports];
        let ports = vr_ports
            .iter()
            .map(|ports| {
                let mut ports = ports.clone();
                ports.sort_unstable();
                ports.dedup();
                for &p in &ports {
                    if let Some(c) = port_vrs.get_mut(p as usize) {
                        *c += 1;
                    }
                }
                ports
            })
            .collect::<Vec<_>>();
        let vrs = weights
            .iter()
            .map(|&w| Share {
                spent: 0,
                credit: 0,
                budget: u64::MAX,
                capped: false,
                was_capped: false,
                backlogged: false,
                round_mark: 0,
                weight: u64::from(w.max(1)),
            })
            .collect::<Vec<_>>();
        let room = Tally {
            frames: 0,
            room: u32::MAX,
        };
        Fair {
            clock: None,
            ticks_per_ms: 0,
            round_ticks: u64::MAX,
            round_start: 0,
            last_end: 0,
            idle_ticks: 0,
            enforcing: false,
            enforce: true,
            refused_bursts: 0,
            deferred: None,
            split_runs: Vec::new(),
            receive_from: None,
            own_bytes: Vec::new(),
            burst_bytes: 0,
            fast_cost: 0,
            round_fast_ticks: 0,
            round_fast_frames: 0,
            tallies: vec![room; vrs.len()],
            vrs,
            vr_ports: ports,
            port_capped: vec![0; n_ports],
            port_vrs,
            rounds_enforced: 0,
            load_permille: 0,
        }
    }

    /// Follows a topology change: new VRs get a share, deleted ones lose
    /// their ports; the others keep their accounts.
    pub fn set_vrs(&mut self, weights: &[u32], vr_ports: &[Vec<u16>]) {
        let fresh = Fair::new(weights, vr_ports, self.port_vrs.len());
        for (i, f) in fresh.vrs.into_iter().enumerate() {
            match self.vrs.get_mut(i) {
                Some(s) => s.weight = f.weight,
                None => {
                    self.vrs.push(f);
                    self.tallies.push(fresh.tallies[i]);
                }
            }
        }
        self.vr_ports = fresh.vr_ports;
        self.port_vrs = fresh.port_vrs;
        self.recount_capped();
        self.set_round_ticks();
    }

    /// Installs the clock; a round lasts one millisecond of it per
    /// thousand VRs (started, at least one).
    pub fn set_clock(&mut self, clock: Clock, ticks_per_second: u64) {
        let now = clock();
        self.clock = Some(clock);
        self.ticks_per_ms = (ticks_per_second / 1000).max(1);
        self.set_round_ticks();
        self.round_start = now;
        self.last_end = now;
    }

    fn set_round_ticks(&mut self) {
        if self.ticks_per_ms > 0 {
            let ms = self.vrs.len().div_ceil(VRS_PER_ROUND_MS).max(1) as u64;
            self.round_ticks = self.ticks_per_ms.saturating_mul(ms);
        }
    }

    /// Measure costs but never police (`false`), or enforce shares when
    /// saturated (`true`, the default).
    pub fn set_enforce(&mut self, enforce: bool) {
        self.enforce = enforce;
    }

    /// The clock's reading, or 0 when there is none.
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.map_or(0, |c| c())
    }

    /// Whether a clock is installed (costs are measured).
    #[inline]
    pub fn active(&self) -> bool {
        self.clock.is_some()
    }

    /// May VR `vr` run a batch read from a queue the driver loop chose to
    /// read? A VR is capped (its own queues go unread) at its budget, but a
    /// batch that arrives anyway, on a queue shared with VRs still under
    /// budget, is admitted up to one more quantum: VRs whose demand is about
    /// their share drift in and out of their budgets by less than that, and
    /// dropping what was already read and demuxed only wastes it. The excess
    /// is a deficit carried into the next refill, so the long-run share holds.
    #[inline(always)]
    pub fn admit(&self, vr: usize) -> bool {
        !self.enforcing
            || self
                .vrs
                .get(vr)
                .is_none_or(|s| s.used(self.pending(vr)) < s.budget.saturating_mul(2))
    }

    /// [`Fair::admit`] for a frame of a burst of many VRs, which reads the
    /// VR's record only when its tally has no room left.
    #[inline(always)]
    pub fn admit_fast(&self, vr: usize) -> bool {
        self.tallies.get(vr).is_some_and(|t| t.room > 0) || self.admit(vr)
    }

    /// What VR `vr`'s fast frames of this round are estimated to have cost,
    /// in 1/2^[`FAST_COST_SHIFT`] ticks.
    #[inline(always)]
    fn pending(&self, vr: usize) -> u64 {
        self.tallies
            .get(vr)
            .map_or(0, |t| t.frames() * self.fast_cost)
    }

    /// A run of VR `vr`'s frames is about to be processed, read from a burst
    /// that was `full` (more of it was waiting): notes the backlog and says
    /// whether the run may go ([`Fair::admit`]).
    #[inline(always)]
    pub fn admit_run(&mut self, vr: usize, full: bool) -> bool {
        if full {
            self.note_backlog(vr);
        }
        self.admit(vr)
    }

    /// Charges `ticks` to VR `vr`.
    #[inline]
    pub fn charge(&mut self, vr: usize, ticks: u64) {
        if let Some(d) = &mut self.deferred {
            d.charged = d.charged.saturating_add(ticks);
        }
        self.charge_share(vr, ticks);
    }

    /// Charges VR `vr` its share, `ticks`, of what a burst's frames cost
    /// together: [`Fair::charge`] less the note a burst in parts keeps of
    /// frames timed on their own (a share is never one of those). One add,
    /// and one budget test while shares are enforced.
    #[inline(always)]
    pub fn charge_share(&mut self, vr: usize, ticks: u64) {
        let Some(s) = self.vrs.get_mut(vr) else {
            return;
        };
        // 2^64 ticks of a 3 GHz clock are two centuries: no overflow.
        s.spent = s.spent.wrapping_add(ticks);
        if self.enforcing {
            self.check(vr);
        }
    }

    /// The driver began to read the burst that is processed next at
    /// `start` (the clock's reading): what it took, its system calls and
    /// copies, which grow with the frames' bytes, is charged to the
    /// burst's VRs by bytes, so that no VR takes more than its share of the
    /// worker with large frames, cheap in the stages and dear to read.
    #[inline]
    pub fn note_receive(&mut self, start: u64) {
        self.receive_from = Some(start);
    }

    /// The ticks from the burst's receive ([`Fair::note_receive`]) to
    /// `now`, the caller's first clock reading, for the caller to charge:
    /// the reading and whatever the worker did with the burst before
    /// `now`. 0 after the first take, and in a part of a burst running in
    /// parts, whose whole burst charges them at its end.
    #[inline]
    fn take_receive(&mut self, now: u64) -> u64 {
        self.take_receive_start()
            .map_or(0, |start| now.saturating_sub(start))
    }

    /// When the burst's receive began ([`Fair::note_receive`]), for a
    /// caller that times the burst from there; `None` after the first take,
    /// and in a part of a burst running in parts.
    #[inline]
    pub fn take_receive_start(&mut self) -> Option<u64> {
        if self.deferred.is_some() {
            return None;
        }
        self.receive_from.take()
    }

    /// Charges VR `vr` its share by bytes, `len` of `bytes`, of `ticks`
    /// the driver took to read or send them; returns the share.
    #[inline]
    fn charge_by_bytes(&mut self, vr: usize, ticks: u64, len: u64, bytes: u64) -> u64 {
        if ticks == 0 {
            return 0;
        }
        let share = share_by_bytes(ticks, len, bytes);
        // Not a frame timed within a burst in parts: the driver's time
        // lies outside the burst's own.
        self.charge_share(vr, share);
        share
    }

    /// A frame of VR `vr`, `len` of its burst's `bytes`, pays for itself:
    /// charged its share of `receive`, what reading the burst took, and
    /// noted for its share of what sending it takes ([`Fair::charge_send`]).
    /// Returns the receive's share.
    #[inline]
    pub fn charge_frame(&mut self, vr: usize, len: u64, receive: u64, bytes: u64) -> u64 {
        self.note_own_bytes(vr, len);
        self.charge_by_bytes(vr, receive, len, bytes)
    }

    /// A burst's frames of `bytes` in all are to be sent: what the driver
    /// takes to send is shared by the bytes of the bursts since it last
    /// sent.
    #[inline]
    pub fn note_burst_bytes(&mut self, bytes: u64) {
        self.burst_bytes += bytes;
    }

    /// `bytes` of those ([`Fair::note_burst_bytes`]) are VR `vr`'s own: a
    /// plain run's frames, a frame of a burst of many VRs longer than
    /// [`LONG_FRAME`], any frame of a mixed burst. The rest are shared with
    /// the fast path's cost, per frame.
    #[inline]
    pub fn note_own_bytes(&mut self, vr: usize, bytes: u64) {
        if self.own_bytes.len() < OWN_BYTES_KEPT {
            self.own_bytes.push((vr, bytes));
        }
    }

    /// A turn of the driver loop ends at `now`: if it `sent` frames, what
    /// that took, from the end of the last call into the worker
    /// ([`Fair::end_call`]) to `now`, is charged by bytes to the VRs whose
    /// frames the bursts since the last such call forwarded
    /// ([`Fair::note_own_bytes`]), the rest with the fast path's cost;
    /// either way the notes start afresh, and the time counts as busy, not
    /// idle.
    pub fn charge_send(&mut self, now: u64, sent: bool) {
        let ticks = now.saturating_sub(self.last_end);
        let bytes = std::mem::take(&mut self.burst_bytes);
        let mut own = std::mem::take(&mut self.own_bytes);
        if sent && bytes > 0 && ticks > 0 {
            self.last_end = self.last_end.max(now);
            match own[..] {
                // One VR's frames alone, the common case.
                [(vr, len)] if len == bytes => self.charge_share(vr, ticks),
                _ => {
                    let mut charged = 0;
                    for &(vr, len) in &own {
                        charged += self.charge_by_bytes(vr, ticks, len, bytes);
                    }
                    self.fast_burst(0, ticks.saturating_sub(charged));
                }
            }
        }
        own.clear();
        self.own_bytes = own;
    }

    /// The clock's reading at the end of the last call into the worker (or
    /// of the last send charged): where the driver's next receive, if it
    /// began with no reading of its own, is taken to begin.
    #[inline]
    pub fn last_end(&self) -> u64 {
        self.last_end
    }

    /// A frame of VR `vr` in a burst of many VRs went out by the fast path,
    /// read from a burst that was `full`: counted, and charged what such a
    /// frame cost on average (the estimate now, the round's own average
    /// when it ends), not timed: one count in the VR's tally a frame
    /// instead of an equal share of each burst's time. The VR's record is
    /// read only when the tally's room runs out.
    #[inline(always)]
    pub fn count_fast(&mut self, vr: usize, full: bool) {
        // A frame's estimate, as much of it as a room holds.
        let cost = self.fast_cost.min(u64::from(u32::MAX)) as u32;
        let Some(t) = self.tallies.get_mut(vr) else {
            return;
        };
        // 2^31 frames a round would be 2 Tpps: no overflow.
        t.frames = (t.frames + 1) | u32::from(full) << 31;
        t.room = t.room.saturating_sub(cost);
        if t.room == 0 {
            self.check(vr);
        }
    }

    /// While shares are enforced, caps VR `vr` if it reached its budget;
    /// then sets its tally's room.
    #[cold]
    fn check(&mut self, vr: usize) {
        let pending = self.pending(vr);
        if let Some(s) = self.vrs.get(vr) {
            if self.enforcing && !s.capped && s.used(pending) >= s.budget {
                self.cap(vr);
            }
        }
        self.set_room(vr);
    }

    /// Sets VR `vr`'s tally's room: what its fast frames may spend before
    /// it reaches its next limit (its budget until capped, then twice its
    /// budget: [`Fair::admit`]), so that the limit is tested exactly once
    /// the room runs out. `u32::MAX` while nothing is enforced.
    fn set_room(&mut self, vr: usize) {
        let pending = self.pending(vr);
        let (Some(s), Some(t)) = (self.vrs.get(vr), self.tallies.get_mut(vr)) else {
            return;
        };
        if !self.enforcing || s.budget == u64::MAX {
            t.room = u32::MAX;
            return;
        }
        let limit = if s.capped {
            s.budget.saturating_mul(2)
        } else {
            s.budget
        };
        // The estimates of frames are summed before they are turned into
        // whole ticks, so one tick less than the gap is what the room may
        // cover.
        let gap = limit.saturating_sub(s.used(pending)).saturating_sub(1);
        t.room = gap
            .checked_shl(FAST_COST_SHIFT)
            .filter(|&r| r >> FAST_COST_SHIFT == gap)
            .map_or(u32::MAX, |r| r.min(u64::from(u32::MAX)) as u32);
    }

    /// `frames` frames counted with [`Fair::count_fast`] took `ticks`
    /// together.
    #[inline]
    pub fn fast_burst(&mut self, frames: u64, ticks: u64) {
        self.round_fast_frames += frames;
        self.round_fast_ticks = self.round_fast_ticks.saturating_add(ticks);
    }

    /// VR `vr` reached its budget: its ports count it as capped.
    #[cold]
    fn cap(&mut self, vr: usize) {
        let Some(s) = self.vrs.get_mut(vr) else {
            return;
        };
        s.capped = true;
        s.was_capped = true;
        if let Some(ports) = self.vr_ports.get(vr) {
            for &p in ports {
                if let Some(c) = self.port_capped.get_mut(p as usize) {
                    *c += 1;
                }
            }
        }
    }

    /// VR `vr` arrived in a full receive burst: more of it was waiting, so
    /// what it used is not all it wants.
    #[inline(always)]
    pub fn note_backlog(&mut self, vr: usize) {
        if let Some(s) = self.vrs.get_mut(vr) {
            s.backlogged = true;
        }
    }

    /// Every VR with work has used its budget and the rest have none:
    /// rather than leave the core idle, start everyone's budget afresh,
    /// keeping the proportions (deficit round robin's refill). The round's
    /// accounting goes on.
    pub fn replenish(&mut self) {
        for vr in 0..self.vrs.len() {
            let pending = self.pending(vr);
            let s = &mut self.vrs[vr];
            // Overshoot (a burst finishes past the budget) is carried, as in
            // deficit round robin, so it is not a free bonus each turn.
            s.set_used(pending, s.used(pending).saturating_sub(s.budget));
        }
        self.recount_capped();
    }

    /// Recomputes who is over budget, and so which ports are unwanted, and
    /// every tally's room.
    fn recount_capped(&mut self) {
        self.port_capped.iter_mut().for_each(|c| *c = 0);
        for vr in 0..self.vrs.len() {
            let pending = self.pending(vr);
            let s = &mut self.vrs[vr];
            s.capped = self.enforcing && s.used(pending) >= s.budget;
            if s.capped {
                s.was_capped = true;
                for &p in self.vr_ports.get(vr).map_or(&[][..], Vec::as_slice) {
                    if let Some(c) = self.port_capped.get_mut(p as usize) {
                        *c += 1;
                    }
                }
            }
            self.set_room(vr);
        }
    }

    /// Should the driver loop read port `port` now? False only while every
    /// VR on it is over budget; the loop still reads it when nothing else
    /// has work.
    #[inline]
    pub fn port_wanted(&self, port: usize) -> bool {
        match (self.port_vrs.get(port), self.port_capped.get(port)) {
            (Some(&n), Some(&c)) => n == 0 || c < n,
            _ => true,
        }
    }

    /// Ends a call into the worker at `now`; `idle` when the call found no
    /// work. Starts a new round when this one is over.
    #[inline]
    pub fn end_call(&mut self, now: u64, idle: bool) {
        if self.clock.is_none() {
            return;
        }
        if idle {
            self.idle_ticks += now.saturating_sub(self.last_end);
        }
        self.last_end = now;
        let elapsed = now.saturating_sub(self.round_start);
        if elapsed >= self.round_ticks {
            self.new_round(now, elapsed);
        }
    }

    /// Ends the round: two passes over the VRs' records (a worker with ten
    /// thousand VRs holds 800 KB of them, read every millisecond), the
    /// first to settle and sum up the round, the second to set the next.
    fn new_round(&mut self, now: u64, elapsed: u64) {
        let round = self.settle_fast();
        // Saturated: some VR's queue came back full (the worker fell behind),
        // and the worker hardly idled.
        let saturated =
            round.backlog && self.idle_ticks.saturating_mul(IDLE_FRACTION_DIVISOR) < elapsed;
        self.load_permille =
            1000 - (self.idle_ticks.min(elapsed) * 1000 / elapsed.max(1)).min(1000);
        let was_enforcing = self.enforcing;
        // One busy VR has nobody to share with: it gets the whole worker.
        self.enforcing = self.enforce && saturated && round.capacity > 0 && round.busy > 1;
        let quanta = self.enforcing.then(|| round.quanta(self.fast_cost));
        if self.enforcing {
            self.rounds_enforced += 1;
        }
        let carry = was_enforcing && self.enforcing;
        self.port_capped.iter_mut().for_each(|c| *c = 0);
        for vr in 0..self.vrs.len() {
            let s = &mut self.vrs[vr];
            s.budget = match &quanta {
                Some(q) if s.active() => q.budget(s.weight),
                _ => u64::MAX,
            };
            // Budgets are deficit counters: what a VR used since the last
            // refill carries into the new round (at most one budget of it),
            // so round boundaries do not hand out extra turns.
            s.set_used(0, if carry { s.used(0).min(s.budget) } else { 0 });
            s.round_mark = s.total(0);
            s.backlogged = false;
            s.capped = self.enforcing && s.used(0) >= s.budget;
            s.was_capped = s.capped;
            if s.capped {
                for &p in self.vr_ports.get(vr).map_or(&[][..], Vec::as_slice) {
                    if let Some(c) = self.port_capped.get_mut(p as usize) {
                        *c += 1;
                    }
                }
            }
            self.set_room(vr);
        }
        self.round_start = now;
        self.idle_ticks = 0;
    }

    /// Turns the round's fast-path frame counts into ticks at the cost such
    /// a frame had on average this round, which is next round's estimate:
    /// every VR pays the same per frame, and all of them together exactly
    /// what the frames took (to a tick per VR). Sums up the round on the
    /// way.
    fn settle_fast(&mut self) -> Round {
        if let Some(cost) = mul_div(self.round_fast_ticks, 1 << FAST_COST_SHIFT, 1)
            .checked_div(self.round_fast_frames)
        {
            self.fast_cost = cost;
        }
        let (ticks, frames) = (self.round_fast_ticks, self.round_fast_frames);
        let mut round = Round::default();
        for (s, t) in self.vrs.iter_mut().zip(&mut self.tallies) {
            if t.frames != 0 {
                s.spent = s.spent.wrapping_add(mul_div(ticks, t.frames(), frames));
                s.backlogged |= t.backlogged();
                t.frames = 0;
            }
            round.add(s);
        }
        (self.round_fast_ticks, self.round_fast_frames) = (0, 0);
        round
    }

    /// A burst in which every frame belonged to over-budget VRs: on a port
    /// shared with VRs still under budget, that means those have nothing
    /// to send right now. Two in a row count as "nobody else has work" and
    /// refill the budgets, so sharing a port stays work-conserving.
    #[inline]
    pub fn note_refused_burst(&mut self, refused_only: bool) {
        if let Some(d) = &mut self.deferred {
            d.refused_only = Some(d.refused_only.unwrap_or(true) & refused_only);
            return;
        }
        if !refused_only {
            self.refused_bursts = 0;
            return;
        }
        self.refused_bursts += 1;
        if self.refused_bursts >= 2 {
            self.refused_bursts = 0;
            self.replenish();
        }
    }

    /// Whether a burst is running in parts ([`Fair::defer_burst`]).
    #[inline]
    pub fn splitting(&self) -> bool {
        self.deferred.is_some()
    }

    /// A run of `frames` of VR `vr`, `bytes` long together, that cost
    /// `ticks`: charged now, or, while a burst runs in parts, counted
    /// toward an equal share per frame of the whole burst's cost and a
    /// share by bytes of its receive ([`Fair::end_deferred_burst`]).
    #[inline]
    pub fn charge_run(&mut self, vr: usize, frames: u64, bytes: u64, ticks: u64) {
        if self.deferred.is_some() {
            self.split_runs.push((vr, frames, bytes));
        } else {
            self.charge(vr, ticks);
        }
    }

    /// One receive burst of `bytes`, begun at `now`, is about to run in
    /// several parts, each noting itself ([`Fair::note_refused_burst`]) and
    /// charging its plain runs ([`Fair::charge_run`]): until
    /// [`Fair::end_deferred_burst`], they count as one burst, refused only
    /// if every part was.
    pub fn defer_burst(&mut self, now: u64, bytes: u64) {
        let receive = self.take_receive(now);
        self.deferred = Some(Deferred {
            refused_only: None,
            start: now,
            charged: 0,
            receive,
            bytes,
        });
        self.split_runs.clear();
    }

    /// What reading the burst took, and the bytes it held, for a caller
    /// that charges its frames by bytes: this burst's, of `bytes`, taken at
    /// `now` (from [`Fair::note_receive`]); in a part of a burst running in
    /// parts, the whole burst's, whose share for the part's own frames the
    /// part charges (the plain parts get theirs at the end).
    #[inline]
    pub fn receive_by_bytes(&mut self, now: u64, bytes: u64) -> (u64, u64) {
        match &self.deferred {
            Some(d) => (d.receive, d.bytes),
            None => (self.take_receive(now), bytes),
        }
    }

    /// The parts of a deferred burst are done at `now`: what the burst cost
    /// beyond what was charged on the way (frames timed on their own) is
    /// shared among the plain runs' frames equally, as a frame-by-frame
    /// burst shares its fast path's cost, so a VR pays per frame, not per
    /// part, and the burst's receive among them by bytes; then the burst
    /// is noted as a whole.
    pub fn end_deferred_burst(&mut self, now: u64) {
        let Some(d) = self.deferred.take() else {
            return;
        };
        let cost = now.saturating_sub(d.start).saturating_sub(d.charged);
        let (frames, bytes) = self
            .split_runs
            .iter()
            .fold((0, 0), |(f, b), &(_, n, len)| (f + n, b + len));
        // The plain parts' share of the receive (mixed parts charged theirs).
        let receive = mul_div(d.receive, bytes, d.bytes.max(bytes).max(1));
        let (mut left, mut receive_left) = (cost, receive);
        let last = self.split_runs.len().saturating_sub(1);
        for k in 0..self.split_runs.len() {
            let (vr, n, len) = self.split_runs[k];
            let (share, receive) = if k == last {
                (left, receive_left)
            } else {
                (
                    mul_div(cost, n, frames.max(1)).min(left),
                    share_by_bytes(receive, len, bytes).min(receive_left),
                )
            };
            left -= share;
            receive_left -= receive;
            self.charge(vr, share + receive);
        }
        self.split_runs.clear();
        if let Some(refused_only) = d.refused_only {
            self.note_refused_burst(refused_only);
        }
    }

    /// Ticks charged to VR `vr` this round.
    pub fn used(&self, vr: usize) -> u64 {
        let pending = self.pending(vr);
        self.vrs.get(vr).map_or(0, |s| s.round_used(pending))
    }

    /// Ticks charged to each VR since the worker started: the clock time its
    /// runs through the stages took, whether or not budgets were enforced.
    pub fn charged(&self) -> Vec<u64> {
        self.totals().collect()
    }

    /// What [`Fair::charged`] gives, in nanoseconds, VR by VR; `None`
    /// without a clock.
    pub fn charged_ns(&self) -> Option<impl Iterator<Item = u64> + '_> {
        self.clock?;
        Some(
            self.totals()
                .map(|ticks| mul_div(ticks, 1_000_000, self.ticks_per_ms)),
        )
    }

    fn totals(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.vrs.len()).map(|vr| self.vrs[vr].total(self.pending(vr)))
    }

    /// VR `vr`'s budget per refill (`u64::MAX` when none is enforced).
    pub fn budget(&self, vr: usize) -> u64 {
        self.vrs.get(vr).map_or(u64::MAX, |s| s.budget)
    }

    /// Whether budgets are enforced this round.
    pub fn enforcing(&self) -> bool {
        self.enforcing
    }
}

/// The share of `ticks` that `len` of `bytes` takes (rounded down, at most
/// `ticks`).
#[inline]
pub fn share_by_bytes(ticks: u64, len: u64, bytes: u64) -> u64 {
    mul_div(ticks, len, bytes.max(1)).min(ticks)
}

/// `a × b ÷ c` without overflow (`c` of 0 taken as 1); in 64 bits when the
/// product fits, since a 128-bit division is a library call.
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    match a.checked_mul(b) {
        Some(p) => p / c.max(1),
        None => (u128::from(a) * u128::from(b) / u128::from(c.max(1))) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_lasts_a_millisecond_per_thousand_vrs() {
        let ports = |n: usize| (0..n).map(|_| vec![0u16]).collect::<Vec<_>>();
        let mut f = Fair::new(&[1; 10], &ports(10), 1);
        f.set_clock(|| 0, 1_000_000);
        assert_eq!(f.round_ticks, 1_000);
        f.set_vrs(&[1; 2_500], &ports(2_500));
        assert_eq!(f.round_ticks, 3_000);
    }

    /// Runs `rounds` rounds of a saturated worker with a fixed budget of
    /// `per_round` ticks. Each VR offers `offered[i]` packets per round
    /// costing `cost[i]` ticks each; the worker serves VRs in turn, one
    /// packet at a time, while admitted. Returns packets served per VR in
    /// the last round.
    fn simulate(weights: &[u32], offered: &[u64], cost: &[u64], rounds: usize) -> Vec<u64> {
        let n = weights.len();
        let ports: Vec<Vec<u16>> = (0..n).map(|i| vec![i as u16]).collect();
        let mut f = Fair::new(weights, &ports, n);
        // A fake clock is enough here: rounds are ended by hand.
        f.clock = Some(|| 0);
        f.round_ticks = 1;
        let per_round = 1_000_000u64;
        let mut served = vec![0u64; n];
        for _ in 0..rounds {
            served.iter_mut().for_each(|s| *s = 0);
            let mut left: Vec<u64> = offered.to_vec();
            let mut spent = 0u64;
            'round: while spent < per_round {
                let mut progressed = false;
                for i in 0..n {
                    // As the driver loop does: an over-budget VR's own queue is not read.
                    if left[i] == 0 || !f.port_wanted(i) || !f.admit(i) || spent >= per_round {
                        continue;
                    }
                    left[i] -= 1;
                    served[i] += 1;
                    f.charge(i, cost[i]);
                    spent += cost[i];
                    progressed = true;
                }
                if !progressed {
                    // Everyone with packets is capped: refill, or stop when nobody has any.
                    if left.iter().all(|&l| l == 0) {
                        break 'round;
                    }
                    f.replenish();
                }
            }
            for (i, &l) in left.iter().enumerate() {
                if l > 0 {
                    f.note_backlog(i);
                }
            }
            let idle = spent < per_round;
            // Saturated when the offered work filled the round.
            f.idle_ticks = if idle { per_round } else { 0 };
            f.new_round(0, per_round);
        }
        served
    }

    #[test]
    fn a_split_burst_is_noted_once_refused_only_if_every_part_was() {
        let mut f = Fair::new(&[1, 1], &[vec![0], vec![0]], 1);
        f.enforcing = true;
        for s in &mut f.vrs {
            s.budget = 10;
            s.spent = 25;
        }
        // Two parts refused, one admitted: not a refused burst, twice over.
        for _ in 0..2 {
            f.defer_burst(0, 0);
            f.note_refused_burst(true);
            f.note_refused_burst(true);
            f.note_refused_burst(false);
            f.end_deferred_burst(0);
        }
        assert_eq!(f.vrs[0].used(0), 25, "no refill");
        // A burst whose every part was refused counts once: the second one
        // refills the budgets (two in a row), not the first one's parts.
        f.defer_burst(0, 0);
        f.note_refused_burst(true);
        f.note_refused_burst(true);
        f.end_deferred_burst(0);
        assert_eq!(f.vrs[0].used(0), 25, "one refused burst so far");
        f.defer_burst(0, 0);
        f.note_refused_burst(true);
        f.end_deferred_burst(0);
        assert_eq!(f.vrs[0].used(0), 15, "refilled after two refused bursts");
        // A deferred burst with no part noted notes nothing.
        f.defer_burst(0, 0);
        f.end_deferred_burst(0);
        f.note_refused_burst(true);
        assert_eq!(f.vrs[0].used(0), 15);
        f.note_refused_burst(true);
        assert_eq!(f.vrs[0].used(0), 5);
    }

    #[test]
    fn a_split_burst_shares_its_cost_per_frame() {
        let mut f = Fair::new(&[1, 1], &[vec![0], vec![0]], 1);
        f.defer_burst(100, 0);
        // Two plain parts: 3 frames of VR 0, 1 of VR 1 (their own timings
        // are not what is charged), and one frame of VR 1 timed on its own.
        f.charge_run(0, 3, 0, 999);
        f.charge_run(1, 1, 0, 999);
        f.charge(1, 10);
        f.end_deferred_burst(150);
        // 50 ticks in all, 10 charged on the way: 40 shared 3 : 1.
        assert_eq!(f.used(0), 30);
        assert_eq!(f.used(1), 10 + 10);
        // Outside a split burst, a run is charged what it cost.
        f.charge_run(0, 3, 0, 7);
        assert_eq!(f.used(0), 37);
    }

    #[test]
    fn a_split_burst_shares_its_receive_by_bytes() {
        let mut f = Fair::new(&[1, 1], &[vec![0], vec![0]], 1);
        f.note_receive(0);
        f.defer_burst(1000, 400);
        assert_eq!(f.take_receive(1000), 0, "a part takes none");
        // 300 bytes of VR 0, 100 of VR 1, no cost beyond the receive.
        f.charge_run(0, 3, 300, 0);
        f.charge_run(1, 1, 100, 0);
        f.end_deferred_burst(1000);
        assert_eq!((f.used(0), f.used(1)), (750, 250));
        assert_eq!(f.take_receive(2000), 0, "charged once");
    }

    #[test]
    fn sending_is_charged_by_the_bytes_received_since_the_last_send() {
        let mut f = Fair::new(&[1, 1, 1], &[vec![0], vec![0], vec![0]], 1);
        // A plain run of VR 0 (300 bytes), a long frame of VR 1 (100) in
        // a burst of 200 bytes whose other 100 are short frames.
        f.note_burst_bytes(300);
        f.note_own_bytes(0, 300);
        f.note_burst_bytes(200);
        f.note_own_bytes(1, 100);
        // No clock: the last call ended at 0.
        f.charge_send(1000, true);
        // The short frames' 200 ticks go with the fast path's cost.
        assert_eq!((f.used(0), f.used(1), f.used(2)), (600, 200, 0));
        assert_eq!(f.last_end(), 1000, "the send was busy time");
        f.charge_send(2000, true);
        assert_eq!((f.used(0), f.used(1)), (600, 200), "nothing read since");
        // A turn that read but sent nothing (its frames dropped) leaves no
        // bytes for a later send to charge.
        f.note_burst_bytes(300);
        f.note_own_bytes(0, 300);
        f.charge_send(3000, false);
        f.charge_send(4000, true);
        assert_eq!((f.used(0), f.used(1)), (600, 200));
    }

    #[test]
    fn equal_weights_protect_the_light_vr() {
        // A offers 10x its share, B its share (half the capacity), same cost.
        let s = simulate(&[1, 1], &[10_000, 1_000], &[500, 500], 20);
        assert_eq!(s[1], 1_000, "B keeps everything it offered: {s:?}");
        assert!(s[0] >= 950, "A gets the rest: {s:?}");
    }

    #[test]
    fn weights_one_to_three() {
        let s = simulate(&[1, 3], &[100_000, 100_000], &[100, 100], 20);
        let ratio = s[1] as f64 / s[0] as f64;
        assert!((ratio - 3.0).abs() <= 0.15, "{s:?} ratio {ratio}");
    }

    #[test]
    fn expensive_packets_are_charged_for_their_cost() {
        // A's packets cost 10x B's; by packets A would take 10/11 of the core.
        let s = simulate(&[1, 1], &[100_000, 100_000], &[1_000, 100], 20);
        let a_ticks = s[0] * 1_000;
        let b_ticks = s[1] * 100;
        let ratio = b_ticks as f64 / a_ticks as f64;
        assert!((ratio - 1.0).abs() <= 0.05, "{s:?} cycles ratio {ratio}");
    }

    #[test]
    fn idle_vr_leaves_its_share_to_others() {
        // B offers a tenth of its share: A gets the rest (work-conserving).
        let s = simulate(&[1, 1], &[10_000, 100], &[100, 100], 20);
        assert_eq!(s[1], 100);
        assert!(s[0] >= 9_850, "{s:?}");
    }

    #[test]
    fn a_vr_alone_is_never_policed() {
        let s = simulate(&[1, 1], &[100_000, 0], &[100, 100], 20);
        assert_eq!(s[0], 10_000, "the whole round: {s:?}");
        let mut f = Fair::new(&[1, 1], &[vec![0], vec![1]], 2);
        f.clock = Some(|| 0);
        f.round_ticks = 100;
        f.charge(0, 100);
        f.note_backlog(0);
        f.end_call(100, false);
        assert!(!f.enforcing(), "saturated, but by one VR only");
    }

    #[test]
    fn unsaturated_worker_polices_nobody() {
        let mut f = Fair::new(&[1, 1], &[vec![0], vec![1]], 2);
        f.clock = Some(|| 0);
        f.round_ticks = 100;
        f.charge(0, 10);
        // Half of the round idle.
        f.end_call(50, true);
        f.end_call(100, false);
        assert!(!f.enforcing());
        assert!(f.admit(0) && f.admit(1));
        assert!(f.port_wanted(0) && f.port_wanted(1));
    }

    /// A worker with `weights` on one port each, whose fast frames cost
    /// `cost` ticks each (as if measured last round), enforcing budgets of
    /// `budget` ticks.
    fn fast_fair(weights: &[u32], cost: u64, budget: u64) -> Fair {
        let ports: Vec<Vec<u16>> = (0..weights.len()).map(|i| vec![i as u16]).collect();
        let mut f = Fair::new(weights, &ports, weights.len());
        f.fast_cost = cost << FAST_COST_SHIFT;
        f.enforcing = true;
        for s in &mut f.vrs {
            s.budget = budget;
        }
        f.recount_capped();
        f
    }

    #[test]
    fn fast_frames_cap_at_the_budget_and_are_refused_at_twice_it() {
        // 7 ticks a frame, 100 a quantum: the 15th frame reaches it (105),
        // the 29th twice it (203).
        let mut f = fast_fair(&[1, 1], 7, 100);
        let mut n = 0u64;
        while f.admit(0) {
            assert!(f.admit_fast(0), "the tally agrees with the record");
            n += 1;
            f.count_fast(0, false);
            assert_eq!(f.used(0), 7 * n);
            assert_eq!(f.vrs[0].capped, n >= 15, "capped after frame {n}");
            assert_eq!(f.port_wanted(0), n < 15);
            assert_eq!(f.admit_fast(0), 7 * n < 200, "after frame {n}");
        }
        assert_eq!(n, 29, "refused once at 203");
        assert!(!f.admit_fast(0));
        assert!(f.admit_fast(1), "the other VR is untouched");
        // A refill gives the room back, the overshoot carried.
        f.replenish();
        assert!(f.admit_fast(0), "203 - 100: under twice the budget");
        assert!(f.vrs[0].capped, "but not under the budget");
        f.replenish();
        assert!(f.admit_fast(0) && !f.vrs[0].capped, "3");
        assert_eq!(
            f.tallies[0].room,
            (96 << FAST_COST_SHIFT) as u32,
            "room for 96 ticks"
        );
    }

    #[test]
    fn a_slow_charge_shrinks_the_fast_frames_room() {
        let mut f = fast_fair(&[1, 1], 10, 100);
        f.count_fast(0, false);
        f.charge(0, 85);
        assert!(!f.vrs[0].capped, "95 of 100");
        f.count_fast(0, false);
        assert!(f.vrs[0].capped, "105: the next fast frame capped it");
        f.charge(0, 95);
        assert!(!f.admit_fast(0), "200: twice the budget");
    }

    #[test]
    fn what_each_vr_was_charged_reads_in_nanoseconds_and_needs_a_clock() {
        let ports = vec![vec![0u16], vec![1u16]];
        let mut f = Fair::new(&[1, 1], &ports, 2);
        assert!(
            f.charged_ns().is_none(),
            "no clock: nothing measured, nothing said"
        );
        // A 3 GHz clock: 3,000 ticks are a microsecond.
        f.set_clock(|| 0, 3_000_000_000);
        f.charge(0, 3_000);
        f.charge(1, 45_000_000_000_000);
        let seen: Vec<u64> = f.charged_ns().expect("a clock").collect();
        // The second is 4 h 10 min, past what ticks × 10^6 holds in a u64.
        assert_eq!(seen, vec![1_000, 15_000_000_000_000]);
    }

    /// What a VR is charged for fast frames in the open round is an
    /// estimate, which the round's end may settle lower: what the worker
    /// publishes ([`crate::counters::Cell::raise`]) never goes back.
    #[test]
    fn a_published_worker_time_never_goes_back_when_a_round_settles_lower() {
        let mut f = fast_fair(&[1, 1], 20, u64::MAX);
        f.enforcing = false;
        f.recount_capped();
        f.clock = Some(|| 0);
        f.ticks_per_ms = 1_000_000; // a tick is a nanosecond
        f.round_ticks = 100;
        let published = crate::counters::Cell::default();
        let read = |f: &Fair| f.charged_ns().and_then(|mut ns| ns.next()).unwrap_or(0);
        for _ in 0..3 {
            f.count_fast(0, false);
        }
        assert_eq!(read(&f), 60, "three frames at the estimate of 20");
        published.raise(read(&f));
        // They took 10 each.
        f.fast_burst(3, 30);
        f.end_call(100, false);
        assert_eq!(read(&f), 30, "settled lower");
        published.raise(read(&f));
        assert_eq!(published.get(), 60, "the published figure stays");
        f.count_fast(0, false);
        f.fast_burst(1, 40);
        f.end_call(200, false);
        published.raise(read(&f));
        assert_eq!(published.get(), 70, "and moves on once it is passed");
    }

    #[test]
    fn a_round_settles_fast_frames_and_their_backlog() {
        let mut f = fast_fair(&[1, 1], 10, u64::MAX);
        f.enforcing = false;
        f.recount_capped();
        f.clock = Some(|| 0);
        f.round_ticks = 100;
        for _ in 0..3 {
            f.count_fast(0, false);
        }
        f.count_fast(1, true);
        f.fast_burst(4, 80);
        assert_eq!((f.used(0), f.used(1)), (30, 10), "the estimate");
        f.end_call(100, false);
        // The round's frames cost 20 each: its own average.
        assert_eq!(f.charged(), vec![60, 20]);
        assert!(
            f.vrs[1].backlogged || f.enforcing(),
            "VR 1 came in a full burst"
        );
        assert_eq!(f.fast_cost, 20 << FAST_COST_SHIFT, "next round's estimate");
    }

    #[test]
    fn small_quanta_are_scaled_up_alike() {
        // 1,000 ticks a round over weights 1 and 3 is 31 and 93 a quantum,
        // less than 64 fast frames of 10 ticks: both grow by 21 (640 ÷ 31,
        // rounded up).
        let mut f = fast_fair(&[1, 3], 10, u64::MAX);
        f.clock = Some(|| 0);
        f.round_ticks = 1_000;
        f.fast_burst(2, 20);
        f.count_fast(0, true);
        f.count_fast(1, true);
        f.charge(0, 240);
        f.charge(1, 740);
        f.end_call(1_000, false);
        assert!(f.enforcing());
        assert_eq!((f.budget(0), f.budget(1)), (31 * 21, 93 * 21));
        // Without a fast frame's cost, nothing is scaled.
        let round = Round {
            capacity: 1_000,
            weight: 4,
            least_weight: Some(1),
            ..Round::default()
        };
        let q = round.quanta(0);
        assert_eq!((q.budget(1), q.budget(3)), (31, 93));
    }

    #[test]
    fn capped_vr_unwants_its_port_only() {
        let mut f = Fair::new(&[1, 1], &[vec![0], vec![0, 1]], 3);
        f.enforcing = true;
        f.vrs[0].budget = 10;
        f.vrs[1].budget = 10;
        f.charge(0, 11);
        // Over budget: its own queues go unread, but a batch that arrives on
        // a shared queue is still admitted up to one more quantum.
        assert!(f.admit(0));
        f.charge(0, 10);
        assert!(!f.admit(0));
        assert!(f.admit(1));
        // Port 0 also carries VR 1, which is under budget.
        assert!(f.port_wanted(0));
        f.charge(1, 11);
        assert!(!f.port_wanted(0) && !f.port_wanted(1));
        assert!(f.port_wanted(2), "a port with no VR is always read");
    }
}
