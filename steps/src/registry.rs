//! The steps, and the one ordered registry of them.

use crate::containers;
use crate::driver;
use crate::kernel;
use crate::kernel_headers;
use crate::step::Step;

/// The ordered registry: the order `apply` checks the steps in, carries out their work in
/// (after the package transactions), reports them in, and `gpuhost steps` lists them in. Ids
/// are stable: `--only`, `--skip`, reports and logs use them.
pub fn registry() -> Vec<&'static dyn Step> {
    vec![
        &kernel::Kernel,
        &kernel_headers::KernelHeaders,
        &driver::repo::DriverRepo,
        &driver::build_deps::BuildDeps,
        &driver::module::Driver,
        &driver::nouveau::Nouveau,
        &driver::kmod::KernelModule,
        &driver::fabric::FabricManager,
        &driver::hgx_extras::HgxExtras,
        &driver::persistenced::Persistenced,
        &containers::docker::Docker,
        &containers::toolkit::ContainerToolkit,
        &containers::daemon_json::DaemonJson,
        &containers::services::Services,
        &containers::prefix_links::PrefixLinks,
        &containers::smoke::ContainerSmoke,
    ]
}

/// The steps of `sel` that need the driver's local repo package.
pub fn steps_needing_package(sel: &crate::step::Selection) -> Vec<&'static str> {
    registry()
        .iter()
        .filter(|s| s.needs_driver_package() && sel.excludes(s.id()).is_none())
        .map(|s| s.id())
        .collect()
}
