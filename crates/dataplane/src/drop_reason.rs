//! Every reason the pipeline discards a packet, in one enum.
//!
//! A variant's doc comment is its counter's description: the macro below
//! captures it, so `vrhost replay --json`, the docs and the metrics all print
//! the same words and the rule is stated in exactly one place.

macro_rules! drop_reasons {
    ($( $(#[doc = $doc:literal])+ $variant:ident = $label:literal, )+) => {
        /// Why a packet was dropped. See each variant for the rule.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $( $(#[doc = $doc])+ $variant, )+
        }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)+];
            /// Number of reasons (the length of a drop counter array).
            pub const COUNT: usize = DropReason::ALL.len();

            /// Short kebab-case name used as the counter label.
            pub fn name(self) -> &'static str {
                match self { $(DropReason::$variant => $label,)+ }
            }

            /// The counter's description: the variant's doc comment.
            pub fn description(self) -> &'static str {
                match self { $(DropReason::$variant => concat!($($doc),+).trim_ascii(),)+ }
            }
        }
    };
}

drop_reasons! {
    /// The (port, VLAN) pair of the frame maps to no interface of any VR.
    NoInterface = "no-interface",
    /// The frame is shorter than an Ethernet header (or VLAN tag) claims.
    TruncatedL2 = "truncated-l2",
    /// The destination MAC is not the interface's, broadcast, or a multicast group the VR joined.
    NotForUs = "not-for-us",
    /// A frame with more than one VLAN tag (QinQ) or an ethertype vrhost does not route.
    UnsupportedEthertype = "unsupported-ethertype",
    /// ARP that is not Ethernet/IPv4, is truncated, or is not a request or reply (RFC 826).
    BadArp = "bad-arp",
    /// ARP request or Neighbor Solicitation whose target is not one of the ingress interface's addresses.
    NeighborNotForUs = "neighbor-not-for-us",
    /// NDP message failing validation: hop limit not 255, bad code, length or options (RFC 4861 §6.1, §7.1).
    BadNdp = "bad-ndp",
    /// ARP or NDP claiming one of the VR's own addresses from another MAC (address conflict).
    AddressConflict = "address-conflict",
    /// IPv4 header shorter than 20 bytes, IHL < 5, or total length beyond the frame (RFC 1812 §5.2.2).
    Ipv4Truncated = "ipv4-truncated",
    /// IPv4 version field is not 4 (RFC 1812 §5.2.2).
    Ipv4BadVersion = "ipv4-bad-version",
    /// IPv4 header checksum does not verify (RFC 1812 §5.2.2).
    Ipv4BadChecksum = "ipv4-bad-checksum",
    /// IPv4 options that are malformed, or a source route option, which routers drop by default (RFC 7126 §4.3, §4.4).
    Ipv4BadOptions = "ipv4-bad-options",
    /// Martian source: 0/8, 127/8, multicast, class E or limited broadcast (RFC 1812 §5.3.7, §4.2.2.11).
    MartianSource = "martian-source",
    /// Martian destination: 0/8, 127/8 or class E (RFC 1812 §5.3.7, §4.2.2.11).
    MartianDestination = "martian-destination",
    /// A directed broadcast to one of the VR's attached subnets; not forwarded by default (RFC 2644).
    DirectedBroadcast = "directed-broadcast",
    /// Multicast destination that is not link-local control traffic; vrhost does not route multicast.
    MulticastNotRouted = "multicast-not-routed",
    /// IPv6 header shorter than 40 bytes or payload length beyond the frame (RFC 8200 §3).
    Ipv6Truncated = "ipv6-truncated",
    /// IPv6 version field is not 6 (RFC 8200 §3).
    Ipv6BadVersion = "ipv6-bad-version",
    /// IPv6 extension header chain malformed or too long (RFC 8200 §4).
    Ipv6BadExtension = "ipv6-bad-extension",
    /// IPv6 source is multicast, unspecified or loopback, or destination is loopback or unspecified (RFC 4291 §2.5.2, §2.5.3, §2.7).
    Ipv6MartianAddress = "ipv6-martian-address",
    /// IPv6 link-local source or destination on a packet that would have to be forwarded (RFC 4291 §2.5.6).
    Ipv6LinkLocalNotForwarded = "ipv6-link-local-not-forwarded",
    /// TTL or hop limit would reach zero; answered with ICMP Time Exceeded (RFC 1812 §5.3.1, RFC 8200 §3).
    TtlExpired = "ttl-expired",
    /// No route to the destination; answered with ICMP Destination Unreachable (RFC 1812 §5.2.7.1, RFC 4443 §3.1).
    NoRoute = "no-route",
    /// The route is a blackhole: dropped silently.
    Blackhole = "blackhole",
    /// The route is unreachable: answered with ICMP Destination Unreachable.
    Unreachable = "unreachable",
    /// Larger than the egress MTU with DF set, or IPv6 (never fragmented); answered with Fragmentation Needed / Packet Too Big (RFC 1191, RFC 8201).
    MtuExceeded = "mtu-exceeded",
    /// Fragmentation would need more buffers or fragments than allowed.
    FragmentFailed = "fragment-failed",
    /// Neighbor resolution failed or its hold queue was full (RFC 1122 §2.3.2.2, RFC 4861 §7.2.2).
    NeighborUnresolved = "neighbor-unresolved",
    /// The neighbor table is full; the packet could not start a resolution.
    NeighborTableFull = "neighbor-table-full",
    /// A packet the router generated itself (ICMP, ARP, NDP, echo reply) has no route back.
    NoRouteLocal = "no-route-local",
    /// Packet for the router whose protocol the data plane answers itself was malformed (bad ICMP/NDP).
    BadLocal = "bad-local",
    /// Packet for the router put on the VR's punt queue, which was full.
    PuntQueueFull = "punt-queue-full",
    /// No free packet buffer to build a reply, request or fragment.
    NoBuffer = "no-buffer",
    /// The VR used its weighted share of a saturated worker's cycles this round; dropped right after demux.
    OverShare = "over-share",
    /// Over the VR's configured packet or bit rate ceiling (`pps`, `bps`); dropped right after demux.
    RateCeiling = "rate-ceiling",
    /// Packet for the router beyond the VR's punt rate (`punt_rate`).
    PuntRateLimit = "punt-rate-limit",
    /// The source fails the ingress interface's reverse-path check (`urpf`): no usable route back (loose), or not back out of that interface (strict) (RFC 3704).
    Urpf = "urpf",
    /// Denied by a rule list of the interface it came in on (`filter_in`) or would have left by (`filter_out`), or by the list's default.
    Filtered = "filtered",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_descriptions_present() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|d| d.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
        for d in DropReason::ALL {
            assert!(!d.description().is_empty(), "{d:?}");
            assert!(!d.description().starts_with(' '));
        }
        assert_eq!(
            DropReason::TtlExpired.description(),
            "TTL or hop limit would reach zero; answered with ICMP Time Exceeded (RFC 1812 §5.3.1, RFC 8200 §3)."
        );
    }

    #[test]
    fn discriminants_index_the_counter_array() {
        for (i, d) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i);
        }
    }
}
