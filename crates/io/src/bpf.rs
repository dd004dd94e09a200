//! The `bpf()` system call by hand: the XSKMAP, the six-instruction XDP
//! redirect program, the `bpf_link` that attaches it, and program lookup
//! by id; and the two-instruction tc ingress program that keeps the host's
//! stack off an `af_packet` port. No clang, no libbpf, no ELF: the programs
//! are assembled below.
//!
//! ```text
//!  0: r2 = *(u32 *)(r1 + 16)      ; xdp_md.rx_queue_index
//!  1: r1 = map[xskmap]            ; ld_imm64, two slots, src_reg = BPF_PSEUDO_MAP_FD
//!  3: r3 = XDP_PASS               ; fallback when no socket sits on this queue
//!  4: call bpf_redirect_map       ; helper 51: (map, key = queue, flags = fallback)
//!  5: exit                        ; r0 = XDP_REDIRECT, or XDP_PASS
//! ```
//!
//! `bpf_redirect_map` returns the low bits of its flags argument as the
//! action when the map slot is empty, so ARP, IPv6 ND and anything on a
//! queue without a socket still reaches the kernel stack.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Name the kernel shows for our program (`bpftool prog`, `ip link`). A
/// program of this name left attached by a crashed run is ours to replace.
pub(crate) const PROG_NAME: &str = "vrhost_xsk";
const MAP_NAME: &str = "vrhost_xsks";

// bpf() commands (include/uapi/linux/bpf.h, enum bpf_cmd).
const BPF_MAP_CREATE: c_int = 0;
const BPF_MAP_UPDATE_ELEM: c_int = 2;
const BPF_MAP_DELETE_ELEM: c_int = 3;
const BPF_PROG_LOAD: c_int = 5;
const BPF_PROG_GET_FD_BY_ID: c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: c_int = 15;
const BPF_LINK_CREATE: c_int = 28;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
/// `enum bpf_attach_type` value for XDP links.
const BPF_XDP: u32 = 37;
/// `enum bpf_attach_type` value for tc ingress links (`tcx`, Linux 6.6).
const BPF_TCX_INGRESS: u32 = 46;
/// `TCX_DROP`: a tcx program's verdict that frees the frame.
const TCX_DROP: i32 = 2;

/// Name of the tc ingress program of an `af_packet` port.
const DROP_PROG_NAME: &str = "vrhost_hostdrop";

/// `XDP_FLAGS_SKB_MODE`: generic XDP, run on the skb, works on any device.
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver before any skb.
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

// Instruction encoding (Documentation/bpf/standardization/instruction-set.rst).
const BPF_LDX_W_MEM: u8 = 0x61; // BPF_LDX | BPF_W | BPF_MEM
const BPF_LD_DW_IMM: u8 = 0x18; // BPF_LD | BPF_DW | BPF_IMM
const BPF_ALU64_MOV_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const BPF_JMP_CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
const BPF_JMP_EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// `struct bpf_insn`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Insn {
    code: u8,
    /// `dst_reg:4, src_reg:4` as a C bitfield: dst in the low nibble on
    /// little-endian targets, in the high nibble on big-endian ones.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    let regs = if cfg!(target_endian = "little") {
        (src << 4) | (dst & 0xf)
    } else {
        (dst << 4) | (src & 0xf)
    };
    Insn {
        code,
        regs,
        off,
        imm,
    }
}

