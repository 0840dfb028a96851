//! One heartbeat timer per node instead of one per group.
//!
//! Groups started with [`ticked_config`] send no heartbeats of their own;
//! a node's [`HeartbeatTicker`] asks every group it leads to send one, all
//! at the same instant, each interval.
//!
//! What this saves, and what it does not. The plan (docs/replication.md)
//! has one ticker per node pair; with openraft a group's heartbeat goes to
//! all its followers at once, so per-pair tickers would send each group's
//! heartbeat once per pair: the ticker is per node, which covers every
//! pair the node leads groups on. Leaders' heartbeats no longer fire at
//! independent phases, one wake-up per group: they leave together, so the
//! shared HTTP/2 connection to each peer ([`super::Peers`]) writes them
//! back to back (hyper flushes the frames queued together in one socket
//! write, and the peer reads them in one wake-up) rather than as a
//! trickle of lone packets. It does not cut the number of messages: each
//! group's heartbeat is still one RPC call (one stream, one signature,
//! one reply) per follower per interval. Folding them into one call per
//! pair needs a batch method whose reply carries each group's answer;
//! that is not built. Each group also keeps its own tick task, which
//! drives its election timer.
//!
//! If the ticker stops (or a node's runtime is too loaded to run it),
//! the followers of this node's groups stop hearing from it and elect
//! another leader, exactly as when a group's own timer stalls.

use super::RaftService;
use super::group_config;
use crate::blocking::ReplicaResult;
use openraft::Config;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

/// [`group_config`] with the group's own heartbeat switched off, for
/// groups on a node that runs a [`HeartbeatTicker`].
pub fn ticked_config(name: &str) -> ReplicaResult<Arc<Config>> {
    let mut config = (*group_config(name)?).clone();
    config.enable_heartbeat = false;
    Ok(Arc::new(config))
}

/// A node's heartbeat timer for the groups it leads.
pub struct HeartbeatTicker {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl HeartbeatTicker {
    /// Every `interval` (the groups' `heartbeat_interval`), trigger a
    /// heartbeat of every group in `service` this node leads.
    pub fn start(service: Arc<RaftService>, interval: Duration) -> HeartbeatTicker {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(tick(service, interval, stopped));
        HeartbeatTicker { stop, task }
    }

    /// Stop ticking.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn tick(service: Arc<RaftService>, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(interval);
    // A late tick is sent once, not in a burst of the ones missed.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = ticks.tick() => {}
        }
        for (group, raft) in service.all() {
            let leads = {
                let m = raft.metrics();
                let m = m.borrow();
                m.current_leader == Some(m.id)
            };
            if !leads {
                continue;
            }
            // Only queues a command for the group's core: no network wait.
            if let Err(e) = raft.trigger().heartbeat().await {
                tracing::debug!(group, error = %e, "heartbeat of a stopped group");
            }
        }
    }
}
