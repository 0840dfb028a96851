"""HTTPS (`laneway serve --tls-cert/--tls-key`) and virtual-hosted-style
addressing (`--domain`) with real clients at their default configuration.

This module starts its own laneway process (TLS on, `--domain` set) with a
self-signed certificate for 127.0.0.1 made with `cryptography`. boto3
trusts it through `verify=<cert>`, the aws CLI through AWS_CA_BUNDLE. Over
HTTPS: put/get, a 20 MiB `upload_file` (multipart, aws-chunked bodies with
CRC32 trailers) byte-exact with its stored checksum returned under
ChecksumMode=ENABLED, and `aws s3 cp` of 100 MiB up and down, whose stored
checksum (head-object --checksum-mode ENABLED) must equal the composite
CRC32 computed here from the file at the CLI's 8 MiB part boundaries.

Virtual-hosted style: `*.localhost` does not resolve here, so those
requests go to 127.0.0.1 with an explicit `Host: BUCKET.DOMAIN:PORT`
header, signed with botocore's SigV4Auth.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
import zlib
from pathlib import Path

import boto3
import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

REPO_ROOT = Path(__file__).resolve().parent.parent
ACCESS_KEY = "LWHTTPSTEST000000001"
SECRET_KEY = "laneway/https+SecretKey0123456789abcdefg"
REGION = "us-east-1"
DOMAIN = "s3.laneway.test"
READY_RE = re.compile(r"laneway listening on (https?://[^\s]+)")
MIB = 1024 * 1024


def _binary() -> Path:
    raw = os.environ.get("LANEWAY_BIN") or str(REPO_ROOT / "target/release/laneway")
    path = Path(raw)
    if not path.is_absolute():
        candidate = REPO_ROOT / path
        path = candidate if candidate.exists() else Path.cwd() / path
    if not path.is_file():
        pytest.fail(f"laneway binary not found at {path} (set LANEWAY_BIN)", pytrace=False)
    return path


def _self_signed(dir_: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1/localhost, made with the
    `cryptography` package (from requirements.txt: no openssl CLI needed)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert, key_path = dir_ / "cert.pem", dir_ / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert, key_path


class TlsServer:
    def __init__(self, workdir: Path):
        self.cert, key = _self_signed(workdir)
        self.stdout_path = workdir / "https.stdout.log"
        self.stderr_path = workdir / "https.stderr.log"
        cmd = [str(_binary()), "serve", "--data-dir", str(workdir / "data"), "--listen", "127.0.0.1:0",
               "--partitions", "4", "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY,
               "--tls-cert", str(self.cert), "--tls-key", str(key), "--domain", DOMAIN]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_")}
        env["NO_COLOR"] = "1"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = READY_RE.search(self.stdout_path.read_text(errors="replace"))
            if m:
                self.endpoint = m.group(1).rstrip("/")
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"laneway (TLS) did not start:\n{self.stderr_path.read_text(errors='replace')[-4000:]}",
                    pytrace=False)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    server = TlsServer(tmp_path_factory.mktemp("laneway-https"))
    yield server
    alive = server.proc.poll() is None
    server.stop()
    assert alive, "laneway (TLS) died during the tests"


@pytest.fixture(scope="module")
def s3s(tls_server):
    return boto3.client(
        "s3", endpoint_url=tls_server.endpoint, region_name=REGION, verify=str(tls_server.cert),
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
    )


@pytest.fixture
def tls_bucket(s3s):
    name = f"https-{uuid.uuid4().hex[:12]}"
    s3s.create_bucket(Bucket=name)
    return name


def _crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_listening_line_says_https(tls_server):
    assert tls_server.endpoint.startswith("https://127.0.0.1:")


def test_put_get_over_https(s3s, tls_bucket):
    body = os.urandom(100_000)
    s3s.put_object(Bucket=tls_bucket, Key="small", Body=body)
    got = s3s.get_object(Bucket=tls_bucket, Key="small", ChecksumMode="ENABLED")
    assert got["Body"].read() == body
    assert got["ChecksumCRC32"] == _crc32_b64(body)


def test_upload_file_multipart_over_https(s3s, tls_bucket, tmp_path):
    data = os.urandom(20 * MIB)
    src, down = tmp_path / "up.bin", tmp_path / "down.bin"
    src.write_bytes(data)
    s3s.upload_file(str(src), tls_bucket, "big")
    head = s3s.head_object(Bucket=tls_bucket, Key="big", ChecksumMode="ENABLED")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].strip('"').endswith("-3")  # 8 MiB parts: multipart
    assert head.get("ChecksumCRC32"), head
    got = s3s.get_object(Bucket=tls_bucket, Key="big", ChecksumMode="ENABLED")
    assert got["ChecksumCRC32"] == head["ChecksumCRC32"]
    assert hashlib.sha256(got["Body"].read()).digest() == hashlib.sha256(data).digest()
    s3s.download_file(tls_bucket, "big", str(down))
    assert down.read_bytes() == data


def test_aws_cli_cp_100mib_over_https(tls_server, s3s, tls_bucket, tmp_path):
    aws = shutil.which("aws", path=str(REPO_ROOT / ".venv/bin")) or shutil.which("aws")
    if aws is None:
        pytest.fail("aws CLI not found in .venv/bin or PATH (pip install -r conformance/requirements.txt)")
    src, down = tmp_path / "up.bin", tmp_path / "down.bin"
    with open(src, "wb") as f:
        for _ in range(100):
            f.write(os.urandom(MIB))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION,
        AWS_CA_BUNDLE=str(tls_server.cert), AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    url = f"s3://{tls_bucket}/cli/big.bin"
    for args in (["s3", "cp", str(src), url], ["s3", "cp", url, str(down)]):
        run = subprocess.run([aws, "--endpoint-url", tls_server.endpoint, *args],
                             env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
    assert s3s.head_object(Bucket=tls_bucket, Key="cli/big.bin")["ContentLength"] == 100 * MIB
    h_src, h_down = hashlib.sha256(), hashlib.sha256()
    with open(src, "rb") as a, open(down, "rb") as b:
        for chunk in iter(lambda: a.read(MIB), b""):
            h_src.update(chunk)
        for chunk in iter(lambda: b.read(MIB), b""):
            h_down.update(chunk)
    assert h_src.digest() == h_down.digest()

    # The stored checksum is the one the CLI computed. At its defaults this
    # aws CLI creates the upload with x-amz-checksum-algorithm CRC32 (type
    # COMPOSITE, seen with --debug), sends each 8 MiB part with its CRC32 in
    # an aws-chunked trailer, and repeats the part CRC32s on completion: the
    # object's checksum is CRC32 over the parts' raw CRC32s, "-13" for 13
    # parts. Computed here from the file's bytes at the CLI's part
    # boundaries, independently of the server.
    expected = _composite_crc32(src, 8 * MIB)
    head = subprocess.run(
        [aws, "--endpoint-url", tls_server.endpoint, "s3api", "head-object", "--bucket", tls_bucket,
         "--key", "cli/big.bin", "--checksum-mode", "ENABLED"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert head.returncode == 0, head.stderr
    stored = json.loads(head.stdout)
    assert stored.get("ChecksumCRC32") == expected, stored
    assert stored.get("ChecksumType") == "COMPOSITE", stored
    # The part boundaries the server kept are the CLI's 8 MiB chunks.
    attrs = s3s.get_object_attributes(Bucket=tls_bucket, Key="cli/big.bin", ObjectAttributes=["ObjectParts"])
    sizes = [p["Size"] for p in attrs["ObjectParts"]["Parts"]]
    assert sizes == [8 * MIB] * 12 + [4 * MIB]


def _composite_crc32(path: Path, part_size: int) -> str:
    """A COMPOSITE CRC32 as S3 defines it: base64 of the CRC32 of the
    concatenated big-endian part CRC32s, then "-N"."""
    raw = b""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(part_size), b""):
            raw += zlib.crc32(chunk).to_bytes(4, "big")
    return f"{_crc32_b64(raw)}-{len(raw) // 4}"


def _signed(tls_server, method: str, bucket: str, path: str, body: bytes = b"") -> requests.Response:
    """A SigV4-signed request to 127.0.0.1 with `Host: BUCKET.DOMAIN:PORT`."""
    port = tls_server.endpoint.rsplit(":", 1)[1]
    host = f"{bucket}.{DOMAIN}:{port}"
    url = f"https://{host}{path}"
    req = AWSRequest(method=method, url=url, data=body,
                     headers={"x-amz-content-sha256": hashlib.sha256(body).hexdigest()})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    headers = dict(req.headers.items())
    headers["Host"] = host
    return requests.request(method, f"https://127.0.0.1:{port}{path}", data=body, headers=headers,
                            verify=False, timeout=60)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_virtual_hosted_style(tls_server, s3s, tls_bucket):
    # verify=False above: the certificate names 127.0.0.1, the Host header
    # names the bucket's virtual host; TLS itself is covered by the tests
    # above.
    put = _signed(tls_server, "PUT", tls_bucket, "/vh/key.txt", b"virtual hosted")
    assert put.status_code == 200, put.text
    assert s3s.get_object(Bucket=tls_bucket, Key="vh/key.txt")["Body"].read() == b"virtual hosted"
    got = _signed(tls_server, "GET", tls_bucket, "/vh/key.txt")
    assert got.status_code == 200 and got.content == b"virtual hosted"
    listed = _signed(tls_server, "GET", tls_bucket, "/?list-type=2&prefix=vh%2F")
    assert listed.status_code == 200 and "<Key>vh/key.txt</Key>" in listed.text
    missing = _signed(tls_server, "GET", f"nope-{uuid.uuid4().hex[:8]}", "/x")
    assert missing.status_code == 404 and "<Code>NoSuchBucket</Code>" in missing.text
    # Path style through the same server still works (boto3 default).
    assert s3s.head_object(Bucket=tls_bucket, Key="vh/key.txt")["ContentLength"] == 14


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_tagging_job_virtual_hosted_style(tls_server, s3s, tls_bucket):
    """The bulk tagging jobs route takes the bucket from `Host:
    BUCKET.DOMAIN` as the S3 calls do: start, read and finish a job."""
    for i in range(5):
        s3s.put_object(Bucket=tls_bucket, Key=f"job/{i}", Body=b"x")
    spec = json.dumps({"prefix": "job/", "set": {"vh": "yes"}}).encode()
    started = _signed(tls_server, "POST", tls_bucket, "/?x-laneway-tagging-jobs", spec)
    assert started.status_code == 202, started.text
    job = started.json()["id"]
    deadline = time.monotonic() + 60
    while True:
        got = _signed(tls_server, "GET", tls_bucket, f"/?x-laneway-tagging-jobs&id={job}")
        assert got.status_code == 200, got.text
        state = got.json()
        if state["state"] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert state["state"] == "done" and state["changed"] == 5, state
    tags = s3s.get_object_tagging(Bucket=tls_bucket, Key="job/3")["TagSet"]
    assert {"Key": "vh", "Value": "yes"} in tags
