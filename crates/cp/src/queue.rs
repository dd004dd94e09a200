//! The queue from a producer (namespace watcher, FPM server) to the thread
//! that applies its events: bounded, and keeping only the latest change per
//! prefix (per address for addresses).
//!
//! ```text
//!   producer ── send ──▶ [ key order | key → latest event ] ── recv ──▶ sync thread
//!                         Route: prefix     Addr: (ifname, addr, len)
//!                         Resync: replaces everything queued (it is the whole state)
//! ```
//!
//! A tenant whose control plane churns faster than the tables take it
//! therefore costs the router one queued entry per prefix it touches, not one
//! per message: the queue can never hold more entries than the producer's
//! own bounded table has prefixes. Past [`EventSender::capacity`] entries,
//! further new keys are dropped and counted ([`EventReceiver::dropped`]).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::{CpEvent, IpPrefix};

/// What identifies the change an event makes: a later event with the same
/// key supersedes an earlier one still queued.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Route(IpPrefix),
    Addr(String, IpAddr, u8),
    Resync,
}

fn key(ev: &CpEvent) -> Key {
    match ev {
        CpEvent::Route { prefix, .. } => Key::Route(*prefix),
        CpEvent::Addr {
            ifname, addr, len, ..
        } => Key::Addr(ifname.clone(), *addr, *len),
        CpEvent::Resync { .. } => Key::Resync,
    }
}

#[derive(Default)]
struct Queue {
    order: VecDeque<Key>,
    latest: HashMap<Key, CpEvent>,
    senders: usize,
    receiver: bool,
    dropped: u64,
    coalesced: u64,
}

struct Shared {
    q: Mutex<Queue>,
    ready: Condvar,
    capacity: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Every change to the queue is complete before the lock is let go.
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending side; cloning it adds a sender.
pub struct EventSender {
    shared: Arc<Shared>,
}

/// The receiving side.
pub struct EventReceiver {
    shared: Arc<Shared>,
}

/// The receiver is gone: stop producing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

/// Why [`EventReceiver::recv_timeout`] returned no event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvError {
    /// Nothing arrived in time.
    Timeout,
    /// Every sender is gone and the queue is empty.
    Disconnected,
}

/// A queue holding at most `capacity` keys.
pub fn channel(capacity: usize) -> (EventSender, EventReceiver) {
    let shared = Arc::new(Shared {
        q: Mutex::new(Queue {
            senders: 1,
            receiver: true,
            ..Queue::default()
        }),
        ready: Condvar::new(),
        capacity: capacity.max(1),
    });
    (
        EventSender {
            shared: shared.clone(),
        },
        EventReceiver { shared },
    )
}

