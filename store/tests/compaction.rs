//! Compaction gives back the space of overwritten and deleted objects, and
//! every live object still reads back byte-exact, before and after a reopen.

#![allow(clippy::cast_possible_truncation)] // test data patterns

mod common;

use common::{get, open, put, tenant};
use laneway_store::{Engine, WriteCond};

fn data(i: usize, generation: u8) -> Vec<u8> {
    (0..100_000 + i)
        .map(|j| (j as u8).wrapping_mul(generation).wrapping_add(i as u8))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_reclaims_space_and_keeps_live_objects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path(), Engine::Fjall, 4, 1024);
    let b = store
        .create_bucket(&tenant(), "c", "us-east-1")
        .expect("bucket");
    for i in 0..40 {
        put(&store, &b, &format!("k{i}"), &data(i, 1)).await;
    }
    // Overwrite half, delete a quarter: most of the first generation is garbage.
    for i in 0..20 {
        put(&store, &b, &format!("k{i}"), &data(i, 2)).await;
    }
    for i in 20..30 {
        store
            .delete_object(&b, &format!("k{i}"))
            .await
            .expect("delete");
    }
    let (_, before) = store.disk_usage().expect("usage");
    let report = store.compact(0.3, true).await.expect("compact");
    let (_, after) = store.disk_usage().expect("usage");
    assert!(report.segments > 0, "{report:?}");
    assert!(after < before, "volume bytes {before} -> {after}");
    let live: u64 = (0..20).map(|i| data(i, 2).len() as u64).sum::<u64>()
        + (30..40).map(|i| data(i, 1).len() as u64).sum::<u64>();
    assert!(
        after < live + live / 5,
        "after compaction {after} bytes for {live} live bytes"
    );
    let check = |store: std::sync::Arc<laneway_store::Store>| async move {
        let b = store.bucket(&tenant(), "c").expect("bucket");
        for i in 0..40 {
            let want = match i {
                0..20 => Some(data(i, 2)),
                20..30 => None,
                _ => Some(data(i, 1)),
            };
            assert_eq!(get(&store, &b, &format!("k{i}")).await, want, "k{i}");
        }
        store
    };
    let store = check(store).await;
    store.shutdown();
    drop(store);
    let store = open(dir.path(), Engine::Fjall, 4, 1024);
    let store = check(store).await;
    store.shutdown();
}

/// The pieces of a PUT, driven one step at a time so a compaction pass can
/// be run at each gap: append the record to a lent segment, give the
/// segment back, then commit the object record that points at it.
mod race {
    use super::*;
    use laneway_store::commit::{Op, Outcome};
    use laneway_store::partition::Partition;
    use laneway_store::record::{DataLoc, StoredObject, object_key};
    use laneway_store::volume::RecordWriter;
    use laneway_store::{BucketInfo, Store};

    /// Append `data` for `key` to a segment of `p` and give the segment
    /// back, as `Partition::put` does before it submits the commit.
    pub fn append(p: &Partition, b: &BucketInfo, key: &str, data: &[u8]) -> (u64, DataLoc) {
        let mut w = p.volumes().take_writer().expect("writer");
        let segment = w.id();
        let mut rw = RecordWriter::begin(&mut w, b.id, key.as_bytes()).expect("begin");
        rw.push(data).expect("push");
        let loc = rw.finish().expect("finish");
        p.volumes().release(w);
        (segment, loc)
    }

    /// Commit `key` pointing at `loc` (the record of a template object,
    /// so the test does not depend on every field of the record type).
    pub async fn commit(
        store: &Store,
        p: &Partition,
        b: &BucketInfo,
        key: &str,
        (segment, loc): (u64, DataLoc),
        size: usize,
        cond: WriteCond,
    ) -> laneway_store::StoreResult<Outcome> {
        put(store, b, "template", b"t").await;
        let raw = p
            .index()
            .get(&object_key(b.id, b"template"))
            .expect("get")
            .expect("template record");
        let mut record = StoredObject::decode(&raw).expect("decode");
        record.size = size as u64;
        record.data = loc;
        let op = Op::Put {
            bucket: b.id,
            key: key.to_string(),
            record,
            cond,
        };
        p.submit(op, vec![segment]).await
    }
}

