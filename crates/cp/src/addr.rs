//! The config → namespace direction for addresses: the VR interface's
//! configured addresses are put on its TAP mirror, so the tenant's routing
//! daemon sees them (and the kernel derives the connected routes).
//!
//! Requests are idempotent, as resync needs (STYLE.md §7): adding an
//! address that is there, or removing one that is not, succeeds.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use vrhost_io::{netdev, netns};

use crate::rtnl::{self, DumpError, Rtnl};
use crate::CpError;

/// `EEXIST`, `EADDRNOTAVAIL` (Linux values).
const EEXIST: i32 = 17;
const EADDRNOTAVAIL: i32 = 99;

fn message(ifindex: u32, addr: IpAddr, len: u8) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.index = ifindex;
    m.header.prefix_len = len;
    m.header.family = match addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    // As `ip addr add`: IFA_LOCAL and IFA_ADDRESS equal (no peer).
    if addr.is_ipv4() {
        m.attributes.push(AddressAttribute::Local(addr));
    }
    m.attributes.push(AddressAttribute::Address(addr));
    m
}

fn check_len(addr: IpAddr, len: u8) -> Result<(), CpError> {
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(CpError::Parse(format!("{addr}/{len}: length over {max}")));
    }
    Ok(())
}

/// Runs `f` with an rtnetlink socket and the index of `ifname`, on a thread
/// inside `netns`.
fn with_socket<T: Send>(
    netns: &str,
    ifname: &str,
    what: &str,
    f: impl FnOnce(&mut Rtnl, u32) -> io::Result<T> + Send,
) -> Result<T, CpError> {
    let r = netns::run_in(netns, || {
        let index = netdev::ifindex(ifname).map_err(|e| io::Error::other(e.to_string()))?;
        let mut nl = Rtnl::open(0)?;
        f(&mut nl, index)
    })
    .map_err(|e| CpError::Io(format!("netns {netns}: {e}")))?;
    r.map_err(|source| CpError::Netlink {
        netns: netns.into(),
        what: format!("{what} on {ifname}"),
        source,
    })
}

fn add(nl: &mut Rtnl, index: u32, addr: IpAddr, len: u8) -> io::Result<()> {
    match nl.request(
        RouteNetlinkMessage::NewAddress(message(index, addr, len)),
        NLM_F_CREATE | NLM_F_EXCL,
    ) {
        Err(e) if e.raw_os_error() == Some(EEXIST) => Ok(()),
        r => r,
    }
}

fn del(nl: &mut Rtnl, index: u32, addr: IpAddr, len: u8) -> io::Result<()> {
    match nl.request(
        RouteNetlinkMessage::DelAddress(message(index, addr, len)),
        0,
    ) {
        Err(e) if e.raw_os_error() == Some(EADDRNOTAVAIL) => Ok(()),
        r => r,
    }
}

/// Adds `addr/len` to interface `ifname` in `netns` (already there: fine).
pub fn add_address(netns: &str, ifname: &str, addr: IpAddr, len: u8) -> Result<(), CpError> {
    check_len(addr, len)?;
    with_socket(netns, ifname, &format!("add {addr}/{len}"), |nl, i| {
        add(nl, i, addr, len)
    })
}

/// Removes `addr/len` from interface `ifname` in `netns` (absent: fine).
pub fn del_address(netns: &str, ifname: &str, addr: IpAddr, len: u8) -> Result<(), CpError> {
    check_len(addr, len)?;
    with_socket(netns, ifname, &format!("delete {addr}/{len}"), |nl, i| {
        del(nl, i, addr, len)
    })
}

/// Makes the addresses of `ifname` in `netns` exactly `addrs`: missing
/// ones are added, others removed. IPv6 link-local addresses are left
/// alone (the kernel owns them).
pub fn set_addresses(netns: &str, ifname: &str, addrs: &[(IpAddr, u8)]) -> Result<(), CpError> {
    for (a, l) in addrs {
        check_len(*a, *l)?;
    }
    let want: BTreeSet<(IpAddr, u8)> = addrs.iter().copied().collect();
    with_socket(netns, ifname, "set addresses", |nl, index| {
        let have = current(nl, index)?;
        for &(a, l) in have.difference(&want) {
            del(nl, index, a, l)?;
        }
        for &(a, l) in want.difference(&have) {
            add(nl, index, a, l)?;
        }
        Ok(())
    })
}

/// Adds to `ifname` in `netns` those of `want` it lacks, and removes those
/// of `unwanted` it has; every other address stays. A restart uses it on an
/// adopted mirror: the config's addresses are put back, addresses the
/// previous config had and this one has not are taken off, and what the
/// tenant added in the namespace stays, with the routes through it.
pub fn reconcile_addresses(
    netns: &str,
    ifname: &str,
    want: &[(IpAddr, u8)],
    unwanted: &[(IpAddr, u8)],
) -> Result<(), CpError> {
    for (a, l) in want.iter().chain(unwanted) {
        check_len(*a, *l)?;
    }
    let want: BTreeSet<(IpAddr, u8)> = want.iter().copied().collect();
    with_socket(netns, ifname, "reconcile addresses", |nl, index| {
        let have = current(nl, index)?;
        for &(a, l) in unwanted {
            if have.contains(&(a, l)) && !want.contains(&(a, l)) {
                del(nl, index, a, l)?;
            }
        }
        for &(a, l) in want.difference(&have) {
            add(nl, index, a, l)?;
        }
        Ok(())
    })
}

/// The addresses of interface `index`, link-local IPv6 ones excepted.
fn current(nl: &mut Rtnl, index: u32) -> io::Result<BTreeSet<(IpAddr, u8)>> {
    let msgs = loop {
        match nl.dump(RouteNetlinkMessage::GetAddress(AddressMessage::default())) {
            Ok(m) => break m,
            Err(DumpError::Interrupted) => continue,
            Err(DumpError::Io(e)) => return Err(e),
        }
    };
    let mut out = BTreeSet::new();
    for m in msgs {
        let RouteNetlinkMessage::NewAddress(a) = m else {
            continue;
        };
        if a.header.index != index {
            continue;
        }
        if let Some(ip) = rtnl::own_address(&a) {
            out.insert((ip, a.header.prefix_len));
        }
    }
    Ok(out)
}
