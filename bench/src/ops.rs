//! The S3 operations the benchmarks and the crash test need.
//!
//! Each operation builds a path-style request, signs it, sends it under the
//! client timeout and decodes only what callers use. Objects carry an
//! optional content type and `x-amz-meta-*` pairs ([`PutOptions`]) so tests
//! can check metadata survives as well as bytes.

use base64::Engine as _;
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, ETAG};
use http::{HeaderMap, HeaderName, Method};
use md5::{Digest, Md5};

use crate::body::{ChunkFn, ReqBody};
use crate::client::{S3Client, drain, encode_path, encode_query};
use crate::error::ClientError;
use crate::xml::{self, ListPage};

/// Optional headers for a PUT.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// `Content-Type` to store with the object.
    pub content_type: Option<String>,
    /// User metadata, sent as `x-amz-meta-<name>: <value>`.
    pub metadata: Vec<(String, String)>,
    /// Tags, as the `x-amz-tagging` header (`k=v&k2=v2`, URL-encoded).
    pub tagging: Option<String>,
}

/// The parts of a ListObjectsV2 request.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListRequest<'a> {
    /// Only keys starting with this.
    pub prefix: Option<&'a str>,
    /// Roll keys up at the first occurrence after the prefix.
    pub delimiter: Option<&'a str>,
    /// Token from the previous page.
    pub continuation_token: Option<&'a str>,
    /// Page size (server default if `None`).
    pub max_keys: Option<u32>,
    /// Only objects with these tags (`x-laneway-tag-filter`, the
    /// `k=v&k2` form).
    pub tag_filter: Option<&'a str>,
}

/// An object read in full.
#[derive(Debug, Clone)]
pub struct GetOutput {
    /// HTTP status (200 or 206).
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The object's bytes.
    pub body: Bytes,
}

/// Headers of a HEAD or a streamed GET.
#[derive(Debug, Clone)]
pub struct ObjectHeaders {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
}

/// Helpers over an object's response headers.
pub trait HeaderExt {
    /// The header map.
    fn header_map(&self) -> &HeaderMap;

    /// A header's value as text, if present and printable.
    fn header(&self, name: &str) -> Option<&str> {
        self.header_map().get(name)?.to_str().ok()
    }

    /// The ETag without quotes.
    fn etag(&self) -> Option<&str> {
        self.header(ETAG.as_str()).map(|e| e.trim_matches('"'))
    }

    /// `Content-Type`.
    fn content_type(&self) -> Option<&str> {
        self.header(CONTENT_TYPE.as_str())
    }

    /// `Content-Length`, if present and numeric.
    fn content_length(&self) -> Option<u64> {
        self.header(CONTENT_LENGTH.as_str())?.parse().ok()
    }

    /// User metadata `x-amz-meta-<name>`.
    fn meta(&self, name: &str) -> Option<&str> {
        self.header(&format!("x-amz-meta-{}", name.to_ascii_lowercase()))
    }
}

impl HeaderExt for GetOutput {
    fn header_map(&self) -> &HeaderMap {
        &self.headers
    }
}

impl HeaderExt for ObjectHeaders {
    fn header_map(&self) -> &HeaderMap {
        &self.headers
    }
}

fn object_path(bucket: &str, key: &str) -> String {
    format!("/{}/{}", encode_path(bucket), encode_path(key))
}

fn put_headers(opts: &PutOptions) -> Result<Vec<(HeaderName, String)>, ClientError> {
    let mut headers = Vec::with_capacity(opts.metadata.len() + 1);
    if let Some(ct) = &opts.content_type {
        headers.push((CONTENT_TYPE, ct.clone()));
    }
    for (name, value) in &opts.metadata {
        let full = format!("x-amz-meta-{}", name.to_ascii_lowercase());
        let name = HeaderName::from_bytes(full.as_bytes())
            .map_err(|_| ClientError::InvalidRequest(format!("bad metadata name {name:?}")))?;
        headers.push((name, value.clone()));
    }
    if let Some(t) = &opts.tagging {
        headers.push((HeaderName::from_static("x-amz-tagging"), t.clone()));
    }
    Ok(headers)
}

