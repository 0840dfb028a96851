//! Data volumes: per-partition, append-only segment files holding the bytes
//! of objects too large to inline in their metadata record.
//!
//! No file per object: a partition appends records to a few open segments
//! (one per concurrent writer, handed out from a pool) and seals a segment
//! once it passes `segment_max`. A record is
//!
//! ```text
//! header  magic u32 "LWV1" | version u8 | flags u8 | key_len u16 | bucket u64
//!         | data_len u64 | block_size u32 | header_crc u32 (CRC32C of the
//!         previous 28 bytes and the key)
//! key     key_len bytes
//! data    data_len bytes
//! table   one CRC32C (u32 LE) per 64 KiB block of data
//! trailer CRC32C of the table (u32 LE)
//! ```
//!
//! `flags` is 0 for an object's data and [`FLAG_PART`] for a multipart part,
//! whose key field is then the object key followed by the 16-byte upload id
//! and the part number (u32 BE), so compaction can find what refers to it.
//!
//! Reads verify the CRC of every block they touch, so a ranged GET reads and
//! checks only the blocks it needs. The header is written last: a record cut
//! short by a crash never carries a valid header, and a compaction scan of a
//! segment stops at the first record that does not verify. Durability is the
//! commit thread's job: it fdatasyncs the segments a batch wrote before it
//! commits the metadata that points into them.
//!
//! Sealing and deletion: a segment is sealed (no more appends) once it
//! passes `segment_max`, when compaction seals idle segments, or when an
//! fsync of it failed (its page-cache state is then unknown, so nothing is
//! ever appended after). Compaction deletes only sealed segments, and never
//! one holding a *pending* record: a record that is complete in the file but
//! whose commit has not landed yet. A writer's segment can be sealed before
//! its commit (the record that crossed the size limit, or an idle segment
//! sealed while the commit is queued); without the pending count, a
//! compaction pass in that gap sees no live bytes, deletes the file, and the
//! commit then acknowledges an object whose data is gone.
//! [`RecordWriter::finish`] counts the record as pending, and the commit
//! thread uncounts it once its request is done ([`VolumeSet::committed`]),
//! committed or failed. A sealed segment never gains pending records (only
//! lent, unsealed segments are appended to), so a compaction that finds
//! none, and then reads the live-bytes counter, reads a final answer.
//!
//! On a replicated partition the same rules hold at the leader, which
//! alone compacts; a segment is then deleted by an entry of the group's
//! log that every replica applies in order ([`VolumeSet::drop_segment`]),
//! so the replicas' segments stay the same files (crate::compaction).

use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::record::DataLoc;
use bytes::Bytes;
use crc_fast::{CrcAlgorithm, Digest};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Data block size covered by one CRC.
pub const BLOCK: u64 = BLOCK_USIZE as u64;
/// Fixed part of a record header.
pub const HEADER_FIXED: u64 = HEADER_FIXED_USIZE as u64;
const HEADER_FIXED_USIZE: usize = 32;
const BLOCK_USIZE: usize = 64 * 1024;
const MAGIC: u32 = 0x4c57_5631;
/// Header flag of a multipart part record.
pub const FLAG_PART: u8 = 1;
const VERSION: u8 = 1;
/// Bytes gathered in memory before one positional write.
const WRITE_BUF: usize = 256 * 1024;
/// Blocks read (and verified) per step of a read stream.
const READ_BLOCKS: u64 = 4;

/// CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

fn finish_crc(d: &Digest) -> u32 {
    // CRC32C's value is 32 bits wide; the upper half of the u64 is zero.
    u32::try_from(d.finalize() & 0xffff_ffff).unwrap_or(0)
}

/// fsync a directory so entries created or removed in it are durable.
pub fn sync_dir(dir: &Path) -> StoreResult<()> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("seg-{id:016x}.dat"))
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("seg-")?.strip_suffix(".dat")?;
    u64::from_str_radix(hex, 16).ok()
}

/// Number of CRC blocks for `size` data bytes.
pub fn block_count(size: u64) -> u64 {
    size.div_ceil(BLOCK)
}

