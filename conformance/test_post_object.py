"""PostObject: browser-form uploads made with boto3's
`generate_presigned_post` and sent by `requests` as a browser would
(multipart/form-data, the file last). Every test runs with the form boto3
makes by default (SigV2-signed policy) and with signature_version=s3v4
(SigV4: x-amz-algorithm, x-amz-credential, x-amz-date, x-amz-signature).

Covers: a form upload read back byte-exact with its Content-Type and user
metadata; success_action_status 201; the policy's conditions (eq and
starts-with on the key, Content-Type and x-amz-meta-*, content-length-range,
form fields the policy does not cover) answered as AWS does (403
AccessDenied "Invalid according to Policy: ...", 400 EntityTooLarge /
EntityTooSmall); an expired policy; a tampered or wrongly keyed
signature; a form without a signature; a read-only key; another tenant's
bucket. Refused uploads store nothing.

Starts its own `laneway serve` with the admin API, to make a read-only key
and a second tenant.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
import uuid

import pytest
import requests
from botocore.exceptions import ClientError

from conftest import admin_env

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own laneway; not with LANEWAY_ENDPOINT"
)

KIB = 1024


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from admin_env(tmp_path_factory, "post-object")


@pytest.fixture(scope="module")
def keys(env):
    """Tenant A (full key and read-only key), tenant B with a bucket."""
    a = env.api("POST", "/v1/tenants", {"name": "post-a"})
    b = env.api("POST", "/v1/tenants", {"name": "post-b"})
    ro = env.api("POST", "/v1/tenants/post-a/keys", {"access": "read-only"})
    cb = env.client(b["key"])
    cb.create_bucket(Bucket="post-b-data")
    return {"a": a["key"], "ro": ro, "b": b["key"], "cb": cb}


@pytest.fixture(params=[None, "s3v4"], ids=["default", "s3v4"])
def signature(request):
    """boto3's default presigned POST in us-east-1 is signed with SigV2
    (AWSAccessKeyId, signature); with signature_version=s3v4 it is SigV4
    (x-amz-algorithm, x-amz-credential, x-amz-date, x-amz-signature). Both
    are real clients' forms."""
    return request.param


@pytest.fixture
def s3a(env, keys, signature):
    return env.client(keys["a"], signature=signature)


def signature_field(post: dict) -> str:
    return "x-amz-signature" if "x-amz-signature" in post["fields"] else "signature"


@pytest.fixture
def bucket(s3a):
    name = f"post-{uuid.uuid4().hex[:10]}"
    s3a.create_bucket(Bucket=name)
    return name


def send(post: dict, body: bytes, filename: str = "upload.bin", **overrides) -> requests.Response:
    """Submit the form `post` (from generate_presigned_post) with `body` as
    its file; `overrides` replace (or, with value None, drop) form fields."""
    fields = dict(post["fields"])
    for name, value in overrides.items():
        name = name.replace("_", "-") if name.startswith("x_amz") else name
        if value is None:
            fields.pop(name, None)
        else:
            fields[name] = value
    return requests.post(post["url"], data=fields, files={"file": (filename, body)}, timeout=60)


def error_of(resp: requests.Response) -> tuple[int, str, str]:
    code = re.search(r"<Code>([^<]*)</Code>", resp.text)
    message = re.search(r"<Message>([^<]*)</Message>", resp.text)
    return resp.status_code, code.group(1) if code else "", message.group(1) if message else ""


def assert_absent(client, bucket: str, key: str) -> None:
    with pytest.raises(ClientError) as info:
        client.head_object(Bucket=bucket, Key=key)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_sigv4_form_fields(env, keys, bucket):
    post = env.client(keys["a"], signature="s3v4").generate_presigned_post(bucket, "k")
    assert {"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature", "policy"} <= set(post["fields"])
    assert post["fields"]["x-amz-algorithm"] == "AWS4-HMAC-SHA256"


