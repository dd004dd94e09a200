//! Routes: single and batched changes, next hops, limits, listings and FIB compaction.

use super::hops::{v4, v6};
use super::*;

/// A route target checked against the VR: each gateway with the
/// interface it leaves by.
pub(super) enum Checked {
    /// A fixed next hop (blackhole, unreachable).
    Fixed(NextHopId),
    /// One gateway, with its egress interface.
    Gateway(u16, IpAddr),
    /// Several gateways with their egress interfaces and weights.
    Gateways(Vec<(u16, IpAddr, u16)>),
}

impl TableWriter {
    /// The next hop of `target` for a route that now points at `replacing`
    /// (if it exists), made if need be.
    fn target(
        &mut self,
        vr: usize,
        target: &RouteTarget,
        v4: bool,
        replacing: Option<NextHopId>,
    ) -> Result<NextHopId, BuildError> {
        let checked = self.check(vr, target, v4)?;
        // A group only this route names goes as the route moves off it.
        let freed = |w: &Self| usize::from(replacing.is_some_and(|id| w.vrs[vr].sole_group(id)));
        self.group_room(vr, &[std::slice::from_ref(&checked)], freed)?;
        Ok(self.hop_id(vr, checked))
    }

    /// The next hop of a checked target ([`TableWriter::check`]): the
    /// gateway's, or the multipath group of several.
    fn hop_id(&mut self, vr: usize, checked: Checked) -> NextHopId {
        let c = &mut self.vrs[vr];
        match checked {
            Checked::Fixed(id) => id,
            Checked::Gateway(iface, addr) => c.nexthop(RouteHop::Gateway { iface, addr }),
            Checked::Gateways(g) => {
                let members = g
                    .into_iter()
                    .map(|(iface, addr, w)| (c.nexthop(RouteHop::Gateway { iface, addr }).0, w))
                    .collect();
                c.group(members)
            }
        }
    }

    /// Refuses a new route once the VR's table for its family holds `len`
    /// of `max_routes`; replacing an existing prefix is always allowed.
    fn check_room(&self, vr: usize, len: usize, exists: bool) -> Result<(), BuildError> {
        let limit = self.shared.vrs[vr].limits.max_routes;
        if !exists && len >= limit as usize {
            return Err(BuildError::RouteLimit {
                router: self.shared.vrs[vr].name.clone(),
                limit,
            });
        }
        Ok(())
    }

    /// Adds or replaces a route of either family in VR `vr`; workers see it
    /// after [`TableWriter::commit`]. Refused, changing nothing, when the
    /// target is not usable in the VR or the VR is at its route limit.
    pub fn add_route(
        &mut self,
        vr: VrId,
        prefix: impl Into<IpPrefix>,
        target: RouteTarget,
    ) -> Result<(), BuildError> {
        let vr = vr.index();
        use vrhost_fib::Lpm;
        let prefix = prefix.into();
        self.vr(vr)?;
        let c = &self.vrs[vr];
        let (len, replacing) = match &prefix {
            IpPrefix::V4(p) => (c.fib4.table().len(), c.fib4.table().get(p)),
            IpPrefix::V6(p) => (c.fib6.table().len(), c.fib6.table().get(p)),
        };
        self.check_room(vr, len, replacing.is_some())?;
        let nh = self.target(vr, &target, prefix.is_ipv4(), replacing)?;
        let c = &mut self.vrs[vr];
        match prefix {
            IpPrefix::V4(p) => c.insert(v4, p, nh),
            IpPrefix::V6(p) => c.insert(v6, p, nh),
        }
        Ok(())
    }

