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
use crate::tagindex::{TagCond, driver, row_matches};
use serde::{Deserialize, Serialize};

/// Smallest run asked of one partition.
pub const MIN_BATCH: usize = 16;
/// Index rows read per scan call inside a partition.
const SCAN_CHUNK: usize = 256;
/// Most rows one run examines (a filtered run skips rows that fail the
/// filter's other conditions): a run that reaches it answers what it has,
/// perhaps nothing, with where to go on, so one call stays short however
/// sparse the matches are.
const MAX_EXAMINED: usize = 8192;

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

/// The rows a query reads in `bucket`: object records, or with a tag
/// filter the rows of its driving condition; the object key follows this
/// prefix in every row.
pub(crate) fn row_base(bucket: BucketId, q: &ListQuery) -> Vec<u8> {
    match driver(&q.tags) {
        Some(c) => c.row_prefix(bucket),
        None => object_key(bucket, b""),
    }
}

fn row_key(base: &[u8], key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(base.len() + key.len() + 1);
    k.extend_from_slice(base);
    k.extend_from_slice(key.as_bytes());
    k
}

/// Index key range `[start, end)` of a query in `bucket`.
pub(crate) fn key_range(bucket: BucketId, q: &ListQuery) -> (Vec<u8>, Vec<u8>) {
    let base = row_base(bucket, q);
    let prefix_start = row_key(&base, &q.prefix);
    // Every base starts with a tag byte below 0xFF, so the successor exists.
    let end = prefix_successor(&prefix_start).unwrap_or_default();
    let resume = match &q.resume {
        Resume::Start => None,
        Resume::After(k) => Some(key_after(&row_key(&base, k))),
        Resume::PastPrefix(p) => prefix_successor(&row_key(&base, p)),
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
    let rows = Rows {
        base: row_base(bucket, q),
        prefix_len: q.prefix.len(),
        delimiter: q.delimiter.as_deref().filter(|d| !d.is_empty()),
        filter: &q.tags,
        end: &end,
    };
    let mut run = Run::default();
    let mut next = (from < end).then_some(from);
    let mut examined = 0usize;
    // The last row read, kept in one buffer (rows are lent, not copied).
    let mut last: Vec<u8> = Vec::new();
    while run.entries.len() < want && examined < MAX_EXAMINED {
        let Some(from) = next.take() else { break };
        let limit = (want - run.entries.len()).clamp(MIN_BATCH, SCAN_CHUNK);
        let mut read = 0usize;
        let mut stopped = false;
        index.scan_each(&from, &end, limit, &mut |k, v| {
            read += 1;
            last.clear();
            last.extend_from_slice(k);
            let Some((entry, skip)) = rows.entry(k, v)? else {
                return Ok(true); // fails another condition of the filter
            };
            run.entries.push(entry);
            if skip.is_some() || run.entries.len() >= want {
                // Seek past a rolled-up prefix, or stop for now.
                next = skip.or_else(|| Some(key_after(k)));
                stopped = true;
                return Ok(false);
            }
            Ok(true)
        })?;
        examined += read;
        if !stopped && read == limit {
            next = Some(key_after(&last));
        }
        next = next.filter(|n| *n < end);
    }
    run.next = next;
    Ok(run)
}

/// How a run turns index rows into entries.
struct Rows<'a> {
    base: Vec<u8>,
    prefix_len: usize,
    delimiter: Option<&'a str>,
    filter: &'a [TagCond],
    end: &'a [u8],
}

impl Rows<'_> {
    /// The entry of index row (k, v) and where to seek next when it rolled
    /// up into a common prefix; `None` when the row fails the filter.
    fn entry(&self, k: &[u8], v: &[u8]) -> StoreResult<Option<(ListEntry, Option<Vec<u8>>)>> {
        if self.filter.len() > 1 && !row_matches(self.filter, v)? {
            return Ok(None);
        }
        let key_bytes = k
            .strip_prefix(self.base.as_slice())
            .ok_or_else(|| StoreError::Corrupt("listed key outside its range".into()))?;
        let key = std::str::from_utf8(key_bytes)
            .map_err(|_| StoreError::Corrupt("key is not UTF-8".into()))?;
        if let Some(d) = self.delimiter
            && let Some(pos) = key.get(self.prefix_len..).and_then(|rest| rest.find(d))
        {
            let cp = &key[..self.prefix_len + pos + d.len()];
            let skip = prefix_successor(&row_key(&self.base, cp));
            return Ok(Some((
                ListEntry::Prefix(cp.to_string()),
                Some(skip.unwrap_or_else(|| self.end.to_vec())),
            )));
        }
        let s = ListSummary::decode(v)?;
        Ok(Some((ListEntry::Object(s.info(key)), None)))
    }
}
