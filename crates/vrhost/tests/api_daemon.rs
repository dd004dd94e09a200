//! The management API of a real `vrhost run`: every resource through the
//! real data plane's backend, tenant tokens confined to their own VR, config
//! reload, and `vrhost ctl` as a user runs it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use pcap_file::pcap::{PcapPacket, PcapWriter};
use vrhost_api::types::{
    BulkRoutes, IfaceAddr, InterfaceSpec, MacAddr, Neighbor, Outcome, Prefix, Route, VrSpec,
};
use vrhost_api::{hash_token, ApiError, Client};

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");
const ADMIN: &str = "admin-secret-token";
const RED: &str = "red-secret-token";
const BLUE: &str = "blue-secret-token";

/// Kills the daemon even when the test fails.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

fn config(blue_extra: &str) -> String {
    format!(
        r#"
[api]
socket = "api.sock"
admin_token_sha256 = "{admin}"

[[port]]
name = "p0"
driver = "memory"
rx = "in.pcap"
mac = "02:00:00:00:00:01"

[[port]]
name = "p1"
driver = "memory"
rx = "in.pcap"
mac = "02:00:00:00:00:02"

[[router]]
name = "red"
api_token_sha256 = "{red}"
  [[router.interface]]
  name = "red0"
  port = "p0"
  addresses = ["10.0.0.1/24"]

[[router]]
name = "blue"
api_token_sha256 = "{blue}"
  [[router.interface]]
  name = "blue0"
  port = "p1"
  addresses = ["10.0.0.1/24"]
{blue_extra}"#,
        admin = hash_token(ADMIN),
        red = hash_token(RED),
        blue = hash_token(BLUE),
    )
}

