//! The NVIDIA driver from the local full RPM repo package, built for the kernel that will boot.
//! (Issue 3: the steps driver-repo, build-deps, driver, nouveau, kernel-module, fabric-manager
//! and persistenced live here.)

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::invalid;
use crate::runner::Step;

/// `[driver]` in a profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverSpec {
    /// NVIDIA's local full RPM repo package (a path on the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_repo_rpm: Option<std::path::PathBuf>,
    /// Its expected SHA-256, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `nvidia-driver` module stream, e.g. `535-dkms`, `latest-dkms`, `open-dkms`, `550-open`.
    #[serde(default = "default_stream")]
    pub stream: String,
}

impl Default for DriverSpec {
    fn default() -> Self {
        DriverSpec {
            local_repo_rpm: None,
            sha256: None,
            stream: default_stream(),
        }
    }
}

fn default_stream() -> String {
    "latest-dkms".to_string()
}

impl DriverSpec {
    /// Checks beyond types; `profile` names the profile in messages.
    pub fn validate(&self, profile: &str) -> Result<()> {
        if let Some(sum) = &self.sha256 {
            if sum.len() != 64 || !sum.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(invalid!(
                    "profile {profile}: key `driver.sha256`: \"{sum}\" is not 64 hex digits"
                ));
            }
        }
        let stream_ok = !self.stream.is_empty()
            && self
                .stream
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !stream_ok {
            return Err(invalid!(
                "profile {profile}: key `driver.stream`: \"{}\" is not a module stream (e.g. 535-dkms, latest-dkms, open-dkms)",
                self.stream
            ));
        }
        Ok(())
    }
}

/// The driver steps, in order.
pub fn steps() -> Vec<&'static dyn Step> {
    vec![]
}
