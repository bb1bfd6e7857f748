//! gpuhost's persistent state under `/var/lib/gpuhost/` (inside the root): actions still owed
//! across runs (a restart that a crash interrupted, a reboot) and the run journal.
//! Every write is atomic.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
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
        match host.read_opt(STATE_PATH)? {
            None => Ok(State::default()),
            Some(text) => serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is corrupt; move it aside to start afresh",
                    host.path(STATE_PATH).display()
                )
            }),
        }
    }

    pub fn save(&self, host: &Host) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        host.write_atomic(STATE_PATH, &json, 0o644)
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

/// Append a run's report to the journal (the last runs, newest last), atomically.
pub fn journal_append(host: &Host, run: serde_json::Value) -> Result<()> {
    let mut runs: Vec<serde_json::Value> = host
        .read_opt(JOURNAL_PATH)?
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    runs.push(run);
    let excess = runs.len().saturating_sub(JOURNAL_RUNS);
    runs.drain(..excess);
    host.write_atomic(JOURNAL_PATH, &serde_json::to_vec_pretty(&runs)?, 0o644)
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
