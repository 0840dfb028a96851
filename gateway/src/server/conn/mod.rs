//! Connections: every accepted socket has a place in a bounded table, a
//! header deadline, an idle deadline and stall deadlines, so slow or idle
//! clients cost only their own connection and can never fill the
//! descriptor table.
//!
//! - [`ConnTable`] holds at most `cap` connections (`--max-connections`,
//!   or derived from `RLIMIT_NOFILE` by [`fds`]). When it is full, a new
//!   connection evicts the *oldest evictable* one: a connection with no
//!   request in flight (one that has not yet sent a complete request
//!   header, or is idle between requests). So 2,000 slowloris sockets
//!   cannot lock out a real client: each new socket pushes the oldest
//!   idle one out. Only when every connection has a request in flight is
//!   the new one closed at once.
//! - [`ConnState`] is what the table and the connection's watchdog know of
//!   one connection: requests in flight ([`InFlight`] guards, held by the
//!   response body until hyper drops it), when it went idle, when the
//!   client started its next request header (HTTP/1), since when a write
//!   to the socket has been blocked ([`io::Tracked`]) and since when
//!   response bodies wait to be polled again ([`body::ConnBody`]).
//! - [`supervise`] runs a connection's future beside its watchdog, which
//!   drops it (closing the socket) on eviction or when a deadline passes:
//!   no complete request header within the header timeout of the accept
//!   (TLS handshake included) or of the first byte of a next request on a
//!   kept-alive HTTP/1 connection; no request for the idle timeout; a
//!   response the client does not take for the stall timeout (hyper
//!   blocked on the socket, or a response body hyper has not asked for
//!   more of, as behind a closed HTTP/2 flow-control window). A request
//!   body the client stops sending fails by itself ([`crate::server::unread`]).
//!
//! hyper's own HTTP/1 `header_read_timeout` is not used: it starts when
//! hyper begins waiting for a request head, so on a kept-alive connection
//! it would also cut idle time down to the header timeout.

