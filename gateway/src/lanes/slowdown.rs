//! The answer to a request the lanes refuse: S3 `503 SlowDown` with an
//! XML error body and a `Retry-After` header, built here without s3s (the
//! request never reaches it, nor the store).

use laneway_qos::Overloaded;
use s3s::HttpResponse;

/// The 503 SlowDown response for a refusal of request `request_id`.
pub fn response(overloaded: &Overloaded, request_id: &str) -> HttpResponse {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>\
         <RequestId>{}</RequestId></Error>",
        xml_escape(request_id)
    );
    let mut resp = http::Response::new(s3s::Body::from(body));
    *resp.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(overloaded.retry_after_secs()),
    );
    resp
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The S3 error code of an error response: from its XML body when s3s
/// buffered one, else a name for its status (HEAD errors have no body).
pub fn error_code(status: http::StatusCode, body: Option<&[u8]>) -> String {
    let from_body = body
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|text| {
            let start = text.find("<Code>")? + "<Code>".len();
            let len = text.get(start..)?.find("</Code>")?;
            text.get(start..start + len)
        });
    if let Some(code) = from_body {
        return code.to_string();
    }
    match status.as_u16() {
        403 => "AccessDenied".into(),
        404 => "NotFound".into(),
        412 => "PreconditionFailed".into(),
        n => format!("Http{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laneway_qos::OverloadReason;
    use std::time::Duration;

    #[test]
    fn slowdown_has_retry_after_and_xml() {
        let o = Overloaded {
            reason: OverloadReason::QueueFull,
            retry_after: Duration::from_millis(1500),
        };
        let resp = response(&o, "ABC");
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()[http::header::RETRY_AFTER], "2");
        let body = resp.body().bytes().expect("buffered");
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("<Code>SlowDown</Code>"));
        assert!(text.contains("<RequestId>ABC</RequestId>"));
        assert_eq!(error_code(resp.status(), Some(&body)), "SlowDown");
    }

    #[test]
    fn error_codes_without_a_body() {
        let s = |n| http::StatusCode::from_u16(n).expect("status");
        assert_eq!(error_code(s(404), None), "NotFound");
        assert_eq!(error_code(s(400), Some(b"<Error>")), "Http400");
    }
}
