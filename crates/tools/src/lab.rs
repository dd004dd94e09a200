//! `vrhost lab up|down SPEC`: network namespaces as hosts, wired to vrhost by veth pairs.
//!
//! ```text
//!   netns <lab>-h1            root namespace (vrhost runs here)          netns <lab>-h2
//!  ┌──────────────┐                                                    ┌──────────────┐
//!  │ eth0 10.0.0.2├── veth ── link "vrh1" ═══ vrhost ═══ link "vrh2" ── veth ──┤eth0 10.1.0.2 │
//!  │ default via  │          (af_packet / af_xdp port)                 │ default via  │
//!  │   10.0.0.1   │                                                    │   10.1.0.1   │
//!  └──────────────┘                                                    └──────────────┘
//! ```
//!
//! The router side of each pair stays in the root namespace with no address:
//! vrhost owns it. A host with `tap = true` has no veth: its `eth0` is a
//! persistent TAP device, and vrhost attaches to it as a `tap` port
//! (`interface = "eth0"`, `netns = "<lab>-<host>"`), the way a VM's NIC
//! meets its host. The hosts keep Linux's default offloads (partial
//! checksums, TCP/UDP super-frames), which the `af_packet` driver carries
//! in its virtio-net headers; `offloads = false` turns them off on both
//! ends, for `af_xdp`, whose frames carry no such metadata. IPv6 duplicate
//! address detection is skipped on hosts so they are usable at once.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// A lab: hosts, each one namespace with one veth link toward vrhost.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Prefix of the namespace names.
    pub name: String,
    /// Keep the veth ends' checksum and segmentation offloads as Linux
    /// sets them (the default); false turns them off with `ethtool`, which
    /// a router on `af_xdp` needs for TCP and UDP to pass.
    #[serde(default = "default_offloads")]
    pub offloads: bool,
    /// The hosts.
    #[serde(rename = "host")]
    pub hosts: Vec<Host>,
}

fn default_offloads() -> bool {
    true
}

/// One host namespace.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Host name: the namespace is `<lab>-<name>`.
    pub name: String,
    /// Name of the router-side veth, in the root namespace; required,
    /// unless the host's link is a TAP.
    pub link: Option<String>,
    /// The host's `eth0` is a TAP device (no veth) that vrhost attaches to.
    #[serde(default)]
    pub tap: bool,
    /// IPv4 address with prefix length.
    pub address: Option<String>,
    /// IPv4 default gateway (the VR interface's address).
    pub gateway: Option<String>,
    /// IPv6 address with prefix length.
    pub address6: Option<String>,
    /// IPv6 default gateway.
    pub gateway6: Option<String>,
    /// MTU of both veth ends.
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// This host's link only: overrides the lab's `offloads`.
    pub offloads: Option<bool>,
}

fn default_mtu() -> u16 {
    1500
}

impl Spec {
    /// Reads a spec file.
    pub fn load(path: &Path) -> Result<Spec> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let spec: Spec = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        for h in &spec.hosts {
            if h.link.as_ref().is_some_and(|l| l.len() > 15) || h.name.is_empty() {
                bail!(
                    "host {:?}: link names are at most 15 characters and names are not empty",
                    h.name
                );
            }
            if h.link.is_some() == h.tap {
                bail!(
                    "host {:?}: give either link (a veth toward vrhost) or tap = true (a TAP \
                     that vrhost attaches to), not both or neither",
                    h.name
                );
            }
        }
        Ok(spec)
    }

    /// The namespace of `host`.
    pub fn netns(&self, host: &Host) -> String {
        format!("{}-{}", self.name, host.name)
    }
}

fn ip(args: &[&str]) -> Result<()> {
    sh("ip", args)
}

