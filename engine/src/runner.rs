//! The step runner: every selected step is checked first, then the work the checks decided is
//! carried out as one plan, then every step that changed is checked again.
//!
//! A step's [`Step::check`] is pure: it reads the host and returns typed [`Change`]s (what
//! differs, and the [`Work`] that fixes it), what only a live system can do (`deferred`), and
//! whether a reboot is owed. For `apply` the runner then:
//! 1. carries out the work that prepares the package transactions (repo files, DKMS's compiler
//!    override, removals), step by step;
//! 2. merges every step's package work into at most two dnf transactions: the package that
//!    brings a repo (NVIDIA's local repo package) first, then everything else, module streams
//!    included — a failed transaction fails the steps whose packages it could not resolve and
//!    leaves the others not run;
//! 3. step by step, checks each step again against the host the transactions left (a step's
//!    check may depend on an earlier step's packages: the kernel module is built by the
//!    driver's transaction), carries out the work still left, and checks once more: a step
//!    whose host still differs fails.
//!
//! Per step the report keeps the outcome, the reason, the changes made, the commands run
//! (a shared transaction is listed under each step it served) and the time taken.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use gpuhost_host::cmd::{self, CmdRecord};
use gpuhost_host::error::hint_of;
pub use gpuhost_steps::step::{Change, FileWrite, Install, Owed, Phase, Work};
pub use gpuhost_steps::step::{Check, Ctx, DnfFailure, Selection, Step};
use gpuhost_steps::transaction::Batch;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Unchanged,
    Changed,
    WouldChange,
    Failed,
    /// A package transaction stopped part-way: the rpm database holds part of it (the report
    /// lists what rpm shows, and the hint the command that repairs it). A failure.
    Partial,
    Deferred,
    Skipped,
}

impl Outcome {
    /// The step did not get where it should: failed, or stopped part-way.
    pub fn is_failure(self) -> bool {
        matches!(self, Outcome::Failed | Outcome::Partial)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Changed => "changed",
            Outcome::WouldChange => "would-change",
            Outcome::Failed => "failed",
            Outcome::Partial => "partial",
            Outcome::Deferred => "deferred",
            Outcome::Skipped => "skipped",
        })
    }
}

/// One step in a report (and in the journal, which reads reports of earlier versions: what
/// they may lack has a default).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepReport {
    pub id: String,
    pub outcome: Outcome,
    /// Why: what was found, what changed, or why it failed.
    pub reason: String,
    /// What the user should do, when the step failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The changes made (or, in a dry run, that would be made).
    #[serde(default)]
    pub changes: Vec<String>,
    /// Live-only actions owed (install-root mode).
    #[serde(default)]
    pub deferred: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_required: Option<String>,
    /// The reason as people read it: one line per change (a run of changes that share a
    /// reason on one line, its reason once), then what is deferred. Empty: the reason is one
    /// line. The text report prints these; JSON has `changes` and `reason`.
    #[serde(skip)]
    pub lines: Vec<ChangeLine>,
    #[serde(default)]
    pub commands: Vec<CmdRecord>,
    #[serde(default)]
    pub duration_ms: u64,
    /// The signal (SIGTERM, SIGINT) that kept this step from running, if one did.
    #[serde(skip)]
    pub interrupted_by: Option<i32>,
}

/// One line of a step's reason ([`StepReport::lines`]): the work of a run of changes, as the
/// reason gives it and as the text report's line does ([`Work::summary`]), and the reason they
/// share (empty for what is deferred).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeLine {
    pub work: String,
    pub short: String,
    pub why: String,
    /// What the text report lists under the line ([`Work::details`]).
    pub details: Vec<String>,
}

impl ChangeLine {
    /// The line as the text report prints it.
    pub fn text(&self) -> String {
        if self.why.is_empty() {
            self.short.clone()
        } else {
            format!("{} ({})", self.short, self.why)
        }
    }
}

impl std::fmt::Display for ChangeLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.why.is_empty() {
            f.write_str(&self.work)
        } else {
            write!(f, "{} ({})", self.work, self.why)
        }
    }
}

/// A step's lines as its one-line reason.
fn joined(lines: &[ChangeLine]) -> String {
    lines
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
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
            lines: vec![],
            commands: vec![],
            duration_ms: 0,
            interrupted_by: None,
        }
    }
}

/// Where a step stands in the run (zincati's `UpdateAgentState` is the model): each state
/// holds what is known in it, and a step only moves forward — `Unchecked` → `Checked` →
/// `Reported`, or straight to `Reported` when it is not selected, not applicable, stopped, or
/// its check failed.
#[derive(Debug, Default)]
enum StepState {
    /// Not checked yet.
    #[default]
    Unchecked,
    /// Checked against the host before anything changed (`first`); `done`: its changes carried
    /// out so far (prepare, the package transaction, finish).
    Checked { first: Check, done: Vec<Change> },
    /// Its outcome is known.
    Reported(StepReport),
}

