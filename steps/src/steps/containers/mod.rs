//! Docker CE, the NVIDIA Container Toolkit, daemon.json, services, prefix links and the
//! container smoke test. (Issue 4: the steps docker, container-toolkit, daemon-json, services,
//! prefix-links and container-smoke live here.)

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::runner::Step;

/// `[docker]` in a profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerSpec {}

/// `[container_toolkit]` in a profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolkitSpec {}

/// One `[[prefix_links]]` entry in a profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixLink {
    pub packages: Vec<String>,
    pub prefix: std::path::PathBuf,
}

/// `[container_smoke]` in a profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmokeSpec {}

/// Checks beyond types for the container sections; `profile` names the profile in messages.
pub fn validate(
    _profile: &str,
    _docker: &DockerSpec,
    _toolkit: &ToolkitSpec,
    _links: &[PrefixLink],
    _smoke: &SmokeSpec,
) -> Result<()> {
    Ok(())
}

/// The container steps, in order.
pub fn steps() -> Vec<&'static dyn Step> {
    vec![]
}
