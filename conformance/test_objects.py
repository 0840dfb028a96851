"""Object basics: PutObject/GetObject/HeadObject headers and metadata, ETags,
Content-MD5, flexible checksums (header and aws-chunked trailer), key
encoding, DeleteObject and DeleteObjects."""

from __future__ import annotations

import datetime as dt
import email.utils
import gzip

import pytest
from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum

from s3util import (
    capture_request_headers,
    crc32_b64,
    expect_error,
    force_trailer_checksums,
    md5_b64,
    md5_hex,
    quoted_md5,
    random_bytes,
)

EXPIRES = dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
EXPIRES_HTTP = email.utils.format_datetime(EXPIRES, usegmt=True)  # 'Thu, 02 Jan 2031 03:04:05 GMT'

STANDARD_HEADERS = dict(
    ContentType="text/plain; charset=utf-8",
    ContentEncoding="gzip",
    ContentDisposition='attachment; filename="report.txt"',
    ContentLanguage="en-US",
    CacheControl="max-age=3600, must-revalidate",
    Expires=EXPIRES,
)
METADATA = {"color": "blue", "with-dash": "Value With Spaces", "n": "42"}


def _assert_standard_headers(resp, body: bytes):
    assert resp["ContentType"] == STANDARD_HEADERS["ContentType"]
    assert resp["ContentEncoding"] == "gzip"
    assert resp["ContentDisposition"] == STANDARD_HEADERS["ContentDisposition"]
    assert resp["ContentLanguage"] == "en-US"
    assert resp["CacheControl"] == STANDARD_HEADERS["CacheControl"]
    assert resp.get("ExpiresString") == EXPIRES_HTTP
    assert resp["Metadata"] == METADATA
    assert resp["ContentLength"] == len(body)
    assert resp["ETag"] == quoted_md5(body)
    age = dt.datetime.now(dt.timezone.utc) - resp["LastModified"]
    assert abs(age.total_seconds()) < 600, resp["LastModified"]


def test_put_get_head_headers_and_metadata(s3, bucket):
    body = gzip.compress(b"hello laneway\n" * 100)
    put = s3.put_object(Bucket=bucket, Key="doc.txt", Body=body, Metadata=METADATA, **STANDARD_HEADERS)
    assert put["ETag"] == quoted_md5(body)

    head = s3.head_object(Bucket=bucket, Key="doc.txt")
    _assert_standard_headers(head, body)
    assert head["AcceptRanges"] == "bytes"

    got = s3.get_object(Bucket=bucket, Key="doc.txt")
    _assert_standard_headers(got, body)
    assert got["Body"].read() == body  # stored as sent, not decompressed


def test_user_metadata_keys_are_lowercased(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"MixedCase": "Keeps Value Case"})
    assert s3.head_object(Bucket=bucket, Key="k")["Metadata"] == {"mixedcase": "Keeps Value Case"}


def test_default_content_type(s3, bucket):
    s3.put_object(Bucket=bucket, Key="untyped", Body=b"data")
    assert s3.head_object(Bucket=bucket, Key="untyped")["ContentType"] == "binary/octet-stream"


def test_zero_byte_object(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert put["ETag"] == '"d41d8cd98f00b204e9800998ecf8427e"'
    got = s3.get_object(Bucket=bucket, Key="empty")
    assert got["ContentLength"] == 0
    assert got["Body"].read() == b""
    assert s3.head_object(Bucket=bucket, Key="empty")["ContentLength"] == 0


def test_overwrite_replaces_body_and_metadata(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"first", Metadata={"v": "1"}, ContentType="text/a")
    s3.put_object(Bucket=bucket, Key="k", Body=b"second!", Metadata={"w": "2"})
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == b"second!"
    assert got["Metadata"] == {"w": "2"}
    assert got["ContentType"] == "binary/octet-stream"
    assert got["ETag"] == quoted_md5(b"second!")


@pytest.mark.parametrize("size", [1, 1000, 64 * 1024 + 7, 1024 * 1024 + 3])
def test_etag_is_quoted_md5(s3, bucket, size):
    body = random_bytes(size)
    put = s3.put_object(Bucket=bucket, Key=f"obj-{size}", Body=body)
    assert put["ETag"] == quoted_md5(body)
    assert s3.head_object(Bucket=bucket, Key=f"obj-{size}")["ETag"] == quoted_md5(body)
    got = s3.get_object(Bucket=bucket, Key=f"obj-{size}")
    assert got["ETag"] == quoted_md5(body)
    assert got["Body"].read() == body


def test_content_md5_good(s3, bucket):
    body = b"checked by md5"
    put = s3.put_object(Bucket=bucket, Key="k", Body=body, ContentMD5=md5_b64(body))
    assert put["ETag"] == quoted_md5(body)


def test_content_md5_mismatch_is_bad_digest(s3, bucket):
    body = b"the real body"
    expect_error("BadDigest", 400, s3.put_object, Bucket=bucket, Key="k", Body=body, ContentMD5=md5_b64(b"another body"))
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="k")