/// A step on its way through the run.
struct Slot<'s> {
    step: &'s dyn Step,
    label: String,
    state: StepState,
    commands: Vec<CmdRecord>,
    elapsed: Duration,
}

impl Slot<'_> {
    /// Checked, its outcome not yet known: its work may still be carried out.
    fn open(&self) -> bool {
        matches!(self.state, StepState::Checked { .. })
    }

    fn reported(&self) -> bool {
        matches!(self.state, StepState::Reported(_))
    }

    /// The check before anything was changed, while the step is open.
    fn first(&self) -> Option<&Check> {
        match &self.state {
            StepState::Checked { first, .. } => Some(first),
            _ => None,
        }
    }

    /// The changes carried out so far (none unless open).
    fn done(&self) -> &[Change] {
        match &self.state {
            StepState::Checked { done, .. } => done,
            _ => &[],
        }
    }

    /// A change of an open step was carried out.
    fn carried(&mut self, change: Change) {
        if let StepState::Checked { done, .. } = &mut self.state {
            done.push(change);
        }
    }

    /// The outcome is known: the last state.
    fn report(&mut self, r: StepReport) {
        self.state = StepState::Reported(r);
    }

    fn id(&self) -> &'static str {
        self.step.id()
    }

    /// Take the commands run since the last call, and the time since `since`.
    fn account(&mut self, since: Instant) {
        self.commands.extend(cmd::take_records());
        self.elapsed += since.elapsed();
    }

    fn fail(&mut self, e: anyhow::Error) {
        if gpuhost_host::interrupt::is_interrupted(&e) {
            // Stopped by SIGTERM/SIGINT, not failed: what it did is listed.
            self.not_run(&format!("{e:#}"), gpuhost_host::interrupt::received());
            return;
        }
        let mut r = StepReport::new(self.id(), Outcome::Failed, String::new());
        r.hint = hint_of(&e).map(str::to_string);
        r.reason = match e
            .chain()
            .find_map(|c| c.downcast_ref::<gpuhost_host::error::Hint>())
        {
            Some(h) => h.message.clone(),
            None => format!("{e:#}"),
        };
        if let Some(p) = gpuhost_host::rpm::partial_of(&e) {
            // What the rpm database shows, never "nothing was changed".
            r.outcome = Outcome::Partial;
            r.reason = p.to_string();
            r.hint = Some(p.repair.clone());
            r.changes = p
                .diff
                .added
                .iter()
                .map(|a| format!("added {a}"))
                .chain(p.diff.removed.iter().map(|a| format!("removed {a}")))
                .chain(
                    p.diff
                        .duplicated
                        .iter()
                        .map(|a| format!("installed twice: {a}")),
                )
                .collect();
            self.report(r);
            return;
        }
        let mut changes: Vec<String> = self.done().iter().map(ToString::to_string).collect();
        if changes.is_empty() {
            if let Some(first) = self.first() {
                changes = first.changes.iter().map(ToString::to_string).collect();
            }
        }
        r.changes = changes;
        if let Some(first) = self.first() {
            r.deferred = first.deferred.clone();
            r.reboot_required = first.reboot.clone();
        }
        self.report(r);
    }

    /// Not run because another step failed, or because `signal` arrived; what this step
    /// already had done is listed.
    fn not_run(&mut self, why: &str, signal: Option<i32>) {
        let mut reason = format!("not run: {why}");
        if !self.done().is_empty() {
            let done: Vec<String> = self.done().iter().map(|c| c.work.to_string()).collect();
            reason.push_str(&format!("; done before that: {}", done.join("; ")));
        }
        let mut r = StepReport::new(self.id(), Outcome::Skipped, reason);
        r.changes = self.done().iter().map(ToString::to_string).collect();
        r.interrupted_by = signal;
        self.report(r);
    }
}

/// The run so far: the slots, and the first failure (after which later steps do not run).
struct Run<'s> {
    slots: Vec<Slot<'s>>,
    stop: Option<(usize, String)>,
    /// Set at the first step boundary after a SIGTERM/SIGINT: the signal, why the rest does
    /// not run.
    interrupted: Option<i32>,
    /// Whether any work has been carried out (then every later step is checked again).
    changed_something: bool,
    /// A step's check found invalid input (a wrong driver file, a missing mirror): the run
    /// exits 2, having changed nothing.
    invalid_input: bool,
}

impl Run<'_> {
    fn stopped_before(&self, index: usize) -> Option<String> {
        if let Some(sig) = self.interrupted {
            return Some(interrupted_by(sig));
        }
        match &self.stop {
            Some((at, id)) if *at < index => Some(format!("step {id} failed")),
            _ => None,
        }
    }

    /// At a step boundary: true once a SIGTERM/SIGINT has arrived (nothing more is started).
    fn interrupt(&mut self) -> bool {
        if self.interrupted.is_none() {
            self.interrupted = gpuhost_host::interrupt::received();
        }
        self.interrupted.is_some()
    }

    fn failed(&mut self, index: usize) {
        let id = self.slots[index].id().to_string();
        self.stop_at(index, id);
    }

    /// The steps after `index` do not run, because step `id` failed (`id` may come later:
    /// a failed package transaction stops what follows its first member).
    fn stop_at(&mut self, index: usize, id: String) {
        if self.stop.as_ref().is_none_or(|(at, _)| index < *at) {
            self.stop = Some((index, id));
        }
    }
}

