//! Conditional request headers: If-Match, If-None-Match, If-Modified-Since,
//! If-Unmodified-Since (GET, HEAD) and their x-amz-copy-source-if-*
//! counterparts (CopyObject).
//!
//! Evaluation follows RFC 9110 section 13.2.2, which is also what S3 does:
//! 1. If-Match present and false -> 412. (When If-Match is present,
//!    If-Unmodified-Since is not consulted: a matching ETag wins.)
//! 2. Else If-Unmodified-Since present and modified after it -> 412.
//! 3. If-None-Match present and true for the current ETag -> 304 on GET/HEAD.
//!    (When If-None-Match is present, If-Modified-Since is not consulted.)
//! 4. Else If-Modified-Since present and not modified after it -> 304.
//!
//! For CopyObject every failure is 412: the copy source is not being
//! fetched for the client, so "not modified" has no meaning there.
//! Times are compared in whole seconds, the resolution of HTTP dates.

use crate::request::meta::{ms_to_seconds, unix_seconds};
use s3s::dto::{ETagCondition, Timestamp};

/// The outcome of evaluating the conditions against an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Serve the request.
    Proceed,
    /// 304 Not Modified (GET/HEAD only).
    NotModified,
    /// 412 Precondition Failed.
    PreconditionFailed,
}

/// The conditional headers of one request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Conditions<'a> {
    /// If-Match / x-amz-copy-source-if-match.
    pub if_match: Option<&'a ETagCondition>,
    /// If-None-Match / x-amz-copy-source-if-none-match.
    pub if_none_match: Option<&'a ETagCondition>,
    /// If-Modified-Since / x-amz-copy-source-if-modified-since.
    pub if_modified_since: Option<&'a Timestamp>,
    /// If-Unmodified-Since / x-amz-copy-source-if-unmodified-since.
    pub if_unmodified_since: Option<&'a Timestamp>,
}

impl Conditions<'_> {
    /// Whether no condition was sent.
    pub fn is_empty(&self) -> bool {
        self.if_match.is_none()
            && self.if_none_match.is_none()
            && self.if_modified_since.is_none()
            && self.if_unmodified_since.is_none()
    }

    /// Evaluate for GET/HEAD against an object with `etag` (unquoted) and
    /// last-modified `mtime_ms`.
    pub fn evaluate(&self, etag: &str, mtime_ms: i64) -> Verdict {
        let modified = ms_to_seconds(mtime_ms);
        match self.if_match {
            Some(cond) if !etag_matches(cond, etag) => return Verdict::PreconditionFailed,
            Some(_) => {}
            None => {
                if self
                    .if_unmodified_since
                    .is_some_and(|t| modified > unix_seconds(t))
                {
                    return Verdict::PreconditionFailed;
                }
            }
        }
        match self.if_none_match {
            Some(cond) if etag_matches(cond, etag) => return Verdict::NotModified,
            Some(_) => {}
            None => {
                if self
                    .if_modified_since
                    .is_some_and(|t| modified <= unix_seconds(t))
                {
                    return Verdict::NotModified;
                }
            }
        }
        Verdict::Proceed
    }

    /// Evaluate for a copy source: any failure is 412.
    pub fn evaluate_copy_source(&self, etag: &str, mtime_ms: i64) -> Verdict {
        match self.evaluate(etag, mtime_ms) {
            Verdict::Proceed => Verdict::Proceed,
            Verdict::NotModified | Verdict::PreconditionFailed => Verdict::PreconditionFailed,
        }
    }
}

/// Whether a condition holds for `etag` (`*` matches any existing object;
/// weak and strong tags compare by value, as S3 does).
fn etag_matches(cond: &ETagCondition, etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::meta::timestamp;
    use s3s::dto::ETag;

    const ETAG: &str = "9e107d9d372bb6826bd81d3542a419d6";
    const MTIME_MS: i64 = 1_700_000_000_500;

    fn tag(v: &str) -> ETagCondition {
        ETagCondition::ETag(ETag::Strong(v.into()))
    }

    fn eval(c: Conditions<'_>) -> Verdict {
        c.evaluate(ETAG, MTIME_MS)
    }

    #[test]
    fn no_conditions_proceed() {
        assert_eq!(eval(Conditions::default()), Verdict::Proceed);
    }

    #[test]
    fn if_match() {
        let (good, bad, any) = (tag(ETAG), tag("other"), ETagCondition::Any);
        assert_eq!(
            eval(Conditions {
                if_match: Some(&good),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            eval(Conditions {
                if_match: Some(&any),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            eval(Conditions {
                if_match: Some(&bad),
                ..Default::default()
            }),
            Verdict::PreconditionFailed
        );
    }

    #[test]
    fn if_none_match() {
        let (good, bad, any) = (tag(ETAG), tag("other"), ETagCondition::Any);
        assert_eq!(
            eval(Conditions {
                if_none_match: Some(&good),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            eval(Conditions {
                if_none_match: Some(&any),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            eval(Conditions {
                if_none_match: Some(&bad),
                ..Default::default()
            }),
            Verdict::Proceed
        );
    }

    #[test]
    fn if_modified_since_compares_whole_seconds() {
        let same_second = timestamp(1_700_000_000_000);
        let before = timestamp(1_699_999_999_000);
        assert_eq!(
            eval(Conditions {
                if_modified_since: Some(&same_second),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            eval(Conditions {
                if_modified_since: Some(&before),
                ..Default::default()
            }),
            Verdict::Proceed
        );
    }

    #[test]
    fn if_unmodified_since() {
        let same_second = timestamp(1_700_000_000_000);
        let before = timestamp(1_699_999_999_000);
        assert_eq!(
            eval(Conditions {
                if_unmodified_since: Some(&same_second),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            eval(Conditions {
                if_unmodified_since: Some(&before),
                ..Default::default()
            }),
            Verdict::PreconditionFailed
        );
    }

    #[test]
    fn matching_etags_override_dates() {
        let before = timestamp(1_699_999_999_000);
        let later = timestamp(1_800_000_000_000);
        let (good, bad) = (tag(ETAG), tag("other"));
        // If-Match true wins over a failing If-Unmodified-Since.
        let c = Conditions {
            if_match: Some(&good),
            if_unmodified_since: Some(&before),
            ..Default::default()
        };
        assert_eq!(eval(c), Verdict::Proceed);
        // If-None-Match false (ETag differs) ignores If-Modified-Since.
        let c = Conditions {
            if_none_match: Some(&bad),
            if_modified_since: Some(&later),
            ..Default::default()
        };
        assert_eq!(eval(c), Verdict::Proceed);
        // If-Match failing beats If-None-Match.
        let c = Conditions {
            if_match: Some(&bad),
            if_none_match: Some(&good),
            ..Default::default()
        };
        assert_eq!(eval(c), Verdict::PreconditionFailed);
    }

    #[test]
    fn copy_source_failures_are_all_412() {
        let good = tag(ETAG);
        let c = Conditions {
            if_none_match: Some(&good),
            ..Default::default()
        };
        assert_eq!(
            c.evaluate_copy_source(ETAG, MTIME_MS),
            Verdict::PreconditionFailed
        );
        assert_eq!(
            Conditions::default().evaluate_copy_source(ETAG, MTIME_MS),
            Verdict::Proceed
        );
    }
}
