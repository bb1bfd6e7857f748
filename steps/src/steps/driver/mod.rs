//! The NVIDIA driver from NVIDIA's local full RPM repo package, built for every kernel that
//! will boot. Steps, in order:
//! - `driver-repo`: the local repo package named by the profile, verified, installed;
//! - `build-deps`: what DKMS needs, and the kernel's own compiler when it is not the system one;
//! - `driver`: `dnf module install nvidia-driver:<stream>/<profile>` from that repo;
//! - `nouveau`: nouveau blacklisted on the kernel command line of every served kernel;
//! - `kernel-module`: the NVIDIA module exists for the target and the default boot kernel;
//! - `fabric-manager`: on NVSwitch systems, Fabric Manager of exactly the driver's version, locked;
//! - `persistenced`: `nvidia-persistenced` enabled.
//!
//! Without `driver.local_repo_rpm` in the profile every driver step is skipped with that reason:
//! a profile that names no driver asks for none (the kernel and container steps still run).
//!
//! The driver version is read from the local repo package's file name (NVIDIA names it
//! `cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm`) so that every step knows it
//! without running anything; `driver-repo` checks it against what the package really carries.

pub(crate) mod build_deps;
pub(crate) mod fabric;
pub(crate) mod kmod;
pub(crate) mod module;
pub(crate) mod nouveau;
pub(crate) mod persistenced;
pub(crate) mod repo;

/// Fabric Manager's package rule, shared with `gpuhost status`.
pub use fabric::{package_for as fabric_manager_package, PACKAGES as FABRIC_MANAGER_PACKAGES};

use std::path::PathBuf;

use anyhow::Result;

use crate::error::hinted;
pub use crate::profile::StreamKind;
use crate::runner::Ctx;

/// What NVIDIA's local repo package file name says: `cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalRepoName {
    /// `cuda-repo-rhel8-12-2-local`
    pub package: String,
    /// `12.2.2_535.104.05`
    pub version: String,
    pub release: String,
    pub arch: String,
    /// `535.104.05`
    pub driver: String,
    /// 8 for `rhel8`
    pub os_major: u32,
}

impl LocalRepoName {
    /// Parse a file name; `None` when it is not shaped like NVIDIA's local repo packages.
    pub fn parse(file_name: &str) -> Option<LocalRepoName> {
        let stem = file_name.strip_suffix(".rpm")?;
        let (nvr, arch) = stem.rsplit_once('.')?;
        let (nv, release) = nvr.rsplit_once('-')?;
        let (package, version) = nv.rsplit_once('-')?;
        let (_cuda, driver) = version.split_once('_')?;
        let os = package.strip_prefix("cuda-repo-rhel")?;
        let digits: String = os.chars().take_while(char::is_ascii_digit).collect();
        let os_major = digits.parse().ok()?;
        let dotted = |s: &str| {
            s.split('.').count() >= 2
                && s.split('.')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        };
        if !package.ends_with("-local") || !dotted(driver) || arch.is_empty() || release.is_empty()
        {
            return None;
        }
        Some(LocalRepoName {
            package: package.to_string(),
            version: version.to_string(),
            release: release.to_string(),
            arch: arch.to_string(),
            driver: driver.to_string(),
            os_major,
        })
    }

    /// The driver branch: 535 for 535.104.05.
    pub fn branch(&self) -> u32 {
        branch_of(&self.driver)
    }

    /// The repo directory the package installs: `/var/cuda-repo-rhel8-12-2-local`.
    pub fn repo_dir(&self) -> String {
        format!("/var/{}", self.package)
    }
}

/// The branch of a driver version: 535 for 535.104.05 (0 when unreadable).
pub fn branch_of(driver: &str) -> u32 {
    driver
        .split('.')
        .next()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0)
}

/// The reason every driver step gives when the profile names no driver.
pub const NO_DRIVER: &str =
    "no driver.local_repo_rpm in the profile (set it, or --set driver.local_repo_rpm=PATH, to manage the NVIDIA driver)";

/// The reason every driver step gives when the profile opts out of the driver.
pub const NOT_MANAGED: &str = "driver.manage = false: this profile provisions no NVIDIA driver";

