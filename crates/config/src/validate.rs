//! Validation: raw tables in, a complete [`Config`] or every error out.
//!
//! The validator walks the file in order and records every problem. Where a
//! value is bad it carries on with a placeholder, and it skips the checks
//! that would only repeat an error already reported (an interface on a port
//! whose MTU is invalid is not also compared against that MTU). The
//! placeholders never escape: any error means no `Config`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use crate::addr::{format_mac, is_group_mac, parse_ip_addr, parse_mac, parse_prefix, IfAddr};
use crate::config::{
    Api, Config, ControlPlane, Dataplane, Driver, FpmIn, Interface, Limits, Neighbor, Port, Route,
    RouteTarget, Router, Tpid, Urpf,
};
use crate::config::{Path as Gateway, Paths, PathsError};
use crate::error::ConfigErrors;
use crate::names::{linux_ifname_problem, name_problem, netns_problem, MAX_IFNAME, MAX_NAME};
use crate::raw::{
    self, Document, Item, RawApi, RawDataplane, RawDriver, RawInterface, RawNeighbor, RawPort,
    RawRoute, RawRouter, RouterItem, Vias,
};
use crate::routes_file;

/// `0-3,8` for cores 0, 1, 2, 3 and 8.
fn core_list(cores: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", cores[i], cores[j])
        } else {
            cores[i].to_string()
        });
        i = j + 1;
    }
    if parts.is_empty() {
        "no core".into()
    } else {
        format!(
            "core{} {}",
            if cores.len() == 1 { "" } else { "s" },
            parts.join(",")
        )
    }
}

/// What validation needs from the machine.
pub(crate) struct Env<'a> {
    /// The cores workers may be pinned to (those the process may run on),
    /// ascending.
    pub cores: &'a [usize],
    /// Relative paths resolve against this.
    pub base_dir: &'a Path,
    /// Reads a routes file.
    pub read: &'a dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
}

/// The smallest IP MTU: IPv4 requires every link to carry 68 bytes
/// (RFC 791, "Fragmentation and Reassembly").
const MIN_MTU: i64 = 68;
/// The largest IP MTU: the common jumbo-frame size; NICs and veth pairs
/// that go beyond it disagree on where to stop.
const MAX_MTU: i64 = 9000;
/// IPv6 requires every link to carry 1280 bytes (RFC 8200 §5).
const MIN_MTU_IPV6: u16 = 1280;
/// Default port MTU: Ethernet's.
const DEFAULT_MTU: u16 = 1500;
/// Queues per port: one per worker is the useful maximum, and 64 cores is
/// beyond what this software router targets.
const MAX_QUEUES: i64 = 64;
/// Errors listed per routes file; a wrong file (say, a pcap) would
/// otherwise produce one error per line.
const MAX_FILE_ERRORS: usize = 100;

/// Parses and validates a whole config.
pub(crate) fn parse(text: &str, env: &Env<'_>) -> Result<Config, ConfigErrors> {
    let root: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigErrors::one("config", syntax_reason(text, &e)))?;
    let mut errs = ConfigErrors::default();
    let doc = raw::decode_document(&root, &mut errs);
    let config = Validator {
        env,
        errs: &mut errs,
    }
    .config(&doc);
    if errs.is_empty() {
        Ok(config)
    } else {
        Err(errs)
    }
}

/// `line L, column C: message`, from the TOML parser's byte span.
fn syntax_reason(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return e.message().to_string();
    };
    let at = span.start.min(text.len());
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    // Count characters, not bytes: skip UTF-8 continuation bytes.
    let column = before[line_start..]
        .iter()
        .filter(|&&b| b & 0xc0 != 0x80)
        .count()
        + 1;
    format!("line {line}, column {column}: {}", e.message())
}

/// What later checks need to know about a port, whether or not it is valid.
struct PortFacts {
    name: String,
    /// `None` if invalid (already reported).
    mtu: Option<u16>,
    mac: Option<[u8; 6]>,
}

/// A router's subnets, for next-hop and neighbour checks.
struct Subnets {
    /// The router's name for messages: `red`, or `router[1]`.
    router: String,
    /// Every valid interface address, with the label of its interface.
    addrs: Vec<(IfAddr, String)>,
    /// False if some interface address was invalid: then "no subnet covers"
    /// is not reported, since the bad address may be the one that would.
    complete: bool,
}

impl Subnets {
    /// Why `via` cannot be a next hop of this router, if it cannot.
    fn next_hop_problem(&self, via: &IpAddr) -> Option<String> {
        if let Some((_, owner)) = self.addrs.iter().find(|(a, _)| a.addr == *via) {
            return Some(format!(
                "{via} is this router's own address (on {owner}); a next hop is a neighbour"
            ));
        }
        self.coverage_problem(via)
    }

    fn coverage_problem(&self, addr: &IpAddr) -> Option<String> {
        if self.complete && !self.addrs.iter().any(|(a, _)| a.contains(addr)) {
            return Some(format!(
                "no interface subnet of router {} covers {addr}",
                self.router
            ));
        }
        None
    }
}

/// Where a route was defined, for duplicate reports.
#[derive(Clone, Copy)]
enum Place {
    Inline(usize),
    Line(usize),
}

struct Validator<'a, 'e> {
    env: &'a Env<'e>,
    errs: &'a mut ConfigErrors,
}

/// True if a key is absent; a key that was present but could not be decoded
/// is not "missing" (its error is already reported).
fn missing<T>(item: &Item<T>, field: &str, value: Option<&impl Sized>) -> bool {
    value.is_none() && !item.is_bad(field)
}

impl Validator<'_, '_> {
    fn err(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.errs.push(key, reason);
    }

    /// An optional integer in `range`; `None` if absent or reported.
    fn int<T: TryFrom<i64>>(
        &mut self,
        key: impl FnOnce() -> String,
        value: Option<i64>,
        range: RangeInclusive<i64>,
        why: &str,
    ) -> Option<T> {
        let v = value?;
        match T::try_from(v) {
            Ok(t) if range.contains(&v) => Some(t),
            _ => {
                self.err(
                    key(),
                    format!("{v} is outside {}..={}{why}", range.start(), range.end()),
                );
                None
            }
        }
    }

    /// A MAC that may be a station's address: unicast and not all zero.
    fn mac(&mut self, key: impl FnOnce() -> String, s: &str, whose: &str) -> Option<[u8; 6]> {
        match parse_mac(s) {
            Err(e) => self.err(key(), e.to_string()),
            Ok(mac) if is_group_mac(&mac) => self.err(
                key(),
                format!(
                    "{} is a multicast or broadcast address; {whose} must be unicast \
                     (first octet even)",
                    format_mac(&mac)
                ),
            ),
            Ok(mac) if mac == [0; 6] => {
                self.err(key(), format!("00:00:00:00:00:00 is not a valid {whose}"));
            }
            Ok(mac) => return Some(mac),
        }
        None
    }

