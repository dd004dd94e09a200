//! Packet trace end to end: `vrhost run` forwarding a replayed pcap on
//! memory ports, `vrhost ctl trace` through the API while it forwards,
//! as text and as JSON, scoped to the token's VR.
//!
//! ```text
//!  p0 (memory, replays in.pcap) ── red0 10.0.0.1/24 ── red ── red1 (p1, VLAN 100) ── gw 10.1.0.2 (static)
//!  p2 (memory, replays in.pcap) ── blue0 ───────────── blue
//! ```

mod common;

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use pcap_file::pcap::{PcapPacket, PcapWriter};
use vrhost_api::types::TraceReport;
use vrhost_api::{hash_token, Client};

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");
const ADMIN: &str = "trace-test-admin-token";
const RED: &str = "trace-test-red-token";
const BLUE: &str = "trace-test-blue-token";

/// Stops the daemon even when the test fails.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        common::stop(&mut self.0);
    }
}

fn config() -> String {
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
mac = "02:00:00:00:00:11"

[[port]]
name = "p2"
driver = "memory"
rx = "in.pcap"
mac = "02:00:00:00:00:01"

[[router]]
name = "red"
api_token_sha256 = "{red}"
  [[router.interface]]
  name = "red0"
  port = "p0"
  addresses = ["10.0.0.1/24"]
  [[router.interface]]
  name = "red1"
  port = "p1"
  vlan = 100
  addresses = ["10.1.0.1/24"]
  [[router.route]]
  prefix = "192.0.2.0/24"
  via = "10.1.0.2"
  [[router.neighbor]]
  address = "10.1.0.2"
  mac = "02:bb:00:00:00:02"
  # Both ports replay flat out, so the worker is saturated and the fair
  # share is at work: red's weight keeps its half of the frames within
  # its share, so each traced packet of red is forwarded, never dropped
  # as over-share (as blue's may be).
  [router.limits]
  weight = 100

[[router]]
name = "blue"
api_token_sha256 = "{blue}"
  [[router.interface]]
  name = "blue0"
  port = "p2"
  addresses = ["10.0.0.1/24"]
"#,
        admin = hash_token(ADMIN),
        red = hash_token(RED),
        blue = hash_token(BLUE),
    )
}

/// One UDP frame from 10.0.0.2 to 192.0.2.9, to 02:00:00:00:00:01.
fn write_pcap(path: &Path) {
    let mut w = PcapWriter::new(std::fs::File::create(path).expect("pcap")).expect("pcap");
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[6..12].copy_from_slice(&[0x02, 0xaa, 0, 0, 0, 0x02]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut ip = [
        0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 192, 0, 2, 9,
    ];
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[14..34].copy_from_slice(&ip);
    // UDP 4000 → 9, no checksum.
    f[34..42].copy_from_slice(&[0x0f, 0xa0, 0, 9, 0, 26, 0, 0]);
    w.write_packet(&PcapPacket::new(Duration::ZERO, 60, &f))
        .expect("write");
}

/// `vrhost run` in `dir`; returns once the API answers.
fn start(dir: &Path) -> Daemon {
    write_pcap(&dir.join("in.pcap"));
    let cfg = dir.join("vrhost.toml");
    std::fs::write(&cfg, config()).expect("config");
    let daemon = Daemon(
        Command::new(VRHOST)
            .arg("run")
            .arg("--config")
            .arg(&cfg)
            .spawn()
            .expect("start vrhost run"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while Client::unix(dir.join("api.sock"), Some(ADMIN.into()))
        .vrs()
        .is_err()
    {
        assert!(Instant::now() < deadline, "the API never came up");
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon
}

/// `vrhost ctl --token TOKEN ARGS...` against the daemon in `dir`.
fn ctl(dir: &Path, token: &str, args: &[&str]) -> Output {
    Command::new(VRHOST)
        .arg("ctl")
        .arg("--socket")
        .arg(dir.join("api.sock"))
        .arg("--token")
        .arg(token)
        .args(args)
        .output()
        .expect("vrhost ctl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn an_operator_sees_where_packets_go_while_the_router_forwards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _daemon = start(dir.path());

    // The tenant's own token, as text.
    let out = ctl(dir.path(), RED, &["trace", "red", "--count", "3"]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}{}", text(&out.stderr));
    for line in [
        "packet 1 of 3: 60 bytes in on p0, worker 0 → forwarded",
        "  demux       p0 untagged → red0",
        "  l2          02:00:00:00:00:01 ← 02:aa:00:00:00:02 0x0800: interface MAC",
        "  ip          10.0.0.2 → 192.0.2.9 udp 4000 → 9, ttl 64, 46 bytes: checks pass",
        "  route       192.0.2.9 → 192.0.2.0/24 (next hop",
        "): gateway 10.1.0.2 on red1",
        "  ttl         64: pass",
        "  mtu         46 bytes, mtu 1500: fits",
        "  neighbour   10.1.0.2 on red1: static 02:bb:00:00:00:02",
        "  sent        p1 (red1) vlan 100 to 02:bb:00:00:00:02: 10.0.0.2 → 192.0.2.9 udp 4000 → 9, ttl 63, 46 bytes",
        "packet 3 of 3",
    ] {
        assert!(shown.contains(line), "{line:?} missing from:\n{shown}");
    }

    // As JSON: every packet is red's, forwarded out of red1.
    let out = ctl(dir.path(), RED, &["--json", "trace", "red", "--count", "5"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: TraceReport = serde_json::from_slice(&out.stdout).expect("a trace report");
    assert_eq!((r.vr.as_str(), r.count, r.packets.len()), ("red", 5, 5));
    for p in &r.packets {
        assert_eq!(p.outcome.verdict, "forwarded", "{p:#?}");
        assert_eq!(p.outcome.sent[0].interface.as_deref(), Some("red1"));
        assert_eq!(p.port, "p0");
    }

    // Another tenant's VR does not exist for this token.
    let out = ctl(dir.path(), RED, &["trace", "blue", "--count", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no such virtual router"),
        "{}",
        text(&out.stderr)
    );
    // Blue's token traces blue.
    let out = ctl(
        dir.path(),
        BLUE,
        &["--json", "trace", "blue", "--count", "1"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: TraceReport = serde_json::from_slice(&out.stdout).expect("a trace report");
    assert_eq!(r.packets[0].port, "p2");

    // Nothing comes in on red1: the time runs out with nothing traced.
    let out = ctl(
        dir.path(),
        ADMIN,
        &["trace", "red", "--iface", "red1", "--seconds", "1"],
    );
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "no packet of red was traced in time\n");
    // Bad requests name their field; an unknown interface is not found.
    let out = ctl(dir.path(), ADMIN, &["trace", "red", "--count", "0"]);
    assert!(text(&out.stderr).contains("count"), "{}", text(&out.stderr));
    let out = ctl(dir.path(), ADMIN, &["trace", "red", "--seconds", "500"]);
    assert!(
        text(&out.stderr).contains("seconds"),
        "{}",
        text(&out.stderr)
    );
    let out = ctl(dir.path(), ADMIN, &["trace", "red", "--iface", "red7"]);
    assert!(text(&out.stderr).contains("red7"), "{}", text(&out.stderr));
}
