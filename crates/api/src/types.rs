//! Plain data exchanged over the management API.
//!
//! Nothing here knows about the data plane: the types are what travels as
//! JSON, and the [`crate::Backend`] implementor converts them to and from its
//! own tables. Request types reject unknown keys, so a typo answers 400 with
//! the key's name instead of being silently ignored.
//!
//! A VR description ([`VrSpec`]) uses the same keys as a `[[router]]` table of
//! the config file (`interface`, `route`, `neighbor`, `limits` are accepted as
//! aliases of the plural JSON names), so `vrhost ctl vr create --file` reads a
//! config excerpt unchanged.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod trace;
pub use trace::{
    PacketTrace, TraceDrop, TraceHop, TraceIp, TraceOutcome, TraceQuery, TraceReport, TraceSent,
    TraceStep, TRACE_COUNT_DEFAULT, TRACE_COUNT_MAX, TRACE_SECONDS_DEFAULT, TRACE_SECONDS_MAX,
};

/// Implements `Serialize`, `Deserialize` and `JsonSchema` as a string through
/// `Display` and `FromStr`, so each text-valued type states its format once.
macro_rules! string_serde {
    ($ty:ty, $name:literal, $doc:literal, $example:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = Cow::<'de, str>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({ "type": "string", "description": $doc, "examples": [$example] })
            }
        }
    };
}

fn max_len(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Splits `ADDR/LEN` and checks the length against the family.
fn parse_addr_len(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = s
        .split_once('/')
        .ok_or_else(|| format!("'{s}' is not ADDRESS/LENGTH"))?;
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("'{addr}' is not an IPv4 or IPv6 address"))?;
    let len: u8 = len
        .parse()
        .map_err(|_| format!("'{len}' is not a prefix length"))?;
    if len > max_len(addr) {
        return Err(format!(
            "prefix length {len} is longer than {} for {addr}",
            max_len(addr)
        ));
    }
    Ok((addr, len))
}

/// The address with every bit past `len` cleared.
fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// An IP prefix whose host bits are zero: `10.0.0.0/8`, `2001:db8::/32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// A prefix; fails if `len` is too long for the family or host bits are set.
    pub fn new(addr: IpAddr, len: u8) -> Result<Prefix, String> {
        if len > max_len(addr) {
            return Err(format!("prefix length {len} is too long for {addr}"));
        }
        if mask(addr, len) != addr {
            return Err(format!(
                "{addr}/{len} has host bits set (did you mean {}/{len}?)",
                mask(addr, len)
            ));
        }
        Ok(Prefix { addr, len })
    }

    /// Network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// True for IPv4.
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }
}

impl FromStr for Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Prefix, String> {
        let (addr, len) = parse_addr_len(s)?;
        Prefix::new(addr, len)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

string_serde!(
    Prefix,
    "Prefix",
    "An IPv4 or IPv6 prefix, host bits zero",
    "10.0.0.0/8"
);

/// An interface address with its subnet length; host bits are the address:
/// `10.0.0.1/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IfaceAddr {
    addr: IpAddr,
    len: u8,
}

impl IfaceAddr {
    /// An interface address; fails if `len` is too long for the family.
    pub fn new(addr: IpAddr, len: u8) -> Result<IfaceAddr, String> {
        parse_addr_len(&format!("{addr}/{len}")).map(|(addr, len)| IfaceAddr { addr, len })
    }

    /// The address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Subnet length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// The attached subnet.
    pub fn subnet(&self) -> Prefix {
        Prefix {
            addr: mask(self.addr, self.len),
            len: self.len,
        }
    }
}

impl FromStr for IfaceAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<IfaceAddr, String> {
        parse_addr_len(s).map(|(addr, len)| IfaceAddr { addr, len })
    }
}

impl fmt::Display for IfaceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

string_serde!(
    IfaceAddr,
    "InterfaceAddress",
    "An interface address and its subnet length",
    "10.0.0.1/24"
);

