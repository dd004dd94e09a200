//! IPv6 input: validation, scope rules, and the routing decision (RFC 8200, RFC 4291).

use std::net::Ipv6Addr;

use vrhost_wire::ipv6::{self as wire6, Ipv6Packet};
use vrhost_wire::Error as WireError;

use crate::drop_reason::DropReason;
use crate::icmp_error::Icmp6;
use crate::iface::Iface;
use crate::mbuf::Mbuf;
use crate::spec::Urpf;
use crate::urpf;
use crate::worker::{NextHop, Vr};

/// Where an IPv6 packet goes after input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Toward a neighbor: an attached host or a gateway.
    Forward(NextHop),
    /// To the router: one of its addresses or a link-scope group it listens to.
    Local,
    /// Dropped, answered with an ICMPv6 error.
    Icmp(Icmp6, DropReason),
    /// Dropped silently.
    Drop(DropReason),
}

/// Multicast groups the router listens to on an interface: link-scope
/// (ff02::/16) groups, which carry NDP, MLD and routing protocols (RFC 4291 §2.7).
fn link_scope_group(a: &Ipv6Addr) -> bool {
    a.segments()[0] == 0xff02
}

/// `iface` is the ingress interface, whose reverse-path check and
/// `filter_in` apply (counted in worker `worker`'s row).
#[inline]
pub(crate) fn process(vr: &mut Vr, (iface, worker): (&Iface, usize), m: &mut Mbuf) -> Next {
    let l3_off = m.l3_off as usize;
    let pkt = match Ipv6Packet::new_checked(m.l3()) {
        Ok(p) => p,
        Err(WireError::Malformed) if m.l3().first().is_some_and(|b| b >> 4 != 6) => {
            return Next::Drop(DropReason::Ipv6BadVersion)
        }
        Err(_) => return Next::Drop(DropReason::Ipv6Truncated),
    };
    let payload_len = pkt.payload_len() as usize;
    let src = pkt.src_addr();
    let dst = pkt.dst_addr();
    // RFC 4291 §2.7, §2.5.3: never from a multicast or loopback source,
    // never to loopback or the unspecified address.
    if src.is_multicast() || src.is_loopback() || dst.is_loopback() || dst.is_unspecified() {
        return Next::Drop(DropReason::Ipv6MartianAddress);
    }
    // RFC 3704, for sources that can be routed: link-local and unspecified
    // ones (neighbor discovery, DAD) stay on their link and are not checked.
    if iface.urpf != Urpf::Off
        && !src.is_unspecified()
        && !wire6::is_link_local(&src)
        && !urpf::passes(iface.urpf, vr.source_route6(src), &vr.nexthops, m.iface)
    {
        return Next::Drop(DropReason::Urpf);
    }
    m.truncate(l3_off + 40 + payload_len);
    // The interface's rule list. Neighbor discovery for the router or its
    // link passes it (RFC 4890 §4.4.1); the list checks the hop limit.
    if let Some(f) = &iface.filter_in {
        let pcp = crate::filter::pcp_of(m.data(), l3_off);
        let nd = wire6::is_link_local(&dst) || link_scope_group(&dst) || iface.owns6(&dst);
        if !f.permits6(worker, m.l3(), pcp, nd) {
            return Next::Drop(DropReason::Filtered);
        }
    }
    if dst.is_multicast() {
        // Link-scope groups are for the router; it routes no multicast.
        return if link_scope_group(&dst) {
            Next::Local
        } else {
            Next::Drop(DropReason::MulticastNotRouted)
        };
    }
    let nh = vr.lookup6(dst, || {
        crate::ecmp::flow6_of(m.data().get(l3_off..).unwrap_or(&[]))
    });
    if nh == Some(NextHop::Local) {
        // Link-local addresses are only ours on their own link (RFC 4291 §2.5.6).
        if wire6::is_link_local(&dst) && !iface.owns6(&dst) {
            return Next::Drop(DropReason::Ipv6LinkLocalNotForwarded);
        }
        return Next::Local;
    }
    // The unspecified source is only for DAD, which is local traffic (RFC 4862 §5.4.2).
    if src.is_unspecified() {
        return Next::Drop(DropReason::Ipv6MartianAddress);
    }
    if wire6::is_link_local(&dst) {
        return Next::Drop(DropReason::Ipv6LinkLocalNotForwarded);
    }
    if wire6::is_link_local(&src) {
        // RFC 4443 §3.1 code 2: beyond scope of source address.
        return Next::Icmp(
            Icmp6::DstUnreachable { code: 2 },
            DropReason::Ipv6LinkLocalNotForwarded,
        );
    }
    match nh {
        Some(nh @ (NextHop::Connected { .. } | NextHop::Gateway { .. })) => Next::Forward(nh),
        Some(NextHop::Blackhole) => Next::Drop(DropReason::Blackhole),
        // RFC 4443 §3.1 code 6: reject route to destination.
        Some(NextHop::Unreachable) => {
            Next::Icmp(Icmp6::DstUnreachable { code: 6 }, DropReason::Unreachable)
        }
        Some(NextHop::Local) | Some(NextHop::Broadcast) => {
            Next::Drop(DropReason::Ipv6MartianAddress)
        }
        // RFC 4443 §3.1 code 0: no route to destination (a group is never
        // left unpicked by the lookup).
        None | Some(NextHop::Group { .. }) => {
            Next::Icmp(Icmp6::DstUnreachable { code: 0 }, DropReason::NoRoute)
        }
    }
}
