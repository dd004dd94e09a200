//! The classic BPF program of an `af_packet` port's fanout group
//! (`PACKET_FANOUT_CBPF`), which steers its control protocols' frames to a
//! socket of their own, so that a flood that overflows the data ring does
//! not take them with it.
//!
//! ```text
//!   frame ─▶ program (in the kernel, per frame, at the network header)
//!              ├─ ARP; IPv4/IPv6 BFD (UDP to 3784/4784), BGP (TCP 179),
//!              │  OSPF; ICMPv6 133-137                  ──▶ member 0: the control socket
//!              └─ anything else: a hash of addresses and ports
//!                                 modulo the data queues ──▶ member 1 + hash % queues
//! ```
//!
//! The same frames as `vrhost_dataplane::protocol` counts as control (the
//! protected share): IP without extension headers, IPv4 not a later
//! fragment, and only where the whole header the test reads is there. A
//! member is a socket's place in the group, in the order the sockets
//! joined: the control socket joins first, then queue 0's, 1's, ...
//!
//! The program sees the frame from its network header on, its 802.1Q tag
//! already moved into metadata by the kernel; QinQ frames (a second tag)
//! are data. The hash, the XOR of the addresses (and of the ports where
//! there are ports), is symmetric like the kernel's own fanout hash, so
//! both directions of a flow meet on one queue.

/// One classic BPF instruction (`struct sock_filter`).
pub type Insn = libc::sock_filter;

// Opcodes (linux/filter.h), whole.
const LD_W_ABS: u16 = 0x20;
const LD_W_IND: u16 = 0x40;
const LD_W_LEN: u16 = 0x80;
const LD_IMM: u16 = 0x00;
const LD_MEM: u16 = 0x60;
const ST_MEM: u16 = 0x02;
const ALU_AND_K: u16 = 0x54;
const ALU_SUB_K: u16 = 0x14;
const ALU_ADD_K: u16 = 0x04;
const ALU_MOD_K: u16 = 0x94;
const ALU_XOR_X: u16 = 0xac;
const ALU_RSH_K: u16 = 0x74;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JGE_K: u16 = 0x35;
const JGE_X: u16 = 0x3d;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;
const TAX: u16 = 0x07;

/// `skb->protocol` (host order), an ancillary load.
const PROTOCOL: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PROTOCOL) as u32;

/// The control socket's member index.
pub const CONTROL: u32 = 0;

/// Jump targets, resolved when the program is assembled.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum L {
    Next,
    Control,
    First,
    Hash,
    V4,
    V4Ports,
    V4Udp,
    V4Tcp,
    V4Mix,
    V4Addr,
    V4Store,
    V6,
    V6Icmp,
    V6IcmpHigh,
    V6Ports,
    V6Udp,
    V6Tcp,
    V6NoPorts,
    V6Mix,
    V6Store,
}

/// An instruction before assembly: a jump's targets are labels.
enum Op {
    Plain(u16, u32),
    Jump(u16, u32, L, L),
    Always(L),
    Label(L),
}

use Op::{Always, Jump, Label, Plain};

