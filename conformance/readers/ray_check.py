"""Ray Data reading a parquet dataset from laneway through pyarrow's S3
filesystem. Run by test_readers.py with the readers venv:

    python ray_check.py ENDPOINT ACCESS_KEY SECRET_KEY REGION BUCKET ROWS

The bucket holds a parquet dataset under ds/ with ROWS rows and an integer
column `n` holding 0..ROWS-1. Exits non-zero on any mismatch."""

import sys
from urllib.parse import urlparse

import pyarrow.fs as pafs
import ray

endpoint, key, secret, region, bucket, rows = sys.argv[1:7]
url = urlparse(endpoint)
fs = pafs.S3FileSystem(
    endpoint_override=url.netloc, scheme=url.scheme, access_key=key, secret_key=secret, region=region
)
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
try:
    ds = ray.data.read_parquet(f"{bucket}/ds", filesystem=fs)
    values = sorted(r["n"] for r in ds.iter_rows())
    assert values == list(range(int(rows))), (len(values), values[:5])
finally:
    ray.shutdown()
print("ray ok")
