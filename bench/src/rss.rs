//! Sampling another process's resident set size.
//!
//! `--server-pid` starts a task that reads `VmRSS` from `/proc/PID/status`
//! every 50 ms while the workload runs; the summary shows the RSS at start,
//! the peak, and the growth. Sampling at 50 ms can miss a spike shorter
//! than that, so the peak is a lower bound on the true peak.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

/// Sampling period.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// Reads `VmRSS` of `pid` in KiB.
pub fn read_rss_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vmrss(&status).ok_or_else(|| io::Error::other(format!("no VmRSS for pid {pid}")))
}

fn parse_vmrss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// RSS figures over a run, KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct RssSummary {
    /// First sample.
    pub start_kib: u64,
    /// Largest sample.
    pub peak_kib: u64,
    /// Last sample.
    pub end_kib: u64,
    /// Samples taken.
    pub samples: u64,
}

impl RssSummary {
    fn add(&mut self, kib: u64) {
        if self.samples == 0 {
            self.start_kib = kib;
        }
        self.samples += 1;
        self.peak_kib = self.peak_kib.max(kib);
        self.end_kib = kib;
    }

    /// Peak minus start, MiB.
    pub fn growth_mib(&self) -> f64 {
        self.peak_kib.saturating_sub(self.start_kib) as f64 / 1024.0
    }

    /// One printable line.
    pub fn line(&self, pid: u32) -> String {
        format!(
            "server pid {pid} VmRSS: start {:.1} MiB, peak {:.1} MiB, end {:.1} MiB, growth {:.1} MiB ({} samples every {} ms)",
            self.start_kib as f64 / 1024.0,
            self.peak_kib as f64 / 1024.0,
            self.end_kib as f64 / 1024.0,
            self.growth_mib(),
            self.samples,
            INTERVAL.as_millis()
        )
    }
}

/// A running sampler.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    task: JoinHandle<RssSummary>,
}

impl RssSampler {
    /// Takes a first sample now, then every [`INTERVAL`].
    pub fn start(pid: u32) -> io::Result<Self> {
        let mut summary = RssSummary::default();
        summary.add(read_rss_kib(pid)?);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(INTERVAL);
            while !flag.load(Ordering::Relaxed) {
                tick.tick().await;
                match read_rss_kib(pid) {
                    Ok(kib) => summary.add(kib),
                    Err(_) => break,
                }
            }
            summary
        });
        Ok(Self { stop, task })
    }

    /// Takes a last sample and returns the figures.
    pub async fn finish(self) -> RssSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status() {
        let status = "Name:\tx\nVmPeak:\t  9 kB\nVmRSS:\t   12345 kB\n";
        assert_eq!(parse_vmrss(status), Some(12345));
        assert_eq!(parse_vmrss("Name: x\n"), None);
    }

    #[test]
    fn reads_own_rss() {
        let kib = read_rss_kib(std::process::id()).expect("own status");
        assert!(kib > 0);
    }
}
