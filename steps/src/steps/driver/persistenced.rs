//! `persistenced`: `nvidia-persistenced` keeps the GPUs initialised between jobs (no
//! per-process driver load, stable clocks). Enabled; started on a live host. In an install root
//! `systemctl --root enable` works offline and the service starts at boot.

use anyhow::Result;

use crate::runner::{Action, Change, Check, Ctx, Step};
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

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::not_applicable(ctx)
    }

    fn check(&self, ctx: &mut Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let installed = !ctx.installed_one(PACKAGE)?.is_empty();
        if !installed && !ctx.dry_run {
            return Err(crate::error::hinted(
                format!("{PACKAGE} is not installed"),
                "it comes with the driver (nvidia-driver-cuda): check the driver step",
            ));
        }
        units::check_enabled(ctx.host, &mut check, UNIT, PACKAGE, !installed)?;
        Ok(check)
    }

    fn apply(&self, ctx: &mut Ctx<'_>, changes: &[Change]) -> Result<()> {
        for c in changes {
            let Action::Custom(what) = &c.action else {
                return Err(anyhow::anyhow!("persistenced cannot {}", c.action));
            };
            if !units::apply_change(ctx.host, what)? {
                return Err(anyhow::anyhow!("persistenced cannot {what}"));
            }
        }
        Ok(())
    }
}
