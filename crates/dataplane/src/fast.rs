//! The forwarding fast path, IPv4 ([`v4`]) and IPv6 ([`v6`]): the common
//! case of the full stages in one pass over a fixed-size view of the headers.
//!
//! A frame takes it when every check of the full path would pass and every
//! action would be the plain one:
//!
//! ```text
//!   untagged, one tag or two (QinQ), IPv4 with IHL 5 (no options), checksum good,
//!   total length within the frame, no martian source or destination,
//!   destination below 224/4 (no multicast, class E or broadcast),
//!   source passes the ingress interface's uRPF check if it has one,
//!   FIB answer: gateway or attached host, TTL > 1, fits the egress MTU,
//!   the ingress `filter_in` and egress `filter_out` permit it, if any,
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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use vrhost_fib::NextHopId;
use vrhost_wire::ethernet::EthernetAddress;
use vrhost_wire::ipv4::{self, Ipv4Packet};

use crate::ecmp;
use crate::filter::{Filter, Verdict};
use crate::iface::Egress;
use crate::ipv4_input::martian_octet;
use crate::mbuf::Mbuf;
use crate::output::{Ctx, Sent};
use crate::spec::Urpf;
use crate::urpf;
use crate::worker::{NextHop, Via, Vr, LISTS_OUT};

/// Forwards `m` (demuxed as IPv4, `id` its FIB answer) if it qualifies:
/// rewrites it in place and returns where it goes, for the caller to count
/// it and queue it there ([`Ctx::push_tx`], or with the rest of its
/// burst). Returns `None`, the frame untouched, otherwise: it is for the
/// full stages.
///
/// Untagged (`l3_off` 14), tagged (18) and QinQ (22) frames all qualify; each
/// has its own out-of-line copy ([`v4_at`], which the plain burst calls
/// directly), with its header offsets constant.
#[inline]
pub(crate) fn v4(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    m: &mut Mbuf,
    id: NextHopId,
    urpf: Urpf,
) -> Option<Sent> {
    match m.l3_off {
        14 => v4_in::<14, false>(ctx, vr, m, id, urpf),
        18 => v4_in::<18, false>(ctx, vr, m, id, urpf),
        22 => v4_in::<22, false>(ctx, vr, m, id, urpf),
        _ => None,
    }
}

/// [`v4_at`] for a frame of `vr` whose IPv4 header starts `L2` bytes in,
/// the copy with the rule-list steps when the VR has lists: the plain
/// copy has none of their cost. With `JUDGED`, the caller has judged the
/// frame by its interface's input list (a plain burst does, for all its
/// frames in one pass: `Filter::judge4_burst`), and only output lists are
/// left.
#[inline(always)]
pub(crate) fn v4_in<const L2: usize, const JUDGED: bool>(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    m: &mut Mbuf,
    id: NextHopId,
    urpf: Urpf,
) -> Option<Sent> {
    match lists_left::<JUDGED>(vr.filtered) {
        NO_LISTS => v4_at::<L2, NO_LISTS>(ctx, vr, m, id, urpf),
        OUTPUT_LISTS => v4_at::<L2, OUTPUT_LISTS>(ctx, vr, m, id, urpf),
        _ => v4_at::<L2, ALL_LISTS>(ctx, vr, m, id, urpf),
    }
}

/// [`v4_in`] for IPv6.
#[inline(always)]
pub(crate) fn v6_in<const L2: usize, const JUDGED: bool>(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    m: &mut Mbuf,
    id: NextHopId,
    urpf: Urpf,
) -> Option<Sent> {
    match lists_left::<JUDGED>(vr.filtered) {
        NO_LISTS => v6_at::<L2, NO_LISTS>(ctx, vr, m, id, urpf),
        OUTPUT_LISTS => v6_at::<L2, OUTPUT_LISTS>(ctx, vr, m, id, urpf),
        _ => v6_at::<L2, ALL_LISTS>(ctx, vr, m, id, urpf),
    }
}