/// The redirect program, with `map_fd` patched into its `ld_imm64`.
pub(crate) fn redirect_program(map_fd: i32) -> [Insn; 6] {
    [
        insn(BPF_LDX_W_MEM, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
        insn(BPF_LD_DW_IMM, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0), // upper 32 bits of the 64-bit immediate
        insn(BPF_ALU64_MOV_K, 3, 0, 0, XDP_PASS),
        insn(BPF_JMP_CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        insn(BPF_JMP_EXIT, 0, 0, 0, 0),
    ]
}

/// The prefix of `union bpf_attr` for BPF_MAP_CREATE.
#[repr(C)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// BPF_MAP_UPDATE_ELEM / BPF_MAP_DELETE_ELEM.
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// BPF_PROG_LOAD, up to `expected_attach_type`.
#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// BPF_LINK_CREATE for XDP and tcx (no relative program, any revision).
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// BPF_PROG_GET_FD_BY_ID.
#[repr(C)]
struct GetFdByIdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// BPF_OBJ_GET_INFO_BY_FD.
#[repr(C)]
struct ObjInfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The prefix of `struct bpf_prog_info` up to `name`.
#[repr(C)]
struct ProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

/// Marker for the attr structs above: `#[repr(C)]`, integers only, so the
/// kernel may read and write them as raw bytes.
///
/// # Safety
///
/// Implement only for `#[repr(C)]` structs of integers that are a prefix
/// of `union bpf_attr` for some command.
unsafe trait Attr {}
// SAFETY: all five are `#[repr(C)]` integer-only prefixes of `union bpf_attr`.
unsafe impl Attr for MapCreateAttr {}
// SAFETY: as above.
unsafe impl Attr for MapElemAttr {}
// SAFETY: as above.
unsafe impl Attr for ProgLoadAttr {}
// SAFETY: as above.
unsafe impl Attr for LinkCreateAttr {}
// SAFETY: as above.
unsafe impl Attr for GetFdByIdAttr {}
// SAFETY: as above.
unsafe impl Attr for ObjInfoAttr {}

/// `bpf(cmd, attr, sizeof(*attr))`. Returns the syscall's non-negative
/// result (a new fd for the commands that create objects).
fn bpf<A: Attr>(cmd: c_int, attr: &mut A) -> io::Result<c_int> {
    // SAFETY: `attr` is a live, writable, `#[repr(C)]` prefix of `union
    // bpf_attr` (trait `Attr`), and the size passed is its exact size: the
    // kernel copies in that many bytes, zero-fills the rest of its own
    // copy, and writes back into at most that many. Any pointers inside
    // (`insns`, `license`, `log_buf`, `info`) are set by the callers below
    // to buffers that outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut A, size_of::<A>()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    c_int::try_from(rc).map_err(|_| io::Error::other("bpf() returned an out-of-range value"))
}

fn owned(fd: c_int) -> OwnedFd {
    // SAFETY: `fd` was just returned by a bpf() command that creates a new
    // file descriptor, and nobody else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn name16(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = b;
    }
    out
}

fn fd_u32(fd: &OwnedFd) -> u32 {
    fd.as_raw_fd() as u32
}

/// Creates an XSKMAP of `entries` slots (key: rx queue, value: socket fd).
pub(crate) fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut a = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_flags: 0,
        inner_map_fd: 0,
        numa_node: 0,
        map_name: name16(MAP_NAME),
    };
    bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Puts socket `xsk` into slot `queue`.
pub(crate) fn map_set(map: &OwnedFd, queue: u32, xsk: &OwnedFd) -> io::Result<()> {
    let key = queue;
    let value = fd_u32(xsk);
    let mut a = MapElemAttr {
        map_fd: fd_u32(map),
        _pad: 0,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0, // BPF_ANY
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
}

/// Empties slot `queue`.
pub(crate) fn map_clear(map: &OwnedFd, queue: u32) -> io::Result<()> {
    let key = queue;
    let mut a = MapElemAttr {
        map_fd: fd_u32(map),
        _pad: 0,
        key: &key as *const u32 as u64,
        value: 0,
        flags: 0,
    };
    bpf(BPF_MAP_DELETE_ELEM, &mut a).map(drop)
}

/// Loads the redirect program for `map` under `name`. On failure the
/// load is repeated with the verifier log on, and the log is returned in
/// the error.
pub(crate) fn load_redirect_program(map: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    let prog = redirect_program(map.as_raw_fd());
    load_program(BPF_PROG_TYPE_XDP, &prog, name, BPF_XDP)
}

/// The tc ingress program that drops every frame: `r0 = TCX_DROP; exit`.
fn drop_program() -> [Insn; 2] {
    [
        insn(BPF_ALU64_MOV_K, 0, 0, 0, TCX_DROP),
        insn(BPF_JMP_EXIT, 0, 0, 0, 0),
    ]
}

/// Loads [`drop_program`] as a tc program.
pub(crate) fn load_drop_program() -> io::Result<OwnedFd> {
    load_program(BPF_PROG_TYPE_SCHED_CLS, &drop_program(), DROP_PROG_NAME, 0)
}

/// Loads `prog` as a program of type `prog_type` under `name`. On failure
/// the load is repeated with the verifier log on, and the log is returned
/// in the error.
fn load_program(
    prog_type: u32,
    prog: &[Insn],
    name: &str,
    expected_attach_type: u32,
) -> io::Result<OwnedFd> {
    let license = b"GPL\0";
    let load = |log: &mut [u8]| {
        let mut a = ProgLoadAttr {
            prog_type,
            insn_cnt: prog.len() as u32,
            insns: prog.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: u32::from(!log.is_empty()),
            log_size: log.len() as u32,
            log_buf: if log.is_empty() {
                0
            } else {
                log.as_mut_ptr() as u64
            },
            kern_version: 0,
            prog_flags: 0,
            prog_name: name16(name),
            prog_ifindex: 0,
            expected_attach_type,
        };
        bpf(BPF_PROG_LOAD, &mut a).map(owned)
    };
    match load(&mut []) {
        Ok(fd) => Ok(fd),
        Err(first) => {
            let mut log = vec![0u8; 64 * 1024];
            match load(&mut log) {
                Ok(fd) => Ok(fd),
                Err(_) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    let text = String::from_utf8_lossy(&log[..end])
                        .trim()
                        .replace('\n', "; ");
                    Err(io::Error::new(
                        first.kind(),
                        format!("{first}; verifier log: {text}"),
                    ))
                }
            }
        }
    }
}

