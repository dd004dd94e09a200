//! Frames that arrive with offload state (a partial checksum, a TCP or UDP
//! super-frame), as an `af_packet` port with virtio-net headers hands them
//! over: forwarded whole when every segment fits the egress MTU, refused
//! with ICMP or cut and fragmented when not, and finished by
//! `offload::resolve` into what a plain link sends.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::*;
use vrhost_dataplane::offload;
use vrhost_dataplane::{DropReason, Engine, Gso, Mbuf, Offload, PortId, TxBatch};
use vrhost_wire::arp::Operation;
use vrhost_wire::checksum;
use vrhost_wire::ethernet::ipv6_multicast_mac;
use vrhost_wire::ethernet::EtherType;
use vrhost_wire::icmpv4::Icmpv4Repr;
use vrhost_wire::icmpv6::{Icmpv6Repr, NdiscRepr};
use vrhost_wire::ip::IpProtocol;
use vrhost_wire::ipv6::solicited_node;

/// A TCP segment of `payload` patterned bytes from port 5000 to 80, its
/// checksum field holding the pseudo-header's sum for `pseudo` (as a Linux
/// sender leaves it).
fn tcp(payload: usize, pseudo: impl Fn(u32) -> u32) -> Vec<u8> {
    let mut t = vec![0u8; 20 + payload];
    t[0..2].copy_from_slice(&5000u16.to_be_bytes());
    t[2..4].copy_from_slice(&80u16.to_be_bytes());
    t[4..8].copy_from_slice(&1000u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x18; // PSH, ACK
    for (i, b) in t[20..].iter_mut().enumerate() {
        *b = (i * 13 + 1) as u8;
    }
    let sum = checksum::fold(pseudo(t.len() as u32));
    t[16..18].copy_from_slice(&sum.to_be_bytes());
    t
}

fn tcp4_super(payload: usize, mss: u16, df: bool) -> (Vec<u8>, Offload) {
    let seg = tcp(payload, |len| {
        checksum::pseudo_header_v4(&HOST, &REMOTE, 6, len)
    });
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(HOST, REMOTE, IpProtocol::Tcp, 64, df, &seg),
    );
    let off = Offload {
        partial: true,
        gso: Gso::Tcp4,
        gso_size: mss,
        csum_start: 20,
        csum_offset: 16,
    };
    (f, off)
}

fn tcp6_super(payload: usize, mss: u16) -> (Vec<u8>, Offload) {
    let seg = tcp(payload, |len| {
        checksum::pseudo_header_v6(&HOST6, &REMOTE6, 6, len)
    });
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &ipv6(HOST6, REMOTE6, IpProtocol::Tcp, 64, &seg),
    );
    let off = Offload {
        partial: true,
        gso: Gso::Tcp6,
        gso_size: mss,
        csum_start: 40,
        csum_offset: 16,
    };
    (f, off)
}

/// Feeds `frame` with offload state `off` on port 0 and returns what left,
/// as buffers (their offload state kept).
fn send_offloaded(e: &mut Engine, frame: &[u8], off: Offload, now: u64) -> Vec<Mbuf> {
    let mut m = e.pool().get();
    m.fill(frame);
    m.port = 0;
    m.offload = off;
    let mut rx = vec![m];
    let mut tx = TxBatch::new(e.port_count());
    e.process_burst(&mut rx, now, &mut tx);
    tx.ports.iter_mut().flat_map(|q| q.drain(..)).collect()
}

/// The transport checksum of IPv4 packet `l3` verifies.
fn l4_ok_v4(l3: &[u8]) -> bool {
    let hl = usize::from(l3[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
    let src = Ipv4Addr::new(l3[12], l3[13], l3[14], l3[15]);
    let dst = Ipv4Addr::new(l3[16], l3[17], l3[18], l3[19]);
    let p = checksum::pseudo_header_v4(&src, &dst, l3[9], (total - hl) as u32);
    checksum::fold(p + checksum::sum(&l3[hl..total])) == 0xffff
}

fn l4_ok_v6(l3: &[u8]) -> bool {
    let len = usize::from(u16::from_be_bytes([l3[4], l3[5]]));
    let a = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&l3[at..at + 16]).unwrap());
    let p = checksum::pseudo_header_v6(&a(8), &a(24), l3[6], len as u32);
    checksum::fold(p + checksum::sum(&l3[40..40 + len])) == 0xffff
}

