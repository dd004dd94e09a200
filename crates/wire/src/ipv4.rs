//! IPv4 (RFC 791), with the receive checks of RFC 1812 §5.2.2.
//!
//! ```text
//!  0       4       8              16    19                        32
//! +-------+-------+---------------+-------------------------------+
//! |version|  IHL  |   DSCP/ECN    |         total length          |
//! +-------+-------+---------------+-----+-------------------------+
//! |        identification         |flags|    fragment offset      |
//! +---------------+---------------+-----+-------------------------+
//! |      TTL      |   protocol    |        header checksum        |
//! +---------------+---------------+-------------------------------+
//! |                        source address                         |
//! +---------------------------------------------------------------+
//! |                      destination address                      |
//! +---------------------------------------------------------------+
//! |             options (IHL * 4 - 20 bytes)                      |
//! +---------------------------------------------------------------+
//! ```

use core::fmt;
use core::net::Ipv4Addr;

use crate::checksum;
use crate::ip::IpProtocol;
use crate::{Error, Result};

mod field {
    use crate::Field;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
    pub const OPTIONS: usize = 20;
}

/// Don't Fragment flag in the flags/fragment offset word (RFC 791 §3.1).
const DF: u16 = 0x4000;
/// More Fragments flag.
const MF: u16 = 0x2000;
/// Fragment offset, in units of 8 bytes.
const OFFSET_MASK: u16 = 0x1fff;

/// A zero-copy view of an IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Length of a header without options.
    pub const MIN_HEADER_LEN: usize = field::OPTIONS;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than the header or the lengths it announces.
    pub const fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// The structural checks of RFC 1812 §5.2.2 (all but the checksum,
    /// see [`Self::verify_checksum`]):
    ///
    /// 1. the buffer holds a minimal 20-byte header, else
    ///    [`Error::Truncated`];
    /// 2. the version is 4, else [`Error::Malformed`];
    /// 3. the IHL is at least 5 (RFC 791 §3.1), else [`Error::Malformed`],
    ///    and the header fits in the buffer, else [`Error::Truncated`];
    /// 4. the total length is at least the header length, else
    ///    [`Error::Malformed`], and fits in the buffer, else
    ///    [`Error::Truncated`].
    ///
    /// The buffer may be longer than the total length (Ethernet pads
    /// frames to 60 bytes); the excess is not part of [`Self::payload`].
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::OPTIONS {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::Malformed);
        }
        let header_len = usize::from(self.header_len());
        if header_len < field::OPTIONS {
            return Err(Error::Malformed);
        }
        if header_len > len {
            return Err(Error::Truncated);
        }
        let total_len = usize::from(self.total_len());
        if total_len < header_len {
            return Err(Error::Malformed);
        }
        if total_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole wrapped buffer, including any bytes past the total length.
    pub fn buffer(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The version field (4 for a checked packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4), options included.
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The DSCP and ECN bits (the former type of service byte, RFC 2474
    /// §3 and RFC 3168 §5).
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Total length of the packet in bytes, header included.
    pub fn total_len(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// Identification, used to reassemble fragments.
    pub fn ident(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::IDENT])
    }

    fn flg_off(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::FLG_OFF])
    }

    /// The Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.flg_off() & DF != 0
    }

    /// The More Fragments flag.
    pub fn more_frags(&self) -> bool {
        self.flg_off() & MF != 0
    }

    /// Fragment offset in **bytes** (the field counts 8-byte units).
    pub fn frag_offset(&self) -> u16 {
        (self.flg_off() & OFFSET_MASK) << 3
    }

    /// Whether this packet is a fragment: More Fragments set or a nonzero
    /// offset.
    pub fn is_fragment(&self) -> bool {
        self.flg_off() & (MF | OFFSET_MASK) != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> IpProtocol {
        self.buffer.as_ref()[field::PROTOCOL].into()
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(crate::array::<4>(&self.buffer.as_ref()[field::SRC_ADDR]))
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(crate::array::<4>(&self.buffer.as_ref()[field::DST_ADDR]))
    }

    /// The options, `header_len() - 20` bytes, padding included.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..usize::from(self.header_len())]
    }

    /// Walks the options (RFC 791 §3.1 "Options").
    pub fn options_iter(&self) -> Ipv4OptionsIter<'_> {
        Ipv4OptionsIter::new(self.options())
    }

    /// The payload: from the end of the header to the total length. Bytes
    /// past the total length (link-layer padding) are excluded.
    pub fn payload(&self) -> &[u8] {
        let range = usize::from(self.header_len())..usize::from(self.total_len());
        &self.buffer.as_ref()[range]
    }

    /// Whether the header checksum verifies (RFC 1071 §1: the sum over the
    /// header, checksum included, is all ones).
    pub fn verify_checksum(&self) -> bool {
        let header = &self.buffer.as_ref()[..usize::from(self.header_len())];
        checksum::verifies(header)
    }
}

