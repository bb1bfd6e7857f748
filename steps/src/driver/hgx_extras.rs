//! `hgx-extras`: what an HGX system needs beyond the driver and Fabric Manager (see
//! [`gpuhost_nvidia::hgx`] for the rules and their source, NVIDIA/gpu-driver-container's install scripts):
//! - on NVSwitch systems, NSCQ (`libnvidia-nscq`, `libnvidia-nscq-<branch>` before R580) at the
//!   driver's version;
//! - on NVLink-5 systems (HGX B200, GB200: an InfiniBand device whose VPD says `SW_MNG`), the
//!   NVLink subnet manager `nvlsm` with `infiniband-diags`, and `ib_umad` loaded at every boot
//!   (`/etc/modules-load.d/`): Fabric Manager's start waits for it;
//! - when the plan wants it (`driver.imex`, unset: on for a Grace Blackwell tray), IMEX (`nvidia-imex`, `nvidia-imex-<branch>` in R550–R579) at
//!   the driver's version.
//!
//! Every NVIDIA package of these is locked like Fabric Manager: an `excludepkgs` entry in
//! dnf.conf's `[main]`, which gpuhost's own transactions lift with `--disableexcludes=main`.
//! `infiniband-diags` is Oracle Linux's and stays unlocked.

use anyhow::Result;

use super::context::plan;
use super::locks::{
    locked, main_excludes, stale_locks, switches, wanted, with_exclude, without_excludes, DNF_CONF,
};
use crate::step::{Change, Check, Ctx, DnfFailure, FileWrite, Install, Step, Work};
use gpuhost_nvidia::hgx::{Extra, NVLINK5_MODULES};

pub(crate) struct HgxExtras;

/// The modules-load.d file that loads what Fabric Manager needs on NVLink-5 systems.
pub(crate) const MODULES_LOAD: &str = "/etc/modules-load.d/gpuhost-nvlink5.conf";

/// Its content.
pub(crate) fn modules_load_content() -> String {
    let mut s = String::from(
        "# Written by gpuhost: on NVLink-5 systems Fabric Manager (and nvlsm) start only once\n# these are loaded (NVIDIA/gpu-driver-container, _ensure_nvlink5_prerequisites).\n",
    );
    for m in NVLINK5_MODULES {
        s.push_str(m);
        s.push('\n');
    }
    s
}

/// The extras at the driver's version: installed, or the work that installs them.
fn packages(ctx: &Ctx<'_>, extras: &[Extra], check: &mut Check) -> Result<()> {
    let drv = plan(ctx)?.repo.driver.clone();
    let names: Vec<&str> = extras.iter().map(|e| e.name.as_str()).collect();
    let installed = ctx.installed(&names)?;
    let mut specs = Vec::new();
    let mut why = Vec::new();
    let mut have = Vec::new();
    for e in extras {
        let versions: Vec<String> = installed
            .get(&e.name)
            .map(|v| v.iter().map(|p| p.version.clone()).collect())
            .unwrap_or_default();
        let fits = match &e.version {
            Some(v) => versions.contains(v),
            None => !versions.is_empty(),
        };
        if fits {
            have.push(format!(
                "{} {}",
                e.name,
                e.version.clone().unwrap_or_else(|| versions.join(", "))
            ));
            continue;
        }
        let found = if versions.is_empty() {
            "not installed".to_string()
        } else {
            format!("{} installed", versions.join(", "))
        };
        specs.push(e.spec());
        // IMEX: the choice and its source (the profile, or the GPUs on PCI).
        let because = if gpuhost_nvidia::hgx::is_imex(&e.name) {
            plan(ctx)?.imex.why.clone()
        } else {
            e.why.to_string()
        };
        why.push(format!("{} {found} ({because})", e.name));
    }
    if !specs.is_empty() {
        check.changes.push(Change::new(
            Work::Install(Install {
                specs,
                // `install` of another version moves it; the lock must not hide it.
                disable_excludes: locked(ctx)?,
                ..Install::default()
            }),
            format!("{}; driver {drv}", why.join("; ")),
        ));
    }
    if !have.is_empty() {
        check.notes.push(have.join(", "));
    }
    Ok(())
}

