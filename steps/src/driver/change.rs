//! A driver change on a node that has a driver: another local repo package is installed (another
//! branch, the other kind of local repo) and the profile says to replace it. The whole change
//! is one [`DriverSwap`] (one dnf transaction, all or nothing), planned here from what the host
//! has and what the new local repo package carries (its file list, read before anything
//! changes). `driver-repo` plans it when the run's [`super::Transition`] is a swap; `driver`
//! plans the flavour switch; `fabric-manager` and `hgx-extras` leave their packages to the
//! swap and check again once it has run.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;

use super::context::module_profile;
use super::installed::in_family;
use super::locks::wanted;
use super::set::{kmod_packages, set_packages, ModuleState, MODULE_FILE};
use crate::run::transition::InstalledRepo;
use crate::run::DriverPlan;
use crate::step::Ctx;
use crate::transaction::cache;
use crate::transaction::swap::{DriverSwap, RepoPackage};
use gpuhost_host::error::hinted;
use gpuhost_host::rpm::vercmp;
use gpuhost_nvidia::packages::{is_kmod, meta_to_erase, module_spec};
use gpuhost_profile::InstallSet;

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

/// Plan the swap from the installed `others` (name, version) to `plan`'s local repo, whose
/// file list is `new_files`. Bad input (the new repo lacks a package the set needs) is refused
/// here, before anything changes.
/// The build host's kmods a swap brings: the served kernels' (`served`), and the new driver's
/// kmod of every other installed kernel that has a prebuilt kmod installed (a kernel no longer
/// served after an update), when the repo has it: the old kmod requires the old driver's
/// `nvidia-kmod-common`, so the swap upgrades it in place rather than erase it. The files, and
/// the kmods' package names (NVIDIA's driver set, for what the swap may replace).
fn kmod_files(
    ctx: &Ctx<'_>,
    plan: &DriverPlan,
    served: &[crate::run::PrebuiltKmod],
) -> Result<(Vec<String>, Vec<String>)> {
    let mut kmods: Vec<crate::run::PrebuiltKmod> = served.to_vec();
    if let Some(repo) = plan.kmods.as_ref() {
        for kver in &ctx.facts.installed_kernels {
            if served.iter().any(|k| &k.kernel == kver) {
                continue;
            }
            let Some(k) = repo.find(&plan.repo.driver, plan.choice.flavour, kver) else {
                continue;
            };
            if !ctx.installed_one(&k.package)?.is_empty() {
                kmods.push(k);
            }
        }
    }
    Ok((
        kmods.iter().map(|k| k.file.display().to_string()).collect(),
        kmods.into_iter().map(|k| k.package).collect(),
    ))
}

pub(crate) fn plan_swap(
    ctx: &Ctx<'_>,
    plan: &DriverPlan,
    others: &[InstalledRepo],
    (new_files, repo_dir): (&[String], &str),
) -> Result<DriverSwap> {
    let drv = &plan.repo.driver;
    let repo_dir = repo_dir.to_string();
    let new = repo_packages(new_files, &repo_dir, drv);
    let kmods = kmod_packages(ctx, drv);
    // Prebuilt kmods (`driver.kmod_repo`) come as files from the build host's repo, not from
    // NVIDIA's: the new repo need not carry them, and they upgrade the old ones in place.
    let prebuilt = super::set::prebuilt(ctx);
    let (repo_kmods, (files, kmod_names)) = match &prebuilt {
        Some(p) => (Vec::new(), kmod_files(ctx, plan, p)?),
        None => (kmods.clone(), (Vec::new(), Vec::new())),
    };
    let needed = needed_packages(ctx, plan, &repo_kmods)?;
    refuse_missing(plan, &needed, &new)?;
    let mut old_names: BTreeSet<String> = BTreeSet::new();
    for repo in others {
        match repo
            .cached
            .as_deref()
            .and_then(|d| cache::read(ctx.host, d))
        {
            Some(c) => old_names.extend(c.packages),
            None => old_names.extend(names_in_installed_repo(ctx, &repo.name)?),
        }
    }
    let installed = installed_family(ctx, &old_names, &new)?;
    let (install, mut remove) = moves(plan, others, &new, (&needed, &installed), &kmods);
    remove.retain(|n| !(prebuilt.is_some() && kmods.contains(n)));
    let (module, module_reset) = module_change(ctx, plan, prebuilt.is_some())?;
    // NVIDIA's own packages, as the local repos' file lists name them (not by a name
    // pattern: a site package named like NVIDIA's is the site's).
    let mut nvidia: BTreeSet<String> = old_names
        .iter()
        .cloned()
        .chain(new.iter().map(|p| p.name.clone()))
        .filter(|n| gpuhost_nvidia::localrepo::in_driver_set(n))
        .collect();
    nvidia.extend(
        others
            .iter()
            .filter(|r| r.cached.is_none())
            .map(|r| r.name.clone()),
    );
    nvidia.extend(kmods.iter().cloned());
    nvidia.extend(kmod_names);
    nvidia.extend(remove.iter().cloned());
    let allow = &ctx.profile.driver.allow_erase;
    let erases = allowed_erasures(ctx, (&remove, &nvidia), &install, allow)?;
    Ok(DriverSwap {
        repo_rpm: Some(plan.path.display().to_string()),
        repo_id: plan.repo.repo_id(),
        repo_dir,
        remove,
        install,
        files,
        module,
        module_reset,
        allow_erase: allow.clone(),
        erases,
        nvidia: nvidia.into_iter().collect(),
        cache: None,
        from_cache: None,
    })
}

