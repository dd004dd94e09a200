//! Address types of the config: IP prefixes ([`parse_prefix`] into
//! [`IpPrefix`]), interface
//! addresses ([`IfAddr`]) and MAC addresses, with strict parsers.
//!
//! The parsers never panic and never allocate on success, because the same
//! code parses every line of a routes file with a million entries.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

pub use vrhost_fib::IpPrefix;

/// Why an address, prefix or MAC string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// The address part is neither an IPv4 nor an IPv6 address.
    #[error("{0} is not an IP address")]
    BadAddress(String),
    /// A prefix was written without `/LENGTH`.
    #[error("{0} has no prefix length; write it as ADDRESS/LENGTH, e.g. 10.0.0.0/24")]
    MissingLength(String),
    /// The part after `/` is not a decimal number.
    #[error("prefix length {0} is not a decimal number")]
    BadLength(String),
    /// The prefix length exceeds 32 (IPv4) or 128 (IPv6).
    #[error("prefix length {len} is out of range 0..={max} for {family}")]
    LengthOutOfRange {
        /// The length as written.
        len: String,
        /// 32 or 128.
        max: u8,
        /// "IPv4" or "IPv6".
        family: &'static str,
    },
    /// A route prefix has bits set beyond its length.
    #[error("host bits are set in {given}; did you mean {masked}?")]
    HostBitsSet {
        /// The prefix as written.
        given: String,
        /// The same prefix with its host bits cleared.
        masked: IpPrefix,
    },
    /// Not six colon-separated pairs of hex digits.
    #[error("{0} is not a MAC address; write it as six hex pairs, e.g. 02:00:00:00:00:01")]
    BadMac(String),
}

/// Quotes user input for an error message, cut short so that a megabyte of
/// garbage does not become a megabyte of error text.
pub(crate) fn shown(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        format!("{s:?}")
    } else {
        let cut: String = s.chars().take(MAX).collect();
        format!("{cut:?}…")
    }
}

/// The largest prefix length of an address's family: 32 or 128.
pub fn max_len(addr: &IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn family(addr: &IpAddr) -> &'static str {
    match addr {
        IpAddr::V4(_) => "IPv4",
        IpAddr::V6(_) => "IPv6",
    }
}

/// Parses an IP address without trying both families blindly: a colon means
/// IPv6. (`IpAddr::from_str` does the same work, slower, and its error
/// carries no text.)
fn parse_ip(s: &str) -> Result<IpAddr, AddrError> {
    let parsed = if s.contains(':') {
        Ipv6Addr::from_str(s).map(IpAddr::V6)
    } else {
        Ipv4Addr::from_str(s).map(IpAddr::V4)
    };
    parsed.map_err(|_| AddrError::BadAddress(shown(s)))
}

/// Parses `ADDRESS/LENGTH` with the length checked against the family, host
/// bits not checked.
fn parse_addr_len(s: &str) -> Result<(IpAddr, u8), AddrError> {
    let Some((a, l)) = s.split_once('/') else {
        // Tell "10.0.0.0" (no length) apart from "banana" (no address).
        parse_ip(s)?;
        return Err(AddrError::MissingLength(shown(s)));
    };
    let addr = parse_ip(a)?;
    if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AddrError::BadLength(shown(l)));
    }
    let max = max_len(&addr);
    let out_of_range = || AddrError::LengthOutOfRange {
        // `l` is all ASCII digits here, so any byte index is a char boundary.
        len: if l.len() > 12 {
            format!("{}…", &l[..12])
        } else {
            l.to_string()
        },
        max,
        family: family(&addr),
    };
    // At most three digits fit any valid length; longer strings only overflow.
    if l.len() > 3 {
        return Err(out_of_range());
    }
    let len = l.bytes().fold(0u16, |n, b| n * 10 + u16::from(b - b'0'));
    if len > u16::from(max) {
        return Err(out_of_range());
    }
    let len = u8::try_from(len).map_err(|_| out_of_range())?;
    Ok((addr, len))
}

/// Parses a route prefix, `ADDRESS/LENGTH` (e.g. `10.0.0.0/8` or
/// `2001:db8::/32`): the length is required and host bits must be zero.
///
/// # Errors
/// Every [`AddrError`] but `BadMac`, each naming what was written.
pub fn parse_prefix(s: &str) -> Result<IpPrefix, AddrError> {
    let (addr, len) = parse_addr_len(s)?;
    IpPrefix::new(addr, len).map_err(|_| match IpPrefix::new_truncating(addr, len) {
        Ok(masked) => AddrError::HostBitsSet {
            given: s.to_string(),
            masked,
        },
        Err(_) => AddrError::LengthOutOfRange {
            len: len.to_string(),
            max: max_len(&addr),
            family: family(&addr),
        },
    })
}

/// An address assigned to an interface together with its subnet length,
/// e.g. `10.0.0.1/24`: host bits are the point here, not an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IfAddr {
    /// The interface's own address.
    pub addr: IpAddr,
    /// The length of the attached subnet.
    pub prefix_len: u8,
}

impl IfAddr {
    /// The attached subnet, e.g. `10.0.0.0/24` for `10.0.0.1/24`.
    pub fn network(&self) -> IpPrefix {
        let len = self.prefix_len.min(max_len(&self.addr));
        IpPrefix::new_truncating(self.addr, len).unwrap_or_else(|_| IpPrefix::host(self.addr))
    }

    /// True if `addr` is on the attached subnet.
    pub fn contains(&self, addr: &IpAddr) -> bool {
        self.network().contains(addr)
    }
}

impl fmt::Display for IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl FromStr for IfAddr {
    type Err = AddrError;

