//! The management API's backend over the running data plane: every call
//! takes the control lock, changes the working tables, and publishes once
//! with `commit` (workers never wait on the lock).
//!
//! ```text
//!   vrhost ctl / curl ──HTTP──▶ vrhost-api (auth, parsing, OpenAPI, metrics)
//!                                  │ Backend
//!                                  ▼
//!                       RuntimeBackend ── lock ──▶ TableWriter ── commit ──▶ workers
//!                                  └──────── counters (read, lock-free) ◀──┘
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use vrhost_api::types::{
    BulkResult, BulkRoutes, CounterSet, Gateway, IfaceAddr, InterfaceCounters, InterfaceInfo,
    MacAddr, Neighbor, Outcome, PortInfo, Prefix, ReloadReport, Route, RoutePage,
    RouteTarget as ApiTarget, UrpfMode, VlanTpid, VrControl, VrCounters, VrInfo, VrPolicy, VrSpec,
    WorkerInfo,
};
use vrhost_api::{ApiConfig, ApiError, ApiHandle, Auth, Backend, BadTokenHash};
use vrhost_config::Config;
use vrhost_dataplane::{
    sum_ifaces, sum_ports, sum_vr_busy_ns, BuildError, Counters, IfaceId, InterfaceSpec, Limits,
    Path, Paths, PortId, RouteHop, RouteTarget, RouterSpec, TableWriter, Tpid, Urpf, VrId,
    WorkerCounters,
};
use vrhost_fib::IpPrefix;
use vrhost_wire::ethernet::EthernetAddress;

use crate::runtime::{lock, Assignment, Running};

/// `(VR name, token hash)` of every router in `cfg` that has a token.
pub fn vr_tokens(cfg: &Config) -> Vec<(String, String)> {
    cfg.routers
        .iter()
        .filter_map(|r| Some((r.name.clone(), r.api_token_sha256.clone()?)))
        .collect()
}

/// The API's view of a running router.
pub struct RuntimeBackend {
    writer: Arc<Mutex<TableWriter>>,
    counters: Vec<Arc<WorkerCounters>>,
    assignment: Vec<Assignment>,
    /// The config in force (replaced by a successful reload).
    config: Mutex<Config>,
    /// Directory relative paths in a reloaded config resolve against.
    base_dir: PathBuf,
    /// Port MACs as the engine uses them (the config's, or the Linux interface's).
    port_macs: Vec<[u8; 6]>,
    /// The tokens the API accepts: a VR's is installed with it, revoked with
    /// it and replaced by reload, always under the writer lock.
    auth: Arc<Auth>,
    /// The running VRs that are the config's routers, by name: a VR deleted
    /// and created again through the API under a config router's name is
    /// not that router, and never gets its token from a reload.
    from_config: Mutex<HashMap<String, VrId>>,
    /// Held through a reload: one at a time.
    reloading: Mutex<()>,
    /// Live captures.
    captures: Arc<crate::capture::CaptureHub>,
}

/// The backend over `running` for `cfg`, and the API serving it when the
/// config has an `[api]` table. The backend also serves `SIGHUP` reloads, so
/// it exists without the API too.
pub fn start(
    cfg: &Config,
    config_path: &std::path::Path,
    running: &Running,
) -> Result<(Arc<RuntimeBackend>, Option<ApiHandle>)> {
    // Without [api] nobody can present a token; a random admin hash keeps
    // the backend's token bookkeeping uniform.
    let admin = cfg.api.as_ref().map_or_else(
        || vrhost_api::hash_token(&vrhost_api::generate_token()),
        |a| a.admin_token_sha256.clone(),
    );
    let auth = Arc::new(Auth::new(&admin, &vr_tokens(cfg))?);
    let backend = Arc::new(RuntimeBackend::new(cfg, config_path, running, auth.clone()));
    let Some(api) = &cfg.api else {
        return Ok((backend, None));
    };
    // API changes of earlier runs, on top of the config, before anyone can
    // make new ones.
    let served: Arc<dyn Backend> = match &api.state {
        Some(path) => {
            let entries = crate::journal::read(path)?;
            crate::journal::replay(&*backend, &entries, path);
            Arc::new(crate::journal::Journaled::new(
                backend.clone(),
                crate::journal::Journal::new(path),
            ))
        }
        None => backend.clone(),
    };
    let handle = vrhost_api::spawn(
        ApiConfig {
            socket: api.socket.clone(),
            listen: api.listen,
            tls: api
                .tls
                .clone()
                .map(|(cert, key)| vrhost_api::TlsFiles { cert, key }),
            auth,
        },
        served,
    )?;
    tracing::info!(socket = %api.socket.display(), tcp = ?handle.tcp_addr(), "management API listening");
    Ok((backend, Some(handle)))
}

