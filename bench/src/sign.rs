//! SigV4 header signing for the S3 client.
//!
//! Requests are signed with `aws-sigv4` the way S3 expects: region
//! `us-east-1`, service `s3`, single percent-encoding, no path
//! normalisation, and `x-amz-content-sha256: UNSIGNED-PAYLOAD` so a body can
//! be streamed without hashing it first (valid for S3 over any transport).
//! Every header the caller set is signed, so the server checks all of them.
//!
//! A signer can *reuse* signatures ([`Signer::reusing`]): a request whose
//! method, URI and headers equal one signed less than the window ago gets
//! the same `x-amz-date` and `authorization`. SigV4 allows that (S3
//! accepts a signature for 15 minutes), and the server still verifies every
//! request in full; only the loader's work shrinks. The multi-tenant mode
//! uses it so that the server, not the loader, is the bottleneck of a
//! loopback run: signing costs the loader about as much CPU per request as
//! the server spends answering a cached 4 KiB GET.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::{HeaderName, HeaderValue, Request};

use crate::error::ClientError;

/// Region every request is signed for.
pub const REGION: &str = "us-east-1";
/// Service name every request is signed for.
pub const SERVICE: &str = "s3";

/// Headers a signature added, and when it was made.
type Signed = (Instant, Vec<(HeaderName, HeaderValue)>);

/// Signs requests with one access key pair.
#[derive(Debug)]
pub struct Signer {
    identity: Identity,
    settings: SigningSettings,
    /// Reuse window and the signatures made within it, by request.
    reuse: Option<(Duration, Mutex<HashMap<String, Signed>>)>,
}

impl Signer {
    /// A signer for the given access key id and secret.
    pub fn new(access_key: &str, secret_key: &str) -> Self {
        let creds = Credentials::new(access_key, secret_key, None, None, "laneway-bench");
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        Self {
            identity: creds.into(),
            settings,
            reuse: None,
        }
    }

    /// This signer, reusing a signature for identical requests made within
    /// `window` of it (see the module docs). Keep `window` well under the
    /// 15 minutes S3 allows.
    pub fn reusing(&self, window: Duration) -> Self {
        Self {
            identity: self.identity.clone(),
            settings: self.settings.clone(),
            reuse: Some((window, Mutex::new(HashMap::new()))),
        }
    }

    /// Adds `x-amz-date`, `x-amz-content-sha256` and `authorization` to
    /// `req`. The URI must already be percent-encoded.
    pub fn sign<B>(&self, req: &mut Request<B>) -> Result<(), ClientError> {
        let Some((window, cache)) = &self.reuse else {
            let added = self.fresh(req)?;
            insert_all(req, added);
            return Ok(());
        };
        let key = request_key(req);
        let now = Instant::now();
        let cached = cache
            .lock()
            .map_err(|_| ClientError::InvalidRequest("signature cache poisoned".to_owned()))?
            .get(&key)
            .filter(|(at, _)| now.duration_since(*at) < *window)
            .map(|(_, headers)| headers.clone());
        let added = match cached {
            Some(headers) => headers,
            None => {
                let headers = self.fresh(req)?;
                if let Ok(mut map) = cache.lock() {
                    map.insert(key, (now, headers.clone()));
                }
                headers
            }
        };
        insert_all(req, added);
        Ok(())
    }

    /// Signs `req` now: the headers the signature adds.
    fn fresh<B>(&self, req: &Request<B>) -> Result<Vec<(HeaderName, HeaderValue)>, ClientError> {
        let params = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(REGION)
            .name(SERVICE)
            .time(SystemTime::now())
            .settings(self.settings.clone())
            .build()
            .map_err(|e| ClientError::InvalidRequest(format!("signing params: {e}")))?
            .into();
        let uri = req.uri().to_string();
        let headers = req
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let signable = SignableRequest::new(
            req.method().as_str(),
            uri,
            headers,
            SignableBody::UnsignedPayload,
        )
        .map_err(|e| ClientError::InvalidRequest(format!("signable request: {e}")))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| ClientError::InvalidRequest(format!("sign: {e}")))?
            .into_parts();
        let (new_headers, _query) = instructions.into_parts();
        let mut added = Vec::with_capacity(new_headers.len());
        for header in new_headers {
            let name = HeaderName::from_bytes(header.name().as_bytes())
                .map_err(|e| ClientError::InvalidRequest(format!("signed header: {e}")))?;
            let mut value = HeaderValue::from_str(header.value())
                .map_err(|e| ClientError::InvalidRequest(format!("signed header: {e}")))?;
            value.set_sensitive(header.sensitive());
            added.push((name, value));
        }
        Ok(added)
    }
}

fn insert_all<B>(req: &mut Request<B>, headers: Vec<(HeaderName, HeaderValue)>) {
    for (name, value) in headers {
        req.headers_mut().insert(name, value);
    }
}

/// Everything a signature covers except the time: method, URI, headers.
fn request_key<B>(req: &Request<B>) -> String {
    let mut key = format!("{} {}", req.method(), req.uri());
    for (name, value) in req.headers() {
        let _ = write!(
            key,
            "\n{name}:{}",
            String::from_utf8_lossy(value.as_bytes())
        );
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_auth_headers() {
        let signer = Signer::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
        let mut req = Request::builder()
            .method("GET")
            .uri("http://127.0.0.1:9000/b/k?list-type=2")
            .header("host", "127.0.0.1:9000")
            .body(())
            .expect("static request");
        signer.sign(&mut req).expect("sign");
        let auth = req.headers()["authorization"].to_str().expect("ascii");
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
        assert!(auth.contains("/us-east-1/s3/aws4_request"));
        assert!(auth.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date"));
        assert_eq!(req.headers()["x-amz-content-sha256"], "UNSIGNED-PAYLOAD");
    }

    fn get(uri: &str) -> Request<()> {
        Request::builder()
            .method("GET")
            .uri(uri)
            .header("host", "127.0.0.1:9000")
            .body(())
            .expect("static request")
    }

    fn auth(req: &Request<()>) -> String {
        req.headers()["authorization"]
            .to_str()
            .expect("ascii")
            .to_owned()
    }

    #[test]
    fn reuses_only_for_the_same_request_within_the_window() {
        let signer = Signer::new("AKIDEXAMPLE", "secret").reusing(Duration::from_secs(60));
        let (mut a, mut b, mut c) = (
            get("http://h/b/k1"),
            get("http://h/b/k1"),
            get("http://h/b/k2"),
        );
        signer.sign(&mut a).expect("sign");
        std::thread::sleep(Duration::from_millis(1100));
        signer.sign(&mut b).expect("sign");
        signer.sign(&mut c).expect("sign");
        assert_eq!(auth(&a), auth(&b));
        assert_eq!(a.headers()["x-amz-date"], b.headers()["x-amz-date"]);
        assert_ne!(auth(&a), auth(&c));
        let expired = Signer::new("AKIDEXAMPLE", "secret").reusing(Duration::ZERO);
        let (mut d, mut e) = (get("http://h/b/k1"), get("http://h/b/k1"));
        expired.sign(&mut d).expect("sign");
        std::thread::sleep(Duration::from_millis(1100));
        expired.sign(&mut e).expect("sign");
        assert_ne!(auth(&d), auth(&e));
    }
}
