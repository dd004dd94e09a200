//! Namespace → VR: what `ip` does in a VR's namespace arrives as events,
//! and an overrun ends in a resync equal to the kernel's table (root).

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

use common::{kernel_routes, wait_for, Ns};
use vrhost_cp::watcher::WatchOptions;
use vrhost_cp::{ensure_netns, mirror_interface, CpEvent, CpState, NsWatcher, Op, RouteTarget};
use vrhost_io::TapPort;

/// A namespace with TAP mirror `red0` (10.0.0.1/24, 2001:db8::1/64).
fn lab(tag: &str) -> (Ns, Vec<TapPort>) {
    let ns = Ns::unique(tag);
    ensure_netns(&ns.name).unwrap();
    let ports = mirror_interface(&ns.name, "red0", [2, 0, 0, 0, 0, 1], 1500, 1).unwrap();
    ns.ip("addr add 10.0.0.1/24 dev red0");
    ns.ip("-6 addr add 2001:db8::1/64 dev red0 nodad");
    (ns, ports)
}

fn route(ev: &CpEvent, op: Op, prefix: &str) -> Option<RouteTarget> {
    match ev {
        CpEvent::Route {
            op: o,
            prefix: p,
            target,
        } if *o == op && p.to_string() == prefix => Some(target.clone()),
        _ => None,
    }
}

#[test]
fn first_event_is_a_resync_of_what_is_there() {
    let (ns, _ports) = lab("resync0");
    ns.ip("route add 10.9.0.0/16 via 10.0.0.254");
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let _w = NsWatcher::start(&ns.name, tx).unwrap();
    let first = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let CpEvent::Resync { routes, addrs } = first else {
        panic!("first event is not a resync: {first:?}");
    };
    let routes: Vec<String> = routes.iter().map(|(p, t)| format!("{p} {t}")).collect();
    assert!(
        routes.contains(&"10.9.0.0/16 via 10.0.0.254 dev red0".to_string()),
        "{routes:?}"
    );
    assert!(
        routes.contains(&"10.0.0.0/24 dev red0".to_string()),
        "{routes:?}"
    );
    assert!(
        routes.contains(&"2001:db8::/64 dev red0".to_string()),
        "{routes:?}"
    );
    // No local/broadcast (table local), no fe80::/64, nothing on lo.
    assert!(
        routes
            .iter()
            .all(|r| !r.contains("fe80") && !r.contains("127.")),
        "{routes:?}"
    );
    let addrs: Vec<String> = addrs
        .iter()
        .map(|a| format!("{} {}/{}", a.ifname, a.addr, a.len))
        .collect();
    assert_eq!(addrs, ["red0 10.0.0.1/24", "red0 2001:db8::1/64"]);
}

