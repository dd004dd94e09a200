//! Ethernet II framing (IEEE 802.3 clause 3, "DIX" type field) and MAC
//! addresses.
//!
//! ```text
//!  0                   6                  12      14
//! +-------------------+-------------------+-------+---------
//! |    destination    |      source       | type  | payload
//! +-------------------+-------------------+-------+---------
//! ```
//!
//! The frame check sequence is not part of the buffer: NICs and TAP
//! devices strip it.

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

use crate::{Error, Result};

/// A 48-bit IEEE 802 MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// Builds an address from a slice.
    ///
    /// # Panics
    ///
    /// Panics if `data.len() != 6`. Use it on slices whose length has
    /// already been checked, such as [`crate::arp::ArpPacket`] addresses
    /// after verifying the hardware length.
    pub fn from_bytes(data: &[u8]) -> EthernetAddress {
        let mut bytes = [0u8; 6];
        bytes.copy_from_slice(data);
        EthernetAddress(bytes)
    }

    /// The six octets.
    pub const fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether this is `ff:ff:ff:ff:ff:ff`.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Whether the I/G bit (bit 0 of the first octet, IEEE 802 §8.2) is
    /// set. Broadcast is a multicast address too.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether the I/G bit is clear: an individual (unicast) address.
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// Whether the U/L bit (bit 1 of the first octet) is set: a locally
    /// administered address.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for EthernetAddress {
    type Err = Error;

    /// Parses six colon-separated groups of exactly two hex digits, such as
    /// `02:00:00:00:00:01` (either case). Anything else is
    /// [`Error::Malformed`].
    fn from_str(s: &str) -> Result<Self> {
        let mut out = [0u8; 6];
        let mut groups = s.split(':');
        for byte in out.iter_mut() {
            let g = groups.next().ok_or(Error::Malformed)?;
            if g.len() != 2 || !g.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(Error::Malformed);
            }
            *byte = u8::from_str_radix(g, 16).map_err(|_| Error::Malformed)?;
        }
        if groups.next().is_some() {
            return Err(Error::Malformed);
        }
        Ok(EthernetAddress(out))
    }
}

