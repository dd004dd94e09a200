//! Reloading the config file into a running router: [`plan`] decides what
//! may change and computes the table operations that take the running
//! tables from the old config to the new one; [`apply`] performs them on
//! the table writer, and the caller commits once.
//!
//! * VRs that appeared are created, VRs that went are deleted.
//! * A VR whose routes alone changed gets the route difference: routes that
//!   went are removed, routes that appeared or changed target are added (one
//!   batch per family). Unchanged routes are not touched, and the difference
//!   is linear in the routes (hash maps, never a scan per route).
//! * A VR whose rule lists, or the lists its interfaces apply, changed
//!   (with its routes or alone) gets them replaced as a whole, in the same
//!   commit; a list whose rules did not change keeps its counters.
//! * Any other changed VR is rebuilt.
//! * Ports, worker placement, the API and control-plane bindings need a
//!   restart: the plan is refused, naming the key.
//!
//! [`plan`] builds the new tables in full on a throwaway
//! [`TableWriter`] first, so a config the data plane would refuse changes
//! nothing.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use vrhost_api::types::ReloadReport;
use vrhost_config::Config;
use vrhost_dataplane::{BuildError, EngineSpec, RouteTarget, RouterSpec, TableWriter, VrId};
use vrhost_fib::{Prefix4, Prefix6};

/// Why a reload cannot be applied: the config key and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The config key, e.g. `router[1].control`.
    pub key: String,
    /// What is wrong with changing it.
    pub reason: String,
}

