//! Quota reservations through `StoreClient::reserve_quota` on a
//! `LocalStore`: what is stored and what is in flight both count, an
//! overwrite or a replaced part is credited, open uploads are capped, the
//! refusals name the quota, and tenants never share a tally.

mod common;

use common::{body, put, tenant};
use futures::future::join_all;
use laneway_store::{
    BucketInfo, Engine, LocalStore, PutOptions, QuotaAsk, QuotaHold, QuotaLimits, StoreClient,
    StoreError, StoreResult, TenantId,
};

/// A local store with one bucket of the default tenant.
fn setup(dir: &std::path::Path) -> (LocalStore, BucketInfo) {
    let store = LocalStore::new(common::open(dir, Engine::Fjall, 4, 64));
    let bucket = store
        .store()
        .create_bucket(&tenant(), "quota", "us-east-1")
        .expect("bucket");
    (store, bucket)
}

fn bytes_quota(max: u64) -> QuotaLimits {
    QuotaLimits {
        quota_bytes: Some(max),
        ..QuotaLimits::default()
    }
}

fn put_ask(b: &BucketInfo, key: &str, bytes: u64) -> QuotaAsk {
    QuotaAsk::Write {
        bucket: b.clone(),
        key: Some(key.into()),
        bytes,
        objects: 1,
    }
}

fn part_ask(b: &BucketInfo, upload_id: &str, number: u32, bytes: u64) -> QuotaAsk {
    QuotaAsk::Part {
        bucket: b.clone(),
        key: "big".into(),
        upload_id: upload_id.into(),
        number,
        bytes,
    }
}

async fn ask(s: &LocalStore, limits: QuotaLimits, a: QuotaAsk) -> StoreResult<Option<QuotaHold>> {
    s.reserve_quota(&tenant(), limits, a).await
}

/// The hold of an admitted ask (panics on anything else).
fn held(r: StoreResult<Option<QuotaHold>>) -> QuotaHold {
    match r {
        Ok(Some(hold)) => hold,
        other => panic!("expected a hold, got {other:?}"),
    }
}

