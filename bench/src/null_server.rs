//! The null server: a bare hyper HTTP/1.1 server that does no S3 work.
//!
//! It answers GET with a fixed body, HEAD with its length, and PUT by
//! reading and discarding the body; it checks no signature and touches no
//! disk. Driving it with the same client, signing and workload code as the
//! real server gives the ceiling this machine can reach for a request shape
//! with the loader and a server sharing the cores. It runs on its own tokio
//! runtime (own threads, like a separate server process) bound to
//! 127.0.0.1:0, and stops when dropped.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A running null server.
pub struct NullServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NullServer {
    /// Starts a server on 127.0.0.1:0 with `threads` runtime threads whose
    /// GETs return `body_len` bytes.
    pub fn start(body_len: usize, threads: usize) -> io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("null-server")
            .enable_all()
            .build()?;
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (stop, stopped) = oneshot::channel();
        let body = Bytes::from(vec![b'n'; body_len]);
        let thread = std::thread::Builder::new()
            .name("null-server-main".to_owned())
            .spawn(move || {
                rt.block_on(async move {
                    if let Ok(listener) = TcpListener::from_std(std_listener) {
                        tokio::select! {
                            () = accept_loop(listener, body) => {}
                            _ = stopped => {}
                        }
                    }
                });
            })?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for NullServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, body: Bytes) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors or similar: back off instead of spinning.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let body = body.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(req, body.clone()));
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(req: Request<Incoming>, body: Bytes) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().clone();
    // Read the whole request body (PUT payloads) without keeping it.
    let mut incoming = req.into_body();
    while let Some(Ok(_)) = incoming.frame().await {}
    let resp = match method {
        Method::GET => Response::new(Full::new(body)),
        Method::HEAD => {
            let mut r = Response::new(Full::new(Bytes::new()));
            r.headers_mut()
                .insert(http::header::CONTENT_LENGTH, body.len().into());
            r
        }
        Method::DELETE => {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        _ => {
            let mut r = Response::new(Full::new(Bytes::new()));
            r.headers_mut()
                .insert(http::header::ETAG, http::HeaderValue::from_static("\"0\""));
            r
        }
    };
    Ok(resp)
}
