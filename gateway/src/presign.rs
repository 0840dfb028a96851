//! Limits of presigned URLs (SigV4 query authentication) that s3s does not
//! enforce itself: AWS refuses an `X-Amz-Expires` above seven days
//! (604,800 s) with `400 AuthorizationQueryParametersError`, whatever the
//! signature says. s3s checks the signature and the expiry time itself
//! (an expired URL is `403 AccessDenied`); this check runs in the access
//! step, after the signature verified, so it only ever speaks to a caller
//! who holds the key.

use crate::error::{GwError, GwResult};

/// Longest validity of a presigned URL, in seconds (seven days).
pub const MAX_EXPIRES_SECS: u64 = 7 * 24 * 3600;

/// Refuse a presigned URL valid for longer than [`MAX_EXPIRES_SECS`].
pub fn check_expiry(query: Option<&str>) -> GwResult<()> {
    let Some(query) = query else {
        return Ok(());
    };
    let expires = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| k.eq_ignore_ascii_case("X-Amz-Expires"))
        .map(|(_, v)| v);
    match expires.map(str::parse::<u64>) {
        None => Ok(()),
        Some(Ok(secs)) if secs <= MAX_EXPIRES_SECS => Ok(()),
        Some(_) => Err(GwError::AuthorizationQueryParameters(format!(
            "X-Amz-Expires must be less than a week (in seconds) that is {MAX_EXPIRES_SECS}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_at_most_a_week() {
        assert!(check_expiry(None).is_ok());
        assert!(check_expiry(Some("list-type=2")).is_ok());
        assert!(check_expiry(Some("X-Amz-Algorithm=AWS4&X-Amz-Expires=604800")).is_ok());
        for bad in [
            "X-Amz-Expires=604801",
            "X-Amz-Expires=-1",
            "X-Amz-Expires=abc",
        ] {
            assert!(
                matches!(
                    check_expiry(Some(bad)),
                    Err(GwError::AuthorizationQueryParameters(_))
                ),
                "{bad}"
            );
        }
    }
}
