//! End-to-end checks of the tenant admin API against the real binary:
//! every endpoint, bad input, bad or missing token.

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

mod tenancy_support;
use tenancy_support::{Server, TOKEN, api_status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_endpoints_tokens_and_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path());
    // Token: missing and wrong are 401.
    let (st, body) = s
        .admin
        .raw(Method::GET, "/v1/tenants", None, None)
        .await
        .expect("raw");
    assert_eq!(st, 401);
    assert!(String::from_utf8_lossy(&body).contains("unauthorized"));
    let (st, _) = s
        .admin
        .raw(Method::GET, "/v1/tenants", None, Some("wrong"))
        .await
        .expect("raw");
    assert_eq!(st, 401);

    let (v, _) = s
        .tenant(json!({"name": "acme", "weight": 2, "quota_bytes": 1000, "access": "read-write"}))
        .await;
    let id = v["tenant"]["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("t-"));
    assert_eq!(v["tenant"]["weight"], 2);
    assert_eq!(v["key"]["secret_key"].as_str().map(str::len), Some(40));

    // Bad input.
    for bad in [
        json!({"name": "Acme"}),
        json!({"name": "x", "weight": 0}),
        json!({"name": "y", "quota_bytes": 0}),
        json!({"name": "z", "bogus": 1}),
        json!({"name": "w", "buckets": []}),
        json!({"weight": 1}),
    ] {
        let e = s
            .api(Method::POST, "/v1/tenants", Some(bad.clone()))
            .await
            .expect_err("bad");
        assert_eq!(api_status(e).0, 400, "{bad}");
    }
    let (st, _) = s
        .admin
        .raw(Method::POST, "/v1/tenants", None, Some(TOKEN))
        .await
        .expect("raw");
    assert_eq!(st, 400, "empty body lacks a name");
    let e = s
        .api(Method::POST, "/v1/tenants", Some(json!({"name": "acme"})))
        .await
        .expect_err("dup");
    assert_eq!(api_status(e), (409, "conflict".into()));
    let e = s
        .api(Method::GET, "/v1/tenants/nope", None)
        .await
        .expect_err("404");
    assert_eq!(api_status(e), (404, "no_such_tenant".into()));
    let e = s
        .api(Method::PUT, "/v1/tenants/acme", None)
        .await
        .expect_err("405");
    assert_eq!(api_status(e).0, 405);
    let e = s
        .api(Method::GET, "/v2/whatever", None)
        .await
        .expect_err("404");
    assert_eq!(api_status(e).0, 404);

    // Read, update, list.
    let t = s
        .api(Method::GET, &format!("/v1/tenants/{id}"), None)
        .await
        .expect("get");
    assert_eq!(t["name"], "acme");
    let t = s
        .api(
            Method::PATCH,
            "/v1/tenants/acme",
            Some(json!({"weight": 5, "quota_bytes": null})),
        )
        .await
        .expect("patch");
    assert_eq!(
        (t["weight"].clone(), t["quota_bytes"].clone()),
        (json!(5), Value::Null)
    );
    let e = s
        .api(
            Method::PATCH,
            "/v1/tenants/acme",
            Some(json!({"weight": "x"})),
        )
        .await;
    assert_eq!(api_status(e.expect_err("bad patch")).0, 400);
    let all = s.api(Method::GET, "/v1/tenants", None).await.expect("list");
    assert_eq!(
        all["tenants"].as_array().map(Vec::len),
        Some(2),
        "default + acme"
    );

    // Keys: create, list (no secrets), rotate, revoke.
    let k = s
        .api(
            Method::POST,
            "/v1/tenants/acme/keys",
            Some(json!({"access": "read-only"})),
        )
        .await
        .expect("key");
    let ak = k["access_key"].as_str().expect("ak").to_string();
    let e = s
        .api(
            Method::POST,
            "/v1/tenants/acme/keys",
            Some(json!({"access": "admin"})),
        )
        .await;
    assert_eq!(api_status(e.expect_err("bad access")).0, 400);
    let keys = s
        .api(Method::GET, "/v1/tenants/acme/keys", None)
        .await
        .expect("keys");
    assert_eq!(keys["keys"].as_array().map(Vec::len), Some(2));
    assert!(!keys.to_string().contains("secret"));
    let r = s
        .api(
            Method::POST,
            &format!("/v1/tenants/acme/keys/{ak}/rotate"),
            None,
        )
        .await
        .expect("rotate");
    assert_eq!(r["access"], "read-only");
    assert_ne!(r["access_key"], k["access_key"]);
    s.api(Method::DELETE, &format!("/v1/tenants/acme/keys/{ak}"), None)
        .await
        .expect("revoke");
    let e = s
        .api(Method::DELETE, &format!("/v1/tenants/acme/keys/{ak}"), None)
        .await;
    assert_eq!(
        api_status(e.expect_err("gone")),
        (404, "no_such_key".into())
    );
    let e = s
        .api(
            Method::DELETE,
            &format!(
                "/v1/tenants/default/keys/{}",
                r["access_key"].as_str().unwrap_or("")
            ),
            None,
        )
        .await;
    assert_eq!(api_status(e.expect_err("other tenant's key")).0, 404);

    // Suspend/resume, usage, delete (refused while it owns buckets, purge).
    let t = s
        .api(Method::POST, "/v1/tenants/acme/suspend", None)
        .await
        .expect("suspend");
    assert_eq!(t["status"], "suspended");
    let t = s
        .api(Method::POST, "/v1/tenants/acme/resume", None)
        .await
        .expect("resume");
    assert_eq!(t["status"], "active");
    let c = s.client(&v["key"]);
    c.create_bucket("acme-data").await.expect("bucket");
    c.put_object("acme-data", "a", Bytes::from_static(b"12345"))
        .await
        .expect("put");
    let u = s
        .api(Method::GET, "/v1/tenants/acme/usage", None)
        .await
        .expect("usage");
    assert_eq!(
        (u["bytes"].clone(), u["objects"].clone()),
        (json!(5), json!(1))
    );
    assert_eq!(u["buckets"][0]["name"], "acme-data");
    let e = s
        .api(Method::DELETE, "/v1/tenants/acme", None)
        .await
        .expect_err("not empty");
    assert_eq!(api_status(e), (409, "tenant_not_empty".into()));
    let d = s
        .api(Method::DELETE, "/v1/tenants/acme?purge=true", None)
        .await
        .expect("purge");
    assert_eq!(d["buckets_deleted"], 1);
    let e = s
        .api(Method::GET, "/v1/tenants/acme", None)
        .await
        .expect_err("deleted");
    assert_eq!(api_status(e).0, 404);
    let err = c.get_object("acme-data", "a").await.expect_err("key gone");
    assert_eq!(err.code(), Some("InvalidAccessKeyId"));
}
