//! The end-of-run read-back: every key any worker touched is read as its
//! owner's tenant and compared with the ledger, byte for byte; keys the
//! ledger says are deleted must answer 404 `NoSuchKey`; frozen keys (a
//! write of unknown outcome) must hold one of the versions they may hold;
//! known tag sets must match. Then each tenant's `rogue/nope/` prefix must
//! be empty. A 503 or a timeout is retried (with a pause) up to
//! [`ATTEMPTS`] times; anything else is a failure.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::blob::Blob;
use super::ledger::{KeyState, Tags, Version};
use super::outcome::{Class, EXAMPLES, classify};
use super::rogue::NOPE_PREFIX;
use super::s3x;
use super::tenant::Tenant;
use crate::error::ClientError;
use crate::ops::ListRequest;

/// Tries per key before a 503 or timeout counts as a failure.
pub const ATTEMPTS: u32 = 20;
/// Keys read at once.
const CONCURRENCY: usize = 8;

/// One key to check.
pub struct Job {
    /// Index of the owning tenant.
    pub tenant: usize,
    /// The key.
    pub key: String,
    /// What it may hold.
    pub state: KeyState,
}

/// What the read-back found.
#[derive(Debug, Clone, Default)]
pub struct Verified {
    /// Keys checked.
    pub keys: u64,
    /// Of which objects (known version) that read back byte-exact.
    pub objects: u64,
    /// Of which deleted keys that answered 404.
    pub absent: u64,
    /// Of which frozen keys that held one of their versions.
    pub frozen: u64,
    /// Tag sets that matched.
    pub tags: u64,
    /// Retries after 503 or timeout.
    pub retries: u64,
    /// Keys that failed.
    pub failures: u64,
    /// Objects found under `rogue/nope/`.
    pub nope_objects: u64,
    /// The first failures.
    pub examples: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

/// Checks every job, then the `rogue/nope/` prefixes.
pub async fn run(tenants: &[Arc<Tenant>], jobs: Vec<Job>) -> Verified {
    let start = Instant::now();
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (jobs, next, tenants) = (jobs.clone(), next.clone(), tenants.to_vec());
        set.spawn(async move {
            let mut v = Verified::default();
            while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                check_job(&tenants[job.tenant], job, &mut v).await;
            }
            v
        });
    }
    let mut total = Verified::default();
    while let Some(res) = set.join_next().await {
        match res {
            Ok(v) => total.merge(&v),
            Err(e) => total.fail(format!("read-back task: {e}")),
        }
    }
    for t in tenants {
        check_nope(t, &mut total).await;
    }
    total.elapsed = start.elapsed();
    total
}

impl Verified {
    fn fail(&mut self, msg: String) {
        self.failures += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(msg);
        }
    }

    fn merge(&mut self, o: &Verified) {
        self.keys += o.keys;
        self.objects += o.objects;
        self.absent += o.absent;
        self.frozen += o.frozen;
        self.tags += o.tags;
        self.retries += o.retries;
        self.failures += o.failures;
        self.nope_objects += o.nope_objects;
        let room = EXAMPLES.saturating_sub(self.examples.len());
        self.examples.extend(o.examples.iter().take(room).cloned());
    }
}

