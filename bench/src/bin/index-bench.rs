//! index-bench: measures a metadata-index engine (fjall or sled) through the
//! store's own [`MetaIndex`] trait, on a workload shaped like laneway's object
//! records, to choose the default engine with numbers (docs/engine-choice.md).
//!
//! Workload: `--records` object-like records. A key is `b'o'`, an 8-byte
//! big-endian bucket id and an S3-style object name
//! (`data/2026/11/part-000123/file-00012345.parquet`), 55 bytes. A value is
//! 100-120 bytes shaped like an encoded record of a volume-stored object
//! (etag, size, times, volume position, checksum, content type). Records are
//! inserted in a random order (a seeded, memory-free permutation) in durable
//! batches: `write` + `sync` per `--batch` records. Then: disk bytes, peak
//! RSS, a full ordered scan in chunks of 1000 and the time to drop and reopen.

use clap::Parser;
use laneway_store::index::{Engine, MetaIndex, WriteBatch, open_index};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type BenchResult<T> = Result<T, Box<dyn Error>>;

/// Buckets the records are spread over.
const BUCKETS: u64 = 8;
/// Objects per `part-NNNNNN/` prefix within a bucket.
const FILES_PER_PART: u64 = 1_000;
/// Entries per call of `scan` in the full ordered scan.
const SCAN_CHUNK: usize = 1_000;
/// Records between two progress lines during the load.
const PROGRESS_EVERY: u64 = 500_000;

/// Command-line flags.
#[derive(Parser, Debug)]
#[command(about = "Benchmark a laneway metadata-index engine")]
struct Args {
    /// Engine to measure: fjall or sled.
    #[arg(long, default_value = "fjall")]
    engine: String,
    /// Number of records to insert.
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    /// Records per durable batch (write + sync).
    #[arg(long, default_value_t = 1_000)]
    batch: u64,
    /// Index directory (must be absent or empty); default: a fresh temp dir.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seed of the insertion order and of the value bytes.
    #[arg(long, default_value_t = 0x006c_616e_6577_6179)]
    seed: u64,
    /// Stop loading after this many seconds (0 = never) and measure what was
    /// loaded; for extrapolating engines too slow to finish.
    #[arg(long, default_value_t = 0)]
    load_time_limit: u64,
    /// Keep the index directory afterwards (default: delete it).
    #[arg(long)]
    keep: bool,
}

fn main() -> BenchResult<()> {
    let args = Args::parse();
    let engine = Engine::parse(&args.engine).ok_or("--engine must be fjall or sled")?;
    let dir = prepare_dir(&args)?;
    print_method(&args, &dir);
    let outcome = run(&args, engine, &dir);
    if !args.keep {
        std::fs::remove_dir_all(&dir)?;
    }
    outcome
}

fn run(args: &Args, engine: Engine, dir: &Path) -> BenchResult<()> {
    let index = open_index(engine, dir)?;
    let loaded = load(&*index, args)?;
    report_disk(&*index, dir, loaded)?;
    println!("peak RSS after load: {}", peak_rss()?);
    scan_everything(&*index, loaded)?;
    reopen(index, engine, dir, args, loaded)?;
    println!("peak RSS at end: {}", peak_rss()?);
    Ok(())
}

fn prepare_dir(args: &Args) -> BenchResult<PathBuf> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("laneway-index-bench-{}", args.engine)),
    };
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        return Err(format!(
            "{} is not empty; remove it or pass another --dir",
            dir.display()
        )
        .into());
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn print_method(args: &Args, dir: &Path) {
    println!("== index-bench ==");
    println!("engine: {}", args.engine);
    println!(
        "records: {}  batch: {}  seed: {}",
        args.records, args.batch, args.seed
    );
    println!("dir: {}", dir.display());
    println!(
        "method: {} records inserted in seeded random order through MetaIndex::write, \
         each batch of {} followed by MetaIndex::sync (durable); keys {} bytes \
         (b'o' + 8-byte bucket id + data/2026/11/part-NNNNNN/file-NNNNNNNN.parquet, {} buckets), \
         values 100-120 bytes (record-like: etag, size, times, volume position, crc, content type); \
         full ordered scan via MetaIndex::scan in chunks of {}; reopen = drop + open_index.",
        args.records,
        args.batch,
        record_key(0).len(),
        BUCKETS,
        SCAN_CHUNK
    );
}

