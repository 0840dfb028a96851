"""Connection-level defences: slow, idle and abusive clients cost only
their own connection.

Covers: a browser-form upload (PostObject) without a signature, or with a
wrong one, refused before its file is read, and 20 such uploads holding
back their last bytes leave the server's memory flat; a connection that
sends no complete header within --header-timeout-secs, or no request for
--idle-timeout-secs, is closed; an upload whose client stops sending is
ended after --stall-timeout-secs and stores nothing; a download whose
client stops reading is cut off after the stall timeout; and a server
under a 256-descriptor limit, with more idle and slowloris connections
open than the limit, still serves a new client at once (the oldest idle
connections are evicted) without spinning.

Each test starts its own `laneway serve` with small timeouts, and speaks
HTTP/1.1 over raw sockets where it must misbehave (SigV4 by botocore's
signer).
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import time
import uuid
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, REGION, SECRET_KEY, LanewayProcess, require_binary

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("LANEWAY_ENDPOINT")), reason="starts its own laneway; not with LANEWAY_ENDPOINT"
)

MIB = 1024 * 1024
KEYS = ["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]


def start(tmp_path, *flags: str, binary=None) -> LanewayProcess:
    return LanewayProcess(binary or require_binary(), tmp_path / "data", tmp_path, [*KEYS, "--partitions", "4", *flags])


@pytest.fixture
def fast(tmp_path):
    """A server with 1 s header and stall timeouts and a 3 s idle timeout."""
    proc = start(
        tmp_path, "--header-timeout-secs", "1", "--idle-timeout-secs", "3", "--stall-timeout-secs", "1"
    )
    yield proc
    proc.stop()


def client(endpoint: str):
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"max_attempts": 2}, connect_timeout=5, read_timeout=10),
    )


def connect(endpoint: str, rcvbuf: int | None = None) -> socket.socket:
    host, port = urlsplit(endpoint).netloc.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((host, int(port)))
    return sock


def signed_head(endpoint: str, method: str, path: str, length: int) -> bytes:
    """Request line and SigV4-signed headers of a request with an unsigned
    payload of `length` bytes."""
    host = urlsplit(endpoint).netloc
    headers = {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
    if length:
        headers["Content-Length"] = str(length)
    req = AWSRequest(method=method, url=f"{endpoint}{path}", headers=headers)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Read until the server closes the connection or `seconds` pass:
    (closed, what was read)."""
    deadline = time.monotonic() + seconds
    got = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except OSError:  # reset, broken pipe, a TLS stream cut short
            return True, got
        if not chunk:
            return True, got
        got += chunk
    return False, got


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


BOUNDARY = "hardeningboundary7MA4YWxk"


def form_head(endpoint: str, bucket: str, fields: dict[str, str], file_len: int) -> tuple[bytes, int]:
    """Request head and form fields (through the file part's header) of a
    form upload whose file is `file_len` bytes; and the total length."""
    parts = "".join(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()
    )
    parts += (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    tail = f"\r\n--{BOUNDARY}--\r\n"
    total = len(parts) + file_len + len(tail)
    host = urlsplit(endpoint).netloc
    head = (
        f"POST /{bucket} HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {total}\r\n\r\n"
    )
    return (head + parts).encode(), total


def send_some(sock: socket.socket, data: bytes, seconds: float = 5.0) -> int:
    """Send what the server takes of `data` within `seconds`; bytes sent."""
    sock.settimeout(seconds)
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent : sent + 256 * 1024])
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    return sent


def stalled_form_posts(endpoint: str, bucket: str, fields: dict[str, str], n: int, file_bytes: int):
    """Open `n` form uploads that send their fields and `file_bytes` of a
    larger file, then hold back the rest."""
    socks = []
    chunk = b"z" * file_bytes
    for _ in range(n):
        head, _total = form_head(endpoint, bucket, fields, file_bytes + 1024)
        sock = connect(endpoint)
        send_some(sock, head)
        socks.append(sock)
    for sock in socks:
        send_some(sock, chunk, seconds=2.0)
    return socks


def test_unsigned_form_posts_are_refused_before_their_files(tmp_path):
    # Long timeouts: only the form gate may end these uploads.
    proc = start(tmp_path, "--header-timeout-secs", "30", "--stall-timeout-secs", "60")
    try:
        s3 = client(proc.endpoint)
        s3.create_bucket(Bucket="forms")
        pid = proc.proc.pid
        before = rss_kib(pid)
        n, file_bytes = 20, 8 * MIB
        socks = stalled_form_posts(proc.endpoint, "forms", {"key": "anon"}, n, file_bytes)
        for sock in socks:
            closed, got = closed_within(sock, 10)
            assert got.startswith(b"HTTP/1.1 403"), got[:200]
            assert b"<Code>AccessDenied</Code>" in got
            assert closed, "the connection of a refused, unread form stays open"
        grown_kib = rss_kib(pid) - before
        # Before the gate, each connection's file was buffered: n * 8 MiB.
        assert grown_kib < n * file_bytes // 1024 // 8, f"RSS grew by {grown_kib} KiB"
        for sock in socks:
            sock.close()
        # A wrongly signed form is refused before its file, too.
        fields = {
            "key": "forged",
            "policy": "eyJleHBpcmF0aW9uIjoiMjA5OS0wMS0wMVQwMDowMDowMC4wMDBaIiwiY29uZGl0aW9ucyI6W119",
            "x-amz-algorithm": "AWS4-HMAC-SHA256",
            "x-amz-credential": f"{ACCESS_KEY}/20990101/us-east-1/s3/aws4_request",
            "x-amz-date": "20990101T000000Z",
            "x-amz-signature": "0" * 64,
        }
        head, _ = form_head(proc.endpoint, "forms", fields, 64 * MIB)
        sock = connect(proc.endpoint)
        sock.sendall(head)
        closed, got = closed_within(sock, 10)
        assert b"<Code>SignatureDoesNotMatch</Code>" in got, got[:300]
        sock.close()
        with pytest.raises(ClientError):
            s3.head_object(Bucket="forms", Key="anon")
    finally:
        proc.stop()


