//! A store node's Raft log: the logs of all its groups in one append-only
//! file of segments (`<data>/raft-wal`), written by one thread.
//!
//! Why not the metadata index: a Raft log is written once, read back
//! while it is fresh, and dropped a prefix at a time. In an LSM tree every
//! entry is written to the journal, inserted into a memtable, flushed into
//! a table, compacted, and finally deleted by tombstones that are compacted
//! again; profiles of replicated PUTs had the log database's flushes,
//! compactions and memtable inserts among the store nodes' largest costs
//! (docs/benchmarks.md, "A Raft log file per node"). Here an entry is
//! written once, with one fdatasync per turn of the writer thread for every
//! group's appends, and a purge deletes whole segments.
//!
//! The parts:
//! - [`record`]: what a record holds and how it is framed (length, CRC32C
//!   stored masked with its segment's id);
//! - [`segment`]: segment files, created synced (in a spare: zero-filled,
//!   or a segment no group needs, reused), read back at recovery;
//! - [`state`]: per group, the vote, committed and purged ids and where
//!   each entry lies (kept in memory: about 64 bytes an entry, and a
//!   group's log is bounded by its snapshot policy);
//! - [`writer`]: the thread, segment rotation, deletion and relocation;
//! - [`log`]: a group's handle, openraft's `RaftLogStorage`.
//!
//! Durability: an append, a truncation and a vote are synced before they
//! are acknowledged; a purge and a committed id are written with the next
//! sync (a purge lost in a crash leaves entries that are still there). A
//! segment is deleted (or reused) only after everything that makes it
//! unneeded was synced.

pub mod log;
pub mod record;
pub mod segment;
pub mod state;
pub mod writer;

pub use log::WalLog;
pub use writer::Limits;

use crate::types::LogEntry;
use record::{Record, entry_at};
use state::{Location, Segment, WalState};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tokio::sync::mpsc;
use writer::{Counters, Job, Pending, Writer, lock};

/// Most jobs waiting for the writer thread; past it a group's call waits
/// (each group has at most one append in flight, so this is never reached
/// by appends alone).
pub const QUEUED_JOBS: usize = 4096;

/// A node's Raft log file. Clones share it; the writer thread ends when
/// the last clone (and every group's handle) is dropped.
#[derive(Clone)]
pub struct Wal {
    shared: Arc<Shared>,
}

struct Shared {
    dir: PathBuf,
    state: Arc<Mutex<WalState>>,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the file holds, for status and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Segment files.
    pub segments: u64,
    /// Their bytes.
    pub disk_bytes: u64,
    /// Bytes of the entries the groups hold.
    pub live_bytes: u64,
    /// Groups known.
    pub groups: u64,
    /// Bytes written again by relocations since the file was opened.
    pub relocated_bytes: u64,
    /// Segments begun in the file of one no group needed, since the file
    /// was opened.
    pub reused_segments: u64,
}

impl Wal {
    /// Open (creating if needed) the log file in `dir` with the default
    /// limits.
    pub fn open(dir: &Path) -> io::Result<Wal> {
        Wal::open_with(dir, Limits::default())
    }

    /// Open the log file in `dir`: read every segment back, cut a torn
    /// record off the newest, and start the writer thread.
    pub fn open_with(dir: &Path, limits: Limits) -> io::Result<Wal> {
        std::fs::create_dir_all(dir)?;
        match std::fs::remove_file(dir.join(segment::SPARE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut state = WalState::default();
        let ids = segment::list(dir)?;
        for (i, id) in ids.iter().enumerate() {
            recover_segment(dir, *id, i + 1 == ids.len(), &mut state)?;
        }
        let broken = state.check();
        if !broken.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "raft log file in {}: the entries of groups {broken:?} have gaps",
                    dir.display()
                ),
            ));
        }
        segment::remove_reusable(dir)?;
        let tail = open_tail(dir, &mut state)?;
        let state = Arc::new(Mutex::new(state));
        let counters = Arc::new(Counters::default());
        let (tx, rx) = mpsc::channel(QUEUED_JOBS);
        let writer = Writer::new(
            dir.to_path_buf(),
            Arc::clone(&state),
            limits,
            tail,
            Arc::clone(&counters),
        );
        let thread = std::thread::Builder::new()
            .name("raft-wal".into())
            .spawn(move || writer.run(rx))?;
        Ok(Wal {
            shared: Arc::new(Shared {
                dir: dir.to_path_buf(),
                state,
                jobs: Some(tx),
                thread: Some(thread),
                counters,
            }),
        })
    }

    /// The log of `group` (a partition's group, or the catalog's).
    pub fn log(&self, group: u64) -> WalLog {
        WalLog::new(self.clone(), group)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// What the file holds now.
    pub fn stats(&self) -> WalStats {
        let state = lock(&self.shared.state);
        WalStats {
            segments: state.segments.len() as u64,
            disk_bytes: state.disk_bytes(),
            live_bytes: state.live_bytes(),
            groups: state.groups.len() as u64,
            relocated_bytes: self.shared.counters.relocated_bytes.load(Ordering::Relaxed),
            reused_segments: self.shared.counters.reused_segments.load(Ordering::Relaxed),
        }
    }

    /// Run `f` on the in-memory state.
    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&mut WalState) -> T) -> T {
        f(&mut lock(&self.shared.state))
    }

    /// Queue `records` of `group` for the writer and wait until they are
    /// written (and synced, when `sync`).
    pub(crate) async fn submit(
        &self,
        group: u64,
        records: Vec<Pending>,
        sync: bool,
    ) -> io::Result<()> {
        let Some(jobs) = &self.shared.jobs else {
            return Err(io::Error::other("raft log file closed"));
        };
        let (done, answer) = tokio::sync::oneshot::channel();
        let job = Job {
            group,
            records,
            sync,
            done,
        };
        jobs.send(job)
            .await
            .map_err(|_| io::Error::other("raft log writer stopped"))?;
        answer
            .await
            .map_err(|_| io::Error::other("raft log writer stopped"))?
    }

    /// `group`'s entries with `start <= index < end` (`end` None: to the
    /// end), read from the segments. Blocking.
    pub fn read(&self, group: u64, start: u64, end: Option<u64>) -> io::Result<Vec<LogEntry>> {
        let (locations, files) = self.with_state(|s| {
            let locations = s
                .groups
                .get(&group)
                .map(|g| g.range(start, end))
                .unwrap_or_default();
            let files: BTreeMap<u64, (Arc<File>, u32)> = locations
                .iter()
                .filter_map(|l| {
                    s.segments
                        .get(&l.segment)
                        .map(|f| (l.segment, (Arc::clone(&f.file), f.mask)))
                })
                .collect();
            (locations, files)
        });
        read_locations(&locations, &files)
    }
}

