//! The tag index of a partition: rows that find objects by tag, kept in
//! the same commit batch as the object records they describe.
//!
//! Two kinds of row per tag of an object, both ending with the object key
//! so that one (bucket, tag) is an ordered range of object keys, and a
//! listing by tag is the same range scan as a plain listing (prefix,
//! start-after, delimiter and continuation all work unchanged):
//!
//! - pair rows `b't' | bucket (u64 BE) | len(key) u16 BE | key | len(value) u16 BE | value | object key`
//!   answer `key=value`;
//! - key rows `b'k' | bucket (u64 BE) | len(key) u16 BE | key | object key`
//!   answer "the tag `key` exists".
//!
//! The value of both is `FORMAT_V2 | bincode(size, md5, mtime, parts, tags)`:
//! its leading fields are those of an object record, so a page decodes
//! rows with [`crate::record::ListSummary`] exactly as it decodes object
//! records, and the trailing tag set lets a filter of several conditions
//! check the others without reading the object record.
//!
//! Every change of an object record goes through [`reindex`], which the
//! commit round calls with the old and new record: rows of tags that went
//! away are deleted, rows of tags that are new (or whose object's listing
//! fields changed) are written, all in the round's one batch, so after a
//! crash the index and the records are either both before or both after.
//! A data dir written before the tag index existed is indexed once when a
//! partition opens ([`backfill`]); a marker row says it is done.

use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::index::{MetaIndex, WriteBatch};
use crate::record::{FORMAT_V2, OBJECT_TAG, StoredObject, Tag};
use serde::{Deserialize, Serialize};

/// Key-space tag of tag pair rows.
pub const PAIR_TAG: u8 = b't';
/// Key-space tag of tag key rows.
pub const KEY_TAG: u8 = b'k';
/// Row that says the partition's tag index is complete (format 1).
const MARKER: &[u8] = b"zindex.tags.v1";
/// Object records read per backfill batch.
const BACKFILL_CHUNK: usize = 1024;

/// One condition of a tag filter.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TagCond {
    /// The tag key.
    pub key: String,
    /// The value it must have; `None`: any value (the tag exists).
    pub value: Option<String>,
}

impl TagCond {
    /// Whether a tag set satisfies this condition.
    pub fn matches(&self, tags: &[Tag]) -> bool {
        tags.iter()
            .any(|t| t.key == self.key && self.value.as_ref().is_none_or(|v| *v == t.value))
    }

    /// The row prefix of this condition's rows in `bucket` (the object key
    /// follows it).
    pub fn row_prefix(&self, bucket: BucketId) -> Vec<u8> {
        match &self.value {
            Some(v) => pair_prefix(bucket, &self.key, v),
            None => key_prefix(bucket, &self.key),
        }
    }
}

/// A change of tag sets that bulk tagging applies to many objects: only
/// to objects whose tags meet `filter`, it sets the tags of `set`
/// (replacing a value under the same key) and removes the keys of
/// `remove`. Applying it twice is applying it once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagEdit {
    /// Conditions an object's tags must meet (empty: every object).
    pub filter: Vec<TagCond>,
    /// Tags to set.
    pub set: Vec<Tag>,
    /// Tag keys to remove.
    pub remove: Vec<String>,
}

/// Most tags an object may have after an edit.
pub const MAX_OBJECT_TAGS: usize = 10;

/// What an edit did to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Edited {
    /// No such object, or its tags do not meet the filter.
    Skipped,
    /// It met the filter and already had the edit's tags.
    Unchanged,
    /// Its tags changed.
    Changed,
    /// The edit would give it more than [`MAX_OBJECT_TAGS`] tags; left as it was.
    TooManyTags,
}

impl TagEdit {
    /// The tag set `tags` becomes, or `None` when the filter does not
    /// match.
    pub fn apply(&self, tags: &[Tag]) -> Option<Vec<Tag>> {
        if !matches_all(&self.filter, tags) {
            return None;
        }
        let mut out: Vec<Tag> = tags
            .iter()
            .filter(|t| !self.remove.contains(&t.key))
            .cloned()
            .collect();
        for t in &self.set {
            match out.iter_mut().find(|o| o.key == t.key) {
                Some(o) => o.value.clone_from(&t.value),
                None => out.push(t.clone()),
            }
        }
        Some(out)
    }
}

/// How many objects of an edit ended which way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditCounts {
    /// Objects that met the filter.
    pub matched: u64,
    /// Objects whose tags changed.
    pub changed: u64,
    /// Objects left as they were because the edit gave them too many tags.
    pub too_many_tags: u64,
}

impl EditCounts {
    /// Count one object's outcome.
    pub fn add(&mut self, e: Edited) {
        match e {
            Edited::Skipped => {}
            Edited::Unchanged => self.matched += 1,
            Edited::Changed => {
                self.matched += 1;
                self.changed += 1;
            }
            Edited::TooManyTags => {
                self.matched += 1;
                self.too_many_tags += 1;
            }
        }
    }

