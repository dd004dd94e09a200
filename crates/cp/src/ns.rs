//! Per-VR namespaces and the TAP mirrors of VR interfaces inside them.
//!
//! A VR with `[router.control] netns = "NAME"` gets network namespace NAME
//! (adopted if it already exists, created like `ip netns add` otherwise),
//! and one TAP device per VR interface in it, with the interface's name,
//! MAC and MTU. The tenant's FRR/BIRD sees ordinary Ethernet interfaces;
//! what it sends out of one is what the data plane reads from that TAP's
//! queues.
//!
//! The TAPs are persistent: a restart of vrhost adopts them by name
//! ([`mirror`]), and a [`TapHold`] ([`hold_tap`]) keeps their carrier up
//! while no vrhost reads them, so the tenant's sessions never see a link
//! go down. [`delete_mirror`] removes one whose VR interface went.

use std::path::Path;

use netlink_packet_core::Nla;
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoTun, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use vrhost_io::{netdev, netns, TapHold, TapPort};

use crate::CpError;

/// What [`ensure_netns`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetnsInfo {
    /// True if the namespace was created now, false if it was adopted.
    pub created: bool,
}

/// Makes sure network namespace `name` exists (`/run/netns/NAME`) and that
/// its `lo` is up. An existing namespace is adopted as it is, whatever else
/// is configured in it; a handle that exists but cannot be entered (a stale
/// file left by a crash) is an error, never silently replaced.
pub fn ensure_netns(name: &str) -> Result<NetnsInfo, CpError> {
    let io = |e: vrhost_io::IoError| CpError::Io(format!("netns {name}: {e}"));
    // Before creating: making one shares /run/netns in this process's own
    // mount namespace, which hides that the share reaches nobody else.
    let private = private_mounts();
    let created = if Path::new("/run/netns").join(name).exists() {
        netns::run_in(name, || ()).map_err(|e| {
            CpError::Io(format!(
                "netns {name}: /run/netns/{name} exists but cannot be entered ({e}); \
                 remove the stale handle with `ip netns del {name}`"
            ))
        })?;
        false
    } else {
        match netns::create(name) {
            Ok(()) => true,
            // Someone created it between our check and our create: adopt.
            Err(vrhost_io::IoError::File { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                false
            }
            Err(e) => return Err(io(e)),
        }
    };
    netns::run_in(name, || netdev::set_up("lo"))
        .and_then(|r| r)
        .map_err(io)?;
    if created {
        tracing::info!(netns = name, "created network namespace");
        if private {
            // `ip netns exec` gives its command a mount namespace of its
            // own, whose mounts never reach the machine's: the handle we
            // just bind-mounted is visible to this process only, so FRR
            // started from outside cannot enter the namespace, and it is
            // gone when vrhost exits (docs/scale-out.md).
            tracing::warn!(
                netns = name,
                "vrhost runs in a mount namespace of its own (ip netns exec?): \
                 /run/netns/{name} is visible to this process only; create the \
                 namespace beforehand with `ip netns add {name}` (vrhost adopts it)"
            );
        }
    } else {
        tracing::info!(netns = name, "adopted network namespace");
    }
    Ok(NetnsInfo { created })
}

/// True when `/run/netns` is a mount point of this process that does not
/// propagate its mounts back (a slave, as under `ip netns exec`, which
/// remounts `/` with `MS_SLAVE`). False when it is shared, or unknown.
fn private_mounts() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    // proc(5): ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - ...
    info.lines()
        .rev()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let point = f.nth(4)?;
            let optional: Vec<&str> = f.skip(1).take_while(|x| *x != "-").collect();
            (point == "/run/netns").then_some(optional)
        })
        .next()
        .is_some_and(|opt| !opt.iter().any(|o| o.starts_with("shared:")))
}

/// Creates, inside namespace `netns`, a persistent multi-queue TAP device
/// named `name` with MAC `mac` and MTU `mtu`, brings it up, and returns one
/// port per queue (`queues` ≥ 1): each data-plane worker takes one.
///
/// A TAP of that name left by an earlier run of vrhost (persistent, no
/// queue open) is **adopted**: the queues attach to it, and its MAC and MTU
/// are set only where they differ, so the tenant's daemons, addresses,
/// routes and neighbours on it carry on as if nothing happened. A device of
/// that name that is not a multi-queue TAP without vnet headers is deleted
/// and made anew (logged). One that another process reads (a queue open
/// and enabled: another vrhost still running) is an error.
///
/// The device outlives its ports: [`delete_mirror`] removes it.
///
/// The ports are opened on a thread inside the namespace; their file
/// descriptors keep working from any thread afterwards.
pub fn mirror_interface(
    netns: &str,
    name: &str,
    mac: [u8; 6],
    mtu: u32,
    queues: usize,
) -> Result<Vec<TapPort>, CpError> {
    mirror(netns, name, mac, mtu, queues).map(|m| m.ports)
}

