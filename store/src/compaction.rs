//! Compaction: reclaim volume space left behind by overwrites and deletes.
//!
//! Every partition keeps, per segment, the bytes of records that live
//! objects still point at (a counter row updated in the same batch as the
//! objects). A sealed segment whose garbage share passes a threshold is
//! rewritten: its records are scanned in order (each header verified), every
//! record the index still points at is copied into an open segment and the
//! object is re-pointed through the commit thread (applied only if the
//! object still points at the old copy, so a concurrent overwrite wins), and
//! once nothing points into the segment any more its file is deleted.
//! Readers that already opened the old file finish from their open handle;
//! readers that looked up the old location just before it moved retry once
//! (see `Partition::get`).
//!
//! A segment that holds a record whose commit has not landed yet (a writer
//! released it, it was sealed, the commit is still queued) is skipped: its
//! live-bytes counter does not count that record yet, so it would look like
//! garbage. See the pending count in [`crate::volume`]. The check comes
//! before the counter is read, and a sealed segment never gains pending
//! records, so "none pending, then no live bytes" is final.
//!
//! Replicated partitions: only the leader compacts, and only after it
//! applied everything committed before the pass (a read barrier), so the
//! counters and the pending count it reads cover every entry that could
//! point into a sealed segment (new records go only to the leader's own
//! open segments). A copied record is shipped to the group like a PUT's
//! body before its relocation is committed, and an emptied segment is
//! deleted by a log entry ([`crate::replication::Group::drop_segment`])
//! that every replica applies after the relocations before it, so the
//! replicas' segments stay the same files. A pass that loses the
//! leadership half-way stops; what it shipped but did not commit is
//! garbage the next leader's passes reclaim.
//!
//! When free space runs low ([`crate::space::Space::is_low`]), a pass every
//! [`LOW_SPACE_EVERY`] seals idle open segments and compacts with a lower
//! garbage threshold, so deleting objects on a full disk gives the space
//! back within seconds and writes resume.

use crate::commit::{Op, Outcome, RelocTarget, VolumeRef, read_live};
use crate::error::{StoreError, StoreResult};
use crate::multipart::{PartRecord, decode, part_key, split_part_header_key};
use crate::partition::Partition;
use crate::record::{DataLoc, StoredObject, object_key};
use crate::volume::{FLAG_PART, RangeReader, RecordHeader, RecordWriter, read_header, record_len};
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

/// How often free space is checked for a low-space compaction pass.
pub const LOW_SPACE_EVERY: Duration = Duration::from_secs(1);
/// Garbage share from which a segment is compacted while space is low.
pub const LOW_SPACE_MIN_GARBAGE: f64 = 0.25;

/// What one compaction pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Segments rewritten and deleted.
    pub segments: u64,
    /// Records copied to new segments.
    pub records_moved: u64,
    /// Bytes of segment files deleted.
    pub bytes_freed: u64,
}

/// Compact every sealed segment of `p` whose garbage share is at least
/// `min_garbage` (0.0..=1.0). With `seal_idle`, idle open segments are
/// sealed first so that they qualify too.
pub async fn compact_partition(
    p: &Partition,
    min_garbage: f64,
    seal_idle: bool,
) -> StoreResult<CompactionReport> {
    let mut report = CompactionReport::default();
    // A replicated partition is compacted by its leader alone, once it
    // has applied everything committed (so the counters it reads are
    // final for its sealed segments: module doc, "Replicated partitions").
    if !p.writes_here().await {
        return Ok(report);
    }
    if seal_idle {
        p.volumes().seal_idle();
    }
    for (segment, len, live) in candidates(p, min_garbage)? {
        // A copy that cannot fit would fail half-way and leave its partial
        // bytes behind; a later pass, with more space freed, takes it.
        if live > 0 && live.saturating_add(p.space().reserve() / 4) > p.space().available() {
            tracing::debug!(partition = %p.id(), segment, live, "not enough free space to compact");
            continue;
        }
        match move_live_records(p, segment, len).await {
            Ok(n) => report.records_moved += n,
            Err(e) if lost_leadership(p, &e) => return Ok(report),
            Err(e) => return Err(e),
        }
        if p.volumes().has_pending(segment) || read_live(p.index(), segment)? > 0 {
            tracing::warn!(partition = %p.id(), segment, "segment still referenced after compaction; kept");
            continue;
        }
        match remove_segment(p, segment).await {
            Ok(()) => {}
            Err(e) if lost_leadership(p, &e) => return Ok(report),
            Err(e) => return Err(e),
        }
        report.segments += 1;
        report.bytes_freed += len;
        // The next fit check, and writes waiting on the reserve, should
        // see the space at once.
        p.space().refresh();
    }
    Ok(report)
}

