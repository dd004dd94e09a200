//! A received frame, with its virtio-net header, into buffers: one, or,
//! for a super-frame longer than a buffer, as many super-frames as it
//! takes, each cut to fit one (checksums left partial). The drivers that
//! read offload metadata with their frames (`af_packet`, `vhost_user`)
//! share it.

use vrhost_dataplane::mbuf::MAX_FRAME;
use vrhost_dataplane::offload::{self, l2_len};
use vrhost_dataplane::{Gso, Mbuf, MbufPool, Offload};

use crate::{vnet, PortStats};

/// 802.1Q tag length.
pub(crate) const VLAN_LEN: usize = 4;

/// What became of one received frame.
pub(crate) enum Received {
    /// It is on `rx`, as this many buffers.
    Frames(usize),
    /// It could not be taken (malformed, or offloads that cannot be
    /// carried); counted in [`PortStats::dropped`].
    Dropped,
    /// It needs more buffers than the burst has room for: read it next time.
    NoRoom,
}

/// Copies received `frame` into buffers on `rx`, `n` of at most `max`
/// already there: one buffer, or, for a super-frame longer than a
/// buffer, as many super-frames as it takes. `vh` is its vnet header
/// (empty without one); `tag` the 802.1Q tag the device stripped, which
/// goes back into the frame.
#[allow(clippy::too_many_arguments)]
pub(crate) fn receive(
    stats: &mut PortStats,
    frame: &[u8],
    vh: &[u8],
    tag: Option<[u8; VLAN_LEN]>,
    pool: &mut MbufPool,
    rx: &mut Vec<Mbuf>,
    (n, max): (usize, usize),
    port_index: u16,
) -> Received {
    let Some(l2) = l2_len(frame) else {
        return Received::Dropped;
    };
    let off = match <&[u8; vnet::LEN]>::try_from(vh) {
        Ok(h) => match vnet::parse(h, l2) {
            Some(off) => off,
            None => return Received::Dropped,
        },
        Err(_) => Offload::NONE,
    };
    let len = frame.len() + if tag.is_some() { VLAN_LEN } else { 0 };
    if !headers_agree(&frame[l2..], len, &off) {
        return Received::Dropped;
    }
    // Whole, in a buffer that fits it (a large one for a super-frame); cut
    // into ordinary ones where no large one is left or it is longer still.
    let Some(mut m) = pool.get_fitting(len) else {
        return receive_cut(stats, frame, l2, tag, &off, pool, rx, (n, max), port_index);
    };
    match tag {
        Some(t) => {
            let buf = m.set_len_from_start(frame.len() + VLAN_LEN);
            buf[..12].copy_from_slice(&frame[..12]);
            buf[12..16].copy_from_slice(&t);
            buf[16..].copy_from_slice(&frame[12..]);
        }
        None => {
            m.fill(frame);
        }
    }
    deliver(stats, m, off, rx, port_index)
}

/// Puts received frame `m`, whose offload state is `off`, on `rx`, and
/// counts it.
pub(crate) fn deliver(
    stats: &mut PortStats,
    mut m: Mbuf,
    off: Offload,
    rx: &mut Vec<Mbuf>,
    port_index: u16,
) -> Received {
    m.offload = off;
    m.port = port_index;
    stats.rx_packets += 1;
    stats.rx_bytes += m.len() as u64;
    rx.push(m);
    Received::Frames(1)
}

/// Takes frame `m`, read straight into its buffer by the driver, with
/// its vnet header `vh`: what [`receive`] checks, without the copy.
pub(crate) fn take(
    stats: &mut PortStats,
    m: Mbuf,
    vh: &[u8; vnet::LEN],
    pool: &mut MbufPool,
    rx: &mut Vec<Mbuf>,
    port_index: u16,
) -> Received {
    let off = l2_len(m.data()).and_then(|l2| {
        let off = vnet::parse(vh, l2)?;
        headers_agree(&m.data()[l2..], m.len(), &off).then_some(off)
    });
    match off {
        Some(off) => deliver(stats, m, off, rx, port_index),
        _ => {
            pool.put(m);
            Received::Dropped
        }
    }
}

