//! An open-loop traffic source: a memory port whose frames arrive at a set
//! rate into a bounded receive ring, the way a NIC fills its ring whether or
//! not the router keeps up.
//!
//! A plain [`MemoryPort`] is closed-loop: it hands over a full burst every
//! time it is asked, so offered load is whatever the router can take. To
//! test fairness under overload the offered load must not depend on the
//! router, and the excess must be dropped by the ring, at no cost to the
//! CPU, like a NIC's `rx_missed`. Time is whatever clock the caller gives:
//! the TSC for benchmarks, thread CPU time for tests.

use vrhost_dataplane::{Mbuf, MbufPool};

use crate::{IoError, MemoryPort, Port, PortStats};

/// A receive ring filled at `rate` frames per second from a pcap's frames.
pub struct PacedPort {
    inner: MemoryPort,
    /// Frames per second; `None` keeps the ring always full (closed loop).
    rate: Option<f64>,
    ring: u64,
    backlog: u64,
    arrived: u64,
    start: Option<u64>,
    clock: fn() -> u64,
    ticks_per_second: u64,
    missed: u64,
}

impl PacedPort {
    /// Frames of `inner` arriving at `rate` per second (`None`: as fast as
    /// they are read) into a ring of `ring` frames, on `clock`.
    pub fn new(
        inner: MemoryPort,
        rate: Option<f64>,
        ring: usize,
        clock: fn() -> u64,
        ticks_per_second: u64,
    ) -> Self {
        PacedPort {
            inner,
            rate,
            ring: ring.max(1) as u64,
            backlog: 0,
            arrived: 0,
            start: None,
            clock,
            ticks_per_second: ticks_per_second.max(1),
            missed: 0,
        }
    }

    /// Frames that found the ring full and were lost.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// Frames waiting in the ring.
    pub fn backlog(&self) -> u64 {
        self.backlog
    }

    fn fill(&mut self) {
        let Some(rate) = self.rate else {
            self.backlog = self.ring;
            return;
        };
        let now = (self.clock)();
        let start = *self.start.get_or_insert(now);
        let due = (now.saturating_sub(start) as f64 / self.ticks_per_second as f64 * rate) as u64;
        let new = due.saturating_sub(self.arrived);
        self.arrived = due.max(self.arrived);
        let room = self.ring - self.backlog;
        let taken = new.min(room);
        self.backlog += taken;
        self.missed += new - taken;
    }
}

impl Port for PacedPort {
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        self.fill();
        let n = (self.backlog as usize).min(max);
        if n == 0 {
            return 0;
        }
        let got = self.inner.rx_burst(pool, rx, n, port_index);
        self.backlog -= got as u64;
        got
    }

    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        now_ns: u64,
    ) -> Result<(), IoError> {
        self.inner.tx_burst(tx, pool, now_ns)
    }

    fn stats(&self) -> PortStats {
        let mut s = self.inner.stats();
        s.dropped += self.missed;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static NOW: AtomicU64 = AtomicU64::new(0);

    fn fake_clock() -> u64 {
        NOW.load(Ordering::Relaxed)
    }

    #[test]
    fn arrivals_follow_the_rate_and_overflow_is_missed() {
        let inner = MemoryPort::from_frames([&[0u8; 60][..]]);
        // 1000 frames/s on a clock of 1000 ticks/s: one frame per tick; ring of 8.
        let mut p = PacedPort::new(inner, Some(1000.0), 8, fake_clock, 1000);
        let mut pool = MbufPool::new(64);
        let mut rx = Vec::new();
        assert_eq!(p.rx_burst(&mut pool, &mut rx, 32, 0), 0, "nothing at t=0");
        NOW.store(5, Ordering::Relaxed);
        assert_eq!(p.rx_burst(&mut pool, &mut rx, 2, 0), 2);
        assert_eq!(p.backlog(), 3);
        NOW.store(25, Ordering::Relaxed);
        // 20 more arrive; 5 fit beside the 3 waiting, 15 are missed.
        assert_eq!(p.rx_burst(&mut pool, &mut rx, 32, 0), 8);
        assert_eq!(p.missed(), 15);
        assert_eq!(p.stats().dropped, 15);
        assert_eq!(p.stats().rx_packets, 10);
    }
}
