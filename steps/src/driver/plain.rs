//! `driver` on a release whose NVIDIA packages are not modular (EL10): NVIDIA's Driver
//! Installation Guide (615, 620) installs `nvidia-open` (open modules) or `cuda-drivers`
//! (proprietary), or `nvidia-driver-cuda` for a compute-only node, from the enabled repos, and
//! holds the branch with the versionlock plugin ([`super::versionlock`]). Nothing
//! module-related is run or written: no `dnf module`, no `/etc/dnf/modules.d`.
//!
//! The set is installed at the local repo's driver version; once it is, the branch lock is
//! written (its lines name the installed packages' exact versions, so it follows the
//! transaction). A flavour switch is the run's [`Transition::FlavourSwitch`]: one transaction.

use anyhow::Result;

use super::set::{kmod_specs, set_packages, SetStatus};
use super::versionlock::{self, PLUGIN};
use crate::run::transition::Transition;
use crate::run::DriverPlan;
use crate::step::{Change, Check, Ctx, FileWrite, Install, Work};
use gpuhost_host::error::hinted;
use gpuhost_host::invalid;
use gpuhost_nvidia::packages;
use gpuhost_profile::InstallSet;

/// The packages named on dnf's command line: the set's (the meta package brings
/// `nvidia-driver`), the kmod, and the versionlock plugin.
fn specs(ctx: &Ctx<'_>, plan: &DriverPlan, set: &SetStatus) -> Vec<String> {
    let mut out: Vec<String> = set_packages(plan)
        .into_iter()
        .filter(|p| plan.install == InstallSet::ComputeOnly || *p != packages::DRIVER)
        .map(|p| format!("{p}-{}", plan.repo.driver))
        .collect();
    out.extend(kmod_specs(ctx, &set.kmods, Some(&plan.repo.driver)));
    out.push(PLUGIN.to_string());
    out
}

/// A check with one change.
fn one(change: Change) -> Check {
    Check {
        changes: vec![change],
        ..Check::default()
    }
}

/// The `driver` step's check on EL10.
pub(crate) fn check(ctx: &Ctx<'_>, plan: &DriverPlan, transition: &Transition) -> Result<Check> {
    let set = SetStatus::read(ctx, plan)?;
    let branch = plan.repo.branch();
    let hold = format!("dnf versionlock '{}'", versionlock::pattern(branch));
    if let Transition::FlavourSwitch {
        from, to, allowed, ..
    } = transition
    {
        if !allowed {
            return Err(hinted(
                format!(
                    "{from} is installed, but this run wants {to} ({})",
                    plan.choice.explanation
                ),
                "set driver.switch_stream = true to swap the set for the other flavour's in one transaction, or set driver.flavour to the installed one",
            ));
        }
        let swap = super::change::plan_flavour_swap(ctx, plan)?;
        return Ok(one(Change::new(
            Work::SwapDriver(swap),
            format!("{from} is installed (driver.switch_stream): one transaction swaps the set for {to}'s; then {hold}"),
        )));
    }
    let plugin = !ctx.installed_one(PLUGIN)?.is_empty();
    if !set.complete() || !plugin {
        let mut why: Vec<String> = super::set::not_installed(&set.absent).into_iter().collect();
        why.extend(set.stale.iter().cloned());
        if !plugin {
            why.push(format!("{PLUGIN} not installed (it holds the branch)"));
        }
        // Which driver and why this flavour, when the set comes in; or which kmods give way.
        why.extend(set.why(plan));
        let mut check = one(Change::new(
            Work::Install(Install {
                specs: specs(ctx, plan, &set),
                disable_excludes: super::locks::locked(ctx)?,
                allowerasing: set.allowerasing(),
                remove: set.removes(),
                ..Install::default()
            }),
            why.join("; "),
        ));
        // Once the set is in, its branch is held: what apply then writes (its check after
        // the transaction reads the installed versions; the list as it is stands in here).
        let list = lock_list(ctx)?;
        let now = ctx.host.read_opt(&list)?.unwrap_or_default();
        check.changes.push(Change::new(
            Work::Write {
                file: FileWrite::new(list, now, 0o644),
                owes: None,
            },
            format!("then {hold}"),
        ));
        return Ok(check);
    }
    if let Some(change) = lock(ctx, plan, &set, &hold)? {
        return Ok(one(change));
    }
    Ok(Check::in_sync(format!(
        "{} installed ({}): {}; branch {branch} held ({hold}); {}",
        set_packages(plan).join(", "),
        plan.install,
        set.names.join(", "),
        plan.choice.explanation
    )))
}

