//! [`Overloaded`]: the one refusal the async layer returns.
//!
//! Every way a request can be turned away (lane full, waited too long, over
//! a hard cap) is the same answer for the client: S3 `503 SlowDown` with a
//! `Retry-After`. The reason is kept for metrics and logs only. A paced
//! body stream reports it through the body's own error type (`E:
//! From<Overloaded>`); for bodies whose error is `std::io::Error`,
//! `Overloaded` converts into one of kind `Other` that carries it, so the
//! gateway can find it again with `get_ref()` and `downcast_ref`.

use std::fmt;
use std::time::Duration;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OverloadReason {
    /// The tenant's lane already held `max_queue_per_tenant` requests.
    QueueFull,
    /// The request waited `max_wait` (or a chunk `stream_max_wait`).
    WaitTimeout,
    /// The tenant's requests/s cap.
    RequestRate,
    /// The tenant's bytes/s cap.
    ByteRate,
}

impl fmt::Display for OverloadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OverloadReason::QueueFull => "lane full",
            OverloadReason::WaitTimeout => "wait timed out",
            OverloadReason::RequestRate => "requests/s cap",
            OverloadReason::ByteRate => "bytes/s cap",
        })
    }
}

/// A refused request: answer 503 SlowDown with `Retry-After: retry_after`
/// (rounded up to whole seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("overloaded ({reason}); retry after {retry_after:?}")]
pub struct Overloaded {
    /// Why.
    pub reason: OverloadReason,
    /// When the client may usefully retry.
    pub retry_after: Duration,
}

impl Overloaded {
    /// `retry_after` in whole seconds, rounded up, at least 1: the value
    /// of an HTTP `Retry-After` header.
    pub fn retry_after_secs(&self) -> u64 {
        let secs = self.retry_after.as_secs();
        let frac = u64::from(self.retry_after.subsec_nanos() > 0);
        (secs + frac).max(1)
    }
}

impl From<Overloaded> for std::io::Error {
    fn from(e: Overloaded) -> std::io::Error {
        std::io::Error::other(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_header_rounds_up() {
        let o = |ms| Overloaded {
            reason: OverloadReason::QueueFull,
            retry_after: Duration::from_millis(ms),
        };
        assert_eq!(o(0).retry_after_secs(), 1);
        assert_eq!(o(1).retry_after_secs(), 1);
        assert_eq!(o(1000).retry_after_secs(), 1);
        assert_eq!(o(1001).retry_after_secs(), 2);
    }

    #[test]
    fn converts_to_io_error() {
        let e: std::io::Error = Overloaded {
            reason: OverloadReason::ByteRate,
            retry_after: Duration::from_secs(2),
        }
        .into();
        assert_eq!(e.kind(), std::io::ErrorKind::Other);
        assert!(e.to_string().contains("bytes/s cap"));
    }
}