def test_form_upload_round_trips_with_metadata(s3a, bucket):
    body = os.urandom(200 * KIB + 7)
    post = s3a.generate_presigned_post(
        bucket,
        "forms/photo.bin",
        Fields={"Content-Type": "image/png", "x-amz-meta-owner": "alice"},
        Conditions=[
            {"Content-Type": "image/png"},
            ["starts-with", "$x-amz-meta-owner", "al"],
            ["content-length-range", 1, 1024 * KIB],
        ],
        ExpiresIn=600,
    )
    assert post["url"].rstrip("/").endswith(f"/{bucket}")
    resp = send(post, body)
    assert resp.status_code == 204, resp.text
    assert resp.headers.get("ETag", "").strip('"') == hashlib.md5(body).hexdigest()
    got = s3a.get_object(Bucket=bucket, Key="forms/photo.bin")
    assert got["Body"].read() == body
    assert got["ContentType"] == "image/png"
    assert got["Metadata"] == {"owner": "alice"}
    assert got["ContentLength"] == len(body)


def test_success_action_status_201_answers_post_response(s3a, bucket):
    post = s3a.generate_presigned_post(
        bucket,
        "created.txt",
        Fields={"success_action_status": "201"},
        Conditions=[{"success_action_status": "201"}],
    )
    resp = send(post, b"created by a form")
    assert resp.status_code == 201, resp.text
    assert "<Key>created.txt</Key>" in resp.text
    assert f"<Bucket>{bucket}</Bucket>" in resp.text
    assert s3a.get_object(Bucket=bucket, Key="created.txt")["Body"].read() == b"created by a form"


def test_empty_file_is_stored(s3a, bucket):
    post = s3a.generate_presigned_post(bucket, "empty")
    resp = send(post, b"")
    assert resp.status_code == 204, resp.text
    assert s3a.head_object(Bucket=bucket, Key="empty")["ContentLength"] == 0


def test_key_starts_with_condition(s3a, bucket):
    # boto3 turns a key ending in ${filename} into ["starts-with", "$key", prefix].
    post = s3a.generate_presigned_post(bucket, "uploads/${filename}")
    assert ["starts-with", "$key", "uploads/"] in json.loads(
        base64.b64decode(post["fields"]["policy"])
    )["conditions"]
    ok = send(post, b"inside the prefix", key="uploads/a.txt")
    assert ok.status_code == 204, ok.text
    assert s3a.get_object(Bucket=bucket, Key="uploads/a.txt")["Body"].read() == b"inside the prefix"
    status, code, message = error_of(send(post, b"outside", key="elsewhere/a.txt"))
    assert (status, code) == (403, "AccessDenied"), message
    assert message.startswith("Invalid according to Policy: Policy Condition failed")
    assert_absent(s3a, bucket, "elsewhere/a.txt")


def test_filename_variable_is_refused_not_stored_literally(s3a, bucket):
    # s3s 0.14.1 does not hand the file part's name to the handler, so the
    # key cannot be completed as AWS does: refused, never stored as typed.
    post = s3a.generate_presigned_post(bucket, "uploads/${filename}")
    status, code, _ = error_of(send(post, b"x", filename="photo.jpg"))
    assert (status, code) == (501, "NotImplemented")
    assert s3a.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_eq_conditions_on_content_type_and_metadata(s3a, bucket):
    post = s3a.generate_presigned_post(
        bucket,
        "typed",
        Fields={"Content-Type": "text/plain", "x-amz-meta-team": "red"},
        Conditions=[{"Content-Type": "text/plain"}, {"x-amz-meta-team": "red"}],
    )
    for field, value in (("Content-Type", "text/html"), ("x-amz-meta-team", "blue")):
        status, code, message = error_of(send(post, b"typed body", **{field: value}))
        assert (status, code) == (403, "AccessDenied"), (field, message)
        assert message.startswith("Invalid according to Policy:"), message
    assert_absent(s3a, bucket, "typed")


def test_key_eq_condition(s3a, bucket):
    post = s3a.generate_presigned_post(bucket, "exact-key")
    status, code, _ = error_of(send(post, b"x", key="other-key"))
    assert (status, code) == (403, "AccessDenied")
    assert_absent(s3a, bucket, "other-key")


