//! gpuhost's cache of NVIDIA's driver set, for `driver.keep_local_repo = false` (issue 42).
//!
//! NVIDIA's procedure installs the local repo package: the node then keeps the whole repo,
//! the CUDA toolkit's gigabytes with it, under `/var/<package>`. A container host needs none of
//! the toolkit (CUDA runs in containers), so with `driver.keep_local_repo = false` the package
//! is not installed. The transaction that would have installed it (a first converge, a driver
//! swap) reads its repo out of the package file once, as it always does
//! ([`super::payload::unpack_repos`]: the metadata as NVIDIA ships it, the keys, and every
//! package but the toolkit's, each checked against the metadata's checksum), installs the
//! driver set from there, and once dnf has done so, that checked tree becomes the cache:
//! `/var/lib/gpuhost/driver-repo/<package>-<version>/` ([`gpuhost_host::host::DRIVER_CACHE`]),
//! with a manifest ([`Cached`]) saying what it came from. gpuhost's own repo file
//! ([`REPO_FILE`]) gives dnf that folder under the package's own repo id, with NVIDIA's
//! `gpgcheck` and keys, and `includepkgs` naming the packages the cache holds: dnf never offers
//! a toolkit package it cannot read. The repo file names the current set; the set before it
//! stays cached for a rollback ([`place`] keeps those two and removes the rest).
//! `driver.keep_local_repo = true` again installs NVIDIA's package and removes the cache
//! ([`drop_all`]).
//!
//! A bundle (`gpuhost bundle`) carries the same driver set instead of NVIDIA's package: the
//! package's repo metadata and keys with the manifest in a folder of the bundle, read by the same
//! reader on the build host ([`read_for_bundle`]), the packages in the bundle's repo; a node that
//! installed the set from the bundle caches it, each package checked against NVIDIA's metadata
//! again ([`place_from_bundle`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use gpuhost_host::error::hinted;
use gpuhost_host::host::{repo_entries, Host, DRIVER_CACHE};

pub use super::payload::package_name;

/// gpuhost's repo file for the cached driver set.
pub const REPO_FILE: &str = "/etc/yum.repos.d/gpuhost-driver-repo.repo";
/// The manifest in each cached repo folder.
const MANIFEST: &str = "gpuhost-cache.json";

/// What a cached repo folder holds and where it came from (its manifest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cached {
    /// NVIDIA's local repo package it was read from (`cuda-repo-rhel9-13-0-local`).
    pub package: String,
    /// Its version as rpm gives it (`13.0.1_580.82.07`; a driver-only package's `1.0`).
    pub version: String,
    /// The driver it carries.
    pub driver: String,
    /// The package file it was read from.
    pub source: String,
    /// The repo id NVIDIA's `.repo` file gives it.
    pub repo_id: String,
    /// `gpgcheck` as NVIDIA's `.repo` file says.
    pub gpgcheck: String,
    /// Its keys as dnf reads them: `file://` URLs into the cached folder (in the root), or
    /// `https://` as NVIDIA gives them.
    pub keys: Vec<String>,
    /// The names of the packages it holds (what `includepkgs` lets dnf see).
    pub packages: Vec<String>,
    /// Their bytes.
    pub bytes: u64,
}

/// What becomes of gpuhost's driver cache after a transaction that brings NVIDIA's local repo
/// (`driver.keep_local_repo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepoCache {
    /// `false`: the package is read, not installed; its driver set is cached. Its name, its
    /// version (rpm's) and its driver.
    Place {
        package: String,
        version: String,
        driver: String,
    },
    /// `true`: NVIDIA's package is installed; gpuhost's cache goes.
    Drop,
    /// From a bundle (`apply --bundle`): the driver set's metadata the bundle carries
    /// (`meta`, a folder of the bundle: NVIDIA's repodata and keys and the cache manifest) and
    /// its packages from the bundle's repo (`packages`) cached, checked against NVIDIA's
    /// metadata ([`place_from_bundle`]). Paths on the machine gpuhost runs on.
    Bundle { meta: String, packages: String },
}

