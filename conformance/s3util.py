"""Helpers shared by the conformance tests: error assertions, digests, and
client tweaks that reproduce what boto3 does in other environments."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
import subprocess
from typing import Any, Callable, Optional

import pytest
from botocore.exceptions import ClientError


def expect_error(code: str, status: int, fn: Callable[..., Any], *args, **kwargs) -> dict:
    """Call fn, require a ClientError with this S3 error code and HTTP status,
    and return the error response. For HEAD requests (no body) botocore
    reports the status as the code, e.g. "404"."""
    with pytest.raises(ClientError) as info:
        fn(*args, **kwargs)
    response = info.value.response
    got_code = response.get("Error", {}).get("Code")
    got_status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    assert (got_code, got_status) == (code, status), (
        f"expected {code} / HTTP {status}, got {got_code} / HTTP {got_status}: "
        f"{response.get('Error', {}).get('Message')!r}"
    )
    return response


def error_code(fn: Callable[[], Any]) -> str:
    """The S3 error code `fn` fails with, or "OK"."""
    try:
        fn()
    except ClientError as e:
        return e.response.get("Error", {}).get("Code", "")
    return "OK"


def run_or_fail(cmd: list[str], *, env: Optional[dict] = None, timeout: float = 180,
                check: bool = True, context: Callable[[], str] = str) -> subprocess.CompletedProcess:
    """Run a client command (aws CLI, docker); with `check`, a non-zero exit
    fails the test showing its output and `context()` (e.g. server logs)."""
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}{context()}",
            pytrace=False,
        )
    return proc


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def quoted_md5(data: bytes) -> str:
    return f'"{md5_hex(data)}"'


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def crc32_b64(data: bytes) -> str:
    """The value of an x-amz-checksum-crc32 header: base64 of the big-endian
    CRC32."""
    return base64.b64encode(struct.pack(">I", binascii.crc32(data) & 0xFFFFFFFF)).decode()


def random_bytes(n: int) -> bytes:
    return os.urandom(n)


def tags_dict(tag_set: list[dict]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tag_set}


def force_trailer_checksums(client) -> None:
    """Make the client send its default CRC32 checksum in an aws-chunked body
    with a trailer (Content-Encoding: aws-chunked, x-amz-content-sha256:
    STREAMING-UNSIGNED-PAYLOAD-TRAILER, x-amz-trailer: x-amz-checksum-crc32).

    That is what boto3 >= 1.36 sends by default for PutObject/UploadPart over
    HTTPS. Over plain HTTP (this suite) botocore puts the checksum in a header
    instead, so the suite flips botocore's own decision just before the body
    is built; the encoding itself is botocore's AwsChunkedWrapper.
    """

    def to_trailer(context, **_):
        algorithm = context.get("checksum", {}).get("request_algorithm")
        if isinstance(algorithm, dict) and algorithm.get("in") == "header":
            algorithm["in"] = "trailer"

    for op in ("PutObject", "UploadPart"):
        client.meta.events.register(f"before-call.s3.{op}", to_trailer)


def capture_raw_responses(client, operation: str) -> list[bytes]:
    """Record the raw body of every response to `operation` on this client."""
    bodies: list[bytes] = []

    def capture(http_response, **_):
        bodies.append(http_response.content)

    client.meta.events.register(f"after-call.s3.{operation}", capture)
    return bodies


def capture_request_headers(client, operation: str) -> list[dict]:
    """Record the headers (lower-case names, str values) of every request
    `operation` sends on this client."""
    seen: list[dict] = []

    def capture(request, **_):
        seen.append(
            {
                k.lower(): v.decode("latin-1") if isinstance(v, bytes) else str(v)
                for k, v in request.headers.items()
            }
        )

    client.meta.events.register(f"before-send.s3.{operation}", capture)
    return seen


TAG_FILTER = "x-laneway-tag-filter"


def tag_filter_text(conds: dict[str, Optional[str]]) -> str:
    """The `x-laneway-tag-filter` text of {key: value, key: None (exists)}."""
    from urllib.parse import quote_plus

    return "&".join(quote_plus(k) if v is None else f"{quote_plus(k)}={quote_plus(v)}" for k, v in conds.items())


class tag_filter:
    """Context manager: while active, every ListObjectsV2 / ListObjects /
    ListObjectVersions call of `client` (paginators too) lists by tag.
    `how="header"` adds the header, `how="query"` the query parameter;
    both go in before SigV4 signs the request (event `before-sign`)."""

    OPS = ("ListObjectsV2", "ListObjects", "ListObjectVersions")

    def __init__(self, client, conds: dict[str, Optional[str]] | str, how: str = "header"):
        self.client = client
        self.text = conds if isinstance(conds, str) else tag_filter_text(conds)
        self.how = how

    def _add(self, request, **_kwargs) -> None:
        from urllib.parse import quote

        if self.how == "header":
            request.headers[TAG_FILTER] = self.text
        else:
            sep = "&" if "?" in request.url else "?"
            request.url += f"{sep}{TAG_FILTER}={quote(self.text, safe='')}"

    def __enter__(self):
        for op in self.OPS:
            self.client.meta.events.register(f"before-sign.s3.{op}", self._add, unique_id=f"tf-{op}-{id(self)}")
        return self.client

    def __exit__(self, *exc) -> None:
        for op in self.OPS:
            self.client.meta.events.unregister(f"before-sign.s3.{op}", unique_id=f"tf-{op}-{id(self)}")
