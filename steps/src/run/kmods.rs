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
    /// The served kernels it has no kmod for (refused before any change on a node without an
    /// NVIDIA module; on one with, the kernel guard keeps the boot on a kernel that has one).
    pub missing: Vec<String>,
    /// The served kernels' kmods, each checked to be what gpuhost builds but its scriptlets
    /// ([`PrebuiltKmods::scriptlets_checked`]).
    served: Vec<PrebuiltKmod>,
    /// The build host's command that makes the missing kmods.
    build: String,
}

/// One served kernel's kmod: its package name and its RPM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrebuiltKmod {
    pub kernel: String,
    pub package: String,
    pub file: PathBuf,
    /// The arch its manifest entry gives.
    pub arch: String,
    /// The module files its manifest entry lists (`nvidia.ko`).
    pub modules: Vec<String>,
}

impl PrebuiltKmods {
    /// The repo `dir`, read and checked (a manifest that does not match its files is bad
    /// input, exit 2, naming the file), for `driver`'s `flavour` modules on `kernels` (the
    /// kernels the run serves): those it has no kmod for are [`PrebuiltKmods::missing`].
    pub fn read(
        dir: &Path,
        driver: &str,
        flavour: ModuleFlavour,
        kernels: &[String],
        local_repo_rpm: &Path,
    ) -> Result<PrebuiltKmods> {
        let dir = std::path::absolute(dir)?;
        let manifest = KmodManifest::read_verified(&dir)?;
        let mut kmods = PrebuiltKmods {
            dir,
            manifest,
            missing: Vec::new(),
            served: Vec::new(),
            build: String::new(),
        };
        for k in kernels {
            match kmods.find(driver, flavour, k) {
                Some(kmod) => {
                    kmod.is_what_gpuhost_builds(driver)?;
                    kmods.served.push(kmod);
                }
                None => kmods.missing.push(k.clone()),
            }
        }
        let kernels: Vec<String> = kmods
            .missing
            .iter()
            .map(|k| format!("--kernel-release {k}"))
            .collect();
        kmods.build = format!(
            "build it on the build host: gpuhost kmod build --root <build root> {} --local-repo-rpm {} --flavour {flavour} --key <fleet key> --cert <fleet cert> --out <the repo>, then copy the repo here",
            kernels.join(" "),
            local_repo_rpm.display()
        );
        Ok(kmods)
    }

    /// Why a served kernel without a kmod stops the run: the kernel, what the repo has for it,
    /// and the build host's command that makes it. `invalid`: before any change (exit 2, a
    /// node that has no NVIDIA module yet); otherwise a failure the kernel guard judges (it keeps
    /// the default boot on a kernel that has one).
    pub fn no_kmod(
        &self,
        driver: &str,
        flavour: ModuleFlavour,
        invalid: bool,
    ) -> Option<anyhow::Error> {
        let first = self.missing.first()?;
        let others: Vec<String> = self
            .manifest
            .kmods
            .iter()
            .filter(|e| &e.kernel == first)
            .map(|e| format!("{} {}", e.driver, e.flavour))
            .collect();
        let has = if others.is_empty() {
            String::new()
        } else {
            format!(" (it has {} for that kernel)", others.join(", "))
        };
        // A failure the kernel guard records keeps its message only: it names the build too.
        let changed = if invalid {
            "; nothing was changed".to_string()
        } else {
            format!("; {}", self.build)
        };
        let e = hinted(
            format!(
                "the kmod repo {} has no NVIDIA {driver} {flavour} kmod for kernel {first}{has}{changed}",
                self.dir.display()
            ),
            self.build.clone(),
        );
        Some(if invalid { as_invalid(e) } else { e })
    }

    /// The served kernels' kmod RPMs carry gpuhost's scriptlets and no others (rpm reads them:
    /// the root's, through `host`). Bad input otherwise (exit 2), before any change.
    pub fn scriptlets_checked(&self, host: &gpuhost_host::host::Host) -> Result<()> {
        self.served
            .iter()
            .try_for_each(|k| k.scriptlets_are_gpuhosts(host))
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
            arch: e.arch.clone(),
            modules: e.modules.clone(),
        })
    }
}