/// Whether a received frame of `len` bytes, L3 packet `pkt`, may be taken
/// with offload state `off`: what [`offload::offload_agrees`] allows (a
/// tenant's VM writes the vnet header directly over vhost-user), and a
/// frame longer than an ordinary buffer only as a super-frame to be cut.
fn headers_agree(pkt: &[u8], len: usize, off: &Offload) -> bool {
    offload::offload_agrees(pkt, off) && (len <= MAX_FRAME || off.gso != Gso::None)
}

/// [`receive`] for a super-frame longer than a buffer:
/// cut straight from the ring into super-frames that fit one, each
/// with `frame`'s L2 header (`l2` bytes, `tag` put back), checksums
/// left partial.
#[allow(clippy::too_many_arguments)]
fn receive_cut(
    stats: &mut PortStats,
    frame: &[u8],
    l2: usize,
    tag: Option<[u8; VLAN_LEN]>,
    off: &Offload,
    pool: &mut MbufPool,
    rx: &mut Vec<Mbuf>,
    (n, max): (usize, usize),
    port_index: u16,
) -> Received {
    let mut head = [0u8; 22 + VLAN_LEN];
    let head_len = match tag {
        Some(t) => {
            head[..12].copy_from_slice(&frame[..12]);
            head[12..16].copy_from_slice(&t);
            head[16..l2 + VLAN_LEN].copy_from_slice(&frame[12..l2]);
            l2 + VLAN_LEN
        }
        None => {
            head[..l2].copy_from_slice(&frame[..l2]);
            l2
        }
    };
    let pkt = &frame[l2..];
    let Ok(cut) = offload::Cut::of(pkt, off) else {
        return Received::Dropped;
    };
    let (per, frames) = cut.frames_fitting(head_len, MAX_FRAME);
    if n > 0 && n + frames > max {
        return Received::NoRoom;
    }
    let mut bytes = 0u64;
    let made = cut.segment(&head[..head_len], per, false, pool, |mut m| {
        m.port = port_index;
        bytes += m.len() as u64;
        rx.push(m);
    });
    match made {
        Ok(k) => {
            stats.rx_packets += k as u64;
            stats.rx_bytes += bytes;
            Received::Frames(k)
        }
        Err(_) => Received::Dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrhost_dataplane::mbuf::MAX_LARGE;

    /// An Ethernet + IPv4 + TCP super-frame of `payload` bytes, its
    /// checksum partial, and the vnet header Linux sends it with (TSO4,
    /// MSS 1448).
    fn tcp4(payload: usize) -> (Vec<u8>, [u8; vnet::LEN]) {
        let mut f = vec![0u8; 14 + 20 + 20 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let total = u16::try_from(20 + 20 + payload).unwrap_or(u16::MAX);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 2]);
        f[30..34].copy_from_slice(&[10, 1, 0, 2]);
        f[46] = 5 << 4;
        f[47] = 0x10;
        let mut h = [0u8; vnet::LEN];
        h[0] = 1;
        h[1] = 1;
        h[4..6].copy_from_slice(&1448u16.to_le_bytes());
        h[6..8].copy_from_slice(&34u16.to_le_bytes());
        h[8..10].copy_from_slice(&16u16.to_le_bytes());
        (f, h)
    }

    #[test]
    fn a_super_frame_longer_than_a_buffer_comes_whole_in_a_large_one() {
        let (f, h) = tcp4(60_000);
        let (mut pool, mut rx, mut stats) = (MbufPool::new(8), Vec::new(), PortStats::default());
        let got = receive(&mut stats, &f, &h, None, &mut pool, &mut rx, (0, 32), 3);
        assert!(matches!(got, Received::Frames(1)));
        assert!(rx[0].is_large());
        assert_eq!(rx[0].data(), &f[..]);
        assert_eq!((rx[0].port, rx[0].offload.gso), (3, Gso::Tcp4));
        assert_eq!(stats.rx_packets, 1);
    }

    #[test]
    fn without_a_large_buffer_left_a_super_frame_is_cut() {
        let (f, h) = tcp4(60_000);
        let (mut pool, mut rx, mut stats) = (MbufPool::new(64), Vec::new(), PortStats::default());
        let held: Vec<Mbuf> = (0..MAX_LARGE).map_while(|_| pool.get_large()).collect();
        assert_eq!(held.len(), MAX_LARGE);
        let got = receive(&mut stats, &f, &h, None, &mut pool, &mut rx, (0, 32), 0);
        let Received::Frames(k) = got else {
            panic!("not taken");
        };
        assert!(k > 1, "cut into {k}");
        assert!(rx.iter().all(|m| !m.is_large() && m.len() <= MAX_FRAME));
        let payload: usize = rx.iter().map(|m| m.len() - 54).sum();
        assert_eq!(payload, 60_000);
    }

    #[test]
    fn a_super_frame_whose_headers_contradict_its_vnet_header_is_dropped() {
        let (mut f, h) = tcp4(60_000);
        // The IPv4 total length claims more than the frame holds.
        f[16..18].copy_from_slice(&65_000u16.to_be_bytes());
        let (mut pool, mut rx, mut stats) = (MbufPool::new(8), Vec::new(), PortStats::default());
        let got = receive(&mut stats, &f, &h, None, &mut pool, &mut rx, (0, 32), 0);
        assert!(matches!(got, Received::Dropped));
        assert!(rx.is_empty());
        assert_eq!(stats.rx_packets, 0);
    }

    #[test]
    fn a_frame_that_would_cut_into_too_many_segments_is_dropped_however_short() {
        let (mut pool, mut rx, mut stats) = (MbufPool::new(8), Vec::new(), PortStats::default());
        let mut take = |f: &[u8], h: &[u8; vnet::LEN]| {
            rx.clear();
            receive(&mut stats, f, h, None, &mut pool, &mut rx, (0, 32), 0)
        };
        // 1,400 bytes in segments of 2: fits a buffer, cut would be 700.
        let (f, mut h) = tcp4(1_400);
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        assert!(matches!(take(&f, &h), Received::Frames(1)));
        // A byte a segment: 1,400, past the bound.
        h[4..6].copy_from_slice(&1u16.to_le_bytes());
        assert!(matches!(take(&f, &h), Received::Dropped));
        // A 60,000-byte one in segments of 16: 3,750.
        let (f, mut h) = tcp4(60_000);
        h[4..6].copy_from_slice(&16u16.to_le_bytes());
        assert!(matches!(take(&f, &h), Received::Dropped));
        // Segmentation that its own headers contradict (TSO6 on IPv4),
        // short or long.
        for payload in [1_000, 60_000] {
            let (f, mut h) = tcp4(payload);
            h[1] = 4;
            assert!(matches!(take(&f, &h), Received::Dropped), "{payload}");
        }
        assert_eq!(stats.rx_packets, 1);
    }

    /// A frame as Linux sends it (a TCP/IPv4 super-frame of up to 64 KiB
    /// and its vnet header), the same with any segment size, random bytes
    /// and a random header, or Linux's frame and header with a few bytes
    /// of each changed.
    fn any_frame() -> impl proptest::strategy::Strategy<Value = (Vec<u8>, [u8; vnet::LEN])> {
        use proptest::prelude::*;
        let linux = (0usize..64_000).prop_map(tcp4);
        // Linux's header, but for the segment size.
        let mss = (0usize..64_000, prop_oneof![0u16..64, any::<u16>()]).prop_map(|(len, mss)| {
            let (f, mut h) = tcp4(len);
            h[4..6].copy_from_slice(&mss.to_le_bytes());
            (f, h)
        });
        let random = (
            proptest::collection::vec(any::<u8>(), 0..3_000),
            any::<[u8; vnet::LEN]>(),
        );
        let mutated = (
            (0usize..64_000).prop_map(tcp4),
            proptest::collection::vec((0usize..128, any::<u8>()), 0..6),
            proptest::collection::vec((0usize..vnet::LEN, any::<u8>()), 0..4),
        )
            .prop_map(|((mut f, mut h), at_frame, at_header)| {
                for (at, b) in at_frame {
                    if let Some(x) = f.get_mut(at) {
                        *x = b;
                    }
                }
                for (at, b) in at_header {
                    h[at] = b;
                }
                (f, h)
            });
        prop_oneof![linux, mss, random, mutated]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(500))]

        /// Whatever a sender puts in a frame and its vnet header (a
        /// tenant's VM writes both over vhost-user): taking it never
        /// panics, and what is taken is either dropped or fits its
        /// buffers, and cuts, at a link without offloads, into no more
        /// frames than the bound on segments allows.
        #[test]
        fn any_frame_and_header_are_taken_within_bounds((f, h) in any_frame()) {
            let (mut pool, mut rx, mut stats) = (MbufPool::new(8), Vec::new(), PortStats::default());
            let got = receive(&mut stats, &f, &h, None, &mut pool, &mut rx, (0, usize::MAX), 0);
            if let Received::Frames(k) = got {
                proptest::prop_assert_eq!(k, rx.len());
            }
            for m in &rx {
                proptest::prop_assert!(m.len() <= m.max_frame());
            }
            let taken = rx.len();
            offload::resolve(&mut rx, &mut Vec::new(), &mut pool);
            proptest::prop_assert!(
                rx.len() <= taken * offload::MAX_SEGMENTS_TCP,
                "{} frames from {}", rx.len(), taken
            );
            for m in &rx {
                proptest::prop_assert!(m.len() <= MAX_FRAME && !m.offload.any());
            }
        }
    }

    #[test]
    fn a_checksum_said_to_lie_on_a_port_is_dropped() {
        // IPv4 + UDP to port 53, its "checksum" said to start at the UDP
        // header and lie 2 bytes in: on the destination port, which a
        // link (or a software finish) would overwrite after a rule list
        // judged the packet by it.
        let mut f = vec![0u8; 14 + 20 + 8 + 32];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&60u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 2]);
        f[30..34].copy_from_slice(&[10, 1, 0, 2]);
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        f[38..40].copy_from_slice(&40u16.to_be_bytes());
        let (mut pool, mut rx, mut stats) = (MbufPool::new(8), Vec::new(), PortStats::default());
        let mut take = |h: [u8; vnet::LEN]| {
            rx.clear();
            receive(&mut stats, &f, &h, None, &mut pool, &mut rx, (0, 32), 0)
        };
        assert!(matches!(
            take([1, 0, 0, 0, 0, 0, 34, 0, 2, 0]),
            Received::Dropped
        ));
        assert!(matches!(
            take([1, 0, 0, 0, 0, 0, 14, 0, 16, 0]),
            Received::Dropped
        ));
        // Where UDP's checksum is: taken.
        assert!(matches!(
            take([1, 0, 0, 0, 0, 0, 34, 0, 6, 0]),
            Received::Frames(1)
        ));
        assert_eq!(stats.rx_packets, 1);
    }

    #[test]
    fn a_long_frame_without_segmentation_is_dropped() {
        let (f, mut h) = tcp4(20_000);
        h[1] = 0;
        let (mut pool, mut rx, mut stats) = (MbufPool::new(8), Vec::new(), PortStats::default());
        let got = receive(&mut stats, &f, &h, None, &mut pool, &mut rx, (0, 32), 0);
        assert!(matches!(got, Received::Dropped));
        assert!(rx.is_empty());
    }
}
