//! Secrets at rest: AES-256-GCM (ring AEAD) under a master key.
//!
//! The master key is 32 bytes, taken from `LANEWAY_MASTER_KEY` (standard
//! base64) when the operator sets it, else from `<data-dir>/tenancy/
//! master.key` (base64 text, mode 0600), created on first start. Keeping
//! it outside the data directory (the environment, a secrets manager) means
//! a copy of the data directory alone reveals no secret.
//!
//! A sealed secret is `base64(nonce (12 bytes) || ciphertext || tag)`, with
//! a fresh random nonce per seal and the access key id as associated data,
//! so a sealed secret cannot be moved to another key's record. Opening
//! with the wrong master key fails cleanly (Corrupt), never panics.

use crate::persist::{create_private_dir, write_private_file};
use crate::{Secret, TenancyError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use std::path::Path;

/// Environment variable that supplies the master key.
pub const MASTER_KEY_ENV: &str = "LANEWAY_MASTER_KEY";

/// The key that seals secrets at rest.
pub struct MasterKey {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey([redacted])")
    }
}

impl MasterKey {
    /// A master key from 32 raw bytes.
    pub fn from_bytes(raw: &[u8]) -> Result<MasterKey, TenancyError> {
        let unbound = UnboundKey::new(&AES_256_GCM, raw)
            .map_err(|_| TenancyError::InvalidKey("the master key must be 32 bytes".into()))?;
        Ok(MasterKey {
            key: LessSafeKey::new(unbound),
            rng: SystemRandom::new(),
        })
    }

    /// A master key from its base64 text (the env var / file format).
    pub fn from_base64(text: &str) -> Result<MasterKey, TenancyError> {
        let raw = STANDARD.decode(text.trim()).map_err(|_| {
            TenancyError::InvalidKey("the master key must be standard base64 of 32 bytes".into())
        })?;
        MasterKey::from_bytes(&raw)
    }

    /// The master key for `tenancy_dir`: from `env` (the value of
    /// [`MASTER_KEY_ENV`]) when given, else the key file, created (random,
    /// mode 0600) when missing.
    pub fn load(tenancy_dir: &Path, env: Option<&str>) -> Result<MasterKey, TenancyError> {
        if let Some(text) = env.filter(|t| !t.trim().is_empty()) {
            return MasterKey::from_base64(text);
        }
        let path = tenancy_dir.join("master.key");
        match std::fs::read_to_string(&path) {
            Ok(text) => MasterKey::from_base64(&text).map_err(|_| {
                TenancyError::Corrupt(format!("{} is not a master key", path.display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let rng = SystemRandom::new();
                let mut raw = [0u8; 32];
                rng.fill(&mut raw).map_err(|_| TenancyError::Random)?;
                create_private_dir(tenancy_dir)?;
                write_private_file(&path, STANDARD.encode(raw).as_bytes())?;
                MasterKey::from_bytes(&raw)
            }
            Err(source) => Err(TenancyError::Io {
                what: format!("reading {}", path.display()),
                source,
            }),
        }
    }

    /// Seal `secret` of `access_key`.
    pub fn seal(&self, access_key: &str, secret: &Secret) -> Result<String, TenancyError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| TenancyError::Random)?;
        let mut buf = secret.expose().as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(access_key.as_bytes()),
                &mut buf,
            )
            .map_err(|_| TenancyError::Corrupt("sealing a secret failed".into()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        Ok(STANDARD.encode(out))
    }

    /// Open a sealed secret of `access_key`.
    pub fn open(&self, access_key: &str, sealed: &str) -> Result<Secret, TenancyError> {
        let bad = || {
            TenancyError::Corrupt(format!(
                "the secret of {access_key} cannot be decrypted (wrong master key?)"
            ))
        };
        let raw = STANDARD.decode(sealed).map_err(|_| bad())?;
        if raw.len() < NONCE_LEN {
            return Err(bad());
        }
        let (nonce, rest) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| bad())?;
        let mut buf = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(access_key.as_bytes()), &mut buf)
            .map_err(|_| bad())?;
        let text = String::from_utf8(plain.to_vec()).map_err(|_| bad())?;
        Ok(Secret::new(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_binding() {
        let k = MasterKey::from_bytes(&[7u8; 32]).expect("key");
        let s = Secret::new("wJalrXUtnFEMI/K7MDENG".into());
        let sealed = k.seal("AK1", &s).expect("seal");
        assert!(!sealed.contains("wJalr"));
        assert_eq!(k.open("AK1", &sealed).expect("open"), s);
        assert!(k.open("AK2", &sealed).is_err(), "bound to its key id");
        let other = MasterKey::from_bytes(&[8u8; 32]).expect("key");
        assert!(other.open("AK1", &sealed).is_err());
        assert!(k.open("AK1", "!!").is_err());
        assert!(k.open("AK1", "AAAA").is_err());
    }

    #[test]
    fn key_file_is_created_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let t = dir.path().join("tenancy");
        let a = MasterKey::load(&t, None).expect("create");
        let mode = std::fs::metadata(t.join("master.key"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let sealed = a.seal("AK", &Secret::new("s".into())).expect("seal");
        let b = MasterKey::load(&t, None).expect("reuse");
        assert_eq!(b.open("AK", &sealed).expect("open").expose(), "s");
        let env = STANDARD.encode([1u8; 32]);
        let c = MasterKey::load(&t, Some(&env)).expect("env");
        assert!(c.open("AK", &sealed).is_err(), "env key wins");
        assert!(MasterKey::load(&t, Some("short")).is_err());
    }
}
