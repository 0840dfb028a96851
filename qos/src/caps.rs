//! Hard per-tenant caps: requests per second and body bytes per second,
//! enforced with `governor`'s GCRA rate limiters.
//!
//! Fair sharing divides whatever the backend can do; a cap is a ceiling a
//! tenant never exceeds even when the backend is idle (a plan limit, or a
//! noisy tenant being contained). Each cap is one direct rate limiter whose
//! burst is one second's worth.
//!
//! * Requests: each admission takes one cell; when none is left the
//!   admission is refused at once with the limiter's wait hint.
//! * Bytes: paced body chunks take cells of 1 KiB (rounded up). A chunk
//!   that finds the bucket empty does not fail its stream, which is
//!   already under way: the stream sleeps until the limiter allows it, so
//!   the body flows at the cap. Meanwhile the tenant is marked "throttled
//!   until" that instant, and new admissions of the tenant are refused
//!   with the remaining time as their hint.
//!
//! The limiters read time through [`TokioClock`], tokio's clock, so tests
//! with paused time (`tokio::time::pause`) drive them deterministically.

use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{NotUntil, Quota, RateLimiter};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::{OverloadReason, Overloaded};

/// Bytes per byte-cap cell.
const CELL_BYTES: u64 = 1024;
/// Smallest retry hint given (a zero hint would invite a busy loop).
const MIN_HINT: Duration = Duration::from_millis(1);

/// A tenant's hard caps; `None` means uncapped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// Requests admitted per second, at most.
    pub requests_per_sec: Option<NonZeroU32>,
    /// Body bytes paced per second, at most (granularity 1 KiB).
    pub bytes_per_sec: Option<NonZeroU64>,
}

impl Caps {
    /// No caps.
    pub const NONE: Caps = Caps {
        requests_per_sec: None,
        bytes_per_sec: None,
    };

    /// True if neither cap is set.
    pub fn is_none(&self) -> bool {
        self.requests_per_sec.is_none() && self.bytes_per_sec.is_none()
    }
}

/// governor's view of tokio's clock (paused in tests, real otherwise).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TokioClock;

impl Clock for TokioClock {
    type Instant = std::time::Instant;

    fn now(&self) -> std::time::Instant {
        Instant::now().into_std()
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<std::time::Instant>>;

/// The live limiters of one tenant's caps.
pub(crate) struct Limits {
    caps: Caps,
    requests: Option<Limiter>,
    bytes: Option<(Limiter, NonZeroU32)>,
    throttled_until: Mutex<Option<Instant>>,
}

impl Limits {
    /// Fresh limiters (full buckets) for `caps`.
    pub fn new(caps: Caps) -> Limits {
        let requests = caps
            .requests_per_sec
            .map(|rps| RateLimiter::direct_with_clock(Quota::per_second(rps), TokioClock));
        let bytes = caps.bytes_per_sec.map(|bps| {
            let burst = kib_rate(bps);
            let limiter = RateLimiter::direct_with_clock(Quota::per_second(burst), TokioClock);
            (limiter, burst)
        });
        Limits {
            caps,
            requests,
            bytes,
            throttled_until: Mutex::new(None),
        }
    }

    /// The caps these limiters enforce.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Checks a new request: refused while the byte cap is throttling the
    /// tenant, or when no request cell is left.
    pub fn admit(&self) -> Result<(), Overloaded> {
        if let Some(wait) = self.throttled_for() {
            return Err(overloaded(OverloadReason::ByteRate, wait));
        }
        match &self.requests {
            Some(limiter) => limiter
                .check()
                .map_err(|nu| overloaded(OverloadReason::RequestRate, hint(&nu))),
            None => Ok(()),
        }
    }

    /// Takes up to `cells` byte cells (at most one burst at a time).
    /// Returns how many were taken, or how long to wait before trying
    /// again (and marks the tenant throttled until then).
    pub fn take_cells(&self, cells: u64) -> Result<u64, Duration> {
        let Some((limiter, burst)) = &self.bytes else {
            return Ok(cells);
        };
        if cells == 0 {
            return Ok(0);
        }
        let n = u32::try_from(cells)
            .ok()
            .and_then(NonZeroU32::new)
            .map_or(*burst, |c| c.min(*burst));
        match limiter.check_n(n) {
            Ok(Ok(())) => Ok(u64::from(n.get())),
            Ok(Err(nu)) => Err(self.throttle(hint(&nu))),
            // n never exceeds the burst; if governor disagrees, back off
            // a whole second rather than spin.
            Err(_) => Err(self.throttle(Duration::from_secs(1))),
        }
    }

    fn throttle(&self, wait: Duration) -> Duration {
        let until = Instant::now() + wait;
        let mut slot = self.throttled_until.lock();
        *slot = Some(slot.map_or(until, |t| t.max(until)));
        wait
    }

    fn throttled_for(&self) -> Option<Duration> {
        let until = (*self.throttled_until.lock())?;
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }
}

/// Byte-cap cells needed for `bytes` (1 KiB each, rounded up).
pub(crate) fn cells_for(bytes: u64) -> u64 {
    bytes.div_ceil(CELL_BYTES)
}

/// A bytes/s cap as KiB/s cells, rounded up, saturating at `u32::MAX`.
fn kib_rate(bps: NonZeroU64) -> NonZeroU32 {
    let kib = bps.get().div_ceil(CELL_BYTES);
    NonZeroU32::new(u32::try_from(kib).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN)
}

/// The limiter's wait hint, from now.
fn hint(nu: &NotUntil<std::time::Instant>) -> Duration {
    nu.wait_time_from(TokioClock.now()).max(MIN_HINT)
}

fn overloaded(reason: OverloadReason, retry_after: Duration) -> Overloaded {
    Overloaded {
        reason,
        retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_up_to_cells() {
        assert_eq!(cells_for(0), 0);
        assert_eq!(cells_for(1), 1);
        assert_eq!(cells_for(1024), 1);
        assert_eq!(cells_for(1025), 2);
        let one = NonZeroU64::MIN;
        assert_eq!(kib_rate(one).get(), 1);
        assert_eq!(kib_rate(NonZeroU64::MAX).get(), u32::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn request_cap_refuses_then_recovers() {
        let limits = Limits::new(Caps {
            requests_per_sec: NonZeroU32::new(2),
            bytes_per_sec: None,
        });
        assert!(limits.admit().is_ok());
        assert!(limits.admit().is_ok());
        let err = limits
            .admit()
            .expect_err("third request in the same instant");
        assert_eq!(err.reason, OverloadReason::RequestRate);
        assert!(err.retry_after > Duration::ZERO && err.retry_after <= Duration::from_secs(1));
        tokio::time::advance(err.retry_after).await;
        assert!(limits.admit().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn byte_cap_takes_at_most_a_burst_and_throttles() {
        let limits = Limits::new(Caps {
            requests_per_sec: None,
            bytes_per_sec: NonZeroU64::new(10 * 1024),
        });
        assert_eq!(limits.take_cells(25), Ok(10));
        let wait = limits.take_cells(15).expect_err("bucket empty");
        assert!(wait > Duration::ZERO);
        let err = limits.admit().expect_err("throttled");
        assert_eq!(err.reason, OverloadReason::ByteRate);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(limits.admit().is_ok());
        assert_eq!(limits.take_cells(15), Ok(10));
    }
}
