"""CopyObject: metadata and tagging directives, copy-source conditions,
self-copy, cross-bucket copies and encoded source keys."""

from __future__ import annotations

import datetime as dt

import pytest

from s3util import expect_error, quoted_md5, random_bytes, tags_dict

SRC_HEADERS = dict(
    ContentType="text/markdown",
    ContentLanguage="de",
    CacheControl="max-age=60",
    ContentDisposition="inline",
)
SRC_META = {"origin": "source", "stage": "raw"}


@pytest.fixture
def src(s3, bucket):
    body = b"# source object\n" * 64
    s3.put_object(Bucket=bucket, Key="src/object.md", Body=body, Metadata=SRC_META, Tagging="team=data&tier=hot", **SRC_HEADERS)
    return bucket, "src/object.md", body


def test_copy_default_directive_copies_everything(s3, src):
    bucket, key, body = src
    resp = s3.copy_object(Bucket=bucket, Key="dst/copy.md", CopySource={"Bucket": bucket, "Key": key})
    assert resp["CopyObjectResult"]["ETag"] == quoted_md5(body)
    assert isinstance(resp["CopyObjectResult"]["LastModified"], dt.datetime)

    got = s3.get_object(Bucket=bucket, Key="dst/copy.md")
    assert got["Body"].read() == body
    assert got["Metadata"] == SRC_META
    assert got["ContentType"] == "text/markdown"
    assert got["ContentLanguage"] == "de"
    assert got["CacheControl"] == "max-age=60"
    assert got["ContentDisposition"] == "inline"
    assert got["ETag"] == quoted_md5(body)
    tags = s3.get_object_tagging(Bucket=bucket, Key="dst/copy.md")["TagSet"]
    assert tags_dict(tags) == {"team": "data", "tier": "hot"}


def test_copy_explicit_copy_directive_ignores_request_metadata(s3, src):
    bucket, key, _ = src
    s3.copy_object(
        Bucket=bucket,
        Key="dst/explicit",
        CopySource={"Bucket": bucket, "Key": key},
        MetadataDirective="COPY",
        Metadata={"ignored": "yes"},
    )
    assert s3.head_object(Bucket=bucket, Key="dst/explicit")["Metadata"] == SRC_META


def test_copy_replace_directive(s3, src):
    bucket, key, body = src
    s3.copy_object(
        Bucket=bucket,
        Key="dst/replaced",
        CopySource={"Bucket": bucket, "Key": key},
        MetadataDirective="REPLACE",
        Metadata={"fresh": "1"},
        ContentType="application/json",
    )
    head = s3.head_object(Bucket=bucket, Key="dst/replaced")
    assert head["Metadata"] == {"fresh": "1"}
    assert head["ContentType"] == "application/json"
    assert head.get("ContentLanguage") is None
    assert head.get("CacheControl") is None
    assert head["ETag"] == quoted_md5(body)
    # The source is untouched.
    assert s3.head_object(Bucket=bucket, Key=key)["Metadata"] == SRC_META


def test_copy_tagging_directive_replace(s3, src):
    bucket, key, _ = src
    s3.copy_object(
        Bucket=bucket,
        Key="dst/retagged",
        CopySource={"Bucket": bucket, "Key": key},
        TaggingDirective="REPLACE",
        Tagging="x=1&y=two%20words",
    )
    tags = s3.get_object_tagging(Bucket=bucket, Key="dst/retagged")["TagSet"]
    assert tags_dict(tags) == {"x": "1", "y": "two words"}

    s3.copy_object(
        Bucket=bucket, Key="dst/untagged", CopySource={"Bucket": bucket, "Key": key}, TaggingDirective="REPLACE"
    )
    assert s3.get_object_tagging(Bucket=bucket, Key="dst/untagged")["TagSet"] == []

    s3.copy_object(
        Bucket=bucket, Key="dst/tagcopy", CopySource={"Bucket": bucket, "Key": key}, TaggingDirective="COPY"
    )
    tags = s3.get_object_tagging(Bucket=bucket, Key="dst/tagcopy")["TagSet"]
    assert tags_dict(tags) == {"team": "data", "tier": "hot"}


def test_copy_source_conditions(s3, src):
    bucket, key, body = src
    etag = quoted_md5(body)
    source = {"Bucket": bucket, "Key": key}
    expect_error(
        "PreconditionFailed", 412, s3.copy_object, Bucket=bucket, Key="dst/c1", CopySource=source,
        CopySourceIfMatch='"0123456789abcdef0123456789abcdef"',
    )
    expect_error(
        "PreconditionFailed", 412, s3.copy_object, Bucket=bucket, Key="dst/c2", CopySource=source,
        CopySourceIfNoneMatch=etag,
    )
    last_modified = s3.head_object(Bucket=bucket, Key=key)["LastModified"]
    expect_error(
        "PreconditionFailed", 412, s3.copy_object, Bucket=bucket, Key="dst/c3", CopySource=source,
        CopySourceIfUnmodifiedSince=last_modified - dt.timedelta(days=1),
    )
    for k in ("dst/c1", "dst/c2", "dst/c3"):
        expect_error("404", 404, s3.head_object, Bucket=bucket, Key=k)

    ok = s3.copy_object(Bucket=bucket, Key="dst/c4", CopySource=source, CopySourceIfMatch=etag)
    assert ok["CopyObjectResult"]["ETag"] == etag


def test_self_copy_without_changes_is_invalid(s3, src):
    bucket, key, _ = src
    expect_error("InvalidRequest", 400, s3.copy_object, Bucket=bucket, Key=key, CopySource={"Bucket": bucket, "Key": key})


def test_self_copy_with_replace_changes_metadata(s3, src):
    bucket, key, body = src
    s3.copy_object(
        Bucket=bucket,
        Key=key,
        CopySource={"Bucket": bucket, "Key": key},
        MetadataDirective="REPLACE",
        Metadata={"stage": "cooked"},
        ContentType="text/plain",
    )
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Metadata"] == {"stage": "cooked"}
    assert got["ContentType"] == "text/plain"
    assert got["Body"].read() == body
    assert got["ETag"] == quoted_md5(body)


def test_copy_across_buckets_with_encoded_key(s3, bucket, client_factory):
    other = f"{bucket[:50]}-dst"
    s3.create_bucket(Bucket=other)
    key = "dir with space/ünïcødé+plus%percent?.bin"
    body = random_bytes(6 * 1024 * 1024 + 1)
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    resp = s3.copy_object(Bucket=other, Key="copied/" + key, CopySource={"Bucket": bucket, "Key": key})
    assert resp["CopyObjectResult"]["ETag"] == quoted_md5(body)
    assert s3.get_object(Bucket=other, Key="copied/" + key)["Body"].read() == body
    # String form of CopySource ("bucket/key", URL-encoded by boto3).
    s3.copy_object(Bucket=other, Key="second", CopySource=f"{bucket}/{key}")
    assert s3.head_object(Bucket=other, Key="second")["ContentLength"] == len(body)


def test_copy_missing_source(s3, bucket):
    expect_error("NoSuchKey", 404, s3.copy_object, Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "nope"})
    expect_error(
        "NoSuchBucket", 404, s3.copy_object, Bucket=bucket, Key="dst",
        CopySource={"Bucket": f"{bucket[:50]}-missing", "Key": "nope"},
    )
