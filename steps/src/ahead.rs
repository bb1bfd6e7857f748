//! A first converge's packages on local disk before its first write.
//!
//! A first converge is two dnf transactions: NVIDIA's local repo package (which brings the repo
//! the driver comes from), then everything else. dnf downloads and checks a transaction's
//! packages before that transaction writes anything (for `file://` mirrors too:
//! [`Host::dnf`]), but the second transaction's downloads would come after the first
//! transaction's write: a mirror lost in between would leave the local repo package installed
//! and nothing else. So before the first transaction, the second is resolved against the local
//! repo as the package file carries it (its payload, extracted into [`SCRATCH`]) and its
//! packages are downloaded into dnf's cache in the root (`dnf --downloadonly shell`, which
//! writes nothing else: no package, no module state). The second transaction then takes them
//! from there; the local repo's own packages are read from the root's disk, where the first
//! transaction unpacks them.

use std::path::Path;

use anyhow::{Context, Result};

use gpuhost_host::cmd::Cmd;
use gpuhost_host::error::hinted;
use gpuhost_host::host::{file_url, local_repo_dir, repo_entries, Host};

use crate::step::DnfFailure;
use crate::work::Install;

/// The scratch directory inside the root (removed when done, and by every apply's start).
pub const SCRATCH: &str = "/var/cache/gpuhost/download";

/// Download the packages of `second` before `first` runs (see the module doc). `Some` when dnf
/// could not have them all: its command and what it said, as a failed transaction's (nothing
/// was installed then); an error when the local repo package could not be read.
pub fn download(
    host: &Host,
    first: &[&Install],
    second: &[&Install],
) -> Result<Option<DnfFailure>> {
    let files: Vec<&str> = first
        .iter()
        .flat_map(|i| i.specs.iter())
        .map(String::as_str)
        .filter(|s| crate::work::is_package_file(s))
        .collect();
    if files.is_empty() || second.is_empty() {
        return Ok(None);
    }
    host.remove_tree(SCRATCH)?;
    host.create_dir_all(format!("{SCRATCH}/tree"))?;
    let result = download_in(host, &files, second);
    if let Err(e) = host.remove_tree(SCRATCH) {
        tracing::warn!("could not remove {SCRATCH}: {e:#}");
    }
    result
}

/// Remove the scratch directory a killed run left behind.
pub fn remove_left(host: &Host) -> Result<()> {
    host.remove_tree(SCRATCH).map(drop)
}

fn download_in(host: &Host, files: &[&str], second: &[&Install]) -> Result<Option<DnfFailure>> {
    let scratch = host.real_path(SCRATCH)?;
    let tree = scratch.join("tree");
    for f in files {
        unpack(host, f, &scratch, &tree)?;
    }
    let options = repo_options(host, &tree)?;
    let script = shell_script(second);
    host.write_atomic(format!("{SCRATCH}/download.dnf"), script.as_bytes(), 0o600)?;
    let mut cmd = host.dnf()?.arg("--downloadonly").args(options);
    if second.iter().any(|i| i.allowerasing) {
        cmd = cmd.arg("--allowerasing");
    }
    if second.iter().any(|i| i.disable_excludes) {
        cmd = cmd.arg("--disableexcludes=main");
    }
    let cmd = cmd.arg("shell").arg(scratch.join("download.dnf"));
    let mut out = cmd.output()?;
    // `dnf shell` goes on after an error and exits 0: its `Error` lines say.
    let failed = out
        .stderr
        .lines()
        .chain(out.stdout.lines())
        .any(|l| l.trim_start().starts_with("Error"));
    if out.success() && !failed {
        return Ok(None);
    }
    if out.success() {
        out.code = Some(1);
    }
    Ok(Some(DnfFailure { cmd, out }))
}

