//! Network namespaces: move a thread into one, as `ip netns exec` does.
//!
//! A socket, an interface index, a TAP device and an XDP attachment all
//! belong to the network namespace of the thread that created them, and
//! keep belonging to it afterwards. So to open a port inside a VR's
//! namespace, do it on a thread that has entered that namespace; the port
//! can then be used from any thread. `setns(CLONE_NEWNET)` changes only the
//! calling thread, so enter from a dedicated thread ([`run_in`] does that).
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

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