fn sh(cmd: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("running {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn in_ns(ns: &str, cmd: &str, args: &[&str]) -> Result<()> {
    let mut all = vec!["netns", "exec", ns, cmd];
    all.extend_from_slice(args);
    ip(&all)
}

/// Creates every host; removes what it made if a step fails.
pub fn up(spec: &Spec) -> Result<()> {
    for h in &spec.hosts {
        if let Err(e) = up_host(spec, h) {
            let _ = down(spec);
            return Err(e);
        }
    }
    Ok(())
}

fn up_host(spec: &Spec, h: &Host) -> Result<()> {
    let ns = spec.netns(h);
    let mtu = h.mtu.to_string();
    ip(&["netns", "add", &ns])?;
    match &h.link {
        Some(link) => {
            ip(&[
                "link", "add", link, "mtu", &mtu, "type", "veth", "peer", "name", "eth0", "mtu",
                &mtu, "netns", &ns,
            ])?;
            // No IPv6 on the router side: vrhost, not the kernel, speaks for it.
            let _ = sh(
                "sysctl",
                &["-q", "-w", &format!("net.ipv6.conf.{link}.disable_ipv6=1")],
            );
            ip(&["link", "set", link, "up"])?;
        }
        None => {
            // Persistent, so that it has its addresses and routes before
            // vrhost attaches; no carrier until then.
            in_ns(&ns, "ip", &["tuntap", "add", "dev", "eth0", "mode", "tap"])?;
            in_ns(&ns, "ip", &["link", "set", "eth0", "mtu", &mtu])?;
        }
    }
    in_ns(&ns, "ip", &["link", "set", "lo", "up"])?;
    in_ns(
        &ns,
        "sysctl",
        &["-q", "-w", "net.ipv6.conf.eth0.accept_dad=0"],
    )?;
    in_ns(&ns, "ip", &["link", "set", "eth0", "up"])?;
    let offloads = h.offloads.unwrap_or(spec.offloads);
    let ends = [
        h.link.as_deref().map(|l| (None, l)),
        Some((Some(ns.as_str()), "eth0")),
    ];
    for (dev_ns, dev) in ends.into_iter().flatten().filter(|_| !offloads) {
        // Best effort: without ethtool the lab still works for ping, not for TCP.
        let args = [
            "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
        ];
        let r = match dev_ns {
            Some(ns) => in_ns(ns, "ethtool", &args),
            None => sh("ethtool", &args),
        };
        if let Err(e) = r {
            tracing::warn!("turning offloads off on {dev}: {e}");
        }
    }
    if let Some(a) = &h.address {
        in_ns(&ns, "ip", &["addr", "add", a, "dev", "eth0"])?;
    }
    if let Some(a) = &h.address6 {
        in_ns(&ns, "ip", &["-6", "addr", "add", a, "dev", "eth0", "nodad"])?;
    }
    if let Some(g) = &h.gateway {
        in_ns(&ns, "ip", &["route", "add", "default", "via", g])?;
    }
    if let Some(g) = &h.gateway6 {
        in_ns(&ns, "ip", &["-6", "route", "add", "default", "via", g])?;
    }
    Ok(())
}

/// Removes every host namespace (and with it the veth pairs and TAPs).
/// Missing ones are fine.
pub fn down(spec: &Spec) -> Result<()> {
    for h in &spec.hosts {
        if let Some(link) = &h.link {
            let _ = ip(&["link", "del", link]);
        }
        // A host's TAP goes with its namespace.
        let _ = ip(&["netns", "del", &spec.netns(h)]);
    }
    Ok(())
}

/// `vrhost lab up|down SPEC`.
pub fn run(action: &str, path: &Path) -> Result<ExitCode> {
    let spec = Spec::load(path)?;
    match action {
        "up" => {
            up(&spec)?;
            for h in &spec.hosts {
                println!(
                    "{:<10} netns {:<16} link {:<12} {} {}",
                    h.name,
                    spec.netns(h),
                    h.link.as_deref().unwrap_or("tap eth0"),
                    h.address.as_deref().unwrap_or("-"),
                    h.address6.as_deref().unwrap_or("-")
                );
            }
        }
        "down" => down(&spec)?,
        other => bail!("unknown lab action {other:?}; use up or down"),
    }
    Ok(ExitCode::SUCCESS)
}
