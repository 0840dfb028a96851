"""Tenant isolation with real clients: every S3 operation laneway serves,
run with tenant A's key against tenant B's buckets and objects, with a
read-only key for writes, and with a bucket-scoped key outside its scope.
All are refused, B's data is unchanged, and a foreign bucket that exists
answers exactly like one that does not. boto3 and the aws CLI then work as
two tenants side by side.

Starts its own `laneway serve` with a fixed admin token and provisions the
tenants through the admin API."""

from __future__ import annotations

import os
import subprocess

import pytest
from botocore.exceptions import ClientError

from conftest import admin_env
from s3util import tag_filter

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own laneway; not with LANEWAY_ENDPOINT"
)

BODY = b"tenant-b-private-data"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from admin_env(tmp_path_factory, "tenancy")


@pytest.fixture(scope="module")
def world(env):
    """Tenant B with bucket b-data (object k, a multipart upload in
    progress); tenant A with its own bucket; read-only and scoped keys of A."""
    a = env.api("POST", "/v1/tenants", {"name": "tenant-a"})
    b = env.api("POST", "/v1/tenants", {"name": "tenant-b"})
    ca, cb = env.client(a["key"]), env.client(b["key"])
    cb.create_bucket(Bucket="b-data")
    cb.put_object(Bucket="b-data", Key="k", Body=BODY)
    upload = cb.create_multipart_upload(Bucket="b-data", Key="mp")["UploadId"]
    ca.create_bucket(Bucket="a-data")
    ca.put_object(Bucket="a-data", Key="k", Body=b"a")
    ro = env.api("POST", "/v1/tenants/tenant-a/keys", {"access": "read-only"})
    scoped = env.api("POST", "/v1/tenants/tenant-a/keys", {"buckets": ["a-data"]})
    return {
        "a": ca,
        "b": cb,
        "ro": env.client(ro),
        "scoped": env.client(scoped),
        "upload": upload,
    }


def _list_by_tag(client, bucket: str):
    with tag_filter(client, {"t": "v"}):
        return client.list_objects_v2(Bucket=bucket)


def operations(bucket: str, upload: str):
    """(name, callable(client)) for every operation laneway serves, aimed
    at `bucket` (copy sources and destinations both in it)."""
    tags = {"TagSet": [{"Key": "t", "Value": "v"}]}
    parts = {"Parts": [{"PartNumber": 1, "ETag": '"00"'}]}
    return [
        ("HeadBucket", lambda c: c.head_bucket(Bucket=bucket)),
        ("GetBucketLocation", lambda c: c.get_bucket_location(Bucket=bucket)),
        ("DeleteBucket", lambda c: c.delete_bucket(Bucket=bucket)),
        ("PutObject", lambda c: c.put_object(Bucket=bucket, Key="k", Body=b"evil")),
        ("GetObject", lambda c: c.get_object(Bucket=bucket, Key="k")),
        ("HeadObject", lambda c: c.head_object(Bucket=bucket, Key="k")),
        ("CopyObjectInto", lambda c: c.copy_object(Bucket=bucket, Key="c", CopySource="a-data/k")),
        ("CopyObjectFrom", lambda c: c.copy_object(Bucket="a-data", Key="stolen", CopySource=f"{bucket}/k")),
        ("DeleteObject", lambda c: c.delete_object(Bucket=bucket, Key="k")),
        ("DeleteObjects", lambda c: c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k"}]})),
        ("ListObjectsV2", lambda c: c.list_objects_v2(Bucket=bucket)),
        ("ListObjects", lambda c: c.list_objects(Bucket=bucket)),
        ("ListObjectVersions", lambda c: c.list_object_versions(Bucket=bucket)),
        ("ListObjectsV2ByTag", lambda c: _list_by_tag(c, bucket)),
        ("PutObjectTagging", lambda c: c.put_object_tagging(Bucket=bucket, Key="k", Tagging=tags)),
        ("GetObjectTagging", lambda c: c.get_object_tagging(Bucket=bucket, Key="k")),
        ("DeleteObjectTagging", lambda c: c.delete_object_tagging(Bucket=bucket, Key="k")),
        ("PutBucketTagging", lambda c: c.put_bucket_tagging(Bucket=bucket, Tagging=tags)),
        ("GetBucketTagging", lambda c: c.get_bucket_tagging(Bucket=bucket)),
        ("DeleteBucketTagging", lambda c: c.delete_bucket_tagging(Bucket=bucket)),
        ("CreateMultipartUpload", lambda c: c.create_multipart_upload(Bucket=bucket, Key="m2")),
        ("UploadPart", lambda c: c.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"x")),
        (
            "UploadPartCopyFrom",
            lambda c: c.upload_part_copy(
                Bucket="a-data", Key="mp", UploadId=upload, PartNumber=1, CopySource=f"{bucket}/k"
            ),
        ),
        (
            "CompleteMultipartUpload",
            lambda c: c.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload=parts),
        ),
        ("AbortMultipartUpload", lambda c: c.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload)),
        ("ListParts", lambda c: c.list_parts(Bucket=bucket, Key="mp", UploadId=upload)),
        ("ListMultipartUploads", lambda c: c.list_multipart_uploads(Bucket=bucket)),
        ("GetBucketAcl", lambda c: c.get_bucket_acl(Bucket=bucket)),
        ("GetObjectAcl", lambda c: c.get_object_acl(Bucket=bucket, Key="k")),
        ("PutBucketAcl", lambda c: c.put_bucket_acl(Bucket=bucket, ACL="private")),
        ("PutObjectAcl", lambda c: c.put_object_acl(Bucket=bucket, Key="k", ACL="private")),
    ]