/// Run the steps: check all, carry out the plan (unless `dry_run`), check again. The reports,
/// and whether a check found invalid input (a wrong driver file, a missing mirror: exit 2,
/// nothing was changed).
pub fn run_steps(
    ctx: &mut Ctx<'_>,
    steps: &[&dyn Step],
    sel: &Selection,
    dry_run: bool,
) -> Result<(Vec<StepReport>, bool)> {
    let run_start = gpuhost_host::fsutil::unix_now();
    let n = steps.len();
    let mut run = Run {
        slots: steps
            .iter()
            .enumerate()
            .map(|(index, step)| Slot {
                step: *step,
                label: format!("[{}/{n}] {}", index + 1, step.id()),
                state: StepState::Unchecked,
                commands: Vec::new(),
                elapsed: Duration::ZERO,
            })
            .collect(),
        stop: None,
        interrupted: None,
        changed_something: false,
        invalid_input: false,
    };
    ctx.reads_ahead = !dry_run;
    prefetch(ctx, &run.slots, sel);
    check_all(ctx, &mut run, sel, dry_run);
    // Preflight: every step was checked before anything changes; when a check failed (a
    // wrong driver file, a missing mirror, a host that cannot be read), nothing is changed.
    if let (false, Some((_, id))) = (dry_run, run.stop.clone()) {
        let why = format!("step {id} failed its check; nothing was changed");
        for slot in run.slots.iter_mut().filter(|s| !s.reported()) {
            slot.not_run(&why, None);
        }
    }
    if !dry_run {
        // Before the first change: room for the driver and Docker installs the checks planned.
        space_preflight(ctx, &run)?;
        read_ahead(ctx, &mut run);
        prepare(ctx, &mut run);
        transactions(ctx, &mut run);
        gpuhost_steps::transaction::ready::clear(ctx.host);
        settle_records(ctx, &run, run_start);
        if run.changed_something && !run.interrupt() {
            ctx.invalidate_rpm();
            prefetch(ctx, &run.slots, sel);
        }
        for i in 0..run.slots.len() {
            run.interrupt();
            finish(ctx, &mut run, i);
        }
    }
    if let Some(sig) = run.interrupted {
        for slot in run.slots.iter_mut().filter(|s| !s.reported()) {
            slot.not_run(&interrupted_by(sig), Some(sig));
        }
    }
    let reports = run
        .slots
        .into_iter()
        .map(|mut s| {
            let mut r = match std::mem::take(&mut s.state) {
                StepState::Reported(r) => r,
                state => planned(s.id(), &state),
            };
            r.commands = std::mem::take(&mut s.commands);
            r.duration_ms = u64::try_from(s.elapsed.as_millis()).unwrap_or(u64::MAX);
            r
        })
        .collect();
    Ok((reports, run.invalid_input))
}

/// Refuse (exit 2, nothing changed yet) to start a driver or Docker install (or a driver swap) on filesystems
/// without the space it needs ([`gpuhost_host::hostinfo::require`] states the figures). Only runs
/// where a check planned such an install: a converged host reads no mount table.
fn space_preflight(ctx: &Ctx<'_>, run: &Run<'_>) -> Result<()> {
    use gpuhost_host::hostinfo;
    let mut needs: Vec<hostinfo::Need> = Vec::new();
    for slot in &run.slots {
        let Some(first) = slot.first().filter(|c| c.brings_packages()) else {
            continue;
        };
        for n in slot.step.space_needs(ctx, first) {
            if !needs.iter().any(|m| m.path == n.path && m.what == n.what) {
                needs.push(n);
            }
        }
    }
    if needs.is_empty() {
        return Ok(());
    }
    hostinfo::require(ctx.host, &hostinfo::Mounts::read(), &needs)
}

/// The typed plan, for `gpuhost bundle`: every selected step's first check against the host,
/// carrying nothing out. `(id, Ok(None))` for a step not selected or not applicable here.
pub fn checks(
    ctx: &Ctx<'_>,
    steps: &[&dyn Step],
    sel: &Selection,
) -> Vec<(&'static str, Result<Option<Check>>)> {
    query_rpm_names(
        ctx,
        steps
            .iter()
            .copied()
            .filter(|s| sel.excludes(s.id()).is_none()),
    );
    steps
        .iter()
        .map(|s| {
            let r = if sel.excludes(s.id()).is_some() || s.not_applicable(ctx).is_some() {
                Ok(None)
            } else {
                s.check(ctx).map(Some)
            };
            (s.id(), r)
        })
        .collect()
}