/// What [`mirror`] made.
pub struct Mirror {
    /// One port per queue.
    pub ports: Vec<TapPort>,
    /// True when an existing device was adopted rather than created.
    pub adopted: bool,
}

/// [`mirror_interface`], also saying whether the device was adopted.
pub fn mirror(
    netns: &str,
    name: &str,
    mac: [u8; 6],
    mtu: u32,
    queues: usize,
) -> Result<Mirror, CpError> {
    let made = netns::run_in(netns, || -> Result<Mirror, CpError> {
        let ctx = |e: vrhost_io::IoError| CpError::Io(format!("netns {netns}: mirror {name}: {e}"));
        let mut probe = TapProbe::here().map_err(|e| CpError::io(netns, "netlink socket", e))?;
        let existing = probe
            .get(name)
            .map_err(|e| CpError::io(netns, &format!("looking up {name}"), e))?;
        let adopted = match existing {
            None => false,
            // With or without virtio-net headers: a run before they were
            // asked for made it without (the port then uses plain frames).
            Some(Link::Tap(t)) if t.multi_queue => {
                if t.queues > 0 {
                    return Err(CpError::Io(format!(
                        "netns {netns}: TAP {name} is in use by another process ({} queues open): \
                         is another vrhost still running?",
                        t.queues
                    )));
                }
                true
            }
            Some(other) => {
                tracing::warn!(
                    netns,
                    ifname = name,
                    found = ?other,
                    "a device with the mirror's name is not a multi-queue TAP: deleted and made anew"
                );
                probe
                    .delete(name)
                    .map_err(|e| CpError::io(netns, &format!("deleting {name}"), e))?;
                false
            }
        };
        let ports = TapPort::create_multi(name, queues).map_err(ctx)?;
        if let Some(first) = ports.first() {
            first.set_persist(true).map_err(ctx)?;
        }
        if netdev::mac(name).map_err(ctx)? != mac {
            netdev::set_mac(name, mac).map_err(ctx)?;
        }
        if netdev::mtu(name).map_err(ctx)? != mtu {
            netdev::set_mtu(name, mtu).map_err(ctx)?;
        }
        netdev::set_up(name).map_err(ctx)?;
        Ok(Mirror { ports, adopted })
    });
    let m = made.map_err(|e| CpError::Io(format!("netns {netns}: mirror {name}: {e}")))??;
    if m.adopted {
        tracing::info!(netns, ifname = name, mtu, queues, "TAP mirror adopted");
    } else {
        tracing::info!(netns, ifname = name, mtu, queues, "TAP mirror up");
    }
    Ok(m)
}

/// Deletes device `name` in `netns` (a mirror whose VR interface went);
/// one that is not there, or a namespace that is gone, is fine.
pub fn delete_mirror(netns: &str, name: &str) -> Result<(), CpError> {
    if !Path::new("/run/netns").join(netns).exists() {
        return Ok(());
    }
    netns::run_in(netns, || -> std::io::Result<()> {
        let mut probe = TapProbe::here()?;
        if probe.get(name)?.is_some() {
            probe.delete(name)?;
        }
        Ok(())
    })
    .map_err(|e| CpError::Io(format!("netns {netns}: {e}")))?
    .map_err(|e| CpError::io(netns, &format!("deleting {name}"), e))?;
    tracing::info!(netns, ifname = name, "TAP mirror deleted");
    Ok(())
}

/// Opens a [`TapHold`] on the TAP `name` in `netns`: its carrier stays up
/// while the hold is open, whoever else opens or closes queues.
pub fn hold_tap(netns: &str, name: &str) -> Result<TapHold, CpError> {
    netns::run_in(netns, || TapHold::open(name))
        .and_then(|r| r)
        .map_err(|e| CpError::Io(format!("netns {netns}: hold {name}: {e}")))
}

/// A TAP device as rtnetlink shows it (`IFLA_INFO_DATA` of kind `tun`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapInfo {
    /// `IFF_TAP` (Ethernet) rather than `IFF_TUN`.
    pub tap: bool,
    /// `IFF_MULTI_QUEUE`.
    pub multi_queue: bool,
    /// `IFF_VNET_HDR`.
    pub vnet_hdr: bool,
    /// `IFF_PERSIST`.
    pub persist: bool,
    /// Queues open and enabled (readers).
    pub queues: u32,
    /// Queues open but disabled ([`TapHold`]s).
    pub disabled: u32,
}

