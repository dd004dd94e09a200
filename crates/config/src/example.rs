//! The example config of the docs, checked by the tests.

/// A commented example config that uses every key. Two tenants, `red` and
/// `blue`, both number their LAN 10.0.0.0/24; each has its own pcap port, so
/// the address spaces never meet. It needs [`EXAMPLE_ROUTES_FILE`] next to it
/// as `red-routes.txt`.
pub const EXAMPLE: &str = r#"# vrhost example config: two tenants on one box.
#
# red and blue both use 10.0.0.0/24. Each virtual router has its own
# interfaces, routes and neighbours, so the overlap is harmless.

[dataplane]
workers = [0]                    # cores to pin one worker each to; default: the last core
# runtime_dir = "/run/vrhost"    # what a run leaves for the next (TAP mirrors, FPM routes); the default
# tap_hold = 30                  # seconds TAP mirrors keep their carrier while vrhost is down; 0: off

[api]                            # management API (docs/api.md); omit to run without one
socket = "/run/vrhost/api.sock"  # Unix socket, mode 0600; the default
# listen = "127.0.0.1:8080"      # optional TCP listener (beyond loopback: tls_cert, tls_key)
# state = "/var/lib/vrhost/state.jsonl"  # journal of API changes, replayed at start
admin_token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"  # `vrhost token` prints one

# ---- ports: where packets enter and leave -------------------------------

[[port]]
name = "p0"
driver = "pcap"                  # memory | pcap | af_packet | af_xdp | tap
rx = "red-in.pcap"               # pcap: file to read (relative to this file)
tx = "red-out.pcap"              # pcap: file to write
mac = "02:00:00:00:00:01"        # required for memory and pcap ports
mtu = 1500                       # IP MTU; default 1500, range 68..=9000
queues = 1                       # default 1, range 1..=64
# control_queue = true           # af_packet: BFD, BGP, ARP... on a queue of their own
# host_stack = false             # af_packet: the host's own stack also receives the frames
# rps = true                     # af_packet on veth: kernel receive work on the non-worker cores
# interface = "veth0"            # af_packet / af_xdp / tap: the Linux interface

[[port]]
name = "p1"
driver = "pcap"
rx = "blue-in.pcap"              # no tx: what blue sends is counted, not written
mac = "02:00:00:00:01:01"
mtu = 9000                       # jumbo frames

# ---- router red ---------------------------------------------------------

[[router]]
name = "red"
routes_file = "red-routes.txt"
api_token_sha256 = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"  # red's own API token   # more routes, one "PREFIX VIA" per line ('#' comments)

  [[router.interface]]
  name = "red0"
  port = "p0"                    # untagged: no vlan key
  addresses = ["10.0.0.1/24", "2001:db8:a::1/64"]
  filter_in = "edge"             # a rule list below, on what enters (also: filter_out)

  [[router.interface]]
  name = "red-mgmt"
  port = "p0"
  vlan = 100                     # 802.1Q tag, 1..=4094
  mac = "02:00:00:00:00:64"      # default: the port's MAC
  mtu = 1400                     # at most the port's MTU (>= 1280 with IPv6)
  addresses = ["192.168.100.1/24"]

  [[router.route]]
  prefix = "0.0.0.0/0"
  via = "10.0.0.254"             # next hop, on one of red's subnets

  [[router.route]]
  prefix = "::/0"
  via = "2001:db8:a::fe"

  [[router.route]]
  prefix = "10.66.0.0/16"
  blackhole = true               # drop silently

  [[router.route]]
  prefix = "2001:db8:dead::/48"
  unreachable = true             # drop, answer ICMPv6 destination unreachable

  [[router.neighbor]]            # static ARP entry
  address = "10.0.0.254"
  mac = "02:00:00:00:00:fe"

  [[router.neighbor]]            # static ND entry
  address = "2001:db8:a::fe"
  mac = "02:00:00:00:00:fe"

  [[router.filter]]              # a named rule list: the first rule that matches decides
  name = "edge"
  default = "permit"             # what no rule matches gets; "permit" unless set
    [[router.filter.rule]]
    action = "deny"
    protocol = "tcp"             # a name or 0-255
    dst_port = "23"              # a port, or a range: "6000-6063"
    [[router.filter.rule]]
    action = "deny"
    src = "192.0.2.0/24"         # also dst, src_port, icmp_type, icmp_code, pcp

  [router.control]               # red's control plane (FRR, BIRD) runs here
  netns = "vr-red"               # created if missing; TAP mirrors of red0, red-mgmt inside
  fpm = "127.0.0.1:2620"         # optional: FRR zebra dplane_fpm_nl connects here to feed red

  [router.limits]                # per-tenant policy; every key optional (docs/isolation.md)
  weight = 2                     # share of a saturated worker vs other routers' weights; default 1
  pps = 5000000                  # receive ceiling, packets/s; default 0 = none
  bps = 10000000000              # receive ceiling, bits/s; default 0 = none
  max_routes = 2000000           # routes per family; default 2000000
  max_nexthop_groups = 1024      # distinct multipath gateway sets the routes may name; default 1024
  max_neighbors = 4096           # ARP/ND entries (per worker), static ones included; default 4096
  max_addresses = 256            # interface addresses, all interfaces and families; default 256
  icmp_rate = 100                # ICMP errors per second (burst = rate); default 100
  punt_rate = 10000              # packets/s to the control plane; default 10000
  protocol_rate = 2000           # packets/s of BFD, BGP, OSPF, ARP, ND that pass the limits above; default 2000
  punt_queue = 256               # packets waiting for the control plane; default 256
  arp_hold = 4                   # packets held per unresolved next hop; default 4
  neighbor_timeout_ms = 30000    # reachable lifetime of a learnt neighbour; default 30000

# ---- router blue --------------------------------------------------------

[[router]]
name = "blue"

  [[router.interface]]
  name = "blue0"
  port = "p1"
  addresses = ["10.0.0.1/24", "2001:db8:b::1/64"]    # same IPv4 subnet as red0

  [[router.interface]]
  name = "blue1"
  port = "p1"
  vlan = 200
  addresses = ["10.255.0.0/31"]  # point-to-point /31 (RFC 3021)

  [[router.route]]
  prefix = "0.0.0.0/0"
  via = "10.255.0.1"

  [[router.route]]
  prefix = "10.0.0.128/25"       # more specific than blue0's subnet
  via = "10.0.0.2"

  [[router.route]]
  prefix = "192.168.0.0/16"
  unreachable = true
"#;

/// The routes file that [`EXAMPLE`] names: `red-routes.txt`.
pub const EXAMPLE_ROUTES_FILE: &str = "# red's extra routes: PREFIX VIA, one per line
# VIA is a next-hop address, 'blackhole' or 'unreachable'.
198.51.100.0/24     10.0.0.253
203.0.113.0/24      blackhole
2001:db8:beef::/48  2001:db8:a::fd
2001:db8:f00::/40   unreachable   # comments may follow a route
";

/// The file name [`EXAMPLE`] gives [`EXAMPLE_ROUTES_FILE`].
pub const EXAMPLE_ROUTES_FILE_NAME: &str = "red-routes.txt";
