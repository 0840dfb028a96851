//! LIST across partitions: a streaming k-way merge.
//!
//! Each partition holds its share of a bucket's keys in key order. A page
//! is built by merging one cursor per partition through a min-heap. A
//! cursor reads small batches (about its share of the page) and is refilled
//! only when the merge drains it, so a page costs O(max_keys + partitions)
//! index reads whatever the bucket's size. With a delimiter, each cursor
//! rolls up keys into their common prefix and seeks past that prefix in its
//! own index (one seek, not one read per key under it); the merge drops the
//! copies of a prefix that several partitions roll up.

use crate::record::ObjectInfo;

/// Where a listing resumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resume {
    /// From the start of the prefix.
    Start,
    /// Keys strictly greater than this key (start-after, marker, or a
    /// continuation token that ended on an object).
    After(String),
    /// Past every key that begins with this common prefix (a continuation
    /// token that ended on a rolled-up prefix).
    PastPrefix(String),
}

/// A listing request.
#[derive(Clone, Debug)]
pub struct ListQuery {
    /// Only keys that start with this.
    pub prefix: String,
    /// Roll up keys at the first occurrence of this after the prefix.
    pub delimiter: Option<String>,
    /// Where to resume.
    pub resume: Resume,
    /// Entries (objects + common prefixes) per page, 0..=1000.
    pub max_keys: usize,
}

/// One listing entry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // a page holds at most 1000; boxing buys nothing
pub enum ListEntry {
    /// An object.
    Object(ObjectInfo),
    /// A rolled-up common prefix (ends with the delimiter).
    Prefix(String),
}

/// One page.
#[derive(Clone, Debug, Default)]
pub struct ListPage {
    /// Entries in key order.
    pub entries: Vec<ListEntry>,
    /// More entries follow.
    pub truncated: bool,
    /// Where the next page resumes (set when truncated).
    pub next: Option<Resume>,
}

use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::index::MetaIndex;
use crate::partition::Partition;
use crate::record::{ListSummary, object_key};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

/// Smallest batch asked of one partition.
const MIN_BATCH: usize = 16;
/// Index rows read per scan call inside a partition.
const SCAN_CHUNK: usize = 256;

/// The smallest byte string greater than every string that starts with `p`
/// (`None` when there is none: `p` is empty or all 0xFF).
pub fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// The smallest key greater than `k`.
fn key_after(k: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(k.len() + 1);
    a.extend_from_slice(k);
    a.push(0);
    a
}

/// The name an entry sorts and resumes by.
fn entry_name(e: &ListEntry) -> &str {
    match e {
        ListEntry::Object(o) => &o.key,
        ListEntry::Prefix(p) => p,
    }
}

/// Index key range `[start, end)` of a query in `bucket`.
fn key_range(bucket: BucketId, q: &ListQuery) -> (Vec<u8>, Vec<u8>) {
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

/// Reads one partition's share of a listing in batches, rolling up keys that
/// share a delimited prefix by seeking past them.
struct PartitionCursor<'a> {
    index: &'a dyn MetaIndex,
    bucket: BucketId,
    prefix_len: usize,
    delimiter: Option<&'a str>,
    /// Next index key to read; `None` when exhausted.
    next: Option<Vec<u8>>,
    end: Vec<u8>,
    buf: VecDeque<ListEntry>,
}

impl<'a> PartitionCursor<'a> {
    /// Read up to `want` more entries into the buffer.
    fn refill(&mut self, want: usize) -> StoreResult<()> {
        let mut got = 0;
        while got < want {
            let Some(from) = self.next.take() else {
                return Ok(());
            };
            let limit = (want - got).clamp(MIN_BATCH, SCAN_CHUNK);
            let rows = self.index.scan(&from, &self.end, limit)?;
            let exhausted = rows.len() < limit;
            let mut next = None;
            let mut stopped = false;
            for (k, v) in &rows {
                let (entry, skip) = self.entry_of(k, v)?;
                self.buf.push_back(entry);
                got += 1;
                if skip.is_some() || got >= want {
                    // Seek past a rolled-up prefix, or stop for now.
                    next = skip.or_else(|| Some(key_after(k)));
                    stopped = true;
                    break;
                }
            }
            if !stopped && !exhausted {
                next = rows.last().map(|(k, _)| key_after(k));
            }
            self.next = next.filter(|n| *n < self.end);
        }
        Ok(())
    }

