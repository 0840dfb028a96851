"""Listing: ListObjectsV2 (prefix, delimiter, start-after, max-keys,
continuation tokens, encoding-type=url), ListObjects v1 (Marker/NextMarker)
and ListObjectVersions on an unversioned bucket.

Every listing is compared to an expectation computed here from the key set,
following S3's rules: keys in UTF-8 binary order; with a delimiter, keys
that contain it after the prefix roll up into one CommonPrefix each; a
roll-up counts as one entry for MaxKeys and is placed where its prefix sorts;
StartAfter/Marker skip every entry (key or roll-up) that is not greater."""

from __future__ import annotations

import concurrent.futures

import pytest

from conftest import unique_bucket_name
from s3util import capture_raw_responses, expect_error

PUT_THREADS = 8  # below botocore's default connection pool size (10)


def _build_keys() -> list[str]:
    keys = [f"flat-{i:04d}" for i in range(520)]
    keys += [f"dir{a}/sub{b}/file-{c:02d}.txt" for a in range(4) for b in range(5) for c in range(20)]
    keys += [f"deep/a/b/c/d/e-{i:03d}" for i in range(150)]
    keys += [f"spaces/with space {i}" for i in range(40)]
    keys += [f"unicode/héllo-{i}" for i in range(30)]
    keys += [f"unicode/日本語/{i}" for i in range(30)]
    keys += [f"emoji/🎉-{i}" for i in range(20)]
    keys += [f"special/plus+{i}" for i in range(20)]
    keys += [f"special/percent%25-{i}" for i in range(20)]
    keys += [f"special/amp&lt<gt>-{i}" for i in range(20)]
    keys += ["dir0/", "dir0/sub0/", "z-last", "Z-upper", "~tilde", "0-digit", "a/b", "a-b", "a.b"]
    return keys


KEYS = _build_keys()
assert len(KEYS) >= 1200 and len(set(KEYS)) == len(KEYS)


def _utf8(s: str) -> bytes:
    return s.encode("utf-8")


def expected_entries(keys, prefix="", delimiter=None, start_after=None):
    """The ordered entries S3 returns: ("key", k) or ("prefix", p)."""
    entries = []
    seen = set()
    for key in sorted(keys, key=_utf8):
        if not key.startswith(prefix):
            continue
        entry = ("key", key)
        if delimiter:
            cut = key.find(delimiter, len(prefix))
            if cut >= 0:
                entry = ("prefix", key[: cut + len(delimiter)])
        if entry in seen:
            continue
        if start_after is not None and _utf8(entry[1]) <= _utf8(start_after):
            continue
        seen.add(entry)
        entries.append(entry)
    return entries


def entries_of(page) -> list[tuple[str, str]]:
    """The entries of one response page, merged into S3's order."""
    got = [("key", o["Key"]) for o in page.get("Contents", [])]
    got += [("prefix", p["Prefix"]) for p in page.get("CommonPrefixes", [])]
    return sorted(got, key=lambda e: _utf8(e[1]))


@pytest.fixture(scope="module")
def listing_bucket(s3):
    name = unique_bucket_name("listing")
    s3.create_bucket(Bucket=name)

    def put(key):
        s3.put_object(Bucket=name, Key=key, Body=_utf8(key))

    with concurrent.futures.ThreadPoolExecutor(PUT_THREADS) as pool:
        for f in [pool.submit(put, k) for k in KEYS]:
            f.result()
    return name


def paginate_v2(s3, bucket, page_size=None, **params):
    paginator = s3.get_paginator("list_objects_v2")
    config = {"PageSize": page_size} if page_size else {}
    return list(paginator.paginate(Bucket=bucket, PaginationConfig=config, **params))


def check_pages(pages, expected, max_keys):
    got = []
    for i, page in enumerate(pages):
        entries = entries_of(page)
        assert page["KeyCount"] == len(entries), f"page {i}: KeyCount"
        assert len(entries) <= max_keys, f"page {i}: {len(entries)} entries > MaxKeys {max_keys}"
        last = i == len(pages) - 1
        assert page["IsTruncated"] is (not last), f"page {i}: IsTruncated"
        if not last:
            assert len(entries) == max_keys, f"page {i}: a truncated page is full"
            assert page.get("NextContinuationToken")
        got += entries
    assert got == expected