/// One rpm query for every package any selected step still to report will look at.
fn prefetch(ctx: &Ctx<'_>, slots: &[Slot<'_>], sel: &Selection) {
    query_rpm_names(
        ctx,
        slots
            .iter()
            .filter(|s| sel.excludes(s.id()).is_none() && !s.reported())
            .map(|s| s.step),
    );
}

/// One rpm query for every package (`Step::rpm_names`) of `steps`, into the run's cache.
fn query_rpm_names<'s>(ctx: &Ctx<'_>, steps: impl Iterator<Item = &'s dyn Step>) {
    let names: Vec<String> = steps.flat_map(|s| s.rpm_names(ctx)).collect();
    if !names.is_empty() {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        // A failure here resurfaces, attributed, in the step that needs the answer.
        let _ = ctx.installed(&refs);
    }
}

fn check_all(ctx: &Ctx<'_>, run: &mut Run<'_>, sel: &Selection, dry_run: bool) {
    for i in 0..run.slots.len() {
        let start = Instant::now();
        let slot = &mut run.slots[i];
        let id = slot.id();
        if let Some(why) = sel.excludes(id) {
            slot.report(StepReport::new(id, Outcome::Skipped, why.to_string()));
            continue;
        }
        if !dry_run {
            if let Some(why) = run.stopped_before(i) {
                let sig = run.interrupted;
                run.slots[i].not_run(&why, sig);
                continue;
            }
        }
        let slot = &mut run.slots[i];
        if let Some(why) = slot.step.not_applicable(ctx) {
            slot.report(StepReport::new(id, Outcome::Skipped, why));
            slot.account(start);
            continue;
        }
        tracing::info!(step = id, "checking");
        match slot.step.check(ctx) {
            Ok(first) => {
                slot.state = StepState::Checked {
                    first,
                    done: Vec::new(),
                }
            }
            Err(e) => {
                if gpuhost_host::error::is_invalid(&e) {
                    run.invalid_input = true;
                }
                slot.fail(e.context("could not check"));
                run.failed(i);
            }
        }
        run.slots[i].account(start);
        if dry_run {
            let s = &run.slots[i];
            if let StepState::Reported(r) = &s.state {
                tracing::info!(step = id, outcome = %r.outcome, "{}", r.reason);
            }
        }
    }
}

/// A plan's report of a checked step (also what an apply reports of a step it had no
/// reason to touch).
fn planned(id: &str, state: &StepState) -> StepReport {
    let mut r = StepReport::new(id, Outcome::Unchanged, String::new());
    let StepState::Checked { first, .. } = state else {
        return r;
    };
    // In the order apply carries them out: phase by phase (before the transactions, the
    // transactions, after them), each phase's in the check's order.
    let mut changes: Vec<Change> = first.changes.clone();
    changes.sort_by_key(|c| c.work.phase());
    r.changes = changes.iter().map(ToString::to_string).collect();
    r.deferred = first.deferred.clone();
    r.reboot_required = first.reboot.clone();
    if first.changes.is_empty() {
        r.outcome = if first.deferred.is_empty() {
            Outcome::Unchanged
        } else {
            Outcome::Deferred
        };
        r.reason = summarize(&first.notes, &first.deferred, first.reboot.as_deref());
    } else {
        r.outcome = Outcome::WouldChange;
        r.lines = lines_of(&changes);
        r.reason = joined(&r.lines);
    }
    r
}

/// A step's changes, one line each: each change's work, and its reason once for a run of
/// changes that share it (`write a, write b (why)`, not the same why after each). Joined with
/// `; `, the step's reason.
fn lines_of(changes: &[Change]) -> Vec<ChangeLine> {
    let mut runs: Vec<(Vec<&Work>, &str)> = Vec::new();
    for c in changes {
        match runs.last_mut() {
            Some((works, why)) if *why == c.reason => works.push(&c.work),
            _ => runs.push((vec![&c.work], &c.reason)),
        }
    }
    let join = |works: &[&Work], each: fn(&Work) -> String| {
        works.iter().map(|w| each(w)).collect::<Vec<_>>().join(", ")
    };
    runs.iter()
        .map(|(works, why)| ChangeLine {
            work: join(works, |w| w.to_string()),
            short: join(works, Work::summary),
            why: (*why).to_string(),
            details: works.iter().filter_map(|w| w.details()).collect(),
        })
        .collect()
}

