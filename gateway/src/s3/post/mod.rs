//! The PostObject family: this module holds the handler; [`form`] the gate
//! that checks a form's signature before s3s reads its file.
//!
//! PostObject: browser-form uploads (`multipart/form-data` POST to the
//! bucket URL with a POST policy), as boto3's `generate_presigned_post`
//! makes them.
//!
//! Who checks what:
//!
//! - [`crate::s3::post::form`], before the lanes and s3s: reads the fields that
//!   come before the file (at most 64 KiB), refuses an unsigned or wrongly
//!   signed form, an unknown key or an expired policy before a byte of the
//!   file is read, and reserves the file's memory in a budget shared by
//!   all form uploads.
//! - s3s 0.14.1, before any handler runs: parses the form; verifies the
//!   SigV4 signature of the policy with the key's secret (from
//!   [`crate::request::auth::KeyAuth`]) and that the policy names the form's
//!   `x-amz-date`, `x-amz-credential` and `x-amz-algorithm`; refuses an
//!   expired policy; reads the file (at most the policy's
//!   `content-length-range` maximum, answering `EntityTooLarge` beyond it,
//!   and `EntityTooSmall` under its minimum); checks every `eq` /
//!   `starts-with` condition against the form fields (the `bucket`
//!   condition against the URL's bucket) and that every form field is
//!   covered by a condition.
//! - The access check ([`crate::request::auth::TenantAccess`], [`crate::request::opclass`]):
//!   a form without a signature is anonymous and refused; `PostObject` is a
//!   write, so read-only keys are refused and scoped keys must cover the
//!   bucket, exactly as for PutObject. A signed form always carries the
//!   policy its signature covers (s3s verifies both together; it does not
//!   hand the parsed policy on to the handler).
//! - This module: the form becomes an [`Upload`] and goes through
//!   [`crate::s3::object::put::store_upload`], the path of PutObject (tenant's
//!   bucket namespace, key and metadata rules, Content-MD5, checksum
//!   fields, tagging, quota); and [`recode_policy_error`] gives the errors
//!   s3s raised while checking the policy the codes AWS uses
//!   (`403 AccessDenied` "Invalid according to Policy: ...", via
//!   [`crate::request::error::post_policy_error`]).
//!
//! Files are limited to [`MAX_POST_FILE_BYTES`] (set in s3s's config by
//! `serve`), because s3s buffers them; at most
//! [`crate::s3::post::form::FORM_BUDGET_BYTES`] are buffered at once.
//!
//! Not supported: the `${filename}` key variable. s3s 0.14.1 does not pass
//! the file part's name on to the handler, so the key cannot be completed
//! as AWS does; such a key is refused (`501 NotImplemented`) rather than
//! stored under the literal text `${filename}`.

pub mod form;

use crate::request::checksum::{self, Algo};
use crate::request::context::{Gateway, ReqCtx};
use crate::request::error::{GwError, GwResult, post_policy_error};
use crate::s3::object::put::{Upload, store_upload};
use s3s::dto::*;
use s3s::{HttpResponse, S3Request, S3Response};

/// Largest file a form upload may carry. s3s reads the whole file into
/// memory before the handler runs, so this bounds the memory one form
/// upload can take (AWS allows 5 GB; larger files need PutObject or a
/// multipart upload, which stream). Bigger files get `EntityTooLarge`.
pub const MAX_POST_FILE_BYTES: u64 = 64 << 20;

/// The key variable AWS replaces with the uploaded file's name.
const FILENAME_VARIABLE: &str = "${filename}";

/// Largest error body [`recode_policy_error`] looks into.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// PostObject.
pub async fn post_object(
    gw: &Gateway,
    req: S3Request<PostObjectInput>,
) -> GwResult<S3Response<PostObjectOutput>> {
    let ctx = ReqCtx::of(&req)?;
    let input = req.input;
    if input.key.contains(FILENAME_VARIABLE) {
        return Err(GwError::NotImplemented(
            "The ${filename} variable in the key of a POST upload",
        ));
    }
    let wanted = checksum::requested(&checksum_fields(&input), None)?;
    let put = store_upload(gw, &ctx, form_upload(input), wanted).await?;
    let mut resp = S3Response::new(PostObjectOutput {
        checksum_crc32: put.checksum_crc32,
        checksum_crc32c: put.checksum_crc32c,
        checksum_crc64nvme: put.checksum_crc64nvme,
        checksum_sha1: put.checksum_sha1,
        checksum_sha256: put.checksum_sha256,
        checksum_type: put.checksum_type,
        e_tag: put.e_tag.clone(),
        ..Default::default()
    });
    if let Some(v) = put
        .e_tag
        .and_then(|e| http::HeaderValue::from_str(&format!("\"{}\"", e.value())).ok())
    {
        resp.headers.insert(http::header::ETAG, v);
    }
    Ok(resp)
}

