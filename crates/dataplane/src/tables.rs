//! The tables every worker reads, and the control side that changes them.
//!
//! ```text
//!   TableWriter (one thread)                     Shared (Arc)                    Worker k
//!   ────────────────────────                     ────────────                    ────────
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
use vrhost_fib::{FibHandle, FibReader, IpPrefix, NextHopId, Prefix, Prefix4, Prefix6};
use vrhost_wire::ethernet::{self, EthernetAddress};
use vrhost_wire::ipv6 as wire6;

use crate::iface::{link_local_from_mac, Iface, Port, NO_IFACE};
use crate::neighbor::Event;
use crate::spec::{EngineSpec, InterfaceSpec, Limits, RouteTarget, RouterSpec};

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
#[derive(Clone)]
pub(crate) struct VrShared {
    pub name: String,
    pub ifaces: Vec<u16>,
    pub limits: Limits,
    pub fib4: FibReader<Ipv4Addr>,
    pub fib6: FibReader<Ipv6Addr>,
    pub nexthops: Arc<ArcSwap<Vec<RouteHop>>>,
    /// False once deleted: the slot stays so that indices never move.
    pub alive: bool,
}

/// One version of the topology: ports, interfaces and VRs. Immutable once
/// published; adding or deleting a VR or an address publishes a new one.
/// VR and interface indices never change and are never reused.
#[derive(Clone)]
pub struct Shared {
    pub(crate) ports: Vec<Port>,
    pub(crate) ifaces: Vec<Iface>,
    pub(crate) vrs: Vec<VrShared>,
}

/// What workers and readers hold: the current [`Shared`] and the counter
/// workers watch.
pub struct Tables {
    current: ArcSwap<Shared>,
    /// Bumped after every publication; workers refresh when it moves.
    pub(crate) generation: AtomicU64,
    /// Interfaces a worker keeps counters for: those at start plus room
    /// for [`IFACE_HEADROOM`] created at run time.
    pub(crate) iface_capacity: usize,
}

impl Tables {
    /// The topology now.
    pub fn load(&self) -> Arc<Shared> {
        self.current.load_full()
    }
}

/// Interfaces that may be created at run time beyond those at start (each
/// costs every worker one cache-line-aligned counter block).
pub const IFACE_HEADROOM: usize = 1024;

impl Shared {
    /// Whether VR `vr` exists (deleted VRs keep their index).
    pub fn vr_alive(&self, vr: usize) -> bool {
        self.vrs.get(vr).is_some_and(|v| v.alive)
    }

    /// The index of the live VR called `name`.
    pub fn vr_index(&self, name: &str) -> Option<usize> {
        self.vrs.iter().position(|v| v.alive && v.name == name)
    }

    /// VR `vr`'s limits.
    pub fn vr_limits(&self, vr: usize) -> Option<Limits> {
        self.vrs.get(vr).map(|v| v.limits)
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
    /// A VR of that name exists already.
    #[error("router {0:?} exists already")]
    DuplicateRouter(String),
    /// No interface of that name in the VR.
    #[error("router {router:?} has no interface {iface:?}")]
    NoSuchInterface {
        /// VR name.
        router: String,
        /// Interface name.
        iface: String,
    },
    /// An address that cannot be an interface's.
    #[error("interface {iface:?}: {addr}/{len}: {reason}")]
    BadAddress {
        /// Interface name.
        iface: String,
        /// The address.
        addr: IpAddr,
        /// Prefix length.
        len: u8,
        /// Why.
        reason: &'static str,
    },
    /// An interface of that name, but different, exists in the VR.
    #[error("router {router:?} already has a different interface {iface:?}")]
    DuplicateInterface {
        /// VR name.
        router: String,
        /// Interface name.
        iface: String,
    },
    /// Routes still go through the interface.
    #[error("interface {iface:?}: {routes} routes go through it; delete them first")]
    InterfaceInUse {
        /// Interface name.
        iface: String,
        /// How many.
        routes: usize,
    },
    /// No room for more interfaces without a restart.
    #[error(
        "no room for {wanted} more interfaces (at most {headroom} may be created at run time)"
    )]
    InterfaceCapacity {
        /// Interfaces asked for.
        wanted: usize,
        /// The run-time headroom.
        headroom: usize,
    },
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
    /// FIB publications so far, and the count the last
    /// [`TableWriter::compact_quiet_fibs`] saw: equal means no update since.
    fib_epoch: u64,
    quiet_epoch: u64,
    /// The `fib_epoch` at which the FIB was last found compact.
    compact_epoch: Option<u64>,
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
pub struct TableWriter {
    tables: Arc<Tables>,
    /// The working copy of the topology; published by [`TableWriter::commit`].
    shared: Shared,
    topology_dirty: bool,
    vrs: Vec<VrControl>,
    static_neighbors: Vec<Vec<(u16, IpAddr, EthernetAddress)>>,
    workers: Vec<SyncSender<Event>>,
    /// Neighbor events to send once the topology they refer to is published.
    pending: Vec<Event>,
    /// The VR [`TableWriter::compact_quiet_fibs`] looks at first.
    compact_next: usize,
}