/// Carry out one change of a step (not a merged transaction), recording what it owes first;
/// `label` names it in the progress lines.
fn carry(ctx: &mut Ctx<'_>, slot: &mut Slot<'_>, change: &Change, label: &str) -> Result<()> {
    failpoint(&format!("{}:before-change", slot.id()));
    gpuhost_host::progress::step_changing(label, &change.work.summary());
    let owes = match &change.work {
        Work::Install(i) => i.owes.as_ref(),
        Work::Write { owes, .. } => owes.as_ref(),
        _ => None,
    };
    if let Some(o) = owes {
        ctx.owe(o)?;
    }
    let result = match &change.work {
        Work::Install(i) => {
            let before = Before::read(ctx);
            let (cmd, out) = ctx.transaction(&[i], Batch::Own)?;
            ctx.invalidate_rpm();
            if out.success() {
                Ok(())
            } else {
                let mut failure = DnfFailure::new(cmd, out);
                let left = before.compare(ctx, &mut failure);
                let e = slot.step.explain(ctx, i, &failure);
                Err(match left {
                    Some(diff) => partial_error(e, diff),
                    None => e,
                })
            }
        }
        Work::RestartUnit { settles, .. } => {
            let settles = *settles;
            slot.step
                .apply(ctx, &change.work)
                .and_then(|()| ctx.state.settle(ctx.host, settles))
        }
        work => {
            let r = slot.step.apply(ctx, work);
            // Any change (a module reset, a repo file) may change the driver's transition.
            ctx.forget_transition();
            if matches!(
                work,
                Work::Remove(_)
                    | Work::SwapDriver(_)
                    | Work::Rebuild { .. }
                    | Work::SwitchStream { .. }
            ) {
                ctx.invalidate_rpm();
            }
            r
        }
    };
    result?;
    if matches!(change.work, Work::Write { .. }) {
        failpoint(&format!("{}:after-write", slot.id()));
    }
    failpoint(&format!("{}:after-change", slot.id()));
    slot.carried(change.clone());
    Ok(())
}

/// Phase 1: what the transactions read or need out of the way, step by step.
/// Phase 0, before the first change: the package files the transactions install by path and
/// bring a repo with (NVIDIA's local repo package) are staged and read whole once
/// ([`gpuhost_steps::transaction::ready`]). A package found bad is the step's invalid input, as
/// its check's would be: no step runs, nothing was changed.
fn read_ahead(ctx: &Ctx<'_>, run: &mut Run<'_>) {
    for i in 0..run.slots.len() {
        if run.interrupt() {
            return;
        }
        if !run.slots[i].open() || run.stopped_before(i).is_some() {
            continue;
        }
        let works: Vec<Work> = run.slots[i]
            .first()
            .into_iter()
            .flat_map(|c| c.changes.iter())
            .map(|c| c.work.clone())
            .collect();
        let start = Instant::now();
        let r = works
            .iter()
            .try_for_each(|w| gpuhost_steps::transaction::read_ahead(ctx.host, w));
        run.slots[i].account(start);
        if let Err(e) = r {
            if gpuhost_host::error::is_invalid(&e) {
                run.invalid_input = true;
            }
            let id = run.slots[i].id();
            run.slots[i].fail(e);
            run.failed(i);
            let why = format!("step {id} failed before any change; nothing was changed");
            let sig = if run.interrupt() {
                run.interrupted
            } else {
                None
            };
            for (j, slot) in run.slots.iter_mut().enumerate() {
                if j != i && slot.open() {
                    match sig {
                        Some(sig) => slot.not_run(&interrupted_by(sig), Some(sig)),
                        None => slot.not_run(&why, None),
                    }
                }
            }
            return;
        }
    }
}

fn prepare(ctx: &mut Ctx<'_>, run: &mut Run<'_>) {
    for i in 0..run.slots.len() {
        if run.interrupt() {
            return;
        }
        if !run.slots[i].open() || run.stopped_before(i).is_some() {
            continue;
        }
        let changes: Vec<Change> = run.slots[i]
            .first()
            .into_iter()
            .flat_map(|c| c.changes.iter())
            .filter(|c| c.work.phase() == Phase::Prepare)
            .cloned()
            .collect();
        for change in changes {
            let start = Instant::now();
            let slot = &mut run.slots[i];
            run.changed_something = true;
            let label = format!("{PREPARE} {}", slot.id());
            let r = carry(ctx, slot, &change, &label);
            slot.account(start);
            if let Err(e) = r {
                // Refused before it changed anything (a swap that would erase a package the
                // profile does not name): invalid input, as a check's refusal is.
                if gpuhost_host::error::is_invalid(&e) {
                    run.invalid_input = true;
                }
                slot.fail(e);
                run.failed(i);
                break;
            }
        }
    }
}

