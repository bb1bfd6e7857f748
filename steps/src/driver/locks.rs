//! The locks gpuhost keeps on the NVIDIA packages that must stay at the driver's exact version
//! (Fabric Manager, NSCQ, nvlsm, IMEX): `excludepkgs` entries in dnf.conf's `[main]`, which need
//! no plugin and which gpuhost's own transactions lift with `--disableexcludes=main`; and what
//! this run's HGX system needs beyond the driver ([`wanted`]). `fabric-manager` and
//! `hgx-extras` both keep locks here.

use anyhow::Result;

use super::context::{driver_version, plan};
use crate::step::Ctx;
use gpuhost_nvidia::hgx::{self, fabric_manager_package_of as package_for, Extra};

pub(crate) const DNF_CONF: &str = "/etc/dnf/dnf.conf";

/// The extras of this run: none without a driver.
pub(crate) fn wanted(ctx: &Ctx<'_>) -> Result<Vec<Extra>> {
    let Ok(p) = plan(ctx) else {
        return Ok(Vec::new());
    };
    hgx::extras(ctx.facts.topology(), &p.repo.driver, p.imex.on)
}

/// True when dnf.conf locks a package gpuhost locks for this driver (Fabric Manager, NSCQ,
/// nvlsm, IMEX): gpuhost's own transactions then lift the locks with `--disableexcludes=main`.
pub(crate) fn locked(ctx: &Ctx<'_>) -> Result<bool> {
    let Ok(drv) = driver_version(ctx).map(|n| n.driver) else {
        return Ok(false);
    };
    let conf = ctx.host.read_opt(DNF_CONF)?.unwrap_or_default();
    let excluded = main_excludes(&conf);
    if excluded.iter().any(|e| e == package_for(&drv)) {
        return Ok(true);
    }
    let extras = wanted(ctx).unwrap_or_default();
    Ok(extras.iter().any(|x| x.lock && excluded.contains(&x.name)))
}

/// The package names excluded in dnf.conf's `[main]` (`excludepkgs=` or its alias `exclude=`).
pub(crate) fn main_excludes(conf: &str) -> Vec<String> {
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
pub(crate) fn with_exclude(conf: &str, pkg: &str) -> String {
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
pub(crate) fn switches(ctx: &Ctx<'_>) -> String {
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

/// True for a name gpuhost locks for some driver ([`gpuhost_nvidia::hgx::is_locked_extra`]).
pub(crate) use gpuhost_nvidia::hgx::is_locked_extra as is_gpuhost_lock;

/// gpuhost's locks in dnf.conf that name a package not installed (the pre-R580 names after a
/// branch upgrade): a lock never names a package that is not installed.
pub(crate) fn stale_locks(ctx: &Ctx<'_>, conf: &str) -> Result<Vec<String>> {
    let ours: Vec<String> = main_excludes(conf)
        .into_iter()
        .filter(|n| is_gpuhost_lock(n))
        .collect();
    let refs: Vec<&str> = ours.iter().map(String::as_str).collect();
    let installed = ctx.installed(&refs)?;
    Ok(ours
        .into_iter()
        .filter(|n| installed.get(n).is_none_or(Vec::is_empty))
        .collect())
}

/// dnf.conf with `names` taken out of `[main]`'s excludes (a setting left empty goes).
pub(crate) fn without_excludes(conf: &str, names: &[String]) -> String {
    if names.is_empty() {
        return conf.to_string();
    }
    let mut in_main = false;
    let mut out = Vec::new();
    for line in conf.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_main = t == "[main]";
        }
        let setting = t
            .split_once('=')
            .filter(|(k, _)| in_main && matches!(k.trim(), "excludepkgs" | "exclude"));
        match setting {
            Some((k, v)) => {
                let kept: Vec<&str> = v
                    .split([',', ' '])
                    .filter(|x| !x.is_empty() && !names.iter().any(|n| n == x))
                    .collect();
                if !kept.is_empty() {
                    out.push(format!("{}={}", k.trim(), kept.join(",")));
                }
            }
            None => out.push(line.to_string()),
        }
    }
    out.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_names_leave_the_excludes_and_the_rest_stays() {
        let conf = "[main]\ngpgcheck=1\nexcludepkgs=nvidia-fabric-manager,kernel*,libnvidia-nscq-570\n[other]\nexcludepkgs=x\n";
        let got = without_excludes(
            conf,
            &[
                "nvidia-fabric-manager".to_string(),
                "libnvidia-nscq-570".to_string(),
            ],
        );
        assert_eq!(
            got,
            "[main]\ngpgcheck=1\nexcludepkgs=kernel*\n[other]\nexcludepkgs=x\n"
        );
        let only = without_excludes("[main]\nexcludepkgs=nvlsm\n", &["nvlsm".to_string()]);
        assert_eq!(only, "[main]\n");
        assert!(is_gpuhost_lock("libnvidia-nscq-535"));
        assert!(!is_gpuhost_lock("kernel*"));
    }
}
