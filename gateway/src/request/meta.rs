//! Object metadata between S3 headers and the store's [`ObjectMeta`], and
//! the time and size conversions every handler needs.
//!
//! Stored: Content-Type, Content-Encoding (as sent, less an `aws-chunked`
//! member, which describes the upload, not the object),
//! Content-Disposition, Content-Language, Cache-Control, Expires (as an
//! HTTP date string) and `x-amz-meta-*` pairs (lower-cased names, sorted so
//! the record is deterministic). User metadata is limited to 2 KB (names
//! plus values), as AWS does.

use crate::request::error::{GwError, GwResult};
use laneway_store::{ObjectInfo, ObjectMeta};
use s3s::dto::{ETag, Metadata, Timestamp, TimestampFormat};
use time::OffsetDateTime;

/// Limit of x-amz-meta-* names plus values, in bytes.
pub const MAX_USER_META_BYTES: usize = 2048;

/// Content-Type returned when the uploader gave none (as AWS does).
pub const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// The [`MetaInput`] of an s3s input that carries the metadata headers
/// (PutObject, PostObject, CopyObject, CreateMultipartUpload: their
/// fields have the same names), moving the fields out of `$input`.
macro_rules! meta_input {
    ($input:expr) => {
        $crate::request::meta::MetaInput {
            content_type: $input.content_type,
            content_encoding: $input.content_encoding,
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires: $input.expires,
            user: $input.metadata,
        }
    };
}
pub(crate) use meta_input;

/// The metadata headers of a PUT or a CopyObject with REPLACE.
#[derive(Default)]
pub struct MetaInput {
    /// Content-Type.
    pub content_type: Option<String>,
    /// Content-Encoding (may include `aws-chunked`).
    pub content_encoding: Option<String>,
    /// Content-Disposition.
    pub content_disposition: Option<String>,
    /// Content-Language.
    pub content_language: Option<String>,
    /// Cache-Control.
    pub cache_control: Option<String>,
    /// Expires.
    pub expires: Option<Timestamp>,
    /// x-amz-meta-*.
    pub user: Option<Metadata>,
}

impl MetaInput {
    /// Validate and convert to the stored form.
    pub fn into_meta(self) -> GwResult<ObjectMeta> {
        let mut user: Vec<(String, String)> = self
            .user
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        user.sort();
        let size: usize = user.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > MAX_USER_META_BYTES {
            return Err(GwError::MetadataTooLarge);
        }
        Ok(ObjectMeta {
            content_type: self.content_type.filter(|s| !s.is_empty()),
            content_encoding: self.content_encoding.as_deref().and_then(strip_aws_chunked),
            content_disposition: self.content_disposition,
            content_language: self.content_language,
            cache_control: self.cache_control,
            expires: self.expires.as_ref().and_then(http_date),
            user,
        })
    }
}

/// Content-Encoding as the client sent it, less an `aws-chunked` member
/// (which describes the upload, not the object); None when nothing is
/// left. Without such a member the value is kept byte for byte
/// (`deflate, gzip` stays `deflate, gzip`).
pub fn strip_aws_chunked(value: &str) -> Option<String> {
    let is_chunked = |t: &str| t.trim().eq_ignore_ascii_case("aws-chunked");
    if !value.split(',').any(is_chunked) {
        return Some(value.to_string()).filter(|v| !v.trim().is_empty());
    }
    let kept: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty() && !is_chunked(t))
        .collect();
    if kept.is_empty() {
        None
    } else {
        Some(kept.join(", "))
    }
}

/// The metadata headers of a GET/HEAD response.
pub struct MetaOutput {
    /// Content-Type (the default when none was stored).
    pub content_type: String,
    /// Content-Encoding.
    pub content_encoding: Option<String>,
    /// Content-Disposition.
    pub content_disposition: Option<String>,
    /// Content-Language.
    pub content_language: Option<String>,
    /// Cache-Control.
    pub cache_control: Option<String>,
    /// Expires (omitted when the stored string no longer parses).
    pub expires: Option<Timestamp>,
    /// x-amz-meta-* (None when there are none).
    pub user: Option<Metadata>,
}