/// One UDP frame from 10.0.0.2 to 10.0.0.1's subnet, to each port's MAC.
fn write_pcap(path: &Path) {
    let mut w = PcapWriter::new(std::fs::File::create(path).expect("pcap")).expect("pcap");
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[6..12].copy_from_slice(&[0x02, 0xaa, 0, 0, 0, 0x02]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = [
        0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 9,
    ];
    f[14..34].copy_from_slice(&ip);
    let sum = !ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum::<u32>()
        .wrapping_add(0);
    let folded = ((sum & 0xffff) + (sum >> 16)) as u16;
    f[24..26].copy_from_slice(&folded.to_be_bytes());
    w.write_packet(&PcapPacket::new(Duration::ZERO, 60, &f))
        .expect("write");
}

fn start(dir: &Path) -> (Daemon, std::path::PathBuf) {
    start_with(dir, &config(""))
}

/// `vrhost run` on config `text` in `dir`; returns once the API answers.
fn start_with(dir: &Path, text: &str) -> (Daemon, std::path::PathBuf) {
    write_pcap(&dir.join("in.pcap"));
    let cfg = dir.join("vrhost.toml");
    std::fs::write(&cfg, text).expect("config");
    let child = Command::new(VRHOST)
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        .spawn()
        .expect("start vrhost run");
    let daemon = Daemon(child);
    let socket = dir.join("api.sock");
    wait_until(20, "the API never came up", || {
        Client::unix(&socket, Some(ADMIN.into())).vrs().is_ok()
    });
    (daemon, socket)
}

/// Polls `ready` every 50 ms until it holds; fails saying `what` after
/// `secs` seconds.
fn wait_until(secs: u64, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn api_err<T: std::fmt::Debug>(r: Result<T, vrhost_api::ClientError>) -> ApiError {
    r.expect_err("should fail")
        .api()
        .cloned()
        .expect("an API error, not a transport one")
}

#[test]
fn every_resource_through_the_running_router() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_d, socket) = start(dir.path());
    let admin = Client::unix(&socket, Some(ADMIN.into()));
    let red = Client::unix(&socket, Some(RED.into()));

    let names: Vec<String> = admin
        .vrs()
        .expect("vrs")
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["red", "blue"]);

    // Routes: single, idempotent, bulk, paged, deleted.
    let p: Prefix = "192.0.2.0/24".parse().expect("prefix");
    let gw = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(
        red.add_route("red", &Route::via(p, gw), false)
            .expect("add"),
        Outcome::Created
    );
    assert_eq!(
        red.add_route("red", &Route::via(p, gw), false)
            .expect("add"),
        Outcome::Unchanged
    );
    let other = Route::via(p, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)));
    assert!(matches!(
        api_err(red.add_route("red", &other, false)),
        ApiError::Conflict(_)
    ));
    assert_eq!(
        red.add_route("red", &other, true).expect("replace"),
        Outcome::Replaced
    );
    let off_link = Route::via(p, IpAddr::V4(Ipv4Addr::new(172, 16, 0, 1)));
    assert!(matches!(
        api_err(red.add_route("red", &off_link, true)),
        ApiError::BadRequest { .. }
    ));
    let bulk = BulkRoutes {
        add: (0..1000u32)
            .map(|i| {
                let a = Ipv4Addr::from(0x6400_0000 + (i << 8));
                Route::via(Prefix::new(IpAddr::V4(a), 24).expect("prefix"), gw)
            })
            .collect(),
        ..BulkRoutes::default()
    };
    let r = red.bulk_routes("red", &bulk).expect("bulk");
    assert_eq!((r.created, r.unchanged), (1000, 0));
    let r = red.bulk_routes("red", &bulk).expect("bulk again");
    assert_eq!((r.created, r.unchanged), (0, 1000), "idempotent");
    let page = red.routes("red", 0, 10).expect("page");
    assert_eq!(page.routes.len(), 10);
    // 1000 + 192.0.2.0/24 + connected, local and broadcast of 10.0.0.1/24.
    assert_eq!(page.total, 1004);
    assert_eq!(
        red.delete_route("red", p, false).expect("del"),
        Outcome::Deleted
    );
    assert_eq!(
        red.delete_route("red", p, true).expect("del"),
        Outcome::Missing
    );
    let connected: Prefix = "10.0.0.0/24".parse().expect("prefix");
    assert!(matches!(
        api_err(red.delete_route("red", connected, false)),
        ApiError::Conflict(_)
    ));

    // Addresses and neighbours.
    let a: IfaceAddr = "10.5.0.1/24".parse().expect("addr");
    assert_eq!(
        red.add_address("red", "red0", a).expect("addr"),
        Outcome::Created
    );
    assert!(red.addresses("red", "red0").expect("list").contains(&a));
    assert_eq!(
        red.delete_address("red", "red0", a, false).expect("del"),
        Outcome::Deleted
    );
    let n = Neighbor {
        address: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        mac: MacAddr([0x02, 0xaa, 0, 0, 0, 0x02]),
        interface: None,
    };
    assert_eq!(
        red.add_neighbor("red", &n).expect("neigh"),
        Outcome::Created
    );
    assert_eq!(
        red.add_neighbor("red", &n).expect("neigh"),
        Outcome::Unchanged
    );
    let listed = red.neighbors("red").expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].interface.as_deref(), Some("red0"));
    assert_eq!(
        red.delete_neighbor("red", n.address, false).expect("del"),
        Outcome::Deleted
    );

    // An interface added to red while it runs, used by a route, then removed.
    let extra = InterfaceSpec {
        inner_vlan: None,
        vlan_tpid: Default::default(),
        urpf: Default::default(),
        filter_in: None,
        filter_out: None,
        name: "red9".into(),
        port: "p1".into(),
        vlan: Some(9),
        mac: None,
        mtu: None,
        addresses: vec!["10.9.0.1/24".parse().expect("addr")],
    };
    assert_eq!(
        admin.add_interface("red", &extra).expect("iface"),
        Outcome::Created
    );
    assert_eq!(
        admin.add_interface("red", &extra).expect("iface"),
        Outcome::Unchanged
    );
    assert!(red
        .vr("red")
        .expect("red")
        .interfaces
        .iter()
        .any(|i| i.name == "red9"));
    let via9 = Route::via(
        "198.18.0.0/15".parse().expect("prefix"),
        "10.9.0.2".parse().expect("gw"),
    );
    assert_eq!(
        red.add_route("red", &via9, false).expect("route"),
        Outcome::Created
    );
    assert!(matches!(
        api_err(admin.delete_interface("red", "red9", false)),
        ApiError::Conflict(_)
    ));
    // A tenant cannot add or remove interfaces, even on its own VR.
    assert!(matches!(
        api_err(red.add_interface("red", &extra)),
        ApiError::Forbidden
    ));
    red.delete_route("red", via9.prefix, false)
        .expect("del route");
    assert_eq!(
        admin.delete_interface("red", "red9", false).expect("del"),
        Outcome::Deleted
    );
    assert_eq!(
        admin.delete_interface("red", "red9", true).expect("del"),
        Outcome::Missing
    );

    // Counters move: the memory port replays frames into red.
    wait_until(10, "no traffic counted", || {
        red.vr_counters("red").expect("counters").total.rx_packets > 0
    });
    assert_eq!(admin.ports().expect("ports").len(), 2);
    assert_eq!(admin.workers().expect("workers").len(), 1);

    // A VR created and deleted at run time while red forwards.
    let spec = VrSpec {
        name: "green".into(),
        interfaces: vec![InterfaceSpec {
            inner_vlan: None,
            vlan_tpid: Default::default(),
            urpf: Default::default(),
            filter_in: None,
            filter_out: None,
            name: "green0".into(),
            port: "p0".into(),
            vlan: Some(10),
            mac: None,
            mtu: None,
            addresses: vec!["10.0.0.1/24".parse().expect("addr")],
        }],
        routes: vec![Route::via(p, gw)],
        neighbors: vec![],
        policy: Default::default(),
        filters: vec![],
        control: None,
        api_token_sha256: None,
    };
    let g = admin.create_vr(&spec).expect("create green");
    assert_eq!(g.routes_v4, 4);
    assert!(matches!(
        api_err(admin.create_vr(&spec)),
        ApiError::Conflict(_)
    ));
    let before = red.vr_counters("red").expect("c").total.rx_packets;
    admin.delete_vr("green").expect("delete green");
    assert!(matches!(api_err(admin.vr("green")), ApiError::NoSuchVr));
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        red.vr_counters("red").expect("c").total.rx_packets > before,
        "red kept forwarding"
    );

    // Reload: a bad config changes nothing and names the key; a good one applies.
    let bad = config("  [[router.route]]\n  prefix = \"10.99.0.0/16\"\n  via = \"192.168.0.1\"\n");
    match api_err(admin.reload(&bad)) {
        ApiError::Config(issues) => assert!(
            issues
                .iter()
                .any(|i| i.key.contains("blue") && i.key.contains("route")),
            "{issues:?}"
        ),
        other => panic!("{other:?}"),
    }
    let good = config("  [[router.route]]\n  prefix = \"10.99.0.0/16\"\n  via = \"10.0.0.254\"\n");
    let report = admin.reload(&good).expect("reload");
    assert_eq!(report.changed, ["blue"]);
    let blue = Client::unix(&socket, Some(BLUE.into()));
    let routes = blue.all_routes("blue").expect("routes");
    assert!(routes
        .iter()
        .any(|r| r.prefix.to_string() == "10.99.0.0/16"));

    // The CLI, as a user types it.
    let out = Command::new(VRHOST)
        .args(["ctl", "--socket"])
        .arg(&socket)
        .args(["--token", RED, "vrs"])
        .output()
        .expect("ctl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("red") && !text.contains("blue"), "{text}");
}

