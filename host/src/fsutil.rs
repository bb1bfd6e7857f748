//! Atomic file writes, SHA-256 digests and small time helpers (files of the build host).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// Write `data` to `path` atomically: a temp file in the same directory, fsync, rename, fsync
/// the directory. Readers see the old content or the new, never a torn file. Parent
/// directories are created. `mode` sets the permission bits of the new file.
///
/// The temp file is created with `O_CREAT|O_EXCL|O_NOFOLLOW` under a name nobody can predict:
/// a link planted in a shared directory (node_exporter's textfile directory) is never
/// followed, and never written through.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("{} has no parent directory", path.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (mut f, tmp) = create_new_beside(path, "gpuhost-tmp", mode)?;
    let result = (|| -> Result<()> {
        f.write_all(data)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all()
            .with_context(|| format!("syncing {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A new file next to `path`, `.NAME.TAG.<random>`, created with `O_CREAT|O_EXCL|O_NOFOLLOW`
/// (never an existing file, never through a link), and its path.
pub fn create_new_beside(path: &Path, tag: &str, mode: u32) -> Result<(std::fs::File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path
        .parent()
        .with_context(|| format!("{} has no parent directory", path.display()))?;
    let name = path
        .file_name()
        .with_context(|| format!("{} has no file name", path.display()))?
        .to_string_lossy();
    let mut last = None;
    for _ in 0..16 {
        let tmp = dir.join(format!(".{name}.{tag}.{}", unpredictable()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(O_NOFOLLOW_CLOEXEC)
            .mode(mode)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e).with_context(|| format!("creating {}", tmp.display())),
        }
    }
    Err(anyhow::anyhow!(
        "creating a temporary file next to {}: {}; remove the .{name}.{tag}.* files there",
        path.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// `O_NOFOLLOW | O_CLOEXEC` as `OpenOptionsExt::custom_flags` takes them.
const O_NOFOLLOW_CLOEXEC: i32 =
    (rustix::fs::OFlags::NOFOLLOW.bits() | rustix::fs::OFlags::CLOEXEC.bits()) as i32;

/// Open a regular file for reading without following a link and without blocking: a FIFO or a
/// device is refused (its open does not wait for a writer), the type checked on the descriptor.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let f = std::fs::File::from(fd);
    if !f.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(f)
}

/// Open a regular file the user named for reading, a link followed (the user's own choice of
/// path), without blocking: a FIFO or a device is refused (its open does not wait for a
/// writer), the type checked on the descriptor.
pub fn open_named_file(path: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let f = std::fs::File::from(fd);
    let ft = f.metadata()?.file_type();
    if !ft.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is {}, not a regular file",
            path.display(),
            kind_of(ft)
        )));
    }
    Ok(f)
}

/// The bytes of a file gpuhost kept for itself (its run directory's records): opened as
/// [`open_regular`] opens (no link followed, a FIFO or device refused without waiting), and
/// refused unless owned by this user, writable by no one else, and at most `max` bytes (a
/// record another user planted, or `/dev/zero`, is never read). `NotFound` when absent.
pub fn read_own_file(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let f = open_regular(path)?;
    let m = f.metadata()?;
    let me = rustix::process::geteuid().as_raw();
    let refuse = std::io::Error::other;
    if m.uid() != me {
        return Err(refuse(format!("owned by uid {}, not by uid {me}", m.uid())));
    }
    if m.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "writable by others (mode {:o})",
            m.mode() & 0o7777
        )));
    }
    if m.len() > max {
        return Err(refuse(format!("{} bytes, more than {max}", m.len())));
    }
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// What a file type is, in words.
pub fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_symlink() {
        "a link"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else if ft.is_dir() {
        "a directory"
    } else {
        "a regular file"
    }
}

/// 64 bits nobody outside this process can guess: the pid, the clock and a counter, hashed.
fn unpredictable() -> String {
    use sha2::{Digest, Sha256};
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let stack = 0u8;
    let seed = format!(
        "{}:{now}:{n}:{:p}",
        std::process::id(),
        std::ptr::addr_of!(stack)
    );
    hex(&Sha256::digest(seed.as_bytes())[..8])
}

