//! The one place that knows what an S3 operation does to which bucket.
//!
//! The access check ([`crate::request::auth::TenantAccess`]) asks [`classify`]
//! whether an operation writes, and which buckets it touches: the bucket
//! of its path and, for CopyObject and UploadPartCopy, the bucket of its
//! `x-amz-copy-source`. Read-only keys may run only reads; bucket-scoped
//! keys only operations whose every bucket is in scope.
//!
//! Reads are recognised by name (`Get*`, `Head*`, `List*`); anything else,
//! including operations added to s3s later, counts as a write, so a new
//! operation is denied to read-only keys until someone decides otherwise.

use s3s::dto::CopySource;
use s3s::path::S3Path;

/// What one operation does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpClass {
    /// It changes state (refused for read-only keys).
    pub write: bool,
    /// Buckets it reads or writes (empty: account level, e.g. ListBuckets).
    pub buckets: Vec<String>,
    /// A copy source header that could not be parsed (a scoped key cannot
    /// be checked against it, so it is refused).
    pub unreadable_source: bool,
}

/// Whether operation `name` only reads.
pub fn is_read(name: &str) -> bool {
    name.starts_with("Get") || name.starts_with("Head") || name.starts_with("List")
}

/// Operations whose `x-amz-copy-source` names a second bucket.
fn copies(name: &str) -> bool {
    matches!(name, "CopyObject" | "UploadPartCopy")
}

/// Classify operation `name` on `path` with request `headers`.
pub fn classify(name: &str, path: &S3Path, headers: &http::HeaderMap) -> OpClass {
    let mut buckets = Vec::new();
    match path {
        S3Path::Root => {}
        S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } => {
            buckets.push(bucket.to_string());
        }
    }
    let mut unreadable_source = false;
    if copies(name)
        && let Some(v) = headers.get("x-amz-copy-source")
    {
        match v.to_str().ok().map(CopySource::parse) {
            Some(Ok(CopySource::Bucket { bucket, .. })) => buckets.push(bucket.to_string()),
            _ => unreadable_source = true,
        }
    }
    OpClass {
        write: !is_read(name),
        buckets,
        unreadable_source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(b: &str) -> S3Path {
        S3Path::Object {
            bucket: b.into(),
            key: "k".into(),
        }
    }

    #[test]
    fn reads_and_writes_are_told_apart() {
        let h = http::HeaderMap::new();
        for r in [
            "GetObject",
            "HeadObject",
            "ListObjectsV2",
            "ListBuckets",
            "HeadBucket",
        ] {
            assert!(!classify(r, &obj("a"), &h).write, "{r}");
        }
        for w in [
            "PutObject",
            "DeleteObject",
            "DeleteObjects",
            "CreateBucket",
            "CopyObject",
            "UploadPart",
            "CompleteMultipartUpload",
            "PutObjectTagging",
            "SomethingNew",
        ] {
            assert!(classify(w, &obj("a"), &h).write, "{w}");
        }
        assert!(
            classify("ListBuckets", &S3Path::Root, &h)
                .buckets
                .is_empty()
        );
    }

    #[test]
    fn copy_source_bucket_is_included() {
        let mut h = http::HeaderMap::new();
        h.insert(
            "x-amz-copy-source",
            http::HeaderValue::from_static("/src-b/some/key"),
        );
        let c = classify("CopyObject", &obj("dst"), &h);
        assert_eq!(c.buckets, vec!["dst".to_string(), "src-b".to_string()]);
        let c = classify("UploadPartCopy", &obj("dst"), &h);
        assert_eq!(c.buckets.len(), 2);
        let c = classify("PutObject", &obj("dst"), &h);
        assert_eq!(c.buckets, vec!["dst".to_string()]);
        h.insert("x-amz-copy-source", http::HeaderValue::from_static(""));
        assert!(classify("CopyObject", &obj("dst"), &h).unreadable_source);
    }
}
