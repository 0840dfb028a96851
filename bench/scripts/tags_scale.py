#!/usr/bin/env python3
"""Scale benchmark of the tag index (docs/benchmarks.md, "Tags at scale").

    bench/scripts/tags_scale.py N [N ...]      e.g. 1000000 10000000

For each N, in a fresh temporary data dir:

1. `laneway serve` once, to create the tenant and its keys; its tenant id
   from the admin API; stopped.
2. `laneway-bench load`: N objects of 1 byte through the store's bulk
   loader in process (not HTTP: sorted runs ingested into the index),
   every object tagged `part=<i mod 16>`, one in 100 also `sel=yes`
   (1 %). Load rate, loader CPU, bytes on disk per object as loaded.
3. `laneway serve` again: time to listen (reopen), RSS after start.
4. Through S3 (`laneway-bench list`, 1,000-key pages): a full walk and 50
   first pages, unfiltered and with `x-laneway-tag-filter: sel=yes`; keys/s,
   first-page p50/p99, and server CPU per key (utime + stime of the server
   from /proc before and after).
5. A bulk tagging job over the 1 % (`filter sel=yes, set stage=1`) and one
   over every object (`set all=1`, only up to ALL_JOB_MAX objects,
   10,000,000 by default: at 100M it would run for hours): objects per
   second, server CPU per object.
6. Bytes on disk per object (du of the data dir), server RSS at the end,
   then SIGKILL and the time to listen again.

Environment: KEEP=1 keeps the data dirs (printed); ALL_JOB_MAX (above);
LOAD_ONLY=1 stops after step 2 and keeps the dir; WORK=<dir> skips steps
1-2 and measures the bucket loaded there before (one N).
Needs the release binaries (cargo build --release -p laneway-gateway -p laneway-bench).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LANEWAY = os.path.join(ROOT, "target/release/laneway")
BENCH = os.path.join(ROOT, "target/release/laneway-bench")
ACCESS, SECRET, TOKEN = "LWSCALEBENCH00000001", "scale/bench+Secret0123456789abcdefghijklm", "scale-bench-token"
READY = re.compile(r"laneway listening on (http://\S+)")
ADMIN = re.compile(r"laneway admin listening on (http://\S+)")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Serve:
    def __init__(self, data, log):
        self.log = log
        self.t0 = time.monotonic()
        out = open(log, "w")
        self.proc = subprocess.Popen(
            [LANEWAY, "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--access-key", ACCESS,
             "--secret-key", SECRET, "--admin-listen", "127.0.0.1:0", "--admin-token", TOKEN],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while True:
            text = open(log).read()
            m = READY.search(text)
            if m:
                self.endpoint, self.admin = m.group(1), ADMIN.search(text).group(1)
                self.ready_s = time.monotonic() - self.t0
                return
            if self.proc.poll() is not None or time.monotonic() - self.t0 > 600:
                sys.exit(f"serve did not start:\n{text[-3000:]}")
            time.sleep(0.02)

    def api(self, path):
        req = urllib.request.Request(self.admin + path, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    def stop(self, sig=signal.SIGTERM):
        os.killpg(self.proc.pid, sig)
        self.proc.wait()


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def bench_env():
    return dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET)


def list_run(s, tag_filter=None):
    cmd = [BENCH, "list", "--endpoint", s.endpoint, "--bucket", "big", "--rounds", "1",
           "--first-page-samples", "50", "--timeout", "600"]
    if tag_filter:
        cmd += ["--tag-filter", tag_filter]
    before = cpu_seconds(s.proc.pid)
    out = run(cmd, bench_env())
    return out, cpu_seconds(s.proc.pid) - before


def job_run(s, spec):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    def call(method, body=None, job=None):
        url = f"{s.endpoint}/big?x-laneway-tagging-jobs" + (f"&id={job}" if job else "")
        data = json.dumps(body).encode() if body else b""
        req = AWSRequest(method=method, url=url, data=data)
        S3SigV4Auth(Credentials(ACCESS, SECRET), "s3", "us-east-1").add_auth(req)
        r = urllib.request.Request(url, data=data or None, method=method, headers=dict(req.headers))
        with urllib.request.urlopen(r, timeout=600) as resp:
            return json.loads(resp.read() or b"{}")

    before, t0 = cpu_seconds(s.proc.pid), time.monotonic()
    job = call("POST", spec)["id"]
    while True:
        state = call("GET", job=job)
        if state["state"] != "running":
            break
        time.sleep(0.2)
    return state, time.monotonic() - t0, cpu_seconds(s.proc.pid) - before


def du(path):
    return int(run(["du", "-sb", path]).split()[0])


def load(n, work, data):
    s = Serve(data, os.path.join(work, "serve0.log"))
    tenant = [t for t in s.api("/v1/tenants")["tenants"]][0]["id"]
    s.stop()
    t0 = time.monotonic()
    print(run([BENCH, "load", "--data-dir", data, "--tenant", tenant, "--bucket", "big",
               "--objects", str(n), "--tag-every", "100"]).strip(), flush=True)
    print(f"# load wall {time.monotonic() - t0:.1f} s")
    size = du(data)
    print(f"disk as loaded: {size / 1e6:,.0f} MB = {size / n:.0f} B/object (each with 1-2 tags, 1 B body)",
          flush=True)


def one(n):
    work = os.environ.get("WORK")
    if work:
        data = os.path.join(work, "data")
        print(f"\n=== {n:,} objects, loaded before (data dir {data}) ===", flush=True)
    else:
        work = tempfile.mkdtemp(prefix=f"laneway-scale-{n}-")
        data = os.path.join(work, "data")
        print(f"\n=== {n:,} objects (data dir {data}) ===", flush=True)
        load(n, work, data)
        if os.environ.get("LOAD_ONLY") == "1":
            print(f"# loaded; measure with WORK={work}")
            return
    s = Serve(data, os.path.join(work, "serve1.log"))
    print(f"reopen after a clean stop: listening in {s.ready_s:.2f} s, RSS {rss_mib(s.proc.pid):.0f} MiB")
    for name, filt, matching in (("LIST", None, n), ("LIST by tag sel=yes (1 %)", "sel=yes", n // 100)):
        out, cpu = list_run(s, filt)
        keys = matching + 50 * min(1000, matching)  # the walk, then 50 first pages
        print(f"--- {name}: server CPU {cpu:.2f} s = {cpu / max(keys, 1) * 1e6:.2f} us/key (walk + 50 first pages)")
        print("\n".join(l for l in out.splitlines() if l.strip() and not l.startswith("# machine")))
    jobs = [("job over the 1 %", {"filter": {"sel": "yes"}, "set": {"stage": "1"}}, n // 100)]
    if n <= int(os.environ.get("ALL_JOB_MAX", "10000000")):
        jobs.append(("job over every object", {"set": {"all": "1"}}, n))
    else:
        print("--- job over every object: skipped (N > ALL_JOB_MAX)")
    for name, spec, objects in jobs:
        state, wall, cpu = job_run(s, spec)
        print(f"--- {name}: {state['state']}, scanned {state['scanned']:,}, changed {state['changed']:,} in "
              f"{wall:.1f} s = {state['changed'] / wall:,.0f} objects/s; server CPU {cpu:.1f} s = "
              f"{cpu / max(objects, 1) * 1e6:.1f} us/object")
    size = du(data)
    print(f"disk after the jobs: {size / 1e6:,.0f} MB = {size / n:.0f} B/object; "
          f"server RSS {rss_mib(s.proc.pid):.0f} MiB")
    s.stop(signal.SIGKILL)
    s = Serve(data, os.path.join(work, "serve2.log"))
    print(f"reopen after SIGKILL: listening in {s.ready_s:.2f} s, RSS {rss_mib(s.proc.pid):.0f} MiB")
    s.stop()
    if os.environ.get("KEEP") != "1" and not os.environ.get("WORK"):
        shutil.rmtree(work, ignore_errors=True)


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1_000_000]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {os.uname().nodename}, {os.cpu_count()} cpus")
    for n in sizes:
        one(n)


if __name__ == "__main__":
    main()
