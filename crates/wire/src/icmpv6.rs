//! ICMP for IPv6 (RFC 4443); Neighbor Discovery (RFC 4861), whose messages
//! are ICMPv6 messages, lives in its submodule [`ndisc`]
//! and is re-exported here.
//!
//! ```text
//!  0               8               16                              32
//! +---------------+---------------+-------------------------------+
//! |     type      |     code      |           checksum            |
//! +---------------+---------------+-------------------------------+
//! |     type-specific word (ident/seq, MTU, pointer, reserved)    |
//! +---------------------------------------------------------------+
//! |      data (echo payload, or as much of the invoking packet    |
//! |      as fits in the minimum MTU, RFC 4443 §2.4 (c))           |
//! +---------------------------------------------------------------+
//! ```
//!
//! The checksum covers an IPv6 pseudo-header (RFC 4443 §2.3, RFC 8200
//! §8.1), so the checksum methods take the source and destination
//! addresses. Build the view on exactly the ICMPv6 message (the upper-layer
//! part of the IPv6 payload): the checksum covers the whole buffer.

use core::fmt;
use core::net::Ipv6Addr;

use crate::checksum;
use crate::ip::IpProtocol;
use crate::{Error, Result};

pub mod ndisc;

pub use ndisc::{NdiscNeighborFlags, NdiscOption, NdiscOptionsIter, NdiscRepr};

/// ICMPv6 message types (RFC 4443 §2.1, RFC 4861 §4, RFC 2710, RFC 3810;
/// IANA "ICMPv6 Type Numbers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Icmpv6Message {
    /// 1.
    DstUnreachable,
    /// 2.
    PacketTooBig,
    /// 3.
    TimeExceeded,
    /// 4.
    ParamProblem,
    /// 128.
    EchoRequest,
    /// 129.
    EchoReply,
    /// 130, Multicast Listener Query (RFC 2710, RFC 3810).
    MldQuery,
    /// 131, MLDv1 Report.
    MldReport,
    /// 132, MLDv1 Done.
    MldDone,
    /// 133.
    RouterSolicit,
    /// 134.
    RouterAdvert,
    /// 135.
    NeighborSolicit,
    /// 136.
    NeighborAdvert,
    /// 137.
    Redirect,
    /// 143, MLDv2 Report (RFC 3810 §5.2).
    MldV2Report,
    /// Any other type.
    Unknown(u8),
}

impl From<u8> for Icmpv6Message {
    fn from(v: u8) -> Self {
        match v {
            1 => Icmpv6Message::DstUnreachable,
            2 => Icmpv6Message::PacketTooBig,
            3 => Icmpv6Message::TimeExceeded,
            4 => Icmpv6Message::ParamProblem,
            128 => Icmpv6Message::EchoRequest,
            129 => Icmpv6Message::EchoReply,
            130 => Icmpv6Message::MldQuery,
            131 => Icmpv6Message::MldReport,
            132 => Icmpv6Message::MldDone,
            133 => Icmpv6Message::RouterSolicit,
            134 => Icmpv6Message::RouterAdvert,
            135 => Icmpv6Message::NeighborSolicit,
            136 => Icmpv6Message::NeighborAdvert,
            137 => Icmpv6Message::Redirect,
            143 => Icmpv6Message::MldV2Report,
            other => Icmpv6Message::Unknown(other),
        }
    }
}

impl From<Icmpv6Message> for u8 {
    fn from(m: Icmpv6Message) -> u8 {
        match m {
            Icmpv6Message::DstUnreachable => 1,
            Icmpv6Message::PacketTooBig => 2,
            Icmpv6Message::TimeExceeded => 3,
            Icmpv6Message::ParamProblem => 4,
            Icmpv6Message::EchoRequest => 128,
            Icmpv6Message::EchoReply => 129,
            Icmpv6Message::MldQuery => 130,
            Icmpv6Message::MldReport => 131,
            Icmpv6Message::MldDone => 132,
            Icmpv6Message::RouterSolicit => 133,
            Icmpv6Message::RouterAdvert => 134,
            Icmpv6Message::NeighborSolicit => 135,
            Icmpv6Message::NeighborAdvert => 136,
            Icmpv6Message::Redirect => 137,
            Icmpv6Message::MldV2Report => 143,
            Icmpv6Message::Unknown(v) => v,
        }
    }
}

