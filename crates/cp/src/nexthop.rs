//! Next-hop objects (`RTM_NEWNEXTHOP`, linux/nexthop.h) and the routes
//! that name them by id (`RTA_NH_ID`).
//!
//! zebra's `dplane_fpm_nl` with `fpm use-next-hop-groups` (its default)
//! sends each next hop and each group once, as an object with an id, and
//! routes that carry only that id. A group that changes is sent again, and
//! the routes that use it are not: [`NextHops`] keeps the objects and, per
//! id, the prefixes that use it, so a change re-resolves every dependant.
//!
//! ```text
//!   object id ──▶ Single { gateway, interface } | Blackhole | Group [(member id, weight)]
//!   route P nhid G ──▶ resolve(G): a gateway → Via, several → Multipath,
//!                      blackhole → Blackhole, nothing usable → unresolved
//! ```
//!
//! netlink-packet-route has no next-hop messages, so [`decode`] reads the
//! `nhmsg` header and attributes itself; it never panics on any input.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::event::{Hop, IpPrefix, RouteTarget};

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const NHA_ID: u16 = 1;
const NHA_GROUP: u16 = 2;
const NHA_BLACKHOLE: u16 = 4;
const NHA_OIF: u16 = 5;
const NHA_GATEWAY: u16 = 6;
/// `nhmsg`: family, scope, protocol, reserved, flags (u32).
const NHMSG_LEN: usize = 8;

/// One next-hop object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextHop {
    /// One next hop: a gateway (or none: a device-only next hop) on an
    /// interface of the sender's.
    Single {
        /// The gateway.
        gw: Option<IpAddr>,
        /// The sender's interface index.
        oif: Option<u32>,
    },
    /// Drop.
    Blackhole,
    /// Several objects, each with its weight (1-256).
    Group(Vec<(u32, u16)>),
}

/// Why a next-hop message was not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NhError {
    /// Shorter than its header, or an attribute runs past the end.
    #[error("next-hop message truncated")]
    Truncated,
    /// No `NHA_ID`.
    #[error("next-hop message without an id")]
    NoId,
    /// A gateway of the wrong length for its family.
    #[error("next-hop gateway of {0} bytes")]
    BadGateway(usize),
    /// A group of more than [`MAX_GROUP_MEMBERS`] members.
    #[error("next-hop group of {0} members, at most {MAX_GROUP_MEMBERS} are taken")]
    GroupTooLarge(usize),
}

pub use crate::rtnl::MAX_GROUP_MEMBERS;

/// Decodes a next-hop message body (after the netlink header) into its id
/// and object. A delete needs only the id; its object is whatever else
/// the message holds.
pub fn decode(body: &[u8]) -> Result<(u32, NextHop), NhError> {
    let head = body.get(..NHMSG_LEN).ok_or(NhError::Truncated)?;
    let family = head[0];
    let mut id = None;
    let (mut gw, mut oif, mut blackhole, mut group) = (None, None, false, None);
    let mut rest = &body[NHMSG_LEN..];
    while rest.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return Err(NhError::Truncated);
        }
        let value = &rest[4..len];
        let u32_of = |v: &[u8]| -> Result<u32, NhError> {
            Ok(u32::from_ne_bytes(
                *v.first_chunk::<4>().ok_or(NhError::Truncated)?,
            ))
        };
        match kind {
            NHA_ID => id = Some(u32_of(value)?),
            NHA_OIF => oif = Some(u32_of(value)?),
            NHA_BLACKHOLE => blackhole = true,
            NHA_GATEWAY => {
                gw = Some(match (family, value.len()) {
                    (AF_INET, 4) => {
                        IpAddr::V4(Ipv4Addr::new(value[0], value[1], value[2], value[3]))
                    }
                    (AF_INET6, 16) => {
                        let mut a = [0u8; 16];
                        a.copy_from_slice(value);
                        IpAddr::V6(Ipv6Addr::from(a))
                    }
                    (_, n) => return Err(NhError::BadGateway(n)),
                })
            }
            NHA_GROUP => {
                if value.len() / 8 > MAX_GROUP_MEMBERS {
                    return Err(NhError::GroupTooLarge(value.len() / 8));
                }
                // struct nexthop_grp { u32 id; u8 weight; u8 weight_high; u16 resvd }:
                // the weight is one more than what is stored.
                group = Some(
                    value
                        .chunks_exact(8)
                        .map(|g| {
                            let id = u32::from_ne_bytes([g[0], g[1], g[2], g[3]]);
                            let weight = (u16::from(g[5]) << 8 | u16::from(g[4])).saturating_add(1);
                            (id, weight)
                        })
                        .collect(),
                )
            }
            _ => {}
        }
        rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
    }
    let id = id.ok_or(NhError::NoId)?;
    let obj = match (group, blackhole) {
        (Some(g), _) => NextHop::Group(g),
        (None, true) => NextHop::Blackhole,
        (None, false) => NextHop::Single { gw, oif },
    };
    Ok((id, obj))
}

