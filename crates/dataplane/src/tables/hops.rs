//! A VR's next hops on the control side: made on first use, counted by the
//! routes and groups that name them, and let go when nothing does.
//!
//! ```text
//!   route inserted ── hold(id) ──▶ refs[id] += 1
//!   route replaced/removed ── release(old) ──▶ refs[old] -= 1; at 0: `zero`
//!   settle() (commit, or before a group count): still 0 ─▶ out of its index
//!        (`nh_index`, or `group_index` for a group) ─▶ `dying` with the FIB version
//!   reap() once a later FIB is published and no worker holds an older one
//!        ─▶ `free` (the id is reused); a group's members released, its buckets dropped
//! ```
//!
//! A worker may still hold a FIB published before a route went away, so an
//! id is reused only after the next publication and once no worker holds a
//! FIB version from before it went ([`vrhost_fib::FibHandle::oldest_held`]):
//! until then it keeps what it meant, a group its members. Bucket tables move (and their groups' `base`
//! with them) only inside a new [`NextHops`], which workers read together
//! with the FIB they load with it, so a group id always finds its own table.

use super::*;

/// Next-hop ids below this are the fixed ones (`NH_LOCAL` ..
/// `NH_UNREACHABLE`): never counted, never let go.
const FIXED: u32 = 4;

/// Which FIB of a VR a change goes to: [`v4`] or [`v6`].
pub(super) type Pick<A> = fn(&mut VrControl) -> &mut FibHandle<A>;

/// The VR's IPv4 FIB.
pub(super) fn v4(c: &mut VrControl) -> &mut FibHandle<Ipv4Addr> {
    &mut c.fib4
}

/// The VR's IPv6 FIB.
pub(super) fn v6(c: &mut VrControl) -> &mut FibHandle<Ipv6Addr> {
    &mut c.fib6
}

impl VrControl {
    /// A VR with nothing but the fixed next hops, whose ids are the `NH_*`
    /// constants.
    pub(super) fn new() -> VrControl {
        let mut c = VrControl {
            fib4: FibHandle::new(),
            fib6: FibHandle::new(),
            nexthops: NextHops::default(),
            nh_index: HashMap::new(),
            group_index: HashMap::new(),
            group_paths: HashMap::new(),
            refs: Vec::new(),
            zero: Vec::new(),
            dying: Vec::new(),
            free: Vec::new(),
            nh_dirty: true,
            fib_dirty: true,
            quiet_epoch: 0,
            compact_epoch: None,
        };
        for nh in [
            RouteHop::Local,
            RouteHop::Broadcast,
            RouteHop::Blackhole,
            RouteHop::Unreachable,
        ] {
            c.nexthop(nh);
        }
        c
    }

    /// The FIBs' version: how many times they were published (both
    /// families always together, at [`TableWriter::commit`]).
    pub(super) fn epoch(&self) -> u64 {
        self.fib4.version()
    }

    /// The id of next hop `nh` (not a group: [`VrControl::group`]), made on
    /// first use (a free id if there is one). It counts no reference until
    /// a route or group holds it.
    pub(super) fn nexthop(&mut self, nh: RouteHop) -> NextHopId {
        if let Some(&i) = self.nh_index.get(&nh) {
            return NextHopId(i);
        }
        if self.free.is_empty() {
            self.reap();
        }
        let id = self.alloc(nh);
        self.nh_index.insert(nh, id.0);
        id
    }

    /// A new id for `nh`, a free one if there is one; let go at the next
    /// settle unless something holds it by then. Never moves a bucket table
    /// (so a group's `base` is still good).
    fn alloc(&mut self, nh: RouteHop) -> NextHopId {
        let i = match self.free.pop() {
            Some(i) => {
                self.nexthops.hops[i as usize] = nh;
                i
            }
            None => {
                self.nexthops.hops.push(nh);
                self.refs.push(0);
                (self.nexthops.hops.len() - 1) as u32
            }
        };
        self.zero.push(i);
        self.nh_dirty = true;
        NextHopId(i)
    }