    fn config(&mut self, doc: &Document) -> Config {
        let dataplane = self.dataplane(doc.dataplane.as_ref());

        let mut ports = Vec::with_capacity(doc.ports.len());
        let mut facts = Vec::with_capacity(doc.ports.len());
        let mut port_index: HashMap<String, usize> = HashMap::new();
        for (i, item) in doc.ports.iter().enumerate() {
            let (port, fact) = self.port(item, &port_index);
            if let Some(name) = &item.raw.name {
                port_index.entry(name.clone()).or_insert(i);
            }
            ports.push(port);
            facts.push(fact);
        }

        let api = doc.api.as_ref().map(|item| self.api(item));

        let mut shared = Shared {
            facts: &facts,
            port_index: &port_index,
            vlan_users: HashMap::new(),
            netns_users: HashMap::new(),
            fpm_users: HashMap::new(),
            router_names: HashMap::new(),
            token_users: HashMap::new(),
        };
        if let Some(api) = api.as_ref().filter(|a| !a.admin_token_sha256.is_empty()) {
            shared
                .token_users
                .insert(api.admin_token_sha256.clone(), "the admin token".into());
        }
        let routers = doc
            .routers
            .iter()
            .enumerate()
            .map(|(i, r)| self.router(i, r, &mut shared))
            .collect();

        Config {
            dataplane,
            ports,
            routers,
            api,
        }
    }

    fn api(&mut self, item: &Item<RawApi>) -> Api {
        let r = &item.raw;
        let socket = match &r.socket {
            Some(s) if s.is_empty() => {
                self.err(
                    item.key("socket"),
                    "is empty; give a path, e.g. \"/run/vrhost/api.sock\"",
                );
                PathBuf::new()
            }
            Some(s) => self.env.base_dir.join(s),
            None => PathBuf::from(Api::DEFAULT_SOCKET),
        };
        let listen = r.listen.as_deref().and_then(|l| {
            l.parse::<std::net::SocketAddr>()
                .map_err(|_| {
                    self.err(
                        item.key("listen"),
                        format!(
                            "{} is not ADDRESS:PORT, e.g. \"127.0.0.1:8080\" or \"[::1]:8080\"",
                            crate::addr::shown(l)
                        ),
                    )
                })
                .ok()
        });
        let admin_token_sha256 = match &r.admin_token_sha256 {
            None if !item.is_bad("admin_token_sha256") => {
                self.err(
                    item.key("admin_token_sha256"),
                    "missing; the SHA-256 of the admin token (vrhost token prints a new token and its hash)",
                );
                String::new()
            }
            None => String::new(),
            Some(h) => self.sha256(|| item.key("admin_token_sha256"), h),
        };
        let tls = match (&r.tls_cert, &r.tls_key) {
            (Some(c), Some(k)) => Some((self.env.base_dir.join(c), self.env.base_dir.join(k))),
            (None, None) => None,
            (Some(_), None) => {
                self.err(
                    item.key("tls_key"),
                    "missing; tls_cert needs its private key",
                );
                None
            }
            (None, Some(_)) => {
                self.err(
                    item.key("tls_cert"),
                    "missing; tls_key needs its certificate",
                );
                None
            }
        };
        if tls.is_some() && r.listen.is_none() {
            self.err(
                item.key("tls_cert"),
                "only means something with listen = \"ADDRESS:PORT\" (the Unix socket needs no TLS)",
            );
        }
        if let Some(l) = listen.filter(|l| !l.ip().is_loopback() && tls.is_none()) {
            self.err(
                item.key("listen"),
                format!(
                    "{l} is reachable from other hosts: tokens would cross the network in clear; \
                     give tls_cert and tls_key, or listen on a loopback address"
                ),
            );
        }
        let state = match r.state.as_deref() {
            Some("") => {
                self.err(
                    item.key("state"),
                    "is empty; give a path, e.g. \"/var/lib/vrhost/state.jsonl\"",
                );
                None
            }
            Some(s) => Some(self.env.base_dir.join(s)),
            None => None,
        };
        Api {
            socket,
            listen,
            admin_token_sha256,
            tls,
            state,
        }
    }

