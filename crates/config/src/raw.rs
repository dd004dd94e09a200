//! The raw layer: serde structs that mirror the TOML file key for key.
//!
//! Every field is optional and loosely typed (numbers are `i64`, addresses
//! are strings) so that the validator, not serde, judges values and can say
//! which key is wrong and why. `deny_unknown_fields` catches misspelt keys.
//!
//! [`toml::from_str::<RawConfig>`](toml::from_str) reads a whole file but
//! stops at the first error. The config loader instead decodes one table at
//! a time (`decode_document`), so that it can report every bad key with its
//! path and still validate the rest of the file.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use crate::error::ConfigErrors;
use crate::names::{key_part, labels, MAX_IFNAME, MAX_NAME};

/// A whole config file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[dataplane]`.
    pub dataplane: Option<RawDataplane>,
    /// `[[port]]`.
    #[serde(default)]
    pub port: Vec<RawPort>,
    /// `[[router]]`.
    #[serde(default)]
    pub router: Vec<RawRouter>,
    /// `[api]`.
    pub api: Option<RawApi>,
}

/// `[api]`: the management API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    /// Unix socket path.
    pub socket: Option<String>,
    /// Optional TCP listener, `ADDRESS:PORT`.
    pub listen: Option<String>,
    /// SHA-256 (hex) of the admin token.
    pub admin_token_sha256: Option<String>,
    /// PEM certificate chain for TLS on the TCP listener.
    pub tls_cert: Option<String>,
    /// PEM private key for TLS on the TCP listener.
    pub tls_key: Option<String>,
    /// Journal of the changes made through the API.
    pub state: Option<String>,
}

/// `[dataplane]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDataplane {
    /// Cores to pin one worker each to.
    pub workers: Option<Vec<i64>>,
    /// What one run leaves for the next (TAP mirrors, FPM routes).
    pub runtime_dir: Option<String>,
    /// Seconds the TAP mirrors keep their carrier after vrhost stops.
    pub tap_hold: Option<i64>,
}

/// A `driver = "..."` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum RawDriver {
    /// `memory`
    Memory,
    /// `pcap`
    Pcap,
    /// `af_packet`
    AfPacket,
    /// `af_xdp`
    AfXdp,
    /// `tap`
    Tap,
    /// `vhost_user`
    VhostUser,
}

impl TryFrom<String> for RawDriver {
    type Error = String;

    /// Parses a driver name; through a string so that a wrong value gets a
    /// plain message rather than serde's enum jargon.
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "memory" => Ok(RawDriver::Memory),
            "pcap" => Ok(RawDriver::Pcap),
            "af_packet" => Ok(RawDriver::AfPacket),
            "af_xdp" => Ok(RawDriver::AfXdp),
            "tap" => Ok(RawDriver::Tap),
            "vhost_user" => Ok(RawDriver::VhostUser),
            _ => Err(format!(
                "unknown driver {}; expected one of memory, pcap, af_packet, af_xdp, tap, vhost_user",
                crate::addr::shown(&s)
            )),
        }
    }
}

/// `[[port]]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPort {
    /// Unique port name.
    pub name: Option<String>,
    /// Packet I/O driver.
    pub driver: Option<RawDriver>,
    /// File to read (pcap) or replay (memory).
    pub rx: Option<String>,
    /// File to write (pcap).
    pub tx: Option<String>,
    /// Linux interface (af_packet, af_xdp, tap).
    pub interface: Option<String>,
    /// Network namespace the TAP device lives in (tap).
    pub netns: Option<String>,
    /// Unix socket QEMU connects to (vhost_user).
    pub socket: Option<String>,
    /// Port MAC address.
    pub mac: Option<String>,
    /// IP MTU in bytes.
    pub mtu: Option<i64>,
    /// Number of queues.
    pub queues: Option<i64>,
    /// af_packet: steer the control protocols to a queue of their own.
    pub control_queue: Option<bool>,
    /// af_packet: the host's stack also receives the port's frames.
    pub host_stack: Option<bool>,
    /// af_packet: RPS on a virtual interface, to the cores with no worker.
    pub rps: Option<bool>,
}

