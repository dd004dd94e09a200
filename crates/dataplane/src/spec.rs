//! The plain-data description an [`Engine`](crate::Engine) is built from.
//!
//! The control crate turns a validated config file into an [`EngineSpec`];
//! tests build one directly.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use vrhost_fib::{Prefix4, Prefix6};
use vrhost_wire::ethernet::EthernetAddress;

/// Everything the engine needs at start.
#[derive(Clone, Debug, Default)]
pub struct EngineSpec {
    /// Ports, indexed by position.
    pub ports: Vec<PortSpec>,
    /// Virtual routers, indexed by position.
    pub routers: Vec<RouterSpec>,
}

/// A packet I/O endpoint as the pipeline sees it.
#[derive(Clone, Debug)]
pub struct PortSpec {
    /// Port name, for counters.
    pub name: String,
    /// Largest IP packet the port carries.
    pub mtu: u16,
}

/// One virtual router.
#[derive(Clone, Debug, Default)]
pub struct RouterSpec {
    /// VR name.
    pub name: String,
    /// Interfaces, in order.
    pub interfaces: Vec<InterfaceSpec>,
    /// Static IPv4 routes.
    pub routes4: Vec<(Prefix4, RouteTarget)>,
    /// Static IPv6 routes.
    pub routes6: Vec<(Prefix6, RouteTarget)>,
    /// Static neighbor entries: address and MAC.
    pub neighbors: Vec<(IpAddr, EthernetAddress)>,
    /// Per-VR limits.
    pub limits: Limits,
    /// Named rule lists its interfaces' `filter_in` and `filter_out` name.
    pub filters: Vec<crate::filter::FilterSpec>,
}

/// A VR's index in the tables: what [`TableWriter::add_vr`](crate::TableWriter::add_vr)
/// returns and [`Shared::vr_index`](crate::tables::Shared::vr_index) finds by name.
/// Indices are never reused, so one names the same VR for the engine's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VrId(usize);

impl VrId {
    /// The VR at `index` (VRs are numbered in the order they were added,
    /// the config's first).
    pub const fn new(index: usize) -> VrId {
        VrId(index)
    }

    /// Its position in per-VR tables and counters.
    pub const fn index(self) -> usize {
        self.0
    }
}

impl core::fmt::Display for VrId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "VR #{}", self.0)
    }
}

macro_rules! index_newtype {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u16);

        impl $name {
            #[doc = concat!("The ", $what, " at `index`.")]
            pub const fn new(index: u16) -> $name {
                $name(index)
            }

            #[doc = concat!("The ", $what, " at `index`; an index past `u16::MAX` names none")]
            /// (it becomes `u16::MAX`, which no table holds).
            pub fn from_index(index: usize) -> $name {
                $name(u16::try_from(index).unwrap_or(u16::MAX))
            }

            /// Its position in per-index tables and counters.
            pub const fn index(self) -> usize {
                self.0 as usize
            }

            /// The index as the 16 bits a buffer's metadata holds.
            pub const fn get(self) -> u16 {
                self.0
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{} #{}", $what, self.0)
            }
        }
    };
}

index_newtype!(
    /// A port's index: the config's order of ports.
    PortId,
    "port"
);

index_newtype!(
    /// An interface's global index: VR by VR, as configured, then as added;
    /// never reused.
    IfaceId,
    "interface"
);

/// Where a static route sends packets: the one route-target type of the
/// config, the control-plane sync and the table writer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RouteTarget {
    /// Forward to this gateway, which an interface subnet must cover (same
    /// family as the prefix).
    Via(IpAddr),
    /// Equal- or weighted-cost multipath: each flow goes to one of these
    /// gateways, chosen by its hash ([`Paths`]).
    Multipath(Paths),
    /// Drop silently.
    Blackhole,
    /// Drop and answer ICMP Destination Unreachable.
    Unreachable,
}

