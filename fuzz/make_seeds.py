#!/usr/bin/env python3
"""Writes the hand-made seed corpora of the fuzz targets (fuzz/corpus/TARGET).

Each seed is a small valid input, so the fuzzer starts from the formats'
real shapes: headers as clients send them, and records laid out as
store/src/record.rs (format byte + bincode 1, fixed-width little-endian)
and store/src/volume.rs (header, key, data, CRC32C table, trailer)
describe them. Run it again after a format change; it only writes files.
"""

import base64
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- headers -----------------------------------------------------------------
for i, s in enumerate([
    "10\nbytes=0-4", "10\nbytes=5-", "10\nbytes=-3", "10\nbytes=0-9",
    "10\nbytes=3-2", "0\nbytes=0-0", "100\nbytes=99-",
    "18446744073709551615\nbytes=-18446744073709551615",
    "18446744073709551615\nbytes=0-18446744073709551614",
    "5368709120\nbytes=0-5368709119", "10\n bytes=1-2 ",
]):
    write("range_header", f"seed-{i}", s)

DATES = ["Sun, 06 Nov 1994 08:49:37 GMT", "Tue, 14 Nov 2023 22:13:20 GMT"]
for i, s in enumerate([
    "9e107d9d372bb6826bd81d3542a419d6\n1700000000500\n\"9e107d9d372bb6826bd81d3542a419d6\"\n\n\n",
    "abc\n1700000000500\n*\n\n\n",
    "abc\n1700000000500\n\n\"abc\"\n\n",
    "abc\n1700000000500\n\nW/\"abc\"\n\n",
    f"abc\n1700000000500\n\n\n{DATES[1]}\n",
    f"abc\n1700000000500\n\n\n\n{DATES[0]}",
    f"abc\n-9223372036854775808\n\"x\"\n*\n{DATES[0]}\n{DATES[1]}",
]):
    write("conditional_headers", f"seed-{i}", s)

for i, s in enumerate([
    "a=1&b=two", "my%20key=a+b%26c&empty=&bare", "k=%E2%9C%93", "",
    "&&k=v&&", "aws%3Akey=x", "=v", "k=%FF",
    "&".join(f"k{n}=v{n}" for n in range(11)),
]):
    write("tagging_header", f"seed-{i}", s)


def token(kind, key):
    raw = bytes([1, kind]) + key.encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


for i, t in enumerate([
    token(0, "a"), token(0, "dir/ünïcode key"), token(1, "photos/2024/"),
    b"a/b/\n\n/", b"p/a/\np/\n/", b"!!!",
]):
    write("list_token", f"seed-{i}", t)

for i, doc in enumerate([
    {"name": "acme", "weight": 3, "quota_bytes": 1000000, "quota_objects": 10,
     "max_requests_per_sec": 100, "max_bytes_per_sec": 1048576,
     "access": "read-only", "buckets": ["logs", "media.assets"]},
    {"name": "beta"},
    {"weight": 5, "quota_bytes": None},
    {"name": "renamed", "max_bytes_per_sec": 0},
    {"access": "read-write", "buckets": ["logs"]},
    {"format": 2,
     "tenants": [{"id": "t-0123456789abcdef", "name": "acme", "weight": 1,
                  "quota_bytes": None, "quota_objects": 5,
                  "max_requests_per_sec": None, "max_bytes_per_sec": None,
                  "status": "active", "created_ms": 1700000000000}],
     "keys": [{"access_key": "LWAKEXAMPLE", "tenant": "t-0123456789abcdef",
               "access": "read-only", "buckets": ["logs"],
               "created_ms": 1700000000000, "sealed_secret": "AAAA"}]},
]):
    write("admin_json", f"seed-{i}", json.dumps(doc))
write("admin_json", "seed-empty", "")


# --- object records (bincode 1: fixint LE, u64 lengths, u32 variant tags) ----
def u64(n): return struct.pack("<Q", n)
def i64(n): return struct.pack("<q", n)
def u32(n): return struct.pack("<I", n)
def string(s): b = s.encode(); return u64(len(b)) + b
def opt(v, enc): return b"\0" if v is None else b"\1" + enc(v)
def seq(items, enc): return u64(len(items)) + b"".join(enc(x) for x in items)


def record(fmt, data, tags=(), checksum=None, part_sums=None, parts=0):
    meta = (opt("text/plain", string) + opt(None, string) + opt(None, string)
            + opt(None, string) + opt("max-age=60", string) + opt(None, string)
            + seq([("color", "blue")], lambda kv: string(kv[0]) + string(kv[1])))
    out = bytes([fmt]) + u64(3) + bytes(range(16)) + i64(1700000000500) + u32(parts)
    out += meta + seq(list(tags), lambda kv: string(kv[0]) + string(kv[1]))
    out += opt(checksum, lambda c: string(c[0]) + string(c[1]))
    out += data
    if part_sums is not None:
        out += seq(part_sums, string)
    return out


inline = u32(0) + u64(3) + b"abc"
volume = u32(1) + u64(7) + u64(4096) + u64(200000)
parts = u32(2) + seq([(1, 0, 100, 40, 50), (2, 100, 200, 40, 150)],
                     lambda p: b"".join(u64(x) for x in p))
write("object_record", "v2-inline", record(2, inline, [("k", "v")], None, []))
write("object_record", "v2-volume", record(2, volume, [], ("CRC32", "AAAAAA=="), []))
write("object_record", "v2-parts", record(2, parts, [], ("CRC32C", "AAAAAA==-2"),
                                          ["AAAAAA==", "AAAAAA=="], parts=2))
write("object_record", "v1-inline", record(1, inline))
write("object_record", "usage", i64(3) + i64(4096))


# --- volume records ---------------------------------------------------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


BLOCK = 64 * 1024


def volume_record(bucket, key, data, flags=0):
    head = (u32(0x4C575631) + bytes([1, flags]) + struct.pack("<H", len(key))
            + u64(bucket) + u64(len(data)) + u32(BLOCK))
    head += u32(crc32c(head + key)) + key
    table = b"".join(u32(crc32c(data[i:i + BLOCK])) for i in range(0, len(data), BLOCK))
    return head + data + table + u32(crc32c(table))


one = volume_record(9, b"key-0", b"hello, volume")
two = volume_record(9, b"k", b"")
part = volume_record(3, b"obj" + bytes(16) + struct.pack(">I", 1), b"x" * 100, flags=1)
# Mode byte: 0 = scan as is; 1 = fix CRCs first; 3 = also fix magic/version.
write("volume_record", "one-record", b"\0" + one)
write("volume_record", "two-records", b"\0" + one + two)
write("volume_record", "part-record", b"\x08" + part)
write("volume_record", "torn", b"\0" + one + two[:20])
write("volume_record", "fixup", b"\x03" + bytes(32) + b"abc")


# --- multipart rows and ids -------------------------------------------------
write("multipart_rows", "upload-id", b"0123456789abcdef0123456789abcdef")
write("multipart_rows", "part-field", b"photos/cat.jpg" + bytes(range(16)) + struct.pack(">I", 3))
upload_meta = b"\1" + string("text/plain") + b"\0" * 5 + u64(0)
write("multipart_rows", "upload-row-v2",
      b"\2" + i64(1700000000000) + upload_meta + seq([("k", "v")], lambda kv: string(kv[0]) + string(kv[1]))
      + b"\1" + string("CRC32C") + b"\1")
write("multipart_rows", "part-row-v1",
      b"\1" + u64(5) + bytes(16) + i64(1700000000000)
      + b"".join(u64(x) for x in (1, 0, 45, 1, 5)) + b"\0")
