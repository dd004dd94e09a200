//! The validated config model. A [`Config`] only exists if the whole file,
//! routes files included, is valid ([`Config::load`], in `load.rs`): there
//! is no half-built value to apply by mistake.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

use crate::addr::{IfAddr, IpPrefix};
pub use vrhost_dataplane::{
    Action, FilterSpec, IfaceFilters, Path, Paths, PathsError, PortRange, RouteTarget, Rule, Tpid,
    Urpf,
};

/// A complete, validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Worker placement.
    pub dataplane: Dataplane,
    /// Packet I/O ports, in file order. [`Interface::port`] indexes this.
    pub ports: Vec<Port>,
    /// Virtual routers, in file order.
    pub routers: Vec<Router>,
    /// The management API, when `[api]` is present.
    pub api: Option<Api>,
}

/// `[api]`: the management API (docs/api.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Api {
    /// Unix socket it listens on (mode 0600).
    pub socket: PathBuf,
    /// Optional TCP listener.
    pub listen: Option<std::net::SocketAddr>,
    /// SHA-256 of the admin token, 64 lowercase hex digits.
    pub admin_token_sha256: String,
    /// TLS on the TCP listener: (PEM certificate chain, PEM private key).
    /// Required when `listen` is not a loopback address.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The journal of changes made through the API, replayed at start so
    /// that they survive a restart; none: they last until the process ends.
    pub state: Option<PathBuf>,
}

impl Api {
    /// Default `socket`.
    pub const DEFAULT_SOCKET: &'static str = "/run/vrhost/api.sock";
}

/// `[dataplane]`: where the workers run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dataplane {
    /// Cores to pin one worker each to; distinct, each below the number of
    /// available cores. Default: the last core.
    pub workers: Vec<usize>,
    /// Where a run leaves what the next run of vrhost takes over: the list
    /// of TAP mirrors it made and the FPM routes of each router
    /// (`docs/operations.md`, "Restart"). One per vrhost instance; used only
    /// when a router has `[router.control]`. Default
    /// [`Dataplane::DEFAULT_RUNTIME_DIR`].
    pub runtime_dir: PathBuf,
    /// How long the TAP mirrors keep their carrier up after vrhost stops or
    /// dies, waiting for the next run to take them over; zero turns the
    /// keeper off. Default [`Dataplane::DEFAULT_TAP_HOLD`].
    pub tap_hold: std::time::Duration,
}

impl Dataplane {
    /// `runtime_dir` when the config has none.
    pub const DEFAULT_RUNTIME_DIR: &'static str = "/run/vrhost";
    /// `tap_hold` when the config has none: long enough for a restart by
    /// hand or by a supervisor, short enough that a router that stays down
    /// shows the tenants a link down soon after.
    pub const DEFAULT_TAP_HOLD: std::time::Duration = std::time::Duration::from_secs(30);
    /// The longest `tap_hold` (an hour).
    pub const MAX_TAP_HOLD_S: i64 = 3600;

    /// The defaults, with workers on `workers`.
    pub fn on(workers: Vec<usize>) -> Dataplane {
        Dataplane {
            workers,
            runtime_dir: PathBuf::from(Self::DEFAULT_RUNTIME_DIR),
            tap_hold: Self::DEFAULT_TAP_HOLD,
        }
    }
}

/// A port's packet I/O driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Driver {
    /// Replays a pcap file without end; transmit counts and discards.
    Memory,
    /// Reads a pcap file on receive, writes one on transmit.
    Pcap,
    /// Linux `AF_PACKET` with `TPACKET_V2` rings.
    AfPacket,
    /// Linux `AF_XDP` sockets, kernel bypass.
    AfXdp,
    /// A Linux TAP device.
    Tap,
    /// The vhost-user backend of a VM's virtio-net device (QEMU
    /// `-netdev vhost-user`).
    VhostUser,
}

impl Driver {
    /// Every driver, in the order the docs list them.
    pub const ALL: [Driver; 6] = [
        Driver::Memory,
        Driver::Pcap,
        Driver::AfPacket,
        Driver::AfXdp,
        Driver::Tap,
        Driver::VhostUser,
    ];