def outcome(fn, client) -> tuple[str, int]:
    """(error code, status); HEAD answers have no body, so botocore reports
    the status as the code: read "403" as AccessDenied, "404" as NoSuchBucket."""
    try:
        fn(client)
    except ClientError as e:
        code = e.response["Error"].get("Code", "")
        code = {"403": "AccessDenied", "404": "NoSuchBucket"}.get(code, code)
        return code, e.response["ResponseMetadata"]["HTTPStatusCode"]
    return "OK", 200


def assert_b_unchanged(world):
    b = world["b"]
    assert b.get_object(Bucket="b-data", Key="k")["Body"].read() == BODY
    assert [o["Key"] for o in b.list_objects_v2(Bucket="b-data").get("Contents", [])] == ["k"]
    assert not b.get_object_tagging(Bucket="b-data", Key="k")["TagSet"]
    uploads = b.list_multipart_uploads(Bucket="b-data").get("Uploads", [])
    assert [u["UploadId"] for u in uploads] == [world["upload"]]


def test_other_tenants_buckets_are_invisible_and_untouchable(world):
    a = world["a"]
    for name, fn in operations("b-data", world["upload"]):
        existing = outcome(fn, a)
        missing = outcome(dict(operations("no-such-bucket-zz", world["upload"]))[name], a)
        assert existing[0] not in ("OK", "AccessDenied"), f"{name}: {existing}"
        assert existing == missing, f"{name}: existing {existing} vs missing {missing}"
    names = [b["Name"] for b in a.list_buckets()["Buckets"]]
    assert names == ["a-data"]
    assert_b_unchanged(world)


def test_read_only_key_cannot_write(world):
    ro = world["ro"]
    assert ro.get_object(Bucket="a-data", Key="k")["Body"].read() == b"a"
    for name, fn in operations("a-data", world["upload"]):
        if name.startswith(("Get", "Head", "List")):
            continue
        code, status = outcome(fn, ro)
        assert (code, status) == ("AccessDenied", 403), f"{name}: {code}"
    code, _ = outcome(lambda c: c.create_bucket(Bucket="ro-new"), ro)
    assert code == "AccessDenied"
    assert world["a"].get_object(Bucket="a-data", Key="k")["Body"].read() == b"a"


