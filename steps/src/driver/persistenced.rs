//! `persistenced`: `nvidia-persistenced` keeps the GPUs initialised between jobs (no
//! per-process driver load, stable clocks). Enabled; started on a live host. In an install root
//! `systemctl --root enable` works offline and the service starts at boot.

use anyhow::Result;

use crate::step::{Change, Check, Ctx, Install, Step, Work};
use crate::units;

pub(crate) struct Persistenced;

const UNIT: &str = "nvidia-persistenced.service";
const PACKAGE: &str = gpuhost_nvidia::packages::PERSISTENCED;

impl Step for Persistenced {
    fn id(&self) -> &'static str {
        "persistenced"
    }

    fn summary(&self) -> &'static str {
        "enable (and on a live host start) nvidia-persistenced"
    }

    fn rpm_names(&self, _ctx: &Ctx<'_>) -> Vec<String> {
        vec![PACKAGE.to_string()]
    }

    fn needs_driver_package(&self) -> bool {
        true
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::context::not_applicable(ctx)
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        // Not installed: it comes in the driver's transaction, at the driver's version (named
        // here too, so a transaction stopped before it — its %pre failed, a mirror went away —
        // is finished by the next run); enabling it fails, naming the package, if no
        // transaction brought it.
        let installed = !ctx.installed_one(PACKAGE)?.is_empty();
        if !installed {
            let drv = super::context::driver_version(ctx)?.driver;
            check.changes.push(Change::new(
                Work::Install(Install {
                    specs: vec![format!("{PACKAGE}-{drv}")],
                    disable_excludes: super::locks::locked(ctx)?,
                    ..Install::default()
                }),
                format!("{PACKAGE} not installed (driver {drv})"),
            ));
        }
        units::check_enabled(ctx.host, &mut check, UNIT, PACKAGE, installed)?;
        Ok(check)
    }
}