    /// The sum of two counts.
    pub fn plus(self, o: EditCounts) -> EditCounts {
        EditCounts {
            matched: self.matched + o.matched,
            changed: self.changed + o.changed,
            too_many_tags: self.too_many_tags + o.too_many_tags,
        }
    }
}

/// The condition a filtered listing scans (the others are checked on each
/// row it finds): the first `key=value`, else the first `key`. A pair's
/// rows are never more than its key's, so a pair drives when there is one.
pub fn driver(filter: &[TagCond]) -> Option<&TagCond> {
    filter
        .iter()
        .find(|c| c.value.is_some())
        .or_else(|| filter.first())
}

/// Whether a tag set satisfies every condition.
pub fn matches_all(filter: &[TagCond], tags: &[Tag]) -> bool {
    filter.iter().all(|c| c.matches(tags))
}

fn push_str16(out: &mut Vec<u8>, s: &str) {
    // Tag keys are at most 128 and values 256 characters (the gateway
    // checks), far below the 65,535 bytes a length can say.
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..usize::from(len)]);
}

/// Row prefix of the objects of `bucket` tagged `key=value`.
pub fn pair_prefix(bucket: BucketId, key: &str, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(13 + key.len() + value.len());
    k.push(PAIR_TAG);
    k.extend_from_slice(&bucket.0.to_be_bytes());
    push_str16(&mut k, key);
    push_str16(&mut k, value);
    k
}

/// Row prefix of the objects of `bucket` that have the tag `key`.
pub fn key_prefix(bucket: BucketId, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(11 + key.len());
    k.push(KEY_TAG);
    k.extend_from_slice(&bucket.0.to_be_bytes());
    push_str16(&mut k, key);
    k
}

/// What a tag row holds: the object's listing fields and its tag set.
#[derive(Serialize, Deserialize)]
struct RowValue<'a> {
    size: u64,
    md5: [u8; 16],
    mtime_ms: i64,
    parts: u32,
    #[serde(borrow)]
    tags: Vec<TagRef<'a>>,
}

#[derive(Serialize, Deserialize)]
struct TagRef<'a> {
    key: &'a str,
    value: &'a str,
}

/// Encode the value of every tag row of `rec`.
fn row_value(rec: &StoredObject) -> Vec<u8> {
    let v = RowValue {
        size: rec.size,
        md5: rec.md5,
        mtime_ms: rec.mtime_ms,
        parts: rec.parts,
        tags: rec
            .tags
            .iter()
            .map(|t| TagRef {
                key: &t.key,
                value: &t.value,
            })
            .collect(),
    };
    let mut out = vec![FORMAT_V2];
    if let Err(e) = bincode::serialize_into(&mut out, &v) {
        unreachable!("bincode of a plain struct into a Vec failed: {e}");
    }
    out
}

/// Whether the tag set stored in a tag row satisfies every condition.
pub fn row_matches(filter: &[TagCond], value: &[u8]) -> StoreResult<bool> {
    let Some((&FORMAT_V2, rest)) = value.split_first() else {
        return Err(StoreError::Corrupt("tag row format".into()));
    };
    let v: RowValue<'_> =
        bincode::deserialize(rest).map_err(|e| StoreError::Corrupt(format!("tag row: {e}")))?;
    Ok(filter.iter().all(|c| {
        v.tags
            .iter()
            .any(|t| t.key == c.key && c.value.as_deref().is_none_or(|x| x == t.value))
    }))
}

/// The row keys of `rec`'s tags under object key `key`.
fn row_keys(bucket: BucketId, key: &str, tags: &[Tag]) -> Vec<Vec<u8>> {
    let mut keys = Vec::with_capacity(tags.len() * 2);
    for t in tags {
        let mut pair = pair_prefix(bucket, &t.key, &t.value);
        pair.extend_from_slice(key.as_bytes());
        keys.push(pair);
        let mut only = key_prefix(bucket, &t.key);
        only.extend_from_slice(key.as_bytes());
        keys.push(only);
    }
    keys
}

/// Whether two records list the same (the fields a tag row repeats).
fn same_listing(a: &StoredObject, b: &StoredObject) -> bool {
    (a.size, a.md5, a.mtime_ms, a.parts, &a.tags) == (b.size, b.md5, b.mtime_ms, b.parts, &b.tags)
}

/// The row changes that take object `key` from record `old` to `new`:
/// `(row key, Some(value))` to write, `(row key, None)` to delete.
pub fn reindex(
    bucket: BucketId,
    key: &str,
    old: Option<&StoredObject>,
    new: Option<&StoredObject>,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    if let (Some(o), Some(n)) = (old, new)
        && same_listing(o, n)
    {
        return Vec::new(); // e.g. compaction moved the data
    }
    let old_keys = old.map_or_else(Vec::new, |o| row_keys(bucket, key, &o.tags));
    let new_keys = new.map_or_else(Vec::new, |n| row_keys(bucket, key, &n.tags));
    let mut out: Vec<(Vec<u8>, Option<Vec<u8>>)> = old_keys
        .into_iter()
        .filter(|k| !new_keys.contains(k))
        .map(|k| (k, None))
        .collect();
    if let Some(n) = new {
        let value = row_value(n);
        out.extend(new_keys.into_iter().map(|k| (k, Some(value.clone()))));
    }
    out
}

