//! PutObject: validate the request, then stream the body into the store.
//!
//! Everything that can be refused without reading the body is refused
//! first (bucket, key, length, Content-MD5, tags, metadata, conditional
//! headers), so a bad request costs no I/O and leaves nothing behind. The
//! body is never buffered: s3s's stream (already de-framed from
//! aws-chunked, signatures checked as it flows) goes straight to the store,
//! which verifies the declared length and Content-MD5 before the object
//! becomes visible.
//!
//! A single PUT is limited to 5 GiB (`EntityTooLarge`), and must declare
//! its length (s3s already insists for signed and streaming uploads).
//! If-None-Match: `*` and If-Match are checked against the current object
//! just before the write; that check is not atomic with the write (see
//! STORE_API_REQUESTS.md).

use crate::body;
use crate::context::{Gateway, ReqCtx};
use crate::error::{GwError, GwResult};
use crate::meta::{MetaInput, etag, size_i64};
use crate::names::check_key;
use crate::tagging;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use laneway_store::{BucketInfo, PutOptions, StoreError};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// Largest single PUT (and copy source): 5 GiB.
pub const MAX_PUT_BYTES: u64 = 5 * 1024 * 1024 * 1024;

/// Decode a Content-MD5 header: base64 of exactly 16 bytes.
pub fn parse_content_md5(header: &str) -> GwResult<[u8; 16]> {
    let raw = STANDARD.decode(header.trim()).map_err(|_| GwError::InvalidDigest)?;
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
fn decoded_content_length(headers: &http::HeaderMap) -> Option<i64> {
    headers
        .get("x-amz-decoded-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
}

/// Check If-Match / If-None-Match of a write against the current object.
async fn check_write_conditions(
    gw: &Gateway,
    bucket: &BucketInfo,
    key: &str,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> GwResult<()> {
    if if_match.is_none() && if_none_match.is_none() {
        return Ok(());
    }
    let current = match gw.store().head_object(bucket, key) {
        Ok(info) => Some(info),
        Err(StoreError::NoSuchKey) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(cond) = if_none_match {
        if !cond.is_any() {
            return Err(GwError::NotImplemented("If-None-Match other than *"));
        }
        if current.is_some() {
            return Err(GwError::PreconditionFailed);
        }
    }
    if let Some(cond) = if_match {
        let Some(info) = current else {
            return Err(GwError::Store(StoreError::NoSuchKey));
        };
        if cond.as_etag().is_some_and(|e| e.value() != info.etag) {
            return Err(GwError::PreconditionFailed);
        }
    }
    Ok(())
}

/// PutObject.
pub async fn put_object(
    gw: &Gateway,
    req: S3Request<PutObjectInput>,
) -> GwResult<S3Response<PutObjectOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let decoded = decoded_content_length(&req.headers);
    let input = req.input;
    check_key(&input.key)?;
    let bucket = gw.bucket(&ctx, &input.bucket)?;
    let length = declared_length(input.content_length.or(decoded))?;
    let content_md5 = input.content_md5.as_deref().map(parse_content_md5).transpose()?;
    let tags = tagging::from_header(input.tagging.as_deref())?;
    let meta = MetaInput {
        content_type: input.content_type,
        content_encoding: input.content_encoding,
        content_disposition: input.content_disposition,
        content_language: input.content_language,
        cache_control: input.cache_control,
        expires: input.expires,
        user: input.metadata,
    }
    .into_meta()?;
    check_write_conditions(gw, &bucket, &input.key, input.if_match.as_ref(), input.if_none_match.as_ref())
        .await?;

    let opts = PutOptions { content_md5, content_length: Some(length), tags };
    let (stream, faults) = body::upload(input.body);
    let info = gw
        .store()
        .put_object(&bucket, &input.key, meta, opts, stream)
        .await
        .map_err(|e| faults.explain(e))?;
    tracing::debug!(bucket = %bucket.name, key = %input.key, size = info.size, "object stored");
    Ok(S3Response::new(PutObjectOutput {
        e_tag: Some(etag(&info)),
        size: Some(size_i64(info.size)?),
        ..Default::default()
    }))
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
            assert!(matches!(parse_content_md5(bad), Err(GwError::InvalidDigest)), "{bad}");
        }
    }

    #[test]
    fn declared_length_is_required_and_bounded() {
        assert!(matches!(declared_length(None), Err(GwError::MissingContentLength)));
        assert!(matches!(declared_length(Some(-1)), Err(GwError::InvalidArgument(_))));
        assert_eq!(declared_length(Some(0)).expect("empty"), 0);
        let max = i64::try_from(MAX_PUT_BYTES).expect("fits");
        assert_eq!(declared_length(Some(max)).expect("max"), MAX_PUT_BYTES);
        assert!(matches!(declared_length(Some(max + 1)), Err(GwError::EntityTooLarge)));
    }
}
