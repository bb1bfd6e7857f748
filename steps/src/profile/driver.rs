//! `[driver]`: the NVIDIA driver from NVIDIA's local full RPM repo package.

use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::invalid;
use crate::kernel::Flavour;

/// `[driver]` in a profile.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriverSpec {
    /// Whether gpuhost manages the NVIDIA driver. `false` provisions without it (the driver
    /// steps are skipped; the kernel and container steps still run); `true` (the default) needs
    /// `local_repo_rpm`.
    #[serde(default = "yes")]
    pub manage: bool,
    /// NVIDIA's local full RPM repo package (a path on the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_repo_rpm: Option<PathBuf>,
    /// The SHA-256 of `local_repo_rpm` (64 hex digits), checked before anything is installed
    /// from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `nvidia-driver` module stream, e.g. `535-dkms`, `latest-dkms`, `open-dkms`, `550-open`.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// Replace another NVIDIA local repo package (another driver version) when one is installed.
    #[serde(default)]
    pub replace_local_repo: bool,
    /// Switch the `nvidia-driver` module to `stream` when another stream is installed
    /// (`dnf module switch-to --allowerasing`).
    #[serde(default)]
    pub switch_stream: bool,
}

impl Default for DriverSpec {
    fn default() -> Self {
        DriverSpec {
            manage: true,
            local_repo_rpm: None,
            sha256: None,
            stream: default_stream(),
            replace_local_repo: false,
            switch_stream: false,
        }
    }
}

fn yes() -> bool {
    true
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

    /// [`DriverSpec::validate`], plus what depends on the kernel flavour: NVIDIA builds its
    /// precompiled streams for RHCK kernels only, so a precompiled stream on UEK is refused
    /// before anything is changed.
    pub fn validate_for(&self, profile: &str, flavour: Flavour) -> Result<()> {
        self.validate(profile)?;
        if flavour == Flavour::Uek && StreamKind::of(&self.stream) == StreamKind::Precompiled {
            return Err(invalid!(
                "profile {profile}: key `driver.stream`: \"{}\" is a precompiled stream, and NVIDIA builds precompiled modules for RHCK kernels only, never for UEK; use a DKMS stream: {}-dkms, latest-dkms or open-dkms",
                self.stream,
                if self.stream == "latest" { "<branch>" } else { &self.stream }
            ));
        }
        Ok(())
    }
}

/// How a stream's kernel module is provided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// `<branch>`, `latest`: precompiled `kmod-nvidia-<ver>-<kernel>` packages (RHCK only).
    Precompiled,
    /// `<branch>-dkms`, `latest-dkms`: proprietary modules built by DKMS.
    Dkms,
    /// `<branch>-open`, `open-dkms`: open modules built by DKMS (need `gcc-c++`).
    Open,
}

impl StreamKind {
    pub fn of(stream: &str) -> StreamKind {
        if stream == "open-dkms" || stream.ends_with("-open") {
            StreamKind::Open
        } else if stream.ends_with("-dkms") {
            StreamKind::Dkms
        } else {
            StreamKind::Precompiled
        }
    }

    /// The kmod package that provides the module, for DKMS streams.
    pub fn dkms_package(self) -> Option<&'static str> {
        match self {
            StreamKind::Precompiled => None,
            StreamKind::Dkms => Some("kmod-nvidia-latest-dkms"),
            StreamKind::Open => Some("kmod-nvidia-open-dkms"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("latest", StreamKind::Precompiled)]
    #[case("535", StreamKind::Precompiled)]
    #[case("535-dkms", StreamKind::Dkms)]
    #[case("latest-dkms", StreamKind::Dkms)]
    #[case("open-dkms", StreamKind::Open)]
    #[case("550-open", StreamKind::Open)]
    fn stream_kinds(#[case] stream: &str, #[case] kind: StreamKind) {
        assert_eq!(StreamKind::of(stream), kind);
    }

    #[test]
    fn precompiled_streams_are_refused_on_uek_only() {
        let spec = DriverSpec {
            stream: "latest".into(),
            ..DriverSpec::default()
        };
        let err = spec.validate_for("p", Flavour::Uek).err();
        assert!(
            err.as_ref().is_some_and(crate::error::is_invalid),
            "{err:?}"
        );
        assert!(format!("{err:?}").contains("UEK"));
        assert!(spec.validate_for("p", Flavour::Rhck).is_ok());
    }
}
