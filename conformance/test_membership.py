"""Membership changes under load (docs/replication.md, "Membership
changes") on `laneway cluster local --store-nodes 3 --gateways 2
--replicas 3` (8 partitions), one cluster for the module; the tests run
in order, each starting from the cluster the one before left:

1. `laneway cluster add-node` adds store-4 to the cluster file holding
   nothing; the test starts it (store-3's command line with its own data
   directory, port and id) and runs `laneway cluster rebalance` while a
   workload runs: every node then holds 6 of the 24 replicas, store-4
   among them, and `laneway cluster status` shows store-4 in exactly the
   groups the map gives it. A second rebalance has nothing to move.
   Then a gateway started with a copy of the file from before add-node
   (another host's copy, never rewritten) takes the newer map from the
   catalog (`cluster/map`): its /metrics report the current map version
   and store-4 in its groups, and it serves every partition.
2. store-3, which held every partition at the start and had some moved
   to store-4, deletes its copies of exactly those partitions (log,
   index rows, volume segments, snapshots) while it runs, once no leader
   has spoken to them for 10 s; restarted then, it has nothing left to
   delete, its groups stay healthy, and everything written so far reads
   back.
3. `laneway cluster move-partition` moves one of store-4's replicas back
   to the store node without that partition, then `laneway cluster
   remove-node` takes store-1 out, both under load: store-1 holds a
   replica of the catalog and led every group at the start, so its
   partitions move to the others and then its catalog replica (to
   store-4, the only node without one). Every partition and the catalog
   are then on store-2..4. Then store-1's process is killed: writes go
   on on every partition, tenants and buckets are still served, and every
   acknowledged object of both tests reads back, so nothing still
   depended on it.
4. `remove-node` of store-2, which would leave two nodes for groups of
   three replicas, is refused before anything moves (exit 1, saying to
   add a node) and changes neither the file nor any group.

Under load means the `Workload` and the checks of test_replication.py
(its `Nemesis`): six threads through both gateways doing PUT, GET and
DELETE on 40 keys, recorded; after the change the history must be
linearizable per key (lincheck.py: a GET answering absent or an older
value after an acknowledged PUT is a violation), every acknowledged PUT
that is its key's last write must read back byte-exact through both
gateways (48 seed objects, 64 fresh keys and the workload's own), 64
fresh keys (all partitions) must be writable, and the admin API's usage
must equal a LIST. Besides: every error the workload saw must be a 503
(ServiceUnavailable, SlowDown) or a transport error (a timeout, a
connection closed or refused, a body cut short): while a replica moves,
a partition whose leader leaves answers 503 for an election, and no
other call fails (no 500, no 404, no other 4xx).

The checks of the map read the cluster file itself (TOML: `[[nodes]]`,
`[map] version, catalog, partitions`); the checks of the groups read
`laneway cluster status --json`, where each group lists the replicas the
map gives it, each `up` only when its node reports the group (a node
reports only the groups it is a member of).

Nothing here is skipped for a missing feature: without the subcommands
the tests fail, saying what the CLI answered.
"""

from __future__ import annotations

import builtins
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import botocore.exceptions
import pytest

import lincheck
from cluster_util import LocalCluster, free_port_block, poll, s3_client, tail
from conftest import ACCESS_KEY, ADMIN_TOKEN, SECRET_KEY, terminate, unique_bucket_name
from lincheck import Op
from test_replication import (STORE_READY, Nemesis, client, cluster_status, kill_node, node_cmdline, read_back,
                              restart_node)

try:  # Python 3.11+; before it, `laneway cluster show` is parsed instead
    import tomllib
except ModuleNotFoundError:
    tomllib = None

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own cluster; not with LANEWAY_ENDPOINT"
)

