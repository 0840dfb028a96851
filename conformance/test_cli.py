"""The aws CLI (v1, default settings) against laneway: `aws s3` high-level
commands and a few `aws s3api` calls. Files stay below the CLI's 8 MiB
multipart threshold; multipart is covered in test_multipart.py."""

from __future__ import annotations

import hashlib
import json
import os

import requests

from s3util import quoted_md5, tags_dict

MIB = 1024 * 1024


def _ls_lines(stdout: str) -> list[str]:
    return [line.split()[-1] for line in stdout.splitlines() if line.strip()]


def test_cli_mb_cp_ls_rm_rb(aws_cli, s3, bucket_name, tmp_path):
    url = f"s3://{bucket_name}"
    out = aws_cli("s3", "mb", url).stdout
    assert f"make_bucket: {bucket_name}" in out
    s3.head_bucket(Bucket=bucket_name)
    assert bucket_name in aws_cli("s3", "ls").stdout

    small = tmp_path / "small.txt"
    small.write_bytes(b"hello from the aws cli\n")
    mid = tmp_path / "mid.bin"
    mid_body = os.urandom(7 * MIB + 123)  # below the 8 MiB multipart threshold
    mid.write_bytes(mid_body)

    aws_cli("s3", "cp", str(small), f"{url}/docs/small.txt")
    aws_cli("s3", "cp", str(mid), f"{url}/data/mid file.bin")
    assert s3.get_object(Bucket=bucket_name, Key="docs/small.txt")["Body"].read() == small.read_bytes()
    head = s3.head_object(Bucket=bucket_name, Key="data/mid file.bin")
    assert head["ContentLength"] == len(mid_body)
    assert head["ETag"] == quoted_md5(mid_body)
    # The CLI guesses the Content-Type from the file name.
    assert s3.head_object(Bucket=bucket_name, Key="docs/small.txt")["ContentType"] == "text/plain"

    down = tmp_path / "down.bin"
    aws_cli("s3", "cp", f"{url}/data/mid file.bin", str(down))
    assert hashlib.md5(down.read_bytes()).hexdigest() == hashlib.md5(mid_body).hexdigest()

    top = aws_cli("s3", "ls", f"{url}/").stdout
    assert "PRE data/" in top and "PRE docs/" in top
    recursive = aws_cli("s3", "ls", "--recursive", f"{url}/").stdout
    assert "docs/small.txt" in recursive and "data/mid file.bin" in recursive
    assert str(len(mid_body)) in recursive

    removed = aws_cli("s3", "rm", "--recursive", f"{url}/").stdout
    assert f"delete: {url}/docs/small.txt" in removed
    assert f"delete: {url}/data/mid file.bin" in removed
    assert s3.list_objects_v2(Bucket=bucket_name)["KeyCount"] == 0

    assert f"remove_bucket: {bucket_name}" in aws_cli("s3", "rb", url).stdout
    assert bucket_name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_cli_recursive_copy_and_sync(aws_cli, s3, bucket, tmp_path):
    src = tmp_path / "src"
    files = {
        "a.txt": b"a" * 10,
        "nested/b.json": b'{"b": 1}',
        "nested/deeper/c d.bin": os.urandom(100_000),
        "ünïcødé/é.txt": "é".encode(),
    }
    for rel, data in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    aws_cli("s3", "cp", "--recursive", str(src), f"s3://{bucket}/tree/")
    listed = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="tree/")["Contents"])
    assert listed == sorted(f"tree/{rel}" for rel in files)

    # A second sync finds nothing to do: sizes and timestamps agree.
    second = aws_cli("s3", "sync", str(src), f"s3://{bucket}/tree/").stdout
    assert "upload:" not in second, second

    dst = tmp_path / "dst"
    aws_cli("s3", "sync", f"s3://{bucket}/tree/", str(dst))
    for rel, data in files.items():
        assert (dst / rel).read_bytes() == data

    ls = _ls_lines(aws_cli("s3", "ls", f"s3://{bucket}/tree/nested/").stdout)
    assert sorted(ls) == ["b.json", "deeper/"]


def test_cli_s3api_tagging(aws_cli, s3, bucket):
    s3.put_object(Bucket=bucket, Key="tagged", Body=b"x")
    tagging = json.dumps({"TagSet": [{"Key": "a", "Value": "1"}, {"Key": "team", "Value": "data eng"}]})
    aws_cli("s3api", "put-object-tagging", "--bucket", bucket, "--key", "tagged", "--tagging", tagging)
    assert tags_dict(s3.get_object_tagging(Bucket=bucket, Key="tagged")["TagSet"]) == {"a": "1", "team": "data eng"}

    out = aws_cli("s3api", "get-object-tagging", "--bucket", bucket, "--key", "tagged", "--output", "json").stdout
    assert tags_dict(json.loads(out)["TagSet"]) == {"a": "1", "team": "data eng"}

    aws_cli("s3api", "delete-object-tagging", "--bucket", bucket, "--key", "tagged")
    out = aws_cli("s3api", "get-object-tagging", "--bucket", bucket, "--key", "tagged", "--output", "json").stdout
    assert json.loads(out)["TagSet"] == []


def test_cli_s3api_list_objects_v2(aws_cli, s3, bucket):
    keys = [f"logs/2024/{i:02d}.log" for i in range(23)] + ["logs/readme", "other/x"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"l")

    # The CLI follows continuation tokens itself; --page-size forces several pages.
    out = aws_cli(
        "s3api", "list-objects-v2", "--bucket", bucket, "--prefix", "logs/", "--page-size", "5", "--output", "json"
    ).stdout
    got = [o["Key"] for o in json.loads(out)["Contents"]]
    assert got == sorted(k for k in keys if k.startswith("logs/"))

    out = aws_cli(
        "s3api", "list-objects-v2", "--bucket", bucket, "--delimiter", "/", "--prefix", "logs/", "--output", "json"
    ).stdout
    parsed = json.loads(out)
    assert [p["Prefix"] for p in parsed["CommonPrefixes"]] == ["logs/2024/"]
    assert [o["Key"] for o in parsed["Contents"]] == ["logs/readme"]

    out = aws_cli(
        "s3api", "list-objects-v2", "--bucket", bucket, "--max-items", "4", "--output", "json"
    ).stdout
    parsed = json.loads(out)
    assert [o["Key"] for o in parsed["Contents"]] == sorted(keys)[:4]
    assert parsed.get("NextToken")


def test_cli_s3api_head_object_and_presign(aws_cli, s3, bucket):
    s3.put_object(Bucket=bucket, Key="h.txt", Body=b"head me", ContentType="text/plain", Metadata={"m": "v"})
    out = aws_cli("s3api", "head-object", "--bucket", bucket, "--key", "h.txt", "--output", "json").stdout
    head = json.loads(out)
    assert head["ContentLength"] == 7
    assert head["ContentType"] == "text/plain"
    assert head["Metadata"] == {"m": "v"}
    assert head["ETag"] == quoted_md5(b"head me")

    url = aws_cli("s3", "presign", f"s3://{bucket}/h.txt", "--expires-in", "300").stdout.strip()
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.content == b"head me"


def test_cli_error_exit_codes(aws_cli, bucket):
    missing = aws_cli("s3api", "head-object", "--bucket", bucket, "--key", "nope", check=False)
    assert missing.returncode != 0
    assert "404" in missing.stderr
    nobucket = aws_cli("s3", "ls", f"s3://{bucket}-missing/", check=False)
    assert nobucket.returncode != 0
    assert "NoSuchBucket" in nobucket.stderr
