//! The API a step sees: the [`Step`] trait, what a check returns ([`Check`]), what a step may
//! look at and act through ([`Ctx`]), which steps run ([`Selection`]) and a failed dnf command
//! ([`DnfFailure`]). The engine (`gpuhost-engine`'s runner) drives steps through this API only;
//! nothing here knows the engine.

use std::cell::RefCell;
use std::collections::BTreeMap;

use anyhow::Result;

use gpuhost_host::cmd::{Cmd, CmdOutput};
use gpuhost_host::error::hinted;
use gpuhost_host::facts::Facts;
use gpuhost_host::host::Host;
use gpuhost_host::rpm::{self, Installed};
use gpuhost_profile::Profile;

use crate::run::transition::Transition;
use crate::state::State;
use crate::transaction::Batch;
pub use crate::work::{Change, FileWrite, Install, Owed, Phase, Work};

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
    /// Owed actions (state keys) this check hands over to the first boot of an install root:
    /// reported as deferred, and cleared by `apply` once the step is otherwise converged.
    pub settles: Vec<&'static str>,
}

impl Check {
    pub(crate) fn in_sync(note: impl Into<String>) -> Check {
        Check {
            notes: vec![note.into()],
            ..Check::default()
        }
    }

    /// True when a change installs packages.
    pub fn installs(&self) -> bool {
        self.changes
            .iter()
            .any(|c| matches!(c.work, Work::Install(_)))
    }

    /// True when a change brings packages in: an install, or the driver swap's one transaction
    /// (what the space check before the first change must make room for).
    pub fn brings_packages(&self) -> bool {
        self.changes
            .iter()
            .any(|c| matches!(c.work, Work::Install(_) | Work::SwapDriver(_)))
    }
}

/// Everything a step may look at (and, in `apply`, act through).
pub struct Ctx<'a> {
    pub host: &'a Host,
    pub profile: &'a Profile,
    pub facts: &'a Facts,
    /// The driver this run manages (none when the profile names no local repo package).
    pub driver: Option<crate::run::DriverPlan>,
    pub state: State,
    /// The run carries out its plan (`apply`, not `plan`): the package files it installs by
    /// path are read whole once, after every check and the space check and before the first
    /// change ([`crate::transaction::ready`]), not also by the check.
    pub reads_ahead: bool,
    rpm_cache: RefCell<BTreeMap<String, Vec<Installed>>>,
    /// The driver transition decided on the last look at the host (forgotten when it changes).
    transition: RefCell<Option<Transition>>,
    /// How the one refresh of the repos' metadata in this run went ([`Ctx::refresh_metadata`]):
    /// `None` until it was made.
    metadata: RefCell<Option<std::result::Result<(), String>>>,
}

impl<'a> Ctx<'a> {
    /// `driver`: the run's driver, resolved once in apply's preparation
    /// ([`crate::run::resolve`]).
    pub fn new(
        host: &'a Host,
        profile: &'a Profile,
        facts: &'a Facts,
        driver: Option<crate::run::DriverPlan>,
    ) -> Result<Self> {
        Ok(Ctx {
            host,
            profile,
            facts,
            driver,
            state: State::load(host)?,
            reads_ahead: false,
            rpm_cache: RefCell::new(BTreeMap::new()),
            transition: RefCell::new(None),
            metadata: RefCell::new(None),
        })
    }

    /// Installed packages of these names (cached: names already asked cost nothing; the rest
    /// cost one `rpm -q`).
    pub fn installed(&self, names: &[&str]) -> Result<BTreeMap<String, Vec<Installed>>> {
        let missing: Vec<&str> = {
            let cache = self.rpm_cache.borrow();
            names
                .iter()
                .copied()
                .filter(|n| !cache.contains_key(*n))
                .collect()
        };
        if !missing.is_empty() {
            let found = rpm::query(self.host, &missing)?;
            self.rpm_cache.borrow_mut().extend(found);
        }
        let cache = self.rpm_cache.borrow();
        Ok(names
            .iter()
            .map(|n| (n.to_string(), cache.get(*n).cloned().unwrap_or_default()))
            .collect())
    }

    /// Installed versions of one package.
    pub(crate) fn installed_one(&self, name: &str) -> Result<Vec<Installed>> {
        Ok(self.installed(&[name])?.remove(name).unwrap_or_default())
    }

    /// Forget cached rpm answers (after a transaction), and the driver transition read from them.
    pub fn invalidate_rpm(&self) {
        self.rpm_cache.borrow_mut().clear();
        self.forget_transition();
    }

    /// Forget the driver transition (after any change: module state and repo files count too).
    pub fn forget_transition(&self) {
        self.transition.borrow_mut().take();
    }