    /// Adds or replaces many routes at once; workers see them after
    /// [`TableWriter::commit`]. Every target is checked, and the route limit
    /// for the whole batch, before anything changes. A batch large against
    /// the table rebuilds it with one bulk load (several million routes a
    /// second) instead of inserting route by route.
    pub fn add_routes(
        &mut self,
        vr: VrId,
        routes4: &[(Prefix4, RouteTarget)],
        routes6: &[(Prefix6, RouteTarget)],
    ) -> Result<(), BuildError> {
        let vr = vr.index();
        use vrhost_fib::Lpm;
        self.vr(vr)?;
        // Every gateway's interface, or the first refusal, before anything changes.
        let ifaces4 = routes4
            .iter()
            .map(|(_, t)| self.check(vr, t, true))
            .collect::<Result<Vec<_>, _>>()?;
        let ifaces6 = routes6
            .iter()
            .map(|(_, t)| self.check(vr, t, false))
            .collect::<Result<Vec<_>, _>>()?;
        // At the limit, groups that only the batch's routes name, and that
        // it moves them off, make room (a BGP path change for many prefixes
        // at once), as one route at a time would.
        let freed = |w: &Self| {
            let prefixes = (routes4.iter().map(|r| r.0), routes6.iter().map(|r| r.0));
            w.groups_freed(vr, prefixes, &[&ifaces4, &ifaces6])
        };
        self.group_room(vr, &[&ifaces4, &ifaces6], freed)?;
        let limit = self.shared.vrs[vr].limits.max_routes as usize;
        let c = &self.vrs[vr];
        let new4 = new_prefixes(&c.fib4, routes4);
        let new6 = new_prefixes(&c.fib6, routes6);
        if c.fib4.table().len() + new4 > limit || c.fib6.table().len() + new6 > limit {
            return Err(BuildError::RouteLimit {
                router: self.shared.vrs[vr].name.clone(),
                limit: limit as u32,
            });
        }
        let ids4: Vec<_> = routes4
            .iter()
            .zip(ifaces4)
            .map(|(&(p, _), i)| (p, self.hop_id(vr, i)))
            .collect();
        let ids6: Vec<_> = routes6
            .iter()
            .zip(ifaces6)
            .map(|(&(p, _), i)| (p, self.hop_id(vr, i)))
            .collect();
        let c = &mut self.vrs[vr];
        c.insert_many(v4, ids4);
        c.insert_many(v6, ids6);
        Ok(())
    }

    /// Whether removing `remove4`/`remove6` and then adding `add4`/`add6`
    /// would be accepted (every gateway on a subnet of the VR, the route
    /// limit kept), without changing anything.
    pub fn check_routes(
        &self,
        vr: VrId,
        remove: (&[Prefix4], &[Prefix6]),
        add4: &[(Prefix4, RouteTarget)],
        add6: &[(Prefix6, RouteTarget)],
    ) -> Result<(), BuildError> {
        use vrhost_fib::Lpm;
        let vr = vr.index();
        self.vr(vr)?;
        let mut checked = Vec::new();
        for (_, t) in add4 {
            checked.push(self.check(vr, t, true)?);
        }
        for (_, t) in add6 {
            checked.push(self.check(vr, t, false)?);
        }
        let freed = |w: &Self| {
            let prefixes = (
                remove.0.iter().copied().chain(add4.iter().map(|r| r.0)),
                remove.1.iter().copied().chain(add6.iter().map(|r| r.0)),
            );
            w.groups_freed(vr, prefixes, &[&checked])
        };
        self.groups_fit_freeing(vr, &[&checked], self.vrs[vr].groups(), freed)?;
        let limit = self.shared.vrs[vr].limits.max_routes as usize;
        let c = &self.vrs[vr];
        let gone4 = remove
            .0
            .iter()
            .filter(|p| c.fib4.table().get(p).is_some())
            .count();
        let gone6 = remove
            .1
            .iter()
            .filter(|p| c.fib6.table().get(p).is_some())
            .count();
        let after4 = c.fib4.table().len() - gone4 + new_prefixes(&c.fib4, add4);
        let after6 = c.fib6.table().len() - gone6 + new_prefixes(&c.fib6, add6);
        if after4 > limit || after6 > limit {
            return Err(BuildError::RouteLimit {
                router: self.shared.vrs[vr].name.clone(),
                limit: limit as u32,
            });
        }
        Ok(())
    }