/// The header checksum field (`checksum`, as on the wire) once the TTL
/// drops by one, for [`Ipv4Packet::decrement_ttl`] and for a caller that
/// holds the header's bytes already (the forwarding fast path).
///
/// RFC 1624 for this one change: the TTL is the high byte of its 16-bit
/// word, so the header's one's-complement sum drops by 0x0100 and the
/// checksum rises by it, with the end-around carry. A sum that reaches
/// 0xffff becomes 0 as a full recomputation gives it (as Linux's
/// ip_decrease_ttl does).
#[inline(always)]
pub fn checksum_after_ttl_decrement(checksum: [u8; 2]) -> [u8; 2] {
    let c = u32::from(u16::from_be_bytes(checksum)) + 0x0100;
    ((c + u32::from(c >= 0xffff)) as u16).to_be_bytes()
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// The whole wrapped buffer, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the version field; only the low four bits are used.
    pub fn set_version(&mut self, version: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (version << 4);
    }

    /// Sets the header length in bytes (stored as IHL = `len / 4`). This
    /// moves the payload: call [`Self::check_len`] again before using it.
    pub fn set_header_len(&mut self, len: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) & 0x0f);
    }

    /// Sets the DSCP/ECN byte.
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }

    /// Sets the total length. This changes what [`Self::payload`] covers:
    /// call [`Self::check_len`] again before using it.
    pub fn set_total_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, ident: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&ident.to_be_bytes());
    }

    fn set_flg_off(&mut self, v: u16) {
        self.buffer.as_mut()[field::FLG_OFF].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the Don't Fragment flag.
    pub fn set_dont_frag(&mut self, value: bool) {
        let v = if value {
            self.flg_off() | DF
        } else {
            self.flg_off() & !DF
        };
        self.set_flg_off(v);
    }

    /// Sets the More Fragments flag.
    pub fn set_more_frags(&mut self, value: bool) {
        let v = if value {
            self.flg_off() | MF
        } else {
            self.flg_off() & !MF
        };
        self.set_flg_off(v);
    }

    /// Sets the fragment offset, given in **bytes**. RFC 791 §3.1 counts
    /// the offset in 8-byte units, so the low three bits of `bytes` are
    /// dropped.
    pub fn set_frag_offset(&mut self, bytes: u16) {
        let v = (self.flg_off() & !OFFSET_MASK) | (bytes >> 3);
        self.set_flg_off(v);
    }

    /// Sets the time to live. The checksum is not updated.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol. The checksum is not updated.
    pub fn set_protocol(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = protocol.into();
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, checksum: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&checksum.to_be_bytes());
    }

    /// Sets the source address. The checksum is not updated.
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address. The checksum is not updated.
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// Recomputes the header checksum over `header_len()` bytes.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let header_len = usize::from(self.header_len());
        let c = checksum::checksum(&self.buffer.as_ref()[..header_len]);
        self.set_checksum(c);
    }

    /// Decrements the TTL and updates the checksum incrementally (RFC 1812
    /// §5.3.1, and its §5.2.2 note on incremental update; RFC 1624).
    ///
    /// The caller checks `ttl() > 1` first (RFC 1812 §5.3.1: a router
    /// drops the packet and sends Time Exceeded instead). With a TTL of 0
    /// this does nothing rather than wrap to 255.
    #[inline]
    pub fn decrement_ttl(&mut self) {
        let b = self.buffer.as_mut();
        let (Some(&ttl), Some(&[c0, c1])) = (b.get(field::TTL), b.get(field::CHECKSUM)) else {
            return;
        };
        if ttl == 0 {
            return;
        }
        b[field::TTL] = ttl - 1;
        b[field::CHECKSUM].copy_from_slice(&checksum_after_ttl_decrement([c0, c1]));
    }

    /// The options, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let header_len = usize::from(self.header_len());
        &mut self.buffer.as_mut()[field::OPTIONS..header_len]
    }

    /// The payload, mutably (header length to total length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = usize::from(self.header_len())..usize::from(self.total_len());
        &mut self.buffer.as_mut()[range]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The type of an IPv4 option: the whole type octet, copied flag, class