impl Cached {
    /// The manifest of a folder read out of `source`: NVIDIA's repo section for it, and the
    /// packages the folder holds with their bytes.
    fn of(source: &Source<'_>, repo: NvidiaRepo, (packages, bytes): (Vec<String>, u64)) -> Cached {
        Cached {
            package: source.package.to_string(),
            version: source.version.to_string(),
            driver: source.driver.to_string(),
            source: source.file.to_string(),
            repo_id: repo.id,
            gpgcheck: repo.gpgcheck,
            keys: repo.keys,
            packages,
            bytes,
        }
    }
}

/// The version a cached folder is named by: the package file name's, or its driver's (a
/// driver-only file name may give none).
pub fn version_of(name: &gpuhost_nvidia::localrepo::LocalRepoFile) -> String {
    name.version.clone().unwrap_or_else(|| name.driver.clone())
}

/// The package a cache is placed from: what the transaction read.
pub struct Source<'a> {
    pub package: &'a str,
    pub version: &'a str,
    pub driver: &'a str,
    pub file: &'a str,
}

/// The cached repo folder of a local repo package: `<DRIVER_CACHE>/<package>-<version>`.
pub fn dir_of(package: &str, version: &str) -> String {
    format!("{DRIVER_CACHE}/{package}-{version}")
}

/// The cached repo folder `dir`, when it is one gpuhost may take (issue 53, item 2): its
/// manifest read, root's, writable by no one else, no link from `/var/lib/gpuhost` down
/// ([`gpuhost_host::trust`]); every value in it valid as input is ([`Cached::invalid`]); the
/// folder's entries plain files and folders only (a link out of the root, a FIFO: refused
/// unopened); its metadata present. Its `packages` are the manifest's names that the folder
/// holds a package file of: the manifest alone names nothing a rollback erases. A folder that
/// fails any of these is no cache, with a warning.
pub fn read(host: &Host, dir: &str) -> Option<Cached> {
    let manifest = format!("{dir}/{MANIFEST}");
    host.kind_nofollow(&manifest)?;
    let refused = |why: String| {
        gpuhost_host::trust::warn_once(format!(
            "{why}: gpuhost does not take {dir} as its cached driver set"
        ));
        None
    };
    if let Some(why) = gpuhost_host::trust::untrusted_under_state(host, &manifest) {
        return refused(why);
    }
    if let Some(why) = odd_entry(host, dir) {
        return refused(why);
    }
    let mut cached: Cached = match host.read_json_opt(&manifest, "") {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => return refused(format!("{e:#}")),
    };
    if let Some(why) = cached.invalid(dir) {
        return refused(format!("{manifest}: {why}"));
    }
    let (held, _) = contents(host, dir).ok()?;
    cached.packages.retain(|n| held.contains(n));
    (host.kind_nofollow(format!("{dir}/repodata/repomd.xml"))
        == Some(gpuhost_host::rootfs::Kind::File))
    .then_some(cached)
}

/// The first entry under `dir` (in the root) that is neither a plain file nor a folder (a
/// link, a FIFO, a device), said with what it is; never opened.
fn odd_entry(host: &Host, dir: &str) -> Option<String> {
    let mut stack = vec![dir.to_string()];
    while let Some(d) = stack.pop() {
        for name in host.list_dir(&d).ok()? {
            let p = format!("{d}/{name}");
            match host.kind_nofollow(&p) {
                Some(gpuhost_host::rootfs::Kind::Dir) => stack.push(p),
                Some(gpuhost_host::rootfs::Kind::File) => {}
                Some(gpuhost_host::rootfs::Kind::Symlink) => {
                    let to = host
                        .read_link(&p)
                        .map_or_else(|e| format!("{e:#}"), |t| t.display().to_string());
                    return Some(format!("{p} is a link ({to}), not a file of the cache"));
                }
                _ => {
                    return Some(format!(
                        "{p} is a FIFO, socket or device (not opened), not a file of the cache"
                    ))
                }
            }
        }
    }
    None
}