/// `[[router]]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouter {
    /// Unique router name.
    pub name: Option<String>,
    /// File of extra routes, one `PREFIX VIA` per line.
    pub routes_file: Option<String>,
    /// SHA-256 (hex) of this router's API token.
    pub api_token_sha256: Option<String>,
    /// `[[router.interface]]`.
    #[serde(default)]
    pub interface: Vec<RawInterface>,
    /// `[[router.route]]`.
    #[serde(default)]
    pub route: Vec<RawRoute>,
    /// `[[router.neighbor]]`.
    #[serde(default)]
    pub neighbor: Vec<RawNeighbor>,
    /// `[[router.filter]]`.
    #[serde(default)]
    pub filter: Vec<RawFilter>,
    /// `[router.control]`.
    pub control: Option<RawControl>,
    /// `[router.limits]`.
    pub limits: Option<RawLimits>,
}

/// `[[router.interface]]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInterface {
    /// Interface name, unique within the router.
    pub name: Option<String>,
    /// Name of the port it attaches to.
    pub port: Option<String>,
    /// 802.1Q VLAN ID; untagged when absent. The outer tag with `inner_vlan`.
    pub vlan: Option<i64>,
    /// QinQ: the inner VLAN ID under `vlan`.
    pub inner_vlan: Option<i64>,
    /// TPID of the outer tag: `0x8100` (when absent) or `0x88a8`.
    pub vlan_tpid: Option<String>,
    /// Addresses with subnet lengths, `10.0.0.1/24`.
    pub addresses: Option<Vec<String>>,
    /// IP MTU; the port's when absent.
    pub mtu: Option<i64>,
    /// MAC address; the port's when absent.
    pub mac: Option<String>,
    /// Reverse-path check: `off` (when absent), `loose` or `strict`.
    pub urpf: Option<String>,
    /// The router's rule list applied to what enters.
    pub filter_in: Option<String>,
    /// The router's rule list applied to what is forwarded out.
    pub filter_out: Option<String>,
}

/// `[[router.filter]]`: a named rule list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilter {
    /// Unique in the router.
    pub name: Option<String>,
    /// `permit` (when absent) or `deny`: what no rule matches gets.
    pub default: Option<String>,
    /// `[[router.filter.rule]]`, first match wins.
    #[serde(default)]
    pub rule: Vec<RawRule>,
}

/// `[[router.filter.rule]]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// `permit` or `deny`.
    pub action: Option<String>,
    /// Source prefix.
    pub src: Option<String>,
    /// Destination prefix.
    pub dst: Option<String>,
    /// Protocol name or number.
    pub protocol: Option<Protocol>,
    /// Source port or `FIRST-LAST` range.
    pub src_port: Option<Ports>,
    /// Destination port or range.
    pub dst_port: Option<Ports>,
    /// ICMP type.
    pub icmp_type: Option<i64>,
    /// ICMP code.
    pub icmp_code: Option<i64>,
    /// VLAN priority, 0-7.
    pub pcp: Option<i64>,
}

/// A rule's `protocol`: a name or a number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Protocol {
    /// `protocol = 47`.
    Number(i64),
    /// `protocol = "tcp"`.
    Name(String),
}

/// A rule's ports: one, or a `FIRST-LAST` range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Ports {
    /// `dst_port = 443`.
    One(i64),
    /// `dst_port = "1024-65535"`.
    Range(String),
}

/// `[[router.route]]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Destination prefix.
    pub prefix: Option<String>,
    /// Next-hop address, or several for a multipath route.
    pub via: Option<Vias>,
    /// Multipath weights, one per `via` address.
    pub weights: Option<Vec<i64>>,
    /// Drop silently.
    pub blackhole: Option<bool>,
    /// Drop with ICMP destination unreachable.
    pub unreachable: Option<bool>,
}

