//! PutObject: validate the request, then stream the body into the store.
//!
//! Everything that can be refused without reading the body is refused
//! first (bucket, key, length, Content-MD5, tags, metadata, conditional
//! headers), so a bad request costs no I/O and leaves nothing behind. The
//! body is never buffered: s3s's stream (already de-framed from
//! aws-chunked, signatures checked as it flows) goes straight to the store,
//! which verifies the declared length and Content-MD5 before the object
//! becomes visible; an x-amz-checksum-* header or trailer is verified on
//! the way ([`crate::checksum`]).
//!
//! A single PUT is limited to 5 GiB (`EntityTooLarge`), and must declare
//! its length (s3s already insists for signed and streaming uploads).
//! If-None-Match: `*` and If-Match: "etag" are store preconditions checked
//! atomically when the object is committed.
//!
//! [`store_upload`] is the one path of a single-request upload; PostObject
//! ([`crate::post`]) uses it too.

use crate::body;
use crate::checksum::{self, Algo};
use crate::context::{Gateway, ReqCtx};
use crate::error::{GwError, GwResult};
use crate::meta::{MetaInput, etag, size_i64};
use crate::names::check_key;
use crate::quota;
use crate::tagging;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use laneway_store::{PutOptions, QuotaAsk, WriteCond};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

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

/// What a single-request upload stores: a PutObject, or the form of a
/// PostObject ([`crate::post`]). Both go through [`store_upload`], so the
/// checks, the quota and the commit are the same.
pub struct Upload {
    /// Bucket name (in the requesting tenant's namespace).
    pub bucket: String,
    /// Object key.
    pub key: String,
    /// The body.
    pub body: Option<StreamingBlob>,
    /// Its declared length.
    pub length: Option<i64>,
    /// Content-MD5 (base64), if sent.
    pub content_md5: Option<String>,
    /// `x-amz-tagging` (URL-encoded tag set), if sent.
    pub tagging: Option<String>,
    /// Canned ACL, if sent (only `private` is accepted).
    pub acl: Option<ObjectCannedACL>,
    /// Content-* headers and user metadata.
    pub meta: MetaInput,
    /// If-Match.
    pub if_match: Option<ETagCondition>,
    /// If-None-Match.
    pub if_none_match: Option<ETagCondition>,
}

impl Upload {
    /// The upload a PutObject asks for.
    fn of_put(input: PutObjectInput, decoded: Option<i64>) -> Upload {
        Upload {
            bucket: input.bucket,
            key: input.key,
            body: input.body,
            length: input.content_length.or(decoded),
            content_md5: input.content_md5,
            tagging: input.tagging,
            acl: input.acl,
            meta: crate::meta::meta_input!(input),
            if_match: input.if_match,
            if_none_match: input.if_none_match,
        }
    }
}

/// PutObject.
pub async fn put_object(
    gw: &Gateway,
    req: S3Request<PutObjectInput>,
) -> GwResult<S3Response<PutObjectOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let decoded = decoded_content_length(&req.headers);
    let wanted = checksum::requested(&req.headers, req.trailing_headers.as_ref())?;
    let out = store_upload(gw, &ctx, Upload::of_put(req.input, decoded), wanted).await?;
    Ok(S3Response::new(out))
}

/// Check and store one single-request upload, verifying the checksum in
/// `wanted` on the way; answers as PutObject does.
pub async fn store_upload(
    gw: &Gateway,
    ctx: &ReqCtx,
    up: Upload,
    wanted: Option<checksum::Request>,
) -> GwResult<PutObjectOutput> {
    check_key(&up.key)?;
    crate::acl::check_object_acl(up.acl.as_ref())?;
    let bucket = gw.bucket(ctx, &up.bucket).await?;
    let length = declared_length(up.length)?;
    let content_md5 = up
        .content_md5
        .as_deref()
        .map(parse_content_md5)
        .transpose()?;
    let tags = tagging::from_header(up.tagging.as_deref())?;
    let meta = up.meta.into_meta()?;
    let cond = write_cond(up.if_match.as_ref(), up.if_none_match.as_ref())?;

    let (stream, faults) = body::upload(up.body);
    let algo = wanted.as_ref().map(|w| w.algo);
    let (stream, computed) = checksum::verify_requested(stream, wanted, &faults);
    let opts = PutOptions {
        content_md5,
        content_length: Some(length),
        tags,
        checksum: algo.map(laneway_store::ChecksumSpec::Compute),
    };
    let write = QuotaAsk::Write {
        bucket: bucket.clone(),
        key: Some(up.key.clone()),
        bytes: length,
        objects: 1,
    };
    let reserved = quota::reserve(gw, ctx, write).await?;
    let info = gw
        .store()
        .put_object(&bucket, &up.key, meta, opts, stream, cond)
        .await
        .map_err(|e| faults.explain(e))?;
    drop(reserved);
    tracing::debug!(bucket = %bucket.name, key = %up.key, size = info.size, "object stored");
    let mut out = PutObjectOutput {
        e_tag: Some(etag(&info)),
        size: Some(size_i64(info.size)?),
        ..Default::default()
    };
    if let (Some(algo), Some(value)) = (algo, computed.and_then(|c| c.get())) {
        echo_checksum(&mut out, algo, value);
    }
    Ok(out)
}

/// Return the verified checksum and its type, as S3 does (a single
/// request's checksum covers the whole object: FULL_OBJECT).
fn echo_checksum(out: &mut PutObjectOutput, algo: Algo, value: String) {
    out.checksum_type = Some(ChecksumType::from_static(ChecksumType::FULL_OBJECT));
    let slot = match algo {
        Algo::Crc32 => &mut out.checksum_crc32,
        Algo::Crc32c => &mut out.checksum_crc32c,
        Algo::Crc64Nvme => &mut out.checksum_crc64nvme,
        Algo::Sha1 => &mut out.checksum_sha1,
        Algo::Sha256 => &mut out.checksum_sha256,
    };
    *slot = Some(value);
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
