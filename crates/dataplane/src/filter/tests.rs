use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use vrhost_fib::IpPrefix;

use super::*;

fn p(s: &str) -> IpPrefix {
    let (a, l) = s.split_once('/').expect("prefix");
    IpPrefix::new(a.parse().expect("addr"), l.parse().expect("len")).expect("prefix")
}

fn key(src: &str, dst: &str, protocol: u8, l4: Option<(u16, u16)>, pcp: u8) -> PacketKey {
    PacketKey {
        src: src.parse().expect("src"),
        dst: dst.parse().expect("dst"),
        protocol,
        l4,
        pcp,
    }
}

/// The reference: the first rule whose every field matches, in order.
fn naive(rules: &[Rule], k: &PacketKey) -> Option<usize> {
    rules.iter().position(|r| r.matches(k))
}

fn list(rules: Vec<Rule>) -> FilterSpec {
    FilterSpec {
        name: "f".into(),
        default: Action::Permit,
        rules,
    }
}

#[test]
fn first_match_wins_over_every_field() {
    let rules = vec![
        Rule {
            action: Action::Deny,
            src: Some(p("192.0.2.0/24")),
            ..Rule::default()
        },
        Rule {
            action: Action::Permit,
            dst: Some(p("198.51.100.0/24")),
            protocol: Some(6),
            dst_port: Some(PortRange { lo: 80, hi: 443 }),
            ..Rule::default()
        },
        Rule {
            action: Action::Deny,
            protocol: Some(1),
            icmp_type: Some(8),
            ..Rule::default()
        },
        Rule {
            action: Action::Deny,
            pcp: Some(5),
            ..Rule::default()
        },
        Rule {
            action: Action::Deny,
            dst: Some(p("2001:db8::/32")),
            protocol: Some(17),
            src_port: Some(PortRange::one(53)),
            ..Rule::default()
        },
    ];
    let f = Filter::build(&list(rules.clone()), 1).expect("builds");
    for (k, want) in [
        (
            key("192.0.2.9", "198.51.100.1", 6, Some((1, 80)), 0),
            Some(0),
        ),
        (
            key("10.0.0.1", "198.51.100.1", 6, Some((1, 80)), 0),
            Some(1),
        ),
        (
            key("10.0.0.1", "198.51.100.1", 6, Some((1, 443)), 0),
            Some(1),
        ),
        (key("10.0.0.1", "198.51.100.1", 6, Some((1, 444)), 0), None),
        (key("10.0.0.1", "198.51.100.1", 17, Some((1, 80)), 0), None),
        // A later fragment has no ports: the port rule cannot match.
        (key("10.0.0.1", "198.51.100.1", 6, None, 0), None),
        (key("10.0.0.1", "203.0.113.1", 1, Some((8, 0)), 0), Some(2)),
        (key("10.0.0.1", "203.0.113.1", 1, Some((0, 0)), 0), None),
        (key("10.0.0.1", "203.0.113.1", 1, Some((0, 0)), 5), Some(3)),
        (
            key("2001:db8::1", "2001:db8::2", 17, Some((53, 9)), 0),
            Some(4),
        ),
        (
            key("2001:db8::1", "2001:db9::2", 17, Some((53, 9)), 0),
            None,
        ),
        (
            key("2001:db8::1", "2001:db9::2", 17, Some((53, 9)), 5),
            Some(3),
        ),
    ] {
        assert_eq!(f.first_match(&k), want, "{k:?}");
        assert_eq!(naive(&rules, &k), want, "{k:?}");
    }
}

