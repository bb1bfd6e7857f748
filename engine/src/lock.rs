//! The apply lock: two `apply` runs on the same host never interleave.
//!
//! An advisory `flock` on `/var/lib/gpuhost/apply.lock` (inside the root), held for the whole
//! run and released by the kernel when the last descriptor of it closes, however the process
//! ends. The descriptor is inherited by every command gpuhost starts: after a `kill -9` of
//! gpuhost, a dnf transaction it started still holds the lock until it ends, so a second apply
//! cannot start beside it. The file says who took the lock (pid, since when, command line), so
//! the second run can tell the user — and, when that gpuhost is gone, which process still
//! holds the lock.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use gpuhost_host::error::hinted;
use gpuhost_host::fsutil;
use gpuhost_host::host::Host;

pub(crate) const LOCK_PATH: &str = "/var/lib/gpuhost/apply.lock";

/// How long the loser of a simultaneous start waits for the winner to write who it is.
const HOLDER_WAIT: Duration = Duration::from_secs(2);

/// Held until dropped.
#[derive(Debug)]
pub(crate) struct ApplyLock {
    _file: File,
}

/// `pid N since T (command)` as the holder wrote it, if the line is whole.
fn parse_holder(text: &str) -> Option<(i32, &str)> {
    let line = text.lines().next()?.trim();
    let rest = line.strip_prefix("pid ")?;
    let (pid, _) = rest.split_once(' ')?;
    (line.ends_with(')') && text.contains('\n')).then_some(())?;
    Some((pid.parse().ok()?, line))
}

fn alive(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid).is_some_and(|p| {
        matches!(
            rustix::process::test_kill_process(p),
            Ok(()) | Err(rustix::io::Errno::PERM)
        )
    })
}

/// Processes (pid, name) that have `target` open, from /proc (the live system's process table).
fn holders_of(target: &std::path::Path) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc/") else {
        return out;
    };
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == target))
        {
            let name = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            out.push((pid, name.trim().to_string()));
        }
    }
    out
}

impl ApplyLock {
    /// Take the lock, or fail at once saying who holds it.
    pub(crate) fn acquire(host: &Host, what: &str) -> Result<ApplyLock> {
        let path = host.path(LOCK_PATH);
        let mut file = host.open_rw_create(LOCK_PATH, 0o644)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(hinted(
                    format!(
                        "another apply holds the lock on {}: {}",
                        path.display(),
                        Self::holder(&mut file)
                    ),
                    "wait for it to finish, then run again",
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(anyhow!("locking {}: {e}", path.display()));
            }
        }
        // Who holds it, in one write; then cut what an older, longer line left behind.
        let line = format!(
            "pid {} since {} ({})\n",
            std::process::id(),
            fsutil::rfc3339(fsutil::unix_now()),
            what.replace(char::is_control, " ")
        );
        file.seek(SeekFrom::Start(0))?;
        file.write_all(line.as_bytes())?;
        file.set_len(u64::try_from(line.len()).unwrap_or(u64::MAX))?;
        file.sync_all()?;
        // Inherited by every command gpuhost starts (see the module doc).
        rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty())
            .map_err(|e| anyhow!("keeping {} open for child processes: {e}", path.display()))?;
        Ok(ApplyLock { _file: file })
    }

    /// Who holds the lock: the line its taker wrote (waiting a moment for a taker that started
    /// at the same instant to write it); when that process is gone, which processes hold it.
    fn holder(file: &mut File) -> String {
        let deadline = Instant::now() + HOLDER_WAIT;
        let mut text = String::new();
        loop {
            text.clear();
            let _ = file.seek(SeekFrom::Start(0));
            let _ = file.read_to_string(&mut text);
            match parse_holder(&text) {
                Some((pid, line)) if alive(pid) => return line.to_string(),
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => break,
            }
        }
        let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&*file));
        let holders = std::fs::read_link(fd_path)
            .map(|p| holders_of(&p))
            .unwrap_or_default();
        let held_by = if holders.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = holders
                .iter()
                .map(|(pid, name)| format!("pid {pid} ({name})"))
                .collect();
            format!("held by {}", list.join(", "))
        };
        match parse_holder(&text) {
            Some((_, line)) if held_by.is_empty() => format!("{line}, which is no longer running"),
            Some((_, line)) => {
                format!("{held_by}, a command started by {line}, which is no longer running")
            }
            None if held_by.is_empty() => "another process (it wrote no holder line)".to_string(),
            None => held_by,
        }
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
