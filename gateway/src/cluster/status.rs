//! `laneway cluster status --file F [--json]`: every replication group of
//! the cluster (the catalog's and each partition's) with its leader, term,
//! replicas, each replica's log and applied index and lag, and a health
//! word, as a table or as JSON.
//!
//! Each store node is asked once (the signed `groups` call, under the
//! RPC deadline) for the groups it holds a replica of; the answers are
//! joined by group. A node that does not answer shows as `down` in every
//! group it should hold a replica of.
//!
//! Health of a group: `ok` when a leader is known, every replica answered
//! and none lags the leader's log by more than [`LAG_OK`] entries or
//! abstains from votes (it started empty, a wiped disk, and has not caught
//! up yet); `degraded` when a leader is known but a replica is down,
//! lagging or abstaining (the group still commits with two of three, but
//! could not elect a leader without the third); `no-leader` when no
//! replica that answered knows of one (writes of the group fail until an
//! election ends). Exit status 0 when every group is `ok`, 1 otherwise
//! (or when the file cannot be read), 2 for an unreplicated cluster's
//! file (no groups to show).

use clap::Args;
use laneway_store::cluster::{ClusterFile, FileMapSource, MapSource, NodeId, PartitionMap};
use laneway_store::node::proto::{Call, GroupReport};
use laneway_store::remote::RemoteStore;
use laneway_store::rpc::CallOptions;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Most log entries a healthy replica may be behind its leader.
pub const LAG_OK: u64 = 1000;

/// Flags of `laneway cluster status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The cluster file (its secret beside it).
    #[arg(long, env = "LANEWAY_CLUSTER")]
    pub file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Each node's answer must come within this many seconds.
    #[arg(long, default_value_t = 5)]
    pub timeout_secs: u64,
}

/// One group, as the cluster's nodes report it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct GroupView {
    /// `catalog` or the partition (`p0003`).
    pub group: String,
    /// The leader's node, if one is known.
    pub leader: Option<String>,
    /// The highest term a replica reported.
    pub term: u64,
    /// `ok`, `degraded` or `no-leader`.
    pub health: &'static str,
    /// Each replica the map gives the group.
    pub replicas: Vec<ReplicaView>,
}

/// One replica of a group.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ReplicaView {
    /// Its node.
    pub node: String,
    /// Whether the node answered (and reported the group).
    pub up: bool,
    /// Whether it leads the group.
    pub leader: bool,
    /// Last log index it holds.
    pub last_log: u64,
    /// Last index applied to its partition.
    pub applied: u64,
    /// Last log index of its current snapshot (0: none).
    pub snapshot: u64,
    /// Last log index purged from its log after a snapshot (0: none).
    pub purged: u64,
    /// Entries behind the leader's last log index (0 without a leader).
    pub lag: u64,
    /// Bytes of the entries its log holds (0: a log in an older layout).
    pub log_bytes: u64,
    /// It started empty and refuses votes until it has caught up.
    pub abstaining: bool,
}

