//! The real drivers against the real kernel: every test builds its own
//! pair of network namespaces joined by a veth pair, and tears them down on
//! drop, panics included.
//!
//! ```text
//!   netns <lab>a            netns <lab>b
//!   ┌────────────┐          ┌────────────┐
//!   │  va ◄──────┼── veth ──┼──────► vb  │
//!   └────────────┘          └────────────┘
//!     sender thread           receiver thread   (each setns()es itself)
//! ```
//!
//! They need root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the `ip` command,
//! and fail, saying so, without them. Each takes well under 10 s. The
//! `gen_count_*` tests print the pps of a two-second generator → counter
//! run; see them with `--nocapture` (numbers mean something in `--release`).
// Only for the per-thread counting allocator below.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use vrhost_dataplane::{Mbuf, MbufPool};
use vrhost_io::af_xdp::{self, BindMode, XdpMode, XdpOptions};
use vrhost_io::tools::{self, GenSource, GenSpec, Rate, UdpFlows};
use vrhost_io::{netdev, netns, rps, wait, AfPacketPort, AfXdpPort, IoError, Port, TapPort};

/// Opens a driver on the named interface (in the calling thread's namespace).
type Opener<'a> = &'a (dyn Fn(&str) -> Box<dyn Port> + Sync);

/// Counts heap allocations made by threads that asked to be watched.
struct Counting;

thread_local! {
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);

