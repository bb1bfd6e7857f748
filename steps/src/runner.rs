//! The step runner: an ordered registry of steps, each checked, changed only where the host
//! differs, and checked again.
//!
//! A step's [`Step::check`] says what differs ([`Change`]s), what only a live system can do
//! (`deferred`), and whether a reboot is owed. The runner applies the changes (unless
//! `--dry-run`), checks again, and fails the step if the host still differs. The outcome of
//! every step, the commands it ran and how long it took make the [`Report`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use anyhow::{anyhow, Result};
use serde::Serialize;

use crate::cmd::{self, CmdRecord};
use crate::error::{hint_of, hinted};
use crate::facts::Facts;
use crate::host::Host;
use crate::profile::Profile;
use crate::rpm::{self, Installed};
use crate::state::State;

/// What a step can do about a difference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Install these package specs (names or exact NEVRAs) in one dnf transaction.
    Install(Vec<String>),
    /// A step-specific action; the step's own `apply` carries it out.
    Custom(String),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Install(p) => write!(f, "install {}", p.join(" ")),
            Action::Custom(s) => f.write_str(s),
        }
    }
}

/// One difference between the host and the profile, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub action: Action,
    pub reason: String,
}

impl Change {
    pub fn install(packages: Vec<String>, reason: impl Into<String>) -> Change {
        Change {
            action: Action::Install(packages),
            reason: reason.into(),
        }
    }

    pub fn custom(what: impl Into<String>, reason: impl Into<String>) -> Change {
        Change {
            action: Action::Custom(what.into()),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.action, self.reason)
    }
}

/// What a step found.
#[derive(Clone, Debug, Default)]
pub struct Check {
    /// Differences to change.
    pub changes: Vec<Change>,
    /// Actions only a live system can take (restart, module load, NVML), owed in an install root.
    pub deferred: Vec<String>,
    /// Set when a reboot is needed before the host is converged, with why.
    pub reboot: Option<String>,
    /// What was found, for the report when nothing differs.
    pub notes: Vec<String>,
}

impl Check {
    pub fn in_sync(note: impl Into<String>) -> Check {
        Check {
            notes: vec![note.into()],
            ..Check::default()
        }
    }
}

/// Everything a step may look at or act through.
pub struct Ctx<'a> {
    pub host: &'a Host,
    pub profile: &'a Profile,
    pub facts: &'a Facts,
    pub dry_run: bool,
    pub state: State,
    rpm_cache: BTreeMap<String, Vec<Installed>>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        host: &'a Host,
        profile: &'a Profile,
        facts: &'a Facts,
        dry_run: bool,
    ) -> Result<Self> {
        Ok(Ctx {
            host,
            profile,
            facts,
            dry_run,
            state: State::load(host)?,
            rpm_cache: BTreeMap::new(),
        })
    }

    /// Installed packages of these names (cached: names already asked cost nothing; the rest
    /// cost one `rpm -q`).
    pub fn installed(&mut self, names: &[&str]) -> Result<BTreeMap<String, Vec<Installed>>> {
        let missing: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !self.rpm_cache.contains_key(*n))
            .collect();
        if !missing.is_empty() {
            let found = rpm::query(self.host, &missing)?;
            self.rpm_cache.extend(found);
        }
        Ok(names
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    self.rpm_cache.get(*n).cloned().unwrap_or_default(),
                )
            })
            .collect())
    }

    /// Installed versions of one package.
    pub fn installed_one(&mut self, name: &str) -> Result<Vec<Installed>> {
        Ok(self.installed(&[name])?.remove(name).unwrap_or_default())
    }

    /// Forget cached rpm answers (after a transaction).
    pub fn invalidate_rpm(&mut self) {
        self.rpm_cache.clear();
    }

    /// `dnf install` these specs in one transaction. When dnf finds no match for a spec, the
    /// error names it and lists the versions of that package the enabled repos do have.
    pub fn dnf_install(&mut self, specs: &[String]) -> Result<()> {
        self.dnf_install_with(&[], specs)
    }

    /// [`Ctx::dnf_install`] with extra dnf options before the specs (e.g. `--allowerasing`).
    pub fn dnf_install_with(&mut self, options: &[&str], specs: &[String]) -> Result<()> {
        if specs.is_empty() {
            return Ok(());
        }
        let cmd = self
            .host
            .dnf()?
            .arg("install")
            .args(options.iter().copied())
            .args(specs);
        let out = cmd.output()?;
        self.invalidate_rpm();
        if out.success() {
            return Ok(());
        }
        let text = format!("{}\n{}", out.stdout, out.stderr);
        let unmatched: Vec<&str> = specs
            .iter()
            .map(String::as_str)
            .filter(|s| {
                text.lines().any(|l| {
                    (l.contains("No match for argument") || l.contains("Unable to find a match"))
                        && l.split_whitespace().any(|w| w == *s)
                })
            })
            .collect();
        if let Some(spec) = unmatched.first() {
            return Err(self.not_in_repos(spec));
        }
        Err(cmd.failure(&out))
    }

    /// The error for a package spec that no enabled repo carries.
    fn not_in_repos(&self, spec: &str) -> anyhow::Error {
        let name = package_name_of(spec);
        let available = self.available_versions(name).unwrap_or_default();
        let listed = if available.is_empty() {
            format!("no version of {name} is available")
        } else {
            format!("available: {}", available.join(", "))
        };
        hinted(
            format!("{spec} is not in any enabled repo ({listed})"),
            format!("enable the repo that carries {spec}, or boot a kernel whose packages are available"),
        )
    }

    /// `version-release.arch` of every available package of this name, oldest first.
    pub fn available_versions(&self, name: &str) -> Result<Vec<String>> {
        let out = self
            .host
            .dnf()?
            .args(["repoquery", "--qf", "%{version}-%{release}.%{arch}", name])
            .run()?;
        let mut v: Vec<String> = out
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        v.sort_by(|a, b| rpm::vercmp(a, b));
        v.dedup();
        Ok(v)
    }
}

