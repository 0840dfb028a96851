//! The caller's side of the RPC: one HTTP/2 connection per store node,
//! opened on first use and again after it breaks, shared by every call to
//! that node (HTTP/2 multiplexes them).
//!
//! Every call has a deadline for its answer to begin (connecting, sending
//! the arguments, the node's work until the reply frame) and a stall bound
//! for each later chunk of the reply's data. Calls are never retried here:
//! whether a retry is safe depends on the operation, which the store
//! client above decides.

use super::auth::{self, Signer};
use super::stall::with_stall;
use super::wire::{self, FrameError};
use super::{PATH_PREFIX, RpcError};
use crate::store::BodyStream;
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Frame;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

type ReqBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// Deadlines of one call.
#[derive(Clone, Debug)]
pub struct CallOptions {
    /// The reply frame must arrive within this (connection included).
    pub deadline: Duration,
    /// The reply's data may pause this long between chunks.
    pub stall: Duration,
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            deadline: Duration::from_secs(5),
            stall: Duration::from_secs(30),
        }
    }
}

/// Calls to one store node.
pub struct RpcClient {
    addr: String,
    signer: Signer,
    keepalive: Duration,
    /// The open connection, if any. Held only to clone or replace it,
    /// never across a wait on the network, except while connecting (so a
    /// burst of calls after a failure opens one connection, not many).
    conn: tokio::sync::Mutex<Option<SendRequest<ReqBody>>>,
}

