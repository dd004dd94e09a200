//! The worker side of the per-VR control planes: TAP mirrors of VR
//! interfaces in the tenants' namespaces, punted packets out to them and
//! frames the kernel sends back in.
//!
//! * [`mirror_all`] creates (or adopts) each namespace and one multi-queue
//!   TAP per VR interface in it, queues = workers, with the configured
//!   addresses; every worker gets one queue of every TAP ([`TapQueue`]).
//! * [`WorkerTaps`] is the worker side: punted packets go to the TAP of
//!   their ingress interface with any 802.1Q tag removed; frames the kernel
//!   sends are checked ([`from_tap`]), tagged, and transmitted by the
//!   worker's own transmit queue. VRs without a control plane discard what
//!   they punt (counted).
//!
//! The route and address sync is in [`crate::cplane`]; `docs/control-plane.md`
//! has the semantics.

use std::net::IpAddr;

use anyhow::{Context, Result};
use vrhost_config::Config;
use vrhost_dataplane::{Iface, Mbuf, MbufPool, TxBatch, Worker, WorkerCounters};
use vrhost_io::{Port, TapPort};

/// One worker's queue of one TAP mirror.
pub struct TapQueue {
    /// The VR interface it mirrors (global index).
    pub iface: u16,
    /// The queue.
    pub port: TapPort,
}

/// The TAP mirrors of every VR interface with a control plane: per
/// interface, one queue per worker.
pub struct Mirrors {
    /// (global interface index, queues).
    pub ifaces: Vec<(u16, Vec<TapPort>)>,
}

/// Creates or adopts the namespace of every router with `[router.control]`
/// and mirrors each of its interfaces there as a multi-queue TAP with
/// `workers` queues, the interface's name, MAC and MTU and its configured
/// addresses.
pub fn mirror_all(
    cfg: &Config,
    ifaces: &[Iface],
    vr_ifaces: impl Fn(usize) -> Vec<u16>,
    workers: usize,
) -> Result<Mirrors> {
    let mut out = Vec::new();
    for (vr, r) in cfg.routers.iter().enumerate() {
        let Some(c) = &r.control else { continue };
        let info = vrhost_cp::ensure_netns(&c.netns)
            .with_context(|| format!("router {:?}: control-plane namespace", r.name))?;
        let globals = vr_ifaces(vr);
        for (i, ci) in r.interfaces.iter().enumerate() {
            let gi = *globals
                .get(i)
                .with_context(|| format!("router {:?}: interface {:?}", r.name, ci.name))?;
            let iface = ifaces
                .get(gi as usize)
                .with_context(|| format!("interface #{gi}"))?;
            let queues = vrhost_cp::mirror_interface(
                &c.netns,
                &iface.name,
                iface.mac.0,
                u32::from(iface.mtu),
                workers,
            )
            .with_context(|| format!("router {:?}", r.name))?;
            let addrs: Vec<(IpAddr, u8)> = ci
                .addresses
                .iter()
                .map(|a| (a.addr, a.prefix_len))
                .collect();
            vrhost_cp::set_addresses(&c.netns, &iface.name, &addrs)
                .with_context(|| format!("router {:?}", r.name))?;
            out.push((gi, queues));
        }
        tracing::info!(
            router = r.name,
            netns = c.netns,
            created = info.created,
            interfaces = r.interfaces.len(),
            "control-plane namespace ready"
        );
    }
    Ok(Mirrors { ifaces: out })
}

// ------------------------------------------------------------ worker side --

/// Frames read from one TAP queue per visit.
const TAP_BURST: usize = 32;
/// How often a busy worker looks at its TAP queues, in nanoseconds (an idle
/// one looks every loop).
const TAP_POLL_NS: u64 = 100_000;
/// Marks "no TAP" in the interface → TAP map.
const NO_TAP: u32 = u32::MAX;

/// What the worker side of the control planes counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpStats {
    /// Punted packets written to a TAP.
    pub to_tap: u64,
    /// Punted packets of VRs without a control plane, discarded.
    pub punt_discarded: u64,
    /// Punted packets a TAP would not take (device down, queue full).
    pub tap_write_failed: u64,
    /// Frames the kernel sent on a TAP and the worker transmitted.
    pub injected: u64,
    /// Kernel ARP replies / neighbor advertisements for the VR's own
    /// addresses, dropped (the worker answers those itself).
    pub duplicate_answers: u64,
    /// Frames from a TAP that were short, oversized or VLAN-tagged.
    pub bad_from_tap: u64,
}

impl CpStats {
    /// Adds `o` to these.
    pub fn add(&mut self, o: &CpStats) {
        self.to_tap += o.to_tap;
        self.punt_discarded += o.punt_discarded;
        self.tap_write_failed += o.tap_write_failed;
        self.injected += o.injected;
        self.duplicate_answers += o.duplicate_answers;
        self.bad_from_tap += o.bad_from_tap;
    }
}

