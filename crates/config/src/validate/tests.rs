//! One test per validation rule: each asserts the exact key and a fragment
//! of the reason, and (where the rule stands alone) that it is the only
//! error, so that one mistake never produces a cascade.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use super::*;
use crate::{Action, PortRange, EXAMPLE, EXAMPLE_ROUTES_FILE, EXAMPLE_ROUTES_FILE_NAME};

/// Cores of the pretend machine.
const CORES: usize = 4;

/// A small valid config; tests append to its last router or edit it.
const BASE: &str = r#"
[[port]]
name = "p0"
driver = "pcap"
rx = "in0.pcap"
mac = "02:00:00:00:00:01"

[[port]]
name = "p1"
driver = "pcap"
tx = "/captures/out1.pcap"
mac = "02:00:00:00:00:02"

[[router]]
name = "red"
  [[router.interface]]
  name = "red0"
  port = "p0"
  addresses = ["10.0.0.1/24", "2001:db8::1/64"]
"#;

/// Validates `text` as if it lived in `/cfg`, with `files` there.
fn check_with(text: &str, files: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
    let files: HashMap<PathBuf, Vec<u8>> = files
        .iter()
        .map(|(name, content)| (Path::new("/cfg").join(name), content.as_bytes().to_vec()))
        .collect();
    let read = move |p: &Path| {
        files
            .get(p)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    };
    parse(
        text,
        &Env {
            cores: &[0, 1, 2, 3],
            base_dir: Path::new("/cfg"),
            read: &read,
        },
    )
}

fn check(text: &str) -> Result<Config, ConfigErrors> {
    check_with(text, &[])
}

fn with(extra: &str) -> String {
    format!("{BASE}{extra}")
}

fn edit(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?} not in BASE");
    BASE.replacen(from, to, 1)
}

fn errors(text: &str) -> ConfigErrors {
    check(text).expect_err("config should be rejected")
}

/// Asserts an error with exactly `key` whose reason contains `fragment`.
fn has(errs: &ConfigErrors, key: &str, fragment: &str) {
    assert!(
        errs.iter()
            .any(|e| e.key == key && e.reason.contains(fragment)),
        "no error {key}: …{fragment}… in\n{errs}"
    );
}

/// Asserts that `text` has exactly one error, at `key`, containing `fragment`.
fn only(text: &str, key: &str, fragment: &str) {
    let errs = errors(text);
    has(&errs, key, fragment);
    assert_eq!(errs.len(), 1, "expected one error, got\n{errs}");
}

fn valid(text: &str) -> Config {
    match check(text) {
        Ok(c) => c,
        Err(e) => panic!("config should be valid:\n{e}"),
    }
}

// ---- the whole file ---------------------------------------------------

#[test]
fn base_is_valid_with_defaults_filled_in() {
    let c = valid(BASE);
    assert_eq!(c.dataplane.workers, [CORES - 1]);
    let p0 = &c.ports[0];
    assert_eq!(p0.driver, Driver::Pcap);
    assert_eq!(p0.rx.as_deref(), Some(Path::new("/cfg/in0.pcap")));
    assert_eq!(p0.mtu, 1500);
    assert_eq!(p0.queues, 1);
    assert_eq!(
        c.ports[1].tx.as_deref(),
        Some(Path::new("/captures/out1.pcap"))
    );
    let red = &c.routers[0];
    assert_eq!(red.limits, Limits::default());
    assert_eq!(red.control, None);
    let red0 = &red.interfaces[0];
    assert_eq!(red0.port, 0);
    assert_eq!(red0.vlan, None);
    assert_eq!(red0.mtu, 1500, "inherits the port's MTU");
    assert_eq!(
        red0.mac,
        Some([2, 0, 0, 0, 0, 1]),
        "inherits the port's MAC"
    );
    assert_eq!(red0.addresses[0].to_string(), "10.0.0.1/24");
}

#[test]
fn example_is_valid() {
    let c = check_with(EXAMPLE, &[(EXAMPLE_ROUTES_FILE_NAME, EXAMPLE_ROUTES_FILE)])
        .unwrap_or_else(|e| panic!("EXAMPLE is invalid:\n{e}"));
    assert_eq!(c.dataplane.workers, [0]);
    assert_eq!(c.ports.len(), 2);
    let red = c.router("red").unwrap();
    let blue = c.router("blue").unwrap();
    // Inline routes first, then the routes file in line order.
    let routes: Vec<String> = red.routes.iter().map(ToString::to_string).collect();
    assert_eq!(
        routes,
        [
            "0.0.0.0/0 10.0.0.254",
            "::/0 2001:db8:a::fe",
            "10.66.0.0/16 blackhole",
            "2001:db8:dead::/48 unreachable",
            "198.51.100.0/24 10.0.0.253",
            "203.0.113.0/24 blackhole",
            "2001:db8:beef::/48 2001:db8:a::fd",
            "2001:db8:f00::/40 unreachable",
        ]
    );
    assert_eq!(red.interfaces[0].filters.input.as_deref(), Some("edge"));
    assert_eq!(red.filters[0].rules.len(), 2);
    assert_eq!(red.filters[0].rules[0].dst_port, Some(PortRange::one(23)));
    let mgmt = &red.interfaces[1];
    assert_eq!((mgmt.vlan, mgmt.mtu), (Some(100), 1400));
    assert_eq!(mgmt.mac, Some([2, 0, 0, 0, 0, 0x64]));
    assert_eq!(red.neighbors.len(), 2);
    assert_eq!(red.control.as_ref().unwrap().netns, "vr-red");
    assert_eq!(blue.interfaces[0].mtu, 9000);
    assert_eq!(blue.limits, Limits::default());
    assert_eq!(
        red.interfaces[0].addresses[0],
        blue.interfaces[0].addresses[0]
    );
}

#[test]
fn syntax_errors_give_line_and_column() {
    only(
        "[[port]]\nname = \"p0\"\nmtu = = 3\n",
        "config",
        "line 3, column 7",
    );
}

#[test]
fn unknown_keys_are_named() {
    only(
        &edit(
            "mac = \"02:00:00:00:00:01\"",
            "mac = \"02:00:00:00:00:01\"\nspeed = 10",
        ),
        "port \"p0\".speed",
        "unknown key; expected one of",
    );
    only(
        &with("  colour = \"red\"\n"),
        "router \"red\".interface \"red0\".colour",
        "unknown key",
    );
    only(
        &with("[router.limitz]\n"),
        "router \"red\".limitz",
        "unknown key",
    );
    only(&format!("verbose = true\n{BASE}"), "verbose", "unknown key");
}

#[test]
fn wrong_types_are_named() {
    only(
        &edit(
            "mac = \"02:00:00:00:00:01\"",
            "mac = \"02:00:00:00:00:01\"\nmtu = \"1500\"",
        ),
        "port \"p0\".mtu",
        "expected an integer",
    );
}

#[test]
fn every_error_is_reported_not_just_the_first() {
    let text = with(
        r#"
  [[router.interface]]
  name = "red1"
  port = "p9"
  vlan = 0
  [[router.route]]
  prefix = "10.9.0.0/16"
  via = "10.9.9.9"
"#,
    )
    .replace("rx = \"in0.pcap\"\n", "rx = \"in0.pcap\"\nqueues = 0\n");
    let errs = errors(&text);
    let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "port \"p0\".queues",
            "router \"red\".interface \"red1\".port",
            "router \"red\".interface \"red1\".vlan",
            "router \"red\".route[0].via",
        ]
    );
}

#[test]
fn errors_display_one_per_line() {
    let errs = errors(&edit(
        "driver = \"pcap\"\nrx",
        "driver = \"pcap\"\nqueues = 99\nmtu = 1\nrx",
    ));
    let text = errs.to_string();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "port \"p0\".mtu: 1 is outside 68..=9000 (68 is the IPv4 minimum, RFC 791; 9000 the jumbo-frame maximum)",
            "port \"p0\".queues: 99 is outside 1..=64 (one queue per worker is the useful maximum)",
        ]
    );
}