/// Encodes `RTM_NEWNEXTHOP` (or, with `del`, `RTM_DELNEXTHOP`) for `id` as
/// zebra sends it: one netlink message, 4-byte aligned. For tests and tools.
pub fn encode(id: u32, obj: &NextHop, del: bool) -> Vec<u8> {
    let family = match obj {
        NextHop::Single {
            gw: Some(IpAddr::V6(_)),
            ..
        } => AF_INET6,
        NextHop::Single { .. } => AF_INET,
        NextHop::Blackhole | NextHop::Group(_) => 0,
    };
    let mut body = vec![family, 0, 11, 0, 0, 0, 0, 0];
    let mut attr = |kind: u16, value: &[u8]| {
        body.extend_from_slice(&((value.len() + 4) as u16).to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(value);
        body.resize((body.len() + 3) & !3, 0);
    };
    attr(NHA_ID, &id.to_ne_bytes());
    match obj {
        NextHop::Single { gw, oif } => {
            if let Some(oif) = oif {
                attr(NHA_OIF, &oif.to_ne_bytes());
            }
            match gw {
                Some(IpAddr::V4(a)) => attr(NHA_GATEWAY, &a.octets()),
                Some(IpAddr::V6(a)) => attr(NHA_GATEWAY, &a.octets()),
                None => {}
            }
        }
        NextHop::Blackhole => attr(NHA_BLACKHOLE, &[]),
        NextHop::Group(g) => {
            let mut v = Vec::with_capacity(g.len() * 8);
            for &(id, w) in g {
                let w = w.clamp(1, 256) - 1;
                v.extend_from_slice(&id.to_ne_bytes());
                v.extend_from_slice(&[(w & 0xff) as u8, (w >> 8) as u8, 0, 0]);
            }
            attr(NHA_GROUP, &v);
        }
    }
    let kind = if del {
        crate::rtnl::RTM_DELNEXTHOP
    } else {
        crate::rtnl::RTM_NEWNEXTHOP
    };
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&0x0501u16.to_ne_bytes()); // REQUEST | CREATE | REPLACE
    msg.extend_from_slice(&[0; 8]);
    msg.extend_from_slice(&body);
    msg
}

/// The objects a producer has sent, and which routes use which.
#[derive(Debug, Default)]
pub struct NextHops {
    objs: HashMap<u32, NextHop>,
    /// Prefixes whose route names each id.
    users: HashMap<u32, BTreeSet<IpPrefix>>,
    /// The id each such prefix names.
    route_id: HashMap<IpPrefix, u32>,
    /// The groups each id is a member of: what a change of the id touches,
    /// found without reading every group.
    groups_of: HashMap<u32, BTreeSet<u32>>,
}

impl NextHops {
    /// Objects held.
    pub fn len(&self) -> usize {
        self.objs.len()
    }

    /// Prefixes whose routes name an object, resolved or not.
    pub fn prefixes(&self) -> usize {
        self.route_id.len()
    }

    /// Whether object `id` is held.
    pub fn contains(&self, id: u32) -> bool {
        self.objs.contains_key(&id)
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.objs.is_empty()
    }

    /// What the route for a prefix naming `id` sends to now, or `None`
    /// while `id` is unknown or has no usable gateway (a device-only next
    /// hop: the sender's interfaces mean nothing here).
    pub fn resolve(&self, id: u32) -> Option<RouteTarget> {
        let gateway = |id: u32| match self.objs.get(&id)? {
            NextHop::Single { gw: Some(gw), .. } => Some(*gw),
            _ => None,
        };
        match self.objs.get(&id)? {
            NextHop::Blackhole => Some(RouteTarget::Blackhole),
            NextHop::Single { gw: Some(gw), .. } => Some(RouteTarget::Via {
                gw: *gw,
                ifname: None,
            }),
            NextHop::Single { gw: None, .. } => None,
            NextHop::Group(members) => {
                let mut hops: Vec<Hop> = members
                    .iter()
                    .filter_map(|&(m, weight)| {
                        Some(Hop {
                            gw: gateway(m)?,
                            ifname: None,
                            weight,
                        })
                    })
                    .collect();
                hops.sort();
                match hops.len() {
                    0 => None,
                    1 => Some(RouteTarget::Via {
                        gw: hops[0].gw,
                        ifname: None,
                    }),
                    _ => Some(RouteTarget::Multipath(hops)),
                }
            }
        }
    }

    /// Records that `prefix`'s route names `id` (replacing what it named).
    pub fn use_id(&mut self, prefix: IpPrefix, id: u32) {
        self.forget(prefix);
        self.route_id.insert(prefix, id);
        self.users.entry(id).or_default().insert(prefix);
    }

    /// `prefix`'s route names no object any more (replaced or deleted).
    pub fn forget(&mut self, prefix: IpPrefix) {
        if let Some(old) = self.route_id.remove(&prefix) {
            if let Some(u) = self.users.get_mut(&old) {
                u.remove(&prefix);
                if u.is_empty() {
                    self.users.remove(&old);
                }
            }
        }
    }

