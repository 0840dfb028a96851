"""Multipart upload against the real server: boto3's low-level calls and
their errors, s3transfer (upload_file / download_file), UploadPartCopy,
GET/HEAD by partNumber, and the aws CLI (multipart above its 8 MiB
threshold, `s3 sync` of many small files)."""

from __future__ import annotations

import filecmp
import hashlib
import os

import pytest
from boto3.s3.transfer import TransferConfig

from s3util import crc32_b64, expect_error, force_trailer_checksums

MIB = 1024 * 1024


def multipart_etag(parts: list[bytes]) -> str:
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


def upload_parts(s3, bucket: str, key: str, parts: list[bytes], **create) -> tuple[str, list[dict]]:
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    done = []
    for number, data in enumerate(parts, start=1):
        got = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
        done.append({"PartNumber": number, "ETag": got["ETag"]})
    return upload_id, done


def test_low_level_multipart_upload(s3, bucket):
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), os.urandom(123_457)]
    upload = s3.create_multipart_upload(
        Bucket=bucket, Key="mp/obj", ContentType="application/x-mp", Metadata={"m": "1"}, Tagging="a=b"
    )
    upload_id = upload["UploadId"]
    done = []
    for number, data in enumerate(parts, start=1):
        part = s3.upload_part(Bucket=bucket, Key="mp/obj", UploadId=upload_id, PartNumber=number, Body=data)
        assert part["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        # botocore sends CRC32 by default; the server verifies and echoes it.
        assert part["ChecksumCRC32"] == crc32_b64(data)
        done.append({"PartNumber": number, "ETag": part["ETag"], "ChecksumCRC32": part["ChecksumCRC32"]})

    listed = s3.list_parts(Bucket=bucket, Key="mp/obj", UploadId=upload_id)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2, 3]
    assert [p["Size"] for p in listed["Parts"]] == [len(p) for p in parts]
    assert [p["ChecksumCRC32"] for p in listed["Parts"]] == [crc32_b64(p) for p in parts]
    assert listed["IsTruncated"] is False

    uploads = s3.list_multipart_uploads(Bucket=bucket)
    assert [u["UploadId"] for u in uploads.get("Uploads", [])] == [upload_id]

    complete = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp/obj", UploadId=upload_id, MultipartUpload={"Parts": done}
    )
    assert complete["ETag"] == multipart_etag(parts)
    assert complete["Bucket"] == bucket and complete["Key"] == "mp/obj"
    assert complete["Location"].endswith(f"/{bucket}/mp/obj")
    got = s3.get_object(Bucket=bucket, Key="mp/obj")
    assert got["Body"].read() == b"".join(parts)
    assert got["ContentType"] == "application/x-mp"
    assert got["Metadata"] == {"m": "1"}
    assert got["ETag"] == multipart_etag(parts)
    assert s3.get_object_tagging(Bucket=bucket, Key="mp/obj")["TagSet"] == [{"Key": "a", "Value": "b"}]
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_get_and_head_by_part_number(s3, bucket):
    parts = [os.urandom(5 * MIB), os.urandom(1000)]
    upload_id, done = upload_parts(s3, bucket, "pn", parts)
    s3.complete_multipart_upload(Bucket=bucket, Key="pn", UploadId=upload_id, MultipartUpload={"Parts": done})
    total = sum(map(len, parts))

    part2 = s3.get_object(Bucket=bucket, Key="pn", PartNumber=2)
    assert part2["Body"].read() == parts[1]
    assert part2["PartsCount"] == 2
    assert part2["ContentRange"] == f"bytes {5 * MIB}-{total - 1}/{total}"
    assert part2["ResponseMetadata"]["HTTPStatusCode"] == 206

    head1 = s3.head_object(Bucket=bucket, Key="pn", PartNumber=1)
    assert head1["ContentLength"] == 5 * MIB
    assert head1["PartsCount"] == 2
    assert head1["ContentRange"] == f"bytes 0-{5 * MIB - 1}/{total}"

    expect_error("InvalidPartNumber", 416, s3.get_object, Bucket=bucket, Key="pn", PartNumber=3)
    expect_error("InvalidRequest", 400, s3.get_object, Bucket=bucket, Key="pn", PartNumber=1, Range="bytes=0-1")
    expect_error("InvalidArgument", 400, s3.get_object, Bucket=bucket, Key="pn", PartNumber=10001)

    # A single-PUT object is its own part 1.
    s3.put_object(Bucket=bucket, Key="single", Body=b"hello")
    assert s3.get_object(Bucket=bucket, Key="single", PartNumber=1)["Body"].read() == b"hello"


