//! The index stream of a partition snapshot: its metadata, the extent of
//! every volume segment it covers, and every index row of the partition,
//! framed and closed by a CRC32C over all of it.
//!
//! Layout (integers little-endian):
//!
//! ```text
//! "LWSNAP02"                       magic and version
//! u32 meta_len, meta               bincode SnapshotMeta (last log id, membership, id)
//! u32 n, { u64 id, u64 len }*n     the volume segments and their lengths (v2 only)
//! { u32 key_len, u32 value_len, key, value }*   the rows, in key order
//! u32 0xFFFF_FFFF                  end of rows
//! u64 row_count, u32 crc32c        the CRC covers every byte before it
//! ```
//!
//! Version 1 (`LWSNAP01`, written before snapshots carried volumes) has no
//! segment list; it reads as a stream with none, so a catalog snapshot
//! written by an older binary still installs.
//!
//! The reader hands rows out as it goes and checks the trailer at the end,
//! so a caller keeps what it read aside until [`read_stream`] returns Ok.
//! The segments' bytes travel beside this stream, not in it
//! ([`crate::snapshot_volumes`]): the file kept as a node's current
//! snapshot holds rows only, and its volumes are read when it is sent.

use crate::blocking::{ReplicaError, ReplicaResult};
use crate::types::SnapshotMeta;
use crc_fast::{CrcAlgorithm, Digest};
use std::io::{Read, Write};

const MAGIC: &[u8; 8] = b"LWSNAP02";
const MAGIC_V1: &[u8; 8] = b"LWSNAP01";
const END_OF_ROWS: u32 = u32::MAX;
/// The largest metadata a reader accepts.
const MAX_META: u32 = 64 << 20;
/// The most volume segments one snapshot may list (a partition of 256 MiB
/// segments holds 256 TiB at this count).
pub const MAX_SEGMENTS: u32 = 1 << 20;

/// A volume segment a snapshot covers: its id and the length of it the
/// snapshot carries (the file's length when the snapshot was built).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentExtent {
    /// The segment's id.
    pub id: u64,
    /// Bytes of it, from offset 0.
    pub len: u64,
}

/// What precedes the rows of a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamHead {
    /// The snapshot's metadata.
    pub meta: SnapshotMeta,
    /// The volume segments it covers, in id order.
    pub segments: Vec<SegmentExtent>,
}

/// Writes a snapshot stream to `W`, row by row.
pub struct StreamWriter<W: Write> {
    out: W,
    crc: Digest,
    rows: u64,
}

impl<W: Write> StreamWriter<W> {
    /// Start a stream for `head` on `out`.
    pub fn new(out: W, head: &StreamHead) -> ReplicaResult<StreamWriter<W>> {
        let mut w = StreamWriter {
            out,
            crc: Digest::new(CrcAlgorithm::Crc32Iscsi),
            rows: 0,
        };
        let meta = bincode::serialize(&head.meta)?;
        w.emit(MAGIC)?;
        w.emit(&frame_len(meta.len())?.to_le_bytes())?;
        w.emit(&meta)?;
        let count = u32::try_from(head.segments.len())
            .ok()
            .filter(|n| *n <= MAX_SEGMENTS)
            .ok_or_else(|| damaged("too many volume segments"))?;
        w.emit(&count.to_le_bytes())?;
        for s in &head.segments {
            w.emit(&s.id.to_le_bytes())?;
            w.emit(&s.len.to_le_bytes())?;
        }
        Ok(w)
    }

    /// Add one row (rows go in key order).
    pub fn row(&mut self, key: &[u8], value: &[u8]) -> ReplicaResult<()> {
        self.emit(&frame_len(key.len())?.to_le_bytes())?;
        self.emit(&frame_len(value.len())?.to_le_bytes())?;
        self.emit(key)?;
        self.emit(value)?;
        self.rows += 1;
        Ok(())
    }

