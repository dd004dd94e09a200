//! What the control plane tells the data plane: one input enum,
//! [`CpEvent`], so the consumer's loop can be recorded, replayed and tested
//! from data (STYLE.md §8).
//!
//! Semantics, the same for the namespace watcher and the FPM server:
//! - `Route { op: Add, .. }` installs **or replaces** the route for `prefix`
//!   (one effective route per prefix: the producer already chose it).
//! - `Route { op: Del, .. }` removes the route for `prefix`; `target` is the
//!   one being removed, for logs.
//! - `Addr` adds or removes one address of one interface.
//! - `Resync` is a complete snapshot: the consumer replaces **all** routes
//!   and addresses it got from this producer with exactly these.
//!
//! [`CpState`] applies events to a plain set; tests use it as the reference
//! consumer, and the data-plane wiring can use it to diff against its FIB.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

pub use vrhost_fib::IpPrefix;

/// Add or remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Install, or replace what is there.
    Add,
    /// Remove.
    Del,
}

/// Where a route sends packets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteTarget {
    /// Through gateway `gw`. `ifname` is the mirrored interface it is
    /// reached on (namespace routes); `None` for FPM routes, whose interface
    /// indexes belong to another host: resolve `gw` against the VR's
    /// connected prefixes.
    Via {
        /// The next-hop address.
        gw: IpAddr,
        /// The interface, where known.
        ifname: Option<String>,
    },
    /// Several gateways, each flow through one (ECMP): a kernel multipath
    /// route (`RTA_MULTIPATH`) or a next-hop group. At least two.
    Multipath(Vec<Hop>),
    /// Directly attached to interface `ifname` (no gateway): the kernel's
    /// prefix route of an interface address, or `ip route add P dev X`.
    Connected {
        /// The interface.
        ifname: String,
    },
    /// Drop silently.
    Blackhole,
    /// Drop, answering ICMP destination unreachable (host unreachable).
    Unreachable,
    /// Drop, answering ICMP destination unreachable (administratively
    /// prohibited).
    Prohibit,
}

impl fmt::Display for RouteTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteTarget::Via {
                gw,
                ifname: Some(i),
            } => write!(f, "via {gw} dev {i}"),
            RouteTarget::Via { gw, ifname: None } => write!(f, "via {gw}"),
            RouteTarget::Multipath(hops) => {
                for (i, h) in hops.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "nexthop via {}", h.gw)?;
                    if let Some(i) = &h.ifname {
                        write!(f, " dev {i}")?;
                    }
                    write!(f, " weight {}", h.weight)?;
                }
                Ok(())
            }
            RouteTarget::Connected { ifname } => write!(f, "dev {ifname}"),
            RouteTarget::Blackhole => f.write_str("blackhole"),
            RouteTarget::Unreachable => f.write_str("unreachable"),
            RouteTarget::Prohibit => f.write_str("prohibit"),
        }
    }
}

/// One gateway of a multipath route.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hop {
    /// The next-hop address.
    pub gw: IpAddr,
    /// The interface, where known (as for [`RouteTarget::Via`]).
    pub ifname: Option<String>,
    /// Its share, 1-256 as the kernel gives it (`rtnh_hops` + 1).
    pub weight: u16,
}

/// One address of one interface.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    /// The interface (the VR interface's name = its TAP mirror's name).
    pub ifname: String,
    /// The address itself (not the network).
    pub addr: IpAddr,
    /// Its prefix length.
    pub len: u8,
}

/// Everything the control plane reports to the data plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpEvent {
    /// A route was installed/replaced (`Add`) or removed (`Del`).
    Route {
        /// Add or remove.
        op: Op,
        /// The destination.
        prefix: IpPrefix,
        /// The new target (`Add`) or the removed one (`Del`).
        target: RouteTarget,
    },
    /// An interface address appeared (`Add`) or went away (`Del`).
    Addr {
        /// Add or remove.
        op: Op,
        /// The interface.
        ifname: String,
        /// The address.
        addr: IpAddr,
        /// Its prefix length.
        len: u8,
    },
    /// A full snapshot: replace every route and address from this producer
    /// with these. Sent first after start, and after every overrun.
    Resync {
        /// Every route, one per prefix, sorted by prefix.
        routes: Vec<(IpPrefix, RouteTarget)>,
        /// Every address, sorted.
        addrs: Vec<Addr>,
    },
}

/// A reference consumer: the routes and addresses a stream of events
/// leaves behind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpState {
    /// One route per prefix.
    pub routes: BTreeMap<IpPrefix, RouteTarget>,
    /// Every address.
    pub addrs: BTreeSet<Addr>,
}

impl CpState {
    /// Applies one event.
    pub fn apply(&mut self, ev: &CpEvent) {
        match ev {
            CpEvent::Route {
                op: Op::Add,
                prefix,
                target,
            } => {
                self.routes.insert(*prefix, target.clone());
            }
            CpEvent::Route {
                op: Op::Del,
                prefix,
                ..
            } => {
                self.routes.remove(prefix);
            }
            CpEvent::Addr {
                op,
                ifname,
                addr,
                len,
            } => {
                let a = Addr {
                    ifname: ifname.clone(),
                    addr: *addr,
                    len: *len,
                };
                match op {
                    Op::Add => self.addrs.insert(a),
                    Op::Del => self.addrs.remove(&a),
                };
            }
            CpEvent::Resync { routes, addrs } => {
                self.routes = routes.iter().cloned().collect();
                self.addrs = addrs.iter().cloned().collect();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_applies_and_resyncs() {
        let p: IpPrefix = "10.0.0.0/8".parse().unwrap();
        let mut s = CpState::default();
        s.apply(&CpEvent::Route {
            op: Op::Add,
            prefix: p,
            target: RouteTarget::Blackhole,
        });
        assert_eq!(s.routes.get(&p), Some(&RouteTarget::Blackhole));
        s.apply(&CpEvent::Resync {
            routes: vec![],
            addrs: vec![],
        });
        assert!(s.routes.is_empty());
    }
}
