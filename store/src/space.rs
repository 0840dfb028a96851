//! Free space of the data directory's filesystem, and the reserve below
//! which writes are refused.
//!
//! Why a reserve: an engine that hits ENOSPC half-way through a journal
//! write cannot be trusted any more (fjall poisons itself), and a delete is a
//! write too, so a store that fills its disk to the last byte can no longer
//! free space. Writes that would take the free space below the reserve are
//! refused up front ([`StoreError::InsufficientStorage`], 507 at the
//! gateway); deletes, reads, compaction and the small index writes they need
//! live off the reserve.
//!
//! The default reserve is 5 % of the filesystem or 1 GiB, whichever is
//! smaller: 1 GiB covers an index journal and a few segments' worth of
//! compaction copies on any large disk, and 5 % keeps a small test or edge
//! filesystem usable.
//!
//! Cost: free space comes from `statvfs` (through rustix, because the
//! workspace denies `unsafe_code` and libc's statvfs is an unsafe FFI call;
//! rustix is already in the tree through fjall's tempfile). The answer is
//! cached: it is refreshed at most every [`REFRESH_MS`] ms, or once
//! [`REFRESH_BYTES`] have been written since the last refresh, whichever
//! comes first; in between, bytes written are subtracted from the cached
//! value. A request costs a few atomic loads, not a syscall.

use crate::error::{StoreError, StoreResult};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Longest a cached free-space figure is trusted.
pub const REFRESH_MS: u64 = 100;
/// Bytes written after which the free-space figure is refreshed early.
pub const REFRESH_BYTES: u64 = 16 << 20;
/// Share of the filesystem the automatic reserve takes (percent)...
const AUTO_PERCENT: u64 = 5;
/// ...but never more than this.
const AUTO_MAX: u64 = 1 << 30;

/// How much free space to keep for deletes, compaction and index writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiskReserve {
    /// 5 % of the filesystem or 1 GiB, whichever is smaller (the default).
    #[default]
    Auto,
    /// A fixed number of bytes; 0 turns the reserve off.
    Bytes(u64),
    /// A share of the filesystem, in percent (0 to 50).
    Percent(u8),
}

impl DiskReserve {
    /// Parse `auto`, `N%`, or a byte count with an optional unit
    /// (`K`/`KiB`, `M`/`MiB`, `G`/`GiB`, powers of 1024).
    pub fn parse(s: &str) -> Result<DiskReserve, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("auto") {
            return Ok(DiskReserve::Auto);
        }
        if let Some(p) = s.strip_suffix('%') {
            return match p.trim().parse::<u8>() {
                Ok(n) if n <= 50 => Ok(DiskReserve::Percent(n)),
                _ => Err(format!("a reserve share must be 0% to 50% (got {s:?})")),
            };
        }
        let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(digits);
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kib" => 10,
            "m" | "mib" => 20,
            "g" | "gib" => 30,
            "t" | "tib" => 40,
            _ => return Err(format!("unknown unit in {s:?} (use K, M, G or T)")),
        };
        num.parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(1u64 << shift))
            .map(DiskReserve::Bytes)
            .ok_or_else(|| format!("expected auto, N% or a size like 512M (got {s:?})"))
    }

    /// The reserve in bytes on a filesystem of `total` bytes.
    pub fn bytes(self, total: u64) -> u64 {
        match self {
            DiskReserve::Auto => (total / 100 * AUTO_PERCENT).min(AUTO_MAX),
            DiskReserve::Bytes(n) => n,
            DiskReserve::Percent(p) => total / 100 * u64::from(p),
        }
    }
}

/// (available to unprivileged writers, total) bytes of the filesystem
/// holding `dir`.
pub fn statvfs(dir: &Path) -> StoreResult<(u64, u64)> {
    let st = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
    let avail = st.f_bavail.saturating_mul(st.f_frsize);
    let total = st.f_blocks.saturating_mul(st.f_frsize);
    Ok((avail, total))
}

/// The free space of one data directory, cached, and its reserve.
pub struct Space {
    dir: PathBuf,
    reserve: u64,
    /// Last statvfs figure minus the bytes written since.
    avail: AtomicU64,
    /// When `avail` was last read from the filesystem (ms after `epoch`).
    refreshed_ms: AtomicU64,
    /// Bytes charged since the last refresh.
    written: AtomicU64,
    epoch: Instant,
}