impl S3Client {
    /// CreateBucket.
    pub async fn create_bucket(&self, bucket: &str) -> Result<(), ClientError> {
        let path = format!("/{}", encode_path(bucket));
        let req = self.request(Method::PUT, &path, &[], ReqBody::empty())?;
        self.timed(async { drain(self.send(req).await?.into_body()).await.map(drop) })
            .await
    }

    /// CreateBucket, treating "you already own it" as success.
    pub async fn ensure_bucket(&self, bucket: &str) -> Result<(), ClientError> {
        match self.create_bucket(bucket).await {
            Err(e) if e.code() == Some("BucketAlreadyOwnedByYou") => Ok(()),
            other => other,
        }
    }

    /// PutObject from one buffer; returns the ETag if the server sent one.
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
    ) -> Result<Option<String>, ClientError> {
        self.put_object_with(bucket, key, body, &PutOptions::default())
            .await
    }

    /// PutObject from one buffer with a content type and metadata.
    pub async fn put_object_with(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        opts: &PutOptions,
    ) -> Result<Option<String>, ClientError> {
        self.put_body(bucket, key, ReqBody::full(body), opts).await
    }

    /// PutObject of exactly `len` bytes pulled from `next` chunk by chunk,
    /// so multi-GiB objects never sit in memory.
    pub async fn put_object_stream(
        &self,
        bucket: &str,
        key: &str,
        len: u64,
        next: ChunkFn,
        opts: &PutOptions,
    ) -> Result<Option<String>, ClientError> {
        self.put_body(bucket, key, ReqBody::generated(len, next), opts)
            .await
    }

    async fn put_body(
        &self,
        bucket: &str,
        key: &str,
        body: ReqBody,
        opts: &PutOptions,
    ) -> Result<Option<String>, ClientError> {
        let headers = put_headers(opts)?;
        let req = self.request(Method::PUT, &object_path(bucket, key), &headers, body)?;
        self.timed(async {
            let resp = self.send(req).await?;
            let etag = resp
                .headers()
                .get(ETAG)
                .and_then(|v| v.to_str().ok())
                .map(|e| e.trim_matches('"').to_owned());
            drain(resp.into_body()).await?;
            Ok(etag)
        })
        .await
    }

    /// GetObject, buffering the whole body (up to the client's limit).
    pub async fn get_object(&self, bucket: &str, key: &str) -> Result<GetOutput, ClientError> {
        let req = self.request(
            Method::GET,
            &object_path(bucket, key),
            &[],
            ReqBody::empty(),
        )?;
        self.timed(async {
            let resp = self.send(req).await?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = self.read_body(resp).await?;
            Ok(GetOutput {
                status,
                headers,
                body,
            })
        })
        .await
    }

    /// GetObject, discarding the body; returns the headers and byte count.
    pub async fn get_object_count(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(ObjectHeaders, u64), ClientError> {
        let req = self.request(
            Method::GET,
            &object_path(bucket, key),
            &[],
            ReqBody::empty(),
        )?;
        self.timed(async {
            let resp = self.send(req).await?;
            let head = ObjectHeaders {
                status: resp.status().as_u16(),
                headers: resp.headers().clone(),
            };
            let n = drain(resp.into_body()).await?;
            Ok((head, n))
        })
        .await
    }

    /// HeadObject.
    pub async fn head_object(&self, bucket: &str, key: &str) -> Result<ObjectHeaders, ClientError> {
        let req = self.request(
            Method::HEAD,
            &object_path(bucket, key),
            &[],
            ReqBody::empty(),
        )?;
        self.timed(async {
            let resp = self.send(req).await?;
            Ok(ObjectHeaders {
                status: resp.status().as_u16(),
                headers: resp.headers().clone(),
            })
        })
        .await
    }

    /// DeleteObject.
    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), ClientError> {
        let req = self.request(
            Method::DELETE,
            &object_path(bucket, key),
            &[],
            ReqBody::empty(),
        )?;
        self.timed(async { drain(self.send(req).await?.into_body()).await.map(drop) })
            .await
    }

    /// One page of ListObjectsV2.
    pub async fn list_objects_v2(
        &self,
        bucket: &str,
        list: &ListRequest<'_>,
    ) -> Result<ListPage, ClientError> {
        let path = format!("/{}?{}", encode_path(bucket), list_query(list));
        self.get_xml(&path, "listing", xml::parse_list_v2).await
    }

    /// PutObjectTagging, replacing the object's tag set.
    pub async fn put_object_tagging(
        &self,
        bucket: &str,
        key: &str,
        tags: &[(String, String)],
    ) -> Result<(), ClientError> {
        let body = Bytes::from(tagging_xml(tags));
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body));
        let headers = [
            (CONTENT_TYPE, "application/xml".to_owned()),
            (HeaderName::from_static("content-md5"), md5),
        ];
        let path = format!("{}?tagging", object_path(bucket, key));
        let req = self.request(Method::PUT, &path, &headers, ReqBody::full(body))?;
        self.timed(async { drain(self.send(req).await?.into_body()).await.map(drop) })
            .await
    }
}