    /// The driver transition of this look at the host: `decide`d on the first ask, kept until
    /// the host changes.
    pub(crate) fn transition_or(
        &self,
        decide: impl FnOnce(&Self) -> Result<Transition>,
    ) -> Result<Transition> {
        if let Some(t) = self.transition.borrow().as_ref() {
            return Ok(t.clone());
        }
        let t = decide(self)?;
        *self.transition.borrow_mut() = Some(t.clone());
        Ok(t)
    }

    /// Refresh the enabled repos' metadata (`dnf makecache --refresh`), once in this run. dnf
    /// answers from the metadata it cached in the root, which it keeps for `metadata_expire`
    /// (48 h by default): a mirror that has received a package since (the headers of a new
    /// kernel) is not seen without this. Asked before anything is reported as in no enabled
    /// repo. True when this call refreshed it (an answer from the old metadata is worth asking
    /// again); false when it was refreshed already in this run, when it could not be (kept for
    /// the message, [`Ctx::not_in_repos`]), or with a bundle (whose metadata dnf never keeps).
    pub(crate) fn refresh_metadata(&self) -> bool {
        if self.host.bundle().is_some() || self.metadata.borrow().is_some() {
            return false;
        }
        let done = self
            .host
            .dnf()
            .and_then(|c| c.args(["makecache", "--refresh"]).run())
            .map(|_| ())
            .map_err(|e| refresh_failure(&e));
        let fresh = done.is_ok();
        *self.metadata.borrow_mut() = Some(done);
        fresh
    }

    /// One dnf transaction for these parts, carried as `batch` says ([`Batch::plan`] decides
    /// it for the run): a first converge merged into one ([`crate::transaction::ahead`]),
    /// otherwise [`crate::work::transaction`]. When dnf found no package for an argument, made
    /// once more on metadata refreshed in this run ([`Ctx::refresh_metadata`]), so that what
    /// the mirror has now decides.
    pub fn transaction(&self, parts: &[&Install], batch: Batch) -> Result<(Cmd, CmdOutput)> {
        let once = || match batch {
            Batch::Merged => crate::transaction::ahead::transaction(self.host, parts),
            Batch::BringsRepo | Batch::Rest | Batch::Own => {
                crate::work::transaction(self.host, parts)
            }
        };
        let (cmd, out) = once()?;
        let failure = DnfFailure::new(cmd, out);
        if failure.out.success() || !failure.finds_nothing() || !self.refresh_metadata() {
            return Ok((failure.cmd, failure.out));
        }
        once()
    }

    /// The error for a package spec that no enabled repo carries (on metadata refreshed in this
    /// run, or saying that it could not be).
    pub(crate) fn not_in_repos(&self, spec: &str) -> anyhow::Error {
        let name = package_name_of(spec);
        let available = self.available_versions(name).unwrap_or_default();
        let listed = if available.is_empty() {
            format!("no version of {name} is available")
        } else {
            format!("available: {}", available.join(", "))
        };
        let stale = match &*self.metadata.borrow() {
            Some(Err(e)) => format!(
                "; the repos' metadata could not be refreshed ({e}), so this is dnf's cached answer"
            ),
            _ => String::new(),
        };
        hinted(
            format!("{spec} is not in any enabled repo ({listed}){stale}"),
            format!("enable the repo that carries {spec}, or boot a kernel whose packages are available"),
        )
    }

    /// `version-release.arch` of every available package of this name, oldest first, on
    /// metadata refreshed in this run ([`Ctx::refresh_metadata`]).
    pub(crate) fn available_versions(&self, name: &str) -> Result<Vec<String>> {
        self.refresh_metadata();
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

    /// Record an owed action durably; reasons accumulate until it is done.
    pub fn owe(&mut self, owed: &Owed) -> Result<()> {
        let reason = match self.state.pending.get(owed.key) {
            Some(r) if r.split("; ").any(|x| x == owed.reason) => r.clone(),
            Some(r) => format!("{r}; {}", owed.reason),
            None => owed.reason.clone(),
        };
        self.state.owe(self.host, owed.key, &reason)
    }
}

pub use gpuhost_host::rpm::package_name_of;

/// Why `dnf makecache --refresh` failed, in one line: dnf's `Error:` lines (which repo it could
/// not read), without the long command line; else the whole error.
fn refresh_failure(e: &anyhow::Error) -> String {
    let Some(f) = gpuhost_host::cmd::Failed::of(e) else {
        return format!("{e:#}");
    };
    let text = f.output();
    let errors: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("Error:"))
        .map(|l| l.trim_start_matches("Error:").trim())
        .collect();
    if errors.is_empty() {
        format!("{e:#}")
    } else {
        format!("dnf makecache --refresh: {}", errors.join("; "))
    }
}

