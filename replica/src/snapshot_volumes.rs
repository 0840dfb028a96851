//! The whole snapshot as it crosses the network: a preamble naming the
//! volume segments, the segments' bytes in checksummed frames, then the
//! index stream ([`crate::snapshot`]).
//!
//! Layout (integers little-endian):
//!
//! ```text
//! preamble  "LWSNVOL1" | u32 n | { u64 id, u64 len }*n | u64 index_len
//!           | u32 crc32c of the bytes before it; zeros up to a FRAME multiple
//! frames    for each segment in order, ceil(len / DATA) frames of FRAME
//!           bytes: DATA bytes of the segment (the last one zero-padded)
//!           and the CRC32C of those DATA bytes
//! index     index_len bytes: the index stream, itself checksummed
//! ```
//!
//! Why this shape:
//! - No copy of the volumes is kept with a snapshot. A node's current
//!   snapshot is its index stream alone; the frames are read from the live
//!   segment files when the snapshot is sent, up to the lengths recorded
//!   when it was built. Segments are append-only on a replicated partition,
//!   and every byte the snapshot's rows point at was applied before the
//!   build, so those bytes no longer change. A byte that does change
//!   between build and send (a record the leader is still writing, no row
//!   of the snapshot points at it) is rewritten on the receiver by the
//!   later log entry that ships it. So each frame's CRC is computed as the
//!   frame is read, and it guards the transfer.
//! - A segment that compaction deleted after the build is sent as zeros.
//!   Its drop is an entry after the snapshot's last one, and so are the
//!   relocations before it that moved every record the snapshot's rows
//!   point at in it: the receiver applies them from the log after the
//!   install, and nothing reads its copy of the segment before (only a
//!   leader serves reads, and a leader first applies what was committed).
//! - Frames have one fixed size and every region starts on a frame
//!   boundary, so any chunk offset that is a multiple of [`FRAME`] (every
//!   chunk size the groups use is one: [`crate::net::SNAPSHOT_CHUNK`])
//!   lands on a frame boundary. A chunk sent again after a lost answer
//!   restarts a whole frame, and the receiver never has to re-read a half
//!   frame it already wrote.
//! - The receiver writes each frame into its volume as soon as the frame
//!   checks out ([`Receiver`]), instead of keeping a second copy and
//!   moving it at install time: the final chunk, whose answer waits for
//!   the install, then has only the index rows left to write. Writing a
//!   segment before the whole snapshot is in is safe: at every position a
//!   row of this replica points at, the leader's bytes are the same
//!   committed bytes (Raft's log matching), and other positions are not
//!   read by anything.

use crate::blocking::{ReplicaError, ReplicaResult};
use crate::snapshot::{MAX_SEGMENTS, SegmentExtent};
use laneway_store::volume::{VolumeSet, crc32c};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of one frame, CRC included.
pub const FRAME: u64 = 64 << 10;
/// Segment bytes in one frame.
pub const DATA: u64 = FRAME - 4;
const FRAME_USIZE: usize = 64 << 10;
const DATA_USIZE: usize = FRAME_USIZE - 4;
const MAGIC: &[u8; 8] = b"LWSNVOL1";
/// Magic, count: what a reader needs to know the preamble's length.
const PREAMBLE_FIXED: usize = 12;

fn damaged(what: &str) -> ReplicaError {
    ReplicaError::Snapshot(what.to_string())
}

/// Where each region of a snapshot's network stream lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    segments: Vec<SegmentExtent>,
    /// The first frame of each segment, and the frame count at the end.
    first_frame: Vec<u64>,
    /// The encoded preamble, without its padding.
    preamble: Vec<u8>,
    index_len: u64,
}

/// One frame's place in its segment.
struct FrameAt {
    segment: u64,
    offset: u64,
    len: usize,
    /// Whether it is the segment's last frame.
    last: bool,
}

/// What lies at a position of the stream.
enum Region {
    Preamble(usize),
    Frame { frame: u64, inner: usize },
    Index(u64),
    End,
}