/// An Ethernet MAC address, `02:00:00:00:00:01`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl FromStr for MacAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<MacAddr, String> {
        let bad = || format!("'{s}' is not a MAC address like 02:00:00:00:00:01");
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for byte in out.iter_mut() {
            let part = parts.next().ok_or_else(bad)?;
            if part.len() != 2 {
                return Err(bad());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(out))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

string_serde!(
    MacAddr,
    "MacAddress",
    "An Ethernet address",
    "02:00:00:00:00:01"
);

/// Where a route sends matching packets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RouteTarget {
    /// Forward to this gateway, which one of the VR's subnets must cover.
    Via(IpAddr),
    /// Multipath: each flow to one of 2-64 gateways of one family, each
    /// once, by the hash of the flow; shares by weight.
    Multipath(Vec<Gateway>),
    /// Drop silently.
    Blackhole,
    /// Drop and answer ICMP Destination Unreachable.
    Unreachable,
    /// An attached subnet of this interface (listed, never added through the API).
    Connected(String),
    /// One of the VR's own addresses (listed, never added through the API).
    Local,
}

/// One gateway of a multipath route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gateway {
    /// Its address, on one of the VR's subnets.
    pub via: IpAddr,
    /// Relative share of the flows, 1-65535.
    pub weight: u16,
}

/// A route's `via` on the wire: one address or a list.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
enum Vias {
    One(IpAddr),
    Many(Vec<IpAddr>),
}

/// One route. On the wire it has the config file's keys: `prefix` and exactly
/// one of `via`, `blackhole = true`, `unreachable = true`; listed routes may
/// instead carry `interface` (connected) or `local = true`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RouteWire", into = "RouteWire")]
pub struct Route {
    /// Destination prefix.
    pub prefix: Prefix,
    /// Where it goes.
    pub target: RouteTarget,
}

impl Route {
    /// A route through a gateway.
    pub fn via(prefix: Prefix, gateway: IpAddr) -> Route {
        Route {
            prefix,
            target: RouteTarget::Via(gateway),
        }
    }

