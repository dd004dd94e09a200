//! Per-VR namespaces and the TAP mirrors of VR interfaces inside them.
//!
//! A VR with `[router.control] netns = "NAME"` gets network namespace NAME
//! (adopted if it already exists, created like `ip netns add` otherwise),
//! and one TAP device per VR interface in it, with the interface's name,
//! MAC and MTU. The tenant's FRR/BIRD sees ordinary Ethernet interfaces;
//! what it sends out of one is what the data plane reads from that TAP's
//! queues.

use std::path::Path;

use vrhost_io::{netdev, netns, TapPort};

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
    } else {
        tracing::info!(netns = name, "adopted network namespace");
    }
    Ok(NetnsInfo { created })
}

/// Creates, inside namespace `netns`, a multi-queue TAP device named `name`
/// with MAC `mac` and MTU `mtu`, brings it up, and returns one port per
/// queue (`queues` ≥ 1): each data-plane worker takes one. The device
/// lives as long as the ports; dropping them all removes it.
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
    let made = netns::run_in(netns, || -> Result<Vec<TapPort>, vrhost_io::IoError> {
        let ports = TapPort::create_multi(name, queues)?;
        netdev::set_mac(name, mac)?;
        netdev::set_mtu(name, mtu)?;
        netdev::set_up(name)?;
        Ok(ports)
    });
    let ports = made
        .and_then(|r| r)
        .map_err(|e| CpError::Io(format!("netns {netns}: mirror {name}: {e}")))?;
    tracing::info!(netns, ifname = name, mtu, queues, "TAP mirror up");
    Ok(ports)
}
