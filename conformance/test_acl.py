"""ACL calls tools make: reads return the owner's FULL_CONTROL grant, the
canned `private` ACL is accepted, anything else is refused, and an object
ACL call on a missing key is NoSuchKey."""

from __future__ import annotations

from s3util import expect_error


def test_object_and_bucket_acls(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    for acl in (s3.get_bucket_acl(Bucket=bucket), s3.get_object_acl(Bucket=bucket, Key="k")):
        assert [g["Permission"] for g in acl["Grants"]] == ["FULL_CONTROL"]
        assert acl["Owner"]["ID"]
    s3.put_object_acl(Bucket=bucket, Key="k", ACL="private")
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    expect_error("NoSuchKey", 404, s3.get_object_acl, Bucket=bucket, Key="missing")
    expect_error("NoSuchKey", 404, s3.put_object_acl, Bucket=bucket, Key="missing", ACL="private")
    expect_error("AccessControlListNotSupported", 400, s3.put_object_acl, Bucket=bucket, Key="k", ACL="public-read")
