//! Neighbor Discovery for IPv6 (RFC 4861): Router Solicitation and
//! Advertisement, Neighbor Solicitation and Advertisement.
//!
//! These messages are ICMPv6 messages; [`NdiscRepr`] reads and writes them
//! through an [`Icmpv6Packet`], and [`crate::icmpv6::Icmpv6Repr::Ndisc`]
//! wraps it with the checksum and the address-dependent checks.
//!
//! ```text
//!  Router Solicitation       type 133   | reserved (4)                   | options
//!  Router Advertisement      type 134   | hop limit | flags | lifetime   |
//!                                       | reachable time | retrans timer | options
//!  Neighbor Solicitation     type 135   | reserved (4) | target (16)     | options
//!  Neighbor Advertisement    type 136   | R S O flags, reserved (4)      |
//!                                       | target (16)                    | options
//! ```

use core::net::Ipv6Addr;
use core::ops::{BitOr, BitOrAssign};

use super::{Icmpv6Message, Icmpv6Packet};
use crate::ethernet::EthernetAddress;
use crate::{Error, Result};

mod field {
    use crate::Field;

    // Offsets from the start of the ICMPv6 message.
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    /// The reserved word of RS and NS, and the flags word of NA.
    pub const RESERVED: Field = 4..8;

    // Router Solicitation (RFC 4861 §4.1).
    pub const RS_OPTIONS: usize = 8;

    // Router Advertisement (RFC 4861 §4.2).
    pub const RA_HOP_LIMIT: usize = 4;
    pub const RA_FLAGS: usize = 5;
    pub const RA_LIFETIME: Field = 6..8;
    pub const RA_REACHABLE: Field = 8..12;
    pub const RA_RETRANS: Field = 12..16;
    pub const RA_OPTIONS: usize = 16;

    // Neighbor Solicitation and Advertisement (RFC 4861 §4.3, §4.4).
    pub const NA_FLAGS: usize = 4;
    pub const TARGET: Field = 8..24;
    pub const N_OPTIONS: usize = 24;

    // Inside an option (RFC 4861 §4.6).
    pub const OPT_TYPE: usize = 0;
    pub const OPT_LEN: usize = 1;
    pub const OPT_LLADDR: Field = 2..8;
    pub const OPT_MTU: Field = 4..8;
}

/// Option types (RFC 4861 §4.6; IANA "IPv6 Neighbor Discovery Option
/// Formats").
pub mod option_type {
    /// Source Link-Layer Address.
    pub const SOURCE_LLADDR: u8 = 1;
    /// Target Link-Layer Address.
    pub const TARGET_LLADDR: u8 = 2;
    /// Prefix Information.
    pub const PREFIX_INFO: u8 = 3;
    /// Redirected Header.
    pub const REDIRECTED_HEADER: u8 = 4;
    /// MTU.
    pub const MTU: u8 = 5;
}

/// Router Advertisement flag bits (RFC 4861 §4.2, RFC 4191 §2.2).
pub mod router_flags {
    /// M, managed address configuration.
    pub const MANAGED: u8 = 0x80;
    /// O, other configuration.
    pub const OTHER: u8 = 0x40;
}

/// Every option is a multiple of 8 bytes (RFC 4861 §4.6).
const OPTION_UNIT: usize = 8;
/// Length of the link-layer address and MTU options for Ethernet, one unit
/// (RFC 2464 §8, RFC 4861 §4.6.4).
const SHORT_OPTION_LEN: usize = OPTION_UNIT;

/// The R, S and O flags of a Neighbor Advertisement (RFC 4861 §4.4), as
/// they sit in the first byte after the checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NdiscNeighborFlags(u8);

impl NdiscNeighborFlags {
    /// R: the sender is a router.
    pub const ROUTER: NdiscNeighborFlags = NdiscNeighborFlags(0x80);
    /// S: sent in response to a Neighbor Solicitation.
    pub const SOLICITED: NdiscNeighborFlags = NdiscNeighborFlags(0x40);
    /// O: override an existing cache entry.
    pub const OVERRIDE: NdiscNeighborFlags = NdiscNeighborFlags(0x20);

    const ALL: u8 = 0xe0;