impl Layout {
    /// The layout of a snapshot of `segments` whose index stream is
    /// `index_len` bytes.
    pub fn new(segments: Vec<SegmentExtent>, index_len: u64) -> ReplicaResult<Layout> {
        if segments.len() > MAX_SEGMENTS as usize {
            return Err(damaged("too many volume segments"));
        }
        let mut first_frame = Vec::with_capacity(segments.len() + 1);
        let mut frames = 0u64;
        for s in &segments {
            first_frame.push(frames);
            frames = frames
                .checked_add(s.len.div_ceil(DATA))
                .ok_or_else(|| damaged("segment lengths overflow"))?;
        }
        first_frame.push(frames);
        let preamble = encode_preamble(&segments, index_len);
        let layout = Layout {
            segments,
            first_frame,
            preamble,
            index_len,
        };
        // Every position must fit a u64.
        layout
            .frames()
            .checked_mul(FRAME)
            .and_then(|b| b.checked_add(layout.volume_start()))
            .and_then(|b| b.checked_add(index_len))
            .ok_or_else(|| damaged("snapshot too large"))?;
        Ok(layout)
    }

    /// The segments the snapshot carries.
    pub fn segments(&self) -> &[SegmentExtent] {
        &self.segments
    }

    /// The index stream's length.
    pub fn index_len(&self) -> u64 {
        self.index_len
    }

    fn frames(&self) -> u64 {
        self.first_frame.last().copied().unwrap_or(0)
    }

    fn volume_start(&self) -> u64 {
        (self.preamble.len() as u64).div_ceil(FRAME) * FRAME
    }

    fn index_start(&self) -> u64 {
        self.volume_start() + self.frames() * FRAME
    }

    /// The stream's total length.
    pub fn total(&self) -> u64 {
        self.index_start() + self.index_len
    }

    fn region(&self, pos: u64) -> Region {
        if pos < self.volume_start() {
            // Below volume_start, which is at most preamble + FRAME.
            return Region::Preamble(usize::try_from(pos).unwrap_or(usize::MAX));
        }
        if pos < self.index_start() {
            let rel = pos - self.volume_start();
            return Region::Frame {
                frame: rel / FRAME,
                inner: usize::try_from(rel % FRAME).unwrap_or(0),
            };
        }
        if pos < self.total() {
            return Region::Index(pos - self.index_start());
        }
        Region::End
    }

    fn frame_at(&self, frame: u64) -> FrameAt {
        // The segment whose frames include `frame`: the last whose first
        // frame is at or below it (segments of length 0 have none).
        let i = self.first_frame.partition_point(|f| *f <= frame) - 1;
        let s = self.segments[i];
        let offset = (frame - self.first_frame[i]) * DATA;
        let len = (s.len - offset).min(DATA);
        FrameAt {
            segment: s.id,
            offset,
            len: usize::try_from(len).unwrap_or(DATA_USIZE),
            last: frame + 1 == self.first_frame[i + 1],
        }
    }
}

