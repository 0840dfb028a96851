"""Issue-11 figures: connection-level defences.

1. `forms`: 500 unauthenticated browser-form uploads (PostObject) that send
   their fields and 1 MiB of a 64 MiB file, then hold back the rest: the
   server's RSS growth (VmRSS) and how many were refused with 403.
2. `slow`: a server under `ulimit -n 1024` with 2,000 slowloris sockets
   open (half silent, half dripping header bytes): five fresh clients'
   PUT+GET latency, the server's descriptors and idle CPU.

Uses the conformance suite's helpers (conformance/test_hardening_conn.py)
and the release binary (LANEWAY_BIN). Targets 127.0.0.1 only; bounded
counts. Run from the repository root:

    LANEWAY_BIN=target/release/laneway .venv/bin/python bench/scripts/conn_hardening.py forms slow
"""
import pathlib
import resource
import stat
import sys
import tempfile
import threading
import time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "conformance"))
import test_hardening_conn as t
from conftest import require_binary

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
MIB = t.MIB

def forms(n=500, file_bytes=MIB):
    d = pathlib.Path(tempfile.mkdtemp())
    proc = t.start(d, "--header-timeout-secs", "30", "--stall-timeout-secs", "60")
    try:
        s3 = t.client(proc.endpoint); s3.create_bucket(Bucket="forms")
        pid = proc.proc.pid
        before = t.rss_kib(pid); peak = before
        socks = []
        chunk = b"z" * file_bytes
        for i in range(n):
            head, _ = t.form_head(proc.endpoint, "forms", {"key": "anon"}, 64 * MIB)
            s = t.connect(proc.endpoint); t.send_some(s, head, 2); socks.append(s)
        for s in socks:
            t.send_some(s, chunk, 0.2)
            peak = max(peak, t.rss_kib(pid))
        time.sleep(1)
        refused = sum(1 for s in socks if t.closed_within(s, 0.5)[1].startswith(b"HTTP/1.1 403"))
        after = t.rss_kib(pid); peak = max(peak, after)
        print(f"forms: n={n} rss before {before} KiB, after {after} KiB, peak {peak} KiB, growth(peak) {(peak-before)/1024:.1f} MiB, refused with 403: {refused}")
    finally:
        proc.stop()

def slowloris(n=2000):
    d = pathlib.Path(tempfile.mkdtemp())
    w = d / "laneway-1024"
    w.write_text(f'#!/bin/sh\nulimit -n 1024\nexec "{require_binary()}" "$@"\n')
    w.chmod(w.stat().st_mode | stat.S_IXUSR)
    proc = t.start(d, binary=w)
    try:
        s3 = t.client(proc.endpoint); s3.create_bucket(Bucket="crowded")
        socks = []
        t0 = time.monotonic()
        for i in range(n):
            try:
                s = t.connect(proc.endpoint)
            except OSError as e:
                print("connect failed", i, e); break
            if i % 2:
                s.sendall(b"GET / HTTP/1.1\r\n")
            socks.append(s)
        print(f"slowloris: opened {len(socks)} in {time.monotonic()-t0:.1f}s")
        stop = time.monotonic() + 60
        def drip():
            # keep dripping header bytes on the still-open odd sockets
            while time.monotonic() < stop:
                for s in socks[1::2]:
                    try: s.send(b"X")
                    except OSError: pass
                time.sleep(0.5)
        threading.Thread(target=drip, daemon=True).start()
        pid = proc.proc.pid
        times = []
        for k in range(5):
            fresh = t.client(proc.endpoint)
            st = time.monotonic()
            fresh.put_object(Bucket="crowded", Key=f"k{k}", Body=b"x")
            fresh.get_object(Bucket="crowded", Key=f"k{k}")["Body"].read()
            times.append(time.monotonic() - st)
            time.sleep(0.5)
        import os
        print(f"slowloris: new client PUT+GET times {[round(x,3) for x in times]} s; server fds {len(os.listdir(f'/proc/{pid}/fd'))}")
        cpu0 = t.cpu_seconds(pid); time.sleep(3); print(f"slowloris: server cpu {(t.cpu_seconds(pid)-cpu0)/3:.1%} of a core while idle")
        for s in socks: s.close()
    finally:
        proc.stop()

if "forms" in sys.argv: forms()
if "slow" in sys.argv: slowloris()
