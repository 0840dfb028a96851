#!/usr/bin/env python3
"""Cluster benchmarks of docs/benchmarks.md ("Cluster"), in one run.

    bench/scripts/cluster.py [compare|fairness|replicas|rf3put|failover|catchup|move|compact|start|all]

compare: `laneway serve` and a cluster of one gateway and three store
nodes (`laneway gateway` + `laneway store`, loopback), each fresh in its
own temporary directory, measured one after the other with the same
commands: 4 KiB GET, durable 4 KiB PUT, and a LIST walk of a bucket
filled with `laneway-bench fill`. For every measurement the server CPU
(utime + stime from /proc/PID/stat, read before and after the bench
process) is split by role: the gateway process, and the store node
processes summed (for `serve` the one process is both).

replicas: a cluster of one gateway and three store nodes at RF 1, then
the same at RF 3 (every partition and the catalog a Raft group on all
three nodes), measured as compare measures; then, at RF 3, the failover
time: SIGKILL of the node leading the most groups under a PUT loop, and
per key the time to its first acknowledged PUT.

rf3put: at RF 3 only (REPLICAS=1: RF 1), ROUNDS runs of the durable PUT
measurement on one cluster (LANEWAY_BIN names the laneway binary, to
compare two builds); SYSCALLS=1 adds the store nodes' context switches
and system calls per PUT; QUOTA=1 follows each run with one as a tenant
with a byte quota (every PUT reserves at the catalog's quota desk; PERF
and SYSCALLS then watch the quota tenant's second run), which first
gets QUOTA_BUCKETS (default 0) more buckets, one object each.

catchup: at RF 3, store-3 killed while CATCHUP_OBJECTS (default
100000) 4 KiB objects are PUT, then started again: how long until every
replica it holds is at its leader's log index (`laneway cluster status`),
in log entries and objects per second, and in how many groups it was
sent a snapshot (LANEWAY_RAFT_SNAPSHOT_ENTRIES sets the store nodes'
snapshot interval, 10,000 entries by default).

move: at RF 3, MOVE_OBJECTS (default 50000) 4 KiB objects PUT, then a
fourth store node added (`laneway cluster add-node`, started) and one
partition's replica moved to it with `laneway cluster move-partition`
while nothing else runs: the seconds the move took, and the log entries
and bytes the new replica received per second; then `laneway cluster
rebalance` (48 replicas over 4 nodes: 12 each) timed whole.

compact: volume compaction at RF 1 and at RF 3, each once with the
background pass off (LANEWAY_COMPACT_EVERY=3600) and once every second
(each a fresh cluster of one gateway and three store nodes, segments of
16 MiB with `--disk-reserve 64M`): COMPACT_OPS (default 512) PUTs of
1 MiB over COMPACT_KEYS (default 64) keys, so most of what is written is
overwritten; then, with no load, until the store nodes' volume bytes do
not change for 3 s. Printed: the volumes left on disk, and the store
nodes' CPU over the load and the settling, per PUT. At RF 3 each
partition's leader compacts and every replica deletes the segments
through the log.

start: ROUNDS (default 3) starts of a new RF 3 cluster (`laneway cluster
local --replicas 3`, 3 store nodes, 2 gateways, 16 partitions, each in a
fresh directory): the seconds from the launch to its ready line, and to
`laneway cluster status` first exiting 0 (every group led, every
replica up and voting), asked every 0.1 s.

fairness: a cluster of two gateways and three store nodes; tenant a
(weight 1) has its workers dealt over both gateways, tenant b (weight 3)
uses the second gateway only; both saturate with 4 KiB GETs
(`laneway-bench tenants`, `endpoints=` setting). Run once with lanes on
everywhere and once with `--lanes off` on the gateways (the store nodes
keep their lanes: they have no switch), to show where the sharing is done.

Every server process runs on CPU 1 and the loader on CPU 0 (as
bench/scripts/lanes.sh does), so the server side gets the same single core
in both set-ups. Environment: DURATION (seconds per GET/PUT run, default
10), CONC (requests in flight, default 32), FILL (objects for the LIST
bucket, default 100000), FILL_LIMIT (seconds a fill may take before it is
stopped and the bucket listed as it is, default 300), PORT (first port,
default 9400), ORDER=cluster-first to measure the cluster before serve,
PIN=0 to let every process float over both CPUs, PERF=1 to sample the
cluster's processes with `perf record` (5 s, 499 Hz) during its GET run
and print the shares by thread, by object and by symbol (the data stays
in $TMPDIR/laneway-cluster-perf.data). STORE_CPU=0.3 puts the three store
nodes together in a cgroup (v1 cpu controller, CFS quota, 10 ms period; needs
root) capped at that fraction of one CPU, so that the store nodes, not the
gateways, are the contended resource, as when gateways run on machines of
their own (the fairness figure is measured that way).
Needs the release binaries (cargo build --release -p laneway-gateway -p
laneway-bench).
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "target", "release")
LANEWAY = os.environ.get("LANEWAY_BIN", os.path.join(BIN, "laneway"))
BENCH = os.path.join(BIN, "laneway-bench")
DURATION = int(os.environ.get("DURATION", "10"))
CONC = int(os.environ.get("CONC", "32"))
FILL = int(os.environ.get("FILL", "100000"))
FILL_LIMIT = int(os.environ.get("FILL_LIMIT", "300"))
PORT = int(os.environ.get("PORT", "9400"))
PIN = os.environ.get("PIN", "1") == "1"
STORE_CPU = os.environ.get("STORE_CPU", "")
# Runtime workers of each store node (TOKIO_WORKER_THREADS); "" leaves tokio's default.
STORE_WORKERS = os.environ.get("STORE_WORKERS", "")
SERVER_CPU = ["taskset", "-c", "1"] if PIN else []
LOADER_CPU = ["taskset", "-c", "0"] if PIN else []
USER_HZ = os.sysconf("SC_CLK_TCK")
ACCESS = "LWBENCHCLUSTER0001"
SECRET = "bench-cluster-secret-" + secrets.token_hex(8)
TOKEN = "bench-admin-" + secrets.token_hex(8)


def cpu_seconds(pid):
    """utime + stime of pid in seconds (fields after the command name)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / USER_HZ


