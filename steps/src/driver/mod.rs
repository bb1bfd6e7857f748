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
pub(crate) mod built_by;
pub use built_by::settle as settle_built_by;
pub(crate) mod change;
pub(crate) mod context;
pub(crate) mod dkms_cc;
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
pub mod versionlock;
pub use repo::local_repo_size;

/// On a release whose NVIDIA packages are not modular (EL10), the versionlock list the branch
/// lock goes into, checked before any change (exit 2 naming the file or setting).
pub fn lock_list_ready(host: &gpuhost_host::host::Host, plan: &DriverPlan) -> anyhow::Result<()> {
    if plan.modular() {
        return Ok(());
    }
    plain::lock_list_of(host).map(drop)
}
pub mod signing;

pub use crate::run::{require_package, resolve, DriverPlan};
pub use crate::run::{InstalledRepo, Transition};
/// Fabric Manager's package rule, shared with `gpuhost status`.
pub use fabric::{package_for as fabric_manager_package, PACKAGES as FABRIC_MANAGER_PACKAGES};
pub use gpuhost_nvidia::localrepo::{branch_of, LocalRepoFile};

pub use gpuhost_profile::{InstallSet, StreamKind, SPLIT_PACKAGES_SINCE};

pub use context::{
    driver_version, host_arch, module_profile, not_applicable, plan, stream, NOT_MANAGED, NO_DRIVER,
};
