//! Just enough rtnetlink for XDP:
//!
//! - `RTM_GETLINK` → `IFLA_XDP`: which programs an interface runs, per mode;
//! - `RTM_SETLINK` with `IFLA_XDP_FD`: attach a program the pre-`bpf_link`
//!   way, or detach one (fd −1).
//!
//! A program attached through netlink holds its own reference, so it stays
//! on the interface after the process that attached it is gone. That is the
//! only way a stale program can outlive a crashed run (a `bpf_link` dies
//! with its fd), and so the only thing [`super::AfXdpPort::open`] has to
//! clean up. Each request uses a fresh socket, which belongs to the calling
//! thread's network namespace.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::sys::{self, zeroed};

const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;
const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `NLM_F_ACK_TLVS`: an error message carries extended-ack attributes.
const NLM_F_ACK_TLVS: u16 = 0x200;
/// `NLMSGERR_ATTR_MSG`: the human-readable reason.
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;

/// Programs attached to one interface, by mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpAttached {
    /// Native (driver) mode program id.
    pub drv: Option<u32>,
    /// Generic (skb) mode program id.
    pub skb: Option<u32>,
    /// Offloaded (NIC) program id.
    pub hw: Option<u32>,
}

impl XdpAttached {
    /// True when no program is attached in any mode.
    pub fn is_empty(&self) -> bool {
        self.drv.is_none() && self.skb.is_none() && self.hw.is_none()
    }
}

/// A netlink error: the errno and, when the kernel sent one, its
/// extended-ack message (e.g. "Can't replace active BPF XDP link").
#[derive(Debug)]
pub(crate) struct NlError {
    pub errno: i32,
    pub msg: Option<String>,
}

impl From<NlError> for io::Error {
    fn from(e: NlError) -> io::Error {
        let base = io::Error::from_raw_os_error(e.errno);
        match e.msg {
            Some(m) => io::Error::new(base.kind(), format!("{base} ({m})")),
            None => base,
        }
    }
}

impl From<io::Error> for NlError {
    fn from(e: io::Error) -> NlError {
        NlError {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            msg: None,
        }
    }
}

fn push_attr(buf: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// A `struct nlmsghdr` + `struct ifinfomsg` for `ifindex`, then `attrs`.
fn link_message(ty: u16, flags: u16, ifindex: u32, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(NLMSG_HDRLEN + IFINFOMSG_LEN + attrs.len());
    let len = (NLMSG_HDRLEN + IFINFOMSG_LEN + attrs.len()) as u32;
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel fills it
    m.push(libc::AF_UNSPEC as u8); // ifi_family
    m.push(0); // pad
    m.extend_from_slice(&0u16.to_ne_bytes()); // ifi_type
    m.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // ifi_flags
    m.extend_from_slice(&0u32.to_ne_bytes()); // ifi_change
    m.extend_from_slice(attrs);
    m
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Walks the attributes in `b`: `(type without flags, payload)`.
fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(b, at)?);
        let ty = u16_at(b, at + 2)? & NLA_TYPE_MASK;
        if len < 4 || at + len > b.len() {
            return None;
        }
        let payload = &b[at + 4..at + len];
        at += len.next_multiple_of(4);
        Some((ty, payload))
    })
}

fn socket() -> Result<OwnedFd, NlError> {
    let fd = sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)?;
    let one: libc::c_int = 1;
    // Best effort: a reason string on errors, and no echo of our request.
    let _ = sys::setsockopt(&fd, libc::SOL_NETLINK, libc::NETLINK_EXT_ACK, &one);
    let _ = sys::setsockopt(&fd, libc::SOL_NETLINK, libc::NETLINK_CAP_ACK, &one);
    let mut sa: libc::sockaddr_nl = zeroed();
    sa.nl_family = libc::AF_NETLINK as u16;
    sys::bind(&fd, &sa)?;
    Ok(fd)
}