    /// True for the kinds a client may add (via, blackhole, unreachable).
    pub fn is_addable(&self) -> bool {
        matches!(
            self.target,
            RouteTarget::Via(_)
                | RouteTarget::Multipath(_)
                | RouteTarget::Blackhole
                | RouteTarget::Unreachable
        )
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The wire form of [`Route`], key for key the config file's `[[router.route]]`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Route")]
struct RouteWire {
    /// Destination prefix.
    prefix: Prefix,
    /// Next-hop address, on one of the VR's subnets; a list of 2-64 for a
    /// multipath route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    via: Option<Vias>,
    /// Multipath only: each `via`'s share of the flows (1-65535; all 1 by
    /// default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weights: Option<Vec<u16>>,
    /// Drop silently.
    #[serde(default, skip_serializing_if = "is_false")]
    blackhole: bool,
    /// Drop and answer ICMP Destination Unreachable.
    #[serde(default, skip_serializing_if = "is_false")]
    unreachable: bool,
    /// Listed only: a connected route's interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interface: Option<String>,
    /// Listed only: one of the VR's own addresses.
    #[serde(default, skip_serializing_if = "is_false")]
    local: bool,
}

impl TryFrom<RouteWire> for Route {
    type Error = String;
    fn try_from(w: RouteWire) -> Result<Route, String> {
        if w.weights.is_some() && !matches!(w.via, Some(Vias::Many(_))) {
            return Err(format!(
                "route {}: weights go with a list of next hops, via = [...]",
                w.prefix
            ));
        }
        let target = match (w.via, w.blackhole, w.unreachable, w.interface, w.local) {
            (Some(Vias::One(gw)), false, false, None, false) => RouteTarget::Via(gw),
            (Some(Vias::Many(gws)), false, false, None, false) => {
                multipath(&w.prefix, gws, w.weights)?
            }
            (None, true, false, None, false) => RouteTarget::Blackhole,
            (None, false, true, None, false) => RouteTarget::Unreachable,
            (None, false, false, Some(i), false) => RouteTarget::Connected(i),
            (None, false, false, None, true) => RouteTarget::Local,
            _ => {
                return Err(format!(
                    "route {} needs exactly one of via, blackhole = true, unreachable = true",
                    w.prefix
                ))
            }
        };
        let gateways = match &target {
            RouteTarget::Via(gw) => vec![*gw],
            RouteTarget::Multipath(g) => g.iter().map(|g| g.via).collect(),
            _ => Vec::new(),
        };
        if let Some(gw) = gateways
            .iter()
            .find(|gw| gw.is_ipv4() != w.prefix.is_ipv4())
        {
            return Err(format!(
                "via {gw} is not of the same family as {}",
                w.prefix
            ));
        }
        Ok(Route {
            prefix: w.prefix,
            target,
        })
    }
}

/// The target of `via = [...]` with optional `weights`.
fn multipath(
    prefix: &Prefix,
    gws: Vec<IpAddr>,
    weights: Option<Vec<u16>>,
) -> Result<RouteTarget, String> {
    let weights = weights.unwrap_or_else(|| vec![1; gws.len()]);
    if weights.len() != gws.len() {
        return Err(format!(
            "route {prefix}: {} weights for {} next hops; give one each",
            weights.len(),
            gws.len()
        ));
    }
    RouteTarget::gateways(
        gws.into_iter()
            .zip(weights)
            .map(|(via, weight)| Gateway { via, weight })
            .collect(),
    )
    .map_err(|e| format!("route {prefix}: {e}"))
}

impl RouteTarget {
    /// The target through `gateways`: one is a plain route ([`RouteTarget::Via`]);
    /// more must be distinct, at most [`MAX_PATHS`], weights 1-65535.
    pub fn gateways(mut g: Vec<Gateway>) -> Result<RouteTarget, String> {
        if let Some(z) = g.iter().find(|g| g.weight == 0) {
            return Err(format!(
                "next hop {} has weight 0; weights are 1-65535",
                z.via
            ));
        }
        g.sort_unstable();
        if let Some(w) = g.windows(2).find(|w| w[0].via == w[1].via) {
            return Err(format!("next hop {} given twice", w[0].via));
        }
        match g.len() {
            0 => Err("no next hop".into()),
            1 => Ok(RouteTarget::Via(g[0].via)),
            n if n > MAX_PATHS => Err(format!("{n} next hops; at most {MAX_PATHS}")),
            _ => Ok(RouteTarget::Multipath(g)),
        }
    }
}

/// The most gateways of one multipath route.
pub const MAX_PATHS: usize = 64;

impl From<Route> for RouteWire {
    fn from(r: Route) -> RouteWire {
        let mut w = RouteWire {
            prefix: r.prefix,
            via: None,
            weights: None,
            blackhole: false,
            unreachable: false,
            interface: None,
            local: false,
        };
        match r.target {
            RouteTarget::Via(gw) => w.via = Some(Vias::One(gw)),
            RouteTarget::Multipath(g) => {
                if g.iter().any(|g| g.weight != 1) {
                    w.weights = Some(g.iter().map(|g| g.weight).collect());
                }
                w.via = Some(Vias::Many(g.into_iter().map(|g| g.via).collect()));
            }
            RouteTarget::Blackhole => w.blackhole = true,
            RouteTarget::Unreachable => w.unreachable = true,
            RouteTarget::Connected(i) => w.interface = Some(i),
            RouteTarget::Local => w.local = true,
        }
        w
    }
}

impl JsonSchema for Route {
    fn schema_name() -> Cow<'static, str> {
        "Route".into()
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        RouteWire::json_schema(g)
    }
}

impl fmt::Display for RouteTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteTarget::Via(gw) => write!(f, "via {gw}"),
            RouteTarget::Multipath(g) => {
                f.write_str("via")?;
                for g in g {
                    write!(f, " {}", g.via)?;
                    if g.weight != 1 {
                        write!(f, "*{}", g.weight)?;
                    }
                }
                Ok(())
            }
            RouteTarget::Blackhole => f.write_str("blackhole"),
            RouteTarget::Unreachable => f.write_str("unreachable"),
            RouteTarget::Connected(i) => write!(f, "dev {i}"),
            RouteTarget::Local => f.write_str("local"),
        }
    }
}

