//! `vrhost bench-routes`: how fast routes get into a running VR, and what
//! forwarding loses meanwhile.
//!
//! On a config made by `vrhost workload` (one VR, memory ports, forwarding
//! flat out the whole time):
//! 1. **Bulk load through the API**: N new /24 routes in bulk requests of
//!    250,000 over the Unix socket (HTTP, JSON, auth, validation, one commit
//!    per request), then the same N deleted in bulk.
//! 2. **Bulk load into `TableWriter` directly** (no HTTP): the same N routes,
//!    one commit, as the baseline for the API's overhead.
//! 3. **Sustained churn while forwarding**: the VR's own routes, the ones
//!    the traffic uses, move between two gateways in batches of 1,000 (one
//!    commit each) for `--seconds`; every packet still has a route and a
//!    resolved gateway, so any drop is a loss.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;
use vrhost_api::types::{BulkRoutes, Prefix, Route};
use vrhost_dataplane::{RouteHop, RouteTarget, VrId};
use vrhost_fib::Prefix4;

use vrhost_daemon::runtime::{lock, Mode, Runtime};

/// What `vrhost bench-routes` was asked.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A config from `vrhost workload` (memory ports, one VR).
    #[arg(long)]
    pub config: PathBuf,
    /// Routes to bulk-load.
    #[arg(long, default_value_t = 1_000_000)]
    pub routes: usize,
    /// How long to churn routes while forwarding.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

const CHUNK: usize = 250_000;
const CHURN_BATCH: usize = 1_000;

