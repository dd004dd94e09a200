//! The frames between a VR interface and its TAP mirror in the tenant's
//! control-plane namespace, built on the `wire` views.
//!
//! * Out ([`untagged_copy`]): a punted frame goes to the TAP as the
//!   tenant's kernel sees the interface, untagged.
//! * In ([`judge`], then [`tag_for_port`]): a frame the kernel sends is
//!   checked (short, oversized and VLAN-tagged frames are refused, and ARP
//!   replies or neighbor advertisements for the interface's own addresses
//!   are dropped as duplicates of the data plane's own answers), then given
//!   the interface's MAC as source (the tenant cannot send as anybody
//!   else) and its 802.1Q tag, in place.
//!
//! Every function here takes arbitrary bytes without panicking
//! (`tests/tap_frames.rs`).

use std::net::Ipv4Addr;

use vrhost_wire::arp::{ArpPacket, Operation};
use vrhost_wire::ethernet::{EtherType, EthernetFrame};
use vrhost_wire::icmpv6::{Icmpv6Message, Icmpv6Packet, NdiscRepr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv6::Ipv6Packet;
use vrhost_wire::vlan::VlanHeader;

use crate::iface::Iface;
use crate::mbuf::Mbuf;

/// What to do with a frame the kernel sent on an interface's TAP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit it.
    Send,
    /// An ARP reply or neighbor advertisement for one of the interface's
    /// own addresses: the worker already answered; drop it.
    Duplicate,
    /// Short, oversized or VLAN-tagged: drop it.
    Bad,
    /// Its interface, or its VR, was deleted: nothing of it may reach a
    /// port again (the port and VLAN may be another tenant's by now).
    Detached,
    /// Over the VR's rate ceiling or fair share: dropped and counted on the
    /// interface (`rate-ceiling`, `over-share`).
    Limited,
}

/// Judges `frame`, sent by the kernel on the TAP mirror of `iface`.
pub fn judge(iface: &Iface, frame: &[u8]) -> Verdict {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Verdict::Bad;
    };
    if frame.len() > 14 + usize::from(iface.mtu) {
        return Verdict::Bad;
    }
    match eth.ethertype() {
        // The TAP is the untagged interface; a VLAN on top of it is not ours.
        EtherType::Vlan | EtherType::QinQ => Verdict::Bad,
        EtherType::Arp => match ArpPacket::new_checked(eth.payload()) {
            Ok(arp) if arp.operation() == Operation::Reply => {
                match <[u8; 4]>::try_from(arp.source_protocol_addr()) {
                    Ok(spa) if iface.owns4(&Ipv4Addr::from(spa)) => Verdict::Duplicate,
                    _ => Verdict::Send,
                }
            }
            _ => Verdict::Send,
        },
        EtherType::Ipv6 => {
            let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) else {
                return Verdict::Send;
            };
            if ip.next_header() != IpProtocol::Icmpv6 {
                return Verdict::Send;
            }
            let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else {
                return Verdict::Send;
            };
            if icmp.msg_type() != Icmpv6Message::NeighborAdvert {
                return Verdict::Send;
            }
            match NdiscRepr::parse(&icmp) {
                Ok(NdiscRepr::NeighborAdvert { target_addr, .. }) if iface.owns6(&target_addr) => {
                    Verdict::Duplicate
                }
                _ => Verdict::Send,
            }
        }
        _ => Verdict::Send,
    }
}

/// Fills `out` with the frame of `m` as the TAP carries it: without the
/// 802.1Q tag it arrived with (`m.l3_off == 18`), unchanged otherwise.
pub fn untagged_copy(m: &Mbuf, out: &mut Mbuf) {
    let d = m.data();
    if m.l3_off == 18 && d.len() >= 18 {
        let o = out.set_len_from_start(d.len() - 4);
        o[..12].copy_from_slice(&d[..12]);
        o[12..].copy_from_slice(&d[16..]);
    } else {
        out.fill(d);
    }
}

/// Readies a frame the kernel sent on the TAP of `iface` (judged
/// [`Verdict::Send`]) for the interface's port: the interface's MAC as
/// source, and its 802.1Q tag pushed in front of the EtherType (PCP 0,
/// DEI 0) when it has a VLAN. Sets `l3_off`. False, with the frame
/// unchanged, when it is too short or there is no headroom for the tag.
pub fn tag_for_port(iface: &Iface, m: &mut Mbuf) -> bool {
    if m.len() < 14 {
        return false;
    }
    let Some(vid) = iface.vlan else {
        EthernetFrame::new_unchecked(m.data_mut()).set_src_addr(iface.mac);
        m.l3_off = 14;
        return true;
    };
    if !m.adjust_head(-4) {
        return false;
    }
    let d = m.data_mut();
    // The MACs move to the front; the EtherType stays where the tag ends.
    d.copy_within(4..16, 0);
    let inner = EtherType::from(u16::from_be_bytes([d[16], d[17]]));
    let mut eth = EthernetFrame::new_unchecked(&mut d[..]);
    eth.set_src_addr(iface.mac);
    eth.set_ethertype(EtherType::Vlan);
    let mut tag = VlanHeader::new_unchecked(&mut d[14..18]);
    tag.set_pcp(0);
    tag.set_dei(false);
    tag.set_vlan_id(vid & 0x0fff);
    tag.set_ethertype(inner);
    m.l3_off = 18;
    true
}