impl RouteTarget {
    /// The gateways a packet may leave through, with their weights (one, of
    /// weight 1, for [`RouteTarget::Via`]; none for the drops). Allocates
    /// nothing: a routes file of a million lines checks each line's gateways.
    pub fn paths(&self) -> impl Iterator<Item = Path> + '_ {
        let (one, many) = match self {
            RouteTarget::Via(a) => (Some(Path { via: *a, weight: 1 }), &[][..]),
            RouteTarget::Multipath(p) => (None, p.as_slice()),
            RouteTarget::Blackhole | RouteTarget::Unreachable => (None, &[][..]),
        };
        one.into_iter().chain(many.iter().copied())
    }
}

impl core::fmt::Display for RouteTarget {
    /// The routes-file spelling: an address, several (`ADDR` or
    /// `ADDR*WEIGHT`, space-separated), `blackhole` or `unreachable`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteTarget::Via(a) => write!(f, "{a}"),
            RouteTarget::Multipath(p) => write!(f, "{p}"),
            RouteTarget::Blackhole => f.write_str("blackhole"),
            RouteTarget::Unreachable => f.write_str("unreachable"),
        }
    }
}

/// One gateway of a multipath route and its share of the flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Path {
    /// The gateway.
    pub via: IpAddr,
    /// Relative share, at least 1: a path of weight 3 gets three times the
    /// flows of one of weight 1.
    pub weight: u16,
}

/// The gateways of a multipath route: 2 to [`Paths::MAX`] of one family,
/// each once, sorted by address. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Paths(std::sync::Arc<[Path]>);

/// Why a list of gateways is not a route target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathsError {
    /// No gateway at all.
    #[error("no next hop")]
    Empty,
    /// More than [`Paths::MAX`].
    #[error("{0} next hops; at most {max}", max = Paths::MAX)]
    TooMany(usize),
    /// One gateway twice.
    #[error("next hop {0} given twice")]
    Duplicate(IpAddr),
    /// A weight of 0.
    #[error("next hop {0} has weight 0; weights are 1-65535")]
    ZeroWeight(IpAddr),
    /// IPv4 and IPv6 gateways mixed.
    #[error("next hops {0} and {1} are of different families")]
    MixedFamily(IpAddr, IpAddr),
}

impl Paths {
    /// The most gateways one route may have (FRR's default `MULTIPATH_NUM`).
    pub const MAX: usize = 64;

    /// The target for `paths`: [`RouteTarget::Via`] for one gateway (its
    /// weight does not matter), [`RouteTarget::Multipath`] for more.
    /// Refuses an empty list, more than [`Paths::MAX`], a gateway given
    /// twice, a weight of 0 and mixed families.
    pub fn target(paths: impl IntoIterator<Item = Path>) -> Result<RouteTarget, PathsError> {
        let mut v: Vec<Path> = paths.into_iter().collect();
        if let Some(p) = v.iter().find(|p| p.weight == 0) {
            return Err(PathsError::ZeroWeight(p.via));
        }
        if let Some(w) = v
            .windows(2)
            .find(|w| w[0].via.is_ipv4() != w[1].via.is_ipv4())
        {
            return Err(PathsError::MixedFamily(w[0].via, w[1].via));
        }
        v.sort_unstable();
        if let Some(w) = v.windows(2).find(|w| w[0].via == w[1].via) {
            return Err(PathsError::Duplicate(w[0].via));
        }
        Self::of_sorted(v)
    }

    /// [`Paths::target`] for what a control plane sends: a gateway given
    /// twice counts once with the weights added, a weight of 0 counts as 1,
    /// and past [`Paths::MAX`] the rest are left out (returned as the
    /// count dropped, for the caller to count and log).
    pub fn merged(
        paths: impl IntoIterator<Item = Path>,
    ) -> Result<(RouteTarget, usize), PathsError> {
        let mut v: Vec<Path> = paths
            .into_iter()
            .map(|p| Path {
                weight: p.weight.max(1),
                ..p
            })
            .collect();
        v.sort_unstable();
        v.dedup_by(|later, kept| {
            let same = later.via == kept.via;
            if same {
                kept.weight = kept.weight.saturating_add(later.weight);
            }
            same
        });
        if let Some(w) = v
            .windows(2)
            .find(|w| w[0].via.is_ipv4() != w[1].via.is_ipv4())
        {
            return Err(PathsError::MixedFamily(w[0].via, w[1].via));
        }
        let dropped = v.len().saturating_sub(Self::MAX);
        v.truncate(Self::MAX);
        Ok((Self::of_sorted(v)?, dropped))
    }

