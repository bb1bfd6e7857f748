//! `apply` and `plan`: preflight checks, the lock, the steps, the journal, the report.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;

use crate::bootguard;
use crate::bundle;
use crate::lock::ApplyLock;
use crate::preflight::{check_kernel_release, grace_fits, host_fits_profile, is_root};
use crate::reboot;
use crate::recorded::{DriverRecord, ResumeArgs};
pub use crate::report::{exit, Report};
use crate::runner::{self, Ctx, Selection, StepReport};
use gpuhost_host::facts::{Facts, KernelChoice};
use gpuhost_host::fsutil;
use gpuhost_host::host::Host;
use gpuhost_host::invalid;
use gpuhost_host::kernel::Flavour;
use gpuhost_nvidia::packages::KMOD_COMMON;
use gpuhost_profile::Profile;
use gpuhost_steps;

#[derive(Clone, Debug)]
pub struct ApplyOptions {
    pub profile: String,
    pub root: PathBuf,
    pub kernel_release: Option<String>,
    pub sets: Vec<String>,
    pub selection: Selection,
    pub dry_run: bool,
    /// When a reboot is needed: reboot and resume through `gpuhost-resume.service`.
    pub reboot: bool,
    /// Loop guard: at most this many reboots in one resume chain.
    pub max_reboots: u32,
    /// The command line, recorded in the lock file and the journal.
    pub command_line: String,
    /// `--reboot-via`: who reboots (else the profile's `reboot.via`).
    pub reboot_via: Option<gpuhost_profile::RebootVia>,
    /// `--bundle DIR|TARBALL`: the profile and every package come from a verified bundle.
    pub bundle: Option<PathBuf>,
    /// The driver `gpuhost rollback` goes back to, over the profile's and the `--set`s'.
    pub driver: Option<DriverRecord>,
}

impl ApplyOptions {
    /// What a resumed run after a reboot repeats (not `--kernel-release`: after the reboot,
    /// the running kernel is the target).
    pub fn resume_args(&self) -> ResumeArgs {
        ResumeArgs {
            profile: self.profile.clone(),
            sets: self.sets.clone(),
            only: self.selection.only.clone(),
            skip: self.selection.skip.clone(),
            max_reboots: self.max_reboots,
            bundle: self.bundle.as_ref().map(|b| b.display().to_string()),
            reboot_via: self.reboot_via,
            driver: self.driver.clone(),
        }
    }
}

/// Everything before the first step: the profile, the host, and whether they fit.
pub struct Prepared {
    pub host: Host,
    pub profile: Profile,
    pub facts: Facts,
    /// The verified bundle (`--bundle`), kept open (a tarball's extraction) for the run.
    pub bundle: Option<bundle::Opened>,
    /// The run's driver, resolved once here and handed to the steps' `Ctx`.
    pub driver: Option<gpuhost_steps::run::DriverPlan>,
    /// What the preparation found worth a look without stopping (a pending MOK enrollment).
    pub warnings: Vec<String>,
    /// Why the new default boot kernel is not served: the bundle carries no headers for it.
    /// The run serves the kernels the bundle carries, and the kernel guard keeps the default
    /// boot on one of them, with this as its reason (exit 1, as online without headers).
    pub unserved: Option<String>,
}

