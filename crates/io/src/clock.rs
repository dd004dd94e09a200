//! Clocks for per-VR cost accounting: the time-stamp counter, its rate, and
//! the calling thread's CPU time.
//!
//! The pipeline never reads a clock itself (sans-IO); the runtime hands it
//! one of these ([`vrhost_dataplane::Worker::set_clock`]).
#![allow(unsafe_code)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The CPU's time-stamp counter: about 20 cycles to read, no system call.
#[inline]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC reads a register; it has no memory effects and is
        // present on every x86_64 CPU (the kernel may trap it, which is
        // slower but still correct).
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

/// Ticks of [`tsc`] per second, measured once against the monotonic clock
/// over 20 ms.
pub fn tsc_hz() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        let t0 = Instant::now();
        let c0 = tsc();
        std::thread::sleep(Duration::from_millis(20));
        let c1 = tsc();
        let ns = t0.elapsed().as_nanos().max(1);
        (((u128::from(c1.wrapping_sub(c0)) * 1_000_000_000) / ns) as u64).max(1)
    })
}

/// Nanoseconds since the first call in this process.
pub fn monotonic_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// CPU time the calling thread has used, in nanoseconds. It stands still
/// while the thread is descheduled, so a cost measured with it does not
/// depend on what else the machine runs.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call; CLOCK_THREAD_CPUTIME_ID is always supported on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return monotonic_ns();
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Makes the calling thread's sleeps end when asked: its timer slack (how
/// late the kernel may wake it, to batch wake-ups; 50 µs by default) set
/// to 1 ns. A worker that naps 20 µs when idle otherwise sleeps 70, and a
/// frame that arrives meanwhile waits that long. Returns whether the
/// kernel took it.
pub fn precise_sleeps() -> bool {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no
    // memory of ours; the unused arguments are zero as prctl(2) asks.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precise_sleeps_set_the_timer_slack() {
        std::thread::spawn(|| {
            assert!(precise_sleeps());
            // SAFETY: PR_GET_TIMERSLACK takes no argument and returns the
            // calling thread's slack.
            let slack = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
            assert_eq!(slack, 1);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn clocks_move_forward() {
        let a = (tsc(), thread_cpu_ns(), monotonic_ns());
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let b = (tsc(), thread_cpu_ns(), monotonic_ns());
        assert!(b.0 > a.0 && b.1 > a.1 && b.2 > a.2);
        // Any x86 server counts between 0.5 and 10 GHz.
        let hz = tsc_hz();
        assert!((500_000_000..10_000_000_000).contains(&hz), "{hz}");
    }
}
