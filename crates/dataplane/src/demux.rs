//! Demux: (port, VLAN) → interface → VR, then the L2 accept check.

use vrhost_wire::ethernet::{EtherType, EthernetAddress, EthernetFrame};
use vrhost_wire::vlan::VlanHeader;

use crate::drop_reason::DropReason;
use crate::iface::{qinq_key, NO_IFACE};
use crate::iface::{Iface, Port};
use crate::mbuf::Mbuf;
use crate::spec::Tpid;

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
    let outer_tpid = u16::from(eth.ethertype());
    let Some(port) = ports.get(m.port as usize) else {
        return Next::Drop(DropReason::NoInterface);
    };
    // No tag, one (TPID 0x8100 or 0x88a8), or two (QinQ: the inner TPID is
    // 0x8100). VID 0 is a priority tag: the frame belongs to the untagged
    // interface (802.1Q §9.6).
    let (iface, l3_off, ethertype) = match Tpid::of(outer_tpid) {
        None => (port.demux[0], 14u16, eth.ethertype()),
        Some(tpid) => {
            let Some(tag) = data.get(14..18) else {
                return Next::Drop(DropReason::TruncatedL2);
            };
            let tag = VlanHeader::new_unchecked(tag);
            let vid = tag.vlan_id() & 0x0fff;
            let found = match tag.ethertype() {
                EtherType::Vlan => {
                    let Some(inner) = data.get(18..22) else {
                        return Next::Drop(DropReason::TruncatedL2);
                    };
                    let inner = VlanHeader::new_unchecked(inner);
                    let found = port.qinq.get(&qinq_key(vid, inner.vlan_id()));
                    match found {
                        Some(&i) => (i, 22u16, inner.ethertype()),
                        None => (NO_IFACE, 22, inner.ethertype()),
                    }
                }
                inner => (port.demux[usize::from(vid)], 18, inner),
            };
            // The tag must be the interface's: a 0x88a8 frame never lands
            // on an 802.1Q interface, nor the other way round.
            match ifaces.get(usize::from(found.0)) {
                Some(i) if vid != 0 && i.tpid != tpid => {
                    return Next::Drop(DropReason::NoInterface)
                }
                _ => found,
            }
        }
    };
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
