//! The engine: the control side and one worker together, for the callers
//! that run a single worker on one thread (replay, tests, the demo).
//!
//! ```text
//!  driver rx ──▶ Engine::process_burst ──▶ TxBatch (one queue per port) ──▶ driver tx
//!                    │            ▲
//!                    ▼            │ held packets released on ARP/NDP replies
//!            VR punt queues   neighbor tables ◀── Engine::poll (timers)
//! ```
//!
//! Route changes made through the engine are published at once. Several
//! workers on several cores use [`TableWriter`] and [`Worker`] directly.

use std::net::IpAddr;

use vrhost_fib::IpPrefix;
use vrhost_wire::ethernet::EthernetAddress;

use crate::counters::Counters;
use crate::iface::Iface;
use crate::mbuf::{Mbuf, MbufPool};
use crate::spec::{EngineSpec, IfaceId, PortId, RouteTarget, VrId};
use crate::tables::{BuildError, TableWriter};
use crate::worker::{TxBatch, Worker, WorkerCounters};

/// A VR as reports show it.
#[derive(Clone, Debug)]
pub struct VrInfo {
    /// Name.
    pub name: String,
    /// Interfaces (global indices).
    pub ifaces: Vec<IfaceId>,
    /// IPv4 routes (connected and local ones included).
    pub routes4: usize,
    /// IPv6 routes (connected and local ones included).
    pub routes6: usize,
    /// FIB memory, both families, bytes.
    pub fib_bytes: usize,
    /// Neighbor entries (in the first worker).
    pub neighbors: usize,
    /// Packets on the punt queue.
    pub punt_len: usize,
}

/// Port `port`'s counters summed over the workers.
pub fn sum_ports(workers: &[std::sync::Arc<WorkerCounters>], port: PortId) -> Counters {
    let mut c = Counters::default();
    for w in workers {
        c.add(&w.ports[port.index()].snapshot());
    }
    c
}

/// The counters of interfaces `ifaces` summed over the workers.
pub fn sum_ifaces(workers: &[std::sync::Arc<WorkerCounters>], ifaces: &[IfaceId]) -> Counters {
    let mut c = Counters::default();
    for w in workers {
        for &i in ifaces {
            c.add(&w.ifaces[i.index()].snapshot());
        }
    }
    c
}

/// VR `vr`'s worker time in nanoseconds summed over the workers
/// ([`WorkerCounters::vr_busy_ns`]), or `None` where no worker has a clock
/// or the workers have no room for it (VRs created empty at run time, past
/// the interfaces' headroom, that got interfaces later).
pub fn sum_vr_busy_ns(workers: &[std::sync::Arc<WorkerCounters>], vr: VrId) -> Option<u64> {
    if !workers.iter().any(|w| w.clocked.get() != 0) {
        return None;
    }
    workers
        .iter()
        .map(|w| w.vr_busy_ns.get(vr.index()).map(|c| c.get()))
        .sum()
}

/// The control side and a single worker.
pub struct Engine {
    writer: TableWriter,
    worker: Worker,
}

impl Engine {
    /// Builds the engine. Validation here is a safety net: the config crate
    /// reports errors with config keys before this runs.
    pub fn new(spec: &EngineSpec) -> Result<Engine, BuildError> {
        let mut writer = TableWriter::new(spec)?;
        let worker = Worker::create(&mut writer, 1).pop().expect("one worker");
        Ok(Engine { writer, worker })
    }

    /// Where packet traces of this engine are armed ([`crate::trace`]).
    pub fn trace_hub(&self) -> std::sync::Arc<crate::trace::TraceHub> {
        self.writer.trace_hub()
    }

    /// Turns the IPv4 fast path on or off; see [`Worker::set_fast_path`].
    pub fn set_fast_path(&mut self, on: bool) {
        self.worker.set_fast_path(on);
    }

    /// Measures each VR's cost with `clock` and enforces fair shares when
    /// the worker saturates; see [`Worker::set_clock`].
    pub fn set_clock(
        &mut self,
        clock: crate::fair::Clock,
        ticks_per_second: u64,
        full_burst: usize,
    ) {
        self.worker.set_clock(clock, ticks_per_second, full_burst);
    }

    /// Enforce fair shares when saturated (the default once a clock is
    /// set), or only measure each VR's cost; see [`Worker::set_fair_share`].
    pub fn set_fair_share(&mut self, on: bool) {
        self.worker.set_fair_share(on);
    }

