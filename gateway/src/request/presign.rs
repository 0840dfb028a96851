//! Time limits of signed requests that s3s does not enforce itself.
//!
//! - SigV4 presigned URLs: AWS refuses an `X-Amz-Expires` that is not a
//!   number or is above seven days (604,800 s) with `400
//!   AuthorizationQueryParametersError`, whatever the signature says, and
//!   a negative one (a URL whose validity ended before it was signed, as
//!   s3-tests' "authenticated_expired" cases send) as expired: `403
//!   AccessDenied` "Request has expired" ([`check_expires_param`], run by
//!   `serve` before s3s). s3s checks the expiry time itself: a URL whose
//!   time is up is the same 403.
//! - SigV2 presigned URLs (`AWSAccessKeyId`, `Expires`, `Signature`): s3s
//!   refuses an `Expires` in the past, but not one decades ahead, which
//!   would make a leaked URL a permanent credential. The same seven days
//!   apply: an `Expires` further ahead is `403 AccessDenied`.
//! - SigV2 header signatures (`Authorization: AWS key:sig`): s3s only
//!   checks that a `Date` or `x-amz-date` header exists, so a captured
//!   request could be replayed forever. As AWS does, the request time
//!   (`x-amz-date` when present, else `Date`) must be within
//!   [`MAX_SKEW_SECS`] (15 minutes) of the server clock, else `403
//!   RequestTimeTooSkewed`.
//!
//! The SigV2 checks run in the access step, after the signature verified,
//! so they only ever speak to a caller who holds the key.

use crate::request::error::{GwError, GwResult};
use http::HeaderMap;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc2822;

/// Longest validity of a presigned URL, in seconds (seven days).
pub const MAX_EXPIRES_SECS: u64 = 7 * 24 * 3600;

/// Largest difference between a SigV2 request's time and the server clock.
pub const MAX_SKEW_SECS: i64 = 15 * 60;

/// The value of query parameter `name` (case-sensitive, as s3s reads it).
fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Refuse a SigV4 presigned URL whose `X-Amz-Expires` is not a number or
/// is above [`MAX_EXPIRES_SECS`], with AWS's `400
/// AuthorizationQueryParametersError` and its wording, and one that is
/// negative as expired (`403 AccessDenied` "Request has expired"). Runs
/// before s3s, which would answer the first and the last with
/// `InvalidRequest` ("missing presigned url v4 fields"), as AWS checks the
/// parameter before the signature; a URL whose time is up is s3s's own
/// `403 AccessDenied` "Request has expired".
pub fn check_expires_param(query: Option<&str>) -> GwResult<()> {
    let Some(query) = query else {
        return Ok(());
    };
    let expires = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| k.eq_ignore_ascii_case("X-Amz-Expires"))
        .map(|(_, v)| v);
    let Some(expires) = expires else {
        return Ok(());
    };
    let refuse = |why: String| Err(GwError::AuthorizationQueryParameters(why));
    match expires.parse::<i64>() {
        Err(_) => refuse("X-Amz-Expires should be a number".into()),
        Ok(secs) if secs < 0 => Err(GwError::RequestExpired),
        Ok(secs) if secs.unsigned_abs() > MAX_EXPIRES_SECS => refuse(format!(
            "X-Amz-Expires must be less than a week (in seconds) that is {MAX_EXPIRES_SECS}"
        )),
        Ok(_) => Ok(()),
    }
}

/// The time limits of SigV2 requests (presigned or header-signed) at
/// `now`; other requests pass.
pub fn check_v2_time(
    headers: &HeaderMap,
    query: Option<&str>,
    now: OffsetDateTime,
) -> GwResult<()> {
    // s3s takes a query with `Signature` as SigV2 query auth, first.
    if let Some(q) = query
        && query_param(q, "Signature").is_some()
    {
        return check_v2_expires(query_param(q, "Expires"), now);
    }
    let v2_header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("AWS "));
    if v2_header {
        return check_v2_date(headers, now);
    }
    Ok(())
}

/// A SigV2 presigned URL's `Expires` (Unix seconds): not past, and at
/// most seven days ahead.
fn check_v2_expires(expires: Option<&str>, now: OffsetDateTime) -> GwResult<()> {
    let Some(expires) = expires.and_then(|e| e.parse::<i64>().ok()) else {
        return Err(GwError::Denied(
            "a SigV2 presigned URL needs Expires in Unix seconds".into(),
        ));
    };
    let left = expires.saturating_sub(now.unix_timestamp());
    if left < 0 {
        return Err(GwError::RequestExpired);
    }
    if left.unsigned_abs() > MAX_EXPIRES_SECS {
        return Err(GwError::Denied(format!(
            "a presigned URL may be valid for at most seven days ({MAX_EXPIRES_SECS} s); \
             this one expires in {left} s"
        )));
    }
    Ok(())
}

