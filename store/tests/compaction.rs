//! Compaction gives back the space of overwritten and deleted objects, and
//! every live object still reads back byte-exact, before and after a reopen.

#![allow(clippy::cast_possible_truncation)] // test data patterns

mod common;

use common::{get, open, put, tenant};
use laneway_store::Engine;

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
