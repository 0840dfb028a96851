"""The top-level docker-compose.yml as users run it: three store nodes,
two gateways, named volumes, health checks, the first key from the
environment. The image is the one scripts/docker-image.sh makes
(`laneway:local`, no registry needed; test_container.py's `image`
fixture), passed as LANEWAY_IMAGE with `up --no-build`; the gateways'
ports are published on free loopback ports.

The test brings the project up (a unique project name), waits until
compose reports both gateways healthy, runs the aws CLI smoke (mb, cp up
and down, ls, tagging, rm, rb) through both gateways, stops one store
container (its keys answer 503, the others keep working, LIST answers
503), starts it again, and always ends with `down -v`.

Skipped when no Docker engine answers. Runs with `docker compose` (v2)
where it exists, else docker-compose (1.29 on our build machines).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from cluster_util import free_port_block, poll, s3_client
from conftest import ACCESS_KEY, ADMIN_TOKEN, REPO_ROOT, SECRET_KEY, aws_cli_env, unique_bucket_name
from s3util import run_or_fail, tags_dict
from test_container import image  # noqa: F401  (the fixture: builds laneway:local, skips without Docker)

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
HEALTHY_TIMEOUT_S = 180.0
MIB = 1024 * 1024


def compose_command() -> list[str]:
    """`docker compose` where the v2 plugin answers, else docker-compose."""
    if shutil.which("docker"):
        v2 = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
        if v2.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("neither `docker compose` nor docker-compose is installed")


class Project:
    """One compose project of docker-compose.yml: a unique name, its own
    published ports, the test's key and admin token."""

    def __init__(self, image: str):
        self.name = f"lwtest{uuid.uuid4().hex[:10]}"
        self.cmd = compose_command() + ["-p", self.name, "-f", str(COMPOSE_FILE)]
        base = free_port_block(4)
        self.ports = {"s3": [base, base + 2], "admin": [base + 1, base + 3]}
        self.env = dict(
            os.environ,
            LANEWAY_IMAGE=image,
            LANEWAY_ACCESS_KEY=ACCESS_KEY,
            LANEWAY_SECRET_KEY=SECRET_KEY,
            LANEWAY_ADMIN_TOKEN=ADMIN_TOKEN,
            LANEWAY_GATEWAY_1_PORT=str(base),
            LANEWAY_GATEWAY_1_ADMIN_PORT=str(base + 1),
            LANEWAY_GATEWAY_2_PORT=str(base + 2),
            LANEWAY_GATEWAY_2_ADMIN_PORT=str(base + 3),
        )

    def run(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_or_fail([*self.cmd, *args], env=self.env, timeout=timeout, check=check, context=self.logs)

    def logs(self) -> str:
        proc = subprocess.run([*self.cmd, "logs", "--no-color", "--tail", "40"], env=self.env,
                              capture_output=True, text=True, timeout=60)
        return f"\n--- compose logs ---\n{proc.stdout}{proc.stderr}"

    def container(self, service: str) -> str:
        out = self.run("ps", "-q", service).stdout.split()
        assert out, f"no container for {service}"
        return out[0]

    def health(self, service: str) -> str:
        fmt = "{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{end}}"
        return run_or_fail(["docker", "inspect", "--format", fmt, self.container(service)]).stdout.strip()

    def wait_healthy(self, *services: str) -> None:
        poll(lambda: all(self.health(s) == "running/healthy" for s in services), HEALTHY_TIMEOUT_S,
             interval=1.0, what=f"{', '.join(services)} healthy")

    def endpoint(self, gateway: int) -> str:
        return f"http://127.0.0.1:{self.ports['s3'][gateway]}"


@pytest.fixture(scope="module")
def project(image):  # noqa: F811  (the imported fixture)
    p = Project(image)
    try:
        # up -d returns once every dependency condition held (init
        # completed, store nodes healthy) and the gateways started.
        p.run("up", "-d", "--no-build", timeout=600)
        p.wait_healthy("gateway-1", "gateway-2")
        yield p
    finally:
        p.run("down", "-v", "--timeout", "30", check=False, timeout=300)


@pytest.fixture(scope="module")
def aws_env(tmp_path_factory) -> dict[str, str]:
    return aws_cli_env(tmp_path_factory.mktemp("awscli-compose"))


def aws(project: Project, env: dict, gateway: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "awscli", "--endpoint-url", project.endpoint(gateway), *args]
    return run_or_fail(cmd, env=env, check=check, context=project.logs)


def test_every_service_is_up_and_init_completed(project):
    for service in ("store-1", "store-2", "store-3", "gateway-1", "gateway-2"):
        assert project.health(service) == "running/healthy", service
    init = project.container("init")
    state = run_or_fail(["docker", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", init]).stdout
    assert state.split() == ["exited", "0"]
    # Another `up` runs init again, which keeps the cluster file.
    project.run("up", "-d", "--no-build", timeout=600)
    assert "kept /data/cluster.toml" in project.run("logs", "--no-color", "init").stdout


def test_aws_cli_smoke_through_both_gateways(project, aws_env, tmp_path):
    bucket = unique_bucket_name("compose-smoke")
    url = f"s3://{bucket}"
    assert f"make_bucket: {bucket}" in aws(project, aws_env, 0, "s3", "mb", url).stdout
    small = tmp_path / "hello.txt"
    small.write_bytes(b"hello from compose\n")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(9 * MIB + 1))
    aws(project, aws_env, 1, "s3", "cp", str(small), f"{url}/docs/hello.txt")
    aws(project, aws_env, 0, "s3", "cp", str(big), f"{url}/data/big.bin")
    for gateway in (0, 1):
        listing = aws(project, aws_env, gateway, "s3", "ls", "--recursive", f"{url}/").stdout
        assert "docs/hello.txt" in listing and "data/big.bin" in listing
        for key, src in (("docs/hello.txt", small), ("data/big.bin", big)):
            down = tmp_path / f"down-{gateway}-{src.name}"
            aws(project, aws_env, gateway, "s3", "cp", f"{url}/{key}", str(down))
            assert down.read_bytes() == src.read_bytes(), (gateway, key)
    tagging = json.dumps({"TagSet": [{"Key": "env", "Value": "compose"}]})
    aws(project, aws_env, 0, "s3api", "put-object-tagging", "--bucket", bucket, "--key", "docs/hello.txt",
        "--tagging", tagging)
    got = aws(project, aws_env, 1, "s3api", "get-object-tagging", "--bucket", bucket, "--key", "docs/hello.txt",
              "--output", "json")
    assert tags_dict(json.loads(got.stdout)["TagSet"]) == {"env": "compose"}
    removed = aws(project, aws_env, 1, "s3", "rm", "--recursive", f"{url}/").stdout
    assert f"delete: {url}/docs/hello.txt" in removed and f"delete: {url}/data/big.bin" in removed
    assert f"remove_bucket: {bucket}" in aws(project, aws_env, 0, "s3", "rb", url).stdout
    for gateway in (0, 1):
        assert bucket not in aws(project, aws_env, gateway, "s3", "ls").stdout


def outcome(fn) -> tuple[str, float]:
    start = time.monotonic()
    try:
        fn()
        code = "OK"
    except ClientError as e:
        code = e.response["Error"].get("Code", "")
    return code, time.monotonic() - start


# A store container stopped: its groups elect new leaders among the other
# two (an election timeout of 1-2 s plus a round), and the gateways find
# them. Calls made meanwhile may answer 503; none may fail otherwise.
FAILOVER_S = 30.0


def all_served(clients, bucket: str, objects: dict[str, bytes]) -> bool:
    """Every object reads back byte-exact through both gateways, and a
    LIST finds each of them."""
    for i, (key, body) in enumerate(objects.items()):
        try:
            if clients[i % 2].get_object(Bucket=bucket, Key=key)["Body"].read() != body:
                return False
        except (ClientError, BotoCoreError):
            return False
    try:
        listed = clients[0].list_objects_v2(Bucket=bucket).get("Contents", [])
    except (ClientError, BotoCoreError):
        return False
    return {o["Key"] for o in listed} == set(objects)


def put_eventually(client, bucket: str, key: str, body: bytes) -> None:
    """PUT until acknowledged (a 503 during an election is retried)."""
    def attempt():
        code, _ = outcome(lambda: client.put_object(Bucket=bucket, Key=key, Body=body))
        assert code in ("OK", "ServiceUnavailable", "SlowDown", "InternalError"), (key, code)
        return code == "OK"
    poll(attempt, FAILOVER_S, interval=0.5, what=f"PUT {key} acknowledged")


@pytest.mark.parametrize("stopped", ["store-1", "store-3"])
def test_a_stopped_store_container_leaves_every_object_readable_and_writable(project, stopped):
    """Three replicas (the compose default): with any one store node down,
    every object stays readable and writable through both gateways, and
    nothing is lost when it comes back. store-1 is the first catalog
    replica (the one that started its groups' first elections). Clients
    retry as the SDKs do by default (three attempts in standard mode)."""
    clients = [s3_client(project.endpoint(g), ACCESS_KEY, SECRET_KEY, attempts=3) for g in (0, 1)]
    bucket = unique_bucket_name("compose-stop")
    clients[0].create_bucket(Bucket=bucket)
    objects = {f"k/{i:02d}": os.urandom(512 + i) for i in range(32)}
    objects["big"] = os.urandom(3 * MIB)
    for i, (key, body) in enumerate(objects.items()):
        clients[i % 2].put_object(Bucket=bucket, Key=key, Body=body)

    project.run("stop", "--timeout", "30", stopped)
    poll(lambda: all_served(clients, bucket, objects), FAILOVER_S, interval=0.5,
         what=f"every object served with {stopped} down")
    fresh = {f"while-down/{i:02d}": os.urandom(700 + i) for i in range(16)}
    for i, (key, body) in enumerate(fresh.items()):
        put_eventually(clients[i % 2], bucket, key, body)
    objects.update(fresh)
    assert all_served(clients, bucket, objects)

    project.run("start", stopped)
    project.wait_healthy(stopped)
    poll(lambda: all_served(clients, bucket, objects), FAILOVER_S, interval=0.5,
         what=f"every object served after {stopped} came back")
