//! The polite tenants' workers: closed loops over a mix ([`MIX`]) of PUT
//! (1 KiB to 4 MiB, and one request in ~1,800 a two-part multipart
//! upload of 5-6 MiB), GET
//! (whole and ranged), ListObjectsV2 walks, PutObjectTagging,
//! GetObjectTagging and DELETE.
//!
//! Worker `w` of a tenant owns the keys `w<w>/k<i>` of the tenant's bucket
//! and no one else touches them, so its [`Ledger`] is exact: reads are
//! checked against it byte for byte as they stream, tag reads against the
//! last acknowledged tag write, and each listing of the worker's prefix
//! (pages of 5 keys) against the set of keys it must, may and must not
//! hold. Every answer is classified ([`super::outcome`]) into the cell of
//! the phase in which it completed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::blob::Blob;
use super::ledger::{Ledger, Tags, Version};
use super::outcome::{Cell, Class, ambiguous, classify};
use super::plan::Plan;
use super::s3x;
use crate::client::S3Client;
use crate::error::ClientError;
use crate::ops::ListRequest;

/// One polite tenant.
pub struct Tenant {
    /// Short name (`a` ... `d`).
    pub name: String,
    /// Weight given to it.
    pub weight: u32,
    /// Its signing client.
    pub client: S3Client,
    /// Its bucket.
    pub bucket: String,
}

/// Operations and their weights in the mix.
pub const MIX: [(Op, u32); 8] = [
    (Op::Put, 250),
    (Op::Multipart, 1),
    (Op::Get, 560),
    (Op::Range, 280),
    (Op::List, 160),
    (Op::Tag, 200),
    (Op::GetTag, 200),
    (Op::Delete, 120),
];
/// Keys per ListObjectsV2 page.
const PAGE: u32 = 5;

/// One kind of polite request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// PutObject.
    Put,
    /// Create, two UploadParts, Complete.
    Multipart,
    /// GetObject, whole.
    Get,
    /// GetObject with a Range.
    Range,
    /// ListObjectsV2 walk of the worker's prefix.
    List,
    /// PutObjectTagging.
    Tag,
    /// GetObjectTagging.
    GetTag,
    /// DeleteObject.
    Delete,
}

impl Op {
    /// Name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Multipart => "multipart",
            Op::Get => "get",
            Op::Range => "get-range",
            Op::List => "list",
            Op::Tag => "tag-put",
            Op::GetTag => "tag-get",
            Op::Delete => "delete",
        }
    }
}

/// Counters shared with the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    /// Requests answered.
    pub done: AtomicU64,
    /// 503 answers.
    pub busy: AtomicU64,
    /// Failures.
    pub failures: AtomicU64,
}

/// What one worker did.
pub struct WorkerOut {
    /// Index of its tenant.
    pub tenant: usize,
    /// Its keys' states.
    pub ledger: Ledger,
    /// Per phase.
    pub phases: Vec<Cell>,
    /// Per operation, over the run.
    pub ops: BTreeMap<&'static str, Cell>,
}

/// A request done: what, on which key, and how it went.
struct Done {
    op: Op,
    key: String,
    res: Result<u64, ClientError>,
}

struct Worker {
    tenant: Arc<Tenant>,
    prefix: String,
    keys: u64,
    rng: StdRng,
    ledger: Ledger,
    serial: u64,
}

/// Runs worker `w` of tenant `index` from `start` to `stop`.
pub async fn run(
    tenant: Arc<Tenant>,
    index: usize,
    w: u64,
    (start, stop): (Instant, Instant),
    plan: Arc<Plan>,
    progress: Arc<Progress>,
) -> WorkerOut {
    tokio::time::sleep_until(start.into()).await;
    let seed = plan.seed ^ (index as u64) << 48 ^ w << 32;
    let mut me = Worker {
        tenant,
        prefix: format!("w{w:02}/"),
        keys: plan.keys_per_worker,
        rng: StdRng::seed_from_u64(seed),
        ledger: Ledger::default(),
        serial: seed,
    };
    let mut out = WorkerOut {
        tenant: index,
        ledger: Ledger::default(),
        phases: vec![Cell::default(); plan.phase_count()],
        ops: BTreeMap::new(),
    };
    while Instant::now() < stop {
        let began = Instant::now();
        let Some(d) = me.one().await else { continue };
        let done = Instant::now();
        let what = format!("{} {}/{}", d.op.name(), me.tenant.bucket, d.key);
        out.phases[plan.phase_of(done)].record(&what, done - began, &d.res);
        out.ops
            .entry(d.op.name())
            .or_default()
            .record(&what, done - began, &d.res);
        count(&progress, &d.res);
    }
    out.ledger = me.ledger;
    out
}

