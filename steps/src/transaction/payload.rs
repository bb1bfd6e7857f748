//! A package's files read before it is installed, by gpuhost's own reader
//! ([`gpuhost_host::rpmfile`]): the payload streamed once, only the files a caller asks for
//! written into a scratch tree on the root's disk, each checked against the package's header
//! (and, for a local repo's packages, against the repo's own metadata) before the first change.
//! A first converge reads NVIDIA's local repo out of it ([`crate::transaction::ahead`]), a
//! driver swap the new driver's ([`crate::transaction::swap`]), the build host the DKMS source.

use std::path::Path;

use anyhow::Result;

use gpuhost_host::error::{as_invalid, hinted};
use gpuhost_host::host::{local_repo_dir, Host};
use gpuhost_host::rootfs::Kind;
use gpuhost_host::rpmfile::{self, Fault, FileInfo, Want};

/// Why a payload was not unpacked: the package could not be read whole (its filesystem), the
/// package is bad input (refused: exit 2), or the files could not be written. Each caller says
/// it in its own words.
pub(crate) enum Unpack {
    Unreadable(anyhow::Error),
    Bad(anyhow::Error),
    Unextracted(anyhow::Error),
}

impl From<Fault> for Unpack {
    fn from(f: Fault) -> Self {
        match f {
            Fault::Bad(why) => Unpack::Bad(as_invalid(anyhow::anyhow!("{why}"))),
            Fault::Source(e) => Unpack::Unreadable(e),
            Fault::Write(..) => Unpack::Unextracted(anyhow::anyhow!("{f}")),
            Fault::Interrupted(sig) => Unpack::Unextracted(anyhow::Error::new(
                gpuhost_host::interrupt::Interrupted(format!(
                    "stopped by {} while reading a package, before any change",
                    gpuhost_host::interrupt::name(sig)
                )),
            )),
        }
    }
}

/// NVIDIA's local repo package `rpm` read for its repos: its `.repo` files and, of its repo
/// folders (`/var/cuda-repo-…`, `/var/nvidia-driver-local-repo-…`), the metadata, keys and every
/// package but the CUDA toolkit's (a container host installs none of them: their GBs stay in
/// the package; anything else there is not read either), written under `tree` (a folder on this machine). Anything the payload holds
/// outside those folders, or a link leaving them, refuses the package; each extracted package
/// is checked against its repo metadata's checksum.
pub(crate) fn unpack_repos(rpm: &str, tree: &Path) -> Result<rpmfile::Package, Unpack> {
    unpack_repos_named(Path::new(rpm), Path::new(rpm), tree)
}

/// [`unpack_repos`] of `file`, a copy of `named` on the root's disk (what is wrong with it is
/// said of `named`). The package, for what else its header says.
pub(crate) fn unpack_repos_named(
    file: &Path,
    named: &Path,
    tree: &Path,
) -> Result<rpmfile::Package, Unpack> {
    read_local_repo((file, named), tree, &|_| true)
}

/// NVIDIA's local repo package `file` (a copy of `named`) judged as a node's transaction
/// judges it — its own folders only, every entry against its header, [`selected`]'s files as
/// files to extract, every package against its repo's metadata — with those of the selected
/// files that `only` takes written under `tree` (the repo metadata always). Every caller
/// (apply, plan, a swap, the cache, `kmod build`) reads a local repo package this way, so one
/// package gets one answer.
fn read_local_repo(
    (file, named): (&Path, &Path),
    tree: &Path,
    only: &dyn Fn(&FileInfo) -> bool,
) -> Result<rpmfile::Package, Unpack> {
    let pkg = rpmfile::package(file)?;
    let allowed = own_folders(&pkg.files);
    let select = |f: &FileInfo| selected(&f.path);
    let want = Want {
        allowed: &allowed,
        select: &select,
    };
    let write = |f: &FileInfo| f.path.contains("/repodata/") || only(f);
    let (pkg, _) = rpmfile::verify_keeping((file, named), &want, tree, &write)?;
    repos_agree(&pkg, &allowed, tree, &named.display().to_string())?;
    Ok(pkg)
}