#[test]
fn empty_config_is_valid() {
    let c = valid("");
    assert!(c.ports.is_empty() && c.routers.is_empty());
}

// ---- names ------------------------------------------------------------

#[test]
fn duplicate_port_names() {
    only(
        &edit("name = \"p1\"", "name = \"p0\""),
        "port[1].name",
        "duplicate port name \"p0\"; port[0] has it too",
    );
}

#[test]
fn duplicate_router_names() {
    only(
        &with("[[router]]\nname = \"red\"\n"),
        "router[1].name",
        "duplicate router name \"red\"; router[0] has it too",
    );
}

#[test]
fn duplicate_interface_names() {
    only(
        &with("  [[router.interface]]\n  name = \"red0\"\n  port = \"p1\"\n"),
        "router \"red\".interface[1].name",
        "duplicate interface name \"red0\" in router red; interface[0] has it too",
    );
}

#[test]
fn missing_names_are_keyed_by_index() {
    only(
        &edit("name = \"p1\"\n", ""),
        "port[1].name",
        "missing; every [[port]] needs a unique name",
    );
    only(
        &with("[[router]]\n[[router.interface]]\nname = \"x\"\nport = \"p1\"\n"),
        "router[1].name",
        "missing",
    );
}

#[test]
fn bad_names() {
    only(
        &edit("name = \"red\"", "name = \"red team\""),
        "router[0].name",
        "contains ' '",
    );
    only(
        &edit("name = \"red0\"", "name = \"a-very-long-ifname\""),
        "router \"red\".interface[0].name",
        "at most 15",
    );
}

#[test]
fn interface_references_unknown_port() {
    only(
        &edit("port = \"p0\"", "port = \"p9\""),
        "router \"red\".interface \"red0\".port",
        "no port named \"p9\"; ports are \"p0\", \"p1\"",
    );
}

#[test]
fn a_bad_port_is_still_found_by_name() {
    // The port's own error is reported once; its interface does not add
    // "no port named".
    only(
        &edit("driver = \"pcap\"\nrx", "driver = \"pcapng\"\nrx"),
        "port \"p0\".driver",
        "unknown driver \"pcapng\"",
    );
}

// ---- MAC addresses ----------------------------------------------------

#[test]
fn malformed_mac() {
    only(
        &edit("02:00:00:00:00:01", "02:00:00:00:00"),
        "port \"p0\".mac",
        "\"02:00:00:00:00\" is not a MAC address",
    );
    only(
        &with("  mac = \"02:00:00:00:00:zz\"\n"),
        "router \"red\".interface \"red0\".mac",
        "is not a MAC address",
    );
}

#[test]
fn port_mac_must_be_unicast() {
    only(
        &edit("02:00:00:00:00:01", "01:00:5e:00:00:01"),
        "port \"p0\".mac",
        "01:00:5e:00:00:01 is a multicast or broadcast address; a port MAC must be unicast",
    );
}

// ---- addresses and prefixes ---------------------------------------------

#[test]
fn malformed_interface_address() {
    only(
        &edit("\"10.0.0.1/24\"", "\"10.0.0.300/24\""),
        "router \"red\".interface \"red0\".addresses[0]",
        "\"10.0.0.300\" is not an IP address",
    );
    only(
        &edit("\"10.0.0.1/24\"", "\"10.0.0.1\""),
        "router \"red\".interface \"red0\".addresses[0]",
        "has no prefix length",
    );
}

#[test]
fn malformed_route_prefix() {
    only(
        &with("  [[router.route]]\n  prefix = \"10.0.0/8\"\n  blackhole = true\n"),
        "router \"red\".route[0].prefix",
        "\"10.0.0\" is not an IP address",
    );
}

#[test]
fn prefix_with_host_bits_suggests_masked_form() {
    only(
        &with("  [[router.route]]\n  prefix = \"10.1.2.3/16\"\n  blackhole = true\n"),
        "router \"red\".route[0].prefix",
        "host bits are set in 10.1.2.3/16; did you mean 10.1.0.0/16?",
    );
}

#[test]
fn prefix_length_out_of_range() {
    only(
        &with("  [[router.route]]\n  prefix = \"10.0.0.0/33\"\n  blackhole = true\n"),
        "router \"red\".route[0].prefix",
        "prefix length 33 is out of range 0..=32 for IPv4",
    );
    only(
        &edit("2001:db8::1/64", "2001:db8::1/129"),
        "router \"red\".interface \"red0\".addresses[1]",
        "out of range 0..=128 for IPv6",
    );
}

#[test]
fn interface_address_is_not_network_or_broadcast() {
    only(
        &edit("10.0.0.1/24", "10.0.0.0/24"),
        "router \"red\".interface \"red0\".addresses[0]",
        "10.0.0.0 is the network address of 10.0.0.0/24; use a host address such as 10.0.0.1/24",
    );
    only(
        &edit("10.0.0.1/24", "10.0.0.255/24"),
        "router \"red\".interface \"red0\".addresses[0]",
        "10.0.0.255 is the broadcast address of 10.0.0.0/24",
    );
    only(
        &edit("10.0.0.1/24", "10.0.0.3/30"),
        "router \"red\".interface \"red0\".addresses[0]",
        "broadcast address of 10.0.0.0/30",
    );
    only(
        &edit("2001:db8::1/64", "2001:db8::/64"),
        "router \"red\".interface \"red0\".addresses[1]",
        "Subnet-Router anycast address of 2001:db8::/64",
    );
    // RFC 3021 /31s, host /32s and RFC 6164 /127s use every address.
    for a in ["10.0.0.0/31", "10.0.0.1/31", "10.0.0.0/32", "10.0.0.255/32"] {
        valid(&edit("10.0.0.1/24", a));
    }
    valid(&edit("2001:db8::1/64", "2001:db8::/127"));
}

#[test]
fn interface_address_is_not_special() {
    only(
        &edit("10.0.0.1/24", "224.0.0.1/24"),
        "router \"red\".interface \"red0\".addresses[0]",
        "224.0.0.1 is a multicast address",
    );
    only(
        &edit("10.0.0.1/24", "10.0.0.1/0"),
        "router \"red\".interface \"red0\".addresses[0]",
        "claims every address as on-link",
    );
}

#[test]
fn duplicate_address_within_a_router() {
    only(
        &edit("\"10.0.0.1/24\", ", "\"10.0.0.1/24\", \"10.0.0.1/24\", "),
        "router \"red\".interface \"red0\".addresses[1]",
        "10.0.0.1 is listed twice on this interface",
    );
    let errs = errors(&with(
        "  [[router.interface]]\n  name = \"red1\"\n  port = \"p1\"\n  addresses = [\"10.0.0.1/32\"]\n",
    ));
    has(
        &errs,
        "router \"red\".interface \"red1\".addresses[0]",
        "10.0.0.1 is already assigned to router \"red\".interface \"red0\"",
    );
}

#[test]
fn overlapping_subnets_on_two_interfaces() {
    only(
        &with(
            "  [[router.interface]]\n  name = \"red1\"\n  port = \"p1\"\n  addresses = [\"10.0.0.129/25\"]\n",
        ),
        "router \"red\".interface \"red1\".addresses",
        "subnet 10.0.0.128/25 of 10.0.0.129/25 overlaps subnet 10.0.0.0/24 of 10.0.0.1/24 on router \"red\".interface \"red0\"",
    );
    // Secondary addresses on one interface may share a subnet.
    valid(&edit(
        "\"10.0.0.1/24\", ",
        "\"10.0.0.1/24\", \"10.0.0.2/24\", ",
    ));
    // Two routers may use the same subnet.
    valid(&with(
        "[[router]]\nname = \"blue\"\n  [[router.interface]]\n  name = \"blue0\"\n  port = \"p1\"\n  addresses = [\"10.0.0.1/24\"]\n",
    ));
}

// ---- VLANs and (port, VLAN) sharing ----------------------------------------

