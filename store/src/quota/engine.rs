//! [`Quotas`]: the in-flight reservations of every tenant and the check
//! that admits or refuses a write (see the [module doc](super)).
//!
//! A tenant's asks are checked in rounds: each waits in its tenant's
//! queue, and whoever holds the tenant's check lock takes every ask
//! waiting (up to [`MAX_ROUND`]), reads what each would replace, reads
//! the tenant's usage once, and admits them in turn against it, each
//! counting what the ones before it took. So a tenant with many writes in
//! flight pays one usage read per round instead of one per write, and
//! its writes wait one round, not behind every other write's read.

use super::usage::tenant_totals;
use super::{QuotaAsk, QuotaLimits, TenantTotals};
use crate::client::StoreClient;
use crate::error::{StoreError, StoreResult};
use crate::ids::TenantId;
use crate::store::BucketInfo;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Bytes, objects and upload creations of writes in flight (one write's
/// hold, or all of one tenant's).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Inflight {
    /// Bytes the writes add.
    pub bytes: u64,
    /// Objects they add.
    pub objects: u64,
    /// Multipart uploads they open.
    pub uploads: u64,
}

impl Inflight {
    /// Count `other` too.
    fn add(&mut self, other: Inflight) {
        self.bytes += other.bytes;
        self.objects += other.objects;
        self.uploads += other.uploads;
    }

    /// Count `other` no more.
    fn take(&mut self, other: Inflight) {
        self.bytes = self.bytes.saturating_sub(other.bytes);
        self.objects = self.objects.saturating_sub(other.objects);
        self.uploads = self.uploads.saturating_sub(other.uploads);
    }
}

/// Asks one round checks at most (the others wait for the next round).
pub const MAX_ROUND: usize = 256;

/// One tenant's reservations: its asks wait in `waiting` until a round
/// checks them; `check` serialises the rounds (it is held while the
/// tenant's usage is read from the store, which is a wait on the store;
/// it is this tenant's alone, so only its own writes queue on it);
/// `inflight` and `waiting` are only ever held for a few instructions,
/// never across a wait, so a reservation can be given back in `Drop`.
#[derive(Default, Debug)]
struct Slot {
    check: tokio::sync::Mutex<()>,
    inflight: Mutex<Inflight>,
    waiting: Mutex<Vec<Waiting>>,
}

/// What a round answers an ask: its reservation, which gives its amount
/// back when dropped, so an answer its caller never took (it went away
/// meanwhile) counts nothing.
type Answer = StoreResult<Reservation>;

/// An ask waiting for a round, and where its answer goes.
#[derive(Debug)]
struct Waiting {
    ask: QuotaAsk,
    limits: QuotaLimits,
    reply: oneshot::Sender<Answer>,
}

impl Slot {
    /// Queue `ask` for the next round; its answer.
    fn wait(&self, ask: &QuotaAsk, limits: &QuotaLimits) -> oneshot::Receiver<Answer> {
        let (reply, answer) = oneshot::channel();
        self.waiting.lock().push(Waiting {
            ask: ask.clone(),
            limits: *limits,
            reply,
        });
        answer
    }

    /// The asks of the next round, in the order they came.
    fn next_round(&self) -> Vec<Waiting> {
        let mut waiting = self.waiting.lock();
        let n = waiting.len().min(MAX_ROUND);
        waiting.drain(..n).collect()
    }
}

/// In-flight reservations of every tenant.
#[derive(Default, Debug)]
pub struct Quotas {
    tenants: Mutex<HashMap<TenantId, Arc<Slot>>>,
}

/// One write's share of its tenant's quota, released on drop. A store
/// node can keep it in a table until its remote holder gives it back.
#[derive(Debug)]
pub struct Reservation {
    slot: Arc<Slot>,
    held: Inflight,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.slot.inflight.lock().take(self.held);
    }
}

/// What a write adds and what it replaces (credited), for the check.
#[derive(Debug, Clone, Copy, Default)]
struct Delta {
    bytes: u64,
    objects: u64,
    credit_bytes: u64,
    credit_objects: u64,
}

impl Reservation {
    /// What this reservation counts in flight.
    pub fn amount(&self) -> Inflight {
        self.held
    }
}

impl Quotas {
    /// Count `amount` in flight for `tenant` without a check, until the
    /// returned reservation is dropped: a hold another desk admitted,
    /// taken over by this one (`crate::node::desk`).
    pub fn adopt(&self, tenant: &TenantId, amount: Inflight) -> Reservation {
        let slot = self.slot(tenant);
        slot.inflight.lock().add(amount);
        Reservation { slot, held: amount }
    }

