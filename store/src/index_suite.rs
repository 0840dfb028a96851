//! The one behavioural test suite for [`MetaIndex`], run against every engine.
//!
//! Each test is a plain function taking an [`Opener`]; the `suite!` macro at
//! the bottom instantiates every test once per engine (`index_suite::sled::*`
//! and `index_suite::fjall::*`), so the engines cannot drift apart in
//! behaviour without a failing test naming the engine.

use crate::index::{Engine, Entry, MetaIndex, WriteBatch, open_index};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Opens (or reopens) an index of one engine in a directory.
type Opener = fn(&Path) -> Box<dyn MetaIndex>;

fn open_sled(dir: &Path) -> Box<dyn MetaIndex> {
    open_index(Engine::Sled, dir).expect("open sled index")
}

fn open_fjall(dir: &Path) -> Box<dyn MetaIndex> {
    open_index(Engine::Fjall, dir).expect("open fjall index")
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create temp dir")
}

fn put(idx: &dyn MetaIndex, key: &[u8], value: &[u8]) {
    let mut batch = WriteBatch::default();
    batch.put(key.to_vec(), value.to_vec());
    idx.write(batch).expect("write put");
}

fn delete(idx: &dyn MetaIndex, key: &[u8]) {
    let mut batch = WriteBatch::default();
    batch.delete(key.to_vec());
    idx.write(batch).expect("write delete");
}

fn get(idx: &dyn MetaIndex, key: &[u8]) -> Option<Vec<u8>> {
    idx.get(key).expect("get")
}

fn keys(entries: &[Entry]) -> Vec<Vec<u8>> {
    entries.iter().map(|(k, _)| k.clone()).collect()
}

fn byte_keys(list: &[&[u8]]) -> Vec<Vec<u8>> {
    list.iter().map(|k| k.to_vec()).collect()
}

/// Scan `[start, end)` completely in chunks of `chunk`, resuming each chunk
/// just after the last key returned (last key + 0x00).
fn scan_all(idx: &dyn MetaIndex, start: &[u8], end: &[u8], chunk: usize) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut from = start.to_vec();
    loop {
        let page = idx.scan(&from, end, chunk).expect("scan chunk");
        let done = page.len() < chunk;
        if let Some((last, _)) = page.last() {
            from = last.clone();
            from.push(0);
        }
        out.extend(page);
        if done {
            return out;
        }
    }
}

fn get_missing_and_present(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    assert_eq!(get(&*idx, b"absent"), None);
    put(&*idx, b"k1", b"v1");
    assert_eq!(get(&*idx, b"k1"), Some(b"v1".to_vec()));
    assert_eq!(get(&*idx, b"k"), None, "a prefix of a key is not the key");
    assert_eq!(
        get(&*idx, b"k10"),
        None,
        "an extension of a key is not the key"
    );
}

fn put_overwrites(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    put(&*idx, b"k", b"first");
    put(&*idx, b"k", b"second, and longer than the first");
    assert_eq!(
        get(&*idx, b"k"),
        Some(b"second, and longer than the first".to_vec())
    );
    put(&*idx, b"k", b"");
    assert_eq!(
        get(&*idx, b"k"),
        Some(Vec::new()),
        "empty values are values"
    );
    assert_eq!(idx.scan(b"", b"", 10).expect("scan").len(), 1);
}

fn delete_removes(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    put(&*idx, b"a", b"1");
    put(&*idx, b"b", b"2");
    delete(&*idx, b"a");
    delete(&*idx, b"never-there");
    assert_eq!(get(&*idx, b"a"), None);
    assert_eq!(get(&*idx, b"b"), Some(b"2".to_vec()));
    assert_eq!(
        keys(&idx.scan(b"", b"", 10).expect("scan")),
        byte_keys(&[b"b"])
    );
    put(&*idx, b"a", b"again");
    assert_eq!(get(&*idx, b"a"), Some(b"again".to_vec()));
}

