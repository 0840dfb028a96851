//! The gate in front of s3s for browser-form uploads (PostObject): the
//! form's signature is checked before a byte of its file is buffered.
//!
//! s3s 0.14.1 reads a form's fields, then reads the whole `file` part
//! into memory before any handler or access check runs; a form with no
//! signature is only refused by the access check, after its file was
//! read. So an anonymous client could make every connection hold up to
//! [`crate::s3::post::MAX_POST_FILE_BYTES`]. This gate, run by `serve` before
//! the lanes and s3s:
//!
//! 1. reads the fields that come before the `file` part, at most
//!    [`MAX_FORM_FIELDS_BYTES`] (AWS's `MaxPostPreDataLengthExceededError`
//!    beyond), within the header timeout (`RequestTimeout`);
//! 2. refuses a form without a signature (`AccessDenied`), with an unknown
//!    access key (`InvalidAccessKeyId`), a signature that does not match
//!    the policy (`SignatureDoesNotMatch`, SigV4 or SigV2, as s3s computes
//!    them) or an expired policy (`AccessDenied` "Invalid according to
//!    Policy: Policy expired.");
//! 3. takes the file's share of a memory budget ([`FORM_BUDGET_BYTES`]):
//!    the policy's `content-length-range` maximum, capped at the file
//!    limit, waiting at most [`BUDGET_WAIT`] (`503 SlowDown` after);
//! 4. hands the fields it read back to the body ([`Watched::replay`]) and
//!    lets s3s parse the form and check the rest of the policy as before.
//!
//! The budget's permit is held until the response is produced (s3s has
//! read and the handler stored the file). Only clients holding a valid
//! key get there, and a client that stops sending its file is cut off by
//! the stall timeout ([`crate::server::unread`]). s3s checks the signature again;
//! a form this parser and s3s's read differently is refused by s3s, never
//! buffered unchecked.

use crate::request::auth::KeyCache;
use crate::request::error::GwError;
use crate::server::unread::Watched;
use bytes::BytesMut;
use http_body_util::BodyExt;
use ring::hmac;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most bytes of form fields (and the file part's header) read before the
/// file. AWS limits a form's fields to 20 KB; s3s is told the same limit.
pub const MAX_FORM_FIELDS_BYTES: usize = 64 * 1024;

/// Memory all form uploads being buffered may take at once: four files of
/// the largest size.
pub const FORM_BUDGET_BYTES: u64 = 4 * crate::s3::post::MAX_POST_FILE_BYTES;

/// Longest a verified form waits for its share of the budget.
pub const BUDGET_WAIT: Duration = Duration::from_secs(10);

/// Budget units: KiB, so the whole budget fits a semaphore's u32.
const UNIT: u64 = 1024;

/// Checks browser-form uploads before their files are read.
pub struct FormGate {
    keys: Arc<KeyCache>,
    budget: Arc<Semaphore>,
    fields_timeout: Duration,
}

/// A form field (name lower-cased, as s3s does).
type Fields = Vec<(String, String)>;

/// The secret of an access key, if the key exists.
type Secrets<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// What the bytes read so far hold.
#[derive(Debug, PartialEq, Eq)]
enum Prefix {
    /// Every field, and where the file part's content begins.
    Complete { fields: Fields, file_at: usize },
    /// The fields go on past these bytes.
    NeedMore,
    /// The form ended without a `file` part.
    NoFile,
    /// Not multipart/form-data.
    Invalid(&'static str),
}

impl FormGate {
    /// A gate over `keys` that reads fields within `fields_timeout`.
    pub fn new(keys: Arc<KeyCache>, fields_timeout: Duration) -> FormGate {
        let units = usize::try_from(FORM_BUDGET_BYTES / UNIT).unwrap_or(usize::MAX);
        FormGate {
            keys,
            budget: Arc::new(Semaphore::new(units.min(Semaphore::MAX_PERMITS))),
            fields_timeout,
        }
    }

    /// Read and check the fields of the form upload `req`, then reserve
    /// its file's memory; the fields are put back into the body.
    pub async fn admit(
        &self,
        req: &mut http::Request<Watched>,
    ) -> Result<OwnedSemaphorePermit, GwError> {
        let boundary = boundary(req.headers()).ok_or(GwError::MalformedPost("no boundary"))?;
        let body = req.body_mut();
        let (head, fields) =
            tokio::time::timeout(self.fields_timeout, read_fields(body, boundary.as_bytes()))
                .await
                .map_err(|_| GwError::RequestTimeout)??;
        let secret = |ak: &str| self.keys.get(ak).map(|g| g.secret.expose().to_string());
        let max_file = verify(&fields, &secret, time::OffsetDateTime::now_utc())?;
        let bytes = max_file.saturating_add(u64::try_from(head).unwrap_or(u64::MAX));
        let units = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX);
        let wanted = self.budget.clone().acquire_many_owned(units);
        match tokio::time::timeout(BUDGET_WAIT, wanted).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(GwError::SlowDown("too many form uploads at once")),
        }
    }
}

