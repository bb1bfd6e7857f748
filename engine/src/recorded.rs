//! What an apply records to be repeated: its arguments (`last-apply.json` for the kernel
//! trigger and rollback, `resume.json` across a reboot) and the driver it managed (the journal).

use serde::{Deserialize, Serialize};

use gpuhost_profile::RebootVia;

/// `--max-reboots`'s default: at most this many reboots in one resume chain.
pub const DEFAULT_MAX_REBOOTS: u32 = 3;

/// The apply arguments a resumed run repeats.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResumeArgs {
    pub profile: String,
    #[serde(default)]
    pub sets: Vec<String>,
    #[serde(default)]
    pub only: Vec<String>,
    #[serde(default)]
    pub skip: Vec<String>,
    #[serde(default = "default_max")]
    pub max_reboots: u32,
    /// `--bundle`: the bundle directory or tarball, verified again after the reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// `--reboot-via`: who reboots (else the profile's `reboot.via`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_via: Option<RebootVia>,
    /// The driver `gpuhost rollback` went back to: its local repo package and checksum, over
    /// the profile's and the `--set`s' (kept, so that a resume or a new kernel stays on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<DriverRecord>,
}

impl ResumeArgs {
    /// The `gpuhost` arguments that repeat this apply (after `gpuhost`): `apply`, then
    /// `--bundle B` or `--profile P`, each `--set`, `--only`/`--skip`. What a person runs to
    /// repeat it, e.g. the kernel guard's fix command.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = vec!["apply".to_string()];
        let mut flag = |name: &str, value: &str| {
            argv.push(format!("--{name}"));
            argv.push(value.to_string());
        };
        match &self.bundle {
            Some(b) => flag("bundle", b),
            None => flag("profile", &self.profile),
        }
        if !self.profile.is_empty() && self.bundle.is_some() {
            flag("profile", &self.profile);
        }
        for s in &self.sets {
            flag("set", s);
        }
        if let Some(d) = &self.driver {
            for s in d.sets() {
                flag("set", &s);
            }
        }
        if !self.only.is_empty() {
            flag("only", &self.only.join(","));
        }
        if !self.skip.is_empty() {
            flag("skip", &self.skip.join(","));
        }
        argv
    }
}

fn default_max() -> u32 {
    DEFAULT_MAX_REBOOTS
}

/// The driver of one apply, as the journal keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverRecord {
    /// `driver.local_repo_rpm`.
    pub local_repo_rpm: String,
    /// The driver version its file name gives.
    pub version: String,
    /// `driver.sha256`, when the apply pinned it (the file was checked against it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The bundle (`apply --bundle`, as given) whose driver set stood in for the package file:
    /// `local_repo_rpm` is then the bundle's name for the package, not a file on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
}

impl DriverRecord {
    /// The `--set`s that pin this driver, as a person repeats the apply: its package (replacing
    /// the installed local repo) and its checksum (`""` unpins one the profile pins).
    pub fn sets(&self) -> [String; 3] {
        [
            format!("driver.local_repo_rpm={}", self.local_repo_rpm),
            "driver.replace_local_repo=true".to_string(),
            format!("driver.sha256={}", self.sha256.as_deref().unwrap_or("\"\"")),
        ]
    }
}