    /// Parses `ADDRESS/LENGTH`, e.g. `10.0.0.1/24`; the length is required.
    fn from_str(s: &str) -> Result<Self, AddrError> {
        let (addr, prefix_len) = parse_addr_len(s)?;
        Ok(Self { addr, prefix_len })
    }
}

/// Parses an IP address, reporting the text on failure.
///
/// # Errors
/// [`AddrError::BadAddress`].
pub fn parse_ip_addr(s: &str) -> Result<IpAddr, AddrError> {
    parse_ip(s)
}

/// Parses a MAC address written as six colon-separated hex pairs,
/// `02:00:00:00:00:01` (either case).
///
/// # Errors
/// [`AddrError::BadMac`].
pub fn parse_mac(s: &str) -> Result<[u8; 6], AddrError> {
    let bad = || AddrError::BadMac(shown(s));
    let b = s.as_bytes();
    if b.len() != 17 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (i, out) in mac.iter_mut().enumerate() {
        let at = i * 3;
        if i > 0 && b[at - 1] != b':' {
            return Err(bad());
        }
        let hi = hex(b[at]).ok_or_else(bad)?;
        let lo = hex(b[at + 1]).ok_or_else(bad)?;
        *out = hi << 4 | lo;
    }
    Ok(mac)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Formats a MAC address as `02:00:00:00:00:01`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    let [a, b, c, d, e, g] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
}

/// True for a group (multicast or broadcast) MAC address: the I/G bit, the
/// least significant bit of the first octet, is set (IEEE 802-2014 §8.2).
pub fn is_group_mac(mac: &[u8; 6]) -> bool {
    mac[0] & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_print() {
        for s in [
            "0.0.0.0/0",
            "10.0.0.0/8",
            "192.0.2.1/32",
            "::/0",
            "2001:db8::/32",
        ] {
            let net = parse_prefix(s).unwrap();
            assert_eq!(net.to_string(), s);
        }
    }

    #[test]
    fn prefix_with_host_bits_suggests_the_masked_form() {
        let e = parse_prefix("10.0.0.1/8").unwrap_err();
        assert_eq!(
            e.to_string(),
            "host bits are set in 10.0.0.1/8; did you mean 10.0.0.0/8?"
        );
        let e = parse_prefix("2001:db8::1/32").unwrap_err();
        assert!(e.to_string().contains("did you mean 2001:db8::/32?"), "{e}");
    }

    #[test]
    fn prefix_errors() {
        let err = |s: &str| parse_prefix(s).unwrap_err();
        assert!(matches!(err("10.0.0.0"), AddrError::MissingLength(_)));
        assert!(matches!(err("10.0.0/8"), AddrError::BadAddress(_)));
        assert!(matches!(err("10.0.0.0/"), AddrError::BadLength(_)));
        assert!(matches!(err("10.0.0.0/+8"), AddrError::BadLength(_)));
        assert!(matches!(
            err("10.0.0.0/33"),
            AddrError::LengthOutOfRange { .. }
        ));
        assert!(matches!(
            err("10.0.0.0/99999999999"),
            AddrError::LengthOutOfRange { .. }
        ));
        assert!(matches!(err("::/129"), AddrError::LengthOutOfRange { .. }));
        assert!(matches!(err("banana"), AddrError::BadAddress(_)));
        assert_eq!(
            err("10.0.0.0/33").to_string(),
            "prefix length 33 is out of range 0..=32 for IPv4"
        );
    }

    #[test]
    fn contains_and_overlaps() {
        let net = parse_prefix("10.0.0.0/24").unwrap();
        assert!(net.contains(&"10.0.0.255".parse().unwrap()));
        assert!(!net.contains(&"10.0.1.0".parse().unwrap()));
        assert!(!net.contains(&"::a00:1".parse().unwrap()));
        let wide = parse_prefix("10.0.0.0/16").unwrap();
        assert!(net.overlaps(&wide) && wide.overlaps(&net));
        assert!(!net.overlaps(&parse_prefix("10.0.1.0/24").unwrap()));
        let all = parse_prefix("0.0.0.0/0").unwrap();
        assert!(all.contains(&"1.2.3.4".parse().unwrap()));
        assert!(!all.overlaps(&parse_prefix("::/0").unwrap()));
    }

    #[test]
    fn interface_addresses() {
        let a: IfAddr = "10.0.0.1/24".parse().unwrap();
        assert_eq!(a.network().to_string(), "10.0.0.0/24");
        assert_eq!(a.to_string(), "10.0.0.1/24");
        assert!("10.0.0.1".parse::<IfAddr>().is_err());
        // Out-of-range lengths built by hand must not panic.
        let odd = IfAddr {
            addr: "10.0.0.1".parse().unwrap(),
            prefix_len: 200,
        };
        assert_eq!(odd.network().len(), 32);
    }

    #[test]
    fn macs() {
        assert_eq!(
            parse_mac("02:00:0a:FF:00:01").unwrap(),
            [2, 0, 0x0a, 0xff, 0, 1]
        );
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:001",
            "02-00-00-00-00-01",
            "0g:00:00:00:00:01",
            "02:00:00:00:00:0é",
            "",
        ] {
            assert!(matches!(parse_mac(bad), Err(AddrError::BadMac(_))), "{bad}");
        }
        assert_eq!(format_mac(&[2, 0, 0, 0, 0, 0xfe]), "02:00:00:00:00:fe");
        assert!(is_group_mac(&[0xff; 6]));
        assert!(is_group_mac(&[0x01, 0, 0x5e, 0, 0, 1]));
        assert!(!is_group_mac(&[0x02, 0, 0, 0, 0, 1]));
    }

    #[test]
    fn long_input_is_cut_in_messages() {
        let long = "x".repeat(10_000);
        assert!(parse_mac(&long).unwrap_err().to_string().len() < 200);
    }
}
