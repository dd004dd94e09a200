//! IP prefixes: an address with its host bits cleared, and a length.

use core::fmt;
use core::net::IpAddr;
use core::str::FromStr;

use crate::addr::{mask, FibAddr};

/// Why a prefix could not be built or parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The text before `/` is not an address of the table's family.
    #[error("invalid address `{0}`")]
    BadAddress(String),
    /// The length is not a number from 0 to the address width.
    #[error("invalid prefix length `{len}`: must be a number from 0 to {max}")]
    BadLength {
        /// The length as given.
        len: String,
        /// The address width in bits (32 or 128).
        max: u8,
    },
    /// Bits beyond the prefix length are set, e.g. `10.0.0.1/8`.
    ///
    /// Rejected rather than silently masked: such input is usually a typo
    /// (an interface address where a route was meant). Use
    /// [`Prefix::new_truncating`] when masking is what you want.
    #[error("host bits set in `{given}` (did you mean `{suggestion}`?)")]
    HostBits {
        /// The prefix as given.
        given: String,
        /// The same prefix with its host bits cleared.
        suggestion: String,
    },
}

/// An IP prefix such as `10.0.0.0/8` or `2001:db8::/32`.
///
/// Invariant: `len <= A::BITS` and every bit of `addr` past `len` is zero, so
/// two prefixes that cover the same addresses are equal and hash alike.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix<A> {
    addr: A,
    len: u8,
}

/// An IPv4 prefix.
pub type Prefix4 = Prefix<core::net::Ipv4Addr>;
/// An IPv6 prefix.
pub type Prefix6 = Prefix<core::net::Ipv6Addr>;

impl<A: FibAddr> Prefix<A> {
    /// Builds `addr/len`.
    ///
    /// Fails with [`PrefixError::BadLength`] if `len > A::BITS` and with
    /// [`PrefixError::HostBits`] if `addr` has bits set past `len`.
    pub fn new(addr: A, len: u8) -> Result<Self, PrefixError> {
        let prefix = Self::new_truncating(addr, len)?;
        if prefix.addr != addr {
            return Err(PrefixError::HostBits {
                given: format!("{addr}/{len}"),
                suggestion: prefix.to_string(),
            });
        }
        Ok(prefix)
    }

    /// Builds `addr/len`, clearing any host bits of `addr`.
    ///
    /// Fails with [`PrefixError::BadLength`] if `len > A::BITS`.
    pub fn new_truncating(addr: A, len: u8) -> Result<Self, PrefixError> {
        if len > A::BITS {
            return Err(PrefixError::BadLength {
                len: len.to_string(),
                max: A::BITS,
            });
        }
        Ok(Self {
            addr: A::from_u128(addr.to_u128() & mask::<A>(len)),
            len,
        })
    }

    /// The network address; its host bits are always zero.
    #[inline]
    pub fn addr(&self) -> A {
        self.addr
    }

    /// The prefix length in bits.
    #[inline]
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection size
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether `addr` lies inside this prefix.
    #[inline]
    pub fn contains(&self, addr: A) -> bool {
        addr.to_u128() & mask::<A>(self.len) == self.addr.to_u128()
    }

    /// Whether every address of `other` lies inside this prefix
    /// (true for `other == self`).
    #[inline]
    pub fn covers(&self, other: &Prefix<A>) -> bool {
        self.len <= other.len && self.contains(other.addr)
    }

    /// The prefix of length `len` that covers this one, e.g. `10.1.2.0/24`
    /// at 8 is `10.0.0.0/8`. Returns `self` when `len >= self.len()`.
    pub fn supernet(&self, len: u8) -> Self {
        let len = len.min(self.len);
        Self {
            addr: A::from_u128(self.addr.to_u128() & mask::<A>(len)),
            len,
        }
    }
}

impl<A: FibAddr> fmt::Display for Prefix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Same text as `Display`: a struct dump of a prefix is harder to read in
/// test failures and logs.
impl<A: FibAddr> fmt::Debug for Prefix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Parses `addr/len`; a bare address means a host route (`/32` or `/128`).
///
/// The length must be plain decimal digits (no sign, no spaces).
impl<A: FibAddr + FromStr> FromStr for Prefix<A> {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (addr_text, len_text) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let addr: A = addr_text
            .parse()
            .map_err(|_| PrefixError::BadAddress(addr_text.to_owned()))?;
        let len = match len_text {
            Some(text) => parse_len(text, A::BITS)?,
            None => A::BITS,
        };
        Prefix::new(addr, len)
    }
}

/// Parses a prefix length of at most `max` bits.
fn parse_len(text: &str, max: u8) -> Result<u8, PrefixError> {
    let bad = || PrefixError::BadLength {
        len: text.to_owned(),
        max,
    };
    // `u8::from_str` would also accept "+8"; a length is digits only.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match text.parse::<u8>() {
        Ok(len) if len <= max => Ok(len),
        _ => Err(bad()),
    }
}

