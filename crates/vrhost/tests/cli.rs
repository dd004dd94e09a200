//! End-to-end tests of the `vrhost` command line: check, replay (pcap in,
//! pcap out, read back by tcpdump), workload + bench, and demo.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use vrhost_wire::ethernet::{EtherType, EthernetAddress, EthernetFrame};
use vrhost_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use vrhost_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use vrhost_wire::vlan::VlanHeader;

const VRHOST: &str = env!("CARGO_BIN_EXE_vrhost");
const R0: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const R1: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x11]);
const HOST: EthernetAddress = EthernetAddress([0x02, 0xaa, 0, 0, 0, 0x02]);
const GW: EthernetAddress = EthernetAddress([0x02, 0xbb, 0, 0, 0, 0x02]);

const CONFIG: &str = r#"
[[port]]
name = "p0"
driver = "pcap"
rx = "in0.pcap"
tx = "out0.pcap"
mac = "02:00:00:00:00:01"

[[port]]
name = "p1"
driver = "pcap"
tx = "out1.pcap"
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
  mtu = 1400
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
"#;

fn frame(ethertype: EtherType, l3: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + l3.len()];
    let mut e = EthernetFrame::new_unchecked(&mut f[..]);
    e.set_dst_addr(R0);
    e.set_src_addr(HOST);
    e.set_ethertype(ethertype);
    f[14..].copy_from_slice(l3);
    f
}

fn ipv4(dst: Ipv4Addr, proto: IpProtocol, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let r = Ipv4Repr {
        src_addr: Ipv4Addr::new(10, 0, 0, 2),
        dst_addr: dst,
        protocol: proto,
        payload_len: payload.len(),
        ttl,
        dscp_ecn: 0,
        ident: 7,
        dont_frag: false,
    };
    let mut p = vec![0u8; 20 + payload.len()];
    r.emit(&mut Ipv4Packet::new_unchecked(&mut p[..]));
    p[20..].copy_from_slice(payload);
    p
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::from_millis(i as u64),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

fn run(args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(VRHOST)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run vrhost");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn replay_forwards_answers_and_writes_pcaps_tcpdump_reads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("red.toml"), CONFIG).unwrap();
    let echo = {
        let r = Icmpv4Repr::EchoRequest {
            ident: 1,
            seq_no: 1,
            data: b"hi",
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut Icmpv4Packet::new_unchecked(&mut b[..]));
        b
    };
    let v6 = {
        let r = Ipv6Repr {
            src_addr: "2001:db8::2".parse().unwrap(),
            dst_addr: "2001:db8:ff::9".parse().unwrap(),
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
        };
        let mut p = vec![0u8; 48];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut p[..]));
        // UDP 4096 -> 9, length 8, no payload (checksum left 0 for the test).
        p[40..46].copy_from_slice(&[0x10, 0x00, 0x00, 0x09, 0x00, 0x08]);
        p
    };
    let udp = [
        0x10, 0x00, 0x00, 0x09, 0x00, 0x10, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
    ];
    write_pcap(
        &dir.path().join("in0.pcap"),
        &[
            frame(
                EtherType::Ipv4,
                &ipv4(Ipv4Addr::new(192, 0, 2, 9), IpProtocol::Udp, 64, &udp),
            ),
            frame(
                EtherType::Ipv4,
                &ipv4(Ipv4Addr::new(192, 0, 2, 9), IpProtocol::Udp, 1, &udp),
            ),
            frame(
                EtherType::Ipv4,
                &ipv4(Ipv4Addr::new(10, 0, 0, 1), IpProtocol::Icmp, 64, &echo),
            ),
            frame(EtherType::Ipv6, &v6),
        ],
    );
    let (ok, stdout, stderr) = run(&["replay", "--config", "red.toml", "--json"], dir.path());
    assert!(ok, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let red = &report["routers"][0];
    assert_eq!(red["name"], "red");
    assert_eq!(red["rx_packets"], 4);
    assert_eq!(red["forwarded"], 2);
    assert_eq!(red["local"], 1);
    assert_eq!(red["icmp_errors"], 1);
    assert_eq!(red["drops"]["ttl-expired"], 1);

    // Toward the gateway: tagged VLAN 100, TTL and hop limit decremented.
    let out1 = read_pcap(&dir.path().join("out1.pcap"));
    assert_eq!(out1.len(), 2);
    for f in &out1 {
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(
            (e.dst_addr(), e.src_addr(), e.ethertype()),
            (GW, R1, EtherType::Vlan)
        );
        assert_eq!(VlanHeader::new_checked(&f[14..18]).unwrap().vlan_id(), 100);
    }
    assert_eq!(Ipv4Packet::new_checked(&out1[0][18..]).unwrap().ttl(), 63);
    assert_eq!(
        Ipv6Packet::new_checked(&out1[1][18..]).unwrap().hop_limit(),
        63
    );
    // Back toward the host: Time Exceeded, then the echo reply.
    let out0 = read_pcap(&dir.path().join("out0.pcap"));
    assert_eq!(out0.len(), 2);
    let icmp_type = |f: &Vec<u8>| {
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        ip.payload()[0]
    };
    assert_eq!(icmp_type(&out0[0]), 11);
    assert_eq!(icmp_type(&out0[1]), 0);

    // The files open in tcpdump, which decodes what we expect.
    let td = Command::new("tcpdump")
        .args(["-nn", "-e", "-r"])
        .arg(dir.path().join("out1.pcap"))
        .output()
        .expect("tcpdump is installed (the CI script installs it)");
    assert!(
        td.status.success(),
        "{}",
        String::from_utf8_lossy(&td.stderr)
    );
    let text = String::from_utf8_lossy(&td.stdout);
    assert!(text.contains("vlan 100"), "{text}");
    assert!(text.contains("10.0.0.2.4096 > 192.0.2.9.9"), "{text}");
    assert!(
        text.contains("2001:db8::2.4096 > 2001:db8:ff::9.9"),
        "{text}"
    );
    let td = Command::new("tcpdump")
        .args(["-nn", "-r"])
        .arg(dir.path().join("out0.pcap"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&td.stdout);
    assert!(text.contains("time exceeded in-transit"), "{text}");
    assert!(text.contains("ICMP echo reply"), "{text}");
}

#[test]
fn check_accepts_good_configs_and_names_the_key_of_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("good.toml"), CONFIG).unwrap();
    let (ok, stdout, _) = run(&["check", "--config", "good.toml"], dir.path());
    assert!(ok);
    assert!(stdout.contains("ok"), "{stdout}");
    let bad = CONFIG
        .replace("vlan = 100", "vlan = 5000")
        .replace("via = \"10.1.0.2\"", "via = \"10.9.9.9\"");
    std::fs::write(dir.path().join("bad.toml"), bad).unwrap();
    let (ok, _, stderr) = run(&["check", "--config", "bad.toml"], dir.path());
    assert!(!ok);
    assert!(
        stderr.contains("router \"red\".interface \"red1\".vlan"),
        "{stderr}"
    );
    assert!(stderr.contains("10.9.9.9"), "{stderr}");
}

