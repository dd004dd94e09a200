//! End-to-end: one tenant VR on two vrhost boxes, load shared by ECMP and
//! announced by BGP, failure detected by BFD (docs/scale-out.md).
//!
//! ```text
//!   <lab>-up (FRR AS 65000)        <lab>-a: vrhost, VR red            <lab>-site (FRR AS 65010)
//!   lo 198.51.100.1   to-a ──── a-up ═ 10.0.1.1   10.1.1.1 ═ a-dn ──── to-a  lo 203.0.113.1
//!   UDP receiver      to-b ─┐      <lab>-a-red: FRR AS 65001        ┌─ to-b  UDP sender
//!                           └─ b-up ═ 10.0.2.1   10.1.2.1 ═ b-dn ───┘
//!                                  <lab>-b: vrhost, VR red; <lab>-b-red: FRR AS 65001
//! ```
//!
//! The lab, the vrhost configs and the FRR configs are the ones in
//! `examples/scale-out/`, with the lab's name made unique. Each box runs
//! `vrhost run` inside its own namespace (`ip netns exec <lab>-a`). The
//! upstream installs both copies as ECMP next hops for 203.0.113.0/24, the
//! site both for 198.51.100.0/24. A UDP flow of `RATE` datagrams a second,
//! each with its sequence number, goes from the site to the upstream; the
//! box that carries it is killed (SIGKILL), and later started again. The
//! test measures what the flow lost at the failure (asserted ≤ 500 ms) and
//! at the return (asserted 0), and that nothing arrived out of order at the
//! failure.
//! Then the copy carrying a new flow is drained (graceful-shutdown
//! community) and stopped: nothing may be lost. Then the site floods box
//! a, whose VR red the test holds to 4,000 packets
//! a second: its own address at three times its punt rate, and the
//! upstream through it at twelve times its ceiling; every BFD session must
//! stay up through both (the protected share, docs/isolation.md).
//!
//! A guard stops every process and removes every namespace in `Drop`,
//! panics included. Requirements: root, iproute2, FRR (`/usr/lib/frr/
//! {zebra,bgpd,bfdd}`, vtysh). The test fails without them; it never skips.

mod common;

use common::{in_ns, keeper_pids, require_root, require_tools, run, signal, stop, text};
use std::fmt::Write as _;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/scale-out");

/// Datagrams a second: one every 500 µs, so a loss window is measured to
/// half a millisecond.
const RATE: u64 = 2000;
/// BGP up (timers 1 3, connect 1) and ECMP on both sides.
const CONVERGE: Duration = Duration::from_secs(40);
/// The failover budget: BFD detects in 3 × 100 ms; the rest is FRR and
/// the kernel replacing the route.
const MAX_LOSS: Duration = Duration::from_millis(500);
/// Box a's VR red receives at most this many packets a second (`pps`, its
/// share of the box as its operator set it), which the failover flow (at
/// most `RATE`, when box b is down) and the control protocols stay under;
/// the last step floods it at ten times that.
const CEILING_PPS: u64 = 4000;
/// Box a's VR red punts at most this many packets a second to its control
/// plane (`punt_rate`), under its ceiling, so that a punt flood can exceed
/// the one without the other.
const PUNT_RATE: u64 = 1000;

fn require_environment() {
    require_root("e2e_scale_out", "netns, veth, TAP");
    require_tools(&["ip", "vtysh"], "iproute2 frr");
    for d in ["zebra", "bgpd", "bfdd"] {
        assert!(
            Path::new("/usr/lib/frr").join(d).is_file(),
            "/usr/lib/frr/{d} missing: install frr (apt-get install -y frr)"
        );
    }
}

/// The two boxes, by their names in the example.
const BOXES: [&str; 2] = ["a", "b"];

/// Processes and namespaces of the test; `Drop` removes them all.
struct Scene {
    lab: String,
    dir: PathBuf,
    spec: PathBuf,
    /// `vrhost run` of box a and of box b.
    routers: [Option<Child>; 2],
    /// FRR daemons: (instance, daemon, process).
    frr: Vec<(String, String, Child)>,
}

