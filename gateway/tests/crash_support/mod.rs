//! Shared by the crash tests: a `laneway serve` child over one data
//! directory, started until it prints its listening line and killed with
//! SIGKILL, and a client of it.

#![allow(dead_code)]

use laneway_bench::{ClientError, ListRequest, S3Client};
use std::cell::RefCell;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The first tenant's key of every crash test's server.
pub const ACCESS_KEY: &str = "LWTESTACCESSKEY0001";
/// Its secret.
pub const SECRET_KEY: &str = "lwTestSecretKey0000000000000000000000001";
const START_TIMEOUT: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `laneway serve` child.
pub struct Server {
    child: Child,
    pub endpoint: String,
}

impl Server {
    pub fn start(data: &Path, log: &Path) -> Result<Server, String> {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("open {}: {e}", log.display()))?;
        let mut child = serve_command(data)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .map_err(|e| format!("spawn laneway: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let (tx, rx) = mpsc::channel();
        // Keeps draining stdout after the banner so the server never blocks
        // on a full pipe; ends when the child dies.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("laneway listening on http://") {
                    let _ = tx.send(addr.trim().to_owned());
                }
            }
        });
        let mut server = Server {
            child,
            endpoint: String::new(),
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => server.endpoint = format!("http://{addr}"),
            Err(_) => {
                server.kill();
                return Err(format!("no listening line within {START_TIMEOUT:?}"));
            }
        }
        Ok(server)
    }

    /// SIGKILL (what `Child::kill` sends on unix) and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn client(&self) -> Result<S3Client, String> {
        S3Client::new(&self.endpoint, ACCESS_KEY, SECRET_KEY)
            .map(|c| c.with_timeout(REQUEST_TIMEOUT))
            .map_err(|e| e.to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn serve_command(data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_laneway"));
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", "127.0.0.1:0", "--log", "warn"])
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]);
    if let Ok(engine) = std::env::var("LANEWAY_TEST_ENGINE") {
        cmd.args(["--engine", &engine]);
    }
    for var in [
        "LANEWAY_LISTEN",
        "LANEWAY_DATA_DIR",
        "LANEWAY_PARTITIONS",
        "LANEWAY_ENGINE",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// One crash test's data directory and server log, in a temporary
/// directory that is kept (and named) when the test fails.
pub struct Run {
    dir: RefCell<Option<tempfile::TempDir>>,
    /// The server's data directory.
    pub data: PathBuf,
    /// The server's log.
    pub log: PathBuf,
}

impl Run {
    /// A fresh temporary directory for the data and the log.
    pub fn new() -> Run {
        let dir = tempfile::tempdir().expect("tempdir");
        Run {
            data: dir.path().join("data"),
            log: dir.path().join("server.log"),
            dir: RefCell::new(Some(dir)),
        }
    }

    /// Fail the test with `problems`, keeping the directory and showing
    /// the server log's tail.
    pub fn fail(&self, what: &str, problems: &[String]) -> ! {
        let kept = self.dir.borrow_mut().take().map(tempfile::TempDir::keep);
        panic!(
            "{what}:\n  {}\n(data dir kept at {}; server log tail:)\n{}",
            problems.join("\n  "),
            kept.map_or_else(|| "?".into(), |p| p.display().to_string()),
            log_tail(&self.log)
        );
    }
}

/// Every key ListObjectsV2 returns for `bucket` (with `tag_filter`, only
/// those with the tags), in pages of `page` keys (the server's default
/// when `None`), following continuation tokens.
pub async fn list_keys(
    client: &S3Client,
    bucket: &str,
    tag_filter: Option<&str>,
    page: Option<u32>,
) -> Result<Vec<String>, ClientError> {
    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..100_000 {
        let req = ListRequest {
            continuation_token: token.as_deref(),
            max_keys: page,
            tag_filter,
            ..ListRequest::default()
        };
        let got = client.list_objects_v2(bucket, &req).await?;
        keys.extend(got.keys);
        token = got.next_token;
        if token.is_none() {
            break;
        }
    }
    Ok(keys)
}
