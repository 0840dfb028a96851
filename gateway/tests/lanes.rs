//! End-to-end checks of the lanes layer on the real binary: requests past
//! the capacity and queue bounds get `503 SlowDown` with `Retry-After` and
//! an S3 XML body while nothing reaches the store, requests succeed again
//! once capacity frees, and `/metrics` on the admin listener counts what
//! happened per tenant and operation (and follows weight changes made
//! through the admin API).
//!
//! Contention is made deterministic, not timed: a client that stops
//! reading a large GET leaves the server holding the body chunk it is
//! sending, and with `--lanes-capacity 1` and a long `--lanes-max-hold-ms`
//! that chunk holds the whole capacity until the client reads on. The
//! requests that must be refused come from a second tenant: a lane that
//! has been alone for a while may use several capacities
//! (`laneway_qos::ALONE_FACTOR`); two active lanes share one.
//!
//! With the default hold, the same stalled readers must hold nothing
//! (issue 11's reproductions): an unread GET, HTTP/2 streams with a zero
//! window, and a forger claiming another tenant's key cost only
//! themselves.
//!
//! A request's lane is its tenant's only on a connection that has proved
//! the key; a fresh connection's first request runs in an unproved lane,
//! counted as `anonymous` (see `gateway/src/lanes/trust.rs`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use laneway_bench::S3Client;
use laneway_bench::sign::Signer;
use laneway_gateway::admin::client::AdminClient;
use serde_json::json;

const TOKEN: &str = "lanes-test-admin-token-0123456789";

/// A running server, its endpoints and first credentials.
struct Server {
    child: Child,
    s3: String,
    admin: AdminClient,
    access: String,
    secret: String,
}

