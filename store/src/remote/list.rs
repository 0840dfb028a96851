//! Listings across store nodes: LIST runs fetched from each partition's
//! leader, one call per leader for all the partitions it leads
//! ([`NodeRuns`], the [`RunSource`] of the k-way merge), and
//! ListMultipartUploads pages merged from every leader.

use super::RemoteStore;
use super::leaders::Target;
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, PartitionId};
use crate::list::run::{Run, RunRequest};
use crate::list::{ListQuery, RunSource};
use crate::node::proto::Call;
use crate::uploads::{UploadEntry, UploadPage};
use futures::future::BoxFuture;

/// The partitions of a cluster, grouped by the replica believed to lead
/// them: one round trip refills every cursor of that replica that runs
/// low. A fetch routes each partition by the leader cache as it is then
/// (a failover in the middle of a listing moves the partitions it hits).
pub(super) struct NodeRuns<'a> {
    store: &'a RemoteStore,
}

impl<'a> NodeRuns<'a> {
    pub(super) fn new(store: &'a RemoteStore) -> NodeRuns<'a> {
        NodeRuns { store }
    }
}

impl RunSource for NodeRuns<'_> {
    fn groups(&self) -> Vec<Vec<PartitionId>> {
        let map = self.store.map();
        let mut groups: Vec<(Option<crate::cluster::NodeId>, Vec<PartitionId>)> = Vec::new();
        for p in map.partitions() {
            let node = self.store.inner.leaders.get(&map, Target::Partition(p));
            match groups.iter_mut().find(|(n, _)| *n == node) {
                Some((_, ps)) => ps.push(p),
                None => groups.push((node, vec![p])),
            }
        }
        groups.into_iter().map(|(_, ps)| ps).collect()
    }

    fn fetch<'b>(
        &'b self,
        bucket: BucketId,
        q: &'b ListQuery,
        reqs: Vec<RunRequest>,
    ) -> BoxFuture<'b, StoreResult<Vec<Run>>> {
        Box::pin(async move {
            let order: Vec<PartitionId> = reqs.iter().map(|r| r.partition).collect();
            let make = |reqs: Vec<RunRequest>| Call::ListRuns {
                bucket,
                query: q.clone(),
                reqs,
            };
            let replies: Vec<(Vec<RunRequest>, Vec<Run>)> =
                self.store.fan_out(reqs, |r| r.partition, make).await?;
            let mut runs: Vec<(PartitionId, Run)> = Vec::with_capacity(order.len());
            for (asked, got) in replies {
                if asked.len() != got.len() {
                    return Err(StoreError::Engine(format!(
                        "a store node answered {} runs for {} requests",
                        got.len(),
                        asked.len()
                    )));
                }
                runs.extend(asked.iter().map(|r| r.partition).zip(got));
            }
            // In the order asked: one run per request.
            order
                .iter()
                .map(|p| {
                    let at = runs
                        .iter()
                        .position(|(q, _)| q == p)
                        .ok_or_else(|| StoreError::Engine(format!("no run came back for {p}")))?;
                    Ok(runs.swap_remove(at).1)
                })
                .collect()
        })
    }
}

/// What an upload entry sorts by: (key, upload id), a prefix by itself.
fn order(e: &UploadEntry) -> (&str, &str) {
    match e {
        UploadEntry::Upload(u) => (&u.key, &u.upload_id),
        UploadEntry::Prefix(p) => (p, ""),
    }
}

/// One page from each node's first `max` entries: the first `max` of
/// their union (a prefix that several nodes rolled up counts once).
pub(super) fn merge_upload_pages(pages: Vec<UploadPage>, max: usize) -> UploadPage {
    let mut truncated = pages.iter().any(|p| p.truncated);
    let mut all: Vec<UploadEntry> = pages.into_iter().flat_map(|p| p.entries).collect();
    all.sort_by(|a, b| order(a).cmp(&order(b)));
    all.dedup();
    if all.len() > max {
        all.truncate(max);
        truncated = true;
    }
    UploadPage {
        entries: all,
        truncated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multipart::UploadInfo;

    fn up(key: &str, id: &str) -> UploadEntry {
        UploadEntry::Upload(UploadInfo {
            key: key.into(),
            upload_id: id.into(),
            created_ms: 0,
            checksum: None,
        })
    }

    #[test]
    fn upload_pages_merge_in_key_order_with_prefixes_once() {
        let a = UploadPage {
            entries: vec![up("a", "2"), UploadEntry::Prefix("d/".into()), up("e", "1")],
            truncated: true,
        };
        let b = UploadPage {
            entries: vec![up("a", "1"), UploadEntry::Prefix("d/".into())],
            truncated: false,
        };
        let page = merge_upload_pages(vec![a, b], 3);
        assert_eq!(
            page.entries,
            vec![up("a", "1"), up("a", "2"), UploadEntry::Prefix("d/".into())]
        );
        assert!(page.truncated);
        let whole = merge_upload_pages(vec![page], 10);
        assert!(
            whole.truncated,
            "a truncated node page keeps the merge truncated"
        );
    }
}