    /// The listing entry for index row (k, v), and where to seek next when
    /// it rolled up into a common prefix.
    fn entry_of(&self, k: &[u8], v: &[u8]) -> StoreResult<(ListEntry, Option<Vec<u8>>)> {
        let key_bytes = crate::record::split_object_key(self.bucket, k)
            .ok_or_else(|| StoreError::Corrupt("listed key outside its bucket".into()))?;
        let key = std::str::from_utf8(key_bytes)
            .map_err(|_| StoreError::Corrupt("key is not UTF-8".into()))?;
        if let Some(d) = self.delimiter
            && let Some(pos) = key.get(self.prefix_len..).and_then(|rest| rest.find(d))
        {
            let cp = &key[..self.prefix_len + pos + d.len()];
            let skip = prefix_successor(&object_key(self.bucket, cp.as_bytes()));
            return Ok((
                ListEntry::Prefix(cp.to_string()),
                Some(skip.unwrap_or_else(|| self.end.clone())),
            ));
        }
        let s = ListSummary::decode(v)?;
        Ok((ListEntry::Object(s.info(key)), None))
    }
}

/// One page of the listing of `bucket` over all `partitions`.
///
/// Each partition is asked for a small batch (about its share of the page)
/// and refilled only when the merge drains it, so a page costs
/// O(max_keys + partitions) index reads whatever the bucket's size.
pub fn list(
    partitions: &[Arc<Partition>],
    bucket: BucketId,
    q: &ListQuery,
) -> StoreResult<ListPage> {
    if q.max_keys == 0 {
        return Ok(ListPage::default());
    }
    let (start, end) = key_range(bucket, q);
    let batch = (q.max_keys / partitions.len().max(1) + 2).max(MIN_BATCH);
    let mut cursors: Vec<PartitionCursor<'_>> = partitions
        .iter()
        .map(|p| PartitionCursor {
            index: p.index(),
            bucket,
            prefix_len: q.prefix.len(),
            delimiter: q.delimiter.as_deref().filter(|d| !d.is_empty()),
            next: (start < end).then(|| start.clone()),
            end: end.clone(),
            buf: VecDeque::new(),
        })
        .collect();
    let mut heap = BinaryHeap::new();
    for (i, c) in cursors.iter_mut().enumerate() {
        c.refill(batch)?;
        if let Some(e) = c.buf.front() {
            heap.push(Reverse((entry_name(e).to_string(), i)));
        }
    }
    let mut page = ListPage::default();
    let mut last_prefix: Option<String> = None;
    while let Some(Reverse((_, i))) = heap.pop() {
        let entry = next_entry(&mut cursors[i], &mut heap, i, batch)?;
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

/// Pop the front entry of cursor `i`, refilling it and re-queueing its next
/// entry in the heap.
fn next_entry(
    c: &mut PartitionCursor<'_>,
    heap: &mut BinaryHeap<Reverse<(String, usize)>>,
    i: usize,
    batch: usize,
) -> StoreResult<ListEntry> {
    let entry = c
        .buf
        .pop_front()
        .ok_or_else(|| StoreError::Engine("list merge lost an entry".into()))?;
    if c.buf.is_empty() {
        c.refill(batch)?;
    }
    if let Some(e) = c.buf.front() {
        heap.push(Reverse((entry_name(e).to_string(), i)));
    }
    Ok(entry)
}
