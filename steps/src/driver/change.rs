//! A driver change on a node that has a driver: another local repo package is installed (another
//! branch, the other kind of local repo) and the profile says to replace it. The whole change
//! is one [`DriverSwap`] (one dnf transaction, all or nothing), planned here from what the host
//! has and what the new local repo package carries (its file list, read before anything
//! changes). `driver-repo` plans it; `driver`, `fabric-manager` and `hgx-extras` leave their
//! packages to it and check again once it has run.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;

use gpuhost_nvidia::localrepo::{present_packages, LocalRepoFile};

use super::locks::wanted;
use super::module::{kmod_packages, set_packages, ModuleState, MODULE_FILE};
use super::module_profile;
use super::{fabric, DriverPlan};
use crate::step::Ctx;
use crate::swap::{DriverSwap, RepoPackage};
use gpuhost_host::error::hinted;
use gpuhost_host::rpm::vercmp;
use gpuhost_profile::InstallSet;

/// Packages of the NVIDIA driver family: what a driver change may remove when the new set does
/// not carry the name (`nvidia-fabric-manager` at R580, `libnvidia-nscq-570`, the other
/// flavour's kmod). Anything else installed from the old repo (a CUDA toolkit) is left to dnf:
/// if it cannot live with the new driver, the transaction fails and nothing changes.
fn in_family(name: &str) -> bool {
    name.starts_with("nvidia-")
        || name.starts_with("libnvidia-")
        || name.starts_with("kmod-nvidia")
        || name.starts_with("cuda-drivers")
}

/// The packages of a repo's files (`/var/<repo>/…/<nvr>.<arch>.rpm`), one per name: the one
/// at `driver` when there is one, else the newest.
pub(crate) fn repo_packages(files: &[String], repo_dir: &str, driver: &str) -> Vec<RepoPackage> {
    let mut by_name: BTreeMap<String, RepoPackage> = BTreeMap::new();
    let prefix = format!("{repo_dir}/");
    for p in files
        .iter()
        .filter(|f| f.starts_with(&prefix))
        .filter_map(|f| RepoPackage::from_file_name(f))
    {
        let better = match by_name.get(&p.name) {
            None => true,
            Some(old) if old.version == driver => false,
            Some(old) => {
                p.version == driver
                    || vercmp(
                        &format!("{}-{}", p.version, p.release),
                        &format!("{}-{}", old.version, old.release),
                    )
                    .is_gt()
            }
        };
        if better {
            by_name.insert(p.name.clone(), p);
        }
    }
    by_name.into_values().collect()
}