impl Server {
    fn start(data_dir: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_laneway"))
            .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen"])
            .args(["127.0.0.1:0", "--partitions", "2", "--admin-token", TOKEN])
            .args(extra)
            .arg("--data-dir")
            .arg(data_dir)
            .env_remove("LANEWAY_MASTER_KEY")
            .env_remove("LANEWAY_ACCESS_KEY")
            .env_remove("LANEWAY_SECRET_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn laneway");
        let stdout = child.stdout.take().expect("stdout");
        let mut seen = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("read stdout");
            if let Some(addr) = line.strip_prefix("laneway listening on http://") {
                let export = |var: &str| {
                    let prefix = format!("export {var}=");
                    seen.iter()
                        .find_map(|l: &String| l.strip_prefix(&prefix))
                        .expect("credentials in the banner")
                        .to_string()
                };
                let admin = seen
                    .iter()
                    .find_map(|l| l.strip_prefix("laneway admin listening on "))
                    .expect("admin line");
                return Server {
                    s3: addr.to_string(),
                    admin: AdminClient::new(admin, TOKEN).expect("admin client"),
                    access: export("AWS_ACCESS_KEY_ID"),
                    secret: export("AWS_SECRET_ACCESS_KEY"),
                    child,
                };
            }
            seen.push(line);
        }
        let _ = child.kill();
        let status = child.wait();
        panic!("laneway exited before listening ({status:?}): {seen:?}");
    }

    fn client(&self) -> S3Client {
        S3Client::new(&format!("http://{}", self.s3), &self.access, &self.secret)
            .expect("s3 client")
            .with_timeout(Duration::from_secs(60))
    }

    async fn metrics(&self) -> String {
        let (status, body) = self
            .admin
            .raw(Method::GET, "/metrics", None, Some(TOKEN))
            .await
            .expect("scrape");
        assert_eq!(status, 200);
        String::from_utf8(body.to_vec()).expect("utf-8")
    }

    /// Creates tenant `name`; returns its id and a client with its key.
    async fn second_tenant(&self, name: &str) -> (String, S3Client) {
        let (status, v) = self
            .admin
            .call(Method::POST, "/v1/tenants", Some(&json!({ "name": name })))
            .await
            .expect("create tenant");
        assert_eq!(status, 201, "{v}");
        let key = |f: &str| v["key"][f].as_str().expect("key field").to_string();
        let client = S3Client::new(
            &format!("http://{}", self.s3),
            &key("access_key"),
            &key("secret_key"),
        )
        .expect("s3 client")
        .with_timeout(Duration::from_secs(60));
        (v["tenant"]["id"].as_str().expect("id").to_string(), client)
    }

    /// The id of the default tenant (the metrics label).
    async fn default_tenant(&self) -> String {
        let (_, t) = self
            .admin
            .call(Method::GET, "/v1/tenants/default", None)
            .await
            .expect("tenant");
        t["id"].as_str().expect("id").to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the sample `name` in Prometheus text, if present.
fn sample(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Sends one request on its own connection and returns the response
/// with its body unread (the connection stops reading with it).
async fn send(authority: &str, req: Request<Empty<Bytes>>) -> Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender.send_request(req).await.expect("response")
}

/// A signed GET of `path`, in origin form.
fn signed_get(server: &Server, path: &str) -> Request<Empty<Bytes>> {
    let mut req = Request::get(format!("http://{}{path}", server.s3))
        .header(http::header::HOST, &server.s3)
        .body(Empty::new())
        .expect("request");
    Signer::new(&server.access, &server.secret)
        .sign(&mut req)
        .expect("sign");
    *req.uri_mut() = path.parse().expect("path");
    req
}

/// Waits until the stalled GET holds the whole capacity: one unit in
/// flight and no more bytes going out between two scrapes.
async fn wait_stalled(server: &Server, tenant: &str) {
    let out = format!("laneway_bytes_out_total{{tenant=\"{tenant}\",op=\"GetObject\"}}");
    let mut last = None;
    for _ in 0..300 {
        let m = server.metrics().await;
        let now = sample(&m, &out);
        if sample(&m, "laneway_lanes_in_flight_units") == Some(1) && now.is_some() && now == last {
            return;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the GET never stalled");
}

/// Waits until no units are in flight.
async fn wait_idle(server: &Server) {
    for _ in 0..300 {
        let m = server.metrics().await;
        if sample(&m, "laneway_lanes_in_flight_units") == Some(0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("units stayed in flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bounds_requests_get_slowdown_then_succeed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(
        dir.path(),
        &[
            "--lanes-capacity",
            "1",
            "--lanes-queue",
            "1",
            "--lanes-max-wait-ms",
            "50",
            "--lanes-max-hold-ms",
            "60000",
        ],
    );
    let tenant = server.default_tenant().await;
    let client = server.client();
    client.create_bucket("lanes").await.expect("bucket");
    let big = laneway_bench::content::pattern(7, 32 << 20);
    client
        .put_object("lanes", "big", big.clone())
        .await
        .expect("put big");
    client
        .put_object("lanes", "small", Bytes::from_static(b"hello"))
        .await
        .expect("put small");

    let (other_id, other) = server.second_tenant("other").await;
    other.create_bucket("lanes").await.expect("other's bucket");
    other
        .put_object("lanes", "small", Bytes::from_static(b"hello"))
        .await
        .expect("other's put");
    // The stalled GET is its connection's first request: it runs in an
    // unproved lane, and is counted as the tenant's.
    let stalled = send(&server.s3, signed_get(&server, "/lanes/big")).await;
    assert_eq!(stalled.status(), 200);
    wait_stalled(&server, &tenant).await;

    // Signed requests of a second tenant (in its lane, or an unproved one
    // for a fresh connection): one of each lane waits 50 ms, the rest find
    // the lane full; all are refused.
    let burst = (0..6).map(|_| other.head_object("lanes", "small"));
    for r in futures::future::join_all(burst).await {
        let e = r.expect_err("refused while the capacity is held");
        assert_eq!(e.status(), Some(503), "{e}");
    }
    let e = other
        .put_object("lanes", "refused", Bytes::from_static(b"x"))
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Some("SlowDown"), "{e}");

    // An unsigned request (the anonymous lane) shows the full answer.
    let req = Request::get("/lanes/small")
        .header(http::header::HOST, &server.s3)
        .body(Empty::new())
        .expect("request");
    let refused = send(&server.s3, req).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()[http::header::RETRY_AFTER], "1");
    let id = refused.headers()["x-amz-request-id"].clone();
    let body = refused
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("<Code>SlowDown</Code>"), "{text}");
    assert!(text.contains("<Message>Please reduce your request rate.</Message>"));
    assert!(text.contains(&format!(
        "<RequestId>{}</RequestId>",
        id.to_str().expect("id")
    )));

    // The stalled reader reads on: its object is intact, and the capacity
    // serves everyone again.
    let got = stalled
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(got.len(), big.len());
    assert!(got == big, "object bytes differ");
    wait_idle(&server).await;
    let small = client.get_object("lanes", "small").await.expect("get");
    assert_eq!(small.body, Bytes::from_static(b"hello"));
    let e = other
        .get_object("lanes", "refused")
        .await
        .expect_err("never stored");
    assert_eq!(e.code(), Some("NoSuchKey"));

    let m = server.metrics().await;
    let rejected = |op: &str, reason: &str| {
        let name = format!(
            "laneway_rejections_total{{tenant=\"{other_id}\",op=\"{op}\",reason=\"{reason}\"}}"
        );
        sample(&m, &name).unwrap_or(0)
    };
    assert_eq!(
        rejected("HeadObject", "queue_full") + rejected("HeadObject", "wait_timeout"),
        6,
        "{m}"
    );
    let anon =
        "laneway_request_errors_total{tenant=\"anonymous\",op=\"GetObject\",code=\"SlowDown\"}";
    assert_eq!(sample(&m, anon), Some(1), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_per_tenant_and_operation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]);
    let tenant = server.default_tenant().await;
    let client = server.client();
    client.create_bucket("metrics").await.expect("bucket");
    for i in 0..3 {
        let body = Bytes::from(vec![b'a'; 1000]);
        client
            .put_object("metrics", &format!("k{i}"), body)
            .await
            .expect("put");
    }
    let got = client.get_object("metrics", "k1").await.expect("get");
    assert_eq!(got.body.len(), 1000);
    let e = client
        .head_object("metrics", "nope")
        .await
        .expect_err("missing");
    assert_eq!(e.status(), Some(404));
    let req = Request::get("/")
        .header(http::header::HOST, &server.s3)
        .body(Empty::new())
        .expect("request");
    assert_eq!(send(&server.s3, req).await.status(), 403);

    let m = server.metrics().await;
    let at = |metric: &str, op: &str| {
        sample(&m, &format!("{metric}{{tenant=\"{tenant}\",op=\"{op}\"}}"))
    };
    assert_eq!(at("laneway_requests_total", "PutObject"), Some(3), "{m}");
    assert_eq!(at("laneway_bytes_in_total", "PutObject"), Some(3000));
    assert_eq!(
        at("laneway_cost_units_total", "PutObject"),
        Some(3 * laneway_gateway::config::DEFAULT_LANES_BASE_COST + 3000)
    );
    assert_eq!(
        at("laneway_request_duration_seconds_count", "PutObject"),
        Some(3)
    );
    assert_eq!(at("laneway_queue_wait_seconds_count", "PutObject"), Some(3));
    assert_eq!(at("laneway_queue_depth", "PutObject"), Some(0));
    assert_eq!(at("laneway_requests_total", "GetObject"), Some(1));
    assert_eq!(at("laneway_bytes_out_total", "GetObject"), Some(1000));
    assert_eq!(at("laneway_requests_total", "CreateBucket"), Some(1));
    let missing = format!(
        "laneway_request_errors_total{{tenant=\"{tenant}\",op=\"HeadObject\",code=\"NoSuchKey\"}}"
    );
    assert_eq!(sample(&m, &missing), Some(1), "{m}");
    let anon = "laneway_request_errors_total{tenant=\"anonymous\",op=\"ListBuckets\",code=\"AccessDenied\"}";
    assert_eq!(sample(&m, anon), Some(1), "{m}");
    let weight = format!("laneway_lane_weight{{tenant=\"{tenant}\"}}");
    assert_eq!(sample(&m, &weight), Some(1));
    assert!(m.contains(&format!(
        "laneway_tenant_info{{tenant=\"{tenant}\",name=\"default\"}} 1"
    )));

    // A weight set through the admin API is applied at once.
    server
        .admin
        .call(
            Method::PATCH,
            "/v1/tenants/default",
            Some(&json!({ "weight": 7 })),
        )
        .await
        .expect("patch");
    assert_eq!(sample(&server.metrics().await, &weight), Some(7));

    // The scrape needs the admin token.
    let (status, _) = server
        .admin
        .raw(Method::GET, "/metrics", None, None)
        .await
        .expect("unauthenticated scrape");
    assert_eq!(status, 401);
}

/// A proved connection of `server`'s default tenant: one signed request
/// has been answered on it.
async fn proved_connection(
    server: &Server,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = tokio::net::TcpStream::connect(&server.s3)
        .await
        .expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let first = sender
        .send_request(signed_get(server, "/"))
        .await
        .expect("ListBuckets");
    assert_eq!(first.status(), 200);
    first.into_body().collect().await.expect("body");
    sender.ready().await.expect("connection ready again");
    sender
}

/// Tenant "b" with bucket `small` holding `k` = "hello".
async fn tenant_b_with_small_object(server: &Server) -> S3Client {
    let (_, other) = server.second_tenant("b").await;
    other.create_bucket("small").await.expect("bucket");
    other
        .put_object("small", "k", Bytes::from_static(b"hello"))
        .await
        .expect("put");
    other
}

/// Tenant b's small GET succeeds, twenty times in a row.
async fn b_is_served(other: &S3Client) {
    for _ in 0..20 {
        let got = other.get_object("small", "k").await.expect("B's GET");
        assert_eq!(got.body, Bytes::from_static(b"hello"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_holds_no_capacity() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &["--lanes-max-wait-ms", "2000"]);
    let client = server.client();
    client.create_bucket("held").await.expect("bucket");
    let big = laneway_bench::content::pattern(11, 7 << 20);
    client
        .put_object("held", "big", big.clone())
        .await
        .expect("put big");
    let other = tenant_b_with_small_object(&server).await;

    // Tenant A: ten 7 MiB GETs whose bodies nobody reads, on proved
    // connections (A's own lane) and on fresh ones (the unproved lane).
    let (mut conns, mut unread) = (Vec::new(), Vec::new());
    for i in 0..10 {
        let resp = if i % 2 == 0 {
            let mut c = proved_connection(&server).await;
            let r = c
                .send_request(signed_get(&server, "/held/big"))
                .await
                .expect("response");
            conns.push(c);
            r
        } else {
            send(&server.s3, signed_get(&server, "/held/big")).await
        };
        assert_eq!(resp.status(), 200);
        unread.push(resp);
    }
    // Nothing stays in flight while they wait on their clients.
    wait_idle(&server).await;

    // Tenant B is served, every time.
    b_is_served(&other).await;
    wait_idle(&server).await;
    drop((conns, unread));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_reader_resumes_intact_and_others_were_served_meanwhile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &["--lanes-max-wait-ms", "2000"]);
    let client = server.client();
    client.create_bucket("pause").await.expect("bucket");
    let big = laneway_bench::content::pattern(5, 7 << 20);
    client
        .put_object("pause", "big", big.clone())
        .await
        .expect("put big");
    let mut conn = proved_connection(&server).await;
    let paused = conn
        .send_request(signed_get(&server, "/pause/big"))
        .await
        .expect("response");
    wait_idle(&server).await;
    let (_, other) = server.second_tenant("b").await;
    other.create_bucket("bbb").await.expect("B's bucket");
    for i in 0..10 {
        other
            .put_object("bbb", &format!("k{i}"), Bytes::from_static(b"x"))
            .await
            .expect("B's PUT while A pauses");
    }
    let got = paused.into_body().collect().await.expect("body").to_bytes();
    assert!(got == big, "the paused GET's bytes differ");
    wait_idle(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_with_a_zero_window_hold_no_capacity() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &["--lanes-max-wait-ms", "2000"]);
    let other = tenant_b_with_small_object(&server).await;

    // HTTP/2 with prior knowledge, a stream window of 0: the server can
    // send headers but not one byte of any body.
    let stream = tokio::net::TcpStream::connect(&server.s3)
        .await
        .expect("connect");
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(0)
            .handshake(TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let mut streams = Vec::new();
    for _ in 0..4 {
        let mut s = sender.clone();
        let req = Request::get(format!("http://{}/", server.s3))
            .body(Empty::<Bytes>::new())
            .expect("request");
        streams.push(tokio::spawn(async move { s.send_request(req).await }));
    }
    let mut responses = Vec::new();
    for s in streams {
        let resp = s.await.expect("task").expect("h2 response head");
        assert_eq!(resp.status(), 403);
        responses.push(resp);
    }
    wait_idle(&server).await;
    b_is_served(&other).await;
    drop(responses);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forger_claiming_a_key_does_not_fill_its_tenants_lane() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(
        dir.path(),
        &[
            "--lanes-capacity",
            "1",
            "--lanes-queue",
            "2",
            "--lanes-max-wait-ms",
            "5000",
            "--lanes-max-hold-ms",
            "60000",
        ],
    );
    let client = server.client();
    client.create_bucket("fff").await.expect("bucket");
    let big = laneway_bench::content::pattern(3, 8 << 20);
    client.put_object("fff", "big", big).await.expect("put big");
    let mut victim = proved_connection(&server).await;

    // A stalled GET on a fresh connection holds the capacity.
    let stalled = send(&server.s3, signed_get(&server, "/fff/big")).await;
    assert_eq!(stalled.status(), 200);
    wait_stalled(&server, &server.default_tenant().await).await;

    // The forger knows the victim's key id, not its secret.
    let forged = || {
        Request::get("/fff/big")
            .header(http::header::HOST, &server.s3)
            .header(
                http::header::AUTHORIZATION,
                format!(
                    "AWS4-HMAC-SHA256 Credential={}/20261201/us-east-1/s3/aws4_request, \
                     SignedHeaders=host, Signature={}",
                    server.access,
                    "0".repeat(64)
                ),
            )
            .header("x-amz-date", "20261201T000000Z")
            .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
            .body(Empty::<Bytes>::new())
            .expect("request")
    };
    let authority = server.s3.clone();
    let mut forgers = Vec::new();
    for _ in 0..4 {
        let req = forged();
        let a = authority.clone();
        forgers.push(tokio::spawn(async move { send(&a, req).await.status() }));
    }
    // Wait until forgers are queued (in whichever lane they went to).
    let mut queued = 0;
    for _ in 0..200 {
        let m = server.metrics().await;
        queued = m
            .lines()
            .filter(|l| l.starts_with("laneway_lane_queue_depth{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
        if queued >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(queued >= 2, "the forgers never queued");

    // The victim's request on its proved connection waits in its own
    // lane, and is served once the stalled reader reads on.
    let head = Request::head("/fff/big");
    let mut req = head
        .uri(format!("http://{}/fff/big", server.s3))
        .header(http::header::HOST, &server.s3)
        .body(Empty::new())
        .expect("request");
    Signer::new(&server.access, &server.secret)
        .sign(&mut req)
        .expect("sign");
    *req.uri_mut() = "/fff/big".parse().expect("path");
    let victim_call = tokio::spawn(async move { victim.send_request(req).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    stalled.into_body().collect().await.expect("stalled body");
    let resp = victim_call.await.expect("task").expect("response");
    assert_eq!(resp.status(), 200, "the victim was refused");
    for f in forgers {
        let status = f.await.expect("forger task");
        assert!(status == 403 || status == 503, "forger got {status}");
    }
}
