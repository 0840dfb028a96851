//! Running jobs: one task per job, a page of up to 1,000 objects at a time.
//!
//! A page is a listing by the job's prefix and filter (through the tag
//! index, so a job reads only objects that can match), then one bulk edit
//! of the page's keys (the store checks the filter again and applies the
//! edit in the same commit round, so a tag changed meanwhile by a client
//! is never overwritten with a stale set), then one update of the job's
//! document: the page's last key becomes the durable cursor. A job that
//! stops anywhere (a restart, a crash) resumes after its cursor and redoes
//! at most one page, which changes nothing the second time: edits are
//! idempotent. A redone page carries the same call id as the first try
//! ([`page_id`]), so on a replicated cluster a part of it that committed
//! before the failure is answered as it was, not applied again over a
//! client's tag write that came between (and its counts stay right).
//!
//! Each page is admitted through the tenant's lane like a request, at a
//! cost of [`COST_DIVISOR`]-th of a request's base cost per object, so a job's work
//! counts against its tenant's weight: it goes fast on an idle server and
//! yields to other tenants on a busy one. A lane that refuses (full, or
//! the wait ran out) only delays the page.
//!
//! Runners hold a lease on their job in its document, renewed every page;
//! on start and every [`SCAN_EVERY`] a gateway takes running jobs whose
//! lease ran out (their runner stopped), so a job survives the gateway
//! that started it.

use super::book::{ActiveRef, Book};
use super::spec::{Job, JobState};
use crate::lanes::LaneState;
use crate::request::error::{GwError, GwResult};
use laneway_qos::TenantKey;
use laneway_store::caller::Caller;
use laneway_store::{BucketId, BucketInfo, ListEntry, ListQuery, Resume, StoreClient, StoreError};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Objects per page.
pub const PAGE: usize = 1000;
/// An object of a job costs this fraction of a request's base cost (a
/// bulk edit of one object is metadata work in a shared commit round, a
/// small part of what a PutObjectTagging request costs the server).
pub const COST_DIVISOR: u64 = 16;
/// How long a runner's lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(30);
/// How often a gateway looks for jobs without a runner.
pub const SCAN_EVERY: Duration = Duration::from_secs(10);
/// Pause after an error before a page is tried again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Errors in a row after which a job fails.
const MAX_ERRORS_IN_A_ROW: u32 = 30;

/// The jobs of one gateway process.
#[derive(Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

struct Inner {
    book: Book,
    store: Arc<dyn StoreClient>,
    lanes: Arc<LaneState>,
    runner: String,
    running: Mutex<HashSet<String>>,
    stopping: AtomicBool,
    idle: tokio::sync::Notify,
}

fn now_ms() -> i64 {
    laneway_store::partition::now_ms()
}

