//! The misbehaving clients, all running for the whole load: what they
//! share, what they count, and starting them.
//!
//! Each kind is a few looping tasks ([`super::slow`], [`super::abort`],
//! [`super::junk`]) that stop at the end of the load. The authenticated
//! ones use the four tenants' keys in turn, so their lanes are the ones
//! charged. Their answers are tallied by outcome; only an answer that
//! shows the server doing something wrong (a 2xx for a forged or unsigned
//! request, a 5xx other than 503, wrong bytes) is a failure.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::blob::Blob;
use crate::client::S3Client;

/// The object slow readers and mid-body droppers GET, per tenant.
pub const BIG_KEY: &str = "rogue/big";
/// Its size: more than the socket buffers on both ends hold, so an
/// unread response really waits on its reader.
pub const BIG_SIZE: u64 = 8 << 20;
/// Keys that must never exist: PUTs cut short and refused PUTs go here.
pub const NOPE_PREFIX: &str = "rogue/nope/";

/// One tenant as the rogues see it.
#[derive(Clone)]
pub struct Target {
    /// Its signing client.
    pub client: S3Client,
    /// Its bucket.
    pub bucket: String,
    /// The contents of its [`BIG_KEY`].
    pub big: Blob,
    /// Its access key id with a wrong secret.
    pub forger: S3Client,
}

/// What every rogue task needs.
pub struct RogueCtx {
    /// The tenants, used in turn.
    pub targets: Vec<Target>,
    /// The server's S3 address.
    pub addr: SocketAddr,
    /// A client whose access key id the server does not know.
    pub stranger: S3Client,
    /// When to stop.
    pub stop: Instant,
    /// How long a slow or stalled reader keeps its connection.
    pub hold: Duration,
}

impl RogueCtx {
    /// The target for the `n`th session.
    pub fn target(&self, n: u64) -> &Target {
        let i = usize::try_from(n % self.targets.len().max(1) as u64).unwrap_or(0);
        &self.targets[i]
    }

    /// Whether the load is over.
    pub fn done(&self) -> bool {
        Instant::now() >= self.stop
    }
}

/// Counts of one rogue kind.
#[derive(Debug, Clone, Default)]
pub struct RogueTally {
    /// Sessions run.
    pub sessions: u64,
    /// Outcomes by label (`403`, `closed`, `503`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// Outcomes that show a server fault.
    pub failures: u64,
    /// The first failures, described.
    pub examples: Vec<String>,
    /// Body bytes read (slow readers, droppers).
    pub bytes: u64,
}

impl RogueTally {
    /// Counts an outcome that is fine.
    pub fn seen(&mut self, label: impl Into<String>) {
        *self.outcomes.entry(label.into()).or_default() += 1;
    }

    /// Counts an outcome that is a server fault.
    pub fn fault(&mut self, label: impl Into<String>, detail: String) {
        let label = label.into();
        *self.outcomes.entry(format!("FAULT {label}")).or_default() += 1;
        self.failures += 1;
        if self.examples.len() < super::outcome::EXAMPLES {
            self.examples.push(detail);
        }
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &RogueTally) {
        self.sessions += other.sessions;
        self.failures += other.failures;
        self.bytes += other.bytes;
        for (k, v) in &other.outcomes {
            *self.outcomes.entry(k.clone()).or_default() += v;
        }
        let room = super::outcome::EXAMPLES.saturating_sub(self.examples.len());
        self.examples
            .extend(other.examples.iter().take(room).cloned());
    }

    /// Judges a status a refused request got: 4xx and 503 are fine, a 2xx
    /// or another 5xx is a fault.
    pub fn refused_with(&mut self, what: &str, status: u16) {
        match status {
            400..=499 | 503 => self.seen(format!("{what}: {status}")),
            _ => self.fault(
                format!("{what}: {status}"),
                format!("{what}: answered {status}"),
            ),
        }
    }
}

/// Per kind, the tallies of the rogues.
pub type RogueReport = BTreeMap<&'static str, RogueTally>;

/// Starts `slow` slow readers and `each` tasks of every other kind.
pub fn spawn(ctx: Arc<RogueCtx>, slow: u64, each: u64) -> JoinSet<(&'static str, RogueTally)> {
    let mut set = JoinSet::new();
    for i in 0..slow {
        let ctx = ctx.clone();
        set.spawn(async move { ("slow reader", super::slow::run(ctx, i).await) });
    }
    for i in 0..each {
        let c = ctx.clone();
        set.spawn(async move { ("GET dropped mid-body", super::abort::gets(c, i).await) });
        let c = ctx.clone();
        set.spawn(async move { ("PUT cut mid-body", super::abort::puts(c, i).await) });
        let c = ctx.clone();
        set.spawn(async move { ("junk", super::junk::run(c, i).await) });
    }
    set
}

/// Waits for every rogue and merges their tallies by kind.
pub async fn collect(mut set: JoinSet<(&'static str, RogueTally)>) -> RogueReport {
    let mut out = RogueReport::new();
    while let Some(res) = set.join_next().await {
        match res {
            Ok((kind, t)) => out.entry(kind).or_default().merge(&t),
            Err(e) => out
                .entry("panicked")
                .or_default()
                .fault("panic", format!("rogue task: {e}")),
        }
    }
    out
}
