//! Paced body streams: re-chunking, per-chunk grants, release on the next
//! poll, waiting for capacity, errors, and the bytes/s cap.
//!
//! Like `lanes.rs`, these run on tokio's paused clock; elapsed times below
//! are virtual and exact.

use std::io;
use std::num::NonZeroU64;
use std::time::Duration;

use bytes::Bytes;
use futures::{FutureExt, Stream, StreamExt, stream};
use laneway_qos::{Caps, Lanes, LanesConfig, OverloadReason, Overloaded, TenantKey, Weight, pace};
use tokio::time::Instant;

const KIB: usize = 1024;

fn lanes(capacity: u64) -> Lanes {
    Lanes::new(LanesConfig {
        capacity_units: capacity,
        stream_max_wait: Duration::from_secs(10),
        ..LanesConfig::default()
    })
}

/// A stream of pieces of the given sizes, filled with a running counter so
/// that reordering or loss shows.
fn body(
    sizes: &[usize],
) -> (
    Vec<u8>,
    impl Stream<Item = Result<Bytes, io::Error>> + use<>,
) {
    let mut all = Vec::new();
    let mut pieces = Vec::new();
    for &n in sizes {
        let piece: Vec<u8> = (all.len()..all.len() + n)
            .map(|i| u8::try_from(i % 251).expect("below 251"))
            .collect();
        all.extend_from_slice(&piece);
        pieces.push(Ok(Bytes::from(piece)));
    }
    (all, stream::iter(pieces))
}

fn overloaded_of(e: &io::Error) -> Overloaded {
    *e.get_ref()
        .and_then(|inner| inner.downcast_ref::<Overloaded>())
        .expect("an Overloaded inside")
}

#[tokio::test(start_paused = true)]
async fn rechunks_without_losing_or_reordering_bytes() {
    let lanes = lanes(1 << 30);
    let t = TenantKey::new("t");
    let (all, inner) = body(&[1000, 300 * KIB, 5, 0, 70 * KIB, 64 * KIB]);
    let chunk = 64 * KIB;
    let out: Vec<Bytes> = pace(lanes.clone(), t, inner, chunk)
        .map(|r| r.expect("no error"))
        .collect()
        .await;
    assert!(out.iter().all(|b| !b.is_empty() && b.len() <= chunk));
    assert_eq!(out.concat(), all);
    let snap = lanes.snapshot();
    let total = u64::try_from(all.len()).expect("fits");
    assert_eq!(snap.tenants[0].served_units, total);
    assert_eq!(snap.tenants[0].granted, total.div_ceil(64 * 1024));
    assert_eq!(snap.in_flight_units, 0);
}