    fn slot(&self, tenant: &TenantId) -> Arc<Slot> {
        Arc::clone(self.tenants.lock().entry(tenant.clone()).or_default())
    }

    /// Reserve room for `ask` in the tenant's quota, reading its usage
    /// through `store`, or refuse it ([`StoreError::QuotaExceeded`]).
    /// `None` when `limits` cannot refuse it (no byte or object quota);
    /// an [`QuotaAsk::Upload`] is always checked.
    ///
    /// The ask waits for a round; whichever waiting caller takes the
    /// check lock runs the round for all of them. A round whose caller
    /// went away before it answered leaves its asks unanswered and
    /// uncounted; they are asked again.
    pub async fn reserve(
        &self,
        store: &dyn StoreClient,
        tenant: &TenantId,
        limits: &QuotaLimits,
        ask: &QuotaAsk,
    ) -> StoreResult<Option<Reservation>> {
        if !ask.needs_reservation(limits) {
            return Ok(None);
        }
        let slot = self.slot(tenant);
        let mut answer = slot.wait(ask, limits);
        loop {
            let got = tokio::select! {
                biased;
                got = &mut answer => got,
                check = slot.check.lock() => {
                    round(store, tenant, &slot).await;
                    drop(check);
                    continue;
                }
            };
            match got {
                Ok(held) => return held.map(Some),
                Err(_) => answer = slot.wait(ask, limits),
            }
        }
    }
}

/// Check the asks of one round (the caller holds the tenant's check
/// lock) and answer each. What an ask credits is read under the lock, so
/// it cannot change under the check.
async fn round(store: &dyn StoreClient, tenant: &TenantId, slot: &Arc<Slot>) {
    let asks = slot.next_round();
    if asks.is_empty() {
        return;
    }
    let tests =
        futures::future::join_all(asks.iter().map(|w| test_of(store, &w.ask, &w.limits))).await;
    let mut checks = Vec::with_capacity(asks.len());
    for (test, w) in tests.into_iter().zip(asks) {
        match test {
            Ok(test) => checks.push((test, w.reply)),
            Err(e) => drop(w.reply.send(Err(e))),
        }
    }
    settle(slot, || tenant_totals(store, tenant), checks).await;
}

/// What one ask is checked for.
#[derive(Debug, Clone, Copy)]
enum Test {
    /// The bytes and objects of a write or a part, against the byte and
    /// object quotas.
    Room(QuotaLimits, Delta),
    /// One more open multipart upload, against `max_open_uploads`.
    Upload(u64),
}

impl Test {
    /// What it counts in flight once admitted.
    fn adds(&self) -> Inflight {
        match self {
            Test::Room(_, w) => Inflight {
                bytes: w.bytes,
                objects: w.objects,
                uploads: 0,
            },
            Test::Upload(_) => Inflight {
                uploads: 1,
                ..Inflight::default()
            },
        }
    }

    /// Why it does not fit next to `used` and `inflight`, if it does not.
    fn refuses(&self, used: &TenantTotals, inflight: &Inflight) -> Option<String> {
        match self {
            Test::Room(limits, w) => refusal(limits, used, inflight, w),
            Test::Upload(max) => (used.uploads + inflight.uploads >= *max).then(|| {
                format!(
                    "This tenant has {} multipart uploads in progress, the most it may have \
                     (max_open_uploads = {max}); complete or abort some first.",
                    used.uploads
                )
            }),
        }
    }
}

/// The test of `ask`, with what it credits read from `store`.
async fn test_of(
    store: &dyn StoreClient,
    ask: &QuotaAsk,
    limits: &QuotaLimits,
) -> StoreResult<Test> {
    let w = match ask {
        QuotaAsk::Upload => return Ok(Test::Upload(limits.max_open_uploads)),
        QuotaAsk::Write {
            bucket,
            key,
            bytes,
            objects,
        } => {
            let (credit_bytes, credit_objects) = replaced(store, bucket, key.as_deref()).await?;
            Delta {
                bytes: *bytes,
                objects: *objects,
                credit_bytes,
                credit_objects,
            }
        }
        QuotaAsk::Part {
            bucket,
            key,
            upload_id,
            number,
            bytes,
        } => Delta {
            bytes: *bytes,
            credit_bytes: store
                .part_size(bucket, key, upload_id, *number)
                .await?
                .unwrap_or(0),
            ..Delta::default()
        },
    };
    Ok(Test::Room(*limits, w))
}

/// Reads of a tenant's usage one round makes at most while holds are
/// given back during them ([`settle`]).
const SETTLE_READS: usize = 3;

/// An ask under check and where its answer goes.
type Check = (Test, oneshot::Sender<Answer>);

