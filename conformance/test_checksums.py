"""Flexible checksums (x-amz-checksum-*) end to end with boto3 at its
defaults: every algorithm on PUT and GET, BadDigest on a wrong value with
nothing stored, multipart objects' COMPOSITE and FULL_OBJECT checksums, and
conditional writes (If-None-Match: *, If-Match) incl. a race for a new key."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import zlib

import pytest
from botocore.exceptions import ClientError

from s3util import crc32_b64, expect_error

MIB = 1024 * 1024
ALGORITHMS = ["CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME"]


def sha_b64(name: str, data: bytes) -> str:
    return base64.b64encode(hashlib.new(name, data).digest()).decode()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_put_and_get_with_each_algorithm(s3, bucket, algorithm):
    data = os.urandom(100_000)
    put = s3.put_object(Bucket=bucket, Key=f"k-{algorithm}", Body=data, ChecksumAlgorithm=algorithm)
    sent = put[f"Checksum{algorithm}"]
    if algorithm == "CRC32":
        assert sent == crc32_b64(data)
    if algorithm in ("SHA1", "SHA256"):
        assert sent == sha_b64(algorithm.lower(), data)
    got = s3.get_object(Bucket=bucket, Key=f"k-{algorithm}", ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got[f"Checksum{algorithm}"] == sent
    assert got["ChecksumType"] == "FULL_OBJECT"
    head = s3.head_object(Bucket=bucket, Key=f"k-{algorithm}", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == sent
    # Without checksum mode nothing is returned.
    plain = s3.head_object(Bucket=bucket, Key=f"k-{algorithm}")
    assert f"Checksum{algorithm}" not in plain


@pytest.mark.parametrize("algorithm", ["CRC32", "SHA256"])
def test_wrong_checksum_is_bad_digest_and_stores_nothing(s3, bucket, algorithm):
    wrong = crc32_b64(b"other") if algorithm == "CRC32" else sha_b64("sha256", b"other")
    expect_error(
        "BadDigest", 400, s3.put_object, Bucket=bucket, Key="bad", Body=b"payload", **{f"Checksum{algorithm}": wrong}
    )
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="bad")


def complete_with(s3, bucket, key, parts, algorithm, checksum_type=None):
    create = {"ChecksumAlgorithm": algorithm}
    if checksum_type:
        create["ChecksumType"] = checksum_type
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    done = []
    for n, data in enumerate(parts, start=1):
        r = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=data, ChecksumAlgorithm=algorithm
        )
        done.append({"PartNumber": n, "ETag": r["ETag"], f"Checksum{algorithm}": r[f"Checksum{algorithm}"]})
    return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done})


def test_multipart_composite_checksum(s3, bucket):
    parts = [os.urandom(5 * MIB), os.urandom(1234)]
    done = complete_with(s3, bucket, "composite", parts, "SHA256")
    raw = b"".join(hashlib.sha256(p).digest() for p in parts)
    expected = f"{base64.b64encode(hashlib.sha256(raw).digest()).decode()}-2"
    assert done["ChecksumSHA256"] == expected
    assert done["ChecksumType"] == "COMPOSITE"
    head = s3.head_object(Bucket=bucket, Key="composite", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == expected
    assert head["ChecksumType"] == "COMPOSITE"
    got = s3.get_object(Bucket=bucket, Key="composite", ChecksumMode="ENABLED")
    assert got["Body"].read() == b"".join(parts)


def test_multipart_full_object_crc32(s3, bucket):
    parts = [os.urandom(5 * MIB), os.urandom(777)]
    done = complete_with(s3, bucket, "full", parts, "CRC32", checksum_type="FULL_OBJECT")
    whole = base64.b64encode((zlib.crc32(b"".join(parts)) & 0xFFFFFFFF).to_bytes(4, "big")).decode()
    assert done["ChecksumCRC32"] == whole
    assert done["ChecksumType"] == "FULL_OBJECT"
    got = s3.get_object(Bucket=bucket, Key="full", ChecksumMode="ENABLED")
    # botocore validates a full-object checksum as it reads.
    assert got["Body"].read() == b"".join(parts)
    assert got["ChecksumCRC32"] == whole


def test_multipart_crc64nvme_is_full_object(s3, bucket):
    parts = [os.urandom(5 * MIB), os.urandom(10)]
    done = complete_with(s3, bucket, "nvme", parts, "CRC64NVME")
    assert done["ChecksumType"] == "FULL_OBJECT"
    single = s3.put_object(Bucket=bucket, Key="nvme-single", Body=b"".join(parts), ChecksumAlgorithm="CRC64NVME")
    assert done["ChecksumCRC64NVME"] == single["ChecksumCRC64NVME"]


def test_checksum_type_rules_at_creation(s3, bucket):
    expect_error(
        "InvalidRequest", 400, s3.create_multipart_upload, Bucket=bucket, Key="x",
        ChecksumAlgorithm="SHA256", ChecksumType="FULL_OBJECT",
    )
    expect_error(
        "InvalidRequest", 400, s3.create_multipart_upload, Bucket=bucket, Key="x",
        ChecksumAlgorithm="CRC64NVME", ChecksumType="COMPOSITE",
    )


def test_put_if_none_match(s3, bucket):
    s3.put_object(Bucket=bucket, Key="once", Body=b"1", IfNoneMatch="*")
    expect_error("PreconditionFailed", 412, s3.put_object, Bucket=bucket, Key="once", Body=b"2", IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="once")["Body"].read() == b"1"
    etag = s3.head_object(Bucket=bucket, Key="once")["ETag"]
    s3.put_object(Bucket=bucket, Key="once", Body=b"3", IfMatch=etag)
    expect_error("PreconditionFailed", 412, s3.put_object, Bucket=bucket, Key="once", Body=b"4", IfMatch=etag)


def test_copy_if_none_match(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"source")
    s3.put_object(Bucket=bucket, Key="taken", Body=b"taken")
    copy_source = {"Bucket": bucket, "Key": "src"}

    def add_header(request, **_):
        request.headers["If-None-Match"] = "*"

    s3.meta.events.register("before-sign.s3.CopyObject", add_header)
    try:
        expect_error("PreconditionFailed", 412, s3.copy_object, Bucket=bucket, Key="taken", CopySource=copy_source)
        s3.copy_object(Bucket=bucket, Key="new", CopySource=copy_source)
    finally:
        s3.meta.events.unregister("before-sign.s3.CopyObject", add_header)
    assert s3.get_object(Bucket=bucket, Key="taken")["Body"].read() == b"taken"
    assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"source"


def test_if_none_match_race_has_one_winner(client_factory, bucket):
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: list[object] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        client = client_factory()
        barrier.wait()
        try:
            client.put_object(Bucket=bucket, Key="raced", Body=f"writer {i}".encode(), IfNoneMatch="*")
            result: object = 200
        except ClientError as e:
            result = e.response["ResponseMetadata"]["HTTPStatusCode"]
        with lock:
            outcomes.append((i, result))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, r in outcomes if r == 200]
    assert len(winners) == 1, outcomes
    assert all(r in (412, 409) for _, r in outcomes if r != 200), outcomes
    body = client_factory().get_object(Bucket=bucket, Key="raced")["Body"].read()
    assert body == f"writer {winners[0]}".encode()