impl S3Client {
    /// GetObjectTagging: the object's tags, in the order the server
    /// sends them.
    pub async fn get_object_tagging(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Vec<(String, String)>, ClientError> {
        let path = format!("{}?tagging", object_path(bucket, key));
        self.get_xml(&path, "tagging", xml::parse_tag_set).await
    }

    /// GET `path` and parse its XML answer (`what` names it in errors).
    async fn get_xml<T>(
        &self,
        path: &str,
        what: &str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Result<T, ClientError> {
        let req = self.request(Method::GET, path, &[], ReqBody::empty())?;
        self.timed(async {
            let body = self.read_body(self.send(req).await?).await?;
            let text = std::str::from_utf8(&body)
                .map_err(|_| ClientError::BadResponse(format!("{what} is not UTF-8")))?;
            parse(text).map_err(ClientError::BadResponse)
        })
        .await
    }
}

/// The query string of a ListObjectsV2 request, already encoded.
fn list_query(list: &ListRequest<'_>) -> String {
    let mut query = String::from("list-type=2");
    let mut add = |name: &str, value: &str| {
        query.push('&');
        query.push_str(name);
        query.push('=');
        query.push_str(&encode_query(value));
    };
    if let Some(token) = list.continuation_token {
        add("continuation-token", token);
    }
    if let Some(d) = list.delimiter {
        add("delimiter", d);
    }
    if let Some(n) = list.max_keys {
        add("max-keys", &n.to_string());
    }
    if let Some(p) = list.prefix {
        add("prefix", p);
    }
    if let Some(f) = list.tag_filter {
        add("x-laneway-tag-filter", f);
    }
    query
}

fn tagging_xml(tags: &[(String, String)]) -> String {
    let mut out = String::from("<Tagging><TagSet>");
    for (k, v) in tags {
        out.push_str(&format!(
            "<Tag><Key>{}</Key><Value>{}</Value></Tag>",
            xml_escape(k),
            xml_escape(v)
        ));
    }
    out.push_str("</TagSet></Tagging>");
    out
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_is_encoded() {
        let list = ListRequest {
            prefix: Some("a b/"),
            delimiter: Some("/"),
            continuation_token: Some("t+k="),
            max_keys: Some(1000),
            tag_filter: Some("split=train"),
        };
        assert_eq!(
            list_query(&list),
            "list-type=2&continuation-token=t%2Bk%3D&delimiter=%2F&max-keys=1000&prefix=a%20b%2F\
             &x-laneway-tag-filter=split%3Dtrain"
        );
    }

    #[test]
    fn tagging_body_is_escaped() {
        let xml = tagging_xml(&[("a&b".into(), "<v>".into())]);
        assert_eq!(
            xml,
            "<Tagging><TagSet><Tag><Key>a&amp;b</Key><Value>&lt;v&gt;</Value></Tag></TagSet></Tagging>"
        );
    }

    #[test]
    fn metadata_becomes_headers() {
        let opts = PutOptions {
            content_type: Some("text/plain".into()),
            metadata: vec![("Gen".into(), "7".into())],
            tagging: Some("a=1".into()),
        };
        let headers = put_headers(&opts).expect("valid");
        assert_eq!(headers[1].0.as_str(), "x-amz-meta-gen");
        assert!(
            put_headers(&PutOptions {
                content_type: None,
                metadata: vec![("bad name".into(), String::new())],
                tagging: None,
            })
            .is_err()
        );
    }
}
