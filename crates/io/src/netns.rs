//! Network namespaces: move a thread into one, as `ip netns exec` does.
//!
//! A socket, an interface index, a TAP device and an XDP attachment all
//! belong to the network namespace of the thread that created them, and
//! keep belonging to it afterwards. So to open a port inside a VR's
//! namespace, do it on a thread that has entered that namespace; the port
//! can then be used from any thread. `setns(CLONE_NEWNET)` changes only the
//! calling thread, so enter from a dedicated thread ([`run_in`] does that).
//!
//! [`create`] and [`delete`] make and remove a named namespace the way
//! `ip netns add` / `ip netns del` do, so that `ip -n NAME`, `ip netns exec`
//! and FRR/BIRD started there see the same namespace:
//!
//! ```text
//!   /run/netns                 tmpfs dir, made a shared mount point (once)
//!   /run/netns/NAME            empty file ──bind mount── /proc/<tid>/ns/net
//!                                             of a throwaway thread that
//!                                             unshare(CLONE_NEWNET)ed
//! ```
//!
//! The bind mount is what keeps the namespace alive after the thread exits.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::sys::last_err;
use crate::IoError;

/// Where `ip netns add NAME` leaves its handle.
fn path_of(name: &str) -> PathBuf {
    if name.contains('/') {
        PathBuf::from(name)
    } else {
        PathBuf::from("/run/netns").join(name)
    }
}

/// Moves the calling thread into network namespace `name` (a name under
/// `/run/netns`, or a path such as `/proc/PID/ns/net`).
pub fn enter(name: &str) -> Result<(), IoError> {
    let path = path_of(name);
    let file = File::open(&path).map_err(|source| IoError::File {
        path: path.display().to_string(),
        source,
    })?;
    // SAFETY: setns() takes a file descriptor that `file` keeps open across
    // the call, and a flag; it touches no memory of ours.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(last_err(name, "setns(CLONE_NEWNET)"));
    }
    Ok(())
}

/// Runs `f` on a fresh thread inside network namespace `name` and returns
/// its result. The caller's own thread never changes namespace.
pub fn run_in<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T, IoError> {
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            enter(name)?;
            Ok(f())
        });
        match h.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// The directory `ip netns` keeps its namespace handles in.
const NETNS_RUN_DIR: &str = "/run/netns";

/// A path as a C string (paths never contain NUL here, but a name from a
/// user might).
fn c_path(path: &Path) -> Result<CString, IoError> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| IoError::Setup {
        ifname: path.display().to_string(),
        reason: "path contains a NUL byte".into(),
    })
}

/// `mount(2)` with no data argument.
fn mount(
    src: &Path,
    target: &Path,
    fstype: &str,
    flags: libc::c_ulong,
    call: &'static str,
) -> Result<(), IoError> {
    let src_c = c_path(src)?;
    let target_c = c_path(target)?;
    let fstype_c = c_path(Path::new(fstype))?;
    // SAFETY: the three pointers are NUL-terminated strings that live until
    // the call returns; data is NULL, which mount() accepts for bind and
    // propagation changes. mount() writes through none of them.
    let rc = unsafe {
        libc::mount(
            src_c.as_ptr(),
            target_c.as_ptr(),
            fstype_c.as_ptr(),
            flags,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        return Err(last_err(&target.display().to_string(), call));
    }
    Ok(())
}

/// Makes `/run/netns` a shared mount point, as iproute2 does before its
/// first `ip netns add`: the bind mounts made under it then propagate into
/// mount namespaces created later (systemd services, containers), so they
/// see the network namespace too. If it is not a mount point yet, bind-mount
/// it onto itself first (`EINVAL` from the first attempt says so).
fn share_run_dir() -> Result<(), IoError> {
    let dir = Path::new(NETNS_RUN_DIR);
    std::fs::create_dir_all(dir).map_err(|source| IoError::File {
        path: NETNS_RUN_DIR.into(),
        source,
    })?;
    let none = Path::new("none");
    let shared = libc::MS_SHARED | libc::MS_REC;
    match mount(none, dir, "none", shared, "mount(MS_SHARED|MS_REC)") {
        Ok(()) => Ok(()),
        Err(IoError::Sys { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
            mount(
                dir,
                dir,
                "none",
                libc::MS_BIND | libc::MS_REC,
                "mount(MS_BIND|MS_REC)",
            )?;
            mount(none, dir, "none", shared, "mount(MS_SHARED|MS_REC)")
        }
        Err(e) => Err(e),
    }
}

/// Creates network namespace `name` exactly as `ip netns add NAME` does: a
/// fresh namespace from `unshare(CLONE_NEWNET)` on a throwaway thread,
/// bind-mounted onto `/run/netns/NAME` so it outlives the thread.
///
/// Fails with [`IoError::File`] of kind `AlreadyExists` if the handle is
/// already there (adopt it instead). The calling thread's namespace never
/// changes. The new namespace has only `lo`, and it is down.
pub fn create(name: &str) -> Result<(), IoError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(IoError::Setup {
            ifname: name.into(),
            reason: "a namespace name must be non-empty and contain no '/'".into(),
        });
    }
    share_run_dir()?;
    let path = path_of(name);
    // The mount point: an empty file, created exclusively so that two
    // creators of the same name cannot both succeed.
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(&path)
        .map_err(|source| IoError::File {
            path: path.display().to_string(),
            source,
        })?;
    let made = std::thread::scope(|s| {
        s.spawn(|| -> Result<(), IoError> {
            // SAFETY: unshare() takes only a flag and touches no memory of
            // ours; CLONE_NEWNET affects just this (throwaway) thread.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            if rc < 0 {
                return Err(last_err(name, "unshare(CLONE_NEWNET)"));
            }
            mount(
                Path::new("/proc/thread-self/ns/net"),
                &path,
                "none",
                libc::MS_BIND,
                "mount(MS_BIND /proc/thread-self/ns/net)",
            )
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    if let Err(e) = made {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(())
}

/// Removes network namespace `name` as `ip netns del NAME` does: detaches
/// the bind mount and deletes the handle. The namespace itself disappears
/// once no process, thread or open file refers to it any more.
pub fn delete(name: &str) -> Result<(), IoError> {
    let path = path_of(name);
    let c = c_path(&path)?;
    // SAFETY: `c` is a NUL-terminated path that lives until the call
    // returns; umount2() only reads it.
    let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        // EINVAL: not a mount point (a stale handle); still remove the file.
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(IoError::Sys {
                ifname: name.into(),
                call: "umount2(MNT_DETACH)",
                source: err,
            });
        }
    }
    std::fs::remove_file(&path).map_err(|source| IoError::File {
        path: path.display().to_string(),
        source,
    })
}

/// Identity of the calling thread's network namespace (device and inode of
/// `/proc/thread-self/ns/net`): interface indexes are only unique within it.
pub(crate) fn current_id() -> Result<(u64, u64), IoError> {
    let path = "/proc/thread-self/ns/net";
    let m = std::fs::metadata(path).map_err(|source| IoError::File {
        path: path.to_string(),
        source,
    })?;
    Ok((m.dev(), m.ino()))
}
