//! Finishing what a sender left to the link: partial transport checksums
//! and super-frames (TSO/USO), the work a virtio-net header describes.
//!
//! A Linux peer on veth or TAP, with its default offloads, hands over TCP
//! and UDP whose checksum field holds only the pseudo-header's sum, and TCP
//! "super-frames" of up to 64 KiB that the link is to cut into MSS-sized
//! segments. A port that reads the virtio-net header records that in
//! [`Buffer::offload`](crate::mbuf::Buffer::offload); the pipeline
//! forwards such a frame as one packet (one lookup, one TTL update), and
//! then:
//!
//! ```text
//!   egress takes the header (af_packet, tap: virtio-net headers) ─▶ handed on as it is
//!   egress does not (af_xdp, pcap) ─▶ resolve(): segment, then complete
//!   a segment is longer than the egress MTU ─▶ ICMP (DF / IPv6), or segment
//!                                              and fragment (IPv4 without DF)
//! ```
//!
//! [`segment`] follows what Linux's `tcp_gso_segment` and
//! `__udp_gso_segment` produce: every segment carries the super-frame's
//! headers with its own lengths, the IPv4 identification counting up, the
//! TCP sequence number advanced by the payload before it, FIN and PSH on
//! the last segment only and CWR on the first only.

use vrhost_wire::checksum;

use crate::mbuf::{Gso, Mbuf, MbufPool, Offload, MAX_FRAME};

/// Why a super-frame cannot be cut: its headers do not say what its
/// offload state claims. The frame is dropped, never sent half-done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentError {
    /// Not IPv4 or IPv6, a header shorter than its fields, lengths that
    /// run past the frame, or a transport header elsewhere than
    /// `csum_start`.
    Malformed,
    /// A segment, with its headers, would not fit one buffer.
    TooLarge,
    /// More segments than [`MAX_SEGMENTS_TCP`] or [`MAX_SEGMENTS_UDP`]: a
    /// `gso_size` far below any real MSS, which would turn one frame of a
    /// tenant's into thousands on the worker's time and buffers.
    TooManySegments,
}

/// The most segments a TCP super-frame may be cut into: a 64 KiB one with
/// an MSS of 64 bytes or more (Linux sends none below 48 bytes, less its
/// options, `tcp_min_snd_mss`; ordinary ones carry 45 of 1,448). A frame
/// that asks for more is refused where it is received, counted as a drop
/// of its port, so that nobody's frame costs thousands of buffers and
/// checksums on the way out.
pub const MAX_SEGMENTS_TCP: usize = 1024;

/// The most datagrams a UDP super-frame (USO) may be cut into: Linux's own
/// limit for what it sends (`UDP_MAX_SEGMENTS`).
pub const MAX_SEGMENTS_UDP: usize = 128;

/// TCP flags a segment keeps only when it is the last (FIN, PSH) or the
/// first (CWR) of its super-frame.
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CWR: u8 = 0x80;

/// The Ethernet header length of `frame`: 14, plus 4 for each 802.1Q or
/// 802.1ad tag (two at most). `None` for a frame too short to say.
pub fn l2_len(frame: &[u8]) -> Option<usize> {
    let mut at = 12;
    loop {
        let et = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
        if (et == 0x8100 || et == 0x88a8) && at < 20 {
            at += 4;
        } else {
            return Some(at + 2);
        }
    }
}

/// The headers of a super-frame, as [`Cut::of`] reads them from its L3
/// packet.
#[derive(Clone, Copy, Debug)]
struct Headers {
    v6: bool,
    tcp: bool,
    /// Transport header offset (= `csum_start`).
    l4: usize,
    /// Every header's bytes: L3, extension headers, transport.
    len: usize,
    /// End of the L3 packet (without Ethernet padding).
    end: usize,
}

impl Headers {
    fn parse(pkt: &[u8], off: &Offload) -> Result<Headers, SegmentError> {
        let bad = SegmentError::Malformed;
        let l4 = usize::from(off.csum_start);
        let (at, protocol) = transport(pkt).ok_or(bad)?;
        let v6 = pkt[0] >> 4 == 6;
        let end = l3_end(pkt).ok_or(bad)?;
        let tcp = match (off.gso, v6) {
            (Gso::Tcp4, false) | (Gso::Tcp6, true) => true,
            (Gso::Udp, _) => false,
            _ => return Err(bad),
        };
        // The checksum starts at the transport header, of the protocol the
        // segmentation is for, and its field is where that protocol's is.
        let (want, field) = if tcp { (6, 16) } else { (17, 6) };
        if l4 != at || protocol != want || usize::from(off.csum_offset) != field {
            return Err(bad);
        }
        let l4_len = if tcp {
            usize::from(pkt.get(l4 + 12).ok_or(bad)? >> 4) * 4
        } else {
            8
        };
        if (tcp && l4_len < 20) || l4 + l4_len > end || off.gso_size == 0 {
            return Err(bad);
        }
        let most = if tcp {
            MAX_SEGMENTS_TCP
        } else {
            MAX_SEGMENTS_UDP
        };
        if (end - l4 - l4_len).div_ceil(usize::from(off.gso_size)) > most {
            return Err(SegmentError::TooManySegments);
        }
        Ok(Headers {
            v6,
            tcp,
            l4,
            len: l4 + l4_len,
            end,
        })
    }

