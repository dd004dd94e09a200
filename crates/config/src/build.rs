//! Turns a validated [`Config`] into the engine's plain-data [`EngineSpec`].

use std::net::IpAddr;

use vrhost_dataplane::spec::{
    EngineSpec, InterfaceSpec, Limits as EngineLimits, PortSpec, RouterSpec,
};
use vrhost_fib::IpPrefix;
use vrhost_wire::ethernet::EthernetAddress;

use crate::config::Config;

/// The engine description for `cfg`. A port without a configured MAC (the
/// real-I/O drivers default to the Linux interface's) gets `fallback_mac(port)`.
pub fn engine_spec(cfg: &Config, fallback_mac: impl Fn(usize) -> [u8; 6]) -> EngineSpec {
    let ports = cfg
        .ports
        .iter()
        .map(|p| PortSpec {
            name: p.name.clone(),
            mtu: p.mtu,
        })
        .collect();
    let routers = cfg
        .routers
        .iter()
        .map(|r| {
            let interfaces = r
                .interfaces
                .iter()
                .map(|i| {
                    let mac = i
                        .mac
                        .or(cfg.ports[i.port].mac)
                        .unwrap_or_else(|| fallback_mac(i.port));
                    let mut addrs4 = Vec::new();
                    let mut addrs6 = Vec::new();
                    for a in &i.addresses {
                        match a.addr {
                            IpAddr::V4(v4) => addrs4.push((v4, a.prefix_len)),
                            IpAddr::V6(v6) => addrs6.push((v6, a.prefix_len)),
                        }
                    }
                    InterfaceSpec {
                        urpf: i.urpf,
                        name: i.name.clone(),
                        port: i.port as u16,
                        vlan: i.vlan,
                        inner_vlan: i.inner_vlan,
                        tpid: i.tpid,
                        mac: EthernetAddress(mac),
                        mtu: i.mtu,
                        addrs4,
                        addrs6,
                        filters: i.filters.clone(),
                    }
                })
                .collect();
            let mut routes4 = Vec::new();
            let mut routes6 = Vec::new();
            for route in &r.routes {
                match route.prefix {
                    IpPrefix::V4(p) => routes4.push((p, route.target.clone())),
                    IpPrefix::V6(p) => routes6.push((p, route.target.clone())),
                }
            }
            RouterSpec {
                name: r.name.clone(),
                interfaces,
                routes4,
                routes6,
                neighbors: r
                    .neighbors
                    .iter()
                    .map(|n| (n.address, EthernetAddress(n.mac)))
                    .collect(),
                limits: EngineLimits {
                    icmp_rate: r.limits.icmp_rate,
                    punt_queue: r.limits.punt_queue,
                    arp_hold: r.limits.arp_hold,
                    neighbor_timeout_ms: r.limits.neighbor_timeout_ms,
                    max_neighbors: r.limits.max_neighbors,
                    max_routes: r.limits.max_routes,
                    max_nexthop_groups: r.limits.max_nexthop_groups,
                    max_addresses: r.limits.max_addresses,
                    weight: r.limits.weight,
                    pps: r.limits.pps,
                    bps: r.limits.bps,
                    punt_rate: r.limits.punt_rate,
                    protocol_rate: r.limits.protocol_rate,
                    control_plane: r.control.is_some(),
                },
                filters: r.filters.clone(),
            }
        })
        .collect();
    EngineSpec { ports, routers }
}
