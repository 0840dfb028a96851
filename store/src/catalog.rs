//! The bucket catalog: every tenant's buckets, in an index of its own
//! (`<data dir>/catalog`), separate from the object partitions.
//!
//! Keys: `b'b' | tenant id | 0x00 | bucket name` -> `FORMAT_V1 | bincode(BucketInfo)`,
//! so a tenant's buckets are one ordered range (ListBuckets is a scan) and two
//! tenants may own buckets with the same name. `b'#'` holds the next bucket
//! id; ids are never reused, so objects of a deleted bucket can never
//! reappear under a new one. Bucket changes are rare: each is its own
//! batch, synced before it returns, under one mutex.
//!
//! `b'd' | name` -> `FORMAT_V1 | version (u64 BE) | bytes` are versioned
//! documents ([`Catalog::doc`], [`Catalog::put_doc`]): whole values that
//! change by compare-and-swap on their version, so several writers (the
//! gateways of a cluster, through the store node that holds the catalog)
//! never lose each other's change. The tenant registry is one.
//!
//! `b'r' | call id` -> `FORMAT_V1 | applied ms (i64 BE)` marks a bucket
//! tagging call that applied ([`Catalog::set_tags`] with an id): a repeat
//! of it (the gateway sends it again when an attempt's outcome is
//! unknown, `crate::repeat`) changes nothing, so it cannot undo another
//! client's tagging that fell between the two. The compactor's pass
//! forgets these rows after [`crate::repeat::REPEAT_TTL`]
//! ([`Catalog::forget_repeats`]).
//!
//! `b'q' | hold id (u64 BE)` -> a quota hold of the cluster's desk
//! (`crate::node::desk`, encoded by [`crate::quota::rows`], written in
//! batches by `crate::node::hold_rows`): written
//! blind (no read of what they change, so neither the write lock nor a
//! settle), so that a new leader of a replicated catalog takes over the
//! writes in flight.
//!
//! Replicated (a cluster with three replicas): the catalog is a group of
//! its own ([`crate::replication::GroupOpener::open_catalog`]). A write
//! then first settles (this replica leads and has applied its whole log,
//! so the read-modify-write reads the latest state), and its batch
//! commits through the group, whose state machine writes it on every
//! replica. Calls that block on the group run on blocking threads (the
//! store node puts them there).

use crate::error::{StoreError, StoreResult};
use crate::ids::{BucketId, TenantId};
use crate::index::{Engine, MetaIndex, WriteBatch, open_index};
use crate::record::{FORMAT_V1, Tag};
use crate::repeat::CallId;
use crate::replication::{Group, Replication};
use crate::store::BucketInfo;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;

const BUCKET_TAG: u8 = b'b';
const DOC_TAG: u8 = b'd';
const REPEAT_TAG: u8 = b'r';
const HOLD_TAG: u8 = b'q';
/// Largest catalog document.
pub const MAX_DOC: usize = 64 << 20;
const NEXT_ID_KEY: &[u8] = b"#next-bucket-id";

/// The bucket catalog.
pub struct Catalog {
    index: Arc<dyn MetaIndex>,
    /// The catalog's replication group, when it has one.
    group: Option<Arc<dyn Group>>,
    /// Serialises read-modify-write of bucket rows and the id counter.
    write_lock: Mutex<()>,
}

fn tenant_prefix(tenant: &TenantId) -> Vec<u8> {
    let mut k = vec![BUCKET_TAG];
    k.extend_from_slice(tenant.as_str().as_bytes());
    k.push(0);
    k
}

fn bucket_key(tenant: &TenantId, name: &str) -> Vec<u8> {
    let mut k = tenant_prefix(tenant);
    k.extend_from_slice(name.as_bytes());
    k
}

fn repeat_key(id: &CallId) -> Vec<u8> {
    let mut k = vec![REPEAT_TAG];
    k.extend_from_slice(id);
    k
}

/// A repeat row: when its call applied.
fn repeat_row(applied_ms: i64) -> Vec<u8> {
    let mut v = vec![FORMAT_V1];
    v.extend_from_slice(&applied_ms.to_be_bytes());
    v
}

