//! `fabric-manager` (NVSwitch systems only): Fabric Manager of exactly the driver's version —
//! any other version leaves the fabric uninitialised — locked so that `dnf update` cannot
//! drift it, and enabled. The package is `nvidia-fabric-manager` before the 580 branch and
//! `nvidia-fabricmanager` from 580. The lock is an `excludepkgs` entry in dnf.conf's `[main]`:
//! it needs no plugin, and gpuhost's own transactions lift it with `--disableexcludes=main`.

use anyhow::Result;

use super::context::driver_version;
use super::locks::{
    locked, main_excludes, stale_locks, switches, with_exclude, without_excludes, DNF_CONF,
};
use crate::step::{Change, Check, Ctx, DnfFailure, FileWrite, Install, Step, Work};
use crate::units;

pub(crate) struct FabricManager;

const UNIT: &str = "nvidia-fabricmanager.service";

pub use gpuhost_nvidia::hgx::{
    fabric_manager_package_of as package_for, FABRIC_MANAGER_PACKAGES as PACKAGES,
};

impl Step for FabricManager {
    fn id(&self) -> &'static str {
        "fabric-manager"
    }

    fn summary(&self) -> &'static str {
        "on NVSwitch systems: Fabric Manager of the driver's exact version, locked and enabled"
    }

    fn rpm_names(&self, ctx: &Ctx<'_>) -> Vec<String> {
        match driver_version(ctx) {
            Ok(n) if ctx.facts.topology().has_nvswitches() => {
                vec![package_for(&n.driver).to_string()]
            }
            _ => vec![],
        }
    }

    fn needs_driver_package(&self) -> bool {
        true
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::context::not_applicable(ctx).or_else(|| {
            (!ctx.facts.topology().has_nvswitches())
                .then(|| "no NVSwitch on this host: Fabric Manager is not needed".to_string())
        })
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let transition = super::installed::transition(ctx)?;
        if transition.driver_repo_first() {
            return Ok(Check::in_sync(transition.deferred_reason()));
        }
        let drv = driver_version(ctx)?.driver;
        let pkg = package_for(&drv);
        let mut check = Check::default();
        let installed = ctx.installed_one(pkg)?;
        let versions: Vec<String> = installed.iter().map(|p| p.version.clone()).collect();
        let present = versions.contains(&drv);
        if !present {
            let found = if versions.is_empty() {
                "not installed".to_string()
            } else {
                format!(
                    "{pkg} {} installed: it must equal the driver's version",
                    versions.join(", ")
                )
            };
            check.changes.push(Change::new(
                Work::Install(Install {
                    specs: vec![format!("{pkg}-{drv}")],
                    // `install` of a lower version downgrades; the lock must not hide it.
                    disable_excludes: locked(ctx)?,
                    ..Install::default()
                }),
                format!("{found} (driver {drv}, {})", switches(ctx)),
            ));
        }
        let read = ctx.host.read_opt(DNF_CONF)?.unwrap_or_default();
        // Locks of packages no longer installed (the pre-R580 names after an upgrade) go.
        let stale = stale_locks(ctx, &read)?;
        let conf = without_excludes(&read, &stale);
        let dropped = if stale.is_empty() {
            String::new()
        } else {
            format!("; drop the locks of {} (not installed)", stale.join(", "))
        };
        if main_excludes(&conf).iter().any(|e| e == pkg) {
            check
                .notes
                .push(format!("{pkg} {drv} locked (excludepkgs in {DNF_CONF})"));
            if !stale.is_empty() {
                check.changes.push(Change::new(
                    Work::Write {
                        file: FileWrite::new(DNF_CONF, conf, 0o644),
                        owes: None,
                    },
                    dropped.trim_start_matches("; ").to_string(),
                ));
            }
        } else {
            check.changes.push(Change::new(
                Work::Write {
                    file: FileWrite::new(DNF_CONF, with_exclude(&conf, pkg), 0o644),
                    owes: None,
                },
                format!("lock {pkg}: excludepkgs={pkg}, else dnf update could move it away from the driver's version{dropped}"),
            ));
        }
        units::check_enabled(ctx.host, &mut check, UNIT, pkg, present)?;
        Ok(check)
    }

    fn explain(&self, ctx: &Ctx<'_>, _install: &Install, failure: &DnfFailure) -> anyhow::Error {
        let drv = match driver_version(ctx) {
            Ok(n) => n.driver,
            Err(e) => return e,
        };
        let pkg = package_for(&drv);
        let available = ctx.available_versions(pkg).unwrap_or_default();
        gpuhost_host::error::hinted(
            format!(
                "{pkg} {drv} could not be installed (available: {}): {}",
                if available.is_empty() {
                    "none".to_string()
                } else {
                    available.join(", ")
                },
                gpuhost_host::cmd::tail_lines(&failure.out.stderr, 4)
            ),
            "Fabric Manager must come from the same local repo as the driver",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("535.104.05", "nvidia-fabric-manager")]
    #[case("570.86.15", "nvidia-fabric-manager")]
    #[case("580.65.06", "nvidia-fabricmanager")]
    fn package_by_branch(#[case] drv: &str, #[case] pkg: &str) {
        assert_eq!(package_for(drv), pkg);
    }

    #[test]
    fn lock_adds_to_main_excludes_only() {
        let conf = "[main]\ngpgcheck=1\n\n[other]\nexcludepkgs=foo\n";
        let got = with_exclude(conf, "nvidia-fabric-manager");
        assert_eq!(
            got,
            "[main]\ngpgcheck=1\nexcludepkgs=nvidia-fabric-manager\n\n[other]\nexcludepkgs=foo\n"
        );
        assert_eq!(main_excludes(&got), vec!["nvidia-fabric-manager"]);
        let twice = with_exclude("[main]\nexcludepkgs=kernel*\n", "nvidia-fabric-manager");
        assert_eq!(
            main_excludes(&twice),
            vec!["kernel*", "nvidia-fabric-manager"]
        );
        assert_eq!(main_excludes(&with_exclude("", "x")), vec!["x".to_string()]);
    }
}