/// Build the tag rows of a partition written before the tag index existed
/// (once: a marker row records that the index is complete). Returns the
/// number of objects indexed.
pub fn backfill(index: &dyn MetaIndex) -> StoreResult<u64> {
    if index.get(MARKER)?.is_some() {
        return Ok(0);
    }
    let mut from = vec![OBJECT_TAG];
    let end = vec![OBJECT_TAG + 1];
    let mut indexed = 0u64;
    loop {
        let rows = index.scan(&from, &end, BACKFILL_CHUNK)?;
        let mut batch = WriteBatch::default();
        for (k, v) in &rows {
            indexed += index_row(&mut batch, k, v)?;
        }
        if !batch.is_empty() {
            index.write(batch)?;
        }
        if rows.len() < BACKFILL_CHUNK {
            break;
        }
        if let Some((k, _)) = rows.last() {
            from = k.clone();
            from.push(0);
        }
    }
    let mut done = WriteBatch::default();
    done.put(MARKER.to_vec(), vec![1]);
    index.write(done)?;
    index.sync()?;
    Ok(indexed)
}

/// Queue the tag rows of one object record row; 1 if it has tags.
fn index_row(batch: &mut WriteBatch, k: &[u8], v: &[u8]) -> StoreResult<u64> {
    let bucket_bytes: [u8; 8] = k
        .get(1..9)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| StoreError::Corrupt("object row key".into()))?;
    let key = std::str::from_utf8(&k[9..])
        .map_err(|_| StoreError::Corrupt("object key is not UTF-8".into()))?;
    let rec = StoredObject::decode(v)?;
    if rec.tags.is_empty() {
        return Ok(0);
    }
    for (row, value) in reindex(
        BucketId(u64::from_be_bytes(bucket_bytes)),
        key,
        None,
        Some(&rec),
    ) {
        if let Some(value) = value {
            batch.put(row, value);
        }
    }
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(k: &str, v: &str) -> Tag {
        Tag {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn rows_of_one_tag_are_one_range_in_key_order() {
        let b = BucketId(7);
        let p = pair_prefix(b, "split", "train");
        let mut a = p.clone();
        a.extend_from_slice(b"a");
        let mut z = p.clone();
        z.extend_from_slice(b"z");
        let succ = crate::list::prefix_successor(&p).expect("successor");
        assert!(p < a && a < z && z < succ);
        // A longer value with the same start is a different range.
        let other = pair_prefix(b, "split", "trainx");
        assert!(!other.starts_with(&p));
        assert!(!key_prefix(b, "split").is_empty());
    }

    #[test]
    fn row_values_check_every_condition() {
        let rec_tags = [tag("split", "train"), tag("q", "good")];
        let v = {
            let mut out = vec![FORMAT_V2];
            bincode::serialize_into(
                &mut out,
                &RowValue {
                    size: 1,
                    md5: [0; 16],
                    mtime_ms: 0,
                    parts: 0,
                    tags: rec_tags
                        .iter()
                        .map(|t| TagRef {
                            key: &t.key,
                            value: &t.value,
                        })
                        .collect(),
                },
            )
            .expect("encode");
            out
        };
        let c = |k: &str, v: Option<&str>| TagCond {
            key: k.into(),
            value: v.map(String::from),
        };
        assert!(row_matches(&[c("split", Some("train")), c("q", None)], &v).expect("ok"));
        assert!(!row_matches(&[c("split", Some("train")), c("q", Some("bad"))], &v).expect("ok"));
        assert!(!row_matches(&[c("missing", None)], &v).expect("ok"));
        let s = crate::record::ListSummary::decode(&v).expect("summary");
        assert_eq!(s.size, 1);
    }

    #[test]
    fn edits_set_replace_remove_and_respect_the_filter() {
        let edit = TagEdit {
            filter: vec![TagCond {
                key: "split".into(),
                value: Some("train".into()),
            }],
            set: vec![tag("q", "good"), tag("split", "train")],
            remove: vec!["old".into()],
        };
        let before = vec![tag("split", "train"), tag("old", "1"), tag("q", "bad")];
        let after = edit.apply(&before).expect("matches");
        assert_eq!(after, vec![tag("split", "train"), tag("q", "good")]);
        assert_eq!(edit.apply(&after).as_ref(), Some(&after), "idempotent");
        assert_eq!(edit.apply(&[tag("split", "val")]), None);
    }

    #[test]
    fn driver_prefers_a_pair() {
        let f = vec![
            TagCond {
                key: "a".into(),
                value: None,
            },
            TagCond {
                key: "b".into(),
                value: Some("1".into()),
            },
        ];
        assert_eq!(driver(&f).map(|c| c.key.as_str()), Some("b"));
    }
}
