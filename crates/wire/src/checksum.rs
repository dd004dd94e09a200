//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! The checksum is the 16-bit ones' complement of the ones' complement sum
//! of the data taken as big-endian 16-bit words. The helpers split that in
//! three steps so that partial sums (a pseudo-header and a payload, say)
//! can be added before the final fold:
//!
//! ```text
//!   sum(a) + sum(b) + pseudo_header_v4(..)   partial sums, u32
//!          |
//!        fold                                 end-around carries, u16
//!          |
//!          !                                  ones' complement = checksum
//! ```

use core::net::{Ipv4Addr, Ipv6Addr};

/// Ones' complement partial sum of `data` as big-endian 16-bit words
/// (RFC 1071 §4.1). An odd trailing byte is padded with a zero byte on the
/// right, as RFC 1071 §4.1 and RFC 768 require.
///
/// The result is already folded to at most `0xffff`, so a caller may add up
/// to 65536 partial sums in a `u32` before calling [`fold`]. Only the last
/// of several concatenated pieces may have odd length: the padding byte
/// would otherwise shift every following word.
pub fn sum(data: &[u8]) -> u32 {
    let mut acc = native_sum(data);
    // Fold the 64-bit accumulator down to 16 bits with end-around carries,
    // in a fixed number of steps (at most 2^33, then 0x2fffe, which fits
    // [`fold`]): a loop until it fits would run a data-dependent number of
    // times, and its mispredicted exit cost the forwarding path more than
    // the whole sum. A step on a value that already fits changes nothing.
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff) + (acc >> 16);
    let folded = fold(acc as u32);
    // The native-order sum's bytes, read big-endian. Byte-swapping keeps
    // both of ones' complement's special values: 0 (only an all-zero sum)
    // and 0xffff.
    u32::from(u16::from_be_bytes(folded.to_ne_bytes()))
}

/// Whether `data` verifies: its ones' complement sum is all ones, that is
/// `fold(sum(data)) == 0xffff`, as for a header with its checksum in place
/// (RFC 1071 §1).
///
/// Decided without folding: the folded sum is the plain sum of the words
/// modulo `0xffff` (with `0xffff` standing for a nonzero multiple), so it
/// is all ones exactly when the plain sum is a nonzero multiple of
/// `0xffff`. That holds for the native-order words too: a byte swap
/// multiplies a word by 256 modulo `0xffff`, and 256 is prime to `0xffff`.
/// The multiple is tested with one multiplication and one comparison
/// (`x` is a multiple of an odd `d` exactly when `x · d⁻¹ mod 2⁶⁴ ≤
/// ⌊(2⁶⁴ − 1) / d⌋`: Hacker's Delight, "Test for zero remainder after
/// division by a constant"), where folding takes
/// a dozen dependent steps; the forwarding fast path runs this on every
/// header.
#[inline]
pub fn verifies(data: &[u8]) -> bool {
    let acc = native_sum(data);
    acc != 0 && acc.wrapping_mul(INVERSE_FFFF) <= u64::MAX / 0xffff
}

/// The inverse of `0xffff` modulo 2⁶⁴, by Newton's iteration (each step
/// doubles the correct low bits; `0xffff` is its own inverse modulo 2³,
/// and six steps reach 2⁶⁴).
const INVERSE_FFFF: u64 = {
    let d: u64 = 0xffff;
    let mut x = d;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(d.wrapping_mul(x)));
        i += 1;
    }
    assert!(d.wrapping_mul(x) == 1);
    x
};

