//! A VR's rule lists and the interfaces that apply them.
//!
//! A VR's lists are replaced as a whole ([`TableWriter::set_filters`]):
//! every list is built and every interface's names are checked before
//! anything changes, and workers see the new lists and the interfaces
//! pointing at them in one publication. A list whose rules did not change
//! keeps its counters.

use super::*;
use crate::filter::{Filter, FilterSpec};
use crate::spec::IfaceFilters;

impl TableWriter {
    /// VR `vr`'s rule lists, as last set (published or not).
    pub fn filters(&self, vr: VrId) -> Result<Vec<Arc<Filter>>, BuildError> {
        self.vr(vr.index())?;
        Ok(self.shared.vrs[vr.index()].filters.clone())
    }

    /// Replaces VR `vr`'s rule lists with `specs`; `Ok(false)` when they
    /// are the lists it has. Refused, nothing changed, when a list does
    /// not build, two share a name, or an interface names one that would
    /// be gone. Visible after [`TableWriter::commit`].
    pub fn set_filters(&mut self, vr: VrId, specs: &[FilterSpec]) -> Result<bool, BuildError> {
        self.replace_filters(vr, specs, &[])
    }

    /// [`TableWriter::set_filters`], and in the same change the lists that
    /// the interfaces named in `applied` apply (the others keep theirs):
    /// what a reload or one API call does, all or nothing.
    pub fn replace_filters(
        &mut self,
        vr: VrId,
        specs: &[FilterSpec],
        applied: &[(String, IfaceFilters)],
    ) -> Result<bool, BuildError> {
        self.replace_filters_prebuilt(vr, specs, applied, &[])
    }

    /// [`TableWriter::replace_filters`] with lists the caller built already
    /// ([`Filter::build`] for [`TableWriter::worker_count`] workers), so
    /// that building them, which takes a list of thousands of rules a
    /// noticeable time, need not hold up the writer: a list of `specs`
    /// found in `prebuilt` (same rules, enough workers) is taken from there.
    pub fn replace_filters_prebuilt(
        &mut self,
        vr: VrId,
        specs: &[FilterSpec],
        applied: &[(String, IfaceFilters)],
        prebuilt: &[Arc<Filter>],
    ) -> Result<bool, BuildError> {
        let Some((built, ifaces)) = self.prepare_filters(vr, specs, applied, prebuilt)? else {
            return Ok(false);
        };
        for (gi, (input, output)) in ifaces {
            let i = &mut self.shared.ifaces[usize::from(gi)];
            (i.filter_in, i.filter_out) = (input, output);
        }
        self.shared.vrs[vr.index()].filters = built;
        self.topology_dirty = true;
        Ok(true)
    }

    /// Whether [`TableWriter::replace_filters`] would succeed, changing nothing.
    pub fn check_filters(
        &self,
        vr: VrId,
        specs: &[FilterSpec],
        applied: &[(String, IfaceFilters)],
    ) -> Result<(), BuildError> {
        self.prepare_filters(vr, specs, applied, &[]).map(|_| ())
    }

    /// The workers the lists' counters and memos are kept for.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// The lists and every interface's resolved lists after the change;
    /// `None` when nothing would change.
    fn prepare_filters(
        &self,
        vr: VrId,
        specs: &[FilterSpec],
        applied: &[(String, IfaceFilters)],
        prebuilt: &[Arc<Filter>],
    ) -> Result<Option<Prepared>, BuildError> {
        let v = vr.index();
        self.vr(v)?;
        let mut names: Vec<(u16, IfaceFilters)> = Vec::new();
        for gi in &self.shared.vrs[v].ifaces {
            names.push((gi.get(), self.shared.ifaces[gi.index()].filter_names()));
        }
        for (iface, f) in applied {
            let gi = self.iface_index(v, iface)?;
            if let Some(slot) = names.iter_mut().find(|(g, _)| *g == gi) {
                slot.1 = f.clone();
            }
        }
        let old = &self.shared.vrs[v].filters;
        let same_lists =
            old.len() == specs.len() && old.iter().zip(specs).all(|(f, s)| f.spec() == s);
        let same_names = names
            .iter()
            .all(|(gi, n)| self.shared.ifaces[usize::from(*gi)].filter_names() == *n);
        if same_lists && same_names {
            return Ok(None);
        }
        let built = self.build_filters_from(&self.shared.vrs[v].name, specs, old, prebuilt)?;
        let mut resolved = Vec::with_capacity(names.len());
        for (gi, n) in &names {
            let name = &self.shared.ifaces[usize::from(*gi)].name;
            resolved.push((*gi, resolve(&built, name, n)?));
        }
        Ok(Some((built, resolved)))
    }

