//! The cluster RPC against a toy handler on a real loopback listener:
//! streamed bodies both ways, signatures, typed errors, and the deadlines
//! that keep a node that is down, cut off or stalled from hanging a caller.

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use laneway_store::BodyStream;
use laneway_store::rpc::{
    CallOptions, Handler, Reply, RpcClient, RpcError, RpcServer, ServerOptions, Signer, WireCode,
    WireError,
};
use std::sync::Arc;
use std::time::Duration;

const SECRET: &[u8] = b"rpc-test-secret-0123456789abcdef";

/// `echo`: the arguments back, and the request's data as the reply's data;
/// `hang`: never answers; `drip`: one chunk of data, then nothing;
/// `fail`: a typed error; anything else: BadCall.
struct Toy;

impl Handler for Toy {
    fn call(
        &self,
        method: String,
        args: Bytes,
        body: BodyStream,
    ) -> BoxFuture<'static, Result<Reply, WireError>> {
        Box::pin(async move {
            match method.as_str() {
                "echo" => Ok(Reply {
                    payload: args,
                    body: Some(body),
                }),
                "hang" => futures::future::pending().await,
                "drip" => {
                    let first = futures::stream::once(async { Ok(Bytes::from_static(b"x")) });
                    Ok(Reply {
                        payload: Bytes::new(),
                        body: Some(Box::pin(first.chain(futures::stream::pending()))),
                    })
                }
                "fail" => Err(WireError::new(WireCode::NoSuchKey, "no such key")),
                _ => Err(WireError::new(WireCode::BadCall, "unknown method")),
            }
        })
    }
}

async fn server() -> RpcServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    RpcServer::start(
        listener,
        Arc::new(Toy),
        Signer::new(SECRET),
        ServerOptions::default(),
    )
    .expect("start")
}

fn client(srv: &RpcServer) -> RpcClient {
    RpcClient::new(srv.local_addr().to_string(), Signer::new(SECRET))
}

fn short() -> CallOptions {
    CallOptions {
        deadline: Duration::from_millis(500),
        stall: Duration::from_millis(300),
    }
}

async fn collect(s: BodyStream) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut s = s;
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

fn err_of(r: Result<(Bytes, BodyStream), RpcError>) -> RpcError {
    match r {
        Ok((reply, _)) => panic!("expected an error, got a reply of {} bytes", reply.len()),
        Err(e) => e,
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from(i % 251).unwrap_or(0))
        .collect()
}

#[tokio::test]
async fn calls_stream_large_bodies_both_ways() {
    let srv = server().await;
    let c = client(&srv);
    let data = pattern(24 << 20);
    let chunks: Vec<std::io::Result<Bytes>> = data
        .chunks(256 << 10)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let (reply, body) = c
        .call(
            "echo",
            Bytes::from_static(b"args"),
            Some(Box::pin(futures::stream::iter(chunks))),
            &CallOptions::default(),
        )
        .await
        .expect("echo");
    assert_eq!(&reply[..], b"args");
    assert_eq!(collect(body).await.expect("body"), data);

    // Many calls share the one connection, at once.
    let c = Arc::new(c);
    let calls = (0..64u32).map(|i| {
        let c = Arc::clone(&c);
        async move {
            let args = Bytes::from(i.to_be_bytes().to_vec());
            let (reply, _) = c
                .call("echo", args.clone(), None, &CallOptions::default())
                .await
                .expect("echo");
            assert_eq!(reply, args);
        }
    });
    futures::future::join_all(calls).await;
    srv.stop().await;
}

#[tokio::test]
async fn typed_errors_come_back_typed() {
    let srv = server().await;
    let c = client(&srv);
    match err_of(c.call("fail", Bytes::new(), None, &short()).await) {
        RpcError::Remote(e) => assert_eq!(e.code, WireCode::NoSuchKey),
        other => panic!("expected NoSuchKey, got {other:?}"),
    }
    match err_of(c.call("nope", Bytes::new(), None, &short()).await) {
        RpcError::Remote(e) => assert_eq!(e.code, WireCode::BadCall),
        other => panic!("expected BadCall, got {other:?}"),
    }
    srv.stop().await;
}

#[tokio::test]
async fn a_caller_without_the_secret_is_refused_before_its_body_is_read() {
    let srv = server().await;
    let stranger = RpcClient::new(
        srv.local_addr().to_string(),
        Signer::new(b"not the cluster secret, but long"),
    );
    // A body that never ends: the refusal must not wait for it.
    let endless: BodyStream = Box::pin(futures::stream::pending());
    match err_of(
        stranger
            .call("echo", Bytes::new(), Some(endless), &short())
            .await,
    ) {
        RpcError::Remote(e) => assert_eq!(e.code, WireCode::Unauthorized),
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    // A plain HTTP/1 request without signature headers gets no service.
    let resp = raw_http1(srv.local_addr()).await;
    assert!(!resp.starts_with("HTTP/1.1 2"), "{resp}");
    srv.stop().await;
}

/// Whatever the node answers an HTTP/1 request (it speaks HTTP/2 only).
async fn raw_http1(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"POST /rpc/v1/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .expect("write");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn a_node_that_does_not_answer_times_out_at_the_deadline() {
    let srv = server().await;
    let c = client(&srv);
    match err_of(c.call("hang", Bytes::new(), None, &short()).await) {
        RpcError::Timeout { ms, .. } => assert_eq!(ms, 500),
        other => panic!("expected Timeout, got {other:?}"),
    }
    // The connection is still good for the next call.
    let _ = c
        .call("echo", Bytes::new(), None, &short())
        .await
        .expect("echo after a timeout");
    srv.stop().await;
}

#[tokio::test]
async fn a_stalled_reply_body_fails_with_timed_out() {
    let srv = server().await;
    let c = client(&srv);
    let (_, mut body) = c
        .call("drip", Bytes::new(), None, &short())
        .await
        .expect("drip");
    assert_eq!(&body.next().await.expect("chunk").expect("ok")[..], b"x");
    let err = body.next().await.expect("item").expect_err("stall");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    srv.stop().await;
}

#[tokio::test]
async fn a_node_that_is_down_or_silent_is_unavailable_or_times_out() {
    // Down: nothing listens on the port.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let down = RpcClient::new(port.to_string(), Signer::new(SECRET));
    let e = err_of(down.call("echo", Bytes::new(), None, &short()).await);
    assert!(matches!(e, RpcError::Unavailable { .. }), "{e:?}");

    // Cut off: the port accepts but never speaks (as a blackholed peer).
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = silent.local_addr().expect("addr");
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let cut = RpcClient::new(addr.to_string(), Signer::new(SECRET));
    let e = err_of(cut.call("echo", Bytes::new(), None, &short()).await);
    assert!(matches!(e, RpcError::Timeout { .. }), "{e:?}");
}

#[tokio::test]
async fn a_client_reconnects_after_the_node_restarts() {
    let srv = server().await;
    let addr = srv.local_addr();
    let c = RpcClient::new(addr.to_string(), Signer::new(SECRET));
    let _ = c
        .call("echo", Bytes::new(), None, &short())
        .await
        .expect("first");
    srv.stop().await;
    assert!(c.call("echo", Bytes::new(), None, &short()).await.is_err());
    let listener = tokio::net::TcpListener::bind(addr).await.expect("rebind");
    let again = RpcServer::start(
        listener,
        Arc::new(Toy),
        Signer::new(SECRET),
        ServerOptions::default(),
    )
    .expect("start");
    let _ = c
        .call("echo", Bytes::new(), None, &short())
        .await
        .expect("after restart");
    again.stop().await;
}
