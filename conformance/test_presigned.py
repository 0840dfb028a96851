"""Presigned URLs (SigV4 query authentication) made by boto3's
generate_presigned_url and used by a plain HTTP client (requests): GET,
PUT, HEAD, DELETE; an expired URL is 403 AccessDenied; an expiry beyond
seven days is refused."""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET

import requests

from s3util import expect_error


def error_code(resp: requests.Response) -> str:
    try:
        return ET.fromstring(resp.content).findtext("Code") or ""
    except ET.ParseError:
        return ""


def test_presigned_put_get_head_delete(s3, bucket):
    data = os.urandom(10_000)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p/obj"}, ExpiresIn=300)
    put = requests.put(put_url, data=data, timeout=30)
    assert put.status_code == 200, put.text
    assert s3.get_object(Bucket=bucket, Key="p/obj")["Body"].read() == data

    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p/obj"}, ExpiresIn=300)
    got = requests.get(get_url, timeout=30)
    assert got.status_code == 200
    assert got.content == data
    assert got.headers["ETag"] == put.headers["ETag"]

    head_url = s3.generate_presigned_url("head_object", Params={"Bucket": bucket, "Key": "p/obj"}, ExpiresIn=300)
    head = requests.head(head_url, timeout=30)
    assert head.status_code == 200
    assert int(head.headers["Content-Length"]) == len(data)

    del_url = s3.generate_presigned_url("delete_object", Params={"Bucket": bucket, "Key": "p/obj"}, ExpiresIn=300)
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


def test_expired_url_is_access_denied(s3, bucket):
    s3.put_object(Bucket=bucket, Key="e", Body=b"e")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "e"}, ExpiresIn=1)
    time.sleep(2.5)
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 403
    assert error_code(resp) == "AccessDenied"


def test_expiry_beyond_seven_days_is_refused(s3, bucket):
    s3.put_object(Bucket=bucket, Key="long", Body=b"x")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "long"}, ExpiresIn=604801)
    resp = requests.get(url, timeout=30)
    assert resp.status_code in (400, 403), resp.text
    assert error_code(resp) in ("AuthorizationQueryParametersError", "AccessDenied"), resp.text
    ok = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "long"}, ExpiresIn=604800)
    assert requests.get(ok, timeout=30).status_code == 200
