"""The container image: scripts/docker-image.sh builds `laneway:local` from
the release binary without a registry (`docker import` of a root filesystem
made here), and these tests run it as users do: a published port, the first
key and the admin token from the environment, a named volume on /data. The
aws CLI (v1, isolated config like conftest's `aws_cli`) does the smoke; a
restart and a new container on the same volume keep the data.

Skipped when no Docker engine answers (`docker info` fails). Every container
and volume gets a unique name and is removed at teardown, also on failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Optional

import pytest

from conftest import ACCESS_KEY, ADMIN_TOKEN, REGION, REPO_ROOT, SECRET_KEY, require_binary, unique_bucket_name
from s3util import quoted_md5, run_or_fail, tags_dict

IMAGE = os.environ.get("LANEWAY_IMAGE", "laneway:local")
IMAGE_SCRIPT = REPO_ROOT / "scripts" / "docker-image.sh"
READY_TIMEOUT_S = 60.0
UID_GID = "10001:10001"
SERVE_CMD = ["serve", "--data-dir", "/data", "--listen", "0.0.0.0:9000", "--admin-listen", "0.0.0.0:9001"]
# What the compose file's healthcheck runs (CMD form: the image has no shell).
HEALTH_CMD = ["laneway", "admin", "tenant", "list"]
MIB = 1024 * 1024


def docker(*args: str, check: bool = True, timeout: float = 120, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return run_or_fail(["docker", *args], env=env, timeout=timeout, check=check)


def _docker_engine_problem() -> Optional[str]:
    """Why no Docker engine can be used here, or None when one answers."""
    if shutil.which("docker") is None:
        return "no `docker` command on PATH"
    try:
        info = subprocess.run(
            ["docker", "info"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30 s"
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"`docker info` exited {info.returncode}: {last}"
    return None


@pytest.fixture(scope="module")
def image() -> str:
    """laneway:local, built (or found up to date) by scripts/docker-image.sh."""
    problem = _docker_engine_problem()
    if problem:
        pytest.skip(f"container tests need a Docker engine: {problem}")
    binary = require_binary()
    env = dict(os.environ, LANEWAY_BIN=str(binary), LANEWAY_IMAGE=IMAGE)
    proc = subprocess.run(
        ["bash", str(IMAGE_SCRIPT)], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, env=env
    )
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/docker-image.sh exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}",
            pytrace=False,
        )
    return IMAGE


class Container:
    """One `docker run -d` of the image: S3 and admin ports published on
    random loopback ports, `env` passed by name (values stay off the command
    line), `volume` on /data."""

    def __init__(self, image: str, volume: str, env: dict[str, str]):
        self.name = f"laneway-test-{uuid.uuid4().hex[:12]}"
        self.image, self.volume, self.env = image, volume, env
        self.endpoint = ""

    def start(self) -> None:
        args = ["run", "-d", "--name", self.name, "-p", "127.0.0.1::9000", "-p", "127.0.0.1::9001"]
        args += ["-v", f"{self.volume}:/data"]
        for key in self.env:
            args += ["-e", key]
        docker(*args, self.image, env=dict(os.environ, **self.env))
        self.wait_ready()

    def port(self, container_port: int) -> str:
        out = docker("port", self.name, f"{container_port}/tcp").stdout.split()
        assert out, f"{self.name}: port {container_port} is not published"
        return out[0]

    def logs(self) -> str:
        proc = docker("logs", "--tail", "80", self.name, check=False)
        return f"--- docker logs {self.name} (stdout) ---\n{proc.stdout}\n--- (stderr) ---\n{proc.stderr}"

    def _state(self) -> str:
        return docker("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", self.name).stdout.strip()

    def wait_ready(self) -> None:
        """Until the health probe passes inside the container and the S3 port
        answers HTTP through the published port (which may change on restart)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        probe = None
        while time.monotonic() < deadline:
            state = self._state()
            if not state.startswith("running"):
                pytest.fail(f"container {self.name} is not running ({state})\n{self.logs()}", pytrace=False)
            probe = docker("exec", self.name, *HEALTH_CMD, check=False, timeout=30)
            if probe.returncode == 0:
                endpoint = f"http://{self.port(9000)}"
                try:
                    urllib.request.urlopen(endpoint + "/", timeout=5).close()
                    self.endpoint = endpoint
                    return
                except urllib.error.HTTPError:
                    self.endpoint = endpoint  # an S3 error (403 unsigned) is an answer
                    return
                except OSError:
                    pass  # docker-proxy accepted, the server is not reachable yet
            time.sleep(0.2)
        detail = f"last probe: exit {probe.returncode}, {probe.stderr.strip()}" if probe else "no probe ran"
        pytest.fail(
            f"container {self.name} not ready within {READY_TIMEOUT_S:.0f}s ({detail})\n{self.logs()}",
            pytrace=False,
        )

    def restart(self) -> None:
        docker("restart", "--time", "30", self.name)
        self.wait_ready()

    def stop(self) -> None:
        docker("stop", "--time", "30", self.name)
        state = self._state()
        assert state == "exited 0", f"{self.name} stopped with {state}\n{self.logs()}"


