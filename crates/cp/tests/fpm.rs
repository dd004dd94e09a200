//! The FPM server against a real FRR zebra (`dplane_fpm_nl`) in a
//! throwaway namespace, and against hand-made frames for reconnects and
//! malformed input (root; FRR installed in /usr/lib/frr).

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{wait_for, Ns};
use vrhost_cp::fpm::{self, FpmOptions};
use vrhost_cp::{ensure_netns, CpEvent, IpPrefix, Op, RouteTarget};

/// FRR daemons of one test, killed on drop, and their directory.
struct Frr {
    dir: PathBuf,
    children: Vec<(&'static str, Child)>,
}

impl Frr {
    fn new(tag: &str) -> Frr {
        let dir = std::env::temp_dir().join(format!("cpt-frr-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The daemons drop to user frr: let them write pid files and sockets.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        Frr {
            dir,
            children: Vec::new(),
        }
    }

    /// Starts `/usr/lib/frr/DAEMON` in `ns` with config `conf`.
    fn start(&mut self, ns: &str, daemon: &'static str, conf: &str, extra: &[&str]) {
        let bin = format!("/usr/lib/frr/{daemon}");
        assert!(
            Path::new(&bin).exists(),
            "{bin} missing: install FRR (apt-get install frr)"
        );
        let conf_path = self.dir.join(format!("{daemon}.conf"));
        std::fs::write(&conf_path, conf).unwrap();
        let d = self.dir.display().to_string();
        let log = std::fs::File::create(self.dir.join(format!("{daemon}.log"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns, &bin])
            .args(extra)
            .args(["-f", &conf_path.display().to_string()])
            .args(["-i", &format!("{d}/{daemon}.pid")])
            .args(["-z", &format!("{d}/zserv.api")])
            .args(["--vty_socket", &d, "-P", "0"])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.children.push((daemon, child));
    }

    /// Starts zebra in `ns` and waits for its API socket (staticd needs it).
    fn start_zebra(&mut self, ns: &str, conf: &str, extra: &[&str]) {
        self.start(ns, "zebra", conf, extra);
        let zserv = self.dir.join("zserv.api");
        let t0 = Instant::now();
        while !zserv.exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "zebra did not start: {}",
                self.log("zebra")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops a daemon cleanly (SIGTERM: staticd then withdraws its routes;
    /// after SIGKILL zebra would keep them for a while).
    fn terminate(&mut self, daemon: &str) {
        for (name, c) in self.children.iter_mut() {
            if *name == daemon {
                let _ = Command::new("kill").arg(c.id().to_string()).status();
                let _ = c.wait();
            }
        }
    }

    /// Runs vtysh commands in configuration mode against these daemons.
    fn configure(&self, ns: &str, lines: &[&str]) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, "vtysh", "--vty_socket"])
            .arg(&self.dir)
            .args(["-c", "configure terminal"]);
        for l in lines {
            cmd.args(["-c", l]);
        }
        let out = cmd.output().expect("run vtysh");
        assert!(
            out.status.success(),
            "vtysh {lines:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn log(&self, daemon: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{daemon}.log"))).unwrap_or_default()
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        for (_, c) in self.children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn p(s: &str) -> IpPrefix {
    s.parse().unwrap()
}

fn via(gw: &str) -> RouteTarget {
    RouteTarget::Via {
        gw: gw.parse::<IpAddr>().unwrap(),
        ifname: None,
    }
}

fn is_route(e: &CpEvent, want_op: Op, want: IpPrefix) -> Option<RouteTarget> {
    match e {
        CpEvent::Route { op, prefix, target } if *op == want_op && *prefix == want => {
            Some(target.clone())
        }
        _ => None,
    }
}

/// zebra (`dplane_fpm_nl`, with `fpm_conf` added to its config) and
/// staticd (with `statics`) in namespace `ns`, which has 192.0.2.1/24 and
/// 2001:db8::1/64 on a veth, feeding an FPM server listening there.
fn zebra_with_statics(
    ns: &Ns,
    fpm_conf: &str,
    statics: &str,
) -> (Frr, fpm::FpmServer, vrhost_cp::EventReceiver) {
    ensure_netns(&ns.name).unwrap();
    // zebra needs a connected subnet to resolve the static next hops.
    ns.ip("link add v0 type veth peer name v1");
    ns.ip("addr add 192.0.2.1/24 dev v0");
    ns.ip("-6 addr add 2001:db8::1/64 dev v0 nodad");
    ns.ip("link set v0 up");
    ns.ip("link set v1 up");
    // zebra connects to 127.0.0.1 of its own namespace: listen there.
    let listener = vrhost_io::netns::run_in(&ns.name, || TcpListener::bind("127.0.0.1:0"))
        .unwrap()
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let server = fpm::serve_listener(listener, tx, FpmOptions::default()).unwrap();

    let mut frr = Frr::new(&ns.name);
    // FRR 8.4: the fpm commands are top-level.
    let zebra_conf = format!("hostname z\nfpm address 127.0.0.1 port {port}\n{fpm_conf}");
    frr.start_zebra(&ns.name, &zebra_conf, &["-M", "dplane_fpm_nl"]);
    frr.start(&ns.name, "staticd", statics, &[]);
    (frr, server, rx)
}

#[test]
fn zebra_routes_arrive_over_fpm() {
    let ns = Ns::unique("fpm");
    let statics = "hostname s\n\
        ip route 10.20.0.0/16 192.0.2.254\n\
        ip route 10.21.0.0/16 blackhole\n\
        ipv6 route 2001:db8:20::/48 2001:db8::fe\n\
        ipv6 route 2001:db8:21::/48 blackhole\n";
    // Routes carry their next hops inline.
    let (mut frr, server, rx) = zebra_with_statics(&ns, "no fpm use-next-hop-groups\n", statics);

    let want = [
        (p("10.20.0.0/16"), via("192.0.2.254")),
        (p("10.21.0.0/16"), RouteTarget::Blackhole),
        (p("2001:db8:20::/48"), via("2001:db8::fe")),
        (p("2001:db8:21::/48"), RouteTarget::Blackhole),
    ];
    for (prefix, target) in &want {
        let ev = wait_for(&rx, 30, |e| is_route(e, Op::Add, *prefix).is_some());
        assert_eq!(
            is_route(&ev, Op::Add, *prefix).as_ref(),
            Some(target),
            "{prefix}; zebra log: {}",
            frr.log("zebra")
        );
    }
    // zebra also sends its connected routes (interface only: skipped) and
    // nothing malformed.
    let s = server.stats();
    assert_eq!(s.malformed, 0, "{s:?}");
    assert!(s.connections >= 1 && s.frames >= 4, "{s:?}");

    // A withdrawal through the CLI, then a change of next hop.
    frr.configure(&ns.name, &["no ip route 10.21.0.0/16 blackhole"]);
    let ev = wait_for(&rx, 30, |e| matches!(e, CpEvent::Route { .. }));
    assert_eq!(
        is_route(&ev, Op::Del, p("10.21.0.0/16")),
        Some(RouteTarget::Blackhole)
    );
    frr.configure(
        &ns.name,
        &[
            "ip route 10.20.0.0/16 192.0.2.253",
            "no ip route 10.20.0.0/16 192.0.2.254",
        ],
    );
    wait_for(&rx, 30, |e| {
        is_route(e, Op::Add, p("10.20.0.0/16")) == Some(via("192.0.2.253"))
    });
    // staticd going away makes zebra delete the rest.
    frr.terminate("staticd");
    for prefix in ["10.20.0.0/16", "2001:db8:20::/48", "2001:db8:21::/48"] {
        wait_for(&rx, 30, |e| is_route(e, Op::Del, p(prefix)).is_some());
    }
    assert!(server
        .routes()
        .iter()
        .all(|(p, _)| !want.iter().any(|(w, _)| w == p)));
}

#[test]
fn zebra_multipath_arrives_through_next_hop_groups() {
    let ns = Ns::unique("fpmnhg");
    // Two static next hops for one prefix: zebra installs one ECMP route.
    let statics = "hostname s\n\
        ip route 10.30.0.0/16 192.0.2.253\n\
        ip route 10.30.0.0/16 192.0.2.254\n\
        ip route 10.31.0.0/16 192.0.2.254\n\
        ipv6 route 2001:db8:30::/48 2001:db8::fd\n\
        ipv6 route 2001:db8:30::/48 2001:db8::fe\n";
    // zebra's default: next-hop groups as objects, routes naming them.
    let (mut frr, server, rx) = zebra_with_statics(&ns, "", statics);
    let ecmp = |gws: &[&str]| {
        RouteTarget::Multipath(
            gws.iter()
                .map(|g| vrhost_cp::Hop {
                    gw: g.parse().unwrap(),
                    ifname: None,
                    weight: 1,
                })
                .collect(),
        )
    };
    let want = [
        (p("10.30.0.0/16"), ecmp(&["192.0.2.253", "192.0.2.254"])),
        (p("10.31.0.0/16"), via("192.0.2.254")),
        (
            p("2001:db8:30::/48"),
            ecmp(&["2001:db8::fd", "2001:db8::fe"]),
        ),
    ];
    for (prefix, target) in &want {
        let ev = wait_for(&rx, 30, |e| is_route(e, Op::Add, *prefix).is_some());
        let mut got = is_route(&ev, Op::Add, *prefix).unwrap();
        if let RouteTarget::Multipath(h) = &mut got {
            h.sort();
        }
        assert_eq!(&got, target, "{prefix}; zebra log: {}", frr.log("zebra"));
    }
    let s = server.stats();
    assert_eq!(s.malformed, 0, "{s:?}");
    assert!(
        s.next_hop_objects >= 3,
        "zebra sent its groups as objects: {s:?}"
    );

    // One next hop goes: the route follows, to the one left.
    frr.configure(&ns.name, &["no ip route 10.30.0.0/16 192.0.2.253"]);
    wait_for(&rx, 30, |e| {
        is_route(e, Op::Add, p("10.30.0.0/16")) == Some(via("192.0.2.254"))
    });
    // And back.
    frr.configure(&ns.name, &["ip route 10.30.0.0/16 192.0.2.253"]);
    wait_for(
        &rx,
        30,
        |e| matches!(is_route(e, Op::Add, p("10.30.0.0/16")), Some(RouteTarget::Multipath(h)) if h.len() == 2),
    );
    frr.terminate("staticd");
    for prefix in ["10.30.0.0/16", "10.31.0.0/16", "2001:db8:30::/48"] {
        wait_for(&rx, 30, |e| is_route(e, Op::Del, p(prefix)).is_some());
    }
}

/// FRR's own ECMP through the kernel: zebra (next-hop objects on, its
/// default) installs a static route with two next hops in a namespace whose
/// interface is a TAP mirror, and the namespace watcher passes it on as one
/// multipath route; losing a next hop leaves the other.
#[test]
fn zebra_multipath_reaches_the_namespace_watcher() {
    let ns = Ns::unique("nswecmp");
    ensure_netns(&ns.name).unwrap();
    // Held open: the TAP has carrier, so zebra counts its subnet as up.
    let _tap = vrhost_cp::mirror_interface(&ns.name, "red0", [2, 0, 0, 0, 0, 1], 1500, 1).unwrap();
    ns.ip("addr add 10.0.0.1/24 dev red0");
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let _w = vrhost_cp::NsWatcher::start(&ns.name, tx).unwrap();
    wait_for(&rx, 5, |e| matches!(e, CpEvent::Resync { .. }));
    let mut frr = Frr::new(&ns.name);
    frr.start_zebra(&ns.name, "hostname z\n", &[]);
    let statics = "hostname s\n\
        ip route 10.60.0.0/16 10.0.0.253\n\
        ip route 10.60.0.0/16 10.0.0.254\n";
    frr.start(&ns.name, "staticd", statics, &[]);
    let want = "nexthop via 10.0.0.253 dev red0 weight 1 nexthop via 10.0.0.254 dev red0 weight 1";
    wait_for(&rx, 30, |e| {
        is_route(e, Op::Add, p("10.60.0.0/16")).is_some_and(|t| t.to_string() == want)
    });
    frr.configure(&ns.name, &["no ip route 10.60.0.0/16 10.0.0.253"]);
    wait_for(&rx, 30, |e| {
        is_route(e, Op::Add, p("10.60.0.0/16"))
            .is_some_and(|t| t.to_string() == "via 10.0.0.254 dev red0")
    });
}

#[test]
fn routes_follow_their_next_hop_objects() {
    use vrhost_cp::nexthop::{encode, NextHop};
    let (server, rx, addr) = local_server(Duration::from_secs(60));
    let mut c = TcpStream::connect(addr).unwrap();
    let single = |gw: &str| NextHop::Single {
        gw: Some(gw.parse().unwrap()),
        oif: Some(2),
    };
    let by_id = |prefix: &str, id: u32| fpm::encode_route_by_next_hop(p(prefix), id);
    // A route naming group 10 before the group exists: held, not installed.
    let mut msgs = by_id("10.40.0.0/16", 10);
    msgs.extend(encode(1, &single("192.0.2.11"), false));
    msgs.extend(encode(2, &single("192.0.2.12"), false));
    msgs.extend(encode(3, &single("192.0.2.13"), false));
    c.write_all(&fpm::frame(&msgs).unwrap()).unwrap();
    // The group arrives with weights: the route resolves.
    let mut msgs = encode(10, &NextHop::Group(vec![(1, 1), (2, 3)]), false);
    msgs.extend(by_id("10.41.0.0/16", 10));
    msgs.extend(by_id("10.42.0.0/16", 3));
    c.write_all(&fpm::frame(&msgs).unwrap()).unwrap();
    let two = |a: &str, wa: u16, b: &str, wb: u16| {
        RouteTarget::Multipath(vec![
            vrhost_cp::Hop {
                gw: a.parse().unwrap(),
                ifname: None,
                weight: wa,
            },
            vrhost_cp::Hop {
                gw: b.parse().unwrap(),
                ifname: None,
                weight: wb,
            },
        ])
    };
    for prefix in ["10.40.0.0/16", "10.41.0.0/16"] {
        let ev = wait_for(&rx, 5, |e| is_route(e, Op::Add, p(prefix)).is_some());
        assert_eq!(
            is_route(&ev, Op::Add, p(prefix)),
            Some(two("192.0.2.11", 1, "192.0.2.12", 3))
        );
    }
    wait_for(&rx, 5, |e| {
        is_route(e, Op::Add, p("10.42.0.0/16")) == Some(via("192.0.2.13"))
    });
    assert!(server.stats().unresolved >= 1, "{:?}", server.stats());
    // The group changes: both routes that use it follow, the other does not.
    c.write_all(&fpm::frame(&encode(10, &NextHop::Group(vec![(1, 1), (3, 1)]), false)).unwrap())
        .unwrap();
    for prefix in ["10.40.0.0/16", "10.41.0.0/16"] {
        wait_for(&rx, 5, |e| {
            is_route(e, Op::Add, p(prefix)) == Some(two("192.0.2.11", 1, "192.0.2.13", 1))
        });
    }
    // A member changes its gateway: the group's routes follow too.
    c.write_all(&fpm::frame(&encode(1, &single("192.0.2.21"), false)).unwrap())
        .unwrap();
    wait_for(&rx, 5, |e| {
        is_route(e, Op::Add, p("10.41.0.0/16")) == Some(two("192.0.2.13", 1, "192.0.2.21", 1))
    });
    // The group goes: its routes are withdrawn, counted as unresolved.
    let before = server.stats().unresolved;
    c.write_all(&fpm::frame(&encode(10, &NextHop::Group(vec![]), true)).unwrap())
        .unwrap();
    for prefix in ["10.40.0.0/16", "10.41.0.0/16"] {
        wait_for(&rx, 5, |e| is_route(e, Op::Del, p(prefix)).is_some());
    }
    assert!(server.stats().unresolved >= before + 2);
    let held: Vec<IpPrefix> = server.routes().into_iter().map(|(p, _)| p).collect();
    assert_eq!(held, [p("10.42.0.0/16")]);
    assert_eq!(server.stats().malformed, 0);
}

/// A loopback server with a short sweep and a client to drive it.
fn local_server(sweep: Duration) -> (fpm::FpmServer, vrhost_cp::EventReceiver, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let opts = FpmOptions {
        sweep_after: sweep,
        ..FpmOptions::default()
    };
    let server = fpm::serve_listener(listener, tx, opts).unwrap();
    let addr = server.local_addr();
    (server, rx, addr)
}

fn send_routes(c: &mut TcpStream, routes: &[(Op, &str, RouteTarget)]) {
    let mut msgs = Vec::new();
    for (op, prefix, target) in routes {
        msgs.extend(fpm::encode_route(*op, p(prefix), target));
    }
    c.write_all(&fpm::frame(&msgs).unwrap()).unwrap();
}

#[test]
fn reconnect_sweeps_routes_not_resent() {
    let (server, rx, addr) = local_server(Duration::from_millis(500));
    let mut c = TcpStream::connect(addr).unwrap();
    send_routes(
        &mut c,
        &[
            (Op::Add, "10.1.0.0/16", via("192.0.2.1")),
            (Op::Add, "10.2.0.0/16", RouteTarget::Blackhole),
            (Op::Add, "2001:db8:1::/48", via("2001:db8::1")),
        ],
    );
    wait_for(&rx, 5, |e| {
        is_route(e, Op::Add, p("2001:db8:1::/48")).is_some()
    });
    drop(c);
    std::thread::sleep(Duration::from_millis(300));
    // Routes stay while zebra is away.
    assert_eq!(server.routes().len(), 3);

    // zebra is back and resends its table, which lost 10.2.0.0/16.
    let mut c = TcpStream::connect(addr).unwrap();
    send_routes(
        &mut c,
        &[
            (Op::Add, "10.1.0.0/16", via("192.0.2.1")),
            (Op::Add, "2001:db8:1::/48", via("2001:db8::1")),
        ],
    );
    let ev = wait_for(&rx, 5, |e| matches!(e, CpEvent::Route { .. }));
    // Unchanged routes are not re-announced; the first event is the sweep.
    assert_eq!(
        is_route(&ev, Op::Del, p("10.2.0.0/16")),
        Some(RouteTarget::Blackhole)
    );
    assert_eq!(server.stats().swept, 1);
    assert_eq!(server.routes().len(), 2);
    // Deletes work on the new connection.
    send_routes(&mut c, &[(Op::Del, "10.1.0.0/16", via("192.0.2.1"))]);
    wait_for(&rx, 5, |e| is_route(e, Op::Del, p("10.1.0.0/16")).is_some());
}

/// After a restart of vrhost: the routes the last run held are installed
/// at once (before zebra is back), zebra's resend keeps them without a
/// single withdrawal, and the first session's sweep takes only what zebra
/// no longer has. Without any session, the grace period withdraws them.
#[test]
fn restored_routes_stay_until_the_first_session_resent_its_table() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let opts = FpmOptions {
        sweep_after: Duration::from_millis(300),
        restored: vec![
            (p("10.1.0.0/16"), via("192.0.2.1")),
            (p("10.2.0.0/16"), RouteTarget::Blackhole),
        ],
        ..FpmOptions::default()
    };
    let server = fpm::serve_listener(listener, tx, opts).unwrap();
    // One snapshot, first.
    match wait_for(&rx, 5, |_| true) {
        CpEvent::Resync { mut routes, addrs } => {
            routes.sort_by_key(|(p, _)| *p);
            assert_eq!(
                routes,
                [
                    (p("10.1.0.0/16"), via("192.0.2.1")),
                    (p("10.2.0.0/16"), RouteTarget::Blackhole)
                ]
            );
            assert!(addrs.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let mut c = TcpStream::connect(server.local_addr()).unwrap();
    send_routes(&mut c, &[(Op::Add, "10.1.0.0/16", via("192.0.2.1"))]);
    // The resent route is unchanged (no event); the sweep withdraws the other.
    let ev = wait_for(&rx, 5, |e| matches!(e, CpEvent::Route { .. }));
    assert_eq!(
        is_route(&ev, Op::Del, p("10.2.0.0/16")),
        Some(RouteTarget::Blackhole)
    );
    assert_eq!(server.routes(), [(p("10.1.0.0/16"), via("192.0.2.1"))]);
    drop(c);

    // No zebra at all: the grace period withdraws them.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let opts = FpmOptions {
        restored: vec![(p("10.3.0.0/16"), RouteTarget::Unreachable)],
        restored_grace: Duration::from_millis(400),
        ..FpmOptions::default()
    };
    let server = fpm::serve_listener(listener, tx, opts).unwrap();
    wait_for(
        &rx,
        5,
        |e| matches!(e, CpEvent::Resync { routes, .. } if routes.len() == 1),
    );
    assert_eq!(server.routes().len(), 1);
    wait_for(&rx, 5, |e| is_route(e, Op::Del, p("10.3.0.0/16")).is_some());
    assert!(server.routes().is_empty());
    assert_eq!(server.stats().swept, 1);
}

#[test]
fn malformed_frames_close_the_connection_and_are_counted() {
    let (server, rx, addr) = local_server(Duration::from_secs(60));
    for garbage in [
        vec![2u8, 1, 0, 8, 0, 0, 0, 0],   // version 2
        vec![1u8, 2, 0, 8, 0, 0, 0, 0],   // type 2 (protobuf)
        vec![1u8, 1, 0, 2],               // length shorter than the header
        fpm::frame(&[0xff; 20]).unwrap(), // netlink garbage
    ] {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(&garbage).unwrap();
        let mut buf = [0u8; 1];
        // The server closes: EOF (or a reset).
        assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));
    }
    let t0 = Instant::now();
    while server.stats().malformed < 4 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The server still works.
    let mut c = TcpStream::connect(addr).unwrap();
    send_routes(
        &mut c,
        &[(Op::Add, "10.9.0.0/16", RouteTarget::Unreachable)],
    );
    wait_for(&rx, 5, |e| is_route(e, Op::Add, p("10.9.0.0/16")).is_some());
}

/// Waits until `stats` says what `done` wants, or fails after 5 s.
fn wait_stats(server: &fpm::FpmServer, done: impl Fn(&fpm::FpmStats) -> bool) {
    let t0 = Instant::now();
    while !done(&server.stats()) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the server has closed `c` (EOF or reset within 5 s).
fn closed(c: &mut TcpStream) -> bool {
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1];
    matches!(c.read(&mut buf), Ok(0) | Err(_))
}

#[test]
fn a_stranger_cannot_supersede_the_session_or_sweep_its_routes() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let opts = FpmOptions {
        sweep_after: Duration::from_millis(300),
        candidate_timeout: Duration::from_secs(1),
        max_connections: 3,
        ..FpmOptions::default()
    };
    let server = fpm::serve_listener(listener, tx, opts).unwrap();
    let addr = server.local_addr();
    let mut zebra = TcpStream::connect(addr).unwrap();
    send_routes(&mut zebra, &[(Op::Add, "10.1.0.0/16", via("192.0.2.1"))]);
    wait_for(&rx, 5, |e| is_route(e, Op::Add, p("10.1.0.0/16")).is_some());

