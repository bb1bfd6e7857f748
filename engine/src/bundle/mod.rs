//! Bundles: the whole stack as one verified offline repo, for air-gapped and repeatable installs.
//!
//! `gpuhost bundle` ([`build`]) runs the typed plan of a profile against a *clean* target (an
//! empty install root with the target's OS release, repo configuration and kernels), carries
//! the plan's package work out in that root — dnf downloads every package of each transaction
//! (`--downloadonly --downloaddir`), then installs them without scriptlets so that the next
//! check sees them — and plans again until nothing is left to install. What the bundle holds
//! is therefore exactly what `apply` would install on a fresh host, with every dependency,
//! resolved by dnf itself. It then writes:
//!
//! ```text
//! DIR/manifest.json        what it is for, and every file's size and SHA-256
//! DIR/profile.toml         the profile, resolved
//! DIR/repo/                the packages, createrepo_c metadata and the module metadata
//! DIR/driver/              the driver set's metadata as NVIDIA ships it (the set's packages
//!                          are in repo/; the local repo package itself is not carried)
//! DIR/keys/                the GPG keys of the repos the packages came from
//! DIR/kmods/               with a kmod repo (`--kmod-repo`, `driver.kmod_repo`): the
//!                          prebuilt kmods nodes install instead of DKMS (`kmods.rs`)
//! ```
//!
//! `apply --bundle DIR|TARBALL` ([`open`]) verifies the manifest before anything else (a
//! changed, missing or extra file is invalid input, exit 2, naming it), checks that the bundle
//! fits the host (OS release, architecture, kernels), and converges with dnf reading only the
//! bundle's repo (every other repo disabled, [`gpuhost_host::host::BundleRepo`]).

mod build;
mod kmods;
pub mod manifest;
pub(crate) mod modulemd;
mod tempdir;

pub use build::{build, BuildOptions, BuildReport, Target};
pub use kmods::KmodPart;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use gpuhost_host::cmd::Cmd;
use gpuhost_host::facts::Facts;
use gpuhost_host::host::BundleRepo;
use gpuhost_host::invalid;
use gpuhost_profile::Profile;
use manifest::Manifest;
use tempdir::TempDir;

/// A verified bundle, ready for `apply` and `plan`.
#[derive(Debug)]
pub struct Opened {
    /// What was given: the bundle directory or the tarball.
    pub source: PathBuf,
    /// The verified bundle directory (the tarball's, extracted, for a tarball).
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// SHA-256 of `manifest.json`: compare it with the one `gpuhost bundle` printed.
    pub manifest_sha256: String,
    /// The extraction of a tarball, removed when the bundle is dropped.
    _extracted: Option<TempDir>,
}

/// What a report says of the bundle it used.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Info {
    pub source: String,
    pub profile: String,
    pub created_at: String,
    pub os_major: u32,
    pub kernels: Vec<String>,
    pub packages: usize,
    pub bytes: u64,
    pub manifest_sha256: String,
}

/// Open a bundle directory or tarball and verify it. Every error is invalid input (exit 2);
/// nothing on the host is touched.
pub fn open(path: &Path) -> Result<Opened> {
    let shown = path.display();
    let md = std::fs::metadata(path).map_err(|e| {
        invalid!("bundle {shown} cannot be read: {e}; give the directory or the .tar gpuhost bundle made")
    })?;
    if !md.is_dir() && !md.is_file() {
        // A FIFO would block tar (and apply) until a writer comes: refused without opening it.
        return Err(invalid!(
            "bundle {shown} is {}, not a directory or a file; give the directory or the .tar gpuhost bundle made",
            manifest::kind_of(md.file_type())
        ));
    }
    let (dir, extracted) = if md.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let tmp = TempDir::new("gpuhost-bundle")?;
        let out = Cmd::new("tar")
            .arg("-xf")
            .arg(path)
            .arg("-C")
            .arg(tmp.path())
            .args(["--no-same-owner", "--no-same-permissions"])
            .output()?;
        if !out.success() {
            return Err(invalid!(
                "bundle {shown} is not a tar archive gpuhost can read: {}",
                out.stderr.lines().next().unwrap_or("tar failed").trim()
            ));
        }
        let top = single_top(tmp.path()).ok_or_else(|| {
            invalid!("bundle {shown}: the archive does not hold one bundle directory with a {}; make it with gpuhost bundle --tar", manifest::MANIFEST)
        })?;
        (top, Some(tmp))
    };
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let (manifest, manifest_sha256) = manifest::verify(&dir).map_err(|e| {
        if extracted.is_some() && gpuhost_host::error::is_invalid(&e) {
            invalid!("{e:#} (in {shown})")
        } else {
            e
        }
    })?;
    Ok(Opened {
        source: path.to_path_buf(),
        dir,
        manifest,
        manifest_sha256,
        _extracted: extracted,
    })
}

