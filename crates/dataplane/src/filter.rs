//! Per-interface filters: a VR's named, ordered rule lists, applied to
//! what enters an interface (`filter_in`) or what is forwarded out of it
//! (`filter_out`). First match wins; a packet no rule matches gets the
//! list's default.
//!
//! ```text
//!   packet ─▶ key: source, destination, protocol, source port or ICMP type,
//!            destination port or ICMP code, VLAN priority
//!        ─▶ per field, the elementary interval the value falls in ─▶ its class
//!        ─▶ AND of the classes' rule bit vectors ─▶ lowest bit: the first rule that matches
//! ```
//!
//! Classification is the bit-vector scheme of Lakshman and Stiliadis
//! (SIGCOMM 1998), not a scan of the rules. Each field's rule ranges cut
//! its value space into elementary intervals; every interval gets the bit
//! vector of the rules that cover it, and equal vectors are one class. A
//! packet costs one interval lookup per field (an index on the value's top
//! bits, about four slices per boundary, so most lookups end at the index)
//! and an AND over the classes' vectors, word by word where a summary word
//! per vector (bit `i`: word `i` is not zero) says both have bits.
//!
//! What decides is the combination of classes, not the addresses: each
//! worker remembers the answer for the last combinations it met, in a
//! direct-mapped memo of 2,048 entries per family keyed by the packed
//! class numbers, so the AND is done once per combination, however many
//! rules the list has. A field no rule constrains, or that all rules cut
//! alike, is folded into one constant vector and not looked at; nor is a
//! field that no rule the packet's protocol can match constrains (the
//! memo key's `Plan`). A plain burst's input list judges the whole burst
//! in one pass before the fast path (`Filter::judge4_burst`), reading each
//! field of a frame in place only where a key looks at it. Cost:
//! docs/benchmarks.md, "Filters".
//!
//! Each rule counts what it matched, per worker ([`Filter::hits`]); the
//! default has a counter of its own.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use thiserror::Error;
use vrhost_fib::IpPrefix;

use crate::counters::Cell;
use crate::mbuf::Mbuf;

/// What a rule, or a list's default, does with a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Action {
    /// Let it through.
    #[default]
    Permit,
    /// Drop it, counted as `filtered`.
    Deny,
}

impl Action {
    /// The config's word: `permit` or `deny`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Permit => "permit",
            Action::Deny => "deny",
        }
    }
}

impl std::str::FromStr for Action {
    type Err = ();
    fn from_str(s: &str) -> Result<Action, ()> {
        match s {
            "permit" => Ok(Action::Permit),
            "deny" => Ok(Action::Deny),
            _ => Err(()),
        }
    }
}

/// An inclusive range of ports, `lo` to `hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port.
    pub hi: u16,
}

impl PortRange {
    /// One port.
    pub fn one(port: u16) -> PortRange {
        PortRange { lo: port, hi: port }
    }

    /// Whether `port` is in it.
    pub fn contains(self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// IP protocol numbers a rule's ports apply to: TCP, UDP, SCTP.
pub const PORT_PROTOCOLS: [u8; 3] = [6, 17, 132];
/// ICMP for IPv4 and ICMPv6: the protocols `icmp_type` and `icmp_code` apply to.
pub const ICMP_PROTOCOLS: [u8; 2] = [1, 58];

/// One rule: every field it sets must match (an unset field matches
/// anything), and then its action applies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rule {
    /// What a match does.
    pub action: Action,
    /// Source prefix; with a destination prefix, of the same family. A
    /// prefix limits the rule to its family.
    pub src: Option<IpPrefix>,
    /// Destination prefix.
    pub dst: Option<IpPrefix>,
    /// IP protocol (IPv6: the header after any extension headers).
    pub protocol: Option<u8>,
    /// Source ports (TCP, UDP or SCTP `protocol` only).
    pub src_port: Option<PortRange>,
    /// Destination ports (TCP, UDP or SCTP `protocol` only).
    pub dst_port: Option<PortRange>,
    /// ICMP type (`protocol` 1 or 58 only).
    pub icmp_type: Option<u8>,
    /// ICMP code (`protocol` 1 or 58 only).
    pub icmp_code: Option<u8>,
    /// The VLAN priority (PCP, 0–7) of the frame as it was received; an
    /// untagged frame's is 0.
    pub pcp: Option<u8>,
}

/// A named rule list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FilterSpec {
    /// Its name, unique in the VR.
    pub name: String,
    /// What a packet no rule matches gets.
    pub default: Action,
    /// The rules, first match wins.
    pub rules: Vec<Rule>,
}

/// Most rules in one list: its bit vectors have 64 words, which one
/// summary word covers.
pub const MAX_RULES: usize = 4096;
/// Most rules in all of one VR's lists together: what a tenant may make the
/// router build and hold (a list's tables grow with its rules squared in
/// the worst case: tens of MB at this size).
pub const MAX_VR_RULES: usize = 4096;
/// Most lists in one VR.
pub const MAX_LISTS: usize = 64;

/// Whether a VR may hold `lists` lists of `rules` rules in all
/// ([`MAX_LISTS`], [`MAX_VR_RULES`]).
pub fn within_limits(lists: usize, rules: usize) -> bool {
    lists <= MAX_LISTS && rules <= MAX_VR_RULES
}

/// Why `lists` lists of `rules` rules in all are too many for one VR
/// ([`within_limits`]): the words the config, the API and the table
/// writer refuse them with.
pub fn limits_message(lists: usize, rules: usize) -> String {
    format!(
        "{lists} filters with {rules} rules in all; a router may have at most {MAX_LISTS} \
         filters and {MAX_VR_RULES} rules in all"
    )
}

/// Why a rule list cannot be built. `rule` counts from 1.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum FilterError {
    /// More than [`MAX_RULES`].
    #[error("filter {filter:?} has {rules} rules, at most {MAX_RULES} are allowed")]
    TooManyRules {
        /// The list.
        filter: String,
        /// How many it has.
        rules: usize,
    },
    /// Something wrong with one rule.
    #[error("filter {filter:?} rule {rule}: {reason}")]
    Rule {
        /// The list.
        filter: String,
        /// The rule, from 1.
        rule: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

impl Rule {
    /// What is wrong with the rule, if anything.
    pub fn problem(&self) -> Option<&'static str> {
        if let (Some(s), Some(d)) = (self.src, self.dst) {
            if matches!(s, IpPrefix::V4(_)) != matches!(d, IpPrefix::V4(_)) {
                return Some("source and destination are of different families");
            }
        }
        let ported = self.src_port.is_some() || self.dst_port.is_some();
        if ported && !self.protocol.is_some_and(|p| PORT_PROTOCOLS.contains(&p)) {
            return Some("ports need protocol tcp, udp or sctp");
        }
        let icmp = self.icmp_type.is_some() || self.icmp_code.is_some();
        if icmp && !self.protocol.is_some_and(|p| ICMP_PROTOCOLS.contains(&p)) {
            return Some("an ICMP type or code needs protocol icmp or icmpv6");
        }
        if self.icmp_code.is_some() && self.icmp_type.is_none() {
            return Some("an ICMP code needs an ICMP type");
        }
        if [self.src_port, self.dst_port]
            .into_iter()
            .flatten()
            .any(|r| r.lo > r.hi)
        {
            return Some("a port range's first port is above its last");
        }
        if self.pcp.is_some_and(|p| p > 7) {
            return Some("a VLAN priority (pcp) is 0 to 7");
        }
        None
    }

    /// Whether the rule matches `key`: the reference the classifier is
    /// tested against, one rule at a time.
    pub fn matches(&self, key: &PacketKey) -> bool {
        let within = |p: Option<IpPrefix>, a: IpAddr| p.is_none_or(|p| prefix_contains(p, a));
        let l4 = |want: Option<u16>, got: Option<u16>| match want {
            None => true,
            Some(w) => got == Some(w),
        };
        let range = |r: Option<PortRange>, got: Option<u16>| match r {
            None => true,
            Some(r) => got.is_some_and(|p| r.contains(p)),
        };
        within(self.src, key.src)
            && within(self.dst, key.dst)
            && self.protocol.is_none_or(|p| p == key.protocol)
            && range(self.src_port, key.l4.map(|(s, _)| s))
            && range(self.dst_port, key.l4.map(|(_, d)| d))
            && l4(self.icmp_type.map(u16::from), key.l4.map(|(t, _)| t))
            && l4(self.icmp_code.map(u16::from), key.l4.map(|(_, c)| c))
            && self.pcp.is_none_or(|p| p == key.pcp)
    }
}