    // Silent strangers: nothing is superseded or swept while they wait,
    // and past the candidate timeout they are closed.
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0xff; 64]).unwrap();
    assert!(closed(&mut garbage), "garbage closes the stranger only");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(server.routes().len(), 1);
    assert_eq!(server.stats().swept, 0);
    assert!(closed(&mut silent));
    wait_stats(&server, |s| s.silent == 1);
    assert_eq!(server.routes().len(), 1);

    // More connections than allowed are refused at once.
    let _a = TcpStream::connect(addr).unwrap();
    let _b = TcpStream::connect(addr).unwrap();
    let mut c = TcpStream::connect(addr).unwrap();
    assert!(closed(&mut c));
    wait_stats(&server, |s| s.refused == 1);

    // The session still feeds the VR.
    send_routes(&mut zebra, &[(Op::Add, "10.2.0.0/16", via("192.0.2.1"))]);
    wait_for(&rx, 5, |e| is_route(e, Op::Add, p("10.2.0.0/16")).is_some());
    assert_eq!(server.routes().len(), 2);
}

#[test]
fn only_allowed_peers_may_connect() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, _rx) = vrhost_cp::channel(1 << 20);
    let opts = FpmOptions {
        allowed_peers: vec!["127.0.0.2".parse().unwrap()],
        ..FpmOptions::default()
    };
    let server = fpm::serve_listener(listener, tx, opts).unwrap();
    let mut c = TcpStream::connect(server.local_addr()).unwrap();
    send_routes(&mut c, &[(Op::Add, "10.1.0.0/16", via("192.0.2.1"))]);
    assert!(closed(&mut c));
    wait_stats(&server, |s| s.refused == 1);
    assert!(server.routes().is_empty());
    assert_eq!(server.stats().connections, 0);
}

