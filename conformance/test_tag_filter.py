"""Listing by tag (`x-laneway-tag-filter`, header or query parameter) with
boto3 against a running server: the answer is standard ListObjectsV2 XML
holding exactly the objects whose tags match, with prefix, start-after,
delimiter, max-keys and continuation tokens; it follows every change of
tags (PutObjectTagging, DeleteObjectTagging, overwrite, delete, multipart,
copy); and a malformed filter is InvalidArgument."""

from __future__ import annotations

import pytest

from s3util import expect_error, tag_filter

N = 60


def tags_of(i: int) -> dict[str, str]:
    tags = {"split": "train" if i % 3 == 0 else "val"}
    if i % 2 == 0:
        tags["quality"] = "good"
    if i % 10 == 0:
        tags["note"] = ""
    return tags


def tagging(tags: dict[str, str]) -> str:
    from urllib.parse import quote

    return "&".join(f"{quote(k)}={quote(v)}" for k, v in tags.items())


def key_of(i: int) -> str:
    return f"images/{i // 20}/{i:03d}.jpg"


@pytest.fixture(scope="module")
def dataset(s3):
    from conftest import unique_bucket_name

    name = unique_bucket_name("tagf")
    s3.create_bucket(Bucket=name)
    for i in range(N):
        s3.put_object(Bucket=name, Key=key_of(i), Body=b"x" * i, Tagging=tagging(tags_of(i)))
    s3.put_object(Bucket=name, Key="other/untagged", Body=b"u")
    yield name
    keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=name) for o in p.get("Contents", [])]
    for k in keys:
        s3.delete_object(Bucket=name, Key=k)
    s3.delete_bucket(Bucket=name)


def expected(pred, prefix: str = "") -> list[str]:
    return sorted(key_of(i) for i in range(N) if pred(tags_of(i)) and key_of(i).startswith(prefix))


def listed(s3, bucket: str, conds, how: str = "header", **kw) -> list[str]:
    with tag_filter(s3, conds, how):
        pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, **kw))
    return [o["Key"] for p in pages for o in p.get("Contents", [])]


@pytest.mark.parametrize("how", ["header", "query"])
def test_pair_filter_pages_through_matching_objects(s3, dataset, how):
    want = expected(lambda t: t["split"] == "train")
    with tag_filter(s3, {"split": "train"}, how):
        pages = list(
            s3.get_paginator("list_objects_v2").paginate(Bucket=dataset, PaginationConfig={"PageSize": 7})
        )
    got = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert got == want
    assert len(pages) == -(-len(want) // 7)
    assert all(p["KeyCount"] == len(p.get("Contents", [])) for p in pages)
    assert [p["IsTruncated"] for p in pages] == [True] * (len(pages) - 1) + [False]
    # Sizes and ETags are those of the plain listing.
    plain = {o["Key"]: o for o in s3.list_objects_v2(Bucket=dataset, Prefix="images/")["Contents"]}
    for o in (o for p in pages for o in p["Contents"]):
        assert (o["Size"], o["ETag"]) == (plain[o["Key"]]["Size"], plain[o["Key"]]["ETag"])


@pytest.mark.parametrize("how", ["header", "query"])
def test_several_conditions_all_must_match(s3, dataset, how):
    assert listed(s3, dataset, {"split": "train", "quality": "good"}, how) == expected(
        lambda t: t["split"] == "train" and t.get("quality") == "good"
    )
    # A key alone means the tag exists; an empty value is matched exactly.
    assert listed(s3, dataset, {"quality": None}, how) == expected(lambda t: "quality" in t)
    assert listed(s3, dataset, {"note": ""}, how) == expected(lambda t: t.get("note") == "")
    assert listed(s3, dataset, {"split": "test"}, how) == []


def test_filter_with_prefix_start_after_and_delimiter(s3, dataset):
    want = expected(lambda t: t["split"] == "val", prefix="images/1/")
    assert listed(s3, dataset, {"split": "val"}, Prefix="images/1/") == want
    assert listed(s3, dataset, {"split": "val"}, Prefix="images/1/", StartAfter=want[3]) == want[4:]
    with tag_filter(s3, {"quality": "good"}):
        page = s3.list_objects_v2(Bucket=dataset, Prefix="images/", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["images/0/", "images/1/", "images/2/"]
    assert "Contents" not in page
    # Only prefixes that hold a match roll up.
    with tag_filter(s3, {"split": "train"}):
        top = s3.list_objects_v2(Bucket=dataset, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["images/"]


def test_filter_follows_every_change_of_tags(s3, bucket):
    s3.put_object(Bucket=bucket, Key="a", Body=b"1", Tagging="stage=raw")
    s3.put_object(Bucket=bucket, Key="b", Body=b"2", Tagging="stage=raw")
    assert listed(s3, bucket, {"stage": "raw"}) == ["a", "b"]
    s3.put_object_tagging(Bucket=bucket, Key="a", Tagging={"TagSet": [{"Key": "stage", "Value": "clean"}]})
    assert listed(s3, bucket, {"stage": "raw"}) == ["b"]
    assert listed(s3, bucket, {"stage": "clean"}) == ["a"]
    s3.delete_object_tagging(Bucket=bucket, Key="a")
    assert listed(s3, bucket, {"stage": None}) == ["b"]
    s3.put_object(Bucket=bucket, Key="b", Body=b"3")  # an overwrite without tags drops them
    assert listed(s3, bucket, {"stage": None}) == []
    s3.put_object(Bucket=bucket, Key="c", Body=b"4", Tagging="stage=raw")
    s3.delete_object(Bucket=bucket, Key="c")
    assert listed(s3, bucket, {"stage": None}) == []
    # Multipart uploads and copies carry their tags into the index too.
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", Tagging="stage=mp")["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=1, Body=b"p")["ETag"]
    s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}
    )
    s3.copy_object(
        Bucket=bucket, Key="cp", CopySource=f"{bucket}/mp", TaggingDirective="REPLACE", Tagging="stage=copy"
    )
    s3.copy_object(Bucket=bucket, Key="cp2", CopySource=f"{bucket}/mp")  # COPY keeps the source's tags
    assert listed(s3, bucket, {"stage": "mp"}) == ["cp2", "mp"]
    assert listed(s3, bucket, {"stage": "copy"}) == ["cp"]


