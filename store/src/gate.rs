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
//! Bucket ids are never reused and a bucket resolved before a restart
//! cannot be in flight after it, so the set of dead ids lives in memory
//! (8 bytes per bucket deleted since start). Buckets share 64 stripes, so a
//! DeleteBucket briefly delays commits of the buckets of its stripe only.

use crate::commit::Op;
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::multipart::MpOp;
use parking_lot::Mutex;
use std::collections::HashSet;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

const STRIPES: usize = 64;

/// The liveness gate of every bucket of a store.
pub struct BucketGate {
    stripes: Vec<RwLock<()>>,
    dead: Mutex<HashSet<BucketId>>,
}

impl Default for BucketGate {
    fn default() -> Self {
        BucketGate {
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            dead: Mutex::new(HashSet::new()),
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

    /// Undo [`BucketGate::bury`]: a cluster DeleteBucket sealed this node
    /// but another node still held objects, so the bucket lives on.
    pub fn revive(&self, bucket: BucketId) {
        self.dead.lock().remove(&bucket);
    }
}
