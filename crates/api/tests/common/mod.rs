//! Test fixture: an in-memory [`Backend`] with two ports and a few VRs, used
//! only by this crate's tests. It keeps the Backend contract (NoSuchVr for
//! unknown names, idempotent adds, whole-request validation) in the simplest
//! way, so the tests exercise the HTTP layer, not a data plane.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use vrhost_api::types::{
    BulkResult, BulkRoutes, CounterSet, IfaceAddr, InterfaceCounters, InterfaceInfo, MacAddr,
    Neighbor, Outcome, PortInfo, Prefix, ReloadReport, Route, RoutePage, RouteTarget, VrCounters,
    VrInfo, VrPolicy, VrSpec, WorkerInfo,
};
use vrhost_api::{hash_token, ApiConfig, ApiError, ApiHandle, Auth, Backend, Client, ConfigIssue};

/// The other tenant's VR: a name distinctive enough that finding it in a
/// response body can only mean it leaked.
pub const OTHER: &str = "blue-tenant-7f3a";
/// The tenant whose token the authorisation tests use.
pub const OWN: &str = "red";

const PORTS: [&str; 2] = ["p0", "p1"];

#[derive(Clone)]
struct FixtureVr {
    interfaces: Vec<InterfaceInfo>,
    routes: BTreeMap<Prefix, RouteTarget>,
    neighbors: BTreeMap<IpAddr, MacAddr>,
    policy: VrPolicy,
    filters: vrhost_api::types::Filters,
}

/// An in-memory backend for tests.
#[derive(Default)]
pub struct FixtureBackend {
    vrs: Mutex<BTreeMap<String, FixtureVr>>,
}

fn counters(seed: u64) -> CounterSet {
    CounterSet {
        rx_packets: 100 + seed,
        rx_bytes: 6400 + seed,
        tx_packets: 90 + seed,
        tx_bytes: 5760 + seed,
        forwarded: 80,
        local: 5,
        punted: 2,
        drops: BTreeMap::from([("ttl_exceeded".to_string(), 3), ("no_route".to_string(), 0)]),
        ..CounterSet::default()
    }
}

/// Checks a VR description against the fixture's ports; errors name the field.
fn build(spec: &VrSpec, key: &str) -> Result<FixtureVr, ApiError> {
    if spec.name.is_empty() {
        return Err(ApiError::bad(format!("{key}name"), "must not be empty"));
    }
    let mut interfaces = Vec::new();
    for (i, s) in spec.interfaces.iter().enumerate() {
        if !PORTS.contains(&s.port.as_str()) {
            return Err(ApiError::bad(
                format!("{key}interfaces[{i}].port"),
                format!("no port named '{}'", s.port),
            ));
        }
        interfaces.push(InterfaceInfo {
            inner_vlan: None,
            vlan_tpid: Default::default(),
            name: s.name.clone(),
            port: s.port.clone(),
            vlan: s.vlan,
            mac: s.mac.unwrap_or(MacAddr([2, 0, 0, 0, 0, i as u8])),
            mtu: s.mtu.unwrap_or(1500),
            addresses: s.addresses.clone(),
            urpf: s.urpf,
            filter_in: s.filter_in.clone(),
            filter_out: s.filter_out.clone(),
        });
    }
    let mut vr = FixtureVr {
        interfaces,
        routes: BTreeMap::new(),
        neighbors: BTreeMap::new(),
        policy: VrPolicy {
            weight: Some(spec.policy.weight.unwrap_or(1)),
            ..spec.policy.clone()
        },
        filters: vrhost_api::types::Filters {
            filter: spec.filters.clone(),
            interface: vec![],
        },
    };
    for (i, r) in spec.routes.iter().enumerate() {
        vr.check_route(r, &format!("{key}routes[{i}]"))?;
        vr.routes.insert(r.prefix, r.target.clone());
    }
    for (i, n) in spec.neighbors.iter().enumerate() {
        vr.check_on_link(n.address, &format!("{key}neighbors[{i}].address"))?;
        vr.neighbors.insert(n.address, n.mac);
    }
    Ok(vr)
}