impl RuntimeBackend {
    /// A backend over `running`, whose config is `cfg` (read from
    /// `config_path`), keeping the per-VR tokens of `auth` in step with the VRs.
    pub fn new(
        cfg: &Config,
        config_path: &std::path::Path,
        running: &Running,
        auth: Arc<Auth>,
    ) -> Self {
        let port_macs = crate::runtime::port_macs(cfg);
        RuntimeBackend {
            writer: running.writer.clone(),
            counters: running.counters.clone(),
            assignment: running.assignment.clone(),
            config: Mutex::new(cfg.clone()),
            base_dir: config_path.parent().map(PathBuf::from).unwrap_or_default(),
            port_macs,
            auth,
            // The config's routers are built first, in order.
            reloading: Mutex::new(()),
            captures: running.capture.clone(),
            from_config: Mutex::new(
                cfg.routers
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.name.clone(), VrId::new(i)))
                    .collect(),
            ),
        }
    }

    fn config(&self) -> std::sync::MutexGuard<'_, Config> {
        self.config.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The index of the live VR `name`, or the nameless 404.
    fn vr_index(c: &TableWriter, name: &str) -> Result<VrId, ApiError> {
        c.working().vr_index(name).ok_or(ApiError::NoSuchVr)
    }

    fn info(&self, c: &TableWriter, vr: VrId) -> VrInfo {
        let s = c.working();
        let cfg = self.config();
        let name = s.vr_name(vr).to_string();
        let (routes_v4, routes_v6) = c.routes(vr);
        let interfaces = s
            .vr_ifaces(vr)
            .iter()
            .map(|&i| {
                let f = &s.ifaces()[i.index()];
                InterfaceInfo {
                    name: f.name.clone(),
                    port: s.port_name(PortId::new(f.port)).to_string(),
                    vlan: f.vlan,
                    inner_vlan: f.inner_vlan,
                    vlan_tpid: match f.tpid {
                        Tpid::Dot1q => VlanTpid::Dot1q,
                        Tpid::Dot1ad => VlanTpid::Dot1ad,
                    },
                    mac: MacAddr(f.mac.0),
                    mtu: f.mtu,
                    addresses: addresses(f),
                    urpf: urpf_mode(f.urpf),
                    filter_in: f.filter_names().input,
                    filter_out: f.filter_names().output,
                }
            })
            .collect();
        let limits = s.vr_limits(vr).unwrap_or_default();
        let control = cfg
            .routers
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.control.as_ref())
            .map(|c| VrControl {
                netns: Some(c.netns.clone()),
            });
        VrInfo {
            name,
            interfaces,
            routes_v4: routes_v4 as u64,
            routes_v6: routes_v6 as u64,
            fib_bytes: c.fib_memory(vr) as u64,
            policy: policy(&limits),
            control,
        }
    }

    fn router_spec(&self, c: &TableWriter, spec: &VrSpec) -> Result<RouterSpec, ApiError> {
        let s = c.working();
        let cfg = self.config();
        let mut interfaces = Vec::new();
        for (k, i) in spec.interfaces.iter().enumerate() {
            let field = |f: &str| format!("interfaces[{k}].{f}");
            let port = s
                .port_ids()
                .find(|&p| s.port_name(p) == i.port)
                .ok_or_else(|| bad(&field("port"), format!("no port {:?}", i.port)))?;
            let port_mtu = cfg.ports.get(port.index()).map_or(1500, |p| p.mtu);
            let mut addrs4 = Vec::new();
            let mut addrs6 = Vec::new();
            for a in &i.addresses {
                match a.addr() {
                    IpAddr::V4(v) => addrs4.push((v, a.prefix_len())),
                    IpAddr::V6(v) => addrs6.push((v, a.prefix_len())),
                }
            }
            interfaces.push(InterfaceSpec {
                urpf: urpf_of(i.urpf),
                name: i.name.clone(),
                port: port.get(),
                vlan: i.vlan,
                inner_vlan: i.inner_vlan,
                tpid: match i.vlan_tpid {
                    VlanTpid::Dot1q => Tpid::Dot1q,
                    VlanTpid::Dot1ad => Tpid::Dot1ad,
                },
                mac: EthernetAddress(
                    i.mac
                        .map(|m| m.0)
                        .or_else(|| self.port_macs.get(port.index()).copied())
                        .unwrap_or(crate::runtime::FALLBACK_MAC),
                ),
                mtu: i.mtu.unwrap_or(port_mtu).min(port_mtu),
                addrs4,
                addrs6,
                filters: vrhost_dataplane::IfaceFilters {
                    input: i.filter_in.clone(),
                    output: i.filter_out.clone(),
                },
            });
        }
        let mut routes4 = Vec::new();
        let mut routes6 = Vec::new();
        for (k, r) in spec.routes.iter().enumerate() {
            let target = target(&r.target).ok_or_else(|| {
                bad(
                    &format!("routes[{k}]"),
                    "only via, blackhole and unreachable routes can be added",
                )
            })?;
            match ip_prefix(r.prefix.addr(), r.prefix.prefix_len())? {
                IpPrefix::V4(p) => routes4.push((p, target)),
                IpPrefix::V6(p) => routes6.push((p, target)),
            }
        }
        if spec.control.as_ref().is_some_and(|c| c.netns.is_some()) {
            return Err(bad(
                "control.netns",
                "a control-plane namespace is set in the config file (then reload), not per API call",
            ));
        }
        Ok(RouterSpec {
            name: spec.name.clone(),
            interfaces,
            routes4,
            routes6,
            neighbors: spec
                .neighbors
                .iter()
                .map(|n| (n.address, EthernetAddress(n.mac.0)))
                .collect(),
            limits: limits(&spec.policy),
            filters: crate::api_filters::specs(&vrhost_api::types::Filters {
                filter: spec.filters.clone(),
                interface: vec![],
            })?
            .0,
        })
    }
}