/// The upload the form describes. s3s has read the whole file, so its
/// length is known (s3s leaves it unset for an empty file).
fn form_upload(input: PostObjectInput) -> Upload {
    Upload {
        bucket: input.bucket,
        key: input.key,
        body: input.body,
        length: Some(input.content_length.unwrap_or(0)),
        content_md5: input.content_md5,
        tagging: input.tagging,
        acl: input.acl,
        meta: crate::request::meta::meta_input!(input),
        if_match: input.if_match,
        if_none_match: input.if_none_match,
    }
}

/// The form's `x-amz-checksum-*` fields as the headers a PutObject would
/// carry, so [`checksum::requested`] decides for both.
fn checksum_fields(input: &PostObjectInput) -> http::HeaderMap {
    let given = [
        (Algo::Crc32, &input.checksum_crc32),
        (Algo::Crc32c, &input.checksum_crc32c),
        (Algo::Crc64Nvme, &input.checksum_crc64nvme),
        (Algo::Sha1, &input.checksum_sha1),
        (Algo::Sha256, &input.checksum_sha256),
    ];
    let mut headers = http::HeaderMap::new();
    for (algo, value) in given {
        if let Some(v) = value
            .as_deref()
            .and_then(|v| http::HeaderValue::from_str(v).ok())
        {
            headers.insert(algo.header(), v);
        }
    }
    headers
}

/// Whether a request is a browser-form upload (POST with a
/// `multipart/form-data` body), whose policy errors s3s raises.
pub fn is_form_post(method: &http::Method, headers: &http::HeaderMap) -> bool {
    method == http::Method::POST
        && headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("multipart/form-data")
            })
}

/// Give an error s3s raised while checking a POST policy the code and
/// status AWS uses; any other response passes unchanged. Only a client
/// error's body (a small XML document) is read.
pub async fn recode_policy_error(resp: HttpResponse) -> HttpResponse {
    if !resp.status().is_client_error() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let limited = http_body_util::Limited::new(body, MAX_ERROR_BODY);
    let bytes = match http_body_util::BodyExt::collect(limited).await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            tracing::debug!(error = %e, "error body of a form upload not readable");
            return HttpResponse::from_parts(parts, s3s::Body::empty());
        }
    };
    match recoded(&bytes) {
        Some(resp) => resp,
        None => HttpResponse::from_parts(parts, s3s::Body::from(bytes)),
    }
}

/// The AWS form of the S3 error document `body`, if it is one s3s raised
/// for a POST policy.
fn recoded(body: &[u8]) -> Option<HttpResponse> {
    let text = String::from_utf8_lossy(body);
    let code = xml_text(&text, "Code")?;
    let message = xml_text(&text, "Message")?;
    let err = post_policy_error(&code, &message)?;
    match err.to_http_response() {
        Ok(resp) => Some(resp),
        Err(e) => {
            tracing::warn!(error = ?e, "could not re-encode a POST policy error");
            None
        }
    }
}

/// The unescaped text of the first `<tag>` element of an S3 error body.
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    Some(unescape(&xml[start..start + len]))
}

/// Undo XML's five predefined entities.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_posts_are_recognised_by_method_and_type() {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("multipart/form-data; boundary=x"),
        );
        assert!(is_form_post(&http::Method::POST, &h));
        assert!(!is_form_post(&http::Method::PUT, &h));
        h.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/xml"),
        );
        assert!(!is_form_post(&http::Method::POST, &h));
        assert!(!is_form_post(&http::Method::POST, &http::HeaderMap::new()));
    }

    #[test]
    fn error_bodies_are_read_and_unescaped() {
        let xml = "<?xml version=\"1.0\"?><Error><Code>InvalidPolicyDocument</Code>\
                   <Message>Policy condition &apos;eq&apos; failed &amp; more</Message></Error>";
        assert_eq!(
            xml_text(xml, "Code").as_deref(),
            Some("InvalidPolicyDocument")
        );
        assert_eq!(
            xml_text(xml, "Message").as_deref(),
            Some("Policy condition 'eq' failed & more")
        );
        assert_eq!(xml_text(xml, "Resource"), None);
        assert_eq!(xml_text("<Code>unterminated", "Code"), None);
    }

    #[test]
    fn policy_errors_are_recoded_and_others_pass() {
        let body = |code: s3s::S3ErrorCode, message: &'static str| {
            let resp = s3s::S3Error::with_message(code, message)
                .to_http_response()
                .expect("serialised");
            resp.body().bytes().expect("buffered")
        };
        let resp = recoded(&body(
            s3s::S3ErrorCode::InvalidPolicyDocument,
            "Policy condition 'eq' for field 'key' failed: expected 'a', got 'b'",
        ))
        .expect("recoded");
        assert_eq!(resp.status(), http::StatusCode::FORBIDDEN);
        let bytes = resp.body().bytes().expect("buffered");
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(xml_text(&text, "Code").as_deref(), Some("AccessDenied"));
        assert!(recoded(&body(s3s::S3ErrorCode::NoSuchBucket, "gone")).is_none());
        assert!(recoded(b"not xml").is_none());
    }
}
