//! SigV4 header signing for the S3 client.
//!
//! Requests are signed with `aws-sigv4` the way S3 expects: region
//! `us-east-1`, service `s3`, single percent-encoding, no path
//! normalisation, and `x-amz-content-sha256: UNSIGNED-PAYLOAD` so a body can
//! be streamed without hashing it first (valid for S3 over any transport).
//! Every header the caller set is signed, so the server checks all of them.

use std::time::SystemTime;

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

/// Signs requests with one access key pair.
#[derive(Debug)]
pub struct Signer {
    identity: Identity,
    settings: SigningSettings,
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
        }
    }

    /// Adds `x-amz-date`, `x-amz-content-sha256` and `authorization` to
    /// `req`. The URI must already be percent-encoded.
    pub fn sign<B>(&self, req: &mut Request<B>) -> Result<(), ClientError> {
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
        for header in new_headers {
            let name = HeaderName::from_bytes(header.name().as_bytes())
                .map_err(|e| ClientError::InvalidRequest(format!("signed header: {e}")))?;
            let mut value = HeaderValue::from_str(header.value())
                .map_err(|e| ClientError::InvalidRequest(format!("signed header: {e}")))?;
            value.set_sensitive(header.sensitive());
            req.headers_mut().insert(name, value);
        }
        Ok(())
    }
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
}
