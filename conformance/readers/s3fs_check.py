"""s3fs (fsspec over aiobotocore) against laneway: ls, info of a directory
prefix, open + seek + read, cat. Run by test_readers.py with the readers venv:

    python s3fs_check.py ENDPOINT ACCESS_KEY SECRET_KEY REGION BUCKET DOOMED

The bucket already holds fs/a.txt ("alpha") and fs/sub/b.txt ("bravo" * 1000).
DOOMED is a second bucket with objects, removed with rm(recursive=True)
(s3fs asks GetBucketVersioning first).
Exits non-zero (assertion) on any mismatch."""

import sys

import s3fs

endpoint, key, secret, region, bucket, doomed = sys.argv[1:7]
fs = s3fs.S3FileSystem(key=key, secret=secret, client_kwargs={"endpoint_url": endpoint, "region_name": region})
listed = sorted(fs.ls(f"{bucket}/fs"))
assert listed == [f"{bucket}/fs/a.txt", f"{bucket}/fs/sub"], listed
with fs.open(f"{bucket}/fs/sub/b.txt", "rb") as f:
    f.seek(5)
    assert f.read(5) == b"bravo"
assert fs.cat(f"{bucket}/fs/a.txt") == b"alpha"
assert fs.info(f"{bucket}/fs/sub")["type"] == "directory"
fs.pipe(f"{bucket}/fs/written.bin", b"\x00\x01" * 4096)
assert fs.cat(f"{bucket}/fs/written.bin") == b"\x00\x01" * 4096
fs.rm(doomed, recursive=True)
fs.invalidate_cache()
assert not fs.exists(doomed), fs.ls("")
print("s3fs ok")