    /// No flag set.
    pub const fn empty() -> Self {
        NdiscNeighborFlags(0)
    }

    /// The flags from a byte, reserved bits dropped.
    pub const fn from_bits_truncate(bits: u8) -> Self {
        NdiscNeighborFlags(bits & Self::ALL)
    }

    /// The flag byte.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags of both.
    pub const fn union(self, other: Self) -> Self {
        NdiscNeighborFlags(self.0 | other.0)
    }
}

impl BitOr for NdiscNeighborFlags {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl BitOrAssign for NdiscNeighborFlags {
    fn bitor_assign(&mut self, rhs: Self) {
        *self = self.union(rhs);
    }
}

/// One Neighbor Discovery option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdiscOption<'a> {
    /// The type octet, see [`option_type`].
    pub kind: u8,
    /// The whole option, type and length octets included.
    pub bytes: &'a [u8],
}

/// An iterator over Neighbor Discovery options (RFC 4861 §4.6).
///
/// Each option is a type octet, a length octet in units of 8 bytes, and
/// the rest. An option with length 0 — which RFC 4861 §4.6 says MUST make
/// the receiver discard the packet — or one running past the message yields
/// [`Error::Malformed`] and ends the walk.
#[derive(Debug, Clone)]
pub struct NdiscOptionsIter<'a> {
    rest: &'a [u8],
    done: bool,
}

impl<'a> NdiscOptionsIter<'a> {
    /// Walks an options area.
    pub const fn new(options: &'a [u8]) -> Self {
        NdiscOptionsIter {
            rest: options,
            done: false,
        }
    }
}

impl<'a> Iterator for NdiscOptionsIter<'a> {
    type Item = Result<NdiscOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.rest.is_empty() {
            return None;
        }
        let units = self.rest.get(field::OPT_LEN).map_or(0, |&l| usize::from(l));
        let len = units * OPTION_UNIT;
        if len == 0 || len > self.rest.len() {
            self.done = true;
            return Some(Err(Error::Malformed));
        }
        let (bytes, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(Ok(NdiscOption {
            kind: bytes[field::OPT_TYPE],
            bytes,
        }))
    }
}

/// The options a router cares about, collected in one pass.
#[derive(Debug, Default)]
struct Options {
    source_lladdr: Option<EthernetAddress>,
    target_lladdr: Option<EthernetAddress>,
    mtu: Option<u32>,
}

