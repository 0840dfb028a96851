//! Access key and secret generation and validation.
//!
//! Generated access key ids are `LW` followed by 18 characters from
//! `A-Z0-9` (20 in all, the shape AWS tools expect); secrets are 30 random
//! bytes in standard base64, exactly 40 characters. Randomness comes from
//! ring's `SystemRandom` (the OS CSPRNG). Characters of the access key are
//! drawn by rejection sampling so every symbol is equally likely.
//!
//! Operator-supplied keys are checked so that they survive SigV4: an access
//! key id appears inside the `Credential=` scope, where `/`, `,`, `=` and
//! spaces would break parsing.

use crate::TenancyError;
use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};

/// Length of a generated access key id.
pub const ACCESS_KEY_LEN: usize = 20;
/// Prefix of every generated access key id.
pub const ACCESS_KEY_PREFIX: &str = "LW";
/// Length of a generated secret key.
pub const SECRET_KEY_LEN: usize = 40;

const ALPHABET: &[u8; 36] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/// Largest multiple of 36 that fits in a byte: bytes at or above it are
/// rejected so that `byte % 36` is uniform.
const REJECT_AT: u8 = 252;

/// A fresh random access key id (`LW` + 18 of `A-Z0-9`).
pub fn new_access_key(rng: &SystemRandom) -> Result<String, TenancyError> {
    let mut out = String::with_capacity(ACCESS_KEY_LEN);
    out.push_str(ACCESS_KEY_PREFIX);
    let mut buf = [0u8; 32];
    while out.len() < ACCESS_KEY_LEN {
        rng.fill(&mut buf).map_err(|_| TenancyError::Random)?;
        for b in buf {
            if out.len() == ACCESS_KEY_LEN {
                break;
            }
            if b < REJECT_AT {
                out.push(char::from(ALPHABET[usize::from(b % 36)]));
            }
        }
    }
    Ok(out)
}

/// A fresh random secret key (40 characters of standard base64).
pub fn new_secret_key(rng: &SystemRandom) -> Result<String, TenancyError> {
    let mut raw = [0u8; 30];
    rng.fill(&mut raw).map_err(|_| TenancyError::Random)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(raw))
}

/// Check an operator-supplied access key id: 3..=128 ASCII letters/digits.
pub fn validate_access_key(key: &str) -> Result<(), TenancyError> {
    let ok_len = (3..=128).contains(&key.len());
    if ok_len && key.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err(TenancyError::InvalidKey(
            "access key id must be 3 to 128 ASCII letters or digits".into(),
        ))
    }
}

/// Check an operator-supplied secret: 8..=128 printable ASCII, no spaces.
pub fn validate_secret_key(secret: &str) -> Result<(), TenancyError> {
    let ok_len = (8..=128).contains(&secret.len());
    if ok_len && secret.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(TenancyError::InvalidKey(
            "secret key must be 8 to 128 printable ASCII characters without spaces".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_access_keys_have_the_documented_shape() {
        let rng = SystemRandom::new();
        for _ in 0..100 {
            let k = new_access_key(&rng).expect("random");
            assert_eq!(k.len(), ACCESS_KEY_LEN);
            assert!(k.starts_with(ACCESS_KEY_PREFIX));
            assert!(
                k.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            );
            validate_access_key(&k).expect("own keys validate");
        }
    }

    #[test]
    fn generated_secrets_have_the_documented_shape() {
        let rng = SystemRandom::new();
        let a = new_secret_key(&rng).expect("random");
        let b = new_secret_key(&rng).expect("random");
        assert_eq!(a.len(), SECRET_KEY_LEN);
        assert_ne!(a, b);
        validate_secret_key(&a).expect("own secrets validate");
    }

    #[test]
    fn operator_keys_that_would_break_sigv4_are_refused() {
        assert!(validate_access_key("AB").is_err());
        assert!(validate_access_key("AKIA/EXAMPLE").is_err());
        assert!(validate_access_key("has space").is_err());
        assert!(validate_access_key("AKIAIOSFODNN7EXAMPLE").is_ok());
        assert!(validate_secret_key("short").is_err());
        assert!(validate_secret_key("with space inside").is_err());
        assert!(validate_secret_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY").is_ok());
    }
}