/// The answer to an add that changed the tables (`Created`) or found the
/// same entry there (`Unchanged`).
fn add_outcome(changed: bool) -> Outcome {
    if changed {
        Outcome::Created
    } else {
        Outcome::Unchanged
    }
}

/// The answer to a delete that removed something (`Deleted`) or found
/// nothing (`Missing`).
fn delete_outcome(changed: bool) -> Outcome {
    if changed {
        Outcome::Deleted
    } else {
        Outcome::Missing
    }
}

fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        field: field.to_string(),
        message: message.into(),
    }
}

/// A data-plane refusal as the API says it. Names of other VRs never appear:
/// every refusal is about the caller's own VR.
fn refused(e: BuildError) -> ApiError {
    match e {
        BuildError::NoSuchRouter(_) => ApiError::NoSuchVr,
        BuildError::NoSuchInterface { iface, .. } => {
            ApiError::NotFound(format!("no interface {iface:?}"))
        }
        BuildError::DuplicateRouter(_) => ApiError::Conflict("a VR of that name exists".into()),
        BuildError::DuplicateDemux { port, vlan, .. } => ApiError::Conflict(format!(
            "port {port:?} VLAN {vlan} is already an interface's"
        )),
        BuildError::RouteLimit { limit, .. } => {
            ApiError::Conflict(format!("route limit reached ({limit} per family)"))
        }
        BuildError::GroupLimit { limit, .. } => {
            ApiError::Conflict(format!("multipath group limit reached ({limit} groups)"))
        }
        BuildError::AddressLimit { limit, .. } => {
            ApiError::Conflict(format!("address limit reached ({limit} addresses)"))
        }
        BuildError::NeighborLimit { limit, .. } => {
            ApiError::Conflict(format!("static neighbour limit reached ({limit})"))
        }
        BuildError::InterfaceCapacity { .. }
        | BuildError::InterfaceInUse { .. }
        | BuildError::DuplicateInterface { .. } => ApiError::Conflict(e.to_string()),
        BuildError::GatewayOffLink { via, .. } => ApiError::BadRequest {
            field: "via".into(),
            message: format!("no interface subnet covers gateway {via}"),
        },
        BuildError::NeighborOffLink { addr, .. } => ApiError::BadRequest {
            field: "address".into(),
            message: format!("no interface subnet covers {addr}"),
        },
        BuildError::FamilyMismatch { via, .. } => ApiError::BadRequest {
            field: "via".into(),
            message: format!("gateway {via} is not of the prefix's family"),
        },
        BuildError::NoSuchFilter { iface, filter } => ApiError::BadRequest {
            field: "interface".into(),
            message: format!(
                "interface {iface:?} names filter {filter:?}, which the VR does not have"
            ),
        },
        other => ApiError::BadRequest {
            field: "body".into(),
            message: other.to_string(),
        },
    }
}

/// A token hash the API refuses: a 409 naming the clash (only the admin
/// creates VRs and reloads), or a 400 for a malformed hash.
fn token_refused(e: BadTokenHash) -> ApiError {
    match e {
        BadTokenHash::Malformed { .. } => bad("api_token_sha256", e.to_string()),
        BadTokenHash::Duplicate { .. } => ApiError::Conflict(e.to_string()),
    }
}

/// The API's prefix (its serde type, `address/length`) as the tables' one.
fn ip_prefix(a: IpAddr, len: u8) -> Result<IpPrefix, ApiError> {
    IpPrefix::new(a, len).map_err(|e| bad("prefix", e.to_string()))
}

/// The data plane's reverse-path check for the API's word.
fn urpf_of(m: UrpfMode) -> Urpf {
    match m {
        UrpfMode::Off => Urpf::Off,
        UrpfMode::Loose => Urpf::Loose,
        UrpfMode::Strict => Urpf::Strict,
    }
}

/// The API's word for a data-plane reverse-path check.
fn urpf_mode(u: Urpf) -> UrpfMode {
    match u {
        Urpf::Off => UrpfMode::Off,
        Urpf::Loose => UrpfMode::Loose,
        Urpf::Strict => UrpfMode::Strict,
    }
}

fn target(t: &ApiTarget) -> Option<RouteTarget> {
    match t {
        ApiTarget::Via(gw) => Some(RouteTarget::Via(*gw)),
        ApiTarget::Multipath(g) => Paths::target(g.iter().map(|g| Path {
            via: g.via,
            weight: g.weight,
        }))
        .ok(),
        ApiTarget::Blackhole => Some(RouteTarget::Blackhole),
        ApiTarget::Unreachable => Some(RouteTarget::Unreachable),
        ApiTarget::Connected(_) | ApiTarget::Local => None,
    }
}