/// A dnf command that failed, or that did less than it was asked (dnf's own lines say so:
/// [`gpuhost_host::dnfout`]), and what it left.
pub struct DnfFailure {
    pub cmd: Cmd,
    pub out: CmdOutput,
    /// The rpm database and dnf's module state are as they were before the command (compared
    /// by the runner; `false` until it has).
    pub unchanged: bool,
    /// Modules whose state dnf changed although the command failed (`nvidia-driver (stream …,
    /// profiles …)`).
    pub modules_changed: Vec<String>,
}

impl DnfFailure {
    /// A failure not yet compared with the host.
    pub fn new(cmd: Cmd, out: CmdOutput) -> DnfFailure {
        DnfFailure {
            cmd,
            out,
            unchanged: false,
            modules_changed: Vec::new(),
        }
    }

    /// Everything dnf printed.
    pub fn text(&self) -> String {
        format!("{}\n{}", self.out.stdout, self.out.stderr)
    }

    /// dnf's lines that say it did (or would do) less than asked.
    pub fn problems(&self) -> Vec<String> {
        gpuhost_host::dnfout::problems(&self.text())
    }

    /// The error, in dnf's words where it said why ([`DnfFailure::problems`]), and whether
    /// anything changed. The exit code follows where the fault lies: a request the repos cannot
    /// resolve (the profile asks for it, or the repos lack or conflict), with nothing changed, is
    /// invalid input (exit 2); the host's own dnf configuration refusing it (a protected
    /// package) and anything else is a failed step (exit 1). Otherwise the command and the tail
    /// of what it printed.
    pub fn error(&self) -> anyhow::Error {
        use gpuhost_host::dnfout::{fault, quoted, Fault};
        let problems = self.problems();
        if problems.is_empty() {
            return self.cmd.failure(&self.out);
        }
        let said = quoted(&problems, 8);
        let changed = if self.unchanged {
            "nothing was changed (the rpm database and dnf's module state are as they were)"
                .to_string()
        } else if !self.modules_changed.is_empty() {
            format!(
                "no package was installed or removed, but dnf changed its module state: {}",
                self.modules_changed.join(", ")
            )
        } else {
            "the rpm database shows what changed".to_string()
        };
        match fault(&problems) {
            Fault::Request if self.unchanged => gpuhost_host::error::as_invalid(hinted(
                format!("dnf cannot do what was asked: {said}; {changed}"),
                "change what the profile asks for (or the repos it names) so that dnf can resolve it: dnf's reason is quoted",
            )),
            Fault::Host => hinted(
                format!("dnf refused: {said}; {changed}"),
                "the host's dnf configuration (dnf.conf) refuses it: change that setting, or the profile",
            ),
            Fault::Request => hinted(
                format!("dnf did less than was asked: {said}; {changed}"),
                "run the same gpuhost apply again once what dnf says is fixed: it finishes what the transaction left",
            ),
            Fault::Other => self.cmd.failure(&self.out),
        }
    }

    /// True when dnf found no package (or module stream) for an argument: what metadata older
    /// than the mirror says of a package the mirror has received since.
    pub(crate) fn finds_nothing(&self) -> bool {
        let text = self.text();
        text.lines().any(|l| {
            l.contains("No match for argument")
                || l.contains("Unable to find a match")
                || (l.contains("Module or Group") && l.contains("is not available"))
        })
    }

