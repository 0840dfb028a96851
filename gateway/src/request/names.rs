//! Bucket-name, object-key and version-id rules, as AWS applies them, and
//! the percent-encoding of keys in responses ([`URL_ENCODE`]).
//!
//! [`valid_bucket_name`] is installed into s3s as its [`NameValidation`],
//! so a request naming an invalid bucket is refused with
//! `InvalidBucketName` while the path is parsed, before any handler runs;
//! CreateBucket checks again so the rule holds whatever s3s does.
//!
//! Rules (AWS general-purpose buckets): 3..=63 characters of lowercase
//! letters, digits, dots and hyphens; first and last character a letter or
//! digit; no two adjacent dots; not shaped like an IPv4 address; none of the
//! reserved prefixes (`xn--`, `sthree-`, `amzn-s3-demo-`) or suffixes
//! (`-s3alias`, `--ol-s3`, `.mrap`, `--x-s3`, `--table-s3`).

use crate::request::error::{GwError, GwResult};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
use s3s::validation::NameValidation;

/// Longest object key, in UTF-8 bytes.
pub const MAX_KEY_BYTES: usize = 1024;

const RESERVED_PREFIXES: [&str; 3] = ["xn--", "sthree-", "amzn-s3-demo-"];
const RESERVED_SUFFIXES: [&str; 5] = ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"];

/// Whether `name` is a valid bucket name.
pub fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    let allowed = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-';
    let edge_ok = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&b.len())
        && b.iter().all(allowed)
        && edge_ok(b.first())
        && edge_ok(b.last())
        && !name.contains("..")
        && !looks_like_ipv4(name)
        && !RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
        && !RESERVED_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// Four dot-separated groups of 1..=3 digits (AWS refuses even ones that
/// are not valid addresses, such as `999.1.1.1`).
fn looks_like_ipv4(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() == 4
        && parts
            .iter()
            .all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|c| c.is_ascii_digit()))
}

/// Refuse an invalid bucket name.
pub fn check_bucket_name(name: &str) -> GwResult<()> {
    if valid_bucket_name(name) {
        Ok(())
    } else {
        Err(GwError::InvalidBucketName)
    }
}

/// Refuse an empty or over-long object key.
pub fn check_key(key: &str) -> GwResult<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        Err(GwError::KeyTooLong)
    } else {
        Ok(())
    }
}

/// The bucket-name rules, as s3s's path validation.
#[derive(Debug, Clone, Copy, Default)]
pub struct BucketNames;

impl NameValidation for BucketNames {
    fn validate_bucket_name(&self, name: &str) -> bool {
        valid_bucket_name(name)
    }
}

/// Refuse version ids other than "null" (buckets are unversioned).
pub fn check_version_id(version_id: Option<&str>) -> GwResult<()> {
    match version_id {
        None | Some("null") => Ok(()),
        Some(_) => Err(GwError::InvalidArgument(
            "Invalid version id specified".into(),
        )),
    }
}

/// Characters escaped by `encoding-type=url` (and in Location URLs).
pub const URL_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for n in [
            "abc",
            "my-bucket",
            "my.bucket.name",
            "a1b2c3",
            "123",
            &"a".repeat(63),
        ] {
            assert!(valid_bucket_name(n), "{n}");
        }
    }

    #[test]
    fn refuses_bad_lengths_and_characters() {
        for n in [
            "",
            "ab",
            &"a".repeat(64),
            "MyBucket",
            "my_bucket",
            "my bucket",
            "bücket",
        ] {
            assert!(!valid_bucket_name(n), "{n}");
        }
    }

    #[test]
    fn refuses_bad_edges_and_double_dots() {
        for n in ["-abc", "abc-", ".abc", "abc.", "a..b"] {
            assert!(!valid_bucket_name(n), "{n}");
        }
    }

    #[test]
    fn refuses_ip_like_and_reserved_names() {
        for n in [
            "192.168.5.4",
            "999.1.1.1",
            "xn--abc",
            "sthree-x",
            "foo-s3alias",
            "foo--ol-s3",
        ] {
            assert!(!valid_bucket_name(n), "{n}");
        }
        assert!(valid_bucket_name("1.2.3"));
        assert!(valid_bucket_name("1.2.3.4.5"));
    }

    #[test]
    fn keys_must_be_1_to_1024_bytes() {
        assert!(check_key("").is_err());
        assert!(check_key("a").is_ok());
        assert!(check_key(&"k".repeat(1024)).is_ok());
        assert!(check_key(&"k".repeat(1025)).is_err());
        // 1024 bytes of 2-byte characters is 512 characters.
        assert!(check_key(&"é".repeat(512)).is_ok());
        assert!(check_key(&"é".repeat(513)).is_err());
    }
}
