//! The one place where a failure becomes an S3 error code and HTTP status.
//!
//! Handlers return [`GwResult`]; [`GwError`] names every failure the gateway
//! knows (its own validation failures and the store's [`StoreError`]), and
//! `From<GwError> for S3Error` decides code, status and message. Nothing
//! else in the gateway builds an `S3Error` by hand.
//!
//! Internal failures (corrupt data, I/O, engine errors, a broken invariant)
//! are logged here, once, with their detail, and reach the client as a
//! generic `InternalError` that names no path. A store that is shutting
//! down answers `503 ServiceUnavailable`, which SDKs retry.

use http::{HeaderMap, HeaderValue, StatusCode};
use laneway_store::StoreError;
use s3s::{S3Error, S3ErrorCode};

/// Result of a gateway handler.
pub type GwResult<T> = Result<T, GwError>;

/// Every failure a gateway handler can report.
#[derive(Debug)]
pub enum GwError {
    /// A store operation failed.
    Store(StoreError),
    /// The bucket name breaks the naming rules.
    InvalidBucketName,
    /// The object key is empty or longer than 1024 bytes.
    KeyTooLong,
    /// A request parameter is invalid.
    InvalidArgument(String),
    /// The request is invalid as a whole.
    InvalidRequest(String),
    /// A tag key/value is invalid, or keys repeat.
    InvalidTag(String),
    /// More tags than allowed (AWS answers `InvalidTag`).
    TooManyTags(usize),
    /// The XML body is structurally wrong.
    MalformedXml(String),
    /// The requested byte range cannot be served.
    InvalidRange,
    /// GET/HEAD partNumber beyond the object's parts (416).
    InvalidPartNumber,
    /// GET/HEAD conditional: not modified (304), with the object's ETag and
    /// Last-Modified header values.
    NotModified(HeaderMap),
    /// A precondition (If-Match, If-Unmodified-Since, copy-source-if-*) failed.
    PreconditionFailed,
    /// The upload is larger than a single PUT may be.
    EntityTooLarge,
    /// The Content-MD5 header is not a base64-encoded 16-byte digest.
    InvalidDigest,
    /// A body was sent without a length.
    MissingContentLength,
    /// x-amz-meta-* headers exceed 2 KB.
    MetadataTooLarge,
    /// The bucket has no tag set.
    NoSuchTagSet,
    /// A location constraint other than this gateway's region.
    IllegalLocationConstraint(String),
    /// The aws-chunked body's chunk signature is wrong.
    SignatureDoesNotMatch,
    /// The body does not hash to x-amz-content-sha256.
    ContentSha256Mismatch,
    /// The body does not match its x-amz-checksum-* value (algorithm name).
    ChecksumMismatch(&'static str),
    /// An upload's part or completion names another checksum algorithm or
    /// type than its CreateMultipartUpload (expected, actual; lower case,
    /// `null` for none, as AWS words it).
    ChecksumTypeMismatch(String, String),
    /// A browser-form upload (PostObject) breaks its POST policy (403
    /// AccessDenied "Invalid according to Policy: ...").
    PolicyViolation(String),
    /// The body ended early or went away.
    IncompleteBody,
    /// A browser-form upload's body is not well-formed
    /// multipart/form-data (what is wrong).
    MalformedPost(&'static str),
    /// A browser-form upload's fields before its file exceed what the
    /// gateway reads before checking the signature.
    PostFieldsTooLarge,
    /// A browser-form upload without its `file` part.
    PostFileMissing,
    /// The client sent the request too slowly (400 RequestTimeout).
    RequestTimeout,
    /// The caller may not do this.
    AccessDenied,
    /// The caller may not do this, and may be told why (suspended tenant,
    /// read-only key, bucket outside the key's scope).
    Denied(String),
    /// The access key is unknown.
    InvalidAccessKeyId,
    /// A presigned URL's query parameters are out of bounds (400).
    AuthorizationQueryParameters(String),
    /// A SigV2 header-signed request dated more than 15 minutes from the
    /// server clock (403).
    RequestTimeTooSkewed,
    /// A presigned URL past its expiry (403 AccessDenied).
    RequestExpired,
    /// A feature this gateway does not provide.
    NotImplemented(&'static str),
    /// An ACL other than `private` (ACLs are disabled, as on new AWS buckets).
    AccessControlListNotSupported,
    /// Contention the client should back off from and retry (503).
    SlowDown(&'static str),
    /// A broken invariant inside the gateway (logged, 500).
    Internal(String),
}

impl From<StoreError> for GwError {
    fn from(e: StoreError) -> Self {
        GwError::Store(e)
    }
}

const INTERNAL_MESSAGE: &str = "We encountered an internal error. Please try again.";

fn with_status(code: S3ErrorCode, status: StatusCode, msg: impl Into<String>) -> S3Error {
    let mut e = S3Error::with_message(code, msg.into());
    e.set_status_code(status);
    e
}

fn msg(code: S3ErrorCode, text: impl Into<String>) -> S3Error {
    S3Error::with_message(code, text.into())
}

fn custom(code: &'static str, status: StatusCode, text: impl Into<String>) -> S3Error {
    let code = S3ErrorCode::from_bytes(code.as_bytes()).unwrap_or(S3ErrorCode::InternalError);
    with_status(code, status, text)
}

fn internal(detail: &dyn std::fmt::Display) -> S3Error {
    tracing::error!(error = %detail, "internal error");
    msg(S3ErrorCode::InternalError, INTERNAL_MESSAGE)
}

fn from_store(e: StoreError) -> S3Error {
    use S3ErrorCode as C;
    match e {
        StoreError::NoSuchBucket => msg(C::NoSuchBucket, "The specified bucket does not exist"),
        StoreError::BucketAlreadyOwnedByYou => msg(
            C::BucketAlreadyOwnedByYou,
            "Your previous request to create the named bucket succeeded and you already own it.",
        ),
        StoreError::BucketNotEmpty => msg(
            C::BucketNotEmpty,
            "The bucket you tried to delete is not empty",
        ),
        StoreError::NoSuchKey => msg(C::NoSuchKey, "The specified key does not exist."),
        StoreError::BadDigest => msg(
            C::BadDigest,
            "The Content-MD5 you specified did not match what we received.",
        ),
        StoreError::IncompleteBody | StoreError::Body(_) => msg(
            C::IncompleteBody,
            "You did not provide the number of bytes specified by the Content-Length HTTP header.",
        ),
        StoreError::PreconditionFailed => GwError::PreconditionFailed.into(),
        StoreError::NoSuchUpload => msg(
            C::NoSuchUpload,
            "The specified multipart upload does not exist. The upload ID may be invalid, \
             or the upload may have been aborted or completed.",
        ),
        StoreError::InvalidPart => msg(
            C::InvalidPart,
            "One or more of the specified parts could not be found. The part may not have been \
             uploaded, or the specified entity tag may not match the part's entity tag.",
        ),
        StoreError::InvalidPartOrder => msg(
            C::InvalidPartOrder,
            "The list of parts was not in ascending order. Parts must be ordered by part number.",
        ),
        StoreError::EntityTooSmall => msg(
            C::EntityTooSmall,
            "Your proposed upload is smaller than the minimum allowed object size.",
        ),
        StoreError::ChecksumMismatch(algo) => msg(
            C::BadDigest,
            format!("The {algo} you specified did not match the calculated checksum."),
        ),
        StoreError::InvalidArgument(m) => msg(C::InvalidArgument, m),
        StoreError::ShuttingDown => msg(
            C::ServiceUnavailable,
            "The server is shutting down; please retry.",
        ),
        // No AWS code says "disk full"; 507 is HTTP's own (RFC 4918) and,
        // unlike 503, SDKs do not retry it blindly (docs/compatibility.md).
        StoreError::InsufficientStorage => custom(
            "InsufficientStorage",
            StatusCode::INSUFFICIENT_STORAGE,
            "The server does not have enough free disk space to store this; \
             delete objects or add space, then retry.",
        ),
        StoreError::QuotaExceeded(why) => custom("QuotaExceeded", StatusCode::FORBIDDEN, why),
        StoreError::Unavailable(detail) => {
            tracing::warn!(error = %detail, "partition unavailable");
            msg(
                C::ServiceUnavailable,
                "The storage for this object is unavailable (a store node is down, \
                 busy or recovering); please retry.",
            )
        }
        // A store that does not host the partition: in a cluster the
        // client re-routes; reaching the gateway means the map is behind.
        StoreError::NotHosted(p) => {
            tracing::warn!(partition = %p, "partition not hosted by the store asked");
            msg(
                C::ServiceUnavailable,
                "The storage for this object is moving; please retry.",
            )
        }
        // A leader change the store client could not ride out in its
        // deadline: an election is under way.
        StoreError::NotLeader(_) => msg(
            C::ServiceUnavailable,
            "The storage for this object is electing a new leader; please retry.",
        ),
        e @ (StoreError::Corrupt(_)
        | StoreError::Layout(_)
        | StoreError::Io(_)
        | StoreError::Engine(_)) => internal(&e),
    }
}

impl From<GwError> for S3Error {
    fn from(e: GwError) -> S3Error {
        use S3ErrorCode as C;
        match e {
            GwError::Store(e) => from_store(e),
            GwError::InvalidBucketName => {
                msg(C::InvalidBucketName, "The specified bucket is not valid.")
            }
            GwError::KeyTooLong => msg(C::KeyTooLongError, "Your key is too long"),
            GwError::InvalidArgument(m) => msg(C::InvalidArgument, m),
            GwError::InvalidRequest(m) => msg(C::InvalidRequest, m),
            GwError::InvalidTag(m) => msg(C::InvalidTag, m),
            GwError::TooManyTags(limit) => msg(
                C::InvalidTag,
                format!("Object tags cannot be greater than {limit}"),
            ),
            GwError::MalformedXml(m) => msg(C::MalformedXML, m),
            GwError::InvalidRange => msg(C::InvalidRange, "The requested range is not satisfiable"),
            GwError::InvalidPartNumber => custom(
                "InvalidPartNumber",
                StatusCode::RANGE_NOT_SATISFIABLE,
                "The requested partnumber is not satisfiable",
            ),
            GwError::NotModified(headers) => {
                let mut e = S3Error::new(C::NotModified);
                e.set_headers(headers);
                e
            }
            GwError::PreconditionFailed => msg(
                C::PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold",
            ),
            GwError::EntityTooLarge => msg(
                C::EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed object size.",
            ),
            GwError::InvalidDigest => msg(
                C::InvalidDigest,
                "The Content-MD5 you specified is not valid.",
            ),
            GwError::MissingContentLength => msg(
                C::MissingContentLength,
                "You must provide the Content-Length HTTP header.",
            ),
            GwError::MetadataTooLarge => custom(
                "MetadataTooLarge",
                StatusCode::BAD_REQUEST,
                "Your metadata headers exceed the maximum allowed metadata size.",
            ),
            GwError::NoSuchTagSet => msg(C::NoSuchTagSet, "The TagSet does not exist"),
            GwError::IllegalLocationConstraint(m) => msg(C::IllegalLocationConstraintException, m),
            GwError::SignatureDoesNotMatch => msg(
                C::SignatureDoesNotMatch,
                "The request signature we calculated does not match the signature you provided.",
            ),
            GwError::ContentSha256Mismatch => custom(
                "XAmzContentSHA256Mismatch",
                StatusCode::BAD_REQUEST,
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            ),
            GwError::ChecksumMismatch(algo) => msg(
                C::BadDigest,
                format!("The {algo} you specified did not match the calculated checksum."),
            ),
            GwError::ChecksumTypeMismatch(expected, actual) => msg(
                C::InvalidRequest,
                format!(
                    "Checksum Type mismatch occurred, expected checksum Type: {expected}, \
                     actual checksum Type: {actual}"
                ),
            ),
            GwError::PolicyViolation(why) => msg(
                C::AccessDenied,
                format!("Invalid according to Policy: {why}"),
            ),
            GwError::IncompleteBody => from_store(StoreError::IncompleteBody),
            GwError::MalformedPost(what) => msg(
                C::MalformedPOSTRequest,
                format!(
                    "The body of your POST request is not well-formed multipart/form-data: {what}."
                ),
            ),
            GwError::PostFieldsTooLarge => msg(
                C::MaxPostPreDataLengthExceededError,
                "Your POST request fields preceding the upload file were too large.",
            ),
            GwError::PostFileMissing => msg(
                C::IncorrectNumberOfFilesInPostRequest,
                "POST requires exactly one file upload per request.",
            ),
            GwError::RequestTimeout => msg(
                C::RequestTimeout,
                "Your socket connection to the server was not read from or written to \
                 within the timeout period.",
            ),
            GwError::AccessDenied => msg(C::AccessDenied, "Access Denied"),
            GwError::Denied(why) => msg(C::AccessDenied, format!("Access Denied: {why}")),
            GwError::InvalidAccessKeyId => msg(
                C::InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records.",
            ),
            GwError::NotImplemented(what) => {
                msg(C::NotImplemented, format!("{what} is not implemented"))
            }
            GwError::RequestTimeTooSkewed => with_status(
                C::RequestTimeTooSkewed,
                StatusCode::FORBIDDEN,
                "The difference between the request time and the current time is too large.",
            ),
            GwError::RequestExpired => msg(C::AccessDenied, "Request has expired"),
            GwError::AuthorizationQueryParameters(m) => custom(
                "AuthorizationQueryParametersError",
                StatusCode::BAD_REQUEST,
                m,
            ),
            GwError::AccessControlListNotSupported => custom(
                "AccessControlListNotSupported",
                StatusCode::BAD_REQUEST,
                "The bucket does not allow ACLs; only the canned ACL 'private' is accepted",
            ),
            GwError::SlowDown(why) => with_status(
                C::SlowDown,
                StatusCode::SERVICE_UNAVAILABLE,
                format!("Please reduce your request rate: {why}."),
            ),
            GwError::Internal(detail) => internal(&detail),
        }
    }
}

/// The AWS form of an error s3s raised itself while checking a POST
/// policy, before any handler ran. s3s answers a failed `eq` /
/// `starts-with` condition (or a `bucket` field naming another bucket)
/// with `400 InvalidPolicyDocument`, an expired policy with "Request has
/// expired" and a form field no condition covers with its own wording;
/// AWS answers all three `403 AccessDenied` "Invalid according to Policy:
/// ...". Anything else (a policy that does not parse stays
/// InvalidPolicyDocument, as on AWS) is left alone (`None`).
pub fn post_policy_error(code: &str, message: &str) -> Option<S3Error> {
    let why = match code {
        "InvalidPolicyDocument" if message.starts_with("Policy condition ") => {
            format!("Policy Condition failed: {message}")
        }
        "InvalidPolicyDocument" if message.starts_with("Bucket in form field") => {
            message.to_string()
        }
        "AccessDenied" if message == "Request has expired" => "Policy expired.".to_string(),
        "AccessDenied" if message.starts_with("Each form field") => {
            let field = message.split('"').nth(1).unwrap_or_default();
            format!("Extra input fields: {field}")
        }
        _ => return None,
    };
    Some(GwError::PolicyViolation(why).into())
}

/// Headers of a `304 Not Modified`: the object's ETag and Last-Modified.
pub fn not_modified_headers(etag: &str, last_modified: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{etag}\"")) {
        h.insert(http::header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(last_modified) {
        h.insert(http::header::LAST_MODIFIED, v);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_and_status(e: GwError) -> (String, u16) {
        let s3: S3Error = e.into();
        let status = s3.status_code().map(|s| s.as_u16()).unwrap_or(0);
        (s3.code().as_str().to_string(), status)
    }

    #[test]
    fn store_errors_map_to_aws_codes() {
        let cases = [
            (StoreError::NoSuchBucket, "NoSuchBucket", 404),
            (
                StoreError::BucketAlreadyOwnedByYou,
                "BucketAlreadyOwnedByYou",
                409,
            ),
            (StoreError::BucketNotEmpty, "BucketNotEmpty", 409),
            (StoreError::NoSuchKey, "NoSuchKey", 404),
            (StoreError::BadDigest, "BadDigest", 400),
            (StoreError::IncompleteBody, "IncompleteBody", 400),
            (StoreError::PreconditionFailed, "PreconditionFailed", 412),
            (StoreError::NoSuchUpload, "NoSuchUpload", 404),
            (StoreError::InvalidPart, "InvalidPart", 400),
            (StoreError::InvalidPartOrder, "InvalidPartOrder", 400),
            (StoreError::EntityTooSmall, "EntityTooSmall", 400),
            (StoreError::ShuttingDown, "ServiceUnavailable", 503),
            (StoreError::InsufficientStorage, "InsufficientStorage", 507),
            (
                StoreError::Unavailable("/secret/path".into()),
                "ServiceUnavailable",
                503,
            ),
            (
                StoreError::InvalidArgument("x".into()),
                "InvalidArgument",
                400,
            ),
            (
                StoreError::Corrupt("/secret/path".into()),
                "InternalError",
                500,
            ),
            (StoreError::Engine("boom".into()), "InternalError", 500),
        ];
        for (e, code, status) in cases {
            assert_eq!(
                code_and_status(GwError::Store(e)),
                (code.to_string(), status)
            );
        }
    }

    #[test]
    fn s3s_policy_condition_failures_become_access_denied() {
        let e = post_policy_error(
            "InvalidPolicyDocument",
            "Policy condition 'eq' for field 'key' failed: expected 'a', got 'b'",
        )
        .expect("recoded");
        assert_eq!(e.code().as_str(), "AccessDenied");
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(403));
        assert!(
            e.message()
                .unwrap_or_default()
                .starts_with("Invalid according to Policy: Policy Condition failed:")
        );
        assert!(
            post_policy_error("InvalidPolicyDocument", "failed to parse POST policy").is_none()
        );
        let extra = post_policy_error(
            "AccessDenied",
            "Each form field that you specify in a form must appear in the list of policy \
             conditions. \"x-amz-meta-a\" not specified in the policy.",
        )
        .expect("recoded");
        assert_eq!(
            extra.message(),
            Some("Invalid according to Policy: Extra input fields: x-amz-meta-a")
        );
        assert!(post_policy_error("EntityTooLarge", "Policy condition x").is_none());
    }

    #[test]
    fn internal_errors_do_not_leak_details() {
        let s3: S3Error = GwError::Store(StoreError::Corrupt("/data/p0001/seg7".into())).into();
        assert!(!s3.message().unwrap_or_default().contains("/data"));
    }

    #[test]
    fn gateway_errors_carry_their_status() {
        assert_eq!(
            code_and_status(GwError::InvalidRange),
            ("InvalidRange".into(), 416)
        );
        assert_eq!(
            code_and_status(GwError::TooManyTags(10)),
            ("InvalidTag".into(), 400)
        );
        assert_eq!(
            code_and_status(GwError::NotModified(HeaderMap::new())),
            ("NotModified".into(), 304)
        );
        assert_eq!(
            code_and_status(GwError::MissingContentLength),
            ("MissingContentLength".into(), 411)
        );
        assert_eq!(
            code_and_status(GwError::Store(StoreError::QuotaExceeded(
                "quota_bytes".into()
            ))),
            ("QuotaExceeded".into(), 403)
        );
        assert_eq!(
            code_and_status(GwError::RequestTimeTooSkewed),
            ("RequestTimeTooSkewed".into(), 403)
        );
        assert_eq!(
            code_and_status(GwError::RequestExpired),
            ("AccessDenied".into(), 403)
        );
        assert_eq!(
            code_and_status(GwError::Denied("read-only key".into())),
            ("AccessDenied".into(), 403)
        );
        assert_eq!(
            code_and_status(GwError::AccessControlListNotSupported),
            ("AccessControlListNotSupported".into(), 400)
        );
        assert_eq!(
            code_and_status(GwError::PolicyViolation("Policy expired.".into())),
            ("AccessDenied".into(), 403)
        );
        assert_eq!(
            code_and_status(GwError::ChecksumTypeMismatch("crc32".into(), "sha1".into())),
            ("InvalidRequest".into(), 400)
        );
        assert_eq!(
            code_and_status(GwError::Store(StoreError::ChecksumMismatch("CRC32".into()))),
            ("BadDigest".into(), 400)
        );
        assert_eq!(
            code_and_status(GwError::ContentSha256Mismatch),
            ("XAmzContentSHA256Mismatch".into(), 400)
        );
    }
}
