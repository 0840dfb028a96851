//! The quota desk's writer of hold rows (`crate::node::desk`): the rows
//! that reservations add and releases delete, committed through the
//! catalog's group in batches, so the writes of many tenants' PUTs in
//! flight share one entry of the group instead of one each.
//!
//! One task takes the queued changes: it waits for one, takes what else
//! is queued (up to [`MAX_BATCH`]), commits them as one batch and answers
//! each with the batch's outcome. While a batch commits, the next one
//! gathers. A delete waits up to [`DELETE_GATHER`] for a row to write,
//! so a tenant's releases cost no commit of their own while its writes
//! go on: a release frees its room in the desk's table at once, and only
//! its sender (in the background) waits for the row. The queue is bounded ([`QUEUE`]): a desk whose commits fall
//! behind makes its callers wait for room, which they do under their
//! calls' deadlines. The task holds the store only while a batch commits,
//! so a closed node's store is not kept open; it ends with its writer.

use crate::error::{StoreError, StoreResult};
use crate::quota::rows::HoldRow;
use crate::store::Store;
use std::sync::{Arc, Weak};
use tokio::sync::{mpsc, oneshot};

/// Changes queued for the task, at most.
pub const QUEUE: usize = 8192;

/// Changes taken off the queue at once, at most (a batch holds at most
/// this many deletes, and this many rows to write).
pub const MAX_BATCH: usize = 1024;

/// Longest a delete waits for a row to write, to ride along with it.
pub const DELETE_GATHER: std::time::Duration = std::time::Duration::from_millis(20);

/// One change and who waits for its outcome.
struct Change {
    row: Row,
    done: oneshot::Sender<StoreResult<()>>,
}

/// A hold row to write or delete.
enum Row {
    Put(u64, HoldRow),
    Delete(u64),
}

/// The sending side; the task runs until it is dropped.
pub struct HoldRows {
    tx: mpsc::Sender<Change>,
}

impl HoldRows {
    /// A writer committing to `store`'s catalog, its task spawned on the
    /// current runtime.
    pub fn start(store: &Arc<Store>) -> HoldRows {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(Arc::downgrade(store), rx));
        HoldRows { tx }
    }

    /// Write hold `id`'s row; done once it committed.
    pub async fn put(&self, id: u64, row: HoldRow) -> StoreResult<()> {
        self.send(Row::Put(id, row)).await
    }

    /// Delete hold `id`'s row; done once the delete committed.
    pub async fn delete(&self, id: u64) -> StoreResult<()> {
        self.send(Row::Delete(id)).await
    }

    async fn send(&self, row: Row) -> StoreResult<()> {
        let (done, outcome) = oneshot::channel();
        self.tx
            .send(Change { row, done })
            .await
            .map_err(|_| StoreError::ShuttingDown)?;
        outcome.await.map_err(|_| StoreError::ShuttingDown)?
    }
}

/// The task: a batch at a time, until the writer is dropped. A batch is
/// committed as soon as it holds a row to write (a reservation waits for
/// it); deletes (releases, which nobody's response waits for) ride along
/// with the next one, or go by themselves once the oldest has waited
/// [`DELETE_GATHER`].
async fn run(store: Weak<Store>, mut rx: mpsc::Receiver<Change>) {
    let mut got = Vec::with_capacity(MAX_BATCH);
    let mut deletes: Vec<Change> = Vec::new();
    let mut flush_at = tokio::time::Instant::now();
    loop {
        let (open, due) = if deletes.is_empty() {
            (rx.recv_many(&mut got, MAX_BATCH).await > 0, false)
        } else {
            tokio::select! {
                n = rx.recv_many(&mut got, MAX_BATCH) => (n > 0, false),
                _ = tokio::time::sleep_until(flush_at) => (true, true),
            }
        };
        if !open && deletes.is_empty() {
            return;
        }
        let (mut changes, more): (Vec<Change>, Vec<Change>) =
            got.drain(..).partition(|c| matches!(c.row, Row::Put(..)));
        if deletes.is_empty() && !more.is_empty() {
            flush_at = tokio::time::Instant::now() + DELETE_GATHER;
        }
        deletes.extend(more);
        if changes.is_empty() && open && !due && deletes.len() < MAX_BATCH {
            continue;
        }
        changes.append(&mut deletes);
        let outcome = commit(&store, &changes).await;
        for c in changes {
            // A caller that stopped waiting has nothing to be told.
            let _ = c.done.send(outcome.as_ref().map(|_| ()).map_err(shared));
        }
        if !open {
            return;
        }
    }
}

/// Commit `changes` as one batch of the catalog.
async fn commit(store: &Weak<Store>, changes: &[Change]) -> StoreResult<()> {
    let mut puts = Vec::new();
    let mut deletes = Vec::new();
    for c in changes {
        match &c.row {
            Row::Put(id, row) => puts.push((*id, row.clone())),
            Row::Delete(id) => deletes.push(*id),
        }
    }
    let store = store.upgrade().ok_or(StoreError::ShuttingDown)?;
    super::desk::blocking(move || store.write_quota_holds(&puts, &deletes)).await
}

/// A batch's failure as each of its callers gets it: who leads, when that
/// is the reason (so the caller's sender goes there), else unavailable.
fn shared(e: &StoreError) -> StoreError {
    match e {
        StoreError::NotLeader(leader) => StoreError::NotLeader(*leader),
        StoreError::ShuttingDown => StoreError::ShuttingDown,
        other => StoreError::Unavailable(format!("quota hold rows: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Inflight;

    fn row(bytes: u64) -> HoldRow {
        HoldRow {
            tenant: crate::ids::TenantId("t".into()),
            amount: Inflight {
                bytes,
                objects: 1,
                uploads: 0,
            },
            made_ms: 1,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_changes_all_commit_and_the_store_is_not_kept_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), crate::StoreConfig::default()).expect("store");
        let rows = Arc::new(HoldRows::start(&store));
        let puts = (0..200u64).map(|id| {
            let rows = Arc::clone(&rows);
            async move { rows.put(id, row(id)).await }
        });
        for r in futures::future::join_all(puts).await {
            r.expect("put");
        }
        let held = store.quota_holds().expect("rows");
        assert_eq!(held.len(), 200);
        assert!(held.iter().all(|(id, r)| r.amount.bytes == *id));
        let deletes = (0..200u64).filter(|id| id % 2 == 0).map(|id| {
            let rows = Arc::clone(&rows);
            async move { rows.delete(id).await }
        });
        for r in futures::future::join_all(deletes).await {
            r.expect("delete");
        }
        let left: Vec<u64> = store
            .quota_holds()
            .expect("rows")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(
            left,
            (0..200u64).filter(|id| id % 2 == 1).collect::<Vec<_>>()
        );
        // The task holds no reference of its own between batches.
        let weak = Arc::downgrade(&store);
        store.shutdown();
        drop(store);
        assert!(weak.upgrade().is_none(), "the writer kept the store open");
        assert!(matches!(
            rows.put(1000, row(1)).await,
            Err(StoreError::ShuttingDown)
        ));
    }
}