pub fn prepare(opts: &ApplyOptions) -> Result<Prepared> {
    if let Some(k) = &opts.kernel_release {
        check_kernel_release(k)?;
    }
    opts.selection.validate(&gpuhost_steps::registry())?;
    // A bundle is verified before anything else is looked at.
    let bundle = opts.bundle.as_deref().map(bundle::open).transpose()?;
    let profile = profile_of(opts, bundle.as_ref())?;
    let mut host = Host::new(&opts.root)?;
    // rpm, dnf and systemctl follow the root's symlinks on the build host: none may lead out.
    host.check_tool_dirs()?;
    gpuhost_host::trust::state_dir_inside(&host)?;
    gpuhost_steps::transaction::cache::check_dir(&host)?;
    let mut facts = Facts::gather(
        &host,
        &KernelChoice {
            release: opts.kernel_release.as_deref(),
            flavour: Some(profile.kernel.flavour),
        },
    )?;
    // Not Oracle Linux: the same answer with a bundle as without (not a kernel the bundle lacks).
    if bundle.is_some() && !facts.os.as_ref().is_some_and(|o| o.is_oracle_linux()) {
        host_fits_profile(&host, &profile, &facts, opts.kernel_release.is_some())?;
    }
    let unserved = match &bundle {
        Some(b) => fit_bundle(b, &mut facts, &profile, opts.kernel_release.is_some())?,
        None => None,
    };
    host_fits_profile(&host, &profile, &facts, opts.kernel_release.is_some())?;
    // The profile's repositories and mirrors: each one there (or a well-formed URL) before any change.
    if bundle.is_none() {
        gpuhost_steps::containers::check_repos(&host, &profile, &opts.selection)?;
    }
    // The driver's flavour, stream and package set: refused now when they cannot work.
    let driver_plan = gpuhost_steps::driver::resolve(&profile, &facts)?;
    prebuilt_checked(&host, driver_plan.as_ref())?;
    // After the driver's own checks (a branch that cannot drive the GPU says so first).
    grace_fits(&facts, &host.root().display().to_string())?;
    if host.is_live() && !opts.dry_run && !is_root() {
        return Err(invalid!(
            "gpuhost apply changes the system and must run as root (gpuhost plan needs no root)"
        ));
    }
    point_dnf(&mut host, &profile, &facts);
    let driver_steps = gpuhost_steps::steps_needing_package(&opts.selection);
    gpuhost_steps::driver::require_package(&profile, &driver_steps)?;
    lock_list_ready(&host, driver_plan.as_ref(), &driver_steps)?;
    let mut warnings: Vec<String> = unserved
        .iter()
        .map(|why| format!("{why} (this run serves the kernels the bundle carries; the kernel guard keeps the default boot on one)"))
        .collect();
    // What the release table knows of the host's minor release (host/src/platform.rs).
    warnings.extend(gpuhost_host::platform::minor_warnings(facts.os.as_ref()));
    if let Some(plan) = &driver_plan {
        // GPUs whose device id gpuhost's table lacks: the branch was not checked against them.
        warnings.extend(plan.warnings());
    }
    if !driver_steps.is_empty() {
        // Secure Boot: DKMS-built modules need a key the firmware trusts, checked before anything.
        warnings.extend(gpuhost_steps::driver::signing::check_secure_boot(
            &host,
            &profile,
            &facts,
            driver_plan.as_ref(),
        )?);
    }
    if let Some(b) = &bundle {
        host.set_bundle(b.repo());
    }
    Ok(Prepared {
        host,
        profile,
        facts,
        bundle,
        driver: driver_plan,
        warnings,
        unserved,
    })
}

/// On EL10, the versionlock list the driver step writes into, when a driver step runs: checked
/// before any change (a FIFO, a folder, a link out of the root: exit 2).
fn lock_list_ready(
    host: &Host,
    plan: Option<&gpuhost_steps::run::DriverPlan>,
    driver_steps: &[&str],
) -> Result<()> {
    match plan.filter(|_| !driver_steps.is_empty()) {
        Some(plan) => gpuhost_steps::driver::lock_list_ready(host, plan),
        None => Ok(()),
    }
}

/// Prebuilt kmods (`driver.kmod_repo`), before any change: a served kernel without one on a
/// node without a module ([`no_kmod_on_day_one`]), and scriptlets in a served kernel's kmod
/// RPM that gpuhost does not write (rpm reads them; the rest of the RPM was checked when the
/// plan was resolved: `gpuhost_steps::run::kmod_rpm`).
fn prebuilt_checked(host: &Host, plan: Option<&gpuhost_steps::run::DriverPlan>) -> Result<()> {
    no_kmod_on_day_one(host, plan)?;
    match plan.and_then(|p| p.kmods.as_ref()) {
        Some(kmods) => kmods.scriptlets_checked(host),
        None => Ok(()),
    }
}

