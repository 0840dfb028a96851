"""Spark (pyspark 3.5.7, Hadoop's S3A connector) against laneway, all
checks in one SparkSession (local[1]; starting Spark is the slow part). Run
by test_spark.py with the Spark venv's interpreter:

    python spark_check.py ENDPOINT ACCESS_KEY SECRET_KEY BUCKET JAR [JAR...]

JARs are hadoop-aws-3.3.1.jar and aws-java-sdk-bundle-1.11.901.jar
(pyspark ships the Hadoop 3.3.4 client they plug into). Each check runs on
its own; the last line of stdout is a JSON object: "checks" names every
check with "ok" or its failure (test_spark.py makes one test of each), and
"large_sha256" is the SHA-256 of the large file's bytes. Exits non-zero
only when Spark itself cannot start.

Checks (all data under s3a://BUCKET/spark/):
- parquet_round_trip: a DataFrame written as Parquet and read back equal;
- partitioned_parent / partitioned_glob: a partitionBy("city") write read
  through its parent directory and through a glob of partition dirs;
- fs_listing: Hadoop FileSystem listStatus / listFiles / getFileStatus;
- large_file: a 12 MiB file through the FileSystem API, above the 5 MiB
  multipart threshold (so S3A uploads it in 5 MiB parts), read back equal.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import traceback
from urllib.parse import urlparse

from pyspark.sql import SparkSession

LARGE_BYTES = 12 * 1024 * 1024
PART_BYTES = "5M"
WRITE_CHUNK = 1024 * 1024


def session(endpoint: str, key: str, secret: str, jars: list[str]) -> SparkSession:
    """The one SparkSession: local, no UI, S3A pointed at laneway."""
    hadoop = {
        "fs.s3a.endpoint": urlparse(endpoint).netloc,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.access.key": key,
        "fs.s3a.secret.key": secret,
        "fs.s3a.multipart.size": PART_BYTES,
        "fs.s3a.multipart.threshold": PART_BYTES,
        "fs.s3a.attempts.maximum": "2",
        "fs.s3a.retry.limit": "2",
    }
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("laneway-s3a")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
    )
    for name, value in hadoop.items():
        builder = builder.config(f"spark.hadoop.{name}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def frame(spark, n: int):
    return spark.range(0, n).selectExpr(
        "id",
        "id * 0.5 AS value",
        "element_at(array('oslo', 'lima', 'pune'), CAST(id % 3 AS INT) + 1) AS city",
    )


def parquet_round_trip(spark, base: str) -> None:
    df = frame(spark, 5000)
    path = f"{base}/table"
    df.write.mode("overwrite").parquet(path)
    back = spark.read.parquet(path)
    assert back.count() == 5000, back.count()
    assert rows(back) == rows(df)


def partitioned_write(spark, base: str):
    df = frame(spark, 3000)
    path = f"{base}/parts"
    df.write.mode("overwrite").partitionBy("city").parquet(path)
    return df, path


def partitioned_parent(spark, base: str) -> None:
    df, path = partitioned_write(spark, base)
    back = spark.read.parquet(path)
    assert sorted(back.columns) == ["city", "id", "value"], back.columns
    assert rows(back.select("id", "value", "city")) == rows(df)
    lima = back.where("city = 'lima'").count()
    assert lima == 1000, lima


def partitioned_glob(spark, base: str) -> None:
    _, path = partitioned_write(spark, base)
    # Two of the three partitions, through a glob of their directories.
    glob = spark.read.option("basePath", path).parquet(f"{path}/city=[lp]*")
    cities = sorted(r.city for r in glob.select("city").distinct().collect())
    assert cities == ["lima", "pune"], cities
    assert glob.count() == 2000, glob.count()


def filesystem(spark, uri: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def fs_listing(spark, base: str) -> None:
    _, parts = partitioned_write(spark, base)
    path, fs = filesystem(spark, parts)
    listed = {s.getPath().getName(): s.isDirectory() for s in fs.listStatus(path)}
    assert listed == {"_SUCCESS": False, "city=lima": True, "city=oslo": True, "city=pune": True}, listed
    assert fs.getFileStatus(path).isDirectory()
    files = fs.listFiles(path, True)
    names = []
    while files.hasNext():
        names.append(files.next().getPath().toString())
    parquet = [n for n in names if n.endswith(".parquet")]
    assert len(parquet) >= 3 and all("/city=" in n for n in parquet), names
    assert not fs.exists(filesystem(spark, f"{base}/nothing-here")[0])


def large_bytes() -> bytes:
    return random.Random(15).randbytes(LARGE_BYTES)


def large_file(spark, base: str) -> None:
    data = large_bytes()
    path, fs = filesystem(spark, f"{base}/large.bin")
    out = fs.create(path, True)
    for at in range(0, len(data), WRITE_CHUNK):
        out.write(bytearray(data[at : at + WRITE_CHUNK]))
    out.close()
    assert fs.getFileStatus(path).getLen() == len(data)
    back = spark.read.format("binaryFile").load(f"{base}/large.bin").select("content").collect()
    assert len(back) == 1
    got = bytes(back[0].content)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()


CHECKS = [parquet_round_trip, partitioned_parent, partitioned_glob, fs_listing, large_file]


def main() -> int:
    endpoint, key, secret, bucket, *jars = sys.argv[1:]
    spark = session(endpoint, key, secret, jars)
    results = {}
    try:
        for check in CHECKS:
            base = f"s3a://{bucket}/spark/{check.__name__}"
            try:
                check(spark, base)
                results[check.__name__] = "ok"
            except Exception:  # noqa: BLE001  (reported per check)
                results[check.__name__] = traceback.format_exc(limit=8)
    finally:
        spark.stop()
    digest = hashlib.sha256(large_bytes()).hexdigest()
    print(json.dumps({"checks": results, "large_sha256": digest}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