@pytest.mark.parametrize("bad", ["=v", "a=1&a=2", "k" * 129, "&".join(f"k{i}" for i in range(11))])
def test_malformed_filters_are_invalid_argument(s3, bucket, bad):
    with tag_filter(s3, bad):
        expect_error("InvalidArgument", 400, s3.list_objects_v2, Bucket=bucket)


def test_header_and_query_must_agree(s3, bucket):
    with tag_filter(s3, "a=1", "header"), tag_filter(s3, "a=2", "query"):
        expect_error("InvalidArgument", 400, s3.list_objects_v2, Bucket=bucket)


def test_v1_and_versions_listings_filter_too(s3, dataset):
    want = expected(lambda t: t["split"] == "train")
    with tag_filter(s3, {"split": "train"}):
        v1 = [o["Key"] for p in s3.get_paginator("list_objects").paginate(Bucket=dataset) for o in p["Contents"]]
        vs = [
            o["Key"]
            for p in s3.get_paginator("list_object_versions").paginate(Bucket=dataset)
            for o in p.get("Versions", [])
        ]
    assert v1 == want
    assert vs == want


def test_laneway_tags_cli_lists_and_runs_jobs(server, s3, bucket):
    import json
    import os
    import subprocess

    from conftest import require_binary

    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"d/{i}", Body=b"x", Tagging="split=train" if i < 3 else "split=val")
    env = dict(os.environ, AWS_ENDPOINT_URL=server.endpoint, AWS_ACCESS_KEY_ID=server.access_key,
               AWS_SECRET_ACCESS_KEY=server.secret_key)

    def tags(*args: str) -> str:
        proc = subprocess.run([str(require_binary()), "tags", *args], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert tags("list", bucket, "--filter", "split=train").split() == ["d/0", "d/1", "d/2"]
    state = json.loads(tags("job", "start", bucket, "--filter", "split=val", "--set", "q=low", "--wait"))
    assert (state["state"], state["changed"]) == ("done", 2)
    assert tags("list", bucket, "--filter", "q=low&split", "--prefix", "d/").split() == ["d/3", "d/4"]
    listing = json.loads(tags("job", "status", bucket))
    assert [j["id"] for j in listing["jobs"]] == [state["id"]]