#[test]
fn workload_then_bench_reports_throughput_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = run(
        &[
            "workload", "--routes", "1000", "--frames", "4096", "--out", "w",
        ],
        dir.path(),
    );
    assert!(ok, "{stderr}");
    let table = std::fs::read_to_string(dir.path().join("w/table.txt")).unwrap();
    assert_eq!(table.lines().count(), 1000);
    let v = bench_forwards_everything(dir.path(), &[]);
    for key in ["tx_pps", "rx_pps", "seconds", "workers"] {
        assert!(v.get(key).is_some(), "{key} missing from {v}");
    }
}

/// `workload --family ipv6 --vlan 10`: an IPv6 table inside 2000::/3 with
/// IPv6 gateways, tagged 62-byte frames, and a config whose interfaces sit
/// on VLAN 10; `bench` forwards all of it. `--vlan` out of range is refused.
#[test]
fn ipv6_tagged_workload_forwards_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = run(
        &[
            "workload", "--routes", "500", "--frames", "2048", "--family", "ipv6", "--vlan", "10",
            "--out", "w",
        ],
        dir.path(),
    );
    assert!(ok, "{stderr}");
    let table = std::fs::read_to_string(dir.path().join("w/table.txt")).unwrap();
    assert_eq!(table.lines().count(), 500);
    for line in table.lines() {
        let (prefix, via) = line.split_once(' ').unwrap();
        assert!(prefix.starts_with('2') || prefix.starts_with('3'), "{line}");
        assert!(via.starts_with("2001:db8:1::"), "{line}");
    }
    let cfg = std::fs::read_to_string(dir.path().join("w/bench.toml")).unwrap();
    assert_eq!(cfg.matches("vlan = 10").count(), 2, "{cfg}");
    let v = bench_forwards_everything(dir.path(), &[]);
    assert!(v["tx_pps"].as_f64().unwrap() > 0.0);
    let (ok, _, stderr) = run(
        &["workload", "--routes", "10", "--vlan", "4095", "--out", "x"],
        dir.path(),
    );
    assert!(!ok && stderr.contains("--vlan"), "{stderr}");
}