PARTITIONS = 8
REPLICAS = 3
ORIGINAL = ["store-1", "store-2", "store-3"]
NEW = "store-4"
# The CLI's own deadline for a whole rebalance or remove-node (six moves,
# each a learner catching up from the group's first entry, then two
# membership commits), and for one move.
MOVES_TIMEOUT_S = 120
MOVE_TIMEOUT_S = 60
# A rebalance of a balanced map has nothing to move.
AGAIN_TIMEOUT_S = 30
# How long past its own deadline the CLI may take before it is killed.
CLI_GRACE_S = 30
# A new store node prints its listening line and answers a ping within this.
START_TIMEOUT_S = 60.0
# After the moves, every group reports ok (a leader among the map's
# replicas, every replica up and caught up) within this.
STATUS_DEADLINE_S = 60.0
# Codes of a ClientError the workload may see while replicas move (a 503:
# an election after the leader left its group).
RETRYABLE_CODES = frozenset({"ServiceUnavailable", "SlowDown", "503"})


def _subclass_names(*roots: type) -> frozenset[str]:
    names: set[str] = set()
    stack = list(roots)
    while stack:
        cls = stack.pop()
        names.add(cls.__name__)
        stack.extend(cls.__subclasses__())
    return frozenset(names)


# What the workload records (test_replication.classify: the exception's
# class name) for a transport error: a timeout, a connection refused or
# closed, a streamed body that broke off or came short.
TRANSPORT_ERRORS = _subclass_names(
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.ConnectionError,
    botocore.exceptions.IncompleteReadError,
    builtins.ConnectionError,
    builtins.TimeoutError,
)


# --- the cluster file ---------------------------------------------------------


def cluster_file(cluster) -> Path:
    return cluster.dir / "cluster.toml"


@dataclass
class ClusterMap:
    """The parts of the cluster file these tests look at."""

    version: int
    nodes: dict[str, str]  # id -> RPC address, in the file's order
    catalog: list[str]
    partitions: list[list[str]]  # partition i -> its replicas

    def held_by(self, node: str) -> list[int]:
        return [p for p, replicas in enumerate(self.partitions) if node in replicas]

    def groups(self) -> dict[str, list[str]]:
        """Group name (as `cluster status` names it) -> replicas, sorted."""
        out = {"catalog": sorted(self.catalog)}
        out.update({f"p{p:04d}": sorted(r) for p, r in enumerate(self.partitions)})
        return out

    def show(self) -> str:
        rows = [f"map version {self.version}, nodes {self.nodes}, catalog {self.catalog}"]
        rows += [f"  p{p:04d} {' '.join(r)}" for p, r in enumerate(self.partitions)]
        return "\n".join(rows)


def read_map(cluster) -> ClusterMap:
    """The cluster file as it is now (with Python < 3.11, as `laneway
    cluster show` prints it)."""
    path = cluster_file(cluster)
    if tomllib is None:
        return _map_from_show(cluster)
    doc = tomllib.loads(path.read_text())
    return ClusterMap(
        version=doc["map"]["version"],
        nodes={n["id"]: n["rpc"] for n in doc["nodes"]},
        catalog=list(doc["map"]["catalog"]),
        partitions=[list(r) for r in doc["map"]["partitions"]],
    )


def _map_from_show(cluster) -> ClusterMap:
    ran = laneway_cluster(cluster, "show", timeout=60)
    assert ran.code == 0, ran.describe()
    version = re.search(r"map version (\d+)", ran.out)
    catalog = re.search(r"^catalog\s+(.*)$", ran.out, re.M)
    assert version and catalog, ran.describe()
    nodes = dict(re.findall(r"^(\S+)\s+(\S+:\d+)\s+\d+\s+\d+\s*$", ran.out, re.M))
    parts = [(int(p), r.split()) for p, r in re.findall(r"^p(\d+)\s+(.*)$", ran.out, re.M)]
    return ClusterMap(int(version[1]), nodes, catalog[1].split(), [r for _, r in sorted(parts)])


