//! The one thread that writes a node's Raft log file: every group's
//! appends, truncations, purges and votes, in the order they were queued.
//!
//! Each turn takes every job queued (at most [`TURN_JOBS`]), writes their
//! records with one `write`, and when any of them must be durable (an
//! append, a truncation, a vote) syncs the file once for all of them; only
//! then does it record their effect in the shared [`WalState`] and answer
//! them. So the appends that a leader's batch call brings a follower's
//! groups at one moment share one write, one fdatasync and one wake-up of
//! this thread.
//!
//! After a turn it keeps the file bounded ([`Writer::maintain`]): a segment
//! that reached [`Limits::segment_bytes`] is closed (synced) and a new one
//! begun with a checkpoint of every group's vote, committed and purged ids;
//! segments older than every group's first entry are deleted; and when the
//! file holds more than twice what the groups still need (plus
//! [`Limits::slack_bytes`]), the entries the oldest segment still holds are
//! written again at the end ([`Kind::Relocated`]) so it can go: at most a
//! segment's worth a rotation, so the file stays within about twice what
//! the groups hold whatever they do. A group that stopped writing (an
//! idle partition, a replica that moved away) therefore never holds the
//! whole file on disk.
//!
//! Segments are preallocated: the next segment is begun in a spare file,
//! so no sync has to write the file's new size. The spare is a segment no
//! group needs any more, kept instead of deleted when collected (up to
//! [`segment::REUSABLE`]; see [`segment`], "Reuse"), or, while none is, a
//! file that a helper thread fills with zeros and syncs
//! ([`segment::prepare_spare`]) once the segment being written holds
//! [`PREPARE_AFTER`] bytes. A segment
//! that grows (the first of a new log, or one reopened after a torn
//! write was cut off) is closed as soon as a spare is ready.
//!
//! A failed write or sync leaves the file's state unknown (after a failed
//! fsync the kernel may have dropped the dirty pages), so the writer fails
//! every later job: the node must be restarted, and recovery reads back
//! what reached the disk.

use super::record::{Framed, Kind, entry_bytes, mask, mask_frames};
use super::segment;
use super::state::{Location, WalState};
use crate::types::{LogId, NodeId};
use openraft::Vote;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use tokio::sync::{mpsc, oneshot};

/// Most jobs one turn takes.
pub const TURN_JOBS: usize = 1024;

/// Bytes a segment holds before the spare for the next one is prepared
/// (or half a segment, when segments are smaller): a log that never gets
/// this far (a test's, an idle node's) never writes a spare.
pub const PREPARE_AFTER: u64 = 1 << 20;

/// Largest relocated record body (a group's entries are relocated in
/// records of about this size).
const RELOCATE_RECORD_BYTES: usize = 8 << 20;

/// Segments' worth a rotation relocates at most while the file is
/// bloated ([`Writer::unbloat`]).
const RELOCATE_SEGMENTS: u64 = 2;

/// Sizes that bound the file.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A segment that reaches this size is closed and a new one begun.
    pub segment_bytes: u64,
    /// What the file may hold beyond twice the groups' entries before the
    /// oldest segment's entries are relocated.
    pub slack_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            segment_bytes: 64 << 20,
            slack_bytes: 256 << 20,
        }
    }
}

/// What a record does to its group once written.
pub enum Effect {
    /// Entries appended.
    Appended,
    /// Copies of entries written again, in place of the originals.
    Relocated,
    /// Entries from this index on removed.
    Truncated(u64),
    /// Entries up to this id removed.
    Purged(LogId),
    /// A vote saved.
    Voted(Vote<NodeId>),
    /// A committed id saved.
    Committed(Option<LogId>),
    /// Everything of the group dropped.
    Forgotten,
}

/// A record to write and what it does.
pub struct Pending {
    /// The record.
    pub framed: Framed,
    /// Its effect.
    pub effect: Effect,
}

