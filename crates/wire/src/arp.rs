//! The Address Resolution Protocol (RFC 826).
//!
//! ```text
//!  0       2       4   5   6       8
//! +-------+-------+---+---+-------+-----+-----+-----+-----+
//! | htype | ptype |hln|pln|  op   | sha | spa | tha | tpa |
//! +-------+-------+---+---+-------+-----+-----+-----+-----+
//!                                   hln   pln   hln   pln  bytes
//! ```
//!
//! [`ArpPacket`] handles any hardware and protocol address length;
//! [`ArpRepr`] only Ethernet/IPv4, the one combination a router needs.

use core::fmt;
use core::net::Ipv4Addr;

use crate::ethernet::EthernetAddress;
use crate::{Error, Result};

/// The ARP opcode (RFC 826; IANA "Operation Codes" registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// 1.
    Request,
    /// 2.
    Reply,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(v: u16) -> Self {
        match v {
            1 => Operation::Request,
            2 => Operation::Reply,
            other => Operation::Unknown(other),
        }
    }
}

impl From<Operation> for u16 {
    fn from(op: Operation) -> u16 {
        match op {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(v) => v,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::Request => f.write_str("request"),
            Operation::Reply => f.write_str("reply"),
            Operation::Unknown(v) => write!(f, "op {v}"),
        }
    }
}

/// Hardware type of Ethernet (RFC 826; IANA "Hardware Types").
pub const HARDWARE_ETHERNET: u16 = 1;
/// Protocol type of IPv4: its EtherType (RFC 826).
pub const PROTOCOL_IPV4: u16 = 0x0800;

mod field {
    use crate::Field;

    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    /// The four addresses start here; their ranges depend on HLEN/PLEN.
    pub const ADDRS: usize = 8;

    pub const fn sha(hlen: u8, _plen: u8) -> Field {
        let start = ADDRS;
        start..start + hlen as usize
    }

    pub const fn spa(hlen: u8, plen: u8) -> Field {
        let start = sha(hlen, plen).end;
        start..start + plen as usize
    }

    pub const fn tha(hlen: u8, plen: u8) -> Field {
        let start = spa(hlen, plen).end;
        start..start + hlen as usize
    }

    pub const fn tpa(hlen: u8, plen: u8) -> Field {
        let start = tha(hlen, plen).end;
        start..start + plen as usize
    }
}