/// The lock: every NVIDIA extra in dnf.conf's excludes, and no lock of a package that is gone.
fn locks(ctx: &Ctx<'_>, extras: &[Extra], check: &mut Check) -> Result<()> {
    let read = ctx.host.read_opt(DNF_CONF)?.unwrap_or_default();
    // Locks of packages no longer installed (the pre-R580 names after an upgrade) go.
    let stale = stale_locks(ctx, &read)?;
    let conf = without_excludes(&read, &stale);
    let excluded = main_excludes(&conf);
    let to_lock: Vec<&Extra> = extras
        .iter()
        .filter(|e| e.lock && !excluded.contains(&e.name))
        .collect();
    if to_lock.is_empty() && !stale.is_empty() {
        check.changes.push(Change::new(
            Work::Write {
                file: FileWrite::new(DNF_CONF, conf.clone(), 0o644),
                owes: None,
            },
            format!("drop the locks of {} (not installed)", stale.join(", ")),
        ));
    }
    if to_lock.is_empty() {
        let locked: Vec<&str> = extras
            .iter()
            .filter(|e| e.lock)
            .map(|e| e.name.as_str())
            .collect();
        if !locked.is_empty() {
            check.notes.push(format!(
                "locked: {} (excludepkgs in {DNF_CONF})",
                locked.join(", ")
            ));
        }
    } else {
        let content = to_lock
            .iter()
            .fold(conf.clone(), |c, e| with_exclude(&c, &e.name));
        let names: Vec<&str> = to_lock.iter().map(|e| e.name.as_str()).collect();
        check.changes.push(Change::new(
                Work::Write {
                    file: FileWrite::new(DNF_CONF, content, 0o644),
                    owes: None,
                },
                format!(
                    "lock {}: excludepkgs, else dnf update could move them away from the driver's version",
                    names.join(", ")
                ),
            ));
    }
    Ok(())
}

/// NVLink-5: ib_umad at every boot, and now on a live host.
fn nvlink5(ctx: &Ctx<'_>, check: &mut Check) -> Result<()> {
    let want = modules_load_content();
    if ctx.host.read_opt(MODULES_LOAD)?.as_deref() == Some(want.as_str()) {
        check.notes.push(format!(
            "{} loaded at boot ({MODULES_LOAD})",
            NVLINK5_MODULES.join(", ")
        ));
    } else {
        check.changes.push(Change::new(
            Work::Write {
                file: FileWrite::new(MODULES_LOAD, want, 0o644),
                owes: None,
            },
            format!(
                "{}: Fabric Manager starts only once {} is loaded",
                switches(ctx),
                NVLINK5_MODULES.join(", ")
            ),
        ));
    }
    for m in NVLINK5_MODULES {
        if !ctx.host.is_live() {
            check.deferred.push(format!("modprobe {m}"));
        } else if !ctx.host.exists(format!("/sys/module/{m}")) {
            check.changes.push(Change::new(
                Work::Run(vec!["modprobe".into(), (*m).to_string()]),
                format!("{m} is not loaded"),
            ));
        }
    }
    Ok(())
}

impl Step for HgxExtras {
    fn id(&self) -> &'static str {
        "hgx-extras"
    }

    fn summary(&self) -> &'static str {
        "on NVSwitch systems: NSCQ; on NVLink-5: nvlsm and ib_umad at boot; IMEX when asked — each locked"
    }

    fn rpm_names(&self, ctx: &Ctx<'_>) -> Vec<String> {
        wanted(ctx)
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.name)
            .collect()
    }

    fn needs_driver_package(&self) -> bool {
        true
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::context::not_applicable(ctx).or_else(|| {
            let imex = ctx
                .driver
                .as_ref()
                .map(|p| p.imex.clone())
                .unwrap_or_default();
            (!ctx.facts.topology().has_nvswitches() && !imex.on).then(|| {
                format!(
                    "no NVSwitch on this host, no IMEX ({}): nothing beyond the driver",
                    imex.why
                )
            })
        })
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let transition = super::installed::transition(ctx)?;
        if transition.driver_repo_first() {
            return Ok(Check::in_sync(transition.deferred_reason()));
        }
        let extras = wanted(ctx)?;
        let mut check = Check::default();
        packages(ctx, &extras, &mut check)?;
        locks(ctx, &extras, &mut check)?;
        if ctx.facts.topology().is_nvlink5() {
            nvlink5(ctx, &mut check)?;
        }
        Ok(check)
    }

    fn explain(&self, ctx: &Ctx<'_>, install: &Install, failure: &DnfFailure) -> anyhow::Error {
        let Some(spec) = failure.unmatched(&install.specs).first().copied() else {
            return failure.error();
        };
        let name = crate::step::package_name_of(spec);
        let available = ctx.available_versions(name).unwrap_or_default();
        gpuhost_host::error::hinted(
            format!(
                "{spec} is not in the enabled repos (available: {})",
                if available.is_empty() {
                    "none".to_string()
                } else {
                    available.join(", ")
                }
            ),
            "NSCQ, IMEX and nvlsm come from the driver's local repo, with its nvidia-driver stream enabled: use NVIDIA's local repo of a driver that carries them",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_load_lists_ib_umad_one_per_line() {
        let c = modules_load_content();
        let modules: Vec<&str> = c
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        assert_eq!(modules, vec!["ib_umad"]);
    }
}
