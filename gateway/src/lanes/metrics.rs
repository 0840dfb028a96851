//! Per-tenant, per-operation request metrics and their Prometheus text
//! exposition (format 0.0.4), written by hand: a few counters, gauges and
//! fixed-bucket histograms do not justify a metrics crate.
//!
//! The lanes layer ([`crate::lanes`]) owns one [`Metrics`] and, for every
//! request, looks up (or creates) the [`OpSeries`] of its tenant and S3
//! operation once; everything after that is relaxed atomic adds, so the
//! hot path takes one read lock per request and no lock per body chunk.
//!
//! Cardinality is bounded by construction: tenants are tenant ids (or the
//! one shared anonymous lane, whatever key a client claims), operations
//! are a fixed set of `&'static str` names, and error codes are kept only
//! when they look like S3 codes (short, alphanumeric).

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use laneway_qos::{OverloadReason, TenantKey};

/// Upper bounds (seconds) of the latency and queue-wait histograms.
const BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Longest error code kept as a label value (longer ones become "Other").
const MAX_CODE_LEN: usize = 64;

/// A fixed-bucket histogram of durations.
#[derive(Default)]
pub struct Histogram {
    /// Non-cumulative counts per bucket of [`BUCKETS`], then +Inf.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Cumulative counts (one per bucket, then +Inf), and the sum in s.
    fn cumulative(&self) -> (Vec<u64>, f64) {
        let mut acc = 0u64;
        let counts = self
            .counts
            .iter()
            .map(|c| {
                acc = acc.saturating_add(c.load(Ordering::Relaxed));
                acc
            })
            .collect();
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        (counts, sum)
    }
}

/// The counters of one tenant and one S3 operation.
#[derive(Default)]
pub struct OpSeries {
    requests: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    cost_units: AtomicU64,
    queued: AtomicI64,
    rejected: [AtomicU64; 4],
    errors: Mutex<BTreeMap<String, u64>>,
    /// From arrival to the end (or drop) of the response body.
    pub latency: Histogram,
    /// Time spent waiting for admission (refused waits included).
    pub queue_wait: Histogram,
}

impl OpSeries {
    /// A request arrived.
    pub fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` request body bytes flowed in.
    pub fn add_bytes_in(&self, n: u64) {
        self.bytes_in.fetch_add(n, Ordering::Relaxed);
        self.cost_units.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` response body bytes flowed out.
    pub fn add_bytes_out(&self, n: u64) {
        self.bytes_out.fetch_add(n, Ordering::Relaxed);
        self.cost_units.fetch_add(n, Ordering::Relaxed);
    }

    /// A request was admitted at `units` base cost.
    pub fn admitted(&self, units: u64) {
        self.add_cost(units);
    }

    /// Cost units counted so far.
    pub fn cost(&self) -> u64 {
        self.cost_units.load(Ordering::Relaxed)
    }

    /// `units` of cost were served besides the base and the body bytes
    /// (bytes copied inside the store).
    pub fn add_cost(&self, units: u64) {
        self.cost_units.fetch_add(units, Ordering::Relaxed);
    }

    /// A request starts (`+1`) or stops (`-1`) waiting for admission.
    pub fn queue(&self, delta: i64) {
        self.queued.fetch_add(delta, Ordering::Relaxed);
    }

