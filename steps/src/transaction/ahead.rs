//! A first converge in one transaction, every package on the root's disk before its first
//! write.
//!
//! A first converge installs NVIDIA's local repo package, which brings the repo the driver comes
//! from, and the packages that come from that repo and from the mirrors (headers, compiler,
//! Docker, the toolkit). Two dnf transactions (the repo package, then the rest) would let a
//! mirror lost between them leave the repo package installed and nothing else, and they load
//! every repo's metadata twice. So it is one `dnf shell` transaction, as a driver swap is: the
//! local repo package is copied onto the root's disk and checked ([`gpuhost_host::stage`]), its
//! repo is read from the copy itself (its payload, unpacked into [`SCRATCH`]) under the repo id
//! its `.repo` file gives, and the transaction installs the package and the rest together. dnf
//! downloads and checks every package from the mirrors before the rpm transaction writes
//! anything ([`Host::dnf`]); the local repo's own packages are read from the scratch copy, on
//! the root's disk. `dnf shell` reports an error in a command and exits 0: its `Error` lines
//! make it a failure.

use std::path::Path;

use anyhow::{Context, Result};

use gpuhost_host::cmd::{Cmd, CmdOutput};
use gpuhost_host::error::hinted;
use gpuhost_host::host::{file_url, local_repo_dir, repo_entries, Host};

use super::cache::RepoCache;
use crate::transaction::payload::{self, Unpack};
use crate::work::Install;

/// The scratch directory inside the root (removed when done, and by every apply's start).
pub const SCRATCH: &str = "/var/cache/gpuhost/download";
/// The package's payload, unpacked inside [`SCRATCH`].
const TREE: &str = "/var/cache/gpuhost/download/tree";

/// The one transaction of `parts` (a [`Batch::Merged`](super::Batch::Merged)): its command and what dnf printed (see the module
/// doc). An error when the local repo package cannot be copied or read, before any change.
pub fn transaction(host: &Host, parts: &[&Install]) -> Result<(Cmd, CmdOutput)> {
    let mut staged = Vec::new();
    // The package files: those that bring a repo (unpacked for it), then the others (prebuilt
    // kmods), each copied onto the root's disk and checked before the first write. One read
    // ahead before the first change (super::ready) is taken as it is: staged, checked, its
    // repos unpacked into SCRATCH. A package whose driver set gpuhost caches
    // (`driver.keep_local_repo = false`) is read for its repo and not installed.
    let (mut files, mut others, mut unpacked) = (Vec::new(), Vec::new(), Vec::new());
    let mut read_only = Vec::new();
    for i in parts.iter().filter(|i| i.brings_repo) {
        for spec in i.specs.iter().filter(|s| crate::work::is_package_file(s)) {
            if let Some(ready) = super::ready::take(Path::new(spec)) {
                let path = ready.staged.path().display().to_string();
                unpacked.push(path.clone());
                files.push(path);
                staged.push(ready.staged);
            }
        }
    }
    for i in parts {
        for spec in i.specs.iter().filter(|s| crate::work::is_package_file(s)) {
            // One staging per file, however many parts name it.
            if staged
                .iter()
                .any(|c: &gpuhost_host::stage::Staged| c.source() == Path::new(spec))
            {
                continue;
            }
            let copy = gpuhost_host::stage::copy_in(host, Path::new(spec))?;
            let path = copy.path().display().to_string();
            if i.brings_repo {
                files.push(path);
            } else {
                others.push(path);
            }
            staged.push(copy);
        }
        if matches!(i.cache, Some(RepoCache::Place { .. })) {
            for spec in i.specs.iter().filter(|s| crate::work::is_package_file(s)) {
                if let Some(c) = staged.iter().find(|c| c.source() == Path::new(spec)) {
                    read_only.push(c.path().display().to_string());
                }
            }
        }
    }
    if unpacked.is_empty() {
        host.remove_tree(SCRATCH)?;
        host.create_dir_all(format!("{SCRATCH}/tree"))?;
    }
    let result = transaction_in(host, (&files, &others), (&unpacked, &read_only), parts).and_then(
        |(cmd, out)| {
            if out.success() {
                settle_cache(host, parts)?;
            }
            Ok((cmd, out))
        },
    );
    if let Err(e) = host.remove_tree(SCRATCH) {
        tracing::warn!("could not remove {SCRATCH}: {e:#}");
    }
    drop(staged);
    result
}