/// The fast path's copy without rule-list steps.
const NO_LISTS: u8 = 0;
/// The copy that asks the egress interface's output list only.
const OUTPUT_LISTS: u8 = 1;
/// The copy that asks both the ingress interface's input list and the
/// egress interface's output list.
const ALL_LISTS: u8 = 2;

/// Which copy a frame of a VR whose interfaces apply `filtered` lists
/// ([`Vr::filtered`]) takes, its input list already asked if `JUDGED`.
#[inline(always)]
fn lists_left<const JUDGED: bool>(filtered: u8) -> u8 {
    if filtered == 0 {
        NO_LISTS
    } else if !JUDGED {
        ALL_LISTS
    } else if filtered & LISTS_OUT == 0 {
        NO_LISTS
    } else {
        OUTPUT_LISTS
    }
}

/// [`v4`] for a frame whose IPv4 header starts `L2` bytes in: 14
/// (untagged), 18 (one tag) or 22 (two).
///
/// Works on one fixed-size view of the L2 and IPv4 headers (`L2` + 20 bytes, so a
/// frame shorter than that takes the full stages; no minimum-size frame
/// is); the L2 header is written in place or by [`retag`]. Everything is written only
/// once every check has passed.
///
/// Out of line: inlined into the plain burst's loop, the fast path costs
/// more instructions per packet (docs/benchmarks.md).
///
/// A multipath route's group is resolved in the same pass: the packet's
/// flow hash picks the member gateway ([`crate::ecmp`]), which is looked
/// up as any gateway is (a member is never a group).
#[inline(never)]
pub(crate) fn v4_at<const L2: usize, const LISTS: u8>(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    m: &mut Mbuf,
    id: NextHopId,
    urpf: Urpf,
) -> Option<Sent> {
    // One length test for both headers: `l3_len` cannot underflow below,
    // and with `L2` a constant the split and the IPv4 view are free.
    let (len, room, m_iface) = (m.len(), m.headroom(), m.iface);
    // The headers, and after them what a rule list may look at.
    // With rule lists, what follows the headers too (for their ports).
    // Without rule lists, the view ends with the four bytes after the
    // header (a multipath route hashes the ports): every frame that can
    // carry ports is that long.
    let (head, tail): (&mut [u8], &mut [u8]) = if LISTS != NO_LISTS {
        m.data_mut().split_at_mut_checked(L2 + 20)?
    } else {
        (m.data_mut().get_mut(..L2 + 24)?, &mut [])
    };
    let (l2, ip) = head.split_at_mut(L2);
    let (ip, after) = ip.split_first_chunk_mut::<20>()?;
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
    // RFC 3704 on an interface that asks for it: a source that fails is
    // left to the full stages, which drop and count it.
    if urpf != Urpf::Off {
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        if !urpf::passes(urpf, vr.source_route4(src), &vr.nexthops, m_iface) {
            return None;
        }
    }
    // A gateway this worker resolved before carries its egress view, and
    // its neighbor's MAC while that stays usable: neither the egress
    // interface's line nor the neighbor entry is read.
    // A multipath route's group picks the gateway its flow hashes to
    // ([`crate::ecmp`]), which is resolved in turn (a member is never a
    // group).
    let via = match vr.gateway(id.0, ctx.now) {
        Some(via) => via,
        None => 'slow: {
            let mut id = id.0;
            let mut hop = vr.resolve(id);
            if let Some(NextHop::Group { base }) = hop {
                // What follows the header up to the packet's end (not its
                // padding), hashed as the full stages do.
                let l4 = if LISTS != NO_LISTS {
                    &tail[..]
                } else {
                    &after[..]
                };
                let l4 = l4.get(..(total_len - 20).min(l4.len()))?;
                id = vr.nexthops.pick(base, ecmp::flow4(ip, l4))?;
                if let Some(via) = vr.gateway(id, ctx.now) {
                    break 'slow via;
                }
                hop = vr.resolve(id);
            }
            match hop {
                Some(NextHop::Gateway { iface, neigh }) => {
                    let egress = Egress::of(ctx.ifaces.get(usize::from(iface))?);
                    vr.keep_egress(id, egress);
                    Via::new(iface, neigh, egress, Some(id))
                }
                Some(NextHop::Connected { iface }) => {
                    let n = vr.neighbors.find(iface, IpAddr::V4(dst))?;
                    let egress = Egress::of(ctx.ifaces.get(usize::from(iface))?);
                    Via::new(iface, n, egress, None)
                }
                _ => return None,
            }
        }
    };
    let (egress, neigh, e) = (via.iface, via.neigh, via.egress);
    if total_len > usize::from(e.mtu) || !e.fits::<L2>(room) {
        return None;
    }
    // With rule lists, they are asked last, once nothing else can refuse
    // the packet (the neighbour is looked at without marking it used): one
    // that denies leaves the packet to the full stages, and the verdicts of
    // a packet they let through are counted at once.
    let mac = if LISTS != NO_LISTS {
        let mac = vr.neighbors.peek_usable_mac(neigh, ctx.now)?;
        let rest = tail.get(..total_len - 20)?;
        if !Lists::pass4::<L2, LISTS>(ctx, (m_iface, egress), l2, ip, rest) {
            return None;
        }
        vr.neighbors.mark_used(neigh, ctx.now);
        mac
    } else {
        vr.via_mac(&via, ctx.now)?
    };
    // The TTL and checksum are those read above (the TTL is > 1).
    ip[8] = ttl - 1;
    [ip[10], ip[11]] = ipv4::checksum_after_ttl_decrement(checksum);
    // In place while the header keeps its length (through the view).
    if e.l2_len() == L2 {
        e.write(l2, mac);
    } else {
        retag(m, L2, e, mac);
    }
    Some(leave(m, egress, e, total_len))
}

