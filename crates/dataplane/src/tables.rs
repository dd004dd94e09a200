//! The tables every worker reads, and the control side that changes them.
//!
//! ```text
//!   Control (one thread)                         Shared (Arc)                    Worker k
//!   ────────────────────                         ────────────                    ────────
//!   per VR: FibHandle v4/v6 ── publish ──▶ FibReader v4/v6 ─────────── load_full ─▶ Arc<FibSnapshot>
//!           next hops (grow-only) ─ store ─▶ ArcSwap<Vec<RouteHop>> ── load_full ─▶ Arc<Vec<RouteHop>>
//!   commit(): bump `generation` (Release) ─────▶ AtomicU64 ◀── one Acquire load per burst;
//!                                                                  refresh the Arcs when it moved
//!   static neighbors ──────────────── Event ──────────────────────────────────────▶ inbox (bounded)
//! ```
//!
//! Workers never lock and never wait: between two bursts a worker compares one
//! counter and, when it moved, swaps the `Arc`s it holds. Next hops are
//! published before the FIB that uses them, and only ever appended, so a FIB
//! a worker holds never names a next hop its array lacks. Old snapshots are
//! freed on the control thread ([`vrhost_fib::FibHandle::reclaim`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use arc_swap::ArcSwap;
use thiserror::Error;
use vrhost_fib::{FibHandle, FibReader, NextHopId, Prefix, Prefix4, Prefix6};
use vrhost_wire::ethernet::{self, EthernetAddress};
use vrhost_wire::ipv6 as wire6;

use crate::iface::{link_local_from_mac, Iface, Port};
use crate::spec::{EngineSpec, Limits, RouteTarget};
use crate::worker::Event;

/// Marks "no interface" in a port's VLAN demux table.
pub(crate) const NO_IFACE: u16 = u16::MAX;

/// What a FIB leaf points at, as published to every worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteHop {
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
    /// Through a gateway.
    Gateway {
        /// Egress interface (global index).
        iface: u16,
        /// The gateway's address, on that interface's subnet.
        addr: IpAddr,
    },
}

/// Fixed next-hop ids, the same in every VR.
pub(crate) const NH_LOCAL: NextHopId = NextHopId(0);
pub(crate) const NH_BROADCAST: NextHopId = NextHopId(1);
pub(crate) const NH_BLACKHOLE: NextHopId = NextHopId(2);
pub(crate) const NH_UNREACHABLE: NextHopId = NextHopId(3);

/// One VR as every worker sees it.
pub(crate) struct VrShared {
    pub name: String,
    pub ifaces: Vec<u16>,
    pub limits: Limits,
    pub fib4: FibReader<Ipv4Addr>,
    pub fib6: FibReader<Ipv6Addr>,
    pub nexthops: ArcSwap<Vec<RouteHop>>,
}

/// Everything workers share.
pub struct Shared {
    pub(crate) ports: Vec<Port>,
    pub(crate) ifaces: Vec<Iface>,
    pub(crate) vrs: Vec<VrShared>,
    /// Bumped after every publication; workers refresh when it moves.
    pub(crate) generation: AtomicU64,
}

impl Shared {
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

    /// Number of VRs.
    pub fn vr_count(&self) -> usize {
        self.vrs.len()
    }

    /// VR name.
    pub fn vr_name(&self, vr: usize) -> &str {
        &self.vrs[vr].name
    }

    /// A VR's interfaces (global indices).
    pub fn vr_ifaces(&self, vr: usize) -> &[u16] {
        &self.vrs[vr].ifaces
    }
}

/// Why an [`EngineSpec`] or a change to it was refused.
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
    /// No such VR.
    #[error("no router #{0}")]
    NoSuchRouter(usize),
    /// The VR's FIB for this family already holds `max_routes` routes.
    #[error("router {router:?}: route limit reached ({limit} routes per family; raise limits.max_routes)")]
    RouteLimit {
        /// VR name.
        router: String,
        /// The limit.
        limit: u32,
    },
    /// A route whose prefix family differs from its gateway's.
    #[error("router {router:?}: gateway {via} is not of the prefix's family")]
    FamilyMismatch {
        /// VR name.
        router: String,
        /// Gateway.
        via: IpAddr,
    },
}

