//! Leader watch: a gateway keeps its leader cache ([`super::leaders`])
//! warm by asking every store node, once a second, which groups it leads
//! (`Call::Groups`).
//!
//! Hints alone teach the cache only at a cost: a call that meets a
//! replica that does not lead is sent again, and a call with a body (a
//! PUT, an upload part), which cannot be sent again, answers 503. Without
//! the watch, a new gateway would pay that once per partition, and after
//! a failover every partition whose leader moved would too; on a network
//! where a dead host does not refuse but stays silent, each such call
//! would first wait out its deadline. With it, a new leader is known here
//! within about a second of its election, and bodies go straight to it.
//!
//! Only a node's claim about itself is taken (a replica that says it
//! leads), and of two claims the one of the higher term (a deposed leader
//! that has not heard of its successor yet still claims its old term),
//! whichever answers first and across rounds
//! (`super::leaders::Leaders::claim`). A node that
//! does not answer within the round's deadline is skipped for that round.
//! A new claimed leader also ends the calls still out at the one before
//! it (a stopped or cut-off leader: they answer 503 then, not at their
//! deadline; `super::route`).
//!
//! A call out at a replicated group's leader for [`STALL_NUDGE`] rings the
//! watch, which then runs a round of claims only at once (each node's
//! answer due within [`HURRIED_WITHIN`], the rounds at least
//! [`HURRIED_GAP`] apart), beside its ticking rounds: so while the calls
//! at a stopped leader wait, a new leader's claim is heard within about
//! a quarter second of its election instead of at the next tick. A
//! hurried round keeps no report (a node slower than its short deadline
//! is not shown as silent).

use super::MapShare;
use super::RemoteStore;
use super::leaders::Target;
use crate::cluster::{NodeId, PartitionMap};
use crate::node::proto::{Call, GroupReport};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How long a call is out at a replicated group's leader before it rings
/// the watch (and again every as long while it stays out).
pub const STALL_NUDGE: Duration = Duration::from_millis(300);

/// Each node's answer in a hurried round is due within this.
pub const HURRIED_WITHIN: Duration = Duration::from_millis(250);

/// Hurried rounds begin at least this far apart.
pub const HURRIED_GAP: Duration = Duration::from_millis(250);

impl RemoteStore {
    /// Refresh the leader cache every `every` (each node's answer due
    /// within it) while this client lives, if the map has groups of more
    /// than one replica; `None` (no task) otherwise. Call from within a
    /// tokio runtime.
    pub fn watch_leaders(&self, every: Duration) -> Option<tokio::task::JoinHandle<()>> {
        let map = self.map();
        let replicated =
            map.catalog().len() > 1 || map.partitions().any(|p| map.replicas(p).len() > 1);
        if !replicated {
            return None;
        }
        let inner = Arc::downgrade(&self.inner);
        let hurry = Arc::clone(&self.inner.hurry);
        let ticking = {
            let inner = inner.clone();
            async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(inner) = inner.upgrade() else {
                        return;
                    };
                    RemoteStore { inner }.refresh_leaders(every).await;
                }
            }
        };
        let hurried = async move {
            loop {
                // Woken at least every `every` to see whether the client
                // is still there.
                let rung = tokio::time::timeout(every, hurry.notified()).await;
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                if rung.is_ok() {
                    let begun = tokio::time::Instant::now();
                    RemoteStore { inner }.take_claims(HURRIED_WITHIN).await;
                    tokio::time::sleep_until(begun + HURRIED_GAP).await;
                }
            }
        };
        Some(tokio::spawn(async move {
            tokio::join!(ticking, hurried);
        }))
    }

    /// Take a newer map if the source has one (its file, or the catalog's
    /// copy: [`RemoteStore::share_map`], which also publishes this
    /// client's map when the catalog's is older), ask every node which
    /// groups it leads (each answer due `within`) and remember the leaders
    /// found. Each node's claims count as soon as it answers, so a node
    /// that does not (a stopped one) delays no other's news by the round's
    /// `within`.
    pub async fn refresh_leaders(&self, within: Duration) {
        if let Err(e) = self.inner.map.poll() {
            tracing::warn!(error = %e, "the partition map could not be read again; keeping the one in use");
        }
        // Beside the claims, so a catalog electing a leader delays no
        // partition's news.
        let (shared, (map, nodes, reports)) =
            tokio::join!(self.share_map(within), self.claims_round(within));
        match shared {
            Ok(MapShare::Taken) => tracing::info!(
                version = self.map().version(),
                "took a newer partition map from the catalog"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "the catalog's copy of the partition map was not read")
            }
        }
        *self.inner.reports.lock() = Some(ReplicationView {
            map,
            reports: nodes.into_iter().zip(reports).collect(),
        });
    }

    /// A hurried round: every node's claims taken as it answers (each due
    /// `within`), no report kept.
    async fn take_claims(&self, within: Duration) {
        self.claims_round(within).await;
    }

    /// Ask every node which groups it leads (each answer due `within`),
    /// taking each node's claims as it answers; the map, the nodes and
    /// their reports (`None`: no answer).
    async fn claims_round(
        &self,
        within: Duration,
    ) -> (
        Arc<PartitionMap>,
        Vec<NodeId>,
        Vec<Option<Vec<GroupReport>>>,
    ) {
        use futures::StreamExt;
        let map = self.map();
        let nodes = self.known_nodes();
        let mut asks: futures::stream::FuturesUnordered<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| async move {
                let report = self
                    .call_node_within::<Vec<GroupReport>>(n, Call::Groups, within)
                    .await
                    .ok();
                (i, report)
            })
            .collect();
        let mut reports = vec![None; nodes.len()];
        while let Some((i, report)) = asks.next().await {
            let claims = claimed_leaders(report.iter().flatten().cloned());
            for (target, (term, leader)) in claims {
                self.inner.leaders.claim(&map, target, leader, term);
            }
            reports[i] = report;
        }
        drop(asks);
        (map, nodes, reports)
    }

    /// The watch's last round, if it ran.
    pub fn last_reports(&self) -> Option<ReplicationView> {
        self.inner.reports.lock().clone()
    }
}