/// A route's `via`: one address or a list of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Vias {
    /// `via = "10.0.0.1"`.
    One(String),
    /// `via = ["10.0.0.1", "10.0.0.2"]`.
    Many(Vec<String>),
}

/// `[[router.neighbor]]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNeighbor {
    /// Neighbour IP address.
    pub address: Option<String>,
    /// Its MAC address.
    pub mac: Option<String>,
}

/// `[router.control]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawControl {
    /// Network namespace of the router's control plane.
    pub netns: Option<String>,
    /// FPM listener (`ADDRESS:PORT`) whose routes feed this router.
    pub fpm: Option<String>,
    /// Where the FPM listener is bound: `"netns"` or `"host"`.
    pub fpm_in: Option<String>,
    /// Peer addresses allowed to connect to the FPM listener.
    pub fpm_peers: Option<Vec<String>>,
}

/// `[router.limits]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// ICMP errors per second.
    pub icmp_rate: Option<i64>,
    /// Packets queued towards the control plane.
    pub punt_queue: Option<i64>,
    /// Packets held per unresolved next hop.
    pub arp_hold: Option<i64>,
    /// Lifetime of a reachable neighbour entry, in milliseconds.
    pub neighbor_timeout_ms: Option<i64>,
    /// Neighbour entries per worker.
    pub max_neighbors: Option<i64>,
    /// Routes per address family.
    pub max_routes: Option<i64>,
    /// Multipath groups the routes may name.
    pub max_nexthop_groups: Option<i64>,
    /// Interface addresses, all interfaces and families.
    pub max_addresses: Option<i64>,
    /// Share of a saturated worker.
    pub weight: Option<i64>,
    /// Receive ceiling in packets per second.
    pub pps: Option<i64>,
    /// Receive ceiling in bits per second.
    pub bps: Option<i64>,
    /// Packets per second towards the control plane.
    pub punt_rate: Option<i64>,
    /// Packets per second of control protocols protected from the limits.
    pub protocol_rate: Option<i64>,
}

/// One decoded table: its label for error keys, its raw value, and the keys
/// that were present but rejected (already reported; the validator must not
/// report them again as missing).
#[derive(Clone, Debug, Default)]
pub(crate) struct Item<T> {
    pub label: String,
    pub raw: T,
    pub bad: Vec<String>,
}

impl<T> Item<T> {
    /// True if `key` was present in the file but could not be decoded.
    pub fn is_bad(&self, key: &str) -> bool {
        self.bad.iter().any(|k| k == key)
    }

    /// `label.key`, the error key of one field.
    pub fn key(&self, field: &str) -> String {
        join(&self.label, field)
    }
}

/// A `[[router]]` decoded part by part.
#[derive(Clone, Debug, Default)]
pub(crate) struct RouterItem {
    /// Name and routes_file; the nested arrays and tables are below.
    pub head: Item<RawRouter>,
    pub interfaces: Vec<Item<RawInterface>>,
    pub routes: Vec<Item<RawRoute>>,
    pub neighbors: Vec<Item<RawNeighbor>>,
    pub filters: Vec<FilterItem>,
    pub control: Option<Item<RawControl>>,
    pub limits: Option<Item<RawLimits>>,
}

/// A `[[router.filter]]` decoded part by part: its name and default, and
/// each rule.
#[derive(Clone, Debug, Default)]
pub(crate) struct FilterItem {
    pub head: Item<RawFilter>,
    pub rules: Vec<Item<RawRule>>,
}

/// A whole file decoded table by table.
#[derive(Clone, Debug, Default)]
pub(crate) struct Document {
    pub dataplane: Option<Item<RawDataplane>>,
    pub ports: Vec<Item<RawPort>>,
    pub routers: Vec<RouterItem>,
    pub api: Option<Item<RawApi>>,
}

