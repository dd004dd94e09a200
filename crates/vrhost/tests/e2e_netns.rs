//! End-to-end tests on real ports: `vrhost run` routes between Linux hosts
//! living in network namespaces (built with `vrhost lab up`), on af_packet,
//! af_xdp and tap. All three drivers run the same suite; see docs/lab.md.
//!
//! ```text
//!   netns <lab>-h1                 root netns                 netns <lab>-h2
//!   eth0 10.0.0.2 ── veth ── <link1> ══ vrhost run ══ <link2> ── veth ── eth0 10.1.0.2
//!   2001:db8::2/64           (af_packet | af_xdp port)                   2001:db8:1::2/64
//!                            to-h1: 10.0.0.1, 2001:db8::1
//!                            to-h2: 10.1.0.1, 2001:db8:1::1, mtu 1400
//!
//!   tap: each host's eth0 is a TAP device that vrhost's port attaches to
//!   in the host's namespace (no veth):
//!   eth0 (TAP) ════ vrhost run ════ eth0 (TAP)
//! ```
//!
//! af_packet and tap carry the hosts' default offloads (partial checksums,
//! TCP super-frames) in virtio-net headers; af_xdp runs with them off.
//!
//! Every test builds its own lab with unique namespace and veth names, so
//! tests run in parallel; a guard kills vrhost and removes the lab in `Drop`,
//! panics included. No config has a `[[router.neighbor]]`: the router
//! resolves every host with ARP / ND, and the hosts resolve it the same way.
//!
//! Requirements: root (namespaces, veth, XDP), and `ip`, `ping`, `ethtool`,
//! `tcpdump` and `sha256sum` on the PATH. Without them the tests fail, they
//! never skip.

mod common;

use common::{in_ns, require_root, require_tools, run, signal, stop, text};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");

/// How long a fresh router may take to forward the first ping (XDP attach,
/// first ARP / ND round trip).
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// The TCP transfer: tens of MB, checked by SHA-256 at both ends.
const TCP_BYTES: usize = 40 << 20;

// ---------------------------------------------------------------- helpers --

/// Fails (never skips) unless we are root and every tool is present.
fn require_environment() {
    require_root("e2e_netns", "netns, veth, XDP");
    require_tools(
        &["ip", "ping", "ethtool", "tcpdump", "sha256sum"],
        "iproute2 iputils-ping ethtool tcpdump coreutils",
    );
}

/// `ping -c 1` from `ns` with extra arguments.
fn ping(ns: &str, extra: &[&str], dst: &str) -> Output {
    let mut args = vec!["-n", "-c", "1", "-W", "1"];
    args.extend_from_slice(extra);
    args.push(dst);
    in_ns(ns, "ping", &args)
}

fn sha256(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running sha256sum");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(data)
        .expect("feeding sha256sum");
    let out = child.wait_with_output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("sha256sum printed nothing")
        .to_string()
}

/// Deterministic bytes that no offset of themselves repeats (xorshift64).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

// ------------------------------------------------------------ topology ---

/// One host of a lab: `<lab>-<name>` namespace, one veth to the router
/// (or, for the tap driver, a TAP as its `eth0`).
struct Host {
    name: &'static str,
    /// The router-side veth, in the root namespace (the vrhost port); for
    /// the tap driver, empty.
    link: String,
    v4: &'static str,
    gw4: &'static str,
    v6: &'static str,
    gw6: &'static str,
}

/// A lab plus the router running on it; `Drop` tears both down.
struct Lab {
    name: String,
    dir: tempfile::TempDir,
    spec: PathBuf,
    hosts: Vec<Host>,
    router: Option<Child>,
    /// Helpers (tcpdump) to stop with the lab.
    helpers: Vec<Child>,
}

