//! The tag filter of a listing: `x-laneway-tag-filter`, as a request header
//! or a query parameter.
//!
//! The form is that of `x-amz-tagging`, a URL query string:
//! `split=train&quality=good` asks for objects tagged with both;
//! `reviewed` alone (no `=`) asks for objects that have the tag `reviewed`
//! with any value; `note=` asks for the value "" exactly. As a query
//! parameter the whole string is percent-encoded once more, as any query
//! value is (`x-laneway-tag-filter=split%3Dtrain%26quality%3Dgood`). When
//! both are sent they must say the same thing.
//!
//! At most [`MAX_CONDITIONS`] conditions, each on a different key, with the
//! key and value limits of tags; anything else is `InvalidArgument`, so a
//! filter that could never match is refused rather than answered empty.

use crate::request::error::{GwError, GwResult};
use crate::request::tags;
use http::{HeaderMap, Uri};
use laneway_store::TagCond;
use percent_encoding::percent_decode_str;
use std::collections::HashSet;

/// Name of the header and of the query parameter.
pub const NAME: &str = "x-laneway-tag-filter";

/// Most conditions in one filter (an object has at most 10 tags).
pub const MAX_CONDITIONS: usize = 10;

fn invalid(msg: &str) -> GwError {
    GwError::InvalidArgument(format!("{NAME}: {msg}"))
}

/// The filter a request asks for (empty: none).
pub fn of_request(headers: &HeaderMap, uri: &Uri) -> GwResult<Vec<TagCond>> {
    let header = match headers.get(NAME) {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| invalid("the header must be URL-encoded ASCII"))?
                .to_string(),
        ),
        None => None,
    };
    let query = query_value(uri)?;
    let text = match (header, query) {
        (Some(h), Some(q)) => {
            let (a, b) = (parse(&h)?, parse(&q)?);
            if a != b {
                return Err(invalid("the header and the query parameter differ"));
            }
            return Ok(a);
        }
        (Some(t), None) | (None, Some(t)) => t,
        (None, None) => return Ok(Vec::new()),
    };
    parse(&text)
}

/// The query parameter's value, percent-decoded once.
fn query_value(uri: &Uri) -> GwResult<Option<String>> {
    let Some(q) = uri.query() else {
        return Ok(None);
    };
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == NAME {
            return decode(v).map(Some);
        }
    }
    Ok(None)
}

fn decode(s: &str) -> GwResult<String> {
    percent_decode_str(&s.replace('+', " "))
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| invalid("not UTF-8 once URL-decoded"))
}

/// Parse the filter text (`k=v&k2&k3=`).
pub fn parse(text: &str) -> GwResult<Vec<TagCond>> {
    let mut conds = Vec::new();
    let mut keys = HashSet::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let cond = match pair.split_once('=') {
            Some((k, v)) => TagCond {
                key: decode(k)?,
                value: Some(decode(v)?),
            },
            None => TagCond {
                key: decode(pair)?,
                value: None,
            },
        };
        check(&cond)?;
        if !keys.insert(cond.key.clone()) {
            return Err(invalid("a key appears twice"));
        }
        conds.push(cond);
    }
    if conds.len() > MAX_CONDITIONS {
        return Err(invalid("at most 10 conditions"));
    }
    Ok(conds)
}

/// Check one condition against the tag limits (shared with tagging jobs).
pub fn check(c: &TagCond) -> GwResult<()> {
    if !tags::key_fits(&c.key) {
        return Err(invalid("a tag key is empty or longer than 128 characters"));
    }
    if c.value.as_deref().is_some_and(|v| !tags::value_fits(v)) {
        return Err(invalid("a tag value is longer than 256 characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(k: &str, v: Option<&str>) -> TagCond {
        TagCond {
            key: k.into(),
            value: v.map(String::from),
        }
    }

    #[test]
    fn pairs_keys_and_empty_values() {
        assert_eq!(
            parse("split=train&reviewed&note=&a+b=c%26d").expect("parse"),
            vec![
                c("split", Some("train")),
                c("reviewed", None),
                c("note", Some("")),
                c("a b", Some("c&d")),
            ]
        );
        assert!(parse("").expect("empty").is_empty());
    }

    #[test]
    fn bad_filters_are_refused() {
        assert!(parse("=x").is_err());
        assert!(parse("a=1&a=2").is_err());
        assert!(parse(&"k".repeat(129)).is_err());
        assert!(parse(&format!("k={}", "v".repeat(257))).is_err());
        let many: Vec<String> = (0..11).map(|i| format!("k{i}")).collect();
        assert!(parse(&many.join("&")).is_err());
    }

    #[test]
    fn header_or_query_and_both_must_agree() {
        let uri: Uri = "/b?list-type=2&x-laneway-tag-filter=split%3Dtrain%26q"
            .parse()
            .expect("uri");
        let none = HeaderMap::new();
        let want = vec![c("split", Some("train")), c("q", None)];
        assert_eq!(of_request(&none, &uri).expect("query"), want);
        let mut h = HeaderMap::new();
        h.insert(NAME, "split=train&q".parse().expect("value"));
        let plain: Uri = "/b?list-type=2".parse().expect("uri");
        assert_eq!(of_request(&h, &plain).expect("header"), want);
        assert_eq!(of_request(&h, &uri).expect("both"), want);
        h.insert(NAME, "split=val".parse().expect("value"));
        assert!(of_request(&h, &uri).is_err());
        assert!(of_request(&none, &plain).expect("none").is_empty());
    }
}