/// The `boundary` parameter of a multipart/form-data Content-Type.
fn boundary(headers: &http::HeaderMap) -> Option<String> {
    let ct = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    let value = ct.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("boundary").then(|| v.trim())
    })?;
    let value = value.trim_matches('"');
    (!value.is_empty() && value.len() <= 200).then(|| value.to_string())
}

/// Read `body` until its fields are complete; the fields are replayed
/// into it (the fields' bytes as one frame, what follows as another, so
/// s3s's own field limit sees only the fields). The length of the fields'
/// bytes, and the fields.
async fn read_fields(body: &mut Watched, boundary: &[u8]) -> Result<(usize, Fields), GwError> {
    let mut buf = BytesMut::new();
    loop {
        let ended = match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
                false
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "form upload's body failed");
                return Err(GwError::IncompleteBody);
            }
            None => true,
        };
        match parse_prefix(&buf, boundary) {
            Prefix::Complete { fields, file_at } => {
                if file_at > MAX_FORM_FIELDS_BYTES {
                    return Err(GwError::PostFieldsTooLarge);
                }
                let mut all = buf.freeze();
                let rest = all.split_off(file_at);
                body.replay(all);
                body.replay(rest);
                return Ok((file_at, fields));
            }
            Prefix::NeedMore if buf.len() > MAX_FORM_FIELDS_BYTES => {
                return Err(GwError::PostFieldsTooLarge);
            }
            Prefix::NeedMore if ended => return Err(GwError::MalformedPost("it ends early")),
            Prefix::NeedMore => {}
            Prefix::NoFile => return Err(GwError::PostFileMissing),
            Prefix::Invalid(why) => return Err(GwError::MalformedPost(why)),
        }
    }
}

/// Find `needle` in `hay` from `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// Parse the fields before the `file` part of a multipart/form-data body
/// whose first bytes are `buf`.
fn parse_prefix(buf: &[u8], boundary: &[u8]) -> Prefix {
    let delimiter = [b"--".as_slice(), boundary].concat();
    let start = usize::from(buf.starts_with(b"\r\n")) * 2;
    let first = [delimiter.as_slice(), b"\r\n"].concat();
    let Some(opening) = buf.get(start..start + first.len()) else {
        return Prefix::NeedMore;
    };
    if opening != first.as_slice() {
        return Prefix::Invalid("it does not begin with the boundary");
    }
    let next = [b"\r\n".as_slice(), &delimiter].concat();
    let mut pos = start + first.len();
    let mut fields = Fields::new();
    loop {
        let Some(head_end) = find(buf, b"\r\n\r\n", pos) else {
            return Prefix::NeedMore;
        };
        let Some(name) = part_name(&buf[pos..head_end]) else {
            return Prefix::Invalid("a part has no form-data name");
        };
        let content = head_end + 4;
        if name.eq_ignore_ascii_case("file") {
            return Prefix::Complete {
                fields,
                file_at: content,
            };
        }
        let Some(end) = find(buf, &next, content) else {
            return Prefix::NeedMore;
        };
        let Ok(value) = std::str::from_utf8(&buf[content..end]) else {
            return Prefix::Invalid("a field is not UTF-8");
        };
        fields.push((name.to_ascii_lowercase(), value.to_string()));
        let after = end + next.len();
        match buf.get(after..after + 2) {
            None => return Prefix::NeedMore,
            Some(b"--") => return Prefix::NoFile,
            Some(b"\r\n") => pos = after + 2,
            Some(_) => return Prefix::Invalid("a boundary is followed by garbage"),
        }
    }
}

