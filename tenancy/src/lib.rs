//! laneway-tenancy: tenants and their access keys, the credential store
//! behind SigV4 verification.
//!
//! For now there is one built-in tenant, [`DEFAULT_TENANT`], with one access
//! key. The key lives in `<data-dir>/tenancy/keys.json`, created on first
//! start (from operator-supplied values or freshly generated ones) with file
//! mode 0600 in a 0700 directory, written atomically (temp file, fsync,
//! rename, fsync of the directory) so a crash never leaves a half-written
//! key file. The file carries a `format` number so a later version (secrets
//! encrypted at rest with ring AEAD, many tenants) can migrate it.
//!
//! Secrets are held in [`Secret`], whose `Debug` output is redacted, so a
//! stray `{:?}` in a log line cannot leak one. Nothing in this crate logs a
//! secret.

pub mod keygen;

use ring::rand::SystemRandom;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// The id of the one built-in tenant.
pub const DEFAULT_TENANT: &str = "default";
/// Format number written into `keys.json`.
pub const KEYS_FORMAT: u32 = 1;

/// Errors of the credential store.
#[derive(Debug, Error)]
pub enum TenancyError {
    /// Reading or writing the key file failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done (includes the path: operator-facing only).
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The key file exists but cannot be understood.
    #[error("credentials file {0}")]
    Corrupt(String),
    /// The OS random number generator failed.
    #[error("the system random number generator failed")]
    Random,
    /// An operator-supplied key is unusable.
    #[error("invalid key: {0}")]
    InvalidKey(String),
}

/// A secret access key. `Debug` never shows it; [`Secret::expose`] does.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    pub fn new(s: String) -> Secret {
        Secret(s)
    }
    /// The secret itself (for SigV4 verification and the first-start banner).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// One access key and the tenant it acts for.
#[derive(Clone, Debug)]
pub struct KeyEntry {
    /// Access key id (public).
    pub access_key: String,
    /// Secret key.
    pub secret: Secret,
    /// Tenant id the key belongs to.
    pub tenant: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: i64,
}

/// What opening the store found.
#[derive(Debug)]
pub enum Bootstrap {
    /// The key file did not exist and was created with this key (show the
    /// secret to the operator once).
    Created {
        /// Access key id.
        access_key: String,
        /// Its secret.
        secret: Secret,
    },
    /// The key file already existed; this is the default tenant's first key.
    Existing {
        /// Access key id.
        access_key: String,
    },
}

/// An operator-chosen first key (used only when the key file is created).
#[derive(Debug, Clone)]
pub struct InitialKey {
    /// Access key id.
    pub access_key: String,
    /// Secret.
    pub secret: Secret,
}

#[derive(Serialize, Deserialize)]
struct KeysFile {
    format: u32,
    keys: Vec<StoredKey>,
}

#[derive(Serialize, Deserialize)]
struct StoredKey {
    access_key: String,
    secret_key: String,
    tenant: String,
    created_ms: i64,
}

/// The credential store: access key id -> key entry.
pub struct CredentialStore {
    path: PathBuf,
    keys: HashMap<String, KeyEntry>,
}

impl fmt::Debug for CredentialStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialStore")
            .field("path", &self.path)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl CredentialStore {
    /// Open the store of `data_dir`, creating the key file on first start
    /// from `initial` (or a generated key). `initial` is ignored when the
    /// file already exists.
    pub fn open(
        data_dir: &Path,
        initial: Option<InitialKey>,
    ) -> Result<(CredentialStore, Bootstrap), TenancyError> {
        let dir = data_dir.join("tenancy");
        let path = dir.join("keys.json");
        if path.exists() {
            let store = Self::load(path)?;
            let access_key = store.default_key()?.access_key.clone();
            return Ok((store, Bootstrap::Existing { access_key }));
        }
        let entry = first_key(initial)?;
        create_private_dir(&dir)?;
        write_keys_file(&path, std::slice::from_ref(&entry))?;
        let bootstrap = Bootstrap::Created {
            access_key: entry.access_key.clone(),
            secret: entry.secret.clone(),
        };
        let keys = HashMap::from([(entry.access_key.clone(), entry)]);
        Ok((CredentialStore { path, keys }, bootstrap))
    }

    fn load(path: PathBuf) -> Result<CredentialStore, TenancyError> {
        warn_if_readable_by_others(&path);
        let text = fs::read_to_string(&path).map_err(|source| TenancyError::Io {
            what: format!("reading {}", path.display()),
            source,
        })?;
        let file: KeysFile = serde_json::from_str(&text)
            .map_err(|e| TenancyError::Corrupt(format!("{} is not valid: {e}", path.display())))?;
        if file.format != KEYS_FORMAT {
            return Err(TenancyError::Corrupt(format!(
                "{} has format {} (this build reads {KEYS_FORMAT})",
                path.display(),
                file.format
            )));
        }
        let keys = file
            .keys
            .into_iter()
            .map(|k| {
                let entry = KeyEntry {
                    access_key: k.access_key,
                    secret: Secret(k.secret_key),
                    tenant: k.tenant,
                    created_ms: k.created_ms,
                };
                (entry.access_key.clone(), entry)
            })
            .collect();
        Ok(CredentialStore { path, keys })
    }

    /// Path of the key file (shown to the operator; never the secret).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The key entry of `access_key`, if known.
    pub fn lookup(&self, access_key: &str) -> Option<&KeyEntry> {
        self.keys.get(access_key)
    }

    /// The default tenant's oldest key.
    pub fn default_key(&self) -> Result<&KeyEntry, TenancyError> {
        self.keys
            .values()
            .filter(|k| k.tenant == DEFAULT_TENANT)
            .min_by(|a, b| (a.created_ms, &a.access_key).cmp(&(b.created_ms, &b.access_key)))
            .ok_or_else(|| TenancyError::Corrupt(format!("{} holds no key", self.path.display())))
    }
}

