//! Finishing touches to S3 XML documents that s3s's serialisers cannot
//! express:
//!
//! - an error document (status 4xx or 5xx, an XML body) carries
//!   `<RequestId>`, equal to the `x-amz-request-id` header, and `<HostId>`,
//!   equal to the `x-amz-id-2` header, as S3's do (clients log and match
//!   them); s3s writes neither;
//! - a GetObjectAttributes document carries its `<ETag>` bare, as S3 sends
//!   it there (s3s quotes every ETag it serialises). Its handler marks the
//!   response with [`BareETag`], which s3s hands on in the response's
//!   extensions.
//!
//! [`finish`] works on a document while it is still one buffer, before
//! the lanes pace it out ([`crate::lanes::LaneGate`] runs it on every
//! answer of s3s and its own `503 SlowDown`; `serve` on the answers it
//! gives in front of s3s). A streamed body is never read.

use s3s::HttpResponse;

/// Marks a GetObjectAttributes response whose `<ETag>` goes out bare.
#[derive(Clone, Copy, Debug)]
pub struct BareETag;

/// The ids an error document names.
#[derive(Clone, Copy, Debug)]
pub struct Ids<'a> {
    /// The request's id (`x-amz-request-id`).
    pub request: &'a str,
    /// The serving host's id (`x-amz-id-2`).
    pub host: &'a str,
}

/// What, if anything, a response's body needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    Nothing,
    ErrorIds,
    BareETag,
}

fn touch_of(resp: &HttpResponse) -> Touch {
    let xml = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/xml"));
    if resp.status().as_u16() >= 400 && xml {
        Touch::ErrorIds
    } else if resp.status().is_success() && resp.extensions().get::<BareETag>().is_some() {
        Touch::BareETag
    } else {
        Touch::Nothing
    }
}

/// `resp` with its document finished (see the module doc); a response
/// whose body is not one buffer passes unchanged.
pub fn finish(mut resp: HttpResponse, ids: Ids<'_>) -> HttpResponse {
    let touch = touch_of(&resp);
    if touch == Touch::Nothing {
        return resp;
    }
    let Some(bytes) = resp.body().bytes() else {
        return resp;
    };
    let text = String::from_utf8_lossy(&bytes);
    let done = match touch {
        Touch::ErrorIds => with_ids(&text, ids),
        Touch::BareETag => unquoted_etag(&text),
        Touch::Nothing => None,
    };
    if let Some(doc) = done {
        *resp.body_mut() = s3s::Body::from(doc);
    }
    resp
}

/// The error document `xml` with the `<RequestId>` and `<HostId>` it
/// lacks, before its closing `</Error>` (None: not an error document, or
/// nothing missing).
fn with_ids(xml: &str, ids: Ids<'_>) -> Option<String> {
    let end = xml.rfind("</Error>")?;
    let mut added = String::new();
    for (tag, value) in [("RequestId", ids.request), ("HostId", ids.host)] {
        if !xml.contains(&format!("<{tag}>")) {
            added.push_str(&format!("<{tag}>{}</{tag}>", escape(value)));
        }
    }
    if added.is_empty() {
        return None;
    }
    Some(format!("{}{added}{}", &xml[..end], &xml[end..]))
}

/// `xml` with the quotes of its first `<ETag>` value removed (None when it
/// has no quoted ETag).
fn unquoted_etag(xml: &str) -> Option<String> {
    const OPEN: &str = "<ETag>\"";
    const CLOSE: &str = "\"</ETag>";
    let start = xml.find(OPEN)?;
    let value_at = start + OPEN.len();
    let len = xml[value_at..].find(CLOSE)?;
    let value = &xml[value_at..value_at + len];
    Some(format!(
        "{}<ETag>{value}</ETag>{}",
        &xml[..start],
        &xml[value_at + len + CLOSE.len()..]
    ))
}

/// XML text escaping of an id (ids are ASCII, but never trusted blindly).
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: Ids<'static> = Ids {
        request: "0A1B2C3D00000007",
        host: "bGFuZXdheQ==",
    };

    fn error_response() -> HttpResponse {
        s3s::S3Error::with_message(s3s::S3ErrorCode::NoSuchKey, "gone")
            .to_http_response()
            .expect("serialised")
    }

    fn body_text(resp: &HttpResponse) -> String {
        let bytes = resp.body().bytes().expect("buffered");
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[test]
    fn error_documents_get_both_ids() {
        let text = body_text(&finish(error_response(), IDS));
        assert!(
            text.ends_with(
                "<Message>gone</Message><RequestId>0A1B2C3D00000007</RequestId>\
                 <HostId>bGFuZXdheQ==</HostId></Error>"
            ),
            "{text}"
        );
    }

    #[test]
    fn successes_and_streams_pass_unchanged() {
        let ok = HttpResponse::new(s3s::Body::from("<Error></Error>".to_string()));
        assert_eq!(body_text(&finish(ok, IDS)), "<Error></Error>");
        let mut streamed = error_response();
        let chunks = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(
            b"<Error></Error>",
        ))]);
        *streamed.body_mut() = s3s::Body::from(s3s::dto::StreamingBlob::wrap(chunks));
        assert!(finish(streamed, IDS).body().bytes().is_none());
    }

    #[test]
    fn ids_are_added_once() {
        let with_id = "<Error><Code>SlowDown</Code><RequestId>X</RequestId></Error>";
        assert_eq!(
            with_ids(with_id, IDS).as_deref(),
            Some(
                "<Error><Code>SlowDown</Code><RequestId>X</RequestId>\
                 <HostId>bGFuZXdheQ==</HostId></Error>"
            )
        );
        let both = "<Error><RequestId>X</RequestId><HostId>Y</HostId></Error>";
        assert_eq!(with_ids(both, IDS), None);
        assert_eq!(with_ids("<ListBucketResult/>", IDS), None);
    }

    #[test]
    fn marked_attributes_lose_the_etag_quotes() {
        let xml = "<GetObjectAttributesOutput><ETag>\"5d41402abc4b2a76b9719d911017c592\"</ETag>\
                   <ObjectSize>5</ObjectSize></GetObjectAttributesOutput>";
        let mut resp = HttpResponse::new(s3s::Body::from(xml.to_string()));
        resp.extensions_mut().insert(BareETag);
        assert_eq!(
            body_text(&finish(resp, IDS)),
            "<GetObjectAttributesOutput><ETag>5d41402abc4b2a76b9719d911017c592</ETag>\
             <ObjectSize>5</ObjectSize></GetObjectAttributesOutput>"
        );
        // Unmarked documents keep their quotes.
        let plain = HttpResponse::new(s3s::Body::from(xml.to_string()));
        assert_eq!(body_text(&finish(plain, IDS)), xml);
        assert_eq!(unquoted_etag("<ETag>bare</ETag>"), None);
    }
}