/// Routes that name a next-hop object the sender never defines are kept
/// until it does, but no more of them than the routes allowed: past
/// `max_routes` they are refused and counted, and once the object comes
/// only those kept are installed.
#[test]
fn routes_naming_an_unknown_object_are_held_to_the_route_limit() {
    use vrhost_cp::nexthop::{encode, NextHop};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, _rx) = vrhost_cp::channel(1 << 20);
    let opts = FpmOptions {
        max_routes: 3,
        ..FpmOptions::default()
    };
    let server = fpm::serve_listener(listener, tx, opts).unwrap();
    let mut c = TcpStream::connect(server.local_addr()).unwrap();
    let mut msgs = Vec::new();
    for i in 0..10 {
        msgs.extend(fpm::encode_route_by_next_hop(
            p(&format!("10.{i}.0.0/16")),
            7,
        ));
    }
    c.write_all(&fpm::frame(&msgs).unwrap()).unwrap();
    wait_stats(&server, |s| s.over_limit == 7);
    assert!(server.routes().is_empty(), "none resolves yet");
    let gw = NextHop::Single {
        gw: Some("192.0.2.7".parse().unwrap()),
        oif: Some(2),
    };
    c.write_all(&fpm::frame(&encode(7, &gw, false)).unwrap())
        .unwrap();
    wait_stats(&server, |_| server.routes().len() == 3);
    let held: Vec<String> = server.routes().iter().map(|(p, _)| p.to_string()).collect();
    assert_eq!(held, ["10.0.0.0/16", "10.1.0.0/16", "10.2.0.0/16"]);
}

