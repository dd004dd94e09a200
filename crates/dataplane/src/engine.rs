//! The engine: every VR's tables plus one worker's pipeline state.
//!
//! ```text
//!  driver rx ──▶ Engine::process_burst ──▶ TxBatch (one queue per port) ──▶ driver tx
//!                    │            ▲
//!                    ▼            │ held packets released on ARP/NDP replies
//!            VR punt queues   neighbor tables ◀── Engine::poll (timers)
//! ```
//!
//! For now one engine is one worker; the tables move behind RCU publication
//! when several workers share them.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;
use vrhost_fib::{Fib4, Fib6, Lpm, NextHopId, Prefix, Prefix4, Prefix6};
use vrhost_wire::ethernet::{self, EthernetAddress};
use vrhost_wire::ipv6 as wire6;

use crate::counters::Counters;
use crate::mbuf::{Mbuf, MbufPool};
use crate::neighbor::{NeighborTable, Probe, HOLD_MAX};
use crate::spec::{EngineSpec, Limits, RouteTarget};

/// Marks "no interface" in a port's VLAN demux table.
pub(crate) const NO_IFACE: u16 = u16::MAX;

/// Frames to transmit, one queue per port, filled by the pipeline and
/// drained by the drivers.
#[derive(Debug, Default)]
pub struct TxBatch {
    /// Per-port transmit queues, indexed like the ports.
    pub ports: Vec<Vec<Mbuf>>,
}

impl TxBatch {
    /// Queues for `n` ports.
    pub fn new(n: usize) -> Self {
        TxBatch {
            ports: (0..n).map(|_| Vec::with_capacity(1024)).collect(),
        }
    }

    /// Total frames queued.
    pub fn len(&self) -> usize {
        self.ports.iter().map(Vec::len).sum()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a FIB leaf points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NextHop {
    /// One of the VR's own addresses.
    Local,
    /// The directed broadcast address of an attached subnet.
    Broadcast,
    /// Drop silently.
    Blackhole,
    /// Drop with ICMP unreachable.
    Unreachable,
    /// An attached subnet: the destination itself is the neighbor.
    Connected {
        /// Egress interface (global index).
        iface: u16,
    },
    /// Through a gateway whose neighbor entry is `neigh`.
    Gateway {
        /// Egress interface (global index).
        iface: u16,
        /// Neighbor slot in the VR's table.
        neigh: u32,
    },
}

/// An interface at run time.
#[derive(Debug)]
pub struct Iface {
    /// Name.
    pub name: String,
    /// Owning VR.
    pub vr: u16,
    /// Port index.
    pub port: u16,
    /// VLAN tag on egress, if any.
    pub vlan: Option<u16>,
    /// MAC.
    pub mac: EthernetAddress,
    /// IP MTU.
    pub mtu: u16,
    /// IPv4 addresses.
    pub addrs4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses (configured, then the link-local one).
    pub addrs6: Vec<(Ipv6Addr, u8)>,
    /// Multicast MACs accepted (IPv6 all-nodes, all-routers, solicited-node groups).
    pub mcast: Vec<EthernetAddress>,
}

impl Iface {
    /// The address ICMP errors and ARP requests leave from: the one whose
    /// subnet covers `toward`, else the first.
    pub fn source4(&self, toward: Ipv4Addr) -> Option<Ipv4Addr> {
        self.addrs4
            .iter()
            .find(|(a, l)| same_subnet4(*a, toward, *l))
            .or(self.addrs4.first())
            .map(|(a, _)| *a)
    }

    /// The IPv6 source toward `toward`: link-local for link-local
    /// destinations, else a global address whose subnet covers it, else the first global.
    pub fn source6(&self, toward: Ipv6Addr) -> Option<Ipv6Addr> {
        if wire6::is_link_local(&toward) {
            return self.link_local();
        }
        let global = || self.addrs6.iter().find(|(a, _)| !wire6::is_link_local(a));
        self.addrs6
            .iter()
            .find(|(a, l)| !wire6::is_link_local(a) && same_subnet6(*a, toward, *l))
            .or_else(global)
            .map(|(a, _)| *a)
            .or_else(|| self.link_local())
    }

    /// The interface's link-local address, if it has IPv6.
    pub fn link_local(&self) -> Option<Ipv6Addr> {
        self.addrs6
            .iter()
            .find(|(a, _)| wire6::is_link_local(a))
            .map(|(a, _)| *a)
    }

    /// True when `addr` is one of this interface's IPv6 addresses.
    pub fn owns6(&self, addr: &Ipv6Addr) -> bool {
        self.addrs6.iter().any(|(a, _)| a == addr)
    }

    /// True when `addr` is one of this interface's IPv4 addresses.
    pub fn owns4(&self, addr: &Ipv4Addr) -> bool {
        self.addrs4.iter().any(|(a, _)| a == addr)
    }

    /// True when some IPv4 subnet of the interface covers `addr`.
    pub fn on_link4(&self, addr: Ipv4Addr) -> bool {
        self.addrs4.iter().any(|(a, l)| same_subnet4(*a, addr, *l))
    }

    /// True when some IPv6 subnet of the interface (link-local included) covers `addr`.
    pub fn on_link6(&self, addr: Ipv6Addr) -> bool {
        self.addrs6.iter().any(|(a, l)| same_subnet6(*a, addr, *l))
    }
}

pub(crate) fn same_subnet4(a: Ipv4Addr, b: Ipv4Addr, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32))
    };
    u32::from(a) & mask == u32::from(b) & mask
}