    /// Removes many routes at once (missing ones are ignored); returns how
    /// many existed. Visible after [`TableWriter::commit`].
    pub fn remove_routes(&mut self, vr: VrId, routes4: &[Prefix4], routes6: &[Prefix6]) -> usize {
        let vr = vr.index();
        let Some(c) = self.vrs.get_mut(vr) else {
            return 0;
        };
        c.remove_many(v4, routes4) + c.remove_many(v6, routes6)
    }

    /// Removes a route of either family; true if it existed. Visible after
    /// [`TableWriter::commit`].
    pub fn remove_route(&mut self, vr: VrId, prefix: impl Into<IpPrefix>) -> bool {
        let vr = vr.index();
        let Some(c) = self.vrs.get_mut(vr) else {
            return false;
        };
        match prefix.into() {
            IpPrefix::V4(p) => c.remove(v4, &p),
            IpPrefix::V6(p) => c.remove(v6, &p),
        }
    }

    /// Compacts the FIBs of VRs whose routes have not changed since the
    /// previous call: rebuilds the /8 groups that incremental updates left
    /// sparse (see `vrhost_fib::PoptrieLpm::compact`), up to about
    /// `route_budget` routes' worth in all, VR after VR from where the last
    /// call stopped, and publishes them. Returns how many routes' groups it
    /// rebuilt.
    ///
    /// Called on a timer (`vrhost run` every 100 ms), so a table fed route
    /// by route (a BGP full feed through FRR) sheds its garbage within
    /// seconds of the feed going quiet, and a VR in the middle of an update
    /// burst is left alone. A VR found compact is not looked at again until
    /// its routes change, so idle VRs cost nothing per call.
    pub fn compact_quiet_fibs(&mut self, route_budget: usize) -> usize {
        let n = self.vrs.len();
        let mut spent = 0;
        let mut compacted = Vec::new();
        for k in 0..n {
            if spent >= route_budget {
                break;
            }
            let vr = (self.compact_next + k) % n;
            let c = &mut self.vrs[vr];
            if c.epoch() != c.quiet_epoch || c.fib_dirty {
                c.quiet_epoch = c.epoch();
                continue;
            }
            if c.compact_epoch == Some(c.epoch()) {
                continue;
            }
            let left = route_budget - spent;
            let done4 = c.fib4.compact(left);
            let done6 = if done4 < left {
                c.fib6.compact(left - done4)
            } else {
                0
            };
            if done4 + done6 == 0 {
                c.compact_epoch = Some(c.epoch());
            } else {
                c.fib_dirty = true;
                compacted.push(vr);
                spent += done4 + done6;
            }
            // A VR that used up the budget may have more to do: start there.
            self.compact_next = if spent >= route_budget {
                vr
            } else {
                (vr + 1) % n
            };
        }
        if !compacted.is_empty() {
            self.commit();
            // The compaction's own publication is not an update.
            for vr in compacted {
                let c = &mut self.vrs[vr];
                c.quiet_epoch = c.epoch();
            }
        }
        spent
    }

    /// Routes in VR `vr`'s tables (control view, unpublished changes included).
    pub fn routes(&self, vr: VrId) -> (usize, usize) {
        let vr = vr.index();
        use vrhost_fib::Lpm;
        self.vrs
            .get(vr)
            .map_or((0, 0), |c| (c.fib4.table().len(), c.fib6.table().len()))
    }

    /// Next-hop ids VR `vr`'s table has room for: those its routes and
    /// groups name, those let go and not yet reusable, and free ones.
    pub fn nexthop_ids(&self, vr: VrId) -> usize {
        self.vrs
            .get(vr.index())
            .map_or(0, |c| c.nexthops.hops.len())
    }

    /// FIB memory of VR `vr`, both families, in bytes.
    pub fn fib_memory(&self, vr: VrId) -> usize {
        let vr = vr.index();
        use vrhost_fib::Lpm;
        self.vrs.get(vr).map_or(0, |c| {
            c.fib4.table().memory_bytes() + c.fib6.table().memory_bytes()
        })
    }