fn prefix_contains(p: IpPrefix, a: IpAddr) -> bool {
    match (p, a) {
        (IpPrefix::V4(p), IpAddr::V4(a)) => {
            let (lo, hi) = range4(p.addr(), p.len());
            (lo..=hi).contains(&u32::from(a))
        }
        (IpPrefix::V6(p), IpAddr::V6(a)) => {
            let (lo, hi) = range6(p.addr(), p.len());
            (lo..=hi).contains(&u128::from(a))
        }
        _ => false,
    }
}

fn range4(a: Ipv4Addr, len: u8) -> (u32, u32) {
    let host = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
    let lo = u32::from(a) & !host;
    (lo, lo | host)
}

fn range6(a: Ipv6Addr, len: u8) -> (u128, u128) {
    let host = u128::MAX.checked_shr(u32::from(len)).unwrap_or(0);
    let lo = u128::from(a) & !host;
    (lo, lo | host)
}

/// What a filter looks at in a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol (IPv6: after the extension headers).
    pub protocol: u8,
    /// Source and destination port (TCP, UDP, SCTP) or ICMP type and
    /// code; `None` for another protocol, a fragment other than the first,
    /// or a header cut short.
    pub l4: Option<(u16, u16)>,
    /// VLAN priority of the frame as received.
    pub pcp: u8,
}

impl PacketKey {
    /// The key of IPv4 packet `ip` (from its header to its end, no
    /// padding), received with VLAN priority `pcp`; `None` when the header
    /// is cut short.
    pub fn v4(ip: &[u8], pcp: u8) -> Option<PacketKey> {
        let h = ip.first_chunk::<20>()?;
        let ihl = usize::from(h[0] & 0x0f) * 4;
        let protocol = h[9];
        // A fragment other than the first carries no transport header.
        let first = u16::from_be_bytes([h[6], h[7]]) & 0x1fff == 0;
        let l4 = if first {
            l4_of(protocol, ip.get(ihl..)).unwrap_or(None)
        } else {
            None
        };
        Some(PacketKey {
            src: IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15])),
            dst: IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19])),
            protocol,
            l4,
            pcp,
        })
    }

    /// The key of IPv6 packet `ip`: the protocol and transport header
    /// are those after the extension headers (Hop-by-Hop, Routing,
    /// Destination Options, Fragment, AH; at most 8 of them).
    pub fn v6(ip: &[u8], pcp: u8) -> Option<PacketKey> {
        let h = ip.first_chunk::<40>()?;
        let src: [u8; 16] = *h[8..].first_chunk()?;
        let dst: [u8; 16] = *h[24..].first_chunk()?;
        let (protocol, l4) = upper6(h[6], &ip[40..]);
        let l4 = l4.unwrap_or(None);
        Some(PacketKey {
            src: IpAddr::V6(Ipv6Addr::from(src)),
            dst: IpAddr::V6(Ipv6Addr::from(dst)),
            protocol,
            l4,
            pcp,
        })
    }
}

/// The upper-layer protocol of an IPv6 packet whose fixed header names
/// `next` and is followed by `rest`, and its ports or ICMP type and code,
/// past the extension headers.
///
/// [`Cut`] when the chain does not reach the transport header within
/// [`MAX_EXTENSIONS`] extension headers, or runs past the packet, or the
/// transport header is shorter than its ports: what such a packet carries
/// cannot be told, and a list that looks at protocols denies it (RFC 7112:
/// a first fragment must hold the whole header chain).
fn upper6(mut next: u8, rest: &[u8]) -> (u8, Result<Option<(u16, u16)>, Cut>) {
    let mut off = 0;
    for _ in 0..MAX_EXTENSIONS {
        let hdr = rest.get(off..);
        let (len, nh) = match (next, hdr.and_then(|h| h.first_chunk::<8>())) {
            // Hop-by-Hop, Routing, Destination Options: (8 + 8 × length) bytes.
            (0 | 43 | 60, Some(h)) => (8 + 8 * usize::from(h[1]), h[0]),
            // Fragment: a later fragment has no transport header.
            (44, Some(h)) => {
                if u16::from_be_bytes([h[2], h[3]]) >> 3 != 0 {
                    return (h[0], Ok(None));
                }
                (8, h[0])
            }
            // AH: (4 × length + 8) bytes.
            (51, Some(h)) => (4 * usize::from(h[1]) + 8, h[0]),
            (0 | 43 | 60 | 44 | 51, None) => return (next, Err(Cut)),
            _ => return (next, l4_of(next, hdr)),
        };
        next = nh;
        off += len;
    }
    (next, Err(Cut))
}

/// Extension headers walked before an IPv6 packet's protocol is given up on.
pub const MAX_EXTENSIONS: usize = 8;

/// A packet whose transport header cannot be read: the header chain or the
/// header itself is cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cut;

/// Ports or ICMP type and code at the start of transport header `l4`;
/// [`Cut`] when a protocol that has them has fewer than 4 bytes of header.
#[inline(always)]
fn l4_of(protocol: u8, l4: Option<&[u8]>) -> Result<Option<(u16, u16)>, Cut> {
    let h = l4.and_then(|l4| l4.first_chunk::<4>());
    Ok(match (protocol, h) {
        (6 | 17 | 132, Some(h)) => Some((
            u16::from_be_bytes([h[0], h[1]]),
            u16::from_be_bytes([h[2], h[3]]),
        )),
        (1 | 58, Some(h)) => Some((u16::from(h[0]), u16::from(h[1]))),
        (6 | 17 | 132 | 1 | 58, None) => return Err(Cut),
        _ => None,
    })
}

/// The ports' key space: a port, or [`NO_L4`] for a packet without one.
const NO_L4: u32 = 0x1_0000;

/// A field's value, as an integer whose ranges the classifier cuts.
trait Field: Copy + Ord + Hash + fmt::Debug {
    const ZERO: Self;
    const MAX: Self;
    const BITS: u32;
    fn succ(self) -> Option<Self>;
    fn top(self, shift: u32) -> usize;
    /// The first value of top-bits slice `t`.
    fn slice_start(t: usize, shift: u32) -> Self;
    /// Where a header of this family holds the source address, the
    /// destination address and the protocol (or first next header).
    const SRC_AT: usize;
    const DST_AT: usize;
    const PROTOCOL_AT: usize;
    /// The address that `b` starts with (network order).
    fn read(b: &[u8]) -> Self;
}

impl Field for u32 {
    const ZERO: u32 = 0;
    const MAX: u32 = u32::MAX;
    const BITS: u32 = 32;
    fn succ(self) -> Option<u32> {
        self.checked_add(1)
    }
    #[inline(always)]
    fn top(self, shift: u32) -> usize {
        (self >> shift) as usize
    }
    fn slice_start(t: usize, shift: u32) -> u32 {
        (t as u32) << shift
    }
    const SRC_AT: usize = 12;
    const DST_AT: usize = 16;
    const PROTOCOL_AT: usize = 9;
    #[inline(always)]
    fn read(b: &[u8]) -> u32 {
        u32::from_be_bytes(b.first_chunk().copied().unwrap_or_default())
    }
}

impl Field for u128 {
    const ZERO: u128 = 0;
    const MAX: u128 = u128::MAX;
    const BITS: u32 = 128;
    fn succ(self) -> Option<u128> {
        self.checked_add(1)
    }
    #[inline(always)]
    fn top(self, shift: u32) -> usize {
        (self >> shift) as usize
    }
    fn slice_start(t: usize, shift: u32) -> u128 {
        (t as u128) << shift
    }
    const SRC_AT: usize = 8;
    const DST_AT: usize = 24;
    const PROTOCOL_AT: usize = 6;
    #[inline(always)]
    fn read(b: &[u8]) -> u128 {
        u128::from_be_bytes(b.first_chunk().copied().unwrap_or_default())
    }
}

