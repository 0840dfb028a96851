//! `laneway serve --tls-cert/--tls-key`: the real binary on 127.0.0.1:0
//! with a self-signed certificate made at test time (rcgen). A rustls
//! client that trusts only that certificate gets an S3 XML error (403) for
//! an unsigned request over HTTPS; a plaintext client and a client that
//! hangs up mid-handshake do not stop the server.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LISTENING: &str = "laneway listening on ";

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(data_dir: &Path, cert: &Path, key: &Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_laneway"))
        .args(["serve", "--listen", "127.0.0.1:0", "--partitions", "2"])
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .env_remove("LANEWAY_LISTEN")
        .env_remove("LANEWAY_DATA_DIR")
        .env_remove("LANEWAY_DOMAIN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn laneway");
    let stdout = child.stdout.take().expect("stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read stdout");
        if let Some(url) = line.strip_prefix(LISTENING) {
            return Server {
                child,
                url: url.to_string(),
            };
        }
    }
    let _ = child.kill();
    panic!("laneway exited before listening: {:?}", child.wait());
}

/// One HTTP/1.1 request over TLS; the whole response as text.
async fn https_get(addr: &str, cert: &CertificateDer<'static>, path: &str) -> String {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).expect("trust the test cert");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("server name");
    let mut tls = connector.connect(name, tcp).await.expect("TLS handshake");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await.expect("write");
    let mut resp = Vec::new();
    // A server closing without close_notify is fine here.
    let _ = tls.read_to_end(&mut resp).await;
    String::from_utf8_lossy(&resp).into_owned()
}

#[tokio::test]
async fn unsigned_request_gets_s3_error_over_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("rcgen");
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, ck.cert.pem()).expect("write cert");
    std::fs::write(&key_path, ck.key_pair.serialize_pem()).expect("write key");
    let cert = ck.cert.der().clone();

    let server = start(&dir.path().join("data"), &cert_path, &key_path);
    let addr = server
        .url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("not an https url: {}", server.url))
        .to_string();

    let resp = https_get(&addr, &cert, "/some-bucket/key").await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(
        resp.contains("<Error>") && resp.contains("<Code>"),
        "{resp}"
    );

    // Plaintext HTTP to the TLS port, and a client that leaves mid-handshake.
    let mut plain = TcpStream::connect(&addr).await.expect("connect");
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let _ = plain.read_to_end(&mut buf).await;
    let mut half = TcpStream::connect(&addr).await.expect("connect");
    half.write_all(&[0x16, 0x03, 0x01, 0x00, 0x40, 0x01])
        .await
        .expect("write");
    drop(half);

    let resp = https_get(&addr, &cert, "/").await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.contains("<Code>"), "{resp}");
}
