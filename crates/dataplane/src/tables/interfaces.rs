//! Interfaces and their addresses: the connected, local and broadcast routes they install.

use super::hops::{v4, v6};
use super::*;

impl TableWriter {
    /// Adds `addr/len` to interface `iface` of VR `vr`, with its connected,
    /// local (and IPv4 broadcast) routes. `Ok(false)` when it was there.
    pub fn add_address(
        &mut self,
        vr: VrId,
        iface: &str,
        addr: IpAddr,
        len: u8,
    ) -> Result<bool, BuildError> {
        let vr = vr.index();
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
        let limit = self.shared.vrs[vr].limits.max_addresses;
        if self.vr_address_count(vr) >= limit as usize {
            return Err(BuildError::AddressLimit {
                router: self.shared.vrs[vr].name.clone(),
                limit,
            });
        }
        let i = &self.shared.ifaces[gi as usize];
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
        vr: VrId,
        iface: &str,
        addr: IpAddr,
        len: u8,
    ) -> Result<bool, BuildError> {
        let vr = vr.index();
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
                    c.remove(v4, &host);
                }
                if len <= 30 {
                    let bcast = Ipv4Addr::from(u32::from(a) | (u32::MAX >> len));
                    if let Ok(b) = Prefix::new(bcast, 32) {
                        c.remove(v4, &b);
                    }
                }
                // The subnet stays while another address of the VR covers it.
                let covered = self.shared.vrs[vr].ifaces.iter().any(|&j| {
                    let addrs: &[(Ipv4Addr, u8)] = if j == IfaceId::new(gi) {
                        &a4
                    } else {
                        &self.shared.ifaces[j.index()].addrs4
                    };
                    addrs
                        .iter()
                        .any(|&(b, l)| l == len && crate::iface::same_subnet4(a, b, len))
                });
                if !covered {
                    if let Ok(net) = Prefix4::new_truncating(a, len) {
                        c.remove(v4, &net);
                    }
                }
            }
            IpAddr::V6(a) => {
                if let Ok(host) = Prefix::new(a, 128) {
                    c.remove(v6, &host);
                }
                let covered = a6
                    .iter()
                    .any(|&(b, l)| l == len && crate::iface::same_subnet6(a, b, len));
                if !covered {
                    if let Ok(net) = Prefix6::new_truncating(a, len) {
                        c.remove(v6, &net);
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
    pub fn add_interface(&mut self, vr: VrId, i: &InterfaceSpec) -> Result<bool, BuildError> {
        let vr = vr.index();
        self.vr(vr)?;
        if let Ok(gi) = self.iface_index(vr, &i.name) {
            let f = &self.shared.ifaces[gi as usize];
            let same = f.port == i.port
                && f.vlan == i.vlan
                && f.inner_vlan == i.inner_vlan
                && f.tpid == i.tpid
                && f.mac == i.mac
                && f.urpf == i.urpf
                && f.filter_names() == i.filters;
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
        let filters = self.shared.vrs[vr].filters.clone();
        let gi = build_iface(
            &mut self.shared,
            &mut self.vrs[vr],
            (vr, &name, &filters),
            cp,
            i,
        )?;
        self.shared.vrs[vr].ifaces.push(IfaceId::new(gi));
        self.vrs[vr].fib_dirty = true;
        self.topology_dirty = true;
        Ok(true)
    }

    /// Removes interface `iface` of VR `vr` with its addresses and static
    /// neighbours; refused while routes of the VR go through it.
    /// `Ok(false)` when there is no such interface.
    pub fn remove_interface(&mut self, vr: VrId, iface: &str) -> Result<bool, BuildError> {
        let vr = vr.index();
        self.vr(vr)?;
        let Ok(gi) = self.iface_index(vr, iface) else {
            return Ok(false);
        };
        let users = self
            .route_list(VrId::new(vr))
            .iter()
            .filter(|(_, _, h)| {
                self.hop_paths(VrId::new(vr), h)
                    .iter()
                    .any(|&(iface, _)| iface == gi)
            })
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
            self.remove_address(VrId::new(vr), iface, a, l)?;
        }
        let f = &mut self.shared.ifaces[gi as usize];
        if let Some(port) = self.shared.ports.get_mut(f.port as usize) {
            match (f.vlan, f.inner_vlan) {
                (Some(outer), Some(inner)) => {
                    let key = qinq_key(outer, inner);
                    if port.qinq.get(&key) == Some(&gi) {
                        port.qinq.remove(&key);
                    }
                }
                (vlan, _) => {
                    let slot = &mut port.demux[vlan.unwrap_or(0) as usize];
                    if *slot == gi {
                        *slot = NO_IFACE;
                    }
                }
            }
        }
        // The slot stays (indices never move); its name is free again.
        f.name.clear();
        f.mcast.clear();
        self.shared.vrs[vr]
            .ifaces
            .retain(|&i| i != IfaceId::new(gi));
        self.static_neighbors[vr].retain(|&(i, _, _)| i != gi);
        self.topology_dirty = true;
        Ok(true)
    }

    /// Addresses on VR `vr`'s interfaces, both families, link-local included.
    pub(super) fn vr_address_count(&self, vr: usize) -> usize {
        self.shared.vrs[vr]
            .ifaces
            .iter()
            .map(|&i| {
                let f = &self.shared.ifaces[i.index()];
                f.addrs4.len() + f.addrs6.len()
            })
            .sum()
    }

    pub(super) fn iface_index(&self, vr: usize, name: &str) -> Result<u16, BuildError> {
        self.vr(vr)?;
        self.shared.vrs[vr]
            .ifaces
            .iter()
            .copied()
            .find(|&i| self.shared.ifaces[i.index()].name == name)
            .map(IfaceId::get)
            .ok_or_else(|| BuildError::NoSuchInterface {
                router: self.shared.vrs[vr].name.clone(),
                iface: name.to_string(),
            })
    }

    pub(super) fn on_link_iface(&self, vr: usize, addr: IpAddr) -> Option<u16> {
        let s = &self.shared;
        s.vrs[vr]
            .ifaces
            .iter()
            .copied()
            .find(|&i| {
                let iface = &s.ifaces[i.index()];
                match addr {
                    IpAddr::V4(a) => iface.on_link4(a),
                    IpAddr::V6(a) => iface.on_link6(a),
                }
            })
            .map(IfaceId::get)
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
        c.insert(v4, net, connected);
    }
    if let Ok(host) = Prefix::new(a, 32) {
        c.insert(v4, host, NH_LOCAL);
    }
    if len <= 30 {
        let bcast = Ipv4Addr::from(u32::from(a) | (u32::MAX >> len));
        if let Ok(b) = Prefix::new(bcast, 32) {
            c.insert(v4, b, NH_BROADCAST);
        }
    }
}

/// The connected and local routes of an IPv6 address.
fn insert_v6_address(c: &mut VrControl, connected: NextHopId, a: Ipv6Addr, len: u8) {
    if let Ok(net) = Prefix6::new_truncating(a, len) {
        c.insert(v6, net, connected);
    }
    if let Ok(host) = Prefix::new(a, 128) {
        c.insert(v6, host, NH_LOCAL);
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

/// Builds interface `i` of VR `vr_idx` (`router` by name; `control_mcast`
/// when it has a control plane) into `shared`:
/// its demux entry, its connected, local and broadcast routes in `c`.
/// Returns its global index.
pub(super) fn build_iface(
    shared: &mut Shared,
    c: &mut VrControl,
    (vr_idx, router, filters): (usize, &str, &[Arc<crate::filter::Filter>]),
    control_mcast: bool,
    i: &InterfaceSpec,
) -> Result<u16, BuildError> {
    let gi = shared.ifaces.len() as u16;
    let (filter_in, filter_out) = super::filters::resolve(filters, &i.name, &i.filters)?;
    let Some(port) = shared.ports.get_mut(i.port as usize) else {
        return Err(BuildError::NoSuchPort {
            router: router.to_string(),
            iface: i.name.clone(),
            port: i.port,
        });
    };
    for v in [i.vlan, i.inner_vlan].into_iter().flatten() {
        if !(1..=4094).contains(&v) {
            return Err(BuildError::BadVlan {
                iface: i.name.clone(),
                vlan: v,
            });
        }
    }
    let slot = match (i.vlan, i.inner_vlan) {
        (None, Some(_)) => {
            return Err(BuildError::InnerWithoutOuter {
                iface: i.name.clone(),
            })
        }
        (Some(outer), Some(inner)) => port.qinq.entry(qinq_key(outer, inner)).or_insert(NO_IFACE),
        (vlan, None) => &mut port.demux[usize::from(vlan.unwrap_or(0))],
    };
    if *slot != NO_IFACE {
        let first = shared.ifaces[*slot as usize].name.clone();
        let vlan = match (i.vlan, i.inner_vlan) {
            (Some(o), Some(n)) => format!("{o}.{n}"),
            (v, _) => v.unwrap_or(0).to_string(),
        };
        return Err(BuildError::DuplicateDemux {
            first,
            second: i.name.clone(),
            port: port.name.clone(),
            vlan,
        });
    }
    *slot = gi;
    let (l2_len, tags) = crate::iface::l2_of(i.vlan, i.inner_vlan, i.tpid);
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
        inner_vlan: i.inner_vlan,
        tpid: i.tpid,
        mac: i.mac,
        mtu,
        l2_len,
        tags,
        addrs4: i.addrs4.clone(),
        addrs6,
        mcast,
        control_mcast,
        urpf: i.urpf,
        filter_in,
        filter_out,
    });
    Ok(gi)
}
