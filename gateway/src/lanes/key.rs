//! The access key a request *claims*, read before any signature check, so
//! the lanes layer can charge the request to a tenant before s3s (and the
//! store) do any work for it.
//!
//! Forms understood (the ones s3s accepts):
//! * `Authorization: AWS4-HMAC-SHA256 Credential=AKID/date/region/s3/aws4_request, ...`
//! * `Authorization: AWS AKID:signature` (SigV2)
//! * presigned query `X-Amz-Credential=AKID%2Fdate%2F...` (SigV4) or
//!   `AWSAccessKeyId=AKID` (SigV2)
//!
//! Nothing here verifies anything: a forger can claim any key. The layer
//! only uses the claim to pick a lane, which bounds what a forger can
//! cost a victim to one base cost plus the bytes it actually sends (s3s
//! refuses the request once it checks the signature). A claimed key that
//! cannot be an access key (empty, too long, not alphanumeric) is no
//! claim at all.

use http::HeaderMap;
use percent_encoding::percent_decode_str;

/// Longest claimed access key considered (laneway's keys are 20).
pub const MAX_ACCESS_KEY_LEN: usize = 128;

/// The access key the request claims, if it claims a plausible one.
pub fn claimed_access_key(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let from_header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(from_authorization)
        .map(str::to_string);
    from_header
        .or_else(|| query.and_then(from_query))
        .filter(|k| plausible(k))
}

/// The key id of a SigV4 or SigV2 `Authorization` header value.
fn from_authorization(value: &str) -> Option<&str> {
    let value = value.trim_start();
    if let Some(rest) = value.strip_prefix("AWS4-HMAC-SHA256") {
        let cred = rest
            .split(',')
            .map(str::trim)
            .find_map(|part| part.strip_prefix("Credential="))?;
        return cred.split('/').next();
    }
    let rest = value.strip_prefix("AWS ")?;
    rest.split(':').next().map(str::trim)
}

/// The key id of a presigned URL's query string.
fn from_query(query: &str) -> Option<String> {
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || percent_decode_str(value).decode_utf8().ok();
        match name {
            "X-Amz-Credential" => return decoded()?.split('/').next().map(str::to_string),
            "AWSAccessKeyId" => return decoded().map(|v| v.into_owned()),
            _ => {}
        }
    }
    None
}

/// Whether `key` could be an access key id (laneway's are alphanumeric).
fn plausible(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_ACCESS_KEY_LEN
        && key.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_auth(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(v).expect("header"),
        );
        h
    }

    #[test]
    fn sigv4_header() {
        let h = with_auth(
            "AWS4-HMAC-SHA256 Credential=LWABC123/20240101/us-east-1/s3/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature=abcdef",
        );
        assert_eq!(claimed_access_key(&h, None).as_deref(), Some("LWABC123"));
        let tight =
            with_auth("AWS4-HMAC-SHA256 SignedHeaders=host,Credential=K2/x/y/s3/aws4_request");
        assert_eq!(claimed_access_key(&tight, None).as_deref(), Some("K2"));
    }

    #[test]
    fn sigv2_header() {
        let h = with_auth("AWS AKIDV2:c2lnbmF0dXJl");
        assert_eq!(claimed_access_key(&h, None).as_deref(), Some("AKIDV2"));
    }

    #[test]
    fn presigned_query() {
        let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=LWQ1%2F20240101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=ff";
        assert_eq!(
            claimed_access_key(&HeaderMap::new(), Some(q)).as_deref(),
            Some("LWQ1")
        );
        let v2 = "AWSAccessKeyId=LWV2&Expires=1&Signature=x";
        assert_eq!(
            claimed_access_key(&HeaderMap::new(), Some(v2)).as_deref(),
            Some("LWV2")
        );
    }

    #[test]
    fn header_wins_over_query() {
        let h = with_auth("AWS4-HMAC-SHA256 Credential=HDR/x/y/s3/aws4_request");
        let q = "X-Amz-Credential=QRY%2Fx";
        assert_eq!(claimed_access_key(&h, Some(q)).as_deref(), Some("HDR"));
    }

    #[test]
    fn no_or_implausible_claims() {
        let none = HeaderMap::new();
        assert_eq!(claimed_access_key(&none, None), None);
        assert_eq!(
            claimed_access_key(&none, Some("list-type=2&prefix=a")),
            None
        );
        assert_eq!(claimed_access_key(&with_auth("Bearer xyz"), None), None);
        assert_eq!(
            claimed_access_key(&with_auth("AWS4-HMAC-SHA256 Credential=/x/y"), None),
            None
        );
        assert_eq!(
            claimed_access_key(&none, Some("X-Amz-Credential=a%20b%2Fx")),
            None
        );
        assert_eq!(
            claimed_access_key(&none, Some("X-Amz-Credential=%FF%FE")),
            None
        );
        let long = format!("AWS {}:sig", "A".repeat(MAX_ACCESS_KEY_LEN + 1));
        assert_eq!(claimed_access_key(&with_auth(&long), None), None);
    }
}