#[test]
fn the_default_decides_when_nothing_matches_and_rules_count() {
    let spec = FilterSpec {
        name: "edge".into(),
        default: Action::Deny,
        rules: vec![Rule {
            action: Action::Permit,
            protocol: Some(17),
            dst_port: Some(PortRange::one(53)),
            ..Rule::default()
        }],
    };
    let f = Filter::build(&spec, 2).expect("builds");
    let udp = |dport: u16| {
        let mut ip = [0u8; 28];
        ip[0] = 0x45;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 1, 1]);
        ip[22..24].copy_from_slice(&dport.to_be_bytes());
        ip
    };
    assert!(f.permits4(0, &udp(53), 0));
    assert!(f.permits4(1, &udp(53), 0));
    assert!(!f.permits4(1, &udp(54), 0));
    // A later fragment of a DNS query has no port to match: the default.
    let mut frag = udp(53);
    frag[7] = 8;
    assert!(!f.permits4(0, &frag, 0));
    assert!(!f.permits4(0, &udp(53)[..19], 0), "a cut header is refused");
    assert_eq!(f.hits(), vec![2, 2]);
    // Rebuilt for more workers, the counts carry over.
    let g = f.for_workers(4);
    assert_eq!(g.workers(), 4);
    assert_eq!(g.hits(), vec![2, 2]);
}

#[test]
fn neighbor_discovery_passes_a_list_that_denies_everything() {
    let spec = FilterSpec {
        name: "shut".into(),
        default: Action::Deny,
        rules: vec![],
    };
    let f = Filter::build(&spec, 1).expect("builds");
    let icmp6 = |t: u8, hop_limit: u8| {
        let mut ip = [0u8; 48];
        ip[0] = 0x60;
        ip[5] = 8;
        ip[6] = 58;
        ip[7] = hop_limit;
        ip[8] = 0x20;
        ip[24] = 0x20;
        ip[40] = t;
        ip
    };
    // For the router or its link (the caller says so), hop limit 255.
    for t in 133..=137 {
        assert!(f.permits6(0, &icmp6(t, 255), 0, true), "type {t}");
    }
    assert!(!f.permits6(0, &icmp6(128, 255), 0, true), "echo request");
    // Not with another hop limit (never sent by a neighbor on the link),
    // and never where the caller does not allow it (forwarded packets).
    assert!(!f.permits6(0, &icmp6(135, 64), 0, true));
    assert!(!f.permits6(0, &icmp6(135, 255), 0, false));
    assert_eq!(f.hits(), vec![3], "only the refused ones counted");
}

/// IPv6 with `n` Destination Options headers, then TCP to port 22.
fn tcp22_after(n: usize) -> Vec<u8> {
    let mut ip = vec![0u8; 40 + 8 * n + 20];
    ip[0] = 0x60;
    ip[6] = if n == 0 { 6 } else { 60 };
    ip[7] = 64;
    ip[8] = 0x20;
    ip[24] = 0x20;
    for k in 0..n {
        ip[40 + 8 * k] = if k + 1 == n { 6 } else { 60 };
    }
    let t = 40 + 8 * n;
    ip[t + 2..t + 4].copy_from_slice(&22u16.to_be_bytes());
    ip
}

#[test]
fn a_header_chain_that_hides_the_transport_header_is_denied() {
    let ssh = FilterSpec {
        name: "no-ssh".into(),
        default: Action::Permit,
        rules: vec![Rule {
            action: Action::Deny,
            protocol: Some(6),
            dst_port: Some(PortRange::one(22)),
            ..Rule::default()
        }],
    };
    let f = Filter::build(&ssh, 1).expect("builds");
    // Up to the limit the port is found, and the rule denies.
    for n in [0, 1, MAX_EXTENSIONS - 1] {
        assert!(!f.permits6(0, &tcp22_after(n), 0, false), "{n} headers");
    }
    // Past it, or with the chain cut short, the port cannot be told: a
    // list that names protocols denies the packet (counted as its default).
    assert!(!f.permits6(0, &tcp22_after(MAX_EXTENSIONS), 0, false));
    assert!(!f.permits6(0, &tcp22_after(MAX_EXTENSIONS + 1), 0, false));
    let cut = tcp22_after(3);
    assert!(!f.permits6(0, &cut[..40 + 8 * 2 + 4], 0, false));
    assert_eq!(f.hits(), vec![3, 3]);
    // A list about addresses only does not care.
    let addrs = FilterSpec {
        name: "bogons".into(),
        default: Action::Permit,
        rules: vec![Rule {
            action: Action::Deny,
            src: Some(p("2001:db8:dead::/48")),
            ..Rule::default()
        }],
    };
    let g = Filter::build(&addrs, 1).expect("builds");
    assert!(g.permits6(0, &tcp22_after(MAX_EXTENSIONS + 1), 0, false));
    // IPv4: a first fragment too short for the ports (RFC 1858's tiny
    // fragment) is denied by a list that names protocols.
    let mut tiny = [0u8; 22];
    tiny[0] = 0x45;
    tiny[6] = 0x20; // MF, offset 0
    tiny[9] = 6;
    tiny[20..22].copy_from_slice(&1000u16.to_be_bytes());
    assert!(!f.permits4(0, &tiny, 0));
    assert!(Filter::build(&addrs, 1)
        .expect("builds")
        .permits4(0, &tiny, 0));
}

