//! The TAP stage (`vrhost_dataplane::tap`) on arbitrary bytes: judging
//! never panics, tagging and untagging never panic, and a frame tagged for
//! the port and untagged again is the frame sent, with the interface's MAC
//! as source. And a worker sends such a frame on the interface's port,
//! counted there.

mod common;

use common::{arp, spec, HOST, RED1, RED1_MAC};
use proptest::prelude::*;
use vrhost_dataplane::iface::Iface;
use vrhost_dataplane::mbuf::MbufPool;
use vrhost_dataplane::tap::{judge, tag_for_port, untagged_copy, Verdict};
use vrhost_dataplane::{IfaceId, Limits, TableWriter, TxBatch, VrId, Worker};
use vrhost_wire::arp::Operation;
use vrhost_wire::ethernet::EthernetAddress;

fn iface(vlan: Option<u16>) -> Iface {
    Iface {
        name: "red0".into(),
        vr: 0,
        port: 0,
        vlan,
        inner_vlan: None,
        tpid: Default::default(),
        mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
        mtu: 1500,
        l2_len: vrhost_dataplane::iface::l2_of(vlan, None, Default::default()).0,
        tags: vrhost_dataplane::iface::l2_of(vlan, None, Default::default()).1,
        addrs4: vec![("10.0.0.1".parse().unwrap(), 24)],
        addrs6: vec![("2001:db8::1".parse().unwrap(), 64)],
        mcast: vec![],
        control_mcast: true,
        urpf: Default::default(),
        filter_in: None,
        filter_out: None,
    }
}

/// A raw ARP frame from the kernel: opcode `op`, sender address `spa`.
fn arp_bytes(op: u8, spa: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend([2, 0, 0, 0, 0, 9, 0x08, 0x06]);
    f.extend([0, 1, 8, 0, 6, 4, 0, op]);
    f.extend([2, 0, 0, 0, 0, 9]);
    f.extend(spa);
    f.extend([0; 6]);
    f.extend([10, 0, 0, 9]);
    f
}

/// A raw neighbor advertisement for `target`.
fn na_bytes(target: std::net::Ipv6Addr) -> Vec<u8> {
    let mut f = vec![0x33, 0x33, 0, 0, 0, 1, 2, 0, 0, 0, 0, 9, 0x86, 0xdd];
    let mut ip = vec![0x60, 0, 0, 0, 0, 24, 58, 255];
    ip.extend([0; 32]);
    f.extend(ip);
    f.extend([136, 0, 0, 0, 0x20, 0, 0, 0]);
    f.extend(target.octets());
    f
}

#[test]
fn answers_for_own_addresses_are_duplicates() {
    let i = iface(None);
    assert_eq!(judge(&i, &arp_bytes(2, [10, 0, 0, 1])), Verdict::Duplicate);
    assert_eq!(judge(&i, &arp_bytes(1, [10, 0, 0, 1])), Verdict::Send);
    assert_eq!(judge(&i, &arp_bytes(2, [10, 0, 0, 9])), Verdict::Send);
    assert_eq!(
        judge(&i, &na_bytes("2001:db8::1".parse().unwrap())),
        Verdict::Duplicate
    );
    assert_eq!(
        judge(&i, &na_bytes("2001:db8::9".parse().unwrap())),
        Verdict::Send
    );
}

#[test]
fn short_tagged_and_oversized_frames_are_bad() {
    let i = iface(None);
    assert_eq!(judge(&i, &[0; 13]), Verdict::Bad);
    let mut tagged = arp_bytes(1, [10, 0, 0, 9]);
    tagged[12..14].copy_from_slice(&[0x81, 0]);
    assert_eq!(judge(&i, &tagged), Verdict::Bad);
    assert_eq!(judge(&i, &vec![0; 14 + 1501]), Verdict::Bad);
    assert_eq!(judge(&i, &vec![0; 14 + 1500]), Verdict::Send);
}

