"""SigV2 time windows (issue 11): a SigV2 header-signed request is accepted
only within 15 minutes of the server clock (403 RequestTimeTooSkewed, as
AWS answers), and a SigV2 presigned URL only while it expires at most
seven days ahead (403 AccessDenied; expired ones "Request has expired").

The requests are signed here by hand (HMAC-SHA1 over the SigV2 string to
sign), so the date and expiry can be anything."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.parse
from email.utils import formatdate

import requests


def _sign(secret: str, string_to_sign: str) -> str:
    mac = hmac.new(secret.encode(), string_to_sign.encode(), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


def v2_get(server, path: str, date: str | None = None, amz_date: str | None = None) -> requests.Response:
    """GET `path` signed with a SigV2 Authorization header dated `date`
    (Date header) or `amz_date` (x-amz-date, which replaces Date)."""
    headers = {}
    amz = ""
    if amz_date is not None:
        headers["x-amz-date"] = amz_date
        amz = f"x-amz-date:{amz_date}\n"
        date_field = ""
    else:
        headers["Date"] = date
        date_field = date
    sig = _sign(server.secret_key, f"GET\n\n\n{date_field}\n{amz}{path}")
    headers["Authorization"] = f"AWS {server.access_key}:{sig}"
    return requests.get(server.endpoint + path, headers=headers, timeout=30)


def v2_presigned(server, path: str, expires: int) -> str:
    sig = _sign(server.secret_key, f"GET\n\n\n{expires}\n{path}")
    query = urllib.parse.urlencode({"AWSAccessKeyId": server.access_key, "Expires": str(expires), "Signature": sig})
    return f"{server.endpoint}{path}?{query}"


def _code(resp: requests.Response) -> str:
    text = resp.text
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""


def test_sigv2_header_auth_has_a_15_minute_window(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="v2", Body=b"signed with v2")
    path = f"/{bucket}/v2"
    now = time.time()
    ok = v2_get(server, path, date=formatdate(now, usegmt=True))
    assert ok.status_code == 200, ok.text
    assert ok.content == b"signed with v2"
    assert v2_get(server, path, date=formatdate(now - 600, usegmt=True)).status_code == 200
    assert v2_get(server, path, amz_date=formatdate(now, usegmt=True)).status_code == 200

    for when in (now - 20 * 60, now + 20 * 60, 978307200.0):  # 20 min either way; 2001-01-01
        resp = v2_get(server, path, date=formatdate(when, usegmt=True))
        assert (resp.status_code, _code(resp)) == (403, "RequestTimeTooSkewed"), resp.text
        resp = v2_get(server, path, amz_date=formatdate(when, usegmt=True))
        assert (resp.status_code, _code(resp)) == (403, "RequestTimeTooSkewed"), resp.text


def test_sigv2_presigned_urls_live_at_most_seven_days(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="pre-v2", Body=b"presigned v2")
    path = f"/{bucket}/pre-v2"
    now = int(time.time())
    ok = requests.get(v2_presigned(server, path, now + 300), timeout=30)
    assert ok.status_code == 200, ok.text
    assert ok.content == b"presigned v2"
    assert requests.get(v2_presigned(server, path, now + 7 * 86400 - 60), timeout=30).status_code == 200

    for expires in (now + 8 * 86400, 4102444800):  # eight days; the year 2100
        resp = requests.get(v2_presigned(server, path, expires), timeout=30)
        assert (resp.status_code, _code(resp)) == (403, "AccessDenied"), resp.text
        assert "seven days" in resp.text

    resp = requests.get(v2_presigned(server, path, now - 60), timeout=30)
    assert (resp.status_code, _code(resp)) == (403, "AccessDenied"), resp.text
    assert "Request has expired" in resp.text