#[test]
fn vlan_out_of_range() {
    for v in [0, 4095, -1, 70000] {
        only(
            &with(&format!("  vlan = {v}\n")),
            "router \"red\".interface \"red0\".vlan",
            &format!("{v} is outside 1..=4094"),
        );
    }
    valid(&with("  vlan = 4094\n"));
}

#[test]
fn two_interfaces_on_the_same_port_and_vlan() {
    only(
        &with(
            "[[router]]\nname = \"blue\"\n  [[router.interface]]\n  name = \"blue0\"\n  port = \"p0\"\n",
        ),
        "router \"blue\".interface \"blue0\".port",
        "port \"p0\" untagged is already used by router \"red\".interface \"red0\"",
    );
    let two_vlan_100 = "  [[router.interface]]\n  name = \"red1\"\n  port = \"p1\"\n  vlan = 100\n\
        [[router]]\nname = \"blue\"\n  [[router.interface]]\n  name = \"blue0\"\n  port = \"p1\"\n  vlan = 100\n";
    only(
        &with(two_vlan_100),
        "router \"blue\".interface \"blue0\".vlan",
        "port \"p1\" VLAN 100 is already used by router \"red\".interface \"red1\"",
    );
    // Other VLANs of the same port, and the same VLAN on another port, are fine.
    valid(&with(&two_vlan_100.replacen("vlan = 100", "vlan = 101", 1)));
    valid(&with(&two_vlan_100.replacen(
        "port = \"p1\"",
        "port = \"p0\"",
        1,
    )));
}

#[test]
fn qinq_interfaces_share_an_outer_vlan_by_inner_vlan() {
    let two = |inner_a: u16, inner_b: u16| {
        format!(
            "  [[router.interface]]\n  name = \"red1\"\n  port = \"p1\"\n  vlan = 100\n  inner_vlan = {inner_a}\n  vlan_tpid = \"0x88a8\"\n\
             [[router]]\nname = \"blue\"\n  [[router.interface]]\n  name = \"blue0\"\n  port = \"p1\"\n  vlan = 100\n  inner_vlan = {inner_b}\n"
        )
    };
    let c = valid(&with(&two(200, 201)));
    let red1 = &c.routers[0].interfaces[1];
    assert_eq!(
        (red1.vlan, red1.inner_vlan, red1.tpid),
        (Some(100), Some(200), Tpid::Dot1ad)
    );
    assert_eq!(c.routers[1].interfaces[0].tpid, Tpid::Dot1q);
    only(
        &with(&two(200, 200)),
        "router \"blue\".interface \"blue0\".inner_vlan",
        "port \"p1\" VLAN 100 inner VLAN 200 is already used by router \"red\".interface \"red1\"",
    );
    // A plain VLAN 100 and QinQ under 100 do not clash (one tag or two).
    valid(&with(
        "  [[router.interface]]\n  name = \"red1\"\n  port = \"p1\"\n  vlan = 100\n\
         [[router]]\nname = \"blue\"\n  [[router.interface]]\n  name = \"blue0\"\n  port = \"p1\"\n  vlan = 100\n  inner_vlan = 7\n",
    ));
    only(
        &with("  inner_vlan = 5\n"),
        "router \"red\".interface \"red0\".inner_vlan",
        "needs vlan, the outer tag",
    );
    only(
        &with("  vlan = 5\n  inner_vlan = 4095\n"),
        "router \"red\".interface \"red0\".inner_vlan",
        "4095 is outside 1..=4094",
    );
    only(
        &with("  vlan = 5\n  vlan_tpid = \"0x9100\"\n"),
        "router \"red\".interface \"red0\".vlan_tpid",
        "\"0x9100\" is not a TPID",
    );
    only(
        &with("  vlan_tpid = \"0x88a8\"\n"),
        "router \"red\".interface \"red0\".vlan_tpid",
        "needs vlan",
    );
}

// ---- ports --------------------------------------------------------------

const MEMORY: &str = "[[port]]\nname = \"m\"\ndriver = \"memory\"\nrx = \"bench.pcap\"\nmac = \"02:00:00:00:00:0a\"\n";

#[test]
fn memory_port_requires_mac_and_rx() {
    valid(&format!("{BASE}{MEMORY}"));
    only(
        &format!(
            "{BASE}{}",
            MEMORY.replace("mac = \"02:00:00:00:00:0a\"\n", "")
        ),
        "port \"m\".mac",
        "missing; a memory port has no Linux interface to take a MAC from",
    );
    // Without rx a memory port only transmits: the egress side of a benchmark.
    assert!(Config::from_toml_str_with_cores(
        &format!("{BASE}{}", MEMORY.replace("rx = \"bench.pcap\"\n", "")),
        Path::new("."),
        64
    )
    .is_ok());
    only(
        &format!("{BASE}{MEMORY}tx = \"x.pcap\"\n"),
        "port \"m\".tx",
        "a memory port counts and discards what it sends",
    );
}

#[test]
fn pcap_port_requires_mac_and_a_file() {
    only(
        &edit("rx = \"in0.pcap\"\n", ""),
        "port \"p0\"",
        "a pcap port needs rx (a file to read), tx (a file to write) or both",
    );
    only(
        &edit("mac = \"02:00:00:00:00:02\"\n", ""),
        "port \"p1\".mac",
        "missing; a pcap port has no Linux interface",
    );
    only(
        &edit(
            "rx = \"in0.pcap\"\n",
            "rx = \"in0.pcap\"\ninterface = \"eth0\"\n",
        ),
        "port \"p0\".interface",
        "a pcap port has no Linux interface",
    );
    only(
        &edit("rx = \"in0.pcap\"", "rx = \"\""),
        "port \"p0\".rx",
        "must not be empty",
    );
}

#[test]
fn af_packet_and_af_xdp_ports_require_an_interface() {
    for driver in ["af_packet", "af_xdp"] {
        let port = format!("[[port]]\nname = \"x\"\ndriver = \"{driver}\"\n");
        only(
            &format!("{BASE}{port}"),
            "port \"x\".interface",
            &format!("missing; an {driver} port attaches to a Linux interface"),
        );
        let c = valid(&format!("{BASE}{port}interface = \"veth0\"\n"));
        assert_eq!(c.ports[2].interface.as_deref(), Some("veth0"));
        assert_eq!(
            c.ports[2].mac, None,
            "MAC defaults to the Linux interface's"
        );
        only(
            &format!("{BASE}{port}interface = \"veth0\"\nrx = \"a.pcap\"\n"),
            "port \"x\".rx",
            "only memory and pcap ports read or write them",
        );
        only(
            &format!("{BASE}{port}interface = \"veth/0\"\n"),
            "port \"x\".interface",
            "which Linux does not allow",
        );
    }
    valid(&format!("{BASE}[[port]]\nname = \"t\"\ndriver = \"tap\"\n"));
    let c = valid(&format!(
        "{BASE}[[port]]\nname = \"t\"\ndriver = \"tap\"\ninterface = \"eth0\"\nnetns = \"lab-h1\"\n"
    ));
    assert_eq!(c.ports[2].netns.as_deref(), Some("lab-h1"));
    only(
        &format!("{BASE}[[port]]\nname = \"t\"\ndriver = \"tap\"\nnetns = \"a/b\"\n"),
        "port \"t\".netns",
        "namespace name",
    );
    only(
        &format!("{BASE}[[port]]\nname = \"x\"\ndriver = \"af_packet\"\ninterface = \"v0\"\nnetns = \"ns1\"\n"),
        "port \"x\".netns",
        "only a tap port is made in another namespace",
    );
}

