//! A naive LPM that is obviously correct: the oracle the fast tables are tested against.

use std::collections::BTreeMap;

use crate::{FibAddr, Lpm, NextHopId, Prefix};

/// The reference longest-prefix-match table: a sorted map of routes, and a
/// lookup that scans every route and keeps the longest one that matches.
///
/// O(n) per lookup; meant for tests and as a specification, never for forwarding
/// (STYLE.md §10: "Check the FIB against a naive LPM oracle").
#[derive(Clone)]
pub struct ReferenceLpm<A> {
    routes: BTreeMap<Prefix<A>, NextHopId>,
}

impl<A: FibAddr> ReferenceLpm<A> {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            routes: BTreeMap::new(),
        }
    }
}

impl<A: FibAddr> Default for ReferenceLpm<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: FibAddr> core::fmt::Debug for ReferenceLpm<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_map().entries(&self.routes).finish()
    }
}

impl<A: FibAddr> Lpm<A> for ReferenceLpm<A> {
    fn insert(&mut self, prefix: Prefix<A>, nh: NextHopId) -> Option<NextHopId> {
        self.routes.insert(prefix, nh)
    }

    fn remove(&mut self, prefix: &Prefix<A>) -> Option<NextHopId> {
        self.routes.remove(prefix)
    }

    fn get(&self, prefix: &Prefix<A>) -> Option<NextHopId> {
        self.routes.get(prefix).copied()
    }

    fn lookup(&self, addr: A) -> Option<NextHopId> {
        self.routes
            .iter()
            .filter(|(prefix, _)| prefix.contains(addr))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, nh)| *nh)
    }

    fn len(&self) -> usize {
        self.routes.len()
    }

    fn memory_bytes(&self) -> usize {
        // A B-tree node holds up to 11 entries; count one entry's worth per route
        // plus a third for node slack and child pointers. An estimate, as documented.
        self.routes.len() * core::mem::size_of::<(Prefix<A>, NextHopId)>() * 4 / 3
    }

    fn for_each(&self, f: &mut dyn FnMut(Prefix<A>, NextHopId)) {
        for (prefix, nh) in &self.routes {
            f(*prefix, *nh);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    #[test]
    fn longest_match_wins() {
        let mut t = ReferenceLpm::<Ipv4Addr>::new();
        assert_eq!(t.lookup(Ipv4Addr::new(10, 1, 2, 3)), None);
        t.insert("0.0.0.0/0".parse().unwrap(), NextHopId(0));
        t.insert("10.0.0.0/8".parse().unwrap(), NextHopId(1));
        t.insert("10.1.0.0/16".parse().unwrap(), NextHopId(2));
        assert_eq!(t.lookup(Ipv4Addr::new(10, 1, 2, 3)), Some(NextHopId(2)));
        assert_eq!(t.lookup(Ipv4Addr::new(10, 2, 2, 3)), Some(NextHopId(1)));
        assert_eq!(t.lookup(Ipv4Addr::new(11, 0, 0, 0)), Some(NextHopId(0)));
        assert_eq!(
            t.remove(&"10.1.0.0/16".parse().unwrap()),
            Some(NextHopId(2))
        );
        assert_eq!(t.lookup(Ipv4Addr::new(10, 1, 2, 3)), Some(NextHopId(1)));
        assert_eq!(t.len(), 2);
    }
}
