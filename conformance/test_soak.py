"""A CI-sized soak (issue 11): `laneway-bench soak --duration 60 --warmup 15
--partitions 1`.

The bench starts its own `laneway serve` (the binary under test), makes
four tenants with weights 1, 1, 2 and 4, and runs a mixed closed-loop
load (PUT, multipart, whole and ranged GET, LIST walks, tagging, DELETE)
beside slow and stalled readers, GETs dropped and PUTs cut mid-body and
unauthenticated junk, with a 2x overload phase. At the end it checks the
invariants and exits non-zero if one fails: the lanes hold no units and
queue nothing, the server's RSS stays within 2x of its baseline, polite
requests failed only with 503 or a timeout, every acknowledged object
reads back byte-exact (deleted ones 404), nothing forged was accepted and
no cut PUT left an object. This test asserts that exit status (behaviour,
not timings) and shows the bench's output when it fails. The 20-minute
run and its figures are in docs/benchmarks.md, "Soak (issue 11)".

Why one partition and a warm-up: each store partition's index has its
own memtable and block cache (16 MiB each), which fill over the first
minutes of writes and then stay put; with the default 16 partitions
that takes ~15 minutes, so a 60 s run's RSS check would see the fill,
not a leak. One partition fills within the 15 s warm-up, after which
RSS must stay within 2x.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, require_binary

DURATION_S = 60
WARMUP_S = 15
# Setup, settle and read-back take a few seconds; a hung run must not
# hold CI past this.
WALL_LIMIT_S = WARMUP_S + DURATION_S + 60


def _bench_binary() -> Path:
    raw = os.environ.get("LANEWAY_BENCH_BIN") or str(REPO_ROOT / "target/release/laneway-bench")
    path = Path(raw)
    return path if path.is_absolute() else REPO_ROOT / path


@pytest.mark.skipif("LANEWAY_ENDPOINT" in os.environ, reason="the soak starts its own server")
def test_soak_keeps_its_invariants(tmp_path):
    bench = _bench_binary()
    if not bench.is_file():
        pytest.fail(f"{bench} not found: build it with `cargo build --release -p laneway-bench`")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LANEWAY_ADMIN"))}
    env["TMPDIR"] = str(tmp_path)
    cmd = [
        str(bench), "soak", "--duration", str(DURATION_S), "--warmup", str(WARMUP_S),
        "--partitions", "1", "--bin", str(require_binary()),
    ]
    # Its own process group, so a run that hangs is killed with the server
    # it started.
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=WALL_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"soak did not finish within {WALL_LIMIT_S}s\n{stdout}\n{stderr}")
    output = f"$ {' '.join(cmd)}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    assert proc.returncode == 0, output
    assert "soak: PASS" in stdout, output
