//! Checked wrappers over the libc calls the kernel-facing drivers share:
//! sockets, socket options, `mmap`ed ring memory and interface names.
//!
//! Everything here returns `std::io::Error` (or [`IoError::Sys`] where the
//! interface is known), never panics on what the kernel answers, and is
//! used only while a port is being set up, or once per burst.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use crate::IoError;

/// Builds an [`IoError::Sys`] from `errno`.
pub(crate) fn last_err(ifname: &str, call: &'static str) -> IoError {
    IoError::Sys {
        ifname: ifname.to_string(),
        call,
        source: io::Error::last_os_error(),
    }
}

/// Builds an [`IoError::Sys`] from an `io::Error`.
pub(crate) fn sys_err(ifname: &str, call: &'static str, source: io::Error) -> IoError {
    IoError::Sys {
        ifname: ifname.to_string(),
        call,
        source,
    }
}

/// Plain C structs for which every bit pattern, all-zero included, is a
/// valid value: integers and arrays of integers, no pointers to Rust data,
/// no enums, no references.
///
/// # Safety
///
/// Implement only for `#[repr(C)]` types made of integers (and arrays or
/// unions of them).
pub(crate) unsafe trait Pod: Copy {}

// SAFETY: each of these is a `#[repr(C)]` kernel UAPI struct made only of
// integer fields (or nested structs / unions of integers).
unsafe impl Pod for libc::tpacket_stats {}
// SAFETY: as above.
unsafe impl Pod for libc::xdp_mmap_offsets {}
// SAFETY: as above.
unsafe impl Pod for libc::xdp_statistics {}
// SAFETY: as above.
unsafe impl Pod for libc::ifreq {}
// SAFETY: as above.
unsafe impl Pod for libc::sockaddr_ll {}
// SAFETY: as above.
unsafe impl Pod for libc::sockaddr_xdp {}
// SAFETY: as above.
unsafe impl Pod for libc::sockaddr_nl {}
// SAFETY: as above.
unsafe impl Pod for libc::xdp_desc {}
// SAFETY: a plain C int.
unsafe impl Pod for c_int {}
// SAFETY: a plain integer (FILL / COMPLETION ring entries).
unsafe impl Pod for u64 {}

/// An all-zero `T`.
pub(crate) fn zeroed<T: Pod>() -> T {
    // SAFETY: `Pod` guarantees the all-zero bit pattern is a valid `T`.
    unsafe { std::mem::zeroed() }
}

/// `socket(2)` with `SOCK_CLOEXEC`.
pub(crate) fn socket(domain: c_int, ty: c_int, protocol: c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; any arguments are memory-safe.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(2)` with a value of type `T`.
pub(crate) fn setsockopt<T>(fd: &OwnedFd, level: c_int, name: c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of exactly `size_of::<T>()` bytes,
    // which the kernel only reads during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `getsockopt(2)` into a zeroed `T`. A shorter answer (an older kernel's
/// smaller struct) leaves the tail zero.
pub(crate) fn getsockopt<T: Pod>(fd: impl AsFd, level: c_int, name: c_int) -> io::Result<T> {
    let mut value: T = zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a writable `T` of `len` bytes; the kernel writes at
    // most `len` bytes and updates `len`. Any bytes it writes form a valid
    // `T` because `T: Pod`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// `bind(2)` to a socket address of type `T` (`sockaddr_ll`, `sockaddr_xdp`,
/// `sockaddr_nl`).
pub(crate) fn bind<T: Pod>(fd: &OwnedFd, addr: &T) -> io::Result<()> {
    // SAFETY: `addr` points to a live `T` of `size_of::<T>()` bytes, which
    // the kernel only reads.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (addr as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`: the "kick" that makes
/// AF_PACKET transmit its tx ring and AF_XDP process its tx ring.
pub(crate) fn kick_tx(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: a zero-length send with null buffer and address pointers; the
    // kernel dereferences neither.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL)`: wakes an AF_XDP
/// socket's rx processing when the kernel asked for it (need_wakeup).
pub(crate) fn kick_rx(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: a zero-length receive with null buffer and address pointers;
    // the kernel writes through neither.
    let rc = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True for the errno values that mean "try again later" on a
/// non-blocking socket or a busy queue, not a broken port.
pub(crate) fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) | Some(libc::EINTR)
    )
}

/// An owned memory mapping, unmapped on drop.
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a mapping is plain memory owned by this value; nothing about it
// is tied to the thread that created it, so moving it between threads is
// sound. It is not `Sync`: shared access goes through the drivers' `&mut`.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` at `offset`, shared with the kernel
    /// (AF_PACKET and AF_XDP rings), pre-faulted.
    pub(crate) fn shared(fd: &OwnedFd, len: usize, offset: libc::off_t) -> io::Result<Mmap> {
        // SAFETY: asks the kernel for a fresh mapping (address hint null); no
        // existing memory is touched. The result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset,
            )
        };
        Self::check(p, len)
    }

    /// Maps `len` bytes of zeroed anonymous memory (an AF_XDP UMEM),
    /// pre-faulted.
    pub(crate) fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // touched. The result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        Self::check(p, len)
    }

    fn check(p: *mut libc::c_void, len: usize) -> io::Result<Mmap> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        match NonNull::new(p.cast::<u8>()) {
            Some(ptr) => Ok(Mmap { ptr, len }),
            None => Err(io::Error::other("mmap returned a null mapping")),
        }
    }

    /// Start of the mapping.
    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and
        // still owns; no reference into it outlives `self` (the drivers only
        // hand out copies of the bytes).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The interface name as the fixed-size, NUL-terminated array the kernel
/// wants in `ifreq.ifr_name`.
pub(crate) fn ifname_array(ifname: &str) -> Result<[libc::c_char; libc::IFNAMSIZ], IoError> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty()
        || bytes.len() >= libc::IFNAMSIZ
        || bytes.contains(&0)
        || bytes.contains(&b'/')
    {
        return Err(IoError::Setup {
            ifname: ifname.to_string(),
            reason: format!(
                "not a valid interface name (1 to {} bytes, no NUL or '/')",
                libc::IFNAMSIZ - 1
            ),
        });
    }
    let mut out = [0 as libc::c_char; libc::IFNAMSIZ];
    for (o, b) in out.iter_mut().zip(bytes) {
        *o = *b as libc::c_char;
    }
    Ok(out)
}

/// The interface's index in the calling thread's network namespace.
pub(crate) fn ifindex(ifname: &str) -> Result<u32, IoError> {
    let name = ifname_array(ifname)?;
    // SAFETY: `name` is a NUL-terminated C string that lives across the call.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if idx == 0 {
        return Err(last_err(ifname, "if_nametoindex"));
    }
    Ok(idx)
}
