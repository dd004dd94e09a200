//! Longest-prefix-match tables for vrhost's forwarding information bases.
//!
//! - [`Prefix`] / [`FibAddr`]: IPv4 and IPv6 prefixes, one generic type.
//! - [`Lpm`]: the table interface the dataplane is written against. A leaf is a
//!   [`NextHopId`], an index into the VR's next-hop table, so neighbour changes
//!   never touch the FIB (DESIGN.md, "FIB").
//! - [`PoptrieLpm`] ([`Fib4`], [`Fib6`]): the engine's table, a Poptrie with a
//!   copy-on-write group per /8 (see `docs/fib.md`). Bulk load with
//!   [`PoptrieLpm::from_routes`]; take an immutable [`FibSnapshot`] at any time.
//! - [`FibHandle`] / [`FibReader`]: RCU-style publication of a table to
//!   lock-free readers on other cores.
//! - [`MultibitLpm`]: a plain multibit trie with 8-bit strides, prefix
//!   expansion and leaf pushing; the second implementation and yardstick.
//! - [`ReferenceLpm`]: a naive, obviously correct table; the oracle for tests.
//!
//! Tables are plain data with no locks and no I/O: the control side builds or
//! patches a copy and publishes it; workers only call `lookup` through `&self`.

#![forbid(unsafe_code)]

mod addr;
mod lpm;
mod multibit;
mod poptrie;
mod prefix;
mod publish;
mod reference;

pub use addr::{FibAddr, NextHopId};
pub use lpm::Lpm;
pub use multibit::MultibitLpm;
pub use poptrie::{lookup_batch_each, FLAT_MAX_ROUTES, PREFETCH_MIN_ROUTES};
pub use poptrie::{FibSnapshot, PoptrieLpm, PoptrieStats};
pub use prefix::{IpPrefix, Prefix, Prefix4, Prefix6, PrefixError};
pub use publish::{FibHandle, FibReader, SnapshotGuard};
pub use reference::ReferenceLpm;

/// A CPU prefetch, injected by the caller (the FIB stays free of `unsafe`
/// and of the machine): asks for the cache line of each address, and must
/// neither read nor write through them. The engine passes
/// `vrhost_io::prefetch`; see [`FibSnapshot::lookup_batch_prefetch`].
pub type Prefetch = fn(&[*const u8]);

/// The IPv4 table of a virtual router.
pub type Fib4 = PoptrieLpm<core::net::Ipv4Addr>;
/// The IPv6 table of a virtual router.
pub type Fib6 = PoptrieLpm<core::net::Ipv6Addr>;
