//! The k-way merge of partition runs into one page, over any
//! [`RunSource`]: the partitions of this process ([`LocalRuns`]) or,
//! later, the store nodes of a cluster.
//!
//! The merge keeps one cursor per partition: a buffer of its current run
//! and where its next run starts. A min-heap holds each non-empty cursor's
//! front entry. When the merge drains a cursor that has more, it asks the
//! cursor's group for a refill, and the group refills every one of its
//! cursors that runs low in the same call (for a store node: one round
//! trip for all of its partitions).

use super::run::{MIN_BATCH, Run, RunRequest, scan_run, start_key};
use super::{ListEntry, ListPage, ListQuery, Resume, entry_name};
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, PartitionId};
use crate::partition::Partition;
use futures::future::BoxFuture;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

/// Where the runs of a listing come from.
pub trait RunSource: Sync {
    /// The partitions, grouped by who answers for them; one
    /// [`RunSource::fetch`] serves one group.
    fn groups(&self) -> Vec<Vec<PartitionId>>;

    /// Answer `reqs` (all of one group) for `q` in `bucket`, one run per
    /// request, in order.
    fn fetch<'a>(
        &'a self,
        bucket: BucketId,
        q: &'a ListQuery,
        reqs: Vec<RunRequest>,
    ) -> BoxFuture<'a, StoreResult<Vec<Run>>>;
}

/// The partitions of this process, each its own group (a refill costs no
/// round trip, so only the drained cursor is read).
pub struct LocalRuns<'a> {
    /// The partitions, indexed by id.
    pub partitions: &'a [Arc<Partition>],
}

impl RunSource for LocalRuns<'_> {
    fn groups(&self) -> Vec<Vec<PartitionId>> {
        self.partitions.iter().map(|p| vec![p.id()]).collect()
    }

    fn fetch<'a>(
        &'a self,
        bucket: BucketId,
        q: &'a ListQuery,
        reqs: Vec<RunRequest>,
    ) -> BoxFuture<'a, StoreResult<Vec<Run>>> {
        let runs = reqs
            .into_iter()
            .map(|r| {
                let p = self
                    .partitions
                    .iter()
                    .find(|p| p.id() == r.partition)
                    .ok_or(StoreError::NotHosted(r.partition))?;
                let want = usize::try_from(r.want).unwrap_or(usize::MAX);
                scan_run(p.index(), bucket, q, r.from, want)
            })
            .collect();
        Box::pin(std::future::ready(runs))
    }
}

/// One page of the listing of `bucket` over all local `partitions` (runs
/// on the calling thread: the store calls it from a blocking task).
pub fn list(
    partitions: &[Arc<Partition>],
    bucket: BucketId,
    q: &ListQuery,
) -> StoreResult<ListPage> {
    futures::executor::block_on(merge(&LocalRuns { partitions }, bucket, q))
}

/// One partition's place in the merge.
struct Cursor {
    partition: PartitionId,
    group: usize,
    buf: VecDeque<ListEntry>,
    /// Where its next run starts; `None` when it has no more.
    next: Option<Vec<u8>>,
}

/// Cursors and the heap of their front entries.
struct Merge<'a> {
    source: &'a dyn RunSource,
    bucket: BucketId,
    q: &'a ListQuery,
    batch: usize,
    cursors: Vec<Cursor>,
    groups: Vec<Vec<usize>>,
    heap: BinaryHeap<Reverse<(String, usize)>>,
}

/// One page of the listing of `bucket` by `q`, from `source`.
pub async fn merge(
    source: &dyn RunSource,
    bucket: BucketId,
    q: &ListQuery,
) -> StoreResult<ListPage> {
    let Some(start) = start_key(bucket, q).filter(|_| q.max_keys > 0) else {
        return Ok(ListPage::default());
    };
    let mut m = Merge::new(source, bucket, q, start);
    for g in 0..m.groups.len() {
        m.refill(g, usize::MAX).await?;
    }
    let mut page = ListPage::default();
    let mut last_prefix: Option<String> = None;
    while let Some(entry) = m.pop().await? {
        if let ListEntry::Prefix(p) = &entry {
            if last_prefix.as_deref() == Some(p.as_str()) {
                continue; // the same prefix rolled up in another partition
            }
            last_prefix = Some(p.clone());
        }
        if page.entries.len() == q.max_keys {
            page.truncated = true;
            break;
        }
        page.entries.push(entry);
    }
    if page.truncated {
        page.next = page.entries.last().map(|e| match e {
            ListEntry::Object(o) => Resume::After(o.key.clone()),
            ListEntry::Prefix(p) => Resume::PastPrefix(p.clone()),
        });
    }
    Ok(page)
}

