//! The data directory's identity file (`laneway.json`): format version,
//! partition count and metadata engine, fixed when the directory is created.
//!
//! Both choices decide where and how every record is stored, so reopening a
//! data dir with a different count or engine is refused with a message that
//! says what the directory holds, rather than silently misreading it.

use crate::error::{StoreError, StoreResult};
use crate::index::Engine;
use crate::store::StoreConfig;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Layout format written by this version.
pub const LAYOUT_VERSION: u32 = 1;
/// Partitions of a new data dir when none is asked for.
pub const DEFAULT_PARTITIONS: u32 = 16;
/// Most partitions a data dir may have.
pub const MAX_PARTITIONS: u32 = 4096;
const FILE: &str = "laneway.json";

/// What `laneway.json` records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Layout format version.
    pub version: u32,
    /// Partition count (power of two).
    pub partitions: u32,
    /// Metadata engine of every index in the dir.
    pub engine: Engine,
}

impl Layout {
    /// Read the dir's layout, or create it (and the dir) from `cfg`.
    pub fn open_or_create(dir: &Path, cfg: &StoreConfig) -> StoreResult<Layout> {
        let path = dir.join(FILE);
        match std::fs::read(&path) {
            Ok(bytes) => Self::check_existing(&bytes, cfg),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::create(dir, cfg),
            Err(e) => Err(e.into()),
        }
    }

    fn check_existing(bytes: &[u8], cfg: &StoreConfig) -> StoreResult<Layout> {
        let layout: Layout = serde_json::from_slice(bytes)
            .map_err(|e| StoreError::Layout(format!("laneway.json is unreadable: {e}")))?;
        if layout.version != LAYOUT_VERSION {
            return Err(StoreError::Layout(format!(
                "data dir has layout version {}, this build reads {LAYOUT_VERSION}",
                layout.version
            )));
        }
        if let Some(n) = cfg.partitions.filter(|&n| n != layout.partitions) {
            return Err(StoreError::Layout(format!(
                "data dir was created with {} partitions; it cannot be opened with {n} \
                 (omit the partition count to use the dir's own)",
                layout.partitions
            )));
        }
        if let Some(e) = cfg.engine.filter(|&e| e != layout.engine) {
            return Err(StoreError::Layout(format!(
                "data dir uses the {} engine; it cannot be opened with {}",
                layout.engine.name(),
                e.name()
            )));
        }
        Ok(layout)
    }

    fn create(dir: &Path, cfg: &StoreConfig) -> StoreResult<Layout> {
        let partitions = cfg.partitions.unwrap_or(DEFAULT_PARTITIONS);
        if !partitions.is_power_of_two() || partitions > MAX_PARTITIONS {
            return Err(StoreError::Layout(format!(
                "partition count must be a power of two between 1 and {MAX_PARTITIONS}, not {partitions}"
            )));
        }
        let layout = Layout {
            version: LAYOUT_VERSION,
            partitions,
            engine: cfg.engine.unwrap_or(Engine::Fjall),
        };
        let text = serde_json::to_vec_pretty(&layout)
            .map_err(|e| StoreError::Layout(format!("encoding laneway.json: {e}")))?;
        // A crash never leaves a half-written identity.
        crate::fsutil::write_atomically(&dir.join(FILE), &text, 0o644)?;
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(p: Option<u32>, e: Option<Engine>) -> StoreConfig {
        StoreConfig {
            partitions: p,
            engine: e,
            ..StoreConfig::default()
        }
    }

    #[test]
    fn created_once_then_enforced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let l =
            Layout::open_or_create(dir.path(), &cfg(Some(8), Some(Engine::Sled))).expect("create");
        assert_eq!((l.partitions, l.engine), (8, Engine::Sled));
        let again = Layout::open_or_create(dir.path(), &cfg(None, None)).expect("reopen");
        assert_eq!(again, l);
        let err = Layout::open_or_create(dir.path(), &cfg(Some(16), None)).expect_err("count");
        assert!(
            err.to_string().contains("created with 8 partitions"),
            "{err}"
        );
        assert!(Layout::open_or_create(dir.path(), &cfg(None, Some(Engine::Fjall))).is_err());
    }

    #[test]
    fn rejects_non_power_of_two() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(Layout::open_or_create(dir.path(), &cfg(Some(12), None)).is_err());
        assert!(Layout::open_or_create(dir.path(), &cfg(Some(0), None)).is_err());
    }
}