impl Cached {
    /// Why a manifest read back is not one gpuhost wrote, if it is not: each value is checked
    /// as the input it stands for (a repo id or a name with a newline would write lines of its
    /// own into gpuhost's repo file).
    fn invalid(&self, dir: &str) -> Option<String> {
        let repo_id = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._:".contains(c))
        };
        let word = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._+~".contains(c))
        };
        if !repo_id(&self.repo_id) {
            return Some(format!("repo_id {:?} is not a repo id", self.repo_id));
        }
        if !["0", "1"].contains(&self.gpgcheck.as_str()) {
            return Some(format!("gpgcheck {:?} is neither 0 nor 1", self.gpgcheck));
        }
        for (what, v) in [
            ("package", &self.package),
            ("version", &self.version),
            ("driver", &self.driver),
        ] {
            if !word(v) {
                return Some(format!("{what} {v:?} is not a package's {what}"));
            }
        }
        if let Some(n) = self.packages.iter().find(|n| !word(n)) {
            return Some(format!("{n:?} is not a package name"));
        }
        if self.source.chars().any(char::is_control) {
            return Some(format!(
                "source {:?} holds a control character",
                self.source
            ));
        }
        self.keys
            .iter()
            .find(|k| !key_in(k, dir))
            .map(|k| format!("the key {k:?} is neither in {dir} nor https://"))
    }
}

/// A key as a cache's manifest may give it: a file of the cached folder, or `https://`.
fn key_in(key: &str, dir: &str) -> bool {
    let plain = !key.is_empty()
        && !key
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == ',');
    let inside = key
        .strip_prefix("file://")
        .and_then(|p| p.strip_prefix(dir))
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|rest| {
            !rest
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        });
    plain && (key.starts_with("https://") || inside)
}

/// Before any change (issue 53, item 5): gpuhost's cache folder ([`DRIVER_CACHE`]), when
/// there, is a folder of the root. A file there, or a link out of the root, would fail only
/// after the transaction replaced the driver, and the advised rerun the same way: bad input
/// now (exit 2), naming it.
pub fn check_dir(host: &Host) -> Result<()> {
    if let Some((link, target, _)) = host.escaping_link(DRIVER_CACHE)? {
        return Err(gpuhost_host::invalid!(
            "{} is a link to {}, outside the root: gpuhost's driver cache must be a folder of the root; move it aside and run again",
            host.path(&link).display(),
            target.display()
        ));
    }
    match host.kind_nofollow(DRIVER_CACHE) {
        None | Some(gpuhost_host::rootfs::Kind::Dir) => Ok(()),
        Some(_) => Err(gpuhost_host::invalid!(
            "{} is not a folder: gpuhost keeps its driver cache (driver.keep_local_repo = false) there; move it aside and run again",
            host.path(DRIVER_CACHE).display()
        )),
    }
}

/// The cached set dnf is given now ([`REPO_FILE`]'s folder): its folder and manifest.
pub fn current(host: &Host) -> Option<(String, Cached)> {
    let dir = named(host)?;
    read(host, &dir).map(|c| (dir, c))
}

/// The folder of gpuhost's cache that [`REPO_FILE`] gives dnf, when it holds no repo any more
/// (removed by hand).
pub fn gone(host: &Host) -> Option<String> {
    let dir = named(host)?;
    (!host.exists(format!("{dir}/repodata/repomd.xml"))).then_some(dir)
}