/// The one directory of an extracted archive that holds a manifest (or the extraction itself).
fn single_top(dir: &Path) -> Option<PathBuf> {
    if dir.join(manifest::MANIFEST).is_file() {
        return Some(dir.to_path_buf());
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    match entries.as_slice() {
        [one] if one.is_dir() && one.join(manifest::MANIFEST).is_file() => Some(one.clone()),
        _ => None,
    }
}

impl Opened {
    /// The bundle's repo, for [`gpuhost_host::host::Host::set_bundle`].
    pub fn repo(&self) -> BundleRepo {
        BundleRepo {
            dir: self.dir.join("repo"),
            gpgcheck: self.manifest.gpgcheck,
            gpgkeys: self
                .manifest
                .gpgkeys
                .iter()
                .map(|k| manifest::join(&self.dir, k))
                .collect(),
            driver_meta: self
                .manifest
                .driver_set
                .as_ref()
                .map(|d| manifest::join(&self.dir, &d.path)),
        }
    }

    /// The profile the bundle was made for, with `--set` overrides; NVIDIA's local repo package
    /// is the bundle's copy, or, for a bundle that carries the driver set instead, the name of
    /// the package that set was read from, in the bundle's driver folder (no file is there: the
    /// driver-repo step takes the set from the bundle's repo). A `--set driver.local_repo_rpm`
    /// names a package file on this node, taken as online (the hint when a node keeps NVIDIA's
    /// package, `driver.keep_local_repo = true`, and the bundle cannot bring another).
    /// `driver.keep_local_repo` is the profile's: a node that holds NVIDIA's package keeps it
    /// or not as it says (bundles made before issue 54 pinned it to `false`).
    pub fn profile(&self, sets: &[String]) -> Result<Profile> {
        let file = self.dir.join("profile.toml");
        let mut p = Profile::resolve(&file.display().to_string(), sets)?;
        p.name = self.manifest.profile.clone();
        let given = sets.iter().any(|s| {
            s.split_once('=')
                .is_some_and(|(k, _)| k.trim() == "driver.local_repo_rpm")
        });
        if !given {
            if let Some(rel) = &self.manifest.driver_repo_rpm {
                p.driver.local_repo_rpm = Some(manifest::join(&self.dir, rel));
            }
            // The driver set without NVIDIA's package: the package's name says which driver.
            if let Some(d) = &self.manifest.driver_set {
                p.driver.local_repo_rpm = Some(manifest::join(&self.dir, &d.path).join(&d.file));
            }
        }
        // The kmods the bundle carries: installed instead of building the modules with DKMS.
        if let Some(k) = &self.manifest.kmod_repo {
            p.driver.kmod_repo = Some(manifest::join(&self.dir, &k.path));
        }
        Ok(p)
    }

    /// The bundle must have been made for this host: its Oracle Linux release, architecture,
    /// and every kernel it serves (headers and modules are per kernel).
    pub fn fits(&self, facts: &Facts) -> Result<()> {
        let m = &self.manifest;
        let shown = self.source.display();
        let remake = |what: String| {
            format!(
                "make a bundle for it on a connected machine: gpuhost bundle --profile {} --root <a copy of this host> (or --os {what}) --out DIR",
                m.profile
            )
        };
        if let Some(os) = &facts.os {
            if os.is_oracle_linux() && os.major() != Some(m.os_major) {
                return Err(invalid!(
                    "bundle {shown} was made for Oracle Linux {} (profile {}), but this host runs {}; {}",
                    m.os_major,
                    m.profile,
                    os.pretty_name,
                    remake(format!("ol{}", os.major().unwrap_or(0)))
                ));
            }
        }
        let arch = facts
            .arch
            .clone()
            .unwrap_or_else(|| gpuhost_host::arch::machine().to_string());
        if m.arch != arch {
            return Err(invalid!(
                "bundle {shown} was made for {}, but this host is {arch}; {}",
                m.arch,
                remake(format!("ol{}", m.os_major))
            ));
        }
        let served = facts.kernels_to_serve();
        let missing: Vec<&String> = served.iter().filter(|k| !m.kernels.contains(k)).collect();
        if !missing.is_empty() {
            return Err(invalid!(
                "bundle {shown} carries {} for {} only, but this host serves {}; {} --kernel-release {}",
                if m.kmod_repo.is_some() {
                    "kmods"
                } else {
                    "headers"
                },
                if m.kernels.is_empty() {
                    "no kernel".to_string()
                } else {
                    m.kernels.join(", ")
                },
                missing
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                remake(format!("ol{}", m.os_major)),
                missing[0]
            ));
        }
        Ok(())
    }

    pub fn info(&self) -> Info {
        Info {
            source: self.source.display().to_string(),
            profile: self.manifest.profile.clone(),
            created_at: self.manifest.created_at.clone(),
            os_major: self.manifest.os_major,
            kernels: self.manifest.kernels.clone(),
            packages: self.manifest.packages.len(),
            bytes: self.manifest.bytes(),
            manifest_sha256: self.manifest_sha256.clone(),
        }
    }
}