def map_problems(m: ClusterMap, nodes: list[str], catalog: Optional[list[str]] = None) -> list[str]:
    """Why `m` is not a balanced map over exactly `nodes`: each partition
    with REPLICAS distinct replicas among them, each node holding the
    floor or the ceiling of its share, the catalog on `catalog`
    (store-1..3 unless given)."""
    catalog = sorted(catalog or ORIGINAL)
    problems = []
    if sorted(m.nodes) != sorted(nodes):
        problems.append(f"the file's nodes are {sorted(m.nodes)}, not {sorted(nodes)}")
    if len(m.partitions) != PARTITIONS:
        problems.append(f"the map has {len(m.partitions)} partitions, not {PARTITIONS}")
    for p, replicas in enumerate(m.partitions):
        if len(set(replicas)) != REPLICAS or not set(replicas) <= set(nodes):
            problems.append(f"p{p:04d} has replicas {replicas}: not {REPLICAS} distinct nodes of {nodes}")
    total = len(m.partitions) * REPLICAS
    low, high = total // len(nodes), -(-total // len(nodes))
    shares = {n: len(m.held_by(n)) for n in nodes}
    if any(not low <= s <= high for s in shares.values()):
        problems.append(f"unbalanced: replicas per node {shares}, each should hold {low}..{high}")
    if sorted(m.catalog) != catalog:
        problems.append(f"the catalog's replicas are {m.catalog}, not {catalog}")
    return problems


# --- the CLI ------------------------------------------------------------------


@dataclass
class Ran:
    """One run of `laneway cluster ...`."""

    cmd: list[str]
    code: Optional[int]  # None: killed at its timeout
    out: str
    err: str
    seconds: float

    def describe(self) -> str:
        how = (f"killed after {self.seconds:.0f}s" if self.code is None
               else f"exit {self.code} after {self.seconds:.1f}s")
        return (f"`laneway {' '.join(self.cmd[1:])}`: {how}\n"
                f"--- stdout ---\n{_last_lines(self.out, 40)}\n--- stderr ---\n{_last_lines(self.err, 40)}")


def _last_lines(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def _text(raw) -> str:
    if raw is None:
        return ""
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


def laneway_cluster(cluster, sub: str, *args: str, timeout: float) -> Ran:
    """`laneway cluster SUB --file F ARGS`, killed after `timeout`."""
    cmd = [str(cluster.cmd[0]), "cluster", sub, "--file", str(cluster_file(cluster)), *args]
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=cluster.env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return Ran(cmd, None, _text(e.stdout), _text(e.stderr), time.monotonic() - start)
    return Ran(cmd, done.returncode, done.stdout, done.stderr, time.monotonic() - start)


def moves(cluster, sub: str, *args: str, timeout: int = MOVES_TIMEOUT_S) -> Ran:
    """A subcommand that moves replicas, with its own --timeout."""
    return laneway_cluster(cluster, sub, *args, "--timeout", str(timeout), timeout=timeout + CLI_GRACE_S)


# --- the new store node -------------------------------------------------------


@dataclass
class AddedNode:
    """A store node this module started itself (not a child of `cluster
    local`): its process, command line and log."""

    name: str
    addr: str
    cmd: list[str]
    log: Path
    proc: subprocess.Popen

    def tail(self) -> str:
        return f"--- {self.name}'s log {self.log} ---\n{tail(self.log, 60)}"


def with_flags(cmdline: list[str], values: dict[str, str]) -> list[str]:
    """`cmdline` with the value of each flag of `values` replaced (as
    `--flag VALUE` or `--flag=VALUE`); each must be there."""
    out = list(cmdline)
    for flag, value in values.items():
        at = [i for i, a in enumerate(out) if a == flag or a.startswith(flag + "=")]
        assert len(at) == 1, f"{flag} appears {len(at)} times in {cmdline}"
        i = at[0]
        if out[i] == flag:
            out[i + 1] = value
        else:
            out[i] = f"{flag}={value}"
    return out


def start_store(cluster, name: str, addr: str) -> AddedNode:
    """Start store node `name` on `addr` with store-3's command line (its
    own data directory, port and id), its output in logs/NAME.log, until
    it prints its listening line and answers `laneway cluster ping`."""
    cmd = with_flags(node_cmdline(cluster, "store-3"), {
        "--data-dir": str(cluster.dir / name),
        "--listen": addr,
        "--node": name,
    })
    log = cluster.dir / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=cluster.env, start_new_session=True)
    node = AddedNode(name, addr, cmd, log, proc)
    cluster.added[name] = node
    ready = STORE_READY.format(name)
    deadline = time.monotonic() + START_TIMEOUT_S
    while ready not in log.read_text(errors="replace"):
        if proc.poll() is not None:
            pytest.fail(f"{name} exited {proc.returncode} before it listened\ncommand: {' '.join(cmd)}\n"
                        f"{node.tail()}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"{name} did not print {ready!r} within {START_TIMEOUT_S:.0f}s\n"
                        f"command: {' '.join(cmd)}\n{node.tail()}", pytrace=False)
        time.sleep(0.1)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        ping = laneway_cluster(cluster, "ping", "--node", name, timeout=30)
        if ping.code == 0:
            return node
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{name} does not answer a ping (process exit code {proc.poll()})\n"
                        f"{ping.describe()}\n{node.tail()}", pytrace=False)
        time.sleep(0.5)


