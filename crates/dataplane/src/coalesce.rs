//! Putting a cut super-frame back together on its way out: consecutive
//! TCP frames of one flow, one after another in sequence space, leave as
//! one super-frame.
//!
//! A port that reads a super-frame longer than a buffer cuts it into
//! buffers of a few segments each ([`crate::offload::segment`]), and the
//! pipeline forwards each buffer alone. A port whose link takes
//! virtio-net headers (a TAP) would then write each buffer as a frame of
//! its own, and the receiving kernel would take several skbs, each with
//! its syscall, allocation and TCP receive, where the sender made one.
//! [`run`] finds the buffers that continue the first one of a burst;
//! [`merge_head`] rewrites the first one's headers to describe them all,
//! and the port writes the first buffer whole and the others' payloads
//! behind it (one `writev`). This is what GRO does in a receiving kernel,
//! limited to what a cut produces:
//!
//! ```text
//!   [hdr|p0] [hdr'|p1] [hdr''|p2]   → one frame [HDR|p0 p1 p2]
//!   same L2, L3 and TCP headers but for the IP lengths, IPv4 id and
//!   checksum, the TCP sequence number (p0's end = p1's start), flags
//!   (CWR only on the first, FIN/PSH only on the last) and checksum;
//!   all checksums partial; every payload but the last a whole number of
//!   MSS-sized segments.
//! ```
//!
//! Frames with complete checksums, UDP, IP options that differ, or
//! anything else are left alone: a run of one.

use vrhost_wire::checksum;

use crate::mbuf::{Gso, Mbuf, Offload};
use crate::offload::l2_len;

/// TCP flags: only the first segment of a super-frame may carry CWR, only
/// the last FIN or PSH; SYN, RST and URG frames are never merged.
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const URG: u8 = 0x20;
const CWR: u8 = 0x80;

/// Where a TCP frame's parts lie, in bytes from the frame's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tcp {
    v6: bool,
    l2: usize,
    /// TCP header offset.
    l4: usize,
    /// End of every header (start of the payload).
    hdrs: usize,
    /// End of the L3 packet (Ethernet padding excluded).
    end: usize,
    seq: u32,
    flags: u8,
}

impl Tcp {
    fn payload(&self) -> usize {
        self.end - self.hdrs
    }
}

/// The parts of `m` when it is a TCP frame with a partial checksum whose
/// offload state its headers agree with; `None` otherwise.
fn tcp(m: &Mbuf) -> Option<Tcp> {
    let off = &m.offload;
    if !off.partial
        || off.csum_offset != 16
        || !matches!(off.gso, Gso::None | Gso::Tcp4 | Gso::Tcp6)
    {
        return None;
    }
    let d = m.data();
    let l2 = l2_len(d)?;
    let l4 = l2 + usize::from(off.csum_start);
    let (v6, end) = match d.get(l2)? >> 4 {
        4 => {
            let ihl = usize::from(d[l2] & 0x0f) * 4;
            if d.get(l2 + 9) != Some(&6) || l2 + ihl != l4 || off.gso == Gso::Tcp6 {
                return None;
            }
            let len = u16::from_be_bytes([*d.get(l2 + 2)?, *d.get(l2 + 3)?]);
            (false, l2 + usize::from(len))
        }
        6 => {
            // No extension headers: the TCP header follows the fixed one.
            if d.get(l2 + 6) != Some(&6) || l2 + 40 != l4 || off.gso == Gso::Tcp4 {
                return None;
            }
            let len = u16::from_be_bytes([*d.get(l2 + 4)?, *d.get(l2 + 5)?]);
            (true, l2 + 40 + usize::from(len))
        }
        _ => return None,
    };
    let hdrs = l4 + usize::from(*d.get(l4 + 12)? >> 4) * 4;
    if hdrs < l4 + 20 || end > d.len() || hdrs > end {
        return None;
    }
    let seq = u32::from_be_bytes([d[l4 + 4], d[l4 + 5], d[l4 + 6], d[l4 + 7]]);
    Some(Tcp {
        v6,
        l2,
        l4,
        hdrs,
        end,
        seq,
        flags: d[l4 + 13],
    })
}