/// Runs `vrhost bench-routes`.
pub fn run(a: Args) -> Result<ExitCode> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        bail!("--seconds must be a positive number");
    }
    if a.routes == 0 {
        bail!("--routes must be at least 1");
    }
    let Some(mut cfg) = vrhost_daemon::load_config(&a.config) else {
        return Ok(ExitCode::FAILURE);
    };
    if cfg.routers.len() != 1 {
        bail!("give a config with one router (vrhost workload makes one)");
    }
    for r in &mut cfg.routers {
        // Room for the table and the bulk load.
        r.limits.max_routes = r
            .limits
            .max_routes
            .max((r.routes.len() + a.routes) as u32 + 64);
    }
    let dir = tempfile::tempdir().context("temporary directory")?;
    let token = vrhost_api::generate_token();
    cfg.api = Some(vrhost_config::Api {
        socket: dir.path().join("api.sock"),
        listen: None,
        admin_token_sha256: vrhost_api::hash_token(&token),
        tls: None,
        state: None,
    });
    let cores = crate::bench::cores_for(1, &cfg.dataplane.workers);
    let rt = Runtime::from_config(&cfg, &cores, Mode::Rtc)?;
    let running = rt.start();
    let api = vrhost_daemon::api_backend::start(&cfg, &a.config, &running)?
        .1
        .context("API did not start")?;
    let client =
        vrhost_api::Client::unix(api.socket(), Some(token)).with_timeout(Duration::from_secs(600));
    let vr = cfg.routers[0].name.clone();
    let gw = cfg.routers[0]
        .neighbors
        .iter()
        .map(|n| n.address)
        .filter(|a| a.is_ipv4())
        .take(2)
        .collect::<Vec<_>>();
    if gw.len() < 2 {
        bail!("the router needs two IPv4 static neighbours to move routes between");
    }
    std::thread::sleep(Duration::from_millis(300));

    // 1. Bulk load and delete through the API.
    // /24s in 240.0.0.0/4 (class E): room for 1,048,576 of them, and no
    // overlap with the traffic's table, so loading them changes no packet's fate.
    if a.routes > 1 << 20 {
        bail!("--routes: at most 1048576 (the /24s of 240.0.0.0/4)");
    }
    let prefixes: Vec<Prefix> = (0..a.routes as u32)
        .filter_map(|i| Prefix::new(IpAddr::V4(Ipv4Addr::from(0xF000_0000 + (i << 8))), 24).ok())
        .collect();
    let t = Instant::now();
    let mut created = 0;
    for chunk in prefixes.chunks(CHUNK) {
        let req = BulkRoutes {
            add: chunk.iter().map(|&p| Route::via(p, gw[0])).collect(),
            ..BulkRoutes::default()
        };
        created += client
            .bulk_routes(&vr, &req)
            .map_err(|e| anyhow::anyhow!("bulk add: {e}"))?
            .created;
    }
    let api_load = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for chunk in prefixes.chunks(CHUNK) {
        let req = BulkRoutes {
            delete: chunk.to_vec(),
            ..BulkRoutes::default()
        };
        client
            .bulk_routes(&vr, &req)
            .map_err(|e| anyhow::anyhow!("bulk delete: {e}"))?;
    }
    let api_delete = t.elapsed().as_secs_f64();

    // 2. The same load straight into TableWriter, one commit.
    let via = RouteTarget::Via(gw[0]);
    let t = Instant::now();
    let v4: Vec<Prefix4> = prefixes
        .iter()
        .filter_map(|p| match p.addr() {
            IpAddr::V4(x) => Prefix4::new(x, p.prefix_len()).ok(),
            IpAddr::V6(_) => None,
        })
        .collect();
    let batch: Vec<(Prefix4, RouteTarget)> = v4.iter().map(|&p| (p, via.clone())).collect();
    {
        let mut c = lock(&running.writer);
        c.add_routes(VrId::new(0), &batch, &[])
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        c.commit();
    }
    let direct_load = t.elapsed().as_secs_f64();
    {
        let mut c = lock(&running.writer);
        c.remove_routes(VrId::new(0), &v4, &[]);
        c.commit();
    }

    // 3. Churn the routes the traffic uses while it flows.
    let table: Vec<(Prefix4, IpAddr)> = lock(&running.writer)
        .route_list(VrId::new(0))
        .into_iter()
        .filter_map(|(a, l, h)| match (a, h) {
            (IpAddr::V4(x), RouteHop::Gateway { addr, .. }) => {
                Some((Prefix4::new(x, l).ok()?, addr))
            }
            _ => None,
        })
        .collect();
    let before = running.all_ports();
    let t = Instant::now();
    let span = Duration::from_secs_f64(a.seconds);
    let mut updates = 0u64;
    let mut flip = 0usize;
    while t.elapsed() < span {
        for batch in table.chunks(CHURN_BATCH) {
            let mut c = lock(&running.writer);
            for &(p, orig) in batch {
                // Alternate each route between its own gateway and another.
                let other = if orig == gw[0] { gw[1] } else { gw[0] };
                let to = if flip.is_multiple_of(2) { other } else { orig };
                c.add_route(VrId::new(0), p, RouteTarget::Via(to))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            c.commit();
            updates += batch.len() as u64;
            if t.elapsed() >= span {
                break;
            }
        }
        flip += 1;
    }
    let churn_secs = t.elapsed().as_secs_f64();
    let after = running.all_ports();
    drop(api);
    running.stop();

    let rx = after.rx_packets - before.rx_packets;
    let tx = after.tx_packets - before.tx_packets;
    let dropped = after.dropped() - before.dropped();
    let out = json!({
        "routes": a.routes,
        "api_bulk_created": created,
        "api_load_seconds": api_load,
        "api_load_routes_per_s": a.routes as f64 / api_load,
        "api_delete_routes_per_s": a.routes as f64 / api_delete,
        "direct_load_routes_per_s": a.routes as f64 / direct_load,
        "churn_routes": table.len(),
        "churn_updates": updates,
        "churn_updates_per_s": updates as f64 / churn_secs,
        "churn_seconds": churn_secs,
        "forwarded_pps_during_churn": tx as f64 / churn_secs,
        "received_during_churn": rx,
        "sent_during_churn": tx,
        "dropped_during_churn": dropped,
    });
    if a.json {
        println!("{out}");
    } else {
        println!(
            "bulk load through the API: {} routes in {:.2} s = {:.0} routes/s (delete: {:.0} routes/s)\n\
             bulk load into TableWriter directly: {:.0} routes/s\n\
             churn while forwarding: {:.0} route updates/s over {} routes for {:.1} s; \
             {:.3} Mpps forwarded, {} received, {} sent, {} dropped",
            a.routes,
            api_load,
            a.routes as f64 / api_load,
            a.routes as f64 / api_delete,
            a.routes as f64 / direct_load,
            updates as f64 / churn_secs,
            table.len(),
            churn_secs,
            tx as f64 / churn_secs / 1e6,
            rx,
            tx,
            dropped
        );
    }
    Ok(if dropped == 0 && rx == tx {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