/// An af_packet-only switch `key`: `default` for an af_packet port, false
/// for a pcap one, the other value when given; a tap port given it is
/// refused (`refusal` in the message), and so is a value that is no bool.
fn af_packet_only_switch(key: &str, default: bool, get: fn(&Port) -> bool, refusal: &str) {
    let port = "[[port]]\nname = \"x\"\ndriver = \"af_packet\"\ninterface = \"v0\"\n";
    let c = valid(&format!("{BASE}{port}"));
    assert_eq!(get(&c.ports[2]), default, "{key}: the default");
    assert!(!get(&c.ports[0]), "{key}: never for a pcap port");
    let c = valid(&format!("{BASE}{port}{key} = {}\n", !default));
    assert_eq!(get(&c.ports[2]), !default, "{key} given");
    only(
        &format!("{BASE}[[port]]\nname = \"t\"\ndriver = \"tap\"\n{key} = {default}\n"),
        &format!("port \"t\".{key}"),
        refusal,
    );
    only(
        &format!("{BASE}{port}{key} = 1\n"),
        &format!("port \"x\".{key}"),
        "",
    );
}

#[test]
fn only_af_packet_ports_have_a_control_queue() {
    af_packet_only_switch(
        "control_queue",
        true,
        |p| p.control_queue,
        "a tap port has no control queue",
    );
}

#[test]
fn only_af_packet_ports_share_frames_with_the_host_stack() {
    af_packet_only_switch(
        "host_stack",
        false,
        |p| p.host_stack,
        "only an af_packet port shares its frames",
    );
}

#[test]
fn only_af_packet_ports_steer_their_interfaces_receive_work() {
    af_packet_only_switch("rps", true, |p| p.rps, "only an af_packet port steers");
}

#[test]
fn missing_driver() {
    only(
        &edit("driver = \"pcap\"\nrx", "rx"),
        "port \"p0\".driver",
        "missing; one of memory, pcap",
    );
}

#[test]
fn port_mtu_range() {
    for mtu in [67, 9001, 0, -5] {
        only(
            &edit(
                "rx = \"in0.pcap\"\n",
                &format!("rx = \"in0.pcap\"\nmtu = {mtu}\n"),
            ),
            "port \"p0\".mtu",
            &format!("{mtu} is outside 68..=9000 (68 is the IPv4 minimum, RFC 791"),
        );
    }
    // 68 is fine for an IPv4-only port.
    valid(
        &edit("rx = \"in0.pcap\"\n", "rx = \"in0.pcap\"\nmtu = 68\n")
            .replace(", \"2001:db8::1/64\"", ""),
    );
}

#[test]
fn port_queues_range() {
    for q in [0, 65] {
        only(
            &edit(
                "rx = \"in0.pcap\"\n",
                &format!("rx = \"in0.pcap\"\nqueues = {q}\n"),
            ),
            "port \"p0\".queues",
            &format!("{q} is outside 1..=64"),
        );
    }
    let c = valid(&edit(
        "rx = \"in0.pcap\"\n",
        "rx = \"in0.pcap\"\nqueues = 64\n",
    ));
    assert_eq!(c.ports[0].queues, 64);
}

// ---- interface MTU ------------------------------------------------------

#[test]
fn interface_mtu_at_most_the_port_mtu() {
    only(
        &with("  mtu = 1600\n"),
        "router \"red\".interface \"red0\".mtu",
        "1600 is outside 68..=1500 (68 is the IPv4 minimum, RFC 791; 1500 is the MTU of port \"p0\")",
    );
    let c = valid(&with("  mtu = 1400\n"));
    assert_eq!(c.routers[0].interfaces[0].mtu, 1400);
}

#[test]
fn interface_with_ipv6_needs_mtu_1280() {
    only(
        &with("  mtu = 1200\n"),
        "router \"red\".interface \"red0\".mtu",
        "1200 is below 1280, the IPv6 minimum link MTU (RFC 8200 §5), and the interface has IPv6 address 2001:db8::1/64",
    );
    only(
        &edit("rx = \"in0.pcap\"\n", "rx = \"in0.pcap\"\nmtu = 1000\n"),
        "router \"red\".interface \"red0\".mtu",
        "1000 (inherited from port \"p0\") is below 1280",
    );
    valid(&with("  mtu = 1280\n"));
}

// ---- interface uRPF -----------------------------------------------------

#[test]
fn interface_urpf_is_off_loose_or_strict() {
    assert_eq!(valid(BASE).routers[0].interfaces[0].urpf, Urpf::Off);
    for (word, want) in [
        ("off", Urpf::Off),
        ("loose", Urpf::Loose),
        ("strict", Urpf::Strict),
    ] {
        let c = valid(&with(&format!("  urpf = \"{word}\"\n")));
        assert_eq!(c.routers[0].interfaces[0].urpf, want, "{word}");
    }
    only(
        &with("  urpf = \"yes\"\n"),
        "router \"red\".interface \"red0\".urpf",
        "`yes` is not one of off, loose, strict: the reverse-path check (RFC 3704)",
    );
}

// ---- filters -------------------------------------------------------------

const FILTERS: &str = r#"  filter_in = "edge"
  [[router.filter]]
  name = "edge"
  default = "deny"
    [[router.filter.rule]]
    action = "permit"
    src = "192.0.2.0/24"
    protocol = "tcp"
    dst_port = "1024-65535"
    [[router.filter.rule]]
    action = "deny"
    dst = "2001:db8::/32"
    protocol = 58
    icmp_type = 128
    icmp_code = 0
    [[router.filter.rule]]
    action = "permit"
    protocol = "udp"
    src_port = 53
    pcp = 5
"#;

#[test]
fn filters_parse_into_rule_lists_the_interfaces_name() {
    let c = valid(&with(FILTERS));
    let r = &c.routers[0];
    assert_eq!(r.interfaces[0].filters.input.as_deref(), Some("edge"));
    assert_eq!(r.interfaces[0].filters.output, None);
    let f = &r.filters[0];
    assert_eq!((f.name.as_str(), f.default), ("edge", Action::Deny));
    assert_eq!(f.rules.len(), 3);
    assert_eq!(f.rules[0].action, Action::Permit);
    assert_eq!(f.rules[0].src, Some("192.0.2.0/24".parse().unwrap()));
    assert_eq!(f.rules[0].protocol, Some(6));
    assert_eq!(
        f.rules[0].dst_port,
        Some(PortRange {
            lo: 1024,
            hi: 65535
        })
    );
    assert_eq!(
        (
            f.rules[1].protocol,
            f.rules[1].icmp_type,
            f.rules[1].icmp_code
        ),
        (Some(58), Some(128), Some(0))
    );
    assert_eq!(f.rules[2].src_port, Some(PortRange::one(53)));
    assert_eq!(f.rules[2].pcp, Some(5));
    // The default of a list without one is permit.
    let c = valid(&with("  [[router.filter]]\n  name = \"open\"\n"));
    assert_eq!(c.routers[0].filters[0].default, Action::Permit);
}

#[test]
fn each_bad_filter_key_is_named_with_its_reason() {
    let rule = |body: &str| {
        with(&format!(
            "  [[router.filter]]\n  name = \"f\"\n    [[router.filter.rule]]\n{body}"
        ))
    };
    let key = |k: &str| format!("router \"red\".filter \"f\".rule[0].{k}");
    for (body, k, why) in [
        (
            "    action = \"allow\"\n",
            "action",
            "neither \"permit\" nor \"deny\"",
        ),
        ("    protocol = \"tcp\"\n", "action", "missing"),
        (
            "    action = \"deny\"\n    src = \"10.0.0.1/8\"\n",
            "src",
            "10.0.0.0/8",
        ),
        (
            "    action = \"deny\"\n    protocol = \"tcpp\"\n",
            "protocol",
            "not a protocol",
        ),
        (
            "    action = \"deny\"\n    protocol = 300\n",
            "protocol",
            "not a protocol",
        ),
        (
            "    action = \"deny\"\n    protocol = \"tcp\"\n    dst_port = 70000\n",
            "dst_port",
            "not a port",
        ),
        (
            "    action = \"deny\"\n    protocol = \"tcp\"\n    dst_port = \"90-80\"\n",
            "dst_port",
            "first port is above",
        ),
        (
            "    action = \"deny\"\n    dst_port = 80\n",
            "dst_port",
            "ports need protocol",
        ),
        (
            "    action = \"deny\"\n    protocol = \"gre\"\n    src_port = 80\n",
            "src_port",
            "ports need protocol",
        ),
        (
            "    action = \"deny\"\n    icmp_type = 8\n",
            "icmp_type",
            "needs protocol = \"icmp\"",
        ),
        (
            "    action = \"deny\"\n    protocol = \"icmp\"\n    icmp_code = 1\n",
            "icmp_code",
            "needs icmp_type",
        ),
        ("    action = \"deny\"\n    pcp = 8\n", "pcp", "outside 0-7"),
        (
            "    action = \"deny\"\n    src = \"10.0.0.0/8\"\n    dst = \"2001:db8::/32\"\n",
            "dst",
            "other family",
        ),
        (
            "    action = \"deny\"\n    port = 80\n",
            "port",
            "unknown key",
        ),
    ] {
        only(&rule(body), &key(k), why);
    }
    only(
        &with("  [[router.filter]]\n  name = \"f\"\n  default = \"drop\"\n"),
        "router \"red\".filter \"f\".default",
        "neither \"permit\" nor \"deny\"",
    );
    only(
        &with("  [[router.filter]]\n  default = \"deny\"\n"),
        "router \"red\".filter[0].name",
        "missing",
    );
    only(
        &with("  [[router.filter]]\n  name = \"f\"\n  [[router.filter]]\n  name = \"f\"\n"),
        "router \"red\".filter[1].name",
        "duplicate filter name \"f\"; router \"red\".filter \"f\" has it too",
    );
}

