//! Small bodies live in rows beside their records (`DataLoc::Beside`):
//! a reader racing overwrites and deletes of one small object always gets
//! a body and metadata of the same version (never the body of one write
//! with the ETag of another), and the rows follow deletes, so nothing is
//! left behind in the index once the objects are gone.

mod common;

use common::{body, open, tenant};
use futures::StreamExt;
use laneway_store::{Engine, PutOptions, StoreError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn version(n: u32) -> Vec<u8> {
    format!("version {n:06} ")
        .repeat(1 + n as usize % 7)
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_racing_overwrites_see_whole_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path(), Engine::Fjall, 2, 4096);
    store
        .create_bucket(&tenant(), "r", "us-east-1")
        .expect("bucket");
    let b = store.bucket(&tenant(), "r").expect("bucket");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, b, stop) = (Arc::clone(&store), b.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            for n in 0..400u32 {
                if n % 50 == 49 {
                    store.delete_object(&b, "k").await.expect("delete");
                    continue;
                }
                let data = version(n);
                let opts = PutOptions {
                    content_length: Some(data.len() as u64),
                    ..Default::default()
                };
                store
                    .put_object(&b, "k", Default::default(), opts, body(&data))
                    .await
                    .expect("put");
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    let mut reads = 0u32;
    while !stop.load(Ordering::Relaxed) {
        match store.get_object(&b, "k", None) {
            Ok((info, mut stream)) => {
                let mut got = Vec::new();
                while let Some(c) = stream.next().await {
                    got.extend_from_slice(&c.expect("chunk"));
                }
                let md5 = md5_hex(&got);
                assert_eq!(info.etag, md5, "body and ETag of different versions");
                assert_eq!(info.size, got.len() as u64);
                reads += 1;
            }
            Err(StoreError::NoSuchKey) => {}
            Err(e) => panic!("get: {e}"),
        }
        tokio::task::yield_now().await;
    }
    writer.await.expect("writer");
    assert!(reads > 0);
    // Deleted objects leave no body rows: the index holds no 'i' row.
    store.delete_object(&b, "k").await.expect("delete");
    for p in 0..store.partition_count() {
        let part = store
            .partition(laneway_store::PartitionId(p))
            .expect("partition");
        let rows = part.index().scan(b"i", b"j", 10).expect("scan");
        assert!(
            rows.is_empty(),
            "body rows left in partition {p}: {}",
            rows.len()
        );
    }
}

fn md5_hex(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    hex::encode(Md5::digest(data))
}