fn count(p: &Progress, res: &Result<u64, ClientError>) {
    p.done.fetch_add(1, Ordering::Relaxed);
    match res.as_ref().err().map(classify) {
        Some(Class::Busy) => p.busy.fetch_add(1, Ordering::Relaxed),
        Some(Class::Fail) => p.failures.fetch_add(1, Ordering::Relaxed),
        _ => 0,
    };
}

/// A size from 1 KiB to 4 MiB: 85 % under 64 KiB, 14 % up to 512 KiB,
/// 1 % of 1-4 MiB (about 90 KB on average, so a 20-minute soak writes
/// tens of GB, not hundreds).
fn pick_size(rng: &mut StdRng) -> u64 {
    match rng.random_range(0..100) {
        0..85 => rng.random_range(1024..64 * 1024),
        85..99 => rng.random_range(64 * 1024..512 * 1024),
        _ => rng.random_range(1 << 20..4 << 20),
    }
}

fn pick_op(rng: &mut StdRng) -> Op {
    let total: u32 = MIX.iter().map(|(_, w)| w).sum();
    let mut roll = rng.random_range(0..total);
    for (op, w) in MIX {
        if roll < w {
            return op;
        }
        roll -= w;
    }
    Op::Get
}

/// `Ok(0)` if `res` is a 404 NoSuchKey, else the mismatch as an error.
fn expect_missing<T>(key: &str, res: Result<T, ClientError>) -> Result<u64, ClientError> {
    match res {
        Err(ClientError::S3 {
            status: 404, code, ..
        }) if code == "NoSuchKey" => Ok(0),
        Err(e) => Err(e),
        Ok(_) => Err(ClientError::BadResponse(format!(
            "{key}: answered 2xx, but the ledger says it does not exist"
        ))),
    }
}

impl Worker {
    fn key(&self, i: u64) -> String {
        format!("{}k{i:03}", self.prefix)
    }

    fn next_seed(&mut self) -> u64 {
        crate::content::splitmix64(&mut self.serial)
    }

    /// One request of a randomly chosen kind, or `None` if the chosen key
    /// cannot take it (frozen, or absent for a ranged read).
    async fn one(&mut self) -> Option<Done> {
        let op = pick_op(&mut self.rng);
        let i = self.rng.random_range(0..self.keys);
        let key = self.key(i);
        let res = match op {
            Op::Put | Op::Multipart => self.write(op, &key).await?,
            Op::Delete => self.delete(&key).await?,
            Op::Get | Op::Range => self.read(op == Op::Range, &key).await?,
            Op::List => self.list().await,
            Op::Tag => self.tag(&key).await?,
            Op::GetTag => self.get_tags(&key).await?,
        };
        Some(Done { op, key, res })
    }

    fn settle(&mut self, key: &str, v: Version, res: &Result<(), ClientError>, maybe: bool) {
        match res {
            Ok(()) => self.ledger.acked(key, v),
            Err(e) if maybe || ambiguous(e) => self.ledger.unknown(key, Some(v)),
            Err(_) => {}
        }
    }

    async fn write(&mut self, op: Op, key: &str) -> Option<Result<u64, ClientError>> {
        if !self.ledger.get(key).writable() {
            return None;
        }
        let size = match op {
            Op::Multipart => s3x::MIN_PART + self.rng.random_range(1024..1 << 20),
            _ => pick_size(&mut self.rng),
        };
        let seed = self.next_seed();
        let blob = Blob::new(seed, size);
        let t = &self.tenant;
        let (res, maybe) = if op == Op::Multipart {
            match s3x::multipart_put(&t.client, &t.bucket, key, &blob).await {
                Ok(()) => (Ok(()), false),
                Err(e) => (Err(e.error), e.maybe_applied),
            }
        } else {
            (s3x::put_blob(&t.client, &t.bucket, key, &blob).await, false)
        };
        self.settle(key, Version::Object { seed, size }, &res, maybe);
        Some(res.map(|()| size))
    }

    async fn delete(&mut self, key: &str) -> Option<Result<u64, ClientError>> {
        if !self.ledger.get(key).writable() {
            return None;
        }
        let res = self
            .tenant
            .client
            .delete_object(&self.tenant.bucket, key)
            .await;
        self.settle(key, Version::Absent, &res, false);
        Some(res.map(|()| 0))
    }