#[test]
fn a_reconnect_at_the_route_limit_loses_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let opts = FpmOptions {
        sweep_after: Duration::from_millis(300),
        max_routes: 3,
        ..FpmOptions::default()
    };
    let server = fpm::serve_listener(listener, tx, opts).unwrap();
    let addr = server.local_addr();
    let routes = |from: u8| -> Vec<(Op, String, RouteTarget)> {
        (from..from + 3)
            .map(|i| (Op::Add, format!("10.{i}.0.0/16"), via("192.0.2.1")))
            .collect()
    };
    let send = |c: &mut TcpStream, rs: &[(Op, String, RouteTarget)]| {
        let rs: Vec<(Op, &str, RouteTarget)> = rs
            .iter()
            .map(|(o, p, t)| (*o, p.as_str(), t.clone()))
            .collect();
        send_routes(c, &rs);
    };
    let mut first = TcpStream::connect(addr).unwrap();
    send(&mut first, &routes(1));
    wait_for(&rx, 5, |e| is_route(e, Op::Add, p("10.3.0.0/16")).is_some());
    // zebra comes back with a different full table of 3: all of it is
    // taken, and the old routes are swept.
    drop(first);
    let mut second = TcpStream::connect(addr).unwrap();
    send(&mut second, &routes(4));
    wait_for(&rx, 5, |e| is_route(e, Op::Add, p("10.6.0.0/16")).is_some());
    wait_stats(&server, |s| s.swept == 3);
    assert_eq!(server.stats().over_limit, 0);
    let held: Vec<String> = server.routes().iter().map(|(p, _)| p.to_string()).collect();
    assert_eq!(held, ["10.4.0.0/16", "10.5.0.0/16", "10.6.0.0/16"]);
    // Past the limit, the session's new prefixes are refused and counted.
    send_routes(&mut second, &[(Op::Add, "10.7.0.0/16", via("192.0.2.1"))]);
    wait_stats(&server, |s| s.over_limit == 1);
}

