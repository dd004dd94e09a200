//! Output: neighbor resolution, L2 rewrite and per-port transmit queues.
//!
//! Every packet that leaves, forwarded or generated, goes through
//! [`Ctx::output`]: it resolves the next hop's link-layer address (holding
//! the packet while an ARP request or Neighbor Solicitation is out), writes
//! the Ethernet header and VLAN tag of the egress interface in front of the
//! L3 header, and queues the frame on the egress port.

use std::net::{IpAddr, Ipv6Addr};

use vrhost_wire::arp::{ArpPacket, ArpRepr, Operation};
use vrhost_wire::ethernet::{self, EtherType, EthernetAddress, EthernetFrame};
use vrhost_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr, NdiscRepr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv6::{self as wire6, Ipv6Packet, Ipv6Repr};

use crate::counters::CounterCells;
use crate::drop_reason::DropReason;
use std::sync::mpsc::SyncSender;

use crate::iface::{Iface, Port};

/// Places past a VR's `punt_queue` that only its control protocols' frames
/// within their protected rate may take ([`crate::protocol`]): a full
/// queue of a flood's punts leaves room for the BFD packet behind it.
const PROTECTED_PUNTS: usize = 64;
use crate::mbuf::{Mbuf, MbufPool};
use crate::neighbor::Event;
use crate::neighbor::{Probe, Resolve};
use crate::worker::{NextHop, TxBatch, Vr, Worker, WorkerCounters};

/// Room kept in front of an L3 packet the router builds: Ethernet plus one tag.
pub(crate) const BUILD_L2: usize = 18;

/// Where the fast path sent a frame: its egress interface and that
/// interface's port, which the frame is addressed to (`Mbuf::port`). The
/// caller counts it ([`Ctx::count_fast_path`], or per frame in a burst of
/// many VRs) and queues it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    pub egress: u16,
    pub port: u16,
}

/// What a stage needs besides the VR: shared, per-burst state.
pub(crate) struct Ctx<'a> {
    pub now: u64,
    pub ports: &'a [Port],
    pub ifaces: &'a [Iface],
    pub pool: &'a mut MbufPool,
    pub counters: &'a WorkerCounters,
    pub tx: &'a mut TxBatch,
    /// Other workers' inboxes, for what this one learns.
    pub peers: &'a [SyncSender<Event>],
    pub events_lost: &'a mut u64,
    /// VRs whose punt queue went from empty to non-empty in this worker.
    pub punt_dirty: &'a mut Vec<u16>,
    /// Per-frame counters not yet written to `counters`.
    pub tally: Tally,
}

/// The per-frame counters of forwarding and transmit, summed while
/// consecutive frames share their interfaces and written to the worker's
/// counters when they change and when the [`Ctx`] goes away (end of burst):
/// a plain burst writes each once, not once per frame (what that buys:
/// docs/benchmarks.md).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Ingress interface of `forwarded` and `fast_path`.
    ingress: u16,
    /// Forwarded by the full stages.
    forwarded: u64,
    /// Forwarded by the fast path: counted forwarded too when written.
    fast_path: u64,
    /// Egress interface, its port, and what they sent.
    egress: u16,
    port: u16,
    tx_packets: u64,
    tx_bytes: u64,
}

