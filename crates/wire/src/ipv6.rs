//! IPv6 (RFC 8200): the fixed header, the extension header chain and a
//! few address helpers.
//!
//! ```text
//!  0       4               12                                      32
//! +-------+---------------+----------------------------------------+
//! |version| traffic class |               flow label               |
//! +-------+---------------+-------+----------------+---------------+
//! |        payload length         |  next header   |   hop limit   |
//! +-------------------------------+----------------+---------------+
//! |                  source address (16 bytes)                     |
//! +----------------------------------------------------------------+
//! |                destination address (16 bytes)                  |
//! +----------------------------------------------------------------+
//! ```

use core::net::Ipv6Addr;

use crate::ip::IpProtocol;
use crate::{Error, Result};

mod field {
    use crate::Field;

    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
    pub const PAYLOAD: usize = 40;
}

/// Flow label: the low 20 bits of the first word.
const FLOW_MASK: u32 = 0x000f_ffff;

/// A zero-copy view of an IPv6 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than the header or the payload length it announces.
    pub const fn new_unchecked(buffer: T) -> Ipv6Packet<T> {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that
    ///
    /// 1. the buffer holds the 40-byte header, else [`Error::Truncated`];
    /// 2. the version is 6 (RFC 8200 §3), else [`Error::Malformed`];
    /// 3. the payload length fits in the buffer, else
    ///    [`Error::Truncated`].
    ///
    /// The buffer may be longer than the packet (link-layer padding).
    /// Jumbograms (RFC 2675, payload length 0 plus a Hop-by-Hop option) are
    /// not recognised: they look like an empty payload.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::PAYLOAD {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::Malformed);
        }
        if field::PAYLOAD + usize::from(self.payload_len()) > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole wrapped buffer, including any bytes past the payload.
    pub fn buffer(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn first_word(&self) -> u32 {
        crate::be32(&self.buffer.as_ref()[field::VER_TC_FLOW])
    }

    /// The version field (6 for a checked packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class: DSCP and ECN (RFC 8200 §7).
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// Flow label, 20 bits (RFC 6437).
    pub fn flow_label(&self) -> u32 {
        self.first_word() & FLOW_MASK
    }

    /// Payload length in bytes, extension headers included.
    pub fn payload_len(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// The first next header value after the fixed header.
    pub fn next_header(&self) -> IpProtocol {
        self.buffer.as_ref()[field::NXT_HDR].into()
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(crate::array::<16>(&self.buffer.as_ref()[field::SRC_ADDR]))
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(crate::array::<16>(&self.buffer.as_ref()[field::DST_ADDR]))
    }

    /// The payload, `payload_len()` bytes after the fixed header; bytes past
    /// it (link-layer padding) are excluded.
    pub fn payload(&self) -> &[u8] {
        let end = field::PAYLOAD + usize::from(self.payload_len());
        &self.buffer.as_ref()[field::PAYLOAD..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// The whole wrapped buffer, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    fn set_first_word(&mut self, v: u32) {
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the version field; only the low four bits are used.
    pub fn set_version(&mut self, version: u8) {
        let w = (self.first_word() & 0x0fff_ffff) | (u32::from(version & 0x0f) << 28);
        self.set_first_word(w);
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let w = (self.first_word() & 0xf00f_ffff) | (u32::from(tc) << 20);
        self.set_first_word(w);
    }

    /// Sets the flow label; only the low 20 bits are used.
    pub fn set_flow_label(&mut self, label: u32) {
        let w = (self.first_word() & !FLOW_MASK) | (label & FLOW_MASK);
        self.set_first_word(w);
    }

    /// Sets the payload length. This changes what [`Self::payload`] covers:
    /// call [`Self::check_len`] again before using it.
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the first next header value.
    pub fn set_next_header(&mut self, next_header: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = next_header.into();
    }

    /// Sets the hop limit. IPv6 has no header checksum to update.
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hop_limit;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = field::PAYLOAD + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[field::PAYLOAD..end]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A parsed fixed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// The first next header value.
    pub next_header: IpProtocol,
    /// Payload length, extension headers included.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Reads the fixed header after [`Ipv6Packet::check_len`]. Traffic
    /// class and flow label are not represented.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        packet.check_len()?;
        Ok(Ipv6Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
        })
    }

    /// Length of the emitted header: always 40.
    pub const fn buffer_len(&self) -> usize {
        field::PAYLOAD
    }

    /// Writes the fixed header with traffic class and flow label 0. The
    /// buffer must hold at least [`Self::buffer_len`] bytes and
    /// `payload_len` must fit in 16 bits. The payload is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) {
        packet.set_first_word(6 << 28);
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

/// What a walk over the extension header chain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6ExtWalk {
    /// The first header that is not a walked extension header: an upper
    /// layer protocol, ESP, No Next Header, or anything unknown.
    pub upper: IpProtocol,
    /// Offset of that header inside the IPv6 payload.
    pub offset: usize,
    /// The Fragment header, if one was crossed.
    pub fragment: Option<Ipv6FragInfo>,
    /// Whether the chain starts with a Hop-by-Hop Options header.
    pub has_hop_by_hop: bool,
    /// Whether the Hop-by-Hop header carries a Router Alert option
    /// (RFC 2711, option type 5).
    pub router_alert: bool,
    /// Routing type of the (last) Routing header, if any.
    pub routing_type: Option<u8>,
    /// Segments Left of that Routing header; 0 when there is none.
    pub segments_left: u8,
}

/// The fields of an IPv6 Fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6FragInfo {
    /// Fragment offset in bytes (the field counts 8-byte units).
    pub offset: u16,
    /// The M flag: more fragments follow.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// Upper bound on the extension headers walked before giving up. RFC 8200
/// sets none, but a legitimate chain has at most one of each of the six
/// types (two Destination Options), so 16 leaves room while bounding
/// the work an attacker can cause.
pub const MAX_EXTENSION_HEADERS: usize = 16;

/// Length of a Fragment header, fixed (RFC 8200 §4.5).
const FRAG_HEADER_LEN: usize = 8;
/// Hop-by-Hop option type of the Router Alert option (RFC 2711 §2.1).
const OPT_ROUTER_ALERT: u8 = 5;
/// Hop-by-Hop option type of Pad1, the only option without a length
/// octet (RFC 8200 §4.2).
const OPT_PAD1: u8 = 0;

/// Walks the extension header chain of an IPv6 payload (RFC 8200 §4).
///
/// `first` is the next header value of the fixed header and `payload` the
/// IPv6 payload ([`Ipv6Packet::payload`]). The walk crosses Hop-by-Hop
/// Options (0), Routing (43), Fragment (44), Destination Options (60) and
/// AH (51), and stops at anything else, returning it as
/// [`Ipv6ExtWalk::upper`].
///
/// * A Hop-by-Hop header anywhere but first is [`Error::Malformed`]
///   (RFC 8200 §4.1: it "MUST immediately follow the IPv6 header").
/// * Generic headers are `(hdr_ext_len + 1) * 8` bytes (RFC 8200 §4.3-4.6),
///   AH is `(payload_len + 2) * 4` bytes (RFC 4302 §2.2), a Fragment
///   header is 8 bytes.
/// * A header running past the payload is [`Error::Truncated`]; a
///   Hop-by-Hop option running past its header is [`Error::Malformed`].
/// * At a Fragment header with a nonzero offset the walk stops: the rest is
///   not a header chain but the middle of the fragmentable part
///   (RFC 8200 §4.5). `upper` is then the Fragment header's next header and
///   `offset` points just past the Fragment header.
/// * More than [`MAX_EXTENSION_HEADERS`] headers is [`Error::Malformed`].
pub fn walk_extension_headers(first: IpProtocol, payload: &[u8]) -> Result<Ipv6ExtWalk> {
    let mut walk = Ipv6ExtWalk {
        upper: first,
        offset: 0,
        fragment: None,
        has_hop_by_hop: false,
        router_alert: false,
        routing_type: None,
        segments_left: 0,
    };
    for index in 0..=MAX_EXTENSION_HEADERS {
        let rest = &payload[walk.offset..];
        let header_len = match walk.upper {
            IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Opts => {
                let len = rest.get(1).ok_or(Error::Truncated)?;
                (usize::from(*len) + 1) * 8
            }
            IpProtocol::Ah => {
                let len = rest.get(1).ok_or(Error::Truncated)?;
                (usize::from(*len) + 2) * 4
            }
            IpProtocol::Ipv6Frag => FRAG_HEADER_LEN,
            _ => return Ok(walk),
        };
        if index == MAX_EXTENSION_HEADERS {
            return Err(Error::Malformed);
        }
        let header = rest.get(..header_len).ok_or(Error::Truncated)?;
        let next = IpProtocol::from(header[0]);
        match walk.upper {
            IpProtocol::HopByHop => {
                if index != 0 {
                    return Err(Error::Malformed);
                }
                walk.has_hop_by_hop = true;
                walk.router_alert = hop_by_hop_router_alert(&header[2..])?;
            }
            IpProtocol::Ipv6Route => {
                // RFC 8200 §4.4: routing type at byte 2, segments left at 3.
                walk.routing_type = Some(header[2]);
                walk.segments_left = header[3];
            }
            IpProtocol::Ipv6Frag => {
                let off_flags = crate::be16(&header[2..4]);
                let info = Ipv6FragInfo {
                    offset: off_flags & 0xfff8,
                    more: off_flags & 0x0001 != 0,
                    ident: crate::be32(&header[4..8]),
                };
                walk.fragment = Some(info);
                if info.offset != 0 {
                    walk.upper = next;
                    walk.offset += header_len;
                    return Ok(walk);
                }
            }
            _ => {}
        }
        walk.upper = next;
        walk.offset += header_len;
    }
    // The last iteration always returns: either the header is not walked,
    // or the count check fires.
    Err(Error::Malformed)
}

/// Scans the TLV options of a Hop-by-Hop header (RFC 8200 §4.2) for a
/// Router Alert.
fn hop_by_hop_router_alert(mut options: &[u8]) -> Result<bool> {
    let mut found = false;
    while let Some((&kind, rest)) = options.split_first() {
        if kind == OPT_PAD1 {
            options = rest;
            continue;
        }
        let len = usize::from(*rest.first().ok_or(Error::Malformed)?);
        if rest.len() < 1 + len {
            return Err(Error::Malformed);
        }
        if kind == OPT_ROUTER_ALERT {
            found = true;
        }
        options = &rest[1 + len..];
    }
    Ok(found)
}

/// `ff02::1`, all nodes on the link (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// `ff02::2`, all routers on the link (RFC 4291 §2.7.1).
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// `ff02::16`, all MLDv2-capable routers (RFC 3810 §5.2.14).
pub const ALL_MLDV2_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);