/// One field of one family: its elementary intervals and their classes.
#[derive(Debug)]
struct Dim<K> {
    /// Where each interval starts, ascending; the first is 0.
    starts: Box<[K]>,
    /// Each interval's class, numbered from 0 in this field.
    class: Box<[u16]>,
    /// Per top-bits slice: its class when no boundary lies inside the
    /// slice (most: about eight slices per boundary), else the interval of
    /// its first value, to search from, with [`SEARCH`] set.
    top: Box<[u16]>,
    /// The interval of each slice's first value, and of the last value:
    /// where a search in a slice ends.
    first: Box<[u16]>,
    shift: u32,
    /// Each class's vector (its offset in the classifier's `vectors`).
    vector: Box<[u32]>,
    /// Bits a class number takes in a memo key.
    bits: u32,
}

impl<K: Field> Dim<K> {
    /// The class of `key`: one load where its slice holds no boundary,
    /// else a search among the slice's boundaries.
    #[inline(always)]
    fn class(&self, key: K) -> u16 {
        let t = key.top(self.shift);
        match self.top.get(t).copied().unwrap_or(0) {
            e if e & SEARCH == 0 => e,
            lo => self.search(t, usize::from(lo & !SEARCH), key),
        }
    }

    /// The class of `key` in slice `t`, whose first value is in interval `lo`.
    #[inline(never)]
    fn search(&self, t: usize, lo: usize, key: K) -> u16 {
        let hi = self.first.get(t + 1).map_or(lo, |&h| usize::from(h));
        let j = lo
            + self
                .starts
                .get(lo + 1..=hi)
                .map_or(0, |s| s.partition_point(|&s| s <= key));
        self.class.get(j).copied().unwrap_or(0)
    }
}

/// The flag of a slice entry that is where to search from, not a class
/// ([`Dim::top`]); class numbers and interval indices stay below it (at
/// most 2 × [`MAX_RULES`] + 1).
const SEARCH: u16 = 0x8000;

/// The words of one rule bit vector: a summary word, then one bit per rule.
struct Vectors {
    /// Words per vector: 1 + rules / 64, rounded up.
    stride: usize,
    words: Vec<u64>,
    index: HashMap<Box<[u64]>, u32>,
}

impl Vectors {
    /// The offset of `bits`' vector (its summary computed), shared with
    /// an equal one.
    fn intern(&mut self, bits: &[u64]) -> u32 {
        if let Some(&at) = self.index.get(bits) {
            return at;
        }
        let at = self.words.len() as u32;
        let summary = bits
            .iter()
            .enumerate()
            .fold(0u64, |s, (i, &w)| s | (u64::from(w != 0) << i));
        self.words.push(summary);
        self.words.extend_from_slice(bits);
        self.index.insert(bits.into(), at);
        at
    }
}

/// Builds one field from each rule's range of it (`None`: the rule cannot
/// match in this family), into `v`; values have `key_bits` bits. Returns
/// the field, or the vector every value gets when it is the same for all
/// (the field need not be looked at).
fn build_dim<K: Field>(
    ranges: &[Option<(K, K)>],
    words: usize,
    (key_bits, max): (u32, K),
    v: &mut Vectors,
) -> Result<Dim<K>, u32> {
    // Values past `max` never occur: no interval starts there.
    let mut starts = vec![K::ZERO];
    for &(lo, hi) in ranges.iter().flatten() {
        starts.push(lo);
        if hi < max {
            starts.extend(hi.succ());
        }
    }
    starts.sort_unstable();
    starts.dedup();
    let mut bits = vec![0u64; starts.len() * words];
    for (r, range) in ranges.iter().enumerate() {
        let Some((lo, hi)) = *range else { continue };
        let from = starts.partition_point(|&s| s < lo);
        let to = starts.partition_point(|&s| s <= hi);
        for j in from..to {
            bits[j * words + r / 64] |= 1 << (r % 64);
        }
    }
    // Classes, numbered in this field; neighbouring intervals of one
    // class merge.
    let (mut s2, mut class) = (Vec::new(), Vec::new());
    let mut vector: Vec<u32> = Vec::new();
    let mut number: HashMap<u32, u16> = HashMap::new();
    for (j, &start) in starts.iter().enumerate() {
        let at = v.intern(&bits[j * words..(j + 1) * words]);
        let c = *number.entry(at).or_insert_with(|| {
            vector.push(at);
            (vector.len() - 1) as u16
        });
        if class.last() != Some(&c) {
            s2.push(start);
            class.push(c);
        }
    }
    if vector.len() == 1 {
        return Err(vector[0]);
    }
    // About four slices per boundary, 2^8 to 2^16 of them.
    let top_bits = (usize::BITS - (8 * s2.len()).leading_zeros()).clamp(8, 16.min(key_bits));
    let shift = key_bits - top_bits;
    let slices = 1usize << top_bits;
    let mut first = Vec::with_capacity(slices + 1);
    let mut j = 0;
    for t in 0..slices {
        // The interval holding the slice's first value.
        while j + 1 < s2.len() && s2[j + 1] <= K::slice_start(t, shift) {
            j += 1;
        }
        first.push(j as u16);
    }
    first.push((s2.len() - 1) as u16);
    let top = first
        .windows(2)
        .map(|w| match w {
            &[lo, hi] if lo == hi => class[usize::from(lo)],
            w => w[0] | SEARCH,
        })
        .collect();
    Ok(Dim {
        starts: s2.into(),
        class: class.into(),
        top,
        first: first.into(),
        shift,
        bits: usize::BITS - (vector.len() - 1).leading_zeros(),
        vector: vector.into(),
    })
}

/// `d` where the field tells packets apart; else `None`, its one vector
/// ANDed into `base`.
fn keep<T>(d: Result<Dim<T>, u32>, v: &Vectors, base: &mut [u64]) -> Option<Dim<T>> {
    match d {
        Ok(d) => Some(d),
        Err(at) => {
            let (at, n) = (at as usize + 1, base.len());
            for (b, w) in base.iter_mut().zip(&v.words[at..at + n]) {
                *b &= w;
            }
            None
        }
    }
}

/// A field of 8 bits or fewer as a direct table: each value's class, and
/// each class's vector.
struct Small {
    class: Box<[u16]>,
    vector: Box<[u32]>,
    bits: u32,
}

impl Small {
    fn of(d: Dim<u32>, values: u32) -> Small {
        Small {
            class: (0..values).map(|x| d.class(x)).collect(),
            bits: d.bits,
            vector: d.vector,
        }
    }
}

/// Entries of a worker's memo of one family's classifier.
const MEMO: usize = 2048;
/// Most bits of the packed class numbers a memo entry keys by; the
/// other 16 hold the answer.
const MEMO_KEY_BITS: u32 = 48;
/// A memo entry that holds nothing (no key packs to all ones).
const MEMO_EMPTY: u64 = u64::MAX;

/// The classifier of one family, over addresses as `K`.
struct Classifier<K> {
    src: Option<Dim<K>>,
    dst: Option<Dim<K>>,
    protocol: Option<Small>,
    pcp: Option<Small>,
    src_port: Option<Dim<u32>>,
    dst_port: Option<Dim<u32>>,
    /// The AND of the vectors of the fields no packet tells apart.
    base: Box<[u64]>,
    vectors: Box<[u64]>,
    stride: usize,
    /// The fields' class numbers pack into this few bits or fewer: each
    /// worker remembers the answers for the class combinations it met
    /// ([`MEMO`] of them, direct-mapped), since a packet's classes, not
    /// its addresses, decide. `None` when they do not fit.
    key_bits: Option<u32>,
    /// The same fields as tables that every key reads alike.
    plan: Plan,
}

/// How a memo key is made: a slice table per ranged field, a direct table
/// per small one, per protocol which ranged fields are looked at, and
/// where their classes go in the key.
struct Plan {
    /// Per protocol, the ranged fields looked at ([`LIVE_DST`] ...) and
    /// the protocol's class: a field that no rule a packet of the protocol
    /// can match looks at is left out of its key (the protocol's class, in
    /// the key too, keeps keys that leave out different fields apart). A
    /// field no rule tells apart is never live.
    live: Box<[Live; 256]>,
    /// Where each ranged field's class goes in a key (destination, source,
    /// destination port, source port), above the protocol's and the VLAN
    /// priority's classes: a field not looked at leaves its bits 0.
    at: [u32; 4],
    dst: Slices,
    src: Slices,
    dst_port: Slices,
    src_port: Slices,
    /// Each VLAN priority's class (0 where no rule names one): the key's
    /// lowest bits.
    pcp: [u16; 8],
}