    /// A SHA-256 digest in hex, lowercased.
    fn sha256(&mut self, key: impl FnOnce() -> String, h: &str) -> String {
        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            self.err(
                key(),
                "is not a SHA-256 digest (64 hex digits); store the hash printed by \
                 vrhost token, never the token itself",
            );
            return String::new();
        }
        h.to_ascii_lowercase()
    }

    fn dataplane(&mut self, item: Option<&Item<RawDataplane>>) -> Dataplane {
        let cores = self.env.cores;
        let last = cores.last().copied().unwrap_or(0);
        let default = vec![last];
        let Some(item) = item else {
            return Dataplane::on(default);
        };
        let mut out = Dataplane::on(default);
        if let Some(dir) = self.path(|| item.key("runtime_dir"), item.raw.runtime_dir.as_deref()) {
            out.runtime_dir = dir;
        }
        if let Some(h) = item.raw.tap_hold {
            if (0..=Dataplane::MAX_TAP_HOLD_S).contains(&h) {
                out.tap_hold = std::time::Duration::from_secs(h as u64);
            } else {
                self.err(
                    item.key("tap_hold"),
                    format!(
                        "{h} is not a number of seconds from 0 (no keeper) to {}",
                        Dataplane::MAX_TAP_HOLD_S
                    ),
                );
            }
        }
        let Some(list) = &item.raw.workers else {
            return out;
        };
        if list.is_empty() {
            self.err(
                item.key("workers"),
                format!(
                    "lists no core; give at least one, e.g. workers = [{last}], or remove the key \
                     for one worker on the last core"
                ),
            );
        }
        let mut workers = Vec::with_capacity(list.len());
        for (i, &core) in list.iter().enumerate() {
            let key = || format!("{}[{i}]", item.key("workers"));
            match usize::try_from(core) {
                Ok(c) if cores.contains(&c) => {
                    if workers.contains(&c) {
                        self.err(
                            key(),
                            format!("core {c} is listed twice; one worker per core"),
                        );
                    } else {
                        workers.push(c);
                    }
                }
                _ => self.err(
                    key(),
                    format!(
                        "core {core} is not one this process may run on; it may run on {} \
                         (its CPU affinity: taskset, cpuset)",
                        core_list(cores)
                    ),
                ),
            }
        }
        out.workers = workers;
        out
    }

    fn port(
        &mut self,
        item: &Item<RawPort>,
        earlier: &HashMap<String, usize>,
    ) -> (Port, PortFacts) {
        let raw = &item.raw;
        match &raw.name {
            None if !item.is_bad("name") => self.err(
                item.key("name"),
                "missing; every [[port]] needs a unique name, e.g. name = \"p0\"",
            ),
            None => {}
            Some(n) => {
                if let Some(problem) = name_problem(n, MAX_NAME) {
                    self.err(item.key("name"), problem);
                } else if let Some(first) = earlier.get(n) {
                    self.err(
                        item.key("name"),
                        format!("duplicate port name \"{n}\"; port[{first}] has it too"),
                    );
                }
            }
        }

        let driver = raw.driver.map(|d| match d {
            RawDriver::Memory => Driver::Memory,
            RawDriver::Pcap => Driver::Pcap,
            RawDriver::AfPacket => Driver::AfPacket,
            RawDriver::AfXdp => Driver::AfXdp,
            RawDriver::Tap => Driver::Tap,
            RawDriver::VhostUser => Driver::VhostUser,
        });
        if missing(item, "driver", raw.driver.as_ref()) {
            self.err(
                item.key("driver"),
                "missing; one of memory, pcap, af_packet, af_xdp, tap, vhost_user",
            );
        }

        let mac = raw
            .mac
            .as_deref()
            .and_then(|s| self.mac(|| item.key("mac"), s, "a port MAC"));
        let mtu = self.int(
            || item.key("mtu"),
            raw.mtu,
            MIN_MTU..=MAX_MTU,
            " (68 is the IPv4 minimum, RFC 791; 9000 the jumbo-frame maximum)",
        );
        let mtu_ok = mtu.is_some() || (raw.mtu.is_none() && !item.is_bad("mtu"));
        let queues = self.int(
            || item.key("queues"),
            raw.queues,
            1..=MAX_QUEUES,
            " (one queue per worker is the useful maximum)",
        );

        if let Some(driver) = driver {
            self.driver_rules(item, driver);
            if raw.control_queue.is_some() && driver != Driver::AfPacket {
                self.err(
                    item.key("control_queue"),
                    format!(
                        "a {driver} port has no control queue; only an af_packet port's kernel \
                         steers the control protocols to one"
                    ),
                );
            }
            if raw.rps.is_some() && driver != Driver::AfPacket {
                self.err(
                    item.key("rps"),
                    format!(
                        "only an af_packet port steers its interface's receive work; a \
                         {driver} port's frames do not pass through the kernel's backlog"
                    ),
                );
            }
            if raw.host_stack.is_some() && driver != Driver::AfPacket {
                self.err(
                    item.key("host_stack"),
                    format!(
                        "only an af_packet port shares its frames with the host's stack; a \
                         {driver} port's frames are vrhost's alone or never the host's"
                    ),
                );
            }
        }
        if let Some(ifname) = &raw.interface {
            if let Some(problem) = linux_ifname_problem(ifname) {
                self.err(item.key("interface"), problem);
            }
        }
        if let Some(ns) = &raw.netns {
            if let Some(problem) = netns_problem(ns) {
                self.err(item.key("netns"), problem);
            } else if driver.is_some_and(|d| d != Driver::Tap) {
                self.err(
                    item.key("netns"),
                    "only a tap port is made in another namespace; an af_packet or af_xdp \
                     port uses an interface of vrhost's own",
                );
            }
        }
        let rx = self.path(|| item.key("rx"), raw.rx.as_deref());
        let tx = self.path(|| item.key("tx"), raw.tx.as_deref());
        let socket = self.path(|| item.key("socket"), raw.socket.as_deref());

        let name = raw.name.clone().unwrap_or_default();
        let mtu = mtu.unwrap_or(DEFAULT_MTU);
        let port_driver = driver.unwrap_or(Driver::Memory);
        let port = Port {
            name: name.clone(),
            driver: port_driver,
            rx,
            tx,
            interface: raw.interface.clone(),
            netns: raw.netns.clone(),
            socket,
            mac,
            mtu,
            queues: queues.unwrap_or(1),
            control_queue: raw.control_queue.unwrap_or(true) && port_driver == Driver::AfPacket,
            host_stack: raw.host_stack.unwrap_or(false) && port_driver == Driver::AfPacket,
            rps: raw.rps.unwrap_or(true) && port_driver == Driver::AfPacket,
        };
        let facts = PortFacts {
            name,
            mtu: mtu_ok.then_some(mtu),
            mac,
        };
        (port, facts)
    }

    /// Which keys each driver needs and which it cannot use.
    fn driver_rules(&mut self, item: &Item<RawPort>, driver: Driver) {
        let raw = &item.raw;
        let has = |field: &str, v: bool| v || item.is_bad(field);
        let files = matches!(driver, Driver::Memory | Driver::Pcap);
        if files {
            if missing(item, "mac", raw.mac.as_ref()) {
                self.err(
                    item.key("mac"),
                    format!(
                        "missing; a {driver} port has no Linux interface to take a MAC from, \
                         e.g. mac = \"02:00:00:00:00:01\""
                    ),
                );
            }
            if has("interface", raw.interface.is_some()) {
                self.err(
                    item.key("interface"),
                    format!("a {driver} port has no Linux interface; only af_packet, af_xdp and tap ports use one"),
                );
            }
        } else {
            for (field, v) in [("rx", &raw.rx), ("tx", &raw.tx)] {
                if has(field, v.is_some()) {
                    self.err(
                        item.key(field),
                        format!("a {driver} port has no files; only memory and pcap ports read or write them"),
                    );
                }
            }
        }
        match driver {
            Driver::Memory => {
                if has("tx", raw.tx.is_some()) {
                    self.err(
                        item.key("tx"),
                        "a memory port counts and discards what it sends; remove tx, \
                         or use a pcap port to capture",
                    );
                }
            }
            Driver::Pcap => {
                let none =
                    missing(item, "rx", raw.rx.as_ref()) && missing(item, "tx", raw.tx.as_ref());
                if none {
                    self.err(
                        item.label.clone(),
                        "a pcap port needs rx (a file to read), tx (a file to write) or both",
                    );
                }
            }
            Driver::AfPacket | Driver::AfXdp => {
                if missing(item, "interface", raw.interface.as_ref()) {
                    self.err(
                        item.key("interface"),
                        format!(
                            "missing; an {driver} port attaches to a Linux interface, \
                             e.g. interface = \"veth0\""
                        ),
                    );
                }
            }
            Driver::Tap => {}
            Driver::VhostUser => {
                if missing(item, "socket", raw.socket.as_ref()) {
                    self.err(
                        item.key("socket"),
                        "missing; a vhost_user port listens on a Unix socket for QEMU, \
                         e.g. socket = \"/run/vrhost/vm1.sock\"",
                    );
                }
                if has("interface", raw.interface.is_some()) {
                    self.err(
                        item.key("interface"),
                        "a vhost_user port has no Linux interface: the VM's NIC is its peer",
                    );
                }
            }
        }
        if driver != Driver::VhostUser && has("socket", raw.socket.is_some()) {
            self.err(
                item.key("socket"),
                format!("a {driver} port has no socket; only vhost_user ports listen on one"),
            );
        }
    }

    /// A file path, resolved against the config's directory.
    fn path(&mut self, key: impl FnOnce() -> String, value: Option<&str>) -> Option<PathBuf> {
        let v = value?;
        if v.is_empty() {
            self.err(key(), "must not be empty");
            return None;
        }
        Some(self.env.base_dir.join(v))
    }

    fn router(&mut self, i: usize, item: &RouterItem, shared: &mut Shared<'_>) -> Router {
        let head = &item.head;
        let label = head.label.clone();
        let mut display = label.clone();
        match &head.raw.name {
            None if !head.is_bad("name") => self.err(
                head.key("name"),
                "missing; every [[router]] needs a unique name, e.g. name = \"red\"",
            ),
            None => {}
            Some(n) => {
                if let Some(problem) = name_problem(n, MAX_NAME) {
                    self.err(head.key("name"), problem);
                } else if let Some(first) = shared.router_names.get(n) {
                    self.err(
                        head.key("name"),
                        format!("duplicate router name \"{n}\"; router[{first}] has it too"),
                    );
                } else {
                    shared.router_names.insert(n.clone(), i);
                    display.clone_from(n);
                }
            }
        }

        let mut subnets = Subnets {
            router: display,
            addrs: Vec::new(),
            complete: true,
        };
        let mut if_names: HashMap<String, usize> = HashMap::new();
        let interfaces: Vec<Interface> = item
            .interfaces
            .iter()
            .enumerate()
            .map(|(j, it)| self.interface(j, it, &mut if_names, &mut subnets, shared))
            .collect();
        self.overlaps(&subnets);

        let neighbors = self.neighbors(&item.neighbors, &subnets);
        let filters = self.filters(&item.filters, &head.key("filter"));
        self.filter_references(&interfaces, &item.interfaces, &filters);
        let control = item.control.as_ref().map(|c| {
            let key = || c.key("netns");
            let netns = c.raw.netns.clone().unwrap_or_default();
            match &c.raw.netns {
                None if !c.is_bad("netns") => self.err(
                    key(),
                    "missing; the network namespace of this router's control plane, \
                     e.g. netns = \"vr-red\"",
                ),
                None => {}
                Some(ns) => {
                    if let Some(problem) = netns_problem(ns) {
                        self.err(key(), problem);
                    } else if let Some(other) = shared.netns_users.get(ns) {
                        self.err(
                            key(),
                            format!(
                                "namespace \"{ns}\" is already used by {other}; \
                                 each router needs its own"
                            ),
                        );
                    } else {
                        shared.netns_users.insert(ns.clone(), label.clone());
                    }
                }
            }
            let fpm_in = match c.raw.fpm_in.as_deref() {
                None | Some("netns") => FpmIn::Netns,
                Some("host") => FpmIn::Host,
                Some(other) => {
                    self.err(
                        c.key("fpm_in"),
                        format!(
                            "{} is neither \"netns\" (inside the router's namespace, the default) \
                             nor \"host\" (vrhost's own namespace)",
                            crate::addr::shown(other)
                        ),
                    );
                    FpmIn::Netns
                }
            };
            let mut fpm_peers = Vec::new();
            for (k, p) in c.raw.fpm_peers.iter().flatten().enumerate() {
                match p.parse::<std::net::IpAddr>() {
                    Ok(a) => fpm_peers.push(a),
                    Err(_) => self.err(
                        format!("{}[{k}]", c.key("fpm_peers")),
                        format!("{} is not an IP address", crate::addr::shown(p)),
                    ),
                }
            }
            if c.raw.fpm.is_none() && (c.raw.fpm_in.is_some() || c.raw.fpm_peers.is_some()) {
                self.err(
                    c.key(if c.raw.fpm_in.is_some() { "fpm_in" } else { "fpm_peers" }),
                    "only means something with fpm = \"ADDRESS:PORT\"",
                );
            }
            if c.raw.fpm.is_some() && fpm_in == FpmIn::Host && c.raw.fpm_peers.is_none() {
                self.err(
                    c.key("fpm_peers"),
                    "missing; an FPM listener in vrhost's own namespace (fpm_in = \"host\") must \
                     name the addresses of the router's control plane, e.g. fpm_peers = [\"198.18.0.2\"]",
                );
            }
            let fpm = c.raw.fpm.as_deref().and_then(|f| {
                let key = || c.key("fpm");
                match f.parse::<std::net::SocketAddr>() {
                    Err(_) => {
                        self.err(
                            key(),
                            format!(
                                "{} is not ADDRESS:PORT, e.g. \"127.0.0.1:2620\" (zebra's FPM port)",
                                crate::addr::shown(f)
                            ),
                        );
                        None
                    }
                    // Inside its own namespace, every router may use the same address.
                    Ok(a) if fpm_in == FpmIn::Netns => Some(a),
                    Ok(a) => {
                        if let Some(other) = shared.fpm_users.get(&a) {
                            self.err(
                                key(),
                                format!("{a} is already the FPM listener of {other}; each router needs its own"),
                            );
                            None
                        } else {
                            shared.fpm_users.insert(a, label.clone());
                            Some(a)
                        }
                    }
                }
            });
            ControlPlane {
                netns,
                fpm,
                fpm_in,
                fpm_peers,
            }
        });
        let limits = self.limits(item);
        let routes = self.routes(item, &subnets);
        // Connected and local routes count too: two per IPv4 address (subnet,
        // host; broadcast is extra), two per IPv6 address plus link-local.
        let v4 = routes.iter().filter(|r| r.prefix.is_ipv4()).count();
        let v6 = routes.len() - v4;
        let addrs = interfaces.iter().map(|i| i.addresses.len()).sum::<usize>();
        let worst = v4.max(v6) + 3 * addrs + 2 * interfaces.len();
        if worst > limits.max_routes as usize {
            let key = limit_key(item, "max_routes");
            self.err(
                key,
                format!(
                    "{} routes per family ({v4} IPv4, {v6} IPv6 configured, plus connected and \
                     local routes) exceed max_routes = {}",
                    worst, limits.max_routes
                ),
            );
        }

        let groups: std::collections::HashSet<&Paths> = routes
            .iter()
            .filter_map(|r| match &r.target {
                RouteTarget::Multipath(p) => Some(p),
                _ => None,
            })
            .collect();
        if groups.len() > limits.max_nexthop_groups as usize {
            let key = limit_key(item, "max_nexthop_groups");
            self.err(
                key,
                format!(
                    "{} distinct multipath gateway sets in the routes exceed max_nexthop_groups = {}",
                    groups.len(),
                    limits.max_nexthop_groups
                ),
            );
        }

        // Link-local addresses count as the data plane counts them: one per
        // interface with any IPv6 address.
        let held = addrs
            + interfaces
                .iter()
                .filter(|i| i.addresses.iter().any(|a| a.addr.is_ipv6()))
                .count();
        if held > limits.max_addresses as usize {
            let key = limit_key(item, "max_addresses");
            self.err(
                key,
                format!(
                    "{held} interface addresses (link-local ones included) exceed max_addresses = {}",
                    limits.max_addresses
                ),
            );
        }
        if neighbors.len() > limits.max_neighbors as usize {
            let key = limit_key(item, "max_neighbors");
            self.err(
                key,
                format!(
                    "{} static neighbours exceed max_neighbors = {}",
                    neighbors.len(),
                    limits.max_neighbors
                ),
            );
        }

        let api_token_sha256 = head
            .raw
            .api_token_sha256
            .as_deref()
            .map(|h| self.sha256(|| head.key("api_token_sha256"), h));
        if let Some(h) = api_token_sha256.as_ref().filter(|h| !h.is_empty()) {
            let key = head.key("api_token_sha256");
            match shared.token_users.get(h) {
                // One token would open both.
                Some(first) => self.err(
                    key,
                    format!(
                        "the same hash as {first}; every token must be different (vrhost token)"
                    ),
                ),
                None => {
                    shared.token_users.insert(h.clone(), key);
                }
            }
        }

        Router {
            name: head.raw.name.clone().unwrap_or_default(),
            interfaces,
            routes,
            neighbors,
            filters,
            control,
            limits,
            api_token_sha256,
        }
    }

    fn interface(
        &mut self,
        j: usize,
        item: &Item<RawInterface>,
        names: &mut HashMap<String, usize>,
        subnets: &mut Subnets,
        shared: &mut Shared<'_>,
    ) -> Interface {
        let raw = &item.raw;
        match &raw.name {
            None if !item.is_bad("name") => self.err(
                item.key("name"),
                "missing; every [[router.interface]] needs a name unique in its router",
            ),
            None => {}
            Some(n) => {
                if let Some(problem) = name_problem(n, MAX_IFNAME) {
                    self.err(item.key("name"), problem);
                } else if let Some(first) = names.get(n) {
                    self.err(
                        item.key("name"),
                        format!(
                            "duplicate interface name \"{n}\" in router {}; interface[{first}] \
                             has it too",
                            subnets.router
                        ),
                    );
                } else {
                    names.insert(n.clone(), j);
                }
            }
        }

        let port = match &raw.port {
            None => {
                if !item.is_bad("port") {
                    self.err(
                        item.key("port"),
                        "missing; name the [[port]] this interface attaches to, e.g. port = \"p0\"",
                    );
                }
                None
            }
            Some(p) => match shared.port_index.get(p) {
                Some(&idx) => Some(idx),
                None => {
                    let mut known: Vec<String> = Vec::new();
                    for f in shared.facts {
                        let quoted = format!("\"{}\"", f.name);
                        if !known.contains(&quoted) {
                            known.push(quoted);
                        }
                    }
                    let hint = match known.len() {
                        0 => "; the config has no [[port]]".to_string(),
                        1..=8 => format!("; ports are {}", known.join(", ")),
                        _ => String::new(),
                    };
                    self.err(item.key("port"), format!("no port named \"{p}\"{hint}"));
                    None
                }
            },
        };

        let vlan = self.int::<u16>(
            || item.key("vlan"),
            raw.vlan,
            1..=4094,
            " (IEEE 802.1Q: 0 marks priority-tagged frames, 4095 is reserved)",
        );
        let inner_vlan = self.int::<u16>(
            || item.key("inner_vlan"),
            raw.inner_vlan,
            1..=4094,
            " (the QinQ inner tag, IEEE 802.1ad)",
        );
        if raw.inner_vlan.is_some() && raw.vlan.is_none() {
            self.err(
                item.key("inner_vlan"),
                "needs vlan, the outer tag (QinQ: vlan = OUTER, inner_vlan = INNER)",
            );
        }
        let tpid = match raw.vlan_tpid.as_deref() {
            None => Tpid::Dot1q,
            Some("0x8100") => Tpid::Dot1q,
            Some("0x88a8") => Tpid::Dot1ad,
            Some(other) => {
                self.err(
                    item.key("vlan_tpid"),
                    format!(
                        "\"{other}\" is not a TPID; \"0x8100\" (802.1Q) or \"0x88a8\" (802.1ad)"
                    ),
                );
                Tpid::Dot1q
            }
        };
        if raw.vlan_tpid.is_some() && raw.vlan.is_none() {
            self.err(
                item.key("vlan_tpid"),
                "needs vlan: an untagged interface has no TPID",
            );
        }
        let vlan_ok = (vlan.is_some() || (raw.vlan.is_none() && !item.is_bad("vlan")))
            && (inner_vlan.is_some() || (raw.inner_vlan.is_none() && !item.is_bad("inner_vlan")));
        if let (Some(p), true) = (port, vlan_ok) {
            let key = if inner_vlan.is_some() {
                item.key("inner_vlan")
            } else if vlan.is_some() {
                item.key("vlan")
            } else {
                item.key("port")
            };
            let port_name = &shared.facts[p].name;
            match shared.vlan_users.get(&(p, vlan, inner_vlan)) {
                Some(other) => {
                    let tag = match (vlan, inner_vlan) {
                        (Some(v), Some(n)) => format!("VLAN {v} inner VLAN {n}"),
                        (Some(v), None) => format!("VLAN {v}"),
                        (None, _) => "untagged".to_string(),
                    };
                    self.err(
                        key,
                        format!(
                            "port \"{port_name}\" {tag} is already used by {other}; \
                             each (port, VLAN) belongs to one interface"
                        ),
                    );
                }
                None => {
                    shared
                        .vlan_users
                        .insert((p, vlan, inner_vlan), item.label.clone());
                }
            }
        }

        let port_facts = port.map(|p| &shared.facts[p]);
        let port_mtu = port_facts.and_then(|f| f.mtu);
        let own_mtu = match port_mtu {
            Some(pm) => self.int::<u16>(
                || item.key("mtu"),
                raw.mtu,
                MIN_MTU..=i64::from(pm),
                &format!(
                    " (68 is the IPv4 minimum, RFC 791; {pm} is the MTU of port \"{}\")",
                    port_facts.map_or("", |f| f.name.as_str())
                ),
            ),
            None => self.int::<u16>(
                || item.key("mtu"),
                raw.mtu,
                MIN_MTU..=MAX_MTU,
                " (68 is the IPv4 minimum, RFC 791; 9000 the jumbo-frame maximum)",
            ),
        };
        let mtu_known = own_mtu.or(if raw.mtu.is_none() && !item.is_bad("mtu") {
            port_mtu
        } else {
            None
        });

        let own_mac = raw
            .mac
            .as_deref()
            .and_then(|s| self.mac(|| item.key("mac"), s, "an interface MAC"));
        let mac = if raw.mac.is_some() {
            own_mac
        } else {
            port_facts.and_then(|f| f.mac)
        };

        let addresses = self.addresses(item, subnets);

        if let (Some(m), Some(v6)) = (mtu_known, addresses.iter().find(|a| a.addr.is_ipv6())) {
            if m < MIN_MTU_IPV6 {
                let from = if own_mtu.is_some() {
                    String::new()
                } else {
                    format!(
                        " (inherited from port \"{}\")",
                        port_facts.map_or("", |f| f.name.as_str())
                    )
                };
                self.err(
                    item.key("mtu"),
                    format!(
                        "{m}{from} is below {MIN_MTU_IPV6}, the IPv6 minimum link MTU \
                         (RFC 8200 §5), and the interface has IPv6 address {v6}"
                    ),
                );
            }
        }

        let urpf = match raw.urpf.as_deref().map(str::parse::<Urpf>) {
            None => Urpf::Off,
            Some(Ok(u)) => u,
            Some(Err(problem)) => {
                self.err(
                    item.key("urpf"),
                    format!(
                        "{problem}: the reverse-path check (RFC 3704) of what arrives on the \
                         interface; strict: the source's route leaves by this interface, \
                         loose: the source has a route"
                    ),
                );
                Urpf::Off
            }
        };

        let filters = self.iface_filters(item);
        Interface {
            name: raw.name.clone().unwrap_or_default(),
            port: port.unwrap_or(0),
            vlan,
            inner_vlan,
            tpid,
            mac,
            mtu: mtu_known.unwrap_or(DEFAULT_MTU),
            addresses,
            urpf,
            filters,
        }
    }

    /// An interface's addresses; valid ones are also added to `subnets`.
    fn addresses(&mut self, item: &Item<RawInterface>, subnets: &mut Subnets) -> Vec<IfAddr> {
        if item.is_bad("addresses") {
            subnets.complete = false;
        }
        let Some(list) = &item.raw.addresses else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(list.len());
        for (k, s) in list.iter().enumerate() {
            let key = || format!("{}[{k}]", item.key("addresses"));
            let checked = s
                .parse::<IfAddr>()
                .map_err(|e| e.to_string())
                .and_then(|a| {
                    let duplicate = subnets.addrs.iter().find(|(b, _)| b.addr == a.addr);
                    match (interface_address_problem(&a), duplicate) {
                        (Some(problem), _) => Err(problem),
                        (None, Some((_, owner))) if *owner == item.label => {
                            Err(format!("{} is listed twice on this interface", a.addr))
                        }
                        (None, Some((_, owner))) => {
                            Err(format!("{} is already assigned to {owner}", a.addr))
                        }
                        (None, None) => Ok(a),
                    }
                });
            match checked {
                Ok(a) => {
                    subnets.addrs.push((a, item.label.clone()));
                    out.push(a);
                }
                Err(problem) => {
                    subnets.complete = false;
                    self.err(key(), problem);
                }
            }
        }
        out
    }

    /// Two interfaces of one router on overlapping subnets would make the
    /// connected route ambiguous.
    fn overlaps(&mut self, subnets: &Subnets) {
        for (n, (b, b_owner)) in subnets.addrs.iter().enumerate() {
            let clash = subnets.addrs[..n]
                .iter()
                .find(|(a, a_owner)| a_owner != b_owner && a.network().overlaps(&b.network()));
            if let Some((a, a_owner)) = clash {
                self.err(
                    format!("{b_owner}.addresses"),
                    format!(
                        "subnet {} of {b} overlaps subnet {} of {a} on {a_owner}; \
                         the interfaces of one router need disjoint subnets",
                        b.network(),
                        a.network()
                    ),
                );
            }
        }
    }

    fn neighbors(&mut self, items: &[Item<RawNeighbor>], subnets: &Subnets) -> Vec<Neighbor> {
        let mut out: Vec<Neighbor> = Vec::with_capacity(items.len());
        let mut seen: HashMap<IpAddr, usize> = HashMap::new();
        for (k, item) in items.iter().enumerate() {
            let raw = &item.raw;
            let address = match &raw.address {
                None => {
                    if !item.is_bad("address") {
                        self.err(item.key("address"), "missing; the neighbour's IP address");
                    }
                    None
                }
                Some(s) => match parse_ip_addr(s) {
                    Err(e) => {
                        self.err(item.key("address"), e.to_string());
                        None
                    }
                    Ok(a) => {
                        let problem = if let Some((_, owner)) =
                            subnets.addrs.iter().find(|(x, _)| x.addr == a)
                        {
                            Some(format!(
                                "{a} is this router's own address (on {owner}), not a neighbour"
                            ))
                        } else if let Some(first) = seen.get(&a) {
                            Some(format!(
                                "{a} already has a static entry at neighbor[{first}]"
                            ))
                        } else {
                            subnets.coverage_problem(&a)
                        };
                        seen.entry(a).or_insert(k);
                        match problem {
                            Some(p) => {
                                self.err(item.key("address"), p);
                                None
                            }
                            None => Some(a),
                        }
                    }
                },
            };
            let mac = match &raw.mac {
                None => {
                    if !item.is_bad("mac") {
                        self.err(item.key("mac"), "missing; the neighbour's MAC address");
                    }
                    None
                }
                Some(s) => self.mac(|| item.key("mac"), s, "a neighbour's MAC"),
            };
            if let (Some(address), Some(mac)) = (address, mac) {
                out.push(Neighbor { address, mac });
            }
        }
        out
    }

    fn limits(&mut self, item: &RouterItem) -> Limits {
        let d = Limits::default();
        let Some(l) = &item.limits else {
            return d;
        };
        let r = &l.raw;
        Limits {
            icmp_rate: self
                .int(
                    || l.key("icmp_rate"),
                    r.icmp_rate,
                    0..=1_000_000,
                    " errors per second (0 sends none; the cap keeps one router's ICMP \
                     from crowding out others' traffic)",
                )
                .unwrap_or(d.icmp_rate),
            punt_queue: self
                .int(
                    || l.key("punt_queue"),
                    r.punt_queue,
                    1..=65_536,
                    " packets (the cap bounds each tenant's share of punt memory)",
                )
                .unwrap_or(d.punt_queue),
            arp_hold: self
                .int(
                    || l.key("arp_hold"),
                    r.arp_hold,
                    0..=8,
                    " packets per unresolved next hop (0 drops them; the data plane holds at most 8)",
                )
                .unwrap_or(d.arp_hold),
            neighbor_timeout_ms: self
                .int(
                    || l.key("neighbor_timeout_ms"),
                    r.neighbor_timeout_ms,
                    1..=86_400_000,
                    " milliseconds (1 ms to 1 day)",
                )
                .unwrap_or(d.neighbor_timeout_ms),
            max_neighbors: self
                .int(
                    || l.key("max_neighbors"),
                    r.max_neighbors,
                    1..=1_000_000,
                    " entries (each worker keeps its own table of at most this many)",
                )
                .unwrap_or(d.max_neighbors),
            max_routes: self
                .int(
                    || l.key("max_routes"),
                    r.max_routes,
                    16..=16_000_000,
                    " routes per address family, connected and local routes included",
                )
                .unwrap_or(d.max_routes),
            max_nexthop_groups: self
                .int(
                    || l.key("max_nexthop_groups"),
                    r.max_nexthop_groups,
                    1..=1_000_000,
                    " multipath groups (distinct sets of gateways and weights)",
                )
                .unwrap_or(d.max_nexthop_groups),
            max_addresses: self
                .int(
                    || l.key("max_addresses"),
                    r.max_addresses,
                    1..=65_536,
                    " interface addresses, all interfaces and both families together",
                )
                .unwrap_or(d.max_addresses),
            weight: self
                .int(
                    || l.key("weight"),
                    r.weight,
                    1..=10_000,
                    " (a router's share of a saturated worker is its weight over the sum of the busy routers' weights)",
                )
                .unwrap_or(d.weight),
            pps: self
                .int(
                    || l.key("pps"),
                    r.pps,
                    0..=1_000_000_000,
                    " packets per second (0: no ceiling)",
                )
                .unwrap_or(d.pps),
            bps: self
                .int(
                    || l.key("bps"),
                    r.bps,
                    0..=1_000_000_000_000,
                    " bits per second (0: no ceiling)",
                )
                .unwrap_or(d.bps),
            punt_rate: self
                .int(
                    || l.key("punt_rate"),
                    r.punt_rate,
                    1..=10_000_000,
                    " packets per second towards the control plane",
                )
                .unwrap_or(d.punt_rate),
            protocol_rate: self
                .int(
                    || l.key("protocol_rate"),
                    r.protocol_rate,
                    0..=10_000_000,
                    " packets per second of control protocols (0: none protected)",
                )
                .unwrap_or(d.protocol_rate),
        }
    }

    fn routes(&mut self, item: &RouterItem, subnets: &Subnets) -> Vec<Route> {
        let head = &item.head;
        let mut routes = Vec::with_capacity(item.routes.len());
        let mut places = Vec::with_capacity(item.routes.len());
        for (k, r) in item.routes.iter().enumerate() {
            if let Some(route) = self.inline_route(r, subnets) {
                routes.push(route);
                places.push(Place::Inline(k));
            }
        }
        let mut file = head
            .raw
            .routes_file
            .as_deref()
            .and_then(|name| self.routes_file(head, name, subnets, &mut routes, &mut places));

        // Any duplicate is an error, so the duplicates need not be removed
        // from `routes`: the whole config is rejected.
        for (i, first) in routes_file::duplicates(&routes) {
            let reason = format!(
                "duplicate prefix {}; also at {}",
                routes[i].prefix,
                self.place(head, places[first])
            );
            match (places[i], &mut file) {
                (Place::Inline(k), _) => self.err(item.routes[k].key("prefix"), reason),
                (Place::Line(n), Some(file)) => file.report(self.errs, n, reason),
                (Place::Line(_), None) => self.err(head.key("routes_file"), reason),
            }
        }
        if let Some(file) = file {
            file.finish(self.errs);
        }
        routes
    }

    fn place(&self, head: &Item<RawRouter>, place: Place) -> String {
        match place {
            Place::Inline(k) => format!("{}[{k}]", head.key("route")),
            Place::Line(n) => format!("{} line {n}", file_label(head)),
        }
    }

    fn inline_route(&mut self, item: &Item<RawRoute>, subnets: &Subnets) -> Option<Route> {
        let raw = &item.raw;
        let prefix = match &raw.prefix {
            None => {
                if !item.is_bad("prefix") {
                    self.err(
                        item.key("prefix"),
                        "missing; the destination, e.g. prefix = \"0.0.0.0/0\"",
                    );
                }
                None
            }
            Some(s) => match parse_prefix(s) {
                Ok(p) => Some(p),
                Err(e) => {
                    self.err(item.key("prefix"), e.to_string());
                    None
                }
            },
        };
        let given: Vec<&str> = [
            ("via", raw.via.is_some()),
            ("blackhole", raw.blackhole == Some(true)),
            ("unreachable", raw.unreachable == Some(true)),
        ]
        .into_iter()
        .filter(|(k, set)| *set || item.is_bad(k))
        .map(|(k, _)| k)
        .collect();
        match given.len() {
            0 => {
                self.err(
                    item.label.clone(),
                    "has no target; give one of via = \"ADDRESS\", blackhole = true or \
                     unreachable = true",
                );
                return None;
            }
            1 => {}
            _ => {
                self.err(
                    item.label.clone(),
                    format!(
                        "has {}; give exactly one of via, blackhole, unreachable",
                        given.join(" and ")
                    ),
                );
                return None;
            }
        }
        if raw.weights.is_some() && !matches!(raw.via, Some(Vias::Many(_))) {
            self.err(
                item.key("weights"),
                "only with a list of next hops, via = [\"ADDRESS\", ...]",
            );
            return None;
        }
        let target = match &raw.via {
            None if raw.blackhole == Some(true) => RouteTarget::Blackhole,
            None if raw.unreachable == Some(true) => RouteTarget::Unreachable,
            None => return None,
            Some(vias) => {
                let list: Vec<&String> = match vias {
                    Vias::One(s) => vec![s],
                    Vias::Many(v) => v.iter().collect(),
                };
                let weights: Vec<i64> = match &raw.weights {
                    None => vec![1; list.len()],
                    Some(w) if w.len() != list.len() => {
                        self.err(
                            item.key("weights"),
                            format!(
                                "has {} weights for {} next hops; give one each",
                                w.len(),
                                list.len()
                            ),
                        );
                        return None;
                    }
                    Some(w) => w.clone(),
                };
                let mut paths = Vec::with_capacity(list.len());
                for (s, w) in list.into_iter().zip(weights) {
                    let via = match parse_ip_addr(s) {
                        Ok(v) => v,
                        Err(e) => {
                            self.err(item.key("via"), e.to_string());
                            return None;
                        }
                    };
                    let problem = prefix
                        .as_ref()
                        .and_then(|p| routes_file::family_problem(p, &via))
                        .or_else(|| subnets.next_hop_problem(&via));
                    if let Some(problem) = problem {
                        self.err(item.key("via"), problem);
                        return None;
                    }
                    let Ok(weight) = u16::try_from(w) else {
                        self.err(item.key("weights"), format!("{w} is outside 1-65535"));
                        return None;
                    };
                    paths.push(Gateway { via, weight });
                }
                match Paths::target(paths) {
                    Ok(t) => t,
                    Err(e) => {
                        let key = if matches!(e, PathsError::ZeroWeight(_)) {
                            "weights"
                        } else {
                            "via"
                        };
                        self.err(item.key(key), e.to_string());
                        return None;
                    }
                }
            }
        };
        Some(Route {
            prefix: prefix?,
            target,
        })
    }

    /// Appends the routes of a routes file; returns its error report, or
    /// `None` if it could not be read.
    fn routes_file(
        &mut self,
        head: &Item<RawRouter>,
        file: &str,
        subnets: &Subnets,
        routes: &mut Vec<Route>,
        places: &mut Vec<Place>,
    ) -> Option<FileErrors> {
        if file.is_empty() {
            self.err(head.key("routes_file"), "must not be empty");
            return None;
        }
        let path = self.env.base_dir.join(file);
        let bytes = match (self.env.read)(&path) {
            Ok(b) => b,
            Err(e) => {
                self.err(
                    head.key("routes_file"),
                    format!("cannot read {}: {e}", path.display()),
                );
                return None;
            }
        };
        // Invalid UTF-8 turns into U+FFFD, which then fails to parse as an
        // address on its own line; valid files are not copied.
        let text = String::from_utf8_lossy(&bytes);
        let lines_guess = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
        routes.reserve(lines_guess);
        places.reserve(lines_guess);

        let mut report = FileErrors {
            key: head.key("routes_file"),
            label: file_label(head),
            path,
            found: 0,
        };
        routes_file::scan(&text, |line, parsed| {
            let route = match parsed {
                Ok(route) => route,
                Err(reason) => return report.report(self.errs, line, reason),
            };
            for p in route.target.paths() {
                if let Some(problem) = subnets.next_hop_problem(&p.via) {
                    return report.report(self.errs, line, problem);
                }
            }
            routes.push(route);
            places.push(Place::Line(line));
        });
        Some(report)
    }
}

