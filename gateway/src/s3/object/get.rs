//! GetObject and HeadObject: conditional headers, byte ranges, response
//! header overrides.
//!
//! Without a Range, GET reads the object once (metadata and stream
//! together) and evaluates the conditions on what it got, so the metadata
//! served always belongs to the bytes served. With a Range the size must be
//! known first: the object's metadata is read, the range resolved, then the
//! range fetched; if the object was replaced in between (ETag changed) the
//! sequence is retried, so a response never mixes two versions.
//!
//! `partNumber` serves one part of a multipart object (the whole object
//! is part 1 of a single-PUT object) with `Content-Range` and
//! `x-amz-mp-parts-count`, read the same consistent way; it cannot be
//! combined with a Range (`InvalidRequest`), and a part the object does not
//! have is `416 InvalidPartNumber`.
//!
//! `response-content-type` and the other `response-*` overrides are applied
//! by s3s on top of the headers set here. Both answers carry
//! `x-amz-tagging-count` for a tagged object, and with checksum mode the
//! stored checksum with its `x-amz-checksum-type`.

use crate::request::body;
use crate::request::checksum;
use crate::request::conditional::{Conditions, Verdict};
use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult, not_modified_headers};
use crate::request::meta::{MetaOutput, etag, http_date, size_i64, timestamp};
use crate::request::names::check_key;
use crate::request::names::check_version_id;
use crate::request::range;
use crate::request::tags::tag_count;
use laneway_store::{BodyStream, BucketInfo, GetRange, ObjectInfo};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// Attempts to read a consistent range while the object is being replaced.
const RANGE_ATTEMPTS: usize = 3;

/// Turn a verdict into the response it calls for.
fn enforce(verdict: Verdict, info: &ObjectInfo) -> GwResult<()> {
    match verdict {
        Verdict::Proceed => Ok(()),
        Verdict::PreconditionFailed => Err(GwError::PreconditionFailed),
        Verdict::NotModified => {
            let modified = http_date(&timestamp(info.mtime_ms)).unwrap_or_default();
            Err(GwError::NotModified(not_modified_headers(
                &info.etag, &modified,
            )))
        }
    }
}

