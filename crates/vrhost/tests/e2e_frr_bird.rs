//! End-to-end: tenants' routing software drives their VRs. FRR (zebra +
//! bgpd) runs in VR red's control-plane namespace, peers over the data
//! plane with BIRD on an external host, and the prefixes BIRD announces
//! become red's FIB, through the namespace's kernel table
//! (`routes_from_the_namespace`) or zebra's FPM stream
//! (`routes_over_fpm`). VR blue uses the very same addresses on its own
//! ports and keeps forwarding throughout. An address added in the
//! namespace becomes the VR's, and goes with it.
//!
//! ```text
//!   <lab>-h1  10.0.0.2 ── red "r-h1" 10.0.0.1 ═╗                 ╔═ red "r-bp" 10.1.0.1 ── <lab>-bp 10.1.0.2, BIRD AS 65002
//!                                              ║  vrhost run     ║                          lo 198.51.100.1, 203.0.113.1
//!   <lab>-b1  10.0.0.2 ── blue "b-h1" 10.0.0.1 ╝  (af_packet)    ╚═ blue "b-h2" 10.1.0.1 ── <lab>-b2 10.1.0.2
//!
//!   netns <ctl>: TAPs r-h1, r-bp (mirrors) ── zebra + bgpd AS 65001, neighbor 10.1.0.2
//!   FPM variant: veth <ctl>:mgmt 198.18.0.2 ── root 198.18.0.1 (vrhost's FPM listener)
//! ```
//!
//! A guard stops the daemons and vrhost and removes every namespace in
//! `Drop`, panics included. Requirements: root, iproute2, ping, FRR
//! (`/usr/lib/frr/{zebra,bgpd}`, vtysh) and BIRD 2 (`bird`, `birdc`). The
//! tests fail without them; they never skip.

mod common;

use common::{in_ns, run, stop, text};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");

/// First forwarding, BGP session plus route propagation, withdrawal.
const READY: Duration = Duration::from_secs(20);
const CONVERGE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- helpers --

fn require_environment() {
    let status = std::fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    assert_eq!(
        euid, "0",
        "the FRR/BIRD end-to-end tests need root (netns, veth, TAP); \
         run them as root, e.g. `sudo -E cargo test -p vrhost --test e2e_frr_bird`"
    );
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = path
        .split(':')
        .map(PathBuf::from)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .collect();
    let missing: Vec<&str> = ["ip", "ping", "bird", "birdc", "vtysh"]
        .into_iter()
        .filter(|t| !dirs.iter().any(|d| d.join(t).is_file()))
        .collect();
    assert!(
        missing.is_empty(),
        "missing tools {missing:?}: install iproute2 iputils-ping frr bird2"
    );
    for d in ["zebra", "bgpd"] {
        assert!(
            Path::new("/usr/lib/frr").join(d).is_file(),
            "/usr/lib/frr/{d} missing: install frr"
        );
    }
}

/// `ip ARGS` that must succeed.
fn ip(args: &[&str]) {
    let out = run("ip", args);
    assert!(out.status.success(), "ip {args:?}: {}", text(&out));
}

/// One `ping -c 1 -W 1` from `ns`.
fn ping(ns: &str, dst: &str) -> Output {
    in_ns(ns, "ping", &["-n", "-c", "1", "-W", "1", dst])
}

// -------------------------------------------------------------- the scene --

/// Hosts, vrhost, FRR and BIRD of one test; `Drop` removes them all.
struct Scene {
    lab: String,
    /// Red's control-plane namespace.
    ctl: String,
    dir: PathBuf,
    spec: PathBuf,
    /// Root-side veth of the FPM management link, if any.
    mgmt: Option<String>,
    router: Option<Child>,
    daemons: Vec<(String, Child)>,
}