/// Settles the suspected race: a writer's segment is sealed after its
/// record is appended but before its commit lands (the record that crossed
/// the size limit, or an idle segment sealed by compaction); a compaction
/// pass in that gap must not delete the segment, or the commit
/// acknowledges an object whose data file is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_a_sealed_segment_whose_commit_is_pending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path(), Engine::Fjall, 1, 1024);
    let b = store
        .create_bucket(&tenant(), "race", "us-east-1")
        .expect("bucket");
    let p = std::sync::Arc::clone(&store.partitions()[0]);
    let body = data(3, 7);
    // 1. append; 2. seal (idle segments are sealed by a compaction pass).
    let appended = race::append(&p, &b, "k", &body);
    p.volumes().seal_idle();
    // 3. compaction runs while the commit is still on its way.
    let report = store.compact(0.0, true).await.expect("compact");
    assert_eq!(
        report.segments, 0,
        "deleted a segment with a pending record: {report:?}"
    );
    // 4. the commit lands and is acknowledged...
    race::commit(&store, &p, &b, "k", appended, body.len(), WriteCond::None)
        .await
        .expect("commit of a record appended before compaction");
    // 5. ...and the acknowledged object reads back, now and after a later
    // pass that may move it.
    assert_eq!(get(&store, &b, "k").await.as_deref(), Some(&body[..]));
    store.compact(0.0, true).await.expect("compact");
    assert_eq!(get(&store, &b, "k").await.as_deref(), Some(&body[..]));
    // 6. a commit that fails releases its record too: the garbage it
    // leaves is reclaimed, not kept forever.
    let other = data(5, 9);
    let appended = race::append(&p, &b, "k", &other);
    let refused = race::commit(
        &store,
        &p,
        &b,
        "k",
        appended,
        other.len(),
        WriteCond::IfAbsent,
    );
    assert!(matches!(
        refused.await,
        Err(laneway_store::StoreError::PreconditionFailed)
    ));
    let report = store.compact(0.5, true).await.expect("compact");
    assert!(report.segments >= 1, "{report:?}");
    assert_eq!(get(&store, &b, "k").await.as_deref(), Some(&body[..]));
    store.shutdown();
}

/// Writers, overwriters, deleters and readers run while compaction passes
/// seal idle segments and rewrite them back to back: every acknowledged
/// write must succeed and read back, whatever the interleaving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compaction_under_concurrent_writers_and_readers_loses_nothing() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path(), Engine::Fjall, 2, 1024);
    let b = store
        .create_bucket(&tenant(), "busy", "us-east-1")
        .expect("bucket");
    let stop = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut passes = 0u32;
            while !stop.load(Ordering::Relaxed) {
                store.compact(0.0, true).await.expect("compaction pass");
                passes += 1;
                tokio::task::yield_now().await;
            }
            passes
        })
    };
    let mut writers = Vec::new();
    for w in 0..4usize {
        let (store, b) = (Arc::clone(&store), b.clone());
        writers.push(tokio::spawn(async move {
            let mut last = std::collections::BTreeMap::new();
            for round in 0..60usize {
                let key = format!("w{w}-k{}", round % 10);
                if round % 7 == 6 {
                    store.delete_object(&b, &key).await.expect("delete");
                    last.insert(key, None);
                    continue;
                }
                let body = data(w * 100 + round, (round % 250) as u8 + 1);
                put(&store, &b, &key, &body).await;
                // A read right after the write sees it, even mid-compaction.
                assert_eq!(
                    get(&store, &b, &key).await.as_deref(),
                    Some(&body[..]),
                    "{key}"
                );
                last.insert(key, Some(body));
            }
            last
        }));
    }
    let mut want = std::collections::BTreeMap::new();
    for w in writers {
        want.extend(w.await.expect("writer"));
    }
    stop.store(true, Ordering::Relaxed);
    let passes = compactor.await.expect("compactor");
    assert!(passes > 1, "compaction ran {passes} times");
    store.compact(0.0, true).await.expect("final pass");
    for (key, body) in &want {
        assert_eq!(get(&store, &b, key).await.as_ref(), body.as_ref(), "{key}");
    }
    store.shutdown();
}