impl RpcClient {
    /// A client of the node at `addr` (`host:port`), signing with `signer`.
    pub fn new(addr: impl Into<String>, signer: Signer) -> RpcClient {
        RpcClient {
            addr: addr.into(),
            signer,
            keepalive: Duration::from_secs(10),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The node's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Call `method` with `args` (and a data stream after them); returns
    /// the reply payload and the reply's data stream.
    pub async fn call(
        &self,
        method: &str,
        args: Bytes,
        data: Option<BodyStream>,
        opts: &CallOptions,
    ) -> Result<(Bytes, BodyStream), RpcError> {
        // A call with a data stream (an upload) may stream for as long as
        // its sender keeps it flowing (the sender bounds its stalls; the
        // connection's keep-alive catches a node that vanished); the
        // deadline for the answer starts when the stream has been sent.
        let (sent_tx, sent_rx) = tokio::sync::oneshot::channel::<()>();
        let broke = Arc::new(OnceLock::new());
        let data = match data {
            Some(d) => Some(notify_on_end(d, sent_tx, Arc::clone(&broke))),
            None => {
                let _ = sent_tx.send(());
                None
            }
        };
        // Set once the request is handed to the connection: a failure
        // after it leaves the call's outcome unknown.
        let sent = AtomicBool::new(false);
        let attempt = self.attempt(method, args, data, opts, &sent);
        tokio::pin!(attempt);
        let early = tokio::select! {
            r = &mut attempt => Some(r),
            _ = sent_rx => None,
        };
        let answer = match early {
            Some(r) => r,
            None => tokio::time::timeout(opts.deadline, attempt)
                .await
                .map_err(|_| self.timeout(opts.deadline, sent.load(Ordering::Relaxed)))
                .and_then(|r| r),
        };
        let (payload, rest) = answer.map_err(|e| self.blame_body(e, broke.get()))?;
        match wire::decode_result(&payload) {
            Ok(Ok(reply)) => Ok((reply, with_stall(rest, opts.stall))),
            Ok(Err(remote)) => Err(RpcError::Remote(remote)),
            Err(why) => Err(self.protocol(why)),
        }
    }

    async fn attempt(
        &self,
        method: &str,
        args: Bytes,
        data: Option<BodyStream>,
        opts: &CallOptions,
        sent: &AtomicBool,
    ) -> Result<(Bytes, BodyStream), RpcError> {
        // Connecting is bounded on its own: a call with a data stream
        // has no deadline until its stream is sent.
        let mut sender = tokio::time::timeout(opts.deadline, self.sender())
            .await
            .map_err(|_| self.timeout(opts.deadline, false))??;
        let req = self.request(method, args, data)?;
        sent.store(true, Ordering::Relaxed);
        let resp = match sender.send_request(req).await {
            Ok(r) => r,
            Err(e) => {
                self.forget(&sender).await;
                return Err(self.unavailable(e, true));
            }
        };
        let body: BodyStream = Box::pin(
            http_body_util::BodyDataStream::new(resp.into_body())
                .map(|r| r.map_err(std::io::Error::other)),
        );
        wire::read_frame(body, opts.deadline)
            .await
            .map_err(|e| match e {
                FrameError::Stalled => self.timeout(opts.deadline, true),
                FrameError::Io(why) => RpcError::Unavailable {
                    addr: self.addr.clone(),
                    why,
                    sent: true,
                },
                other => self.protocol(format!("{other:?}")),
            })
    }

    fn request(
        &self,
        method: &str,
        args: Bytes,
        data: Option<BodyStream>,
    ) -> Result<http::Request<ReqBody>, RpcError> {
        let sig = self.signer.sign(method, &args, crate::partition::now_ms());
        let frame = wire::frame(&args);
        let body = match data {
            Some(d) => {
                let head = futures::stream::once(async move { Ok::<_, std::io::Error>(frame) });
                let stream: BodyStream = Box::pin(head.chain(d));
                BodyExt::boxed_unsync(http_body_util::StreamBody::new(
                    stream.map(|r| r.map(Frame::data)),
                ))
            }
            // A body known whole: hyper sends it with the request's end
            // in the same DATA frame, written with the headers in one
            // go, where a stream costs the connection task two more
            // wake-ups and writes (the data, then an empty end frame).
            None => BodyExt::boxed_unsync(
                http_body_util::Full::new(frame).map_err(|never| match never {}),
            ),
        };
        let uri = format!("http://{}{PATH_PREFIX}{method}", self.addr);
        let mut req = http::Request::post(uri)
            .body(body)
            .map_err(|e| self.protocol(e.to_string()))?;
        auth::to_headers(&sig, req.headers_mut());
        Ok(req)
    }

    /// The open connection, or a new one.
    async fn sender(&self) -> Result<SendRequest<ReqBody>, RpcError> {
        let mut conn = self.conn.lock().await;
        if let Some(s) = conn.as_ref().filter(|s| !s.is_closed()) {
            return Ok(s.clone());
        }
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| self.unavailable(e, false))?;
        let _ = tcp.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(self.keepalive))
            .keep_alive_timeout(self.keepalive)
            .keep_alive_while_idle(true)
            .adaptive_window(true)
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| self.unavailable(e, false))?;
        let addr = self.addr.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(node = %addr, error = %e, "rpc connection ended");
            }
        });
        *conn = Some(sender.clone());
        Ok(sender)
    }

    /// Drop `broken` so the next call reconnects (unless another call
    /// replaced it already).
    async fn forget(&self, broken: &SendRequest<ReqBody>) {
        let mut conn = self.conn.lock().await;
        if conn
            .as_ref()
            .is_some_and(|c| c.is_closed() || broken.is_closed())
        {
            *conn = None;
        }
    }

    /// The node unreachable; `sent`: after the request went out.
    fn unavailable(&self, e: impl std::fmt::Display, sent: bool) -> RpcError {
        RpcError::Unavailable {
            addr: self.addr.clone(),
            why: e.to_string(),
            sent,
        }
    }

    /// No answer within `d`; `sent`: after the request went out.
    fn timeout(&self, d: Duration, sent: bool) -> RpcError {
        RpcError::Timeout {
            addr: self.addr.clone(),
            ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            sent,
        }
    }

    /// A call that failed on the way after its own data stream failed
    /// (`broke`: why) failed because of that stream: the node never saw
    /// the stream end, so it cannot have completed the call.
    fn blame_body(&self, e: RpcError, broke: Option<&String>) -> RpcError {
        match (e, broke) {
            (RpcError::Unavailable { .. } | RpcError::Timeout { .. }, Some(why)) => {
                RpcError::BodyFailed {
                    addr: self.addr.clone(),
                    why: why.clone(),
                }
            }
            (e, _) => e,
        }
    }

    fn protocol(&self, why: impl Into<String>) -> RpcError {
        RpcError::Protocol {
            addr: self.addr.clone(),
            why: why.into(),
        }
    }
}

/// `body`, signalling `sent` once it has ended (or failed, or was
/// dropped), and keeping in `broke` why it failed, if it did.
fn notify_on_end(
    body: BodyStream,
    sent: tokio::sync::oneshot::Sender<()>,
    broke: Arc<OnceLock<String>>,
) -> BodyStream {
    Box::pin(futures::stream::unfold(
        (body, Some(sent), broke),
        |(mut body, mut sent, broke)| async move {
            match body.next().await {
                Some(Ok(chunk)) => Some((Ok(chunk), (body, sent, broke))),
                Some(Err(e)) => {
                    let _ = broke.set(e.to_string());
                    if let Some(s) = sent.take() {
                        let _ = s.send(());
                    }
                    Some((Err(e), (body, None, broke)))
                }
                None => {
                    if let Some(s) = sent.take() {
                        let _ = s.send(());
                    }
                    None
                }
            }
        },
    ))
}
