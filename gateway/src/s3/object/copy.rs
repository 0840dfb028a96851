//! CopyObject.
//!
//! - `x-amz-metadata-directive`: COPY (default) keeps the source's
//!   metadata; REPLACE takes it from this request's headers.
//! - `x-amz-tagging-directive`: COPY (default) keeps the source's tags;
//!   REPLACE takes them from `x-amz-tagging`.
//! - `x-amz-copy-source-if-*` are evaluated on the source; any failure is
//!   `412 PreconditionFailed`.
//! - Copying an object onto itself without REPLACE is `InvalidRequest`, as
//!   AWS answers; with REPLACE it is a metadata-only update in the store
//!   (`replace_object_meta`), no data is read or written.
//! - Any other copy streams the source into a new PUT of the destination:
//!   constant memory, and the store recomputes (hence keeps) the MD5 ETag.
//!   Sources above 5 GiB are refused, as for a single PUT.
//!
//! If-None-Match: `*` / If-Match on the request are preconditions on the
//! destination, checked atomically when it is committed (412), as for a
//! PUT; `x-amz-acl` other than `private` is refused ([`crate::s3::bucket::acl`]).
//!
//! Both buckets are looked up in the requesting tenant's namespace, so a
//! tenant can never copy from another tenant's bucket.

use crate::request::conditional::Conditions;
use crate::request::context::{Gateway, ReqCtx};
use crate::request::copy_source::{blame_copy, check_source, source_of, watched};
use crate::request::error::{GwError, GwResult};
use crate::request::meta::{etag, timestamp};
use crate::request::names::check_key;
use crate::request::quota;
use crate::request::tags;
use crate::request::upload::{MAX_PUT_BYTES, write_cond};
use laneway_store::{ObjectInfo, PutOptions, QuotaAsk, WriteCond};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// Whether a directive header says REPLACE (COPY when absent).
fn replaces(directive: Option<&str>, header: &str) -> GwResult<bool> {
    match directive {
        None | Some("COPY") => Ok(false),
        Some("REPLACE") => Ok(true),
        Some(other) => Err(GwError::InvalidArgument(format!(
            "Unknown {header}: {other}"
        ))),
    }
}

fn output(info: &ObjectInfo) -> S3Response<CopyObjectOutput> {
    S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(etag(info)),
            last_modified: Some(timestamp(info.mtime_ms)),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The destination's If-None-Match / If-Match (s3s 0.14 has no fields for
/// them on CopyObject): the same store precondition as a PUT's.
fn dest_cond(headers: &http::HeaderMap) -> GwResult<WriteCond> {
    let parse = |name: http::header::HeaderName| {
        headers
            .get(name)
            .map(|v| {
                ETagCondition::parse_http_header(v.as_bytes())
                    .map_err(|_| GwError::InvalidArgument("Invalid conditional header".into()))
            })
            .transpose()
    };
    let if_match = parse(http::header::IF_MATCH)?;
    let if_none_match = parse(http::header::IF_NONE_MATCH)?;
    write_cond(if_match.as_ref(), if_none_match.as_ref())
}

/// A self-copy rewrites metadata in place: check the destination condition
/// against the object it rewrites.
fn check_self_cond(cond: &WriteCond, current: &ObjectInfo) -> GwResult<()> {
    let holds = match cond {
        WriteCond::None | WriteCond::IfExists => true,
        WriteCond::IfAbsent => false,
        WriteCond::IfEtag(e) => e.trim_matches('"') == current.etag,
        WriteCond::IfMd5(md5) => hex::encode(md5) == current.etag,
    };
    if holds {
        Ok(())
    } else {
        Err(GwError::PreconditionFailed)
    }
}

/// CopyObject.
pub async fn copy_object(
    gw: &Gateway,
    req: S3Request<CopyObjectInput>,
) -> GwResult<S3Response<CopyObjectOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let dest_cond = dest_cond(&req.headers)?;
    let input = req.input;
    check_key(&input.key)?;
    crate::request::canned_acl::check_object_acl(input.acl.as_ref())?;
    let (src_bucket, src_key) = source_of(&input.copy_source)?;
    let dst = gw.bucket(&ctx, &input.bucket).await?;
    let src = gw.bucket(&ctx, src_bucket).await?;
    let replace_meta = replaces(
        input
            .metadata_directive
            .as_ref()
            .map(MetadataDirective::as_str),
        "metadata directive",
    )?;
    let replace_tags = replaces(
        input
            .tagging_directive
            .as_ref()
            .map(TaggingDirective::as_str),
        "tagging directive",
    )?;
    let conds = Conditions {
        if_match: input.copy_source_if_match.as_ref(),
        if_none_match: input.copy_source_if_none_match.as_ref(),
        if_modified_since: input.copy_source_if_modified_since.as_ref(),
        if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
    };
    let new_tags = replace_tags
        .then(|| tags::from_header(input.tagging.as_deref()))
        .transpose()?;
    let new_meta = if replace_meta {
        Some(crate::request::meta::meta_input!(input).into_meta()?)
    } else {
        None
    };

    if src.id == dst.id && src_key == input.key {
        let Some(meta) = new_meta else {
            return Err(GwError::InvalidRequest(
                "This copy request is illegal because it is trying to copy an object to itself \
                 without changing the object's metadata, storage class, website redirect location \
                 or encryption attributes."
                    .into(),
            ));
        };
        let current = gw.store().head_object(&src, src_key).await?;
        check_source(&conds, &current)?;
        check_self_cond(&dest_cond, &current)?;
        let info = gw
            .store()
            .replace_object_meta(&dst, &input.key, meta, new_tags)
            .await?;
        return Ok(output(&info));
    }

    let (info, stream) = gw.store().get_object(&src, src_key, None).await?;
    check_source(&conds, &info)?;
    if info.size > MAX_PUT_BYTES {
        return Err(GwError::InvalidRequest(format!(
            "The specified copy source is larger than the maximum allowable size for a copy source: {MAX_PUT_BYTES}"
        )));
    }
    let opts = PutOptions {
        content_md5: None,
        content_length: Some(info.size),
        tags: new_tags.unwrap_or_else(|| info.tags.clone()),
        // The bytes are the source's: so is its checksum.
        checksum: info
            .checksum
            .clone()
            .map(laneway_store::ChecksumSpec::Known),
    };
    let meta = new_meta.unwrap_or_else(|| info.meta.clone());
    let (stream, source_failed) = watched(stream, &req.extensions);
    let write = QuotaAsk::Write {
        bucket: dst.clone(),
        key: Some(input.key.clone()),
        bytes: info.size,
        objects: 1,
    };
    let reserved = quota::reserve(gw, &ctx, write).await?;
    let write = gw
        .store()
        .put_object(&dst, &input.key, meta, opts, stream, dest_cond);
    let stored = quota::covered(reserved, write)
        .await
        .map_err(|e| blame_copy(&source_failed, e))?;
    Ok(output(&stored))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_default_to_copy() {
        assert!(!replaces(None, "x").expect("default"));
        assert!(!replaces(Some("COPY"), "x").expect("copy"));
        assert!(replaces(Some("REPLACE"), "x").expect("replace"));
        assert!(matches!(
            replaces(Some("replace"), "x"),
            Err(GwError::InvalidArgument(_))
        ));
    }
}