    /// The multipath group over `members` (gateway next-hop ids with their
    /// weights, each id once), made on first use. Its bucket table is by
    /// rendezvous hashing ([`crate::ecmp::buckets`]): a gateway's buckets
    /// depend only on the gateways, so the group without one of them keeps
    /// every other gateway's buckets, and flows through those stay put.
    pub(super) fn group(&mut self, mut members: Vec<(u32, u16)>) -> NextHopId {
        members.sort_unstable();
        if let Some(&i) = self.group_index.get(&members) {
            return NextHopId(i);
        }
        // Reaping may move bucket tables: before this one's base is taken.
        if self.free.is_empty() {
            self.reap();
        }
        let keyed: Vec<(u32, u64, u16)> = members
            .iter()
            .map(|&(id, w)| {
                let key = match self.nexthops.hops.get(id as usize) {
                    Some(RouteHop::Gateway { addr, .. }) => crate::ecmp::addr_key(*addr),
                    _ => u64::from(id),
                };
                (id, key, w)
            })
            .collect();
        let base = self.nexthops.buckets.len() as u32;
        self.nexthops
            .buckets
            .extend(crate::ecmp::buckets(&keyed, GROUP_BUCKETS));
        self.nexthops
            .buckets
            .extend(members.iter().map(|&(id, _)| id));
        let id = self.alloc(RouteHop::Group {
            base,
            members: members.len() as u16,
        });
        for &(m, _) in &members {
            self.hold(m);
        }
        self.group_index.insert(members.clone(), id.0);
        self.group_paths.insert(base, members);
        id
    }

    /// Multipath groups the VR has (those no route names any more are
    /// gone once [`VrControl::settle`] ran).
    pub(super) fn groups(&self) -> usize {
        self.group_index.len()
    }

    /// Whether `id` is a multipath group that one route alone names.
    pub(super) fn sole_group(&self, id: NextHopId) -> bool {
        self.group_refs(id) == Some(1)
    }

    /// How many routes name `id`, if it is a multipath group.
    pub(super) fn group_refs(&self, id: NextHopId) -> Option<u32> {
        match self.nexthops.hops.get(id.0 as usize) {
            Some(RouteHop::Group { .. }) => self.refs.get(id.0 as usize).copied(),
            _ => None,
        }
    }

    /// Whether the group over these gateways (egress interface, address,
    /// weight) exists already.
    pub(super) fn has_group(&self, paths: &[(u16, IpAddr, u16)]) -> bool {
        self.group_of(paths).is_some()
    }

    /// The group over these gateways, if it exists.
    pub(super) fn group_of(&self, paths: &[(u16, IpAddr, u16)]) -> Option<NextHopId> {
        let mut members = paths
            .iter()
            .map(|&(iface, addr, w)| {
                let id = self.nh_index.get(&RouteHop::Gateway { iface, addr })?;
                Some((*id, w))
            })
            .collect::<Option<Vec<(u32, u16)>>>()?;
        members.sort_unstable();
        self.group_index.get(&members).map(|&id| NextHopId(id))
    }

    /// One more route or group names `id`.
    fn hold(&mut self, id: u32) {
        if id >= FIXED {
            if let Some(r) = self.refs.get_mut(id as usize) {
                *r += 1;
            }
        }
    }

    /// One route or group fewer names `id`; at none it is let go at the
    /// next [`VrControl::settle`].
    fn release(&mut self, id: u32) {
        if id < FIXED {
            return;
        }
        if let Some(r) = self.refs.get_mut(id as usize) {
            debug_assert!(*r > 0, "next hop {id} released more often than held");
            *r = r.saturating_sub(1);
            if *r == 0 {
                self.zero.push(id);
            }
        }
    }