#[test]
fn a_router_holds_a_bounded_number_of_filters_and_rules() {
    let lists: String = (0..65)
        .map(|k| format!("  [[router.filter]]\n  name = \"f{k}\"\n"))
        .collect();
    only(
        &with(&lists),
        "router \"red\".filter",
        "65 filters with 0 rules in all; a router may have at most 64 filters and 4096 rules in all",
    );
    let rules: String = (0..4097)
        .map(|_| "    [[router.filter.rule]]\n    action = \"deny\"\n")
        .collect();
    let text = with(&format!("  [[router.filter]]\n  name = \"f\"\n{rules}"));
    let errs = errors(&text);
    has(&errs, "router \"red\".filter", "4097 rules in all");
    has(
        &errs,
        "router \"red\".filter \"f\".rule",
        "4097 rules; a filter holds at most 4096",
    );
}

#[test]
fn an_interface_names_only_its_routers_filters() {
    only(
        &with("  filter_out = \"nope\"\n"),
        "router \"red\".interface \"red0\".filter_out",
        "no filter \"nope\"; the router has no [[router.filter]]",
    );
    only(
        &with("  filter_in = \"nope\"\n  [[router.filter]]\n  name = \"edge\"\n"),
        "router \"red\".interface \"red0\".filter_in",
        "no filter \"nope\"; the router's filters are \"edge\"",
    );
}

// ---- routes --------------------------------------------------------------

fn route(body: &str) -> String {
    with(&format!("  [[router.route]]\n{body}"))
}

#[test]
fn route_via_must_be_on_an_interface_subnet() {
    only(
        &route("  prefix = \"10.9.0.0/16\"\n  via = \"10.9.9.9\"\n"),
        "router \"red\".route[0].via",
        "no interface subnet of router red covers 10.9.9.9",
    );
    only(
        &route("  prefix = \"10.9.0.0/16\"\n  via = \"10.0.0.1\"\n"),
        "router \"red\".route[0].via",
        "10.0.0.1 is this router's own address",
    );
    let c = valid(&route("  prefix = \"10.9.0.0/16\"\n  via = \"10.0.0.9\"\n"));
    assert_eq!(
        c.routers[0].routes,
        [Route {
            prefix: "10.9.0.0/16".parse().unwrap(),
            target: RouteTarget::Via("10.0.0.9".parse().unwrap()),
        }]
    );
}

#[test]
fn route_via_takes_a_list_with_optional_weights() {
    let c = valid(&route(
        "  prefix = \"10.9.0.0/16\"\n  via = [\"10.0.0.9\", \"10.0.0.8\"]\n  weights = [1, 3]\n",
    ));
    let p = |via: &str, weight| crate::Path {
        via: via.parse().unwrap(),
        weight,
    };
    assert_eq!(
        c.routers[0].routes[0].target.paths().collect::<Vec<_>>(),
        [p("10.0.0.8", 3), p("10.0.0.9", 1)]
    );
    // A list of one is a plain route.
    let c = valid(&route(
        "  prefix = \"10.9.0.0/16\"\n  via = [\"10.0.0.9\"]\n",
    ));
    assert_eq!(
        c.routers[0].routes[0].target,
        RouteTarget::Via("10.0.0.9".parse().unwrap())
    );
    let key = "router \"red\".route[0]";
    for (body, field, why) in [
        (
            "via = [\"10.0.0.9\", \"10.0.0.9\"]",
            "via",
            "next hop 10.0.0.9 given twice",
        ),
        (
            "via = [\"10.0.0.9\", \"10.9.9.9\"]",
            "via",
            "no interface subnet of router red covers 10.9.9.9",
        ),
        ("via = []", "via", "no next hop"),
        (
            "via = [\"10.0.0.9\", \"10.0.0.8\"]\n  weights = [1]",
            "weights",
            "has 1 weights for 2 next hops",
        ),
        (
            "via = [\"10.0.0.9\", \"10.0.0.8\"]\n  weights = [0, 1]",
            "weights",
            "has weight 0",
        ),
        (
            "via = [\"10.0.0.9\", \"10.0.0.8\"]\n  weights = [1, 70000]",
            "weights",
            "70000 is outside 1-65535",
        ),
        (
            "via = \"10.0.0.9\"\n  weights = [2]",
            "weights",
            "only with a list of next hops",
        ),
        (
            "via = 7",
            "via",
            "expected an address or an array of addresses",
        ),
    ] {
        only(
            &route(&format!("  prefix = \"10.9.0.0/16\"\n  {body}\n")),
            &format!("{key}.{field}"),
            why,
        );
    }
}

#[test]
fn route_via_family_must_match_prefix() {
    only(
        &route("  prefix = \"0.0.0.0/0\"\n  via = \"2001:db8::9\"\n"),
        "router \"red\".route[0].via",
        "next hop 2001:db8::9 is IPv6 but prefix 0.0.0.0/0 is IPv4",
    );
    only(
        &route("  prefix = \"::/0\"\n  via = \"10.0.0.9\"\n"),
        "router \"red\".route[0].via",
        "next hop 10.0.0.9 is IPv4 but prefix ::/0 is IPv6",
    );
}

#[test]
fn route_needs_exactly_one_target() {
    only(
        &route("  prefix = \"10.9.0.0/16\"\n"),
        "router \"red\".route[0]",
        "has no target; give one of via",
    );
    only(
        &route("  prefix = \"10.9.0.0/16\"\n  blackhole = false\n"),
        "router \"red\".route[0]",
        "has no target",
    );
    only(
        &route("  prefix = \"10.9.0.0/16\"\n  via = \"10.0.0.9\"\n  blackhole = true\n"),
        "router \"red\".route[0]",
        "has via and blackhole; give exactly one of via, blackhole, unreachable",
    );
    only(
        &route("  prefix = \"10.9.0.0/16\"\n  blackhole = true\n  unreachable = true\n"),
        "router \"red\".route[0]",
        "has blackhole and unreachable",
    );
    let c = valid(&route(
        "  prefix = \"10.9.0.0/16\"\n  unreachable = true\n  blackhole = false\n",
    ));
    assert_eq!(c.routers[0].routes[0].target, RouteTarget::Unreachable);
}

#[test]
fn route_prefix_is_required() {
    only(
        &route("  blackhole = true\n"),
        "router \"red\".route[0].prefix",
        "missing",
    );
}

#[test]
fn duplicate_inline_prefixes() {
    let r = "  [[router.route]]\n  prefix = \"10.9.0.0/16\"\n  blackhole = true\n";
    only(
        &with(&format!("{r}{r}")),
        "router \"red\".route[1].prefix",
        "duplicate prefix 10.9.0.0/16; also at router \"red\".route[0]",
    );
}