fn scan_respects_bounds_and_limit(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    let mut batch = WriteBatch::default();
    for i in (0..20u8).rev() {
        batch.put(format!("key-{i:02}").into_bytes(), vec![i]);
    }
    idx.write(batch).expect("write");

    let got = idx.scan(b"key-05", b"key-09", 100).expect("scan");
    let want: Vec<Entry> = (5..9u8)
        .map(|i| (format!("key-{i:02}").into_bytes(), vec![i]))
        .collect();
    assert_eq!(got, want, "start inclusive, end exclusive, ascending");

    let got = idx.scan(b"key-05", b"", 3).expect("scan");
    assert_eq!(keys(&got), byte_keys(&[b"key-05", b"key-06", b"key-07"]));

    let got = idx.scan(b"key-045", b"key-07x", 100).expect("scan");
    assert_eq!(
        keys(&got),
        byte_keys(&[b"key-05", b"key-06", b"key-07"]),
        "bounds need not be keys"
    );

    assert!(idx.scan(b"", b"", 0).expect("scan").is_empty(), "limit 0");
    assert!(
        idx.scan(b"key-09", b"key-05", 10).expect("scan").is_empty(),
        "start > end"
    );
    assert!(
        idx.scan(b"key-09", b"key-09", 10).expect("scan").is_empty(),
        "start == end"
    );
    assert!(
        idx.scan(b"zzz", b"", 10).expect("scan").is_empty(),
        "past the last key"
    );
}

fn empty_end_is_unbounded(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    put(&*idx, b"a", b"1");
    put(&*idx, &[0xFF; 64], b"2");
    put(&*idx, b"m", b"3");
    let got = idx.scan(b"b", b"", 100).expect("scan");
    assert_eq!(keys(&got), vec![b"m".to_vec(), vec![0xFF; 64]]);
    let all = idx.scan(b"", b"", 100).expect("scan");
    assert_eq!(all.len(), 3, "empty start and end is the whole index");
}

fn binary_keys_sort_bytewise(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    let sorted: Vec<&[u8]> = vec![
        &[0x00],
        &[0x00, 0x00],
        &[0x00, 0x00, 0x00],
        &[0x00, 0x01],
        &[0x00, 0xFF],
        &[0x01],
        &[0x7F, 0xFF],
        &[0x80],
        &[0xFF],
        &[0xFF, 0x00],
        &[0xFF, 0xFF],
        &[0xFF, 0xFF, 0xFF],
    ];
    let mut batch = WriteBatch::default();
    for (i, k) in sorted.iter().enumerate().rev() {
        batch.put(k.to_vec(), vec![u8::try_from(i).expect("small index")]);
    }
    idx.write(batch).expect("write");
    for (i, k) in sorted.iter().enumerate() {
        assert_eq!(
            get(&*idx, k),
            Some(vec![u8::try_from(i).expect("small")]),
            "key {k:?}"
        );
    }
    assert_eq!(
        keys(&idx.scan(b"", b"", 100).expect("scan")),
        byte_keys(&sorted)
    );
    let under_00 = idx.scan(&[0x00], &[0x01], 100).expect("scan");
    assert_eq!(
        keys(&under_00),
        byte_keys(&sorted[..5]),
        "prefix range of 0x00"
    );
    let under_ff = idx.scan(&[0xFF], b"", 100).expect("scan");
    assert_eq!(
        keys(&under_ff),
        byte_keys(&sorted[8..]),
        "prefix range of 0xFF, unbounded"
    );
    let exclusive = idx.scan(&[0x00, 0x00], &[0x00, 0x01], 100).expect("scan");
    assert_eq!(keys(&exclusive), byte_keys(&sorted[1..3]));
}

fn batch_later_op_wins(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    put(&*idx, b"gone", b"old");
    put(&*idx, b"revived", b"old");
    let mut batch = WriteBatch::default();
    batch.put(b"a".to_vec(), b"1".to_vec());
    batch.put(b"a".to_vec(), b"2".to_vec());
    batch.put(b"b".to_vec(), b"1".to_vec());
    batch.delete(b"b".to_vec());
    batch.delete(b"gone".to_vec());
    batch.delete(b"revived".to_vec());
    batch.put(b"revived".to_vec(), b"new".to_vec());
    batch.put(b"c".to_vec(), b"1".to_vec());
    batch.delete(b"c".to_vec());
    batch.put(b"c".to_vec(), b"3".to_vec());
    idx.write(batch).expect("write");
    assert_eq!(get(&*idx, b"a"), Some(b"2".to_vec()));
    assert_eq!(get(&*idx, b"b"), None);
    assert_eq!(get(&*idx, b"gone"), None);
    assert_eq!(get(&*idx, b"revived"), Some(b"new".to_vec()));
    assert_eq!(get(&*idx, b"c"), Some(b"3".to_vec()));
    let all = idx.scan(b"", b"", 100).expect("scan");
    assert_eq!(keys(&all), byte_keys(&[b"a", b"c", b"revived"]));
    idx.write(WriteBatch::default())
        .expect("an empty batch is fine");
}

