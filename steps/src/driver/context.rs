//! What every driver step asks of the run: its driver plan (resolved once, before any step),
//! whether the profile manages a driver at all, the stream, the module profile and the host's
//! architecture.

use anyhow::Result;

use crate::run::DriverPlan;
use crate::step::Ctx;
use gpuhost_nvidia::localrepo::LocalRepoFile;

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
