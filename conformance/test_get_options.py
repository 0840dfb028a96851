"""GetObject/HeadObject options: Range, conditional requests (If-Match,
If-None-Match, If-Modified-Since, If-Unmodified-Since) and response-*
header overrides."""

from __future__ import annotations

import datetime as dt
import email.utils

import pytest

from s3util import expect_error, quoted_md5

BODY = bytes(range(256)) * 4  # 1024 bytes, every offset distinguishable
SIZE = len(BODY)


@pytest.fixture
def obj(s3, bucket):
    s3.put_object(Bucket=bucket, Key="ranged", Body=BODY, ContentType="application/octet-stream")
    head = s3.head_object(Bucket=bucket, Key="ranged")
    return bucket, "ranged", head


@pytest.mark.parametrize(
    "header,start,end",
    [
        ("bytes=0-9", 0, 9),
        ("bytes=-5", SIZE - 5, SIZE - 1),  # suffix: the last 5 bytes
        ("bytes=10-", 10, SIZE - 1),  # open-ended
        ("bytes=1000-5000", 1000, SIZE - 1),  # end past the size is clamped
        ("bytes=1023-1023", 1023, 1023),  # the last byte alone
        ("bytes=-5000", 0, SIZE - 1),  # suffix longer than the object
    ],
)
def test_range_get(s3, obj, header, start, end):
    bucket, key, _ = obj
    got = s3.get_object(Bucket=bucket, Key=key, Range=header)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == f"bytes {start}-{end}/{SIZE}"
    assert got["ContentLength"] == end - start + 1
    assert got["Body"].read() == BODY[start : end + 1]
    assert got["ETag"] == quoted_md5(BODY)  # the whole object's ETag


def test_range_head(s3, obj):
    bucket, key, _ = obj
    head = s3.head_object(Bucket=bucket, Key=key, Range="bytes=0-99")
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert head["ContentLength"] == 100
    assert head["ContentRange"] == f"bytes 0-99/{SIZE}"


@pytest.mark.parametrize("header", ["bytes=1024-", "bytes=5000-6000"])
def test_range_not_satisfiable(s3, obj, header):
    bucket, key, _ = obj
    expect_error("InvalidRange", 416, s3.get_object, Bucket=bucket, Key=key, Range=header)


def test_range_on_empty_object_not_satisfiable(s3, bucket):
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    expect_error("InvalidRange", 416, s3.get_object, Bucket=bucket, Key="empty", Range="bytes=0-0")


def test_if_match(s3, obj):
    bucket, key, head = obj
    etag = head["ETag"]
    assert s3.get_object(Bucket=bucket, Key=key, IfMatch=etag)["Body"].read() == BODY
    expect_error("PreconditionFailed", 412, s3.get_object, Bucket=bucket, Key=key, IfMatch='"0123456789abcdef0123456789abcdef"')
    expect_error("412", 412, s3.head_object, Bucket=bucket, Key=key, IfMatch='"0123456789abcdef0123456789abcdef"')


def test_if_none_match(s3, obj):
    bucket, key, head = obj
    etag = head["ETag"]
    expect_error("304", 304, s3.get_object, Bucket=bucket, Key=key, IfNoneMatch=etag)
    expect_error("304", 304, s3.head_object, Bucket=bucket, Key=key, IfNoneMatch=etag)
    got = s3.get_object(Bucket=bucket, Key=key, IfNoneMatch='"0123456789abcdef0123456789abcdef"')
    assert got["Body"].read() == BODY


def test_if_modified_since(s3, obj):
    bucket, key, head = obj
    last_modified = head["LastModified"]
    # Not modified since its own Last-Modified (second granularity) -> 304.
    expect_error("304", 304, s3.get_object, Bucket=bucket, Key=key, IfModifiedSince=last_modified)
    expect_error("304", 304, s3.head_object, Bucket=bucket, Key=key, IfModifiedSince=last_modified)
    earlier = last_modified - dt.timedelta(days=1)
    assert s3.get_object(Bucket=bucket, Key=key, IfModifiedSince=earlier)["Body"].read() == BODY


def test_if_unmodified_since(s3, obj):
    bucket, key, head = obj
    last_modified = head["LastModified"]
    earlier = last_modified - dt.timedelta(days=1)
    expect_error("PreconditionFailed", 412, s3.get_object, Bucket=bucket, Key=key, IfUnmodifiedSince=earlier)
    expect_error("412", 412, s3.head_object, Bucket=bucket, Key=key, IfUnmodifiedSince=earlier)
    assert s3.get_object(Bucket=bucket, Key=key, IfUnmodifiedSince=last_modified)["Body"].read() == BODY


def test_condition_precedence(s3, obj):
    # S3 (RFC 7232): If-Match true wins over a false If-Unmodified-Since, and
    # If-None-Match false (-> 304) wins over a true If-Modified-Since.
    bucket, key, head = obj
    etag, last_modified = head["ETag"], head["LastModified"]
    earlier = last_modified - dt.timedelta(days=1)
    got = s3.get_object(Bucket=bucket, Key=key, IfMatch=etag, IfUnmodifiedSince=earlier)
    assert got["Body"].read() == BODY
    expect_error("304", 304, s3.get_object, Bucket=bucket, Key=key, IfNoneMatch=etag, IfModifiedSince=earlier)


def test_conditional_on_missing_key(s3, bucket):
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="nope", IfMatch='"abc"')


def test_response_header_overrides(s3, obj):
    bucket, key, _ = obj
    expires = email.utils.format_datetime(dt.datetime(2030, 5, 6, 7, 8, 9, tzinfo=dt.timezone.utc), usegmt=True)
    got = s3.get_object(
        Bucket=bucket,
        Key=key,
        ResponseContentType="text/csv",
        ResponseContentLanguage="fr-CA",
        ResponseCacheControl="no-store",
        ResponseContentDisposition='inline; filename="x.csv"',
        ResponseContentEncoding="identity",
        ResponseExpires=dt.datetime(2030, 5, 6, 7, 8, 9, tzinfo=dt.timezone.utc),
    )
    assert got["ContentType"] == "text/csv"
    assert got["ContentLanguage"] == "fr-CA"
    assert got["CacheControl"] == "no-store"
    assert got["ContentDisposition"] == 'inline; filename="x.csv"'
    assert got["ContentEncoding"] == "identity"
    assert got.get("ExpiresString") == expires
    assert got["Body"].read() == BODY
    # Overrides do not change what is stored.
    assert s3.head_object(Bucket=bucket, Key=key)["ContentType"] == "application/octet-stream"