/// Insert the records in random order, durably; returns how many were loaded.
fn load(index: &dyn MetaIndex, args: &Args) -> BenchResult<u64> {
    let order = Permutation::new(args.records, args.seed);
    let limit = (args.load_time_limit > 0).then(|| Duration::from_secs(args.load_time_limit));
    let started = Instant::now();
    let mut loaded = 0u64;
    while loaded < args.records {
        let end = (loaded + args.batch.max(1)).min(args.records);
        index.write(make_batch(&order, loaded..end, args.seed))?;
        index.sync()?;
        report_progress(loaded, end, started);
        loaded = end;
        if limit.is_some_and(|l| started.elapsed() >= l) {
            println!("load stopped by --load-time-limit after {loaded} records");
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "load: {loaded} records in {secs:.1} s = {:.0} keys/s ({:.0} durable batches/s)",
        loaded as f64 / secs,
        loaded.div_ceil(args.batch.max(1)) as f64 / secs
    );
    Ok(loaded)
}

fn make_batch(order: &Permutation, positions: std::ops::Range<u64>, seed: u64) -> WriteBatch {
    let mut batch = WriteBatch::default();
    for pos in positions {
        let n = order.at(pos);
        batch.put(record_key(n), record_value(n, seed));
    }
    batch
}

fn report_progress(before: u64, after: u64, started: Instant) {
    if before / PROGRESS_EVERY != after / PROGRESS_EVERY {
        let secs = started.elapsed().as_secs_f64();
        println!(
            "  progress: {after} records, {secs:.0} s, {:.0} keys/s overall",
            after as f64 / secs
        );
    }
}

fn report_disk(index: &dyn MetaIndex, dir: &Path, loaded: u64) -> BenchResult<()> {
    let engine_bytes = index.disk_bytes()?;
    let (allocated, apparent) = du(dir)?;
    let per = |b: u64| b as f64 / loaded.max(1) as f64;
    println!(
        "disk (engine disk_bytes): {engine_bytes} B = {:.1} B/record",
        per(engine_bytes)
    );
    println!(
        "disk (du, allocated blocks): {allocated} B = {:.1} B/record",
        per(allocated)
    );
    println!(
        "disk (du --apparent-size): {apparent} B = {:.1} B/record",
        per(apparent)
    );
    let raw = record_key(0).len() as u64 + 110;
    println!("raw key+value bytes per record: ~{raw}");
    Ok(())
}

/// Allocated bytes (`du -sB1`) and apparent bytes of everything under `dir`.
fn du(dir: &Path) -> BenchResult<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut allocated, mut apparent) = (0u64, 0u64);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        if meta.is_dir() {
            let (a, b) = du(&entry.path())?;
            allocated += a;
            apparent += b;
        }
        allocated += meta.blocks() * 512;
        apparent += meta.len();
    }
    Ok((allocated, apparent))
}

