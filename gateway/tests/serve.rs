//! End-to-end checks of `laneway serve`: the real binary on 127.0.0.1:0,
//! its startup banner, signed S3 requests through the bench client, and a
//! clean SIGTERM shutdown followed by a restart on the same data directory.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use laneway_bench::{HeaderExt, ListRequest, S3Client};

const LISTENING: &str = "laneway listening on http://";

/// A running server and everything it printed before it was ready.
struct Server {
    child: Child,
    endpoint: String,
    banner: Vec<String>,
}

impl Server {
    fn start(data_dir: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_laneway"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--partitions",
                "4",
                "--data-dir",
            ])
            .arg(data_dir)
            .env_remove("LANEWAY_ACCESS_KEY")
            .env_remove("LANEWAY_SECRET_KEY")
            .env_remove("LANEWAY_LISTEN")
            .env_remove("LANEWAY_DATA_DIR")
            .stdout(Stdio::piped())
            .stderr(stderr_file(data_dir))
            .spawn()
            .expect("spawn laneway");
        let stdout = child.stdout.take().expect("stdout");
        let mut banner = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("read stdout");
            if let Some(addr) = line.strip_prefix(LISTENING) {
                let endpoint = format!("http://{addr}");
                return Server {
                    child,
                    endpoint,
                    banner,
                };
            }
            banner.push(line);
        }
        let _ = child.kill();
        let status = child.wait();
        panic!("laneway exited before listening ({status:?}); printed {banner:?}");
    }

    fn export(&self, var: &str) -> String {
        let prefix = format!("export {var}=");
        self.banner
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {var} in {:?}", self.banner))
            .to_string()
    }

    /// SIGTERM, and the exit status once it stopped (panics if it did
    /// not stop within a minute).
    fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "laneway did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn exercise(client: &S3Client) {
    client
        .create_bucket("serve-test")
        .await
        .expect("create bucket");
    let err = client
        .create_bucket("serve-test")
        .await
        .expect_err("second create");
    assert_eq!(err.code(), Some("BucketAlreadyOwnedByYou"));

    for i in 0..5 {
        let body = Bytes::from(format!("object {i}"));
        let etag = client
            .put_object("serve-test", &format!("dir/k{i}"), body)
            .await
            .expect("put");
        assert!(etag.is_some_and(|e| e.trim_matches('"').len() == 32));
    }
    let got = client
        .get_object("serve-test", "dir/k3")
        .await
        .expect("get");
    assert_eq!(got.body, Bytes::from("object 3"));
    let head = client
        .head_object("serve-test", "dir/k3")
        .await
        .expect("head");
    assert!(head.header_map().contains_key("last-modified"));

    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let list = ListRequest {
            prefix: Some("dir/"),
            delimiter: None,
            continuation_token: token.as_deref(),
            max_keys: Some(2),
            tag_filter: None,
        };
        let page = client
            .list_objects_v2("serve-test", &list)
            .await
            .expect("list");
        keys.extend(page.keys);
        match page.next_token {
            Some(t) if page.is_truncated => token = Some(t),
            _ => break,
        }
    }
    assert_eq!(keys, ["dir/k0", "dir/k1", "dir/k2", "dir/k3", "dir/k4"]);

    client
        .delete_object("serve-test", "dir/k4")
        .await
        .expect("delete");
    let err = client
        .get_object("serve-test", "dir/k4")
        .await
        .expect_err("deleted");
    assert_eq!(err.code(), Some("NoSuchKey"));
}

/// Where a server over `data_dir` writes its stderr (beside the data
/// directory, in the test's temporary directory, appended to by each
/// start), so a failure can show it.
fn stderr_file(data_dir: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr_path(data_dir))
        .expect("stderr file")
}

fn stderr_path(data_dir: &Path) -> std::path::PathBuf {
    data_dir
        .parent()
        .unwrap_or(data_dir)
        .join("server.stderr.log")
}

/// The last lines the servers over `data_dir` wrote to stderr.
fn stderr_tail(data_dir: &Path) -> String {
    let text = std::fs::read_to_string(stderr_path(data_dir)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_serves_s3_and_restarts_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start(&data);
    let access = server.export("AWS_ACCESS_KEY_ID");
    let secret = server.export("AWS_SECRET_ACCESS_KEY");
    assert!(access.starts_with("LW") && access.len() == 20, "{access}");
    assert_eq!(secret.len(), 40);
    assert_eq!(server.export("AWS_ENDPOINT_URL"), server.endpoint);
    let mode = std::fs::metadata(data.join("tenancy/tenants.json"))
        .expect("tenants.json")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let client = S3Client::new(&server.endpoint, &access, &secret).expect("client");
    exercise(&client).await;

    let wrong = S3Client::new(&server.endpoint, &access, "not-the-secret-0000000").expect("client");
    let err = wrong
        .get_object("serve-test", "dir/k0")
        .await
        .expect_err("bad secret");
    assert_eq!(err.code(), Some("SignatureDoesNotMatch"));

    let status = server.terminate();
    assert!(
        status.success(),
        "exit status {status:?}; its stderr ends: {}",
        stderr_tail(&data)
    );

    let again = Server::start(&data);
    assert!(
        again.banner.iter().any(|l| l.contains(&access)),
        "{:?}",
        again.banner
    );
    assert!(
        !again.banner.iter().any(|l| l.contains(&secret)),
        "secret printed on restart"
    );
    let client = S3Client::new(&again.endpoint, &access, &secret).expect("client");
    let got = client
        .get_object("serve-test", "dir/k0")
        .await
        .expect("get after restart");
    assert_eq!(got.body, Bytes::from("object 0"));
    let status = again.terminate();
    assert!(
        status.success(),
        "exit status {status:?} after a restart; its stderr ends: {}",
        stderr_tail(&data)
    );
}