/// Whether VR `vr`'s next hop `hop` is what `t` asks for.
fn same(c: &TableWriter, vr: VrId, hop: RouteHop, t: &RouteTarget) -> bool {
    match (hop, t) {
        (RouteHop::Blackhole, RouteTarget::Blackhole) => true,
        (RouteHop::Unreachable, RouteTarget::Unreachable) => true,
        (
            RouteHop::Gateway { .. } | RouteHop::Group { .. },
            RouteTarget::Via(_) | RouteTarget::Multipath(_),
        ) => {
            let mut have: Vec<Path> = c.hop_paths(vr, &hop).into_iter().map(|(_, p)| p).collect();
            have.sort_unstable();
            have.iter().copied().eq(t.paths())
        }
        _ => false,
    }
}

fn api_route(c: &TableWriter, vr: VrId, addr: IpAddr, len: u8, hop: RouteHop) -> Option<Route> {
    let prefix = Prefix::new(addr, len).ok()?;
    let target = match hop {
        RouteHop::Local | RouteHop::Broadcast => ApiTarget::Local,
        RouteHop::Blackhole => ApiTarget::Blackhole,
        RouteHop::Unreachable => ApiTarget::Unreachable,
        RouteHop::Connected { iface } => ApiTarget::Connected(
            c.working()
                .ifaces()
                .get(iface as usize)
                .map(|i| i.name.clone())
                .unwrap_or_default(),
        ),
        RouteHop::Gateway { addr, .. } => ApiTarget::Via(addr),
        RouteHop::Group { .. } => {
            let mut g: Vec<Gateway> = c
                .hop_paths(vr, &hop)
                .into_iter()
                .map(|(_, p)| Gateway {
                    via: p.via,
                    weight: p.weight,
                })
                .collect();
            g.sort_unstable();
            ApiTarget::Multipath(g)
        }
    };
    Some(Route { prefix, target })
}

fn addresses(f: &vrhost_dataplane::Iface) -> Vec<IfaceAddr> {
    f.addrs4
        .iter()
        .map(|&(a, l)| (IpAddr::V4(a), l))
        .chain(f.addrs6.iter().map(|&(a, l)| (IpAddr::V6(a), l)))
        .filter_map(|(a, l)| IfaceAddr::new(a, l).ok())
        .collect()
}

fn policy(l: &Limits) -> VrPolicy {
    VrPolicy {
        icmp_rate: Some(l.icmp_rate.into()),
        punt_queue: Some(l.punt_queue.into()),
        arp_hold: Some(l.arp_hold.into()),
        neighbor_timeout_ms: Some(l.neighbor_timeout_ms),
        max_neighbors: Some(l.max_neighbors.into()),
        weight: Some(l.weight.into()),
        pps: Some(l.pps),
        bps: Some(l.bps),
        max_routes: Some(l.max_routes.into()),
        max_nexthop_groups: Some(l.max_nexthop_groups.into()),
        max_addresses: Some(l.max_addresses.into()),
        punt_rate: Some(l.punt_rate.into()),
        protocol_rate: Some(l.protocol_rate.into()),
    }
}

fn limits(p: &VrPolicy) -> Limits {
    let d = Limits::default();
    let u32_of = |v: Option<u64>, d: u32| v.map_or(d, |v| u32::try_from(v).unwrap_or(u32::MAX));
    Limits {
        icmp_rate: u32_of(p.icmp_rate, d.icmp_rate),
        punt_queue: u32_of(p.punt_queue, d.punt_queue).max(1),
        arp_hold: u32_of(p.arp_hold, d.arp_hold).min(8),
        neighbor_timeout_ms: p
            .neighbor_timeout_ms
            .unwrap_or(d.neighbor_timeout_ms)
            .max(1),
        max_neighbors: u32_of(p.max_neighbors, d.max_neighbors).max(1),
        weight: u32_of(p.weight, d.weight).clamp(1, 10_000),
        pps: p.pps.unwrap_or(d.pps),
        bps: p.bps.unwrap_or(d.bps),
        max_routes: u32_of(p.max_routes, d.max_routes).max(16),
        max_nexthop_groups: u32_of(p.max_nexthop_groups, d.max_nexthop_groups).max(1),
        max_addresses: u32_of(p.max_addresses, d.max_addresses).max(1),
        punt_rate: u32_of(p.punt_rate, d.punt_rate).max(1),
        protocol_rate: u32_of(p.protocol_rate, d.protocol_rate),
        ..d
    }
}

fn counter_set(c: &Counters) -> CounterSet {
    let drops: BTreeMap<String, u64> = c.nonzero_drops().map(|(k, v)| (k.to_string(), v)).collect();
    CounterSet {
        rx_packets: c.rx_packets,
        rx_bytes: c.rx_bytes,
        tx_packets: c.tx_packets,
        tx_bytes: c.tx_bytes,
        forwarded: c.forwarded,
        fast_path: c.fast_path,
        local: c.local,
        punted: c.punted,
        icmp_errors: c.icmp_errors,
        icmp_rate_limited: c.icmp_rate_limited,
        icmp_suppressed: c.icmp_suppressed,
        icmp_no_source: c.icmp_no_source,
        drops,
    }
}