impl Lab {
    /// Builds the namespaces. `tag` makes the names unique per test; the
    /// process id makes them unique per test run.
    fn up(driver: &str, tag: &str, hosts: &[(&'static str, [&'static str; 4])]) -> Lab {
        // af_packet and tap carry the peers' default offloads; af_xdp cannot.
        let offloads = vec![driver != "af_xdp"; hosts.len()];
        Lab::up_offloads(driver, tag, hosts, &offloads)
    }

    /// [`Lab::up`], each host's link keeping Linux's default offloads or
    /// not as `offloads` says.
    fn up_offloads(
        driver: &str,
        tag: &str,
        hosts: &[(&'static str, [&'static str; 4])],
        offloads: &[bool],
    ) -> Lab {
        require_environment();
        let tap = driver == "tap";
        let d = match driver {
            "af_packet" => "p",
            "af_xdp" => "x",
            "tap" => "t",
            _ => "m",
        };
        let pid = std::process::id() % 100_000;
        let name = format!("e2e-{d}{tag}{pid}");
        let hosts: Vec<Host> = hosts
            .iter()
            .enumerate()
            .map(|(i, (n, [v4, gw4, v6, gw6]))| Host {
                name: n,
                link: if tap {
                    String::new()
                } else {
                    format!("v{d}{tag}{pid}{i}")
                },
                v4,
                gw4,
                v6,
                gw6,
            })
            .collect();
        let mut spec = format!("name = \"{name}\"\n");
        for (h, on) in hosts.iter().zip(offloads) {
            assert!(h.link.len() <= 15, "link name {} too long", h.link);
            let link = if tap {
                "tap = true".to_string()
            } else {
                format!("link = \"{}\"", h.link)
            };
            write!(
                spec,
                "\n[[host]]\nname = \"{}\"\n{link}\naddress = \"{}\"\ngateway = \"{}\"\naddress6 = \"{}\"\ngateway6 = \"{}\"\noffloads = {on}\n",
                h.name, h.v4, h.gw4, h.v6, h.gw6
            )
            .unwrap();
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let spec_path = dir.path().join("lab.toml");
        std::fs::write(&spec_path, spec).expect("writing the lab spec");
        let lab = Lab {
            name,
            dir,
            spec: spec_path,
            hosts,
            router: None,
            helpers: Vec::new(),
        };
        // Leftovers of a crashed run with the same pid would make `up` fail.
        lab.vrhost_lab("down");
        let out = lab.vrhost_lab("up");
        assert!(
            out.status.success(),
            "vrhost lab up failed:\n{}",
            text(&out)
        );
        lab
    }

    fn vrhost_lab(&self, action: &str) -> Output {
        run(
            VRHOST,
            &["lab", action, self.spec.to_str().expect("utf-8 path")],
        )
    }

    fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.name)
    }

    fn link(&self, host: &str) -> &str {
        &self
            .hosts
            .iter()
            .find(|h| h.name == host)
            .expect("host")
            .link
    }

    /// Starts `vrhost run` on `config` (where `{link:HOST}` stands for the
    /// port keys that reach that host: its veth, or its namespace's TAP)
    /// and waits until `host` pings `dst` through it.
    fn start_router(&mut self, config: &str, ready: &[(&str, &str)]) {
        let mut cfg = config.to_string();
        for h in &self.hosts {
            let keys = if h.link.is_empty() {
                format!("interface = \"eth0\"\nnetns = \"{}\"", self.ns(h.name))
            } else {
                format!("interface = \"{}\"", h.link)
            };
            cfg = cfg.replace(&format!("interface = \"{{link:{}}}\"", h.name), &keys);
        }
        assert!(!cfg.contains("{link:"), "unexpanded {{link:…}} in:\n{cfg}");
        assert!(
            !cfg.contains("[[router.neighbor]]"),
            "neighbours must resolve dynamically"
        );
        let path = self.dir.path().join("router.toml");
        std::fs::write(&path, cfg).expect("writing the router config");
        let log = std::fs::File::create(self.log_path()).expect("log file");
        let child = Command::new(VRHOST)
            .args(["run", "--config", path.to_str().expect("utf-8 path")])
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("starting vrhost run");
        self.router = Some(child);
        for (host, dst) in ready {
            self.wait_ping(host, dst);
        }
    }

    /// Stops `vrhost run`, as `Drop` does, and waits for it to exit.
    fn stop_router(&mut self) {
        if let Some(mut r) = self.router.take() {
            stop(&mut r);
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("vrhost.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Pings until one reply comes back, or fails with the router's log.
    fn wait_ping(&mut self, host: &str, dst: &str) {
        let ns = self.ns(host);
        let start = Instant::now();
        loop {
            if let Some(Ok(Some(status))) = self.router.as_mut().map(Child::try_wait) {
                panic!(
                    "vrhost run exited ({status}) before forwarding:\n{}",
                    self.log()
                );
            }
            let out = ping(&ns, &[], dst);
            if out.status.success() {
                return;
            }
            assert!(
                start.elapsed() < READY_TIMEOUT,
                "{host} never reached {dst} through vrhost in {READY_TIMEOUT:?}:\n{}\n--- vrhost log ---\n{}",
                text(&out),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts tcpdump in `host`'s namespace and waits until it captures.
    fn capture(&mut self, host: &str, filter: &str) -> Capture {
        let err = self.dir.path().join(format!("tcpdump-{host}.err"));
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns(host),
                "tcpdump",
                "-n",
                "-p",
                "-i",
                "eth0",
            ])
            .args(["--immediate-mode", "-w", "/dev/null", filter])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("tcpdump log"))
            .spawn()
            .expect("starting tcpdump");
        let start = Instant::now();
        while !std::fs::read_to_string(&err)
            .unwrap_or_default()
            .contains("listening on")
        {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "tcpdump in {host} did not start: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.helpers.push(child);
        Capture {
            index: self.helpers.len() - 1,
            err,
        }
    }

    /// Stops a capture and returns how many packets matched its filter.
    fn captured(&mut self, c: Capture) -> u64 {
        let child = &mut self.helpers[c.index];
        // `ip netns exec` execs tcpdump, so this pid is tcpdump's.
        signal(child, "INT");
        let _ = child.wait();
        let err = std::fs::read_to_string(&c.err).unwrap_or_default();
        err.lines()
            .find_map(|l| l.strip_suffix(" packets captured"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("tcpdump printed no count:\n{err}"))
    }
}

struct Capture {
    index: usize,
    err: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for h in self.helpers.iter_mut() {
            stop(h);
        }
        self.stop_router();
        if std::thread::panicking() {
            eprintln!("--- vrhost log ({}) ---\n{}", self.name, self.log());
        }
        let out = self.vrhost_lab("down");
        if !out.status.success() {
            eprintln!("vrhost lab down {}: {}", self.name, text(&out));
        }
    }
}

// ------------------------------------------------------------- configs ---

/// h1 and h2 on two subnets.
const TWO_HOSTS: &[(&str, [&str; 4])] = &[
    (
        "h1",
        ["10.0.0.2/24", "10.0.0.1", "2001:db8::2/64", "2001:db8::1"],
    ),
    (
        "h2",
        [
            "10.1.0.2/24",
            "10.1.0.1",
            "2001:db8:1::2/64",
            "2001:db8:1::1",
        ],
    ),
];

/// The worker core: spread parallel tests over the machine's cores.
fn core(tag: &str) -> usize {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    tag.bytes().map(usize::from).sum::<usize>() % n
}

/// One VR between h1 and h2; the egress toward h2 has mtu 1400.
fn one_vr(driver: &str, tag: &str) -> String {
    format!(
        r#"
[dataplane]
workers = [{core}]

[[port]]
name = "h1"
driver = "{driver}"
interface = "{{link:h1}}"

[[port]]
name = "h2"
driver = "{driver}"
interface = "{{link:h2}}"

[[router]]
name = "red"

  [[router.interface]]
  name = "to-h1"
  port = "h1"
  addresses = ["10.0.0.1/24", "2001:db8::1/64"]

  [[router.interface]]
  name = "to-h2"
  port = "h2"
  mtu = 1400
  addresses = ["10.1.0.1/24", "2001:db8:1::1/64"]
"#,
        core = core(tag)
    )
}

fn two_host_lab(driver: &str, tag: &str) -> Lab {
    let mut lab = Lab::up(driver, tag, TWO_HOSTS);
    lab.start_router(&one_vr(driver, tag), &[("h1", "10.1.0.2")]);
    lab
}

fn assert_output(out: &Output, wants: &[&str]) {
    let t = text(out);
    for w in wants {
        assert!(t.contains(w), "expected {w:?} in:\n{t}");
    }
}

// --------------------------------------------------------------- tests ---

/// IPv4 and IPv6 ping across subnets; the hosts learnt the router's MAC by
/// ARP / ND, and the router learnt theirs (there are no static entries).
fn ping_v4_v6_dynamic_neighbors(driver: &str) {
    let mut lab = two_host_lab(driver, "pg");
    lab.wait_ping("h1", "2001:db8:1::2");
    lab.wait_ping("h2", "10.0.0.2");
    lab.wait_ping("h2", "2001:db8::2");
    let h1 = lab.ns("h1");
    let out = in_ns(
        &h1,
        "ping",
        &["-n", "-c", "3", "-i", "0.05", "-W", "1", "10.1.0.2"],
    );
    assert_output(&out, &["3 received", "ttl=63"]);
    let out = in_ns(
        &h1,
        "ping",
        &[
            "-n",
            "-6",
            "-c",
            "3",
            "-i",
            "0.05",
            "-W",
            "1",
            "2001:db8:1::2",
        ],
    );
    assert_output(&out, &["3 received", "ttl=63"]);
    for (host, gw4, gw6) in [
        ("h1", "10.0.0.1", "2001:db8::1"),
        ("h2", "10.1.0.1", "2001:db8:1::1"),
    ] {
        let mac = if driver == "tap" {
            // Not the TAP's own MAC (the host's end): one of the port's.
            let m = vrhost_daemon::runtime::tap_mac(host);
            m.map(|b| format!("{b:02x}")).join(":")
        } else {
            std::fs::read_to_string(format!("/sys/class/net/{}/address", lab.link(host)))
                .expect("router-side MAC")
        };
        for (fam, gw) in [("-4", gw4), ("-6", gw6)] {
            let out = in_ns(
                &lab.ns(host),
                "ip",
                &[fam, "neigh", "show", gw, "dev", "eth0"],
            );
            assert_output(&out, &[&format!("lladdr {}", mac.trim())]);
        }
    }
}

/// `ping -t 1` gets Time Exceeded from the router's ingress address.
fn ttl_exceeded(driver: &str) {
    let mut lab = two_host_lab(driver, "tl");
    lab.wait_ping("h1", "2001:db8:1::2");
    let h1 = lab.ns("h1");
    let out = ping(&h1, &["-t", "1"], "10.1.0.2");
    assert_output(&out, &["From 10.0.0.1 ", "Time to live exceeded"]);
    let out = ping(&h1, &["-6", "-t", "1"], "2001:db8:1::2");
    assert_output(&out, &["From 2001:db8::1 ", "Time exceeded: Hop limit"]);
}

/// `ping -M do` over the 1400-byte egress MTU gets Fragmentation Needed
/// (IPv6: Packet Too Big); exactly 1400 bytes pass.
fn frag_needed(driver: &str) {
    let mut lab = two_host_lab(driver, "mt");
    lab.wait_ping("h1", "2001:db8:1::2");
    let h1 = lab.ns("h1");
    // 1372 + 8 (ICMP) + 20 (IPv4) = 1400: fits.
    let out = ping(&h1, &["-M", "do", "-s", "1372"], "10.1.0.2");
    assert_output(&out, &["1 received"]);
    let out = ping(&h1, &["-M", "do", "-s", "1450"], "10.1.0.2");
    assert_output(
        &out,
        &["From 10.0.0.1 ", "Frag needed and DF set (mtu = 1400)"],
    );
    // 1352 + 8 + 40 = 1400.
    let out = ping(&h1, &["-6", "-M", "do", "-s", "1352"], "2001:db8:1::2");
    assert_output(&out, &["1 received"]);
    let out = ping(&h1, &["-6", "-M", "do", "-s", "1450"], "2001:db8:1::2");
    assert_output(&out, &["From 2001:db8::1 ", "Packet too big: mtu=1400"]);
}

/// Accepts one connection in `ns` on `addr` and hands the bytes received
/// back; `ready` fires once the socket listens.
fn tcp_sink(
    ns: String,
    addr: SocketAddr,
    ready: mpsc::Sender<()>,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        vrhost_io::netns::enter(&ns).expect("entering the server namespace");
        let l = TcpListener::bind(addr).expect("bind");
        ready.send(()).expect("ready");
        let (mut s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut got = Vec::with_capacity(TCP_BYTES);
        s.read_to_end(&mut got).expect("receiving");
        got
    })
}

/// A TCP transfer of tens of MB between kernel stacks in h1 and h2 arrives
/// intact (SHA-256 of what was sent = of what arrived). The path's MTU is
/// 1400, so the sender also relies on Fragmentation Needed (PMTUD).
fn tcp_transfer_sha256(driver: &str) {
    let lab = two_host_lab(driver, "tc");
    let addr: SocketAddr = "10.1.0.2:5001".parse().unwrap();
    let (tx, rx) = mpsc::channel();
    let server = tcp_sink(lab.ns("h2"), addr, tx);
    rx.recv_timeout(Duration::from_secs(5))
        .expect("server listening");
    let data = pattern(TCP_BYTES, 0x5eed);
    let sent_hash = sha256(&data);
    let start = Instant::now();
    let h1 = lab.ns("h1");
    let sent = vrhost_io::netns::run_in(&h1, || -> std::io::Result<usize> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_write_timeout(Some(Duration::from_secs(20)))?;
        s.write_all(&data)?;
        s.shutdown(Shutdown::Write)?;
        Ok(data.len())
    })
    .expect("entering h1")
    .expect("sending");
    let got = server.join().expect("server thread");
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{driver}: {} bytes in {secs:.2} s ({:.0} Mbit/s)",
        got.len(),
        got.len() as f64 * 8.0 / secs / 1e6
    );
    assert_eq!(got.len(), sent, "bytes received");
    assert_eq!(sha256(&got), sent_hash, "SHA-256 of the received bytes");
    drop(lab);
}