    /// The name used in the config file, e.g. `af_xdp`.
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Memory => "memory",
            Driver::Pcap => "pcap",
            Driver::AfPacket => "af_packet",
            Driver::AfXdp => "af_xdp",
            Driver::Tap => "tap",
            Driver::VhostUser => "vhost_user",
        }
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Driver {
    type Err = String;

    /// Parses a config-file driver name, e.g. `pcap`.
    fn from_str(s: &str) -> Result<Self, String> {
        Driver::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| {
                format!("unknown driver {s:?}; expected memory, pcap, af_packet, af_xdp, tap or vhost_user")
            })
    }
}

/// `[[port]]`: a packet I/O endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// Unique name.
    pub name: String,
    /// Packet I/O driver.
    pub driver: Driver,
    /// File to read (pcap, optional) or replay (memory, required), resolved
    /// against the config's directory. Only memory and pcap ports have one.
    pub rx: Option<PathBuf>,
    /// File to write (pcap, optional), resolved against the config's
    /// directory. Only pcap ports have one.
    pub tx: Option<PathBuf>,
    /// Linux interface name: required for af_packet and af_xdp, optional for
    /// tap (the device to create or attach to), absent otherwise.
    pub interface: Option<String>,
    /// tap: the network namespace (a name under `/run/netns`) the TAP
    /// device is created in, or attached to; `None`: vrhost's own.
    pub netns: Option<String>,
    /// vhost_user: the Unix socket the VM's QEMU connects to, resolved
    /// against the config's directory; absent otherwise.
    pub socket: Option<PathBuf>,
    /// Unicast MAC. Always present for memory and pcap; `None` means "use the
    /// Linux interface's MAC".
    pub mac: Option<[u8; 6]>,
    /// IP MTU in bytes (the largest IP packet, not counting the Ethernet
    /// header), 68..=9000. Default 1500.
    pub mtu: u16,
    /// Number of queues, 1..=64. Default 1.
    pub queues: u16,
    /// af_packet: the kernel steers the control protocols' frames (BFD,
    /// BGP, OSPF, ARP, neighbor discovery) to a queue of their own, read
    /// first and even while the port's VRs are over their share, so a flood
    /// that fills the receive ring does not take them with it. Default
    /// true; false for every other driver.
    pub control_queue: bool,
    /// af_packet: the host's own network stack also receives the port's
    /// frames, as it does without vrhost. Default false: a tc ingress
    /// program drops them after vrhost's sockets took them, so the
    /// namespace's kernel neither forwards them a second time nor answers
    /// them with ICMP errors. Always false for other drivers.
    pub host_stack: bool,
    /// af_packet on a virtual interface (veth): receive packet steering
    /// sends the kernel's receive work for its frames to the cores that run
    /// no worker, so a flow's frames meet in one backlog, in order, and the
    /// workers' cores stay the workers'. Left alone where the interface's
    /// queues already steer (an operator's setting), on a NIC's interface,
    /// and where every core runs a worker. Default true; always false for
    /// other drivers.
    pub rps: bool,
}

/// `[[router]]`: one virtual router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Router {
    /// Unique name.
    pub name: String,
    /// Attachments to ports.
    pub interfaces: Vec<Interface>,
    /// Static routes: the inline `[[router.route]]` ones in file order, then
    /// those of `routes_file` in line order. No prefix appears twice.
    pub routes: Vec<Route>,
    /// Static ARP / ND entries.
    pub neighbors: Vec<Neighbor>,
    /// Named rule lists (`[[router.filter]]`), in file order; names unique.
    pub filters: Vec<FilterSpec>,
    /// Control-plane binding, if any.
    pub control: Option<ControlPlane>,
    /// Per-router limits, defaults filled in.
    pub limits: Limits,
    /// SHA-256 of the router's own API token (64 lowercase hex digits).
    pub api_token_sha256: Option<String>,
}