def test_fields_outside_the_policy_are_refused(s3a, bucket):
    post = s3a.generate_presigned_post(bucket, "extra")
    status, code, message = error_of(send(post, b"x", **{"x-amz-meta-sneaky": "1"}))
    assert (status, code) == (403, "AccessDenied")
    assert "Extra input fields: x-amz-meta-sneaky" in message
    assert_absent(s3a, bucket, "extra")


def test_content_length_range(s3a, bucket):
    post = s3a.generate_presigned_post(bucket, "sized", Conditions=[["content-length-range", 10, 100]])
    assert error_of(send(post, b"x" * 101))[:2] == (400, "EntityTooLarge")
    assert error_of(send(post, b"x" * 9))[:2] == (400, "EntityTooSmall")
    assert_absent(s3a, bucket, "sized")
    assert send(post, b"x" * 100).status_code == 204
    assert s3a.head_object(Bucket=bucket, Key="sized")["ContentLength"] == 100


def test_files_over_the_form_limit_are_refused(s3a, bucket):
    # s3s buffers a form's file in memory, so laneway caps it at 64 MiB
    # whatever the policy allows; nothing is stored.
    limit = 64 * 1024 * KIB
    post = s3a.generate_presigned_post(
        bucket, "huge", Conditions=[["content-length-range", 0, 2 * limit]]
    )
    assert error_of(send(post, b"z" * (limit + 1)))[:2] == (400, "EntityTooLarge")
    assert_absent(s3a, bucket, "huge")


def test_expired_policy(s3a, bucket):
    post = s3a.generate_presigned_post(bucket, "late", ExpiresIn=1)
    time.sleep(2.5)
    status, code, message = error_of(send(post, b"too late"))
    assert (status, code) == (403, "AccessDenied")
    assert message == "Invalid according to Policy: Policy expired."
    assert_absent(s3a, bucket, "late")


def test_tampered_and_wrongly_keyed_signatures(env, keys, s3a, bucket, signature):
    post = s3a.generate_presigned_post(bucket, "forged")
    field = signature_field(post)
    sig = post["fields"][field]
    flipped = ("A" if sig[0] != "A" else "B") + sig[1:]
    assert error_of(send(post, b"x", **{field: flipped}))[:2] == (403, "SignatureDoesNotMatch")
    # The policy itself altered after signing (a larger size range).
    policy = json.loads(base64.b64decode(post["fields"]["policy"]))
    policy["conditions"].append(["content-length-range", 0, 10])
    altered = base64.b64encode(json.dumps(policy).encode()).decode()
    assert error_of(send(post, b"x", policy=altered))[:2] == (403, "SignatureDoesNotMatch")
    # Signed with a wrong secret for a real access key.
    wrong = env.client(keys["a"], secret="x" * 40, signature=signature).generate_presigned_post(bucket, "forged")
    assert error_of(send(wrong, b"x"))[:2] == (403, "SignatureDoesNotMatch")
    assert_absent(s3a, bucket, "forged")


def test_form_without_signature_is_refused(s3a, bucket):
    resp = requests.post(
        f"{s3a.meta.endpoint_url}/{bucket}", data={"key": "anon"}, files={"file": ("a", b"anonymous")}, timeout=30
    )
    assert error_of(resp)[:2] == (403, "AccessDenied")
    assert_absent(s3a, bucket, "anon")


def test_read_only_key_is_refused(env, keys, s3a, bucket, signature):
    ro = env.client(keys["ro"], signature=signature)
    post = ro.generate_presigned_post(bucket, "by-read-only")
    assert error_of(send(post, b"nope"))[:2] == (403, "AccessDenied")
    assert_absent(s3a, bucket, "by-read-only")
    # The same key may still read.
    s3a.put_object(Bucket=bucket, Key="readable", Body=b"r")
    assert ro.get_object(Bucket=bucket, Key="readable")["Body"].read() == b"r"


def test_other_tenants_bucket_is_not_reachable(keys, s3a):
    post = s3a.generate_presigned_post("post-b-data", "intruder")
    assert error_of(send(post, b"evil"))[:2] == (404, "NoSuchBucket")
    assert_absent(keys["cb"], "post-b-data", "intruder")
