//! Leases: a permit held by a consumer that stops coming back (a client
//! that does not read its response) is given back after `max_hold`, so it
//! cannot keep the shared capacity from other tenants.
//!
//! These run on tokio's paused clock: the reaper's sleeps are virtual.

use std::time::Duration;

use bytes::Bytes;
use futures::{FutureExt, StreamExt, stream};
use laneway_qos::{Lanes, LanesConfig, TenantKey, pace};

const HOLD: Duration = Duration::from_millis(5);

fn lanes(capacity: u64) -> Lanes {
    Lanes::new(LanesConfig {
        capacity_units: capacity,
        base_cost: 100,
        max_hold: HOLD,
        ..LanesConfig::default()
    })
}

/// Lets the reaper run past `d` of virtual time.
async fn pass(d: Duration) {
    tokio::time::sleep(d).await;
    tokio::task::yield_now().await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_gives_its_units_back_after_max_hold() {
    let lanes = lanes(100);
    let a = TenantKey::new("a");
    let lease = lanes.lease(lanes.admit(&a, 100).await.expect("admitted"));
    assert_eq!(lanes.snapshot().in_flight_units, 100);
    // Another tenant waits: the capacity is all leased.
    let b = TenantKey::new("b");
    let waiting = tokio::spawn({
        let lanes = lanes.clone();
        async move { lanes.admit(&b, 100).await.map(|p| p.cost()) }
    });
    pass(HOLD / 2).await;
    assert!(lease.is_held(), "held while within max_hold");
    assert!(!waiting.is_finished());
    pass(HOLD).await;
    assert!(!lease.is_held(), "expired");
    assert_eq!(waiting.await.expect("task"), Ok(100), "b was granted");
    assert_eq!(lanes.snapshot().in_flight_units, 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_lease_releases_at_once_and_expiry_after_is_harmless() {
    let lanes = lanes(100);
    let a = TenantKey::new("a");
    let lease = lanes.lease(lanes.admit(&a, 60).await.expect("admitted"));
    drop(lease);
    assert_eq!(lanes.snapshot().in_flight_units, 0);
    // A new permit taken after the drop is not released by the old
    // lease's deadline.
    let held = lanes.admit(&a, 60).await.expect("admitted");
    pass(HOLD * 3).await;
    assert_eq!(lanes.snapshot().in_flight_units, 60);
    drop(held);
    assert_eq!(lanes.snapshot().in_flight_units, 0);
}

#[tokio::test(start_paused = true)]
async fn many_leases_expire_in_order() {
    let lanes = lanes(1 << 20);
    let a = TenantKey::new("a");
    let mut leases = Vec::new();
    for _ in 0..50 {
        leases.push(lanes.lease(lanes.admit(&a, 100).await.expect("admitted")));
        pass(Duration::from_micros(100)).await;
    }
    assert!(leases.last().is_some_and(|l| l.is_held()));
    pass(HOLD).await;
    assert!(leases.iter().all(|l| !l.is_held()));
    assert_eq!(lanes.snapshot().in_flight_units, 0);
}

#[tokio::test(start_paused = true)]
async fn a_paced_chunk_that_is_never_sent_does_not_hold_the_capacity() {
    // One chunk is the whole capacity: a response whose client stopped
    // reading after the first chunk.
    let lanes = lanes(64 * 1024);
    let a = TenantKey::new("a");
    let pieces = vec![Ok::<_, std::io::Error>(Bytes::from(vec![7u8; 256 * 1024]))];
    let mut paced = Box::pin(pace(lanes.clone(), a, stream::iter(pieces), 64 * 1024));
    let first = paced.next().await.expect("a chunk").expect("no error");
    assert_eq!(first.len(), 64 * 1024);
    assert_eq!(lanes.snapshot().in_flight_units, 64 * 1024);
    // The consumer does not come back; another tenant's request must not
    // wait for it beyond max_hold.
    pass(HOLD * 2).await;
    assert_eq!(lanes.snapshot().in_flight_units, 0);
    let b = TenantKey::new("b");
    let permit = lanes.admit(&b, 100).now_or_never();
    assert!(matches!(permit, Some(Ok(_))), "b admitted at once");
    drop(permit);
    // The stream still works when its consumer comes back.
    let rest: usize = paced
        .map(|r| r.expect("no error").len())
        .fold(0, |a, n| async move { a + n })
        .await;
    assert_eq!(rest, 192 * 1024);
}

#[test]
fn outside_a_runtime_a_lease_is_held_until_dropped() {
    let lanes = lanes(100);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let permit = rt.block_on(lanes.admit(&TenantKey::new("a"), 10));
    let lease = lanes.lease(permit.expect("admitted"));
    assert!(lease.is_held());
    drop(lease);
    assert_eq!(lanes.snapshot().in_flight_units, 0);
}
