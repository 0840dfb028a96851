//! Listings across store nodes: LIST runs fetched one node at a time for
//! all of its partitions ([`NodeRuns`], the [`RunSource`] of the k-way
//! merge), and ListMultipartUploads pages merged from every node.

use super::RemoteStore;
use crate::cluster::NodeId;
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, PartitionId};
use crate::list::run::{Run, RunRequest};
use crate::list::{ListQuery, RunSource};
use crate::node::proto::Call;
use crate::uploads::{UploadEntry, UploadPage};
use futures::future::BoxFuture;

/// The partitions of a cluster, grouped by the node that owns them: one
/// round trip refills every cursor of that node that runs low.
pub(super) struct NodeRuns<'a> {
    store: &'a RemoteStore,
    owners: Vec<(NodeId, Vec<PartitionId>)>,
}

impl<'a> NodeRuns<'a> {
    pub(super) fn new(store: &'a RemoteStore) -> NodeRuns<'a> {
        NodeRuns {
            store,
            owners: store.owners(),
        }
    }

    fn node_of(&self, p: PartitionId) -> StoreResult<&NodeId> {
        self.owners
            .iter()
            .find(|(_, ps)| ps.contains(&p))
            .map(|(n, _)| n)
            .ok_or_else(|| StoreError::Unavailable(format!("{p} has no node in the map")))
    }
}

impl RunSource for NodeRuns<'_> {
    fn groups(&self) -> Vec<Vec<PartitionId>> {
        self.owners.iter().map(|(_, ps)| ps.clone()).collect()
    }

    fn fetch<'b>(
        &'b self,
        bucket: BucketId,
        q: &'b ListQuery,
        reqs: Vec<RunRequest>,
    ) -> BoxFuture<'b, StoreResult<Vec<Run>>> {
        Box::pin(async move {
            let Some(first) = reqs.first() else {
                return Ok(Vec::new());
            };
            let node = self.node_of(first.partition)?.clone();
            let call = Call::ListRuns {
                bucket,
                query: q.clone(),
                reqs,
            };
            self.store.call_node(&node, call).await
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