impl Ctx<'_> {
    /// The tally, its ingress counts now those of interface `iface`.
    #[inline(always)]
    fn ingress(&mut self, iface: u16) -> &mut Tally {
        if self.tally.ingress != iface {
            self.flush_ingress();
            self.tally.ingress = iface;
        }
        &mut self.tally
    }

    /// Counts a packet of ingress interface `iface` as forwarded.
    #[inline(always)]
    pub(crate) fn count_forwarded(&mut self, iface: u16) {
        self.ingress(iface).forwarded += 1;
    }

    /// Counts `len` bytes sent on interface `egress` of port `port`.
    #[inline(always)]
    fn tally_tx(&mut self, egress: u16, port: u16, len: u64) {
        if self.tally.egress != egress {
            self.flush_tx();
            self.tally.egress = egress;
            self.tally.port = port;
        }
        self.tally.tx_packets += 1;
        self.tally.tx_bytes += len;
    }

    // Inline: in a burst of many VRs every frame has other interfaces than
    // the one before it, and flushes.
    #[inline(always)]
    fn flush_ingress(&mut self) {
        let t = &mut self.tally;
        if t.forwarded | t.fast_path != 0 {
            if let Some(c) = self.counters.ifaces.get(usize::from(t.ingress)) {
                c.forwarded.add(t.forwarded + t.fast_path);
                c.fast_path.add(t.fast_path);
            }
            (t.forwarded, t.fast_path) = (0, 0);
        }
    }

    #[inline(always)]
    fn flush_tx(&mut self) {
        let t = &mut self.tally;
        if t.tx_packets != 0 {
            for c in [
                self.counters.ifaces.get(usize::from(t.egress)),
                self.counters.ports.get(usize::from(t.port)),
            ]
            .into_iter()
            .flatten()
            {
                c.tx_packets.add(t.tx_packets);
                c.tx_bytes.add(t.tx_bytes);
            }
            (t.tx_packets, t.tx_bytes) = (0, 0);
        }
    }
}

impl core::ops::Drop for Ctx<'_> {
    /// Writes what the tally holds: the burst is over.
    fn drop(&mut self) {
        self.flush_ingress();
        self.flush_tx();
    }
}