class Proc:
    """A server process started in the background, its log in a file."""

    def __init__(self, role, args, log, env=None, ready=None):
        self.role = role
        self.log = log
        self.p = subprocess.Popen(
            SERVER_CPU + args,
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        if ready:
            self.wait_for(ready)

    def wait_for(self, pattern, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise SystemExit(f"{self.role} exited: {open(self.log).read()[-2000:]}")
            if re.search(pattern, open(self.log).read()):
                return
            time.sleep(0.1)
        raise SystemExit(f"{self.role} not ready: {open(self.log).read()[-2000:]}")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Setup:
    """One server set-up: its processes by role and its endpoints."""

    def __init__(self, name):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=f"laneway-{name}.")
        self.procs = []
        self.s3 = []
        self.admin = []
        self.cgroup = None

    def cap_stores(self, fraction):
        """Put the store processes in one CPU-capped cgroup."""
        self.cgroup = f"/sys/fs/cgroup/cpu/laneway-bench-stores-{os.getpid()}-{self.name}"
        os.makedirs(self.cgroup, exist_ok=True)
        with open(f"{self.cgroup}/cpu.cfs_period_us", "w") as f:
            f.write("10000\n")
        with open(f"{self.cgroup}/cpu.cfs_quota_us", "w") as f:
            f.write(f"{int(float(fraction) * 10000)}\n")
        for p in self.procs:
            if p.role == "store":
                with open(f"{self.cgroup}/cgroup.procs", "w") as f:
                    f.write(f"{p.p.pid}\n")

    def role_cpu(self):
        out = {}
        for p in self.procs:
            out[p.role] = out.get(p.role, 0.0) + cpu_seconds(p.p.pid)
        return out

    def close(self):
        for p in reversed(self.procs):
            p.stop()
        if self.cgroup:
            try:
                os.rmdir(self.cgroup)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def serve(port):
    s = Setup("serve")
    s.procs.append(Proc("serve", [LANEWAY, "serve", "--data-dir", f"{s.dir}/data",
                                  "--listen", f"127.0.0.1:{port}",
                                  "--admin-listen", f"127.0.0.1:{port + 1}",
                                  "--admin-token", TOKEN],
                        os.path.join(s.dir, "serve.log"),
                        {"LANEWAY_ACCESS_KEY": ACCESS, "LANEWAY_SECRET_KEY": SECRET},
                        r"laneway listening on http://"))
    s.s3.append(f"http://127.0.0.1:{port}")
    s.admin.append(f"http://127.0.0.1:{port + 1}")
    return s


def cluster(port, gateways, extra_gateway_args=(), replicas=1):
    """Store nodes on port+10.., gateways on port, port+2, ... (admin +1)."""
    s = Setup(f"cluster{gateways}" if replicas == 1 else f"rf{replicas}")
    cfile = os.path.join(s.dir, "cluster.toml")
    s.cluster_file = cfile
    subprocess.run([LANEWAY, "cluster", "init", "--file", cfile, "--store-nodes", "3",
                    "--base-port", str(port + 10), "--partitions", "16",
                    "--replicas", str(replicas)],
                   check=True, stdout=subprocess.DEVNULL)
    for i in range(1, 4):
        s.procs.append(Proc("store", [LANEWAY, "store", "--data-dir", f"{s.dir}/store-{i}",
                                      "--listen", f"127.0.0.1:{port + 9 + i}",
                                      "--cluster", cfile, "--node", f"store-{i}"],
                            os.path.join(s.dir, f"store-{i}.log"),
                            {"TOKIO_WORKER_THREADS": STORE_WORKERS} if STORE_WORKERS else None,
                            ready=r"listening on rpc://"))
    if STORE_CPU:
        s.cap_stores(STORE_CPU)
    for g in range(gateways):
        p = port + 2 * g
        s.procs.append(Proc("gateway", [LANEWAY, "gateway", "--cluster", cfile,
                                        "--data-dir", f"{s.dir}/gateway-{g}",
                                        "--listen", f"127.0.0.1:{p}",
                                        "--admin-listen", f"127.0.0.1:{p + 1}",
                                        "--admin-token", TOKEN, *extra_gateway_args],
                            os.path.join(s.dir, f"gateway-{g}.log"),
                            {"LANEWAY_ACCESS_KEY": ACCESS, "LANEWAY_SECRET_KEY": SECRET},
                            r"laneway listening on http://"))
        s.s3.append(f"http://127.0.0.1:{p}")
        s.admin.append(f"http://127.0.0.1:{p + 1}")
    if replicas > 1:
        wait_groups(cfile)
    return s


def wait_groups(cfile, timeout=60):
    """Until `laneway cluster status` says every group has a leader and
    every replica is up (its exit status 0): measuring while the groups
    still elect would count the first writes' 503s."""
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run([LANEWAY, "cluster", "status", "--file", cfile],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"groups not healthy after {timeout} s:\n{r.stdout}{r.stderr}")
        time.sleep(0.5)


def bench(setup, args, quiet=False, keys=(ACCESS, SECRET)):
    """Runs laneway-bench (as the tenant of `keys`); returns (stdout,
    server CPU seconds by role, wall)."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": keys[0], "AWS_SECRET_ACCESS_KEY": keys[1],
           "LANEWAY_ADMIN_TOKEN": TOKEN}
    before = setup.role_cpu()
    t = time.time()
    r = subprocess.run(LOADER_CPU + [BENCH] + args, env=env, capture_output=True, text=True)
    wall = time.time() - t
    after = setup.role_cpu()
    if r.returncode != 0:
        print(f"# {setup.name}: laneway-bench {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
        sys.stdout.flush()
    elif not quiet:
        print(f"## {setup.name}: laneway-bench {' '.join(args)}")
        print("\n".join(l for l in r.stdout.splitlines() if not l.startswith("# method")))
        sys.stdout.flush()
    return r.stdout, {k: after[k] - before[k] for k in after}, wall


def summary_row(out, op):
    """(ops, ops/s, p50 ms) from the summary line of `op`."""
    m = re.search(rf"^{op}\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+([\d.]+)", out, re.M)
    return (int(m.group(1)), float(m.group(2)), float(m.group(3))) if m else (0, 0.0, 0.0)


def cpu_text(cpu, ops, per=1):
    """CPU microseconds per `per` operations, by role."""
    return ", ".join(f"{role} {1e6 * per * secs / max(ops, 1):.0f} us"
                     for role, secs in sorted(cpu.items()))


def start_perf(setup):
    """perf record of every server process for 5 s (PERF=1), or None."""
    if os.environ.get("PERF") != "1" or not shutil.which("perf"):
        return None
    data = os.path.join(tempfile.gettempdir(), "laneway-cluster-perf.data")
    pids = ",".join(str(p.p.pid) for p in setup.procs)
    # PERF_CALLS=dwarf unwinds with debug info (the binaries keep no frame pointers).
    calls = ["--call-graph", os.environ["PERF_CALLS"]] if os.environ.get("PERF_CALLS") else ["-g"]
    return data, subprocess.Popen(["perf", "record", "-F", "499", *calls, "-o", data, "-p", pids,
                                   "--", "sleep", "5"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def report_perf(setup, perf):
    data, p = perf
    p.wait()
    roles = ", ".join(f"{p.p.pid}={p.role}" for p in setup.procs)
    print(f"## {setup.name}: perf, GET run (self time; pids {roles})")
    for sort, limit in (("pid", "0"), ("dso", "2"), ("sym", "0.7")):
        # `pid` sorts by thread; the pids above name the processes.
        r = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                            "--sort", sort, "-g", "none", "--percent-limit", limit],
                           capture_output=True, text=True)
        lines = [l for l in r.stdout.splitlines() if l.strip() and not l.startswith("#")]
        print(f"# by {sort}:")
        print("\n".join(lines[:25]))
    sys.stdout.flush()


def compare():
    makers = [lambda: serve(PORT), lambda: cluster(PORT, 1)]
    if os.environ.get("ORDER") == "cluster-first":
        makers.reverse()
    results = measure_all(makers)
    print_compare(results, "serve", "cluster1",
                  "serve vs cluster (1 gateway + 3 store nodes), server side on one CPU")


def replicas():
    """A cluster of 1 gateway and 3 store nodes at RF 1, then the same at
    RF 3, measured alike; then the failover time at RF 3."""
    makers = [lambda: cluster(PORT, 1, replicas=1), lambda: cluster(PORT, 1, replicas=3)]
    results = measure_all(makers)
    print_compare(results, "cluster1", "rf3",
                  "RF 1 vs RF 3 (1 gateway + 3 store nodes), server side on one CPU")
    failover(cluster(PORT, 1, replicas=3))


def rf3put(s):
    """ROUNDS (default 3) runs of durable 4 KiB PUTs, CONC in flight, on
    one RF 3 cluster (REPLICAS=1: RF 1) once every group is healthy: per
    run the rate and the server CPU per PUT by role, and how many groups
    each store node leads. PERF=1 profiles the store nodes during the
    second run (PERF_RUN=n: the nth; PERF_CALLS=dwarf unwinds with debug
    info); SYSCALLS=1 counts the store nodes' context switches and system
    calls per PUT during the same run (`perf stat`, 5 s). STORE_WORKERS
    sets the store nodes' runtime workers."""
    try:
        replicated = s.name != "cluster1"
        if replicated:
            wait_groups(s.cluster_file)
            leaders = {}
            for g in status_json(s):
                led = next((r["node"] for r in g["replicas"] if r["leader"]), None)
                leaders[led] = leaders.get(led, 0) + 1
            print(f"# groups led per node: {leaders}")
        tenants = [("", (ACCESS, SECRET))]
        if os.environ.get("QUOTA") == "1":
            keys = quota_tenant(s)
            extra_buckets(s, keys, int(os.environ.get("QUOTA_BUCKETS", "0")))
            tenants.append((" (quota)", keys))
        for run in range(int(os.environ.get("ROUNDS", "3"))):
            for label, keys in tenants:
                # Profiles and counts cover the second run (PERF_RUN: another)
                # of the last tenant.
                watched = (run == int(os.environ.get("PERF_RUN", "2")) - 1
                           and (label, keys) == tenants[-1])
                perf = start_perf(s) if watched else None
                calls = start_syscalls(s) if watched else None
                out, cpu, _ = bench(s, ["put", "--endpoint", s.s3[0], "--concurrency", str(CONC),
                                        "--objects", "1000000", "--bucket", f"put{run}{len(label)}",
                                        "--warmup", "0", "--duration", str(DURATION)],
                                    quiet=True, keys=keys)
                ops, rate, p50 = summary_row(out, "put")
                print(f"{s.name} put run {run + 1}{label}: {rate:.0f}/s, p50 {p50} ms; CPU per PUT: "
                      f"{cpu_text(cpu, ops)}")
                sys.stdout.flush()
                if perf:
                    report_perf(s, perf)
                if calls:
                    report_syscalls(calls, rate)
        if replicated:
            node = os.path.join(s.dir, "store-1")
            print("# store-1 on disk: " + ", ".join(
                f"{name} {du(os.path.join(node, name)) / 2**20:.0f} MiB"
                for name in sorted(os.listdir(node))
                if os.path.isdir(os.path.join(node, name))))
    finally:
        s.close()


def quota_tenant(s):
    """A tenant with a byte quota it never reaches (1 PiB), made through
    the first gateway's admin API: each of its writes reserves at the
    catalog's desk. Its keys, once the gateway takes them."""
    import urllib.request
    req = urllib.request.Request(s.admin[0] + "/v1/tenants", method="POST",
                                 data=json.dumps({"name": "quota", "quota_bytes": 1 << 50}).encode())
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        key = json.loads(resp.read())["key"]
    time.sleep(2)
    return key["access_key"], key["secret_key"]


def extra_buckets(s, keys, n):
    """`n` more buckets of the tenant of `keys`, one object each (its
    quota check sums the usage of all of its buckets)."""
    for i in range(n):
        bench(s, ["put", "--endpoint", s.s3[0], "--concurrency", "1", "--objects", "1",
                  "--bucket", f"extra{i}", "--warmup", "0", "--duration", "1"], quiet=True, keys=keys)
    if n:
        print(f"# the quota tenant has {n} more buckets")


SYSCALL_EVENTS = ["context-switches", "syscalls:sys_enter_fdatasync", "syscalls:sys_enter_fsync",
                  "syscalls:sys_enter_write", "syscalls:sys_enter_writev",
                  "syscalls:sys_enter_recvfrom", "syscalls:sys_enter_futex",
                  "syscalls:sys_enter_epoll_wait"]


def start_syscalls(setup):
    """perf stat of the store nodes' context switches and system calls
    for 5 s, started 1 s into a run (SYSCALLS=1), or None."""
    if os.environ.get("SYSCALLS") != "1" or not shutil.which("perf"):
        return None
    pids = ",".join(str(p.p.pid) for p in setup.procs if p.role == "store")
    return subprocess.Popen(["sh", "-c", f"sleep 1; exec perf stat -x, -e {','.join(SYSCALL_EVENTS)} "
                             f"-p {pids} -- sleep 5"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def report_syscalls(p, rate):
    """Print what `start_syscalls` counted, per PUT at `rate` PUTs/s."""
    _, err = p.communicate()
    per = []
    for line in err.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit():
            per.append(f"{f[2].replace('syscalls:sys_enter_', '')} {float(f[0]) / (5 * rate):.2f}")
    print("# store nodes, per PUT (all nodes): " + ", ".join(per))
    sys.stdout.flush()


def failover(s):
    """SIGKILL the store node that leads the most groups while a PUT loop
    runs; per key (64 keys over the 16 partitions), the time from the kill
    to its first acknowledged PUT; the slowest key is the failover time of
    the slowest partition. Every PUT is retried at once on failure.
    FAULT=stop: SIGSTOP instead (a leader that hangs without closing its
    connections), SIGCONT at the end."""
    try:
        import boto3
        from botocore.config import Config
        s3 = boto3.client("s3", endpoint_url=s.s3[0], region_name="us-east-1",
                          aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
                          config=Config(retries={"total_max_attempts": 1}, connect_timeout=5,
                                        read_timeout=10))
        keys = [f"k{i:03d}" for i in range(64)]
        # Right after the start, groups may still be electing: retried.
        settle = time.monotonic() + 60
        for what in ["bucket"] + keys:
            while True:
                try:
                    if what == "bucket":
                        s3.create_bucket(Bucket="failover")
                    else:
                        s3.put_object(Bucket="failover", Key=what, Body=b"x" * 4096)
                    break
                except Exception as e:
                    if "BucketAlreadyOwnedByYou" in str(e):
                        break
                    if time.monotonic() > settle:
                        raise
                    time.sleep(0.2)
        status = subprocess.run([LANEWAY, "cluster", "status", "--file", s.cluster_file, "--json"],
                                capture_output=True, text=True)
        groups = json.loads(status.stdout)["groups"]
        leads = {}
        for g in groups:
            if g["leader"]:
                leads[g["leader"]] = leads.get(g["leader"], 0) + 1
        victim = max(leads, key=leads.get)
        proc = next(p for p in s.procs if p.role == "store" and f"--node {victim}" in " ".join(p.p.args))
        stop = os.environ.get("FAULT") == "stop"
        proc.p.send_signal(signal.SIGSTOP if stop else signal.SIGKILL)
        killed = time.monotonic()
        first_ok = {}
        failures = 0
        while len(first_ok) < len(keys) and time.monotonic() - killed < 60:
            for k in keys:
                if k in first_ok:
                    continue
                try:
                    s3.put_object(Bucket="failover", Key=k, Body=b"y" * 4096)
                    first_ok[k] = time.monotonic() - killed
                except Exception:
                    failures += 1
        took = sorted(first_ok.values())
        if stop:
            proc.p.send_signal(signal.SIGCONT)
        fault = "SIGSTOP" if stop else "SIGKILL"
        print(f"## rf3 failover: {fault} of {victim} (leader of {leads[victim]} of {len(groups)} groups)")
        if took:
            print(f"# keys written again: {len(took)}/{len(keys)}; time from the {fault} to the first "
                  f"acknowledged PUT: median {took[len(took) // 2]:.2f} s, slowest {took[-1]:.2f} s; "
                  f"{failures} failed attempts meanwhile")
        sys.stdout.flush()
    finally:
        s.close()


def catchup(s, objects=None):
    """RF 3: SIGKILL store-3, PUT `objects` new 4 KiB objects (laneway-bench
    put, 32 in flight), start store-3 again with its own command line, and
    time until `laneway cluster status` shows each of its replicas at its
    leader's log index: the log entries it replayed per second, and the
    objects."""
    objects = objects or int(os.environ.get("CATCHUP_OBJECTS", "100000"))
    try:
        victim = next(p for p in s.procs if p.role == "store" and "store-3" in " ".join(p.p.args))
        args = list(victim.p.args)
        victim.p.kill()
        victim.p.wait()
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET}
        t = time.time()
        out = subprocess.run(LOADER_CPU + [BENCH, "put", "--endpoint", s.s3[0],
                                           "--concurrency", str(CONC), "--objects", str(objects),
                                           "--ops", str(objects), "--duration", "3000",
                                           "--bucket", "catchup"],
                             env=env, capture_output=True, text=True)
        wall = time.time() - t
        if out.returncode != 0:
            print(f"# laneway-bench put failed:\n{out.stdout}\n{out.stderr}")
        out = out.stdout
        ok = summary_row(out, "put")[0]
        before = {g["group"]: g for g in status_json(s)}
        behind = sum(g_lag(g, "store-3") for g in before.values())
        victim.p = subprocess.Popen(args, stdout=open(victim.log, "a"), stderr=subprocess.STDOUT,
                                    env=os.environ.copy())
        started = time.monotonic()
        while time.monotonic() - started < 600:
            groups = status_json(s)
            if groups and all(g["health"] == "ok" and g_lag(g, "store-3") == 0 for g in groups):
                break
            time.sleep(0.2)
        took = time.monotonic() - started
        print(f"## rf3 catch-up: store-3 down for {ok} acknowledged PUTs ({wall:.0f} s); "
              f"{behind} log entries behind over {len(before)} groups")
        print(f"# caught up {took:.1f} s after its start (process start and open included): "
              f"{behind / max(took, 1e-9):.0f} entries/s, {ok / max(took, 1e-9):.0f} objects/s")
        after = status_json(s)
        sent = sum(1 for g in after for r in g["replicas"] if r["node"] == "store-3" and r["snapshot"] > 0)
        purged = sum(1 for g in after for r in g["replicas"] if r["leader"] and r["purged"] > 0)
        print(f"# store-3 holds a snapshot in {sent} of {len(after)} groups; "
              f"{purged} leaders had purged their log")
        sys.stdout.flush()
    finally:
        s.close()


def move(s, objects=None):
    """RF 3: PUT `objects` 4 KiB objects, add store-4 and start it, then
    time `cluster move-partition` of p0000 from store-1 to store-4, and a
    whole `cluster rebalance`."""
    objects = objects or int(os.environ.get("MOVE_OBJECTS", "50000"))
    try:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET}
        out = subprocess.run(LOADER_CPU + [BENCH, "put", "--endpoint", s.s3[0],
                                           "--concurrency", str(CONC), "--objects", str(objects),
                                           "--ops", str(objects), "--duration", "3000",
                                           "--bucket", "move"],
                             env=env, capture_output=True, text=True)
        ok = summary_row(out.stdout, "put")[0]
        groups = {g["group"]: g for g in status_json(s)}
        entries = max(r["last_log"] for r in groups["p0000"]["replicas"])
        port = PORT + 14
        subprocess.run([LANEWAY, "cluster", "add-node", "--file", s.cluster_file, "--id", "store-4",
                        "--rpc", f"127.0.0.1:{port}"], check=True, stdout=subprocess.DEVNULL)
        s.procs.append(Proc("store", [LANEWAY, "store", "--data-dir", f"{s.dir}/store-4",
                                      "--listen", f"127.0.0.1:{port}",
                                      "--cluster", s.cluster_file, "--node", "store-4"],
                            os.path.join(s.dir, "store-4.log"), ready=r"listening on rpc://"))
        before = du(f"{s.dir}/store-4")
        t = time.monotonic()
        subprocess.run([LANEWAY, "cluster", "move-partition", "--file", s.cluster_file,
                        "--partition", "0", "--from", "store-1", "--to", "store-4"],
                       check=True, stdout=subprocess.DEVNULL)
        took = time.monotonic() - t
        received = du(f"{s.dir}/store-4") - before
        print(f"## rf3 move: {ok} objects of 4 KiB in 16 partitions; p0000's log {entries} entries")
        print(f"# move-partition p0000 store-1 -> store-4: {took:.1f} s, "
              f"{entries / max(took, 1e-9):.0f} entries/s, "
              f"{received / max(took, 1e-9) / 2**20:.1f} MiB/s on store-4's disk ({received / 2**20:.0f} MiB)")
        t = time.monotonic()
        r = subprocess.run([LANEWAY, "cluster", "rebalance", "--file", s.cluster_file],
                           check=True, capture_output=True, text=True)
        print(f"# rebalance in {time.monotonic() - t:.1f} s: {r.stdout.splitlines()[-1]}")
        sys.stdout.flush()
    finally:
        s.close()


def volume_bytes(s):
    """Bytes of every store node's volume segments."""
    total = 0
    for root, _, files in os.walk(s.dir):
        if os.path.basename(root) == "volumes":
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.startswith("seg-"))
    return total


