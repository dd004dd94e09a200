//! IP protocol numbers, shared by the IPv4 protocol field and the IPv6
//! next header field (IANA "Assigned Internet Protocol Numbers").

use core::fmt;

/// An IP protocol number. An open enum: any byte round-trips through `u8`.
///
/// `Unknown(v)` is only produced for numbers without a named variant;
/// building `Unknown(6)` by hand gives a value that compares unequal to
/// `Tcp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpProtocol {
    /// 0, IPv6 Hop-by-Hop Options (RFC 8200 §4.3).
    HopByHop,
    /// 1, ICMP (RFC 792).
    Icmp,
    /// 2, IGMP (RFC 1112).
    Igmp,
    /// 6, TCP (RFC 9293).
    Tcp,
    /// 17, UDP (RFC 768).
    Udp,
    /// 43, IPv6 Routing header (RFC 8200 §4.4).
    Ipv6Route,
    /// 44, IPv6 Fragment header (RFC 8200 §4.5).
    Ipv6Frag,
    /// 47, GRE (RFC 2784).
    Gre,
    /// 50, ESP (RFC 4303).
    Esp,
    /// 51, AH (RFC 4302).
    Ah,
    /// 58, ICMPv6 (RFC 4443).
    Icmpv6,
    /// 59, IPv6 No Next Header (RFC 8200 §4.7).
    Ipv6NoNxt,
    /// 60, IPv6 Destination Options (RFC 8200 §4.6).
    Ipv6Opts,
    /// 89, OSPF (RFC 2328).
    Ospf,
    /// 103, PIM (RFC 7761).
    Pim,
    /// 112, VRRP (RFC 9568).
    Vrrp,
    /// Any other number.
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        match v {
            0 => IpProtocol::HopByHop,
            1 => IpProtocol::Icmp,
            2 => IpProtocol::Igmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            43 => IpProtocol::Ipv6Route,
            44 => IpProtocol::Ipv6Frag,
            47 => IpProtocol::Gre,
            50 => IpProtocol::Esp,
            51 => IpProtocol::Ah,
            58 => IpProtocol::Icmpv6,
            59 => IpProtocol::Ipv6NoNxt,
            60 => IpProtocol::Ipv6Opts,
            89 => IpProtocol::Ospf,
            103 => IpProtocol::Pim,
            112 => IpProtocol::Vrrp,
            other => IpProtocol::Unknown(other),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(p: IpProtocol) -> u8 {
        match p {
            IpProtocol::HopByHop => 0,
            IpProtocol::Icmp => 1,
            IpProtocol::Igmp => 2,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Ipv6Route => 43,
            IpProtocol::Ipv6Frag => 44,
            IpProtocol::Gre => 47,
            IpProtocol::Esp => 50,
            IpProtocol::Ah => 51,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Ipv6NoNxt => 59,
            IpProtocol::Ipv6Opts => 60,
            IpProtocol::Ospf => 89,
            IpProtocol::Pim => 103,
            IpProtocol::Vrrp => 112,
            IpProtocol::Unknown(v) => v,
        }
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            IpProtocol::HopByHop => "hop-by-hop",
            IpProtocol::Icmp => "icmp",
            IpProtocol::Igmp => "igmp",
            IpProtocol::Tcp => "tcp",
            IpProtocol::Udp => "udp",
            IpProtocol::Ipv6Route => "ipv6-route",
            IpProtocol::Ipv6Frag => "ipv6-frag",
            IpProtocol::Gre => "gre",
            IpProtocol::Esp => "esp",
            IpProtocol::Ah => "ah",
            IpProtocol::Icmpv6 => "ipv6-icmp",
            IpProtocol::Ipv6NoNxt => "ipv6-nonxt",
            IpProtocol::Ipv6Opts => "ipv6-opts",
            IpProtocol::Ospf => "ospf",
            IpProtocol::Pim => "pim",
            IpProtocol::Vrrp => "vrrp",
            IpProtocol::Unknown(v) => return write!(f, "proto {v}"),
        };
        f.write_str(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_byte() {
        for v in 0..=u8::MAX {
            let p = IpProtocol::from(v);
            assert_eq!(u8::from(p), v);
            // Named numbers never come back as Unknown.
            if let IpProtocol::Unknown(u) = p {
                assert!(
                    ![0, 1, 2, 6, 17, 43, 44, 47, 50, 51, 58, 59, 60, 89, 103, 112].contains(&u)
                );
            }
        }
    }

    #[test]
    fn known_numbers() {
        assert_eq!(IpProtocol::from(6), IpProtocol::Tcp);
        assert_eq!(IpProtocol::from(58), IpProtocol::Icmpv6);
        assert_eq!(u8::from(IpProtocol::Vrrp), 112);
        assert_eq!(format!("{}", IpProtocol::Unknown(253)), "proto 253");
    }
}