/// Each VR's worker time, live: red takes some while its port replays
/// frames to it, and more as it goes on; green, whose only interface is on
/// a VLAN no frame carries, takes none. The same through `/metrics`.
#[test]
fn each_vr_reports_the_worker_time_its_traffic_took() {
    let dir = tempfile::tempdir().expect("tempdir");
    let green = r#"
[[router]]
name = "green"
  [[router.interface]]
  name = "green0"
  port = "p0"
  vlan = 7
  addresses = ["10.7.0.1/24"]
"#;
    let (_d, socket) = start_with(dir.path(), &config(green));
    let admin = Client::unix(&socket, Some(ADMIN.into()));
    let busy = |vr: &str| admin.vr_counters(vr).expect("counters").busy_ns;
    wait_until(10, "no worker time for red", || {
        busy("red").unwrap_or(0) > 0
    });
    let workers = admin.workers().expect("workers").len() as u128;
    let since = Instant::now();
    let first = busy("red").expect("red's worker time");
    // Published every 100 ms.
    std::thread::sleep(Duration::from_millis(400));
    let later = busy("red").expect("red's worker time");
    let elapsed = since.elapsed().as_nanos();
    assert!(
        later > first,
        "red's worker time stood still: {first} then {later} ns"
    );
    assert_eq!(busy("green"), Some(0), "green received nothing");
    // Nanoseconds, not clock ticks: no more than the workers had between
    // the two reads, give or take one publication (100 ms) each.
    let grew = u128::from(later - first);
    assert!(
        grew <= workers * (elapsed + 200_000_000),
        "red took {grew} ns of {workers} worker(s) in {elapsed} ns"
    );

    let metrics = admin.metrics().expect("metrics");
    let value = |vr: &str| {
        let series = format!("vrhost_vr_busy_seconds_total{{vr=\"{vr}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {series}in:\n{metrics}"))
    };
    assert!(value("red") > 0.0, "{metrics}");
    assert_eq!(value("green"), 0.0, "{metrics}");
}