def test_content_md5_malformed_is_invalid_digest(s3, bucket):
    expect_error("InvalidDigest", 400, s3.put_object, Bucket=bucket, Key="k", Body=b"x", ContentMD5="not-base64-md5")
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="k")


def test_default_crc32_checksum_header_round_trip(s3, bucket):
    # boto3's default: it computes a CRC32 and sends x-amz-checksum-crc32.
    seen = capture_request_headers(s3, "PutObject")
    body = random_bytes(300_000)
    put = s3.put_object(Bucket=bucket, Key="crc", Body=body)
    assert seen[-1].get("x-amz-checksum-crc32") == crc32_b64(body), "client sent no CRC32 header"
    assert put.get("ChecksumCRC32") == crc32_b64(body), "PutObject does not return x-amz-checksum-crc32"
    head = s3.head_object(Bucket=bucket, Key="crc", ChecksumMode="ENABLED")
    assert head.get("ChecksumCRC32") == crc32_b64(body)
    # GetObject: boto3 asks for the checksum and validates the body against it.
    got = s3.get_object(Bucket=bucket, Key="crc", ChecksumMode="ENABLED")
    assert got.get("ChecksumCRC32") == crc32_b64(body)
    assert got["Body"].read() == body


def test_crc32_mismatch_is_bad_digest(s3, bucket):
    body = b"body whose crc is not the one sent"
    expect_error("BadDigest", 400, s3.put_object, Bucket=bucket, Key="k", Body=body, ChecksumCRC32=crc32_b64(b"other"))
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="k")


@pytest.mark.parametrize("size", [0, 5, 70_000, 3 * 1024 * 1024 + 1])
def test_aws_chunked_trailer_upload(client_factory, bucket, size):
    client = client_factory()
    force_trailer_checksums(client)
    seen = capture_request_headers(client, "PutObject")
    body = random_bytes(size)
    put = client.put_object(Bucket=bucket, Key="chunked", Body=body, ContentType="application/x-test")
    sent = seen[-1]
    assert "aws-chunked" in sent.get("content-encoding", "")
    assert sent.get("x-amz-trailer") == "x-amz-checksum-crc32"
    assert sent.get("x-amz-content-sha256") == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    assert put["ETag"] == quoted_md5(body)

    got = client.get_object(Bucket=bucket, Key="chunked")
    assert got["Body"].read() == body
    assert got["ContentLength"] == size
    assert got["ContentType"] == "application/x-test"
    # aws-chunked is transport framing; it is not stored as the object's encoding.
    assert "aws-chunked" not in (got.get("ContentEncoding") or "")
    # S3 answers a checksummed PutObject with the checksum it verified.
    assert put.get("ChecksumCRC32") == crc32_b64(body)


def test_aws_chunked_trailer_bad_checksum(client_factory, s3, bucket):
    client = client_factory()
    force_trailer_checksums(client)

    class WrongCrc32(Crc32Checksum):
        def digest(self):
            return b"\xde\xad\xbe\xef"

    corrupted = []

    def corrupt_trailer(request, **_):
        # botocore builds the trailer from this class when the body is read.
        if isinstance(request.body, AwsChunkedWrapper):
            request.body._checksum_cls = WrongCrc32
            request.body._reset()
            corrupted.append(True)

    client.meta.events.register("before-send.s3.PutObject", corrupt_trailer)
    try:
        expect_error("BadDigest", 400, client.put_object, Bucket=bucket, Key="bad-trailer", Body=random_bytes(70_000))
    finally:
        assert corrupted, "test harness: the trailer was not corrupted"
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="bad-trailer")