class Docker:
    """The containers and volumes of one test, removed at teardown."""

    def __init__(self, image: str):
        self.image = image
        self.containers: list[Container] = []
        self.volumes: list[str] = []

    def volume(self) -> str:
        name = f"laneway-test-{uuid.uuid4().hex[:12]}"
        docker("volume", "create", "--label", "org.laneway.test=conformance", name)
        self.volumes.append(name)
        return name

    def run(self, volume: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> Container:
        env = {
            "LANEWAY_ACCESS_KEY": access_key,
            "LANEWAY_SECRET_KEY": secret_key,
            "LANEWAY_ADMIN_TOKEN": ADMIN_TOKEN,
        }
        container = Container(self.image, volume, env)
        # Registered before it starts, so a failed start is cleaned up too.
        self.containers.append(container)
        container.start()
        return container

    def cleanup(self) -> None:
        for c in self.containers:
            if c.name:
                docker("rm", "-f", "-v", c.name, check=False)
        for v in self.volumes:
            docker("volume", "rm", "-f", v, check=False)


@pytest.fixture
def dock(image):
    d = Docker(image)
    try:
        yield d
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def aws_config(tmp_path_factory) -> dict[str, str]:
    """The aws CLI's environment as conftest's `aws_cli` builds it: empty
    config and credentials files, no inherited AWS_* variable."""
    cfg_dir = tmp_path_factory.mktemp("awscli-container")
    (cfg_dir / "config").write_text("")
    (cfg_dir / "credentials").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE=str(cfg_dir / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(cfg_dir / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_PAGER="",
    )
    return env


def aws(env: dict[str, str], container: Container, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "awscli", "--endpoint-url", container.endpoint, *args]
    return run_or_fail(cmd, env=env, check=check, context=lambda: f"\n{container.logs()}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_image_settings_and_rebuild_skip(image):
    config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", image).stdout)
    assert config["User"] == UID_GID
    assert set(config["ExposedPorts"]) == {"9000/tcp", "9001/tcp"}
    assert set(config["Volumes"]) == {"/data"}
    assert config["Entrypoint"] == ["/usr/local/bin/laneway"]
    assert config["Cmd"] == SERVE_CMD
    assert config["Labels"]["org.laneway.binary-sha256"] == _sha256(require_binary())

    # Same binary, same script: nothing to rebuild, same image.
    image_id = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    env = dict(os.environ, LANEWAY_BIN=str(require_binary()), LANEWAY_IMAGE=image)
    again = subprocess.run(["bash", str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stdout, again.stdout
    assert docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() == image_id


def test_container_aws_cli_smoke(dock, aws_config, tmp_path):
    c = dock.run(dock.volume())
    # The server runs as the image's non-root user.
    top = docker("top", c.name, "-o", "pid,uid,args").stdout.splitlines()[1:]
    assert any(line.split()[1] == "10001" and "serve" in line for line in top), top

    bucket = unique_bucket_name("container-smoke")
    url = f"s3://{bucket}"
    assert f"make_bucket: {bucket}" in aws(aws_config, c, "s3", "mb", url).stdout
    assert bucket in aws(aws_config, c, "s3", "ls").stdout

    small = tmp_path / "hello.txt"
    small.write_bytes(b"hello from a laneway container\n")
    big = tmp_path / "blob.bin"
    big.write_bytes(os.urandom(3 * MIB + 17))
    aws(aws_config, c, "s3", "cp", str(small), f"{url}/docs/hello.txt")
    aws(aws_config, c, "s3", "cp", str(big), f"{url}/data/blob.bin")

    for key, src in (("docs/hello.txt", small), ("data/blob.bin", big)):
        down = tmp_path / f"down-{src.name}"
        aws(aws_config, c, "s3", "cp", f"{url}/{key}", str(down))
        assert down.read_bytes() == src.read_bytes(), key
    head = json.loads(aws(aws_config, c, "s3api", "head-object", "--bucket", bucket, "--key", "data/blob.bin").stdout)
    assert head["ETag"] == quoted_md5(big.read_bytes())

    top_level = aws(aws_config, c, "s3", "ls", f"{url}/").stdout
    assert "PRE data/" in top_level and "PRE docs/" in top_level
    recursive = aws(aws_config, c, "s3", "ls", "--recursive", f"{url}/").stdout
    assert "docs/hello.txt" in recursive and "data/blob.bin" in recursive
    assert str(big.stat().st_size) in recursive

    tagging = json.dumps({"TagSet": [{"Key": "env", "Value": "container"}, {"Key": "team", "Value": "storage eng"}]})
    aws(aws_config, c, "s3api", "put-object-tagging", "--bucket", bucket, "--key", "docs/hello.txt", "--tagging", tagging)
    got = aws(aws_config, c, "s3api", "get-object-tagging", "--bucket", bucket, "--key", "docs/hello.txt", "--output", "json")
    assert tags_dict(json.loads(got.stdout)["TagSet"]) == {"env": "container", "team": "storage eng"}

    removed = aws(aws_config, c, "s3", "rm", "--recursive", f"{url}/").stdout
    assert f"delete: {url}/docs/hello.txt" in removed and f"delete: {url}/data/blob.bin" in removed
    assert aws(aws_config, c, "s3", "ls", "--recursive", f"{url}/", check=False).stdout.strip() == ""
    assert f"remove_bucket: {bucket}" in aws(aws_config, c, "s3", "rb", url).stdout
    assert bucket not in aws(aws_config, c, "s3", "ls").stdout


def test_container_restart_keeps_data(dock, aws_config, tmp_path):
    volume = dock.volume()
    first = dock.run(volume)
    bucket = unique_bucket_name("container-restart")
    url = f"s3://{bucket}"
    body = tmp_path / "kept.bin"
    body.write_bytes(os.urandom(MIB + 3))
    tagging = json.dumps({"TagSet": [{"Key": "kept", "Value": "yes"}]})
    aws(aws_config, first, "s3", "mb", url)
    aws(aws_config, first, "s3", "cp", str(body), f"{url}/kept.bin")
    aws(aws_config, first, "s3api", "put-object-tagging", "--bucket", bucket, "--key", "kept.bin", "--tagging", tagging)

    def check_kept(c: Container, tag: str) -> None:
        down = tmp_path / f"down-{tag}.bin"
        aws(aws_config, c, "s3", "cp", f"{url}/kept.bin", str(down))
        assert down.read_bytes() == body.read_bytes(), tag
        got = aws(aws_config, c, "s3api", "get-object-tagging", "--bucket", bucket, "--key", "kept.bin", "--output", "json")
        assert tags_dict(json.loads(got.stdout)["TagSet"]) == {"kept": "yes"}, tag

    # The same container restarted (SIGTERM, then a start).
    first.restart()
    check_kept(first, "restarted")

    # A new container on the same volume, as after `docker compose down` and
    # `up` without -v. Its key variables are ignored: the data directory
    # already has its first key, and that key still works.
    first.stop()
    docker("rm", "-v", first.name)
    first.name = ""
    second = dock.run(volume, access_key="LWIGNOREDNEWKEY00001", secret_key="ignored/secret+0123456789abcdefghijklmno")
    check_kept(second, "new container")
    aws(aws_config, second, "s3", "rm", f"{url}/kept.bin")
    aws(aws_config, second, "s3", "rb", url)