#[test]
fn a_tag_goes_on_and_comes_off() {
    let mut pool = MbufPool::new(4);
    let frame = arp_bytes(1, [10, 0, 0, 9]);
    let mut m = pool.get();
    m.fill(&frame);
    assert!(tag_for_port(&iface(Some(5)), &mut m));
    let d = m.data();
    assert_eq!(d.len(), frame.len() + 4);
    assert_eq!(&d[..6], &frame[..6]);
    assert_eq!(&d[6..12], &[2, 0, 0, 0, 0, 1]);
    assert_eq!(&d[12..18], &[0x81, 0, 0, 5, 0x08, 0x06]);
    assert_eq!(&d[18..], &frame[14..]);
    assert_eq!(m.l3_off, 18);
    let mut back = pool.get();
    untagged_copy(&m, &mut back);
    let mut expect = frame.clone();
    expect[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    assert_eq!(back.data(), &expect[..]);
}

/// Frames that look like what a kernel sends: an Ethernet header with one
/// of the EtherTypes the judge reads, then anything.
fn frames() -> impl Strategy<Value = Vec<u8>> {
    let ethertype = prop_oneof![
        Just([0x08u8, 0x06]),
        Just([0x86, 0xdd]),
        Just([0x08, 0x00]),
        Just([0x81, 0x00]),
        Just([0x88, 0xa8]),
        any::<[u8; 2]>(),
    ];
    (
        any::<[u8; 12]>(),
        ethertype,
        proptest::collection::vec(any::<u8>(), 0..1600),
    )
        .prop_map(|(macs, et, rest)| {
            let mut f = macs.to_vec();
            f.extend(et);
            f.extend(rest);
            f
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn judging_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), f in frames()) {
        for vlan in [None, Some(7)] {
            let i = iface(vlan);
            let _ = judge(&i, &bytes);
            let v = judge(&i, &f);
            if f.len() < 14 || f.len() > 14 + 1500 || matches!(f[12..14], [0x81, 0] | [0x88, 0xa8]) {
                prop_assert_eq!(v, Verdict::Bad);
            }
        }
    }

    #[test]
    fn tagging_then_untagging_gives_the_frame_back(f in frames(), vid in 1u16..4095, tagged in any::<bool>()) {
        let i = iface(tagged.then_some(vid));
        let mut pool = MbufPool::new(4);
        let mut m = pool.get();
        m.fill(&f);
        let ok = tag_for_port(&i, &mut m);
        prop_assert_eq!(ok, f.len() >= 14);
        if !ok {
            prop_assert_eq!(m.data(), &f[..]);
            return Ok(());
        }
        let d = m.data();
        prop_assert_eq!(&d[6..12], &[2, 0, 0, 0, 0, 1]);
        if tagged {
            prop_assert_eq!(d.len(), f.len() + 4);
            prop_assert_eq!(&d[12..14], &[0x81, 0]);
            prop_assert_eq!(u16::from_be_bytes([d[14], d[15]]), vid);
            prop_assert_eq!(m.l3_off, 18);
        } else {
            prop_assert_eq!(m.l3_off, 14);
        }
        let mut back = pool.get();
        untagged_copy(&m, &mut back);
        let mut expect = f.clone();
        expect[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        prop_assert_eq!(back.data(), &expect[..]);
    }
}

/// A worker sends what red's kernel writes on the TAP of red1 (port p1,
/// VLAN 100) tagged, from red1's MAC, counted on red1 and p1; an ARP reply
/// for red1's own address is dropped as a duplicate, and counted nowhere.
#[test]
fn a_worker_sends_tap_frames_tagged_and_counted() {
    let mut writer = TableWriter::new(&spec(Limits::default())).expect("tables");
    let mut w = Worker::create(&mut writer, 1).pop().expect("worker");
    let red1 = writer.working().vr_ifaces(VrId::new(0))[1];
    let mut tx = TxBatch::new(3);
    let kernel_mac = EthernetAddress([2, 0xee, 0, 0, 0, 1]);
    let request = arp(
        Operation::Request,
        kernel_mac,
        RED1,
        HOST,
        EthernetAddress::BROADCAST,
        None,
    );
    let mut m = w.pool().get();
    m.fill(&request);
    assert_eq!(w.send_from_tap(red1, m, 0, &mut tx), Verdict::Send);
    let reply = arp(
        Operation::Reply,
        kernel_mac,
        RED1,
        HOST,
        EthernetAddress::BROADCAST,
        None,
    );
    let mut m = w.pool().get();
    m.fill(&reply);
    assert_eq!(w.send_from_tap(red1, m, 0, &mut tx), Verdict::Duplicate);
    let mut m = w.pool().get();
    m.fill(&request[..10]);
    assert_eq!(w.send_from_tap(red1, m, 0, &mut tx), Verdict::Bad);
    let mut m = w.pool().get();
    m.fill(&request);
    assert_eq!(
        w.send_from_tap(IfaceId::new(9999), m, 0, &mut tx),
        Verdict::Bad,
        "no such interface"
    );

    assert!(tx.ports[0].is_empty() && tx.ports[2].is_empty());
    assert_eq!(tx.ports[1].len(), 1);
    let d = tx.ports[1][0].data();
    assert_eq!(&d[6..12], &RED1_MAC.0);
    assert_eq!(&d[12..16], &[0x81, 0, 0, 100]);
    assert_eq!(&d[16..], &request[12..]);
    let c = w.counters();
    assert_eq!(c.ifaces[red1.index()].tx_packets.get(), 1);
    assert_eq!(c.ports[1].tx_packets.get(), 1);
    assert_eq!(c.ports[1].tx_bytes.get(), d.len() as u64);
}

/// What red's kernel sends on red1's TAP: an ARP request for the host.
fn kernel_request() -> Vec<u8> {
    arp(
        Operation::Request,
        EthernetAddress([2, 0xee, 0, 0, 0, 1]),
        RED1,
        HOST,
        EthernetAddress::BROADCAST,
        None,
    )
}

/// Once red is deleted and another VR owns red1's port and VLAN, what red's
/// kernel still writes on red1's TAP reaches no port: it is `Detached`.
#[test]
fn a_deleted_vrs_tap_frames_reach_no_port() {
    let mut writer = TableWriter::new(&spec(Limits::default())).expect("tables");
    let mut w = Worker::create(&mut writer, 1).pop().expect("worker");
    let red = VrId::new(0);
    let red1 = writer.working().vr_ifaces(red)[1];
    let frame = kernel_request();
    writer.remove_vr(red).expect("remove red");
    // green takes p1 VLAN 100, red1's old place.
    let mut green = spec(Limits::default()).routers[0].clone();
    green.name = "green".into();
    green.interfaces.truncate(2);
    green.interfaces[0].port = 2;
    green.interfaces[0].vlan = Some(300);
    green.routes4.clear();
    green.routes6.clear();
    green.neighbors.clear();
    let g = writer.add_vr(&green).expect("green");
    writer.commit();
    let green1 = writer.working().vr_ifaces(g)[1];
    assert_ne!(green1, red1);
    assert!(!writer.working().iface_attached(red1));
    assert!(writer.working().iface_attached(green1));

    let mut tx = TxBatch::new(3);
    let mut m = w.pool().get();
    m.fill(&frame);
    w.idle(0, &mut tx);
    assert_eq!(w.send_from_tap(red1, m, 0, &mut tx), Verdict::Detached);
    assert!(tx.ports.iter().all(|p| p.is_empty()), "nothing queued");
    let mut m = w.pool().get();
    m.fill(&frame);
    assert_eq!(w.send_from_tap(green1, m, 0, &mut tx), Verdict::Send);
    assert_eq!(tx.ports[1].len(), 1);
}

/// What a tenant's kernel writes to its TAP passes the VR's rate ceiling:
/// with `pps = 10`, a burst of 100 frames sends the bucket's worth (its
/// burst is at least 64 packets) and the rest are dropped and counted as
/// `rate-ceiling` on the interface.
#[test]
fn tap_frames_pass_the_vrs_rate_ceiling() {
    let limits = Limits {
        pps: 10,
        ..Limits::default()
    };
    let mut writer = TableWriter::new(&spec(limits)).expect("tables");
    let mut w = Worker::create(&mut writer, 1).pop().expect("worker");
    let red1 = writer.working().vr_ifaces(VrId::new(0))[1];
    let frame = kernel_request();
    let mut tx = TxBatch::new(3);
    let (mut sent, mut limited) = (0, 0);
    for _ in 0..100 {
        let mut m = w.pool().get();
        m.fill(&frame);
        match w.send_from_tap(red1, m, 1_000_000_000, &mut tx) {
            Verdict::Send => sent += 1,
            Verdict::Limited => limited += 1,
            v => panic!("{v:?}"),
        }
    }
    assert_eq!(sent, 64, "one bucket's burst");
    assert_eq!(sent + limited, 100);
    assert_eq!(tx.ports[1].len(), sent);
    let c = w.counters();
    let i = &c.ifaces[red1.index()];
    assert_eq!(i.tx_packets.get(), sent as u64);
    assert_eq!(
        i.snapshot()
            .drop_count(vrhost_dataplane::DropReason::RateCeiling),
        limited as u64
    );
}

/// A tagged super-frame longer than an ordinary buffer, punted to a TAP:
/// copied untagged into a buffer that fits it (a large one), whole, its
/// offload state kept.
#[test]
fn a_punted_super_frame_is_copied_whole() {
    use vrhost_dataplane::mbuf::MAX_FRAME;
    use vrhost_dataplane::{Gso, Offload};
    let mut pool = MbufPool::new(4);
    let mut m = pool.get_large().expect("a large buffer");
    let mut frame: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    frame[12..18].copy_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
    m.fill(&frame);
    m.l3_off = 18;
    m.offload = Offload {
        partial: true,
        gso: Gso::Tcp4,
        gso_size: 1448,
        csum_start: 20,
        csum_offset: 16,
    };
    let mut back = pool.get_fitting(m.len() - 4).expect("a buffer that fits");
    assert!(back.is_large() && m.len() > MAX_FRAME);
    untagged_copy(&m, &mut back);
    assert_eq!(back.len(), frame.len() - 4);
    assert_eq!(&back.data()[..12], &frame[..12]);
    assert_eq!(&back.data()[12..], &frame[16..]);
    assert_eq!(back.offload, m.offload);
}