/// `[[router.interface]]`: a router's attachment to a port, or to one VLAN
/// of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Name, unique within the router; at most 15 characters, since it is
    /// also the name of the interface's TAP mirror.
    pub name: String,
    /// Index into [`Config::ports`].
    pub port: usize,
    /// 802.1Q VLAN ID, 1..=4094; `None` for untagged. No two interfaces
    /// share a (port, VLAN), or with QinQ a (port, VLAN, inner VLAN).
    pub vlan: Option<u16>,
    /// QinQ: the inner VLAN ID, 1..=4094, under `vlan`.
    pub inner_vlan: Option<u16>,
    /// The outer tag's TPID (0x8100 by default, or 0x88a8).
    pub tpid: Tpid,
    /// The interface's own `mac`, else its port's; `None` only when the port
    /// uses its Linux interface's MAC.
    pub mac: Option<[u8; 6]>,
    /// IP MTU: the interface's own `mtu` (at most the port's), else the
    /// port's. At least 1280 if the interface has an IPv6 address.
    pub mtu: u16,
    /// Addresses with their subnets, in file order.
    pub addresses: Vec<IfAddr>,
    /// Reverse-path check of what arrives here (RFC 3704); `off` by default.
    pub urpf: Urpf,
    /// The router's rule lists applied here (`filter_in`, `filter_out`);
    /// each names one of [`Router::filters`].
    pub filters: IfaceFilters,
}

/// A static route.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    /// Destination.
    pub prefix: IpPrefix,
    /// What to do with matching packets.
    pub target: RouteTarget,
}

impl fmt::Display for Route {
    /// One routes-file line: `PREFIX VIA`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.prefix, self.target)
    }
}

/// `[[router.neighbor]]`: a static ARP (IPv4) or ND (IPv6) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Neighbor {
    /// On a subnet of one of the router's interfaces.
    pub address: IpAddr,
    /// Unicast.
    pub mac: [u8; 6],
}

/// `[router.control]`: the router's control plane lives in a network
/// namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlane {
    /// Namespace name (a file in `/run/netns`); no two routers share one.
    pub netns: String,
    /// FPM listener feeding this router's FIB.
    pub fpm: Option<std::net::SocketAddr>,
    /// Where the FPM listener is bound: inside the namespace (the default,
    /// so only the tenant's own processes reach it), or in vrhost's own
    /// namespace (a control plane in a VM; then `fpm_peers` is required and
    /// no two routers share an address).
    pub fpm_in: FpmIn,
    /// The only peer addresses whose FPM connections are accepted; empty
    /// accepts any peer that can reach the listener.
    pub fpm_peers: Vec<std::net::IpAddr>,
}

/// Where a router's FPM listener is bound (`[router.control] fpm_in`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FpmIn {
    /// Inside the router's control namespace.
    #[default]
    Netns,
    /// In vrhost's own network namespace.
    Host,
}

/// `[router.limits]`: per-router limits that keep one tenant from hurting
/// another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// ICMP errors per second the router may send; the burst equals the
    /// rate. 0 sends none.
    pub icmp_rate: u32,
    /// Packets that may wait for the control plane.
    pub punt_queue: u32,
    /// Packets held per next hop while its address is being resolved.
    pub arp_hold: u32,
    /// How long a resolved neighbour stays reachable, in milliseconds.
    pub neighbor_timeout_ms: u64,
    /// Neighbour entries the router may hold (in each worker's table).
    pub max_neighbors: u32,
    /// Routes per address family the router's FIB may hold, connected and
    /// local routes included.
    pub max_routes: u32,
    /// Multipath groups (distinct sets of gateways and weights) the
    /// router's routes may name at once.
    pub max_nexthop_groups: u32,
    /// Interface addresses the router may hold, all interfaces and both
    /// families together (link-local ones included); its static
    /// neighbours count against `max_neighbors`.
    pub max_addresses: u32,
    /// Share of a saturated worker's cycles, relative to the other routers'.
    pub weight: u32,
    /// Packets per second the router may receive; 0: no ceiling.
    pub pps: u64,
    /// Bits per second the router may receive; 0: no ceiling.
    pub bps: u64,
    /// Packets per second the router may punt to its control plane.
    pub punt_rate: u32,
    /// Packets per second of its control protocols (BFD, BGP, OSPF, ARP,
    /// neighbor discovery) that pass the router's fair share, rate ceiling
    /// and punt rate when its other traffic exceeds them.
    pub protocol_rate: u32,
}

