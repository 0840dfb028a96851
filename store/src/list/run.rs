//! One partition's share of a listing, a run at a time: [`scan_run`] reads
//! up to `want` entries from an index position, rolling up keys that share
//! a delimited prefix by seeking past them, and says where the next run
//! starts. A run and its cursor are plain data, so a store node can answer
//! them for a gateway's merge as well as for its own.

use super::{ListEntry, ListQuery, Resume, prefix_successor};
use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, PartitionId};
use crate::index::MetaIndex;
use crate::record::{ListSummary, object_key};
use serde::{Deserialize, Serialize};

/// Smallest run asked of one partition.
pub const MIN_BATCH: usize = 16;
/// Index rows read per scan call inside a partition.
const SCAN_CHUNK: usize = 256;

/// Ask partition `partition` for up to `want` entries from index key `from`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The partition.
    pub partition: PartitionId,
    /// The index key to read from (a run's `next`, or [`start_key`]).
    #[serde(with = "serde_bytes")]
    pub from: Vec<u8>,
    /// Entries wanted.
    pub want: u32,
}

/// Entries of one partition in key order, and where the next run starts
/// (`None`: the partition has no more).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The entries.
    pub entries: Vec<ListEntry>,
    /// The next run's `from`.
    #[serde(with = "serde_bytes")]
    pub next: Option<Vec<u8>>,
}

/// The smallest key greater than `k`.
fn key_after(k: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(k.len() + 1);
    a.extend_from_slice(k);
    a.push(0);
    a
}

/// Index key range `[start, end)` of a query in `bucket`.
pub(crate) fn key_range(bucket: BucketId, q: &ListQuery) -> (Vec<u8>, Vec<u8>) {
    let prefix_start = object_key(bucket, q.prefix.as_bytes());
    // The tag byte precedes the bucket id, so the successor always exists.
    let end = prefix_successor(&prefix_start).unwrap_or_default();
    let resume = match &q.resume {
        Resume::Start => None,
        Resume::After(k) => {
            let mut s = object_key(bucket, k.as_bytes());
            s.push(0);
            Some(s)
        }
        Resume::PastPrefix(p) => prefix_successor(&object_key(bucket, p.as_bytes())),
    };
    let start = resume.map_or(prefix_start.clone(), |r| r.max(prefix_start));
    (start, end)
}

/// Where every partition's first run of `q` starts (`None`: the query's
/// range is empty).
pub fn start_key(bucket: BucketId, q: &ListQuery) -> Option<Vec<u8>> {
    let (start, end) = key_range(bucket, q);
    (start < end).then_some(start)
}

/// Read up to `want` entries of `q` in `bucket` from `index`, starting at
/// index key `from`.
pub fn scan_run(
    index: &dyn MetaIndex,
    bucket: BucketId,
    q: &ListQuery,
    from: Vec<u8>,
    want: usize,
) -> StoreResult<Run> {
    let (_, end) = key_range(bucket, q);
    let delimiter = q.delimiter.as_deref().filter(|d| !d.is_empty());
    let mut run = Run::default();
    let mut next = (from < end).then_some(from);
    while run.entries.len() < want {
        let Some(from) = next.take() else { break };
        let limit = (want - run.entries.len()).clamp(MIN_BATCH, SCAN_CHUNK);
        let rows = index.scan(&from, &end, limit)?;
        let exhausted = rows.len() < limit;
        let mut stopped = false;
        for (k, v) in &rows {
            let (entry, skip) = entry_of(bucket, q.prefix.len(), delimiter, &end, k, v)?;
            run.entries.push(entry);
            if skip.is_some() || run.entries.len() >= want {
                // Seek past a rolled-up prefix, or stop for now.
                next = skip.or_else(|| Some(key_after(k)));
                stopped = true;
                break;
            }
        }
        if !stopped && !exhausted {
            next = rows.last().map(|(k, _)| key_after(k));
        }
        next = next.filter(|n| *n < end);
    }
    run.next = next;
    Ok(run)
}

/// The listing entry for index row (k, v), and where to seek next when it
/// rolled up into a common prefix.
fn entry_of(
    bucket: BucketId,
    prefix_len: usize,
    delimiter: Option<&str>,
    end: &[u8],
    k: &[u8],
    v: &[u8],
) -> StoreResult<(ListEntry, Option<Vec<u8>>)> {
    let key_bytes = crate::record::split_object_key(bucket, k)
        .ok_or_else(|| StoreError::Corrupt("listed key outside its bucket".into()))?;
    let key = std::str::from_utf8(key_bytes)
        .map_err(|_| StoreError::Corrupt("key is not UTF-8".into()))?;
    if let Some(d) = delimiter
        && let Some(pos) = key.get(prefix_len..).and_then(|rest| rest.find(d))
    {
        let cp = &key[..prefix_len + pos + d.len()];
        let skip = prefix_successor(&object_key(bucket, cp.as_bytes()));
        return Ok((
            ListEntry::Prefix(cp.to_string()),
            Some(skip.unwrap_or_else(|| end.to_vec())),
        ));
    }
    let s = ListSummary::decode(v)?;
    Ok((ListEntry::Object(s.info(key)), None))
}