fn encode_preamble(segments: &[SegmentExtent], index_len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREAMBLE_FIXED + 16 * segments.len() + 12);
    out.extend_from_slice(MAGIC);
    // At most MAX_SEGMENTS (checked by Layout::new before it gets here).
    out.extend_from_slice(
        &u32::try_from(segments.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for s in segments {
        out.extend_from_slice(&s.id.to_le_bytes());
        out.extend_from_slice(&s.len.to_le_bytes());
    }
    out.extend_from_slice(&index_len.to_le_bytes());
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The preamble's full length once its first bytes are known, or None
/// while fewer than [`PREAMBLE_FIXED`] have arrived.
fn preamble_len(head: &[u8]) -> ReplicaResult<Option<usize>> {
    if head.len() < PREAMBLE_FIXED {
        return Ok(None);
    }
    if &head[..8] != MAGIC {
        return Err(damaged("not a laneway snapshot stream"));
    }
    let mut n = [0u8; 4];
    n.copy_from_slice(&head[8..12]);
    let n = u32::from_le_bytes(n);
    if n > MAX_SEGMENTS {
        return Err(damaged("too many volume segments"));
    }
    Ok(Some(PREAMBLE_FIXED + 16 * n as usize + 12))
}

/// The layout a complete, checked preamble describes.
fn decode_preamble(bytes: &[u8]) -> ReplicaResult<Layout> {
    let body = bytes.len() - 4;
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&bytes[body..]);
    if crc32c(&bytes[..body]) != u32::from_le_bytes(crc) {
        return Err(damaged("preamble checksum mismatch"));
    }
    let n = (body - PREAMBLE_FIXED - 8) / 16;
    let mut segments: Vec<SegmentExtent> = Vec::with_capacity(n);
    for i in 0..n {
        let at = PREAMBLE_FIXED + 16 * i;
        let s = SegmentExtent {
            id: le_u64(bytes, at),
            len: le_u64(bytes, at + 8),
        };
        if segments.last().is_some_and(|p| p.id >= s.id) {
            return Err(damaged("volume segments out of order"));
        }
        segments.push(s);
    }
    Layout::new(segments, le_u64(bytes, body - 8))
}

/// The files a stored snapshot is sent from: its index stream and the
/// segments it covers.
pub struct Sources {
    layout: Layout,
    index: File,
    /// Each named segment's file; `None`: deleted since the build (sent
    /// as zeros: module doc).
    segments: Vec<Option<Arc<File>>>,
}

impl Sources {
    /// The sources of the index stream at `index_path`, whose segments are
    /// `segments` of `volumes` (those no longer there are sent as zeros).
    pub fn open(
        index_path: &Path,
        segments: Vec<SegmentExtent>,
        volumes: Option<&VolumeSet>,
    ) -> ReplicaResult<Sources> {
        let index = File::open(index_path)?;
        let index_len = index.metadata()?.len();
        let mut files = Vec::with_capacity(segments.len());
        for s in &segments {
            let v = volumes.ok_or_else(|| damaged("a snapshot with volumes, a group without"))?;
            files.push(v.file(s.id).ok());
        }
        Ok(Sources {
            layout: Layout::new(segments, index_len)?,
            index,
            segments: files,
        })
    }

    /// The stream's length.
    pub fn total(&self) -> u64 {
        self.layout.total()
    }

    /// Up to `max` bytes of the stream from `pos` (fewer only at its end).
    pub fn read(&self, mut pos: u64, max: usize) -> ReplicaResult<Vec<u8>> {
        let mut out = Vec::with_capacity(max.min(4 << 20));
        while out.len() < max {
            let want = max - out.len();
            let before = out.len();
            match self.layout.region(pos) {
                Region::End => break,
                Region::Preamble(at) => {
                    let end = usize::try_from(self.layout.volume_start()).unwrap_or(0);
                    let mut padded = self.layout.preamble.clone();
                    padded.resize(end, 0);
                    let take = &padded[at..];
                    out.extend_from_slice(&take[..take.len().min(want)]);
                }
                Region::Frame { frame, inner } => {
                    let bytes = self.frame(frame)?;
                    let take = &bytes[inner..];
                    out.extend_from_slice(&take[..take.len().min(want)]);
                }
                Region::Index(at) => {
                    let left = self.layout.index_len - at;
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(want);
                    out.resize(before + n, 0);
                    self.index.read_exact_at(&mut out[before..], at)?;
                }
            }
            pos += (out.len() - before) as u64;
        }
        Ok(out)
    }

    /// Frame `frame` as sent: data, padding, CRC.
    fn frame(&self, frame: u64) -> ReplicaResult<Vec<u8>> {
        let at = self.layout.frame_at(frame);
        let i = self.layout.segments.partition_point(|s| s.id < at.segment);
        let mut bytes = vec![0u8; FRAME_USIZE];
        if let Some(file) = &self.segments[i] {
            file.read_exact_at(&mut bytes[..at.len], at.offset)?;
        }
        let crc = crc32c(&bytes[..DATA_USIZE]);
        bytes[DATA_USIZE..].copy_from_slice(&crc.to_le_bytes());
        Ok(bytes)
    }
}

/// Receives a snapshot's network stream: frames go into the partition's
/// volumes as each checks out, the index stream into a file of its own.
///
/// Bytes come in order; a seek goes back (or forward to the furthest byte
/// received) only to a frame boundary or into the index stream, which is
/// where a chunk sent again starts. The stream is complete when every
/// byte up to its end has been received.
pub struct Receiver {
    volumes: Option<Arc<VolumeSet>>,
    path: PathBuf,
    file: File,
    /// The preamble's bytes, until it is whole.
    head: Vec<u8>,
    layout: Option<Layout>,
    /// The current frame's bytes so far.
    frame: Vec<u8>,
    pos: u64,
    /// Every byte below this has been received (and its frame written).
    reached: u64,
}

impl Receiver {
    /// A receiver writing the index stream to the new file `path` and
    /// frames into `volumes`.
    pub fn create(path: &Path, volumes: Option<Arc<VolumeSet>>) -> ReplicaResult<Receiver> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Receiver {
            volumes,
            path: path.to_path_buf(),
            file,
            head: Vec::new(),
            layout: None,
            frame: Vec::with_capacity(FRAME_USIZE),
            pos: 0,
            reached: 0,
        })
    }

    /// Take the next bytes of the stream, all of them.
    pub fn write(&mut self, mut bytes: &[u8]) -> ReplicaResult<()> {
        while !bytes.is_empty() {
            let used = match self.layout.take() {
                None => self.take_preamble(bytes)?,
                Some(layout) => {
                    let used = self.take(&layout, bytes);
                    self.layout = Some(layout);
                    used?
                }
            };
            bytes = &bytes[used..];
            self.pos += used as u64;
            self.reached = self.reached.max(self.pos);
        }
        Ok(())
    }

    /// Gather preamble bytes; decode the layout once they are all there.
    /// Returns how many bytes of `bytes` it used.
    fn take_preamble(&mut self, bytes: &[u8]) -> ReplicaResult<usize> {
        let known = preamble_len(&self.head)?;
        let want = match known {
            Some(len) => len - self.head.len(),
            None => PREAMBLE_FIXED - self.head.len(),
        };
        let n = want.min(bytes.len());
        self.head.extend_from_slice(&bytes[..n]);
        if let Some(len) = preamble_len(&self.head)?
            && self.head.len() == len
        {
            self.layout = Some(decode_preamble(&self.head)?);
            if self.volumes.is_none() && !self.layout_segments().is_empty() {
                return Err(damaged("a snapshot with volumes, a group without"));
            }
        }
        Ok(n)
    }

    fn layout_segments(&self) -> &[SegmentExtent] {
        self.layout.as_ref().map_or(&[], |l| l.segments())
    }

    /// Take bytes at the current position of a known layout.
    fn take(&mut self, layout: &Layout, bytes: &[u8]) -> ReplicaResult<usize> {
        match layout.region(self.pos) {
            Region::Preamble(at) => {
                // Padding after the preamble.
                let pad = usize::try_from(layout.volume_start()).unwrap_or(0) - at;
                Ok(pad.min(bytes.len()))
            }
            Region::Frame { frame, inner } => {
                debug_assert_eq!(inner, self.frame.len());
                let n = (FRAME_USIZE - self.frame.len()).min(bytes.len());
                self.frame.extend_from_slice(&bytes[..n]);
                if self.frame.len() == FRAME_USIZE {
                    self.write_frame(layout, frame)?;
                }
                Ok(n)
            }
            Region::Index(at) => {
                let left = layout.index_len() - at;
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                self.file.write_all_at(&bytes[..n], at)?;
                Ok(n)
            }
            Region::End => Err(damaged("bytes past the end of the snapshot")),
        }
    }

    /// Check the whole frame `frame` and write its data into its segment
    /// (synced when it is the segment's last).
    fn write_frame(&mut self, layout: &Layout, frame: u64) -> ReplicaResult<()> {
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&self.frame[DATA_USIZE..]);
        if crc32c(&self.frame[..DATA_USIZE]) != u32::from_le_bytes(crc) {
            return Err(damaged("volume frame checksum mismatch"));
        }
        let at = layout.frame_at(frame);
        let volumes = self
            .volumes
            .as_ref()
            .ok_or_else(|| damaged("a snapshot with volumes, a group without"))?;
        volumes.write_at(at.segment, at.offset, &self.frame[..at.len])?;
        if at.last {
            volumes.sync(at.segment)?;
        }
        self.frame.clear();
        Ok(())
    }

    /// The position the next byte is written at.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Continue at `pos`: a frame boundary or a position in the index
    /// stream, no further than what was received.
    pub fn seek(&mut self, pos: u64) -> ReplicaResult<()> {
        if pos == self.pos {
            return Ok(());
        }
        if pos > self.reached {
            return Err(damaged("seek past the bytes received"));
        }
        if pos == 0 {
            // From the start again: the preamble is read anew.
            self.head.clear();
            self.layout = None;
            self.frame.clear();
            self.pos = 0;
            return Ok(());
        }
        let Some(layout) = &self.layout else {
            return Err(damaged("seek inside the preamble"));
        };
        match layout.region(pos) {
            Region::Frame { inner: 0, .. } | Region::Index(_) | Region::End => {}
            Region::Preamble(_) if pos >= layout.preamble.len() as u64 => {}
            _ => return Err(damaged("seek inside a frame or the preamble")),
        }
        self.frame.clear();
        self.pos = pos;
        Ok(())
    }

    /// The received stream, once complete: the index stream's file (synced),
    /// its path, and the segments whose bytes were written.
    pub fn finish(self) -> ReplicaResult<Received> {
        let Some(layout) = self.layout else {
            return Err(damaged("snapshot stream ends in its preamble"));
        };
        if self.reached != layout.total() {
            return Err(damaged("snapshot stream incomplete"));
        }
        self.file.set_len(layout.index_len())?;
        self.file.sync_all()?;
        if let Some(v) = &self.volumes {
            for s in layout.segments() {
                // An empty segment has no frames: create it here, so this
                // replica's volumes hold every segment its snapshot names.
                v.write_at(s.id, 0, &[])?;
                v.sync(s.id)?;
            }
        }
        Ok(Received {
            path: self.path,
            segments: layout.segments,
        })
    }
}