/// An IPv4 or IPv6 prefix: the one prefix type of the config, the control
/// planes and the table writer. Each family's FIB takes the inner
/// [`Prefix4`] or [`Prefix6`].
///
/// Orders IPv4 before IPv6, then by address, then by length.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpPrefix {
    /// An IPv4 prefix.
    V4(Prefix4),
    /// An IPv6 prefix.
    V6(Prefix6),
}

impl IpPrefix {
    /// Builds `addr/len`; fails like [`Prefix::new`] (length too long for
    /// the family, or host bits set).
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        Ok(match addr {
            IpAddr::V4(a) => IpPrefix::V4(Prefix::new(a, len)?),
            IpAddr::V6(a) => IpPrefix::V6(Prefix::new(a, len)?),
        })
    }

    /// Builds `addr/len`, clearing any host bits of `addr`; fails only when
    /// `len` is too long for the family.
    pub fn new_truncating(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        Ok(match addr {
            IpAddr::V4(a) => IpPrefix::V4(Prefix::new_truncating(a, len)?),
            IpAddr::V6(a) => IpPrefix::V6(Prefix::new_truncating(a, len)?),
        })
    }

    /// The host prefix of `addr` (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(a) => IpPrefix::V4(Prefix { addr: a, len: 32 }),
            IpAddr::V6(a) => IpPrefix::V6(Prefix { addr: a, len: 128 }),
        }
    }

    /// The network address; its host bits are always zero.
    pub fn addr(&self) -> IpAddr {
        match self {
            IpPrefix::V4(p) => IpAddr::V4(p.addr()),
            IpPrefix::V6(p) => IpAddr::V6(p.addr()),
        }
    }

    /// The prefix length in bits.
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection size
    pub fn len(&self) -> u8 {
        match self {
            IpPrefix::V4(p) => p.len(),
            IpPrefix::V6(p) => p.len(),
        }
    }

    /// True for an IPv4 prefix.
    pub fn is_ipv4(&self) -> bool {
        matches!(self, IpPrefix::V4(_))
    }

    /// True for the default route, `0.0.0.0/0` or `::/0`.
    pub fn is_default(&self) -> bool {
        self.len() == 0
    }

    /// Whether `addr` is of this prefix's family and inside it.
    pub fn contains(&self, addr: &IpAddr) -> bool {
        match (self, addr) {
            (IpPrefix::V4(p), IpAddr::V4(a)) => p.contains(*a),
            (IpPrefix::V6(p), IpAddr::V6(a)) => p.contains(*a),
            _ => false,
        }
    }

    /// Whether the two prefixes share at least one address.
    pub fn overlaps(&self, other: &IpPrefix) -> bool {
        match (self, other) {
            (IpPrefix::V4(a), IpPrefix::V4(b)) => a.covers(b) || b.covers(a),
            (IpPrefix::V6(a), IpPrefix::V6(b)) => a.covers(b) || b.covers(a),
            _ => false,
        }
    }
}

impl From<Prefix4> for IpPrefix {
    fn from(p: Prefix4) -> Self {
        IpPrefix::V4(p)
    }
}

impl From<Prefix6> for IpPrefix {
    fn from(p: Prefix6) -> Self {
        IpPrefix::V6(p)
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpPrefix::V4(p) => p.fmt(f),
            IpPrefix::V6(p) => p.fmt(f),
        }
    }
}