/// A static ARP / ND entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Neighbor {
    /// The neighbour's IP address, on one of the VR's subnets.
    pub address: IpAddr,
    /// Its MAC address.
    pub mac: MacAddr,
    /// Listed only: the interface it was installed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
}

/// Per-VR policy: shares and limits. Every key is optional in a request; the
/// server fills them all in a [`VrInfo`]. Keys as in the config's `[router.limits]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VrPolicy {
    /// ICMP errors per second (token bucket; burst equal to the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_rate: Option<u64>,
    /// Punt queue length in packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub punt_queue: Option<u64>,
    /// Packets held per unresolved neighbour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arp_hold: Option<u64>,
    /// How long a confirmed neighbour stays reachable, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbor_timeout_ms: Option<u64>,
    /// Most neighbour entries the VR may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_neighbors: Option<u64>,
    /// Share of a saturated worker's cycles, relative to the other VRs' weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
    /// Packets per second the VR may receive; 0: no ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pps: Option<u64>,
    /// Bits per second the VR may receive; 0: no ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bps: Option<u64>,
    /// Most routes per family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_routes: Option<u64>,
    /// Most multipath groups (distinct sets of gateways and weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nexthop_groups: Option<u64>,
    /// Most interface addresses, all interfaces and both families.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_addresses: Option<u64>,
    /// Packets per second the VR may punt to its control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub punt_rate: Option<u64>,
    /// Packets per second of the VR's control protocols (BFD, BGP, OSPF,
    /// ARP, neighbor discovery) that pass its fair share, rate ceiling and
    /// punt rate when its other traffic exceeds them; 0: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_rate: Option<u64>,
}

/// A VR's control-plane namespace (`[router.control]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VrControl {
    /// Network namespace holding the VR's TAP mirrors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
}

/// A VR interface to create (`[[router.interface]]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterfaceSpec {
    /// Interface name.
    pub name: String,
    /// The port it attaches to.
    pub port: String,
    /// 802.1Q tag, 1..=4094; untagged when absent. The outer tag with
    /// `inner_vlan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// QinQ: the inner tag under `vlan`, 1..=4094.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner_vlan: Option<u16>,
    /// The outer tag's TPID: `0x8100` (when absent) or `0x88a8`.
    #[serde(default, skip_serializing_if = "VlanTpid::is_default")]
    pub vlan_tpid: VlanTpid,
    /// MAC address; default: the port's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddr>,
    /// IP MTU; default: the port's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u16>,
    /// Addresses with their subnet lengths.
    #[serde(default)]
    pub addresses: Vec<IfaceAddr>,
    /// Reverse-path check of what arrives (RFC 3704); `off` when absent.
    #[serde(default, skip_serializing_if = "UrpfMode::is_off")]
    pub urpf: UrpfMode,
    /// The VR's rule list applied to what enters (see `/filters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_in: Option<String>,
    /// The VR's rule list applied to what is forwarded out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_out: Option<String>,
}

/// The TPID of an interface's outer VLAN tag, as the config's `vlan_tpid`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum VlanTpid {
    /// 0x8100 (802.1Q).
    #[default]
    #[serde(rename = "0x8100")]
    Dot1q,
    /// 0x88a8 (802.1ad service tag).
    #[serde(rename = "0x88a8")]
    Dot1ad,
}

impl VlanTpid {
    /// Whether it is 0x8100 (the default, left out of answers).
    pub fn is_default(&self) -> bool {
        *self == VlanTpid::Dot1q
    }
}

impl FromStr for VlanTpid {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0x8100" => Ok(VlanTpid::Dot1q),
            "0x88a8" => Ok(VlanTpid::Dot1ad),
            _ => Err(format!("`{s}` is not a TPID: 0x8100 or 0x88a8")),
        }
    }
}

