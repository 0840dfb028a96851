//! ListParts and ListMultipartUploads.
//!
//! ListParts pages by part number: `part-number-marker` (exclusive),
//! `max-parts` (default and cap 1000); a truncated page names the last part
//! it holds as `NextPartNumberMarker`. ListMultipartUploads lists a
//! bucket's uploads in (key, upload id) order with `prefix`, `delimiter`
//! (keys rolled up into CommonPrefixes), `key-marker` / `upload-id-marker`
//! and `max-uploads` (default and cap 1000); a truncated page carries the
//! markers to resume from. Each part and upload reports the checksum it was
//! created or verified with.

use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::GwResult;
use crate::request::meta::{size_i64, timestamp};
use crate::request::names::check_key;
use crate::request::parts::{algorithm_of, part_sums};
use crate::request::parts::{page_size, part_marker};
use laneway_store::multipart::UploadChecksum;
use laneway_store::{PartInfo, UploadEntry, UploadInfo, UploadQuery};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

fn part_dto(p: PartInfo) -> GwResult<Part> {
    let sums = part_sums(p.checksum.as_ref());
    Ok(Part {
        part_number: Some(i32::try_from(p.number).unwrap_or(i32::MAX)),
        size: Some(size_i64(p.size)?),
        e_tag: Some(ETag::Strong(p.etag)),
        last_modified: Some(timestamp(p.mtime_ms)),
        checksum_crc32: sums.crc32,
        checksum_crc32c: sums.crc32c,
        checksum_crc64nvme: sums.crc64nvme,
        checksum_sha1: sums.sha1,
        checksum_sha256: sums.sha256,
    })
}

fn checksum_type(c: &UploadChecksum) -> ChecksumType {
    ChecksumType::from_static(if c.full_object {
        ChecksumType::FULL_OBJECT
    } else {
        ChecksumType::COMPOSITE
    })
}

/// ListParts.
pub async fn list_parts(
    gw: &Gateway,
    req: S3Request<ListPartsInput>,
) -> GwResult<S3Response<ListPartsOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    check_key(&input.key)?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let max = page_size(input.max_parts, "max-parts")?;
    let marker = part_marker(input.part_number_marker)?;
    let wanted = gw
        .store()
        .upload_checksum(&bucket, &input.key, &input.upload_id)
        .await?;
    let (parts, truncated) = gw
        .store()
        .list_parts(&bucket, &input.key, &input.upload_id, marker, max)
        .await?;
    let next = parts.last().map(|p| i32::try_from(p.number).unwrap_or(0));
    let parts = parts
        .into_iter()
        .map(part_dto)
        .collect::<GwResult<Vec<_>>>()?;
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: if truncated { next } else { None },
        max_parts: Some(i32::try_from(max).unwrap_or(1000)),
        is_truncated: Some(truncated),
        parts: Some(parts),
        storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
        checksum_algorithm: wanted.as_ref().and_then(|w| algorithm_of(&w.algorithm)),
        checksum_type: wanted.as_ref().map(checksum_type),
        ..Default::default()
    }))
}

fn upload_dto(u: UploadInfo) -> MultipartUpload {
    MultipartUpload {
        checksum_algorithm: u.checksum.as_ref().and_then(|c| algorithm_of(&c.algorithm)),
        checksum_type: u.checksum.as_ref().map(checksum_type),
        initiated: Some(timestamp(u.created_ms)),
        key: Some(u.key),
        upload_id: Some(u.upload_id),
        storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
        ..Default::default()
    }
}

/// ListMultipartUploads.
pub async fn list_multipart_uploads(
    gw: &Gateway,
    req: S3Request<ListMultipartUploadsInput>,
) -> GwResult<S3Response<ListMultipartUploadsOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let q = UploadQuery {
        prefix: input.prefix.clone().unwrap_or_default(),
        delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
        key_marker: input.key_marker.clone().filter(|k| !k.is_empty()),
        upload_id_marker: input.upload_id_marker.clone().filter(|u| !u.is_empty()),
        max_uploads: page_size(input.max_uploads, "max-uploads")?,
    };
    let page = gw.store().list_multipart_uploads(&bucket, &q).await?;
    let (next_key, next_id) = match page.entries.last() {
        Some(UploadEntry::Upload(u)) if page.truncated => {
            (Some(u.key.clone()), Some(u.upload_id.clone()))
        }
        Some(UploadEntry::Prefix(p)) if page.truncated => (Some(p.clone()), None),
        _ => (None, None),
    };
    let mut uploads = Vec::new();
    let mut prefixes = Vec::new();
    for e in page.entries {
        match e {
            UploadEntry::Upload(u) => uploads.push(upload_dto(u)),
            UploadEntry::Prefix(p) => prefixes.push(CommonPrefix { prefix: Some(p) }),
        }
    }
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix,
        delimiter: input.delimiter,
        key_marker: input.key_marker,
        upload_id_marker: input.upload_id_marker,
        next_key_marker: next_key,
        next_upload_id_marker: next_id,
        max_uploads: Some(i32::try_from(q.max_uploads).unwrap_or(1000)),
        is_truncated: Some(page.truncated),
        uploads: Some(uploads),
        common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {}
