//! Unit tests of the connection table and the watchdog's verdicts.

use super::*;

fn cfg() -> ConnConfig {
    tests_cfg()
}

const S: u64 = 1000;

#[test]
fn a_fresh_connection_has_the_header_timeout() {
    let c = ConnState::new(Instant::now());
    let t0 = c.accepted;
    assert_eq!(c.verdict(t0 + 9 * S, &cfg()), None);
    assert_eq!(c.verdict(t0 + 10 * S, &cfg()), Some(Verdict::HeaderTimeout));
}

#[test]
fn an_idle_connection_has_the_idle_timeout_and_a_next_header_the_header_timeout() {
    let c = Arc::new(ConnState::new(Instant::now()));
    drop(c.begin_request(http::Version::HTTP_11));
    let idle = c.idle_since.load(Ordering::Relaxed);
    assert_eq!(c.verdict(idle + 59 * S, &cfg()), None);
    assert_eq!(c.verdict(idle + 60 * S, &cfg()), Some(Verdict::IdleTimeout));
    c.head_started.store(idle + 5 * S, Ordering::Relaxed);
    assert_eq!(c.verdict(idle + 14 * S, &cfg()), None);
    assert_eq!(
        c.verdict(idle + 15 * S, &cfg()),
        Some(Verdict::HeaderTimeout)
    );
}

#[test]
fn a_busy_connection_is_closed_only_when_the_client_stops_taking_the_response() {
    let c = Arc::new(ConnState::new(Instant::now()));
    let flight = c.begin_request(http::Version::HTTP_2);
    let t0 = c.accepted;
    assert_eq!(
        c.verdict(t0 + 100 * S, &cfg()),
        None,
        "a slow handler is not a stall"
    );
    flight.yielded();
    let since = *c.waiting.lock().values().next().expect("waiting");
    assert_eq!(c.verdict(since + 29 * S, &cfg()), None);
    assert_eq!(
        c.verdict(since + 30 * S, &cfg()),
        Some(Verdict::ResponseStall)
    );
    flight.polled();
    assert_eq!(c.verdict(since + 30 * S, &cfg()), None);
    // Another response of the connection moving keeps a waiting one alive
    // (an HTTP/2 stream waiting for the shared window).
    let other = c.begin_request(http::Version::HTTP_2);
    other.yielded();
    let moved = c.now() + 20 * S;
    c.progress.store(moved, Ordering::Relaxed);
    assert_eq!(c.verdict(moved + 29 * S, &cfg()), None);
    assert_eq!(
        c.verdict(moved + 30 * S, &cfg()),
        Some(Verdict::ResponseStall)
    );
    drop(other);
    c.write_blocked(true);
    let blocked = c.write_blocked.load(Ordering::Relaxed);
    assert_eq!(
        c.verdict(blocked + 30 * S, &cfg()),
        Some(Verdict::ResponseStall)
    );
    c.write_blocked(false);
    assert_eq!(c.verdict(blocked + 30 * S, &cfg()), None);
    drop(flight);
    assert!(c.evictable());
}

#[test]
fn a_full_table_evicts_the_oldest_idle_connection_never_a_busy_one() {
    let table = ConnTable::new(cfg(), 2);
    let busy = table.admit().expect("room");
    let _flight = busy.state().begin_request(http::Version::HTTP_11);
    let idle = table.admit().expect("room");
    let newcomer = table.admit().expect("evicts the idle one");
    assert!(idle.state().evicted.load(Ordering::Relaxed));
    assert!(!busy.state().evicted.load(Ordering::Relaxed));
    assert_eq!(table.len(), 2);
    let _flight2 = newcomer.state().begin_request(http::Version::HTTP_11);
    assert!(table.admit().is_none(), "every connection busy");
    drop(idle);
    assert_eq!(table.len(), 2);
    drop(newcomer);
    assert_eq!(table.len(), 1);
}
