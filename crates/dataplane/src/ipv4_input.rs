//! IPv4 input: validation, martian filters, and the routing decision.
//!
//! Walks RFC 1812 §5.2.2 in order, then §5.3.7 / §4.2.2.11 (martians), then
//! looks the destination up in the VR's FIB.

use std::net::Ipv4Addr;

use vrhost_fib::NextHopId;
use vrhost_wire::ipv4::{Ipv4OptionKind, Ipv4Packet};
use vrhost_wire::Error as WireError;

use crate::drop_reason::DropReason;
use crate::icmp_error::Icmp4;
use crate::iface::Iface;
use crate::mbuf::Mbuf;
use crate::spec::Urpf;
use crate::urpf;
use crate::worker::{NextHop, Vr};

/// Where an IPv4 packet goes after input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Toward a neighbor: an attached host or a gateway.
    Forward(NextHop),
    /// To one of the VR's own unicast addresses.
    Local,
    /// Control traffic for the router that is not unicast to it (224.0.0.0/24, limited broadcast).
    Punt,
    /// Dropped, answered with an ICMP error.
    Icmp(Icmp4, DropReason),
    /// Dropped silently.
    Drop(DropReason),
}

/// Link-local multicast block, always for the router's control plane (RFC 5771 §4).
fn link_local_multicast(a: Ipv4Addr) -> bool {
    a.octets()[..3] == [224, 0, 0]
}

/// Whether an address with this first octet lies in 0/8, 127/8 or 224/3
/// (multicast and class E): martian as a source (RFC 1812 §5.3.7,
/// §4.2.2.11). The fast path also leaves destinations there to the full
/// stages.
///
/// A lookup in a 256-entry table: one load where the three comparisons
/// took six instructions, twice per forwarded packet on the fast path.
#[inline(always)]
pub(crate) fn martian_octet(first_octet: u8) -> bool {
    MARTIAN_OCTET[usize::from(first_octet)]
}

/// [`martian_octet`] for every first octet.
static MARTIAN_OCTET: [bool; 256] = {
    let mut t = [false; 256];
    let mut o = 0;
    while o < 256 {
        t[o] = o == 0 || o == 127 || o >= 224;
        o += 1;
    }
    t
};

/// `route` is the FIB's answer for the destination when the burst's batch
/// lookup already has it (`Worker::routes`); `iface` is the ingress
/// interface, whose reverse-path check ([`crate::urpf`]) and `filter_in`
/// ([`crate::filter`]) apply, the latter counted in worker `worker`'s row.
#[inline]
pub(crate) fn process(
    vr: &mut Vr,
    m: &mut Mbuf,
    route: Option<Option<NextHopId>>,
    (iface, worker): (&Iface, usize),
) -> Next {
    let urpf = iface.urpf;
    let l3_off = m.l3_off as usize;
    let pkt = match Ipv4Packet::new_checked(m.l3()) {
        Ok(p) => p,
        // RFC 1812 §5.2.2 (1)-(5): length, version, IHL, total length.
        Err(WireError::Malformed) if m.l3().first().is_some_and(|b| b >> 4 != 4) => {
            return Next::Drop(DropReason::Ipv4BadVersion)
        }
        Err(_) => return Next::Drop(DropReason::Ipv4Truncated),
    };
    // RFC 1812 §5.2.2 (2): the header checksum.
    if !pkt.verify_checksum() {
        return Next::Drop(DropReason::Ipv4BadChecksum);
    }
    let total_len = pkt.total_len() as usize;
    let src = pkt.src_addr();
    let dst = pkt.dst_addr();
    // RFC 1812 §5.3.7 and §4.2.2.11: martian sources.
    if martian_octet(src.octets()[0]) {
        return Next::Drop(DropReason::MartianSource);
    }
    // ... and martian destinations (class E; the limited broadcast is handled below).
    let d = dst.octets()[0];
    if d == 0 || d == 127 || (d >= 240 && !dst.is_broadcast()) {
        return Next::Drop(DropReason::MartianDestination);
    }
    // RFC 3704: the source's route, back through the ingress interface.
    if urpf != Urpf::Off && !urpf::passes(urpf, vr.source_route4(src), &vr.nexthops, m.iface) {
        return Next::Drop(DropReason::Urpf);
    }
    // RFC 1812 §5.2.4: options are processed, not ignored. Source routes are
    // dropped, as RFC 7126 §4.3/§4.4 recommends for routers by default.
    if pkt.header_len() > 20 {
        for opt in pkt.options_iter() {
            match opt {
                Err(_) => return Next::Drop(DropReason::Ipv4BadOptions),
                Ok(o)
                    if matches!(
                        o.kind,
                        Ipv4OptionKind::LooseSourceRoute | Ipv4OptionKind::StrictSourceRoute
                    ) =>
                {
                    return Next::Drop(DropReason::Ipv4BadOptions)
                }
                Ok(_) => {}
            }
        }
    }
    // The interface's rule list, on every packet that passed the checks
    // above: forwarded, for the router, or punted.
    if let Some(f) = &iface.filter_in {
        let pcp = crate::filter::pcp_of(m.data(), l3_off);
        if !f.permits4(worker, m.l3().get(..total_len).unwrap_or(&[]), pcp) {
            return Next::Drop(DropReason::Filtered);
        }
    }
    if dst.is_multicast() {
        return if link_local_multicast(dst) {
            Next::Punt
        } else {
            Next::Drop(DropReason::MulticastNotRouted)
        };
    }
    if dst.is_broadcast() {
        return Next::Punt;
    }
    // Drop Ethernet padding so later stages see exactly the IP packet.
    m.truncate(l3_off + total_len);
    let flow = || crate::ecmp::flow4_of(m.data().get(l3_off..).unwrap_or(&[]));
    match vr.lookup4_or(dst, route, flow) {
        Some(NextHop::Local) => Next::Local,
        Some(nh @ (NextHop::Connected { .. } | NextHop::Gateway { .. })) => Next::Forward(nh),
        Some(NextHop::Broadcast) => Next::Drop(DropReason::DirectedBroadcast),
        Some(NextHop::Blackhole) => Next::Drop(DropReason::Blackhole),
        // Like Linux for an `unreachable` route: host unreachable.
        Some(NextHop::Unreachable) => Next::Icmp(
            Icmp4::DstUnreachable { code: 1, mtu: 0 },
            DropReason::Unreachable,
        ),
        // RFC 1812 §5.2.7.1: network unreachable when no route matches
        // (or, never seen, a group the lookup left unpicked).
        None | Some(NextHop::Group { .. }) => Next::Icmp(
            Icmp4::DstUnreachable { code: 0, mtu: 0 },
            DropReason::NoRoute,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::martian_octet;

    #[test]
    fn martian_first_octets() {
        for o in [0, 127, 224, 239, 240, 255] {
            assert!(martian_octet(o), "{o}");
        }
        for o in [1, 10, 126, 128, 192, 223] {
            assert!(!martian_octet(o), "{o}");
        }
        assert_eq!((0..=255u8).filter(|&o| martian_octet(o)).count(), 2 + 32);
    }
}
