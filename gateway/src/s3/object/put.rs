//! PutObject: validate the request, then stream the body into the store.
//!
//! Everything that can be refused without reading the body is refused
//! first (bucket, key, length, Content-MD5, tags, metadata, conditional
//! headers), so a bad request costs no I/O and leaves nothing behind. The
//! body is never buffered: s3s's stream (already de-framed from
//! aws-chunked, signatures checked as it flows) goes straight to the store,
//! which verifies the declared length and Content-MD5 before the object
//! becomes visible; an x-amz-checksum-* header or trailer is verified on
//! the way ([`crate::request::checksum`]).
//!
//! A single PUT is limited to 5 GiB (`EntityTooLarge`), and must declare
//! its length (s3s already insists for signed and streaming uploads).
//! If-None-Match: `*` and If-Match: "etag" are store preconditions checked
//! atomically when the object is committed.
//!
//! [`store_upload`] is the one path of a single-request upload; PostObject
//! ([`crate::s3::post`]) uses it too.

use crate::request::body;
use crate::request::checksum::{self, Algo};
use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::GwResult;
use crate::request::meta::{MetaInput, etag, size_i64};
use crate::request::names::check_key;
use crate::request::quota;
use crate::request::tags;
use crate::request::upload::{
    declared_length, decoded_content_length, parse_content_md5, write_cond,
};
use laneway_store::{PutOptions, QuotaAsk};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// What a single-request upload stores: a PutObject, or the form of a
/// PostObject ([`crate::s3::post`]). Both go through [`store_upload`], so the
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
            meta: crate::request::meta::meta_input!(input),
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
    crate::request::canned_acl::check_object_acl(up.acl.as_ref())?;
    let bucket = gw.bucket(ctx, &up.bucket).await?;
    let length = declared_length(up.length)?;
    let content_md5 = up
        .content_md5
        .as_deref()
        .map(parse_content_md5)
        .transpose()?;
    let tags = tags::from_header(up.tagging.as_deref())?;
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
    let write = gw
        .store()
        .put_object(&bucket, &up.key, meta, opts, stream, cond);
    let info = quota::covered(reserved, write)
        .await
        .map_err(|e| faults.explain(e))?;
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
mod tests {}
