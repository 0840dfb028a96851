//! Fuzz target: volume segment files (record headers, block tables and
//! trailers) read the way compaction scans a segment: [`read_header`] at
//! offset 0, every block of the record through [`RangeReader`], then the
//! next record at [`record_len`] further on, until a header does not
//! verify.
//!
//! Input: a mode byte, then a segment image. With bit 0 of the mode set,
//! the target first rewrites the CRCs (header, blocks, table trailer) of
//! the records it can walk, and with bit 1 also the magic, version and
//! block size, so the fuzzer gets past the checksums to the lengths and
//! offsets behind them. Checks: no panic and no overflow whatever the
//! lengths. Then a record is written with [`RecordWriter`] (key and data
//! from the input) and must read back equal: header, data, and any range
//! of it.
#![no_main]

use laneway_store::BucketId;
use laneway_store::volume::{
    BLOCK, FLAG_PART, HEADER_FIXED, RangeReader, RecordWriter, VolumeSet, crc32c, read_header,
    record_len,
};
use libfuzzer_sys::fuzz_target;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, OnceLock};

const MAGIC: u32 = 0x4c57_5631;

struct Scratch {
    /// Keeps the directory alive for the process.
    _dir: tempfile::TempDir,
    image: Arc<File>,
    volumes: VolumeSet,
}

/// One scratch directory per process, in memory when /dev/shm exists.
fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| {
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .expect("scratch dir");
        let image = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("image.dat"))
            .expect("image file");
        // segment_max 1: every record seals its segment, which is then removed.
        let volumes = VolumeSet::open(&dir.path().join("vol"), 1).expect("volume set");
        Scratch {
            _dir: dir,
            image: Arc::new(image),
            volumes,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, image)) = data.split_first() else {
        return;
    };
    let mut image = image.to_vec();
    if mode & 1 != 0 {
        fix_up(&mut image, mode & 2 != 0);
    }
    scan(&image);
    round_trip(mode, data);
});

/// Scan `image` as compaction scans a sealed segment.
fn scan(image: &[u8]) {
    let s = scratch();
    s.image.set_len(0).expect("truncate");
    s.image.write_all_at(image, 0).expect("write image");
    let len = image.len() as u64;
    let mut offset = 0;
    while let Ok(Some(h)) = read_header(&s.image, offset, len) {
        let key_len = h.key.len() as u64;
        let rl = record_len(key_len, h.data_len);
        assert!(offset + rl <= len, "a verified record lies inside the file");
        let mut r = RangeReader::new(
            Arc::clone(&s.image),
            offset,
            key_len,
            h.data_len,
            0,
            h.data_len,
        );
        let mut read = 0;
        while let Ok(Some(chunk)) = r.next_chunk() {
            read += chunk.len() as u64;
        }
        assert!(read <= h.data_len);
        offset += rl;
    }
}

fn le_u16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Make the records of `image` verify, as far as they fit.
fn fix_up(image: &mut [u8], fields: bool) {
    let mut off = 0usize;
    while off + 32 <= image.len() {
        if fields {
            image[off..off + 4].copy_from_slice(&MAGIC.to_le_bytes());
            image[off + 4] = 1;
            image[off + 24..off + 28].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        }
        let key_end = off + 32 + le_u16(image, off + 6);
        if key_end > image.len() {
            return;
        }
        let mut head = image[off..off + 28].to_vec();
        head.extend_from_slice(&image[off + 32..key_end]);
        let crc = crc32c(&head);
        image[off + 28..off + 32].copy_from_slice(&crc.to_le_bytes());
        let Ok(data_len) = usize::try_from(le_u64(image, off + 16)) else {
            return;
        };
        let blocks = data_len.div_ceil(BLOCK as usize);
        let Some(end) = key_end
            .checked_add(data_len)
            .and_then(|e| e.checked_add(4 * blocks + 4))
            .filter(|e| *e <= image.len())
        else {
            return;
        };
        let table_at = key_end + data_len;
        let mut table = Vec::with_capacity(4 * blocks);
        for block in image[key_end..table_at].chunks(BLOCK as usize) {
            table.extend_from_slice(&crc32c(block).to_le_bytes());
        }
        let trailer = crc32c(&table);
        image[table_at..end - 4].copy_from_slice(&table);
        image[end - 4..end].copy_from_slice(&trailer.to_le_bytes());
        off = end;
    }
}

/// Write a record with `RecordWriter` and read it back.
fn round_trip(mode: u8, data: &[u8]) {
    let s = scratch();
    let split = data.len().min(usize::from(mode) * 2);
    let (key, body) = data.split_at(split);
    // Stretch the body over a few blocks now and then.
    let repeat = if mode & 4 != 0 {
        1 + 3 * BLOCK as usize / body.len().max(1)
    } else {
        1
    };
    let body: Vec<u8> = body
        .iter()
        .copied()
        .cycle()
        .take(body.len() * repeat)
        .collect();
    let flags = if mode & 8 != 0 { FLAG_PART } else { 0 };
    let bucket = BucketId(u64::from(mode) << 32 | data.len() as u64);
    let mut w = s.volumes.take_writer().expect("writer");
    let segment = w.id();
    let mut rw = RecordWriter::begin_with_flags(&mut w, bucket, key, flags).expect("begin");
    for chunk in body.chunks(usize::from(mode) + 1) {
        rw.push(chunk).expect("push");
    }
    let loc = rw.finish().expect("finish");
    s.volumes.release(w);
    // As the commit thread would: the record is done with, so the segment
    // holds nothing pending and may go.
    s.volumes.committed(&[segment]);
    let file = s.volumes.file(segment).expect("segment file");
    let len = file.metadata().expect("metadata").len();
    let h = read_header(&file, 0, len)
        .expect("read")
        .expect("own record verifies");
    assert_eq!(
        (h.bucket, h.key.as_slice(), h.flags, h.data_len),
        (bucket, key, flags, body.len() as u64)
    );
    assert_eq!(record_len(key.len() as u64, h.data_len), len, "{loc:?}");
    assert!(read_header(&file, len, len).expect("read").is_none());
    let n = body.len() as u64;
    let (a, b) = (
        u64::from(mode) % (n + 1),
        n.saturating_sub(u64::from(mode) / 3),
    );
    for (start, end) in [(0, n), (a.min(b), a.max(b))] {
        let mut r = RangeReader::new(Arc::clone(&file), 0, key.len() as u64, n, start, end);
        let mut got = Vec::new();
        while let Some(chunk) = r.next_chunk().expect("own record reads") {
            got.extend_from_slice(&chunk);
        }
        assert_eq!(got, body[start as usize..end as usize]);
    }
    assert!(HEADER_FIXED == 32);
    s.volumes.remove(segment).expect("remove segment");
}