// ---- neighbours --------------------------------------------------------

fn neighbor(address: &str, mac: &str) -> String {
    with(&format!(
        "  [[router.neighbor]]\n  address = \"{address}\"\n  mac = \"{mac}\"\n"
    ))
}

#[test]
fn neighbor_must_be_on_an_interface_subnet() {
    only(
        &neighbor("10.9.9.9", "02:00:00:00:00:fe"),
        "router \"red\".neighbor[0].address",
        "no interface subnet of router red covers 10.9.9.9",
    );
    only(
        &neighbor("10.0.0.1", "02:00:00:00:00:fe"),
        "router \"red\".neighbor[0].address",
        "10.0.0.1 is this router's own address",
    );
    let c = valid(&neighbor("2001:db8::fe", "02:00:00:00:00:fe"));
    assert_eq!(
        c.routers[0].neighbors,
        [Neighbor {
            address: "2001:db8::fe".parse().unwrap(),
            mac: [2, 0, 0, 0, 0, 0xfe],
        }]
    );
}

#[test]
fn neighbor_mac_must_be_unicast() {
    only(
        &neighbor("10.0.0.9", "ff:ff:ff:ff:ff:ff"),
        "router \"red\".neighbor[0].mac",
        "ff:ff:ff:ff:ff:ff is a multicast or broadcast address; a neighbour's MAC must be unicast",
    );
    only(
        &neighbor("10.0.0.9", "33:33:00:00:00:01"),
        "router \"red\".neighbor[0].mac",
        "is a multicast or broadcast address",
    );
    only(
        &neighbor("10.0.0.9", "00:00:00:00:00:00"),
        "router \"red\".neighbor[0].mac",
        "00:00:00:00:00:00 is not a valid",
    );
}

#[test]
fn duplicate_neighbors() {
    let n = "  [[router.neighbor]]\n  address = \"10.0.0.9\"\n  mac = \"02:00:00:00:00:09\"\n";
    only(
        &with(&format!("{n}{n}")),
        "router \"red\".neighbor[1].address",
        "10.0.0.9 already has a static entry at neighbor[0]",
    );
}

#[test]
fn a_bad_interface_address_does_not_cascade_into_coverage_errors() {
    let text = edit("10.0.0.1/24", "10.0.0.1/2x")
        + "  [[router.route]]\n  prefix = \"0.0.0.0/0\"\n  via = \"10.0.0.9\"\n";
    only(
        &text,
        "router \"red\".interface \"red0\".addresses[0]",
        "prefix length \"2x\" is not a decimal number",
    );
}

// ---- workers ------------------------------------------------------------

#[test]
fn workers() {
    let c = valid(&format!("[dataplane]\nworkers = [0, 2, 1]\n{BASE}"));
    assert_eq!(c.dataplane.workers, [0, 2, 1]);
    only(
        &format!("[dataplane]\nworkers = []\n{BASE}"),
        "dataplane.workers",
        "lists no core",
    );
    only(
        &format!("[dataplane]\nworkers = [1, 2, 1]\n{BASE}"),
        "dataplane.workers[2]",
        "core 1 is listed twice",
    );
    only(
        &format!("[dataplane]\nworkers = [4]\n{BASE}"),
        "dataplane.workers[0]",
        "core 4 is not one this process may run on; it may run on cores 0-3",
    );
    only(
        &format!("[dataplane]\nworkers = [-1]\n{BASE}"),
        "dataplane.workers[0]",
        "core -1 is not one this process may run on",
    );
    // An empty [dataplane] keeps the default.
    let c = valid(&format!("[dataplane]\n{BASE}"));
    assert_eq!(c.dataplane.workers, [CORES - 1]);
}

// ---- control and limits ---------------------------------------------------

const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

#[test]
fn api_table() {
    let c = valid(&format!(
        "[api]\nsocket = \"run/api.sock\"\nlisten = \"127.0.0.1:8080\"\nadmin_token_sha256 = \"{}\"\n{BASE}",
        HASH.to_uppercase()
    ));
    let api = c.api.expect("api");
    assert_eq!(api.socket, Path::new("/cfg/run/api.sock"));
    assert_eq!(api.listen, Some("127.0.0.1:8080".parse().expect("addr")));
    assert_eq!(api.admin_token_sha256, HASH, "lowercased");
    let c = valid(&format!("[api]\nadmin_token_sha256 = \"{HASH}\"\n{BASE}"));
    assert_eq!(
        c.api.expect("api").socket,
        Path::new("/run/vrhost/api.sock")
    );
    assert_eq!(valid(BASE).api, None);
    // Beyond loopback, only with TLS.
    only(
        &format!("[api]\nlisten = \"0.0.0.0:8443\"\nadmin_token_sha256 = \"{HASH}\"\n{BASE}"),
        "api.listen",
        "give tls_cert and tls_key",
    );
    let c = valid(&format!(
        "[api]\nlisten = \"[::]:8443\"\ntls_cert = \"api.crt\"\ntls_key = \"api.key\"\nadmin_token_sha256 = \"{HASH}\"\n{BASE}"
    ));
    assert_eq!(
        c.api.expect("api").tls,
        Some(("/cfg/api.crt".into(), "/cfg/api.key".into()))
    );
    only(
        &format!("[api]\nlisten = \"127.0.0.1:8443\"\ntls_cert = \"api.crt\"\nadmin_token_sha256 = \"{HASH}\"\n{BASE}"),
        "api.tls_key",
        "missing",
    );
    only(
        &format!(
            "[api]\ntls_cert = \"a\"\ntls_key = \"b\"\nadmin_token_sha256 = \"{HASH}\"\n{BASE}"
        ),
        "api.tls_cert",
        "only means something with listen",
    );
    only(
        &format!("[api]\n{BASE}"),
        "api.admin_token_sha256",
        "missing",
    );
    only(
        &format!("[api]\nadmin_token_sha256 = \"secret\"\n{BASE}"),
        "api.admin_token_sha256",
        "not a SHA-256 digest",
    );
    only(
        &format!("[api]\nlisten = \"8080\"\nadmin_token_sha256 = \"{HASH}\"\n{BASE}"),
        "api.listen",
        "not ADDRESS:PORT",
    );
    only(
        &format!("[api]\nport = 1\nadmin_token_sha256 = \"{HASH}\"\n{BASE}"),
        "api.port",
        "unknown",
    );
}