/// A bulk request that lists one prefix twice in `delete` deletes it once:
/// counted twice, the route-limit check let through adds that the table
/// then refused, after the deletes had been applied (a 500, half-applied).
/// Now the limit refuses the request and nothing changes.
#[test]
fn a_bulk_request_listing_a_delete_twice_is_refused_whole_at_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_d, socket) = start_with(
        dir.path(),
        &config("  [router.limits]\n  max_routes = 16\n"),
    );
    let blue = Client::unix(&socket, Some(BLUE.into()));
    let gw = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let route = |i: u32| {
        let a = Ipv4Addr::from(0x6400_0000 + (i << 8));
        Route::via(Prefix::new(IpAddr::V4(a), 24).expect("prefix"), gw)
    };
    // Up to the limit: the VR's own routes and what the API adds.
    let held = blue.routes("blue", 0, 100).expect("routes").total as u32;
    let fill = BulkRoutes {
        add: (0..16 - held).map(route).collect(),
        ..BulkRoutes::default()
    };
    blue.bulk_routes("blue", &fill).expect("fill");
    let x = fill.add[0].prefix;
    let over = BulkRoutes {
        add: vec![route(100), route(101)],
        delete: vec![x, x],
        replace: false,
    };
    assert!(matches!(
        api_err(blue.bulk_routes("blue", &over)),
        ApiError::Conflict(_)
    ));
    let after = blue.routes("blue", 0, 100).expect("routes");
    assert_eq!(after.total, 16, "nothing applied");
    assert!(after.routes.iter().any(|r| r.prefix == x), "{x} kept");
}

#[test]
fn a_tenant_token_never_sees_another_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_d, socket) = start(dir.path());
    let red = Client::unix(&socket, Some(RED.into()));
    let names: Vec<String> = red
        .vrs()
        .expect("vrs")
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["red"]);
    // Blue and a VR that does not exist answer byte for byte the same.
    for path in [
        "",
        "/routes",
        "/neighbors",
        "/counters",
        "/interfaces/blue0/addresses",
    ] {
        let theirs = red
            .raw("GET", &format!("/v1/vrs/blue{path}"), None)
            .expect("raw");
        let nobody = red
            .raw("GET", &format!("/v1/vrs/nosuch{path}"), None)
            .expect("raw");
        assert_eq!(theirs.status, 404, "{path}");
        assert_eq!(
            (theirs.status, &theirs.body),
            (nobody.status, &nobody.body),
            "{path}"
        );
        assert!(!String::from_utf8_lossy(&theirs.body).contains("blue"));
    }
    let body = br#"{"prefix":"192.0.2.0/24","blackhole":true}"#;
    let post = red
        .raw(
            "POST",
            "/v1/vrs/blue/routes",
            Some(("application/json", body)),
        )
        .expect("raw");
    assert_eq!(post.status, 404);
    // Deleting VRs is the operator's: refused alike for blue and for nobody.
    let del = red.raw("DELETE", "/v1/vrs/blue", None).expect("raw");
    let del_nobody = red.raw("DELETE", "/v1/vrs/nosuch", None).expect("raw");
    assert_eq!(del.status, 403);
    assert_eq!(
        (del.status, &del.body),
        (del_nobody.status, &del_nobody.body)
    );
    for global in ["/v1/ports", "/v1/workers"] {
        assert_eq!(
            red.raw("GET", global, None).expect("raw").status,
            403,
            "{global}"
        );
    }
    let metrics = red.metrics().expect("metrics");
    assert!(metrics.contains("vr=\"red\""));
    assert!(!metrics.contains("blue"), "metrics leak another VR");
    // Blue's routes are untouched by anything red tried.
    let blue = Client::unix(&socket, Some(BLUE.into()));
    assert!(blue
        .all_routes("blue")
        .expect("routes")
        .iter()
        .all(|r| r.prefix.to_string() != "192.0.2.0/24"));
    assert_eq!(
        Client::unix(&socket, Some("wrong".into()))
            .raw("GET", "/v1/vrs", None)
            .expect("raw")
            .status,
        401
    );
}