impl FixtureVr {
    fn on_link(&self, addr: IpAddr) -> Option<&InterfaceInfo> {
        self.interfaces.iter().find(|i| {
            i.addresses.iter().any(|a| {
                let subnet = a.subnet();
                IfaceAddr::new(addr, subnet.prefix_len()).map(|x| x.subnet()) == Ok(subnet)
            })
        })
    }

    fn check_on_link(&self, addr: IpAddr, field: &str) -> Result<(), ApiError> {
        match self.on_link(addr) {
            Some(_) => Ok(()),
            None => Err(ApiError::bad(
                field,
                format!("{addr} is on none of the VR's subnets"),
            )),
        }
    }

    fn check_route(&self, r: &Route, field: &str) -> Result<(), ApiError> {
        match r.target {
            RouteTarget::Via(gw) => self.check_on_link(gw, &format!("{field}.via")),
            _ => Ok(()),
        }
    }

    fn info(&self, name: &str) -> VrInfo {
        VrInfo {
            name: name.to_string(),
            interfaces: self.interfaces.clone(),
            routes_v4: self.routes.keys().filter(|p| p.is_ipv4()).count() as u64,
            routes_v6: self.routes.keys().filter(|p| !p.is_ipv4()).count() as u64,
            fib_bytes: 4096 + 64 * self.routes.len() as u64,
            policy: self.policy.clone(),
            control: None,
        }
    }

    fn iface(&mut self, name: &str) -> Result<&mut InterfaceInfo, ApiError> {
        self.interfaces
            .iter_mut()
            .find(|i| i.name == name)
            .ok_or_else(|| ApiError::NotFound(format!("no interface '{name}'")))
    }
}

/// The VR named `name` with one interface `{name}0` on `port`, 10.0.0.1/24.
pub fn spec(name: &str, port: &str) -> VrSpec {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "interfaces": [{"name": format!("{name}0"), "port": port, "addresses": ["10.0.0.1/24", "2001:db8::1/64"]}],
        "routes": [{"prefix": "0.0.0.0/0", "via": "10.0.0.254"}],
        "neighbors": [{"address": "10.0.0.254", "mac": "02:00:00:00:00:fe"}],
    }))
    .expect("fixture spec")
}

