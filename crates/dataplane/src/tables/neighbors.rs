//! Static neighbors: installed on the control side, sent to every worker as events.

use super::*;

impl TableWriter {
    /// Static neighbors of VR `vr`: (interface, address, MAC).
    pub(crate) fn static_neighbors(&self, vr: usize) -> &[(u16, IpAddr, EthernetAddress)] {
        &self.static_neighbors[vr]
    }

    /// Installs or replaces a static neighbor in every worker, at the next
    /// [`TableWriter::commit`].
    pub fn set_static_neighbor(
        &mut self,
        vr: VrId,
        addr: IpAddr,
        mac: EthernetAddress,
    ) -> Result<(), BuildError> {
        let vr = vr.index();
        self.vr(vr)?;
        let iface = self
            .on_link_iface(vr, addr)
            .ok_or_else(|| BuildError::NeighborOffLink {
                router: self.shared.vrs[vr].name.clone(),
                addr,
            })?;
        // A static neighbor is one per address; one that moved to another
        // interface is forgotten on the old one.
        let replaces = self.static_neighbors[vr].iter().any(|&(_, a, _)| a == addr);
        let limit = self.shared.vrs[vr].limits.max_neighbors;
        if !replaces && self.static_neighbors[vr].len() >= limit as usize {
            return Err(BuildError::NeighborLimit {
                router: self.shared.vrs[vr].name.clone(),
                limit,
            });
        }
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

    /// Static neighbors of VR `vr`: (interface, address, MAC).
    pub fn static_neighbor_list(&self, vr: VrId) -> Vec<(u16, IpAddr, EthernetAddress)> {
        let vr = vr.index();
        self.static_neighbors.get(vr).cloned().unwrap_or_default()
    }

    /// Removes a static neighbor. At the next commit every worker forgets
    /// its MAC: the next packet for it is held while ARP or NDP resolves the
    /// address afresh, as after `ip neigh del`. `Ok(false)` when absent.
    pub fn remove_static_neighbor(&mut self, vr: VrId, addr: IpAddr) -> Result<bool, BuildError> {
        let vr = vr.index();
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