/// Read `range` of `key` consistently (see the module doc).
async fn read_range(
    gw: &Gateway,
    bucket: &BucketInfo,
    key: &str,
    conds: &Conditions<'_>,
    range: &Range,
) -> GwResult<(ObjectInfo, GetRange, BodyStream)> {
    for _ in 0..RANGE_ATTEMPTS {
        let info = gw.store().head_object(bucket, key).await?;
        enforce(conds.evaluate(&info.etag, info.mtime_ms), &info)?;
        let r = range::resolve(range, info.size)?;
        match gw.store().get_object(bucket, key, Some(r)).await {
            Ok((got, stream)) if got.etag == info.etag => return Ok((got, r, stream)),
            Ok(_) | Err(laneway_store::StoreError::InvalidArgument(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(GwError::SlowDown(
        "the object kept changing while a range was read",
    ))
}

/// What a GET/HEAD serves: the whole object, a Range, or a part.
enum Selector<'a> {
    Whole,
    Range(&'a Range),
    Part(u32),
}

fn selector<'a>(range: Option<&'a Range>, part: Option<i32>) -> GwResult<Selector<'a>> {
    match (range, part) {
        (Some(_), Some(_)) => Err(GwError::InvalidRequest(
            "Cannot specify both Range header and partNumber query parameter".into(),
        )),
        (Some(r), None) => Ok(Selector::Range(r)),
        (None, Some(n)) => Ok(Selector::Part(crate::request::parts::part_number(n)?)),
        (None, None) => Ok(Selector::Whole),
    }
}

/// The range of part `n` of `key`, and the object's part count.
async fn part_range(
    gw: &Gateway,
    bucket: &BucketInfo,
    key: &str,
    n: u32,
) -> GwResult<(Option<GetRange>, u32)> {
    match gw.store().object_part_range(bucket, key, n).await {
        // An empty object's one part is empty: serve it whole.
        Ok((r, count)) => Ok(((r.start < r.end).then_some(r), count)),
        Err(laneway_store::StoreError::InvalidArgument(_)) => Err(GwError::InvalidPartNumber),
        Err(e) => Err(e.into()),
    }
}

/// Read part `n` of `key` consistently (as [`read_range`]).
async fn read_part(
    gw: &Gateway,
    bucket: &BucketInfo,
    key: &str,
    conds: &Conditions<'_>,
    n: u32,
) -> GwResult<(ObjectInfo, Option<GetRange>, u32, BodyStream)> {
    for _ in 0..RANGE_ATTEMPTS {
        let info = gw.store().head_object(bucket, key).await?;
        enforce(conds.evaluate(&info.etag, info.mtime_ms), &info)?;
        let (r, count) = part_range(gw, bucket, key, n).await?;
        match gw.store().get_object(bucket, key, r).await {
            Ok((got, stream)) if got.etag == info.etag => return Ok((got, r, count, stream)),
            Ok(_) | Err(laneway_store::StoreError::InvalidArgument(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(GwError::SlowDown(
        "the object kept changing while a part was read",
    ))
}

/// The part count header: only multipart objects have one.
fn parts_count(info: &ObjectInfo, asked: bool) -> Option<i32> {
    (asked && info.parts > 0).then(|| i32::try_from(info.parts).unwrap_or(i32::MAX))
}

/// GetObject.
pub async fn get_object(
    gw: &Gateway,
    req: S3Request<GetObjectInput>,
) -> GwResult<S3Response<GetObjectOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = &req.input;
    check_key(&input.key)?;
    check_version_id(input.version_id.as_deref())?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let conds = Conditions {
        if_match: input.if_match.as_ref(),
        if_none_match: input.if_none_match.as_ref(),
        if_modified_since: input.if_modified_since.as_ref(),
        if_unmodified_since: input.if_unmodified_since.as_ref(),
    };
    let sel = selector(input.range.as_ref(), input.part_number)?;
    let by_part = matches!(sel, Selector::Part(_));
    let (info, served, stream) = match sel {
        Selector::Range(range) => {
            let (info, r, stream) = read_range(gw, &bucket, &input.key, &conds, range).await?;
            (info, Some(r), stream)
        }
        Selector::Part(n) => {
            let (info, r, _, stream) = read_part(gw, &bucket, &input.key, &conds, n).await?;
            (info, r, stream)
        }
        Selector::Whole => {
            let (info, stream) = gw.store().get_object(&bucket, &input.key, None).await?;
            enforce(conds.evaluate(&info.etag, info.mtime_ms), &info)?;
            (info, None, stream)
        }
    };
    let length = served.map_or(info.size, |r| r.end - r.start);
    let m = MetaOutput::from_meta(&info.meta);
    let sums = checksum::fields(
        info.checksum.as_ref(),
        checksum::mode_enabled(input.checksum_mode.as_ref()),
        served.is_none(),
    );
    Ok(S3Response::new(GetObjectOutput {
        checksum_crc32: sums.crc32,
        checksum_crc32c: sums.crc32c,
        checksum_crc64nvme: sums.crc64nvme,
        checksum_sha1: sums.sha1,
        checksum_sha256: sums.sha256,
        checksum_type: sums.checksum_type,
        parts_count: parts_count(&info, by_part),
        body: Some(body::download(stream)),
        content_length: Some(size_i64(length)?),
        content_range: served.map(|r| range::content_range(r, info.size)),
        accept_ranges: Some("bytes".into()),
        e_tag: Some(etag(&info)),
        last_modified: Some(timestamp(info.mtime_ms)),
        content_type: Some(m.content_type),
        content_encoding: m.content_encoding,
        content_disposition: m.content_disposition,
        content_language: m.content_language,
        cache_control: m.cache_control,
        expires: m.expires,
        metadata: m.user,
        tag_count: tag_count(&info.tags),
        ..Default::default()
    }))
}

/// HeadObject.
pub async fn head_object(
    gw: &Gateway,
    req: S3Request<HeadObjectInput>,
) -> GwResult<S3Response<HeadObjectOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = &req.input;
    check_key(&input.key)?;
    check_version_id(input.version_id.as_deref())?;
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let conds = Conditions {
        if_match: input.if_match.as_ref(),
        if_none_match: input.if_none_match.as_ref(),
        if_modified_since: input.if_modified_since.as_ref(),
        if_unmodified_since: input.if_unmodified_since.as_ref(),
    };
    let sel = selector(input.range.as_ref(), input.part_number)?;
    let by_part = matches!(sel, Selector::Part(_));
    let info = gw.store().head_object(&bucket, &input.key).await?;
    enforce(conds.evaluate(&info.etag, info.mtime_ms), &info)?;
    let served = match sel {
        Selector::Whole => None,
        Selector::Range(r) => Some(range::resolve(r, info.size)?),
        Selector::Part(n) => part_range(gw, &bucket, &input.key, n).await?.0,
    };
    let length = served.map_or(info.size, |r| r.end - r.start);
    let m = MetaOutput::from_meta(&info.meta);
    let sums = checksum::fields(
        info.checksum.as_ref(),
        checksum::mode_enabled(input.checksum_mode.as_ref()),
        served.is_none(),
    );
    let mut resp = S3Response::new(HeadObjectOutput {
        checksum_crc32: sums.crc32,
        checksum_crc32c: sums.crc32c,
        checksum_crc64nvme: sums.crc64nvme,
        checksum_sha1: sums.sha1,
        checksum_sha256: sums.sha256,
        checksum_type: sums.checksum_type,
        parts_count: parts_count(&info, by_part),
        content_length: Some(size_i64(length)?),
        content_range: served.map(|r| range::content_range(r, info.size)),
        accept_ranges: Some("bytes".into()),
        e_tag: Some(etag(&info)),
        last_modified: Some(timestamp(info.mtime_ms)),
        content_type: Some(m.content_type),
        content_encoding: m.content_encoding,
        content_disposition: m.content_disposition,
        content_language: m.content_language,
        cache_control: m.cache_control,
        expires: m.expires,
        metadata: m.user,
        ..Default::default()
    });
    // s3s's HeadObjectOutput has no tag count; S3 sends it as on GET.
    if let Some(n) = tag_count(&info.tags) {
        resp.headers
            .insert("x-amz-tagging-count", http::HeaderValue::from(n));
    }
    Ok(resp)
}