fn lease_ms() -> i64 {
    i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// The call id of the page of `job` that starts at its cursor, the same
/// for every attempt at that page (a retry after a failure, or another
/// runner taking the job over), so that at a replicated partition a part
/// of the page that committed before the failure is answered from its
/// row, not applied again over other clients' later tag writes, and
/// counted as it was (`laneway_store::repeat`).
fn page_id(job: &Job, bucket: BucketId) -> laneway_store::repeat::CallId {
    let cursor = job.cursor.as_deref().map_or(&[][..], str::as_bytes);
    let started = u8::from(job.cursor.is_some());
    laneway_store::repeat::derived_id(&[
        b"tagging-job-page",
        &bucket.0.to_be_bytes(),
        job.id.as_bytes(),
        &[started],
        cursor,
    ])
}

/// A fresh random id (16 hex digits).
pub fn random_id() -> String {
    use ring::rand::SecureRandom;
    let mut raw = [0u8; 8];
    // A failed generator is vanishingly rare; the time keeps ids distinct then.
    if ring::rand::SystemRandom::new().fill(&mut raw).is_err() {
        raw = now_ms().to_be_bytes();
    }
    hex::encode(raw)
}

impl Jobs {
    /// Jobs over `store`, admitted through `lanes`, run under the lease
    /// name `runner`: a name the process keeps across restarts (`serve`,
    /// the only process of its data dir) takes its own jobs back at once
    /// on start; a random one (a cluster's gateway) waits for the leases
    /// of a stopped gateway to run out.
    pub fn new(store: Arc<dyn StoreClient>, lanes: Arc<LaneState>, runner: String) -> Jobs {
        Jobs {
            inner: Arc::new(Inner {
                book: Book::new(Arc::clone(&store)),
                store,
                lanes,
                runner,
                running: Mutex::new(HashSet::new()),
                stopping: AtomicBool::new(false),
                idle: tokio::sync::Notify::new(),
            }),
        }
    }

    /// The documents.
    pub fn book(&self) -> &Book {
        &self.inner.book
    }

    /// Take over jobs without a runner now and every [`SCAN_EVERY`].
    pub fn start(&self) {
        let jobs = self.clone();
        tokio::spawn(async move {
            while !jobs.inner.stopping.load(Ordering::Relaxed) {
                if let Err(e) = jobs.adopt_orphans().await {
                    tracing::warn!(error = ?e, "could not scan tagging jobs");
                }
                tokio::time::sleep(SCAN_EVERY).await;
            }
        });
    }

    /// Record a new job and start running it.
    /// `weight` is the tenant's lane weight, sent to store nodes with
    /// each call (a job taken over from another gateway uses 1).
    pub async fn create(
        &self,
        r: ActiveRef,
        bucket: BucketInfo,
        mut job: Job,
        weight: u32,
    ) -> GwResult<Job> {
        job.lease = Some((self.inner.runner.clone(), now_ms() + lease_ms()));
        self.inner.book.create(&r, job.clone()).await?;
        self.spawn(r, bucket, job.id.clone(), weight);
        Ok(job)
    }

    /// Cancel a running job; the job as it now is (`None`: no such job).
    pub async fn cancel(&self, bucket: BucketId, id: &str) -> GwResult<Option<Job>> {
        self.inner
            .book
            .modify(bucket, id, |j| {
                if j.state == JobState::Running {
                    j.finish(JobState::Cancelled, now_ms());
                }
                j.clone()
            })
            .await
    }

    /// Stop every runner after its current page (jobs stay running in
    /// their documents and resume on the next start); waits at most `wait`.
    pub async fn stop(&self, wait: Duration) {
        self.inner.stopping.store(true, Ordering::Relaxed);
        let _ = tokio::time::timeout(wait, async {
            loop {
                let idle = self.inner.idle.notified();
                if self.inner.running.lock().is_empty() {
                    return;
                }
                idle.await;
            }
        })
        .await;
    }

    async fn adopt_orphans(&self) -> GwResult<()> {
        for r in self.inner.book.active().await? {
            let bucket = BucketId(r.bucket_id);
            for job in self.inner.book.jobs(bucket).await? {
                if self.orphaned(&job) && self.claim(bucket, &job.id).await? {
                    let info = self.bucket_info(&r).await;
                    match info {
                        Ok(info) => self.spawn(r.clone(), info, job.id.clone(), 1),
                        Err(e) => self.fail(bucket, &job.id, &format!("{e:?}")).await,
                    }
                }
            }
            self.inner.book.retire(&r).await?;
        }
        Ok(())
    }

    fn orphaned(&self, job: &Job) -> bool {
        job.state == JobState::Running
            && !self.inner.running.lock().contains(&job.id)
            && job
                .lease
                .as_ref()
                .is_none_or(|(runner, until)| *runner == self.inner.runner || *until < now_ms())
    }

    /// Take the lease of a job whose lease ran out; whether this runner has it.
    async fn claim(&self, bucket: BucketId, id: &str) -> GwResult<bool> {
        let me = self.inner.runner.clone();
        let got = self
            .inner
            .book
            .modify(bucket, id, |j| {
                let free = j
                    .lease
                    .as_ref()
                    .is_none_or(|(r, until)| *r == me || *until < now_ms());
                if j.state == JobState::Running && free {
                    j.lease = Some((me.clone(), now_ms() + lease_ms()));
                    true
                } else {
                    false
                }
            })
            .await?;
        Ok(got == Some(true))
    }

    async fn bucket_info(&self, r: &ActiveRef) -> GwResult<BucketInfo> {
        let tenant = laneway_store::TenantId(r.tenant.clone());
        let info = self.inner.store.bucket(&tenant, &r.bucket).await?;
        if info.id.0 != r.bucket_id {
            return Err(StoreError::NoSuchBucket.into());
        }
        Ok(info)
    }

    async fn fail(&self, bucket: BucketId, id: &str, why: &str) {
        let r = self
            .inner
            .book
            .modify(bucket, id, |j| {
                j.note(why.to_string());
                j.finish(JobState::Failed, now_ms());
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(job = id, error = ?e, "could not record a tagging job's failure");
        }
    }

    fn spawn(&self, r: ActiveRef, bucket: BucketInfo, id: String, weight: u32) {
        if !self.inner.running.lock().insert(id.clone()) {
            return;
        }
        let jobs = self.clone();
        let caller = Caller {
            tenant: laneway_store::TenantId(r.tenant.clone()),
            weight,
        };
        tokio::spawn(caller.scope(async move {
            jobs.run(&r, &bucket, &id).await;
            jobs.inner.running.lock().remove(&id);
            jobs.inner.idle.notify_waiters();
            if let Err(e) = jobs.inner.book.retire(&r).await {
                tracing::warn!(job = %id, error = ?e, "could not retire a bucket's tagging jobs");
            }
        }));
    }

    async fn run(&self, r: &ActiveRef, bucket: &BucketInfo, id: &str) {
        let mut errors = 0u32;
        while !self.inner.stopping.load(Ordering::Relaxed) {
            match self.page(r, bucket, id).await {
                Ok(true) => errors = 0,
                Ok(false) => return,
                Err(GwError::Store(StoreError::NoSuchBucket)) => {
                    return self.fail(bucket.id, id, "the bucket is gone").await;
                }
                Err(e) => {
                    errors += 1;
                    tracing::warn!(job = id, error = ?e, errors, "a tagging job's page failed; retrying");
                    if errors >= MAX_ERRORS_IN_A_ROW {
                        return self.fail(bucket.id, id, &format!("gave up: {e:?}")).await;
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    /// Do one page; whether the job goes on.
    async fn page(&self, r: &ActiveRef, bucket: &BucketInfo, id: &str) -> GwResult<bool> {
        let Some(job) = self.current(bucket.id, id).await? else {
            return Ok(false);
        };
        let query = ListQuery {
            prefix: job.spec.prefix.clone(),
            delimiter: None,
            resume: job.cursor.clone().map_or(Resume::Start, Resume::After),
            max_keys: PAGE,
            tags: job.spec.list_filter(),
        };
        let page = self.inner.store.list_objects(bucket, query).await?;
        let keys: Vec<String> = page
            .entries
            .into_iter()
            .filter_map(|e| match e {
                ListEntry::Object(o) => Some(o.key),
                ListEntry::Prefix(_) => None,
            })
            .collect();
        let last = keys.last().cloned();
        let listed = keys.len() as u64;
        let counts = if keys.is_empty() {
            laneway_store::EditCounts::default()
        } else {
            // The lane's turn is the page's admission; the permit is given
            // back before the store call, which may wait on a store node.
            drop(self.admit(&r.tenant, listed).await);
            let once = page_id(&job, bucket.id);
            self.inner
                .store
                .edit_tags(bucket, keys, job.spec.edit(), Some(once))
                .await?
        };
        let me = self.inner.runner.clone();
        let more = page.truncated;
        let going = self
            .inner
            .book
            .modify(bucket.id, id, |j| {
                if j.state != JobState::Running || j.lease.as_ref().is_some_and(|(r, _)| *r != me) {
                    return false; // cancelled, or taken over
                }
                j.advance(last.clone(), listed, counts);
                if more {
                    j.lease = Some((me.clone(), now_ms() + lease_ms()));
                } else {
                    j.finish(JobState::Done, now_ms());
                }
                more
            })
            .await?;
        Ok(going == Some(true))
    }

    /// The job if it is still running under this runner.
    async fn current(&self, bucket: BucketId, id: &str) -> GwResult<Option<Job>> {
        let jobs = self.inner.book.jobs(bucket).await?;
        Ok(jobs.into_iter().find(|j| {
            j.id == id
                && j.state == JobState::Running
                && j.lease
                    .as_ref()
                    .is_none_or(|(r, _)| *r == self.inner.runner)
        }))
    }

    /// A lane permit for `objects` objects of `tenant`, waiting as long as
    /// it takes (a refusal only delays the page).
    async fn admit(&self, tenant: &str, objects: u64) -> Option<laneway_qos::Permit> {
        let lanes = self.inner.lanes.lanes();
        let cfg = lanes.config();
        let per_object = (cfg.base_cost / COST_DIVISOR).max(1);
        let total = per_object.saturating_mul(objects).max(1);
        // At most a quarter of the capacity is held while the page runs;
        // the rest of its cost is charged to the lane's account, so the
        // page weighs against the tenant's share all the same.
        let held = total.min(cfg.capacity_units / 4).max(1);
        let key = TenantKey::from(tenant);
        while !self.inner.stopping.load(Ordering::Relaxed) {
            match lanes.admit(&key, held).await {
                Ok(p) => {
                    lanes.charge(&key, total - held);
                    return Some(p);
                }
                Err(o) => tokio::time::sleep(o.retry_after.max(Duration::from_millis(50))).await,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::spec::JobSpec;

    fn job(id: &str, cursor: Option<&str>) -> Job {
        Job {
            id: id.into(),
            bucket: "b".into(),
            spec: JobSpec::default(),
            state: JobState::Running,
            cursor: cursor.map(str::to_string),
            scanned: 0,
            changed: 0,
            errors: 0,
            messages: Vec::new(),
            created_ms: 0,
            finished_ms: None,
            lease: None,
        }
    }

    #[test]
    fn a_page_keeps_its_call_id_across_tries_and_the_next_page_has_another() {
        let b = BucketId(3);
        let first = page_id(&job("j1", None), b);
        assert_eq!(first, page_id(&job("j1", None), b), "a retried first page");
        let second = page_id(&job("j1", Some("k0999")), b);
        assert_ne!(first, second);
        assert_eq!(second, page_id(&job("j1", Some("k0999")), b));
        assert_ne!(first, page_id(&job("j2", None), b), "another job");
        assert_ne!(
            first,
            page_id(&job("j1", None), BucketId(4)),
            "another bucket"
        );
        // An empty cursor is not the start.
        assert_ne!(first, page_id(&job("j1", Some("")), b));
    }
}