/// One protocol's [`Plan::live`], in one word: which ranged fields are
/// looked at (the low byte) and the protocol's class, shifted above the
/// VLAN priority's (the top 16 bits).
#[derive(Clone, Copy, Default)]
struct Live(u64);

impl Live {
    #[inline(always)]
    fn looks(self, field: u8) -> bool {
        self.0 & u64::from(field) != 0
    }

    /// The protocol's class, above the VLAN priority's bits: the key's
    /// low bits but for the priority's class.
    #[inline(always)]
    fn small(self) -> u64 {
        self.0 >> 48
    }
}

/// [`Plan::live`]: the destination address is looked at.
const LIVE_DST: u8 = 1;
/// [`Plan::live`]: the source address is looked at.
const LIVE_SRC: u8 = 2;
/// [`Plan::live`]: the destination port (or ICMP code) is looked at.
const LIVE_DST_PORT: u8 = 4;
/// [`Plan::live`]: the source port (or ICMP type) is looked at.
const LIVE_SRC_PORT: u8 = 8;
/// [`Plan::live`]: the protocol is ICMP or ICMPv6, whose type and code
/// stand in the port fields.
const LIVE_ICMP: u8 = 16;

/// One ranged field of a [`Plan`]: [`Dim::top`] and its shift, copied
/// next to the plan's other tables. Looking up through the `Option<Dim>`
/// instead cost 7 more instructions a packet (callgrind, 1,000 rules: the
/// burst 447.5 against 454.5).
struct Slices {
    top: Box<[u16]>,
    shift: u32,
}

impl Slices {
    /// The slices of field `d`; none for a field no rule tells apart,
    /// which [`Plan::live`] never marks looked at.
    fn of<K>(d: Option<&Dim<K>>) -> Slices {
        d.map_or(
            Slices {
                top: Box::default(),
                shift: 0,
            },
            |d| Slices {
                top: d.top.clone(),
                shift: d.shift,
            },
        )
    }

    /// The class of `key` in the field `d` gives (whose slices these are;
    /// asked only for a search): the slice's class, or a search among the
    /// slice's boundaries.
    #[inline(always)]
    fn class<'d, V: Field + 'd>(&self, d: impl FnOnce() -> Option<&'d Dim<V>>, key: V) -> u16 {
        let t = key.top(self.shift);
        let e = self.top.get(t).copied().unwrap_or(0);
        if e & SEARCH == 0 {
            return e;
        }
        Slices::search(d, t, e, key)
    }

    /// [`Slices::class`] where slice `t`'s entry `e` says to search.
    #[cold]
    #[inline(never)]
    fn search<'d, V: Field + 'd>(
        d: impl FnOnce() -> Option<&'d Dim<V>>,
        t: usize,
        e: u16,
        key: V,
    ) -> u16 {
        d().map_or(0, |d| d.search(t, usize::from(e & !SEARCH), key))
    }
}

impl Plan {
    /// `class` at field `i`'s place ([`Plan::at`]).
    #[inline(always)]
    fn place(&self, i: usize, class: u16) -> u64 {
        u64::from(class) << (self.at[i] & 63)
    }

    fn of<K: Field>(
        (dst, src): (Option<&Dim<K>>, Option<&Dim<K>>),
        (dst_port, src_port): (Option<&Dim<u32>>, Option<&Dim<u32>>),
        protocol: Option<&Small>,
        pcp: Option<&Small>,
        live: Box<[u8; 256]>,
    ) -> Plan {
        let present = [
            (dst.is_some(), LIVE_DST),
            (src.is_some(), LIVE_SRC),
            (dst_port.is_some(), LIVE_DST_PORT),
            (src_port.is_some(), LIVE_SRC_PORT),
        ]
        .iter()
        .fold(0, |m, &(on, bit)| if on { m | bit } else { m });
        let fields = [
            dst.map_or(0, |d| d.bits),
            src.map_or(0, |d| d.bits),
            dst_port.map_or(0, |d| d.bits),
            src_port.map_or(0, |d| d.bits),
        ];
        let pcp_bits = pcp.map_or(0, |t| t.bits);
        let small_bits = protocol.map_or(0, |t| t.bits) + pcp_bits;
        let live: Box<[Live; 256]> = Box::new(std::array::from_fn(|proto| {
            let icmp = if matches!(proto, 1 | 58) {
                LIVE_ICMP
            } else {
                0
            };
            let mask = (live[proto] & present) | icmp;
            let class = protocol.map_or(0, |t| t.class.get(proto).copied().unwrap_or(0));
            Live(u64::from(mask) | (u64::from(class) << (48 + pcp_bits)))
        }));
        let mut at = [0; 4];
        let mut next = small_bits;
        for (a, &bits) in at.iter_mut().zip(&fields) {
            *a = next;
            next += bits;
        }
        let mut p = Plan {
            live,
            at,
            dst: Slices::of(dst),
            src: Slices::of(src),
            dst_port: Slices::of(dst_port),
            src_port: Slices::of(src_port),
            pcp: [0; 8],
        };
        if let Some(t) = pcp {
            p.pcp.iter_mut().zip(&t.class).for_each(|(a, &c)| *a = c);
        }
        p
    }
}

/// Each field's class number for one packet (by field: destination,
/// source, protocol, destination port, source port, VLAN priority; 0 for
/// a field not looked at).
struct Classes {
    ids: [u16; 6],
}

