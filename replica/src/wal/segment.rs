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
//!
//! Preallocation: a segment is normally begun in a spare file
//! ([`SPARE`]) that was filled with zeros and synced beforehand
//! ([`prepare_spare`]), so the appends overwrite blocks that already exist
//! and the file's size does not change: each fdatasync then writes the
//! data pages and nothing of the inode (on this machine's ext4, 2 waits
//! for the disk a sync instead of 3.3-3.6, and 57-66 instead of 89-99 us
//! of CPU; docs/benchmarks.md, "Preallocated log segments"). Zeros after
//! the last record are therefore the normal end of the newest segment: a
//! frame header of zeros ends the scan, and is a clean end when every
//! byte after it is zero too; anything else there is a torn write and is
//! cut off like any other.
//!
//! Reuse: a segment the groups no longer need is not deleted while fewer
//! than [`REUSABLE`] wait to be reused; its file is renamed
//! `<id>.reuse` ([`reuse_path`]) and a later segment is begun in it,
//! over its old records (a zero-filled spare is begun in only while none
//! waits). The blocks exist and were
//! written, so the appends are overwrites as in a zero-filled spare, and
//! nothing is written twice (zero-filling a spare wrote as many bytes as
//! the log itself, and in profiles under load copying them into the page
//! cache cost the store nodes up to about as much CPU as the log thread:
//! docs/benchmarks.md, "Reused log segments"). The old records after the new ones never read
//! as the new segment's: every record's CRC is stored XORed with its
//! segment's mask ([`super::record::mask`]), so an old record fails the
//! check where a scan reaches it, which ends the segment there. Only the
//! newest segment has such a tail: a segment is cut to what it holds
//! when the next is begun, and recovery cuts the newest one's (as it cuts
//! a torn write), so every older segment ends where its last record does,
//! and damage there is still refused. A spare that an earlier run left
//! (perhaps already holding the header of the segment it was to become)
//! is never begun in: a zero-filled one is filled again, and reused ones
//! are deleted when the log is opened ([`remove_reusable`]).

use super::record::{
    FRAME_HEADER, MAX_BODY, SEGMENT_MAGIC, crc, mask, mask_for, mask_frames, parse_header,
};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The file a segment is prepared in, zero-filled, before it is begun.
pub const SPARE: &str = "spare.prep";

/// Most segments kept to be reused at once (the file holds up to this
/// many segments' worth more than the groups' logs and the slack).
pub const REUSABLE: usize = 3;

/// Where segment `id`'s file waits to be reused.
pub fn reuse_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.reuse"))
}

