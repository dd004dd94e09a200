//! Local delivery: echo answered in the worker, everything else punted.
//!
//! ICMP and ICMPv6 echo requests to the VR's own unicast addresses are
//! turned around in place (RFC 1122 §3.2.2.6, RFC 4443 §4.2). NDP goes to
//! [`crate::ndp`]. Anything else addressed to the router goes on the VR's
//! bounded punt queue for its control plane: TCP and UDP (BGP, BFD, SSH),
//! OSPF and other protocols, fragments, every other ICMP / ICMPv6 message
//! (echo replies to the control plane's own pings, errors, router
//! solicitations and advertisements, MLD), and what
//! [`crate::ipv4_input`] / [`crate::ipv6_input`] send here for link-local
//! multicast groups (224.0.0.0/24, ff02::/16) and the limited broadcast.
//!
//! For a VR with a control plane ([`crate::spec::Limits::control_plane`])
//! the ARP and NDP messages the worker consumes are also copied to it
//! ([`Ctx::punt_copy`]), so the tenant's kernel learns its neighbors.

use std::net::IpAddr;

use vrhost_wire::checksum;
use vrhost_wire::icmpv4::{Icmpv4Message, Icmpv4Packet};
use vrhost_wire::icmpv6::{Icmpv6Message, Icmpv6Packet};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv4::Ipv4Packet;
use vrhost_wire::ipv6::{walk_extension_headers, Ipv6Packet};

use crate::drop_reason::DropReason;
use crate::mbuf::Mbuf;
use crate::ndp;
use crate::output::Ctx;
use crate::worker::Vr;

/// An IPv4 packet to one of the VR's own addresses.
pub(crate) fn v4(ctx: &mut Ctx<'_>, vr: &mut Vr, mut m: Mbuf) {
    let pkt = Ipv4Packet::new_unchecked(m.l3());
    let hlen = pkt.header_len() as usize;
    let fragmented = pkt.more_frags() || pkt.frag_offset() != 0;
    if pkt.protocol() != IpProtocol::Icmp || fragmented {
        return ctx.punt(vr, m);
    }
    let Ok(icmp) = Icmpv4Packet::new_checked(pkt.payload()) else {
        return ctx.drop(m, DropReason::BadLocal);
    };
    if icmp.msg_type() != Icmpv4Message::EchoRequest {
        return ctx.punt(vr, m);
    }
    if !icmp.verify_checksum() {
        return ctx.drop(m, DropReason::BadLocal);
    }
    let src = pkt.src_addr();
    let dst = pkt.dst_addr();
    ctx.iface_counters(m.iface).local.inc();
    // Turn the request around: the reply leaves from the address that was
    // pinged, with a fresh TTL; the ICMP checksum changes only by the type word.
    {
        let l3 = m.l3_mut();
        let mut ip = Ipv4Packet::new_unchecked(&mut l3[..]);
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_ttl(64);
        ip.fill_checksum();
        let mut icmp = Icmpv4Packet::new_unchecked(&mut l3[hlen..]);
        let old = u16::from_be_bytes([u8::from(Icmpv4Message::EchoRequest), icmp.msg_code()]);
        let new = u16::from_be_bytes([u8::from(Icmpv4Message::EchoReply), icmp.msg_code()]);
        icmp.set_msg_type(Icmpv4Message::EchoReply);
        let sum = checksum::update_u16(icmp.checksum(), old, new);
        icmp.set_checksum(sum);
    }
    m.local_origin = true;
    ctx.route_local(vr, m, IpAddr::V4(src));
}

/// An IPv6 packet for the router (own address or a link-scope group).
pub(crate) fn v6(ctx: &mut Ctx<'_>, vr: &mut Vr, mut m: Mbuf) {
    let pkt = Ipv6Packet::new_unchecked(m.l3());
    let Ok(walk) = walk_extension_headers(pkt.next_header(), pkt.payload()) else {
        return ctx.drop(m, DropReason::Ipv6BadExtension);
    };
    if walk.upper != IpProtocol::Icmpv6 || walk.fragment.is_some() {
        return ctx.punt(vr, m);
    }
    let src = pkt.src_addr();
    let dst = pkt.dst_addr();
    let hop_limit = pkt.hop_limit();
    let Some(Ok(icmp)) = pkt
        .payload()
        .get(walk.offset..)
        .map(Icmpv6Packet::new_checked)
    else {
        return ctx.drop(m, DropReason::BadLocal);
    };
    if !icmp.verify_checksum(&src, &dst) {
        return ctx.drop(m, DropReason::BadLocal);
    }
    match icmp.msg_type() {
        Icmpv6Message::NeighborSolicit => ndp::solicit(ctx, vr, m, walk.offset),
        Icmpv6Message::NeighborAdvert => ndp::advert(ctx, vr, m, walk.offset),
        Icmpv6Message::EchoRequest if !dst.is_multicast() && walk.offset == 0 => {
            ctx.iface_counters(m.iface).local.inc();
            let l3 = m.l3_mut();
            let mut ip = Ipv6Packet::new_unchecked(&mut l3[..]);
            ip.set_src_addr(dst);
            ip.set_dst_addr(src);
            ip.set_hop_limit(64);
            let mut icmp = Icmpv6Packet::new_unchecked(&mut l3[40..]);
            icmp.set_msg_type(Icmpv6Message::EchoReply);
            icmp.fill_checksum(&dst, &src);
            let _ = hop_limit;
            m.local_origin = true;
            ctx.route_local(vr, m, IpAddr::V6(src));
        }
        _ => ctx.punt(vr, m),
    }
}
