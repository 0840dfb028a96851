//! Segment files of a node's Raft log: their names, creating one, and
//! reading one back at recovery.
//!
//! A segment is `<id>.wal` (the id in 20 decimal digits, so names sort as
//! ids do). A new segment is written whole (header and the groups'
//! checkpoint records), synced, and its directory synced, before anything
//! is appended to it; the previous segment was synced before, so every
//! segment but the newest is complete. Recovery therefore accepts a torn
//! or damaged record only at the end of the newest segment (a write that a
//! crash cut short, never acknowledged), cuts it off, and refuses to open
//! a log with damage anywhere else rather than silently lose what follows.

use super::record::{FRAME_HEADER, MAX_BODY, SEGMENT_MAGIC, crc, parse_header};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// The file name of segment `id`.
pub fn name(id: u64) -> String {
    format!("{id:020}.wal")
}

/// The path of segment `id` in `dir`.
pub fn path(dir: &Path, id: u64) -> PathBuf {
    dir.join(name(id))
}

/// The ids of the segments in `dir`, oldest first.
pub fn list(dir: &Path) -> io::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file = entry.file_name();
        let Some(id) = file
            .to_str()
            .and_then(|n| n.strip_suffix(".wal"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        ids.push(id);
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Create segment `id` in `dir` holding its header and `first` (records
/// already framed), synced, with the directory synced too; returns the
/// file opened for appending and its length.
pub fn create(dir: &Path, id: u64, first: &[u8]) -> io::Result<(File, u64)> {
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(path(dir, id))?;
    let mut bytes = Vec::with_capacity(SEGMENT_MAGIC.len() + first.len());
    bytes.extend_from_slice(&SEGMENT_MAGIC);
    bytes.extend_from_slice(first);
    file.write_all(&bytes)?;
    file.sync_data()?;
    sync_dir(dir)?;
    Ok((file, bytes.len() as u64))
}

/// Make the directory's entries (files created or removed) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// What reading a segment found.
pub struct Scan {
    /// The length of the segment up to the last whole record.
    pub valid: u64,
    /// Whether anything followed the last whole record (a torn or damaged
    /// record).
    pub damaged: bool,
}

/// Read segment `path` through, calling `each` on every whole record in
/// order (with its offset and body); stops at the first torn or damaged
/// record.
pub fn scan(path: &Path, mut each: impl FnMut(u64, &[u8]) -> io::Result<()>) -> io::Result<Scan> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut magic = [0u8; SEGMENT_MAGIC.len()];
    if read_full(&mut reader, &mut magic)? < magic.len() || magic != SEGMENT_MAGIC {
        return Ok(Scan {
            valid: 0,
            damaged: len > 0,
        });
    }
    let mut at = SEGMENT_MAGIC.len() as u64;
    let mut body = Vec::new();
    loop {
        let mut header = [0u8; FRAME_HEADER];
        let got = read_full(&mut reader, &mut header)?;
        if got == 0 {
            break;
        }
        let (body_len, sum) = parse_header(&header);
        if got < FRAME_HEADER || body_len > MAX_BODY || at + (FRAME_HEADER + body_len) as u64 > len
        {
            return Ok(Scan {
                valid: at,
                damaged: true,
            });
        }
        body.resize(body_len, 0);
        if read_full(&mut reader, &mut body)? < body_len || crc(&body) != sum {
            return Ok(Scan {
                valid: at,
                damaged: true,
            });
        }
        each(at, &body)?;
        at += (FRAME_HEADER + body_len) as u64;
    }
    Ok(Scan {
        valid: at,
        damaged: false,
    })
}

/// Read into `buf` until it is full or the file ends; how many bytes came.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Read the record whose header is at `offset` in `file`, with a body of
/// `body_len` bytes, and check its CRC.
pub fn read_record(file: &File, offset: u64, body_len: u32) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let len = usize::try_from(body_len).map_err(io::Error::other)?;
    let mut bytes = vec![0u8; FRAME_HEADER + len];
    file.read_exact_at(&mut bytes, offset)?;
    let header: [u8; FRAME_HEADER] = bytes[..FRAME_HEADER].try_into().map_err(io::Error::other)?;
    let (got_len, sum) = parse_header(&header);
    let body = bytes.split_off(FRAME_HEADER);
    if got_len != len || crc(&body) != sum {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("raft log record at {offset} is damaged"),
        ));
    }
    Ok(body)
}