/// A SigV2 header-signed request's time: `x-amz-date` when present (it
/// replaces Date in the string to sign), else `Date`; within
/// [`MAX_SKEW_SECS`] of `now`.
fn check_v2_date(headers: &HeaderMap, now: OffsetDateTime) -> GwResult<()> {
    let value = headers
        .get("x-amz-date")
        .or_else(|| headers.get(http::header::DATE))
        .and_then(|v| v.to_str().ok());
    let Some(at) = value.and_then(parse_http_date) else {
        return Err(GwError::Denied(
            "AWS authentication requires a valid Date or x-amz-date header".into(),
        ));
    };
    if (now - at).whole_seconds().abs() > MAX_SKEW_SECS {
        return Err(GwError::RequestTimeTooSkewed);
    }
    Ok(())
}

/// An HTTP date as clients send it: RFC 1123 / 2822 (`GMT` or a numeric
/// zone), or ISO 8601 basic (`20070327T193642Z`, some clients' x-amz-date).
pub fn parse_http_date(s: &str) -> Option<OffsetDateTime> {
    let s = s.trim();
    let numeric = match s.strip_suffix(" GMT").or_else(|| s.strip_suffix(" UTC")) {
        Some(head) => format!("{head} +0000"),
        None => s.to_string(),
    };
    if let Ok(t) = OffsetDateTime::parse(&numeric, &Rfc2822) {
        return Some(t);
    }
    let basic = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    time::PrimitiveDateTime::parse(s, basic)
        .ok()
        .map(time::PrimitiveDateTime::assume_utc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn expires_parameter_is_a_number_within_a_week() {
        let check = |q: &str| check_expires_param(Some(q));
        assert!(check_expires_param(None).is_ok());
        assert!(check("list-type=2").is_ok());
        assert!(check("X-Amz-Algorithm=AWS4&X-Amz-Expires=604800").is_ok());
        assert!(check("X-Amz-Expires=0").is_ok());
        for (bad, why) in [
            ("X-Amz-Expires=604801", "less than a week"),
            ("X-Amz-Expires=abc", "should be a number"),
        ] {
            match check(bad) {
                Err(GwError::AuthorizationQueryParameters(m)) => assert!(m.contains(why), "{m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(matches!(
            check("X-Amz-Expires=-1000"),
            Err(GwError::RequestExpired)
        ));
    }

    fn at(unix: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(unix).expect("time")
    }

    #[test]
    fn v2_presigned_urls_live_at_most_a_week() {
        let now = at(1_000_000_000);
        let url = |e: i64| format!("AWSAccessKeyId=AK&Signature=s%3D&Expires={e}");
        let ok = |q: &str| check_v2_time(&HeaderMap::new(), Some(q), now);
        assert!(ok(&url(1_000_000_000 + 300)).is_ok());
        assert!(ok(&url(1_000_000_000 + 604_800)).is_ok());
        assert!(matches!(
            ok(&url(1_000_000_000 + 604_801)),
            Err(GwError::Denied(_))
        ));
        assert!(
            matches!(ok(&url(4_102_444_800)), Err(GwError::Denied(_))),
            "2100"
        );
        assert!(matches!(
            ok(&url(999_999_999)),
            Err(GwError::RequestExpired)
        ));
        assert!(matches!(
            ok("Signature=x&Expires=soon"),
            Err(GwError::Denied(_))
        ));
        // SigV4 presigned URLs and unsigned queries are not SigV2.
        assert!(ok("X-Amz-Signature=x&X-Amz-Expires=60").is_ok());
        assert!(ok("list-type=2").is_ok());
    }

    fn v2_headers(date: Option<&str>, amz_date: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("AWS AK:c2ln"));
        if let Some(d) = date {
            h.insert("date", HeaderValue::from_str(d).expect("value"));
        }
        if let Some(d) = amz_date {
            h.insert("x-amz-date", HeaderValue::from_str(d).expect("value"));
        }
        h
    }

    #[test]
    fn v2_header_requests_are_within_15_minutes() {
        // Sun, 09 Sep 2001 01:46:40 GMT
        let now = at(1_000_000_000);
        let check = |d: Option<&str>, a: Option<&str>| check_v2_time(&v2_headers(d, a), None, now);
        assert!(check(Some("Sun, 09 Sep 2001 01:46:40 GMT"), None).is_ok());
        assert!(check(Some("Sun, 09 Sep 2001 02:00:00 +0000"), None).is_ok());
        assert!(check(None, Some("20010909T013640Z")).is_ok());
        for skewed in [
            "Sun, 09 Sep 2001 02:02:00 GMT",
            "Sun, 09 Sep 2001 01:31:00 GMT",
            "Mon, 01 Jan 2001 00:00:00 GMT",
        ] {
            assert!(
                matches!(
                    check(Some(skewed), None),
                    Err(GwError::RequestTimeTooSkewed)
                ),
                "{skewed}"
            );
        }
        // x-amz-date wins over Date.
        assert!(matches!(
            check(
                Some("Sun, 09 Sep 2001 01:46:40 GMT"),
                Some("Mon, 01 Jan 2001 00:00:00 GMT")
            ),
            Err(GwError::RequestTimeTooSkewed)
        ));
        assert!(matches!(
            check(Some("yesterday"), None),
            Err(GwError::Denied(_))
        ));
        // SigV4 headers are s3s's business.
        let mut v4 = HeaderMap::new();
        v4.insert(
            "authorization",
            HeaderValue::from_static("AWS4-HMAC-SHA256 Credential=x"),
        );
        assert!(check_v2_time(&v4, None, now).is_ok());
    }
}