/// Runs `f` until it succeeds or fails for a reason other than 503/timeout.
async fn retried<T, F, Fut>(v: &mut Verified, mut f: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let mut attempt = 1;
    loop {
        match f().await {
            Err(e) if attempt < ATTEMPTS && classify(&e) != Class::Fail => {
                v.retries += 1;
                let pause =
                    Duration::from_millis(250 * u64::from(attempt)).min(Duration::from_secs(2));
                tokio::time::sleep(pause).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

async fn check_job(t: &Tenant, job: &Job, v: &mut Verified) {
    v.keys += 1;
    let what = format!("{}/{}", t.bucket, job.key);
    let res = match job.state.known() {
        Some(Version::Object { seed, size }) => check_object(t, &job.key, seed, size, v).await,
        Some(Version::Absent) => check_absent(t, &job.key, v).await,
        None => check_frozen(t, &job.key, &job.state.versions, v).await,
    };
    let res = match res {
        Ok(()) if job.state.known().is_some_and(|k| k != Version::Absent) => {
            check_tags(t, &job.key, job.state.tags, v).await
        }
        other => other,
    };
    if let Err(msg) = res {
        v.fail(format!("{what}: {msg}"));
    }
}

async fn check_object(
    t: &Tenant,
    key: &str,
    seed: u64,
    size: u64,
    v: &mut Verified,
) -> Result<(), String> {
    let blob = Blob::new(seed, size);
    retried(v, || {
        s3x::get_checked(&t.client, &t.bucket, key, &blob, None)
    })
    .await
    .map_err(|e| format!("acknowledged object ({size} bytes): {e}"))?;
    v.objects += 1;
    Ok(())
}

async fn check_absent(t: &Tenant, key: &str, v: &mut Verified) -> Result<(), String> {
    match retried(v, || s3x::get_bytes(&t.client, &t.bucket, key)).await {
        Err(ClientError::S3 {
            status: 404, code, ..
        }) if code == "NoSuchKey" => {
            v.absent += 1;
            Ok(())
        }
        Err(e) => Err(format!("deleted key: {e}")),
        Ok(b) => Err(format!("deleted key read back {} bytes", b.len())),
    }
}

async fn check_frozen(
    t: &Tenant,
    key: &str,
    versions: &[Version],
    v: &mut Verified,
) -> Result<(), String> {
    let got = match retried(v, || s3x::get_bytes(&t.client, &t.bucket, key)).await {
        Ok(b) => Some(b),
        Err(ClientError::S3 {
            status: 404, code, ..
        }) if code == "NoSuchKey" => None,
        Err(e) => return Err(format!("frozen key: {e}")),
    };
    let matches = versions.iter().any(|ver| match (ver, &got) {
        (Version::Absent, None) => true,
        (Version::Object { seed, size }, Some(b)) => {
            b.len() as u64 == *size && b[..] == Blob::new(*seed, *size).range(0, *size)[..]
        }
        _ => false,
    });
    if !matches {
        let len = got.map(|b| b.len());
        return Err(format!(
            "frozen key holds none of {versions:?} (got {len:?} bytes)"
        ));
    }
    v.frozen += 1;
    Ok(())
}

async fn check_tags(t: &Tenant, key: &str, tags: Tags, v: &mut Verified) -> Result<(), String> {
    let want: Vec<(String, String)> = match tags {
        Tags::None => Vec::new(),
        Tags::Value(n) => vec![("v".to_owned(), n.to_string())],
        Tags::Unknown => return Ok(()),
    };
    let got = retried(v, || s3x::get_tagging(&t.client, &t.bucket, key))
        .await
        .map_err(|e| format!("tagging: {e}"))?;
    if got != want {
        return Err(format!("tags {got:?}, want {want:?}"));
    }
    v.tags += 1;
    Ok(())
}

/// `rogue/nope/` must hold nothing: cut and refused PUTs store no object.
async fn check_nope(t: &Tenant, v: &mut Verified) {
    let req = ListRequest {
        prefix: Some(NOPE_PREFIX),
        max_keys: Some(1000),
        ..ListRequest::default()
    };
    match retried(v, || t.client.list_objects_v2(&t.bucket, &req)).await {
        Ok(page) if page.keys.is_empty() => {}
        Ok(page) => {
            v.nope_objects += page.keys.len() as u64;
            v.fail(format!(
                "{}: {} objects under {NOPE_PREFIX} (e.g. {:?})",
                t.bucket,
                page.keys.len(),
                page.keys.first()
            ));
        }
        Err(e) => v.fail(format!("{}: LIST {NOPE_PREFIX}: {e}", t.bucket)),
    }
}