def test_multipart_trailer_checksums(client_factory, bucket):
    client = client_factory()
    force_trailer_checksums(client)
    data = os.urandom(5 * MIB + 1)
    upload_id = client.create_multipart_upload(Bucket=bucket, Key="t", ChecksumAlgorithm="CRC32")["UploadId"]
    part = client.upload_part(
        Bucket=bucket, Key="t", UploadId=upload_id, PartNumber=1, Body=data, ChecksumAlgorithm="CRC32"
    )
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
    expect_error(
        "InvalidArgument", 400, s3.upload_part, Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=10001, Body=b"x"
    )
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
        "InvalidPart", 400, s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 7, "ETag": small["ETag"]}]},
    )
    expect_error(
        "InvalidPart", 400, s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": last["ETag"], "ChecksumCRC32": "AAAAAA=="}]},
    )
    expect_error(
        "InvalidPartOrder", 400, s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": last["ETag"]}, {"PartNumber": 1, "ETag": small["ETag"]}]},
    )
    expect_error(
        "MalformedXML", 400, s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload_id,
        MultipartUpload={"Parts": []},
    )
    # A failed completion leaves the upload usable: the last part alone completes it.
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": last["ETag"]}]}
    )
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"last"
    assert done["ETag"] == multipart_etag([b"last"])
    expect_error("NoSuchUpload", 404, s3.list_parts, Bucket=bucket, Key="k", UploadId=upload_id)


def test_abort(s3, bucket):
    upload_id, _ = upload_parts(s3, bucket, "gone", [b"data"])
    resp = s3.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=upload_id)
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 204
    expect_error("NoSuchUpload", 404, s3.list_parts, Bucket=bucket, Key="gone", UploadId=upload_id)
    expect_error("NoSuchUpload", 404, s3.upload_part, Bucket=bucket, Key="gone", UploadId=upload_id, PartNumber=2, Body=b"x")
    expect_error(
        "NoSuchUpload", 404, s3.complete_multipart_upload, Bucket=bucket, Key="gone", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"0123456789abcdef0123456789abcdef"'}]},
    )
    expect_error("NoSuchUpload", 404, s3.abort_multipart_upload, Bucket=bucket, Key="gone", UploadId=upload_id)
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="gone")


def test_list_parts_paging(s3, bucket):
    upload_id, _ = upload_parts(s3, bucket, "paged", [bytes([i]) * 10 for i in range(7)])
    seen, marker = [], 0
    while True:
        page = s3.list_parts(Bucket=bucket, Key="paged", UploadId=upload_id, MaxParts=3, PartNumberMarker=marker)
        assert page["MaxParts"] == 3
        seen += [p["PartNumber"] for p in page.get("Parts", [])]
        if not page["IsTruncated"]:
            break
        marker = page["NextPartNumberMarker"]
        assert marker == seen[-1]
    assert seen == list(range(1, 8))


def test_list_multipart_uploads(s3, bucket):
    ids = {}
    for key in ["a/1", "a/2", "b/1", "top"]:
        ids[key] = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    second = s3.create_multipart_upload(Bucket=bucket, Key="top")["UploadId"]

    prefixed = s3.list_multipart_uploads(Bucket=bucket, Prefix="a/")
    assert [u["Key"] for u in prefixed["Uploads"]] == ["a/1", "a/2"]

    rolled = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["a/", "b/"]
    assert [u["Key"] for u in rolled["Uploads"]] == ["top", "top"]
    assert {u["UploadId"] for u in rolled["Uploads"]} == {ids["top"], second}

    seen, kwargs = [], {}
    while True:
        page = s3.list_multipart_uploads(Bucket=bucket, MaxUploads=2, **kwargs)
        seen += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
        if not page["IsTruncated"]:
            break
        kwargs = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}
    assert len(seen) == 5 and seen == sorted(seen)

    # Rolled up, one entry a page: a page that ends with a prefix names it
    # as NextKeyMarker, and the next page goes on after it.
    entries, kwargs = [], {}
    for _ in range(20):
        page = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/", MaxUploads=1, **kwargs)
        entries += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        entries += [u["Key"] for u in page.get("Uploads", [])]
        if not page["IsTruncated"]:
            break
        kwargs = {"KeyMarker": page["NextKeyMarker"]}
        if page.get("NextUploadIdMarker"):
            kwargs["UploadIdMarker"] = page["NextUploadIdMarker"]
    assert entries == ["a/", "b/", "top", "top"]