    /// Close the stream with its trailer and hand back the writer.
    pub fn finish(mut self) -> ReplicaResult<W> {
        self.emit(&END_OF_ROWS.to_le_bytes())?;
        self.emit(&self.rows.to_le_bytes())?;
        let crc = crc32(&self.crc);
        self.out.write_all(&crc.to_le_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn emit(&mut self, bytes: &[u8]) -> ReplicaResult<()> {
        self.crc.update(bytes);
        self.out.write_all(bytes)?;
        Ok(())
    }
}

/// A length that fits a frame (rows and metadata stay below 4 GiB).
fn frame_len(len: usize) -> ReplicaResult<u32> {
    u32::try_from(len)
        .ok()
        .filter(|l| *l != END_OF_ROWS)
        .ok_or_else(|| damaged("row or metadata of 4 GiB or more"))
}

/// The 32-bit value of a CRC32C digest.
fn crc32(d: &Digest) -> u32 {
    u32::try_from(d.finalize() & 0xffff_ffff).unwrap_or(u32::MAX)
}

fn damaged(what: &str) -> ReplicaError {
    ReplicaError::Snapshot(what.to_string())
}

/// Reads a snapshot stream, keeping the running CRC.
struct StreamReader<R: Read> {
    input: R,
    crc: Digest,
}

impl<R: Read> StreamReader<R> {
    fn new(input: R) -> Self {
        StreamReader {
            input,
            crc: Digest::new(CrcAlgorithm::Crc32Iscsi),
        }
    }

    /// `len` bytes; memory grows only as they arrive, so a damaged length
    /// cannot ask for gigabytes up front.
    fn bytes(&mut self, len: u32) -> ReplicaResult<Vec<u8>> {
        let mut buf = Vec::new();
        (&mut self.input)
            .take(u64::from(len))
            .read_to_end(&mut buf)?;
        if buf.len() != len as usize {
            return Err(damaged("stream ends early"));
        }
        self.crc.update(&buf);
        Ok(buf)
    }

    fn u32(&mut self) -> ReplicaResult<u32> {
        let mut b = [0u8; 4];
        self.input.read_exact(&mut b)?;
        self.crc.update(&b);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> ReplicaResult<u64> {
        let mut b = [0u8; 8];
        self.input.read_exact(&mut b)?;
        self.crc.update(&b);
        Ok(u64::from_le_bytes(b))
    }

    fn head(&mut self) -> ReplicaResult<StreamHead> {
        let magic = self.bytes(8)?;
        let v2 = match magic.as_slice() {
            m if m == MAGIC => true,
            m if m == MAGIC_V1 => false,
            _ => return Err(damaged("not a laneway snapshot")),
        };
        let len = self.u32()?;
        if len > MAX_META {
            return Err(damaged("metadata too large"));
        }
        let meta = bincode::deserialize(&self.bytes(len)?)?;
        let segments = if v2 { self.segments()? } else { Vec::new() };
        Ok(StreamHead { meta, segments })
    }

    /// The segment list, which must be in ascending id order.
    fn segments(&mut self) -> ReplicaResult<Vec<SegmentExtent>> {
        let count = self.u32()?;
        if count > MAX_SEGMENTS {
            return Err(damaged("too many volume segments"));
        }
        let mut out: Vec<SegmentExtent> = Vec::new();
        for _ in 0..count {
            let s = SegmentExtent {
                id: self.u64()?,
                len: self.u64()?,
            };
            if out.last().is_some_and(|p| p.id >= s.id) {
                return Err(damaged("volume segments out of order"));
            }
            out.push(s);
        }
        Ok(out)
    }

    /// The next row, or None at the end of the rows.
    fn row(&mut self) -> ReplicaResult<Option<(Vec<u8>, Vec<u8>)>> {
        let key_len = self.u32()?;
        if key_len == END_OF_ROWS {
            return Ok(None);
        }
        let value_len = self.u32()?;
        let key = self.bytes(key_len)?;
        let value = self.bytes(value_len)?;
        Ok(Some((key, value)))
    }

    /// Check the trailer against the rows read.
    fn trailer(mut self, rows: u64) -> ReplicaResult<()> {
        let count = self.u64()?;
        let want = crc32(&self.crc);
        let mut b = [0u8; 4];
        self.input.read_exact(&mut b)?;
        if u32::from_le_bytes(b) != want {
            return Err(damaged("checksum mismatch"));
        }
        if count != rows {
            return Err(damaged("row count mismatch"));
        }
        Ok(())
    }
}

/// Only the head of a stream (not checked against the CRC).
pub fn read_head(input: impl Read) -> ReplicaResult<StreamHead> {
    StreamReader::new(input).head()
}

/// Read a whole stream: every row goes to `on_row` in order, and the result
/// is the head once the trailer has been checked.
pub fn read_stream(
    input: impl Read,
    mut on_row: impl FnMut(Vec<u8>, Vec<u8>),
) -> ReplicaResult<StreamHead> {
    let mut r = StreamReader::new(input);
    let meta = r.head()?;
    let mut rows = 0u64;
    while let Some((k, v)) = r.row()? {
        on_row(k, v);
        rows += 1;
    }
    r.trailer(rows)?;
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (StreamHead, Vec<u8>) {
        let head = StreamHead {
            meta: SnapshotMeta {
                snapshot_id: "s1".into(),
                ..Default::default()
            },
            segments: vec![
                SegmentExtent { id: 3, len: 70_000 },
                SegmentExtent { id: 9, len: 0 },
            ],
        };
        let mut w = StreamWriter::new(Vec::new(), &head).expect("start");
        w.row(b"a", b"1").expect("row");
        w.row(b"b", b"").expect("row");
        (head, w.finish().expect("finish"))
    }

    #[test]
    fn rows_and_head_come_back() {
        let (head, bytes) = sample();
        let mut rows = Vec::new();
        let back = read_stream(&bytes[..], |k, v| rows.push((k, v))).expect("read");
        assert_eq!(back, head);
        assert_eq!(read_head(&bytes[..]).expect("head"), head);
        assert_eq!(
            rows,
            vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), Vec::new())]
        );
    }