    /// Lets go of every next hop whose count fell to zero and stayed there:
    /// out of its index (a new route naming the same gateway or gateways
    /// makes a new one), the id kept from reuse until no worker can hold a
    /// FIB that names it ([`VrControl::reap`]); a group's members stay held
    /// until then, as a worker may still pick them through it. Call it
    /// between changes, never between making a route's next hop and
    /// inserting the route.
    pub(super) fn settle(&mut self) {
        while let Some(id) = self.zero.pop() {
            if id < FIXED || self.refs.get(id as usize) != Some(&0) {
                continue;
            }
            let Some(&hop) = self.nexthops.hops.get(id as usize) else {
                continue;
            };
            // Out of its index, unless it was let go already.
            let indexed = match hop {
                RouteHop::Group { base, .. } => match self.group_paths.get(&base) {
                    Some(m) if self.group_index.get(m) == Some(&id) => {
                        self.group_index.remove(m).is_some()
                    }
                    _ => false,
                },
                _ if self.nh_index.get(&hop) == Some(&id) => self.nh_index.remove(&hop).is_some(),
                _ => false,
            };
            if indexed {
                self.dying.push((id, self.epoch()));
            }
        }
    }

    /// Makes the ids let go before the last publication reusable once no
    /// worker holds a FIB that could name them (one published before they
    /// were let go), and drops their groups' bucket tables, moving the
    /// other groups' tables together.
    pub(super) fn reap(&mut self) {
        // Also frees the snapshots no worker holds any more.
        let oldest = [self.fib4.oldest_held(), self.fib6.oldest_held()]
            .into_iter()
            .flatten()
            .min();
        if self.dying.is_empty() {
            return;
        }
        // A FIB of version `at` or older may name an id let go at `at`.
        let epoch = self.epoch();
        let gone = |at: u64| at < epoch && oldest.is_none_or(|o| o > at);
        let (mut freed, mut freed_group) = (false, false);
        let mut i = 0;
        while i < self.dying.len() {
            let (id, at) = self.dying[i];
            if !gone(at) {
                i += 1;
                continue;
            }
            self.dying.swap_remove(i);
            let hop = self.nexthops.hops[id as usize];
            if let RouteHop::Group { base, .. } = hop {
                for (m, _) in self.group_paths.remove(&base).unwrap_or_default() {
                    self.release(m);
                }
                freed_group = true;
            }
            self.nexthops.hops[id as usize] = RouteHop::Blackhole;
            self.free.push(id);
            freed = true;
        }
        if freed_group {
            self.pack_buckets();
        }
        self.nh_dirty |= freed;
    }

    /// Rebuilds the bucket store with only the groups that still have an
    /// id, each group's `base` (and its `group_paths` key) moved with it.
    fn pack_buckets(&mut self) {
        let old = std::mem::take(&mut self.nexthops.buckets);
        let mut paths = HashMap::with_capacity(self.group_paths.len());
        for hop in self.nexthops.hops.iter_mut() {
            let RouteHop::Group { base, members } = *hop else {
                continue;
            };
            let len = GROUP_BUCKETS + usize::from(members);
            let from = base as usize;
            let (Some(table), Some(p)) =
                (old.get(from..from + len), self.group_paths.remove(&base))
            else {
                continue;
            };
            let new = self.nexthops.buckets.len() as u32;
            self.nexthops.buckets.extend_from_slice(table);
            paths.insert(new, p);
            *hop = RouteHop::Group { base: new, members };
        }
        self.group_paths = paths;
    }

    /// Adds or replaces route `p` in the FIB `fib` picks.
    pub(super) fn insert<A: vrhost_fib::FibAddr>(
        &mut self,
        fib: Pick<A>,
        p: Prefix<A>,
        nh: NextHopId,
    ) {
        self.hold(nh.0);
        if let Some(old) = fib(self).insert(p, nh) {
            self.release(old.0);
        }
        self.fib_dirty = true;
    }

    /// Removes route `p` from the FIB `fib` picks; true if it was there.
    pub(super) fn remove<A: vrhost_fib::FibAddr>(&mut self, fib: Pick<A>, p: &Prefix<A>) -> bool {
        self.fib_dirty = true;
        match fib(self).remove(p) {
            Some(old) => {
                self.release(old.0);
                true
            }
            None => false,
        }
    }

