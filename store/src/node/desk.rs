//! The catalog node's quota desk: where a cluster's quota reservations
//! are made, so several gateways share one tally.
//!
//! A gateway asks for a reservation ([`crate::node::proto::Call::QuotaReserve`]);
//! the desk runs the same engine as a single process ([`Quotas`]), reading
//! committed usage from every node through its own client of the cluster,
//! and keeps the granted [`Reservation`] in a table under a new id until
//! it is given back ([`crate::node::proto::Call::QuotaRelease`]) after its
//! write committed or failed: by the store node that ran the write (the
//! write's call carries the id), and by the gateway when it knows the
//! write is done (`crate::quota::QuotaHold::cover`). A hold nobody gives
//! back (its gateway died before sending the write, or the call was lost
//! on the way in) lapses after [`HOLD_MAX`], and the table is bounded
//! ([`MAX_HOLDS`]; past it new reservations answer 503).
//!
//! **A replicated catalog keeps its holds as rows of its group**
//! ([`crate::quota::rows`]), so a leader change forgets no write in
//! flight. The desk answers a reservation only once its row committed
//! (a reservation whose row fails is refused, 503), and gives a hold back
//! by deleting its row (a release whose delete fails is answered with the
//! error, so its sender asks again, at the new leader). The desk at a
//! replica that becomes leader first settles (applies its whole log, which
//! holds every committed row), then counts every row in flight in a fresh
//! table, before it answers anything ([`QuotaDesk::current`]). A desk that
//! leads again after another term does the same, since the holds may have
//! been given back elsewhere meanwhile. What this costs: two commits of
//! the catalog's group per write of a tenant with a quota (its
//! reservation and its release; tenants without quotas reserve nothing),
//! which concurrent writes share: the rows are committed in batches
//! (`crate::node::hold_rows`). An
//! unreplicated catalog keeps its holds in memory only, as its node's
//! restart is the cluster's catalog outage anyway.
//!
//! A reservation sent to a replicated catalog is named by its call's id
//! ([`hold_id`]), so its sender may send it again when an attempt's
//! outcome is unknown: a desk that holds the id answers with it (the
//! same desk, or the next leader, which took the row over), a repeat
//! that arrives while the first attempt is still being made is refused
//! 503 (and asked again), and a release that arrives meanwhile gives
//! the hold back as soon as it is made.
//!
//! A row whose commit timed out may still commit after its reservation
//! was refused; so may a delete that failed. Nothing then holds such a
//! row: every [`LAPSE_EVERY`] the leader deletes the rows its table does
//! not know that are older than [`ORPHAN_AFTER`], with the rows of holds
//! that lapsed.

use crate::client::StoreClient;
use crate::error::{StoreError, StoreResult};
use crate::ids::TenantId;
use crate::node::hold_rows::HoldRows;
use crate::quota::rows::HoldRow;
use crate::quota::{QuotaAsk, QuotaLimits, Quotas, Reservation};
use crate::replication::Group;
use crate::store::Store;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest a reservation is held for a gateway that never gives it back
/// (longer than any upload's stall bounds allow a write to last idle).
pub const HOLD_MAX: Duration = Duration::from_secs(3600);

/// Reservations held at once, at most.
pub const MAX_HOLDS: usize = 1 << 20;

/// How often the table is scanned for lapsed holds (and a replicated
/// catalog's rows for orphans).
pub const LAPSE_EVERY: Duration = Duration::from_secs(60);

/// Age past which a hold row the leader's table does not know is an
/// orphan (its reservation was refused after its commit timed out): far
/// longer than a commit may take.
pub const ORPHAN_AFTER: Duration = Duration::from_secs(60);

