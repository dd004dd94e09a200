//! Shared helpers of the namespace tests: unique namespaces removed on
//! drop (panics included), `ip` runners, waiting for events, and the
//! kernel's own view of a main table (`ip -j route show`) to compare with.
//!
//! These tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; they
//! fail, saying so, without them. They never skip.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vrhost_cp::{CpEvent, CpState, EventReceiver, IpPrefix, RouteTarget};

/// A network namespace of this test process, deleted on drop.
pub struct Ns {
    pub name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Ns {
    /// A fresh, unused name (the namespace is not created).
    pub fn unique(tag: &str) -> Ns {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("cpt-{tag}-{}-{n}", std::process::id());
        // A leftover from a crashed run with the same pid: remove it.
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        Ns { name }
    }

    /// Runs `ip -n NS ARGS…` and returns stdout; panics with stderr on
    /// failure.
    pub fn ip(&self, args: &str) -> String {
        ip(&format!("-n {} {}", self.name, args))
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Runs `ip ARGS…` (split on whitespace).
pub fn ip(args: &str) -> String {
    let out = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("run ip (iproute2 is required)");
    assert!(
        out.status.success(),
        "ip {args}: {} (these tests need root)",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Receives events until `pred` is true of one (returned), failing after
/// `secs` seconds with everything seen.
pub fn wait_for(rx: &EventReceiver, secs: u64, mut pred: impl FnMut(&CpEvent) -> bool) -> CpEvent {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(ev) if pred(&ev) => return ev,
            Ok(ev) => seen.push(ev),
            Err(_) => panic!("no matching event within {secs} s; saw {seen:#?}"),
        }
    }
}

/// Applies every event that arrives within `quiet` of the previous one.
pub fn drain_into(rx: &EventReceiver, state: &mut CpState, quiet: Duration) -> usize {
    let mut n = 0;
    while let Ok(ev) = rx.recv_timeout(quiet) {
        state.apply(&ev);
        n += 1;
    }
    n
}

/// The main table of `ns` as `ip -j route show` reports it, through the
/// same documented filters as the watcher: only interfaces in `mirrored`
/// (blackhole/unreachable/prohibit have none that matters), no link-local
/// or multicast destinations, no other tables, one route per prefix
/// (these tests never add two metrics for one prefix).
pub fn kernel_routes(ns: &Ns, mirrored: &BTreeSet<&str>) -> BTreeMap<IpPrefix, RouteTarget> {
    let mut out = BTreeMap::new();
    for fam in ["-4", "-6"] {
        let json = ns.ip(&format!("{fam} -j route show table main"));
        let v: serde_json::Value = serde_json::from_str(&json).expect("ip -j output");
        for r in v.as_array().expect("array") {
            let dst = r["dst"].as_str().expect("dst");
            let prefix: IpPrefix = if dst == "default" {
                if fam == "-4" { "0.0.0.0/0" } else { "::/0" }
                    .parse()
                    .unwrap()
            } else {
                dst.parse().expect("dst parses")
            };
            match prefix.addr() {
                IpAddr::V6(a) if (a.segments()[0] & 0xffc0) == 0xfe80 => continue,
                a if a.is_multicast() => continue,
                _ => {}
            }
            let kind = r["type"].as_str().unwrap_or("unicast");
            let dev = r["dev"].as_str().unwrap_or("");
            let target = match kind {
                "blackhole" => RouteTarget::Blackhole,
                "unreachable" => RouteTarget::Unreachable,
                "prohibit" => RouteTarget::Prohibit,
                "unicast" => {
                    if !mirrored.contains(dev) {
                        continue;
                    }
                    match r["gateway"].as_str() {
                        Some(gw) => RouteTarget::Via {
                            gw: gw.parse().expect("gateway"),
                            ifname: Some(dev.to_string()),
                        },
                        None => RouteTarget::Connected {
                            ifname: dev.to_string(),
                        },
                    }
                }
                _ => continue,
            };
            out.insert(prefix, target);
        }
    }
    out
}