/// The package names in an installed package's file list (the old local repo's RPMs).
fn names_in_installed_repo(ctx: &Ctx<'_>, package: &str) -> Result<Vec<String>> {
    let out = ctx.host.rpm().args(["-ql", package]).run()?;
    Ok(out
        .stdout
        .lines()
        .filter_map(RepoPackage::from_file_name)
        .map(|p| p.name)
        .collect())
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
/// packages installed (name, version): another driver.
pub(crate) fn other_repos(
    ctx: &Ctx<'_>,
    name: &LocalRepoFile,
) -> Result<(bool, Vec<(String, String)>)> {
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
        .map(|p| (p.name.clone(), p.version.clone()))
        .collect();
    Ok((ours, others))
}

/// What `driver`, `fabric-manager` and `hgx-extras` say before the swap: their packages are in
/// `driver-repo`'s transaction, and they check again once it has run.
pub(crate) const IN_SWAP: &str =
    "the driver changes in driver-repo's one transaction; checked again once it has run";

/// True when this run replaces the driver ([`plan_swap`]): another local repo is installed and
/// the profile says to replace it. The driver steps then leave their packages to the swap.
pub(crate) fn pending(ctx: &Ctx<'_>) -> Result<bool> {
    let Some(plan) = &ctx.driver else {
        return Ok(false);
    };
    if !ctx.profile.driver.replace_local_repo {
        return Ok(false);
    }
    Ok(!other_repos(ctx, &plan.repo)?.1.is_empty())
}

/// The driver family's package names in the installed local repo (its directory): what
/// [`duplicates`] asks rpm about (in the run's one batched query).
pub(crate) fn family_in_repo(ctx: &Ctx<'_>, name: &LocalRepoFile) -> Vec<String> {
    let mut names: Vec<String> = ctx
        .host
        .files_with_prefix(name.repo_dir(), "")
        .iter()
        .filter_map(|f| RepoPackage::from_file_name(f))
        .map(|p| p.name)
        .filter(|n| in_family(n))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Packages of the driver family installed twice or more (an rpm transaction killed between
/// installing the new versions and erasing the old): every version but the driver's (or, for a
/// package not at the driver's version, the newest), as `name-version-release.arch`.
pub(crate) fn duplicates(ctx: &Ctx<'_>, name: &LocalRepoFile) -> Result<Vec<String>> {
    let names = family_in_repo(ctx, name);
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

/// Plan the swap from the installed `others` (name, version) to `plan`'s local repo, whose
/// file list is `new_files`. Bad input (the new repo lacks a package the set needs) is refused
/// here, before anything changes.
pub(crate) fn plan_swap(
    ctx: &Ctx<'_>,
    plan: &DriverPlan,
    others: &[(String, String)],
    new_files: &[String],
) -> Result<DriverSwap> {
    let drv = &plan.repo.driver;
    let repo_dir = plan.repo.repo_dir();
    let new = repo_packages(new_files, &repo_dir, drv);
    let kmods = kmod_packages(ctx, drv);
    // What the set needs whatever is installed.
    let mut needed: BTreeSet<String> = set_packages(plan).iter().map(|s| s.to_string()).collect();
    needed.extend(kmods.iter().cloned());
    if ctx.facts.topology().has_nvswitches() {
        needed.insert(fabric::package_for(drv).to_string());
    }
    for e in wanted(ctx)? {
        if e.version.is_some() {
            needed.insert(e.name);
        }
    }
    let missing: Vec<&String> = needed
        .iter()
        .filter(|n| !new.iter().any(|p| &p.name == *n))
        .collect();
    if !missing.is_empty() {
        let shown: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        return Err(gpuhost_host::error::as_invalid(hinted(
            format!(
                "{} carries no {} for driver {drv}; nothing was changed",
                plan.path.display(),
                shown.join(", ")
            ),
            "use NVIDIA's local repo package that carries the whole driver set",
        )));
    }
    // Everything of the family installed now, from either repo.
    let mut old_names: BTreeSet<String> = BTreeSet::new();
    for (name, _) in others {
        old_names.extend(names_in_installed_repo(ctx, name)?);
    }
    let mut candidates: Vec<String> = old_names.iter().cloned().collect();
    candidates.extend(new.iter().map(|p| p.name.clone()));
    candidates.retain(|n| in_family(n));
    candidates.sort();
    candidates.dedup();
    let refs: Vec<&str> = candidates.iter().map(String::as_str).collect();
    let installed: BTreeSet<String> = ctx
        .installed(&refs)?
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, _)| n)
        .collect();
    // A kmod the set does not want (the other flavour's, another driver's precompiled ones)
    // goes; every other installed family package the new repo has moves with the driver.
    let unwanted_kmod = |n: &str| n.starts_with("kmod-nvidia") && !kmods.iter().any(|k| k == n);
    let install: Vec<RepoPackage> = new
        .iter()
        .filter(|p| in_family(&p.name) && !unwanted_kmod(&p.name))
        .filter(|p| needed.contains(&p.name) || installed.contains(&p.name))
        .cloned()
        .collect();
    let mut remove: Vec<String> = others.iter().map(|(n, _)| n.clone()).collect();
    remove.extend(
        installed
            .iter()
            .filter(|n| !install.iter().any(|p| &&p.name == n))
            .cloned(),
    );
    remove.sort();
    remove.dedup();
    // dnf's module state: the new set's stream (and, for a module profile, its profile).
    let stream = plan.stream();
    let state = ctx
        .host
        .read_opt(MODULE_FILE)?
        .map(|t| ModuleState::parse(&t))
        .unwrap_or_default();
    let profile = module_profile(ctx);
    let module = match plan.install {
        InstallSet::Module
            if state.enabled_stream() == Some(stream)
                && state.profiles.iter().any(|p| p == profile) =>
        {
            None
        }
        InstallSet::Module => Some(format!("nvidia-driver:{stream}/{profile}")),
        _ if state.enabled_stream() == Some(stream) => None,
        _ => Some(format!("nvidia-driver:{stream}")),
    };
    Ok(DriverSwap {
        repo_rpm: plan.path.display().to_string(),
        repo_dir,
        remove,
        install,
        module,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repo_offers_one_package_per_name_at_the_driver_when_it_can() {
        let files: Vec<String> = [
            "/var/r",
            "/var/r/nvidia-driver-580.82.07-1.el9.x86_64.rpm",
            "/var/r/nvidia-driver-575.1.1-1.el9.x86_64.rpm",
            "/var/r/cuda-toolkit-13-0-13.0.1-1.x86_64.rpm",
            "/var/r/repodata/repomd.xml",
            "/var/other/nvidia-fabricmanager-580.82.07-1.x86_64.rpm",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let got = repo_packages(&files, "/var/r", "580.82.07");
        let specs: Vec<String> = got.iter().map(RepoPackage::spec).collect();
        assert_eq!(
            specs,
            vec![
                "cuda-toolkit-13-0-13.0.1-1.x86_64",
                "nvidia-driver-580.82.07-1.el9.x86_64"
            ]
        );
    }

    #[test]
    fn rpm_file_names_parse_into_name_version_release_arch() {
        let p = RepoPackage::from_file_name("/v/libnvidia-nscq-570-570.124.06-1.x86_64.rpm");
        assert_eq!(
            p.map(|p| (p.name, p.version, p.release, p.arch)),
            Some((
                "libnvidia-nscq-570".to_string(),
                "570.124.06".to_string(),
                "1".to_string(),
                "x86_64".to_string()
            ))
        );
        assert!(RepoPackage::from_file_name("x-1-1.src.rpm").is_none());
        assert!(RepoPackage::from_file_name("repomd.xml").is_none());
    }
}
