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
    let extra = if tag.is_some() { VLAN_LEN } else { 0 };
    if frame.len() + extra > MAX_FRAME {
        if off.gso == Gso::None {
            return Received::Dropped;
        }
        return receive_cut(stats, frame, l2, tag, &off, pool, rx, (n, max), port_index);
    }
    let mut m = pool.get();
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
    m.offload = off;
    m.port = port_index;
    stats.rx_packets += 1;
    stats.rx_bytes += m.len() as u64;
    rx.push(m);
    Received::Frames(1)
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
    let Some((per, frames)) = offload::frames_fitting(pkt, off, head_len, MAX_FRAME) else {
        return Received::Dropped;
    };
    if n > 0 && n + frames > max {
        return Received::NoRoom;
    }
    let mut bytes = 0u64;
    let made = offload::segment(&head[..head_len], pkt, off, per, false, pool, |mut m| {
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
