//! The protected share: frames of the protocols that keep a tenant's
//! control plane up (BFD, BGP, OSPF, ARP and neighbor discovery) pass the
//! VR's fair share, its rate ceiling and its punt rate even while the VR's
//! own data-plane traffic exceeds them, up to a rate of their own
//! (`limits.protocol_rate`, a token bucket per worker).
//!
//! ```text
//!   frame ─▶ over share / ceiling / punt rate? ──no──▶ on as usual
//!                  │yes
//!                  ▼
//!            control protocol? ──no──▶ dropped (over-share, rate-ceiling, punt-rate)
//!                  │yes
//!                  ▼
//!            protocol bucket has a token? ──no──▶ dropped, as above
//!                  │yes
//!                  ▼
//!                on as usual
//! ```
//!
//! Without it a tenant flooding its own VR at ten times its share loses
//! nine in ten of everything it receives, and BFD (three missed packets)
//! and then BGP go down: the flood takes the routes with it. The bucket
//! bounds what a tenant gains by dressing a flood up as BGP.
//!
//! The test is on headers alone (a few loads): whether the packet is for
//! the router is decided later, by the stages, as for any packet.

use crate::mbuf::Mbuf;

/// BFD control packets, single-hop (RFC 5881) and multihop (RFC 5883).
const BFD_PORTS: [u16; 2] = [3784, 4784];
/// BGP, either end.
const BGP_PORT: u16 = 179;
const TCP: u8 = 6;
const UDP: u8 = 17;
const OSPF: u8 = 89;
const ICMPV6: u8 = 58;

/// Whether `m`, demuxed (its L3 header at `l3_off`, the EtherType just
/// before it), is a control-protocol frame: ARP; IPv4 or IPv6 (without
/// extension headers) carrying BFD control, BGP or OSPF; ICMPv6 router and
/// neighbor discovery (types 133-137).
#[inline]
pub(crate) fn control(m: &Mbuf) -> bool {
    let at = usize::from(m.l3_off);
    let d = m.data();
    match d.get(at.wrapping_sub(2)..at) {
        Some([0x08, 0x06]) => true,
        Some([0x08, 0x00]) => control4(d.get(at..).unwrap_or_default()),
        Some([0x86, 0xdd]) => control6(d.get(at..).unwrap_or_default()),
        _ => false,
    }
}

/// [`control`] for an Ethernet frame from a TAP (untagged: the L3 header
/// at 14).
#[inline]
pub(crate) fn control_frame(frame: &[u8]) -> bool {
    match frame.get(12..14) {
        Some([0x08, 0x06]) => true,
        Some([0x08, 0x00]) => control4(frame.get(14..).unwrap_or_default()),
        Some([0x86, 0xdd]) => control6(frame.get(14..).unwrap_or_default()),
        _ => false,
    }
}

fn control4(l3: &[u8]) -> bool {
    let Some(h) = l3.first_chunk::<20>() else {
        return false;
    };
    // A fragment other than the first carries no transport header.
    if h[0] >> 4 != 4 || u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0 {
        return false;
    }
    let ihl = usize::from(h[0] & 0x0f) * 4;
    transport(h[9], l3.get(ihl..).unwrap_or_default())
}

fn control6(l3: &[u8]) -> bool {
    let Some(h) = l3.first_chunk::<40>() else {
        return false;
    };
    if h[0] >> 4 != 6 {
        return false;
    }
    let l4 = l3.get(40..).unwrap_or_default();
    match h[6] {
        ICMPV6 => l4.first().is_some_and(|t| (133..=137).contains(t)),
        next => transport(next, l4),
    }
}

fn transport(protocol: u8, l4: &[u8]) -> bool {
    let port = |at: usize| l4.get(at..at + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
    match protocol {
        OSPF => true,
        UDP => port(2).is_some_and(|p| BFD_PORTS.contains(&p)),
        TCP => port(0) == Some(BGP_PORT) || port(2) == Some(BGP_PORT),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ethertype: [u8; 2], l3: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype);
        f.extend_from_slice(l3);
        f
    }

    fn ipv4(protocol: u8, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, protocol, 0, 0];
        h.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
        h.extend_from_slice(l4);
        h
    }

    fn ipv6(next: u8, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0, 0, 8, next, 255];
        h.extend_from_slice(&[0u8; 32]);
        h.extend_from_slice(l4);
        h
    }

    fn ports(src: u16, dst: u16) -> Vec<u8> {
        let mut p = src.to_be_bytes().to_vec();
        p.extend_from_slice(&dst.to_be_bytes());
        p.extend_from_slice(&[0u8; 16]);
        p
    }

    #[test]
    fn routing_protocols_are_control_and_data_is_not() {
        let v4 = [0x08, 0x00];
        let v6 = [0x86, 0xdd];
        for (f, want, what) in [
            (frame(v4, &ipv4(UDP, &ports(49152, 3784))), true, "BFD"),
            (
                frame(v4, &ipv4(UDP, &ports(49152, 4784))),
                true,
                "multihop BFD",
            ),
            (
                frame(v4, &ipv4(UDP, &ports(3784, 53))),
                false,
                "from the BFD port",
            ),
            (frame(v4, &ipv4(UDP, &ports(1, 3785))), false, "BFD echo"),
            (frame(v4, &ipv4(TCP, &ports(179, 40000))), true, "BGP from"),
            (frame(v4, &ipv4(TCP, &ports(40000, 179))), true, "BGP to"),
            (frame(v4, &ipv4(TCP, &ports(40000, 80))), false, "HTTP"),
            (frame(v4, &ipv4(OSPF, &[])), true, "OSPF"),
            (frame(v4, &ipv4(1, &[8, 0, 0, 0])), false, "ping"),
            (frame([0x08, 0x06], &[0u8; 28]), true, "ARP"),
            (
                frame(v6, &ipv6(UDP, &ports(49152, 3784))),
                true,
                "BFD over IPv6",
            ),
            (frame(v6, &ipv6(TCP, &ports(179, 1))), true, "BGP over IPv6"),
            (
                frame(v6, &ipv6(ICMPV6, &[135, 0, 0, 0])),
                true,
                "neighbor solicitation",
            ),
            (
                frame(v6, &ipv6(ICMPV6, &[128, 0, 0, 0])),
                false,
                "echo request",
            ),
            (
                frame(v6, &ipv6(0, &ports(179, 179))),
                false,
                "behind a hop-by-hop header",
            ),
        ] {
            assert_eq!(control_frame(&f), want, "{what}");
        }
    }

    #[test]
    fn cut_and_odd_headers_are_not_control() {
        let v4 = [0x08, 0x00];
        let bgp = ipv4(TCP, &ports(179, 1));
        for cut in 0..bgp.len() {
            // Cut before the destination port: not known to be BGP.
            assert_eq!(
                control_frame(&frame(v4, &bgp[..cut])),
                cut >= 22,
                "cut at {cut}"
            );
        }
        let mut later_fragment = ipv4(TCP, &ports(179, 1));
        later_fragment[7] = 1;
        assert!(!control_frame(&frame(v4, &later_fragment)));
        let mut v6_in_v4 = ipv4(TCP, &ports(179, 1));
        v6_in_v4[0] = 0x65;
        assert!(!control_frame(&frame(v4, &v6_in_v4)));
        assert!(!control_frame(&[0x08]));
    }
}