/// A snapshot received whole: its index stream in `path`, its segments
/// written and synced.
#[derive(Debug)]
pub struct Received {
    /// The index stream's file.
    pub path: PathBuf,
    /// The segments the preamble named.
    pub segments: Vec<SegmentExtent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume set with segments of the given lengths (deterministic
    /// bytes), and an index stream file.
    fn sources(dir: &Path, lens: &[u64], index: &[u8]) -> (Arc<VolumeSet>, Sources) {
        let volumes = Arc::new(VolumeSet::open(&dir.join("vol"), 1 << 30).expect("volumes"));
        let mut segments = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            let id = 10 + i as u64;
            let bytes: Vec<u8> = (0..len).map(|b| (b * 7 + id).to_le_bytes()[0]).collect();
            volumes.write_at(id, 0, &bytes).expect("write");
            segments.push(SegmentExtent { id, len });
        }
        let index_path = dir.join("index.snap");
        std::fs::write(&index_path, index).expect("index");
        let src = Sources::open(&index_path, segments, Some(&volumes)).expect("sources");
        (volumes, src)
    }

    fn whole(src: &Sources) -> Vec<u8> {
        let all = src.read(0, usize::MAX).expect("read");
        assert_eq!(all.len() as u64, src.total());
        all
    }

    fn segment(v: &VolumeSet, id: u64, len: u64) -> Vec<u8> {
        let mut b = vec![0u8; usize::try_from(len).expect("len")];
        v.file(id)
            .expect("file")
            .read_exact_at(&mut b, 0)
            .expect("read");
        b
    }

