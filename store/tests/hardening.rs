//! Issue 11 hardening of the store: multipart parts counted in the bucket's
//! pending counters (re-upload, completion, abort, expiry), repeated
//! completions answered from the record of the first, DeleteBucket against
//! a write in flight, and ListMultipartUploads paging with many uploads.

#![allow(clippy::cast_possible_truncation)] // test data patterns

mod common;

use bytes::Bytes;
use common::{body, put, tenant};
use laneway_store::multipart::{ListedPart, Pending};
use laneway_store::uploads::part_md5;
use laneway_store::{
    BodyStream, Engine, PutOptions, Store, StoreConfig, StoreError, UploadEntry, UploadQuery,
    WriteCond,
};
use std::sync::Arc;

const MIN: u64 = 1024;

fn open(dir: &std::path::Path) -> Arc<Store> {
    let cfg = StoreConfig {
        partitions: Some(4),
        engine: Some(Engine::Fjall),
        min_part_size: MIN,
        ..StoreConfig::default()
    };
    Store::open(dir, cfg).expect("open")
}

fn opts(len: usize) -> PutOptions {
    PutOptions {
        content_length: Some(len as u64),
        ..PutOptions::default()
    }
}

fn pending(uploads: i64, part_bytes: i64) -> Pending {
    Pending {
        uploads,
        part_bytes,
    }
}

fn listed(parts: &[(u32, String)]) -> Vec<ListedPart> {
    parts
        .iter()
        .map(|(n, e)| ListedPart {
            number: *n,
            md5: part_md5(e).expect("etag"),
            checksum: None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_count_until_completed_aborted_or_expired() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let b = store.create_bucket(&tenant(), "q", "r").expect("bucket");
    let id = store
        .create_multipart_upload(&b, "k", Default::default(), Vec::new())
        .await
        .expect("create");
    assert_eq!(store.bucket_pending(b.id).expect("pending"), pending(1, 0));
    let up = |n: u32, len: usize| {
        let store = Arc::clone(&store);
        let (b, id) = (b.clone(), id.clone());
        async move {
            let d = vec![n as u8; len];
            store
                .upload_part(&b, "k", &id, n, opts(len), body(&d))
                .await
                .expect("part")
        }
    };
    up(1, 2000).await;
    assert_eq!(store.bucket_pending(b.id).expect("p"), pending(1, 2000));
    // Part 1 again: it replaces the old bytes, it does not add to them.
    let p1 = up(1, 3000).await;
    assert_eq!(store.bucket_pending(b.id).expect("p"), pending(1, 3000));
    let p2 = up(2, 1500).await;
    up(3, 700).await;
    assert_eq!(store.bucket_pending(b.id).expect("p"), pending(1, 5200));
    assert_eq!(store.part_size(&b, "k", &id, 2).expect("size"), Some(1500));
    assert_eq!(store.part_size(&b, "k", &id, 4).expect("size"), None);
    // Completion with parts 1 and 2: their bytes become the object's, part
    // 3 is freed.
    let done = store
        .complete_multipart_upload(&b, "k", &id, &[(1, p1.etag), (2, p2.etag)], WriteCond::None)
        .await
        .expect("complete");
    assert_eq!(done.size, 4500);
    assert_eq!(store.bucket_pending(b.id).expect("p"), pending(0, 0));
    let usage = store.bucket_usage(b.id).expect("usage");
    assert_eq!((usage.objects, usage.bytes), (1, 4500));

    // Abort gives the parts back.
    let id2 = store
        .create_multipart_upload(&b, "k2", Default::default(), Vec::new())
        .await
        .expect("create");
    let d = vec![9u8; 5000];
    store
        .upload_part(&b, "k2", &id2, 1, opts(5000), body(&d))
        .await
        .expect("part");
    assert_eq!(store.bucket_pending(b.id).expect("p"), pending(1, 5000));
    store
        .abort_multipart_upload(&b, "k2", &id2)
        .await
        .expect("abort");
    assert_eq!(store.bucket_pending(b.id).expect("p"), pending(0, 0));

    // So does expiry, and the counters survive a restart.
    let id3 = store
        .create_multipart_upload(&b, "k3", Default::default(), Vec::new())
        .await
        .expect("create");
    store
        .upload_part(&b, "k3", &id3, 1, opts(5000), body(&d))
        .await
        .expect("part");
    store.shutdown();
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.bucket_pending(b.id).expect("p"), pending(1, 5000));
    assert_eq!(store.abort_stale_uploads(i64::MAX).await.expect("sweep"), 1);
    assert_eq!(store.bucket_pending(b.id).expect("p"), pending(0, 0));
    let usage = store.bucket_usage(b.id).expect("usage");
    assert_eq!((usage.objects, usage.bytes), (1, 4500));
    store.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_completion_gets_the_first_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let b = store.create_bucket(&tenant(), "c", "r").expect("bucket");
    let id = store
        .create_multipart_upload(&b, "obj", Default::default(), Vec::new())
        .await
        .expect("create");
    let mut parts = Vec::new();
    for (n, len) in [(1u32, 2000usize), (2, 100)] {
        let d = vec![n as u8; len];
        let p = store
            .upload_part(&b, "obj", &id, n, opts(len), body(&d))
            .await
            .expect("part");
        parts.push((n, p.etag));
    }
    let first = store
        .complete_multipart_upload(&b, "obj", &id, &parts, WriteCond::None)
        .await
        .expect("complete");
    let usage_after = store.bucket_usage(b.id).expect("usage");

    // The retry, through the commit thread and through the read-only path.
    let again = store
        .complete_multipart_upload(&b, "obj", &id, &parts, WriteCond::IfAbsent)
        .await
        .expect("retry");
    assert_eq!(
        (again.etag.as_str(), again.size),
        (first.etag.as_str(), 2100)
    );
    let read = store
        .repeated_completion(&b, "obj", &id, &listed(&parts))
        .expect("retry read");
    assert_eq!(read.etag, first.etag);
    let u = store.bucket_usage(b.id).expect("usage");
    assert_eq!(
        (u.objects, u.bytes),
        (usage_after.objects, usage_after.bytes)
    );

    // Another part list, key or bucket is not this completion.
    let r = store
        .complete_multipart_upload(&b, "obj", &id, &parts[..1], WriteCond::None)
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchUpload)), "{r:?}");
    let r = store.repeated_completion(&b, "other", &id, &listed(&parts));
    assert!(matches!(r, Err(StoreError::NoSuchUpload)), "{r:?}");

    // A delete of the key since: the retry still succeeds and resurrects
    // nothing. The record survives a restart.
    store.delete_object(&b, "obj").await.expect("delete");
    store.shutdown();
    drop(store);
    let store = open(dir.path());
    let again = store
        .complete_multipart_upload(&b, "obj", &id, &parts, WriteCond::None)
        .await
        .expect("retry after restart");
    assert_eq!(again.etag, first.etag);
    assert!(matches!(
        store.head_object(&b, "obj"),
        Err(StoreError::NoSuchKey)
    ));
    let u = store.bucket_usage(b.id).expect("usage");
    assert_eq!((u.objects, u.bytes), (0, 0));

    // Records are forgotten after their time.
    assert_eq!(store.forget_completed(0).await.expect("keep"), 0);
    assert_eq!(store.forget_completed(i64::MAX).await.expect("forget"), 1);
    let r = store.repeated_completion(&b, "obj", &id, &listed(&parts));
    assert!(matches!(r, Err(StoreError::NoSuchUpload)), "{r:?}");
    store.shutdown();
}