/// The folder of gpuhost's cache [`REPO_FILE`] names (its `baseurl`), when it names one.
fn named(host: &Host) -> Option<String> {
    let text = host.read_opt(REPO_FILE).ok().flatten()?;
    let dir = repo_entries(&text)
        .into_iter()
        .find(|(_, k, _)| *k == "baseurl")
        .and_then(|(_, _, v)| v.strip_prefix("file://").map(str::to_string))?;
    let dir = dir.trim_end_matches('/').to_string();
    gpuhost_host::host::in_driver_cache(&dir).then_some(dir)
}

/// The cached folders there are, each with its manifest (the current and the one kept for a
/// rollback, normally).
pub fn all(host: &Host) -> Vec<(String, Cached)> {
    let mut out: Vec<(String, Cached)> = host
        .list_dir(DRIVER_CACHE)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .filter_map(|n| {
            let dir = format!("{DRIVER_CACHE}/{n}");
            read(host, &dir).map(|c| (dir, c))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The cached folder of `package` at `version`, when there is one.
pub fn find(host: &Host, package: &str, version: &str) -> Option<(String, Cached)> {
    let dir = dir_of(package, version);
    read(host, &dir).map(|c| (dir, c))
}

/// After the transaction that installed the driver set from `scratch`'s tree (the package's
/// repo read out into `<scratch>/tree`): that repo folder becomes the cache of `source`, gpuhost's
/// repo file names it, and of the folders cached before only the one the repo file named stays
/// (for a rollback). Returns the cached folder.
pub fn place(host: &Host, scratch: &str, source: &Source<'_>) -> Result<String> {
    let inner = format!("{scratch}/tree/var/{}", source.package);
    let dir = dir_of(source.package, source.version);
    let repo = nvidia_repo(host, scratch, source.package, &dir)?;
    let incoming = format!("{DRIVER_CACHE}/.incoming");
    host.remove_tree(&incoming)?;
    move_tree(host, &inner, &incoming)?;
    let cached = Cached::of(source, repo, contents(host, &incoming)?);
    host.write_json(format!("{incoming}/{MANIFEST}"), &cached, 0o644)?;
    // A folder of the same package (placed again) is replaced once its successor is whole.
    host.remove_tree(&dir)?;
    host.rename(&incoming, &dir)?;
    make_current(host, &dir)?;
    tracing::info!(
        "the driver set of {} {} is cached in {dir} ({} packages, {} MiB); the toolkit's packages are not kept",
        source.package,
        source.version,
        cached.packages.len(),
        cached.bytes >> 20
    );
    Ok(dir)
}

/// Make the cached folder `dir` the one dnf is given ([`REPO_FILE`]); of the others, only the
/// one the repo file named before stays (for a rollback).
pub fn make_current(host: &Host, dir: &str) -> Result<()> {
    let cached =
        read(host, dir).ok_or_else(|| anyhow::anyhow!("{dir} holds no cached driver set"))?;
    let previous = current(host).map(|(d, _)| d);
    host.write_atomic(REPO_FILE, repo_file(dir, &cached).as_bytes(), 0o644)?;
    for (old, _) in all(host) {
        if old != dir && Some(&old) != previous.as_ref() {
            host.remove_tree(&old)?;
        }
    }
    Ok(())
}

/// Where a bundle's driver set is read out of NVIDIA's package on the build host (in the
/// bundle's scratch root).
const BUNDLE_SCRATCH: &str = "/var/cache/gpuhost/bundle-driver";

/// `gpuhost bundle`: NVIDIA's local repo package `rpm` (a file of the build host) read by the
/// same reader as a node's transaction ([`super::payload::unpack_repos`]: checked, never the
/// toolkit's packages) into the scratch root `host`: the repo folder it read (a path on this
/// machine, holding NVIDIA's repodata, keys and driver packages) and the cache manifest a node
/// gets from it (its `packages` all the folder holds; the bundle keeps those it carries).
/// The caller removes the scratch folder ([`bundle_scratch_done`]).
pub fn read_for_bundle(host: &Host, rpm: &Path) -> Result<(PathBuf, Cached)> {
    let file = rpm
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = gpuhost_nvidia::localrepo::LocalRepoFile::parse(&file).ok_or_else(|| {
        anyhow::anyhow!("{}: not NVIDIA's local repo package name", rpm.display())
    })?;
    let version = version_of(&name);
    host.remove_tree(BUNDLE_SCRATCH)?;
    host.create_dir_all(format!("{BUNDLE_SCRATCH}/tree"))?;
    let tree = host.real_path(format!("{BUNDLE_SCRATCH}/tree"))?;
    let shown = rpm.display().to_string();
    super::payload::unpack_repos(&shown, &tree).map_err(|e| match e {
        super::payload::Unpack::Bad(e)
        | super::payload::Unpack::Unreadable(e)
        | super::payload::Unpack::Unextracted(e) => e,
    })?;
    let dir = dir_of(&name.package, &version);
    let repo = nvidia_repo(host, BUNDLE_SCRATCH, &name.package, &dir)?;
    let inner = format!("{BUNDLE_SCRATCH}/tree/var/{}", name.package);
    let source = Source {
        package: &name.package,
        version: &version,
        driver: &name.driver,
        file: &file,
    };
    let cached = Cached::of(&source, repo, contents(host, &inner)?);
    Ok((host.real_path(&inner)?, cached))
}

/// The scratch folder of [`read_for_bundle`] removed.
pub fn bundle_scratch_done(host: &Host) -> Result<()> {
    host.remove_tree(BUNDLE_SCRATCH).map(drop)
}

/// The cache manifest's file name in a cached folder (and in a bundle's driver folder).
pub const MANIFEST_FILE: &str = MANIFEST;

/// `apply --bundle`, once the driver set is installed from the bundle's repo: the bundle's
/// driver folder `meta` (NVIDIA's repodata and keys as shipped, and the cache manifest) and the
/// driver packages from its repo folder `packages` (both paths on this machine, checked by the
/// bundle's manifest before the run) become gpuhost's cache, each package checked against
/// NVIDIA's metadata again. Returns the cached folder.
pub fn place_from_bundle(host: &Host, meta: &Path, packages: &Path) -> Result<String> {
    let cached = bundle_manifest(meta)?;
    let dir = dir_of(&cached.package, &cached.version);
    let incoming = format!("{DRIVER_CACHE}/.incoming");
    host.remove_tree(&incoming)?;
    host.create_dir_all(&incoming)?;
    let real = host.real_path(&incoming)?;
    copy_out_of_bundle(meta, &real)?;
    // NVIDIA's metadata names each package by its place in its repo (`x86_64/…rpm`): the
    // bundle's copy goes there, and is checked against that entry's checksum.
    let sums = gpuhost_host::rpmfile::repodata::checksums(&real)?;
    let mut placed = Vec::new();
    for href in sums.keys() {
        let base = href.rsplit('/').next().unwrap_or(href);
        let wanted = package_name(base).is_some_and(|n| cached.packages.contains(&n));
        let from = packages.join(base);
        if !wanted || !from.is_file() {
            continue;
        }
        if href.starts_with('/')
            || href
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(anyhow::anyhow!(
                "NVIDIA's repo metadata in {} names the package {href:?}, outside its repo",
                meta.display()
            ));
        }
        let to = real.join(href);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(&from, &to)
            .with_context(|| format!("copying {} into {incoming}", from.display()))?;
        placed.push((href.clone(), gpuhost_host::fsutil::sha256_file(&to)?));
    }
    gpuhost_host::rpmfile::repodata::verify(&real, &placed, &sums)
        .context("a driver package of the bundle does not match NVIDIA's repo metadata")?;
    let hrefs = placed;
    host.remove_tree(&dir)?;
    host.rename(&incoming, &dir)?;
    make_current(host, &dir)?;
    tracing::info!(
        "the driver set of {} {} is cached in {dir} from the bundle ({} packages)",
        cached.package,
        cached.version,
        hrefs.len()
    );
    Ok(dir)
}

/// The cache manifest of a bundle's driver folder `meta` (a path on this machine).
pub fn bundle_manifest(meta: &Path) -> Result<Cached> {
    let path = meta.join(MANIFEST);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
}

/// The file names in the bundle's repo folder `packages` of the packages named in `cached`.
pub fn bundle_packages(packages: &Path, cached: &Cached) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in
        std::fs::read_dir(packages).with_context(|| format!("reading {}", packages.display()))?
    {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if package_name(&name).is_some_and(|n| cached.packages.contains(&n)) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// A bundle's driver folder (repodata, keys, manifest: files and folders only) copied into
/// `to` (a folder of the root, resolved).
fn copy_out_of_bundle(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dst = to.join(entry.file_name());
        if kind.is_dir() {
            std::fs::create_dir_all(&dst)?;
            copy_out_of_bundle(&entry.path(), &dst)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &dst)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// `driver.keep_local_repo = true` again, once NVIDIA's package is installed: gpuhost's repo
/// file and every cached folder go. True when there was anything.
pub fn drop_all(host: &Host) -> Result<bool> {
    let file = host.remove_file(REPO_FILE)?;
    let dirs = host.remove_tree(DRIVER_CACHE)?;
    Ok(file || dirs)
}

/// dnf's options for a cached folder read under the repo id `id` (a rollback's swap to the set
/// kept from before): the folder, and NVIDIA's gpgcheck and keys.
pub fn repo_options(host: &Host, id: &str, dir: &str, cached: &Cached) -> Result<Vec<String>> {
    let url = |p: &str| -> Result<String> { Ok(gpuhost_host::host::file_url(&host.real_path(p)?)) };
    let mut out = vec![
        format!("--repofrompath={id},{}", url(dir)?),
        format!("--setopt={id}.gpgcheck={}", cached.gpgcheck),
    ];
    let keys = cached
        .keys
        .iter()
        .map(|k| match k.strip_prefix("file://") {
            Some(p) => url(p),
            None => Ok(k.clone()),
        })
        .collect::<Result<Vec<_>>>()?;
    if !keys.is_empty() {
        out.push(format!("--setopt={id}.gpgkey={}", keys.join(",")));
    }
    Ok(out)
}

/// gpuhost's repo file for the cached folder `dir`.
fn repo_file(dir: &str, c: &Cached) -> String {
    let mut text = format!(
        "# Written by gpuhost (driver.keep_local_repo = false): NVIDIA's driver set read from\n\
         # {}, checked against its repo metadata, without the CUDA toolkit's packages.\n\
         [{}]\nname=NVIDIA driver {} (gpuhost's cache of {} {})\nbaseurl=file://{dir}\nenabled=1\ngpgcheck={}\n",
        c.source, c.repo_id, c.driver, c.package, c.version, c.gpgcheck
    );
    if !c.keys.is_empty() {
        text.push_str(&format!("gpgkey={}\n", c.keys.join(",")));
    }
    text.push_str(&format!("includepkgs={}\n", c.packages.join(" ")));
    text
}

/// NVIDIA's repo section for `/var/<package>`, from the `.repo` files the package carries
/// (read out into `<scratch>/tree/etc/yum.repos.d`): its id, gpgcheck and keys, the keys moved
/// into the cached folder `dir`.
struct NvidiaRepo {
    id: String,
    gpgcheck: String,
    keys: Vec<String>,
}

fn nvidia_repo(host: &Host, scratch: &str, package: &str, dir: &str) -> Result<NvidiaRepo> {
    let repos = format!("{scratch}/tree/etc/yum.repos.d");
    let under = format!("/var/{package}");
    for name in host.list_dir(&repos).unwrap_or_default() {
        let Some(text) = host.read_opt(format!("{repos}/{name}"))? else {
            continue;
        };
        let entries = repo_entries(&text);
        let Some(id) = entries
            .iter()
            .find(|(_, k, v)| {
                *k == "baseurl"
                    && v.strip_prefix("file://")
                        .is_some_and(|p| p.trim_end_matches('/') == under)
            })
            .map(|(id, _, _)| id.to_string())
        else {
            continue;
        };
        let mut repo = NvidiaRepo {
            id: id.clone(),
            gpgcheck: "0".into(),
            keys: Vec::new(),
        };
        for (_, key, value) in entries.iter().filter(|(i, _, _)| *i == id) {
            match *key {
                "gpgcheck" => repo.gpgcheck = value.to_string(),
                "gpgkey" => {
                    for k in value.split([',', ' ']).filter(|k| !k.is_empty()) {
                        repo.keys.push(moved_key(k, &under, dir)?);
                    }
                }
                _ => {}
            }
        }
        return Ok(repo);
    }
    Err(anyhow::anyhow!(
        "the package carries no .repo file for {under}: its driver set cannot be cached"
    ))
}

/// A key of NVIDIA's `.repo` file as the cache's repo file gives it: `file:///var/<package>/K`
/// is the cached folder's `K`; `https://` stays. Anything else was refused already when the
/// transaction read the repo ([`super::payload::repo_key`]).
fn moved_key(key: &str, under: &str, dir: &str) -> Result<String> {
    if key.starts_with("https://") {
        return Ok(key.to_string());
    }
    key.strip_prefix("file://")
        .and_then(|p| p.strip_prefix(under))
        .and_then(|rest| rest.strip_prefix('/'))
        .filter(|rest| !rest.split('/').any(|c| c == ".." || c.is_empty()))
        .map(|rest| format!("file://{dir}/{rest}"))
        .ok_or_else(|| anyhow::anyhow!("the key {key} lies outside {under}"))
}

/// The package names in a repo folder (of the root) and their bytes.
fn contents(host: &Host, dir: &str) -> Result<(Vec<String>, u64)> {
    let mut names = Vec::new();
    let mut bytes = 0;
    let mut stack = vec![dir.to_string()];
    while let Some(d) = stack.pop() {
        for name in host.list_dir(&d)? {
            let p = format!("{d}/{name}");
            match host.kind_nofollow(&p) {
                Some(gpuhost_host::rootfs::Kind::Dir) => stack.push(p),
                Some(gpuhost_host::rootfs::Kind::File) => {
                    if let Some(pkg) = package_name(&name) {
                        names.push(pkg);
                        bytes += host.stamp(&p).map_or(0, |s| s.0);
                    }
                }
                _ => {}
            }
        }
    }
    names.sort();
    names.dedup();
    Ok((names, bytes))
}

/// Move the folder `from` to `to` (both in the root): a rename, or where they lie on different
/// filesystems (`/var/cache` mounted apart), a copy of each file, then `from` removed.
fn move_tree(host: &Host, from: &str, to: &str) -> Result<()> {
    match host.rename(from, to) {
        Ok(()) => return Ok(()),
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::CrossesDevices) => {}
        Err(e) => return Err(e),
    }
    copy_tree(host, from, to)?;
    host.remove_tree(from).map(drop)
}

fn copy_tree(host: &Host, from: &str, to: &str) -> Result<()> {
    host.create_dir_all(to)?;
    for name in host.list_dir(from)? {
        let (src, dst) = (format!("{from}/{name}"), format!("{to}/{name}"));
        match host.kind_nofollow(&src) {
            Some(gpuhost_host::rootfs::Kind::Dir) => copy_tree(host, &src, &dst)?,
            Some(gpuhost_host::rootfs::Kind::File) => {
                let (s, d) = (host.real_path(&src)?, host.real_path(&dst)?);
                std::fs::copy(&s, &d)
                    .with_context(|| format!("copying {} to {}", s.display(), d.display()))?;
            }
            _ => {
                return Err(hinted(
                    format!("{src} is neither a file nor a folder"),
                    "run gpuhost again: the repo is read out of the package again",
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_moves_into_the_cache_and_nothing_leaves_the_repo_folder() {
        let under = "/var/cuda-repo-rhel9-13-0-local";
        let dir = "/var/lib/gpuhost/driver-repo/cuda-repo-rhel9-13-0-local-13.0.1_580.82.07";
        assert_eq!(
            moved_key(&format!("file://{under}/CDF6BA43.pub"), under, dir).ok(),
            Some(format!("file://{dir}/CDF6BA43.pub"))
        );
        assert!(moved_key("https://developer.download.nvidia.com/k.pub", under, dir).is_ok());
        for bad in [
            format!("file://{under}/../etc/shadow"),
            format!("file://{under}x/k.pub"),
            "file:///etc/pki/k.pub".to_string(),
            "http://example.com/k.pub".to_string(),
        ] {
            assert!(moved_key(&bad, under, dir).is_err(), "{bad}");
        }
    }

    /// A manifest read back is checked as input (issue 53, item 2): a repo id with a newline
    /// would write a `mirrorlist=` line of its own into gpuhost's repo file.
    #[test]
    fn a_manifest_read_back_is_checked_like_input() {
        let dir = "/var/lib/gpuhost/driver-repo/x";
        let good = Cached {
            package: "cuda-repo-rhel9-13-0-local".into(),
            version: "13.0.1_580.82.07".into(),
            driver: "580.82.07".into(),
            source: "/srv/cuda-repo.rpm".into(),
            repo_id: "cuda-rhel9-13-0-local".into(),
            gpgcheck: "1".into(),
            keys: vec![format!("file://{dir}/K.pub"), "https://x/k.pub".into()],
            packages: vec!["nvidia-driver".into()],
            bytes: 1,
        };
        assert_eq!(good.invalid(dir), None);
        let bad = |f: &dyn Fn(&mut Cached)| {
            let mut c = good.clone();
            f(&mut c);
            c.invalid(dir)
        };
        assert!(bad(&|c| c.repo_id = "x\nmirrorlist=file:///etc/shadow".into()).is_some());
        assert!(bad(&|c| c.gpgcheck = "0\ngpgkey=file:///etc".into()).is_some());
        assert!(bad(&|c| c.packages.push("a b".into())).is_some());
        assert!(bad(&|c| c.keys.push(format!("file://{dir}/../../k"))).is_some());
        assert!(bad(&|c| c.keys.push("file:///etc/pki/k".into())).is_some());
        assert!(bad(&|c| c.source = "a\nb".into()).is_some());
    }

    #[test]
    fn the_repo_file_shows_only_the_cached_packages() {
        let c = Cached {
            package: "cuda-repo-rhel9-13-0-local".into(),
            version: "13.0.1_580.82.07".into(),
            driver: "580.82.07".into(),
            source: "/srv/cuda-repo.rpm".into(),
            repo_id: "cuda-rhel9-13-0-local".into(),
            gpgcheck: "1".into(),
            keys: vec!["file:///var/lib/gpuhost/driver-repo/x/K.pub".into()],
            packages: vec!["nvidia-driver".into(), "kmod-nvidia-open-dkms".into()],
            bytes: 1,
        };
        let text = repo_file("/var/lib/gpuhost/driver-repo/x", &c);
        let entries = repo_entries(&text);
        let get = |k: &str| entries.iter().find(|e| e.1 == k).map(|e| e.2);
        assert_eq!(entries[0].0, "cuda-rhel9-13-0-local");
        assert_eq!(
            get("baseurl"),
            Some("file:///var/lib/gpuhost/driver-repo/x")
        );
        assert_eq!(get("gpgcheck"), Some("1"));
        assert_eq!(
            get("includepkgs"),
            Some("nvidia-driver kmod-nvidia-open-dkms")
        );
    }
}