/// A device of some name, as [`TapProbe::get`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// A TAP (a TUN device in Ethernet mode).
    Tap(TapInfo),
    /// Anything else, with its kind when it has one.
    Other(Option<String>),
}

/// An rtnetlink socket of one namespace for looking up and deleting
/// devices. Opened on a thread inside the namespace, it keeps answering for
/// that namespace from any thread.
pub struct TapProbe {
    nl: crate::rtnl::Rtnl,
}

impl TapProbe {
    /// A probe of the calling thread's namespace.
    pub fn here() -> std::io::Result<TapProbe> {
        Ok(TapProbe {
            nl: crate::rtnl::Rtnl::open(0)?,
        })
    }

    /// A probe of namespace `netns`.
    pub fn open(netns: &str) -> Result<TapProbe, CpError> {
        netns::run_in(netns, TapProbe::here)
            .map_err(|e| CpError::Io(format!("netns {netns}: {e}")))?
            .map_err(|e| CpError::io(netns, "netlink socket", e))
    }

    /// Device `name`, or `None` when there is none.
    pub fn get(&mut self, name: &str) -> std::io::Result<Option<Link>> {
        Ok(self.find(name)?.map(|(_, link)| link))
    }

    /// Deletes device `name` (`RTM_DELLINK`); absent is fine.
    pub fn delete(&mut self, name: &str) -> std::io::Result<()> {
        let Some((index, _)) = self.find(name)? else {
            return Ok(());
        };
        let mut m = LinkMessage::default();
        m.header.index = index;
        match self.nl.request(RouteNetlinkMessage::DelLink(m), 0) {
            // Gone between the look-up and the delete.
            Err(e) if e.raw_os_error() == Some(ENODEV) => Ok(()),
            r => r,
        }
    }

    fn find(&mut self, name: &str) -> std::io::Result<Option<(u32, Link)>> {
        let msgs = loop {
            match self
                .nl
                .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
            {
                Ok(m) => break m,
                Err(crate::rtnl::DumpError::Interrupted) => continue,
                Err(crate::rtnl::DumpError::Io(e)) => return Err(e),
            }
        };
        for m in msgs {
            let RouteNetlinkMessage::NewLink(l) = m else {
                continue;
            };
            let named = l
                .attributes
                .iter()
                .any(|a| matches!(a, LinkAttribute::IfName(n) if n == name));
            if named {
                return Ok(Some((l.header.index, link_of(&l))));
            }
        }
        Ok(None)
    }
}

/// `ENODEV` (Linux).
const ENODEV: i32 = 19;

/// `IFLA_TUN_*` attributes (`<linux/if_link.h>`).
const IFLA_TUN_TYPE: u16 = 3;
const IFLA_TUN_VNET_HDR: u16 = 5;
const IFLA_TUN_PERSIST: u16 = 6;
const IFLA_TUN_MULTI_QUEUE: u16 = 7;
const IFLA_TUN_NUM_QUEUES: u16 = 8;
const IFLA_TUN_NUM_DISABLED_QUEUES: u16 = 9;

fn link_of(l: &LinkMessage) -> Link {
    let infos = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(i) => Some(i),
        _ => None,
    });
    let Some(infos) = infos else {
        return Link::Other(None);
    };
    let kind = infos.iter().find_map(|i| match i {
        LinkInfo::Kind(k) => Some(k.clone()),
        _ => None,
    });
    if kind != Some(InfoKind::Tun) {
        return Link::Other(kind.map(|k| k.to_string()));
    }
    let mut t = TapInfo::default();
    for i in infos {
        let LinkInfo::Data(InfoData::Tun(attrs)) = i else {
            continue;
        };
        for a in attrs {
            let InfoTun::Other(nla) = a else {
                continue;
            };
            let mut v = vec![0u8; nla.value_len()];
            nla.emit_value(&mut v);
            let byte = v.first().copied().unwrap_or(0);
            let word = v
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_ne_bytes);
            match nla.kind() {
                // IFF_TAP = 2.
                IFLA_TUN_TYPE => t.tap = byte == 2,
                IFLA_TUN_VNET_HDR => t.vnet_hdr = byte != 0,
                IFLA_TUN_PERSIST => t.persist = byte != 0,
                IFLA_TUN_MULTI_QUEUE => t.multi_queue = byte != 0,
                IFLA_TUN_NUM_QUEUES => t.queues = word,
                IFLA_TUN_NUM_DISABLED_QUEUES => t.disabled = word,
                _ => {}
            }
        }
    }
    if t.tap {
        Link::Tap(t)
    } else {
        Link::Other(Some("tun".into()))
    }
}