    /// Every route of VR `vr` with what it points at, IPv4 then IPv6, in
    /// prefix order within each family.
    pub fn route_list(&self, vr: VrId) -> Vec<(IpAddr, u8, RouteHop)> {
        self.route_page(vr, 0, usize::MAX).1
    }

    /// VR `vr`'s routes count, and `limit` of them from the `offset`th on
    /// in [`TableWriter::route_list`]'s order: a walk of the ordered tables
    /// to the page, no copy or sort of the rest (a tenant paging through a
    /// full table holds the writer for a page, not for the table).
    pub fn route_page(
        &self,
        vr: VrId,
        offset: usize,
        limit: usize,
    ) -> (usize, Vec<(IpAddr, u8, RouteHop)>) {
        use vrhost_fib::Lpm;
        let Some(c) = self.vrs.get(vr.index()) else {
            return (0, Vec::new());
        };
        let hop = |id: NextHopId| {
            c.nexthops
                .get(id.0 as usize)
                .copied()
                .unwrap_or(RouteHop::Blackhole)
        };
        let (t4, t6) = (c.fib4.table(), c.fib6.table());
        let v4 = t4
            .iter()
            .map(|(p, id)| (IpAddr::V4(p.addr()), p.len(), hop(id)));
        let v6 = t6
            .iter()
            .map(|(p, id)| (IpAddr::V6(p.addr()), p.len(), hop(id)));
        // Skipping into the IPv6 table does not walk the IPv4 one.
        let page = if offset >= t4.len() {
            v6.skip(offset - t4.len()).take(limit).collect()
        } else {
            v4.chain(v6).skip(offset).take(limit).collect()
        };
        (t4.len() + t6.len(), page)
    }