# --- the checks ---------------------------------------------------------------


def group_problems(cluster, m: ClusterMap) -> list[str]:
    """Why `laneway cluster status --json` does not show every group of
    `m` ok: its replicas those of the map, all up, one leader among them."""
    try:
        groups = cluster_status(cluster)["groups"]
    except (ValueError, KeyError, TypeError, subprocess.TimeoutExpired) as e:
        return [f"laneway cluster status --json gave no groups: {e!r}"]
    expected = m.groups()
    problems = []
    names = [g["group"] for g in groups]
    if names != list(expected):
        problems.append(f"status lists the groups {names}, the map {list(expected)}")
    for g in groups:
        nodes = [r["node"] for r in g["replicas"]]
        leaders = [r["node"] for r in g["replicas"] if r["leader"]]
        down = [r["node"] for r in g["replicas"] if not r["up"]]
        lag = {r["node"]: r["lag"] for r in g["replicas"] if r["lag"]}
        if sorted(nodes) != expected.get(g["group"]):
            problems.append(f"{g['group']}: replicas {nodes}, the map gives {expected.get(g['group'])}")
        if g["health"] != "ok" or g["leader"] not in nodes or leaders != [g["leader"]] or down:
            problems.append(f"{g['group']}: health {g['health']}, leader {g['leader']}, replicas leading "
                            f"{leaders}, down {down}, lag {lag}")
    return problems


def wait_groups_ok(cluster, m: ClusterMap) -> list[str]:
    """group_problems until there are none or STATUS_DEADLINE_S passes;
    the last problems found (empty: every group ok)."""
    deadline = time.monotonic() + STATUS_DEADLINE_S
    while True:
        problems = group_problems(cluster, m)
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(1.0)


def reported_groups(cluster, node: str) -> set[str]:
    """The groups in which `laneway cluster status` shows `node` up (it
    reports them); empty when the status cannot be read."""
    try:
        groups = cluster_status(cluster)["groups"]
    except (ValueError, KeyError, TypeError, subprocess.TimeoutExpired):
        return set()
    return {g["group"] for g in groups for r in g["replicas"] if r["node"] == node and r["up"]}


def wait_reported(cluster, node: str, expected: set[str]) -> Optional[str]:
    """None once `node` is up in exactly the groups `expected` (within
    STATUS_DEADLINE_S); else what status showed last."""
    deadline = time.monotonic() + STATUS_DEADLINE_S
    while True:
        reported = reported_groups(cluster, node)
        if reported == expected:
            return None
        if time.monotonic() > deadline:
            return f"status shows {node} up in {sorted(reported)}, the map gives it {sorted(expected)}"
        time.sleep(1.0)


def error_problems(history: list[Op]) -> list[str]:
    """The workload's failed and unknown calls whose error was neither a
    503 nor a transport error, by kind and code, with a few examples."""
    seen = Counter(o.note for o in history if o.failed or o.unknown)
    bad = [o for o in history if (o.failed or o.unknown)
           and o.note not in RETRYABLE_CODES and o.note not in TRANSPORT_ERRORS]
    if not bad:
        return []
    t0 = min(o.invoke for o in history)
    by_code = Counter(f"{o.kind} {o.note}" for o in bad)
    return [f"{len(bad)} workload calls failed with neither a 503 nor a transport error: "
            f"{dict(by_code)} (all errors seen: {dict(seen)}), e.g.\n"
            + "\n".join(f"    {o.show(t0)}" for o in bad[:8])]


