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
pub(crate) mod change;
pub(crate) mod fabric;
pub(crate) mod hgx_extras;
pub(crate) mod installed;
pub(crate) mod kmod;
pub(crate) mod locks;
pub(crate) mod module;
pub(crate) mod nouveau;
pub(crate) mod persistenced;
pub(crate) mod plain;
pub(crate) mod repo;
pub(crate) mod set;
pub mod transition;
pub mod versionlock;
pub use repo::local_repo_size;
pub mod signing;

pub use crate::driver_plan::{require_package, resolve, DriverPlan};
/// Fabric Manager's package rule, shared with `gpuhost status`.
pub use fabric::{package_for as fabric_manager_package, PACKAGES as FABRIC_MANAGER_PACKAGES};
pub use gpuhost_nvidia::localrepo::{branch_of, LocalRepoFile};
pub use transition::{InstalledRepo, Transition};

use anyhow::Result;

use crate::step::Ctx;
pub use gpuhost_profile::{InstallSet, StreamKind, SPLIT_PACKAGES_SINCE};

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

/// The `nvidia-driver` module profile: `fm` (adds Fabric Manager) on NVSwitch systems.
pub fn module_profile(ctx: &Ctx<'_>) -> &'static str {
    if ctx.facts.topology().has_nvswitches() {
        "fm"
    } else {
        "default"
    }
}

/// The architecture of the host gpuhost provisions, as rpm names it: the machine's, or an
/// install root's own (its rpm database's), never the build machine's.
pub fn host_arch(ctx: &Ctx<'_>) -> String {
    ctx.facts
        .arch
        .clone()
        .unwrap_or_else(|| gpuhost_host::arch::machine().to_string())
}
