//! The printed figures of a multi-tenant run: one table per phase.
//!
//! Per tenant active in the phase: ops/s, payload MB/s, p50/p99 latency,
//! errors, the cost the server charged it (`laneway_cost_units_total`,
//! in MB of cost units per second), its share of that cost and of the
//! requests among the phase's tenants, the share its weight entitles it
//! to, and `cost/weight`, the ratio of the two (1.00 is exactly fair for
//! tenants that all saturate).

use std::fmt::Write as _;
use std::time::Duration;

use super::run::Outcome;
use super::spec::TenantSpec;
use crate::report::rate;

/// The tables of every phase.
pub fn render(specs: &[TenantSpec], phases: &[(u64, u64)], duration: u64, o: &Outcome) -> String {
    let mut out = String::new();
    for (p, &(from, to)) in phases.iter().enumerate() {
        let active: Vec<usize> = (0..specs.len())
            .filter(|&i| specs[i].active_in(duration, from, to))
            .collect();
        let _ = writeln!(out, "phase {p}: {from}-{to} s");
        if active.is_empty() {
            let _ = writeln!(out, "  (no tenant active)");
            continue;
        }
        phase_table(
            &mut out,
            specs,
            &active,
            p,
            Duration::from_secs(to - from),
            o,
        );
    }
    out
}

fn phase_table(
    out: &mut String,
    specs: &[TenantSpec],
    active: &[usize],
    p: usize,
    secs: Duration,
    o: &Outcome,
) {
    let weights: u64 = active.iter().map(|&i| u64::from(specs[i].weight)).sum();
    let ops: u64 = active.iter().map(|&i| o.stats[i][p].ok_count()).sum();
    let cost_of = |i: usize| o.cost.get(i).and_then(|c| c[p]);
    let costs: Option<u64> = active.iter().map(|&i| cost_of(i)).sum();
    let _ = writeln!(
        out,
        "  {:<8} {:>6} {:>5} {:>10} {:>9} {:>9} {:>9} {:>7} {:>9} {:>7} {:>7} {:>8} {:>11}",
        "tenant",
        "weight",
        "conc",
        "ops/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "errors",
        "cost MB/s",
        "cost%",
        "ops%",
        "weight%",
        "cost/weight"
    );
    for &i in active {
        let s = &o.stats[i][p];
        let share = |n: u64, total: u64| 100.0 * n as f64 / total.max(1) as f64;
        let weight_pct = share(u64::from(specs[i].weight), weights);
        let (cost_rate, cost_pct) = match (cost_of(i), costs) {
            (Some(c), Some(t)) => (format!("{:.2}", rate(c, secs) / 1e6), Some(share(c, t))),
            _ => ("n/a".to_owned(), None),
        };
        let pct = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.1}"));
        let _ = writeln!(
            out,
            "  {:<8} {:>6} {:>5} {:>10.1} {:>9.2} {:>9.3} {:>9.3} {:>7} {:>9} {:>7} {:>7.1} {:>8.1} {:>11}",
            specs[i].name,
            specs[i].weight,
            specs[i].concurrency,
            rate(s.ok_count(), secs),
            rate(s.bytes, secs) / 1e6,
            s.latency.quantile(0.5) as f64 / 1e3,
            s.latency.quantile(0.99) as f64 / 1e3,
            s.err_count(),
            cost_rate,
            pct(cost_pct),
            share(s.ok_count(), ops),
            weight_pct,
            cost_pct.map_or("n/a".to_owned(), |c| format!("{:.2}", c / weight_pct)),
        );
        for (label, n) in &s.errors {
            let _ = writeln!(out, "    {} {label}: {n}", specs[i].name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::OpStats;

    #[test]
    fn shares_follow_counts_and_weights() {
        let specs = [
            TenantSpec::parse("a,weight=1").expect("a"),
            TenantSpec::parse("b,weight=3,start=10").expect("b"),
        ];
        let phases = [(0, 10), (10, 20)];
        let stats_with = |n: u64| {
            let mut s = OpStats::default();
            for _ in 0..n {
                s.ok(Duration::from_millis(1), 4096);
            }
            s
        };
        let o = Outcome {
            stats: vec![
                vec![stats_with(40), stats_with(10)],
                vec![stats_with(0), stats_with(30)],
            ],
            cost: vec![vec![Some(400), Some(100)], vec![Some(0), Some(300)]],
        };
        let text = render(&specs, &phases, 20, &o);
        assert!(text.contains("phase 0: 0-10 s"), "{text}");
        let phase1 = text.split("phase 1").nth(1).expect("phase 1");
        // a: 25% of cost and ops, weight share 25% -> ratio 1.00.
        let a = phase1
            .lines()
            .find(|l| l.trim_start().starts_with("a "))
            .expect("a row");
        assert!(a.contains("25.0") && a.trim_end().ends_with("1.00"), "{a}");
        let b = phase1
            .lines()
            .find(|l| l.trim_start().starts_with("b "))
            .expect("b row");
        assert!(b.contains("75.0") && b.trim_end().ends_with("1.00"), "{b}");
        assert!(!text.split("phase 1").next().expect("p0").contains("\n  b "));
    }
}
