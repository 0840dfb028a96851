"""Failures of a `laneway cluster local` (three store nodes, two gateways,
8 partitions; its own cluster, apart from test_cluster.py's), seen through
boto3 without retries:

- a store node cut off: SIGSTOP stands in for the cut-off (the kernel
  still accepts its connections and takes their bytes, the node never
  answers, as behind a dropped link). Calls for its partitions answer 503
  within the RPC deadline, the other keys keep answering while those wait,
  LIST answers 503; after SIGCONT it serves again. (A network namespace
  cannot cut off one node of `cluster local`: every child shares the
  supervisor's loopback, and the cluster file names 127.0.0.1 addresses;
  docker-compose's test stops a container instead.)
- a store node SIGKILLed under load: requests for its partitions get 503
  within the deadline, the others keep succeeding, LIST gets 503, and the
  supervisor reports the death; restarted with its own command line, it
  serves every acknowledged object intact.
- a gateway SIGKILLed: the other keeps serving.

The tests run in this order, each leaving the cluster serving again
(except the last, which kills gateway 2). The store node of the catalog
(store-1, which holds the buckets and tenants) is left alone: its loss
stops every bucket operation until replication lands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from cluster_util import RPC_DEADLINE_S, LocalCluster, pid_alive, poll
from conftest import unique_bucket_name

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own cluster; not with LANEWAY_ENDPOINT"
)

# A 503 must come within the RPC deadline plus this (the gateway's own work,
# the client, a loaded 2-core machine).
DEADLINE_MARGIN_S = 2.0
# A request for a healthy node's key, while another node hangs.
HEALTHY_S = 2.0
# No request waits longer than this while a node hangs, whatever it
# answers (several RPC deadlines and the lanes' longest queue wait; a hang
# would end only at the client's 60 s read timeout).
HANG_BOUND_S = 30.0
KEYS = 48
# Load during the kill: bounded in requests and in time.
LOAD_MAX_REQUESTS = 3000
LOAD_AFTER_KILL_S = 7.0


@dataclass
class Outcome:
    code: str  # "OK", an S3 error code, or "<exception class>"
    seconds: float
    body: Optional[bytes] = None


def call(fn) -> Outcome:
    start = time.monotonic()
    try:
        result = fn()
        body = result["Body"].read() if isinstance(result, dict) and "Body" in result else None
        return Outcome("OK", time.monotonic() - start, body)
    except ClientError as e:
        return Outcome(e.response["Error"].get("Code", ""), time.monotonic() - start)
    except BotoCoreError as e:
        return Outcome(type(e).__name__, time.monotonic() - start)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("cluster-faults")
    c = LocalCluster(work)
    c.restarted = []  # store nodes this module started again itself
    yield c
    code = c.stop()
    for proc in c.restarted:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, f"a restarted node did not stop cleanly\n{c.logs()}"
    # Store-2 and gateway-2 died on their own: the supervisor says so.
    assert code == 1, f"cluster local exited {code}\n{c.logs()}"


@pytest.fixture(scope="module")
def data(cluster):
    """A bucket with KEYS objects written through both gateways."""
    bucket = unique_bucket_name("faults")
    clients = [cluster.client(0), cluster.client(1)]
    clients[0].create_bucket(Bucket=bucket)
    objects = {f"k/{i:03d}": os.urandom(1024 + i) for i in range(KEYS)}
    for i, (key, body) in enumerate(objects.items()):
        clients[i % 2].put_object(Bucket=bucket, Key=key, Body=body)
    return bucket, objects


def get_all(client, bucket: str, keys, workers: int = 12) -> dict[str, Outcome]:
    """GET every key at once (workers threads)."""
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(keys, pool.map(lambda k: call(lambda: client.get_object(Bucket=bucket, Key=k)), keys)))


def split_by_outcome(outcomes: dict[str, Outcome], objects: dict[str, bytes], node: str) -> tuple[set, set]:
    """(keys served intact, keys answered 503 in time); anything else fails."""
    ok = {k for k, o in outcomes.items() if o.code == "OK"}
    down = {k for k, o in outcomes.items() if o.code == "ServiceUnavailable"}
    other = {k: o for k, o in outcomes.items() if k not in ok | down}
    assert not other, f"with {node} unreachable, neither served nor 503: {other}"
    assert all(outcomes[k].body == objects[k] for k in ok), "a served object differs"
    late = {k: round(outcomes[k].seconds, 2) for k in down if outcomes[k].seconds > RPC_DEADLINE_S + DEADLINE_MARGIN_S}
    assert not late, f"503s later than the deadline: {late}"
    # 8 partitions over 3 nodes: store-2 and store-3 own 3 each, so 48 keys
    # leave each side empty with odds below 1e-9.
    assert ok and down, f"{len(ok)} served, {len(down)} 503"
    return ok, down


class Load:
    """PUTs of new keys through both gateways (one thread each) until
    stopped or LOAD_MAX_REQUESTS; every answer is kept with its time."""

    def __init__(self, cluster, bucket: str):
        self.bucket = bucket
        self.clients = [cluster.client(0), cluster.client(1)]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results: list[tuple[float, str, bytes, Outcome]] = []  # (start, key, body, outcome)
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(2)]

    def _run(self, worker: int) -> None:
        client = self.clients[worker]
        for i in range(LOAD_MAX_REQUESTS // 2):
            if self.stop.is_set():
                return
            key, body = f"load/{worker}/{i:05d}", os.urandom(2048)
            start = time.monotonic()
            outcome = call(lambda: client.put_object(Bucket=self.bucket, Key=key, Body=body))
            with self.lock:
                self.results.append((start, key, body, outcome))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in self.threads), "a load thread hangs"

    def acknowledged(self) -> dict[str, bytes]:
        return {k: b for _, k, b, o in self.results if o.code == "OK"}


def restart(cluster, cmdline: list[str], log: Path, ready: str) -> subprocess.Popen:
    """Start a killed child again with its own command line, its output
    appended to its log; once it prints `ready`."""
    offset = log.stat().st_size
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmdline, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=cluster.env, start_new_session=True)
    cluster.restarted.append(proc)

    def ready_now() -> bool:
        assert proc.poll() is None, f"the restarted node exited {proc.returncode}\n{cluster.logs()}"
        with open(log, "rb") as f:
            f.seek(offset)
            return ready.encode() in f.read()

    poll(ready_now, 60, what=f"{' '.join(cmdline)} prints {ready!r}")
    return proc


def test_a_killed_store_node_fails_only_its_keys_and_loses_nothing(cluster, data):
    bucket, objects = data
    node = cluster.child("store-2")
    cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    with Load(cluster, bucket) as load:
        time.sleep(1.5)
        killed_at = time.monotonic()
        os.kill(node.pid, signal.SIGKILL)
        poll(lambda: not pid_alive(node.pid), 10, what="store-2 is gone")
        outcomes = get_all(cluster.client(1), bucket, list(objects))
        ok, down = split_by_outcome(outcomes, objects, "store-2 killed")
        listed = call(lambda: cluster.client(0).list_objects_v2(Bucket=bucket))
        assert listed.code == "ServiceUnavailable" and listed.seconds <= RPC_DEADLINE_S + DEADLINE_MARGIN_S, listed
        time.sleep(LOAD_AFTER_KILL_S)
    # Requests answered before the kill all succeeded; those that began a
    # second or more after it met a dead node.
    before = [r for r in load.results if r[0] + r[3].seconds < killed_at]
    after = [r for r in load.results if r[0] > killed_at + 1.0]
    assert before and all(o.code == "OK" for *_, o in before), [o for *_, o in before if o.code != "OK"][:5]
    codes = {o.code for *_, o in after}
    assert codes == {"OK", "ServiceUnavailable"}, f"after the kill: {codes}"
    late = [round(o.seconds, 2) for *_, o in after if o.seconds > RPC_DEADLINE_S + DEADLINE_MARGIN_S]
    assert not late, f"requests slower than the deadline after the kill: {late}"
    poll(lambda: "store-2" in cluster.stderr() and "exited on its own" in cluster.stderr(), 5,
         what="the supervisor reports store-2's death")

    restart(cluster, cmdline, node.log, "laneway store node store-2 listening on rpc://")
    acknowledged = {**objects, **load.acknowledged()}
    clients = [cluster.client(0), cluster.client(1)]
    poll(lambda: all(o.code == "OK" for o in get_all(clients[0], bucket, sorted(down)).values()), 20,
         interval=0.5, what="the restarted store-2 serves its keys")
    for i, client in enumerate(clients):
        got = get_all(client, bucket, list(acknowledged))
        lost = [k for k, o in got.items() if o.code != "OK" or o.body != acknowledged[k]]
        assert not lost, f"gateway {i + 1}: {len(lost)} acknowledged objects lost or changed, e.g. {lost[:5]}"
    keys, token = [], None
    while True:
        page = clients[1].list_objects_v2(Bucket=bucket, **({"ContinuationToken": token} if token else {}))
        keys += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert keys == sorted(keys) and set(acknowledged) <= set(keys)
    cluster.store2_keys = down  # for the cut-off tests below


@pytest.fixture
def store2_cut_off(cluster, data):
    """The restarted store-2 SIGSTOPped (its keys known from the kill
    test); SIGCONT at the end, and then it must serve its keys again."""
    down = getattr(cluster, "store2_keys", None)
    if down is None:
        pytest.skip("needs test_a_killed_store_node_fails_only_its_keys_and_loses_nothing first (it finds store-2's keys)")
    bucket, objects = data
    node = cluster.restarted[-1]
    os.kill(node.pid, signal.SIGSTOP)
    try:
        yield bucket, objects, down
    finally:
        os.kill(node.pid, signal.SIGCONT)
    client = cluster.client(0)
    poll(lambda: all(o.code == "OK" for o in get_all(client, bucket, sorted(down)).values()), 30,
         interval=0.5, what="store-2 serves again after SIGCONT")
    again = get_all(cluster.client(1), bucket, list(objects))
    assert {k: o.body for k, o in again.items()} == objects


def test_a_cut_off_store_node_hangs_nothing(cluster, store2_cut_off):
    """Every request answers within a bound while store-2 is stopped: its
    keys never succeed, the others never get its 503, LIST fails."""
    bucket, objects, down = store2_cut_off
    # Six of its keys and twelve others, at once (each stuck call costs
    # seconds on this 2-core machine).
    sample = sorted(down)[:6] + sorted(set(objects) - down)[:12]
    outcomes = get_all(cluster.client(0), bucket, sample)
    slow = {k: round(o.seconds, 1) for k, o in outcomes.items() if o.seconds > HANG_BOUND_S}
    assert not slow, f"requests past {HANG_BOUND_S}s: {slow}"
    codes = {k: o.code for k, o in outcomes.items()}
    assert set(codes.values()) <= {"OK", "ServiceUnavailable", "SlowDown"}, codes
    assert not [k for k in codes if k in down and codes[k] == "OK"], "a stopped node's key was served"
    assert not [k for k in codes if k not in down and codes[k] == "ServiceUnavailable"], codes
    assert all(outcomes[k].body == objects[k] for k, c in codes.items() if c == "OK")
    listed = call(lambda: cluster.client(1).list_objects_v2(Bucket=bucket))
    assert listed.code in {"ServiceUnavailable", "SlowDown"} and listed.seconds <= HANG_BOUND_S, listed


def test_a_cut_off_store_node_answers_503_within_the_deadline_and_only_for_its_keys(cluster, store2_cut_off):
    bucket, objects, down = store2_cut_off
    client = cluster.client(0)
    one = call(lambda: client.get_object(Bucket=bucket, Key=min(down)))
    assert one.code == "ServiceUnavailable" and one.seconds <= RPC_DEADLINE_S + DEADLINE_MARGIN_S, one
    outcomes = get_all(client, bucket, list(objects))
    ok, refused = split_by_outcome(outcomes, objects, "store-2 stopped")
    assert refused == down
    slow = {k: round(outcomes[k].seconds, 2) for k in ok if outcomes[k].seconds > HEALTHY_S}
    assert not slow, f"keys of running nodes waited for the stopped one: {slow}"
    two = cluster.client(1)
    assert call(lambda: two.put_object(Bucket=bucket, Key=min(down), Body=b"new")).code == "ServiceUnavailable"
    assert call(lambda: two.put_object(Bucket=bucket, Key=min(ok), Body=objects[min(ok)])).code == "OK"
    listed = call(lambda: client.list_objects_v2(Bucket=bucket))
    assert listed.code == "ServiceUnavailable" and listed.seconds <= RPC_DEADLINE_S + DEADLINE_MARGIN_S, listed


def test_a_killed_gateway_leaves_the_other_serving(cluster, data):
    bucket, objects = data
    gone = cluster.child("gateway-2")
    os.kill(gone.pid, signal.SIGKILL)
    poll(lambda: not pid_alive(gone.pid), 10, what="gateway-2 is gone")
    assert call(lambda: cluster.client(1).list_buckets()).code == "EndpointConnectionError"
    one = cluster.client(0)
    one.put_object(Bucket=bucket, Key="after-gateway-2", Body=b"still here")
    assert one.get_object(Bucket=bucket, Key="after-gateway-2")["Body"].read() == b"still here"
    got = get_all(one, bucket, list(objects))
    assert all(o.code == "OK" for o in got.values()), {k: o.code for k, o in got.items() if o.code != "OK"}
    assert "after-gateway-2" in [o["Key"] for o in one.list_objects_v2(Bucket=bucket)["Contents"]]
    poll(lambda: "gateway-2" in cluster.stderr() and "exited on its own" in cluster.stderr(), 5,
         what="the supervisor reports gateway-2's death")
