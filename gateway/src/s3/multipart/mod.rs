//! The multipart family: this module holds the upload's life (create,
//! upload a part, complete, abort); [`part_copy`] UploadPartCopy,
//! [`uploads`] the part and upload listings.
//!
//! Multipart uploads: CreateMultipartUpload, UploadPart,
//! CompleteMultipartUpload, AbortMultipartUpload. (UploadPartCopy is in
//! [`crate::s3::multipart::part_copy`], ListParts and ListMultipartUploads in
//! [`crate::s3::multipart::uploads`].)
//!
//! Parts follow the rules of a PUT ([`crate::s3::object::put`]): everything checkable
//! is refused before the body is read, the body streams into the store,
//! Content-MD5 and x-amz-checksum-* are verified on the way, and a part is
//! at most 5 GiB. The verified checksum is kept with the part, so the
//! completion can check the checksums the client repeats and derive the
//! object's ([`crate::request::composite`]); a part whose checksum algorithm is not
//! its upload's is refused before its body is read, and a whole-object
//! checksum sent with the completion must match the derived one. Limits
//! are AWS's: part numbers 1 to
//! 10,000, every part but the last at least 5 MiB (checked at completion,
//! `EntityTooSmall`).
//!
//! Completion honours If-None-Match: `*` and If-Match, checked atomically
//! when the object is committed, like a PUT's.
//!
//! Quotas ([`crate::request::quota`]): a part reserves its bytes before it is
//! received (credited with the part of the same number it replaces) and
//! counts in the tenant's usage once durable; a completion adds one object
//! and no bytes; CreateMultipartUpload is refused past the tenant's cap
//! on open uploads (`QuotaExceeded`).
//!
//! A repeated CompleteMultipartUpload (an SDK retrying after a lost
//! answer) of an upload that completed is answered 200 with the first
//! answer's ETag and checksums when its part list matches, from the record
//! the store kept ([`laneway_store::multipart::completed`]): nothing is
//! written or counted again. Another part list gets `NoSuchUpload`.

pub mod part_copy;
pub mod uploads;

use crate::request::body;
use crate::request::canned_acl;
use crate::request::checksum::{self, Algo};
use crate::request::composite;
use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult};
use crate::request::names::check_key;
use crate::request::parts::{part_number, part_sums};
use crate::request::quota;
use crate::request::tags;
use crate::request::upload::{
    declared_length, decoded_content_length, parse_content_md5, write_cond,
};
use laneway_store::multipart::ListedPart;
use laneway_store::uploads::part_md5;
use laneway_store::{ObjectInfo, PutOptions, QuotaAsk, StoreError};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// CreateMultipartUpload.
pub async fn create_multipart_upload(
    gw: &Gateway,
    req: S3Request<CreateMultipartUploadInput>,
) -> GwResult<S3Response<CreateMultipartUploadOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    check_key(&input.key)?;
    canned_acl::check_object_acl(input.acl.as_ref())?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let tags = tags::from_header(input.tagging.as_deref())?;
    let wanted = composite::requested(
        input.checksum_algorithm.as_ref(),
        input.checksum_type.as_ref(),
    )?;
    let meta = crate::request::meta::meta_input!(input).into_meta()?;
    let reserved = quota::reserve(gw, &ctx, QuotaAsk::Upload).await?;
    let create =
        gw.store()
            .create_multipart_upload(&bucket, &input.key, meta, tags, wanted.clone());
    let upload_id = quota::covered(reserved, create).await?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(upload_id),
        checksum_algorithm: wanted
            .as_ref()
            .map(|w| ChecksumAlgorithm::from(w.algorithm.clone())),
        checksum_type: wanted.as_ref().map(|w| {
            ChecksumType::from_static(if w.full_object {
                ChecksumType::FULL_OBJECT
            } else {
                ChecksumType::COMPOSITE
            })
        }),
        ..Default::default()
    }))
}