/// Scan the whole index in order, in chunks, checking order and count.
fn scan_everything(index: &dyn MetaIndex, loaded: u64) -> BenchResult<()> {
    let started = Instant::now();
    let mut count = 0u64;
    let mut from: Vec<u8> = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    loop {
        let page = index.scan(&from, &[], SCAN_CHUNK)?;
        for (key, _) in &page {
            if last.as_ref().is_some_and(|l| l >= key) {
                return Err("scan returned keys out of order".into());
            }
            last = Some(key.clone());
        }
        count += page.len() as u64;
        match page.last() {
            Some((key, _)) if page.len() == SCAN_CHUNK => {
                from = key.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "scan: {count} keys in order in {secs:.2} s = {:.0} keys/s",
        count as f64 / secs
    );
    if count != loaded {
        return Err(format!("scan found {count} keys, loaded {loaded}").into());
    }
    Ok(())
}

fn reopen(
    index: Box<dyn MetaIndex>,
    engine: Engine,
    dir: &Path,
    args: &Args,
    loaded: u64,
) -> BenchResult<()> {
    let started = Instant::now();
    drop(index);
    let dropped = started.elapsed();
    let index = open_index(engine, dir)?;
    let total = started.elapsed();
    println!(
        "reopen: {:.3} s (drop {:.3} s + open {:.3} s)",
        total.as_secs_f64(),
        dropped.as_secs_f64(),
        (total - dropped).as_secs_f64()
    );
    spot_check(&*index, args, loaded)
}

/// The first, middle and last loaded records read back with their values.
fn spot_check(index: &dyn MetaIndex, args: &Args, loaded: u64) -> BenchResult<()> {
    if loaded == 0 {
        return Ok(());
    }
    let order = Permutation::new(args.records, args.seed);
    for pos in [0, loaded / 2, loaded - 1] {
        let n = order.at(pos);
        if index.get(&record_key(n))? != Some(record_value(n, args.seed)) {
            return Err(format!("record {n} missing or wrong after reopen").into());
        }
    }
    Ok(())
}

/// VmHWM (peak resident set size) from /proc/self/status.
fn peak_rss() -> BenchResult<String> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .ok_or("no VmHWM in /proc/self/status")?;
    Ok(line.trim_start_matches("VmHWM:").trim().to_string())
}

/// The key of record `n`: `b'o'`, bucket id (big endian), object name.
fn record_key(n: u64) -> Vec<u8> {
    let bucket = 0x1000 + n % BUCKETS;
    let in_bucket = n / BUCKETS;
    let name = format!(
        "data/2026/11/part-{:06}/file-{:08}.parquet",
        in_bucket / FILES_PER_PART,
        in_bucket
    );
    let mut key = Vec::with_capacity(1 + 8 + name.len());
    key.push(b'o');
    key.extend_from_slice(&bucket.to_be_bytes());
    key.extend_from_slice(name.as_bytes());
    key
}

/// A record-like value of 100-120 bytes, deterministic in (`n`, `seed`).
fn record_value(n: u64, seed: u64) -> Vec<u8> {
    let h = |i: u64| splitmix64(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i);
    let mut v = Vec::with_capacity(120);
    v.extend_from_slice(&[1, 0]); // format version, flags
    v.extend_from_slice(&h(1).to_le_bytes()); // etag (md5), 16 bytes
    v.extend_from_slice(&h(2).to_le_bytes());
    v.extend_from_slice(&(h(3) % (256 << 20)).to_le_bytes()); // size
    v.extend_from_slice(&(1_795_000_000_000 + h(4) % 10_000_000).to_le_bytes()); // mtime ms
    v.extend_from_slice(&(h(5) % 64).to_le_bytes()[..4]); // volume segment
    v.extend_from_slice(&(h(6) % (1 << 30)).to_le_bytes()); // offset in segment
    v.extend_from_slice(&h(7).to_le_bytes()[..4]); // crc32c
    v.extend_from_slice(b"application/vnd.apache.parquet"); // content type
    let user_meta_len = usize::try_from(h(8) % 21).unwrap_or(0) + 20;
    v.extend((0..user_meta_len).map(|i| letter(h(9 + i as u64)))); // user metadata
    v
}

/// A lower-case ASCII letter chosen by `x`.
fn letter(x: u64) -> u8 {
    const LETTERS: &[u8; 26] = b"abcdefghijklmnopqrstuvwxyz";
    LETTERS[usize::try_from(x % 26).unwrap_or(0)]
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded pseudo-random permutation of `0..n` that needs no memory: a
/// 4-round Feistel network on the smallest even-bit power of two >= n, with
/// cycle-walking to stay below n.
struct Permutation {
    n: u64,
    half_bits: u32,
    round_keys: [u64; 4],
}

impl Permutation {
    fn new(n: u64, seed: u64) -> Permutation {
        let bits = 64 - n.max(2).saturating_sub(1).leading_zeros();
        let round_keys = [1, 2, 3, 4].map(|r| splitmix64(seed.wrapping_add(r)));
        Permutation {
            n: n.max(1),
            half_bits: bits.div_ceil(2),
            round_keys,
        }
    }

    /// The record at position `pos` of the insertion order.
    fn at(&self, pos: u64) -> u64 {
        let mut x = pos;
        loop {
            x = self.feistel(x);
            if x < self.n {
                return x;
            }
        }
    }

    fn feistel(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for key in self.round_keys {
            let f = splitmix64(right ^ key) & mask;
            (left, right) = (right, left ^ f);
        }
        (left << self.half_bits) | right
    }
}
