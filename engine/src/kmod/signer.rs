//! The signing, after every process of the build has ended, out of the build's reach:
//! - each built module is taken out of the build folder into a folder of root's, each part of
//!   its path opened without following a link (a module, or a folder on its way, that the
//!   build made a link to a site file is refused, never stripped or signed in place);
//! - the kernel's `scripts/sign-file` is used only when its SHA-256 is the one the build root's
//!   rpm database holds for it (the kernel's devel package's file, as `rpm -V` checks it): a
//!   `sign-file` replaced by anyone never gets the key;
//! - the fleet key goes to that `sign-file` on its standard input, opened by gpuhost; it is
//!   never a file of the build root or of the build folder.

use std::os::fd::OwnedFd;
use std::path::Path;

use anyhow::{Context, Result};

use gpuhost_host::fsutil::sha256_read;
use gpuhost_host::host::Host;
use gpuhost_host::invalid;
use gpuhost_host::rootfs::Kind;

use super::inputs::FleetKey;

/// A module's file larger than this is not one of NVIDIA's (the open `nvidia.ko` is ~90 MB
/// unstripped).
const MAX_MODULE_BYTES: u64 = 1024 * 1024 * 1024;

/// Copy each module (`(name, location)`, both checked by [`super::dkmsconf`]) out of the build
/// folder `work_real` (a path of this machine) into `dest_real` (root's, made empty): the
/// copies' paths on this machine.
pub(super) fn take_modules(
    work_real: &Path,
    modules: &[(String, String)],
    dest_real: &Path,
    kver: &str,
) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for (name, at) in modules {
        let rel = if at.is_empty() {
            format!("{name}.ko")
        } else {
            format!("{at}/{name}.ko")
        };
        let from = open_inside(work_real, &rel).map_err(|e| {
            anyhow::anyhow!(
                "make built no {name}.ko for {kver} that can be taken ({rel} in the build folder: {e})"
            )
        })?;
        let to = dest_real.join(format!("{name}.ko"));
        copy_fd(from, &to).with_context(|| format!("copying {rel} to {}", to.display()))?;
        out.push(to);
    }
    Ok(out)
}

/// Whether `rel` is a regular file of `dir`, reached without a link ([`open_inside`]).
pub(super) fn check_inside(dir: &Path, rel: &str) -> std::io::Result<()> {
    open_inside(dir, rel).map(drop)
}

/// `rel` under `dir`, each folder on the way and the file itself opened without following a
/// link: a regular file of the build folder, or an error.
fn open_inside(dir: &Path, rel: &str) -> std::io::Result<OwnedFd> {
    use rustix::fs::{openat, Mode, OFlags, CWD};
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut at = openat(CWD, dir, dir_flags, Mode::empty())?;
    let parts: Vec<&str> = rel.split('/').collect();
    let Some((file, folders)) = parts.split_last() else {
        return Err(std::io::Error::other("an empty path"));
    };
    for f in folders {
        at = openat(&at, *f, dir_flags, Mode::empty())
            .map_err(|e| std::io::Error::other(format!("{f}: {e} (a link is not followed)")))?;
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = openat(&at, *file, flags, Mode::empty())
        .map_err(|e| std::io::Error::other(format!("{e} (a link is not followed)")))?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(fd)
}

fn copy_fd(from: OwnedFd, to: &Path) -> Result<()> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut src = std::fs::File::from(from).take(MAX_MODULE_BYTES);
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(to)?;
    std::io::copy(&mut src, &mut dst)?;
    Ok(())
}

/// The kernel's `sign-file` in the root, as its package installed it: a regular file of
/// root's, writable by no one else, whose SHA-256 (or SHA-512) is the digest the build root's
/// rpm database holds for that path. Its path in the root.
pub(super) fn verified_sign_file(host: &Host, sysdir: &str, kver: &str) -> Result<String> {
    let named = format!("{sysdir}/scripts/sign-file");
    let real = host.real_path(&named)?;
    let in_root = Path::new("/").join(real.strip_prefix(host.root()).unwrap_or(&real));
    let path = in_root.display().to_string();
    let refuse = |why: String| {
        invalid!(
            "{kver}'s {path} in the build root {} {why}, so the fleet key was not given to it and nothing was signed: reinstall the kernel's devel package (dnf reinstall), then build again",
            host.root().display()
        )
    };
    if host.kind_nofollow(&path) != Some(Kind::File) {
        return Err(refuse("is not a regular file".into()));
    }
    match host.owner_mode(&path) {
        Some((0, mode)) if mode & 0o022 == 0 => {}
        Some((uid, mode)) => {
            let m = mode & 0o7777;
            return Err(refuse(format!(
                "is uid {uid}'s, mode {m:o} (not root's alone)"
            )));
        }
        None => return Err(refuse("cannot be read".into())),
    }
    let (algo, want, nevra) = packaged_digest(host, &path).map_err(|e| refuse(format!("{e:#}")))?;
    let file = std::fs::File::open(&real).with_context(|| format!("reading {}", real.display()))?;
    let got = match algo {
        8 => sha256_read(file, &real)?,
        10 => sha512_read(file, &real)?,
        a => {
            return Err(refuse(format!(
                "has a digest of algorithm {a} in {nevra}, not SHA-256 or SHA-512"
            )))
        }
    };
    if got != want {
        return Err(refuse(format!(
            "is not the file {nevra} installed (its digest {got}, the rpm database's {want})"
        )));
    }
    Ok(path)
}

