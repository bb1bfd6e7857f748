//! `gpuhost rollback`: back to the driver of the converged apply before the last one.
//!
//! Every apply that managed the driver records in the journal (`/var/lib/gpuhost/journal.json`,
//! the last 20 runs) the driver it managed: the local repo package, the driver version and the
//! `driver.sha256` it was checked against. An apply limited to some steps (`--only docker`,
//! `--skip driver-repo`) did not manage the driver and records none. A rollback finds the last
//! converged apply (exit 0, 3 or 4) that managed a driver and, before it, the newest converged
//! apply of another driver; it repeats the last apply (`last-apply.json`: profile, `--set`s,
//! step selection) with that apply's local repo package and checksum, replacing the installed
//! one, and with every driver step selected, whatever the last apply selected. That is an
//! ordinary driver change: one dnf transaction, all or nothing (`gpuhost_steps::transaction::swap`). What
//! each of those applies installed is in dnf's history (`dnf history`); the package file must
//! still be where the journal says, under its driver's name, or the rollback is refused before
//! anything changes — unless gpuhost's driver cache (`driver.keep_local_repo = false`,
//! `gpuhost_steps::transaction::cache`) keeps the set read from that file, which the swap then
//! takes.

use anyhow::Result;

use gpuhost_host::host::Host;
use gpuhost_host::invalid;
use gpuhost_steps::step::Selection;

use crate::recorded::{DriverRecord, ResumeArgs};
use crate::report::{Command, RunRecord};

/// The driver record of an apply with this step `selection`: none unless every step that
/// needs the driver package was selected (a step-limited apply did not manage the driver).
/// `bundle`: the run's bundle (as given, and the folder it was verified in) when its driver set
/// stood in for the package; else a rollback's own record, whose bundle it keeps.
pub(crate) fn record(
    selection: &Selection,
    plan: Option<&gpuhost_steps::run::DriverPlan>,
    sha256: Option<&str>,
    (bundle, pinned): (Option<(&str, &std::path::Path)>, Option<&DriverRecord>),
) -> Option<DriverRecord> {
    let all = gpuhost_steps::steps_needing_package(&Selection::default());
    let selected = gpuhost_steps::steps_needing_package(selection);
    let plan = plan.filter(|_| selected.len() == all.len())?;
    let local_repo_rpm = plan.path.display().to_string();
    let bundle = match bundle {
        Some((given, dir)) if plan.path.starts_with(dir) => Some(given.to_string()),
        _ => pinned
            .filter(|d| d.local_repo_rpm == local_repo_rpm)
            .and_then(|d| d.bundle.clone()),
    };
    Some(DriverRecord {
        local_repo_rpm,
        version: plan.repo.driver.clone(),
        sha256: sha256.map(str::to_string),
        bundle,
    })
}

/// Where a rollback goes, and the apply that takes it there.
#[derive(Clone, Debug)]
pub struct Rollback {
    pub from: DriverRecord,
    pub to: DriverRecord,
    /// The last apply's arguments, with the earlier local repo package (and its checksum)
    /// replacing the current, and every driver step selected.
    pub args: ResumeArgs,
}

/// The converged applies of a journal (oldest first) that managed a driver.
fn converged(runs: &[RunRecord]) -> Vec<DriverRecord> {
    runs.iter()
        .map(|r| &r.report)
        .filter(|r| r.command == Command::Apply && r.converged())
        .filter_map(|r| r.driver.clone())
        .collect()
}

/// The rollback from the journal's runs (oldest first) and the last apply's arguments.
pub fn from_runs(runs: &[RunRecord], last: ResumeArgs) -> Result<Rollback> {
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
    named_for(&to)?;
    Ok(Rollback {
        args: rollback_args(last, &to),
        from,
        to,
    })
}

/// The record's file must be its driver's package by name (the content is checked by the
/// apply, against the name and the recorded checksum): another version's package would
/// install, or keep, another driver than the rollback says.
fn named_for(to: &DriverRecord) -> Result<()> {
    let file = std::path::Path::new(&to.local_repo_rpm);
    let named = file
        .file_name()
        .and_then(|n| gpuhost_nvidia::localrepo::LocalRepoFile::parse(&n.to_string_lossy()))
        .map(|f| f.driver);
    if named.as_deref() == Some(to.version.as_str()) {
        return Ok(());
    }
    Err(invalid!(
        "the journal says driver {} came from {}, but that is {}; nothing was changed: run gpuhost apply with driver.local_repo_rpm set to NVIDIA's {} package",
        to.version,
        to.local_repo_rpm,
        named.map_or_else(
            || "no NVIDIA local repo package name".to_string(),
            |d| format!("the package of driver {d}")
        ),
        to.version
    ))
}