impl Document {
    /// The same value `toml::from_str::<RawConfig>` gives for a file without
    /// errors.
    #[cfg(test)]
    pub fn to_raw(&self) -> RawConfig {
        RawConfig {
            dataplane: self.dataplane.as_ref().map(|d| d.raw.clone()),
            api: self.api.as_ref().map(|d| d.raw.clone()),
            port: self.ports.iter().map(|p| p.raw.clone()).collect(),
            router: self
                .routers
                .iter()
                .map(|r| RawRouter {
                    interface: r.interfaces.iter().map(|i| i.raw.clone()).collect(),
                    route: r.routes.iter().map(|i| i.raw.clone()).collect(),
                    neighbor: r.neighbors.iter().map(|i| i.raw.clone()).collect(),
                    filter: r
                        .filters
                        .iter()
                        .map(|f| RawFilter {
                            rule: f.rules.iter().map(|i| i.raw.clone()).collect(),
                            ..f.head.raw.clone()
                        })
                        .collect(),
                    control: r.control.as_ref().map(|i| i.raw.clone()),
                    limits: r.limits.as_ref().map(|i| i.raw.clone()),
                    ..r.head.raw.clone()
                })
                .collect(),
        }
    }
}

fn join(label: &str, key: &str) -> String {
    if label.is_empty() {
        key_part(key)
    } else {
        format!("{label}.{}", key_part(key))
    }
}

/// Rewords serde's messages for operators: TOML talks of keys, integers and
/// arrays, not fields, `i64` and sequences.
fn reword(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((_, expected)) = rest.split_once("`, ") {
            return format!("unknown key; {expected}");
        }
        return "unknown key".into();
    }
    if message.starts_with("data did not match any variant of untagged enum Vias") {
        return "expected an address or an array of addresses".into();
    }
    if message.starts_with("data did not match any variant of untagged enum Protocol") {
        return "expected a protocol name (\"tcp\") or number (0-255)".into();
    }
    if message.starts_with("data did not match any variant of untagged enum Ports") {
        return "expected a port (443) or a range (\"1024-65535\")".into();
    }
    message
        .replace("expected i64", "expected an integer")
        .replace("a sequence", "an array")
        .replace("a map", "a table")
        .replace("sequence", "array")
}

/// Decodes one table into `T`, reporting each bad key as `label.key`. On
/// errors the result holds every key that decoded on its own.
///
/// All fields of the raw structs are optional, so decoding the table one key
/// at a time attributes each serde error to exactly one key.
pub(crate) fn decode<T: DeserializeOwned + Default>(
    table: &Table,
    label: &str,
    errs: &mut ConfigErrors,
) -> Item<T> {
    match table.clone().try_into::<T>() {
        Ok(raw) => Item {
            label: label.to_string(),
            raw,
            bad: Vec::new(),
        },
        Err(whole) => {
            let mut good = Table::new();
            let mut bad = Vec::new();
            for (k, v) in table {
                let mut one = Table::new();
                one.insert(k.clone(), v.clone());
                match one.try_into::<T>() {
                    Ok(_) => {
                        good.insert(k.clone(), v.clone());
                    }
                    Err(e) => {
                        errs.push(join(label, k), reword(e.message()));
                        bad.push(k.clone());
                    }
                }
            }
            if bad.is_empty() {
                // Not expected with all-optional fields; never lose an error.
                errs.push(label_or_config(label), reword(whole.message()));
            }
            Item {
                label: label.to_string(),
                raw: good.try_into::<T>().unwrap_or_default(),
                bad,
            }
        }
    }
}

fn label_or_config(label: &str) -> String {
    if label.is_empty() {
        "config".into()
    } else {
        label.to_string()
    }
}