impl Icmpv6Message {
    /// Whether this is an error message: types 0..=127 (RFC 4443 §2.1).
    /// Unknown types below 128 count too, so that RFC 4443 §2.4 (e.1)
    /// ("no error message in response to an error message") holds for them.
    pub fn is_error(self) -> bool {
        u8::from(self) < 128
    }
}

impl fmt::Display for Icmpv6Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Icmpv6Message::Unknown(v) => write!(f, "type {v}"),
            known => fmt::Debug::fmt(known, f),
        }
    }
}

/// Destination Unreachable codes (RFC 4443 §3.1).
pub mod dst_unreachable_code {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication with destination administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Beyond scope of source address.
    pub const BEYOND_SCOPE: u8 = 2;
    /// Address unreachable.
    pub const ADDR_UNREACHABLE: u8 = 3;
    /// Port unreachable.
    pub const PORT_UNREACHABLE: u8 = 4;
    /// Source address failed ingress/egress policy.
    pub const FAILED_POLICY: u8 = 5;
    /// Reject route to destination.
    pub const REJECT_ROUTE: u8 = 6;
}

/// Time Exceeded codes (RFC 4443 §3.3).
pub mod time_exceeded_code {
    /// Hop limit exceeded in transit.
    pub const HOP_LIMIT: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const FRAG_REASSEMBLY: u8 = 1;
}

/// Parameter Problem codes (RFC 4443 §3.4).
pub mod param_problem_code {
    /// Erroneous header field encountered.
    pub const ERRONEOUS_HEADER: u8 = 0;
    /// Unrecognized Next Header type encountered.
    pub const UNRECOGNIZED_NEXT_HEADER: u8 = 1;
    /// Unrecognized IPv6 option encountered.
    pub const UNRECOGNIZED_OPTION: u8 = 2;
}

mod field {
    use crate::Field;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQNO: Field = 6..8;
    /// Packet Too Big MTU (RFC 4443 §3.2), Parameter Problem pointer
    /// (§3.4), unused in Destination Unreachable and Time Exceeded.
    pub const WORD: Field = 4..8;
    pub const DATA: usize = 8;
}

