//! Tag rules, as AWS applies them, and the `x-amz-tagging` header of
//! PutObject, CopyObject and CreateMultipartUpload.
//!
//! Limits: at most 10 tags per object and 50 per bucket (more is
//! `InvalidTag`); keys 1..=128 characters, values 0..=256 characters
//! (counted in Unicode scalar values), keys unique, and the `aws:` key
//! prefix reserved (all `InvalidTag`).
//!
//! The header form is a URL query string (`k1=v1&k2=v2`, percent-encoded,
//! `+` meaning space).

use crate::request::error::{GwError, GwResult};
use laneway_store::Tag;
use percent_encoding::percent_decode_str;
use std::collections::HashSet;

/// Most tags on one object.
pub const MAX_OBJECT_TAGS: usize = 10;

/// Most tags on one bucket.
pub const MAX_BUCKET_TAGS: usize = 50;

const MAX_KEY_CHARS: usize = 128;

const MAX_VALUE_CHARS: usize = 256;

/// Parse the `x-amz-tagging` header.
pub fn parse_header(header: &str) -> GwResult<Vec<Tag>> {
    let mut tags = Vec::new();
    for pair in header.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        tags.push(Tag {
            key: form_decode(k)?,
            value: form_decode(v)?,
        });
    }
    Ok(tags)
}

fn form_decode(s: &str) -> GwResult<String> {
    let spaced = s.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| {
            GwError::InvalidArgument(
                "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters"
                    .into(),
            )
        })
}

/// Whether `key` has an allowed length for a tag key (1..=128 characters).
pub fn key_fits(key: &str) -> bool {
    (1..=MAX_KEY_CHARS).contains(&key.chars().count())
}

/// Whether `value` has an allowed length for a tag value (at most 256 characters).
pub fn value_fits(value: &str) -> bool {
    value.chars().count() <= MAX_VALUE_CHARS
}

/// Check a tag set against the limits (`max` tags).
pub fn validate(tags: &[Tag], max: usize) -> GwResult<()> {
    if tags.len() > max {
        return Err(GwError::TooManyTags(max));
    }
    let mut seen = HashSet::with_capacity(tags.len());
    for t in tags {
        if !key_fits(&t.key) {
            return Err(GwError::InvalidTag(
                "The TagKey you have provided is too long or empty".into(),
            ));
        }
        if !value_fits(&t.value) {
            return Err(GwError::InvalidTag(
                "The TagValue you have provided is too long".into(),
            ));
        }
        if t.key.starts_with("aws:") {
            return Err(GwError::InvalidTag(
                "Your TagKey cannot be prefixed with aws:".into(),
            ));
        }
        if !seen.insert(t.key.as_str()) {
            return Err(GwError::InvalidTag(
                "Cannot provide multiple Tags with the same key".into(),
            ));
        }
    }
    Ok(())
}

/// Tags of an object from the `x-amz-tagging` header (validated).
pub fn from_header(header: Option<&str>) -> GwResult<Vec<Tag>> {
    let tags = header.map(parse_header).transpose()?.unwrap_or_default();
    validate(&tags, MAX_OBJECT_TAGS)?;
    Ok(tags)
}

/// The `x-amz-tagging-count` of an object (None when untagged).
pub fn tag_count(tags: &[Tag]) -> Option<i32> {
    if tags.is_empty() {
        None
    } else {
        i32::try_from(tags.len()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(k: &str, v: &str) -> Tag {
        Tag {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn header_form_is_a_url_query_string() {
        assert_eq!(
            parse_header("a=1&b=two").expect("parse"),
            vec![tag("a", "1"), tag("b", "two")]
        );
        assert_eq!(
            parse_header("my%20key=a+b%26c&empty=&bare").expect("parse"),
            vec![tag("my key", "a b&c"), tag("empty", ""), tag("bare", "")]
        );
        assert_eq!(parse_header("").expect("parse"), vec![]);
        assert_eq!(
            parse_header("k=%E2%9C%93").expect("parse"),
            vec![tag("k", "✓")]
        );
        assert!(parse_header("k=%FF").is_err());
    }

    #[test]
    fn limits_are_enforced() {
        let ten: Vec<Tag> = (0..10).map(|i| tag(&format!("k{i}"), "v")).collect();
        assert!(validate(&ten, MAX_OBJECT_TAGS).is_ok());
        let eleven: Vec<Tag> = (0..11).map(|i| tag(&format!("k{i}"), "v")).collect();
        assert!(matches!(
            validate(&eleven, MAX_OBJECT_TAGS),
            Err(GwError::TooManyTags(10))
        ));
        assert!(validate(&eleven, MAX_BUCKET_TAGS).is_ok());

        assert!(validate(&[tag(&"k".repeat(128), &"v".repeat(256))], 10).is_ok());
        assert!(validate(&[tag(&"é".repeat(128), "")], 10).is_ok());
        for bad in [
            tag("", "v"),
            tag(&"k".repeat(129), "v"),
            tag("k", &"v".repeat(257)),
            tag("aws:x", "v"),
        ] {
            assert!(matches!(validate(&[bad], 10), Err(GwError::InvalidTag(_))));
        }
        assert!(matches!(
            validate(&[tag("a", "1"), tag("a", "2")], 10),
            Err(GwError::InvalidTag(_))
        ));
    }

    #[test]
    fn header_tags_are_validated() {
        assert!(matches!(
            from_header(Some("a=1&a=2")),
            Err(GwError::InvalidTag(_))
        ));
        assert_eq!(from_header(None).expect("none"), vec![]);
    }
}
