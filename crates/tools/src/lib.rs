//! vrhost's measurement and lab tools, kept out of the router binary (they
//! link a plotting library and synthetic workloads the daemon never needs).
//!
//! The `vrhost-tools` binary runs them; `vrhost bench|bench-routes|fairness|
//! vr-memory|demo|lab|gen|count|workload` hands its arguments to it.
//!
//! * [`workload`]: synthetic tables, frames and configs (`vrhost workload`);
//! * [`sweep`]: the synthetic multi-VR workload, run as a [`Runtime`](vrhost_daemon::runtime::Runtime);
//! * [`bench`](mod@bench): forwarding throughput on memory ports (`vrhost bench`);
//! * [`route_bench`]: route-update throughput (`vrhost bench-routes`);
//! * [`fairness`]: overload scenarios between two VRs (`vrhost fairness`);
//! * [`demo`]: the embedded default (`vrhost demo`);
//! * [`lab`]: host namespaces wired to vrhost by veth pairs (`vrhost lab`);
//! * [`traffic`]: pfsend/pfcount-style tools on real ports (`vrhost gen`, `vrhost count`).

#![forbid(unsafe_code)]

pub mod bench;
pub mod demo;
pub mod fairness;
pub mod lab;
pub mod route_bench;
pub mod sweep;
pub mod traffic;
pub mod workload;
