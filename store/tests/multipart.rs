//! Multipart uploads in the store: validation of the part list, reads across
//! part boundaries, ETags, abort, listing, and compaction of part data.

#![allow(clippy::cast_possible_truncation)] // test data patterns

mod common;

use common::{body, get, tenant};
use laneway_store::{
    Engine, PutOptions, Store, StoreConfig, StoreError, UploadEntry, UploadQuery, WriteCond,
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

fn part_data(n: u32, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u32).wrapping_mul(n + 7).to_le_bytes()[0])
        .collect()
}

fn opts(len: usize) -> PutOptions {
    PutOptions {
        content_length: Some(len as u64),
        ..PutOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_validates_and_reads_across_parts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let b = store
        .create_bucket(&tenant(), "mp", "us-east-1")
        .expect("bucket");
    let id = store
        .create_multipart_upload(&b, "big", Default::default(), Vec::new())
        .await
        .expect("create");
    let sizes = [70_000usize, 2_000, 100_001];
    let mut etags = Vec::new();
    // Upload out of order, and part 2 twice (the second one wins).
    for n in [3u32, 1, 2, 2] {
        let d = part_data(n, sizes[n as usize - 1]);
        let p = store
            .upload_part(&b, "big", &id, n, opts(d.len()), body(&d))
            .await
            .expect("part");
        assert_eq!(p.size, d.len() as u64);
        etags.push((n, p.etag));
    }
    let list: Vec<(u32, String)> = vec![etags[1].clone(), etags[3].clone(), etags[0].clone()];
    let (parts, truncated) = store.list_parts(&b, "big", &id, 0, 2).expect("list parts");
    assert_eq!(
        (
            parts.iter().map(|p| p.number).collect::<Vec<_>>(),
            truncated
        ),
        (vec![1, 2], true)
    );

    let bad_order = vec![list[1].clone(), list[0].clone(), list[2].clone()];
    let r = store
        .complete_multipart_upload(&b, "big", &id, &bad_order, WriteCond::None)
        .await;
    assert!(matches!(r, Err(StoreError::InvalidPartOrder)), "{r:?}");
    let mut bad_etag = list.clone();
    bad_etag[1].1 = "00000000000000000000000000000000".into();
    let r = store
        .complete_multipart_upload(&b, "big", &id, &bad_etag, WriteCond::None)
        .await;
    assert!(matches!(r, Err(StoreError::InvalidPart)), "{r:?}");

    let info = store
        .complete_multipart_upload(&b, "big", &id, &list, WriteCond::None)
        .await
        .expect("complete");
    assert!(info.etag.ends_with("-3"), "{}", info.etag);
    let whole: Vec<u8> = [1u32, 2, 3]
        .iter()
        .flat_map(|&n| part_data(n, sizes[n as usize - 1]))
        .collect();
    assert_eq!(info.size, whole.len() as u64);
    assert_eq!(get(&store, &b, "big").await.expect("get"), whole);
    // A range that spans all three parts, and each part by number.
    let (_, mut s) = store
        .get_object(
            &b,
            "big",
            Some(laneway_store::GetRange {
                start: 69_990,
                end: 72_010,
            }),
        )
        .expect("range");
    let mut got = Vec::new();
    while let Some(c) = futures::StreamExt::next(&mut s).await {
        got.extend_from_slice(&c.expect("chunk"));
    }
    assert_eq!(got, whole[69_990..72_010]);
    let (r2, count) = store.object_part_range(&b, "big", 2).expect("part 2");
    assert_eq!((r2.start, r2.end, count), (70_000, 72_000, 3));
    // The upload is gone once completed.
    assert!(matches!(
        store.list_parts(&b, "big", &id, 0, 10),
        Err(StoreError::NoSuchUpload)
    ));
    let usage = store.bucket_usage(b.id).expect("usage");
    assert_eq!((usage.objects, usage.bytes), (1, whole.len() as i64));

    // Parts survive compaction (moved, then read from the new place) and a reopen.
    let report = store.compact(0.0, true).await.expect("compact");
    assert!(report.records_moved >= 3, "{report:?}");
    assert_eq!(get(&store, &b, "big").await.expect("get"), whole);
    store.shutdown();
    drop(store);
    let store = open(dir.path());
    let b = store.bucket(&tenant(), "mp").expect("bucket");
    assert_eq!(
        get(&store, &b, "big").await.expect("get after reopen"),
        whole
    );
    store.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_parts_abort_and_listing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let b = store
        .create_bucket(&tenant(), "mp", "us-east-1")
        .expect("bucket");
    let id = store
        .create_multipart_upload(&b, "a/x", Default::default(), Vec::new())
        .await
        .expect("create");
    let small = part_data(1, 10);
    let p1 = store
        .upload_part(&b, "a/x", &id, 1, opts(10), body(&small))
        .await
        .expect("p1");
    let p2 = store
        .upload_part(&b, "a/x", &id, 2, opts(10), body(&small))
        .await
        .expect("p2");
    let r = store
        .complete_multipart_upload(
            &b,
            "a/x",
            &id,
            &[(1, p1.etag), (2, p2.etag)],
            WriteCond::None,
        )
        .await;
    assert!(matches!(r, Err(StoreError::EntityTooSmall)), "{r:?}");
    let r = store
        .upload_part(&b, "a/x", &id, 0, opts(10), body(&small))
        .await;
    assert!(matches!(r, Err(StoreError::InvalidArgument(_))), "{r:?}");
    let r = store
        .upload_part(&b, "a/x", "deadbeef", 1, opts(10), body(&small))
        .await;
    assert!(matches!(r, Err(StoreError::NoSuchUpload)), "{r:?}");

    let id2 = store
        .create_multipart_upload(&b, "a/y", Default::default(), Vec::new())
        .await
        .expect("create");
    let id3 = store
        .create_multipart_upload(&b, "top", Default::default(), Vec::new())
        .await
        .expect("create");
    let q = UploadQuery {
        max_uploads: 1000,
        ..UploadQuery::default()
    };
    let page = store.list_multipart_uploads(&b, &q).expect("list");
    let keys: Vec<_> = page
        .entries
        .iter()
        .map(|e| match e {
            UploadEntry::Upload(u) => u.key.clone(),
            UploadEntry::Prefix(p) => format!("P:{p}"),
        })
        .collect();
    assert_eq!(keys, vec!["a/x", "a/y", "top"]);
    let q = UploadQuery {
        delimiter: Some("/".into()),
        max_uploads: 1000,
        ..UploadQuery::default()
    };
    let page = store.list_multipart_uploads(&b, &q).expect("list");
    assert_eq!(page.entries.len(), 2, "{:?}", page.entries);
    let q = UploadQuery {
        max_uploads: 1,
        key_marker: Some("a/x".into()),
        ..UploadQuery::default()
    };
    let page = store.list_multipart_uploads(&b, &q).expect("list");
    assert!(page.truncated);
    assert!(matches!(&page.entries[0], UploadEntry::Upload(u) if u.key == "a/y"));

    for (k, i) in [("a/x", &id), ("a/y", &id2), ("top", &id3)] {
        store.abort_multipart_upload(&b, k, i).await.expect("abort");
    }
    assert!(matches!(
        store.abort_multipart_upload(&b, "a/x", &id).await,
        Err(StoreError::NoSuchUpload)
    ));
    // Aborted parts are garbage: compaction deletes their segments.
    let report = store.compact(0.5, true).await.expect("compact");
    assert!(
        report.segments >= 1 && report.records_moved == 0,
        "{report:?}"
    );
    assert_eq!(store.bucket_usage(b.id).expect("usage").objects, 0);
    store
        .delete_bucket(&tenant(), "mp")
        .await
        .expect("empty bucket deletes");
    // Stale-upload cleanup.
    let b = store
        .create_bucket(&tenant(), "mp2", "us-east-1")
        .expect("bucket");
    store
        .create_multipart_upload(&b, "k", Default::default(), Vec::new())
        .await
        .expect("create");
    assert_eq!(store.abort_stale_uploads(i64::MAX).await.expect("stale"), 1);
    store.shutdown();
}
