//! IPv4 fragmentation (RFC 791 §3.2 "Fragmentation", RFC 1812 §5.2.6).
//!
//! Each fragment carries at most `mtu - header` bytes of payload, a multiple
//! of 8 except in the last. The first fragment keeps every option; later
//! ones keep only options whose "copied" flag is set, padded to a 32-bit
//! boundary. Offsets add to the original's, so fragments of fragments stay
//! correct, and the last fragment inherits the original's MF flag.

use vrhost_wire::ethernet::EtherType;
use vrhost_wire::ipv4::{ipv4_option_copied, Ipv4Packet};

use crate::drop_reason::DropReason;
use crate::mbuf::Mbuf;
use crate::output::Via;
use crate::output::{Ctx, BUILD_L2};
use crate::worker::Vr;

/// Most fragments one packet may be cut into (a 9000-byte packet into a 576-byte MTU needs 17).
const MAX_FRAGMENTS: usize = 64;

/// Copied options of `pkt`, padded with End-of-List to a multiple of 4.
fn copied_options(pkt: &Ipv4Packet<&[u8]>, out: &mut [u8; 40]) -> usize {
    let opts = pkt.options();
    let mut n = 0;
    let mut i = 0;
    while i < opts.len() {
        let kind = opts[i];
        let len = match kind {
            0 => break, // End of Option List
            1 => 1,     // No-Operation
            _ => match opts.get(i + 1) {
                Some(&l) if l >= 2 && i + l as usize <= opts.len() => l as usize,
                _ => break, // input validated options already; be safe anyway
            },
        };
        if ipv4_option_copied(kind) {
            out[n..n + len].copy_from_slice(&opts[i..i + len]);
            n += len;
        }
        i += len;
    }
    let padded = (n + 3) & !3;
    out[n..padded].fill(0);
    padded
}

/// Fragments `m` for `mtu` and outputs every piece toward `via`.
pub(crate) fn v4(ctx: &mut Ctx<'_>, vr: &mut Vr, m: Mbuf, egress: u16, via: Via, mtu: u16) {
    let pkt = Ipv4Packet::new_unchecked(m.l3());
    let hlen = pkt.header_len() as usize;
    let total = pkt.total_len() as usize;
    let mut later_opts = [0u8; 40];
    let later_opts_len = copied_options(&pkt, &mut later_opts);
    let first_chunk = (mtu as usize).saturating_sub(hlen) & !7;
    let later_chunk = (mtu as usize).saturating_sub(20 + later_opts_len) & !7;
    let payload_len = total - hlen;
    if first_chunk == 0 || later_chunk == 0 {
        return ctx.drop(m, DropReason::FragmentFailed);
    }
    let pieces = 1 + payload_len
        .saturating_sub(first_chunk)
        .div_ceil(later_chunk);
    let base_offset = pkt.frag_offset() as usize;
    // A fragment that ends past 65,535 bytes (a "ping of death") is cut
    // into pieces whose offsets the 13-bit field cannot hold.
    if pieces > MAX_FRAGMENTS || base_offset + payload_len > usize::from(u16::MAX) {
        return ctx.drop(m, DropReason::FragmentFailed);
    }
    let orig_mf = pkt.more_frags();
    let mut off = 0;
    while off < payload_len {
        let first = off == 0;
        let (hdr_len, chunk) = if first {
            (hlen, first_chunk)
        } else {
            (20 + later_opts_len, later_chunk)
        };
        let take = chunk.min(payload_len - off);
        let last = off + take == payload_len;
        let mut f = ctx.pool.get();
        f.set_len_from_start(BUILD_L2 + hdr_len + take);
        f.l3_off = BUILD_L2 as u16;
        f.port = m.port;
        f.iface = m.iface;
        f.local_origin = true;
        {
            let src = m.l3();
            let dst = f.l3_mut();
            dst[..20].copy_from_slice(&src[..20]);
            if first {
                dst[20..hlen].copy_from_slice(&src[20..hlen]);
            } else {
                dst[20..hdr_len].copy_from_slice(&later_opts[..later_opts_len]);
            }
            dst[hdr_len..hdr_len + take].copy_from_slice(&src[hlen + off..hlen + off + take]);
            let mut h = Ipv4Packet::new_unchecked(&mut dst[..]);
            h.set_header_len(hdr_len as u8);
            h.set_total_len((hdr_len + take) as u16);
            h.set_frag_offset((base_offset + off) as u16);
            h.set_more_frags(!last || orig_mf);
            h.set_ttl(h.ttl() - 1);
            h.fill_checksum();
        }
        ctx.output_via(vr, f, egress, via, EtherType::Ipv4);
        off += take;
    }
    // One packet forwarded, however many fragments it became.
    ctx.count_forwarded(m.iface);
    ctx.pool.put(m);
}