/// Prebuilt kmods (`driver.kmod_repo`) that leave a served kernel without one: refused before
/// any change on a node that has no NVIDIA module yet (exit 2: the repo must be built first).
/// On a node that has one (a kernel update), the kernel-module step fails for that kernel and
/// the kernel guard keeps the boot on a kernel with a module, saying which kmod to build.
fn no_kmod_on_day_one(host: &Host, plan: Option<&gpuhost_steps::run::DriverPlan>) -> Result<()> {
    let Some(plan) = plan else {
        return Ok(());
    };
    let Some(kmods) = plan.kmods.as_ref().filter(|k| !k.missing.is_empty()) else {
        return Ok(());
    };
    let has_driver = gpuhost_host::rpm::query(host, &[KMOD_COMMON])
        .map(|m| m.get(KMOD_COMMON).is_some_and(|v| !v.is_empty()))
        .unwrap_or(false);
    match kmods.no_kmod(&plan.repo.driver, plan.choice.flavour, true) {
        Some(e) if !has_driver => Err(e),
        _ => Ok(()),
    }
}

/// dnf resolves for the profile's release and the host's architecture: an image of another
/// architecture (an aarch64 Grace image built on x86_64) gets `--forcearch`.
fn point_dnf(host: &mut Host, profile: &Profile, facts: &Facts) {
    host.set_releasever(profile.os.major.to_string());
    if let Some(arch) = facts
        .arch
        .as_deref()
        .filter(|a| *a != gpuhost_host::arch::machine())
    {
        host.set_forcearch(arch);
    }
}

/// The run's profile: the bundle's (a `--profile` must name the same), else `--profile`'s;
/// with a rollback's driver pinned.
fn profile_of(opts: &ApplyOptions, bundle: Option<&bundle::Opened>) -> Result<Profile> {
    let mut profile = profile_with_sets(opts, bundle)?;
    if let Some(d) = &opts.driver {
        profile.pin_driver(PathBuf::from(&d.local_repo_rpm), d.sha256.clone())?;
    }
    Ok(profile)
}

/// The bundle's profile or `--profile`'s, with the `--set`s.
fn profile_with_sets(opts: &ApplyOptions, bundle: Option<&bundle::Opened>) -> Result<Profile> {
    let Some(b) = bundle else {
        return Profile::resolve(&opts.profile, &opts.sets);
    };
    if !opts.profile.is_empty() && opts.profile != b.manifest.profile {
        return Err(invalid!(
            "--profile {}: bundle {} was made for profile {}; leave --profile out (the bundle carries its profile), or make a bundle for {}",
            opts.profile,
            b.source.display(),
            b.manifest.profile,
            opts.profile
        ));
    }
    b.profile(&opts.sets)
}

/// The bundle must carry headers for every kernel the host serves. One that lacks a newer
/// default boot kernel's (installed after the bundle was made, e.g. by a `dnf update` from a
/// local mirror) serves the kernels it carries, when the kernel guard runs: the running kernel
/// (`--kernel-release`; in an install root without it, the newest installed kernel the bundle
/// carries), and the guard keeps the default boot on it, with the bundle's refusal as its
/// reason (what is returned). Anything else that does not fit is refused as before (exit 2).
fn fit_bundle(
    b: &bundle::Opened,
    facts: &mut Facts,
    profile: &Profile,
    release_given: bool,
) -> Result<Option<String>> {
    let Err(e) = b.fits(facts) else {
        return Ok(None);
    };
    let carried = &b.manifest.kernels;
    let mut narrowed = facts.clone();
    if !facts.live && !release_given {
        // The target was only the newest kernel installed in the root.
        let flavour = profile.kernel.flavour;
        let installed = &facts.installed_kernels;
        if let Some(k) = installed
            .iter()
            .rev()
            .find(|k| Flavour::of(k) == flavour && carried.contains(k))
        {
            narrowed.target_kernel = Some(k.clone());
        }
    }
    let guarded = profile.kernel.guard && profile.driver.manage;
    let lacking = |k: &Option<String>| k.as_ref().is_some_and(|d| !carried.contains(d));
    let (default_lacking, held_lacking) = (
        lacking(&narrowed.default_boot_kernel),
        lacking(&narrowed.held_back_kernel),
    );
    if !guarded || !(default_lacking || held_lacking) {
        return Err(e);
    }
    if default_lacking {
        narrowed.default_boot_kernel = None;
    }
    if held_lacking {
        // The kernel the guard holds back stays held back until a bundle carries it.
        narrowed.held_back_kernel = None;
    }
    // Another release, architecture or target kernel still refuses.
    b.fits(&narrowed)?;
    *facts = narrowed;
    Ok(Some(format!("{e:#}")))
}