impl MetaOutput {
    /// The response headers for `meta`.
    pub fn from_meta(meta: &ObjectMeta) -> MetaOutput {
        let user: Metadata = meta.user.iter().cloned().collect();
        MetaOutput {
            content_type: meta
                .content_type
                .clone()
                .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.into()),
            content_encoding: meta.content_encoding.clone(),
            content_disposition: meta.content_disposition.clone(),
            content_language: meta.content_language.clone(),
            cache_control: meta.cache_control.clone(),
            expires: meta
                .expires
                .as_deref()
                .and_then(|s| Timestamp::parse(TimestampFormat::HttpDate, s).ok()),
            user: if user.is_empty() { None } else { Some(user) },
        }
    }
}

/// An HTTP-date string of `ts`.
pub fn http_date(ts: &Timestamp) -> Option<String> {
    let mut buf = Vec::new();
    ts.format(TimestampFormat::HttpDate, &mut buf).ok()?;
    String::from_utf8(buf).ok()
}

/// Milliseconds since the epoch as an s3s timestamp.
pub fn timestamp(ms: i64) -> Timestamp {
    let nanos = i128::from(ms).saturating_mul(1_000_000);
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
        .into()
}

/// Whole seconds since the epoch of an s3s timestamp (HTTP dates have
/// second resolution, so conditionals compare whole seconds).
pub fn unix_seconds(ts: &Timestamp) -> i64 {
    OffsetDateTime::from(ts.clone()).unix_timestamp()
}

/// Whole seconds of a millisecond time, rounded down.
pub fn ms_to_seconds(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

/// The ETag of an object, as s3s serialises it (quoted).
pub fn etag(info: &ObjectInfo) -> ETag {
    ETag::Strong(info.etag.clone())
}

/// A size for an S3 header or XML field.
pub fn size_i64(n: u64) -> GwResult<i64> {
    i64::try_from(n).map_err(|_| GwError::Internal(format!("size {n} does not fit in i64")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_chunked_is_not_a_stored_encoding() {
        assert_eq!(strip_aws_chunked("aws-chunked"), None);
        assert_eq!(strip_aws_chunked("gzip,aws-chunked"), Some("gzip".into()));
        assert_eq!(strip_aws_chunked("gzip, aws-chunked"), Some("gzip".into()));
        assert_eq!(strip_aws_chunked("aws-chunked, gzip"), Some("gzip".into()));
        assert_eq!(
            strip_aws_chunked("deflate, aws-chunked,gzip"),
            Some("deflate, gzip".into())
        );
        assert_eq!(strip_aws_chunked("gzip"), Some("gzip".into()));
        assert_eq!(
            strip_aws_chunked("deflate, gzip"),
            Some("deflate, gzip".into())
        );
        assert_eq!(
            strip_aws_chunked("deflate,gzip"),
            Some("deflate,gzip".into())
        );
        assert_eq!(strip_aws_chunked(""), None);
    }

    #[test]
    fn user_metadata_is_sorted_and_limited() {
        let mut user = Metadata::new();
        user.insert("b".into(), "2".into());
        user.insert("a".into(), "1".into());
        let meta = MetaInput {
            user: Some(user),
            ..Default::default()
        }
        .into_meta()
        .expect("meta");
        assert_eq!(
            meta.user,
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );

        let mut big = Metadata::new();
        big.insert("k".into(), "v".repeat(MAX_USER_META_BYTES));
        assert!(matches!(
            MetaInput {
                user: Some(big),
                ..Default::default()
            }
            .into_meta(),
            Err(GwError::MetadataTooLarge)
        ));
    }

    #[test]
    fn expires_round_trips_through_its_http_date() {
        let ts = timestamp(1_700_000_000_000);
        let meta = MetaInput {
            expires: Some(ts.clone()),
            ..Default::default()
        }
        .into_meta()
        .expect("meta");
        assert_eq!(
            meta.expires.as_deref(),
            Some("Tue, 14 Nov 2023 22:13:20 GMT")
        );
        assert_eq!(MetaOutput::from_meta(&meta).expires, Some(ts));
    }

    #[test]
    fn seconds_round_down() {
        assert_eq!(ms_to_seconds(1999), 1);
        assert_eq!(ms_to_seconds(-1), -1);
        assert_eq!(unix_seconds(&timestamp(5_500)), 5);
    }
}
