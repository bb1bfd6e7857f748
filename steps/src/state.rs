//! gpuhost's persistent state under `/var/lib/gpuhost/` (inside the root): actions still owed
//! across runs (a restart that a crash interrupted, a reboot) and the run journal.
//! Every write is atomic.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::host::Host;

pub const STATE_PATH: &str = "/var/lib/gpuhost/state.json";
pub const JOURNAL_PATH: &str = "/var/lib/gpuhost/journal.json";
/// How many runs the journal keeps.
const JOURNAL_RUNS: usize = 20;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct State {
    /// Owed actions by key (e.g. `restart:docker.service`) with the reason they are owed.
    #[serde(default)]
    pub pending: BTreeMap<String, String>,
}

impl State {
    pub fn load(host: &Host) -> Result<State> {
        Ok(host
            .read_json_opt(STATE_PATH, "move it aside to start afresh")?
            .unwrap_or_default())
    }

    pub fn save(&self, host: &Host) -> Result<()> {
        host.write_json(STATE_PATH, self, 0o644)
    }

    /// Record an owed action, durably, before the change that makes it owed.
    pub fn owe(&mut self, host: &Host, key: &str, reason: &str) -> Result<()> {
        if self.pending.get(key).map(String::as_str) != Some(reason) {
            self.pending.insert(key.to_string(), reason.to_string());
            self.save(host)?;
        }
        Ok(())
    }

    /// Clear an owed action once done.
    pub fn settle(&mut self, host: &Host, key: &str) -> Result<()> {
        if self.pending.remove(key).is_some() {
            self.save(host)?;
        }
        Ok(())
    }
}

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
    let aside = format!("{JOURNAL_PATH}.corrupt-{}", crate::fsutil::unix_now());
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
/// aside with a warning) and the state files gpuhost depends on read (a corrupt one is invalid
/// input, exit 2: it records actions owed across runs, which must not be dropped silently).
/// Returns the warnings for the report.
pub fn preflight(host: &Host) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    if let Err(why) = read_journal(host) {
        warnings.push(move_journal_aside(host, &why)?);
    }
    if let Err(e) = State::load(host) {
        return Err(crate::invalid!(
            "{e:#}; it records actions owed across runs (e.g. a docker restart): look at it, move it aside, and run again"
        ));
    }
    if let Err(e) = crate::reboot::ResumeState::load(host) {
        return Err(crate::invalid!("{e:#}"));
    }
    Ok(warnings)
}

/// Append a run's report to the journal (the last runs, newest last), atomically.
pub fn journal_append(host: &Host, run: serde_json::Value) -> Result<()> {
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
    fn owed_actions_survive_a_reload() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        let mut s = State::load(&host)?;
        s.owe(&host, "restart:docker.service", "daemon.json changed")?;
        let again = State::load(&host)?;
        assert_eq!(again.pending.len(), 1);
        let mut again = again;
        again.settle(&host, "restart:docker.service")?;
        assert!(State::load(&host)?.pending.is_empty());
        Ok(())
    }

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