impl Backend for RuntimeBackend {
    fn list_vrs(&self) -> Result<Vec<VrInfo>, ApiError> {
        let c = lock(&self.writer);
        let s = c.working();
        Ok(s.vr_ids()
            .filter(|&v| s.vr_alive(v))
            .map(|v| self.info(&c, v))
            .collect())
    }

    fn get_vr(&self, vr: &str) -> Result<VrInfo, ApiError> {
        let c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        Ok(self.info(&c, v))
    }

    fn create_vr(&self, spec: &VrSpec) -> Result<VrInfo, ApiError> {
        let mut c = lock(&self.writer);
        let r = self.router_spec(&c, spec)?;
        // Checked before the VR exists, installed once it does; both under
        // the writer lock, which every token change holds.
        let token = [(spec.name.clone(), spec.api_token_sha256.clone())];
        self.auth.check(&token).map_err(token_refused)?;
        let v = c.add_vr(&r).map_err(refused)?;
        c.commit();
        self.auth.update(&token).map_err(token_refused)?;
        tracing::info!(
            vr = spec.name,
            token = spec.api_token_sha256.is_some(),
            "VR created through the API"
        );
        Ok(self.info(&c, v))
    }

    fn delete_vr(&self, vr: &str) -> Result<(), ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        c.remove_vr(v).map_err(refused)?;
        c.commit();
        // Revoked with the VR: a VR created later under the same name is
        // someone else's.
        self.from_config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(vr);
        self.auth
            .update(&[(vr.to_string(), None)])
            .map_err(token_refused)?;
        tracing::info!(vr, "VR deleted through the API; its token is revoked");
        Ok(())
    }

    fn add_interface(
        &self,
        vr: &str,
        iface: &vrhost_api::types::InterfaceSpec,
    ) -> Result<Outcome, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        // The same conversion as a VR's interfaces at creation.
        let spec = self.router_spec(
            &c,
            &VrSpec {
                name: String::new(),
                interfaces: vec![iface.clone()],
                routes: vec![],
                neighbors: vec![],
                policy: Default::default(),
                filters: vec![],
                control: None,
                api_token_sha256: None,
            },
        )?;
        let Some(i) = spec.interfaces.first() else {
            return Err(bad("interfaces", "no interface"));
        };
        let added = c.add_interface(v, i).map_err(refused)?;
        c.commit();
        Ok(add_outcome(added))
    }

    fn delete_interface(&self, vr: &str, iface: &str) -> Result<Outcome, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let removed = c.remove_interface(v, iface).map_err(refused)?;
        c.commit();
        Ok(delete_outcome(removed))
    }

    fn list_addresses(&self, vr: &str, iface: &str) -> Result<Vec<IfaceAddr>, ApiError> {
        let c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let s = c.working();
        s.vr_ifaces(v)
            .iter()
            .map(|&i| &s.ifaces()[i.index()])
            .find(|f| f.name == iface)
            .map(addresses)
            .ok_or_else(|| ApiError::NotFound(format!("no interface {iface:?}")))
    }

    fn add_address(&self, vr: &str, iface: &str, addr: IfaceAddr) -> Result<Outcome, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let added = c
            .add_address(v, iface, addr.addr(), addr.prefix_len())
            .map_err(refused)?;
        c.commit();
        Ok(add_outcome(added))
    }

    fn delete_address(&self, vr: &str, iface: &str, addr: IfaceAddr) -> Result<Outcome, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let removed = c
            .remove_address(v, iface, addr.addr(), addr.prefix_len())
            .map_err(refused)?;
        c.commit();
        Ok(delete_outcome(removed))
    }

    fn list_routes(&self, vr: &str, offset: u64, limit: u64) -> Result<RoutePage, ApiError> {
        let c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let offset_at = usize::try_from(offset).unwrap_or(usize::MAX);
        let limit_at = usize::try_from(limit).unwrap_or(usize::MAX);
        let (total, page) = c.route_page(v, offset_at, limit_at);
        let routes = page
            .into_iter()
            .filter_map(|(a, l, h)| api_route(&c, v, a, l, h))
            .collect();
        Ok(RoutePage {
            total: total as u64,
            offset,
            routes,
        })
    }

    fn add_route(&self, vr: &str, route: &Route, replace: bool) -> Result<Outcome, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let t = target(&route.target).ok_or_else(|| {
            bad(
                "route",
                "only via, blackhole and unreachable routes can be added",
            )
        })?;
        let (a, l) = (route.prefix.addr(), route.prefix.prefix_len());
        let outcome = match c.route(v, a, l) {
            Some(h) if same(&c, v, h, &t) => return Ok(Outcome::Unchanged),
            Some(RouteHop::Local | RouteHop::Broadcast | RouteHop::Connected { .. }) => {
                return Err(ApiError::Conflict(format!(
                    "{} is a connected or local route; change the interface's addresses instead",
                    route.prefix
                )))
            }
            Some(_) if !replace => {
                return Err(ApiError::Conflict(format!(
                    "{} exists with another target; pass replace to change it",
                    route.prefix
                )))
            }
            Some(_) => Outcome::Replaced,
            None => Outcome::Created,
        };
        c.add_route(v, ip_prefix(a, l)?, t).map_err(refused)?;
        c.commit();
        Ok(outcome)
    }

    fn delete_route(&self, vr: &str, prefix: Prefix) -> Result<Outcome, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let (a, l) = (prefix.addr(), prefix.prefix_len());
        match c.route(v, a, l) {
            None => return Ok(Outcome::Missing),
            Some(RouteHop::Local | RouteHop::Broadcast | RouteHop::Connected { .. }) => {
                return Err(ApiError::Conflict(format!(
                    "{prefix} is a connected or local route; remove the interface address instead"
                )))
            }
            Some(_) => {}
        }
        c.remove_route(v, ip_prefix(a, l)?);
        c.commit();
        Ok(Outcome::Deleted)
    }

    fn bulk_routes(&self, vr: &str, req: &BulkRoutes) -> Result<BulkResult, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        // Validate everything first: nothing is applied unless all of it can be.
        let mut out = BulkResult::default();
        let mut plan = Vec::with_capacity(req.add.len());
        let mut deleting: HashSet<Prefix> = req.delete.iter().copied().collect();
        let (mut new4, mut new6) = (0usize, 0usize);
        for (k, r) in req.add.iter().enumerate() {
            let t = target(&r.target).ok_or_else(|| {
                bad(
                    &format!("add[{k}]"),
                    "only via, blackhole and unreachable routes can be added",
                )
            })?;
            let (a, l) = (r.prefix.addr(), r.prefix.prefix_len());
            c.check_target(v, &t, a.is_ipv4())
                .map_err(|e| match refused(e) {
                    ApiError::BadRequest { field, message } => ApiError::BadRequest {
                        field: format!("add[{k}].{field}"),
                        message,
                    },
                    other => other,
                })?;
            match c.route(v, a, l) {
                Some(h) if same(&c, v, h, &t) && !deleting.contains(&r.prefix) => {
                    out.unchanged += 1;
                    continue;
                }
                Some(RouteHop::Local | RouteHop::Broadcast | RouteHop::Connected { .. }) => {
                    return Err(ApiError::Conflict(format!(
                        "add[{k}]: {} is a connected or local route",
                        r.prefix
                    )))
                }
                Some(_) if !req.replace && !deleting.contains(&r.prefix) => {
                    return Err(ApiError::Conflict(format!(
                        "add[{k}]: {} exists with another target; pass replace",
                        r.prefix
                    )))
                }
                Some(_) if !deleting.contains(&r.prefix) => out.replaced += 1,
                _ => {
                    out.created += 1;
                    if a.is_ipv4() {
                        new4 += 1;
                    } else {
                        new6 += 1;
                    }
                }
            }
            plan.push((a, l, t));
        }
        let mut dels = Vec::with_capacity(req.delete.len());
        // A prefix listed twice is deleted once: counted twice, it passed
        // the route limit below that the adds then exceeded, half-applied.
        for (k, p) in req.delete.iter().enumerate() {
            if !deleting.remove(p) {
                out.missing += 1;
                continue;
            }
            match c.route(v, p.addr(), p.prefix_len()) {
                None => out.missing += 1,
                Some(RouteHop::Local | RouteHop::Broadcast | RouteHop::Connected { .. }) => {
                    return Err(ApiError::Conflict(format!(
                        "delete[{k}]: {p} is a connected or local route"
                    )))
                }
                Some(_) => {
                    out.deleted += 1;
                    dels.push(*p);
                }
            }
        }
        let limit = c.working().vr_limits(v).map_or(u32::MAX, |l| l.max_routes) as usize;
        let (n4, n6) = c.routes(v);
        let gone4 = dels.iter().filter(|p| p.is_ipv4()).count();
        let gone6 = dels.len() - gone4;
        if n4 + new4 > limit + gone4 || n6 + new6 > limit + gone6 {
            return Err(ApiError::Conflict(format!(
                "route limit: this request would exceed {limit} routes per family; nothing applied"
            )));
        }
        let (mut d4, mut d6) = (Vec::new(), Vec::new());
        for p in &dels {
            match ip_prefix(p.addr(), p.prefix_len())? {
                IpPrefix::V4(p) => d4.push(p),
                IpPrefix::V6(p) => d6.push(p),
            }
        }
        let (mut a4, mut a6) = (Vec::new(), Vec::new());
        for (a, l, t) in plan {
            match ip_prefix(a, l)? {
                IpPrefix::V4(p) => a4.push((p, t)),
                IpPrefix::V6(p) => a6.push((p, t)),
            }
        }
        c.remove_routes(v, &d4, &d6);
        // Checked above; a refusal here would be a bug, and the deletions
        // already made are published rather than half-hidden.
        if let Err(e) = c.add_routes(v, &a4, &a6) {
            c.commit();
            return Err(ApiError::Internal(e.to_string()));
        }
        c.commit();
        Ok(out)
    }

    fn get_filters(&self, vr: &str) -> Result<vrhost_api::types::Filters, ApiError> {
        let c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let s = c.working();
        let ifaces = s
            .vr_ifaces(v)
            .iter()
            .map(|i| {
                let f = &s.ifaces()[i.index()];
                (f.name.clone(), f.filter_names())
            })
            .collect();
        Ok(crate::api_filters::listed(
            &c.filters(v).map_err(refused)?,
            ifaces,
        ))
    }

    fn set_filters(
        &self,
        vr: &str,
        filters: &vrhost_api::types::Filters,
    ) -> Result<Outcome, ApiError> {
        let (lists, applied) = crate::api_filters::specs(filters)?;
        // The lists are built before the writer is taken: a list of
        // thousands of rules takes a noticeable time (docs/forwarding.md),
        // which no other VR's calls or route syncs should wait for.
        let workers = lock(&self.writer).worker_count();
        // `specs` refused lists past the limits before anything was built.
        let prebuilt: Vec<Arc<vrhost_dataplane::Filter>> = lists
            .iter()
            .filter_map(|l| vrhost_dataplane::Filter::build(l, workers).ok())
            .map(Arc::new)
            .collect();
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let changed = c
            .replace_filters_prebuilt(v, &lists, &applied, &prebuilt)
            .map_err(refused)?;
        c.commit();
        Ok(if changed {
            Outcome::Replaced
        } else {
            Outcome::Unchanged
        })
    }

    fn list_neighbors(&self, vr: &str) -> Result<Vec<Neighbor>, ApiError> {
        let c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let s = c.working();
        Ok(c.static_neighbor_list(v)
            .into_iter()
            .map(|(i, addr, mac)| Neighbor {
                address: addr,
                mac: MacAddr(mac.0),
                interface: s.ifaces().get(i as usize).map(|f| f.name.clone()),
            })
            .collect())
    }

    fn add_neighbor(&self, vr: &str, n: &Neighbor) -> Result<Outcome, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let old = c
            .static_neighbor_list(v)
            .into_iter()
            .find(|&(_, a, _)| a == n.address);
        let outcome = match old {
            Some((_, _, mac)) if mac.0 == n.mac.0 => return Ok(Outcome::Unchanged),
            Some(_) => Outcome::Replaced,
            None => Outcome::Created,
        };
        c.set_static_neighbor(v, n.address, EthernetAddress(n.mac.0))
            .map_err(refused)?;
        c.commit();
        Ok(outcome)
    }

    fn delete_neighbor(&self, vr: &str, addr: IpAddr) -> Result<Outcome, ApiError> {
        let mut c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let deleted = c.remove_static_neighbor(v, addr).map_err(refused)?;
        // Workers forget the MAC now, not at some later change.
        c.commit();
        Ok(delete_outcome(deleted))
    }

    fn vr_counters(&self, vr: &str) -> Result<VrCounters, ApiError> {
        // Names under the lock; the counters themselves are read lock-free.
        let (v, ifaces): (VrId, Vec<(IfaceId, String)>) = {
            let c = lock(&self.writer);
            let v = Self::vr_index(&c, vr)?;
            let s = c.working();
            let ifaces = s
                .vr_ifaces(v)
                .iter()
                .map(|&i| (i, s.ifaces()[i.index()].name.clone()))
                .collect();
            (v, ifaces)
        };
        let ids: Vec<IfaceId> = ifaces.iter().map(|(i, _)| *i).collect();
        Ok(VrCounters {
            vr: vr.to_string(),
            total: counter_set(&sum_ifaces(&self.counters, &ids)),
            interfaces: ifaces
                .into_iter()
                .map(|(i, name)| InterfaceCounters {
                    name,
                    counters: counter_set(&sum_ifaces(&self.counters, &[i])),
                })
                .collect(),
            busy_ns: sum_vr_busy_ns(&self.counters, v),
        })
    }

    fn ports(&self) -> Result<Vec<PortInfo>, ApiError> {
        let cfg = self.config();
        Ok(cfg
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortInfo {
                name: p.name.clone(),
                driver: p.driver.to_string(),
                mac: self.port_macs.get(i).map(|m| MacAddr(*m)),
                mtu: p.mtu,
                queues: p.queues,
                counters: counter_set(&sum_ports(&self.counters, PortId::from_index(i))),
            })
            .collect())
    }

    fn workers(&self) -> Result<Vec<WorkerInfo>, ApiError> {
        Ok(self
            .counters
            .iter()
            .enumerate()
            .map(|(k, w)| WorkerInfo {
                index: k as u32,
                core: self
                    .assignment
                    .iter()
                    .find(|a| a.worker == k)
                    .map(|a| a.core as u32),
                load: w.load_permille.get() as f64 / 1000.0,
                packets: w.ports.iter().map(|p| p.rx_packets.get()).sum(),
            })
            .collect())
    }

    fn capture(
        &self,
        vr: &str,
        iface: &str,
        q: &vrhost_api::types::CaptureQuery,
    ) -> Result<Box<dyn vrhost_api::CaptureStream>, ApiError> {
        let filter = crate::capture::parse_filter(q.filter.as_deref())?;
        let c = lock(&self.writer);
        let v = Self::vr_index(&c, vr)?;
        let s = c.working();
        let id = s
            .vr_ifaces(v)
            .iter()
            .copied()
            .find(|&i| s.ifaces()[i.index()].name == iface)
            .ok_or_else(|| ApiError::NotFound(format!("no interface {iface:?}")))?;
        let session = self.captures.arm(
            s,
            v.index() as u16,
            id,
            filter,
            q.snaplen.unwrap_or(crate::capture::SNAPLEN),
        )?;
        drop(c);
        Ok(Box::new(crate::capture::Stream::new(
            self.captures.clone(),
            session,
            self.writer.clone(),
            q.count,
            q.seconds,
            format!("{vr}/{iface}"),
        )))
    }

    fn trace(
        &self,
        vr: &str,
        q: &vrhost_api::types::TraceQuery,
    ) -> Result<vrhost_api::types::TraceReport, ApiError> {
        crate::trace::run(&self.writer, vr, q)
    }

    fn reload(&self, config_toml: &str) -> Result<ReloadReport, ApiError> {
        let new = Config::from_toml_str(config_toml, &self.base_dir).map_err(|errs| {
            ApiError::Config(
                errs.0
                    .iter()
                    .map(|e| vrhost_api::ConfigIssue {
                        key: e.key.clone(),
                        reason: e.reason.clone(),
                    })
                    .collect(),
            )
        })?;
        // One reload at a time; the plan is made on a copy of the config in
        // force, without the control lock. Then the locks in their one
        // order, as every other call takes them: the writer, then the rest.
        let _one = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.config().clone();
        let plan = crate::reload::plan(&old, &new, |p| {
            self.port_macs
                .get(p)
                .copied()
                .unwrap_or(crate::runtime::FALLBACK_MAC)
        })
        .map_err(|r| {
            ApiError::Config(vec![vrhost_api::ConfigIssue {
                key: r.key,
                reason: r.reason,
            }])
        })?;
        let mut c = lock(&self.writer);
        let mut from_config = self.from_config.lock().unwrap_or_else(|e| e.into_inner());
        let report = reload_into(&mut c, &self.auth, &mut from_config, &old, &plan, &new)?;
        *self.config() = new;
        Ok(report)
    }
}

