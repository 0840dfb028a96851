//! Helpers shared by the store's integration tests: opening a store in a
//! temp dir, bodies from bytes, reading bodies back, and the reference
//! (obviously correct, O(n)) listing that the merged LIST is compared to.

#![allow(dead_code)]

use bytes::Bytes;
use futures::StreamExt;
use laneway_store::{
    BodyStream, BucketInfo, Engine, ListEntry, ListQuery, PutOptions, Resume, Store, StoreConfig,
    TenantId,
};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

/// Open a store with small thresholds so volumes and compaction get exercised.
pub fn open(dir: &Path, engine: Engine, partitions: u32, inline_max: u64) -> Arc<Store> {
    let cfg = StoreConfig {
        partitions: Some(partitions),
        engine: Some(engine),
        inline_max,
        ..StoreConfig::default()
    };
    Store::open(dir, cfg).expect("open store")
}

/// The default tenant of tests.
pub fn tenant() -> TenantId {
    TenantId("t1".into())
}

/// A body stream of `data`, cut into a few chunks.
pub fn body(data: &[u8]) -> BodyStream {
    let chunks: Vec<Result<Bytes, std::io::Error>> = data
        .chunks(7_000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(chunks))
}

/// PUT `data` under `key`.
pub async fn put(store: &Store, b: &BucketInfo, key: &str, data: &[u8]) {
    let opts = PutOptions {
        content_length: Some(data.len() as u64),
        ..PutOptions::default()
    };
    store
        .put_object(b, key, Default::default(), opts, body(data))
        .await
        .expect("put");
}

/// GET `key` whole.
pub async fn get(store: &Store, b: &BucketInfo, key: &str) -> Option<Vec<u8>> {
    let (_, mut stream) = match store.get_object(b, key, None) {
        Ok(x) => x,
        Err(laneway_store::StoreError::NoSuchKey) => return None,
        Err(e) => panic!("get {key}: {e}"),
    };
    let mut out = Vec::new();
    while let Some(c) = stream.next().await {
        out.extend_from_slice(&c.expect("body chunk"));
    }
    Some(out)
}

/// A listing entry reduced to what is compared: (is_prefix, name).
pub type Named = (bool, String);

fn named(e: &ListEntry) -> Named {
    match e {
        ListEntry::Object(o) => (false, o.key.clone()),
        ListEntry::Prefix(p) => (true, p.clone()),
    }
}

/// Every entry S3 would list for (prefix, delimiter) after `resume`.
pub fn reference(
    keys: &BTreeSet<String>,
    prefix: &str,
    delimiter: Option<&str>,
    resume: &Resume,
) -> Vec<Named> {
    let mut out: Vec<Named> = Vec::new();
    for k in keys.iter().filter(|k| k.starts_with(prefix)) {
        let skip = match resume {
            Resume::Start => false,
            Resume::After(a) => k.as_str() <= a.as_str(),
            Resume::PastPrefix(p) => k.as_str() < p.as_str() || k.starts_with(p.as_str()),
        };
        if skip {
            continue;
        }
        let entry = match delimiter.and_then(|d| k[prefix.len()..].find(d).map(|i| (i, d))) {
            Some((i, d)) => (true, k[..prefix.len() + i + d.len()].to_string()),
            None => (false, k.clone()),
        };
        if out.last() != Some(&entry) {
            out.push(entry);
        }
    }
    out
}

/// List everything page by page; checks each page against the reference.
pub async fn list_all(
    store: &Arc<Store>,
    b: &BucketInfo,
    keys: &BTreeSet<String>,
    prefix: &str,
    delimiter: Option<&str>,
    start: Resume,
    max_keys: usize,
) -> Vec<Named> {
    list_all_tagged(store, b, keys, prefix, delimiter, start, max_keys, &[]).await
}

/// [`list_all`] with a tag filter: `keys` are the objects that match it.
#[allow(clippy::too_many_arguments)] // a listing's parameters, as in ListQuery
pub async fn list_all_tagged(
    store: &Arc<Store>,
    b: &BucketInfo,
    keys: &BTreeSet<String>,
    prefix: &str,
    delimiter: Option<&str>,
    start: Resume,
    max_keys: usize,
    tags: &[laneway_store::TagCond],
) -> Vec<Named> {
    let mut resume = start.clone();
    let mut all = Vec::new();
    let expected_all = reference(keys, prefix, delimiter, &start);
    for _ in 0..100_000 {
        let q = ListQuery {
            tags: tags.to_vec(),
            prefix: prefix.to_string(),
            delimiter: delimiter.map(str::to_string),
            resume: resume.clone(),
            max_keys,
        };
        let page = store.list_objects(b, q).await.expect("list");
        let got: Vec<Named> = page.entries.iter().map(named).collect();
        let want = reference(keys, prefix, delimiter, &resume);
        assert_eq!(
            got,
            want[..want.len().min(max_keys)],
            "page after {resume:?} (prefix {prefix:?}, delimiter {delimiter:?}, max {max_keys}, tags {tags:?})"
        );
        assert_eq!(
            page.truncated,
            want.len() > max_keys,
            "truncated flag after {resume:?}"
        );
        all.extend(got);
        match page.next {
            Some(n) if page.truncated => resume = n,
            _ => break,
        }
        if max_keys == 0 {
            break;
        }
    }
    if max_keys > 0 {
        assert_eq!(all, expected_all);
    }
    all
}