#[test]
fn routes_added_and_deleted_with_ip_arrive() {
    let (ns, _ports) = lab("routes");
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let w = NsWatcher::start(&ns.name, tx).unwrap();
    wait_for(&rx, 5, |e| matches!(e, CpEvent::Resync { .. }));

    let cases = [
        (
            "route add 10.1.0.0/16 via 10.0.0.254",
            "10.1.0.0/16",
            "via 10.0.0.254 dev red0",
        ),
        (
            "route add blackhole 10.2.0.0/16",
            "10.2.0.0/16",
            "blackhole",
        ),
        (
            "route add unreachable 10.3.0.0/16",
            "10.3.0.0/16",
            "unreachable",
        ),
        ("route add prohibit 10.4.0.0/16", "10.4.0.0/16", "prohibit"),
        (
            "route add default via 10.0.0.254",
            "0.0.0.0/0",
            "via 10.0.0.254 dev red0",
        ),
        ("route add 10.5.0.0/16 dev red0", "10.5.0.0/16", "dev red0"),
        (
            "-6 route add 2001:db8:1::/48 via 2001:db8::fe",
            "2001:db8:1::/48",
            "via 2001:db8::fe dev red0",
        ),
        (
            "-6 route add blackhole 2001:db8:2::/48",
            "2001:db8:2::/48",
            "blackhole",
        ),
        // ECMP, inline and through kernel next-hop objects (which the
        // kernel's default compat mode expands into the route's next hops).
        (
            "route add 10.6.0.0/16 nexthop via 10.0.0.253 dev red0 weight 3 nexthop via 10.0.0.252 dev red0",
            "10.6.0.0/16",
            "nexthop via 10.0.0.252 dev red0 weight 1 nexthop via 10.0.0.253 dev red0 weight 3",
        ),
        (
            "route add 10.7.0.0/16 nhid 110",
            "10.7.0.0/16",
            "nexthop via 10.0.0.250 dev red0 weight 1 nexthop via 10.0.0.251 dev red0 weight 2",
        ),
    ];
    ns.ip("nexthop add id 101 via 10.0.0.251 dev red0");
    ns.ip("nexthop add id 102 via 10.0.0.250 dev red0");
    ns.ip("nexthop add id 110 group 101,2/102");
    for (cmd, prefix, target) in cases {
        ns.ip(cmd);
        let ev = wait_for(&rx, 5, |e| route(e, Op::Add, prefix).is_some());
        assert_eq!(
            route(&ev, Op::Add, prefix).unwrap().to_string(),
            target,
            "{cmd}"
        );
    }
    // A next-hop group that changes: its routes follow.
    ns.ip("nexthop replace id 110 group 101");
    let ev = wait_for(&rx, 5, |e| route(e, Op::Add, "10.7.0.0/16").is_some());
    assert_eq!(
        route(&ev, Op::Add, "10.7.0.0/16").unwrap().to_string(),
        "via 10.0.0.251 dev red0"
    );
    // Replacing changes the target in place.
    ns.ip("route replace 10.1.0.0/16 via 10.0.0.253");
    let ev = wait_for(&rx, 5, |e| route(e, Op::Add, "10.1.0.0/16").is_some());
    assert_eq!(
        route(&ev, Op::Add, "10.1.0.0/16").unwrap().to_string(),
        "via 10.0.0.253 dev red0"
    );

    for (cmd, prefix) in [
        ("route del 10.1.0.0/16", "10.1.0.0/16"),
        ("route del blackhole 10.2.0.0/16", "10.2.0.0/16"),
        ("route del default", "0.0.0.0/0"),
        ("-6 route del 2001:db8:1::/48", "2001:db8:1::/48"),
        ("-6 route del blackhole 2001:db8:2::/48", "2001:db8:2::/48"),
    ] {
        ns.ip(cmd);
        wait_for(&rx, 5, |e| route(e, Op::Del, prefix).is_some());
    }

    // Routes through a non-mirrored interface (lo) are filtered: the
    // marker route added after it arrives with nothing for 10.99 before.
    ns.ip("route add 10.99.0.0/16 dev lo");
    ns.ip("route add blackhole 10.100.0.0/16");
    wait_for(&rx, 5, |e| {
        assert!(
            route(e, Op::Add, "10.99.0.0/16").is_none(),
            "route on lo leaked: {e:?}"
        );
        route(e, Op::Add, "10.100.0.0/16").is_some()
    });
    assert!(w.stats().filtered > 0);
}

#[test]
fn address_changes_in_the_namespace_arrive() {
    let (ns, _ports) = lab("addrs");
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let _w = NsWatcher::start(&ns.name, tx).unwrap();
    wait_for(&rx, 5, |e| matches!(e, CpEvent::Resync { .. }));
    let is_addr = |e: &CpEvent, want_op: Op, want: &str| match e {
        CpEvent::Addr {
            op,
            ifname,
            addr,
            len,
        } => *op == want_op && format!("{ifname} {addr}/{len}") == want,
        _ => false,
    };
    ns.ip("addr add 10.7.0.1/16 dev red0");
    wait_for(&rx, 5, |e| is_addr(e, Op::Add, "red0 10.7.0.1/16"));
    ns.ip("-6 addr add 2001:db8:7::1/64 dev red0 nodad");
    wait_for(&rx, 5, |e| is_addr(e, Op::Add, "red0 2001:db8:7::1/64"));
    ns.ip("-6 addr del 2001:db8:7::1/64 dev red0");
    wait_for(&rx, 5, |e| is_addr(e, Op::Del, "red0 2001:db8:7::1/64"));
    ns.ip("addr del 10.7.0.1/16 dev red0");
    // Deleting an IPv4 address makes the kernel flush dependent routes
    // silently, so the watcher sends the delete, then resyncs. The queue
    // keeps the latest state: the resync may have replaced the delete.
    let gone = |e: &CpEvent| match e {
        CpEvent::Resync { addrs, .. } => !addrs
            .iter()
            .any(|a| a.addr == "10.7.0.1".parse::<std::net::IpAddr>().unwrap()),
        _ => false,
    };
    let ev = wait_for(&rx, 5, |e| {
        is_addr(e, Op::Del, "red0 10.7.0.1/16") || gone(e)
    });
    if !gone(&ev) {
        wait_for(&rx, 5, |e| matches!(e, CpEvent::Resync { .. }));
    }
    // lo's addresses are not the VR's.
    ns.ip("addr add 127.0.0.2/8 dev lo");
    ns.ip("addr add 10.8.0.1/16 dev red0");
    wait_for(&rx, 5, |e| {
        assert!(
            !matches!(e, CpEvent::Addr { ifname, .. } if ifname == "lo"),
            "{e:?}"
        );
        is_addr(e, Op::Add, "red0 10.8.0.1/16")
    });
}