/// What the set needs whatever is installed: its packages, the kmods, Fabric Manager on
/// NVSwitch systems, and the HGX extras pinned to the driver.
fn needed_packages(ctx: &Ctx<'_>, plan: &DriverPlan, kmods: &[String]) -> Result<BTreeSet<String>> {
    let drv = &plan.repo.driver;
    let mut needed: BTreeSet<String> = set_packages(plan).iter().map(|s| s.to_string()).collect();
    needed.extend(kmods.iter().cloned());
    if ctx.facts.topology().has_nvswitches() {
        needed.insert(gpuhost_nvidia::hgx::fabric_manager_package_of(drv).to_string());
    }
    for e in wanted(ctx)? {
        if e.version.is_some() {
            needed.insert(e.name);
        }
    }
    Ok(needed)
}

/// The new repo must carry every package the set needs: bad input otherwise (exit 2).
fn refuse_missing(plan: &DriverPlan, needed: &BTreeSet<String>, new: &[RepoPackage]) -> Result<()> {
    let drv = &plan.repo.driver;
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
    Ok(())
}

/// Everything of the family installed now, from either repo: the names the old repos' file
/// lists and the new repo carry, those the host has.
fn installed_family(
    ctx: &Ctx<'_>,
    old_names: &BTreeSet<String>,
    new: &[RepoPackage],
) -> Result<BTreeSet<String>> {
    let mut candidates: Vec<String> = old_names.iter().cloned().collect();
    candidates.extend(new.iter().map(|p| p.name.clone()));
    candidates.retain(|n| in_family(n));
    candidates.sort();
    candidates.dedup();
    let refs: Vec<&str> = candidates.iter().map(String::as_str).collect();
    Ok(ctx
        .installed(&refs)?
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, _)| n)
        .collect())
}

/// What the swap installs from the new repo and what it removes. A kmod the set does not want
/// (the other flavour's, another driver's precompiled ones) goes; every other installed family
/// package the new repo has moves with the driver. The other flavour's meta package goes too
/// ([`meta_to_erase`]). The old local repo packages go.
fn moves(
    plan: &DriverPlan,
    others: &[InstalledRepo],
    new: &[RepoPackage],
    (needed, installed): (&BTreeSet<String>, &BTreeSet<String>),
    kmods: &[String],
) -> (Vec<RepoPackage>, Vec<String>) {
    let other_meta = meta_to_erase(plan.choice.flavour, plan.install);
    let unwanted_kmod =
        |n: &str| (is_kmod(n) && !kmods.iter().any(|k| k == n)) || Some(n) == other_meta;
    let install: Vec<RepoPackage> = new
        .iter()
        .filter(|p| in_family(&p.name) && !unwanted_kmod(&p.name))
        .filter(|p| needed.contains(&p.name) || installed.contains(&p.name))
        .cloned()
        .collect();
    // A cached set is no package: nothing of it to remove.
    let mut remove: Vec<String> = others
        .iter()
        .filter(|r| r.cached.is_none())
        .map(|r| r.name.clone())
        .collect();
    remove.extend(
        installed
            .iter()
            .filter(|n| !install.iter().any(|p| &&p.name == n))
            .cloned(),
    );
    remove.sort();
    remove.dedup();
    (install, remove)
}

