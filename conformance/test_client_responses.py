"""Responses real clients trip on (issue 15), each as S3 answers it:
GetBucketVersioning of an unversioned bucket, GetObjectAttributes' bare
ETag, x-amz-checksum-type wherever a checksum is returned, the `-N` of
multipart SHA-1/SHA-256 composite checksums, x-amz-tagging-count on GET and
HEAD, RequestId/HostId in error bodies, an empty continuation token,
exactly which ListObjects / ListObjectsV2 fields encoding-type=url
encodes, Content-Encoding as sent (less aws-chunked), and presigned-URL
expiry errors. (InvalidTag past 10 tags is in test_tagging.py.)"""

from __future__ import annotations

import base64
import hashlib
import os
import time
import xml.etree.ElementTree as ET

import pytest
import requests
from botocore.config import Config

from s3util import capture_raw_responses, expect_error, force_trailer_checksums, md5_hex

MIB = 1024 * 1024
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def headers_of(resp: dict) -> dict:
    return resp["ResponseMetadata"]["HTTPHeaders"]


# --- GetBucketVersioning -------------------------------------------------------


def test_unversioned_bucket_answers_an_empty_versioning_configuration(client_factory, bucket):
    client = client_factory()
    raw = capture_raw_responses(client, "GetBucketVersioning")
    got = client.get_bucket_versioning(Bucket=bucket)
    assert "Status" not in got and "MFADelete" not in got
    root = ET.fromstring(raw[-1])
    assert root.tag == f"{NS}VersioningConfiguration"
    assert list(root) == []


def test_bucket_versioning_of_a_missing_bucket_is_no_such_bucket(s3, bucket_name):
    expect_error("NoSuchBucket", 404, s3.get_bucket_versioning, Bucket=bucket_name)


def test_enabling_versioning_stays_not_implemented(s3, bucket):
    expect_error(
        "NotImplemented", 501, s3.put_bucket_versioning, Bucket=bucket,
        VersioningConfiguration={"Status": "Enabled"},
    )
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)


# --- GetObjectAttributes ETag ---------------------------------------------------


def test_object_attributes_etag_is_bare(client_factory, bucket):
    client = client_factory()
    client.put_object(Bucket=bucket, Key="k", Body=b"hello")
    raw = capture_raw_responses(client, "GetObjectAttributes")
    got = client.get_object_attributes(Bucket=bucket, Key="k", ObjectAttributes=["ETag", "ObjectSize"])
    assert got["ETag"] == md5_hex(b"hello")
    assert ET.fromstring(raw[-1]).find(f"{NS}ETag").text == md5_hex(b"hello")
    # Everywhere else the ETag stays quoted.
    assert client.head_object(Bucket=bucket, Key="k")["ETag"] == f'"{md5_hex(b"hello")}"'


# --- checksum types and composite checksums -------------------------------------


def sha_b64(name: str, data: bytes) -> str:
    return base64.b64encode(hashlib.new(name, data).digest()).decode()


@pytest.mark.parametrize("algorithm", ["CRC32", "SHA256"])
def test_put_get_head_say_the_checksum_type(s3, bucket, algorithm):
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"payload", ChecksumAlgorithm=algorithm)
    assert headers_of(put)["x-amz-checksum-type"] == "FULL_OBJECT"
    assert put["ChecksumType"] == "FULL_OBJECT"
    for read in (s3.get_object, s3.head_object):
        got = read(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
        assert headers_of(got)["x-amz-checksum-type"] == "FULL_OBJECT"
        assert got[f"Checksum{algorithm}"] == put[f"Checksum{algorithm}"]
    attrs = s3.get_object_attributes(Bucket=bucket, Key="k", ObjectAttributes=["Checksum"])
    assert attrs["Checksum"]["ChecksumType"] == "FULL_OBJECT"


def upload_in_parts(s3, bucket, key, parts, algorithm):
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm)["UploadId"]
    listed = []
    for n, data in enumerate(parts, start=1):
        r = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=data, ChecksumAlgorithm=algorithm
        )
        listed.append({"PartNumber": n, "ETag": r["ETag"], f"Checksum{algorithm}": r[f"Checksum{algorithm}"]})
    return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed})


