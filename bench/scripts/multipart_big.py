"""Issue-3 acceptance measurement: a 5 GiB multipart upload (64 MiB parts,
4 in parallel, boto3's transfer manager at default checksum settings) to a
running laneway, reading it back and checking the ETag and bytes, while the
server's RSS is sampled every 50 ms; then the time of one
CompleteMultipartUpload of 80 parts.

    python multipart_big.py ENDPOINT ACCESS SECRET SERVER_PID [SIZE_GIB]

Prints the figures and the method. Talks to the given endpoint only."""

import hashlib
import os
import sys
import tempfile
import threading
import time

import boto3
from boto3.s3.transfer import TransferConfig

endpoint, access, secret, pid = sys.argv[1:5]
size_gib = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
size = int(size_gib * (1 << 30))
part = 64 << 20


def rss_kib() -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


peak = [0]
stop = threading.Event()


def sampler():
    while not stop.is_set():
        peak[0] = max(peak[0], rss_kib())
        time.sleep(0.05)


s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret, region_name="us-east-1")
bucket = f"mpbig-{int(time.time())}"
s3.create_bucket(Bucket=bucket)

with tempfile.TemporaryDirectory(dir="/tmp") as d:
    src = os.path.join(d, "src.bin")
    block = os.urandom(1 << 20)
    md5s = []
    with open(src, "wb") as f:
        written = 0
        while written < size:
            n = min(part, size - written)
            h = hashlib.md5()
            chunk_left = n
            while chunk_left:
                b = block[: min(len(block), chunk_left)]
                f.write(b)
                h.update(b)
                chunk_left -= len(b)
            md5s.append(h.digest())
            written += n
    expected_etag = hashlib.md5(b"".join(md5s)).hexdigest() + f"-{len(md5s)}"
    start_rss = rss_kib()
    t = threading.Thread(target=sampler)
    t.start()
    cfg = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=4)
    t0 = time.time()
    s3.upload_file(src, bucket, "big.bin", Config=cfg)
    up = time.time() - t0
    head = s3.head_object(Bucket=bucket, Key="big.bin")
    t0 = time.time()
    got = hashlib.md5()
    body = s3.get_object(Bucket=bucket, Key="big.bin")["Body"]
    for chunk in iter(lambda: body.read(8 << 20), b""):
        got.update(chunk)
    down = time.time() - t0
    stop.set()
    t.join()
    with open(src, "rb") as f:
        want = hashlib.md5()
        for chunk in iter(lambda: f.read(8 << 20), b""):
            want.update(chunk)
    print(f"# method: boto3 upload_file, {part >> 20} MiB parts, max_concurrency 4, default checksums; GET streamed and MD5-compared; server VmRSS sampled every 50 ms")
    print(f"size {size} bytes, parts {len(md5s)}")
    print(f"upload {up:.1f} s ({size / up / 1e6:.0f} MB/s), download {down:.1f} s ({size / down / 1e6:.0f} MB/s)")
    print(f"etag {head['ETag']} expected \"{expected_etag}\" match={head['ETag'].strip(chr(34)) == expected_etag}")
    print(f"bytes match={got.hexdigest() == want.hexdigest()}")
    print(f"server RSS start {start_rss / 1024:.0f} MiB, peak {peak[0] / 1024:.0f} MiB, growth {(peak[0] - start_rss) / 1024:.0f} MiB")
    s3.delete_object(Bucket=bucket, Key="big.bin")

# CompleteMultipartUpload of 80 parts of 5 MiB.
up_id = s3.create_multipart_upload(Bucket=bucket, Key="k80")["UploadId"]
data = os.urandom(5 << 20)
parts = []
for n in range(1, 81):
    r = s3.upload_part(Bucket=bucket, Key="k80", UploadId=up_id, PartNumber=n, Body=data)
    parts.append({"PartNumber": n, "ETag": r["ETag"], **({"ChecksumCRC32": r["ChecksumCRC32"]} if "ChecksumCRC32" in r else {})})
t0 = time.time()
s3.complete_multipart_upload(Bucket=bucket, Key="k80", UploadId=up_id, MultipartUpload={"Parts": parts})
print(f"CompleteMultipartUpload of 80 parts: {(time.time() - t0) * 1000:.0f} ms (client round trip)")
s3.delete_object(Bucket=bucket, Key="k80")
s3.delete_bucket(Bucket=bucket)
