//! UDP (RFC 768).
//!
//! ```text
//!  0                              16                              32
//! +-------------------------------+-------------------------------+
//! |          source port          |       destination port        |
//! +-------------------------------+-------------------------------+
//! |            length             |           checksum            |
//! +-------------------------------+-------------------------------+
//! |                            payload                            |
//! +---------------------------------------------------------------+
//! ```

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::checksum;
use crate::ip::IpProtocol;
use crate::{Error, Result};

mod field {
    use crate::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
    pub const PAYLOAD: usize = 8;
}

/// A zero-copy view of a UDP datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Length of the header.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than the header or the length field.
    pub const fn new_unchecked(buffer: T) -> UdpPacket<T> {
        UdpPacket { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the 8-byte header
    /// ([`Error::Truncated`]), that the length field covers at least the
    /// header (RFC 768: "the minimum value of the length is eight",
    /// [`Error::Malformed`]) and that it fits in the buffer
    /// ([`Error::Truncated`]). Bytes past the length field are ignored.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::PAYLOAD {
            return Err(Error::Truncated);
        }
        let udp_len = usize::from(self.len());
        if udp_len < field::PAYLOAD {
            return Err(Error::Malformed);
        }
        if udp_len > len {
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

    /// Source port.
    pub fn src_port(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::SRC_PORT])
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::DST_PORT])
    }

    /// Length field: header plus payload, in bytes.
    pub fn len(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// Whether the payload is empty (length field 8).
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= field::PAYLOAD
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..usize::from(self.len())]
    }

    fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.len())]
    }

    /// Whether the checksum verifies with the IPv4 pseudo-header. A zero
    /// checksum means "not computed" and is accepted (RFC 768).
    pub fn verify_checksum_v4(&self, src: &Ipv4Addr, dst: &Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let d = self.datagram();
        let ph =
            checksum::pseudo_header_v4(src, dst, IpProtocol::Udp.into(), u32::from(self.len()));
        checksum::fold(ph + checksum::sum(d)) == 0xffff
    }

    /// Whether the checksum verifies with the IPv6 pseudo-header. A zero
    /// checksum is rejected: it is mandatory over IPv6 (RFC 8200 §8.1).
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        if self.checksum() == 0 {
            return false;
        }
        let d = self.datagram();
        let ph =
            checksum::pseudo_header_v6(src, dst, IpProtocol::Udp.into(), u32::from(self.len()));
        checksum::fold(ph + checksum::sum(d)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// The whole wrapped buffer, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the length field. This changes what [`Self::payload`] covers:
    /// call [`Self::check_len`] again before using it.
    pub fn set_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, checksum: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&checksum.to_be_bytes());
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[field::PAYLOAD..end]
    }

    /// Stores a checksum computed as `!fold(pseudo + datagram)`, written as
    /// `0xffff` when it comes out as zero (RFC 768: zero means "none").
    fn fill_with_pseudo(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let c = !checksum::fold(pseudo + checksum::sum(self.datagram()));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Computes the checksum with the IPv4 pseudo-header and stores it.
    pub fn fill_checksum_v4(&mut self, src: &Ipv4Addr, dst: &Ipv4Addr) {
        let len = u32::from(self.len());
        self.fill_with_pseudo(checksum::pseudo_header_v4(
            src,
            dst,
            IpProtocol::Udp.into(),
            len,
        ));
    }

    /// Computes the checksum with the IPv6 pseudo-header and stores it.
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        let len = u32::from(self.len());
        self.fill_with_pseudo(checksum::pseudo_header_v6(
            src,
            dst,
            IpProtocol::Udp.into(),
            len,
        ));
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for UdpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A parsed UDP header: the ports. The length is the payload's, the
/// checksum is verified and filled on the packet view, where the IP
/// addresses are at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Length of the header.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Reads the ports after [`UdpPacket::check_len`]. The checksum is not
    /// verified here: use [`UdpPacket::verify_checksum_v4`] or
    /// [`UdpPacket::verify_checksum_v6`].
    pub fn parse<T: AsRef<[u8]>>(packet: &UdpPacket<T>) -> Result<UdpRepr> {
        packet.check_len()?;
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
        })
    }

    /// Length of a datagram with `payload_len` bytes of payload.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        field::PAYLOAD + payload_len
    }

    /// Writes the header of a datagram with `payload_len` bytes of payload
    /// (at most 65527), checksum zero. Then write the payload through
    /// [`UdpPacket::payload_mut`] and call [`UdpPacket::fill_checksum_v4`]
    /// or [`UdpPacket::fill_checksum_v6`]. The buffer must hold
    /// [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UdpPacket<T>,
        payload_len: usize,
    ) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(self.buffer_len(payload_len) as u16);
        packet.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz;
    use proptest::prelude::*;

    /// A DNS query for example.com A, 192.168.1.100:53124 -> 8.8.8.8:53,
    /// as captured.
    const DNS: [u8; 37] = [
        0xcf, 0x84, 0x00, 0x35, 0x00, 0x25, 0xe2, 0x92, // UDP header
        0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x65, 0x78,
        0x61, 0x6d, 0x70, 0x6c, 0x65, 0x03, 0x63, 0x6f, 0x6d, 0x00, 0x00, 0x01, 0x00, 0x01,
    ];
    const SRC4: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 100);
    const DST4: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);

    /// "hello" from [2001:db8::2]:5000 to [2001:db8::1]:6000.
    const HELLO6: [u8; 13] = [
        0x13, 0x88, 0x17, 0x70, 0x00, 0x0d, 0x35, 0x95, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];
    const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
    const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

    #[test]
    fn parse_captured_v4() {
        let p = UdpPacket::new_checked(&DNS[..]).unwrap();
        assert_eq!(p.src_port(), 53124);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 37);
        assert!(!p.is_empty());
        assert_eq!(p.checksum(), 0xe292);
        assert_eq!(p.payload(), &DNS[8..]);
        assert!(p.verify_checksum_v4(&SRC4, &DST4));
        assert!(!p.verify_checksum_v4(&SRC4, &Ipv4Addr::new(8, 8, 4, 4)));
        assert_eq!(
            UdpRepr::parse(&p).unwrap(),
            UdpRepr {
                src_port: 53124,
                dst_port: 53
            }
        );
    }

    #[test]
    fn parse_captured_v6() {
        let p = UdpPacket::new_checked(&HELLO6[..]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert!(p.verify_checksum_v6(&SRC6, &DST6));
        assert!(!p.verify_checksum_v6(&SRC6, &Ipv6Addr::LOCALHOST));
    }

    #[test]
    fn zero_checksum() {
        let mut b = DNS;
        b[6] = 0;
        b[7] = 0;
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        // RFC 768: no checksum over IPv4 is fine...
        assert!(p.verify_checksum_v4(&SRC4, &DST4));
        // ... RFC 8200 §8.1: but not over IPv6.
        assert!(!p.verify_checksum_v6(&SRC6, &DST6));
    }

    #[test]
    fn length_checks() {
        assert_eq!(
            UdpPacket::new_checked(&DNS[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            UdpPacket::new_checked(&DNS[..36]).unwrap_err(),
            Error::Truncated
        );
        let mut b = DNS;
        b[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
        // Trailing bytes after the length field are not payload.
        let mut padded = [0u8; 46];
        padded[..37].copy_from_slice(&DNS);
        let p = UdpPacket::new_checked(&padded[..]).unwrap();
        assert_eq!(p.payload().len(), 29);
        assert!(p.verify_checksum_v4(&SRC4, &DST4));
    }

    #[test]
    fn checksum_zero_is_sent_as_ones() {
        // Find a payload whose checksum computes to zero, then check that
        // fill writes 0xffff instead (RFC 768), and that it verifies.
        let mut buf = [0u8; 10];
        let repr = UdpRepr {
            src_port: 1,
            dst_port: 2,
        };
        let mut p = UdpPacket::new_unchecked(&mut buf[..]);
        repr.emit(&mut p, 2);
        p.fill_checksum_v4(&SRC4, &DST4);
        let c = p.checksum();
        // The checksum is 0xffff minus the sum of everything else, so
        // putting it in the (zero) payload makes the sum all ones and the
        // computed checksum zero.
        p.payload_mut().copy_from_slice(&c.to_be_bytes());
        p.fill_checksum_v4(&SRC4, &DST4);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum_v4(&SRC4, &DST4));
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn emit_into_junk_then_parse(
            src_port in any::<u16>(),
            dst_port in any::<u16>(),
            payload in fuzz::bytes(40),
            v6 in any::<bool>(),
        ) {
            let repr = UdpRepr { src_port, dst_port };
            let mut buf = [0xa5u8; 64];
            let len = repr.buffer_len(payload.len());
            let mut p = UdpPacket::new_unchecked(&mut buf[..]);
            repr.emit(&mut p, payload.len());
            p.payload_mut().copy_from_slice(&payload);
            if v6 {
                p.fill_checksum_v6(&SRC6, &DST6);
            } else {
                p.fill_checksum_v4(&SRC4, &DST4);
            }
            let p = UdpPacket::new_checked(&buf[..len]).unwrap();
            if v6 {
                prop_assert!(p.verify_checksum_v6(&SRC6, &DST6));
            } else {
                prop_assert!(p.verify_checksum_v4(&SRC4, &DST4));
            }
            prop_assert_eq!(p.payload(), &payload[..]);
            prop_assert_eq!(UdpRepr::parse(&p).unwrap(), repr);
        }

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(48)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated(bytes in fuzz::mutated(&DNS)) {
            exercise(&bytes);
        }
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(p) = UdpPacket::new_checked(bytes) {
            let _ = (
                p.src_port(),
                p.dst_port(),
                p.len(),
                p.checksum(),
                p.payload(),
            );
            let _ = p.verify_checksum_v4(&SRC4, &DST4);
            let _ = p.verify_checksum_v6(&SRC6, &DST6);
            UdpRepr::parse(&p).unwrap();
        }
        let _ = UdpRepr::parse(&UdpPacket::new_unchecked(bytes));
    }
}
