"""Data tools reading and writing laneway: pyarrow's S3FileSystem (the AWS
C++ SDK) writing a partitioned multi-file parquet dataset and reading it
back, whole and filtered; "directory" prefixes (HEAD of a prefix, zero-byte
directory markers); s3fs (aiobotocore) listing, opening and reading, and
removing a bucket with rm(recursive=True).

A reader that cannot be imported fails its test with the reason: a missing
client is never a silent pass."""

from __future__ import annotations

import importlib
import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

from s3util import expect_error


def need(module: str, why: str = ""):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.fail(f"{module} is not installed ({e}); install conformance/requirements.txt. {why}", pytrace=False)


def arrow_fs(server):
    pafs = need("pyarrow.fs")
    host = urlparse(server.endpoint).netloc
    return pafs.S3FileSystem(
        endpoint_override=host,
        scheme="http",
        access_key=server.access_key,
        secret_key=server.secret_key,
        region=server.region,
    )


def test_pyarrow_parquet_dataset_round_trip(server, s3, bucket):
    pa = need("pyarrow")
    ds = need("pyarrow.dataset")
    fs = arrow_fs(server)
    n = 3000
    table = pa.table(
        {
            "id": list(range(n)),
            "city": [["oslo", "lima", "pune"][i % 3] for i in range(n)],
            "value": [i * 0.5 for i in range(n)],
        }
    )
    ds.write_dataset(
        table,
        f"{bucket}/events",
        filesystem=fs,
        format="parquet",
        partitioning=["city"],
        partitioning_flavor="hive",
        max_rows_per_file=600,
        max_rows_per_group=600,
    )
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="events/").get("Contents", [])]
    parquet = [k for k in keys if k.endswith(".parquet")]
    assert len(parquet) >= 6, keys
    assert {k.split("/")[1] for k in parquet} == {"city=oslo", "city=lima", "city=pune"}

    dataset = ds.dataset(f"{bucket}/events", filesystem=fs, format="parquet", partitioning="hive")
    back = dataset.to_table().sort_by("id")
    assert back.num_rows == n
    assert back.column("id").to_pylist() == list(range(n))
    assert back.column("value").to_pylist() == [i * 0.5 for i in range(n)]

    lima = dataset.to_table(filter=(ds.field("city") == "lima") & (ds.field("id") < 300))
    assert sorted(lima.column("id").to_pylist()) == [i for i in range(300) if i % 3 == 1]


def test_pyarrow_directories(server, s3, bucket):
    pafs = need("pyarrow.fs")
    fs = arrow_fs(server)
    fs.create_dir(f"{bucket}/made/by/arrow")
    info = fs.get_file_info(f"{bucket}/made/by/arrow")
    assert info.type == pafs.FileType.Directory
    with fs.open_output_stream(f"{bucket}/made/file.txt") as out:
        out.write(b"hello from arrow")
    with fs.open_input_file(f"{bucket}/made/file.txt") as f:
        assert f.read() == b"hello from arrow"
        f.seek(6)
        assert f.read(4) == b"from"
    listed = fs.get_file_info(pafs.FileSelector(f"{bucket}/made", recursive=True))
    paths = {i.path: i.type for i in listed}
    assert paths[f"{bucket}/made/file.txt"] == pafs.FileType.File
    assert paths[f"{bucket}/made/by"] == pafs.FileType.Directory
    assert fs.get_file_info(f"{bucket}/nothing-here").type == pafs.FileType.NotFound


def test_directory_markers_and_prefix_head(s3, bucket):
    s3.put_object(Bucket=bucket, Key="dir/", Body=b"")
    s3.put_object(Bucket=bucket, Key="dir/child.txt", Body=b"child")
    marker = s3.head_object(Bucket=bucket, Key="dir/")
    assert marker["ContentLength"] == 0
    assert s3.get_object(Bucket=bucket, Key="dir/")["Body"].read() == b""
    # A prefix is not an object.
    expect_error("404", 404, s3.head_object, Bucket=bucket, Key="dir")
    listed = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["dir/"]
    inside = s3.list_objects_v2(Bucket=bucket, Prefix="dir/", Delimiter="/")
    assert [o["Key"] for o in inside["Contents"]] == ["dir/", "dir/child.txt"]


READERS = Path(__file__).parent / "readers"


def readers_python() -> str:
    """The readers venv's interpreter (made by scripts/test.sh); missing is a failure."""
    py = os.environ.get("LANEWAY_READERS_PYTHON") or str(Path(__file__).parent.parent / ".venv-readers/bin/python")
    if not Path(py).exists():
        pytest.fail(f"readers venv missing ({py}); scripts/test.sh creates it from conformance/readers/requirements.txt", pytrace=False)
    return py


def run_reader(script: str, *args: str, timeout: int = 300) -> None:
    proc = subprocess.run(
        [readers_python(), str(READERS / script), *args], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"


def test_s3fs_ls_open_read(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="fs/a.txt", Body=b"alpha")
    s3.put_object(Bucket=bucket, Key="fs/sub/b.txt", Body=b"bravo" * 1000)
    doomed = f"{bucket}-rm"
    s3.create_bucket(Bucket=doomed)
    for key in ("x.txt", "deep/er/y.txt"):
        s3.put_object(Bucket=doomed, Key=key, Body=b"gone soon")
    run_reader("s3fs_check.py", server.endpoint, server.access_key, server.secret_key, server.region, bucket, doomed)
    assert s3.get_object(Bucket=bucket, Key="fs/written.bin")["Body"].read() == b"\x00\x01" * 4096
    # rm(bucket, recursive=True) asked GetBucketVersioning, emptied the bucket and removed it.
    expect_error("404", 404, s3.head_bucket, Bucket=doomed)


def test_ray_read_parquet(server, bucket):
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    fs = arrow_fs(server)
    rows = 3000
    for i in range(3):
        part = pa.table({"n": list(range(i * 1000, (i + 1) * 1000))})
        pq.write_table(part, f"{bucket}/ds/part-{i}.parquet", filesystem=fs)
    run_reader("ray_check.py", server.endpoint, server.access_key, server.secret_key, server.region, bucket, str(rows))