    async fn read(&mut self, ranged: bool, key: &str) -> Option<Result<u64, ClientError>> {
        let t = &self.tenant;
        match self.ledger.get(key).known()? {
            Version::Absent if ranged => None,
            Version::Absent => Some(expect_missing(
                key,
                t.client.get_object_count(&t.bucket, key).await,
            )),
            Version::Object { seed, size } => {
                let blob = Blob::new(seed, size);
                let range = if ranged && size > 1 {
                    let a = self.rng.random_range(0..size - 1);
                    Some((a, self.rng.random_range(a + 1..=size.min(a + (1 << 20)))))
                } else {
                    None
                };
                Some(s3x::get_checked(&t.client, &t.bucket, key, &blob, range).await)
            }
        }
    }

    async fn tag(&mut self, key: &str) -> Option<Result<u64, ClientError>> {
        let st = self.ledger.get(key);
        let known = st.known()?;
        let value: u32 = self.rng.random();
        let tags = [("v".to_owned(), value.to_string())];
        let t = &self.tenant;
        let res = t.client.put_object_tagging(&t.bucket, key, &tags).await;
        if known == Version::Absent {
            return Some(expect_missing(key, res));
        }
        match &res {
            Ok(()) => self.ledger.tagged(key, value),
            Err(e) if ambiguous(e) => self.ledger.unknown(key, None),
            Err(_) => {}
        }
        Some(res.map(|()| 0))
    }

    async fn get_tags(&mut self, key: &str) -> Option<Result<u64, ClientError>> {
        let st = self.ledger.get(key);
        let known = st.known()?;
        let t = &self.tenant;
        let res = s3x::get_tagging(&t.client, &t.bucket, key).await;
        if known == Version::Absent {
            return Some(expect_missing(key, res));
        }
        let want: Vec<(String, String)> = match st.tags {
            Tags::None => Vec::new(),
            Tags::Value(v) => vec![("v".to_owned(), v.to_string())],
            Tags::Unknown => return None,
        };
        Some(res.and_then(|got| {
            if got == want {
                Ok(0)
            } else {
                Err(ClientError::BadResponse(format!(
                    "{key}?tagging: got {got:?}, want {want:?}"
                )))
            }
        }))
    }

    /// Walks the worker's prefix and compares it with the ledger.
    async fn list(&mut self) -> Result<u64, ClientError> {
        let t = &self.tenant;
        let mut listed = BTreeSet::new();
        let mut token: Option<String> = None;
        loop {
            let req = ListRequest {
                prefix: Some(&self.prefix),
                max_keys: Some(PAGE),
                continuation_token: token.as_deref(),
                ..ListRequest::default()
            };
            let page = t.client.list_objects_v2(&t.bucket, &req).await?;
            listed.extend(page.keys);
            match page.next_token {
                Some(next) if page.is_truncated => token = Some(next),
                _ => break,
            }
        }
        self.compare_listing(&listed)
            .map(|()| 0)
            .map_err(|m| ClientError::BadResponse(format!("LIST {}: {m}", self.prefix)))
    }

    fn compare_listing(&self, listed: &BTreeSet<String>) -> Result<(), String> {
        let owned: BTreeSet<String> = (0..self.keys).map(|i| self.key(i)).collect();
        if let Some(stranger) = listed.difference(&owned).next() {
            return Err(format!("{stranger} listed, never written"));
        }
        for key in &owned {
            match (self.ledger.get(key).known(), listed.contains(key)) {
                (Some(Version::Absent), true) => return Err(format!("{key} listed, deleted")),
                (Some(Version::Object { .. }), false) => {
                    return Err(format!("{key} missing, acknowledged"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_and_sizes_stay_in_bounds() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut seen = BTreeSet::new();
        for _ in 0..5000 {
            seen.insert(pick_op(&mut rng).name());
            let s = pick_size(&mut rng);
            assert!((1024..4 << 20).contains(&s), "{s}");
        }
        assert_eq!(seen.len(), MIX.len());
    }

    #[test]
    fn missing_means_404_no_such_key() {
        let nsk = ClientError::S3 {
            status: 404,
            code: "NoSuchKey".into(),
            message: String::new(),
        };
        assert_eq!(expect_missing::<()>("k", Err(nsk)).ok(), Some(0));
        assert!(expect_missing("k", Ok(())).is_err());
    }
}
