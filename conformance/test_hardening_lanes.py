"""A client that does not read its response costs only itself (issue 11).

The reproduction as a user would meet it: tenant A's boto3 `get_object`
of a 7 MiB object whose body is never read (a paused Spark or pyarrow
stream, a client on a slow link) used to keep its share of the lanes'
capacity while hyper waited on A's socket, and tenant B's requests were
refused with 503 SlowDown until A's process exited. Now the server gives
those units back once A stops reading (docs/qos.md, "Slow and stalled
clients"), and B is served; A's body is intact when it reads on.

The suite's leak check (conftest.py) then requires every unit back after
the test.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from conftest import admin_env


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from admin_env(tmp_path_factory, "hardening-lanes")


def _tenant(env, name: str):
    created = env.api("POST", "/v1/tenants", {"name": name})
    return env.client(created["key"])


def test_unread_get_of_one_tenant_does_not_stop_another(env):
    a, b = _tenant(env, "reader-a"), _tenant(env, "reader-b")
    a.create_bucket(Bucket="a-data")
    b.create_bucket(Bucket="b-data")
    big = os.urandom(7 << 20)
    a.put_object(Bucket="a-data", Key="big", Body=big)
    b.put_object(Bucket="b-data", Key="small", Body=b"hello")

    # A keeps several responses open without reading them.
    held = [a.get_object(Bucket="a-data", Key="big") for _ in range(3)]

    # B (no retries: one 503 fails the test) is served, again and again.
    for _ in range(20):
        got = b.get_object(Bucket="b-data", Key="small")["Body"].read()
        assert got == b"hello"
    b.put_object(Bucket="b-data", Key="after", Body=b"x" * 1000)

    # A reads on after its pause: every byte arrives.
    digest = hashlib.sha256(big).hexdigest()
    for resp in held:
        assert hashlib.sha256(resp["Body"].read()).hexdigest() == digest