def test_incomplete_headers_and_idle_connections_are_closed(fast):
    partial = connect(fast.endpoint)
    partial.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    silent = connect(fast.endpoint)
    for sock in (partial, silent):
        closed, got = closed_within(sock, 5)
        assert closed and got == b"", got[:200]
    # A kept-alive connection survives past the header timeout while idle,
    # and is closed after the idle timeout.
    kept = connect(fast.endpoint)
    kept.sendall(signed_head(fast.endpoint, "GET", "/", 0))
    closed, got = closed_within(kept, 1.8)
    assert not closed and got.startswith(b"HTTP/1.1 200"), got[:200]
    closed, _ = closed_within(kept, 6)
    assert closed, "an idle connection stays open past --idle-timeout-secs"


def test_a_stalled_upload_is_ended_and_stores_nothing(fast):
    s3 = client(fast.endpoint)
    s3.create_bucket(Bucket="stall")
    sock = connect(fast.endpoint)
    sock.sendall(signed_head(fast.endpoint, "PUT", "/stall/half", MIB))
    sock.sendall(b"h" * (MIB // 2))
    closed, got = closed_within(sock, 8)
    assert closed, f"the stalled upload was not ended; got {got[:200]!r}"
    assert got.startswith(b"HTTP/1.1 400") and b"<Code>IncompleteBody</Code>" in got, got[:300]
    sock.close()
    with pytest.raises(ClientError) as info:
        s3.head_object(Bucket="stall", Key="half")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # The server goes on serving.
    s3.put_object(Bucket="stall", Key="whole", Body=b"w" * 1000)
    assert s3.get_object(Bucket="stall", Key="whole")["Body"].read() == b"w" * 1000


def test_a_download_the_client_does_not_read_is_cut_off(fast):
    s3 = client(fast.endpoint)
    s3.create_bucket(Bucket="unread")
    size = 32 * MIB
    s3.put_object(Bucket="unread", Key="big", Body=os.urandom(MIB) * 32)
    sock = connect(fast.endpoint, rcvbuf=4096)
    sock.sendall(signed_head(fast.endpoint, "GET", "/unread/big", 0))
    time.sleep(5)  # the client reads nothing; the server's stall timeout is 1 s
    closed, got = closed_within(sock, 30)
    sock.close()
    assert b"HTTP/1.1 200" in got[:100]
    assert closed and len(got) < size, f"read {len(got)} of {size} bytes; the stalled download was not ended"
    assert s3.head_object(Bucket="unread", Key="big")["ContentLength"] == size


def test_more_idle_connections_than_descriptors_leave_new_clients_served(tmp_path):
    wrapper = tmp_path / "laneway-256"
    wrapper.write_text(f'#!/bin/sh\nulimit -n 256\nexec "{require_binary()}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    proc = start(tmp_path, binary=wrapper)
    try:
        s3 = client(proc.endpoint)
        s3.create_bucket(Bucket="crowded")
        socks = []
        for i in range(400):
            sock = connect(proc.endpoint)
            if i % 2:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: slow")  # slowloris: a header never finished
            socks.append(sock)
        pid = proc.proc.pid
        cpu_before, t0 = cpu_seconds(pid), time.monotonic()
        fresh = client(proc.endpoint)
        key = f"k-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        fresh.put_object(Bucket="crowded", Key=key, Body=b"served")
        assert fresh.get_object(Bucket="crowded", Key=key)["Body"].read() == b"served"
        assert time.monotonic() - started < 5, "a new client waited behind idle connections"
        time.sleep(2)
        busy = (cpu_seconds(pid) - cpu_before) / (time.monotonic() - t0)
        assert busy < 0.5, f"the server spins: {busy:.0%} of a core with idle connections open"
        for sock in socks:
            sock.close()
    finally:
        proc.stop()


def test_tls_connections_have_the_header_deadline(tmp_path):
    """The TLS handshake and the first header share --header-timeout-secs."""
    import re
    import ssl
    import subprocess

    from test_https import _self_signed

    cert, key = _self_signed(tmp_path)
    out = tmp_path / "tls.stdout.log"
    cmd = [str(require_binary()), "serve", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
           *KEYS, "--partitions", "4", "--tls-cert", str(cert), "--tls-key", str(key), "--header-timeout-secs", "1"]
    with open(out, "wb") as f:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        match = None
        while match is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            match = re.search(r"laneway listening on https://(\S+)", out.read_text(errors="replace"))
        assert match, "laneway (TLS) did not start"
        endpoint = f"http://{match.group(1)}"
        # No handshake at all.
        silent = connect(endpoint)
        closed, _ = closed_within(silent, 5)
        assert closed, "a connection that never starts its TLS handshake stays open"
        # A handshake, then half a header.
        ctx = ssl.create_default_context(cafile=str(cert))
        tls = ctx.wrap_socket(connect(endpoint), server_hostname="127.0.0.1")
        tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        closed, got = closed_within(tls, 5)
        assert closed and got == b"", got[:200]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