/// Decode the entries at `locations`, reading each record once.
fn read_locations(
    locations: &[Location],
    files: &BTreeMap<u64, (Arc<File>, u32)>,
) -> io::Result<Vec<LogEntry>> {
    let mut out = Vec::with_capacity(locations.len());
    let mut body: Option<((u64, u64), Vec<u8>)> = None;
    for l in locations {
        let key = (l.segment, l.record);
        if body.as_ref().is_none_or(|(k, _)| *k != key) {
            let (file, mask) = files.get(&l.segment).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("raft log segment {} is missing", l.segment),
                )
            })?;
            body = Some((
                key,
                segment::read_record(file, l.record, l.body_len, *mask)?,
            ));
        }
        if let Some((_, b)) = &body {
            out.push(
                entry_at(b, &l.span).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
            );
        }
    }
    Ok(out)
}

/// Read segment `id` back into `state`; a torn tail of the newest segment
/// (`newest`) is cut off, damage elsewhere is an error.
fn recover_segment(dir: &Path, id: u64, newest: bool, state: &mut WalState) -> io::Result<()> {
    let path = segment::path(dir, id);
    let scan = segment::scan(&path, id, |offset, body| {
        let record =
            Record::decode(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let body_len = u32::try_from(body.len()).map_err(io::Error::other)?;
        replay(state, id, offset, body_len, record);
        Ok(())
    })?;
    if scan.damaged {
        if !newest {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "raft log segment {} is damaged at byte {} and is not the newest",
                    path.display(),
                    scan.valid
                ),
            ));
        }
        // A reused file's old records follow the newest segment's last
        // one after every restart; a torn write only after a crash.
        tracing::info!(
            segment = %path.display(),
            at = scan.valid,
            "raft log: cutting the newest segment off after its last whole record \
             (a torn write a crash interrupted, or the old records of a reused file)"
        );
        let file = OpenOptions::new().write(true).open(&path)?;
        file.set_len(scan.valid)?;
        file.sync_all()?;
    }
    state.segments.insert(
        id,
        Segment {
            file: Arc::new(File::open(&path)?),
            bytes: scan.valid,
            mask: scan.mask,
        },
    );
    Ok(())
}

/// Record in `state` what `record` (read back from `segment` at `offset`)
/// did: the same effect the writer recorded when it wrote it.
fn replay(state: &mut WalState, segment: u64, offset: u64, body_len: u32, record: Record) {
    let located = |spans: Vec<record::EntrySpan>| -> Vec<Location> {
        spans
            .into_iter()
            .map(|span| Location {
                segment,
                record: offset,
                body_len,
                span,
            })
            .collect()
    };
    match record {
        Record::Entries { kind, group, spans } => {
            let g = state.group(group);
            if kind == record::Kind::Relocated {
                g.relocated(&located(spans));
            } else {
                g.appended(&located(spans));
            }
        }
        Record::Truncate { group, since } => state.group(group).truncated(since),
        Record::Purge { group, upto } => state.group(group).purged(upto),
        Record::Vote { group, vote } => state.group(group).vote = Some(vote),
        Record::Committed { group, committed } => state.group(group).committed = committed,
        Record::Forget { group } => state.forget(group),
    }
}

/// The segment to append to: the newest, or a new first one. A newest
/// segment whose header never reached the disk is replaced.
fn open_tail(dir: &Path, state: &mut WalState) -> io::Result<(u64, File, u64)> {
    if let Some((&id, seg)) = state.segments.iter().next_back() {
        if seg.bytes >= record::SEGMENT_MAGIC.len() as u64 {
            let file = OpenOptions::new()
                .write(true)
                .open(segment::path(dir, id))?;
            return Ok((id, file, seg.bytes));
        }
        state.segments.remove(&id);
        std::fs::remove_file(segment::path(dir, id))?;
    }
    let id = state.segments.keys().next_back().map_or(1, |id| id + 1);
    let created = segment::create(dir, id, &[], None)?;
    state.segments.insert(
        id,
        Segment {
            file: Arc::new(File::open(segment::path(dir, id))?),
            bytes: created.len,
            mask: record::mask(id),
        },
    );
    Ok((id, created.file, created.len))
}

#[cfg(test)]
mod tests;
