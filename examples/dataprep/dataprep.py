"""A data-prep job on laneway: tag a dataset by rules with bulk tagging
jobs, then read only the selected objects.

1. Upload a small image-metadata dataset as parquet shards, each tagged at
   upload with where it came from (`source=cam0|cam1|cam2`) and a quality
   grade computed from its rows (`quality=good|blurry`).
2. Split by rules, server-side, with one bulk tagging job per rule
   (`POST /{bucket}?x-laneway-tagging-jobs`): good shards of cam0 and cam1
   become `split=train`, good shards of cam2 `split=val`; blurry ones are
   not touched.
3. A reader lists by tag (`x-laneway-tag-filter`, added to boto3's
   ListObjectsV2 by an event hook) and reads only the training shards with
   pyarrow.

Run against a laneway endpoint with the credentials `laneway serve` prints:

    AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=... \\
    AWS_SECRET_ACCESS_KEY=... python examples/dataprep/dataprep.py --bucket dataprep

It prints a JSON summary and exits non-zero if what it read is not what
its rules selected.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from urllib.parse import quote, urlparse

import boto3
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

FILTER_HEADER = "x-laneway-tag-filter"
JOBS = "x-laneway-tagging-jobs"


def shard_rows(i: int) -> pa.Table:
    """Shard i: 100 rows of fake image metadata; every 4th shard is blurry."""
    n = 100
    sharpness = [0.2 if i % 4 == 3 else 0.9] * n
    return pa.table({"image_id": [i * n + r for r in range(n)], "sharpness": sharpness})


def upload(s3, bucket: str, shards: int) -> None:
    s3.create_bucket(Bucket=bucket)
    for i in range(shards):
        table = shard_rows(i)
        buf = io.BytesIO()
        pq.write_table(table, buf)
        mean = sum(table.column("sharpness").to_pylist()) / table.num_rows
        tags = f"source=cam{i % 3}&quality={'good' if mean > 0.5 else 'blurry'}"
        s3.put_object(Bucket=bucket, Key=f"shards/{i:04d}.parquet", Body=buf.getvalue(), Tagging=tags)


class Jobs:
    """Bulk tagging jobs: plain signed HTTP calls (botocore's signer)."""

    def __init__(self, endpoint: str, session: boto3.session.Session):
        self.endpoint = endpoint.rstrip("/")
        creds = session.get_credentials().get_frozen_credentials()
        self.creds = Credentials(creds.access_key, creds.secret_key, creds.token)
        self.region = session.region_name or "us-east-1"

    def _call(self, method: str, bucket: str, body: dict | None = None, job: str | None = None) -> dict:
        import urllib.request

        url = f"{self.endpoint}/{bucket}?{JOBS}" + (f"&id={quote(job)}" if job else "")
        data = json.dumps(body).encode() if body is not None else b""
        req = AWSRequest(method=method, url=url, data=data, headers={"content-type": "application/json"})
        S3SigV4Auth(self.creds, "s3", self.region).add_auth(req)
        http = urllib.request.Request(url, data=data or None, method=method, headers=dict(req.headers))
        with urllib.request.urlopen(http, timeout=60) as resp:
            return json.loads(resp.read() or b"{}")

    def run(self, bucket: str, spec: dict, timeout: float = 300) -> dict:
        """Start a job and wait for it to end; its final state."""
        job = self._call("POST", bucket, spec)["id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self._call("GET", bucket, job=job)
            if state["state"] != "running":
                return state
            time.sleep(0.1)
        raise TimeoutError(f"tagging job {job} still running after {timeout} s")


def list_by_tag(s3, bucket: str, tag_filter: str, prefix: str = "") -> list[str]:
    """Keys of the objects with these tags, over every page."""

    def add_filter(request, **_):
        request.headers[FILTER_HEADER] = tag_filter

    s3.meta.events.register("before-sign.s3.ListObjectsV2", add_filter, unique_id="dataprep-filter")
    try:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for p in pages for o in p.get("Contents", [])]
    finally:
        s3.meta.events.unregister("before-sign.s3.ListObjectsV2", unique_id="dataprep-filter")


def read_selected(endpoint: str, session, bucket: str, keys: list[str]) -> pa.Table:
    creds = session.get_credentials().get_frozen_credentials()
    url = urlparse(endpoint)
    fs = pafs.S3FileSystem(endpoint_override=url.netloc, scheme=url.scheme or "http",
                           access_key=creds.access_key, secret_key=creds.secret_key,
                           region=session.region_name or "us-east-1")
    return pa.concat_tables([pq.read_table(f"{bucket}/{k}", filesystem=fs) for k in keys])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"))
    ap.add_argument("--bucket", default="dataprep")
    ap.add_argument("--shards", type=int, default=24)
    args = ap.parse_args()
    session = boto3.session.Session(region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    s3 = session.client("s3", endpoint_url=args.endpoint)

    upload(s3, args.bucket, args.shards)
    jobs = Jobs(args.endpoint, session)
    rules = [
        {"prefix": "shards/", "filter": {"quality": "good", "source": "cam0"}, "set": {"split": "train"}},
        {"prefix": "shards/", "filter": {"quality": "good", "source": "cam1"}, "set": {"split": "train"}},
        {"prefix": "shards/", "filter": {"quality": "good", "source": "cam2"}, "set": {"split": "val"}},
    ]
    states = [jobs.run(args.bucket, rule) for rule in rules]
    train = list_by_tag(s3, args.bucket, "split=train", prefix="shards/")
    table = read_selected(args.endpoint, session, args.bucket, train)

    want = sorted(f"shards/{i:04d}.parquet" for i in range(args.shards) if i % 4 != 3 and i % 3 in (0, 1))
    summary = {
        "jobs": [{k: s[k] for k in ("state", "scanned", "changed", "errors")} for s in states],
        "train_objects": len(train),
        "train_rows": table.num_rows,
        "min_sharpness": min(table.column("sharpness").to_pylist()) if table.num_rows else None,
    }
    print(json.dumps(summary))
    ok = train == want and table.num_rows == 100 * len(want) and all(s["state"] == "done" for s in states)
    if not ok:
        print(f"selected {train}, rules say {want}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