    #[test]
    fn a_version_1_stream_reads_with_no_segments() {
        let meta = SnapshotMeta {
            snapshot_id: "old".into(),
            ..Default::default()
        };
        let meta_bytes = bincode::serialize(&meta).expect("meta");
        let mut crc = Digest::new(CrcAlgorithm::Crc32Iscsi);
        let mut bytes = Vec::new();
        let mut put = |b: &[u8], bytes: &mut Vec<u8>| {
            crc.update(b);
            bytes.extend_from_slice(b);
        };
        put(MAGIC_V1, &mut bytes);
        put(
            &frame_len(meta_bytes.len()).expect("len").to_le_bytes(),
            &mut bytes,
        );
        put(&meta_bytes, &mut bytes);
        put(&1u32.to_le_bytes(), &mut bytes);
        put(&1u32.to_le_bytes(), &mut bytes);
        put(b"k", &mut bytes);
        put(b"v", &mut bytes);
        put(&END_OF_ROWS.to_le_bytes(), &mut bytes);
        put(&1u64.to_le_bytes(), &mut bytes);
        bytes.extend_from_slice(&crc32(&crc).to_le_bytes());
        let mut rows = Vec::new();
        let head = read_stream(&bytes[..], |k, v| rows.push((k, v))).expect("v1");
        assert_eq!(head.meta, meta);
        assert!(head.segments.is_empty());
        assert_eq!(rows, vec![(b"k".to_vec(), b"v".to_vec())]);
    }

    #[test]
    fn segments_out_of_order_are_refused() {
        let head = StreamHead {
            segments: vec![
                SegmentExtent { id: 5, len: 1 },
                SegmentExtent { id: 5, len: 2 },
            ],
            ..Default::default()
        };
        let bytes = StreamWriter::new(Vec::new(), &head)
            .expect("start")
            .finish()
            .expect("finish");
        assert!(read_stream(&bytes[..], |_, _| {}).is_err());
    }

    #[test]
    fn any_flipped_byte_or_cut_is_refused() {
        let (_, bytes) = sample();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(read_stream(&bad[..], |_, _| {}).is_err(), "byte {i}");
        }
        for cut in 0..bytes.len() {
            assert!(read_stream(&bytes[..cut], |_, _| {}).is_err(), "cut {cut}");
        }
    }
}
