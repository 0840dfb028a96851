//! Classifying the answers polite tenants get, and counting them.
//!
//! Under overload a well-behaved client may be told to slow down (503
//! `SlowDown` or `ServiceUnavailable`) or give up waiting (the client's own
//! timeout); everything else a polite request can meet (a 500, a 4xx for
//! a valid request, a broken connection, a wrong body, a listing that
//! disagrees with the ledger) is a failure, and the first few are kept
//! verbatim for the report.

use std::time::Duration;

use crate::error::ClientError;
use crate::report::OpStats;

/// How many failure examples a [`Cell`] keeps.
pub const EXAMPLES: usize = 8;

/// What an answer means for the soak's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Told to back off: 503 SlowDown / ServiceUnavailable.
    Busy,
    /// The client's timeout ran out.
    Timeout,
    /// Anything else: a failure.
    Fail,
}

/// The class of a failed request.
pub fn classify(err: &ClientError) -> Class {
    match err {
        ClientError::S3 {
            status: 503, code, ..
        } if matches!(code.as_str(), "SlowDown" | "ServiceUnavailable" | "") => Class::Busy,
        ClientError::Timeout(_) => Class::Timeout,
        _ => Class::Fail,
    }
}

/// Whether the server may or may not have applied a write that failed
/// this way (it answered nothing we could read).
pub fn ambiguous(err: &ClientError) -> bool {
    matches!(err, ClientError::Timeout(_) | ClientError::Transport(_))
}

/// Counters of one tenant in one phase (or one operation overall).
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// Successes (latency, payload bytes) and errors by label.
    pub stats: OpStats,
    /// 503 answers.
    pub busy: u64,
    /// Client timeouts.
    pub timeouts: u64,
    /// Failures.
    pub failures: u64,
    /// The first failures, described.
    pub examples: Vec<String>,
}

impl Cell {
    /// Records one request's result; `what` names it in examples.
    pub fn record(&mut self, what: &str, latency: Duration, res: &Result<u64, ClientError>) {
        match res {
            Ok(bytes) => self.stats.ok(latency, *bytes),
            Err(e) => {
                self.stats.err(e);
                match classify(e) {
                    Class::Busy => self.busy += 1,
                    Class::Timeout => self.timeouts += 1,
                    Class::Fail => {
                        self.failures += 1;
                        if self.examples.len() < EXAMPLES {
                            self.examples.push(format!("{what}: {e}"));
                        }
                    }
                }
            }
        }
    }

    /// Adds `other`'s counts and examples (up to the cap).
    pub fn merge(&mut self, other: &Cell) {
        self.stats.merge(&other.stats);
        self.busy += other.busy;
        self.timeouts += other.timeouts;
        self.failures += other.failures;
        let room = EXAMPLES.saturating_sub(self.examples.len());
        self.examples
            .extend(other.examples.iter().take(room).cloned());
    }

    /// Requests recorded.
    pub fn total(&self) -> u64 {
        self.stats.ok_count() + self.stats.err_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(status: u16, code: &str) -> ClientError {
        ClientError::S3 {
            status,
            code: code.into(),
            message: String::new(),
        }
    }

    #[test]
    fn only_503_and_timeouts_are_allowed() {
        assert_eq!(classify(&s3(503, "SlowDown")), Class::Busy);
        assert_eq!(classify(&s3(503, "ServiceUnavailable")), Class::Busy);
        assert_eq!(classify(&s3(503, "InternalError")), Class::Fail);
        assert_eq!(classify(&s3(500, "InternalError")), Class::Fail);
        assert_eq!(classify(&s3(403, "AccessDenied")), Class::Fail);
        let t = ClientError::Timeout(Duration::from_secs(1));
        assert_eq!(classify(&t), Class::Timeout);
        assert!(ambiguous(&t) && !ambiguous(&s3(503, "SlowDown")));
        assert_eq!(
            classify(&ClientError::Transport("reset".into())),
            Class::Fail
        );
    }

    #[test]
    fn cells_count_and_keep_examples() {
        let mut c = Cell::default();
        c.record("get k", Duration::from_millis(1), &Ok(10));
        c.record("get k", Duration::from_millis(1), &Err(s3(503, "SlowDown")));
        for _ in 0..20 {
            c.record("put k", Duration::ZERO, &Err(s3(500, "InternalError")));
        }
        assert_eq!((c.busy, c.failures, c.total()), (1, 20, 22));
        assert_eq!(c.examples.len(), EXAMPLES);
        let mut d = Cell::default();
        d.merge(&c);
        assert_eq!(d.failures, 20);
        assert!(d.examples[0].starts_with("put k: HTTP 500"));
    }
}