    /// The worker's fair-share state: what each VR was charged
    /// ([`crate::Fair::charged`]), budgets, rounds.
    pub fn fair(&self) -> &crate::Fair {
        self.worker.fair()
    }

    /// The driver began to read the next burst at `start`, a reading of
    /// the clock; see [`Worker::note_receive`].
    pub fn note_receive(&mut self, start: u64) {
        self.worker.note_receive(start);
    }

    /// A turn of the driver loop ended at `now`, having `sent` frames or
    /// not; see [`Worker::end_turn`].
    pub fn end_turn(&mut self, now: u64, sent: bool) {
        self.worker.end_turn(now, sent);
    }

    /// Processes a burst; see [`Worker::process_burst`].
    pub fn process_burst(&mut self, rx: &mut Vec<Mbuf>, now: u64, tx: &mut TxBatch) {
        self.worker.process_burst(rx, now, tx);
    }

    /// Runs timers; see [`Worker::poll`].
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        self.worker.poll(now, tx);
    }

    /// Adds or replaces a route of either family in VR `vr`, published at once.
    pub fn add_route(
        &mut self,
        vr: VrId,
        prefix: impl Into<IpPrefix>,
        target: RouteTarget,
    ) -> Result<(), BuildError> {
        let prefix = prefix.into();
        self.commit(|c| c.add_route(vr, prefix, target))
    }

    /// Applies one change to the tables and publishes it at once (a refused
    /// change publishes nothing new).
    fn commit<T>(
        &mut self,
        change: impl FnOnce(&mut TableWriter) -> Result<T, BuildError>,
    ) -> Result<T, BuildError> {
        let out = change(&mut self.writer)?;
        self.writer.commit();
        Ok(out)
    }

    /// Creates a VR at run time, published at once; returns its index.
    pub fn add_vr(&mut self, spec: &crate::spec::RouterSpec) -> Result<VrId, BuildError> {
        self.commit(|c| c.add_vr(spec))
    }

    /// Deletes VR `vr`, published at once.
    pub fn remove_vr(&mut self, vr: VrId) -> Result<(), BuildError> {
        self.commit(|c| c.remove_vr(vr))
    }

    /// Adds an interface to VR `vr`, published at once.
    pub fn add_interface(
        &mut self,
        vr: VrId,
        iface: &crate::spec::InterfaceSpec,
    ) -> Result<bool, BuildError> {
        self.commit(|c| c.add_interface(vr, iface))
    }

    /// Replaces VR `vr`'s rule lists as a whole, published at once.
    pub fn set_filters(
        &mut self,
        vr: VrId,
        filters: &[crate::filter::FilterSpec],
    ) -> Result<bool, BuildError> {
        self.commit(|c| c.set_filters(vr, filters))
    }

    /// Sets the rule lists an interface of VR `vr` applies, published at once.
    pub fn set_interface_filters(
        &mut self,
        vr: VrId,
        iface: &str,
        names: &crate::spec::IfaceFilters,
    ) -> Result<bool, BuildError> {
        self.commit(|c| c.set_interface_filters(vr, iface, names))
    }

    /// Removes an interface of VR `vr`, published at once.
    pub fn remove_interface(&mut self, vr: VrId, iface: &str) -> Result<bool, BuildError> {
        self.commit(|c| c.remove_interface(vr, iface))
    }

    /// Adds an address to an interface of VR `vr`, published at once.
    pub fn add_address(
        &mut self,
        vr: VrId,
        iface: &str,
        addr: std::net::IpAddr,
        len: u8,
    ) -> Result<bool, BuildError> {
        self.commit(|c| c.add_address(vr, iface, addr, len))
    }

    /// Removes an address from an interface of VR `vr`, published at once.
    pub fn remove_address(
        &mut self,
        vr: VrId,
        iface: &str,
        addr: std::net::IpAddr,
        len: u8,
    ) -> Result<bool, BuildError> {
        self.commit(|c| c.remove_address(vr, iface, addr, len))
    }

    /// Removes a route of either family; true if it existed.
    pub fn remove_route(&mut self, vr: VrId, prefix: impl Into<IpPrefix>) -> bool {
        let r = self.writer.remove_route(vr, prefix);
        self.writer.commit();
        r
    }

    /// Installs a static neighbor.
    pub fn set_static_neighbor(
        &mut self,
        vr: VrId,
        addr: IpAddr,
        mac: EthernetAddress,
    ) -> Result<(), BuildError> {
        self.commit(|c| c.set_static_neighbor(vr, addr, mac))
    }

    /// Deletes a static neighbor (its MAC is resolved afresh when next
    /// used); false when there was none.
    pub fn remove_static_neighbor(&mut self, vr: VrId, addr: IpAddr) -> Result<bool, BuildError> {
        self.commit(|c| c.remove_static_neighbor(vr, addr))
    }

    /// The buffer pool drivers take receive buffers from and return sent ones to.
    pub fn pool(&mut self) -> &mut MbufPool {
        self.worker.pool()
    }

    /// Number of VRs.
    pub fn vr_count(&self) -> usize {
        self.writer.working().vr_count()
    }

    /// A VR as reports show it.
    pub fn vr(&self, vr: VrId) -> VrInfo {
        let s = self.writer.working();
        let (routes4, routes6) = self.writer.routes(vr);
        VrInfo {
            name: s.vr_name(vr).to_string(),
            ifaces: s.vr_ifaces(vr).to_vec(),
            routes4,
            routes6,
            fib_bytes: self.writer.fib_memory(vr),
            neighbors: self.worker.vr(vr).neighbors.len(),
            punt_len: self.worker.vr(vr).punt_len(),
        }
    }

    /// Interfaces (global order: VR by VR, as configured).
    pub fn ifaces(&self) -> &[Iface] {
        self.writer.working().ifaces()
    }

    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.writer.working().port_count()
    }

    /// Port name.
    pub fn port_name(&self, port: PortId) -> &str {
        self.writer.working().port_name(port)
    }

    /// Counters of one port.
    pub fn port_counters(&self, port: PortId) -> Counters {
        sum_ports(&[self.worker.counters()], port)
    }

    /// Counters of one interface (global index).
    pub fn iface_counters(&self, iface: IfaceId) -> Counters {
        sum_ifaces(&[self.worker.counters()], &[iface])
    }

    /// Counters of one VR: the sum of its interfaces'.
    pub fn vr_counters(&self, vr: VrId) -> Counters {
        sum_ifaces(
            &[self.worker.counters()],
            self.writer.working().vr_ifaces(vr),
        )
    }

    /// Hands every punted packet of VR `vr` to `f`, then recycles it.
    pub fn drain_punted(&mut self, vr: VrId, f: impl FnMut(&Mbuf)) {
        self.worker.drain_punted(vr, f);
    }

    /// Hands every punted packet of every VR to `f(vr, packet)`; see
    /// [`Worker::drain_all_punted`].
    pub fn drain_all_punted(&mut self, f: impl FnMut(usize, &Mbuf)) {
        self.worker.drain_all_punted(f);
    }

    /// Packets held by neighbor resolution, all VRs.
    pub fn held(&self) -> usize {
        self.worker.held()
    }

    /// Packets on punt queues, all VRs.
    pub fn punt_queued(&self) -> usize {
        self.worker.punt_queued()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Cell;
    use std::sync::Arc;

    fn worker(cells: usize, clocked: bool, each: u64) -> Arc<WorkerCounters> {
        let w = WorkerCounters {
            ports: Vec::new(),
            ifaces: Vec::new(),
            load_permille: Cell::default(),
            heartbeat: Cell::default(),
            vr_busy_ns: (0..cells).map(|_| Cell::default()).collect(),
            clocked: Cell::default(),
            index: 0,
        };
        w.vr_busy_ns.iter().for_each(|c| c.set(each));
        w.clocked.set(u64::from(clocked));
        Arc::new(w)
    }

    #[test]
    fn a_vrs_worker_time_is_summed_or_said_unknown() {
        let two = [worker(4, true, 10), worker(4, true, 5)];
        assert_eq!(sum_vr_busy_ns(&two, VrId::new(3)), Some(15));
        // No room for VR 4 in the workers: unknown, not 0.
        assert_eq!(sum_vr_busy_ns(&two, VrId::new(4)), None);
        // No clock anywhere: nothing was measured.
        let unclocked = [worker(4, false, 0)];
        assert_eq!(sum_vr_busy_ns(&unclocked, VrId::new(0)), None);
    }
}