/// A new directory in the temporary directory (`$TMPDIR`), named `PREFIX.<pid>.<n>`, readable
/// by its owner only; never one that already exists. Remove it with [`remove_temp_dir`]. Those
/// of `prefix` that a killed gpuhost left (`kill -9` skips every cleanup) go first
/// ([`remove_stale_temp_dirs`]).
pub fn private_temp_dir(prefix: &str) -> Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let tmp = std::env::temp_dir();
    remove_stale_temp_dirs(&tmp, prefix);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let mut last = None;
    for _ in 0..16 {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = tmp.join(format!("{prefix}.{}.{nanos:x}.{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow::anyhow!(
        "cannot make a directory in {}: {}; set TMPDIR to a writable directory",
        tmp.display(),
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

/// Remove a directory [`private_temp_dir`] made, with what is in it (best effort).
pub fn remove_temp_dir(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// Remove the directories [`private_temp_dir`] made in `tmp` for `prefix` whose process is
/// gone: this user's own directories (never a link, never another user's), named for a pid
/// that no longer runs (best effort).
pub fn remove_stale_temp_dirs(tmp: &Path, prefix: &str) {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix)?.strip_prefix('.'))
            .and_then(|rest| rest.split('.').next()?.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = e.path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me) {
            tracing::debug!(
                "removing {} (left by gpuhost pid {pid}, gone)",
                path.display()
            );
            remove_temp_dir(&path);
        }
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// RFC 3339 UTC timestamp (`2026-12-02T18:14:40Z`) for a Unix time.
pub fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of bytes, hex.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex(&Sha256::digest(data))
}

/// SHA-256 of a file (read in 1 MiB pieces), hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    sha256_read(f, path)
}

/// SHA-256 of what `r` (read from `path`) holds, hex.
pub fn sha256_read(mut r: impl std::io::Read, path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a run directory's records are read through: `/dev/zero` behind a link, a FIFO, a
    /// file others may write, one too big, one of another user's: each refused at once.
    #[test]
    fn read_own_file_reads_only_small_files_of_this_users() -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir()?;
        let ok = dir.path().join("counters.json");
        std::fs::write(&ok, "{}")?;
        assert_eq!(read_own_file(&ok, 16)?, b"{}");
        let zero = dir.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero)?;
        assert!(read_own_file(&zero, 1 << 20).is_err());
        let fifo = dir.path().join("nvml-probe.pid");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
        assert!(made.success());
        let t = std::time::Instant::now();
        assert!(read_own_file(&fifo, 16).is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        let err = read_own_file(&ok, 1).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("more than 1")));
        std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o666))?;
        assert!(read_own_file(&ok, 16).is_err());
        std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o644))?;
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&ok, Some(65534), None)?;
            let err = read_own_file(&ok, 16).err().map(|e| e.to_string());
            assert!(err.is_some_and(|e| e.contains("owned by uid 65534")));
        }
        let missing = read_own_file(&dir.path().join("none"), 16).err();
        assert!(missing.is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound));
        Ok(())
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("a/b/state.json");
        write_atomic(&p, b"one", 0o644)?;
        write_atomic(&p, b"two", 0o644)?;
        assert_eq!(std::fs::read_to_string(&p)?, "two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("a/b"))?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        Ok(())
    }

    /// A link planted where the temp file used to be (`.NAME.gpuhost-tmp.<pid>`), or anything
    /// else at a temp file's name, is never written through.
    #[test]
    fn a_planted_temp_link_is_not_followed() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let shared = dir.path().join("textfiles");
        std::fs::create_dir_all(&shared)?;
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious")?;
        let planted = shared.join(format!(".m.prom.gpuhost-tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted)?;
        let p = shared.join("m.prom");
        write_atomic(&p, b"metrics", 0o644)?;
        assert_eq!(std::fs::read(&victim)?, b"precious");
        assert_eq!(std::fs::read(&p)?, b"metrics");
        assert!(std::fs::symlink_metadata(&planted)?
            .file_type()
            .is_symlink());
        let (f, tmp) = create_new_beside(&p, "partial", 0o600)?;
        drop(f);
        assert!(tmp.starts_with(&shared), "{}", tmp.display());
        let (_, other) = create_new_beside(&p, "partial", 0o600)?;
        assert_ne!(tmp, other, "two temp files, one name");
        Ok(())
    }

    #[test]
    fn open_regular_refuses_links_and_fifos() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let f = dir.path().join("f");
        std::fs::write(&f, b"x")?;
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&f, &link)?;
        let fifo = dir.path().join("p");
        let o = std::process::Command::new("mkfifo").arg(&fifo).output()?;
        assert!(o.status.success());
        assert!(open_regular(&f).is_ok());
        assert!(open_regular(&link).is_err());
        // Returns at once: no writer is waited for.
        assert!(open_regular(&fifo).is_err());
        Ok(())
    }

    #[test]
    fn formats_utc_times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_235_280), "2026-12-02T18:14:40Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
