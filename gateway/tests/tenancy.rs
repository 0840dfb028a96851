//! End-to-end checks of tenancy against the real binary: revocation and
//! suspension taking effect within 5 s, quotas (overwrite, delete,
//! concurrent uploads racing the limit, restart), read-only and
//! bucket-scoped keys. The admin API itself: `tenancy_api.rs`.

use bytes::Bytes;
use http::Method;
use laneway_bench::S3Client;
use serde_json::json;
use std::time::{Duration, Instant};

mod tenancy_support;
use tenancy_support::Server;

async fn until_refused(c: &S3Client, code: &str) -> Duration {
    let started = Instant::now();
    loop {
        match c.get_object("rev", "k").await {
            Err(e) if e.code() == Some(code) => return started.elapsed(),
            _ if started.elapsed() > Duration::from_secs(5) => panic!("still allowed after 5 s"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_and_suspension_take_effect_within_5s() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path());
    let (v, c) = s.tenant(json!({"name": "rev"})).await;
    c.create_bucket("rev").await.expect("bucket");
    c.put_object("rev", "k", Bytes::from_static(b"x"))
        .await
        .expect("put");
    let second = s
        .api(Method::POST, "/v1/tenants/rev/keys", None)
        .await
        .expect("key");
    let c2 = s.client(&second);
    c2.get_object("rev", "k").await.expect("second key works");

    s.api(Method::POST, "/v1/tenants/rev/suspend", None)
        .await
        .expect("suspend");
    until_refused(&c, "AccessDenied").await;
    s.api(Method::POST, "/v1/tenants/rev/resume", None)
        .await
        .expect("resume");
    c.get_object("rev", "k").await.expect("works again");

    let ak = second["access_key"].as_str().expect("ak");
    s.api(Method::DELETE, &format!("/v1/tenants/rev/keys/{ak}"), None)
        .await
        .expect("revoke");
    until_refused(&c2, "InvalidAccessKeyId").await;
    c.get_object("rev", "k")
        .await
        .expect("the other key still works");
    drop(v);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_hold_under_overwrite_delete_races_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path());
    let (_, c) = s
        .tenant(json!({"name": "qb1", "quota_bytes": 100, "quota_objects": 3}))
        .await;
    c.create_bucket("qb1").await.expect("bucket");
    let body = |n: usize| Bytes::from(vec![b'x'; n]);
    c.put_object("qb1", "a", body(60)).await.expect("60 of 100");
    let e = c
        .put_object("qb1", "b", body(41))
        .await
        .expect_err("101 > 100");
    assert_eq!(e.code(), Some("QuotaExceeded"));
    assert!(
        c.head_object("qb1", "b").await.is_err(),
        "nothing left behind"
    );
    c.put_object("qb1", "a", body(100))
        .await
        .expect("overwrite within quota");
    c.delete_object("qb1", "a").await.expect("delete frees");
    for k in ["o1", "o2", "o3"] {
        c.put_object("qb1", k, body(1)).await.expect("small");
    }
    let e = c
        .put_object("qb1", "o4", body(1))
        .await
        .expect_err("4 objects > 3");
    assert_eq!(e.code(), Some("QuotaExceeded"));
    c.put_object("qb1", "o1", body(2))
        .await
        .expect("overwrite keeps the count");
    for k in ["o1", "o2", "o3"] {
        c.delete_object("qb1", k).await.expect("delete");
    }

    // Eight concurrent 30-byte uploads race for 100 bytes: at most 3 win.
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                c.put_object("qb1", &format!("r{i}"), Bytes::from(vec![b'r'; 30]))
                    .await
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => won += 1,
            Err(e) => assert_eq!(e.code(), Some("QuotaExceeded")),
        }
    }
    assert!((1..=3).contains(&won), "{won} uploads won");
    let u = s
        .api(Method::GET, "/v1/tenants/qb1/usage", None)
        .await
        .expect("usage");
    let bytes = u["bytes"].as_u64().expect("bytes");
    assert!(bytes <= 100 && bytes == 30 * won, "{bytes}");

    // After a restart the quota still counts what is stored.
    drop(s);
    let s = Server::start(dir.path());
    let keys = s
        .api(Method::GET, "/v1/tenants/qb1/keys", None)
        .await
        .expect("keys");
    assert_eq!(keys["keys"].as_array().map(Vec::len), Some(1));
    let fresh = s
        .api(Method::POST, "/v1/tenants/qb1/keys", None)
        .await
        .expect("key");
    let c = s.client(&fresh);
    let clear = json!({"quota_objects": null});
    s.api(Method::PATCH, "/v1/tenants/qb1", Some(clear))
        .await
        .expect("no object quota");
    let room = usize::try_from(100 - bytes).expect("room");
    let e = c
        .put_object("qb1", "big", body(room + 1))
        .await
        .expect_err("over after restart");
    assert_eq!(e.code(), Some("QuotaExceeded"));
    c.put_object("qb1", "fits", body(room))
        .await
        .expect("exactly to the quota");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_and_scoped_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path());
    let (_, owner) = s.tenant(json!({"name": "sc"})).await;
    for b in ["logs", "other"] {
        owner.create_bucket(b).await.expect("bucket");
        owner
            .put_object(b, "k", Bytes::from_static(b"v"))
            .await
            .expect("put");
    }
    let ro = s
        .api(
            Method::POST,
            "/v1/tenants/sc/keys",
            Some(json!({"access": "read-only"})),
        )
        .await
        .expect("ro key");
    let ro = s.client(&ro);
    ro.get_object("logs", "k").await.expect("read");
    let e = ro
        .put_object("logs", "k2", Bytes::from_static(b"v"))
        .await
        .expect_err("write");
    assert_eq!(e.code(), Some("AccessDenied"));
    let e = ro.delete_object("logs", "k").await.expect_err("delete");
    assert_eq!(e.code(), Some("AccessDenied"));

    let scoped = s
        .api(
            Method::POST,
            "/v1/tenants/sc/keys",
            Some(json!({"buckets": ["logs"]})),
        )
        .await
        .expect("scoped key");
    let scoped = s.client(&scoped);
    scoped
        .put_object("logs", "k3", Bytes::from_static(b"v"))
        .await
        .expect("in scope");
    let e = scoped
        .get_object("other", "k")
        .await
        .expect_err("out of scope");
    assert_eq!(e.code(), Some("AccessDenied"));
    let e = scoped
        .create_bucket("newb")
        .await
        .expect_err("create outside scope");
    assert_eq!(e.code(), Some("AccessDenied"));
    assert_eq!(
        owner
            .get_object("other", "k")
            .await
            .expect("unchanged")
            .body,
        Bytes::from_static(b"v")
    );
}