/// Whether `b`'s headers are `a`'s but for what differs between segments
/// of one super-frame (IP lengths, IPv4 id and checksum, TCP sequence
/// number, flags and checksum).
fn same_headers(a: &[u8], ta: &Tcp, b: &[u8], tb: &Tcp) -> bool {
    if ta.v6 != tb.v6 || ta.l2 != tb.l2 || ta.l4 != tb.l4 || ta.hdrs != tb.hdrs {
        return false;
    }
    let (l2, l4, hdrs) = (ta.l2, ta.l4, ta.hdrs);
    // L2, then the L3 header in the pieces that do not vary.
    let l3_same = if ta.v6 {
        a[l2..l2 + 4] == b[l2..l2 + 4] && a[l2 + 6..l4] == b[l2 + 6..l4]
    } else {
        a[l2..l2 + 2] == b[l2..l2 + 2]
            && a[l2 + 6..l2 + 10] == b[l2 + 6..l2 + 10]
            && a[l2 + 12..l4] == b[l2 + 12..l4]
    };
    // TCP: ports, then ack, offset and window, then the urgent pointer
    // and options; flags are checked by the caller.
    a[..l2] == b[..l2]
        && l3_same
        && a[l4..l4 + 4] == b[l4..l4 + 4]
        && a[l4 + 8..l4 + 13] == b[l4 + 8..l4 + 13]
        && a[l4 + 14..l4 + 16] == b[l4 + 14..l4 + 16]
        && a[l4 + 18..hdrs] == b[l4 + 18..hdrs]
}

/// How many frames at the start of `tx` leave as one super-frame (at
/// least 1 when `tx` is not empty): the first, and each one after it that
/// continues it, while the L3 packet stays within `max_l3` bytes (at most
/// 65,535, what the IP length fields hold). The MSS is the first frame's
/// `gso_size`, or its payload when it is one segment.
pub fn run(tx: &[Mbuf], max_l3: usize) -> usize {
    let Some(first) = tx.first() else {
        return 0;
    };
    let Some(t0) = tcp(first) else {
        return 1;
    };
    if t0.flags & (FIN | SYN | RST | PSH | URG) != 0 {
        return 1;
    }
    let mss = match first.offload.gso {
        Gso::None => t0.payload(),
        _ => usize::from(first.offload.gso_size),
    };
    let max_l3 = max_l3.min(65_535);
    let mut l3 = t0.end - t0.l2;
    let mut prev = t0;
    let mut n = 1;
    for m in &tx[1..] {
        // The one before must be whole segments to have another behind it.
        if mss == 0 || prev.payload() % mss != 0 {
            break;
        }
        let Some(t) = tcp(m) else { break };
        let gso_ok = match m.offload.gso {
            Gso::None => t.payload() <= mss && t.payload() > 0,
            g => g == tcp_gso(t.v6) && usize::from(m.offload.gso_size) == mss,
        };
        if !gso_ok
            || t.seq != prev.seq.wrapping_add(prev.payload() as u32)
            || t.flags & (SYN | RST | URG | CWR) != 0
            || t.flags & !(FIN | PSH) != t0.flags & !CWR
            || l3 + t.payload() > max_l3
            || !same_headers(first.data(), &t0, m.data(), &t)
        {
            break;
        }
        l3 += t.payload();
        n += 1;
        prev = t;
        if t.flags & (FIN | PSH) != 0 {
            break;
        }
    }
    n
}

/// TCP segmentation for the family `v6` says.
fn tcp_gso(v6: bool) -> Gso {
    if v6 {
        Gso::Tcp6
    } else {
        Gso::Tcp4
    }
}