/// The control side of one VR.
struct VrControl {
    fib4: FibHandle<Ipv4Addr>,
    fib6: FibHandle<Ipv6Addr>,
    nexthops: Vec<RouteHop>,
    nh_index: HashMap<RouteHop, u32>,
    /// Next hops appended since the last publication.
    nh_dirty: bool,
    fib_dirty: bool,
}

impl VrControl {
    fn nexthop(&mut self, nh: RouteHop) -> NextHopId {
        if let Some(&i) = self.nh_index.get(&nh) {
            return NextHopId(i);
        }
        let i = self.nexthops.len() as u32;
        self.nexthops.push(nh);
        self.nh_index.insert(nh, i);
        self.nh_dirty = true;
        NextHopId(i)
    }
}

/// The one writer of the shared tables.
pub struct Control {
    shared: Arc<Shared>,
    vrs: Vec<VrControl>,
    static_neighbors: Vec<Vec<(u16, IpAddr, EthernetAddress)>>,
    workers: Vec<SyncSender<Event>>,
}

impl Control {
    /// Builds the tables for `spec` and publishes them.
    pub fn new(spec: &EngineSpec) -> Result<Control, BuildError> {
        let mut ports: Vec<Port> = spec
            .ports
            .iter()
            .map(|p| Port {
                name: p.name.clone(),
                mtu: p.mtu,
                demux: vec![NO_IFACE; 4096].into_boxed_slice(),
            })
            .collect();
        let mut ifaces: Vec<Iface> = Vec::new();
        let mut shared_vrs = Vec::new();
        let mut vrs = Vec::new();
        for (vr_idx, r) in spec.routers.iter().enumerate() {
            let mut c = VrControl {
                fib4: FibHandle::new(),
                fib6: FibHandle::new(),
                nexthops: Vec::new(),
                nh_index: HashMap::new(),
                nh_dirty: true,
                fib_dirty: true,
            };
            // Fixed next hops first, so their ids are the NH_* constants.
            for nh in [
                RouteHop::Local,
                RouteHop::Broadcast,
                RouteHop::Blackhole,
                RouteHop::Unreachable,
            ] {
                c.nexthop(nh);
            }
            let mut vr_ifaces = Vec::new();
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
                    return Err(BuildError::DuplicateDemux {
                        first: ifaces[*slot as usize].name.clone(),
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
                let connected = c.nexthop(RouteHop::Connected { iface: gi });
                for &(a, len) in &i.addrs4 {
                    if let Ok(net) = Prefix4::new_truncating(a, len) {
                        c.fib4.insert(net, connected);
                    }
                    if let Ok(host) = Prefix::new(a, 32) {
                        c.fib4.insert(host, NH_LOCAL);
                    }
                    if len <= 30 {
                        let bcast = Ipv4Addr::from(u32::from(a) | (u32::MAX >> len));
                        if let Ok(b) = Prefix::new(bcast, 32) {
                            c.fib4.insert(b, NH_BROADCAST);
                        }
                    }
                }
                for &(a, len) in &addrs6 {
                    if let Ok(net) = Prefix6::new_truncating(a, len) {
                        c.fib6.insert(net, connected);
                    }
                    if let Ok(host) = Prefix::new(a, 128) {
                        c.fib6.insert(host, NH_LOCAL);
                    }
                }
                vr_ifaces.push(gi);
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
            shared_vrs.push(VrShared {
                name: r.name.clone(),
                ifaces: vr_ifaces,
                limits: r.limits,
                fib4: c.fib4.reader(),
                fib6: c.fib6.reader(),
                nexthops: ArcSwap::from_pointee(Vec::new()),
            });
            vrs.push(c);
        }
        let mut control = Control {
            shared: Arc::new(Shared {
                ports,
                ifaces,
                vrs: shared_vrs,
                generation: AtomicU64::new(0),
            }),
            vrs,
            static_neighbors: vec![Vec::new(); spec.routers.len()],
            workers: Vec::new(),
        };
        for (vr, r) in spec.routers.iter().enumerate() {
            for &(addr, mac) in &r.neighbors {
                let iface =
                    control
                        .on_link_iface(vr, addr)
                        .ok_or_else(|| BuildError::NeighborOffLink {
                            router: r.name.clone(),
                            addr,
                        })?;
                control.static_neighbors[vr].push((iface, addr, mac));
            }
            for &(prefix, target) in &r.routes4 {
                control.add_route4(vr, prefix, target)?;
            }
            for &(prefix, target) in &r.routes6 {
                control.add_route6(vr, prefix, target)?;
            }
        }
        control.commit();
        Ok(control)
    }

    /// The tables workers read.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Static neighbors of VR `vr`: (interface, address, MAC).
    pub(crate) fn static_neighbors(&self, vr: usize) -> &[(u16, IpAddr, EthernetAddress)] {
        &self.static_neighbors[vr]
    }

    /// Registers a worker's inbox for neighbor events.
    pub(crate) fn attach_worker(&mut self, inbox: SyncSender<Event>) {
        self.workers.push(inbox);
    }

    fn on_link_iface(&self, vr: usize, addr: IpAddr) -> Option<u16> {
        let s = &self.shared;
        s.vrs[vr].ifaces.iter().copied().find(|&i| {
            let iface = &s.ifaces[i as usize];
            match addr {
                IpAddr::V4(a) => iface.on_link4(a),
                IpAddr::V6(a) => iface.on_link6(a),
            }
        })
    }

    fn target(
        &mut self,
        vr: usize,
        target: RouteTarget,
        v4: bool,
    ) -> Result<NextHopId, BuildError> {
        Ok(match target {
            RouteTarget::Blackhole => NH_BLACKHOLE,
            RouteTarget::Unreachable => NH_UNREACHABLE,
            RouteTarget::Via(via) => {
                let name = || self.shared.vrs[vr].name.clone();
                if via.is_ipv4() != v4 {
                    return Err(BuildError::FamilyMismatch {
                        router: name(),
                        via,
                    });
                }
                let iface =
                    self.on_link_iface(vr, via)
                        .ok_or_else(|| BuildError::GatewayOffLink {
                            router: name(),
                            via,
                        })?;
                self.vrs[vr].nexthop(RouteHop::Gateway { iface, addr: via })
            }
        })
    }

    fn vr(&self, vr: usize) -> Result<(), BuildError> {
        if vr < self.vrs.len() {
            Ok(())
        } else {
            Err(BuildError::NoSuchRouter(vr))
        }
    }

    /// Refuses a new route once the VR's table holds `max_routes`; replacing
    /// an existing prefix is always allowed. `probe` gives (routes, exists).
    fn check_room(
        &self,
        vr: usize,
        probe: impl Fn(&VrControl) -> (usize, bool),
    ) -> Result<(), BuildError> {
        let (len, exists) = probe(&self.vrs[vr]);
        let limit = self.shared.vrs[vr].limits.max_routes;
        if !exists && len >= limit as usize {
            return Err(BuildError::RouteLimit {
                router: self.shared.vrs[vr].name.clone(),
                limit,
            });
        }
        Ok(())
    }

    /// Adds or replaces an IPv4 route in VR `vr`; workers see it after [`Control::commit`].
    pub fn add_route4(
        &mut self,
        vr: usize,
        prefix: Prefix4,
        target: RouteTarget,
    ) -> Result<(), BuildError> {
        self.vr(vr)?;
        let nh = self.target(vr, target, true)?;
        self.check_room(vr, |c| {
            use vrhost_fib::Lpm;
            (c.fib4.table().len(), c.fib4.table().get(&prefix).is_some())
        })?;
        let c = &mut self.vrs[vr];
        c.fib4.insert(prefix, nh);
        c.fib_dirty = true;
        Ok(())
    }

    /// Adds or replaces an IPv6 route in VR `vr`; workers see it after [`Control::commit`].
    pub fn add_route6(
        &mut self,
        vr: usize,
        prefix: Prefix6,
        target: RouteTarget,
    ) -> Result<(), BuildError> {
        self.vr(vr)?;
        let nh = self.target(vr, target, false)?;
        self.check_room(vr, |c| {
            use vrhost_fib::Lpm;
            (c.fib6.table().len(), c.fib6.table().get(&prefix).is_some())
        })?;
        let c = &mut self.vrs[vr];
        c.fib6.insert(prefix, nh);
        c.fib_dirty = true;
        Ok(())
    }

    /// Removes an IPv4 route; true if it existed. Visible after [`Control::commit`].
    pub fn remove_route4(&mut self, vr: usize, prefix: &Prefix4) -> bool {
        match self.vrs.get_mut(vr) {
            Some(c) => {
                c.fib_dirty = true;
                c.fib4.remove(prefix).is_some()
            }
            None => false,
        }
    }

    /// Removes an IPv6 route; true if it existed. Visible after [`Control::commit`].
    pub fn remove_route6(&mut self, vr: usize, prefix: &Prefix6) -> bool {
        match self.vrs.get_mut(vr) {
            Some(c) => {
                c.fib_dirty = true;
                c.fib6.remove(prefix).is_some()
            }
            None => false,
        }
    }

    /// Publishes every change since the last commit: next hops first, then
    /// FIBs, then the generation workers watch.
    pub fn commit(&mut self) {
        let mut any = false;
        for (c, s) in self.vrs.iter_mut().zip(self.shared.vrs.iter()) {
            if c.nh_dirty {
                s.nexthops.store(Arc::new(c.nexthops.clone()));
                c.nh_dirty = false;
                any = true;
            }
        }
        for c in self.vrs.iter_mut() {
            if c.fib_dirty {
                c.fib4.publish();
                c.fib6.publish();
                c.fib_dirty = false;
                any = true;
            } else {
                c.fib4.reclaim();
                c.fib6.reclaim();
            }
        }
        if any {
            self.shared.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// Installs or replaces a static neighbor in every worker.
    pub fn set_static_neighbor(
        &mut self,
        vr: usize,
        addr: IpAddr,
        mac: EthernetAddress,
    ) -> Result<(), BuildError> {
        self.vr(vr)?;
        let iface = self
            .on_link_iface(vr, addr)
            .ok_or_else(|| BuildError::NeighborOffLink {
                router: self.shared.vrs[vr].name.clone(),
                addr,
            })?;
        self.static_neighbors[vr].retain(|&(i, a, _)| (i, a) != (iface, addr));
        self.static_neighbors[vr].push((iface, addr, mac));
        for w in &self.workers {
            // A full inbox means a stalled worker; it will learn by ARP/ND instead.
            let _ = w.try_send(Event::Static {
                vr: vr as u16,
                iface,
                addr,
                mac,
            });
        }
        Ok(())
    }

    /// Routes in VR `vr`'s tables (control view, unpublished changes included).
    pub fn routes(&self, vr: usize) -> (usize, usize) {
        use vrhost_fib::Lpm;
        let c = &self.vrs[vr];
        (c.fib4.table().len(), c.fib6.table().len())
    }

    /// FIB memory of VR `vr`, both families, in bytes.
    pub fn fib_memory(&self, vr: usize) -> usize {
        use vrhost_fib::Lpm;
        let c = &self.vrs[vr];
        c.fib4.table().memory_bytes() + c.fib6.table().memory_bytes()
    }
}
