//! `vrhost bench`: one worker forwarding from memory ports.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;
use vrhost_control::{Config, Driver};

use crate::worker::{pin, Worker};

/// Counter totals over all ports.
fn totals(w: &Worker) -> (u64, u64) {
    let e = &w.engine;
    (0..e.port_count()).fold((0, 0), |(rx, tx), p| {
        let c = e.port_counters(p);
        (rx + c.rx_packets, tx + c.tx_packets)
    })
}

/// Runs the benchmark and prints the result.
pub fn run(path: &Path, seconds: f64, json_out: bool) -> Result<ExitCode> {
    let cfg = match Config::load(path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{}: invalid config", path.display());
            for e in &errors.0 {
                eprintln!("  {e}");
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    for p in &cfg.ports {
        if p.driver != Driver::Memory {
            bail!(
                "port {:?}: bench needs memory ports, this one is {}",
                p.name,
                p.driver
            );
        }
    }
    if !(seconds > 0.0 && seconds.is_finite()) {
        bail!("--seconds must be a positive number");
    }
    let mut w = Worker::from_config(&cfg)?;
    pin(cfg.dataplane.workers[0]);
    let result = measure(&mut w, Duration::from_secs_f64(seconds));
    if json_out {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        println!(
            "{:.3} Mpps received, {:.3} Mpps sent, {:.1} ns/packet, over {:.2} s on 1 worker",
            result["rx_pps"].as_f64().unwrap_or(0.0) / 1e6,
            result["tx_pps"].as_f64().unwrap_or(0.0) / 1e6,
            result["ns_per_packet"].as_f64().unwrap_or(0.0),
            result["seconds"].as_f64().unwrap_or(0.0),
        );
        print!("{}", crate::report::table(&w.engine));
    }
    Ok(ExitCode::SUCCESS)
}

/// Warms up for a quarter second, then measures for `span`.
pub fn measure(w: &mut Worker, span: Duration) -> serde_json::Value {
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(250) {
        w.poll_once();
    }
    let (rx0, tx0) = totals(w);
    let start = Instant::now();
    let mut polls = 0u64;
    loop {
        w.poll_once();
        polls += 1;
        // Read the clock every 64 polls: cheap, yet within microseconds of the deadline.
        if polls % 64 == 0 && start.elapsed() >= span {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let (rx1, tx1) = totals(w);
    let rx_pps = (rx1 - rx0) as f64 / secs;
    let tx_pps = (tx1 - tx0) as f64 / secs;
    let drops: serde_json::Map<String, serde_json::Value> = {
        let mut all = vrhost_dataplane::Counters::default();
        for p in 0..w.engine.port_count() {
            all.add(w.engine.port_counters(p));
        }
        all.nonzero_drops()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect()
    };
    json!({
        "rx_pps": rx_pps,
        "tx_pps": tx_pps,
        "seconds": secs,
        "workers": 1,
        "ns_per_packet": if rx_pps > 0.0 { 1e9 / rx_pps } else { 0.0 },
        "routes4": w.engine.vrs().iter().map(|v| v.routes4()).sum::<usize>(),
        "fib_bytes": w.engine.vrs().iter().map(|v| v.fib_memory()).sum::<usize>(),
        "drops": drops,
    })
}
