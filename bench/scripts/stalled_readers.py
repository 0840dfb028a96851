"""Issue-11 figure: a tenant's stalled and slow readers cost only itself.

Starts its own `laneway serve` (release binary, temporary data dir, admin
API on), makes tenants A and B, then measures B's 4 KiB GETs (B_THREADS
closed-loop threads, boto3 at its defaults, no retries) in two phases of
PHASE_S seconds each, in one run:

  alone   B only;
  beside  while A holds HELD responses of a 7 MiB object open without
          reading them and SLOW more readers each read 4 KiB a second.

Prints, per phase: B's requests, errors (any non-200 is one), p50/p99
latency, and the server's CPU per B request (utime+stime from /proc).
Then the p99 ratio beside/alone. Talks to 127.0.0.1 only.

    .venv/bin/python bench/scripts/stalled_readers.py [PHASE_S] [HELD] [SLOW] [B_THREADS]

Defaults: 20 s, 50 held, 20 slow, 4 threads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import boto3
from botocore.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LANEWAY_BIN", os.path.join(ROOT, "target/release/laneway"))
TOKEN = "stalled-readers-bench-token-0123456789"
PHASE_S = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
HELD = int(sys.argv[2]) if len(sys.argv) > 2 else 50
SLOW = int(sys.argv[3]) if len(sys.argv) > 3 else 20
B_THREADS = int(sys.argv[4]) if len(sys.argv) > 4 else 4


def start_server(data: str) -> tuple[subprocess.Popen, str, str]:
    out = open(os.path.join(data, "stdout.log"), "wb")
    proc = subprocess.Popen(
        [BIN, "serve", "--data-dir", os.path.join(data, "d"), "--listen", "127.0.0.1:0",
         "--admin-listen", "127.0.0.1:0", "--admin-token", TOKEN, "--log", "warn"],
        stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = open(os.path.join(data, "stdout.log")).read()
        m = re.search(r"laneway listening on (http://\S+)", text)
        a = re.search(r"laneway admin listening on (http://\S+)", text)
        if m and a:
            return proc, m.group(1), a.group(1)
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start")


def tenant(admin: str, endpoint: str, name: str, pool: int):
    req = urllib.request.Request(admin + "/v1/tenants", data=json.dumps({"name": name}).encode(), method="POST")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    key = json.loads(urllib.request.urlopen(req).read())["key"]
    cfg = Config(retries={"max_attempts": 1}, max_pool_connections=pool)
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", config=cfg,
        aws_access_key_id=key["access_key"], aws_secret_access_key=key["secret_key"],
    )


def cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def phase(b, pid: int) -> dict:
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.monotonic() + PHASE_S

    def loop():
        mine = []
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                b.get_object(Bucket="b-data", Key="small")["Body"].read()
                mine.append(time.perf_counter() - t0)
            except Exception:  # noqa: BLE001 - every failure counts
                with lock:
                    errors[0] += 1
        with lock:
            lat.extend(mine)

    c0 = cpu_ticks(pid)
    threads = [threading.Thread(target=loop) for _ in range(B_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ticks = cpu_ticks(pid) - c0
    lat.sort()
    n = len(lat)
    pct = lambda p: lat[min(n - 1, int(p * n))] * 1000 if n else float("nan")  # noqa: E731
    hz = os.sysconf("SC_CLK_TCK")
    return {"requests": n, "errors": errors[0], "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "cpu_us_per_req": ticks / hz * 1e6 / max(1, n)}


def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        proc, endpoint, admin = start_server(data)
        try:
            a = tenant(admin, endpoint, "a", HELD + SLOW + 4)
            b = tenant(admin, endpoint, "b", B_THREADS + 2)
            a.create_bucket(Bucket="a-data")
            b.create_bucket(Bucket="b-data")
            a.put_object(Bucket="a-data", Key="big", Body=os.urandom(7 << 20))
            b.put_object(Bucket="b-data", Key="small", Body=os.urandom(4096))
            for _ in range(200):  # warm up B's connections
                b.get_object(Bucket="b-data", Key="small")["Body"].read()

            alone = phase(b, proc.pid)

            held = [a.get_object(Bucket="a-data", Key="big") for _ in range(HELD)]
            stop_slow = threading.Event()
            slow_bytes = [0]

            def slow_reader():
                body = a.get_object(Bucket="a-data", Key="big")["Body"]
                while not stop_slow.is_set():
                    got = body.read(4096)
                    if not got:
                        return
                    slow_bytes[0] += len(got)
                    stop_slow.wait(1.0)

            slow = [threading.Thread(target=slow_reader, daemon=True) for _ in range(SLOW)]
            for t in slow:
                t.start()
            time.sleep(1.0)
            beside = phase(b, proc.pid)
            stop_slow.set()
            del held
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    print(f"method: B {B_THREADS} closed-loop threads of boto3 4 KiB GETs, {PHASE_S:.0f} s per phase;"
          f" beside: A holds {HELD} unread 7 MiB GETs and {SLOW} readers at 4 KiB/s")
    for name, r in (("alone", alone), ("beside", beside)):
        print(f"{name:7s} requests {r['requests']:6d}  errors {r['errors']}  p50 {r['p50_ms']:.2f} ms"
              f"  p99 {r['p99_ms']:.2f} ms  server CPU {r['cpu_us_per_req']:.0f} us/req")
    print(f"slow readers read {slow_bytes[0]} bytes")
    print(f"p99 ratio beside/alone: {beside['p99_ms'] / alone['p99_ms']:.2f}")


if __name__ == "__main__":
    main()
