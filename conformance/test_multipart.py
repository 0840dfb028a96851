"""Multipart upload: boto3's low-level calls, s3transfer (upload_file) and
the aws CLI above its 8 MiB threshold.

SKIPPED until laneway implements multipart upload (issue 3). The skip is
explicit and shows in every run's summary (pytest -ra); set
LANEWAY_TEST_MULTIPART=1 to run them while working on it, and delete the
`pytestmark` below when the gateway supports it."""

from __future__ import annotations

import hashlib
import os

import pytest
from boto3.s3.transfer import TransferConfig

from s3util import crc32_b64, expect_error, force_trailer_checksums

pytestmark = pytest.mark.skipif(
    os.environ.get("LANEWAY_TEST_MULTIPART") != "1",
    reason="multipart upload not implemented yet (issue 3); LANEWAY_TEST_MULTIPART=1 runs these anyway",
)

MIB = 1024 * 1024


def multipart_etag(parts: list[bytes]) -> str:
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


def test_low_level_multipart_upload(s3, bucket):
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), os.urandom(123_457)]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp/obj", ContentType="application/x-mp", Metadata={"m": "1"})
    upload_id = upload["UploadId"]
    done = []
    for number, data in enumerate(parts, start=1):
        part = s3.upload_part(Bucket=bucket, Key="mp/obj", UploadId=upload_id, PartNumber=number, Body=data)
        assert part["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        done.append({"PartNumber": number, "ETag": part["ETag"], "ChecksumCRC32": part.get("ChecksumCRC32")})

    listed = s3.list_parts(Bucket=bucket, Key="mp/obj", UploadId=upload_id)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2, 3]
    assert [p["Size"] for p in listed["Parts"]] == [len(p) for p in parts]

    uploads = s3.list_multipart_uploads(Bucket=bucket)
    assert [u["UploadId"] for u in uploads.get("Uploads", [])] == [upload_id]

    complete = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mp/obj",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{k: v for k, v in p.items() if v is not None} for p in done]},
    )
    assert complete["ETag"] == multipart_etag(parts)
    got = s3.get_object(Bucket=bucket, Key="mp/obj")
    assert got["Body"].read() == b"".join(parts)
    assert got["ContentType"] == "application/x-mp"
    assert got["Metadata"] == {"m": "1"}
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")

    part2 = s3.get_object(Bucket=bucket, Key="mp/obj", PartNumber=2)
    assert part2["Body"].read() == parts[1]
    assert part2["PartsCount"] == 3


def test_multipart_trailer_checksums(client_factory, bucket):
    client = client_factory()
    force_trailer_checksums(client)
    data = os.urandom(5 * MIB + 1)
    upload_id = client.create_multipart_upload(Bucket=bucket, Key="t", ChecksumAlgorithm="CRC32")["UploadId"]
    part = client.upload_part(Bucket=bucket, Key="t", UploadId=upload_id, PartNumber=1, Body=data, ChecksumAlgorithm="CRC32")
    assert part["ChecksumCRC32"] == crc32_b64(data)
    client.complete_multipart_upload(
        Bucket=bucket,
        Key="t",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"], "ChecksumCRC32": part["ChecksumCRC32"]}]},
    )
    assert client.get_object(Bucket=bucket, Key="t")["Body"].read() == data


def test_multipart_errors(s3, bucket):
    expect_error("NoSuchUpload", 404, s3.upload_part, Bucket=bucket, Key="k", UploadId="nope", PartNumber=1, Body=b"x")
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    small = s3.upload_part(Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=1, Body=b"too small")
    last = s3.upload_part(Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=2, Body=b"last")
    expect_error(
        "EntityTooSmall", 400, s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": small["ETag"]}, {"PartNumber": 2, "ETag": last["ETag"]}]},
    )
    expect_error(
        "InvalidPart", 400, s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"0123456789abcdef0123456789abcdef"'}]},
    )
    expect_error(
        "InvalidPartOrder", 400, s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": last["ETag"]}, {"PartNumber": 1, "ETag": small["ETag"]}]},
    )
    s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload_id)
    expect_error("NoSuchUpload", 404, s3.list_parts, Bucket=bucket, Key="k", UploadId=upload_id)
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="k")


def test_upload_file_with_s3transfer(s3, bucket, tmp_path):
    path = tmp_path / "big.bin"
    body = os.urandom(20 * MIB + 5)
    path.write_bytes(body)
    s3.upload_file(str(path), bucket, "transfer/big.bin", Config=TransferConfig(multipart_chunksize=8 * MIB))
    head = s3.head_object(Bucket=bucket, Key="transfer/big.bin")
    assert head["ContentLength"] == len(body)
    assert head["ETag"].endswith('-3"')
    out = tmp_path / "back.bin"
    s3.download_file(bucket, "transfer/big.bin", str(out))
    assert out.read_bytes() == body


def test_cli_cp_20_mib(aws_cli, s3, bucket, tmp_path):
    path = tmp_path / "twenty.bin"
    body = os.urandom(20 * MIB)
    path.write_bytes(body)
    aws_cli("s3", "cp", str(path), f"s3://{bucket}/cli/twenty.bin")
    head = s3.head_object(Bucket=bucket, Key="cli/twenty.bin")
    assert head["ContentLength"] == len(body)
    assert "-" in head["ETag"], "the CLI uploads files above 8 MiB in parts"
    down = tmp_path / "down.bin"
    aws_cli("s3", "cp", f"s3://{bucket}/cli/twenty.bin", str(down))
    assert down.read_bytes() == body
