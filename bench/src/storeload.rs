//! `laneway-bench load`: build a big bucket through the store's bulk
//! loader in process ([`laneway_store::ingest`]: no HTTP, no SigV4, no
//! commit path), for the scale benchmarks: N objects of a fixed small size
//! under `k/<index>`, one in `--tag-every` tagged `sel=yes` (the 1 % a
//! listing by tag selects), every object tagged `part=<index mod 16>`.
//!
//! The data dir must not be served while it loads (the store takes its
//! lock); start `laneway serve` on it afterwards and measure through S3.
//! The bucket belongs to `--tenant` (its id, as `laneway admin tenant list`
//! shows it), so that tenant's keys see it, and must be empty. The write
//! path's own rates are measured through S3 (`laneway-bench put`).

use clap::Args;
use laneway_store::ingest::IngestObject;
use laneway_store::{Store, StoreConfig, Tag, TenantId};
use std::path::PathBuf;
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
    /// The bucket (created if missing; must be empty).
    #[arg(long, default_value = "big")]
    pub bucket: String,
    /// Objects to write.
    #[arg(long, default_value_t = 1_000_000)]
    pub objects: u64,
    /// Object size in bytes (at most the store's inline size).
    #[arg(long, default_value_t = 1)]
    pub size: usize,
    /// One object in this many is tagged `sel=yes`.
    #[arg(long, default_value_t = 100)]
    pub tag_every: u64,
    /// Objects a partition gathers before they are written as one sorted
    /// run (memory: about 300 bytes an object, times the partitions).
    #[arg(long, default_value_t = 1_000_000)]
    pub run_objects: usize,
    /// Load objects without any tag (for the disk cost of tags).
    #[arg(long)]
    pub untagged: bool,
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
    tokio::task::spawn_blocking(move || load(&a))
        .await
        .map_err(|e| e.to_string())?
}

fn load(a: &StoreLoadArgs) -> Result<(), String> {
    let store = Store::open(&a.data_dir, StoreConfig::default())
        .map_err(|e| format!("open {}: {e}", a.data_dir.display()))?;
    let tenant = TenantId(a.tenant.clone());
    let bucket = match store.bucket(&tenant, &a.bucket) {
        Ok(b) => b,
        Err(_) => store
            .create_bucket(&tenant, &a.bucket, "us-east-1")
            .map_err(|e| format!("create bucket: {e}"))?,
    };
    let started = Instant::now();
    let cpu = crate::cpu::CpuMeter::start(None);
    let mut bulk = store
        .bulk_load(&bucket, a.run_objects)
        .map_err(|e| format!("bulk load: {e}"))?;
    for i in 0..a.objects {
        let obj = IngestObject {
            key: key_of(i),
            body: vec![b'x'; a.size],
            tags: if a.untagged {
                Vec::new()
            } else {
                tags_of(i, a.tag_every)
            },
        };
        bulk.push(obj)
            .map_err(|e| format!("load {}: {e}", key_of(i)))?;
        if i.is_multiple_of(10_000_000) && i > 0 {
            eprintln!("# {i} objects, {:.0} s", started.elapsed().as_secs_f64());
        }
    }
    let finishing = Instant::now();
    let loaded = bulk.finish().map_err(|e| format!("finish: {e}"))?;
    let elapsed = started.elapsed();
    // The last runs, the syncs and the settling of every partition's
    // index (a major compaction on fjall).
    println!(
        "# finish (last runs, sync, index settle) took {:.1} s",
        finishing.elapsed().as_secs_f64()
    );
    let selected = match a.untagged {
        true => 0,
        false => a.objects.div_ceil(a.tag_every.max(1)),
    };
    println!(
        "load: {loaded} objects of {} B ({selected} tagged sel=yes) in {:.1} s: {:.0} objects/s (bulk ingest, synced)",
        a.size,
        elapsed.as_secs_f64(),
        loaded as f64 / elapsed.as_secs_f64(),
    );
    println!("{}", cpu.line(a.objects));
    let closing = Instant::now();
    store.shutdown();
    println!("# closed in {:.1} s", closing.elapsed().as_secs_f64());
    Ok(())
}