/// and number together (RFC 791 §3.1; IANA "IP Option Numbers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ipv4OptionKind {
    /// 0, End of Option List.
    EndOfList,
    /// 1, No Operation.
    Nop,
    /// 7, Record Route.
    RecordRoute,
    /// 68, Internet Timestamp.
    Timestamp,
    /// 131, Loose Source and Record Route.
    LooseSourceRoute,
    /// 137, Strict Source and Record Route.
    StrictSourceRoute,
    /// 148, Router Alert (RFC 2113).
    RouterAlert,
    /// 130, Security (RFC 1108).
    Security,
    /// Any other type octet.
    Unknown(u8),
}

impl From<u8> for Ipv4OptionKind {
    fn from(v: u8) -> Self {
        match v {
            0 => Ipv4OptionKind::EndOfList,
            1 => Ipv4OptionKind::Nop,
            7 => Ipv4OptionKind::RecordRoute,
            68 => Ipv4OptionKind::Timestamp,
            131 => Ipv4OptionKind::LooseSourceRoute,
            137 => Ipv4OptionKind::StrictSourceRoute,
            148 => Ipv4OptionKind::RouterAlert,
            130 => Ipv4OptionKind::Security,
            other => Ipv4OptionKind::Unknown(other),
        }
    }
}

impl From<Ipv4OptionKind> for u8 {
    fn from(k: Ipv4OptionKind) -> u8 {
        match k {
            Ipv4OptionKind::EndOfList => 0,
            Ipv4OptionKind::Nop => 1,
            Ipv4OptionKind::RecordRoute => 7,
            Ipv4OptionKind::Timestamp => 68,
            Ipv4OptionKind::LooseSourceRoute => 131,
            Ipv4OptionKind::StrictSourceRoute => 137,
            Ipv4OptionKind::RouterAlert => 148,
            Ipv4OptionKind::Security => 130,
            Ipv4OptionKind::Unknown(v) => v,
        }
    }
}

/// Whether an option with this type octet is copied into every fragment
/// (the top bit of the type octet, RFC 791 §3.1 and §3.2 "Fragmentation").
pub const fn ipv4_option_copied(kind_byte: u8) -> bool {
    kind_byte & 0x80 != 0
}

/// One IPv4 option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Option<'a> {
    /// The type.
    pub kind: Ipv4OptionKind,
    /// The copied flag of the type octet.
    pub copied: bool,
    /// The option data, after the type and length octets (empty for
    /// End of Option List and No Operation).
    pub data: &'a [u8],
}

impl Ipv4Option<'_> {
    /// Bytes the option occupies in the header: 1 for End of Option List
    /// and No Operation, else type + length + data.
    pub fn wire_len(&self) -> usize {
        match self.kind {
            Ipv4OptionKind::EndOfList | Ipv4OptionKind::Nop => 1,
            _ => 2 + self.data.len(),
        }
    }
}

impl fmt::Display for Ipv4Option<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({} bytes)", self.kind, self.data.len())
    }
}

/// An iterator over IPv4 options.
///
/// RFC 791 §3.1: an option is either a single type octet (End of Option
/// List, No Operation) or a type octet, a length octet counting the type,
/// length and data octets, and the data. End of Option List is yielded
/// once and ends the walk (what follows is padding). An option whose
/// length is below 2 or runs past the header yields [`Error::Malformed`]
/// and ends the walk.
#[derive(Debug, Clone)]
pub struct Ipv4OptionsIter<'a> {
    rest: &'a [u8],
    done: bool,
}

impl<'a> Ipv4OptionsIter<'a> {
    /// Walks the options area `options` (as from
    /// [`Ipv4Packet::options`]).
    pub const fn new(options: &'a [u8]) -> Self {
        Ipv4OptionsIter {
            rest: options,
            done: false,
        }
    }
}

