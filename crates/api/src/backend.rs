//! The [`Backend`] trait: what the HTTP layer asks of the router.
//!
//! The HTTP layer authenticates, checks that the token may see the VR it
//! names, parses and validates requests, and then calls one method here. The
//! implementor (the `vrhost` binary, over the running data plane) does the
//! work and its own locking: every method takes `&self` and may block; the
//! server calls it from a blocking-task thread, never from the async reactor.
//!
//! Contract for implementors:
//! - An unknown VR name answers [`ApiError::NoSuchVr`], never a message that
//!   repeats the name: a tenant token asking for another tenant's VR gets the
//!   very same answer, so the two must not be told apart.
//! - Additions are idempotent: adding what is already there, identical,
//!   answers [`Outcome::Unchanged`]. Deletions of what is missing answer
//!   [`Outcome::Missing`] (the HTTP layer turns that into 404 unless the
//!   client passed `missing_ok`).
//! - A request is validated whole before any of it is applied; a failed
//!   request changes nothing.

use std::net::IpAddr;

use crate::auth::Principal;
use crate::error::ApiError;
use crate::types::{
    BulkResult, BulkRoutes, CaptureQuery, Filters, IfaceAddr, InterfaceSpec, Neighbor, Outcome,
    PortInfo, Prefix, ReloadReport, Route, RoutePage, TraceQuery, TraceReport, VrCounters, VrInfo,
    VrSpec, WorkerInfo,
};

/// The router as the management API sees it. Object safe: the server holds an
/// `Arc<dyn Backend>`.
pub trait Backend: Send + Sync + 'static {
    /// Every VR, in a stable order.
    fn list_vrs(&self) -> Result<Vec<VrInfo>, ApiError>;

    /// One VR.
    fn get_vr(&self, vr: &str) -> Result<VrInfo, ApiError>;

    /// Creates a VR without disturbing the others' traffic. 409 if the name
    /// is taken; 400 naming the field if the description is invalid.
    fn create_vr(&self, spec: &VrSpec) -> Result<VrInfo, ApiError>;

    /// Deletes a VR and everything in it.
    fn delete_vr(&self, vr: &str) -> Result<(), ApiError>;

    /// Adds an interface to a running VR (operator only): `Created`, or
    /// `Unchanged` when an identical one exists; 409 when its port and VLAN
    /// are taken or a different interface has the name.
    fn add_interface(&self, vr: &str, iface: &InterfaceSpec) -> Result<Outcome, ApiError>;

    /// Removes an interface with its addresses and static neighbours
    /// (`Deleted` or `Missing`); 409 while routes go through it.
    fn delete_interface(&self, vr: &str, iface: &str) -> Result<Outcome, ApiError>;

    /// An interface's addresses.
    fn list_addresses(&self, vr: &str, iface: &str) -> Result<Vec<IfaceAddr>, ApiError>;

    /// Adds an address to an interface (`Created` or `Unchanged`).
    fn add_address(&self, vr: &str, iface: &str, addr: IfaceAddr) -> Result<Outcome, ApiError>;

    /// Removes an address (`Deleted` or `Missing`).
    fn delete_address(&self, vr: &str, iface: &str, addr: IfaceAddr) -> Result<Outcome, ApiError>;

    /// One page of the VR's routes, connected and local ones included, in a
    /// stable order; `limit` is already clamped by the HTTP layer.
    fn list_routes(&self, vr: &str, offset: u64, limit: u64) -> Result<RoutePage, ApiError>;

    /// Adds one route (a via, blackhole or unreachable one). An existing route
    /// of the same prefix with another target is replaced when `replace`,
    /// otherwise answers 409.
    fn add_route(&self, vr: &str, route: &Route, replace: bool) -> Result<Outcome, ApiError>;

    /// The VR's rule lists with their counters, and every interface's lists.
    fn get_filters(&self, vr: &str) -> Result<Filters, ApiError>;

    /// Replaces the VR's rule lists, and sets the lists of the interfaces
    /// the body names, all or nothing (`Replaced` or `Unchanged`).
    fn set_filters(&self, vr: &str, filters: &Filters) -> Result<Outcome, ApiError>;

    /// Removes one route (`Deleted` or `Missing`).
    fn delete_route(&self, vr: &str, prefix: Prefix) -> Result<Outcome, ApiError>;

    /// Applies many route changes at once: validated whole, then deletions,
    /// then additions, published together.
    fn bulk_routes(&self, vr: &str, req: &BulkRoutes) -> Result<BulkResult, ApiError>;

    /// The VR's static neighbours.
    fn list_neighbors(&self, vr: &str) -> Result<Vec<Neighbor>, ApiError>;

    /// Adds or replaces a static neighbour (`Created`, `Replaced`, `Unchanged`).
    fn add_neighbor(&self, vr: &str, neighbor: &Neighbor) -> Result<Outcome, ApiError>;

    /// Removes a static neighbour (`Deleted` or `Missing`).
    fn delete_neighbor(&self, vr: &str, addr: IpAddr) -> Result<Outcome, ApiError>;

    /// The VR's counters and its interfaces'.
    fn vr_counters(&self, vr: &str) -> Result<VrCounters, ApiError>;

    /// Every port with its counters.
    fn ports(&self) -> Result<Vec<PortInfo>, ApiError>;

    /// Every worker's load.
    fn workers(&self) -> Result<Vec<WorkerInfo>, ApiError>;

    /// Validates a whole new config (TOML text) and applies it atomically, or
    /// answers [`ApiError::Config`] with every problem and changes nothing.
    fn reload(&self, config_toml: &str) -> Result<ReloadReport, ApiError>;

    /// Starts a live capture of what interface `iface` of `vr` receives and
    /// sends: 404 for an unknown interface, 400 naming `filter` for a bad
    /// expression, 429 when too many captures run. The capture lasts as long
    /// as the returned stream (dropping it stops it). Backends without the
    /// data plane answer 404.
    fn capture(
        &self,
        vr: &str,
        iface: &str,
        query: &CaptureQuery,
    ) -> Result<Box<dyn CaptureStream>, ApiError> {
        let _ = (vr, iface, query);
        Err(ApiError::NotFound(
            "live capture is not available here".into(),
        ))
    }

    /// Traces the next packets of `vr` (of one interface, if the query
    /// names it): each with every decision the stages made about it and
    /// where it went. Waits for the count or the time the query gives
    /// (already clamped by the HTTP layer). 404 for an unknown interface,
    /// 429 when too many traces run. Backends without the data plane
    /// answer 404.
    fn trace(&self, vr: &str, query: &TraceQuery) -> Result<TraceReport, ApiError> {
        let _ = (vr, query);
        Err(ApiError::NotFound(
            "packet trace is not available here".into(),
        ))
    }
}

/// A running capture, as pcap bytes in pieces.
pub trait CaptureStream: Send + 'static {
    /// The next piece (the pcap file header first): an empty one when
    /// nothing came within `wait`, `None` once the capture is over (its
    /// count or time reached, or its interface or VR deleted).
    fn next_chunk(&mut self, wait: std::time::Duration) -> Option<Vec<u8>>;
}

/// Counters of every VR this token may see. A VR deleted between the list and
/// its counters is left out.
pub(crate) fn visible_counters(
    b: &dyn Backend,
    p: &Principal,
) -> Result<Vec<crate::types::VrCounters>, ApiError> {
    let mut out = Vec::new();
    for vr in b.list_vrs()?.into_iter().filter(|v| p.sees(&v.name)) {
        match b.vr_counters(&vr.name) {
            Ok(c) => out.push(c),
            Err(ApiError::NoSuchVr) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