/// A body the test releases when it wants: the write has resolved its
/// bucket and is streaming until then.
fn held_body(data: Vec<u8>) -> (BodyStream, tokio::sync::oneshot::Sender<()>) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let stream = futures::stream::once(async move {
        let _ = rx.await;
        Ok::<_, std::io::Error>(Bytes::from(data))
    });
    (Box::pin(stream), tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_bucket_and_a_write_in_flight_never_both_win() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    for size in [100usize, 50_000] {
        // The PUT resolved the bucket and streams; DeleteBucket finds it
        // empty and removes it; the PUT then must not commit.
        let b = store.create_bucket(&tenant(), "race", "r").expect("bucket");
        let (stream, release) = held_body(vec![7u8; size]);
        let put = {
            let (store, b) = (Arc::clone(&store), b.clone());
            tokio::spawn(async move {
                store
                    .put_object(&b, "k", Default::default(), opts(size), stream)
                    .await
            })
        };
        store
            .delete_bucket(&tenant(), "race")
            .await
            .expect("empty bucket deletes");
        release.send(()).expect("release");
        let r = put.await.expect("join");
        assert!(matches!(r, Err(StoreError::NoSuchBucket)), "{r:?}");
        let u = store.bucket_usage(b.id).expect("usage");
        assert_eq!((u.objects, u.bytes), (0, 0), "nothing under the dead id");
    }

    // A part and a completion of an upload of a deleted bucket fail too.
    let b = store
        .create_bucket(&tenant(), "race2", "r")
        .expect("bucket");
    let id = store
        .create_multipart_upload(&b, "k", Default::default(), Vec::new())
        .await
        .expect("create");
    store
        .delete_bucket(&tenant(), "race2")
        .await
        .expect("delete");
    let r = store
        .upload_part(&b, "k", &id, 1, opts(10), body(&[1; 10]))
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchBucket)), "{r:?}");
    let r = store
        .create_multipart_upload(&b, "k2", Default::default(), Vec::new())
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchBucket)), "{r:?}");

    // The other order: the PUT commits first, and the delete sees it.
    let b = store
        .create_bucket(&tenant(), "race3", "r")
        .expect("bucket");
    put(&store, &b, "k", b"data").await;
    let r = store.delete_bucket(&tenant(), "race3").await;
    assert!(matches!(r, Err(StoreError::BucketNotEmpty)), "{r:?}");
    put(&store, &b, "k2", b"more").await;
    store.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_s_seal_outlives_its_restart_and_a_revive_does_too() {
    // A cluster DeleteBucket seals every store node; a gateway that still
    // caches the bucket may send a write after the node restarted.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let sealed = store.create_bucket(&tenant(), "gone", "r").expect("bucket");
    let revived = store.create_bucket(&tenant(), "kept", "r").expect("bucket");
    put(&store, &revived, "k", b"before").await;
    store.seal_bucket_in(sealed.id, &[]).await.expect("seal");
    store.seal_bucket_in(revived.id, &[]).await.expect("seal");
    store.revive_bucket(revived.id).await;
    store.shutdown();
    drop(store);

    let store = open(dir.path());
    let r = store
        .put_object(&sealed, "k", Default::default(), opts(4), body(b"late"))
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchBucket)), "{r:?}");
    let r = store
        .create_multipart_upload(&sealed, "k", Default::default(), Vec::new())
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchBucket)), "{r:?}");
    let u = store.bucket_usage(sealed.id).expect("usage");
    assert_eq!((u.objects, u.bytes), (0, 0), "nothing under the sealed id");
    put(&store, &revived, "k2", b"after").await;
    assert_eq!(store.bucket_usage(revived.id).expect("usage").objects, 2);
    // A checked seal that finds objects seals nothing, then or later.
    let r = store.seal_bucket(revived.id).await;
    assert!(matches!(r, Err(StoreError::BucketNotEmpty)), "{r:?}");
    store.shutdown();
    drop(store);
    let store = open(dir.path());
    put(&store, &revived, "k3", b"again").await;
    let r = store
        .put_object(&sealed, "k", Default::default(), opts(4), body(b"late"))
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchBucket)), "{r:?}");
    store.shutdown();
}

