//! `gpuhost rollback`: back to the driver of the converged apply before the last one.
//!
//! Every apply records in the journal (`/var/lib/gpuhost/journal.json`, the last 20 runs) the
//! driver it managed: the local repo package and the driver version. A rollback finds the last
//! converged apply (exit 0 or 3) and, before it, the newest converged apply of another driver;
//! it repeats the last apply (`last-apply.json`: profile, `--set`s, step selection) with that
//! apply's local repo package, replacing the installed one. That is an ordinary driver change:
//! one dnf transaction, all or nothing (`gpuhost_steps::swap`). What each of those applies
//! installed is in dnf's history (`dnf history`); the package file must still be where the
//! journal says, or the rollback is refused before anything changes.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use gpuhost_host::host::Host;
use gpuhost_host::invalid;

use crate::reboot::ResumeArgs;

/// The driver of one apply, as the journal keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverRecord {
    /// `driver.local_repo_rpm`.
    pub local_repo_rpm: String,
    /// The driver version its file name gives.
    pub version: String,
}

/// Where a rollback goes, and the apply that takes it there.
#[derive(Clone, Debug)]
pub struct Rollback {
    pub from: DriverRecord,
    pub to: DriverRecord,
    /// The last apply's arguments, with the earlier local repo package replacing the current.
    pub args: ResumeArgs,
}

/// The converged applies of a journal (oldest first) that managed a driver.
fn converged(runs: &[serde_json::Value]) -> Vec<DriverRecord> {
    runs.iter()
        .filter(|r| r["command"] == "apply" && r["dry_run"] == false)
        .filter(|r| matches!(r["exit_code"].as_i64(), Some(0 | 3)))
        .filter_map(|r| serde_json::from_value(r["driver"].clone()).ok())
        .collect()
}

/// The rollback from the journal's runs (oldest first) and the last apply's arguments.
pub fn from_runs(runs: &[serde_json::Value], last: ResumeArgs) -> Result<Rollback> {
    let applies = converged(runs);
    let Some(from) = applies.last().cloned() else {
        return Err(invalid!(
            "the journal has no converged apply that managed a driver: there is nothing to roll back to"
        ));
    };
    let Some(to) = applies
        .iter()
        .rev()
        .find(|d| d.version != from.version)
        .cloned()
    else {
        return Err(invalid!(
            "the journal (the last 20 runs) has no converged apply of another driver than {}: there is nothing to roll back to",
            from.version
        ));
    };
    let mut args = last;
    args.sets
        .push(format!("driver.local_repo_rpm={}", to.local_repo_rpm));
    args.sets.push("driver.replace_local_repo=true".to_string());
    Ok(Rollback { from, to, args })
}

/// The rollback of this host: its journal and its last converged apply. Refused (exit 2)
/// before anything changes when there is none, or when the earlier package file is gone.
pub fn plan(host: &Host) -> Result<Rollback> {
    let runs = crate::journal::runs(host)?;
    let Some(last) = crate::bootguard::load_last_apply(host)? else {
        return Err(invalid!(
            "no converged apply is recorded ({}): there is nothing to roll back",
            crate::bootguard::LAST_APPLY_PATH
        ));
    };
    let r = from_runs(&runs, last)?;
    let path = std::path::Path::new(&r.to.local_repo_rpm);
    // The package file is the build host's own (like driver.local_repo_rpm in any apply).
    if !path.is_file() {
        return Err(invalid!(
            "driver {} came from {}, which is no longer there; copy NVIDIA's local repo package back to that path and run gpuhost rollback again",
            r.to.version,
            r.to.local_repo_rpm
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)] // a test fails by panicking

    use super::*;
    use serde_json::json;

    fn run(command: &str, exit: i64, drv: Option<&str>) -> serde_json::Value {
        let mut r = json!({"command": command, "dry_run": command == "plan", "exit_code": exit});
        if let Some(d) = drv {
            r["driver"] = json!({"local_repo_rpm": format!("/srv/{d}.rpm"), "version": d});
        }
        r
    }

    #[test]
    fn goes_back_to_the_last_converged_apply_of_another_driver() {
        let runs = vec![
            run("apply", 0, Some("535.104.05")),
            run("apply", 0, Some("550.54.15")),
            run("apply", 1, Some("570.124.06")),
            run("plan", 0, Some("580.82.07")),
            run("apply", 3, Some("580.82.07")),
            run("apply", 0, Some("580.82.07")),
        ];
        let r = from_runs(&runs, ResumeArgs::default()).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(r.from.version, "580.82.07");
        assert_eq!(r.to.version, "550.54.15");
        assert_eq!(
            r.args.sets,
            vec![
                "driver.local_repo_rpm=/srv/550.54.15.rpm",
                "driver.replace_local_repo=true"
            ]
        );
    }

    #[test]
    fn nothing_to_go_back_to_is_invalid_input() {
        let one = vec![
            run("apply", 0, Some("580.82.07")),
            run("apply", 0, Some("580.82.07")),
        ];
        let e = from_runs(&one, ResumeArgs::default()).err();
        assert!(e.is_some_and(|e| gpuhost_host::error::is_invalid(&e)));
        let none = vec![run("apply", 0, None)];
        assert!(from_runs(&none, ResumeArgs::default()).is_err());
    }
}
