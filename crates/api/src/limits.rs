//! What one caller may ask of the API at once: requests per second per VR
//! token, one bulk load in flight per token, bulk bodies sized to the VR's
//! route limit, and a cap on requests and bulk bytes in flight over all
//! callers. Every refusal is an answer (429 or 413), never a queue that grows.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::Principal;
use crate::error::ApiError;

const fn nonzero(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => panic!("zero"),
    }
}

/// Requests a second one VR token may make, sustained.
pub const VR_RATE: NonZeroU32 = nonzero(200);
/// Requests one VR token may make in a burst.
pub const VR_BURST: NonZeroU32 = nonzero(400);
/// Requests being served at once, over every VR token; more answer 429.
/// The admin's requests do not count: a tenant cannot lock the operator out.
pub const MAX_IN_FLIGHT: usize = 256;
/// Requests one VR token may have being served at once; more answer 429.
pub const VR_IN_FLIGHT: usize = 8;
/// Largest bulk body anyone may send (the admin's limit).
pub const BULK_BODY_LIMIT: usize = 512 << 20;
/// Bulk body bytes being read at once, over every caller.
pub const BULK_BYTES_IN_FLIGHT: usize = 1 << 30;
/// JSON bytes allowed per route a VR may hold in a bulk body: an IPv6 route
/// with a gateway, the longest kind, is about 90.
const BULK_BYTES_PER_ROUTE: usize = 128;
/// Bulk body bytes allowed on top of the routes.
const BULK_SLACK: usize = 64 << 10;

/// The largest bulk body for a VR that may hold `max_routes` routes per
/// family: every route of both families once, which covers a full
/// replacement (deletes of what is there, adds of what is new).
pub fn bulk_body_limit(max_routes: u64) -> usize {
    let routes = usize::try_from(max_routes.saturating_mul(2)).unwrap_or(usize::MAX);
    routes
        .saturating_mul(BULK_BYTES_PER_ROUTE)
        .saturating_add(BULK_SLACK)
        .min(BULK_BODY_LIMIT)
}

/// The shared state behind the limits.
pub struct Limits {
    per_vr: DefaultKeyedRateLimiter<String>,
    requests: Arc<Semaphore>,
    /// Bulk body budget in KiB.
    bulk_bytes: Arc<Semaphore>,
    bulk_callers: Arc<Mutex<HashSet<String>>>,
    /// Requests in flight per VR token.
    per_vr_in_flight: InFlight,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_vr: RateLimiter::keyed(Quota::per_second(VR_RATE).allow_burst(VR_BURST)),
            requests: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            bulk_bytes: Arc::new(Semaphore::new(BULK_BYTES_IN_FLIGHT >> 10)),
            bulk_callers: Arc::default(),
            per_vr_in_flight: Arc::default(),
        }
    }
}

/// Requests in flight per VR token.
type InFlight = Arc<Mutex<HashMap<String, usize>>>;

/// A request's place among those in flight; dropping it frees the place.
pub struct Admitted {
    _permit: Option<OwnedSemaphorePermit>,
    /// The VR token's count to give back.
    vr: Option<(String, InFlight)>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some((vr, counts)) = self.vr.take() {
            let mut counts = counts.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = counts.get_mut(&vr) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    counts.remove(&vr);
                }
            }
        }
    }
}

/// The one bulk load of a caller in flight, and its bytes of the budget.
pub struct BulkSlot {
    caller: String,
    callers: Arc<Mutex<HashSet<String>>>,
    _bytes: OwnedSemaphorePermit,
}

impl Drop for BulkSlot {
    fn drop(&mut self) {
        let mut callers = self.callers.lock().unwrap_or_else(|e| e.into_inner());
        callers.remove(&self.caller);
    }
}

fn caller(p: &Principal) -> String {
    match p {
        Principal::Admin => "admin".into(),
        Principal::Vr(vr) => format!("vr {vr}"),
    }
}

