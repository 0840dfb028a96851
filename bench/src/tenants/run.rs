//! Driving several tenants at once and collecting per-phase figures.
//!
//! Each tenant gets `concurrency` workers using its own key: a closed
//! loop, or with `rate` an open loop whose workers take the next slot of
//! the tenant's schedule (request k is due at k/rate seconds) and sleep
//! until it is due. An open-loop request's latency runs from its due time,
//! so a request that starts late because every worker was busy counts its
//! lateness too (but not the timer's: tokio's sleeps end on a millisecond
//! tick, so a request whose slot was still ahead counts from when its
//! worker woke). Workers of a tenant that starts at 0 begin at once
//! (during the warm-up); the others sleep until their start second. A
//! worker stops issuing at its tenant's stop second. A request is counted
//! in the phase in which it *completes*, and only if it completes inside
//! its tenant's window, so per-phase rates are "what was served in that
//! phase". Alongside, a
//! scraper reads the gateway's per-tenant cost counters at every phase
//! boundary, which gives the cost each tenant was served per phase.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::spec::TenantSpec;
use crate::admin::AdminClient;
use crate::client::S3Client;
use crate::report::OpStats;
use crate::workload::{self, Workload};

/// One tenant ready to run: its spec, id, client and workload.
pub struct Lane {
    /// What it does.
    pub spec: TenantSpec,
    /// Tenant id on the server (metrics label).
    pub id: String,
    /// Clients signing with the tenant's key, one per endpoint; worker i
    /// uses client i mod n.
    pub clients: Vec<S3Client>,
    /// Bucket, keys, size and mix.
    pub work: Workload,
    /// Open loop: slots of the schedule taken so far.
    pub issued: AtomicU64,
}

impl Lane {
    /// When the next request should start: at once for a closed loop;
    /// for an open loop, the due time of the next free slot counted from
    /// `origin`.
    fn next_due(&self, origin: Instant) -> Instant {
        match self.spec.rate {
            None => Instant::now(),
            Some(rate) => due_time(origin, self.issued.fetch_add(1, Ordering::Relaxed), rate),
        }
    }
}

/// Timing of the measured run.
#[derive(Debug, Clone)]
pub struct Clock {
    /// Measured seconds.
    pub duration: u64,
    /// Unmeasured seconds before.
    pub warmup: Duration,
    /// Phase windows in seconds from the start of measurement.
    pub phases: Vec<(u64, u64)>,
}

/// Figures of one run: `[tenant][phase]`.
pub struct Outcome {
    /// Successful and failed requests completed in each phase.
    pub stats: Vec<Vec<OpStats>>,
    /// Cost units the server charged each tenant in each phase, if the
    /// metrics could be read at both ends of the phase.
    pub cost: Vec<Vec<Option<u64>>>,
}

/// Runs every lane and returns the figures.
pub async fn run(lanes: Vec<Lane>, clock: &Clock, admin: &AdminClient) -> Outcome {
    let t0 = Instant::now() + clock.warmup;
    let clock = Arc::new(clock.clone());
    let ids: Vec<String> = lanes.iter().map(|l| l.id.clone()).collect();
    let mut tasks = Vec::new();
    for (i, lane) in lanes.into_iter().enumerate() {
        let lane = Arc::new(lane);
        let payload = workload::payload_for(&lane.work);
        for w in 0..lane.spec.concurrency {
            let (lane, clock, payload) = (lane.clone(), clock.clone(), payload.clone());
            let id = (i as u64) << 32 | w as u64;
            tasks.push((i, tokio::spawn(worker(lane, clock, payload, t0, id))));
        }
    }
    let scrapes = tokio::spawn(scrape(admin.clone(), clock.clone(), t0));
    let mut stats = vec![vec![OpStats::default(); clock.phases.len()]; ids.len()];
    for (i, task) in tasks {
        let Ok(per_phase) = task.await else { continue };
        for (p, s) in per_phase.iter().enumerate() {
            stats[i][p].merge(s);
        }
    }
    let snaps = scrapes.await.unwrap_or_default();
    let mut outcome = Outcome {
        stats,
        cost: Vec::new(),
    };
    outcome.cost_for(&ids, &snaps);
    outcome
}

impl Outcome {
    /// Cost per phase of each of `ids` from counter snapshots taken at
    /// every phase boundary (`snaps.len() == phases + 1`).
    pub fn cost_for(&mut self, ids: &[String], snaps: &[Option<HashMap<String, u64>>]) {
        self.cost = ids
            .iter()
            .map(|id| {
                snaps
                    .windows(2)
                    .map(|w| {
                        let (a, b) = (w[0].as_ref()?, w[1].as_ref()?);
                        let v = |m: &HashMap<String, u64>| m.get(id).copied().unwrap_or(0);
                        Some(v(b).saturating_sub(v(a)))
                    })
                    .collect()
            })
            .collect();
    }
}

