//! `vrhost replay`: pcap in, pcap out, deterministic.
//!
//! Every pcap port's rx file is merged by timestamp and each frame is
//! processed at its own timestamp, so neighbor aging, probe retransmission
//! and ICMP rate limits depend only on the input. Frames a port sends are
//! written to its tx file stamped with the time of the frame that caused them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use vrhost_config::{Config, Driver};
use vrhost_dataplane::{Engine, TxBatch, VrId};
use vrhost_io::{PcapFrames, PcapSink};

/// Runs a replay of `path`'s config and prints the counters.
pub fn run(path: &Path, json: bool) -> Result<ExitCode> {
    let Some(cfg) = vrhost_daemon::load_config(path) else {
        return Ok(std::process::ExitCode::FAILURE);
    };
    let engine = replay(&cfg)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&vrhost_daemon::report::json(
                &vrhost_daemon::report::Source::Engine(&engine)
            ))?
        );
    } else {
        print!(
            "{}",
            vrhost_daemon::report::table(&vrhost_daemon::report::Source::Engine(&engine))
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Replays `cfg` and returns the engine with its counters.
pub fn replay(cfg: &Config) -> Result<Engine> {
    for p in &cfg.ports {
        if p.driver != Driver::Pcap {
            bail!(
                "port {:?}: replay needs pcap ports, this one is {}",
                p.name,
                p.driver
            );
        }
    }
    let spec = vrhost_config::engine_spec(cfg, |_| vrhost_daemon::runtime::FALLBACK_MAC);
    let mut engine = Engine::new(&spec).context("building the engine")?;
    let mut sources: Vec<Option<PcapFrames>> = Vec::new();
    let mut sinks: Vec<Option<PcapSink>> = Vec::new();
    for p in &cfg.ports {
        sources.push(p.rx.as_deref().map(PcapFrames::open).transpose()?);
        sinks.push(p.tx.as_deref().map(PcapSink::create).transpose()?);
    }
    // (timestamp, port, sequence) → frame; the sequence keeps equal
    // timestamps in file order, and ports in config order.
    let mut heap = BinaryHeap::new();
    let mut pending: Vec<Option<Vec<u8>>> = vec![None; sources.len()];
    let mut seq = 0u64;
    let mut refill = |port: usize,
                      sources: &mut Vec<Option<PcapFrames>>,
                      pending: &mut Vec<Option<Vec<u8>>>,
                      heap: &mut BinaryHeap<Reverse<(u64, usize, u64)>>|
     -> Result<()> {
        if let Some(src) = sources[port].as_mut() {
            match src.next_frame() {
                Some(f) => {
                    let (ts, frame) = f?;
                    pending[port] = Some(frame);
                    heap.push(Reverse((ts, port, seq)));
                    seq += 1;
                }
                None => sources[port] = None,
            }
        }
        Ok(())
    };
    for port in 0..sources.len() {
        refill(port, &mut sources, &mut pending, &mut heap)?;
    }
    let mut tx = TxBatch::new(cfg.ports.len());
    let mut rx = Vec::with_capacity(1);
    while let Some(Reverse((ts, port, _))) = heap.pop() {
        let frame = pending[port].take().context("replay bookkeeping")?;
        let mut m = engine.pool().get();
        if m.fill(&frame) < frame.len() {
            tracing::warn!(
                port = cfg.ports[port].name,
                len = frame.len(),
                "frame longer than a buffer; skipped"
            );
            engine.pool().put(m);
        } else {
            m.port = port as u16;
            rx.push(m);
            engine.process_burst(&mut rx, ts, &mut tx);
        }
        flush(&mut engine, &mut tx, &mut sinks, ts)?;
        refill(port, &mut sources, &mut pending, &mut heap)?;
    }
    for sink in sinks.into_iter().flatten() {
        sink.finish()?;
    }
    Ok(engine)
}

fn flush(
    engine: &mut Engine,
    tx: &mut TxBatch,
    sinks: &mut [Option<PcapSink>],
    ts: u64,
) -> Result<()> {
    for (i, q) in tx.ports.iter_mut().enumerate() {
        for m in q.drain(..) {
            if let Some(sink) = sinks[i].as_mut() {
                sink.write(ts, m.data())?;
            }
            engine.pool().put(m);
        }
    }
    for vr in 0..engine.vr_count() {
        engine.drain_punted(VrId::new(vr), |_| {});
    }
    Ok(())
}
