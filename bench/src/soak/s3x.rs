//! The S3 calls the soak needs beyond `crate::ops`: PUT and GET of a
//! [`Blob`] checked byte by byte as it streams (whole or ranged),
//! GetObjectTagging, and a two-part multipart upload. They go through the
//! same signing client, pool and timeout as every other mode.

use bytes::Bytes;
use http::header::RANGE;
use http::{HeaderName, Method};
use http_body_util::BodyExt;

use super::blob::Blob;
use crate::body::ReqBody;
use crate::client::{S3Client, drain, encode_path, read_limited};
use crate::error::ClientError;
use crate::ops::HeaderExt as _;
use crate::xml;

/// Smallest part of a multipart upload but the last (S3's rule).
pub const MIN_PART: u64 = 5 << 20;
/// Largest answer body read as text (tagging, multipart answers).
const MAX_TEXT: usize = 1 << 20;

fn object_path(bucket: &str, key: &str) -> String {
    format!("/{}/{}", encode_path(bucket), encode_path(key))
}

fn bad(msg: String) -> ClientError {
    ClientError::BadResponse(msg)
}

/// PUTs `blob` as `key`.
pub async fn put_blob(
    c: &S3Client,
    bucket: &str,
    key: &str,
    blob: &Blob,
) -> Result<(), ClientError> {
    let body = blob.body(0, blob.size());
    let req = c.request(Method::PUT, &object_path(bucket, key), &[], body)?;
    c.timed(async { drain(c.send(req).await?.into_body()).await.map(drop) })
        .await
}

/// GETs `key` (bytes `[from, to)` with `range`) and checks every byte
/// against `blob`; returns the bytes read.
pub async fn get_checked(
    c: &S3Client,
    bucket: &str,
    key: &str,
    blob: &Blob,
    range: Option<(u64, u64)>,
) -> Result<u64, ClientError> {
    let headers: Vec<(HeaderName, String)> = range
        .map(|(a, b)| (RANGE, format!("bytes={a}-{}", b.saturating_sub(1))))
        .into_iter()
        .collect();
    let req = c.request(
        Method::GET,
        &object_path(bucket, key),
        &headers,
        ReqBody::empty(),
    )?;
    let (from, to) = range.unwrap_or((0, blob.size()));
    let want_status = if range.is_some() { 206 } else { 200 };
    c.timed(async {
        let resp = c.send(req).await?;
        let status = resp.status().as_u16();
        let length = crate::ops::ObjectHeaders {
            status,
            headers: resp.headers().clone(),
        }
        .content_length();
        if status != want_status || length != Some(to - from) {
            return Err(bad(format!(
                "GET {key} {range:?}: status {status} length {length:?}, want {want_status} {}",
                to - from
            )));
        }
        let mut check = blob.checker(from, to - from);
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ClientError::Transport(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                check.feed(&data);
            }
        }
        check
            .finish()
            .map(|()| to - from)
            .map_err(|m| bad(format!("GET {key} {range:?}: {m}")))
    })
    .await
}

/// GETs `key` whole into memory (for the final check of frozen keys).
pub async fn get_bytes(c: &S3Client, bucket: &str, key: &str) -> Result<Bytes, ClientError> {
    c.get_object(bucket, key).await.map(|o| o.body)
}

/// GetObjectTagging: the tag set as (key, value) pairs.
pub async fn get_tagging(
    c: &S3Client,
    bucket: &str,
    key: &str,
) -> Result<Vec<(String, String)>, ClientError> {
    let path = format!("{}?tagging", object_path(bucket, key));
    let req = c.request(Method::GET, &path, &[], ReqBody::empty())?;
    let text = c
        .timed(async { read_limited(c.send(req).await?.into_body(), MAX_TEXT).await })
        .await?;
    let text = String::from_utf8_lossy(&text);
    if !text.contains("<Tagging") {
        return Err(bad(format!("GET {key}?tagging: no Tagging element")));
    }
    Ok(xml::elements(&text, "Tag")
        .map(|tag| {
            let k = xml::first_text(tag, "Key").unwrap_or_default().into_owned();
            let v = xml::first_text(tag, "Value")
                .unwrap_or_default()
                .into_owned();
            (k, v)
        })
        .collect())
}

