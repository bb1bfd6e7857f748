//! Package files a transaction installs by path (NVIDIA's local repo package, named by
//! `driver.local_repo_rpm`), copied onto the root's own disk and checked before the
//! transaction's first write.
//!
//! rpm reads a package's payload when it installs that package, in the middle of the
//! transaction: a file on an NFS export, a USB stick or a directory a sync replaces can be gone
//! by then, and the transaction stops half-way. So the file is copied into [`PACKAGES`] first
//! (the copy's size must be the size the file had when it was opened), its digests (and its
//! signature, where the root has the key) are checked with `rpm -K`, and the transaction
//! installs the copy. The copy is removed when the transaction is over, whatever happened.
//! Packages from repos are dnf's to copy and check ([`crate::host::Host::dnf`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::hinted;
use crate::host::Host;

/// Where the copies are made, in the root (one of `host::TOOL_DIRS`).
pub const PACKAGES: &str = "/var/cache/gpuhost/packages";

/// A package file copied into [`PACKAGES`]; removed when dropped.
#[derive(Debug)]
pub struct Staged {
    host: Host,
    /// Path inside the root.
    inside: String,
    /// Path on this machine.
    real: PathBuf,
}

impl Staged {
    /// The copy's path on this machine (what dnf and rpm are given).
    pub fn path(&self) -> &Path {
        &self.real
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Err(e) = self.host.remove_file(&self.inside) {
            tracing::warn!("could not remove the copy {}: {e:#}", self.real.display());
        }
        // The folder goes with the last copy: a run leaves the root as it found it.
        if self.host.list_dir(PACKAGES).is_ok_and(|l| l.is_empty()) {
            let _ = self.host.remove_tree(PACKAGES);
        }
    }
}

/// Copy `file` into [`PACKAGES`] and check the copy (see the module doc). A file that cannot be
/// read whole, or whose copy rpm finds damaged, is an error naming it, before any change.
pub fn copy_in(host: &Host, file: &Path) -> Result<Staged> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.starts_with('.'))
        .ok_or_else(|| anyhow::anyhow!("{} is not a package file name", file.display()))?;
    host.create_dir_all(PACKAGES)?;
    let inside = format!("{PACKAGES}/{name}");
    // Made before the copy: whatever goes wrong from here, dropping it removes what was copied.
    let staged = Staged {
        host: host.clone(),
        real: host.real_path(PACKAGES)?.join(name),
        inside,
    };
    let lost = |e: &dyn std::fmt::Display| {
        hinted(
            format!(
                "{} could not be copied onto the root's disk before the transaction ({e}); nothing was installed",
                file.display()
            ),
            "check that the file's filesystem (an NFS export, a USB stick, a synced mirror) is mounted and readable, then run gpuhost again",
        )
    };
    let mut src = std::fs::File::open(file).map_err(|e| lost(&e))?;
    let size = src.metadata().map_err(|e| lost(&e))?.len();
    let mut out = host.open_rw_create(&staged.inside, 0o600)?;
    out.set_len(0)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut copied = 0u64;
    loop {
        let n = src.read(&mut buf).map_err(|e| lost(&e))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .with_context(|| format!("writing {}", staged.real.display()))?;
        copied += n as u64;
    }
    out.sync_all()?;
    drop(out);
    if copied != size {
        return Err(lost(&format!("{copied} of its {size} bytes could be read")));
    }
    let out = host.rpm().arg("-Kv").arg(&staged.real).output()?;
    let faults = crate::rpm::checksig_faults(&out.stdout, &out.stderr, out.success());
    if !faults.is_empty() {
        return Err(hinted(
            format!(
                "{} changed or was damaged while it was copied onto the root's disk: rpm -K: {}; nothing was installed",
                file.display(),
                faults.join(", ")
            ),
            "check the file's source (a mirror being synced, a failing disk), then run gpuhost again",
        ));
    }
    Ok(staged)
}

/// Remove copies a run killed mid-way left behind (every apply does, under its lock).
pub fn remove_left(host: &Host) -> Result<()> {
    if host.remove_tree(PACKAGES)? {
        tracing::info!("removed {PACKAGES}, left by a run that was killed");
    }
    Ok(())
}