impl Limits {
    /// Admits one request of `p`: refused when the server has
    /// [`MAX_IN_FLIGHT`] in flight, or when a VR token is over its rate.
    /// The admin is not rate-limited.
    pub fn admit(&self, p: &Principal) -> Result<Admitted, ApiError> {
        let Principal::Vr(vr) = p else {
            return Ok(Admitted {
                _permit: None,
                vr: None,
            });
        };
        if self.per_vr.check_key(vr).is_err() {
            return Err(ApiError::TooMany(format!(
                "over {VR_RATE} requests a second for this token; retry shortly"
            )));
        }
        let permit = self
            .requests
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::TooMany("the API is busy; retry shortly".into()))?;
        let mut counts = self
            .per_vr_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(vr.clone()).or_insert(0);
        if *n >= VR_IN_FLIGHT {
            return Err(ApiError::TooMany(format!(
                "this token has {VR_IN_FLIGHT} requests in flight; retry when one ends"
            )));
        }
        *n += 1;
        Ok(Admitted {
            _permit: Some(permit),
            vr: Some((vr.clone(), self.per_vr_in_flight.clone())),
        })
    }

    /// Reserves the one bulk load `p` may have in flight, with `bytes` of
    /// the bulk body budget.
    pub fn bulk(&self, p: &Principal, bytes: usize) -> Result<BulkSlot, ApiError> {
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        let permit = self
            .bulk_bytes
            .clone()
            .try_acquire_many_owned(kib.max(1))
            .map_err(|_| {
                ApiError::TooMany("too many bulk loads in flight; retry shortly".into())
            })?;
        let caller = caller(p);
        let mut callers = self.bulk_callers.lock().unwrap_or_else(|e| e.into_inner());
        if !callers.insert(caller.clone()) {
            return Err(ApiError::TooMany(
                "this token has a bulk load in flight; one at a time".into(),
            ));
        }
        Ok(BulkSlot {
            caller,
            callers: self.bulk_callers.clone(),
            _bytes: permit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_limit_scales_with_the_route_limit() {
        assert_eq!(bulk_body_limit(0), BULK_SLACK);
        assert_eq!(bulk_body_limit(1000), 2000 * 128 + BULK_SLACK);
        assert_eq!(bulk_body_limit(u64::MAX), BULK_BODY_LIMIT);
    }

    #[test]
    fn one_bulk_per_token_and_the_byte_budget_holds() {
        let l = Limits::default();
        let red = Principal::Vr("red".into());
        let slot = l.bulk(&red, 1 << 20).expect("first");
        assert!(matches!(l.bulk(&red, 1), Err(ApiError::TooMany(_))));
        let blue = l
            .bulk(&Principal::Vr("blue".into()), 1 << 20)
            .expect("another token");
        drop(slot);
        let _again = l.bulk(&red, 1 << 20).expect("after the first ended");
        drop(blue);
        assert!(matches!(
            l.bulk(&Principal::Admin, BULK_BYTES_IN_FLIGHT),
            Err(ApiError::TooMany(_))
        ));
    }

    #[test]
    fn vr_tokens_are_rate_limited_and_the_admin_is_not() {
        let l = Limits::default();
        let red = Principal::Vr("red".into());
        let admitted = (0..VR_BURST.get() * 2)
            .filter(|_| l.admit(&red).is_ok())
            .count();
        assert!(
            admitted >= VR_BURST.get() as usize && admitted < VR_BURST.get() as usize + 50,
            "{admitted}"
        );
        assert!(l.admit(&Principal::Vr("blue".into())).is_ok());
        assert!((0..1000).all(|_| l.admit(&Principal::Admin).is_ok()));
    }

    #[test]
    fn a_token_holds_few_slots_and_never_the_admins() {
        let l = Limits::default();
        let red = Principal::Vr("red".into());
        let held: Vec<Admitted> = (0..VR_IN_FLIGHT)
            .map(|_| l.admit(&red).expect("within the cap"))
            .collect();
        assert!(matches!(l.admit(&red), Err(ApiError::TooMany(_))));
        assert!(l.admit(&Principal::Vr("blue".into())).is_ok());
        // Even with every shared slot taken, the admin gets in.
        let others: Vec<Admitted> = (0..MAX_IN_FLIGHT)
            .filter_map(|i| l.admit(&Principal::Vr(format!("t{i}"))).ok())
            .collect();
        assert!(l.admit(&Principal::Admin).is_ok());
        drop(held);
        drop(others);
        assert!(l.admit(&red).is_ok(), "slots come back");
    }
}
