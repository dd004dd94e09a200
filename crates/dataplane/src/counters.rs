//! Packet and drop counters.
//!
//! Each worker owns its [`CounterCells`]: only that worker writes them, so an
//! increment is a relaxed load and store of its own cache line (plain `mov`
//! and `add` on x86, no locked instruction), and any thread may read them.
//! Readers take a [`Counters`] snapshot of every worker's cells and sum them
//! ([`Counters::add`]) when they are asked for a figure.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::drop_reason::DropReason;

/// One counter with a single writer (its worker) and any number of readers.
#[derive(Debug, Default)]
pub struct Cell(AtomicU64);

impl Cell {
    /// Adds `n`. Only the owning worker calls this, so load-then-store
    /// loses nothing and needs no atomic read-modify-write.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Replaces the value (a gauge; only the owning worker writes it).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }

    /// Raises the value to `v` if `v` is higher: a counter published from
    /// a figure that may settle a little lower later (an estimate replaced
    /// by what was measured) never goes back, which readers such as
    /// Prometheus would take for a reset.
    #[inline]
    pub fn raise(&self, v: u64) {
        if v > self.get() {
            self.set(v);
        }
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

macro_rules! cells {
    ($( $(#[doc = $doc:literal])+ $field:ident, )+) => {
        /// The live counters of one port, interface or VR in one worker.
        ///
        /// `repr(C)` keeps the declared order: the six a forwarded frame
        /// counts (received, sent, forwarded, fast path) share the first
        /// cache line, where Rust's own layout put the drops first and
        /// split them over two lines.
        #[derive(Debug)]
        #[repr(C, align(64))]
        pub struct CounterCells {
            $( $(#[doc = $doc])+ pub $field: Cell, )+
            /// Drops, indexed by [`Drop`].
            pub drops: [Cell; DropReason::COUNT],
        }

        impl Default for CounterCells {
            fn default() -> Self {
                CounterCells {
                    $( $field: Cell::default(), )+
                    drops: std::array::from_fn(|_| Cell::default()),
                }
            }
        }

        impl CounterCells {
            /// The values now.
            pub fn snapshot(&self) -> Counters {
                Counters {
                    $( $field: self.$field.get(), )+
                    drops: std::array::from_fn(|i| self.drops[i].get()),
                }
            }

            /// Counts one drop for `reason`.
            #[inline]
            pub fn drop(&self, reason: DropReason) {
                self.drops[reason as usize].inc();
            }
        }
    };
}

cells! {
    /// Frames received.
    rx_packets,
    /// Bytes received (whole frames).
    rx_bytes,
    /// Frames transmitted.
    tx_packets,
    /// Bytes transmitted (whole frames).
    tx_bytes,
    /// Packets forwarded toward another interface (counted on ingress).
    forwarded,
    /// Of `forwarded`, the IPv4 packets the fast path took (counted on ingress).
    fast_path,
    /// Packets for the router answered in the data plane (echo, ARP, NDP) or learned from.
    local,
    /// Packets for the router put on the VR's punt queue.
    punted,
    /// ICMP errors generated.
    icmp_errors,
    /// ICMP errors not sent because of the VR's rate limit.
    icmp_rate_limited,
    /// ICMP errors not sent because of RFC 1812 §4.3.2.7 / RFC 4443 §2.4(e).
    icmp_suppressed,
    /// ICMP errors not sent because the ingress interface has no address of that family.
    icmp_no_source,
}

/// Counter values of one port, interface or VR: a snapshot of
/// [`CounterCells`], or the sum of several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received (whole frames).
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted (whole frames).
    pub tx_bytes: u64,
    /// Packets forwarded toward another interface (counted on ingress).
    pub forwarded: u64,
    /// Of `forwarded`, the IPv4 packets the fast path took (counted on
    /// ingress): every check passed and nothing but a plain forward was due.
    pub fast_path: u64,
    /// Packets for the router answered in the data plane (echo, ARP, NDP) or learned from.
    pub local: u64,
    /// Packets for the router put on the VR's punt queue.
    pub punted: u64,
    /// ICMP errors generated.
    pub icmp_errors: u64,
    /// ICMP errors not sent because of the VR's rate limit (RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)).
    pub icmp_rate_limited: u64,
    /// ICMP errors not sent because the offending packet was an ICMP error, a broadcast or
    /// multicast, a non-first fragment, or had a non-unicast source (RFC 1812 §4.3.2.7, RFC 4443 §2.4(e)).
    pub icmp_suppressed: u64,
    /// ICMP errors not sent because the ingress interface has no address of that family.
    pub icmp_no_source: u64,
    /// Drops, indexed by [`Drop`].
    pub drops: [u64; DropReason::COUNT],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            rx_packets: 0,
            rx_bytes: 0,
            tx_packets: 0,
            tx_bytes: 0,
            forwarded: 0,
            fast_path: 0,
            local: 0,
            punted: 0,
            icmp_errors: 0,
            icmp_rate_limited: 0,
            icmp_suppressed: 0,
            icmp_no_source: 0,
            drops: [0; DropReason::COUNT],
        }
    }
}

impl Counters {
    /// Adds every field of `other` into `self`.
    pub fn add(&mut self, other: &Counters) {
        self.rx_packets += other.rx_packets;
        self.rx_bytes += other.rx_bytes;
        self.tx_packets += other.tx_packets;
        self.tx_bytes += other.tx_bytes;
        self.forwarded += other.forwarded;
        self.fast_path += other.fast_path;
        self.local += other.local;
        self.punted += other.punted;
        self.icmp_errors += other.icmp_errors;
        self.icmp_rate_limited += other.icmp_rate_limited;
        self.icmp_suppressed += other.icmp_suppressed;
        self.icmp_no_source += other.icmp_no_source;
        for (a, b) in self.drops.iter_mut().zip(other.drops.iter()) {
            *a += b;
        }
    }

    /// Sum of every drop reason.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Count for one reason.
    pub fn drop_count(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// `(name, count)` for each reason with a non-zero count.
    pub fn nonzero_drops(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|d| (d.name(), self.drops[*d as usize]))
            .filter(|(_, n)| *n != 0)
    }
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use super::CounterCells;

    /// What a forwarded frame counts on its interfaces lies in one cache
    /// line of each: a frame of many VRs' bursts writes two cold lines,
    /// not three.
    #[test]
    fn a_forwarded_frames_counters_share_the_first_line() {
        for off in [
            offset_of!(CounterCells, rx_packets),
            offset_of!(CounterCells, rx_bytes),
            offset_of!(CounterCells, tx_packets),
            offset_of!(CounterCells, tx_bytes),
            offset_of!(CounterCells, forwarded),
            offset_of!(CounterCells, fast_path),
        ] {
            assert!(off + 8 <= 64, "offset {off}");
        }
    }
}