/// The profile's local repo package: its path and what its file name says. Errors name the
/// file and the expected shape; `Ok(None)` when the profile names no driver.
pub fn local_repo(ctx: &Ctx<'_>) -> Result<Option<(PathBuf, LocalRepoName)>> {
    let Some(path) = &ctx.profile.driver.local_repo_rpm else {
        return Ok(None);
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match LocalRepoName::parse(&name) {
        Some(n) => Ok(Some((path.clone(), n))),
        None => Err(hinted(
            format!(
                "{}: the file name is not NVIDIA's local repo package name (cuda-repo-rhel<N>-<M>-<m>-local-<cuda>_<driver>-<rel>.<arch>.rpm), so the driver version is unknown",
                path.display()
            ),
            "set driver.local_repo_rpm to the file as NVIDIA names it",
        )),
    }
}

/// The driver version the profile's local repo package carries, for steps after `driver-repo`.
/// A step runs only when the profile names a driver (see [`not_applicable`]).
pub fn driver_version(ctx: &Ctx<'_>) -> Result<LocalRepoName> {
    match local_repo(ctx)? {
        Some((_, n)) => Ok(n),
        None => Err(anyhow::anyhow!("{NO_DRIVER}")),
    }
}

/// The `not_applicable` of every driver step.
pub fn not_applicable(ctx: &Ctx<'_>) -> Option<String> {
    let d = &ctx.profile.driver;
    if !d.manage {
        Some(NOT_MANAGED.to_string())
    } else {
        d.local_repo_rpm.is_none().then(|| NO_DRIVER.to_string())
    }
}

/// What a profile says about the driver before anything runs: `Err` (invalid input) when it
/// manages the driver but names no package and `selected` (the driver steps that will run) is
/// not empty.
pub fn require_package(profile: &crate::profile::Profile, selected: &[&str]) -> Result<()> {
    let d = &profile.driver;
    if !d.manage || d.local_repo_rpm.is_some() || selected.is_empty() {
        return Ok(());
    }
    Err(crate::invalid!(
        "profile {} manages the NVIDIA driver but names no driver package: set driver.local_repo_rpm to NVIDIA's local repo RPM (--set driver.local_repo_rpm=/path/to/cuda-repo-rhel{}-…-local-….rpm), or driver.manage = false to provision without the driver",
        profile.name,
        profile.os.major
    ))
}

/// The `nvidia-driver` module profile: `fm` (adds Fabric Manager) on NVSwitch systems.
pub fn module_profile(ctx: &Ctx<'_>) -> &'static str {
    if ctx.facts.nvswitches.is_empty() {
        "default"
    } else {
        "fm"
    }
}

/// The machine architecture as rpm names it.
pub fn host_arch() -> &'static str {
    std::env::consts::ARCH
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(
        "cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm",
        "cuda-repo-rhel8-12-2-local",
        "535.104.05",
        "x86_64",
        8
    )]
    #[case(
        "cuda-repo-rhel8-11-4-local-11.4.1_470.57.02-1.x86_64.rpm",
        "cuda-repo-rhel8-11-4-local",
        "470.57.02",
        "x86_64",
        8
    )]
    #[case(
        "cuda-repo-rhel9-12-4-local-12.4.1_550.54.15-1.aarch64.rpm",
        "cuda-repo-rhel9-12-4-local",
        "550.54.15",
        "aarch64",
        9
    )]
    fn local_repo_file_names(
        #[case] file: &str,
        #[case] package: &str,
        #[case] driver: &str,
        #[case] arch: &str,
        #[case] major: u32,
    ) {
        let n = LocalRepoName::parse(file);
        assert_eq!(n.as_ref().map(|n| n.package.as_str()), Some(package));
        assert_eq!(n.as_ref().map(|n| n.driver.as_str()), Some(driver));
        assert_eq!(n.as_ref().map(|n| n.arch.as_str()), Some(arch));
        assert_eq!(n.as_ref().map(|n| n.os_major), Some(major));
    }

    #[rstest]
    #[case("cuda-repo-rhel8-12-2-local-12.2.2-1.x86_64.rpm")]
    #[case("nvidia-driver-535.104.05-1.x86_64.rpm")]
    #[case("cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64")]
    #[case("cuda-repo-rhel8-12-2-network-12.2.2_535.104.05-1.x86_64.rpm")]
    #[case("cuda-repo-rhel8-12-2-local-12.2.2_latest-1.x86_64.rpm")]
    #[case("download.rpm")]
    fn other_file_names_are_not_local_repos(#[case] file: &str) {
        assert_eq!(LocalRepoName::parse(file), None);
    }
}