/// The last apply's arguments for going to `to`: the driver pinned to `to` (its local repo
/// package replacing the installed one, checked against its own checksum, or none), and every
/// step that needs the driver package selected (taken out of `--skip`, added to `--only`).
fn rollback_args(last: ResumeArgs, to: &DriverRecord) -> ResumeArgs {
    let mut args = last;
    args.driver = Some(to.clone());
    let driver_steps = gpuhost_steps::steps_needing_package(&Selection::default());
    args.skip.retain(|s| !driver_steps.contains(&s.as_str()));
    if !args.only.is_empty() {
        for id in driver_steps {
            if !args.only.iter().any(|o| o == id) {
                args.only.push(id.to_string());
            }
        }
    }
    args
}

/// The rollback of this host: its journal and its last converged apply. Refused (exit 2)
/// before anything changes when there is none, or when the earlier package file is gone.
pub fn plan(host: &Host) -> Result<Rollback> {
    // The journal decides which driver is installed next: it is trusted only as root's.
    for path in [
        STATE_DIR,
        crate::journal::JOURNAL_PATH,
        crate::bootguard::LAST_APPLY_PATH,
    ] {
        trusted(host, path)?;
    }
    let runs = crate::journal::runs(host)?;
    let Some(last) = crate::bootguard::load_last_apply(host)? else {
        return Err(invalid!(
            "no converged apply is recorded ({}): there is nothing to roll back",
            crate::bootguard::LAST_APPLY_PATH
        ));
    };
    let mut r = from_runs(&runs, last)?;
    // "From" is what rpm says is installed now, not what the journal remembers.
    r.from.version = installed_driver(host)?.unwrap_or(r.from.version);
    let path = std::path::Path::new(&r.to.local_repo_rpm);
    // The package file is the build host's own (like driver.local_repo_rpm in any apply);
    // with driver.keep_local_repo = false (or from a bundle), gpuhost's cache keeps the set
    // before the current one, read from that file (on the bundle's build host) and checked
    // then: the file is not needed again. The set is the file's when it carries that driver
    // and was read from a file of that name.
    let cached = gpuhost_steps::transaction::cache::all(host)
        .into_iter()
        .any(|(_, c)| c.driver == r.to.version && same_file_name(&c.source, &r.to.local_repo_rpm));
    if !path.is_file() && !cached {
        return Err(match &r.to.bundle {
            // The bundle's name for the package is no path to copy anything to.
            Some(b) => invalid!(
                "driver {} came from bundle {b}, and gpuhost's cache no longer keeps its driver set; nothing was changed: apply a bundle of driver {} again (gpuhost apply --bundle {b}), or apply with driver.local_repo_rpm set to NVIDIA's {} package",
                r.to.version,
                r.to.version,
                file_name(&r.to.local_repo_rpm)
            ),
            None => invalid!(
                "driver {} came from {}, which is no longer there; copy NVIDIA's local repo package back to that path and run gpuhost rollback again",
                r.to.version,
                r.to.local_repo_rpm
            ),
        });
    }
    Ok(r)
}

/// The file name of a path as the journal or the cache keeps it.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Two paths name files of the same name (NVIDIA's names say the package, version and driver).
fn same_file_name(a: &str, b: &str) -> bool {
    file_name(a) == file_name(b)
}

use gpuhost_host::trust::STATE_DIR;

/// `path` (in the root) as rollback trusts it ([`gpuhost_host::trust`]: not a link, owned by
/// root, writable by no one else). Bad input otherwise (exit 2), naming the path and its owner
/// or mode. A path that is not there is left to the reader (nothing to roll back).
fn trusted(host: &Host, path: &str) -> Result<()> {
    gpuhost_host::trust::require(host, path, "rollback trusts only root's journal")
}

