//! [`LaneGate`]: the one layer in front of the s3s service that puts every
//! S3 request through the lanes, so the handlers know nothing of them.
//!
//! Per request:
//! 1. name the operation ([`super::op`]) and the tenant: the claimed
//!    access key ([`super::key`]) resolved through the cached registry
//!    ([`KeyCache`]); no key, or an unknown one, is the shared
//!    [`ANONYMOUS`] lane (s3s refuses those requests later anyway);
//! 2. admit the base cost ([`Lanes::admit`]); a refusal is answered
//!    `503 SlowDown` at once and nothing reaches s3s or the store;
//! 3. call s3s with the request body paced through the tenant's lane; the
//!    permit is held while s3s and the handler work, up to the first read
//!    of the request body (see [`super::body`]), and dropped when s3s
//!    answers at the latest;
//! 4. pace the response body, so GET bytes are charged as they are sent.
//!
//! The claimed key is trusted for accounting before its signature is
//! checked: a forger can charge a victim's lane one base cost plus the
//! bytes it actually sends before s3s refuses it.

use http::Request;
use http_body::Body as _;
use hyper::body::Incoming;
use laneway_qos::{Lanes, Overloaded, Permit, TenantKey, pace};
use parking_lot::Mutex;
use s3s::service::S3Service;
use s3s::{HttpError, HttpResponse};
use std::sync::Arc;
use std::time::Instant;

use super::body::{ByteStream, Direction, Finish, HeldPermit, PacedBody};
use super::{ANONYMOUS, LaneState, key, op, slowdown};
use crate::auth::KeyCache;
use crate::metrics::OpSeries;

/// The lanes layer: shared state plus the key lookups it needs.
pub struct LaneGate {
    state: Arc<LaneState>,
    keys: Arc<KeyCache>,
}

/// Who a request is and what it asks for.
struct Caller {
    tenant: TenantKey,
    series: Arc<OpSeries>,
    started: Instant,
}

/// Takes a request back out of the "waiting for admission" gauge, also
/// when the wait is abandoned (client gone).
struct Queued<'a>(&'a OpSeries);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.queue(-1);
    }
}

impl LaneGate {
    /// A layer over `state`, resolving keys through `keys`.
    pub fn new(state: Arc<LaneState>, keys: Arc<KeyCache>) -> LaneGate {
        LaneGate { state, keys }
    }

    /// Serves one request through the lanes and `service`.
    pub async fn call(
        &self,
        service: &S3Service,
        req: Request<Incoming>,
        request_id: &str,
    ) -> Result<HttpResponse, HttpError> {
        let caller = self.caller(&req);
        let permit = match self.admit(&caller).await {
            Ok(p) => p,
            Err(o) => return Ok(self.refuse(&caller, &o, request_id)),
        };
        let held: HeldPermit = Arc::new(Mutex::new(Some(permit)));
        let req = req.map(|b| self.request_body(b, &caller, &held));
        let result = service.call(req).await;
        drop(held.lock().take());
        match result {
            Ok(resp) => Ok(self.respond(resp, caller)),
            Err(e) => {
                caller.series.error("InternalError");
                caller.series.latency.observe(caller.started.elapsed());
                Err(e)
            }
        }
    }

    fn caller(&self, req: &Request<Incoming>) -> Caller {
        let started = Instant::now();
        let uri = req.uri();
        let op = op::classify(req.method(), uri.path(), uri.query(), req.headers());
        let tenant = key::claimed_access_key(req.headers(), uri.query())
            .and_then(|k| self.keys.get(&k))
            .map_or_else(
                || TenantKey::from(ANONYMOUS),
                |g| TenantKey::from(g.tenant.id.as_str()),
            );
        let series = self.state.metrics().series(&tenant, op);
        series.request();
        Caller {
            tenant,
            series,
            started,
        }
    }

    async fn admit(&self, caller: &Caller) -> Result<Permit, Overloaded> {
        let lanes = self.state.lanes();
        let base = lanes.config().base_cost;
        caller.series.queue(1);
        let queued = Queued(&caller.series);
        let waited = Instant::now();
        let result = lanes.admit(&caller.tenant, base).await;
        drop(queued);
        caller.series.queue_wait.observe(waited.elapsed());
        if result.is_ok() {
            caller.series.admitted(base);
        }
        result
    }

    fn refuse(&self, caller: &Caller, o: &Overloaded, request_id: &str) -> HttpResponse {
        tracing::debug!(tenant = %caller.tenant, reason = %o.reason, "lanes: 503 SlowDown");
        caller.series.reject(o.reason);
        caller.series.error("SlowDown");
        caller.series.latency.observe(caller.started.elapsed());
        slowdown::response(o, request_id)
    }

    /// The request body for s3s: paced and counted unless empty; it drops
    /// the admission permit before it is first read.
    fn request_body(&self, body: Incoming, caller: &Caller, held: &HeldPermit) -> s3s::Body {
        if body.is_end_stream() {
            return s3s::Body::from(body);
        }
        let hint = body.size_hint();
        let paced = self.paced(&caller.tenant, s3s::Body::from(body));
        let body = PacedBody::new(paced, hint, Arc::clone(&caller.series), Direction::In)
            .releasing(Arc::clone(held));
        s3s::Body::http_body_unsync(body)
    }

    /// Counts the outcome and paces a non-empty response body.
    fn respond(&self, resp: HttpResponse, caller: Caller) -> HttpResponse {
        let (parts, body) = resp.into_parts();
        if parts.status.as_u16() >= 400 {
            let buffered = body.bytes();
            let code = slowdown::error_code(parts.status, buffered.as_deref());
            caller.series.error(&code);
        }
        if body.is_end_stream() {
            caller.series.latency.observe(caller.started.elapsed());
            return HttpResponse::from_parts(parts, body);
        }
        let hint = body.size_hint();
        let paced = self.paced(&caller.tenant, body);
        let finish = Finish::new(Arc::clone(&caller.series), caller.started);
        let body = PacedBody::new(paced, hint, caller.series, Direction::Out).finishing(finish);
        HttpResponse::from_parts(parts, s3s::Body::http_body_unsync(body))
    }

    fn paced(&self, tenant: &TenantKey, body: s3s::Body) -> ByteStream {
        let lanes: &Lanes = self.state.lanes();
        let chunk = lanes.config().chunk_bytes;
        Box::pin(pace(lanes.clone(), tenant.clone(), body, chunk))
    }
}
