//! The soak's timeline: an optional `--warmup` (load that fills the
//! server's caches before anything is judged), then three phases in
//! proportion to `--duration` (normal 40 %, 2x overload 30 %, normal
//! 30 %); the second at which RSS is taken as the baseline (1/20 of the
//! run after the warm-up: 60 s into a 20-minute soak); and how long a slow
//! reader keeps a connection.

use std::time::{Duration, Instant};

/// Phase names, in order.
pub const PHASES: [&str; 4] = ["warm-up", "normal", "overload 2x", "normal again"];
/// Index of the overload phase.
pub const OVERLOAD: usize = 2;

/// The run's timeline, fixed when the load starts.
#[derive(Debug, Clone)]
pub struct Plan {
    /// When the load started.
    pub t0: Instant,
    /// Seconds of load after the warm-up.
    pub duration: u64,
    /// Seconds of warm-up.
    pub warmup: u64,
    /// Phase boundaries in seconds from `t0`.
    pub cuts: [u64; 5],
    /// Keys each worker owns.
    pub keys_per_worker: u64,
    /// Seed of the run.
    pub seed: u64,
}

impl Plan {
    /// The plan of a run starting at `t0`: `warmup` seconds, then
    /// `duration` seconds.
    pub fn new(
        t0: Instant,
        (warmup, duration): (u64, u64),
        keys_per_worker: u64,
        seed: u64,
    ) -> Plan {
        let w = warmup;
        Plan {
            t0,
            duration,
            warmup,
            cuts: [
                0,
                w,
                w + duration * 4 / 10,
                w + duration * 7 / 10,
                w + duration,
            ],
            keys_per_worker,
            seed,
        }
    }

    /// Number of phases.
    pub fn phase_count(&self) -> usize {
        PHASES.len()
    }

    /// `t0 + secs`.
    pub fn at(&self, secs: u64) -> Instant {
        self.t0 + Duration::from_secs(secs)
    }

    /// Seconds from the start to the end of the load.
    pub fn total(&self) -> u64 {
        self.cuts[PHASES.len()]
    }

    /// The end of the load.
    pub fn end(&self) -> Instant {
        self.at(self.total())
    }

    /// The overload phase, as instants.
    pub fn overload(&self) -> (Instant, Instant) {
        (
            self.at(self.cuts[OVERLOAD]),
            self.at(self.cuts[OVERLOAD + 1]),
        )
    }

    /// The phase an event at `when` counts in (late ones in the last).
    pub fn phase_of(&self, when: Instant) -> usize {
        let secs = when.saturating_duration_since(self.t0).as_secs_f64();
        (1..PHASES.len())
            .take_while(|&p| secs >= self.cuts[p] as f64)
            .last()
            .unwrap_or(0)
    }

    /// Length of phase `p`.
    pub fn phase_len(&self, p: usize) -> Duration {
        Duration::from_secs(self.cuts[p + 1] - self.cuts[p])
    }

    /// Second at which RSS is taken as the baseline.
    pub fn baseline_secs(&self) -> u64 {
        self.warmup + (self.duration / 20).max(1)
    }

    /// How long a slow or stalled reader holds its connection.
    pub fn hold(&self) -> Duration {
        Duration::from_secs((self.duration / 10).clamp(2, 60))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_proportional() {
        let t0 = Instant::now();
        let p = Plan::new(t0, (0, 1200), 8, 1);
        assert_eq!(p.cuts, [0, 0, 480, 840, 1200]);
        assert_eq!((p.baseline_secs(), p.total()), (60, 1200));
        assert_eq!(p.hold(), Duration::from_secs(60));
        assert_eq!(p.phase_of(t0), 1);
        assert_eq!(p.phase_of(p.at(479)), 1);
        assert_eq!(p.phase_of(p.at(480)), 2);
        assert_eq!(p.phase_of(p.at(840)), 3);
        assert_eq!(p.phase_of(p.at(5000)), 3);
        assert_eq!(p.phase_len(2), Duration::from_secs(360));
        assert_eq!(p.phase_len(0), Duration::ZERO);
        let short = Plan::new(t0, (15, 60), 8, 1);
        assert_eq!(short.cuts, [0, 15, 39, 57, 75]);
        assert_eq!(short.phase_of(t0), 0);
        assert_eq!(short.baseline_secs(), 18);
        assert_eq!(short.hold(), Duration::from_secs(6));
        assert_eq!(short.overload(), (short.at(39), short.at(57)));
    }
}