/// Run `laneway cluster status`.
pub fn run(args: StatusArgs) -> ExitCode {
    let file = match ClusterFile::load(&args.file) {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string(), ExitCode::FAILURE),
    };
    if file.replicas <= 1 {
        return fail(
            &format!(
                "{} has replicas = 1: no replication groups (`laneway cluster show` prints its map)",
                file.path.display()
            ),
            ExitCode::from(2),
        );
    }
    let reports = match super::runtime().and_then(|rt| rt.block_on(collect(&args))) {
        Ok(r) => r,
        Err(msg) => return fail(&msg, ExitCode::FAILURE),
    };
    let groups = join(&file.map, &reports);
    if args.json {
        let doc = serde_json::json!({ "groups": groups });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        print!("{}", table(&groups));
    }
    if groups.iter().all(|g| g.health == "ok") {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every node's groups (`None` for a node that did not answer).
async fn collect(args: &StatusArgs) -> Result<BTreeMap<NodeId, Option<Vec<GroupReport>>>, String> {
    let source = FileMapSource::open(&args.file).map_err(|e| e.to_string())?;
    let file = source.file();
    let opts = CallOptions {
        deadline: Duration::from_secs(args.timeout_secs),
        ..CallOptions::default()
    };
    let map: Arc<dyn MapSource> = Arc::new(source);
    let cluster = RemoteStore::new(&file, map, opts).map_err(|e| e.to_string())?;
    let asks = file.nodes.iter().map(|n| {
        let cluster = cluster.clone();
        async move {
            let r: Result<Vec<GroupReport>, _> = cluster.call_node(&n.id, Call::Groups).await;
            (n.id.clone(), r.ok())
        }
    });
    Ok(futures::future::join_all(asks).await.into_iter().collect())
}

/// The groups of the map, each with what its replicas reported
/// (`reports` has every node of the cluster, answered or not).
pub fn join(
    map: &PartitionMap,
    reports: &BTreeMap<NodeId, Option<Vec<GroupReport>>>,
) -> Vec<GroupView> {
    let names: BTreeMap<u64, &NodeId> = reports.keys().map(|n| (n.raft_id(), n)).collect();
    let catalog = std::iter::once(("catalog".to_string(), map.catalog().to_vec()));
    let partitions = map
        .partitions()
        .map(|p| (p.to_string(), map.replicas(p).to_vec()));
    catalog
        .chain(partitions)
        .map(|(group, members)| view(group, &members, reports, &names))
        .collect()
}

fn view(
    group: String,
    members: &[NodeId],
    reports: &BTreeMap<NodeId, Option<Vec<GroupReport>>>,
    names: &BTreeMap<u64, &NodeId>,
) -> GroupView {
    let seen: Vec<(NodeId, Option<&GroupReport>)> = members
        .iter()
        .map(|n| {
            let r = reports
                .get(n)
                .and_then(|r| r.as_ref())
                .and_then(|rs| rs.iter().find(|r| r.group == group));
            (n.clone(), r)
        })
        .collect();
    let term = seen
        .iter()
        .filter_map(|(_, r)| r.map(|r| r.status.term))
        .max()
        .unwrap_or(0);
    // The leader a replica of the highest term names (older terms may name
    // a deposed one).
    let leader_id = seen
        .iter()
        .filter_map(|(_, r)| r.filter(|r| r.status.term == term))
        .find_map(|r| r.status.leader);
    let leader = leader_id.and_then(|id| names.get(&id).map(|n| n.to_string()));
    let head = seen
        .iter()
        .filter_map(|(_, r)| *r)
        .find(|r| Some(r.status.me) == leader_id)
        .map(|r| r.status.last_log);
    let replicas: Vec<ReplicaView> = seen
        .iter()
        .map(|(node, r)| replica(node, *r, leader_id, head))
        .collect();
    let health = health(leader.is_some(), &replicas);
    GroupView {
        group,
        leader,
        term,
        health,
        replicas,
    }
}

fn replica(
    node: &NodeId,
    r: Option<&GroupReport>,
    leader: Option<u64>,
    head: Option<u64>,
) -> ReplicaView {
    match r {
        Some(r) => ReplicaView {
            node: node.to_string(),
            up: true,
            leader: Some(r.status.me) == leader,
            last_log: r.status.last_log,
            applied: r.status.applied,
            snapshot: r.status.snapshot,
            purged: r.status.purged,
            lag: head.map_or(0, |h| h.saturating_sub(r.status.applied)),
            log_bytes: r.status.log_bytes,
            abstaining: r.status.abstaining,
        },
        None => ReplicaView {
            node: node.to_string(),
            up: false,
            leader: false,
            last_log: 0,
            applied: 0,
            snapshot: 0,
            purged: 0,
            lag: 0,
            log_bytes: 0,
            abstaining: false,
        },
    }
}

fn health(has_leader: bool, replicas: &[ReplicaView]) -> &'static str {
    if !has_leader {
        "no-leader"
    } else if replicas
        .iter()
        .all(|r| r.up && r.lag <= LAG_OK && !r.abstaining)
    {
        "ok"
    } else {
        "degraded"
    }
}

/// The groups as a table, one line each.
pub fn table(groups: &[GroupView]) -> String {
    let mut out = format!(
        "{:<9} {:<12} {:>6}  {:<10} REPLICAS (log/applied, lag)\n",
        "GROUP", "LEADER", "TERM", "HEALTH"
    );
    for g in groups {
        let replicas: Vec<String> = g.replicas.iter().map(replica_cell).collect();
        out.push_str(&format!(
            "{:<9} {:<12} {:>6}  {:<10} {}\n",
            g.group,
            g.leader.as_deref().unwrap_or("-"),
            g.term,
            g.health,
            replicas.join("  ")
        ));
    }
    out
}

fn replica_cell(r: &ReplicaView) -> String {
    if !r.up {
        return format!("{} down", r.node);
    }
    let star = if r.leader { "*" } else { "" };
    let abstaining = if r.abstaining { " abstaining" } else { "" };
    format!(
        "{}{star} {}/{} lag {}{abstaining}",
        r.node, r.last_log, r.applied, r.lag
    )
}

