"""Authentication: SigV4 header signatures, presigned URLs and payload
hashes, with the error codes AWS sends."""

from __future__ import annotations

import time

import pytest
import requests
from botocore.config import Config

from s3util import expect_error, quoted_md5


def test_wrong_secret_is_signature_does_not_match(client_factory, server, bucket):
    bad = client_factory(aws_secret_access_key="x" * 40)
    expect_error("SignatureDoesNotMatch", 403, bad.list_buckets)
    expect_error("SignatureDoesNotMatch", 403, bad.put_object, Bucket=bucket, Key="k", Body=b"x")
    expect_error("SignatureDoesNotMatch", 403, bad.get_object, Bucket=bucket, Key="k")


def test_unknown_access_key_is_invalid_access_key_id(client_factory, bucket):
    unknown = client_factory(aws_access_key_id="AKIDNOTKNOWNTOLANEWAY")
    expect_error("InvalidAccessKeyId", 403, unknown.list_buckets)
    expect_error("InvalidAccessKeyId", 403, unknown.list_objects_v2, Bucket=bucket)


def test_refused_writes_store_nothing(s3, client_factory, bucket):
    bad = client_factory(aws_secret_access_key="y" * 40)
    expect_error("SignatureDoesNotMatch", 403, bad.put_object, Bucket=bucket, Key="should-not-exist", Body=b"x")
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="should-not-exist")


def test_anonymous_request_is_access_denied(server, bucket):
    resp = requests.get(f"{server.endpoint}/{bucket}", timeout=30)
    assert resp.status_code == 403
    assert b"<Code>AccessDenied</Code>" in resp.content
    resp = requests.put(f"{server.endpoint}/{bucket}/anon", data=b"x", timeout=30)
    assert resp.status_code == 403


@pytest.fixture(params=["default", "s3v4"])
def presigner(request, client_factory):
    """A client to presign with. At its default configuration boto3 presigns
    S3 URLs in us-east-1 with SigV2 query auth (Signature=, Expires=); with
    signature_version=s3v4 it uses SigV4 (X-Amz-Signature=). Both are real
    clients' URLs."""
    if request.param == "s3v4":
        return client_factory(config=Config(signature_version="s3v4"))
    return client_factory()


def _signature_param(url: str) -> str:
    return "X-Amz-Signature=" if "X-Amz-Signature=" in url else "Signature="


def test_presigned_get_and_put(presigner, bucket):
    body = b"presigned body \x00\xff"
    put_url = presigner.generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": "pre/signed key"}, ExpiresIn=300
    )
    resp = requests.put(put_url, data=body, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.headers.get("ETag") == quoted_md5(body)

    get_url = presigner.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "pre/signed key"}, ExpiresIn=300
    )
    resp = requests.get(get_url, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.content == body

    resp = requests.get(get_url, headers={"Range": "bytes=0-8"}, timeout=30)
    assert resp.status_code == 206
    assert resp.content == body[:9]


def test_presigned_tampered_signature(presigner, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=300)
    param = _signature_param(url)
    head, sig = url.split(param, 1)
    flipped = ("0" if sig[0] != "0" else "1") + sig[1:]
    resp = requests.get(head + param + flipped, timeout=30)
    assert resp.status_code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in resp.content

    # Signed for one key, used for another.
    other = url.replace(f"/{bucket}/k?", f"/{bucket}/other?")
    resp = requests.get(other, timeout=30)
    assert resp.status_code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in resp.content


def test_presigned_url_expires(presigner, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=1)
    time.sleep(2.5)
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 403
    assert b"<Code>AccessDenied</Code>" in resp.content


def test_payload_hash_mismatch(client_factory, bucket, s3):
    # Sign one body, send another of the same length: the signed
    # x-amz-content-sha256 no longer matches what arrives.
    client = client_factory(config=Config(request_checksum_calculation="when_required"))

    def swap_body(request, **_):
        request.body = b"B" * 64

    client.meta.events.register("before-send.s3.PutObject", swap_body)
    expect_error("XAmzContentSHA256Mismatch", 400, client.put_object, Bucket=bucket, Key="tampered", Body=b"A" * 64)
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="tampered")
