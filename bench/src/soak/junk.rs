//! Unauthenticated junk, over raw sockets, one kind per session in turn:
//! garbage bytes; unsigned GETs and PUTs; requests signed with a wrong
//! secret or an unknown key id; an oversize header; a head that stops
//! half-way. Every one must be refused (4xx, 503, or the connection
//! closed); a 2xx would be an authentication hole and another 5xx a
//! server fault. Refused PUTs aim at `rogue/nope/`, which must stay empty.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::raw;
use super::rogue::{BIG_KEY, NOPE_PREFIX, RogueCtx, RogueTally, Target};
use crate::body::ReqBody;
use crate::client::{S3Client, encode_path};

/// Kinds of junk, in the order sessions cycle through them.
const KINDS: [&str; 8] = [
    "garbage",
    "unsigned GET",
    "wrong-secret GET",
    "unknown-key PUT",
    "oversize header",
    "half a head",
    "unsigned PUT",
    "wrong-secret PUT",
];
/// Size of the oversize header's value.
const HUGE: usize = 96 * 1024;
/// Pause between sessions of one task.
const PAUSE: Duration = Duration::from_millis(50);

/// Runs junk sessions until the load ends.
pub async fn run(ctx: Arc<RogueCtx>, id: u64) -> RogueTally {
    let mut t = RogueTally::default();
    let mut rng = StdRng::seed_from_u64(0x1u64 << 40 ^ id);
    let mut n = id;
    while !ctx.done() {
        t.sessions += 1;
        let kind = KINDS[usize::try_from(n % KINDS.len() as u64).unwrap_or(0)];
        let bytes = session_bytes(&ctx, ctx.target(n), kind, n, &mut rng);
        match bytes {
            Ok(data) => exchange(&ctx, kind, &data, &mut t).await,
            Err(e) => t.fault("build", format!("{kind}: {e}")),
        }
        n += 1;
        tokio::time::sleep(PAUSE).await;
    }
    t
}

/// The bytes a session of `kind` sends.
fn session_bytes(
    ctx: &RogueCtx,
    target: &Target,
    kind: &str,
    n: u64,
    rng: &mut StdRng,
) -> Result<Vec<u8>, String> {
    let big = format!("/{}/{}", encode_path(&target.bucket), encode_path(BIG_KEY));
    let nope = format!(
        "/{}/{}",
        encode_path(&target.bucket),
        encode_path(&format!("{NOPE_PREFIX}junk-{n}"))
    );
    let body = Bytes::from(vec![b'j'; 4096]);
    let host = ctx.addr.to_string();
    Ok(match kind {
        "garbage" => {
            let len = rng.random_range(64..4096);
            (0..len).map(|_| rng.random::<u8>()).collect()
        }
        "unsigned GET" => unsigned(&host, Method::GET, &big, Bytes::new())?,
        "wrong-secret GET" => signed(&target.forger, Method::GET, &big, Bytes::new())?,
        "unknown-key PUT" => signed(&ctx.stranger, Method::PUT, &nope, body)?,
        "oversize header" => {
            let mut head = format!("GET {big} HTTP/1.1\r\nhost: {host}\r\nx-junk: ").into_bytes();
            head.extend(std::iter::repeat_n(b'a', HUGE));
            head.extend_from_slice(b"\r\n\r\n");
            head
        }
        "half a head" => format!("GET {big} HTTP/1.1\r\nhost: {host}\r\nx-amz-da").into_bytes(),
        "unsigned PUT" => unsigned(&host, Method::PUT, &nope, body)?,
        _ => signed(&target.forger, Method::PUT, &nope, body)?,
    })
}

fn unsigned(host: &str, method: Method, path: &str, body: Bytes) -> Result<Vec<u8>, String> {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host)
        .header("content-length", body.len())
        .body(())
        .map_err(|e| e.to_string())?;
    let mut out = raw::head_bytes(&req);
    out.extend_from_slice(&body);
    Ok(out)
}

fn signed(c: &S3Client, method: Method, path: &str, body: Bytes) -> Result<Vec<u8>, String> {
    let req = c
        .request(method, path, &[], ReqBody::full(body.clone()))
        .map_err(|e| e.to_string())?;
    let mut out = raw::head_bytes(&req);
    out.extend_from_slice(&body);
    Ok(out)
}

/// Sends `data` on a new connection and judges the answer.
async fn exchange(ctx: &RogueCtx, kind: &str, data: &[u8], t: &mut RogueTally) {
    let mut stream = match raw::connect(ctx.addr, None).await {
        Ok(s) => s,
        Err(e) => return t.fault("connect", format!("{kind} connect: {e}")),
    };
    if raw::send(&mut stream, data, Duration::from_secs(10))
        .await
        .is_err()
    {
        return t.seen(format!("{kind}: closed while sending"));
    }
    if kind == "half a head" {
        tokio::time::sleep(Duration::from_secs(1)).await;
        return t.seen(format!("{kind}: abandoned"));
    }
    match raw::read_head(&mut stream, Duration::from_secs(10)).await {
        Ok(Some(head)) => t.refused_with(kind, head.status),
        Ok(None) => t.seen(format!("{kind}: closed")),
        Err(e) => t.seen(format!("{kind}: no answer ({:?})", e.kind())),
    }
}
