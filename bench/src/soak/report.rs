//! The soak's printed figures and its verdicts.
//!
//! Figures: per phase, per tenant ops/s, MB/s, p50/p99 and answers by
//! class, with the server's CPU per request; per operation over the run;
//! the misbehaving clients' outcomes; an RSS timeline; the lanes' gauges;
//! the read-back. Verdicts: one PASS/FAIL line per check; the run fails if
//! any check fails.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::monitor::{RssVerdict, Sample, nearest};
use super::outcome::Cell;
use super::plan::{OVERLOAD, PHASES, Plan};
use super::rogue::RogueReport;
use super::verify::Verified;
use crate::admin::LaneGauges;
use crate::report::rate;

/// Everything a soak run gathered.
pub struct Outcome {
    /// Tenants: name, weight, base workers.
    pub tenants: Vec<(String, u32, u64)>,
    /// `[tenant][phase]`.
    pub cells: Vec<Vec<Cell>>,
    /// Per operation over the run.
    pub ops: BTreeMap<&'static str, Cell>,
    /// Misbehaving clients.
    pub rogues: RogueReport,
    /// Server RSS and CPU once a second.
    pub samples: Vec<Sample>,
    /// Lanes' gauges after the load and the settle, and seconds waited.
    pub settled: Option<(LaneGauges, f64)>,
    /// Lanes' gauges after the read-back.
    pub after_verify: Option<LaneGauges>,
    /// The read-back.
    pub verified: Verified,
    /// Whether the server was still running at the end.
    pub alive: bool,
    /// Bytes in the data directory at the end (0 if unknown).
    pub data_bytes: u64,
}

/// One check: name, verdict (`None`: not measured), detail.
pub type Check = (&'static str, Option<bool>, String);

fn ms(us: u64) -> f64 {
    us as f64 / 1e3
}

/// The figures, as printed.
pub fn figures(plan: &Plan, o: &Outcome) -> String {
    let mut out = String::new();
    phases(&mut out, plan, o);
    per_op(&mut out, o);
    rogues(&mut out, o);
    rss(&mut out, plan, o);
    let _ = writeln!(out, "lanes after load: {}", gauges(o.settled.map(|g| g.0)));
    if let Some((_, waited)) = o.settled {
        let _ = writeln!(out, "  (idle after {waited:.1} s of settling)");
    }
    let _ = writeln!(out, "lanes after read-back: {}", gauges(o.after_verify));
    let v = &o.verified;
    let _ = writeln!(
        out,
        "read-back: {} keys in {:.1} s: {} objects byte-exact, {} deleted -> 404, {} frozen (write of unknown outcome) hold a version they may hold, {} tag sets match; {} retries after 503/timeout; {} failures; {} objects under rogue/nope/",
        v.keys,
        v.elapsed.as_secs_f64(),
        v.objects,
        v.absent,
        v.frozen,
        v.tags,
        v.retries,
        v.failures,
        v.nope_objects
    );
    examples(&mut out, "read-back failures", &v.examples);
    if o.data_bytes > 0 {
        let _ = writeln!(
            out,
            "data directory at the end: {:.1} MiB",
            o.data_bytes as f64 / 1048576.0
        );
    }
    out
}

fn gauges(g: Option<LaneGauges>) -> String {
    g.map_or("unread".to_owned(), |g| {
        format!(
            "in-flight units {}, lane queue {}, admission queue {}",
            g.in_flight_units, g.lane_queued, g.admission_queued
        )
    })
}

fn examples(out: &mut String, title: &str, list: &[String]) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(out, "  first {title}:");
    for e in list {
        let _ = writeln!(out, "    {e}");
    }
}

fn cell_row(out: &mut String, label: &str, extra: &str, c: &Cell, secs: f64) {
    let d = std::time::Duration::from_secs_f64(secs.max(1e-9));
    let _ = writeln!(
        out,
        "  {label:<10} {extra:>9} {:>9} {:>8.1} {:>7.2} {:>8.2} {:>8.2} {:>7} {:>7} {:>6}",
        c.stats.ok_count(),
        rate(c.stats.ok_count(), d),
        rate(c.stats.bytes, d) / 1e6,
        ms(c.stats.latency.quantile(0.5)),
        ms(c.stats.latency.quantile(0.99)),
        c.busy,
        c.timeouts,
        c.failures
    );
}

fn header(out: &mut String, first: &str, second: &str) {
    let _ = writeln!(
        out,
        "  {first:<10} {second:>9} {:>9} {:>8} {:>7} {:>8} {:>8} {:>7} {:>7} {:>6}",
        "ok", "ops/s", "MB/s", "p50 ms", "p99 ms", "503", "timeout", "FAIL"
    );
}

fn phases(out: &mut String, plan: &Plan, o: &Outcome) {
    for (p, name) in PHASES.iter().enumerate() {
        let secs = plan.phase_len(p).as_secs_f64();
        if secs == 0.0 {
            continue;
        }
        let (from, to) = (plan.cuts[p], plan.cuts[p + 1]);
        let _ = writeln!(out, "phase {p} ({name}): {from}-{to} s");
        header(out, "tenant", "wt/workers");
        let mut all = Cell::default();
        for (i, (tenant, weight, workers)) in o.tenants.iter().enumerate() {
            let workers = if p == OVERLOAD { workers * 2 } else { *workers };
            let c = &o.cells[i][p];
            cell_row(out, tenant, &format!("{weight}/{workers}"), c, secs);
            all.merge(c);
        }
        cell_row(out, "all", "", &all, secs);
        let _ = writeln!(
            out,
            "  server CPU: {}",
            cpu(&o.samples, from, to, all.total())
        );
    }
}