impl Scene {
    fn new(tag: &str) -> Scene {
        require_environment();
        let pid = std::process::id() % 100_000;
        let lab = format!("fb{tag}{pid}");
        let dir = std::env::temp_dir().join(format!("vrhost-e2e-frr-{tag}-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test directory");
        // FRR drops to user frr: let it write pid files and sockets here.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .expect("chmod test directory");
        let mut spec = format!("name = \"{lab}\"\n");
        for (i, (name, addr, gw)) in [
            ("h1", "10.0.0.2/24", "10.0.0.1"),
            ("bp", "10.1.0.2/24", "10.1.0.1"),
            ("b1", "10.0.0.2/24", "10.0.0.1"),
            ("b2", "10.1.0.2/24", "10.1.0.1"),
        ]
        .into_iter()
        .enumerate()
        {
            write!(
                spec,
                "\n[[host]]\nname = \"{name}\"\nlink = \"vf{tag}{pid}{i}\"\naddress = \"{addr}\"\ngateway = \"{gw}\"\n"
            )
            .unwrap();
        }
        let spec_path = dir.join("lab.toml");
        std::fs::write(&spec_path, spec).expect("lab spec");
        let s = Scene {
            ctl: format!("{lab}-ctl"),
            lab,
            dir,
            spec: spec_path,
            mgmt: None,
            router: None,
            daemons: Vec::new(),
        };
        s.cleanup_namespaces();
        let out = run(VRHOST, &["lab", "up", s.spec.to_str().expect("utf-8")]);
        assert!(out.status.success(), "vrhost lab up: {}", text(&out));
        s
    }

    fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.lab)
    }

    fn link(&self, i: usize) -> String {
        format!(
            "vf{}{i}",
            &self.lab[2..] // tag + pid
        )
    }

    fn cleanup_namespaces(&self) {
        let _ = run(VRHOST, &["lab", "down", self.spec.to_str().unwrap_or("")]);
        let _ = run("ip", &["netns", "del", &self.ctl]);
        if let Some(m) = &self.mgmt {
            let _ = run("ip", &["link", "del", m]);
        }
    }

    /// A veth from the root namespace (198.18.0.1/30) into a pre-created
    /// `ctl` (198.18.0.2/30): the path from red's zebra to the FPM listener,
    /// as from a VM. vrhost adopts the namespace. Returns a free port.
    fn management_link(&mut self) -> u16 {
        let m = format!("fm{}", &self.lab[2..]);
        // Never shadow an address the machine itself uses.
        let used = text(&run("ip", &["-br", "addr"]));
        assert!(
            !used.contains(" 198.18.0."),
            "198.18.0.0/30 is in use in the root namespace:\n{used}"
        );
        ip(&["netns", "add", &self.ctl]);
        ip(&[
            "link", "add", &m, "type", "veth", "peer", "name", "mgmt", "netns", &self.ctl,
        ]);
        self.mgmt = Some(m.clone());
        ip(&["addr", "add", "198.18.0.1/30", "dev", &m]);
        ip(&["link", "set", &m, "up"]);
        ip(&[
            "-n",
            &self.ctl,
            "addr",
            "add",
            "198.18.0.2/30",
            "dev",
            "mgmt",
        ]);
        ip(&["-n", &self.ctl, "link", "set", "mgmt", "up"]);
        ip(&["-n", &self.ctl, "link", "set", "lo", "up"]);
        let l = std::net::TcpListener::bind("198.18.0.1:0").expect("a free port");
        l.local_addr().expect("port").port()
    }

    fn config(&self, fpm: Option<u16>) -> String {
        let mut cfg = String::from("[dataplane]\nworkers = [0]\n");
        for (i, p) in ["h1", "bp", "b1", "b2"].iter().enumerate() {
            write!(
                cfg,
                "\n[[port]]\nname = \"{p}\"\ndriver = \"af_packet\"\ninterface = \"{}\"\n",
                self.link(i)
            )
            .unwrap();
        }
        let control = match fpm {
            // The listener in vrhost's own namespace, as for a VM: only
            // the control plane's address may connect.
            Some(p) => format!(
                "netns = \"{}\"\n  fpm = \"198.18.0.1:{p}\"\n  fpm_in = \"host\"\n  fpm_peers = [\"198.18.0.2\"]",
                self.ctl
            ),
            None => format!("netns = \"{}\"", self.ctl),
        };
        for (vr, control, ifaces) in [
            ("red", Some(control), [("r-h1", "h1"), ("r-bp", "bp")]),
            ("blue", None, [("b-h1", "b1"), ("b-h2", "b2")]),
        ] {
            write!(cfg, "\n[[router]]\nname = \"{vr}\"\n").unwrap();
            if let Some(c) = control {
                write!(cfg, "\n  [router.control]\n  {c}\n").unwrap();
            }
            // The same addresses in both VRs.
            for ((name, port), a) in ifaces.into_iter().zip(["10.0.0.1/24", "10.1.0.1/24"]) {
                write!(
                    cfg,
                    "\n  [[router.interface]]\n  name = \"{name}\"\n  port = \"{port}\"\n  addresses = [\"{a}\"]\n"
                )
                .unwrap();
            }
        }
        cfg
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    fn start_router(&mut self, fpm: Option<u16>) {
        let path = self.dir.join("router.toml");
        std::fs::write(&path, self.config(fpm)).expect("router config");
        let log = std::fs::File::create(self.dir.join("vrhost.log")).expect("log");
        let child = Command::new(VRHOST)
            .args(["run", "--config", path.to_str().expect("utf-8")])
            .env("VRHOST_LOG", "info")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting vrhost run");
        self.router = Some(child);
        self.wait_ping("h1", "10.1.0.2", READY);
        self.wait_ping("b1", "10.1.0.2", READY);
    }

    /// Pings until a reply comes, or fails with every log.
    fn wait_ping(&mut self, host: &str, dst: &str, limit: Duration) {
        let ns = self.ns(host);
        let start = Instant::now();
        loop {
            if let Some(Ok(Some(st))) = self.router.as_mut().map(Child::try_wait) {
                panic!("vrhost run exited ({st}):\n{}", self.log("vrhost.log"));
            }
            let out = ping(&ns, dst);
            if out.status.success() {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{host} never reached {dst} in {limit:?}:\n{}\n{}",
                text(&out),
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Pings until the router answers "unreachable" instead, or fails.
    fn wait_unreachable(&mut self, host: &str, dst: &str, from: &str, limit: Duration) {
        let ns = self.ns(host);
        let start = Instant::now();
        loop {
            let out = ping(&ns, dst);
            let t = text(&out);
            if !out.status.success()
                && t.contains(&format!("From {from} "))
                && t.contains("Unreachable")
            {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{host} still reaches {dst} (or no unreachable from {from}) after {limit:?}:\n{t}\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Asserts that `host` reaches `dst` now (a few tries for a lost packet).
    fn assert_ping(&mut self, host: &str, dst: &str) {
        self.wait_ping(host, dst, Duration::from_secs(3));
    }

    fn diagnostics(&self) -> String {
        let mut d = String::new();
        let vty = self.dir.display().to_string();
        for (what, out) in [
            (
                "vtysh show bgp summary",
                in_ns(
                    &self.ctl,
                    "vtysh",
                    &["--vty_socket", &vty, "-c", "show bgp summary"],
                ),
            ),
            ("ctl ip route", run("ip", &["-n", &self.ctl, "route"])),
            ("ctl ip neigh", run("ip", &["-n", &self.ctl, "neigh"])),
            ("ctl ip addr", run("ip", &["-n", &self.ctl, "-br", "addr"])),
            (
                "birdc show protocols",
                run(
                    "birdc",
                    &[
                        "-s",
                        &self.dir.join("bird.ctl").display().to_string(),
                        "show",
                        "protocols",
                        "all",
                        "red",
                    ],
                ),
            ),
        ] {
            let _ = writeln!(d, "--- {what} ---\n{}", text(&out));
        }
        for f in ["vrhost.log", "zebra.log", "bgpd.log", "bird.log"] {
            let _ = writeln!(d, "--- {f} ---\n{}", self.log(f));
        }
        d
    }

    /// Starts an FRR daemon in red's control namespace.
    fn frr(&mut self, daemon: &str, conf: &str, extra: &[&str]) {
        let d = self.dir.display().to_string();
        let conf_path = self.dir.join(format!("{daemon}.conf"));
        std::fs::write(&conf_path, conf).expect("FRR config");
        let log = std::fs::File::create(self.dir.join(format!("{daemon}.log"))).expect("log");
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ctl,
                &format!("/usr/lib/frr/{daemon}"),
            ])
            .args(extra)
            .args(["-f", &conf_path.display().to_string()])
            .args(["-i", &format!("{d}/{daemon}.pid")])
            .args(["-z", &format!("{d}/zserv.api")])
            .args(["--vty_socket", &d, "-P", "0"])
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting FRR");
        self.daemons.push((daemon.to_string(), child));
    }

    /// zebra (with `zebra_extra`) then bgpd, peering with BIRD at 10.1.0.2.
    fn start_frr(&mut self, zebra_conf: &str, zebra_extra: &[&str]) {
        self.frr("zebra", zebra_conf, zebra_extra);
        let zserv = self.dir.join("zserv.api");
        let start = Instant::now();
        while !zserv.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "zebra did not start: {}",
                self.log("zebra.log")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let bgpd = "hostname red\n\
            router bgp 65001\n \
             bgp router-id 10.1.0.1\n \
             no bgp ebgp-requires-policy\n \
             neighbor 10.1.0.2 remote-as 65002\n \
             neighbor 10.1.0.2 timers 3 9\n \
             neighbor 10.1.0.2 timers connect 1\n";
        self.frr("bgpd", bgpd, &[]);
    }

    /// BIRD on the external host bp, announcing two prefixes whose
    /// addresses live on its `lo` (this kernel may lack dummy devices).
    fn start_bird(&mut self) {
        let bp = self.ns("bp");
        ip(&["-n", &bp, "addr", "add", "198.51.100.1/32", "dev", "lo"]);
        ip(&["-n", &bp, "addr", "add", "203.0.113.1/32", "dev", "lo"]);
        // Aggregates announced the usual way: static blackholes, exported
        // with BIRD's own address as the next hop (eBGP).
        let conf = "router id 10.1.0.2;\n\
            protocol device {}\n\
            protocol static announced {\n  ipv4;\n  route 198.51.100.0/24 blackhole;\n  route 203.0.113.0/24 blackhole;\n}\n\
            protocol bgp red {\n  local 10.1.0.2 as 65002;\n  neighbor 10.1.0.1 as 65001;\n  \
              hold time 9;\n  connect retry time 1;\n  connect delay time 1;\n  error wait time 1, 5;\n  \
              ipv4 { import none; export where proto = \"announced\"; };\n}\n";
        let path = self.dir.join("bird.conf");
        std::fs::write(&path, conf).expect("BIRD config");
        let log = std::fs::File::create(self.dir.join("bird.log")).expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", &bp, "bird", "-f"])
            .args(["-c", &path.display().to_string()])
            .args(["-s", &self.dir.join("bird.ctl").display().to_string()])
            .args(["-P", &self.dir.join("bird.pid").display().to_string()])
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting bird");
        self.daemons.push(("bird".into(), child));
    }

    fn birdc(&self, args: &[&str]) -> Output {
        let sock = self.dir.join("bird.ctl").display().to_string();
        let mut all = vec!["-s", sock.as_str()];
        all.extend_from_slice(args);
        let out = run("birdc", &all);
        assert!(out.status.success(), "birdc {args:?}: {}", text(&out));
        out
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for (_, c) in self.daemons.iter_mut().rev() {
            stop(c);
        }
        if let Some(mut r) = self.router.take() {
            stop(&mut r);
        }
        if std::thread::panicking() {
            eprintln!("{}", self.diagnostics());
        }
        self.cleanup_namespaces();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ------------------------------------------------------------------ tests --

/// The common story: before, during and after BGP, red's host reaches
/// the announced prefixes only while they are announced; blue forwards
/// throughout and never sees them. `fpm`: the route source is zebra's FPM
/// stream rather than the namespace's kernel table.
fn bgp_drives_red(tag: &str, fpm: bool) {
    let t0 = Instant::now();
    let mut s = Scene::new(tag);
    let port = fpm.then(|| s.management_link());
    s.start_router(port);
    eprintln!(
        "{tag}: forwarding after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    // The mirrors are in red's namespace with the VR's addresses.
    let addrs = run("ip", &["-n", &s.ctl, "-br", "addr"]);
    let a = text(&addrs);
    assert!(
        a.contains("r-h1")
            && a.contains("10.0.0.1/24")
            && a.contains("r-bp")
            && a.contains("10.1.0.1/24"),
        "TAP mirrors in {}:\n{a}",
        s.ctl
    );

    // Before: no route in red; blue forwards.
    s.wait_unreachable("h1", "198.51.100.1", "10.0.0.1", READY);
    s.assert_ping("b1", "10.1.0.2");

    // Addresses the tenant adds in the namespace become the VR's, and go
    // again with it.
    s.wait_unreachable("h1", "10.0.5.1", "10.0.0.1", READY);
    ip(&["-n", &s.ctl, "addr", "add", "10.0.5.1/24", "dev", "r-h1"]);
    s.wait_ping("h1", "10.0.5.1", Duration::from_secs(10));
    ip(&["-n", &s.ctl, "addr", "del", "10.0.5.1/24", "dev", "r-h1"]);
    s.wait_unreachable("h1", "10.0.5.1", "10.0.0.1", Duration::from_secs(10));

    let zebra = match port {
        Some(p) => {
            format!("hostname red\nfpm address 198.18.0.1 port {p}\nno fpm use-next-hop-groups\n")
        }
        None => "hostname red\n".to_string(),
    };
    let extra: &[&str] = if fpm { &["-M", "dplane_fpm_nl"] } else { &[] };
    s.start_frr(&zebra, extra);
    s.start_bird();

    // During: the prefixes BIRD announces are in red's FIB.
    s.wait_ping("h1", "198.51.100.1", CONVERGE);
    s.wait_ping("h1", "203.0.113.1", Duration::from_secs(10));
    eprintln!(
        "{tag}: routes in red after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let route = text(&run(
        "ip",
        &["-n", &s.ctl, "route", "show", "198.51.100.0/24"],
    ));
    assert!(
        route.contains("via 10.1.0.2") && route.contains("bgp"),
        "{route}"
    );
    s.assert_ping("b1", "10.1.0.2");
    let out = ping(&s.ns("b1"), "198.51.100.1");
    assert!(
        !out.status.success() && text(&out).contains("Unreachable"),
        "blue reached red's BGP prefix:\n{}",
        text(&out)
    );
    // The source of red's routes, as logged by vrhost.
    let source = if fpm { "fpm 198.18.0.1:" } else { "netns " };
    let log = s.log("vrhost.log");
    assert!(
        log.lines()
            .any(|l| l.contains("tables updated") && l.contains(source) && l.contains("red")),
        "no table update from {source:?} in the log:\n{log}"
    );

    // Withdrawal: BIRD stops announcing; red answers unreachable.
    s.birdc(&["disable", "announced"]);
    s.wait_unreachable("h1", "198.51.100.1", "10.0.0.1", CONVERGE);
    s.wait_unreachable("h1", "203.0.113.1", "10.0.0.1", Duration::from_secs(10));
    eprintln!("{tag}: withdrawn after {:.1} s", t0.elapsed().as_secs_f64());
    // After: blue still forwards, red still reaches its peer.
    s.assert_ping("b1", "10.1.0.2");
    s.assert_ping("h1", "10.1.0.2");

    // And back: enabling the protocol announces again.
    s.birdc(&["enable", "announced"]);
    s.wait_ping("h1", "198.51.100.1", CONVERGE);
    s.assert_ping("b1", "10.1.0.2");
    drop(s);
    eprintln!("{tag}: done in {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn routes_from_the_namespace() {
    bgp_drives_red("n", false);
}

#[test]
fn routes_over_fpm() {
    bgp_drives_red("f", true);
}
