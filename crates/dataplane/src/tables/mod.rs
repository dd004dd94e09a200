//! The tables every worker reads, and the control side that changes them.
//!
//! ```text
//!   TableWriter (one thread)                     Shared (Arc)                    Worker k
//!   ────────────────────────                     ────────────                    ────────
//!   per VR: FibHandle v4/v6 ── publish ──▶ FibReader v4/v6 ─────────── load_full ─▶ Arc<FibSnapshot>
//!           next hops (counted) ─── store ─▶ ArcSwap<NextHops> ──────── load_full ─▶ Arc<NextHops>
//!   commit(): bump `generation` (Release) ─────▶ AtomicU64 ◀── one Acquire load per burst;
//!                                                                  refresh the Arcs when it moved
//!   static neighbors ──────────────── Event ─────────────────────────────▶ control queue (unbounded)
//! ```
//!
//! Workers never lock and never wait: between two bursts a worker compares one
//! counter and, when it moved, swaps the `Arc`s it holds. Next hops are
//! published before the FIB that uses them, and an id no route names any
//! more is reused only once no worker holds a FIB that named it (`hops`), so
//! a FIB a worker holds never names a next hop its array lacks or means
//! another. Old snapshots are freed on the control thread
//! ([`vrhost_fib::FibHandle::reclaim`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use arc_swap::ArcSwap;
use thiserror::Error;
use vrhost_fib::{FibHandle, FibReader, IpPrefix, NextHopId, Prefix, Prefix4, Prefix6};
use vrhost_wire::ethernet::{self, EthernetAddress};
use vrhost_wire::ipv6 as wire6;

use crate::iface::{link_local_from_mac, qinq_key, Iface, Port, NO_IFACE};
use crate::neighbor::Event;

mod filters;
mod hops;
mod interfaces;
mod neighbors;
mod routes;
mod vrs;
use crate::spec::{
    EngineSpec, IfaceId, InterfaceSpec, Limits, PortId, RouteTarget, RouterSpec, VrId,
};

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
    /// Multipath: one of several gateways by the flow's hash. The group's
    /// bucket table starts at `base` in the VR's [`NextHops`] (512 bucket
    /// entries, each a member's next-hop id, then its `members` distinct ids).
    Group {
        /// Index of its first bucket.
        base: u32,
        /// How many gateways.
        members: u16,
    },
}

/// Buckets of a multipath group's table: a flow's hash picks one, each
/// bucket names a gateway. 512 keeps the share of two equal gateways within
/// a few percent of half and touches one cache line per packet.
pub(crate) const GROUP_BUCKETS: usize = 512;
/// log2 of [`GROUP_BUCKETS`]: the flow hash's top bits index the table.
pub(crate) const GROUP_BUCKET_BITS: u32 = 9;

/// A VR's next hops as every worker sees them: the [`RouteHop`] of each
/// FIB answer (indexed by [`NextHopId`]), and the bucket tables of its
/// multipath groups. An id keeps its meaning while any worker may hold a
/// FIB naming it; a group's table moves only in a new `NextHops`, which a
/// worker loads with the FIB it reads it with.
#[derive(Clone, Debug, Default)]
pub struct NextHops {
    pub(crate) hops: Vec<RouteHop>,
    pub(crate) buckets: Vec<u32>,
}

impl core::ops::Deref for NextHops {
    type Target = [RouteHop];
    fn deref(&self) -> &[RouteHop] {
        &self.hops
    }
}

impl NextHops {
    /// The gateway group `hop`'s bucket `hash` picks (the top
    /// [`GROUP_BUCKET_BITS`] bits of the hash index its table).
    #[inline(always)]
    pub(crate) fn pick(&self, base: u32, hash: u32) -> Option<u32> {
        let b = base as usize + (hash >> (32 - GROUP_BUCKET_BITS)) as usize;
        self.buckets.get(b).copied()
    }

    /// The distinct gateways (next-hop ids) of the group at `base`.
    pub(crate) fn members(&self, base: u32, members: u16) -> &[u32] {
        let start = base as usize + GROUP_BUCKETS;
        self.buckets
            .get(start..start + usize::from(members))
            .unwrap_or(&[])
    }
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
    pub ifaces: Vec<IfaceId>,
    pub limits: Limits,
    pub fib4: FibReader<Ipv4Addr>,
    pub fib6: FibReader<Ipv6Addr>,
    pub nexthops: Arc<ArcSwap<NextHops>>,
    /// Its rule lists, in order; its interfaces point at them.
    pub filters: Vec<Arc<crate::filter::Filter>>,
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
    /// Packet traces armed on these tables' workers.
    pub(crate) trace: Arc<crate::trace::TraceHub>,
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
    pub fn vr_alive(&self, vr: VrId) -> bool {
        let vr = vr.index();
        self.vrs.get(vr).is_some_and(|v| v.alive)
    }