/// Every package file of the local repo package `pkg` (extracted or not: a toolkit's too)
/// matches its repo's metadata (written under `tree`), by the digest its header gives it,
/// which the reader held every file's data to. `rpm` names the package in the message.
fn repos_agree(
    pkg: &rpmfile::Package,
    allowed: &[String],
    tree: &Path,
    rpm: &str,
) -> Result<(), Unpack> {
    for folder in allowed.iter().filter(|a| local_repo_dir(a)) {
        let repo = tree.join(folder.trim_start_matches('/'));
        if !repo.join("repodata/repomd.xml").is_file() {
            continue;
        }
        let prefix = format!("{folder}/");
        let rpms: Vec<(String, String)> = pkg
            .files
            .iter()
            .filter(|f| f.is_file() && !f.ghost && f.path.ends_with(".rpm"))
            .filter_map(|f| {
                let href = f.path.strip_prefix(&prefix)?;
                Some((href.to_string(), f.digest.clone()))
            })
            .collect();
        let fault = |e: anyhow::Error| {
            Unpack::Bad(as_invalid(e.context(format!("{rpm}: the repo {folder}"))))
        };
        let sums = rpmfile::repodata::checksums(&repo).map_err(fault)?;
        rpmfile::repodata::verify(&repo, &rpms, &sums).map_err(fault)?;
    }
    Ok(())
}

/// The bytes [`unpack_repos`] writes for the package `rpm` (its header's sizes of the files it
/// selects); `None` when the header cannot be read.
pub(crate) fn repos_size(rpm: &Path) -> Option<u64> {
    let pkg = rpmfile::package(rpm).ok()?;
    Some(
        pkg.files
            .iter()
            .filter(|f| f.is_file() && selected(&f.path))
            .map(|f| f.size)
            .sum(),
    )
}

/// NVIDIA's local repo package `rpm` read whole without writing anything: its header's and
/// payload's digests (what `rpm -K` checks), and every entry inside the package's own folders
/// ([`unpack_repos`]'s rules). The package, for what else its header says.
///
/// Judged as [`unpack_repos`] judges it, with the repo metadata alone written (into a private
/// scratch folder of this machine, removed again) to hold every package file to: a check and
/// the change after it give one answer.
pub(crate) fn verify_repos(rpm: &Path) -> Result<rpmfile::Package, Unpack> {
    let scratch =
        gpuhost_host::fsutil::private_temp_dir("gpuhost-verify").map_err(Unpack::Unextracted)?;
    let read = read_local_repo((rpm, rpm), &scratch, &|_| false);
    gpuhost_host::fsutil::remove_temp_dir(&scratch);
    read
}

/// The files of NVIDIA's local repo package `rpm` whose paths start with one of `prefixes`,
/// written into the root's folder `tree`, the package judged as a node's transaction judges it
/// ([`read_local_repo`]): what the build host's `kmod build` reads the DKMS source from.
pub fn extract_from_local_repo(
    host: &Host,
    rpm: &str,
    tree: &str,
    prefixes: &[&str],
) -> Result<()> {
    host.create_dir_all(tree)?;
    let real = host.real_path(tree)?;
    let only = |f: &FileInfo| prefixes.iter().any(|p| f.path.starts_with(p));
    read_local_repo((Path::new(rpm), Path::new(rpm)), &real, &only)
        .map(drop)
        .map_err(|e| match e {
            Unpack::Unreadable(e) => e.context(format!("{rpm} could not be read whole")),
            Unpack::Bad(e) => e,
            Unpack::Unextracted(e) => {
                e.context(format!("extracting {} of {rpm}", prefixes.join(" ")))
            }
        })
}

/// What [`unpack_repos`] takes of a local repo package: the `.repo` files, the repo metadata,
/// keys, and every package but the CUDA toolkit's.
fn selected(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or_default();
    path.starts_with("/etc/yum.repos.d/")
        || path.contains("/repodata/")
        || is_key(name)
        || (name.ends_with(".rpm")
            && !gpuhost_nvidia::localrepo::is_toolkit(
                &package_name(name).unwrap_or_else(|| name.to_string()),
            ))
}

/// A repo's signing key, as NVIDIA's and the distributions' repos name them (`D42D0685.pub`,
/// `RPM-GPG-KEY-…`, `*.gpg`, `*.asc`, `*.key`).
fn is_key(name: &str) -> bool {
    name.starts_with("RPM-GPG-KEY")
        || [".pub", ".gpg", ".asc", ".key"]
            .iter()
            .any(|e| name.ends_with(e))
}

/// The folders a local repo package may hold files in: `/etc/yum.repos.d` and the local repo
/// folders its files lie in.
fn own_folders(files: &[FileInfo]) -> Vec<String> {
    let mut out = vec!["/etc/yum.repos.d".to_string()];
    for f in files {
        let mut parts = f.path.splitn(4, '/');
        if let (Some(""), Some("var"), Some(name)) = (parts.next(), parts.next(), parts.next()) {
            let dir = format!("/var/{name}");
            if local_repo_dir(&dir) && !out.contains(&dir) {
                out.push(dir);
            }
        }
    }
    out
}

/// The package name of a package file's path (`…/nvidia-driver-3:580.82.07-1.el9.x86_64.rpm`
/// → `nvidia-driver`): the file name less `-version-release.arch.rpm`; `None` for a file
/// that is not named so.
pub fn package_name(path: &str) -> Option<String> {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.strip_suffix(".rpm")?;
    let mut parts = stem.rsplitn(3, '-');
    let (_release, _version, name) = (parts.next()?, parts.next()?, parts.next()?);
    (!name.is_empty()).then(|| name.to_string())
}

