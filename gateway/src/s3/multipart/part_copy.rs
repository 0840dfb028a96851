//! UploadPartCopy: a part whose bytes come from an existing object.
//!
//! The source is resolved and its `x-amz-copy-source-if-*` conditions
//! evaluated as for CopyObject ([`crate::s3::object::copy`]); both buckets belong to
//! the requesting tenant. `x-amz-copy-source-range: bytes=first-last`
//! (inclusive, the only form S3 accepts here) selects a slice: a malformed
//! value is `InvalidArgument`, one reaching past the source `InvalidRange`.
//! The selected bytes stream from `Store::get_object` straight into
//! `Store::upload_part` (constant memory). When the upload was created with
//! a flexible checksum, the part's checksum is computed on the way, as if
//! the client had sent it, so the completion can compose it. The part's
//! bytes are reserved against the tenant's quota before they are copied,
//! as an UploadPart's are ([`QuotaAsk::Part`]).

use crate::request::checksum::Algo;
use crate::request::conditional::Conditions;
use crate::request::context::{Gateway, ReqCtx};
use crate::request::copy_source::{blame_copy, check_source, source_of, watched};
use crate::request::error::{GwError, GwResult};
use crate::request::meta::timestamp;
use crate::request::names::check_key;
use crate::request::parts::{part_number, part_sums};
use crate::request::quota;
use crate::request::upload::MAX_PUT_BYTES;
use laneway_store::{BodyStream, BucketInfo, GetRange, ObjectInfo, PutOptions, QuotaAsk};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// Attempts to read a consistent slice while the source is being replaced.
const ATTEMPTS: usize = 3;

/// Parse `bytes=first-last` against a source of `size` bytes.
pub fn parse_copy_range(value: &str, size: u64) -> GwResult<GetRange> {
    let malformed = || {
        GwError::InvalidArgument(
            "The x-amz-copy-source-range value must be of the form bytes=first-last where \
             first and last are the zero-based offsets of the first and last bytes to copy"
                .into(),
        )
    };
    let (first, last) = value
        .trim()
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(malformed)?;
    let first: u64 = first.parse().map_err(|_| malformed())?;
    let last: u64 = last.parse().map_err(|_| malformed())?;
    if first > last {
        return Err(malformed());
    }
    if last >= size {
        return Err(GwError::InvalidRange);
    }
    Ok(GetRange {
        start: first,
        end: last + 1,
    })
}

/// The slice to copy: the range asked for, or the whole source.
fn slice_of(range: Option<&str>, size: u64) -> GwResult<Option<GetRange>> {
    let r = match range {
        Some(v) => Some(parse_copy_range(v, size)?),
        None if size == 0 => None,
        None => Some(GetRange {
            start: 0,
            end: size,
        }),
    };
    if r.map_or(0, |r| r.end - r.start) > MAX_PUT_BYTES {
        return Err(GwError::EntityTooLarge);
    }
    Ok(r)
}

/// Read the slice of the source, consistent with the metadata the
/// conditions were checked on.
async fn read_source(
    gw: &Gateway,
    src: &BucketInfo,
    key: &str,
    conds: &Conditions<'_>,
    range: Option<&str>,
) -> GwResult<(ObjectInfo, u64, BodyStream)> {
    for _ in 0..ATTEMPTS {
        let info = gw.store().head_object(src, key).await?;
        check_source(conds, &info)?;
        let slice = slice_of(range, info.size)?;
        match gw.store().get_object(src, key, slice).await {
            Ok((got, stream)) if got.etag == info.etag => {
                let len = slice.map_or(0, |r| r.end - r.start);
                return Ok((got, len, stream));
            }
            Ok(_) | Err(laneway_store::StoreError::InvalidArgument(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(GwError::SlowDown(
        "the copy source kept changing while it was read",
    ))
}

/// UploadPartCopy.
pub async fn upload_part_copy(
    gw: &Gateway,
    req: S3Request<UploadPartCopyInput>,
) -> GwResult<S3Response<UploadPartCopyOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    check_key(&input.key)?;
    let number = part_number(input.part_number)?;
    let (src_key_bucket, src_key) = source_of(&input.copy_source)?;
    let dst = gw.bucket(&ctx, &input.bucket).await?;
    let src = gw.bucket(&ctx, src_key_bucket).await?;
    let wanted = gw
        .store()
        .upload_checksum(&dst, &input.key, &input.upload_id)
        .await?;
    let conds = Conditions {
        if_match: input.copy_source_if_match.as_ref(),
        if_none_match: input.copy_source_if_none_match.as_ref(),
        if_modified_since: input.copy_source_if_modified_since.as_ref(),
        if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
    };
    let (_, len, stream) = read_source(
        gw,
        &src,
        src_key,
        &conds,
        input.copy_source_range.as_deref(),
    )
    .await?;
    let part = QuotaAsk::Part {
        bucket: dst.clone(),
        key: input.key.clone(),
        upload_id: input.upload_id.clone(),
        number,
        bytes: len,
    };
    let reserved = quota::reserve(gw, &ctx, part).await?;
    let (stream, source_failed) = watched(stream, &req.extensions);
    // The copied bytes have no client checksum to check: the store
    // computes the upload's algorithm over them as it stores the part.
    let algo = wanted.as_ref().and_then(|w| Algo::from_name(&w.algorithm));
    let opts = PutOptions {
        content_md5: None,
        content_length: Some(len),
        tags: Vec::new(),
        checksum: algo.map(laneway_store::ChecksumSpec::Compute),
    };
    let write = gw
        .store()
        .upload_part(&dst, &input.key, &input.upload_id, number, opts, stream);
    let part = quota::covered(reserved, write)
        .await
        .map_err(|e| blame_copy(&source_failed, e))?;
    let sums = part_sums(part.checksum.as_ref());
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(ETag::Strong(part.etag)),
            last_modified: Some(timestamp(part.mtime_ms)),
            checksum_crc32: sums.crc32,
            checksum_crc32c: sums.crc32c,
            checksum_crc64nvme: sums.crc64nvme,
            checksum_sha1: sums.sha1,
            checksum_sha256: sums.sha256,
        }),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges_are_inclusive_and_bounded() {
        let r = parse_copy_range("bytes=0-9", 100).expect("ok");
        assert_eq!((r.start, r.end), (0, 10));
        let r = parse_copy_range("bytes=99-99", 100).expect("ok");
        assert_eq!((r.start, r.end), (99, 100));
        assert!(matches!(
            parse_copy_range("bytes=0-100", 100),
            Err(GwError::InvalidRange)
        ));
        for bad in ["0-9", "bytes=5-1", "bytes=-5", "bytes=1-", "bytes=a-b", ""] {
            assert!(
                matches!(parse_copy_range(bad, 100), Err(GwError::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn whole_sources_are_bounded_by_the_part_limit() {
        assert_eq!(slice_of(None, 0).expect("empty"), None);
        assert_eq!(
            slice_of(None, 10).expect("whole"),
            Some(GetRange { start: 0, end: 10 })
        );
        assert!(matches!(
            slice_of(None, MAX_PUT_BYTES + 1),
            Err(GwError::EntityTooLarge)
        ));
    }
}
