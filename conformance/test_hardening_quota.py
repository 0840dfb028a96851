"""Quotas count multipart parts (issue 11): the parts of unfinished uploads
count in the tenant's usage the moment they are stored, through UploadPart
and UploadPartCopy alike; a re-uploaded part number replaces its bytes;
abort gives them back; completion turns them into the object's bytes
(counted once, parts left out freed). A part that would pass the byte
quota is refused with QuotaExceeded and stores nothing. A tenant's open
multipart uploads are capped (max_open_uploads).

Starts its own `laneway serve` with the admin API and provisions tenants
with quotas through it."""

from __future__ import annotations

import os

import pytest

from conftest import admin_env
from s3util import expect_error

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own laneway; not with LANEWAY_ENDPOINT"
)

MIB = 1 << 20


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from admin_env(tmp_path_factory, "hardening-quota")


def tenant(env, name: str, **limits):
    t = env.api("POST", "/v1/tenants", {"name": name, **limits})
    return env.client(t["key"])


def usage(env, name: str) -> dict:
    return env.api("GET", f"/v1/tenants/{name}/usage")


def data_bytes(env) -> int:
    """Bytes in the server's data directory (volumes and indexes)."""
    data_dir = env.proc.cmd[env.proc.cmd.index("--data-dir") + 1]
    total = 0
    for root, _, files in os.walk(data_dir):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def test_parts_count_against_the_byte_quota(env):
    """The issue's scenario: 8 MiB quota, 4 MiB stored. Parts are counted
    as they are stored, so they cannot pass the quota through UploadPart or
    UploadPartCopy, and a refused part stores nothing."""
    c = tenant(env, "tq-parts", quota_bytes=8 * MIB)
    c.create_bucket(Bucket="qta")
    c.put_object(Bucket="qta", Key="stored", Body=b"s" * (4 * MIB))
    up = c.create_multipart_upload(Bucket="qta", Key="mp")["UploadId"]
    c.upload_part(Bucket="qta", Key="mp", UploadId=up, PartNumber=1, Body=b"a" * (3 * MIB))
    u = usage(env, "tq-parts")
    assert (u["bytes"], u["multipart_bytes"], u["open_uploads"]) == (7 * MIB, 3 * MIB, 1), u

    before = data_bytes(env)
    for n in range(2, 6):
        expect_error(
            "QuotaExceeded", 403, c.upload_part, Bucket="qta", Key="mp", UploadId=up, PartNumber=n,
            Body=b"b" * (2 * MIB),
        )
        expect_error(
            "QuotaExceeded", 403, c.upload_part_copy, Bucket="qta", Key="mp", UploadId=up, PartNumber=n,
            CopySource={"Bucket": "qta", "Key": "stored"},
        )
    assert usage(env, "tq-parts")["bytes"] == 7 * MIB
    assert data_bytes(env) - before < 2 * MIB, "refused parts were stored"
    parts = c.list_parts(Bucket="qta", Key="mp", UploadId=up).get("Parts", [])
    assert [p["PartNumber"] for p in parts] == [1]

    # A part number uploaded again replaces its bytes: 3 MiB -> 1 MiB.
    c.upload_part(Bucket="qta", Key="mp", UploadId=up, PartNumber=1, Body=b"c" * MIB)
    assert usage(env, "tq-parts")["bytes"] == 5 * MIB
    # UploadPartCopy counts like UploadPart: 3 MiB of the stored object.
    c.upload_part_copy(
        Bucket="qta", Key="mp", UploadId=up, PartNumber=2, CopySource={"Bucket": "qta", "Key": "stored"},
        CopySourceRange=f"bytes=0-{3 * MIB - 1}",
    )
    assert usage(env, "tq-parts")["bytes"] == 8 * MIB
    expect_error("QuotaExceeded", 403, c.put_object, Bucket="qta", Key="one-more", Body=b"x")
    # Abort gives the parts back.
    c.abort_multipart_upload(Bucket="qta", Key="mp", UploadId=up)
    u = usage(env, "tq-parts")
    assert (u["bytes"], u["multipart_bytes"], u["open_uploads"]) == (4 * MIB, 0, 0), u
    c.put_object(Bucket="qta", Key="fits-now", Body=b"x" * (3 * MIB))