/// A worker's queues of every TAP mirror, and buffers for the punt copies.
pub struct WorkerTaps {
    taps: Vec<TapQueue>,
    /// Global interface index → index into `taps`.
    tap_of: Vec<u32>,
    /// Per TAP, the punted frames to write.
    pending: Vec<Vec<Mbuf>>,
    /// Buffers for the untagged copies written to TAPs.
    pool: MbufPool,
    rx: Vec<Mbuf>,
    next_poll: u64,
    warned: Vec<bool>,
    /// Counters.
    pub stats: CpStats,
}

impl WorkerTaps {
    /// The worker side over `taps` (may be empty: then every punted packet
    /// is discarded and counted).
    pub fn new(taps: Vec<TapQueue>) -> WorkerTaps {
        let mut tap_of = Vec::new();
        for (t, q) in taps.iter().enumerate() {
            let i = q.iface as usize;
            if tap_of.len() <= i {
                tap_of.resize(i + 1, NO_TAP);
            }
            tap_of[i] = t as u32;
        }
        let n = taps.len();
        WorkerTaps {
            pending: (0..n).map(|_| Vec::with_capacity(TAP_BURST)).collect(),
            warned: vec![false; n],
            pool: MbufPool::new(if n == 0 { 0 } else { 256 }),
            rx: Vec::with_capacity(TAP_BURST),
            next_poll: 0,
            tap_of,
            taps,
            stats: CpStats::default(),
        }
    }

    /// Hands what the worker punted to the TAP of each packet's ingress
    /// interface, without its VLAN tag; discards (and counts) the packets
    /// of VRs without a control plane.
    pub fn punted(&mut self, w: &mut Worker, now: u64) {
        let WorkerTaps {
            tap_of,
            pending,
            pool,
            stats,
            ..
        } = self;
        w.drain_all_punted(|_, m| {
            let t = tap_of.get(m.iface as usize).copied().unwrap_or(NO_TAP);
            if t == NO_TAP {
                stats.punt_discarded += 1;
                return;
            }
            let d = m.data();
            let mut c = pool.get();
            if m.l3_off == 18 && d.len() >= 18 {
                let out = c.set_len_from_start(d.len() - 4);
                out[..12].copy_from_slice(&d[..12]);
                out[12..].copy_from_slice(&d[16..]);
            } else {
                c.fill(d);
            }
            pending[t as usize].push(c);
        });
        for (t, frames) in self.pending.iter_mut().enumerate() {
            if frames.is_empty() {
                continue;
            }
            let n = frames.len() as u64;
            let q = &mut self.taps[t].port;
            let before = q.stats().dropped;
            if let Err(e) = q.tx_burst(frames, &mut self.pool, now) {
                if !self.warned[t] {
                    self.warned[t] = true;
                    tracing::warn!(tap = q.name(), "writing punted packets to the TAP: {e}");
                }
            }
            frames.clear();
            let failed = q.stats().dropped.saturating_sub(before);
            self.stats.tap_write_failed += failed;
            self.stats.to_tap += n.saturating_sub(failed);
        }
    }

    /// Reads what the kernels sent on this worker's TAP queues and queues
    /// it for transmission on each interface's port (tagged when the
    /// interface has a VLAN), counted on the interface's and port's
    /// transmit counters. `idle`: the worker had nothing else to do, so
    /// look now rather than at the next poll interval.
    pub fn inject(
        &mut self,
        w: &mut Worker,
        tx: &mut TxBatch,
        counters: &WorkerCounters,
        now: u64,
        idle: bool,
    ) {
        if self.taps.is_empty() || (!idle && now < self.next_poll) {
            return;
        }
        self.next_poll = now + TAP_POLL_NS;
        let shared = w.shared().clone();
        for t in 0..self.taps.len() {
            let gi = self.taps[t].iface;
            let Some(iface) = shared.ifaces().get(gi as usize) else {
                continue;
            };
            let port = iface.port;
            self.taps[t]
                .port
                .rx_burst(w.pool(), &mut self.rx, TAP_BURST, port);
            for mut m in self.rx.drain(..) {
                match from_tap(iface, m.data()) {
                    Verdict::Send => {}
                    Verdict::Duplicate => {
                        self.stats.duplicate_answers += 1;
                        w.pool().put(m);
                        continue;
                    }
                    Verdict::Bad => {
                        self.stats.bad_from_tap += 1;
                        w.pool().put(m);
                        continue;
                    }
                }
                let Some(queue) = tx.ports.get_mut(port as usize) else {
                    w.pool().put(m);
                    continue;
                };
                // The tenant cannot send as anybody else: the source MAC is the interface's.
                m.data_mut()[6..12].copy_from_slice(&iface.mac.0);
                if let Some(vid) = iface.vlan {
                    if !m.adjust_head(-4) {
                        self.stats.bad_from_tap += 1;
                        w.pool().put(m);
                        continue;
                    }
                    let d = m.data_mut();
                    d.copy_within(4..16, 0);
                    d[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
                    d[14..16].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
                    m.l3_off = 18;
                } else {
                    m.l3_off = 14;
                }
                m.port = port;
                m.iface = gi;
                m.local_origin = true;
                let len = m.len() as u64;
                if let Some(c) = counters.ifaces.get(gi as usize) {
                    c.tx_packets.inc();
                    c.tx_bytes.add(len);
                }
                if let Some(c) = counters.ports.get(port as usize) {
                    c.tx_packets.inc();
                    c.tx_bytes.add(len);
                }
                self.stats.injected += 1;
                queue.push(m);
            }
        }
    }
}

/// What to do with a frame the kernel sent on a TAP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit it.
    Send,
    /// An ARP reply or neighbor advertisement for one of the interface's
    /// own addresses: the worker already answered; drop it.
    Duplicate,
    /// Short, oversized or VLAN-tagged: drop it.
    Bad,
}