#[test]
fn ipv6_transport_is_found_past_extension_headers() {
    // Hop-by-Hop (8 bytes), then a first fragment, then UDP 5353 → 53.
    let mut ip = vec![0u8; 40 + 8 + 8 + 8];
    ip[0] = 0x60;
    ip[6] = 0;
    ip[40] = 44;
    ip[48] = 17;
    ip[56..58].copy_from_slice(&5353u16.to_be_bytes());
    ip[58..60].copy_from_slice(&53u16.to_be_bytes());
    let k = PacketKey::v6(&ip, 0).expect("key");
    assert_eq!((k.protocol, k.l4), (17, Some((5353, 53))));
    // The same as a later fragment (offset 8): no ports.
    ip[50] = 0;
    ip[51] = 8 << 3;
    let k = PacketKey::v6(&ip, 0).expect("key");
    assert_eq!((k.protocol, k.l4), (17, None));
}

#[test]
fn bad_rules_are_refused_with_the_rule_and_the_reason() {
    let bad = [
        (
            Rule {
                src: Some(p("10.0.0.0/8")),
                dst: Some(p("2001:db8::/32")),
                ..Rule::default()
            },
            "different families",
        ),
        (
            Rule {
                dst_port: Some(PortRange::one(80)),
                ..Rule::default()
            },
            "ports need protocol",
        ),
        (
            Rule {
                protocol: Some(6),
                icmp_type: Some(8),
                ..Rule::default()
            },
            "ICMP type",
        ),
        (
            Rule {
                protocol: Some(6),
                dst_port: Some(PortRange { lo: 90, hi: 80 }),
                ..Rule::default()
            },
            "first port is above",
        ),
        (
            Rule {
                pcp: Some(8),
                ..Rule::default()
            },
            "0 to 7",
        ),
    ];
    for (rule, why) in bad {
        let spec = list(vec![Rule::default(), rule]);
        let e = Filter::build(&spec, 1).expect_err("refused").to_string();
        assert!(e.contains("rule 2") && e.contains(why), "{e}");
    }
    let many = list(vec![Rule::default(); MAX_RULES + 1]);
    assert!(matches!(
        Filter::build(&many, 1),
        Err(FilterError::TooManyRules { rules, .. }) if rules == MAX_RULES + 1
    ));
    assert!(Filter::build(&list(vec![Rule::default(); MAX_RULES]), 1).is_ok());
}

// Random lists against the reference: values are drawn from small pools
// so that rules overlap and packets hit their edges.

const V4: [u32; 6] = [
    0x0a00_0000,
    0x0a00_0100,
    0x0a01_0000,
    0xc000_0200,
    0xc633_6400,
    0xffff_ff00,
];

fn addr4() -> impl Strategy<Value = u32> {
    (prop::sample::select(&V4[..]), 0u32..512).prop_map(|(b, o)| b.wrapping_add(o))
}

fn addr6() -> impl Strategy<Value = u128> {
    (0u128..4, 0u128..600).prop_map(|(b, o)| (0x2001_0db8u128 << 96) + (b << 80) + o)
}