/// An interface's reverse-path check (RFC 3704), as the config's `urpf`
/// key: `off`, `loose` (the source has a usable route) or `strict` (the
/// source's route leaves by this interface).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UrpfMode {
    /// No check.
    #[default]
    Off,
    /// The source has a route that is not a blackhole or unreachable one.
    Loose,
    /// The source's route leaves by the interface the packet came in on.
    Strict,
}

impl UrpfMode {
    /// Whether it is `off` (the default, left out of answers).
    pub fn is_off(&self) -> bool {
        *self == UrpfMode::Off
    }
}

impl FromStr for UrpfMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(UrpfMode::Off),
            "loose" => Ok(UrpfMode::Loose),
            "strict" => Ok(UrpfMode::Strict),
            _ => Err(format!("`{s}` is not one of off, loose, strict")),
        }
    }
}

/// A VR to create: the keys of a config file's `[[router]]` table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VrSpec {
    /// VR name, unique on the host.
    pub name: String,
    /// Interfaces (config key: `interface`).
    #[serde(default, alias = "interface")]
    pub interfaces: Vec<InterfaceSpec>,
    /// Static routes (config key: `route`).
    #[serde(default, alias = "route")]
    pub routes: Vec<Route>,
    /// Static neighbours (config key: `neighbor`).
    #[serde(default, alias = "neighbor")]
    pub neighbors: Vec<Neighbor>,
    /// Shares and limits (config key: `limits`).
    #[serde(default, alias = "limits")]
    pub policy: VrPolicy,
    /// Rule lists its interfaces' `filter_in` and `filter_out` name
    /// (config key: `filter`).
    #[serde(default, alias = "filter", skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Filter>,
    /// Control-plane namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<VrControl>,
    /// SHA-256 (hex) of the VR's own API token, as `vrhost token` prints it.
    /// It works from the creation on and is revoked when the VR is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_token_sha256: Option<String>,
}

/// A VR interface as it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InterfaceInfo {
    /// Interface name.
    pub name: String,
    /// The port it attaches to.
    pub port: String,
    /// 802.1Q tag; untagged when absent (the outer tag with `inner_vlan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// QinQ: the inner tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner_vlan: Option<u16>,
    /// The outer tag's TPID; `0x8100` when absent.
    #[serde(default, skip_serializing_if = "VlanTpid::is_default")]
    pub vlan_tpid: VlanTpid,
    /// MAC address.
    pub mac: MacAddr,
    /// IP MTU.
    pub mtu: u16,
    /// Addresses with their subnet lengths.
    pub addresses: Vec<IfaceAddr>,
    /// Reverse-path check (RFC 3704); `off` when absent.
    #[serde(default, skip_serializing_if = "UrpfMode::is_off")]
    pub urpf: UrpfMode,
    /// The rule list applied to what enters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_in: Option<String>,
    /// The rule list applied to what is forwarded out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_out: Option<String>,
}

/// A VR's rule lists, and the lists its interfaces apply: what
/// `GET /v1/vrs/{vr}/filters` answers (with counters) and `PUT` replaces as
/// a whole, all or nothing. The same keys as the config's
/// `[[router.filter]]` and the interfaces' `filter_in` / `filter_out`, so
/// `vrhost ctl filters set` takes a TOML file with `[[filter]]` tables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Filters {
    /// The lists, in order; names unique.
    #[serde(default)]
    pub filter: Vec<Filter>,
    /// Interfaces and the lists they apply. In a `PUT`, interfaces not
    /// named keep theirs; `GET` lists every interface.
    #[serde(default)]
    pub interface: Vec<InterfaceFilters>,
}

/// One named rule list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Unique in the VR.
    pub name: String,
    /// What a packet no rule matches gets; `permit` when absent.
    #[serde(default)]
    pub default: FilterAction,
    /// The rules, first match wins.
    #[serde(default)]
    pub rule: Vec<FilterRule>,
    /// Listed only: packets that took the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_hits: Option<u64>,
}