impl Options {
    /// Reads the link-layer address and MTU options; other types are
    /// skipped (RFC 4861 §4.6: "silently ignore"). The first of duplicate
    /// options wins. Options are at least 8 bytes, so the fixed ranges
    /// always fit.
    fn parse(area: &[u8]) -> Result<Options> {
        let mut out = Options::default();
        for opt in NdiscOptionsIter::new(area) {
            let opt = opt?;
            match opt.kind {
                option_type::SOURCE_LLADDR if out.source_lladdr.is_none() => {
                    out.source_lladdr =
                        Some(EthernetAddress::from_bytes(&opt.bytes[field::OPT_LLADDR]));
                }
                option_type::TARGET_LLADDR if out.target_lladdr.is_none() => {
                    out.target_lladdr =
                        Some(EthernetAddress::from_bytes(&opt.bytes[field::OPT_LLADDR]));
                }
                option_type::MTU if out.mtu.is_none() => {
                    out.mtu = Some(crate::be32(&opt.bytes[field::OPT_MTU]));
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// Writes a link-layer address option into `buf[..8]`.
fn emit_lladdr(buf: &mut [u8], kind: u8, addr: EthernetAddress) {
    buf[field::OPT_TYPE] = kind;
    buf[field::OPT_LEN] = 1;
    buf[field::OPT_LLADDR].copy_from_slice(&addr.0);
}

/// Writes an MTU option into `buf[..8]` (RFC 4861 §4.6.4).
fn emit_mtu(buf: &mut [u8], mtu: u32) {
    buf[field::OPT_TYPE] = option_type::MTU;
    buf[field::OPT_LEN] = 1;
    buf[2..4].fill(0);
    buf[field::OPT_MTU].copy_from_slice(&mtu.to_be_bytes());
}

/// A parsed Neighbor Discovery message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NdiscRepr {
    /// Router Solicitation (RFC 4861 §4.1).
    RouterSolicit {
        /// Source link-layer address option.
        lladdr: Option<EthernetAddress>,
    },
    /// Router Advertisement (RFC 4861 §4.2).
    RouterAdvert {
        /// Cur Hop Limit; 0 means unspecified.
        hop_limit: u8,
        /// Flag byte, see [`router_flags`].
        flags: u8,
        /// Router lifetime in seconds; 0 means "not a default router".
        router_lifetime: u16,
        /// Reachable time in milliseconds; 0 means unspecified.
        reachable_time: u32,
        /// Retransmission timer in milliseconds; 0 means unspecified.
        retrans_time: u32,
        /// Source link-layer address option.
        lladdr: Option<EthernetAddress>,
        /// MTU option.
        mtu: Option<u32>,
    },
    /// Neighbor Solicitation (RFC 4861 §4.3).
    NeighborSolicit {
        /// The address being resolved.
        target_addr: Ipv6Addr,
        /// Source link-layer address option.
        lladdr: Option<EthernetAddress>,
    },
    /// Neighbor Advertisement (RFC 4861 §4.4).
    NeighborAdvert {
        /// R, S and O flags.
        flags: NdiscNeighborFlags,
        /// The address being advertised.
        target_addr: Ipv6Addr,
        /// Target link-layer address option.
        lladdr: Option<EthernetAddress>,
    },
}

impl NdiscRepr {
    /// Reads a Neighbor Discovery message, applying the checks of
    /// RFC 4861 §6.1 and §7.1.1-7.1.2 that need nothing but the message:
    ///
    /// * the ICMP code is 0, else [`Error::Malformed`];
    /// * the message holds the fixed part of its type (8, 16, 24 or 24
    ///   bytes), else [`Error::Truncated`];
    /// * every option has a nonzero length that fits, else
    ///   [`Error::Malformed`];
    /// * the target of NS and NA is not multicast, else
    ///   [`Error::Malformed`].
    ///
    /// The checksum, the hop limit of 255 and the address rules are checked
    /// by [`crate::icmpv6::Icmpv6Repr::parse`] and the caller. Other ICMPv6
    /// types, Redirect included, are [`Error::Unsupported`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Icmpv6Packet<T>) -> Result<NdiscRepr> {
        packet.check_len()?;
        let msg = packet.buffer();
        let fixed_len = match packet.msg_type() {
            Icmpv6Message::RouterSolicit => field::RS_OPTIONS,
            Icmpv6Message::RouterAdvert => field::RA_OPTIONS,
            Icmpv6Message::NeighborSolicit | Icmpv6Message::NeighborAdvert => field::N_OPTIONS,
            _ => return Err(Error::Unsupported),
        };
        if msg[field::CODE] != 0 {
            return Err(Error::Malformed);
        }
        if msg.len() < fixed_len {
            return Err(Error::Truncated);
        }
        let options = Options::parse(&msg[fixed_len..])?;
        match packet.msg_type() {
            Icmpv6Message::RouterSolicit => Ok(NdiscRepr::RouterSolicit {
                lladdr: options.source_lladdr,
            }),
            Icmpv6Message::RouterAdvert => Ok(NdiscRepr::RouterAdvert {
                hop_limit: msg[field::RA_HOP_LIMIT],
                flags: msg[field::RA_FLAGS],
                router_lifetime: crate::be16(&msg[field::RA_LIFETIME]),
                reachable_time: crate::be32(&msg[field::RA_REACHABLE]),
                retrans_time: crate::be32(&msg[field::RA_RETRANS]),
                lladdr: options.source_lladdr,
                mtu: options.mtu,
            }),
            Icmpv6Message::NeighborSolicit => {
                let target_addr = target(msg)?;
                Ok(NdiscRepr::NeighborSolicit {
                    target_addr,
                    lladdr: options.source_lladdr,
                })
            }
            _ => {
                let target_addr = target(msg)?;
                Ok(NdiscRepr::NeighborAdvert {
                    flags: NdiscNeighborFlags::from_bits_truncate(msg[field::NA_FLAGS]),
                    target_addr,
                    lladdr: options.target_lladdr,
                })
            }
        }
    }

    /// Length of the emitted message: the fixed part plus 8 bytes per
    /// option.
    pub const fn buffer_len(&self) -> usize {
        const fn opt(present: bool) -> usize {
            if present {
                SHORT_OPTION_LEN
            } else {
                0
            }
        }
        match self {
            NdiscRepr::RouterSolicit { lladdr } => field::RS_OPTIONS + opt(lladdr.is_some()),
            NdiscRepr::RouterAdvert { lladdr, mtu, .. } => {
                field::RA_OPTIONS + opt(lladdr.is_some()) + opt(mtu.is_some())
            }
            NdiscRepr::NeighborSolicit { lladdr, .. }
            | NdiscRepr::NeighborAdvert { lladdr, .. } => field::N_OPTIONS + opt(lladdr.is_some()),
        }
    }

    /// The ICMPv6 type of this message.
    pub const fn msg_type(&self) -> Icmpv6Message {
        match self {
            NdiscRepr::RouterSolicit { .. } => Icmpv6Message::RouterSolicit,
            NdiscRepr::RouterAdvert { .. } => Icmpv6Message::RouterAdvert,
            NdiscRepr::NeighborSolicit { .. } => Icmpv6Message::NeighborSolicit,
            NdiscRepr::NeighborAdvert { .. } => Icmpv6Message::NeighborAdvert,
        }
    }

    /// Writes the message, options included, into the first
    /// [`Self::buffer_len`] bytes of `packet`, with a zero checksum: use
    /// [`crate::icmpv6::Icmpv6Repr::emit`] to get the checksum filled too.
    /// The link-layer address goes in a Source Link-Layer Address option
    /// (type 1) for RS, RA and NS, and a Target Link-Layer Address option
    /// (type 2) for NA (RFC 4861 §4.1-4.4).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Icmpv6Packet<T>) {
        let msg = &mut packet.buffer_mut()[..self.buffer_len()];
        msg[field::TYPE] = self.msg_type().into();
        msg[field::CODE] = 0;
        msg[field::CHECKSUM].fill(0);
        match *self {
            NdiscRepr::RouterSolicit { lladdr } => {
                msg[field::RESERVED].fill(0);
                if let Some(addr) = lladdr {
                    emit_lladdr(
                        &mut msg[field::RS_OPTIONS..],
                        option_type::SOURCE_LLADDR,
                        addr,
                    );
                }
            }
            NdiscRepr::RouterAdvert {
                hop_limit,
                flags,
                router_lifetime,
                reachable_time,
                retrans_time,
                lladdr,
                mtu,
            } => {
                msg[field::RA_HOP_LIMIT] = hop_limit;
                msg[field::RA_FLAGS] = flags;
                msg[field::RA_LIFETIME].copy_from_slice(&router_lifetime.to_be_bytes());
                msg[field::RA_REACHABLE].copy_from_slice(&reachable_time.to_be_bytes());
                msg[field::RA_RETRANS].copy_from_slice(&retrans_time.to_be_bytes());
                let mut at = field::RA_OPTIONS;
                if let Some(addr) = lladdr {
                    emit_lladdr(&mut msg[at..], option_type::SOURCE_LLADDR, addr);
                    at += SHORT_OPTION_LEN;
                }
                if let Some(mtu) = mtu {
                    emit_mtu(&mut msg[at..], mtu);
                }
            }
            NdiscRepr::NeighborSolicit {
                target_addr,
                lladdr,
            } => {
                msg[field::RESERVED].fill(0);
                msg[field::TARGET].copy_from_slice(&target_addr.octets());
                if let Some(addr) = lladdr {
                    emit_lladdr(
                        &mut msg[field::N_OPTIONS..],
                        option_type::SOURCE_LLADDR,
                        addr,
                    );
                }
            }
            NdiscRepr::NeighborAdvert {
                flags,
                target_addr,
                lladdr,
            } => {
                msg[field::RESERVED].fill(0);
                msg[field::NA_FLAGS] = flags.bits();
                msg[field::TARGET].copy_from_slice(&target_addr.octets());
                if let Some(addr) = lladdr {
                    emit_lladdr(
                        &mut msg[field::N_OPTIONS..],
                        option_type::TARGET_LLADDR,
                        addr,
                    );
                }
            }
        }
    }

    /// The address-dependent checks of RFC 4861 that the message alone
    /// cannot make; [`Error::Malformed`] when one fails.
    ///
    /// * §6.1.1 RS and §7.1.1 NS: from the unspecified address, no source
    ///   link-layer address option;
    /// * §7.1.1 NS: from the unspecified address, only to a solicited-node
    ///   multicast address;
    /// * §6.1.2 RA: from a link-local address;
    /// * §7.1.2 NA: to a multicast address, the Solicited flag is clear.
    pub fn check_addresses(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> Result<()> {
        let ok = match self {
            NdiscRepr::RouterSolicit { lladdr } => !(src.is_unspecified() && lladdr.is_some()),
            NdiscRepr::RouterAdvert { .. } => crate::ipv6::is_link_local(src),
            NdiscRepr::NeighborSolicit { lladdr, .. } => {
                !src.is_unspecified() || (lladdr.is_none() && crate::ipv6::is_solicited_node(dst))
            }
            NdiscRepr::NeighborAdvert { flags, .. } => {
                !(dst.is_multicast() && flags.contains(NdiscNeighborFlags::SOLICITED))
            }
        };
        if ok {
            Ok(())
        } else {
            Err(Error::Malformed)
        }
    }
}

/// The target address of NS/NA; RFC 4861 §7.1.1/§7.1.2: it MUST NOT be
/// multicast.
fn target(msg: &[u8]) -> Result<Ipv6Addr> {
    let addr = Ipv6Addr::from(crate::array::<16>(&msg[field::TARGET]));
    if addr.is_multicast() {
        Err(Error::Malformed)
    } else {
        Ok(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz;
    use proptest::prelude::*;

    #[test]
    fn options_iter() {
        let area = [
            1, 1, 2, 0, 0, 0, 0, 1, // SLLA
            99, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // unknown, 16 bytes
            5, 1, 0, 0, 0, 0, 5, 0xdc, // MTU 1500
        ];
        let kinds: std::vec::Vec<_> = NdiscOptionsIter::new(&area)
            .map(|o| o.unwrap().kind)
            .collect();
        assert_eq!(kinds, [1, 99, 5]);
        let o = Options::parse(&area).unwrap();
        assert_eq!(o.source_lladdr, Some(EthernetAddress([2, 0, 0, 0, 0, 1])));
        assert_eq!(o.mtu, Some(1500));
        assert_eq!(o.target_lladdr, None);

        // RFC 4861 §4.6: length 0 is invalid, and must not loop forever.
        let mut it = NdiscOptionsIter::new(&[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(it.next(), Some(Err(Error::Malformed)));
        assert_eq!(it.next(), None);
        // Running past the end, and a lone type octet.
        assert_eq!(
            NdiscOptionsIter::new(&[1, 2, 0, 0, 0, 0, 0, 0]).next(),
            Some(Err(Error::Malformed))
        );
        assert_eq!(
            NdiscOptionsIter::new(&[1]).next(),
            Some(Err(Error::Malformed))
        );
        assert_eq!(NdiscOptionsIter::new(&[]).next(), None);
    }

    #[test]
    fn neighbor_flags() {
        let f = NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE;
        assert!(f.contains(NdiscNeighborFlags::SOLICITED));
        assert!(!f.contains(NdiscNeighborFlags::ROUTER));
        assert!(f.contains(NdiscNeighborFlags::empty()));
        assert_eq!(f.bits(), 0x60);
        assert_eq!(NdiscNeighborFlags::from_bits_truncate(0xff).bits(), 0xe0);
        let mut g = NdiscNeighborFlags::empty();
        assert!(g.is_empty());
        g |= NdiscNeighborFlags::ROUTER;
        assert_eq!(g, NdiscNeighborFlags::ROUTER);
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn no_panic_options_iter(bytes in fuzz::bytes(64)) {
            let mut n = 0;
            for opt in NdiscOptionsIter::new(&bytes) {
                n += 1;
                if let Ok(o) = opt {
                    prop_assert!(o.bytes.len() >= 8 && o.bytes.len() % 8 == 0);
                }
            }
            prop_assert!(n <= bytes.len() / 8 + 1);
            let _ = Options::parse(&bytes);
        }
    }
}
