//! The IPv4 forwarding fast path: the common case of the full stages in one
//! pass over a fixed-size view of the headers.
//!
//! A frame takes it when every check of the full path would pass and every
//! action would be the plain one:
//!
//! ```text
//!   untagged or one 802.1Q tag, IPv4 with IHL 5 (no options), checksum good,
//!   total length within the frame, no martian source or destination,
//!   destination below 224/4 (no multicast, class E or broadcast),
//!   FIB answer: gateway or attached host, TTL > 1, fits the egress MTU,
//!   neighbor static or reachable (no probe due)
//!       │ yes                                        │ any no
//!       ▼                                            ▼
//!   trim padding, TTL − 1 (RFC 1624),            the full stages
//!   MACs and tag, counters, egress queue         (ipv4_input, ip_forward, output)
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
/// Untagged (`l3_off` 14) and 802.1Q-tagged (18) frames both qualify; each
/// has its own copy of [`v4_at`], with its header offsets constant.
#[inline]
pub(crate) fn v4(ctx: &mut Ctx<'_>, vr: &mut Vr, m: &mut Mbuf, id: NextHopId) -> Option<u16> {
    match m.l3_off {
        14 => v4_at::<14>(ctx, vr, m, id),
        18 => v4_at::<18>(ctx, vr, m, id),
        _ => None,
    }
}

/// [`v4`] for a frame whose IPv4 header starts `L2` bytes in: 14
/// (untagged) or 18 (one 802.1Q tag).
///
/// Works on fixed-size views of the IPv4 header (20 bytes) and, where the
/// egress needs the frame's L2 header to grow or shrink, moves only the
/// frame's start: the MACs are rewritten anyway, so popping a tag is a
/// 4-byte trim of the front and pushing one takes 4 bytes of headroom; a
/// tagged frame leaving tagged keeps its size and gets the egress VID.
/// Everything is written only once every check has passed.
#[inline(always)]
pub(crate) fn v4_at<const L2: usize>(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    m: &mut Mbuf,
    id: NextHopId,
) -> Option<u16> {
    // One length test for both headers: `l3_len` cannot underflow below.
    let (len, room) = (m.len(), m.headroom());
    let ip = m.data_mut().get_mut(L2..)?.first_chunk_mut::<20>()?;
    let l3_len = len - L2;
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
    if total_len > usize::from(e.mtu) {
        return None;
    }
    let out_l2 = if e.vlan.is_some() { 18 } else { 14 };
    // Pushing a tag takes 4 bytes of headroom (a received frame has 128).
    if out_l2 > L2 + room {
        return None;
    }
    let mac = vr.neighbors.usable_mac(neigh, ctx.now)?;
    // The TTL and checksum are those read above (the TTL is > 1).
    ip[8] = ttl - 1;
    [ip[10], ip[11]] = ipv4::checksum_after_ttl_decrement(checksum);
    // Grow or shrink the L2 header by moving the frame's start. The inner
    // EtherType needs no write either way: popping brings the tag's inner
    // EtherType (IPv4) to bytes 12-13, pushing moves the untagged one to
    // 16-17.
    if out_l2 != L2 {
        let moved = m.adjust_head(L2 as isize - out_l2 as isize);
        debug_assert!(moved, "headroom tested above");
    }
    let l2 = m.data_mut().first_chunk_mut::<18>()?;
    let mut eth = EthernetFrame::new_unchecked(&mut l2[..14]);
    eth.set_dst_addr(mac);
    eth.set_src_addr(e.mac);
    if let Some(vid) = e.vlan {
        // TPID, then the TCI: PCP 0, DEI 0 and the egress VID, as the full
        // stages write it.
        l2[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        l2[14..16].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
    }
    m.l3_off = out_l2 as u16;
    m.truncate(out_l2 + total_len);
    let port = e.port;
    ctx.count_fast_path(m, egress, port);
    Some(port)
}
