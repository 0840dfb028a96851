//! Calls that apply once, however often they are sent.
//!
//! A gateway sends a DeleteObject, PutObjectTagging, in-place metadata
//! replacement or bulk tag edit again when an attempt's outcome is
//! unknown (no answer before the attempt's deadline, typically a leader
//! that stopped or died: `crate::remote::route`). If that attempt
//! committed after all, and another client's write of the same key fell
//! between the two, a plain repeat would undo that write. So such a call
//! carries an id that stays the same across its attempts ([`CallId`], in
//! the RPC envelope), and the partition's commit round that applies it
//! writes, in the same batch as its effect, a row `'r' | id | bucket |
//! key` holding what it answered ([`Row`]). A repeat whose row is there
//! is answered from the row and changes nothing.
//!
//! A bulk tag edit is one op per partition (the keys of the call that
//! fall there, in the call's order), so its row is keyed by that op's
//! first key: a repeat sent to the partition alone, after a call that
//! covered several partitions failed, carries the same keys in the same
//! order and finds it. Its caller may also send it again as a new call
//! with the same id (a tagging job retrying a page: [`derived_id`]),
//! whose keys may differ if the listing changed meanwhile, so the row
//! also holds a fingerprint of the op's keys ([`fingerprint`]) and is
//! only recalled by an op with the same keys; another op applies afresh.
//!
//! The row travels through the partition's group like any other index
//! row, so a new leader holds the rows of every call that committed, and
//! a repeat reaches it only after its commit thread has applied all it
//! had in its log (`crate::replication::Group::settle`): an attempt that
//! committed under the old leader is seen. Rows are forgotten after
//! [`REPEAT_TTL`] by the compactor's sweep ([`crate::Store::forget_repeats`]),
//! far past any call's deadline, which bounds them by the rate of such
//! calls. Only calls to replicated groups carry an id: with one replica
//! no attempt is repeated.
//!
//! The catalog's bucket tagging (PutBucketTagging, DeleteBucketTagging)
//! applies once the same way, with a row of the catalog's
//! ([`crate::catalog::Catalog::set_tags`]), forgotten by the same pass.

use crate::commit::{Op, Outcome};
use crate::error::{StoreError, StoreResult};
use crate::ids::BucketId;
use crate::record::{REPEAT_TAG, StoredObject};
use serde::{Deserialize, Serialize};
use std::future::Future;

/// The id of one call, the same for all its attempts.
pub type CallId = [u8; 16];

/// How long a call's row is kept after it applied.
pub const REPEAT_TTL: std::time::Duration = std::time::Duration::from_secs(120);

tokio::task_local! {
    static CALL_ID: Option<CallId>;
}

/// The id of a call its caller may make again as a new call that must
/// apply once all the same (a tagging job's page, named by the job and
/// where the page starts): SHA-256 of the length-prefixed `parts`, cut
/// to 16 bytes.
pub fn derived_id(parts: &[&[u8]]) -> CallId {
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest_of(parts.iter().copied())[..16]);
    id
}

/// SHA-256 of `parts`, each preceded by its length (so no two lists of
/// parts give the same input).
fn digest_of<'a>(parts: impl Iterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        ctx.update(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// A fresh call id (random); `None` if the system's generator fails (the
/// call then goes without one, as to an unreplicated group: a shared
/// fallback id would make different calls look like repeats).
pub fn new_id() -> Option<CallId> {
    use ring::rand::SecureRandom;
    let mut id = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut id).ok()?;
    Some(id)
}

/// Run `fut` (a store node's handling of one call) with the call's id,
/// which the partition's `submit` attaches to the ops it queues.
pub fn scope<F: Future>(id: Option<CallId>, fut: F) -> impl Future<Output = F::Output> {
    CALL_ID.scope(id, fut)
}

/// The id of the call being handled, if it carries one.
pub fn current() -> Option<CallId> {
    CALL_ID.try_with(|id| *id).ok().flatten()
}

/// What a call that applied answered, kept for its repeats.
#[derive(Debug, Serialize, Deserialize)]
pub struct Row {
    /// When it applied (the leader's clock), ms.
    pub applied_ms: i64,
    /// Its answer.
    answer: Answer,
}

#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    /// A delete: whether the object existed.
    Deleted(bool),
    /// An update in place: the record it left (encoded).
    Updated(#[serde(with = "serde_bytes")] Vec<u8>),
    /// A bulk tag edit of the keys with fingerprint `keys`: what it did to
    /// each of them.
    Edited {
        /// [`fingerprint`] of the op's keys.
        keys: u64,
        /// Per key, in order.
        edited: Vec<crate::tagindex::Edited>,
    },
}

/// The row key of op `op` of call `id`, for the ops that apply once
/// (`None` for the others).
pub fn row_key(id: &CallId, op: &Op) -> Option<Vec<u8>> {
    let (bucket, key) = match op {
        Op::Delete { bucket, key }
        | Op::SetTags { bucket, key, .. }
        | Op::ReplaceMeta { bucket, key, .. } => (*bucket, key),
        Op::EditTags { bucket, keys, .. } => (*bucket, keys.first()?),
        _ => return None,
    };
    Some(key_of(id, bucket, key))
}

fn key_of(id: &CallId, bucket: BucketId, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + 16 + 8 + key.len());
    k.push(REPEAT_TAG);
    k.extend_from_slice(id);
    k.extend_from_slice(&bucket.0.to_be_bytes());
    k.extend_from_slice(key.as_bytes());
    k
}

