//! Longest-prefix-match tables for vrhost's forwarding information bases.
//!
//! - [`Prefix`] / [`FibAddr`]: IPv4 and IPv6 prefixes, one generic type.
//! - [`Lpm`]: the table interface the dataplane is written against. A leaf is a
//!   [`NextHopId`], an index into the VR's next-hop table, so neighbour changes
//!   never touch the FIB (DESIGN.md, "FIB").
//! - [`MultibitLpm`] ([`Fib4`], [`Fib6`]): the engine's table, a multibit trie
//!   with 8-bit strides, prefix expansion and leaf pushing.
//! - [`ReferenceLpm`]: a naive, obviously correct table; the oracle for tests.
//!
//! Tables are plain data with no locks and no I/O: the control side builds or
//! patches a copy and publishes it; workers only call `lookup` through `&self`.

mod addr;
mod lpm;
mod multibit;
mod prefix;
mod reference;

pub use addr::{FibAddr, NextHopId};
pub use lpm::Lpm;
pub use multibit::MultibitLpm;
pub use prefix::{Prefix, Prefix4, Prefix6, PrefixError};
pub use reference::ReferenceLpm;

/// The IPv4 table of a virtual router.
pub type Fib4 = MultibitLpm<core::net::Ipv4Addr>;
/// The IPv6 table of a virtual router.
pub type Fib6 = MultibitLpm<core::net::Ipv6Addr>;