/// The package name of a spec like `kernel-uek-devel-5.15.0-200.131.27.el8uek.x86_64`: the spec
/// without its last two dash-separated fields when the one before last starts with a digit.
pub fn package_name_of(spec: &str) -> &str {
    let mut parts = spec.rsplitn(3, '-');
    let (Some(_rel), Some(ver), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return spec;
    };
    if ver.starts_with(|c: char| c.is_ascii_digit()) {
        name
    } else {
        spec
    }
}

/// A provisioning step.
pub trait Step: Sync {
    /// Stable kebab-case id, used by `--only`, `--skip`, reports and logs.
    fn id(&self) -> &'static str;
    /// One line: what the step makes true.
    fn summary(&self) -> &'static str;
    /// Package names the step will ask rpm about; the runner asks for all steps' names in
    /// one `rpm -q` up front.
    fn rpm_names(&self, _ctx: &Ctx<'_>) -> Vec<String> {
        Vec::new()
    }
    /// `Some(reason)` when the step has nothing to do on this host (e.g. no NVSwitch).
    fn not_applicable(&self, _ctx: &Ctx<'_>) -> Option<String> {
        None
    }
    /// Compare the host with the profile. An `Err` means the check itself could not be made.
    fn check(&self, ctx: &mut Ctx<'_>) -> Result<Check>;
    /// Make the changes `check` found. The default installs packages in one transaction and
    /// refuses custom actions, which a step must implement itself.
    fn apply(&self, ctx: &mut Ctx<'_>, changes: &[Change]) -> Result<()> {
        let mut packages = Vec::new();
        for c in changes {
            match &c.action {
                Action::Install(p) => packages.extend(p.iter().cloned()),
                Action::Custom(what) => {
                    return Err(anyhow!("step {} cannot {what}: not implemented", self.id()))
                }
            }
        }
        ctx.dnf_install(&packages)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Unchanged,
    Changed,
    WouldChange,
    Failed,
    Deferred,
    Skipped,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Changed => "changed",
            Outcome::WouldChange => "would-change",
            Outcome::Failed => "failed",
            Outcome::Deferred => "deferred",
            Outcome::Skipped => "skipped",
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct StepReport {
    pub id: String,
    pub outcome: Outcome,
    /// Why: what was found, what changed, or why it failed.
    pub reason: String,
    /// What the user should do, when the step failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The changes made (or, in a dry run, that would be made).
    pub changes: Vec<String>,
    /// Live-only actions owed (install-root mode).
    pub deferred: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reboot_required: Option<String>,
    pub commands: Vec<CmdRecord>,
    pub duration_ms: u64,
}

impl StepReport {
    fn new(id: &str, outcome: Outcome, reason: String) -> StepReport {
        StepReport {
            id: id.to_string(),
            outcome,
            reason,
            hint: None,
            changes: vec![],
            deferred: vec![],
            reboot_required: None,
            commands: vec![],
            duration_ms: 0,
        }
    }
}

/// Which steps run.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub only: Vec<String>,
    pub skip: Vec<String>,
}

impl Selection {
    /// Unknown step ids are invalid input.
    pub fn validate(&self, steps: &[&dyn Step]) -> Result<()> {
        for id in self.only.iter().chain(&self.skip) {
            if !steps.iter().any(|s| s.id() == id) {
                let ids: Vec<&str> = steps.iter().map(|s| s.id()).collect();
                return Err(crate::invalid!(
                    "unknown step `{id}`; steps are: {}",
                    ids.join(", ")
                ));
            }
        }
        Ok(())
    }

    fn excludes(&self, id: &str) -> Option<&'static str> {
        if self.skip.iter().any(|s| s == id) {
            Some("skipped by --skip")
        } else if !self.only.is_empty() && !self.only.iter().any(|s| s == id) {
            Some("not selected by --only")
        } else {
            None
        }
    }
}

/// Run the steps in order.
pub fn run_steps(ctx: &mut Ctx<'_>, steps: &[&dyn Step], sel: &Selection) -> Vec<StepReport> {
    // One rpm query for every package any selected step will look at.
    let names: Vec<String> = steps
        .iter()
        .filter(|s| sel.excludes(s.id()).is_none())
        .flat_map(|s| s.rpm_names(ctx))
        .collect();
    let mut prefetch_cmds = Vec::new();
    if !names.is_empty() {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        // A failure here resurfaces, attributed, in the step that needs the answer.
        let _ = ctx.installed(&refs);
        prefetch_cmds = cmd::take_records();
    }
    let mut reports = Vec::new();
    let mut failed: Option<String> = None;
    for (index, step) in steps.iter().enumerate() {
        let start = Instant::now();
        let skip = |reason: String| StepReport::new(step.id(), Outcome::Skipped, reason);
        if let Some(why) = sel.excludes(step.id()) {
            reports.push(skip(why.to_string()));
            continue;
        }
        if let Some(f) = &failed {
            if !ctx.dry_run {
                reports.push(skip(format!("not run: step {f} failed")));
                continue;
            }
        }
        if let Some(why) = step.not_applicable(ctx) {
            reports.push(skip(why));
            continue;
        }
        tracing::info!(step = step.id(), "checking");
        let label = format!("[{}/{}] {}", index + 1, steps.len(), step.id());
        let mut report = run_one(ctx, *step, &label);
        crate::progress::step_done(&label, &report.outcome.to_string(), start.elapsed());
        let mut commands = std::mem::take(&mut prefetch_cmds);
        commands.extend(cmd::take_records());
        report.commands = commands;
        report.duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::info!(step = step.id(), outcome = %report.outcome, "{}", report.reason);
        if report.outcome == Outcome::Failed {
            failed = Some(step.id().to_string());
        }
        reports.push(report);
    }
    reports
}

fn run_one(ctx: &mut Ctx<'_>, step: &dyn Step, label: &str) -> StepReport {
    let mut report = StepReport::new(step.id(), Outcome::Unchanged, String::new());
    let fail = |mut r: StepReport, e: anyhow::Error| {
        r.outcome = Outcome::Failed;
        r.hint = hint_of(&e).map(str::to_string);
        r.reason = match e
            .chain()
            .find_map(|c| c.downcast_ref::<crate::error::Hint>())
        {
            Some(h) => h.message.clone(),
            None => format!("{e:#}"),
        };
        r
    };
    let first = match step.check(ctx) {
        Ok(c) => c,
        Err(e) => return fail(report, e.context("could not check")),
    };
    report.changes = first.changes.iter().map(ToString::to_string).collect();
    report.deferred = first.deferred.clone();
    report.reboot_required = first.reboot.clone();
    if first.changes.is_empty() {
        report.outcome = if first.deferred.is_empty() {
            Outcome::Unchanged
        } else {
            Outcome::Deferred
        };
        report.reason = summarize(&first.notes, &first.deferred, first.reboot.as_deref());
        return report;
    }
    if ctx.dry_run {
        report.outcome = Outcome::WouldChange;
        report.reason = first
            .changes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return report;
    }
    let what: Vec<String> = first.changes.iter().map(|c| c.action.to_string()).collect();
    crate::progress::step_changing(label, &what.join("; "));
    if let Err(e) = step.apply(ctx, &first.changes) {
        return fail(report, e);
    }
    let second = match step.check(ctx) {
        Ok(c) => c,
        Err(e) => return fail(report, e.context("could not check again after the change")),
    };
    if !second.changes.is_empty() {
        let left: Vec<String> = second.changes.iter().map(ToString::to_string).collect();
        return fail(
            report,
            anyhow!(
                "the host still differs after the change: {}",
                left.join("; ")
            ),
        );
    }
    report.outcome = Outcome::Changed;
    report.deferred = second.deferred.clone();
    report.reboot_required = second.reboot.clone().or(report.reboot_required);
    let done: Vec<String> = first.changes.iter().map(ToString::to_string).collect();
    report.reason = done.join("; ");
    if !second.deferred.is_empty() {
        report
            .reason
            .push_str(&format!("; deferred: {}", second.deferred.join("; ")));
    }
    report
}

fn summarize(notes: &[String], deferred: &[String], reboot: Option<&str>) -> String {
    let mut parts: Vec<String> = notes.to_vec();
    if !deferred.is_empty() {
        parts.push(format!(
            "deferred until a live run: {}",
            deferred.join("; ")
        ));
    }
    if let Some(r) = reboot {
        parts.push(format!("reboot required: {r}"));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("kernel-uek-devel-5.15.0-200.131.27.el8uek.x86_64", "kernel-uek-devel")]
    #[case(
        "kernel-devel-matched-5.14.0-427.13.1.el9_4.x86_64",
        "kernel-devel-matched"
    )]
    #[case("kernel-headers", "kernel-headers")]
    #[case("nvidia-container-toolkit-1.17.8-1", "nvidia-container-toolkit")]
    fn package_names_from_specs(#[case] spec: &str, #[case] name: &str) {
        assert_eq!(package_name_of(spec), name);
    }
}