#[test]
fn overrun_ends_in_a_resync_equal_to_the_kernel_table() {
    let (ns, _ports) = lab("enobufs");
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    // The smallest receive buffer the kernel allows: 20k routes cannot fit.
    let opts = WatchOptions {
        rcvbuf: Some(1),
        ..WatchOptions::default()
    };
    let w = NsWatcher::start_with(&ns.name, tx, opts).unwrap();
    let mut state = CpState::default();
    state.apply(&rx.recv_timeout(Duration::from_secs(5)).unwrap());

    // 20k routes, some deleted again, in one quick batch.
    let path = std::env::temp_dir().join(format!("{}.batch", ns.name));
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 0..20_000u32 {
        let (a, b) = (i / 256, i % 256);
        match i % 4 {
            0 => writeln!(f, "route add blackhole 12.{a}.{b}.0/24").unwrap(),
            1 => writeln!(f, "route add 10.{a}.{b}.0/24 via 10.0.0.254").unwrap(),
            2 => writeln!(f, "route add 2001:db8:{a:x}:{b:x}::/64 via 2001:db8::fe").unwrap(),
            _ => writeln!(f, "route add 11.{a}.{b}.0/24 via 10.0.0.253").unwrap(),
        }
    }
    for i in (0..20_000u32).step_by(8) {
        let (a, b) = (i / 256, i % 256);
        writeln!(f, "route del blackhole 12.{a}.{b}.0/24").unwrap();
    }
    drop(f);
    let out = std::process::Command::new("ip")
        .args(["-n", &ns.name, "-batch"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mirrored: BTreeSet<&str> = ["red0"].into();
    let want = kernel_routes(&ns, &mirrored);
    assert!(want.len() > 17_000, "batch did not apply: {}", want.len());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        common::drain_into(&rx, &mut state, Duration::from_millis(500));
        if state.routes == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 60 s the events give {} routes, the kernel has {}; stats {:?}",
            state.routes.len(),
            want.len(),
            w.stats()
        );
    }
    let s = w.stats();
    assert!(s.overruns >= 1, "no overrun happened: {s:?}");
    assert!(s.resyncs >= 2, "no resync after the overrun: {s:?}");
    eprintln!("{s:?}");
}

/// With `net.ipv4.nexthop_compat_mode = 0` a route that uses a next-hop
/// object carries only its id: the watcher skips it and counts it, and
/// says so (once); routes with their own next hops still arrive.
#[test]
fn routes_that_name_only_a_next_hop_object_are_counted() {
    let (ns, _ports) = lab("nhcompat0");
    ns.ip("nexthop add id 7 via 10.0.0.250 dev red0");
    common::ip(&format!(
        "netns exec {} sysctl -qw net.ipv4.nexthop_compat_mode=0",
        ns.name
    ));
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let w = NsWatcher::start(&ns.name, tx).unwrap();
    wait_for(&rx, 5, |e| matches!(e, CpEvent::Resync { .. }));
    let before = w.stats().filtered;
    ns.ip("route add 10.8.0.0/16 nhid 7");
    ns.ip("route add 10.9.0.0/16 via 10.0.0.251");
    // The plain route arrives; the one naming the object does not.
    let ev = wait_for(&rx, 5, |e| {
        route(e, Op::Add, "10.9.0.0/16").is_some() || route(e, Op::Add, "10.8.0.0/16").is_some()
    });
    assert!(route(&ev, Op::Add, "10.9.0.0/16").is_some(), "{ev:?}");
    assert!(w.stats().filtered > before, "{:?}", w.stats());
}

/// A tenant flapping its link as fast as `ip` goes costs one dump per
/// `RESYNC_GAP`, not one per flap, and the last state still arrives: a
/// route that went with the link comes back in the resync after it.
#[test]
fn a_flapping_link_costs_one_resync_per_gap() {
    let (ns, _ports) = lab("flap");
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let w = NsWatcher::start(&ns.name, tx).unwrap();
    let mut state = CpState::default();
    state.apply(&rx.recv_timeout(Duration::from_secs(5)).unwrap());
    ns.ip("route add 10.9.0.0/16 via 10.0.0.254");
    let before = w.stats().resyncs;
    let start = Instant::now();
    for _ in 0..30 {
        ns.ip("link set red0 down");
        ns.ip("link set red0 up");
    }
    // The kernel took the route with the link; put it back once, last.
    ns.ip("route add 10.9.0.0/16 via 10.0.0.254");
    let took = start.elapsed();
    std::thread::sleep(vrhost_cp::watcher::RESYNC_GAP * 2);
    common::drain_into(&rx, &mut state, Duration::from_millis(300));
    let resyncs = w.stats().resyncs - before;
    let gaps = (took.as_secs_f64() / vrhost_cp::watcher::RESYNC_GAP.as_secs_f64()).ceil() as u64;
    assert!(
        resyncs >= 1 && resyncs <= gaps + 2,
        "{resyncs} resyncs for 60 link changes in {took:?} ({gaps} gaps)"
    );
    let mirrored: BTreeSet<&str> = ["red0"].into();
    assert_eq!(state.routes, kernel_routes(&ns, &mirrored));
    assert!(state.routes.keys().any(|p| p.to_string() == "10.9.0.0/16"));
}