/// Read the tenant's committed usage with `read`, check each of `checks`
/// in turn next to what is in flight (with the ones admitted before it
/// in this round), and count each that fits in flight (the caller holds
/// the tenant's check lock, so no hold is added meanwhile; holds are
/// only given back).
///
/// Every write is counted at least once. A hold is given back only after
/// its write committed or failed, so a write whose hold is given back
/// while usage is read may or may not be in what the read returns; it is
/// counted in flight as it was before the read (`before`), so it is never
/// missed (missed, two writes racing for the last bytes could both be
/// admitted: the quota passed by a whole object). Counted twice instead,
/// a check could refuse what fits; so a refusal that holds only because
/// of such a write is not final: usage is read again for the asks so
/// refused (their writes then committed before the read began), up to
/// [`SETTLE_READS`] reads.
///
/// An admitted ask is answered with its [`Reservation`], made in the
/// same step as it is counted in flight: one whose caller went away, or
/// goes away before it takes the answer, gives it back.
async fn settle<R>(slot: &Arc<Slot>, read: impl Fn() -> R, mut checks: Vec<Check>)
where
    R: std::future::Future<Output = StoreResult<TenantTotals>>,
{
    let mut reads = 0;
    while !checks.is_empty() {
        reads += 1;
        let before = *slot.inflight.lock();
        let used = match read().await {
            Ok(used) => used,
            Err(e) => {
                for (_, reply) in checks {
                    drop(reply.send(Err(e.duplicate())));
                }
                return;
            }
        };
        let mut inflight = slot.inflight.lock();
        let given_back = before != *inflight;
        let mut counted = before;
        let (mut again, mut unsent) = (Vec::new(), Vec::new());
        for (test, reply) in checks {
            let Some(why) = test.refuses(&used, &counted) else {
                let held = test.adds();
                counted.add(held);
                inflight.add(held);
                let r = Reservation {
                    slot: Arc::clone(slot),
                    held,
                };
                // Not dropped here: it gives back under this lock.
                unsent.extend(reply.send(Ok(r)).err());
                continue;
            };
            if given_back && reads < SETTLE_READS && test.refuses(&used, &inflight).is_none() {
                again.push((test, reply));
            } else {
                drop(reply.send(Err(StoreError::QuotaExceeded(why))));
            }
        }
        drop(inflight);
        drop(unsent);
        checks = again;
    }
}

/// Why `w` does not fit next to what is stored and in flight, if it
/// does not. Only what the write adds is checked: a completion adds an
/// object but no bytes, a part bytes but no object.
fn refusal(
    limits: &QuotaLimits,
    used: &TenantTotals,
    inflight: &Inflight,
    w: &Delta,
) -> Option<String> {
    let (used_bytes, used_objects) = (used.bytes, used.objects);
    let bytes = (used_bytes + inflight.bytes + w.bytes).saturating_sub(w.credit_bytes);
    let objects = (used_objects + inflight.objects + w.objects).saturating_sub(w.credit_objects);
    if let Some(max) = passed(limits.quota_bytes, w.bytes, bytes) {
        return Some(format!(
            "This upload would exceed the tenant's byte quota (quota_bytes = {max}; \
             {used_bytes} bytes stored)."
        ));
    }
    if let Some(max) = passed(limits.quota_objects, w.objects, objects) {
        return Some(format!(
            "This upload would exceed the tenant's object quota (quota_objects = {max}; \
             {used_objects} objects stored)."
        ));
    }
    None
}

/// The limit a total of `total` passes, if the write adds to it at all.
fn passed(limit: Option<u64>, adds: u64, total: u64) -> Option<u64> {
    limit.filter(|max| adds > 0 && total > *max)
}