impl EventSender {
    /// Queues `ev`, replacing a queued event of the same key (a `Resync`
    /// replaces everything queued). Fails once the receiver is gone.
    pub fn send(&self, ev: CpEvent) -> Result<(), Closed> {
        let mut q = self.shared.lock();
        if !q.receiver {
            return Err(Closed);
        }
        let k = key(&ev);
        if k == Key::Resync {
            q.coalesced += q.order.len() as u64;
            q.order.clear();
            q.latest.clear();
        }
        if let Some(slot) = q.latest.get_mut(&k) {
            *slot = ev;
            q.coalesced += 1;
        } else if q.order.len() >= self.shared.capacity {
            q.dropped += 1;
        } else {
            q.order.push_back(k.clone());
            q.latest.insert(k, ev);
        }
        drop(q);
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Most keys the queue holds.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

impl Clone for EventSender {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        EventSender {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for EventSender {
    fn drop(&mut self) {
        self.shared.lock().senders -= 1;
        self.shared.ready.notify_all();
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.receiver = false;
        q.order.clear();
        q.latest.clear();
    }
}

impl EventReceiver {
    fn pop(q: &mut Queue) -> Option<CpEvent> {
        while let Some(k) = q.order.pop_front() {
            if let Some(ev) = q.latest.remove(&k) {
                return Some(ev);
            }
        }
        None
    }

    /// The next event, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<CpEvent, RecvError> {
        let deadline = Instant::now() + timeout;
        let mut q = self.shared.lock();
        loop {
            if let Some(ev) = Self::pop(&mut q) {
                return Ok(ev);
            }
            if q.senders == 0 {
                return Err(RecvError::Disconnected);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RecvError::Timeout);
            }
            q = self
                .shared
                .ready
                .wait_timeout(q, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// The next event if one is queued.
    pub fn try_recv(&self) -> Option<CpEvent> {
        Self::pop(&mut self.shared.lock())
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.lock().dropped
    }

    /// Events replaced by a later one of the same key before being taken.
    pub fn coalesced(&self) -> u64 {
        self.shared.lock().coalesced
    }

    /// Keys queued now.
    pub fn len(&self) -> usize {
        self.shared.lock().order.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Op, RouteTarget};

    fn route(op: Op, p: &str, gw: &str) -> CpEvent {
        CpEvent::Route {
            op,
            prefix: p.parse().expect("prefix"),
            target: RouteTarget::Via {
                gw: gw.parse().expect("gw"),
                ifname: None,
            },
        }
    }

    #[test]
    fn the_latest_change_per_prefix_is_kept_in_first_seen_order() {
        let (tx, rx) = channel(16);
        tx.send(route(Op::Add, "10.1.0.0/16", "10.0.0.1")).unwrap();
        tx.send(route(Op::Add, "10.2.0.0/16", "10.0.0.1")).unwrap();
        for i in 2..100 {
            tx.send(route(Op::Add, "10.1.0.0/16", &format!("10.0.0.{i}")))
                .unwrap();
        }
        tx.send(route(Op::Del, "10.2.0.0/16", "10.0.0.1")).unwrap();
        assert_eq!(rx.len(), 2);
        assert_eq!(rx.coalesced(), 99);
        assert_eq!(
            rx.try_recv(),
            Some(route(Op::Add, "10.1.0.0/16", "10.0.0.99"))
        );
        assert_eq!(
            rx.try_recv(),
            Some(route(Op::Del, "10.2.0.0/16", "10.0.0.1"))
        );
        assert_eq!(rx.try_recv(), None);
    }

    #[test]
    fn a_resync_replaces_what_is_queued_and_later_events_follow_it() {
        let (tx, rx) = channel(16);
        tx.send(route(Op::Add, "10.1.0.0/16", "10.0.0.1")).unwrap();
        let resync = CpEvent::Resync {
            routes: vec![],
            addrs: vec![],
        };
        tx.send(resync.clone()).unwrap();
        tx.send(route(Op::Add, "10.3.0.0/16", "10.0.0.1")).unwrap();
        assert_eq!(rx.try_recv(), Some(resync));
        assert_eq!(
            rx.try_recv(),
            Some(route(Op::Add, "10.3.0.0/16", "10.0.0.1"))
        );
    }

    #[test]
    fn it_is_bounded_and_ends_with_either_side() {
        let (tx, rx) = channel(4);
        for i in 0..10 {
            tx.send(route(Op::Add, &format!("10.{i}.0.0/16"), "10.0.0.1"))
                .unwrap();
        }
        assert_eq!(rx.len(), 4);
        assert_eq!(rx.dropped(), 6);
        let tx2 = tx.clone();
        drop(tx);
        assert!(rx.recv_timeout(Duration::from_millis(1)).is_ok());
        drop(tx2);
        for _ in 0..3 {
            assert!(rx.recv_timeout(Duration::from_millis(1)).is_ok());
        }
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvError::Disconnected)
        );
        let (tx, rx) = channel(4);
        drop(rx);
        assert_eq!(
            tx.send(route(Op::Add, "10.1.0.0/16", "10.0.0.1")),
            Err(Closed)
        );
    }
}
