//! What a run of `apply` (or `plan`) says: its report, its exit code, and whether it converged.

use serde::{Deserialize, Serialize};

use crate::bootguard;
use crate::bundle;
use crate::reboot::RebootReport;
use crate::runner::{Outcome, StepReport};

/// Exit codes, part of the interface.
pub mod exit {
    /// Converged.
    pub const OK: i32 = 0;
    /// A step failed; the report says which, why and what to do.
    pub const FAILED: i32 = 1;
    /// Invalid input or unsupported host; nothing was changed.
    pub const INVALID: i32 = 2;
    /// Converged except that a reboot is required.
    pub const REBOOT: i32 = 3;
    /// A reboot is required and Slurm was asked for it (`reboot.via = "slurm"`): it reboots the
    /// node once its jobs have ended.
    pub const REBOOT_SCHEDULED: i32 = 4;
}

/// The command a report is of. Every run the journal keeps is an apply (`plan` is not
/// journaled; `resume`, `rollback` and `kernel-added` run an apply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Command {
    #[default]
    Apply,
    Plan,
}

impl Command {
    /// `plan` for a dry run, else `apply`.
    pub fn of(dry_run: bool) -> Command {
        if dry_run {
            Command::Plan
        } else {
            Command::Apply
        }
    }
}

/// What an `apply` or `plan` run says (stdout with `--format json`, and the journal). Read
/// back from the journal of earlier versions too: what they may lack has a default, but not
/// what a rollback decides by (the command, a dry run, the exit code): a record without those
/// is not a run gpuhost wrote.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    #[serde(default)]
    pub gpuhost_version: String,
    /// The driver this run manages: its local repo package and version (what `gpuhost
    /// rollback` goes back to, from the journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<crate::recorded::DriverRecord>,
    pub command: Command,
    #[serde(default)]
    pub profile: String,
    #[serde(default)]
    pub root: String,
    #[serde(default)]
    pub live: bool,
    pub dry_run: bool,
    #[serde(default)]
    pub target_kernel: Option<String>,
    #[serde(default)]
    pub started_at: String,
    #[serde(default)]
    pub duration_ms: u64,
    pub exit_code: i32,
    /// Why a reboot is required, when one is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reboot_required: Vec<String>,
    /// What gpuhost did about a reboot (`--reboot`, resume chains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot: Option<RebootReport>,
    /// `interrupted at step X by SIGTERM`: a signal stopped the run (exit 128 + the signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// The run in one line: the verdict, steps per outcome, deferred actions and warnings
    /// counted (the text report's last line says the same).
    #[serde(default)]
    pub summary: String,
    /// Every step's deferred actions, as `step: action`: what only a live run can do (in an
    /// install root, what its first boot owes).
    #[serde(default)]
    pub deferred: Vec<String>,
    /// What did not stop the run but deserves a look.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// False when the profile opts out of the NVIDIA driver (`driver.manage = false`).
    #[serde(default = "managed")]
    pub driver_managed: bool,
    /// The bundle the packages came from (`--bundle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<bundle::Info>,
    /// What the kernel guard did about the default boot entry ([`crate::bootguard`]); absent
    /// when it did not run (plan, `kernel.guard = false`, no driver in the profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_guard: Option<bootguard::Decision>,
    #[serde(default)]
    pub steps: Vec<StepReport>,
}

/// A run converged: not a plan, and exit 0, 3 or 4 ([`Report::converged`]). (When the kernel
/// trigger's record is written, an exit 4 is still the 3 it becomes once Slurm is asked.)
pub(crate) fn converged(dry_run: bool, exit_code: i32) -> bool {
    !dry_run && matches!(exit_code, exit::OK | exit::REBOOT | exit::REBOOT_SCHEDULED)
}

/// A report of an earlier version, which had no `driver_managed`, managed the driver.
fn managed() -> bool {
    true
}

impl Report {
    /// The run converged (exit 0; 3: converged but a reboot is required; 4: converged, and
    /// Slurm reboots the node) and changed the host (not a plan): what a rollback goes back to.
    pub fn converged(&self) -> bool {
        converged(self.dry_run, self.exit_code)
    }

    /// The summary line: `converged — steps: 2 changed, 10 unchanged, 3 skipped; 1 deferred
    /// action; 0 warnings`.
    pub fn summarize(&self) -> String {
        let count = |o: Outcome| self.steps.iter().filter(|s| s.outcome == o).count();
        let verdict = match self.exit_code {
            exit::OK if self.dry_run && count(Outcome::WouldChange) > 0 => "plan".to_string(),
            exit::OK if self.dry_run => "nothing to change".to_string(),
            exit::OK => "converged".to_string(),
            exit::REBOOT => "converged, but a reboot is required".to_string(),
            exit::REBOOT_SCHEDULED => {
                "converged, but a reboot is required: Slurm reboots the node".to_string()
            }
            _ => {
                let failed: Vec<&str> = self
                    .steps
                    .iter()
                    .filter(|s| s.outcome.is_failure())
                    .map(|s| s.id.as_str())
                    .collect();
                if let Some(why) = &self.interrupted {
                    why.clone()
                } else if failed.is_empty()
                    && self
                        .kernel_guard
                        .as_ref()
                        .is_some_and(bootguard::Decision::is_trouble)
                {
                    "failed: kernel guard".to_string()
                } else if failed.is_empty() {
                    "stopped".to_string()
                } else {
                    format!("failed: {}", failed.join(", "))
                }
            }
        };
        let outcomes = [
            Outcome::Changed,
            Outcome::WouldChange,
            Outcome::Unchanged,
            Outcome::Deferred,
            Outcome::Failed,
            Outcome::Partial,
            Outcome::Skipped,
        ];
        let steps: Vec<String> = outcomes
            .iter()
            .map(|o| (count(*o), o))
            .filter(|(n, _)| *n > 0)
            .map(|(n, o)| format!("{n} {o}"))
            .collect();
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut line = format!(
            "{verdict} — steps: {}; {}; {}",
            steps.join(", "),
            plural(self.deferred.len(), "deferred action", "deferred actions"),
            plural(self.warnings.len(), "warning", "warnings"),
        );
        if !self.driver_managed {
            line.push_str("; NVIDIA driver not managed (driver.manage = false)");
        }
        line
    }
}

/// One run as the journal keeps it: the report, and the command line that ran it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    #[serde(flatten)]
    pub report: Report,
    /// The command line, as the lock file records it.
    #[serde(default)]
    pub command_line: String,
}
