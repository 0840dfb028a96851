//! Clients that disconnect mid-body.
//!
//! - [`gets`]: a signed GET of a tenant's 8 MiB object through the bench's
//!   hyper client; the first 64 KiB to 4 MiB are read and checked, then
//!   the response is dropped, which closes the connection.
//! - [`puts`]: a signed PUT over a raw socket that declares a
//!   `Content-Length` of 256 KiB to 4 MiB, sends about half of it, then
//!   closes the socket. The key is under `rogue/nope/`, which must be
//!   empty at the end: a PUT that never finished must leave no object.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use http::header::CONTENT_LENGTH;
use http_body_util::BodyExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::blob::Blob;
use super::raw;
use super::rogue::{BIG_KEY, BIG_SIZE, NOPE_PREFIX, RogueCtx, RogueTally, Target};
use crate::body::ReqBody;
use crate::client::encode_path;
use crate::error::ClientError;

/// Pause between sessions of one task.
const PAUSE: Duration = Duration::from_millis(200);

/// Runs dropped-GET sessions until the load ends.
pub async fn gets(ctx: Arc<RogueCtx>, id: u64) -> RogueTally {
    let mut t = RogueTally::default();
    let mut rng = StdRng::seed_from_u64(0xab07 ^ id);
    let mut n = id;
    while !ctx.done() {
        t.sessions += 1;
        let keep = rng.random_range(64 * 1024..4 << 20);
        match dropped_get(ctx.target(n), keep).await {
            Ok(read) => {
                t.bytes += read;
                t.seen("dropped");
            }
            Err(DropErr::Refused(e)) => t.seen(e.label()),
            Err(DropErr::Fault(msg)) => t.fault("GET", msg),
        }
        n += 1;
        tokio::time::sleep(PAUSE).await;
    }
    t
}

enum DropErr {
    Refused(ClientError),
    Fault(String),
}

/// GETs the big object, checks the first `keep` bytes, drops the rest.
async fn dropped_get(target: &Target, keep: u64) -> Result<u64, DropErr> {
    let c = &target.client;
    let path = format!("/{}/{}", encode_path(&target.bucket), encode_path(BIG_KEY));
    let req = c
        .request(Method::GET, &path, &[], ReqBody::empty())
        .map_err(|e| DropErr::Fault(e.to_string()))?;
    let read = c
        .timed(async {
            let resp = c.send(req).await?;
            let mut body = resp.into_body();
            let mut check = target.big.checker(0, BIG_SIZE);
            let mut read = 0u64;
            while read < keep {
                let Some(frame) = body.frame().await else {
                    break;
                };
                let frame = frame.map_err(|e| ClientError::Transport(e.to_string()))?;
                if let Ok(data) = frame.into_data() {
                    check.feed(&data);
                    read += data.len() as u64;
                }
            }
            if let Some(m) = check.mismatch() {
                return Err(ClientError::BadResponse(m.to_owned()));
            }
            Ok(read)
        })
        .await;
    match read {
        Ok(n) => Ok(n),
        Err(e @ ClientError::BadResponse(_)) => Err(DropErr::Fault(format!("GET {BIG_KEY}: {e}"))),
        Err(e @ ClientError::S3 { status, .. }) if status >= 500 && status != 503 => {
            Err(DropErr::Fault(format!("GET {BIG_KEY}: {e}")))
        }
        Err(e) => Err(DropErr::Refused(e)),
    }
}

/// Runs cut-PUT sessions until the load ends.
pub async fn puts(ctx: Arc<RogueCtx>, id: u64) -> RogueTally {
    let mut t = RogueTally::default();
    let mut rng = StdRng::seed_from_u64(0xc07 ^ id);
    let mut n = id;
    while !ctx.done() {
        t.sessions += 1;
        let len = rng.random_range(256 * 1024..4 << 20);
        let key = format!("{NOPE_PREFIX}cut-{id}-{n}");
        cut_put(&ctx, ctx.target(n), &key, len, &mut t).await;
        n += 1;
        tokio::time::sleep(PAUSE).await;
    }
    t
}

async fn cut_put(ctx: &RogueCtx, target: &Target, key: &str, len: u64, t: &mut RogueTally) {
    let path = format!("/{}/{}", encode_path(&target.bucket), encode_path(key));
    let blob = Blob::new(len, len);
    let headers = [(CONTENT_LENGTH, len.to_string())];
    let req = match target
        .client
        .request(Method::PUT, &path, &headers, ReqBody::empty())
    {
        Ok(r) => r,
        Err(e) => return t.fault("sign", format!("cut PUT: {e}")),
    };
    let mut stream = match raw::connect(ctx.addr, None).await {
        Ok(s) => s,
        Err(e) => return t.fault("connect", format!("cut PUT connect: {e}")),
    };
    let mut data = raw::head_bytes(&req);
    data.extend_from_slice(&blob.range(0, len / 2));
    match raw::send(&mut stream, &data, Duration::from_secs(10)).await {
        Ok(()) => t.seen("cut"),
        // The server refused early (503, quota) and closed: fine.
        Err(e) => t.seen(format!("write: {:?}", e.kind())),
    }
}