    /// The gateways `hop` (one of VR `vr`'s next hops, as [`TableWriter::route`]
    /// and [`TableWriter::route_list`] give them) sends packets to, with their
    /// weights: one for a gateway, several for a multipath group, none for
    /// the others.
    pub fn hop_paths(&self, vr: VrId, hop: &RouteHop) -> Vec<(u16, crate::spec::Path)> {
        let Some(c) = self.vrs.get(vr.index()) else {
            return Vec::new();
        };
        let gateway = |id: u32, weight| match c.nexthops.get(id as usize) {
            Some(&RouteHop::Gateway { iface, addr }) => {
                Some((iface, crate::spec::Path { via: addr, weight }))
            }
            _ => None,
        };
        match hop {
            &RouteHop::Gateway { iface, addr } => vec![(
                iface,
                crate::spec::Path {
                    via: addr,
                    weight: 1,
                },
            )],
            RouteHop::Group { base, .. } => c
                .group_paths
                .get(base)
                .map(|m| m.iter().filter_map(|&(id, w)| gateway(id, w)).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// What the route for exactly `addr/len` in VR `vr` points at, if any.
    pub fn route(&self, vr: VrId, addr: IpAddr, len: u8) -> Option<RouteHop> {
        let vr = vr.index();
        use vrhost_fib::Lpm;
        let c = self.vrs.get(vr)?;
        let id = match addr {
            IpAddr::V4(a) => c.fib4.table().get(&Prefix::new(a, len).ok()?)?,
            IpAddr::V6(a) => c.fib6.table().get(&Prefix::new(a, len).ok()?)?,
        };
        c.nexthops.get(id.0 as usize).copied()
    }

    /// The longest prefix of VR `vr`'s table that holds `addr`, with what
    /// it points at: the route a lookup of `addr` matches now (connected
    /// and local routes included).
    pub fn longest_match(&self, vr: VrId, addr: IpAddr) -> Option<(IpPrefix, RouteHop)> {
        use vrhost_fib::Lpm;
        let c = self.vrs.get(vr.index())?;
        let (id, prefix) = match addr {
            IpAddr::V4(a) => (0..=32u8).rev().find_map(|len| {
                let p = Prefix::new_truncating(a, len).ok()?;
                Some((c.fib4.table().get(&p)?, IpPrefix::V4(p)))
            })?,
            IpAddr::V6(a) => (0..=128u8).rev().find_map(|len| {
                let p = Prefix::new_truncating(a, len).ok()?;
                Some((c.fib6.table().get(&p)?, IpPrefix::V6(p)))
            })?,
        };
        Some((prefix, c.nexthops.get(id.0 as usize).copied()?))
    }

    /// Whether VR `vr` would accept a route to `target` for a prefix of the
    /// family `v4` (every gateway on one of its subnets, of the same
    /// family), without changing anything.
    pub fn check_target(&self, vr: VrId, target: &RouteTarget, v4: bool) -> Result<(), BuildError> {
        let vr = vr.index();
        self.check(vr, target, v4).map(|_| ())
    }

    /// The egress interface of each gateway of `target`, or why the VR
    /// refuses it.
    /// Refuses targets that need more multipath groups than VR `vr` may
    /// have: groups no route names any more are let go first, and those
    /// the change itself lets go (`freed`: a route moving off the only
    /// group that names it) do not count.
    fn group_room(
        &mut self,
        vr: usize,
        checked: &[&[Checked]],
        freed: impl FnOnce(&Self) -> usize,
    ) -> Result<(), BuildError> {
        if !checked
            .iter()
            .flat_map(|k| k.iter())
            .any(|c| matches!(c, Checked::Gateways(_)))
        {
            return Ok(());
        }
        let c = &mut self.vrs[vr];
        c.settle();
        let held = c.groups();
        self.groups_fit_freeing(vr, checked, held, freed)
    }

    /// [`TableWriter::groups_fit`] with `held` groups taken, or, where they
    /// do not fit, without the groups the change lets go (`freed`, asked
    /// only then: at the limit).
    fn groups_fit_freeing(
        &self,
        vr: usize,
        checked: &[&[Checked]],
        held: usize,
        freed: impl FnOnce(&Self) -> usize,
    ) -> Result<(), BuildError> {
        let Err(e) = self.groups_fit(vr, checked, held) else {
            return Ok(());
        };
        match freed(self) {
            0 => Err(e),
            n => self.groups_fit(vr, checked, held.saturating_sub(n)),
        }
    }

    /// How many of VR `vr`'s multipath groups a change of the routes for
    /// `prefixes` (IPv4, IPv6; removed or given the targets `checked`)
    /// lets go: those whose every route is among them and that none of
    /// `checked` names.
    fn groups_freed(
        &self,
        vr: usize,
        prefixes: (impl Iterator<Item = Prefix4>, impl Iterator<Item = Prefix6>),
        checked: &[&[Checked]],
    ) -> usize {
        use std::collections::HashSet;
        use vrhost_fib::Lpm;
        let c = &self.vrs[vr];
        // Each prefix once, however often the change names it.
        let p4: HashSet<Prefix4> = prefixes.0.collect();
        let p6: HashSet<Prefix6> = prefixes.1.collect();
        let mut named: HashMap<NextHopId, u32> = HashMap::new();
        let ids = p4.iter().filter_map(|p| c.fib4.table().get(p));
        for id in ids.chain(p6.iter().filter_map(|p| c.fib6.table().get(p))) {
            if c.group_refs(id).is_some() {
                *named.entry(id).or_default() += 1;
            }
        }
        for k in checked.iter().flat_map(|k| k.iter()) {
            if let Checked::Gateways(g) = k {
                if let Some(id) = c.group_of(g) {
                    named.remove(&id);
                }
            }
        }
        named
            .iter()
            .filter(|&(&id, &n)| c.group_refs(id) == Some(n))
            .count()
    }

    /// Whether the groups `checked` needs beyond those VR `vr` has fit in
    /// its limit, `held` of them taken.
    fn groups_fit(&self, vr: usize, checked: &[&[Checked]], held: usize) -> Result<(), BuildError> {
        let c = &self.vrs[vr];
        let mut new: Vec<Vec<(u16, IpAddr, u16)>> = checked
            .iter()
            .flat_map(|k| k.iter())
            .filter_map(|k| match k {
                Checked::Gateways(g) if !c.has_group(g) => {
                    let mut g = g.clone();
                    g.sort_unstable();
                    Some(g)
                }
                _ => None,
            })
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        new.sort_unstable();
        new.dedup();
        let limit = self.shared.vrs[vr].limits.max_nexthop_groups;
        if held + new.len() > limit as usize {
            return Err(BuildError::GroupLimit {
                router: self.shared.vrs[vr].name.clone(),
                limit,
            });
        }
        Ok(())
    }

    pub(super) fn check(
        &self,
        vr: usize,
        target: &RouteTarget,
        v4: bool,
    ) -> Result<Checked, BuildError> {
        self.vr(vr)?;
        let router = || self.shared.vrs[vr].name.clone();
        let egress = |via: IpAddr| {
            if via.is_ipv4() != v4 {
                return Err(BuildError::FamilyMismatch {
                    router: router(),
                    via,
                });
            }
            self.on_link_iface(vr, via)
                .ok_or_else(|| BuildError::GatewayOffLink {
                    router: router(),
                    via,
                })
        };
        match target {
            RouteTarget::Blackhole => Ok(Checked::Fixed(NH_BLACKHOLE)),
            RouteTarget::Unreachable => Ok(Checked::Fixed(NH_UNREACHABLE)),
            // The common route: no allocation.
            &RouteTarget::Via(via) => Ok(Checked::Gateway(egress(via)?, via)),
            RouteTarget::Multipath(paths) => paths
                .as_slice()
                .iter()
                .map(|p| Ok((egress(p.via)?, p.via, p.weight)))
                .collect::<Result<_, _>>()
                .map(Checked::Gateways),
        }
    }
}

/// How many distinct prefixes of `routes` `fib` does not hold yet: a prefix
/// given twice (the later one wins) is one new route.
fn new_prefixes<A: vrhost_fib::FibAddr, T>(fib: &FibHandle<A>, routes: &[(Prefix<A>, T)]) -> usize {
    use vrhost_fib::Lpm;
    let mut new: Vec<Prefix<A>> = routes
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| fib.table().get(p).is_none())
        .collect();
    new.sort_unstable();
    new.dedup();
    new.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages cut the ordered listing anywhere, across the families too,
    /// and together give it whole.
    #[test]
    fn route_pages_cut_the_ordered_listing() {
        let spec = crate::spec::one_vr(
            vec![(Ipv4Addr::new(10, 1, 0, 1), 16)],
            vec![("2001:db8:1::1".parse().unwrap(), 64)],
            Limits::default(),
        );
        let mut w = TableWriter::new(&spec).unwrap();
        let vr = VrId::new(0);
        for i in (0..40u8).rev() {
            let p = Prefix4::new(Ipv4Addr::new(100, i, 0, 0), 16).unwrap();
            w.add_route(vr, p, RouteTarget::Blackhole).unwrap();
            let p6 = Prefix6::new(
                Ipv6Addr::new(0x2001, 0xdb8, 2, u16::from(i), 0, 0, 0, 0),
                64,
            );
            w.add_route(vr, p6.unwrap(), RouteTarget::Unreachable)
                .unwrap();
        }
        let all = w.route_list(vr);
        let mut sorted = all.clone();
        sorted.sort_by_key(|r| (r.0.is_ipv6(), r.0, r.1));
        assert_eq!(all, sorted);
        let (total, _) = w.route_page(vr, 0, 0);
        assert_eq!(total, all.len());
        for size in [1, 7, 40, 1000] {
            let mut joined = Vec::new();
            for offset in (0..total + size).step_by(size) {
                let (t, page) = w.route_page(vr, offset, size);
                assert_eq!(t, total);
                assert_eq!(page[..], all[offset.min(total)..(offset + size).min(total)]);
                joined.extend(page);
            }
            assert_eq!(joined, all);
        }
    }
}
