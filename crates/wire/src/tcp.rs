//! TCP segment headers (RFC 9293 §3.1), read-mostly: a router looks at
//! ports and flags (ACLs, flow hashing) and may rewrite ports or the
//! checksum, but never runs a TCP state machine, so there is no `TcpRepr`.
//!
//! ```text
//!  0                              16                              32
//! +-------------------------------+-------------------------------+
//! |          source port          |       destination port        |
//! +-------------------------------+-------------------------------+
//! |                        sequence number                        |
//! +---------------------------------------------------------------+
//! |                     acknowledgment number                     |
//! +-------+-------+---------------+-------------------------------+
//! | d.off | rsvd  |C E U A P R S F|            window             |
//! +-------+-------+---------------+-------------------------------+
//! |           checksum            |        urgent pointer         |
//! +-------------------------------+-------------------------------+
//! |                 options (d.off * 4 - 20 bytes)                |
//! +---------------------------------------------------------------+
//! ```
//!
//! TCP has no length field: build the view on exactly the segment (the
//! IP payload), since the checksum and [`TcpPacket::payload`] run to the
//! end of the buffer.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::checksum;
use crate::ip::IpProtocol;
use crate::{Error, Result};

mod field {
    use crate::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
    pub const OPTIONS: usize = 20;
}

/// The flag bits of byte 13 (RFC 9293 §3.1, RFC 3168 §6.1 for ECE/CWR).
pub mod flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN-Echo.
    pub const ECE: u8 = 0x40;
    /// Congestion Window Reduced.
    pub const CWR: u8 = 0x80;
}