impl<K: Field> Classifier<K> {
    fn build(rules: &[Rule], addr: impl Fn(IpPrefix) -> Option<(K, K)>) -> Classifier<K> {
        let n = rules.len();
        let words = n.div_ceil(64).max(1);
        let mut v = Vectors {
            stride: words + 1,
            words: Vec::new(),
            index: HashMap::new(),
        };
        let full = (K::ZERO, K::MAX);
        // A rule whose prefix is of the other family matches nothing here.
        let family_ok = |r: &Rule| {
            r.src.is_none_or(|p| addr(p).is_some()) && r.dst.is_none_or(|p| addr(p).is_some())
        };
        let addrs = |f: fn(&Rule) -> Option<IpPrefix>| -> Vec<Option<(K, K)>> {
            rules
                .iter()
                .map(|r| match f(r) {
                    _ if !family_ok(r) => None,
                    None => Some(full),
                    Some(p) => addr(p),
                })
                .collect()
        };
        let ports = |f: fn(&Rule) -> Option<(u32, u32)>| -> Vec<Option<(u32, u32)>> {
            rules
                .iter()
                .map(|r| Some(f(r).unwrap_or((0, NO_L4))))
                .collect()
        };
        let src_port = ports(|r| {
            r.src_port
                .map(|p| (u32::from(p.lo), u32::from(p.hi)))
                .or(r.icmp_type.map(|t| (u32::from(t), u32::from(t))))
        });
        let dst_port = ports(|r| {
            r.dst_port
                .map(|p| (u32::from(p.lo), u32::from(p.hi)))
                .or(r.icmp_code.map(|c| (u32::from(c), u32::from(c))))
        });
        let small = |f: fn(&Rule) -> Option<u8>, max: u32| -> Vec<Option<(u32, u32)>> {
            rules
                .iter()
                .map(|r| Some(f(r).map_or((0, max), |x| (u32::from(x), u32::from(x)))))
                .collect()
        };
        let mut base = vec![!0u64; words];
        for (i, w) in base.iter_mut().enumerate() {
            // Bits past the last rule never match.
            let valid = n.saturating_sub(i * 64).min(64);
            *w = if valid == 64 { !0 } else { (1u64 << valid) - 1 };
        }
        let (src_addrs, dst_addrs) = (addrs(|r| r.src), addrs(|r| r.dst));
        // Per protocol, the ranged fields that some rule a packet of that
        // protocol can match looks at: a packet's key leaves the others out.
        let mut live = Box::new([0u8; 256]);
        for (i, r) in rules.iter().enumerate() {
            let looks = |range: Option<(K, K)>| range.is_some_and(|x| x != full);
            let ports = |range: Option<(u32, u32)>| range.is_some_and(|x| x != (0, NO_L4));
            let fields = [
                (looks(dst_addrs[i]), LIVE_DST),
                (looks(src_addrs[i]), LIVE_SRC),
                (ports(dst_port[i]), LIVE_DST_PORT),
                (ports(src_port[i]), LIVE_SRC_PORT),
            ]
            .iter()
            .fold(0, |m, &(on, bit)| if on { m | bit } else { m });
            if !family_ok(r) {
                continue;
            }
            for (proto, l) in live.iter_mut().enumerate() {
                if r.protocol.is_none_or(|x| usize::from(x) == proto) {
                    *l |= fields;
                }
            }
        }
        let d = build_dim(&src_addrs, words, (K::BITS, K::MAX), &mut v);
        let src = keep(d, &v, &mut base);
        let d = build_dim(&dst_addrs, words, (K::BITS, K::MAX), &mut v);
        let dst = keep(d, &v, &mut base);
        let d = build_dim(&src_port, words, (17, NO_L4), &mut v);
        let src_port = keep(d, &v, &mut base);
        let d = build_dim(&dst_port, words, (17, NO_L4), &mut v);
        let dst_port = keep(d, &v, &mut base);
        let d = build_dim(&small(|r| r.protocol, 255), words, (8, 255), &mut v);
        let protocol = keep(d, &v, &mut base).map(|d| Small::of(d, 256));
        let d = build_dim(&small(|r| r.pcp, 7), words, (8, 7), &mut v);
        let pcp = keep(d, &v, &mut base).map(|d| Small::of(d, 8));
        let mut b = Vec::with_capacity(words + 1);
        b.push(
            base.iter()
                .enumerate()
                .fold(0u64, |s, (i, &w)| s | (u64::from(w != 0) << i)),
        );
        b.extend(base);
        let key_bits = [&src, &dst]
            .iter()
            .flat_map(|d| d.as_ref().map(|d| d.bits))
            .sum::<u32>()
            + [&src_port, &dst_port]
                .iter()
                .flat_map(|d| d.as_ref().map(|d| d.bits))
                .sum::<u32>()
            + [&protocol, &pcp]
                .iter()
                .flat_map(|d| d.as_ref().map(|s| s.bits))
                .sum::<u32>();
        let plan = Plan::of(
            (dst.as_ref(), src.as_ref()),
            (dst_port.as_ref(), src_port.as_ref()),
            protocol.as_ref(),
            pcp.as_ref(),
            live,
        );
        Classifier {
            src,
            dst,
            protocol,
            pcp,
            src_port,
            dst_port,
            base: b.into(),
            vectors: v.words.into(),
            stride: v.stride,
            key_bits: (key_bits <= MEMO_KEY_BITS).then_some(key_bits),
            plan,
        }
    }

    /// Each field's class for one packet.
    #[inline(always)]
    fn classes(&self, src: K, dst: K, protocol: u8, l4: Option<(u16, u16)>, pcp: u8) -> Classes {
        let (sp, dp) = match l4 {
            Some((s, d)) => (u32::from(s), u32::from(d)),
            None => (NO_L4, NO_L4),
        };
        let mut ids = [0u16; 6];
        let mut put = |i: usize, class: u16| ids[i] = class;
        if let Some(d) = &self.dst {
            put(0, d.class(dst));
        }
        if let Some(d) = &self.src {
            put(1, d.class(src));
        }
        if let Some(t) = &self.protocol {
            put(2, t.class.get(usize::from(protocol)).copied().unwrap_or(0));
        }
        if let Some(d) = &self.dst_port {
            put(3, d.class(dp));
        }
        if let Some(d) = &self.src_port {
            put(4, d.class(sp));
        }
        if let Some(t) = &self.pcp {
            put(5, t.class.get(usize::from(pcp & 7)).copied().unwrap_or(0));
        }
        Classes { ids }
    }

    /// The memo key of one packet: its protocol's and VLAN priority's
    /// classes, and above them the classes of the ranged fields its
    /// protocol looks at ([`Plan::live`]), each through its slice, searched
    /// where a boundary lies inside it.
    /// A field is read from `h` only where it is looked at.
    #[inline(always)]
    fn plan_key(&self, h: &impl Header<K>) -> u64 {
        let p = &self.plan;
        let live = p.live[usize::from(h.protocol())];
        let mut key = live.small() | u64::from(p.pcp[usize::from(h.pcp() & 7)]);
        if live.looks(LIVE_DST) {
            key |= p.place(0, p.dst.class(|| self.dst.as_ref(), h.dst()));
        }
        if live.looks(LIVE_SRC) {
            key |= p.place(1, p.src.class(|| self.src.as_ref(), h.src()));
        }
        let icmp = live.looks(LIVE_ICMP);
        if live.looks(LIVE_DST_PORT) {
            let dp = h.ports(icmp).1;
            key |= p.place(2, p.dst_port.class(|| self.dst_port.as_ref(), dp));
        }
        if live.looks(LIVE_SRC_PORT) {
            let sp = h.ports(icmp).0;
            key |= p.place(3, p.src_port.class(|| self.src_port.as_ref(), sp));
        }
        key
    }

    /// The first rule these classes match, by index: the AND of their
    /// vectors, word by word where every summary has a bit.
    #[inline(never)]
    fn resolve(&self, c: &Classes) -> Option<usize> {
        let mut at = [0u32; 6];
        let mut n = 0;
        let vectors: [Option<&[u32]>; 6] = [
            self.dst.as_ref().map(|d| &*d.vector),
            self.src.as_ref().map(|d| &*d.vector),
            self.protocol.as_ref().map(|t| &*t.vector),
            self.dst_port.as_ref().map(|d| &*d.vector),
            self.src_port.as_ref().map(|d| &*d.vector),
            self.pcp.as_ref().map(|t| &*t.vector),
        ];
        for (v, &id) in vectors.iter().zip(&c.ids) {
            if let Some(v) = v {
                at[n] = v.get(usize::from(id)).copied().unwrap_or(0);
                n += 1;
            }
        }
        let at = &at[..n];
        let vec = |o: u32| &self.vectors[o as usize..o as usize + self.stride];
        let mut summary = at.iter().fold(self.base[0], |s, &o| s & vec(o)[0]);
        while summary != 0 {
            let i = summary.trailing_zeros() as usize;
            let w = at.iter().fold(self.base[1 + i], |w, &o| w & vec(o)[1 + i]);
            if w != 0 {
                return Some(i * 64 + w.trailing_zeros() as usize);
            }
            summary &= summary - 1;
        }
        None
    }

    /// The first rule that matches, by index; through `memo` (a worker's
    /// row) when the classes fit a memo key.
    #[inline(always)]
    fn first(
        &self,
        (src, dst): (K, K),
        protocol: u8,
        l4: Option<(u16, u16)>,
        pcp: u8,
        memo: Option<&[AtomicU64]>,
    ) -> Option<usize> {
        let (Some(memo), Some(_)) = (memo, self.key_bits) else {
            return self.resolve(&self.classes(src, dst, protocol, l4, pcp));
        };
        let key = self.plan_key(&Given {
            src,
            dst,
            protocol,
            ports: l4.map_or((NO_L4, NO_L4), |(s, d)| (u32::from(s), u32::from(d))),
            pcp,
        });
        let answer = Classifier::<K>::recall(memo, key).unwrap_or_else(|entry| {
            self.remember(entry, key, Fields::of((src, dst), protocol, l4, pcp))
        });
        answer.rule()
    }

    /// The answer `memo` holds for `key` ([`Classifier::plan_key`]), or the
    /// entry to [`Classifier::remember`] it in.
    #[inline(always)]
    fn recall(memo: &[AtomicU64], key: u64) -> Result<Answer, Option<&AtomicU64>> {
        // Fibonacci hashing of the packed classes picks the entry.
        let slot =
            (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - MEMO.trailing_zeros())) as usize;
        let entry = memo.get(slot);
        let e = entry.map_or(MEMO_EMPTY, |e| e.load(Ordering::Relaxed));
        if e != MEMO_EMPTY && e >> 16 == key {
            return Ok(Answer((e & 0xffff) as usize));
        }
        Err(entry)
    }

    /// A memo miss: the classes' AND, remembered in `entry` under `key`.
    #[inline(never)]
    fn remember(&self, entry: Option<&AtomicU64>, key: u64, f: Fields<K>) -> Answer {
        let rule = self.resolve(&self.classes(f.src, f.dst, f.protocol, f.l4, f.pcp));
        let answer = Answer(rule.map_or(0, |r| r + 1));
        // Only this worker writes its row: a plain store.
        if let Some(entry) = entry {
            entry.store((key << 16) | answer.0 as u64, Ordering::Relaxed);
        }
        answer
    }
}