/// Total on-disk length of a record.
pub fn record_len(key_len: u64, size: u64) -> u64 {
    HEADER_FIXED + key_len + size + 4 * block_count(size) + 4
}

/// Complete records per segment whose commit has not landed yet.
#[derive(Default)]
struct Pending(Mutex<HashMap<u64, u64>>);

impl Pending {
    fn add(&self, id: u64) {
        *self.0.lock().entry(id).or_default() += 1;
    }
}

/// An open segment lent to one writer at a time.
pub struct SegmentWriter {
    id: u64,
    file: Arc<File>,
    len: u64,
    pending: Arc<Pending>,
}

impl SegmentWriter {
    /// The segment number.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// The segments of one partition.
pub struct VolumeSet {
    dir: PathBuf,
    segment_max: u64,
    next_id: AtomicU64,
    /// Every segment that exists, for readers and syncs.
    files: RwLock<HashMap<u64, Arc<File>>>,
    /// Unsealed segments not lent out right now.
    free: Mutex<Vec<SegmentWriter>>,
    /// Unsealed segments (free or lent out): compaction leaves them alone.
    /// Lock order: never hold `active` while taking `free`.
    active: Mutex<HashSet<u64>>,
    /// Records not yet committed, per segment: compaction keeps those
    /// segments.
    pending: Arc<Pending>,
    /// For a replicated partition, the leader term this replica writes
    /// under (0: it does not lead); [`UNREPLICATED`] otherwise.
    term: AtomicU64,
}

/// [`VolumeSet`]'s term when its partition is not replicated: any
/// segment may be written.
const UNREPLICATED: u64 = u64::MAX;

impl VolumeSet {
    /// Open the segments in `dir` (created if missing). Segments found on
    /// disk are sealed: new writes always go to new segments, so a record
    /// torn by a crash is never appended after.
    pub fn open(dir: &Path, segment_max: u64) -> StoreResult<VolumeSet> {
        std::fs::create_dir_all(dir)?;
        let mut files = HashMap::new();
        let mut max_id = 0;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let Some(id) = entry.file_name().to_str().and_then(parse_segment_name) else {
                continue;
            };
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(entry.path())?;
            files.insert(id, Arc::new(file));
            max_id = max_id.max(id);
        }
        Ok(VolumeSet {
            dir: dir.to_path_buf(),
            segment_max,
            next_id: AtomicU64::new(max_id + 1),
            files: RwLock::new(files),
            free: Mutex::new(Vec::new()),
            active: Mutex::new(HashSet::new()),
            pending: Arc::default(),
            term: AtomicU64::new(UNREPLICATED),
        })
    }

    /// Mark the partition replicated: from now on segments are written
    /// only under the term given to [`VolumeSet::begin_term`].
    pub fn replicated(&self) {
        self.term.store(0, Ordering::Relaxed);
    }

    /// Whether the partition is replicated (its segments are then
    /// written and deleted only as its group's log says: its replicas'
    /// volumes, and the snapshots sent from them, stay byte-identical at
    /// every committed position).
    pub fn is_replicated(&self) -> bool {
        self.term.load(Ordering::Relaxed) != UNREPLICATED
    }

    /// Whether a writer may append to segment `id` now: always, unless
    /// the partition is replicated and `id` is not of the term this
    /// replica leads in.
    fn writable(&self, id: u64) -> bool {
        let term = self.term.load(Ordering::Relaxed);
        term == UNREPLICATED || (term != 0 && crate::replication::segment_epoch(id) == term)
    }