/// A zero-copy view of a TCP segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Length of a header without options.
    pub const MIN_HEADER_LEN: usize = field::OPTIONS;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than the header its data offset announces.
    pub const fn new_unchecked(buffer: T) -> TcpPacket<T> {
        TcpPacket { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<TcpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a 20-byte header ([`Error::Truncated`]),
    /// that the data offset is at least 5 words (RFC 9293 §3.1,
    /// [`Error::Malformed`]) and that the header it announces fits
    /// ([`Error::Truncated`]).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::OPTIONS {
            return Err(Error::Truncated);
        }
        let header_len = usize::from(self.header_len());
        if header_len < field::OPTIONS {
            return Err(Error::Malformed);
        }
        if header_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole segment.
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

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        crate::be32(&self.buffer.as_ref()[field::SEQ_NUM])
    }

    /// Acknowledgment number.
    pub fn ack_number(&self) -> u32 {
        crate::be32(&self.buffer.as_ref()[field::ACK_NUM])
    }

    /// Header length in bytes (data offset × 4), options included.
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    /// The flag byte; test it against the [`flags`] constants.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// FIN flag.
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    /// SYN flag.
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    /// RST flag.
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    /// PSH flag.
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }

    /// ACK flag.
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    /// URG flag.
    pub fn urg(&self) -> bool {
        self.flags() & flags::URG != 0
    }

    /// ECE flag.
    pub fn ece(&self) -> bool {
        self.flags() & flags::ECE != 0
    }

    /// CWR flag.
    pub fn cwr(&self) -> bool {
        self.flags() & flags::CWR != 0
    }

    /// Window size (unscaled).
    pub fn window_len(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::WIN_SIZE])
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::URGENT])
    }

    /// The options, `header_len() - 20` bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..usize::from(self.header_len())]
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[usize::from(self.header_len())..]
    }

    /// Segment length for the pseudo-header: the whole buffer.
    fn segment_len(&self) -> u32 {
        u32::try_from(self.buffer.as_ref().len()).unwrap_or(u32::MAX)
    }

    /// Whether the checksum verifies over the IPv4 pseudo-header and the
    /// whole buffer (RFC 9293 §3.1).
    pub fn verify_checksum_v4(&self, src: &Ipv4Addr, dst: &Ipv4Addr) -> bool {
        let ph = checksum::pseudo_header_v4(src, dst, IpProtocol::Tcp.into(), self.segment_len());
        checksum::fold(ph + checksum::sum(self.buffer.as_ref())) == 0xffff
    }

    /// Whether the checksum verifies over the IPv6 pseudo-header
    /// (RFC 8200 §8.1) and the whole buffer.
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let ph = checksum::pseudo_header_v6(src, dst, IpProtocol::Tcp.into(), self.segment_len());
        checksum::fold(ph + checksum::sum(self.buffer.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// The whole segment, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the source port. The checksum is not updated.
    pub fn set_src_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the destination port. The checksum is not updated.
    pub fn set_dst_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the acknowledgment number.
    pub fn set_ack_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::ACK_NUM].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the header length in bytes (stored as `len / 4` in the data
    /// offset). This moves the payload: call [`Self::check_len`] again
    /// before using it.
    pub fn set_header_len(&mut self, len: u8) {
        let b = &mut self.buffer.as_mut()[field::DATA_OFF];
        *b = (*b & 0x0f) | ((len / 4) << 4);
    }

    /// Sets the flag byte.
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::FLAGS] = flags;
    }

    /// Sets the window size.
    pub fn set_window_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::WIN_SIZE].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, v: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&v.to_be_bytes());
    }

    /// The options, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.header_len());
        &mut self.buffer.as_mut()[field::OPTIONS..end]
    }

    /// Everything after the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = usize::from(self.header_len());
        &mut self.buffer.as_mut()[start..]
    }

    /// Computes the checksum with the IPv4 pseudo-header and stores it.
    pub fn fill_checksum_v4(&mut self, src: &Ipv4Addr, dst: &Ipv4Addr) {
        self.set_checksum(0);
        let ph = checksum::pseudo_header_v4(src, dst, IpProtocol::Tcp.into(), self.segment_len());
        let c = !checksum::fold(ph + checksum::sum(self.buffer.as_ref()));
        self.set_checksum(c);
    }

    /// Computes the checksum with the IPv6 pseudo-header and stores it.
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let ph = checksum::pseudo_header_v6(src, dst, IpProtocol::Tcp.into(), self.segment_len());
        let c = !checksum::fold(ph + checksum::sum(self.buffer.as_ref()));
        self.set_checksum(c);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for TcpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz;
    use proptest::prelude::*;

    /// A SYN from 192.168.1.100:40000 to 8.8.8.8:80 with an MSS option of
    /// 1460, as captured.
    const SYN: [u8; 24] = [
        0x9c, 0x40, 0x00, 0x50, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0x60, 0x02, 0xfa,
        0xf0, 0xc5, 0xdc, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4,
    ];
    const SRC4: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 100);
    const DST4: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);

    #[test]
    fn parse_captured_syn() {
        let p = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!(p.src_port(), 40000);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x1234_5678);
        assert_eq!(p.ack_number(), 0);
        assert_eq!(p.header_len(), 24);
        assert!(p.syn() && !p.ack() && !p.fin() && !p.rst() && !p.psh() && !p.urg());
        assert!(!p.ece() && !p.cwr());
        assert_eq!(p.flags(), flags::SYN);
        assert_eq!(p.window_len(), 64240);
        assert_eq!(p.checksum(), 0xc5dc);
        assert_eq!(p.urgent_at(), 0);
        assert_eq!(p.options(), &[0x02, 0x04, 0x05, 0xb4]);
        assert!(p.payload().is_empty());
        assert!(p.verify_checksum_v4(&SRC4, &DST4));
        assert!(!p.verify_checksum_v4(&DST4, &Ipv4Addr::new(8, 8, 4, 4)));
    }

    #[test]
    fn length_checks() {
        assert_eq!(
            TcpPacket::new_checked(&SYN[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            TcpPacket::new_checked(&SYN[..23]).unwrap_err(),
            Error::Truncated
        );
        let mut b = SYN;
        b[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
        b[12] = 0x50;
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
    }

    #[test]
    fn port_rewrite_and_refill() {
        let mut b = SYN;
        let mut p = TcpPacket::new_checked(&mut b[..]).unwrap();
        p.set_src_port(1024);
        assert!(!p.verify_checksum_v4(&SRC4, &DST4));
        p.fill_checksum_v4(&SRC4, &DST4);
        assert!(p.verify_checksum_v4(&SRC4, &DST4));
        p.set_flags(flags::SYN | flags::ACK);
        assert!(p.syn() && p.ack());
        let (s6, d6) = (Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
        p.fill_checksum_v6(&s6, &d6);
        assert!(p.verify_checksum_v6(&s6, &d6));
        p.set_header_len(20);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.payload_mut().len(), 4);
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(64)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated(bytes in fuzz::mutated(&SYN)) {
            exercise(&bytes);
        }
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(p) = TcpPacket::new_checked(bytes) {
            let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number());
            let _ = (
                p.header_len(),
                p.flags(),
                p.fin(),
                p.syn(),
                p.rst(),
                p.psh(),
            );
            let _ = (
                p.ack(),
                p.urg(),
                p.ece(),
                p.cwr(),
                p.window_len(),
                p.checksum(),
            );
            let _ = (p.urgent_at(), p.options(), p.payload());
            let _ = p.verify_checksum_v4(&SRC4, &DST4);
            let _ = p.verify_checksum_v6(&Ipv6Addr::LOCALHOST, &Ipv6Addr::LOCALHOST);
        }
    }
}