/// `[[kind]]` entries as tables: reports a value that is not an array of
/// tables and skips elements that are not tables.
fn array_of_tables<'a>(
    value: Option<&'a Value>,
    key: &str,
    toml_header: &str,
    errs: &mut ConfigErrors,
) -> Vec<(usize, &'a Table)> {
    match value {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Value::Table(t) => Some((i, t)),
                other => {
                    errs.push(
                        format!("{key}[{i}]"),
                        format!("expected a {toml_header} table, found {}", other.type_str()),
                    );
                    None
                }
            })
            .collect(),
        Some(other) => {
            errs.push(
                key,
                format!(
                    "expected {toml_header} tables (an array of tables), found {}",
                    kind_of(other)
                ),
            );
            Vec::new()
        }
    }
}

/// `[kind]` as a table, reporting anything else.
fn single_table<'a>(
    value: Option<&'a Value>,
    key: &str,
    toml_header: &str,
    errs: &mut ConfigErrors,
) -> Option<&'a Table> {
    match value? {
        Value::Table(t) => Some(t),
        other => {
            errs.push(
                key,
                format!("expected a {toml_header} table, found {}", kind_of(other)),
            );
            None
        }
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Table(_) => "a single table",
        Value::Array(a) if a.iter().all(Value::is_table) && !a.is_empty() => "an array of tables",
        other => other.type_str(),
    }
}

/// The string value of `name` in each table, for labelling.
fn names<'a>(tables: &[(usize, &'a Table)]) -> Vec<Option<&'a str>> {
    tables
        .iter()
        .map(|(_, t)| t.get("name").and_then(Value::as_str))
        .collect()
}

