//! The store node's side of the RPC: accept HTTP/2 connections, check each
//! call's signature before reading its body, read the argument frame under
//! a deadline, hand the call to the [`Handler`], and stream its answer.
//!
//! What protects the node: the signature is checked from headers alone
//! (a stranger is answered `Unauthorized` without a byte of body read);
//! the argument frame is bounded ([`super::wire::MAX_FRAME`]) and must
//! arrive within `frame_deadline`; an incoming data stream that stalls for
//! `body_stall` fails the call; HTTP/2 keep-alive pings close connections
//! whose peer vanished; streams per connection are capped. A response body
//! the caller stops reading is held back by HTTP/2 flow control and
//! dropped when the caller resets the stream (the gateway does, when its
//! own client stalls past its bound).

use super::PATH_PREFIX;
use super::auth::{self, Signer};
use super::stall::with_stall;
use super::wire::{self, FrameError, WireCode, WireError};
use crate::store::BodyStream;
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A handler's answer: the reply payload (the method's bincode), and its
/// data stream, if any.
pub struct Reply {
    /// Encoded reply.
    pub payload: Bytes,
    /// Data after the reply (a GET's body).
    pub body: Option<BodyStream>,
}

impl Reply {
    /// A reply without data.
    pub fn payload(payload: impl Into<Bytes>) -> Reply {
        Reply {
            payload: payload.into(),
            body: None,
        }
    }
}

/// What a store node does with a call: `method`, its decoded-to-bytes
/// arguments, and the data stream that followed them (empty for most).
pub trait Handler: Send + Sync + 'static {
    /// Answer one call.
    fn call(
        &self,
        method: String,
        args: Bytes,
        body: BodyStream,
    ) -> BoxFuture<'static, Result<Reply, WireError>>;
}

/// Bounds of the server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The argument frame must be read within this.
    pub frame_deadline: Duration,
    /// An incoming data stream may pause this long between chunks.
    pub body_stall: Duration,
    /// Calls at once per connection.
    pub max_streams: u32,
    /// Keep-alive ping interval, and the time its ack may take.
    pub keepalive: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            frame_deadline: Duration::from_secs(10),
            body_stall: Duration::from_secs(30),
            max_streams: 1024,
            keepalive: Duration::from_secs(10),
        }
    }
}

type RespBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// A running RPC listener.
pub struct RpcServer {
    addr: std::net::SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RpcServer {
    /// Serve calls accepted on `listener` until [`RpcServer::stop`].
    pub fn start(
        listener: TcpListener,
        handler: Arc<dyn Handler>,
        signer: Signer,
        opts: ServerOptions,
    ) -> std::io::Result<RpcServer> {
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::new(Shared {
            handler,
            signer,
            opts,
        });
        let task = tokio::spawn(accept_loop(listener, shared, stopped));
        Ok(RpcServer { addr, stop, task })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Stop accepting and close every connection.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

struct Shared {
    handler: Arc<dyn Handler>,
    signer: Signer,
    opts: ServerOptions,
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut backoff = Duration::from_millis(5);
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    backoff = Duration::from_millis(5);
                    let _ = tcp.set_nodelay(true);
                    conns.spawn(serve_conn(tcp, Arc::clone(&shared), stop.clone()));
                }
                Err(e) => {
                    // Out of descriptors or similar: wait, do not spin.
                    tracing::warn!(error = %e, "rpc accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

async fn serve_conn(
    tcp: tokio::net::TcpStream,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let keepalive = shared.opts.keepalive;
    let max_streams = shared.opts.max_streams;
    let service = hyper::service::service_fn(move |req| {
        let shared = Arc::clone(&shared);
        async move { Ok::<_, std::convert::Infallible>(answer(&shared, req).await) }
    });
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(keepalive))
        .keep_alive_timeout(keepalive)
        .max_concurrent_streams(max_streams)
        .adaptive_window(true)
        .serve_connection(TokioIo::new(tcp), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => if let Err(e) = r {
            tracing::debug!(error = %e, "rpc connection ended");
        },
        _ = stop.changed() => {}
    }
}

/// One call, from request to response (never an HTTP error status: the
/// outcome is in the reply frame).
async fn answer(shared: &Shared, req: http::Request<Incoming>) -> http::Response<RespBody> {
    match call(shared, req).await {
        Ok(reply) => respond(Ok(reply.payload), reply.body),
        Err(e) => respond(Err(e), None),
    }
}

async fn call(shared: &Shared, req: http::Request<Incoming>) -> Result<Reply, WireError> {
    let method = method_of(&req)?;
    let sig = auth::from_headers(req.headers()).map_err(refused)?;
    shared
        .signer
        .verify(&method, &sig, crate::partition::now_ms())
        .map_err(refused)?;
    let body: BodyStream = Box::pin(
        http_body_util::BodyDataStream::new(req.into_body())
            .map(|r| r.map_err(std::io::Error::other)),
    );
    let body = with_stall(body, shared.opts.body_stall);
    let (args, rest) = tokio::time::timeout(
        shared.opts.frame_deadline,
        wire::read_frame(body, shared.opts.frame_deadline),
    )
    .await
    .map_err(|_| WireError::new(WireCode::BadCall, "arguments did not arrive in time"))?
    .map_err(frame_refused)?;
    sig.covers(&args).map_err(refused)?;
    shared.handler.call(method, args, rest).await
}

fn method_of(req: &http::Request<Incoming>) -> Result<String, WireError> {
    let method = req
        .uri()
        .path()
        .strip_prefix(PATH_PREFIX)
        .filter(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    match method {
        Some(m) if req.method() == http::Method::POST => Ok(m.to_string()),
        _ => Err(WireError::new(WireCode::BadCall, "not a laneway rpc call")),
    }
}

fn refused(r: auth::Refusal) -> WireError {
    WireError::new(WireCode::Unauthorized, format!("call refused: {r:?}"))
}

fn frame_refused(e: FrameError) -> WireError {
    WireError::new(WireCode::BadCall, format!("argument frame: {e:?}"))
}

/// The response: the reply frame, then the data stream.
fn respond(result: Result<Bytes, WireError>, data: Option<BodyStream>) -> http::Response<RespBody> {
    let head = wire::encode_result(&result);
    let head = futures::stream::once(async move { Ok::<_, std::io::Error>(head) });
    let stream: BodyStream = match data {
        Some(d) => Box::pin(head.chain(d)),
        None => Box::pin(head),
    };
    let body = http_body_util::StreamBody::new(stream.map(|r| r.map(Frame::data)));
    http::Response::new(BodyExt::boxed_unsync(body))
}