/// Attaches `prog` to interface `ifindex` through a bpf_link, in the mode
/// `flags` names. The program stays attached exactly as long as the
/// returned fd is open: closing it, or the process dying, detaches it.
pub(crate) fn link_create_xdp(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    link_create(prog, ifindex, BPF_XDP, flags)
}

/// Attaches tc program `prog` to interface `ifindex`'s ingress through a
/// bpf_link (`tcx`), after any programs already there. It runs after the
/// packet sockets' taps have taken their copy of each frame, and stays
/// attached exactly as long as the returned fd is open.
pub(crate) fn link_create_tcx_ingress(prog: &OwnedFd, ifindex: u32) -> io::Result<OwnedFd> {
    link_create(prog, ifindex, BPF_TCX_INGRESS, 0)
}

fn link_create(prog: &OwnedFd, ifindex: u32, attach_type: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = LinkCreateAttr {
        prog_fd: fd_u32(prog),
        target_ifindex: ifindex,
        attach_type,
        flags,
    };
    bpf(BPF_LINK_CREATE, &mut a).map(owned)
}

/// The name of loaded program `id`.
pub(crate) fn prog_name(id: u32) -> io::Result<String> {
    let mut a = GetFdByIdAttr {
        id,
        next_id: 0,
        open_flags: 0,
    };
    let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut a).map(owned)?;
    let mut info = ProgInfo {
        prog_type: 0,
        id: 0,
        tag: [0; 8],
        jited_prog_len: 0,
        xlated_prog_len: 0,
        jited_prog_insns: 0,
        xlated_prog_insns: 0,
        load_time: 0,
        created_by_uid: 0,
        nr_map_ids: 0,
        map_ids: 0,
        name: [0; 16],
    };
    let mut a = ObjInfoAttr {
        bpf_fd: fd_u32(&fd),
        info_len: size_of::<ProgInfo>() as u32,
        info: &mut info as *mut ProgInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    let end = info
        .name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(info.name.len());
    Ok(String::from_utf8_lossy(&info.name[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encodes_as_the_kernel_expects() {
        let p = redirect_program(7);
        // Each instruction as the kernel reads it: code, dst/src nibbles, off, imm.
        let bytes: Vec<[u8; 8]> = p
            .iter()
            .map(|i| {
                let mut b = [0u8; 8];
                b[0] = i.code;
                b[1] = i.regs;
                b[2..4].copy_from_slice(&i.off.to_le_bytes());
                b[4..8].copy_from_slice(&i.imm.to_le_bytes());
                b
            })
            .collect();
        if cfg!(target_endian = "little") {
            assert_eq!(bytes[0], [0x61, 0x12, 16, 0, 0, 0, 0, 0]);
            assert_eq!(bytes[1], [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
            assert_eq!(bytes[2], [0; 8]);
            assert_eq!(bytes[3], [0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
            assert_eq!(bytes[4], [0x85, 0x00, 0, 0, 51, 0, 0, 0]);
            assert_eq!(bytes[5], [0x95, 0, 0, 0, 0, 0, 0, 0]);
        }
        assert_eq!(size_of::<Insn>(), 8);
        assert_eq!(size_of::<ProgLoadAttr>(), 72);
        assert_eq!(size_of::<ProgInfo>(), 80);
    }

    #[test]
    fn names_are_cut_to_fifteen_bytes_and_terminated() {
        let n = name16("a_very_long_program_name");
        assert_eq!(&n[..15], b"a_very_long_pro");
        assert_eq!(n[15], 0);
    }
}
