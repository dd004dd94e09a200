//! IEEE 802.1Q VLAN tags.
//!
//! [`VlanHeader`] covers the four bytes that follow an outer EtherType of
//! `0x8100` (or `0x88a8` for an 802.1ad service tag): the tag control
//! information and the EtherType of what comes next.
//!
//! ```text
//!  0     3   4               16                 32
//! +-----+---+----------------+------------------+---------
//! | PCP |DEI|    VLAN ID     | inner EtherType  | payload
//! +-----+---+----------------+------------------+---------
//! ```

use crate::ethernet::EtherType;
use crate::{Error, Result};

mod field {
    use crate::Field;

    pub const TCI: Field = 0..2;
    pub const ETHERTYPE: Field = 2..4;
    pub const PAYLOAD: usize = 4;
}

/// Priority code point: the top three bits of the TCI (IEEE 802.1Q §6.9.3).
const PCP_SHIFT: u16 = 13;
/// Drop eligible indicator, formerly CFI.
const DEI_BIT: u16 = 0x1000;
/// VLAN identifier: the low twelve bits of the TCI.
const VID_MASK: u16 = 0x0fff;

/// A zero-copy view of a VLAN tag and what follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanHeader<T> {
    /// Length of the tag: TCI and inner EtherType.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than [`Self::HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> VlanHeader<T> {
        VlanHeader { buffer }
    }

    /// Wraps a buffer after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<VlanHeader<T>> {
        let header = Self::new_unchecked(buffer);
        header.check_len()?;
        Ok(header)
    }

    /// [`Error::Truncated`] if the buffer cannot hold the 4-byte tag.
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

    /// The whole wrapped buffer, tag included.
    pub fn buffer(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn tci(&self) -> u16 {
        crate::be16(&self.buffer.as_ref()[field::TCI])
    }

    /// Priority code point, 0..=7.
    pub fn pcp(&self) -> u8 {
        (self.tci() >> PCP_SHIFT) as u8
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        self.tci() & DEI_BIT != 0
    }

    /// VLAN identifier, 0..=4095. 0 means a priority tag only, 4095 is
    /// reserved (IEEE 802.1Q Table 9-2).
    pub fn vlan_id(&self) -> u16 {
        self.tci() & VID_MASK
    }

    /// EtherType of the encapsulated payload.
    pub fn ethertype(&self) -> EtherType {
        crate::be16(&self.buffer.as_ref()[field::ETHERTYPE]).into()
    }

    /// Everything after the tag.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanHeader<T> {
    /// The whole wrapped buffer, mutably.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    fn set_tci(&mut self, tci: u16) {
        self.buffer.as_mut()[field::TCI].copy_from_slice(&tci.to_be_bytes());
    }

    /// Sets the VLAN identifier; only the low twelve bits are used.
    pub fn set_vlan_id(&mut self, vlan_id: u16) {
        let tci = (self.tci() & !VID_MASK) | (vlan_id & VID_MASK);
        self.set_tci(tci);
    }

    /// Sets the priority code point; only the low three bits are used.
    pub fn set_pcp(&mut self, pcp: u8) {
        let tci = (self.tci() & !(0x7 << PCP_SHIFT)) | ((u16::from(pcp) & 0x7) << PCP_SHIFT);
        self.set_tci(tci);
    }

    /// Sets the drop eligible indicator.
    pub fn set_dei(&mut self, dei: bool) {
        let tci = if dei {
            self.tci() | DEI_BIT
        } else {
            self.tci() & !DEI_BIT
        };
        self.set_tci(tci);
    }

    /// Sets the inner EtherType.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        let v: u16 = ethertype.into();
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&v.to_be_bytes());
    }

    /// Everything after the tag, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for VlanHeader<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A parsed VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanRepr {
    /// Priority code point, 0..=7.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vlan_id: u16,
    /// EtherType of the encapsulated payload.
    pub ethertype: EtherType,
}

impl VlanRepr {
    /// Reads a tag.
    pub fn parse<T: AsRef<[u8]>>(header: &VlanHeader<T>) -> Result<VlanRepr> {
        header.check_len()?;
        Ok(VlanRepr {
            pcp: header.pcp(),
            dei: header.dei(),
            vlan_id: header.vlan_id(),
            ethertype: header.ethertype(),
        })
    }

