//! The NVIDIA driver from NVIDIA's local repo package, built for every kernel that will boot.
//! Steps, in order:
//! - `driver-repo`: the local repo package named by the profile (a CUDA local repo or a
//!   driver-only local repo), verified, installed;
//! - `build-deps`: what DKMS needs, and the kernel's own compiler when it is not the system one;
//! - `driver`: the `nvidia-driver` module stream of the flavour that fits the GPUs, and the
//!   driver's packages, from that repo;
//! - `nouveau`: nouveau blacklisted on the kernel command line of every served kernel;
//! - `kernel-module`: the NVIDIA module exists for the target and the default boot kernel;
//! - `fabric-manager`: on NVSwitch systems, Fabric Manager of exactly the driver's version, locked;
//! - `hgx-extras`: on NVSwitch systems NSCQ, on NVLink-5 systems the subnet manager and
//!   `ib_umad`, and IMEX when asked, each locked;
//! - `persistenced`: `nvidia-persistenced` enabled.
//!
//! Without `driver.local_repo_rpm` in the profile every driver step is skipped with that reason:
//! a profile that names no driver asks for none (the kernel and container steps still run).
//!
//! Before any step runs, [`resolve`] reads the driver version from the local repo package's
//! file name (NVIDIA names them `cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm` and
//! `nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm`), chooses the kernel module
//! flavour and stream for the GPUs on PCI ([`gpuhost_nvidia::flavour`]) and checks the package set the
//! profile asks for exists for that driver: what cannot work is refused then (exit 2), before
//! anything changes. `driver-repo` checks the version against what the package really carries.

pub(crate) mod build_deps;
pub(crate) mod fabric;
pub(crate) mod hgx_extras;
pub(crate) mod kmod;
pub(crate) mod module;
pub(crate) mod nouveau;
pub(crate) mod persistenced;
pub(crate) mod repo;
pub use repo::local_repo_size;
pub mod signing;

/// Fabric Manager's package rule, shared with `gpuhost status`.
pub use fabric::{package_for as fabric_manager_package, PACKAGES as FABRIC_MANAGER_PACKAGES};
pub use gpuhost_nvidia::localrepo::{branch_of, LocalRepoFile};

use std::path::PathBuf;

use anyhow::Result;

use crate::step::Ctx;
use gpuhost_host::facts::Facts;
use gpuhost_host::invalid;
use gpuhost_nvidia::flavour::{self, Choice, ModuleFlavour};
use gpuhost_profile::Profile;
pub use gpuhost_profile::{InstallSet, StreamKind, SPLIT_PACKAGES_SINCE};

/// The driver a run manages, worked out before any step: the local repo package, the flavour
/// and stream for the GPUs, and the package set.
#[derive(Clone, Debug)]
pub struct DriverPlan {
    /// The local repo package's path on the host.
    pub path: PathBuf,
    /// What its file name says.
    pub repo: LocalRepoFile,
    /// The kernel module flavour, the stream, and why (one line, for `plan`).
    pub choice: Choice,
    pub install: InstallSet,
}

impl DriverPlan {
    /// The `nvidia-driver` stream to install.
    pub fn stream(&self) -> &str {
        &self.choice.stream
    }

    pub fn kind(&self) -> StreamKind {
        StreamKind::of(&self.choice.stream)
    }
}

