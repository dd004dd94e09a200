//! Interface properties through the classic `ioctl`s on a datagram socket:
//! `SIOCGIFHWADDR` / `SIOCSIFHWADDR` (MAC), `SIOCGIFMTU` / `SIOCSIFMTU`,
//! `SIOCGIFFLAGS` / `SIOCSIFFLAGS` (up), and the index.
//!
//! A port defaults to the Linux interface's MAC and MTU; TAP mirrors copy a
//! VR interface's MAC and MTU. Every call acts in the network namespace of
//! the calling thread (see [`crate::netns`]).
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};

use crate::sys::{self, last_err, sys_err, zeroed};
use crate::IoError;

/// A throwaway socket to issue interface ioctls on.
fn ioctl_socket(ifname: &str) -> Result<OwnedFd, IoError> {
    sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)
        .map_err(|e| sys_err(ifname, "socket(AF_INET)", e))
}

/// An `ifreq` naming `ifname`.
fn ifreq(ifname: &str) -> Result<libc::ifreq, IoError> {
    let mut req: libc::ifreq = zeroed();
    req.ifr_name = sys::ifname_array(ifname)?;
    Ok(req)
}

/// Runs one interface ioctl.
fn ioctl(
    ifname: &str,
    fd: &OwnedFd,
    request: libc::Ioctl,
    req: &mut libc::ifreq,
    call: &'static str,
) -> Result<(), IoError> {
    // SAFETY: every request used here (SIOC[GS]IF{HWADDR,MTU,FLAGS}) reads
    // and/or writes one `struct ifreq`, and `req` is a live, writable one.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, req as *mut libc::ifreq) };
    if rc < 0 {
        return Err(last_err(ifname, call));
    }
    Ok(())
}

/// The interface's index.
pub fn ifindex(ifname: &str) -> Result<u32, IoError> {
    sys::ifindex(ifname)
}

/// The interface's Ethernet address (`SIOCGIFHWADDR`).
pub fn mac(ifname: &str) -> Result<[u8; 6], IoError> {
    let fd = ioctl_socket(ifname)?;
    let mut req = ifreq(ifname)?;
    ioctl(
        ifname,
        &fd,
        libc::SIOCGIFHWADDR,
        &mut req,
        "ioctl(SIOCGIFHWADDR)",
    )?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member of the union;
    // reading a `sockaddr` of integers is valid for any bytes.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    if sa.sa_family != libc::ARPHRD_ETHER {
        return Err(IoError::Setup {
            ifname: ifname.to_string(),
            reason: format!("not an Ethernet interface (ARPHRD {})", sa.sa_family),
        });
    }
    let mut out = [0u8; 6];
    for (o, b) in out.iter_mut().zip(sa.sa_data.iter()) {
        *o = *b as u8;
    }
    Ok(out)
}

/// Sets the interface's Ethernet address (`SIOCSIFHWADDR`).
pub fn set_mac(ifname: &str, addr: [u8; 6]) -> Result<(), IoError> {
    let fd = ioctl_socket(ifname)?;
    let mut req = ifreq(ifname)?;
    let mut sa: libc::sockaddr = libc::sockaddr {
        sa_family: libc::ARPHRD_ETHER,
        sa_data: [0; 14],
    };
    for (o, b) in sa.sa_data.iter_mut().zip(addr) {
        *o = b as libc::c_char;
    }
    req.ifr_ifru.ifru_hwaddr = sa;
    ioctl(
        ifname,
        &fd,
        libc::SIOCSIFHWADDR,
        &mut req,
        "ioctl(SIOCSIFHWADDR)",
    )
}

/// The interface's MTU (`SIOCGIFMTU`).
pub fn mtu(ifname: &str) -> Result<u32, IoError> {
    let fd = ioctl_socket(ifname)?;
    let mut req = ifreq(ifname)?;
    ioctl(ifname, &fd, libc::SIOCGIFMTU, &mut req, "ioctl(SIOCGIFMTU)")?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| IoError::Setup {
        ifname: ifname.to_string(),
        reason: format!("kernel reports MTU {mtu}"),
    })
}

/// Sets the interface's MTU (`SIOCSIFMTU`).
pub fn set_mtu(ifname: &str, mtu: u32) -> Result<(), IoError> {
    let fd = ioctl_socket(ifname)?;
    let mut req = ifreq(ifname)?;
    req.ifr_ifru.ifru_mtu = i32::try_from(mtu).map_err(|_| IoError::Setup {
        ifname: ifname.to_string(),
        reason: format!("MTU {mtu} out of range"),
    })?;
    ioctl(ifname, &fd, libc::SIOCSIFMTU, &mut req, "ioctl(SIOCSIFMTU)")
}

/// Brings the interface up (`IFF_UP` through `SIOCSIFFLAGS`).
pub fn set_up(ifname: &str) -> Result<(), IoError> {
    let fd = ioctl_socket(ifname)?;
    let mut req = ifreq(ifname)?;
    ioctl(
        ifname,
        &fd,
        libc::SIOCGIFFLAGS,
        &mut req,
        "ioctl(SIOCGIFFLAGS)",
    )?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    ioctl(
        ifname,
        &fd,
        libc::SIOCSIFFLAGS,
        &mut req,
        "ioctl(SIOCSIFFLAGS)",
    )
}
