//! The snapshot stream of a partition: its metadata and every index row of
//! the partition, framed and closed by a CRC32C over all of it.
//!
//! Layout (integers little-endian):
//!
//! ```text
//! "LWSNAP01"                       magic and version
//! u32 meta_len, meta               bincode SnapshotMeta (last log id, membership, id)
//! { u32 key_len, u32 value_len, key, value }*   the rows, in key order
//! u32 0xFFFF_FFFF                  end of rows
//! u64 row_count, u32 crc32c        the CRC covers every byte before it
//! ```
//!
//! The reader hands rows out as it goes and checks the trailer at the end,
//! so a caller keeps what it read aside until [`read_stream`] returns Ok.
//! Object bodies in volume segments are not in the stream yet
//! (docs/replication.md, "Plan").

use crate::blocking::{ReplicaError, ReplicaResult};
use crate::types::SnapshotMeta;
use crc_fast::{CrcAlgorithm, Digest};
use std::io::{Read, Write};

const MAGIC: &[u8; 8] = b"LWSNAP01";
const END_OF_ROWS: u32 = u32::MAX;
/// The largest metadata a reader accepts.
const MAX_META: u32 = 64 << 20;

/// Writes a snapshot stream to `W`, row by row.
pub struct StreamWriter<W: Write> {
    out: W,
    crc: Digest,
    rows: u64,
}

impl<W: Write> StreamWriter<W> {
    /// Start a stream for `meta` on `out`.
    pub fn new(out: W, meta: &SnapshotMeta) -> ReplicaResult<StreamWriter<W>> {
        let mut w = StreamWriter {
            out,
            crc: Digest::new(CrcAlgorithm::Crc32Iscsi),
            rows: 0,
        };
        let meta = bincode::serialize(meta)?;
        w.emit(MAGIC)?;
        w.emit(&frame_len(meta.len())?.to_le_bytes())?;
        w.emit(&meta)?;
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

    fn meta(&mut self) -> ReplicaResult<SnapshotMeta> {
        if self.bytes(8)? != MAGIC {
            return Err(damaged("not a laneway snapshot"));
        }
        let len = self.u32()?;
        if len > MAX_META {
            return Err(damaged("metadata too large"));
        }
        Ok(bincode::deserialize(&self.bytes(len)?)?)
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

/// Only the metadata at the head of a stream (not checked against the CRC).
pub fn read_meta(input: impl Read) -> ReplicaResult<SnapshotMeta> {
    StreamReader::new(input).meta()
}

/// Read a whole stream: every row goes to `on_row` in order, and the result
/// is the metadata once the trailer has been checked.
pub fn read_stream(
    input: impl Read,
    mut on_row: impl FnMut(Vec<u8>, Vec<u8>),
) -> ReplicaResult<SnapshotMeta> {
    let mut r = StreamReader::new(input);
    let meta = r.meta()?;
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

    fn sample() -> (SnapshotMeta, Vec<u8>) {
        let meta = SnapshotMeta {
            snapshot_id: "s1".into(),
            ..Default::default()
        };
        let mut w = StreamWriter::new(Vec::new(), &meta).expect("start");
        w.row(b"a", b"1").expect("row");
        w.row(b"b", b"").expect("row");
        (meta, w.finish().expect("finish"))
    }

    #[test]
    fn rows_and_meta_come_back() {
        let (meta, bytes) = sample();
        let mut rows = Vec::new();
        let back = read_stream(&bytes[..], |k, v| rows.push((k, v))).expect("read");
        assert_eq!(back, meta);
        assert_eq!(read_meta(&bytes[..]).expect("meta"), meta);
        assert_eq!(
            rows,
            vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), Vec::new())]
        );
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