/// Run `apply` (or `plan` when `opts.dry_run`). Errors are for runs that could not start
/// (invalid input: exit 2; a held lock: exit 1); step failures are in the report.
pub fn apply(opts: &ApplyOptions) -> Result<Report> {
    let start = Instant::now();
    let started_at = fsutil::rfc3339(fsutil::unix_now());
    if !opts.dry_run {
        // From here on a SIGTERM/SIGINT never kills a running package transaction.
        gpuhost_host::interrupt::install();
    }
    let prepared = match prepare(opts) {
        Ok(p) => p,
        // A signal during the checks before any change (the driver file's `rpm -qp`, facts):
        // reported and journaled as an interruption (exit 128 + the signal), not as bad input.
        Err(e) => return interrupted_before_start_or(opts, e, start, started_at),
    };
    let Prepared {
        host,
        profile,
        facts,
        bundle,
        driver,
        warnings: prepared_warnings,
        unserved: _,
    } = &prepared;
    let _lock = (!opts.dry_run)
        .then(|| ApplyLock::acquire(host, &opts.command_line))
        .transpose()?;
    // What did not stop the run but deserves a look: counted in the summary, listed in the report.
    let mut warnings = start_warnings(host, opts)?;
    warnings.extend(prepared_warnings.iter().cloned());
    let registry = gpuhost_steps::registry();
    let mut ctx = Ctx::new(host, profile, facts, driver.clone())?;
    let (steps, invalid_input) =
        runner::run_steps(&mut ctx, &registry, &opts.selection, opts.dry_run)?;
    let (reboot_required, deferred) = owed_by(&steps);
    let Ending {
        kernel_guard,
        interrupted,
        exit_code,
        reboot,
    } = ending(
        &ctx,
        opts,
        &prepared,
        &steps,
        invalid_input,
        &reboot_required,
    )?;
    warnings.extend(ignored_driver(profile));
    let bundle_source = bundle.as_ref().map(|b| b.source.display().to_string());
    let mut report = Report {
        gpuhost_version: env!("CARGO_PKG_VERSION").to_string(),
        driver: crate::rollback::record(
            &opts.selection,
            driver.as_ref(),
            profile.driver.sha256.as_deref(),
            (
                bundle_source
                    .as_deref()
                    .zip(bundle.as_ref().map(|b| b.dir.as_path())),
                opts.driver.as_ref(),
            ),
        ),
        command: crate::report::Command::of(opts.dry_run),
        profile: profile.name.clone(),
        root: host.root().display().to_string(),
        live: host.is_live(),
        dry_run: opts.dry_run,
        target_kernel: facts.target_kernel.clone(),
        started_at,
        duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        exit_code,
        reboot_required,
        reboot,
        interrupted: interrupted.map(|(_, why)| why),
        summary: String::new(),
        deferred,
        warnings,
        driver_managed: profile.driver.manage,
        bundle: bundle.as_ref().map(bundle::Opened::info),
        kernel_guard,
        steps,
    };
    report.summary = report.summarize();
    if !opts.dry_run {
        crate::journal::journal_append(host, &report, &opts.command_line)?;
    }
    Ok(report)
}

