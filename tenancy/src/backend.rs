//! Where the registry document lives: [`RegistryBackend`], with the local
//! file ([`FileBackend`], `laneway serve`) as one implementation and, in a
//! cluster, a versioned document of the store's catalog (implemented where
//! the store client is, so this crate does not depend on the store).
//!
//! The registry is one document (every tenant and key, secrets sealed).
//! It changes by compare-and-swap: a write names the version it was made
//! from and fails with [`TenancyError::Stale`] when another writer got
//! there first; the registry then reloads, re-applies the change and
//! tries again. Versions are opaque tokens; equal tokens mean the same
//! document, so a reader can skip a reload when the version did not move.

use crate::TenancyError;
use crate::persist::{self, RegistryFile};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};

/// A stored document's version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version(pub String);

/// Storage of the registry document.
pub trait RegistryBackend: Send + Sync {
    /// Where it is, for operators' messages.
    fn location(&self) -> String;

    /// The stored version (`None`: nothing stored yet). Cheap: called on
    /// every credential cache miss.
    fn version(&self) -> Result<Option<Version>, TenancyError>;

    /// The stored document and its version.
    fn read(&self) -> Result<Option<(Version, RegistryFile)>, TenancyError>;

    /// Store `file` if the stored version is still `expected` (`None`:
    /// nothing stored yet); the new version. [`TenancyError::Stale`] when
    /// it moved.
    fn write(
        &self,
        expected: Option<&Version>,
        file: &RegistryFile,
    ) -> Result<Version, TenancyError>;
}

/// `<data-dir>/tenancy/tenants.json`. The version is the file's (inode,
/// size, mtime): every rewrite renames a new file in. The swap is checked
/// under a lock of this process; processes sharing one file are not
/// serialised with each other (one writer at a time, as before clusters).
pub struct FileBackend {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileBackend {
    /// The registry file at `path`.
    pub fn new(path: &Path) -> FileBackend {
        FileBackend {
            path: path.to_path_buf(),
            lock: Mutex::new(()),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn stamp(&self) -> Option<Version> {
        persist::stamp(&self.path)
            .map(|(ino, size, mtime)| Version(format!("{ino}-{size}-{mtime}")))
    }
}

impl RegistryBackend for FileBackend {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn version(&self) -> Result<Option<Version>, TenancyError> {
        Ok(self.stamp())
    }

    fn read(&self) -> Result<Option<(Version, RegistryFile)>, TenancyError> {
        let Some(before) = self.stamp() else {
            return Ok(None);
        };
        Ok(Some((before, persist::read(&self.path)?)))
    }

    fn write(
        &self,
        expected: Option<&Version>,
        file: &RegistryFile,
    ) -> Result<Version, TenancyError> {
        let _one = self.lock.lock();
        if self.stamp().as_ref() != expected {
            return Err(TenancyError::Stale);
        }
        persist::write(&self.path, file)?;
        self.stamp().ok_or_else(|| {
            TenancyError::Corrupt(format!("{} vanished after a write", self.location()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_from_an_old_version_is_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = FileBackend::new(&dir.path().join("tenants.json"));
        assert_eq!(b.read().expect("read").map(|(v, _)| v), None);
        let doc = RegistryFile {
            format: persist::FORMAT,
            ..RegistryFile::default()
        };
        let v1 = b.write(None, &doc).expect("create");
        assert!(matches!(b.write(None, &doc), Err(TenancyError::Stale)));
        let v2 = b.write(Some(&v1), &doc).expect("swap");
        assert_ne!(v1, v2);
        assert!(matches!(b.write(Some(&v1), &doc), Err(TenancyError::Stale)));
        assert_eq!(b.version().expect("version"), Some(v2));
    }
}
