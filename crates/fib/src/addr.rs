//! Address families a FIB can hold, and the next-hop index stored in its leaves.

use core::fmt::{self, Debug, Display};
use core::hash::Hash;
use core::net::{Ipv4Addr, Ipv6Addr};

/// Index of a next hop in the VR's next-hop table; this is what a FIB leaf holds.
///
/// A next hop carries (egress interface, neighbour state, rewrite bytes), so an
/// ARP/ND change updates the next-hop table and never touches the FIB
/// (DESIGN.md, "FIB").
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct NextHopId(pub u32);

impl NextHopId {
    /// The largest id a table accepts.
    ///
    /// [`crate::MultibitLpm`] spends the top bit of each 32-bit entry on the
    /// "child node" tag and stores `id + 1` so that 0 can mean "no route";
    /// that leaves `2^31 - 2` as the largest id. [`crate::PoptrieLpm`] keeps
    /// the same `id + 1` in 31 bits (and packs it into 8 or 16 bits when all
    /// ids of a /8 are small). No next-hop table comes near it.
    pub const MAX: NextHopId = NextHopId(0x7FFF_FFFE);
}

impl Display for NextHopId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nh{}", self.0)
    }
}

/// An address family a FIB can be built for: `Ipv4Addr` or `Ipv6Addr`.
///
/// Tables work on the plain numeric value of the address (most significant bit
/// first on the wire = most significant bit of the integer), widened to `u128`
/// so that one generic implementation serves both families.
pub trait FibAddr: Copy + Eq + Ord + Hash + Debug + Display + Send + Sync + 'static {
    /// Address width in bits: 32 or 128.
    const BITS: u8;

    /// The numeric value of the address, e.g. `10.0.0.1` → `0x0a00_0001`.
    /// Not left-aligned: an IPv4 address occupies the low 32 bits.
    fn to_u128(self) -> u128;

    /// The inverse of [`FibAddr::to_u128`]. Bits above [`FibAddr::BITS`] are ignored.
    fn from_u128(v: u128) -> Self;
}

impl FibAddr for Ipv4Addr {
    const BITS: u8 = 32;

    #[inline]
    fn to_u128(self) -> u128 {
        u128::from(self.to_bits())
    }

    #[inline]
    fn from_u128(v: u128) -> Self {
        // Truncation is the documented contract: only the low 32 bits count.
        Ipv4Addr::from_bits(v as u32)
    }
}

impl FibAddr for Ipv6Addr {
    const BITS: u8 = 128;

    #[inline]
    fn to_u128(self) -> u128 {
        self.to_bits()
    }

    #[inline]
    fn from_u128(v: u128) -> Self {
        Ipv6Addr::from_bits(v)
    }
}

/// The network mask of a `len`-bit prefix as a plain value in the low `A::BITS` bits.
///
/// `len` must be at most `A::BITS`; callers check it first.
#[inline]
pub(crate) fn mask<A: FibAddr>(len: u8) -> u128 {
    debug_assert!(len <= A::BITS);
    if len == 0 {
        // A shift by 128 would overflow, and /0 masks nothing anyway.
        0
    } else {
        (u128::MAX << (128 - u32::from(len))) >> (128 - u32::from(A::BITS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let v4 = Ipv4Addr::new(10, 1, 2, 3);
        assert_eq!(v4.to_u128(), 0x0a01_0203);
        assert_eq!(Ipv4Addr::from_u128(v4.to_u128()), v4);
        assert_eq!(Ipv4Addr::from_u128(0xffff_0a01_0203), v4);
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(v6.to_u128() >> 96, 0x2001_0db8);
        assert_eq!(Ipv6Addr::from_u128(v6.to_u128()), v6);
    }

    #[test]
    fn masks() {
        assert_eq!(mask::<Ipv4Addr>(0), 0);
        assert_eq!(mask::<Ipv4Addr>(8), 0xff00_0000);
        assert_eq!(mask::<Ipv4Addr>(32), 0xffff_ffff);
        assert_eq!(mask::<Ipv6Addr>(1), 1 << 127);
        assert_eq!(mask::<Ipv6Addr>(128), u128::MAX);
    }

    #[test]
    fn next_hop_display() {
        assert_eq!(NextHopId(7).to_string(), "nh7");
    }
}
