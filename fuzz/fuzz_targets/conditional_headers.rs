//! Fuzz target: conditional request headers. s3s parses If-Match /
//! If-None-Match ([`ETagCondition`]) and If-(Un)Modified-Since (HTTP
//! dates); [`Conditions`] evaluates them against an object.
//!
//! Input: six lines `ETAG\nMTIME_MS\nIF_MATCH\nIF_NONE_MATCH\nIF_MODIFIED_SINCE\nIF_UNMODIFIED_SINCE`
//! (an empty or missing line: header absent; a non-numeric mtime: the
//! input's length). Checks: no panic, whatever the dates or mtime; the
//! copy-source verdict is never 304 and differs from the GET verdict only
//! by turning 304 into 412; an If-Match that names the object's own ETag
//! never fails; a date that parsed re-formats to a date that parses to the
//! same instant.
#![no_main]

use laneway_gateway::request::conditional::{Conditions, Verdict};
use libfuzzer_sys::fuzz_target;
use s3s::dto::{ETag, ETagCondition, Timestamp, TimestampFormat};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let mut next = || lines.next().filter(|l| !l.is_empty());
    let etag = next()
        .unwrap_or("9e107d9d372bb6826bd81d3542a419d6")
        .to_string();
    let mtime_ms = next()
        .and_then(|m| m.parse::<i64>().ok())
        .unwrap_or(text.len() as i64);
    let if_match = next().and_then(|h| ETagCondition::parse_http_header(h.as_bytes()).ok());
    let if_none_match = next().and_then(|h| ETagCondition::parse_http_header(h.as_bytes()).ok());
    let if_modified_since = next().and_then(http_date);
    let if_unmodified_since = next().and_then(http_date);
    let conds = Conditions {
        if_match: if_match.as_ref(),
        if_none_match: if_none_match.as_ref(),
        if_modified_since: if_modified_since.as_ref(),
        if_unmodified_since: if_unmodified_since.as_ref(),
    };
    check(&conds, &etag, mtime_ms);
    // The same conditions against the ETag that If-Match names: it holds.
    if let Some(ETagCondition::ETag(e)) = &if_match {
        let own = e.value().to_string();
        assert_ne!(
            conds.evaluate(&own, mtime_ms),
            Verdict::PreconditionFailed,
            "{conds:?}"
        );
    }
});

fn check(conds: &Conditions<'_>, etag: &str, mtime_ms: i64) {
    let get = conds.evaluate(etag, mtime_ms);
    let copy = conds.evaluate_copy_source(etag, mtime_ms);
    let expected = match get {
        Verdict::Proceed => Verdict::Proceed,
        Verdict::NotModified | Verdict::PreconditionFailed => Verdict::PreconditionFailed,
    };
    assert_eq!(copy, expected, "{conds:?}");
    if conds.is_empty() {
        assert_eq!(get, Verdict::Proceed);
    }
    // A strong If-Match of any other ETag than the object's fails.
    if let Some(ETagCondition::ETag(ETag::Strong(v))) = conds.if_match
        && v != etag
    {
        assert_eq!(get, Verdict::PreconditionFailed, "{conds:?}");
    }
}

/// An HTTP date as s3s parses If-Modified-Since; one that parses must
/// survive a format/parse round trip.
fn http_date(s: &str) -> Option<Timestamp> {
    let t = Timestamp::parse(TimestampFormat::HttpDate, s).ok()?;
    let mut out = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut out).ok()?;
    let text = String::from_utf8(out).expect("an HTTP date is ASCII");
    let back = Timestamp::parse(TimestampFormat::HttpDate, &text).expect("a formatted date parses");
    assert_eq!(back, t, "{s:?} -> {text:?}");
    Some(t)
}
