//! Key naming and bulk loading (`fill` mode and the prepare step).
//!
//! Keys are `<prefix><index:09>` or, with `dirs > 0`,
//! `<prefix>d<index % dirs:04>/<index:09>` so delimiter listings have
//! something to roll up. Loading is `concurrency` tasks pulling indexes from
//! one atomic counter, so every index is written exactly once whatever the
//! concurrency, and the bucket ends up with exactly `count` objects.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::client::S3Client;
use crate::content;
use crate::report::OpStats;

/// A numbered set of keys.
#[derive(Debug, Clone)]
pub struct KeySpace {
    /// Prefix of every key.
    pub prefix: String,
    /// Spread keys over this many "directories" (0 = flat).
    pub dirs: u64,
    /// Number of keys.
    pub count: u64,
}

impl KeySpace {
    /// The key with number `idx`.
    pub fn key(&self, idx: u64) -> String {
        if self.dirs == 0 {
            format!("{}{idx:09}", self.prefix)
        } else {
            format!("{}d{:04}/{idx:09}", self.prefix, idx % self.dirs)
        }
    }
}

/// What a fill did.
#[derive(Debug, Clone)]
pub struct FillResult {
    /// PUT counters.
    pub stats: OpStats,
    /// Wall time.
    pub elapsed: Duration,
}

/// PUTs every key of `keys` once with `size` bytes, `concurrency` at a
/// time, printing progress every `progress` if given.
pub async fn fill(
    client: &S3Client,
    bucket: &str,
    keys: &KeySpace,
    size: usize,
    concurrency: usize,
    progress: Option<Duration>,
) -> FillResult {
    let next = Arc::new(AtomicU64::new(0));
    let data = content::pattern(0x5eed, size);
    let start = Instant::now();
    let reporter =
        progress.map(|every| tokio::spawn(report_progress(next.clone(), keys.count, every)));
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency.max(1) {
        let (client, bucket, keys, next, data) = (
            client.clone(),
            bucket.to_owned(),
            keys.clone(),
            next.clone(),
            data.clone(),
        );
        tasks.push(tokio::spawn(async move {
            fill_worker(&client, &bucket, &keys, &next, data).await
        }));
    }
    let mut stats = OpStats::default();
    for task in tasks {
        match task.await {
            Ok(s) => stats.merge(&s),
            Err(e) => stats.err_label(format!("worker-panic: {e}")),
        }
    }
    if let Some(r) = reporter {
        r.abort();
    }
    FillResult {
        stats,
        elapsed: start.elapsed(),
    }
}

async fn fill_worker(
    client: &S3Client,
    bucket: &str,
    keys: &KeySpace,
    next: &AtomicU64,
    data: Bytes,
) -> OpStats {
    let mut stats = OpStats::default();
    loop {
        let idx = next.fetch_add(1, Ordering::Relaxed);
        if idx >= keys.count {
            return stats;
        }
        let t0 = Instant::now();
        match client
            .put_object(bucket, &keys.key(idx), data.clone())
            .await
        {
            Ok(_) => stats.ok(t0.elapsed(), data.len() as u64),
            Err(e) => stats.err(&e),
        }
    }
}

async fn report_progress(next: Arc<AtomicU64>, total: u64, every: Duration) {
    let start = Instant::now();
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let done = next.load(Ordering::Relaxed).min(total);
        let secs = start.elapsed().as_secs_f64();
        eprintln!("fill: {done}/{total} keys issued after {secs:.0}s");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_in_index_order() {
        let flat = KeySpace {
            prefix: "k/".into(),
            dirs: 0,
            count: 10,
        };
        assert_eq!(flat.key(42), "k/000000042");
        assert!(flat.key(9) < flat.key(10));
        let dirs = KeySpace { dirs: 16, ..flat };
        assert_eq!(dirs.key(17), "k/d0001/000000017");
    }
}