fn first_key(initial: Option<InitialKey>) -> Result<KeyEntry, TenancyError> {
    let (access_key, secret) = match initial {
        Some(k) => {
            keygen::validate_access_key(&k.access_key)?;
            keygen::validate_secret_key(k.secret.expose())?;
            (k.access_key, k.secret)
        }
        None => {
            let rng = SystemRandom::new();
            (
                keygen::new_access_key(&rng)?,
                Secret(keygen::new_secret_key(&rng)?),
            )
        }
    };
    Ok(KeyEntry {
        access_key,
        secret,
        tenant: DEFAULT_TENANT.to_string(),
        created_ms: now_ms(),
    })
}

fn now_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> TenancyError {
    let what = format!("{what} {}", path.display());
    move |source| TenancyError::Io { what, source }
}

fn create_private_dir(dir: &Path) -> Result<(), TenancyError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err("creating", dir))
}

/// Write the key file atomically with mode 0600: temp file, fsync, rename,
/// fsync of the directory (so the rename itself survives power loss).
fn write_keys_file(path: &Path, keys: &[KeyEntry]) -> Result<(), TenancyError> {
    let file = KeysFile {
        format: KEYS_FORMAT,
        keys: keys
            .iter()
            .map(|k| StoredKey {
                access_key: k.access_key.clone(),
                secret_key: k.secret.expose().to_string(),
                tenant: k.tenant.clone(),
                created_ms: k.created_ms,
            })
            .collect(),
    };
    let text = serde_json::to_string_pretty(&file)
        .map_err(|e| TenancyError::Corrupt(format!("cannot be encoded: {e}")))?;
    let tmp = path.with_extension("json.tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err("creating", &tmp))?;
    f.write_all(text.as_bytes())
        .map_err(io_err("writing", &tmp))?;
    f.sync_all().map_err(io_err("syncing", &tmp))?;
    fs::rename(&tmp, path).map_err(io_err("renaming into", path))?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("syncing", dir))?;
    }
    Ok(())
}

fn warn_if_readable_by_others(path: &Path) {
    if let Ok(meta) = fs::metadata(path) {
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format_args!("{:o}", mode & 0o777),
                "credentials file is readable by other users; chmod 600 it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_open_creates_a_private_key_file_and_later_opens_reuse_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, boot) = CredentialStore::open(dir.path(), None).expect("create");
        let Bootstrap::Created { access_key, secret } = boot else {
            panic!("expected a new key file");
        };
        let mode = fs::metadata(store.path())
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let entry = store.lookup(&access_key).expect("lookup");
        assert_eq!(entry.tenant, DEFAULT_TENANT);
        assert_eq!(entry.secret, secret);

        let again = InitialKey {
            access_key: "IGNORED123".into(),
            secret: Secret::new("ignored-secret".into()),
        };
        let (store2, boot2) = CredentialStore::open(dir.path(), Some(again)).expect("reopen");
        assert!(matches!(boot2, Bootstrap::Existing { access_key: ref k } if *k == access_key));
        assert_eq!(
            store2.lookup(&access_key).map(|e| e.secret.clone()),
            Some(secret)
        );
        assert!(store2.lookup("IGNORED123").is_none());
    }

    #[test]
    fn operator_supplied_first_key_is_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let init = InitialKey {
            access_key: "AKIAIOSFODNN7EXAMPLE".into(),
            secret: Secret::new("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into()),
        };
        let (store, _) = CredentialStore::open(dir.path(), Some(init)).expect("create");
        let e = store.lookup("AKIAIOSFODNN7EXAMPLE").expect("lookup");
        assert_eq!(
            e.secret.expose(),
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        );
    }

    #[test]
    fn garbled_or_future_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tdir = dir.path().join("tenancy");
        fs::create_dir_all(&tdir).expect("mkdir");
        fs::write(tdir.join("keys.json"), "{not json").expect("write");
        assert!(matches!(
            CredentialStore::open(dir.path(), None),
            Err(TenancyError::Corrupt(_))
        ));
        fs::write(tdir.join("keys.json"), r#"{"format":99,"keys":[]}"#).expect("write");
        assert!(matches!(
            CredentialStore::open(dir.path(), None),
            Err(TenancyError::Corrupt(_))
        ));
    }

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let s = Secret::new("topsecretvalue".into());
        assert!(!format!("{s:?}").contains("topsecretvalue"));
        let b = Bootstrap::Created {
            access_key: "LWX".into(),
            secret: s,
        };
        assert!(!format!("{b:?}").contains("topsecretvalue"));
    }
}
