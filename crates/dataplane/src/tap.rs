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
/// VLAN tags it arrived with (one when `m.l3_off == 18`, two when 22),
/// unchanged otherwise.
pub fn untagged_copy(m: &Mbuf, out: &mut Mbuf) {
    let d = m.data();
    let tags = match m.l3_off {
        18 => 4,
        22 => 8,
        _ => 0,
    };
    if tags > 0 && d.len() >= 14 + tags {
        let o = out.set_len_from_start(d.len() - tags);
        o[..12].copy_from_slice(&d[..12]);
        o[12..].copy_from_slice(&d[12 + tags..]);
    } else {
        out.fill(d);
    }
    // What the sender left undone goes with it (offsets count from L3, so
    // the tags removed move nothing): the TAP port finishes it.
    out.offload = m.offload;
}

/// Readies a frame the kernel sent on the TAP of `iface` (judged
/// [`Verdict::Send`]) for the interface's port: the interface's MAC as
/// source, and its VLAN tags pushed in front of the EtherType (PCP 0,
/// DEI 0; the outer TPID as configured) when it has any. Sets `l3_off`.
/// False, with the frame unchanged, when it is too short or there is no
/// headroom for the tags.
pub fn tag_for_port(iface: &Iface, m: &mut Mbuf) -> bool {
    if m.len() < 14 {
        return false;
    }
    let l2 = usize::from(iface.l2_len);
    let ethertype = {
        let d = m.data();
        EtherType::from(u16::from_be_bytes([d[12], d[13]]))
    };
    let dst = EthernetFrame::new_unchecked(m.data()).dst_addr();
    if !m.adjust_head(14 - l2 as isize) {
        return false;
    }
    crate::output::write_l2(iface, m.data_mut(), dst, ethertype);
    m.l3_off = l2 as u16;
    true
}
