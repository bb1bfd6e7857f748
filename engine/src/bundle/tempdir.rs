//! A scratch directory removed when dropped (a tarball's extraction, a build's scratch root).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// A directory removed (with what it holds) when dropped: a tarball's extraction, the
/// scratch root of a build.
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A new directory under `$TMPDIR`, else `/var/tmp` (bundles are large; /tmp may be RAM).
    pub(crate) fn new(prefix: &str) -> Result<TempDir> {
        let base = std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp"));
        TempDir::under(&base, prefix)
    }

    pub(crate) fn under(base: &Path, prefix: &str) -> Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = base.join(format!("{prefix}-{}-{nanos:08x}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
