//! GetObjectAttributes: the ETag, checksum, parts, storage class and size
//! of an object, each only when asked for (`x-amz-object-attributes`).
//!
//! The object and its parts are read from one record, so the answer never
//! mixes two versions of a key. As on AWS:
//!
//! - `Checksum` carries the stored value without a composite checksum's
//!   `-N` suffix, with its `ChecksumType`;
//! - `ObjectParts` is present only for a multipart object: the part count,
//!   then a page of parts (`MaxParts`, default and cap 1,000, after
//!   `PartNumberMarker`) with each part's size and, when the object was
//!   uploaded with a checksum, the part's checksum;
//! - `StorageClass` is always STANDARD.
//!
//! The ETag is the object's, bare as on AWS: s3s serialises it quoted, and
//! [`crate::request::reply`] takes the quotes off the responses marked
//! [`crate::request::reply::BareETag`].

use crate::request::checksum;
use crate::request::composite;
use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult};
use crate::request::meta::{etag, size_i64, timestamp};
use crate::request::names::check_key;
use crate::request::names::check_version_id;
use crate::request::parts::{page_size, part_marker};
use laneway_store::{ObjectInfo, ObjectPart as StoredPart};
use s3s::dto::*;
use s3s::{S3Request, S3Response};

/// Which attributes the request asks for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Wanted {
    etag: bool,
    checksum: bool,
    parts: bool,
    storage_class: bool,
    size: bool,
}

impl Wanted {
    /// From `x-amz-object-attributes` (one comma-separated header, or
    /// several); an unknown name or none at all is InvalidArgument.
    fn of(list: &[ObjectAttributes]) -> GwResult<Wanted> {
        let mut w = Wanted::default();
        let names = list
            .iter()
            .flat_map(|a| a.as_str().split(','))
            .map(str::trim)
            .filter(|n| !n.is_empty());
        for name in names {
            let flag = match name {
                ObjectAttributes::ETAG => &mut w.etag,
                ObjectAttributes::CHECKSUM => &mut w.checksum,
                ObjectAttributes::OBJECT_PARTS => &mut w.parts,
                ObjectAttributes::STORAGE_CLASS => &mut w.storage_class,
                ObjectAttributes::OBJECT_SIZE => &mut w.size,
                other => {
                    return Err(GwError::InvalidArgument(format!(
                        "Invalid attribute name specified: {other}"
                    )));
                }
            };
            *flag = true;
        }
        if w == Wanted::default() {
            return Err(GwError::InvalidArgument(
                "x-amz-object-attributes must name at least one attribute".into(),
            ));
        }
        Ok(w)
    }
}

/// GetObjectAttributes.
pub async fn get_object_attributes(
    gw: &Gateway,
    req: S3Request<GetObjectAttributesInput>,
) -> GwResult<S3Response<GetObjectAttributesOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    check_key(&input.key)?;
    check_version_id(input.version_id.as_deref())?;
    let wanted = Wanted::of(&input.object_attributes)?;
    let page = Page {
        max: page_size(input.max_parts, "max-parts")?,
        marker: part_marker(input.part_number_marker)?,
    };
    let bucket = gw.bucket(&ctx, &input.bucket).await?;
    let (info, parts) = gw.store().object_with_parts(&bucket, &input.key).await?;
    let out = GetObjectAttributesOutput {
        e_tag: wanted.etag.then(|| etag(&info)),
        checksum: wanted.checksum.then(|| object_checksum(&info)).flatten(),
        object_parts: if wanted.parts {
            parts_page(&info, &parts, page)?
        } else {
            None
        },
        storage_class: wanted
            .storage_class
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        object_size: if wanted.size {
            Some(size_i64(info.size)?)
        } else {
            None
        },
        last_modified: Some(timestamp(info.mtime_ms)),
        ..Default::default()
    };
    let mut resp = S3Response::new(out);
    resp.extensions.insert(crate::request::reply::BareETag);
    Ok(resp)
}

/// The object's checksum as GetObjectAttributes reports it: the value
/// without a composite `-N` suffix, and its type.
fn object_checksum(info: &ObjectInfo) -> Option<Checksum> {
    let stored = info.checksum.as_ref()?;
    let bare = laneway_store::Checksum {
        algorithm: stored.algorithm.clone(),
        value: composite::without_part_count(&stored.value).to_string(),
    };
    let f = checksum::fields(Some(&bare), true, true);
    Some(Checksum {
        checksum_crc32: f.crc32,
        checksum_crc32c: f.crc32c,
        checksum_crc64nvme: f.crc64nvme,
        checksum_sha1: f.sha1,
        checksum_sha256: f.sha256,
        checksum_type: Some(composite::type_of(stored)),
    })
}

