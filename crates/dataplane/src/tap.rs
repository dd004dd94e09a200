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
//! (`tests/no_panic.rs`).

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mbuf::MbufPool;
    use vrhost_wire::ethernet::EthernetAddress;

    fn iface(vlan: Option<u16>) -> Iface {
        Iface {
            name: "red0".into(),
            vr: 0,
            port: 0,
            vlan,
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            mtu: 1500,
            addrs4: vec![("10.0.0.1".parse().unwrap(), 24)],
            addrs6: vec![("2001:db8::1".parse().unwrap(), 64)],
            mcast: vec![],
            control_mcast: true,
        }
    }

    fn arp(op: u8, spa: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend([2, 0, 0, 0, 0, 9, 0x08, 0x06]);
        f.extend([0, 1, 8, 0, 6, 4, 0, op]);
        f.extend([2, 0, 0, 0, 0, 9]);
        f.extend(spa);
        f.extend([0; 6]);
        f.extend([10, 0, 0, 9]);
        f
    }

    fn na(target: std::net::Ipv6Addr) -> Vec<u8> {
        let mut f = vec![0x33, 0x33, 0, 0, 0, 1, 2, 0, 0, 0, 0, 9, 0x86, 0xdd];
        let mut ip = vec![0x60, 0, 0, 0, 0, 24, 58, 255];
        ip.extend([0; 32]);
        f.extend(ip);
        f.extend([136, 0, 0, 0, 0x20, 0, 0, 0]);
        f.extend(target.octets());
        f
    }

    #[test]
    fn answers_for_own_addresses_are_duplicates() {
        let i = iface(None);
        assert_eq!(judge(&i, &arp(2, [10, 0, 0, 1])), Verdict::Duplicate);
        assert_eq!(judge(&i, &arp(1, [10, 0, 0, 1])), Verdict::Send);
        assert_eq!(judge(&i, &arp(2, [10, 0, 0, 9])), Verdict::Send);
        assert_eq!(
            judge(&i, &na("2001:db8::1".parse().unwrap())),
            Verdict::Duplicate
        );
        assert_eq!(
            judge(&i, &na("2001:db8::9".parse().unwrap())),
            Verdict::Send
        );
    }

    #[test]
    fn short_tagged_and_oversized_frames_are_bad() {
        let i = iface(None);
        assert_eq!(judge(&i, &[0; 13]), Verdict::Bad);
        let mut tagged = arp(1, [10, 0, 0, 9]);
        tagged[12..14].copy_from_slice(&[0x81, 0]);
        assert_eq!(judge(&i, &tagged), Verdict::Bad);
        assert_eq!(judge(&i, &vec![0; 14 + 1501]), Verdict::Bad);
        assert_eq!(judge(&i, &vec![0; 14 + 1500]), Verdict::Send);
    }

    #[test]
    fn a_tag_goes_on_and_comes_off() {
        let mut pool = MbufPool::new(4);
        let frame = arp(1, [10, 0, 0, 9]);
        let mut m = pool.get();
        m.fill(&frame);
        assert!(tag_for_port(&iface(Some(5)), &mut m));
        let d = m.data();
        assert_eq!(d.len(), frame.len() + 4);
        assert_eq!(&d[..6], &frame[..6]);
        assert_eq!(&d[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&d[12..18], &[0x81, 0, 0, 5, 0x08, 0x06]);
        assert_eq!(&d[18..], &frame[14..]);
        assert_eq!(m.l3_off, 18);
        let mut back = pool.get();
        untagged_copy(&m, &mut back);
        let mut expect = frame.clone();
        expect[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        assert_eq!(back.data(), &expect[..]);
    }
}