/// When a repeat row's call applied (`None`: not a row this version
/// wrote, kept).
fn applied_ms(row: &[u8]) -> Option<i64> {
    match row.split_first() {
        Some((&FORMAT_V1, rest)) => <[u8; 8]>::try_from(rest).ok().map(i64::from_be_bytes),
        _ => None,
    }
}

fn hold_key(id: u64) -> Vec<u8> {
    let mut k = vec![HOLD_TAG];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn doc_key(name: &str) -> Vec<u8> {
    let mut k = vec![DOC_TAG];
    k.extend_from_slice(name.as_bytes());
    k
}

fn encode(b: &BucketInfo) -> Vec<u8> {
    let mut out = vec![FORMAT_V1];
    if let Err(e) = bincode::serialize_into(&mut out, b) {
        unreachable!("bincode of a plain struct into a Vec failed: {e}");
    }
    out
}

fn decode(bytes: &[u8]) -> StoreResult<BucketInfo> {
    match bytes.split_first() {
        Some((&FORMAT_V1, rest)) => bincode::deserialize(rest)
            .map_err(|e| StoreError::Corrupt(format!("bucket record: {e}"))),
        _ => Err(StoreError::Corrupt("bucket record: unknown format".into())),
    }
}

fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Catalog {
    /// Open the catalog under `dir/catalog`; with `groups`, as this
    /// node's replica of the catalog group when the opener gives it one
    /// (its log and snapshots under `dir/catalog-raft`).
    pub fn open(dir: &Path, engine: Engine, groups: Option<&Replication>) -> StoreResult<Catalog> {
        let path = dir.join("catalog");
        std::fs::create_dir_all(&path)?;
        let index: Arc<dyn MetaIndex> = Arc::from(open_index(engine, &path)?);
        let group = match groups {
            Some(r) => {
                r.0.open_catalog(Arc::clone(&index), &dir.join("catalog-raft"))?
            }
            None => None,
        };
        Ok(Catalog {
            index,
            group,
            write_lock: Mutex::new(()),
        })
    }

    /// The catalog's replication group, if it has one.
    pub fn group(&self) -> Option<&Arc<dyn Group>> {
        self.group.as_ref()
    }

    /// Before a write reads what it changes: a replicated catalog waits
    /// until this replica leads and has applied its whole log. Called
    /// under the write lock.
    fn settle(&self) -> StoreResult<()> {
        match &self.group {
            Some(g) => g.settle(),
            None => Ok(()),
        }
    }

    /// The bucket `name` of `tenant`, if it exists.
    pub fn get(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<BucketInfo>> {
        self.index
            .get(&bucket_key(tenant, name))?
            .map(|v| decode(&v))
            .transpose()
    }

    /// Create a bucket; BucketAlreadyOwnedByYou when the tenant has it.
    pub fn create(&self, tenant: &TenantId, name: &str, region: &str) -> StoreResult<BucketInfo> {
        let _guard = self.write_lock.lock();
        self.settle()?;
        if self.get(tenant, name)?.is_some() {
            return Err(StoreError::BucketAlreadyOwnedByYou);
        }
        let id = self.next_id()?;
        let info = BucketInfo {
            id,
            tenant: tenant.clone(),
            name: name.to_string(),
            created_ms: now_ms(),
            region: region.to_string(),
            tags: Vec::new(),
        };
        let mut batch = WriteBatch::default();
        batch.put(NEXT_ID_KEY.to_vec(), (id.0 + 1).to_be_bytes().to_vec());
        batch.put(bucket_key(tenant, name), encode(&info));
        self.commit(batch)?;
        Ok(info)
    }

    fn next_id(&self) -> StoreResult<BucketId> {
        match self.index.get(NEXT_ID_KEY)? {
            None => Ok(BucketId(1)),
            Some(v) => {
                let raw: [u8; 8] = v
                    .as_slice()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("bucket id counter".into()))?;
                Ok(BucketId(u64::from_be_bytes(raw)))
            }
        }
    }

    fn commit(&self, batch: WriteBatch) -> StoreResult<()> {
        if let Some(g) = &self.group {
            return g.commit(batch);
        }
        self.index.write(batch)?;
        self.index.sync()
    }

    /// Remove a bucket row (the caller has checked it is empty).
    pub fn delete(&self, tenant: &TenantId, name: &str) -> StoreResult<()> {
        let _guard = self.write_lock.lock();
        self.settle()?;
        if self.get(tenant, name)?.is_none() {
            return Err(StoreError::NoSuchBucket);
        }
        let mut batch = WriteBatch::default();
        batch.delete(bucket_key(tenant, name));
        self.commit(batch)
    }

    /// Replace a bucket's tag set (empty = remove). A call with an id
    /// (`once`: the same on all its attempts) applies once: a repeat after
    /// an attempt that applied changes nothing.
    pub fn set_tags(
        &self,
        tenant: &TenantId,
        name: &str,
        tags: Vec<Tag>,
        once: Option<CallId>,
    ) -> StoreResult<()> {
        let _guard = self.write_lock.lock();
        self.settle()?;
        if let Some(id) = &once
            && self.index.get(&repeat_key(id))?.is_some()
        {
            // An attempt of this call applied (its outcome was unknown to
            // the caller): answer as it did, change nothing.
            return Ok(());
        }
        let mut info = self.get(tenant, name)?.ok_or(StoreError::NoSuchBucket)?;
        info.tags = tags;
        let mut batch = WriteBatch::default();
        batch.put(bucket_key(tenant, name), encode(&info));
        if let Some(id) = &once {
            batch.put(repeat_key(id), repeat_row(crate::partition::now_ms()));
        }
        self.commit(batch)
    }

    /// Forget the repeat rows of tagging calls that applied before
    /// `cutoff_ms`; how many. At a replicated catalog only its leader
    /// forgets (through the group); elsewhere nothing. Blocking.
    pub fn forget_repeats(&self, cutoff_ms: i64) -> StoreResult<u64> {
        let _guard = self.write_lock.lock();
        match self.settle() {
            Ok(()) => {}
            Err(StoreError::NotLeader(_)) => return Ok(0),
            Err(e) => return Err(e),
        }
        let mut old = Vec::new();
        self.each_row(vec![REPEAT_TAG], &[REPEAT_TAG + 1], |k, v| {
            if applied_ms(&v).is_some_and(|at| at < cutoff_ms) {
                old.push(k);
            }
            Ok(())
        })?;
        let forgotten = u64::try_from(old.len()).unwrap_or(u64::MAX);
        if old.is_empty() {
            return Ok(0);
        }
        let mut batch = WriteBatch::default();
        old.into_iter().for_each(|k| batch.delete(k));
        self.commit(batch)?;
        Ok(forgotten)
    }

    /// All buckets of `tenant`, by name.
    pub fn list(&self, tenant: &TenantId) -> StoreResult<Vec<BucketInfo>> {
        let start = tenant_prefix(tenant);
        let mut end = start.clone();
        // The separator 0x00 becomes 0x01: the first key past this tenant.
        if let Some(last) = end.last_mut() {
            *last = 1;
        }
        let mut out = Vec::new();
        self.each_row(start, &end, |_, v| {
            out.push(decode(&v)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Every row from `from` up to `end`, in key order, a page at a time.
    fn each_row(
        &self,
        mut from: Vec<u8>,
        end: &[u8],
        mut row: impl FnMut(Vec<u8>, Vec<u8>) -> StoreResult<()>,
    ) -> StoreResult<()> {
        const PAGE: usize = 1000;
        loop {
            let rows = self.index.scan(&from, end, PAGE)?;
            let Some((last, _)) = rows.last() else {
                return Ok(());
            };
            from = last.clone();
            from.push(0);
            let full = rows.len() == PAGE;
            for (k, v) in rows {
                row(k, v)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Document `name` and its version (`None`: never written).
    pub fn doc(&self, name: &str) -> StoreResult<Option<(u64, Vec<u8>)>> {
        let Some(v) = self.index.get(&doc_key(name))? else {
            return Ok(None);
        };
        match v.split_first() {
            Some((&FORMAT_V1, rest)) if rest.len() >= 8 => {
                let (ver, body) = rest.split_at(8);
                let ver: [u8; 8] = ver.try_into().unwrap_or_default();
                Ok(Some((u64::from_be_bytes(ver), body.to_vec())))
            }
            _ => Err(StoreError::Corrupt(format!("catalog document {name:?}"))),
        }
    }

    /// Replace document `name` if its version is still `expected` (0: it
    /// must not exist yet); returns the new version. PreconditionFailed
    /// when another writer got there first (read it again and retry).
    pub fn put_doc(&self, name: &str, expected: u64, body: &[u8]) -> StoreResult<u64> {
        if body.len() > MAX_DOC {
            return Err(StoreError::InvalidArgument(format!(
                "catalog document of {} bytes (at most {MAX_DOC})",
                body.len()
            )));
        }
        let _guard = self.write_lock.lock();
        self.settle()?;
        let current = self.doc(name)?.map_or(0, |(v, _)| v);
        if current != expected {
            return Err(StoreError::PreconditionFailed);
        }
        let next = current + 1;
        let mut value = Vec::with_capacity(9 + body.len());
        value.push(FORMAT_V1);
        value.extend_from_slice(&next.to_be_bytes());
        value.extend_from_slice(body);
        let mut batch = WriteBatch::default();
        batch.put(doc_key(name), value);
        self.commit(batch)?;
        Ok(next)
    }

    /// Write the rows of quota holds `puts` (id, value) and delete those
    /// of `deletes`, in one batch, durably (through the group when
    /// replicated: `NotLeader` at any replica but its leader).
    pub fn write_holds(&self, puts: Vec<(u64, Vec<u8>)>, deletes: &[u64]) -> StoreResult<()> {
        if puts.is_empty() && deletes.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        puts.into_iter()
            .for_each(|(id, v)| batch.put(hold_key(id), v));
        deletes.iter().for_each(|id| batch.delete(hold_key(*id)));
        self.commit(batch)
    }

    /// Every quota hold row, by id (the caller has settled, so they are
    /// all of them that committed).
    pub fn holds(&self) -> StoreResult<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        self.each_row(vec![HOLD_TAG], &[HOLD_TAG + 1], |k, v| {
            if let Some(id) = k.get(1..).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                out.push((u64::from_be_bytes(id), v));
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Make all catalog writes durable (shutdown).
    pub fn sync(&self) -> StoreResult<()> {
        self.index.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_tagging_call_applies_once_until_its_row_is_forgotten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Catalog::open(dir.path(), Engine::Fjall, None).expect("open");
        let t = TenantId("t".into());
        c.create(&t, "data", "us-east-1").expect("bucket");
        let tag = |v: &str| {
            vec![Tag {
                key: "k".into(),
                value: v.into(),
            }]
        };
        let tags = || c.get(&t, "data").expect("get").expect("bucket").tags;
        let id = [7u8; 16];
        c.set_tags(&t, "data", tag("first"), Some(id))
            .expect("first");
        // Another client's tagging lands between the attempts.
        c.set_tags(&t, "data", tag("other"), None).expect("other");
        c.set_tags(&t, "data", tag("first"), Some(id))
            .expect("the repeat is answered as the first attempt was");
        assert_eq!(tags(), tag("other"), "the repeat undid nothing");
        // A call without an id, or with another, applies as sent.
        c.set_tags(&t, "data", tag("second"), Some([8u8; 16]))
            .expect("second");
        assert_eq!(tags(), tag("second"));
        assert!(matches!(
            c.set_tags(&t, "nope", tag("x"), Some([9u8; 16])),
            Err(StoreError::NoSuchBucket)
        ));

        // Rows younger than the cutoff stay; once forgotten, the id is new.
        assert_eq!(c.forget_repeats(0).expect("sweep"), 0);
        let later = crate::partition::now_ms() + 1;
        assert_eq!(c.forget_repeats(later).expect("sweep"), 2);
        c.set_tags(&t, "data", tag("first"), Some(id))
            .expect("again");
        assert_eq!(tags(), tag("first"));
        assert!(
            c.list(&t).expect("list").iter().all(|b| b.name == "data"),
            "repeat rows are no buckets"
        );
    }

    #[test]
    fn buckets_are_namespaced_by_tenant() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Catalog::open(dir.path(), Engine::Fjall, None).expect("open");
        let a = TenantId("a".into());
        let b = TenantId("b".into());
        let ad = c.create(&a, "data", "us-east-1").expect("a data");
        let bd = c.create(&b, "data", "us-east-1").expect("b data");
        assert_ne!(ad.id, bd.id);
        assert!(matches!(
            c.create(&a, "data", "x"),
            Err(StoreError::BucketAlreadyOwnedByYou)
        ));
        c.create(&a, "zeta", "us-east-1").expect("zeta");
        let names: Vec<_> = c
            .list(&a)
            .expect("list")
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(names, vec!["data", "zeta"]);
        assert_eq!(c.list(&b).expect("list b").len(), 1);
        c.delete(&a, "data").expect("delete");
        assert!(c.get(&a, "data").expect("get").is_none());
        assert!(c.get(&b, "data").expect("get").is_some());
        let again = c.create(&a, "data", "us-east-1").expect("recreate");
        assert!(again.id.0 > bd.id.0, "ids are never reused");
    }

    #[test]
    fn quota_hold_rows_are_kept_apart_from_other_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cat = Catalog::open(dir.path(), Engine::Sled, None).expect("open");
        let t = TenantId("t".into());
        cat.create(&t, "b", "us-east-1").expect("create");
        cat.put_doc("registry", 0, b"{}").expect("doc");
        let rows = vec![
            (7, b"seven".to_vec()),
            (u64::MAX, b"last".to_vec()),
            (1 << 40, b"big".to_vec()),
        ];
        cat.write_holds(rows, &[]).expect("holds");
        assert_eq!(
            cat.holds().expect("holds"),
            vec![
                (7, b"seven".to_vec()),
                (1 << 40, b"big".to_vec()),
                (u64::MAX, b"last".to_vec())
            ]
        );
        let again = vec![(8, b"eight".to_vec())];
        cat.write_holds(again, &[7, u64::MAX, 99, 8]).expect("drop");
        assert_eq!(
            cat.holds().expect("holds"),
            vec![(1 << 40, b"big".to_vec())]
        );
        assert_eq!(
            cat.list(&t).expect("list").len(),
            1,
            "bucket rows untouched"
        );
        drop(cat);
        let cat = Catalog::open(dir.path(), Engine::Sled, None).expect("reopen");
        assert_eq!(cat.holds().expect("holds").len(), 1, "durable");
    }

    #[test]
    fn documents_change_by_compare_and_swap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Catalog::open(dir.path(), Engine::Fjall, None).expect("open");
        assert_eq!(c.doc("tenants").expect("doc"), None);
        assert!(matches!(
            c.put_doc("tenants", 1, b"x"),
            Err(StoreError::PreconditionFailed)
        ));
        assert_eq!(c.put_doc("tenants", 0, b"one").expect("create"), 1);
        assert!(matches!(
            c.put_doc("tenants", 0, b"lost"),
            Err(StoreError::PreconditionFailed)
        ));
        assert_eq!(c.put_doc("tenants", 1, b"two").expect("swap"), 2);
        assert_eq!(c.doc("tenants").expect("doc"), Some((2, b"two".to_vec())));
        // Documents and buckets do not see each other.
        let t = TenantId("d".into());
        c.create(&t, "tenants", "r").expect("bucket");
        assert_eq!(c.list(&t).expect("list").len(), 1);
        drop(c);
        let c = Catalog::open(dir.path(), Engine::Fjall, None).expect("reopen");
        assert_eq!(c.doc("tenants").expect("doc"), Some((2, b"two".to_vec())));
    }
}
