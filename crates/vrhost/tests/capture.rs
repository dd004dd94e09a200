//! Live capture end to end: `vrhost run` on pcap ports, `vrhost ctl
//! capture` through the API, read back by tcpdump.
//!
//! The same pcap is replayed twice: once by `vrhost replay` (the
//! reference: what the pcap ports write), once by `vrhost run` while two
//! captures run on VR red: one of red1 (what it sends) into a file, one of
//! red0 (what it receives and sends, IPv6 filtered out) to standard output
//! piped into tcpdump. The live run's rx file is a FIFO, so the frames flow
//! only once both captures are armed. Each capture must equal what the pcap
//! ports wrote, frame for frame.

use std::io::{BufRead, Write};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");
const TOKEN: &str = "capture-test-admin-token";

fn config(rx: &str, out0: &str, out1: &str, api: Option<&Path>) -> String {
    let mut c = format!(
        r#"
[[port]]
name = "p0"
driver = "pcap"
rx = "{rx}"
tx = "{out0}"
mac = "02:00:00:00:00:01"

[[port]]
name = "p1"
driver = "pcap"
tx = "{out1}"
mac = "02:00:00:00:00:11"

[[router]]
name = "red"

  [[router.interface]]
  name = "red0"
  port = "p0"
  addresses = ["10.0.0.1/24", "2001:db8::1/64"]

  [[router.interface]]
  name = "red1"
  port = "p1"
  vlan = 100
  addresses = ["10.1.0.1/24", "2001:db8:1::1/64"]

  [[router.route]]
  prefix = "192.0.2.0/24"
  via = "10.1.0.2"

  [[router.route]]
  prefix = "2001:db8:ff::/48"
  via = "2001:db8:1::2"

  [[router.neighbor]]
  address = "10.1.0.2"
  mac = "02:bb:00:00:00:02"

  [[router.neighbor]]
  address = "2001:db8:1::2"
  mac = "02:bb:00:00:00:02"

  [[router.neighbor]]
  address = "10.0.0.2"
  mac = "02:aa:00:00:00:02"

  [[router.neighbor]]
  address = "2001:db8::2"
  mac = "02:aa:00:00:00:02"
"#
    );
    if let Some(dir) = api {
        c.push_str(&format!(
            "\n[api]\nsocket = \"{}\"\nadmin_token_sha256 = \"{}\"\n",
            dir.join("api.sock").display(),
            vrhost_api::hash_token(TOKEN)
        ));
    }
    c
}

fn ipv4(dst: Ipv4Addr, proto: u8, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 0, 0, 7, 0, 0, ttl, proto, 0, 0, 10, 0, 0, 2];
    p.extend_from_slice(&dst.octets());
    let len = (20 + payload.len()) as u16;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    let mut sum = 0u32;
    for w in p.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p.extend_from_slice(payload);
    p
}

fn ether(ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0xaa, 0, 0, 0, 0x02];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

/// 240 frames into red0: forwarded UDP (to red1, tagged), pings to the
/// router (answered out of red0), TTL-expired UDP (an ICMP error out of
/// red0) and forwarded IPv6 UDP.
fn frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..60u16 {
        let udp = [
            0x10,
            0x00,
            (i >> 8) as u8,
            i as u8,
            0x00,
            0x0c,
            0,
            0,
            1,
            2,
            3,
            4,
        ];
        let dst = Ipv4Addr::new(192, 0, 2, (i % 200) as u8 + 1);
        out.push(ether(0x0800, &ipv4(dst, 17, 64, &udp)));
        let echo = [8, 0, 0, 0, 0, 1, (i >> 8) as u8, i as u8, b'h', b'i'];
        let mut echo = echo.to_vec();
        let mut sum = 0u32;
        for w in echo.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        echo[2..4].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        out.push(ether(
            0x0800,
            &ipv4(Ipv4Addr::new(10, 0, 0, 1), 1, 64, &echo),
        ));
        out.push(ether(0x0800, &ipv4(dst, 17, 1, &udp)));
        let mut v6 = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        v6.extend_from_slice(
            &"2001:db8::2"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        v6.extend_from_slice(
            &"2001:db8:ff::9"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        v6.extend_from_slice(&[0x10, 0x00, (i >> 8) as u8, i as u8, 0x00, 0x08, 0, 0]);
        out.push(ether(0x86dd, &v6));
    }
    out
}

fn write_pcap(w: impl Write, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(w).expect("pcap header");
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_millis(i as u64),
            f.len() as u32,
            f,
        ))
        .expect("pcap frame");
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = PcapReader::new(f).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.expect("pcap frame").data.into_owned());
    }
    out
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

fn is_ipv6(f: &[u8]) -> bool {
    f.get(12..14) == Some(&[0x86, 0xdd])
}

