"""Bucket operations: CreateBucket, HeadBucket, ListBuckets,
GetBucketLocation, DeleteBucket and their errors."""

from __future__ import annotations

import datetime as dt

import pytest
from botocore.exceptions import ClientError

from s3util import expect_error


def test_create_head_list_locate_delete(s3, bucket_name):
    created = s3.create_bucket(Bucket=bucket_name)
    assert created["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert created.get("Location") == f"/{bucket_name}"

    head = s3.head_bucket(Bucket=bucket_name)
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 200

    listed = s3.list_buckets()
    by_name = {b["Name"]: b for b in listed["Buckets"]}
    assert bucket_name in by_name
    created_at = by_name[bucket_name]["CreationDate"]
    now = dt.datetime.now(dt.timezone.utc)
    assert abs((now - created_at).total_seconds()) < 600, created_at

    # us-east-1 is reported as an empty (null) LocationConstraint.
    location = s3.get_bucket_location(Bucket=bucket_name)
    assert location["LocationConstraint"] is None

    deleted = s3.delete_bucket(Bucket=bucket_name)
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204

    expect_error("404", 404, s3.head_bucket, Bucket=bucket_name)
    assert bucket_name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_list_buckets_sorted_and_complete(s3, bucket_name):
    names = [f"{bucket_name[:50]}-{i}" for i in (3, 1, 2)]
    for name in names:
        s3.create_bucket(Bucket=name)
    listed = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert set(names) <= set(listed)
    assert listed == sorted(listed), "ListBuckets returns buckets in name order"


def test_create_existing_bucket_of_same_owner(s3, bucket):
    # In us-east-1 S3 answers 200 for a re-create by the owner (legacy
    # behaviour); elsewhere 409 BucketAlreadyOwnedByYou. Either is S3; any
    # other answer (BucketAlreadyExists, 500) is not.
    try:
        resp = s3.create_bucket(Bucket=bucket)
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 200
    except ClientError as e:
        err = e.response
        assert (err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]) == (
            "BucketAlreadyOwnedByYou",
            409,
        )
    s3.head_bucket(Bucket=bucket)


def test_delete_non_empty_bucket(s3, bucket):
    s3.put_object(Bucket=bucket, Key="keep/me", Body=b"x")
    expect_error("BucketNotEmpty", 409, s3.delete_bucket, Bucket=bucket)
    # Nothing was removed by the refused delete.
    assert s3.get_object(Bucket=bucket, Key="keep/me")["Body"].read() == b"x"
    s3.delete_object(Bucket=bucket, Key="keep/me")
    assert s3.delete_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 204
    expect_error("404", 404, s3.head_bucket, Bucket=bucket)


@pytest.mark.parametrize(
    "name",
    [
        "UPPER",  # uppercase letters
        "MixedCase-bucket",
        "a",  # shorter than 3
        "ab",
        "a" * 64,  # longer than 63
        "-bad-",  # must begin and end with a letter or digit
        "bad-",
        "192.168.1.1",  # formatted as an IP address
        "double..dot",  # adjacent periods
        "under_score",  # underscores are not allowed
    ],
)
def test_invalid_bucket_name(s3, name):
    expect_error("InvalidBucketName", 400, s3.create_bucket, Bucket=name)
    assert name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


@pytest.mark.parametrize("name", ["abc", "a" * 63, "my.dotted.bucket-1", "0-starts-with-digit"])
def test_valid_bucket_name_edges(s3, name):
    # Fixed names can collide with an earlier run against an external
    # endpoint; a same-owner re-create is fine either way.
    try:
        s3.create_bucket(Bucket=name)
    except ClientError as e:
        assert e.response["Error"]["Code"] == "BucketAlreadyOwnedByYou"
    s3.head_bucket(Bucket=name)


def test_no_such_bucket(s3, bucket_name):
    missing = bucket_name
    expect_error("404", 404, s3.head_bucket, Bucket=missing)
    expect_error("NoSuchBucket", 404, s3.get_bucket_location, Bucket=missing)
    expect_error("NoSuchBucket", 404, s3.delete_bucket, Bucket=missing)
    expect_error("NoSuchBucket", 404, s3.list_objects_v2, Bucket=missing)
    expect_error("NoSuchBucket", 404, s3.list_objects, Bucket=missing)
    expect_error("NoSuchBucket", 404, s3.put_object, Bucket=missing, Key="k", Body=b"x")
    expect_error("NoSuchBucket", 404, s3.get_object, Bucket=missing, Key="k")
    expect_error("404", 404, s3.head_object, Bucket=missing, Key="k")
    expect_error("NoSuchBucket", 404, s3.delete_object, Bucket=missing, Key="k")
    expect_error("NoSuchBucket", 404, s3.get_bucket_tagging, Bucket=missing)
