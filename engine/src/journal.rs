//! The run journal under `/var/lib/gpuhost/` (inside the root): the last runs' reports, and the
//! check of every record file before a run. Every write is atomic.

use anyhow::Result;

use gpuhost_host::host::Host;
use gpuhost_steps::state::State;

pub(crate) const JOURNAL_PATH: &str = "/var/lib/gpuhost/journal.json";
/// How many runs the journal keeps.
const JOURNAL_RUNS: usize = 20;

/// The journal's runs; `Err` with why when the file is there but not a journal.
fn read_journal(host: &Host) -> Result<Vec<serde_json::Value>, String> {
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
pub fn preflight(host: &Host) -> Result<Vec<String>> {
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
pub fn runs(host: &Host) -> Result<Vec<serde_json::Value>> {
    read_journal(host).map_err(|why| {
        gpuhost_host::invalid!(
            "{JOURNAL_PATH} is not gpuhost's journal: {why}; move it aside (the next apply starts a new one)"
        )
    })
}

/// Append a run's report to the journal (the last runs, newest last), atomically.
pub(crate) fn journal_append(host: &Host, run: serde_json::Value) -> Result<()> {
    let mut runs = match read_journal(host) {
        Ok(runs) => runs,
        Err(why) => {
            move_journal_aside(host, &why)?;
            Vec::new()
        }
    };
    runs.push(run);
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
            journal_append(&host, serde_json::json!({ "run": i }))?;
        }
        let runs: Vec<serde_json::Value> =
            serde_json::from_str(&host.read_opt(JOURNAL_PATH)?.unwrap_or_default())?;
        assert_eq!(runs.len(), 20);
        assert_eq!(runs[19]["run"], 24);
        Ok(())
    }
}
