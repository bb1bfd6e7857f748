//! `fabric-manager` (NVSwitch systems only): Fabric Manager of exactly the driver's version —
//! any other version leaves the fabric uninitialised — locked so that `dnf update` cannot
//! drift it, and enabled. The package is `nvidia-fabric-manager` before the 580 branch and
//! `nvidia-fabricmanager` from 580. The lock is an `excludepkgs` entry in dnf.conf's `[main]`:
//! it needs no plugin, and gpuhost's own transactions lift it with `--disableexcludes=main`.

use anyhow::Result;

use super::driver_version;
use crate::step::{Change, Check, Ctx, DnfFailure, FileWrite, Install, Step, Work};
use crate::units;

pub struct FabricManager;

pub const DNF_CONF: &str = "/etc/dnf/dnf.conf";
const UNIT: &str = "nvidia-fabricmanager.service";

pub use gpuhost_nvidia::hgx::{
    fabric_manager_package_of as package_for, FABRIC_MANAGER_PACKAGES as PACKAGES,
};

/// True when dnf.conf locks a package gpuhost locks for this driver (Fabric Manager, NSCQ,
/// nvlsm, IMEX): gpuhost's own transactions then lift the locks with `--disableexcludes=main`.
pub fn locked(ctx: &Ctx<'_>) -> Result<bool> {
    let Ok(drv) = driver_version(ctx).map(|n| n.driver) else {
        return Ok(false);
    };
    let conf = ctx.host.read_opt(DNF_CONF)?.unwrap_or_default();
    let excluded = main_excludes(&conf);
    if excluded.iter().any(|e| e == package_for(&drv)) {
        return Ok(true);
    }
    let extras = super::hgx_extras::wanted(ctx).unwrap_or_default();
    Ok(extras.iter().any(|x| x.lock && excluded.contains(&x.name)))
}

/// The package names excluded in dnf.conf's `[main]` (`excludepkgs=` or its alias `exclude=`).
pub fn main_excludes(conf: &str) -> Vec<String> {
    let mut in_main = false;
    let mut out = Vec::new();
    for line in conf.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_main = t == "[main]";
            continue;
        }
        if !in_main {
            continue;
        }
        if let Some((k, v)) = t.split_once('=') {
            if matches!(k.trim(), "excludepkgs" | "exclude") {
                out.extend(
                    v.split([',', ' '])
                        .filter(|s| !s.is_empty())
                        .map(str::to_string),
                );
            }
        }
    }
    out
}

/// dnf.conf with `pkg` added to `[main]`'s excludes (a `[main]` section is added if missing).
pub fn with_exclude(conf: &str, pkg: &str) -> String {
    let mut lines: Vec<String> = conf.lines().map(str::to_string).collect();
    let main = lines.iter().position(|l| l.trim() == "[main]");
    let Some(main) = main else {
        let mut out = format!("[main]\nexcludepkgs={pkg}\n");
        if !conf.is_empty() {
            out.push_str(conf);
            if !conf.ends_with('\n') {
                out.push('\n');
            }
        }
        return out;
    };
    let end = lines
        .iter()
        .enumerate()
        .skip(main + 1)
        .find(|(_, l)| l.trim().starts_with('['))
        .map_or(lines.len(), |(i, _)| i);
    let existing = (main + 1..end).find(|i| {
        lines[*i]
            .split_once('=')
            .is_some_and(|(k, _)| k.trim() == "excludepkgs")
    });
    match existing {
        Some(i) => {
            let l = lines[i].trim_end().to_string();
            let sep = if l.trim_end().ends_with('=') { "" } else { "," };
            lines[i] = format!("{l}{sep}{pkg}");
        }
        None => {
            // After the section's last setting, before trailing blank lines.
            let mut at = end;
            while at > main + 1 && lines[at - 1].trim().is_empty() {
                at -= 1;
            }
            lines.insert(at, format!("excludepkgs={pkg}"));
        }
    }
    lines.join("\n") + "\n"
}

/// The NVSwitches, in words: `4 NVSwitches` on PCI, `2 NVLink-5 switch ports`.
pub fn switches(ctx: &Ctx<'_>) -> String {
    let t = ctx.facts.topology();
    let mut parts = Vec::new();
    if t.pci_nvswitches > 0 {
        parts.push(format!("{} NVSwitches", t.pci_nvswitches));
    }
    if t.nvlink5_switch_ports > 0 {
        parts.push(format!(
            "{} NVLink-5 switch management ports",
            t.nvlink5_switch_ports
        ));
    }
    parts.join(", ")
}

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
        super::not_applicable(ctx).or_else(|| {
            (!ctx.facts.topology().has_nvswitches())
                .then(|| "no NVSwitch on this host: Fabric Manager is not needed".to_string())
        })
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
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
        let conf = ctx.host.read_opt(DNF_CONF)?.unwrap_or_default();
        if main_excludes(&conf).iter().any(|e| e == pkg) {
            check
                .notes
                .push(format!("{pkg} {drv} locked (excludepkgs in {DNF_CONF})"));
        } else {
            check.changes.push(Change::new(
                Work::Write {
                    file: FileWrite::new(DNF_CONF, with_exclude(&conf, pkg), 0o644),
                    owes: None,
                },
                format!("lock {pkg}: excludepkgs={pkg}, else dnf update could move it away from the driver's version"),
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
