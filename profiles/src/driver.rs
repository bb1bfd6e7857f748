//! `[driver]`: the NVIDIA driver from NVIDIA's local repo package (CUDA or driver-only), the
//! kernel module flavour, the stream and the package set.

use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use gpuhost_host::invalid;
use gpuhost_nvidia::flavour::FlavourSetting;
pub use gpuhost_nvidia::packages::{InstallSet, StreamKind, SPLIT_PACKAGES_SINCE};

/// `[driver]` in a profile.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriverSpec {
    /// Whether gpuhost manages the NVIDIA driver. `false` provisions without it (the driver
    /// steps are skipped; the kernel and container steps still run); `true` (the default) needs
    /// `local_repo_rpm`.
    #[serde(default = "yes")]
    pub manage: bool,
    /// NVIDIA's local repo package (a path on the host): a CUDA local repo or a driver-only one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_repo_rpm: Option<PathBuf>,
    /// The SHA-256 of `local_repo_rpm` (64 hex digits), checked before anything is installed
    /// from it; `""`: none (unpins what an extended profile or an earlier `--set` pins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Kernel module flavour: `auto` (from the GPUs on PCI), `open` or `proprietary`.
    #[serde(default)]
    pub flavour: FlavourSetting,
    /// `nvidia-driver` module stream, e.g. `535-dkms`, `latest-dkms`, `open-dkms`, `550-open`;
    /// unset: the flavour's default stream (`open-dkms` or `latest-dkms`). NVIDIA's precompiled
    /// streams (`latest`, `<branch>`) are refused: NVIDIA builds them for RHEL's kernels only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// The package set: `module`, `full` or `compute-only`.
    #[serde(default)]
    pub install: InstallSet,
    /// IMEX (memory export across nodes, multi-node NVLink) at the driver's version, locked;
    /// unset: on when a Grace Blackwell superchip (GB200, GB300: an NVL72 compute tray) is on
    /// PCI, off otherwise (GH200 and HGX systems run no IMEX unless asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imex: Option<bool>,
    /// Replace another NVIDIA local repo package (another driver version) when one is installed.
    #[serde(default)]
    pub replace_local_repo: bool,
    /// Install NVIDIA's local repo package, as NVIDIA's procedure does (`true`, the default):
    /// the whole repo stays on the node, the CUDA toolkit's packages with it, so `dnf install
    /// cuda-toolkit-…` works there. `false`: the package is read, never installed; the node
    /// installs the driver set from gpuhost's checked cache of it
    /// (`/var/lib/gpuhost/driver-repo`, the current set and the one before it, for a rollback)
    /// and holds none of the toolkit's gigabytes.
    #[serde(default = "yes")]
    pub keep_local_repo: bool,
    /// Switch the `nvidia-driver` module to `stream` when another stream is installed
    /// (`dnf module switch-to --allowerasing`).
    #[serde(default)]
    pub switch_stream: bool,
    /// Packages outside NVIDIA's driver set that a driver change may erase (a site package that
    /// pins the old branch, one that needs the old local repo package). `plan` lists every such
    /// package; a change that would erase one not named here is refused before anything changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_erase: Vec<String>,
    /// A kmod repo made by `gpuhost kmod build` on a build host (a directory on this host, or
    /// carried in a bundle): the node installs its signed kmod for each served kernel instead of
    /// NVIDIA's DKMS package, and no compiler, headers or DKMS. A served kernel the repo has no
    /// kmod for is refused before any change (exit 2). Unset: DKMS builds the modules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kmod_repo: Option<PathBuf>,
}

impl Default for DriverSpec {
    fn default() -> Self {
        DriverSpec {
            manage: true,
            local_repo_rpm: None,
            sha256: None,
            flavour: FlavourSetting::Auto,
            stream: None,
            install: InstallSet::Module,
            imex: None,
            replace_local_repo: false,
            keep_local_repo: true,
            switch_stream: false,
            allow_erase: Vec::new(),
            kmod_repo: None,
        }
    }
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
        if let Some(stream) = &self.stream {
            let stream_ok = !stream.is_empty()
                && stream
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if !stream_ok {
                return Err(invalid!(
                    "profile {profile}: key `driver.stream`: \"{stream}\" is not a module stream (e.g. 535-dkms, latest-dkms, open-dkms)"
                ));
            }
        }
        Ok(())
    }

    /// [`DriverSpec::validate`], plus what depends on the release: NVIDIA's EL10 packages are
    /// not modular (no stream to pick, no module package set). NVIDIA's precompiled streams are
    /// refused where the run's kernel is known, when the driver is resolved
    /// (`gpuhost_nvidia::flavour::refuse_precompiled`): no Oracle Linux kernel is RHEL's.
    pub(crate) fn validate_for(&self, profile: &str, major: u32) -> Result<()> {
        self.validate(profile)?;
        let modular = gpuhost_host::platform::release(major).is_none_or(|r| r.modular());
        if !modular {
            self.validate_plain(profile, major)?;
        }
        Ok(())
    }
}

impl DriverSpec {
    /// On a release whose NVIDIA packages are not modular (EL10): no `driver.stream` (it names
    /// a module stream) and no `module` package set.
    fn validate_plain(&self, profile: &str, major: u32) -> Result<()> {
        if let Some(stream) = &self.stream {
            return Err(invalid!(
                "profile {profile}: key `driver.stream`: \"{stream}\" names an nvidia-driver module stream, but NVIDIA's packages for Oracle Linux {major} are not modular; remove driver.stream and set driver.flavour = \"open\" or \"proprietary\" (the branch is the local repo package's, held with dnf versionlock)"
            ));
        }
        if self.install == InstallSet::Module {
            return Err(invalid!(
                "profile {profile}: key `driver.install`: \"module\" installs an nvidia-driver module profile, but NVIDIA's packages for Oracle Linux {major} are not modular; set driver.install = \"full\" (nvidia-open or cuda-drivers) or \"compute-only\""
            ));
        }
        Ok(())
    }
}

/// serde's default for the keys that are on unless turned off.
pub(crate) fn yes() -> bool {
    true
}