#[test]
fn a_worker_panic_stops_the_process_loudly() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_pcap(&dir.path().join("in.pcap"));
    let cfg = dir.path().join("vrhost.toml");
    std::fs::write(&cfg, config("")).expect("config");
    let child = Command::new(VRHOST)
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        .env(vrhost_daemon::runtime::FAULT_WORKER_PANIC_MS, "500")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start vrhost run");
    let mut daemon = Daemon(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = daemon.0.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "vrhost run went on after a worker panicked"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    use std::io::Read as _;
    if let Some(mut e) = daemon.0.stderr.take() {
        e.read_to_string(&mut stderr).expect("stderr");
    }
    assert!(!status.success(), "{status:?}");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(6), "aborted (SIGABRT): {status:?}");
    assert!(stderr.contains("vrhost-worker-0"), "{stderr}");
    assert!(stderr.contains("vrhost stops now"), "{stderr}");
}

#[test]
fn sighup_reloads_the_config_file_or_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (daemon, socket) = start(dir.path());
    let admin = Client::unix(&socket, Some(ADMIN.into()));
    let has = |prefix: &str| {
        admin
            .all_routes("blue")
            .expect("routes")
            .iter()
            .any(|r| r.prefix.to_string() == prefix)
    };
    let hup = || {
        let st = Command::new("kill")
            .args(["-HUP", &daemon.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(st.success());
    };
    let cfg = dir.path().join("vrhost.toml");
    // A bad file: refused, nothing changes, the router goes on.
    let bad = config("  [[router.route]]\n  prefix = \"10.50.0.0/16\"\n  via = \"192.168.0.1\"\n");
    std::fs::write(&cfg, bad).expect("config");
    hup();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!has("10.50.0.0/16"));
    assert!(admin.vrs().is_ok(), "still serving after a refused reload");
    // A good one: applied.
    let good = config("  [[router.route]]\n  prefix = \"10.50.0.0/16\"\n  via = \"10.0.0.9\"\n");
    std::fs::write(&cfg, good).expect("config");
    hup();
    wait_until(5, "SIGHUP did not reload the config", || {
        has("10.50.0.0/16")
    });
}

