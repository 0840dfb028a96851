//! ListObjectsV2 continuation tokens and v1 markers.
//!
//! A continuation token is opaque to clients: base64url (no padding) of
//! `version byte | kind byte | key bytes`, where kind 0 resumes after a key
//! and kind 1 resumes past a rolled-up common prefix. The version byte lets
//! a later format coexist with tokens already handed out. A token that does
//! not decode exactly is `InvalidArgument`, never a panic or a silent
//! restart from the beginning.
//!
//! v1 markers, ListObjectVersions key markers and v2 start-after are plain
//! keys. When a delimiter is in use and the marker is itself a common prefix (it ends
//! with the delimiter right after the listing prefix, as a NextMarker we
//! returned for a rolled-up prefix does), the listing resumes past the
//! whole prefix, so the same common prefix is not returned twice.

use crate::request::error::{GwError, GwResult};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use laneway_store::Resume;

const TOKEN_V1: u8 = 1;
const KIND_AFTER: u8 = 0;
const KIND_PAST_PREFIX: u8 = 1;

/// The continuation token of `resume` (`None` for [`Resume::Start`], which
/// never needs one).
pub fn encode(resume: &Resume) -> Option<String> {
    let (kind, key) = match resume {
        Resume::Start => return None,
        Resume::After(k) => (KIND_AFTER, k),
        Resume::PastPrefix(p) => (KIND_PAST_PREFIX, p),
    };
    let mut raw = Vec::with_capacity(2 + key.len());
    raw.push(TOKEN_V1);
    raw.push(kind);
    raw.extend_from_slice(key.as_bytes());
    Some(URL_SAFE_NO_PAD.encode(raw))
}

fn garbled() -> GwError {
    GwError::InvalidArgument("The continuation token provided is incorrect".into())
}

/// Decode a continuation token.
pub fn decode(token: &str) -> GwResult<Resume> {
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| garbled())?;
    let [version, kind, key @ ..] = raw.as_slice() else {
        return Err(garbled());
    };
    if *version != TOKEN_V1 || key.is_empty() {
        return Err(garbled());
    }
    let key = String::from_utf8(key.to_vec()).map_err(|_| garbled())?;
    match *kind {
        KIND_AFTER => Ok(Resume::After(key)),
        KIND_PAST_PREFIX => Ok(Resume::PastPrefix(key)),
        _ => Err(garbled()),
    }
}

/// Where a v1 marker / key marker resumes (empty marker: from the start).
pub fn from_marker(marker: Option<&str>, prefix: &str, delimiter: Option<&str>) -> Resume {
    let Some(marker) = marker.filter(|m| !m.is_empty()) else {
        return Resume::Start;
    };
    if let Some(delim) = delimiter.filter(|d| !d.is_empty())
        && let Some(rest) = marker.strip_prefix(prefix)
        && rest.len() > delim.len()
        && rest.find(delim) == Some(rest.len() - delim.len())
    {
        return Resume::PastPrefix(marker.to_string());
    }
    Resume::After(marker.to_string())
}

/// The NextMarker of a v1 page that resumes at `next`.
pub fn to_marker(next: &Resume) -> Option<String> {
    match next {
        Resume::Start => None,
        Resume::After(k) | Resume::PastPrefix(k) => Some(k.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for r in [
            Resume::After("a".into()),
            Resume::After("dir/ünïcode key with spaces".into()),
            Resume::PastPrefix("photos/2024/".into()),
            Resume::After("k".repeat(1024)),
        ] {
            let t = encode(&r).expect("token");
            assert!(
                t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
            assert_eq!(decode(&t).expect("decode"), r);
        }
        assert_eq!(encode(&Resume::Start), None);
    }

    #[test]
    fn garbage_tokens_are_invalid_argument() {
        let wrong_version = URL_SAFE_NO_PAD.encode([9u8, 0, b'a']);
        let wrong_kind = URL_SAFE_NO_PAD.encode([1u8, 7, b'a']);
        let empty_key = URL_SAFE_NO_PAD.encode([1u8, 0]);
        let bad_utf8 = URL_SAFE_NO_PAD.encode([1u8, 0, 0xff, 0xfe]);
        for t in [
            "",
            "!!!",
            "a",
            "====",
            &wrong_version,
            &wrong_kind,
            &empty_key,
            &bad_utf8,
        ] {
            assert!(
                matches!(decode(t), Err(GwError::InvalidArgument(_))),
                "{t:?}"
            );
        }
    }

    #[test]
    fn markers_resume_after_keys_or_past_common_prefixes() {
        assert_eq!(from_marker(None, "", Some("/")), Resume::Start);
        assert_eq!(from_marker(Some(""), "", None), Resume::Start);
        assert_eq!(
            from_marker(Some("a/b"), "", None),
            Resume::After("a/b".into())
        );
        assert_eq!(
            from_marker(Some("a/"), "", None),
            Resume::After("a/".into())
        );
        assert_eq!(
            from_marker(Some("a/"), "", Some("/")),
            Resume::PastPrefix("a/".into())
        );
        assert_eq!(
            from_marker(Some("p/a/"), "p/", Some("/")),
            Resume::PastPrefix("p/a/".into())
        );
        // The prefix itself, or a key with a delimiter in the middle, is a key.
        assert_eq!(
            from_marker(Some("p/"), "p/", Some("/")),
            Resume::After("p/".into())
        );
        assert_eq!(
            from_marker(Some("a/b/c"), "", Some("/")),
            Resume::After("a/b/c".into())
        );
        assert_eq!(
            from_marker(Some("a/b/"), "", Some("/")),
            Resume::After("a/b/".into())
        );
        assert_eq!(
            to_marker(&Resume::PastPrefix("x/".into())),
            Some("x/".into())
        );
    }
}
