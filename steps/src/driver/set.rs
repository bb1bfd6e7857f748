//! The driver's package set: what NVIDIA's `nvidia-driver` module state says (`ModuleState`),
//! the packages of the plan's set (`set_packages`) and the kmods that bring the kernel module
//! for its stream (`kmod_packages`). Read by `driver` and by the driver change
//! (`driver::change`).

use crate::run::{DriverPlan, PrebuiltKmod};
use crate::step::Ctx;
use gpuhost_nvidia::packages::{self, StreamKind};

pub(crate) const MODULE_FILE: &str = "/etc/dnf/modules.d/nvidia-driver.module";

/// The state dnf keeps for a module in `/etc/dnf/modules.d/<name>.module`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct ModuleState {
    pub stream: String,
    pub profiles: Vec<String>,
    /// `enabled`, `disabled` or empty (reset).
    pub state: String,
}

impl ModuleState {
    pub(crate) fn parse(text: &str) -> ModuleState {
        let mut m = ModuleState::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim();
            match k.trim() {
                "stream" => m.stream = v.to_string(),
                "state" => m.state = v.to_string(),
                "profiles" => {
                    m.profiles = v
                        .split([',', ' '])
                        .filter(|p| !p.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                _ => {}
            }
        }
        m
    }

    /// The enabled stream, if any.
    pub(crate) fn enabled_stream(&self) -> Option<&str> {
        (self.state == "enabled" && !self.stream.is_empty()).then_some(self.stream.as_str())
    }
}

/// The streams of `module` in `dnf module list <module>` output.
pub(crate) fn listed_streams(module: &str, stdout: &str) -> Vec<String> {
    let mut out: Vec<String> = stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(module)).then(|| w.next().map(str::to_string))?
        })
        .collect();
    out.dedup();
    out
}

pub(crate) use gpuhost_nvidia::packages::precompiled_kmod;

/// The packages that bring the kernel module: the prebuilt kmod of every served kernel
/// (`driver.kmod_repo`), or the stream's — the DKMS package, or NVIDIA's precompiled package of
/// every served kernel.
pub(crate) fn kmod_packages(ctx: &Ctx<'_>, driver: &str) -> Vec<String> {
    if let Some(p) = prebuilt(ctx) {
        return p.into_iter().map(|k| k.package).collect();
    }
    match StreamKind::of(super::context::stream(ctx)).dkms_package() {
        Some(k) => vec![k.to_string()],
        None => ctx
            .facts
            .kernels_to_serve()
            .iter()
            .map(|k| precompiled_kmod(driver, k))
            .collect(),
    }
}

/// The prebuilt kmods of the served kernels (`driver.kmod_repo`; `None`: none configured). A
/// kernel the repo lacks was refused when the run was prepared.
pub(crate) fn prebuilt(ctx: &Ctx<'_>) -> Option<Vec<PrebuiltKmod>> {
    let plan = ctx.driver.as_ref()?;
    let repo = plan.kmods.as_ref()?;
    Some(
        ctx.facts
            .kernels_to_serve()
            .iter()
            .filter_map(|k| repo.find(&plan.repo.driver, plan.choice.flavour, k))
            .collect(),
    )
}

/// What dnf is given for the kmods `kmods` (names, [`kmod_packages`]): the prebuilt RPMs by
/// file, or the names, at `version` when given (`name-version`).
pub(crate) fn kmod_specs(ctx: &Ctx<'_>, kmods: &[String], version: Option<&str>) -> Vec<String> {
    if let Some(p) = prebuilt(ctx) {
        return p
            .into_iter()
            .filter(|k| kmods.contains(&k.package))
            .map(|k| k.file.display().to_string())
            .collect();
    }
    kmods
        .iter()
        .map(|k| match version {
            Some(v) => format!("{k}-{v}"),
            None => k.clone(),
        })
        .collect()
}

/// The set's packages that are not installed (`X not installed` each), as one clause.
pub(crate) fn not_installed(absent: &[String]) -> Option<String> {
    let names: Vec<&str> = absent
        .iter()
        .map(|a| a.strip_suffix(" not installed").unwrap_or(a))
        .collect();
    (!names.is_empty()).then(|| format!("not installed: {}", names.join(", ")))
}

/// The packages of the plan's package set besides the kmods, that must be at the driver's
/// version ([`gpuhost_nvidia::packages::set_packages`]).
pub(crate) fn set_packages(plan: &DriverPlan) -> Vec<&'static str> {
    packages::set_packages(plan.install, plan.choice.flavour).to_vec()
}

/// The plan's package set as the host has it: dnf's module state, the set's packages (the kmods
/// last) and which of them are missing or at another version than the driver's. Read once per
/// look at the host by the driver transition ([`super::installed::transition`]) and by `driver`.
pub(crate) struct SetStatus {
    pub state: ModuleState,
    pub kmods: Vec<String>,
    pub names: Vec<String>,
    /// `<name> not installed`, one per missing package.
    pub absent: Vec<String>,
    /// `<name> <versions> installed`, one per package at another version only.
    pub stale: Vec<String>,
    /// NVIDIA's DKMS kmods installed while the run installs prebuilt kmods
    /// (`driver.kmod_repo`): they conflict, and give way in the same transaction.
    pub replaced_dkms: Vec<String>,
    /// With [`SetStatus::replaced_dkms`]: the build packages gpuhost installed that go in the
    /// same transaction ([`super::built_by::leftovers`]).
    pub build_leftovers: Vec<String>,
    /// gpuhost's prebuilt kmods installed while the run installs NVIDIA's DKMS kmod (no
    /// `driver.kmod_repo`): they conflict with it, and give way in the same transaction
    /// (issue 53, item 4).
    pub replaced_prebuilt: Vec<String>,
}