    fn of_sorted(v: Vec<Path>) -> Result<RouteTarget, PathsError> {
        match v.len() {
            0 => Err(PathsError::Empty),
            1 => Ok(RouteTarget::Via(v[0].via)),
            n if n > Self::MAX => Err(PathsError::TooMany(n)),
            _ => Ok(RouteTarget::Multipath(Paths(v.into()))),
        }
    }

    /// The gateways, sorted by address.
    pub fn as_slice(&self) -> &[Path] {
        &self.0
    }

    /// Whether every weight is 1.
    pub fn equal_cost(&self) -> bool {
        self.0.iter().all(|p| p.weight == 1)
    }
}

impl core::fmt::Display for Paths {
    /// Space-separated, `ADDR` for weight 1 and `ADDR*WEIGHT` otherwise.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}", p.via)?;
            if p.weight != 1 {
                write!(f, "*{}", p.weight)?;
            }
        }
        Ok(())
    }
}

/// A VR's attachment to a port, whole or one VLAN of it.
#[derive(Clone, Debug)]
pub struct InterfaceSpec {
    /// Interface name.
    pub name: String,
    /// Index into [`EngineSpec::ports`].
    pub port: u16,
    /// 802.1Q VLAN ID, or untagged; the outer (service) tag with
    /// `inner_vlan`.
    pub vlan: Option<u16>,
    /// QinQ: the inner (customer) VLAN ID under `vlan` (802.1ad).
    pub inner_vlan: Option<u16>,
    /// The outer tag's TPID.
    pub tpid: Tpid,
    /// The interface's MAC.
    pub mac: EthernetAddress,
    /// IP MTU.
    pub mtu: u16,
    /// IPv4 addresses with prefix lengths.
    pub addrs4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses with prefix lengths. A link-local address derived
    /// from the MAC (RFC 4291 §2.5.1) is added when any is present.
    pub addrs6: Vec<(Ipv6Addr, u8)>,
    /// Reverse-path check of the sources of what arrives here.
    pub urpf: Urpf,
    /// The VR's rule lists applied here, by name.
    pub filters: IfaceFilters,
}

/// The rule lists of an interface, by name: one for what enters it
/// (every IP packet, forwarded or for the router) and one for what is
/// forwarded out of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IfaceFilters {
    /// `filter_in`.
    pub input: Option<String>,
    /// `filter_out`.
    pub output: Option<String>,
}

/// The TPID of an interface's outer VLAN tag: 0x8100 (802.1Q, the
/// default) or 0x88a8 (802.1ad service tag, usual for QinQ). An inner tag
/// is always 0x8100.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tpid {
    /// 0x8100.
    #[default]
    Dot1q,
    /// 0x88a8.
    Dot1ad,
}

impl Tpid {
    /// The EtherType value.
    pub fn value(self) -> u16 {
        match self {
            Tpid::Dot1q => 0x8100,
            Tpid::Dot1ad => 0x88a8,
        }
    }

    /// The TPID of `value`, if it is one.
    pub fn of(value: u16) -> Option<Tpid> {
        match value {
            0x8100 => Some(Tpid::Dot1q),
            0x88a8 => Some(Tpid::Dot1ad),
            _ => None,
        }
    }
}

/// Unicast reverse-path forwarding on an interface (RFC 3704): whether the
/// source of a packet arriving there must be reachable, and back through
/// that interface. Either family; a source in fe80::/10 or :: (link-local
/// and address-resolution traffic, never forwarded) is not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Urpf {
    /// No check (the default).
    #[default]
    Off,
    /// The source has a route that is not a blackhole or unreachable one,
    /// nor one of the VR's own or broadcast addresses (RFC 3704 §2.4).
    Loose,
    /// The source's route leaves by the interface the packet came in on
    /// (RFC 3704 §2.2).
    Strict,
}

