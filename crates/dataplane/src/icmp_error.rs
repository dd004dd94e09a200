//! ICMP and ICMPv6 error messages, built in the worker.
//!
//! The offending packet is always dropped with the caller's reason; the
//! error is sent only when RFC 1812 §4.3.2.7 / RFC 4443 §2.4(e) allow it,
//! the VR's rate limit has a token, and the ingress interface has an address
//! to send it from (which is its source).

use std::net::{IpAddr, Ipv4Addr};

use vrhost_wire::icmpv4::{self, Icmpv4Message, Icmpv4Packet, Icmpv4Repr};
use vrhost_wire::icmpv6::{Icmpv6Message, Icmpv6Repr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use vrhost_wire::ipv6::{walk_extension_headers, Ipv6Packet};

use crate::drop_reason::DropReason;
use crate::mbuf::Mbuf;
use crate::output::{build_icmpv6, Ctx};
use crate::worker::Vr;

/// An ICMPv4 error to answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Icmp4 {
    /// Type 3 with a code; `mtu` only for code 4 (RFC 1191).
    DstUnreachable { code: u8, mtu: u16 },
    /// Type 11 code 0.
    TtlExceeded,
}

/// An ICMPv6 error to answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Icmp6 {
    /// Type 1 with a code.
    DstUnreachable { code: u8 },
    /// Type 2 (RFC 4443 §3.2).
    PacketTooBig { mtu: u32 },
    /// Type 3 code 0.
    HopLimitExceeded,
}

/// True for sources an ICMP error may be sent to (RFC 1812 §4.3.2.7): not
/// 0/8, 127/8, multicast, class E or limited broadcast.
pub(crate) fn unicast_source4(a: Ipv4Addr) -> bool {
    let o = a.octets()[0];
    o != 0 && o != 127 && o < 224
}

/// Drops `m` for `reason` and, where allowed, answers with `err`.
pub(crate) fn send_v4(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, err: Icmp4, reason: DropReason) {
    let ingress = m.iface;
    let pkt = Ipv4Packet::new_unchecked(m.l3());
    let l2_dst = m.data()[0] & 1 == 1; // broadcast or multicast frame
    let src = pkt.src_addr();
    let dst = pkt.dst_addr();
    let first_fragment = pkt.frag_offset() == 0;
    let is_icmp_error = pkt.protocol() == IpProtocol::Icmp
        && first_fragment
        && pkt
            .payload()
            .first()
            .is_some_and(|t| icmpv4::is_error(Icmpv4Message::from(*t)));
    // RFC 1812 §4.3.2.7: never answer an ICMP error, a non-first fragment, a
    // link-layer or IP broadcast/multicast, or a source that is not unicast.
    if is_icmp_error
        || !first_fragment
        || l2_dst
        || dst.is_broadcast()
        || dst.is_multicast()
        || !unicast_source4(src)
    {
        ctx.iface_counters(ingress).icmp_suppressed.inc();
        return ctx.drop(m, reason);
    }
    let Some(from) = ctx
        .ifaces
        .get(usize::from(ingress))
        .and_then(|i| i.source4(src))
    else {
        ctx.iface_counters(ingress).icmp_no_source.inc();
        return ctx.drop(m, reason);
    };
    if !vr.icmp_bucket.take(ctx.now) {
        ctx.iface_counters(ingress).icmp_rate_limited.inc();
        return ctx.drop(m, reason);
    }
    // RFC 792: the IP header plus the first 8 bytes of its payload.
    let quote_len = (pkt.header_len() as usize + 8).min(pkt.total_len() as usize);
    let quote = &m.l3()[..quote_len];
    let icmp = match err {
        Icmp4::DstUnreachable { code, mtu } => Icmpv4Repr::DstUnreachable {
            code,
            next_hop_mtu: mtu,
            data: quote,
        },
        Icmp4::TtlExceeded => Icmpv4Repr::TimeExceeded {
            code: icmpv4::time_exceeded_code::TTL_EXCEEDED,
            data: quote,
        },
    };
    let ip = Ipv4Repr {
        src_addr: from,
        dst_addr: src,
        protocol: IpProtocol::Icmp,
        payload_len: icmp.buffer_len(),
        ttl: 64,
        // RFC 1812 §4.3.2.5: ICMP errors carry precedence 6 (internetwork control).
        dscp_ecn: 0xc0,
        ident: 0,
        dont_frag: false,
    };
    let mut e = ctx.new_local(ip.buffer_len() + icmp.buffer_len(), &m);
    {
        let l3 = e.l3_mut();
        let (hdr, rest) = l3.split_at_mut(ip.buffer_len());
        icmp.emit(&mut Icmpv4Packet::new_unchecked(rest));
        ip.emit(&mut Ipv4Packet::new_unchecked(hdr));
    }
    ctx.iface_counters(ingress).icmp_errors.inc();
    ctx.drop(m, reason);
    ctx.route_local(vr, e, IpAddr::V4(src));
}

/// Drops `m` for `reason` and, where allowed, answers with `err`.
pub(crate) fn send_v6(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, err: Icmp6, reason: DropReason) {
    let ingress = m.iface;
    let pkt = Ipv6Packet::new_unchecked(m.l3());
    let src = pkt.src_addr();
    let dst = pkt.dst_addr();
    let l2_multi = m.data()[0] & 1 == 1;
    let walk = walk_extension_headers(pkt.next_header(), pkt.payload()).ok();
    let non_first = walk
        .as_ref()
        .is_some_and(|w| w.fragment.is_some_and(|f| f.offset != 0));
    let is_icmp_error = walk.as_ref().is_some_and(|w| {
        w.upper == IpProtocol::Icmpv6
            && pkt
                .payload()
                .get(w.offset)
                .is_some_and(|t| Icmpv6Message::from(*t).is_error())
    });
    // RFC 4443 §2.4(e): Packet Too Big may answer a multicast destination; nothing else may.
    let multicast_ok = matches!(err, Icmp6::PacketTooBig { .. });
    if is_icmp_error
        || non_first
        || ((l2_multi || dst.is_multicast()) && !multicast_ok)
        || src.is_unspecified()
        || src.is_multicast()
        || src.is_loopback()
    {
        ctx.iface_counters(ingress).icmp_suppressed.inc();
        return ctx.drop(m, reason);
    }
    let Some(from) = ctx
        .ifaces
        .get(usize::from(ingress))
        .and_then(|i| i.source6(src))
    else {
        ctx.iface_counters(ingress).icmp_no_source.inc();
        return ctx.drop(m, reason);
    };
    if !vr.icmp_bucket.take(ctx.now) {
        ctx.iface_counters(ingress).icmp_rate_limited.inc();
        return ctx.drop(m, reason);
    }
    // RFC 4443 §2.4(c): as much of the packet as fits in the minimum MTU.
    let max_quote = 1280 - 40 - 8;
    let quote_len = (40 + pkt.payload_len() as usize).min(max_quote);
    let quote = &m.l3()[..quote_len];
    let icmp = match err {
        Icmp6::DstUnreachable { code } => Icmpv6Repr::DstUnreachable { code, data: quote },
        Icmp6::PacketTooBig { mtu } => Icmpv6Repr::PacketTooBig { mtu, data: quote },
        Icmp6::HopLimitExceeded => Icmpv6Repr::TimeExceeded {
            code: 0,
            data: quote,
        },
    };
    let mut e = ctx.new_local(0, &m);
    build_icmpv6(&mut e, from, src, 64, &icmp);
    ctx.iface_counters(ingress).icmp_errors.inc();
    ctx.drop(m, reason);
    ctx.route_local(vr, e, IpAddr::V6(src));
}