def test_aws_chunked_trailer_keeps_real_content_encoding(client_factory, bucket):
    client = client_factory()
    force_trailer_checksums(client)
    body = gzip.compress(b"compressed " * 1000)
    client.put_object(Bucket=bucket, Key="gz", Body=body, ContentEncoding="gzip")
    head = client.head_object(Bucket=bucket, Key="gz")
    assert head["ContentEncoding"] == "gzip"
    assert client.get_object(Bucket=bucket, Key="gz")["Body"].read() == body


@pytest.mark.parametrize("mode", ["header", "trailer"])
def test_large_object_single_put(client_factory, bucket, mode):
    client = client_factory()
    if mode == "trailer":
        force_trailer_checksums(client)
    body = random_bytes(20 * 1024 * 1024 + 13)
    put = client.put_object(Bucket=bucket, Key="big.bin", Body=body)
    assert put["ETag"] == quoted_md5(body)
    head = client.head_object(Bucket=bucket, Key="big.bin")
    assert head["ContentLength"] == len(body)
    got = client.get_object(Bucket=bucket, Key="big.bin")
    data = got["Body"].read()
    assert len(data) == len(body)
    assert md5_hex(data) == md5_hex(body)
    assert data == body
    mid = 11 * 1024 * 1024 - 5
    part = client.get_object(Bucket=bucket, Key="big.bin", Range=f"bytes={mid}-{mid + 99_999}")["Body"].read()
    assert part == body[mid : mid + 100_000]


SPECIAL_KEYS = [
    "with space",
    "plus+sign",
    "percent%20literal",
    "question?mark",
    "hash#tag",
    "amp&and=eq",
    "tilde~star*",
    "quote'single\"double",
    "comma,semi;colon:at@dollar$",
    "brackets[]{}()",
    "caret^pipe|back\\slash",
    "lt<gt>amp&xml",
    "unicode/héllo wörld",
    "日本語/ファイル.txt",
    "emoji-🎉",
    "a//double//slash",
    "trailing/",
    "/leading-slash",
    "k" * 1024,
]


@pytest.mark.parametrize("key", SPECIAL_KEYS, ids=lambda k: k[:24])
def test_special_character_keys(s3, bucket, key):
    body = key.encode("utf-8")
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(body)
    listed = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in listed.get("Contents", [])] == [key]
    s3.delete_object(Bucket=bucket, Key=key)
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key=key)


def test_key_too_long(s3, bucket):
    expect_error("KeyTooLongError", 400, s3.put_object, Bucket=bucket, Key="k" * 1025, Body=b"x")


def test_no_such_key(s3, bucket):
    err = expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="missing/key")
    assert err["Error"].get("Key") in (None, "missing/key")
    expect_error("404", 404, s3.head_object, Bucket=bucket, Key="missing/key")


def test_delete_object_is_idempotent(s3, bucket):
    s3.put_object(Bucket=bucket, Key="gone", Body=b"x")
    first = s3.delete_object(Bucket=bucket, Key="gone")
    assert first["ResponseMetadata"]["HTTPStatusCode"] == 204
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="gone")
    again = s3.delete_object(Bucket=bucket, Key="gone")
    assert again["ResponseMetadata"]["HTTPStatusCode"] == 204
    never = s3.delete_object(Bucket=bucket, Key="never-existed")
    assert never["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_delete_objects(s3, bucket):
    keys = [f"d/{i}" for i in range(6)] + ["sp ace", "ünï"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    doomed = keys[:3] + ["sp ace", "ünï", "does/not/exist"]
    resp = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in doomed]})
    # A key that did not exist is reported as deleted, as S3 does.
    assert sorted(d["Key"] for d in resp.get("Deleted", [])) == sorted(doomed)
    assert not resp.get("Errors")
    remaining = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert remaining == ["d/3", "d/4", "d/5"]


def test_delete_objects_quiet(s3, bucket):
    for k in ("q1", "q2", "q3"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    resp = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "q1"}, {"Key": "q2"}], "Quiet": True})
    assert not resp.get("Deleted"), "quiet mode reports only errors"
    assert not resp.get("Errors")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["q3"]


def test_delete_objects_malformed_xml(s3, bucket):
    # An empty Delete list is MalformedXML in S3.
    expect_error("MalformedXML", 400, s3.delete_objects, Bucket=bucket, Delete={"Objects": []})