/// The `name` of a part's `Content-Disposition: form-data` header.
fn part_name(head: &[u8]) -> Option<String> {
    let head = std::str::from_utf8(head).ok()?;
    let disposition = head.split("\r\n").find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-disposition")
            .then_some(v)
    })?;
    disposition.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("name")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn required<'a>(fields: &'a Fields, name: &str) -> Result<&'a str, GwError> {
    field(fields, name).ok_or_else(|| {
        GwError::InvalidArgument(format!("Bucket POST must contain a field named '{name}'."))
    })
}

/// Check the form's signature and policy expiry at `now`; the most file
/// bytes the policy lets s3s buffer.
fn verify(fields: &Fields, keys: &Secrets<'_>, now: time::OffsetDateTime) -> Result<u64, GwError> {
    let policy = if let Some(sig) = field(fields, "x-amz-signature") {
        let policy = required(fields, "policy")?;
        verify_v4(fields, keys, policy, sig)?;
        policy
    } else if let Some(sig) = field(fields, "signature") {
        let policy = required(fields, "policy")?;
        let access_key = required(fields, "awsaccesskeyid")?;
        let secret = secret_of(keys, access_key)?;
        let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
        check(&key, policy, base64_decode(sig))?;
        policy
    } else {
        return Err(GwError::AccessDenied);
    };
    let limit = crate::s3::post::MAX_POST_FILE_BYTES;
    // A policy s3s cannot parse is refused by s3s (InvalidPolicyDocument)
    // before it reads the file; it may take the largest share meanwhile.
    let Ok(policy) = s3s::post_policy::PostPolicy::from_base64(policy) else {
        return Ok(limit);
    };
    let expires: time::OffsetDateTime = policy.expiration.clone().into();
    if now >= expires {
        return Err(GwError::PolicyViolation("Policy expired.".into()));
    }
    Ok(policy
        .content_length_range()
        .map_or(limit, |(_, max)| max.min(limit)))
}