impl Limits {
    /// Default `icmp_rate`: RFC 1812 §4.3.2.8 asks routers to rate-limit
    /// ICMP errors; 100/s serves traceroute and path MTU discovery while a
    /// flood of bad packets cannot turn the router into an ICMP amplifier.
    pub const DEFAULT_ICMP_RATE: u32 = 100;
    /// Default `punt_queue`: one full receive burst (256 frames) fits.
    pub const DEFAULT_PUNT_QUEUE: u32 = 256;
    /// Default `arp_hold`: RFC 1122 §2.3.2.2 asks to keep at least the
    /// latest packet for an unresolved address; a few more cover a TCP
    /// handshake's first burst, and holding per next hop means one tenant
    /// cannot fill a shared queue.
    pub const DEFAULT_ARP_HOLD: u32 = 4;
    /// Default `neighbor_timeout_ms`: 30 s, RFC 4861 §10 `REACHABLE_TIME`.
    pub const DEFAULT_NEIGHBOR_TIMEOUT_MS: u64 = 30_000;
    /// Default `max_neighbors`: a /20 of hosts on the router's LANs.
    pub const DEFAULT_MAX_NEIGHBORS: u32 = 4096;
    /// Default `max_routes`: a full IPv4 Internet table (about 1M) twice over.
    pub const DEFAULT_MAX_ROUTES: u32 = 2_000_000;
    /// Default `max_nexthop_groups`: a full table over a few dozen
    /// upstreams needs far fewer; each group costs 2 KiB of buckets.
    pub const DEFAULT_MAX_NEXTHOP_GROUPS: u32 = 1024;
    /// Default `max_addresses`: far more than a router's interfaces need,
    /// few enough that address churn stays cheap.
    pub const DEFAULT_MAX_ADDRESSES: u32 = 256;
    /// Default `weight`: every router the same share.
    pub const DEFAULT_WEIGHT: u32 = 1;
    /// Default `punt_rate`: ample for routing protocols (a BGP full-table
    /// transfer is a few thousand segments a second), small enough that a
    /// punt flood cannot starve the router's own control plane of CPU.
    pub const DEFAULT_PUNT_RATE: u32 = 10_000;
    /// Default `protocol_rate`: BFD at 100 ms and BGP keepalives for a few
    /// hundred sessions, and a table transfer at a trickle, while a flood
    /// dressed up as BGP gains little.
    pub const DEFAULT_PROTOCOL_RATE: u32 = 2_000;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            icmp_rate: Self::DEFAULT_ICMP_RATE,
            punt_queue: Self::DEFAULT_PUNT_QUEUE,
            arp_hold: Self::DEFAULT_ARP_HOLD,
            neighbor_timeout_ms: Self::DEFAULT_NEIGHBOR_TIMEOUT_MS,
            max_neighbors: Self::DEFAULT_MAX_NEIGHBORS,
            max_routes: Self::DEFAULT_MAX_ROUTES,
            max_nexthop_groups: Self::DEFAULT_MAX_NEXTHOP_GROUPS,
            max_addresses: Self::DEFAULT_MAX_ADDRESSES,
            weight: Self::DEFAULT_WEIGHT,
            pps: 0,
            bps: 0,
            punt_rate: Self::DEFAULT_PUNT_RATE,
            protocol_rate: Self::DEFAULT_PROTOCOL_RATE,
        }
    }
}

/// The number of cores the process may use, at least 1.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The cores this process may run on, ascending: its CPU affinity, which a
/// cgroup cpuset or `taskset` narrows (`Cpus_allowed_list` of
/// `/proc/self/status`). Falls back to `0..available_cores()`.
pub fn allowed_cores() -> Vec<usize> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|l| parse_cpu_list(l.trim()))
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| (0..available_cores()).collect())
}

/// A kernel CPU list (`0-3,8,10-11`) as ascending core numbers; `None` if
/// it is not one.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

impl Config {
    /// The port an interface is attached to.
    pub fn port_of(&self, interface: &Interface) -> Option<&Port> {
        self.ports.get(interface.port)
    }

    /// The router with this name.
    pub fn router(&self, name: &str) -> Option<&Router> {
        self.routers.iter().find(|r| r.name == name)
    }
}