/// Waits for `child`, killing it after `limit`.
fn wait(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("{what} did not end in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_live_capture_equals_what_the_pcap_ports_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let input = frames();

    // The reference: the same frames through `vrhost replay`.
    {
        let mut f = std::fs::File::create(d.join("in.pcap")).expect("in.pcap");
        write_pcap(&mut f, &input);
    }
    std::fs::write(
        d.join("replay.toml"),
        config("in.pcap", "ref0.pcap", "ref1.pcap", None),
    )
    .expect("config");
    let out = Command::new(VRHOST)
        .args(["replay", "--config"])
        .arg(d.join("replay.toml"))
        .output()
        .expect("vrhost replay");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ref0 = read_pcap(&d.join("ref0.pcap"));
    let ref1 = read_pcap(&d.join("ref1.pcap"));
    assert_eq!(ref1.len(), 120, "60 UDP and 60 IPv6 forwarded out of red1");
    assert_eq!(
        ref0.len(),
        120,
        "60 echo replies and 60 ICMP errors out of red0"
    );

    // The live run: its rx file is a FIFO, fed once the captures are armed.
    let api = d.join("api");
    std::fs::create_dir(&api).expect("api dir");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&api, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let fifo = d.join("in.fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    std::fs::write(
        d.join("run.toml"),
        config("in.fifo", "out0.pcap", "out1.pcap", Some(&api)),
    )
    .expect("config");
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let feed = {
        let fifo = fifo.clone();
        let input = input.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            write_pcap(&mut bytes, &input);
            // Opening blocks until vrhost opens the other end.
            let mut w = std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .expect("fifo");
            w.write_all(&bytes[..24]).expect("pcap header");
            let _ = go_rx.recv_timeout(Duration::from_secs(30));
            w.write_all(&bytes[24..]).expect("frames");
        })
    };
    let log = std::fs::File::create(d.join("vrhost.log")).expect("log");
    let mut router = Command::new(VRHOST)
        .args(["run", "--config"])
        .arg(d.join("run.toml"))
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("vrhost run");
    let sock = api.join("api.sock");
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no API socket: {}",
            std::fs::read_to_string(d.join("vrhost.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ctl = |args: &[&str]| {
        let mut c = Command::new(VRHOST);
        c.args(["ctl", "--socket"])
            .arg(&sock)
            .args(["--token", TOKEN, "capture", "red"])
            .args(args);
        c
    };
    // red1, into a file: what it sends.
    let cap1 = d.join("cap1.pcap");
    let mut c1 = ctl(&["red1", "--count", "120", "--write"])
        .arg(&cap1)
        .stderr(Stdio::piped())
        .spawn()
        .expect("ctl capture");
    // red0 without IPv6, to stdout, through tcpdump into a file.
    let expected0: Vec<Vec<u8>> = input
        .iter()
        .chain(&ref0)
        .filter(|f| !is_ipv6(f))
        .cloned()
        .collect();
    let count0 = expected0.len().to_string();
    let mut c0 = ctl(&[
        "red0", "--count", &count0, "--filter", "not ip6", "--write", "-",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("ctl capture");
    let cap0 = d.join("cap0.pcap");
    let mut dump = Command::new("tcpdump")
        .args(["-nn", "-r", "-", "-w"])
        .arg(&cap0)
        .stdin(c0.stdout.take().expect("ctl stdout"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    // Armed: tcpdump read the pcap header, and cap1.pcap has one.
    let mut err = std::io::BufReader::new(dump.stderr.take().expect("tcpdump stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("tcpdump says");
    assert!(line.contains("reading from file -"), "tcpdump: {line}");
    let t0 = Instant::now();
    while std::fs::metadata(&cap1).map_or(0, |m| m.len()) < 24 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "capture of red1 not armed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    go_tx.send(()).expect("feed");
    feed.join().expect("feed thread");
    for (c, what) in [(&mut c1, "capture of red1"), (&mut c0, "capture of red0")] {
        let st = wait(c, Duration::from_secs(30), what);
        assert!(st.success(), "{what}: {st}");
    }
    let st = wait(&mut dump, Duration::from_secs(10), "tcpdump");
    assert!(st.success(), "tcpdump: {st}");
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", router.id())])
        .status();
    wait(&mut router, Duration::from_secs(10), "vrhost run");
    let out0 = read_pcap(&d.join("out0.pcap"));
    let out1 = read_pcap(&d.join("out1.pcap"));
    assert_eq!(
        sorted(out1.clone()),
        sorted(ref1.clone()),
        "live run and replay differ"
    );
    assert_eq!(
        sorted(out0.clone()),
        sorted(ref0.clone()),
        "live run and replay differ"
    );

    // What red1 sent, as captured, is what port p1 wrote, in order.
    let got1 = read_pcap(&cap1);
    assert_eq!(got1, out1, "capture of red1 differs from what p1 wrote");
    // red0: every frame it received and sent but IPv6, as tcpdump read it.
    let got0 = read_pcap(&cap0);
    assert!(
        got0.iter().all(|f| !is_ipv6(f)),
        "the filter let IPv6 through"
    );
    assert_eq!(sorted(got0), sorted(expected0), "capture of red0");
    // And tcpdump reads the file ctl wrote.
    let out = Command::new("tcpdump")
        .args(["-nn", "-e", "-r"])
        .arg(&cap1)
        .output()
        .expect("tcpdump");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 120, "{text}");
    assert!(text.contains("vlan 100"), "{text}");
    let log = std::fs::read_to_string(d.join("vrhost.log")).unwrap_or_default();
    assert!(log.contains("live capture ended"), "{log}");
}