    /// Stores (or with `obj` `None`, deletes) object `id`; returns every
    /// prefix whose route resolves differently now: the users of `id` and
    /// of every group that has `id` as a member.
    pub fn set(&mut self, id: u32, obj: Option<NextHop>) -> Vec<IpPrefix> {
        let old = match obj {
            Some(o) => self.objs.insert(id, o),
            None => self.objs.remove(&id),
        };
        // The old group's members first, then the new one's.
        if let Some(NextHop::Group(old)) = old {
            for (m, _) in old {
                if let Some(g) = self.groups_of.get_mut(&m) {
                    g.remove(&id);
                    if g.is_empty() {
                        self.groups_of.remove(&m);
                    }
                }
            }
        }
        if let Some(NextHop::Group(new)) = self.objs.get(&id) {
            for &(m, _) in new {
                self.groups_of.entry(m).or_default().insert(id);
            }
        }
        let mut ids = vec![id];
        ids.extend(self.groups_of.get(&id).into_iter().flatten().copied());
        ids.iter()
            .filter_map(|i| self.users.get(i))
            .flatten()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The id `prefix`'s route names, if it names one.
    pub fn id_of(&self, prefix: &IpPrefix) -> Option<u32> {
        self.route_id.get(prefix).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn objects_round_trip() {
        for obj in [
            NextHop::Single {
                gw: Some(v4("10.0.0.2")),
                oif: Some(7),
            },
            NextHop::Single {
                gw: Some(v4("2001:db8::1")),
                oif: None,
            },
            NextHop::Single {
                gw: None,
                oif: Some(3),
            },
            NextHop::Blackhole,
            NextHop::Group(vec![(1, 1), (2, 3), (9, 256)]),
        ] {
            let msg = encode(42, &obj, false);
            assert_eq!(decode(&msg[16..]), Ok((42, obj)));
        }
    }

    #[test]
    fn a_group_follows_its_members() {
        let mut t = NextHops::default();
        let p: IpPrefix = "203.0.113.0/24".parse().unwrap();
        t.use_id(p, 10);
        assert_eq!(t.resolve(10), None, "unknown yet");
        assert!(t
            .set(
                1,
                Some(NextHop::Single {
                    gw: Some(v4("10.0.0.2")),
                    oif: None
                })
            )
            .is_empty());
        t.set(
            2,
            Some(NextHop::Single {
                gw: Some(v4("10.0.1.2")),
                oif: None,
            }),
        );
        assert_eq!(t.set(10, Some(NextHop::Group(vec![(1, 1), (2, 1)]))), [p]);
        assert!(matches!(t.resolve(10), Some(RouteTarget::Multipath(h)) if h.len() == 2));
        // A member changes: the route that uses the group follows.
        assert_eq!(
            t.set(
                2,
                Some(NextHop::Single {
                    gw: Some(v4("10.0.1.3")),
                    oif: None
                })
            ),
            [p]
        );
        // A member goes: one gateway left.
        assert_eq!(t.set(1, None), [p]);
        assert_eq!(
            t.resolve(10),
            Some(RouteTarget::Via {
                gw: v4("10.0.1.3"),
                ifname: None
            })
        );
        t.forget(p);
        assert!(t.set(10, None).is_empty());
    }

    /// A group larger than any a VR can use is refused, not stored.
    #[test]
    fn a_group_of_too_many_members_is_refused() {
        let members = |n: u32| NextHop::Group((1..=n).map(|m| (m, 1)).collect());
        let ok = members(MAX_GROUP_MEMBERS as u32);
        assert_eq!(decode(&encode(7, &ok, false)[16..]), Ok((7, ok)));
        let big = members(MAX_GROUP_MEMBERS as u32 + 1);
        assert_eq!(
            decode(&encode(7, &big, false)[16..]),
            Err(NhError::GroupTooLarge(MAX_GROUP_MEMBERS + 1))
        );
    }

    /// Which groups an id is in is kept as groups come, change and go: a
    /// member's change reaches the routes of the groups it is in now, and
    /// only those.
    #[test]
    fn a_members_change_reaches_the_groups_it_is_in_now() {
        let mut t = NextHops::default();
        let (p, q): (IpPrefix, IpPrefix) = (
            "203.0.113.0/24".parse().unwrap(),
            "198.51.100.0/24".parse().unwrap(),
        );
        t.use_id(p, 10);
        t.use_id(q, 11);
        let single = |gw: &str| {
            Some(NextHop::Single {
                gw: Some(v4(gw)),
                oif: None,
            })
        };
        t.set(1, single("10.0.0.2"));
        t.set(2, single("10.0.0.3"));
        t.set(10, Some(NextHop::Group(vec![(1, 1), (2, 1)])));
        t.set(11, Some(NextHop::Group(vec![(2, 1)])));
        assert_eq!(t.set(2, single("10.0.0.4")), [q, p]);
        // Group 10 drops member 2; group 11 goes.
        t.set(10, Some(NextHop::Group(vec![(1, 1)])));
        t.forget(q);
        t.set(11, None);
        assert!(t.set(2, single("10.0.0.5")).is_empty());
        assert_eq!(t.set(1, single("10.0.0.6")), [p]);
        assert!(!t.groups_of.contains_key(&2), "nothing left of member 2");
    }

    proptest! {
        #[test]
        fn decode_never_panics(body in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode(&body);
        }
    }
}
