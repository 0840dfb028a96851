#!/usr/bin/env python3
"""A/B of two laneway binaries on LIST and GET of small objects
(docs/benchmarks.md, "Bodies beside records").

    bench/scripts/list_ab.py NAME=PATH NAME=PATH

For each binary in turn, in a fresh data dir: `laneway serve`, a fill of
OBJECTS (default 100000) objects of SIZE (default 4KiB) with
`laneway-bench fill`, then three full LIST walks (1,000-key pages) and a
10 s 4 KiB GET run (32 in flight), each with the server's CPU read from
/proc before and after (`--server-pid`). Prints the bench's own lines.
Needs target/release/laneway-bench.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "target/release/laneway-bench")
ACCESS, SECRET = "LWLISTAB000000000001", "list/ab+Secret0123456789abcdefghijklmnopq"
OBJECTS = os.environ.get("OBJECTS", "100000")
SIZE = os.environ.get("SIZE", "4KiB")


def serve(binary, data, log):
    out = open(log, "w")
    p = subprocess.Popen([binary, "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--access-key", ACCESS,
                          "--secret-key", SECRET, "--admin-listen", "127.0.0.1:0"],
                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        m = re.search(r"laneway listening on (http://\S+)", open(log).read())
        if m:
            return p, m.group(1)
        time.sleep(0.05)
    sys.exit(open(log).read())


def bench(*args):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET)
    r = subprocess.run([BENCH, *args], capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(r.stdout + r.stderr)
    return "\n".join(l for l in (r.stdout + r.stderr).splitlines() if l.strip() and not l.startswith("# machine"))


def main():
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cpus, {OBJECTS} objects of {SIZE}")
    for spec in sys.argv[1:]:
        name, binary = spec.split("=", 1)
        work = tempfile.mkdtemp(prefix="laneway-ab-")
        p, ep = serve(binary, os.path.join(work, "data"), os.path.join(work, "serve.log"))
        conn = ["--endpoint", ep, "--bucket", "ab-test", "--server-pid", str(p.pid)]
        print(f"\n=== {name} ({binary}) ===")
        print(bench("fill", *conn, "--objects", OBJECTS, "--size", SIZE, "--key-prefix", "o/"))
        print(bench("list", *conn, "--rounds", "3", "--first-page-samples", "50"))
        print(bench("get", *conn, "--size", SIZE, "--objects", "1000", "--duration", "10", "--concurrency", "32"))
        os.killpg(p.pid, signal.SIGTERM)
        p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
