//! The S3 client core: endpoint, connection pool, signing, request plumbing.
//!
//! One [`S3Client`] wraps a hyper-util legacy client (HTTP/1.1, keep-alive
//! pool, `TCP_NODELAY`) and a SigV4 [`Signer`]. Requests use path-style URLs
//! (`http://host:port/bucket/key`). Each operation runs under the client's
//! timeout, so a stuck server turns into [`ClientError::Timeout`] instead of
//! a hung benchmark. The S3 operations themselves live in `ops.rs`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, HOST};
use http::{HeaderName, HeaderValue, Method, Request, Response, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::body::ReqBody;
use crate::error::ClientError;
use crate::sign::Signer;
use crate::xml;

/// Default per-operation timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest error body read to find the S3 error code.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Largest body [`S3Client::read_body`] will buffer by default.
pub const DEFAULT_MAX_BODY: usize = 256 * 1024 * 1024;

/// A signing S3 client for one endpoint and one key pair. Cheap to clone;
/// clones share the connection pool.
#[derive(Clone, Debug)]
pub struct S3Client {
    http: Client<HttpConnector, ReqBody>,
    scheme: String,
    authority: String,
    signer: Arc<Signer>,
    timeout: Duration,
    max_body: usize,
}

impl S3Client {
    /// A client for `endpoint` (`http://host:port`) signing with the given
    /// key pair.
    pub fn new(endpoint: &str, access_key: &str, secret_key: &str) -> Result<Self, ClientError> {
        let uri: Uri = endpoint
            .trim_end_matches('/')
            .parse()
            .map_err(|e| ClientError::InvalidRequest(format!("endpoint {endpoint:?}: {e}")))?;
        let scheme = uri.scheme_str().unwrap_or("http").to_owned();
        if scheme != "http" {
            return Err(ClientError::InvalidRequest(format!(
                "endpoint {endpoint:?}: only http:// is supported"
            )));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| ClientError::InvalidRequest(format!("endpoint {endpoint:?}: no host")))?
            .to_string();
        Ok(Self {
            http: build_http(),
            scheme,
            authority,
            signer: Arc::new(Signer::new(access_key, secret_key)),
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
        })
    }

    /// Sets the per-operation timeout (connect, send, and read the body).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Reuses a signature for identical requests made within `window` of
    /// it (see [`Signer::reusing`]); clones made before this call keep
    /// signing every request.
    pub fn reusing_signatures(mut self, window: Duration) -> Self {
        self.signer = Arc::new(self.signer.reusing(window));
        self
    }

    /// Sets the largest body that operations returning [`Bytes`] buffer.
    pub fn with_max_body(mut self, max_body: usize) -> Self {
        self.max_body = max_body;
        self
    }

    /// The `host:port` this client talks to.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// Runs `fut` under the client's timeout.
    pub(crate) async fn timed<T>(
        &self,
        fut: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| ClientError::Timeout(self.timeout))?
    }

    /// Builds and signs a request. `path_and_query` must be percent-encoded.
    pub(crate) fn request(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &[(HeaderName, String)],
        body: ReqBody,
    ) -> Result<Request<ReqBody>, ClientError> {
        let uri = format!("{}://{}{}", self.scheme, self.authority, path_and_query);
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .body(body)
            .map_err(|e| ClientError::InvalidRequest(e.to_string()))?;
        let len = req.body().len();
        let bodyless = matches!(*req.method(), Method::GET | Method::HEAD | Method::DELETE);
        let map = req.headers_mut();
        map.insert(HOST, header_value(&self.authority)?);
        if len > 0 || !bodyless {
            map.insert(CONTENT_LENGTH, HeaderValue::from(len));
        }
        for (name, value) in headers {
            map.insert(name.clone(), header_value(value)?);
        }
        self.signer.sign(&mut req)?;
        Ok(req)
    }

    /// Sends `req`; a non-2xx answer becomes [`ClientError::S3`].
    pub(crate) async fn send(
        &self,
        req: Request<ReqBody>,
    ) -> Result<Response<Incoming>, ClientError> {
        let is_head = req.method() == Method::HEAD;
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| ClientError::Transport(error_chain(&e)))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(error_from(resp, is_head).await)
    }

    /// Reads a whole response body, refusing more than the client's limit.
    pub(crate) async fn read_body(&self, resp: Response<Incoming>) -> Result<Bytes, ClientError> {
        read_limited(resp.into_body(), self.max_body).await
    }
}

fn build_http() -> Client<HttpConnector, ReqBody> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

fn header_value(value: &str) -> Result<HeaderValue, ClientError> {
    HeaderValue::from_str(value)
        .map_err(|_| ClientError::InvalidRequest(format!("bad header value {value:?}")))
}

/// Reads `body` into one buffer, failing if it exceeds `limit` bytes.
pub(crate) async fn read_limited(mut body: Incoming, limit: usize) -> Result<Bytes, ClientError> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ClientError::Transport(error_chain(&e)))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(ClientError::BadResponse(format!("body over {limit} bytes")));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// Reads and discards `body`, returning how many bytes it had.
pub(crate) async fn drain(mut body: Incoming) -> Result<u64, ClientError> {
    let mut total = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ClientError::Transport(error_chain(&e)))?;
        if let Ok(data) = frame.into_data() {
            total += data.len() as u64;
        }
    }
    Ok(total)
}

/// Turns a non-2xx response into an error carrying the S3 code.
async fn error_from(resp: Response<Incoming>, is_head: bool) -> ClientError {
    let status = resp.status().as_u16();
    if is_head {
        let code = if status == 404 { "NotFound" } else { "" };
        return ClientError::S3 {
            status,
            code: code.to_owned(),
            message: String::new(),
        };
    }
    let body = read_limited(resp.into_body(), MAX_ERROR_BODY).await;
    let (code, message) = body
        .ok()
        .map(|b| xml::parse_error(&String::from_utf8_lossy(&b)))
        .unwrap_or_default();
    ClientError::S3 {
        status,
        code,
        message,
    }
}

/// `error: cause: cause` for a transport error, which hyper nests deeply.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

/// Percent-encodes `s` for a URL path, keeping `/` (S3 object keys).
pub fn encode_path(s: &str) -> String {
    encode(s, true)
}

/// Percent-encodes `s` for a query value (everything but unreserved).
pub fn encode_query(s: &str) -> String {
    encode(s, false)
}

fn encode(s: &str, keep_slash: bool) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let unreserved = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~');
        if unreserved || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_paths_and_queries() {
        assert_eq!(encode_path("a b/c+d/é"), "a%20b/c%2Bd/%C3%A9");
        assert_eq!(encode_query("x/y=z~"), "x%2Fy%3Dz~");
    }

    #[test]
    fn rejects_non_http_endpoints() {
        assert!(S3Client::new("https://127.0.0.1:1", "a", "b").is_err());
        assert!(S3Client::new("not a uri", "a", "b").is_err());
        let client = S3Client::new("http://127.0.0.1:9000/", "a", "b").expect("valid");
        assert_eq!(client.authority(), "127.0.0.1:9000");
    }
}
