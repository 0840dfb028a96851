//! The admin listener: HTTP/1.1, bearer token, JSON bodies.
//!
//! Every request must carry `Authorization: Bearer <token>`; a missing or
//! wrong token is 401 before anything else is looked at. The token is
//! compared in constant time. Bodies are limited to 64 KiB. Errors are
//! `{"error": "<code>", "message": "..."}` with a 4xx/5xx status.
//!
//! `GET /metrics` (outside the JSON route table) answers the Prometheus
//! text of [`crate::lanes::LaneState::render`]; it needs the same token
//! (Prometheus: `authorization: { credentials_file: ... }`), because
//! tenant names and traffic are not for everyone on the network.

use super::api::{AdminState, ApiError};
use super::routes::{Matched, matching};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use laneway_tenancy::{Secret, constant_time_eq};
use std::sync::Arc;
use tokio::net::TcpListener;

/// Largest accepted request body.
const MAX_BODY: usize = 64 * 1024;

/// Prometheus scrape path (same bearer token as the API).
pub const METRICS_PATH: &str = "/metrics";

/// The operator token of the admin API.
#[derive(Clone, Debug)]
pub struct AdminToken(pub Secret);

impl AdminToken {
    fn accepts(&self, header: Option<&http::HeaderValue>) -> bool {
        let Some(given) = header
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        constant_time_eq(given.trim().as_bytes(), self.0.expose().as_bytes())
    }
}

/// Serve the admin API on `listener` until the task is dropped.
pub async fn serve_admin(listener: TcpListener, state: Arc<AdminState>, token: AdminToken) {
    let token = Arc::new(token);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = Arc::clone(&state);
        let token = Arc::clone(&token);
        let svc = hyper::service::service_fn(move |req| {
            let state = Arc::clone(&state);
            let token = Arc::clone(&token);
            async move { Ok::<_, std::convert::Infallible>(handle(&state, &token, req).await) }
        });
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "admin connection ended with an error");
            }
        });
    }
}

async fn handle(
    state: &AdminState,
    token: &AdminToken,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if !token.accepts(req.headers().get(http::header::AUTHORIZATION)) {
        return error(&ApiError {
            status: 401,
            error: "unauthorized",
            message: "missing or wrong bearer token".into(),
        });
    }
    if req.method() == http::Method::GET && req.uri().path() == METRICS_PATH {
        return metrics(state);
    }
    let (route, params) = match matching(req.method(), req.uri().path()) {
        Matched::Route(r, p) => (r, p),
        Matched::MethodNotAllowed => {
            return error(&ApiError {
                status: 405,
                error: "method_not_allowed",
                message: format!("{} is not allowed here", req.method()),
            });
        }
        Matched::NotFound => {
            return error(&ApiError {
                status: 404,
                error: "not_found",
                message: "no such endpoint".into(),
            });
        }
    };
    let query = req.uri().query().unwrap_or_default().to_string();
    let bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return error(&ApiError {
                status: 413,
                error: "body_too_large",
                message: format!("request bodies are limited to {MAX_BODY} bytes"),
            });
        }
    };
    match state.handle(route, &params, &query, &bytes).await {
        Ok((status, value)) => json(status, &value),
        Err(e) => error(&e),
    }
}

fn json(status: u16, value: &serde_json::Value) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn metrics(state: &AdminState) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(state.metrics())));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

fn error(e: &ApiError) -> Response<Full<Bytes>> {
    json(
        e.status,
        &serde_json::json!({ "error": e.error, "message": e.message }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_check() {
        let t = AdminToken(Secret::new("tok123".into()));
        let ok = http::HeaderValue::from_static("Bearer tok123");
        let bad = http::HeaderValue::from_static("Bearer tok124");
        let basic = http::HeaderValue::from_static("Basic tok123");
        assert!(t.accepts(Some(&ok)));
        assert!(!t.accepts(Some(&bad)));
        assert!(!t.accepts(Some(&basic)));
        assert!(!t.accepts(None));
    }
}