/// Sends `msg` and returns the payload (after the `nlmsghdr`) of the
/// kernel's answer: an `RTM_NEWLINK`, or nothing for a plain ack.
fn request(msg: &[u8]) -> Result<Vec<u8>, NlError> {
    let fd = socket()?;
    // SAFETY: `msg` is a live buffer of `msg.len()` bytes that the kernel
    // only reads; the destination is left null (the kernel, for netlink).
    let rc = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error().into());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes; the
        // kernel writes at most that many.
        let rc = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e.into());
        }
        let got = &buf[..rc as usize];
        let mut at = 0usize;
        while let (Some(len), Some(ty), Some(flags)) =
            (u32_at(got, at), u16_at(got, at + 4), u16_at(got, at + 6))
        {
            let len = len as usize;
            if len < NLMSG_HDRLEN || at + len > got.len() {
                break;
            }
            let body = &got[at + NLMSG_HDRLEN..at + len];
            if ty == libc::NLMSG_ERROR as u16 {
                let errno = u32_at(body, 0).map_or(libc::EIO, |e| -(e as i32));
                if errno == 0 {
                    return Ok(Vec::new());
                }
                let mut msg = None;
                if flags & NLM_F_ACK_TLVS != 0 {
                    // With NETLINK_CAP_ACK the echoed request is only its
                    // header: error (4) + nlmsghdr (16), then the TLVs.
                    let tlvs = body.get(4 + NLMSG_HDRLEN..).unwrap_or(&[]);
                    msg = attrs(tlvs)
                        .find(|(t, _)| *t == NLMSGERR_ATTR_MSG)
                        .map(|(_, p)| {
                            let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
                            String::from_utf8_lossy(&p[..end]).into_owned()
                        });
                }
                return Err(NlError { errno, msg });
            }
            if ty == libc::RTM_NEWLINK {
                return Ok(body.to_vec());
            }
            at += len.next_multiple_of(4);
        }
    }
}

/// Which XDP programs interface `ifindex` runs.
pub(crate) fn query(ifindex: u32) -> Result<XdpAttached, NlError> {
    let msg = link_message(libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16, ifindex, &[]);
    let body = request(&msg)?;
    let mut out = XdpAttached::default();
    let Some(link_attrs) = body.get(IFINFOMSG_LEN..) else {
        return Ok(out);
    };
    for (ty, payload) in attrs(link_attrs) {
        if ty != IFLA_XDP {
            continue;
        }
        for (xty, x) in attrs(payload) {
            let id = u32_at(x, 0).filter(|&id| id != 0);
            match xty {
                IFLA_XDP_DRV_PROG_ID => out.drv = id,
                IFLA_XDP_SKB_PROG_ID => out.skb = id,
                IFLA_XDP_HW_PROG_ID => out.hw = id,
                _ => {}
            }
        }
    }
    Ok(out)
}

/// Attaches program `prog_fd` (or, with −1, detaches whatever program
/// netlink attached) in the mode `flags` names.
pub(crate) fn set(ifindex: u32, prog_fd: i32, flags: u32) -> Result<(), NlError> {
    let mut inner = Vec::new();
    push_attr(&mut inner, IFLA_XDP_FD, &prog_fd.to_ne_bytes());
    push_attr(&mut inner, IFLA_XDP_FLAGS, &flags.to_ne_bytes());
    let mut outer = Vec::new();
    push_attr(&mut outer, IFLA_XDP | NLA_F_NESTED, &inner);
    let msg = link_message(
        libc::RTM_SETLINK,
        (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16,
        ifindex,
        &outer,
    );
    request(&msg).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_and_stop_at_garbage() {
        let mut b = Vec::new();
        push_attr(&mut b, 5, &7u32.to_ne_bytes());
        push_attr(&mut b, 6 | NLA_F_NESTED, &[1, 2, 3]);
        b.extend_from_slice(&[0xff, 0xff, 0, 0]); // length past the end
        let got: Vec<(u16, Vec<u8>)> = attrs(&b).map(|(t, p)| (t, p.to_vec())).collect();
        assert_eq!(
            got,
            vec![(5, 7u32.to_ne_bytes().to_vec()), (6, vec![1, 2, 3])]
        );
    }

    #[test]
    fn link_message_has_consistent_length() {
        let m = link_message(libc::RTM_GETLINK, 1, 3, &[0; 8]);
        assert_eq!(u32_at(&m, 0), Some(m.len() as u32));
        assert_eq!(m.len(), NLMSG_HDRLEN + IFINFOMSG_LEN + 8);
    }
}
