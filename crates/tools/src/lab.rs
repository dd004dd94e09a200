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
//!
//! A spec can also declare `[[router]]`s: each is a namespace
//! `<lab>-<router>` where a vrhost instance runs (`ip netns exec <lab>-a
//! vrhost run ...`), and a host with `router = "a"` has its veth's router
//! end there instead of in the root namespace. Several `[[host]]` entries
//! with the same name are one namespace with several links (each with its
//! own `ifname`): an upstream router peering with two vrhost boxes.
//!
//! ```text
//!   netns <lab>-up                 netns <lab>-a (vrhost)          netns <lab>-site
//!  ┌──────────────┐ veth          ┌────────────────┐  veth        ┌──────────────┐
//!  │ to-a ────────┼──────── a-up ═╡ vrhost run ... ╞═ a-dn ───────┼─ to-a        │
//!  │ to-b ────────┼──┐            └────────────────┘          ┌───┼─ to-b        │
//!  └──────────────┘  │            netns <lab>-b (vrhost)        │   └──────────────┘
//!                    └───── b-up ═╡ vrhost run ... ╞═ b-dn ─────┘
//! ```

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// A lab: hosts, each one namespace with one or more veth links toward
/// vrhost, and optionally the namespaces vrhost instances run in.
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
    /// Namespaces for vrhost instances; none: vrhost runs in the root
    /// namespace.
    #[serde(rename = "router", default)]
    pub routers: Vec<Router>,
    /// The hosts.
    #[serde(rename = "host")]
    pub hosts: Vec<Host>,
}

fn default_offloads() -> bool {
    true
}

/// A namespace in which one vrhost instance runs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Router {
    /// Router name: the namespace is `<lab>-<name>`.
    pub name: String,
    /// Control-plane namespaces of that instance's VRs (full names), made
    /// here in the root mount namespace. vrhost adopts them: one it made
    /// itself under `ip netns exec` would be visible only to itself.
    #[serde(default)]
    pub control_netns: Vec<String>,
}

/// One host namespace, or one more link of it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Host name: the namespace is `<lab>-<name>`. Entries with the same
    /// name are one namespace with several links.
    pub name: String,
    /// Name of the router-side veth (in the root namespace, or in the
    /// router's); required, unless the host's link is a TAP.
    pub link: Option<String>,
    /// The router whose namespace holds `link`; none: the root namespace.
    pub router: Option<String>,
    /// Name of the host's end of the link; default `eth0`.
    pub ifname: Option<String>,
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

impl Host {
    /// The host's end of the link.
    pub fn ifname(&self) -> &str {
        self.ifname.as_deref().unwrap_or("eth0")
    }
}

/// A Linux interface name: 1 to 15 bytes, no `/`, no whitespace.
fn ifname_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= 15 && !n.contains(['/', ' ', '\t', '\n', ':'])
}

