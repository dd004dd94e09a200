//! ICMP for IPv4 (RFC 792), with the router rules of RFC 1812 §4.3.
//!
//! ```text
//!  0               8               16                              32
//! +---------------+---------------+-------------------------------+
//! |     type      |     code      |           checksum            |
//! +---------------+---------------+-------------------------------+
//! |          rest of header (ident/seq, MTU, pointer, ...)        |
//! +---------------------------------------------------------------+
//! |   data (echo payload, or the offending IP header + 8 bytes)   |
//! +---------------------------------------------------------------+
//! ```
//!
//! The view covers one ICMP message: build it on the IPv4 payload
//! ([`crate::ipv4::Ipv4Packet::payload`]), so that the checksum and
//! [`Icmpv4Packet::data`] stop where the message does.

use core::fmt;

use crate::checksum;
use crate::{Error, Result};

/// ICMPv4 message types (RFC 792; IANA "ICMP Type Numbers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Icmpv4Message {
    /// 0.
    EchoReply,
    /// 3.
    DstUnreachable,
    /// 4, deprecated by RFC 6633.
    SourceQuench,
    /// 5.
    Redirect,
    /// 8.
    EchoRequest,
    /// 9 (RFC 1256).
    RouterAdvert,
    /// 10 (RFC 1256).
    RouterSolicit,
    /// 11.
    TimeExceeded,
    /// 12.
    ParamProblem,
    /// 13.
    Timestamp,
    /// 14.
    TimestampReply,
    /// Any other type.
    Unknown(u8),
}

impl From<u8> for Icmpv4Message {
    fn from(v: u8) -> Self {
        match v {
            0 => Icmpv4Message::EchoReply,
            3 => Icmpv4Message::DstUnreachable,
            4 => Icmpv4Message::SourceQuench,
            5 => Icmpv4Message::Redirect,
            8 => Icmpv4Message::EchoRequest,
            9 => Icmpv4Message::RouterAdvert,
            10 => Icmpv4Message::RouterSolicit,
            11 => Icmpv4Message::TimeExceeded,
            12 => Icmpv4Message::ParamProblem,
            13 => Icmpv4Message::Timestamp,
            14 => Icmpv4Message::TimestampReply,
            other => Icmpv4Message::Unknown(other),
        }
    }
}

impl From<Icmpv4Message> for u8 {
    fn from(m: Icmpv4Message) -> u8 {
        match m {
            Icmpv4Message::EchoReply => 0,
            Icmpv4Message::DstUnreachable => 3,
            Icmpv4Message::SourceQuench => 4,
            Icmpv4Message::Redirect => 5,
            Icmpv4Message::EchoRequest => 8,
            Icmpv4Message::RouterAdvert => 9,
            Icmpv4Message::RouterSolicit => 10,
            Icmpv4Message::TimeExceeded => 11,
            Icmpv4Message::ParamProblem => 12,
            Icmpv4Message::Timestamp => 13,
            Icmpv4Message::TimestampReply => 14,
            Icmpv4Message::Unknown(v) => v,
        }
    }
}

impl Icmpv4Message {
    /// See [`is_error`].
    pub const fn is_error(self) -> bool {
        is_error(self)
    }
}

impl fmt::Display for Icmpv4Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Icmpv4Message::Unknown(v) => write!(f, "type {v}"),
            known => fmt::Debug::fmt(known, f),
        }
    }
}

/// Whether `msg` is an ICMP error message: Destination Unreachable,
/// Source Quench, Redirect, Time Exceeded or Parameter Problem.
///
/// RFC 1812 §4.3.2.7 forbids sending an ICMP error about an ICMP error;
/// only these known error types count. Unknown types are not treated as
/// errors (RFC 1812 §4.3.2.7 only names the error messages, and RFC 1122
/// §3.2.2 says unknown types are silently ignored, not answered).
pub const fn is_error(msg: Icmpv4Message) -> bool {
    matches!(
        msg,
        Icmpv4Message::DstUnreachable
            | Icmpv4Message::SourceQuench
            | Icmpv4Message::Redirect
            | Icmpv4Message::TimeExceeded
            | Icmpv4Message::ParamProblem
    )
}

