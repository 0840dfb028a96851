//! A one-line description of the machine a result was taken on.
//!
//! Figures from a shared 2-core box mean little without the date, the core
//! count, the memory and how busy the box was, so every mode prints this
//! line with its method. Everything comes from std and `/proc`; the date is
//! computed from the Unix clock (UTC) to avoid a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// `# machine: 2 cpus, 24.0 GiB RAM, load 1.02 0.80 0.55; 2026-11-29T16:00:00Z`
pub fn describe() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!(
        "# machine: {cpus} cpus, {:.1} GiB RAM, load avg {}; {}",
        mem_total_kib() as f64 / (1024.0 * 1024.0),
        load.join(" "),
        utc(secs)
    )
}

fn mem_total_kib() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    info.lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC).
pub fn utc(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), after H. Hinnant's
/// `civil_from_days`, restricted to dates from 1970 on.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_795_970_117), "2026-11-29T16:35:17Z");
        assert!(describe().starts_with("# machine: "));
    }
}