    const LENS: &[u64] = &[0, 1, DATA, DATA + 1, 3 * DATA + 17];

    #[test]
    fn a_stream_received_in_any_pieces_rebuilds_segments_and_index() {
        let src_dir = tempfile::tempdir().expect("src");
        let (src_vol, src) = sources(src_dir.path(), LENS, b"the index stream");
        let all = whole(&src);
        assert_eq!(all.len() as u64 % FRAME, b"the index stream".len() as u64);
        // Reads from any position agree with the whole.
        for pos in [0, 5, FRAME - 1, FRAME, FRAME + 3, src.total() - 2] {
            let part = src.read(pos, 100_000).expect("read");
            let at = usize::try_from(pos).expect("pos");
            assert_eq!(&all[at..at + part.len()], &part[..]);
        }
        for piece in [1usize, 7, 4096, FRAME_USIZE, 3 * FRAME_USIZE + 5] {
            let dst = tempfile::tempdir().expect("dst");
            let vol = Arc::new(VolumeSet::open(&dst.path().join("vol"), 1 << 30).expect("v"));
            let mut r = Receiver::create(&dst.path().join("recv"), Some(Arc::clone(&vol)))
                .expect("receiver");
            for chunk in all.chunks(piece) {
                r.write(chunk).expect("write");
            }
            let got = r.finish().expect("finish");
            assert_eq!(got.segments.len(), LENS.len());
            assert_eq!(
                std::fs::read(&got.path).expect("index"),
                b"the index stream"
            );
            for s in &got.segments {
                assert_eq!(
                    segment(&vol, s.id, s.len),
                    segment(&src_vol, s.id, s.len),
                    "segment {} in pieces of {piece}",
                    s.id
                );
            }
        }
    }