/// UploadPart.
pub async fn upload_part(
    gw: &Gateway,
    req: S3Request<UploadPartInput>,
) -> GwResult<S3Response<UploadPartOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let decoded = decoded_content_length(&req.headers);
    let wanted = checksum::requested(&req.headers, req.trailing_headers.as_ref())?;
    let input = req.input;
    check_key(&input.key)?;
    let number = part_number(input.part_number)?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let length = declared_length(input.content_length.or(decoded))?;
    let content_md5 = input
        .content_md5
        .as_deref()
        .map(parse_content_md5)
        .transpose()?;
    let declared = gw
        .store()
        .upload_checksum(&bucket, &input.key, &input.upload_id)
        .await?;
    composite::check_part(declared.as_ref(), wanted.as_ref().map(|w| w.algo))?;

    let (stream, faults) = body::upload(input.body);
    let algo = wanted.as_ref().map(|w| w.algo);
    // The client's value is checked on the way (a mismatch fails the body);
    // the store computes and keeps its own over the bytes it stores.
    let (stream, _) = checksum::verify_requested(stream, wanted, &faults);
    let opts = PutOptions {
        content_md5,
        content_length: Some(length),
        tags: Vec::new(),
        checksum: algo.map(laneway_store::ChecksumSpec::Compute),
    };
    // A part adds no object; its bytes are held against the quota while it
    // streams, then count in the tenant's usage.
    let part = QuotaAsk::Part {
        bucket: bucket.clone(),
        key: input.key.clone(),
        upload_id: input.upload_id.clone(),
        number,
        bytes: length,
    };
    let reserved = quota::reserve(gw, &ctx, part).await?;
    let write = gw
        .store()
        .upload_part(&bucket, &input.key, &input.upload_id, number, opts, stream);
    let info = quota::covered(reserved, write)
        .await
        .map_err(|e| faults.explain(e))?;
    let sums = part_sums(info.checksum.as_ref());
    Ok(S3Response::new(UploadPartOutput {
        e_tag: Some(ETag::Strong(info.etag)),
        checksum_crc32: sums.crc32,
        checksum_crc32c: sums.crc32c,
        checksum_crc64nvme: sums.crc64nvme,
        checksum_sha1: sums.sha1,
        checksum_sha256: sums.sha256,
        ..Default::default()
    }))
}

/// The client's part list, in its order (the store checks the order).
fn listed_parts(upload: Option<CompletedMultipartUpload>) -> GwResult<Vec<ListedPart>> {
    let parts = upload.and_then(|u| u.parts).unwrap_or_default();
    if parts.is_empty() {
        return Err(GwError::MalformedXml(
            "The XML you provided was not well-formed or did not validate against our \
             published schema"
                .into(),
        ));
    }
    parts
        .iter()
        .map(|p| {
            let number = p
                .part_number
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| GwError::MalformedXml("Every part needs a PartNumber".into()))?;
            let etag = p
                .e_tag
                .as_ref()
                .ok_or_else(|| GwError::MalformedXml("Every part needs an ETag".into()))?;
            Ok(ListedPart {
                number,
                md5: part_md5(etag.value())?,
                checksum: composite::listed(p)?,
            })
        })
        .collect()
}

/// The whole-object checksum a CompleteMultipartUpload repeats, if any.
fn whole_checksum(input: &CompleteMultipartUploadInput) -> GwResult<Option<composite::Whole>> {
    composite::whole(
        [
            (Algo::Crc32, &input.checksum_crc32),
            (Algo::Crc32c, &input.checksum_crc32c),
            (Algo::Crc64Nvme, &input.checksum_crc64nvme),
            (Algo::Sha1, &input.checksum_sha1),
            (Algo::Sha256, &input.checksum_sha256),
        ],
        input.checksum_type.as_ref(),
    )
}

/// Where the object is, as CompleteMultipartUpload reports it.
fn location(headers: &http::HeaderMap, bucket: &str, key: &str) -> String {
    let host = headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let key = percent_encoding::utf8_percent_encode(key, crate::request::names::URL_ENCODE);
    format!("http://{host}/{bucket}/{key}")
}