/// Phase 2: one dnf transaction for every open step's package work of one batch (all merged, or
/// the packages that bring a repo first, then the rest).
fn transact(ctx: &mut Ctx<'_>, run: &mut Run<'_>, batch: Batch) {
    let members = members_of(run, batch.brings_repo());
    if members.is_empty() {
        return;
    }
    let start = Instant::now();
    let installs: Vec<&Install> = members
        .iter()
        .filter_map(|(_, c)| match &c.work {
            Work::Install(i) => Some(i),
            _ => None,
        })
        .collect();
    let mut ids: Vec<usize> = members.iter().map(|(i, _)| *i).collect();
    ids.dedup();
    let label = label_of(run, &ids);
    let what: Vec<String> = members.iter().map(|(_, c)| c.work.summary()).collect();
    gpuhost_host::progress::step_changing(&label, &what.join("; "));
    run.changed_something = true;
    // The rpm database and dnf's module state before: a failed transaction is reported as what
    // it left ([`Before::compare`]).
    let before = Before::read(ctx);
    let result = (|| -> Result<Option<DnfFailure>> {
        for o in installs.iter().filter_map(|i| i.owes.as_ref()) {
            ctx.owe(o)?;
        }
        let which = if batch == Batch::Rest {
            "second"
        } else {
            "first"
        };
        failpoint(&format!("transaction-{which}:before"));
        let (cmd, out) = ctx.transaction(&installs, batch)?;
        failpoint(&format!("transaction-{which}:after"));
        Ok((!out.success()).then(|| DnfFailure::new(cmd, out)))
    })();
    ctx.invalidate_rpm();
    let records = cmd::take_records();
    let elapsed = start.elapsed();
    for i in &ids {
        let slot = &mut run.slots[*i];
        slot.commands.extend(records.iter().cloned());
        slot.elapsed += elapsed;
    }
    match result {
        Ok(None) => {
            for (i, c) in members {
                run.slots[i].carried(c);
            }
        }
        Ok(Some(mut failure)) => {
            let left = before.compare(ctx, &mut failure);
            dnf_failed(ctx, run, &members, &ids, &failure, left.as_ref());
        }
        Err(e) if gpuhost_host::interrupt::is_interrupted(&e) => {
            for i in &ids {
                run.slots[*i].not_run(&format!("{e:#}"), gpuhost_host::interrupt::received());
            }
        }
        Err(e) => {
            // Bad input found by the transaction before it changed anything (a key the
            // package's repo may not name) is the run's exit 2, as a check's refusal is.
            if gpuhost_host::error::is_invalid(&e) {
                run.invalid_input = true;
            }
            for i in &ids {
                run.slots[*i].fail(gpuhost_host::error::duplicate(&e));
            }
            if let Some(first) = ids.first() {
                run.failed(*first);
            }
        }
    }
}

/// Once the package transactions have run: the built-by records pinned to the transactions
/// that installed their packages and pruned of what is gone
/// ([`gpuhost_steps::driver::settle_built_by`]). A failure is a warning: the record then names
/// nothing the rpm database agrees with, and nothing it names is removed.
fn settle_records(ctx: &Ctx<'_>, run: &Run<'_>, run_start: u64) {
    if !run.changed_something {
        return;
    }
    if let Err(e) = gpuhost_steps::driver::settle_built_by(ctx.host, run_start) {
        tracing::warn!("could not settle gpuhost's records of what it installed to build: {e:#}");
    }
    // Its rpm queries are the run's bookkeeping, no step's.
    drop(cmd::take_records());
}

/// The package transactions, as [`Batch::plan`] decides them once for the run's package work:
/// a first converge (NVIDIA's local repo package and the rest) is one; otherwise the package
/// that brings a repo goes first.
fn transactions(ctx: &mut Ctx<'_>, run: &mut Run<'_>) {
    let all: Vec<Install> = members_of(run, None)
        .into_iter()
        .filter_map(|(_, c)| match c.work {
            Work::Install(i) => Some(i),
            _ => None,
        })
        .collect();
    for batch in Batch::plan(&all.iter().collect::<Vec<_>>()) {
        if !run.interrupt() {
            transact(ctx, run, *batch);
        }
    }
}

/// The package work of one kind (the packages that bring a repo, or the rest; `None`: all) of
/// every open step: (slot index, change).
fn members_of(run: &Run<'_>, brings_repo: Option<bool>) -> Vec<(usize, Change)> {
    let mut members = Vec::new();
    for (i, slot) in run.slots.iter().enumerate() {
        if !slot.open() || run.stopped_before(i).is_some() {
            continue;
        }
        for c in slot.first().into_iter().flat_map(|c| c.changes.iter()) {
            if let Work::Install(inst) = &c.work {
                if brings_repo.is_none_or(|b| inst.brings_repo == b) {
                    members.push((i, c.clone()));
                }
            }
        }
    }
    members
}

/// Progress lines of phase 1 and 2 name the phase, not a step's number: they carry out work of
/// later steps before earlier ones (a repo file before the transaction that reads it), and
/// the numbered lines (`[n/N] step`, phase 3) come in step order.
const PREPARE: &str = "[prepare]";
const TRANSACTION: &str = "[dnf]";

/// The progress label of a transaction: `[dnf] a + b`, the steps it serves.
fn label_of(run: &Run<'_>, ids: &[usize]) -> String {
    let ids: Vec<&str> = ids.iter().map(|i| run.slots[*i].id()).collect();
    format!("{TRANSACTION} {}", ids.join(" + "))
}

