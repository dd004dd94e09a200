//! `vrhost gen` and `vrhost count`: pfsend / pfcount-style tools on real ports.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use vrhost_dataplane::MbufPool;
use vrhost_io::af_packet::AfPacketPort;
use vrhost_io::af_xdp::AfXdpPort;
use vrhost_io::tools::{self, GenSource, GenSpec, Ipv4Range, Rate, UdpFlows};
use vrhost_io::Port;

/// Which driver the tool opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolDriver {
    /// AF_XDP socket (kernel bypass).
    AfXdp,
    /// AF_PACKET TPACKET_V2 rings (works everywhere).
    AfPacket,
}

/// Where the tool runs.
#[derive(clap::Args, Debug)]
pub struct PortArgs {
    /// Driver.
    #[arg(long, value_enum, default_value = "af-xdp")]
    pub driver: ToolDriver,
    /// Linux interface.
    #[arg(long)]
    pub interface: String,
    /// Queue to use.
    #[arg(long, default_value_t = 0)]
    pub queue: u16,
    /// Queues the interface is split into (for fanout / one socket per queue).
    #[arg(long, default_value_t = 1)]
    pub queues: u16,
    /// Network namespace to run in (the interface lives there).
    #[arg(long)]
    pub netns: Option<String>,
    /// Print JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `vrhost gen` sends.
#[derive(clap::Args, Debug)]
pub struct GenArgs {
    /// Where to send.
    #[command(flatten)]
    pub port: PortArgs,
    /// Packets per second (default: flat out).
    #[arg(long, conflicts_with = "bps")]
    pub pps: Option<f64>,
    /// Frame bits per second (default: flat out).
    #[arg(long)]
    pub bps: Option<f64>,
    /// Stop after this many frames.
    #[arg(long)]
    pub count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Replay this pcap instead of synthetic UDP.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Synthetic UDP: number of flows (source ports and addresses vary).
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// Synthetic UDP: frame size without FCS (60 = 64 on the wire).
    #[arg(long, default_value_t = 60)]
    pub size: usize,
    /// Synthetic UDP: source addresses, A or A-B.
    #[arg(long, default_value = "10.0.0.2")]
    pub src: String,
    /// Synthetic UDP: destination addresses, A or A-B.
    #[arg(long, default_value = "10.1.0.2")]
    pub dst: String,
    /// Synthetic UDP: source MAC (default: the interface's).
    #[arg(long)]
    pub src_mac: Option<String>,
    /// Synthetic UDP: destination MAC (the router's interface).
    #[arg(long)]
    pub dst_mac: Option<String>,
}

fn range(s: &str) -> Result<Ipv4Range> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let first: Ipv4Addr = a
        .trim()
        .parse()
        .with_context(|| format!("bad address {a:?}"))?;
    let last: Ipv4Addr = b
        .trim()
        .parse()
        .with_context(|| format!("bad address {b:?}"))?;
    if u32::from(last) < u32::from(first) {
        bail!("address range {s:?} runs backwards");
    }
    Ok(Ipv4Range { first, last })
}

fn open(p: &PortArgs) -> Result<Box<dyn Port>> {
    if let Some(ns) = &p.netns {
        vrhost_io::netns::enter(ns).with_context(|| format!("entering netns {ns}"))?;
    }
    Ok(match p.driver {
        ToolDriver::AfXdp => Box::new(AfXdpPort::open(&p.interface, p.queue, p.queues)?),
        ToolDriver::AfPacket => Box::new(AfPacketPort::open(&p.interface, p.queue, p.queues)?),
    })
}

fn stop_on_signal() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the signal handler")?;
    Ok(stop)
}