    /// A request was refused by the lanes.
    pub fn reject(&self, reason: OverloadReason) {
        if let Some(c) = self.rejected.get(reason_index(reason)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request ended with S3 error `code` (any status >= 400).
    pub fn error(&self, code: &str) {
        let code = if is_code(code) { code } else { "Other" };
        let mut errors = self.errors.lock();
        *errors.entry(code.to_string()).or_insert(0) += 1;
    }
}

/// Whether `code` is safe and bounded enough to be a label value.
fn is_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= MAX_CODE_LEN
        && code.bytes().all(|b| b.is_ascii_alphanumeric())
}

const REASONS: [(OverloadReason, &str); 4] = [
    (OverloadReason::QueueFull, "queue_full"),
    (OverloadReason::WaitTimeout, "wait_timeout"),
    (OverloadReason::RequestRate, "request_rate"),
    (OverloadReason::ByteRate, "byte_rate"),
];

fn reason_index(reason: OverloadReason) -> usize {
    REASONS
        .iter()
        .position(|(r, _)| *r == reason)
        .unwrap_or_default()
}

type SeriesKey = (TenantKey, &'static str);

/// Every [`OpSeries`] of the process, by tenant and operation.
#[derive(Default)]
pub struct Metrics {
    series: RwLock<HashMap<SeriesKey, Arc<OpSeries>>>,
}

impl Metrics {
    /// The series of `tenant` and `op`, created on first use.
    pub fn series(&self, tenant: &TenantKey, op: &'static str) -> Arc<OpSeries> {
        let key = (tenant.clone(), op);
        if let Some(s) = self.series.read().get(&key) {
            return Arc::clone(s);
        }
        Arc::clone(self.series.write().entry(key).or_default())
    }

    /// Appends every series in Prometheus text format to `out`, sorted by
    /// tenant and operation so the output is stable.
    pub fn render(&self, out: &mut String) {
        let mut all: Vec<(SeriesKey, Arc<OpSeries>)> = self
            .series
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        render_counters(out, &all);
        render_errors(out, &all);
        render_rejections(out, &all);
        render_histogram(out, &all, "laneway_request_duration_seconds", |s| {
            &s.latency
        });
        render_histogram(out, &all, "laneway_queue_wait_seconds", |s| &s.queue_wait);
    }
}

type Sample<'a> = &'a [(SeriesKey, Arc<OpSeries>)];

/// `# HELP` and `# TYPE` lines of one metric family.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value escaped for the text format.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(key: &SeriesKey) -> String {
    format!("tenant=\"{}\",op=\"{}\"", escape(key.0.as_str()), key.1)
}

fn render_counters(out: &mut String, all: Sample<'_>) {
    type Get = fn(&OpSeries) -> i64;
    let families: [(&str, &str, &str, Get); 5] = [
        (
            "laneway_requests_total",
            "counter",
            "S3 requests received (refused ones included).",
            |s| as_i64(s.requests.load(Ordering::Relaxed)),
        ),
        (
            "laneway_bytes_in_total",
            "counter",
            "Request body bytes received.",
            |s| as_i64(s.bytes_in.load(Ordering::Relaxed)),
        ),
        (
            "laneway_bytes_out_total",
            "counter",
            "Response body bytes sent.",
            |s| as_i64(s.bytes_out.load(Ordering::Relaxed)),
        ),
        (
            "laneway_cost_units_total",
            "counter",
            "Lane cost units served (base cost of admitted requests plus body bytes).",
            |s| as_i64(s.cost_units.load(Ordering::Relaxed)),
        ),
        (
            "laneway_queue_depth",
            "gauge",
            "Requests waiting for admission now.",
            |s| s.queued.load(Ordering::Relaxed).max(0),
        ),
    ];
    for (name, kind, help, get) in families {
        header(out, name, kind, help);
        for (key, s) in all {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(key), get(s));
        }
    }
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn render_errors(out: &mut String, all: Sample<'_>) {
    let name = "laneway_request_errors_total";
    header(
        out,
        name,
        "counter",
        "Requests answered with an error, by S3 error code.",
    );
    for (key, s) in all {
        for (code, n) in s.errors.lock().iter() {
            let _ = writeln!(
                out,
                "{name}{{{},code=\"{}\"}} {n}",
                labels(key),
                escape(code)
            );
        }
    }
}

fn render_rejections(out: &mut String, all: Sample<'_>) {
    let name = "laneway_rejections_total";
    header(
        out,
        name,
        "counter",
        "Requests refused by the lanes (503 SlowDown), by reason.",
    );
    for (key, s) in all {
        for (i, (_, reason)) in REASONS.iter().enumerate() {
            let n = s.rejected.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
            let _ = writeln!(out, "{name}{{{},reason=\"{reason}\"}} {n}", labels(key));
        }
    }
}

fn render_histogram(
    out: &mut String,
    all: Sample<'_>,
    name: &str,
    pick: fn(&OpSeries) -> &Histogram,
) {
    let help = if name.contains("queue") {
        "Time requests waited for admission."
    } else {
        "Time from request arrival to the end of the response body."
    };
    header(out, name, "histogram", help);
    for (key, s) in all {
        let (counts, sum) = pick(s).cumulative();
        let l = labels(key);
        for (le, n) in BUCKETS.iter().zip(&counts) {
            let _ = writeln!(out, "{name}_bucket{{{l},le=\"{le}\"}} {n}");
        }
        let total = counts.last().copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{{l},le=\"+Inf\"}} {total}");
        let _ = writeln!(out, "{name}_sum{{{l}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{l}}} {total}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_errors_and_histograms() {
        let m = Metrics::default();
        let s = m.series(&TenantKey::from("t-1"), "GetObject");
        s.request();
        s.request();
        s.add_bytes_out(10);
        s.admitted(4096);
        s.error("NoSuchKey");
        s.error("bad code \"x\"");
        s.reject(OverloadReason::WaitTimeout);
        s.latency.observe(Duration::from_millis(3));
        s.latency.observe(Duration::from_secs(100));
        let mut out = String::new();
        m.render(&mut out);
        let has = |line: &str| out.lines().any(|l| l == line);
        let l = "tenant=\"t-1\",op=\"GetObject\"";
        assert!(has(&format!("laneway_requests_total{{{l}}} 2")), "{out}");
        assert!(has(&format!("laneway_bytes_out_total{{{l}}} 10")));
        assert!(has(&format!("laneway_cost_units_total{{{l}}} 4106")));
        assert!(has(&format!(
            "laneway_request_errors_total{{{l},code=\"NoSuchKey\"}} 1"
        )));
        assert!(has(&format!(
            "laneway_request_errors_total{{{l},code=\"Other\"}} 1"
        )));
        assert!(has(&format!(
            "laneway_rejections_total{{{l},reason=\"wait_timeout\"}} 1"
        )));
        assert!(has(&format!(
            "laneway_request_duration_seconds_bucket{{{l},le=\"0.0025\"}} 0"
        )));
        assert!(has(&format!(
            "laneway_request_duration_seconds_bucket{{{l},le=\"0.005\"}} 1"
        )));
        assert!(has(&format!(
            "laneway_request_duration_seconds_bucket{{{l},le=\"30\"}} 1"
        )));
        assert!(has(&format!(
            "laneway_request_duration_seconds_bucket{{{l},le=\"+Inf\"}} 2"
        )));
        assert!(has(&format!(
            "laneway_request_duration_seconds_count{{{l}}} 2"
        )));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
