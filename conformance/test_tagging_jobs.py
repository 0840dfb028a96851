"""Bulk tagging jobs (`?x-laneway-tagging-jobs`) against a running server,
signed with SigV4 like any S3 call (botocore's signer): a job tags exactly
the objects under its prefix whose tags match its filter, reports what it
scanned and changed, is idempotent, can be cancelled, refuses bad bodies,
keys without write access and other tenants' buckets, and resumes after
the server is killed mid-job."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from urllib.parse import quote

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import ACCESS_KEY, SECRET_KEY, admin_env
from s3util import tag_filter

PARAM = "x-laneway-tagging-jobs"


def call(endpoint: str, method: str, bucket: str, body: dict | None = None, job: str | None = None,
         access: str = ACCESS_KEY, secret: str = SECRET_KEY) -> tuple[int, dict]:
    """One signed request to the jobs route; (status, JSON or {})."""
    url = f"{endpoint}/{bucket}?{PARAM}" + (f"&id={quote(job)}" if job else "")
    data = json.dumps(body).encode() if body is not None else b""
    req = AWSRequest(method=method, url=url, data=data, headers={"content-type": "application/json"})
    S3SigV4Auth(Credentials(access, secret), "s3", "us-east-1").add_auth(req)
    prepared = req.prepare()
    http = urllib.request.Request(prepared.url, data=data if method == "POST" else None, method=method,
                                  headers=dict(prepared.headers))
    try:
        with urllib.request.urlopen(http, timeout=30) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as e:
        return e.code, {"error": e.read().decode(errors="replace")}


def wait_done(endpoint: str, bucket: str, job: str, timeout: float = 120, **kw) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, state = call(endpoint, "GET", bucket, job=job, **kw)
        assert status == 200, state
        if state["state"] != "running":
            return state
        time.sleep(0.1)
    raise AssertionError(f"job {job} still running after {timeout} s: {state}")


def tags_of(s3, bucket: str, key: str) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]}


def fill(s3, bucket: str, n: int) -> None:
    for i in range(n):
        tagging = "split=train" if i % 2 == 0 else "split=val"
        s3.put_object(Bucket=bucket, Key=f"data/{i:04d}", Body=b"x", Tagging=tagging + "&old=1")
    s3.put_object(Bucket=bucket, Key="other/x", Body=b"x", Tagging="split=train")


def test_job_tags_exactly_the_matching_objects(server, s3, bucket):
    fill(s3, bucket, 50)
    spec = {"prefix": "data/", "filter": {"split": "train"}, "set": {"stage": "ready"}, "remove": ["old"]}
    status, created = call(server.endpoint, "POST", bucket, spec)
    assert status == 202, created
    state = wait_done(server.endpoint, bucket, created["id"])
    assert state["state"] == "done"
    assert (state["scanned"], state["changed"], state["errors"]) == (25, 25, 0)
    assert tags_of(s3, bucket, "data/0000") == {"split": "train", "stage": "ready"}
    assert tags_of(s3, bucket, "data/0001") == {"split": "val", "old": "1"}
    assert tags_of(s3, bucket, "other/x") == {"split": "train"}
    with tag_filter(s3, {"stage": "ready"}):
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == [f"data/{i:04d}" for i in range(0, 50, 2)]
    # The same job again changes nothing: edits are idempotent.
    status, again = call(server.endpoint, "POST", bucket, spec)
    assert status == 202
    state = wait_done(server.endpoint, bucket, again["id"])
    assert (state["state"], state["scanned"], state["changed"]) == ("done", 25, 0)
    status, listing = call(server.endpoint, "GET", bucket)
    assert status == 200
    assert {j["id"] for j in listing["jobs"]} >= {created["id"], again["id"]}


def test_a_job_that_would_exceed_ten_tags_reports_errors(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="full", Body=b"x", Tagging="&".join(f"k{i}=v" for i in range(10)))
    s3.put_object(Bucket=bucket, Key="room", Body=b"x")
    status, created = call(server.endpoint, "POST", bucket, {"set": {"extra": "1"}})
    assert status == 202
    state = wait_done(server.endpoint, bucket, created["id"])
    assert (state["state"], state["scanned"], state["changed"], state["errors"]) == ("done", 2, 1, 1)
    assert state["messages"], state
    assert len(tags_of(s3, bucket, "full")) == 10


@pytest.mark.parametrize("body", [
    {"prefix": "a"},
    {"set": {"aws:x": "1"}},
    {"set": {"a": "1"}, "remove": ["a"]},
    {"set": {"a": "1"}, "unknown": True},
    {"set": {f"k{i}": "v" for i in range(11)}},
])
def test_bad_bodies_are_refused(server, bucket, body):
    status, answer = call(server.endpoint, "POST", bucket, body)
    assert status == 400, answer


def test_unsigned_and_wrongly_signed_requests_are_refused(server, bucket):
    url = f"{server.endpoint}/{bucket}?{PARAM}"
    req = urllib.request.Request(url, data=b'{"set":{"a":"1"}}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403
    status, _ = call(server.endpoint, "POST", bucket, {"set": {"a": "1"}}, secret="wrong" * 8)
    assert status == 403


def test_cancel_stops_a_job(server, s3, bucket):
    status, created = call(server.endpoint, "POST", bucket, {"set": {"a": "1"}})
    assert status == 202
    status, _ = call(server.endpoint, "DELETE", bucket, job=created["id"])
    assert status == 204
    state = wait_done(server.endpoint, bucket, created["id"])
    assert state["state"] in ("cancelled", "done")
    status, _ = call(server.endpoint, "GET", bucket, job="no-such-job")
    assert status == 400


@pytest.mark.skipif(bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own laneway")
class TestTenants:
    @pytest.fixture(scope="class")
    def env(self, tmp_path_factory):
        yield from admin_env(tmp_path_factory, "jobs-tenants")

    def test_other_tenants_and_read_only_keys_are_refused(self, env):
        a = env.api("POST", "/v1/tenants", {"name": "job-a"})
        b = env.api("POST", "/v1/tenants", {"name": "job-b"})
        cb = env.client(b["key"])
        cb.create_bucket(Bucket="b-own")
        cb.put_object(Bucket="b-own", Key="k", Body=b"x")
        ka = a["key"]
        status, answer = call(env.endpoint, "POST", "b-own", {"set": {"evil": "1"}},
                              access=ka["access_key"], secret=ka["secret_key"])
        assert status == 404 and "NoSuchBucket" in answer["error"], answer
        status, answer = call(env.endpoint, "GET", "b-own", access=ka["access_key"], secret=ka["secret_key"])
        assert status == 404, answer
        ro = env.api("POST", "/v1/tenants/job-b/keys", {"access": "read-only"})
        status, answer = call(env.endpoint, "POST", "b-own", {"set": {"x": "1"}},
                              access=ro["access_key"], secret=ro["secret_key"])
        assert status == 403, answer
        status, answer = call(env.endpoint, "GET", "b-own", access=ro["access_key"], secret=ro["secret_key"])
        assert status == 200, answer
        assert cb.get_object_tagging(Bucket="b-own", Key="k")["TagSet"] == []


@pytest.mark.skipif(bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own laneway")
def test_a_job_resumes_after_the_server_is_killed(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    import boto3
    from botocore.config import Config

    from conftest import LanewayProcess, require_binary

    args = ["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]
    proc = LanewayProcess(require_binary(), tmp_path / "data", tmp_path, args, name="jobs-kill")
    client = lambda endpoint: boto3.session.Session().client(  # noqa: E731
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, config=Config(max_pool_connections=32))
    s3 = client(proc.endpoint)
    s3.create_bucket(Bucket="big")
    n = 12_000
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket="big", Key=f"k/{i:06d}", Body=b"x"), range(n)))
    status, created = call(proc.endpoint, "POST", "big", {"prefix": "k/", "set": {"done": "yes"}})
    assert status == 202
    # Kill it mid-job: after its first page is recorded, before its last.
    seen = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _, seen = call(proc.endpoint, "GET", "big", job=created["id"])
        if seen["scanned"] > 0 or seen["state"] != "running":
            break
    os.killpg(proc.proc.pid, signal.SIGKILL)
    proc.proc.wait()
    assert seen["state"] == "running" and 0 < seen["scanned"] < n, seen
    again = LanewayProcess(require_binary(), tmp_path / "data", tmp_path, args, name="jobs-kill-2")
    try:
        state = wait_done(again.endpoint, "big", created["id"], timeout=120)
        assert state["state"] == "done"
        assert state["scanned"] >= n  # a page redone after the kill counts again
        s3 = client(again.endpoint)
        with tag_filter(s3, {"done": "yes"}):
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket="big")
            tagged = sum(len(p.get("Contents", [])) for p in pages)
        assert tagged == n
    finally:
        again.stop()


def test_a_job_body_cut_off_or_never_sent_costs_only_its_client(server, s3, bucket):
    """A signed POST whose body stops halfway (the socket closed) or never
    comes (the client goes silent): no job is created, other requests are
    served meanwhile, and the lanes return to zero (the leak check after
    every test)."""
    import socket
    from urllib.parse import urlparse

    body = json.dumps({"set": {"cut": "1"}}).encode()
    url = f"{server.endpoint}/{bucket}?{PARAM}"
    req = AWSRequest(method="POST", url=url, data=body, headers={"content-type": "application/json"})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    host = urlparse(server.endpoint)
    head = f"POST /{bucket}?{PARAM} HTTP/1.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in req.headers.items()) + f"Content-Length: {len(body)}\r\n\r\n"
    cut = socket.create_connection((host.hostname, host.port), timeout=10)
    cut.sendall(head.encode() + body[: len(body) // 2])
    cut.close()
    silent = socket.create_connection((host.hostname, host.port), timeout=10)
    silent.sendall(head.encode())
    try:
        s3.put_object(Bucket=bucket, Key="served", Body=b"x")
        assert s3.get_object(Bucket=bucket, Key="served")["Body"].read() == b"x"
        status, listing = call(server.endpoint, "GET", bucket)
        assert status == 200 and listing["jobs"] == [], listing
    finally:
        silent.close()