impl Ctx<'_> {
    /// Counts `reason` on the packet's port and interface, and recycles it.
    pub fn drop(&mut self, m: Mbuf, reason: DropReason) {
        let c = self.counters;
        if let Some(p) = c.ports.get(m.port as usize) {
            p.drop(reason);
        }
        if let Some(i) = c.ifaces.get(m.iface as usize) {
            i.drop(reason);
        }
        self.pool.put(m);
    }

    /// Counters of the packet's ingress interface.
    pub fn iface_counters(&self, iface: u16) -> &CounterCells {
        &self.counters.ifaces[iface as usize]
    }

    /// A fresh buffer for an L3 packet of `l3_len` bytes built by the router,
    /// charged to `ingress` (port and interface) for drop accounting.
    pub fn new_local(&mut self, l3_len: usize, ingress: &Mbuf) -> Mbuf {
        let mut m = self.pool.get();
        m.set_len_from_start(BUILD_L2 + l3_len);
        m.l3_off = BUILD_L2 as u16;
        m.port = ingress.port;
        m.iface = ingress.iface;
        m.local_origin = true;
        m
    }

    /// Writes the egress interface's L2 header in front of the L3 packet and
    /// queues the frame on its port.
    #[inline]
    pub fn send(&mut self, mut m: Mbuf, egress: u16, dst: EthernetAddress, ethertype: EtherType) {
        // An interface of a topology this worker has not adopted (see
        // `ip_forward::v4`): dropped, counted.
        let Some(e) = self.ifaces.get(usize::from(egress)) else {
            return self.drop(m, DropReason::NoInterface);
        };
        let l2_len = usize::from(e.l2_len);
        let delta = m.l3_off as isize - l2_len as isize;
        if !m.adjust_head(delta) {
            self.drop(m, DropReason::NoBuffer);
            return;
        }
        m.l3_off = l2_len as u16;
        write_l2(e, m.data_mut(), dst, ethertype);
        self.enqueue(m, egress);
    }

    /// Counts a frame whose L2 header is written (forwarded on its ingress
    /// interface unless the router built it, transmitted on `egress` and its
    /// port) and queues it on the port.
    #[inline(always)]
    pub(crate) fn enqueue(&mut self, m: Mbuf, egress: u16) {
        let Some(port) = self.ifaces.get(usize::from(egress)).map(|e| e.port) else {
            return self.drop(m, DropReason::NoInterface);
        };
        if !m.local_origin {
            self.count_forwarded(m.iface);
        }
        self.queue(m, egress, port);
    }

    /// What [`Ctx::enqueue`] counts for a frame the fast path rewrote in
    /// place and addressed ([`Sent`]): taking the fast path
    /// (and so forwarded) on its ingress interface `ingress`, with no test
    /// of its origin, which the fast path knows, and `len` bytes sent on
    /// its egress interface and port. The caller queues it there: with
    /// [`Ctx::push_tx`], or a whole burst at once.
    #[inline(always)]
    pub(crate) fn count_fast_path(&mut self, ingress: u16, sent: Sent, len: usize) {
        self.ingress(ingress).fast_path += 1;
        self.tally_tx(sent.egress, sent.port, len as u64);
    }

    /// Queues `m`, counted already, on its port (`m.port`).
    #[inline(always)]
    pub(crate) fn push_tx(&mut self, m: Mbuf) {
        self.tx.ports[usize::from(m.port)].push(m);
    }

    /// Counts `m` sent on `egress` and its port `port`, and addresses it
    /// to that port.
    #[inline(always)]
    fn count_tx(&mut self, m: &mut Mbuf, egress: u16, port: u16) {
        self.tally_tx(egress, port, m.len() as u64);
        m.port = port;
    }

    /// Counts `m` sent on `egress` and its port `port`, and queues it there.
    #[inline(always)]
    pub(crate) fn queue(&mut self, mut m: Mbuf, egress: u16, port: u16) {
        self.count_tx(&mut m, egress, port);
        self.push_tx(m);
    }

    /// Sends an L3 packet to neighbor `addr` on `egress`, resolving its MAC.
    pub fn output(&mut self, vr: &mut Vr, m: Mbuf, egress: u16, addr: IpAddr) {
        let ethertype = ethertype_of(addr);
        let neigh = match vr.neighbors.find(egress, addr) {
            Some(n) => n,
            None => match vr.neighbors.ensure(egress, addr, false) {
                Some(n) => n,
                None => return self.drop(m, DropReason::NeighborTableFull),
            },
        };
        self.output_neigh(vr, m, egress, neigh, ethertype);
    }

    /// Sends an L3 packet through neighbor slot `neigh`.
    #[inline]
    pub fn output_neigh(
        &mut self,
        vr: &mut Vr,
        m: Mbuf,
        egress: u16,
        neigh: u32,
        ethertype: EtherType,
    ) {
        if neigh == u32::MAX {
            return self.drop(m, DropReason::NeighborTableFull);
        }
        match vr.neighbors.resolve(neigh, self.now) {
            Resolve::Ready(mac) => self.send(m, egress, mac, ethertype),
            Resolve::ReadyAndProbe(mac) => {
                self.send(m, egress, mac, ethertype);
                self.send_probe(
                    vr,
                    Probe {
                        index: neigh,
                        unicast: Some(mac),
                    },
                );
            }
            Resolve::Hold { probe } => {
                if let Err(m) = vr.neighbors.hold(neigh, m) {
                    return self.drop(m, DropReason::NeighborUnresolved);
                }
                if probe {
                    self.send_probe(
                        vr,
                        Probe {
                            index: neigh,
                            unicast: None,
                        },
                    );
                }
            }
            Resolve::Reject => self.drop(m, DropReason::NeighborUnresolved),
        }
    }

    /// Routes a packet the router built (ICMP error, echo reply, NA) toward `dst`.
    pub fn route_local(&mut self, vr: &mut Vr, m: Mbuf, dst: IpAddr) {
        let l3 = m.data().get(usize::from(m.l3_off)..).unwrap_or(&[]);
        let flow = || crate::ecmp::flow_of(l3);
        let nh = match dst {
            IpAddr::V4(d) => vr.lookup4(d, flow),
            IpAddr::V6(d) => vr.lookup6(d, flow),
        };
        match nh {
            Some(NextHop::Connected { iface }) => self.output(vr, m, iface, dst),
            Some(NextHop::Gateway { iface, neigh }) => {
                self.output_neigh(vr, m, iface, neigh, ethertype_of(dst))
            }
            _ => self.drop(m, DropReason::NoRouteLocal),
        }
    }

    /// Records `mac` for `addr` on `iface` (creating the entry), sends what
    /// was held for it, and tells the other workers. Shared by ARP and NDP.
    pub fn learn(
        &mut self,
        vr: &mut Vr,
        iface: u16,
        addr: IpAddr,
        mac: EthernetAddress,
        confirmed: bool,
    ) {
        let Some(slot) = vr.neighbors.ensure(iface, addr, false) else {
            return;
        };
        if !self.release(vr, slot, iface, addr, mac, confirmed) {
            return;
        }
        // Every worker keeps its own table; tell the others what is news.
        let ev = Event::Learned {
            vr: vr.id,
            iface,
            addr,
            mac,
            confirmed,
        };
        Worker::broadcast(self.peers, self.events_lost, ev);
    }

    /// Applies a learned MAC to neighbor `slot` and sends the packets held
    /// for it. Returns whether that was news ([`NeighborTable::learn`]).
    ///
    /// [`NeighborTable::learn`]: crate::neighbor::NeighborTable::learn
    pub fn release(
        &mut self,
        vr: &mut Vr,
        slot: u32,
        iface: u16,
        addr: IpAddr,
        mac: EthernetAddress,
        confirmed: bool,
    ) -> bool {
        let (now, et) = (self.now, ethertype_of(addr));
        vr.neighbors.learn(slot, mac, confirmed, now, |held, mac| {
            self.send(held, iface, mac, et)
        })
    }

    /// Sends the probe for neighbor `p`: an ARP request (RFC 826) or a
    /// Neighbor Solicitation (RFC 4861 §7.2.2), broadcast/multicast unless
    /// it refreshes a known MAC.
    pub fn send_probe(&mut self, vr: &Vr, p: Probe) {
        let n = vr.neighbors.get(p.index);
        // Next hops published before the topology that has their
        // interface (or after it lost it) name one this worker lacks.
        let Some(iface) = self.ifaces.get(usize::from(n.iface)) else {
            return;
        };
        let egress = n.iface;
        match n.addr {
            IpAddr::V4(target) => {
                let Some(src) = iface.source4(target) else {
                    return;
                };
                let repr = ArpRepr {
                    operation: Operation::Request,
                    source_hardware_addr: iface.mac,
                    source_protocol_addr: src,
                    target_hardware_addr: EthernetAddress([0; 6]),
                    target_protocol_addr: target,
                };
                let mut m = self.pool.get();
                m.set_len_from_start(BUILD_L2 + repr.buffer_len());
                m.l3_off = BUILD_L2 as u16;
                m.port = iface.port;
                m.iface = egress;
                m.local_origin = true;
                repr.emit(&mut ArpPacket::new_unchecked(m.l3_mut()));
                let dst = p.unicast.unwrap_or(EthernetAddress::BROADCAST);
                self.send(m, egress, dst, EtherType::Arp);
            }
            IpAddr::V6(target) => {
                let Some(src) = iface.source6(target) else {
                    return;
                };
                let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                    target_addr: target,
                    lladdr: Some(iface.mac),
                });
                let (dst_ip, dst_mac) = match p.unicast {
                    Some(mac) => (target, mac),
                    None => {
                        let group = wire6::solicited_node(&target);
                        (group, ethernet::ipv6_multicast_mac(&group))
                    }
                };
                let mut m = self.pool.get();
                m.port = iface.port;
                m.iface = egress;
                m.local_origin = true;
                build_icmpv6(&mut m, src, dst_ip, 255, &ns);
                self.send(m, egress, dst_mac, EtherType::Ipv6);
            }
        }
    }
}

