//! Prebuilt kmods (`driver.kmod_repo`): the repo `gpuhost kmod build` wrote on a build host,
//! read and checked once in apply's preparation. The node installs the kmod of each served
//! kernel from it, by file (each RPM checked against the manifest's SHA-256 first, and copied
//! onto the root's disk by the transaction), instead of NVIDIA's DKMS package: no compiler,
//! headers or DKMS on the node. What the repo lacks is refused here, before anything changes.

use std::path::{Path, PathBuf};

use anyhow::Result;

use gpuhost_host::error::{as_invalid, hinted};
use gpuhost_host::kmodrepo::KmodManifest;
use gpuhost_nvidia::flavour::ModuleFlavour;
use gpuhost_nvidia::packages::{self, Kmod};

/// A kmod repo, its manifest checked.
#[derive(Clone, Debug)]
pub struct PrebuiltKmods {
    /// The repo directory (absolute).
    pub dir: PathBuf,
    pub manifest: KmodManifest,
}

/// One served kernel's kmod: its package name and its RPM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrebuiltKmod {
    pub kernel: String,
    pub package: String,
    pub file: PathBuf,
}

impl PrebuiltKmods {
    /// The repo `dir`, read and checked, for `driver`'s `flavour` modules on `kernels` (the
    /// kernels the run serves): bad input (exit 2) naming what is wrong — a manifest that does
    /// not match its files, a kernel without a kmod of that driver, flavour and arch, with the
    /// build host's command that makes it.
    pub fn read(
        dir: &Path,
        driver: &str,
        flavour: ModuleFlavour,
        kernels: &[String],
        local_repo_rpm: &Path,
    ) -> Result<PrebuiltKmods> {
        let dir = std::path::absolute(dir)?;
        let manifest = KmodManifest::read_verified(&dir)?;
        let kmods = PrebuiltKmods { dir, manifest };
        let missing: Vec<&String> = kernels
            .iter()
            .filter(|k| kmods.find(driver, flavour, k).is_none())
            .collect();
        if let Some(first) = missing.first() {
            let others: Vec<String> = kmods
                .manifest
                .kmods
                .iter()
                .filter(|e| &e.kernel == *first)
                .map(|e| format!("{} {}", e.driver, e.flavour))
                .collect();
            let has = if others.is_empty() {
                String::new()
            } else {
                format!(" (it has {} for that kernel)", others.join(", "))
            };
            let kernels: Vec<String> = missing
                .iter()
                .map(|k| format!("--kernel-release {k}"))
                .collect();
            return Err(as_invalid(hinted(
                format!(
                    "the kmod repo {} has no NVIDIA {driver} {flavour} kmod for kernel {first}{has}; nothing was changed",
                    kmods.dir.display()
                ),
                format!(
                    "build it on the build host: gpuhost kmod build --root <build root> {} --local-repo-rpm {} --flavour {flavour} --key <fleet key> --cert <fleet cert> --out <the repo>, then copy the repo here",
                    kernels.join(" "),
                    local_repo_rpm.display()
                ),
            )));
        }
        Ok(kmods)
    }

    /// Why a step that compiles has nothing to do: the node installs the build host's kmods.
    pub fn nothing_built(&self) -> String {
        format!(
            "prebuilt kmods from {} (built and signed on a build host): nothing is compiled on this host",
            self.dir.display()
        )
    }

    /// The kmod of a driver, flavour and kernel, if the repo has one.
    pub fn find(&self, driver: &str, flavour: ModuleFlavour, kernel: &str) -> Option<PrebuiltKmod> {
        let e = self.manifest.find(driver, &flavour.to_string(), kernel)?;
        let package = packages::kmod_package(Kmod::Built, flavour, driver, kernel)?;
        (package == e.package).then(|| PrebuiltKmod {
            kernel: kernel.to_string(),
            package,
            file: self.dir.join(&e.file),
        })
    }
}