    /// Inserts `routes`, rebuilding the table in one bulk load when they
    /// are many against its size (later routes win over earlier and
    /// existing ones).
    pub(super) fn insert_many<A: vrhost_fib::FibAddr>(
        &mut self,
        fib: Pick<A>,
        routes: Vec<(Prefix<A>, NextHopId)>,
    ) {
        use vrhost_fib::Lpm;
        self.fib_dirty = true;
        let len = fib(self).table().len();
        if !rebuild_pays(routes.len(), len) {
            for (p, nh) in routes {
                self.insert(fib, p, nh);
            }
            return;
        }
        // What each route replaces: an earlier one of the batch, or the table's.
        let mut batch: HashMap<Prefix<A>, NextHopId> = HashMap::with_capacity(routes.len());
        for &(p, nh) in &routes {
            self.hold(nh.0);
            let old = batch.insert(p, nh).or_else(|| fib(self).table().get(&p));
            if let Some(old) = old {
                self.release(old.0);
            }
        }
        let f = fib(self);
        let mut all = Vec::with_capacity(len + routes.len());
        f.table().for_each(&mut |p, nh| all.push((p, nh)));
        all.extend(routes);
        f.replace_all(all);
    }

    /// Removes `prefixes`, rebuilding the table in one bulk load when they
    /// are many against its size. Returns how many existed.
    pub(super) fn remove_many<A: vrhost_fib::FibAddr>(
        &mut self,
        fib: Pick<A>,
        prefixes: &[Prefix<A>],
    ) -> usize {
        use vrhost_fib::Lpm;
        self.fib_dirty = true;
        let len = fib(self).table().len();
        if !rebuild_pays(prefixes.len(), len) {
            return prefixes.iter().filter(|p| self.remove(fib, p)).count();
        }
        let gone: std::collections::HashSet<Prefix<A>> = prefixes.iter().copied().collect();
        let mut keep = Vec::with_capacity(len);
        let mut dropped = Vec::new();
        fib(self).table().for_each(&mut |p, nh| {
            if gone.contains(&p) {
                dropped.push(nh);
            } else {
                keep.push((p, nh));
            }
        });
        fib(self).replace_all(keep);
        for nh in &dropped {
            self.release(nh.0);
        }
        dropped.len()
    }

    /// Empties both FIBs and lets every next hop go (a deleted VR).
    pub(super) fn clear(&mut self) {
        let (mut fib4, mut fib6) = (
            std::mem::take(&mut self.fib4),
            std::mem::take(&mut self.fib6),
        );
        fib4.replace_all(std::iter::empty());
        fib6.replace_all(std::iter::empty());
        // The same handles (the workers read through them), compaction's
        // record of them, and the fixed next hops only.
        *self = VrControl {
            fib4,
            fib6,
            quiet_epoch: self.quiet_epoch,
            compact_epoch: self.compact_epoch,
            ..VrControl::new()
        };
    }

    /// Every id's count as the FIBs and groups give it, to check the kept
    /// counts against (tests).
    #[cfg(test)]
    pub(super) fn counted_refs(&self) -> Vec<u32> {
        use vrhost_fib::Lpm;
        let mut refs = vec![0u32; self.refs.len()];
        let mut count = |id: u32| {
            if id >= FIXED {
                refs[id as usize] += 1;
            }
        };
        self.fib4.table().for_each(&mut |_, nh| count(nh.0));
        self.fib6.table().for_each(&mut |_, nh| count(nh.0));
        // A group holds its members until it is reaped, let go or not.
        for hop in &self.nexthops.hops {
            if let RouteHop::Group { base, .. } = hop {
                for &(m, _) in self.group_paths.get(base).into_iter().flatten() {
                    count(m);
                }
            }
        }
        refs
    }
}

/// Whether changing `batch` routes of a table of `len` is cheaper as one
/// bulk load of the whole table than route by route: a bulk load costs
/// ~0.1 µs per route in the table, an insert or remove ~3 µs, so rebuild
/// when the table is under ~24 times the batch (and the batch is not tiny).
fn rebuild_pays(batch: usize, len: usize) -> bool {
    batch >= 4096 && batch * 24 >= len
}

#[cfg(test)]
mod tests;
