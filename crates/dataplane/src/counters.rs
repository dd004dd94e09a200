//! Packet and drop counters.
//!
//! One [`Counters`] set belongs to one worker, so increments are plain
//! adds on cache lines no other core writes. Readers sum the sets of all
//! workers ([`Counters::add`]) when they are asked for a figure.

use crate::drop_reason::Drop;

/// Counters for one port, interface or VR. Aligned to a cache line so that
/// neighbouring sets never share one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[repr(align(64))]
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
    pub drops: [u64; Drop::COUNT],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            rx_packets: 0,
            rx_bytes: 0,
            tx_packets: 0,
            tx_bytes: 0,
            forwarded: 0,
            local: 0,
            punted: 0,
            icmp_errors: 0,
            icmp_rate_limited: 0,
            icmp_suppressed: 0,
            icmp_no_source: 0,
            drops: [0; Drop::COUNT],
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
    pub fn drop_count(&self, reason: Drop) -> u64 {
        self.drops[reason as usize]
    }

    /// `(name, count)` for each reason with a non-zero count.
    pub fn nonzero_drops(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Drop::ALL
            .iter()
            .map(|d| (d.name(), self.drops[*d as usize]))
            .filter(|(_, n)| *n != 0)
    }
}
