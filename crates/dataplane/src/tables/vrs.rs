//! Creating, removing and building VRs.

use super::interfaces::build_iface;
use super::*;

impl TableWriter {
    /// Adds a VR at run time; workers pick it up at [`TableWriter::commit`]
    /// without pausing the others. Returns its index. Nothing is changed
    /// when it fails.
    pub fn add_vr(&mut self, r: &RouterSpec) -> Result<VrId, BuildError> {
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
                let vr = VrId::new(vr);
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
    pub fn remove_vr(&mut self, vr: VrId) -> Result<(), BuildError> {
        let vr = vr.index();
        self.vr(vr)?;
        let ifaces = std::mem::take(&mut self.shared.vrs[vr].ifaces);
        for gi in ifaces {
            let iface = &mut self.shared.ifaces[gi.index()];
            if let Some(port) = self.shared.ports.get_mut(iface.port as usize) {
                let slot = &mut port.demux[iface.vlan.unwrap_or(0) as usize];
                if *slot == gi.get() {
                    *slot = NO_IFACE;
                }
            }
            iface.addrs4.clear();
            iface.addrs6.clear();
            iface.mcast.clear();
        }
        self.shared.vrs[vr].alive = false;
        let c = &mut self.vrs[vr];
        c.clear();
        self.static_neighbors[vr].clear();
        self.topology_dirty = true;
        Ok(())
    }

    /// Builds one VR into the working copy: interfaces, demux entries,
    /// connected routes, static neighbors and routes.
    pub(super) fn build_vr(&mut self, r: &RouterSpec) -> Result<usize, BuildError> {
        let vr_idx = self.shared.vrs.len();
        let mut c = VrControl::new();
        let filters = self.build_filters(&r.name, &r.filters, &[])?;
        let mut vr_ifaces = Vec::new();
        let cp = r.limits.control_plane;
        for i in &r.interfaces {
            vr_ifaces.push(IfaceId::new(build_iface(
                &mut self.shared,
                &mut c,
                (vr_idx, &r.name, &filters),
                cp,
                i,
            )?));
        }
        self.shared.vrs.push(VrShared {
            name: r.name.clone(),
            ifaces: vr_ifaces,
            limits: r.limits,
            fib4: c.fib4.reader(),
            fib6: c.fib6.reader(),
            nexthops: Arc::new(ArcSwap::from_pointee(NextHops::default())),
            filters,
            alive: true,
        });
        self.vrs.push(c);
        self.static_neighbors.push(Vec::new());
        if self.vr_address_count(vr_idx) > r.limits.max_addresses as usize {
            return Err(BuildError::AddressLimit {
                router: r.name.clone(),
                limit: r.limits.max_addresses,
            });
        }
        for &(addr, mac) in &r.neighbors {
            self.set_static_neighbor(VrId::new(vr_idx), addr, mac)?;
        }
        // One bulk load for the configured routes (a routes file can hold a
        // full table): the FIB is built in one pass, compact, not grown by
        // a million incremental inserts.
        self.add_routes(VrId::new(vr_idx), &r.routes4, &r.routes6)?;
        Ok(vr_idx)
    }

    pub(super) fn vr(&self, vr: usize) -> Result<(), BuildError> {
        if self.shared.vr_alive(VrId::new(vr)) {
            Ok(())
        } else {
            Err(BuildError::NoSuchRouter(vr))
        }
    }
}