impl Scene {
    fn new() -> Scene {
        require_environment();
        let pid = std::process::id() % 100_000;
        let lab = format!("so{pid}");
        let dir = std::env::temp_dir().join(format!("vrhost-e2e-scale-out-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test directory");
        use std::os::unix::fs::PermissionsExt;
        // FRR drops to user frr: let it write pid files and sockets here.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .expect("chmod test directory");
        let mut s = Scene {
            spec: dir.join("lab.toml"),
            lab,
            dir,
            routers: [None, None],
            frr: Vec::new(),
        };
        std::fs::write(&s.spec, s.example("lab.toml")).expect("lab spec");
        for b in BOXES {
            let mut cfg = s.example(&format!("vrhost-{b}.toml"));
            if b == "a" {
                cfg = cfg.replacen(
                    "name = \"red\"\n",
                    &format!(
                        "name = \"red\"\n  [router.limits]\n  pps = {CEILING_PPS}\n  punt_rate = {PUNT_RATE}\n"
                    ),
                    1,
                );
                assert!(cfg.contains("pps ="), "box a's config: no VR red to limit");
            }
            std::fs::write(s.dir.join(format!("vrhost-{b}.toml")), cfg).expect("vrhost config");
        }
        s.cleanup_namespaces();
        let out = run(VRHOST, &["lab", "up", s.spec.to_str().expect("utf-8")]);
        assert!(out.status.success(), "vrhost lab up: {}", text(&out));
        s.routers = [None, None];
        s
    }

    /// An example file with the lab's name and this test's directories.
    fn example(&self, name: &str) -> String {
        let path = Path::new(EXAMPLE).join(name);
        let t = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        t.replace(
            "\"/run/vrhost-so-",
            &format!("\"{}/run-", self.dir.display()),
        )
        .replace("tap_hold = 30", "tap_hold = 15")
        .replace("name = \"so\"", &format!("name = \"{}\"", self.lab))
        .replace("\"so-", &format!("\"{}-", self.lab))
    }

    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.lab)
    }

    fn cleanup_namespaces(&self) {
        let _ = run(VRHOST, &["lab", "down", self.spec.to_str().unwrap_or("")]);
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// `ip netns exec <lab>-B vrhost run --config vrhost-B.toml`.
    fn start_box(&mut self, i: usize) {
        let b = BOXES[i];
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("vrhost-{b}.log")))
            .expect("log");
        let cfg = self.dir.join(format!("vrhost-{b}.toml"));
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(b), VRHOST, "run", "--config"])
            .arg(&cfg)
            .env("VRHOST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting vrhost run");
        self.routers[i] = Some(child);
    }

    /// VR red's counters on box `i`, from its own API.
    fn counters(&self, i: usize) -> String {
        let sock = self.dir.join(format!("run-{}", BOXES[i])).join("api.sock");
        text(&run(
            VRHOST,
            &[
                "ctl",
                "--socket",
                sock.to_str().unwrap_or(""),
                "--token",
                "test",
                "counters",
                "red",
            ],
        ))
    }

    /// SIGKILL box `i`'s vrhost (`ip netns exec` execs it: same pid).
    fn kill_box(&mut self, i: usize) {
        if let Some(mut c) = self.routers[i].take() {
            signal(&c, "KILL");
            let _ = c.wait();
        }
    }

    /// Starts zebra, bfdd and bgpd (config `bgpd`, an example file) in
    /// namespace `ns`, with their own sockets in `<dir>/<inst>`.
    fn start_frr(&mut self, inst: &str, ns: &str, bgpd: &str) {
        let d = self.dir.join(inst);
        std::fs::create_dir_all(&d).expect("FRR directory");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let bfdd = d.join("bfdd.conf");
        std::fs::write(&bfdd, self.example("bfdd.conf")).expect("bfdd.conf");
        let bgp = d.join("bgpd.conf");
        std::fs::write(&bgp, self.example(bgpd)).expect("bgpd.conf");
        let zebra = d.join("zebra.conf");
        std::fs::write(&zebra, format!("hostname {inst}\n")).expect("zebra.conf");
        let ds = d.display().to_string();
        for (daemon, conf, extra) in [
            ("zebra", &zebra, vec![]),
            (
                "bfdd",
                &bfdd,
                vec!["--bfdctl".to_string(), format!("{ds}/bfdd.sock")],
            ),
            ("bgpd", &bgp, vec![]),
        ] {
            let log = std::fs::File::create(d.join(format!("{daemon}.log"))).expect("log");
            let child = Command::new("ip")
                .args(["netns", "exec", ns, &format!("/usr/lib/frr/{daemon}")])
                .args(&extra)
                .arg("-f")
                .arg(conf)
                .args(["-i", &format!("{ds}/{daemon}.pid")])
                .args(["-z", &format!("{ds}/zserv.api")])
                .args(["--vty_socket", &ds, "-P", "0"])
                .stdout(Stdio::from(log.try_clone().expect("log")))
                .stderr(Stdio::from(log))
                .spawn()
                .expect("starting FRR");
            self.frr.push((inst.into(), daemon.into(), child));
            if daemon == "zebra" {
                let zserv = d.join("zserv.api");
                let start = Instant::now();
                while !zserv.exists() {
                    assert!(
                        start.elapsed() < Duration::from_secs(15),
                        "zebra {inst} did not start: {}",
                        self.log(&format!("{inst}/zebra.log"))
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    fn vtysh(&self, inst: &str, cmd: &str) -> String {
        let vty = self.dir.join(inst).display().to_string();
        text(&run("vtysh", &["--vty_socket", &vty, "-c", cmd]))
    }

    /// Next hops of `prefix` in the kernel of host `ns`.
    fn next_hops(&self, host: &str, prefix: &str) -> Vec<String> {
        let out = text(&run("ip", &["-n", &self.ns(host), "route", "show", prefix]));
        out.split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "via")
            .map(|w| w[1].to_string())
            .collect()
    }

    /// BFD peers of FRR instance `inst` that are up.
    fn bfd_up(&self, inst: &str) -> usize {
        let out = self.vtysh(inst, "show bfd peers json");
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| {
                v.as_array().map(|a| {
                    a.iter()
                        .filter(|p| p["status"].as_str() == Some("up"))
                        .count()
                })
            })
            .unwrap_or(0)
    }

    /// Waits until the upstream and the site have `n` next hops each (and
    /// `n` BFD sessions up); returns how long it took.
    fn wait_paths(&mut self, n: usize, limit: Duration) -> Duration {
        self.wait_routes(n, limit, true)
    }

    /// Waits until the upstream and the site each route through `n` next
    /// hops, whatever BFD says (a drained copy keeps its sessions).
    fn wait_next_hops(&mut self, n: usize, limit: Duration) -> Duration {
        self.wait_routes(n, limit, false)
    }

    /// [`Scene::wait_paths`], BFD counted only with `bfd`; fails at once
    /// if a box's vrhost exits.
    fn wait_routes(&mut self, n: usize, limit: Duration, bfd: bool) -> Duration {
        let start = Instant::now();
        loop {
            for (i, r) in self.routers.iter_mut().enumerate() {
                if let Some(Ok(Some(st))) = r.as_mut().map(Child::try_wait) {
                    panic!(
                        "vrhost of box {} exited ({st}):\n{}",
                        BOXES[i],
                        self.log(&format!("vrhost-{}.log", BOXES[i]))
                    );
                }
            }
            let up = self.next_hops("up", "203.0.113.0/24").len();
            let site = self.next_hops("site", "198.51.100.0/24").len();
            let sessions = !bfd || (self.bfd_up("upstream") == n && self.bfd_up("site") == n);
            if up == n && site == n && sessions {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "no {n} paths in {limit:?} (upstream {up}, site {site}):\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops box `i`'s vrhost as an operator would (SIGTERM), and waits.
    fn stop_box(&mut self, i: usize) {
        if let Some(mut c) = self.routers[i].take() {
            signal(&c, "TERM");
            let _ = c.wait();
        }
    }

    /// Transmitted packets on the site's link `dev`.
    fn tx_packets(&self, dev: &str) -> u64 {
        let out = run(
            "ip",
            &["-n", &self.ns("site"), "-j", "-s", "link", "show", dev],
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v[0]["stats64"]["tx"]["packets"].as_u64())
            .unwrap_or_else(|| panic!("tx packets of {dev}: {}", text(&out)))
    }

    /// The UDP lines of `/proc/net/snmp` in the namespace of `host`.
    fn udp(&self, host: &str) -> String {
        let out = in_ns(&self.ns(host), "cat", &["/proc/net/snmp"]);
        text(&out)
            .lines()
            .filter(|l| l.starts_with("Udp:"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn diagnostics(&self) -> String {
        let mut d = String::new();
        for inst in ["upstream", "site", "red-a", "red-b"] {
            for cmd in ["show bgp summary", "show bfd peers brief", "show ip route"] {
                let _ = writeln!(d, "--- {inst}: {cmd} ---\n{}", self.vtysh(inst, cmd));
            }
        }
        for host in ["up", "site", "a-red", "b-red"] {
            let out = run("ip", &["-n", &self.ns(host), "route"]);
            let _ = writeln!(d, "--- {host}: ip route ---\n{}", text(&out));
        }
        for b in BOXES {
            let f = format!("vrhost-{b}.log");
            let _ = writeln!(d, "--- {f} ---\n{}", self.log(&f));
        }
        for inst in ["upstream", "site", "red-a", "red-b"] {
            for daemon in ["zebra", "bfdd", "bgpd"] {
                let f = format!("{inst}/{daemon}.log");
                let _ = writeln!(d, "--- {f} ---\n{}", self.log(&f));
            }
        }
        d
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for (_, _, c) in self.frr.iter_mut().rev() {
            stop(c);
        }
        for r in self.routers.iter_mut() {
            if let Some(mut c) = r.take() {
                stop(&mut c);
            }
        }
        // The TAP keepers the boxes started (they would hold the mirrors
        // for tap_hold seconds more).
        for b in BOXES {
            for pid in keeper_pids(&self.log(&format!("vrhost-{b}.log"))) {
                let _ = run("sh", &["-c", &format!("kill -TERM {pid}")]);
            }
        }
        if std::thread::panicking() {
            eprintln!("{}", self.diagnostics());
        }
        self.cleanup_namespaces();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// -------------------------------------------------------------- the flow --

/// What the flow's sender and receiver recorded.
struct Flow {
    /// Send time of each sequence number (its index).
    sent: Vec<Instant>,
    /// (sequence number, receive time), in receive order.
    received: Vec<(u64, Instant)>,
    /// Sequence numbers whose send failed in the sender's own kernel.
    failed: Vec<u64>,
}

impl Flow {
    /// Joins the flow's two threads.
    fn join(sender: Sender, receiver: Receiver) -> Flow {
        let (sent, failed) = sender.join().expect("sender");
        Flow {
            sent,
            received: receiver.join().expect("receiver"),
            failed,
        }
    }
}

/// A UDP socket bound to `addr` inside namespace `ns`: made on a thread
/// there, it stays in that namespace whatever thread uses it.
fn socket_in(ns: &str, addr: &str) -> UdpSocket {
    vrhost_io::netns::run_in(ns, || UdpSocket::bind(addr))
        .unwrap_or_else(|e| panic!("entering {ns}: {e}"))
        .unwrap_or_else(|e| panic!("binding {addr} in {ns}: {e}"))
}

/// Starts the flow: `RATE` datagrams a second from the site's 203.0.113.1
/// to the upstream's 198.51.100.1, each carrying its sequence number,
/// until `stop`. Returns the threads that yield what they recorded.
fn start_flow(s: &Scene, stop: &Arc<AtomicBool>) -> (Sender, Receiver) {
    let rx = socket_in(&s.ns("up"), "198.51.100.1:9000");
    rx.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let tx = socket_in(&s.ns("site"), "203.0.113.1:0");
    tx.connect("198.51.100.1:9000").expect("connect");
    let stop_rx = stop.clone();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(200_000);
        let mut buf = [0u8; 64];
        // Runs a little past the sender: what is in flight still counts.
        let mut quiet_since: Option<Instant> = None;
        loop {
            if stop_rx.load(Ordering::Relaxed) {
                let q = *quiet_since.get_or_insert_with(Instant::now);
                if q.elapsed() > Duration::from_millis(300) {
                    return got;
                }
            }
            if let Ok(n) = rx.recv(&mut buf) {
                if n >= 8 {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&buf[..8]);
                    got.push((u64::from_be_bytes(b), Instant::now()));
                }
            }
        }
    });
    let stop_tx = stop.clone();
    let sender = std::thread::spawn(move || {
        let mut sent = Vec::with_capacity(200_000);
        let mut failed = Vec::new();
        let t0 = Instant::now();
        let period = Duration::from_nanos(1_000_000_000 / RATE);
        let mut seq: u64 = 0;
        while !stop_tx.load(Ordering::Relaxed) {
            let due = t0 + period * u32::try_from(seq).expect("seq fits u32");
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let mut payload = [0u8; 32];
            payload[..8].copy_from_slice(&seq.to_be_bytes());
            // A send error (no route for a moment) is a lost datagram,
            // counted apart.
            if tx.send(&payload).is_err() {
                failed.push(seq);
            }
            sent.push(Instant::now());
            seq += 1;
        }
        (sent, failed)
    });
    (sender, receiver)
}

/// The flow's sender thread: yields each datagram's send time, and the
/// sequence numbers whose send failed.
type Sender = std::thread::JoinHandle<(Vec<Instant>, Vec<u64>)>;
/// The flow's receiver thread: yields (sequence number, arrival time).
type Receiver = std::thread::JoinHandle<Vec<(u64, Instant)>>;

/// Loss of the datagrams sent in `[from, to)`.
struct Loss {
    sent: usize,
    missing: usize,
    /// Of the missing, those whose send failed in the sender's kernel.
    send_failed: usize,
    /// Send times of the first and the last missing datagram.
    missing_sent: Option<(Instant, Instant)>,
    /// Largest time between two consecutive arrivals of this window.
    largest_gap: Duration,
}

impl Loss {
    fn window(&self) -> Duration {
        Duration::from_secs_f64(self.missing as f64 / RATE as f64)
    }
}

fn loss(flow: &Flow, from: Instant, to: Instant) -> Loss {
    let mut got = vec![false; flow.sent.len()];
    for &(seq, _) in &flow.received {
        if let Some(g) = usize::try_from(seq).ok().and_then(|i| got.get_mut(i)) {
            *g = true;
        }
    }
    let idx: Vec<usize> = (0..flow.sent.len())
        .filter(|&i| flow.sent[i] >= from && flow.sent[i] < to)
        .collect();
    let arrivals: Vec<Instant> = flow
        .received
        .iter()
        .filter(|&&(seq, _)| {
            usize::try_from(seq)
                .ok()
                .and_then(|i| flow.sent.get(i))
                .is_some_and(|&t| t >= from && t < to)
        })
        .map(|&(_, t)| t)
        .collect();
    let missing: Vec<usize> = idx.iter().copied().filter(|&i| !got[i]).collect();
    Loss {
        sent: idx.len(),
        missing: missing.len(),
        send_failed: flow
            .failed
            .iter()
            .filter_map(|&seq| usize::try_from(seq).ok())
            .filter(|&i| flow.sent.get(i).is_some_and(|&t| t >= from && t < to))
            .count(),
        missing_sent: missing
            .first()
            .zip(missing.last())
            .map(|(&a, &b)| (flow.sent[a], flow.sent[b])),
        largest_gap: arrivals
            .windows(2)
            .map(|w| w[1].saturating_duration_since(w[0]))
            .max()
            .unwrap_or_default(),
    }
}

/// Arrivals whose sequence number is not above every earlier one's, with
/// their send times: (sequence number, highest before it, sent at).
fn out_of_order(flow: &Flow, from: Instant, to: Instant) -> Vec<(u64, u64, Instant)> {
    let mut highest: Option<u64> = None;
    let mut out = Vec::new();
    for &(seq, _) in &flow.received {
        let sent = usize::try_from(seq).ok().and_then(|i| flow.sent.get(i));
        if let (Some(h), Some(&t)) = (highest, sent) {
            if seq <= h && t >= from && t < to {
                out.push((seq, h, t));
            }
        }
        highest = highest.max(Some(seq));
    }
    out
}

// ------------------------------------------------------------------ test --

#[test]
fn a_box_dies_and_the_flow_moves_to_the_other_copy() {
    let t0 = Instant::now();
    let mut s = Scene::new();
    s.start_box(0);
    s.start_box(1);
    let (up, site, a, b) = (s.ns("up"), s.ns("site"), s.ns("a-red"), s.ns("b-red"));
    for (ns, addr) in [(&up, "198.51.100.1/32"), (&site, "203.0.113.1/32")] {
        let out = run("ip", &["-n", ns, "addr", "add", addr, "dev", "lo"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    // Both boxes forward (each VR answers ping on both links) before any
    // routing daemon starts: no session begins against a box still
    // starting up.
    for (ns, addr) in [
        (&up, "10.0.1.1"),
        (&up, "10.0.2.1"),
        (&site, "10.1.1.1"),
        (&site, "10.1.2.1"),
    ] {
        let start = Instant::now();
        while !in_ns(ns, "ping", &["-c", "1", "-W", "1", addr])
            .status
            .success()
        {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{addr} does not answer from {ns}:\n{}",
                s.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    s.start_frr("upstream", &up, "bgpd-upstream.conf");
    s.start_frr("site", &site, "bgpd-site.conf");
    s.start_frr("red-a", &a, "bgpd-a.conf");
    s.start_frr("red-b", &b, "bgpd-b.conf");
    let took = s.wait_paths(2, CONVERGE);
    eprintln!(
        "scale-out: ECMP on both sides and BFD up {:.1} s after FRR started ({:.1} s in all)",
        took.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );

    let stop_flow = Arc::new(AtomicBool::new(false));
    let (sender, receiver) = start_flow(&s, &stop_flow);
    let carrier = carrier_of_flow(&s);
    let route = text(&in_ns(
        &site,
        "ip",
        &["route", "get", "198.51.100.1", "from", "203.0.113.1"],
    ));
    eprintln!(
        "scale-out: {RATE} datagrams/s, box {} carries the flow ({})",
        BOXES[carrier],
        route.trim()
    );

    // Failure.
    let killed = Instant::now();
    s.kill_box(carrier);
    let detected = s.wait_paths(1, Duration::from_secs(10));
    eprintln!(
        "scale-out: box {} killed; the site and the upstream have one path after {} ms",
        BOXES[carrier],
        detected.as_millis()
    );
    std::thread::sleep(Duration::from_secs(2));

    // Return.
    let restarted = Instant::now();
    s.start_box(carrier);
    let back = s.wait_paths(2, CONVERGE);
    eprintln!(
        "scale-out: box {} restarted; ECMP back on both sides after {:.1} s",
        BOXES[carrier],
        back.as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(3));
    let after = [s.tx_packets("to-a"), s.tx_packets("to-b")];
    std::thread::sleep(Duration::from_secs(1));
    let end = [s.tx_packets("to-a"), s.tx_packets("to-b")];
    let returned = end[carrier] - after[carrier] >= RATE * 8 / 10;
    stop_flow.store(true, Ordering::Relaxed);
    let flow = Flow::join(sender, receiver);
    let stopped = *flow.sent.last().expect("sent something");

    let fail = loss(&flow, killed - Duration::from_millis(500), restarted);
    let ret = loss(&flow, restarted, stopped);
    let all = loss(&flow, t0, stopped + Duration::from_secs(1));
    let reordered_fail = out_of_order(&flow, t0, restarted);
    let reordered_ret = out_of_order(&flow, restarted, stopped + Duration::from_secs(1));
    for (what, r, at) in [
        ("failure", &reordered_fail, killed),
        ("return", &reordered_ret, restarted),
    ] {
        if let Some(&(seq, h, t)) = r.first() {
            eprintln!(
                "scale-out: {what}: {} datagrams out of order; first: {seq} after {h} ({} behind), sent {:.1} ms after the {}",
                r.len(),
                h - seq,
                t.saturating_duration_since(at).as_secs_f64() * 1e3,
                if what == "failure" { "kill" } else { "restart" }
            );
        }
    }
    eprintln!(
        "scale-out: failure: {} of {} datagrams lost = {:.1} ms of flow; largest gap between arrivals {:.1} ms",
        fail.missing,
        fail.sent,
        fail.window().as_secs_f64() * 1e3,
        fail.largest_gap.as_secs_f64() * 1e3
    );
    eprintln!(
        "scale-out: return: {} of {} datagrams lost = {:.1} ms of flow; largest gap {:.1} ms; the flow {} box {}",
        ret.missing,
        ret.sent,
        ret.window().as_secs_f64() * 1e3,
        ret.largest_gap.as_secs_f64() * 1e3,
        if returned { "went back to" } else { "stayed off" },
        BOXES[carrier]
    );
    if let Some((first, last)) = ret.missing_sent {
        eprintln!(
            "scale-out: return: the lost were sent {:.1}-{:.1} ms after the restart, {} of them \
             refused by the site's own kernel",
            first.saturating_duration_since(restarted).as_secs_f64() * 1e3,
            last.saturating_duration_since(restarted).as_secs_f64() * 1e3,
            ret.send_failed
        );
    }
    for (host, what) in [("site", "sender"), ("up", "receiver")] {
        eprintln!(
            "scale-out: the {what}'s UDP counters ({host}):\n{}",
            s.udp(host)
        );
    }
    for (i, b) in BOXES.iter().enumerate() {
        eprintln!(
            "scale-out: box {b}'s counters after the return:\n{}",
            s.counters(i)
        );
    }
    eprintln!(
        "scale-out: whole flow: {} sent, {} lost, {} out of order; test took {:.1} s",
        all.sent,
        all.missing,
        reordered_fail.len() + reordered_ret.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        fail.window() <= MAX_LOSS && fail.largest_gap <= MAX_LOSS,
        "failover lost {:?} of flow (largest gap {:?}), more than {MAX_LOSS:?}",
        fail.window(),
        fail.largest_gap
    );
    assert!(
        reordered_fail.is_empty(),
        "datagrams arrived out of order at the failure"
    );
    // The return moves the flow from one path to another: datagrams still
    // in the survivor's queues may land after the first through the
    // restarted copy. Reported, not a target (the survivor itself must not
    // reorder: above).
    assert_eq!(
        ret.missing, 0,
        "the return of box {} lost datagrams",
        BOXES[carrier]
    );
    drain_then_stop(&mut s);
    punt_flood_keeps_bfd_up(&s);
    ceiling_flood_keeps_bfd_up(&s);
    drop(s);
}

/// Which box carries a flow that `RATE` datagrams a second started: the
/// site's link that sends it, over one second.
fn carrier_of_flow(s: &Scene) -> usize {
    let before = [s.tx_packets("to-a"), s.tx_packets("to-b")];
    std::thread::sleep(Duration::from_secs(1));
    let after = [s.tx_packets("to-a"), s.tx_packets("to-b")];
    let delta = [after[0] - before[0], after[1] - before[1]];
    let carrier = usize::from(delta[1] > delta[0]);
    assert!(
        delta[carrier] >= RATE * 8 / 10,
        "the flow is not on one link: {delta:?}"
    );
    carrier
}

/// Maintenance as docs/scale-out.md describes it: the copy that carries a
/// flow announces its routes with the graceful-shutdown community, the
/// upstream and the site move to the other copy, and only then is the
/// drained box stopped (SIGTERM). Nothing of the flow may be lost, and
/// only the move itself may reorder it (a few datagrams, sent within 50 ms).
/// Then the box starts again, the drain is undone, and ECMP comes back.
fn drain_then_stop(s: &mut Scene) {
    let stop_flow = Arc::new(AtomicBool::new(false));
    let (sender, receiver) = start_flow(s, &stop_flow);
    let carrier = carrier_of_flow(s);
    let inst = format!("red-{}", BOXES[carrier]);
    let start = Instant::now();
    let vty = s.dir.join(&inst).display().to_string();
    let gshut = |on: bool| {
        let cmd = if on {
            "bgp graceful-shutdown"
        } else {
            "no bgp graceful-shutdown"
        };
        let out = run(
            "vtysh",
            &[
                "--vty_socket",
                &vty,
                "-c",
                "configure terminal",
                "-c",
                "router bgp 65001",
                "-c",
                cmd,
            ],
        );
        assert!(out.status.success(), "{cmd} on {inst}: {}", text(&out));
    };
    gshut(true);
    let moved = s.wait_next_hops(1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(1));
    s.stop_box(carrier);
    std::thread::sleep(Duration::from_secs(1));
    let before = [s.tx_packets("to-a"), s.tx_packets("to-b")];
    std::thread::sleep(Duration::from_millis(500));
    let after = [s.tx_packets("to-a"), s.tx_packets("to-b")];
    stop_flow.store(true, Ordering::Relaxed);
    let flow = Flow::join(sender, receiver);
    let stopped = *flow.sent.last().expect("sent something");
    let drain = loss(&flow, start, stopped);
    let reordered = out_of_order(&flow, start, stopped);
    eprintln!(
        "scale-out: drain: box {} announced graceful-shutdown; one path on both sides after {} ms; \
         stopped (SIGTERM) 1 s later; {} of {} datagrams lost, {} out of order, largest gap {:.1} ms",
        BOXES[carrier],
        moved.as_millis(),
        drain.missing,
        drain.sent,
        reordered.len(),
        drain.largest_gap.as_secs_f64() * 1e3
    );
    assert_eq!(drain.missing, 0, "the drain lost datagrams");
    // The drain moves the flow from one copy to the other, as the return
    // does: datagrams still in the drained copy's queues may land after the
    // first through the other one (a CI run saw 6 of 8,038). That is one
    // move: the overtaken datagrams were all sent within a few milliseconds
    // of each other. Reordering spread over the drain would be a path that
    // flaps.
    let sent = reordered.iter().map(|r| r.2);
    if let (Some(first), Some(last)) = (sent.clone().min(), sent.max()) {
        let spread = last.duration_since(first);
        assert!(
            spread <= Duration::from_millis(50) && reordered.len() * 100 <= drain.sent,
            "the drain reordered {} datagrams over {spread:?}: more than one move",
            reordered.len()
        );
    }
    assert!(
        after[1 - carrier] - before[1 - carrier] >= RATE * 4 / 10,
        "the flow did not move to the other box"
    );
    // Back in service.
    s.start_box(carrier);
    s.wait_next_hops(1, CONVERGE);
    let bfd = Instant::now();
    while s.bfd_up("site") < 2 || s.bfd_up("upstream") < 2 {
        assert!(
            bfd.elapsed() < CONVERGE,
            "BFD of the restarted box:\n{}",
            s.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    gshut(false);
    let back = s.wait_paths(2, CONVERGE);
    eprintln!(
        "scale-out: drain undone; ECMP back on both sides after {:.1} s",
        back.as_secs_f64()
    );
}

/// Whether `inst` has `want` BFD sessions up, or why not.
fn all_bfd_up(s: &Scene, inst: &str, want: usize, start: Instant) -> Result<(), String> {
    if s.bfd_up(inst) == want {
        return Ok(());
    }
    Err(format!(
        "a BFD session of {inst} went down {:?} into the flood:\n{}\n{}",
        start.elapsed(),
        s.vtysh(inst, "show bfd peers brief"),
        s.counters(0)
    ))
}

/// Floods `to` from the site (10.1.1.2) with `rate` UDP datagrams a
/// second for three seconds, paced by the clock in bursts of a few hundred
/// microseconds' worth, while checking every 100 ms that every BFD session
/// (100 ms × 3) of the site, of the upstream (one with each box) and of
/// box a's red (one with each of them) is up. Returns what the flood sent
/// a second, and box a's counters after it.
fn flood_keeps_bfd_up(s: &Scene, to: &str, rate: u64) -> (f64, String) {
    let flood = socket_in(&s.ns("site"), "10.1.1.2:0");
    flood.connect(to).expect("connect");
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flood = stop.clone();
    let flooder = std::thread::spawn(move || {
        let (start, mut sent) = (Instant::now(), 0u64);
        while !stop_flood.load(Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
            while sent < due && flood.send(&[0u8; 18]).is_ok() {
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        sent as f64 / start.elapsed().as_secs_f64()
    });
    let start = Instant::now();
    let mut samples = 0;
    while start.elapsed() < Duration::from_secs(3) {
        let up = ["site", "upstream", "red-a"]
            .into_iter()
            .try_for_each(|inst| all_bfd_up(s, inst, 2, start));
        if let Err(e) = up {
            stop.store(true, Ordering::Relaxed);
            panic!("{e}");
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let sent = flooder.join().expect("flood thread");
    let counters = s.counters(0);
    eprintln!(
        "scale-out: flood of {to}: {sent:.0} datagrams a second for 3 s, every BFD session up in all {samples} samples; box a's counters:\n{counters}"
    );
    (sent, counters)
}

/// The protected share against a punt flood: the site floods box a's own
/// address (punted to its control plane) at three times red's `punt_rate`
/// there, under its `pps` ceiling; the punt rate limit drops the excess,
/// and BFD, which the flood would starve of the punt path unprotected,
/// stays up. (With box a's `protocol_rate = 0`, the session to it went
/// down 2.3 s into a flood like it.)
fn punt_flood_keeps_bfd_up(s: &Scene) {
    let (sent, counters) = flood_keeps_bfd_up(s, "10.1.1.1:9", 3 * PUNT_RATE);
    assert!(
        sent >= 2.5 * PUNT_RATE as f64,
        "the punt flood reached {sent:.0} datagrams a second, not 2.5 times the punt rate"
    );
    assert!(
        counters.contains("punt-rate-limit"),
        "the flood did not exceed box a's punt rate:\n{counters}"
    );
}

/// The protected share against a data-plane flood at ten times the VR's
/// share: the site sends UDP through box a (a host route, via box a only,
/// to an address in the upstream's network) at twelve times red's `pps`
/// ceiling there. The ceiling drops what exceeds it (`rate-ceiling`): BFD
/// and the rest of the control protocols among them, unprotected.
fn ceiling_flood_keeps_bfd_up(s: &Scene) {
    const TARGET: &str = "198.51.100.77";
    let site = s.ns("site");
    let host = format!("{TARGET}/32");
    let route = run(
        "ip",
        &["-n", &site, "route", "replace", &host, "via", "10.1.1.1"],
    );
    assert!(route.status.success(), "host route: {}", text(&route));
    let (sent, counters) = flood_keeps_bfd_up(s, &format!("{TARGET}:9"), 12 * CEILING_PPS);
    let _ = run("ip", &["-n", &site, "route", "del", &host]);
    assert!(
        sent >= 10.0 * CEILING_PPS as f64,
        "the flood reached {sent:.0} datagrams a second, not ten times the ceiling"
    );
    assert!(
        counters.contains("rate-ceiling"),
        "the flood did not exceed red's ceiling on box a:\n{counters}"
    );
}