/// Delete every file waiting to be reused (at open: one may hold the
/// header of a segment that was never begun, whose id the next segment
/// gets again, so its records would pass the check).
pub fn remove_reusable(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.ends_with(".reuse"))
        {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

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

/// A segment just created.
pub struct Created {
    /// Opened for writing (appends are written at their offset).
    pub file: File,
    /// Its length: the header and the first records.
    pub len: u64,
    /// Its size on disk (more than `len` when begun in a spare).
    pub allocated: u64,
}

/// Create segment `id` in `dir` holding its header and `first` (records
/// framed, their CRCs not yet masked), synced, with the directory synced
/// too. With `spare`, the segment is begun in that file (zero-filled by
/// [`prepare_spare`], or a segment's, reused) and renamed into place;
/// otherwise it is a new file that grows with every append.
pub fn create(dir: &Path, id: u64, first: &[u8], spare: Option<&Path>) -> io::Result<Created> {
    let mut bytes = Vec::with_capacity(SEGMENT_MAGIC.len() + first.len());
    bytes.extend_from_slice(&SEGMENT_MAGIC);
    bytes.extend_from_slice(first);
    mask_frames(&mut bytes[SEGMENT_MAGIC.len()..], mask(id));
    let file = if let Some(spare) = spare {
        let file = OpenOptions::new().write(true).open(spare)?;
        file.write_all_at(&bytes, 0)?;
        file.sync_data()?;
        std::fs::rename(spare, path(dir, id))?;
        file
    } else {
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(path(dir, id))?;
        file.write_all(&bytes)?;
        file.sync_data()?;
        file
    };
    sync_dir(dir)?;
    let len = bytes.len() as u64;
    let allocated = file.metadata()?.len().max(len);
    Ok(Created {
        file,
        len,
        allocated,
    })
}

/// Fill the spare file in `dir` with `bytes` zeros and sync it, so the
/// next segment can be begun in it. A spare left by an earlier run is
/// written over; a spare that could not be filled (a full disk) is removed.
pub fn prepare_spare(dir: &Path, bytes: u64) -> io::Result<()> {
    let filled = fill_with_zeros(&dir.join(SPARE), bytes);
    if filled.is_err() {
        let _ = std::fs::remove_file(dir.join(SPARE));
    }
    filled
}

/// Write `bytes` zeros to the file at `path` (created or truncated) and
/// sync it.
fn fill_with_zeros(path: &Path, bytes: u64) -> io::Result<()> {
    const CHUNK: usize = 1 << 20;
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)?;
    let zeros = vec![0u8; CHUNK];
    let mut left = bytes;
    while left > 0 {
        let n = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
        file.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    file.sync_data()
}

/// Make the directory's entries (files created or removed) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// What reading a segment found.
pub struct Scan {
    /// The length of the segment up to the last whole record.
    pub valid: u64,
    /// Whether anything but zeros followed the last whole record (a torn
    /// or damaged record, or a reused file's old records); zeros are the
    /// preallocated rest of a segment.
    pub damaged: bool,
    /// What its records' CRCs are stored XORed with (0: format 1).
    pub mask: u32,
}

/// Read segment `id` at `path` through, calling `each` on every whole
/// record in order (with its offset and body); stops at the first torn or
/// damaged record (or a reused file's first old one).
pub fn scan(
    path: &Path,
    id: u64,
    mut each: impl FnMut(u64, &[u8]) -> io::Result<()>,
) -> io::Result<Scan> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut magic = [0u8; SEGMENT_MAGIC.len()];
    let got = read_full(&mut reader, &mut magic)?;
    let Some(mask) = mask_for(&magic, id).filter(|_| got == magic.len()) else {
        return Ok(Scan {
            valid: 0,
            damaged: len > 0,
            mask: 0,
        });
    };
    let mut at = SEGMENT_MAGIC.len() as u64;
    let mut body = Vec::new();
    loop {
        let mut header = [0u8; FRAME_HEADER];
        let got = read_full(&mut reader, &mut header)?;
        if got == 0 {
            break;
        }
        if got == FRAME_HEADER && header == [0u8; FRAME_HEADER] {
            // The preallocated rest of the segment, or a torn write into it.
            return Ok(Scan {
                valid: at,
                damaged: !rest_is_zero(&mut reader)?,
                mask,
            });
        }
        let (body_len, sum) = parse_header(&header);
        if got < FRAME_HEADER || body_len > MAX_BODY || at + (FRAME_HEADER + body_len) as u64 > len
        {
            return Ok(Scan {
                valid: at,
                damaged: true,
                mask,
            });
        }
        body.resize(body_len, 0);
        if read_full(&mut reader, &mut body)? < body_len || crc(&body) ^ mask != sum {
            return Ok(Scan {
                valid: at,
                damaged: true,
                mask,
            });
        }
        each(at, &body)?;
        at += (FRAME_HEADER + body_len) as u64;
    }
    Ok(Scan {
        valid: at,
        damaged: false,
        mask,
    })
}

/// Whether everything `reader` has left is zeros.
fn rest_is_zero(reader: &mut impl Read) -> io::Result<bool> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let got = read_full(reader, &mut buf)?;
        if buf[..got].iter().any(|b| *b != 0) {
            return Ok(false);
        }
        if got < buf.len() {
            return Ok(true);
        }
    }
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

/// Read the record whose header is at `offset` in `file` (a segment whose
/// CRCs are masked with `mask`), with a body of `body_len` bytes, and
/// check its CRC.
pub fn read_record(file: &File, offset: u64, body_len: u32, mask: u32) -> io::Result<Vec<u8>> {
    let len = usize::try_from(body_len).map_err(io::Error::other)?;
    let mut bytes = vec![0u8; FRAME_HEADER + len];
    file.read_exact_at(&mut bytes, offset)?;
    let header: [u8; FRAME_HEADER] = bytes[..FRAME_HEADER].try_into().map_err(io::Error::other)?;
    let (got_len, sum) = parse_header(&header);
    let body = bytes.split_off(FRAME_HEADER);
    if got_len != len || crc(&body) ^ mask != sum {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("raft log record at {offset} is damaged"),
        ));
    }
    Ok(body)
}