impl FixtureBackend {
    /// A backend with VRs `red` (on p0) and [`OTHER`] (on p1), same addresses.
    pub fn new() -> FixtureBackend {
        let b = FixtureBackend::default();
        for (name, port) in [(OWN, "p0"), (OTHER, "p1")] {
            b.create_vr(&spec(name, port)).expect("fixture VR");
        }
        b
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, FixtureVr>> {
        // A test that panicked while holding the lock poisoned it; the map is
        // still consistent (every change is one insert or remove).
        self.vrs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<T>(
        &self,
        vr: &str,
        f: impl FnOnce(&mut FixtureVr) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        f(self.lock().get_mut(vr).ok_or(ApiError::NoSuchVr)?)
    }
}

fn add_route(vr: &mut FixtureVr, r: &Route, replace: bool) -> Result<Outcome, ApiError> {
    match vr.routes.get(&r.prefix) {
        Some(t) if *t == r.target => Ok(Outcome::Unchanged),
        Some(_) if !replace => Err(ApiError::Conflict(format!(
            "a different route for {} exists (use replace)",
            r.prefix
        ))),
        existing => {
            let o = if existing.is_some() {
                Outcome::Replaced
            } else {
                Outcome::Created
            };
            vr.routes.insert(r.prefix, r.target.clone());
            Ok(o)
        }
    }
}

/// A capture stream of a pcap header only.
struct EmptyCapture(bool);

impl vrhost_api::CaptureStream for EmptyCapture {
    fn next_chunk(&mut self, _wait: std::time::Duration) -> Option<Vec<u8>> {
        if std::mem::take(&mut self.0) {
            let mut h = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
            h.extend_from_slice(&[
                2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0,
            ]);
            Some(h)
        } else {
            None
        }
    }
}

impl Backend for FixtureBackend {
    fn list_vrs(&self) -> Result<Vec<VrInfo>, ApiError> {
        Ok(self.lock().iter().map(|(n, v)| v.info(n)).collect())
    }

    fn get_vr(&self, vr: &str) -> Result<VrInfo, ApiError> {
        self.with(vr, |v| Ok(v.info(vr)))
    }

    fn create_vr(&self, spec: &VrSpec) -> Result<VrInfo, ApiError> {
        let built = build(spec, "")?;
        let mut vrs = self.lock();
        if vrs.contains_key(&spec.name) {
            return Err(ApiError::Conflict(format!("VR '{}' exists", spec.name)));
        }
        let info = built.info(&spec.name);
        vrs.insert(spec.name.clone(), built);
        Ok(info)
    }

    fn delete_vr(&self, vr: &str) -> Result<(), ApiError> {
        self.lock().remove(vr).map(|_| ()).ok_or(ApiError::NoSuchVr)
    }

    fn add_interface(
        &self,
        vr: &str,
        iface: &vrhost_api::types::InterfaceSpec,
    ) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            if let Some(old) = v.interfaces.iter().find(|i| i.name == iface.name) {
                return if old.port == iface.port && old.vlan == iface.vlan {
                    Ok(Outcome::Unchanged)
                } else {
                    Err(ApiError::Conflict(format!(
                        "a different interface '{}' exists",
                        iface.name
                    )))
                };
            }
            v.interfaces.push(InterfaceInfo {
                inner_vlan: None,
                vlan_tpid: Default::default(),
                name: iface.name.clone(),
                port: iface.port.clone(),
                vlan: iface.vlan,
                mac: iface.mac.unwrap_or(MacAddr([2, 0, 0, 0, 0, 9])),
                mtu: iface.mtu.unwrap_or(1500),
                addresses: iface.addresses.clone(),
                urpf: iface.urpf,
                filter_in: iface.filter_in.clone(),
                filter_out: iface.filter_out.clone(),
            });
            Ok(Outcome::Created)
        })
    }

    fn delete_interface(&self, vr: &str, iface: &str) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            let before = v.interfaces.len();
            v.interfaces.retain(|i| i.name != iface);
            Ok(if v.interfaces.len() < before {
                Outcome::Deleted
            } else {
                Outcome::Missing
            })
        })
    }

    fn list_addresses(&self, vr: &str, iface: &str) -> Result<Vec<IfaceAddr>, ApiError> {
        self.with(vr, |v| Ok(v.iface(iface)?.addresses.clone()))
    }

    /// A capture that ends at once: a pcap header and nothing more.
    fn capture(
        &self,
        vr: &str,
        iface: &str,
        _q: &vrhost_api::types::CaptureQuery,
    ) -> Result<Box<dyn vrhost_api::CaptureStream>, ApiError> {
        self.with(vr, |v| v.iface(iface).map(|_| ()))?;
        Ok(Box::new(EmptyCapture(true)))
    }

    fn trace(
        &self,
        vr: &str,
        q: &vrhost_api::types::TraceQuery,
    ) -> Result<vrhost_api::types::TraceReport, ApiError> {
        self.with(vr, |v| match &q.interface {
            Some(i) => v.iface(i).map(|_| ()),
            None => Ok(()),
        })?;
        Ok(vrhost_api::types::TraceReport {
            vr: vr.to_string(),
            count: q.count.unwrap_or(0),
            packets: Vec::new(),
        })
    }

    fn add_address(&self, vr: &str, iface: &str, addr: IfaceAddr) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            let i = v.iface(iface)?;
            if i.addresses.contains(&addr) {
                return Ok(Outcome::Unchanged);
            }
            i.addresses.push(addr);
            Ok(Outcome::Created)
        })
    }

    fn delete_address(&self, vr: &str, iface: &str, addr: IfaceAddr) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            let i = v.iface(iface)?;
            let before = i.addresses.len();
            i.addresses.retain(|a| *a != addr);
            Ok(if i.addresses.len() < before {
                Outcome::Deleted
            } else {
                Outcome::Missing
            })
        })
    }

    fn list_routes(&self, vr: &str, offset: u64, limit: u64) -> Result<RoutePage, ApiError> {
        self.with(vr, |v| {
            let routes = v
                .routes
                .iter()
                .skip(offset as usize)
                .take(limit as usize)
                .map(|(p, t)| Route {
                    prefix: *p,
                    target: t.clone(),
                })
                .collect();
            Ok(RoutePage {
                total: v.routes.len() as u64,
                offset,
                routes,
            })
        })
    }

    fn add_route(&self, vr: &str, route: &Route, replace: bool) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            v.check_route(route, "body")?;
            add_route(v, route, replace)
        })
    }

    fn delete_route(&self, vr: &str, prefix: Prefix) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            Ok(if v.routes.remove(&prefix).is_some() {
                Outcome::Deleted
            } else {
                Outcome::Missing
            })
        })
    }

    fn bulk_routes(&self, vr: &str, req: &BulkRoutes) -> Result<BulkResult, ApiError> {
        self.with(vr, |v| {
            // Validate whole on a copy, then publish the copy: all or nothing.
            let mut next = v.clone();
            let mut result = BulkResult::default();
            for p in &req.delete {
                match next.routes.remove(p) {
                    Some(_) => result.deleted += 1,
                    None => result.missing += 1,
                }
            }
            for (i, r) in req.add.iter().enumerate() {
                next.check_route(r, &format!("add[{i}]"))?;
                match add_route(&mut next, r, req.replace)? {
                    Outcome::Created => result.created += 1,
                    Outcome::Replaced => result.replaced += 1,
                    _ => result.unchanged += 1,
                }
            }
            *v = next;
            Ok(result)
        })
    }

    fn get_filters(&self, vr: &str) -> Result<vrhost_api::types::Filters, ApiError> {
        self.with(vr, |v| Ok(v.filters.clone()))
    }

    fn set_filters(&self, vr: &str, f: &vrhost_api::types::Filters) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            Ok(if std::mem::replace(&mut v.filters, f.clone()) == *f {
                Outcome::Unchanged
            } else {
                Outcome::Replaced
            })
        })
    }

    fn list_neighbors(&self, vr: &str) -> Result<Vec<Neighbor>, ApiError> {
        self.with(vr, |v| {
            Ok(v.neighbors
                .iter()
                .map(|(a, m)| Neighbor {
                    address: *a,
                    mac: *m,
                    interface: v.on_link(*a).map(|i| i.name.clone()),
                })
                .collect())
        })
    }

    fn add_neighbor(&self, vr: &str, n: &Neighbor) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            v.check_on_link(n.address, "address")?;
            Ok(match v.neighbors.insert(n.address, n.mac) {
                None => Outcome::Created,
                Some(m) if m == n.mac => Outcome::Unchanged,
                Some(_) => Outcome::Replaced,
            })
        })
    }

    fn delete_neighbor(&self, vr: &str, addr: IpAddr) -> Result<Outcome, ApiError> {
        self.with(vr, |v| {
            Ok(if v.neighbors.remove(&addr).is_some() {
                Outcome::Deleted
            } else {
                Outcome::Missing
            })
        })
    }

    fn vr_counters(&self, vr: &str) -> Result<VrCounters, ApiError> {
        self.with(vr, |v| {
            Ok(VrCounters {
                vr: vr.to_string(),
                total: counters(vr.len() as u64),
                interfaces: v
                    .interfaces
                    .iter()
                    .map(|i| InterfaceCounters {
                        name: i.name.clone(),
                        counters: counters(1),
                    })
                    .collect(),
                busy_ns: Some(1_500_000_000 * vr.len() as u64),
            })
        })
    }

    fn ports(&self) -> Result<Vec<PortInfo>, ApiError> {
        Ok(PORTS
            .iter()
            .enumerate()
            .map(|(i, p)| PortInfo {
                name: p.to_string(),
                driver: "memory".into(),
                mac: Some(MacAddr([2, 0, 0, 0, 1, i as u8])),
                mtu: 1500,
                queues: 1,
                counters: counters(i as u64),
            })
            .collect())
    }

    fn workers(&self) -> Result<Vec<WorkerInfo>, ApiError> {
        Ok(vec![
            WorkerInfo {
                index: 0,
                core: Some(1),
                load: 0.25,
                packets: 1000,
            },
            WorkerInfo {
                index: 1,
                core: None,
                load: 0.5,
                packets: 2000,
            },
        ])
    }

    fn reload(&self, config_toml: &str) -> Result<ReloadReport, ApiError> {
        let issue = |key: &str, reason: String| {
            ApiError::Config(vec![ConfigIssue {
                key: key.into(),
                reason,
            }])
        };
        let mut doc: toml::Table =
            toml::from_str(config_toml).map_err(|e| issue("(file)", e.message().to_string()))?;
        let routers = doc.remove("router").unwrap_or(toml::Value::Array(vec![]));
        let specs: Vec<VrSpec> = routers
            .try_into()
            .map_err(|e: toml::de::Error| issue("router", e.message().to_string()))?;
        let mut issues = Vec::new();
        let mut next = BTreeMap::new();
        for (i, s) in specs.iter().enumerate() {
            match build(s, "") {
                Ok(vr) => {
                    next.insert(s.name.clone(), vr);
                }
                Err(ApiError::BadRequest { field, message }) => issues.push(ConfigIssue {
                    key: format!("router[{i}].{field}"),
                    reason: message,
                }),
                Err(e) => return Err(e),
            }
        }
        if !issues.is_empty() {
            return Err(ApiError::Config(issues));
        }
        let mut vrs = self.lock();
        let report = ReloadReport {
            created: next
                .keys()
                .filter(|n| !vrs.contains_key(*n))
                .cloned()
                .collect(),
            deleted: vrs
                .keys()
                .filter(|n| !next.contains_key(*n))
                .cloned()
                .collect(),
            changed: next
                .keys()
                .filter(|n| vrs.contains_key(*n))
                .cloned()
                .collect(),
        };
        *vrs = next;
        Ok(report)
    }
}

