"""Spark's S3A connector against laneway: pyspark 3.5.7 with hadoop-aws
3.3.1 and the AWS Java SDK bundle 1.11.901, from the Spark venv
(`.venv-spark`, jars in `.venv-spark/jars`, both made by scripts/test.sh).

One run of readers/spark_check.py (one SparkSession for every check) per
session; each check it reports is a test here: Parquet written and read
back, a partitioned write read through its parent and through a glob, a
Hadoop FileSystem listing, and a file above the 5 MiB multipart threshold,
which must arrive as a multipart object of 5 MiB parts.

Without Java the tests are skipped, saying so; a missing venv or jar is a
failure (the test command installs them)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import unique_bucket_name

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).parent / "readers" / "spark_check.py"
JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")
CHECKS = ["parquet_round_trip", "partitioned_parent", "partitioned_glob", "fs_listing", "large_file"]
SPARK_TIMEOUT_S = 600


def java_missing() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is None and not (home and (Path(home) / "bin" / "java").exists())


def spark_python() -> Path:
    raw = os.environ.get("LANEWAY_SPARK_PYTHON") or str(REPO / ".venv-spark" / "bin" / "python")
    py = Path(raw)
    if not py.exists():
        pytest.fail(f"Spark venv missing ({py}); scripts/test.sh creates it", pytrace=False)
    return py


def spark_jars(py: Path) -> list[str]:
    folder = Path(os.environ.get("LANEWAY_SPARK_JARS") or py.parent.parent / "jars")
    jars = [folder / name for name in JARS]
    missing = [str(j) for j in jars if not j.exists()]
    if missing:
        pytest.fail(f"S3A jars missing: {', '.join(missing)}; scripts/test.sh fetches them", pytrace=False)
    return [str(j) for j in jars]


@pytest.fixture(scope="module")
def spark_run(server, s3):
    """The bucket and the parsed report of one spark_check.py run."""
    if java_missing():
        pytest.skip("Java is not installed (no java on PATH or in JAVA_HOME): the Spark S3A tests need a JRE 17 "
                    "(Debian: apt-get install openjdk-17-jre-headless)")
    py = spark_python()
    jars = spark_jars(py)
    bucket = unique_bucket_name("spark")
    s3.create_bucket(Bucket=bucket)
    proc = subprocess.run(
        [str(py), str(SCRIPT), server.endpoint, server.access_key, server.secret_key, bucket, *jars],
        capture_output=True, text=True, timeout=SPARK_TIMEOUT_S,
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"spark_check.py failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    report = json.loads(lines[-1])
    return bucket, report


@pytest.mark.parametrize("check", CHECKS)
def test_spark_s3a(spark_run, check):
    _, report = spark_run
    assert report["checks"].get(check) == "ok", report["checks"].get(check, "not run")


def test_spark_large_file_is_multipart_in_5_mib_parts(spark_run, s3):
    bucket, report = spark_run
    assert report["checks"]["large_file"] == "ok"
    key = "spark/large_file/large.bin"
    head = s3.head_object(Bucket=bucket, Key=key)
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]
    first = s3.head_object(Bucket=bucket, Key=key, PartNumber=1)
    assert first["ContentLength"] == 5 * 1024 * 1024
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == report["large_sha256"]


def test_spark_partitioned_write_is_hive_layout(spark_run, s3):
    bucket, report = spark_run
    assert report["checks"]["partitioned_parent"] == "ok"
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="spark/partitioned_parent/parts/", Delimiter="/")
    dirs = sorted(p["Prefix"].rsplit("/", 2)[-2] for p in listed.get("CommonPrefixes", []))
    assert dirs == ["city=lima", "city=oslo", "city=pune"]
    files = [o["Key"] for o in listed.get("Contents", [])]
    assert files == ["spark/partitioned_parent/parts/_SUCCESS"]