/// Reservations of every gateway.
pub struct QuotaDesk {
    cluster: Arc<dyn StoreClient>,
    store: Arc<Store>,
    table: Mutex<Table>,
    /// The writer of hold rows (started at first use, on the runtime).
    rows: std::sync::OnceLock<HoldRows>,
    /// Held while the table is rebuilt from the rows, or rows are tidied
    /// (so the two never interleave).
    rows_lock: tokio::sync::Mutex<()>,
    next: AtomicU64,
    lapsed: Mutex<Instant>,
    /// Holds being made, by id: whether a release came for one meanwhile
    /// (it is then given back as soon as it is made).
    making: Mutex<HashMap<u64, bool>>,
    /// Holds given back whose row's delete has not committed yet: a
    /// second release of one deletes the row too, so neither answers
    /// before a delete committed.
    deleting: Mutex<std::collections::HashSet<u64>>,
}

/// The holds one desk knows, with the engine that counts them.
struct Table {
    engine: Arc<Quotas>,
    holds: HashMap<u64, Held>,
    /// The term of the catalog's group whose rows this table was built
    /// from (`None`: unreplicated, or not built yet).
    term: Option<u64>,
}

impl Table {
    fn empty(term: Option<u64>) -> Table {
        Table {
            engine: Arc::new(Quotas::default()),
            holds: HashMap::new(),
            term,
        }
    }
}

struct Held {
    _reservation: Reservation,
    at: Instant,
}

