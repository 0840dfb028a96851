//! [`LaneGate`]: the one layer in front of the s3s service that puts every
//! S3 request through the lanes, so the handlers know nothing of them.
//!
//! Per request:
//! 1. name the operation ([`super::op`]) and the lane: the claimed
//!    access key ([`super::key`]) resolved through the cached registry
//!    ([`KeyCache`]) picks its tenant's lane only if the connection has
//!    already proved that key ([`ConnTrust`]); anything else (no key, an
//!    unknown or unproved one) goes to the unproved lane of the client's
//!    address, counted as [`ANONYMOUS`] in the metrics;
//! 2. admit the base cost ([`Lanes::admit`]); a refusal is answered
//!    `503 SlowDown` at once and nothing reaches s3s or the store;
//! 3. call s3s with the request body; the permit is held while s3s and
//!    the handler work, until a store call waits on the network (a
//!    cluster's store node: [`laneway_store::caller::before_network_wait`]),
//!    which gives it back first;
//! 4. finish the answer's XML document while it is one buffer
//!    ([`crate::request::reply::finish`]: error ids, a bare ETag), the refusal's
//!    too;
//! 5. send the response body; the permit is dropped when it ends.
//!
//! Copies move their bytes inside the store; the gate leaves a
//! [`LaneMeter`] in the request's extensions so the copy handlers pace
//! those bytes through the same lane ([`super::meter`]).
//!
//! Bodies come in two sizes ([`small_body`]). A body of at most one chunk
//! has its bytes charged to the lane as they flow, without a second wait
//! ([`Lanes::charge`]); a larger one is paced chunk by chunk through the
//! lane. A small *response* body is carried under the request's permit,
//! so for a small GET the permit covers the request's whole life, which
//! is where its (CPU) work is, but as a lease ([`Lanes::lease`]): a
//! client that does not read its response gives the units back after the
//! lanes' `max_hold`, since waiting on a client is not work. A request body drops the permit when it is
//! first read: an upload's commit waits for the disk, and holding
//! capacity through it would cap the store's group commits. A paced body
//! always drops the permit before its first chunk waits for a grant (no
//! hold-and-wait, see [`super::body`]).
//!
//! A claimed key is never trusted before its connection proved it, so a
//! forger who knows a victim's key id queues in its own unproved lane,
//! not the victim's (see [`super::trust`]).

use futures::StreamExt;
use http::Request;
use http_body::Body as _;
use laneway_qos::{Lanes, Overloaded, Permit, TenantKey, pace};
use parking_lot::Mutex;
use s3s::service::S3Service;
use s3s::{HttpError, HttpResponse};
use std::sync::Arc;
use std::time::Instant;

use super::body::{ByteStream, Direction, Finish, HeldPermit, PacedBody};
use super::meter::LaneMeter;
use super::trust::ConnTrust;
use super::{ANONYMOUS, LaneState, key, op, slowdown};
use crate::lanes::metrics::OpSeries;
use crate::request::auth::KeyCache;
use crate::request::reply::{self, Ids};
use crate::server::unread::Watched;

/// The lanes layer: shared state plus the key lookups it needs.
pub struct LaneGate {
    state: Arc<LaneState>,
    keys: Arc<KeyCache>,
}

/// Who a request is and what it asks for.
struct Caller {
    /// The lane it is scheduled in: its tenant's once proved, else an
    /// unproved lane.
    tenant: TenantKey,
    /// Its tenant and weight as the store sees them (store nodes schedule
    /// by it too: [`laneway_store::caller`]).
    store: laneway_store::caller::Caller,
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

    /// Serves one request (whose ids are `ids`) through the lanes and
    /// `service`.
    pub async fn call(
        &self,
        service: &S3Service,
        req: Request<Watched>,
        ids: Ids<'_>,
    ) -> Result<HttpResponse, HttpError> {
        let caller = self.caller(&req);
        let permit = match self.admit(&caller).await {
            Ok(p) => p,
            Err(o) => return Ok(reply::finish(self.refuse(&caller, &o, ids.request), ids)),
        };
        // The admitted request runs as a fresh turn of the runtime, at the
        // back of its queue, not in the poll that parsed it: see
        // "CPU-bound requests" in docs/qos.md (without this, requests
        // queue in the runtime before the lanes, first come, first served).
        tokio::task::yield_now().await;
        let held: HeldPermit = Arc::new(Mutex::new(Some(permit)));
        let mut req = req.map(|b| self.request_body(b, &caller, &held));
        let meter = LaneMeter::new(
            self.state.lanes().clone(),
            caller.tenant.clone(),
            Arc::clone(&held),
            Arc::clone(&caller.series),
        );
        req.extensions_mut().insert(meter);
        // A store call that waits on the network (a cluster's node) gives
        // the permit back first: waiting on a node is not this gateway's
        // work, and a slow node must not hold the tenant's capacity.
        let release = Arc::clone(&held);
        let before_wait: laneway_store::caller::BeforeWait =
            Arc::new(move || drop(release.lock().take()));
        let call = caller.store.clone().scope(service.call(req));
        let result = laneway_store::caller::scope_before_wait(before_wait, call).await;
        match result {
            Ok(resp) => Ok(self.respond(reply::finish(resp, ids), caller, &held)),
            Err(e) => {
                drop(held.lock().take());
                caller.series.error("InternalError");
                caller.series.latency.observe(caller.started.elapsed());
                Err(e)
            }
        }
    }

