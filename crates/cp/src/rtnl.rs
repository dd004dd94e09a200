//! A small synchronous rtnetlink client (netlink-sys sockets,
//! netlink-packet-route messages) and the decoding of route and address
//! messages into [`crate::event`] terms, shared by the namespace watcher,
//! the address pusher and the FPM server.
//!
//! Synchronous on purpose: each socket lives on one thread that entered the
//! VR's namespace first (a netlink socket belongs to the namespace of the
//! thread that created it), and a blocking `recv` lets us see `ENOBUFS`
//! directly, which is the one error the watcher must act on.

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteType, RouteVia,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::event::IpPrefix;

/// Legacy multicast group bits for `bind()` (`<linux/rtnetlink.h>`
/// `RTMGRP_*`): links, IPv4/IPv6 addresses, IPv4/IPv6 routes.
pub(crate) const GROUPS: u32 = 0x1 /* RTMGRP_LINK */
    | 0x10 /* RTMGRP_IPV4_IFADDR */
    | 0x40 /* RTMGRP_IPV4_ROUTE */
    | 0x100 /* RTMGRP_IPV6_IFADDR */
    | 0x400 /* RTMGRP_IPV6_ROUTE */;

/// Receive buffer for one datagram. The kernel builds dump replies and
/// notifications in skbs of at most 32 KiB (`NLMSG_GOODSIZE` is a page, dumps
/// grow to 32 KiB); 64 KiB leaves room, and `MSG_TRUNC` tells us if not.
const RECV_BUF: usize = 64 * 1024;

/// The main routing table, `RT_TABLE_MAIN` (`ip route` without `table`).
pub(crate) const RT_TABLE_MAIN: u32 = 254;

/// One rtnetlink socket, bound in the calling thread's namespace.
pub(crate) struct Rtnl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

/// Why a dump failed.
#[derive(Debug)]
pub(crate) enum DumpError {
    /// The table changed while the kernel walked it (`NLM_F_DUMP_INTR`):
    /// the answer may be inconsistent; dump again.
    Interrupted,
    /// A socket error, or an error answer from the kernel.
    Io(io::Error),
}

impl From<io::Error> for DumpError {
    fn from(e: io::Error) -> Self {
        DumpError::Io(e)
    }
}