impl QuotaDesk {
    /// A desk reading usage through `cluster` (a client of every node),
    /// keeping its holds as rows of `store`'s catalog when it is replicated.
    pub fn new(cluster: Arc<dyn StoreClient>, store: Arc<Store>) -> QuotaDesk {
        QuotaDesk {
            cluster,
            store,
            table: Mutex::new(Table::empty(None)),
            rows: std::sync::OnceLock::new(),
            rows_lock: tokio::sync::Mutex::new(()),
            next: AtomicU64::new(first_id()),
            lapsed: Mutex::new(Instant::now()),
            making: Mutex::new(HashMap::new()),
            deleting: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Reserve for `ask` under id `named` (the call's: a repeat of a
    /// reservation this desk holds is answered with it), or under a new
    /// id; the hold's id (`None`: nothing to hold). A hold made after
    /// `not_after` (its sender stopped waiting, and gives its id back
    /// then) is given back at once and refused, 503.
    pub async fn reserve(
        self: &Arc<Self>,
        named: Option<u64>,
        tenant: &TenantId,
        limits: &QuotaLimits,
        ask: &QuotaAsk,
        not_after: Option<Instant>,
    ) -> StoreResult<Option<u64>> {
        let term = self.current().await?;
        self.lapse();
        if not_after.is_some_and(|t| Instant::now() >= t) {
            return Err(StoreError::Unavailable(
                "the quota reservation came after its caller stopped waiting".into(),
            ));
        }
        let id = named.unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed));
        let making = Making::claim(self, id)?;
        let engine = {
            let table = self.table.lock();
            if table.holds.contains_key(&id) {
                return Ok(Some(id));
            }
            if table.holds.len() >= MAX_HOLDS {
                return Err(StoreError::Unavailable(
                    "too many quota reservations in flight".into(),
                ));
            }
            Arc::clone(&table.engine)
        };
        let Some(r) = engine
            .reserve(self.cluster.as_ref(), tenant, limits, ask)
            .await?
        else {
            return Ok(None);
        };
        let amount = r.amount();
        if term.is_some() {
            let row = HoldRow {
                tenant: tenant.clone(),
                amount,
                made_ms: crate::partition::now_ms(),
            };
            self.rows().put(id, row).await?;
        }
        let unawaited = not_after.is_some_and(|t| Instant::now() >= t);
        if unawaited || !self.keep(id, tenant, r, term, making) {
            // Its caller gave up on it: gave it back while it was made,
            // or will, since it stopped waiting.
            if term.is_some() {
                self.rows().delete(id).await?;
            }
            tracing::debug!(hold = id, "quota hold given up while it was made");
            return Err(StoreError::Unavailable(
                "the quota reservation was given up while it was made".into(),
            ));
        }
        tracing::debug!(hold = id, ?amount, ?term, "quota hold made");
        Ok(Some(id))
    }

    /// Put the hold `id` just made (`r`, its row written in `term`) in
    /// the table, unless a release came for it while it was made; whether
    /// it is kept.
    fn keep(
        &self,
        id: u64,
        tenant: &TenantId,
        r: Reservation,
        term: Option<u64>,
        making: Making<'_>,
    ) -> bool {
        let mut table = self.table.lock();
        // A table rebuilt meanwhile (leadership lost and won again) may
        // or may not have read this hold's row (it may have committed in
        // the new term): counted in that table's engine, under its id, it
        // replaces the copy the rebuild read if there is one.
        let reservation = if table.term == term {
            r
        } else {
            let amount = r.amount();
            drop(r);
            table.engine.adopt(tenant, amount)
        };
        if making.done() {
            return false;
        }
        let held = Held {
            _reservation: reservation,
            at: Instant::now(),
        };
        table.holds.insert(id, held);
        true
    }

    /// Give hold `id` back (unknown ids, already lapsed or given back,
    /// are ignored; one still being made is given back once made). At a
    /// replicated catalog the answer waits for the row's delete to
    /// commit, also for a release of a hold another release is deleting
    /// (before, that one answered at once, and a leader that died before
    /// the delete committed left the row to the next, which counted the
    /// hold until it lapsed).
    pub async fn release(&self, id: u64) -> StoreResult<()> {
        let term = self.current().await?;
        let (gone, deleting) = {
            let mut table = self.table.lock();
            let gone = table.holds.remove(&id);
            if gone.is_none() {
                // Under the table's lock, so the hold's maker either
                // sees this or has put the hold in the table already.
                if let Some(released) = self.making.lock().get_mut(&id) {
                    *released = true;
                }
            }
            let deleting = Deleting::of(self, id, gone.is_some());
            (gone, deleting)
        };
        tracing::debug!(hold = id, held = gone.is_some(), "quota hold released");
        if term.is_none() {
            return Ok(());
        }
        let Some(_deleting) = deleting else {
            return Ok(());
        };
        drop(gone);
        self.rows().delete(id).await
    }

    /// The writer of hold rows.
    fn rows(&self) -> &HoldRows {
        self.rows.get_or_init(|| HoldRows::start(&self.store))
    }

    /// Holds in the table.
    pub fn held(&self) -> usize {
        self.table.lock().holds.len()
    }

    /// Make the table current: at a replicated catalog, this replica must
    /// lead its group, and the table must have been built from the rows
    /// in the current term (built now if not). The term, or `None` when
    /// the catalog is not replicated.
    async fn current(&self) -> StoreResult<Option<u64>> {
        let Some(group) = self.store.catalog_group().cloned() else {
            return Ok(None);
        };
        let term = leading_term(group.as_ref())?;
        if self.table.lock().term == Some(term) {
            return Ok(Some(term));
        }
        let _one = self.rows_lock.lock().await;
        if self.table.lock().term == Some(term) {
            return Ok(Some(term));
        }
        let store = Arc::clone(&self.store);
        let (settled, rows) = blocking(move || {
            group.settle()?;
            let settled = leading_term(group.as_ref())?;
            Ok((settled, store.quota_holds()?))
        })
        .await?;
        if settled != term {
            return Err(StoreError::Unavailable(
                "the catalog's leader changed while its quota holds were read; retry".into(),
            ));
        }
        let count = rows.len();
        *self.table.lock() = table_of(rows, term);
        tracing::info!(
            term,
            holds = count,
            "quota desk took over the holds in flight"
        );
        Ok(Some(term))
    }

    /// Drop holds older than [`HOLD_MAX`] (a scan at most every
    /// [`LAPSE_EVERY`]); at a replicated catalog, delete their rows and
    /// the orphans' in the background.
    fn lapse(self: &Arc<Self>) {
        let now = Instant::now();
        {
            let mut last = self.lapsed.lock();
            if now.duration_since(*last) < LAPSE_EVERY {
                return;
            }
            *last = now;
        }
        let (lapsed, term) = {
            let mut table = self.table.lock();
            let old: Vec<u64> = table
                .holds
                .iter()
                .filter(|(_, h)| now.duration_since(h.at) >= HOLD_MAX)
                .map(|(id, _)| *id)
                .collect();
            old.iter().for_each(|id| drop(table.holds.remove(id)));
            (old, table.term)
        };
        if let Some(term) = term {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                if let Err(e) = me.tidy(term, lapsed).await {
                    tracing::warn!(error = %e, "quota hold rows not tidied; next pass retries");
                }
            });
        }
    }

    /// Delete the rows of `lapsed` holds and of orphans (rows older than
    /// [`ORPHAN_AFTER`] that the table of `term` does not hold), while the
    /// table is still the one of `term`.
    async fn tidy(&self, term: u64, mut lapsed: Vec<u64>) -> StoreResult<()> {
        let _one = self.rows_lock.lock().await;
        let store = Arc::clone(&self.store);
        let rows = blocking(move || store.quota_holds()).await?;
        let cutoff = crate::partition::now_ms()
            - i64::try_from(ORPHAN_AFTER.as_millis()).unwrap_or(i64::MAX);
        {
            let table = self.table.lock();
            if table.term != Some(term) {
                return Ok(());
            }
            lapsed.extend(orphans(&rows, |id| table.holds.contains_key(&id), cutoff));
        }
        lapsed.sort_unstable();
        lapsed.dedup();
        let count = lapsed.len();
        let store = Arc::clone(&self.store);
        blocking(move || store.write_quota_holds(&[], &lapsed)).await?;
        if count > 0 {
            tracing::info!(
                rows = count,
                "quota hold rows of lapsed and orphaned holds deleted"
            );
        }
        Ok(())
    }
}

