//! The server's RSS and CPU time, sampled once a second for the whole
//! soak (load, settle and read-back), from `/proc/PID/status` (VmRSS,
//! via [`crate::rss`]) and `/proc/PID/stat` (utime + stime, via
//! [`crate::cpu`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// Sampling period.
pub const PERIOD: Duration = Duration::from_secs(1);

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the load started (negative: before it).
    pub at: f64,
    /// VmRSS, KiB.
    pub rss_kib: u64,
    /// utime + stime so far, seconds.
    pub cpu_secs: f64,
}

/// A running sampler of one process.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<Sample>>,
}

impl Monitor {
    /// Samples `pid` every [`PERIOD`], times counted from `t0`.
    pub fn start(pid: u32, t0: Instant) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut out = Vec::new();
            let mut tick = tokio::time::interval(PERIOD);
            loop {
                tick.tick().await;
                match sample(pid, t0) {
                    Some(s) => out.push(s),
                    None => break,
                }
                if flag.load(Ordering::Relaxed) {
                    break;
                }
            }
            out
        });
        Monitor { stop, task }
    }

    /// Takes a last sample and returns them all.
    pub async fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

fn sample(pid: u32, t0: Instant) -> Option<Sample> {
    let now = Instant::now();
    let at = if now >= t0 {
        (now - t0).as_secs_f64()
    } else {
        -(t0 - now).as_secs_f64()
    };
    Some(Sample {
        at,
        rss_kib: crate::rss::read_rss_kib(pid).ok()?,
        cpu_secs: crate::cpu::cpu_seconds(Some(pid)).ok()?,
    })
}

/// The sample nearest to second `secs`.
pub fn nearest(samples: &[Sample], secs: f64) -> Option<Sample> {
    samples
        .iter()
        .min_by(|a, b| (a.at - secs).abs().total_cmp(&(b.at - secs).abs()))
        .copied()
}

/// The memory verdict's figures: RSS at the baseline second, the peak
/// after it (and when), and the last sample.
#[derive(Debug, Clone, Copy)]
pub struct RssVerdict {
    /// Baseline sample.
    pub base: Sample,
    /// Largest sample after the baseline.
    pub peak: Sample,
    /// Last sample.
    pub last: Sample,
}

impl RssVerdict {
    /// The figures, if there are samples at all.
    pub fn of(samples: &[Sample], baseline_secs: u64) -> Option<RssVerdict> {
        let base = nearest(samples, baseline_secs as f64)?;
        let peak = samples
            .iter()
            .filter(|s| s.at >= base.at)
            .max_by_key(|s| s.rss_kib)
            .copied()?;
        Some(RssVerdict {
            base,
            peak,
            last: *samples.last()?,
        })
    }

    /// Whether the peak and the last sample are within 2x of the baseline.
    pub fn pass(&self) -> bool {
        let limit = self.base.rss_kib.saturating_mul(2);
        self.peak.rss_kib <= limit && self.last.rss_kib <= limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: f64, rss_kib: u64) -> Sample {
        Sample {
            at,
            rss_kib,
            cpu_secs: 0.0,
        }
    }

    #[test]
    fn verdict_uses_baseline_peak_and_end() {
        let samples = [
            s(-1.0, 500),
            s(0.0, 10),
            s(3.0, 100),
            s(4.0, 190),
            s(5.0, 150),
        ];
        let v = RssVerdict::of(&samples, 3).expect("samples");
        assert_eq!(
            (v.base.rss_kib, v.peak.rss_kib, v.last.rss_kib),
            (100, 190, 150)
        );
        assert!(v.pass());
        let grown = [s(3.0, 100), s(4.0, 201)];
        assert!(!RssVerdict::of(&grown, 3).expect("samples").pass());
        assert!(RssVerdict::of(&[], 3).is_none());
        assert!(sample(std::process::id(), Instant::now()).is_some());
    }
}