impl TableWriter {
    /// Builds the tables for `spec` and publishes them.
    pub fn new(spec: &EngineSpec) -> Result<TableWriter, BuildError> {
        let ports: Vec<Port> = spec
            .ports
            .iter()
            .map(|p| Port {
                name: p.name.clone(),
                mtu: p.mtu,
                demux: vec![NO_IFACE; 4096].into_boxed_slice(),
            })
            .collect();
        let shared = Shared {
            ports,
            ifaces: Vec::new(),
            vrs: Vec::new(),
        };
        let iface_count: usize = spec.routers.iter().map(|r| r.interfaces.len()).sum();
        let mut writer = TableWriter {
            tables: Arc::new(Tables {
                current: ArcSwap::from_pointee(shared.clone()),
                generation: AtomicU64::new(0),
                iface_capacity: iface_count + IFACE_HEADROOM,
            }),
            shared,
            topology_dirty: true,
            vrs: Vec::new(),
            static_neighbors: Vec::new(),
            workers: Vec::new(),
            pending: Vec::new(),
            compact_next: 0,
        };
        for r in &spec.routers {
            writer.build_vr(r)?;
        }
        writer.commit();
        Ok(writer)
    }

    /// Adds a VR at run time; workers pick it up at [`TableWriter::commit`]
    /// without pausing the others. Returns its index. Nothing is changed
    /// when it fails.
    pub fn add_vr(&mut self, r: &RouterSpec) -> Result<usize, BuildError> {
        if self.shared.vr_index(&r.name).is_some() {
            return Err(BuildError::DuplicateRouter(r.name.clone()));
        }
        let wanted = r.interfaces.len();
        if self.shared.ifaces.len() + wanted > self.tables.iface_capacity {
            return Err(BuildError::InterfaceCapacity {
                wanted,
                headroom: IFACE_HEADROOM,
            });
        }
        // Build on a copy, so that a failure half-way leaves nothing behind.
        let saved = (
            self.shared.clone(),
            self.vrs.len(),
            self.static_neighbors.len(),
            self.pending.len(),
        );
        match self.build_vr(r) {
            Ok(vr) => {
                self.topology_dirty = true;
                Ok(vr)
            }
            Err(e) => {
                self.shared = saved.0;
                self.vrs.truncate(saved.1);
                self.static_neighbors.truncate(saved.2);
                self.pending.truncate(saved.3);
                Err(e)
            }
        }
    }

    /// Deletes VR `vr`: its interfaces leave the demux tables and its
    /// tables are freed. Its index is never reused. Visible after commit.
    pub fn remove_vr(&mut self, vr: usize) -> Result<(), BuildError> {
        self.vr(vr)?;
        let ifaces = std::mem::take(&mut self.shared.vrs[vr].ifaces);
        for gi in ifaces {
            let iface = &mut self.shared.ifaces[gi as usize];
            if let Some(port) = self.shared.ports.get_mut(iface.port as usize) {
                let slot = &mut port.demux[iface.vlan.unwrap_or(0) as usize];
                if *slot == gi {
                    *slot = NO_IFACE;
                }
            }
            iface.addrs4.clear();
            iface.addrs6.clear();
            iface.mcast.clear();
        }
        self.shared.vrs[vr].alive = false;
        let c = &mut self.vrs[vr];
        c.fib4.replace_all(std::iter::empty());
        c.fib6.replace_all(std::iter::empty());
        c.fib_dirty = true;
        self.static_neighbors[vr].clear();
        self.topology_dirty = true;
        Ok(())
    }

    /// Adds `addr/len` to interface `iface` of VR `vr`, with its connected,
    /// local (and IPv4 broadcast) routes. `Ok(false)` when it was there.
    pub fn add_address(
        &mut self,
        vr: usize,
        iface: &str,
        addr: IpAddr,
        len: u8,
    ) -> Result<bool, BuildError> {
        let gi = self.iface_index(vr, iface)?;
        check_address(iface, addr, len)?;
        let i = &self.shared.ifaces[gi as usize];
        let present = match addr {
            IpAddr::V4(a) => i.addrs4.contains(&(a, len)),
            IpAddr::V6(a) => i.addrs6.contains(&(a, len)),
        };
        if present {
            return Ok(false);
        }
        let (mut a4, mut a6) = (i.addrs4.clone(), i.addrs6.clone());
        match addr {
            IpAddr::V4(a) => a4.push((a, len)),
            IpAddr::V6(a) => a6.push((a, len)),
        }
        let (a6, mcast) = l3_config(i.mac, &a4, &a6);
        let i = &mut self.shared.ifaces[gi as usize];
        i.addrs4 = a4;
        i.addrs6 = a6;
        i.mcast = mcast;
        let c = &mut self.vrs[vr];
        let connected = c.nexthop(RouteHop::Connected { iface: gi });
        match addr {
            IpAddr::V4(a) => insert_v4_address(c, connected, a, len),
            IpAddr::V6(a) => insert_v6_address(c, connected, a, len),
        }
        // A first IPv6 address also brings the link-local one.
        if addr.is_ipv6() {
            if let Some(ll) = self.shared.ifaces[gi as usize].link_local() {
                insert_v6_address(&mut self.vrs[vr], connected, ll, 64);
            }
        }
        self.vrs[vr].fib_dirty = true;
        self.topology_dirty = true;
        Ok(true)
    }