impl Urpf {
    /// The config's word for it: `off`, `loose` or `strict`.
    pub fn name(self) -> &'static str {
        match self {
            Urpf::Off => "off",
            Urpf::Loose => "loose",
            Urpf::Strict => "strict",
        }
    }
}

impl core::str::FromStr for Urpf {
    type Err = String;

    fn from_str(s: &str) -> Result<Urpf, String> {
        match s {
            "off" => Ok(Urpf::Off),
            "loose" => Ok(Urpf::Loose),
            "strict" => Ok(Urpf::Strict),
            _ => Err(format!("`{s}` is not one of off, loose, strict")),
        }
    }
}

/// Per-VR limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// ICMP errors per second (token bucket; burst equal to the rate).
    pub icmp_rate: u32,
    /// Punt queue length in packets.
    pub punt_queue: u32,
    /// Packets held per unresolved neighbor (0 drops them; at most [`crate::neighbor::HOLD_MAX`]).
    pub arp_hold: u32,
    /// How long a confirmed neighbor stays reachable, in milliseconds.
    pub neighbor_timeout_ms: u64,
    /// Most neighbor entries the VR may have (per worker: each worker keeps its own table).
    pub max_neighbors: u32,
    /// Share of a saturated worker's cycles, relative to the other VRs' weights.
    pub weight: u32,
    /// Packets per second the VR may receive; 0 means no ceiling.
    pub pps: u64,
    /// Bits per second the VR may receive (frame bytes × 8); 0 means no ceiling.
    pub bps: u64,
    /// Most routes per family the VR's FIB may hold, connected and local ones included.
    pub max_routes: u32,
    /// Most multipath groups (distinct sets of gateways with their weights)
    /// the VR's routes may name at once; each costs a 2 KiB bucket table.
    pub max_nexthop_groups: u32,
    /// Most interface addresses the VR may hold over all its interfaces,
    /// both families, link-local ones included.
    pub max_addresses: u32,
    /// Packets per second the VR may punt to its control plane.
    pub punt_rate: u32,
    /// Packets per second of its control protocols that pass the fair
    /// share, the rate ceiling and the punt rate beyond them
    /// (docs/isolation.md, "The protected share"); 0: none.
    pub protocol_rate: u32,
    /// The VR has a control plane attached (a namespace with TAP mirrors):
    /// the ARP and NDP messages the data plane handles for its own
    /// addresses are also copied to the control plane, so the tenant's
    /// kernel learns its neighbors. It lives here, beside the other per-VR
    /// policy, because `Limits` is what every worker's VR carries.
    pub control_plane: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            icmp_rate: 100,
            punt_queue: 256,
            arp_hold: 4,
            neighbor_timeout_ms: 30_000,
            max_neighbors: 4096,
            weight: 1,
            pps: 0,
            bps: 0,
            max_routes: 2_000_000,
            max_nexthop_groups: 1024,
            max_addresses: 256,
            punt_rate: 10_000,
            protocol_rate: 2_000,
            control_plane: false,
        }
    }
}

/// For unit tests: one VR, "red", with one interface "red0" (MAC
/// 02:00:00:00:00:01) on one port "p0", holding these addresses.
#[cfg(test)]
pub(crate) fn one_vr(
    addrs4: Vec<(Ipv4Addr, u8)>,
    addrs6: Vec<(Ipv6Addr, u8)>,
    limits: Limits,
) -> EngineSpec {
    EngineSpec {
        ports: vec![PortSpec {
            name: "p0".into(),
            mtu: 1500,
        }],
        routers: vec![RouterSpec {
            name: "red".into(),
            interfaces: vec![InterfaceSpec {
                name: "red0".into(),
                port: 0,
                vlan: None,
                inner_vlan: None,
                tpid: Default::default(),
                mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                mtu: 1500,
                addrs4,
                addrs6,
                urpf: Default::default(),
                filters: Default::default(),
            }],
            limits,
            ..Default::default()
        }],
    }
}
