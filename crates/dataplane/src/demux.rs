//! Demux: (port, VLAN) → interface → VR, then the L2 accept check.

use vrhost_wire::ethernet::{EtherType, EthernetAddress, EthernetFrame};
use vrhost_wire::vlan::VlanHeader;

use crate::drop_reason::DropReason;
use crate::iface::NO_IFACE;
use crate::iface::{Iface, Port};
use crate::mbuf::Mbuf;

/// Where a frame goes after demux.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    Arp,
    Ipv4,
    Ipv6,
    Drop(DropReason),
}

/// Finds the frame's interface, sets `m.iface` and `m.l3_off`, and checks
/// that the frame is addressed to it.
#[inline]
pub(crate) fn process(ports: &[Port], ifaces: &[Iface], m: &mut Mbuf) -> Next {
    let data = m.data();
    if data.len() < EthernetFrame::<&[u8]>::HEADER_LEN {
        return Next::Drop(DropReason::TruncatedL2);
    }
    let eth = EthernetFrame::new_unchecked(data);
    let dst = eth.dst_addr();
    let (vlan, l3_off, ethertype) = match eth.ethertype() {
        EtherType::Vlan => {
            if data.len() < 18 {
                return Next::Drop(DropReason::TruncatedL2);
            }
            let tag = VlanHeader::new_unchecked(&data[14..18]);
            // VID 0 is a priority tag: the frame belongs to the untagged interface (802.1Q §9.6).
            (tag.vlan_id(), 18u16, tag.ethertype())
        }
        other => (0, 14u16, other),
    };
    let Some(port) = ports.get(m.port as usize) else {
        return Next::Drop(DropReason::NoInterface);
    };
    let iface = port.demux[(vlan & 0x0fff) as usize];
    if iface == NO_IFACE {
        return Next::Drop(DropReason::NoInterface);
    }
    m.iface = iface;
    m.l3_off = l3_off;
    let i = &ifaces[iface as usize];
    let group_ok = |d: EthernetAddress| {
        i.mcast.contains(&d) || (i.control_mcast && crate::iface::control_group_mac(d))
    };
    if dst != i.mac && !dst.is_broadcast() && !(dst.is_multicast() && group_ok(dst)) {
        return Next::Drop(DropReason::NotForUs);
    }
    match ethertype {
        EtherType::Arp => Next::Arp,
        EtherType::Ipv4 => Next::Ipv4,
        EtherType::Ipv6 => Next::Ipv6,
        _ => Next::Drop(DropReason::UnsupportedEthertype),
    }
}