    /// Removes `addr/len` from interface `iface` of VR `vr` with the routes
    /// it brought. `Ok(false)` when it was not there.
    pub fn remove_address(
        &mut self,
        vr: usize,
        iface: &str,
        addr: IpAddr,
        len: u8,
    ) -> Result<bool, BuildError> {
        let gi = self.iface_index(vr, iface)?;
        let i = &self.shared.ifaces[gi as usize];
        let (mut a4, mut a6) = (i.addrs4.clone(), i.addrs6.clone());
        let before = a4.len() + a6.len();
        match addr {
            IpAddr::V4(a) => a4.retain(|x| *x != (a, len)),
            IpAddr::V6(a) => a6.retain(|x| *x != (a, len)),
        }
        if a4.len() + a6.len() == before {
            return Ok(false);
        }
        let c = &mut self.vrs[vr];
        match addr {
            IpAddr::V4(a) => {
                if let Ok(host) = Prefix::new(a, 32) {
                    c.fib4.remove(&host);
                }
                if len <= 30 {
                    let bcast = Ipv4Addr::from(u32::from(a) | (u32::MAX >> len));
                    if let Ok(b) = Prefix::new(bcast, 32) {
                        c.fib4.remove(&b);
                    }
                }
                // The subnet stays while another address of the VR covers it.
                let covered = self.shared.vrs[vr].ifaces.iter().any(|&j| {
                    let addrs: &[(Ipv4Addr, u8)] = if j == gi {
                        &a4
                    } else {
                        &self.shared.ifaces[j as usize].addrs4
                    };
                    addrs
                        .iter()
                        .any(|&(b, l)| l == len && crate::iface::same_subnet4(a, b, len))
                });
                if !covered {
                    if let Ok(net) = Prefix4::new_truncating(a, len) {
                        c.fib4.remove(&net);
                    }
                }
            }
            IpAddr::V6(a) => {
                if let Ok(host) = Prefix::new(a, 128) {
                    c.fib6.remove(&host);
                }
                let covered = a6
                    .iter()
                    .any(|&(b, l)| l == len && crate::iface::same_subnet6(a, b, len));
                if !covered {
                    if let Ok(net) = Prefix6::new_truncating(a, len) {
                        c.fib6.remove(&net);
                    }
                }
            }
        }
        c.fib_dirty = true;
        let mac = self.shared.ifaces[gi as usize].mac;
        // Keep the link-local address only while a global one remains.
        if a6.iter().all(|(x, _)| wire6::is_link_local(x)) {
            a6.clear();
        }
        let (a6, mcast) = l3_config(mac, &a4, &a6);
        let i = &mut self.shared.ifaces[gi as usize];
        i.addrs4 = a4;
        i.addrs6 = a6;
        i.mcast = mcast;
        self.topology_dirty = true;
        Ok(true)
    }

    /// Adds interface `i` to VR `vr` while it runs; `Ok(false)` when an
    /// identical one is there. Visible after [`TableWriter::commit`]; nothing
    /// changes when it fails.
    pub fn add_interface(&mut self, vr: usize, i: &InterfaceSpec) -> Result<bool, BuildError> {
        self.vr(vr)?;
        if let Ok(gi) = self.iface_index(vr, &i.name) {
            let f = &self.shared.ifaces[gi as usize];
            let same = f.port == i.port && f.vlan == i.vlan && f.mac == i.mac;
            return if same {
                Ok(false)
            } else {
                Err(BuildError::DuplicateInterface {
                    router: self.shared.vrs[vr].name.clone(),
                    iface: i.name.clone(),
                })
            };
        }
        if self.shared.ifaces.len() + 1 > self.tables.iface_capacity {
            return Err(BuildError::InterfaceCapacity {
                wanted: 1,
                headroom: IFACE_HEADROOM,
            });
        }
        for &(a, len) in &i.addrs4 {
            check_address(&i.name, IpAddr::V4(a), len)?;
        }
        for &(a, len) in &i.addrs6 {
            check_address(&i.name, IpAddr::V6(a), len)?;
        }
        let name = self.shared.vrs[vr].name.clone();
        let cp = self.shared.vrs[vr].limits.control_plane;
        let gi = build_iface(&mut self.shared, &mut self.vrs[vr], vr, &name, cp, i)?;
        self.shared.vrs[vr].ifaces.push(gi);
        self.vrs[vr].fib_dirty = true;
        self.topology_dirty = true;
        Ok(true)
    }

