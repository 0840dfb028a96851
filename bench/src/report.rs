//! Per-operation counters and the printed summary.
//!
//! Workers each own an [`OpStats`] per operation and merge them at the end.
//! Throughput is computed over the measured window only (after warm-up), and
//! latencies are per request, from building the request to the last body
//! byte. MB/s is 10^6 bytes per second of object payload (not headers).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::error::ClientError;
use crate::histogram::Histogram;

/// Counters for one kind of operation.
#[derive(Debug, Clone, Default)]
pub struct OpStats {
    /// Latency of successful requests, microseconds.
    pub latency: Histogram,
    /// Payload bytes moved by successful requests.
    pub bytes: u64,
    /// Failed requests by label (`"503 SlowDown"`, `"timeout"`, ...).
    pub errors: BTreeMap<String, u64>,
}

impl OpStats {
    /// Records a success that moved `bytes` payload bytes.
    pub fn ok(&mut self, latency: Duration, bytes: u64) {
        self.latency.record(micros(latency));
        self.bytes += bytes;
    }

    /// Records a failure.
    pub fn err(&mut self, err: &ClientError) {
        self.err_label(err.label());
    }

    /// Records a failure under a label of the caller's choosing.
    pub fn err_label(&mut self, label: String) {
        *self.errors.entry(label).or_default() += 1;
    }

    /// Successful requests.
    pub fn ok_count(&self) -> u64 {
        self.latency.count()
    }

    /// Failed requests.
    pub fn err_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &OpStats) {
        self.latency.merge(&other.latency);
        self.bytes += other.bytes;
        for (label, n) in &other.errors {
            *self.errors.entry(label.clone()).or_default() += n;
        }
    }
}

/// Whole microseconds in `d`, saturating.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `n` per second over `elapsed`.
pub fn rate(n: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The header line matching [`summary_line`].
pub fn summary_header() -> String {
    format!(
        "{:<6} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "op", "ok", "ops/s", "MB/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"
    )
}

/// One line of figures for `name` over `elapsed`.
pub fn summary_line(name: &str, s: &OpStats, elapsed: Duration) -> String {
    let h = &s.latency;
    format!(
        "{:<6} {:>9} {:>10.1} {:>9.2} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7}",
        name,
        s.ok_count(),
        rate(s.ok_count(), elapsed),
        rate(s.bytes, elapsed) / 1e6,
        ms(h.quantile(0.50)),
        ms(h.quantile(0.90)),
        ms(h.quantile(0.99)),
        ms(h.max()),
        s.err_count()
    )
}

/// The summary table for several operations, then errors by label.
pub fn summary<'a>(
    rows: impl IntoIterator<Item = (&'a str, &'a OpStats)>,
    elapsed: Duration,
) -> String {
    let mut out = summary_header();
    let mut errors = String::new();
    for (name, s) in rows {
        out.push('\n');
        out.push_str(&summary_line(name, s, elapsed));
        for (label, n) in &s.errors {
            let _ = write!(errors, "\n  {name} {label}: {n}");
        }
    }
    if !errors.is_empty() {
        out.push_str("\nerrors by status:");
        out.push_str(&errors);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_lists_errors() {
        let mut s = OpStats::default();
        s.ok(Duration::from_millis(2), 4096);
        s.err_label("503 SlowDown".into());
        let text = summary([("get", &s)], Duration::from_secs(1));
        assert!(text.contains("get"));
        assert!(text.contains("get 503 SlowDown: 1"));
        assert_eq!(rate(10, Duration::ZERO), 0.0);
    }
}