/// The message of a refusal (panics on anything else).
fn refused(r: StoreResult<Option<QuotaHold>>) -> String {
    match r {
        Err(StoreError::QuotaExceeded(why)) => why,
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
}

async fn upload_with_part(s: &LocalStore, b: &BucketInfo, number: u32, size: usize) -> String {
    let meta = Default::default();
    let id = s
        .create_multipart_upload(b, "big", meta, Vec::new(), None)
        .await
        .expect("create upload");
    let opts = PutOptions {
        content_length: Some(size as u64),
        ..PutOptions::default()
    };
    s.upload_part(b, "big", &id, number, opts, body(&vec![7; size]))
        .await
        .expect("part");
    id
}

#[tokio::test]
async fn a_tenant_without_quotas_is_not_checked_but_its_uploads_are() {
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    let none = QuotaLimits::default();
    let write = ask(&s, none, put_ask(&b, "k", u64::MAX)).await;
    assert!(write.expect("write").is_none());
    let part = ask(&s, none, part_ask(&b, "no-such-upload", 1, u64::MAX)).await;
    assert!(part.expect("part").is_none());
    drop(held(ask(&s, none, QuotaAsk::Upload).await));
}

#[tokio::test]
async fn bytes_in_flight_count_until_their_hold_is_dropped() {
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    let first = held(ask(&s, bytes_quota(100), put_ask(&b, "a", 60)).await);
    let why = refused(ask(&s, bytes_quota(100), put_ask(&b, "b", 60)).await);
    assert_eq!(
        why,
        "This upload would exceed the tenant's byte quota (quota_bytes = 100; 0 bytes stored)."
    );
    drop(first);
    drop(held(ask(&s, bytes_quota(100), put_ask(&b, "b", 60)).await));
}

#[tokio::test]
async fn concurrent_asks_for_the_last_bytes_admit_one() {
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    let asks = (0..8).map(|i| ask(&s, bytes_quota(100), put_ask(&b, &format!("k{i}"), 60)));
    let answers = join_all(asks).await;
    let held = answers.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    let refusals = answers
        .iter()
        .filter(|r| matches!(r, Err(StoreError::QuotaExceeded(_))))
        .count();
    assert_eq!((held, refusals), (1, 7));
}

#[tokio::test]
async fn many_concurrent_asks_fill_the_quota_exactly() {
    // More asks than one round takes (256): 400 writes of 10 bytes under
    // 1,000 bytes, while 37 bytes are stored, from tasks of their own.
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    put(s.store(), &b, "stored", &[1; 37]).await;
    let s = std::sync::Arc::new(s);
    let tasks = (0..400).map(|i| {
        let (s, b) = (std::sync::Arc::clone(&s), b.clone());
        tokio::spawn(
            async move { ask(&s, bytes_quota(1_000), put_ask(&b, &format!("k{i}"), 10)).await },
        )
    });
    let answers: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let admitted = answers.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    let refusals = answers
        .iter()
        .filter(|r| matches!(r, Err(StoreError::QuotaExceeded(_))))
        .count();
    assert_eq!((admitted, refusals), (96, 304));
    drop(answers);
    drop(held(
        ask(&s, bytes_quota(1_000), put_ask(&b, "after", 963)).await,
    ));
}

#[tokio::test]
async fn an_ask_whose_caller_went_away_mid_round_holds_nothing() {
    // Callers that give up while their round reads: nothing of theirs
    // stays counted, and the asks behind them are still answered.
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    for i in 0..50 {
        let gone = ask(&s, bytes_quota(100), put_ask(&b, &format!("g{i}"), 60));
        let kept = ask(&s, bytes_quota(100), put_ask(&b, "kept", 60));
        let (_, kept) = futures::join!(
            tokio::time::timeout(std::time::Duration::from_micros(i * 20), gone),
            kept
        );
        drop(kept);
    }
    drop(held(
        ask(&s, bytes_quota(100), put_ask(&b, "all", 100)).await,
    ));
}

#[tokio::test]
async fn an_overwrite_is_credited_with_the_object_it_replaces() {
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    put(s.store(), &b, "full", &[1; 100]).await;
    let limits = QuotaLimits {
        quota_bytes: Some(100),
        quota_objects: Some(1),
        ..QuotaLimits::default()
    };
    drop(held(ask(&s, limits, put_ask(&b, "full", 100)).await));
    let bytes = refused(ask(&s, limits, put_ask(&b, "other", 1)).await);
    assert_eq!(
        bytes,
        "This upload would exceed the tenant's byte quota (quota_bytes = 100; 100 bytes stored)."
    );
    // A completion adds an object and no bytes: checked against the
    // object quota only.
    let complete = QuotaAsk::Write {
        bucket: b.clone(),
        key: Some("other".into()),
        bytes: 0,
        objects: 1,
    };
    let objects = refused(ask(&s, limits, complete.clone()).await);
    assert_eq!(
        objects,
        "This upload would exceed the tenant's object quota (quota_objects = 1; 1 objects stored)."
    );
    let roomier = QuotaLimits {
        quota_objects: Some(2),
        ..limits
    };
    drop(held(ask(&s, roomier, complete).await));
}

#[tokio::test]
async fn a_part_counts_once_stored_and_is_credited_with_the_part_it_replaces() {
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    let id = upload_with_part(&s, &b, 1, 80).await;
    drop(held(
        ask(&s, bytes_quota(100), part_ask(&b, &id, 1, 90)).await,
    ));
    let why = refused(ask(&s, bytes_quota(100), part_ask(&b, &id, 2, 30)).await);
    assert_eq!(
        why,
        "This upload would exceed the tenant's byte quota (quota_bytes = 100; 80 bytes stored)."
    );
    let totals = laneway_store::quota::tenant_totals(&s, &tenant())
        .await
        .expect("totals");
    assert_eq!(
        (totals.bytes, totals.part_bytes, totals.uploads),
        (80, 80, 1)
    );
}

#[tokio::test]
async fn open_uploads_are_capped_counting_creations_in_flight() {
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    upload_with_part(&s, &b, 1, 10).await;
    let cap = QuotaLimits {
        max_open_uploads: 2,
        ..QuotaLimits::default()
    };
    let creating = held(ask(&s, cap, QuotaAsk::Upload).await);
    let why = refused(ask(&s, cap, QuotaAsk::Upload).await);
    assert_eq!(
        why,
        "This tenant has 1 multipart uploads in progress, the most it may have \
         (max_open_uploads = 2); complete or abort some first."
    );
    drop(creating);
    drop(held(ask(&s, cap, QuotaAsk::Upload).await));
}

#[tokio::test]
async fn tenants_do_not_share_a_tally() {
    let dir = tempfile::tempdir().expect("tmp");
    let (s, b) = setup(dir.path());
    let _held = ask(&s, bytes_quota(100), put_ask(&b, "a", 100)).await;
    let other = TenantId("t2".into());
    let theirs = s
        .store()
        .create_bucket(&other, "theirs", "us-east-1")
        .expect("bucket");
    let r = s.reserve_quota(&other, bytes_quota(100), put_ask(&theirs, "a", 100));
    drop(held(r.await));
}