impl<'a> Merge<'a> {
    fn new(source: &'a dyn RunSource, bucket: BucketId, q: &'a ListQuery, start: Vec<u8>) -> Self {
        let mut cursors = Vec::new();
        let mut groups = Vec::new();
        for (g, parts) in source.groups().into_iter().enumerate() {
            let mut members = Vec::with_capacity(parts.len());
            for partition in parts {
                members.push(cursors.len());
                cursors.push(Cursor {
                    partition,
                    group: g,
                    buf: VecDeque::new(),
                    next: Some(start.clone()),
                });
            }
            groups.push(members);
        }
        let batch = (q.max_keys / cursors.len().max(1) + 2).max(MIN_BATCH);
        Merge {
            source,
            bucket,
            q,
            batch,
            cursors,
            groups,
            heap: BinaryHeap::new(),
        }
    }

    /// Refill, in one fetch, every cursor of group `g` that has more and
    /// holds fewer than `low` entries; queue the fronts of those that were
    /// empty.
    async fn refill(&mut self, g: usize, low: usize) -> StoreResult<()> {
        let mut members: Vec<usize> = self.groups[g]
            .iter()
            .copied()
            .filter(|&i| {
                let c = &self.cursors[i];
                c.next.is_some() && (c.buf.is_empty() || c.buf.len() < low)
            })
            .collect();
        // A filtered run may come back empty with more to read (it stopped
        // at its bound of rows examined): ask again until each cursor has
        // an entry or is done, or the merge would lose it.
        while !members.is_empty() {
            self.fetch_into(&members).await?;
            members.retain(|&i| {
                let c = &self.cursors[i];
                c.buf.is_empty() && c.next.is_some()
            });
        }
        Ok(())
    }

    /// One fetch of the next runs of `members` (all of one group).
    async fn fetch_into(&mut self, members: &[usize]) -> StoreResult<()> {
        let batch = self.batch;
        let reqs: Vec<RunRequest> = members
            .iter()
            .map(|&i| {
                let c = &mut self.cursors[i];
                RunRequest {
                    partition: c.partition,
                    from: c.next.take().unwrap_or_default(),
                    want: u32::try_from(batch.saturating_sub(c.buf.len()).max(1))
                        .unwrap_or(u32::MAX),
                }
            })
            .collect();
        let runs = self.source.fetch(self.bucket, self.q, reqs).await?;
        if runs.len() != members.len() {
            return Err(StoreError::Engine(
                "a list source answered the wrong number of runs".into(),
            ));
        }
        for (&i, run) in members.iter().zip(runs) {
            let c = &mut self.cursors[i];
            let was_empty = c.buf.is_empty();
            c.buf.extend(run.entries);
            c.next = run.next;
            if was_empty && let Some(e) = c.buf.front() {
                self.heap.push(Reverse((entry_name(e).to_string(), i)));
            }
        }
        Ok(())
    }

    /// The smallest entry of all cursors, refilling its cursor's group
    /// when the cursor drains.
    async fn pop(&mut self) -> StoreResult<Option<ListEntry>> {
        let Some(Reverse((_, i))) = self.heap.pop() else {
            return Ok(None);
        };
        let entry = self.cursors[i]
            .buf
            .pop_front()
            .ok_or_else(|| StoreError::Engine("list merge lost an entry".into()))?;
        let c = &self.cursors[i];
        if let Some(e) = c.buf.front() {
            self.heap.push(Reverse((entry_name(e).to_string(), i)));
        } else if c.next.is_some() {
            // Refill the drained cursor, and its group's others that are
            // down to a quarter of a batch (free when a group is one
            // partition; saves round trips when it is a node).
            let group = c.group;
            self.refill(group, self.batch / 4).await?;
        }
        Ok(Some(entry))
    }
}
