//! Signing and checking store calls with the cluster secret.
//!
//! The string signed is `laneway-rpc-v1\n{method}\n{time_ms}\n{nonce}\n
//! {hex sha256 of the argument frame}`, with HMAC-SHA256 (ring). The
//! headers carry the time, the nonce, the arguments' hash and the hex
//! signature, so a node checks a call ([`Signer::verify`]) before it reads
//! a byte of its body: a stranger costs it one HMAC, never a buffer. Once
//! the arguments are read they must hash to the signed value
//! ([`Signature::covers`]). A call is accepted when its time is within
//! [`MAX_SKEW_MS`] of the node's clock and the signature verifies (ring
//! compares in constant time). The nonce
//! makes two calls with equal arguments in one millisecond sign
//! differently; replay within the window by someone who can read the
//! cluster network is not defended here (the cluster network is trusted
//! for privacy, not for authenticity; TLS on the RPC is future work).

use ring::digest::{SHA256, digest};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// Header: the caller's clock, ms since the Unix epoch.
pub const TIME_HEADER: &str = "x-laneway-rpc-time";
/// Header: 16 random bytes, hex.
pub const NONCE_HEADER: &str = "x-laneway-rpc-nonce";
/// Header: hex SHA-256 of the argument frame.
pub const ARGS_HEADER: &str = "x-laneway-rpc-args-sha256";
/// Header: the hex HMAC-SHA256.
pub const SIG_HEADER: &str = "x-laneway-rpc-signature";
/// Largest clock difference between caller and node that is accepted.
pub const MAX_SKEW_MS: i64 = 5 * 60 * 1000;

/// The three headers of a signed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// Caller's time, ms.
    pub time_ms: i64,
    /// Hex nonce.
    pub nonce: String,
    /// Hex SHA-256 of the argument frame.
    pub args_sha256: String,
    /// Hex HMAC.
    pub sig: String,
}

/// Why a call's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A header is missing or malformed.
    Malformed(&'static str),
    /// The time is too far from the node's clock.
    Skewed,
    /// The HMAC does not verify.
    BadSignature,
    /// The arguments read do not hash to the signed value.
    ArgsMismatch,
}

impl Signature {
    /// Check that `args` are the arguments this signature was made for.
    pub fn covers(&self, args: &[u8]) -> Result<(), Refusal> {
        if hash_hex(args) == self.args_sha256 {
            Ok(())
        } else {
            Err(Refusal::ArgsMismatch)
        }
    }
}

/// Signs and checks calls with one cluster secret.
#[derive(Clone)]
pub struct Signer {
    key: hmac::Key,
    rng: SystemRandom,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    /// A signer for `secret` (the cluster secret's bytes).
    pub fn new(secret: &[u8]) -> Signer {
        Signer {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            rng: SystemRandom::new(),
        }
    }

    /// Sign a call of `method` whose argument frame is `args`, at `now_ms`.
    pub fn sign(&self, method: &str, args: &[u8], now_ms: i64) -> Signature {
        let mut raw = [0u8; 16];
        // A failing OS generator leaves the nonce zero: it only varies
        // signatures, the HMAC key is what makes them unforgeable.
        let _ = self.rng.fill(&mut raw);
        let nonce = hex::encode(raw);
        let args_sha256 = hash_hex(args);
        let tag = hmac::sign(&self.key, &to_sign(method, now_ms, &nonce, &args_sha256));
        Signature {
            time_ms: now_ms,
            nonce,
            args_sha256,
            sig: hex::encode(tag.as_ref()),
        }
    }

    /// Check a call's signature headers against the node's clock `now_ms`
    /// (the arguments are checked later, with [`Signature::covers`]).
    pub fn verify(&self, method: &str, sig: &Signature, now_ms: i64) -> Result<(), Refusal> {
        if sig.nonce.len() != 32 || hex::decode(&sig.nonce).is_err() {
            return Err(Refusal::Malformed(NONCE_HEADER));
        }
        if (now_ms - sig.time_ms).abs() > MAX_SKEW_MS {
            return Err(Refusal::Skewed);
        }
        let tag = hex::decode(&sig.sig).map_err(|_| Refusal::Malformed(SIG_HEADER))?;
        let signed = to_sign(method, sig.time_ms, &sig.nonce, &sig.args_sha256);
        hmac::verify(&self.key, &signed, &tag).map_err(|_| Refusal::BadSignature)
    }
}

fn hash_hex(args: &[u8]) -> String {
    hex::encode(digest(&SHA256, args).as_ref())
}

fn to_sign(method: &str, time_ms: i64, nonce: &str, args_sha256: &str) -> Vec<u8> {
    format!("laneway-rpc-v1\n{method}\n{time_ms}\n{nonce}\n{args_sha256}").into_bytes()
}

/// Put a signature's headers on a request.
pub fn to_headers(sig: &Signature, h: &mut http::HeaderMap) {
    let mut put = |name: &'static str, value: &str| {
        if let Ok(v) = http::HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    };
    put(TIME_HEADER, &sig.time_ms.to_string());
    put(NONCE_HEADER, &sig.nonce);
    put(ARGS_HEADER, &sig.args_sha256);
    put(SIG_HEADER, &sig.sig);
}

/// Read the signature headers of a request.
pub fn from_headers(h: &http::HeaderMap) -> Result<Signature, Refusal> {
    let get = |name: &'static str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .ok_or(Refusal::Malformed(name))
    };
    Ok(Signature {
        time_ms: get(TIME_HEADER)?
            .parse()
            .map_err(|_| Refusal::Malformed(TIME_HEADER))?,
        nonce: get(NONCE_HEADER)?.to_string(),
        args_sha256: get(ARGS_HEADER)?.to_string(),
        sig: get(SIG_HEADER)?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_call_key_and_time() {
        let s = Signer::new(b"0123456789abcdef0123456789abcdef");
        let sig = s.sign("put", b"args", 1_000_000);
        assert_eq!(s.verify("put", &sig, 1_000_500), Ok(()));
        assert_eq!(sig.covers(b"args"), Ok(()));
        assert_eq!(sig.covers(b"argz"), Err(Refusal::ArgsMismatch));
        assert_eq!(s.verify("get", &sig, 1_000_500), Err(Refusal::BadSignature));
        let other = Signer::new(b"another secret of enough length!!");
        assert_eq!(
            other.verify("put", &sig, 1_000_500),
            Err(Refusal::BadSignature)
        );
        let late = 1_000_000 + MAX_SKEW_MS + 1;
        assert_eq!(s.verify("put", &sig, late), Err(Refusal::Skewed));
        for tamper in [0, 1] {
            let mut moved = sig.clone();
            if tamper == 0 {
                moved.time_ms += 1;
            } else {
                moved.args_sha256 = hash_hex(b"argz");
            }
            assert_eq!(
                s.verify("put", &moved, 1_000_500),
                Err(Refusal::BadSignature)
            );
        }
        let mut h = http::HeaderMap::new();
        to_headers(&sig, &mut h);
        assert_eq!(from_headers(&h), Ok(sig));
        assert_ne!(
            s.sign("put", b"args", 1).nonce,
            s.sign("put", b"args", 1).nonce
        );
    }

    #[test]
    fn malformed_headers_are_named() {
        let s = Signer::new(b"k");
        let mut sig = s.sign("m", b"", 0);
        sig.nonce = "zz".into();
        assert_eq!(
            s.verify("m", &sig, 0),
            Err(Refusal::Malformed(NONCE_HEADER))
        );
        assert_eq!(
            from_headers(&http::HeaderMap::new()),
            Err(Refusal::Malformed(TIME_HEADER))
        );
    }
}