/// The version of the partition map this gateway routes by (its file's,
/// or the catalog's newer copy), as Prometheus text.
pub fn render_map_version(out: &mut String, version: u64) {
    use crate::lanes::metrics::header;
    use std::fmt::Write;
    header(
        out,
        "laneway_cluster_map_version",
        "gauge",
        "Version of the partition map this gateway routes by.",
    );
    let _ = writeln!(out, "laneway_cluster_map_version {version}");
}

/// A per-replica gauge: its name, its help, and its value of a replica.
type ReplicaGauge = (&'static str, &'static str, fn(&ReplicaView) -> u64);

/// The groups as Prometheus text (the gateway's `/metrics`): per group
/// its term and health, per replica whether it answered, leads, its log
/// and applied index and its lag.
pub fn render_metrics(out: &mut String, groups: &[GroupView]) {
    use crate::lanes::metrics::{escape, header};
    use std::fmt::Write;
    header(
        out,
        "laneway_group_term",
        "gauge",
        "Highest term a replica of the group reported.",
    );
    for g in groups {
        let _ = writeln!(
            out,
            "laneway_group_term{{group=\"{}\"}} {}",
            g.group, g.term
        );
    }
    header(
        out,
        "laneway_group_healthy",
        "gauge",
        "1 when the group has a leader and every replica is up, within 1000 entries of it and voting.",
    );
    for g in groups {
        let ok = u8::from(g.health == "ok");
        let _ = writeln!(out, "laneway_group_healthy{{group=\"{}\"}} {ok}", g.group);
    }
    let per_replica: [ReplicaGauge; 9] = [
        (
            "laneway_group_replica_up",
            "1 when the replica's node answered the last round.",
            |r| u64::from(r.up),
        ),
        (
            "laneway_group_replica_leader",
            "1 for the replica that leads the group.",
            |r| u64::from(r.leader),
        ),
        (
            "laneway_group_replica_last_log_index",
            "Last log index the replica holds.",
            |r| r.last_log,
        ),
        (
            "laneway_group_replica_applied_index",
            "Last index the replica applied.",
            |r| r.applied,
        ),
        (
            "laneway_group_replica_snapshot_index",
            "Last log index in the replica's current snapshot.",
            |r| r.snapshot,
        ),
        (
            "laneway_group_replica_purged_index",
            "Last log index purged from the replica's log after a snapshot.",
            |r| r.purged,
        ),
        (
            "laneway_group_replica_lag_entries",
            "Entries the replica is behind its leader's log.",
            |r| r.lag,
        ),
        (
            "laneway_group_replica_log_bytes",
            "Bytes of the entries the replica's Raft log holds (in its node's log file).",
            |r| r.log_bytes,
        ),
        (
            "laneway_group_replica_abstaining",
            "1 while the replica, started empty (a wiped disk), refuses votes until it has caught up.",
            |r| u64::from(r.abstaining),
        ),
    ];
    for (name, help, value) in per_replica {
        header(out, name, "gauge", help);
        for g in groups {
            for r in &g.replicas {
                let _ = writeln!(
                    out,
                    "{name}{{group=\"{}\",node=\"{}\"}} {}",
                    g.group,
                    escape(&r.node),
                    value(r)
                );
            }
        }
    }
}

