//! Multipath: which gateway of a group a packet leaves by.
//!
//! ```text
//!   packet ── flow hash ─────────────────────────────▶ u32
//!             IPv4: source, destination, protocol,
//!                   TCP/UDP/SCTP ports (unfragmented)
//!             IPv6: the same, plus the flow label
//!   top 9 bits ── the group's 512 buckets ──────────▶ a gateway's next-hop id
//! ```
//!
//! The same flow always hashes alike, in the fast path and in the full
//! stages (both read the same fields through [`flow4`] / [`flow6`]), so it
//! always leaves by the same gateway. A fragment hashes without ports, so
//! all of a datagram's fragments go one way (though not necessarily the
//! way its unfragmented packets go).
//!
//! Bucket tables are built by rendezvous hashing ([`buckets`]): each bucket
//! goes to the gateway with the highest weighted score for that bucket.
//! The score depends only on the bucket and the gateway's address, so
//! removing a gateway moves only its own buckets, and adding one takes
//! buckets only for itself: flows through the other gateways stay where
//! they are (resilient hashing, without state carried between groups).

use std::net::IpAddr;

const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const K3: u64 = 0xD6E8_FEB8_6659_FD93;

/// One word into the running hash.
#[inline(always)]
fn fold(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(K1).rotate_left(31)
}

/// The finished hash, its top bits mixed from every input bit.
#[inline(always)]
fn finish(h: u64) -> u32 {
    let h = (h ^ (h >> 29)).wrapping_mul(K2);
    let h = (h ^ (h >> 32)).wrapping_mul(K3);
    (h >> 32) as u32
}

/// Protocols whose first four payload bytes are the source and destination
/// ports: TCP, UDP, SCTP, UDP-Lite.
#[inline(always)]
fn has_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 132 | 136)
}

/// The flow hash of an IPv4 packet: addresses, protocol and, for an
/// unfragmented TCP/UDP/SCTP packet, the ports. `l4` is what follows the
/// header (whatever its length: the ports are used only when present).
#[inline]
pub(crate) fn flow4(header: &[u8; 20], l4: &[u8]) -> u32 {
    let src = u32::from_be_bytes([header[12], header[13], header[14], header[15]]);
    let dst = u32::from_be_bytes([header[16], header[17], header[18], header[19]]);
    let proto = header[9];
    // MF set or a fragment offset: no ports (a later fragment has none).
    let fragment = header[6] & 0x3f != 0 || header[7] != 0;
    let ports = match l4.first_chunk::<4>() {
        Some(p) if has_ports(proto) && !fragment => u32::from_be_bytes(*p),
        _ => 0,
    };
    let h = fold(K3, u64::from(src) << 32 | u64::from(dst));
    finish(fold(h, u64::from(proto) << 32 | u64::from(ports)))
}

/// [`flow4`] of an IPv4 packet from its first byte (any IHL): for the
/// full stages. A packet too short to hash hashes as 0.
pub(crate) fn flow4_of(l3: &[u8]) -> u32 {
    let Some(header) = l3.first_chunk::<20>() else {
        return 0;
    };
    let ihl = usize::from(header[0] & 0x0f) * 4;
    flow4(header, l3.get(ihl.max(20)..).unwrap_or(&[]))
}

/// The flow hash of an IPv6 packet: addresses, next header, the flow label
/// and, when the next header is TCP/UDP/SCTP, the ports. `l4` is what
/// follows the fixed header.
#[inline]
pub(crate) fn flow6(header: &[u8; 40], l4: &[u8]) -> u32 {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&header[at..at + 8]);
        u64::from_be_bytes(w)
    };
    let label = u32::from_be_bytes([0, header[1] & 0x0f, header[2], header[3]]);
    let next = header[6];
    let ports = match l4.first_chunk::<4>() {
        Some(p) if has_ports(next) => u32::from_be_bytes(*p),
        _ => 0,
    };
    let mut h = fold(K3, word(8));
    h = fold(h, word(16));
    h = fold(h, word(24));
    h = fold(h, word(32));
    h = fold(h, u64::from(label) << 8 | u64::from(next));
    finish(fold(h, u64::from(ports)))
}

/// [`flow6`] of an IPv6 packet from its first byte, for the full stages.
pub(crate) fn flow6_of(l3: &[u8]) -> u32 {
    match l3.first_chunk::<40>() {
        Some(header) => flow6(header, l3.get(40..).unwrap_or(&[])),
        None => 0,
    }
}