/// A zero-copy view of an ARP packet with any address lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Length of the fixed part, before the addresses.
    pub const FIXED_LEN: usize = field::ADDRS;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than the lengths its header announces.
    pub const fn new_unchecked(buffer: T) -> ArpPacket<T> {
        ArpPacket { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<ArpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// [`Error::Truncated`] if the buffer cannot hold the fixed part, or
    /// the four addresses whose lengths the fixed part announces. Extra
    /// bytes (Ethernet padding) are allowed.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::ADDRS {
            return Err(Error::Truncated);
        }
        let end = field::tpa(self.hardware_len(), self.protocol_len()).end;
        if len < end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole wrapped buffer.
    pub fn buffer(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::HTYPE])
    }

    /// Protocol type (0x0800 for IPv4).
    pub fn protocol_type(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::PTYPE])
    }

    /// Length of a hardware address in bytes.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Length of a protocol address in bytes.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// The opcode.
    pub fn operation(&self) -> Operation {
        crate::be16(&self.buffer.as_ref()[field::OPER]).into()
    }

    /// Sender hardware address, `hardware_len` bytes.
    pub fn source_hardware_addr(&self) -> &[u8] {
        let r = field::sha(self.hardware_len(), self.protocol_len());
        &self.buffer.as_ref()[r]
    }

    /// Sender protocol address, `protocol_len` bytes.
    pub fn source_protocol_addr(&self) -> &[u8] {
        let r = field::spa(self.hardware_len(), self.protocol_len());
        &self.buffer.as_ref()[r]
    }

    /// Target hardware address, `hardware_len` bytes.
    pub fn target_hardware_addr(&self) -> &[u8] {
        let r = field::tha(self.hardware_len(), self.protocol_len());
        &self.buffer.as_ref()[r]
    }

    /// Target protocol address, `protocol_len` bytes.
    pub fn target_protocol_addr(&self) -> &[u8] {
        let r = field::tpa(self.hardware_len(), self.protocol_len());
        &self.buffer.as_ref()[r]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// The whole wrapped buffer, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the hardware type.
    pub fn set_hardware_type(&mut self, v: u16) {
        self.buffer.as_mut()[field::HTYPE].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, v: u16) {
        self.buffer.as_mut()[field::PTYPE].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the hardware address length. This moves every address field:
    /// call [`Self::check_len`] again before using them.
    pub fn set_hardware_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HLEN] = v;
    }

    /// Sets the protocol address length. This moves every address field
    /// after the first: call [`Self::check_len`] again before using them.
    pub fn set_protocol_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLEN] = v;
    }

    /// Sets the opcode.
    pub fn set_operation(&mut self, op: Operation) {
        let v: u16 = op.into();
        self.buffer.as_mut()[field::OPER].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the sender hardware address.
    ///
    /// # Panics
    ///
    /// Panics if `addr.len() != hardware_len()`.
    pub fn set_source_hardware_addr(&mut self, addr: &[u8]) {
        let r = field::sha(self.hardware_len(), self.protocol_len());
        self.buffer.as_mut()[r].copy_from_slice(addr);
    }

    /// Sets the sender protocol address.
    ///
    /// # Panics
    ///
    /// Panics if `addr.len() != protocol_len()`.
    pub fn set_source_protocol_addr(&mut self, addr: &[u8]) {
        let r = field::spa(self.hardware_len(), self.protocol_len());
        self.buffer.as_mut()[r].copy_from_slice(addr);
    }

    /// Sets the target hardware address.
    ///
    /// # Panics
    ///
    /// Panics if `addr.len() != hardware_len()`.
    pub fn set_target_hardware_addr(&mut self, addr: &[u8]) {
        let r = field::tha(self.hardware_len(), self.protocol_len());
        self.buffer.as_mut()[r].copy_from_slice(addr);
    }

    /// Sets the target protocol address.
    ///
    /// # Panics
    ///
    /// Panics if `addr.len() != protocol_len()`.
    pub fn set_target_protocol_addr(&mut self, addr: &[u8]) {
        let r = field::tpa(self.hardware_len(), self.protocol_len());
        self.buffer.as_mut()[r].copy_from_slice(addr);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for ArpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A parsed Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request, reply, or another opcode (kept so that the caller decides
    /// what to count and drop).
    pub operation: Operation,
    /// Sender hardware address.
    pub source_hardware_addr: EthernetAddress,
    /// Sender protocol address.
    pub source_protocol_addr: Ipv4Addr,
    /// Target hardware address (ignored in requests, RFC 826 "Packet
    /// Generation").
    pub target_hardware_addr: EthernetAddress,
    /// Target protocol address.
    pub target_protocol_addr: Ipv4Addr,
}

/// Bytes of an Ethernet/IPv4 ARP packet: 8 fixed + 2 × (6 + 4).
const ETHERNET_IPV4_LEN: usize = 28;

impl ArpRepr {
    /// Reads an Ethernet/IPv4 ARP packet.
    ///
    /// RFC 826 "Packet Reception": a receiver that does not speak the
    /// hardware or protocol type discards the packet. Anything but
    /// htype 1, ptype 0x0800, hlen 6 and plen 4 is [`Error::Unsupported`].
    pub fn parse<T: AsRef<[u8]>>(packet: &ArpPacket<T>) -> Result<ArpRepr> {
        packet.check_len()?;
        if packet.hardware_type() != HARDWARE_ETHERNET
            || packet.protocol_type() != PROTOCOL_IPV4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(Error::Unsupported);
        }
        Ok(ArpRepr {
            operation: packet.operation(),
            source_hardware_addr: EthernetAddress::from_bytes(packet.source_hardware_addr()),
            source_protocol_addr: Ipv4Addr::from(crate::array::<4>(packet.source_protocol_addr())),
            target_hardware_addr: EthernetAddress::from_bytes(packet.target_hardware_addr()),
            target_protocol_addr: Ipv4Addr::from(crate::array::<4>(packet.target_protocol_addr())),
        })
    }

    /// Length of the emitted packet: always 28.
    pub const fn buffer_len(&self) -> usize {
        ETHERNET_IPV4_LEN
    }

    /// Writes the packet into a buffer of at least [`Self::buffer_len`]
    /// bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ArpPacket<T>) {
        packet.set_hardware_type(HARDWARE_ETHERNET);
        packet.set_protocol_type(PROTOCOL_IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_source_hardware_addr(&self.source_hardware_addr.0);
        packet.set_source_protocol_addr(&self.source_protocol_addr.octets());
        packet.set_target_hardware_addr(&self.target_hardware_addr.0);
        packet.set_target_protocol_addr(&self.target_protocol_addr.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::{EtherType, EthernetFrame};
    use crate::fuzz;
    use proptest::prelude::*;

    /// A broadcast ARP request as captured on a LAN: who has 192.168.1.2?
    /// Tell 192.168.1.1. Padded to the 60-byte Ethernet minimum.
    const REQUEST_FRAME: [u8; 60] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x06, //
        0x00, 0x01, // htype Ethernet
        0x08, 0x00, // ptype IPv4
        0x06, 0x04, // hlen, plen
        0x00, 0x01, // request
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // sha
        0xc0, 0xa8, 0x01, 0x01, // spa
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tha
        0xc0, 0xa8, 0x01, 0x02, // tpa
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, // padding
    ];

    /// The ARP payload of [`REQUEST_FRAME`], padding included.
    fn request() -> &'static [u8] {
        &REQUEST_FRAME[14..]
    }

    #[test]
    fn parse_captured_request() {
        let frame = EthernetFrame::new_checked(&REQUEST_FRAME[..]).unwrap();
        assert_eq!(frame.ethertype(), EtherType::Arp);
        let packet = ArpPacket::new_checked(frame.payload()).unwrap();
        assert_eq!(packet.hardware_type(), 1);
        assert_eq!(packet.protocol_type(), 0x0800);
        assert_eq!(packet.hardware_len(), 6);
        assert_eq!(packet.protocol_len(), 4);
        assert_eq!(packet.operation(), Operation::Request);
        assert_eq!(packet.source_protocol_addr(), &[192, 168, 1, 1]);
        assert_eq!(packet.target_protocol_addr(), &[192, 168, 1, 2]);
        assert_eq!(
            ArpRepr::parse(&packet).unwrap(),
            ArpRepr {
                operation: Operation::Request,
                source_hardware_addr: EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
                source_protocol_addr: Ipv4Addr::new(192, 168, 1, 1),
                target_hardware_addr: EthernetAddress([0; 6]),
                target_protocol_addr: Ipv4Addr::new(192, 168, 1, 2),
            }
        );
    }

    #[test]
    fn length_follows_address_lengths() {
        assert_eq!(
            ArpPacket::new_checked(&request()[..27]).unwrap_err(),
            Error::Truncated
        );
        assert!(ArpPacket::new_checked(&request()[..28]).is_ok());
        assert_eq!(
            ArpPacket::new_checked(&request()[..7]).unwrap_err(),
            Error::Truncated
        );
        // A 16-byte hardware address needs 8 + 2 * (16 + 4) = 48 bytes.
        let mut long = [0u8; 48];
        long[..8].copy_from_slice(&[0x00, 0x06, 0x08, 0x00, 16, 4, 0x00, 0x01]);
        assert!(ArpPacket::new_checked(&long[..]).is_ok());
        assert_eq!(
            ArpPacket::new_checked(&long[..47]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn non_ethernet_ipv4_is_unsupported() {
        for (at, val) in [(1, 6u8), (2, 0x86), (4, 8), (5, 16)] {
            let mut b = [0u8; 80];
            b[..46].copy_from_slice(request());
            b[at] = val;
            let packet = ArpPacket::new_checked(&b[..]).unwrap();
            assert_eq!(
                ArpRepr::parse(&packet),
                Err(Error::Unsupported),
                "byte {at}"
            );
        }
    }

    #[test]
    fn operation_round_trip() {
        for v in 0..=u16::MAX {
            assert_eq!(u16::from(Operation::from(v)), v);
        }
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn emit_into_junk_then_parse(
            op in any::<u16>(),
            sha in any::<[u8; 6]>(),
            spa in any::<[u8; 4]>(),
            tha in any::<[u8; 6]>(),
            tpa in any::<[u8; 4]>(),
        ) {
            let repr = ArpRepr {
                operation: op.into(),
                source_hardware_addr: EthernetAddress(sha),
                source_protocol_addr: Ipv4Addr::from(spa),
                target_hardware_addr: EthernetAddress(tha),
                target_protocol_addr: Ipv4Addr::from(tpa),
            };
            let mut buf = [0xa5u8; 28];
            repr.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
            let packet = ArpPacket::new_checked(&buf[..repr.buffer_len()]).unwrap();
            prop_assert_eq!(ArpRepr::parse(&packet).unwrap(), repr);
        }

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(64)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated(bytes in fuzz::mutated(&REQUEST_FRAME[14..])) {
            exercise(&bytes);
        }
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(p) = ArpPacket::new_checked(bytes) {
            let _ = (p.hardware_type(), p.protocol_type(), p.operation());
            let _ = (p.source_hardware_addr(), p.source_protocol_addr());
            let _ = (p.target_hardware_addr(), p.target_protocol_addr());
            let _ = ArpRepr::parse(&p);
        }
        let _ = ArpRepr::parse(&ArpPacket::new_unchecked(bytes));
    }
}