/// The IPv6 fast path: [`v4`]'s twin for a frame demuxed as IPv6.
///
/// ```text
///   untagged, one tag or two, version 6, payload within the frame,
///   no Hop-by-Hop header, neither address in ::/8, fe00::/8 or ff00::/8
///   (unspecified, loopback, link-local, multicast: the full stages' scope
///   rules, RFC 4291), FIB answer: gateway or attached host, hop limit > 1,
///   fits the egress MTU, neighbor static or reachable
///       │ yes                                     │ any no
///       ▼                                         ▼
///   trim padding, hop limit − 1,               the full stages
///   MACs and tag, counters, egress queue       (ipv6_input, ip_forward, output)
/// ```
#[inline]
pub(crate) fn v6(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    m: &mut Mbuf,
    id: NextHopId,
    urpf: Urpf,
) -> Option<Sent> {
    match m.l3_off {
        14 => v6_in::<14, false>(ctx, vr, m, id, urpf),
        18 => v6_in::<18, false>(ctx, vr, m, id, urpf),
        22 => v6_in::<22, false>(ctx, vr, m, id, urpf),
        _ => None,
    }
}

/// [`v6`] for a frame whose IPv6 header starts `L2` bytes in; out of line,
/// and multipath in the same pass, as [`v4_at`].
#[inline(never)]
pub(crate) fn v6_at<const L2: usize, const LISTS: u8>(
    ctx: &mut Ctx<'_>,
    vr: &mut Vr,
    m: &mut Mbuf,
    id: NextHopId,
    urpf: Urpf,
) -> Option<Sent> {
    let (len, room, m_iface) = (m.len(), m.headroom(), m.iface);
    // With rule lists, what follows the headers too (for their ports).
    // As for IPv4: the four bytes after the header too.
    let (head, tail): (&mut [u8], &mut [u8]) = if LISTS != NO_LISTS {
        m.data_mut().split_at_mut_checked(L2 + 40)?
    } else {
        (m.data_mut().get_mut(..L2 + 44)?, &mut [])
    };
    let (l2, ip) = head.split_at_mut(L2);
    let (ip, after) = ip.split_first_chunk_mut::<40>()?;
    let l3_len = len - L2;
    let packet_len = 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let hop_limit = ip[7];
    // RFC 8200 §3 (version, payload length), §4.3 (a Hop-by-Hop header,
    // next header 0, is left to the full stages), RFC 4291 (scopes: see
    // `martian6_octet`), RFC 4443 §3.3 (a hop limit that survives the hop).
    if ip[0] >> 4 != 6
        || packet_len > l3_len
        || ip[6] == 0
        || martian6_octet(ip[8]) | martian6_octet(ip[24])
        || hop_limit <= 1
    {
        return None;
    }
    // RFC 3704, as for IPv4 (the test above left link-local and unspecified
    // sources to the full stages, which do not check them).
    if urpf != Urpf::Off {
        let src: [u8; 16] = *ip[8..].first_chunk::<16>()?;
        if !urpf::passes(
            urpf,
            vr.source_route6(Ipv6Addr::from(src)),
            &vr.nexthops,
            m_iface,
        ) {
            return None;
        }
    }
    let via = match vr.gateway(id.0, ctx.now) {
        Some(via) => via,
        None => 'slow: {
            let mut id = id.0;
            let mut hop = vr.resolve(id);
            if let Some(NextHop::Group { base }) = hop {
                let l4 = if LISTS != NO_LISTS {
                    &tail[..]
                } else {
                    &after[..]
                };
                let l4 = l4.get(..(packet_len - 40).min(l4.len()))?;
                id = vr.nexthops.pick(base, ecmp::flow6(ip, l4))?;
                if let Some(via) = vr.gateway(id, ctx.now) {
                    break 'slow via;
                }
                hop = vr.resolve(id);
            }
            match hop {
                Some(NextHop::Gateway { iface, neigh }) => {
                    let egress = Egress::of(ctx.ifaces.get(usize::from(iface))?);
                    vr.keep_egress(id, egress);
                    Via::new(iface, neigh, egress, Some(id))
                }
                Some(NextHop::Connected { iface }) => {
                    let dst: [u8; 16] = *ip[24..].first_chunk::<16>()?;
                    let n = vr.neighbors.find(iface, IpAddr::V6(Ipv6Addr::from(dst)))?;
                    let egress = Egress::of(ctx.ifaces.get(usize::from(iface))?);
                    Via::new(iface, n, egress, None)
                }
                _ => return None,
            }
        }
    };
    let (egress, neigh, e) = (via.iface, via.neigh, via.egress);
    if packet_len > usize::from(e.mtu) || !e.fits::<L2>(room) {
        return None;
    }
    let mac = if LISTS != NO_LISTS {
        let mac = vr.neighbors.peek_usable_mac(neigh, ctx.now)?;
        let rest = tail.get(..packet_len - 40)?;
        if !Lists::pass6::<L2, LISTS>(ctx, (m_iface, egress), l2, ip, rest) {
            return None;
        }
        vr.neighbors.mark_used(neigh, ctx.now);
        mac
    } else {
        vr.via_mac(&via, ctx.now)?
    };
    ip[7] = hop_limit - 1;
    if e.l2_len() == L2 {
        e.write(l2, mac);
    } else {
        retag(m, L2, e, mac);
    }
    Some(leave(m, egress, e, packet_len))
}