/// Reads the cost counters at `t0` plus every phase boundary.
async fn scrape(
    admin: AdminClient,
    clock: Arc<Clock>,
    t0: Instant,
) -> Vec<Option<HashMap<String, u64>>> {
    let mut cuts: Vec<u64> = clock.phases.iter().map(|p| p.0).collect();
    cuts.extend(clock.phases.last().map(|p| p.1));
    let mut out = Vec::with_capacity(cuts.len());
    for cut in cuts {
        tokio::time::sleep_until((t0 + Duration::from_secs(cut)).into()).await;
        out.push(admin.cost_units().await.ok());
    }
    out
}

/// When slot `k` of a schedule of `rate` requests/s from `origin` is due.
fn due_time(origin: Instant, k: u64, rate: u64) -> Instant {
    origin + Duration::from_secs_f64(k as f64 / rate.max(1) as f64)
}

/// Waits until `due` if it is still ahead; returns when the request
/// counts as started: `due` if it had already passed (the lateness is the
/// server's doing), else the moment the sleep ended.
async fn start_at(due: Instant) -> Instant {
    if due <= Instant::now() {
        return due;
    }
    tokio::time::sleep_until(due.into()).await;
    Instant::now()
}

/// The phase a completion `at` seconds into the run falls in.
fn phase_of(phases: &[(u64, u64)], at: f64) -> Option<usize> {
    phases
        .iter()
        .position(|&(from, to)| (from as f64) <= at && at < to as f64)
}

async fn worker(
    lane: Arc<Lane>,
    clock: Arc<Clock>,
    payload: Bytes,
    t0: Instant,
    id: u64,
) -> Vec<OpStats> {
    let mut stats = vec![OpStats::default(); clock.phases.len()];
    let (start, stop) = lane.spec.window(clock.duration);
    if start > 0 {
        tokio::time::sleep_until((t0 + Duration::from_secs(start)).into()).await;
    }
    let end = t0 + Duration::from_secs(stop);
    let origin = if start > 0 {
        t0 + Duration::from_secs(start)
    } else {
        t0 - clock.warmup
    };
    let mut rng = StdRng::seed_from_u64(lane.work.seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let work = &lane.work;
    loop {
        let due = lane.next_due(origin);
        if due >= end {
            break;
        }
        let began = start_at(due).await;
        let op = workload::pick(&work.mix, &mut rng);
        let key = work.keys.key(rng.random_range(0..work.keys.count.max(1)));
        let client = &lane.clients[(id & 0xffff_ffff) as usize % lane.clients.len()];
        let res = workload::one_op(client, work, &payload, op, &key, id, &mut rng).await;
        let done = Instant::now();
        if done < t0 || done >= end {
            continue;
        }
        let Some(p) = phase_of(&clock.phases, (done - t0).as_secs_f64()) else {
            continue;
        };
        match res {
            Ok(bytes) => stats[p].ok(done - began, bytes),
            Err(e) => stats[p].err(&e),
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_loop_slots_are_evenly_spaced() {
        let origin = Instant::now();
        assert_eq!(due_time(origin, 0, 2000), origin);
        assert_eq!(
            due_time(origin, 1, 2000),
            origin + Duration::from_micros(500)
        );
        assert_eq!(
            due_time(origin, 4000, 2000),
            origin + Duration::from_secs(2)
        );
    }

    #[test]
    fn completions_fall_in_phases() {
        let phases = [(0, 10), (10, 20)];
        assert_eq!(phase_of(&phases, 0.0), Some(0));
        assert_eq!(phase_of(&phases, 9.99), Some(0));
        assert_eq!(phase_of(&phases, 10.0), Some(1));
        assert_eq!(phase_of(&phases, 20.0), None);
    }

    #[test]
    fn cost_is_the_counter_difference_per_phase() {
        let snap = |a: u64, b: u64| Some(HashMap::from([("a".into(), a), ("b".into(), b)]));
        let mut o = Outcome {
            stats: Vec::new(),
            cost: Vec::new(),
        };
        o.cost_for(
            &["a".into(), "b".into()],
            &[snap(10, 0), snap(30, 5), None, snap(40, 9)],
        );
        assert_eq!(o.cost[0], vec![Some(20), None, None]);
        assert_eq!(o.cost[1], vec![Some(5), None, None]);
    }
}