/// A packet's fields as [`Classifier::plan_key`] reads them: each where
/// a key looks at it.
trait Header<K> {
    fn src(&self) -> K;
    fn dst(&self) -> K;
    fn protocol(&self) -> u8;
    fn pcp(&self) -> u8;
    /// Source and destination port, or ICMP type and code where `icmp`
    /// ([`LIVE_ICMP`]).
    fn ports(&self, icmp: bool) -> (u32, u32);
}

/// Fields already read ([`PacketKey`]'s), ports as [`l4_of`] gives them.
struct Given<K> {
    src: K,
    dst: K,
    protocol: u8,
    ports: (u32, u32),
    pcp: u8,
}

impl<K: Copy> Header<K> for Given<K> {
    fn src(&self) -> K {
        self.src
    }
    fn dst(&self) -> K {
        self.dst
    }
    fn protocol(&self) -> u8 {
        self.protocol
    }
    fn pcp(&self) -> u8 {
        self.pcp
    }
    fn ports(&self, _: bool) -> (u32, u32) {
        self.ports
    }
}

/// A packet read in place by the burst pass: its network header (`L3`
/// bytes) and the transport header's first 4 bytes, no extension header
/// between them, and the frame's VLAN priority.
struct InPlace<'a, const N: usize> {
    h: &'a [u8; N],
    pcp: u8,
}

impl<const N: usize> InPlace<'_, N> {
    /// The network header's length: the transport header's first 4 bytes
    /// end the read.
    const L3: usize = N - 4;

    /// The ports (or ICMP type and code) as [`l4_of`] reads them. A
    /// protocol without ports gets the first two 16-bit words, which no
    /// key looks at: only rules of TCP, UDP and SCTP name ports, and of
    /// ICMP types and codes (`Rule::problem`), so the port fields are
    /// never live for another protocol (`Plan::live`).
    #[inline(always)]
    fn transport(&self, icmp: bool) -> (u32, u32) {
        let w = u32::read(&self.h[Self::L3..]);
        if icmp {
            (w >> 24, (w >> 16) & 0xff)
        } else {
            (w >> 16, w & 0xffff)
        }
    }
}

impl InPlace<'_, 24> {
    /// An IPv4 packet `L2` bytes into `frame`, read in place as the fast
    /// path forwards it: IHL 5, the transport header's first 4 bytes right
    /// after the fixed header, within the packet (the first fragment or
    /// none, a total length of 24 or more). A frame whose first byte is not
    /// 0x45, or whose total length the frame does not hold, gets a verdict
    /// that is never used: the fast path refuses it, and the full stages
    /// judge it again. Other fragments and shorter packets: `None`.
    #[inline(always)]
    fn v4<const L2: usize>(frame: &[u8]) -> Option<InPlace<'_, 24>> {
        let h = frame.get(L2..)?.first_chunk::<24>()?;
        if u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0 || u16::from_be_bytes([h[2], h[3]]) < 24 {
            return None;
        }
        Some(InPlace {
            h,
            pcp: pcp_of(frame, L2),
        })
    }
}

impl InPlace<'_, 44> {
    /// An IPv6 packet `L2` bytes into `frame` whose next header is its
    /// transport header, holding that header's first 4 bytes; one with
    /// extension headers, or shorter: `None`.
    #[inline(always)]
    fn v6<const L2: usize>(frame: &[u8]) -> Option<InPlace<'_, 44>> {
        let h = frame.get(L2..)?.first_chunk::<44>()?;
        if matches!(h[6], 0 | 43 | 44 | 51 | 60) || u16::from_be_bytes([h[4], h[5]]) < 4 {
            return None;
        }
        Some(InPlace {
            h,
            pcp: pcp_of(frame, L2),
        })
    }
}

impl<const N: usize> InPlace<'_, N> {
    /// All of its fields, for a memo miss: the transport header's as
    /// [`l4_of`] reads them.
    #[inline(always)]
    fn fields<K: Field>(&self) -> Fields<K>
    where
        Self: Header<K>,
    {
        let protocol = self.h[K::PROTOCOL_AT];
        let l4 = l4_of(protocol, self.h.get(Self::L3..)).unwrap_or(None);
        Fields::of((self.src(), self.dst()), protocol, l4, self.pcp)
    }
}

impl<K: Field, const N: usize> Header<K> for InPlace<'_, N> {
    #[inline(always)]
    fn src(&self) -> K {
        K::read(&self.h[K::SRC_AT..])
    }
    #[inline(always)]
    fn dst(&self) -> K {
        K::read(&self.h[K::DST_AT..])
    }
    #[inline(always)]
    fn protocol(&self) -> u8 {
        self.h[K::PROTOCOL_AT]
    }
    #[inline(always)]
    fn pcp(&self) -> u8 {
        self.pcp
    }
    #[inline(always)]
    fn ports(&self, icmp: bool) -> (u32, u32) {
        self.transport(icmp)
    }
}

/// What a memo entry holds: 0 for no rule, else the rule's index + 1.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Answer(usize);

impl Answer {
    /// The rule that matched, by index.
    fn rule(self) -> Option<usize> {
        self.0.checked_sub(1)
    }
}

/// What a classifier reads of one packet ([`PacketKey`]'s fields, the
/// addresses as `K`).
#[derive(Clone, Copy)]
struct Fields<K> {
    src: K,
    dst: K,
    protocol: u8,
    l4: Option<(u16, u16)>,
    pcp: u8,
}

impl<K> Fields<K> {
    #[inline(always)]
    fn of((src, dst): (K, K), protocol: u8, l4: Option<(u16, u16)>, pcp: u8) -> Fields<K> {
        Fields {
            src,
            dst,
            protocol,
            l4,
            pcp,
        }
    }
}

/// A rule list built for the workers: what an interface's `filter_in`
/// and `filter_out` point at. Replacing a list builds a new one, whose
/// counters start at zero.
pub struct Filter {
    built: Arc<Built>,
    /// Per worker, a row of `stride` counters: each rule's, then the
    /// default's (rows apart by whole cache lines).
    hits: Box<[Cell]>,
    stride: usize,
    /// Per worker, a row of [`MEMO`] remembered answers of each family's
    /// classifier (empty when its classes do not fit a memo key).
    memo4: Box<[AtomicU64]>,
    memo6: Box<[AtomicU64]>,
}

struct Built {
    spec: FilterSpec,
    v4: Classifier<u32>,
    v6: Classifier<u128>,
    /// Each rule's verdict, then the default's.
    verdicts: Box<[Verdict]>,
    /// Some rule names a protocol: a packet whose transport header cannot
    /// be read is denied.
    protocols: bool,
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("name", &self.built.spec.name)
            .field("rules", &self.built.spec.rules.len())
            .finish()
    }
}

impl FilterSpec {
    /// What is wrong with the list, if anything.
    pub fn check(&self) -> Result<(), FilterError> {
        if self.rules.len() > MAX_RULES {
            return Err(FilterError::TooManyRules {
                filter: self.name.clone(),
                rules: self.rules.len(),
            });
        }
        for (i, r) in self.rules.iter().enumerate() {
            if let Some(reason) = r.problem() {
                return Err(FilterError::Rule {
                    filter: self.name.clone(),
                    rule: i + 1,
                    reason,
                });
            }
        }
        Ok(())
    }
}

