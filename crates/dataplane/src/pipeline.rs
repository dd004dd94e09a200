//! The per-burst loop: every frame runs to completion through the stages.
//!
//! ```text
//!  demux ─┬─ ARP ───────────────────────────────▶ arp_input (answer / learn)
//!         ├─ IPv4 ─▶ ipv4_input ─┬─ Forward ─▶ ip_forward::v4 ─▶ (fragment) ─▶ output
//!         │                      ├─ Local ───▶ local::v4 (echo / punt)
//!         │                      ├─ Punt ────▶ VR punt queue
//!         │                      └─ Icmp ────▶ icmp_error::send_v4
//!         └─ IPv6 ─▶ ipv6_input ─┬─ Forward ─▶ ip_forward::v6 ─▶ output
//!                                ├─ Local ───▶ local::v6 (echo / NDP / punt)
//!                                └─ Icmp ────▶ icmp_error::send_v6
//! ```

use crate::demux;
use crate::drop_reason::Drop;
use crate::ip_forward;
use crate::ipv4_input;
use crate::ipv6_input;
use crate::local;
use crate::mbuf::Mbuf;
use crate::output::Ctx;
use crate::tables::NO_IFACE;
use crate::worker::{Event, TxBatch, Vr, Worker};
use crate::{arp_input, icmp_error};

/// A [`Ctx`] over a worker's fields, borrowed field by field so the VRs stay
/// free; `$peers` are the workers to tell what this one learns.
macro_rules! ctx {
    ($w:ident, $now:expr, $tx:expr, $peers:expr) => {
        Ctx {
            now: $now,
            ports: &$w.shared.ports,
            ifaces: &$w.shared.ifaces,
            pool: &mut $w.pool,
            counters: &$w.counters,
            tx: $tx,
            peers: $peers,
            events_lost: &mut $w.events_lost,
            punt_dirty: &mut $w.punt_dirty,
        }
    };
}

/// How often neighbor timers run at most, in nanoseconds.
const POLL_INTERVAL_NS: u64 = 100_000_000;

impl Worker {
    /// Processes received frames (each with `port` set), queuing what leaves
    /// on `tx`. `now` is the caller's clock in nanoseconds; it only needs to
    /// be monotonic. Published tables and neighbor events are picked up
    /// first; timers run from here, at most every 100 ms.
    pub fn process_burst(&mut self, rx: &mut Vec<Mbuf>, now: u64, tx: &mut TxBatch) {
        self.refresh();
        self.apply_events(now, tx);
        let mut ctx = ctx!(self, now, tx, &self.peers);
        for m in rx.drain(..) {
            process_one(&mut ctx, &mut self.vrs, m);
        }
        if now >= self.next_poll {
            self.poll(now, tx);
        }
    }

    /// Between bursts when nothing arrived: picks up tables and neighbor
    /// events, and runs timers when due.
    pub fn idle(&mut self, now: u64, tx: &mut TxBatch) {
        self.refresh();
        self.apply_events(now, tx);
        if now >= self.next_poll {
            self.poll(now, tx);
        }
    }

    /// Applies what other workers learned and the control side installed,
    /// releasing packets held for those neighbors.
    fn apply_events(&mut self, now: u64, tx: &mut TxBatch) {
        let mut ctx = ctx!(self, now, tx, &[]);
        for ev in self.inbox.try_iter() {
            let (vr, iface, addr, mac, confirmed, pin) = match ev {
                Event::Learned {
                    vr,
                    iface,
                    addr,
                    mac,
                    confirmed,
                } => (vr, iface, addr, mac, confirmed, false),
                Event::Static {
                    vr,
                    iface,
                    addr,
                    mac,
                } => (vr, iface, addr, mac, true, true),
            };
            let Some(v) = self.vrs.get_mut(vr as usize) else {
                continue;
            };
            // Another worker's news only updates entries this worker uses,
            // plus static ones; it never fills the table with strangers.
            let slot = if pin {
                v.neighbors.ensure(iface, addr, true)
            } else {
                v.neighbors.find(iface, addr)
            };
            let Some(i) = slot else { continue };
            ctx.release(v, i, iface, addr, mac, confirmed);
            if pin {
                v.neighbors.set_static(iface, addr, mac);
            }
        }
    }

    /// Runs neighbor timers: retransmits ARP requests and solicitations,
    /// and drops packets held for neighbors that never answered.
    pub fn poll(&mut self, now: u64, tx: &mut TxBatch) {
        self.next_poll = now + POLL_INTERVAL_NS;
        let mut ctx = ctx!(self, now, tx, &self.peers);
        for vr in self.vrs.iter_mut() {
            self.probes.clear();
            vr.neighbors.poll(now, &mut self.probes, |m| {
                ctx.drop(m, Drop::NeighborUnresolved)
            });
            for &p in &self.probes {
                ctx.send_probe(vr, p);
            }
        }
    }
}

#[inline]
fn process_one(ctx: &mut Ctx<'_>, vrs: &mut [Vr], mut m: Mbuf) {
    m.iface = NO_IFACE;
    m.local_origin = false;
    let len = m.len() as u64;
    if let Some(p) = ctx.counters.ports.get(m.port as usize) {
        p.rx_packets.inc();
        p.rx_bytes.add(len);
    }
    let next = demux::process(ctx.ports, ctx.ifaces, &mut m);
    if let demux::Next::Drop(reason) = next {
        return ctx.drop(m, reason);
    }
    let iface = &ctx.ifaces[m.iface as usize];
    let vr = &mut vrs[iface.vr as usize];
    let c = &ctx.counters.ifaces[m.iface as usize];
    c.rx_packets.inc();
    c.rx_bytes.add(len);
    match next {
        demux::Next::Arp => arp_input::process(ctx, vr, m),
        demux::Next::Ipv4 => match ipv4_input::process(vr, &mut m) {
            ipv4_input::Next::Forward(nh) => ip_forward::v4(ctx, vr, m, nh),
            ipv4_input::Next::Local => local::v4(ctx, vr, m),
            ipv4_input::Next::Punt => local::punt(ctx, vr, m),
            ipv4_input::Next::Icmp(err, reason) => icmp_error::send_v4(ctx, vr, m, err, reason),
            ipv4_input::Next::Drop(reason) => ctx.drop(m, reason),
        },
        demux::Next::Ipv6 => match ipv6_input::process(vr, iface, &mut m) {
            ipv6_input::Next::Forward(nh) => ip_forward::v6(ctx, vr, m, nh),
            ipv6_input::Next::Local => local::v6(ctx, vr, m),
            ipv6_input::Next::Icmp(err, reason) => icmp_error::send_v6(ctx, vr, m, err, reason),
            ipv6_input::Next::Drop(reason) => ctx.drop(m, reason),
        },
        demux::Next::Drop(_) => unreachable!("handled above"),
    }
}