def test_completion_counts_the_object_once_and_frees_unlisted_parts(env):
    c = tenant(env, "tq-complete", quota_bytes=12 * MIB)
    c.create_bucket(Bucket="qta")
    up = c.create_multipart_upload(Bucket="qta", Key="obj")["UploadId"]
    etags = {}
    for n, size in [(1, 5 * MIB), (2, 5 * MIB), (3, MIB)]:
        etags[n] = c.upload_part(Bucket="qta", Key="obj", UploadId=up, PartNumber=n, Body=bytes([n]) * size)["ETag"]
    assert usage(env, "tq-complete")["bytes"] == 11 * MIB
    # At the quota, a completion still succeeds: it adds no bytes.
    done = c.complete_multipart_upload(
        Bucket="qta", Key="obj", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etags[n]} for n in (1, 3)]},
    )
    assert done["ETag"].endswith('-2"')
    u = usage(env, "tq-complete")
    assert (u["bytes"], u["objects"], u["multipart_bytes"], u["open_uploads"]) == (6 * MIB, 1, 0, 0), u
    assert c.head_object(Bucket="qta", Key="obj")["ContentLength"] == 6 * MIB
    # Part 2 was freed: 6 MiB of room again.
    up2 = c.create_multipart_upload(Bucket="qta", Key="next")["UploadId"]
    c.upload_part(Bucket="qta", Key="next", UploadId=up2, PartNumber=1, Body=b"n" * (6 * MIB))
    expect_error(
        "QuotaExceeded", 403, c.upload_part, Bucket="qta", Key="next", UploadId=up2, PartNumber=2, Body=b"x"
    )
    c.abort_multipart_upload(Bucket="qta", Key="next", UploadId=up2)


def test_open_uploads_are_capped_per_tenant(env):
    c = tenant(env, "tq-cap", max_open_uploads=3)
    c.create_bucket(Bucket="qta")
    c.create_bucket(Bucket="qtb")
    ups = [c.create_multipart_upload(Bucket=b, Key=f"k{i}")["UploadId"] for i, b in enumerate(["qta", "qtb", "qta"])]
    err = expect_error("QuotaExceeded", 403, c.create_multipart_upload, Bucket="qtb", Key="k3")
    assert "max_open_uploads" in err["Error"]["Message"]
    assert usage(env, "tq-cap")["open_uploads"] == 3
    # Aborting or completing one makes room for another.
    c.abort_multipart_upload(Bucket="qta", Key="k0", UploadId=ups[0])
    up = c.create_multipart_upload(Bucket="qtb", Key="k3")["UploadId"]
    expect_error("QuotaExceeded", 403, c.create_multipart_upload, Bucket="qta", Key="k4")
    etag = c.upload_part(Bucket="qtb", Key="k3", UploadId=up, PartNumber=1, Body=b"x")["ETag"]
    c.complete_multipart_upload(
        Bucket="qtb", Key="k3", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}
    )
    c.create_multipart_upload(Bucket="qta", Key="k4")
    # The cap can be changed; the default is 10,000.
    env.api("PATCH", "/v1/tenants/tq-cap", {"max_open_uploads": None})
    assert usage(env, "tq-cap")["max_open_uploads"] == 10_000
    c.create_multipart_upload(Bucket="qta", Key="k5")
    # Other tenants are not affected by this one's cap.
    other = tenant(env, "tq-cap-other", max_open_uploads=1)
    other.create_bucket(Bucket="qto")
    other.create_multipart_upload(Bucket="qto", Key="k")


def test_concurrent_parts_never_pass_the_quota(env):
    """Eight 3 MiB parts race for 10 MiB: reservations are taken before a
    byte is stored and given back on failure, so at most three win and
    usage is exactly what won."""
    from concurrent.futures import ThreadPoolExecutor

    name = "tq-race"
    t = env.api("POST", "/v1/tenants", {"name": name, "quota_bytes": 10 * MIB})
    c = env.client(t["key"])
    c.create_bucket(Bucket="qtr")
    ups = [c.create_multipart_upload(Bucket="qtr", Key=f"k{i % 2}")["UploadId"] for i in range(2)]

    def one(i: int) -> bool:
        client = env.client(t["key"])
        try:
            client.upload_part(
                Bucket="qtr", Key=f"k{i % 2}", UploadId=ups[i % 2], PartNumber=i + 1, Body=bytes([i]) * (3 * MIB)
            )
            return True
        except Exception as e:  # noqa: BLE001 - the error code is checked
            assert getattr(e, "response", {}).get("Error", {}).get("Code") == "QuotaExceeded", e
            return False

    with ThreadPoolExecutor(max_workers=8) as pool:
        won = sum(pool.map(one, range(8)))
    assert 1 <= won <= 3, won
    u = usage(env, name)
    assert u["bytes"] == u["multipart_bytes"] == won * 3 * MIB, u
    for i, up in enumerate(ups):
        c.abort_multipart_upload(Bucket="qtr", Key=f"k{i}", UploadId=up)
    assert usage(env, name)["bytes"] == 0
