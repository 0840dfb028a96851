//! Slow and stalled readers: a signed GET of a tenant's 8 MiB object over
//! a raw socket with an 8 KiB receive buffer, then either 4 KiB a second
//! (even ids) or nothing at all (odd ids), for the hold time; then the
//! connection is dropped and a new one opened, as another tenant.
//!
//! The bytes that do arrive are checked against the object. The server
//! may answer 503 (the tenant's lane is busy) or end a stalled download
//! (its stall timeout); both are fine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use tokio::io::AsyncReadExt;

use super::raw;
use super::rogue::{BIG_KEY, BIG_SIZE, RogueCtx, RogueTally, Target};
use crate::body::ReqBody;
use crate::client::encode_path;

/// Receive buffer of a slow reader's socket.
const RCVBUF: u32 = 8 * 1024;
/// Read pacing: up to `STEP_BYTES` every `STEP`, 4 KiB/s.
const STEP: Duration = Duration::from_millis(250);
const STEP_BYTES: usize = 1024;

/// Runs slow-reader sessions until the load ends.
pub async fn run(ctx: Arc<RogueCtx>, id: u64) -> RogueTally {
    let mut t = RogueTally::default();
    let mut n = id;
    while !ctx.done() {
        t.sessions += 1;
        session(&ctx, ctx.target(n), id % 2 == 1, &mut t).await;
        n += 1;
    }
    t
}

async fn session(ctx: &RogueCtx, target: &Target, stalled: bool, t: &mut RogueTally) {
    let path = format!("/{}/{}", encode_path(&target.bucket), encode_path(BIG_KEY));
    let req = match target
        .client
        .request(Method::GET, &path, &[], ReqBody::empty())
    {
        Ok(r) => r,
        Err(e) => return t.fault("sign", format!("slow reader: {e}")),
    };
    let mut stream = match raw::connect(ctx.addr, Some(RCVBUF)).await {
        Ok(s) => s,
        Err(e) => return t.fault("connect", format!("slow reader connect: {e}")),
    };
    if let Err(e) = raw::send(&mut stream, &raw::head_bytes(&req), Duration::from_secs(10)).await {
        return t.seen(format!("write: {:?}", e.kind()));
    }
    let head = match raw::read_head(&mut stream, Duration::from_secs(30)).await {
        Ok(Some(h)) => h,
        Ok(None) => return t.seen("closed before answer"),
        Err(e) => return t.seen(format!("head: {:?}", e.kind())),
    };
    match head.status {
        200 => {}
        503 => return t.seen("503"),
        s => return t.fault(s.to_string(), format!("slow reader GET {BIG_KEY}: {s}")),
    }
    let mut check = target.big.checker(0, BIG_SIZE);
    check.feed(&head.leftover);
    t.bytes += head.leftover.len() as u64;
    let end = (Instant::now() + ctx.hold).min(ctx.stop);
    if stalled {
        tokio::time::sleep_until(end.into()).await;
        t.seen("stalled");
    } else if trickle(&mut stream, end, &mut check, t).await {
        t.seen("ended by server");
    } else {
        t.seen("read slowly");
    }
    if let Some(m) = check.mismatch() {
        t.fault("wrong bytes", format!("slow reader {BIG_KEY}: {m}"));
    }
}

/// Reads 4 KiB/s until `end`; true if the server closed the stream first.
async fn trickle(
    stream: &mut tokio::net::TcpStream,
    end: Instant,
    check: &mut super::blob::Checker,
    t: &mut RogueTally,
) -> bool {
    let mut buf = [0u8; STEP_BYTES];
    let mut tick = tokio::time::interval(STEP);
    while Instant::now() < end {
        tick.tick().await;
        match tokio::time::timeout(STEP, stream.read(&mut buf)).await {
            Err(_) => {}
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(n)) => {
                check.feed(&buf[..n]);
                t.bytes += n as u64;
            }
        }
    }
    false
}
