//! Fuzz target: ListObjectsV2 continuation tokens ([`token::decode`] /
//! [`token::encode`]) and v1 markers ([`token::from_marker`]).
//!
//! Input: a token; the same bytes are also read as a resume point and as a
//! marker. Checks: no panic; a token that decodes re-encodes to exactly
//! itself (base64url without padding has one spelling per byte string);
//! `decode(encode(r)) == r` for every resume point; a non-empty marker
//! comes back from `to_marker(from_marker(m))` unchanged.
#![no_main]

use laneway_gateway::request::token::{decode, encode, from_marker, to_marker};
use laneway_store::Resume;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(r) = decode(&text) {
        assert_ne!(r, Resume::Start);
        assert_eq!(encode(&r).as_deref(), Some(text.as_ref()));
    }
    // The bytes as a resume point: first byte picks the kind, the rest is
    // the key (a token is only ever made for a non-empty key).
    if let Some((kind, key)) = data.split_first() {
        let key = String::from_utf8_lossy(key).into_owned();
        if !key.is_empty() {
            let r = if kind & 1 == 0 {
                Resume::After(key)
            } else {
                Resume::PastPrefix(key)
            };
            let t = encode(&r).expect("a token");
            assert_eq!(decode(&t).expect("own token decodes"), r);
        }
    }
    check_marker(&text);
});

/// Marker, prefix and delimiter from the text split on `\n`.
fn check_marker(text: &str) {
    let mut parts = text.splitn(3, '\n');
    let marker = parts.next().unwrap_or("");
    let prefix = parts.next().unwrap_or("");
    let delimiter = parts.next();
    let r = from_marker(Some(marker), prefix, delimiter);
    if marker.is_empty() {
        assert_eq!(r, Resume::Start);
    } else {
        assert_eq!(to_marker(&r).as_deref(), Some(marker));
    }
}