def moved_problems(ran: Ran, before: ClusterMap, after: ClusterMap) -> list[str]:
    """A command that changed the map: it exited 0 and the map's version
    went up."""
    problems = []
    if ran.code != 0:
        problems.append(ran.describe())
    if after.version <= before.version:
        problems.append(f"`laneway cluster {ran.cmd[2]}` left the map at version {after.version} "
                        f"(it was {before.version})")
    return problems


def remember(cluster, nemesis: Nemesis) -> None:
    """Keep the keys and ops of `nemesis`'s bucket, for the read-back once
    store-1 is gone."""
    keys = nemesis.workload.keys + sorted({o.key for o in nemesis.fresh})
    cluster.written.append((nemesis.bucket, keys, nemesis.workload.ops() + nemesis.fresh))


def readback_problems(cluster) -> list[str]:
    """Every bucket the module wrote, read back through both gateways:
    every key readable (an object or absent), every acknowledged PUT that
    is its key's last write there byte-exact."""
    problems = []
    for bucket, keys, ops in cluster.written:
        finals, _ = read_back(cluster, bucket, keys)
        t0 = min(o.invoke for o in ops)
        for g, final in enumerate(finals):
            unreadable = {k: v for k, v in final.items() if isinstance(v, str) and v.startswith("<unreadable")}
            if unreadable:
                problems.append(f"{bucket} through gateway {g + 1}: {len(unreadable)} keys unreadable, e.g. "
                                f"{dict(list(unreadable.items())[:6])}")
            lost = lincheck.lost_writes(ops, final)
            if lost:
                problems.append(f"{bucket} through gateway {g + 1}: {len(lost)} acknowledged PUTs lost or "
                                f"changed:\n" + "\n".join(w.describe(t0) for w in lost[:8]))
    return problems


# --- the cluster --------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("membership")
    c = LocalCluster(work, stores=3, gateways=2, partitions=PARTITIONS, replicas=REPLICAS)
    c.restarted = {}  # nodes started again by restart_node (test_replication's node_pid looks here first)
    c.added = {}  # store nodes this module started: name -> AddedNode
    c.written = []  # (bucket, keys, ops) of each test, for the last read-back
    yield c
    try:
        code = c.stop()
    finally:
        for proc in [n.proc for n in c.added.values()] + list(c.restarted.values()):
            if proc.poll() is None:
                terminate(proc, 60)
    # store-1 was killed (test 3): a child that died counts as one that
    # exited on its own.
    assert code in (0, 1), f"cluster local exited {code}\n{c.logs()}"


@pytest.fixture
def nemesis(cluster):
    n = Nemesis(cluster)
    yield n
    n.undo()


# --- the tests ----------------------------------------------------------------


