//! The control-plane side of a virtual router: where its routes and
//! addresses come from when a tenant runs their own routing software.
//!
//! | module | direction | what |
//! |---|---|---|
//! | [`ns`] | vrhost → namespace | create/adopt the VR's network namespace; one multi-queue TAP per VR interface with its name, MAC and MTU |
//! | [`addr`] | config → namespace | put the VR interface's configured addresses on its TAP |
//! | [`watcher`] | namespace → VR | rtnetlink subscription: addresses and main-table routes as [`CpEvent`]s, full resync on overrun |
//! | [`fpm`] | remote zebra → VR | FRR `dplane_fpm_nl` server: netlink routes over TCP as [`CpEvent`]s |
//!
//! Every producer speaks [`CpEvent`] over an [`queue::EventSender`]: a
//! bounded queue keeping the latest change per prefix. The consumer (the
//! data plane's control loop) owns the FIB. See `docs/control-plane.md`.
//!
//! ```text
//!   tenant FRR/BIRD/ip ──► VR netns (kernel) ──rtnetlink──► NsWatcher ─┐
//!   remote zebra ───────────────── TCP (FPM) ─────────────► fpm server ├─► EventSender ─► data plane
//!   vrhost config ──► set_addresses ──► VR netns TAPs                  │
//! ```

#![forbid(unsafe_code)]

pub mod addr;
pub mod event;
pub mod fpm;
pub mod nexthop;
pub mod ns;
pub mod queue;
mod rtnl;
pub mod watcher;

pub use addr::{add_address, del_address, reconcile_addresses, set_addresses};
pub use event::{Addr, CpEvent, CpState, Hop, IpPrefix, Op, RouteTarget};
pub use ns::{
    delete_mirror, ensure_netns, hold_tap, mirror, mirror_interface, Link, Mirror, NetnsInfo,
    TapInfo, TapProbe,
};
pub use queue::{channel, EventReceiver, EventSender};
pub use watcher::{NsWatcher, WatchOptions, WatchStats};

/// Errors of the control-plane side.
#[derive(Debug, thiserror::Error)]
pub enum CpError {
    /// A namespace or device operation failed (the message says which).
    #[error("{0}")]
    Io(String),
    /// An rtnetlink request or socket failed.
    #[error("netns {netns}: {what}: {source}")]
    Netlink {
        /// The namespace.
        netns: String,
        /// What we were doing.
        what: String,
        /// The kernel's answer.
        source: std::io::Error,
    },
    /// A value that does not parse or is out of range.
    #[error("{0}")]
    Parse(String),
}

impl CpError {
    pub(crate) fn io(context: &str, what: &str, e: std::io::Error) -> Self {
        CpError::Io(format!("{context}: {what}: {e}"))
    }
}

/// True for what a blocking read with a timeout returns when nothing came:
/// the caller checks its stop flag and reads again.
pub(crate) fn is_poll_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}