/// Errors of one routes file, capped at [`MAX_FILE_ERRORS`].
struct FileErrors {
    /// `router "red".routes_file`
    key: String,
    /// `router "red".routes_file "table.txt"`
    label: String,
    /// The file as read.
    path: PathBuf,
    found: usize,
}

impl FileErrors {
    fn report(&mut self, errs: &mut ConfigErrors, line: usize, reason: String) {
        self.found += 1;
        if self.found <= MAX_FILE_ERRORS {
            errs.push(format!("{} line {line}", self.label), reason);
        }
    }

    fn finish(self, errs: &mut ConfigErrors) {
        if self.found > MAX_FILE_ERRORS {
            errs.push(
                self.key,
                format!(
                    "{} more errors in {} not listed (only the first {MAX_FILE_ERRORS} are)",
                    self.found - MAX_FILE_ERRORS,
                    self.path.display()
                ),
            );
        }
    }
}

/// `router "red".routes_file "table.txt"`: the file as written in the config.
/// Where a router's limit `name` is reported: its `[router.limits]`
/// entry where that table is there, else `limits.NAME` on the router.
fn limit_key(item: &RouterItem, name: &str) -> String {
    item.limits
        .as_ref()
        .map_or_else(|| item.head.key(&format!("limits.{name}")), |l| l.key(name))
}