impl Spec {
    /// Reads a spec file.
    pub fn load(path: &Path) -> Result<Spec> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Spec::parse(&text).with_context(|| format!("{}", path.display()))
    }

    /// Parses and validates a spec.
    pub fn parse(text: &str) -> Result<Spec> {
        let spec: Spec = toml::from_str(text)?;
        spec.validate()?;
        Ok(spec)
    }

    fn validate(&self) -> Result<()> {
        let mut routers = HashSet::new();
        let mut controls = HashSet::new();
        for r in &self.routers {
            if r.name.is_empty() || !routers.insert(r.name.as_str()) {
                bail!("router {:?}: names are not empty and unique", r.name);
            }
            for c in &r.control_netns {
                if c.is_empty() || c.contains('/') || !controls.insert(c.as_str()) {
                    bail!(
                        "router {:?}: control_netns {c:?} is empty, has a '/' or is repeated",
                        r.name
                    );
                }
            }
        }
        let mut links = HashSet::new();
        let mut ifnames = HashSet::new();
        let mut tap_hosts = HashSet::new();
        for h in &self.hosts {
            if h.name.is_empty() {
                bail!("a host has an empty name");
            }
            if routers.contains(h.name.as_str()) {
                bail!(
                    "host {:?}: a router has that name (one namespace each)",
                    h.name
                );
            }
            if h.link.as_ref().is_some_and(|l| !ifname_ok(l)) || !ifname_ok(h.ifname()) {
                bail!(
                    "host {:?}: link and ifname are interface names of at most 15 characters",
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
            if h.tap && (h.router.is_some() || h.ifname.is_some()) {
                bail!(
                    "host {:?}: a TAP host is named eth0 and has no router end",
                    h.name
                );
            }
            if let Some(r) = &h.router {
                if !routers.contains(r.as_str()) {
                    bail!("host {:?}: router {r:?} is not a [[router]]", h.name);
                }
            }
            // Unique on the machine, though a router's namespace would
            // only need them unique in it: easier to read and to clean up.
            if let Some(l) = &h.link {
                if !links.insert(l.as_str()) {
                    bail!("host {:?}: link {l:?} is used twice", h.name);
                }
            }
            if !ifnames.insert((h.name.as_str(), h.ifname())) {
                bail!(
                    "host {:?}: interface {:?} twice; give each link of a host its own ifname",
                    h.name,
                    h.ifname()
                );
            }
            if h.tap {
                tap_hosts.insert(h.name.as_str());
            }
        }
        if let Some(h) = self
            .hosts
            .iter()
            .find(|h| tap_hosts.contains(h.name.as_str()) && !h.tap)
        {
            bail!("host {:?}: a TAP host has no other links", h.name);
        }
        Ok(())
    }

    /// The namespace of `host`.
    pub fn netns(&self, host: &Host) -> String {
        format!("{}-{}", self.name, host.name)
    }

    /// The namespace of router `name`.
    pub fn router_netns(&self, name: &str) -> String {
        format!("{}-{name}", self.name)
    }

    /// The namespace holding `host`'s router end: `None` is the root one.
    pub fn link_netns(&self, host: &Host) -> Option<String> {
        host.router.as_deref().map(|r| self.router_netns(r))
    }

    /// Every namespace the lab makes, each once, in creation order.
    pub fn namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let names = self
            .routers
            .iter()
            .flat_map(|r| {
                std::iter::once(self.router_netns(&r.name)).chain(r.control_netns.iter().cloned())
            })
            .chain(self.hosts.iter().map(|h| self.netns(h)));
        for n in names {
            if !out.contains(&n) {
                out.push(n);
            }
        }
        out
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

/// Runs `cmd` in `ns`, or in the root namespace for `None`.
fn in_maybe_ns(ns: Option<&str>, cmd: &str, args: &[&str]) -> Result<()> {
    match ns {
        Some(ns) => in_ns(ns, cmd, args),
        None => sh(cmd, args),
    }
}

/// Creates every router and host; removes what it made if a step fails.
pub fn up(spec: &Spec) -> Result<()> {
    let r = (|| {
        for ns in spec.namespaces() {
            ip(&["netns", "add", &ns])?;
            in_ns(&ns, "ip", &["link", "set", "lo", "up"])?;
        }
        spec.hosts.iter().try_for_each(|h| up_host(spec, h))
    })();
    if r.is_err() {
        let _ = down(spec);
    }
    r
}

fn up_host(spec: &Spec, h: &Host) -> Result<()> {
    let ns = spec.netns(h);
    let dev = h.ifname();
    let mtu = h.mtu.to_string();
    let router_ns = spec.link_netns(h);
    match &h.link {
        Some(link) => {
            let add = [
                "link", "add", link, "mtu", &mtu, "type", "veth", "peer", "name", dev, "mtu", &mtu,
                "netns", &ns,
            ];
            in_maybe_ns(router_ns.as_deref(), "ip", &add)?;
            // No IPv6 on the router side: vrhost, not the kernel, speaks for it.
            let _ = in_maybe_ns(
                router_ns.as_deref(),
                "sysctl",
                &["-q", "-w", &format!("net.ipv6.conf.{link}.disable_ipv6=1")],
            );
            in_maybe_ns(router_ns.as_deref(), "ip", &["link", "set", link, "up"])?;
        }
        None => {
            // Persistent, so that it has its addresses and routes before
            // vrhost attaches; no carrier until then.
            in_ns(&ns, "ip", &["tuntap", "add", "dev", dev, "mode", "tap"])?;
            in_ns(&ns, "ip", &["link", "set", dev, "mtu", &mtu])?;
        }
    }
    in_ns(
        &ns,
        "sysctl",
        &["-q", "-w", &format!("net.ipv6.conf.{dev}.accept_dad=0")],
    )?;
    in_ns(&ns, "ip", &["link", "set", dev, "up"])?;
    let offloads = h.offloads.unwrap_or(spec.offloads);
    let ends = [
        h.link.as_deref().map(|l| (router_ns.as_deref(), l)),
        Some((Some(ns.as_str()), dev)),
    ];
    for (dev_ns, dev) in ends.into_iter().flatten().filter(|_| !offloads) {
        // Best effort: without ethtool the lab still works for ping, not for TCP.
        let args = [
            "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
        ];
        if let Err(e) = in_maybe_ns(dev_ns, "ethtool", &args) {
            tracing::warn!("turning offloads off on {dev}: {e}");
        }
    }
    if let Some(a) = &h.address {
        in_ns(&ns, "ip", &["addr", "add", a, "dev", dev])?;
    }
    if let Some(a) = &h.address6 {
        in_ns(&ns, "ip", &["-6", "addr", "add", a, "dev", dev, "nodad"])?;
    }
    if let Some(g) = &h.gateway {
        in_ns(&ns, "ip", &["route", "add", "default", "via", g])?;
    }
    if let Some(g) = &h.gateway6 {
        in_ns(&ns, "ip", &["-6", "route", "add", "default", "via", g])?;
    }
    Ok(())
}

/// Removes every link and namespace of the lab (with them the veth pairs
/// and TAPs). Missing ones are fine. Processes inside (vrhost, FRR) keep
/// running: stop them first.
pub fn down(spec: &Spec) -> Result<()> {
    for h in &spec.hosts {
        if let (Some(link), None) = (&h.link, &h.router) {
            let _ = ip(&["link", "del", link]);
        }
    }
    for ns in spec.namespaces().iter().rev() {
        let _ = ip(&["netns", "del", ns]);
    }
    Ok(())
}

/// `vrhost lab up|down SPEC`.
pub fn run(action: &str, path: &Path) -> Result<ExitCode> {
    let spec = Spec::load(path)?;
    match action {
        "up" => {
            up(&spec)?;
            for r in &spec.routers {
                println!(
                    "router {:<10} netns {:<16} control {}",
                    r.name,
                    spec.router_netns(&r.name),
                    r.control_netns.join(" ")
                );
            }
            for h in &spec.hosts {
                println!(
                    "{:<10} netns {:<16} {:<6} link {:<12} in {:<12} {} {}",
                    h.name,
                    spec.netns(h),
                    h.ifname(),
                    h.link.as_deref().unwrap_or("tap"),
                    spec.link_netns(h).unwrap_or_else(|| "root".into()),
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

#[cfg(test)]
mod tests {
    use super::*;

    const SCALE_OUT: &str = r#"
        name = "so"
        [[router]]
        name = "a"
        control_netns = ["so-a-red"]
        [[router]]
        name = "b"
        [[host]]
        name = "up"
        ifname = "to-a"
        link = "a-up"
        router = "a"
        address = "10.0.1.2/24"
        [[host]]
        name = "up"
        ifname = "to-b"
        link = "b-up"
        router = "b"
        [[host]]
        name = "h"
        link = "vrh"
    "#;

    fn err(text: &str) -> String {
        format!("{:#}", Spec::parse(text).expect_err("must be rejected"))
    }

    #[test]
    fn routers_and_hosts_with_several_links() {
        let s = Spec::parse(SCALE_OUT).expect("valid");
        assert_eq!(s.routers.len(), 2);
        assert_eq!(s.link_netns(&s.hosts[0]).as_deref(), Some("so-a"));
        assert_eq!(s.link_netns(&s.hosts[2]), None);
        assert_eq!(s.hosts[1].ifname(), "to-b");
        assert_eq!(s.hosts[2].ifname(), "eth0");
        assert_eq!(
            s.namespaces(),
            ["so-a", "so-a-red", "so-b", "so-up", "so-h"].map(String::from)
        );
    }

    #[test]
    fn old_specs_still_parse() {
        let s = Spec::parse(
            "name = \"lab\"\n[[host]]\nname = \"h1\"\nlink = \"vrh1\"\n[[host]]\nname = \"t\"\ntap = true\n",
        )
        .expect("valid");
        assert!(s.routers.is_empty());
        assert_eq!(s.namespaces(), ["lab-h1", "lab-t"].map(String::from));
    }

    #[test]
    fn bad_specs_are_rejected_with_the_reason() {
        let unknown = SCALE_OUT.replace("control_netns", "controls");
        assert!(err(&unknown).contains("unknown field"), "{}", err(&unknown));
        let no_router = SCALE_OUT.replace("router = \"b\"", "router = \"c\"");
        assert!(err(&no_router).contains("not a [[router]]"));
        let same_ifname = SCALE_OUT.replace("\"to-b\"", "\"to-a\"");
        assert!(err(&same_ifname).contains("its own ifname"));
        let same_link = SCALE_OUT.replace("\"b-up\"", "\"a-up\"");
        assert!(err(&same_link).contains("used twice"));
        let dup_router = SCALE_OUT.replace("name = \"b\"", "name = \"a\"");
        assert!(err(&dup_router).contains("unique"));
        let clash = SCALE_OUT.replace("name = \"h\"", "name = \"a\"");
        assert!(err(&clash).contains("a router has that name"));
        let long = SCALE_OUT.replace("\"to-b\"", "\"a-very-long-ifname\"");
        assert!(err(&long).contains("15 characters"));
        let tap_router = "name = \"l\"\n[[router]]\nname = \"a\"\n[[host]]\nname = \"t\"\ntap = true\nrouter = \"a\"\n";
        assert!(err(tap_router).contains("TAP host"));
    }
}