/// Before the first step: what a run killed mid-way left is removed (the scratch copies and
/// trees), and the journal and record files are read; their warnings. Nothing for a plan.
fn start_warnings(host: &Host, opts: &ApplyOptions) -> Result<Vec<String>> {
    if opts.dry_run {
        return Ok(Vec::new());
    }
    gpuhost_steps::transaction::swap::remove_left_scratch(host)?;
    gpuhost_host::stage::remove_left(host)?;
    gpuhost_steps::transaction::ahead::remove_left(host)?;
    crate::journal::check_records(host)
}

/// What the steps owe: the reboots they need and the actions they deferred, each `step: why`.
fn owed_by(steps: &[StepReport]) -> (Vec<String>, Vec<String>) {
    let reboot = steps
        .iter()
        .filter_map(|s| s.reboot_required.as_ref().map(|r| format!("{}: {r}", s.id)))
        .collect();
    let deferred = steps
        .iter()
        .flat_map(|s| s.deferred.iter().map(move |d| format!("{}: {d}", s.id)))
        .collect();
    (reboot, deferred)
}

/// The profile's local repo package, named while `driver.manage = false`: ignored, said so.
fn ignored_driver(profile: &Profile) -> Option<String> {
    let rpm = profile.driver.local_repo_rpm.as_ref()?;
    (!profile.driver.manage).then(|| {
        format!(
            "driver.local_repo_rpm ({}) is ignored: the profile says driver.manage = false",
            rpm.display()
        )
    })
}

/// How a run ends, once its steps have run: the kernel guard's decision, an interruption, the
/// exit code, and the reboot it scheduled.
struct Ending {
    kernel_guard: Option<bootguard::Decision>,
    interrupted: Option<(i32, String)>,
    exit_code: i32,
    reboot: Option<reboot::RebootReport>,
}

/// The guard judges what the steps left (not after invalid input, which changed nothing, nor
/// after an interruption), the exit code follows from all of it, a converged apply records what
/// the kernel trigger repeats, and a reboot owed is scheduled when asked.
fn ending(
    ctx: &Ctx<'_>,
    opts: &ApplyOptions,
    prepared: &Prepared,
    steps: &[StepReport],
    invalid_input: bool,
    reboot_required: &[String],
) -> Result<Ending> {
    let interrupted = interrupted_at(steps);
    // Invalid input changed nothing: the guard has nothing new to judge (and the profile's
    // driver, which it would look for, is the input in question).
    let kernel_guard = guard_after(
        ctx,
        opts,
        steps,
        interrupted.is_some() || invalid_input,
        &prepared.unserved,
    );
    // A signal after the last step's boundary (during the guard): still an interruption.
    let interrupted = interrupted.or_else(|| interrupted_after(opts));
    let mut exit_code = exit_code_of(
        interrupted.as_ref().map(|(sig, _)| *sig),
        invalid_input,
        steps,
        guard_failed(kernel_guard.as_ref(), prepared.unserved.is_some()),
        reboot_required,
    );
    if crate::report::converged(opts.dry_run, exit_code) {
        // What the kernel trigger repeats when a new kernel is installed.
        bootguard::save_last_apply(&prepared.host, &opts.resume_args())?;
    }
    let reboot = if opts.dry_run || interrupted.is_some() {
        None
    } else {
        reboot_after(
            &prepared.host,
            opts,
            &prepared.profile,
            reboot_required,
            &mut exit_code,
        )?
    };
    Ok(Ending {
        kernel_guard,
        interrupted,
        exit_code,
        reboot,
    })
}

/// A SIGTERM/SIGINT stopped the run at a step boundary: the signal, and the first step it
/// kept from running.
fn interrupted_at(steps: &[StepReport]) -> Option<(i32, String)> {
    let sig = gpuhost_host::interrupt::received()?;
    steps
        .iter()
        .find(|s| s.interrupted_by == Some(sig))
        .map(|s| {
            (
                sig,
                format!(
                    "interrupted at step {} by {}",
                    s.id,
                    gpuhost_host::interrupt::name(sig)
                ),
            )
        })
}