# Above the sum of this test's own deadlines (the cluster's start, the
# new node's, the CLI's, the checks'), so a hang fails here, not in
# pytest-timeout, which would end the run without a teardown.
@pytest.mark.timeout(720)
def test_a_fourth_node_takes_its_share_under_load(nemesis, cluster):
    """add-node store-4, start it, rebalance under load: 6 replicas on
    every node, store-4 a member of exactly its groups, nothing lost."""
    before = read_map(cluster)
    assert not map_problems(before, ORIGINAL), "\n".join(map_problems(before, ORIGINAL) + [before.show()])
    # Another host's copy of the file, as it was before the change (beside
    # the original, so its secret file resolves): the next test's gateway.
    shutil.copy(cluster_file(cluster), stale_file(cluster))
    # A short warm-up: the workload's calls are bounded (test_replication's
    # OPS_PER_THREAD), most of them should overlap the moves.
    nemesis.start("add-node", seed=21, warmup=1.0)

    addr = f"127.0.0.1:{free_port_block(1)}"
    added = laneway_cluster(cluster, "add-node", "--id", NEW, "--rpc", addr, timeout=60)
    assert added.code == 0, added.describe()
    joined = read_map(cluster)
    assert joined.nodes.get(NEW) == addr, f"the file does not list {NEW} at {addr}\n{joined.show()}"
    assert {n: joined.nodes.get(n) for n in ORIGINAL} == before.nodes, joined.show()
    assert (joined.partitions, joined.catalog) == (before.partitions, before.catalog), \
        f"add-node changed the map: the new node must hold nothing yet\n{joined.show()}"
    assert joined.version > before.version, f"add-node left the map at version {joined.version}"

    node = start_store(cluster, NEW, addr)
    ran = moves(cluster, "rebalance")
    print(ran.describe())
    after = read_map(cluster)
    problems = moved_problems(ran, joined, after) + map_problems(after, ORIGINAL + [NEW])
    if len(after.held_by(NEW)) != PARTITIONS * REPLICAS // 4:
        problems.append(f"{NEW} holds {after.held_by(NEW)}, not {PARTITIONS * REPLICAS // 4} partitions")

    history = nemesis.workload.stop()
    problems += error_problems(history)
    problems += wait_groups_ok(cluster, after)
    why = wait_reported(cluster, NEW, {f"p{p:04d}" for p in after.held_by(NEW)})
    if why:
        problems.append(why)
    # Balanced already: a second run has nothing to move.
    again = moves(cluster, "rebalance", timeout=AGAIN_TIMEOUT_S)
    if again.code != 0 or read_map(cluster).partitions != after.partitions:
        problems.append(f"a second rebalance moved replicas or failed:\n{again.describe()}\n"
                        f"{read_map(cluster).show()}")
    if node.proc.poll() is not None:
        problems.append(f"{NEW} exited {node.proc.returncode}\n{node.tail()}")
    if problems:
        problems.append(f"map before: {before.show()}\nmap after: {after.show()}\n{node.tail()}")
    nemesis.problems += problems
    nemesis.verify("add-node")
    remember(cluster, nemesis)


def stale_file(cluster) -> Path:
    """The copy of the cluster file taken before add-node."""
    return cluster.dir / "before-add-node.toml"


def gateway_metrics(admin: str) -> str:
    req = urllib.request.Request(admin + "/metrics")
    req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read().decode()


def start_gateway(cluster, name: str, cluster_path: Path) -> tuple[subprocess.Popen, str, str, Path]:
    """A gateway started with gateway-1's command line but its own ports and
    the cluster file `cluster_path`; (process, S3 endpoint, admin URL,
    log), once it prints its listening line."""
    port = free_port_block(2)
    pid = cluster.child("gateway-1").pid
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    cmd = with_flags(cmd, {
        "--listen": f"127.0.0.1:{port}",
        "--admin-listen": f"127.0.0.1:{port + 1}",
        "--cluster": str(cluster_path),
    })
    log = cluster.dir / "logs" / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=cluster.env, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while "laneway listening on http://" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            terminate(proc, 30)
            pytest.fail(f"{name} did not start (exit {proc.poll()})\n{tail(log, 40)}", pytrace=False)
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}", log