impl<'a> Iterator for Ipv4OptionsIter<'a> {
    type Item = Result<Ipv4Option<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (&kind_byte, after_kind) = self.rest.split_first()?;
        let kind = Ipv4OptionKind::from(kind_byte);
        let copied = ipv4_option_copied(kind_byte);
        match kind {
            Ipv4OptionKind::EndOfList => {
                self.done = true;
                Some(Ok(Ipv4Option {
                    kind,
                    copied,
                    data: &[],
                }))
            }
            Ipv4OptionKind::Nop => {
                self.rest = after_kind;
                Some(Ok(Ipv4Option {
                    kind,
                    copied,
                    data: &[],
                }))
            }
            _ => {
                let len = after_kind.first().map(|&l| usize::from(l));
                match len {
                    Some(len) if len >= 2 && len <= self.rest.len() => {
                        let data = &self.rest[2..len];
                        self.rest = &self.rest[len..];
                        Some(Ok(Ipv4Option { kind, copied, data }))
                    }
                    _ => {
                        self.done = true;
                        Some(Err(Error::Malformed))
                    }
                }
            }
        }
    }
}

/// A parsed IPv4 header without options or fragmentation state.
///
/// Fragments parse fine; their offset and More Fragments flag are only
/// available on [`Ipv4Packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: IpProtocol,
    /// Payload length: total length minus header length.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN bits.
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment flag.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Reads a header after the RFC 1812 §5.2.2 checks:
    /// [`Ipv4Packet::check_len`], then the checksum ([`Error::Checksum`]).
    /// Options are skipped.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        Ok(Ipv4Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len() - u16::from(packet.header_len())),
            ttl: packet.ttl(),
            dscp_ecn: packet.dscp_ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// Length of the emitted header: always 20 (no options).
    pub const fn buffer_len(&self) -> usize {
        field::OPTIONS
    }

    /// Writes a 20-byte header with More Fragments clear, offset 0 and a
    /// valid checksum. The buffer must hold at least [`Self::buffer_len`]
    /// bytes, and `payload_len` must be at most 65515 so that the total
    /// length fits in 16 bits. The payload is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) {
        packet.set_version(4);
        packet.set_header_len(field::OPTIONS as u8);
        packet.set_dscp_ecn(self.dscp_ecn);
        packet.set_total_len((field::OPTIONS + self.payload_len) as u16);
        packet.set_ident(self.ident);
        packet.set_flg_off(if self.dont_frag { DF } else { 0 });
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz;
    use proptest::prelude::*;

    /// An IPv4 ICMP echo request as captured (192.168.1.100 -> 8.8.8.8,
    /// DF, TTL 64), payload trimmed to the ICMP header.
    const ECHO_HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x54, 0xa6, 0xf2, 0x40, 0x00, 0x40, 0x01, 0xc1, 0x9a, 0xc0, 0xa8, 0x01,
        0x64, 0x08, 0x08, 0x08, 0x08,
    ];

    /// An IGMPv2 membership report with the Router Alert option
    /// (RFC 2236 §2, RFC 2113), padded to Ethernet's 46-byte minimum.
    const IGMP_RA: [u8; 46] = [
        0x46, 0xc0, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0xe9, 0x12, 0x0a, 0x00, 0x00,
        0x01, 0xef, 0x01, 0x02, 0x03, // header
        0x94, 0x04, 0x00, 0x00, // Router Alert
        0x16, 0x00, 0xf8, 0xfa, 0xef, 0x01, 0x02, 0x03, // IGMP report
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // Ethernet padding
    ];

    #[test]
    fn parse_captured_header() {
        let mut buf = [0u8; 84];
        buf[..20].copy_from_slice(&ECHO_HEADER);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 84);
        assert_eq!(p.ident(), 0xa6f2);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IpProtocol::Icmp);
        assert_eq!(p.checksum(), 0xc19a);
        assert!(p.verify_checksum());
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 1, 100));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(8, 8, 8, 8));
        assert!(p.options().is_empty());
        assert_eq!(p.options_iter().count(), 0);
        assert_eq!(p.payload().len(), 64);
        assert_eq!(
            Ipv4Repr::parse(&p).unwrap(),
            Ipv4Repr {
                src_addr: Ipv4Addr::new(192, 168, 1, 100),
                dst_addr: Ipv4Addr::new(8, 8, 8, 8),
                protocol: IpProtocol::Icmp,
                payload_len: 64,
                ttl: 64,
                dscp_ecn: 0,
                ident: 0xa6f2,
                dont_frag: true,
            }
        );
    }

    #[test]
    fn parse_options_and_padding() {
        let p = Ipv4Packet::new_checked(&IGMP_RA[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.total_len(), 32);
        assert!(p.verify_checksum());
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        // The payload stops at the total length, not at the padding.
        assert_eq!(p.payload(), &IGMP_RA[24..32]);
        let mut it = p.options_iter();
        let ra = it.next().unwrap().unwrap();
        assert_eq!(ra.kind, Ipv4OptionKind::RouterAlert);
        assert!(ra.copied);
        assert_eq!(ra.data, &[0, 0]);
        assert_eq!(ra.wire_len(), 4);
        assert!(it.next().is_none());
        let repr = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(repr.protocol, IpProtocol::Igmp);
        assert_eq!(repr.payload_len, 8);
        assert_eq!(repr.dscp_ecn, 0xc0);
    }

    #[test]
    fn check_len_errors() {
        let mut buf = [0u8; 84];
        buf[..20].copy_from_slice(&ECHO_HEADER);
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..19]).unwrap_err(),
            Error::Truncated
        );
        // Total length 84 but only 83 bytes.
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..83]).unwrap_err(),
            Error::Truncated
        );
        let mut v6 = buf;
        v6[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&v6[..]).unwrap_err(),
            Error::Malformed
        );
        let mut short_ihl = buf;
        short_ihl[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&short_ihl[..]).unwrap_err(),
            Error::Malformed
        );
        let mut long_ihl = buf;
        long_ihl[0] = 0x4f;
        assert_eq!(
            Ipv4Packet::new_checked(&long_ihl[..40]).unwrap_err(),
            Error::Truncated
        );
        let mut tiny_total = buf;
        tiny_total[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&tiny_total[..]).unwrap_err(),
            Error::Malformed
        );
        let mut bad_sum = buf;
        bad_sum[11] ^= 1;
        let p = Ipv4Packet::new_checked(&bad_sum[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Checksum));
    }

    #[test]
    fn fragment_fields() {
        let mut buf = [0u8; 40];
        buf[..20].copy_from_slice(&ECHO_HEADER);
        buf[2..4].copy_from_slice(&40u16.to_be_bytes());
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        p.set_dont_frag(false);
        p.set_more_frags(true);
        p.set_frag_offset(1480);
        assert!(!p.dont_frag() && p.more_frags() && p.is_fragment());
        assert_eq!(p.frag_offset(), 1480);
        p.set_more_frags(false);
        assert!(p.is_fragment());
        assert_eq!(p.frag_offset(), 1480);
        p.set_frag_offset(0);
        assert!(!p.is_fragment());
        p.fill_checksum();
        assert!(p.verify_checksum());
        // Fragments still parse; the Repr just does not carry the offset.
        assert!(Ipv4Repr::parse(&p).is_ok());
    }

    #[test]
    fn options_iter_malformed() {
        let cases: [(&[u8], usize); 6] = [
            (&[0x01, 0x01, 0x00, 0xff], 3),             // NOP, NOP, EOL: stops
            (&[0x07], 1),                               // type without length
            (&[0x07, 0x01, 0x00, 0x00], 1),             // length below 2
            (&[0x07, 0x09, 0x04, 0x00], 1),             // runs past the end
            (&[0x01, 0x44, 0x04, 0x05, 0x06, 0x00], 3), // NOP, TS(4), EOL
            (&[], 0),
        ];
        for (opts, n) in cases {
            let items: std::vec::Vec<_> = Ipv4OptionsIter::new(opts).collect();
            assert_eq!(items.len(), n, "{opts:02x?}");
        }
        let mut it = Ipv4OptionsIter::new(&[0x01, 0x07, 0x01]);
        assert_eq!(it.next().unwrap().unwrap().kind, Ipv4OptionKind::Nop);
        assert_eq!(it.next().unwrap(), Err(Error::Malformed));
        assert!(it.next().is_none());
    }

    #[test]
    fn option_kinds_round_trip() {
        for v in 0..=u8::MAX {
            assert_eq!(u8::from(Ipv4OptionKind::from(v)), v);
        }
        assert!(ipv4_option_copied(0x83));
        assert!(!ipv4_option_copied(0x07));
    }

    #[test]
    fn decrement_ttl_matches_recompute() {
        let mut buf = ECHO_HEADER;
        buf[2..4].copy_from_slice(&20u16.to_be_bytes());
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum();
        for _ in 0..64 {
            p.decrement_ttl();
            assert!(p.verify_checksum(), "ttl {}", p.ttl());
        }
        assert_eq!(p.ttl(), 0);
        p.decrement_ttl();
        assert_eq!(p.ttl(), 0);
        assert!(p.verify_checksum());
    }

    /// Every checksum value the header can have (the ident sweeps all
    /// 65,536 values, so the checksum does too, 0xff00..=0xffff included):
    /// the incremental update equals a full recomputation.
    #[test]
    fn decrement_ttl_every_checksum() {
        let mut seen = vec![false; 1 << 16];
        for ident in 0..=u16::MAX {
            let mut buf = ECHO_HEADER;
            buf[2..4].copy_from_slice(&20u16.to_be_bytes());
            buf[4..6].copy_from_slice(&ident.to_be_bytes());
            let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
            p.fill_checksum();
            seen[usize::from(p.checksum())] = true;
            p.decrement_ttl();
            let incremental = p.checksum();
            p.fill_checksum();
            assert_eq!(incremental, p.checksum(), "ident {ident:#06x}");
        }
        // A nonzero header's checksum is never 0xffff; every other value occurs.
        assert_eq!(seen.iter().filter(|s| !**s).count(), 1);
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn decrement_ttl_random_header(
            mut h in any::<[u8; 20]>(),
            ttl in 1..=255u8,
        ) {
            h[0] = 0x45;
            h[2..4].copy_from_slice(&20u16.to_be_bytes());
            h[8] = ttl;
            let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
            p.fill_checksum();
            p.decrement_ttl();
            let incremental = p.checksum();
            p.fill_checksum();
            prop_assert_eq!(incremental, p.checksum());
        }

        #[test]
        fn emit_into_junk_then_parse(
            src in any::<[u8; 4]>(),
            dst in any::<[u8; 4]>(),
            protocol in any::<u8>(),
            payload_len in 0..64usize,
            ttl in any::<u8>(),
            dscp_ecn in any::<u8>(),
            ident in any::<u16>(),
            dont_frag in any::<bool>(),
        ) {
            let repr = Ipv4Repr {
                src_addr: Ipv4Addr::from(src),
                dst_addr: Ipv4Addr::from(dst),
                protocol: protocol.into(),
                payload_len,
                ttl,
                dscp_ecn,
                ident,
                dont_frag,
            };
            let mut buf = [0xa5u8; 84];
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
            let p = Ipv4Packet::new_checked(&buf[..repr.buffer_len() + payload_len]).unwrap();
            prop_assert!(!p.more_frags());
            prop_assert_eq!(p.frag_offset(), 0);
            prop_assert!(p.payload().iter().all(|&b| b == 0xa5));
            prop_assert_eq!(Ipv4Repr::parse(&p).unwrap(), repr);
        }

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(80)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_random_v4(mut bytes in fuzz::bytes(80)) {
            // Force version 4 so the length checks get exercised.
            if let Some(b) = bytes.first_mut() {
                *b = 0x40 | (*b & 0x0f);
            }
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated(bytes in fuzz::mutated(&IGMP_RA)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_options_iter(bytes in fuzz::bytes(40)) {
            for opt in Ipv4OptionsIter::new(&bytes) {
                let _ = opt.map(|o| o.wire_len());
            }
        }
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(p) = Ipv4Packet::new_checked(bytes) {
            let _ = (p.version(), p.header_len(), p.dscp_ecn(), p.total_len());
            let _ = (p.ident(), p.dont_frag(), p.more_frags(), p.frag_offset());
            let _ = (
                p.ttl(),
                p.protocol(),
                p.checksum(),
                p.src_addr(),
                p.dst_addr(),
            );
            let _ = (
                p.options(),
                p.payload(),
                p.verify_checksum(),
                p.is_fragment(),
            );
            for opt in p.options_iter() {
                let _ = opt;
            }
            let _ = Ipv4Repr::parse(&p);
            let mut copy = bytes.to_vec();
            let mut m = Ipv4Packet::new_checked(&mut copy[..]).unwrap();
            m.decrement_ttl();
            m.fill_checksum();
            let _ = (m.options_mut().len(), m.payload_mut().len());
        }
        let _ = Ipv4Repr::parse(&Ipv4Packet::new_unchecked(bytes));
    }
}