pub(crate) fn same_subnet6(a: Ipv6Addr, b: Ipv6Addr, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128))
    };
    u128::from(a) & mask == u128::from(b) & mask
}

/// The modified EUI-64 link-local address for a MAC (RFC 4291 §2.5.1, App. A).
pub fn link_local_from_mac(mac: EthernetAddress) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

/// A port at run time.
pub(crate) struct Port {
    pub name: String,
    pub mtu: u16,
    /// VLAN ID (0 = untagged or priority-tagged) → interface.
    pub demux: Box<[u16]>,
}

/// Token bucket in nanoseconds, for ICMP error rate limits.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    rate_per_s: u64,
    tokens: u64,
    last: u64,
}

impl TokenBucket {
    pub fn new(rate_per_s: u32) -> Self {
        TokenBucket {
            rate_per_s: rate_per_s as u64,
            tokens: rate_per_s as u64,
            last: 0,
        }
    }

    /// Takes one token if available. Burst equals one second's worth.
    pub fn take(&mut self, now: u64) -> bool {
        let elapsed = now.saturating_sub(self.last);
        let refill = (elapsed as u128 * self.rate_per_s as u128 / 1_000_000_000) as u64;
        if refill > 0 {
            self.tokens = (self.tokens + refill).min(self.rate_per_s);
            self.last = now;
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            false
        }
    }
}

/// One virtual router's state.
pub struct Vr {
    /// Name.
    pub name: String,
    /// Its interfaces (global indices).
    pub ifaces: Vec<u16>,
    pub(crate) fib4: Fib4,
    pub(crate) fib6: Fib6,
    pub(crate) nexthops: Vec<NextHop>,
    nh_index: HashMap<NextHop, u32>,
    /// Neighbor table (both families).
    pub neighbors: NeighborTable,
    /// Limits.
    pub limits: Limits,
    pub(crate) icmp_bucket: TokenBucket,
    pub(crate) punt: VecDeque<Mbuf>,
}

impl Vr {
    fn nexthop(&mut self, nh: NextHop) -> NextHopId {
        if let Some(&i) = self.nh_index.get(&nh) {
            return NextHopId(i);
        }
        let i = self.nexthops.len() as u32;
        self.nexthops.push(nh);
        self.nh_index.insert(nh, i);
        NextHopId(i)
    }

    /// Longest-prefix match for IPv4.
    #[inline]
    pub fn lookup4(&self, dst: Ipv4Addr) -> Option<NextHop> {
        self.fib4.lookup(dst).map(|id| self.nexthops[id.0 as usize])
    }

    /// Longest-prefix match for IPv6.
    #[inline]
    pub fn lookup6(&self, dst: Ipv6Addr) -> Option<NextHop> {
        self.fib6.lookup(dst).map(|id| self.nexthops[id.0 as usize])
    }

    /// IPv4 routes in the FIB (connected and local ones included).
    pub fn routes4(&self) -> usize {
        self.fib4.len()
    }

    /// IPv6 routes in the FIB (connected and local ones included).
    pub fn routes6(&self) -> usize {
        self.fib6.len()
    }

