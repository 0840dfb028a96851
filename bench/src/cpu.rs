//! CPU time of the loader and of the server, from `/proc/PID/stat`.
//!
//! On a shared 2-core box wall-clock rates swing with whatever else runs,
//! but CPU seconds spent per request move much less, so every mode prints
//! how much CPU the loader (this process) and, with `--server-pid`, the
//! server burned over the measured run, and per successful request. The
//! kernel reports `utime`/`stime` in USER_HZ ticks, which Linux fixes at
//! 100 per second for this interface on every architecture.

use std::io;
use std::time::{Duration, Instant};

/// Ticks per second in `/proc/PID/stat` (USER_HZ).
const USER_HZ: f64 = 100.0;

/// User + system CPU seconds used so far by `pid` (`None` = this process).
pub fn cpu_seconds(pid: Option<u32>) -> io::Result<f64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(&path)?;
    parse_ticks(&stat)
        .map(|t| t as f64 / USER_HZ)
        .ok_or_else(|| io::Error::other(format!("{path}: unexpected format")))
}

/// utime + stime from a stat line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after the last `)`.
fn parse_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After ")": state is field 3, so utime (14) and stime (15) are the
    // 12th and 13th.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// CPU use of the loader and the server over one measured run.
#[derive(Debug)]
pub struct CpuMeter {
    server: Option<(u32, f64)>,
    loader: f64,
    start: Instant,
}

impl CpuMeter {
    /// Starts measuring now.
    pub fn start(server_pid: Option<u32>) -> Self {
        Self {
            server: server_pid.and_then(|p| Some((p, cpu_seconds(Some(p)).ok()?))),
            loader: cpu_seconds(None).unwrap_or(0.0),
            start: Instant::now(),
        }
    }

    /// `# cpu: loader 2.1 s (0.10 cores, 0.21 ms/op); server ...`
    pub fn line(&self, ops: u64) -> String {
        let wall = self.start.elapsed();
        let loader = cpu_seconds(None).unwrap_or(0.0) - self.loader;
        let mut out = format!(
            "# cpu over {:.1}s: loader {}",
            wall.as_secs_f64(),
            usage(loader, wall, ops)
        );
        if let Some((pid, before)) = self.server {
            match cpu_seconds(Some(pid)) {
                Ok(now) => out.push_str(&format!("; server {}", usage(now - before, wall, ops))),
                Err(e) => out.push_str(&format!("; server pid {pid}: {e}")),
            }
        }
        out
    }
}

fn usage(secs: f64, wall: Duration, ops: u64) -> String {
    let cores = secs / wall.as_secs_f64().max(1e-9);
    if ops == 0 {
        return format!("{secs:.2} s ({cores:.2} cores)");
    }
    format!(
        "{secs:.2} s ({cores:.2} cores, {:.3} ms/op)",
        secs * 1e3 / ops as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let stat = "42 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 1 0";
        assert_eq!(parse_ticks(stat), Some(175));
        assert_eq!(parse_ticks("garbage"), None);
        assert!(cpu_seconds(None).is_ok());
    }
}
