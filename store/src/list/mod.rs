//! LIST across partitions: a streaming k-way merge.
//!
//! Each partition holds its share of a bucket's keys in key order. A page
//! is built by merging one cursor per partition through a min-heap
//! ([`merge`]). A cursor holds a small batch of its partition's entries (a
//! run, about its share of the page, read by [`run::scan_run`]) and is
//! refilled only when the merge drains it, so a page costs
//! O(max_keys + partitions) index reads whatever the bucket's size. With a
//! delimiter, each run rolls up keys into their common prefix and seeks
//! past that prefix in its own index (one seek, not one read per key under
//! it); the merge drops the copies of a prefix that several partitions roll
//! up.
//!
//! A tag filter changes only which rows a run reads: the tag index keeps
//! the objects of one tag as an ordered range of keys
//! ([`crate::tagindex`]), so paging, delimiters and continuation work on
//! it exactly as on the object records.
//!
//! Runs come from a [`merge::RunSource`], which groups partitions by who
//! answers for them: in one process every partition is its own group (a
//! refill costs no round trip, so only the drained cursor is read); across
//! store nodes a group is a node, and one call refills every cursor of
//! that node that runs low, so a page costs a few round trips per node.

pub mod merge;
pub mod run;

pub use merge::{LocalRuns, RunSource, list, merge};
pub use run::{Run, RunRequest, scan_run};

use crate::record::ObjectInfo;
use serde::{Deserialize, Serialize};

/// Where a listing resumes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ListQuery {
    /// Only keys that start with this.
    pub prefix: String,
    /// Roll up keys at the first occurrence of this after the prefix.
    pub delimiter: Option<String>,
    /// Where to resume.
    pub resume: Resume,
    /// Entries (objects + common prefixes) per page, 0..=1000.
    pub max_keys: usize,
    /// Only objects whose tags meet every condition (empty: all objects).
    /// The listing then reads the tag index rows of one condition
    /// ([`crate::tagindex::driver`]) instead of the object records, and
    /// checks the others on each row.
    pub tags: Vec<crate::tagindex::TagCond>,
}

/// One listing entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)] // a page holds at most 1000; boxing buys nothing
pub enum ListEntry {
    /// An object.
    Object(ObjectInfo),
    /// A rolled-up common prefix (ends with the delimiter).
    Prefix(String),
}

/// One page.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ListPage {
    /// Entries in key order.
    pub entries: Vec<ListEntry>,
    /// More entries follow.
    pub truncated: bool,
    /// Where the next page resumes (set when truncated).
    pub next: Option<Resume>,
}

/// The name an entry sorts and resumes by.
pub(crate) fn entry_name(e: &ListEntry) -> &str {
    match e {
        ListEntry::Object(o) => &o.key,
        ListEntry::Prefix(p) => p,
    }
}

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
