"""HTTP/1.1 connection reuse around answers that come before the body.

boto3 sends PutObject and UploadPart with `Expect: 100-continue`. When the
server answers with an error instead of `100 Continue`, the client keeps its
body and may send its next request on the same connection. A server that
still waits for the old body would take the next request's first bytes for
it. The next request then fails, typically as `SignatureDoesNotMatch` because
its method reads `UT` instead of `PUT`. laneway closes such a connection
after its answer (`Connection: close`); a connection whose request body was
read stays open.

The raw-socket tests sign with botocore's SigV4 signer and speak HTTP/1.1
by hand, so they can leave the body unsent exactly as botocore does.
"""

from __future__ import annotations

import hashlib
import socket
from urllib.parse import urlsplit

import botocore
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import REGION


def _signed_head(server, method: str, path: str, body: bytes, expect: bool) -> bytes:
    """The request line and headers of a SigV4-signed request, as bytes."""
    host = urlsplit(server.endpoint).netloc
    headers = {"x-amz-content-sha256": hashlib.sha256(body).hexdigest(), "Content-Length": str(len(body))}
    req = AWSRequest(method=method, url=f"{server.endpoint}{path}", data=body, headers=headers)
    S3SigV4Auth(Credentials(server.access_key, server.secret_key), "s3", REGION).add_auth(req)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
    if expect:
        lines.append("Expect: 100-continue")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body: status, headers
    (lowercase names), body."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {buf!r}"
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response body"
        rest += chunk
    return int(status_line.split()[1]), headers, rest[:length]


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _connect(server) -> socket.socket:
    parts = urlsplit(server.endpoint)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def test_refused_upload_with_unsent_body_closes_the_connection(server, s3, bucket):
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    path = f"/{bucket}/k?partNumber=10001&uploadId={upload}"
    with _connect(server) as sock:
        # Headers only: like botocore, wait for 100 Continue before the body.
        sock.sendall(_signed_head(server, "PUT", path, b"x", expect=True))
        status, headers, body = _read_response(sock)
        assert status == 400 and b"<Code>InvalidArgument</Code>" in body
        assert headers.get("connection") == "close"
        assert _closed_by_server(sock)


def test_request_whose_body_was_read_keeps_the_connection(server, s3, bucket):
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    path = f"/{bucket}/k?partNumber=1&uploadId={upload}"
    with _connect(server) as sock:
        for _ in range(3):
            sock.sendall(_signed_head(server, "PUT", path, b"part", expect=False) + b"part")
            status, headers, body = _read_response(sock)
            assert status == 200, body
            assert headers.get("connection") != "close"
        # An error answered after the body was read keeps it too.
        sock.sendall(_signed_head(server, "GET", f"/{bucket}/missing", b"", expect=False))
        status, headers, _ = _read_response(sock)
        assert status == 404 and headers.get("connection") != "close"
        sock.sendall(_signed_head(server, "PUT", path, b"part", expect=False) + b"part")
        status, _, _ = _read_response(sock)
        assert status == 200


def test_boto3_after_refused_uploads(s3, bucket):
    # The sequence that used to fail now and then: a refused UploadPart
    # (body kept back by botocore), then the next request on the same pooled
    # connection.
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    for _ in range(50):
        try:
            s3.upload_part(Bucket=bucket, Key="k", UploadId=upload, PartNumber=10001, Body=b"x")
            raise AssertionError("part number 10001 was accepted")
        except botocore.exceptions.ClientError as e:
            assert e.response["Error"]["Code"] == "InvalidArgument"
        s3.upload_part(Bucket=bucket, Key="k", UploadId=upload, PartNumber=1, Body=b"part")