    /// Removes interface `iface` of VR `vr` with its addresses and static
    /// neighbours; refused while routes of the VR go through it.
    /// `Ok(false)` when there is no such interface.
    pub fn remove_interface(&mut self, vr: usize, iface: &str) -> Result<bool, BuildError> {
        self.vr(vr)?;
        let Ok(gi) = self.iface_index(vr, iface) else {
            return Ok(false);
        };
        let users = self
            .route_list(vr)
            .iter()
            .filter(|(_, _, h)| matches!(h, RouteHop::Gateway { iface, .. } if *iface == gi))
            .count();
        if users > 0 {
            return Err(BuildError::InterfaceInUse {
                iface: iface.to_string(),
                routes: users,
            });
        }
        let f = &self.shared.ifaces[gi as usize];
        let addrs: Vec<(IpAddr, u8)> = f
            .addrs4
            .iter()
            .map(|&(a, l)| (IpAddr::V4(a), l))
            .chain(f.addrs6.iter().map(|&(a, l)| (IpAddr::V6(a), l)))
            .collect();
        for (a, l) in addrs {
            self.remove_address(vr, iface, a, l)?;
        }
        let f = &mut self.shared.ifaces[gi as usize];
        if let Some(port) = self.shared.ports.get_mut(f.port as usize) {
            let slot = &mut port.demux[f.vlan.unwrap_or(0) as usize];
            if *slot == gi {
                *slot = NO_IFACE;
            }
        }
        // The slot stays (indices never move); its name is free again.
        f.name.clear();
        f.mcast.clear();
        self.shared.vrs[vr].ifaces.retain(|&i| i != gi);
        self.static_neighbors[vr].retain(|&(i, _, _)| i != gi);
        self.topology_dirty = true;
        Ok(true)
    }

    fn iface_index(&self, vr: usize, name: &str) -> Result<u16, BuildError> {
        self.vr(vr)?;
        self.shared.vrs[vr]
            .ifaces
            .iter()
            .copied()
            .find(|&i| self.shared.ifaces[i as usize].name == name)
            .ok_or_else(|| BuildError::NoSuchInterface {
                router: self.shared.vrs[vr].name.clone(),
                iface: name.to_string(),
            })
    }