/// Rewrites the headers of `run[0]` to describe the super-frame that
/// `run` ([`run`] long) makes: the IP length of every payload together,
/// the IPv4 header checksum, FIN and PSH of the last, the partial TCP
/// checksum for that length; the first frame loses any Ethernet padding.
/// Returns the super-frame's offload state; behind the first frame's bytes
/// go the later frames' [`payload`]s. `None`, with nothing changed, when
/// `run` holds fewer than two TCP frames.
pub fn merge_head(run: &mut [Mbuf]) -> Option<Offload> {
    if run.len() < 2 {
        return None;
    }
    let t0 = tcp(&run[0])?;
    let mut payload = t0.payload();
    let mut last_flags = 0;
    let mut mss = match run[0].offload.gso {
        Gso::None => t0.payload(),
        _ => usize::from(run[0].offload.gso_size),
    };
    for m in &run[1..] {
        let t = tcp(m)?;
        payload += t.payload();
        last_flags = t.flags;
    }
    if mss == 0 {
        mss = payload;
    }
    let l4_len = t0.hdrs - t0.l4 + payload;
    let d = run[0].data_mut();
    let l2 = t0.l2;
    if t0.v6 {
        d[l2 + 4..l2 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    } else {
        let total = t0.l4 - l2 + l4_len;
        d[l2 + 2..l2 + 4].copy_from_slice(&(total as u16).to_be_bytes());
        d[l2 + 10..l2 + 12].fill(0);
        let c = checksum::checksum(&d[l2..t0.l4]);
        d[l2 + 10..l2 + 12].copy_from_slice(&c.to_be_bytes());
    }
    d[t0.l4 + 13] |= last_flags & (FIN | PSH);
    let pseudo = if t0.v6 {
        let a = |at: usize| -> core::net::Ipv6Addr {
            let mut o = [0u8; 16];
            o.copy_from_slice(&d[at..at + 16]);
            o.into()
        };
        checksum::pseudo_header_v6(&a(l2 + 8), &a(l2 + 24), 6, l4_len as u32)
    } else {
        let a =
            |at: usize| -> core::net::Ipv4Addr { [d[at], d[at + 1], d[at + 2], d[at + 3]].into() };
        checksum::pseudo_header_v4(&a(l2 + 12), &a(l2 + 16), 6, l4_len as u32)
    };
    let field = t0.l4 + 16;
    d[field..field + 2].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
    let off = Offload {
        partial: true,
        gso: tcp_gso(t0.v6),
        gso_size: mss as u16,
        csum_start: (t0.l4 - l2) as u16,
        csum_offset: 16,
    };
    // The first frame ends at its L3 end (no Ethernet padding).
    run[0].truncate(t0.end);
    Some(off)
}

/// The payload of a frame that [`run`] put behind another: its bytes after
/// every header, up to the end of its L3 packet. Empty for a frame that is
/// no TCP frame [`run`] would take.
pub fn payload(m: &Mbuf) -> &[u8] {
    match tcp(m) {
        Some(t) => &m.data()[t.hdrs..t.end],
        None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mbuf::MbufPool;
    use crate::offload::{resolve, segment};

    /// An Ethernet + IPv4 + TCP super-frame of `payload` bytes (MSS
    /// 1448), its checksum partial as Linux leaves it, with `flags`.
    fn tcp4(payload: usize, flags: u8) -> (Vec<u8>, Offload) {
        let mut f = vec![0u8; 14 + 20 + 32 + payload];
        f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let l3 = &mut f[14..];
        l3[0] = 0x45;
        l3[2..4].copy_from_slice(&((52 + payload) as u16).to_be_bytes());
        l3[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        l3[6] = 0x40;
        l3[8] = 63;
        l3[9] = 6;
        l3[12..16].copy_from_slice(&[10, 0, 0, 2]);
        l3[16..20].copy_from_slice(&[10, 1, 0, 2]);
        let c = checksum::checksum(&l3[..20]);
        l3[10..12].copy_from_slice(&c.to_be_bytes());
        l3[20..22].copy_from_slice(&40000u16.to_be_bytes());
        l3[22..24].copy_from_slice(&5201u16.to_be_bytes());
        l3[24..28].copy_from_slice(&0xffff_f000u32.to_be_bytes());
        l3[28..32].copy_from_slice(&77u32.to_be_bytes());
        l3[32] = 8 << 4;
        l3[33] = flags;
        l3[34..36].copy_from_slice(&512u16.to_be_bytes());
        l3[40..52].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 7]);
        for (i, b) in l3[52..].iter_mut().enumerate() {
            *b = (i * 13 + 5) as u8;
        }
        let pseudo = checksum::pseudo_header_v4(
            &[10, 0, 0, 2].into(),
            &[10, 1, 0, 2].into(),
            6,
            (32 + payload) as u32,
        );
        l3[36..38].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
        let off = Offload {
            partial: true,
            gso: Gso::Tcp4,
            gso_size: 1448,
            csum_start: 20,
            csum_offset: 16,
        };
        (f, off)
    }

    /// Cuts `f` into frames of `per` segments, as a port does.
    fn cut(f: &[u8], off: &Offload, per: usize, pool: &mut MbufPool) -> Vec<Mbuf> {
        let mut out = Vec::new();
        segment(&f[..14], &f[14..], off, per, false, pool, |m| out.push(m)).unwrap();
        out
    }

    /// Cuts every frame of `frames` into single segments and returns the
    /// TCP stream they carry, checking every checksum on the way.
    fn stream(frames: &mut Vec<Mbuf>, pool: &mut MbufPool) -> (Vec<u8>, Vec<u8>) {
        assert_eq!(resolve(frames, &mut Vec::new(), pool), 0);
        let mut bytes = Vec::new();
        let mut flags = Vec::new();
        for m in frames.iter() {
            let l3 = m.l3();
            assert!(checksum::verifies(&l3[..20]));
            let pseudo = checksum::pseudo_header_v4(
                &[l3[12], l3[13], l3[14], l3[15]].into(),
                &[l3[16], l3[17], l3[18], l3[19]].into(),
                6,
                (l3.len() - 20) as u32,
            );
            assert_eq!(checksum::fold(pseudo + checksum::sum(&l3[20..])), 0xffff);
            bytes.extend_from_slice(&l3[52..]);
            flags.push(l3[33]);
        }
        (bytes, flags)
    }

    /// Joins `frames` as a port would: the first frame's bytes, then the
    /// later frames' payloads.
    fn join(frames: &mut [Mbuf], pool: &mut MbufPool) -> Mbuf {
        let n = frames.len();
        assert_eq!(run(frames, 65_535), n);
        let off = merge_head(frames).unwrap();
        let mut whole = frames[0].data().to_vec();
        for m in &frames[1..] {
            whole.extend_from_slice(payload(m));
        }
        let mut m = pool.get();
        let b = m.set_len_from_start(whole.len().min(crate::mbuf::MAX_FRAME));
        b.copy_from_slice(&whole[..b.len()]);
        m.offload = off;
        m.l3_off = 14;
        m
    }

    #[test]
    fn a_cut_super_frame_joins_back_into_the_same_stream() {
        let mut pool = MbufPool::new(64);
        let (f, off) = tcp4(5000, 0x10 | PSH | CWR);
        let mut pieces = cut(&f, &off, 1, &mut pool);
        assert_eq!(pieces.len(), 4);
        let whole = join(&mut pieces, &mut pool);
        assert_eq!(whole.data().len(), f.len());
        assert_eq!(whole.offload, off);
        // Cut again by a link without offloads: what the original gives.
        let mut again = vec![whole];
        let mut orig_cut = cut(&f, &off, 1, &mut pool);
        for m in orig_cut.iter_mut() {
            crate::offload::complete(m);
        }
        let mut orig = orig_cut;
        assert_eq!(stream(&mut again, &mut pool), stream(&mut orig, &mut pool));
    }

    #[test]
    fn frames_of_several_segments_join_and_the_last_may_be_short() {
        let mut pool = MbufPool::new(64);
        let (f, off) = tcp4(40_000, 0x10 | PSH);
        let pieces = cut(&f, &off, 6, &mut pool);
        assert_eq!(pieces.len(), 5);
        assert_eq!(run(&pieces, 65_535), 5);
        // A smaller cap stops the run at a frame boundary.
        assert_eq!(run(&pieces, 52 + 2 * 6 * 1448), 2);
        assert_eq!(run(&pieces[4..], 65_535), 1, "the last frame alone");
    }

    #[test]
    fn what_does_not_continue_the_first_frame_is_left_alone() {
        let mut pool = MbufPool::new(64);
        let (f, off) = tcp4(3 * 1448, 0x10);
        let base = cut(&f, &off, 1, &mut pool);
        let again = |edit: &dyn Fn(&mut Vec<Mbuf>)| {
            let mut pool = MbufPool::new(8);
            let mut v = cut(&f, &off, 1, &mut pool);
            edit(&mut v);
            run(&v, 65_535)
        };
        assert_eq!(run(&base, 65_535), 3);
        // A gap in sequence space, another flow, a different TTL, a FIN
        // in the middle, a complete checksum, a different window.
        let seq = |v: &mut Vec<Mbuf>| v[1].data_mut()[14 + 20 + 7] ^= 1;
        let port = |v: &mut Vec<Mbuf>| v[2].data_mut()[14 + 20 + 1] ^= 1;
        let ttl = |v: &mut Vec<Mbuf>| v[1].data_mut()[14 + 8] -= 1;
        let fin = |v: &mut Vec<Mbuf>| v[0].data_mut()[14 + 20 + 13] |= FIN;
        let done = |v: &mut Vec<Mbuf>| v[1].offload.partial = false;
        let win = |v: &mut Vec<Mbuf>| v[2].data_mut()[14 + 20 + 15] ^= 1;
        assert_eq!(again(&seq), 1);
        assert_eq!(again(&port), 2);
        assert_eq!(again(&ttl), 1);
        assert_eq!(again(&fin), 1);
        assert_eq!(again(&done), 1);
        assert_eq!(again(&win), 2);
        // A short segment in the middle ends the run after it.
        let (g, goff) = tcp4(1000, 0x10);
        let mut short = cut(&g, &goff, 1, &mut pool);
        let mut v = cut(&f, &off, 1, &mut pool);
        v.truncate(1);
        v.append(&mut short);
        assert_eq!(run(&v, 65_535), 1, "another stream position");
        let mut m = pool.get();
        m.fill(&[0u8; 10]);
        assert_eq!(run(&[m], 65_535), 1);
        assert_eq!(run(&[], 65_535), 0);
    }
}