    /// FIB memory in bytes, both families.
    pub fn fib_memory(&self) -> usize {
        self.fib4.memory_bytes() + self.fib6.memory_bytes()
    }

    /// Packets waiting on the punt queue.
    pub fn punt_len(&self) -> usize {
        self.punt.len()
    }
}

/// Why an [`EngineSpec`] could not be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BuildError {
    /// An interface names a port index that does not exist.
    #[error("router {router:?} interface {iface:?}: no port #{port}")]
    NoSuchPort {
        /// VR name.
        router: String,
        /// Interface name.
        iface: String,
        /// Port index.
        port: u16,
    },
    /// Two interfaces claim one (port, VLAN).
    #[error("interfaces {first:?} and {second:?} both use port {port:?} VLAN {vlan}")]
    DuplicateDemux {
        /// First interface.
        first: String,
        /// Second interface.
        second: String,
        /// Port name.
        port: String,
        /// VLAN, 0 for untagged.
        vlan: u16,
    },
    /// A VLAN ID outside 1–4094.
    #[error("interface {iface:?}: VLAN {vlan} outside 1-4094")]
    BadVlan {
        /// Interface name.
        iface: String,
        /// VLAN.
        vlan: u16,
    },
    /// A route's gateway is on no interface subnet.
    #[error("router {router:?}: no interface subnet covers gateway {via}")]
    GatewayOffLink {
        /// VR name.
        router: String,
        /// Gateway.
        via: IpAddr,
    },
    /// A static neighbor is on no interface subnet.
    #[error("router {router:?}: no interface subnet covers neighbor {addr}")]
    NeighborOffLink {
        /// VR name.
        router: String,
        /// Address.
        addr: IpAddr,
    },
    /// The neighbor table limit is too small for the gateways and static entries.
    #[error("router {router:?}: more gateways and static neighbors than max_neighbors")]
    TooManyNeighbors {
        /// VR name.
        router: String,
    },
}

/// Engine-wide counters, summed per interface, port and VR when read.
#[derive(Debug)]
pub(crate) struct EngineCounters {
    pub ports: Vec<Counters>,
    pub ifaces: Vec<Counters>,
}

/// The forwarding engine.
pub struct Engine {
    pub(crate) ports: Vec<Port>,
    pub(crate) ifaces: Vec<Iface>,
    pub(crate) vrs: Vec<Vr>,
    pub(crate) pool: MbufPool,
    pub(crate) counters: EngineCounters,
    pub(crate) probes: Vec<Probe>,
    pub(crate) next_poll: u64,
}