def test_upload_part_copy(s3, bucket):
    source = os.urandom(6 * MIB + 10)
    s3.put_object(Bucket=bucket, Key="src", Body=source)
    etag = s3.head_object(Bucket=bucket, Key="src")["ETag"]
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    first = s3.upload_part_copy(
        Bucket=bucket, Key="dst", UploadId=upload_id, PartNumber=1,
        CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes=0-{5 * MIB - 1}",
        CopySourceIfMatch=etag,
    )["CopyPartResult"]
    assert first["ETag"] == f'"{hashlib.md5(source[:5 * MIB]).hexdigest()}"'
    second = s3.upload_part_copy(
        Bucket=bucket, Key="dst", UploadId=upload_id, PartNumber=2,
        CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes={5 * MIB}-{len(source) - 1}",
    )["CopyPartResult"]
    for bad in [f"bytes=0-{len(source)}", "bytes=5-1", "0-10"]:
        code = "InvalidRange" if bad.startswith("bytes=0") else "InvalidArgument"
        status = 416 if code == "InvalidRange" else 400
        expect_error(
            code, status, s3.upload_part_copy, Bucket=bucket, Key="dst", UploadId=upload_id, PartNumber=3,
            CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=bad,
        )
    expect_error(
        "PreconditionFailed", 412, s3.upload_part_copy, Bucket=bucket, Key="dst", UploadId=upload_id, PartNumber=3,
        CopySource={"Bucket": bucket, "Key": "src"}, CopySourceIfMatch='"0123456789abcdef0123456789abcdef"',
    )
    parts = [{"PartNumber": 1, "ETag": first["ETag"]}, {"PartNumber": 2, "ETag": second["ETag"]}]
    s3.complete_multipart_upload(Bucket=bucket, Key="dst", UploadId=upload_id, MultipartUpload={"Parts": parts})
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == source


def test_complete_if_none_match(s3, bucket):
    s3.put_object(Bucket=bucket, Key="exists", Body=b"old")
    upload_id, done = upload_parts(s3, bucket, "exists", [b"new"])
    expect_error(
        "PreconditionFailed", 412, s3.complete_multipart_upload, Bucket=bucket, Key="exists", UploadId=upload_id,
        MultipartUpload={"Parts": done}, IfNoneMatch="*",
    )
    assert s3.get_object(Bucket=bucket, Key="exists")["Body"].read() == b"old"
    upload_id, done = upload_parts(s3, bucket, "fresh", [b"new"])
    s3.complete_multipart_upload(
        Bucket=bucket, Key="fresh", UploadId=upload_id, MultipartUpload={"Parts": done}, IfNoneMatch="*"
    )
    assert s3.get_object(Bucket=bucket, Key="fresh")["Body"].read() == b"new"


def test_upload_file_with_s3transfer(s3, bucket, tmp_path):
    path = tmp_path / "big.bin"
    body = os.urandom(12 * MIB + 5)
    path.write_bytes(body)
    config = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    s3.upload_file(str(path), bucket, "transfer/big.bin", Config=config)
    head = s3.head_object(Bucket=bucket, Key="transfer/big.bin")
    assert head["ContentLength"] == len(body)
    chunks = [body[i : i + 5 * MIB] for i in range(0, len(body), 5 * MIB)]
    assert head["ETag"] == multipart_etag(chunks)
    out = tmp_path / "back.bin"
    s3.download_file(bucket, "transfer/big.bin", str(out), Config=config)
    assert out.read_bytes() == body