/// One caller's records, all of one group, and whom to answer.
pub struct Job {
    /// The group.
    pub group: u64,
    /// Its records, in order.
    pub records: Vec<Pending>,
    /// Whether they must be durable before the answer.
    pub sync: bool,
    /// The answer.
    pub done: oneshot::Sender<io::Result<()>>,
}

/// The writer thread's state.
pub struct Writer {
    dir: PathBuf,
    state: Arc<Mutex<WalState>>,
    limits: Limits,
    file: File,
    segment: u64,
    len: u64,
    /// The size the segment had on disk when it was begun: appends below
    /// it write into preallocated blocks.
    preallocated: u64,
    /// What the segment's records' CRCs are stored XORed with.
    mask: u32,
    spare: Spare,
    /// Files of segments no group needed, in the order they were kept
    /// (of one collection, the newest first): the next segments are begun
    /// in them, from the front, before the zero-filled spare.
    reusable: std::collections::VecDeque<PathBuf>,
    failed: Option<String>,
    counters: Arc<Counters>,
}

/// What the writer counts, for [`super::WalStats`].
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes written by relocations since the file was opened.
    pub relocated_bytes: AtomicU64,
    /// Doomed segments made the spare since the file was opened.
    pub reused_segments: AtomicU64,
}

/// The spare file the next segment is begun in.
enum Spare {
    /// None prepared.
    None,
    /// A helper thread is filling it.
    Preparing(JoinHandle<io::Result<()>>),
    /// Filled and synced, or a segment no group needed, reused.
    Ready,
    /// Preparing it failed while segment (the id) was written; tried again
    /// with the next segment.
    Failed(u64),
}