impl Engine {
    /// Builds the engine. Validation here is a safety net: the control crate
    /// reports errors with config keys before this runs.
    pub fn new(spec: &EngineSpec) -> Result<Engine, BuildError> {
        let mut ports: Vec<Port> = spec
            .ports
            .iter()
            .map(|p| Port {
                name: p.name.clone(),
                mtu: p.mtu,
                demux: vec![NO_IFACE; 4096].into_boxed_slice(),
            })
            .collect();
        let mut ifaces = Vec::new();
        let mut vrs = Vec::new();
        for (vr_idx, r) in spec.routers.iter().enumerate() {
            let mut vr = Vr {
                name: r.name.clone(),
                ifaces: Vec::new(),
                fib4: Fib4::new(),
                fib6: Fib6::new(),
                nexthops: Vec::new(),
                nh_index: HashMap::new(),
                neighbors: NeighborTable::new(
                    r.limits.max_neighbors as usize,
                    (r.limits.arp_hold as usize).min(HOLD_MAX),
                    r.limits.neighbor_timeout_ms.saturating_mul(1_000_000),
                ),
                limits: r.limits,
                icmp_bucket: TokenBucket::new(r.limits.icmp_rate),
                punt: VecDeque::with_capacity(r.limits.punt_queue as usize),
            };
            // Fixed next hops first, so their indices are stable.
            for nh in [
                NextHop::Local,
                NextHop::Broadcast,
                NextHop::Blackhole,
                NextHop::Unreachable,
            ] {
                vr.nexthop(nh);
            }
            for i in &r.interfaces {
                let gi = ifaces.len() as u16;
                let Some(port) = ports.get_mut(i.port as usize) else {
                    return Err(BuildError::NoSuchPort {
                        router: r.name.clone(),
                        iface: i.name.clone(),
                        port: i.port,
                    });
                };
                let vlan = match i.vlan {
                    Some(v) if !(1..=4094).contains(&v) => {
                        return Err(BuildError::BadVlan {
                            iface: i.name.clone(),
                            vlan: v,
                        })
                    }
                    Some(v) => v,
                    None => 0,
                };
                let slot = &mut port.demux[vlan as usize];
                if *slot != NO_IFACE {
                    let first: &Iface = &ifaces[*slot as usize];
                    return Err(BuildError::DuplicateDemux {
                        first: first.name.clone(),
                        second: i.name.clone(),
                        port: port.name.clone(),
                        vlan,
                    });
                }
                *slot = gi;
                // An interface never sends more than its port carries.
                let mtu = i.mtu.min(port.mtu);
                let mut addrs6 = i.addrs6.clone();
                let mut mcast = Vec::new();
                if !addrs6.is_empty() {
                    let ll = link_local_from_mac(i.mac);
                    if !addrs6.iter().any(|(a, _)| *a == ll) {
                        addrs6.push((ll, 64));
                    }
                    mcast.push(ethernet::ipv6_multicast_mac(&wire6::ALL_NODES));
                    mcast.push(ethernet::ipv6_multicast_mac(&wire6::ALL_ROUTERS));
                    for (a, _) in &addrs6 {
                        let m = ethernet::ipv6_multicast_mac(&wire6::solicited_node(a));
                        if !mcast.contains(&m) {
                            mcast.push(m);
                        }
                    }
                }
                if !i.addrs4.is_empty() {
                    // All-systems and all-routers (RFC 1112, RFC 1812 §2.2.8.2).
                    mcast.push(ethernet::ipv4_multicast_mac(&Ipv4Addr::new(224, 0, 0, 1)));
                    mcast.push(ethernet::ipv4_multicast_mac(&Ipv4Addr::new(224, 0, 0, 2)));
                }
                // Connected, local and broadcast routes.
                let connected = vr.nexthop(NextHop::Connected { iface: gi });
                for &(a, len) in &i.addrs4 {
                    let net = Prefix4::new_truncating(a, len).expect("len validated <= 32");
                    vr.fib4.insert(net, connected);
                    vr.fib4
                        .insert(Prefix::new(a, 32).expect("/32"), NextHopId(0));
                    if len <= 30 {
                        let bcast = Ipv4Addr::from(u32::from(a) | (u32::MAX >> len));
                        vr.fib4
                            .insert(Prefix::new(bcast, 32).expect("/32"), NextHopId(1));
                    }
                }
                for &(a, len) in &addrs6 {
                    let net = Prefix6::new_truncating(a, len).expect("len validated <= 128");
                    vr.fib6.insert(net, connected);
                    vr.fib6
                        .insert(Prefix::new(a, 128).expect("/128"), NextHopId(0));
                }
                vr.ifaces.push(gi);
                ifaces.push(Iface {
                    name: i.name.clone(),
                    vr: vr_idx as u16,
                    port: i.port,
                    vlan: i.vlan,
                    mac: i.mac,
                    mtu,
                    addrs4: i.addrs4.clone(),
                    addrs6,
                    mcast,
                });
            }
            vrs.push(vr);
        }
        let mut engine = Engine {
            counters: EngineCounters {
                ports: vec![Counters::default(); ports.len()],
                ifaces: vec![Counters::default(); ifaces.len()],
            },
            ports,
            ifaces,
            vrs,
            pool: MbufPool::new(4096),
            probes: Vec::with_capacity(1024),
            next_poll: 0,
        };
        for (vr_idx, r) in spec.routers.iter().enumerate() {
            for &(addr, mac) in &r.neighbors {
                let iface = engine.on_link_iface(vr_idx, addr).ok_or_else(|| {
                    BuildError::NeighborOffLink {
                        router: r.name.clone(),
                        addr,
                    }
                })?;
                engine.vrs[vr_idx]
                    .neighbors
                    .set_static(iface, addr, mac)
                    .ok_or_else(|| BuildError::TooManyNeighbors {
                        router: r.name.clone(),
                    })?;
            }
            for &(prefix, target) in &r.routes4 {
                engine.add_route4(vr_idx, prefix, target)?;
            }
            for &(prefix, target) in &r.routes6 {
                engine.add_route6(vr_idx, prefix, target)?;
            }
        }
        Ok(engine)
    }