#[test]
fn router_token_and_fpm() {
    let c = valid(&edit(
        "name = \"red\"\n",
        &format!("name = \"red\"\napi_token_sha256 = \"{HASH}\"\n"),
    ));
    assert_eq!(c.routers[0].api_token_sha256.as_deref(), Some(HASH));
    only(
        &edit(
            "name = \"red\"\n",
            "name = \"red\"\napi_token_sha256 = \"abc\"\n",
        ),
        "router \"red\".api_token_sha256",
        "not a SHA-256 digest",
    );
    // One hash for two tokens: the admin's and a router's, or two routers'.
    only(
        &format!(
            "[api]\nadmin_token_sha256 = \"{HASH}\"\n{}",
            edit(
                "name = \"red\"\n",
                &format!("name = \"red\"\napi_token_sha256 = \"{HASH}\"\n"),
            )
        ),
        "router \"red\".api_token_sha256",
        "the same hash as the admin token",
    );
    let other = "b".repeat(64);
    only(
        &format!(
            "{}[[router]]\nname = \"blue\"\napi_token_sha256 = \"{}\"\n",
            edit(
                "name = \"red\"\n",
                &format!("name = \"red\"\napi_token_sha256 = \"{other}\"\n"),
            ),
            other.to_uppercase()
        ),
        "router \"blue\".api_token_sha256",
        "the same hash as router \"red\".api_token_sha256",
    );
    let c = valid(&with(
        "  [router.control]\n  netns = \"vr-red\"\n  fpm = \"127.0.0.1:2620\"\n",
    ));
    assert_eq!(
        c.routers[0].control.as_ref().and_then(|c| c.fpm),
        Some("127.0.0.1:2620".parse().expect("addr"))
    );
    only(
        &with("  [router.control]\n  netns = \"vr-red\"\n  fpm = \"localhost\"\n"),
        "router \"red\".control.fpm",
        "not ADDRESS:PORT",
    );
    // Each inside its own namespace (the default), two routers may share
    // an address; in vrhost's own namespace they may not.
    let two = |fpm_in: &str| {
        with(&format!(
            "  [router.control]\n  netns = \"a\"\n  fpm = \"127.0.0.1:2620\"\n{fpm_in}[[router]]\nname = \"blue\"\n  [router.control]\n  netns = \"b\"\n  fpm = \"127.0.0.1:2620\"\n{fpm_in}"
        ))
    };
    valid(&two(""));
    only(
        &two("  fpm_in = \"host\"\n  fpm_peers = [\"198.18.0.2\"]\n"),
        "router \"blue\".control.fpm",
        "already the FPM listener",
    );
    let c = valid(&with(
        "  [router.control]\n  netns = \"a\"\n  fpm = \"198.18.0.1:2620\"\n  fpm_in = \"host\"\n  fpm_peers = [\"198.18.0.2\", \"2001:db8::2\"]\n",
    ));
    let control = c.routers[0].control.as_ref().expect("control");
    assert_eq!(control.fpm_in, FpmIn::Host);
    assert_eq!(control.fpm_peers.len(), 2);
    only(
        &with("  [router.control]\n  netns = \"a\"\n  fpm = \"198.18.0.1:2620\"\n  fpm_in = \"host\"\n"),
        "router \"red\".control.fpm_peers",
        "must name the addresses",
    );
    only(
        &with(
            "  [router.control]\n  netns = \"a\"\n  fpm = \"127.0.0.1:2620\"\n  fpm_in = \"vm\"\n",
        ),
        "router \"red\".control.fpm_in",
        "neither \"netns\"",
    );
    only(
        &with("  [router.control]\n  netns = \"a\"\n  fpm = \"127.0.0.1:2620\"\n  fpm_peers = [\"me\"]\n"),
        "router \"red\".control.fpm_peers[0]",
        "not an IP address",
    );
    only(
        &with("  [router.control]\n  netns = \"a\"\n  fpm_peers = [\"127.0.0.1\"]\n"),
        "router \"red\".control.fpm_peers",
        "only means something with fpm",
    );
}

#[test]
fn control_netns() {
    let c = valid(&with("  [router.control]\n  netns = \"vr-red\"\n"));
    assert_eq!(
        c.routers[0].control,
        Some(ControlPlane {
            netns: "vr-red".into(),
            fpm: None,
            fpm_in: FpmIn::Netns,
            fpm_peers: vec![],
        })
    );
    only(
        &with("  [router.control]\n"),
        "router \"red\".control.netns",
        "missing",
    );
    only(
        &with("  [router.control]\n  netns = \"../etc\"\n"),
        "router \"red\".control.netns",
        "contains '/'",
    );
    only(
        &with(
            "  [router.control]\n  netns = \"shared\"\n[[router]]\nname = \"blue\"\n  [router.control]\n  netns = \"shared\"\n",
        ),
        "router \"blue\".control.netns",
        "namespace \"shared\" is already used by router \"red\"",
    );
}

#[test]
fn limits() {
    let c = valid(&with(
        "  [router.limits]\n  icmp_rate = 0\n  punt_queue = 1024\n  arp_hold = 0\n  neighbor_timeout_ms = 5000\n",
    ));
    assert_eq!(
        c.routers[0].limits,
        Limits {
            icmp_rate: 0,
            punt_queue: 1024,
            arp_hold: 0,
            neighbor_timeout_ms: 5000,
            ..Limits::default()
        }
    );
    let c = valid(&with("  [router.limits]\n  punt_queue = 16\n"));
    assert_eq!(
        c.routers[0].limits,
        Limits {
            punt_queue: 16,
            ..Limits::default()
        }
    );
    let c = valid(&with(
        "  [router.limits]\n  weight = 3\n  pps = 1000\n  bps = 8000000\n  max_routes = 100\n  max_neighbors = 64\n  punt_rate = 50\n  protocol_rate = 0\n",
    ));
    assert_eq!(
        c.routers[0].limits,
        Limits {
            weight: 3,
            pps: 1000,
            bps: 8_000_000,
            max_routes: 100,
            max_neighbors: 64,
            punt_rate: 50,
            protocol_rate: 0,
            ..Limits::default()
        }
    );
    for (key, bad) in [
        ("icmp_rate", "-1"),
        ("punt_queue", "0"),
        ("arp_hold", "5000"),
        ("neighbor_timeout_ms", "0"),
        ("weight", "0"),
        ("pps", "-5"),
        ("bps", "-1"),
        ("max_routes", "0"),
        ("max_neighbors", "0"),
        ("punt_rate", "0"),
        ("protocol_rate", "-1"),
        ("protocol_rate", "10000001"),
    ] {
        only(
            &with(&format!("  [router.limits]\n  {key} = {bad}\n")),
            &format!("router \"red\".limits.{key}"),
            &format!("{bad} is outside"),
        );
    }
}

#[test]
fn max_routes_below_the_configured_routes_names_the_key() {
    let routes: String = (0..20)
        .map(|i| format!("  [[router.route]]\n  prefix = \"10.{i}.0.0/16\"\n  blackhole = true\n"))
        .collect();
    only(
        &with(&format!("{routes}  [router.limits]\n  max_routes = 16\n")),
        "router \"red\".limits.max_routes",
        "exceed max_routes = 16",
    );
}

#[test]
fn multipath_sets_past_max_nexthop_groups_name_the_key() {
    // Three routes, two distinct gateway sets (order does not make a new one).
    let routes = "  [[router.route]]\n  prefix = \"10.7.0.0/16\"\n  via = [\"10.0.0.8\", \"10.0.0.9\"]\n\
                  [[router.route]]\n  prefix = \"10.8.0.0/16\"\n  via = [\"10.0.0.9\", \"10.0.0.8\"]\n\
                  [[router.route]]\n  prefix = \"10.9.0.0/16\"\n  via = [\"10.0.0.7\", \"10.0.0.8\"]\n";
    only(
        &with(&format!(
            "{routes}  [router.limits]\n  max_nexthop_groups = 1\n"
        )),
        "router \"red\".limits.max_nexthop_groups",
        "2 distinct multipath gateway sets in the routes exceed max_nexthop_groups = 1",
    );
    let c = valid(&with(&format!(
        "{routes}  [router.limits]\n  max_nexthop_groups = 2\n"
    )));
    assert_eq!(c.routers[0].limits.max_nexthop_groups, 2);
    only(
        &with("  [router.limits]\n  max_nexthop_groups = 0\n"),
        "router \"red\".limits.max_nexthop_groups",
        "0 is outside",
    );
}

#[test]
fn addresses_and_static_neighbours_past_their_limits_name_the_key() {
    // red0 holds 10.0.0.1/24, 2001:db8::1/64 and the IPv6 link-local.
    only(
        &with("  [router.limits]\n  max_addresses = 2\n"),
        "router \"red\".limits.max_addresses",
        "3 interface addresses (link-local ones included) exceed max_addresses = 2",
    );
    let c = valid(&with("  [router.limits]\n  max_addresses = 3\n"));
    assert_eq!(c.routers[0].limits.max_addresses, 3);
    let neighbors: String = (2..5)
        .map(|i| {
            format!("  [[router.neighbor]]\n  address = \"10.0.0.{i}\"\n  mac = \"02:00:00:00:00:0{i}\"\n")
        })
        .collect();
    only(
        &with(&format!(
            "{neighbors}  [router.limits]\n  max_neighbors = 2\n"
        )),
        "router \"red\".limits.max_neighbors",
        "3 static neighbours exceed max_neighbors = 2",
    );
}

// ---- routes files --------------------------------------------------------