/// The sum of `data` as native-order 32-bit words (RFC 1071 §2 (B)), an
/// odd trailing byte padded with a zero on the right, unfolded.
#[inline]
fn native_sum(data: &[u8]) -> u64 {
    // Adding 32-bit words is the same as adding their two 16-bit halves,
    // because 2^16 = 1 in ones' complement (mod 0xffff) arithmetic, and the
    // sum of byte-swapped words is the byte-swapped sum (RFC 1071 §2 (B),
    // byte-order and word-size independence). So the words are added in
    // native order, with no swap each, and the folded sum is swapped once.
    // A u64 accumulator cannot overflow for any slice that fits in memory
    // long before 2^32 words.
    let mut acc: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    let mut rest = words.remainder();
    if rest.len() >= 2 {
        acc += u64::from(u16::from_ne_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
    }
    if let Some(&last) = rest.first() {
        acc += u64::from(u16::from_ne_bytes([last, 0]));
    }
    acc
}

/// Folds the carries of a partial sum back into the low 16 bits (RFC 1071
/// §4.1, "fold 32-bit sum to 16 bits"). The result is **not** complemented.
///
/// A nonzero sum never folds to `0x0000`; it folds to `0xffff` when it is a
/// multiple of `0xffff` (ones' complement "negative zero").
pub fn fold(sum: u32) -> u16 {
    // Two fixed steps (at most 0x1fffe, then 0xffff): no loop whose exit
    // depends on the data (see [`sum`]).
    let s = (sum & 0xffff) + (sum >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The Internet checksum of `data`: `!fold(sum(data))`.
///
/// Writing this value into a zeroed checksum field makes [`sum`] over the
/// whole data fold to `0xffff`, which is how receivers verify it.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// Partial sum of the IPv4 pseudo-header used by TCP and UDP (RFC 793 §3.1,
/// RFC 768): source, destination, zero byte, protocol, upper-layer length.
pub fn pseudo_header_v4(src: &Ipv4Addr, dst: &Ipv4Addr, proto: u8, len: u32) -> u32 {
    sum(&src.octets()) + sum(&dst.octets()) + u32::from(proto) + (len >> 16) + (len & 0xffff)
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 §8.1): source,
/// destination, 32-bit upper-layer packet length, three zero bytes and the
/// next header value of the upper-layer protocol.
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, len: u32) -> u32 {
    sum(&src.octets()) + sum(&dst.octets()) + u32::from(next_header) + (len >> 16) + (len & 0xffff)
}

/// Incrementally updates a checksum after one 16-bit word changed from
/// `old_word` to `new_word`, following RFC 1624 §3, eqn. 3:
///
/// ```text
///   HC' = ~(~HC + ~m + m')
/// ```
///
/// Eqn. 3 (rather than RFC 1141's eqn. 2, `HC' = HC - ~m - m'`) is what
/// RFC 1624 §4 recommends: it yields `0x0000`, never `0xffff`, when the new
/// header sums to ones' complement negative zero, which is exactly what a
/// full recomputation gives.
pub fn update_u16(old_checksum: u16, old_word: u16, new_word: u16) -> u16 {
    let s = u32::from(!old_checksum) + u32::from(!old_word) + u32::from(new_word);
    !fold(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn verifies_corner_sums() {
        // All zeros sums to ones' complement +0, not all ones.
        assert!(!verifies(&[]));
        assert!(!verifies(&[0; 20]));
        // Nonzero multiples of 0xffff are all ones, however many.
        assert!(verifies(&[0xff, 0xff]));
        assert!(verifies(&[0xff; 20]));
        assert!(verifies(&[0xff, 0xfe, 0x00, 0x01]));
        // An odd trailing byte pads on the right: 0xff00 + 0x00ff.
        assert!(verifies(&[0x00, 0xff, 0xff]));
        assert!(!verifies(&[0xff, 0xff, 0x01]));
    }

    /// A plain word-by-word reference implementation of RFC 1071.
    fn naive_sum(data: &[u8]) -> u32 {
        let mut s: u32 = 0;
        for pair in data.chunks(2) {
            let w = if pair.len() == 2 {
                u16::from_be_bytes([pair[0], pair[1]])
            } else {
                u16::from_be_bytes([pair[0], 0])
            };
            s = u32::from(fold(s + u32::from(w)));
        }
        s
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 worked example: the bytes 00 01 f2 03 f4 f5 f6 f7
        // sum to 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_is_right_padded() {
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x01, 0x02, 0x03]), 0x0102 + 0x0300);
        assert_eq!(sum(&[]), 0);
        assert_eq!(checksum(&[]), 0xffff);
    }

    #[test]
    fn fold_never_turns_nonzero_into_zero() {
        assert_eq!(fold(0), 0);
        assert_eq!(fold(0xffff), 0xffff);
        assert_eq!(fold(0x1_fffe), 0xffff);
        assert_eq!(fold(0xffff_ffff), 0xffff);
        assert_eq!(fold(0x1_0000), 1);
    }

    #[test]
    fn known_ipv4_header_checksum() {
        // A captured header with checksum 0xb861 (the classic Wikipedia
        // example, 192.168.0.1 -> 192.168.0.199, UDP).
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(fold(sum(&hdr)), 0xffff);
        hdr[10] = 0;
        hdr[11] = 0;
        assert_eq!(checksum(&hdr), 0xb861);
    }

    #[test]
    fn pseudo_headers() {
        let s4 = Ipv4Addr::new(10, 0, 0, 1);
        let d4 = Ipv4Addr::new(10, 0, 0, 2);
        let mut ph4 = [0u8; 12];
        ph4[0..4].copy_from_slice(&s4.octets());
        ph4[4..8].copy_from_slice(&d4.octets());
        ph4[9] = 17;
        ph4[10..12].copy_from_slice(&1234u16.to_be_bytes());
        assert_eq!(fold(pseudo_header_v4(&s4, &d4, 17, 1234)), fold(sum(&ph4)));

        let s6: Ipv6Addr = "fe80::1".parse().unwrap();
        let d6: Ipv6Addr = "ff02::1:ff00:2".parse().unwrap();
        let mut ph6 = [0u8; 40];
        ph6[0..16].copy_from_slice(&s6.octets());
        ph6[16..32].copy_from_slice(&d6.octets());
        ph6[32..36].copy_from_slice(&0x0001_0020u32.to_be_bytes());
        ph6[39] = 58;
        assert_eq!(
            fold(pseudo_header_v6(&s6, &d6, 58, 0x0001_0020)),
            fold(sum(&ph6))
        );
    }

    #[test]
    fn rfc1624_section4_example() {
        // RFC 1624 §4: the other header words sum to 0xcd7a, a word changes
        // from 0x5555 to 0x3285. HC = 0xdd2f and the correct new checksum
        // is 0x0000 (eqn. 2 would wrongly give 0xffff).
        assert_eq!(!fold(0xcd7a + 0x5555), 0xdd2f);
        assert_eq!(update_u16(0xdd2f, 0x5555, 0x3285), 0x0000);
        assert_eq!(!fold(0xcd7a + 0x3285), 0x0000);
    }

    /// A valid-looking IPv4 header template, checksum field zeroed.
    fn header(ttl: u8, proto: u8, ident: u16) -> [u8; 20] {
        let mut h = [
            0x45, 0x00, 0x00, 0x54, 0x00, 0x00, 0x40, 0x00, ttl, proto, 0x00, 0x00, 0xc0, 0x00,
            0x02, 0x01, 0xc6, 0x33, 0x64, 0x07,
        ];
        h[4..6].copy_from_slice(&ident.to_be_bytes());
        h
    }

    fn with_checksum(mut h: [u8; 20]) -> [u8; 20] {
        h[10] = 0;
        h[11] = 0;
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    /// Decrements the TTL with RFC 1624 eqn. 3 and checks the result
    /// against a full recomputation.
    fn check_decrement(h: [u8; 20]) {
        let h = with_checksum(h);
        let old_word = u16::from_be_bytes([h[8], h[9]]);
        let old_csum = u16::from_be_bytes([h[10], h[11]]);
        let mut n = h;
        n[8] -= 1;
        let new_word = u16::from_be_bytes([n[8], n[9]]);
        let incremental = update_u16(old_csum, old_word, new_word);
        let full = with_checksum(n);
        assert_eq!(
            incremental,
            u16::from_be_bytes([full[10], full[11]]),
            "header {h:02x?}"
        );
    }

    /// Chooses the ident so that the header with the given TTL has checksum
    /// `0x0000`, i.e. the rest of the header sums to negative zero.
    fn ident_for_zero_checksum(ttl: u8, proto: u8) -> u16 {
        let s = fold(sum(&header(ttl, proto, 0)));
        0xffff - s
    }

    #[test]
    fn ttl_decrement_exhaustive() {
        for ttl in 1..=255u8 {
            for proto in 0..=255u8 {
                check_decrement(header(ttl, proto, 0x1c46));
                // RFC 1624 corner cases: the checksum is 0x0000 before the
                // update, and it becomes 0x0000 after the update.
                let before = ident_for_zero_checksum(ttl, proto);
                assert_eq!(
                    u16::from_be_bytes(
                        with_checksum(header(ttl, proto, before))[10..12]
                            .try_into()
                            .unwrap()
                    ),
                    0
                );
                check_decrement(header(ttl, proto, before));
                let after = ident_for_zero_checksum(ttl - 1, proto);
                check_decrement(header(ttl, proto, after));
            }
        }
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn sum_matches_naive(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(fold(sum(&data)), fold(naive_sum(&data)));
        }

        #[test]
        fn verifies_is_folding_to_all_ones(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            at in any::<prop::sample::Index>(),
            corrupt in any::<Option<(prop::sample::Index, u8)>>(),
        ) {
            // Random data, and the same data with a checksum written into an
            // even-aligned zeroed word so that it verifies, then perhaps one
            // byte changed: each must agree with the fold.
            prop_assert_eq!(verifies(&data), fold(sum(&data)) == 0xffff);
            let mut with = data.clone();
            let at = at.index(with.len() / 2 + 1) * 2;
            with.splice(at..at, [0, 0]);
            let c = checksum(&with).to_be_bytes();
            with[at..at + 2].copy_from_slice(&c);
            prop_assert!(verifies(&with));
            prop_assert_eq!(fold(sum(&with)), 0xffff);
            if let Some((i, b)) = corrupt {
                let i = i.index(with.len());
                with[i] ^= b;
                prop_assert_eq!(verifies(&with), fold(sum(&with)) == 0xffff);
            }
        }

        #[test]
        fn sum_is_additive_on_even_splits(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            split in any::<prop::sample::Index>(),
        ) {
            let at = split.index(data.len() + 1) & !1;
            let (a, b) = data.split_at(at);
            prop_assert_eq!(fold(sum(a) + sum(b)), fold(sum(&data)));
        }

        #[test]
        fn ttl_decrement_random_header(
            mut h in any::<[u8; 20]>(),
            ttl in 1..=255u8,
        ) {
            h[0] = 0x45;
            h[8] = ttl;
            check_decrement(h);
        }

        #[test]
        fn ttl_decrement_random_header_zero_corners(
            mut h in any::<[u8; 20]>(),
            ttl in 1..=255u8,
            after in any::<bool>(),
        ) {
            h[0] = 0x45;
            h[8] = ttl;
            // Force the checksum to 0x0000 before or after the update by
            // choosing the ident word.
            h[4] = 0;
            h[5] = 0;
            h[10] = 0;
            h[11] = 0;
            let mut probe = h;
            if after {
                probe[8] -= 1;
            }
            let ident = 0xffff - fold(sum(&probe));
            h[4..6].copy_from_slice(&ident.to_be_bytes());
            check_decrement(h);
        }

        #[test]
        fn update_matches_recompute_any_word(
            data in any::<[u8; 20]>(),
            word in 0..10usize,
            new_word in any::<u16>(),
        ) {
            let mut d = data;
            d[0] = 0x45;
            let old_c = checksum(&d);
            let old_w = u16::from_be_bytes([d[2 * word], d[2 * word + 1]]);
            d[2 * word..2 * word + 2].copy_from_slice(&new_word.to_be_bytes());
            // Only meaningful when the data cannot sum to true zero, which
            // the version byte guarantees unless word 0 was overwritten.
            prop_assume!(d.iter().any(|&b| b != 0));
            prop_assert_eq!(update_u16(old_c, old_w, new_word), checksum(&d));
        }
    }
}
