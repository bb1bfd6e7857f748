//! What the host has of NVIDIA's local repos — which local repo packages are installed besides
//! the profile's (another driver), and the duplicates a killed rpm transaction leaves — and
//! the one decision made from it and from the installed set: the run's driver
//! [`Transition`] ([`transition`]), read by every driver step.

use anyhow::Result;

use super::set::SetStatus;
use crate::run::transition::{InstalledRepo, Transition};
use crate::run::DriverPlan;
use crate::step::Ctx;
use crate::transaction::cache;
use crate::transaction::swap::RepoPackage;
use gpuhost_host::rpm::vercmp;
use gpuhost_nvidia::flavour::ModuleFlavour;
use gpuhost_nvidia::localrepo::{present_packages, LocalRepoFile};
use gpuhost_nvidia::packages::{dkms_kmods, is_kmod, meta_package};

/// Packages of the NVIDIA driver family: what a driver change may remove when the new set does
/// not carry the name (`nvidia-fabric-manager` at R580, `libnvidia-nscq-570`, the other
/// flavour's kmod). Anything else installed from the old repo (a CUDA toolkit) is left to dnf:
/// if it cannot live with the new driver, the transaction fails and nothing changes.
pub(crate) fn in_family(name: &str) -> bool {
    gpuhost_nvidia::localrepo::in_driver_family(name)
}

/// Package names of the NVIDIA local repos present on the host, of either kind (from their
/// repo files and repo directories), whether or not rpm knows them.
pub(crate) fn present_local_repos(ctx: &Ctx<'_>) -> Vec<String> {
    let repo_files = ctx.host.files_with_prefix("/etc/yum.repos.d", "");
    let var_dirs = ctx.host.files_with_prefix("/var", "");
    present_packages(
        repo_files.iter().map(String::as_str),
        var_dirs.iter().map(String::as_str),
    )
}

/// True when an installed package is the profile's local repo package: same name, and the
/// version the file name gives (a driver-only file name may give none: the name carries the
/// driver).
fn is_ours(name: &LocalRepoFile, p_name: &str, p_version: &str) -> bool {
    p_name == name.package && name.version.as_deref().is_none_or(|v| v == p_version)
}

/// Whether the profile's local repo package is installed, and the other NVIDIA local repo
/// packages installed: another driver.
fn other_repos(ctx: &Ctx<'_>, name: &LocalRepoFile) -> Result<(bool, Vec<InstalledRepo>)> {
    let mut names = present_local_repos(ctx);
    names.push(name.package.clone());
    names.sort();
    names.dedup();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let installed = ctx.installed(&refs)?;
    let ours = installed
        .get(&name.package)
        .is_some_and(|v| v.iter().any(|p| is_ours(name, &p.name, &p.version)));
    let others = installed
        .values()
        .flatten()
        .filter(|p| !is_ours(name, &p.name, &p.version))
        .map(|p| InstalledRepo {
            name: p.name.clone(),
            version: p.version.clone(),
            cached: None,
        })
        .collect();
    Ok((ours, others))
}

/// The driver set gpuhost's cache gives dnf now (`driver.keep_local_repo = false`,
/// [`cache`]): whether it is the profile's package's, and the cached repo otherwise.
fn cached_repo(ctx: &Ctx<'_>, plan: &DriverPlan) -> (bool, Option<InstalledRepo>) {
    match cache::current(ctx.host) {
        Some((_, c)) if c.package == plan.repo.package && c.version == plan.cache_version() => {
            (true, None)
        }
        Some((dir, c)) => (
            false,
            Some(InstalledRepo {
                name: c.package,
                version: c.version,
                cached: Some(dir),
            }),
        ),
        None => (false, None),
    }
}

/// Where the profile's driver set lies on the node: gpuhost's cached folder when the cache
/// gives it to dnf, else NVIDIA's `/var/<package>` (installed, or to be).
pub(crate) fn present_repo_dir(ctx: &Ctx<'_>, plan: &DriverPlan) -> String {
    match cached_repo(ctx, plan) {
        (true, _) => cache::dir_of(&plan.repo.package, &plan.cache_version()),
        _ => plan.repo.repo_dir(),
    }
}

/// What happens to the driver in this run ([`Transition`]): decided here, once per look at the
/// host (the step context keeps it until the host changes), and read by every driver step.
pub(crate) fn transition(ctx: &Ctx<'_>) -> Result<Transition> {
    ctx.transition_or(decide)
}