/// Whether `addr` is a link-local unicast address, `fe80::/10`
/// (RFC 4291 §2.5.6).
pub const fn is_link_local(addr: &Ipv6Addr) -> bool {
    addr.segments()[0] & 0xffc0 == 0xfe80
}

/// The solicited-node multicast address of `addr`: `ff02::1:ff00:0/104`
/// plus the low 24 bits of `addr` (RFC 4291 §2.7.1).
pub const fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | o[13] as u16,
        ((o[14] as u16) << 8) | o[15] as u16,
    )
}

/// Whether `addr` is a solicited-node multicast address.
pub const fn is_solicited_node(addr: &Ipv6Addr) -> bool {
    let s = addr.segments();
    s[0] == 0xff02
        && s[1] == 0
        && s[2] == 0
        && s[3] == 0
        && s[4] == 0
        && s[5] == 1
        && s[6] >> 8 == 0xff
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz;
    use proptest::prelude::*;

    /// A Neighbor Solicitation for 2001:db8::1 with a source link-layer
    /// address option, as captured.
    const NS: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x01, 0x87, 0x00, 0x42, 0xea, 0x00,
        0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x01, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56,
    ];

    /// An MLDv2 report behind a Hop-by-Hop header with Router Alert and
    /// PadN (RFC 3810 §5.2), as captured.
    const MLD: [u8; 76] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x24, 0x00, 0x01, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x16, // fixed header
        0x3a, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, // HBH: RA, PadN
        0x8f, 0x00, 0xed, 0x4b, 0x00, 0x00, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0xff, 0x02, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x01,
    ];

    #[test]
    fn parse_captured_ns() {
        let p = Ipv6Packet::new_checked(&NS[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0);
        assert_eq!(p.flow_label(), 0);
        assert_eq!(p.payload_len(), 32);
        assert_eq!(p.next_header(), IpProtocol::Icmpv6);
        assert_eq!(p.hop_limit(), 255);
        let src: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        let dst: Ipv6Addr = "ff02::1:ff00:1".parse().unwrap();
        assert_eq!(p.src_addr(), src);
        assert_eq!(p.dst_addr(), dst);
        assert_eq!(p.payload(), &NS[40..]);
        assert_eq!(
            Ipv6Repr::parse(&p).unwrap(),
            Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::Icmpv6,
                payload_len: 32,
                hop_limit: 255,
            }
        );
        let walk = walk_extension_headers(p.next_header(), p.payload()).unwrap();
        assert_eq!(walk.upper, IpProtocol::Icmpv6);
        assert_eq!(walk.offset, 0);
        assert!(!walk.has_hop_by_hop && walk.fragment.is_none());
        assert!(is_link_local(&src));
        assert_eq!(solicited_node(&"2001:db8::1".parse().unwrap()), dst);
        assert!(is_solicited_node(&dst));
    }

    #[test]
    fn padding_is_not_payload() {
        let mut buf = [0u8; 80];
        buf[..72].copy_from_slice(&NS);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload().len(), 32);
    }

    #[test]
    fn check_len_errors() {
        assert_eq!(
            Ipv6Packet::new_checked(&NS[..39]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Ipv6Packet::new_checked(&NS[..71]).unwrap_err(),
            Error::Truncated
        );
        let mut v4 = NS;
        v4[0] = 0x45;
        assert_eq!(
            Ipv6Packet::new_checked(&v4[..]).unwrap_err(),
            Error::Malformed
        );
    }

    #[test]
    fn walk_hop_by_hop_router_alert() {
        let p = Ipv6Packet::new_checked(&MLD[..]).unwrap();
        assert_eq!(p.next_header(), IpProtocol::HopByHop);
        let walk = walk_extension_headers(p.next_header(), p.payload()).unwrap();
        assert_eq!(
            walk,
            Ipv6ExtWalk {
                upper: IpProtocol::Icmpv6,
                offset: 8,
                fragment: None,
                has_hop_by_hop: true,
                router_alert: true,
                routing_type: None,
                segments_left: 0,
            }
        );
        assert_eq!(p.payload()[walk.offset], 143);
    }

    /// Builds a payload out of `(next header, header bytes)` pairs.
    fn chain(headers: &[&[u8]], upper: &[u8]) -> std::vec::Vec<u8> {
        let mut v = std::vec::Vec::new();
        for h in headers {
            v.extend_from_slice(h);
        }
        v.extend_from_slice(upper);
        v
    }

    #[test]
    fn walk_full_chain() {
        let hbh: &[u8] = &[60, 0, 1, 4, 0, 0, 0, 0]; // -> DestOpts, PadN
        let dst: &[u8] = &[43, 0, 1, 4, 0, 0, 0, 0]; // -> Routing
        let rt: &[u8] = &[
            44, 2, 4, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]; // SRH, 3 left
        let frag: &[u8] = &[51, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]; // offset 0, M
        let ah: &[u8] = &[17, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]; // (1 + 2) * 4 = 12
        let payload = chain(&[hbh, dst, rt, frag, ah], &[0; 8]);
        let walk = walk_extension_headers(IpProtocol::HopByHop, &payload).unwrap();
        assert_eq!(walk.upper, IpProtocol::Udp);
        assert_eq!(walk.offset, 8 + 8 + 24 + 8 + 12);
        assert!(walk.has_hop_by_hop && !walk.router_alert);
        assert_eq!(walk.routing_type, Some(4));
        assert_eq!(walk.segments_left, 3);
        assert_eq!(
            walk.fragment,
            Some(Ipv6FragInfo {
                offset: 0,
                more: true,
                ident: 0xdead_beef
            })
        );
    }

    #[test]
    fn walk_stops_at_non_first_fragment() {
        // Offset 1480 bytes = 185 units, M clear; what follows is TCP data
        // that looks like a Hop-by-Hop header and must not be walked.
        let frag: &[u8] = &[0, 0, 0x05, 0xc8, 0, 0, 0, 7];
        let payload = chain(&[frag], &[6, 0xff]);
        let walk = walk_extension_headers(IpProtocol::Ipv6Frag, &payload).unwrap();
        assert_eq!(walk.upper, IpProtocol::HopByHop);
        assert_eq!(walk.offset, 8);
        assert_eq!(
            walk.fragment,
            Some(Ipv6FragInfo {
                offset: 1480,
                more: false,
                ident: 7
            })
        );
    }

    #[test]
    fn walk_errors() {
        // Hop-by-Hop after Destination Options.
        let payload = chain(
            &[&[0, 0, 1, 4, 0, 0, 0, 0], &[58, 0, 1, 4, 0, 0, 0, 0]],
            &[],
        );
        assert_eq!(
            walk_extension_headers(IpProtocol::Ipv6Opts, &payload),
            Err(Error::Malformed)
        );
        // Header longer than the payload.
        assert_eq!(
            walk_extension_headers(IpProtocol::Ipv6Opts, &[58, 1, 1, 4, 0, 0, 0, 0]),
            Err(Error::Truncated)
        );
        assert_eq!(
            walk_extension_headers(IpProtocol::Ipv6Route, &[58]),
            Err(Error::Truncated)
        );
        assert_eq!(
            walk_extension_headers(IpProtocol::Ipv6Frag, &[58, 0, 0, 0]),
            Err(Error::Truncated)
        );
        // Hop-by-Hop option overrunning its header.
        assert_eq!(
            walk_extension_headers(IpProtocol::HopByHop, &[58, 0, 5, 9, 0, 0, 0, 0]),
            Err(Error::Malformed)
        );
        // 17 Destination Options headers in a row.
        let mut long = std::vec::Vec::new();
        for _ in 0..17 {
            long.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
        }
        assert_eq!(
            walk_extension_headers(IpProtocol::Ipv6Opts, &long),
            Err(Error::Malformed)
        );
        // 16 are fine.
        let sixteen = &mut long[..16 * 8];
        sixteen[15 * 8] = 59;
        let walk = walk_extension_headers(IpProtocol::Ipv6Opts, sixteen).unwrap();
        assert_eq!(walk.upper, IpProtocol::Ipv6NoNxt);
        assert_eq!(walk.offset, 128);
        // An empty payload with an upper-layer protocol is fine.
        assert_eq!(
            walk_extension_headers(IpProtocol::Tcp, &[]).unwrap().offset,
            0
        );
        // ESP stops the walk.
        assert_eq!(
            walk_extension_headers(IpProtocol::Esp, &[0; 4])
                .unwrap()
                .upper,
            IpProtocol::Esp
        );
    }

    #[test]
    fn address_helpers() {
        assert!(is_link_local(&"fe80::1".parse().unwrap()));
        assert!(is_link_local(&"febf:ffff::1".parse().unwrap()));
        assert!(!is_link_local(&"fec0::1".parse().unwrap()));
        assert!(!is_link_local(&"2001:db8::1".parse().unwrap()));
        assert_eq!(
            solicited_node(&"2001:db8::abcd:ef12:3456".parse().unwrap()),
            "ff02::1:ff12:3456".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(ALL_NODES, "ff02::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ALL_ROUTERS, "ff02::2".parse::<Ipv6Addr>().unwrap());
        assert!(!is_solicited_node(&ALL_NODES));
    }

    #[test]
    fn setters_keep_neighbouring_bits() {
        let mut buf = NS;
        let mut p = Ipv6Packet::new_checked(&mut buf[..]).unwrap();
        p.set_traffic_class(0xb8);
        p.set_flow_label(0xabcde);
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 0xb8, 0xabcde)
        );
        p.set_flow_label(0xfff_ffff);
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 0xb8, 0xfffff)
        );
        p.set_version(6);
        p.set_traffic_class(0);
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 0, 0xfffff)
        );
        p.set_hop_limit(1);
        assert_eq!(p.hop_limit(), 1);
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn emit_into_junk_then_parse(
            src in any::<[u8; 16]>(),
            dst in any::<[u8; 16]>(),
            next_header in any::<u8>(),
            payload_len in 0..40usize,
            hop_limit in any::<u8>(),
        ) {
            let repr = Ipv6Repr {
                src_addr: Ipv6Addr::from(src),
                dst_addr: Ipv6Addr::from(dst),
                next_header: next_header.into(),
                payload_len,
                hop_limit,
            };
            let mut buf = [0xa5u8; 80];
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
            let p = Ipv6Packet::new_checked(&buf[..repr.buffer_len() + payload_len]).unwrap();
            prop_assert_eq!(p.traffic_class(), 0);
            prop_assert_eq!(p.flow_label(), 0);
            prop_assert!(p.payload().iter().all(|&b| b == 0xa5));
            prop_assert_eq!(Ipv6Repr::parse(&p).unwrap(), repr);
        }

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(120)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_random_v6(mut bytes in fuzz::bytes(120)) {
            if let Some(b) = bytes.first_mut() {
                *b = 0x60 | (*b & 0x0f);
            }
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated(bytes in fuzz::mutated(&MLD)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_walk_random(first in any::<u8>(), bytes in fuzz::bytes(200)) {
            let _ = walk_extension_headers(first.into(), &bytes);
        }

        #[test]
        fn no_panic_walk_chains(
            headers in proptest::collection::vec(
                (prop::sample::select(vec![0u8, 43, 44, 51, 60, 59, 6]), 0..4u8, any::<[u8; 6]>()),
                0..20,
            ),
            cut in any::<prop::sample::Index>(),
        ) {
            // Chains of plausible headers with small lengths, so the walk
            // gets deep before the bytes run out.
            let mut v = std::vec::Vec::new();
            for (next, len, body) in &headers {
                v.push(*next);
                v.push(*len);
                v.extend_from_slice(body);
                v.resize(v.len() + usize::from(*len) * 8, 0x01);
            }
            let n = cut.index(v.len() + 1);
            let first = headers.first().map_or(0, |h| h.0);
            let _ = walk_extension_headers(first.into(), &v[..n]);
            let _ = walk_extension_headers(first.into(), &v);
        }
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(p) = Ipv6Packet::new_checked(bytes) {
            let _ = (
                p.version(),
                p.traffic_class(),
                p.flow_label(),
                p.payload_len(),
            );
            let _ = (p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr());
            let _ = walk_extension_headers(p.next_header(), p.payload());
            Ipv6Repr::parse(&p).unwrap();
        }
        let _ = Ipv6Repr::parse(&Ipv6Packet::new_unchecked(bytes));
    }
}
