//! Fuzz target: the `x-amz-tagging` header ([`tagging::parse_header`],
//! then [`tagging::from_header`]'s limits).
//!
//! Input: the header value. Checks: no panic; a tag set that parses
//! re-encodes (form-encoding every byte that is not unreserved) to a
//! header that parses to the same tags; `from_header` accepts exactly the
//! parsed sets that pass `validate`. Then the input's bytes are read as a
//! tag set (key/value strings split on `\0` and `\x01`) and
//! `parse_header(encode(tags)) == tags` is checked for it.
#![no_main]

use laneway_gateway::request::tags::{MAX_OBJECT_TAGS, from_header, parse_header, validate};
use laneway_store::Tag;
use libfuzzer_sys::fuzz_target;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a form encoder leaves as is: ALPHA / DIGIT / `-._~`.
const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = std::str::from_utf8(data) {
        check_header(header);
    }
    let tags = tags_of(data);
    let header = encode(&tags);
    assert_eq!(
        parse_header(&header).expect("an encoded set parses"),
        tags,
        "{header:?}"
    );
});

fn check_header(header: &str) {
    let Ok(tags) = parse_header(header) else {
        assert!(from_header(Some(header)).is_err());
        return;
    };
    let again = encode(&tags);
    let back = parse_header(&again).expect("a re-encoded set parses");
    assert_eq!(back, tags, "{header:?} -> {again:?}");
    assert_eq!(
        from_header(Some(header)).is_ok(),
        validate(&tags, MAX_OBJECT_TAGS).is_ok()
    );
    if let Ok(valid) = from_header(Some(header)) {
        assert_eq!(valid, tags);
    }
}

/// The header form of a tag set. A tag with an empty key and value would
/// encode to an empty pair, which the parser skips, so it is written `=`.
fn encode(tags: &[Tag]) -> String {
    tags.iter()
        .map(|t| {
            format!(
                "{}={}",
                utf8_percent_encode(&t.key, FORM),
                utf8_percent_encode(&t.value, FORM)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A tag set from raw bytes: `\0` ends a tag, `\x01` splits key and value.
fn tags_of(data: &[u8]) -> Vec<Tag> {
    let text = String::from_utf8_lossy(data);
    text.split('\0')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let (k, v) = t.split_once('\x01').unwrap_or((t, ""));
            Tag {
                key: k.to_string(),
                value: v.to_string(),
            }
        })
        .collect()
}