/// dnf refused the transaction: the steps it names fail (each explains, from dnf's output);
/// the others of the transaction, and those whose packages were to come later, do not run.
/// When it names none of its members but a repo another open step's packages come from (a
/// `docker.repo` that cannot be read fails every transaction, the first one included), that
/// step fails with its own explanation. Every step after the transaction's first member does
/// not run: the failed transaction's packages were what they would have worked on.
/// The rpm database and dnf's module state before a transaction, to say what a failed one
/// left.
struct Before {
    rpmdb: Option<std::collections::BTreeSet<String>>,
    modules: Option<std::collections::BTreeMap<String, String>>,
}

impl Before {
    fn read(ctx: &Ctx<'_>) -> Before {
        Before {
            rpmdb: gpuhost_host::rpm::snapshot(ctx.host).ok(),
            modules: gpuhost_host::rpm::module_states(ctx.host).ok(),
        }
    }

    /// What the failed transaction left: the rpm database's difference (`Some` when it left
    /// packages); `failure` learns whether nothing changed at all, and which modules' state
    /// dnf changed.
    fn compare(&self, ctx: &Ctx<'_>, failure: &mut DnfFailure) -> Option<gpuhost_host::rpm::Diff> {
        let diff = match (&self.rpmdb, gpuhost_host::rpm::snapshot(ctx.host).ok()) {
            (Some(b), Some(a)) => Some(gpuhost_host::rpm::Diff::of(b, &a)),
            _ => None,
        };
        let modules = match (
            &self.modules,
            gpuhost_host::rpm::module_states(ctx.host).ok(),
        ) {
            (Some(b), Some(a)) => Some(gpuhost_host::rpm::modules_changed(b, &a)),
            _ => None,
        };
        failure.modules_changed = modules.clone().unwrap_or_default();
        failure.unchanged = diff.as_ref().is_some_and(|d| d.is_empty())
            && modules.as_ref().is_some_and(Vec::is_empty);
        diff.filter(|d| !d.is_empty())
    }
}

/// A step's error for a transaction that left part of it in the rpm database: what rpm shows,
/// never that nothing changed.
fn partial_error(e: anyhow::Error, diff: gpuhost_host::rpm::Diff) -> anyhow::Error {
    anyhow::Error::new(gpuhost_host::rpm::Partial {
        cause: format!("{e:#}"),
        diff,
        repair: "run the same gpuhost apply again: it finishes what the transaction left"
            .to_string(),
    })
}

fn dnf_failed(
    ctx: &mut Ctx<'_>,
    run: &mut Run<'_>,
    members: &[(usize, Change)],
    ids: &[usize],
    failure: &DnfFailure,
    left: Option<&gpuhost_host::rpm::Diff>,
) {
    let text = failure.text();
    let implicated = |c: &Change| matches!(&c.work, Work::Install(inst) if gpuhost_steps::work::implicated(&text, inst));
    let mut blamed: Vec<(usize, Change)> = members
        .iter()
        .filter(|(_, c)| implicated(c))
        .cloned()
        .collect();
    if blamed.is_empty() {
        // dnf named none of them: a repo of another step's, else the transaction as a whole.
        blamed = members_of(run, Some(false))
            .into_iter()
            .filter(|(i, c)| !ids.contains(i) && implicated(c))
            .collect();
    }
    if blamed.is_empty() {
        blamed = members.to_vec();
    }
    let mut named: Vec<usize> = blamed.iter().map(|(i, _)| *i).collect();
    named.dedup();
    for (i, c) in &blamed {
        let Work::Install(inst) = &c.work else {
            continue;
        };
        let start = Instant::now();
        let mut e = run.slots[*i].step.explain(ctx, inst, failure);
        if let Some(diff) = left {
            // Part of it is in: say what rpm shows, never that nothing changed.
            e = partial_error(e, diff.clone());
        }
        if gpuhost_host::error::is_invalid(&e) {
            // dnf refused what the profile asks before changing anything: exit 2.
            run.invalid_input = true;
        }
        let slot = &mut run.slots[*i];
        if !slot.reported() {
            slot.fail(e);
        }
        slot.account(start);
    }
    let names: Vec<&str> = named.iter().map(|i| run.slots[*i].id()).collect();
    let why = format!("the package transaction failed on {}", names.join(", "));
    for i in ids.iter().filter(|i| !named.contains(i)) {
        run.slots[*i].not_run(&why, None);
    }
    // Steps whose packages were to come in a later transaction do not run either.
    for slot in run.slots.iter_mut() {
        if slot.first().is_some_and(Check::installs) {
            slot.not_run(&why, None);
        }
    }
    if let (Some(first), Some(&culprit)) = (ids.iter().chain(&named).min(), named.first()) {
        let id = run.slots[culprit].id().to_string();
        run.stop_at(*first, id);
    }
}

