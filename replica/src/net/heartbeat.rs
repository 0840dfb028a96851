//! One heartbeat timer per node instead of one per group.
//!
//! Groups started with [`ticked_config`] send no heartbeats of their own;
//! a node's [`HeartbeatTicker`] asks every group it leads to send one, all
//! at the same instant, each interval.
//!
//! What this saves. Leaders' heartbeats no longer fire at independent
//! phases, one wake-up per group: before triggering them the ticker opens
//! a heartbeat round on the node's [`Peers`], so the entry-less appends
//! they turn into wait a few milliseconds in each peer's batcher and
//! leave as one call per peer ([`super::batch`]): per interval, one call
//! from this node to each follower node, whatever the number of groups
//! it leads there. The ticker is per node, not per node pair: openraft
//! sends a group's heartbeat to all its followers at once, and the
//! batchers split them by peer.
//!
//! The groups' elections are the node's too: [`ticked_config`] turns
//! openraft's election timer off, and the ticker's second task
//! ([`super::prevote::campaign`]) has a voter that hears no leader ask
//! its peers before it campaigns.
//!
//! If the ticker stops (or a node's runtime is too loaded to run it),
//! the followers of this node's groups stop hearing from it and elect
//! another leader, exactly as when a group's own timer stalls.

use super::batch::ROUND_WINDOW;
use super::group_config;
use super::{Peers, RaftService};
use crate::blocking::ReplicaResult;
use openraft::Config;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

/// [`group_config`] with the group's own heartbeat and election timer
/// switched off, for groups on a node that runs a [`HeartbeatTicker`]
/// (which also campaigns for them, [`super::prevote`]).
pub fn ticked_config(name: &str) -> ReplicaResult<Arc<Config>> {
    Ok(ticked(&*group_config(name)?))
}

/// `config` with the group's own heartbeat and election timer switched
/// off ([`ticked_config`]).
pub fn ticked(config: &Config) -> Arc<Config> {
    let mut config = config.clone();
    config.enable_heartbeat = false;
    config.enable_elect = false;
    Arc::new(config)
}

/// A node's heartbeat timer for the groups it leads, and its election
/// timer for the groups it follows ([`super::prevote::campaign`]).
pub struct HeartbeatTicker {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    elections: tokio::task::JoinHandle<()>,
}

impl HeartbeatTicker {
    /// Every `interval` (the groups' `heartbeat_interval`), open a
    /// heartbeat round on `peers` and trigger a heartbeat of every group
    /// in `service` this node leads; and campaign for the groups whose
    /// leader a majority no longer hears ([`super::prevote::campaign`]).
    /// Both run on `runtime`.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        service: Arc<RaftService>,
        peers: Arc<Peers>,
        interval: Duration,
    ) -> HeartbeatTicker {
        let (stop, stopped) = watch::channel(false);
        let elections = runtime.spawn(super::prevote::campaign(
            Arc::clone(&service),
            Arc::clone(&peers),
            stopped.clone(),
        ));
        let task = runtime.spawn(tick(service, peers, interval, stopped));
        HeartbeatTicker {
            stop,
            task,
            elections,
        }
    }

    /// Stop ticking.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        let _ = (&mut self.task).await;
        let _ = (&mut self.elections).await;
    }
}

impl Drop for HeartbeatTicker {
    fn drop(&mut self) {
        self.task.abort();
        self.elections.abort();
    }
}

async fn tick(
    service: Arc<RaftService>,
    peers: Arc<Peers>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(interval);
    // A late tick is sent once, not in a burst of the ones missed.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = ticks.tick() => {}
        }
        peers.open_round(ROUND_WINDOW);
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