/// A signal that came after the last step's boundary (during the kernel guard).
fn interrupted_after(opts: &ApplyOptions) -> Option<(i32, String)> {
    let sig = gpuhost_host::interrupt::received().filter(|_| !opts.dry_run)?;
    Some((
        sig,
        format!(
            "interrupted after the last step by {}",
            gpuhost_host::interrupt::name(sig)
        ),
    ))
}

/// The run's exit code: a signal's, invalid input (2), a failed step or kernel guard (1), a
/// reboot owed (3), or 0.
fn exit_code_of(
    signal: Option<i32>,
    invalid_input: bool,
    steps: &[StepReport],
    guard_failed: bool,
    reboot_required: &[String],
) -> i32 {
    if let Some(sig) = signal {
        gpuhost_host::interrupt::exit_code(sig)
    } else if invalid_input {
        exit::INVALID
    } else if guard_failed || steps.iter().any(|s| s.outcome.is_failure()) {
        exit::FAILED
    } else if !reboot_required.is_empty() {
        exit::REBOOT
    } else {
        exit::OK
    }
}

/// After a converged run the reboot chain ends; with a reboot owed and `--reboot`, the next
/// one is scheduled (the loop guard giving up fails the run; Slurm scheduling it exits 4).
fn reboot_after(
    host: &Host,
    opts: &ApplyOptions,
    profile: &Profile,
    reboot_required: &[String],
    exit_code: &mut i32,
) -> Result<Option<reboot::RebootReport>> {
    if *exit_code == exit::OK {
        return reboot::finish(host);
    }
    if *exit_code != exit::REBOOT || !opts.reboot {
        return Ok(None);
    }
    let r = reboot::schedule(host, &opts.resume_args(), reboot_required, &profile.reboot)?;
    if r.action == reboot::RebootAction::GaveUp {
        *exit_code = exit::FAILED;
    }
    if r.action == reboot::RebootAction::SlurmScheduled {
        *exit_code = exit::REBOOT_SCHEDULED;
    }
    Ok(Some(r))
}

/// `prepare` failed: an interruption when a signal came, else its error.
fn interrupted_before_start_or(
    opts: &ApplyOptions,
    e: anyhow::Error,
    start: Instant,
    started_at: String,
) -> Result<Report> {
    match gpuhost_host::interrupt::received().filter(|_| !opts.dry_run) {
        Some(sig) => interrupted_before_start(opts, sig, &e, start, started_at),
        None => Err(e),
    }
}

/// The report of a run that a SIGTERM/SIGINT stopped before its first step (`prepare` was
/// refused its next command): every selected step not run, exit 128 + the signal, and the
/// journal entry — under the apply lock, when it can be had at once.
fn interrupted_before_start(
    opts: &ApplyOptions,
    sig: i32,
    err: &anyhow::Error,
    start: Instant,
    started_at: String,
) -> Result<Report> {
    let registry = gpuhost_steps::registry();
    let selected: Vec<&dyn gpuhost_steps::step::Step> = registry
        .iter()
        .copied()
        .filter(|s| opts.selection.excludes(s.id()).is_none())
        .collect();
    let steps = runner::not_run_before_start(&selected, sig);
    let first = steps.first().map_or("(none)", |s| s.id.as_str());
    let why = format!(
        "interrupted at step {first} by {} (during the checks before any change: {err:#})",
        gpuhost_host::interrupt::name(sig)
    );
    let mut report = Report {
        gpuhost_version: env!("CARGO_PKG_VERSION").to_string(),
        driver: None,
        command: crate::report::Command::Apply,
        profile: opts.profile.clone(),
        root: opts.root.display().to_string(),
        live: opts.root == std::path::Path::new("/"),
        dry_run: false,
        target_kernel: opts.kernel_release.clone(),
        started_at,
        duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        exit_code: gpuhost_host::interrupt::exit_code(sig),
        reboot_required: Vec::new(),
        reboot: None,
        interrupted: Some(why),
        summary: String::new(),
        deferred: Vec::new(),
        warnings: Vec::new(),
        driver_managed: true,
        bundle: None,
        kernel_guard: None,
        steps,
    };
    report.summary = report.summarize();
    let journaled = Host::new(&opts.root).and_then(|host| {
        let _lock = ApplyLock::acquire(&host, &opts.command_line)?;
        crate::journal::journal_append(&host, &report, &opts.command_line)
    });
    if let Err(e) = journaled {
        let warning = format!("the interruption is not in the journal: {e:#}");
        eprintln!("gpuhost: warning: {warning}");
        report.warnings.push(warning);
        report.summary = report.summarize();
    }
    Ok(report)
}