fn learn_host(e: &mut Engine) {
    let out = send(
        e,
        0,
        &arp(Operation::Reply, HOST_MAC, HOST, RED0, RED0_MAC, None),
        0,
    );
    assert!(out.is_empty());
}

/// A neighbour solicitation from the host teaches red its MAC (red answers).
fn learn_host6(e: &mut Engine) {
    let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: RED0_6,
        lladdr: Some(HOST_MAC),
    });
    let dst = solicited_node(&RED0_6);
    let f = eth(
        ipv6_multicast_mac(&dst),
        HOST_MAC,
        None,
        EtherType::Ipv6,
        &icmpv6(HOST6, dst, 255, &ns),
    );
    assert_eq!(send(e, 0, &f, 0).len(), 1, "NA for our address");
}

#[test]
fn a_super_frame_whose_segments_fit_is_forwarded_whole_then_cut_by_a_plain_link() {
    let mut e = engine();
    // Segments of 40 + 1300 bytes fit red1's 1400.
    let (f, off) = tcp4_super(4000, 1300, true);
    let mut out = send_offloaded(&mut e, &f, off, 0);
    assert_eq!(out.len(), 1, "one lookup, one frame");
    let m = &out[0];
    assert_eq!(m.port, 1);
    assert_eq!(
        m.data().len(),
        18 + 40 + 4000,
        "VLAN 100 pushed, nothing cut"
    );
    assert_eq!(
        m.offload, off,
        "offsets count from L3: the tag moved nothing"
    );
    assert_eq!(m.data()[18 + 8], 63, "TTL decremented once");
    assert_eq!(
        e.iface_counters(vrhost_dataplane::IfaceId::new(0))
            .forwarded,
        1
    );

    // An egress without offloads: four segments, whole checksums.
    let mut scratch = Vec::new();
    assert_eq!(offload::resolve(&mut out, &mut scratch, e.pool()), 0);
    assert_eq!(out.len(), 4);
    let mut payload = Vec::new();
    for s in &out {
        let l3 = &s.data()[18..];
        assert!(s.data().len() - 18 <= usize::from(RED1_MTU));
        assert_eq!(l3[8], 63);
        assert!(checksum::verifies(&l3[..20]), "IPv4 header checksum");
        assert!(l4_ok_v4(l3), "TCP checksum");
        assert!(!s.offload.any());
        payload.extend_from_slice(&l3[40..]);
    }
    assert_eq!(payload, &f[14 + 40..]);
}

#[test]
fn a_super_frame_with_df_whose_segments_exceed_the_mtu_gets_fragmentation_needed() {
    let mut e = engine();
    learn_host(&mut e);
    let (f, off) = tcp4_super(4000, 1448, true);
    let out = send_offloaded(&mut e, &f, off, 1);
    assert_eq!(out.len(), 1);
    let icmp = Out {
        port: out[0].port,
        frame: out[0].data().to_vec(),
    };
    assert_eq!(icmp.ipv4().dst_addr(), HOST);
    match icmp.icmpv4() {
        Icmpv4Repr::DstUnreachable {
            code: 4,
            next_hop_mtu,
            ..
        } => assert_eq!(next_hop_mtu, RED1_MTU),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        e.port_counters(PortId::from_index(0))
            .drop_count(DropReason::MtuExceeded),
        1
    );
}