impl Space {
    /// Measure the filesystem of `dir` and resolve `reserve` against it.
    pub fn open(dir: &Path, reserve: DiskReserve) -> StoreResult<Space> {
        let (avail, total) = statvfs(dir)?;
        Ok(Space {
            dir: dir.to_path_buf(),
            reserve: reserve.bytes(total),
            avail: AtomicU64::new(avail),
            refreshed_ms: AtomicU64::new(0),
            written: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// The reserve in bytes (0: off).
    pub fn reserve(&self) -> u64 {
        self.reserve
    }

    /// The segment size limit to use under this reserve: at most a quarter
    /// of it (but not under 1 MiB). Compaction copies a segment's live
    /// records before it deletes the file, so on a full disk it can always
    /// take any one segment apart with the reserve alone.
    pub fn segment_cap(&self, segment_max: u64) -> u64 {
        if self.reserve == 0 {
            return segment_max;
        }
        segment_max.min((self.reserve / 4).max(1 << 20))
    }

    /// Free bytes as last measured, less what was written since.
    pub fn available(&self) -> u64 {
        self.maybe_refresh();
        self.avail.load(Ordering::Relaxed)
    }

    /// May a write of about `incoming` bytes start? Refused when it would
    /// take the free space below the reserve.
    pub fn admit(&self, incoming: u64) -> StoreResult<()> {
        if self.reserve == 0 {
            return Ok(());
        }
        if self.available().saturating_sub(incoming) < self.reserve {
            return Err(StoreError::InsufficientStorage);
        }
        Ok(())
    }

    /// Account `n` bytes just written by an admitted write. Refused once
    /// the free space is below half the reserve: concurrent admitted
    /// writes may dip into the reserve, but never eat all of it.
    pub fn charge(&self, n: u64) -> StoreResult<()> {
        self.note_written(n);
        if self.reserve > 0 && self.available() < self.reserve / 2 {
            return Err(StoreError::InsufficientStorage);
        }
        Ok(())
    }

    /// Account `n` bytes written by the store itself (compaction), which
    /// may use the reserve.
    pub fn note_written(&self, n: u64) {
        // fetch_update with a saturating closure never fails.
        let _ = self
            .avail
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| {
                Some(a.saturating_sub(n))
            });
        self.written.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether free space is close enough to the reserve (under twice it)
    /// that compaction should reclaim whatever it can, now.
    pub fn is_low(&self) -> bool {
        self.reserve > 0 && self.available() < self.reserve.saturating_mul(2)
    }

    /// Read the free space from the filesystem now (after space was freed).
    pub fn refresh(&self) {
        let now = self.now_ms();
        self.refreshed_ms.store(now, Ordering::Relaxed);
        self.measure();
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn maybe_refresh(&self) {
        let last = self.refreshed_ms.load(Ordering::Relaxed);
        let now = self.now_ms();
        let stale = now.saturating_sub(last) >= REFRESH_MS
            || self.written.load(Ordering::Relaxed) >= REFRESH_BYTES;
        // One caller wins the refresh; the others use the cached figure.
        if stale
            && self
                .refreshed_ms
                .compare_exchange(last, now.max(last + 1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.measure();
        }
    }

    fn measure(&self) {
        match statvfs(&self.dir) {
            Ok((avail, _)) => {
                self.written.store(0, Ordering::Relaxed);
                self.avail.store(avail, Ordering::Relaxed);
            }
            // Keep the old figure: refusing every write because statvfs
            // failed once would be worse than a stale estimate.
            Err(e) => tracing::warn!(error = %e, "statvfs of the data directory failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_parses_and_resolves() {
        assert_eq!(DiskReserve::parse("auto"), Ok(DiskReserve::Auto));
        assert_eq!(DiskReserve::parse("0"), Ok(DiskReserve::Bytes(0)));
        assert_eq!(DiskReserve::parse("8M"), Ok(DiskReserve::Bytes(8 << 20)));
        assert_eq!(DiskReserve::parse("2GiB"), Ok(DiskReserve::Bytes(2 << 30)));
        assert_eq!(DiskReserve::parse("7%"), Ok(DiskReserve::Percent(7)));
        for bad in ["", "x", "5 parsecs", "51%", "-1", "99999999999999999999T"] {
            assert!(DiskReserve::parse(bad).is_err(), "{bad:?}");
        }
        // 5 % of a small disk, 1 GiB of a large one.
        assert_eq!(DiskReserve::Auto.bytes(1 << 30), (1 << 30) / 100 * 5);
        assert_eq!(DiskReserve::Auto.bytes(1 << 40), 1 << 30);
        assert_eq!(DiskReserve::Percent(10).bytes(1000), 100);
    }

    #[test]
    fn admission_follows_the_reserve() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (avail, _) = statvfs(dir.path()).expect("statvfs");
        let off = Space::open(dir.path(), DiskReserve::Bytes(0)).expect("space");
        assert!(off.admit(u64::MAX).is_ok() && !off.is_low());
        // A reserve above the free space refuses every write.
        let full =
            Space::open(dir.path(), DiskReserve::Bytes(avail.saturating_mul(4))).expect("space");
        assert!(matches!(
            full.admit(0),
            Err(StoreError::InsufficientStorage)
        ));
        assert!(full.is_low());
        let roomy = Space::open(dir.path(), DiskReserve::Bytes(1)).expect("space");
        assert!(roomy.admit(0).is_ok());
        assert!(matches!(
            roomy.admit(avail.saturating_mul(2)),
            Err(StoreError::InsufficientStorage)
        ));
    }
}