fn names(entries: &[UploadEntry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| match e {
            UploadEntry::Upload(u) => format!("{}#{}", u.key, u.upload_id),
            UploadEntry::Prefix(p) => format!("P:{p}"),
        })
        .collect()
}

/// Every page of a listing, resumed with the markers the gateway sends.
fn all_pages(store: &Store, b: &laneway_store::BucketInfo, q: &UploadQuery) -> Vec<String> {
    let mut q = q.clone();
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = store.list_multipart_uploads(b, &q).expect("list");
        assert!(page.entries.len() <= q.max_uploads);
        out.extend(names(&page.entries));
        if !page.truncated {
            return out;
        }
        match page.entries.last() {
            Some(UploadEntry::Upload(u)) => {
                q.key_marker = Some(u.key.clone());
                q.upload_id_marker = Some(u.upload_id.clone());
            }
            Some(UploadEntry::Prefix(p)) => {
                // What the gateway sends as NextKeyMarker.
                q.key_marker = Some(p.clone());
                q.upload_id_marker = None;
            }
            None => panic!("truncated empty page"),
        }
    }
    panic!("listing did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_listing_pages_through_many_uploads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let b = store.create_bucket(&tenant(), "l", "r").expect("bucket");
    let mut want = Vec::new();
    for i in 0..40 {
        let key = match i % 4 {
            0 => format!("dir{}/f{i}", i % 3),
            _ => format!("k{i:02}"),
        };
        // Two uploads of some keys.
        for _ in 0..(1 + usize::from(i % 5 == 0)) {
            let id = store
                .create_multipart_upload(&b, &key, Default::default(), Vec::new())
                .await
                .expect("create");
            want.push((key.clone(), id));
        }
    }
    want.sort();
    let flat: Vec<String> = want.iter().map(|(k, id)| format!("{k}#{id}")).collect();
    for max in [1usize, 3, 7, 1000] {
        let q = UploadQuery {
            max_uploads: max,
            ..UploadQuery::default()
        };
        assert_eq!(all_pages(&store, &b, &q), flat, "max {max}");
    }
    // With a delimiter: the three directories, then the other keys.
    let mut rolled: Vec<String> = vec!["P:dir0/".into(), "P:dir1/".into(), "P:dir2/".into()];
    rolled.extend(flat.iter().filter(|n| n.starts_with('k')).cloned());
    for max in [1usize, 2, 5, 1000] {
        let q = UploadQuery {
            delimiter: Some("/".into()),
            max_uploads: max,
            ..UploadQuery::default()
        };
        assert_eq!(all_pages(&store, &b, &q), rolled, "max {max}");
    }
    // A prefix and a key marker in the middle of a key's uploads.
    let (k, id) = want.iter().find(|(k, _)| k == "k05").cloned().expect("k05");
    let q = UploadQuery {
        prefix: "k0".into(),
        key_marker: Some(k.clone()),
        upload_id_marker: Some(id.clone()),
        max_uploads: 1000,
        ..UploadQuery::default()
    };
    let expect: Vec<String> = flat
        .iter()
        .filter(|n| n.starts_with("k0") && n.as_str() > format!("{k}#{id}").as_str())
        .cloned()
        .collect();
    assert_eq!(all_pages(&store, &b, &q), expect);
    store.shutdown();
}