    /// Specs dnf found no package for (not those it found and filtered out: dnf says so, and
    /// its words are the reason, [`DnfFailure::error`]).
    pub(crate) fn unmatched<'s>(&self, specs: &'s [String]) -> Vec<&'s str> {
        let text = self.text();
        let names = |l: &str, s: &str| l.split_whitespace().any(|w| w == s);
        specs
            .iter()
            .map(String::as_str)
            .filter(|s| {
                text.lines().any(|l| {
                    (l.contains("No match for argument") || l.contains("Unable to find a match"))
                        && names(l, s)
                }) && !text
                    .lines()
                    .any(|l| l.contains("filtered out") && names(l, s))
            })
            .collect()
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
    /// True for the driver steps: they need the profile's `driver.local_repo_rpm` unless the
    /// profile opts out of the driver (`driver.manage = false`).
    fn needs_driver_package(&self) -> bool {
        false
    }
    /// The free space this step's package installs need, and where; asked only when its check
    /// (`check`, the step's first) brings packages in (an install or the driver swap). The runner adds up every installing step's needs (a need two steps
    /// name — same path, same words — counts once) and refuses the run before any change when a
    /// filesystem lacks the space ([`gpuhost_host::hostinfo::require`]).
    fn space_needs(&self, _ctx: &Ctx<'_>, _check: &Check) -> Vec<gpuhost_host::hostinfo::Need> {
        Vec::new()
    }
    /// `Some(reason)` when the step has nothing to do on this host (e.g. no NVSwitch).
    fn not_applicable(&self, _ctx: &Ctx<'_>) -> Option<String> {
        None
    }
    /// Compare the host with the profile, changing nothing. An `Err` means the check itself
    /// could not be made, or the host is in a state the step must not change (it says why).
    fn check(&self, ctx: &Ctx<'_>) -> Result<Check>;
    /// Carry out one piece of work `check` decided. The default does exactly what the work
    /// says; a step overrides it only to judge the result more closely (a DKMS build).
    fn apply(&self, ctx: &mut Ctx<'_>, work: &Work) -> Result<()> {
        crate::work::carry_out(ctx.host, work)
    }
    /// The error for a dnf command that failed on this step's package work. The default names
    /// a spec no repo carries, with the versions the repos do have.
    fn explain(&self, ctx: &Ctx<'_>, install: &Install, failure: &DnfFailure) -> anyhow::Error {
        match failure.unmatched(&install.specs).first() {
            Some(spec) => ctx.not_in_repos(spec),
            None => failure.error(),
        }
    }
    /// Live probes `apply` runs once the step is converged (never `plan`): notes for the
    /// report, or an error that fails the step.
    fn probe(&self, _ctx: &Ctx<'_>) -> Result<Vec<String>> {
        Ok(Vec::new())
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
        if !self.only.is_empty() && self.only.iter().all(|id| self.skip.contains(id)) {
            return Err(gpuhost_host::invalid!(
                "--skip {} leaves nothing of --only {} to run; name the steps to run in --only",
                self.skip.join(","),
                self.only.join(",")
            ));
        }
        for id in self.only.iter().chain(&self.skip) {
            if !steps.iter().any(|s| s.id() == id) {
                let ids: Vec<&str> = steps.iter().map(|s| s.id()).collect();
                return Err(gpuhost_host::invalid!(
                    "unknown step `{id}`; steps are: {}",
                    ids.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// `Some(why)` when the step does not run (`--skip`, or not in `--only`).
    pub fn excludes(&self, id: &str) -> Option<&'static str> {
        if self.skip.iter().any(|s| s == id) {
            Some("skipped by --skip")
        } else if !self.only.is_empty() && !self.only.iter().any(|s| s == id) {
            Some("not selected by --only")
        } else {
            None
        }
    }
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

    fn failure(stdout: &str, stderr: &str) -> DnfFailure {
        DnfFailure {
            unchanged: false,
            modules_changed: Vec::new(),
            cmd: Cmd::new("dnf"),
            out: CmdOutput {
                code: Some(1),
                stdout: stdout.to_string(),
                stdout_bytes: Vec::new(),
                stderr: stderr.to_string(),
                duration: std::time::Duration::ZERO,
            },
        }
    }

    /// What dnf 4.14 printed (the test world's roots): a package no repo's metadata has, and a
    /// module stream none has, ask for fresh metadata; a conflict does not.
    #[rstest]
    #[case(
        "No match for argument: kernel-uek-devel-5.15.0-204.147.6.2.el8uek.x86_64\nError: Unable to find a match: kernel-uek-devel-5.15.0-204.147.6.2.el8uek.x86_64",
        true
    )]
    #[case(
        "Error: Problem: Module or Group 'nvidia-driver:550-dkms' is not available.",
        true
    )]
    #[case(
        "Error: Transaction test error:\n  file /usr/lib64/libnvidia-nscq.so.2.0 conflicts between attempted installs",
        false
    )]
    fn only_an_argument_dnf_found_nothing_for_asks_for_fresh_metadata(
        #[case] stderr: &str,
        #[case] nothing: bool,
    ) {
        assert_eq!(failure("", stderr).finds_nothing(), nothing);
    }

    #[test]
    fn a_failed_refresh_is_said_by_dnfs_error_lines() {
        let f = gpuhost_host::cmd::Failed {
            command: "dnf -y --quiet --installroot=/r --setopt=a.baseurl=file:///r/a makecache --refresh".into(),
            code: Some(1),
            stdout: String::new(),
            stderr: "Errors during downloading metadata for repository 'cuda-rhel8-network':\n  - Curl error (37): Couldn't read a file:// file\nError: Failed to download metadata for repo 'cuda-rhel8-network': Cannot download repomd.xml\n".into(),
        };
        assert_eq!(
            refresh_failure(&anyhow::Error::new(f)),
            "dnf makecache --refresh: Failed to download metadata for repo 'cuda-rhel8-network': Cannot download repomd.xml"
        );
        assert_eq!(refresh_failure(&anyhow::anyhow!("no dnf")), "no dnf");
    }
}