fn note_alloc() {
    if WATCHED.try_with(Cell::get).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds GlobalAlloc's contract; the bookkeeping touches only a
// const-initialised thread-local flag and an atomic, neither of which
// allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (alloc/realloc
        // above forward to it).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: forwarded with the caller's guarantees unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Our test frames' EtherType (IEEE local experimental), so the kernel's
/// own chatter (IPv6 router solicitations, MLD) is easy to skip.
const MARK: [u8; 2] = [0x88, 0xb5];

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!(
            "cannot run `ip {}`: {e}; these tests need iproute2 and root",
            args.join(" ")
        )
    });
    assert!(
        out.status.success(),
        "`ip {}` failed: {}; these tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Two namespaces and a veth pair between them; removed on drop.
struct Lab {
    a: String,
    b: String,
}

impl Lab {
    fn new() -> Lab {
        Lab::with_queues(1)
    }

    /// A lab whose veth ends have `queues` rx and tx queues each.
    fn with_queues(queues: u32) -> Lab {
        let q = queues.to_string();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = format!("vrhio{}-{n}", std::process::id());
        // Built before the first command, so Drop cleans up whatever exists.
        let lab = Lab {
            a: format!("{base}a"),
            b: format!("{base}b"),
        };
        ip(&["netns", "add", &lab.a]);
        ip(&["netns", "add", &lab.b]);
        #[rustfmt::skip]
        ip(&[
            "-n", &lab.a, "link", "add", "va", "numtxqueues", &q, "numrxqueues", &q,
            "type", "veth", "peer", "name", "vb", "netns", &lab.b, "numtxqueues", &q, "numrxqueues", &q,
        ]);
        for (ns, dev) in [(&lab.a, "va"), (&lab.b, "vb")] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        lab
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Runs `f` on its own thread inside namespace `ns`.
fn in_ns<'s, T: Send + 's>(
    s: &'s std::thread::Scope<'s, '_>,
    ns: &'s str,
    f: impl FnOnce() -> T + Send + 's,
) -> std::thread::ScopedJoinHandle<'s, T> {
    s.spawn(move || {
        netns::enter(ns).unwrap_or_else(|e| panic!("{e}"));
        f()
    })
}

/// Frame `i` of a test run: MARK frames of varying length whose payload
/// names `i` and `tag`; every fifth one carries an 802.1Q tag, which must
/// arrive as sent (AF_PACKET sees it stripped into metadata and puts it
/// back).
fn test_frame(i: u32, tag: u8) -> Vec<u8> {
    let len = 60 + (i as usize * 37) % 1400;
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    let mut at = 12;
    if i % 5 == 4 {
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[14..16].copy_from_slice(&(100 + (i % 3) as u16).to_be_bytes());
        at = 16;
    }
    f[at..at + 2].copy_from_slice(&MARK);
    f[at + 2] = tag;
    f[at + 3..at + 7].copy_from_slice(&i.to_be_bytes());
    for (j, b) in f[at + 7..].iter_mut().enumerate() {
        *b = (i as usize * 7 + j) as u8;
    }
    f
}

fn is_test_frame(f: &[u8], tag: u8) -> bool {
    let at = if f.len() >= 16 && f[12..14] == [0x81, 0x00] {
        16
    } else {
        12
    };
    f.len() >= at + 7 && f[at..at + 2] == MARK && f[at + 2] == tag
}

/// Sends `frames` in bursts of 32, pausing between bursts so that no
/// kernel queue on the way (veth backlog, XDP ring) overflows.
fn send_all(port: &mut dyn Port, pool: &mut MbufPool, frames: &[Vec<u8>]) {
    let mut batch: Vec<Mbuf> = Vec::new();
    for chunk in frames.chunks(32) {
        for f in chunk {
            let mut m = pool.get();
            m.fill(f);
            batch.push(m);
        }
        port.tx_burst(&mut batch, pool, 0)
            .unwrap_or_else(|e| panic!("tx_burst: {e}"));
        std::thread::sleep(Duration::from_millis(1));
    }
    port.flush().unwrap_or_else(|e| panic!("flush: {e}"));
}

/// Receives until `n` frames tagged `tag` arrived or `within` passed.
fn receive(
    port: &mut dyn Port,
    pool: &mut MbufPool,
    tag: u8,
    n: usize,
    within: Duration,
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut rx = Vec::new();
    let until = Instant::now() + within;
    while got.len() < n && Instant::now() < until {
        if port.rx_burst(pool, &mut rx, 64, 3) == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        for m in rx.drain(..) {
            assert_eq!(m.port, 3, "rx_burst sets the port index");
            if is_test_frame(m.data(), tag) {
                got.push(m.data().to_vec());
            }
            pool.put(m);
        }
    }
    got
}

/// Sends `n` frames a → b and checks each arrives once, intact and in
/// order; then sends a few b → a and checks b does not receive its own.
fn exchange(lab: &Lab, open: Opener<'_>, n: u32) {
    exchange2(lab, open, open, n)
}

/// [`exchange`] with different drivers on a (sender) and b (receiver).
fn exchange2(lab: &Lab, open_a: Opener<'_>, open_b: Opener<'_>, n: u32) {
    let frames: Vec<Vec<u8>> = (0..n).map(|i| test_frame(i, 1)).collect();
    let replies: Vec<Vec<u8>> = (0..10).map(|i| test_frame(i, 2)).collect();
    let ready = Barrier::new(2);
    let done = Barrier::new(2);
    std::thread::scope(|s| {
        let rxer = in_ns(s, &lab.b, || {
            let mut pool = MbufPool::new(256);
            let mut port = open_b("vb");
            ready.wait();
            let got = receive(
                port.as_mut(),
                &mut pool,
                1,
                frames.len(),
                Duration::from_secs(4),
            );
            send_all(port.as_mut(), &mut pool, &replies);
            let echo = receive(port.as_mut(), &mut pool, 2, 1, Duration::from_millis(300));
            done.wait();
            (got, echo, port.stats())
        });
        let txer = in_ns(s, &lab.a, || {
            let mut pool = MbufPool::new(256);
            let mut port = open_a("va");
            ready.wait();
            send_all(port.as_mut(), &mut pool, &frames);
            let back = receive(
                port.as_mut(),
                &mut pool,
                2,
                replies.len(),
                Duration::from_secs(4),
            );
            done.wait();
            (back, port.stats())
        });
        let (got, echo, rx_stats) = rxer.join().unwrap();
        let (back, tx_stats) = txer.join().unwrap();
        assert_eq!(
            got.len(),
            frames.len(),
            "frames lost a → b (tx {tx_stats:?}, rx {rx_stats:?})"
        );
        for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
            assert_eq!(g, f, "frame {i} differs");
        }
        assert_eq!(back, replies, "frames b → a");
        assert!(echo.is_empty(), "a port received its own transmission");
        assert_eq!(tx_stats.tx_packets, u64::from(n));
        assert!(rx_stats.rx_packets >= u64::from(n));
        assert_eq!(rx_stats.tx_packets, replies.len() as u64);
    });
}

fn af_packet(ifname: &str) -> Box<dyn Port> {
    Box::new(AfPacketPort::open(ifname, 0, 1).unwrap_or_else(|e| panic!("{e}")))
}

fn af_xdp(opts: XdpOptions) -> impl Fn(&str) -> Box<dyn Port> + Sync {
    move |ifname| {
        Box::new(AfXdpPort::open_with(ifname, 0, 1, &opts).unwrap_or_else(|e| panic!("{e}")))
    }
}

#[test]
fn af_packet_moves_frames_both_ways_intact() {
    let lab = Lab::new();
    exchange(&lab, &af_packet, 1000);
}

/// Bursts in both directions between already-open ports allocate nothing
/// (DESIGN "Rules of the fast path"), for both kernel drivers.
#[test]
fn steady_state_bursts_allocate_nothing() {
    let lab = Lab::new();
    let drivers: [(&str, Opener<'_>); 2] = [
        ("af_packet", &af_packet),
        ("af_xdp", &af_xdp(XdpOptions::default())),
    ];
    for (name, open) in drivers {
        let (allocs, received) = std::thread::scope(|s| {
            s.spawn(|| {
                // Sockets stay in the namespace they were opened in.
                netns::enter(&lab.a).unwrap();
                let mut a = open("va");
                netns::enter(&lab.b).unwrap();
                let mut b = open("vb");
                let mut pool = MbufPool::new(2048);
                let frames: Vec<Vec<u8>> = (0..32).map(|i| test_frame(i, 1)).collect();
                let mut batch = Vec::with_capacity(64);
                let mut rx = Vec::with_capacity(512);
                let mut received = 0usize;
                let mut round = |from: &mut dyn Port, to: &mut dyn Port, received: &mut usize| {
                    for f in &frames {
                        let mut m = pool.get();
                        m.fill(f);
                        batch.push(m);
                    }
                    from.tx_burst(&mut batch, &mut pool, 0).unwrap();
                    std::thread::sleep(Duration::from_micros(300));
                    *received += to.rx_burst(&mut pool, &mut rx, 512, 0);
                    for m in rx.drain(..) {
                        pool.put(m);
                    }
                };
                for _ in 0..20 {
                    round(a.as_mut(), b.as_mut(), &mut received);
                    round(b.as_mut(), a.as_mut(), &mut received);
                }
                let before = ALLOCS.load(Ordering::Relaxed);
                WATCHED.set(true);
                received = 0;
                for _ in 0..200 {
                    round(a.as_mut(), b.as_mut(), &mut received);
                    round(b.as_mut(), a.as_mut(), &mut received);
                }
                WATCHED.set(false);
                (ALLOCS.load(Ordering::Relaxed) - before, received)
            })
            .join()
            .unwrap()
        });
        assert!(received > 200 * 32, "{name}: only {received} frames moved");
        assert_eq!(
            allocs, 0,
            "{name}: {allocs} allocations in 400 steady-state bursts"
        );
    }
}

#[test]
fn af_packet_helpers_read_the_interface() {
    let lab = Lab::new();
    netns::run_in(&lab.a, || {
        netdev::set_mac("va", [0x02, 0x11, 0x22, 0x33, 0x44, 0x55]).unwrap();
        assert_eq!(
            netdev::mac("va").unwrap(),
            [0x02, 0x11, 0x22, 0x33, 0x44, 0x55]
        );
        netdev::set_mtu("va", 1400).unwrap();
        assert_eq!(netdev::mtu("va").unwrap(), 1400);
        // With virtio-net headers (this kernel takes PACKET_VNET_HDR) a tx
        // frame holds any buffer, a super-frame included, whatever the MTU;
        // without them, the MTU's frame plus one tag in a 2 KiB slot.
        let port = AfPacketPort::open("va", 0, 1).unwrap();
        assert!(port.offloads(), "PACKET_VNET_HDR refused");
        assert!(
            port.max_tx_frame() >= vrhost_dataplane::mbuf::MAX_FRAME,
            "{} < {}",
            port.max_tx_frame(),
            vrhost_dataplane::mbuf::MAX_FRAME
        );
        match AfPacketPort::open("nosuchdev", 0, 1) {
            Err(e @ IoError::Sys { .. }) => {
                assert!(e.to_string().starts_with("nosuchdev: "), "{e}")
            }
            other => panic!("expected a Sys error, got {:?}", other.err()),
        }
    })
    .unwrap();
}

/// A veth pair in the test's own (root) namespace; deleted on drop.
struct RootVeth(String);

impl Drop for RootVeth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

/// An af_packet port steers its veth's receive work where sysfs shows the
/// port's own interface, and empties the mask when dropped; it adopts a
/// mask an earlier run left; it leaves an operator's mask alone, and says
/// so apart when that mask includes a worker's core; and from a thread in
/// another namespace, where sysfs still shows the root namespace's
/// interface of the same name, it touches nothing.
#[test]
fn af_packet_steers_receive_work_only_on_its_own_interface() {
    let lab = Lab::new();
    let name = format!("vrps{}", std::process::id() % 1_000_000);
    let _root = RootVeth(name.clone());
    #[rustfmt::skip]
    ip(&["link", "add", &name, "type", "veth", "peer", "name", &format!("{name}p")]);
    #[rustfmt::skip]
    ip(&["-n", &lab.a, "link", "add", &name, "type", "veth", "peer", "name", "vq"]);
    let set = |mask: &str| {
        std::fs::write(format!("/sys/class/net/{name}/queues/rx-0/rps_cpus"), mask).unwrap()
    };
    let ours = |adopted| rps::Applied::Set {
        mask: "1".into(),
        adopted,
    };

    // In lab.a: sysfs shows the root namespace's `name`, another interface.
    let applied = netns::run_in(&lab.a, || {
        let mut port = AfPacketPort::open(&name, 0, 1).unwrap();
        port.steer_receive(&[0], &[]).unwrap()
    })
    .unwrap();
    assert!(
        matches!(&applied, rps::Applied::Kept(w) if w.contains("another network namespace")),
        "{applied:?}"
    );
    assert_eq!(
        rps::shown(&name).unwrap(),
        "",
        "the root namespace's interface untouched"
    );

    // Its own: set while open, emptied when dropped.
    let mut port = AfPacketPort::open(&name, 0, 1).unwrap();
    assert_eq!(port.steer_receive(&[0], &[]).unwrap(), ours(false));
    assert_eq!(rps::shown(&name).unwrap(), "1");
    drop(port);
    assert_eq!(rps::shown(&name).unwrap(), "");

    // The mask it would write, left by a run that ended without undoing it:
    // adopted, and emptied when dropped.
    set("1");
    let mut port = AfPacketPort::open(&name, 0, 1).unwrap();
    assert_eq!(port.steer_receive(&[0], &[]).unwrap(), ours(true));
    drop(port);
    assert_eq!(rps::shown(&name).unwrap(), "");

    // Another mask is an operator's: it stays, and one that includes a
    // worker's core is said to.
    set("1");
    let mut port = AfPacketPort::open(&name, 0, 1).unwrap();
    let applied = port.steer_receive(&[1], &[]).unwrap();
    assert!(
        matches!(&applied, rps::Applied::Kept(w) if w.contains("already set")),
        "{applied:?}"
    );
    let applied = port.steer_receive(&[1], &[0]).unwrap();
    assert!(
        matches!(&applied, rps::Applied::OnWorkers(w) if w.contains("[0]")),
        "{applied:?}"
    );
    drop(port);
    assert_eq!(rps::shown(&name).unwrap(), "1");
    set("0");
}

/// Whether `ns` gets an answer to a ping of `addr` within a second.
fn pings(ns: &str, addr: &str) -> bool {
    Command::new("ip")
        .args([
            "netns", "exec", ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", addr,
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run ping: {e}"))
        .status
        .success()
}

/// With the host's stack kept off, the kernel of the port's namespace no
/// longer sees the interface's frames (it answers no ping to its own
/// address, nor ARP for it) while the port still receives them;
/// closing the port gives them back to the kernel.
#[test]
fn af_packet_keeps_the_host_stack_off_while_open() {
    let lab = Lab::new();
    ip(&["-n", &lab.a, "addr", "add", "10.9.0.1/24", "dev", "va"]);
    ip(&["-n", &lab.b, "addr", "add", "10.9.0.2/24", "dev", "vb"]);
    assert!(pings(&lab.b, "10.9.0.1"), "the kernel answers before");
    let (opened, stop) = (Barrier::new(2), AtomicBool::new(false));
    let (answered, seen) = std::thread::scope(|s| {
        let rx = in_ns(s, &lab.a, || {
            let mut port = AfPacketPort::open("va", 0, 1).unwrap();
            port.keep_host_stack_off().unwrap();
            opened.wait();
            let (mut pool, mut rx, mut seen) = (MbufPool::new(256), Vec::new(), 0);
            while !stop.load(Ordering::Relaxed) {
                if port.rx_burst(&mut pool, &mut rx, 64, 0) == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                for m in rx.drain(..) {
                    // The echo requests, or ARP where b asks again.
                    let ethertype = m.data().get(12..14);
                    seen += usize::from(matches!(ethertype, Some([0x08, 0x00 | 0x06])));
                    pool.put(m);
                }
            }
            seen
        });
        opened.wait();
        let answered = pings(&lab.b, "10.9.0.1");
        stop.store(true, Ordering::Relaxed);
        (answered, rx.join().unwrap())
    });
    assert!(!answered, "the kernel answered while the port was open");
    assert!(seen > 0, "the port received the pings");
    assert!(
        pings(&lab.b, "10.9.0.1"),
        "the kernel answers once the port is closed"
    );
}

#[test]
fn af_packet_fanout_delivers_each_frame_to_exactly_one_queue() {
    let lab = Lab::new();
    let spec = UdpFlows {
        flows: 512,
        ..UdpFlows::default()
    };
    let frames = tools::udp_frames(&spec).unwrap();
    let ready = Barrier::new(2);
    std::thread::scope(|s| {
        let rxer = in_ns(s, &lab.b, || {
            let mut pool = MbufPool::new(256);
            let mut q0 = AfPacketPort::open("vb", 0, 2).unwrap();
            let mut q1 = AfPacketPort::open("vb", 1, 2).unwrap();
            ready.wait();
            let mut seen: [HashMap<Vec<u8>, u32>; 2] = [HashMap::new(), HashMap::new()];
            let mut rx = Vec::new();
            let until = Instant::now() + Duration::from_secs(4);
            while seen.iter().map(|m| m.values().sum::<u32>()).sum::<u32>() < 512
                && Instant::now() < until
            {
                for (q, port) in [&mut q0, &mut q1].into_iter().enumerate() {
                    port.rx_burst(&mut pool, &mut rx, 64, 0);
                    for m in rx.drain(..) {
                        if m.data()[12..14] == [0x08, 0x00] {
                            *seen[q].entry(m.data().to_vec()).or_default() += 1;
                        }
                        pool.put(m);
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            seen
        });
        in_ns(s, &lab.a, || {
            let mut pool = MbufPool::new(256);
            let mut port = AfPacketPort::open("va", 0, 1).unwrap();
            ready.wait();
            send_all(&mut port, &mut pool, &frames);
        });
        let seen = rxer.join().unwrap();
        for f in &frames {
            let copies: u32 = seen.iter().map(|m| m.get(f).copied().unwrap_or(0)).sum();
            assert_eq!(copies, 1, "a frame arrived {copies} times");
        }
        eprintln!(
            "fanout split 512 flows as {} / {}",
            seen[0].len(),
            seen[1].len()
        );
        assert!(
            !seen[0].is_empty() && !seen[1].is_empty(),
            "hash fanout used both queues"
        );
    });
}

/// An Ethernet frame of `ethertype` around `body`, 802.1Q-tagged with
/// `vlan`.
fn eth(ethertype: u16, body: &[u8], vlan: Option<u16>) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// An IPv4 packet of `protocol` (fragment field `frag`) around `l4`.
fn ipv4(protocol: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    let len = (20 + l4.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[0, 1]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, protocol, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1]);
    h.extend_from_slice(l4);
    h
}

/// An IPv6 packet with next header `next` around `l4`.
fn ipv6(next: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 255]);
    h.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(l4);
    h
}

/// A transport header's ports, then 20 bytes naming `i`.
fn ports(src: u16, dst: u16, i: u8) -> Vec<u8> {
    let mut p = src.to_be_bytes().to_vec();
    p.extend_from_slice(&dst.to_be_bytes());
    p.extend_from_slice(&[i; 20]);
    p
}

/// The frames the control queue must get: what
/// `vrhost_dataplane::protocol` counts as control.
fn control_frames() -> Vec<Vec<u8>> {
    let (v4, v6) = (0x0800, 0x86dd);
    vec![
        eth(0x0806, &[1; 28], None),
        eth(v4, &ipv4(17, 0, &ports(49152, 3784, 2)), None),
        eth(v4, &ipv4(17, 0x4000, &ports(49152, 4784, 3)), None),
        eth(v4, &ipv4(6, 0, &ports(40000, 179, 4)), None),
        eth(v4, &ipv4(6, 0, &ports(179, 40000, 5)), None),
        eth(v4, &ipv4(89, 0, &[6; 24]), None),
        eth(v6, &ipv6(17, &ports(49152, 3784, 7)), None),
        eth(v6, &ipv6(6, &ports(40001, 179, 8)), None),
        eth(v6, &ipv6(58, &[135, 0, 0, 0, 9, 9, 9, 9]), None),
        eth(v6, &ipv6(89, &[10; 24]), None),
        eth(v4, &ipv4(17, 0, &ports(49153, 3784, 11)), Some(100)),
    ]
}

/// Frames that look like control frames but are not.
fn look_alikes() -> Vec<Vec<u8>> {
    let (v4, v6) = (0x0800, 0x86dd);
    vec![
        eth(v4, &ipv4(17, 0, &ports(3784, 53, 20)), None),
        eth(v4, &ipv4(17, 0, &ports(49152, 3785, 21)), None),
        eth(v4, &ipv4(6, 0, &ports(40000, 80, 22)), None),
        // A later fragment: its first bytes are no transport header.
        eth(v4, &ipv4(17, 100, &ports(49152, 3784, 23)), None),
        // Too short for the ports the test would read.
        eth(v4, &ipv4(17, 0, &[0x0e, 0xc8]), None),
        eth(v6, &ipv6(58, &[128, 0, 0, 0, 24, 24, 24, 24]), None),
        eth(v6, &ipv6(17, &ports(49152, 53, 25)), None),
        // QinQ: the inner tag stays in the frame.
        eth(0x8100, &[0, 200, 0x08, 0x00], Some(100)),
    ]
}

/// Drains `read` (a queue of `port`) until it gives nothing for 100 ms;
/// fails if it never does within 10 s.
fn drain(
    pool: &mut MbufPool,
    mut read: impl FnMut(&mut MbufPool, &mut Vec<Mbuf>) -> usize,
) -> Vec<Vec<u8>> {
    let (mut got, mut rx) = (Vec::new(), Vec::new());
    let (mut quiet, start) = (Instant::now(), Instant::now());
    while quiet.elapsed() < Duration::from_millis(100) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the queue never went quiet"
        );
        if read(pool, &mut rx) > 0 {
            quiet = Instant::now();
        }
        for m in rx.drain(..) {
            got.push(m.data().to_vec());
            pool.put(m);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    got
}

#[test]
fn af_packet_steers_control_protocols_to_their_own_queue() {
    let lab = Lab::new();
    let data = tools::udp_frames(&UdpFlows {
        flows: 512,
        ..UdpFlows::default()
    })
    .unwrap();
    let (control, alike) = (control_frames(), look_alikes());
    let mut all: Vec<Vec<u8>> = control.iter().chain(&alike).cloned().collect();
    all.extend(data.iter().cloned());
    let (ready, sent) = (Barrier::new(2), Barrier::new(2));
    std::thread::scope(|s| {
        let rxer = in_ns(s, &lab.b, || {
            let mut pool = MbufPool::new(1024);
            let mut q0 = AfPacketPort::open_steered("vb", 0, 2).unwrap();
            let mut q1 = AfPacketPort::open_steered("vb", 1, 2).unwrap();
            ready.wait();
            sent.wait();
            // The control queue alone first, then each data queue (queue
            // 0's rx_burst would read the control queue first too).
            let ctl = drain(&mut pool, |p, rx| q0.rx_control(p, rx, 64, 0));
            let d0 = drain(&mut pool, |p, rx| q0.rx_burst(p, rx, 64, 0));
            let d1 = drain(&mut pool, |p, rx| q1.rx_burst(p, rx, 64, 0));
            (ctl, d0, d1)
        });
        in_ns(s, &lab.a, || {
            let mut pool = MbufPool::new(256);
            let mut port = AfPacketPort::open("va", 0, 1).unwrap();
            ready.wait();
            send_all(&mut port, &mut pool, &all);
            std::thread::sleep(Duration::from_millis(50));
            sent.wait();
        });
        let (ctl, d0, d1) = rxer.join().unwrap();
        let count = |set: &[Vec<u8>], f: &Vec<u8>| set.iter().filter(|g| *g == f).count();
        for f in &control {
            assert_eq!(
                count(&ctl, f),
                1,
                "a control frame on the control queue: {f:02x?}"
            );
            assert_eq!(
                count(&d0, f) + count(&d1, f),
                0,
                "a control frame on a data queue"
            );
        }
        for f in alike.iter().chain(&data) {
            assert_eq!(
                count(&ctl, f),
                0,
                "a data frame on the control queue: {f:02x?}"
            );
            assert_eq!(
                count(&d0, f) + count(&d1, f),
                1,
                "a data frame arrived once: {f:02x?}"
            );
        }
        let on = |set: &[Vec<u8>]| data.iter().filter(|f| set.contains(f)).count();
        eprintln!(
            "steered: {} control frames; 512 flows split as {} / {}",
            ctl.len(),
            on(&d0),
            on(&d1)
        );
        assert!(
            on(&d0) > 0 && on(&d1) > 0,
            "the data queues share the flows"
        );
    });
}

/// A flood that overflows the data ring: every BFD frame sent among it
/// still arrives, on the control queue.
#[test]
fn af_packet_control_queue_holds_what_a_full_ring_drops() {
    let lab = Lab::new();
    let bfd = |i: u32| {
        let mut p = ports(49152, 3784, 0);
        p[4..8].copy_from_slice(&i.to_be_bytes());
        eth(0x0800, &ipv4(17, 0, &p), None)
    };
    let mut flood = Vec::new();
    for i in 0..30_000u32 {
        flood.push(test_frame(i, 1));
        if i % 300 == 0 {
            flood.push(bfd(i));
        }
    }
    let (ready, sent) = (Barrier::new(2), Barrier::new(2));
    std::thread::scope(|s| {
        let rxer = in_ns(s, &lab.b, || {
            let mut pool = MbufPool::new(1024);
            let mut q0 = AfPacketPort::open_steered("vb", 0, 1).unwrap();
            ready.wait();
            // Nothing read while the flood arrives: the ring fills.
            sent.wait();
            let ctl = drain(&mut pool, |p, rx| q0.rx_control(p, rx, 64, 0));
            let data = drain(&mut pool, |p, rx| q0.rx_burst(p, rx, 64, 0));
            (ctl, data, q0.stats().dropped)
        });
        in_ns(s, &lab.a, || {
            let mut pool = MbufPool::new(256);
            let mut port = AfPacketPort::open("va", 0, 1).unwrap();
            ready.wait();
            send_all(&mut port, &mut pool, &flood);
            std::thread::sleep(Duration::from_millis(50));
            sent.wait();
        });
        let (ctl, data, dropped) = rxer.join().unwrap();
        let want: Vec<Vec<u8>> = (0..30_000).step_by(300).map(bfd).collect();
        let data = data.iter().filter(|f| is_test_frame(f, 1)).count();
        eprintln!(
            "full ring: {data} of 30000 data frames read, {dropped} dropped; {} of {} BFD frames",
            want.iter().filter(|f| ctl.contains(f)).count(),
            want.len()
        );
        assert!(
            dropped > 0 && data < 30_000,
            "the flood did not fill the ring"
        );
        for f in &want {
            assert!(ctl.contains(f), "a BFD frame was lost with the flood");
        }
    });
}

#[test]
fn af_xdp_generic_copy_moves_frames_and_detaches_on_drop() {
    let lab = Lab::new();
    let opts = XdpOptions {
        mode: Some(XdpMode::Skb),
        bind: Some(BindMode::Copy),
    };
    exchange(&lab, &af_xdp(opts), 1000);
    let left = netns::run_in(&lab.b, || af_xdp::attached("vb").unwrap()).unwrap();
    assert!(left.is_empty(), "program left attached: {left:?}");
}

#[test]
fn af_xdp_native_copy_moves_frames() {
    let lab = Lab::new();
    let opts = XdpOptions {
        mode: Some(XdpMode::Drv),
        bind: Some(BindMode::Copy),
    };
    exchange(&lab, &af_xdp(opts), 1000);
}

#[test]
fn af_xdp_native_needs_no_program_on_the_veth_peer() {
    // af_packet on va (no XDP there), native af_xdp on vb, both directions.
    let lab = Lab::new();
    let opts = XdpOptions {
        mode: Some(XdpMode::Drv),
        bind: None,
    };
    exchange2(&lab, &af_packet, &af_xdp(opts), 500);
    exchange2(&lab, &af_xdp(opts), &af_packet, 500);
}

#[test]
fn af_xdp_queues_share_one_program_that_outlives_all_but_the_last() {
    let lab = Lab::with_queues(2);
    let frames = tools::udp_frames(&UdpFlows {
        flows: 512,
        ..UdpFlows::default()
    })
    .unwrap();
    let ready = Barrier::new(2);
    std::thread::scope(|s| {
        let rxer = in_ns(s, &lab.b, || {
            let mut pool = MbufPool::new(256);
            let mut q0 = AfXdpPort::open("vb", 0, 2).unwrap_or_else(|e| panic!("{e}"));
            let mut q1 = AfXdpPort::open("vb", 1, 2).unwrap_or_else(|e| panic!("{e}"));
            let prog = af_xdp::attached("vb").unwrap();
            ready.wait();
            let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
            let mut per_queue = [0usize; 2];
            let mut rx = Vec::new();
            let until = Instant::now() + Duration::from_secs(4);
            while seen.values().sum::<u32>() < 512 && Instant::now() < until {
                for (q, port) in [&mut q0, &mut q1].into_iter().enumerate() {
                    port.rx_burst(&mut pool, &mut rx, 64, 0);
                    for m in rx.drain(..) {
                        if m.data()[12..14] == [0x08, 0x00] {
                            *seen.entry(m.data().to_vec()).or_default() += 1;
                            per_queue[q] += 1;
                        }
                        pool.put(m);
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            drop(q0);
            let after_one = af_xdp::attached("vb").unwrap();
            drop(q1);
            let after_both = af_xdp::attached("vb").unwrap();
            (seen, per_queue, prog, after_one, after_both)
        });
        in_ns(s, &lab.a, || {
            let mut pool = MbufPool::new(256);
            // An AF_XDP socket transmits on its own queue, and veth hands
            // what leaves tx queue q to the peer's rx queue q.
            let mut tx0 = AfXdpPort::open("va", 0, 2).unwrap_or_else(|e| panic!("{e}"));
            let mut tx1 = AfXdpPort::open("va", 1, 2).unwrap_or_else(|e| panic!("{e}"));
            ready.wait();
            send_all(&mut tx0, &mut pool, &frames[..256]);
            send_all(&mut tx1, &mut pool, &frames[256..]);
        });
        let (seen, per_queue, prog, after_one, after_both) = rxer.join().unwrap();
        eprintln!(
            "af_xdp 2 queues on veth: {} / {} frames",
            per_queue[0], per_queue[1]
        );
        assert_eq!(
            per_queue,
            [256, 256],
            "each rx queue socket gets its queue's frames"
        );
        for f in &frames {
            assert_eq!(
                seen.get(f).copied().unwrap_or(0),
                1,
                "each frame arrives exactly once"
            );
        }
        assert!(prog.drv.is_some(), "{prog:?}");
        assert_eq!(after_one, prog, "the program stays while a queue is open");
        assert!(after_both.is_empty(), "and goes with the last one");
    });
}

#[test]
fn af_xdp_picks_the_best_mode_that_works() {
    let lab = Lab::new();
    let (mode, attached) = netns::run_in(&lab.b, || {
        let port = AfXdpPort::open("vb", 0, 1).unwrap_or_else(|e| panic!("{e}"));
        (port.mode(), af_xdp::attached("vb").unwrap())
    })
    .unwrap();
    eprintln!("af_xdp on veth chose xdp={} bind={}", mode.0, mode.1);
    // veth runs XDP natively; it has no zero-copy support.
    assert_eq!(mode, (XdpMode::Drv, BindMode::Copy));
    assert!(
        attached.drv.is_some() && attached.skb.is_none(),
        "{attached:?}"
    );
    // Zero-copy, asked for explicitly, fails with the syscall named.
    let zc = XdpOptions {
        mode: None,
        bind: Some(BindMode::ZeroCopy),
    };
    let err = netns::run_in(&lab.b, || AfXdpPort::open_with("vb", 0, 1, &zc).err()).unwrap();
    match err {
        Some(e @ IoError::Sys { .. }) => {
            eprintln!("zero-copy on veth: {e}");
            assert!(e.to_string().contains("XDP_ZEROCOPY"), "{e}")
        }
        other => panic!("expected zero-copy bind to fail on veth, got {other:?}"),
    }
    // Each queue of a one-queue port must be in range.
    let err = netns::run_in(&lab.b, || AfXdpPort::open("vb", 1, 1).err()).unwrap();
    assert!(matches!(err, Some(IoError::Setup { .. })), "{err:?}");
}

#[test]
fn af_xdp_replaces_a_stale_program_of_ours_and_refuses_a_foreign_one() {
    let lab = Lab::new();
    netns::run_in(&lab.b, || {
        // What a crashed run of a netlink-attaching build leaves behind.
        let stale = af_xdp::attach_persistent("vb", XdpMode::Skb, "vrhost_xsk").unwrap();
        assert_eq!(af_xdp::attached("vb").unwrap().skb, Some(stale));
        {
            let port = AfXdpPort::open("vb", 0, 1).unwrap_or_else(|e| panic!("{e}"));
            let now = af_xdp::attached("vb").unwrap();
            assert_eq!(now.skb, None, "stale generic program removed");
            assert_eq!(port.mode().0, XdpMode::Drv);
            assert!(now.drv.is_some_and(|id| id != stale));
        }
        // The kernel releases the program with the last reference to it,
        // and a closed AF_XDP socket lets go of its own a little later
        // (deferred work), so allow it a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !af_xdp::attached("vb").unwrap().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            af_xdp::attached("vb").unwrap().is_empty(),
            "detached on drop"
        );

        // Somebody else's program is left alone, and open says why.
        let foreign = af_xdp::attach_persistent("vb", XdpMode::Drv, "not_ours").unwrap();
        let err = AfXdpPort::open("vb", 0, 1).err().expect("open must refuse");
        assert!(err.to_string().contains("not vrhost's"), "{err}");
        assert_eq!(af_xdp::attached("vb").unwrap().drv, Some(foreign));
        af_xdp::detach_persistent("vb", XdpMode::Drv).unwrap();
        assert!(af_xdp::attached("vb").unwrap().is_empty());
    })
    .unwrap();
}

/// Not a test on its own: the child process of
/// `af_xdp_program_dies_with_a_killed_process`, which opens a port and
/// waits to be killed with SIGKILL, the crash nothing can clean up after.
#[test]
fn killed_child_opens_af_xdp_and_waits() {
    let Ok(ns) = std::env::var("VRHOST_IO_KILL_NS") else {
        return;
    };
    netns::enter(&ns).unwrap();
    let _port = AfXdpPort::open("vb", 0, 1).unwrap();
    assert!(!af_xdp::attached("vb").unwrap().is_empty());
    println!("CHILD-ATTACHED");
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    std::thread::sleep(Duration::from_secs(20));
}

#[test]
fn af_xdp_program_dies_with_a_killed_process() {
    use std::io::BufRead;
    let lab = Lab::new();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "killed_child_opens_af_xdp_and_waits",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("VRHOST_IO_KILL_NS", &lab.b)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let attached = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("CHILD-ATTACHED"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(attached, "the child never attached");
    netns::run_in(&lab.b, || {
        assert!(
            af_xdp::attached("vb").unwrap().is_empty(),
            "the bpf_link died with its process"
        );
        AfXdpPort::open("vb", 0, 1).unwrap_or_else(|e| panic!("reopen after the kill: {e}"));
    })
    .unwrap();
}

#[test]
fn tap_frames_cross_into_the_kernel_and_back() {
    let lab = Lab::new();
    netns::run_in(&lab.a, || {
        let mut pool = MbufPool::new(256);
        let mut tap = TapPort::create("vtap%d").unwrap_or_else(|e| panic!("{e}"));
        assert!(tap.name().starts_with("vtap"));
        tap.set_mac([0x02, 0, 0, 0, 0, 0x07]).unwrap();
        assert_eq!(tap.mac().unwrap(), [0x02, 0, 0, 0, 0, 0x07]);
        let mut sniffer = AfPacketPort::open(tap.name(), 0, 1).unwrap();

        // Tap → kernel: what the tap port sends, the interface receives.
        let frames: Vec<Vec<u8>> = (0..50).map(|i| test_frame(i, 1)).collect();
        send_all(&mut tap, &mut pool, &frames);
        let got = receive(
            &mut sniffer,
            &mut pool,
            1,
            frames.len(),
            Duration::from_secs(3),
        );
        assert_eq!(got, frames);

        // Kernel → tap: what leaves the interface, the tap port reads.
        let back: Vec<Vec<u8>> = (0..50).map(|i| test_frame(i, 2)).collect();
        send_all(&mut sniffer, &mut pool, &back);
        let got = receive(&mut tap, &mut pool, 2, back.len(), Duration::from_secs(3));
        assert_eq!(got, back);
        assert_eq!(tap.stats().tx_packets, 50);
    })
    .unwrap();
}

/// Two TAP ports, one in each namespace, joined by a wire
/// ([`tcp_over_wire`]).
#[test]
fn tap_wire_carries_partial_checksums_and_super_frames() {
    let lab = Lab::new();
    let open = |ns: &str, dev: &str, addr: &str| {
        let tap = netns::run_in(ns, || TapPort::create(dev))
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(tap.offloads(), "IFF_VNET_HDR refused");
        ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
        tap
    };
    let a = open(&lab.a, "vwa", "10.9.0.1/24");
    let b = open(&lab.b, "vwb", "10.9.0.2/24");
    tcp_over_wire(&lab, a, b);
}

/// Two af_packet ports in a third namespace, each on a veth whose peer is
/// one host's link, joined by a wire ([`tcp_over_wire`]): super-frames
/// longer than a ring slot arrive whole through `recvmsg`.
#[test]
fn af_packet_wire_carries_partial_checksums_and_super_frames() {
    let lab = Lab::new();
    let wire = format!("{}w", lab.a);
    struct Ns<'a>(&'a str);
    impl Drop for Ns<'_> {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", self.0]).output();
        }
    }
    ip(&["netns", "add", &wire]);
    let _wire = Ns(&wire);
    for (ns, host, end, addr) in [
        (&lab.a, "vwa", "wa", "10.9.0.1/24"),
        (&lab.b, "vwb", "wb", "10.9.0.2/24"),
    ] {
        #[rustfmt::skip]
        ip(&["-n", ns, "link", "add", host, "type", "veth", "peer", "name", end, "netns", &wire]);
        ip(&["-n", ns, "addr", "add", addr, "dev", host]);
        ip(&["-n", ns, "link", "set", host, "up"]);
        ip(&["-n", &wire, "link", "set", end, "up"]);
    }
    let open = |dev: &str| {
        let p = netns::run_in(&wire, || AfPacketPort::open(dev, 0, 1))
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(p.offloads(), "PACKET_VNET_HDR refused");
        p
    };
    let (a, b) = (open("wa"), open("wb"));
    tcp_over_wire(&lab, a, b);
}

/// Ports `a` (toward `lab.a`, 10.9.0.1) and `b` (toward `lab.b`,
/// 10.9.0.2) joined by a thread that copies every frame across with its
/// offload state (a wire): the kernels on either side hold a TCP
/// connection over it with their default offloads. What the sender leaves
/// undone (partial checksums, super-frames of up to 64 KiB, longer than a
/// buffer) crosses described, and the receiver's kernel finishes it:
/// 16 MiB arrive intact. Super-frames longer than an ordinary buffer
/// cross whole, each in one large buffer.
fn tcp_over_wire(lab: &Lab, mut a: impl Port, mut b: impl Port) {
    use std::io::{Read, Write};
    let stop = AtomicBool::new(false);
    let data: Vec<u8> = (0..16u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let (seen, got) = std::thread::scope(|s| {
        let wire = s.spawn(|| {
            let mut pool = MbufPool::new(1024);
            let (mut rx, mut tx) = (Vec::new(), Vec::new());
            // (frames with a partial checksum, super-frames, of which whole
            // in a large buffer and longer than an ordinary one)
            let mut seen = (0u64, 0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let mut moved = 0;
                for dir in 0..2 {
                    let (from, to): (&mut dyn Port, &mut dyn Port) = if dir == 0 {
                        (&mut a, &mut b)
                    } else {
                        (&mut b, &mut a)
                    };
                    moved += from.rx_burst(&mut pool, &mut rx, 64, 0);
                    for m in rx.drain(..) {
                        seen.0 += u64::from(m.offload.partial);
                        if m.offload.gso != vrhost_dataplane::Gso::None {
                            seen.1 += 1;
                            let max = vrhost_dataplane::mbuf::MAX_FRAME;
                            seen.2 += u64::from(m.is_large() && m.len() > max);
                        }
                        tx.push(m);
                    }
                    to.tx_burst(&mut tx, &mut pool, 0)
                        .unwrap_or_else(|e| panic!("{e}"));
                }
                if moved == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            seen
        });
        // Every failure below comes back as an error, so that the wire
        // stops whatever happens.
        let server = in_ns(s, &lab.b, || -> std::io::Result<Vec<u8>> {
            let l = std::net::TcpListener::bind("10.9.0.2:5001")?;
            l.set_nonblocking(true)?;
            let start = Instant::now();
            let mut c = loop {
                match l.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if start.elapsed() > Duration::from_secs(10) => return Err(e),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            c.set_nonblocking(false)?;
            c.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut got = Vec::new();
            c.read_to_end(&mut got)?;
            Ok(got)
        });
        let sent = in_ns(s, &lab.a, || -> std::io::Result<()> {
            let start = Instant::now();
            let to = "10.9.0.2:5001".parse().expect("address");
            let mut c = loop {
                match std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5)) {
                    Ok(c) => break c,
                    Err(e) if start.elapsed() > Duration::from_secs(5) => return Err(e),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            c.set_write_timeout(Some(Duration::from_secs(10)))?;
            c.write_all(&data)
        })
        .join();
        let got = server.join();
        stop.store(true, Ordering::Relaxed);
        let seen = wire.join().unwrap();
        sent.unwrap()
            .unwrap_or_else(|e| panic!("sending: {e}; wire saw {seen:?}"));
        let got = got
            .unwrap()
            .unwrap_or_else(|e| panic!("receiving: {e}; wire saw {seen:?}"));
        (seen, got)
    });
    assert_eq!(got.len(), data.len(), "bytes received");
    assert!(got == data, "the bytes differ");
    eprintln!(
        "partial {}, super-frames {}, whole in a large buffer {}",
        seen.0, seen.1, seen.2
    );
    assert!(seen.0 > 0, "no partial checksum crossed: {seen:?}");
    assert!(seen.1 > 0, "no super-frame crossed: {seen:?}");
    assert!(
        seen.2 > 0,
        "no super-frame longer than a buffer crossed whole: {seen:?}"
    );
}

/// A multi-queue TAP that a run before virtio-net headers made, still
/// held by its queue (as a keeper holds a mirror across a restart), keeps
/// its flags when new queues attach: the port sees that and uses plain
/// frames. An ARP request it sends is answered by the kernel, and the
/// reply reads back as a plain frame.
#[test]
fn tap_made_without_vnet_headers_is_used_with_plain_frames() {
    let lab = Lab::new();
    netns::run_in(&lab.a, || {
        let old = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .expect("/dev/net/tun");
        // SAFETY: an all-zero ifreq is valid; TUNSETIFF reads and writes
        // the one `req` points at, which lives across the call.
        let rc = unsafe {
            let mut req: libc::ifreq = std::mem::zeroed();
            for (d, s) in req.ifr_name.iter_mut().zip(b"vold") {
                *d = *s as libc::c_char;
            }
            req.ifr_ifru.ifru_flags =
                (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE) as libc::c_short;
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&old),
                libc::TUNSETIFF,
                &mut req as *mut libc::ifreq,
            )
        };
        assert_eq!(rc, 0, "TUNSETIFF: {}", std::io::Error::last_os_error());
        let mut port = TapPort::create_multi("vold", 1)
            .unwrap_or_else(|e| panic!("{e}"))
            .pop()
            .expect("one queue");
        assert!(!port.offloads(), "the device has no IFF_VNET_HDR");
        drop(old);
        netdev::set_up("vold").unwrap();
        ip(&["-n", &lab.a, "addr", "add", "10.9.9.1/24", "dev", "vold"]);
        let me = [0x02, 0, 0, 0, 0, 0x99];
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&me);
        arp.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&me);
        arp.extend_from_slice(&[10, 9, 9, 2, 0, 0, 0, 0, 0, 0, 10, 9, 9, 1]);
        let mut pool = MbufPool::new(64);
        let start = Instant::now();
        let reply = loop {
            send_all(&mut port, &mut pool, &[arp.clone()]);
            std::thread::sleep(Duration::from_millis(20));
            let mut rx = Vec::new();
            port.rx_burst(&mut pool, &mut rx, 32, 0);
            if let Some(m) = rx
                .iter()
                .find(|m| m.data().get(12..14) == Some(&[0x08, 0x06][..]))
            {
                break m.data().to_vec();
            }
            assert!(start.elapsed() < Duration::from_secs(3), "no ARP reply");
        };
        assert_eq!(&reply[..6], &me, "to us, as a plain frame");
        assert_eq!(&reply[20..22], &[0, 2], "an ARP reply");
        assert_eq!(&reply[28..32], &[10, 9, 9, 1], "for the TAP's address");
    })
    .unwrap();
}

/// Two seconds of `tools::generate` on one end and `tools::count` on the
/// other; returns (sent pps, received pps, receiver drops).
fn gen_count(lab: &Lab, open: Opener<'_>) -> (f64, f64, u64) {
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(2);
    let spec = GenSpec {
        source: GenSource::Udp(UdpFlows {
            flows: 64,
            ..UdpFlows::default()
        }),
        rate: Rate::Max,
        duration: Some(Duration::from_secs(2)),
        burst: 64,
        ..GenSpec::default()
    };
    std::thread::scope(|s| {
        let counter = in_ns(s, &lab.b, || {
            let mut pool = MbufPool::new(512);
            let mut port = open("vb");
            ready.wait();
            tools::count(port.as_mut(), &mut pool, &stop, |sec| {
                eprintln!("  count  second {}: {:.0} pps", sec.second, sec.rates.pps)
            })
        });
        let gen = in_ns(s, &lab.a, || {
            let mut pool = MbufPool::new(512);
            let mut port = open("va");
            ready.wait();
            let r = tools::generate(
                port.as_mut(),
                &mut pool,
                &spec,
                &AtomicBool::new(false),
                |sec| eprintln!("  gen    second {}: {:.0} pps", sec.second, sec.rates.pps),
            );
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::Relaxed);
            r
        });
        let sent = gen
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("generate: {e}"));
        let got = counter.join().unwrap();
        assert!(sent.rates.packets > 0);
        assert!(got.rates.packets > 0, "nothing counted");
        assert!(
            got.rates.packets <= sent.rates.packets + 100,
            "counted more than was sent"
        );
        let rx_pps = got.rates.packets as f64 / sent.rates.elapsed.as_secs_f64();
        (sent.rates.pps, rx_pps, got.rates.dropped)
    })
}

#[test]
fn gen_count_af_packet() {
    let lab = Lab::new();
    let (tx, rx, drops) = gen_count(&lab, &af_packet);
    eprintln!("af_packet gen→count, 64 B, 64 flows: sent {tx:.0} pps, received {rx:.0} pps, ring drops {drops}");
}

/// [`gen_count_af_packet`] with the counter's port opened as `vrhost run`
/// opens it, with a control queue: the kernel runs the steering program
/// on every frame. Alternated with the plain port, two rounds.
#[test]
fn gen_count_af_packet_steered() {
    let lab = Lab::new();
    let steered = |i: &str| -> Box<dyn Port> {
        Box::new(AfPacketPort::open_steered(i, 0, 1).unwrap_or_else(|e| panic!("{e}")))
    };
    for round in 0..2 {
        let (_, plain, _) = gen_count(&lab, &af_packet);
        let (_, rx, drops) = gen_count(&lab, &steered);
        eprintln!(
            "af_packet gen→count, 64 B, round {round}: plain {plain:.0} pps, steered {rx:.0} pps ({:.3}), ring drops {drops}",
            rx / plain
        );
    }
}

/// An af_xdp port that prints the kernel's socket counters when dropped.
struct Verbose(AfXdpPort);

impl Port for Verbose {
    fn rx_burst(
        &mut self,
        pool: &mut MbufPool,
        rx: &mut Vec<Mbuf>,
        max: usize,
        port_index: u16,
    ) -> usize {
        self.0.rx_burst(pool, rx, max, port_index)
    }
    fn tx_burst(
        &mut self,
        tx: &mut Vec<Mbuf>,
        pool: &mut MbufPool,
        now_ns: u64,
    ) -> Result<(), IoError> {
        self.0.tx_burst(tx, pool, now_ns)
    }
    fn flush(&mut self) -> Result<(), IoError> {
        self.0.flush()
    }
    fn stats(&self) -> vrhost_io::PortStats {
        self.0.stats()
    }
}

impl Drop for Verbose {
    fn drop(&mut self) {
        eprintln!(
            "  {} socket stats: {:?}",
            self.0.ifname(),
            self.0.socket_stats()
        );
    }
}

#[test]
fn gen_count_af_xdp() {
    for mode in [XdpMode::Drv, XdpMode::Skb] {
        let lab = Lab::new();
        let opts = XdpOptions {
            mode: Some(mode),
            bind: None,
        };
        let open = move |ifname: &str| -> Box<dyn Port> {
            Box::new(Verbose(
                AfXdpPort::open_with(ifname, 0, 1, &opts).unwrap_or_else(|e| panic!("{e}")),
            ))
        };
        let (tx, rx, drops) = gen_count(&lab, &open);
        eprintln!(
            "af_xdp ({mode}, copy) gen→count, 64 B, 64 flows: sent {tx:.0} pps, received {rx:.0} pps, drops {drops}"
        );
    }
}

/// Turns IPv6 off on `dev` in namespace `ns`, so that the kernel sends
/// nothing there on its own (no neighbour discovery, no MLD reports).
fn quiet(ns: &str, dev: &str) {
    let key = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
    ip(&["netns", "exec", ns, "sysctl", "-qw", &key]);
}

/// An idle worker's wait on `port` (`Port::wait_fds`, `wait::readable`)
/// lasts while nothing arrives and ends as soon as a frame does: drained,
/// a 100 ms wait runs its course; a frame sent from `dev` in namespace
/// `ns` 50 ms into a second wait ends it well before its 5 s deadline, and
/// the frame is there to receive.
fn wakes_on_arrival(port: &mut dyn Port, pool: &mut MbufPool, ns: &str, dev: &str) {
    drain(pool, |p, rx| port.rx_burst(p, rx, 64, 3));
    let t = Instant::now();
    let waited = wait::port(port, Duration::from_millis(100));
    let took = t.elapsed();
    assert_ne!(waited, None, "the driver can be waited on");
    assert_eq!(waited, Some(wait::Waited::TimedOut), "nothing was sent");
    assert!(
        took >= Duration::from_millis(80),
        "the wait ended after {took:?} with nothing sent"
    );
    let frame = test_frame(7, 5);
    wait_ends_when_sent(port, ns, dev, &frame);
    let got = receive(port, pool, 5, 1, Duration::from_secs(1));
    assert_eq!(got, vec![frame]);
}

/// Waits on `port`'s descriptors while `frame` is sent from `dev` in
/// namespace `ns` 50 ms into the wait, and checks that it ended the wait,
/// well before its 5 s deadline.
fn wait_ends_when_sent(port: &dyn Port, ns: &str, dev: &str, frame: &[u8]) {
    let (woke, took) = std::thread::scope(|s| {
        let sender = in_ns(s, ns, || {
            let mut pool = MbufPool::new(16);
            let mut p = AfPacketPort::open(dev, 0, 1).unwrap_or_else(|e| panic!("{e}"));
            std::thread::sleep(Duration::from_millis(50));
            send_all(&mut p, &mut pool, &[frame.to_vec()]);
        });
        let t = Instant::now();
        let woke = wait::port(port, Duration::from_secs(5));
        let took = t.elapsed();
        sender.join().unwrap();
        (woke, took)
    });
    assert_eq!(
        woke,
        Some(wait::Waited::Readable),
        "the frame did not end the wait"
    );
    assert!(
        took < Duration::from_secs(2),
        "the wait ended after {took:?}"
    );
}

/// A port opened for `vrhost run` (`open_steered`) keeps its control
/// protocols' frames on a socket of their own, which is among what an idle
/// worker waits on: an ARP frame alone ends a wait, and is there to read
/// on the control queue.
#[test]
fn a_control_frame_wakes_a_wait_on_a_steered_port() {
    let lab = Lab::new();
    quiet(&lab.a, "va");
    quiet(&lab.b, "vb");
    let arp = control_frames().swap_remove(0);
    netns::run_in(&lab.b, || {
        let mut pool = MbufPool::new(256);
        let mut q0 = AfPacketPort::open_steered("vb", 0, 1).unwrap_or_else(|e| panic!("{e}"));
        drain(&mut pool, |p, rx| q0.rx_burst(p, rx, 64, 0));
        let mut fds = Vec::new();
        assert!(q0.wait_fds(&mut fds));
        assert_eq!(fds.len(), 2, "the ring's socket and the control socket");
        drop(fds);
        wait_ends_when_sent(&q0, &lab.a, "va", &arp);
        let ctl = drain(&mut pool, |p, rx| q0.rx_control(p, rx, 64, 0));
        assert_eq!(ctl, vec![arp.clone()], "the frame, on the control queue");
    })
    .unwrap();
}

#[test]
fn idle_af_packet_and_af_xdp_ports_wake_a_wait_when_a_frame_arrives() {
    let xdp = XdpOptions {
        mode: Some(XdpMode::Skb),
        bind: Some(BindMode::Copy),
    };
    let openers: [(&str, Opener<'_>); 2] = [("af_packet", &af_packet), ("af_xdp", &af_xdp(xdp))];
    for (driver, open) in openers {
        let lab = Lab::new();
        quiet(&lab.a, "va");
        quiet(&lab.b, "vb");
        netns::run_in(&lab.b, || {
            let mut pool = MbufPool::new(256);
            let mut port = open("vb");
            wakes_on_arrival(port.as_mut(), &mut pool, &lab.a, "va");
        })
        .unwrap_or_else(|e| panic!("{driver}: {e}"));
    }
}

/// An interface going down sets an error on every packet socket bound to
/// it, which `poll` reports until something reads it: the first wait after
/// it reads it, and the waits after it block again (they returned at once,
/// every time, before, and the idle worker spun on them).
#[test]
fn an_af_packet_port_can_be_waited_on_after_its_link_went_down_and_up() {
    let lab = Lab::new();
    quiet(&lab.a, "va");
    quiet(&lab.b, "vb");
    netns::run_in(&lab.b, || {
        let mut pool = MbufPool::new(256);
        let mut port = af_packet("vb");
        ip(&["-n", &lab.b, "link", "set", "vb", "down"]);
        ip(&["-n", &lab.b, "link", "set", "vb", "up"]);
        drain(&mut pool, |p, rx| port.rx_burst(p, rx, 64, 3));
        let first = wait::port(port.as_ref(), Duration::from_millis(100));
        assert_ne!(first, None, "the driver can be waited on");
        assert_ne!(first, Some(wait::Waited::Readable), "nothing was sent");
        assert_ne!(first, Some(wait::Waited::Unwaitable), "the error was read");
        wakes_on_arrival(port.as_mut(), &mut pool, &lab.a, "va");
    })
    .unwrap();
}

#[test]
fn an_idle_tap_port_wakes_a_wait_when_the_kernel_sends() {
    let lab = Lab::new();
    netns::run_in(&lab.a, || {
        let mut pool = MbufPool::new(256);
        let mut tap = TapPort::create("vtap%d").unwrap_or_else(|e| panic!("{e}"));
        let name = tap.name().to_string();
        quiet(&lab.a, &name);
        wakes_on_arrival(&mut tap, &mut pool, &lab.a, &name);
    })
    .unwrap();
}