fn batch_survives_reopen_whole(open: Opener) {
    let dir = tempdir();
    {
        let idx = open(dir.path());
        let mut batch = WriteBatch::default();
        for i in 0..500u32 {
            batch.put(i.to_be_bytes().to_vec(), b"x".to_vec());
        }
        batch.delete(7u32.to_be_bytes().to_vec());
        idx.write(batch).expect("write");
        idx.sync().expect("sync");
    }
    let idx = open(dir.path());
    let all = scan_all(&*idx, b"", b"", 1000);
    assert_eq!(all.len(), 499);
    assert_eq!(get(&*idx, &7u32.to_be_bytes()), None);
}

fn values_of_one_mib(open: Opener) {
    let dir = tempdir();
    let mib = 1024 * 1024;
    let value = |seed: u8| -> Vec<u8> {
        (0..mib)
            .map(|i| u8::try_from(i % 251).expect("< 251") ^ seed)
            .collect()
    };
    {
        let idx = open(dir.path());
        for seed in 0..4u8 {
            put(&*idx, &[b'v', seed], &value(seed));
        }
        assert_eq!(get(&*idx, &[b'v', 2]), Some(value(2)));
        let all = idx.scan(b"", b"", 10).expect("scan");
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|(_, v)| v.len() == mib));
        idx.sync().expect("sync");
    }
    let idx = open(dir.path());
    for seed in 0..4u8 {
        assert_eq!(get(&*idx, &[b'v', seed]), Some(value(seed)), "after reopen");
    }
}

fn random_key(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.random_range(1..=40);
    // A small alphabet including 0x00 and 0xFF makes shared prefixes common.
    const ALPHABET: [u8; 6] = [0x00, 0x01, b'a', b'b', 0xFE, 0xFF];
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())])
        .collect()
}

fn random_value(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.random_range(0..=120);
    (0..len).map(|_| rng.random()).collect()
}

/// A random batch that mostly inserts and sometimes deletes a known key.
fn random_batch(rng: &mut StdRng, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) -> WriteBatch {
    let mut batch = WriteBatch::default();
    for _ in 0..500 {
        if rng.random_ratio(1, 10) && !model.is_empty() {
            let victim = random_key(rng);
            let key = model.range(victim..).next().map(|(k, _)| k.clone());
            if let Some(key) = key {
                model.remove(&key);
                batch.delete(key);
            }
        } else {
            let (key, value) = (random_key(rng), random_value(rng));
            model.insert(key.clone(), value.clone());
            batch.put(key, value);
        }
    }
    batch
}

fn random_keys_scan_like_btreemap(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    let mut rng = StdRng::seed_from_u64(0x01a9_e3a4);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    while model.len() < 20_000 {
        idx.write(random_batch(&mut rng, &mut model))
            .expect("write");
    }
    let want: Vec<Entry> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(
        scan_all(&*idx, b"", b"", 1000),
        want,
        "full scan in chunks of 1000"
    );
    assert_eq!(
        scan_all(&*idx, b"", b"", 7),
        want,
        "full scan in chunks of 7"
    );
    for _ in 0..50 {
        let (mut lo, mut hi) = (random_key(&mut rng), random_key(&mut rng));
        if lo > hi {
            std::mem::swap(&mut lo, &mut hi);
        }
        let limit = rng.random_range(1..300);
        let want: Vec<Entry> = model
            .range(lo.clone()..hi.clone())
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            idx.scan(&lo, &hi, limit).expect("scan"),
            want,
            "range {lo:?}..{hi:?}"
        );
    }
    for (k, v) in model.iter().step_by(97) {
        assert_eq!(get(&*idx, k).as_ref(), Some(v));
    }
}

