//! Neighbor Discovery in the worker (RFC 4861 §7): answer solicitations for
//! the interface's addresses, learn from solicitations and advertisements.
//!
//! A VR with a control plane also gets a copy of the solicitations for its
//! addresses and of the advertisements it receives ([`Ctx::punt_copy`]),
//! so its kernel learns neighbours; the runtime drops the advertisements
//! the TAP sends for the VR's own addresses (the worker already answered).

use std::net::{IpAddr, Ipv6Addr};

use vrhost_wire::ethernet::{self, EtherType};
use vrhost_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr, NdiscNeighborFlags, NdiscRepr};
use vrhost_wire::ipv6::{self as wire6, Ipv6Packet};

use crate::drop_reason::DropReason;
use crate::mbuf::Mbuf;
use crate::output::{build_icmpv6, Ctx};
use crate::worker::Vr;

/// Parses the NDP message at `offset` in the IPv6 payload, checking the
/// validity rules every NDP message shares (RFC 4861 §7.1.1, §7.1.2):
/// hop limit 255 and code 0.
fn parse(m: &Mbuf, offset: usize) -> Option<(Ipv6Addr, Ipv6Addr, NdiscRepr)> {
    let ip = Ipv6Packet::new_unchecked(m.l3());
    if ip.hop_limit() != 255 {
        return None;
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let icmp = Icmpv6Packet::new_checked(ip.payload().get(offset..)?).ok()?;
    if icmp.msg_code() != 0 {
        return None;
    }
    match Icmpv6Repr::parse(&src, &dst, &icmp).ok()? {
        Icmpv6Repr::Ndisc(n) => Some((src, dst, n)),
        _ => None,
    }
}

/// A Neighbor Solicitation: learn the sender, answer for our own target.
pub(crate) fn solicit(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, offset: usize) {
    let Some((
        src,
        dst,
        NdiscRepr::NeighborSolicit {
            target_addr,
            lladdr,
        },
    )) = parse(&m, offset)
    else {
        return ctx.drop(m, DropReason::BadNdp);
    };
    // RFC 4861 §7.1.1: target not multicast; from :: only to a solicited-node
    // group and without a source link-layer option.
    if target_addr.is_multicast()
        || (src.is_unspecified()
            && (lladdr.is_some() || dst != wire6::solicited_node(&target_addr)))
    {
        return ctx.drop(m, DropReason::BadNdp);
    }
    let ingress = m.iface;
    let iface = &ctx.ifaces[ingress as usize];
    if !iface.owns6(&target_addr) {
        return ctx.drop(m, DropReason::NeighborNotForUs);
    }
    let mac = iface.mac;
    // RFC 4861 §7.2.3: a solicitation with a source link-layer address
    // creates or updates the sender's entry as Stale.
    if let (Some(ll), false) = (lladdr, src.is_unspecified()) {
        if iface.on_link6(src) {
            ctx.learn(vr, ingress, IpAddr::V6(src), ll, false);
        }
    }
    ctx.iface_counters(ingress).local.inc();
    ctx.punt_copy(vr, &m);
    // RFC 4861 §7.2.4: answer unicast to the solicitor, or to all-nodes for DAD.
    let dad = src.is_unspecified();
    let mut flags = NdiscNeighborFlags::ROUTER | NdiscNeighborFlags::OVERRIDE;
    if !dad {
        flags |= NdiscNeighborFlags::SOLICITED;
    }
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags,
        target_addr,
        lladdr: Some(mac),
    });
    let reply_dst = if dad { wire6::ALL_NODES } else { src };
    let mut r = ctx.new_local(0, &m);
    build_icmpv6(&mut r, target_addr, reply_dst, 255, &na);
    ctx.pool.put(m);
    match (dad, lladdr) {
        (true, _) => ctx.send(
            r,
            ingress,
            ethernet::ipv6_multicast_mac(&wire6::ALL_NODES),
            EtherType::Ipv6,
        ),
        (false, Some(ll)) => ctx.send(r, ingress, ll, EtherType::Ipv6),
        (false, None) => ctx.output(vr, r, ingress, IpAddr::V6(src)),
    }
}

/// A Neighbor Advertisement: update the entry we have for the target.
pub(crate) fn advert(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, offset: usize) {
    let Some((
        _,
        dst,
        NdiscRepr::NeighborAdvert {
            flags,
            target_addr,
            lladdr,
        },
    )) = parse(&m, offset)
    else {
        return ctx.drop(m, DropReason::BadNdp);
    };
    // RFC 4861 §7.1.2: target not multicast; solicited NAs are not multicast.
    if target_addr.is_multicast()
        || (dst.is_multicast() && flags.contains(NdiscNeighborFlags::SOLICITED))
    {
        return ctx.drop(m, DropReason::BadNdp);
    }
    let ingress = m.iface;
    if ctx.ifaces[ingress as usize].owns6(&target_addr) {
        // Somebody else claims our address (RFC 4862 §5.4.4).
        return ctx.drop(m, DropReason::AddressConflict);
    }
    ctx.iface_counters(ingress).local.inc();
    ctx.punt_copy(vr, &m);
    ctx.pool.put(m);
    // RFC 4861 §7.2.5: only existing entries are updated; no lladdr, nothing to learn.
    if let (Some(ll), Some(_)) = (lladdr, vr.neighbors.find(ingress, IpAddr::V6(target_addr))) {
        ctx.learn(
            vr,
            ingress,
            IpAddr::V6(target_addr),
            ll,
            flags.contains(NdiscNeighborFlags::SOLICITED),
        );
    }
}
