"""README's Quick start as a newcomer runs it: the first `laneway serve` on a
new data directory prints `export AWS_...` lines that work as pasted with the
aws CLI and boto3; a restart on the same directory keeps the key and the
data, and does not print the secret again."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import boto3
import pytest

from conftest import LanewayProcess, require_binary

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own laneway; not with LANEWAY_ENDPOINT"
)

EXPORT_RE = re.compile(r"^export (AWS_[A-Z_]+)=(\S+)\s*$", re.M)


def _pasted_env(exports: dict[str, str], tmp_path) -> dict[str, str]:
    """A shell environment after pasting the banner: no other AWS_* settings,
    empty config and credentials files."""
    (tmp_path / "aws-config").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(exports)
    env["AWS_CONFIG_FILE"] = str(tmp_path / "aws-config")
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "aws-config")
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def _client(exports: dict[str, str], endpoint: str):
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=exports["AWS_DEFAULT_REGION"],
        aws_access_key_id=exports["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=exports["AWS_SECRET_ACCESS_KEY"],
    )


def test_first_start_banner_and_restart(tmp_path):
    binary = require_binary()
    data_dir = tmp_path / "laneway-data"

    first = LanewayProcess(binary, data_dir, tmp_path, [], name="first")
    try:
        banner = first.stdout()
        exports = dict(EXPORT_RE.findall(banner))
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"} <= set(
            exports
        ), banner
        assert exports["AWS_ENDPOINT_URL"] == first.endpoint
        assert exports["AWS_DEFAULT_REGION"] == "us-east-1"
        assert "s3 ls" in banner

        # The aws CLI with exactly the pasted environment (the endpoint comes
        # from AWS_ENDPOINT_URL).
        env = _pasted_env(exports, tmp_path)
        for args in (["s3", "mb", "s3://quickstart"], ["s3", "ls"]):
            proc = subprocess.run(
                [sys.executable, "-m", "awscli", *args],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert proc.returncode == 0, proc.stderr
        assert "quickstart" in proc.stdout

        client = _client(exports, first.endpoint)
        client.put_object(Bucket="quickstart", Key="hello.txt", Body=b"survives a restart")
    finally:
        assert first.stop() is None, f"laneway died: {first.stderr_path.read_text()[-3000:]}"

    second = LanewayProcess(binary, data_dir, tmp_path, [], name="second")
    try:
        banner = second.stdout()
        assert exports["AWS_SECRET_ACCESS_KEY"] not in banner, "the secret is shown only once"
        assert exports["AWS_ACCESS_KEY_ID"] in banner
        client = _client(exports, second.endpoint)
        assert client.get_object(Bucket="quickstart", Key="hello.txt")["Body"].read() == b"survives a restart"
        assert [b["Name"] for b in client.list_buckets()["Buckets"]] == ["quickstart"]
    finally:
        assert second.stop() is None, f"laneway died: {second.stderr_path.read_text()[-3000:]}"