/// `permit` or `deny`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FilterAction {
    /// Let it through.
    #[default]
    Permit,
    /// Drop it (drop reason `filtered`).
    Deny,
}

/// A rule: every key it has must match; an absent key matches anything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterRule {
    /// `permit` or `deny`.
    pub action: FilterAction,
    /// Source prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<Prefix>,
    /// Destination prefix (of the source's family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<Prefix>,
    /// Protocol: a name (`tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, `gre`,
    /// ...) or a number 0-255.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<ProtocolValue>,
    /// Source port or `FIRST-LAST` range (tcp, udp, sctp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_port: Option<PortsValue>,
    /// Destination port or range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_port: Option<PortsValue>,
    /// ICMP type (icmp, icmpv6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP code (with `icmp_type`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<u8>,
    /// VLAN priority of the frame as received, 0-7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcp: Option<u8>,
    /// Listed only: packets the rule matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits: Option<u64>,
}

/// A rule's protocol: a name or a number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ProtocolValue {
    /// `6`.
    Number(u8),
    /// `"tcp"`.
    Name(String),
}

/// A rule's ports: one, or a `FIRST-LAST` range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PortsValue {
    /// `443`.
    One(u16),
    /// `"1024-65535"`.
    Range(String),
}

/// The lists one interface applies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterfaceFilters {
    /// Interface name.
    pub name: String,
    /// The list applied to what enters; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_in: Option<String>,
    /// The list applied to what is forwarded out; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_out: Option<String>,
}

/// A VR as it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VrInfo {
    /// VR name.
    pub name: String,
    /// Its interfaces.
    pub interfaces: Vec<InterfaceInfo>,
    /// IPv4 routes, connected and local ones included.
    pub routes_v4: u64,
    /// IPv6 routes, connected and local ones included.
    pub routes_v6: u64,
    /// FIB memory, both families, in bytes.
    pub fib_bytes: u64,
    /// Shares and limits in force (every key filled).
    pub policy: VrPolicy,
    /// Control-plane namespace, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<VrControl>,
}

/// Paging of a list: `?offset=&limit=`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Entries to skip; default 0.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Most entries to return; default 1000, at most 100000.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// `GET /v1/vrs/{vr}/interfaces/{iface}/capture` query: what to capture
/// and when to stop. The answer is a pcap stream (Ethernet, microsecond
/// timestamps) of the frames the interface receives and sends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureQuery {
    /// Stop after this many frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Only frames matching this expression: `host A`, `net P`, `port N`,
    /// `src`/`dst` before any of them, `tcp`, `udp`, `icmp`, `icmp6`, `ip`,
    /// `ip6`, `arp`, `vlan [N]`, `proto N`, with `and`, `or`, `not` and
    /// parentheses, as tcpdump writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Bytes kept of each frame (default 65535).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snaplen: Option<u32>,
    /// Stop after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
}

/// One page of a VR's routes, in the backend's stable order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RoutePage {
    /// Routes in the VR, all pages together.
    pub total: u64,
    /// Index of the first route of this page.
    pub offset: u64,
    /// This page.
    pub routes: Vec<Route>,
}

/// What a single add or delete did. Requests are idempotent: adding what is
/// there already answers `unchanged`, deleting what is missing (with
/// `missing_ok`) answers `missing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It did not exist and was added.
    Created,
    /// A different entry with the same key was replaced.
    Replaced,
    /// The identical entry existed; nothing changed.
    Unchanged,
    /// It existed and was removed.
    Deleted,
    /// It did not exist; nothing changed.
    Missing,
}

/// The answer to a single add or delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OutcomeBody {
    /// What happened.
    pub result: Outcome,
}

/// Many route changes in one request, validated whole and then applied
/// together: deletions first, then additions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRoutes {
    /// Routes to add. An identical existing route is fine (`exist_ok`).
    #[serde(default)]
    pub add: Vec<Route>,
    /// Prefixes to delete. A missing one is fine (`missing_ok`).
    #[serde(default)]
    pub delete: Vec<Prefix>,
    /// Replace an existing route of the same prefix with a different target
    /// (otherwise that is a 409 conflict and nothing is applied).
    #[serde(default)]
    pub replace: bool,
}

