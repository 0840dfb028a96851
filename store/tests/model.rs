//! Model test: random put / overwrite / delete / tag / list sequences run
//! against the store and against a `BTreeMap`, compared after every step.
//! Fixed seeds; the store is also shut down and reopened along the way, so
//! the comparison covers recovery from disk as well. After every step each
//! listing by tag (through the tag index) equals the reference filter over
//! the model's objects, so the index never falls out of step with the
//! records: not after overwrites, deletes, tagging, reopen or compaction.

mod common;

use common::{body, get, list_all, list_all_tagged, open, tenant};
use laneway_store::{Engine, PutOptions, Resume, Store, StoreError, Tag, TagCond, WriteCond};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq)]
struct Model {
    data: Vec<u8>,
    tags: Vec<Tag>,
}

const KEYS: [&str; 12] = [
    "a", "a/1", "a/2", "a/b/1", "b", "b/x", "c/d/e", "c/d/f", "dir/", "z", "ü", "a/b/2",
];

/// A random tag set over few keys and values, so filters match often.
fn random_tags(rng: &mut StdRng) -> Vec<Tag> {
    let choices = [
        ("split", ["train", "val"]),
        ("q", ["good", "bad"]),
        ("n", ["1", "2"]),
    ];
    let mut tags = Vec::new();
    for (k, values) in choices {
        if rng.random_bool(0.5) {
            tags.push(Tag {
                key: k.into(),
                value: values[rng.random_range(0..2)].into(),
            });
        }
    }
    tags
}

/// The filters every comparison lists by.
fn filters() -> Vec<Vec<TagCond>> {
    let c = |k: &str, v: Option<&str>| TagCond {
        key: k.into(),
        value: v.map(String::from),
    };
    vec![
        vec![c("split", Some("train"))],
        vec![c("split", None)],
        vec![c("q", Some("good")), c("split", None)],
        vec![c("split", Some("val")), c("q", Some("bad")), c("n", None)],
        vec![c("absent", None)],
    ]
}

fn random_data(rng: &mut StdRng) -> Vec<u8> {
    // Sizes on both sides of the inline threshold (256) and of a CRC block.
    let size = match rng.random_range(0..4) {
        0 => rng.random_range(0..=256),
        1 => rng.random_range(257..5_000),
        2 => rng.random_range(65_000..70_000),
        _ => 0,
    };
    (0..size).map(|_| rng.random()).collect()
}

async fn step(store: &Arc<Store>, rng: &mut StdRng, model: &mut BTreeMap<String, Model>) {
    let b = store.bucket(&tenant(), "m").expect("bucket");
    let key = KEYS[rng.random_range(0..KEYS.len())];
    match rng.random_range(0..10) {
        0..=3 => {
            let data = random_data(rng);
            let tags = random_tags(rng);
            let opts = PutOptions {
                content_length: Some(data.len() as u64),
                tags: tags.clone(),
                ..Default::default()
            };
            store
                .put_object(&b, key, Default::default(), opts, body(&data))
                .await
                .expect("put");
            model.insert(key.to_string(), Model { data, tags });
        }
        4 => {
            let data = random_data(rng);
            let opts = PutOptions {
                content_length: Some(data.len() as u64),
                ..Default::default()
            };
            let r = store
                .put_object_if(
                    &b,
                    key,
                    Default::default(),
                    opts,
                    body(&data),
                    WriteCond::IfAbsent,
                )
                .await;
            if model.contains_key(key) {
                assert!(matches!(r, Err(StoreError::PreconditionFailed)), "{r:?}");
            } else {
                r.expect("conditional put of a new key");
                model.insert(
                    key.to_string(),
                    Model {
                        data,
                        tags: Vec::new(),
                    },
                );
            }
        }
        5 | 6 => {
            let existed = store.delete_object(&b, key).await.expect("delete");
            assert_eq!(existed, model.remove(key).is_some());
        }
        7 => {
            let tags = random_tags(rng);
            let r = store.put_object_tags(&b, key, tags.clone()).await;
            match model.get_mut(key) {
                Some(m) => {
                    r.expect("tag");
                    m.tags = tags;
                }
                None => assert!(matches!(r, Err(StoreError::NoSuchKey))),
            }
        }
        _ => {
            let keys: BTreeSet<String> = model.keys().cloned().collect();
            let prefix = ["", "a", "a/", "c/d/"][rng.random_range(0..4)];
            let delimiter = [None, Some("/")][rng.random_range(0..2)];
            list_all(
                store,
                &b,
                &keys,
                prefix,
                delimiter,
                Resume::Start,
                rng.random_range(1..5),
            )
            .await;
        }
    }
    compare(store, model).await;
}

async fn compare(store: &Arc<Store>, model: &BTreeMap<String, Model>) {
    let b = store.bucket(&tenant(), "m").expect("bucket");
    for key in KEYS {
        let got = get(store, &b, key).await;
        assert_eq!(
            got.as_ref(),
            model.get(key).map(|m| &m.data),
            "data of {key}"
        );
        if let Some(m) = model.get(key) {
            let info = store.head_object(&b, key).expect("head");
            assert_eq!(info.tags, m.tags, "tags of {key}");
            assert_eq!(info.size, m.data.len() as u64);
        }
    }
    for filter in filters() {
        let keys: BTreeSet<String> = model
            .iter()
            .filter(|(_, m)| filter.iter().all(|c| matches(c, &m.tags)))
            .map(|(k, _)| k.clone())
            .collect();
        for (prefix, delimiter, max) in [("", None, 1000), ("a", Some("/"), 2), ("", None, 1)] {
            list_all_tagged(
                store,
                &b,
                &keys,
                prefix,
                delimiter,
                Resume::Start,
                max,
                &filter,
            )
            .await;
        }
    }
    let usage = store.bucket_usage(b.id).expect("usage");
    assert_eq!(usage.objects, model.len() as i64);
    assert_eq!(
        usage.bytes,
        model.values().map(|m| m.data.len() as i64).sum::<i64>()
    );
}

/// The reference meaning of a condition (written apart from the store's).
fn matches(c: &TagCond, tags: &[Tag]) -> bool {
    tags.iter().any(|t| {
        t.key == c.key
            && match &c.value {
                Some(v) => &t.value == v,
                None => true,
            }
    })
}

async fn run(seed: u64, engine: Engine, partitions: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path(), engine, partitions, 256);
    store
        .create_bucket(&tenant(), "m", "us-east-1")
        .expect("bucket");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    for i in 0..400 {
        step(&store, &mut rng, &mut model).await;
        if i % 100 == 99 {
            store.shutdown();
            drop(store);
            store = open(dir.path(), engine, partitions, 256);
            compare(&store, &model).await;
        }
        if i % 150 == 149 {
            store.compact(0.0, true).await.expect("compact");
            compare(&store, &model).await;
        }
    }
    store.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_fjall_seed_1() {
    run(1, Engine::Fjall, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_fjall_seed_2() {
    run(2, Engine::Fjall, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_sled_seed_3() {
    run(3, Engine::Sled, 4).await;
}