fn cpu(samples: &[Sample], from: u64, to: u64, requests: u64) -> String {
    let (Some(a), Some(b)) = (nearest(samples, from as f64), nearest(samples, to as f64)) else {
        return "n/a (no server pid)".to_owned();
    };
    let secs = (b.cpu_secs - a.cpu_secs).max(0.0);
    let wall = (b.at - a.at).max(1e-9);
    format!(
        "{secs:.1} s ({:.2} cores), {:.3} ms per polite request",
        secs / wall,
        secs * 1e3 / requests.max(1) as f64
    )
}

fn per_op(out: &mut String, o: &Outcome) {
    let _ = writeln!(out, "per operation, whole run:");
    header(out, "op", "");
    let secs = o.samples.last().map_or(1.0, |s| s.at.max(1.0));
    let mut all = Cell::default();
    for (name, c) in &o.ops {
        cell_row(out, name, "", c, secs);
        all.merge(c);
    }
    examples(out, "polite failures", &all.examples);
}

fn rogues(out: &mut String, o: &Outcome) {
    let _ = writeln!(out, "misbehaving clients:");
    for (kind, t) in &o.rogues {
        let outcomes: Vec<String> = t.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            out,
            "  {kind}: {} sessions, {:.1} MiB read, faults {}; {}",
            t.sessions,
            t.bytes as f64 / 1048576.0,
            t.failures,
            outcomes.join(", ")
        );
        examples(out, "faults", &t.examples);
    }
}

fn rss(out: &mut String, plan: &Plan, o: &Outcome) {
    let Some(v) = RssVerdict::of(&o.samples, plan.baseline_secs()) else {
        let _ = writeln!(out, "server RSS: not sampled (no server pid)");
        return;
    };
    let mib = |s: &Sample| s.rss_kib as f64 / 1024.0;
    let _ = writeln!(
        out,
        "server RSS: {:.1} MiB at {:.0} s (baseline), peak {:.1} MiB at {:.0} s, last {:.1} MiB at {:.0} s; limit {:.1} MiB",
        mib(&v.base),
        v.base.at,
        mib(&v.peak),
        v.peak.at,
        mib(&v.last),
        v.last.at,
        mib(&v.base) * 2.0
    );
    let step = (plan.total() / 20).max(1);
    let line: Vec<String> = (0..=20)
        .filter_map(|k| nearest(&o.samples, (k * step) as f64))
        .map(|s| format!("{:.0}s:{:.0}", s.at, mib(&s)))
        .collect();
    let _ = writeln!(out, "  timeline (MiB): {}", line.join(" "));
}

/// The verdicts.
pub fn checks(plan: &Plan, o: &Outcome) -> Vec<Check> {
    let polite: Cell = o.ops.values().fold(Cell::default(), |mut a, c| {
        a.merge(c);
        a
    });
    let rogue_faults: u64 = o.rogues.values().map(|t| t.failures).sum();
    let rss = RssVerdict::of(&o.samples, plan.baseline_secs());
    let v = &o.verified;
    vec![
        (
            "lanes hold 0 units and queue 0 after the load",
            Some(o.settled.is_some_and(|g| g.0.idle()) && o.after_verify.is_some_and(|g| g.idle())),
            format!(
                "after load: {}; after read-back: {}",
                gauges(o.settled.map(|g| g.0)),
                gauges(o.after_verify)
            ),
        ),
        (
            "server RSS peak (after baseline) and last within 2x of baseline",
            rss.map(|r| r.pass()),
            rss.map_or("no server pid".to_owned(), |r| {
                format!(
                    "baseline {} KiB, peak {} KiB, last {} KiB",
                    r.base.rss_kib, r.peak.rss_kib, r.last.rss_kib
                )
            }),
        ),
        (
            "polite requests failed only with 503 or timeout",
            Some(polite.failures == 0 && polite.total() > 0),
            format!(
                "{} requests, {} ok, {} 503, {} timeouts, {} failures",
                polite.total(),
                polite.stats.ok_count(),
                polite.busy,
                polite.timeouts,
                polite.failures
            ),
        ),
        (
            "every acknowledged object reads back (deleted ones 404)",
            Some(v.failures == 0 && v.keys > 0),
            format!("{} keys, {} failures", v.keys, v.failures),
        ),
        (
            "misbehaving clients: nothing forged accepted, no 5xx but 503",
            Some(rogue_faults == 0),
            format!("{rogue_faults} faults"),
        ),
        ("server still running", Some(o.alive), String::new()),
    ]
}

/// The verdict lines; returns them and whether every measured check passed.
pub fn verdicts(checks: &[Check]) -> (String, bool) {
    let mut out = String::new();
    let mut pass = true;
    for (name, verdict, detail) in checks {
        let word = match verdict {
            Some(true) => "PASS",
            Some(false) => {
                pass = false;
                "FAIL"
            }
            None => "SKIP",
        };
        let _ = writeln!(out, "{word} {name} ({detail})");
    }
    let _ = writeln!(out, "soak: {}", if pass { "PASS" } else { "FAIL" });
    (out, pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_failed_check_fails_the_run() {
        let ok: Vec<Check> = vec![("a", Some(true), String::new()), ("b", None, String::new())];
        let (text, pass) = verdicts(&ok);
        assert!(pass && text.contains("SKIP b") && text.ends_with("soak: PASS\n"));
        let bad: Vec<Check> = vec![
            ("a", Some(true), String::new()),
            ("c", Some(false), "x".into()),
        ];
        let (text, pass) = verdicts(&bad);
        assert!(!pass && text.contains("FAIL c (x)"));
    }
}