def test_list_all_default_page_size(s3, listing_bucket):
    pages = paginate_v2(s3, listing_bucket)
    expected = expected_entries(KEYS)
    assert len(pages) == -(-len(expected) // 1000)
    assert pages[0]["MaxKeys"] == 1000
    check_pages(pages, expected, 1000)
    first = pages[0]["Contents"][0]
    assert first["Size"] == len(_utf8(first["Key"]))
    assert first["ETag"].startswith('"') and len(first["ETag"]) == 34
    assert first.get("StorageClass") == "STANDARD"
    assert "LastModified" in first


@pytest.mark.parametrize("page_size", [1, 7, 100, 999])
def test_list_paginated(s3, listing_bucket, page_size):
    prefix = "dir1/" if page_size == 1 else ""
    pages = paginate_v2(s3, listing_bucket, page_size=page_size, Prefix=prefix)
    check_pages(pages, expected_entries(KEYS, prefix=prefix), page_size)


@pytest.mark.parametrize(
    "prefix,delimiter",
    [
        ("", "/"),
        ("dir1/", "/"),
        ("dir1/sub2/", "/"),
        ("dir1/sub2/", None),
        ("dir", "/"),  # prefix that is not a whole path segment
        ("deep/", "/"),
        ("deep/a/b/", None),
        ("unicode/", "/"),
        ("unicode/日本語/", "/"),
        ("spaces/with space 1", None),
        ("special/", "/"),
        ("special/amp&lt<", None),
        ("emoji/🎉", None),
        ("", "-"),  # any string can be a delimiter
        ("dir2/", "/file-"),  # multi-character delimiter
        ("no-such-prefix/", "/"),
        ("dir0/", None),  # includes the 'dir0/' marker key itself
    ],
)
def test_list_prefix_delimiter(s3, listing_bucket, prefix, delimiter):
    params = {"Prefix": prefix}
    if delimiter:
        params["Delimiter"] = delimiter
    expected = expected_entries(KEYS, prefix=prefix, delimiter=delimiter)
    for page_size in (1000, 5):
        pages = paginate_v2(s3, listing_bucket, page_size=page_size, **params)
        check_pages(pages, expected, page_size)
        assert pages[0].get("Prefix", "") == prefix
        if delimiter:
            assert pages[0]["Delimiter"] == delimiter


@pytest.mark.parametrize(
    "start_after,prefix,delimiter",
    [
        ("flat-0199", "", None),
        ("flat-0199", "", "/"),
        ("dir2/sub3/file-07.txt", "", None),
        ("dir2/sub3/file-07.txt", "dir2/", None),
        ("a", "", "/"),  # before everything with an 'a'
        ("dir1/", "", "/"),  # equal to a roll-up: that roll-up is skipped
        ("unicode/héllo-5", "unicode/", None),
        ("\U0010ffff", "", None),  # after every key
        ("", "", None),
    ],
)
def test_list_start_after(s3, listing_bucket, start_after, prefix, delimiter):
    params = {"StartAfter": start_after, "Prefix": prefix}
    if delimiter:
        params["Delimiter"] = delimiter
    expected = expected_entries(KEYS, prefix=prefix, delimiter=delimiter, start_after=start_after or None)
    pages = paginate_v2(s3, listing_bucket, page_size=250, **params)
    check_pages(pages, expected, 250)
    if start_after:
        assert pages[0].get("StartAfter") == start_after


def test_list_max_keys_single_page(s3, listing_bucket):
    resp = s3.list_objects_v2(Bucket=listing_bucket, MaxKeys=3, Prefix="flat-")
    assert [o["Key"] for o in resp["Contents"]] == ["flat-0000", "flat-0001", "flat-0002"]
    assert resp["IsTruncated"] is True
    assert resp["MaxKeys"] == 3
    nxt = s3.list_objects_v2(Bucket=listing_bucket, MaxKeys=3, Prefix="flat-", ContinuationToken=resp["NextContinuationToken"])
    assert [o["Key"] for o in nxt["Contents"]] == ["flat-0003", "flat-0004", "flat-0005"]
    assert nxt["ContinuationToken"] == resp["NextContinuationToken"]


def test_list_max_keys_above_1000_is_capped(s3, listing_bucket):
    resp = s3.list_objects_v2(Bucket=listing_bucket, MaxKeys=5000)
    assert resp["KeyCount"] == 1000
    assert resp["IsTruncated"] is True


def test_list_garbled_continuation_token(s3, listing_bucket):
    expect_error(
        "InvalidArgument", 400, s3.list_objects_v2, Bucket=listing_bucket, ContinuationToken="not-a-real-token!!"
    )


def test_list_v2_encoding_type_url_on_the_wire(client_factory, listing_bucket):
    # boto3 sends encoding-type=url by default and decodes the answer only if
    # the response says <EncodingType>url</EncodingType>.
    client = client_factory()
    raw = capture_raw_responses(client, "ListObjectsV2")
    resp = client.list_objects_v2(Bucket=listing_bucket, Prefix="spaces/", Delimiter="/", MaxKeys=5)
    assert b"<EncodingType>url</EncodingType>" in raw[-1]
    assert b"with space" not in raw[-1], "keys must be URL-encoded when encoding-type=url"
    assert resp["Contents"][0]["Key"] == "spaces/with space 0"

    resp = client.list_objects_v2(Bucket=listing_bucket, Prefix="special/plus+")
    assert [o["Key"] for o in resp["Contents"]] == sorted((k for k in KEYS if k.startswith("special/plus+")), key=_utf8)


def test_list_v2_without_url_encoding_escapes_xml(client_factory, listing_bucket):
    client = client_factory()

    def drop_encoding_type(params, **_):
        params.pop("EncodingType", None)

    client.meta.events.register_last("before-parameter-build.s3.ListObjectsV2", drop_encoding_type)
    raw = capture_raw_responses(client, "ListObjectsV2")
    resp = client.list_objects_v2(Bucket=listing_bucket, Prefix="special/amp&lt<")
    assert b"EncodingType" not in raw[-1]
    expected = sorted((k for k in KEYS if k.startswith("special/amp&lt<")), key=_utf8)
    assert [o["Key"] for o in resp["Contents"]] == expected
    resp = client.list_objects_v2(Bucket=listing_bucket, Prefix="unicode/日本語/", MaxKeys=2)
    assert [o["Key"] for o in resp["Contents"]] == ["unicode/日本語/0", "unicode/日本語/1"]


def paginate_v1_manually(s3, bucket, max_keys, **params):
    entries, marker, pages = [], None, 0
    while True:
        kwargs = dict(params, MaxKeys=max_keys)
        if marker is not None:
            kwargs["Marker"] = marker
        page = s3.list_objects(Bucket=bucket, **kwargs)
        pages += 1
        got = entries_of(page)
        assert len(got) <= max_keys
        entries += got
        if not page["IsTruncated"]:
            assert len(got) <= max_keys
            break
        assert len(got) == max_keys
        if "Delimiter" in params:
            # With a delimiter S3 always returns NextMarker on a truncated page.
            assert page.get("NextMarker"), "NextMarker missing on a truncated delimited page"
        marker = page.get("NextMarker") or page["Contents"][-1]["Key"]
        if "NextMarker" in page:
            assert page["NextMarker"] == got[-1][1]
        assert pages < 2000
    return entries


def test_list_objects_v1_marker_paging(s3, listing_bucket):
    assert paginate_v1_manually(s3, listing_bucket, 250) == expected_entries(KEYS)


def test_list_objects_v1_delimiter_next_marker(s3, listing_bucket):
    assert paginate_v1_manually(s3, listing_bucket, 5, Delimiter="/") == expected_entries(KEYS, delimiter="/")
    assert paginate_v1_manually(s3, listing_bucket, 3, Prefix="dir3/", Delimiter="/") == expected_entries(
        KEYS, prefix="dir3/", delimiter="/"
    )


def test_list_objects_v1_explicit_marker(s3, listing_bucket):
    resp = s3.list_objects(Bucket=listing_bucket, Marker="flat-0517", Prefix="flat-")
    assert [o["Key"] for o in resp["Contents"]] == ["flat-0518", "flat-0519"]
    assert resp["Marker"] == "flat-0517"
    assert resp["IsTruncated"] is False


def test_list_objects_v1_paginator(s3, listing_bucket):
    pages = list(s3.get_paginator("list_objects").paginate(Bucket=listing_bucket, PaginationConfig={"PageSize": 300}))
    got = [e for p in pages for e in entries_of(p)]
    assert got == expected_entries(KEYS)


def test_list_object_versions_unversioned(s3, bucket):
    for key in ("v/a", "v/b", "v/c d"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    resp = s3.list_object_versions(Bucket=bucket)
    versions = resp["Versions"]
    assert [v["Key"] for v in versions] == ["v/a", "v/b", "v/c d"]
    for v in versions:
        assert v["VersionId"] == "null"
        assert v["IsLatest"] is True
        assert v["Size"] == len(v["Key"].encode())
        assert v["ETag"].startswith('"')
    assert not resp.get("DeleteMarkers")
    assert resp["IsTruncated"] is False

    head = s3.head_object(Bucket=bucket, Key="v/a")
    assert head.get("VersionId") in (None, "null")
    paged = s3.list_object_versions(Bucket=bucket, MaxKeys=2)
    assert [v["Key"] for v in paged["Versions"]] == ["v/a", "v/b"]
    assert paged["IsTruncated"] is True
    assert paged["NextKeyMarker"] == "v/b"
    rest = s3.list_object_versions(Bucket=bucket, MaxKeys=2, KeyMarker=paged["NextKeyMarker"])
    assert [v["Key"] for v in rest["Versions"]] == ["v/c d"]


def test_list_empty_bucket(s3, bucket):
    resp = s3.list_objects_v2(Bucket=bucket)
    assert resp["KeyCount"] == 0
    assert "Contents" not in resp
    assert resp["IsTruncated"] is False
    assert resp["Name"] == bucket