/// dnf's module state the swap sets: the new set's stream (and, for a module profile, its
/// profile), `None` when it has it already or the release has no module streams (EL10); and
/// whether it is set by `dnf module reset` and `enable` rather than `switch-to`: a module profile
/// with `prebuilt` kmods, whose state marks no profile installed (`switch-to` would install the
/// new stream's profile, NVIDIA's DKMS kmod included; [`crate::transaction::profile`]).
fn module_change(
    ctx: &Ctx<'_>,
    plan: &DriverPlan,
    prebuilt: bool,
) -> Result<(Option<String>, bool)> {
    let stream = plan.stream();
    let state = ctx
        .host
        .read_opt(MODULE_FILE)?
        .map(|t| ModuleState::parse(&t))
        .unwrap_or_default();
    let profile = module_profile(ctx);
    if plan.modular() && plan.install == InstallSet::Module && prebuilt {
        let done = state.enabled_stream() == Some(stream) && state.profiles.is_empty();
        return Ok(((!done).then(|| module_spec(stream, None)), true));
    }
    Ok((
        match plan.install {
            _ if !plan.modular() => None,
            InstallSet::Module
                if state.enabled_stream() == Some(stream)
                    && state.profiles.iter().any(|p| p == profile) =>
            {
                None
            }
            InstallSet::Module => Some(module_spec(stream, Some(profile))),
            _ if state.enabled_stream() == Some(stream) => None,
            _ => Some(module_spec(stream, None)),
        },
        false,
    ))
}

/// What the swap will erase outside NVIDIA's set, each allowed by `allow`
/// (`driver.allow_erase`), shown as `name (requires …)`; any other such package is refused
/// here, in the check, before anything changes (exit 2).
fn allowed_erasures(
    ctx: &Ctx<'_>,
    (remove, nvidia): (&[String], &BTreeSet<String>),
    install: &[RepoPackage],
    allow: &[String],
) -> Result<Vec<String>> {
    let erased = erased_with(ctx, (remove, nvidia), install)?;
    let (ok, refused): (Vec<_>, Vec<_>) = erased.into_iter().partition(|(n, _)| allow.contains(n));
    if !refused.is_empty() {
        let (names, whys): (Vec<String>, Vec<String>) = refused.into_iter().unzip();
        return Err(crate::transaction::swap::erase_refused(&whys, &names));
    }
    Ok(ok.into_iter().map(|(_, why)| why).collect())
}

/// Installed packages outside NVIDIA's set that a swap removing `remove` and moving the set to
/// `install` would erase, as dnf would (a dependent of a removed package goes with it): each
/// package whose requirement names a removed package, or pins a version of a package of the set
/// that the new one does not satisfy. `(name, "name (requires …)")`, from one `rpm -qa`. (A
/// requirement on a provided capability, a library's soname, is dnf's to see: the swap asks it
/// before its transaction, [`crate::transaction::swap::outside_the_set`].)
fn erased_with(
    ctx: &Ctx<'_>,
    (remove, nvidia): (&[String], &BTreeSet<String>),
    install: &[RepoPackage],
) -> Result<Vec<(String, String)>> {
    let out = ctx
        .host
        .rpm()
        .args([
            "-qa",
            "--qf",
            "[%{=NAME}\t%{REQUIRENAME}\t%{REQUIREFLAGS:depflags}\t%{REQUIREVERSION}\n]",
        ])
        .run()?;
    Ok(erased_by(&out.stdout, (remove, nvidia), install))
}

/// [`erased_with`] over `rpm -qa`'s requirement lines (`name<TAB>requires<TAB>flags<TAB>version`):
/// packages outside `nvidia` (NVIDIA's own, by the repos' lists) and `remove`.
fn erased_by(
    lines: &str,
    (remove, nvidia): (&[String], &BTreeSet<String>),
    install: &[RepoPackage],
) -> Vec<(String, String)> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for line in lines.lines() {
        let mut f = line.split('\t');
        let (Some(name), Some(req), flags, version) = (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if nvidia.contains(name) || remove.iter().any(|r| r == name) {
            continue;
        }
        let flags = flags.unwrap_or_default().trim();
        let version = version.unwrap_or_default().trim();
        // `nvidia-driver(x86-64)` names the package as `nvidia-driver` does.
        let req = req.split_once('(').map_or(req, |(n, _)| n);
        let breaks = if remove.iter().any(|r| r == req) {
            true
        } else if let Some(new) = install.iter().find(|p| p.name == req) {
            !flags.is_empty() && !satisfies(&new.version, &new.release, flags, version)
        } else {
            false
        };
        if breaks {
            let shown = if flags.is_empty() {
                req.to_string()
            } else {
                format!("{req} {flags} {version}")
            };
            out.entry(name.to_string())
                .or_insert_with(|| format!("{name} (requires {shown})"));
        }
    }
    out.into_iter().collect()
}

