//! Connection defences that need an HTTP/2 client: a response the client
//! never opens its flow-control window for is ended after
//! `--stall-timeout-secs` (the connection is closed), and an HTTP/2
//! connection with no stream is closed after the header timeout. The
//! HTTP/1 cases are in conformance/test_hardening_conn.py.

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `laneway serve` and its S3 address.
struct Server {
    child: Child,
    s3: String,
}

impl Server {
    fn start(data_dir: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_laneway"))
            .args(["serve", "--listen", "127.0.0.1:0", "--partitions", "2"])
            .args(extra)
            .arg("--data-dir")
            .arg(data_dir)
            .env_remove("LANEWAY_ACCESS_KEY")
            .env_remove("LANEWAY_SECRET_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn laneway");
        let stdout = child.stdout.take().expect("stdout");
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("read stdout");
            if let Some(addr) = line.strip_prefix("laneway listening on http://") {
                let s3 = addr.to_string();
                return Server { child, s3 };
            }
        }
        let _ = child.kill();
        let status = child.wait();
        panic!("laneway exited before listening ({status:?})");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/2 connection (prior knowledge) with a stream window of 0: the
/// server can send response heads but not one byte of a body. The
/// sender, and the connection's task (ends when the server closes it).
async fn zero_window(
    server: &Server,
) -> (
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let stream = tokio::net::TcpStream::connect(&server.s3)
        .await
        .expect("connect");
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(0)
            .handshake(TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    (sender, tokio::spawn(conn))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_behind_a_closed_http2_window_is_ended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(
        dir.path(),
        &["--stall-timeout-secs", "1", "--idle-timeout-secs", "600"],
    );
    let (mut sender, conn) = zero_window(&server).await;
    // An unsigned ListBuckets: a 403 with an XML body the window keeps in.
    let req = http::Request::get(format!("http://{}/", server.s3))
        .body(Empty::<Bytes>::new())
        .expect("request");
    let resp = sender.send_request(req).await.expect("response head");
    assert_eq!(resp.status(), 403);
    let closed = tokio::time::timeout(Duration::from_secs(10), conn).await;
    assert!(
        closed.is_ok(),
        "the server kept a connection whose response could not be sent"
    );
    drop(resp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_without_a_request_is_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &["--header-timeout-secs", "1"]);
    let (_sender, conn) = zero_window(&server).await;
    let closed = tokio::time::timeout(Duration::from_secs(10), conn).await;
    assert!(
        closed.is_ok(),
        "an HTTP/2 connection with no stream stays open"
    );
}