/// Once the transaction succeeded: gpuhost's driver cache as the parts ask
/// (`driver.keep_local_repo`, [`super::cache`]): the driver set read out into [`SCRATCH`]
/// cached, or the cache removed now that NVIDIA's package is installed.
fn settle_cache(host: &Host, parts: &[&Install]) -> Result<()> {
    for i in parts.iter().filter(|i| i.brings_repo) {
        match &i.cache {
            Some(RepoCache::Place {
                package,
                version,
                driver,
            }) => {
                let file = i
                    .specs
                    .iter()
                    .find(|s| crate::work::is_package_file(s))
                    .map_or("", String::as_str);
                let source = super::cache::Source {
                    package,
                    version,
                    driver,
                    file,
                };
                super::cache::place(host, SCRATCH, &source).with_context(|| {
                    format!("the driver set of {package} was installed, but could not be cached (run gpuhost again)")
                })?;
            }
            Some(RepoCache::Bundle { meta, packages }) => {
                super::cache::place_from_bundle(host, Path::new(meta), Path::new(packages))
                    .context("the driver set was installed from the bundle, but could not be cached (run gpuhost again)")?;
            }
            Some(RepoCache::Drop) if super::cache::drop_all(host)? => {
                tracing::info!("gpuhost's driver cache was removed: NVIDIA's local repo package is installed (driver.keep_local_repo = true)");
            }
            _ => {}
        }
    }
    Ok(())
}

/// Remove the scratch directory a killed run left behind.
pub fn remove_left(host: &Host) -> Result<()> {
    host.remove_tree(SCRATCH).map(drop)
}

/// The transaction: `files` bring a repo (those in `unpacked` read out already, those in
/// `read_only` not installed: their driver set is cached), `others` are installed besides.
fn transaction_in(
    host: &Host,
    (files, others): (&[String], &[String]),
    (unpacked, read_only): (&[String], &[String]),
    parts: &[&Install],
) -> Result<(Cmd, CmdOutput)> {
    let tree = host.real_path(SCRATCH)?.join("tree");
    for f in files.iter().filter(|f| !unpacked.contains(f)) {
        unpack(f, &tree)?;
    }
    let options = repo_options(host, &tree)?;
    let rest: Vec<&Install> = parts.iter().copied().filter(|i| !i.brings_repo).collect();
    let rest = crate::work::expand_profiles(host, &rest, &options)?;
    let rest: Vec<&Install> = rest.iter().collect();
    let (streams, words) = crate::work::shell_jobs(&rest);
    let remove = crate::work::removals(parts);
    let installed: Vec<String> = files
        .iter()
        .filter(|f| !read_only.contains(f))
        .chain(others)
        .cloned()
        .collect();
    let script = super::shell::script(&installed, &streams, &words, &remove);
    super::shell::run(
        host,
        (&format!("{SCRATCH}/converge.dnf"), &script),
        &options,
        &crate::work::dnf_flags(parts),
    )
}

/// The package's repo files and its repos (less the CUDA toolkit's packages), unpacked into
/// `tree` ([`payload::unpack_repos`]). A file that cannot be read whole is an error; a package
/// gpuhost refuses is bad input.
fn unpack(file: &str, tree: &Path) -> Result<()> {
    payload::unpack_repos(file, tree).map(drop).map_err(|e| match e {
        Unpack::Unreadable(e) => hinted(
            format!("{file} could not be read before the first change ({e:#}); nothing was installed"),
            "check that the file's filesystem (an NFS export, a USB stick) is mounted and readable, then run gpuhost again",
        ),
        Unpack::Bad(e) => gpuhost_host::error::as_invalid(hinted(
            format!("{e:#}; nothing was installed"),
            "use NVIDIA's local repo package as NVIDIA ships it (download it again and check its SHA-256)",
        )),
        Unpack::Unextracted(e) => e.context(format!("extracting the repo of {file}")),
    })
}