/// What a bulk request did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BulkResult {
    /// Routes added.
    pub created: u64,
    /// Routes replaced.
    pub replaced: u64,
    /// Routes already there, identical.
    pub unchanged: u64,
    /// Routes deleted.
    pub deleted: u64,
    /// Deletions of routes that were not there.
    pub missing: u64,
}

/// Body of an address add.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddressBody {
    /// The address with its subnet length.
    pub address: IfaceAddr,
}

/// Counter values of a VR, an interface or a port: the sum over every worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CounterSet {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received (whole frames).
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted (whole frames).
    pub tx_bytes: u64,
    /// Packets forwarded toward another interface (counted on ingress).
    pub forwarded: u64,
    /// Of `forwarded`, the IPv4 packets the data plane's fast path took.
    #[serde(default)]
    pub fast_path: u64,
    /// Packets for the router answered in the data plane or learned from.
    pub local: u64,
    /// Packets for the router put on the VR's punt queue.
    pub punted: u64,
    /// ICMP errors generated.
    pub icmp_errors: u64,
    /// ICMP errors not sent because of the VR's rate limit.
    pub icmp_rate_limited: u64,
    /// ICMP errors not sent because the offending packet must not get one.
    pub icmp_suppressed: u64,
    /// ICMP errors not sent because the ingress interface has no address of that family.
    pub icmp_no_source: u64,
    /// Drops by reason (the data plane's drop-reason names); zero counts may be left out.
    #[serde(default)]
    pub drops: BTreeMap<String, u64>,
}

impl CounterSet {
    /// Name and description of each scalar counter, in [`CounterSet::values`] order.
    pub const FIELDS: [(&'static str, &'static str); 12] = [
        ("rx_packets", "Frames received"),
        ("rx_bytes", "Bytes received (whole frames)"),
        ("tx_packets", "Frames transmitted"),
        ("tx_bytes", "Bytes transmitted (whole frames)"),
        ("forwarded", "Packets forwarded toward another interface"),
        (
            "fast_path",
            "Forwarded IPv4 packets that took the fast path",
        ),
        ("local", "Packets for the router answered in the data plane"),
        ("punted", "Packets put on the VR's punt queue"),
        ("icmp_errors", "ICMP errors generated"),
        ("icmp_rate_limited", "ICMP errors not sent: rate limit"),
        (
            "icmp_suppressed",
            "ICMP errors not sent: forbidden by RFC 1812 / RFC 4443",
        ),
        ("icmp_no_source", "ICMP errors not sent: no source address"),
    ];

    /// The scalar counters in [`CounterSet::FIELDS`] order.
    pub fn values(&self) -> [u64; 12] {
        [
            self.rx_packets,
            self.rx_bytes,
            self.tx_packets,
            self.tx_bytes,
            self.forwarded,
            self.fast_path,
            self.local,
            self.punted,
            self.icmp_errors,
            self.icmp_rate_limited,
            self.icmp_suppressed,
            self.icmp_no_source,
        ]
    }

    /// Sum of every drop reason.
    pub fn dropped(&self) -> u64 {
        self.drops.values().sum()
    }
}

/// Counters of one interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InterfaceCounters {
    /// Interface name.
    pub name: String,
    /// Its counters.
    pub counters: CounterSet,
}

/// Counters of one VR and each of its interfaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VrCounters {
    /// VR name.
    pub vr: String,
    /// The VR's counters.
    pub total: CounterSet,
    /// Each interface's counters.
    pub interfaces: Vec<InterfaceCounters>,
    /// Nanoseconds of worker time the VR's traffic took, summed over the
    /// workers, as the fair share measures it (its frames through the
    /// stages and the fast path, and its part of the drivers' receive and
    /// send), updated every 100 ms, never going back: its rate is the
    /// VR's share of the cores. Absent where the workers have no clock
    /// yet, or no room for the VR (one created without an interface past
    /// the interfaces' headroom, given interfaces later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_ns: Option<u64>,
}