/// The one place the driver transition is decided, in this order: no driver; another driver's
/// local repo (swapped, or refused); what a killed transaction left beside the profile's repo;
/// the installed set of another stream; a first install; in place.
fn decide(ctx: &Ctx<'_>) -> Result<Transition> {
    let Some(plan) = &ctx.driver else {
        return Ok(Transition::Unmanaged);
    };
    // The profile's repo is on the node when its package is installed or its driver set is
    // the cached one; driver-repo moves it between the two as driver.keep_local_repo says.
    let (ours, mut others) = other_repos(ctx, &plan.repo)?;
    let (ours_cached, cached_other) = cached_repo(ctx, plan);
    others.extend(cached_other);
    let ours = ours || ours_cached;
    if !others.is_empty() {
        return Ok(if ctx.profile.driver.replace_local_repo {
            Transition::Swap {
                from: others,
                to: plan.repo.package.clone(),
            }
        } else {
            Transition::Refused { others }
        });
    }
    if ours {
        let duplicates = duplicates(ctx, plan)?;
        let behind = behind(ctx, plan)?;
        if !duplicates.is_empty() || !behind.is_empty() {
            return Ok(Transition::Repair { duplicates, behind });
        }
    }
    let set = SetStatus::read(ctx, plan)?;
    if !set.complete() {
        if let Some((from, to)) = other_flavour(ctx, plan, &set)? {
            return Ok(Transition::FlavourSwitch {
                from,
                to,
                allowed: ctx.profile.driver.switch_stream,
                repo_installed: ours,
            });
        }
    }
    Ok(if ours {
        Transition::InPlace
    } else {
        Transition::Install
    })
}

/// The other flavour installed, and the wanted one: with module streams (EL8, EL9) the enabled
/// `nvidia-driver` stream when it is another; without (EL10) the other flavour's DKMS kmod
/// when it is installed.
fn other_flavour(
    ctx: &Ctx<'_>,
    plan: &DriverPlan,
    set: &SetStatus,
) -> Result<Option<(String, String)>> {
    if plan.modular() {
        return Ok(set
            .state
            .enabled_stream()
            .filter(|s| *s != plan.stream())
            .map(|s| (s.to_string(), plan.stream().to_string())));
    }
    let others: Vec<&str> = dkms_kmods()
        .filter(|k| !set.kmods.iter().any(|w| w == k))
        .collect();
    let installed = ctx.installed(&others)?;
    Ok(others
        .into_iter()
        .find(|k| installed.get(*k).is_some_and(|v| !v.is_empty()))
        .map(|k| (k.to_string(), set.kmods.join(", "))))
}

/// The driver family's package names in the installed local repo (its directory): what
/// [`duplicates`] asks rpm about (in the run's one batched query).
pub(crate) fn family_in_repo(ctx: &Ctx<'_>, plan: &DriverPlan) -> Vec<String> {
    let mut names: Vec<String> = ctx
        .host
        .files_with_prefix(present_repo_dir(ctx, plan), "")
        .iter()
        .filter_map(|f| RepoPackage::from_file_name(f))
        .map(|p| p.name)
        .filter(|n| in_family(n))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Packages of the driver family that the installed local repo has at the driver's version but
/// that are installed at another version only (a transaction stopped part-way left them
/// behind): `name-<driver>` specs to install. The kmods and the meta packages are the `driver`
/// step's (a flavour's), left out.
fn behind(ctx: &Ctx<'_>, plan: &DriverPlan) -> Result<Vec<String>> {
    let drv = &plan.repo.driver;
    let in_repo: Vec<String> = ctx
        .host
        .files_with_prefix(present_repo_dir(ctx, plan), "")
        .iter()
        .filter_map(|f| RepoPackage::from_file_name(f))
        .filter(|p| &p.version == drv && in_family(&p.name))
        .filter(|p| !is_kmod(&p.name))
        .filter(|p| {
            ![ModuleFlavour::Open, ModuleFlavour::Proprietary]
                .iter()
                .any(|f| meta_package(*f) == p.name)
        })
        .map(|p| p.name)
        .collect();
    let refs: Vec<&str> = in_repo.iter().map(String::as_str).collect();
    let mut out: Vec<String> = ctx
        .installed(&refs)?
        .into_iter()
        .filter(|(_, v)| !v.is_empty() && !v.iter().any(|p| &p.version == drv))
        .map(|(n, _)| format!("{n}-{drv}"))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// Packages of the driver family installed twice or more (an rpm transaction killed between
/// installing the new versions and erasing the old): every version but the driver's (or, for a
/// package not at the driver's version, the newest), as `name-version-release.arch`.
fn duplicates(ctx: &Ctx<'_>, plan: &DriverPlan) -> Result<Vec<String>> {
    let name = &plan.repo;
    let names = family_in_repo(ctx, plan);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for (_, mut versions) in ctx.installed(&refs)? {
        if versions.len() < 2 {
            continue;
        }
        versions.sort_by(|a, b| vercmp(&a.evr(), &b.evr()));
        let keep = versions
            .iter()
            .position(|p| p.version == name.driver)
            .unwrap_or(versions.len() - 1);
        // Only other versions: `dnf remove` of a NEVRA takes every record of it, and the one
        // kept must stay.
        let kept = versions[keep].evr();
        for p in versions.iter().filter(|p| p.evr() != kept) {
            let spec = format!("{}-{}-{}.{}", p.name, p.version, p.release, p.arch);
            if !out.contains(&spec) {
                out.push(spec);
            }
        }
    }
    Ok(out)
}