/// dnf's options for each repo the unpacked packages carry (`--repofrompath`, and
/// `gpgcheck`/`gpgkey` as their `.repo` files say, keys read from the tree).
fn repo_options(host: &Host, tree: &Path) -> Result<Vec<String>> {
    let dir = format!("{SCRATCH}/tree/etc/yum.repos.d");
    let mut defined: Vec<String> = Vec::new();
    for name in host.files_with_prefix("/etc/yum.repos.d", "") {
        if let Some(text) = host.read_opt(format!("/etc/yum.repos.d/{name}"))? {
            defined.extend(
                repo_entries(&text)
                    .into_iter()
                    .map(|(id, _, _)| id.to_string()),
            );
        }
    }
    let mut out = Vec::new();
    for name in host.list_dir(&dir).unwrap_or_default() {
        let Some(text) = host.read_opt(format!("{dir}/{name}"))? else {
            continue;
        };
        let mut section = Section::default();
        for (id, key, value) in repo_entries(&text) {
            if id != section.id {
                section.flush(host, tree, &defined, &name, &mut out)?;
                section = Section {
                    id: id.to_string(),
                    ..Section::default()
                };
            }
            match key {
                "baseurl" => {
                    if let Some(p) = value.strip_prefix("file://").filter(|p| local_repo_dir(p)) {
                        section.path = Some(p.to_string());
                    }
                }
                "gpgcheck" => section.gpgcheck = Some(value.to_string()),
                "gpgkey" => section.keys.extend(
                    value
                        .split([',', ' '])
                        .filter(|k| !k.is_empty())
                        .map(str::to_string),
                ),
                _ => {}
            }
        }
        section.flush(host, tree, &defined, &name, &mut out)?;
    }
    Ok(out)
}

/// One section of a `.repo` file the package carries, read whole before dnf is told of it.
#[derive(Default)]
struct Section {
    id: String,
    /// The `file:///var/<local repo>` baseurl's path.
    path: Option<String>,
    gpgcheck: Option<String>,
    keys: Vec<String>,
}

impl Section {
    /// dnf's options for the section's repo when the package carries it (its repodata is in the
    /// tree): the repo from the copy, and its gpgcheck and keys ([`payload::repo_key`]: its own
    /// keys only, read from the tree; any other is bad input).
    fn flush(
        &self,
        host: &Host,
        tree: &Path,
        defined: &[String],
        file: &str,
        out: &mut Vec<String>,
    ) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let id = &self.id;
        let inner = tree.join(path.trim_start_matches('/'));
        let repomd = format!("{SCRATCH}/tree{path}/repodata/repomd.xml");
        if host.kind(repomd) != Some(gpuhost_host::rootfs::Kind::File) {
            return Ok(());
        }
        // A repo of that id the root defines already (its `.repo` file left by a run stopped
        // mid-way) is pointed at the copy; dnf refuses a second one.
        if defined.contains(id) {
            out.push(format!("--setopt={id}.baseurl={}", file_url(&inner)));
        } else {
            out.push(format!("--repofrompath={id},{}", file_url(&inner)));
        }
        if let Some(v) = &self.gpgcheck {
            out.push(format!("--setopt={id}.gpgcheck={v}"));
        }
        if !self.keys.is_empty() {
            let keys = self
                .keys
                .iter()
                .map(|k| {
                    let repo_file = format!("/etc/yum.repos.d/{file}");
                    payload::repo_key(host, k, (tree, TREE), path, &repo_file)
                })
                .collect::<Result<Vec<_>>>()?;
            out.push(format!("--setopt={id}.gpgkey={}", keys.join(",")));
        }
        Ok(())
    }
}
