"""GetObjectAttributes with boto3 (`get_object_attributes`), and the
whole-object checksum of CompleteMultipartUpload.

GetObjectAttributes: ETag, Checksum (a composite value without its `-N`,
with its ChecksumType), ObjectParts (sizes and part checksums, paged with
MaxParts / PartNumberMarker), StorageClass, ObjectSize, for a single PUT
and for multipart objects with COMPOSITE (CRC32, SHA256) and FULL_OBJECT
(CRC64NVME) checksums; every expected value is computed here from the
bytes sent.

CompleteMultipartUpload with x-amz-checksum-*: the right value (full-object
or composite, with or without `-N`) completes; a wrong one is 400
BadDigest and completes nothing (the upload is still there and completes
afterwards); another algorithm or type than the upload's is 400
InvalidRequest. UploadPart with another checksum algorithm than the
upload's is 400 InvalidRequest and stores no part.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib

import pytest
from awscrt import checksums as crt

from s3util import expect_error, md5_hex, random_bytes

MIB = 1024 * 1024
ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def crc32_raw(data: bytes) -> bytes:
    return struct.pack(">I", zlib.crc32(data) & 0xFFFFFFFF)


def sha256_raw(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def crc64nvme_raw(data: bytes) -> bytes:
    return struct.pack(">Q", crt.crc64nvme(data))


def multipart_etag(chunks: list[bytes]) -> str:
    joined = b"".join(hashlib.md5(c).digest() for c in chunks)
    return f"{hashlib.md5(joined).hexdigest()}-{len(chunks)}"


def _prepared(s3, bucket, key, chunks, algorithm="CRC32", ctype=None):
    """Create a multipart upload and send its parts with `algorithm`;
    returns (upload id, the MultipartUpload to complete it with)."""
    create = {"ChecksumAlgorithm": algorithm}
    if ctype:
        create["ChecksumType"] = ctype
    uid = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    parts = []
    for n, chunk in enumerate(chunks, 1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=chunk, ChecksumAlgorithm=algorithm)
        parts.append({"PartNumber": n, "ETag": r["ETag"], f"Checksum{algorithm}": r[f"Checksum{algorithm}"]})
    return uid, {"Parts": parts}


def upload(s3, bucket: str, key: str, chunks: list[bytes], algorithm: str, ctype: str | None = None, **complete):
    """A multipart upload of `chunks` with `algorithm` on create and every
    part; returns (upload id, CompleteMultipartUpload response)."""
    uid, parts = _prepared(s3, bucket, key, chunks, algorithm, ctype)
    done = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload=parts, **complete)
    return uid, done


def test_single_put_attributes(s3, bucket):
    body = random_bytes(70_000)
    s3.put_object(Bucket=bucket, Key="one", Body=body, ChecksumAlgorithm="SHA256")
    got = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=ALL)
    assert got["ETag"].strip('"') == md5_hex(body)
    assert got["Checksum"] == {"ChecksumSHA256": b64(sha256_raw(body)), "ChecksumType": "FULL_OBJECT"}
    assert got["ObjectSize"] == len(body)
    assert got["StorageClass"] == "STANDARD"
    assert "ObjectParts" not in got
    assert got["LastModified"] is not None
    # Only what was asked for.
    only = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=["ObjectSize"])
    assert only["ObjectSize"] == len(body)
    assert "ETag" not in only and "Checksum" not in only


def test_composite_crc32_multipart_attributes_and_paging(s3, bucket):
    chunks = [random_bytes(5 * MIB), random_bytes(5 * MIB), random_bytes(MIB + 3)]
    _, done = upload(s3, bucket, "mp", chunks, "CRC32")
    composite = b64(crc32_raw(b"".join(crc32_raw(c) for c in chunks)))
    assert done["ChecksumCRC32"] == f"{composite}-3"
    got = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=ALL)
    assert got["ETag"].strip('"') == multipart_etag(chunks)
    assert got["Checksum"] == {"ChecksumCRC32": composite, "ChecksumType": "COMPOSITE"}
    assert got["ObjectSize"] == sum(map(len, chunks))
    parts = got["ObjectParts"]
    assert parts["TotalPartsCount"] == 3 and parts["IsTruncated"] is False
    assert [(p["PartNumber"], p["Size"], p["ChecksumCRC32"]) for p in parts["Parts"]] == [
        (n, len(c), b64(crc32_raw(c))) for n, c in enumerate(chunks, 1)
    ]
    first = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=2)
    page = first["ObjectParts"]
    assert page["IsTruncated"] is True and page["MaxParts"] == 2 and page["NextPartNumberMarker"] == 2
    assert [p["PartNumber"] for p in page["Parts"]] == [1, 2]
    rest = s3.get_object_attributes(
        Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=2, PartNumberMarker=2
    )["ObjectParts"]
    assert rest["IsTruncated"] is False and [p["PartNumber"] for p in rest["Parts"]] == [3]


def test_composite_sha256_multipart_attributes(s3, bucket):
    chunks = [random_bytes(5 * MIB), random_bytes(1000)]
    upload(s3, bucket, "sha", chunks, "SHA256")
    got = s3.get_object_attributes(Bucket=bucket, Key="sha", ObjectAttributes=["Checksum", "ObjectParts"])
    composite = b64(sha256_raw(b"".join(sha256_raw(c) for c in chunks)))
    assert got["Checksum"] == {"ChecksumSHA256": composite, "ChecksumType": "COMPOSITE"}
    assert [p["ChecksumSHA256"] for p in got["ObjectParts"]["Parts"]] == [b64(sha256_raw(c)) for c in chunks]


def test_full_object_crc64nvme_multipart_attributes(s3, bucket):
    chunks = [random_bytes(5 * MIB), random_bytes(2 * MIB + 1)]
    upload(s3, bucket, "nvme", chunks, "CRC64NVME")
    got = s3.get_object_attributes(Bucket=bucket, Key="nvme", ObjectAttributes=["Checksum", "ObjectParts"])
    assert got["Checksum"] == {"ChecksumCRC64NVME": b64(crc64nvme_raw(b"".join(chunks))), "ChecksumType": "FULL_OBJECT"}
    assert [p["ChecksumCRC64NVME"] for p in got["ObjectParts"]["Parts"]] == [b64(crc64nvme_raw(c)) for c in chunks]


def test_attributes_of_missing_key_and_bad_names(s3, bucket):
    expect_error("NoSuchKey", 404, s3.get_object_attributes, Bucket=bucket, Key="nope", ObjectAttributes=["ETag"])
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    expect_error("InvalidArgument", 400, s3.get_object_attributes, Bucket=bucket, Key="k", ObjectAttributes=["Colour"])


def test_complete_with_full_object_checksum(s3, bucket):
    chunks = [random_bytes(5 * MIB), random_bytes(100_000)]
    whole = b64(crc32_raw(b"".join(chunks)))
    _, done = upload(s3, bucket, "full", chunks, "CRC32", ctype="FULL_OBJECT", ChecksumCRC32=whole,
                     ChecksumType="FULL_OBJECT")
    assert done["ChecksumCRC32"] == whole and done["ChecksumType"] == "FULL_OBJECT"
    head = s3.head_object(Bucket=bucket, Key="full", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32"] == whole


@pytest.mark.parametrize("suffix", ["", "-2"])
def test_complete_with_composite_checksum(s3, bucket, suffix):
    chunks = [random_bytes(5 * MIB), random_bytes(10)]
    composite = b64(crc32_raw(b"".join(crc32_raw(c) for c in chunks)))
    _, done = upload(s3, bucket, "comp", chunks, "CRC32", ChecksumCRC32=composite + suffix)
    assert done["ChecksumCRC32"] == f"{composite}-2"


@pytest.mark.parametrize("ctype", ["FULL_OBJECT", "COMPOSITE"])
def test_complete_with_wrong_checksum_is_bad_digest(s3, bucket, ctype):
    chunks = [random_bytes(5 * MIB), random_bytes(1234)]
    uid, parts = _prepared(s3, bucket, "bad", chunks, ctype=ctype)
    wrong = b64(crc32_raw(b"something else"))
    expect_error("BadDigest", 400, s3.complete_multipart_upload, Bucket=bucket, Key="bad", UploadId=uid,
                 MultipartUpload=parts, ChecksumCRC32=wrong)
    # Nothing completed: no object, the upload and its parts are still there.
    expect_error("404", 404, s3.head_object, Bucket=bucket, Key="bad")
    assert len(s3.list_parts(Bucket=bucket, Key="bad", UploadId=uid)["Parts"]) == 2
    done = s3.complete_multipart_upload(Bucket=bucket, Key="bad", UploadId=uid, MultipartUpload=parts)
    assert s3.get_object(Bucket=bucket, Key="bad")["Body"].read() == b"".join(chunks)
    assert done["ChecksumType"] == ctype


def test_complete_with_other_algorithm_or_type_is_invalid_request(s3, bucket):
    chunks = [random_bytes(1000)]
    uid, parts = _prepared(s3, bucket, "alg", chunks)
    expect_error("InvalidRequest", 400, s3.complete_multipart_upload, Bucket=bucket, Key="alg", UploadId=uid,
                 MultipartUpload=parts, ChecksumSHA256=b64(sha256_raw(chunks[0])))
    expect_error("InvalidRequest", 400, s3.complete_multipart_upload, Bucket=bucket, Key="alg", UploadId=uid,
                 MultipartUpload=parts, ChecksumCRC32=b64(crc32_raw(chunks[0])), ChecksumType="FULL_OBJECT")
    expect_error("404", 404, s3.head_object, Bucket=bucket, Key="alg")


def test_upload_part_with_other_algorithm_is_invalid_request(s3, bucket):
    uid = s3.create_multipart_upload(Bucket=bucket, Key="mix", ChecksumAlgorithm="CRC32")["UploadId"]
    resp = expect_error("InvalidRequest", 400, s3.upload_part, Bucket=bucket, Key="mix", UploadId=uid,
                        PartNumber=1, Body=b"x" * 100, ChecksumAlgorithm="SHA1")
    assert "Checksum Type mismatch" in resp["Error"]["Message"]
    assert s3.list_parts(Bucket=bucket, Key="mix", UploadId=uid).get("Parts", []) == []
    ok = s3.upload_part(Bucket=bucket, Key="mix", UploadId=uid, PartNumber=1, Body=b"x" * 100, ChecksumAlgorithm="CRC32")
    assert ok["ChecksumCRC32"] == b64(crc32_raw(b"x" * 100))