fn reopen_after_sync_returns_everything(open: Opener) {
    let dir = tempdir();
    let mut model = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(7);
    {
        let idx = open(dir.path());
        for _ in 0..10 {
            idx.write(random_batch(&mut rng, &mut model))
                .expect("write");
            idx.sync().expect("sync");
        }
    }
    {
        let idx = open(dir.path());
        let want: Vec<Entry> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(scan_all(&*idx, b"", b"", 1000), want, "first reopen");
        idx.write(random_batch(&mut rng, &mut model))
            .expect("write after reopen");
        idx.sync().expect("sync");
    }
    let idx = open(dir.path());
    let want: Vec<Entry> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scan_all(&*idx, b"", b"", 1000), want, "second reopen");
}

const GROUP: usize = 50;

fn group_key(i: usize) -> Vec<u8> {
    format!("group/{i:03}").into_bytes()
}

/// Every batch rewrites all `GROUP` keys with generation `n` and moves a
/// token key from `token/{n-1}` to `token/{n}`.
fn generation_batch(n: u64) -> WriteBatch {
    let mut batch = WriteBatch::default();
    for i in 0..GROUP {
        batch.put(group_key(i), n.to_be_bytes().to_vec());
    }
    if n > 0 {
        batch.delete(format!("token/{:06}", n - 1).into_bytes());
    }
    batch.put(format!("token/{n:06}").into_bytes(), Vec::new());
    batch
}

fn generation(value: &[u8]) -> u64 {
    u64::from_be_bytes(value.try_into().expect("8-byte generation"))
}

/// One reader pass: the group is seen whole at a single generation that never
/// goes backwards, and exactly one token exists.
fn check_consistent_view(idx: &dyn MetaIndex, last_seen: &mut u64) {
    let group = idx.scan(b"group/", b"group0", 1000).expect("scan group");
    assert_eq!(group.len(), GROUP, "a scan saw part of a batch");
    let gen0 = generation(&group[0].1);
    assert!(
        group.iter().all(|(_, v)| generation(v) == gen0),
        "mixed generations in one scan"
    );
    assert!(gen0 >= *last_seen, "generation went backwards");
    *last_seen = gen0;
    let tokens = idx.scan(b"token/", b"token0", 10).expect("scan tokens");
    assert_eq!(tokens.len(), 1, "token moved non-atomically: {tokens:?}");
    let point = get(idx, &group_key(GROUP / 2)).expect("group key present");
    assert!(generation(&point) >= gen0);
}

const READERS: usize = 3;

fn concurrent_readers_during_writes(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    idx.write(generation_batch(0)).expect("seed");
    let done = AtomicBool::new(false);
    let ready = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                s.spawn(|| {
                    let mut last_seen = 0;
                    let mut passes = 0u64;
                    while passes == 0 || !done.load(Ordering::Acquire) {
                        check_consistent_view(&*idx, &mut last_seen);
                        if passes == 0 {
                            ready.fetch_add(1, Ordering::AcqRel);
                        }
                        passes += 1;
                    }
                    passes
                })
            })
            .collect();
        // Start writing only once every reader is running, so the readers
        // overlap the writes even on a loaded machine (a reader that already
        // failed stops the wait; its panic is reported by `join`).
        while ready.load(Ordering::Acquire) < READERS && !readers.iter().any(|r| r.is_finished()) {
            std::thread::yield_now();
        }
        for n in 1..=300u64 {
            idx.write(generation_batch(n)).expect("write generation");
            if n % 50 == 0 {
                idx.sync().expect("sync");
            }
        }
        done.store(true, Ordering::Release);
        for r in readers {
            assert!(r.join().expect("reader panicked") > 0);
        }
    });
    let mut last_seen = 300;
    check_consistent_view(&*idx, &mut last_seen);
}

fn disk_bytes_positive_after_data(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    let mut batch = WriteBatch::default();
    for i in 0..2_000u32 {
        batch.put(format!("object/{i:08}").into_bytes(), vec![0xAB; 100]);
    }
    idx.write(batch).expect("write");
    idx.sync().expect("sync");
    assert!(idx.disk_bytes().expect("disk bytes") > 0);
}