/// The id of the hold a reservation call with id `call` makes (its
/// first eight bytes; the id is random, drawn by the caller).
pub fn hold_id(call: &crate::repeat::CallId) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&call[..8]);
    u64::from_be_bytes(first)
}

/// A hold being made under its id: while it is, a repeat of its
/// reservation (same id) is refused (503, so it is asked again and then
/// finds the hold made), and a release of the id is noted for it.
struct Making<'a> {
    desk: &'a QuotaDesk,
    id: u64,
}

impl<'a> Making<'a> {
    /// Claim `id`, or refuse: a reservation under it is being made.
    fn claim(desk: &'a QuotaDesk, id: u64) -> StoreResult<Making<'a>> {
        let mut making = desk.making.lock();
        if making.contains_key(&id) {
            return Err(StoreError::Unavailable(
                "this quota reservation is being made; retry".into(),
            ));
        }
        making.insert(id, false);
        Ok(Making { desk, id })
    }

    /// Whether a release came for the hold while it was made; the claim
    /// ends (the caller holds the table's lock, so a release after this
    /// finds the hold in the table).
    fn done(self) -> bool {
        self.desk.making.lock().remove(&self.id).unwrap_or(false)
    }
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.desk.making.lock().remove(&self.id);
    }
}

/// A release's delete of a hold's row, while it is under way.
struct Deleting<'a> {
    desk: &'a QuotaDesk,
    id: u64,
    /// Whether this release took the hold out of the table (and so ends
    /// the id's entry in [`QuotaDesk::deleting`]).
    first: bool,
}

impl<'a> Deleting<'a> {
    /// The delete a release of `id` makes: this release's own when it
    /// took the hold out of the table (`taken`), another's still under
    /// way, or none (`None`: the hold is gone and its row deleted, or it
    /// was never here). Called under the table's lock.
    fn of(desk: &'a QuotaDesk, id: u64, taken: bool) -> Option<Deleting<'a>> {
        let mut deleting = desk.deleting.lock();
        if taken {
            deleting.insert(id);
        } else if !deleting.contains(&id) {
            return None;
        }
        Some(Deleting {
            desk,
            id,
            first: taken,
        })
    }
}

impl Drop for Deleting<'_> {
    fn drop(&mut self) {
        if self.first {
            self.desk.deleting.lock().remove(&self.id);
        }
    }
}