/// Runs `bench --json` for 0.3 s on `w/bench.toml` under `dir` (with
/// `extra` arguments) and returns its measurement, after checking that
/// everything received was sent: every destination of a workload is inside
/// its table.
fn bench_forwards_everything(dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "--config",
        "w/bench.toml",
        "--seconds",
        "0.3",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = run(&args, dir);
    assert!(ok, "{extra:?}: {stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert!(v["rx_pps"].as_f64().unwrap() > 0.0, "{extra:?}: {v}");
    assert!(
        v["tx_pps"].as_f64().unwrap() > 0.9 * v["rx_pps"].as_f64().unwrap(),
        "{extra:?}: {v}"
    );
    assert!(v["drops"].as_object().unwrap().is_empty(), "{extra:?}: {v}");
    v
}

/// `workload --vrs 3` gives three VRs each their own ports and the whole
/// table; `bench` forwards everything with the FIB's prefetching passes on
/// every table, on none, and on the default's.
#[test]
fn multi_vr_workload_forwards_everything_with_and_without_prefetch() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = run(
        &[
            "workload", "--routes", "3000", "--frames", "2048", "--vrs", "3", "--out", "w",
        ],
        dir.path(),
    );
    assert!(ok, "{stderr}");
    assert!(stdout.contains("(3 VRs)"), "{stdout}");
    for prefetch in ["on", "off", "auto"] {
        let v = bench_forwards_everything(dir.path(), &["--prefetch", prefetch]);
        assert_eq!(v["vrs"], 3, "{v}");
        assert_eq!(v["routes4"].as_u64().unwrap() / 3 / 1000, 3, "{v}");
    }
    let (ok, _, stderr) = run(
        &["workload", "--routes", "10", "--vrs", "0", "--out", "w0"],
        dir.path(),
    );
    assert!(!ok);
    assert!(
        stderr.contains("--vrs must be between 1 and 64"),
        "{stderr}"
    );
}

#[test]
fn demo_runs_without_files_or_privileges() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = run(&["demo", "--seconds", "1", "--routes", "2000"], dir.path());
    assert!(ok, "{stderr}");
    for needle in [
        "red",
        "blue",
        "green",
        "Mpps",
        "summary",
        "ttl-expired",
        "no-route",
    ] {
        assert!(stdout.contains(needle), "{needle} missing from:\n{stdout}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the demo writes no files"
    );
}

/// The demo's three tenants share one port (VLANs) and offer 50/30/20 of
/// a flood at equal weights: red and blue both want more than a third of
/// the worker, so the fair share gives them about the same. Red, whose
/// excess is read and dropped on the shared queue, must not end up with
/// much less than blue (a version that charged red for reading what it was
/// refused gave it 0.57 of blue's forwarding).
#[test]
fn the_demos_flooding_tenants_forward_about_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = run(&["demo", "--seconds", "2", "--routes", "2000"], dir.path());
    assert!(ok, "{stderr}");
    // "vr     red    rx  tx  forwarded  local  punted  dropped"
    let forwarded = |vr: &str| -> f64 {
        stdout
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 8 && f[0] == "vr" && f[1] == vr).then(|| f[4].parse().ok())?
            })
            .unwrap_or_else(|| panic!("no summary line for {vr} in:\n{stdout}"))
    };
    let (red, blue) = (forwarded("red"), forwarded("blue"));
    assert!(
        red >= 0.75 * blue,
        "red forwarded {red}, blue {blue}: red should get about blue's share\n{stdout}"
    );
    // "   2     4.123 Mpps   41%    3.456 Mpps   38%    2.345 Mpps   20%":
    // each tenant's share of the worker's time in the last second, which
    // the fair share keeps about equal for the two that want more.
    let shares: Vec<f64> = stdout
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 10 && f[0] == "2").then(|| {
                [3, 6, 9]
                    .iter()
                    .filter_map(|&i| f[i].strip_suffix('%')?.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_else(|| panic!("no line for second 2 in:\n{stdout}"));
    assert_eq!(shares.len(), 3, "{stdout}");
    let (red, blue) = (shares[0], shares[1]);
    assert!(
        red > 5.0 && blue > 5.0 && red >= 0.6 * blue,
        "worker shares red {red}%, blue {blue}%: about alike\n{stdout}"
    );
    assert!(
        shares.iter().sum::<f64>() <= 120.0,
        "the tenants' shares of one worker add up past it: {shares:?}\n{stdout}"
    );
}

#[test]
fn drop_reasons_doc_matches_the_code() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, _) = run(&["drop-reasons", "--markdown"], dir.path());
    assert!(ok);
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/drop-reasons.md"
    ))
    .expect("docs/drop-reasons.md");
    assert_eq!(
        doc, stdout,
        "regenerate with: vrhost drop-reasons --markdown > docs/drop-reasons.md"
    );
}

