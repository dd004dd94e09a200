//! The service manager's side of `vrhost run` (systemd `Type=notify`):
//! `READY=1` once the workers forward, `RELOADING=1`/`READY=1` around a
//! `SIGHUP` reload, `STOPPING=1` at the end, and `WATCHDOG=1` pings while
//! every worker's loop keeps turning.
//!
//! ```text
//!   NOTIFY_SOCKET=/run/systemd/notify (or @abstract)   WATCHDOG_USEC=5000000
//!   vrhost run ── datagram "READY=1\nSTATUS=…" ──▶ systemd
//!   main loop, every 100 ms: all workers' heartbeats moved? ── every usec/2 ──▶ "WATCHDOG=1"
//!   a stuck worker: no more pings ──▶ systemd kills and restarts the service
//! ```
//!
//! The protocol is a datagram of `KEY=VALUE` lines on the Unix socket named
//! by `NOTIFY_SOCKET` (sd_notify(3)); without that variable every call does
//! nothing.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

/// The notification socket from the environment, if any.
pub struct Notifier {
    socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
    watchdog: Option<Duration>,
    last_ping: Instant,
    last_beats: Vec<u64>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`.
    pub fn from_env() -> Notifier {
        let socket = std::env::var("NOTIFY_SOCKET").ok().and_then(|path| {
            let addr = socket_addr(&path)?;
            let sock = UnixDatagram::unbound().ok()?;
            Some((sock, addr))
        });
        let ours = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|p| p == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|&u| u > 0 && ours)
            .map(Duration::from_micros);
        Notifier {
            socket,
            watchdog,
            last_ping: Instant::now(),
            last_beats: Vec::new(),
        }
    }

    /// Sends `state` (`KEY=VALUE` lines); false when there is no socket or
    /// the send failed.
    pub fn send(&self, state: &str) -> bool {
        match &self.socket {
            Some((sock, addr)) => sock.send_to_addr(state.as_bytes(), addr).is_ok(),
            None => false,
        }
    }

    /// Pings the watchdog when half its interval has passed and every
    /// worker's heartbeat moved since the last ping; a worker that stopped
    /// turning stops the pings.
    pub fn watchdog(&mut self, heartbeats: &[u64]) {
        let Some(interval) = self.watchdog else {
            return;
        };
        if self.last_ping.elapsed() < interval / 2 {
            return;
        }
        let all_moved = self.last_beats.len() != heartbeats.len()
            || heartbeats
                .iter()
                .zip(&self.last_beats)
                .all(|(now, before)| now != before);
        if all_moved {
            self.send("WATCHDOG=1");
            self.last_ping = Instant::now();
            self.last_beats = heartbeats.to_vec();
        } else {
            tracing::error!("a worker's loop stopped turning: the watchdog is no longer fed");
        }
    }

    /// Feeds the watchdog from a thread of its own, every 100 ms, from the
    /// workers' `heartbeats` alone, until `stop`: a long reload or upkeep on
    /// the main thread does not starve it, a stuck worker does. `None` when
    /// no watchdog was asked for.
    pub fn watch(
        mut self,
        heartbeats: impl Fn() -> Vec<u64> + Send + 'static,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<std::thread::JoinHandle<()>> {
        self.watchdog?;
        std::thread::Builder::new()
            .name("vrhost-watchdog".into())
            .spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    self.watchdog(&heartbeats());
                }
            })
            .ok()
    }
}

/// The address in `NOTIFY_SOCKET`: a path, or `@name` for an abstract one.
fn socket_addr(path: &str) -> Option<std::os::unix::net::SocketAddr> {
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()
        }
        None => std::os::unix::net::SocketAddr::from_pathname(path).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_the_socket_and_the_watchdog_needs_every_worker() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).expect("bind");
        listener
            .set_read_timeout(Some(Duration::from_secs(1)))
            .expect("timeout");
        let mut n = Notifier {
            socket: Some((
                UnixDatagram::unbound().expect("socket"),
                socket_addr(path.to_str().expect("utf-8")).expect("addr"),
            )),
            watchdog: Some(Duration::from_millis(20)),
            last_ping: Instant::now() - Duration::from_secs(1),
            last_beats: Vec::new(),
        };
        assert!(n.send("READY=1"));
        let mut buf = [0u8; 64];
        let got = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..got], b"READY=1");
        n.watchdog(&[1, 1]);
        let got = listener.recv(&mut buf).expect("ping");
        assert_eq!(&buf[..got], b"WATCHDOG=1");
        std::thread::sleep(Duration::from_millis(15));
        // The second worker did not move: no ping.
        n.watchdog(&[5, 1]);
        listener
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        assert!(listener.recv(&mut buf).is_err());
        n.watchdog(&[6, 2]);
        assert!(listener.recv(&mut buf).is_ok());
    }
}
