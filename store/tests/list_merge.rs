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

/// The local partitions grouped three ways, as three store nodes would
/// answer them, counting the calls (round trips) the merge makes.
struct ThreeNodes<'a> {
    local: laneway_store::list::LocalRuns<'a>,
    calls: std::sync::atomic::AtomicUsize,
}

impl laneway_store::list::RunSource for ThreeNodes<'_> {
    fn groups(&self) -> Vec<Vec<laneway_store::PartitionId>> {
        let mut g = vec![Vec::new(), Vec::new(), Vec::new()];
        for p in self.local.partitions {
            g[usize::try_from(p.id().0).expect("id") % 3].push(p.id());
        }
        g
    }

    fn fetch<'a>(
        &'a self,
        bucket: laneway_store::BucketId,
        q: &'a laneway_store::ListQuery,
        reqs: Vec<laneway_store::list::RunRequest>,
    ) -> futures::future::BoxFuture<'a, laneway_store::StoreResult<Vec<laneway_store::list::Run>>>
    {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // One group per call, as a node answers only for its own.
        let groups = self.groups();
        let group = groups
            .iter()
            .find(|g| g.contains(&reqs[0].partition))
            .expect("group");
        assert!(
            reqs.iter().all(|r| group.contains(&r.partition)),
            "mixed groups"
        );
        self.local.fetch(bucket, q, reqs)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_sources_merge_the_same_pages_in_a_few_calls_per_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path(), Engine::Fjall, 16, 4096);
    let b = store
        .create_bucket(&tenant(), "bkt", "us-east-1")
        .expect("bucket");
    let keys = key_set();
    for k in &keys {
        put(&store, &b, k, b"x").await;
    }
    for (prefix, delimiter, max_keys) in [
        ("", None, 1000),
        ("", None, 100),
        ("data/", Some("/"), 1000),
        ("data/2025/", None, 37),
        ("flat-", Some("-"), 5),
    ] {
        let mut resume = Resume::Start;
        loop {
            let q = laneway_store::ListQuery {
                tags: Vec::new(),
                prefix: prefix.into(),
                delimiter: delimiter.map(str::to_string),
                resume: resume.clone(),
                max_keys,
            };
            let nodes = ThreeNodes {
                local: laneway_store::list::LocalRuns {
                    partitions: store.partitions(),
                },
                calls: Default::default(),
            };
            let grouped = laneway_store::list::merge(&nodes, b.id, &q)
                .await
                .expect("grouped");
            let local = store.list_objects(&b, q).await.expect("local");
            assert_eq!(
                grouped.entries, local.entries,
                "{prefix:?} {delimiter:?} {max_keys}"
            );
            assert_eq!(grouped.next, local.next);
            // A first fill per node, then refills that batch every cursor
            // of a node that runs low: a few calls per node per page (6 for
            // the first 1000-key page here), never one per partition (16
            // for the first fill alone).
            let calls = nodes.calls.into_inner();
            assert!(calls <= 3 * 3, "{calls} calls for a page of {max_keys}");
            match local.next {
                Some(next) if local.truncated => resume = next,
                _ => break,
            }
        }
    }
    store.shutdown();
}