/// The ethertype of packets to `addr`.
pub(crate) fn ethertype_of(addr: IpAddr) -> EtherType {
    match addr {
        IpAddr::V4(_) => EtherType::Ipv4,
        IpAddr::V6(_) => EtherType::Ipv6,
    }
}

/// Writes an IPv6 + ICMPv6 packet into `m` (leaving [`BUILD_L2`] bytes for L2).
pub(crate) fn build_icmpv6(
    m: &mut Mbuf,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    icmp: &Icmpv6Repr<'_>,
) {
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit,
    };
    m.set_len_from_start(BUILD_L2 + ip.buffer_len() + icmp.buffer_len());
    m.l3_off = BUILD_L2 as u16;
    let l3 = m.l3_mut();
    let mut pkt = Ipv6Packet::new_unchecked(&mut l3[..]);
    ip.emit(&mut pkt);
    let mut icmp_pkt = Icmpv6Packet::new_unchecked(&mut l3[40..]);
    icmp.emit(&src, &dst, &mut icmp_pkt);
}

/// The neighbor a forwarded packet goes to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Via {
    /// An attached host: look its address up.
    Host(IpAddr),
    /// A gateway whose neighbor slot is known.
    Slot(u32),
}

impl Ctx<'_> {
    /// Outputs toward `via` on `egress`.
    pub(crate) fn output_via(
        &mut self,
        vr: &mut Vr,
        m: Mbuf,
        egress: u16,
        via: Via,
        ethertype: EtherType,
    ) {
        match via {
            Via::Host(addr) => self.output(vr, m, egress, addr),
            Via::Slot(n) => self.output_neigh(vr, m, egress, n, ethertype),
        }
    }
}