/// The files of the package file `rpm` (a path on this machine) whose paths start with one of
/// `prefixes` (`/usr/src/`), written into the root's folder `tree` (made if missing). One reader
/// for every caller: a first converge, a driver swap, the build host's kmod build.
pub fn extract(host: &Host, rpm: &str, tree: &str, prefixes: &[&str]) -> Result<()> {
    host.create_dir_all(tree)?;
    let real = host.real_path(tree)?;
    let all = ["/".to_string()];
    let select = |f: &FileInfo| prefixes.iter().any(|p| f.path.starts_with(p));
    let want = Want {
        allowed: &all,
        select: &select,
    };
    rpmfile::extract(Path::new(rpm), &want, &real)
        .map(drop)
        .map_err(|f| match Unpack::from(f) {
            Unpack::Unreadable(e) => e.context(format!("{rpm} could not be read whole")),
            Unpack::Bad(e) => e,
            Unpack::Unextracted(e) => {
                e.context(format!("extracting {} of {rpm}", prefixes.join(" ")))
            }
        })
}

/// A `gpgkey` of a `.repo` file the package carries, as dnf is to read it: an `https:` URL as it
/// is; a `file://` key inside the package's own repo directory `under` (normalised: `.` and
/// `..` resolved) as the file of the unpacked tree, which must be a regular file there with no
/// link on the way (the tree is `tree.0` on this machine, `tree.1` in the root). Anything else
/// (a file elsewhere, `..` out of the directory, a link, `http:`, `ftp:`) is bad input: a
/// package's repo never makes dnf read the build host. `repo_file` names the `.repo` file in
/// the message.
pub(crate) fn repo_key(
    host: &Host,
    key: &str,
    tree: (&Path, &str),
    under: &str,
    repo_file: &str,
) -> Result<String> {
    if key.starts_with("https://") {
        return Ok(key.to_string());
    }
    let refuse = |why: &str| {
        gpuhost_host::error::as_invalid(hinted(
            format!("{repo_file} in the local repo package names gpgkey={key}, {why}; nothing was installed"),
            "use NVIDIA's local repo package as NVIDIA ships it: its .repo file names its own key, in its own repo directory",
        ))
    };
    let Some(path) = key.strip_prefix("file://") else {
        return Err(refuse(
            "which is neither an https: URL nor a file of the package's own repo",
        ));
    };
    let Some(normal) = normalised(path) else {
        return Err(refuse("whose `..` leaves the root"));
    };
    let under = under.trim_end_matches('/');
    if !normal.starts_with(&format!("{under}/")) {
        return Err(refuse(&format!(
            "a file outside the package's own repo directory {under}"
        )));
    }
    // Each component from the tree down, as written and as normalised, not followed: a link of
    // the payload may lead anywhere, and a `..` after a link (`zz-b/..` with `zz-b -> .`) is
    // not where it reads. With every named component a directory, `..` means what it says.
    if !plain_components(host, tree.1, path) || !plain_components(host, tree.1, &normal) {
        return Err(refuse(
            "which the package does not carry as a file of its own repo (missing, or a link on the way)",
        ));
    }
    Ok(format!(
        "file://{}",
        tree.0.join(normal.trim_start_matches('/')).display()
    ))
}

/// Every named component of `path` (taken as written, `..` included) under the root folder
/// `tree` is a directory, the last a regular file; none is a link.
fn plain_components(host: &Host, tree: &str, path: &str) -> bool {
    let mut inside = tree.trim_end_matches('/').to_string();
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !matches!(*c, "" | "."))
        .collect();
    parts.iter().enumerate().all(|(i, c)| {
        inside.push('/');
        inside.push_str(c);
        let want = if i + 1 == parts.len() {
            Kind::File
        } else {
            Kind::Dir
        };
        *c == ".." || host.kind_nofollow(&inside) == Some(want)
    })
}

