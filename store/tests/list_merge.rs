//! LIST merge over several partitions equals a reference sort of the same
//! keys, for every combination of prefix, delimiter, start-after,
//! continuation and page size.

mod common;

use common::{list_all, open, put, tenant};
use laneway_store::{Engine, Resume};
use std::collections::BTreeSet;

fn key_set() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for y in 2024..2027 {
        for d in 0..12 {
            for f in 0..20 {
                keys.insert(format!("data/{y}/day-{d:02}/part-{f:03}.parquet"));
            }
        }
    }
    for i in 0..300 {
        keys.insert(format!("flat-{i:04}"));
    }
    for k in [
        "a",
        "a/",
        "a/b",
        "a//c",
        "a/b/",
        "z",
        "ü/ö.txt",
        "sp ace/x",
        "data/",
        "data/2024",
    ] {
        keys.insert(k.to_string());
    }
    keys
}

async fn check(engine: Engine, partitions: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path(), engine, partitions, 4096);
    let b = store
        .create_bucket(&tenant(), "bkt", "us-east-1")
        .expect("bucket");
    let other = store
        .create_bucket(&tenant(), "other", "us-east-1")
        .expect("other");
    let keys = key_set();
    for k in &keys {
        put(&store, &b, k, k.as_bytes()).await;
    }
    // A neighbouring bucket's keys must never leak into the listing.
    put(&store, &other, "data/2024/zzz", b"x").await;
    let prefixes = [
        "",
        "data/",
        "data/2025/",
        "data/2025/day-0",
        "a",
        "a/",
        "nope",
        "flat-02",
    ];
    let delimiters = [None, Some("/"), Some("-"), Some("//")];
    let starts = [
        Resume::Start,
        Resume::After("data/2025/day-05/part-007.parquet".into()),
        Resume::After("a/".into()),
        Resume::After("zzzz".into()),
        Resume::PastPrefix("data/2024/".into()),
    ];
    for prefix in prefixes {
        for delimiter in delimiters {
            for start in &starts {
                for max_keys in [1, 7, 1000] {
                    list_all(
                        &store,
                        &b,
                        &keys,
                        prefix,
                        delimiter,
                        start.clone(),
                        max_keys,
                    )
                    .await;
                }
            }
        }
    }
    store.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_equals_reference_fjall_8_partitions() {
    check(Engine::Fjall, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_equals_reference_sled_4_partitions() {
    check(Engine::Sled, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_equals_reference_single_partition() {
    check(Engine::Fjall, 1).await;
}