fn with_file(table: &str) -> Result<Config, ConfigErrors> {
    check_with(
        &BASE.replacen(
            "name = \"red\"\n",
            "name = \"red\"\nroutes_file = \"table.txt\"\n",
            1,
        ),
        &[("table.txt", table)],
    )
}

const FILE_KEY: &str = "router \"red\".routes_file \"table.txt\"";

#[test]
fn routes_file_routes_follow_inline_routes() {
    let text = BASE.replacen(
        "name = \"red\"\n",
        "name = \"red\"\nroutes_file = \"table.txt\"\n",
        1,
    ) + "  [[router.route]]\n  prefix = \"0.0.0.0/0\"\n  via = \"10.0.0.254\"\n";
    let c = check_with(
        &text,
        &[("table.txt", "# table\n10.1.0.0/16 10.0.0.2\n\n2001:db8:1::/48 2001:db8::2 # v6\n10.2.0.0/16 unreachable\n")],
    )
    .unwrap();
    let routes: Vec<String> = c.routers[0]
        .routes
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        routes,
        [
            "0.0.0.0/0 10.0.0.254",
            "10.1.0.0/16 10.0.0.2",
            "2001:db8:1::/48 2001:db8::2",
            "10.2.0.0/16 unreachable"
        ]
    );
}

#[test]
fn routes_file_errors_carry_line_numbers() {
    let errs = with_file("10.1.0.0/16 10.0.0.2\n# comment\n10.2.0.1/16 blackhole\n10.3.0.0/16\n")
        .unwrap_err();
    has(
        &errs,
        &format!("{FILE_KEY} line 3"),
        "did you mean 10.2.0.0/16?",
    );
    has(&errs, &format!("{FILE_KEY} line 4"), "has no next hop");
    assert_eq!(errs.len(), 2, "{errs}");
}

#[test]
fn routes_file_via_must_be_on_an_interface_subnet() {
    let errs = with_file("10.1.0.0/16 10.0.0.2\n10.9.0.0/16 10.9.9.9\n").unwrap_err();
    has(
        &errs,
        &format!("{FILE_KEY} line 2"),
        "no interface subnet of router red covers 10.9.9.9",
    );
    assert_eq!(errs.len(), 1, "{errs}");
}

#[test]
fn routes_file_duplicates_name_both_places() {
    let text = BASE.replacen(
        "name = \"red\"\n",
        "name = \"red\"\nroutes_file = \"table.txt\"\n",
        1,
    ) + "  [[router.route]]\n  prefix = \"10.1.0.0/16\"\n  blackhole = true\n";
    let errs = check_with(
        &text,
        &[(
            "table.txt",
            "10.1.0.0/16 10.0.0.2\n10.2.0.0/16 10.0.0.2\n10.2.0.0/16 blackhole\n",
        )],
    )
    .unwrap_err();
    has(
        &errs,
        &format!("{FILE_KEY} line 1"),
        "duplicate prefix 10.1.0.0/16; also at router \"red\".route[0]",
    );
    has(
        &errs,
        &format!("{FILE_KEY} line 3"),
        &format!("duplicate prefix 10.2.0.0/16; also at {FILE_KEY} line 2"),
    );
    assert_eq!(errs.len(), 2, "{errs}");
}

#[test]
fn routes_file_that_cannot_be_read() {
    let text = BASE.replacen(
        "name = \"red\"\n",
        "name = \"red\"\nroutes_file = \"nope.txt\"\n",
        1,
    );
    only(
        &text,
        "router \"red\".routes_file",
        "cannot read /cfg/nope.txt",
    );
}

#[test]
fn routes_file_errors_are_capped() {
    let garbage = "x\n".repeat(1000);
    let errs = with_file(&garbage).unwrap_err();
    assert_eq!(errs.len(), MAX_FILE_ERRORS + 1);
    has(
        &errs,
        "router \"red\".routes_file",
        "900 more errors in /cfg/table.txt not listed",
    );
}

#[test]
fn routes_file_that_is_not_utf8() {
    let files: HashMap<PathBuf, Vec<u8>> = HashMap::from([(
        PathBuf::from("/cfg/t.bin"),
        b"10.1.0.0/16 10.0.0.2\n\xff\xfe 1\n".to_vec(),
    )]);
    let read = move |p: &Path| {
        files
            .get(p)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    };
    let errs = parse(
        &BASE.replacen(
            "name = \"red\"\n",
            "name = \"red\"\nroutes_file = \"t.bin\"\n",
            1,
        ),
        &Env {
            cores: &[0, 1, 2, 3],
            base_dir: Path::new("/cfg"),
            read: &read,
        },
    )
    .unwrap_err();
    has(
        &errs,
        "router \"red\".routes_file \"t.bin\" line 2",
        "is not an IP address",
    );
    assert_eq!(errs.len(), 1, "{errs}");
}

/// A full Internet table's worth of routes loads well within a second in a
/// release build (the test profile is less optimised; it checks a looser
/// bound). Run `cargo test --release -p vrhost-config million -- --nocapture`
/// for the rate.
#[test]
fn a_million_line_routes_file_loads_fast() {
    use std::fmt::Write as _;
    let mut table = String::with_capacity(30_000_000);
    for n in 0..1_000_000u64 {
        // Distinct /24s across 1.0.0.0/8..=16.0.0.0/8, every 16th one a
        // blackhole, every 8th one IPv6; shuffled (the multiplier is prime
        // to 10^6, so this is a permutation), as sorted input is the easy case.
        let i = u32::try_from(n * 2_654_435_761 % 1_000_000).unwrap();
        let net = (1u32 << 24) + (i << 8);
        let a = std::net::Ipv4Addr::from(net);
        if i % 8 == 0 {
            let _ = writeln!(
                table,
                "2001:db8:{:x}:{:x}::/64 2001:db8::2",
                i >> 16,
                i & 0xffff
            );
        } else if i % 16 == 1 {
            let _ = writeln!(table, "{a}/24 blackhole");
        } else {
            let _ = writeln!(table, "{a}/24 10.0.0.2");
        }
    }
    let text = BASE.replacen(
        "name = \"red\"\n",
        "name = \"red\"\nroutes_file = \"table.txt\"\n",
        1,
    );
    let start = std::time::Instant::now();
    let c = check_with(&text, &[("table.txt", &table)]).unwrap();
    let took = start.elapsed();
    assert_eq!(c.routers[0].routes.len(), 1_000_000);
    eprintln!(
        "1M routes in {took:?}: {:.2} M lines/s",
        1.0 / took.as_secs_f64()
    );
    let limit = if cfg!(debug_assertions) { 5.0 } else { 1.0 };
    assert!(took.as_secs_f64() < limit, "took {took:?}");
}

#[test]
fn cpu_lists_parse_as_the_kernel_writes_them() {
    use crate::parse_cpu_list;
    assert_eq!(
        parse_cpu_list("0-3,8,10-11"),
        Some(vec![0, 1, 2, 3, 8, 10, 11])
    );
    assert_eq!(parse_cpu_list("1"), Some(vec![1]));
    assert_eq!(parse_cpu_list("3-1"), None);
    assert_eq!(parse_cpu_list("a"), None);
    assert_eq!(core_list(&[0, 1, 2, 3, 8, 10, 11]), "cores 0-3,8,10-11");
    assert_eq!(core_list(&[1]), "core 1");
}

#[test]
fn workers_must_be_cores_the_process_may_run_on() {
    let text = format!("[dataplane]\nworkers = [1]\n{BASE}");
    let ok = Config::check_with_cores(&text, Path::new("/cfg"), &[1]);
    assert!(ok.is_ok(), "{ok:?}");
    let errs = Config::check_with_cores(&text, Path::new("/cfg"), &[0, 2, 3])
        .expect_err("core 1 is not allowed");
    has(&errs, "dataplane.workers[0]", "may run on cores 0,2-3");
    let c = Config::check_with_cores(BASE, Path::new("/cfg"), &[2, 5]).expect("default");
    assert_eq!(c.dataplane.workers, [5], "the last allowed core");
}
