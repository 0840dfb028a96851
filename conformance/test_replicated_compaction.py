"""Compaction of replicated volumes (docs/replication.md, "Compaction of
replicated volumes") on `laneway cluster local --store-nodes 3
--gateways 1 --replicas 3 --partitions 4`, with 2 MiB volume segments
(`--disk-reserve 8M`), a compaction pass every second and a snapshot of
each group every 20 log entries.

One scenario: objects are written, one store node is killed, every object
is overwritten or deleted while it is down (two replicas of three are a
quorum), and the leaders' compaction deletes the segments left garbage;
then the node comes back. Checked: the leaders' nodes delete segments and
their volumes shrink; every object reads back with its newest bytes and
the deleted ones are gone; the node that missed the compaction, caught up
from the log or a snapshot, ends with the very segment files of the
others (same names, same bytes), so no replica keeps a segment the group
deleted, and none lacks one it needs.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from cluster_util import LocalCluster, poll
from conftest import unique_bucket_name
from test_replication import client, cluster_status, fully_replicated, kill_node, restart_node

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own cluster; not with LANEWAY_ENDPOINT"
)

PARTITIONS = 4
OBJECTS = 64
# Volume records (above the inline limit), four to a 2 MiB segment.
SIZE = 512 << 10
DELETED = 16
STORES = ("store-1", "store-2", "store-3")
# Compaction passes run every second; a generous bound on all of them.
DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("replicated-compaction")
    c = LocalCluster(work, stores=3, gateways=1, partitions=PARTITIONS, replicas=3,
                     extra_env={"LANEWAY_COMPACT_EVERY": "1", "LANEWAY_RAFT_SNAPSHOT_ENTRIES": "20"},
                     extra_args=["--disk-reserve", "8M"])
    c.restarted = {}
    yield c
    code = c.stop()
    for proc in c.restarted.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    assert code in (0, 1), f"cluster local exited {code}\n{c.logs()}"


def segments(cluster, node: str) -> dict[str, str]:
    """Every volume segment of `node`: "partition/file" -> sha256. The
    node's compaction runs while this looks: a file deleted between the
    listing and its read is gone, not an error."""
    out = {}
    for seg in sorted((cluster.dir / node / "partitions").glob("*/volumes/seg-*.dat")):
        name = f"{seg.parent.parent.name}/{seg.name}"
        try:
            out[name] = hashlib.sha256(seg.read_bytes()).hexdigest()
        except FileNotFoundError:
            continue
    return out


def volume_bytes(cluster, node: str) -> int:
    """The bytes of `node`'s volume segments; one deleted while this
    looks counts as gone."""
    total = 0
    for seg in (cluster.dir / node / "partitions").glob("*/volumes/seg-*.dat"):
        try:
            total += seg.stat().st_size
        except FileNotFoundError:
            continue
    return total


def retried(call, what: str):
    """`call()`, again after a 503 or a dropped connection (an election
    after the kill answers 503 for a few seconds) until `DEADLINE_S`; a
    whole-object PUT and a DELETE may be repeated."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            return call()
        except (ClientError, BotoCoreError) as e:
            code = e.response["Error"].get("Code") if isinstance(e, ClientError) else "connection"
            if code not in ("ServiceUnavailable", "SlowDown", "503", "connection") or time.monotonic() > deadline:
                raise AssertionError(f"{what}: {e}") from e
            time.sleep(0.5)


def put_all(s3, bucket: str, bodies: dict[str, bytes]) -> None:
    def put(kv):
        retried(lambda: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), f"PUT {kv[0]}")
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, bodies.items()))


def body(rng: random.Random) -> bytes:
    return rng.randbytes(SIZE)


def test_leaders_compact_through_the_log_and_a_node_that_was_down_ends_with_the_same_segments(cluster):
    rng = random.Random(13)
    poll(lambda: fully_replicated(cluster), DEADLINE_S, interval=1.0, what="every group elected")
    s3 = client(cluster, 0)
    bucket = unique_bucket_name("compact")
    retried(lambda: s3.create_bucket(Bucket=bucket), "CreateBucket")
    first = {f"obj-{i:03d}": body(rng) for i in range(OBJECTS)}
    put_all(s3, bucket, first)
    poll(lambda: fully_replicated(cluster), DEADLINE_S, interval=1.0, what="every group caught up")
    before = segments(cluster, "store-1")
    assert len(before) >= 2 * PARTITIONS, before

    down = "store-3"
    cmdline = kill_node(cluster, down)
    latest = {k: body(rng) for k in list(first)[DELETED:]}
    put_all(s3, bucket, latest)
    for k in list(first)[:DELETED]:
        retried(lambda k=k: s3.delete_object(Bucket=bucket, Key=k), f"DELETE {k}")

    # The leaders' nodes delete segments of the first round, through the log.
    def compacted() -> bool:
        return all(len(set(before) - set(segments(cluster, n))) >= PARTITIONS for n in STORES[:2])
    poll(compacted, DEADLINE_S, interval=1.0, what="segments of overwritten objects deleted on store-1 and store-2")
    written = 2 * OBJECTS * SIZE
    shrunk = [volume_bytes(cluster, n) for n in STORES[:2]]
    assert all(b < written for b in shrunk), (shrunk, written)

    for k, want in latest.items():
        got = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
        assert got == want, f"{k}: {len(got)} bytes, not its newest body"
    for k in list(first)[:DELETED]:
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket=bucket, Key=k)
        assert e.value.response["Error"]["Code"] in ("404", "NoSuchKey"), e.value.response

    restart_node(cluster, down, cmdline)
    poll(lambda: fully_replicated(cluster), DEADLINE_S, interval=1.0, what=f"{down} caught up")

    def same_segments() -> bool:
        want = segments(cluster, "store-1")
        return all(segments(cluster, n) == want for n in STORES[1:])
    poll(same_segments, DEADLINE_S, interval=1.0,
         what="every replica holds the same segment files, byte for byte")
    stale = set(before) & set(segments(cluster, down))
    assert len(stale) < len(before), f"{down} kept every segment the others deleted: {sorted(stale)}"
    groups = [g for g in cluster_status(cluster)["groups"] if g["group"] != "catalog"]
    assert len(groups) == PARTITIONS, groups