/// Whether `version-release` meets `flags` (`=`, `<`, `<=`, `>`, `>=`) `want` (`[E:]V[-R]`;
/// the epoch is not compared: NVIDIA's set carries one epoch).
fn satisfies(version: &str, release: &str, flags: &str, want: &str) -> bool {
    let want = want.split_once(':').map_or(want, |(_, v)| v);
    let have = if want.contains('-') {
        format!("{version}-{release}")
    } else {
        version.to_string()
    };
    let ord = vercmp(&have, want);
    match flags {
        "=" | "==" => ord.is_eq(),
        "<" => ord.is_lt(),
        "<=" => ord.is_le(),
        ">" => ord.is_gt(),
        ">=" => ord.is_ge(),
        _ => true,
    }
}

/// A flavour switch within the installed local repo (open ↔ proprietary, `driver.switch_stream`):
/// the same one transaction, its packages from that repo — the new flavour's kmod in, the
/// other's out — and dnf's module state after.
pub(crate) fn plan_flavour_swap(ctx: &Ctx<'_>, plan: &DriverPlan) -> Result<DriverSwap> {
    let dir = super::installed::present_repo_dir(ctx, plan);
    let mut swap = plan_swap(ctx, plan, &[], (&repo_files(ctx, &dir), &dir))?;
    swap.repo_rpm = None;
    Ok(swap)
}

/// The files of a repo folder on the node (NVIDIA's, or gpuhost's cached one), by path.
pub(crate) fn repo_files(ctx: &Ctx<'_>, dir: &str) -> Vec<String> {
    ctx.host
        .files_with_prefix(dir, "")
        .into_iter()
        .map(|n| format!("{dir}/{n}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_site_package_that_needs_the_old_driver_is_found_with_its_requirement() {
        let new = |name: &str| super::RepoPackage {
            name: name.into(),
            version: "580.82.07".into(),
            release: "1.el9".into(),
            arch: "x86_64".into(),
        };
        let lines = "site-keep-r570\tnvidia-driver\t=\t3:570.124.06\n\
                     nvidia-site-pin\tnvidia-driver\t=\t3:570.124.06\n\
                     site-any\tnvidia-driver\t>=\t3:535\n\
                     site-repo\tnvidia-driver-local-repo-rhel9-570.124.06\t\t\n\
                     nvidia-settings\tnvidia-driver\t=\t3:570.124.06\n\
                     bash\tglibc\t\t\n";
        let remove = vec!["nvidia-driver-local-repo-rhel9-570.124.06".to_string()];
        let nvidia: std::collections::BTreeSet<String> = ["nvidia-driver", "nvidia-settings"]
            .map(String::from)
            .into();
        let got = super::erased_by(lines, (&remove, &nvidia), &[new("nvidia-driver")]);
        assert_eq!(
            got,
            vec![
                (
                    "nvidia-site-pin".to_string(),
                    "nvidia-site-pin (requires nvidia-driver = 3:570.124.06)".to_string()
                ),
                (
                    "site-keep-r570".to_string(),
                    "site-keep-r570 (requires nvidia-driver = 3:570.124.06)".to_string()
                ),
                (
                    "site-repo".to_string(),
                    "site-repo (requires nvidia-driver-local-repo-rhel9-570.124.06)".to_string()
                ),
            ]
        );
    }

    #[test]
    fn dnfs_removal_sections_are_read_from_its_table() {
        let table = "Installing:\n cuda-repo-rhel9-13-0-local  x86_64  13.0.1-1  @commandline  177 k\nUpgrading:\n nvidia-driver  x86_64  3:580.82.07-1.el9  gpuhost-next  6.3 k\nRemoving:\n nvidia-driver-local-repo-rhel9-570.124.06\n                     x86_64  1.0-1  @@commandline  163 k\nRemoving dependent packages:\n site-keep-r570-requires  noarch  1-1  @System  0\n\nTransaction Summary\n";
        assert_eq!(
            crate::transaction::swap::removals(table),
            vec![
                "nvidia-driver-local-repo-rhel9-570.124.06".to_string(),
                "site-keep-r570-requires".to_string()
            ]
        );
    }

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