/// What tells one op of a call from another with the same row key: for
/// a bulk tag edit, a hash of its keys in order (0 for the other ops,
/// whose row key names their one key).
pub fn fingerprint(op: &Op) -> u64 {
    let Op::EditTags { keys, .. } = op else {
        return 0;
    };
    let digest = digest_of(keys.iter().map(|k| k.as_bytes()));
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The row that remembers `outcome` of an op with [`fingerprint`] `keys`,
/// applied at `now_ms`.
pub fn remember(outcome: &Outcome, keys: u64, now_ms: i64) -> Option<Vec<u8>> {
    let answer = match outcome {
        Outcome::Deleted(existed) => Answer::Deleted(*existed),
        Outcome::Updated(rec) => Answer::Updated(rec.encode()),
        Outcome::Edited(edited) => Answer::Edited {
            keys,
            edited: edited.clone(),
        },
        _ => return None,
    };
    let row = Row {
        applied_ms: now_ms,
        answer,
    };
    Some(bincode::serialize(&row).unwrap_or_default())
}

/// A row as stored.
pub fn decode(raw: &[u8]) -> StoreResult<Row> {
    bincode::deserialize(raw).map_err(|e| StoreError::Corrupt(format!("repeat row: {e}")))
}

/// The first attempt's answer, from its row, for a repeat with
/// [`fingerprint`] `keys`; `None` when the row is another op's (a bulk
/// edit of other keys under the same id and first key).
pub fn recall(raw: &[u8], keys: u64) -> StoreResult<Option<Outcome>> {
    Ok(match decode(raw)?.answer {
        Answer::Deleted(existed) => Some(Outcome::Deleted(existed)),
        Answer::Updated(rec) => Some(Outcome::Updated(StoredObject::decode(&rec)?)),
        Answer::Edited { keys: k, edited } => (k == keys).then_some(Outcome::Edited(edited)),
    })
}

impl crate::store::Store {
    /// Forget the rows of repeatable calls that applied before
    /// `cutoff_ms`, in every partition this replica leads (or hosts
    /// alone); how many.
    pub async fn forget_repeats(&self, cutoff_ms: i64) -> StoreResult<u64> {
        self.sweep(REPEAT_TAG, |p, rows| async move {
            let mut old = Vec::new();
            for (k, v) in rows {
                if decode(&v)?.applied_ms < cutoff_ms {
                    old.push(k);
                }
            }
            if old.is_empty() {
                return Ok(0);
            }
            let op = Op::ForgetRepeats {
                rows: old,
                cutoff_ms,
            };
            match p.submit(op, Vec::new()).await? {
                Outcome::Forgotten(k) => Ok(k),
                _ => Ok(0),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tagindex::{Edited, TagEdit};
    use std::sync::Arc;

    fn edit(keys: &[&str]) -> Op {
        Op::EditTags {
            bucket: BucketId(7),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            edit: Arc::new(TagEdit::default()),
        }
    }

    #[test]
    fn a_row_gives_back_the_answer_it_remembers() {
        let raw = remember(&Outcome::Deleted(true), 0, 42).expect("a delete is remembered");
        assert_eq!(decode(&raw).expect("row").applied_ms, 42);
        assert!(matches!(recall(&raw, 0), Ok(Some(Outcome::Deleted(true)))));
        assert!(remember(&Outcome::Relocated(true), 0, 1).is_none());
    }

    #[test]
    fn row_keys_differ_by_call_and_by_key_and_only_writes_of_keys_have_one() {
        let del = |key: &str| Op::Delete {
            bucket: BucketId(7),
            key: key.into(),
        };
        let a = row_key(&[1; 16], &del("k")).expect("a delete applies once");
        assert_ne!(Some(a.clone()), row_key(&[2; 16], &del("k")));
        assert_ne!(Some(a.clone()), row_key(&[1; 16], &del("k2")));
        assert_eq!(a[0], REPEAT_TAG);
        let bulk = row_key(&[1; 16], &edit(&["k", "z"])).expect("a bulk edit by its first key");
        assert_eq!(bulk, a, "the row of the op whose first key is k");
        assert!(
            row_key(&[1; 16], &edit(&[])).is_none(),
            "no key, nothing to apply"
        );
    }

    #[test]
    fn an_edit_row_answers_only_an_edit_of_the_same_keys() {
        let op = edit(&["k", "z"]);
        let keys = fingerprint(&op);
        let done = Outcome::Edited(vec![Edited::Changed, Edited::Skipped]);
        let raw = remember(&done, keys, 1).expect("an edit is remembered");
        assert!(matches!(
            recall(&raw, keys),
            Ok(Some(Outcome::Edited(e))) if e == vec![Edited::Changed, Edited::Skipped]
        ));
        // Same id and first key, other keys (a page listed again after it
        // changed): applied afresh.
        for other in [edit(&["k"]), edit(&["k", "y"]), edit(&["k", "z", "a"])] {
            assert_ne!(fingerprint(&other), keys);
            assert!(matches!(recall(&raw, fingerprint(&other)), Ok(None)));
        }
        // Keys are length-prefixed: moving a byte from one to the next
        // is another op.
        assert_ne!(
            fingerprint(&edit(&["ab", "c"])),
            fingerprint(&edit(&["a", "bc"]))
        );
    }

    #[test]
    fn derived_ids_are_stable_and_differ_by_their_parts() {
        let a = derived_id(&[b"job", b"cursor"]);
        assert_eq!(a, derived_id(&[b"job", b"cursor"]));
        assert_ne!(a, derived_id(&[b"job", b"cursor2"]));
        assert_ne!(a, derived_id(&[b"jobc", b"ursor"]));
    }
}