/// Which parts one response lists.
#[derive(Debug, Clone, Copy)]
struct Page {
    max: usize,
    marker: u32,
}

/// The `ObjectParts` of a multipart object (None for a single PUT).
fn parts_page(
    info: &ObjectInfo,
    parts: &[StoredPart],
    page: Page,
) -> GwResult<Option<GetObjectAttributesParts>> {
    if parts.is_empty() {
        return Ok(None);
    }
    let after: Vec<&StoredPart> = parts.iter().filter(|p| p.number > page.marker).collect();
    let shown = &after[..after.len().min(page.max)];
    let truncated = after.len() > shown.len();
    let listed = shown
        .iter()
        .map(|p| part_dto(info, p))
        .collect::<GwResult<Vec<_>>>()?;
    let as_i32 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    Ok(Some(GetObjectAttributesParts {
        total_parts_count: Some(as_i32(info.parts)),
        part_number_marker: Some(as_i32(page.marker)),
        next_part_number_marker: shown.last().map(|p| as_i32(p.number)),
        max_parts: Some(i32::try_from(page.max).unwrap_or(i32::MAX)),
        is_truncated: Some(truncated),
        parts: Some(listed),
    }))
}

/// One part: its number, size and (when kept) checksum.
fn part_dto(info: &ObjectInfo, p: &StoredPart) -> GwResult<ObjectPart> {
    let stored = info
        .checksum
        .as_ref()
        .zip(p.checksum.as_ref())
        .map(|(c, v)| laneway_store::Checksum {
            algorithm: c.algorithm.clone(),
            value: v.clone(),
        });
    let f = crate::request::parts::part_sums(stored.as_ref());
    Ok(ObjectPart {
        part_number: Some(i32::try_from(p.number).unwrap_or(i32::MAX)),
        size: Some(size_i64(p.size)?),
        checksum_crc32: f.crc32,
        checksum_crc32c: f.crc32c,
        checksum_crc64nvme: f.crc64nvme,
        checksum_sha1: f.sha1,
        checksum_sha256: f.sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_must_be_known_and_present() {
        let a = |s: &'static str| ObjectAttributes::from_static(s);
        let w = Wanted::of(&[a("ETag"), a("ObjectParts")]).expect("ok");
        assert!(w.etag && w.parts && !w.checksum && !w.size && !w.storage_class);
        let joined = Wanted::of(&[a("ETag,ObjectSize, StorageClass")]).expect("ok");
        assert!(joined.etag && joined.size && joined.storage_class && !joined.parts);
        assert!(Wanted::of(&[]).is_err());
        assert!(Wanted::of(&[a("Colour")]).is_err());
    }

    fn info(parts: u32) -> ObjectInfo {
        ObjectInfo {
            key: "k".into(),
            size: 30,
            etag: "e".into(),
            mtime_ms: 0,
            meta: Default::default(),
            tags: Vec::new(),
            parts,
            checksum: Some(laneway_store::Checksum {
                algorithm: "CRC32".into(),
                value: "AAAAAA==-3".into(),
            }),
        }
    }

    #[test]
    fn parts_are_paged_after_the_marker() {
        let parts: Vec<StoredPart> = (1..=3)
            .map(|n| StoredPart {
                number: n,
                size: 10,
                checksum: Some("AAAAAQ==".into()),
            })
            .collect();
        let first = parts_page(&info(3), &parts, Page { max: 2, marker: 0 })
            .expect("ok")
            .expect("multipart");
        assert_eq!(first.is_truncated, Some(true));
        assert_eq!(first.next_part_number_marker, Some(2));
        assert_eq!(first.total_parts_count, Some(3));
        let listed = first.parts.expect("parts");
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].checksum_crc32.as_deref(), Some("AAAAAQ=="));
        let rest = parts_page(&info(3), &parts, Page { max: 2, marker: 2 })
            .expect("ok")
            .expect("multipart");
        assert_eq!(rest.is_truncated, Some(false));
        assert_eq!(rest.parts.expect("parts")[0].part_number, Some(3));
        assert!(
            parts_page(&info(0), &[], Page { max: 2, marker: 0 })
                .expect("ok")
                .is_none()
        );
    }
}