    /// Whether interface `iface` is still in use: its VR is alive and its
    /// port and VLAN still lead to it. A deleted interface keeps its slot
    /// (and its port and VLAN, which another interface may own by now).
    pub fn iface_attached(&self, iface: IfaceId) -> bool {
        let Some(i) = self.ifaces.get(iface.index()) else {
            return false;
        };
        self.vr_alive(VrId::new(usize::from(i.vr)))
            && self.demux_slot(i.port, i.vlan, i.inner_vlan) == Some(iface.get())
    }

    /// The interface the demux tables give `port`, `vlan` (`None`:
    /// untagged) and `inner` (QinQ), or [`NO_IFACE`].
    pub(crate) fn demux_slot(
        &self,
        port: u16,
        vlan: Option<u16>,
        inner: Option<u16>,
    ) -> Option<u16> {
        let port = self.ports.get(usize::from(port))?;
        match (vlan, inner) {
            (Some(outer), Some(inner)) => port.qinq.get(&qinq_key(outer, inner)).copied(),
            _ => port.demux.get(usize::from(vlan.unwrap_or(0))).copied(),
        }
    }

    /// The live VR whose interface has `port`, `vlan` (`None`: untagged)
    /// and `inner` (QinQ).
    pub fn demux_owner(&self, port: u16, vlan: Option<u16>, inner: Option<u16>) -> Option<VrId> {
        let gi = self.demux_slot(port, vlan, inner)?;
        let vr = VrId::new(usize::from(self.ifaces.get(usize::from(gi))?.vr));
        self.vr_alive(vr).then_some(vr)
    }

    /// The index of the live VR called `name`.
    pub fn vr_index(&self, name: &str) -> Option<VrId> {
        self.vrs
            .iter()
            .position(|v| v.alive && v.name == name)
            .map(VrId::new)
    }

    /// VR `vr`'s limits.
    pub fn vr_limits(&self, vr: VrId) -> Option<Limits> {
        let vr = vr.index();
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

    /// Every port, in order.
    pub fn port_ids(&self) -> impl Iterator<Item = PortId> {
        (0..self.ports.len()).map(PortId::from_index)
    }

    /// Every VR ever added, deleted ones included (see [`Shared::vr_alive`]).
    pub fn vr_ids(&self) -> impl Iterator<Item = VrId> {
        (0..self.vrs.len()).map(VrId::new)
    }

    /// Port name.
    pub fn port_name(&self, port: PortId) -> &str {
        &self.ports[port.index()].name
    }

    /// Number of VRs.
    pub fn vr_count(&self) -> usize {
        self.vrs.len()
    }

    /// VR name.
    pub fn vr_name(&self, vr: VrId) -> &str {
        let vr = vr.index();
        &self.vrs[vr].name
    }

    /// A VR's interfaces (global indices).
    pub fn vr_ifaces(&self, vr: VrId) -> &[IfaceId] {
        let vr = vr.index();
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
    /// Two interfaces claim one (port, VLAN) or (port, VLAN, inner VLAN).
    #[error("interfaces {first:?} and {second:?} both use port {port:?} VLAN {vlan}")]
    DuplicateDemux {
        /// First interface.
        first: String,
        /// Second interface.
        second: String,
        /// Port name.
        port: String,
        /// VLAN, 0 for untagged; `OUTER.INNER` for QinQ.
        vlan: String,
    },
    /// An inner VLAN without an outer one.
    #[error("interface {iface:?}: inner_vlan needs vlan (the outer tag)")]
    InnerWithoutOuter {
        /// Interface name.
        iface: String,
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
    /// The VR's routes name `max_nexthop_groups` multipath groups already.
    #[error(
        "router {router:?}: multipath group limit reached ({limit} groups; raise limits.max_nexthop_groups)"
    )]
    GroupLimit {
        /// VR name.
        router: String,
        /// The limit.
        limit: u32,
    },
    /// The VR holds `max_addresses` interface addresses already.
    #[error(
        "router {router:?}: address limit reached ({limit} addresses; raise limits.max_addresses)"
    )]
    AddressLimit {
        /// VR name.
        router: String,
        /// The limit.
        limit: u32,
    },
    /// The VR holds `max_neighbors` static neighbours already.
    #[error(
        "router {router:?}: static neighbour limit reached ({limit}; raise limits.max_neighbors)"
    )]
    NeighborLimit {
        /// VR name.
        router: String,
        /// The limit.
        limit: u32,
    },
    /// A rule list that does not build.
    #[error(transparent)]
    Filter(crate::filter::FilterError),
    /// More lists, or rules in all lists, than a VR may have.
    #[error("router {router:?}: {}", crate::filter::limits_message(*lists, *rules))]
    FilterLimit {
        /// VR name.
        router: String,
        /// Lists asked for.
        lists: usize,
        /// Rules in them.
        rules: usize,
    },
    /// Two rule lists of one name.
    #[error("router {router:?}: two filters named {filter:?}")]
    DuplicateFilter {
        /// VR name.
        router: String,
        /// The name.
        filter: String,
    },
    /// An interface names a rule list the VR does not have.
    #[error("interface {iface:?}: no filter {filter:?} in its router")]
    NoSuchFilter {
        /// Interface name.
        iface: String,
        /// The name.
        filter: String,
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
    nexthops: NextHops,
    nh_index: HashMap<RouteHop, u32>,
    /// Multipath groups by their (member id, weight) list, sorted.
    group_index: HashMap<Vec<(u32, u16)>, u32>,
    /// Each group's gateways (next-hop ids) and weights, by its first
    /// bucket, until the group is reaped. Groups are not in `nh_index`.
    group_paths: HashMap<u32, Vec<(u32, u16)>>,
    /// Per next-hop id: the routes (both families) and groups naming it.
    refs: Vec<u32>,
    /// Ids whose count fell to zero since the last settle ([`hops`]).
    zero: Vec<u32>,
    /// Ids let go, with the FIB version ([`VrControl::epoch`]) at which
    /// they were: reusable once a later FIB is published and no worker
    /// holds an older one.
    dying: Vec<(u32, u64)>,
    /// Ids to reuse.
    free: Vec<u32>,
    /// Next hops appended since the last publication.
    nh_dirty: bool,
    fib_dirty: bool,
    /// The FIB version ([`VrControl::epoch`]) the last
    /// [`TableWriter::compact_quiet_fibs`] saw: equal means no update since.
    quiet_epoch: u64,
    /// The FIB version at which the FIB was last found compact.
    compact_epoch: Option<u64>,
}