    /// Length of the emitted tag: always 4.
    pub const fn buffer_len(&self) -> usize {
        field::PAYLOAD
    }

    /// Writes the tag. `pcp` and `vlan_id` are masked to their field width.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, header: &mut VlanHeader<T>) {
        let tci = ((u16::from(self.pcp) & 0x7) << PCP_SHIFT)
            | if self.dei { DEI_BIT } else { 0 }
            | (self.vlan_id & VID_MASK);
        header.set_tci(tci);
        header.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::EthernetFrame;
    use crate::fuzz;
    use proptest::prelude::*;

    /// A tagged frame: VLAN 100, priority 5, DEI clear, carrying IPv4.
    const TAGGED: [u8; 22] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // dst
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // src
        0x81, 0x00, // 802.1Q
        0xa0, 0x64, // PCP 5, DEI 0, VID 100
        0x08, 0x00, // IPv4
        0x45, 0x00, 0x00, 0x14, // start of the IPv4 header
    ];

    #[test]
    fn parse_tagged_frame() {
        let frame = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(frame.ethertype(), EtherType::Vlan);
        let tag = VlanHeader::new_checked(frame.payload()).unwrap();
        assert_eq!(tag.pcp(), 5);
        assert!(!tag.dei());
        assert_eq!(tag.vlan_id(), 100);
        assert_eq!(tag.ethertype(), EtherType::Ipv4);
        assert_eq!(tag.payload(), &[0x45, 0x00, 0x00, 0x14]);
        assert_eq!(
            VlanRepr::parse(&tag).unwrap(),
            VlanRepr {
                pcp: 5,
                dei: false,
                vlan_id: 100,
                ethertype: EtherType::Ipv4
            }
        );
    }

    #[test]
    fn truncated() {
        assert_eq!(
            VlanHeader::new_checked(&[0x00, 0x64, 0x08][..]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn setters_keep_other_bits() {
        let mut buf = [0xffu8; 4];
        let mut tag = VlanHeader::new_unchecked(&mut buf[..]);
        tag.set_vlan_id(0x123);
        assert_eq!((tag.pcp(), tag.dei(), tag.vlan_id()), (7, true, 0x123));
        tag.set_pcp(2);
        assert_eq!((tag.pcp(), tag.dei(), tag.vlan_id()), (2, true, 0x123));
        tag.set_dei(false);
        assert_eq!((tag.pcp(), tag.dei(), tag.vlan_id()), (2, false, 0x123));
        tag.set_ethertype(EtherType::Ipv6);
        assert_eq!(tag.ethertype(), EtherType::Ipv6);
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn emit_into_junk_then_parse(
            pcp in 0..8u8,
            dei in any::<bool>(),
            vlan_id in 0..4096u16,
            ethertype in any::<u16>(),
        ) {
            let repr = VlanRepr { pcp, dei, vlan_id, ethertype: ethertype.into() };
            let mut buf = [0xa5u8; 8];
            let mut tag = VlanHeader::new_unchecked(&mut buf[..]);
            repr.emit(&mut tag);
            prop_assert_eq!(tag.payload_mut(), &mut [0xa5u8; 4][..]);
            let tag = VlanHeader::new_checked(&buf[..repr.buffer_len()]).unwrap();
            prop_assert_eq!(VlanRepr::parse(&tag).unwrap(), repr);
        }

        #[test]
        fn no_panic_random(bytes in fuzz::bytes(16)) {
            exercise(&bytes);
        }

        #[test]
        fn no_panic_mutated(bytes in fuzz::mutated(&TAGGED[14..])) {
            exercise(&bytes);
        }
    }

    fn exercise(bytes: &[u8]) {
        if let Ok(tag) = VlanHeader::new_checked(bytes) {
            let _ = (tag.pcp(), tag.dei(), tag.vlan_id(), tag.ethertype());
            let _ = tag.payload();
            VlanRepr::parse(&tag).unwrap();
        }
        let _ = VlanRepr::parse(&VlanHeader::new_unchecked(bytes));
    }
}
