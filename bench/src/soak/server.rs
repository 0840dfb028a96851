//! The server under soak: a `laneway serve` child the soak starts itself
//! (fresh data directory under the system temp dir, S3 and admin API on
//! `127.0.0.1:0`, a generated admin token, `--log warn`, and
//! `LANEWAY_PARTITIONS` with `--partitions`), or one already running on
//! loopback.
//!
//! The child's addresses are read from the lines it prints at start
//! (`laneway listening on http://...`, `laneway admin listening on
//! http://...`); its stderr goes to `server.stderr.log` in the run
//! directory, whose tail is printed if the soak fails. The run directory
//! is removed after a passing run and kept after a failing one.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the child may take to print its addresses.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The server the soak talks to.
pub struct Server {
    /// S3 endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Admin endpoint.
    pub admin: String,
    /// Admin bearer token.
    pub token: String,
    /// Its pid, if known (RSS and CPU).
    pub pid: Option<u32>,
    child: Option<Child>,
    dir: Option<PathBuf>,
}

impl Server {
    /// A server that is already running.
    pub fn existing(endpoint: String, admin: String, token: String, pid: Option<u32>) -> Server {
        Server {
            endpoint,
            admin,
            token,
            pid,
            child: None,
            dir: None,
        }
    }

    /// Starts `bin serve` on a fresh data directory (of `partitions`
    /// store partitions, if given).
    pub async fn start(bin: &Path, partitions: Option<u32>) -> Result<Server, String> {
        let dir = run_dir();
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let stderr = std::fs::File::create(dir.join("server.stderr.log"))
            .map_err(|e| format!("server log: {e}"))?;
        let token = format!(
            "soak-{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        );
        let mut cmd = Command::new(bin);
        if let Some(p) = partitions {
            cmd.env("LANEWAY_PARTITIONS", p.to_string());
        }
        let mut child = cmd
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(["--admin-token", &token, "--log", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let stdout = child.stdout.take().ok_or("server stdout not piped")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || addresses(stdout, &tx));
        let found = tokio::task::spawn_blocking(move || rx.recv_timeout(START_TIMEOUT))
            .await
            .map_err(|e| e.to_string())?;
        let (endpoint, admin) = match found {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => return Err(kill(child, e)),
            Err(_) => {
                return Err(kill(
                    child,
                    format!("{} printed no addresses in 60 s", bin.display()),
                ));
            }
        };
        Ok(Server {
            endpoint,
            admin,
            token,
            pid: Some(child.id()),
            child: Some(child),
            dir: Some(dir),
        })
    }

    /// False if the child has exited (an existing server: always true).
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The run directory, if the soak made one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Bytes under the data directory (0 for an existing server).
    pub fn data_bytes(&self) -> u64 {
        self.dir.as_deref().map_or(0, |d| du(&d.join("data")))
    }

    /// Stops the child; removes the run directory if `passed`, else
    /// prints where it is and the tail of the server's log.
    pub async fn stop(mut self, passed: bool) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        }
        let Some(dir) = self.dir.take() else { return };
        if passed {
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        let log = std::fs::read_to_string(dir.join("server.stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        println!(
            "# server log tail ({}):",
            dir.join("server.stderr.log").display()
        );
        for line in &lines[lines.len().saturating_sub(40)..] {
            println!("#   {line}");
        }
        println!("# run directory kept: {}", dir.display());
    }
}

/// A fresh directory name under the temp dir.
fn run_dir() -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    std::env::temp_dir().join(format!("laneway-soak-{}-{secs}", std::process::id()))
}

/// Kills a child that did not start right; returns `msg`.
fn kill(mut child: Child, msg: String) -> String {
    let _ = child.kill();
    let _ = child.wait();
    msg
}

type Addresses = Result<(String, String), String>;

/// Reads the child's stdout (on its own thread) until both addresses are
/// printed and sends them, then keeps draining it so the child never
/// blocks on a full pipe.
fn addresses(stdout: ChildStdout, tx: &mpsc::Sender<Addresses>) {
    let mut lines = BufReader::new(stdout).lines();
    let (mut s3, mut admin) = (None, None);
    while s3.is_none() || admin.is_none() {
        let line = match lines.next() {
            Some(Ok(line)) => line,
            Some(Err(e)) => return drop(tx.send(Err(format!("server stdout: {e}")))),
            None => {
                let msg = "server exited before printing its addresses".to_owned();
                return drop(tx.send(Err(msg)));
            }
        };
        if let Some(a) = line.strip_prefix("laneway admin listening on ") {
            admin = Some(a.trim().to_owned());
        } else if let Some(a) = line.strip_prefix("laneway listening on ") {
            s3 = Some(a.trim().to_owned());
        }
    }
    let _ = tx.send(Ok((s3.unwrap_or_default(), admin.unwrap_or_default())));
    for _ in lines {}
}

/// Total size of the files under `dir`.
pub fn du(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