    /// Sets the lists interface `iface` of VR `vr` applies; `Ok(false)`
    /// when it applies those already. Visible after commit.
    pub fn set_interface_filters(
        &mut self,
        vr: VrId,
        iface: &str,
        names: &IfaceFilters,
    ) -> Result<bool, BuildError> {
        let gi = self.iface_index(vr.index(), iface)?;
        let (input, output) = resolve(&self.shared.vrs[vr.index()].filters, iface, names)?;
        let i = &mut self.shared.ifaces[usize::from(gi)];
        let same = |a: &Option<Arc<Filter>>, b: &Option<Arc<Filter>>| match (a, b) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same(&i.filter_in, &input) && same(&i.filter_out, &output) {
            return Ok(false);
        }
        (i.filter_in, i.filter_out) = (input, output);
        self.topology_dirty = true;
        Ok(true)
    }

    /// Builds `specs` for VR `router`, reusing each of `old` whose rules are
    /// the same (so its counters go on).
    pub(super) fn build_filters(
        &self,
        router: &str,
        specs: &[FilterSpec],
        old: &[Arc<Filter>],
    ) -> Result<Vec<Arc<Filter>>, BuildError> {
        self.build_filters_from(router, specs, old, &[])
    }

    /// [`TableWriter::build_filters`], taking lists not in `old` from
    /// `prebuilt` where it has them.
    fn build_filters_from(
        &self,
        router: &str,
        specs: &[FilterSpec],
        old: &[Arc<Filter>],
        prebuilt: &[Arc<Filter>],
    ) -> Result<Vec<Arc<Filter>>, BuildError> {
        let rules: usize = specs.iter().map(|s| s.rules.len()).sum();
        if !crate::filter::within_limits(specs.len(), rules) {
            return Err(BuildError::FilterLimit {
                router: router.to_string(),
                lists: specs.len(),
                rules,
            });
        }
        let mut built: Vec<Arc<Filter>> = Vec::with_capacity(specs.len());
        for s in specs {
            if built.iter().any(|f| f.name() == s.name) {
                return Err(BuildError::DuplicateFilter {
                    router: router.to_string(),
                    filter: s.name.clone(),
                });
            }
            let n = self.workers.len();
            let ready = |f: &&Arc<Filter>| f.spec() == s && f.workers() >= n;
            let f = match old.iter().find(|f| f.spec() == s) {
                Some(f) => f.clone(),
                None => match prebuilt.iter().find(ready) {
                    Some(f) => f.clone(),
                    None => Arc::new(Filter::build(s, n).map_err(BuildError::Filter)?),
                },
            };
            built.push(f);
        }
        Ok(built)
    }

    /// Gives every list counters for each worker attached: called once the
    /// workers exist, before they run.
    pub(crate) fn size_filters(&mut self) {
        let n = self.workers.len();
        let mut any = false;
        for vr in &mut self.shared.vrs {
            for f in &mut vr.filters {
                if f.workers() < n {
                    let g = Arc::new(f.for_workers(n));
                    for i in &mut self.shared.ifaces {
                        for slot in [&mut i.filter_in, &mut i.filter_out] {
                            if slot.as_ref().is_some_and(|x| Arc::ptr_eq(x, f)) {
                                *slot = Some(g.clone());
                            }
                        }
                    }
                    *f = g;
                    any = true;
                }
            }
        }
        if any {
            self.topology_dirty = true;
            self.commit();
        }
    }
}

/// An interface's `filter_in` and `filter_out`, built.
type Applied = (Option<Arc<Filter>>, Option<Arc<Filter>>);

/// A VR's lists, built, and each of its interfaces' (by global index).
type Prepared = (Vec<Arc<Filter>>, Vec<(u16, Applied)>);

/// The lists of `filters` that interface `iface` names in `names`.
pub(super) fn resolve(
    filters: &[Arc<Filter>],
    iface: &str,
    names: &IfaceFilters,
) -> Result<Applied, BuildError> {
    let find = |name: &Option<String>| -> Result<Option<Arc<Filter>>, BuildError> {
        let Some(name) = name else { return Ok(None) };
        filters
            .iter()
            .find(|f| f.name() == name)
            .cloned()
            .map(Some)
            .ok_or_else(|| BuildError::NoSuchFilter {
                iface: iface.to_string(),
                filter: name.clone(),
            })
    };
    Ok((find(&names.input)?, find(&names.output)?))
}
