//! The worker side of the per-VR control planes: TAP mirrors of VR
//! interfaces in the tenants' namespaces, punted packets out to them and
//! frames the kernel sends back in.
//!
//! * [`mirror_all`] creates (or adopts) each namespace and one persistent
//!   multi-queue TAP per VR interface in it, queues = workers, with the
//!   configured addresses; every worker gets one queue of every TAP
//!   ([`TapQueue`]). A restart adopts the TAPs ([`crate::restart`]).
//! * [`WorkerTaps`] is the worker side: punted packets go to the TAP of
//!   their ingress interface with any 802.1Q tag removed; frames the kernel
//!   sends are checked ([`vrhost_dataplane::tap::judge`]), tagged, and transmitted by the
//!   worker's own transmit queue. VRs without a control plane discard what
//!   they punt (counted).
//!
//! The route and address sync is in [`crate::cplane`]; `docs/control-plane.md`
//! has the semantics.

use std::net::IpAddr;

use std::sync::Arc;

use anyhow::{Context, Result};
use vrhost_config::Config;
use vrhost_dataplane::tap::{self, Verdict};
use vrhost_dataplane::{Iface, IfaceId, Mbuf, MbufPool, TxBatch, Worker};
use vrhost_io::{Port, TapPort};

/// One worker's queue of one TAP mirror.
pub struct TapQueue {
    /// The VR interface it mirrors (global index).
    pub iface: IfaceId,
    /// The queue.
    pub port: TapPort,
}

/// The TAP mirrors of every VR interface with a control plane: per
/// interface, one queue per worker.
pub struct Mirrors {
    /// (global interface index, queues).
    pub ifaces: Vec<(IfaceId, Vec<TapPort>)>,
    /// What each mirror is, for the next run and for deleting it when its
    /// interface goes: (global interface index, record).
    pub records: Vec<(IfaceId, crate::restart::MirrorRecord)>,
}

/// Creates or adopts the namespace of every router with `[router.control]`
/// and mirrors each of its interfaces there as a persistent multi-queue TAP
/// with `workers` queues, the interface's name, MAC and MTU and its
/// configured addresses. A TAP an earlier run left is adopted; of the
/// addresses on it, those the earlier run's config had (`previous`) and
/// this one has not are taken off, and the tenant's own stay.
pub fn mirror_all(
    cfg: &Config,
    ifaces: &[Iface],
    vr_ifaces: impl Fn(usize) -> Vec<IfaceId>,
    workers: usize,
    previous: &[crate::restart::MirrorRecord],
) -> Result<Mirrors> {
    let mut out = Vec::new();
    let mut records = Vec::new();
    for (vr, r) in cfg.routers.iter().enumerate() {
        let Some(c) = &r.control else { continue };
        let info = vrhost_cp::ensure_netns(&c.netns)
            .with_context(|| format!("router {:?}: control-plane namespace", r.name))?;
        let globals = vr_ifaces(vr);
        let mut adopted = 0;
        for (i, ci) in r.interfaces.iter().enumerate() {
            let gi = *globals
                .get(i)
                .with_context(|| format!("router {:?}: interface {:?}", r.name, ci.name))?;
            let iface = ifaces
                .get(gi.index())
                .with_context(|| format!("interface #{gi}"))?;
            let m = vrhost_cp::mirror(
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
            if m.adopted {
                adopted += 1;
                let before: Vec<(IpAddr, u8)> = previous
                    .iter()
                    .filter(|p| p.netns == c.netns && p.tap == iface.name)
                    .flat_map(|p| p.addrs())
                    .collect();
                vrhost_cp::reconcile_addresses(&c.netns, &iface.name, &addrs, &before)
            } else {
                vrhost_cp::set_addresses(&c.netns, &iface.name, &addrs)
            }
            .with_context(|| format!("router {:?}", r.name))?;
            out.push((gi, m.ports));
            records.push((
                gi,
                crate::restart::MirrorRecord {
                    netns: c.netns.clone(),
                    tap: iface.name.clone(),
                    addresses: addrs.iter().map(|(a, l)| format!("{a}/{l}")).collect(),
                },
            ));
        }
        tracing::info!(
            router = r.name,
            netns = c.netns,
            created = info.created,
            interfaces = r.interfaces.len(),
            adopted,
            "control-plane namespace ready"
        );
    }
    Ok(Mirrors {
        ifaces: out,
        records,
    })
}

/// Deletes the mirrors of `previous` that `now` lacks (their router, its
/// control plane or the interface left the config): the TAP goes, the
/// namespace stays. Failures are logged; they stop nothing.
pub fn delete_stale(
    previous: &[crate::restart::MirrorRecord],
    now: &[crate::restart::MirrorRecord],
) {
    for p in previous {
        if now.iter().any(|n| n.netns == p.netns && n.tap == p.tap) {
            continue;
        }
        match vrhost_cp::delete_mirror(&p.netns, &p.tap) {
            Ok(()) => tracing::info!(
                netns = p.netns,
                tap = p.tap,
                "TAP mirror of the last run deleted: the config no longer has it"
            ),
            Err(e) => tracing::warn!("deleting the last run's TAP mirror: {e}"),
        }
    }
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
    /// Punted packets a TAP would not take (device down, queue full), or
    /// that no buffer was left to copy into (a super-frame, when every
    /// large buffer is in use).
    pub tap_write_failed: u64,
    /// Frames the kernel sent on a TAP and the worker transmitted.
    pub injected: u64,
    /// Kernel ARP replies / neighbor advertisements for the VR's own
    /// addresses, dropped (the worker answers those itself).
    pub duplicate_answers: u64,
    /// Frames from a TAP that were short, oversized or VLAN-tagged.
    pub bad_from_tap: u64,
    /// TAP queues closed because their interface or VR was deleted.
    pub taps_closed: u64,
    /// Frames from a TAP over the VR's rate ceiling or fair share.
    pub tap_limited: u64,
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
        self.taps_closed += o.taps_closed;
        self.tap_limited += o.tap_limited;
    }
}