/// Applies `plan` (from `cfg` to `new`) to the running tables `c`: checked
/// against them first ([`crate::reload::refusal`]), then performed with one
/// commit, with the tokens and the config routers' identities following.
fn reload_into(
    c: &mut TableWriter,
    auth: &Auth,
    from_config: &mut HashMap<String, VrId>,
    cfg: &Config,
    plan: &crate::reload::Plan,
    new: &Config,
) -> Result<ReloadReport, ApiError> {
    // Every router the old or new file names gets the new file's token, or
    // none when the new file gives none or the router will not be running
    // (deleted through the API, and not created again by this reload). VRs
    // created through the API keep theirs, also under a config router's
    // name. A clash with one of those refuses the whole reload before
    // anything changes.
    let names: std::collections::BTreeSet<&str> = cfg
        .routers
        .iter()
        .chain(&new.routers)
        .map(|r| r.name.as_str())
        .collect();
    let tokens: Vec<(String, Option<String>)> = names
        .into_iter()
        .filter_map(|name| {
            let created = plan.report.created.iter().any(|n| n == name);
            let now = c.working().vr_index(name);
            let the_routers = now.is_some_and(|v| from_config.get(name) == Some(&v));
            if now.is_some() && !the_routers && !created {
                // A VR made through the API under this name keeps its token.
                return None;
            }
            let hash = new
                .routers
                .iter()
                .find(|r| r.name == name)
                .filter(|_| the_routers || created)
                .and_then(|r| r.api_token_sha256.clone());
            Some((name.to_string(), hash))
        })
        .collect();
    auth.check(&tokens).map_err(token_refused)?;
    let is_config_vr = |name: &str, v: VrId| from_config.get(name) == Some(&v);
    if let Some(r) = crate::reload::refusal(plan, new, c, is_config_vr) {
        return Err(ApiError::Config(vec![vrhost_api::ConfigIssue {
            key: r.key,
            reason: r.reason,
        }]));
    }
    if let Err(e) = crate::reload::apply(plan, c) {
        // The plan was built and checked on a copy; failing here leaves the
        // working tables half changed. Stop rather than ever publish that:
        // the panic poisons the control lock, and `vrhost run` aborts.
        panic!("config reload failed after its plan was checked: {e}; stopping before any of it is published");
    }
    c.commit();
    // Which running VRs are the new config's routers: those the plan built,
    // and those that were the old config's and still are.
    let built: HashSet<&str> = plan
        .changes
        .iter()
        .filter_map(|ch| match ch {
            crate::reload::VrChange::Add(k) | crate::reload::VrChange::Rebuild(k) => {
                Some(plan.spec.routers[*k].name.as_str())
            }
            _ => None,
        })
        .collect();
    let mut next = HashMap::new();
    for r in &new.routers {
        let Some(v) = c.working().vr_index(&r.name) else {
            continue;
        };
        if built.contains(r.name.as_str()) || from_config.get(&r.name) == Some(&v) {
            next.insert(r.name.clone(), v);
        }
    }
    *from_config = next;
    auth.update(&tokens).map_err(token_refused)?;
    let report = plan.report.clone();
    tracing::info!(?report.created, ?report.deleted, ?report.changed, "config reloaded");
    Ok(report)
}