impl Rtnl {
    /// Opens a `NETLINK_ROUTE` socket subscribed to `groups` (0: none).
    pub(crate) fn open(groups: u32) -> io::Result<Self> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind(&SocketAddr::new(0, groups))?;
        Ok(Rtnl {
            sock,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    /// Sets `SO_RCVBUF` (the kernel doubles it, and caps it at
    /// `net.core.rmem_max`).
    pub(crate) fn set_rcvbuf(&self, bytes: usize) -> io::Result<()> {
        self.sock.set_rx_buf_sz(bytes)
    }

    /// Makes a blocking `recv` give up after `t` (`SO_RCVTIMEO`).
    pub(crate) fn set_recv_timeout(&self, t: Duration) -> io::Result<()> {
        rustix::net::sockopt::set_socket_timeout(
            &self.sock,
            rustix::net::sockopt::Timeout::Recv,
            Some(t),
        )
        .map_err(io::Error::from)
    }

    /// Sends one request with `flags` (`NLM_F_REQUEST` is added) and returns
    /// its sequence number.
    pub(crate) fn send(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags | NLM_F_REQUEST;
        header.sequence_number = self.seq;
        let mut nl = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        nl.finalize();
        let mut bytes = vec![0u8; nl.buffer_len()];
        nl.serialize(&mut bytes);
        self.sock.send(&bytes, 0)?;
        Ok(self.seq)
    }

    /// Receives one datagram and returns the messages in it, and how many
    /// could not be parsed (they are skipped). `flags` are `MSG_*` flags
    /// (`MSG_DONTWAIT` to poll). A datagram larger than our buffer is
    /// reported as `ENOBUFS`: something was lost, so the caller resyncs.
    pub(crate) fn recv(
        &mut self,
        flags: i32,
    ) -> io::Result<(Vec<NetlinkMessage<RouteNetlinkMessage>>, usize)> {
        self.buf.clear();
        let n = self.sock.recv(&mut self.buf, flags | libc_msg_trunc())?;
        if n > self.buf.len() {
            return Err(io::Error::from_raw_os_error(ENOBUFS));
        }
        Ok(parse_messages(&self.buf))
    }

    /// Dumps with request `msg` and returns every answer message.
    pub(crate) fn dump(
        &mut self,
        msg: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, DumpError> {
        let seq = self.send(msg, NLM_F_DUMP)?;
        let mut out = Vec::new();
        let mut interrupted = false;
        loop {
            let (msgs, _bad) = self.recv(0)?;
            for m in msgs {
                if m.header.sequence_number != seq {
                    continue;
                }
                if m.header.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match m.payload {
                    NetlinkPayload::Done(_) => {
                        return if interrupted {
                            Err(DumpError::Interrupted)
                        } else {
                            Ok(out)
                        };
                    }
                    NetlinkPayload::Error(e) if e.code.is_some() => {
                        return Err(DumpError::Io(e.to_io()));
                    }
                    NetlinkPayload::InnerMessage(inner) => out.push(inner),
                    _ => {}
                }
            }
        }
    }

    /// Sends `msg` with `flags | NLM_F_ACK` and waits for the kernel's
    /// answer: `Ok` or the errno it reported.
    pub(crate) fn request(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        let seq = self.send(msg, flags | NLM_F_ACK)?;
        loop {
            let (msgs, _bad) = self.recv(0)?;
            for m in msgs {
                if m.header.sequence_number != seq {
                    continue;
                }
                if let NetlinkPayload::Error(e) = m.payload {
                    return match e.code {
                        None => Ok(()),
                        Some(_) => Err(e.to_io()),
                    };
                }
            }
        }
    }
}

/// `ENOBUFS` without pulling in libc for one constant: Linux's value.
pub(crate) const ENOBUFS: i32 = 105;

/// `MSG_TRUNC` (Linux): make `recv` return the real datagram length.
fn libc_msg_trunc() -> i32 {
    0x20
}

/// `MSG_DONTWAIT` (Linux).
pub(crate) const MSG_DONTWAIT: i32 = 0x40;

/// Splits a buffer of netlink messages (one datagram, or one FPM frame's
/// payload) and parses each one. Returns the parsed messages and the number
/// that failed to parse; a length that runs past the buffer ends the walk
/// and counts as one failure. Next-hop messages are left out (see
/// [`parse_ordered`]).
pub(crate) fn parse_messages(buf: &[u8]) -> (Vec<NetlinkMessage<RouteNetlinkMessage>>, usize) {
    let (all, bad) = parse_ordered(buf);
    let routes = all
        .into_iter()
        .filter_map(|m| match m {
            Parsed::Route(m) => Some(m),
            Parsed::NextHop { .. } => None,
        })
        .collect();
    (routes, bad)
}

/// `RTM_NEWNEXTHOP` and `RTM_DELNEXTHOP` (linux/rtnetlink.h), which
/// netlink-packet-route does not decode.
pub(crate) const RTM_NEWNEXTHOP: u16 = 104;
pub(crate) const RTM_DELNEXTHOP: u16 = 105;

/// One netlink message of a buffer, in order.
pub(crate) enum Parsed {
    /// Anything netlink-packet-route decodes.
    Route(NetlinkMessage<RouteNetlinkMessage>),
    /// A next-hop object message: its body after the netlink header, for
    /// [`crate::nexthop::decode`].
    NextHop { del: bool, body: Vec<u8> },
}

/// [`parse_messages`] keeping next-hop messages, in buffer order.
pub(crate) fn parse_ordered(buf: &[u8]) -> (Vec<Parsed>, usize) {
    let mut out = Vec::new();
    let mut bad = 0;
    let mut off = 0;
    while off < buf.len() {
        let rest = &buf[off..];
        let (len, kind) = match NetlinkBuffer::new_checked(rest) {
            Ok(b) => (b.length() as usize, b.message_type()),
            Err(_) => {
                bad += 1;
                break;
            }
        };
        if kind == RTM_NEWNEXTHOP || kind == RTM_DELNEXTHOP {
            // The 16-byte netlink header, then the body.
            out.push(Parsed::NextHop {
                del: kind == RTM_DELNEXTHOP,
                body: rest.get(16..len).unwrap_or(&[]).to_vec(),
            });
        } else {
            match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len]) {
                Ok(m) => out.push(Parsed::Route(m)),
                Err(e) => {
                    tracing::debug!(error = %e, "undecodable netlink message skipped");
                    bad += 1;
                }
            }
        }
        // Messages are 4-byte aligned (NLMSG_ALIGN).
        let step = (len + 3) & !3;
        if step == 0 {
            bad += 1;
            break;
        }
        off = off.saturating_add(step);
    }
    (out, bad)
}

/// An address message's own address: `IFA_LOCAL` for IPv4 (`IFA_ADDRESS`
/// is the peer on point-to-point links), `IFA_ADDRESS` for IPv6 (which has
/// no `IFA_LOCAL`). `None` for IPv6 link-local addresses: the kernel makes
/// one per interface from its MAC; neither direction mirrors them.
pub(crate) fn own_address(a: &AddressMessage) -> Option<IpAddr> {
    let local = a.attributes.iter().find_map(|x| match x {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    let addr = local.or_else(|| {
        a.attributes.iter().find_map(|x| match x {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })?;
    match addr {
        IpAddr::V6(v6) if is_link_local(v6) => None,
        a => Some(a),
    }
}

/// fe80::/10 (RFC 4291 §2.5.6).
pub(crate) fn is_link_local(a: std::net::Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

/// Why a route message is not forwarded as a route. Each reason is the
/// filter's justification; see [`decode_route`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Not IPv4 or IPv6 (MPLS, bridge, ...).
    Family,
    /// Not the main table: `local` holds the kernel's local/broadcast
    /// routes for the namespace's own addresses (the VR answers for those
    /// itself), other tables belong to policy routing we do not model.
    NotMainTable,
    /// A type the FIB does not forward by: local, broadcast, anycast,
    /// multicast, throw, nat.
    Kind,
    /// Source-specific (IPv6 `from`): a destination-only FIB cannot hold it.
    SourceSpecific,
    /// TOS-specific: it only matches packets with that TOS; the FIB ignores
    /// TOS, so installing it would misroute all others.
    Tos,
    /// A cached clone (IPv6 PMTU exception), not a configured route.
    Cloned,
    /// A link-local (fe80::/10) or multicast destination: link-local
    /// prefixes are never forwarded (RFC 4291 §2.5.6) and the kernel adds
    /// fe80::/64 on every interface by itself; multicast is not unicast
    /// forwarding.
    Scope,
    /// A unicast route with no gateway and no interface.
    NoNextHop,
    /// A multipath route none of whose next hops the caller takes (out of
    /// interfaces it does not mirror, or without a gateway): how many.
    NoNextHopTaken(usize),
}

/// A decoded route, before interface indexes are turned into names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawRoute {
    pub prefix: IpPrefix,
    /// `RTA_PRIORITY`: among routes for one prefix the lowest wins.
    pub metric: u32,
    pub target: RawTarget,
    /// Next hops of a multipath route left out: those with no gateway.
    pub extra_hops: usize,
}

/// A route's target with the interface as an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RawTarget {
    /// Through a gateway, on interface `oif` where given.
    Via {
        gw: IpAddr,
        oif: Option<u32>,
    },
    /// Directly on interface `oif`.
    Dev {
        oif: u32,
    },
    /// Several gateways (`RTA_MULTIPATH`): (gateway, interface, weight).
    Multipath(Vec<(IpAddr, Option<u32>, u16)>),
    /// Only a next-hop object's id (`RTA_NH_ID`): FRR with `fpm
    /// use-next-hop-groups`, or a kernel with `nexthop_compat_mode` 0.
    Group(u32),
    Blackhole,
    Unreachable,
    Prohibit,
}

fn route_addr(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn via_addr(v: &RouteVia) -> Option<IpAddr> {
    match v {
        RouteVia::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteVia::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// Gateway (`RTA_GATEWAY`, or `RTA_VIA` for an IPv4 route through an IPv6
/// next hop) among `attrs`.
fn gateway(attrs: &[RouteAttribute]) -> Option<IpAddr> {
    attrs.iter().find_map(|a| match a {
        RouteAttribute::Gateway(g) => route_addr(g),
        RouteAttribute::Via(v) => via_addr(v),
        _ => None,
    })
}

/// The key of a route message, `(prefix, metric)`, after the filters that
/// depend only on the header and destination. Enough to remove a route:
/// delete messages need not repeat the next hops (zebra's do not).
pub(crate) fn decode_route_key(msg: &RouteMessage) -> Result<(IpPrefix, u32), Skip> {
    let h = &msg.header;
    let attrs = &msg.attributes;
    match h.address_family {
        AddressFamily::Inet | AddressFamily::Inet6 => {}
        _ => return Err(Skip::Family),
    }
    // RTA_TABLE carries ids above 255; the header field then says
    // RT_TABLE_UNSPEC or RT_TABLE_COMPAT.
    let table = attrs
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(h.table));
    if table != RT_TABLE_MAIN {
        return Err(Skip::NotMainTable);
    }
    if h.flags.contains(RouteFlags::Cloned) {
        return Err(Skip::Cloned);
    }
    if h.source_prefix_length != 0 {
        return Err(Skip::SourceSpecific);
    }
    if h.tos != 0 {
        return Err(Skip::Tos);
    }
    let dst = attrs
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Destination(d) => route_addr(d),
            _ => None,
        })
        .unwrap_or(match h.address_family {
            AddressFamily::Inet => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            _ => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        });
    let prefix =
        IpPrefix::new_truncating(dst, h.destination_prefix_length).map_err(|_| Skip::Family)?;
    match prefix.addr() {
        IpAddr::V6(a) if is_link_local(a) => return Err(Skip::Scope),
        a if a.is_multicast() => return Err(Skip::Scope),
        _ => {}
    }
    let metric = attrs
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Priority(p) => Some(*p),
            _ => None,
        })
        .unwrap_or(0);
    Ok((prefix, metric))
}

/// Decodes a route message, applying the filters every producer shares.
pub(crate) fn decode_route(msg: &RouteMessage) -> Result<RawRoute, Skip> {
    decode_route_out_of(msg, |_| true)
}

/// [`decode_route`], keeping of a multipath route only the next hops out
/// of an interface `out` takes (its index, `None` for none): they are
/// chosen before the route is cut to what a group may hold, so that next
/// hops the caller would drop cannot push out the ones it keeps. Those left
/// out are counted in [`RawRoute::extra_hops`].
pub(crate) fn decode_route_out_of(
    msg: &RouteMessage,
    out: impl Fn(Option<u32>) -> bool,
) -> Result<RawRoute, Skip> {
    let (prefix, metric) = decode_route_key(msg)?;
    let h = &msg.header;
    let attrs = &msg.attributes;
    let mut extra_hops = 0;
    let target = match h.kind {
        RouteType::BlackHole => RawTarget::Blackhole,
        RouteType::Unreachable => RawTarget::Unreachable,
        RouteType::Prohibit => RawTarget::Prohibit,
        RouteType::Unicast => {
            let oif = attrs.iter().find_map(|a| match a {
                RouteAttribute::Oif(i) => Some(*i),
                _ => None,
            });
            let multipath = attrs.iter().find_map(|a| match a {
                RouteAttribute::MultiPath(hops) => Some(hops),
                _ => None,
            });
            if let Some(hops) = multipath {
                // ECMP: every next hop with a gateway out of an interface
                // the caller takes, its weight the kernel's `rtnh_hops` + 1;
                // one without (a device-only next hop) has nothing the VR
                // can resolve, and is counted.
                let mut gws: Vec<(IpAddr, Option<u32>, u16)> = hops
                    .iter()
                    .filter_map(|h| {
                        let oif = (h.interface_index != 0).then_some(h.interface_index);
                        out(oif).then_some(())?;
                        Some((gateway(&h.attributes)?, oif, u16::from(h.hops) + 1))
                    })
                    .collect();
                extra_hops = hops.len() - gws.len();
                gws.sort_unstable();
                // Past what a group may hold (a VR uses 64), left out and
                // counted: one 64 KiB message can name thousands.
                extra_hops += gws.len().saturating_sub(MAX_GROUP_MEMBERS);
                gws.truncate(MAX_GROUP_MEMBERS);
                match gws.len() {
                    0 => return Err(Skip::NoNextHopTaken(hops.len())),
                    1 => RawTarget::Via {
                        gw: gws[0].0,
                        oif: gws[0].1,
                    },
                    _ => RawTarget::Multipath(gws),
                }
            } else {
                match (gateway(attrs), oif) {
                    (Some(gw), oif) => RawTarget::Via { gw, oif },
                    (None, Some(oif)) => RawTarget::Dev { oif },
                    (None, None) => match attrs.iter().find_map(|a| match a {
                        RouteAttribute::NhId(id) => Some(*id),
                        _ => None,
                    }) {
                        Some(id) => RawTarget::Group(id),
                        None => return Err(Skip::NoNextHop),
                    },
                }
            }
        }
        _ => return Err(Skip::Kind),
    };
    Ok(RawRoute {
        prefix,
        metric,
        target,
        extra_hops,
    })
}

/// Most members a next-hop group may have, and most gateways a multipath
/// route keeps: what FRR sends at most as Debian builds it
/// (`--enable-multipath=256`, `zebra --version`). A VR uses 64 paths of a
/// route (`Paths::MAX`); a producer's larger group (8,189 fit in one
/// 64 KiB message) would only cost memory and a scan per message.
pub const MAX_GROUP_MEMBERS: usize = 256;

/// `RTA_MULTIPATH` for `hops`, as the kernel and zebra send it (for
/// encoding test frames).
pub(crate) fn multipath_attr(hops: &[crate::event::Hop]) -> RouteAttribute {
    multipath_attr_out_of(hops, |_| 0)
}

/// [`multipath_attr`] with each next hop's interface index, `oif(k)` for
/// the `k`th (0: none).
pub(crate) fn multipath_attr_out_of(
    hops: &[crate::event::Hop],
    oif: impl Fn(usize) -> u32,
) -> RouteAttribute {
    use netlink_packet_route::route::RouteNextHop;
    RouteAttribute::MultiPath(
        hops.iter()
            .enumerate()
            .map(|(k, h)| {
                let mut nh = RouteNextHop::default();
                nh.interface_index = oif(k);
                nh.hops = (h.weight.clamp(1, 256) - 1) as u8;
                nh.attributes.push(RouteAttribute::Gateway(match h.gw {
                    IpAddr::V4(a) => RouteAddress::Inet(a),
                    IpAddr::V6(a) => RouteAddress::Inet6(a),
                }));
                nh
            })
            .collect(),
    )
}

/// A route message for `prefix` in the main table (for encoding FPM test
/// frames and for address-free route requests).
pub(crate) fn route_message(prefix: IpPrefix, kind: RouteType, gw: Option<IpAddr>) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = if prefix.addr().is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.destination_prefix_length = prefix.len();
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    m.header.kind = kind;
    m.attributes
        .push(RouteAttribute::Destination(match prefix.addr() {
            IpAddr::V4(a) => RouteAddress::Inet(a),
            IpAddr::V6(a) => RouteAddress::Inet6(a),
        }));
    if let Some(gw) = gw {
        m.attributes.push(RouteAttribute::Gateway(match gw {
            IpAddr::V4(a) => RouteAddress::Inet(a),
            IpAddr::V6(a) => RouteAddress::Inet6(a),
        }));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "203.0.113.0/24";

    /// `n` next hops, gateways 10.0.0.0 up, weight 1, no interface.
    fn gateways(n: u32) -> Vec<crate::event::Hop> {
        (0..n)
            .map(|k| crate::event::Hop {
                gw: IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + k)),
                ifname: None,
                weight: 1,
            })
            .collect()
    }

    /// A multipath route names at most what a next-hop group may hold; the
    /// rest are left out and counted, as next hops without a gateway are.
    #[test]
    fn a_multipath_route_keeps_at_most_a_groups_worth_of_hops() {
        let most = MAX_GROUP_MEMBERS;
        let hops = gateways(most as u32 + 44);
        let mut m = route_message(PREFIX.parse().expect("prefix"), RouteType::Unicast, None);
        m.attributes.push(multipath_attr(&hops));
        let r = decode_route(&m).expect("a route");
        let RawTarget::Multipath(gws) = r.target else {
            panic!("multipath");
        };
        assert_eq!((gws.len(), r.extra_hops), (most, 44));
        assert_eq!(gws[0].0, hops[0].gw, "the first, in order, are kept");
    }

    /// Next hops out of interfaces the caller drops are left out before
    /// the route is cut to a group's size: 300 of them, ordered first,
    /// cannot push out the 20 it keeps.
    #[test]
    fn hops_the_caller_drops_do_not_push_out_the_ones_it_keeps() {
        let hops = gateways(320);
        let mut m = route_message(PREFIX.parse().expect("prefix"), RouteType::Unicast, None);
        // The first 300 (the lowest gateways) out of interface 7, the
        // last 20 out of interface 3.
        m.attributes.push(multipath_attr_out_of(
            &hops,
            |k| if k < 300 { 7 } else { 3 },
        ));
        let r = decode_route_out_of(&m, |oif| oif == Some(3)).expect("a route");
        let RawTarget::Multipath(gws) = r.target else {
            panic!("multipath");
        };
        assert_eq!((gws.len(), r.extra_hops), (20, 300));
        assert!(gws.iter().all(|&(_, oif, _)| oif == Some(3)));
        assert_eq!(gws[0].0, hops[300].gw);
        // Taking every interface, the cut keeps the lowest 256.
        let r = decode_route(&m).expect("a route");
        let RawTarget::Multipath(gws) = r.target else {
            panic!("multipath");
        };
        assert_eq!((gws.len(), r.extra_hops), (MAX_GROUP_MEMBERS, 64));
        assert!(gws.iter().all(|&(_, oif, _)| oif == Some(7)));
        // None taken: the route is skipped, saying how many were left out.
        assert!(matches!(
            decode_route_out_of(&m, |_| false),
            Err(Skip::NoNextHopTaken(320))
        ));
    }
}
