//! Where jobs are kept: catalog documents, changed by compare-and-swap, so
//! every gateway of a cluster sees the same jobs and a restart loses none.
//!
//! - `jobs/bucket/{bucket id}`: the jobs of one bucket, at most
//!   [`MAX_RUNNING_PER_BUCKET`] running and the last [`KEEP_FINISHED`]
//!   finished (older finished ones are dropped when a new job comes).
//! - `jobs/active`: the buckets that may have running jobs, which runners
//!   scan on start. A creator adds its bucket after writing the job; a
//!   runner that finds a bucket without running jobs removes it, then looks
//!   at the bucket again and puts it back if a job arrived meanwhile, so a
//!   running job is never left out of the list.

use super::spec::{Job, JobState};
use crate::request::error::{GwError, GwResult};
use laneway_store::{BucketId, StoreClient, StoreError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Most running jobs of one bucket.
pub const MAX_RUNNING_PER_BUCKET: usize = 8;
/// Finished jobs kept per bucket (answered by GET).
pub const KEEP_FINISHED: usize = 32;
/// Attempts of one compare-and-swap update.
const CAS_TRIES: usize = 32;
const ACTIVE: &str = "jobs/active";

fn bucket_doc(bucket: BucketId) -> String {
    format!("jobs/bucket/{}", bucket.0)
}

/// A bucket that may have running jobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveRef {
    /// Its tenant's id.
    pub tenant: String,
    /// Its name.
    pub bucket: String,
    /// Its id.
    pub bucket_id: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct BucketJobs {
    jobs: Vec<Job>,
}

#[derive(Default, Serialize, Deserialize)]
struct Active {
    buckets: Vec<ActiveRef>,
}

/// The jobs' documents.
#[derive(Clone)]
pub struct Book {
    store: Arc<dyn StoreClient>,
}

impl Book {
    /// Documents in `store`'s catalog.
    pub fn new(store: Arc<dyn StoreClient>) -> Book {
        Book { store }
    }

    async fn read<T: Default + DeserializeOwned>(&self, name: &str) -> GwResult<(u64, T)> {
        match self.store.catalog_doc(name).await? {
            None => Ok((0, T::default())),
            Some((v, bytes)) => serde_json::from_slice(&bytes)
                .map(|t| (v, t))
                .map_err(|e| GwError::Internal(format!("catalog document {name}: {e}"))),
        }
    }

    /// Change document `name` with `f` (which may refuse), retried on a
    /// lost swap; what `f` returned.
    async fn update<T, R>(
        &self,
        name: &str,
        mut f: impl FnMut(&mut T) -> GwResult<R>,
    ) -> GwResult<R>
    where
        T: Default + Serialize + DeserializeOwned,
    {
        for _ in 0..CAS_TRIES {
            let (version, mut doc) = self.read::<T>(name).await?;
            let out = f(&mut doc)?;
            let bytes = serde_json::to_vec(&doc).map_err(|e| GwError::Internal(e.to_string()))?;
            match self.store.put_catalog_doc(name, version, bytes).await {
                Ok(_) => return Ok(out),
                Err(StoreError::PreconditionFailed) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(GwError::SlowDown(
            "tagging jobs are being changed by many at once; retry",
        ))
    }

    /// Record a new job of `bucket` (refused when the bucket has too many running).
    pub async fn create(&self, r: &ActiveRef, job: Job) -> GwResult<()> {
        self.update(
            &bucket_doc(BucketId(r.bucket_id)),
            |doc: &mut BucketJobs| {
                let running = doc
                    .jobs
                    .iter()
                    .filter(|j| j.state == JobState::Running)
                    .count();
                if running >= MAX_RUNNING_PER_BUCKET {
                    return Err(GwError::InvalidRequest(format!(
                        "a bucket has at most {MAX_RUNNING_PER_BUCKET} running tagging jobs"
                    )));
                }
                drop_old_finished(&mut doc.jobs);
                doc.jobs.push(job.clone());
                Ok(())
            },
        )
        .await?;
        self.mark_active(r).await
    }

    async fn mark_active(&self, r: &ActiveRef) -> GwResult<()> {
        self.update(ACTIVE, |doc: &mut Active| {
            if !doc.buckets.contains(r) {
                doc.buckets.push(r.clone());
            }
            Ok(())
        })
        .await
    }

    /// The jobs of a bucket, oldest first.
    pub async fn jobs(&self, bucket: BucketId) -> GwResult<Vec<Job>> {
        Ok(self.read::<BucketJobs>(&bucket_doc(bucket)).await?.1.jobs)
    }

    /// Change job `id` of `bucket` with `f`; `None` when there is no such job.
    pub async fn modify<R>(
        &self,
        bucket: BucketId,
        id: &str,
        mut f: impl FnMut(&mut Job) -> R,
    ) -> GwResult<Option<R>> {
        self.update(&bucket_doc(bucket), |doc: &mut BucketJobs| {
            Ok(doc.jobs.iter_mut().find(|j| j.id == id).map(&mut f))
        })
        .await
    }

    /// The buckets that may have running jobs.
    pub async fn active(&self) -> GwResult<Vec<ActiveRef>> {
        Ok(self.read::<Active>(ACTIVE).await?.1.buckets)
    }

    /// Take `r` off the active list if its bucket has no running job.
    pub async fn retire(&self, r: &ActiveRef) -> GwResult<()> {
        let running = |jobs: &[Job]| jobs.iter().any(|j| j.state == JobState::Running);
        if running(&self.jobs(BucketId(r.bucket_id)).await?) {
            return Ok(());
        }
        self.update(ACTIVE, |doc: &mut Active| {
            doc.buckets.retain(|b| b != r);
            Ok(())
        })
        .await?;
        // A job created meanwhile may have found the bucket still listed.
        if running(&self.jobs(BucketId(r.bucket_id)).await?) {
            self.mark_active(r).await?;
        }
        Ok(())
    }
}

/// Drop the oldest finished jobs beyond [`KEEP_FINISHED`] - 1 (room for one more).
fn drop_old_finished(jobs: &mut Vec<Job>) {
    let finished = jobs.iter().filter(|j| j.state != JobState::Running).count();
    let mut extra = (finished + 1).saturating_sub(KEEP_FINISHED);
    jobs.retain(|j| {
        if extra > 0 && j.state != JobState::Running {
            extra -= 1;
            false
        } else {
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::spec::JobSpec;

    #[test]
    fn only_old_finished_jobs_are_dropped() {
        let mut jobs: Vec<Job> = (0..48)
            .map(|i| {
                let mut j = Job::new(format!("j{i}"), "b".into(), JobSpec::default(), i);
                if i % 4 != 0 {
                    j.finish(JobState::Done, i);
                }
                j
            })
            .collect();
        drop_old_finished(&mut jobs);
        let finished = jobs.iter().filter(|j| j.state != JobState::Running).count();
        assert_eq!(finished, KEEP_FINISHED - 1);
        assert_eq!(
            jobs.iter().filter(|j| j.state == JobState::Running).count(),
            12
        );
        assert!(
            !jobs.iter().any(|j| j.id == "j1"),
            "the oldest finished went first"
        );
    }
}