/// `vrhost gen`.
pub fn gen(a: GenArgs) -> Result<ExitCode> {
    let mut port = open(&a.port)?;
    let source = match &a.pcap {
        Some(p) => GenSource::Pcap(p.clone()),
        None => {
            let own = vrhost_io::netdev::mac(&a.port.interface).unwrap_or([0x02, 0, 0, 0, 0, 1]);
            let mac = |s: &Option<String>, d: [u8; 6]| -> Result<[u8; 6]> {
                match s {
                    Some(s) => vrhost_config::parse_mac(s).map_err(|e| anyhow::anyhow!("{e}")),
                    None => Ok(d),
                }
            };
            GenSource::Udp(UdpFlows {
                src_mac: mac(&a.src_mac, own)?,
                dst_mac: mac(&a.dst_mac, [0xff; 6])?,
                src_ip: range(&a.src)?,
                dst_ip: range(&a.dst)?,
                flows: a.flows.max(1),
                frame_len: a.size,
                ..UdpFlows::default()
            })
        }
    };
    let spec = GenSpec {
        source,
        rate: match (a.pps, a.bps) {
            (Some(p), _) => Rate::Pps(p),
            (_, Some(b)) => Rate::Bps(b),
            _ => Rate::Max,
        },
        count: a.count,
        duration: a.duration.map(Duration::from_secs_f64),
        ..GenSpec::default()
    };
    let stop = stop_on_signal()?;
    let mut pool = MbufPool::new(4096);
    let json = a.port.json;
    let summary = tools::generate(port.as_mut(), &mut pool, &spec, &stop, |s| {
        if json {
            println!(
                "{{\"second\":{},\"pps\":{:.0},\"bps\":{:.0}}}",
                s.second, s.rates.pps, s.rates.bps
            );
        } else {
            println!(
                "{:>4} s  {:>12.0} pps  {:>10.3} Mbps",
                s.second,
                s.rates.pps,
                s.rates.bps / 1e6
            );
        }
    })?;
    let r = summary.rates;
    if json {
        println!(
            "{{\"summary\":true,\"offered\":{},\"sent\":{},\"bytes\":{},\"dropped\":{},\"seconds\":{:.3},\"pps\":{:.0},\"bps\":{:.0}}}",
            summary.offered, r.packets, r.bytes, r.dropped, r.elapsed.as_secs_f64(), r.pps, r.bps
        );
    } else {
        println!(
            "sent {} frames ({} bytes) in {:.2} s: {:.0} pps, {:.3} Mbps ({:.3} Mbps on the wire); {} dropped by the ring",
            r.packets,
            r.bytes,
            r.elapsed.as_secs_f64(),
            r.pps,
            r.bps / 1e6,
            r.line_bps / 1e6,
            r.dropped
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What `vrhost count` receives.
#[derive(clap::Args, Debug)]
pub struct CountArgs {
    /// Where to receive.
    #[command(flatten)]
    pub port: PortArgs,
    /// Stop after this many seconds (default: until SIGINT).
    #[arg(long)]
    pub duration: Option<f64>,
}

/// `vrhost count`.
pub fn count(a: CountArgs) -> Result<ExitCode> {
    let mut port = open(&a.port)?;
    let stop = stop_on_signal()?;
    if let Some(d) = a.duration {
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(d.max(0.0)));
            s.store(true, Ordering::Relaxed);
        });
    }
    let mut pool = MbufPool::new(4096);
    let json = a.port.json;
    let summary = tools::count(port.as_mut(), &mut pool, &stop, |s| {
        if json {
            println!(
                "{{\"second\":{},\"pps\":{:.0},\"bps\":{:.0},\"dropped\":{}}}",
                s.second, s.rates.pps, s.rates.bps, s.rates.dropped
            );
        } else {
            println!(
                "{:>4} s  {:>12.0} pps  {:>10.3} Mbps  {} dropped",
                s.second,
                s.rates.pps,
                s.rates.bps / 1e6,
                s.rates.dropped
            );
        }
    });
    let r = summary.rates;
    if json {
        println!(
            "{{\"summary\":true,\"received\":{},\"bytes\":{},\"dropped\":{},\"seconds\":{:.3},\"pps\":{:.0},\"bps\":{:.0}}}",
            r.packets, r.bytes, r.dropped, r.elapsed.as_secs_f64(), r.pps, r.bps
        );
    } else {
        println!(
            "received {} frames ({} bytes) in {:.2} s: {:.0} pps, {:.3} Mbps; {} dropped by the ring",
            r.packets,
            r.bytes,
            r.elapsed.as_secs_f64(),
            r.pps,
            r.bps / 1e6,
            r.dropped
        );
    }
    Ok(ExitCode::SUCCESS)
}