    /// The transport checksum's offset from its header.
    fn csum_offset(&self) -> usize {
        if self.tcp {
            16
        } else {
            6
        }
    }

    /// The pseudo-header's sum for a transport length of `len` bytes.
    fn pseudo(&self, l3: &[u8], len: usize) -> u32 {
        let len = len as u32;
        if self.v6 {
            let a = |at: usize| -> core::net::Ipv6Addr {
                let mut o = [0u8; 16];
                o.copy_from_slice(&l3[at..at + 16]);
                o.into()
            };
            checksum::pseudo_header_v6(&a(8), &a(24), if self.tcp { 6 } else { 17 }, len)
        } else {
            let a = |at: usize| -> core::net::Ipv4Addr {
                [l3[at], l3[at + 1], l3[at + 2], l3[at + 3]].into()
            };
            checksum::pseudo_header_v4(&a(12), &a(16), if self.tcp { 6 } else { 17 }, len)
        }
    }
}

/// Where the transport header of L3 packet `pkt` starts, and its
/// protocol: after IPv4's header (IHL), or after IPv6's header and its
/// extension headers as [`vrhost_wire::ipv6::walk_extension_headers`]
/// walks them (AH included, as rule lists read ports behind it). `None`
/// for a fragment (no transport header of its own whole), a header chain
/// that runs past `pkt` or is malformed, or neither family.
fn transport(pkt: &[u8]) -> Option<(usize, u8)> {
    match pkt.first()? >> 4 {
        4 => {
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            let frag = u16::from_be_bytes([*pkt.get(6)?, *pkt.get(7)?]) & 0x3fff;
            (ihl >= 20 && pkt.len() >= ihl && frag == 0).then_some((ihl, pkt[9]))
        }
        6 => {
            let first = vrhost_wire::ip::IpProtocol::from(*pkt.get(6)?);
            let walk = vrhost_wire::ipv6::walk_extension_headers(first, pkt.get(40..)?).ok()?;
            walk.fragment
                .is_none()
                .then_some((40 + walk.offset, u8::from(walk.upper)))
        }
        _ => None,
    }
}

/// Where L3 packet `pkt` ends by its own length field (IPv4's total
/// length, IPv6's payload length and fixed header), if `pkt` holds that.
fn l3_end(pkt: &[u8]) -> Option<usize> {
    let end = match pkt.first()? >> 4 {
        4 => usize::from(u16::from_be_bytes([*pkt.get(2)?, *pkt.get(3)?])),
        6 => 40 + usize::from(u16::from_be_bytes([*pkt.get(4)?, *pkt.get(5)?])),
        _ => return None,
    };
    (end <= pkt.len()).then_some(end)
}

/// Whether offload state `off` is one L3 packet `pkt` may carry: nothing
/// to do; or a partial checksum whose field lies inside the packet, past
/// the transport header's first four bytes (its ports, or ICMP's type and
/// code: all of the transport header that routing, reverse-path checks
/// and rule lists read), with a sum that starts no earlier than that
/// header; and, to be cut, headers that say what the segmentation does
/// (its checksum at the transport header of the protocol it is for, its
/// field where that protocol's is) and no more segments than
/// [`MAX_SEGMENTS_TCP`] or [`MAX_SEGMENTS_UDP`]. A sender's vnet header is
/// its own word: a field placed on a port or an address would have a link
/// (or [`complete`]) rewrite what a rule list let through. A tunnel's
/// inner checksum (a field deep in the payload) is carried.
pub fn offload_agrees(pkt: &[u8], off: &Offload) -> bool {
    if !off.any() {
        return true;
    }
    // A super-frame's headers pin its sum to its own transport header,
    // field where that protocol's is, inside the packet.
    if off.gso != Gso::None {
        return off.partial && Headers::parse(pkt, off).is_ok();
    }
    let (Some((l4, _)), Some(end)) = (transport(pkt), l3_end(pkt)) else {
        return false;
    };
    let start = usize::from(off.csum_start);
    let field = start + usize::from(off.csum_offset);
    off.partial && start >= l4 && field >= l4 + 4 && field + 2 <= end
}