impl Refusal {
    fn new(key: impl Into<String>, reason: impl Into<String>) -> Refusal {
        Refusal {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// One VR's part of a reload.
#[derive(Clone, Debug, PartialEq)]
pub enum VrChange {
    /// Delete the VR of this name.
    Remove(String),
    /// Create the VR of `spec.routers[k]`.
    Add(usize),
    /// Delete the VR and create it again from `spec.routers[k]`.
    Rebuild(usize),
    /// Change only routes and rule lists of the VR of `spec.routers[k]`.
    Routes {
        /// Index into the new spec's routers.
        k: usize,
        /// The route difference.
        diff: RouteDiff,
        /// The rule lists, or the lists the interfaces apply, changed.
        filters: bool,
    },
}

/// The route operations that turn one VR's static routes into another's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouteDiff {
    /// IPv4 routes to remove.
    pub remove4: Vec<Prefix4>,
    /// IPv6 routes to remove.
    pub remove6: Vec<Prefix6>,
    /// IPv4 routes to add or replace.
    pub add4: Vec<(Prefix4, RouteTarget)>,
    /// IPv6 routes to add or replace.
    pub add6: Vec<(Prefix6, RouteTarget)>,
}

impl RouteDiff {
    /// The difference from `old` to `new`.
    pub fn between(old: &RouterSpec, new: &RouterSpec) -> RouteDiff {
        let (remove4, add4) = diff(&old.routes4, &new.routes4);
        let (remove6, add6) = diff(&old.routes6, &new.routes6);
        RouteDiff {
            remove4,
            remove6,
            add4,
            add6,
        }
    }
}

/// Routes of `old` missing from `new`, and routes of `new` that `old` lacks
/// or sends elsewhere; in `new`'s order. Linear in the routes.
fn diff<P: Copy + Eq + Hash>(
    old: &[(P, RouteTarget)],
    new: &[(P, RouteTarget)],
) -> (Vec<P>, Vec<(P, RouteTarget)>) {
    let before: HashMap<P, &RouteTarget> = old.iter().map(|(p, t)| (*p, t)).collect();
    let after: HashSet<P> = new.iter().map(|&(p, _)| p).collect();
    let removed = old
        .iter()
        .map(|&(p, _)| p)
        .filter(|p| !after.contains(p))
        .collect();
    let added = new
        .iter()
        .filter(|(p, t)| before.get(p) != Some(&t))
        .cloned()
        .collect();
    (removed, added)
}

/// A reload, ready to apply.
#[derive(Debug)]
pub struct Plan {
    /// The new config's tables.
    pub spec: EngineSpec,
    /// What happens to each VR, deletions first.
    pub changes: Vec<VrChange>,
    /// What the caller is told.
    pub report: ReloadReport,
}

/// Checks that `new` can replace `old` in a running router and computes the
/// operations. `port_mac(p)` is port `p`'s MAC as the engine uses it.
pub fn plan(
    old: &Config,
    new: &Config,
    port_mac: impl Fn(usize) -> [u8; 6] + Copy,
) -> Result<Plan, Refusal> {
    if new.ports != old.ports {
        return Err(Refusal::new(
            "port",
            "ports cannot change while running; restart vrhost",
        ));
    }
    if new.dataplane != old.dataplane {
        return Err(Refusal::new(
            "dataplane",
            "worker placement cannot change while running; restart vrhost",
        ));
    }
    if new.api != old.api {
        return Err(Refusal::new(
            "api",
            "the API settings cannot change while running; restart vrhost",
        ));
    }
    let old_by_name: HashMap<&str, usize> = old
        .routers
        .iter()
        .enumerate()
        .map(|(k, r)| (r.name.as_str(), k))
        .collect();
    let new_names: HashSet<&str> = new.routers.iter().map(|r| r.name.as_str()).collect();
    // Control-plane namespaces, TAP mirrors and their sync threads are set
    // up at start; a reload that would need new ones says so instead of
    // leaving a VR without its control plane.
    for (k, r) in new.routers.iter().enumerate() {
        let before = old_by_name.get(r.name.as_str()).map(|&o| &old.routers[o]);
        if r.control.is_some()
            && before.is_none_or(|o| {
                o.control != r.control || !same_but_filters(&o.interfaces, &r.interfaces)
            })
        {
            return Err(Refusal::new(
                format!("router[{k}].control"),
                "a new or changed control-plane binding (or interfaces of a VR that has one) needs a restart of vrhost",
            ));
        }
        if r.control.is_none() && before.is_some_and(|o| o.control.is_some()) {
            return Err(Refusal::new(
                format!("router[{k}].control"),
                "removing a control-plane binding needs a restart of vrhost",
            ));
        }
    }
    let spec = vrhost_config::engine_spec(new, port_mac);
    // Dry run: everything the data plane checks, on a copy.
    TableWriter::new(&spec).map_err(|e| Refusal::new("router", e.to_string()))?;
    let old_spec = vrhost_config::engine_spec(old, port_mac);

    let mut changes = Vec::new();
    let mut report = ReloadReport::default();
    for r in &old.routers {
        if !new_names.contains(r.name.as_str()) {
            changes.push(VrChange::Remove(r.name.clone()));
            report.deleted.push(r.name.clone());
        }
    }
    for (k, r) in new.routers.iter().enumerate() {
        let Some(&o) = old_by_name.get(r.name.as_str()) else {
            changes.push(VrChange::Add(k));
            report.created.push(r.name.clone());
            continue;
        };
        let before = &old.routers[o];
        if before == r {
            continue;
        }
        let only_routes = same_but_filters(&before.interfaces, &r.interfaces)
            && before.neighbors == r.neighbors
            && before.limits == r.limits
            && before.control == r.control;
        changes.push(if only_routes {
            VrChange::Routes {
                k,
                diff: RouteDiff::between(&old_spec.routers[o], &spec.routers[k]),
                filters: before.filters != r.filters || before.interfaces != r.interfaces,
            }
        } else {
            VrChange::Rebuild(k)
        });
        report.changed.push(r.name.clone());
    }
    Ok(Plan {
        spec,
        changes,
        report,
    })
}

/// Whether two routers' interfaces differ at most in the rule lists they apply.
fn same_but_filters(a: &[vrhost_config::Interface], b: &[vrhost_config::Interface]) -> bool {
    let plain = |i: &vrhost_config::Interface| vrhost_config::Interface {
        filters: Default::default(),
        ..i.clone()
    };
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| plain(x) == plain(y))
}

/// The lists each interface of `r` applies, by name.
fn applied(r: &RouterSpec) -> Vec<(String, vrhost_dataplane::IfaceFilters)> {
    r.interfaces
        .iter()
        .map(|i| (i.name.clone(), i.filters.clone()))
        .collect()
}

/// What keeps `plan` (to the config `new`) from applying to the running
/// tables `w`, which may hold VRs the config does not know (created through
/// the API) and routes it does not know (from the API and the tenants'
/// control planes). `is_config_vr(name, vr)`: the running VR `vr` called
/// `name` is the config's router, not one made through the API. Checked
/// before [`apply`], so that `apply` cannot fail half-way:
/// - a VR the plan creates or rebuilds whose name, or one of whose ports
///   and VLANs, an API-made VR holds;
/// - a rebuild or route change of a name an API-made VR holds now;
/// - a rebuild of a VR with a control plane (its TAPs and sync would be
///   lost: that needs a restart);
/// - route changes the live table refuses (the route limit, counting
///   routes the config does not know; a gateway off the live subnets);
/// - more new interfaces than the run-time headroom left.
pub fn refusal(
    plan: &Plan,
    new: &Config,
    w: &TableWriter,
    is_config_vr: impl Fn(&str, VrId) -> bool,
) -> Option<Refusal> {
    let now = w.working();
    let replaced: HashSet<&str> = plan
        .changes
        .iter()
        .filter_map(|c| match c {
            VrChange::Remove(name) => Some(name.as_str()),
            VrChange::Rebuild(k) => Some(plan.spec.routers[*k].name.as_str()),
            _ => None,
        })
        .collect();
    let refuse = |name: &str, reason: String| {
        Some(Refusal {
            key: format!("router {name:?}"),
            reason,
        })
    };
    let mut new_ifaces = 0;
    for change in &plan.changes {
        let k = match change {
            VrChange::Add(k) | VrChange::Rebuild(k) | VrChange::Routes { k, .. } => *k,
            VrChange::Remove(_) => continue,
        };
        let r = &plan.spec.routers[k];
        let running = now.vr_index(&r.name);
        match (change, running) {
            (VrChange::Add(_), Some(_)) => {
                return refuse(
                    &r.name,
                    "a VR of that name was created through the API; delete it first".into(),
                );
            }
            (VrChange::Rebuild(_) | VrChange::Routes { .. }, Some(v))
                if !is_config_vr(&r.name, v) =>
            {
                return refuse(
                    &r.name,
                    "the VR of that name now was created through the API, not by the config; delete it first".into(),
                );
            }
            _ => {}
        }
        if matches!(change, VrChange::Rebuild(_))
            && new
                .routers
                .iter()
                .any(|n| n.name == r.name && n.control.is_some())
        {
            return refuse(
                &r.name,
                "this change rebuilds a VR with a control plane ([router.control]): its TAPs and \
                 route sync would be lost; it needs a restart"
                    .into(),
            );
        }
        if let (VrChange::Routes { diff, filters, .. }, Some(v)) = (change, running) {
            let removed = (diff.remove4.as_slice(), diff.remove6.as_slice());
            if let Err(e) = w.check_routes(v, removed, &diff.add4, &diff.add6) {
                return refuse(&r.name, e.to_string());
            }
            // Interfaces added through the API may name lists the config drops.
            if *filters {
                if let Err(e) = w.check_filters(v, &r.filters, &applied(r)) {
                    return refuse(&r.name, e.to_string());
                }
            }
        }
        if matches!(change, VrChange::Add(_) | VrChange::Rebuild(_)) {
            new_ifaces += r.interfaces.len();
            for i in &r.interfaces {
                let Some(owner) = now.demux_owner(i.port, i.vlan, i.inner_vlan) else {
                    continue;
                };
                let owner = now.vr_name(owner);
                if owner != r.name && !replaced.contains(owner) {
                    return Some(Refusal {
                        key: format!("router {:?}.interface {:?}", r.name, i.name),
                        reason: format!(
                            "port #{} VLAN {} is VR {owner:?}'s (created through the API); delete it first",
                            i.port,
                            i.vlan.unwrap_or(0)
                        ),
                    });
                }
            }
        }
    }
    if new_ifaces > w.iface_room() {
        return Some(Refusal {
            key: "router".into(),
            reason: format!(
                "{new_ifaces} interfaces to create, room for {} more without a restart",
                w.iface_room()
            ),
        });
    }
    None
}

/// Performs `plan` on the working tables; the caller commits. VRs are found
/// by name, so a VR the API deleted since the config was loaded is created
/// again only if the plan adds it.
pub fn apply(plan: &Plan, w: &mut TableWriter) -> Result<(), BuildError> {
    for change in &plan.changes {
        match change {
            VrChange::Remove(name) => {
                if let Some(v) = w.working().vr_index(name) {
                    w.remove_vr(v)?;
                }
            }
            VrChange::Add(k) => {
                w.add_vr(&plan.spec.routers[*k])?;
            }
            VrChange::Rebuild(k) => {
                let r = &plan.spec.routers[*k];
                if let Some(v) = w.working().vr_index(&r.name) {
                    w.remove_vr(v)?;
                    w.add_vr(r)?;
                }
            }
            VrChange::Routes { k, diff, filters } => {
                let r = &plan.spec.routers[*k];
                let Some(v) = w.working().vr_index(&r.name) else {
                    continue;
                };
                w.remove_routes(v, &diff.remove4, &diff.remove6);
                w.add_routes(v, &diff.add4, &diff.add6)?;
                if *filters {
                    w.replace_filters(v, &r.filters, &applied(r))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mac(_: usize) -> [u8; 6] {
        [2, 0, 0, 0, 0, 1]
    }

    /// A config with one port and VRs `red` (with `red_routes`) and,
    /// optionally, `blue`.
    fn config(red_routes: &[(&str, &str)], blue: bool, extra: &str) -> Config {
        let mut s = String::from(
            "[[port]]\nname = \"p0\"\ndriver = \"memory\"\nmac = \"02:00:00:00:00:01\"\n\n\
             [[router]]\nname = \"red\"\n  [[router.interface]]\n  name = \"r0\"\n  port = \"p0\"\n  vlan = 10\n  \
             addresses = [\"10.0.0.1/24\", \"2001:db8::1/64\"]\n",
        );
        for (prefix, target) in red_routes {
            let t = if target.starts_with("10.") || target.contains(':') {
                format!("via = \"{target}\"")
            } else {
                format!("{target} = true")
            };
            s += &format!("  [[router.route]]\n  prefix = \"{prefix}\"\n  {t}\n");
        }
        s += extra;
        if blue {
            s += "\n[[router]]\nname = \"blue\"\n  [[router.interface]]\n  name = \"b0\"\n  port = \"p0\"\n  vlan = 20\n  \
                  addresses = [\"10.1.0.1/24\"]\n";
        }
        Config::from_toml_str(&s, std::path::Path::new(".")).expect("valid config")
    }

    fn writer(cfg: &Config) -> TableWriter {
        TableWriter::new(&vrhost_config::engine_spec(cfg, mac)).expect("tables")
    }

    #[test]
    fn reloads_the_live_tables_would_refuse_are_refused_before_anything() {
        let all = |_: &str, _: VrId| true;
        // Routes the config does not know (the API's, FPM's) count against
        // the limit: a reload adding one more route is refused, not applied.
        let limits = "  [router.limits]\n  max_routes = 16\n";
        let old = config(&[], false, limits);
        let mut w = writer(&old);
        let red = w.working().vr_index("red").expect("red");
        let fill: Vec<_> = (0..16u8)
            .map(|i| {
                let p: Prefix4 = format!("10.9.{i}.0/24").parse().expect("prefix");
                (p, RouteTarget::Via("10.0.0.9".parse().expect("gw")))
            })
            .collect();
        let room = 16 - w.routes(red).0;
        w.add_routes(red, &fill[..room], &[]).expect("fill red");
        let new = config(&[("10.8.0.0/16", "10.0.0.8")], false, limits);
        let p = plan(&old, &new, mac).expect("plan");
        let r = refusal(&p, &new, &w, all).expect("refused");
        assert!(r.reason.contains("route limit"), "{r:?}");
        // A gateway the live subnets no longer cover is refused too.
        w.remove_address(red, "r0", "10.0.0.1".parse().expect("addr"), 24)
            .expect("address");
        let r = refusal(&p, &new, &w, all).expect("refused");
        assert_eq!(r.key, "router \"red\"");

        // A VR made through the API under a config router's name is not
        // rebuilt or changed by a reload.
        let old = config(&[], false, "");
        let w = writer(&old);
        let new = config(&[("10.8.0.0/16", "10.0.0.8")], false, "");
        let p = plan(&old, &new, mac).expect("plan");
        let r = refusal(&p, &new, &w, |_, _| false).expect("refused");
        assert!(r.reason.contains("created through the API"), "{r:?}");
        assert!(refusal(&p, &new, &w, all).is_none());

        // Rebuilding a VR with a control plane needs a restart.
        let control = "  [router.control]\n  netns = \"vr-red\"\n";
        let old = config(&[], false, control);
        let w = writer(&old);
        let new = config(
            &[],
            false,
            &format!("{control}  [router.limits]\n  weight = 3\n"),
        );
        let p = plan(&old, &new, mac).expect("plan");
        let r = refusal(&p, &new, &w, all).expect("refused");
        assert!(r.reason.contains("needs a restart"), "{r:?}");
    }

    /// Red with a control plane, lists `a` (deny 192.0.2.0/24) and `b`
    /// (default `b_default`), and `applied` among r0's keys.
    fn filtered(b_default: &str, applied: &str) -> Config {
        let s = format!(
            "[[port]]\nname = \"p0\"\ndriver = \"memory\"\nmac = \"02:00:00:00:00:01\"\n\n\
             [[router]]\nname = \"red\"\n  [[router.interface]]\n  name = \"r0\"\n  port = \"p0\"\n  \
             addresses = [\"10.0.0.1/24\"]\n{applied}\n  [router.control]\n  netns = \"vr-red\"\n\
               [[router.filter]]\n  name = \"a\"\n    [[router.filter.rule]]\n    action = \"deny\"\n    \
             src = \"192.0.2.0/24\"\n  [[router.filter]]\n  name = \"b\"\n  default = \"{b_default}\"\n"
        );
        Config::from_toml_str(&s, std::path::Path::new(".")).expect("valid config")
    }

    #[test]
    fn rule_lists_change_in_place_even_with_a_control_plane() {
        let old = filtered("permit", "  filter_in = \"a\"\n");
        let mut w = writer(&old);
        let red = w.working().vr_index("red").expect("red");
        let a_before = w.filters(red).expect("lists")[0].clone();
        // `b` changes, and r0 applies it on the way out too.
        let new = filtered("deny", "  filter_in = \"a\"\n  filter_out = \"b\"\n");
        let p = plan(&old, &new, mac).expect("plan");
        let [VrChange::Routes {
            filters: true,
            diff,
            ..
        }] = p.changes.as_slice()
        else {
            panic!("an in-place change, got {:?}", p.changes);
        };
        assert_eq!(diff, &RouteDiff::default());
        assert!(refusal(&p, &new, &w, |_, _| true).is_none());
        apply(&p, &mut w).expect("apply");
        w.commit();
        let lists = w.filters(red).expect("lists");
        assert!(
            std::sync::Arc::ptr_eq(&lists[0], &a_before),
            "`a` kept, counters and all"
        );
        assert_eq!(lists[1].spec().default, vrhost_dataplane::Action::Deny);
        let shared = w.shared();
        let i = &shared.ifaces()[shared.vr_ifaces(red)[0].index()];
        assert_eq!(
            (
                i.filter_names().input.as_deref(),
                i.filter_names().output.as_deref()
            ),
            (Some("a"), Some("b"))
        );
        // Dropping `a` from the config while r0 still names it is the
        // config's own error; dropping it with the reference is fine.
        let without_a = "[[port]]\nname = \"p0\"\ndriver = \"memory\"\nmac = \"02:00:00:00:00:01\"\n\
             [[router]]\nname = \"red\"\n  [[router.interface]]\n  name = \"r0\"\n  port = \"p0\"\n  \
             addresses = [\"10.0.0.1/24\"]\n  [router.control]\n  netns = \"vr-red\"\n";
        let newer = Config::from_toml_str(without_a, std::path::Path::new(".")).expect("valid");
        let p = plan(&new, &newer, mac).expect("plan");
        assert!(refusal(&p, &newer, &w, |_, _| true).is_none());
        apply(&p, &mut w).expect("apply");
        w.commit();
        assert!(w.filters(red).expect("lists").is_empty());
    }

    #[test]
    fn lists_built_before_the_writer_is_taken_are_used_as_they_are() {
        let cfg = filtered("permit", "  filter_in = \"a\"\n");
        let mut w = writer(&cfg);
        let red = w.working().vr_index("red").expect("red");
        let lists = w.filters(red).expect("lists");
        let c = vrhost_dataplane::FilterSpec {
            name: "c".into(),
            default: vrhost_dataplane::Action::Deny,
            rules: vec![],
        };
        let pre = std::sync::Arc::new(
            vrhost_dataplane::Filter::build(&c, w.worker_count()).expect("builds"),
        );
        let specs = [lists[0].spec().clone(), c];
        assert_eq!(
            w.replace_filters_prebuilt(red, &specs, &[], std::slice::from_ref(&pre)),
            Ok(true)
        );
        w.commit();
        let now = w.filters(red).expect("lists");
        assert!(
            std::sync::Arc::ptr_eq(&now[0], &lists[0]),
            "`a` unchanged: kept"
        );
        assert!(
            std::sync::Arc::ptr_eq(&now[1], &pre),
            "`c` as built beforehand"
        );
    }

    /// Every route of VR `name`, sorted.
    fn routes(w: &TableWriter, name: &str) -> Vec<String> {
        let v = w.working().vr_index(name).expect("VR");
        let mut r: Vec<String> = w
            .route_list(v)
            .into_iter()
            .map(|(a, l, h)| format!("{a}/{l} {h:?}"))
            .collect();
        r.sort();
        r
    }

    #[test]
    fn routes_only_change_touches_only_the_difference() {
        let old = config(
            &[
                ("10.9.0.0/16", "10.0.0.9"),
                ("10.8.0.0/16", "10.0.0.8"),
                ("2001:db8:9::/48", "2001:db8::9"),
            ],
            false,
            "",
        );
        let new = config(
            &[
                ("10.9.0.0/16", "10.0.0.9"),
                ("10.8.0.0/16", "10.0.0.7"),
                ("10.7.0.0/16", "blackhole"),
            ],
            false,
            "",
        );
        let p = plan(&old, &new, mac).expect("plan");
        assert_eq!(p.report.changed, vec!["red".to_string()]);
        let [VrChange::Routes {
            k: 0,
            diff,
            filters: false,
        }] = p.changes.as_slice()
        else {
            panic!("one route change, got {:?}", p.changes);
        };
        assert_eq!(diff.remove4, Vec::<Prefix4>::new());
        assert_eq!(diff.remove6, vec!["2001:db8:9::/48".parse().unwrap()]);
        let added: Vec<String> = diff.add4.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(added, ["10.8.0.0/16", "10.7.0.0/16"]);
        assert!(diff.add6.is_empty());
    }

    #[test]
    fn vrs_are_created_deleted_and_rebuilt_by_name() {
        let old = config(&[], true, "");
        let new = config(&[], false, "");
        let p = plan(&old, &new, mac).expect("plan");
        assert_eq!(p.changes, vec![VrChange::Remove("blue".into())]);
        assert_eq!(p.report.deleted, vec!["blue".to_string()]);
        let p = plan(&new, &old, mac).expect("plan");
        assert_eq!(p.changes, vec![VrChange::Add(1)]);
        let mtu = config(&[], true, "  mtu = 1400\n");
        let p = plan(&old, &mtu, mac).expect("plan");
        assert_eq!(p.changes, vec![VrChange::Rebuild(0)]);
        let mut w = writer(&old);
        apply(&p, &mut w).expect("apply");
        let v = w.working().vr_index("red").expect("red");
        let i = w.working().vr_ifaces(v)[0];
        assert_eq!(w.working().ifaces()[i.index()].mtu, 1400);
    }

    #[test]
    fn what_needs_a_restart_is_refused_by_key() {
        let old = config(&[], false, "");
        let mut ports = old.clone();
        ports.ports[0].mtu = 9000;
        assert_eq!(plan(&old, &ports, mac).unwrap_err().key, "port");
        let cp = config(&[], false, "  [router.control]\n  netns = \"vr-red\"\n");
        assert_eq!(plan(&old, &cp, mac).unwrap_err().key, "router[0].control");
        assert_eq!(plan(&cp, &old, mac).unwrap_err().key, "router[0].control");
    }

    #[test]
    fn a_config_the_tables_refuse_is_refused_whole() {
        let old = config(&[], false, "");
        let mut new = config(&[("10.9.0.0/16", "10.0.0.9")], true, "");
        new.routers[0].limits.max_routes = 1;
        let e = plan(&old, &new, mac).unwrap_err();
        assert_eq!(e.key, "router");
        assert!(e.reason.contains("limit"), "{}", e.reason);
    }

    /// A pool of routes a reload picks from: prefixes of both families,
    /// each with one of a few targets.
    fn pool() -> Vec<(&'static str, [&'static str; 3])> {
        vec![
            ("10.9.0.0/16", ["10.0.0.9", "10.0.0.8", "blackhole"]),
            ("10.9.1.0/24", ["10.0.0.9", "unreachable", "blackhole"]),
            ("10.10.0.0/15", ["10.0.0.7", "10.0.0.8", "unreachable"]),
            ("0.0.0.0/0", ["10.0.0.254", "10.0.0.253", "blackhole"]),
            ("192.0.2.0/24", ["10.0.0.9", "10.0.0.3", "blackhole"]),
            ("198.51.100.7/32", ["10.0.0.2", "10.0.0.3", "unreachable"]),
            (
                "2001:db8:9::/48",
                ["2001:db8::9", "2001:db8::8", "blackhole"],
            ),
            (
                "2001:db8:9:1::/64",
                ["2001:db8::9", "unreachable", "blackhole"],
            ),
            ("::/0", ["2001:db8::fe", "2001:db8::fd", "blackhole"]),
            (
                "2001:db8:a::/47",
                ["2001:db8::7", "2001:db8::6", "unreachable"],
            ),
        ]
    }

    /// For each pool entry: absent, or present with target 0, 1 or 2.
    fn pick(choice: &[u8]) -> Vec<(&'static str, &'static str)> {
        pool()
            .into_iter()
            .zip(choice)
            .filter(|&(_, &c)| c < 3)
            .map(|((p, ts), &c)| (p, ts[usize::from(c)]))
            .collect()
    }

    proptest! {
        /// Applying the plan to tables built from the old config gives the
        /// routes of tables built from the new one.
        #[test]
        fn applying_the_plan_gives_the_new_configs_routes(
            a in proptest::collection::vec(0u8..4, 10),
            b in proptest::collection::vec(0u8..4, 10),
        ) {
            let old = config(&pick(&a), true, "");
            let new = config(&pick(&b), true, "");
            let p = plan(&old, &new, mac).expect("plan");
            let mut w = writer(&old);
            apply(&p, &mut w).expect("apply");
            w.commit();
            prop_assert_eq!(routes(&w, "red"), routes(&writer(&new), "red"));
            prop_assert_eq!(routes(&w, "blue"), routes(&writer(&new), "blue"));
        }
    }
}