def compact():
    """RF 1 and RF 3, each with compaction off (a pass an hour) and on (a
    pass every second): overwrite-heavy 1 MiB PUTs, then until the
    volumes stop changing; what is left on disk and what it cost."""
    os.environ["LANEWAY_DISK_RESERVE"] = "64M"
    ops = int(os.environ.get("COMPACT_OPS", "512"))
    keys = int(os.environ.get("COMPACT_KEYS", "64"))
    for replicas in (1, 3):
        for every in ("3600", "1"):
            os.environ["LANEWAY_COMPACT_EVERY"] = every
            s = cluster(PORT, 1, replicas=replicas)
            try:
                compact_run(s, replicas, every, ops, keys)
            finally:
                s.close()


def compact_run(s, replicas, every, ops, keys):
    """One `compact` measurement on the fresh cluster `s`."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET}
    stores = [p for p in s.procs if p.role == "store"]
    cpu0 = sum(cpu_seconds(p.p.pid) for p in stores)
    t0 = time.monotonic()
    out = subprocess.run(LOADER_CPU + [BENCH, "put", "--endpoint", s.s3[0], "--size", "1MiB",
                                       "--concurrency", "8", "--objects", str(keys),
                                       "--ops", str(ops), "--duration", "3000",
                                       "--bucket", "compact"],
                         env=env, capture_output=True, text=True)
    load = time.monotonic() - t0
    ok = summary_row(out.stdout, "put")[0]
    last, still = volume_bytes(s), time.monotonic()
    while time.monotonic() - still < 3 and time.monotonic() - t0 < 600:
        time.sleep(0.2)
        now = volume_bytes(s)
        if now != last:
            last, still = now, time.monotonic()
    cpu = sum(cpu_seconds(p.p.pid) for p in stores) - cpu0
    written = ok * 2**20 * replicas
    print(f"## compact RF {replicas}, a pass every {every} s: {ok} PUTs of 1 MiB over {keys} keys "
          f"in {load:.1f} s ({written / 2**20:.0f} MiB written on the three store nodes, "
          f"{keys * replicas} MiB live)")
    print(f"# volumes settled at {last / 2**20:.0f} MiB, {still - t0 - load:.1f} s after the load; "
          f"store CPU {cpu:.2f} s ({cpu / max(ok, 1) * 1e3:.2f} ms a PUT)")
    sys.stdout.flush()


def du(path):
    """Bytes on disk under `path` (`du -sb`)."""
    out = subprocess.run(["du", "-sb", path], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def status_json(s):
    r = subprocess.run([LANEWAY, "cluster", "status", "--file", s.cluster_file, "--json"],
                       capture_output=True, text=True)
    try:
        return json.loads(r.stdout)["groups"]
    except (ValueError, KeyError):
        return []


def g_lag(group, node):
    """How far `node`'s replica of `group` is behind its leader's log
    (the leader's last index when the node is down)."""
    head = max((r["last_log"] for r in group["replicas"] if r["leader"]), default=0)
    mine = next((r for r in group["replicas"] if r["node"] == node), None)
    if mine is None or not mine["up"]:
        return head
    return max(0, head - mine["applied"])


def measure_all(makers):
    """Each set-up made, measured (measure), closed, one after the other."""
    results = {}
    for make in makers:
        s = make()
        try:
            results[s.name] = measure(s)
        finally:
            s.close()
    return results


def measure(s):
    """GET (32 in flight, then 1), durable PUT and a LIST walk of one
    set-up: {op: ((ops, ops/s, p50 ms), cpu by role[, pages])}."""
    ep = s.s3[0]
    common = ["--endpoint", ep, "--concurrency", str(CONC), "--objects", "1000"]
    # Key space for GET (the bench PUTs every key first), with an
    # unmeasured 2 s GET warm-up.
    bench(s, ["get", *common, "--bucket", "get", "--warmup", "0",
              "--duration", "2"], quiet=True)
    res = {}
    perf = start_perf(s) if s.name != "serve" else None
    out, cpu, _ = bench(s, ["get", *common, "--bucket", "get", "--no-prepare",
                            "--warmup", "0", "--duration", str(DURATION)])
    res["get"] = (summary_row(out, "get"), cpu)
    if perf:
        report_perf(s, perf)
    # One request in flight: the p50 without queueing, i.e. the
    # hop's own latency when compared with serve.
    out, cpu, _ = bench(s, ["get", "--endpoint", ep, "--concurrency", "1",
                            "--objects", "1000", "--bucket", "get", "--no-prepare",
                            "--warmup", "0", "--duration", "5"])
    res["get1"] = (summary_row(out, "get"), cpu)
    # Durable PUTs of new keys (every PUT is fsynced, group commit).
    out, cpu, _ = bench(s, ["put", "--endpoint", ep, "--concurrency", str(CONC),
                            "--objects", "1000000", "--bucket", "put", "--warmup", "0",
                            "--duration", str(DURATION)])
    res["put"] = (summary_row(out, "put"), cpu)
    # LIST: fill (stopped after FILL_LIMIT s), then walks.
    fill_args = ["fill", "--endpoint", ep, "--bucket", "list", "--objects", str(FILL),
                 "--concurrency", "64"]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET}
    t = time.time()
    try:
        r = subprocess.run(LOADER_CPU + [BENCH] + fill_args, env=env,
                           capture_output=True, text=True, timeout=FILL_LIMIT)
        fill_out = r.stdout
        print(f"## {s.name}: laneway-bench {' '.join(fill_args)} ({time.time() - t:.0f} s)")
        print("\n".join(l for l in fill_out.splitlines() if not l.startswith("#")))
    except subprocess.TimeoutExpired:
        print(f"## {s.name}: fill stopped after {FILL_LIMIT} s (limit)")
    sys.stdout.flush()
    out, cpu, _ = bench(s, ["list", "--endpoint", ep, "--bucket", "list", "--rounds", "3",
                            "--first-page-samples", "20"])
    keys = sum(int(k) for k in re.findall(r"^round \d+: (\d+) keys", out, re.M))
    secs = sum(float(x) for x in re.findall(r"pages, ([\d.]+)s,", out))
    pages = sum(int(k) for k in re.findall(r"in (\d+) pages", out))
    page_p50 = re.findall(r"page p50 ([\d.]+) ms", out)
    res["list"] = ((keys, keys / max(secs, 1e-9),
                    float(page_p50[len(page_p50) // 2]) if page_p50 else 0.0), cpu, pages)
    return res


def print_compare(results, first, second, title):
    a, b = results.get(first), results.get(second)
    if not a or not b:
        return
    print(f"\n# compare: {title}")
    print("# get1: GET with one request in flight (latency without queueing); list: keys/s")
    print(f"{'op':<5} {first + ' ops/s':>14} {second + ' ops/s':>14} {'ratio':>6} "
          f"{first + ' p50':>12} {second + ' p50':>12} {'diff p50':>8}  cpu per op ({first} | {second})")
    for op in ("get", "get1", "put", "list"):
        (ao, ar, ap), acpu = a[op][0], a[op][1]
        (bo, br, bp), bcpu = b[op][0], b[op][1]
        per, unit = (1000, "1000 keys (p50: per page)") if op == "list" else (1, "op")
        ratio = 100 * br / max(ar, 1e-9)
        print(f"{op:<5} {ar:>14.0f} {br:>14.0f} {ratio:>5.0f}% {ap:>11.3f}m {bp:>11.3f}m "
              f"{bp - ap:>+7.3f}m  {cpu_text(acpu, ao, per)} | {cpu_text(bcpu, bo, per)} "
              f"(per {unit})")
    (bo, _, _), bcpu = b["get"][0], b["get"][1]
    gw = bcpu.get("gateway", 0) / max(bo, 1)
    st = bcpu.get("store", 0) / max(bo, 1)
    print(f"# 100k GET/s at these costs: {gw * 1e5:.1f} gateway cores + {st * 1e5:.1f} store-node cores")


def fairness():
    for label, extra in (("lanes on", ()), ("gateway lanes off", ("--lanes", "off"))):
        s = cluster(PORT + 20, 2, extra)
        try:
            g1, g2 = s.s3
            out, cpu, wall = bench(s, ["tenants", "--endpoint", g2, "--admin-endpoint", s.admin[1],
                                       "--reuse-signatures-secs", "60",
                                       "--duration", str(2 * DURATION),
                                       "--tenant", f"a,weight=1,conc={CONC},endpoints={g1}+{g2}",
                                       "--tenant", f"b,weight=3,conc={CONC}"], quiet=True)
            cap = f", store nodes capped at {STORE_CPU} CPU" if STORE_CPU else ""
            print(f"## fairness, {label}{cap}: a weight 1 over {g1}+{g2}, b weight 3 on {g2}")
            print("\n".join(l for l in out.splitlines() if not l.startswith("# method")))
            print(f"# server cpu over {wall:.1f} s: " +
                  ", ".join(f"{k} {v:.1f} s" for k, v in sorted(cpu.items())))
            sys.stdout.flush()
        finally:
            s.close()


def start_rounds():
    rounds = int(os.environ.get("ROUNDS", "3"))
    print(f"## start of a new RF 3 cluster ({LANEWAY}), {rounds} rounds")
    for r in range(rounds):
        work = tempfile.mkdtemp(prefix="laneway-start-")
        data = os.path.join(work, "cluster")
        out = open(os.path.join(work, "local.out"), "w")
        t0 = time.monotonic()
        p = subprocess.Popen([LANEWAY, "cluster", "local", "--replicas", "3", "--data-dir", data,
                              "--base-port", str(PORT)], stdout=out, stderr=subprocess.STDOUT)
        try:
            ready = None
            while ready is None:
                if time.monotonic() - t0 > 120 or p.poll() is not None:
                    raise SystemExit(f"cluster local not ready; see {work}/local.out")
                with open(os.path.join(work, "local.out")) as f:
                    if "laneway cluster local ready" in f.read():
                        ready = time.monotonic() - t0
                time.sleep(0.05)
            while subprocess.run([LANEWAY, "cluster", "status", "--file",
                                  os.path.join(data, "cluster.toml"), "--timeout-secs", "1"],
                                 capture_output=True).returncode != 0:
                if time.monotonic() - t0 > 120:
                    raise SystemExit(f"groups not ok after 120 s; see {work}")
                time.sleep(0.1)
            ok = time.monotonic() - t0
            print(f"round {r + 1}: ready line {ready:.2f} s, every group ok {ok:.2f} s")
        finally:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)
            out.close()
            shutil.rmtree(work, ignore_errors=True)


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    for b in (LANEWAY, BENCH):
        if not os.access(b, os.X_OK):
            raise SystemExit(f"{b} missing: cargo build --release -p laneway-gateway -p laneway-bench")
    print(f"# cluster.py {what}: {time.strftime('%Y-%m-%d %H:%M:%S')}, nproc {os.cpu_count()}, "
          f"pin={PIN}, duration={DURATION}s conc={CONC} fill={FILL} (limit {FILL_LIMIT}s)")
    if what in ("compare", "all"):
        compare()
    if what in ("fairness", "all"):
        fairness()
    if what in ("replicas", "all"):
        replicas()
    if what == "rf3put":
        rf3put(cluster(PORT, 1, replicas=int(os.environ.get("REPLICAS", "3"))))
    if what == "failover":
        failover(cluster(PORT, 1, replicas=3))
    if what == "catchup":
        catchup(cluster(PORT, 1, replicas=3))
    if what == "move":
        move(cluster(PORT, 1, replicas=3))
    if what == "compact":
        compact()
    if what == "start":
        start_rounds()


if __name__ == "__main__":
    main()