/// The rule lists a packet meets: its ingress interface's `filter_in` and
/// its egress interface's `filter_out`.
///
/// The fast path asks them last, once nothing else can refuse the packet,
/// so a packet they let through is sure to leave and their verdicts are
/// counted at once; a packet either denies is left to the full stages,
/// which drop and count it, so nothing is counted twice. Only the fast
/// path's copies for VRs with lists have this step; in a plain burst the
/// input list has judged every frame before the fast path (the burst
/// stops at the first frame it denies, and counts the verdicts of the
/// frames the fast path sent), and only the output list is asked here.
struct Lists;

impl Lists {
    /// Whether the lists between interfaces `ingress` and `egress` let an
    /// IPv4 packet through (`l2` its L2 header, `ip` its fixed header,
    /// `rest` the remainder), counting their verdicts if they do: both
    /// lists, or the output list alone ([`OUTPUT_LISTS`]).
    #[inline(never)]
    fn pass4<const L2: usize, const LISTS: u8>(
        ctx: &Ctx<'_>,
        (ingress, egress): (u16, u16),
        l2: &[u8],
        ip: &[u8; 20],
        rest: &[u8],
    ) -> bool {
        let (pcp, worker) = (crate::filter::pcp_of(l2, L2), ctx.counters.index);
        let (input, output) = Lists::of::<LISTS>(ctx, ingress, egress);
        let a = input.map(|f| (f, f.judge4(worker, ip, rest, pcp)));
        let b = output.map(|f| (f, f.judge4(worker, ip, rest, pcp)));
        Lists::settle(worker, a, b)
    }