fn prefix() -> impl Strategy<Value = Option<IpPrefix>> {
    prop_oneof![
        2 => Just(None),
        3 => (addr4(), 0u8..=32).prop_map(|(a, l)| Some(
            IpPrefix::new_truncating(IpAddr::V4(Ipv4Addr::from(a)), l).expect("v4")
        )),
        2 => (addr6(), prop_oneof![0u8..=128, 40u8..=128]).prop_map(|(a, l)| Some(
            IpPrefix::new_truncating(IpAddr::V6(Ipv6Addr::from(a)), l).expect("v6")
        )),
    ]
}

fn ports() -> impl Strategy<Value = Option<PortRange>> {
    prop_oneof![
        3 => Just(None),
        1 => (0u16..100, 0u16..40).prop_map(|(lo, w)| Some(PortRange { lo, hi: lo + w })),
        1 => prop::sample::select(&[0u16, 53, 80, 443, 1024, 65535][..]).prop_map(|p| Some(PortRange::one(p))),
    ]
}

fn rule() -> impl Strategy<Value = Rule> {
    let protocol = prop::option::of(prop::sample::select(&[1u8, 6, 17, 47, 58, 132][..]));
    (
        any::<bool>(),
        prefix(),
        prefix(),
        protocol,
        ports(),
        ports(),
        prop::option::of(0u8..10),
        prop::option::of(0u8..4),
        prop::option::of(0u8..8),
    )
        .prop_map(|(deny, src, dst, protocol, sp, dp, t, c, pcp)| {
            let mut r = Rule {
                action: if deny { Action::Deny } else { Action::Permit },
                src,
                dst,
                protocol,
                pcp,
                ..Rule::default()
            };
            // Keep the rule valid: mixed families lose the destination,
            // and only the protocols that have them get ports or types.
            if r.problem().is_some() {
                r.dst = None;
            }
            match protocol {
                Some(6 | 17 | 132) => (r.src_port, r.dst_port) = (sp, dp),
                Some(1 | 58) => (r.icmp_type, r.icmp_code) = (t, t.and(c)),
                _ => {}
            }
            r
        })
}

fn packet() -> impl Strategy<Value = PacketKey> {
    let l4 = prop_oneof![
        1 => Just(None),
        4 => (0u16..150, 0u16..150).prop_map(Some),
        1 => prop::sample::select(&[(53u16, 443u16), (1024, 80), (65535, 0), (8, 0), (3, 1)][..]).prop_map(Some),
    ];
    let addrs = prop_oneof![
        (addr4(), addr4())
            .prop_map(|(s, d)| (IpAddr::V4(Ipv4Addr::from(s)), IpAddr::V4(Ipv4Addr::from(d)))),
        (addr6(), addr6())
            .prop_map(|(s, d)| (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)))),
    ];
    (
        addrs,
        prop::sample::select(&[1u8, 6, 17, 47, 58, 132][..]),
        l4,
        0u8..8,
    )
        .prop_map(|((src, dst), protocol, l4, pcp)| PacketKey {
            src,
            dst,
            protocol,
            l4,
            pcp,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_classifier_agrees_with_a_scan_of_the_rules(
        rules in prop::collection::vec(rule(), 0..200),
        packets in prop::collection::vec(packet(), 64),
    ) {
        let f = Filter::build(&list(rules.clone()), 1).expect("valid rules build");
        for k in &packets {
            let want = naive(&rules, k);
            prop_assert_eq!(f.first_match(k), want, "{:?}", k);
            // Through the worker's memo: the first time fills it, the
            // second answers from it (or from a slot another packet took).
            prop_assert_eq!(f.first_match_in(0, k), want, "{:?}", k);
            prop_assert_eq!(f.first_match_in(0, k), want, "{:?}", k);
        }
        // Every packet again, the memo now full of the others' answers.
        for k in &packets {
            prop_assert_eq!(f.first_match_in(0, k), naive(&rules, k), "{:?}", k);
        }
    }
}