@pytest.mark.timeout(600)
def test_cli_cp_100_mib_both_ways(aws_cli, s3, bucket, tmp_path):
    path = tmp_path / "hundred.bin"
    with open(path, "wb") as f:
        for _ in range(100):
            f.write(os.urandom(MIB))
    aws_cli("s3", "cp", str(path), f"s3://{bucket}/cli/hundred.bin", timeout=500)
    head = s3.head_object(Bucket=bucket, Key="cli/hundred.bin")
    assert head["ContentLength"] == 100 * MIB
    assert head["ETag"].endswith('-13"'), "the CLI uploads 8 MiB parts above 8 MiB"
    down = tmp_path / "down.bin"
    aws_cli("s3", "cp", f"s3://{bucket}/cli/hundred.bin", str(down), timeout=500)
    assert filecmp.cmp(path, down, shallow=False)


@pytest.mark.timeout(900)
def test_cli_sync_many_small_files(aws_cli, s3, bucket, tmp_path):
    src = tmp_path / "tree"
    for i in range(1050):
        d = src / f"d{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:04}.txt").write_bytes(f"file {i}\n".encode() * (i % 5 + 1))
    aws_cli("s3", "sync", str(src), f"s3://{bucket}/tree", timeout=800)
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="tree/"):
        keys += [o["Key"] for o in page.get("Contents", [])]
    assert len(keys) == 1050
    back = tmp_path / "back"
    aws_cli("s3", "sync", f"s3://{bucket}/tree", str(back), timeout=800)
    cmp = filecmp.dircmp(src, back)
    assert not cmp.left_only and not cmp.right_only
    for sub in cmp.subdirs.values():
        _, mismatch, errors = filecmp.cmpfiles(sub.left, sub.right, sub.common_files, shallow=False)
        assert not mismatch and not errors
    # A second sync finds nothing to do.
    again = aws_cli("s3", "sync", str(src), f"s3://{bucket}/tree", timeout=800)
    assert "upload:" not in again.stdout


def test_repeated_complete_gets_the_same_answer(s3, bucket):
    """An SDK whose CompleteMultipartUpload answer was lost sends it again:
    S3 answers 200 with the same ETag (and checksum) when the part list is
    the same, whatever happened to the key since; another list of an upload
    that is gone is NoSuchUpload. The retry writes nothing."""
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="again", ChecksumAlgorithm="CRC32")["UploadId"]
    parts = []
    for number, data in enumerate([b"a" * (5 << 20), b"tail"], start=1):
        got = s3.upload_part(
            Bucket=bucket, Key="again", UploadId=upload_id, PartNumber=number, Body=data, ChecksumAlgorithm="CRC32"
        )
        parts.append({"PartNumber": number, "ETag": got["ETag"], "ChecksumCRC32": got["ChecksumCRC32"]})
    complete = dict(Bucket=bucket, Key="again", UploadId=upload_id, MultipartUpload={"Parts": parts})
    first = s3.complete_multipart_upload(**complete)
    second = s3.complete_multipart_upload(**complete)
    assert second["ResponseMetadata"]["HTTPStatusCode"] == 200
    fields = ("Bucket", "Key", "Location", "ETag", "ChecksumCRC32", "ChecksumType")
    assert {f: second.get(f) for f in fields} == {f: first.get(f) for f in fields}
    assert first["ChecksumCRC32"] and first["ETag"].endswith('-2"')

    # Another part list is not a retry of this completion.
    expect_error(
        "NoSuchUpload", 404, s3.complete_multipart_upload, Bucket=bucket, Key="again", UploadId=upload_id,
        MultipartUpload={"Parts": parts[1:]},
    )
    # Overwritten, then deleted since: the retry still succeeds with the
    # first answer, and changes nothing.
    s3.put_object(Bucket=bucket, Key="again", Body=b"newer")
    assert s3.complete_multipart_upload(**complete)["ETag"] == first["ETag"]
    assert s3.get_object(Bucket=bucket, Key="again")["Body"].read() == b"newer"
    s3.delete_object(Bucket=bucket, Key="again")
    assert s3.complete_multipart_upload(**complete)["ETag"] == first["ETag"]
    expect_error("NoSuchKey", 404, s3.get_object, Bucket=bucket, Key="again")
    expect_error("NoSuchUpload", 404, s3.list_parts, Bucket=bucket, Key="again", UploadId=upload_id)