/// Whether `e` says this replica no longer leads `p`'s group (the pass
/// stops there; the next leader's passes take what is left).
fn lost_leadership(p: &Partition, e: &StoreError) -> bool {
    p.group().is_some() && matches!(e, StoreError::NotLeader(_) | StoreError::Unavailable(_))
}

/// Delete an emptied segment: here, or through the partition's group on
/// every replica.
async fn remove_segment(p: &Partition, segment: u64) -> StoreResult<()> {
    match p.group() {
        None => p.volumes().remove(segment),
        Some(group) => group.drop_segment(segment).await,
    }
}

/// Sealed segments with at least `min_garbage` garbage and no pending
/// record, as (segment, file length, live bytes), most garbage first (so a
/// pass on a full disk frees space before it needs any for copies).
fn candidates(p: &Partition, min_garbage: f64) -> StoreResult<Vec<(u64, u64, u64)>> {
    let mut out = Vec::new();
    for (segment, len) in p.volumes().sealed()? {
        // Pending first, then the counter (see the module doc).
        if p.volumes().has_pending(segment) {
            continue;
        }
        let live = u64::try_from(read_live(p.index(), segment)?.max(0)).unwrap_or(0);
        let garbage = len.saturating_sub(live);
        if len > 0 && (garbage as f64) < min_garbage * len as f64 {
            continue;
        }
        out.push((segment, len, live));
    }
    out.sort_by_key(|&(segment, len, live)| (std::cmp::Reverse(len.saturating_sub(live)), segment));
    Ok(out)
}

async fn move_live_records(p: &Partition, segment: u64, len: u64) -> StoreResult<u64> {
    let file = p.volumes().file(segment)?;
    let mut offset = 0;
    let mut moved = 0;
    while let Some(h) = read_header(&file, offset, len)? {
        let rl = record_len(h.key.len() as u64, h.data_len);
        if let Some(target) = referrer(p, &h, segment, offset)? {
            let to = copy_record(p, &file, &h, offset)?;
            let shipped = DataLoc::Volume {
                segment: to.segment,
                offset: to.offset,
                record_len: to.record_len,
            };
            p.ship_record(&shipped).await?;
            let op = Op::Relocate {
                target,
                from: (segment, offset),
                to,
            };
            if matches!(
                p.submit(op, vec![to.segment]).await?,
                Outcome::Relocated(true)
            ) {
                moved += 1;
            }
        }
        offset += rl;
    }
    Ok(moved)
}

/// What still refers to the record at (segment, offset), if anything: the
/// object (single record or one of its parts) or a pending upload's part.
fn referrer(
    p: &Partition,
    h: &RecordHeader,
    segment: u64,
    offset: u64,
) -> StoreResult<Option<RelocTarget>> {
    let (key, part) = if h.flags & FLAG_PART != 0 {
        let (key, upload, n) = split_part_header_key(&h.key)
            .ok_or_else(|| crate::error::StoreError::Corrupt("part record key field".into()))?;
        (key, Some((upload, n)))
    } else {
        (h.key.as_slice(), None)
    };
    if let Some(raw) = p.index().get(&object_key(h.bucket, key))?
        && StoredObject::decode(&raw)?.data.uses(segment, offset)
    {
        let key = String::from_utf8_lossy(key).into_owned();
        return Ok(Some(RelocTarget::Object {
            bucket: h.bucket,
            key,
        }));
    }
    let Some((upload, n)) = part else {
        return Ok(None);
    };
    let Some(raw) = p.index().get(&part_key(&upload, n))? else {
        return Ok(None);
    };
    let rec: PartRecord = decode(&raw)?;
    let here = (rec.loc.segment, rec.loc.offset) == (segment, offset);
    Ok(here.then_some(RelocTarget::Part { upload, part: n }))
}

/// Copy one record (verifying every block) into an open segment.
fn copy_record(
    p: &Partition,
    file: &Arc<File>,
    h: &RecordHeader,
    offset: u64,
) -> StoreResult<VolumeRef> {
    let mut reader = RangeReader::new(
        Arc::clone(file),
        offset,
        h.key.len() as u64,
        h.data_len,
        0,
        h.data_len,
    );
    let mut seg = p.volumes().take_writer()?;
    // Compaction may use the reserve: it is what the reserve is for.
    p.space()
        .note_written(record_len(h.key.len() as u64, h.data_len));
    let result = (|| {
        let mut w = RecordWriter::begin_with_flags(&mut seg, h.bucket, &h.key, h.flags)?;
        while let Some(chunk) = reader.next_chunk()? {
            w.push(&chunk)?;
        }
        w.finish()
    })();
    p.volumes().release(seg);
    match result? {
        DataLoc::Volume {
            segment,
            offset,
            record_len,
        } => Ok(VolumeRef {
            segment,
            offset,
            record_len,
        }),
        other => Err(crate::error::StoreError::Engine(format!(
            "copy produced {other:?}"
        ))),
    }
}
