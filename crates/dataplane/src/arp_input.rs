//! ARP input (RFC 826, with RFC 1122 §2.3.2 and RFC 5227 notes): answer
//! requests for the interface's addresses, learn senders.
//!
//! A VR with a control plane also gets a copy of every request and reply
//! for its own addresses ([`Ctx::punt_copy`]): its kernel learns the
//! sender as well (BGP needs the neighbour's MAC). The kernel then answers
//! the copied request too; the runtime drops ARP replies the TAP sends for
//! the VR's own addresses, so each request is answered once, by the worker.

use std::net::IpAddr;

use vrhost_wire::arp::{ArpPacket, ArpRepr, Operation};
use vrhost_wire::ethernet::EtherType;

use crate::drop_reason::DropReason;
use crate::mbuf::Mbuf;
use crate::output::Ctx;
use crate::worker::Vr;

pub(crate) fn process(ctx: &mut Ctx<'_>, vr: &mut Vr, mut m: Mbuf) {
    let Some(repr) = ArpPacket::new_checked(m.l3())
        .ok()
        .and_then(|p| ArpRepr::parse(&p).ok())
    else {
        return ctx.drop(m, DropReason::BadArp);
    };
    let (op, sha, spa, tpa) = (
        repr.operation,
        repr.source_hardware_addr,
        repr.source_protocol_addr,
        repr.target_protocol_addr,
    );
    if !matches!(op, Operation::Request | Operation::Reply) || !sha.is_unicast() {
        return ctx.drop(m, DropReason::BadArp);
    }
    let ingress = m.iface;
    let iface = &ctx.ifaces[ingress as usize];
    let our_mac = iface.mac;
    if iface.owns4(&spa) {
        // Somebody else uses one of our addresses (RFC 5227 §2.4).
        return ctx.drop(m, DropReason::AddressConflict);
    }
    let for_us = iface.owns4(&tpa);
    let on_link = iface.on_link4(spa);
    let known = vr.neighbors.find(ingress, IpAddr::V4(spa)).is_some();
    // RFC 826 "merge": update a sender we already know; add it when the
    // packet is for us. Replies to our own requests confirm reachability.
    if on_link && (known || for_us) {
        ctx.learn(
            vr,
            ingress,
            IpAddr::V4(spa),
            sha,
            op == Operation::Reply && for_us,
        );
    }
    if !for_us {
        return ctx.drop(m, DropReason::NeighborNotForUs);
    }
    ctx.iface_counters(ingress).local.inc();
    ctx.punt_copy(vr, &m);
    if op != Operation::Request {
        return ctx.pool.put(m);
    }
    let reply = ArpRepr {
        operation: Operation::Reply,
        source_hardware_addr: our_mac,
        source_protocol_addr: tpa,
        target_hardware_addr: sha,
        target_protocol_addr: spa,
    };
    m.local_origin = true;
    reply.emit(&mut ArpPacket::new_unchecked(m.l3_mut()));
    ctx.send(m, ingress, sha, EtherType::Arp);
}
