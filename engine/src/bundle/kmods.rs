//! A bundle that carries prebuilt kmods (`gpuhost bundle --kmod-repo DIR`, or the profile's
//! `driver.kmod_repo`): the kmod repo `gpuhost kmod build` wrote on a build host, checked
//! against its manifest before anything is written, and copied into the bundle's `kmods/` as a
//! kmod repo of its own — the RPMs of the bundle's driver and flavour for the kernels the bundle
//! serves, the fleet certificate, repo metadata and a kmod manifest covering what it carries.
//! `apply --bundle` gives the run that copy as `driver.kmod_repo`, so a node installs the
//! prebuilt kmods and needs no compiler, headers or DKMS, and the bundle carries none.
//!
//! While the bundle is resolved, the scratch root stands for the target, whose served kernels
//! are installed (a node the bundle fits serves them): a package of no files that provides
//! `kernel-uname-r` for each, in the scratch root's rpm database only, so that a kmod's
//! `Requires: kernel-uname-r = <kver>` does not pull the kernel itself (and its firmware) into
//! the bundle.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use gpuhost_host::cmd::Cmd;
use gpuhost_host::error::hinted;
use gpuhost_host::fsutil;
use gpuhost_host::host::Host;
use gpuhost_host::kmodrepo::{KmodManifest, CERT, MANIFEST};
use gpuhost_profile::Profile;
use gpuhost_steps::run::{DriverPlan, PrebuiltKmods};

use super::manifest::BundledKmods;

/// What the report says of the kmod repo a bundle carries.
#[derive(Clone, Debug, Serialize)]
pub struct KmodPart {
    /// The kmod repo the kmods were taken from.
    pub source: String,
    #[serde(flatten)]
    pub carried: BundledKmods,
}

/// The kmod repo's directory in the bundle.
pub(super) const DIR: &str = "kmods";

/// The kmod repo of the request (`--kmod-repo`, else the profile's `driver.kmod_repo`), read
/// and checked against its manifest: bad input (exit 2) naming the file that does not match.
pub(super) fn check(dir: &Path) -> Result<KmodManifest> {
    KmodManifest::read_verified(dir)
}