    #[test]
    fn a_chunk_sent_again_from_a_frame_boundary_is_taken() {
        let src_dir = tempfile::tempdir().expect("src");
        let (_, src) = sources(src_dir.path(), LENS, b"rows");
        let all = whole(&src);
        let dst = tempfile::tempdir().expect("dst");
        let vol = Arc::new(VolumeSet::open(&dst.path().join("vol"), 1 << 30).expect("v"));
        let mut r = Receiver::create(&dst.path().join("recv"), Some(vol)).expect("receiver");
        let chunk = 2 * FRAME_USIZE;
        r.write(&all[..2 * chunk]).expect("two chunks");
        // The answer to the second chunk was lost: it comes again.
        r.seek(chunk as u64).expect("seek back");
        for c in all[chunk..].chunks(chunk) {
            r.write(c).expect("rest");
        }
        r.finish().expect("complete");
    }

    #[test]
    fn damage_cuts_and_bad_seeks_are_refused() {
        let src_dir = tempfile::tempdir().expect("src");
        let (_, src) = sources(src_dir.path(), &[DATA + 9], b"rows");
        let all = whole(&src);
        let receiver = |name: &str| {
            let dst = tempfile::tempdir().expect("dst");
            let vol = Arc::new(VolumeSet::open(&dst.path().join("vol"), 1 << 30).expect("v"));
            (
                Receiver::create(&dst.path().join(name), Some(vol)).expect("r"),
                dst,
            )
        };
        // A flipped byte in the preamble or in a frame's data or CRC.
        let frame0 = FRAME_USIZE;
        for at in [
            0,
            9,
            20,
            frame0 + 3,
            frame0 + DATA_USIZE + 1,
            2 * frame0 + 5,
        ] {
            let mut bad = all.clone();
            bad[at] ^= 1;
            let (mut r, _d) = receiver("flip");
            assert!(r.write(&bad).is_err(), "flipped byte {at}");
        }
        // A stream cut short never finishes.
        let (mut r, _d) = receiver("cut");
        r.write(&all[..all.len() - 1]).expect("most");
        assert!(r.finish().is_err());
        // Seeks into a frame or past what arrived.
        let (mut r, _d) = receiver("seek");
        r.write(&all[..frame0 + 100]).expect("some");
        assert!(r.seek(frame0 as u64 + 10).is_err());
        assert!(r.seek(2 * frame0 as u64).is_err());
        // A group without volumes refuses a snapshot that has them.
        let dst = tempfile::tempdir().expect("dst");
        let mut r = Receiver::create(&dst.path().join("novol"), None).expect("r");
        assert!(r.write(&all).is_err());
    }
}