#[tokio::test(start_paused = true)]
async fn a_chunk_holds_its_units_until_the_next_poll() {
    let lanes = lanes(1 << 30);
    let (_, inner) = body(&[100 * KIB]);
    let mut paced = Box::pin(pace(lanes.clone(), TenantKey::new("t"), inner, 64 * KIB));
    let first = paced.next().await.expect("item").expect("ok");
    assert_eq!(first.len(), 64 * KIB);
    assert_eq!(lanes.snapshot().in_flight_units, 64 * 1024);
    let second = paced.next().await.expect("item").expect("ok");
    assert_eq!(second.len(), 36 * KIB);
    assert_eq!(lanes.snapshot().in_flight_units, 36 * 1024);
    assert!(paced.next().await.is_none());
    assert_eq!(lanes.snapshot().in_flight_units, 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_releases_its_chunk() {
    let lanes = lanes(1 << 30);
    let (_, inner) = body(&[100 * KIB]);
    let mut paced = Box::pin(pace(lanes.clone(), TenantKey::new("t"), inner, 64 * KIB));
    let _ = paced.next().await;
    assert_eq!(lanes.snapshot().in_flight_units, 64 * 1024);
    drop(paced);
    assert_eq!(lanes.snapshot().in_flight_units, 0);
}

#[tokio::test(start_paused = true)]
async fn chunks_wait_for_capacity_held_by_another_stream() {
    let lanes = lanes(64 * 1024);
    let (_, a_body) = body(&[128 * KIB]);
    let (_, b_body) = body(&[64 * KIB]);
    let mut a = Box::pin(pace(lanes.clone(), TenantKey::new("a"), a_body, 64 * KIB));
    let mut b = Box::pin(pace(lanes.clone(), TenantKey::new("b"), b_body, 64 * KIB));
    let _ = a.next().await.expect("a's first chunk");
    // b's chunk cannot be granted while a holds the whole capacity.
    assert!(b.next().now_or_never().is_none());
    assert_eq!(lanes.snapshot().queue_depth, 1);
    // a coming back for more releases its chunk; b's (older) request wins.
    assert!(a.next().now_or_never().is_none());
    let got = b.next().await.expect("item").expect("ok");
    assert_eq!(got.len(), 64 * KIB);
    drop(b);
    let _ = a.next().await.expect("a's second chunk").expect("ok");
}

#[tokio::test(start_paused = true)]
async fn a_chunk_waiting_too_long_ends_the_stream() {
    let lanes = lanes(64 * 1024);
    let _held = lanes
        .admit(&TenantKey::new("x"), 64 * 1024)
        .await
        .expect("admitted");
    let (_, inner) = body(&[10 * KIB, 10 * KIB]);
    let mut paced = Box::pin(pace(lanes.clone(), TenantKey::new("t"), inner, 16 * KIB));
    let start = Instant::now();
    let err = paced.next().await.expect("item").expect_err("timed out");
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(overloaded_of(&err).reason, OverloadReason::WaitTimeout);
    assert!(paced.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn inner_error_comes_after_the_bytes_before_it() {
    let lanes = lanes(1 << 30);
    let items = vec![
        Ok(Bytes::from_static(b"hello")),
        Err(io::Error::other("client went away")),
        Ok(Bytes::from_static(b"never")),
    ];
    let mut paced = Box::pin(pace(lanes, TenantKey::new("t"), stream::iter(items), 1024));
    assert_eq!(paced.next().await.expect("item").expect("ok"), "hello");
    let err = paced.next().await.expect("item").expect_err("inner error");
    assert_eq!(err.to_string(), "client went away");
    assert!(paced.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn byte_cap_paces_the_stream_and_refuses_new_requests() {
    let lanes = lanes(1 << 30);
    let t = TenantKey::new("t");
    let caps = Caps {
        requests_per_sec: None,
        bytes_per_sec: NonZeroU64::new(64 * 1024),
    };
    lanes.update_tenant(&t, Weight::ONE, caps);
    let (all, inner) = body(&[256 * KIB]);
    let mut paced = Box::pin(pace(lanes.clone(), t.clone(), inner, 64 * KIB));
    let start = Instant::now();
    let mut got = vec![paced.next().await.expect("item").expect("ok")];
    // The burst (one second's worth) is spent: the next chunk sleeps, and
    // meanwhile the tenant's new requests are refused.
    assert!(paced.next().now_or_never().is_none());
    let err = lanes.admit(&t, 1).await.expect_err("throttled");
    assert_eq!(err.reason, OverloadReason::ByteRate);
    assert_eq!(err.retry_after, Duration::from_secs(1));
    while let Some(piece) = paced.next().await {
        got.push(piece.expect("ok"));
    }
    assert_eq!(got.concat(), all);
    // 256 KiB at 64 KiB/s with a 64 KiB burst: three seconds.
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    let snap = lanes.snapshot();
    assert_eq!(snap.tenants[0].rejected_byte_rate, 1);
}

#[tokio::test(start_paused = true)]
async fn lanes_off_passes_bytes_through() {
    let lanes = Lanes::new(LanesConfig {
        capacity_units: 1,
        ..LanesConfig::off()
    });
    let (all, inner) = body(&[10 * KIB, 300 * KIB]);
    let out: Vec<Bytes> = pace(lanes.clone(), TenantKey::new("t"), inner, 64 * KIB)
        .map(|r| r.expect("no error"))
        .collect()
        .await;
    assert_eq!(out.concat(), all);
    assert_eq!(lanes.snapshot().in_flight_units, 0);
}

#[tokio::test(start_paused = true)]
async fn boxed_std_errors_carry_overloaded() {
    type StdError = Box<dyn std::error::Error + Send + Sync>;
    let lanes = lanes(1);
    let _held = lanes
        .admit(&TenantKey::new("x"), 1)
        .await
        .expect("admitted");
    let items: Vec<Result<Bytes, StdError>> = vec![Ok(Bytes::from_static(b"abc"))];
    let mut paced = Box::pin(pace(lanes, TenantKey::new("t"), stream::iter(items), 1024));
    let err = paced.next().await.expect("item").expect_err("timed out");
    let o = err.downcast_ref::<Overloaded>().expect("an Overloaded");
    assert_eq!(o.reason, OverloadReason::WaitTimeout);
}