/// A sender that reconnects before its sweep cannot pile up tables: each
/// session's new prefixes past `max_routes` withdraw the older sessions'
/// routes it did not resend, so the table never holds more than the limit
/// and the newest session's routes are all kept.
#[test]
fn reconnects_cannot_grow_the_table_past_the_route_limit() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, rx) = vrhost_cp::channel(1 << 20);
    let opts = FpmOptions {
        sweep_after: Duration::from_secs(3600),
        max_routes: 3,
        ..FpmOptions::default()
    };
    let server = fpm::serve_listener(listener, tx, opts).unwrap();
    let addr = server.local_addr();
    let table =
        |from: u8| -> Vec<String> { (from..from + 3).map(|i| format!("10.{i}.0.0/16")).collect() };
    for (n, from) in [1u8, 4, 7, 10].into_iter().enumerate() {
        let mut c = TcpStream::connect(addr).unwrap();
        let mut prefixes = table(from);
        // Each session also resends one prefix of the one before it.
        if from > 1 {
            prefixes[0] = format!("10.{}.0.0/16", from - 1);
        }
        let routes: Vec<(Op, &str, RouteTarget)> = prefixes
            .iter()
            .map(|p| (Op::Add, p.as_str(), via("192.0.2.1")))
            .collect();
        send_routes(&mut c, &routes);
        let last = p(&prefixes[2]);
        wait_for(&rx, 5, |e| is_route(e, Op::Add, last).is_some());
        let mut held: Vec<String> = server.routes().iter().map(|(p, _)| p.to_string()).collect();
        held.sort();
        let mut want = prefixes.clone();
        want.sort();
        assert_eq!(held, want, "session {n}");
        assert_eq!(server.stats().over_limit, 0);
        drop(c);
    }
    // Three sessions each left two routes the next did not resend.
    assert_eq!(server.stats().swept, 6);
}