/// How a multipart upload ended when it did not succeed.
#[derive(Debug)]
pub struct MultipartError {
    /// The failure.
    pub error: ClientError,
    /// True if the completion's outcome is unknown (it may have landed).
    pub maybe_applied: bool,
}

/// Uploads `blob` (more than [`MIN_PART`] bytes) in two parts and
/// completes it; an upload that fails before completion is aborted.
pub async fn multipart_put(
    c: &S3Client,
    bucket: &str,
    key: &str,
    blob: &Blob,
) -> Result<(), MultipartError> {
    let early = |error| MultipartError {
        error,
        maybe_applied: false,
    };
    let path = object_path(bucket, key);
    let id = create_upload(c, &path).await.map_err(early)?;
    let split = MIN_PART.min(blob.size());
    let mut etags = Vec::with_capacity(2);
    for (n, (from, to)) in [(0, split), (split, blob.size())].into_iter().enumerate() {
        match upload_part(c, &path, &id, n + 1, blob.body(from, to)).await {
            Ok(etag) => etags.push(etag),
            Err(e) => {
                let _ = abort_upload(c, &path, &id).await;
                return Err(early(e));
            }
        }
    }
    complete_upload(c, &path, &id, &etags)
        .await
        .map_err(|error| {
            let maybe_applied = super::outcome::ambiguous(&error);
            MultipartError {
                error,
                maybe_applied,
            }
        })
}

async fn create_upload(c: &S3Client, path: &str) -> Result<String, ClientError> {
    let req = c.request(
        Method::POST,
        &format!("{path}?uploads"),
        &[],
        ReqBody::empty(),
    )?;
    let text = c
        .timed(async { read_limited(c.send(req).await?.into_body(), MAX_TEXT).await })
        .await?;
    let text = String::from_utf8_lossy(&text);
    xml::first_text(&text, "UploadId")
        .map(|id| id.into_owned())
        .filter(|id| !id.is_empty())
        .ok_or_else(|| bad(format!("CreateMultipartUpload {path}: no UploadId")))
}

async fn upload_part(
    c: &S3Client,
    path: &str,
    id: &str,
    n: usize,
    body: ReqBody,
) -> Result<String, ClientError> {
    let q = format!(
        "{path}?partNumber={n}&uploadId={}",
        crate::client::encode_query(id)
    );
    let req = c.request(Method::PUT, &q, &[], body)?;
    c.timed(async {
        let resp = c.send(req).await?;
        let etag = resp
            .headers()
            .get(http::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| bad(format!("UploadPart {path} #{n}: no ETag")))?;
        drain(resp.into_body()).await?;
        Ok(etag)
    })
    .await
}

async fn complete_upload(
    c: &S3Client,
    path: &str,
    id: &str,
    etags: &[String],
) -> Result<(), ClientError> {
    let mut body = String::from("<CompleteMultipartUpload>");
    for (i, etag) in etags.iter().enumerate() {
        body.push_str(&format!(
            "<Part><PartNumber>{}</PartNumber><ETag>{etag}</ETag></Part>",
            i + 1
        ));
    }
    body.push_str("</CompleteMultipartUpload>");
    let q = format!("{path}?uploadId={}", crate::client::encode_query(id));
    let req = c.request(Method::POST, &q, &[], ReqBody::full(Bytes::from(body)))?;
    let text = c
        .timed(async { read_limited(c.send(req).await?.into_body(), MAX_TEXT).await })
        .await?;
    let text = String::from_utf8_lossy(&text);
    if text.contains("<CompleteMultipartUploadResult") {
        return Ok(());
    }
    // A 200 whose body is an <Error> is S3's way of failing a completion late.
    let (code, message) = xml::parse_error(&text);
    Err(ClientError::S3 {
        status: 200,
        code,
        message,
    })
}

async fn abort_upload(c: &S3Client, path: &str, id: &str) -> Result<(), ClientError> {
    let q = format!("{path}?uploadId={}", crate::client::encode_query(id));
    let req = c.request(Method::DELETE, &q, &[], ReqBody::empty())?;
    c.timed(async { drain(c.send(req).await?.into_body()).await.map(drop) })
        .await
}