/// Judges a frame the kernel sent on the TAP mirror of `iface`. Never
/// panics, whatever the bytes.
pub fn from_tap(iface: &Iface, f: &[u8]) -> Verdict {
    if f.len() < 14 || f.len() > 14 + usize::from(iface.mtu) {
        return Verdict::Bad;
    }
    let ethertype = u16::from_be_bytes([f[12], f[13]]);
    match ethertype {
        // The TAP is the untagged interface; a VLAN on top of it is not ours.
        0x8100 | 0x88a8 => Verdict::Bad,
        0x0806 => {
            // ARP for IPv4 over Ethernet: op at 6, sender protocol address at 14.
            let a = &f[14..];
            if a.len() >= 28 && a[6..8] == [0, 2] {
                let spa = std::net::Ipv4Addr::new(a[14], a[15], a[16], a[17]);
                if iface.owns4(&spa) {
                    return Verdict::Duplicate;
                }
            }
            Verdict::Send
        }
        0x86dd => {
            // ICMPv6 (next header 58) type 136: a neighbor advertisement,
            // target at 8 bytes into the message.
            let p = &f[14..];
            if p.len() >= 40 + 24 && p[6] == 58 && p[40] == 136 {
                let mut t = [0u8; 16];
                t.copy_from_slice(&p[48..64]);
                if iface.owns6(&std::net::Ipv6Addr::from(t)) {
                    return Verdict::Duplicate;
                }
            }
            Verdict::Send
        }
        _ => Verdict::Send,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrhost_wire::ethernet::EthernetAddress;

    fn iface(vlan: Option<u16>) -> Iface {
        Iface {
            name: "red0".into(),
            vr: 0,
            port: 0,
            vlan,
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            mtu: 1500,
            addrs4: vec![("10.0.0.1".parse().unwrap(), 24)],
            addrs6: vec![("2001:db8::1".parse().unwrap(), 64)],
            mcast: vec![],
            control_mcast: true,
        }
    }

    fn arp(op: u8, spa: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend([0, 1, 8, 0, 6, 4, 0, op]);
        f.extend([2, 0, 0, 0, 0, 1]);
        f.extend(spa);
        f.extend([0; 6]);
        f.extend([10, 0, 0, 2]);
        f
    }

    fn na(target: std::net::Ipv6Addr) -> Vec<u8> {
        let mut f = vec![0x33, 0x33, 0, 0, 0, 1, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let mut ip = vec![0x60, 0, 0, 0, 0, 24, 58, 255];
        ip.extend([0; 32]);
        f.extend(ip);
        f.extend([136, 0, 0, 0, 0x20, 0, 0, 0]);
        f.extend(target.octets());
        f
    }

    #[test]
    fn duplicate_answers_for_own_addresses_are_dropped() {
        let i = iface(None);
        assert_eq!(from_tap(&i, &arp(2, [10, 0, 0, 1])), Verdict::Duplicate);
        assert_eq!(from_tap(&i, &arp(1, [10, 0, 0, 1])), Verdict::Send);
        assert_eq!(from_tap(&i, &arp(2, [10, 0, 0, 9])), Verdict::Send);
        assert_eq!(
            from_tap(&i, &na("2001:db8::1".parse().unwrap())),
            Verdict::Duplicate
        );
        assert_eq!(
            from_tap(&i, &na("2001:db8::9".parse().unwrap())),
            Verdict::Send
        );
    }

    #[test]
    fn garbage_from_a_tap_never_panics() {
        let i = iface(Some(7));
        assert_eq!(from_tap(&i, &[]), Verdict::Bad);
        assert_eq!(from_tap(&i, &[0; 13]), Verdict::Bad);
        assert_eq!(from_tap(&i, &vec![0; 14 + 1501]), Verdict::Bad);
        let mut tagged = arp(1, [10, 0, 0, 1]);
        tagged[12] = 0x81;
        tagged[13] = 0;
        assert_eq!(from_tap(&i, &tagged), Verdict::Bad);
        // Every truncation of ARP and NA frames, and random bytes.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for base in [arp(2, [10, 0, 0, 1]), na("2001:db8::1".parse().unwrap())] {
            for n in 0..base.len() {
                let _ = from_tap(&i, &base[..n]);
            }
        }
        for len in 0..200 {
            let f: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = from_tap(&i, &f);
        }
    }
}
