//! Shared by the tenancy integration tests: start the real binary with a
//! fixed admin token and talk to both its listeners.

#![allow(dead_code)]

use http::Method;
use laneway_bench::S3Client;
use laneway_gateway::admin::client::{AdminClient, ClientError};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub const TOKEN: &str = "test-admin-token-0123456789";

pub struct Server {
    child: Child,
    pub s3: String,
    pub admin: AdminClient,
}

impl Server {
    pub fn start(data_dir: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_laneway"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .args(["--partitions", "2", "--admin-token", TOKEN, "--data-dir"])
            .arg(data_dir)
            .env_remove("LANEWAY_MASTER_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn laneway");
        let stdout = child.stdout.take().expect("stdout");
        let mut admin = None;
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("read stdout");
            if let Some(a) = line.strip_prefix("laneway admin listening on ") {
                admin = Some(a.to_string());
            } else if let Some(addr) = line.strip_prefix("laneway listening on ") {
                let admin =
                    AdminClient::new(&admin.expect("admin line first"), TOKEN).expect("client");
                return Server {
                    child,
                    s3: addr.to_string(),
                    admin,
                };
            }
        }
        let _ = child.kill();
        let status = child.wait();
        panic!("laneway exited before listening ({status:?})");
    }

    pub async fn api(
        &self,
        m: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        self.admin
            .call(m, path, body.as_ref())
            .await
            .map(|(_, v)| v)
    }

    /// Create a tenant; its S3 client.
    pub async fn tenant(&self, body: Value) -> (Value, S3Client) {
        let v = self
            .api(Method::POST, "/v1/tenants", Some(body))
            .await
            .expect("create tenant");
        let client = self.client(&v["key"]);
        (v, client)
    }

    pub fn client(&self, key: &Value) -> S3Client {
        let ak = key["access_key"].as_str().expect("access_key");
        let sk = key["secret_key"].as_str().expect("secret_key");
        S3Client::new(&self.s3, ak, sk).expect("s3 client")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn api_status(e: ClientError) -> (u16, String) {
    match e {
        ClientError::Api { status, error, .. } => (status, error),
        other => panic!("not an API error: {other}"),
    }
}
