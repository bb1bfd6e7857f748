//! The apply lock: two `apply` runs on the same host never interleave.
//!
//! An advisory `flock` on `/var/lib/gpuhost/apply.lock` (inside the root), held for the whole
//! run and released by the kernel when the process ends, however it ends. The file also says
//! who holds it, so the second run can tell the user.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};

use anyhow::{anyhow, Result};

use crate::error::hinted;
use crate::fsutil;
use crate::host::Host;

pub const LOCK_PATH: &str = "/var/lib/gpuhost/apply.lock";

/// Held until dropped.
#[derive(Debug)]
pub struct ApplyLock {
    _file: File,
}

impl ApplyLock {
    /// Take the lock, or fail at once saying who holds it.
    pub fn acquire(host: &Host, what: &str) -> Result<ApplyLock> {
        let path = host.path(LOCK_PATH);
        let mut file = host.open_rw_create(LOCK_PATH, 0o644)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let holder = if holder.is_empty() {
                    "another gpuhost process".to_string()
                } else {
                    holder.to_string()
                };
                return Err(hinted(
                    format!(
                        "another apply holds the lock on {}: {holder}",
                        path.display()
                    ),
                    "wait for it to finish, then run again",
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(anyhow!("locking {}: {e}", path.display()));
            }
        }
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        writeln!(
            file,
            "pid {} since {} ({what})",
            std::process::id(),
            fsutil::rfc3339(fsutil::unix_now())
        )?;
        file.sync_all()?;
        Ok(ApplyLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_says_who_holds_the_first() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        let first = ApplyLock::acquire(&host, "gpuhost apply --profile ol8-uek")?;
        let err = ApplyLock::acquire(&host, "second")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert!(err.contains("gpuhost apply --profile ol8-uek"), "{err}");
        drop(first);
        ApplyLock::acquire(&host, "third")?;
        Ok(())
    }
}