/// Destination Unreachable codes (RFC 792, RFC 1812 §5.2.7.1).
pub mod dst_unreachable_code {
    /// Network unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTOCOL: u8 = 2;
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set; carries the next-hop MTU
    /// (RFC 1191 §4).
    pub const FRAG_NEEDED: u8 = 4;
    /// Source route failed.
    pub const SOURCE_ROUTE_FAILED: u8 = 5;
    /// Destination network unknown.
    pub const NET_UNKNOWN: u8 = 6;
    /// Destination host unknown.
    pub const HOST_UNKNOWN: u8 = 7;
    /// Communication administratively prohibited (RFC 1812 §5.2.7.1).
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Time Exceeded codes (RFC 792).
pub mod time_exceeded_code {
    /// Time to live exceeded in transit.
    pub const TTL_EXCEEDED: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const FRAG_REASSEMBLY: u8 = 1;
}

/// Parameter Problem codes (RFC 792, RFC 1108).
pub mod param_problem_code {
    /// The pointer indicates the error.
    pub const POINTER: u8 = 0;
    /// A required option is missing.
    pub const MISSING_OPTION: u8 = 1;
    /// Bad length.
    pub const BAD_LENGTH: u8 = 2;
}

mod field {
    use crate::Field;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    /// Echo / timestamp identifier.
    pub const ECHO_IDENT: Field = 4..6;
    /// Echo / timestamp sequence number.
    pub const ECHO_SEQNO: Field = 6..8;
    /// Destination Unreachable code 4: next-hop MTU (RFC 1191 §4); the two
    /// bytes before it are unused.
    pub const UNUSED: Field = 4..6;
    pub const NEXT_HOP_MTU: Field = 6..8;
    /// Parameter Problem pointer (RFC 792), followed by three unused bytes.
    pub const POINTER: usize = 4;
    /// Redirect gateway address (RFC 792).
    pub const GATEWAY: Field = 4..8;
    /// The four bytes after the checksum, whatever the type.
    pub const REST: Field = 4..8;
    pub const DATA: usize = 8;
}

/// A zero-copy view of an ICMPv4 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Length of the header: type, code, checksum and four type-specific
    /// bytes.
    pub const HEADER_LEN: usize = field::DATA;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than [`Self::HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Icmpv4Packet<T> {
        Icmpv4Packet { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Icmpv4Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer cannot hold the 8-byte header
    /// that every ICMP message has (RFC 792).
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < field::DATA {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole message.
    pub fn buffer(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Message type.
    pub fn msg_type(&self) -> Icmpv4Message {
        self.buffer.as_ref()[field::TYPE].into()
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Whether the type is an error message, see [`is_error`].
    pub fn is_error(&self) -> bool {
        is_error(self.msg_type())
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Echo identifier (bytes 4..6).
    pub fn echo_ident(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::ECHO_IDENT])
    }

    /// Echo sequence number (bytes 6..8).
    pub fn echo_seq_no(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::ECHO_SEQNO])
    }

    /// Next-hop MTU of a Destination Unreachable, code 4 (bytes 6..8,
    /// RFC 1191 §4). 0 from routers that predate RFC 1191.
    pub fn next_hop_mtu(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::NEXT_HOP_MTU])
    }

    /// Pointer of a Parameter Problem (byte 4).
    pub fn pointer(&self) -> u8 {
        self.buffer.as_ref()[field::POINTER]
    }

    /// Gateway address of a Redirect (bytes 4..8).
    pub fn gateway(&self) -> core::net::Ipv4Addr {
        core::net::Ipv4Addr::from(crate::array::<4>(&self.buffer.as_ref()[field::GATEWAY]))
    }

    /// Everything after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }

    /// Whether the checksum over the whole buffer verifies (RFC 792).
    pub fn verify_checksum(&self) -> bool {
        checksum::verifies(self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// The whole message, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the message type.
    pub fn set_msg_type(&mut self, msg: Icmpv4Message) {
        self.buffer.as_mut()[field::TYPE] = msg.into();
    }

    /// Sets the message code.
    pub fn set_msg_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::CODE] = code;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, checksum: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&checksum.to_be_bytes());
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, ident: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&ident.to_be_bytes());
    }

    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, seq_no: u16) {
        self.buffer.as_mut()[field::ECHO_SEQNO].copy_from_slice(&seq_no.to_be_bytes());
    }

    /// Sets the next-hop MTU and zeroes the unused bytes before it.
    pub fn set_next_hop_mtu(&mut self, mtu: u16) {
        self.buffer.as_mut()[field::UNUSED].fill(0);
        self.buffer.as_mut()[field::NEXT_HOP_MTU].copy_from_slice(&mtu.to_be_bytes());
    }

    /// Sets the Parameter Problem pointer and zeroes the three unused
    /// bytes after it.
    pub fn set_pointer(&mut self, pointer: u8) {
        self.set_rest_of_header(u32::from(pointer) << 24);
    }

    /// Sets the Redirect gateway address.
    pub fn set_gateway(&mut self, addr: core::net::Ipv4Addr) {
        self.buffer.as_mut()[field::GATEWAY].copy_from_slice(&addr.octets());
    }

    /// Sets the four type-specific bytes after the checksum at once.
    pub fn set_rest_of_header(&mut self, v: u32) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&v.to_be_bytes());
    }

    /// Everything after the header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA..]
    }

    /// Computes the checksum over the whole buffer and stores it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A parsed ICMPv4 message of one of the types a router sends or
/// answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr<'a> {
    /// Echo (type 8).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Payload to echo back.
        data: &'a [u8],
    },
    /// Echo Reply (type 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echoed payload.
        data: &'a [u8],
    },
    /// Destination Unreachable (type 3).
    DstUnreachable {
        /// See [`dst_unreachable_code`].
        code: u8,
        /// Next-hop MTU for code 4 (RFC 1191 §4), else 0.
        next_hop_mtu: u16,
        /// The offending IP header and leading payload bytes.
        data: &'a [u8],
    },
    /// Time Exceeded (type 11).
    TimeExceeded {
        /// See [`time_exceeded_code`].
        code: u8,
        /// The offending IP header and leading payload bytes.
        data: &'a [u8],
    },
    /// Parameter Problem (type 12). Parsed whatever the code; emitted
    /// with code 0, "pointer indicates the error".
    ParamProblem {
        /// Byte offset of the problem in the offending header.
        pointer: u8,
        /// The offending IP header and leading payload bytes.
        data: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Reads a message after checking its length and checksum
    /// ([`Error::Checksum`]). Types without a variant are
    /// [`Error::Unsupported`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Icmpv4Packet<&'a T>) -> Result<Icmpv4Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        let data = &packet.buffer.as_ref()[field::DATA..];
        match packet.msg_type() {
            Icmpv4Message::EchoRequest => Ok(Icmpv4Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Icmpv4Message::EchoReply => Ok(Icmpv4Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Icmpv4Message::DstUnreachable => Ok(Icmpv4Repr::DstUnreachable {
                code: packet.msg_code(),
                next_hop_mtu: packet.next_hop_mtu(),
                data,
            }),
            Icmpv4Message::TimeExceeded => Ok(Icmpv4Repr::TimeExceeded {
                code: packet.msg_code(),
                data,
            }),
            Icmpv4Message::ParamProblem => Ok(Icmpv4Repr::ParamProblem {
                pointer: packet.pointer(),
                data,
            }),
            _ => Err(Error::Unsupported),
        }
    }

    /// The data carried after the 8-byte header.
    pub const fn data(&self) -> &'a [u8] {
        match *self {
            Icmpv4Repr::EchoRequest { data, .. }
            | Icmpv4Repr::EchoReply { data, .. }
            | Icmpv4Repr::DstUnreachable { data, .. }
            | Icmpv4Repr::TimeExceeded { data, .. }
            | Icmpv4Repr::ParamProblem { data, .. } => data,
        }
    }

    /// Length of the emitted message: 8 + data.
    pub const fn buffer_len(&self) -> usize {
        field::DATA + self.data().len()
    }

    /// Writes the message into the first [`Self::buffer_len`] bytes of
    /// `packet` and fills the checksum over exactly those bytes. The
    /// buffer must be at least that long; the caller normally sizes it
    /// exactly.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Icmpv4Packet<T>) {
        match *self {
            Icmpv4Repr::EchoRequest { ident, seq_no, .. } => {
                packet.set_msg_type(Icmpv4Message::EchoRequest);
                packet.set_msg_code(0);
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
            }
            Icmpv4Repr::EchoReply { ident, seq_no, .. } => {
                packet.set_msg_type(Icmpv4Message::EchoReply);
                packet.set_msg_code(0);
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
            }
            Icmpv4Repr::DstUnreachable {
                code, next_hop_mtu, ..
            } => {
                packet.set_msg_type(Icmpv4Message::DstUnreachable);
                packet.set_msg_code(code);
                packet.set_next_hop_mtu(next_hop_mtu);
            }
            Icmpv4Repr::TimeExceeded { code, .. } => {
                packet.set_msg_type(Icmpv4Message::TimeExceeded);
                packet.set_msg_code(code);
                packet.set_rest_of_header(0);
            }
            Icmpv4Repr::ParamProblem { pointer, .. } => {
                packet.set_msg_type(Icmpv4Message::ParamProblem);
                packet.set_msg_code(param_problem_code::POINTER);
                packet.set_pointer(pointer);
            }
        }
        let data = self.data();
        packet.data_mut()[..data.len()].copy_from_slice(data);
        let message = &mut packet.buffer.as_mut()[..self.buffer_len()];
        message[field::CHECKSUM].fill(0);
        let c = checksum::checksum(message);
        message[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz;
    use crate::ipv4::{Ipv4Packet, Ipv4Repr};
    use proptest::prelude::*;

    /// A captured ping: IPv4 header, then an ICMP echo request with ident
    /// 0x0c9b, sequence 1 and the 56-byte pattern `10 11 12 ...`.
    const PING: [u8; 84] = [
        0x45, 0x00, 0x00, 0x54, 0xa6, 0xf2, 0x40, 0x00, 0x40, 0x01, 0xc1, 0x9a, 0xc0, 0xa8, 0x01,
        0x64, 0x08, 0x08, 0x08, 0x08, // IPv4
        0x08, 0x00, 0x32, 0x8f, 0x0c, 0x9b, 0x00, 0x01, // ICMP echo request
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e,
        0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d,
        0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c,
        0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47,
    ];

    #[test]
    fn parse_captured_ping() {
        let ip = Ipv4Packet::new_checked(&PING[..]).unwrap();
        assert!(Ipv4Repr::parse(&ip).is_ok());
        let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(icmp.msg_type(), Icmpv4Message::EchoRequest);
        assert_eq!(icmp.msg_code(), 0);
        assert_eq!(icmp.checksum(), 0x328f);
        assert!(icmp.verify_checksum());
        assert!(!icmp.is_error());
        assert_eq!(icmp.echo_ident(), 0x0c9b);
        assert_eq!(icmp.echo_seq_no(), 1);
        assert_eq!(icmp.data().len(), 56);
        assert_eq!(
            Icmpv4Repr::parse(&icmp).unwrap(),
            Icmpv4Repr::EchoRequest {
                ident: 0x0c9b,
                seq_no: 1,
                data: &PING[28..],
            }
        );
    }

    #[test]
    fn bad_checksum_and_unsupported() {
        let mut msg = [0u8; 64];
        msg.copy_from_slice(&PING[20..]);
        msg[10] ^= 0x40;
        let icmp = Icmpv4Packet::new_checked(&msg[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&icmp), Err(Error::Checksum));

        let mut ts = [13u8, 0, 0, 0, 0, 1, 0, 1];
        Icmpv4Packet::new_unchecked(&mut ts[..]).fill_checksum();
        let icmp = Icmpv4Packet::new_checked(&ts[..]).unwrap();
        assert!(icmp.verify_checksum());
        assert_eq!(Icmpv4Repr::parse(&icmp), Err(Error::Unsupported));
        assert_eq!(
            Icmpv4Packet::new_checked(&ts[..7]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn echo_reply_answers_request() {
        // Turn the captured request into a reply, as the data plane does.
        let ip = Ipv4Packet::new_checked(&PING[..]).unwrap();
        let request = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(ip.payload()).unwrap()).unwrap();
        let Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        } = request
        else {
            panic!("not an echo request");
        };
        let reply = Icmpv4Repr::EchoReply {
            ident,
            seq_no,
            data,
        };
        let mut buf = [0xa5u8; 64];
        reply.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
        let packet = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&packet).unwrap(), reply);
    }

    #[test]
    fn error_types() {
        for v in 0..=u8::MAX {
            let m = Icmpv4Message::from(v);
            assert_eq!(u8::from(m), v);
            assert_eq!(is_error(m), matches!(v, 3 | 4 | 5 | 11 | 12), "type {v}");
            assert_eq!(m.is_error(), is_error(m));
        }
    }

    #[test]
    fn rest_of_header_fields() {
        let mut buf = [0xa5u8; 8];
        let mut p = Icmpv4Packet::new_unchecked(&mut buf[..]);
        p.set_next_hop_mtu(1400);
        assert_eq!(p.next_hop_mtu(), 1400);
        assert_eq!(&p.buffer()[4..6], &[0, 0]);
        p.set_pointer(9);
        assert_eq!(p.pointer(), 9);
        assert_eq!(&p.buffer()[5..8], &[0, 0, 0]);
        p.set_gateway(core::net::Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.gateway(), core::net::Ipv4Addr::new(10, 0, 0, 1));
    }

    /// Every representable message, built from random parts.
    fn repr_strategy(data: &'static [u8]) -> impl Strategy<Value = Icmpv4Repr<'static>> {
        (
            0..5u8,
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            0..=data.len(),
        )
            .prop_map(move |(kind, a, b, code, n)| {
                let data = &data[..n];
                match kind {
                    0 => Icmpv4Repr::EchoRequest {
                        ident: a,
                        seq_no: b,
                        data,
                    },
                    1 => Icmpv4Repr::EchoReply {
                        ident: a,
                        seq_no: b,
                        data,
                    },
                    2 => Icmpv4Repr::DstUnreachable {
                        code,
                        next_hop_mtu: a,
                        data,
                    },
                    3 => Icmpv4Repr::TimeExceeded { code, data },
                    _ => Icmpv4Repr::ParamProblem {
                        pointer: code,
                        data,
                    },
                }
            })
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn emit_into_junk_then_parse(repr in repr_strategy(&PING)) {
            let mut buf = [0xa5u8; 100];
            let len = repr.buffer_len();
            repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
            // Bytes past the message are untouched.
            prop_assert!(buf[len..].iter().all(|&b| b == 0xa5));
            let packet = Icmpv4Packet::new_checked(&buf[..len]).unwrap();
            prop_assert_eq!(Icmpv4Repr::parse(&packet).unwrap(), repr);
        }

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(64)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated(bytes in fuzz::mutated(&PING[20..])) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_random_with_valid_checksum(mut bytes in fuzz::bytes(64)) {
            // Reach the type dispatch in parse.
            if bytes.len() >= 8 {
                Icmpv4Packet::new_unchecked(&mut bytes[..]).fill_checksum();
            }
            exercise(&bytes);
        }
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(p) = Icmpv4Packet::new_checked(bytes) {
            let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.is_error());
            let _ = (p.echo_ident(), p.echo_seq_no(), p.next_hop_mtu());
            let _ = (p.pointer(), p.gateway(), p.data(), p.verify_checksum());
            let _ = Icmpv4Repr::parse(&p);
        }
        let _ = Icmpv4Repr::parse(&Icmpv4Packet::new_unchecked(bytes));
    }
}
