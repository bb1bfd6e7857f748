//! Package files a transaction installs by path (NVIDIA's local repo package, named by
//! `driver.local_repo_rpm`), copied onto the root's own disk and checked before the
//! transaction's first write.
//!
//! rpm reads a package's payload when it installs that package, in the middle of the
//! transaction: a file on an NFS export, a USB stick or a directory a sync replaces can be gone
//! by then, and the transaction stops half-way. So the file is placed in [`PACKAGES`] first,
//! its digests (and its signature, where the root has the key) are checked with `rpm -K`, and
//! the transaction installs that copy. Where the root's filesystem can share the bytes, nothing
//! is copied (issue 42: a 4 GiB CUDA local repo package is not written once more): a reflink
//! (XFS, Oracle Linux's default, and Btrfs), else a hard link of the opened file on the same
//! filesystem; else a copy, whose size must be the size the file had when it was opened. The
//! copy is removed when the transaction is over, whatever happened.
//! Packages from repos are dnf's to copy and check ([`crate::host::Host::dnf`]).

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Result;

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
    /// The file staged.
    source: PathBuf,
}

impl Staged {
    /// The copy's path on this machine (what dnf and rpm are given).
    pub fn path(&self) -> &Path {
        &self.real
    }

    /// The file it was staged from.
    pub fn source(&self) -> &Path {
        &self.source
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
    let staged = place(host, file)?;
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

/// `file` placed in [`PACKAGES`] (shared, or copied whole), not checked. A caller that reads
/// the copy whole itself (gpuhost's reader checks every digest on the way) checks it so;
/// [`copy_in`] runs `rpm -K`.
pub fn place(host: &Host, file: &Path) -> Result<Staged> {
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
        source: file.to_path_buf(),
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
    // Opened once, without following a link or waiting on a FIFO: what is checked below is
    // what is staged.
    let mut src = crate::fsutil::open_named_file(file).map_err(|e| lost(&e))?;
    let size = src.metadata().map_err(|e| lost(&e))?.len();
    // A file left there (a killed run's, or a hard link of an earlier staging) is unlinked,
    // never truncated: a hard link's bytes are its source's.
    host.remove_file(&staged.inside)?;
    let out = host.open_rw_create(&staged.inside, 0o600)?;
    if out.metadata()?.len() != 0 {
        anyhow::bail!(
            "{} appeared while it was being staged",
            staged.real.display()
        );
    }
    match share(&src, out, &staged.real) {
        Ok(how) => tracing::info!("{} staged as a {how}, no copy", file.display()),
        Err(mut out) => {
            let copied = copy(&mut src, &mut out).map_err(|e| match e {
                Copy::Read(e) => lost(&e),
                Copy::Write(e) => {
                    anyhow::Error::new(e).context(format!("writing {}", staged.real.display()))
                }
            })?;
            if copied != size {
                return Err(lost(&format!("{copied} of its {size} bytes could be read")));
            }
        }
    }
    Ok(staged)
}

/// Whether staging `file` in `host`'s root copies its bytes (what the space check must count):
/// not when it lies on the filesystem that holds [`PACKAGES`], where a reflink or a hard link
/// shares them.
pub fn copies(host: &Host, file: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(src), Ok(real)) = (std::fs::metadata(file), host.real_path(PACKAGES)) else {
        return true;
    };
    let mut p = real.as_path();
    loop {
        if let Ok(m) = std::fs::metadata(p) {
            return m.dev() != src.dev();
        }
        match p.parent() {
            Some(up) => p = up,
            None => return true,
        }
    }
}

/// The staged file made without copying the bytes, when the root's filesystem can share them:
/// a reflink (`FICLONE`: XFS, as Oracle Linux formats it, and Btrfs; copy-on-write, so a later
/// change of the source does not reach it), else, on the same filesystem, a hard link of the
/// opened file (`linkat` of the descriptor: the file checked is the file staged; a sync that
/// replaces the source by a rename leaves the link as it was). How it was made, or the empty
/// file `out` back to copy into.
fn share(
    src: &std::fs::File,
    out: std::fs::File,
    real: &Path,
) -> Result<&'static str, std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    if rustix::fs::ioctl_ficlone(&out, src).is_ok() {
        return Ok("reflink");
    }
    let same = match (src.metadata(), out.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    };
    if !same || std::fs::remove_file(real).is_err() {
        return Err(out);
    }
    let linked = rustix::fs::linkat(
        src,
        "",
        rustix::fs::CWD,
        real,
        rustix::fs::AtFlags::EMPTY_PATH,
    );
    if linked.is_ok() {
        return Ok("hard link");
    }
    // No link (another user's file under protected_hardlinks, a filesystem without them):
    // the copy, into a new empty file.
    Err(std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(real)
        .unwrap_or(out))
}

enum Copy {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// Copy `src` into `out`, synced: the bytes copied.
fn copy(src: &mut std::fs::File, out: &mut std::fs::File) -> Result<u64, Copy> {
    let mut buf = vec![0u8; 1 << 20];
    let mut copied = 0u64;
    loop {
        let n = src.read(&mut buf).map_err(Copy::Read)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(Copy::Write)?;
        copied += n as u64;
    }
    out.sync_all().map_err(Copy::Write)?;
    Ok(copied)
}

/// Remove copies a run killed mid-way left behind (every apply does, under its lock).
pub fn remove_left(host: &Host) -> Result<()> {
    if host.remove_tree(PACKAGES)? {
        tracing::info!("removed {PACKAGES}, left by a run that was killed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Staging on the same filesystem makes no copy, and the staged file holds the source's
    /// bytes, whichever way it was made.
    #[test]
    fn a_shared_stage_holds_the_sources_bytes() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let src_path = tmp.path().join("src.rpm");
        std::fs::write(&src_path, b"the package's bytes")?;
        let real = tmp.path().join("staged.rpm");
        let out = std::fs::File::create(&real)?;
        let src = crate::fsutil::open_named_file(&src_path)?;
        let how = share(&src, out, &real);
        assert!(how.is_ok(), "not shared");
        assert_eq!(std::fs::read(&real)?, b"the package's bytes");
        Ok(())
    }
}
