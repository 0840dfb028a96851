//! Bucket liveness at commit time: no object, upload or part can commit
//! into a bucket that DeleteBucket has removed.
//!
//! A write resolves its bucket when it starts and commits later (after its
//! body has streamed). Without a gate, DeleteBucket could check that the
//! bucket is empty and remove it in between, and the write would then
//! commit into a dead bucket id: stored, uncounted, unreachable. So every
//! commit that adds to a bucket ([`adds_to`]) holds a shared lock of the
//! bucket's stripe while it checks the bucket is alive and commits; and
//! DeleteBucket holds the exclusive lock while it checks emptiness, removes
//! the bucket and marks its id dead. Either the write commits first (and
//! DeleteBucket sees it: BucketNotEmpty) or it commits after and fails
//! NoSuchBucket. Only the commit is gated, never a body still streaming
//! from a client.
//!
//! Bucket ids are never reused. On a single node a bucket resolved before
//! a restart cannot be in flight after it, so its dead ids live in memory
//! (8 bytes per bucket deleted since start). A cluster node's seals
//! ([`BucketGate::seal`]) are also written to the data directory and read
//! back at the next start ([`crate::seals`]): the gateways that resolve
//! buckets are other processes, which outlive the node's restart. A
//! replicated partition is sealed by a row of its group instead
//! ([`crate::seal_rows`]), which every replica that leads it later has;
//! the gate then only holds the seals of partitions without one. Buckets
//! share 64 stripes, so a DeleteBucket briefly delays commits of the
//! buckets of its stripe only.

use crate::commit::Op;
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::multipart::MpOp;
use crate::seals::SealFile;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::Path;
use std::time::SystemTime;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

const STRIPES: usize = 64;

/// The liveness gate of every bucket of a store.
pub struct BucketGate {
    stripes: Vec<RwLock<()>>,
    dead: Mutex<HashSet<BucketId>>,
    /// Where seals are kept across restarts (`None`: in memory only).
    seals: Option<SealFile>,
}

impl Default for BucketGate {
    fn default() -> Self {
        BucketGate {
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            dead: Mutex::new(HashSet::new()),
            seals: None,
        }
    }
}

/// The bucket an op adds objects, uploads or parts to (gated), if any.
/// Deletes, tag and metadata updates, aborts and compaction are not: they
/// add nothing, and the sweep must still abort uploads of dead buckets.
pub fn adds_to(op: &Op) -> Option<BucketId> {
    match op {
        Op::Put { bucket, .. } => Some(*bucket),
        Op::Multipart(
            MpOp::Create { bucket, .. }
            | MpOp::PutPart { bucket, .. }
            | MpOp::Complete { bucket, .. },
        ) => Some(*bucket),
        _ => None,
    }
}

impl BucketGate {
    fn stripe(&self, bucket: BucketId) -> &RwLock<()> {
        let i = usize::try_from(bucket.0 % STRIPES as u64).unwrap_or(0);
        &self.stripes[i]
    }

    /// Enter to commit into `bucket`: NoSuchBucket if it has been deleted.
    /// Hold the guard until the commit is durable.
    pub async fn enter(&self, bucket: BucketId) -> StoreResult<RwLockReadGuard<'_, ()>> {
        let guard = self.stripe(bucket).read().await;
        if self.dead.lock().contains(&bucket) {
            return Err(StoreError::NoSuchBucket);
        }
        Ok(guard)
    }

    /// Exclusive hold of `bucket` for DeleteBucket: every commit into it
    /// that entered has finished, and none enters until the guard drops.
    pub async fn exclusive(&self, bucket: BucketId) -> RwLockWriteGuard<'_, ()> {
        self.stripe(bucket).write().await
    }

    /// Mark `bucket` deleted (under [`BucketGate::exclusive`]).
    pub fn bury(&self, bucket: BucketId) {
        self.dead.lock().insert(bucket);
    }

    /// A cluster node's [`BucketGate::bury`] (under
    /// [`BucketGate::exclusive`]): the seal is written to the seal file
    /// first, so a restart within [`crate::seals::SEAL_KEEP`] keeps it.
    pub fn seal(&self, bucket: BucketId) -> StoreResult<()> {
        if let Some(seals) = &self.seals {
            seals.record(bucket, SystemTime::now())?;
        }
        self.bury(bucket);
        Ok(())
    }

    /// Undo [`BucketGate::bury`] or [`BucketGate::seal`]: a cluster
    /// DeleteBucket sealed this node but another node still held objects,
    /// so the bucket lives on. A seal file that cannot be rewritten keeps
    /// the seal for a restart within its keep (logged).
    pub fn revive(&self, bucket: BucketId) {
        self.dead.lock().remove(&bucket);
        if let Some(seals) = &self.seals
            && let Err(e) = seals.forget(bucket)
        {
            tracing::warn!(bucket = bucket.0, error = %e,
                "could not remove a revived bucket's seal from the seal file; a restart soon would refuse writes into it on this node until the seal is old");
        }
    }

    /// The gate of the store in `dir`, with the seals its seal file kept
    /// ([`crate::seals`]).
    pub fn open(dir: &Path) -> StoreResult<BucketGate> {
        let (file, live) = SealFile::open(dir, SystemTime::now())?;
        let gate = BucketGate {
            seals: Some(file),
            ..BucketGate::default()
        };
        for bucket in live {
            gate.bury(bucket);
        }
        Ok(gate)
    }
}
