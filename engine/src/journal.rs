//! The run journal under `/var/lib/gpuhost/` (inside the root): the last runs' reports, and the
//! check of every record file before a run. Every write is atomic.

use anyhow::Result;

use gpuhost_host::host::Host;
use gpuhost_steps::state::State;

use crate::report::{Report, RunRecord};

pub(crate) const JOURNAL_PATH: &str = "/var/lib/gpuhost/journal.json";
/// How many runs the journal keeps.
const JOURNAL_RUNS: usize = 20;

/// The journal's runs; `Err` with why when the file is there but not a journal (a journal of an
/// earlier version is one: what its runs lack has a default).
fn read_journal(host: &Host) -> Result<Vec<RunRecord>, String> {
    let Some(bytes) = host
        .read_bytes_opt(JOURNAL_PATH)
        .map_err(|e| format!("{e:#}"))?
    else {
        return Ok(Vec::new());
    };
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("not a JSON list of runs: {e}"))
}

/// Move a corrupt journal aside (`journal.json.corrupt-<unix time>`), saying so on stderr: the
/// journal is a record, and a damaged one must not stop a run. Returns the warning.
fn move_journal_aside(host: &Host, why: &str) -> Result<String> {
    let aside = format!(
        "{JOURNAL_PATH}.corrupt-{}",
        gpuhost_host::fsutil::unix_now()
    );
    if let Some(bytes) = host.read_bytes_opt(JOURNAL_PATH)? {
        host.write_atomic(&aside, &bytes, 0o644)?;
    }
    host.remove_file(JOURNAL_PATH)?;
    let warning = format!(
        "{} is corrupt ({why}); moved aside to {}",
        host.path(JOURNAL_PATH).display(),
        host.path(&aside).display()
    );
    eprintln!("gpuhost: warning: {warning}");
    Ok(warning)
}

/// Before any step changes anything: the journal can be appended to (a corrupt one is moved
/// aside with a warning) and the record files gpuhost depends on read — `state.json`,
/// `resume.json`, `last-apply.json`, `kernel-guard.json` (a corrupt one is invalid input, exit
/// 2, naming it: they record what is owed across runs, which must not be dropped silently).
/// Returns the warnings for the report.
pub fn check_records(host: &Host) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    if let Err(why) = read_journal(host) {
        warnings.push(move_journal_aside(host, &why)?);
    }
    if let Err(e) = State::load(host) {
        return Err(gpuhost_host::invalid!(
            "{e:#}; it records actions owed across runs (e.g. a docker restart): look at it, move it aside, and run again"
        ));
    }
    if let Err(e) = crate::reboot::ResumeState::load(host) {
        return Err(gpuhost_host::invalid!("{e:#}"));
    }
    // The kernel trigger's record and the kernel guard's: refused now, before any change,
    // rather than after the steps.
    crate::bootguard::load_last_apply(host)?;
    gpuhost_host::guard_record::load(host)?;
    Ok(warnings)
}

/// The journal's runs, oldest first; an error (exit 2) naming the file when it is not a journal.
pub fn runs(host: &Host) -> Result<Vec<RunRecord>> {
    read_journal(host).map_err(|why| {
        gpuhost_host::invalid!(
            "{JOURNAL_PATH} is not gpuhost's journal: {why}; move it aside (the next apply starts a new one)"
        )
    })
}

/// Append a run's report, with the command line that ran it, to the journal (the last runs,
/// newest last), atomically.
pub(crate) fn journal_append(host: &Host, report: &Report, command_line: &str) -> Result<()> {
    let mut runs = match read_journal(host) {
        Ok(runs) => runs,
        Err(why) => {
            move_journal_aside(host, &why)?;
            Vec::new()
        }
    };
    runs.push(RunRecord {
        report: report.clone(),
        command_line: command_line.to_string(),
    });
    let excess = runs.len().saturating_sub(JOURNAL_RUNS);
    runs.drain(..excess);
    host.write_json(JOURNAL_PATH, &runs, 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_keeps_the_last_runs() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        for i in 0..25 {
            let report = Report {
                duration_ms: i,
                ..Report::default()
            };
            journal_append(&host, &report, &format!("gpuhost apply #{i}"))?;
        }
        let runs = runs(&host)?;
        assert_eq!(runs.len(), 20);
        assert_eq!(runs[19].report.duration_ms, 24);
        assert_eq!(runs[19].command_line, "gpuhost apply #24");
        assert_eq!(runs[0].report.duration_ms, 5);
        Ok(())
    }

    /// A journal an earlier gpuhost wrote (no `driver`, `driver_managed`, `bundle`,
    /// `kernel_guard`; a field since dropped) is read, and kept when a run is appended.
    #[test]
    fn a_journal_of_an_earlier_version_is_read() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        let old = r#"[{"gpuhost_version":"0.0.9","command":"apply","profile":"ol9-uek","root":"/","live":true,"dry_run":false,"target_kernel":"5.15.0-1.el9uek.x86_64","started_at":"2026-01-02T03:04:05Z","duration_ms":7,"exit_code":3,"summary":"converged, but a reboot is required","deferred":[],"warnings":[],"old_field":1,"steps":[{"id":"kernel","outcome":"unchanged","reason":"ok","changes":[],"deferred":[],"commands":[{"argv":["rpm","-q","kernel-uek"],"exit_code":0,"duration_ms":2}],"duration_ms":3}],"command_line":"gpuhost apply --profile ol9-uek"}]"#;
        host.write_atomic(JOURNAL_PATH, old.as_bytes(), 0o644)?;
        assert!(
            check_records(&host)?.is_empty(),
            "an old journal was moved aside"
        );
        let runs1 = runs(&host)?;
        let r = &runs1[0].report;
        assert!(r.converged(), "exit 3 of an apply is converged");
        assert!(r.driver_managed && r.driver.is_none() && r.kernel_guard.is_none());
        assert_eq!(r.steps[0].commands[0].argv, ["rpm", "-q", "kernel-uek"]);
        journal_append(&host, &Report::default(), "gpuhost apply")?;
        let runs2 = runs(&host)?;
        assert_eq!(runs2.len(), 2);
        assert_eq!(runs2[0].command_line, "gpuhost apply --profile ol9-uek");
        Ok(())
    }

    /// What is not a journal (a list of something else, or runs without what a rollback
    /// decides by: no exit code is not "exit 0") is moved aside with a warning.
    #[test]
    fn what_is_not_a_journal_is_moved_aside() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        for text in [
            r#"[{"command": 7}]"#,
            r#"[{"command": "apply", "dry_run": false, "driver": {"local_repo_rpm": "/x.rpm", "version": "580.82.07"}}]"#,
        ] {
            host.write_atomic(JOURNAL_PATH, text.as_bytes(), 0o644)?;
            assert!(runs(&host).is_err(), "{text}");
            let warnings = check_records(&host)?;
            assert!(warnings[0].contains("moved aside"), "{warnings:?}");
            assert!(runs(&host)?.is_empty());
        }
        Ok(())
    }
}