/// Decodes a parsed file table by table, reporting every bad key.
pub(crate) fn decode_document(root: &Table, errs: &mut ConfigErrors) -> Document {
    const NESTED: [&str; 4] = ["dataplane", "port", "router", "api"];
    let head: Table = root
        .iter()
        .filter(|(k, _)| !NESTED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // Catches unknown top-level keys.
    decode::<RawConfig>(&head, "", errs);

    let dataplane = single_table(root.get("dataplane"), "dataplane", "[dataplane]", errs)
        .map(|t| decode::<RawDataplane>(t, "dataplane", errs));
    let api = single_table(root.get("api"), "api", "[api]", errs)
        .map(|t| decode::<RawApi>(t, "api", errs));

    let port_tables = array_of_tables(root.get("port"), "port", "[[port]]", errs);
    let port_labels = labels("", "port", names(&port_tables), MAX_NAME);
    let ports = port_tables
        .iter()
        .zip(&port_labels)
        .map(|((_, t), label)| decode::<RawPort>(t, label, errs))
        .collect();

    let router_tables = array_of_tables(root.get("router"), "router", "[[router]]", errs);
    let router_labels = labels("", "router", names(&router_tables), MAX_NAME);
    let routers = router_tables
        .iter()
        .zip(&router_labels)
        .map(|((_, t), label)| decode_router(t, label, errs))
        .collect();

    Document {
        dataplane,
        ports,
        routers,
        api,
    }
}

fn decode_router(table: &Table, label: &str, errs: &mut ConfigErrors) -> RouterItem {
    const NESTED: [&str; 6] = [
        "interface",
        "route",
        "neighbor",
        "filter",
        "control",
        "limits",
    ];
    let head: Table = table
        .iter()
        .filter(|(k, _)| !NESTED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let head = decode::<RawRouter>(&head, label, errs);

    let if_tables = array_of_tables(
        table.get("interface"),
        &join(label, "interface"),
        "[[router.interface]]",
        errs,
    );
    let if_labels = labels(
        &format!("{label}."),
        "interface",
        names(&if_tables),
        MAX_IFNAME,
    );
    let interfaces = if_tables
        .iter()
        .zip(&if_labels)
        .map(|((_, t), l)| decode::<RawInterface>(t, l, errs))
        .collect();

    let route_key = join(label, "route");
    let routes = array_of_tables(table.get("route"), &route_key, "[[router.route]]", errs)
        .into_iter()
        .map(|(i, t)| decode::<RawRoute>(t, &format!("{route_key}[{i}]"), errs))
        .collect();

    let neighbor_key = join(label, "neighbor");
    let neighbors = array_of_tables(
        table.get("neighbor"),
        &neighbor_key,
        "[[router.neighbor]]",
        errs,
    )
    .into_iter()
    .map(|(i, t)| decode::<RawNeighbor>(t, &format!("{neighbor_key}[{i}]"), errs))
    .collect();

    let filter_tables = array_of_tables(
        table.get("filter"),
        &join(label, "filter"),
        "[[router.filter]]",
        errs,
    );
    let filter_labels = labels(
        &format!("{label}."),
        "filter",
        names(&filter_tables),
        MAX_NAME,
    );
    let filters = filter_tables
        .iter()
        .zip(&filter_labels)
        .map(|((_, t), l)| decode_filter(t, l, errs))
        .collect();

    let control_key = join(label, "control");
    let control = single_table(table.get("control"), &control_key, "[router.control]", errs)
        .map(|t| decode::<RawControl>(t, &control_key, errs));

    let limits_key = join(label, "limits");
    let limits = single_table(table.get("limits"), &limits_key, "[router.limits]", errs)
        .map(|t| decode::<RawLimits>(t, &limits_key, errs));

    RouterItem {
        head,
        interfaces,
        routes,
        neighbors,
        filters,
        control,
        limits,
    }
}

fn decode_filter(table: &Table, label: &str, errs: &mut ConfigErrors) -> FilterItem {
    let head: Table = table
        .iter()
        .filter(|(k, _)| k.as_str() != "rule")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let head = decode::<RawFilter>(&head, label, errs);
    let rule_key = join(label, "rule");
    let rules = array_of_tables(table.get("rule"), &rule_key, "[[router.filter.rule]]", errs)
        .into_iter()
        .map(|(i, t)| decode::<RawRule>(t, &format!("{rule_key}[{i}]"), errs))
        .collect();
    FilterItem { head, rules }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> (Document, ConfigErrors) {
        let mut errs = ConfigErrors::default();
        let root: Table = text.parse().unwrap();
        (decode_document(&root, &mut errs), errs)
    }

    #[test]
    fn decoding_table_by_table_matches_serde_on_the_whole_file() {
        let (d, errs) = doc(crate::EXAMPLE);
        assert!(errs.is_empty(), "{errs}");
        let whole: RawConfig = toml::from_str(crate::EXAMPLE).unwrap();
        assert_eq!(d.to_raw(), whole);
    }

    #[test]
    fn every_bad_key_is_reported_and_the_good_ones_kept() {
        let (d, errs) = doc(r#"
            [[port]]
            name = "p0"
            driver = "pcapp"
            mtu = "1500"
            speed = 10
            mac = "02:00:00:00:00:01"
            "#);
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            ["port \"p0\".driver", "port \"p0\".mtu", "port \"p0\".speed"]
        );
        assert!(
            errs.0[0]
                .reason
                .contains("unknown driver \"pcapp\"; expected one of memory"),
            "{errs}"
        );
        assert!(errs.0[1].reason.contains("expected an integer"), "{errs}");
        assert!(
            errs.0[2].reason.starts_with("unknown key; expected one of"),
            "{errs}"
        );
        let p = &d.ports[0];
        assert_eq!(p.raw.mac.as_deref(), Some("02:00:00:00:00:01"));
        assert!(p.is_bad("driver") && p.is_bad("mtu") && !p.is_bad("mac"));
    }

    #[test]
    fn wrong_shapes_are_reported() {
        let (_, errs) = doc(r#"
            colour = "red"
            port = 3
            [dataplane]
            workers = 1
            [[router]]
            name = "red"
            control = [1]
            [router.limits]
            icmp_rate = true
            "#);
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "colour",
                "dataplane.workers",
                "port",
                "router \"red\".control",
                "router \"red\".limits.icmp_rate"
            ],
            "{errs}"
        );
        assert!(errs.0[0].reason.contains("unknown key"));
        assert!(errs.0[2].reason.contains("found integer"), "{errs}");
    }
}