/// Work out the driver of a run; `Ok(None)` when the profile names no driver. Bad input (an
/// unrecognised file name, a flavour that cannot drive the GPUs, a package set the driver does
/// not have) is refused here, before anything changes.
pub fn resolve(profile: &Profile, facts: &Facts) -> Result<Option<DriverPlan>> {
    let spec = &profile.driver;
    if !spec.manage {
        return Ok(None);
    }
    let Some(path) = &spec.local_repo_rpm else {
        return Ok(None);
    };
    let repo = LocalRepoFile::of_path(path)?;
    let file = path.file_name().unwrap_or_default().to_string_lossy();
    let choice = flavour::choose(
        spec.flavour,
        spec.stream.as_deref(),
        &facts.pci_gpus(),
        repo.branch(),
    )?;
    let branch = repo.branch();
    if branch < SPLIT_PACKAGES_SINCE {
        let needs = match (spec.install, choice.flavour) {
            (InstallSet::ComputeOnly, _) => Some("NVIDIA's compute-only packaging"),
            (InstallSet::Full, ModuleFlavour::Open) => Some("the nvidia-open package"),
            _ => None,
        };
        if let Some(what) = needs {
            return Err(invalid!(
                "driver.install = \"{}\" needs {what}, which starts with driver R{SPLIT_PACKAGES_SINCE}, but {file} carries driver {}; set driver.install = \"module\" or use a newer driver",
                spec.install,
                repo.driver
            ));
        }
    }
    if spec.imex {
        // Refuses a driver without IMEX.
        gpuhost_nvidia::hgx::extras(gpuhost_nvidia::hgx::Topology::default(), &repo.driver, true)?;
    }
    Ok(Some(DriverPlan {
        path: path.clone(),
        repo,
        choice,
        install: spec.install,
    }))
}

/// The reason every driver step gives when the profile names no driver.
pub const NO_DRIVER: &str =
    "no driver.local_repo_rpm in the profile (set it, or --set driver.local_repo_rpm=PATH, to manage the NVIDIA driver)";

/// The reason every driver step gives when the profile opts out of the driver.
pub const NOT_MANAGED: &str = "driver.manage = false: this profile provisions no NVIDIA driver";

/// The run's driver (see [`resolve`]); an error when the profile names none. A step runs only
/// when the profile names a driver (see [`not_applicable`]).
pub fn plan<'c>(ctx: &'c Ctx<'_>) -> Result<&'c DriverPlan> {
    ctx.driver
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("{NO_DRIVER}"))
}

/// What the profile's local repo package file name says, for steps after `driver-repo`.
pub fn driver_version(ctx: &Ctx<'_>) -> Result<LocalRepoFile> {
    Ok(plan(ctx)?.repo.clone())
}

/// The `nvidia-driver` stream of the run (empty without a driver).
pub fn stream<'c>(ctx: &'c Ctx<'_>) -> &'c str {
    ctx.driver.as_ref().map_or("", DriverPlan::stream)
}

/// The `not_applicable` of every driver step.
pub fn not_applicable(ctx: &Ctx<'_>) -> Option<String> {
    if !ctx.profile.driver.manage {
        Some(NOT_MANAGED.to_string())
    } else {
        ctx.driver.is_none().then(|| NO_DRIVER.to_string())
    }
}

/// What a profile says about the driver before anything runs: `Err` (invalid input) when it
/// manages the driver but names no package and `selected` (the driver steps that will run) is
/// not empty.
/// The steps of `sel` that need the driver's local repo package.
pub fn steps_needing_package(sel: &crate::step::Selection) -> Vec<&'static str> {
    crate::registry()
        .iter()
        .filter(|s| s.needs_driver_package() && sel.excludes(s.id()).is_none())
        .map(|s| s.id())
        .collect()
}

pub fn require_package(profile: &Profile, selected: &[&str]) -> Result<()> {
    let d = &profile.driver;
    if !d.manage || d.local_repo_rpm.is_some() || selected.is_empty() {
        return Ok(());
    }
    Err(gpuhost_host::invalid!(
        "profile {} manages the NVIDIA driver but names no driver package: set driver.local_repo_rpm to NVIDIA's local repo RPM (--set driver.local_repo_rpm=/path/to/nvidia-driver-local-repo-rhel{}-<driver>-1.0-1.x86_64.rpm or a cuda-repo-rhel{}-…-local-….rpm), or driver.manage = false to provision without the driver",
        profile.name,
        profile.os.major,
        profile.os.major
    ))
}

/// The `nvidia-driver` module profile: `fm` (adds Fabric Manager) on NVSwitch systems.
pub fn module_profile(ctx: &Ctx<'_>) -> &'static str {
    if ctx.facts.topology().has_nvswitches() {
        "fm"
    } else {
        "default"
    }
}

/// The machine architecture as rpm names it.
pub fn host_arch() -> &'static str {
    std::env::consts::ARCH
}
