//! The request rules every write with a body (or a copy source) shares:
//! PutObject, UploadPart, CopyObject, UploadPartCopy: the 5 GiB limit,
//! the declared length, Content-MD5, and the If-Match / If-None-Match
//! preconditions of a write.

use crate::request::error::{GwError, GwResult};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use laneway_store::WriteCond;
use s3s::dto::ETagCondition;

/// Largest single PUT (and copy source): 5 GiB.
pub const MAX_PUT_BYTES: u64 = 5 * 1024 * 1024 * 1024;

/// Decode a Content-MD5 header: base64 of exactly 16 bytes.
pub fn parse_content_md5(header: &str) -> GwResult<[u8; 16]> {
    let raw = STANDARD
        .decode(header.trim())
        .map_err(|_| GwError::InvalidDigest)?;
    <[u8; 16]>::try_from(raw.as_slice()).map_err(|_| GwError::InvalidDigest)
}

/// The declared body length, within the single-PUT limit.
pub fn declared_length(len: Option<i64>) -> GwResult<u64> {
    let len = len.ok_or(GwError::MissingContentLength)?;
    let len = u64::try_from(len)
        .map_err(|_| GwError::InvalidArgument("Content-Length must not be negative".into()))?;
    if len > MAX_PUT_BYTES {
        return Err(GwError::EntityTooLarge);
    }
    Ok(len)
}

/// `x-amz-decoded-content-length`: the length of an aws-chunked body sent
/// without a Content-Length (s3s rewrites Content-Length when one was sent).
pub fn decoded_content_length(headers: &http::HeaderMap) -> Option<i64> {
    headers
        .get("x-amz-decoded-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
}

/// The store precondition of If-None-Match / If-Match, checked atomically
/// with the commit.
pub fn write_cond(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> GwResult<WriteCond> {
    match (if_match, if_none_match) {
        (None, None) => Ok(WriteCond::None),
        (None, Some(c)) if c.is_any() => Ok(WriteCond::IfAbsent),
        (None, Some(_)) => Err(GwError::NotImplemented("If-None-Match other than *")),
        (Some(ETagCondition::Any), None) => Ok(WriteCond::IfExists),
        (Some(ETagCondition::ETag(e)), None) => Ok(WriteCond::IfEtag(e.value().to_string())),
        (Some(_), Some(_)) => Err(GwError::InvalidRequest(
            "If-Match and If-None-Match cannot be combined on a write".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_md5_must_be_base64_of_16_bytes() {
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e
        let d = parse_content_md5("1B2M2Y8AsgTpgAmY7PhCfg==").expect("valid");
        assert_eq!(hex::encode(d), "d41d8cd98f00b204e9800998ecf8427e");
        for bad in ["", "not base64!", "AAAA", "1B2M2Y8AsgTpgAmY7PhCfgAA"] {
            assert!(
                matches!(parse_content_md5(bad), Err(GwError::InvalidDigest)),
                "{bad}"
            );
        }
    }

    #[test]
    fn declared_length_is_required_and_bounded() {
        assert!(matches!(
            declared_length(None),
            Err(GwError::MissingContentLength)
        ));
        assert!(matches!(
            declared_length(Some(-1)),
            Err(GwError::InvalidArgument(_))
        ));
        assert_eq!(declared_length(Some(0)).expect("empty"), 0);
        let max = i64::try_from(MAX_PUT_BYTES).expect("fits");
        assert_eq!(declared_length(Some(max)).expect("max"), MAX_PUT_BYTES);
        assert!(matches!(
            declared_length(Some(max + 1)),
            Err(GwError::EntityTooLarge)
        ));
    }
}