@pytest.mark.parametrize("algorithm", ["SHA1", "SHA256"])
def test_multipart_sha_checksums_are_composite_with_part_count(s3, bucket, algorithm):
    parts = [os.urandom(5 * MIB), os.urandom(4321)]
    name = algorithm.lower()
    raw = b"".join(hashlib.new(name, p).digest() for p in parts)
    bare = sha_b64(name, raw)
    done = upload_in_parts(s3, bucket, "mp", parts, algorithm)
    assert done[f"Checksum{algorithm}"] == f"{bare}-2"
    assert done["ChecksumType"] == "COMPOSITE"
    for read in (s3.get_object, s3.head_object):
        got = read(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")
        assert got[f"Checksum{algorithm}"] == f"{bare}-2"
        assert headers_of(got)["x-amz-checksum-type"] == "COMPOSITE"
    # GetObjectAttributes gives the value without its -N, and the type.
    attrs = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["Checksum"])
    assert attrs["Checksum"] == {f"Checksum{algorithm}": bare, "ChecksumType": "COMPOSITE"}


# --- tagging --------------------------------------------------------------------


def test_get_and_head_of_a_tagged_object_carry_the_tag_count(s3, bucket):
    s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="a=1&b=2&c=3")
    assert headers_of(s3.get_object(Bucket=bucket, Key="t"))["x-amz-tagging-count"] == "3"
    assert headers_of(s3.head_object(Bucket=bucket, Key="t"))["x-amz-tagging-count"] == "3"
    s3.put_object(Bucket=bucket, Key="u", Body=b"x")
    assert "x-amz-tagging-count" not in headers_of(s3.head_object(Bucket=bucket, Key="u"))


# --- error documents ------------------------------------------------------------


def assert_ids_in_body(resp: requests.Response) -> None:
    root = ET.fromstring(resp.content)
    assert root.tag == "Error"
    assert root.find("RequestId").text == resp.headers["x-amz-request-id"]
    assert root.find("HostId").text == resp.headers["x-amz-id-2"]
    assert root.find("HostId").text


def test_error_bodies_carry_request_and_host_ids(server, client_factory, bucket):
    # Raised by a handler (NoSuchKey) ...
    client = client_factory()
    seen: list = []
    client.meta.events.register("after-call.s3.GetObject", lambda http_response, **_: seen.append(http_response))
    expect_error("NoSuchKey", 404, client.get_object, Bucket=bucket, Key="missing")
    assert_ids_in_body(seen[-1])
    # ... by s3s itself (a wrong signature) and by the access check (anonymous).
    wrong = client_factory(aws_secret_access_key="x" * 40)
    seen.clear()
    wrong.meta.events.register("after-call.s3.GetObject", lambda http_response, **_: seen.append(http_response))
    expect_error("SignatureDoesNotMatch", 403, wrong.get_object, Bucket=bucket, Key="missing")
    assert_ids_in_body(seen[-1])
    anonymous = requests.get(f"{server.endpoint}/{bucket}/missing", timeout=30)
    assert anonymous.status_code == 403
    assert_ids_in_body(anonymous)


def test_botocore_reads_the_ids(s3, bucket):
    response = expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="missing")
    meta = response["ResponseMetadata"]
    assert meta["RequestId"] == meta["HTTPHeaders"]["x-amz-request-id"]
    assert meta["HostId"] == meta["HTTPHeaders"]["x-amz-id-2"] != ""


# --- continuation token ---------------------------------------------------------


def test_empty_continuation_token_is_no_token(client_factory, bucket):
    client = client_factory()
    for k in ("a", "b", "c"):
        client.put_object(Bucket=bucket, Key=k, Body=b"x")
    raw = capture_raw_responses(client, "ListObjectsV2")
    got = client.list_objects_v2(Bucket=bucket, ContinuationToken="")
    assert [o["Key"] for o in got["Contents"]] == ["a", "b", "c"]
    assert ET.fromstring(raw[-1]).find(f"{NS}ContinuationToken") is None
    page = client.list_objects_v2(Bucket=bucket, ContinuationToken="", MaxKeys=2)
    rest = client.list_objects_v2(Bucket=bucket, ContinuationToken=page["NextContinuationToken"])
    assert [o["Key"] for o in rest["Contents"]] == ["c"]


