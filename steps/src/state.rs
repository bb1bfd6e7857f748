//! gpuhost's owed actions under `/var/lib/gpuhost/state.json` (inside the root): actions still
//! owed across runs (a restart that a crash interrupted, a reboot). Every write is atomic.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use gpuhost_host::host::Host;

pub(crate) const STATE_PATH: &str = "/var/lib/gpuhost/state.json";

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
}