/// UDP datagrams from h1 to h2, of every size up to what the 1400-byte
/// path takes whole and some that h1 fragments: each arrives once and
/// intact. With the peers' offloads on, h1's kernel leaves their checksums
/// partial; a router that did not carry that would see every one dropped
/// by h2's kernel as corrupt.
fn udp_datagrams_intact(lab: &Lab) {
    let addr: SocketAddr = "10.1.0.2:5003".parse().unwrap();
    let sizes: Vec<usize> = (0..300)
        .map(|i| {
            if i % 50 == 49 {
                3000
            } else {
                8 + (i * 97) % 1364
            }
        })
        .collect();
    let datagram = |i: usize| {
        let mut d = pattern(sizes[i], i as u64 + 1);
        d[..4].copy_from_slice(&(i as u32).to_be_bytes());
        d
    };
    let (tx, rx) = mpsc::channel();
    let h2 = lab.ns("h2");
    let n = sizes.len();
    let server = std::thread::spawn(move || {
        vrhost_io::netns::enter(&h2).expect("entering h2");
        let s = std::net::UdpSocket::bind(addr).expect("bind");
        s.set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        tx.send(()).expect("ready");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < n {
            match s.recv(&mut buf) {
                Ok(k) => got.push(buf[..k].to_vec()),
                Err(_) => break,
            }
        }
        got
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("server bound");
    vrhost_io::netns::run_in(&lab.ns("h1"), || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
        for i in 0..n {
            s.send_to(&datagram(i), addr).expect("send");
            // Paced, so that h2's socket buffer never overflows.
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    })
    .expect("entering h1");
    let got = server.join().expect("server thread");
    let ids: Vec<u32> = got
        .iter()
        .filter_map(|d| Some(u32::from_be_bytes(d.get(..4)?.try_into().ok()?)))
        .collect();
    assert_eq!(got.len(), n, "datagrams received: {ids:?}\n{}", lab.log());
    let mut seen = vec![false; n];
    for d in &got {
        let i = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
        assert!(i < n && !seen[i], "datagram {i} once");
        seen[i] = true;
        assert_eq!(d, &datagram(i), "datagram {i} intact");
    }
}

fn udp_with_peer_offloads(driver: &str) {
    let lab = two_host_lab(driver, "ud");
    udp_datagrams_intact(&lab);
}

/// h1 on af_packet with its default offloads, h2 on af_xdp without: what
/// h1 leaves undone (partial checksums, TCP super-frames) the router
/// finishes in software before af_xdp sends it. TCP and UDP both arrive
/// intact.
#[test]
fn offloads_finished_in_software_toward_af_xdp() {
    let mut lab = Lab::up_offloads("af_mixed", "mx", TWO_HOSTS, &[true, false]);
    let cfg = one_vr("af_xdp", "mx").replacen("driver = \"af_xdp\"", "driver = \"af_packet\"", 1);
    // Both links at 1500, so h1's super-frames reach the af_xdp egress
    // whole and are cut there.
    let cfg = cfg.replace("  mtu = 1400\n", "");
    lab.start_router(&cfg, &[("h1", "10.1.0.2")]);
    udp_datagrams_intact(&lab);
    let addr: SocketAddr = "10.1.0.2:5001".parse().unwrap();
    let (tx, rx) = mpsc::channel();
    let server = tcp_sink(lab.ns("h2"), addr, tx);
    rx.recv_timeout(Duration::from_secs(5))
        .expect("server listening");
    let data = pattern(TCP_BYTES / 4, 0xfeed);
    vrhost_io::netns::run_in(&lab.ns("h1"), || -> std::io::Result<()> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_write_timeout(Some(Duration::from_secs(20)))?;
        s.write_all(&data)?;
        s.shutdown(Shutdown::Write)
    })
    .expect("entering h1")
    .expect("sending");
    let got = server.join().expect("server thread");
    assert_eq!(got.len(), data.len(), "bytes received");
    assert_eq!(sha256(&got), sha256(&data), "SHA-256 of the received bytes");
}

/// Red and blue both use 10.0.0.0/24 and 10.1.0.0/24 (and the same IPv6
/// subnets) on separate ports of one vrhost, at the same time. Each reaches
/// its own hosts only; blue alone has 10.2.0.0/24, and red cannot reach it.
fn two_tenants_isolated(driver: &str) {
    let hosts: &[(&str, [&str; 4])] = &[
        (
            "r1",
            ["10.0.0.2/24", "10.0.0.1", "2001:db8::2/64", "2001:db8::1"],
        ),
        (
            "r2",
            [
                "10.1.0.2/24",
                "10.1.0.1",
                "2001:db8:1::2/64",
                "2001:db8:1::1",
            ],
        ),
        (
            "b1",
            ["10.0.0.2/24", "10.0.0.1", "2001:db8::2/64", "2001:db8::1"],
        ),
        (
            "b2",
            [
                "10.1.0.2/24",
                "10.1.0.1",
                "2001:db8:1::2/64",
                "2001:db8:1::1",
            ],
        ),
        (
            "b3",
            [
                "10.2.0.2/24",
                "10.2.0.1",
                "2001:db8:2::2/64",
                "2001:db8:2::1",
            ],
        ),
    ];
    let mut lab = Lab::up(driver, "tn", hosts);
    let mut cfg = format!("[dataplane]\nworkers = [{}]\n", core("tn"));
    for p in ["r1", "r2", "b1", "b2", "b3"] {
        write!(
            cfg,
            "\n[[port]]\nname = \"{p}\"\ndriver = \"{driver}\"\ninterface = \"{{link:{p}}}\"\n"
        )
        .unwrap();
    }
    for (vr, ifs) in [
        (
            "red",
            &[
                ("r1", "10.0.0.1/24", "2001:db8::1/64"),
                ("r2", "10.1.0.1/24", "2001:db8:1::1/64"),
            ][..],
        ),
        (
            "blue",
            &[
                ("b1", "10.0.0.1/24", "2001:db8::1/64"),
                ("b2", "10.1.0.1/24", "2001:db8:1::1/64"),
                ("b3", "10.2.0.1/24", "2001:db8:2::1/64"),
            ][..],
        ),
    ] {
        write!(cfg, "\n[[router]]\nname = \"{vr}\"\n").unwrap();
        for (port, a4, a6) in ifs {
            write!(
                cfg,
                "\n  [[router.interface]]\n  name = \"{vr}-{port}\"\n  port = \"{port}\"\n  addresses = [\"{a4}\", \"{a6}\"]\n"
            )
            .unwrap();
        }
    }
    lab.start_router(
        &cfg,
        &[("r1", "10.1.0.2"), ("b1", "10.1.0.2"), ("b1", "10.2.0.2")],
    );
    lab.wait_ping("r1", "2001:db8:1::2");
    lab.wait_ping("b1", "2001:db8:1::2");

    // Who answers 10.1.0.2:7000? Each tenant's h1 must reach its own h2.
    let addr: SocketAddr = "10.1.0.2:7000".parse().unwrap();
    for (client, server, word) in [("r1", "r2", "red"), ("b1", "b2", "blue")] {
        let (tx, rx) = mpsc::channel();
        let ns = lab.ns(server);
        let srv = std::thread::spawn(move || {
            vrhost_io::netns::enter(&ns).expect("netns");
            let l = TcpListener::bind(addr).expect("bind");
            tx.send(()).expect("ready");
            let (mut s, _) = l.accept().expect("accept");
            s.write_all(word.as_bytes()).expect("write");
        });
        rx.recv_timeout(Duration::from_secs(5)).expect("listening");
        let got = vrhost_io::netns::run_in(&lab.ns(client), || {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut w = String::new();
            s.read_to_string(&mut w).expect("read");
            w
        })
        .expect("netns");
        srv.join().expect("server");
        assert_eq!(got, word, "{client} reached the wrong 10.1.0.2");
    }

    // Red's marked pings (1234 data bytes: IPv4 total length 1262) reach
    // red's host, and none appears at blue's hosts, though blue pings the
    // very same addresses at the same time.
    let marked = "icmp and ip[2:2] = 1262";
    let seen_r2 = lab.capture("r2", marked);
    let seen_b1 = lab.capture("b1", marked);
    let seen_b2 = lab.capture("b2", marked);
    // Echo requests only: blue's own ND toward b3 is not red's traffic.
    let seen_b3 = lab.capture("b3", "icmp or (icmp6 and ip6[40] == 128)");
    let (r1, b1) = (lab.ns("r1"), lab.ns("b1"));
    let blue = std::thread::spawn(move || {
        in_ns(
            &b1,
            "ping",
            &["-n", "-c", "10", "-i", "0.02", "-W", "1", "10.1.0.2"],
        )
    });
    let out = in_ns(
        &r1,
        "ping",
        &[
            "-n", "-c", "10", "-i", "0.02", "-W", "1", "-s", "1234", "10.1.0.2",
        ],
    );
    assert_output(&out, &["10 received"]);
    assert_output(&blue.join().expect("blue ping"), &["10 received"]);
    let out = in_ns(
        &r1,
        "ping",
        &[
            "-n",
            "-6",
            "-c",
            "3",
            "-i",
            "0.02",
            "-W",
            "1",
            "2001:db8:1::2",
        ],
    );
    assert_output(&out, &["3 received"]);

    // The probe: red's host toward addresses only blue has.
    for (dst, v6) in [
        ("10.2.0.2", false),
        ("10.2.0.1", false),
        ("2001:db8:2::2", true),
    ] {
        let extra: &[&str] = if v6 { &["-6"] } else { &[] };
        let out = ping(&r1, extra, dst);
        assert!(
            !out.status.success() && !text(&out).contains("bytes from"),
            "red reached blue's {dst}:\n{}",
            text(&out)
        );
    }
    let probe = vrhost_io::netns::run_in(&r1, || {
        TcpStream::connect_timeout(&"10.2.0.2:7000".parse().unwrap(), Duration::from_secs(1))
    })
    .expect("netns");
    assert!(probe.is_err(), "red connected to blue's 10.2.0.2");

    // 10 echo requests in and 10 replies out, both 1262 bytes.
    assert_eq!(lab.captured(seen_r2), 20, "red's pings at red's h2");
    assert_eq!(lab.captured(seen_b1), 0, "red's replies at blue's h1");
    assert_eq!(lab.captured(seen_b2), 0, "red's pings at blue's h2");
    assert_eq!(lab.captured(seen_b3), 0, "red's probes at blue's h3");
    // Blue itself does reach 10.2.0.2 (it answered the readiness ping).
    lab.wait_ping("b1", "2001:db8:2::2");
}

/// A rule list on what enters from h1 denies TCP to port 5002: a kernel
/// connect from h1 to h2 there times out (the SYN is dropped, counted by
/// the rule), while port 5003 is answered at once (RST: refused) and ping
/// passes. `vrhost ctl filters show` reports the rule's hits; taking the
/// list off the interface with `vrhost ctl filters apply` lets 5002 through.
fn filters_on_real_traffic(driver: &str) {
    let mut lab = Lab::up(driver, "fl", TWO_HOSTS);
    let socket = lab.dir.path().join("api.sock");
    let admin = "filters-admin-token";
    let config = one_vr(driver, "fl")
        .replace(
            "[[router]]",
            &format!(
                "[api]\nsocket = \"{}\"\nadmin_token_sha256 = \"{}\"\n\n[[router]]",
                socket.display(),
                vrhost_api::hash_token(admin)
            ),
        )
        .replace(
            "  name = \"to-h1\"\n  port = \"h1\"\n",
            "  name = \"to-h1\"\n  port = \"h1\"\n  filter_in = \"edge\"\n",
        )
        + "\n  [[router.filter]]\n  name = \"edge\"\n    [[router.filter.rule]]\n    action = \"deny\"\n    \
           protocol = \"tcp\"\n    dst_port = 5002\n";
    lab.start_router(&config, &[("h1", "10.1.0.2")]);
    let h1 = lab.ns("h1");
    let connect = |port: u16| {
        let addr: SocketAddr = format!("10.1.0.2:{port}").parse().expect("addr");
        vrhost_io::netns::run_in(&h1, || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(1500)).map(drop)
        })
        .expect("entering h1")
    };
    let kind = |r: std::io::Result<()>| r.map_err(|e| e.kind());
    assert_eq!(
        kind(connect(5003)),
        Err(std::io::ErrorKind::ConnectionRefused),
        "an unfiltered port answers"
    );
    assert_eq!(
        kind(connect(5002)),
        Err(std::io::ErrorKind::TimedOut),
        "the denied port never answers"
    );
    let ctl = |args: &[&str]| {
        let mut all = vec![
            "ctl",
            "--socket",
            socket.to_str().expect("utf-8"),
            "--token",
            admin,
        ];
        all.extend_from_slice(args);
        run(VRHOST, &all)
    };
    let out = ctl(&["--json", "filters", "show", "red"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let hits = shown["filter"][0]["rule"][0]["hits"]
        .as_u64()
        .expect("hits");
    assert!(hits >= 1, "the rule counted the SYNs: {shown}");
    assert!(
        shown["filter"][0]["default_hits"].as_u64() >= Some(1),
        "pings and the other SYN took the default: {shown}"
    );
    let out = ctl(&["filters", "show", "red"]);
    assert_output(&out, &["filter edge (default permit)", "5002", "to-h1"]);
    let out = ctl(&["filters", "apply", "red", "to-h1"]);
    assert_output(&out, &["replaced"]);
    assert_eq!(
        kind(connect(5002)),
        Err(std::io::ErrorKind::ConnectionRefused),
        "without the list the port answers"
    );
    lab.wait_ping("h1", "10.1.0.2");
}

/// Nanoseconds the thread named `name` of process `pid` has run on a CPU
/// so far (the first field of its `schedstat`).
fn thread_cpu_ns(pid: u32, name: &str) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the router's threads");
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("schedstat")).expect("schedstat");
        return stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .expect("schedstat's run time");
    }
    panic!("no thread {name} in vrhost {pid}");
}

