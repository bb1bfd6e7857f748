//! `persistenced`: `nvidia-persistenced` keeps the GPUs initialised between jobs (no
//! per-process driver load, stable clocks). Enabled; started on a live host. In an install root
//! `systemctl --root enable` works offline and the service starts at boot.

use anyhow::Result;

use crate::step::{Check, Ctx, Step};
use crate::units;

pub struct Persistenced;

const UNIT: &str = "nvidia-persistenced.service";
const PACKAGE: &str = "nvidia-persistenced";

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
        super::not_applicable(ctx)
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        // Not installed yet: it comes with the driver's transaction; enabling it then fails,
        // naming the package, if that transaction did not bring it.
        let installed = !ctx.installed_one(PACKAGE)?.is_empty();
        units::check_enabled(ctx.host, &mut check, UNIT, PACKAGE, installed)?;
        Ok(check)
    }
}