/// The flow hash of whichever family `l3` is (its version nibble), for
/// packets the router builds itself.
pub(crate) fn flow_of(l3: &[u8]) -> u32 {
    match l3.first().map(|b| b >> 4) {
        Some(4) => flow4_of(l3),
        Some(6) => flow6_of(l3),
        _ => 0,
    }
}

/// A gateway's key for rendezvous hashing: its address, so a gateway keeps
/// its buckets in every group it is in, across restarts.
pub(crate) fn addr_key(addr: IpAddr) -> u64 {
    match addr {
        IpAddr::V4(a) => fold(K2, u64::from(u32::from(a))),
        IpAddr::V6(a) => {
            let v = u128::from(a);
            fold(fold(K1, (v >> 64) as u64), v as u64)
        }
    }
}

/// A uniform number in (0, 1) for bucket `bucket` and gateway key `key`.
fn unit(bucket: usize, key: u64) -> f64 {
    let mut z = key ^ (bucket as u64).wrapping_mul(K1);
    // splitmix64's finaliser.
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// The bucket table of a group: `n` buckets, each the id of the member
/// (`(id, key, weight)`) with the highest weighted rendezvous score,
/// `weight / -ln(u)`, which gives each member a share of buckets
/// proportional to its weight.
pub(crate) fn buckets(members: &[(u32, u64, u16)], n: usize) -> Vec<u32> {
    (0..n)
        .map(|b| {
            let mut best = (f64::NEG_INFINITY, u32::MAX);
            for &(id, key, weight) in members {
                let score = f64::from(weight) / -unit(b, key).ln();
                if score > best.0 {
                    best = (score, id);
                }
            }
            best.1
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: u32) -> Vec<(u32, u64, u16)> {
        (0..n)
            .map(|i| (i, addr_key(IpAddr::from([10, 0, 0, i as u8 + 2])), 1))
            .collect()
    }

    #[test]
    fn equal_members_share_the_buckets_within_a_few_percent() {
        for n in [2u32, 3, 4, 8] {
            let t = buckets(&members(n), 512);
            for id in 0..n {
                let share = t.iter().filter(|&&m| m == id).count() as f64 / 512.0;
                let want = 1.0 / f64::from(n);
                assert!(
                    (share - want).abs() < 0.35 * want,
                    "{n} members: member {id} has {share}"
                );
            }
        }
    }

    #[test]
    fn weights_set_the_shares() {
        let mut m = members(2);
        m[1].2 = 3;
        let t = buckets(&m, 512);
        let heavy = t.iter().filter(|&&id| id == 1).count() as f64 / 512.0;
        assert!((heavy - 0.75).abs() < 0.06, "weight 3 of 4 got {heavy}");
    }

    #[test]
    fn removing_a_member_moves_only_its_buckets() {
        let all = members(4);
        let before = buckets(&all, 512);
        let without: Vec<_> = all.iter().copied().filter(|m| m.0 != 2).collect();
        let after = buckets(&without, 512);
        for (b, (old, new)) in before.iter().zip(&after).enumerate() {
            if *old != 2 {
                assert_eq!(old, new, "bucket {b} moved");
            } else {
                assert_ne!(*new, 2);
            }
        }
    }

    #[test]
    fn ports_count_only_when_unfragmented() {
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[9] = 17;
        h[12..16].copy_from_slice(&[10, 0, 0, 1]);
        h[16..20].copy_from_slice(&[10, 0, 1, 1]);
        let a = flow4(&h, &[0, 1, 0, 2]);
        let b = flow4(&h, &[0, 1, 0, 3]);
        assert_ne!(a, b);
        h[6] = 0x20; // MF
        assert_eq!(flow4(&h, &[0, 1, 0, 2]), flow4(&h, &[0, 1, 0, 3]));
        assert_eq!(flow4(&h, &[0, 1, 0, 2]), flow4(&h, &[]));
    }

    #[test]
    fn the_flow_label_counts_in_ipv6() {
        let mut h = [0u8; 40];
        h[0] = 0x60;
        h[6] = 59;
        h[8] = 0x20;
        h[24] = 0x20;
        let a = flow6(&h, &[]);
        h[3] = 1;
        assert_ne!(a, flow6(&h, &[]));
        let mut pkt = h.to_vec();
        pkt.extend([0, 1, 0, 2]);
        assert_eq!(flow6_of(&pkt), flow6(&h, &[0, 1, 0, 2]));
    }
}