    /// [`Lists::pass4`] for IPv6.
    #[inline(never)]
    fn pass6<const L2: usize, const LISTS: u8>(
        ctx: &Ctx<'_>,
        (ingress, egress): (u16, u16),
        l2: &[u8],
        ip: &[u8; 40],
        rest: &[u8],
    ) -> bool {
        let (pcp, worker) = (crate::filter::pcp_of(l2, L2), ctx.counters.index);
        let (input, output) = Lists::of::<LISTS>(ctx, ingress, egress);
        // Forwarded packets: neighbor discovery is never let through here.
        let a = input.map(|f| (f, f.judge6(worker, ip, rest, pcp, false)));
        let b = output.map(|f| (f, f.judge6(worker, ip, rest, pcp, false)));
        Lists::settle(worker, a, b)
    }

    #[inline(always)]
    fn of<'a, const LISTS: u8>(
        ctx: &Ctx<'a>,
        ingress: u16,
        egress: u16,
    ) -> (Option<&'a Filter>, Option<&'a Filter>) {
        let ifaces = ctx.ifaces;
        let input = ifaces
            .get(usize::from(ingress))
            .filter(|_| LISTS == ALL_LISTS)
            .and_then(|i| i.filter_in.as_deref());
        let output = ifaces
            .get(usize::from(egress))
            .and_then(|i| i.filter_out.as_deref());
        (input, output)
    }

    /// Whether neither verdict denies; if so, counts both.
    #[inline(always)]
    fn settle(worker: usize, a: Option<(&Filter, Verdict)>, b: Option<(&Filter, Verdict)>) -> bool {
        let permits = |x: &Option<(&Filter, Verdict)>| x.is_none_or(|(_, v)| v.permit());
        if !permits(&a) || !permits(&b) {
            return false;
        }
        for (f, v) in [a, b].into_iter().flatten() {
            f.count(worker, v);
        }
        true
    }
}

/// Whether an IPv6 address with this first byte is left to the full
/// stages: ::/8 (unspecified, loopback, mapped), fe00::/8 (link-local and
/// the old site-local) and ff00::/8 (multicast).
#[inline(always)]
fn martian6_octet(first: u8) -> bool {
    matches!(first, 0x00 | 0xfe | 0xff)
}

/// The end of both families, once the headers are rewritten (the L2
/// header by [`Egress::write`] in place where it keeps its length, else by
/// [`retag`]): trims the frame to `l3_len` bytes of L3 behind `e`'s L2
/// header and addresses it to `e`'s port.
#[inline(always)]
fn leave(m: &mut Mbuf, egress: u16, e: Egress, l3_len: usize) -> Sent {
    let out_l2 = e.l2_len();
    m.l3_off = out_l2 as u16;
    m.truncate(out_l2 + l3_len);
    m.port = e.port;
    Sent {
        egress,
        port: e.port,
    }
}

/// The rare case: tags pushed or popped, by moving the start of the frame
/// (whose L2 header is `l2_len` bytes) to `e`'s header length. The MACs are
/// rewritten anyway, so popping a tag is a 4-byte trim of the front (8 for
/// both of QinQ) and pushing takes 4 or 8 bytes of headroom (tested by
/// the caller), and the innermost EtherType needs no write either way: it
/// stays right before the L3 header, where the new L2 header ends.
#[cold]
fn retag(m: &mut Mbuf, l2_len: usize, e: Egress, mac: EthernetAddress) {
    let out_l2 = e.l2_len();
    let moved = m.adjust_head(l2_len as isize - out_l2 as isize);
    debug_assert!(moved, "headroom tested by the caller");
    if let Some(l2) = m.data_mut().get_mut(..out_l2) {
        e.write(l2, mac);
    }
}
