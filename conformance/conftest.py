"""Fixtures of the laneway conformance suite.

The suite talks to the real `laneway` binary with real clients (boto3 and the
aws CLI v1) at their default configuration, and asserts S3 behaviour as AWS
defines it.

Server: one `laneway serve` per session, started from $LANEWAY_BIN (default
target/release/laneway) on 127.0.0.1:0 with a temporary data dir and fixed
test credentials. The fixture waits for the line
`laneway listening on http://ADDR` on stdout. Its stdout/stderr go to files
that are printed at the end of a failing run.

To point the suite at an already running endpoint instead (for example to
check a test against another S3 implementation), set LANEWAY_ENDPOINT and,
if needed, LANEWAY_TEST_ACCESS_KEY / LANEWAY_TEST_SECRET_KEY.
"""

from __future__ import annotations

import atexit
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
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

from s3util import run_or_fail

REPO_ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
# Fixed test credentials: a 20-character access key id and a 40-character
# secret, the shapes AWS uses.
ACCESS_KEY = os.environ.get("LANEWAY_TEST_ACCESS_KEY", "LWCONFORMANCETEST001")
SECRET_KEY = os.environ.get(
    "LANEWAY_TEST_SECRET_KEY", "laneway/conformance+SecretKey0123456789a"
)
assert len(SECRET_KEY) == 40 or "LANEWAY_TEST_SECRET_KEY" in os.environ

READY_RE = re.compile(r"laneway listening on (http://[^\s]+)")
STARTUP_TIMEOUT_S = 60.0


def _isolate_aws_environment() -> None:
    """Keep the user's AWS config, profiles and env vars out of the suite.

    Runs at import time, before any botocore session exists: botocore reads
    AWS_* variables and ~/.aws/config lazily, and a stray `s3 =
    addressing_style`, `AWS_ENDPOINT_URL` or `AWS_PROFILE` would change what
    the clients send.
    """
    for name in list(os.environ):
        if name.startswith("AWS_"):
            del os.environ[name]
    cfg_dir = Path(tempfile.mkdtemp(prefix="laneway-awscfg-"))
    atexit.register(shutil.rmtree, cfg_dir, True)
    (cfg_dir / "config").write_text("")
    (cfg_dir / "credentials").write_text("")
    os.environ["AWS_CONFIG_FILE"] = str(cfg_dir / "config")
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(cfg_dir / "credentials")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


_isolate_aws_environment()

import boto3  # noqa: E402  (must come after the environment is isolated)
from botocore.config import Config  # noqa: E402

# Paths of the running server's logs, printed by pytest_terminal_summary when
# the run fails.
_SERVER_LOGS: dict[str, Path] = {}


@dataclass
class Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = REGION


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(text.splitlines()[-lines:])


def _binary_path() -> Path:
    raw = os.environ.get("LANEWAY_BIN") or str(REPO_ROOT / "target/release/laneway")
    path = Path(raw)
    if not path.is_absolute():
        # scripts/test.sh passes a path relative to the repository root.
        candidate = REPO_ROOT / path
        path = candidate if candidate.exists() else Path.cwd() / path
    return path


class LanewayProcess:
    """One `laneway serve` child process, its log files and its endpoint."""

    def __init__(self, binary: Path, data_dir: Path, log_dir: Path, extra_args: list[str], name: str = "server"):
        self.cmd = [str(binary), "serve", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", *extra_args]
        self.stdout_path = log_dir / f"{name}.stdout.log"
        self.stderr_path = log_dir / f"{name}.stderr.log"
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        env["NO_COLOR"] = "1"  # plain log lines in the files we print on failure
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True
            )
        self.endpoint = self._wait_ready()

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            match = READY_RE.search(self.stdout())
            if match:
                return match.group(1).rstrip("/")
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        code = self.proc.poll()
        if code is None:
            self.proc.kill()
            self.proc.wait()
        pytest.fail(
            f"laneway did not print 'laneway listening on http://ADDR' within "
            f"{STARTUP_TIMEOUT_S:.0f}s (exit code {code}).\n"
            f"command: {' '.join(self.cmd)}\n"
            f"--- stdout ---\n{_tail(self.stdout_path, 50)}\n"
            f"--- stderr ---\n{_tail(self.stderr_path, 100)}",
            pytrace=False,
        )

    def stop(self, timeout: float = 30) -> Optional[int]:
        """SIGTERM, then SIGKILL after `timeout`. Returns the exit code the
        process already had before the stop (None if it was running)."""
        died_with = self.proc.poll()
        if died_with is None:
            terminate(self.proc, timeout)
        return died_with


