//! Forwarding: TTL / hop limit, MTU, then neighbor output.
//!
//! RFC 1812 §5.3.1 (TTL), §5.2.6 / RFC 1191 (fragmentation and DF),
//! RFC 8200 §3 (hop limit) and §5 with RFC 8201 (IPv6 never fragments in transit).
//!
//! A super-frame ([`crate::offload`]) is forwarded whole, and held against
//! the egress MTU by its longest segment, as Linux does
//! (`skb_gso_validate_network_len`): the link cuts it later.

use std::net::IpAddr;

use vrhost_wire::ethernet::EtherType;
use vrhost_wire::ipv4::Ipv4Packet;
use vrhost_wire::ipv6::Ipv6Packet;

use crate::drop_reason::DropReason;
use crate::fragment;
use crate::icmp_error::{self, Icmp4, Icmp6};
use crate::mbuf::{Gso, Mbuf};
use crate::offload;
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
    // Next hops published before the topology that has their interface
    // (or after it lost it) name one this worker lacks: dropped, counted.
    let Some(out) = ctx.ifaces.get(usize::from(egress)) else {
        return ctx.drop(m, DropReason::NoInterface);
    };
    // The egress interface's rule list, on the whole packet (before any
    // fragmenting): a denied packet is dropped, never answered.
    if let Some(f) = &out.filter_out {
        let pcp = crate::filter::pcp_of(m.data(), m.l3_off as usize);
        if !f.permits4(ctx.counters.index, m.l3(), pcp) {
            return ctx.drop(m, DropReason::Filtered);
        }
    }
    let mtu = out.mtu;
    if wire_len(&m, usize::from(pkt.total_len())) > usize::from(mtu) {
        if pkt.dont_frag() {
            // RFC 1191 §4: Fragmentation Needed carries the next-hop MTU.
            let err = Icmp4::DstUnreachable { code: 4, mtu };
            return icmp_error::send_v4(ctx, vr, m, err, DropReason::MtuExceeded);
        }
        if m.offload.gso != Gso::None {
            return segment_and_fragment(ctx, vr, m, egress, via, mtu);
        }
        // Fragments carry no offload state: the checksum is finished first.
        if !offload::complete(&mut m) {
            return ctx.drop(m, DropReason::FragmentFailed);
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
    // An interface this worker lacks, as for IPv4.
    let Some(out) = ctx.ifaces.get(usize::from(egress)) else {
        return ctx.drop(m, DropReason::NoInterface);
    };
    if let Some(f) = &out.filter_out {
        let pcp = crate::filter::pcp_of(m.data(), m.l3_off as usize);
        if !f.permits6(ctx.counters.index, m.l3(), pcp, false) {
            return ctx.drop(m, DropReason::Filtered);
        }
    }
    let mtu = out.mtu;
    if wire_len(&m, 40 + pkt.payload_len() as usize) > mtu as usize {
        // RFC 8200 §5: routers never fragment; RFC 4443 §3.2 Packet Too Big.
        let err = Icmp6::PacketTooBig { mtu: mtu as u32 };
        return icmp_error::send_v6(ctx, vr, m, err, DropReason::MtuExceeded);
    }
    let mut w = Ipv6Packet::new_unchecked(m.l3_mut());
    let hl = w.hop_limit();
    w.set_hop_limit(hl - 1);
    ctx.output_via(vr, m, egress, via, EtherType::Ipv6);
}

/// The L3 length `m` is held against the egress MTU by: `total` for a
/// plain packet, its longest segment for a super-frame (all of `total`
/// when its headers do not parse, so that it is refused rather than sent).
#[inline]
fn wire_len(m: &Mbuf, total: usize) -> usize {
    if m.offload.gso == Gso::None {
        return total;
    }
    offload::segment_len(m.l3(), &m.offload).unwrap_or(total)
}

/// An IPv4 super-frame without DF whose segments exceed the egress MTU:
/// cut into its segments (checksums finished), each fragmented as any
/// packet would be (RFC 1812 §5.2.6). Rare (Linux senders set DF on TCP),
/// so the segments are gathered in a vector of their own.
fn segment_and_fragment(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, egress: u16, via: Via, mtu: u16) {
    let l3_off = usize::from(m.l3_off);
    let mut segs = Vec::new();
    let made = offload::segment(
        &m.data()[..l3_off],
        m.l3(),
        &m.offload,
        1,
        true,
        ctx.pool,
        |mut s| {
            s.port = m.port;
            s.iface = m.iface;
            segs.push(s);
        },
    );
    if made.is_err() {
        return ctx.drop(m, DropReason::FragmentFailed);
    }
    ctx.pool.put(m);
    for mut s in segs {
        if Ipv4Packet::new_unchecked(s.l3()).total_len() > mtu {
            fragment::v4(ctx, vr, s, egress, via, mtu);
        } else {
            Ipv4Packet::new_unchecked(s.l3_mut()).decrement_ttl();
            ctx.output_via(vr, s, egress, via, EtherType::Ipv4);
        }
    }
}