/// Size and count of the object a write to `key` would replace.
async fn replaced(
    store: &dyn StoreClient,
    bucket: &BucketInfo,
    key: Option<&str>,
) -> StoreResult<(u64, u64)> {
    let Some(key) = key else { return Ok((0, 0)) };
    match store.head_object(bucket, key).await {
        Ok(info) => Ok((info.size, 1)),
        Err(StoreError::NoSuchKey) => Ok((0, 0)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const MIB: u64 = 1 << 20;

    /// The check of a write of `bytes` (one object) under a byte quota of
    /// `quota`, and its answer.
    fn write_of(bytes: u64, quota: u64) -> (Check, oneshot::Receiver<Answer>) {
        let limits = QuotaLimits {
            quota_bytes: Some(quota),
            ..QuotaLimits::default()
        };
        let w = Delta {
            bytes,
            objects: 1,
            ..Delta::default()
        };
        let (reply, answer) = oneshot::channel();
        ((Test::Room(limits, w), reply), answer)
    }

    /// A 1 MiB write asked under a byte quota of `quota`, while another
    /// 1 MiB write is in flight and is given back during the first read
    /// of usage, which answers `reads[0]` bytes stored, then `reads[1]`;
    /// the check's result and how many reads it made.
    async fn ask_while_one_is_given_back(
        reads: [u64; 2],
        quota: u64,
    ) -> (StoreResult<Inflight>, usize) {
        let slot = Arc::new(Slot::default());
        let one = Inflight {
            bytes: MIB,
            objects: 1,
            uploads: 0,
        };
        *slot.inflight.lock() = one;
        let other = Mutex::new(Some(Reservation {
            slot: Arc::clone(&slot),
            held: one,
        }));
        let made = AtomicUsize::new(0);
        let read = || {
            let i = made.fetch_add(1, Ordering::Relaxed);
            drop(other.lock().take());
            let used = TenantTotals {
                bytes: reads[i.min(1)],
                ..TenantTotals::default()
            };
            async move { Ok(used) }
        };
        let (check, answer) = write_of(MIB, quota);
        settle(&slot, read, vec![check]).await;
        let r = answer.await.expect("answered").map(|r| r.amount());
        (r, made.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn a_write_given_back_while_usage_is_read_is_not_missed() {
        // Read as 7 MiB stored; the write in flight committed meanwhile,
        // so 8 MiB are stored and a ninth does not fit under 8 MiB.
        // Counted nowhere (not in the read, no longer in flight), it
        // would have been admitted.
        let (r, reads) = ask_while_one_is_given_back([7 * MIB, 8 * MIB], 8 * MIB).await;
        assert!(matches!(r, Err(StoreError::QuotaExceeded(_))), "{r:?}");
        assert_eq!(reads, 2, "read again before the refusal is final");
    }

    #[tokio::test]
    async fn a_write_given_back_while_usage_is_read_is_not_counted_twice() {
        // It had committed before the read (8 MiB stored) and is given
        // back meanwhile: a 1 MiB write fits under 9 MiB.
        let (r, _) = ask_while_one_is_given_back([8 * MIB, 8 * MIB], 9 * MIB).await;
        assert_eq!(r.expect("admitted").bytes, MIB);
    }

    #[tokio::test]
    async fn the_asks_of_a_round_share_one_read_and_take_the_room_in_turn() {
        // 1 MiB stored under 4 MiB: of four 1 MiB writes checked in one
        // round, the first three fit and the fourth does not.
        let slot = Arc::new(Slot::default());
        let reads = AtomicUsize::new(0);
        let read = || {
            reads.fetch_add(1, Ordering::Relaxed);
            async {
                Ok(TenantTotals {
                    bytes: MIB,
                    ..TenantTotals::default()
                })
            }
        };
        let (checks, answers): (Vec<_>, Vec<_>) = (0..4).map(|_| write_of(MIB, 4 * MIB)).unzip();
        settle(&slot, read, checks).await;
        let mut got = Vec::new();
        for a in answers {
            got.push(a.await.expect("answered"));
        }
        let admitted: Vec<bool> = got.iter().map(Result::is_ok).collect();
        assert_eq!(admitted, [true, true, true, false]);
        assert_eq!(reads.load(Ordering::Relaxed), 1);
        assert_eq!(slot.inflight.lock().bytes, 3 * MIB);
        drop(got);
        assert_eq!(*slot.inflight.lock(), Inflight::default(), "each gave back");
    }

    #[tokio::test]
    async fn an_ask_whose_caller_went_away_is_not_counted() {
        let slot = Arc::new(Slot::default());
        let read = || async { Ok(TenantTotals::default()) };
        let (gone, answer) = write_of(MIB, 8 * MIB);
        drop(answer);
        let (kept, answer) = write_of(2 * MIB, 8 * MIB);
        let (untaken, untaken_answer) = write_of(4 * MIB, 8 * MIB);
        settle(&slot, read, vec![gone, kept, untaken]).await;
        let kept = answer.await.expect("answered").expect("fits");
        assert_eq!(kept.amount().bytes, 2 * MIB);
        // Answered, but its caller goes away before it takes the answer.
        drop(untaken_answer);
        assert_eq!(slot.inflight.lock().bytes, 2 * MIB);
    }

    #[tokio::test]
    async fn a_failed_read_answers_every_ask_of_its_round() {
        let slot = Arc::new(Slot::default());
        let read = || async { Err(StoreError::Unavailable("no quorum".into())) };
        let (checks, answers): (Vec<_>, Vec<_>) = (0..3).map(|_| write_of(1, MIB)).unzip();
        settle(&slot, read, checks).await;
        for a in answers {
            let r = a.await.expect("answered");
            assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
        }
        assert_eq!(*slot.inflight.lock(), Inflight::default());
    }
}
