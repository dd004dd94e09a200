//! Interfaces and ports as the pipeline sees them.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use vrhost_wire::ethernet::EthernetAddress;

use crate::filter::Filter;
use crate::spec::{IfaceFilters, Urpf};
use vrhost_wire::ipv6 as wire6;

/// An interface at run time.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Iface {
    // What demux and the fast path read, first: one cache line (`repr(C)`
    // keeps this order), which is a miss per packet when many VRs take
    // turns.
    /// Owning VR.
    pub vr: u16,
    /// Port index.
    pub port: u16,
    /// MAC.
    pub mac: EthernetAddress,
    /// IP MTU.
    pub mtu: u16,
    /// The L2 header of what leaves: 14 bytes, 18 with a tag, 22 with two.
    pub l2_len: u8,
    /// Reverse-path check of what arrives here (RFC 3704).
    pub urpf: Urpf,
    /// The outer tag's TPID.
    pub tpid: crate::spec::Tpid,
    /// The VR has a control plane: also accept the link-local control groups
    /// (224.0.0.0/24 and ff02::/112: OSPF, RIP, VRRP, PIM, MLD), which are punted to it.
    pub control_mcast: bool,
    /// The tags of what leaves, as written after the MACs (`l2_len` − 14
    /// bytes of them): the outer TPID and TCI (PCP 0, DEI 0), then 0x8100
    /// and the inner TCI.
    pub tags: [u8; 8],
    /// VLAN tag on egress, if any (the outer one with `inner_vlan`).
    pub vlan: Option<u16>,
    /// QinQ: the inner VLAN tag under `vlan`.
    pub inner_vlan: Option<u16>,
    /// The rule list applied to every IP packet that enters here.
    pub filter_in: Option<Arc<Filter>>,
    /// The rule list applied to every packet forwarded out of here.
    pub filter_out: Option<Arc<Filter>>,
    /// Name.
    pub name: String,
    /// IPv4 addresses.
    pub addrs4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses (configured, then the link-local one).
    pub addrs6: Vec<(Ipv6Addr, u8)>,
    /// Multicast MACs accepted (IPv6 all-nodes, all-routers, solicited-node groups).
    pub mcast: Vec<EthernetAddress>,
}

/// What the fast path writes for an egress interface, copied out of it: a
/// resolved gateway keeps one (`worker::GatewaySlot`), so the interface's
/// own line is not read per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Egress {
    pub mac: EthernetAddress,
    pub l2: u8,
    pub mtu: u16,
    pub port: u16,
    /// The tags written after the MACs ([`Iface::tags`]).
    pub tags: [u8; 8],
}

impl Egress {
    #[inline(always)]
    pub fn of(e: &Iface) -> Egress {
        Egress {
            mac: e.mac,
            l2: e.l2_len,
            mtu: e.mtu,
            port: e.port,
            tags: e.tags,
        }
    }

    /// Its L2 header length: 14, 18 with a tag, 22 with two.
    #[inline(always)]
    pub fn l2_len(self) -> usize {
        usize::from(self.l2)
    }

    /// Whether a frame whose L3 header is `L2` bytes in, with `room` bytes
    /// of headroom, can take this L2 header (pushing tags takes 4 or 8 bytes
    /// of headroom; a received frame has 128).
    #[inline(always)]
    pub fn fits<const L2: usize>(self, room: usize) -> bool {
        L2 + room >= self.l2_len()
    }

    /// Writes the Ethernet header toward `dst` (and the tags) into `l2`,
    /// the frame's first 14, 18 or 22 bytes: the MACs, then the interface's
    /// tag bytes (TPID and TCI with PCP 0, DEI 0 and the VID, twice for
    /// QinQ), as the full stages write them. The EtherType (the innermost,
    /// tagged) is the frame's already.
    #[inline(always)]
    pub fn write(self, l2: &mut [u8], dst: EthernetAddress) {
        // Fixed-size views: with `l2`'s length a constant where this is
        // inlined, no write below tests a bound.
        if let Some(eth) = l2.first_chunk_mut::<12>() {
            let (d, s) = eth.split_at_mut(6);
            d.copy_from_slice(&dst.0);
            s.copy_from_slice(&self.mac.0);
        }
        let t = l2.len().saturating_sub(14);
        if let (Some(to), Some(from)) = (l2.get_mut(12..12 + t), self.tags.get(..t)) {
            to.copy_from_slice(from);
        }
    }
}