/// Lock `state`, whatever a panicking holder left.
pub fn lock(state: &Mutex<WalState>) -> MutexGuard<'_, WalState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    /// A writer appending to segment `segment` (open as `file`, `len`
    /// bytes long) of the log in `dir`.
    pub fn new(
        dir: PathBuf,
        state: Arc<Mutex<WalState>>,
        limits: Limits,
        (segment, file, len): (u64, File, u64),
        counters: Arc<Counters>,
    ) -> Writer {
        let preallocated = file.metadata().map_or(len, |m| m.len());
        let mask = lock(&state)
            .segments
            .get(&segment)
            .map_or(mask(segment), |s| s.mask);
        Writer {
            dir,
            state,
            limits,
            file,
            segment,
            len,
            preallocated,
            mask,
            spare: Spare::None,
            reusable: std::collections::VecDeque::new(),
            failed: None,
            counters,
        }
    }

    /// Serve `jobs` until every sender is gone.
    pub fn run(mut self, mut jobs: mpsc::Receiver<Job>) {
        let mut turn = Vec::with_capacity(64);
        while let Some(first) = jobs.blocking_recv() {
            turn.push(first);
            while turn.len() < TURN_JOBS {
                match jobs.try_recv() {
                    Ok(job) => turn.push(job),
                    Err(_) => break,
                }
            }
            let result = self.write_turn(&mut turn);
            for job in turn.drain(..) {
                let answer = match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(io::Error::other(e.clone())),
                };
                let _ = job.done.send(answer);
            }
            if result.is_ok()
                && let Err(e) = self.maintain()
            {
                self.fail(&e);
            }
        }
        if let Spare::Preparing(helper) = std::mem::replace(&mut self.spare, Spare::None) {
            let _ = helper.join();
        }
    }

    /// Write, sync if needed, and record the effects of `turn`'s jobs.
    fn write_turn(&mut self, turn: &mut [Job]) -> Result<(), String> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut effects = Vec::new();
        let mut at = self.len;
        for job in turn.iter_mut() {
            for pending in job.records.drain(..) {
                let len = pending.framed.bytes.len() as u64;
                effects.push((job.group, at, pending));
                at += len;
            }
        }
        let sync = turn.iter().any(|j| j.sync);
        // One write for the turn: a lone record (the common turn) as it
        // is, several joined.
        let written = match effects.as_mut_slice() {
            [(_, _, only)] => self.append(&mut only.framed.bytes, sync),
            many => {
                let mut joined = Vec::with_capacity(usize::try_from(at - self.len).unwrap_or(0));
                for (_, _, p) in many {
                    joined.extend_from_slice(&p.framed.bytes);
                }
                self.append(&mut joined, sync)
            }
        };
        if let Err(e) = written {
            return Err(self.fail(&e));
        }
        let mut state = lock(&self.state);
        for (group, at, pending) in effects {
            apply(&mut state, self.segment, group, at, pending);
        }
        if let Some(s) = state.segments.get_mut(&self.segment) {
            s.bytes = self.len;
        }
        Ok(())
    }

    /// Append `buf` (whole framed records, their CRCs masked here) to the
    /// segment (written at its offset: a preallocated segment is longer
    /// than what it holds), and sync it when `sync`.
    fn append(&mut self, buf: &mut [u8], sync: bool) -> io::Result<()> {
        mask_frames(buf, self.mask);
        self.file.write_all_at(buf, self.len)?;
        self.len += buf.len() as u64;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Remember that the file failed; every later job gets this error.
    fn fail(&mut self, e: &io::Error) -> String {
        let message = format!("raft log file failed (restart the node): {e}");
        tracing::error!("{message}");
        self.failed = Some(message.clone());
        message
    }

    /// Begin a new segment when this one is full, then delete what no group
    /// needs, and when the file is bloated relocate what the oldest
    /// segments still hold so they can go too ([`Writer::unbloat`]).
    pub fn maintain(&mut self) -> io::Result<()> {
        let spare = self.spare_ready();
        if self.len < self.limits.segment_bytes && !(spare && self.len >= self.preallocated) {
            if !spare && self.len >= PREPARE_AFTER.min(self.limits.segment_bytes / 2) {
                self.prepare_spare();
            }
            return Ok(());
        }
        self.rotate(spare)?;
        self.collect()?;
        self.unbloat()
    }

    /// While the file is bloated, relocate what its oldest segments hold,
    /// oldest first, up to [`RELOCATE_SEGMENTS`] segments' worth: a
    /// segment the groups still need keeps every later one on disk, so
    /// copying it frees the dead run behind it, and copying more than the
    /// turn wrote makes headway even when the oldest segments are full of
    /// live entries (copying one freed nothing while a segment was
    /// written). The copies are synced before their originals go.
    fn unbloat(&mut self) -> io::Result<()> {
        let budget = RELOCATE_SEGMENTS * self.limits.segment_bytes;
        let mut copied = 0;
        while copied < budget && self.bloated() {
            let oldest = lock(&self.state).segments.keys().next().copied();
            let Some(oldest) = oldest.filter(|s| *s != self.segment) else {
                break;
            };
            copied += self.relocate(oldest)?;
            self.file.sync_data()?;
            self.collect()?;
            if lock(&self.state).segments.contains_key(&oldest) {
                break;
            }
        }
        Ok(())
    }

    /// Whether a spare is ready to begin the next segment in (taking the
    /// helper's result if it just finished).
    fn spare_ready(&mut self) -> bool {
        if let Spare::Preparing(helper) = &self.spare
            && helper.is_finished()
            && let Spare::Preparing(helper) = std::mem::replace(&mut self.spare, Spare::None)
        {
            self.spare = match helper.join() {
                Ok(Ok(())) => Spare::Ready,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "raft log: preparing a spare segment failed");
                    Spare::Failed(self.segment)
                }
                Err(_) => Spare::Failed(self.segment),
            };
        }
        !self.reusable.is_empty() || matches!(self.spare, Spare::Ready)
    }

    /// Start filling the spare file on a helper thread, unless one is
    /// being filled or filling it failed during this segment.
    fn prepare_spare(&mut self) {
        match self.spare {
            Spare::None => {}
            Spare::Failed(segment) if segment != self.segment => {}
            _ => return,
        }
        let (dir, bytes) = (self.dir.clone(), self.limits.segment_bytes);
        self.spare = match std::thread::Builder::new()
            .name("raft-wal-spare".into())
            .spawn(move || segment::prepare_spare(&dir, bytes))
        {
            Ok(helper) => Spare::Preparing(helper),
            Err(_) => Spare::Failed(self.segment),
        };
    }

    /// Sync this segment (cut to what it holds, if it was preallocated
    /// further: old records of a reused file may follow only the newest
    /// segment's, where recovery cuts them off) and begin the next with a checkpoint of every group, in
    /// the spare file when `spare`.
    fn rotate(&mut self, spare: bool) -> io::Result<()> {
        if self.file.metadata()?.len() > self.len {
            self.file.set_len(self.len)?;
            self.file.sync_all()?;
        } else {
            self.file.sync_data()?;
        }
        let checkpoint = checkpoint(&lock(&self.state))?;
        let next = self.segment + 1;
        let begun_in = if !spare {
            None
        } else if let Some(reused) = self.reusable.pop_front() {
            Some(reused)
        } else {
            self.spare = Spare::None;
            Some(self.dir.join(segment::SPARE))
        };
        let created = segment::create(&self.dir, next, &checkpoint, begun_in.as_deref())?;
        let (file, len) = (created.file, created.len);
        let reader = File::open(segment::path(&self.dir, next))?;
        lock(&self.state).segments.insert(
            next,
            super::state::Segment {
                file: Arc::new(reader),
                bytes: len,
                mask: mask(next),
            },
        );
        self.preallocated = created.allocated;
        self.mask = mask(next);
        self.file = file;
        self.segment = next;
        self.len = len;
        Ok(())
    }

    /// Delete the segments before the oldest one a group needs (never the
    /// one being written). Everything written so far is synced (a rotation
    /// or a relocation just synced), so no purge these deletions rest on
    /// can be lost.
    fn collect(&mut self) -> io::Result<()> {
        let doomed: Vec<(u64, super::state::Segment)> = {
            let mut state = lock(&self.state);
            let keep = state
                .oldest_needed()
                .unwrap_or(self.segment)
                .min(self.segment);
            let ids: Vec<u64> = state.segments.range(..keep).map(|(id, _)| *id).collect();
            ids.into_iter()
                .filter_map(|id| state.segments.remove(&id).map(|s| (id, s)))
                .collect()
        };
        if doomed.is_empty() {
            return Ok(());
        }
        // The newest doomed segments are the likeliest still in the page
        // cache: they are kept first, and begun in first.
        for (id, doomed) in doomed.into_iter().rev() {
            if self.reusable(&doomed) {
                let reuse = segment::reuse_path(&self.dir, id);
                std::fs::rename(segment::path(&self.dir, id), &reuse)?;
                self.reusable.push_back(reuse);
                self.counters
                    .reused_segments
                    .fetch_add(1, Ordering::Relaxed);
            } else {
                std::fs::remove_file(segment::path(&self.dir, id))?;
            }
        }
        // A deleted segment must not come back after a crash while a later
        // one it depended on (say, holding a truncation) stays deleted.
        segment::sync_dir(&self.dir)
    }

    /// Whether `doomed` (a segment no group needs, out of the state) may
    /// be kept to be reused: fewer than [`segment::REUSABLE`] are, nobody
    /// reads it
    /// (a reader holds its file while it reads; it could not be handed
    /// out again, being out of the state), and it is a whole segment long,
    /// so the next segment is preallocated.
    fn reusable(&self, doomed: &super::state::Segment) -> bool {
        self.reusable.len() < segment::REUSABLE
            && Arc::strong_count(&doomed.file) == 1
            && doomed
                .file
                .metadata()
                .is_ok_and(|m| m.len() >= self.limits.segment_bytes)
    }

    /// Whether the file holds more than twice what the groups need, plus
    /// the slack.
    fn bloated(&self) -> bool {
        let state = lock(&self.state);
        state.disk_bytes()
            > state
                .live_bytes()
                .saturating_mul(2)
                .saturating_add(self.limits.slack_bytes)
    }

    /// Write the entries `segment` still holds again at the end of the
    /// file, each group's in records of about [`RELOCATE_RECORD_BYTES`].
    /// At most a segment's worth is copied (a turn relocates a few
    /// segments at most, so it is bounded however large a group's log
    /// is); returns the bytes written.
    fn relocate(&mut self, segment: u64) -> io::Result<u64> {
        let before = self.len;
        let (found, file, mask) = {
            let state = lock(&self.state);
            let Some((file, mask)) = state
                .segments
                .get(&segment)
                .map(|s| (Arc::clone(&s.file), s.mask))
            else {
                return Ok(0);
            };
            (state.entries_in(segment), file, mask)
        };
        for (group, locations) in found {
            let mut chunk: Vec<(LogId, Vec<u8>)> = Vec::new();
            let mut chunk_bytes = 0;
            let mut body: Option<(u64, Vec<u8>)> = None;
            for l in &locations {
                if body.as_ref().is_none_or(|(at, _)| *at != l.record) {
                    body = Some((
                        l.record,
                        segment::read_record(&file, l.record, l.body_len, mask)?,
                    ));
                }
                let Some((_, b)) = &body else { continue };
                let bytes = entry_bytes(b, &l.span).map_err(io::Error::other)?;
                chunk_bytes += bytes.len();
                chunk.push((l.span.log_id, bytes.to_vec()));
                if chunk_bytes >= RELOCATE_RECORD_BYTES {
                    self.write_relocated(group, &mut chunk)?;
                    chunk_bytes = 0;
                }
            }
            self.write_relocated(group, &mut chunk)?;
        }
        Ok(self.len - before)
    }

    /// Write `chunk` (taken) as one relocated record of `group`.
    fn write_relocated(&mut self, group: u64, chunk: &mut Vec<(LogId, Vec<u8>)>) -> io::Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        let mut framed =
            Framed::encoded_entries(Kind::Relocated, group, chunk).map_err(io::Error::other)?;
        chunk.clear();
        let at = self.len;
        self.append(&mut framed.bytes, false)?;
        self.counters.relocated_bytes.fetch_add(
            framed.bytes.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut state = lock(&self.state);
        apply(
            &mut state,
            self.segment,
            group,
            at,
            Pending {
                framed,
                effect: Effect::Relocated,
            },
        );
        if let Some(s) = state.segments.get_mut(&self.segment) {
            s.bytes = self.len;
        }
        Ok(())
    }
}