fn file_label(head: &Item<RawRouter>) -> String {
    format!(
        "{} {:?}",
        head.key("routes_file"),
        head.raw.routes_file.as_deref().unwrap_or_default()
    )
}

/// State shared across routers.
struct Shared<'a> {
    facts: &'a [PortFacts],
    port_index: &'a HashMap<String, usize>,
    /// (port, VLAN) → the interface that has it.
    vlan_users: HashMap<(usize, Option<u16>, Option<u16>), String>,
    /// netns → the router that has it.
    netns_users: HashMap<String, String>,
    /// FPM listener → the router that has it.
    fpm_users: HashMap<std::net::SocketAddr, String>,
    /// Router name → index of its first router.
    router_names: HashMap<String, usize>,
    /// Token hash → the key that has it (the admin's first).
    token_users: HashMap<String, String>,
}

/// Why an address cannot be assigned to an interface, if it cannot.
fn interface_address_problem(a: &IfAddr) -> Option<String> {
    let net = a.network();
    if a.prefix_len == 0 {
        let example = if a.addr.is_ipv4() { 24 } else { 64 };
        return Some(format!(
            "{a} claims every address as on-link; give the subnet's real length, \
             e.g. {}/{example}",
            a.addr
        ));
    }
    let special = match a.addr {
        IpAddr::V4(v4) if v4.is_unspecified() => Some("the unspecified address"),
        IpAddr::V4(v4) if v4.is_loopback() => Some("a loopback address"),
        IpAddr::V4(v4) if v4.is_multicast() => Some("a multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the limited broadcast address"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("the unspecified address"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("the loopback address"),
        IpAddr::V6(v6) if v6.is_multicast() => Some("a multicast address"),
        _ => None,
    };
    if let Some(what) = special {
        return Some(format!(
            "{} is {what}; it cannot be assigned to an interface",
            a.addr
        ));
    }
    match a.addr {
        // RFC 3021: a /31 has no network or broadcast address; a /32 is one host.
        IpAddr::V4(v4) if a.prefix_len <= 30 => {
            let bits = u32::from(v4);
            let host_mask = u32::MAX >> a.prefix_len;
            if bits & host_mask == 0 {
                Some(format!(
                    "{v4} is the network address of {net}; use a host address such as {}/{} \
                     (only /31 and /32 may use it, RFC 3021)",
                    Ipv4Addr::from(bits | 1),
                    a.prefix_len
                ))
            } else if bits & host_mask == host_mask {
                Some(format!(
                    "{v4} is the broadcast address of {net} (RFC 919); use a host address \
                     (only /31 and /32 may use it, RFC 3021)"
                ))
            } else {
                None
            }
        }
        // RFC 4291 §2.6.1: the all-zero host is the Subnet-Router anycast
        // address; RFC 6164 lets /127 point-to-point links use both.
        IpAddr::V6(v6) if a.prefix_len <= 126 && a.addr == net.addr() => Some(format!(
            "{v6} is the Subnet-Router anycast address of {net} (RFC 4291 §2.6.1); \
             use a host address such as {}/{}",
            Ipv6Addr::from(u128::from(v6) | 1),
            a.prefix_len
        )),
        _ => None,
    }
}

mod filters;
#[cfg(test)]
mod tests;
