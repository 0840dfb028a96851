//! Small file-system helpers shared by the store's own small files (the
//! data dir's identity, the cluster file and its secret).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Write `bytes` to `path` with `mode` so that a reader, or a crash, never
/// sees half a file: a temporary file beside it, fsynced, renamed over
/// `path`, then the directory fsynced so the rename survives power loss.
/// Creates the parent directory when missing.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        std::fs::create_dir_all(parent)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(parent.unwrap_or(Path::new(".")))?.sync_all()
}