/// CompleteMultipartUpload.
pub async fn complete_multipart_upload(
    gw: &Gateway,
    req: S3Request<CompleteMultipartUploadInput>,
) -> GwResult<S3Response<CompleteMultipartUploadOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let location = location(&req.headers, &req.input.bucket, &req.input.key);
    let input = req.input;
    check_key(&input.key)?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let cond = write_cond(input.if_match.as_ref(), input.if_none_match.as_ref())?;
    let whole = whole_checksum(&input)?;
    let declared = match gw
        .store()
        .upload_checksum(&bucket, &input.key, &input.upload_id)
        .await
    {
        Ok(d) => d,
        Err(StoreError::NoSuchUpload) => {
            // Gone: a retry of a completion is answered as the first was.
            let parts = listed_parts(input.multipart_upload)?;
            let info = gw
                .store()
                .repeated_completion(&bucket, &input.key, &input.upload_id, &parts)
                .await?;
            tracing::debug!(bucket = %bucket.name, key = %input.key, "repeated completion");
            return Ok(completed(input.bucket, input.key, location, &info));
        }
        Err(e) => return Err(e.into()),
    };
    composite::check_whole(declared.as_ref(), whole.as_ref())?;
    let parts = listed_parts(input.multipart_upload)?;
    // The parts' bytes are already counted; the object adds one object.
    let write = QuotaAsk::Write {
        bucket: bucket.clone(),
        key: Some(input.key.clone()),
        bytes: 0,
        objects: 1,
    };
    let reserved = quota::reserve(gw, &ctx, write).await?;
    let complete = gw.store().complete_multipart_upload(
        &bucket,
        &input.key,
        &input.upload_id,
        parts,
        cond,
        whole.map(|w| w.checksum),
    );
    let info = quota::covered(reserved, complete).await?;
    tracing::debug!(bucket = %bucket.name, key = %input.key, size = info.size, "upload completed");
    Ok(completed(input.bucket, input.key, location, &info))
}

/// The CompleteMultipartUpload answer for the object `info`.
fn completed(
    bucket: String,
    key: String,
    location: String,
    info: &ObjectInfo,
) -> S3Response<CompleteMultipartUploadOutput> {
    let sums = part_sums(info.checksum.as_ref());
    S3Response::new(CompleteMultipartUploadOutput {
        bucket: Some(bucket),
        key: Some(key),
        location: Some(location),
        e_tag: Some(ETag::Strong(info.etag.clone())),
        checksum_crc32: sums.crc32,
        checksum_crc32c: sums.crc32c,
        checksum_crc64nvme: sums.crc64nvme,
        checksum_sha1: sums.sha1,
        checksum_sha256: sums.sha256,
        checksum_type: info.checksum.as_ref().map(composite::type_of),
        ..Default::default()
    })
}

/// AbortMultipartUpload (204).
pub async fn abort_multipart_upload(
    gw: &Gateway,
    req: S3Request<AbortMultipartUploadInput>,
) -> GwResult<S3Response<AbortMultipartUploadOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    check_key(&input.key)?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    gw.store()
        .abort_multipart_upload(&bucket, &input.key, &input.upload_id)
        .await?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_part_lists_are_malformed() {
        assert!(matches!(listed_parts(None), Err(GwError::MalformedXml(_))));
        let empty = CompletedMultipartUpload {
            parts: Some(vec![]),
        };
        assert!(matches!(
            listed_parts(Some(empty)),
            Err(GwError::MalformedXml(_))
        ));
        let one = CompletedMultipartUpload {
            parts: Some(vec![CompletedPart {
                part_number: Some(1),
                e_tag: Some(ETag::Strong("0123456789abcdef0123456789abcdef".into())),
                checksum_crc32: Some("AAAAAA==".into()),
                ..Default::default()
            }]),
        };
        let got = listed_parts(Some(one)).expect("parsed");
        assert_eq!(got[0].number, 1);
        assert_eq!(
            got[0].checksum.as_ref().map(|c| c.algorithm.as_str()),
            Some("CRC32")
        );
    }
}