/// Same text as `Display`.
impl fmt::Debug for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Parses `addr/len` of either family; a bare address means a host route.
impl FromStr for IpPrefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let addr_text = s.split_once('/').map_or(s, |(a, _)| a);
        if addr_text.contains(':') {
            s.parse().map(IpPrefix::V6)
        } else {
            s.parse().map(IpPrefix::V4)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn p4(s: &str) -> Prefix4 {
        s.parse().unwrap()
    }

    fn p6(s: &str) -> Prefix6 {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_displays() {
        let p = p4("10.0.0.0/8");
        assert_eq!(p.addr(), Ipv4Addr::new(10, 0, 0, 0));
        assert_eq!(p.len(), 8);
        assert_eq!(p.to_string(), "10.0.0.0/8");
        assert_eq!(format!("{p:?}"), "10.0.0.0/8");
        assert_eq!(p4("0.0.0.0/0").len(), 0);
        assert_eq!(p6("2001:db8::/32").to_string(), "2001:db8::/32");
        assert_eq!(p6("::/0").len(), 0);
    }

    #[test]
    fn bare_address_is_a_host_route() {
        assert_eq!(
            p4("192.0.2.1"),
            Prefix::new(Ipv4Addr::new(192, 0, 2, 1), 32).unwrap()
        );
        assert_eq!(p6("2001:db8::1").len(), 128);
    }

    #[test]
    fn bad_address() {
        assert_eq!(
            "10.0.0/8".parse::<Prefix4>(),
            Err(PrefixError::BadAddress("10.0.0".into()))
        );
        // The wrong family is a bad address too.
        assert!(matches!(
            "2001:db8::/32".parse::<Prefix4>(),
            Err(PrefixError::BadAddress(_))
        ));
        assert!(matches!(
            "10.0.0.0/8".parse::<Prefix6>(),
            Err(PrefixError::BadAddress(_))
        ));
        assert!(matches!(
            "".parse::<Prefix4>(),
            Err(PrefixError::BadAddress(_))
        ));
        assert!(matches!(
            " 10.0.0.0/8".parse::<Prefix4>(),
            Err(PrefixError::BadAddress(_))
        ));
    }

    #[test]
    fn bad_length() {
        for text in [
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "10.0.0.0/8 ",
            "10.0.0.0/x",
            "10.0.0.0/8/8",
            "10.0.0.0/256",
            "10.0.0.0/99999999999",
        ] {
            assert!(
                matches!(
                    text.parse::<Prefix4>(),
                    Err(PrefixError::BadLength { max: 32, .. })
                ),
                "{text}"
            );
        }
        assert!(matches!(
            "::/129".parse::<Prefix6>(),
            Err(PrefixError::BadLength { max: 128, .. })
        ));
        assert_eq!(
            Prefix::new(Ipv4Addr::UNSPECIFIED, 33),
            Err(PrefixError::BadLength {
                len: "33".into(),
                max: 32
            })
        );
        assert!(Prefix::new_truncating(Ipv6Addr::UNSPECIFIED, 129).is_err());
    }

    #[test]
    fn host_bits() {
        let err = "10.0.0.1/8".parse::<Prefix4>().unwrap_err();
        assert_eq!(
            err,
            PrefixError::HostBits {
                given: "10.0.0.1/8".into(),
                suggestion: "10.0.0.0/8".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "host bits set in `10.0.0.1/8` (did you mean `10.0.0.0/8`?)"
        );
        assert!(matches!(
            "2001:db8::1/64".parse::<Prefix6>(),
            Err(PrefixError::HostBits { .. })
        ));
        let truncated = Prefix::new_truncating(Ipv4Addr::new(10, 1, 2, 3), 12).unwrap();
        assert_eq!(truncated.to_string(), "10.0.0.0/12");
    }

    #[test]
    fn error_messages_name_the_input() {
        assert_eq!(
            "nope/8".parse::<Prefix4>().unwrap_err().to_string(),
            "invalid address `nope`"
        );
        assert_eq!(
            "10.0.0.0/40".parse::<Prefix4>().unwrap_err().to_string(),
            "invalid prefix length `40`: must be a number from 0 to 32"
        );
    }

    #[test]
    fn contains_and_covers() {
        let net = p4("10.1.0.0/16");
        assert!(net.contains(Ipv4Addr::new(10, 1, 255, 255)));
        assert!(!net.contains(Ipv4Addr::new(10, 2, 0, 0)));
        assert!(p4("0.0.0.0/0").contains(Ipv4Addr::BROADCAST));
        assert!(net.covers(&p4("10.1.2.0/24")));
        assert!(net.covers(&net));
        assert!(!net.covers(&p4("10.0.0.0/8")));
        assert!(!net.covers(&p4("10.2.0.0/24")));
        assert!(p6("2001:db8::/32").covers(&p6("2001:db8:1::/48")));
        assert!(p6("::/0").covers(&p6("ffff::1")));
    }

    #[test]
    fn supernet() {
        assert_eq!(p4("10.1.2.0/24").supernet(8), p4("10.0.0.0/8"));
        assert_eq!(p4("10.1.2.0/24").supernet(0), p4("0.0.0.0/0"));
        assert_eq!(p4("10.1.2.0/24").supernet(30), p4("10.1.2.0/24"));
        assert_eq!(p6("2001:db8:ffff::/48").supernet(17), p6("2001::/17"));
        assert_eq!(p6("2001:8db8:ffff::/48").supernet(17), p6("2001:8000::/17"));
    }

    #[test]
    fn ip_prefixes_of_both_families() {
        let p: IpPrefix = "10.1.0.0/16".parse().unwrap();
        assert!(p.is_ipv4() && p.len() == 16 && p.to_string() == "10.1.0.0/16");
        assert!(p.contains(&"10.1.2.3".parse().unwrap()));
        assert!(!p.contains(&"10.2.0.0".parse().unwrap()));
        assert!(!p.contains(&"::".parse().unwrap()));
        let q: IpPrefix = "2001:db8::/32".parse().unwrap();
        assert!(!q.is_ipv4() && q.addr() == "2001:db8::".parse::<IpAddr>().unwrap());
        assert!(p < q, "IPv4 orders first");
        assert!(p.overlaps(&"10.0.0.0/8".parse().unwrap()));
        assert!(!p.overlaps(&"10.2.0.0/16".parse().unwrap()));
        assert!(!p.overlaps(&q));
        assert!(matches!(
            "10.0.0.1/8".parse::<IpPrefix>(),
            Err(PrefixError::HostBits { .. })
        ));
        assert!("2001:db8::/129".parse::<IpPrefix>().is_err());
        assert_eq!(
            IpPrefix::new_truncating("10.1.2.3".parse().unwrap(), 8).unwrap(),
            "10.0.0.0/8".parse().unwrap()
        );
        assert_eq!(IpPrefix::host("::1".parse().unwrap()).len(), 128);
        assert!("".parse::<IpPrefix>().is_err());
    }
}