/// The program for a port of `queues` data queues (at least 1). With one
/// data queue there is nothing to hash: what is not control is member 1.
///
/// A load from the packet is the costly instruction (a frame that an
/// `af_packet` ring or a socket sent is mostly in page fragments, where
/// each load is a call into the kernel's `skb_copy_bits`), so each header
/// is read a 32-bit word at a time, three words for an IPv4 or IPv6 data
/// frame, and its fields taken apart in registers and scratch memory
/// (`M[0]`: the ports' word, `M[1]`: the first header word, `M[2]`: the
/// transport protocol).
pub fn program(queues: u16) -> Vec<Insn> {
    let queues = u32::from(queues.max(1));
    let hashed = queues > 1;
    // Where a data frame goes once known: its hash's inputs, or member 1.
    let to = |l: L| if hashed { l } else { L::First };
    // Ports in M[0], protocol in M[2]: control (BFD to 3784/4784, BGP from
    // or to 179) or on to `mix`.
    let ports = |udp: L, tcp: L, mix: L| {
        [
            Plain(ST_MEM, 0),
            Plain(LD_MEM, 2),
            Jump(JEQ_K, 17, udp, tcp),
            Label(udp),
            Plain(LD_MEM, 0),
            Plain(ALU_AND_K, 0xffff),
            Jump(JEQ_K, 3784, L::Control, L::Next),
            Jump(JEQ_K, 4784, L::Control, to(mix)),
            Label(tcp),
            Plain(LD_MEM, 0),
            Plain(ALU_AND_K, 0xffff),
            Jump(JEQ_K, 179, L::Control, L::Next),
            Plain(LD_MEM, 0),
            Plain(ALU_RSH_K, 16),
            Jump(JEQ_K, 179, L::Control, to(mix)),
        ]
    };
    let mut ops = vec![
        Plain(LD_W_ABS, PROTOCOL),
        Jump(JEQ_K, 0x0806, L::Control, L::Next),
        Jump(JEQ_K, 0x0800, L::V4, L::Next),
        Jump(JEQ_K, 0x86dd, L::V6, L::First),
        // IPv4: 20 bytes, version 4; X = the header's length.
        Label(L::V4),
        Plain(LD_W_LEN, 0),
        Jump(JGE_K, 20, L::Next, L::First),
        Plain(LD_W_ABS, 0),
        Plain(ST_MEM, 1),
        Plain(ALU_AND_K, 0xf000_0000),
        Jump(JEQ_K, 0x4000_0000, L::Next, L::First),
        Plain(LD_MEM, 1),
        Plain(ALU_RSH_K, 22),
        Plain(ALU_AND_K, 0x3c),
        Plain(TAX, 0),
        // Flags and fragment offset, TTL, protocol. A later fragment has
        // no transport header: addresses only.
        Plain(LD_W_ABS, 6),
        Jump(JSET_K, 0x1fff_0000, to(L::V4Addr), L::Next),
        Plain(ALU_AND_K, 0xff),
        Plain(ST_MEM, 2),
        Jump(JEQ_K, 89, L::Control, L::Next),
        Jump(JEQ_K, 6, L::V4Ports, L::Next),
        Jump(JEQ_K, 17, L::V4Ports, to(L::V4Addr)),
        // Both ports there: length - 4 >= the header's length (X).
        Label(L::V4Ports),
        Plain(LD_W_LEN, 0),
        Plain(ALU_SUB_K, 4),
        Jump(JGE_X, 0, L::Next, to(L::V4Addr)),
        Plain(LD_W_IND, 0),
    ];
    ops.extend(ports(L::V4Udp, L::V4Tcp, L::V4Mix));
    if hashed {
        // The hash: ports (or 0) ^ source ^ destination.
        ops.extend([
            Label(L::V4Mix),
            Plain(LD_MEM, 0),
            Always(L::V4Store),
            Label(L::V4Addr),
            Plain(LD_IMM, 0),
            Label(L::V4Store),
            Plain(ST_MEM, 0),
            Plain(LD_W_ABS, 12),
            Plain(TAX, 0),
            Plain(LD_W_ABS, 16),
            Plain(ALU_XOR_X, 0),
            Plain(TAX, 0),
            Plain(LD_MEM, 0),
            Plain(ALU_XOR_X, 0),
            Always(L::Hash),
        ]);
    }
    ops.extend([
        // IPv6: 40 bytes, version 6, no extension header.
        Label(L::V6),
        Plain(LD_W_LEN, 0),
        Jump(JGE_K, 40, L::Next, L::First),
        Plain(LD_W_ABS, 0),
        Plain(ALU_AND_K, 0xf000_0000),
        Jump(JEQ_K, 0x6000_0000, L::Next, L::First),
        // Payload length, next header, hop limit.
        Plain(LD_W_ABS, 4),
        Plain(ALU_RSH_K, 8),
        Plain(ALU_AND_K, 0xff),
        Plain(ST_MEM, 2),
        Jump(JEQ_K, 89, L::Control, L::Next),
        Jump(JEQ_K, 58, L::V6Icmp, L::Next),
        Jump(JEQ_K, 6, L::V6Ports, L::Next),
        Jump(JEQ_K, 17, L::V6Ports, to(L::V6NoPorts)),
        // ICMPv6 (at least its 4-byte header): type 133-137.
        Label(L::V6Icmp),
        Plain(LD_W_LEN, 0),
        Jump(JGE_K, 44, L::Next, to(L::V6NoPorts)),
        Plain(LD_W_ABS, 40),
        Plain(ALU_RSH_K, 24),
        Jump(JGE_K, 133, L::V6IcmpHigh, to(L::V6NoPorts)),
        Label(L::V6IcmpHigh),
        Jump(JGT_K, 137, to(L::V6NoPorts), L::Control),
        Label(L::V6Ports),
        Plain(LD_W_LEN, 0),
        Jump(JGE_K, 44, L::Next, to(L::V6NoPorts)),
        Plain(LD_W_ABS, 40),
    ]);
    ops.extend(ports(L::V6Udp, L::V6Tcp, L::V6Mix));
    if hashed {
        // Ports (or 0) ^ the first and last words of both addresses.
        ops.extend([
            Label(L::V6Mix),
            Plain(LD_MEM, 0),
            Always(L::V6Store),
            Label(L::V6NoPorts),
            Plain(LD_IMM, 0),
            Label(L::V6Store),
            Plain(ST_MEM, 0),
        ]);
        for word in [8, 20, 24, 36] {
            ops.extend([
                Plain(LD_W_ABS, word),
                Plain(TAX, 0),
                Plain(LD_MEM, 0),
                Plain(ALU_XOR_X, 0),
                Plain(ST_MEM, 0),
            ]);
        }
        // The hash in A: fold its halves, then pick a data queue.
        ops.extend([
            Label(L::Hash),
            Plain(TAX, 0),
            Plain(ALU_RSH_K, 16),
            Plain(ALU_XOR_X, 0),
            Plain(ALU_MOD_K, queues),
            Plain(ALU_ADD_K, 1),
            Plain(RET_A, 0),
        ]);
    }
    ops.extend([
        Label(L::First),
        Plain(RET_K, 1),
        Label(L::Control),
        Plain(RET_K, CONTROL),
    ]);
    assemble(&ops)
}