impl Filter {
    /// Builds `spec` with counters for `workers` workers.
    pub fn build(spec: &FilterSpec, workers: usize) -> Result<Filter, FilterError> {
        spec.check()?;
        let built = Built {
            spec: spec.clone(),
            v4: Classifier::build(&spec.rules, |p| match p {
                IpPrefix::V4(p) => Some(range4(p.addr(), p.len())),
                IpPrefix::V6(_) => None,
            }),
            v6: Classifier::build(&spec.rules, |p| match p {
                IpPrefix::V6(p) => Some(range6(p.addr(), p.len())),
                IpPrefix::V4(_) => None,
            }),
            protocols: spec.rules.iter().any(|r| r.protocol.is_some()),
            verdicts: (spec.rules.iter().map(|r| r.action))
                .chain([spec.default])
                .enumerate()
                .map(|(at, a)| Verdict::new(at, a))
                .collect(),
        };
        Ok(Filter::with_counters(Arc::new(built), workers))
    }

    fn with_counters(built: Arc<Built>, workers: usize) -> Filter {
        let stride = built.verdicts.len().next_multiple_of(8);
        let workers = workers.max(1);
        let memo = |on: bool| -> Box<[AtomicU64]> {
            let n = if on { MEMO * workers } else { 0 };
            (0..n).map(|_| AtomicU64::new(MEMO_EMPTY)).collect()
        };
        Filter {
            hits: (0..stride * workers).map(|_| Cell::default()).collect(),
            memo4: memo(built.v4.key_bits.is_some()),
            memo6: memo(built.v6.key_bits.is_some()),
            built,
            stride,
        }
    }

    /// Worker `worker`'s memo row in `memo`, if it has one.
    #[inline(always)]
    fn memo(memo: &[AtomicU64], worker: usize) -> Option<&[AtomicU64]> {
        memo.get(worker * MEMO..(worker + 1) * MEMO)
    }

    /// The same list with counters for `workers` workers, the counts so
    /// far carried over (summed into the first row).
    pub fn for_workers(&self, workers: usize) -> Filter {
        let f = Filter::with_counters(self.built.clone(), workers);
        for (i, n) in self.hits().into_iter().enumerate() {
            if let Some(c) = f.hits.get(i) {
                c.add(n);
            }
        }
        f
    }

    /// How many workers it counts for.
    pub fn workers(&self) -> usize {
        self.hits.len() / self.stride
    }

    /// The list it was built from.
    pub fn spec(&self) -> &FilterSpec {
        &self.built.spec
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.built.spec.name
    }

    /// What each rule matched, then what took the default, summed over
    /// the workers.
    pub fn hits(&self) -> Vec<u64> {
        let n = self.built.verdicts.len();
        let mut sum = vec![0u64; n];
        for row in self.hits.chunks(self.stride) {
            for (s, c) in sum.iter_mut().zip(row) {
                *s += c.get();
            }
        }
        sum
    }

    /// [`Filter::first_match`] through worker `worker`'s memo, as the
    /// workers classify.
    pub fn first_match_in(&self, worker: usize, key: &PacketKey) -> Option<usize> {
        self.lookup(key, Some(worker))
    }

    /// The first rule that matches `key` (by index), or `None` for the
    /// default; counts nothing.
    pub fn first_match(&self, key: &PacketKey) -> Option<usize> {
        self.lookup(key, None)
    }

    fn lookup(&self, key: &PacketKey, worker: Option<usize>) -> Option<usize> {
        let memo = |m| worker.and_then(|w| Filter::memo(m, w));
        match (key.src, key.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.built.v4.first(
                (u32::from(s), u32::from(d)),
                key.protocol,
                key.l4,
                key.pcp,
                memo(&self.memo4),
            ),
            (IpAddr::V6(s), IpAddr::V6(d)) => self.built.v6.first(
                (u128::from(s), u128::from(d)),
                key.protocol,
                key.l4,
                key.pcp,
                memo(&self.memo6),
            ),
            _ => None,
        }
    }

    /// Whether IPv4 packet `ip` (header to end, no padding), received with
    /// VLAN priority `pcp`, may pass; counts the rule (or default) that
    /// decided, in worker `worker`'s row. A header cut short is refused.
    #[inline]
    pub(crate) fn permits4(&self, worker: usize, ip: &[u8], pcp: u8) -> bool {
        let Some((h, rest)) = ip.split_first_chunk::<20>() else {
            return false;
        };
        let v = self.judge4(worker, h, rest, pcp);
        self.count(worker, v);
        v.permit()
    }

    /// [`Filter::permits4`] for IPv6 packet `ip`; `nd` as for
    /// [`Filter::judge6`].
    #[inline]
    pub(crate) fn permits6(&self, worker: usize, ip: &[u8], pcp: u8, nd: bool) -> bool {
        let Some((h, rest)) = ip.split_first_chunk::<40>() else {
            return false;
        };
        let v = self.judge6(worker, h, rest, pcp, nd);
        self.count(worker, v);
        v.permit()
    }

    /// The verdict on the IPv4 packet whose fixed header is `h`, followed
    /// by `rest` (options, then the transport header), counting nothing.
    #[inline(always)]
    pub(crate) fn judge4(&self, worker: usize, h: &[u8; 20], rest: &[u8], pcp: u8) -> Verdict {
        let options = usize::from(h[0] & 0x0f).saturating_sub(5) * 4;
        let protocol = h[9];
        // A fragment other than the first carries no transport header.
        let first = u16::from_be_bytes([h[6], h[7]]) & 0x1fff == 0;
        let l4 = if first {
            match l4_of(protocol, rest.get(options..)) {
                Ok(l4) => l4,
                Err(Cut) if self.built.protocols => return self.cut(),
                Err(Cut) => None,
            }
        } else {
            None
        };
        let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        let dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
        let memo = Filter::memo(&self.memo4, worker);
        self.decide(self.built.v4.first((src, dst), protocol, l4, pcp, memo))
    }