/// The groups as the nodes reported them in one round of the watch.
#[derive(Clone, Debug)]
pub struct ReplicationView {
    /// The map the round routed by (each group's replicas).
    pub map: Arc<PartitionMap>,
    /// Every node of the cluster with its groups (`None`: it did not
    /// answer within the round).
    pub reports: Vec<(NodeId, Option<Vec<GroupReport>>)>,
}

/// Each group's leader by the replicas' own claims: the claim of the
/// highest term wins; (term, leader's Raft id).
fn claimed_leaders(reports: impl Iterator<Item = GroupReport>) -> HashMap<Target, (u64, u64)> {
    let mut best: HashMap<Target, (u64, u64)> = HashMap::new();
    for r in reports {
        if r.status.leader != Some(r.status.me) {
            continue;
        }
        let target = match r.partition {
            Some(p) => Target::Partition(p),
            None => Target::Catalog,
        };
        let claim = (r.status.term, r.status.me);
        best.entry(target)
            .and_modify(|b| {
                if claim.0 > b.0 {
                    *b = claim;
                }
            })
            .or_insert(claim);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PartitionId;
    use crate::replication::GroupStatus;

    fn report(p: Option<u32>, me: u64, leader: Option<u64>, term: u64) -> GroupReport {
        GroupReport {
            group: String::new(),
            partition: p.map(PartitionId),
            status: GroupStatus {
                me,
                leader,
                term,
                ..GroupStatus::default()
            },
        }
    }

    #[test]
    fn only_claims_count_and_the_highest_term_wins() {
        let reports = vec![
            // The followers' view of partition 0 (led by 1, which did not
            // answer): not taken.
            report(Some(0), 2, Some(1), 5),
            report(Some(0), 3, Some(1), 5),
            // Partition 1: a deposed leader (term 3) and its successor (4).
            report(Some(1), 3, Some(3), 3),
            report(Some(1), 2, Some(2), 4),
            // The catalog, led by 1.
            report(None, 1, Some(1), 9),
            // Partition 2: nobody claims it.
            report(Some(2), 1, None, 2),
        ];
        let got = claimed_leaders(reports.into_iter());
        assert_eq!(got.get(&Target::Partition(PartitionId(0))), None);
        assert_eq!(got.get(&Target::Partition(PartitionId(1))), Some(&(4, 2)));
        assert_eq!(got.get(&Target::Catalog), Some(&(9, 1)));
        assert_eq!(got.len(), 2);
    }
}
