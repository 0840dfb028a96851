//! The buckets a cluster DeleteBucket sealed on this node, kept on disk
//! (`<data>/sealed-buckets`) so that a restart does not forget them.
//! These are the seals of partitions without a replication group (RF 1);
//! a replicated partition's seal is a row of its group
//! ([`crate::seal_rows`]).
//!
//! Why: in a cluster, the gateways that resolve a bucket are other
//! processes, and they cache a bucket's id for up to two seconds
//! (`BUCKET_TTL` of the gateway's store client); a write resolved just
//! before a DeleteBucket can reach a store node after it. Every node's
//! seal refuses such writes ([`crate::gate`]). Held in memory only, a
//! node restarted in that window would have forgotten it, and a write
//! could commit into the deleted bucket's id (stored, uncounted,
//! unreachable). So a seal is written here before it counts, and a
//! node reopening reads back the seals made in the last [`SEAL_KEEP`].
//!
//! Bounded: a seal older than [`SEAL_KEEP`] is dropped when the file is
//! next written or read (a write into a bucket is resolved at most a
//! cache lifetime before it is sent, and a call sent before a restart
//! dies with the node's connections, so minutes are far more than any
//! write needs), and the file keeps at most [`SEALS_AT_MOST`] seals, the
//! newest. Each change rewrites the whole file atomically (a temporary
//! file, fsync, rename, directory fsync): DeleteBucket is rare and the
//! file small.
//!
//! Format: a first line `laneway-seals 1`, then a line per seal: the
//! bucket id and the Unix second it was sealed, in decimal. A line that
//! does not parse is skipped with a warning.

use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The file's name in the data directory.
pub const SEAL_FILE: &str = "sealed-buckets";

/// How long a seal is kept on disk.
pub const SEAL_KEEP: Duration = Duration::from_secs(600);

/// The most seals the file keeps (the oldest go first).
pub const SEALS_AT_MOST: usize = 4096;

const HEADER: &str = "laneway-seals 1";

/// The seal file of one store.
pub struct SealFile {
    path: PathBuf,
    /// Bucket -> Unix second of its seal. Held across a rewrite, so two
    /// changes never write the file out of order.
    seals: Mutex<BTreeMap<BucketId, u64>>,
}

impl SealFile {
    /// Open the seal file in `dir` (none yet: no seals); returns it and
    /// the buckets sealed within [`SEAL_KEEP`] of `now`.
    pub fn open(dir: &Path, now: SystemTime) -> StoreResult<(SealFile, Vec<BucketId>)> {
        let path = dir.join(SEAL_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(StoreError::Io(e)),
        };
        let mut seals = parse(&text);
        keep_recent(&mut seals, unix(now));
        let live = seals.keys().copied().collect();
        let file = SealFile {
            path,
            seals: Mutex::new(seals),
        };
        Ok((file, live))
    }

    /// Record a seal of `bucket` at `now`, durably.
    pub fn record(&self, bucket: BucketId, now: SystemTime) -> StoreResult<()> {
        let mut seals = self.seals.lock();
        let mut next = seals.clone();
        next.insert(bucket, unix(now));
        keep_recent(&mut next, unix(now));
        self.write(&next)?;
        *seals = next;
        Ok(())
    }

    /// Remove the seal of `bucket` (revived), durably.
    pub fn forget(&self, bucket: BucketId) -> StoreResult<()> {
        let mut seals = self.seals.lock();
        if !seals.contains_key(&bucket) {
            return Ok(());
        }
        let mut next = seals.clone();
        next.remove(&bucket);
        self.write(&next)?;
        *seals = next;
        Ok(())
    }

    fn write(&self, seals: &BTreeMap<BucketId, u64>) -> StoreResult<()> {
        let mut text = format!("{HEADER}\n");
        for (bucket, at) in seals {
            text.push_str(&format!("{} {at}\n", bucket.0));
        }
        crate::fsutil::write_atomically(&self.path, text.as_bytes(), 0o644).map_err(StoreError::Io)
    }
}