/// The Ethernet multicast address an IPv6 multicast group maps to:
/// `33:33` followed by the last four octets of the group (RFC 2464 §7).
pub fn ipv6_multicast_mac(addr: &Ipv6Addr) -> EthernetAddress {
    let o = addr.octets();
    EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// The Ethernet multicast address an IPv4 multicast group maps to:
/// `01:00:5e` followed by the low 23 bits of the group (RFC 1112 §6.4).
pub fn ipv4_multicast_mac(addr: &Ipv4Addr) -> EthernetAddress {
    let o = addr.octets();
    EthernetAddress([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
}

/// The EtherType field (IEEE 802.3 clause 3.2.6; values from the IEEE
/// registry). An open enum: any value round-trips through `u16`.
///
/// `Unknown(v)` is only produced for values without a named variant;
/// building `Unknown(0x0800)` by hand gives a value that compares unequal
/// to `Ipv4` even though it encodes the same number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EtherType {
    /// 0x0800.
    Ipv4,
    /// 0x0806.
    Arp,
    /// 0x86dd.
    Ipv6,
    /// 0x8100, IEEE 802.1Q customer VLAN tag.
    Vlan,
    /// 0x88a8, IEEE 802.1ad service VLAN tag (Q-in-Q outer tag).
    QinQ,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8100 => EtherType::Vlan,
            0x88a8 => EtherType::QinQ,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(t: EtherType) -> u16 {
        match t {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Vlan => 0x8100,
            EtherType::QinQ => 0x88a8,
            EtherType::Unknown(v) => v,
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtherType::Ipv4 => f.write_str("IPv4"),
            EtherType::Arp => f.write_str("ARP"),
            EtherType::Ipv6 => f.write_str("IPv6"),
            EtherType::Vlan => f.write_str("802.1Q"),
            EtherType::QinQ => f.write_str("802.1ad"),
            EtherType::Unknown(v) => write!(f, "0x{v:04x}"),
        }
    }
}

mod field {
    use crate::Field;

    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: usize = 14;
}

/// A zero-copy view of an Ethernet II frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Length of the header: two addresses and the EtherType.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than [`Self::HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> EthernetFrame<T> {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// [`Error::Truncated`] if the buffer cannot hold the 14-byte header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < Self::HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole wrapped buffer, header included.
    pub fn buffer(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Destination address.
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::DESTINATION])
    }

    /// Source address.
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::SOURCE])
    }

    /// EtherType of the payload (the outer one when the frame is tagged).
    pub fn ethertype(&self) -> EtherType {
        crate::be16(&self.buffer.as_ref()[field::ETHERTYPE]).into()
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// The whole wrapped buffer, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        let v: u16 = ethertype.into();
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&v.to_be_bytes());
    }

    /// Everything after the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for EthernetFrame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed header of an Ethernet II frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source address.
    pub src_addr: EthernetAddress,
    /// Destination address.
    pub dst_addr: EthernetAddress,
    /// EtherType of the payload.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Reads the header of a frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Length of the emitted header: always 14.
    pub const fn buffer_len(&self) -> usize {
        field::PAYLOAD
    }

    /// Writes the header into `frame`, which must hold at least
    /// [`Self::buffer_len`] bytes. The payload is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz;
    use proptest::prelude::*;

    /// A broadcast ARP request frame header as captured on a LAN.
    const FRAME: [u8; 18] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // src
        0x08, 0x06, // ARP
        0x00, 0x01, 0x08, 0x00, // start of the ARP payload
    ];

    #[test]
    fn parse_captured() {
        let frame = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr(), EthernetAddress::BROADCAST);
        assert_eq!(
            frame.src_addr(),
            EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
        );
        assert_eq!(frame.ethertype(), EtherType::Arp);
        assert_eq!(frame.payload(), &[0x00, 0x01, 0x08, 0x00]);
        let repr = EthernetRepr::parse(&frame).unwrap();
        assert_eq!(repr.ethertype, EtherType::Arp);
        assert!(repr.dst_addr.is_broadcast());
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&FRAME[..13]).unwrap_err(),
            Error::Truncated
        );
        assert!(EthernetFrame::new_checked(&FRAME[..14]).is_ok());
    }

    #[test]
    fn emit_into_junk_then_parse() {
        let repr = EthernetRepr {
            src_addr: "02:00:00:00:00:01".parse().unwrap(),
            dst_addr: "33:33:00:00:00:01".parse().unwrap(),
            ethertype: EtherType::Ipv6,
        };
        let mut buf = [0xa5u8; 20];
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        repr.emit(&mut frame);
        assert_eq!(frame.payload_mut(), &[0xa5; 6]);
        let frame = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&frame).unwrap(), repr);
        assert_eq!(repr.buffer_len(), EthernetFrame::<&[u8]>::HEADER_LEN);
    }

    #[test]
    fn address_text_round_trip() {
        let a: EthernetAddress = "02:00:00:00:00:01".parse().unwrap();
        assert_eq!(a, EthernetAddress([2, 0, 0, 0, 0, 1]));
        assert_eq!(std::format!("{a}"), "02:00:00:00:00:01");
        let b: EthernetAddress = "AA:bb:CC:dd:EE:ff".parse().unwrap();
        assert_eq!(std::format!("{b}"), "aa:bb:cc:dd:ee:ff");
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "02:00:00:00:00:1",
            "02:00:00:00:00:001",
            "02-00-00-00-00-01",
            "02:00:00:00:00:0g",
            "+2:00:00:00:00:01",
            "02:00:00:00:00:01:",
        ] {
            assert_eq!(
                bad.parse::<EthernetAddress>(),
                Err(Error::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn address_classes() {
        assert!(EthernetAddress::BROADCAST.is_broadcast());
        assert!(EthernetAddress::BROADCAST.is_multicast());
        let u = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
        assert!(u.is_unicast() && u.is_local() && !u.is_multicast());
        let m = EthernetAddress([0x01, 0x00, 0x5e, 0, 0, 1]);
        assert!(m.is_multicast() && !m.is_broadcast() && !m.is_unicast());
        assert_eq!(u.as_bytes(), &[0x02, 0, 0, 0, 0, 1]);
        assert_eq!(
            EthernetAddress::from_bytes(&[1, 2, 3, 4, 5, 6]).0,
            [1, 2, 3, 4, 5, 6]
        );
    }

    #[test]
    #[should_panic]
    fn from_bytes_panics_on_wrong_length() {
        let _ = EthernetAddress::from_bytes(&[1, 2, 3]);
    }

    #[test]
    fn multicast_macs() {
        // RFC 2464 §7 example: ff02::1:ff00:2 -> 33:33:ff:00:00:02.
        let g6: Ipv6Addr = "ff02::1:ff00:2".parse().unwrap();
        assert_eq!(
            ipv6_multicast_mac(&g6),
            EthernetAddress([0x33, 0x33, 0xff, 0x00, 0x00, 0x02])
        );
        // RFC 1112 §6.4: the high bit of the second octet is dropped.
        let g4 = Ipv4Addr::new(239, 129, 2, 3);
        assert_eq!(
            ipv4_multicast_mac(&g4),
            EthernetAddress([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03])
        );
    }

    #[test]
    fn ethertype_round_trip_all() {
        for v in 0..=u16::MAX {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
        assert_eq!(EtherType::from(0x8100), EtherType::Vlan);
        assert_eq!(EtherType::from(0x88a8), EtherType::QinQ);
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(frame) = EthernetFrame::new_checked(bytes) {
            let _ = (frame.dst_addr(), frame.src_addr(), frame.ethertype());
            let _ = frame.payload();
            EthernetRepr::parse(&frame).unwrap();
        }
        let _ = EthernetRepr::parse(&EthernetFrame::new_unchecked(bytes));
        if let Ok(s) = core::str::from_utf8(bytes) {
            let _ = s.parse::<EthernetAddress>();
        }
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(64)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated(bytes in fuzz::mutated(&FRAME)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_address_text(s in "[0-9a-fA-F:x+-]{0,20}") {
            let _ = s.parse::<EthernetAddress>();
        }

        #[test]
        fn address_display_parse_round_trip(a in any::<[u8; 6]>()) {
            let addr = EthernetAddress(a);
            prop_assert_eq!(std::format!("{addr}").parse::<EthernetAddress>(), Ok(addr));
        }
    }
}
