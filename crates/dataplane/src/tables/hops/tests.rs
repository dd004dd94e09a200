//! Next hops let go and reused: churn stays bounded, a worker's FIB keeps
//! its ids, the group limit holds, and the kept counts are the tables'.

use super::*;
use crate::spec::{Path, Paths};
use proptest::prelude::*;
use vrhost_fib::Lpm;

const RED: VrId = VrId::new(0);

fn spec(max_nexthop_groups: u32) -> EngineSpec {
    crate::spec::one_vr(
        vec![(Ipv4Addr::new(10, 1, 0, 1), 16)],
        vec![("2001:db8:1::1".parse().unwrap(), 64)],
        Limits {
            max_nexthop_groups,
            ..Limits::default()
        },
    )
}

fn gw(k: u16) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 1, (k / 250) as u8, (k % 250) as u8 + 2))
}

fn via(k: u16) -> RouteTarget {
    RouteTarget::Via(gw(k))
}

fn multipath(ks: &[u16]) -> RouteTarget {
    Paths::target(ks.iter().map(|&k| Path {
        via: gw(k),
        weight: 1,
    }))
    .unwrap()
}

fn net(i: u32) -> Prefix4 {
    Prefix4::new(Ipv4Addr::from(0x6440_0000 + (i << 8)), 24).unwrap()
}

fn red(w: &TableWriter) -> &VrControl {
    &w.vrs[RED.index()]
}

/// What next hop `id` sends to, as a worker reads it: a gateway, or a
/// group's member gateways (wherever its bucket table lies).
fn meaning(c: &VrControl, id: u32) -> Vec<RouteHop> {
    match c.nexthops.hops[id as usize] {
        RouteHop::Group { base, members } => c
            .nexthops
            .members(base, members)
            .iter()
            .map(|&m| c.nexthops.hops[m as usize])
            .collect(),
        hop => vec![hop],
    }
}

fn assert_counts(w: &TableWriter) {
    let c = red(w);
    assert_eq!(c.refs, c.counted_refs(), "kept counts against the tables");
    for id in c.free.iter().chain(c.dying.iter().map(|(id, _)| id)) {
        assert_eq!(
            c.counted_refs()[*id as usize],
            0,
            "let go id {id} still named"
        );
    }
}

#[test]
fn gateway_churn_reuses_ids() {
    let mut w = TableWriter::new(&spec(16)).unwrap();
    for i in 0..5000u16 {
        w.add_route(RED, net(0), via(i % 4000)).unwrap();
        w.commit();
    }
    assert_counts(&w);
    // Fixed four, two connected, the route's gateway, and the one it just
    // replaced (let go at this commit, reusable at the next).
    assert!(
        red(&w).nexthops.hops.len() <= 8,
        "{}",
        red(&w).nexthops.hops.len()
    );
    assert_eq!(
        w.route(RED, net(0).addr().into(), 24),
        Some(RouteHop::Gateway {
            iface: 0,
            addr: gw(999)
        })
    );
}

#[test]
fn group_churn_frees_bucket_tables() {
    let mut w = TableWriter::new(&spec(4)).unwrap();
    for i in 1..3000u16 {
        w.add_route(RED, net(0), multipath(&[0, i])).unwrap();
        w.commit();
    }
    assert_counts(&w);
    let c = red(&w);
    assert_eq!(c.groups(), 1);
    // The group in use, and at most the one just let go.
    assert!(c.nexthops.buckets.len() <= 2 * (GROUP_BUCKETS + 2));
    assert!(c.nexthops.hops.len() <= 12, "{}", c.nexthops.hops.len());
    let hop = w.route(RED, net(0).addr().into(), 24).unwrap();
    let paths: Vec<IpAddr> = w.hop_paths(RED, &hop).iter().map(|p| p.1.via).collect();
    assert_eq!(paths, [gw(0), gw(2999)]);
}