/// A zero-copy view of an ICMPv6 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Length of the header: type, code, checksum and one type-specific
    /// 32-bit word.
    pub const HEADER_LEN: usize = field::DATA;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than [`Self::HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Icmpv6Packet<T> {
        Icmpv6Packet { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Icmpv6Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer cannot hold the 8-byte header.
    /// Every message type defined by RFC 4443 and RFC 4861 has one.
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
    pub fn msg_type(&self) -> Icmpv6Message {
        self.buffer.as_ref()[field::TYPE].into()
    }

    /// Whether the type is an error message (below 128, RFC 4443 §2.1).
    pub fn is_error(&self) -> bool {
        self.buffer.as_ref()[field::TYPE] < 128
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
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

    /// MTU of a Packet Too Big (bytes 4..8).
    pub fn mtu(&self) -> u32 {
        crate::be32(&self.buffer.as_ref()[field::WORD])
    }

    /// Pointer of a Parameter Problem (bytes 4..8, the same word as
    /// [`Self::mtu`]).
    pub fn pointer(&self) -> u32 {
        self.mtu()
    }

    /// Everything after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }

    /// Whether the checksum verifies over the pseudo-header and the whole
    /// buffer (RFC 4443 §2.3).
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let msg = self.buffer.as_ref();
        let sum = pseudo_header(src, dst, msg.len()) + checksum::sum(msg);
        checksum::fold(sum) == 0xffff
    }
}

/// Partial sum of the ICMPv6 pseudo-header for a message of `len` bytes.
fn pseudo_header(src: &Ipv6Addr, dst: &Ipv6Addr, len: usize) -> u32 {
    // An ICMPv6 message lives in one IPv6 packet, so it is shorter than
    // 2^32 bytes unless the buffer lies; saturate rather than wrap.
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    checksum::pseudo_header_v6(src, dst, IpProtocol::Icmpv6.into(), len)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// The whole message, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the message type.
    pub fn set_msg_type(&mut self, msg: Icmpv6Message) {
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

    /// Sets the Packet Too Big MTU.
    pub fn set_mtu(&mut self, mtu: u32) {
        self.buffer.as_mut()[field::WORD].copy_from_slice(&mtu.to_be_bytes());
    }

    /// Sets the Parameter Problem pointer.
    pub fn set_pointer(&mut self, pointer: u32) {
        self.set_mtu(pointer);
    }

    /// Everything after the header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA..]
    }

    /// Computes the checksum over the pseudo-header and the whole buffer
    /// and stores it.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let msg = self.buffer.as_ref();
        let c = !checksum::fold(pseudo_header(src, dst, msg.len()) + checksum::sum(msg));
        self.set_checksum(c);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A parsed ICMPv6 message of one of the types a router sends or answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Repr<'a> {
    /// Echo Request (RFC 4443 §4.1).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Payload to echo back.
        data: &'a [u8],
    },
    /// Echo Reply (RFC 4443 §4.2).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echoed payload.
        data: &'a [u8],
    },
    /// Destination Unreachable (RFC 4443 §3.1).
    DstUnreachable {
        /// See [`dst_unreachable_code`].
        code: u8,
        /// The invoking packet.
        data: &'a [u8],
    },
    /// Packet Too Big (RFC 4443 §3.2).
    PacketTooBig {
        /// MTU of the next-hop link.
        mtu: u32,
        /// The invoking packet.
        data: &'a [u8],
    },
    /// Time Exceeded (RFC 4443 §3.3).
    TimeExceeded {
        /// See [`time_exceeded_code`].
        code: u8,
        /// The invoking packet.
        data: &'a [u8],
    },
    /// Parameter Problem (RFC 4443 §3.4).
    ParamProblem {
        /// See [`param_problem_code`].
        code: u8,
        /// Byte offset of the problem in the invoking packet.
        pointer: u32,
        /// The invoking packet.
        data: &'a [u8],
    },
    /// A Neighbor Discovery message (RFC 4861).
    Ndisc(NdiscRepr),
}

impl<'a> Icmpv6Repr<'a> {
    /// Reads a message after checking its length and its checksum against
    /// the pseudo-header of `src` and `dst` ([`Error::Checksum`]).
    ///
    /// Neighbor Discovery messages go through [`NdiscRepr::parse`] and
    /// [`NdiscRepr::check_addresses`]; the hop limit of 255 they require
    /// (RFC 4861 §6.1, §7.1.1) is in the IPv6 header and is the caller's
    /// to check. Types without a variant (MLD, Redirect, unknown) are
    /// [`Error::Unsupported`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        packet: &Icmpv6Packet<&'a T>,
    ) -> Result<Icmpv6Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        let data = &packet.buffer.as_ref()[field::DATA..];
        match packet.msg_type() {
            Icmpv6Message::EchoRequest => Ok(Icmpv6Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Icmpv6Message::EchoReply => Ok(Icmpv6Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Icmpv6Message::DstUnreachable => Ok(Icmpv6Repr::DstUnreachable {
                code: packet.msg_code(),
                data,
            }),
            Icmpv6Message::PacketTooBig => Ok(Icmpv6Repr::PacketTooBig {
                mtu: packet.mtu(),
                data,
            }),
            Icmpv6Message::TimeExceeded => Ok(Icmpv6Repr::TimeExceeded {
                code: packet.msg_code(),
                data,
            }),
            Icmpv6Message::ParamProblem => Ok(Icmpv6Repr::ParamProblem {
                code: packet.msg_code(),
                pointer: packet.pointer(),
                data,
            }),
            Icmpv6Message::RouterSolicit
            | Icmpv6Message::RouterAdvert
            | Icmpv6Message::NeighborSolicit
            | Icmpv6Message::NeighborAdvert => {
                let ndisc = NdiscRepr::parse(packet)?;
                ndisc.check_addresses(src, dst)?;
                Ok(Icmpv6Repr::Ndisc(ndisc))
            }
            _ => Err(Error::Unsupported),
        }
    }

    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        match self {
            Icmpv6Repr::EchoRequest { data, .. }
            | Icmpv6Repr::EchoReply { data, .. }
            | Icmpv6Repr::DstUnreachable { data, .. }
            | Icmpv6Repr::PacketTooBig { data, .. }
            | Icmpv6Repr::TimeExceeded { data, .. }
            | Icmpv6Repr::ParamProblem { data, .. } => field::DATA + data.len(),
            Icmpv6Repr::Ndisc(ndisc) => ndisc.buffer_len(),
        }
    }

    /// Writes the message into the first [`Self::buffer_len`] bytes of
    /// `packet` and fills the checksum over exactly those bytes and the
    /// pseudo-header of `src` and `dst`. The buffer must be at least that
    /// long; the caller normally sizes it exactly.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        packet: &mut Icmpv6Packet<T>,
    ) {
        let data = match *self {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                packet.set_msg_type(Icmpv6Message::EchoRequest);
                packet.set_msg_code(0);
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                data
            }
            Icmpv6Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                packet.set_msg_type(Icmpv6Message::EchoReply);
                packet.set_msg_code(0);
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                data
            }
            Icmpv6Repr::DstUnreachable { code, data } => {
                packet.set_msg_type(Icmpv6Message::DstUnreachable);
                packet.set_msg_code(code);
                packet.set_mtu(0);
                data
            }
            Icmpv6Repr::PacketTooBig { mtu, data } => {
                packet.set_msg_type(Icmpv6Message::PacketTooBig);
                packet.set_msg_code(0);
                packet.set_mtu(mtu);
                data
            }
            Icmpv6Repr::TimeExceeded { code, data } => {
                packet.set_msg_type(Icmpv6Message::TimeExceeded);
                packet.set_msg_code(code);
                packet.set_mtu(0);
                data
            }
            Icmpv6Repr::ParamProblem {
                code,
                pointer,
                data,
            } => {
                packet.set_msg_type(Icmpv6Message::ParamProblem);
                packet.set_msg_code(code);
                packet.set_pointer(pointer);
                data
            }
            Icmpv6Repr::Ndisc(ndisc) => {
                ndisc.emit(packet);
                &[]
            }
        };
        packet.data_mut()[..data.len()].copy_from_slice(data);
        let len = self.buffer_len();
        let mut message = Icmpv6Packet::new_unchecked(&mut packet.buffer_mut()[..len]);
        message.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::EthernetAddress;
    use crate::fuzz;
    use crate::ipv6::{Ipv6Packet, Ipv6Repr};
    use proptest::prelude::*;

    /// A Neighbor Solicitation from fe80::5054:ff:fe12:3456 to
    /// ff02::1:ff00:1 for 2001:db8::1, with a source link-layer address
    /// option (52:54:00:12:34:56), as captured.
    const NS: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x01, // IPv6
        0x87, 0x00, 0x42, 0xea, 0x00, 0x00, 0x00, 0x00, // NS
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, // target
        0x01, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // SLLA
    ];

    /// The solicited answer: 2001:db8::1 is at 02:00:00:00:00:01 (S and O
    /// set, target link-layer address option).
    const NA: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, // IPv6
        0x88, 0x00, 0x35, 0xf1, 0x60, 0x00, 0x00, 0x00, // NA, S|O
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, // target
        0x02, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // TLLA
    ];

    /// A Router Advertisement from fe80::1 with SLLA, MTU 1500 and a
    /// Prefix Information option for 2001:db8::/64 (skipped by the parser).
    const RA: [u8; 104] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x40, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // IPv6
        0x86, 0x00, 0xb2, 0x40, 0x40, 0x80, 0x07, 0x08, // RA, hop limit 64, M, 1800 s
        0x00, 0x00, 0x75, 0x30, 0x00, 0x00, 0x03, 0xe8, // reachable 30000, retrans 1000
        0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // SLLA
        0x05, 0x01, 0x00, 0x00, 0x00, 0x00, 0x05, 0xdc, // MTU 1500
        0x03, 0x04, 0x40, 0xc0, 0x00, 0x01, 0x51, 0x80, 0x00, 0x00, 0x38, 0x40, 0x00, 0x00, 0x00,
        0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, // prefix information
    ];

    /// An echo request from 2001:db8::2 to 2001:db8::1, ident 0x1234,
    /// sequence 7, payload "vrhost-ping".
    const ECHO: [u8; 59] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x13, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // IPv6
        0x80, 0x00, 0xc1, 0xcc, 0x12, 0x34, 0x00, 0x07, // echo request
        0x76, 0x72, 0x68, 0x6f, 0x73, 0x74, 0x2d, 0x70, 0x69, 0x6e, 0x67,
    ];

    /// Parses the IPv6 header and the ICMPv6 message of a captured packet.
    fn parse(packet: &[u8]) -> Result<(Ipv6Repr, Icmpv6Repr<'_>)> {
        let ip = Ipv6Packet::new_checked(packet)?;
        let ip_repr = Ipv6Repr::parse(&ip)?;
        let payload = &packet[Ipv6Packet::<&[u8]>::HEADER_LEN..][..ip_repr.payload_len];
        let icmp = Icmpv6Packet::new_checked(payload)?;
        let repr = Icmpv6Repr::parse(&ip_repr.src_addr, &ip_repr.dst_addr, &icmp)?;
        Ok((ip_repr, repr))
    }

    fn addr(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_captured_ns() {
        let icmp = Icmpv6Packet::new_checked(&NS[40..]).unwrap();
        assert_eq!(icmp.msg_type(), Icmpv6Message::NeighborSolicit);
        assert_eq!(icmp.msg_code(), 0);
        assert_eq!(icmp.checksum(), 0x42ea);
        assert!(!icmp.is_error());
        assert!(icmp.verify_checksum(&addr("fe80::5054:ff:fe12:3456"), &addr("ff02::1:ff00:1")));
        assert!(!icmp.verify_checksum(&addr("fe80::5054:ff:fe12:3457"), &addr("ff02::1:ff00:1")));
        let (ip, repr) = parse(&NS).unwrap();
        assert_eq!(ip.hop_limit, 255);
        assert_eq!(
            repr,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: addr("2001:db8::1"),
                lladdr: Some(EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])),
            })
        );
    }

    #[test]
    fn parse_captured_na() {
        let (_, repr) = parse(&NA).unwrap();
        assert_eq!(
            repr,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                target_addr: addr("2001:db8::1"),
                lladdr: Some(EthernetAddress([0x02, 0, 0, 0, 0, 0x01])),
            })
        );
    }

    #[test]
    fn parse_captured_ra() {
        let (ip, repr) = parse(&RA).unwrap();
        assert_eq!(ip.dst_addr, crate::ipv6::ALL_NODES);
        assert_eq!(
            repr,
            Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
                hop_limit: 64,
                flags: crate::ndisc::router_flags::MANAGED,
                router_lifetime: 1800,
                reachable_time: 30000,
                retrans_time: 1000,
                lladdr: Some(EthernetAddress([0x02, 0, 0, 0, 0, 0x01])),
                mtu: Some(1500),
            })
        );
    }

    #[test]
    fn parse_captured_echo() {
        let (_, repr) = parse(&ECHO).unwrap();
        assert_eq!(
            repr,
            Icmpv6Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 7,
                data: b"vrhost-ping",
            }
        );
    }

    /// Recomputes the checksum of a message inside a captured packet after
    /// an edit, so that the edit reaches the NDP checks.
    fn resum(packet: &mut [u8]) {
        let src = Ipv6Addr::from(crate::array::<16>(&packet[8..24]));
        let dst = Ipv6Addr::from(crate::array::<16>(&packet[24..40]));
        Icmpv6Packet::new_unchecked(&mut packet[40..]).fill_checksum(&src, &dst);
    }

    #[test]
    fn ndisc_rejections() {
        // RFC 4861 §4.6: option length 0.
        let mut p = NS;
        p[65] = 0;
        resum(&mut p);
        assert_eq!(parse(&p).unwrap_err(), Error::Malformed);
        // RFC 4861 §7.1.1: code must be 0.
        let mut p = NS;
        p[41] = 1;
        resum(&mut p);
        assert_eq!(parse(&p).unwrap_err(), Error::Malformed);
        // RFC 4861 §7.1.1: multicast target.
        let mut p = NS;
        p[48] = 0xff;
        resum(&mut p);
        assert_eq!(parse(&p).unwrap_err(), Error::Malformed);
        // RFC 4861 §7.1.1: DAD probe (unspecified source) with an SLLA.
        let mut p = NS;
        p[8..24].fill(0);
        resum(&mut p);
        assert_eq!(parse(&p).unwrap_err(), Error::Malformed);
        // ... and without it, it is fine.
        let mut dad = [0u8; 64];
        dad.copy_from_slice(&NS[..64]);
        dad[5] = 24;
        dad[8..24].fill(0);
        resum(&mut dad);
        assert!(matches!(
            parse(&dad).unwrap().1,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit { lladdr: None, .. })
        ));
        // RFC 4861 §7.1.2: solicited NA to a multicast address.
        let mut p = NA;
        p[24..40].copy_from_slice(&crate::ipv6::ALL_NODES.octets());
        resum(&mut p);
        assert_eq!(parse(&p).unwrap_err(), Error::Malformed);
        // RFC 4861 §6.1.2: RA from a global address.
        let mut p = RA;
        p[8] = 0x20;
        resum(&mut p);
        assert_eq!(parse(&p).unwrap_err(), Error::Malformed);
        // A truncated NS body (checksum fixed) is Truncated.
        let mut short = [0u8; 60];
        short.copy_from_slice(&NS[..60]);
        short[5] = 20;
        resum(&mut short);
        assert_eq!(parse(&short).unwrap_err(), Error::Truncated);
        // Bad checksum.
        let mut p = NS;
        p[70] ^= 1;
        assert_eq!(parse(&p).unwrap_err(), Error::Checksum);
    }

    #[test]
    fn unsupported_types() {
        for t in [130u8, 131, 132, 137, 143, 200, 100] {
            let mut p = ECHO;
            p[40] = t;
            resum(&mut p);
            assert_eq!(parse(&p).unwrap_err(), Error::Unsupported, "type {t}");
        }
    }

    #[test]
    fn message_types() {
        for v in 0..=u8::MAX {
            let m = Icmpv6Message::from(v);
            assert_eq!(u8::from(m), v);
            assert_eq!(m.is_error(), v < 128);
        }
        assert_eq!(Icmpv6Message::from(143), Icmpv6Message::MldV2Report);
    }

    /// Every representable message, built from random parts.
    fn repr_strategy() -> impl Strategy<Value = Icmpv6Repr<'static>> {
        const DATA: &[u8] = &ECHO;
        let lladdr = proptest::option::of(any::<[u8; 6]>().prop_map(EthernetAddress));
        (
            0..10u8,
            any::<u32>(),
            any::<u16>(),
            any::<u8>(),
            0..=DATA.len(),
            any::<[u8; 16]>(),
            lladdr,
            proptest::option::of(any::<u32>()),
        )
            .prop_map(|(kind, word, half, code, n, target, lladdr, mtu)| {
                let data = &DATA[..n];
                // Keep NS/NA targets unicast, as RFC 4861 requires.
                let mut target = target;
                target[0] &= 0x7f;
                let target_addr = Ipv6Addr::from(target);
                match kind {
                    0 => Icmpv6Repr::EchoRequest {
                        ident: half,
                        seq_no: word as u16,
                        data,
                    },
                    1 => Icmpv6Repr::EchoReply {
                        ident: half,
                        seq_no: word as u16,
                        data,
                    },
                    2 => Icmpv6Repr::DstUnreachable { code, data },
                    3 => Icmpv6Repr::PacketTooBig { mtu: word, data },
                    4 => Icmpv6Repr::TimeExceeded { code, data },
                    5 => Icmpv6Repr::ParamProblem {
                        code,
                        pointer: word,
                        data,
                    },
                    6 => Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit { lladdr }),
                    7 => Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
                        hop_limit: code,
                        flags: code.rotate_left(3),
                        router_lifetime: half,
                        reachable_time: word,
                        retrans_time: word.rotate_left(7),
                        lladdr,
                        mtu,
                    }),
                    8 => Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                        target_addr,
                        lladdr,
                    }),
                    _ => Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                        flags: NdiscNeighborFlags::from_bits_truncate(code),
                        target_addr,
                        lladdr,
                    }),
                }
            })
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn emit_into_junk_then_parse(repr in repr_strategy()) {
            // Link-local unicast on both ends satisfies every RFC 4861
            // address rule.
            let src = addr("fe80::1");
            let dst = addr("fe80::2");
            let mut buf = [0xa5u8; 128];
            let len = repr.buffer_len();
            repr.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(&mut buf[..]));
            prop_assert!(buf[len..].iter().all(|&b| b == 0xa5));
            let packet = Icmpv6Packet::new_checked(&buf[..len]).unwrap();
            prop_assert!(packet.verify_checksum(&src, &dst));
            prop_assert_eq!(Icmpv6Repr::parse(&src, &dst, &packet).unwrap(), repr);
        }

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(96)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_random_with_valid_checksum(
            mut bytes in fuzz::bytes(96),
            kind in prop::sample::select(vec![1u8, 2, 3, 4, 128, 129, 133, 134, 135, 136, 137]),
        ) {
            if bytes.len() >= 8 {
                bytes[0] = kind;
                bytes[1] = 0;
                let (src, dst) = (addr("fe80::1"), addr("fe80::2"));
                Icmpv6Packet::new_unchecked(&mut bytes[..]).fill_checksum(&src, &dst);
            }
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated_ns(bytes in fuzz::mutated(&NS)) {
            exercise_ip(&bytes);
        }

        #[test]
        fn no_panic_mutated_ra(bytes in fuzz::mutated(&RA)) {
            exercise_ip(&bytes);
        }

        #[test]
        fn no_panic_mutated_ra_resummed(bytes in fuzz::mutated(&RA)) {
            // Fix the checksum so that mutations reach the option parser.
            let mut bytes = bytes;
            if bytes.len() >= 48 {
                resum(&mut bytes);
            }
            exercise_ip(&bytes);
        }
    }

    fn exercise(bytes: &[u8]) {
        let (src, dst) = (addr("fe80::1"), addr("fe80::2"));
        if let Ok(p) = Icmpv6Packet::new_checked(bytes) {
            let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.is_error());
            let _ = (
                p.echo_ident(),
                p.echo_seq_no(),
                p.mtu(),
                p.pointer(),
                p.data(),
            );
            let _ = p.verify_checksum(&src, &dst);
            let _ = Icmpv6Repr::parse(&src, &dst, &p);
            let _ = NdiscRepr::parse(&p);
        }
        let _ = Icmpv6Repr::parse(&src, &dst, &Icmpv6Packet::new_unchecked(bytes));
        let _ = NdiscRepr::parse(&Icmpv6Packet::new_unchecked(bytes));
    }

    fn exercise_ip(bytes: &[u8]) {
        let _ = parse(bytes);
        if bytes.len() >= 40 {
            exercise(&bytes[40..]);
        }
    }
}