/// The guard fails the run when it could not do its work, or when the new default boot kernel
/// was not served because the bundle lacks its headers (as a failed step does online).
fn guard_failed(decision: Option<&bootguard::Decision>, unserved: bool) -> bool {
    match decision {
        Some(bootguard::Decision::Failed { .. }) => true,
        Some(d) => unserved && d.is_trouble(),
        None => false,
    }
}

/// The kernel guard after the steps, when it runs (not in plan, not after an interruption or
/// invalid input — `stopped`: nothing was changed then — not with `kernel.guard = false` or
/// without a driver): its decision, or its error as a `failed`
/// decision, reported and journaled like any other outcome. `unserved`: why the bundle could
/// not serve the new default boot kernel.
fn guard_after(
    ctx: &Ctx<'_>,
    opts: &ApplyOptions,
    steps: &[StepReport],
    stopped: bool,
    unserved: &Option<String>,
) -> Option<bootguard::Decision> {
    let p = ctx.profile;
    if opts.dry_run || stopped || !p.kernel.guard || !p.driver.manage {
        return None;
    }
    match guard(ctx, opts, steps, unserved.as_deref()) {
        Ok(d) => d,
        Err(e) => Some(bootguard::Decision::Failed {
            error: format!(
                "{e:#}; the next boot may start a kernel without the NVIDIA module: see gpuhost status (driver.next_boot), fix the cause and run this apply again"
            ),
        }),
    }
}

/// After the steps: keep the next boot on a kernel with the NVIDIA module ([`bootguard`]).
/// Not for profiles without a driver.
fn guard(
    ctx: &Ctx<'_>,
    opts: &ApplyOptions,
    steps: &[StepReport],
    unserved: Option<&str>,
) -> Result<Option<bootguard::Decision>> {
    // The drivers whose modules the host has, as rpm says after the steps (not the version
    // this run asked for: a refused or failed run left the host's driver as it was). None
    // installed: no module to keep, nothing to guard.
    let mut drivers: Vec<String> = ctx
        .installed(&[KMOD_COMMON])?
        .remove(KMOD_COMMON)
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.version)
        .collect();
    drivers.sort();
    drivers.dedup();
    if drivers.is_empty() {
        return Ok(None);
    }
    let facts = ctx.facts;
    // Re-read: the steps may have installed kernels or moved the default.
    let installed = gpuhost_host::kernel::installed(ctx.host)?;
    let default_boot = gpuhost_host::kernel::default_boot(ctx.host, &installed)?;
    let failure = unserved.map(str::to_string).or_else(|| {
        steps
            .iter()
            .find(|s| s.outcome.is_failure())
            .map(|s| format!("{} failed: {}", s.id, s.reason))
    });
    // The same apply as this one (profile or bundle, --sets, step selection), quoted for a shell.
    let mut argv = vec!["gpuhost".to_string()];
    argv.extend(opts.resume_args().argv());
    if !ctx.host.is_live() {
        argv.extend(["--root".to_string(), ctx.host.root().display().to_string()]);
    }
    let cmd = gpuhost_host::cmd::Display(&argv).to_string();
    let decision = bootguard::Guard {
        host: ctx.host,
        drivers: &drivers,
        flavour: ctx.profile.kernel.flavour,
        installed: &installed,
        default_boot: default_boot.as_deref(),
        target: facts.target_kernel.as_deref(),
        failure,
        apply_command: cmd,
    }
    .settle()?;
    Ok(Some(decision))
}