/// The ids of `rows` made before `cutoff_ms` that no hold `known` has.
fn orphans(rows: &[(u64, HoldRow)], known: impl Fn(u64) -> bool, cutoff_ms: i64) -> Vec<u64> {
    rows.iter()
        .filter(|(id, row)| row.made_ms < cutoff_ms && !known(*id))
        .map(|(id, _)| *id)
        .collect()
}

/// The term in which this replica leads `group`, or `NotLeader`.
fn leading_term(group: &dyn Group) -> StoreResult<u64> {
    let s = group.status();
    if s.leader == Some(s.me) {
        Ok(s.term)
    } else {
        Err(StoreError::NotLeader(s.leader))
    }
}

/// A table of `term` counting every hold of `rows` in flight, each as old
/// as its row says (so it still lapses [`HOLD_MAX`] after it was made).
fn table_of(rows: Vec<(u64, HoldRow)>, term: u64) -> Table {
    let mut table = Table::empty(Some(term));
    let now_ms = crate::partition::now_ms();
    let now = Instant::now();
    for (id, row) in rows {
        let age_ms = u64::try_from(now_ms.saturating_sub(row.made_ms)).unwrap_or(0);
        let at = now
            .checked_sub(Duration::from_millis(age_ms).min(HOLD_MAX))
            .unwrap_or(now);
        let held = Held {
            _reservation: table.engine.adopt(&row.tenant, row.amount),
            at,
        };
        table.holds.insert(id, held);
    }
    table
}

/// Run blocking `f` (a catalog read or a commit through its group) on a
/// blocking thread.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Engine(format!("quota desk task: {e}")))?
}

/// The first id of a desk: a random high half, counting up from 1 in the
/// low half. The ids of two desks (leaders of the catalog in turn, or
/// one node before and after a restart) then do not meet: at a
/// replicated catalog the next desk takes over the previous one's holds
/// under their ids, and unreplicated a release still on its way from a
/// write made under another desk names no hold here, instead of one that
/// happens to have the same number.
fn first_id() -> u64 {
    use ring::rand::SecureRandom;
    let mut raw = [0u8; 4];
    // A failed generator leaves 0: ids then start at 1, as they used to.
    let _ = ring::rand::SystemRandom::new().fill(&mut raw);
    (u64::from(u32::from_be_bytes(raw)) << 32) | 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Inflight;

    fn row(tenant: &str, bytes: u64, made_ms: i64) -> HoldRow {
        HoldRow {
            tenant: TenantId(tenant.into()),
            amount: Inflight {
                bytes,
                objects: 1,
                uploads: 0,
            },
            made_ms,
        }
    }

    #[test]
    fn an_orphan_is_an_old_row_no_hold_has() {
        let rows = vec![
            (1, row("a", 1, 100)),
            (2, row("a", 1, 100)),
            (3, row("b", 1, 5_000)),
        ];
        // 1 is held; 3 is younger than the cutoff (its commit may still
        // be on its way to the table).
        assert_eq!(orphans(&rows, |id| id == 1, 1_000), vec![2]);
        assert!(orphans(&rows, |_| false, 50).is_empty());
    }

    #[test]
    fn a_table_built_from_rows_counts_each_in_flight_with_its_age() {
        let now = crate::partition::now_ms();
        let two_hours = 2 * 3_600_000;
        let rows = vec![
            (10, row("a", 5, now - 1_000)),
            (11, row("a", 7, now)),
            (12, row("b", 3, now - two_hours)),
        ];
        let table = table_of(rows, 4);
        assert_eq!(table.term, Some(4));
        assert_eq!(table.holds.len(), 3);
        let amount = |id: u64| table.holds[&id]._reservation.amount().bytes;
        assert_eq!((amount(10), amount(11), amount(12)), (5, 7, 3));
        assert!(table.holds[&10].at.elapsed() >= Duration::from_millis(900));
        assert!(table.holds[&11].at.elapsed() < HOLD_MAX);
    }
}