    fn on_link_iface(&self, vr: usize, addr: IpAddr) -> Option<u16> {
        self.vrs[vr].ifaces.iter().copied().find(|&i| {
            let iface = &self.ifaces[i as usize];
            match addr {
                IpAddr::V4(a) => iface.on_link4(a),
                IpAddr::V6(a) => iface.on_link6(a),
            }
        })
    }

    fn target_nexthop(&mut self, vr: usize, target: RouteTarget) -> Result<NextHopId, BuildError> {
        Ok(match target {
            RouteTarget::Blackhole => NextHopId(2),
            RouteTarget::Unreachable => NextHopId(3),
            RouteTarget::Via(via) => {
                let iface =
                    self.on_link_iface(vr, via)
                        .ok_or_else(|| BuildError::GatewayOffLink {
                            router: self.vrs[vr].name.clone(),
                            via,
                        })?;
                let v = &mut self.vrs[vr];
                let neigh = v.neighbors.ensure(iface, via, true).ok_or_else(|| {
                    BuildError::TooManyNeighbors {
                        router: v.name.clone(),
                    }
                })?;
                v.nexthop(NextHop::Gateway { iface, neigh })
            }
        })
    }

    /// Adds or replaces an IPv4 route in VR `vr`.
    pub fn add_route4(
        &mut self,
        vr: usize,
        prefix: Prefix4,
        target: RouteTarget,
    ) -> Result<(), BuildError> {
        let nh = self.target_nexthop(vr, target)?;
        self.vrs[vr].fib4.insert(prefix, nh);
        Ok(())
    }

    /// Adds or replaces an IPv6 route in VR `vr`.
    pub fn add_route6(
        &mut self,
        vr: usize,
        prefix: Prefix6,
        target: RouteTarget,
    ) -> Result<(), BuildError> {
        let nh = self.target_nexthop(vr, target)?;
        self.vrs[vr].fib6.insert(prefix, nh);
        Ok(())
    }

    /// Removes an IPv4 route; true if it existed.
    pub fn remove_route4(&mut self, vr: usize, prefix: &Prefix4) -> bool {
        self.vrs[vr].fib4.remove(prefix).is_some()
    }

    /// Removes an IPv6 route; true if it existed.
    pub fn remove_route6(&mut self, vr: usize, prefix: &Prefix6) -> bool {
        self.vrs[vr].fib6.remove(prefix).is_some()
    }

    /// The buffer pool drivers take receive buffers from and return sent ones to.
    pub fn pool(&mut self) -> &mut MbufPool {
        &mut self.pool
    }

    /// VRs.
    pub fn vrs(&self) -> &[Vr] {
        &self.vrs
    }

    /// Interfaces (global order: VR by VR, as configured).
    pub fn ifaces(&self) -> &[Iface] {
        &self.ifaces
    }

    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// Port name.
    pub fn port_name(&self, port: usize) -> &str {
        &self.ports[port].name
    }

    /// Counters of one port.
    pub fn port_counters(&self, port: usize) -> &Counters {
        &self.counters.ports[port]
    }

    /// Counters of one interface (global index).
    pub fn iface_counters(&self, iface: usize) -> &Counters {
        &self.counters.ifaces[iface]
    }

    /// Counters of one VR: the sum of its interfaces'.
    pub fn vr_counters(&self, vr: usize) -> Counters {
        let mut c = Counters::default();
        for &i in &self.vrs[vr].ifaces {
            c.add(&self.counters.ifaces[i as usize]);
        }
        c
    }

    /// Hands every punted packet of VR `vr` to `f`, then recycles it.
    pub fn drain_punted(&mut self, vr: usize, mut f: impl FnMut(&Mbuf)) {
        while let Some(m) = self.vrs[vr].punt.pop_front() {
            f(&m);
            self.pool.put(m);
        }
    }

    /// Packets held by neighbor resolution, all VRs.
    pub fn held(&self) -> usize {
        self.vrs.iter().map(|v| v.neighbors.held()).sum()
    }

    /// Packets on punt queues, all VRs.
    pub fn punt_queued(&self) -> usize {
        self.vrs.iter().map(|v| v.punt.len()).sum()
    }
}