# --- encoding-type=url, field by field ------------------------------------------
#
# S3 encodes under encoding-type=url: ListObjectsV2 Key, CommonPrefixes,
# Prefix, Delimiter, StartAfter; ListObjects (v1) Key, CommonPrefixes,
# Delimiter, Marker, NextMarker, and not its top-level Prefix. A space is
# "+", a "+" is "%2B", "/" stays. boto3 asks for the encoding and decodes
# exactly those fields.


def listing(client_factory, operation: str, **params):
    """(parsed boto3 response, raw XML root) of one listing."""
    client = client_factory()
    raw = capture_raw_responses(client, operation)
    method = {"ListObjects": client.list_objects, "ListObjectsV2": client.list_objects_v2}[operation]
    parsed = method(**params)
    return parsed, ET.fromstring(raw[-1])


@pytest.fixture
def odd_keys(s3, bucket) -> str:
    for key in ("a b/one", "a b/two+2", "c|d", "k\nline", "n 1/x", "n 2/x"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    return bucket


def top(root, field: str) -> str | None:
    node = root.find(f"{NS}{field}")
    return None if node is None else (node.text or "")


V1_CASES = {
    "Key": (dict(Prefix="a b/"), lambda r: [k.text for k in r.iter(f"{NS}Key")], ["a+b/one", "a+b/two%2B2"],
            lambda p: [o["Key"] for o in p["Contents"]], ["a b/one", "a b/two+2"]),
    "CommonPrefixes": (dict(Delimiter="/"), lambda r: [c.find(f"{NS}Prefix").text for c in r.iter(f"{NS}CommonPrefixes")],
                       ["a+b/", "n+1/", "n+2/"], lambda p: [c["Prefix"] for c in p["CommonPrefixes"]],
                       ["a b/", "n 1/", "n 2/"]),
    "Delimiter": (dict(Delimiter="|"), lambda r: top(r, "Delimiter"), "%7C", lambda p: p["Delimiter"], "|"),
    "Marker": (dict(Marker="a b/one"), lambda r: top(r, "Marker"), "a+b/one", lambda p: p["Marker"], "a b/one"),
    "NextMarker": (dict(Delimiter="/", MaxKeys=1), lambda r: top(r, "NextMarker"), "a+b/",
                   lambda p: p["NextMarker"], "a b/"),
}


@pytest.mark.parametrize("field", sorted(V1_CASES))
def test_list_objects_v1_encodes(client_factory, odd_keys, field):
    params, raw_of, raw_want, parsed_of, parsed_want = V1_CASES[field]
    parsed, root = listing(client_factory, "ListObjects", Bucket=odd_keys, **params)
    assert top(root, "EncodingType") == "url"
    assert raw_of(root) == raw_want
    assert parsed_of(parsed) == parsed_want


def test_list_objects_v1_does_not_encode_its_prefix(client_factory, odd_keys):
    parsed, root = listing(client_factory, "ListObjects", Bucket=odd_keys, Prefix="\n")
    assert top(root, "Prefix") == "\n"
    assert parsed["Prefix"] == "\n"
    parsed, root = listing(client_factory, "ListObjects", Bucket=odd_keys, Prefix="k\n")
    assert top(root, "Prefix") == "k\n"
    assert [o["Key"] for o in parsed["Contents"]] == ["k\nline"]
    parsed, _ = listing(client_factory, "ListObjects", Bucket=odd_keys, Prefix="a b/")
    assert parsed["Prefix"] == "a b/"


V2_CASES = {
    "Key": V1_CASES["Key"],
    "CommonPrefixes": V1_CASES["CommonPrefixes"],
    "Delimiter": V1_CASES["Delimiter"],
    "Prefix": (dict(Prefix="k\n"), lambda r: top(r, "Prefix"), "k%0A", lambda p: p["Prefix"], "k\n"),
    "StartAfter": (dict(StartAfter="n 1/x"), lambda r: top(r, "StartAfter"), "n+1/x",
                   lambda p: p["StartAfter"], "n 1/x"),
}


@pytest.mark.parametrize("field", sorted(V2_CASES))
def test_list_objects_v2_encodes(client_factory, odd_keys, field):
    params, raw_of, raw_want, parsed_of, parsed_want = V2_CASES[field]
    parsed, root = listing(client_factory, "ListObjectsV2", Bucket=odd_keys, **params)
    assert top(root, "EncodingType") == "url"
    assert raw_of(root) == raw_want
    assert parsed_of(parsed) == parsed_want


def test_list_objects_v2_prefix_newline_round_trips(s3, odd_keys):
    got = s3.list_objects_v2(Bucket=odd_keys, Prefix="\n")
    assert got["Prefix"] == "\n"


def test_continuation_token_is_not_encoded(client_factory, odd_keys):
    parsed, root = listing(client_factory, "ListObjectsV2", Bucket=odd_keys, MaxKeys=1)
    token = parsed["NextContinuationToken"]
    assert top(root, "NextContinuationToken") == token
    parsed, root = listing(client_factory, "ListObjectsV2", Bucket=odd_keys, ContinuationToken=token)
    assert top(root, "ContinuationToken") == token


# --- Content-Encoding -----------------------------------------------------------


@pytest.mark.parametrize(
    "sent, stored",
    [("deflate, gzip", "deflate, gzip"), ("gzip, aws-chunked", "gzip"), ("aws-chunked", None), ("gzip", "gzip")],
)
def test_content_encoding_is_kept_as_sent_less_aws_chunked(s3, bucket, sent, stored):
    s3.put_object(Bucket=bucket, Key="e", Body=b"x", ContentEncoding=sent)
    for read in (s3.head_object, s3.get_object):
        assert read(Bucket=bucket, Key="e").get("ContentEncoding") == stored


def test_content_encoding_of_an_aws_chunked_upload(client_factory, bucket):
    client = client_factory()
    force_trailer_checksums(client)
    sent: list = []
    client.meta.events.register("before-send.s3.PutObject", lambda request, **_: sent.append(request.headers))
    client.put_object(Bucket=bucket, Key="c", Body=b"chunked body", ContentEncoding="gzip")
    assert "aws-chunked" in sent[-1]["Content-Encoding"].decode()
    assert client.head_object(Bucket=bucket, Key="c")["ContentEncoding"] == "gzip"


# --- presigned URLs -------------------------------------------------------------


@pytest.fixture
def v4(client_factory):
    return client_factory(config=Config(signature_version="s3v4"))


def test_expired_presigned_urls_are_access_denied_request_has_expired(s3, v4, bucket):
    s3.put_object(Bucket=bucket, Key="e", Body=b"e")
    urls = [
        ("GET", v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "e"}, ExpiresIn=1)),
        ("PUT", v4.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "e"}, ExpiresIn=1)),
        ("GET", s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "e"}, ExpiresIn=1)),
    ]
    time.sleep(2.5)
    for method, url in urls:
        resp = requests.request(method, url, data=b"new" if method == "PUT" else None, timeout=30)
        assert resp.status_code == 403, (method, url, resp.text)
        root = ET.fromstring(resp.content)
        assert (root.find("Code").text, root.find("Message").text) == ("AccessDenied", "Request has expired")
    assert s3.get_object(Bucket=bucket, Key="e")["Body"].read() == b"e"


@pytest.mark.parametrize(
    "expires, status, code, message",
    [
        # What s3-tests' "authenticated_expired" sends (ExpiresIn=-1000): a
        # URL whose validity ended before it was signed is expired.
        ("-1000", 403, "AccessDenied", "Request has expired"),
        ("soon", 400, "AuthorizationQueryParametersError", "X-Amz-Expires should be a number"),
    ],
)
def test_presigned_expires_that_is_no_duration_is_refused(v4, s3, bucket, expires, status, code, message):
    s3.put_object(Bucket=bucket, Key="e", Body=b"e")
    url = v4.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "e"}, ExpiresIn=60)
    assert "X-Amz-Expires=60" in url
    resp = requests.put(url.replace("X-Amz-Expires=60", f"X-Amz-Expires={expires}"), data=b"new", timeout=30)
    assert resp.status_code == status, resp.text
    root = ET.fromstring(resp.content)
    assert (root.find("Code").text, root.find("Message").text) == (code, message)
    assert root.find("RequestId").text == resp.headers["x-amz-request-id"]
    assert s3.get_object(Bucket=bucket, Key="e")["Body"].read() == b"e"