/// The L2 header length and tag bytes ([`Iface::l2_len`], [`Iface::tags`])
/// of an interface with these tags.
pub fn l2_of(vlan: Option<u16>, inner: Option<u16>, tpid: crate::spec::Tpid) -> (u8, [u8; 8]) {
    let mut tags = [0u8; 8];
    let Some(outer) = vlan else {
        return (14, tags);
    };
    tags[..2].copy_from_slice(&tpid.value().to_be_bytes());
    tags[2..4].copy_from_slice(&(outer & 0x0fff).to_be_bytes());
    let Some(inner) = inner else {
        return (18, tags);
    };
    tags[4..6].copy_from_slice(&0x8100u16.to_be_bytes());
    tags[6..].copy_from_slice(&(inner & 0x0fff).to_be_bytes());
    (22, tags)
}

/// A MAC of a link-local control group: 01:00:5e:00:00:xx (224.0.0.0/24,
/// RFC 1112 §6.4) or 33:33:00:00:xx:xx (ff02::/112, RFC 2464 §7).
#[inline]
pub(crate) fn control_group_mac(m: EthernetAddress) -> bool {
    let b = m.0;
    (b[..5] == [0x01, 0x00, 0x5e, 0x00, 0x00]) || (b[..4] == [0x33, 0x33, 0x00, 0x00])
}

impl Iface {
    /// The names of its rule lists.
    pub fn filter_names(&self) -> IfaceFilters {
        let name = |f: &Option<Arc<Filter>>| f.as_ref().map(|f| f.name().to_string());
        IfaceFilters {
            input: name(&self.filter_in),
            output: name(&self.filter_out),
        }
    }

    /// The address ICMP errors and ARP requests leave from: the one whose
    /// subnet covers `toward`, else the first.
    pub fn source4(&self, toward: Ipv4Addr) -> Option<Ipv4Addr> {
        self.addrs4
            .iter()
            .find(|(a, l)| same_subnet4(*a, toward, *l))
            .or(self.addrs4.first())
            .map(|(a, _)| *a)
    }

    /// The IPv6 source toward `toward`: link-local for link-local
    /// destinations, else a global address whose subnet covers it, else the first global.
    pub fn source6(&self, toward: Ipv6Addr) -> Option<Ipv6Addr> {
        if wire6::is_link_local(&toward) {
            return self.link_local();
        }
        let global = || self.addrs6.iter().find(|(a, _)| !wire6::is_link_local(a));
        self.addrs6
            .iter()
            .find(|(a, l)| !wire6::is_link_local(a) && same_subnet6(*a, toward, *l))
            .or_else(global)
            .map(|(a, _)| *a)
            .or_else(|| self.link_local())
    }

    /// The interface's link-local address, if it has IPv6.
    pub fn link_local(&self) -> Option<Ipv6Addr> {
        self.addrs6
            .iter()
            .find(|(a, _)| wire6::is_link_local(a))
            .map(|(a, _)| *a)
    }

    /// True when `addr` is one of this interface's IPv6 addresses.
    pub fn owns6(&self, addr: &Ipv6Addr) -> bool {
        self.addrs6.iter().any(|(a, _)| a == addr)
    }

    /// True when `addr` is one of this interface's IPv4 addresses.
    pub fn owns4(&self, addr: &Ipv4Addr) -> bool {
        self.addrs4.iter().any(|(a, _)| a == addr)
    }

    /// True when some IPv4 subnet of the interface covers `addr`.
    pub fn on_link4(&self, addr: Ipv4Addr) -> bool {
        self.addrs4.iter().any(|(a, l)| same_subnet4(*a, addr, *l))
    }

    /// True when some IPv6 subnet of the interface (link-local included) covers `addr`.
    pub fn on_link6(&self, addr: Ipv6Addr) -> bool {
        self.addrs6.iter().any(|(a, l)| same_subnet6(*a, addr, *l))
    }
}

pub(crate) fn same_subnet4(a: Ipv4Addr, b: Ipv4Addr, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32))
    };
    u32::from(a) & mask == u32::from(b) & mask
}

pub(crate) fn same_subnet6(a: Ipv6Addr, b: Ipv6Addr, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128))
    };
    u128::from(a) & mask == u128::from(b) & mask
}

/// The modified EUI-64 link-local address for a MAC (RFC 4291 §2.5.1, App. A).
pub fn link_local_from_mac(mac: EthernetAddress) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

/// A port at run time.
#[derive(Clone)]
pub(crate) struct Port {
    pub name: String,
    pub mtu: u16,
    /// VLAN ID (0 = untagged or priority-tagged) → interface.
    pub demux: Box<[u16]>,
    /// QinQ: (outer VLAN << 12 | inner VLAN) → interface.
    pub qinq: std::collections::HashMap<u32, u16>,
}

/// The key of a QinQ interface in [`Port::qinq`].
#[inline]
pub(crate) fn qinq_key(outer: u16, inner: u16) -> u32 {
    u32::from(outer & 0x0fff) << 12 | u32::from(inner & 0x0fff)
}

/// Marks "no interface" in a port's VLAN demux table.
pub(crate) const NO_IFACE: u16 = u16::MAX;
