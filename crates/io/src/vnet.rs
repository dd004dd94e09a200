//! The virtio-net header (virtio 1.2 §5.1.6, Linux `struct virtio_net_hdr`):
//! ten bytes that `af_packet` with `PACKET_VNET_HDR` and TAP with
//! `IFF_VNET_HDR` put in front of every frame, saying what checksum and
//! segmentation work the sender left to the link. It maps to and from
//! [`Offload`], whose offsets count from the L3 header.
//!
//! ```text
//!  0      1         2       4        6          8           10
//!  flags  gso_type  hdr_len gso_size csum_start csum_offset
//!  (little-endian: the byte order of a legacy header on this host, which is
//!   what the kernel uses for packet sockets, `vio_le()`, and for TAPs,
//!   `tun_is_little_endian()`)
//! ```

use vrhost_dataplane::offload::l2_len;
use vrhost_dataplane::{coalesce, Gso, Mbuf, Offload};

/// Bytes of a header.
pub const LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum from `csum_start` on is partial.
const NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_*`.
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
/// `VIRTIO_NET_HDR_GSO_ECN`: the TCP super-frame has CWR set; cut
/// segments keep it on the first only, which [`vrhost_dataplane::offload`]
/// always does. Sent with a super-frame whose CWR is set, as Linux does
/// (`SKB_GSO_TCP_ECN`), so that a device without ECN-aware TSO leaves the
/// cut to software.
const GSO_ECN: u8 = 0x80;
/// The CWR bit in the TCP flags byte (offset 13).
const CWR: u8 = 0x80;

/// Reads a header received with a frame whose L2 header is `l2` bytes
/// long. `None` for what cannot be carried: UFO (`VIRTIO_NET_HDR_GSO_UDP`,
/// IPv4 fragmentation by the link, which Linux no longer offers), an
/// unknown type, segmentation without a partial checksum, or a checksum
/// start inside the L2 header.
pub fn parse(h: &[u8; LEN], l2: usize) -> Option<Offload> {
    let u16_at = |at: usize| u16::from_le_bytes([h[at], h[at + 1]]);
    let partial = h[0] & NEEDS_CSUM != 0;
    let gso = match h[1] & !GSO_ECN {
        GSO_NONE => Gso::None,
        GSO_TCPV4 => Gso::Tcp4,
        GSO_TCPV6 => Gso::Tcp6,
        GSO_UDP_L4 => Gso::Udp,
        _ => return None,
    };
    let (gso_size, csum_start, csum_offset) = (u16_at(4), u16_at(6), u16_at(8));
    if !partial {
        return (gso == Gso::None).then_some(Offload::NONE);
    }
    let csum_start = csum_start.checked_sub(u16::try_from(l2).ok()?)?;
    Some(Offload {
        partial,
        gso,
        gso_size: if gso == Gso::None { 0 } else { gso_size },
        csum_start,
        csum_offset,
    })
}

/// The header to send with `frame` whose offload state is `off`: all zero
/// for a frame with nothing left to do. `None` when `frame` is too short
/// for its L2 header.
pub fn emit(off: &Offload, frame: &[u8]) -> Option<[u8; LEN]> {
    let mut h = [0u8; LEN];
    if !off.any() {
        return Some(h);
    }
    let l2 = l2_len(frame)?;
    let start = u16::try_from(l2).ok()?.checked_add(off.csum_start)?;
    h[0] = if off.partial { NEEDS_CSUM } else { 0 };
    h[1] = match off.gso {
        Gso::None => GSO_NONE,
        Gso::Tcp4 => GSO_TCPV4,
        Gso::Tcp6 => GSO_TCPV6,
        Gso::Udp => GSO_UDP_L4,
    };
    // hdr_len: every header, so the kernel's linear part holds them all.
    let l4_len = match off.gso {
        Gso::None => 0,
        Gso::Udp => 8,
        Gso::Tcp4 | Gso::Tcp6 => {
            u16::from(frame.get(usize::from(start) + 12).map_or(5, |b| b >> 4)) * 4
        }
    };
    if matches!(off.gso, Gso::Tcp4 | Gso::Tcp6)
        && frame
            .get(usize::from(start) + 13)
            .is_some_and(|f| f & CWR != 0)
    {
        h[1] |= GSO_ECN;
    }
    let hdr_len = if l4_len > 0 { start + l4_len } else { 0 };
    h[2..4].copy_from_slice(&hdr_len.to_le_bytes());
    h[4..6].copy_from_slice(&off.gso_size.to_le_bytes());
    h[6..8].copy_from_slice(&start.to_le_bytes());
    h[8..10].copy_from_slice(&off.csum_offset.to_le_bytes());
    Some(h)
}

/// At most this many buffers leave as one super-frame (a 64 KiB one cut
/// into single segments is 45).
pub(crate) const MAX_JOIN: usize = 64;

/// The gather list of a super-frame joined from `frames` (at most
/// [`MAX_JOIN`], the first's headers already rewritten by
/// [`coalesce::merge_head`]): `header` (the virtio-net header), the first
/// frame whole, then each later frame's payload; the entries past
/// `frames.len() + 1` are empty. The pointers borrow `header` and
/// `frames`, which must outlive the write that uses them.
pub(crate) fn joined_iov(header: &[u8], frames: &[Mbuf]) -> [libc::iovec; MAX_JOIN + 1] {
    let at = |b: &[u8]| libc::iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    };
    let mut iov = [at(&[]); MAX_JOIN + 1];
    iov[0] = at(header);
    let mut parts = frames.iter();
    if let Some(first) = parts.next() {
        iov[1] = at(first.data());
    }
    for (v, m) in iov[2..].iter_mut().zip(parts) {
        *v = at(coalesce::payload(m));
    }
    iov
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tso_header_round_trips_through_offsets_from_l3() {
        // What Linux hands a packet socket for an IPv4 TCP super-frame.
        let h = [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0];
        let off = parse(&h, 14).unwrap();
        assert_eq!(
            off,
            Offload {
                partial: true,
                gso: Gso::Tcp4,
                gso_size: 1448,
                csum_start: 20,
                csum_offset: 16,
            }
        );
        // Sent on a tagged link, the checksum start moves with the tag.
        let mut frame = [0u8; 18 + 40];
        frame[12..14].copy_from_slice(&[0x81, 0x00]);
        frame[16..18].copy_from_slice(&[0x08, 0x00]);
        frame[18 + 20 + 12] = 8 << 4; // a 32-byte TCP header
        let out = emit(&off, &frame).unwrap();
        assert_eq!(out, [1, 1, 70, 0, 0xa8, 0x05, 38, 0, 16, 0]);
        assert_eq!(parse(&out, 18), Some(off));
        // CWR on the super-frame: the ECN bit goes with it, and is read back.
        frame[18 + 20 + 13] = 0x80 | 0x10;
        let out = emit(&off, &frame).unwrap();
        assert_eq!(out[1], 1 | 0x80);
        assert_eq!(parse(&out, 18), Some(off));
    }

    #[test]
    fn what_cannot_be_carried_is_refused() {
        // UFO, an unknown type, GSO without NEEDS_CSUM, a start inside L2.
        assert_eq!(parse(&[1, 3, 0, 0, 0, 0, 34, 0, 6, 0], 14), None);
        assert_eq!(parse(&[1, 9, 0, 0, 0, 0, 34, 0, 6, 0], 14), None);
        assert_eq!(parse(&[0, 1, 0, 0, 0xa8, 5, 0, 0, 0, 0], 14), None);
        assert_eq!(parse(&[1, 0, 0, 0, 0, 0, 10, 0, 6, 0], 14), None);
        // Nothing to do: all zero (DATA_VALID alone is information only).
        assert_eq!(
            parse(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0], 14),
            Some(Offload::NONE)
        );
        assert_eq!(emit(&Offload::NONE, &[]), Some([0; LEN]));
    }

    #[test]
    fn a_start_past_what_the_header_holds_is_refused_not_wrapped() {
        // A start of 65,535 from an untagged link, sent on a tagged one.
        let off = parse(&[1, 0, 0, 0, 0, 0, 0xff, 0xff, 6, 0], 0).unwrap();
        let mut frame = [0u8; 18 + 28];
        frame[12..14].copy_from_slice(&[0x81, 0x00]);
        frame[16..18].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(emit(&off, &frame), None);
    }
}
