//! Turns a validated [`Config`] into the engine's plain-data [`EngineSpec`].

use std::net::IpAddr;

use vrhost_dataplane::spec::{
    EngineSpec, InterfaceSpec, Limits as EngineLimits, PortSpec, RouteTarget as EngineTarget,
    RouterSpec,
};
use vrhost_fib::{Prefix4, Prefix6};
use vrhost_wire::ethernet::EthernetAddress;

use crate::config::{Config, RouteTarget};

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
                        name: i.name.clone(),
                        port: i.port as u16,
                        vlan: i.vlan,
                        mac: EthernetAddress(mac),
                        mtu: i.mtu,
                        addrs4,
                        addrs6,
                    }
                })
                .collect();
            let mut routes4 = Vec::new();
            let mut routes6 = Vec::new();
            for route in &r.routes {
                let target = match route.target {
                    RouteTarget::Via(a) => EngineTarget::Via(a),
                    RouteTarget::Blackhole => EngineTarget::Blackhole,
                    RouteTarget::Unreachable => EngineTarget::Unreachable,
                };
                // Validation guarantees masked prefixes of the right length.
                match route.prefix.addr() {
                    IpAddr::V4(a) => {
                        if let Ok(p) = Prefix4::new(a, route.prefix.len()) {
                            routes4.push((p, target));
                        }
                    }
                    IpAddr::V6(a) => {
                        if let Ok(p) = Prefix6::new(a, route.prefix.len()) {
                            routes6.push((p, target));
                        }
                    }
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
                    weight: r.limits.weight,
                    pps: r.limits.pps,
                    bps: r.limits.bps,
                    punt_rate: r.limits.punt_rate,
                    control_plane: r.control.is_some(),
                },
            }
        })
        .collect();
    EngineSpec { ports, routers }
}
