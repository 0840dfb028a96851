//! The descriptor budget: raise the soft `RLIMIT_NOFILE` to the hard
//! limit at startup, and derive the connection cap from it.
//!
//! Every connection costs one descriptor; the store needs its own: each
//! partition keeps its metadata engine's files (fjall's journal, lock and
//! table files, up to its descriptor cache) and its volume segments open,
//! and the admin API, the log and the runtime hold a few more. A fresh
//! `laneway serve` with 16 partitions holds 47 descriptors (counted in
//! `/proc/PID/fd`); a store with data holds more (table files, segments,
//! compaction's temporary files). So the cap leaves what is open once the
//! store is up, plus a quarter of the limit (at least 128) for the store
//! to grow into:
//!
//! `cap = limit - open_at_startup - max(128, limit / 4)`, at least 16.
//!
//! At `ulimit -n 1024` that is about 720 connections; at 256, about 80.

/// Descriptors kept for the store's growth, at least.
const MIN_HEADROOM: u64 = 128;

/// The smallest cap, whatever the limit says.
const MIN_CAP: u64 = 16;

/// Raise the soft descriptor limit to the hard limit; the soft limit in
/// force afterwards (`None`: unlimited or unknown).
pub fn raise_nofile_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => return limit.maximum,
            Err(e) => tracing::warn!(error = %e, "cannot raise the open-files limit"),
        }
    }
    limit.current
}

/// The soft descriptor limit in force (`None`: unlimited).
pub fn nofile_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Descriptors this process holds now (`None` without `/proc`).
pub fn open_descriptors() -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    u64::try_from(dir.count()).ok()
}

/// The connection cap for a descriptor `limit` with `open` descriptors in
/// use by the store and the process.
pub fn derived_cap(limit: u64, open: u64) -> usize {
    let headroom = (limit / 4).max(MIN_HEADROOM);
    let cap = limit
        .saturating_sub(open)
        .saturating_sub(headroom)
        .max(MIN_CAP);
    usize::try_from(cap).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_leaves_headroom_for_the_store() {
        assert_eq!(derived_cap(1024, 47), 1024 - 47 - 256);
        assert_eq!(derived_cap(256, 47), 256 - 47 - 128);
        assert_eq!(derived_cap(100, 47), 16);
        assert!(derived_cap(u64::MAX, 47) > 1 << 40);
    }

    #[test]
    fn the_process_has_descriptors_and_a_limit() {
        assert!(open_descriptors().is_some_and(|n| n >= 3));
        assert!(raise_nofile_limit().is_none_or(|n| n >= 3));
    }
}