    /// [`Filter::judge4`] for IPv6. With `nd`, neighbor discovery
    /// (ICMPv6 133–137 with hop limit 255) passes, uncounted, as RFC 4890
    /// §4.4.1 asks, without it no neighbor on the link is reachable; the
    /// caller sets it only for a list on what enters, and a packet for the
    /// router or its link.
    #[inline(always)]
    pub(crate) fn judge6(
        &self,
        worker: usize,
        h: &[u8; 40],
        rest: &[u8],
        pcp: u8,
        nd: bool,
    ) -> Verdict {
        let (protocol, l4) = upper6(h[6], rest);
        let l4 = match l4 {
            Ok(l4) => l4,
            Err(Cut) if self.built.protocols => return self.cut(),
            Err(Cut) => None,
        };
        if nd && h[7] == 255 && protocol == 58 && l4.is_some_and(|(t, _)| (133..=137).contains(&t))
        {
            return Verdict(Verdict::PERMIT | Verdict::UNCOUNTED);
        }
        let addr = |at: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&h[at..at + 16]);
            u128::from_be_bytes(a)
        };
        let memo = Filter::memo(&self.memo6, worker);
        self.decide(
            self.built
                .v6
                .first((addr(8), addr(24)), protocol, l4, pcp, memo),
        )
    }

    /// [`Filter::judge4`] on each frame of a plain burst, IPv4 headers `L2`
    /// bytes in, into `out`, counting nothing: the input list of the
    /// burst's interface, asked for every frame in one pass before the fast
    /// path. The verdict is [`Filter::judge4`]'s for every frame the fast
    /// path can forward; a frame it cannot (its header or total length the
    /// frame does not hold, IHL other than 5) may get another, or
    /// [`Verdict::REFUSED`], which the fast path never uses: the full
    /// stages judge such a frame again. Returns how many frames come
    /// before the first denied.
    pub(crate) fn judge4_burst<const L2: usize>(
        &self,
        worker: usize,
        rx: &[Mbuf],
        out: &mut [Verdict],
    ) -> usize {
        let general = |frame: &[u8]| {
            frame
                .get(L2..)
                .and_then(|ip| {
                    let (h, after) = ip.split_first_chunk::<20>()?;
                    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
                    let rest = after.get(..total.checked_sub(20)?)?;
                    Some(self.judge4(worker, h, rest, pcp_of(frame, L2)))
                })
                .unwrap_or(Verdict::REFUSED)
        };
        self.judge_each(
            (&self.built.v4, &self.memo4, worker),
            (rx, out),
            InPlace::v4::<L2>,
            general,
        )
    }

    /// [`Filter::judge4_burst`] for IPv6 (forwarded frames: neighbor
    /// discovery is not let through). Read in place: a packet whose next
    /// header is its transport header and holds its first 4 bytes; one
    /// with extension headers, or shorter, goes the general way.
    pub(crate) fn judge6_burst<const L2: usize>(
        &self,
        worker: usize,
        rx: &[Mbuf],
        out: &mut [Verdict],
    ) -> usize {
        let general = |frame: &[u8]| {
            frame
                .get(L2..)
                .and_then(|ip| {
                    let (h, after) = ip.split_first_chunk::<40>()?;
                    let rest = after.get(..usize::from(u16::from_be_bytes([h[4], h[5]])))?;
                    Some(self.judge6(worker, h, rest, pcp_of(frame, L2), false))
                })
                .unwrap_or(Verdict::REFUSED)
        };
        self.judge_each(
            (&self.built.v6, &self.memo6, worker),
            (rx, out),
            InPlace::v6::<L2>,
            general,
        )
    }

    /// The burst pass of one family's classifier `c`, through worker
    /// `worker`'s row of `memo`: each frame `read` reads in place is judged
    /// by its key, the others (and every frame when the classes do not fit
    /// a key) by `general`. Frames of a burst often share their classes,
    /// and so their key: the last key's verdict is kept at hand (no key is
    /// all ones). Returns how many frames come before the first denied.
    #[inline(always)]
    fn judge_each<'m, K: Field, const N: usize>(
        &self,
        (c, memo, worker): (&Classifier<K>, &[AtomicU64], usize),
        (rx, out): (&'m [Mbuf], &mut [Verdict]),
        read: impl Fn(&'m [u8]) -> Option<InPlace<'m, N>>,
        general: impl Fn(&[u8]) -> Verdict,
    ) -> usize {
        // Whether a frame was denied: only then are the verdicts searched
        // for the first.
        let mut denied = false;
        if let Some(memo) = Filter::memo(memo, worker).filter(|_| c.key_bits.is_some()) {
            let (mut last_key, mut last) = (u64::MAX, Verdict::REFUSED);
            for (m, v) in rx.iter().zip(out.iter_mut()) {
                let frame = m.data();
                let Some(r) = read(frame) else {
                    *v = general(frame);
                    denied |= !v.permit();
                    continue;
                };
                let key = c.plan_key(&r);
                if key != last_key {
                    let a = Classifier::<K>::recall(memo, key)
                        .unwrap_or_else(|entry| c.remember(entry, key, r.fields()));
                    (last_key, last) = (key, self.answer(a));
                    denied |= !last.permit();
                }
                *v = last;
            }
        } else {
            for (m, v) in rx.iter().zip(out.iter_mut()) {
                *v = general(m.data());
                denied |= !v.permit();
            }
        }
        let n = rx.len().min(out.len());
        if denied {
            out[..n].iter().position(|v| !v.permit()).unwrap_or(n)
        } else {
            n
        }
    }

    /// Counts each of `verdicts` in worker `worker`'s row, a run of equal
    /// verdicts in one add.
    pub(crate) fn count_each(&self, worker: usize, verdicts: &[Verdict]) {
        // Most bursts are one run: a count without a branch a frame says so.
        let Some(&first) = verdicts.first() else {
            return;
        };
        let same = verdicts
            .iter()
            .fold(0u32, |n, &v| n + u32::from(v.0 == first.0));
        if same as usize == verdicts.len() {
            let at = (first.0 & Verdict::UNCOUNTED) as usize;
            if let Some(c) = self.hits.get(worker * self.stride + at) {
                c.add(u64::from(same));
            }
            return;
        }
        for run in verdicts.chunk_by(|a, b| a == b) {
            let at = (run[0].0 & Verdict::UNCOUNTED) as usize;
            if let Some(c) = self.hits.get(worker * self.stride + at) {
                c.add(run.len() as u64);
            }
        }
    }

    /// The verdict on a packet whose transport header cannot be read, for a
    /// list that looks at protocols: denied, counted with the default.
    #[cold]
    fn cut(&self) -> Verdict {
        Verdict::new(self.built.spec.rules.len(), Action::Deny)
    }

    /// The verdict of memo answer `a`.
    #[inline(always)]
    fn answer(&self, a: Answer) -> Verdict {
        let v = &self.built.verdicts;
        match v.get(a.0.wrapping_sub(1)) {
            Some(&verdict) => verdict,
            None => self.decide(None),
        }
    }

    #[inline(always)]
    fn decide(&self, rule: Option<usize>) -> Verdict {
        let v = &self.built.verdicts;
        rule.and_then(|r| v.get(r))
            .or(v.last())
            .copied()
            .unwrap_or(Verdict(Verdict::PERMIT | Verdict::UNCOUNTED))
    }

    /// Counts verdict `v` in worker `worker`'s row.
    #[inline]
    pub(crate) fn count(&self, worker: usize, v: Verdict) {
        let at = (v.0 & Verdict::UNCOUNTED) as usize;
        if let Some(c) = self.hits.get(worker * self.stride + at) {
            c.inc();
        }
    }
}

/// What a list decided about one packet, in one word: whether it lets
/// the packet through (the top bit), and the entry that matched (a rule,
/// or the default after the last rule; [`Verdict::UNCOUNTED`] for what
/// always passes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict(u32);

impl Verdict {
    const PERMIT: u32 = 1 << 31;
    const UNCOUNTED: u32 = Verdict::PERMIT - 1;
    /// A denial that no entry made, never counted: for a frame a list
    /// could not be asked about.
    pub(crate) const REFUSED: Verdict = Verdict(Verdict::UNCOUNTED);

    fn new(at: usize, action: Action) -> Verdict {
        let permit = if action == Action::Permit {
            Verdict::PERMIT
        } else {
            0
        };
        Verdict(permit | at as u32)
    }

    /// Whether it lets the packet through.
    #[inline(always)]
    pub(crate) fn permit(self) -> bool {
        self.0 & Verdict::PERMIT != 0
    }

    /// The entry that decided: a rule's index, the rule count for the
    /// default, or [`Verdict::UNCOUNTED`] for what always passes.
    pub(crate) fn entry(self) -> u32 {
        self.0 & !Verdict::PERMIT
    }
}

/// The VLAN priority of a frame whose L3 header starts `l3_off` bytes in:
/// its outer tag's PCP, 0 untagged.
#[inline(always)]
pub(crate) fn pcp_of(frame: &[u8], l3_off: usize) -> u8 {
    if l3_off >= 18 {
        frame.get(14).map_or(0, |b| b >> 5)
    } else {
        0
    }
}

#[cfg(test)]
mod tests;

/// IP protocols a rule may name, by the names of the IANA registry that
/// operators use.
pub const PROTOCOL_NAMES: [(&str, u8); 12] = [
    ("icmp", 1),
    ("igmp", 2),
    ("tcp", 6),
    ("udp", 17),
    ("gre", 47),
    ("esp", 50),
    ("ah", 51),
    ("icmpv6", 58),
    ("ospf", 89),
    ("pim", 103),
    ("vrrp", 112),
    ("sctp", 132),
];

/// The number of protocol `name` ([`PROTOCOL_NAMES`], or a number 0–255).
pub fn protocol_number(name: &str) -> Option<u8> {
    PROTOCOL_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, p)| p)
        .or_else(|| name.parse().ok())
}

/// The name of protocol `p` if it has one of [`PROTOCOL_NAMES`].
pub fn protocol_name(p: u8) -> Option<&'static str> {
    PROTOCOL_NAMES
        .iter()
        .find(|&&(_, n)| n == p)
        .map(|&(name, _)| name)
}

impl std::str::FromStr for PortRange {
    type Err = &'static str;
    /// `PORT` or `FIRST-LAST`.
    fn from_str(s: &str) -> Result<PortRange, &'static str> {
        let port = |t: &str| t.trim().parse::<u16>().map_err(|_| "not a port (0-65535)");
        let r = match s.split_once('-') {
            Some((lo, hi)) => PortRange {
                lo: port(lo)?,
                hi: port(hi)?,
            },
            None => PortRange::one(port(s)?),
        };
        if r.lo > r.hi {
            return Err("the first port is above the last");
        }
        Ok(r)
    }
}