    fn caller(&self, req: &Request<Watched>) -> Caller {
        let started = Instant::now();
        let uri = req.uri();
        let op = op::classify(req.method(), uri.path(), uri.query(), req.headers());
        let trust = req.extensions().get::<Arc<ConnTrust>>();
        let claimed = key::claimed_access_key(req.headers(), uri.query());
        let grant = claimed.as_deref().and_then(|k| self.keys.get(k));
        // Metrics name the tenant a request claims (a forgery shows as
        // that tenant's signature error); the lane is the tenant's only
        // once the connection proved the key.
        let label = grant.as_ref().map_or_else(
            || TenantKey::from(ANONYMOUS),
            |g| TenantKey::from(g.tenant.id.as_str()),
        );
        let proved = claimed
            .as_deref()
            .is_some_and(|k| trust.is_some_and(|t| t.has_proved(k)));
        let tenant = match (&grant, proved) {
            (Some(_), true) => label.clone(),
            _ => TenantKey::from(
                trust.map_or_else(|| super::trust::unproved_lane(0), |t| t.unproved_lane()),
            ),
        };
        let series = self.state.metrics().series(&label, op);
        series.request();
        let weight = match (&grant, proved) {
            (Some(g), true) => g.tenant.weight,
            _ => 1,
        };
        let store = laneway_store::caller::Caller {
            tenant: laneway_store::TenantId(tenant.as_str().to_string()),
            weight,
        };
        Caller {
            tenant,
            store,
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

    /// The request body for s3s, counted unless empty: a small one is
    /// charged as it flows, a large one is paced; either drops the permit
    /// when it is first read (an upload's commit waits for the disk, not
    /// for CPU, and must not hold capacity that would cap group commits).
    fn request_body(&self, body: Watched, caller: &Caller, held: &HeldPermit) -> s3s::Body {
        if body.is_end_stream() {
            return s3s::Body::http_body_unsync(body);
        }
        let hint = body.size_hint();
        let series = Arc::clone(&caller.series);
        let body = s3s::Body::http_body_unsync(body);
        let stream = if small_body(hint.exact(), self.chunk_bytes()) {
            self.charged(&caller.tenant, body)
        } else {
            self.paced(&caller.tenant, body)
        };
        let body = PacedBody::new(stream, hint, series, Direction::In).releasing(Arc::clone(held));
        s3s::Body::http_body_unsync(body)
    }

    /// Counts the outcome and sends the response body: a small one under
    /// the request's permit (dropped when it ends), a large one paced.
    fn respond(&self, resp: HttpResponse, caller: Caller, held: &HeldPermit) -> HttpResponse {
        let (parts, body) = resp.into_parts();
        if parts.status.as_u16() >= 400 {
            let buffered = body.bytes();
            let code = slowdown::error_code(parts.status, buffered.as_deref());
            caller.series.error(&code);
        }
        let permit = held.lock().take();
        if body.is_end_stream() {
            drop(permit);
            caller.series.latency.observe(caller.started.elapsed());
            return HttpResponse::from_parts(parts, body);
        }
        let hint = body.size_hint();
        let len = hint.exact().or_else(|| content_length(&parts.headers));
        let finish = Finish::new(Arc::clone(&caller.series), caller.started);
        let (stream, finish) = if small_body(len, self.chunk_bytes()) {
            let lease = permit.map(|p| self.state.lanes().lease(p));
            (self.charged(&caller.tenant, body), finish.holding(lease))
        } else {
            drop(permit);
            (self.paced(&caller.tenant, body), finish)
        };
        let body = PacedBody::new(stream, hint, caller.series, Direction::Out).finishing(finish);
        HttpResponse::from_parts(parts, s3s::Body::http_body_unsync(body))
    }

    fn chunk_bytes(&self) -> usize {
        self.state.lanes().config().chunk_bytes
    }

    /// `body` with every chunk charged to `tenant`'s lane as it passes.
    fn charged(&self, tenant: &TenantKey, body: s3s::Body) -> ByteStream {
        let lanes = self.state.lanes().clone();
        let tenant = tenant.clone();
        Box::pin(body.inspect(move |item| {
            if let Ok(bytes) = item {
                lanes.charge(&tenant, u64::try_from(bytes.len()).unwrap_or(u64::MAX));
            }
        }))
    }

    fn paced(&self, tenant: &TenantKey, body: s3s::Body) -> ByteStream {
        let lanes: &Lanes = self.state.lanes();
        let chunk = lanes.config().chunk_bytes;
        Box::pin(pace(lanes.clone(), tenant.clone(), body, chunk))
    }
}

/// Whether a body of `len` bytes (unknown: `None`) is small enough to be
/// carried under its request's permit: at most one chunk.
fn small_body(len: Option<u64>, chunk: usize) -> bool {
    len.is_some_and(|n| n <= u64::try_from(chunk).unwrap_or(u64::MAX))
}

/// The `Content-Length` of a response, if it has a valid one.
fn content_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bodies_are_at_most_one_chunk() {
        assert!(small_body(Some(0), 4));
        assert!(small_body(Some(4), 4));
        assert!(!small_body(Some(5), 4));
        assert!(!small_body(None, 4));
    }

    #[test]
    fn reads_content_length() {
        let mut h = http::HeaderMap::new();
        assert_eq!(content_length(&h), None);
        h.insert(http::header::CONTENT_LENGTH, "12".parse().expect("value"));
        assert_eq!(content_length(&h), Some(12));
        h.insert(http::header::CONTENT_LENGTH, "x".parse().expect("value"));
        assert_eq!(content_length(&h), None);
    }
}