@pytest.mark.timeout(300)
def test_a_gateway_whose_file_predates_the_new_node_routes_by_the_catalog_s_map(cluster):
    """The map is shared through the catalog (docs/replication.md,
    "Membership changes"): a gateway started with the cluster file as it
    was before add-node (another host's copy: no store-4, an older map
    version, never rewritten) takes the newer map from the catalog within
    a few rounds of its leader watch: its /metrics report the file's
    current map version and store-4 among the replicas of exactly the
    groups the map gives it, and it serves writes and reads on every
    partition, store-4's included. Its own file is left as it was."""
    stale = stale_file(cluster)
    old_text = stale.read_text()
    now = read_map(cluster)
    proc, endpoint, admin, log = start_gateway(cluster, "gateway-stale", stale)
    try:
        want = f"laneway_cluster_map_version {now.version}\n"
        poll(lambda: want in gateway_metrics(admin), 30, interval=0.5,
             what=f"the stale gateway routes by map version {now.version}")
        held = set(now.held_by(NEW))

        def store_4_listed() -> bool:
            text = gateway_metrics(admin)
            listed = {int(p) for p in re.findall(
                r'laneway_group_replica_up\{group="p(\d+)",node="' + NEW + r'"\}', text)}
            return listed == held

        poll(store_4_listed, 30, interval=0.5, what=f"the stale gateway lists {NEW} in groups {sorted(held)}")
        s3 = s3_client(endpoint, ACCESS_KEY, SECRET_KEY, attempts=5, read_timeout=8)
        bucket = unique_bucket_name("stale")
        s3.create_bucket(Bucket=bucket)
        for i in range(64):
            s3.put_object(Bucket=bucket, Key=f"k{i:02d}", Body=f"v{i}".encode())
        for i in range(64):
            assert s3.get_object(Bucket=bucket, Key=f"k{i:02d}")["Body"].read() == f"v{i}".encode()
        for i in range(64):
            s3.delete_object(Bucket=bucket, Key=f"k{i:02d}")
        s3.delete_bucket(Bucket=bucket)
        assert stale.read_text() == old_text, "the gateway rewrote its own cluster file"
    finally:
        terminate(proc, 30)


@pytest.mark.timeout(300)
def test_a_node_deletes_its_copies_of_the_replicas_moved_off_it_while_it_runs(cluster):
    """store-3 held every partition at the start and the rebalance moved
    some to store-4; without a restart it deletes its copy (log, index
    rows, volumes, snapshots) of each partition the map no longer places
    on it, and only of those, once no leader has spoken to that replica
    for 10 s; restarted then, it has nothing left to delete; its groups
    stay healthy and everything written so far reads back."""
    name = "store-3"
    m = read_map(cluster)
    gone = {p for p in range(PARTITIONS) if name not in m.partitions[p]}
    assert gone, f"no replica moved off {name}\n{m.show()}"
    log = cluster.child(name).log

    def deleted(offset: int, live: bool) -> set[int]:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        line = r"deleted the copy of a replica that moved away, while the node runs" if live \
            else r"deleted the copy of a replica that moved away"
        return {int(p) for p in re.findall(line + r" partition=p(\d+)", text)}

    root = cluster.dir / name / "partitions"

    def files_left() -> list[str]:
        left = []
        for p in sorted(gone):
            left += [f"p{p:04d}/{x.name}" for x in (root / f"p{p:04d}" / "volumes").glob("seg-*")]
            left += [f"p{p:04d}/{x.name}" for x in (root / f"p{p:04d}" / "raft" / "snapshots").glob("*.snap")]
        return left

    # LEFT_QUIET (10 s) after the move, then a pass every 5 s.
    deadline = time.monotonic() + 60
    while deleted(0, live=True) != gone and time.monotonic() < deadline:
        time.sleep(1)
    problems = []
    said = deleted(0, live=True)
    if said != gone:
        problems.append(f"{name}, running, said it deleted its copies of {sorted(said)}, "
                        f"not of {sorted(gone)}")
    if files_left():
        problems.append(f"{name}, running, keeps files of partitions moved off it: {files_left()}")
    problems += wait_groups_ok(cluster, m)
    problems += readback_problems(cluster)

    offset = log.stat().st_size
    cmdline = kill_node(cluster, name, signal.SIGTERM)
    restart_node(cluster, name, cmdline)
    problems += wait_groups_ok(cluster, m)
    again = deleted(offset, live=False)
    if again:
        problems.append(f"{name}, restarted, deleted copies of {sorted(again)} again")
    if files_left():
        problems.append(f"{name}, restarted, keeps files of partitions moved off it: {files_left()}")
    problems += readback_problems(cluster)
    assert not problems, "\n".join(problems + [m.show()])


