//! The async wrapper: admission, waiting, refusals, caps, release.
//!
//! Every test runs on a current-thread tokio runtime with paused time, so
//! waits are on tokio's virtual clock (which jumps ahead whenever every
//! task is idle) and nothing depends on how fast the machine is. Ordering
//! between tasks is forced with [`settle`], which yields until the spawned
//! waiters have reached the scheduler.

use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use laneway_qos::{Caps, Lanes, LanesConfig, Mode, OverloadReason, TenantKey, Weight};
use tokio::time::Instant;

fn lanes(capacity: u64, max_queue: usize) -> Lanes {
    Lanes::new(LanesConfig {
        capacity_units: capacity,
        max_queue_per_tenant: max_queue,
        max_wait: Duration::from_secs(2),
        retry_after: Duration::from_secs(3),
        ..LanesConfig::default()
    })
}

/// Yields until `queued` requests are waiting (bounded, so a bug fails
/// the assertion instead of hanging).
async fn settle(lanes: &Lanes, queued: usize) {
    for _ in 0..100 {
        if lanes.snapshot().queue_depth == queued {
            return;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(lanes.snapshot().queue_depth, queued, "waiters never queued");
}

fn key(name: &str) -> TenantKey {
    TenantKey::new(name)
}

#[tokio::test(start_paused = true)]
async fn free_capacity_admits_at_once_and_drop_releases() {
    let lanes = lanes(100, 4);
    let t = key("a");
    let p = lanes.admit(&t, 60).await.expect("admitted");
    assert_eq!(p.cost(), 60);
    let snap = lanes.snapshot();
    assert_eq!(snap.in_flight_units, 60);
    assert_eq!(snap.tenants[0].served_units, 60);
    assert_eq!(snap.tenants[0].total_queue_wait, Duration::ZERO);
    drop(p);
    assert_eq!(lanes.snapshot().in_flight_units, 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_permit_wakes_the_next_waiter() {
    let lanes = lanes(10, 4);
    let held = lanes.admit(&key("a"), 10).await.expect("admitted");
    let waiter = {
        let lanes = lanes.clone();
        tokio::spawn(async move { lanes.admit(&key("b"), 5).await })
    };
    settle(&lanes, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(held);
    let permit = waiter
        .await
        .expect("joined")
        .expect("granted after release");
    assert_eq!(permit.cost(), 5);
    let snap = lanes.snapshot();
    assert_eq!(snap.in_flight_units, 5);
    let b = &snap.tenants[1];
    assert_eq!(b.tenant, key("b"));
    assert_eq!(b.total_queue_wait, Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn waiting_past_max_wait_is_overloaded() {
    let lanes = lanes(10, 4);
    let _held = lanes.admit(&key("a"), 10).await.expect("admitted");
    let start = Instant::now();
    let err = lanes.admit(&key("b"), 1).await.expect_err("times out");
    assert_eq!(err.reason, OverloadReason::WaitTimeout);
    assert_eq!(err.retry_after, Duration::from_secs(3));
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    let snap = lanes.snapshot();
    assert_eq!(snap.queue_depth, 0, "the timed-out ticket was withdrawn");
    let b = &snap.tenants[1];
    assert_eq!((b.rejected_wait_timeout, b.cancelled, b.granted), (1, 0, 0));
    assert_eq!(b.total_queue_wait, Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn full_lane_is_overloaded_at_once() {
    let lanes = lanes(10, 2);
    let _held = lanes.admit(&key("a"), 10).await.expect("admitted");
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let lanes = lanes.clone();
        waiters.push(tokio::spawn(async move { lanes.admit(&key("b"), 1).await }));
    }
    settle(&lanes, 2).await;
    let start = Instant::now();
    let err = lanes.admit(&key("b"), 1).await.expect_err("lane full");
    assert_eq!(err.reason, OverloadReason::QueueFull);
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Another tenant still queues.
    let other = {
        let lanes = lanes.clone();
        tokio::spawn(async move { lanes.admit(&key("c"), 1).await })
    };
    settle(&lanes, 3).await;
    assert_eq!(lanes.snapshot().tenants[1].rejected_queue_full, 1);
    for w in waiters {
        w.abort();
    }
    other.abort();
}

#[tokio::test(start_paused = true)]
async fn abandoned_wait_gives_its_place_back() {
    let lanes = lanes(10, 4);
    let held = lanes.admit(&key("a"), 10).await.expect("admitted");
    let waiter = {
        let lanes = lanes.clone();
        tokio::spawn(async move { lanes.admit(&key("b"), 10).await })
    };
    settle(&lanes, 1).await;
    waiter.abort();
    assert!(waiter.await.expect_err("aborted").is_cancelled());
    let snap = lanes.snapshot();
    assert_eq!(snap.queue_depth, 0);
    assert_eq!(snap.tenants[1].cancelled, 1);
    drop(held);
    // No units leaked: the whole capacity is free again.
    let p = lanes.admit(&key("c"), 10).await.expect("admitted");
    assert_eq!(lanes.snapshot().in_flight_units, p.cost());
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_weighted_fair_order() {
    let lanes = lanes(1, 16);
    lanes.update_tenant(&key("heavy"), Weight::new(3).expect("w"), Caps::NONE);
    let held = lanes.admit(&key("x"), 1).await.expect("admitted");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Each spawned task queues in turn (settle), so the arrival order is
    // fixed: all light ones first, then all heavy ones.
    for (name, n) in [("light", 4), ("heavy", 8)] {
        for _ in 0..n {
            let handle = lanes.clone();
            let tx = tx.clone();
            let queued = lanes.snapshot().queue_depth;
            tokio::spawn(async move {
                let p = handle.admit(&key(name), 1).await.expect("granted");
                tx.send(name).expect("receiver alive");
                drop(p);
            });
            settle(&lanes, queued + 1).await;
        }
    }
    drop(held);
    let mut order = Vec::new();
    for _ in 0..12 {
        order.push(rx.recv().await.expect("grant"));
    }
    // Equal start tags go to the older request; after that, three heavy
    // grants per light one.
    assert_eq!(
        order,
        [
            "light", "heavy", "heavy", "heavy", "light", "heavy", "heavy", "heavy", "light",
            "heavy", "heavy", "light"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn request_cap_refuses_at_once_with_hint() {
    let lanes = lanes(1000, 4);
    let t = key("capped");
    let caps = Caps {
        requests_per_sec: NonZeroU32::new(2),
        bytes_per_sec: None,
    };
    lanes.update_tenant(&t, Weight::ONE, caps);
    drop(lanes.admit(&t, 1).await.expect("first"));
    drop(lanes.admit(&t, 1).await.expect("second"));
    let err = lanes.admit(&t, 1).await.expect_err("over 2/s");
    assert_eq!(err.reason, OverloadReason::RequestRate);
    assert!(err.retry_after > Duration::ZERO);
    assert!(err.retry_after <= Duration::from_millis(500));
    assert_eq!(err.retry_after_secs(), 1);
    // Others are not capped.
    drop(lanes.admit(&key("free"), 1).await.expect("uncapped"));
    tokio::time::advance(err.retry_after).await;
    drop(lanes.admit(&t, 1).await.expect("after the hint"));
    let snap = lanes.snapshot();
    let capped = snap.tenants.iter().find(|s| s.tenant == t).expect("tenant");
    assert_eq!(capped.rejected_request_rate, 1);
    assert_eq!(capped.caps, caps);
}

#[tokio::test(start_paused = true)]
async fn caps_and_weights_update_at_runtime() {
    let lanes = lanes(1000, 4);
    let t = key("t");
    let one = Caps {
        requests_per_sec: NonZeroU32::new(1),
        bytes_per_sec: NonZeroU64::new(1024),
    };
    lanes.update_tenant(&t, Weight::ONE, one);
    drop(lanes.admit(&t, 1).await.expect("first"));
    assert!(lanes.admit(&t, 1).await.is_err());
    // Same caps again: the limiter keeps its state.
    lanes.update_tenant(&t, Weight::ONE, one);
    assert!(lanes.admit(&t, 1).await.is_err());
    // Caps lifted, weight raised.
    let w = Weight::new(7).expect("w");
    lanes.update_tenant(&t, w, Caps::NONE);
    for _ in 0..10 {
        drop(lanes.admit(&t, 1).await.expect("uncapped"));
    }
    let snap = lanes.snapshot();
    assert_eq!(snap.tenants[0].weight, w);
    assert_eq!(snap.tenants[0].caps, Caps::NONE);
}

#[tokio::test(start_paused = true)]
async fn lanes_off_admits_everything_at_once() {
    let lanes = Lanes::new(LanesConfig {
        capacity_units: 1,
        ..LanesConfig::off()
    });
    let t = key("a");
    let mut permits = Vec::new();
    for _ in 0..100 {
        permits.push(lanes.admit(&t, 1 << 30).await.expect("bypass"));
    }
    let snap = lanes.snapshot();
    assert_eq!(snap.mode, Mode::Off);
    assert_eq!((snap.in_flight_units, snap.queue_depth), (0, 0));
}

#[test]
fn handles_and_futures_are_send() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    fn assert_send<T: Send>(_: &T) {}
    let lanes = Lanes::new(LanesConfig::default());
    assert_send_sync(&lanes);
    let t = key("a");
    let fut = lanes.admit(&t, 1);
    assert_send(&fut);
}
