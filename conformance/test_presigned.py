"""Presigned URLs made by boto3's generate_presigned_url and used by a
plain HTTP client (requests): GET, PUT, HEAD, DELETE; an expired URL is 403
AccessDenied; a SigV4 expiry beyond seven days is refused (400
AuthorizationQueryParametersError), as AWS does. boto3's default presigned
URLs for S3 are SigV2-style (AWSAccessKeyId/Signature/Expires); the SigV4
form is tested too."""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET

import pytest
import requests
from botocore.config import Config

from s3util import expect_error


def error_code(resp: requests.Response) -> str:
    try:
        return ET.fromstring(resp.content).findtext("Code") or ""
    except ET.ParseError:
        return ""


@pytest.fixture(params=["default", "s3v4"])
def signer(request, s3, client_factory):
    if request.param == "default":
        return s3
    return client_factory(config=Config(signature_version="s3v4"))


def test_presigned_put_get_head_delete(signer, s3, bucket):
    data = os.urandom(10_000)
    put_url = signer.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p/obj"}, ExpiresIn=300)
    put = requests.put(put_url, data=data, timeout=30)
    assert put.status_code == 200, put.text
    assert s3.get_object(Bucket=bucket, Key="p/obj")["Body"].read() == data

    get_url = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p/obj"}, ExpiresIn=300)
    got = requests.get(get_url, timeout=30)
    assert got.status_code == 200
    assert got.content == data
    assert got.headers["ETag"] == put.headers["ETag"]

    head_url = signer.generate_presigned_url("head_object", Params={"Bucket": bucket, "Key": "p/obj"}, ExpiresIn=300)
    head = requests.head(head_url, timeout=30)
    assert head.status_code == 200
    assert int(head.headers["Content-Length"]) == len(data)

    del_url = signer.generate_presigned_url("delete_object", Params={"Bucket": bucket, "Key": "p/obj"}, ExpiresIn=300)
    deleted = requests.delete(del_url, timeout=30)
    assert deleted.status_code == 204
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="p/obj")


def test_presigned_url_is_bound_to_its_request(s3, bucket):
    s3.put_object(Bucket=bucket, Key="a", Body=b"a")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "a"}, ExpiresIn=300)
    tampered = url.replace(f"/{bucket}/a?", f"/{bucket}/b?")
    resp = requests.get(tampered, timeout=30)
    assert resp.status_code == 403
    assert error_code(resp) == "SignatureDoesNotMatch"


def test_expired_url_is_access_denied(signer, s3, bucket):
    s3.put_object(Bucket=bucket, Key="e", Body=b"e")
    url = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "e"}, ExpiresIn=1)
    time.sleep(2.5)
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 403
    assert error_code(resp) == "AccessDenied"


def test_expiry_beyond_seven_days_is_refused(client_factory, s3, bucket):
    v4 = client_factory(config=Config(signature_version="s3v4"))
    s3.put_object(Bucket=bucket, Key="long", Body=b"x")
    url = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "long"}, ExpiresIn=604801)
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 400, resp.text
    assert error_code(resp) == "AuthorizationQueryParametersError", resp.text
    ok = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "long"}, ExpiresIn=604800)
    assert requests.get(ok, timeout=30).status_code == 200