/// A port (shared by VRs; admin only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PortInfo {
    /// Port name.
    pub name: String,
    /// Driver: memory, pcap, af_packet, af_xdp, tap.
    pub driver: String,
    /// MAC address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddr>,
    /// IP MTU.
    pub mtu: u16,
    /// Receive queues.
    pub queues: u16,
    /// Its counters.
    pub counters: CounterSet,
}

/// One worker thread's load (admin only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkerInfo {
    /// Worker index.
    pub index: u32,
    /// Core it is pinned to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<u32>,
    /// Share of recent time spent processing packets, 0.0 to 1.0.
    pub load: f64,
    /// Packets processed since start.
    pub packets: u64,
}

/// What a config reload changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReloadReport {
    /// VRs created.
    pub created: Vec<String>,
    /// VRs deleted.
    pub deleted: Vec<String>,
    /// VRs whose interfaces, routes, neighbours or policy changed.
    pub changed: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_rejects_host_bits_and_long_lengths() {
        assert!("10.0.0.0/8".parse::<Prefix>().is_ok());
        assert!("10.0.0.1/8".parse::<Prefix>().is_err());
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        assert!("::/0".parse::<Prefix>().is_ok());
        assert!("2001:db8::/129".parse::<Prefix>().is_err());
        assert!("0.0.0.0/0".parse::<Prefix>().is_ok());
        assert!("10.0.0.0".parse::<Prefix>().is_err());
    }

    #[test]
    fn iface_addr_keeps_host_bits() {
        let a: IfaceAddr = "10.0.0.1/24".parse().unwrap();
        assert_eq!(a.to_string(), "10.0.0.1/24");
        assert_eq!(a.subnet().to_string(), "10.0.0.0/24");
    }

    #[test]
    fn mac_round_trips() {
        let m: MacAddr = "02:00:00:00:00:fe".parse().unwrap();
        assert_eq!(m.to_string(), "02:00:00:00:00:fe");
        assert!("02:00:00:00:00".parse::<MacAddr>().is_err());
        assert!("02:00:00:00:00:fe:01".parse::<MacAddr>().is_err());
    }

    #[test]
    fn route_wire_form_is_the_config_form() {
        let r: Route =
            serde_json::from_str(r#"{"prefix":"0.0.0.0/0","via":"10.0.0.254"}"#).unwrap();
        assert_eq!(r.target, RouteTarget::Via("10.0.0.254".parse().unwrap()));
        let r: Route = serde_json::from_str(r#"{"prefix":"::/0","blackhole":true}"#).unwrap();
        assert_eq!(r.target, RouteTarget::Blackhole);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"prefix":"::/0","blackhole":true}"#
        );
        for bad in [
            r#"{"prefix":"::/0"}"#,
            r#"{"prefix":"::/0","blackhole":true,"unreachable":true}"#,
            r#"{"prefix":"::/0","via":"10.0.0.1"}"#,
            r#"{"prefix":"::/0","gateway":"::1"}"#,
        ] {
            assert!(serde_json::from_str::<Route>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn vr_spec_reads_a_config_router_table() {
        let text = r#"
            name = "red"
            [[interface]]
            name = "red0"
            port = "p0"
            vlan = 100
            addresses = ["10.0.0.1/24"]
            [[route]]
            prefix = "0.0.0.0/0"
            via = "10.0.0.254"
            [[neighbor]]
            address = "10.0.0.254"
            mac = "02:00:00:00:00:fe"
            [limits]
            icmp_rate = 10
        "#;
        let spec: VrSpec = toml::from_str(text).unwrap();
        assert_eq!(spec.interfaces[0].vlan, Some(100));
        assert_eq!(spec.routes.len(), 1);
        assert_eq!(spec.neighbors.len(), 1);
        assert_eq!(spec.policy.icmp_rate, Some(10));
    }
}