/// A server on a temporary socket with the fixture backend, and its tokens.
pub struct TestServer {
    pub handle: ApiHandle,
    pub backend: Arc<FixtureBackend>,
    pub admin: String,
    pub own: String,
    pub other: String,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub fn start() -> TestServer {
        Self::start_with(None)
    }

    pub fn start_with(listen: Option<std::net::SocketAddr>) -> TestServer {
        Self::start_tls(listen, |_| None)
    }

    /// A server whose TCP listener uses the TLS files `tls` writes into the
    /// server's directory.
    pub fn start_tls(
        listen: Option<std::net::SocketAddr>,
        tls: impl FnOnce(&std::path::Path) -> Option<vrhost_api::TlsFiles>,
    ) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let tls = tls(dir.path());
        let admin = vrhost_api::generate_token();
        let own = vrhost_api::generate_token();
        let other = vrhost_api::generate_token();
        let cfg = ApiConfig {
            socket: dir.path().join("api.sock"),
            listen,
            tls,
            auth: Arc::new(
                Auth::new(
                    &hash_token(&admin),
                    &[
                        (OWN.into(), hash_token(&own)),
                        (OTHER.into(), hash_token(&other)),
                    ],
                )
                .expect("token hashes"),
            ),
        };
        let backend = Arc::new(FixtureBackend::new());
        let handle = vrhost_api::spawn(cfg, backend.clone()).expect("server starts");
        TestServer {
            handle,
            backend,
            admin,
            own,
            other,
            dir,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.handle.socket().to_path_buf()
    }

    pub fn client(&self, token: Option<&str>) -> Client {
        Client::unix(self.socket(), token.map(str::to_string))
    }

    pub fn admin(&self) -> Client {
        self.client(Some(&self.admin))
    }
}
