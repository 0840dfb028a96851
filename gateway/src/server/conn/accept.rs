//! The accept loop's helpers: hyper's connection builder with the HTTP/2
//! limits, and the back-off after a failed accept.
//!
//! A failed `accept` is almost always the descriptor table being full
//! (`EMFILE`/`ENFILE`) or the kernel short of memory; retrying at once
//! spins a core and floods the log. So the loop waits, doubling the wait
//! from [`FIRST_BACKOFF`] up to [`MAX_BACKOFF`] while accepts keep
//! failing, and on a full descriptor table evicts the oldest idle
//! connection to free one ([`super::ConnTable::evict_one`]).

use super::{ConnConfig, ConnTable};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use std::time::Duration;

/// First wait after a failed accept.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(5);

/// Longest wait between accepts that keep failing.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// hyper's HTTP/1 + HTTP/2 builder with the connection settings.
pub fn builder(cfg: &ConnConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The watchdog (super::supervise) enforces header and idle timeouts;
    // hyper's header timer would also cut kept-alive idle time short.
    builder.http1().header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(cfg.h2_max_streams)
        .keep_alive_interval(cfg.h2_keepalive)
        .keep_alive_timeout(cfg.h2_keepalive);
    builder
}

/// The wait after failed accepts.
#[derive(Debug, Default)]
pub struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    /// An accept succeeded.
    pub fn reset(&mut self) {
        self.next = None;
    }

    /// An accept failed with `e`: free a descriptor if that is what is
    /// missing, and say how long to wait.
    pub fn failed(&mut self, table: &ConnTable, e: &std::io::Error) -> Duration {
        let out_of_fds = matches!(
            rustix::io::Errno::from_io_error(e),
            Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
        );
        let evicted = out_of_fds && table.evict_one();
        let wait = self.next.unwrap_or(FIRST_BACKOFF);
        self.next = Some((wait * 2).min(MAX_BACKOFF));
        if wait == FIRST_BACKOFF || wait == MAX_BACKOFF {
            tracing::warn!(error = %e, evicted, wait_ms = wait.as_millis(), "accept failed; backing off");
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let table = ConnTable::new(crate::server::conn::tests_cfg(), 4);
        let e = std::io::Error::from_raw_os_error(24);
        let mut b = Backoff::default();
        let waits: Vec<Duration> = (0..12).map(|_| b.failed(&table, &e)).collect();
        assert_eq!(waits[0], FIRST_BACKOFF);
        assert_eq!(waits[1], FIRST_BACKOFF * 2);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().expect("some"), MAX_BACKOFF);
        b.reset();
        assert_eq!(b.failed(&table, &e), FIRST_BACKOFF);
    }
}