/// The driver version rpm says is installed (`nvidia-kmod-common`'s, the newest), if any.
fn installed_driver(host: &Host) -> Result<Option<String>> {
    let kc = gpuhost_nvidia::packages::KMOD_COMMON;
    let found = gpuhost_host::rpm::query(host, &[kc])?;
    Ok(found
        .get(kc)
        .and_then(|v| {
            v.iter()
                .max_by(|a, b| gpuhost_host::rpm::vercmp(&a.version, &b.version))
        })
        .map(|p| p.version.clone()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)] // a test fails by panicking

    use super::*;
    use crate::report::Report;

    fn file(d: &str) -> String {
        format!("/srv/nvidia-driver-local-repo-rhel9-{d}-1.0-1.x86_64.rpm")
    }

    fn run(command: Command, exit: i32, drv: Option<&str>) -> RunRecord {
        RunRecord {
            report: Report {
                command,
                dry_run: command == Command::Plan,
                exit_code: exit,
                driver: drv.map(|d| DriverRecord {
                    local_repo_rpm: file(d),
                    version: d.to_string(),
                    sha256: None,
                    bundle: None,
                }),
                ..Report::default()
            },
            command_line: String::new(),
        }
    }

    fn apply(exit: i32, drv: Option<&str>) -> RunRecord {
        run(Command::Apply, exit, drv)
    }

    #[test]
    fn goes_back_to_the_last_converged_apply_of_another_driver() {
        let runs = vec![
            apply(0, Some("535.104.05")),
            apply(0, Some("550.54.15")),
            apply(1, Some("570.124.06")),
            run(Command::Plan, 0, Some("580.82.07")),
            apply(3, Some("580.82.07")),
            apply(0, Some("580.82.07")),
        ];
        let r = from_runs(&runs, ResumeArgs::default()).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(r.from.version, "580.82.07");
        assert_eq!(r.to.version, "550.54.15");
        assert_eq!(r.args.driver.as_ref(), Some(&r.to));
        assert!(r.args.sets.is_empty(), "{:?}", r.args.sets);
        // What a person runs to repeat it: the pin as --sets, after the apply's own.
        let argv = r.args.argv();
        let tail: Vec<&str> = argv[argv.len() - 6..].iter().map(String::as_str).collect();
        assert_eq!(
            tail,
            [
                "--set",
                &format!("driver.local_repo_rpm={}", file("550.54.15")),
                "--set",
                "driver.replace_local_repo=true",
                "--set",
                "driver.sha256=\"\"",
            ]
        );
    }

    /// The last apply was step-limited (`--only docker`, `--skip driver-repo`) and pinned the
    /// newer package's checksum: the rollback selects every driver step and checks the older
    /// file against its own recorded checksum (issue 34, item 5).
    #[test]
    fn the_rollback_selects_the_driver_steps_and_the_older_checksum() {
        let mut runs = vec![apply(0, Some("570.124.06")), apply(0, Some("580.82.07"))];
        if let Some(d) = runs[0].report.driver.as_mut() {
            d.sha256 = Some("a".repeat(64));
        }
        let last = ResumeArgs {
            sets: vec![format!("driver.sha256={}", "b".repeat(64))],
            only: vec!["docker".into()],
            skip: vec!["driver-repo".into(), "persistenced".into()],
            ..ResumeArgs::default()
        };
        let r = from_runs(&runs, last).unwrap_or_else(|e| panic!("{e:#}"));
        let pinned = r.args.driver.as_ref().and_then(|d| d.sha256.clone());
        assert_eq!(pinned, Some("a".repeat(64)));
        // The pin goes after the apply's own --set (the last one of a key wins).
        let argv = r.args.argv();
        let sums: Vec<&String> = argv.iter().filter(|s| s.contains("sha256")).collect();
        assert_eq!(
            sums.last(),
            Some(&&format!("driver.sha256={}", "a".repeat(64)))
        );
        assert!(r.args.skip.is_empty(), "{:?}", r.args.skip);
        for id in gpuhost_steps::steps_needing_package(&Selection::default()) {
            assert!(
                r.args.only.iter().any(|o| o == id),
                "{id}: {:?}",
                r.args.only
            );
        }
        assert!(r.args.only.contains(&"docker".to_string()));
    }

    /// A journal record whose file is another version's package (by name) is refused: the
    /// rollback would say "580 → 570" and keep 580.
    #[test]
    fn a_record_whose_file_is_another_drivers_is_invalid_input() {
        let mut runs = vec![apply(0, Some("570.124.06")), apply(0, Some("580.82.07"))];
        if let Some(d) = runs[0].report.driver.as_mut() {
            d.local_repo_rpm = file("580.82.07");
        }
        let e = from_runs(&runs, ResumeArgs::default()).err();
        assert!(e.is_some_and(|e| gpuhost_host::error::is_invalid(&e)
            && e.to_string().contains("the package of driver 580.82.07")));
    }

    /// An apply that converged and left the reboot to Slurm (exit 4) is converged: a rollback
    /// after it goes back from its driver, not from the one before.
    #[test]
    fn an_apply_whose_reboot_slurm_schedules_is_converged() {
        let runs = vec![apply(0, Some("570.124.06")), apply(4, Some("580.82.07"))];
        let r = from_runs(&runs, ResumeArgs::default()).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(r.from.version, "580.82.07");
        assert_eq!(r.to.version, "570.124.06");
        assert!(!run(Command::Plan, 4, None).report.converged());
        assert!(!apply(1, None).report.converged());
    }

    #[test]
    fn nothing_to_go_back_to_is_invalid_input() {
        let one = vec![apply(0, Some("580.82.07")), apply(0, Some("580.82.07"))];
        let e = from_runs(&one, ResumeArgs::default()).err();
        assert!(e.is_some_and(|e| gpuhost_host::error::is_invalid(&e)));
        let none = vec![apply(0, None)];
        assert!(from_runs(&none, ResumeArgs::default()).is_err());
    }
}