/// An idle worker waits on its queues instead of spinning: over two idle
/// seconds it runs for well under a sixth of them (it spun through empty
/// polls and 20 µs naps before, a quarter to a half; 3–4% since, on the
/// machine this was written on), and the first packets after the pause
/// wake it at once.
fn an_idle_worker_gives_its_core_back(driver: &str) {
    let mut lab = two_host_lab(driver, "id");
    lab.wait_ping("h1", "2001:db8:1::2");
    let pid = lab.router.as_ref().expect("router").id();
    std::thread::sleep(Duration::from_millis(500));
    let (t0, ran0) = (Instant::now(), thread_cpu_ns(pid, "vrhost-worker-0"));
    std::thread::sleep(Duration::from_secs(2));
    let ran = thread_cpu_ns(pid, "vrhost-worker-0").saturating_sub(ran0);
    let share = ran as f64 / t0.elapsed().as_nanos() as f64;
    assert!(
        share < 0.15,
        "the idle worker ran {:.1}% of the time ({} ms in {:?})",
        share * 100.0,
        ran / 1_000_000,
        t0.elapsed()
    );
    let out = in_ns(
        &lab.ns("h1"),
        "ping",
        &["-n", "-c", "5", "-i", "0.3", "-W", "1", "10.1.0.2"],
    );
    assert_output(&out, &["5 received"]);
}