/// `rpm2cpio FILE | cpio` of the package's repo files and `/var` (where NVIDIA's local repo
/// package keeps its repo) into `tree`. A file that cannot be read whole is an error.
fn unpack(host: &Host, file: &str, scratch: &Path, tree: &Path) -> Result<()> {
    let payload = scratch.join("payload.cpio");
    Cmd::new("rpm2cpio")
        .arg(file)
        .stdout_file(&payload)
        .run()
        .map_err(|e| {
            hinted(
                format!("{file} could not be read before the first change ({e:#}); nothing was installed"),
                "check that the file's filesystem (an NFS export, a USB stick) is mounted and readable, then run gpuhost again",
            )
        })?;
    Cmd::new("cpio")
        .args(["-idm", "--quiet", "--no-absolute-filenames"])
        .args(["./etc/yum.repos.d/*", "./var/*"])
        .stdin_file(&payload)
        .current_dir(tree)
        .run()
        .with_context(|| format!("extracting the repo of {file}"))?;
    host.remove_file(format!("{SCRATCH}/payload.cpio"))?;
    Ok(())
}

/// dnf's options for each repo the unpacked packages carry (`--repofrompath`, and
/// `gpgcheck`/`gpgkey` as their `.repo` files say, keys read from the tree).
fn repo_options(host: &Host, tree: &Path) -> Result<Vec<String>> {
    let dir = format!("{SCRATCH}/tree/etc/yum.repos.d");
    let mut out = Vec::new();
    for name in host.list_dir(&dir).unwrap_or_default() {
        let Some(text) = host.read_opt(format!("{dir}/{name}"))? else {
            continue;
        };
        let mut repo: Option<(String, String)> = None;
        let mut extra: Vec<String> = Vec::new();
        let mut flush = |repo: &mut Option<(String, String)>, extra: &mut Vec<String>| {
            if let Some((id, path)) = repo.take() {
                let inner = tree.join(path.trim_start_matches('/'));
                let repomd = format!("{SCRATCH}/tree{path}/repodata/repomd.xml");
                if host.kind(repomd) == Some(gpuhost_host::rootfs::Kind::File) {
                    out.push(format!("--repofrompath={id},{}", file_url(&inner)));
                    out.append(extra);
                }
            }
            extra.clear();
        };
        let mut section = String::new();
        for (id, key, value) in repo_entries(&text) {
            if id != section {
                flush(&mut repo, &mut extra);
                section = id.to_string();
            }
            match key {
                "baseurl" => {
                    if let Some(p) = value.strip_prefix("file://").filter(|p| local_repo_dir(p)) {
                        repo = Some((id.to_string(), p.to_string()));
                    }
                }
                "gpgcheck" => extra.push(format!("--setopt={id}.gpgcheck={value}")),
                "gpgkey" => {
                    let keys: Vec<String> = value
                        .split([',', ' '])
                        .filter(|k| !k.is_empty())
                        .map(|k| match k.strip_prefix("file:///var/") {
                            Some(p) => file_url(&tree.join("var").join(p)),
                            None => k.to_string(),
                        })
                        .collect();
                    extra.push(format!("--setopt={id}.gpgkey={}", keys.join(",")));
                }
                _ => {}
            }
        }
        flush(&mut repo, &mut extra);
    }
    Ok(out)
}

/// The `dnf shell` script: the streams enabled, the packages installed, one `run` (which only
/// downloads: `--downloadonly`).
fn shell_script(second: &[&Install]) -> String {
    let mut out = String::new();
    let mut streams: Vec<&str> = second.iter().filter_map(|i| i.enable.as_deref()).collect();
    streams.sort_unstable();
    streams.dedup();
    for s in streams {
        out.push_str(&format!("module enable {s}\n"));
    }
    let mut words: Vec<String> = Vec::new();
    for m in second.iter().filter_map(|i| i.module.as_ref()) {
        let w = format!("@{m}");
        if !words.contains(&w) {
            words.push(w);
        }
    }
    for s in second.iter().flat_map(|i| i.specs.iter()) {
        if !words.contains(s) {
            words.push(s.clone());
        }
    }
    out.push_str(&format!("install {}\nrun\n", words.join(" ")));
    out
}