#[test]
fn api_changes_survive_a_restart_through_the_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = config("").replacen(
        "socket = \"api.sock\"\n",
        "socket = \"api.sock\"\nstate = \"state/api.jsonl\"\n",
        1,
    );
    let p: Prefix = "10.60.0.0/16".parse().expect("prefix");
    let gw: IpAddr = "10.0.0.9".parse().expect("gw");
    let n = Neighbor {
        address: "10.0.0.7".parse().expect("addr"),
        mac: MacAddr([2, 0, 0, 0, 0, 7]),
        interface: None,
    };
    {
        let (daemon, socket) = start_with(dir.path(), &text);
        let red = Client::unix(&socket, Some(RED.into()));
        red.add_route("red", &Route::via(p, gw), false)
            .expect("route");
        red.add_neighbor("red", &n).expect("neighbour");
        let gone: Prefix = "10.61.0.0/16".parse().expect("prefix");
        red.add_route("red", &Route::via(gone, gw), false)
            .expect("route");
        red.delete_route("red", gone, false).expect("delete");
        red.set_filters("red", &filters()).expect("filters");
        drop(daemon);
    }
    let lines = std::fs::read_to_string(dir.path().join("state/api.jsonl")).expect("journal");
    assert_eq!(lines.lines().count(), 5, "{lines}");

    // A write cut short by a crash: the last line loses its end.
    let journal = dir.path().join("state/api.jsonl");
    let mut bytes = std::fs::read(&journal).expect("journal");
    bytes.extend_from_slice(b"{\"op\": \"delete_route\", \"vr\": \"re");
    std::fs::write(&journal, bytes).expect("journal");

    let (_daemon, socket) = start_with(dir.path(), &text);
    let red = Client::unix(&socket, Some(RED.into()));
    let routes = red.all_routes("red").expect("routes");
    assert!(routes.iter().any(|r| r.prefix == p), "{routes:?}");
    assert!(!routes
        .iter()
        .any(|r| r.prefix.to_string() == "10.61.0.0/16"));
    let neighbours = red.neighbors("red").expect("neighbours");
    assert!(
        neighbours
            .iter()
            .any(|x| x.address == n.address && x.mac == n.mac),
        "{neighbours:?}"
    );
    // The rule lists, and the interface applying one, are back too.
    let f = red.filters("red").expect("filters");
    assert_eq!(f.filter.len(), 1, "{f:?}");
    assert_eq!(f.filter[0].name, "edge");
    assert_eq!(f.filter[0].rule.len(), 1);
    assert_eq!(f.interface[0].filter_in.as_deref(), Some("edge"));
}

/// One list, `edge` (deny UDP to port 9), applied to what enters red0.
fn filters() -> vrhost_api::types::Filters {
    let text = r#"
[[filter]]
name = "edge"
  [[filter.rule]]
  action = "deny"
  protocol = "udp"
  dst_port = 9

[[interface]]
name = "red0"
filter_in = "edge"
"#;
    vrhost_api::ctl::parse_filters_file(text).expect("filters file")
}

/// As systemd runs it (`Type=notify`, `WatchdogSec`): READY once forwarding,
/// RELOADING and READY around a SIGHUP, watchdog pings while the workers
/// turn, STOPPING at the end; JSON logs when asked.
#[test]
fn a_service_manager_hears_ready_reload_watchdog_and_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_pcap(&dir.path().join("in.pcap"));
    let cfg = dir.path().join("vrhost.toml");
    std::fs::write(&cfg, config("")).expect("config");
    let notify = dir.path().join("notify");
    let listener = std::os::unix::net::UnixDatagram::bind(&notify).expect("bind");
    listener
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let child = Command::new(VRHOST)
        .args(["run", "--config"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &notify)
        .env("WATCHDOG_USEC", "200000")
        .env("VRHOST_LOG_FORMAT", "json")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start vrhost run");
    let mut daemon = Daemon(child);
    let mut heard = Vec::new();
    let wait_for = |want: &str, heard: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 256];
        while Instant::now() < deadline {
            if let Ok(n) = listener.recv(&mut buf) {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                heard.push(m.clone());
                if m.lines().any(|l| l == want) {
                    return;
                }
            }
        }
        panic!("never heard {want}; heard {heard:?}");
    };
    wait_for("READY=1", &mut heard);
    wait_for("WATCHDOG=1", &mut heard);
    wait_for("WATCHDOG=1", &mut heard);
    let pid = daemon.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill")
        .success());
    wait_for("RELOADING=1", &mut heard);
    wait_for("READY=1", &mut heard);
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    wait_for("STOPPING=1", &mut heard);
    let out = daemon.0.wait().expect("exit");
    assert!(out.success(), "{out:?}");
    let mut stderr = String::new();
    use std::io::Read as _;
    if let Some(mut e) = daemon.0.stderr.take() {
        e.read_to_string(&mut stderr).expect("stderr");
    }
    let logs: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON log line"))
        .collect();
    assert!(
        logs.iter()
            .any(|l| l["fields"]["message"] == "SIGHUP: config reloaded"),
        "{stderr}"
    );
}
