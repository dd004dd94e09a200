//! The IPv4 forwarding fast path: the common case of the full stages in one
//! pass over a fixed-size view of the headers.
//!
//! A frame takes it when every check of the full path would pass and every
//! action would be the plain one:
//!
//! ```text
//!   untagged Ethernet, IPv4 with IHL 5 (no options), checksum good,
//!   total length within the frame, no martian source or destination,
//!   destination below 224/4 (no multicast, class E or broadcast),
//!   FIB answer: gateway or attached host, TTL > 1, fits the egress MTU,
//!   egress untagged, neighbor static or reachable (no probe due)
//!       │ yes                                        │ any no
//!       ▼                                            ▼
//!   trim padding, TTL − 1 (RFC 1624),            the full stages
//!   MACs, counters, egress queue                 (ipv4_input, ip_forward, output)
//! ```
//!
//! It decides nothing on its own: every frame it refuses goes through the
//! full stages unchanged, and every frame it forwards leaves exactly as the
//! full stages would send it, with the same counters (the tests in
//! `tests/fast_path.rs` check both on the same traffic).

use std::net::{IpAddr, Ipv4Addr};

use vrhost_fib::NextHopId;
use vrhost_wire::ethernet::EthernetFrame;
use vrhost_wire::ipv4::{self, Ipv4Packet};

use crate::ipv4_input::martian_octet;
use crate::mbuf::Mbuf;
use crate::output::Ctx;
use crate::worker::{NextHop, Vr};

/// Forwards `m` (demuxed as IPv4, `id` its FIB answer) if it qualifies:
/// rewrites it in place, counts it, and returns the port it leaves by, for
/// the caller to queue it there ([`Ctx::push_tx`], or with the rest of its
/// burst). Returns `None`, the frame untouched, otherwise: it is for the
/// full stages.
///
/// Works on fixed-size views of the Ethernet (14 bytes) and IPv4 (20 bytes)
/// headers, so the checks and rewrites below carry no bounds checks of their own;
/// the frame is changed only once every check has passed.
#[inline]
pub(crate) fn v4(ctx: &mut Ctx<'_>, vr: &mut Vr, m: &mut Mbuf, id: NextHopId) -> Option<u16> {
    if m.l3_off != 14 {
        return None;
    }
    // One length test for both headers: the two views below are taken
    // from a 34-byte array, so the compiler drops their tests, and `l3_len`
    // cannot underflow.
    let len = m.len();
    let headers = m.data_mut().first_chunk_mut::<34>()?;
    let l3_len = len - 14;
    let (l2, ip) = headers.split_first_chunk_mut::<14>()?;
    let ip = ip.first_chunk_mut::<20>()?;
    let total_len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let (ttl, checksum) = (ip[8], [ip[10], ip[11]]);
    // Version 4 and IHL 5, a total length the frame holds, a good checksum,
    // no martian source (RFC 1812 §5.3.7), a destination that is neither
    // martian nor multicast, class E or broadcast (the same first-octet
    // test), and a TTL that survives the hop (§5.3.1).
    if ip[0] != 0x45
        || total_len < 20
        || total_len > l3_len
        || !Ipv4Packet::new_unchecked(&ip[..]).verify_checksum()
        || martian_octet(ip[12]) | martian_octet(ip[16])
        || ttl <= 1
    {
        return None;
    }
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let (egress, neigh) = match vr.resolve(id.0) {
        Some(NextHop::Gateway { iface, neigh }) => (iface, neigh),
        Some(NextHop::Connected { iface }) => match vr.neighbors.find(iface, IpAddr::V4(dst)) {
            Some(n) => (iface, n),
            None => return None,
        },
        _ => return None,
    };
    let e = &ctx.ifaces[egress as usize];
    if e.vlan.is_some() || total_len > usize::from(e.mtu) {
        return None;
    }
    let mac = vr.neighbors.usable_mac(neigh, ctx.now)?;
    // The frame keeps its place and its EtherType: only the MACs change.
    // The TTL and checksum are those read above (the TTL is > 1).
    ip[8] = ttl - 1;
    [ip[10], ip[11]] = ipv4::checksum_after_ttl_decrement(checksum);
    let mut eth = EthernetFrame::new_unchecked(&mut l2[..]);
    eth.set_dst_addr(mac);
    eth.set_src_addr(e.mac);
    m.truncate(14 + total_len);
    let port = e.port;
    ctx.count_fast_path(m, egress, port);
    Some(port)
}
