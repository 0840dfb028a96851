//! Just enough XML for the S3 responses the client reads.
//!
//! S3 answers are flat, attribute-free and never nest an element inside one
//! of the same name, so elements are found by their literal `<Tag>` and
//! `</Tag>` markers and their text is entity-decoded. This is far cheaper than
//! a general parser, which matters when LIST is measured at 150k keys/s with
//! the loader sharing two cores with the server.

use std::borrow::Cow;

/// One page of a ListObjectsV2 answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Object keys (`Contents/Key`), in listing order.
    pub keys: Vec<String>,
    /// Rolled-up prefixes (`CommonPrefixes/Prefix`), in listing order.
    pub prefixes: Vec<String>,
    /// Token for the next page, if the listing is truncated.
    pub next_token: Option<String>,
    /// Whether more results follow.
    pub is_truncated: bool,
}

/// Inner text of each `<tag>...</tag>` element in `xml`, raw (not decoded).
pub fn elements<'a>(xml: &'a str, tag: &str) -> impl Iterator<Item = &'a str> + 'a {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut rest = xml;
    std::iter::from_fn(move || next_between(&mut rest, &open, &close))
}

/// Text between the next `open` and the `close` after it, advancing `rest`
/// past `close`. Takes the markers whole so hot loops need not format them.
fn next_between<'a>(rest: &mut &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = rest.find(open)? + open.len();
    let len = rest[start..].find(close)?;
    let inner = &rest[start..start + len];
    *rest = &rest[start + len + close.len()..];
    Some(inner)
}

/// Decoded text of the first `<tag>` element inside `block`, given its
/// literal markers.
fn inner_text<'a>(block: &'a str, open: &str, close: &str) -> Option<Cow<'a, str>> {
    let mut rest = block;
    next_between(&mut rest, open, close).map(unescape)
}

/// Decoded texts of `<child>` inside each `<parent>` block, in order;
/// `None` if a block lacks its child.
fn child_texts(xml: &str, parent: &str, child: &str) -> Option<Vec<String>> {
    let (p_open, p_close) = (format!("<{parent}>"), format!("</{parent}>"));
    let (c_open, c_close) = (format!("<{child}>"), format!("</{child}>"));
    let mut rest = xml;
    let mut out = Vec::new();
    while let Some(block) = next_between(&mut rest, &p_open, &p_close) {
        out.push(inner_text(block, &c_open, &c_close)?.into_owned());
    }
    Some(out)
}

/// The `(Key, Value)` of each `<Tag>` of a GetObjectTagging answer.
pub fn parse_tag_set(xml: &str) -> Result<Vec<(String, String)>, String> {
    if !xml.contains("<Tagging") {
        return Err("not a Tagging document".to_owned());
    }
    let keys = child_texts(xml, "Tag", "Key").ok_or("a Tag without a Key")?;
    let values = child_texts(xml, "Tag", "Value").ok_or("a Tag without a Value")?;
    Ok(keys.into_iter().zip(values).collect())
}

/// Decoded text of the first `<tag>` element, if any.
pub fn first_text<'a>(xml: &'a str, tag: &str) -> Option<Cow<'a, str>> {
    elements(xml, tag).next().map(unescape)
}

/// Decodes the five predefined XML entities and numeric character
/// references; anything else is kept literally.
pub fn unescape(text: &str) -> Cow<'_, str> {
    if !text.contains('&') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        match rest
            .find(';')
            .and_then(|semi| Some((decode_entity(&rest[1..semi])?, semi)))
        {
            Some((ch, semi)) => {
                out.push(ch);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

fn decode_entity(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => {
            let num = name.strip_prefix('#')?;
            let code = match num.strip_prefix('x').or_else(|| num.strip_prefix('X')) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => num.parse().ok()?,
            };
            char::from_u32(code)
        }
    }
}

/// Parses a `ListBucketResult` (ListObjectsV2) body.
pub fn parse_list_v2(xml: &str) -> Result<ListPage, String> {
    if !xml.contains("<ListBucketResult") {
        return Err("no ListBucketResult element".to_owned());
    }
    let keys = child_texts(xml, "Contents", "Key").ok_or("Contents without Key")?;
    let prefixes =
        child_texts(xml, "CommonPrefixes", "Prefix").ok_or("CommonPrefixes without Prefix")?;
    let is_truncated = first_text(xml, "IsTruncated").is_some_and(|t| t.trim() == "true");
    let next_token = first_text(xml, "NextContinuationToken")
        .map(Cow::into_owned)
        .filter(|t| !t.is_empty());
    if is_truncated && next_token.is_none() {
        return Err("truncated listing without NextContinuationToken".to_owned());
    }
    Ok(ListPage {
        keys,
        prefixes,
        next_token,
        is_truncated,
    })
}

/// `(Code, Message)` of an S3 `<Error>` body; empty strings if absent.
pub fn parse_error(xml: &str) -> (String, String) {
    let text = |tag| {
        first_text(xml, tag)
            .map(Cow::into_owned)
            .unwrap_or_default()
    };
    (text("Code"), text("Message"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix>
<KeyCount>3</KeyCount><MaxKeys>3</MaxKeys><IsTruncated>true</IsTruncated>
<Contents><Key>p/a&amp;b</Key><Size>1</Size></Contents><Contents><Key>p/&#x3c;c&#62;</Key></Contents>
<CommonPrefixes><Prefix>p/d/</Prefix></CommonPrefixes>
<NextContinuationToken>tok+/=</NextContinuationToken></ListBucketResult>"#;

    #[test]
    fn parses_a_tag_set() {
        let xml = "<?xml version=\"1.0\"?><Tagging><TagSet><Tag><Key>a</Key><Value>1&amp;2</Value></Tag>\
                   <Tag><Key>b</Key><Value></Value></Tag></TagSet></Tagging>";
        let tags = parse_tag_set(xml).expect("parse");
        assert_eq!(
            tags,
            vec![("a".into(), "1&2".into()), ("b".into(), String::new())]
        );
        assert_eq!(parse_tag_set("<Tagging><TagSet/></Tagging>"), Ok(vec![]));
        assert!(parse_tag_set("<Error/>").is_err());
    }

    #[test]
    fn parses_a_page() {
        let page = parse_list_v2(PAGE).expect("parse");
        assert_eq!(page.keys, vec!["p/a&b", "p/<c>"]);
        assert_eq!(page.prefixes, vec!["p/d/"]);
        assert_eq!(page.next_token.as_deref(), Some("tok+/="));
        assert!(page.is_truncated);
    }

    #[test]
    fn rejects_truncated_without_token() {
        let xml = "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>";
        assert!(parse_list_v2(xml).is_err());
        assert!(parse_list_v2("<Error/>").is_err());
    }

    #[test]
    fn parses_errors_and_odd_entities() {
        let xml = "<Error><Code>NoSuchKey</Code><Message>a &bogus; b &#xZZ;</Message></Error>";
        let (code, message) = parse_error(xml);
        assert_eq!(code, "NoSuchKey");
        assert_eq!(message, "a &bogus; b &#xZZ;");
        assert_eq!(parse_error(""), (String::new(), String::new()));
    }
}
