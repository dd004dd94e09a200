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
use vrhost_wire::checksum;
use vrhost_wire::ipv4::Ipv4Packet;

use crate::mbuf::Mbuf;
use crate::output::Ctx;
use crate::worker::{NextHop, Vr};

/// Ethernet header plus an IPv4 header without options.
const HEADERS: usize = 14 + 20;

/// Forwards `m` (demuxed as IPv4, `id` its FIB answer) if it qualifies,
/// returning it untouched otherwise, for the full stages.
#[inline]
pub(crate) fn v4(ctx: &mut Ctx<'_>, vr: &mut Vr, mut m: Mbuf, id: NextHopId) -> Option<Mbuf> {
    if m.l3_off != 14 {
        return Some(m);
    }
    let frame_len = m.len();
    let Some(h) = m.data().first_chunk::<HEADERS>() else {
        return Some(m);
    };
    let ip: &[u8; 20] = h.last_chunk().unwrap_or(&[0; 20]);
    let total_len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let (s, d, ttl) = (ip[12], ip[16], ip[8]);
    // Version 4 and IHL 5, a total length the frame holds, a good checksum,
    // no martian (RFC 1812 §5.3.7) and no multicast, class E or broadcast
    // destination, and a TTL that survives the hop (§5.3.1).
    if ip[0] != 0x45
        || total_len < 20
        || 14 + total_len > frame_len
        || checksum::fold(checksum::sum(ip)) != 0xffff
        || s == 0
        || s == 127
        || s >= 224
        || d == 0
        || d == 127
        || d >= 224
        || ttl <= 1
    {
        return Some(m);
    }
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let (egress, neigh) = match vr.resolve(id.0) {
        Some(NextHop::Gateway { iface, neigh }) => (iface, neigh),
        Some(NextHop::Connected { iface }) => match vr.neighbors.find(iface, IpAddr::V4(dst)) {
            Some(n) => (iface, n),
            None => return Some(m),
        },
        _ => return Some(m),
    };
    let e = &ctx.ifaces[egress as usize];
    if e.vlan.is_some() || total_len > usize::from(e.mtu) {
        return Some(m);
    }
    let Some(mac) = vr.neighbors.usable_mac(neigh, ctx.now) else {
        return Some(m);
    };
    m.truncate(14 + total_len);
    let data = m.data_mut();
    Ipv4Packet::new_unchecked(&mut data[14..]).decrement_ttl();
    data[0..6].copy_from_slice(&mac.0);
    data[6..12].copy_from_slice(&e.mac.0);
    let len = data.len() as u64;
    let c = ctx.counters;
    let ingress = &c.ifaces[m.iface as usize];
    ingress.forwarded.inc();
    ingress.fast_path.inc();
    let ci = &c.ifaces[egress as usize];
    ci.tx_packets.inc();
    ci.tx_bytes.add(len);
    let cp = &c.ports[e.port as usize];
    cp.tx_packets.inc();
    cp.tx_bytes.add(len);
    m.port = e.port;
    ctx.tx.ports[e.port as usize].push(m);
    None
}