fn secret_of(keys: &Secrets<'_>, access_key: &str) -> Result<String, GwError> {
    keys(access_key).ok_or(GwError::InvalidAccessKeyId)
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// Whether `given` is the HMAC of `policy` under `key` (constant time).
fn check(key: &hmac::Key, policy: &str, given: Option<Vec<u8>>) -> Result<(), GwError> {
    let given = given.ok_or(GwError::SignatureDoesNotMatch)?;
    hmac::verify(key, policy.as_bytes(), &given).map_err(|_| GwError::SignatureDoesNotMatch)
}

/// SigV4 of a POST policy: the policy (base64, as sent) signed with the
/// key derived for the credential's date, region and service.
fn verify_v4(fields: &Fields, keys: &Secrets<'_>, policy: &str, sig: &str) -> Result<(), GwError> {
    let credential = required(fields, "x-amz-credential")?;
    let parts: Vec<&str> = credential.split('/').collect();
    let [access_key, date, region, service, "aws4_request"] = parts.as_slice() else {
        return Err(GwError::InvalidArgument(
            "Invalid field: x-amz-credential".into(),
        ));
    };
    let secret = secret_of(keys, access_key)?;
    let mut signing = format!("AWS4{secret}").into_bytes();
    for step in [*date, *region, *service, "aws4_request"] {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &signing);
        signing = hmac::sign(&key, step.as_bytes()).as_ref().to_vec();
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, &signing);
    check(&key, policy, hex::decode(sig).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn form(parts: &[(&str, &str)], file: &str) -> Vec<u8> {
        let mut out = String::new();
        for (name, value) in parts {
            out.push_str(&format!(
                "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            ));
        }
        out.push_str(&format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n{file}\r\n--XyZ--\r\n"
        ));
        out.into_bytes()
    }

    fn fields(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn fields_before_the_file_are_parsed() {
        let body = form(&[("Key", "a/b"), ("policy", "cG9s")], "FILE BYTES");
        let Prefix::Complete { fields, file_at } = parse_prefix(&body, b"XyZ") else {
            panic!("not complete");
        };
        assert_eq!(fields, self::fields(&[("key", "a/b"), ("policy", "cG9s")]));
        assert!(body[file_at..].starts_with(b"FILE BYTES"));
    }

    #[test]
    fn partial_bodies_need_more_and_garbage_is_invalid() {
        let body = form(&[("key", "k")], "x");
        for cut in [0, 5, 30, 50] {
            assert_eq!(
                parse_prefix(&body[..cut], b"XyZ"),
                Prefix::NeedMore,
                "{cut}"
            );
        }
        assert!(matches!(
            parse_prefix(b"hello world\r\n", b"XyZ"),
            Prefix::Invalid(_)
        ));
        let no_file =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--XyZ--\r\n";
        assert_eq!(parse_prefix(no_file, b"XyZ"), Prefix::NoFile);
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("multipart/form-data; boundary=\"XyZ\""),
        );
        assert_eq!(boundary(&headers).as_deref(), Some("XyZ"));
    }

    fn policy(expiration: &str, max: u64) -> String {
        let json = format!(
            "{{\"expiration\":\"{expiration}\",\"conditions\":[[\"content-length-range\",0,{max}]]}}"
        );
        base64::engine::general_purpose::STANDARD.encode(json)
    }

    fn v2(secret: &str, policy: &str) -> String {
        let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
        base64::engine::general_purpose::STANDARD.encode(hmac::sign(&key, policy.as_bytes()))
    }

    #[test]
    fn unsigned_unknown_forged_and_expired_forms_are_refused() {
        let secrets = |ak: &str| (ak == "AK").then(|| "sekrit".to_string());
        let now = time::macros::datetime!(2030-01-01 0:00 UTC);
        let fresh = policy("2031-01-01T00:00:00.000Z", 1000);
        let stale = policy("2029-01-01T00:00:00.000Z", 1000);
        let refused = |f: &[(&str, &str)]| verify(&fields(f), &secrets, now).err();
        assert!(matches!(
            refused(&[("key", "k")]),
            Some(GwError::AccessDenied)
        ));
        let sig = v2("sekrit", &fresh);
        let signed = [
            ("awsaccesskeyid", "AK"),
            ("policy", fresh.as_str()),
            ("signature", sig.as_str()),
        ];
        assert_eq!(verify(&fields(&signed), &secrets, now).ok(), Some(1000));
        let unknown = [
            ("awsaccesskeyid", "NOPE"),
            ("policy", fresh.as_str()),
            ("signature", sig.as_str()),
        ];
        assert!(matches!(
            refused(&unknown),
            Some(GwError::InvalidAccessKeyId)
        ));
        let forged = [
            ("awsaccesskeyid", "AK"),
            ("policy", stale.as_str()),
            ("signature", sig.as_str()),
        ];
        assert!(matches!(
            refused(&forged),
            Some(GwError::SignatureDoesNotMatch)
        ));
        let stale_sig = v2("sekrit", &stale);
        let expired = [
            ("awsaccesskeyid", "AK"),
            ("policy", stale.as_str()),
            ("signature", stale_sig.as_str()),
        ];
        assert!(matches!(
            refused(&expired),
            Some(GwError::PolicyViolation(_))
        ));
        let no_policy = [("x-amz-signature", "00")];
        assert!(matches!(
            refused(&no_policy),
            Some(GwError::InvalidArgument(_))
        ));
        let bad_cred = [
            ("x-amz-signature", "00"),
            ("policy", fresh.as_str()),
            ("x-amz-credential", "AK/x"),
        ];
        assert!(matches!(
            refused(&bad_cred),
            Some(GwError::InvalidArgument(_))
        ));
    }
}