def test_scoped_key_stays_in_scope(world, env):
    a, scoped = world["a"], world["scoped"]
    a.create_bucket(Bucket="a-other")
    a.put_object(Bucket="a-other", Key="k", Body=b"other")
    for name, fn in operations("a-other", world["upload"]):
        if name in ("CopyObjectInto",):
            continue  # source a-data is in scope, destination a-other is not: still refused below
        code, status = outcome(fn, scoped)
        assert (code, status) == ("AccessDenied", 403), f"{name}: {code}"
    code, _ = outcome(lambda c: c.copy_object(Bucket="a-other", Key="c", CopySource="a-data/k"), scoped)
    assert code == "AccessDenied"
    assert [b["Name"] for b in scoped.list_buckets()["Buckets"]] == ["a-data"]
    scoped.put_object(Bucket="a-data", Key="s", Body=b"s")
    assert a.get_object(Bucket="a-other", Key="k")["Body"].read() == b"other"


def test_boto3_and_aws_cli_as_two_tenants(env, tmp_path):
    one = env.api("POST", "/v1/tenants", {"name": "cli-one"})["key"]
    two = env.api("POST", "/v1/tenants", {"name": "cli-two"})["key"]
    c1 = env.client(one)
    c1.create_bucket(Bucket="shared-name")
    c1.put_object(Bucket="shared-name", Key="who", Body=b"one")
    (tmp_path / "cfg").write_text("")
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    cli_env.update(
        AWS_ACCESS_KEY_ID=two["access_key"],
        AWS_SECRET_ACCESS_KEY=two["secret_key"],
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "cfg"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "cfg"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    src = tmp_path / "two.txt"
    src.write_bytes(b"two")

    def aws(*args):
        return subprocess.run(
            ["aws", "--endpoint-url", env.endpoint, "s3", *args], env=cli_env, capture_output=True, text=True
        )

    assert aws("mb", "s3://shared-name").returncode == 0
    assert aws("cp", str(src), "s3://shared-name/who").returncode == 0
    out = aws("cp", "s3://shared-name/who", "-")
    assert out.returncode == 0 and out.stdout == "two", out.stderr
    assert c1.get_object(Bucket="shared-name", Key="who")["Body"].read() == b"one"
    listing = aws("ls")
    assert listing.stdout.count("shared-name") == 1


def test_multipart_respects_the_byte_quota(env):
    """A tenant with a 12 MiB byte quota: parts count as they are stored,
    so a third 5 MiB part is refused with QuotaExceeded up front; a
    completion adds no bytes (the parts' become the object's) and fits."""
    t = env.api("POST", "/v1/tenants", {"name": "tenant-mpq", "quota_bytes": 12 << 20})
    c = env.client(t["key"])
    c.create_bucket(Bucket="mpq")
    part = b"p" * (5 << 20)
    up = c.create_multipart_upload(Bucket="mpq", Key="big")["UploadId"]
    etags = [
        c.upload_part(Bucket="mpq", Key="big", UploadId=up, PartNumber=n, Body=part)["ETag"] for n in (1, 2)
    ]
    with pytest.raises(ClientError) as err:
        c.upload_part(Bucket="mpq", Key="big", UploadId=up, PartNumber=3, Body=part)
    assert err.value.response["Error"]["Code"] == "QuotaExceeded"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert env.api("GET", "/v1/tenants/tenant-mpq/usage")["bytes"] == 10 << 20
    parts = [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags)]
    done = c.complete_multipart_upload(Bucket="mpq", Key="big", UploadId=up, MultipartUpload={"Parts": parts})
    assert done["ETag"].endswith('-2"')
    assert c.head_object(Bucket="mpq", Key="big")["ContentLength"] == 10 << 20
    assert env.api("GET", "/v1/tenants/tenant-mpq/usage")["bytes"] == 10 << 20
    # A part that would not fit beside the stored object is refused up front.
    up2 = c.create_multipart_upload(Bucket="mpq", Key="other")["UploadId"]
    with pytest.raises(ClientError) as err:
        c.upload_part(Bucket="mpq", Key="other", UploadId=up2, PartNumber=1, Body=part)
    assert err.value.response["Error"]["Code"] == "QuotaExceeded"
    c.abort_multipart_upload(Bucket="mpq", Key="other", UploadId=up2)