    /// Builds one VR into the working copy: interfaces, demux entries,
    /// connected routes, static neighbors and routes.
    fn build_vr(&mut self, r: &RouterSpec) -> Result<usize, BuildError> {
        let vr_idx = self.shared.vrs.len();
        let mut c = VrControl {
            fib4: FibHandle::new(),
            fib6: FibHandle::new(),
            nexthops: Vec::new(),
            nh_index: HashMap::new(),
            nh_dirty: true,
            fib_dirty: true,
            fib_epoch: 0,
            quiet_epoch: 0,
            compact_epoch: None,
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
        let cp = r.limits.control_plane;
        for i in &r.interfaces {
            vr_ifaces.push(build_iface(
                &mut self.shared,
                &mut c,
                vr_idx,
                &r.name,
                cp,
                i,
            )?);
        }
        self.shared.vrs.push(VrShared {
            name: r.name.clone(),
            ifaces: vr_ifaces,
            limits: r.limits,
            fib4: c.fib4.reader(),
            fib6: c.fib6.reader(),
            nexthops: Arc::new(ArcSwap::from_pointee(Vec::new())),
            alive: true,
        });
        self.vrs.push(c);
        self.static_neighbors.push(Vec::new());
        for &(addr, mac) in &r.neighbors {
            self.set_static_neighbor(vr_idx, addr, mac)?;
        }
        // One bulk load for the configured routes (a routes file can hold a
        // full table): the FIB is built in one pass, compact, not grown by
        // a million incremental inserts.
        self.add_routes(vr_idx, &r.routes4, &r.routes6)?;
        Ok(vr_idx)
    }

    /// The topology as last published.
    pub fn shared(&self) -> Arc<Shared> {
        self.tables.load()
    }

    /// What workers hold: the published topology and its generation.
    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    /// The working topology, unpublished changes included.
    pub fn working(&self) -> &Shared {
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
        let iface = self.gateway_iface(vr, target, v4)?;
        Ok(self.hop_id(vr, target, iface))
    }

    /// The next hop of `target`, whose gateway (if any) leaves by `iface`
    /// ([`TableWriter::gateway_iface`]).
    fn hop_id(&mut self, vr: usize, target: RouteTarget, iface: Option<u16>) -> NextHopId {
        match (target, iface) {
            (RouteTarget::Via(addr), Some(iface)) => {
                self.vrs[vr].nexthop(RouteHop::Gateway { iface, addr })
            }
            (RouteTarget::Unreachable, _) => NH_UNREACHABLE,
            _ => NH_BLACKHOLE,
        }
    }

    fn vr(&self, vr: usize) -> Result<(), BuildError> {
        if self.shared.vr_alive(vr) {
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

    /// Adds or replaces a route of either family in VR `vr`; workers see it
    /// after [`TableWriter::commit`]. Refused, changing nothing, when the
    /// target is not usable in the VR or the VR is at its route limit.
    pub fn add_route(
        &mut self,
        vr: usize,
        prefix: impl Into<IpPrefix>,
        target: RouteTarget,
    ) -> Result<(), BuildError> {
        use vrhost_fib::Lpm;
        let prefix = prefix.into();
        self.vr(vr)?;
        // Room first: a refused route must not leave its next hop behind.
        self.check_room(vr, |c| match &prefix {
            IpPrefix::V4(p) => (c.fib4.table().len(), c.fib4.table().get(p).is_some()),
            IpPrefix::V6(p) => (c.fib6.table().len(), c.fib6.table().get(p).is_some()),
        })?;
        let nh = self.target(vr, target, prefix.is_ipv4())?;
        let c = &mut self.vrs[vr];
        match prefix {
            IpPrefix::V4(p) => c.fib4.insert(p, nh),
            IpPrefix::V6(p) => c.fib6.insert(p, nh),
        };
        c.fib_dirty = true;
        Ok(())
    }

    /// Adds or replaces many routes at once; workers see them after
    /// [`TableWriter::commit`]. Every target is checked, and the route limit
    /// for the whole batch, before anything changes. A batch large against
    /// the table rebuilds it with one bulk load (several million routes a
    /// second) instead of inserting route by route.
    pub fn add_routes(
        &mut self,
        vr: usize,
        routes4: &[(Prefix4, RouteTarget)],
        routes6: &[(Prefix6, RouteTarget)],
    ) -> Result<(), BuildError> {
        use vrhost_fib::Lpm;
        self.vr(vr)?;
        // Every gateway's interface, or the first refusal, before anything changes.
        let ifaces4 = routes4
            .iter()
            .map(|&(_, t)| self.gateway_iface(vr, t, true))
            .collect::<Result<Vec<_>, _>>()?;
        let ifaces6 = routes6
            .iter()
            .map(|&(_, t)| self.gateway_iface(vr, t, false))
            .collect::<Result<Vec<_>, _>>()?;
        let limit = self.shared.vrs[vr].limits.max_routes as usize;
        let c = &self.vrs[vr];
        let new4 = new_prefixes(&c.fib4, routes4);
        let new6 = new_prefixes(&c.fib6, routes6);
        if c.fib4.table().len() + new4 > limit || c.fib6.table().len() + new6 > limit {
            return Err(BuildError::RouteLimit {
                router: self.shared.vrs[vr].name.clone(),
                limit: limit as u32,
            });
        }
        let ids4: Vec<_> = routes4
            .iter()
            .zip(ifaces4)
            .map(|(&(p, t), i)| (p, self.hop_id(vr, t, i)))
            .collect();
        let ids6: Vec<_> = routes6
            .iter()
            .zip(ifaces6)
            .map(|(&(p, t), i)| (p, self.hop_id(vr, t, i)))
            .collect();
        let c = &mut self.vrs[vr];
        bulk_insert(&mut c.fib4, ids4);
        bulk_insert(&mut c.fib6, ids6);
        c.fib_dirty = true;
        Ok(())
    }

    /// Removes many routes at once (missing ones are ignored); returns how
    /// many existed. Visible after [`TableWriter::commit`].
    pub fn remove_routes(&mut self, vr: usize, routes4: &[Prefix4], routes6: &[Prefix6]) -> usize {
        let Some(c) = self.vrs.get_mut(vr) else {
            return 0;
        };
        c.fib_dirty = true;
        bulk_remove(&mut c.fib4, routes4) + bulk_remove(&mut c.fib6, routes6)
    }

    /// Removes a route of either family; true if it existed. Visible after
    /// [`TableWriter::commit`].
    pub fn remove_route(&mut self, vr: usize, prefix: impl Into<IpPrefix>) -> bool {
        let Some(c) = self.vrs.get_mut(vr) else {
            return false;
        };
        c.fib_dirty = true;
        match prefix.into() {
            IpPrefix::V4(p) => c.fib4.remove(&p).is_some(),
            IpPrefix::V6(p) => c.fib6.remove(&p).is_some(),
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
                c.fib_epoch += 1;
                any = true;
            } else {
                c.fib4.reclaim();
                c.fib6.reclaim();
            }
        }
        if self.topology_dirty {
            self.tables.current.store(Arc::new(self.shared.clone()));
            self.topology_dirty = false;
            any = true;
        }
        if any {
            self.tables.generation.fetch_add(1, Ordering::Release);
        }
        // Neighbor facts about what was just published.
        for ev in self.pending.drain(..) {
            for w in &self.workers {
                // A full inbox means a stalled worker; it will learn by ARP/ND instead.
                let _ = w.try_send(ev);
            }
        }
    }

    /// Compacts the FIBs of VRs whose routes have not changed since the
    /// previous call: rebuilds the /8 groups that incremental updates left
    /// sparse (see `vrhost_fib::PoptrieLpm::compact`), up to about
    /// `route_budget` routes' worth in all, VR after VR from where the last
    /// call stopped, and publishes them. Returns how many routes' groups it
    /// rebuilt.
    ///
    /// Called on a timer (`vrhost run` every 100 ms), so a table fed route
    /// by route (a BGP full feed through FRR) sheds its garbage within
    /// seconds of the feed going quiet, and a VR in the middle of an update
    /// burst is left alone. A VR found compact is not looked at again until
    /// its routes change, so idle VRs cost nothing per call.
    pub fn compact_quiet_fibs(&mut self, route_budget: usize) -> usize {
        let n = self.vrs.len();
        let mut spent = 0;
        let mut compacted = Vec::new();
        for k in 0..n {
            if spent >= route_budget {
                break;
            }
            let vr = (self.compact_next + k) % n;
            let c = &mut self.vrs[vr];
            if c.fib_epoch != c.quiet_epoch || c.fib_dirty {
                c.quiet_epoch = c.fib_epoch;
                continue;
            }
            if c.compact_epoch == Some(c.fib_epoch) {
                continue;
            }
            let left = route_budget - spent;
            let done4 = c.fib4.compact(left);
            let done6 = if done4 < left {
                c.fib6.compact(left - done4)
            } else {
                0
            };
            if done4 + done6 == 0 {
                c.compact_epoch = Some(c.fib_epoch);
            } else {
                c.fib_dirty = true;
                compacted.push(vr);
                spent += done4 + done6;
            }
            // A VR that used up the budget may have more to do: start there.
            self.compact_next = if spent >= route_budget {
                vr
            } else {
                (vr + 1) % n
            };
        }
        if !compacted.is_empty() {
            self.commit();
            // The compaction's own publication is not an update.
            for vr in compacted {
                let c = &mut self.vrs[vr];
                c.quiet_epoch = c.fib_epoch;
            }
        }
        spent
    }

    /// Installs or replaces a static neighbor in every worker, at the next
    /// [`TableWriter::commit`].
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
        // A static neighbor is one per address; one that moved to another
        // interface is forgotten on the old one.
        if let Some(old) = self.take_static_neighbor(vr, addr) {
            if old != iface {
                self.forget_static(vr, old, addr);
            }
        }
        self.static_neighbors[vr].push((iface, addr, mac));
        // Sent at the next commit, after the VR it names is published.
        self.pending.push(Event::Static {
            vr: vr as u16,
            iface,
            addr,
            mac,
        });
        Ok(())
    }

    /// Routes in VR `vr`'s tables (control view, unpublished changes included).
    pub fn routes(&self, vr: usize) -> (usize, usize) {
        use vrhost_fib::Lpm;
        self.vrs
            .get(vr)
            .map_or((0, 0), |c| (c.fib4.table().len(), c.fib6.table().len()))
    }

    /// FIB memory of VR `vr`, both families, in bytes.
    pub fn fib_memory(&self, vr: usize) -> usize {
        use vrhost_fib::Lpm;
        self.vrs.get(vr).map_or(0, |c| {
            c.fib4.table().memory_bytes() + c.fib6.table().memory_bytes()
        })
    }

    /// Every route of VR `vr` with what it points at, IPv4 then IPv6, in
    /// prefix order within each family.
    pub fn route_list(&self, vr: usize) -> Vec<(IpAddr, u8, RouteHop)> {
        use vrhost_fib::Lpm;
        let Some(c) = self.vrs.get(vr) else {
            return Vec::new();
        };
        let hop = |id: NextHopId| {
            c.nexthops
                .get(id.0 as usize)
                .copied()
                .unwrap_or(RouteHop::Blackhole)
        };
        let mut v4 = Vec::new();
        c.fib4
            .table()
            .for_each(&mut |p, id| v4.push((IpAddr::V4(p.addr()), p.len(), hop(id))));
        let mut v6 = Vec::new();
        c.fib6
            .table()
            .for_each(&mut |p, id| v6.push((IpAddr::V6(p.addr()), p.len(), hop(id))));
        v4.sort_unstable_by_key(|r| (r.0, r.1));
        v6.sort_unstable_by_key(|r| (r.0, r.1));
        v4.extend(v6);
        v4
    }

    /// What the route for exactly `addr/len` in VR `vr` points at, if any.
    pub fn route(&self, vr: usize, addr: IpAddr, len: u8) -> Option<RouteHop> {
        use vrhost_fib::Lpm;
        let c = self.vrs.get(vr)?;
        let id = match addr {
            IpAddr::V4(a) => c.fib4.table().get(&Prefix::new(a, len).ok()?)?,
            IpAddr::V6(a) => c.fib6.table().get(&Prefix::new(a, len).ok()?)?,
        };
        c.nexthops.get(id.0 as usize).copied()
    }

    /// Whether VR `vr` would accept a route to `target` for a prefix of the
    /// family `v4` (a gateway on one of its subnets, of the same family),
    /// without changing anything.
    pub fn check_target(&self, vr: usize, target: RouteTarget, v4: bool) -> Result<(), BuildError> {
        self.gateway_iface(vr, target, v4).map(|_| ())
    }

    /// The egress interface of a gateway target (`None` for blackhole and
    /// unreachable), or why the VR refuses it.
    fn gateway_iface(
        &self,
        vr: usize,
        target: RouteTarget,
        v4: bool,
    ) -> Result<Option<u16>, BuildError> {
        self.vr(vr)?;
        let RouteTarget::Via(via) = target else {
            return Ok(None);
        };
        let router = || self.shared.vrs[vr].name.clone();
        if via.is_ipv4() != v4 {
            return Err(BuildError::FamilyMismatch {
                router: router(),
                via,
            });
        }
        self.on_link_iface(vr, via)
            .map(Some)
            .ok_or_else(|| BuildError::GatewayOffLink {
                router: router(),
                via,
            })
    }

    /// Static neighbors of VR `vr`: (interface, address, MAC).
    pub fn static_neighbor_list(&self, vr: usize) -> Vec<(u16, IpAddr, EthernetAddress)> {
        self.static_neighbors.get(vr).cloned().unwrap_or_default()
    }

    /// Removes a static neighbor. At the next commit every worker forgets
    /// its MAC: the next packet for it is held while ARP or NDP resolves the
    /// address afresh, as after `ip neigh del`. `Ok(false)` when absent.
    pub fn remove_static_neighbor(&mut self, vr: usize, addr: IpAddr) -> Result<bool, BuildError> {
        self.vr(vr)?;
        let Some(iface) = self.take_static_neighbor(vr, addr) else {
            return Ok(false);
        };
        self.forget_static(vr, iface, addr);
        Ok(true)
    }

    /// Removes the static entry for `addr` from the control view, returning
    /// its interface.
    fn take_static_neighbor(&mut self, vr: usize, addr: IpAddr) -> Option<u16> {
        let list = &mut self.static_neighbors[vr];
        let i = list.iter().position(|&(_, a, _)| a == addr)?;
        Some(list.remove(i).0)
    }

    /// Tells the workers, at the next commit, to forget the static MAC of
    /// `addr` on `iface`.
    fn forget_static(&mut self, vr: usize, iface: u16, addr: IpAddr) {
        self.pending.push(Event::Unstatic {
            vr: vr as u16,
            iface,
            addr,
        });
    }
}

/// The IPv6 addresses an interface really has (the configured ones plus a
/// link-local one derived from the MAC, when it has any IPv6) and the
/// multicast MACs it accepts.
fn l3_config(
    mac: EthernetAddress,
    addrs4: &[(Ipv4Addr, u8)],
    addrs6: &[(Ipv6Addr, u8)],
) -> (Vec<(Ipv6Addr, u8)>, Vec<EthernetAddress>) {
    let mut addrs6 = addrs6.to_vec();
    let mut mcast = Vec::new();
    if !addrs6.is_empty() {
        let ll = link_local_from_mac(mac);
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
    if !addrs4.is_empty() {
        // All-systems and all-routers (RFC 1112, RFC 1812 §2.2.8.2).
        mcast.push(ethernet::ipv4_multicast_mac(&Ipv4Addr::new(224, 0, 0, 1)));
        mcast.push(ethernet::ipv4_multicast_mac(&Ipv4Addr::new(224, 0, 0, 2)));
    }
    (addrs6, mcast)
}

/// The connected, local and (up to /30) broadcast routes of an IPv4 address.
fn insert_v4_address(c: &mut VrControl, connected: NextHopId, a: Ipv4Addr, len: u8) {
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

/// The connected and local routes of an IPv6 address.
fn insert_v6_address(c: &mut VrControl, connected: NextHopId, a: Ipv6Addr, len: u8) {
    if let Ok(net) = Prefix6::new_truncating(a, len) {
        c.fib6.insert(net, connected);
    }
    if let Ok(host) = Prefix::new(a, 128) {
        c.fib6.insert(host, NH_LOCAL);
    }
}

/// Refuses addresses no interface may have.
fn check_address(iface: &str, addr: IpAddr, len: u8) -> Result<(), BuildError> {
    let bad = |reason| {
        Err(BuildError::BadAddress {
            iface: iface.to_string(),
            addr,
            len,
            reason,
        })
    };
    match addr {
        IpAddr::V4(a) => {
            if len > 32 {
                return bad("prefix length over 32");
            }
            if a.is_unspecified() || a.is_multicast() || a.is_loopback() || a.is_broadcast() {
                return bad("unspecified, loopback, multicast or broadcast");
            }
            if len <= 30 {
                let host = u32::from(a) & (u32::MAX >> len);
                if host == 0 || host == u32::MAX >> len {
                    return bad("the subnet's network or broadcast address");
                }
            }
        }
        IpAddr::V6(a) => {
            if len > 128 {
                return bad("prefix length over 128");
            }
            if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
                return bad("unspecified, loopback or multicast");
            }
        }
    }
    Ok(())
}

/// How many distinct prefixes of `routes` `fib` does not hold yet: a prefix
/// given twice (the later one wins) is one new route.
fn new_prefixes<A: vrhost_fib::FibAddr, T>(fib: &FibHandle<A>, routes: &[(Prefix<A>, T)]) -> usize {
    use vrhost_fib::Lpm;
    let mut new: Vec<Prefix<A>> = routes
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| fib.table().get(p).is_none())
        .collect();
    new.sort_unstable();
    new.dedup();
    new.len()
}

/// Whether changing `batch` routes of a table of `len` is cheaper as one
/// bulk load of the whole table than route by route: a bulk load costs
/// ~0.1 µs per route in the table, an insert or remove ~3 µs, so rebuild
/// when the table is under ~24 times the batch (and the batch is not tiny).
fn rebuild_pays(batch: usize, len: usize) -> bool {
    batch >= 4096 && batch * 24 >= len
}

/// Inserts `routes`, rebuilding the table in one bulk load when they are
/// many against its size (later routes win over earlier and existing ones).
fn bulk_insert<A: vrhost_fib::FibAddr>(
    fib: &mut FibHandle<A>,
    routes: Vec<(Prefix<A>, NextHopId)>,
) {
    use vrhost_fib::Lpm;
    let len = fib.table().len();
    if rebuild_pays(routes.len(), len) {
        let mut all = Vec::with_capacity(len + routes.len());
        fib.table().for_each(&mut |p, nh| all.push((p, nh)));
        all.extend(routes);
        fib.replace_all(all);
    } else {
        for (p, nh) in routes {
            fib.insert(p, nh);
        }
    }
}

/// Removes `prefixes`, rebuilding the table in one bulk load when they are
/// many against its size. Returns how many existed.
fn bulk_remove<A: vrhost_fib::FibAddr>(fib: &mut FibHandle<A>, prefixes: &[Prefix<A>]) -> usize {
    use vrhost_fib::Lpm;
    let len = fib.table().len();
    if rebuild_pays(prefixes.len(), len) {
        let gone: std::collections::HashSet<Prefix<A>> = prefixes.iter().copied().collect();
        let mut keep = Vec::with_capacity(len);
        fib.table().for_each(&mut |p, nh| {
            if !gone.contains(&p) {
                keep.push((p, nh));
            }
        });
        let removed = len - keep.len();
        fib.replace_all(keep);
        removed
    } else {
        prefixes.iter().filter(|p| fib.remove(p).is_some()).count()
    }
}

/// Builds interface `i` of VR `vr_idx` (`router` by name; `control_mcast`
/// when it has a control plane) into `shared`:
/// its demux entry, its connected, local and broadcast routes in `c`.
/// Returns its global index.
fn build_iface(
    shared: &mut Shared,
    c: &mut VrControl,
    vr_idx: usize,
    router: &str,
    control_mcast: bool,
    i: &InterfaceSpec,
) -> Result<u16, BuildError> {
    let gi = shared.ifaces.len() as u16;
    let Some(port) = shared.ports.get_mut(i.port as usize) else {
        return Err(BuildError::NoSuchPort {
            router: router.to_string(),
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
            first: shared.ifaces[*slot as usize].name.clone(),
            second: i.name.clone(),
            port: port.name.clone(),
            vlan,
        });
    }
    *slot = gi;
    // An interface never sends more than its port carries.
    let mtu = i.mtu.min(port.mtu);
    let (addrs6, mcast) = l3_config(i.mac, &i.addrs4, &i.addrs6);
    // Connected, local and broadcast routes.
    let connected = c.nexthop(RouteHop::Connected { iface: gi });
    for &(a, len) in &i.addrs4 {
        insert_v4_address(c, connected, a, len);
    }
    for &(a, len) in &addrs6 {
        insert_v6_address(c, connected, a, len);
    }
    shared.ifaces.push(Iface {
        name: i.name.clone(),
        vr: vr_idx as u16,
        port: i.port,
        vlan: i.vlan,
        mac: i.mac,
        mtu,
        addrs4: i.addrs4.clone(),
        addrs6,
        mcast,
        control_mcast,
    });
    Ok(gi)
}
