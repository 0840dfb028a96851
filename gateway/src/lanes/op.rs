//! The S3 operation a request asks for, named as in the S3 API, from its
//! method, path shape, query parameter names and the copy-source header.
//!
//! This runs in front of s3s (which does the real routing), only to label
//! metrics, so it is cheap and total: every request gets one of a fixed
//! set of `&'static str` names, and anything it does not recognise is
//! `Other`. Requests are path-style (`/bucket/key`), the only style the
//! gateway serves.

use http::{HeaderMap, Method};

/// Which part of the namespace a path addresses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Service,
    Bucket,
    Object,
}

/// The operation name of a request.
pub fn classify(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> &'static str {
    let q = Query(query.unwrap_or(""));
    let copy = headers.contains_key("x-amz-copy-source");
    match level(path) {
        Level::Service if *method == Method::GET => "ListBuckets",
        Level::Service => "Other",
        Level::Bucket => bucket_op(method, &q),
        Level::Object => object_op(method, &q, copy),
    }
}

fn level(path: &str) -> Level {
    let path = path.strip_prefix('/').unwrap_or(path);
    match path.split_once('/') {
        _ if path.is_empty() => Level::Service,
        None => Level::Bucket,
        Some((_, "")) => Level::Bucket,
        Some(_) => Level::Object,
    }
}

/// The names of a query string's parameters.
struct Query<'a>(&'a str);

impl Query<'_> {
    fn has(&self, name: &str) -> bool {
        self.0
            .split('&')
            .any(|p| p.split_once('=').map_or(p, |(n, _)| n) == name)
    }

    /// The first of `names` present, if any.
    fn sub(&self, names: &[&'static str]) -> Option<&'static str> {
        names.iter().copied().find(|n| self.has(n))
    }
}

const BUCKET_SUBS: &[&str] = &[
    "tagging", "acl", "uploads", "location", "versions", "delete",
];

fn bucket_op(method: &Method, q: &Query<'_>) -> &'static str {
    let sub = q.sub(BUCKET_SUBS);
    match (method.as_str(), sub) {
        ("GET", Some("tagging")) => "GetBucketTagging",
        ("PUT", Some("tagging")) => "PutBucketTagging",
        ("DELETE", Some("tagging")) => "DeleteBucketTagging",
        ("GET", Some("acl")) => "GetBucketAcl",
        ("PUT", Some("acl")) => "PutBucketAcl",
        ("GET", Some("uploads")) => "ListMultipartUploads",
        ("GET", Some("location")) => "GetBucketLocation",
        ("GET", Some("versions")) => "ListObjectVersions",
        ("POST", Some("delete")) => "DeleteObjects",
        ("POST", None) => "PostObject",
        ("GET", None) if q.has("list-type") => "ListObjectsV2",
        ("GET", None) => "ListObjects",
        ("PUT", None) => "CreateBucket",
        ("DELETE", None) => "DeleteBucket",
        ("HEAD", None) => "HeadBucket",
        _ => "Other",
    }
}

const OBJECT_SUBS: &[&str] = &["tagging", "acl", "uploads", "uploadId"];

fn object_op(method: &Method, q: &Query<'_>, copy: bool) -> &'static str {
    let sub = q.sub(OBJECT_SUBS);
    match (method.as_str(), sub) {
        ("GET", Some("tagging")) => "GetObjectTagging",
        ("PUT", Some("tagging")) => "PutObjectTagging",
        ("DELETE", Some("tagging")) => "DeleteObjectTagging",
        ("GET", Some("acl")) => "GetObjectAcl",
        ("PUT", Some("acl")) => "PutObjectAcl",
        ("POST", Some("uploads")) => "CreateMultipartUpload",
        ("POST", Some("uploadId")) => "CompleteMultipartUpload",
        ("GET", Some("uploadId")) => "ListParts",
        ("DELETE", Some("uploadId")) => "AbortMultipartUpload",
        ("PUT", Some("uploadId")) if copy => "UploadPartCopy",
        ("PUT", Some("uploadId")) => "UploadPart",
        ("GET", None) => "GetObject",
        ("HEAD", None) => "HeadObject",
        ("PUT", None) if copy => "CopyObject",
        ("PUT", None) => "PutObject",
        ("DELETE", None) => "DeleteObject",
        _ => "Other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(m: Method, path: &str, query: &str) -> &'static str {
        classify(&m, path, Some(query), &HeaderMap::new())
    }

    #[test]
    fn service_and_bucket_operations() {
        assert_eq!(op(Method::GET, "/", ""), "ListBuckets");
        assert_eq!(op(Method::PUT, "/b", ""), "CreateBucket");
        assert_eq!(op(Method::HEAD, "/b/", ""), "HeadBucket");
        assert_eq!(
            op(Method::GET, "/b", "list-type=2&prefix=a"),
            "ListObjectsV2"
        );
        assert_eq!(op(Method::GET, "/b", "prefix=a"), "ListObjects");
        assert_eq!(op(Method::GET, "/b", "location"), "GetBucketLocation");
        assert_eq!(op(Method::POST, "/b", "delete"), "DeleteObjects");
        assert_eq!(op(Method::POST, "/b", ""), "PostObject");
        assert_eq!(op(Method::DELETE, "/b", ""), "DeleteBucket");
        assert_eq!(op(Method::PATCH, "/b", ""), "Other");
    }

    #[test]
    fn object_operations() {
        assert_eq!(op(Method::GET, "/b/k", ""), "GetObject");
        assert_eq!(op(Method::GET, "/b/dir/k", "partNumber=1"), "GetObject");
        assert_eq!(op(Method::PUT, "/b/k", ""), "PutObject");
        assert_eq!(op(Method::PUT, "/b/k", "tagging"), "PutObjectTagging");
        assert_eq!(op(Method::POST, "/b/k", "uploads"), "CreateMultipartUpload");
        assert_eq!(
            op(Method::PUT, "/b/k", "partNumber=2&uploadId=x"),
            "UploadPart"
        );
        assert_eq!(
            op(Method::POST, "/b/k", "uploadId=x"),
            "CompleteMultipartUpload"
        );
        assert_eq!(
            op(Method::DELETE, "/b/k", "uploadId=x"),
            "AbortMultipartUpload"
        );
        let mut h = HeaderMap::new();
        h.insert("x-amz-copy-source", http::HeaderValue::from_static("/a/b"));
        assert_eq!(classify(&Method::PUT, "/b/k", None, &h), "CopyObject");
        assert_eq!(
            classify(&Method::PUT, "/b/k", Some("uploadId=u&partNumber=1"), &h),
            "UploadPartCopy"
        );
    }
}