/// A bundle carries a kmod for every kernel it serves: one the repo lacks is refused (exit 2,
/// naming the kernel and the build host's command that makes its kmod) before the bundle is
/// resolved. (A node with an NVIDIA module may run on while its kernel guard holds a new
/// kernel back; a bundle is for nodes that have none yet.)
pub(super) fn check_kernels(driver: &DriverPlan) -> Result<()> {
    match driver
        .kmods
        .as_ref()
        .and_then(|k| k.no_kmod(&driver.repo.driver, driver.choice.flavour, true))
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Copy into `staging/kmods` the kmods of `driver` for `kernels` (every one of them is in the
/// repo: [`check_kernels`] refused a kernel it lacks), with the certificate, a manifest
/// of what is copied and createrepo_c's metadata; and pin the bundle's `profile` to that copy
/// (`driver.kmod_repo = "kmods"`, which `apply --bundle` resolves in the bundle).
pub(super) fn carry(
    driver: &DriverPlan,
    kernels: &[String],
    staging: &Path,
    profile: &mut Profile,
) -> Result<KmodPart> {
    let kmods = prebuilt(driver)?;
    let out = staging.join(DIR);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let flavour = driver.choice.flavour.to_string();
    let mut manifest = KmodManifest::new(kmods.manifest.cert_sha256.clone());
    let mut bytes = 0;
    for kernel in kernels {
        let entry = kmods
            .manifest
            .find(&driver.repo.driver, &flavour, kernel)
            .with_context(|| format!("the kmod repo has no kmod for kernel {kernel}"))?;
        let from = kmods.dir.join(&entry.file);
        let to = out.join(&entry.file);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        bytes += std::fs::copy(&from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        manifest.put(entry.clone());
    }
    let cert = KmodManifest::cert_path(&kmods.dir);
    bytes += std::fs::copy(&cert, out.join(CERT))
        .with_context(|| format!("copying {}", cert.display()))?;
    Cmd::new("createrepo_c")
        .args(["--quiet", "--no-database"])
        .arg(&out)
        .run()
        .context("writing the metadata of the bundle's kmod repo (createrepo_c)")?;
    let text = manifest.to_json()?;
    fsutil::write_atomic(&out.join(MANIFEST), text.as_bytes(), 0o644)?;
    bytes += dir_bytes(&out.join("repodata"))? + text.len() as u64;
    // The copy is what nodes read: checked as they will check it.
    KmodManifest::read_verified(&out)?;
    profile.driver.kmod_repo = Some(PathBuf::from(DIR));
    let carried = BundledKmods {
        path: DIR.to_string(),
        driver: driver.repo.driver.clone(),
        flavour,
        kernels: manifest.kmods.iter().map(|k| k.kernel.clone()).collect(),
        packages: manifest.kmods.iter().map(|k| k.package.clone()).collect(),
        cert_sha256: manifest.cert_sha256,
        bytes,
    };
    Ok(KmodPart {
        source: kmods.dir.display().to_string(),
        carried,
    })
}

/// The run's prebuilt kmods, when the profile names a kmod repo.
pub(super) fn prebuilt(driver: &DriverPlan) -> Result<&PrebuiltKmods> {
    driver
        .kmods
        .as_ref()
        .context("the driver plan has no prebuilt kmods")
}

/// True when `file` (a package file an install names) is one of the kmod repo's: carried in
/// `kmods/`, not with NVIDIA's local repo package in `driver/`.
pub(super) fn is_kmod_file(driver: Option<&DriverPlan>, file: &Path) -> bool {
    driver
        .and_then(|d| d.kmods.as_ref())
        .is_some_and(|k| file.starts_with(&k.dir))
}

/// The size of the files under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let md = e.metadata()?;
        total += if md.is_dir() {
            dir_bytes(&e.path())?
        } else {
            md.len()
        };
    }
    Ok(total)
}

/// The served kernels, as the target has them, in the scratch root's rpm database: a package
/// of no files (built with rpmbuild under `work`) that provides `kernel-uname-r` for each,
/// recorded without its payload or scriptlets (`rpm --justdb`).
pub(super) fn provide_kernels(scratch: &Host, kernels: &[String], work: &Path) -> Result<()> {
    let top = work.join("target-kernels");
    std::fs::create_dir_all(&top).with_context(|| format!("creating {}", top.display()))?;
    let spec = top.join("target-kernels.spec");
    std::fs::write(&spec, kernels_spec(kernels))
        .with_context(|| format!("writing {}", spec.display()))?;
    Cmd::new("rpmbuild")
        .args(["-bb", "--quiet", "--define"])
        .arg(format!("_topdir {}", top.display()))
        .arg(&spec)
        .run()
        .map_err(|e| {
            if gpuhost_host::cmd::spawn_failed(&e) {
                hinted(
                    format!("rpmbuild is needed to make a bundle with prebuilt kmods: {e:#}"),
                    "install it: dnf install rpm-build",
                )
            } else {
                e
            }
        })?;
    let rpm: PathBuf = top.join("RPMS/noarch/gpuhost-bundle-target-kernels-1-1.noarch.rpm");
    scratch
        .rpm()
        .args(["-i", "--justdb", "--nodeps", "--noscripts", "--nosignature"])
        .arg(&rpm)
        .run()
        .context("recording the target's kernels in the scratch root")?;
    Ok(())
}

/// What a prebuilt kmod's `%post` does (`depmod -a <kver>`), which the scratch root's installs
/// skip (`tsflags=noscripts`): the next pass's kernel-module check then finds the module the
/// target will load, as it does after `apply`. depmod runs on this machine, on the scratch
/// root's tree (`-b`).
pub(super) fn depmod(scratch: &Host, kernels: &[String]) -> Result<()> {
    for k in kernels {
        if !scratch.is_dir(format!("/lib/modules/{k}")) {
            continue;
        }
        Cmd::new("depmod")
            .arg("-b")
            .arg(scratch.root())
            .arg(k)
            .run()
            .with_context(|| format!("depmod for kernel {k} in the scratch root"))?;
    }
    Ok(())
}

/// The spec of the package that stands for the target's kernels.
fn kernels_spec(kernels: &[String]) -> String {
    let provides: String = kernels
        .iter()
        .map(|k| format!("Provides: kernel-uname-r = {k}\n"))
        .collect();
    format!(
        "Name: gpuhost-bundle-target-kernels\n\
         Version: 1\n\
         Release: 1\n\
         Summary: The kernels a bundle's target has installed (gpuhost bundle's scratch root only)\n\
         License: MIT\n\
         BuildArch: noarch\n\
         AutoReqProv: no\n\
         {provides}\
         %description\n\
         Stands for the kernels the target of a gpuhost bundle has installed, in the scratch root\n\
         the bundle is resolved in; never in a bundle.\n\
         %files\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_kernels_package_provides_each_kernel_and_nothing_else() {
        let s = kernels_spec(&["5.15.0-206.153.7.el9uek.x86_64".into(), "k2".into()]);
        assert!(s.contains("Provides: kernel-uname-r = 5.15.0-206.153.7.el9uek.x86_64\n"));
        assert!(s.contains("Provides: kernel-uname-r = k2\n"));
        assert!(s.contains("AutoReqProv: no\n"));
        assert!(!s.contains("Requires"));
        assert!(s.ends_with("%files\n"));
    }
}
