//! A small client of the admin API (used by `laneway admin` and tests):
//! one HTTP/1.1 request per connection, JSON in and out.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is not an `http://host:port` URL.
    #[error("bad endpoint {0:?} (expected http://host:port)")]
    Endpoint(String),
    /// Connecting or talking to the server failed.
    #[error("cannot reach the admin API at {0}: {1}")]
    Transport(String, String),
    /// The server answered with an error.
    #[error("{status} {error}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Error code.
        error: String,
        /// Message.
        message: String,
    },
}

/// An admin API endpoint and its token.
#[derive(Clone, Debug)]
pub struct AdminClient {
    authority: String,
    token: String,
}

impl AdminClient {
    /// A client of `endpoint` (`http://host:port`) using `token`.
    pub fn new(endpoint: &str, token: &str) -> Result<AdminClient, ClientError> {
        let authority = endpoint
            .strip_prefix("http://")
            .map(|a| a.trim_end_matches('/'))
            .filter(|a| !a.is_empty() && !a.contains('/'))
            .ok_or_else(|| ClientError::Endpoint(endpoint.to_string()))?;
        Ok(AdminClient {
            authority: authority.to_string(),
            token: token.to_string(),
        })
    }

    /// Send one request; the status and the JSON body of a 2xx answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), ClientError> {
        let (status, bytes) = self.raw(method, path, body, Some(&self.token)).await?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return Ok((status, value));
        }
        let field = |k: &str| {
            value
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        Err(ClientError::Api {
            status,
            error: field("error"),
            message: field("message"),
        })
    }

    /// Send one request with an optional token; status and raw body.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        token: Option<&str>,
    ) -> Result<(u16, Bytes), ClientError> {
        let transport = |e: &dyn std::fmt::Display| {
            ClientError::Transport(self.authority.clone(), e.to_string())
        };
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| transport(&e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| transport(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, &self.authority)
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(t) = token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| transport(&e))?;
        let resp = sender.send_request(req).await.map_err(|e| transport(&e))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| transport(&e))?
            .to_bytes();
        Ok((status, bytes))
    }
}

/// Percent-encode one path segment.
pub fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