/// Phase 3, for one step: check again against the host the transactions left, carry out what
/// is still left, check once more.
fn finish(ctx: &mut Ctx<'_>, run: &mut Run<'_>, i: usize) {
    if !run.slots[i].open() {
        return;
    }
    if let Some(why) = run.stopped_before(i) {
        let sig = run.interrupted;
        run.slots[i].not_run(&why, sig);
        return;
    }
    let start = Instant::now();
    let had_changes = run.slots[i].first().is_some_and(|c| !c.changes.is_empty());
    let slot = &mut run.slots[i];
    let step = slot.step;
    // A step nothing touched, on a host nothing changed, stands by its first check.
    let again = if had_changes || run.changed_something {
        match step.check(ctx) {
            Ok(c) => c,
            Err(e) => {
                slot.fail(e.context("could not check"));
                slot.account(start);
                run.failed(i);
                return;
            }
        }
    } else {
        slot.first().cloned().unwrap_or_default()
    };
    let mut left = again.changes.clone();
    left.sort_by_key(|c| c.work.phase());
    let mut last = again;
    if !left.is_empty() {
        run.changed_something = true;
        for change in &left {
            let label = slot.label.clone();
            if let Err(e) = carry(ctx, slot, change, &label) {
                if gpuhost_host::error::is_invalid(&e) {
                    // dnf refused what the profile asks before changing anything: exit 2.
                    run.invalid_input = true;
                }
                slot.fail(e);
                slot.account(start);
                run.failed(i);
                return;
            }
        }
        last = match step.check(ctx) {
            Ok(c) => c,
            Err(e) => {
                slot.fail(e.context("could not check again after the change"));
                slot.account(start);
                run.failed(i);
                return;
            }
        };
        if !last.changes.is_empty() {
            let still: Vec<String> = last.changes.iter().map(ToString::to_string).collect();
            slot.fail(anyhow!(
                "the host still differs after the change: {}",
                still.join("; ")
            ));
            slot.account(start);
            run.failed(i);
            return;
        }
    }
    let mut notes = last.notes.clone();
    let probed = step.probe(ctx).and_then(|p| {
        for key in &last.settles {
            ctx.state.settle(ctx.host, key)?;
        }
        Ok(p)
    });
    match probed {
        Ok(p) => notes.extend(p),
        Err(e) => {
            slot.fail(e);
            slot.account(start);
            run.failed(i);
            return;
        }
    }
    let mut r = StepReport::new(step.id(), Outcome::Unchanged, String::new());
    r.deferred = last.deferred.clone();
    r.reboot_required = last.reboot.clone();
    if slot.done().is_empty() {
        r.outcome = if last.deferred.is_empty() {
            Outcome::Unchanged
        } else {
            Outcome::Deferred
        };
        r.reason = summarize(&notes, &last.deferred, last.reboot.as_deref());
    } else {
        r.outcome = Outcome::Changed;
        r.changes = slot.done().iter().map(ToString::to_string).collect();
        r.lines = lines_of(slot.done());
        if r.reboot_required.is_none() {
            r.reboot_required = slot.first().and_then(|c| c.reboot.clone());
        }
        if !last.deferred.is_empty() {
            let deferred = format!("deferred: {}", last.deferred.join("; "));
            r.lines.push(ChangeLine {
                short: deferred.clone(),
                work: deferred,
                why: String::new(),
                details: Vec::new(),
            });
        }
        r.reason = joined(&r.lines);
    }
    slot.account(start);
    tracing::info!(step = step.id(), outcome = %r.outcome, "{}", r.reason);
    // Progress lines only for steps that changed something: a converged run is quiet.
    if !slot.done().is_empty() {
        gpuhost_host::progress::step_done(&slot.label, &r.outcome.to_string(), slot.elapsed);
    }
    slot.report(r);
}

/// A failure point for crash tests: when `GPUHOST_FAILPOINT` names this point, the process
/// aborts right here, as a kill would stop it (no cleanup, no report). Only in builds with the
/// `failpoints` feature (the test builds); a release binary ignores the variable.
#[cfg(feature = "failpoints")]
pub(crate) fn failpoint(name: &str) {
    if std::env::var("GPUHOST_FAILPOINT").is_ok_and(|v| v == name) {
        eprintln!("gpuhost: failpoint {name}: aborting");
        std::process::abort();
    }
}

#[cfg(not(feature = "failpoints"))]
pub(crate) fn failpoint(_name: &str) {}

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

/// Every step reported as not run because a signal came before the first one ran (during the
/// checks before any change): the report and the journal still say where the run stopped.
pub fn not_run_before_start(steps: &[&dyn Step], sig: i32) -> Vec<StepReport> {
    steps
        .iter()
        .map(|step| {
            let mut r = StepReport::new(
                step.id(),
                Outcome::Skipped,
                format!("not run: {}", interrupted_by(sig)),
            );
            r.interrupted_by = Some(sig);
            r
        })
        .collect()
}

/// Why a step did not run after a signal.
fn interrupted_by(sig: i32) -> String {
    format!("interrupted by {}", gpuhost_host::interrupt::name(sig))
}