#[test]
fn bench_sweeps_write_csv_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = run(
        &[
            "bench",
            "--vrs",
            "1,4",
            "--routes-per-vr",
            "100",
            "--workers",
            "1",
            "--mode",
            "rtc,pipeline",
            // Long enough that a debug build sharing two cores with the
            // other tests of this file forwards something in every row
            // (0.2 s once saw nothing in pipeline mode under CI's load).
            "--seconds",
            "0.5",
            "--json",
            "--csv",
            "sweep.csv",
            "--plots",
            "plots",
        ],
        dir.path(),
    );
    assert!(ok, "{stderr}");
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(rows.len(), 4, "2 modes x 2 VR counts");
    for r in &rows {
        assert!(r["tx_pps"].as_f64().unwrap() > 0.0, "{r}");
        // Nothing is lost to an error. With several VRs flooding one
        // saturated worker, the fair share may drop a VR's excess right
        // after demux (`over-share`, docs/isolation.md); one VR alone never.
        let drops = r["drops"].as_object().unwrap();
        assert!(drops.keys().all(|k| k == "over-share"), "{r}");
        if r["vrs"] == 1 {
            assert!(drops.is_empty(), "{r}");
        }
        assert!(
            !r["assignment"].as_array().unwrap().is_empty(),
            "the queue-to-core assignment is reported"
        );
    }
    let csv = std::fs::read_to_string(dir.path().join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5);
    assert!(csv.starts_with("mode,workers,vrs,"));
    let svg = std::fs::read_to_string(dir.path().join("plots/scaling-vrs.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("virtual routers"));
}

#[test]
fn vr_memory_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = run(&["vr-memory", "--vrs", "50"], dir.path());
    assert!(ok, "{stderr}");
    let per_vr: f64 = stdout
        .split(" bytes of resident memory per idle VR")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no per-VR figure in {stdout}"));
    assert!(per_vr > 0.0, "{stdout}");
    assert!(
        stdout.contains("bytes for a whole engine with one idle VR and one worker"),
        "{stdout}"
    );
}

/// Workers are checked against the cores the process may run on, not a
/// count: under `taskset -c 0`, core 0 is fine and core 1 is refused, even
/// though the machine has it.
#[test]
fn check_knows_the_cores_taskset_allows() {
    let dir = tempfile::tempdir().unwrap();
    let with = |core: usize| format!("[dataplane]\nworkers = [{core}]\n{CONFIG}");
    std::fs::write(dir.path().join("c0.toml"), with(0)).unwrap();
    std::fs::write(dir.path().join("c1.toml"), with(1)).unwrap();
    let check = |file: &str| {
        Command::new("taskset")
            .args(["-c", "0", VRHOST, "check", "--config", file])
            .current_dir(dir.path())
            .output()
            .expect("taskset (util-linux)")
    };
    let ok = check("c0.toml");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = check("c1.toml");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("dataplane.workers[0]")
            && stderr.contains("core 1 is not one this process may run on; it may run on core 0"),
        "{stderr}"
    );
}

/// The systemd unit in contrib/ is one systemd accepts (with the paths
/// pointed at this build), and it runs vrhost as a notify service with a
/// watchdog, a config check first, restarts on failure and a reduced
/// capability set.
#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/vrhost.service"
    ))
    .expect("contrib/vrhost.service");
    for line in [
        "Type=notify",
        "WatchdogSec=",
        "ExecStartPre=/usr/local/bin/vrhost check --config",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
        "CapabilityBoundingSet=",
    ] {
        assert!(unit.contains(line), "{line} missing");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vrhost.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/vrhost", VRHOST)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (apt-get install systemd)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.trim().is_empty(), "{stderr}");
}
