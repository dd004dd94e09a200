//! Unicast reverse-path forwarding (RFC 3704): is a packet's source one
//! that the interface it came in on could have sent?
//!
//! ```text
//!   source's route ──┬─ none, blackhole, unreachable,
//!                    │  the VR's own or a broadcast address ──▶ drop `urpf` (loose and strict)
//!                    ├─ gateway / attached, out of the ingress interface ──▶ pass
//!                    └─ gateway / attached, out of another one ──▶ loose: pass, strict: drop `urpf`
//! ```
//!
//! The check runs on every packet of an interface whose `urpf` is not
//! `off`: in the fast path (`fast::v4_at`, `fast::v6_at`), which leaves a
//! source that fails to the full stages, and there (`ipv4_input`,
//! `ipv6_input`) right after the martian checks, where it is dropped and
//! counted. The source's route is read as the FIB holds it: no
//! neighbor entry is made for its gateway.

use crate::spec::Urpf;
use crate::tables::{NextHops, RouteHop};

/// Whether a packet that came in on interface `ingress` (global index),
/// whose source's route is `route` (an entry of `hops`), passes check
/// `mode`. A multipath route passes strict when any of its gateways is out
/// of the ingress interface (RFC 3704 §2.2: "feasible" paths).
#[inline]
pub(crate) fn passes(mode: Urpf, route: Option<&RouteHop>, hops: &NextHops, ingress: u16) -> bool {
    let out = match route {
        Some(&(RouteHop::Gateway { iface, .. } | RouteHop::Connected { iface })) => iface,
        Some(&RouteHop::Group { base, members }) => {
            return match mode {
                Urpf::Off | Urpf::Loose => true,
                Urpf::Strict => hops.members(base, members).iter().any(|&id| {
                    matches!(hops.get(id as usize), Some(&RouteHop::Gateway { iface, .. }) if iface == ingress)
                }),
            }
        }
        Some(
            RouteHop::Local | RouteHop::Broadcast | RouteHop::Blackhole | RouteHop::Unreachable,
        )
        | None => return mode == Urpf::Off,
    };
    match mode {
        Urpf::Off | Urpf::Loose => true,
        Urpf::Strict => out == ingress,
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    #[test]
    fn strict_wants_the_ingress_interface_and_loose_any_real_route() {
        let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let gw = |iface| Some(RouteHop::Gateway { iface, addr });
        let attached = |iface| Some(RouteHop::Connected { iface });
        for (route, loose, strict) in [
            (gw(3), true, true),
            (attached(3), true, true),
            (gw(4), true, false),
            (attached(4), true, false),
            (Some(RouteHop::Blackhole), false, false),
            (Some(RouteHop::Unreachable), false, false),
            (Some(RouteHop::Local), false, false),
            (Some(RouteHop::Broadcast), false, false),
            (None, false, false),
        ] {
            let none = NextHops::default();
            assert!(passes(Urpf::Off, route.as_ref(), &none, 3), "{route:?}");
            assert_eq!(
                passes(Urpf::Loose, route.as_ref(), &none, 3),
                loose,
                "{route:?}"
            );
            assert_eq!(
                passes(Urpf::Strict, route.as_ref(), &none, 3),
                strict,
                "{route:?}"
            );
        }
    }

    #[test]
    fn strict_passes_a_multipath_route_with_any_gateway_on_the_ingress() {
        let gw = |iface, last| RouteHop::Gateway {
            iface,
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, iface as u8, last)),
        };
        // A group of the first two: buckets, then the member ids.
        let mut buckets = vec![0; crate::tables::GROUP_BUCKETS];
        buckets.extend([0, 1]);
        let hops = NextHops {
            hops: vec![gw(3, 1), gw(4, 1), gw(5, 1)],
            buckets,
        };
        let group = RouteHop::Group {
            base: 0,
            members: 2,
        };
        assert!(passes(Urpf::Strict, Some(&group), &hops, 3));
        assert!(passes(Urpf::Strict, Some(&group), &hops, 4));
        assert!(!passes(Urpf::Strict, Some(&group), &hops, 5));
        assert!(passes(Urpf::Loose, Some(&group), &hops, 5));
    }
}
