//! Zero-copy packet views and small parse/emit representations for the
//! protocols the vrhost data plane touches.
//!
//! # Two types per header
//!
//! Every protocol module offers two types:
//!
//! * A **view**, `Packet<T: AsRef<[u8]>>` (for example [`ipv4::Ipv4Packet`]),
//!   which wraps a byte buffer and reads or writes header fields in place.
//!   Its byte ranges live in a private `mod field` next to it. Setters exist
//!   when `T: AsRef<[u8]> + AsMut<[u8]>`.
//! * A **representation**, `Repr` (for example [`ipv4::Ipv4Repr`]), a small
//!   plain value with `parse`, `buffer_len` and `emit`.
//!
//! Protocol numbers are open enums with an `Unknown(..)` variant, so any
//! value on the wire maps to some variant and back to the same number.
//!
//! # The panic contract
//!
//! * `new_checked(buf)` runs `check_len` and fails with an [`Error`] when
//!   the buffer is too short for what the header says, or the header is
//!   inconsistent with itself. **Once `new_checked` succeeds, no accessor
//!   can panic**, and neither can a setter that takes a plain value. Two
//!   documented exceptions, both caller mistakes rather than packet
//!   contents:
//!   - rewriting a length field through a setter (such as
//!     [`ipv4::Ipv4Packet::set_total_len`] or
//!     [`ipv4::Ipv4Packet::set_header_len`]) with a value the buffer cannot
//!     hold; such setters say so, and `check_len` can be run again after
//!     them;
//!   - a setter that copies a slice (the [`arp::ArpPacket`] address
//!     setters) panics when the slice length differs from the field's.
//! * `new_unchecked(buf)` performs no check. Its accessors index the buffer
//!   directly and **may panic on short buffers**. Callers use it only after
//!   their own length check, or when they are about to `emit` into a buffer
//!   sized with `buffer_len`.
//! * `Repr::emit` writes into a view normally built with `new_unchecked`,
//!   and panics if the buffer is shorter than `buffer_len()`; size the
//!   buffer first.
//! * **No byte sequence** can make `new_checked`, any `Repr::parse`, any
//!   iterator or [`ipv6::walk_extension_headers`] panic. Every `Repr::parse` re-runs `check_len`
//!   itself, so it is safe even on a view built with `new_unchecked`. Each
//!   module proves this with property tests over random bytes and over
//!   mutated valid packets.
//!
//! # No allocation
//!
//! The crate is `no_std` and does not use `alloc`: views borrow the
//! caller's buffer, representations are `Copy` values or borrow payload
//! slices, and iterators walk the buffer in place.
//!
//! # Buffers longer than the packet
//!
//! Ethernet pads short frames to 60 bytes, so an IP buffer handed to
//! [`ipv4::Ipv4Packet`] or [`ipv6::Ipv6Packet`] may be longer than the IP
//! packet. Their `payload()` accessors honour the length field in the
//! header, never the buffer length.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), no_std)]

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub use icmpv6::ndisc;
pub mod tcp;
pub mod udp;
pub mod vlan;

#[cfg(test)]
mod fuzz;

use core::fmt;

pub use arp::{ArpPacket, ArpRepr};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
pub use icmpv4::{Icmpv4Message, Icmpv4Packet, Icmpv4Repr};
pub use icmpv6::{Icmpv6Message, Icmpv6Packet, Icmpv6Repr};
pub use ip::IpProtocol;
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use ndisc::{NdiscNeighborFlags, NdiscRepr};
pub use tcp::TcpPacket;
pub use udp::{UdpPacket, UdpRepr};
pub use vlan::{VlanHeader, VlanRepr};

/// The one error type of this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header or a length field requires.
    Truncated,
    /// A field holds a value the protocol forbids (wrong version, a length
    /// field smaller than the fixed header, a bad option length, ...).
    Malformed,
    /// The checksum does not verify.
    Checksum,
    /// The packet is well formed but uses a variant this crate does not
    /// represent (an ARP hardware type other than Ethernet, an ICMP type
    /// without a `Repr` variant, ...).
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Checksum => "checksum mismatch",
            Error::Unsupported => "unsupported packet",
        })
    }
}

impl core::error::Error for Error {}

/// The result type of this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range inside a header; every `mod field` is made of these and of
/// single-byte offsets.
pub(crate) type Field = core::ops::Range<usize>;

/// Reads a big-endian `u16` from a slice of exactly two bytes.
#[inline]
pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Reads a big-endian `u32` from a slice of exactly four bytes.
#[inline]
pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Copies a fixed-size array out of a slice of exactly `N` bytes.
#[inline]
pub(crate) fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(b);
    out
}