/// Record in `state` what `pending`, written at offset `at` of `segment`,
/// does to `group`.
pub fn apply(state: &mut WalState, segment: u64, group: u64, at: u64, pending: Pending) {
    let body_len =
        u32::try_from(pending.framed.bytes.len() - super::record::FRAME_HEADER).unwrap_or(u32::MAX);
    let locations = || -> Vec<Location> {
        pending
            .framed
            .spans
            .iter()
            .map(|span| Location {
                segment,
                record: at,
                body_len,
                span: *span,
            })
            .collect()
    };
    if let Effect::Forgotten = pending.effect {
        state.forget(group);
        return;
    }
    let g = state.group(group);
    match pending.effect {
        Effect::Appended => g.appended(&locations()),
        Effect::Relocated => g.relocated(&locations()),
        Effect::Truncated(since) => g.truncated(since),
        Effect::Purged(upto) => g.purged(upto),
        Effect::Voted(vote) => g.vote = Some(vote),
        Effect::Committed(c) => g.committed = c,
        Effect::Forgotten => {}
    }
}

/// The records that open a new segment: every group's vote, committed id
/// and purged id, so the segments before it may be deleted without losing
/// them.
fn checkpoint(state: &WalState) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    for (id, g) in &state.groups {
        let mut records = Vec::new();
        if let Some(v) = &g.vote {
            records.push(Framed::vote(*id, v));
        }
        if g.committed.is_some() {
            records.push(Framed::committed(*id, &g.committed));
        }
        if let Some(p) = &g.purged {
            records.push(Framed::purge(*id, p));
        }
        for r in records {
            bytes.extend_from_slice(&r.map_err(io::Error::other)?.bytes);
        }
    }
    Ok(bytes)
}