/// `(digest algorithm, digest, package)` the root's rpm database holds for `path`.
fn packaged_digest(host: &Host, path: &str) -> Result<(u32, String, String)> {
    let out = host
        .rpm()
        .args(["-qf", "--qf"])
        .arg("[%{FILENAMES}\t%{FILEDIGESTS}\n]@%{FILEDIGESTALGO} %{NEVRA}\n")
        .arg(path)
        .output()?;
    if !out.success() {
        return Err(anyhow::anyhow!(
            "belongs to no package of its rpm database ({})",
            gpuhost_host::cmd::tail_lines(&out.stdout, 1)
        ));
    }
    let mut digest = None;
    let mut tail = None;
    for line in out.stdout.lines() {
        if let Some(rest) = line.strip_prefix('@') {
            tail = rest.split_once(' ');
        } else if let Some((p, d)) = line.split_once('\t') {
            if p == path {
                digest = Some(d.to_string());
            }
        }
    }
    match (digest, tail) {
        (Some(d), Some((algo, nevra))) if !d.is_empty() => {
            Ok((algo.parse().unwrap_or(0), d, nevra.to_string()))
        }
        _ => Err(anyhow::anyhow!("has no digest in its rpm database")),
    }
}

fn sha512_read(mut r: impl std::io::Read, path: &Path) -> Result<String> {
    use sha2::{Digest, Sha512};
    let mut h = Sha512::new();
    std::io::copy(&mut r, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(gpuhost_host::fsutil::hex(&h.finalize()))
}

/// Sign each module (paths in the root, of root's folder) with the verified `sign_file`, run
/// in the build root as root once no process of the build is left, the key on its standard
/// input.
pub(super) fn sign(
    host: &Host,
    kver: &str,
    sign_file: &str,
    cert: &str,
    modules: &[String],
    fleet: &FleetKey,
) -> Result<()> {
    let config = gpuhost_host::kernel::config_of(host, kver).unwrap_or_default();
    let hash = config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_MODULE_SIG_HASH="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric()))
        .unwrap_or_else(|| "sha256".to_string());
    for m in modules {
        host.in_root(sign_file)
            .args([hash.as_str(), "/dev/fd/0", cert, m.as_str()])
            .stdin_file(&fleet.key)
            .run()
            .with_context(|| format!("signing {m} for {kver}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A module, or a folder on its way, that the build made a link (to a site file, to a
    /// folder outside) is never taken: only regular files reached without a link are.
    #[test]
    fn modules_are_taken_only_as_regular_files_reached_without_a_link() -> Result<()> {
        let d = tempfile::tempdir()?;
        let (work, site, dest) = (
            d.path().join("w"),
            d.path().join("site"),
            d.path().join("s"),
        );
        for p in [&work, &site, &dest] {
            std::fs::create_dir_all(p)?;
        }
        std::fs::create_dir_all(work.join("kernel-open"))?;
        std::fs::write(work.join("kernel-open/nvidia.ko"), b"module")?;
        std::fs::write(site.join("nvidia-uvm.ko"), b"a site file")?;
        symlink(site.join("nvidia-uvm.ko"), work.join("nvidia-uvm.ko"))?;
        symlink(&site, work.join("linked"))?;
        std::fs::write(site.join("nvidia-drm.ko"), b"a site file")?;
        let ok = take_modules(
            &work,
            &[("nvidia".into(), "kernel-open".into())],
            &dest,
            "k",
        )?;
        assert_eq!(std::fs::read(&ok[0])?, b"module");
        for (name, at) in [
            ("nvidia-uvm", ""),
            ("nvidia-drm", "linked"),
            ("missing", ""),
        ] {
            let e = take_modules(&work, &[(name.into(), at.into())], &dest, "k").err();
            assert!(format!("{e:?}").contains("make built no"), "{name}: {e:?}");
        }
        assert_eq!(std::fs::read(site.join("nvidia-uvm.ko"))?, b"a site file");
        Ok(())
    }
}
