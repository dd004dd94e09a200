//! Forwarding: TTL / hop limit, MTU, then neighbor output.
//!
//! RFC 1812 §5.3.1 (TTL), §5.2.6 / RFC 1191 (fragmentation and DF),
//! RFC 8200 §3 (hop limit) and §5 with RFC 8201 (IPv6 never fragments in transit).

use std::net::IpAddr;

use vrhost_wire::ethernet::EtherType;
use vrhost_wire::ipv4::Ipv4Packet;
use vrhost_wire::ipv6::Ipv6Packet;

use crate::drop_reason::DropReason;
use crate::fragment;
use crate::icmp_error::{self, Icmp4, Icmp6};
use crate::mbuf::Mbuf;
use crate::output::{Ctx, Via};
use crate::worker::{NextHop, Vr};

fn split(nh: NextHop, dst: IpAddr) -> Option<(u16, Via)> {
    match nh {
        NextHop::Connected { iface } => Some((iface, Via::Host(dst))),
        NextHop::Gateway { iface, neigh } => Some((iface, Via::Slot(neigh))),
        _ => None,
    }
}

/// Forwards an IPv4 packet that input sent to `nh`.
#[inline]
pub(crate) fn v4(ctx: &mut Ctx<'_>, vr: &mut Vr, mut m: Mbuf, nh: NextHop) {
    let pkt = Ipv4Packet::new_unchecked(m.l3());
    let Some((egress, via)) = split(nh, IpAddr::V4(pkt.dst_addr())) else {
        return ctx.drop(m, DropReason::NoRoute);
    };
    // RFC 1812 §5.3.1: a packet that would leave with TTL 0 is discarded
    // and answered with Time Exceeded.
    if pkt.ttl() <= 1 {
        return icmp_error::send_v4(ctx, vr, m, Icmp4::TtlExceeded, DropReason::TtlExpired);
    }
    // The egress interface's rule list, on the whole packet (before any
    // fragmenting): a denied packet is dropped, never answered.
    if let Some(f) = &ctx.ifaces[egress as usize].filter_out {
        let pcp = crate::filter::pcp_of(m.data(), m.l3_off as usize);
        if !f.permits4(ctx.counters.index, m.l3(), pcp) {
            return ctx.drop(m, DropReason::Filtered);
        }
    }
    let mtu = ctx.ifaces[egress as usize].mtu;
    if pkt.total_len() > mtu {
        if pkt.dont_frag() {
            // RFC 1191 §4: Fragmentation Needed carries the next-hop MTU.
            let err = Icmp4::DstUnreachable { code: 4, mtu };
            return icmp_error::send_v4(ctx, vr, m, err, DropReason::MtuExceeded);
        }
        return fragment::v4(ctx, vr, m, egress, via, mtu);
    }
    Ipv4Packet::new_unchecked(m.l3_mut()).decrement_ttl();
    ctx.output_via(vr, m, egress, via, EtherType::Ipv4);
}

/// Forwards an IPv6 packet that input sent to `nh`.
pub(crate) fn v6(ctx: &mut Ctx<'_>, vr: &mut Vr, mut m: Mbuf, nh: NextHop) {
    let pkt = Ipv6Packet::new_unchecked(m.l3());
    let Some((egress, via)) = split(nh, IpAddr::V6(pkt.dst_addr())) else {
        return ctx.drop(m, DropReason::NoRoute);
    };
    // RFC 8200 §3 / RFC 4443 §3.3.
    if pkt.hop_limit() <= 1 {
        return icmp_error::send_v6(ctx, vr, m, Icmp6::HopLimitExceeded, DropReason::TtlExpired);
    }
    if let Some(f) = &ctx.ifaces[egress as usize].filter_out {
        let pcp = crate::filter::pcp_of(m.data(), m.l3_off as usize);
        if !f.permits6(ctx.counters.index, m.l3(), pcp, false) {
            return ctx.drop(m, DropReason::Filtered);
        }
    }
    let mtu = ctx.ifaces[egress as usize].mtu;
    if 40 + pkt.payload_len() as usize > mtu as usize {
        // RFC 8200 §5: routers never fragment; RFC 4443 §3.2 Packet Too Big.
        let err = Icmp6::PacketTooBig { mtu: mtu as u32 };
        return icmp_error::send_v6(ctx, vr, m, err, DropReason::MtuExceeded);
    }
    let mut w = Ipv6Packet::new_unchecked(m.l3_mut());
    let hl = w.hop_limit();
    w.set_hop_limit(hl - 1);
    ctx.output_via(vr, m, egress, via, EtherType::Ipv6);
}
