"""Object tagging (Put/Get/DeleteObjectTagging, x-amz-tagging on PutObject,
limits) and bucket tagging (Put/Get/DeleteBucketTagging)."""

from __future__ import annotations

import pytest

from s3util import expect_error, tags_dict


def _tag_set(pairs: dict[str, str]) -> dict:
    return {"TagSet": [{"Key": k, "Value": v} for k, v in pairs.items()]}


def test_object_tagging_round_trip(s3, bucket):
    s3.put_object(Bucket=bucket, Key="t", Body=b"x")
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []

    tags = {"project": "laneway", "stage": "raw data", "ünï": "cødé", "empty": "", "sym": "+-=._:/@"}
    put = s3.put_object_tagging(Bucket=bucket, Key="t", Tagging=_tag_set(tags))
    assert put["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert tags_dict(s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]) == tags

    # A put replaces the whole set.
    s3.put_object_tagging(Bucket=bucket, Key="t", Tagging=_tag_set({"only": "one"}))
    assert tags_dict(s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]) == {"only": "one"}
    assert s3.get_object(Bucket=bucket, Key="t")["TagCount"] == 1

    deleted = s3.delete_object_tagging(Bucket=bucket, Key="t")
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
    # Tagging is metadata only: the body and ETag are untouched.
    got = s3.get_object(Bucket=bucket, Key="t")
    assert got["Body"].read() == b"x"
    assert "TagCount" not in got


def test_tagging_header_on_put(s3, bucket):
    s3.put_object(Bucket=bucket, Key="h", Body=b"x", Tagging="a=1&b=2")
    assert tags_dict(s3.get_object_tagging(Bucket=bucket, Key="h")["TagSet"]) == {"a": "1", "b": "2"}
    assert s3.get_object(Bucket=bucket, Key="h")["TagCount"] == 2


def test_tagging_header_is_url_encoded(s3, bucket):
    s3.put_object(Bucket=bucket, Key="enc", Body=b"x", Tagging="team=data%20eng&path=a%2Fb&plus=1%2B1&k%C3%BC=v")
    tags = tags_dict(s3.get_object_tagging(Bucket=bucket, Key="enc")["TagSet"])
    assert tags == {"team": "data eng", "path": "a/b", "plus": "1+1", "kü": "v"}


def test_overwrite_drops_old_tags(s3, bucket):
    s3.put_object(Bucket=bucket, Key="o", Body=b"1", Tagging="old=yes")
    s3.put_object(Bucket=bucket, Key="o", Body=b"2")
    assert s3.get_object_tagging(Bucket=bucket, Key="o")["TagSet"] == []


def test_ten_tags_allowed_eleven_refused(s3, bucket):
    s3.put_object(Bucket=bucket, Key="lim", Body=b"x")
    ten = {f"k{i}": f"v{i}" for i in range(10)}
    s3.put_object_tagging(Bucket=bucket, Key="lim", Tagging=_tag_set(ten))
    eleven = {f"k{i}": f"v{i}" for i in range(11)}
    expect_error("InvalidTag", 400, s3.put_object_tagging, Bucket=bucket, Key="lim", Tagging=_tag_set(eleven))
    # The refused request changed nothing.
    assert tags_dict(s3.get_object_tagging(Bucket=bucket, Key="lim")["TagSet"]) == ten

    header = "&".join(f"k{i}=v{i}" for i in range(11))
    expect_error("InvalidTag", 400, s3.put_object, Bucket=bucket, Key="lim2", Body=b"x", Tagging=header)
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="lim2")


@pytest.mark.parametrize(
    "tag_set",
    [
        [{"Key": "k" * 129, "Value": "v"}],  # key longer than 128
        [{"Key": "k", "Value": "v" * 257}],  # value longer than 256
        [{"Key": "dup", "Value": "1"}, {"Key": "dup", "Value": "2"}],  # duplicate keys
    ],
    ids=["long-key", "long-value", "duplicate-key"],
)
def test_invalid_tags(s3, bucket, tag_set):
    s3.put_object(Bucket=bucket, Key="inv", Body=b"x")
    expect_error("InvalidTag", 400, s3.put_object_tagging, Bucket=bucket, Key="inv", Tagging={"TagSet": tag_set})
    assert s3.get_object_tagging(Bucket=bucket, Key="inv")["TagSet"] == []


def test_max_length_tags_allowed(s3, bucket):
    s3.put_object(Bucket=bucket, Key="max", Body=b"x")
    tags = {"k" * 128: "v" * 256}
    s3.put_object_tagging(Bucket=bucket, Key="max", Tagging=_tag_set(tags))
    assert tags_dict(s3.get_object_tagging(Bucket=bucket, Key="max")["TagSet"]) == tags


def test_object_tagging_missing_key(s3, bucket):
    expect_error("NoSuchKey", 404, s3.get_object_tagging, Bucket=bucket, Key="nope")
    expect_error("NoSuchKey", 404, s3.put_object_tagging, Bucket=bucket, Key="nope", Tagging=_tag_set({"a": "b"}))


def test_bucket_tagging_round_trip(s3, bucket):
    expect_error("NoSuchTagSet", 404, s3.get_bucket_tagging, Bucket=bucket)
    tags = {"owner": "data-team", "cost center": "42", "env": "test"}
    put = s3.put_bucket_tagging(Bucket=bucket, Tagging=_tag_set(tags))
    assert put["ResponseMetadata"]["HTTPStatusCode"] in (200, 204)
    assert tags_dict(s3.get_bucket_tagging(Bucket=bucket)["TagSet"]) == tags

    s3.put_bucket_tagging(Bucket=bucket, Tagging=_tag_set({"replaced": "yes"}))
    assert tags_dict(s3.get_bucket_tagging(Bucket=bucket)["TagSet"]) == {"replaced": "yes"}

    deleted = s3.delete_bucket_tagging(Bucket=bucket)
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    expect_error("NoSuchTagSet", 404, s3.get_bucket_tagging, Bucket=bucket)


def test_bucket_tagging_allows_more_than_ten(s3, bucket):
    # Buckets take up to 50 tags; the object limit of 10 does not apply.
    tags = {f"k{i}": f"v{i}" for i in range(20)}
    s3.put_bucket_tagging(Bucket=bucket, Tagging=_tag_set(tags))
    assert tags_dict(s3.get_bucket_tagging(Bucket=bucket)["TagSet"]) == tags