@pytest.mark.timeout(660)
def test_a_partition_moves_back_and_a_catalog_node_is_removed_under_load(nemesis, cluster):
    """Under load: move-partition of one of store-4's replicas back to
    store-1..3, then remove-node store-1 (a catalog replica, and the first
    leader of every group): its partitions and then its catalog replica
    move, the file lists store-2..4 only; then store-1 is killed and
    writes, reads and the catalog go on."""
    node = cluster.added.get(NEW)
    assert node is not None and node.proc.poll() is None, f"{NEW} does not run (see the test before)"
    before = read_map(cluster)
    assert before.held_by(NEW), f"{NEW} holds no partition (see the test before)\n{before.show()}"
    nemesis.start("remove-node", seed=22, warmup=1.0)

    p = before.held_by(NEW)[0]
    target = next(n for n in ORIGINAL if n not in before.partitions[p])
    ran = moves(cluster, "move-partition", "--partition", str(p), "--from", NEW, "--to", target,
                timeout=MOVE_TIMEOUT_S)
    print(ran.describe())
    moved = read_map(cluster)
    problems = moved_problems(ran, before, moved)
    want = sorted(target if n == NEW else n for n in before.partitions[p])
    if sorted(moved.partitions[p]) != want:
        problems.append(f"after the move p{p:04d} has replicas {moved.partitions[p]}, not {want}")
    others = [q for q in range(len(before.partitions)) if q != p and moved.partitions[q] != before.partitions[q]]
    if others:
        problems.append(f"moving p{p:04d} changed the replicas of {others} too")

    leaving = "store-1"
    staying = [n for n in ORIGINAL if n != leaving] + [NEW]
    ran = moves(cluster, "remove-node", "--id", leaving)
    print(ran.describe())
    after = read_map(cluster)
    problems += moved_problems(ran, moved, after) + map_problems(after, staying, catalog=staying)
    if {n: after.nodes.get(n) for n in staying} != {n: moved.nodes[n] for n in staying}:
        problems.append(f"the remaining nodes' addresses changed: {after.nodes}")

    history = nemesis.workload.stop()
    problems += error_problems(history)
    problems += wait_groups_ok(cluster, after)
    why = wait_reported(cluster, NEW, {"catalog"} | {f"p{q:04d}" for q in after.held_by(NEW)})
    if why:
        problems.append(why)
    if node.proc.poll() is not None:
        problems.append(f"{NEW} exited {node.proc.returncode}\n{node.tail()}")
    if problems:
        problems.append(f"map before: {before.show()}\nafter the move: {moved.show()}\n"
                        f"after remove-node: {after.show()}\n{node.tail()}")
    nemesis.problems += problems
    nemesis.verify("remove-node")

    # store-1 holds nothing now: killed, every partition still takes
    # writes, the catalog still answers, and everything both tests wrote
    # reads back.
    kill_node(cluster, leaving)
    nemesis.writes_succeed("remove-node-gone")
    s3 = client(cluster, 1)
    fresh_bucket = f"after-{leaving}"
    s3.create_bucket(Bucket=fresh_bucket)
    s3.put_object(Bucket=fresh_bucket, Key="k", Body=b"v")
    if s3.get_object(Bucket=fresh_bucket, Key="k")["Body"].read() != b"v":
        nemesis.problems.append(f"a bucket made without {leaving} does not read back")
    remember(cluster, nemesis)
    nemesis.problems += readback_problems(cluster)
    assert not nemesis.problems, "\n".join(nemesis.problems)


def test_a_node_whose_groups_would_have_nowhere_to_go_is_not_removed(cluster):
    """remove-node store-2 with three nodes left exits 1, saying to add a
    node, before anything moves: the file and every group stay as they
    were."""
    path = cluster_file(cluster)
    text = path.read_bytes()
    before = read_map(cluster)
    assert len(before.nodes) == REPLICAS, before.show()
    ran = laneway_cluster(cluster, "remove-node", "--id", "store-2", timeout=60)
    assert ran.code == 1, ran.describe()
    assert "add a node" in (ran.out + ran.err).lower(), f"the refusal does not say why\n{ran.describe()}"
    assert path.read_bytes() == text, f"remove-node store-2 changed the file\n{read_map(cluster).show()}"
    why = wait_reported(cluster, "store-2", {"catalog"} | {f"p{p:04d}" for p in before.held_by("store-2")})
    assert why is None, why