#[test]
fn a_super_frame_without_df_is_cut_and_each_segment_fragmented() {
    let mut e = engine();
    // 1448 + 1448 + 1104 bytes: the two full segments (1488 bytes) are
    // fragmented for red1's 1400, the last (1144) is not.
    let (f, off) = tcp4_super(4000, 1448, false);
    let out = send_offloaded(&mut e, &f, off, 0);
    assert_eq!(out.len(), 5);
    let mut by_id: Vec<(u16, Vec<u8>)> = Vec::new();
    for m in &out {
        let l3 = &m.data()[18..];
        let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
        assert!(total <= usize::from(RED1_MTU));
        assert!(!m.offload.any(), "fragments carry no offload state");
        assert_eq!(l3[8], 63);
        let id = u16::from_be_bytes([l3[4], l3[5]]);
        let frag_off = usize::from(u16::from_be_bytes([l3[6], l3[7]]) & 0x1fff) * 8;
        match by_id.iter_mut().find(|(i, _)| *i == id) {
            Some((_, body)) => {
                assert_eq!(body.len(), frag_off);
                body.extend_from_slice(&l3[20..total]);
            }
            None => by_id.push((id, l3[20..total].to_vec())),
        }
    }
    assert_eq!(by_id.len(), 3, "three segments, IDs counting up");
    let mut payload = Vec::new();
    for (id, body) in &by_id {
        // Reassembled, each segment's TCP checksum verifies.
        let mut l3 = ipv4(HOST, REMOTE, IpProtocol::Tcp, 63, false, body);
        l3[4..6].copy_from_slice(&id.to_be_bytes());
        assert!(l4_ok_v4(&l3), "segment {id:#x}");
        payload.extend_from_slice(&body[20..]);
    }
    assert_eq!(payload, &f[14 + 40..]);
}

#[test]
fn a_partial_checksum_is_finished_before_fragmenting() {
    let mut e = engine();
    let mut u = udp(3000);
    let sum = checksum::fold(checksum::pseudo_header_v4(
        &HOST,
        &REMOTE,
        17,
        u.len() as u32,
    ));
    u[6..8].copy_from_slice(&sum.to_be_bytes());
    let f = eth(
        RED0_MAC,
        HOST_MAC,
        None,
        EtherType::Ipv4,
        &ipv4(HOST, REMOTE, IpProtocol::Udp, 64, false, &u),
    );
    let off = Offload {
        partial: true,
        gso: Gso::None,
        gso_size: 0,
        csum_start: 20,
        csum_offset: 6,
    };
    let out = send_offloaded(&mut e, &f, off, 0);
    assert_eq!(out.len(), 3);
    let body: Vec<u8> = out
        .iter()
        .flat_map(|m| {
            let l3 = &m.data()[18..];
            let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
            l3[20..total].to_vec()
        })
        .collect();
    let l3 = ipv4(HOST, REMOTE, IpProtocol::Udp, 63, false, &body);
    assert!(l4_ok_v4(&l3), "the reassembled datagram's UDP checksum");
}

#[test]
fn ipv6_super_frames_are_held_to_the_mtu_by_their_segments() {
    let mut e = engine();
    learn_host6(&mut e);
    // 60 + 1300 fits 1400: forwarded whole.
    let (f, off) = tcp6_super(3000, 1300);
    let mut out = send_offloaded(&mut e, &f, off, 0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].data().len(), 18 + 60 + 3000);
    assert_eq!(out[0].data()[18 + 7], 63, "hop limit decremented");
    assert_eq!(offload::resolve(&mut out, &mut Vec::new(), e.pool()), 0);
    assert_eq!(out.len(), 3);
    assert!(out.iter().all(|s| l4_ok_v6(&s.data()[18..])));
    // 60 + 1440 does not: Packet Too Big with the MTU, never fragmented.
    let (f, off) = tcp6_super(3000, 1440);
    let out = send_offloaded(&mut e, &f, off, 1);
    assert_eq!(out.len(), 1);
    let icmp = Out {
        port: out[0].port,
        frame: out[0].data().to_vec(),
    };
    match icmp.icmpv6() {
        Icmpv6Repr::PacketTooBig { mtu, .. } => assert_eq!(mtu, u32::from(RED1_MTU)),
        other => panic!("{other:?}"),
    }
}