/// The one writer of the shared tables.
pub struct TableWriter {
    tables: Arc<Tables>,
    /// The working copy of the topology; published by [`TableWriter::commit`].
    shared: Shared,
    topology_dirty: bool,
    vrs: Vec<VrControl>,
    static_neighbors: Vec<Vec<(u16, IpAddr, EthernetAddress)>>,
    workers: Vec<Sender<Event>>,
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
                qinq: HashMap::new(),
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
                trace: Arc::default(),
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

    /// Interfaces that may still be created (deleted ones keep their slots).
    pub fn iface_room(&self) -> usize {
        self.tables
            .iface_capacity
            .saturating_sub(self.shared.ifaces.len())
    }

    /// The topology as last published.
    pub fn shared(&self) -> Arc<Shared> {
        self.tables.load()
    }

    /// What workers hold: the published topology and its generation.
    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    /// Where packet traces of these tables' workers are armed
    /// ([`crate::trace`]).
    pub fn trace_hub(&self) -> Arc<crate::trace::TraceHub> {
        self.tables.trace.clone()
    }

    /// The working topology, unpublished changes included.
    pub fn working(&self) -> &Shared {
        &self.shared
    }

    /// Registers a worker's inbox for the control side's neighbor events.
    pub(crate) fn attach_worker(&mut self, inbox: Sender<Event>) {
        self.workers.push(inbox);
    }

    /// Publishes every change since the last commit: next hops first, then
    /// FIBs, then the generation workers watch.
    pub fn commit(&mut self) {
        let mut any = false;
        for (c, s) in self.vrs.iter_mut().zip(self.shared.vrs.iter()) {
            // Ids the workers have moved past first, then those let go now.
            c.reap();
            c.settle();
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
        if self.topology_dirty {
            self.tables.current.store(Arc::new(self.shared.clone()));
            self.topology_dirty = false;
            any = true;
        }
        // Neighbor facts about what was just published, queued before the
        // generation moves: a worker reads its queue only once it has.
        any |= !self.pending.is_empty();
        for ev in self.pending.drain(..) {
            for w in &self.workers {
                // Unbounded: none is lost. A worker gone (stopped) needs none.
                let _ = w.send(ev);
            }
        }
        if any {
            self.tables.generation.fetch_add(1, Ordering::Release);
        }
    }
}