impl SetStatus {
    pub(crate) fn read(ctx: &Ctx<'_>, plan: &DriverPlan) -> anyhow::Result<SetStatus> {
        let drv = &plan.repo.driver;
        let state = ctx
            .host
            .read_opt(MODULE_FILE)?
            .map(|t| ModuleState::parse(&t))
            .unwrap_or_default();
        let kmods = kmod_packages(ctx, drv);
        let names = package_names(plan, &kmods);
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let installed = ctx.installed(&refs)?;
        let (mut absent, mut stale) = (Vec::new(), Vec::new());
        for n in &names {
            let v: Vec<String> = installed
                .get(n)
                .map(|v| v.iter().map(|p| p.version.clone()).collect())
                .unwrap_or_default();
            if v.is_empty() {
                absent.push(format!("{n} not installed"));
            } else if !v.contains(drv) {
                stale.push(format!("{n} {} installed", v.join(", ")));
            }
        }
        let replaced_dkms = if prebuilt(ctx).is_some() {
            let dkms: Vec<&str> = gpuhost_nvidia::packages::dkms_kmods().collect();
            let have = ctx.installed(&dkms)?;
            dkms.into_iter()
                .filter(|k| have.get(*k).is_some_and(|v| !v.is_empty()))
                .map(str::to_string)
                .collect()
        } else {
            Vec::new()
        };
        let build_leftovers = if replaced_dkms.is_empty() {
            Vec::new()
        } else {
            super::built_by::leftovers(ctx, &replaced_dkms)?
        };
        let replaced_prebuilt = match prebuilt(ctx) {
            None => prebuilt_installed(ctx)?,
            Some(_) => Vec::new(),
        };
        Ok(SetStatus {
            replaced_prebuilt,
            state,
            kmods,
            names,
            absent,
            stale,
            replaced_dkms,
            build_leftovers,
        })
    }

    /// Every package of the set is installed at the driver's version.
    pub(crate) fn complete(&self) -> bool {
        self.absent.is_empty() && self.stale.is_empty()
    }
}

/// Every package of the plan at the driver's version: the set's packages, then `kmods`.
pub(crate) fn package_names(plan: &DriverPlan, kmods: &[String]) -> Vec<String> {
    let mut names: Vec<String> = set_packages(plan).iter().map(|s| s.to_string()).collect();
    names.extend(kmods.iter().cloned());
    names
}

impl SetStatus {
    /// The kmods of one kind give way to the other's in the run's transaction: dnf may erase
    /// what conflicts.
    pub(crate) fn allowerasing(&self) -> bool {
        !self.replaced_dkms.is_empty() || !self.replaced_prebuilt.is_empty()
    }

    /// What the run's transaction removes besides what it installs: gpuhost's build packages
    /// (a move to prebuilt kmods), or gpuhost's prebuilt kmods (a move back to DKMS).
    pub(crate) fn removes(&self) -> Vec<String> {
        let mut out = self.build_leftovers.clone();
        out.extend(self.replaced_prebuilt.iter().cloned());
        out
    }

    /// Why the set comes in: which driver and why this flavour, or which kmods give way.
    pub(crate) fn why(&self, plan: &DriverPlan) -> Vec<String> {
        let mut why = Vec::new();
        if !self.replaced_prebuilt.is_empty() {
            why.push(format!(
                "the build host's kmods {} give way to NVIDIA's DKMS kmod (no driver.kmod_repo)",
                self.replaced_prebuilt.join(", ")
            ));
        }
        if self.replaced_dkms.is_empty() {
            why.push(format!("driver {}", plan.repo.driver));
            why.push(plan.choice.explanation.clone());
        } else {
            why.push(format!(
                "{} gives way to the build host's kmods",
                self.replaced_dkms.join(", ")
            ));
        }
        why.extend(super::built_by::said(&self.build_leftovers));
        why
    }
}

/// The names gpuhost's prebuilt kmods have on this node (`kmod-nvidia-open-<uname -r>`,
/// `kmod-nvidia-proprietary-<uname -r>`: what `gpuhost kmod build` names them), one per flavour
/// and installed kernel: asked of rpm with the step's other names, in the run's one query.
pub(crate) fn prebuilt_candidates(ctx: &Ctx<'_>) -> Vec<String> {
    ctx.facts
        .installed_kernels
        .iter()
        .flat_map(|k| {
            gpuhost_nvidia::packages::built_kmod_prefixes().map(move |p| format!("{p}{k}"))
        })
        .collect()
}

/// gpuhost's prebuilt kmods installed ([`prebuilt_candidates`]). Sorted, once each.
fn prebuilt_installed(ctx: &Ctx<'_>) -> anyhow::Result<Vec<String>> {
    let names = prebuilt_candidates(ctx);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let have = ctx.installed(&refs)?;
    let mut out: Vec<String> = names
        .iter()
        .filter(|n| have.get(n.as_str()).is_some_and(|v| !v.is_empty()))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}
