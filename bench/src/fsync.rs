//! The fsync probe: how many durable appends per second one writer gets.
//!
//! One thread appends a block (default 4 KiB) to a fresh file in the given
//! directory and calls `fdatasync` after each, for the given time. Because
//! every append grows the file, each sync must persist the new size as well
//! as the data, as a write-ahead log's append does. That rate is the floor a
//! durable PUT path would hit without group commit; a server that batches
//! many PUTs per sync should beat it by the batching factor. The file is
//! truncated every 1 GiB to bound disk use and removed at the end.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::histogram::Histogram;
use crate::report::micros;

/// File size at which the probe starts over.
const MAX_FILE: u64 = 1 << 30;

/// What the probe measured.
#[derive(Debug, Clone)]
pub struct FsyncResult {
    /// Appends that were synced.
    pub syncs: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Latency of write + fdatasync, microseconds.
    pub latency: Histogram,
}

/// Removes the probe file when dropped.
struct ProbeFile {
    path: PathBuf,
    file: File,
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs the probe in `dir` for `duration` with `block`-byte appends.
pub fn run(dir: &Path, duration: Duration, block: usize) -> io::Result<FsyncResult> {
    let path = dir.join(format!("laneway-fsync-probe-{}", std::process::id()));
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)?;
    let mut probe = ProbeFile { path, file };
    let data = vec![0xa5u8; block.max(1)];
    let mut result = FsyncResult {
        syncs: 0,
        elapsed: Duration::ZERO,
        latency: Histogram::new(),
    };
    let mut written = 0u64;
    let start = Instant::now();
    while start.elapsed() < duration {
        if written >= MAX_FILE {
            probe.file.set_len(0)?;
            probe.file.sync_all()?;
            written = 0;
        }
        let t0 = Instant::now();
        probe.file.write_all(&data)?;
        probe.file.sync_data()?;
        result.latency.record(micros(t0.elapsed()));
        written += data.len() as u64;
        result.syncs += 1;
    }
    result.elapsed = start.elapsed();
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_syncs_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("lw-fsync-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let r = run(&dir, Duration::from_millis(50), 4096).expect("probe");
        assert!(r.syncs > 0);
        assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 0);
        std::fs::remove_dir(&dir).expect("rmdir");
    }
}
