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

/// How a wait ([`readable`]) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// A descriptor has something to read.
    Readable,
    /// The deadline passed (or a signal came) with nothing to read.
    TimedOut,
    /// A descriptor reports an error or a hang-up that reading it does not
    /// clear (a TAP whose device went away), or `ppoll` itself failed:
    /// waiting would return at once, every time, so the caller should nap
    /// instead.
    Unwaitable,
}

/// Blocks until one of `fds` is readable or `timeout` has passed.
///
/// A socket with a pending error (an interface going down sets one on every
/// packet socket bound to it) reports it at every wait until something
/// reads it: it is read here (`SO_ERROR`, which clears it), logged, and the
/// wait counts as timed out, so the next one blocks again. Any other error
/// or hang-up is [`Waited::Unwaitable`]. Returns [`Waited::TimedOut`] at
/// once for an empty `fds`.
pub fn readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> Waited {
    if fds.is_empty() {
        return Waited::TimedOut;
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
    if n == 0 {
        return Waited::TimedOut;
    }
    if n < 0 {
        // A signal ends a wait early; anything else (no memory for the
        // descriptor table) would end every wait at once.
        let interrupted = std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
        return match interrupted {
            true => Waited::TimedOut,
            false => Waited::Unwaitable,
        };
    }
    if set.iter().any(|p| p.revents & libc::POLLIN != 0) {
        return Waited::Readable;
    }
    let mut waited = Waited::TimedOut;
    for (p, &fd) in set.iter().zip(fds).filter(|(p, _)| p.revents != 0) {
        let cleared = p.revents & (libc::POLLHUP | libc::POLLNVAL) == 0
            && p.revents & libc::POLLERR != 0
            && take_socket_error(fd);
        if !cleared {
            waited = Waited::Unwaitable;
        }
    }
    waited
}

/// Waits on one queue's descriptors ([`crate::Port::wait_fds`]) as
/// [`readable`] does; `None` where the queue has none to wait on.
pub fn port(port: &dyn crate::Port, timeout: Duration) -> Option<Waited> {
    let mut fds = Vec::new();
    (port.wait_fds(&mut fds) && !fds.is_empty()).then(|| readable(&fds, timeout))
}

/// Reads (and so clears) the pending error of socket `fd`; false where `fd`
/// is not a socket or had none.
fn take_socket_error(fd: BorrowedFd<'_>) -> bool {
    match crate::sys::getsockopt::<libc::c_int>(fd, libc::SOL_SOCKET, libc::SO_ERROR) {
        Ok(err) if err != 0 => {
            tracing::debug!(
                fd = fd.as_raw_fd(),
                error = %std::io::Error::from_raw_os_error(err),
                "a queue's socket reported an error while its worker waited"
            );
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    /// A 30 ms wait on `fd` alone times out, and takes its 30 ms.
    fn waits_its_30_ms(fd: BorrowedFd<'_>) {
        let t = Instant::now();
        assert_eq!(readable(&[fd], Duration::from_millis(30)), Waited::TimedOut);
        assert!(
            t.elapsed() >= Duration::from_millis(25),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn waits_out_its_timeout_when_nothing_arrives() {
        let (a, _b) = UnixStream::pair().expect("socketpair");
        waits_its_30_ms(a.as_fd());
    }

    #[test]
    fn returns_when_any_descriptor_has_data() {
        let (a, _b) = UnixStream::pair().expect("socketpair");
        let (c, mut d) = UnixStream::pair().expect("socketpair");
        d.write_all(b"x").expect("write");
        assert_eq!(
            readable(&[a.as_fd(), c.as_fd()], Duration::from_secs(10)),
            Waited::Readable
        );
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
        assert_eq!(
            readable(&[a.as_fd()], Duration::from_secs(10)),
            Waited::Readable
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(writer.join());
    }

    #[test]
    fn an_error_reading_cannot_clear_makes_a_descriptor_unwaitable() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        drop(b);
        // A closed peer: readable (end of file), so a wait returns at once.
        assert_eq!(
            readable(&[a.as_fd()], Duration::from_secs(10)),
            Waited::Readable
        );
        let (r, w) = std::io::pipe().expect("pipe");
        drop(r);
        // A pipe's write end with its reader gone: an error that reading
        // cannot clear (it is no socket), as a deleted TAP's.
        assert_eq!(
            readable(&[w.as_fd()], Duration::from_secs(10)),
            Waited::Unwaitable
        );
    }

    #[test]
    fn a_sockets_pending_error_is_read_and_the_next_wait_blocks() {
        use std::net::UdpSocket;
        // A connected UDP socket whose peer port is closed: the ICMP port
        // unreachable that answers a datagram becomes its pending error
        // (sent again if the kernel's ICMP limit swallowed one).
        let closed = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let peer = closed.local_addr().expect("addr");
        drop(closed);
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.connect(peer).expect("connect");
        let mut read = false;
        for _ in 0..10 {
            // A send can itself report the last error; that one is read.
            let _ = s.send(b"x");
            std::thread::sleep(Duration::from_millis(20));
            let t = Instant::now();
            let waited = readable(&[s.as_fd()], Duration::from_millis(500));
            assert_eq!(waited, Waited::TimedOut, "an error is no frame");
            if t.elapsed() < Duration::from_millis(400) {
                read = true;
                break;
            }
        }
        assert!(read, "no error ever ended a wait at once");
        waits_its_30_ms(s.as_fd());
    }

    #[test]
    fn nothing_to_wait_on_returns_at_once() {
        let t = Instant::now();
        assert_eq!(readable(&[], Duration::from_secs(10)), Waited::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