fn fail(msg: &str, code: ExitCode) -> ExitCode {
    eprintln!("laneway cluster status: {msg}");
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use laneway_store::replication::GroupStatus;

    fn file() -> ClusterFile {
        let text = "format = 1\npartitions = 1\nreplicas = 3\nsecret_file = \"s\"\n\
            [[nodes]]\nid = \"a\"\nrpc = \"127.0.0.1:1\"\n\
            [[nodes]]\nid = \"b\"\nrpc = \"127.0.0.1:2\"\n\
            [[nodes]]\nid = \"c\"\nrpc = \"127.0.0.1:3\"\n\
            [map]\nversion = 1\ncatalog = [\"a\", \"b\", \"c\"]\n\
            partitions = [[\"a\", \"b\", \"c\"]]\n";
        ClusterFile::parse(std::path::Path::new("c.toml"), text).expect("parse")
    }

    fn report(
        group: &str,
        me: &str,
        leader: &str,
        term: u64,
        log: u64,
        applied: u64,
    ) -> GroupReport {
        let id = |n: &str| NodeId::parse(n).expect("id").raft_id();
        GroupReport {
            group: group.into(),
            partition: None,
            status: GroupStatus {
                me: id(me),
                leader: Some(id(leader)),
                term,
                last_log: log,
                applied,
                log_bytes: 4096,
                ..GroupStatus::default()
            },
        }
    }

    #[test]
    fn groups_join_their_replicas_reports_with_lag_and_health() {
        let f = file();
        let node = |n: &str| NodeId::parse(n).expect("id");
        let mut reports = BTreeMap::new();
        reports.insert(
            node("a"),
            Some(vec![
                report("catalog", "a", "a", 3, 20, 20),
                report("p0000", "a", "b", 2, 5000, 5000),
            ]),
        );
        reports.insert(
            node("b"),
            Some(vec![
                report("catalog", "b", "a", 3, 20, 19),
                report("p0000", "b", "b", 2, 5000, 5000),
            ]),
        );
        reports.insert(node("c"), None);
        let groups = join(&f.map, &reports);
        assert_eq!(groups.len(), 2);
        let catalog = &groups[0];
        assert_eq!(
            (catalog.leader.as_deref(), catalog.term, catalog.health),
            (Some("a"), 3, "degraded")
        );
        assert!(catalog.replicas[0].leader);
        assert_eq!(catalog.replicas[1].lag, 1);
        assert!(!catalog.replicas[2].up);
        let table = table(&groups);
        assert!(table.contains("a* 20/20 lag 0"), "{table}");
        assert!(table.contains("c down"), "{table}");

        reports.insert(
            node("c"),
            Some(vec![
                report("catalog", "c", "a", 3, 20, 20),
                report("p0000", "c", "b", 2, 3000, 3000),
            ]),
        );
        let groups = join(&f.map, &reports);
        assert_eq!(groups[0].health, "ok");
        assert_eq!(groups[1].health, "degraded", "c is 2000 entries behind");
        assert_eq!(groups[1].replicas[2].lag, 2000);

        // A replica back from a wiped disk, caught up in entries but not
        // yet voting: the group is degraded, and the table says why.
        let mut wiped = report("catalog", "c", "a", 3, 20, 20);
        wiped.status.abstaining = true;
        reports.insert(node("c"), Some(vec![wiped]));
        let groups = join(&f.map, &reports);
        assert_eq!(groups[0].health, "degraded");
        assert!(
            super::table(&groups).contains("c 20/20 lag 0 abstaining"),
            "{}",
            super::table(&groups)
        );
        let mut out = String::new();
        render_metrics(&mut out, &groups);
        assert!(
            out.contains("laneway_group_replica_abstaining{group=\"catalog\",node=\"c\"} 1"),
            "{out}"
        );
    }

    #[test]
    fn metrics_name_every_group_and_replica() {
        let f = file();
        let mut reports = BTreeMap::new();
        for n in ["a", "b", "c"] {
            let r = vec![
                report("catalog", n, "a", 2, 7, 7),
                report("p0000", n, "b", 3, 9, 9),
            ];
            reports.insert(NodeId::parse(n).expect("id"), Some(r));
        }
        let mut out = String::new();
        render_metrics(&mut out, &join(&f.map, &reports));
        assert!(
            out.contains("laneway_group_term{group=\"p0000\"} 3"),
            "{out}"
        );
        assert!(
            out.contains("laneway_group_healthy{group=\"catalog\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("laneway_group_replica_leader{group=\"p0000\",node=\"b\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("laneway_group_replica_leader{group=\"p0000\",node=\"a\"} 0"),
            "{out}"
        );
        assert!(
            out.contains("laneway_group_replica_applied_index{group=\"catalog\",node=\"c\"} 7"),
            "{out}"
        );
        assert!(
            out.contains("laneway_group_replica_log_bytes{group=\"p0000\",node=\"a\"} 4096"),
            "{out}"
        );
    }

    #[test]
    fn a_group_whose_replicas_know_no_leader_has_none() {
        let f = file();
        let mut reports = BTreeMap::new();
        for n in ["a", "b", "c"] {
            let mut r = report("p0000", n, n, 4, 1, 1);
            r.status.leader = None;
            reports.insert(NodeId::parse(n).expect("id"), Some(vec![r]));
        }
        let groups = join(&f.map, &reports);
        assert_eq!(groups[1].health, "no-leader");
        assert_eq!(groups[1].leader, None);
        assert_eq!(
            groups[0].health, "no-leader",
            "no node reported the catalog"
        );
    }
}
