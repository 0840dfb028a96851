//! `laneway-bench load`: build a big bucket through the store API in
//! process (no HTTP, no SigV4), for the scale benchmarks: N objects of a
//! fixed small size under `k/<index>`, one in `--tag-every` tagged
//! `sel=yes` (the 1 % a listing by tag selects), every object tagged
//! `part=<index mod 16>`.
//!
//! The data dir must not be served while it loads (the store takes its
//! lock); start `laneway serve` on it afterwards and measure through S3.
//! The bucket belongs to `--tenant` (its id, as `laneway admin tenant list`
//! shows it), so that tenant's keys see it. Loads append: `--start` skips
//! the indexes an earlier load wrote.

use bytes::Bytes;
use clap::Args;
use laneway_store::{PutOptions, Store, StoreConfig, Tag, TenantId};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Arguments of `load`.
#[derive(Debug, Clone, Args)]
pub struct StoreLoadArgs {
    /// The data directory (not being served).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The tenant id that owns the bucket.
    #[arg(long)]
    pub tenant: String,
    /// The bucket (created if missing).
    #[arg(long, default_value = "big")]
    pub bucket: String,
    /// Objects to write.
    #[arg(long, default_value_t = 1_000_000)]
    pub objects: u64,
    /// First object index.
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// Object size in bytes.
    #[arg(long, default_value_t = 1)]
    pub size: usize,
    /// One object in this many is tagged `sel=yes`.
    #[arg(long, default_value_t = 100)]
    pub tag_every: u64,
    /// Concurrent writers.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Sync every commit (off: one sync at the end, as a bulk load may).
    #[arg(long)]
    pub durable: bool,
}

/// The key of object `i`.
pub fn key_of(i: u64) -> String {
    format!("k/{i:012}")
}

/// The tags of object `i`.
pub fn tags_of(i: u64, tag_every: u64) -> Vec<Tag> {
    let mut tags = vec![Tag {
        key: "part".into(),
        value: (i % 16).to_string(),
    }];
    if tag_every > 0 && i.is_multiple_of(tag_every) {
        tags.push(Tag {
            key: "sel".into(),
            value: "yes".into(),
        });
    }
    tags
}

/// Run the load; prints its figures.
pub async fn run(a: StoreLoadArgs) -> Result<(), String> {
    let cfg = StoreConfig {
        durable: a.durable,
        ..StoreConfig::default()
    };
    let dir = a.data_dir.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&dir, cfg))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("open {}: {e}", a.data_dir.display()))?;
    let tenant = TenantId(a.tenant.clone());
    let bucket = match store.bucket(&tenant, &a.bucket) {
        Ok(b) => b,
        Err(_) => store
            .create_bucket(&tenant, &a.bucket, "us-east-1")
            .map_err(|e| format!("create bucket: {e}"))?,
    };
    let next = Arc::new(AtomicU64::new(a.start));
    let end = a.start + a.objects;
    let body = Bytes::from(vec![b'x'; a.size]);
    let started = Instant::now();
    let cpu = crate::cpu::CpuMeter::start(None);
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency.max(1) {
        let (store, bucket, next, body) = (
            Arc::clone(&store),
            bucket.clone(),
            Arc::clone(&next),
            body.clone(),
        );
        let (tag_every, first) = (a.tag_every, a.start);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return Ok::<(), String>(());
                }
                let opts = PutOptions {
                    content_length: Some(body.len() as u64),
                    tags: tags_of(i, tag_every),
                    ..Default::default()
                };
                let chunk = body.clone();
                let stream: laneway_store::BodyStream =
                    Box::pin(futures::stream::once(async move { Ok(chunk) }));
                store
                    .put_object(&bucket, &key_of(i), Default::default(), opts, stream)
                    .await
                    .map_err(|e| format!("put {}: {e}", key_of(i)))?;
                if i.is_multiple_of(1_000_000) && i > first {
                    eprintln!("# {i} objects, {:.0} s", started.elapsed().as_secs_f64());
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let elapsed = started.elapsed();
    println!(
        "load: {} objects of {} B ({} tagged sel=yes) in {:.1} s: {:.0} objects/s (durable: {})",
        a.objects,
        a.size,
        a.objects / a.tag_every.max(1),
        elapsed.as_secs_f64(),
        a.objects as f64 / elapsed.as_secs_f64(),
        a.durable
    );
    println!("{}", cpu.line(a.objects));
    let closing = Instant::now();
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "# closed (synced) in {:.1} s",
        closing.elapsed().as_secs_f64()
    );
    Ok(())
}
