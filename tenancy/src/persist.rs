//! The on-disk form of the registry and how it is written.
//!
//! `<data-dir>/tenancy/tenants.json` holds `{"format": 2, "tenants": [..],
//! "keys": [..]}`; each key carries its secret sealed by
//! [`crate::crypt::MasterKey`], never in clear. The file is replaced
//! atomically: written to a temp file with mode 0600, fsynced, renamed over
//! the old one, and the directory fsynced so the rename survives power
//! loss. A reader therefore sees the old or the new file, never a torn one.
//!
//! Format 1 was the pre-release `keys.json` (one built-in tenant, secrets in
//! clear); [`read_legacy`] reads it once so the registry can migrate it and
//! delete it.

use crate::TenancyError;
use crate::model::{KeyAccess, Tenant};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Format number of `tenants.json`.
pub const FORMAT: u32 = 2;

/// The whole registry file.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RegistryFile {
    /// [`FORMAT`].
    pub format: u32,
    /// Every tenant.
    pub tenants: Vec<Tenant>,
    /// Every key, secrets sealed.
    pub keys: Vec<StoredKey>,
}

/// One key as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredKey {
    /// Access key id.
    pub access_key: String,
    /// Owning tenant id.
    pub tenant: String,
    /// Read-write / read-only.
    pub access: KeyAccess,
    /// Bucket scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<String>>,
    /// Creation time (ms).
    pub created_ms: i64,
    /// The secret, sealed (base64 of nonce || ciphertext || tag).
    pub sealed_secret: String,
}

/// Identity of a file version: (inode, size, mtime ns). A rename gives a
/// new inode, so every rewrite changes it.
pub type Stamp = (u64, u64, i128);

/// The stamp of `path`, if it exists.
pub fn stamp(path: &Path) -> Option<Stamp> {
    let m = fs::metadata(path).ok()?;
    let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    Some((m.ino(), m.size(), mtime))
}

/// Read and check the registry file.
pub fn read(path: &Path) -> Result<RegistryFile, TenancyError> {
    let text = fs::read_to_string(path).map_err(io_err("reading", path))?;
    let file: RegistryFile = serde_json::from_str(&text)
        .map_err(|e| TenancyError::Corrupt(format!("{} is not valid: {e}", path.display())))?;
    if file.format != FORMAT {
        return Err(TenancyError::Corrupt(format!(
            "{} has format {} (this build reads {FORMAT})",
            path.display(),
            file.format
        )));
    }
    Ok(file)
}

/// Write the registry file atomically.
pub fn write(path: &Path, file: &RegistryFile) -> Result<(), TenancyError> {
    let text = serde_json::to_vec_pretty(file)
        .map_err(|e| TenancyError::Corrupt(format!("cannot be encoded: {e}")))?;
    write_private_file(path, &text)
}

/// A key of the pre-release `keys.json` (format 1, secret in clear).
#[derive(Deserialize)]
pub struct LegacyKey {
    /// Access key id.
    pub access_key: String,
    /// Secret in clear.
    pub secret_key: String,
    /// Tenant id.
    pub tenant: String,
    /// Creation time (ms).
    pub created_ms: i64,
}

#[derive(Deserialize)]
struct LegacyFile {
    format: u32,
    keys: Vec<LegacyKey>,
}

/// The keys of a format-1 `keys.json`.
pub fn read_legacy(path: &Path) -> Result<Vec<LegacyKey>, TenancyError> {
    let text = fs::read_to_string(path).map_err(io_err("reading", path))?;
    let file: LegacyFile = serde_json::from_str(&text)
        .map_err(|e| TenancyError::Corrupt(format!("{} is not valid: {e}", path.display())))?;
    if file.format != 1 {
        return Err(TenancyError::Corrupt(format!(
            "{} has format {} (expected 1)",
            path.display(),
            file.format
        )));
    }
    Ok(file.keys)
}

/// An `Io` error naming what was done to which path.
pub fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> TenancyError {
    let what = format!("{what} {}", path.display());
    move |source| TenancyError::Io { what, source }
}

/// Create `dir` (and parents) with mode 0700.
pub fn create_private_dir(dir: &Path) -> Result<(), TenancyError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err("creating", dir))
}

/// Write `bytes` to `path` atomically with mode 0600: temp file, fsync,
/// rename, fsync of the directory.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> Result<(), TenancyError> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err("creating", &tmp))?;
    f.write_all(bytes).map_err(io_err("writing", &tmp))?;
    f.sync_all().map_err(io_err("syncing", &tmp))?;
    fs::rename(&tmp, path).map_err(io_err("renaming into", path))?;
    sync_dir(path)
}

/// Fsync the directory holding `path`.
pub fn sync_dir(path: &Path) -> Result<(), TenancyError> {
    if let Some(dir) = path.parent() {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("syncing", dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn files_are_private_and_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("tenants.json");
        write(
            &p,
            &RegistryFile {
                format: FORMAT,
                ..RegistryFile::default()
            },
        )
        .expect("write");
        let mode = fs::metadata(&p).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(read(&p).expect("read").tenants.is_empty());
        let before = stamp(&p);
        write(
            &p,
            &RegistryFile {
                format: FORMAT,
                ..RegistryFile::default()
            },
        )
        .expect("rewrite");
        assert_ne!(before, stamp(&p), "a rewrite changes the stamp");
        fs::write(&p, "{not json").expect("garble");
        assert!(matches!(read(&p), Err(TenancyError::Corrupt(_))));
        fs::write(&p, r#"{"format":99,"tenants":[],"keys":[]}"#).expect("future");
        assert!(matches!(read(&p), Err(TenancyError::Corrupt(_))));
    }
}