fn ingest_adds_sorted_rows_beside_written_ones(open: Opener) {
    let dir = tempdir();
    let mut model = BTreeMap::new();
    {
        let idx = open(dir.path());
        for i in (0..100u32).step_by(2) {
            let (k, v) = (format!("k{i:04}").into_bytes(), b"written".to_vec());
            put(idx.as_ref(), &k, &v);
            model.insert(k, v);
        }
        let rows: Vec<Entry> = (1..100u32)
            .step_by(2)
            .map(|i| {
                (
                    format!("k{i:04}").into_bytes(),
                    format!("ingested {i}").into_bytes(),
                )
            })
            .collect();
        model.extend(rows.iter().cloned());
        idx.ingest(&mut rows.into_iter()).expect("ingest");
        let unsorted = vec![(b"z2".to_vec(), vec![]), (b"z1".to_vec(), vec![])];
        assert!(
            idx.ingest(&mut unsorted.into_iter()).is_err(),
            "unsorted rows are refused"
        );
        idx.sync().expect("sync");
    }
    let idx = open(dir.path());
    let mut got: BTreeMap<Vec<u8>, Vec<u8>> =
        scan_all(idx.as_ref(), b"", b"", 17).into_iter().collect();
    assert_eq!(get(idx.as_ref(), b"z1"), None, "the row out of order");
    got.remove(b"z2".as_slice()); // the row before it may or may not be in
    assert_eq!(got, model);
}

/// `settle` after ingested runs, writes, overwrites and deletes changes no
/// row: deleted rows stay deleted, the newest value wins, through a reopen.
fn settle_keeps_every_row(open: Opener) {
    let dir = tempdir();
    let mut model = BTreeMap::new();
    {
        let idx = open(dir.path());
        for run in 0..3u32 {
            let rows: Vec<Entry> = (0..200u32)
                .map(|i| (format!("r{run}/{i:04}").into_bytes(), vec![1u8; 40]))
                .collect();
            model.extend(rows.iter().cloned());
            idx.ingest(&mut rows.into_iter()).expect("ingest");
        }
        for i in (0..200u32).step_by(3) {
            let k = format!("r1/{i:04}").into_bytes();
            delete(idx.as_ref(), &k);
            model.remove(&k);
        }
        put(idx.as_ref(), b"r2/0007", b"newer");
        model.insert(b"r2/0007".to_vec(), b"newer".to_vec());
        idx.sync().expect("sync");
        idx.settle().expect("settle");
        let got: BTreeMap<Vec<u8>, Vec<u8>> =
            scan_all(idx.as_ref(), b"", b"", 64).into_iter().collect();
        assert_eq!(got, model, "right after settle");
    }
    let idx = open(dir.path());
    let got: BTreeMap<Vec<u8>, Vec<u8>> =
        scan_all(idx.as_ref(), b"", b"", 64).into_iter().collect();
    assert_eq!(got, model, "after a reopen");
}

/// A read view sees the rows of the moment it was taken, whatever is
/// written after (engines without views answer `None`).
fn read_view_is_a_point_in_time(open: Opener) {
    let dir = tempdir();
    let idx = open(dir.path());
    put(idx.as_ref(), b"a", b"1");
    put(idx.as_ref(), b"b", b"1");
    let Some(view) = idx.read_view() else {
        return;
    };
    put(idx.as_ref(), b"a", b"2");
    delete(idx.as_ref(), b"b");
    put(idx.as_ref(), b"c", b"1");
    let then = view.scan(b"", b"", 10).expect("view scan");
    assert_eq!(
        then,
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"1".to_vec())
        ]
    );
    assert_eq!(view.scan(b"b", b"", 10).expect("bounded").len(), 1);
    let now = scan_all(idx.as_ref(), b"", b"", 10);
    assert_eq!(
        now,
        vec![
            (b"a".to_vec(), b"2".to_vec()),
            (b"c".to_vec(), b"1".to_vec())
        ]
    );
}

/// Instantiate every listed test once per engine.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod sled {
            $(#[test] fn $name() { super::$name(super::open_sled); })*
        }
        mod fjall {
            $(#[test] fn $name() { super::$name(super::open_fjall); })*
        }
    };
}

suite!(
    get_missing_and_present,
    put_overwrites,
    delete_removes,
    scan_respects_bounds_and_limit,
    empty_end_is_unbounded,
    binary_keys_sort_bytewise,
    batch_later_op_wins,
    batch_survives_reopen_whole,
    values_of_one_mib,
    random_keys_scan_like_btreemap,
    reopen_after_sync_returns_everything,
    concurrent_readers_during_writes,
    disk_bytes_positive_after_data,
    ingest_adds_sorted_rows_beside_written_ones,
    settle_keeps_every_row,
    read_view_is_a_point_in_time,
);
