//! Waiting for frames instead of spinning.
//!
//! A worker that found nothing to do for a while blocks in `ppoll(2)` on
//! the file descriptors of the queues it reads ([`crate::Port::wait_fds`]):
//! the kernel wakes it as soon as one of them has a frame, and the core is
//! free meanwhile for the tenants' own processes and for the kernel's work
//! on the same links (a veth peer's stack, a VM's vhost thread). A wait
//! has a deadline, so the worker's timers and the control side's news are
//! never held up for longer than that.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Blocks until one of `fds` is readable or `timeout` has passed. Returns
/// whether one is readable; false on timeout, and also when `ppoll` fails
/// (a signal, say), after which the caller simply looks at its queues
/// again. Returns at once, false, for an empty `fds`.
pub fn readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> bool {
    if fds.is_empty() {
        return false;
    }
    let mut set: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits any `c_long`.
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` is an array of `set.len()` initialised `pollfd`s that
    // lives across the call, whose descriptors stay open for it (they are
    // borrowed); `ts` is a valid timespec; a null signal mask leaves the
    // thread's mask as it is.
    let n = unsafe {
        libc::ppoll(
            set.as_mut_ptr(),
            set.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    n > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    #[test]
    fn waits_out_its_timeout_when_nothing_arrives() {
        let (a, _b) = UnixStream::pair().expect("socketpair");
        let t = Instant::now();
        assert!(!readable(&[a.as_fd()], Duration::from_millis(30)));
        assert!(
            t.elapsed() >= Duration::from_millis(25),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn returns_when_any_descriptor_has_data() {
        let (a, _b) = UnixStream::pair().expect("socketpair");
        let (c, mut d) = UnixStream::pair().expect("socketpair");
        d.write_all(b"x").expect("write");
        assert!(readable(&[a.as_fd(), c.as_fd()], Duration::from_secs(10)));
    }

    #[test]
    fn wakes_when_data_arrives_during_the_wait() {
        let (a, mut b) = UnixStream::pair().expect("socketpair");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b.write_all(b"x").expect("write");
            b
        });
        let t = Instant::now();
        assert!(readable(&[a.as_fd()], Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(writer.join());
    }

    #[test]
    fn nothing_to_wait_on_returns_at_once() {
        let t = Instant::now();
        assert!(!readable(&[], Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