pub mod accept;
pub mod body;
pub mod fds;
pub mod io;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The timeouts and limits of connections (flags in [`crate::config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnConfig {
    /// Longest wait for a complete request header (and TLS handshake).
    pub header_timeout: Duration,
    /// Longest a connection may stay open with no request.
    pub idle_timeout: Duration,
    /// Longest a request or response body may make no progress.
    pub stall_timeout: Duration,
    /// Connections at once; `None`: derived from `RLIMIT_NOFILE`.
    pub max_connections: Option<usize>,
    /// HTTP/2 streams at once per connection.
    pub h2_max_streams: u32,
    /// HTTP/2 keep-alive ping interval, and how long its ack may take.
    pub h2_keepalive: Duration,
}

/// Why a connection was closed by the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No complete request header in time.
    HeaderTimeout,
    /// No request for the idle timeout.
    IdleTimeout,
    /// The client did not take the response for the stall timeout.
    ResponseStall,
    /// Pushed out of a full table by a new connection.
    Evicted,
}

/// Milliseconds since the table's epoch, plus one: 0 means "never".
fn stamp(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One connection, as its watchdog and the table see it.
pub struct ConnState {
    epoch: Instant,
    accepted: u64,
    in_flight: AtomicU32,
    served: AtomicU64,
    http2: AtomicBool,
    /// When in-flight requests last went to zero (0: never).
    idle_since: AtomicU64,
    /// First byte read while idle: a next request header has begun.
    head_started: AtomicU64,
    /// Since when a socket write has been pending (0: not blocked).
    write_blocked: AtomicU64,
    /// Response bodies waiting for hyper to poll them (for their first
    /// frame, or again after yielding one): body id -> since.
    waiting: Mutex<HashMap<u64, u64>>,
    /// When a response body was last polled or yielded: the connection's
    /// responses are moving. An HTTP/2 stream may wait for the shared
    /// window while the client reads others; only a connection none of
    /// whose responses moves for the stall timeout is stalled.
    progress: AtomicU64,
    next_body: AtomicU64,
    evicted: AtomicBool,
    kill: Notify,
}

impl ConnState {
    fn new(epoch: Instant) -> ConnState {
        ConnState {
            epoch,
            accepted: stamp(epoch),
            in_flight: AtomicU32::new(0),
            served: AtomicU64::new(0),
            http2: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(0),
            write_blocked: AtomicU64::new(0),
            waiting: Mutex::new(HashMap::new()),
            progress: AtomicU64::new(0),
            next_body: AtomicU64::new(1),
            evicted: AtomicBool::new(false),
            kill: Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        stamp(self.epoch)
    }

    /// A request's header is complete and its handling begins; the guard
    /// ends it (moved into the response body).
    pub fn begin_request(self: &Arc<Self>, version: http::Version) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.served.fetch_add(1, Ordering::Relaxed);
        self.head_started.store(0, Ordering::Relaxed);
        if version == http::Version::HTTP_2 {
            self.http2.store(true, Ordering::Relaxed);
        }
        InFlight {
            conn: Arc::clone(self),
            body: self.next_body.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Bytes came from the client (the IO wrapper calls this).
    fn read_some(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let now = self.now();
            let _ = self
                .head_started
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// A socket write is pending (`true`) or went through (`false`).
    fn write_blocked(&self, blocked: bool) {
        if blocked {
            let now = self.now();
            let _ =
                self.write_blocked
                    .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
        } else {
            self.write_blocked.store(0, Ordering::Release);
        }
    }

    /// No request in flight: the connection may be evicted.
    fn evictable(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// When the connection began waiting for its next request.
    fn waiting_since(&self) -> u64 {
        match self.idle_since.load(Ordering::Acquire) {
            0 => self.accepted,
            t => t,
        }
    }

    /// What the watchdog makes of the connection at `now`.
    fn verdict(&self, now: u64, cfg: &ConnConfig) -> Option<Verdict> {
        let past =
            |since: u64, limit: Duration| since != 0 && now.saturating_sub(since) >= millis(limit);
        if past(
            self.write_blocked.load(Ordering::Acquire),
            cfg.stall_timeout,
        ) {
            return Some(Verdict::ResponseStall);
        }
        if !self.evictable() {
            // No response waiting for hyper: nothing the client holds up.
            let newest = self.waiting.lock().values().copied().max()?;
            let moved = self.progress.load(Ordering::Acquire).max(newest);
            return past(moved, cfg.stall_timeout).then_some(Verdict::ResponseStall);
        }
        if self.served.load(Ordering::Relaxed) == 0 {
            return past(self.accepted, cfg.header_timeout).then_some(Verdict::HeaderTimeout);
        }
        if past(self.waiting_since(), cfg.idle_timeout) {
            return Some(Verdict::IdleTimeout);
        }
        let http1 = !self.http2.load(Ordering::Relaxed);
        let head = self.head_started.load(Ordering::Acquire);
        (http1 && past(head, cfg.header_timeout)).then_some(Verdict::HeaderTimeout)
    }

    /// Wait for eviction or a passed deadline.
    async fn watch(&self, cfg: &ConnConfig) -> Verdict {
        let shortest = cfg
            .header_timeout
            .min(cfg.idle_timeout)
            .min(cfg.stall_timeout);
        // Deadlines are checked every quarter of the shortest timeout: a
        // connection is closed at most 25% late, and 2,000 connections at
        // the default timeouts wake their watchdogs ~400 times a second.
        let tick = (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        let checks = async {
            loop {
                tokio::time::sleep(tick).await;
                if let Some(v) = self.verdict(self.now(), cfg) {
                    return v;
                }
            }
        };
        tokio::select! {
            () = self.kill.notified() => Verdict::Evicted,
            v = checks => v,
        }
    }
}

/// One request in flight on a connection; dropped when hyper is done with
/// its response body (or drops the request).
pub struct InFlight {
    conn: Arc<ConnState>,
    body: u64,
}

impl InFlight {
    /// The response body waits for hyper to poll it (for its first frame,
    /// or again after yielding one).
    pub fn yielded(&self) {
        let now = self.conn.now();
        self.conn.waiting.lock().insert(self.body, now);
    }

    /// The response body is polled.
    pub fn polled(&self) {
        let now = self.conn.now();
        self.conn.progress.store(now, Ordering::Release);
        self.conn.waiting.lock().remove(&self.body);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn.waiting.lock().remove(&self.body);
        let now = self.conn.now();
        if self.conn.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.conn.idle_since.store(now, Ordering::Release);
            self.conn.head_started.store(0, Ordering::Release);
        }
    }
}

/// The bounded table of open connections.
pub struct ConnTable {
    cfg: ConnConfig,
    cap: usize,
    epoch: Instant,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
    evictions: AtomicU64,
}

/// A connection's place in the table, given back when dropped.
pub struct Entry {
    table: Arc<ConnTable>,
    id: u64,
    state: Arc<ConnState>,
}

impl Entry {
    /// The connection's state.
    pub fn state(&self) -> &Arc<ConnState> {
        &self.state
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.table.conns.lock().remove(&self.id);
    }
}

impl ConnTable {
    /// A table of at most `cap` connections (at least 1).
    pub fn new(cfg: ConnConfig, cap: usize) -> Arc<ConnTable> {
        Arc::new(ConnTable {
            cfg,
            cap: cap.max(1),
            epoch: Instant::now(),
            next_id: AtomicU64::new(1),
            conns: Mutex::new(HashMap::new()),
            evictions: AtomicU64::new(0),
        })
    }

    /// The settings the connections run with.
    pub fn config(&self) -> &ConnConfig {
        &self.cfg
    }

    /// The table's capacity.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Connections in the table now.
    pub fn len(&self) -> usize {
        self.conns.lock().len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A place for a newly accepted connection, evicting the oldest
    /// evictable one when full; `None` when every connection is busy.
    pub fn admit(self: &Arc<Self>) -> Option<Entry> {
        let mut conns = self.conns.lock();
        if conns.len() >= self.cap && !self.evict_locked(&mut conns) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::new(self.epoch));
        conns.insert(id, Arc::clone(&state));
        Some(Entry {
            table: Arc::clone(self),
            id,
            state,
        })
    }

    /// Evict the oldest evictable connection (to free a descriptor after
    /// the accept failed); whether there was one.
    pub fn evict_one(&self) -> bool {
        self.evict_locked(&mut self.conns.lock())
    }

    fn evict_locked(&self, conns: &mut HashMap<u64, Arc<ConnState>>) -> bool {
        let victim = conns
            .iter()
            .filter(|(_, c)| c.evictable())
            .min_by_key(|(_, c)| c.waiting_since())
            .map(|(id, _)| *id);
        let Some(state) = victim.and_then(|id| conns.remove(&id)) else {
            return false;
        };
        state.evicted.store(true, Ordering::Release);
        state.kill.notify_one();
        let n = self.evictions.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                evictions = n,
                cap = self.cap,
                "connection table full; evicting the oldest idle connections"
            );
        }
        true
    }
}

/// Run `conn` (a connection's whole life, TLS handshake included) until
/// it ends or its watchdog gives a verdict; dropping it closes the socket.
pub async fn supervise<F, E>(entry: Entry, conn: F)
where
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let cfg = entry.table.cfg.clone();
    tokio::select! {
        ended = conn => {
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        verdict = entry.state.watch(&cfg) => {
            tracing::debug!(?verdict, "closing connection");
        }
    }
}

/// Settings for unit tests.
#[cfg(test)]
fn tests_cfg() -> ConnConfig {
    ConnConfig {
        header_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        stall_timeout: Duration::from_secs(30),
        max_connections: None,
        h2_max_streams: 100,
        h2_keepalive: Duration::from_secs(30),
    }
}

#[cfg(test)]
mod tests;