/// The TcpExt counters of `ns`, by name.
fn tcp_ext(ns: &str) -> Vec<(String, u64)> {
    let out = in_ns(ns, "cat", &["/proc/net/netstat"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("TcpExt:")).collect();
    assert_eq!(lines.len(), 2, "TcpExt names and values:\n{text}");
    lines[0]
        .split_whitespace()
        .zip(lines[1].split_whitespace())
        .skip(1)
        .map(|(name, v)| (name.to_string(), v.parse().expect("counter")))
        .collect()
}

/// The counters of `ext` whose names end in `Reorder`, summed: the times
/// its TCP saw its segments arrive out of order.
fn reorders(ext: &[(String, u64)]) -> u64 {
    ext.iter()
        .filter(|(n, _)| n.ends_with("Reorder"))
        .map(|(_, v)| v)
        .sum()
}

/// An af_packet port on a veth points the kernel's receive work for it at
/// the cores with no worker (RPS), and empties the mask again when it
/// stops; an operator's own mask is left alone. With it, one TCP stream's
/// segments reach the ring in order: the sender, whose stack transmits both
/// from its own core and from the worker's (where vrhost's delivery of its
/// ACKs runs it), sees no reordering (at most 2 allowed: a retransmission
/// timeout may move the flow to another backlog where several cores steer).
/// Without it the two cores' backlogs drained independently: 1,023–1,440
/// reorderings in this test's two seconds, three runs with `rps = false`.
#[test]
fn af_packet_steers_receive_work_off_the_worker() {
    require_tools(&["iperf3"], "iperf3");
    let mut lab = two_host_lab("af_packet", "rp");
    let worker = core("rp");
    let (l1, l2) = (lab.link("h1").to_string(), lab.link("h2").to_string());
    let mask = |link: &str| vrhost_io::rps::shown(link).expect("rps_cpus");
    let cpus = vrhost_io::rps::steer_cpus(&[worker]).expect("online cores");
    // No core left (one CPU): the masks stay empty.
    let others = vrhost_io::rps::normalized(&vrhost_io::rps::mask_text(&cpus)).to_string();
    assert_eq!(mask(&l1), others, "h1's link steers to the other cores");
    assert_eq!(mask(&l2), others, "h2's link steers to the other cores");

    // One TCP stream, h1 to h2, two seconds.
    let server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns("h2"),
            "iperf3",
            "-s",
            "-1",
            "-B",
            "10.1.0.2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting iperf3 -s");
    lab.helpers.push(server);
    let before = reorders(&tcp_ext(&lab.ns("h1")));
    let start = Instant::now();
    let out = loop {
        let out = in_ns(&lab.ns("h1"), "iperf3", &["-c", "10.1.0.2", "-t", "2"]);
        if out.status.success() || start.elapsed() > Duration::from_secs(5) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100)); // the server is not up yet
    };
    assert!(out.status.success(), "iperf3 -c:\n{}", text(&out));
    let ext = tcp_ext(&lab.ns("h1"));
    let seen = reorders(&ext) - before;
    // None in order; a retransmission timeout may move the flow to another
    // backlog where several cores steer (its hash is chosen anew), once.
    let said: Vec<_> = ext
        .iter()
        .filter(|(n, v)| {
            *v > 0
                && ["Reorder", "Retrans", "DSACK", "Rehash", "Timeout"]
                    .iter()
                    .any(|k| n.contains(k))
        })
        .collect();
    assert!(
        seen <= 2,
        "segments out of order {seen} times: {said:?}\n{}",
        text(&out)
    );

    // Stopped, it empties the masks it set.
    lab.stop_router();
    assert_eq!(mask(&l1), "", "h1's mask emptied");
    assert_eq!(mask(&l2), "", "h2's mask emptied");

    // An operator's mask stays as the operator set it, then and after.
    let own = vrhost_io::rps::mask_text(&[worker]);
    std::fs::write(format!("/sys/class/net/{l2}/queues/rx-0/rps_cpus"), &own).expect("own mask");
    lab.start_router(&one_vr("af_packet", "rp"), &[("h1", "10.1.0.2")]);
    assert_eq!(mask(&l1), others);
    assert_eq!(mask(&l2), own, "the operator's mask kept");
    lab.stop_router();
    assert_eq!(mask(&l2), own, "the operator's mask kept after");
    assert_eq!(mask(&l1), "");
}

/// Every driver runs the same suite: `af_packet::*`, `af_xdp::*`, `tap::*`.
macro_rules! suite {
    ($($driver:ident),*) => {$(
        mod $driver {
            #[test]
            fn ping_v4_v6_dynamic_neighbors() {
                super::ping_v4_v6_dynamic_neighbors(stringify!($driver));
            }
            #[test]
            fn ttl_exceeded() {
                super::ttl_exceeded(stringify!($driver));
            }
            #[test]
            fn frag_needed() {
                super::frag_needed(stringify!($driver));
            }
            #[test]
            fn tcp_transfer_sha256() {
                super::tcp_transfer_sha256(stringify!($driver));
            }
            #[test]
            fn udp_with_peer_offloads() {
                super::udp_with_peer_offloads(stringify!($driver));
            }
            #[test]
            fn two_tenants_isolated() {
                super::two_tenants_isolated(stringify!($driver));
            }
            #[test]
            fn filters_on_real_traffic() {
                super::filters_on_real_traffic(stringify!($driver));
            }
            #[test]
            fn an_idle_worker_gives_its_core_back() {
                super::an_idle_worker_gives_its_core_back(stringify!($driver));
            }
        }
    )*};
}

suite!(af_packet, af_xdp, tap);