def terminate(proc: subprocess.Popen, timeout: float) -> int:
    """SIGTERM `proc`, SIGKILL it after `timeout`; its exit code."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def require_binary() -> Path:
    binary = _binary_path()
    if not binary.is_file():
        pytest.fail(
            f"laneway binary not found at {binary}: build it with "
            "`cargo build --release -p laneway-gateway` or set LANEWAY_BIN",
            pytrace=False,
        )
    return binary


ADMIN_TOKEN = "conformance-admin-token-0123456789"
ADMIN_RE = re.compile(r"laneway admin listening on (http://\S+)")


# Admin endpoints (base URL -> name) of the servers this run started and
# that are still up; the leak check below scrapes each after every test.
_LIVE_ADMINS: dict[str, str] = {}

# How long a test's leftovers (a response nobody reads, a lease not yet
# expired, a request still draining) may take to give their lane units
# back after the test ends.
LEAK_DEADLINE_S = 10.0


def _lane_gauges(admin: str) -> tuple[int, int]:
    """(units in flight, requests and chunks queued) from /metrics."""
    req = urllib.request.Request(admin + "/metrics")
    req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    with urllib.request.urlopen(req, timeout=5) as resp:
        text = resp.read().decode()
    in_flight = queued = 0
    for line in text.splitlines():
        if line.startswith("laneway_lanes_in_flight_units "):
            in_flight = int(line.split()[-1])
        elif line.startswith("laneway_lane_queue_depth{"):
            queued += int(line.split()[-1])
    return in_flight, queued


@pytest.fixture(autouse=True)
def lanes_leak_check():
    """The leak invariant: after every test, every server's lanes hold no
    units and queue nothing, so a permit leaked by a request fails the
    test that sent it."""
    yield
    for admin, name in list(_LIVE_ADMINS.items()):
        deadline = time.monotonic() + LEAK_DEADLINE_S
        while True:
            try:
                in_flight, queued = _lane_gauges(admin)
            except OSError:
                break  # the server was stopped by the test itself
            if in_flight == 0 and queued == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"lanes leak on {name}: {in_flight} units in flight and "
                    f"{queued} queued {LEAK_DEADLINE_S:.0f}s after the test",
                    pytrace=False,
                )
            time.sleep(0.05)


class AdminEnv:
    """A `laneway serve` of a test module's own, with the admin API on: a
    provisioning call (`api`) and a boto3 client per key (`client`)."""

    def __init__(self, work: Path, name: str):
        args = ["--admin-listen", "127.0.0.1:0", "--admin-token", ADMIN_TOKEN]
        self.proc = LanewayProcess(require_binary(), work / "data", work, args, name=name)
        self.endpoint = self.proc.endpoint
        self.admin = ADMIN_RE.search(self.proc.stdout()).group(1)
        _LIVE_ADMINS[self.admin] = name

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.admin + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
        with urllib.request.urlopen(req) as resp:
            return json.loads(resp.read())

    def client(self, key: dict, secret: str | None = None, signature: str | None = None):
        """A client for `key` (as the admin API returns it), without retries;
        `secret` overrides its secret, `signature` its signature version."""
        config = Config(retries={"max_attempts": 1})
        if signature:
            config = config.merge(Config(signature_version=signature))
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=key["access_key"],
            aws_secret_access_key=secret or key["secret_key"],
            config=config,
        )


def admin_env(tmp_path_factory, name: str):
    """Generator for a module fixture: an AdminEnv, stopped afterwards."""
    env = AdminEnv(tmp_path_factory.mktemp(name), name)
    try:
        yield env
    finally:
        _LIVE_ADMINS.pop(env.admin, None)
        env.proc.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    external = os.environ.get("LANEWAY_ENDPOINT")
    if external:
        yield Server(endpoint=external.rstrip("/"), access_key=ACCESS_KEY, secret_key=SECRET_KEY)
        return

    workdir = tmp_path_factory.mktemp("laneway-server")
    process = LanewayProcess(
        require_binary(),
        workdir / "data",
        workdir,
        [
            "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY,
            "--admin-listen", "127.0.0.1:0", "--admin-token", ADMIN_TOKEN,
        ],
    )
    _SERVER_LOGS.update(stdout=process.stdout_path, stderr=process.stderr_path)
    admin = ADMIN_RE.search(process.stdout()).group(1)
    _LIVE_ADMINS[admin] = "the shared server"

    yield Server(endpoint=process.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)

    _LIVE_ADMINS.pop(admin, None)

    died_with = process.stop()
    if died_with is not None:
        pytest.fail(
            f"laneway exited during the run with code {died_with}\n"
            f"--- stderr ---\n{_tail(process.stderr_path, 100)}",
            pytrace=False,
        )


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """On a failing run, show what the server said: its stdout, every
    WARN/ERROR/panic line of its stderr, and the last lines of stderr."""
    if exitstatus == 0 or not _SERVER_LOGS:
        return
    out, err = _SERVER_LOGS["stdout"], _SERVER_LOGS["stderr"]
    terminalreporter.write_sep("=", f"laneway server stdout: {out}")
    terminalreporter.write_line(_tail(out, 40))
    try:
        lines = err.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    notable = [l for l in lines if re.search(r"\b(WARN|ERROR)\b|panicked", l)]
    terminalreporter.write_sep("=", f"laneway server stderr, WARN/ERROR/panic lines ({len(notable)}): {err}")
    terminalreporter.write_line("\n".join(notable[-150:]))
    terminalreporter.write_sep("=", "laneway server stderr, last 40 lines")
    terminalreporter.write_line(_tail(err, 40))


def make_client(server: Server, **overrides):
    """A boto3 S3 client at the default configuration, except the endpoint,
    the region and the credentials (overridable, for the auth tests)."""
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=overrides.pop("endpoint_url", server.endpoint),
        region_name=overrides.pop("region_name", server.region),
        aws_access_key_id=overrides.pop("aws_access_key_id", server.access_key),
        aws_secret_access_key=overrides.pop("aws_secret_access_key", server.secret_key),
        **overrides,
    )


@pytest.fixture(scope="session")
def s3(server):
    return make_client(server)


@pytest.fixture(scope="session")
def client_factory(server) -> Callable[..., object]:
    return lambda **overrides: make_client(server, **overrides)


def unique_bucket_name(hint: str = "b") -> str:
    """A valid, unique bucket name: lowercase hint + random suffix."""
    stem = re.sub(r"[^a-z0-9]+", "-", hint.lower()).strip("-")[:40].strip("-") or "b"
    return f"{stem}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def bucket_name(request) -> str:
    """A fresh bucket name for this test (not created)."""
    return unique_bucket_name(request.node.name.removeprefix("test_"))


@pytest.fixture
def bucket(s3, bucket_name) -> str:
    """A freshly created bucket for this test. The data dir is temporary, so
    it is not emptied or deleted afterwards."""
    s3.create_bucket(Bucket=bucket_name)
    return bucket_name


def aws_cli_env(cfg_dir: Path, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY,
                region: str = REGION) -> dict[str, str]:
    """The environment the aws CLI runs with: this process's, less every
    AWS_* variable, plus the key, the region, and empty config and
    credentials files (written into `cfg_dir`), so only what is passed
    here applies."""
    (cfg_dir / "config").write_text("")
    (cfg_dir / "credentials").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=access_key,
        AWS_SECRET_ACCESS_KEY=secret_key,
        AWS_DEFAULT_REGION=region,
        AWS_CONFIG_FILE=str(cfg_dir / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(cfg_dir / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_PAGER="",
    )
    return env


@pytest.fixture(scope="session")
def aws_cli(server, tmp_path_factory):
    """Run the aws CLI (v1, from this venv) against the server.

    Returns run(*args, check=True) -> CompletedProcess (text output). The
    user's config and credentials files are replaced by empty ones and every
    AWS_* variable is dropped, so only what is passed here applies.
    """
    env = aws_cli_env(tmp_path_factory.mktemp("awscli-config"), server.access_key, server.secret_key, server.region)

    def run(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "awscli", "--endpoint-url", server.endpoint, *args]
        return run_or_fail(cmd, env=env, timeout=timeout, check=check)

    return run