    /// Borrow a segment to append one record to.
    pub fn take_writer(&self) -> StoreResult<SegmentWriter> {
        loop {
            let Some(w) = self.free.lock().pop() else {
                break;
            };
            // A segment sealed while it sat in the pool (failed fsync) is
            // never appended to again.
            if self.active.lock().contains(&w.id) && self.writable(w.id) {
                return Ok(w);
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if !self.writable(id) {
            // Not this replica's term (it does not lead, or a newer
            // leader's segments were applied here): its bytes would land
            // in a segment another leader owns.
            return Err(StoreError::Unavailable(
                "this replica does not lead its partition now; retry".into(),
            ));
        }
        let path = segment_path(&self.dir, id);
        let file = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?,
        );
        // The directory entry must be durable before any record in it is acknowledged.
        sync_dir(&self.dir)?;
        // Active before it is a file of the set: `sealed` reads the files
        // first, so it never sees a new segment as sealed (and compaction
        // never deletes one a writer is about to append to).
        self.active.lock().insert(id);
        self.files.write().insert(id, Arc::clone(&file));
        Ok(SegmentWriter {
            id,
            file,
            len: 0,
            pending: Arc::clone(&self.pending),
        })
    }

    /// Give a segment back; it is sealed once past the size limit (or if
    /// it was sealed while lent out).
    pub fn release(&self, w: SegmentWriter) {
        let keep = {
            let mut active = self.active.lock();
            if w.len >= self.segment_max {
                active.remove(&w.id);
            }
            active.contains(&w.id)
        };
        if keep {
            self.free.lock().push(w);
        }
    }

    /// Start writing under leader term `term` (a replicated partition
    /// whose replica just became leader): idle segments of earlier terms
    /// are sealed and new segments get ids of this term's epoch
    /// ([`crate::replication::segment_epoch`]), so no two leaders ever
    /// append to one segment.
    pub fn begin_term(&self, term: u64) {
        let first = term << crate::replication::EPOCH_SHIFT;
        self.next_id.fetch_max(first, Ordering::Relaxed);
        self.term.store(term, Ordering::Relaxed);
        let idle: Vec<SegmentWriter> = std::mem::take(&mut *self.free.lock());
        let (keep, old): (Vec<_>, Vec<_>) = idle
            .into_iter()
            .partition(|w| crate::replication::segment_epoch(w.id) == term);
        let mut active = self.active.lock();
        for w in old {
            active.remove(&w.id);
        }
        drop(active);
        self.free.lock().extend(keep);
    }

    /// Write `bytes` at `offset` of segment `id`, creating the segment
    /// (sealed: only its own leader appends to it) if this replica has not
    /// seen it: how a replica applies volume data from its group's log.
    /// Not synced: see [`VolumeSet::sync`].
    pub fn write_at(&self, id: u64, offset: u64, bytes: &[u8]) -> StoreResult<()> {
        let known = self.files.read().get(&id).cloned();
        let file = match known {
            Some(f) => f,
            None => self.create_replicated(id)?,
        };
        file.write_all_at(bytes, offset)?;
        Ok(())
    }

    /// The file of segment `id`, created for [`VolumeSet::write_at`].
    fn create_replicated(&self, id: u64) -> StoreResult<Arc<File>> {
        let mut files = self.files.write();
        if let Some(f) = files.get(&id) {
            return Ok(Arc::clone(f));
        }
        let file = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(segment_path(&self.dir, id))?,
        );
        sync_dir(&self.dir)?;
        self.next_id.fetch_max(id + 1, Ordering::Relaxed);
        files.insert(id, Arc::clone(&file));
        Ok(file)
    }

    /// Seal segment `id` now, lent out or not (its fsync failed).
    pub fn seal(&self, id: u64) {
        self.active.lock().remove(&id);
    }