/// Global interface index → index into `taps`.
fn tap_index(taps: &[TapQueue]) -> Vec<u32> {
    let mut tap_of = Vec::new();
    for (t, q) in taps.iter().enumerate() {
        let i = q.iface.index();
        if tap_of.len() <= i {
            tap_of.resize(i + 1, NO_TAP);
        }
        tap_of[i] = t as u32;
    }
    tap_of
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
    /// The topology the TAP queues were last checked against.
    seen: Option<Arc<vrhost_dataplane::Shared>>,
    /// Counters.
    pub stats: CpStats,
}

impl WorkerTaps {
    /// The worker side over `taps` (may be empty: then every punted packet
    /// is discarded and counted).
    pub fn new(taps: Vec<TapQueue>) -> WorkerTaps {
        let n = taps.len();
        WorkerTaps {
            pending: (0..n).map(|_| Vec::with_capacity(TAP_BURST)).collect(),
            warned: vec![false; n],
            pool: MbufPool::new(if n == 0 { 0 } else { 256 }),
            rx: Vec::with_capacity(TAP_BURST),
            next_poll: 0,
            tap_of: tap_index(&taps),
            seen: None,
            taps,
            stats: CpStats::default(),
        }
    }

    /// Closes the queues of TAPs whose interface was deleted (or whose VR
    /// was): this worker never reads them again, and once every worker has
    /// closed its queue the kernel removes the TAP from the tenant's
    /// namespace. Their unwritten punts go back to the pool.
    fn close_detached(&mut self, shared: &vrhost_dataplane::Shared) {
        let mut t = 0;
        while t < self.taps.len() {
            if shared.iface_attached(self.taps[t].iface) {
                t += 1;
                continue;
            }
            let q = self.taps.remove(t);
            for m in self.pending.remove(t) {
                self.pool.put(m);
            }
            self.warned.remove(t);
            self.stats.taps_closed += 1;
            tracing::info!(
                tap = q.port.name(),
                "TAP queue closed: its interface or VR was deleted"
            );
        }
        self.tap_of = tap_index(&self.taps);
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
            // A super-frame punted whole goes out whole, in a large buffer.
            let Some(mut c) = pool.get_fitting(m.len()) else {
                stats.tap_write_failed += 1;
                return;
            };
            tap::untagged_copy(m, &mut c);
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

    /// Pushes onto `fds` the descriptors of this worker's TAP queues, which
    /// become readable when a tenant's kernel sent a frame; false where one
    /// cannot be waited on.
    pub fn wait_fds<'a>(&'a self, fds: &mut Vec<std::os::fd::BorrowedFd<'a>>) -> bool {
        self.taps.iter().all(|q| q.port.wait_fds(fds))
    }

    /// Reads what the kernels sent on this worker's TAP queues and hands
    /// each frame to [`Worker::send_from_tap`], which checks, tags, counts
    /// and queues it for the interface's port. `idle`: the worker had
    /// nothing else to do, so look now rather than at the next poll
    /// interval.
    pub fn inject(&mut self, w: &mut Worker, tx: &mut TxBatch, now: u64, idle: bool) {
        if self.taps.is_empty() || (!idle && now < self.next_poll) {
            return;
        }
        self.next_poll = now + TAP_POLL_NS;
        let shared = w.shared().clone();
        // Interfaces only go away with a new topology: look then, not at
        // every poll.
        if !self.seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &shared)) {
            if self.taps.iter().any(|q| !shared.iface_attached(q.iface)) {
                self.close_detached(&shared);
            }
            self.seen = Some(shared.clone());
        }
        for t in 0..self.taps.len() {
            let gi = self.taps[t].iface;
            let Some(iface) = shared.ifaces().get(gi.index()) else {
                continue;
            };
            let port = iface.port;
            self.taps[t]
                .port
                .rx_burst(w.pool(), &mut self.rx, TAP_BURST, port);
            for m in self.rx.drain(..) {
                match w.send_from_tap(gi, m, now, tx) {
                    Verdict::Send => self.stats.injected += 1,
                    Verdict::Duplicate => self.stats.duplicate_answers += 1,
                    Verdict::Bad => self.stats.bad_from_tap += 1,
                    // Closed at the next poll.
                    Verdict::Detached => self.stats.bad_from_tap += 1,
                    Verdict::Limited => self.stats.tap_limited += 1,
                }
            }
        }
    }
}