/// The seals in `text`, skipping (with a warning) what does not parse.
fn parse(text: &str) -> BTreeMap<BucketId, u64> {
    let mut lines = text.lines();
    match lines.next() {
        None => return BTreeMap::new(),
        Some(HEADER) => {}
        Some(other) => {
            tracing::warn!(
                header = other,
                "seal file of an unknown format: no seal read"
            );
            return BTreeMap::new();
        }
    }
    let mut seals = BTreeMap::new();
    for line in lines {
        let mut fields = line.split(' ');
        let parsed = (fields.next(), fields.next(), fields.next());
        match parsed {
            (Some(id), Some(at), None) => match (id.parse::<u64>(), at.parse::<u64>()) {
                (Ok(id), Ok(at)) => {
                    seals.insert(BucketId(id), at);
                }
                _ => tracing::warn!(line, "skipping an unreadable line of the seal file"),
            },
            _ => tracing::warn!(line, "skipping an unreadable line of the seal file"),
        }
    }
    seals
}

/// Drop the seals older than [`SEAL_KEEP`] at `now` (a Unix second), then
/// all but the newest [`SEALS_AT_MOST`].
fn keep_recent(seals: &mut BTreeMap<BucketId, u64>, now: u64) {
    let oldest = now.saturating_sub(SEAL_KEEP.as_secs());
    seals.retain(|_, at| *at >= oldest);
    if seals.len() > SEALS_AT_MOST {
        let mut times: Vec<u64> = seals.values().copied().collect();
        times.sort_unstable();
        let cut = times[times.len() - SEALS_AT_MOST];
        seals.retain(|_, at| *at >= cut);
        // Ties at the cut may leave a few more; drop the lowest ids.
        while seals.len() > SEALS_AT_MOST {
            let Some((&id, _)) = seals.iter().find(|(_, at)| **at == cut) else {
                break;
            };
            seals.remove(&id);
        }
    }
}

/// `t` in whole seconds since the Unix epoch (0 before it).
fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn seals_survive_a_reopen_until_they_are_old() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, live) = SealFile::open(dir.path(), at(1_000)).expect("open");
        assert!(live.is_empty());
        file.record(BucketId(7), at(1_000)).expect("record");
        file.record(BucketId(9), at(1_100)).expect("record");
        file.record(BucketId(11), at(1_200)).expect("record");
        file.forget(BucketId(9)).expect("forget");
        drop(file);
        let (_, live) = SealFile::open(dir.path(), at(1_300)).expect("reopen");
        assert_eq!(live, vec![BucketId(7), BucketId(11)]);
        let later = 1_000 + SEAL_KEEP.as_secs() + 1;
        let (_, live) = SealFile::open(dir.path(), at(later)).expect("reopen later");
        assert_eq!(live, vec![BucketId(11)], "the seal of 7 is older than kept");
    }

    #[test]
    fn unreadable_lines_are_skipped_and_an_unknown_format_read_as_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(SEAL_FILE);
        std::fs::write(&path, format!("{HEADER}\n5 100\nnonsense\n6 x\n8 100 1\n")).expect("w");
        let (_, live) = SealFile::open(dir.path(), at(100)).expect("open");
        assert_eq!(live, vec![BucketId(5)]);
        std::fs::write(&path, "laneway-seals 99\n5 100\n").expect("w");
        let (_, live) = SealFile::open(dir.path(), at(100)).expect("open");
        assert!(live.is_empty());
    }

    #[test]
    fn the_file_keeps_the_newest_seals_only() {
        // Ten seals a second, all within the keep.
        let mut seals: BTreeMap<BucketId, u64> = (0..SEALS_AT_MOST as u64 + 10)
            .map(|i| (BucketId(i), 1_000 + i / 10))
            .collect();
        keep_recent(&mut seals, 1_000 + SEALS_AT_MOST as u64 / 10 + 1);
        assert_eq!(seals.len(), SEALS_AT_MOST);
        assert!(!seals.contains_key(&BucketId(9)));
        assert!(seals.contains_key(&BucketId(10)));
        let mut tied: BTreeMap<BucketId, u64> = (0..SEALS_AT_MOST as u64 + 3)
            .map(|i| (BucketId(i), 5))
            .collect();
        keep_recent(&mut tied, 5);
        assert_eq!(tied.len(), SEALS_AT_MOST);
    }
}
