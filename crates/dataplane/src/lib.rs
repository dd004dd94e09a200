//! vrhost's forwarding pipeline, sans-IO.
//!
//! The [`Engine`] holds every virtual router's interfaces, FIBs, next hops,
//! neighbor tables and counters. Drivers hand it bursts of received frames
//! ([`Mbuf`]s with `port` set) and the current time; it runs each frame to
//! completion and fills a [`TxBatch`] with what leaves, per port. It never
//! opens a socket or reads a clock, so tests drive it frame by frame and
//! `vrhost replay` drives it from pcap timestamps, deterministically.
//!
//! One stage per file: `demux` → ARP / IPv4 / IPv6 input →
//! forward (fragment) or local delivery → output. Every drop is a
//! [`Drop`] variant with its own counter.

#![forbid(unsafe_code)]

pub mod coalesce;
pub mod counters;
pub mod drop_reason;
pub mod engine;
pub mod fair;
pub mod filter;
pub mod iface;
pub mod mbuf;
pub mod neighbor;
pub mod offload;
pub mod spec;
pub mod tables;
pub mod tap;
pub mod trace;
pub mod worker;

mod arp_input;
mod demux;
mod ecmp;
mod fast;
mod fragment;
mod icmp_error;
mod ip_forward;
mod ipv4_input;
mod ipv6_input;
mod local;
mod ndp;
mod output;
mod pipeline;
mod protocol;
mod traced;
mod urpf;

pub use counters::{CounterCells, Counters};
pub use drop_reason::DropReason;
pub use engine::{sum_ifaces, sum_ports, sum_vr_busy_ns, Engine, VrInfo};
pub use fair::{Clock, Fair};
pub use filter::{Action, Filter, FilterError, FilterSpec, PortRange, Rule};
pub use iface::{link_local_from_mac, Iface};
pub use mbuf::{Gso, Mbuf, MbufPool, Offload};
pub use neighbor::Event;
pub use spec::{
    EngineSpec, IfaceFilters, IfaceId, InterfaceSpec, Limits, Path, Paths, PathsError, PortId,
    PortSpec, RouteTarget, RouterSpec, Tpid, Urpf, VrId,
};
pub use tables::{BuildError, NextHops, RouteHop, Shared, TableWriter};
pub use trace::{PacketTrace, Trace, TraceError, TraceHub};
pub use worker::{NextHop, TxBatch, Vr, Worker, WorkerCounters};