/// `path` with `.` and `..` resolved and repeated `/` folded (`None` when `..` would climb out of
/// `/`). Lexical only: links are judged on the files themselves.
fn normalised(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// What gpuhost's reader found wrong with the local repo package `path`, as the user is told:
/// a package cut short or damaged, or one whose payload leaves its folders, is bad input; a
/// file that cannot be read is its filesystem's fault; an interruption stays one.
pub(crate) fn read_fault(path: &Path, e: Unpack) -> anyhow::Error {
    match e {
        Unpack::Bad(e) => as_invalid(hinted(
            format!("{e:#}; nothing was installed"),
            "download NVIDIA's local repo package again and compare its SHA-256 with NVIDIA's published checksum",
        )),
        Unpack::Unreadable(e) => hinted(
            format!("{} could not be read whole ({e:#}); nothing was installed", path.display()),
            "check that the file's filesystem (an NFS export, a USB stick) is mounted and readable, then run gpuhost again",
        ),
        Unpack::Unextracted(e) => e,
    }
}

/// `rpm -K` of `file` (the package `path`, whose header is `pkg`, or its copy on the root's
/// disk), against the root's keys, when gpuhost's reader cannot stand for it: a signed package
/// (its signature), or one too old for a payload digest.
pub(crate) fn signature_intact(
    host: &Host,
    pkg: &rpmfile::Package,
    file: &Path,
    path: &Path,
) -> Result<()> {
    if !pkg.signed && pkg.payload_sha256.is_some() {
        return Ok(());
    }
    let out = host.rpm().arg("-Kv").arg(file).output()?;
    let faults = gpuhost_host::rpm::checksig_faults(&out.stdout, &out.stderr, out.success());
    if faults.is_empty() {
        return Ok(());
    }
    Err(hinted(
        format!(
            "{} is damaged or cut short: rpm -K: {}; nothing was installed",
            path.display(),
            faults.join(", ")
        ),
        "download NVIDIA's local repo package again and compare its SHA-256 with NVIDIA's published checksum",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root with an unpacked tree at `/scratch/tree` holding `repo`'s key `D42D0685.pub`, and
    /// a link `out.pub` beside it to the build host's `/etc/shadow`.
    fn tree_with_key(repo: &str) -> anyhow::Result<(tempfile::TempDir, Host, PathBufPair)> {
        let tmp = tempfile::tempdir()?;
        let tree = tmp.path().join("scratch/tree");
        std::fs::create_dir_all(tree.join(&repo[1..]))?;
        std::fs::write(tree.join(&repo[1..]).join("D42D0685.pub"), "key")?;
        std::os::unix::fs::symlink("/etc/shadow", tree.join(&repo[1..]).join("out.pub"))?;
        let host = Host::new(tmp.path())?;
        Ok((tmp, host, (tree, "/scratch/tree")))
    }

    type PathBufPair = (std::path::PathBuf, &'static str);

    #[test]
    fn a_key_the_package_carries_is_read_from_the_tree() -> anyhow::Result<()> {
        let repo = "/var/nvidia-driver-local-repo-rhel9-580.82.07";
        let (_tmp, host, (tree, inside)) = tree_with_key(repo)?;
        let t = (tree.as_path(), inside);
        let key = format!("file://{repo}/D42D0685.pub");
        let want = format!(
            "file://{}",
            tree.join(&repo[1..]).join("D42D0685.pub").display()
        );
        assert_eq!(repo_key(&host, &key, t, "/var/", "r.repo")?, want);
        assert_eq!(repo_key(&host, &key, t, repo, "r.repo")?, want);
        // `.` and `..` inside the repo are resolved, where each named folder is one there
        // (issue 53: as the kernel resolves `x/..`: a folder `x` missing, or a link, is not).
        let dotted = format!("file://{repo}/./x/../D42D0685.pub");
        assert!(repo_key(&host, &dotted, t, repo, "r.repo").is_err());
        std::fs::create_dir(tree.join(&repo[1..]).join("x"))?;
        assert_eq!(repo_key(&host, &dotted, t, repo, "r.repo")?, want);
        let https = "https://x/key.pub";
        assert_eq!(repo_key(&host, https, t, "/var/", "r.repo")?, https);
        Ok(())
    }

    #[test]
    fn a_key_outside_the_packages_repo_is_invalid_input() -> anyhow::Result<()> {
        let repo = "/var/nvidia-driver-local-repo-rhel9-580.82.07";
        let (_tmp, host, (tree, inside)) = tree_with_key(repo)?;
        let t = (tree.as_path(), inside);
        for key in [
            "file:///etc/pki/key".to_string(),
            format!("file://{repo}/../../tmp/key.pub"),
            "file:///../../etc/shadow".to_string(),
            format!("file://{repo}/out.pub"),
            format!("file://{repo}/missing.pub"),
            "http://example.com/key.pub".to_string(),
            "ftp://example.com/key.pub".to_string(),
            "/etc/shadow".to_string(),
            // Another local repo's directory is not this package's.
            "file:///var/cuda-repo-rhel9-13-0-local/key.pub".to_string(),
        ] {
            let e = repo_key(&host, &key, t, repo, "r.repo").err();
            assert!(
                e.as_ref().is_some_and(gpuhost_host::error::is_invalid),
                "{key}: {e:?}"
            );
            assert!(format!("{e:?}").contains(&key), "{e:?}");
        }
        Ok(())
    }
}
