//! The bulk loader ([`laneway_store::ingest`]) leaves a bucket that reads,
//! lists, lists by tag and counts exactly as the same objects PUT one by
//! one would, on both engines and after a reopen; the commit path then
//! works on it as on any bucket; and the loader refuses what would break
//! those promises (a bucket with objects, keys out of order, big bodies).

mod common;

use common::{get, list_all, list_all_tagged, open, put, tenant};
use laneway_store::ingest::IngestObject;
use laneway_store::{BucketInfo, Engine, Resume, Store, StoreError, Tag, TagCond};
use std::collections::BTreeSet;
use std::sync::Arc;

const OBJECTS: u32 = 1_000;

fn key(i: u32) -> String {
    format!("d{}/k{i:05}", i / 250)
}

fn object(i: u32) -> IngestObject {
    let mut tags = vec![Tag {
        key: "part".into(),
        value: (i % 4).to_string(),
    }];
    if i.is_multiple_of(10) {
        tags.push(Tag {
            key: "sel".into(),
            value: "yes".into(),
        });
    }
    IngestObject {
        key: key(i),
        body: format!("body of {i}").into_bytes(),
        tags,
    }
}

fn sel() -> Vec<TagCond> {
    vec![TagCond {
        key: "sel".into(),
        value: Some("yes".into()),
    }]
}

fn load(store: &Store, b: &BucketInfo) {
    // Runs of 40 objects a partition: several runs each, and a last
    // partial one written by finish.
    let mut bulk = store.bulk_load(b, 40).expect("bulk load");
    for i in 0..OBJECTS {
        bulk.push(object(i)).expect("push");
    }
    assert_eq!(bulk.finish().expect("finish"), u64::from(OBJECTS));
}

async fn check(
    store: &Arc<Store>,
    b: &BucketInfo,
    all: &BTreeSet<String>,
    tagged: &BTreeSet<String>,
) {
    list_all(store, b, all, "", None, Resume::Start, 100).await;
    list_all(store, b, all, "", Some("/"), Resume::Start, 2).await;
    list_all(
        store,
        b,
        all,
        "d1/",
        None,
        Resume::After("d1/k00300".into()),
        37,
    )
    .await;
    list_all_tagged(store, b, tagged, "", None, Resume::Start, 7, &sel()).await;
    let usage = store.bucket_usage(b.id).expect("usage");
    assert_eq!(usage.objects, all.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_loaded_bucket_reads_lists_and_counts_as_puts_would() {
    for engine in [Engine::Fjall, Engine::Sled] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path(), engine, 4, 4096);
        store
            .create_bucket(&tenant(), "b", "us-east-1")
            .expect("bucket");
        let b = store.bucket(&tenant(), "b").expect("bucket");
        load(&store, &b);

        let all: BTreeSet<String> = (0..OBJECTS).map(key).collect();
        let mut tagged: BTreeSet<String> = (0..OBJECTS)
            .filter(|i| i.is_multiple_of(10))
            .map(key)
            .collect();
        check(&store, &b, &all, &tagged).await;
        let bytes: usize = (0..OBJECTS).map(|i| object(i).body.len()).sum();
        assert_eq!(store.bucket_usage(b.id).expect("usage").bytes, bytes as i64);
        for i in [0, 1, 499, OBJECTS - 1] {
            assert_eq!(
                get(&store, &b, &key(i)).await,
                Some(object(i).body),
                "{engine:?}"
            );
            let info = store.head_object(&b, &key(i)).expect("head");
            assert_eq!(info.etag, hex::encode(md5_of(&object(i).body)));
        }

        // The commit path works on loaded objects: an overwrite without
        // tags leaves the tag listing, a delete leaves both listings.
        put(&store, &b, &key(0), b"new").await;
        store.delete_object(&b, &key(10)).await.expect("delete");
        tagged.remove(&key(0));
        tagged.remove(&key(10));
        let mut all = all;
        all.remove(&key(10));
        check(&store, &b, &all, &tagged).await;

        store.shutdown();
        drop(store);
        let store = open(dir.path(), engine, 4, 4096);
        let b = store.bucket(&tenant(), "b").expect("bucket");
        check(&store, &b, &all, &tagged).await;
        store.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loader_refuses_what_would_break_the_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path(), Engine::Fjall, 4, 64);
    store
        .create_bucket(&tenant(), "b", "us-east-1")
        .expect("bucket");
    let b = store.bucket(&tenant(), "b").expect("bucket");

    let mut bulk = store.bulk_load(&b, 10).expect("bulk load");
    bulk.push(object(5)).expect("push");
    let refused = bulk.push(object(4)).expect_err("a key out of order");
    assert!(
        matches!(refused, StoreError::InvalidArgument(_)),
        "{refused}"
    );
    let refused = bulk.push(object(5)).expect_err("the same key again");
    assert!(
        matches!(refused, StoreError::InvalidArgument(_)),
        "{refused}"
    );
    let big = IngestObject {
        key: key(6),
        body: vec![b'x'; 65],
        tags: Vec::new(),
    };
    let refused = bulk.push(big).expect_err("a body over the inline size");
    assert!(
        matches!(refused, StoreError::InvalidArgument(_)),
        "{refused}"
    );
    assert_eq!(bulk.finish().expect("finish"), 1);

    // Now the bucket holds an object: a second load could replace it
    // without its tag rows and counters following.
    let refused = store
        .bulk_load(&b, 10)
        .err()
        .expect("a bucket with objects");
    assert!(
        matches!(refused, StoreError::InvalidArgument(_)),
        "{refused}"
    );
    store.shutdown();
}

fn md5_of(data: &[u8]) -> [u8; 16] {
    use md5::Digest;
    md5::Md5::digest(data).into()
}
