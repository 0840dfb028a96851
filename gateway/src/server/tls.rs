//! HTTPS for `laneway serve --tls-cert PEM --tls-key PEM`.
//!
//! rustls with the ring provider (no aws-lc-rs), TLS 1.2 and 1.3, ALPN
//! `h2` and `http/1.1` (hyper's auto builder serves both). The certificate
//! file may hold a chain (leaf first); the key file holds one PKCS#8,
//! PKCS#1 or SEC1 private key. Files are read once at startup.
//!
//! A failed or slow handshake ends that connection only: it is logged at
//! debug level and the accept loop goes on. The handshake has the header
//! timeout (`--header-timeout-secs`) as its deadline, counted from the
//! accept; it runs under the connection's watchdog ([`crate::server::conn`]) on
//! the tracked socket, so a TLS connection holds a place in the table
//! and is timed out and evicted like any other.

use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Why the TLS settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate file holds no certificate.
    #[error("no certificate (BEGIN CERTIFICATE) in {0}")]
    NoCertificate(String),
    /// The key file holds no private key.
    #[error("no private key (BEGIN PRIVATE KEY / RSA PRIVATE KEY / EC PRIVATE KEY) in {0}")]
    NoKey(String),
    /// rustls refused the certificate or key (e.g. they do not match).
    #[error("invalid certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Build the acceptor from a PEM certificate chain and a PEM private key.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let certs = load_certs(cert)?;
    let key = load_key(key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn open(path: &Path) -> Result<BufReader<std::fs::File>, TlsError> {
    std::fs::File::open(path)
        .map(BufReader::new)
        .map_err(|source| read_err(path, source))
}

fn read_err(path: &Path, source: std::io::Error) -> TlsError {
    TlsError::Read {
        path: path.display().to_string(),
        source,
    }
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = rustls_pemfile::certs(&mut open(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_err(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.display().to_string()));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|e| read_err(path, e))?
        .ok_or_else(|| TlsError::NoKey(path.display().to_string()))
}

/// Run the server side of the handshake on an accepted connection. `None`
/// (logged at debug) when the client fails it or takes longer than
/// `deadline`.
pub async fn handshake<S>(
    acceptor: &TlsAcceptor,
    stream: S,
    deadline: Duration,
) -> Option<TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_are_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, b"").expect("write");
        let missing = dir.path().join("missing.pem");
        assert!(matches!(
            acceptor(&missing, &empty),
            Err(TlsError::Read { .. })
        ));
        assert!(matches!(
            acceptor(&empty, &empty),
            Err(TlsError::NoCertificate(_))
        ));
    }

    #[test]
    fn self_signed_pair_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("rcgen");
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, ck.cert.pem()).expect("write");
        std::fs::write(&key, ck.key_pair.serialize_pem()).expect("write");
        assert!(acceptor(&cert, &key).is_ok());
        assert!(matches!(acceptor(&cert, &cert), Err(TlsError::NoKey(_))));
    }
}