/// While driver-repo swaps the driver first: nothing of the set is this step's, but the new
/// set's branch is held once it is in — what apply then writes (its check after the swap
/// reads the installed versions; the list as it is stands in here).
pub(super) fn after_swap(
    ctx: &Ctx<'_>,
    plan: &DriverPlan,
    transition: &Transition,
) -> Result<Check> {
    let list = lock_list(ctx)?;
    let now = ctx.host.read_opt(&list)?.unwrap_or_default();
    let mut check = Check::default();
    check.changes.push(Change::new(
        Work::Write {
            file: FileWrite::new(list, now, 0o644),
            owes: None,
        },
        format!(
            "{}; then branch {} held",
            transition.deferred_reason(),
            plan.repo.branch()
        ),
    ));
    Ok(check)
}

/// The lock list the plugin reads (`versionlock.conf`'s `locklist`), refused before any change
/// (exit 2, naming the setting or the file) when the plugin would hold nothing — turned off —
/// or the list is no file of the root (a FIFO, a folder, a link out of the root).
fn lock_list(ctx: &Ctx<'_>) -> Result<String> {
    lock_list_of(ctx.host)
}

/// [`lock_list`] of `host`: what apply's preparation checks on EL10 before any change, so that
/// a list that is a FIFO, a folder or a link out of the root is refused before the first
/// transaction of a fresh node (the driver step's own check runs after it).
pub(crate) fn lock_list_of(host: &gpuhost_host::host::Host) -> Result<String> {
    let conf = versionlock::PluginConf::parse(host.read_opt(versionlock::CONF)?.as_deref());
    let conf_file = versionlock::CONF;
    if !conf.enabled {
        return Err(invalid!(
            "{conf_file} says enabled = 0: the versionlock plugin would hold nothing, so the NVIDIA branch would not be held; set enabled = 1 there (NVIDIA's guide holds the branch with it)"
        ));
    }
    let list = conf.locklist;
    if !list.starts_with('/') {
        return Err(invalid!(
            "{conf_file}: locklist = {list} is not an absolute path; name the lock list's file (default {})",
            versionlock::LIST
        ));
    }
    if let Some((link, target, _)) = host.escaping_link(&list)? {
        return Err(invalid!(
            "the versionlock list {list} lies behind {} (a link to {}), outside the root: gpuhost writes no file there",
            link.display(),
            target.display()
        ));
    }
    match host.kind_nofollow(&list) {
        None | Some(gpuhost_host::rootfs::Kind::File) => Ok(list),
        Some(kind) => Err(invalid!(
            "the versionlock list {list} ({conf_file}'s locklist) is a {}, not a file: gpuhost writes the branch lock into a regular file only",
            match kind {
                gpuhost_host::rootfs::Kind::Dir => "folder",
                gpuhost_host::rootfs::Kind::Symlink => "link",
                _ => "FIFO or device",
            }
        )),
    }
}

/// The branch lock, when the list does not hold exactly the installed set's lines.
fn lock(ctx: &Ctx<'_>, plan: &DriverPlan, set: &SetStatus, hold: &str) -> Result<Option<Change>> {
    let branch = plan.repo.branch();
    let mut names = super::installed::family_in_repo(ctx, plan);
    names.extend(set.names.iter().cloned());
    names.sort();
    names.dedup();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let installed: Vec<gpuhost_host::rpm::Installed> =
        ctx.installed(&refs)?.into_values().flatten().collect();
    let want = versionlock::lines(&installed, branch);
    let list = lock_list(ctx)?;
    let existing = ctx.host.read_opt(&list)?.unwrap_or_default();
    if versionlock::held(&existing) == want && versionlock::current(&existing) {
        return Ok(None);
    }
    let content = versionlock::with_lock(&existing, branch, &want);
    Ok(Some(Change::new(
        Work::Write {
            file: FileWrite::new(list.as_str(), content, 0o644),
            owes: None,
        },
        format!(
            "branch {branch} not held: {hold} ({} packages at {})",
            want.len(),
            plan.repo.driver
        ),
    )))
}
