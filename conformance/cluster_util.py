"""Helpers of the cluster tests (test_cluster.py, test_cluster_faults.py,
test_replication.py):
`laneway cluster local` as a module fixture, clients aimed at one gateway,
the admin API of a gateway, and polling with a deadline.

`LocalCluster` picks a free block of loopback ports, starts `laneway
cluster local` (store nodes, gateways, a small partition count, 1 or 3
replicas: `--replicas`) with the
suite's test key and admin token, waits for its last line `laneway cluster
local ready`, and reads the children (name, pid, address, log) from its
summary table. `stop()` sends the supervisor SIGTERM and checks that it
exits and that every child it started is gone.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import boto3
import pytest
from botocore.config import Config

from conftest import ACCESS_KEY, ADMIN_TOKEN, REGION, SECRET_KEY, _LIVE_ADMINS, aws_cli_env, require_binary, terminate
from s3util import run_or_fail

READY_LINE = "laneway cluster local ready"
# Every child must be ready within this (the supervisor's own deadline is
# 60 s per group of children; this covers all of them).
START_TIMEOUT_S = 120.0
# The supervisor stops the gateways, then the store nodes, each group with
# --stop-grace-secs before SIGKILL.
STOP_GRACE_S = 20
STOP_TIMEOUT_S = 2 * STOP_GRACE_S + 20.0
# The cluster RPC's deadline for an answer to begin (store/src/rpc/client.rs).
RPC_DEADLINE_S = 5.0
# How long a change made through one gateway may take to reach another.
PROPAGATION_S = 5.0
# A row of the summary table: NAME PID LISTENS ADMIN LOG.
ROW_RE = re.compile(r"^((?:gateway|store)-\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)$")


@dataclass
class Child:
    """One child of the supervisor, as its summary table shows it."""

    name: str
    pid: int
    listens: str  # http://HOST:PORT or rpc://HOST:PORT
    admin: str  # http://HOST:PORT, or "-" for a store node
    log: Path


def free_port_block(count: int, host: str = "127.0.0.1", attempts: int = 100) -> int:
    """The first of `count` consecutive ports that can all be bound now,
    below Linux's ephemeral range (32768-) so no outgoing connection takes
    one before the cluster binds it."""
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(12000, 32000 - count)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports found in {attempts} attempts")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it has exited all the same.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def poll(check: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition") -> tuple[Any, float]:
    """Call `check` until it returns something truthy; returns (result,
    seconds taken). Fails the test when `timeout` passes first."""
    start = time.monotonic()
    last: Any = None
    while True:
        last = check()
        elapsed = time.monotonic() - start
        if last:
            return last, elapsed
        if elapsed > timeout:
            pytest.fail(f"{what}: not within {timeout:.1f}s (last result {last!r})", pytrace=False)
        time.sleep(interval)


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(text.splitlines()[-lines:])


def s3_client(endpoint: str, access_key: str, secret_key: str, attempts: int = 1, read_timeout: float = 60):
    """A boto3 client of `endpoint` making `attempts` attempts in all (1:
    no retry, so a 503 is seen as it is), with bounded connect and read
    timeouts. (botocore's `max_attempts` counts retries after the first
    attempt; `total_max_attempts` counts every attempt.)"""
    config = Config(
        retries={"total_max_attempts": attempts, "mode": "standard"},
        connect_timeout=5,
        read_timeout=read_timeout,
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=config,
    )


class LocalCluster:
    """A running `laneway cluster local` and its children."""

    def __init__(self, work: Path, stores: int = 3, gateways: int = 2, partitions: int = 8, replicas: int = 1,
                 extra_env: Optional[dict] = None, extra_args: Optional[list[str]] = None):
        self.work = work
        self.replicas = replicas
        self.dir = work / "cluster"
        self.base_port = free_port_block(2 * gateways + stores)
        self.cmd = [
            str(require_binary()), "cluster", "local",
            "--store-nodes", str(stores), "--gateways", str(gateways),
            "--data-dir", str(self.dir), "--base-port", str(self.base_port),
            "--partitions", str(partitions), "--stop-grace-secs", str(STOP_GRACE_S),
            # Small index budgets: five processes share this machine.
            "--index-memory", "32M",
        ]
        if replicas != 1:  # the default; the other tests' command lines stay as they were
            self.cmd += ["--replicas", str(replicas)]
        self.cmd += extra_args or []
        self.stdout_path = work / "local.stdout.log"
        self.stderr_path = work / "local.stderr.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_")}
        env.update(
            LANEWAY_ACCESS_KEY=ACCESS_KEY,
            LANEWAY_SECRET_KEY=SECRET_KEY,
            LANEWAY_ADMIN_TOKEN=ADMIN_TOKEN,
            NO_COLOR="1",
            RUST_BACKTRACE="1",
        )
        env.update(extra_env or {})
        self.env = env
        (work / "awscli").mkdir(exist_ok=True)
        self.aws_env = aws_cli_env(work / "awscli")
        self.proc = self._spawn()
        self.children = self._wait_ready()
        self.gateways = [c for c in self.children if c.name.startswith("gateway-")]
        self.stores = [c for c in self.children if c.name.startswith("store-")]
        for g in self.gateways:
            _LIVE_ADMINS[g.admin] = f"cluster {g.name}"

    def _spawn(self) -> subprocess.Popen:
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            return subprocess.Popen(
                self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=self.env, start_new_session=True
            )

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def logs(self) -> str:
        """The supervisor's output and the tail of every child's log."""
        parts = [f"--- cluster local stdout ---\n{tail(self.stdout_path, 60)}",
                 f"--- cluster local stderr ---\n{tail(self.stderr_path, 60)}"]
        for log in sorted((self.dir / "logs").glob("*.log")):
            parts.append(f"--- {log.name} ---\n{tail(log, 40)}")
        return "\n".join(parts)

    def log_lines(self, needles: tuple[str, ...], most: int = 60) -> list[str]:
        """The last `most` lines of the children's logs (nodes and
        gateways) that hold one of `needles`, each named after its log."""
        found = []
        for log in sorted((self.dir / "logs").glob("*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if any(n in line for n in needles):
                    found.append(f"{log.stem}: {line[:300]}")
        return found[-most:]

    def _wait_ready(self) -> list[Child]:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if READY_LINE in self.stdout():
                return self._table()
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        code = self.proc.poll()
        if code is None:
            terminate(self.proc, STOP_TIMEOUT_S)
        pytest.fail(
            f"`laneway cluster local` did not print {READY_LINE!r} within {START_TIMEOUT_S:.0f}s "
            f"(exit code {code})\ncommand: {' '.join(self.cmd)}\n{self.logs()}",
            pytrace=False,
        )

    def _table(self) -> list[Child]:
        rows = [ROW_RE.match(line.strip()) for line in self.stdout().splitlines()]
        children = [Child(m[1], int(m[2]), m[3], m[4], Path(m[5])) for m in rows if m]
        assert children, f"no child table in the summary:\n{self.stdout()}"
        return children

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def endpoint(self, gateway: int) -> str:
        return self.gateways[gateway].listens

    def client(self, gateway: int, key: Optional[dict] = None, **kwargs):
        """boto3 client of gateway `gateway` (0-based) with `key` (as the
        admin API returns it) or the first tenant's key."""
        access, secret = (key["access_key"], key["secret_key"]) if key else (ACCESS_KEY, SECRET_KEY)
        return s3_client(self.endpoint(gateway), access, secret, **kwargs)

    def api(self, gateway: int, method: str, path: str, body: Optional[dict] = None) -> dict:
        """A call to gateway `gateway`'s admin API; its JSON answer."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.gateways[gateway].admin + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            pytest.fail(f"admin {method} {path} on {self.gateways[gateway].name}: {e.code} {e.read()!r}", pytrace=False)
        return json.loads(raw) if raw else {}

    def aws(self, gateway: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """The aws CLI (v1, this venv) against gateway `gateway`."""
        cmd = [sys.executable, "-m", "awscli", "--endpoint-url", self.endpoint(gateway), *args]
        return run_or_fail(cmd, env=self.aws_env, timeout=180, check=check, context=lambda: "\n" + self.logs())

    def stop(self) -> int:
        """SIGTERM the supervisor; its exit code, once it and every child
        it started have exited (the test fails otherwise)."""
        for g in self.gateways:
            _LIVE_ADMINS.pop(g.admin, None)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill_all()
            pytest.fail(f"`laneway cluster local` did not exit within {STOP_TIMEOUT_S:.0f}s of SIGTERM\n{self.logs()}",
                        pytrace=False)
        left = [c for c in self.children if pid_alive(c.pid)]
        if left:
            self.kill_all()
            pytest.fail(f"children still running after the supervisor exited: {left}\n{self.logs()}", pytrace=False)
        return code

    def kill_all(self) -> None:
        """SIGKILL the supervisor and every child (teardown of last resort)."""
        for pid in [self.proc.pid] + [c.pid for c in self.children]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