    /// The records of one request in each of `segments` are done with:
    /// committed or failed (the commit thread calls this).
    pub fn committed(&self, segments: &[u64]) {
        let mut pending = self.pending.0.lock();
        for id in segments {
            if let Some(n) = pending.get_mut(id) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    pending.remove(id);
                }
            }
        }
    }

    /// Whether segment `id` holds records whose commit has not landed.
    pub fn has_pending(&self, id: u64) -> bool {
        self.pending.0.lock().contains_key(&id)
    }

    /// Seal every segment not lent out (compaction may then take them).
    pub fn seal_idle(&self) {
        let idle: Vec<SegmentWriter> = std::mem::take(&mut *self.free.lock());
        let mut active = self.active.lock();
        for w in idle {
            active.remove(&w.id);
        }
    }

    /// The open file of segment `id`.
    pub fn file(&self, id: u64) -> StoreResult<Arc<File>> {
        self.files.read().get(&id).cloned().ok_or_else(|| {
            StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "segment is gone",
            ))
        })
    }

    /// fdatasync segment `id`.
    pub fn sync(&self, id: u64) -> StoreResult<()> {
        self.file(id)?.sync_data()?;
        Ok(())
    }

    /// Sealed segments with their file lengths.
    pub fn sealed(&self) -> StoreResult<Vec<(u64, u64)>> {
        // Files first, then the active set (see `take_writer`).
        let files = self.all_files();
        let active = self.active.lock().clone();
        let mut out = Vec::new();
        for (id, f) in files.into_iter().filter(|(id, _)| !active.contains(id)) {
            out.push((id, f.metadata()?.len()));
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Every segment's id and file, as of now.
    fn all_files(&self) -> Vec<(u64, Arc<File>)> {
        self.files
            .read()
            .iter()
            .map(|(id, f)| (*id, Arc::clone(f)))
            .collect()
    }

    /// Every segment with its file length, in id order (what a snapshot
    /// of a replicated partition covers).
    pub fn extents(&self) -> StoreResult<Vec<(u64, u64)>> {
        let files = self.all_files();
        let mut out = Vec::with_capacity(files.len());
        for (id, f) in files {
            out.push((id, f.metadata()?.len()));
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Total bytes of all segment files.
    pub fn disk_bytes(&self) -> StoreResult<u64> {
        let files: Vec<Arc<File>> = self.files.read().values().cloned().collect();
        let mut total = 0;
        for f in files {
            total += f.metadata()?.len();
        }
        Ok(total)
    }

    /// Delete a sealed segment (compaction moved its live records away).
    /// Open readers keep their handle and finish their reads.
    pub fn remove(&self, id: u64) -> StoreResult<()> {
        self.files.write().remove(&id);
        std::fs::remove_file(segment_path(&self.dir, id))?;
        sync_dir(&self.dir)
    }

    /// Delete segment `id` if it is there (a replica applying its group's
    /// log: an entry applied again after a crash finds it gone already),
    /// durably before this returns. Open readers finish from their handle.
    pub fn drop_segment(&self, id: u64) -> StoreResult<()> {
        self.files.write().remove(&id);
        self.active.lock().remove(&id);
        match std::fs::remove_file(segment_path(&self.dir, id)) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Appends one record to a lent segment.
pub struct RecordWriter<'a> {
    w: &'a mut SegmentWriter,
    start: u64,
    bucket: BucketId,
    key: Vec<u8>,
    flags: u8,
    /// File offset where `buf` goes.
    pos: u64,
    buf: Vec<u8>,
    data_len: u64,
    block: Digest,
    in_block: u64,
    crcs: Vec<u32>,
}

impl<'a> RecordWriter<'a> {
    /// Start a record for (bucket, key) at the segment's end.
    pub fn begin(w: &'a mut SegmentWriter, bucket: BucketId, key: &[u8]) -> StoreResult<Self> {
        Self::begin_with_flags(w, bucket, key, 0)
    }

    /// Start a record with header `flags` ([`FLAG_PART`] for parts).
    pub fn begin_with_flags(
        w: &'a mut SegmentWriter,
        bucket: BucketId,
        key: &[u8],
        flags: u8,
    ) -> StoreResult<Self> {
        if key.len() > usize::from(u16::MAX) {
            return Err(StoreError::InvalidArgument("key too long".into()));
        }
        let start = w.len;
        let pos = start + HEADER_FIXED + key.len() as u64;
        Ok(RecordWriter {
            w,
            start,
            bucket,
            key: key.to_vec(),
            flags,
            pos,
            buf: Vec::with_capacity(WRITE_BUF),
            data_len: 0,
            block: Digest::new(CrcAlgorithm::Crc32Iscsi),
            in_block: 0,
            crcs: Vec::new(),
        })
    }

    /// Append body bytes.
    pub fn push(&mut self, mut data: &[u8]) -> StoreResult<()> {
        self.data_len += data.len() as u64;
        while !data.is_empty() {
            let room = usize::try_from(BLOCK - self.in_block).unwrap_or(usize::MAX);
            let (now, rest) = data.split_at(room.min(data.len()));
            self.block.update(now);
            self.in_block += now.len() as u64;
            if self.in_block == BLOCK {
                self.crcs.push(finish_crc(&self.block));
                self.block.reset();
                self.in_block = 0;
            }
            self.buf.extend_from_slice(now);
            if self.buf.len() >= WRITE_BUF {
                self.flush()?;
            }
            data = rest;
        }
        Ok(())
    }

    fn flush(&mut self) -> StoreResult<()> {
        self.w.file.write_all_at(&self.buf, self.pos)?;
        self.pos += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Bytes of data appended so far.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Write the CRC table and the header; the record is complete (not yet
    /// synced). Returns where it is.
    pub fn finish(mut self) -> StoreResult<DataLoc> {
        if self.in_block > 0 {
            self.crcs.push(finish_crc(&self.block));
        }
        let mut table = Vec::with_capacity(self.crcs.len() * 4 + 4);
        for c in &self.crcs {
            table.extend_from_slice(&c.to_le_bytes());
        }
        let table_crc = crc32c(&table);
        table.extend_from_slice(&table_crc.to_le_bytes());
        self.buf.extend_from_slice(&table);
        self.flush()?;
        let header = encode_header(self.bucket, &self.key, self.flags, self.data_len);
        self.w.file.write_all_at(&header, self.start)?;
        let len = self.pos - self.start;
        self.w.len = self.pos;
        // Counted before the segment can be sealed (it is lent to us).
        self.w.pending.add(self.w.id);
        Ok(DataLoc::Volume {
            segment: self.w.id,
            offset: self.start,
            record_len: len,
        })
    }
}

fn encode_header(bucket: BucketId, key: &[u8], flags: u8, data_len: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_FIXED_USIZE + key.len());
    h.extend_from_slice(&MAGIC.to_le_bytes());
    h.push(VERSION);
    h.push(flags);
    // begin() refused keys longer than u16::MAX.
    h.extend_from_slice(&u16::try_from(key.len()).unwrap_or(u16::MAX).to_le_bytes());
    h.extend_from_slice(&bucket.0.to_le_bytes());
    h.extend_from_slice(&data_len.to_le_bytes());
    h.extend_from_slice(&u32::try_from(BLOCK).unwrap_or(0).to_le_bytes());
    let mut crc = Digest::new(CrcAlgorithm::Crc32Iscsi);
    crc.update(&h);
    crc.update(key);
    h.extend_from_slice(&finish_crc(&crc).to_le_bytes());
    h.extend_from_slice(key);
    h
}

/// A record header read back from a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Bucket of the object.
    pub bucket: BucketId,
    /// Key field (object key; for parts followed by upload id and part number).
    pub key: Vec<u8>,
    /// Header flags.
    pub flags: u8,
    /// Data length.
    pub data_len: u64,
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// Read and verify the header of the record at `offset`; `None` when no
/// valid record starts there (end of the segment's valid records).
pub fn read_header(file: &File, offset: u64, file_len: u64) -> StoreResult<Option<RecordHeader>> {
    if offset + HEADER_FIXED > file_len {
        return Ok(None);
    }
    let mut fixed = [0u8; HEADER_FIXED_USIZE];
    file.read_exact_at(&mut fixed, offset)?;
    let key_len = u64::from(u16::from_le_bytes([fixed[6], fixed[7]]));
    if le_u32(&fixed, 0) != MAGIC
        || fixed[4] != VERSION
        || offset + HEADER_FIXED + key_len > file_len
    {
        return Ok(None);
    }
    let mut key = vec![0u8; usize::from(u16::from_le_bytes([fixed[6], fixed[7]]))];
    file.read_exact_at(&mut key, offset + HEADER_FIXED)?;
    let mut crc = Digest::new(CrcAlgorithm::Crc32Iscsi);
    crc.update(&fixed[..28]);
    crc.update(&key);
    if finish_crc(&crc) != le_u32(&fixed, 28)
        || le_u32(&fixed, 24) != u32::try_from(BLOCK).unwrap_or(0)
    {
        return Ok(None);
    }
    let header = RecordHeader {
        bucket: BucketId(le_u64(&fixed, 8)),
        key,
        flags: fixed[5],
        data_len: le_u64(&fixed, 16),
    };
    // data_len is read from disk: a record is never longer than its file,
    // and checking that first keeps record_len from overflowing (found by
    // fuzz/fuzz_targets/volume_record.rs).
    if header.data_len > file_len || offset + record_len(key_len, header.data_len) > file_len {
        return Ok(None);
    }
    Ok(Some(header))
}

/// Reads `start..end` of an object's data from its record, verifying every
/// block it touches.
pub struct RangeReader {
    file: Arc<File>,
    data_off: u64,
    table_off: u64,
    size: u64,
    pos: u64,
    end: u64,
}

impl RangeReader {
    /// A reader of bytes `start..end` of the object stored at `offset` under
    /// a key of `key_len` bytes, `size` bytes long.
    pub fn new(
        file: Arc<File>,
        offset: u64,
        key_len: u64,
        size: u64,
        start: u64,
        end: u64,
    ) -> Self {
        let data_off = offset + HEADER_FIXED + key_len;
        RangeReader {
            file,
            data_off,
            table_off: data_off + size,
            size,
            pos: start,
            end: end.min(size),
        }
    }

    /// The next verified chunk, or `None` at the end of the range.
    pub fn next_chunk(&mut self) -> StoreResult<Option<Bytes>> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let first = self.pos / BLOCK;
        let last = ((self.end - 1) / BLOCK).min(first + READ_BLOCKS - 1);
        let span_start = first * BLOCK;
        let span_end = ((last + 1) * BLOCK).min(self.size);
        let mut data = vec![0u8; usize::try_from(span_end - span_start).unwrap_or(0)];
        self.file
            .read_exact_at(&mut data, self.data_off + span_start)?;
        let mut table = vec![0u8; usize::try_from(4 * (last - first + 1)).unwrap_or(0)];
        self.file
            .read_exact_at(&mut table, self.table_off + 4 * first)?;
        for (i, block) in data.chunks(BLOCK_USIZE).enumerate() {
            if crc32c(block) != le_u32(&table, 4 * i) {
                return Err(StoreError::Corrupt(format!(
                    "block {} of a volume record fails its checksum",
                    first + i as u64
                )));
            }
        }
        let from = usize::try_from(self.pos - span_start).unwrap_or(0);
        let to = usize::try_from(self.end.min(span_end) - span_start).unwrap_or(0);
        self.pos = self.end.min(span_end);
        let mut bytes = Bytes::from(data);
        bytes.truncate(to);
        Ok(Some(bytes.slice(from..)))
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn a_replicated_set_writes_only_segments_of_the_term_it_leads() {
        use crate::replication::segment_epoch;
        let dir = tempfile::tempdir().expect("tempdir");
        let vs = VolumeSet::open(dir.path(), 1 << 20).expect("open");
        vs.replicated();
        assert!(matches!(vs.take_writer(), Err(StoreError::Unavailable(_))));
        vs.begin_term(5);
        let w = vs.take_writer().expect("a writer in term 5");
        assert_eq!(segment_epoch(w.id()), 5);
        vs.release(w);
        // Another leader's segment of a later term, applied from the log,
        // moves the ids past this term: no more writers here.
        vs.write_at((6 << 32) + 3, 10, b"piece").expect("write_at");
        let mut back = [0u8; 5];
        vs.file((6 << 32) + 3)
            .expect("created")
            .read_exact_at(&mut back, 10)
            .expect("read");
        assert_eq!(&back, b"piece");
        vs.seal_idle();
        assert!(matches!(vs.take_writer(), Err(StoreError::Unavailable(_))));
        // Leading again, in term 7: the idle term-5 segment is not reused.
        vs.begin_term(7);
        let w = vs.take_writer().expect("a writer in term 7");
        assert_eq!(segment_epoch(w.id()), 7);
    }

    fn read_all(
        vs: &VolumeSet,
        loc: &DataLoc,
        key_len: u64,
        size: u64,
        s: u64,
        e: u64,
    ) -> StoreResult<Vec<u8>> {
        let DataLoc::Volume {
            segment, offset, ..
        } = loc
        else {
            panic!("not a volume loc")
        };
        let mut r = RangeReader::new(vs.file(*segment)?, *offset, key_len, size, s, e);
        let mut out = Vec::new();
        while let Some(c) = r.next_chunk()? {
            out.extend_from_slice(&c);
        }
        Ok(out)
    }

    #[test]
    fn records_round_trip_with_ranges() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vs = VolumeSet::open(dir.path(), 1 << 30).expect("open");
        let mut w = vs.take_writer().expect("writer");
        let mut locs = Vec::new();
        for (i, size) in [0usize, 1, 65_535, 65_536, 65_537, 300_001]
            .into_iter()
            .enumerate()
        {
            let key = format!("key-{i}");
            let data = payload(size);
            let mut rw = RecordWriter::begin(&mut w, BucketId(9), key.as_bytes()).expect("begin");
            for c in data.chunks(7_777) {
                rw.push(c).expect("push");
            }
            locs.push((key, data, rw.finish().expect("finish")));
        }
        vs.release(w);
        for (key, data, loc) in &locs {
            let (k, n) = (key.len() as u64, data.len() as u64);
            assert_eq!(&read_all(&vs, loc, k, n, 0, n).expect("full"), data);
            if n > 10 {
                for (s, e) in [(0, 1), (n - 1, n), (3, n / 2), (n / 3, n)] {
                    let got = read_all(&vs, loc, k, n, s, e).expect("range");
                    assert_eq!(got, data[s as usize..e as usize]);
                }
            }
        }
    }

    #[test]
    fn corruption_is_detected_and_headers_scan() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vs = VolumeSet::open(dir.path(), 1 << 30).expect("open");
        let mut w = vs.take_writer().expect("writer");
        let data = payload(200_000);
        let mut rw = RecordWriter::begin(&mut w, BucketId(1), b"k").expect("begin");
        rw.push(&data).expect("push");
        let loc = rw.finish().expect("finish");
        let DataLoc::Volume {
            segment,
            offset,
            record_len: rl,
        } = loc.clone()
        else {
            panic!()
        };
        assert_eq!(rl, record_len(1, 200_000));
        let file = vs.file(segment).expect("file");
        let len = file.metadata().expect("meta").len();
        let h = read_header(&file, offset, len)
            .expect("read")
            .expect("valid");
        assert_eq!(
            (h.bucket, h.key.as_slice(), h.data_len),
            (BucketId(1), &b"k"[..], 200_000)
        );
        assert!(
            read_header(&file, offset + rl, len)
                .expect("read")
                .is_none()
        );
        // Flip one byte in the second block.
        file.write_all_at(&[0xAA], offset + HEADER_FIXED + 1 + BLOCK + 5)
            .expect("flip");
        assert!(
            read_all(&vs, &loc, 1, 200_000, 0, 1000).is_ok(),
            "first block is intact"
        );
        assert!(matches!(
            read_all(&vs, &loc, 1, 200_000, 0, 200_000),
            Err(StoreError::Corrupt(_))
        ));
    }
}

/// Regressions found by fuzzing (fuzz/fuzz_targets/volume_record.rs).
#[cfg(test)]
mod fuzz_regressions {
    use super::*;

    /// A header whose CRC verifies but whose data length is absurd is no
    /// record: not a panic (overflow checks) and not, with wrapping
    /// arithmetic, a record that seems to fit in 38 bytes.
    #[test]
    fn huge_data_len_is_not_a_record() {
        // record_len(1, this) wraps to 38 in u64.
        let data_len: u64 = 0xfffc_000f_ffc0_00fd;
        let mut h = Vec::new();
        h.extend_from_slice(&MAGIC.to_le_bytes());
        h.extend_from_slice(&[VERSION, 0]);
        h.extend_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&7u64.to_le_bytes());
        h.extend_from_slice(&data_len.to_le_bytes());
        h.extend_from_slice(&u32::try_from(BLOCK).expect("block").to_le_bytes());
        let crc = crc32c(&[h.as_slice(), b"k"].concat());
        h.extend_from_slice(&crc.to_le_bytes());
        h.extend_from_slice(b"k");
        h.resize(64, 0);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("seg");
        std::fs::write(&path, &h).expect("write");
        let file = File::open(&path).expect("open");
        assert_eq!(read_header(&file, 0, 64).expect("read"), None);
    }
}