/// The L3 length of the longest segment super-frame `pkt` (its L3 packet)
/// becomes: what the egress MTU is held against. `None` when `off` asks for
/// no segmentation or the headers do not parse.
pub fn segment_len(pkt: &[u8], off: &Offload) -> Option<usize> {
    Cut::of(pkt, off).ok().map(|c| c.segment_len())
}

/// Cuts super-frame `pkt` as [`Cut::segment`] does, its headers read here.
pub fn segment(
    l2: &[u8],
    pkt: &[u8],
    off: &Offload,
    per_frame: usize,
    finish: bool,
    pool: &mut MbufPool,
    out: impl FnMut(Mbuf),
) -> Result<usize, SegmentError> {
    Cut::of(pkt, off)?.segment(l2, per_frame, finish, pool, out)
}

/// A super-frame (its L3 packet) whose headers agree with its offload
/// state, read once: what cutting it makes, and the cut.
#[derive(Clone, Copy, Debug)]
pub struct Cut<'a> {
    pkt: &'a [u8],
    off: &'a Offload,
    h: Headers,
}

impl<'a> Cut<'a> {
    /// `pkt`'s headers, as `off` says it is to be cut; an error when they
    /// disagree, or it would make too many segments.
    pub fn of(pkt: &'a [u8], off: &'a Offload) -> Result<Cut<'a>, SegmentError> {
        Headers::parse(pkt, off).map(|h| Cut { pkt, off, h })
    }

    /// The L3 length of its longest segment.
    pub fn segment_len(&self) -> usize {
        self.h.len + usize::from(self.off.gso_size).min(self.h.end - self.h.len)
    }

    /// How many segments it is cut into.
    pub fn segments(&self) -> usize {
        (self.h.end - self.h.len)
            .div_ceil(usize::from(self.off.gso_size))
            .max(1)
    }

    /// How it is best cut into frames of at most `max` bytes behind an L2
    /// header of `l2` bytes: the segments each frame carries (at least
    /// one), and how many frames that makes.
    pub fn frames_fitting(&self, l2: usize, max: usize) -> (usize, usize) {
        let mss = usize::from(self.off.gso_size);
        let per = (max.saturating_sub(l2 + self.h.len) / mss).max(1);
        (per, (self.h.end - self.h.len).div_ceil(per * mss).max(1))
    }

    /// Cuts it into frames of at most `per_frame` segments each, every one
    /// `l2` and the headers followed by its share of the payload, and hands
    /// each to `out` with its `l3_off` set. A frame of several segments
    /// stays a super-frame (same [`Gso`] and `gso_size`). With `finish`,
    /// each frame's transport checksum is computed whole; without, it is
    /// left partial (the pseudo-header's sum in the field,
    /// [`Offload::partial`] set) for the link. Returns how many frames were
    /// made; on an error none was.
    pub fn segment(
        &self,
        l2: &[u8],
        per_frame: usize,
        finish: bool,
        pool: &mut MbufPool,
        mut out: impl FnMut(Mbuf),
    ) -> Result<usize, SegmentError> {
        let (pkt, off, h) = (self.pkt, self.off, self.h);
        let mss = usize::from(off.gso_size);
        let chunk = mss * per_frame.max(1);
        let payload = &pkt[h.len..h.end];
        if l2.len() + h.len + chunk.min(payload.len()) > MAX_FRAME {
            return Err(SegmentError::TooLarge);
        }
        let seq = u32::from_be_bytes([pkt[h.l4 + 4], pkt[h.l4 + 5], pkt[h.l4 + 6], pkt[h.l4 + 7]]);
        let id = u16::from_be_bytes([pkt[4], pkt[5]]);
        let field = h.l4 + h.csum_offset();
        let pieces = payload.len().div_ceil(chunk).max(1);
        for k in 0..pieces {
            let from = k * chunk;
            let piece = &payload[from..(from + chunk).min(payload.len())];
            let total = h.len + piece.len();
            let mut m = pool.get();
            let frame = m.set_len_from_start(l2.len() + total);
            frame[..l2.len()].copy_from_slice(l2);
            let l3 = &mut frame[l2.len()..];
            l3[..h.len].copy_from_slice(&pkt[..h.len]);
            l3[h.len..].copy_from_slice(piece);
            if h.v6 {
                l3[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
            } else {
                l3[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                l3[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
                l3[10..12].fill(0);
                let c = checksum::checksum(&l3[..h.l4]);
                l3[10..12].copy_from_slice(&c.to_be_bytes());
            }
            let l4_len = total - h.l4;
            if h.tcp {
                let s = seq.wrapping_add(from as u32);
                l3[h.l4 + 4..h.l4 + 8].copy_from_slice(&s.to_be_bytes());
                if k + 1 < pieces {
                    l3[h.l4 + 13] &= !(FIN | PSH);
                }
                if k > 0 {
                    l3[h.l4 + 13] &= !CWR;
                }
            } else {
                l3[h.l4 + 4..h.l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            }
            let pseudo = checksum::fold(h.pseudo(l3, l4_len));
            l3[field..field + 2].copy_from_slice(&pseudo.to_be_bytes());
            let several = piece.len() > mss;
            m.offload = Offload {
                partial: true,
                gso: if several { off.gso } else { Gso::None },
                gso_size: if several { off.gso_size } else { 0 },
                csum_start: off.csum_start,
                csum_offset: h.csum_offset() as u16,
            };
            m.l3_off = l2.len() as u16;
            if finish {
                complete(&mut m);
            }
            out(m);
        }
        Ok(pieces)
    }
}

/// Completes a partial transport checksum in place (what Linux's
/// `skb_checksum_help` does): the ones' complement of the sum from
/// `csum_start` to the end of the L3 packet, its field holding the
/// pseudo-header's sum, goes into the field; a result of zero is sent as
/// `0xffff`, as UDP requires (RFC 768) and TCP accepts. Returns false,
/// changing nothing, when the offsets run past the frame.
pub fn complete(m: &mut Mbuf) -> bool {
    if !m.offload.partial {
        return true;
    }
    let Some(l2) = l2_len(m.data()) else {
        return false;
    };
    let off = m.offload;
    let frame = m.data_mut();
    let start = l2 + usize::from(off.csum_start);
    let field = start + usize::from(off.csum_offset);
    // The L3 packet's own length, not the frame's: Ethernet padding is not
    // part of the sum.
    let end = frame.get(l2..).and_then(l3_end).map(|e| l2 + e);
    let Some(end) = end.filter(|&e| field + 2 <= e) else {
        return false;
    };
    let c = match checksum::checksum(&frame[start..end]) {
        0 => 0xffff,
        c => c,
    };
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    m.offload.partial = false;
    true
}

/// The most frames [`resolve`] leaves in one burst: 64 super-frames of
/// 64 KiB cut at an MSS of 512 bytes or more (ordinary ones make 45
/// segments each). A super-frame whose segments would take the burst past
/// it is dropped and counted: cut, they would take a buffer each from the
/// worker's pool, which keeps what it made (1,024 segments of each of 64
/// super-frames would be 65,536 buffers, 600 MB).
pub const RESOLVE_MAX_FRAMES: usize = 8192;

/// Makes every frame of `tx` one that a link without offloads sends as it
/// is: a super-frame becomes its segments, each with its checksum whole,
/// and a partial checksum is completed. Frames keep their order. A frame
/// whose offload state its headers contradict, or whose segments would
/// take `tx` past [`RESOLVE_MAX_FRAMES`], is dropped (back to `pool`) and
/// counted in the result. `scratch` is the caller's spare vector, so that
/// nothing allocates once warm; a burst with no offloaded frame costs one
/// test per frame.
pub fn resolve(tx: &mut Vec<Mbuf>, scratch: &mut Vec<Mbuf>, pool: &mut MbufPool) -> u64 {
    if !tx.iter().any(|m| m.offload.any()) {
        return 0;
    }
    let mut dropped = 0;
    scratch.clear();
    std::mem::swap(tx, scratch);
    for mut m in scratch.drain(..) {
        if !m.offload.any() {
            tx.push(m);
            continue;
        }
        if m.offload.gso == Gso::None {
            if complete(&mut m) {
                tx.push(m);
            } else {
                dropped += 1;
                pool.put(m);
            }
            continue;
        }
        let (port, iface, local) = (m.port, m.iface, m.local_origin);
        let left = RESOLVE_MAX_FRAMES.saturating_sub(tx.len());
        let made = l2_len(m.data()).and_then(|l2| {
            let (hdr, pkt) = m.data().split_at_checked(l2)?;
            let cut = Cut::of(pkt, &m.offload).ok()?;
            if cut.segments() > left {
                return None;
            }
            cut.segment(hdr, 1, true, pool, |mut s| {
                s.port = port;
                s.iface = iface;
                s.local_origin = local;
                tx.push(s);
            })
            .ok()
        });
        if made.is_none() {
            dropped += 1;
        }
        pool.put(m);
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrhost_wire::checksum::verifies;

    /// An Ethernet + IPv4 + TCP super-frame of `payload` bytes with MSS
    /// `mss`, its checksum partial as Linux leaves it.
    fn tcp4(payload: usize, mss: u16, flags: u8) -> (Vec<u8>, Offload) {
        let mut f = vec![0u8; 14 + 20 + 20 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let l3 = &mut f[14..];
        l3[0] = 0x45;
        l3[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        l3[4..6].copy_from_slice(&0xfffeu16.to_be_bytes());
        l3[6] = 0x40; // DF
        l3[8] = 64;
        l3[9] = 6;
        l3[12..16].copy_from_slice(&[10, 0, 1, 2]);
        l3[16..20].copy_from_slice(&[10, 0, 2, 2]);
        let c = checksum::checksum(&l3[..20]);
        l3[10..12].copy_from_slice(&c.to_be_bytes());
        l3[20..22].copy_from_slice(&5000u16.to_be_bytes());
        l3[22..24].copy_from_slice(&80u16.to_be_bytes());
        l3[24..28].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        l3[32] = 5 << 4;
        l3[33] = flags;
        for (i, b) in l3[40..].iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let pseudo = checksum::pseudo_header_v4(
            &[10, 0, 1, 2].into(),
            &[10, 0, 2, 2].into(),
            6,
            (20 + payload) as u32,
        );
        l3[36..38].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
        let off = Offload {
            partial: true,
            gso: Gso::Tcp4,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        };
        (f, off)
    }

    fn tcp_ok(l3: &[u8]) -> bool {
        let len = l3.len() - 20;
        let pseudo = checksum::pseudo_header_v4(
            &[l3[12], l3[13], l3[14], l3[15]].into(),
            &[l3[16], l3[17], l3[18], l3[19]].into(),
            6,
            len as u32,
        );
        checksum::fold(pseudo + checksum::sum(&l3[20..])) == 0xffff
    }

    #[test]
    fn a_super_frame_becomes_mss_segments_that_reassemble() {
        let (f, off) = tcp4(4000, 1448, FIN | PSH | CWR | 0x10);
        let mut pool = MbufPool::new(4);
        let mut segs = Vec::new();
        let n = segment(&f[..14], &f[14..], &off, 1, true, &mut pool, |m| {
            segs.push(m)
        })
        .unwrap();
        assert_eq!(n, 3);
        let mut payload = Vec::new();
        for (k, s) in segs.iter().enumerate() {
            let l3 = s.l3();
            assert!(verifies(&l3[..20]), "IPv4 header checksum of segment {k}");
            assert!(tcp_ok(l3), "TCP checksum of segment {k}");
            assert_eq!(
                u16::from_be_bytes([l3[2], l3[3]]) as usize,
                l3.len(),
                "total length"
            );
            assert_eq!(
                u16::from_be_bytes([l3[4], l3[5]]),
                0xfffeu16.wrapping_add(k as u16)
            );
            let seq = u32::from_be_bytes([l3[24], l3[25], l3[26], l3[27]]);
            assert_eq!(seq, 0xffff_fff0u32.wrapping_add(payload.len() as u32));
            let flags = l3[33];
            assert_eq!(flags & (FIN | PSH) != 0, k == 2, "FIN/PSH on the last only");
            assert_eq!(flags & CWR != 0, k == 0, "CWR on the first only");
            assert_eq!(s.offload, {
                let mut o = off;
                o.partial = false;
                o.gso = Gso::None;
                o.gso_size = 0;
                o
            });
            payload.extend_from_slice(&l3[40..]);
        }
        assert_eq!(&payload[..], &f[54..]);
        assert_eq!(segs[0].l3().len(), 1488);
        assert_eq!(segs[2].l3().len(), 40 + 4000 - 2 * 1448);
    }

    #[test]
    fn frames_of_several_segments_stay_super_frames_with_partial_sums() {
        let (f, off) = tcp4(20_000, 1448, 0x10);
        let mut pool = MbufPool::new(4);
        let mut out = Vec::new();
        let n = segment(&f[..14], &f[14..], &off, 6, false, &mut pool, |m| {
            out.push(m)
        })
        .unwrap();
        assert_eq!(n, 3); // 8688 + 8688 + 2624
        assert_eq!(
            Cut::of(&f[14..], &off).map(|c| c.frames_fitting(14, MAX_FRAME)),
            Ok((6, 3))
        );
        assert!(out.iter().all(|m| m.offload.partial));
        assert_eq!(out[0].offload.gso, Gso::Tcp4);
        assert_eq!(out[2].offload.gso_size, 1448);
        // Cut again into single segments by a link without offloads, the
        // whole stream comes out as the original's.
        let mut scratch = Vec::new();
        assert_eq!(resolve(&mut out, &mut scratch, &mut pool), 0);
        assert_eq!(out.len(), 14);
        let mut payload = Vec::new();
        for s in &out {
            assert!(!s.offload.any());
            assert!(tcp_ok(s.l3()));
            payload.extend_from_slice(&s.l3()[40..]);
        }
        assert_eq!(&payload[..], &f[54..]);
    }

    #[test]
    fn completing_a_partial_checksum_matches_a_full_computation() {
        let (f, mut off) = tcp4(333, 1448, 0x18);
        off.gso = Gso::None;
        off.gso_size = 0;
        let mut pool = MbufPool::new(1);
        let mut m = pool.get();
        m.fill(&f);
        m.l3_off = 14;
        m.offload = off;
        assert!(!tcp_ok(m.l3()));
        assert!(complete(&mut m));
        assert!(tcp_ok(m.l3()));
        assert!(!m.offload.partial);
        // Ethernet padding after the packet is not summed.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0xab; 5]);
        m.fill(&padded);
        m.offload = off;
        assert!(complete(&mut m));
        assert!(tcp_ok(&m.l3()[..m.l3().len() - 5]));
    }

    #[test]
    fn contradicting_headers_are_refused_not_cut() {
        let (f, off) = tcp4(3000, 1448, 0);
        let mut pool = MbufPool::new(2);
        let no = |_m: Mbuf| panic!("nothing should come out");
        let mut wrong = off;
        wrong.csum_start = 24;
        assert_eq!(
            segment(&f[..14], &f[14..], &wrong, 1, true, &mut pool, no),
            Err(SegmentError::Malformed)
        );
        let mut zero = off;
        zero.gso_size = 0;
        assert!(segment(&f[..14], &f[14..], &zero, 1, true, &mut pool, no).is_err());
        let mut v6 = off;
        v6.gso = Gso::Tcp6;
        assert!(segment(&f[..14], &f[14..], &v6, 1, true, &mut pool, no).is_err());
        assert!(segment(&f[..14], &f[14..100], &off, 1, true, &mut pool, no).is_err());
        let (big, big_off) = tcp4(12_000, 1448, 0);
        assert_eq!(
            segment(&big[..14], &big[14..], &big_off, 8, true, &mut pool, no),
            Err(SegmentError::TooLarge)
        );
        // resolve drops such a frame and counts it.
        let mut m = pool.get();
        m.fill(&f);
        m.offload = wrong;
        let mut tx = vec![m];
        assert_eq!(resolve(&mut tx, &mut Vec::new(), &mut pool), 1);
        assert!(tx.is_empty());
    }

    #[test]
    fn a_super_frame_cut_into_too_many_segments_is_refused() {
        let mut pool = MbufPool::new(4);
        // 64,000 bytes: 1,016 segments of 63 are allowed, 1,033 of 62 not.
        let (f, mut off) = tcp4(64_000, 63, 0);
        assert_eq!(segment_len(&f[14..], &off), Some(40 + 63));
        let mut made = 0;
        let cut = segment(&f[..14], &f[14..], &off, 1, true, &mut pool, |_| made += 1);
        assert_eq!(
            (cut, made),
            (Ok(MAX_SEGMENTS_TCP - 8), MAX_SEGMENTS_TCP - 8)
        );
        off.gso_size = 62;
        assert_eq!(segment_len(&f[14..], &off), None);
        assert!(Cut::of(&f[14..], &off).is_err());
        let no = |_m: Mbuf| panic!("nothing should come out");
        assert_eq!(
            segment(&f[..14], &f[14..], &off, 1, true, &mut pool, no),
            Err(SegmentError::TooManySegments)
        );
        // The worst a sender can ask: a byte a segment.
        off.gso_size = 1;
        let mut m = pool.get_large().unwrap_or_else(|| pool.get());
        m.fill(&f);
        m.offload = off;
        let mut tx = vec![m];
        assert_eq!(resolve(&mut tx, &mut Vec::new(), &mut pool), 1);
        assert!(tx.is_empty());
        // UDP: 128 datagrams at most, Linux's own limit.
        let (mut f, mut off) = tcp4(12_800, 100, 0);
        f[14 + 9] = 17;
        f[14 + 24..14 + 26].copy_from_slice(&(8 + 12_800 + 12u16).to_be_bytes());
        off.gso = Gso::Udp;
        off.csum_offset = 6;
        // 12,812 bytes behind the 8-byte UDP header (the TCP header's
        // other 12 count as payload): 129 datagrams of 100, 128 of 101.
        assert_eq!(segment_len(&f[14..], &off), None);
        off.gso_size = 101;
        assert_eq!(segment_len(&f[14..], &off), Some(20 + 8 + 101));
    }

    /// An IPv6 packet from 2000::1 to 2000::2, next header `next`, with
    /// `payload` bytes after its header (zeros).
    fn ipv6(next: u8, payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
        p[6] = next;
        p[7] = 64;
        p[8] = 0x20;
        p[23] = 1;
        p[24] = 0x20;
        p[39] = 2;
        p
    }

    /// An IPv6 packet: a Destination Options header, then TCP with
    /// `payload` bytes, its checksum partial; the transport header is 48
    /// bytes in.
    fn tcp6_behind_options(payload: usize, mss: u16) -> (Vec<u8>, Offload) {
        let mut p = ipv6(60, 8 + 20 + payload);
        p[40..48].copy_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
        p[48..50].copy_from_slice(&5000u16.to_be_bytes());
        p[50..52].copy_from_slice(&443u16.to_be_bytes());
        p[60] = 5 << 4;
        let off = Offload {
            partial: true,
            gso: Gso::Tcp6,
            gso_size: mss,
            csum_start: 48,
            csum_offset: 16,
        };
        (p, off)
    }

    #[test]
    fn a_burst_resolved_takes_a_bounded_number_of_buffers() {
        // 64 super-frames of 64,000 bytes at an MSS of 63: 1,016 segments
        // each, 65,024 in all; eight fit the bound, the rest are dropped.
        let (f, off) = tcp4(64_000, 63, 0);
        let mut pool = MbufPool::new(0);
        let burst = |pool: &mut MbufPool, f: &[u8], off: Offload| -> Vec<Mbuf> {
            (0..64)
                .map(|_| {
                    let mut m = pool.get_large().unwrap_or_else(|| pool.get());
                    m.fill(f);
                    m.offload = off;
                    m
                })
                .collect()
        };
        let mut tx = burst(&mut pool, &f, off);
        assert!(tx.iter().all(|m| m.len() == f.len()), "whole");
        assert_eq!(resolve(&mut tx, &mut Vec::new(), &mut pool), 56);
        assert_eq!(tx.len(), 8 * 1016);
        assert!(tx.len() <= RESOLVE_MAX_FRAMES);
        assert!(
            pool.allocated() <= RESOLVE_MAX_FRAMES + 64,
            "{}",
            pool.allocated()
        );
        // Ordinary super-frames (MSS 1448): a full burst is cut whole.
        let (f, off) = tcp4(64_000, 1448, 0);
        let mut tx = burst(&mut pool, &f, off);
        assert_eq!(resolve(&mut tx, &mut Vec::new(), &mut pool), 0);
        assert_eq!(tx.len(), 64 * 45);
    }

    #[test]
    fn the_transport_header_is_found_past_extension_headers_not_in_fragments() {
        let (f, _) = tcp4(100, 1448, 0);
        assert_eq!(transport(&f[14..]), Some((20, 6)));
        let mut first_fragment = f[14..].to_vec();
        first_fragment[6] |= 0x20;
        assert_eq!(transport(&first_fragment), None);
        let (p, _) = tcp6_behind_options(100, 1448);
        assert_eq!(transport(&p), Some((48, 6)));
        let mut fragment = p.clone();
        fragment[6] = 44;
        assert_eq!(transport(&fragment), None);
        // Behind AH (the same eight bytes read as AH, length 0: 8 bytes),
        // where rule lists read the ports too.
        let mut ah = p.clone();
        ah[6] = 51;
        assert_eq!(transport(&ah), Some((48, 6)));
        let on_the_port = Offload {
            gso: Gso::None,
            gso_size: 0,
            csum_start: 40,
            csum_offset: 10,
            partial: true,
        };
        assert!(
            !offload_agrees(&ah, &on_the_port),
            "a field on the port behind AH"
        );
        assert_eq!(transport(&p[..44]), None, "the chain runs past the packet");
        assert_eq!(transport(&[0x45; 12]), None);
    }

    #[test]
    fn a_checksum_field_on_what_routing_and_rules_read_is_refused() {
        let (f, tso) = tcp4(100, 1448, 0);
        let pkt = &f[14..];
        let plain = Offload {
            gso: Gso::None,
            gso_size: 0,
            ..tso
        };
        assert!(offload_agrees(pkt, &plain) && offload_agrees(pkt, &tso));
        assert!(offload_agrees(pkt, &Offload::NONE));
        // On a port, on an address or the TTL, or past the packet's end
        // (140 bytes): refused. Completing such a "checksum" would rewrite
        // what a rule list or the route was decided on.
        for (start, offset) in [
            (20, 2),
            (20, 0),
            (0, 16),
            (0, 8),
            (12, 4),
            (20, 119),
            (140, 0),
        ] {
            let bad = Offload {
                csum_start: start,
                csum_offset: offset,
                ..plain
            };
            assert!(!offload_agrees(pkt, &bad), "{start} + {offset}");
        }
        // A tunnel's inner checksum, deep in the payload, is carried, but
        // a super-frame is cut only on its own transport header's.
        let inner = Offload {
            csum_start: 60,
            ..plain
        };
        assert!(offload_agrees(pkt, &inner));
        assert!(!offload_agrees(
            pkt,
            &Offload {
                csum_start: 60,
                ..tso
            }
        ));
        let udp = Offload {
            gso: Gso::Udp,
            csum_offset: 6,
            ..tso
        };
        assert!(!offload_agrees(pkt, &udp), "USO on a TCP packet");
        assert!(!offload_agrees(
            pkt,
            &Offload {
                gso: Gso::Tcp6,
                ..tso
            }
        ));
        // IPv6: the transport header past a Destination Options header.
        // A checksum said to start two bytes early would have each
        // segment's sequence number written over the destination port.
        let (p, tso6) = tcp6_behind_options(3000, 1000);
        assert!(offload_agrees(&p, &tso6));
        let early = Offload {
            csum_start: 46,
            ..tso6
        };
        assert!(!offload_agrees(&p, &early));
        let mut pool = MbufPool::new(4);
        let no = |_m: Mbuf| panic!("nothing should come out");
        let eth = [0u8; 14];
        assert_eq!(
            segment(&eth, &p, &early, 1, true, &mut pool, no),
            Err(SegmentError::Malformed)
        );
        let mut ports = Vec::new();
        segment(&eth, &p, &tso6, 1, true, &mut pool, |m| {
            ports.push(u16::from_be_bytes([m.l3()[50], m.l3()[51]]))
        })
        .unwrap();
        assert_eq!(ports, [443; 3], "each segment keeps the port");
    }

    #[test]
    fn udp_segments_are_datagrams_of_their_own() {
        // IPv6 + UDP, 3000 bytes of payload in 1200-byte datagrams.
        let payload = 3000;
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f.extend(ipv6(17, 8 + payload));
        let l3 = &mut f[14..];
        l3[44..46].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        for (i, b) in l3[48..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let off = Offload {
            partial: true,
            gso: Gso::Udp,
            gso_size: 1200,
            csum_start: 40,
            csum_offset: 6,
        };
        assert_eq!(segment_len(&f[14..], &off), Some(40 + 8 + 1200));
        let mut pool = MbufPool::new(3);
        let mut out = Vec::new();
        segment(&f[..14], &f[14..], &off, 1, true, &mut pool, |m| {
            out.push(m)
        })
        .unwrap();
        assert_eq!(out.len(), 3);
        for s in &out {
            let l3 = s.l3();
            let udp_len = u16::from_be_bytes([l3[44], l3[45]]) as usize;
            assert_eq!(udp_len, l3.len() - 40);
            assert_eq!(u16::from_be_bytes([l3[4], l3[5]]) as usize, udp_len);
            let pseudo = checksum::pseudo_header_v6(
                &<[u8; 16]>::try_from(&l3[8..24]).unwrap().into(),
                &<[u8; 16]>::try_from(&l3[24..40]).unwrap().into(),
                17,
                udp_len as u32,
            );
            assert_eq!(checksum::fold(pseudo + checksum::sum(&l3[40..])), 0xffff);
        }
        assert_eq!(out[2].l3().len(), 40 + 8 + 600);
    }

    #[test]
    fn l2_length_counts_tags() {
        let mut f = [0u8; 24];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(l2_len(&f), Some(14));
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[16..18].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(l2_len(&f), Some(18));
        f[12..14].copy_from_slice(&[0x88, 0xa8]);
        f[16..18].copy_from_slice(&[0x81, 0x00]);
        f[20..22].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(l2_len(&f), Some(22));
        assert_eq!(l2_len(&f[..13]), None);
    }
}