/// A group's flows stay with their gateways while other groups come and
/// go and its bucket table moves in the packing.
#[test]
fn packing_moves_a_group_without_moving_its_flows() {
    let mut w = TableWriter::new(&spec(8)).unwrap();
    // net(1)'s group first, so that net(0)'s table lies behind it.
    w.add_route(RED, net(1), multipath(&[3, 4])).unwrap();
    w.add_route(RED, net(0), multipath(&[0, 1, 2])).unwrap();
    w.commit();
    let flows = |w: &TableWriter| -> Vec<IpAddr> {
        let nh = w.shared().vrs[0].nexthops.load_full();
        let id = w.shared().vrs[0]
            .fib4
            .load_full()
            .lookup(net(0).addr())
            .unwrap();
        let RouteHop::Group { base, .. } = nh.hops[id.0 as usize] else {
            panic!("not a group");
        };
        (0..GROUP_BUCKETS as u32)
            .map(|b| {
                let m = nh.pick(base, b << (32 - GROUP_BUCKET_BITS)).unwrap();
                match nh.hops[m as usize] {
                    RouteHop::Gateway { addr, .. } => addr,
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    };
    let before = flows(&w);
    let base = |w: &TableWriter| match w.route(RED, net(0).addr().into(), 24) {
        Some(RouteHop::Group { base, .. }) => base,
        other => panic!("{other:?}"),
    };
    assert_eq!(base(&w), (GROUP_BUCKETS + 2) as u32);
    // Free net(1)'s group and churn others: net(0)'s table moves down.
    w.remove_route(RED, net(1));
    w.commit();
    for i in 5..40u16 {
        w.add_route(RED, net(2), multipath(&[i, i + 1])).unwrap();
        w.commit();
    }
    w.commit();
    assert_eq!(base(&w), 0, "the table moved to the front");
    assert_eq!(flows(&w), before);
    assert_counts(&w);
}

#[test]
fn a_held_fib_keeps_its_ids() {
    let mut w = TableWriter::new(&spec(16)).unwrap();
    w.add_route(RED, net(0), via(1)).unwrap();
    w.commit();
    let id = |w: &TableWriter, p| red(w).fib4.table().get(&p).unwrap().0;
    let old = id(&w, net(0));
    // A worker holds the FIB that names gateway 1.
    let held = w.shared().vrs[0].fib4.load_full();
    w.add_route(RED, net(0), via(2)).unwrap();
    w.commit();
    w.add_route(RED, net(1), via(3)).unwrap();
    w.commit();
    assert_ne!(id(&w, net(1)), old, "reused while a worker holds it");
    assert_eq!(
        red(&w).nexthops.hops[old as usize],
        RouteHop::Gateway {
            iface: 0,
            addr: gw(1)
        }
    );
    assert_eq!(
        held.lookup(Ipv4Addr::new(100, 64, 0, 9)),
        Some(NextHopId(old))
    );
    drop(held);
    w.commit();
    w.add_route(RED, net(2), via(4)).unwrap();
    w.commit();
    assert_eq!(id(&w, net(2)), old, "free once no worker holds it");
    assert_counts(&w);
}

/// At the group limit a batch, like one route, may move routes off groups
/// that only its routes name (a BGP path change for many prefixes in one
/// FPM message), not off groups that others share too.
#[test]
fn a_batch_at_the_group_limit_may_move_routes_off_groups_only_they_name() {
    let mut w = TableWriter::new(&spec(3)).unwrap();
    w.add_route(RED, net(0), multipath(&[1, 2])).unwrap();
    w.add_route(RED, net(1), multipath(&[1, 3])).unwrap();
    w.add_route(RED, net(2), multipath(&[2, 3])).unwrap();
    w.add_route(RED, net(3), multipath(&[2, 3])).unwrap();
    w.commit();
    let limited = |r: Result<(), BuildError>| matches!(r, Err(BuildError::GroupLimit { .. }));
    // net(0) and net(1) move to two new groups at once: theirs go.
    let batch = [(net(0), multipath(&[4, 5])), (net(1), multipath(&[5, 6]))];
    w.check_routes(RED, (&[], &[]), &batch, &[]).unwrap();
    w.add_routes(RED, &batch, &[]).unwrap();
    w.commit();
    assert_eq!(red(&w).groups(), 3);
    // net(2) shares its group with net(3): moving it alone frees nothing.
    let shared = [(net(2), multipath(&[4, 6]))];
    assert!(limited(w.check_routes(RED, (&[], &[]), &shared, &[])));
    assert!(limited(w.add_routes(RED, &shared, &[])));
    // Both of them free it; a prefix named twice counts once.
    let both = [
        (net(2), multipath(&[4, 6])),
        (net(3), multipath(&[4, 6])),
        (net(2), multipath(&[4, 6])),
    ];
    w.add_routes(RED, &both, &[]).unwrap();
    w.commit();
    assert_eq!(red(&w).groups(), 3);
    // One group freed, two needed: refused, and nothing changes.
    let two = [(net(0), multipath(&[1, 4])), (net(9), multipath(&[1, 5]))];
    assert!(limited(w.check_routes(RED, (&[], &[]), &two, &[])));
    assert!(limited(w.add_routes(RED, &two, &[])));
    assert!(w.route(RED, net(9).addr().into(), 24).is_none());
    // A route removed in the same change frees its group for a new one.
    let one = [(net(9), multipath(&[1, 4]))];
    assert!(limited(w.check_routes(RED, (&[], &[]), &one, &[])));
    w.check_routes(RED, (&[net(1)], &[]), &one, &[]).unwrap();
    // Moving onto a group the VR has frees nothing and needs nothing.
    let onto = [(net(0), multipath(&[5, 6]))];
    w.add_routes(RED, &onto, &[]).unwrap();
    w.commit();
    assert_eq!(red(&w).groups(), 2);
    assert_counts(&w);
}

#[test]
fn group_limit_holds_and_frees_with_routes() {
    let mut w = TableWriter::new(&spec(2)).unwrap();
    w.add_route(RED, net(0), multipath(&[1, 2])).unwrap();
    w.add_route(RED, net(1), multipath(&[1, 3])).unwrap();
    w.commit();
    let refused = w.add_route(RED, net(2), multipath(&[2, 3]));
    assert!(
        matches!(refused, Err(BuildError::GroupLimit { limit: 2, .. })),
        "{refused:?}"
    );
    assert!(refused
        .unwrap_err()
        .to_string()
        .contains("limits.max_nexthop_groups"));
    // A group the VR has already is no new one.
    w.add_route(RED, net(2), multipath(&[2, 1])).unwrap();
    // Neither a batch with two new groups, nor its check, changes anything.
    let batch = [(net(3), multipath(&[4, 5])), (net(4), multipath(&[5, 6]))];
    assert!(matches!(
        w.check_routes(RED, (&[], &[]), &batch, &[]),
        Err(BuildError::GroupLimit { .. })
    ));
    assert!(matches!(
        w.add_routes(RED, &batch, &[]),
        Err(BuildError::GroupLimit { .. })
    ));
    assert_eq!(w.routes(RED).0, 3 + 3);
    // At the limit, a route that alone names its group may move to a new one.
    w.add_route(RED, net(1), multipath(&[1, 4])).unwrap();
    assert!(w.route(RED, net(1).addr().into(), 24).is_some());
    w.commit();
    assert_eq!(red(&w).groups(), 2);
    // One whose group another route shares may not.
    let shared = w.add_route(RED, net(2), multipath(&[2, 4]));
    assert!(
        matches!(shared, Err(BuildError::GroupLimit { .. })),
        "{shared:?}"
    );
    // Routes gone, uncommitted, free their group for the next one.
    w.remove_route(RED, net(1));
    w.add_route(RED, net(3), multipath(&[4, 5])).unwrap();
    w.commit();
    assert_eq!(red(&w).groups(), 2);
    assert_counts(&w);
}

/// One change to the VR's routes.
#[derive(Clone, Debug)]
enum Op {
    /// Prefix `p` through gateway `k`.
    Via(u8, u16),
    /// Prefix `p` through the gateways in the mask's bits.
    Multi(u8, u8),
    Remove(u8),
    /// Many routes at once, enough to rebuild the table, through `k`.
    Bulk(u16),
    BulkRemove,
    /// Commit, holding the published FIB (as a slow worker) or not.
    Commit(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 0u16..6).prop_map(|(p, k)| Op::Via(p, k)),
        4 => (0u8..8, 1u8..64).prop_map(|(p, m)| Op::Multi(p, m)),
        2 => (0u8..8).prop_map(Op::Remove),
        1 => (0u16..6).prop_map(Op::Bulk),
        1 => Just(Op::BulkRemove),
        3 => any::<bool>().prop_map(Op::Commit),
    ]
}

fn bulk_net(i: u32) -> Prefix4 {
    Prefix4::new(Ipv4Addr::from(0x6500_0000 + i), 32).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the order of changes, commits and held FIBs: the kept
    /// counts are the tables', no id a table names is let go, and every
    /// route reads back as the gateways it was given.
    #[test]
    fn counts_match_the_tables(ops in proptest::collection::vec(op(), 1..40)) {
        let mut w = TableWriter::new(&spec(64)).unwrap();
        let mut model: HashMap<u8, Vec<IpAddr>> = HashMap::new();
        let mut held = Vec::new();
        for op in ops {
            match op {
                Op::Via(p, k) => {
                    w.add_route(RED, net(p.into()), via(k)).unwrap();
                    model.insert(p, vec![gw(k)]);
                }
                Op::Multi(p, m) => {
                    let ks: Vec<u16> = (0..6).filter(|b| m & (1 << b) != 0).collect();
                    w.add_route(RED, net(p.into()), multipath(&ks)).unwrap();
                    model.insert(p, ks.into_iter().map(gw).collect());
                }
                Op::Remove(p) => {
                    prop_assert_eq!(w.remove_route(RED, net(p.into())), model.remove(&p).is_some());
                }
                Op::Bulk(k) => {
                    let routes: Vec<_> = (0..4096).map(|i| (bulk_net(i), via(k))).collect();
                    w.add_routes(RED, &routes, &[]).unwrap();
                }
                Op::BulkRemove => {
                    let gone: Vec<_> = (0..4096).map(bulk_net).collect();
                    w.remove_routes(RED, &gone, &[]);
                }
                Op::Commit(hold) => {
                    w.commit();
                    if hold {
                        // What each of its routes meant when it was published.
                        let snap = w.shared().vrs[0].fib4.load_full();
                        let meant: Vec<(u32, Vec<RouteHop>)> = (0..8)
                            .filter_map(|p| snap.lookup(net(p).addr()))
                            .map(|id| (id.0, meaning(red(&w), id.0)))
                            .collect();
                        held.push((snap, meant));
                    } else {
                        held.clear();
                    }
                }
            }
            assert_counts(&w);
            // A FIB still held keeps what its routes meant.
            for (_, meant) in &held {
                for (id, hops) in meant {
                    prop_assert_eq!(&meaning(red(&w), *id), hops);
                }
            }
        }
        w.commit();
        for (&p, gws) in &model {
            let hop = w.route(RED, net(p.into()).addr().into(), 24).unwrap();
            let mut got: Vec<IpAddr> = w.hop_paths(RED, &hop).iter().map(|p| p.1.via).collect();
            got.sort();
            prop_assert_eq!(&got, gws);
            // What a worker loads: the published FIB and next hops.
            let nh = w.shared().vrs[0].nexthops.load_full();
            let fib = w.shared().vrs[0].fib4.load_full();
            let id = fib.lookup(net(p.into()).addr()).unwrap();
            if let RouteHop::Group { base, members } = nh.hops[id.0 as usize] {
                // The published table names the group's gateways, and only them.
                let ids = nh.members(base, members).to_vec();
                prop_assert_eq!(ids.len(), gws.len());
                for b in 0..GROUP_BUCKETS as u32 {
                    prop_assert!(ids.contains(&nh.pick(base, b << (32 - GROUP_BUCKET_BITS)).unwrap()));
                }
            }
        }
    }
}