/// Resolves the labels: each jump's targets become forward offsets from
/// the instruction after it (`Next`: that instruction).
fn assemble(ops: &[Op]) -> Vec<Insn> {
    let mut at = Vec::new();
    let mut pc = 0usize;
    for op in ops {
        match op {
            Label(l) => at.push((*l, pc)),
            _ => pc += 1,
        }
    }
    let target = |l: L, pc: usize| -> u32 {
        if l == L::Next {
            return 0;
        }
        let to = at.iter().find(|(k, _)| *k == l).map(|&(_, p)| p);
        let to = to.unwrap_or_else(|| panic!("label {l:?} is not in the program"));
        assert!(to > pc, "label {l:?} is not after instruction {pc}");
        (to - pc - 1) as u32
    };
    let mut out = Vec::new();
    for op in ops {
        let pc = out.len();
        let insn = |code, jt, jf, k| Insn { code, jt, jf, k };
        match *op {
            Label(_) => continue,
            Plain(code, k) => out.push(insn(code, 0, 0, k)),
            Always(l) => out.push(insn(JA, 0, 0, target(l, pc))),
            Jump(code, k, t, f) => {
                let (jt, jf) = (target(t, pc), target(f, pc));
                assert!(jt < 256 && jf < 256, "a jump at {pc} is too far");
                out.push(insn(code, jt as u8, jf as u8, k));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_and_the_program_ends_in_returns() {
        for queues in [1, 2, 7] {
            let p = program(queues);
            assert!(p.len() < 4096, "BPF_MAXINSNS");
            for (pc, i) in p.iter().enumerate() {
                let (jt, jf) = if i.code == JA {
                    (i.k as usize, i.k as usize)
                } else if i.code & 0x07 == 0x05 {
                    (usize::from(i.jt), usize::from(i.jf))
                } else {
                    continue;
                };
                assert!(pc + 1 + jt.max(jf) < p.len(), "jump at {pc} leaves");
            }
            let last = p.last().map(|i| i.code);
            assert_eq!(last, Some(RET_K));
        }
    }
}