/// Punting: frames for the VR's control plane.
impl Ctx<'_> {
    /// Puts `m` on the VR's punt queue, or drops it when the queue is full.
    pub(crate) fn punt(&mut self, vr: &mut Vr, m: Mbuf) {
        // Control protocols within their own rate pass a full queue (into
        // its last places) and an empty punt bucket (crate::protocol); a
        // protocol token is taken only where a limit would refuse.
        let (queued, most) = (vr.punt.len(), vr.limits.punt_queue as usize);
        let protected = if queued < most {
            false
        } else if queued < most + PROTECTED_PUNTS && vr.protected(&m, self.now) {
            true
        } else {
            return self.drop(m, DropReason::PuntQueueFull);
        };
        if !protected && !vr.punt_bucket.take(self.now) && !vr.protected(&m, self.now) {
            return self.drop(m, DropReason::PuntRateLimit);
        }
        self.iface_counters(m.iface).punted.inc();
        if vr.punt.is_empty() {
            self.punt_dirty.push(vr.id);
        }
        vr.punt.push_back(m);
    }

    /// Punts a copy of `m` (the worker keeps the original) when the VR has a
    /// control plane: ARP and NDP that the data plane answers itself, so that
    /// the tenant's kernel learns the sender too. The copy obeys the same punt
    /// queue and rate limits as everything else punted.
    pub(crate) fn punt_copy(&mut self, vr: &mut Vr, m: &Mbuf) {
        if !vr.limits.control_plane {
            return;
        }
        // A buffer that holds it whole, or no copy.
        let Some(mut c) = self.pool.get_fitting(m.len()) else {
            return;
        };
        c.fill(m.data());
        c.port = m.port;
        c.iface = m.iface;
        c.l3_off = m.l3_off;
        c.local_origin = false;
        self.punt(vr, c);
    }
}

/// Writes `e`'s L2 header toward `dst` into the first [`Iface::l2_len`]
/// bytes of `data`: MACs, the tags (outer TPID as configured, inner 0x8100; PCP 0,
/// DEI 0), and `ethertype`.
pub(crate) fn write_l2(e: &Iface, data: &mut [u8], dst: EthernetAddress, ethertype: EtherType) {
    let mut eth = EthernetFrame::new_unchecked(&mut data[..]);
    eth.set_dst_addr(dst);
    eth.set_src_addr(e.mac);
    let t = usize::from(e.l2_len) - 14;
    if let (Some(to), Some(from)) = (data.get_mut(12..12 + t), e.tags.get(..t)) {
        to.copy_from_slice(from);
    }
    if let Some(to) = data.get_mut(12 + t..14 + t) {
        to.copy_from_slice(&u16::from(ethertype).to_be_bytes());
    }
}
