//! Reboots as a state. When a run ends needing a reboot and `--reboot` was given, gpuhost
//! records where it stands (`/var/lib/gpuhost/resume.json`), enables the oneshot
//! `gpuhost-resume.service` (which runs `gpuhost resume`, the same apply, after boot) and
//! reboots. Once the host converges, the unit is disabled and the state removed. A loop guard
//! stops after a bounded number of reboots and says why. In an install root nothing reboots:
//! the resume unit is left enabled for the first boot.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use gpuhost_host::fsutil;
use gpuhost_host::host::Host;

pub const RESUME_PATH: &str = "/var/lib/gpuhost/resume.json";
pub const UNIT: &str = "gpuhost-resume.service";
/// The unit as the RPM ships it; written to /etc when the package's copy is absent.
pub const UNIT_TEXT: &str = include_str!("../../packaging/gpuhost-resume.service");
const PACKAGED_UNIT: &str = "/usr/lib/systemd/system/gpuhost-resume.service";
const LOCAL_UNIT: &str = "/etc/systemd/system/gpuhost-resume.service";
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

/// `/var/lib/gpuhost/resume.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResumeState {
    pub args: ResumeArgs,
    /// Reboots gpuhost has made in this chain.
    pub reboots: u32,
    /// Why the last reboot was needed.
    pub reasons: Vec<String>,
    pub since: String,
}

impl ResumeState {
    pub fn load(host: &Host) -> Result<Option<ResumeState>> {
        host.read_json_opt(RESUME_PATH, "remove it and run gpuhost apply again")
    }

    fn save(&self, host: &Host) -> Result<()> {
        host.write_json(RESUME_PATH, self, 0o600)
    }
}

/// What gpuhost did about a reboot.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RebootAction {
    /// The resume unit is enabled and the caller reboots once the report is out.
    Rebooting,
    /// Install root: the resume unit runs the apply on first boot.
    FirstBoot,
    /// The loop guard stopped the chain; the resume unit is disabled.
    GaveUp,
    /// Converged; the resume unit is removed.
    Finished,
}

/// What happened about a reboot, for the report.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RebootReport {
    pub action: RebootAction,
    pub reboots: u32,
    pub max_reboots: u32,
    pub message: String,
}

/// The run ended needing a reboot and `--reboot` was given: record the state and enable the
/// resume unit; the caller reboots with [`reboot_now`] once the report is out.
pub fn schedule(host: &Host, args: &ResumeArgs, reasons: &[String]) -> Result<RebootReport> {
    let prev = ResumeState::load(host)?;
    let reboots = prev.as_ref().map_or(0, |p| p.reboots);
    let max = args.max_reboots;
    if reboots >= max {
        disable(host)?;
        return Ok(RebootReport {
            action: RebootAction::GaveUp,
            reboots,
            max_reboots: max,
            message: format!(
                "still needs a reboot after {reboots} reboot(s) ({}); gpuhost stopped rebooting and disabled {UNIT}: fix the cause, then run gpuhost apply again",
                reasons.join("; ")
            ),
        });
    }
    install_unit(host)?;
    let next = ResumeState {
        args: args.clone(),
        reboots: if host.is_live() { reboots + 1 } else { reboots },
        reasons: reasons.to_vec(),
        since: prev
            .map(|p| p.since)
            .unwrap_or_else(|| fsutil::rfc3339(fsutil::unix_now())),
    };
    next.save(host)?;
    host.systemctl().args(["enable", UNIT]).run()?;
    if !host.is_live() {
        return Ok(RebootReport {
            action: RebootAction::FirstBoot,
            reboots,
            max_reboots: max,
            message: format!("install root: {UNIT} is enabled and resumes the apply on first boot"),
        });
    }
    Ok(RebootReport {
        action: RebootAction::Rebooting,
        reboots: next.reboots,
        max_reboots: max,
        message: format!(
            "rebooting now (reboot {} of at most {max}); {UNIT} resumes the apply after boot",
            next.reboots
        ),
    })
}

/// Reboot the live system now (after the report is out). Returns once systemd has the job.
pub fn reboot_now(host: &Host) -> Result<()> {
    if host.is_live() {
        host.systemctl().arg("reboot").run()?;
    }
    Ok(())
}

/// The run converged: remove the resume state and the unit, if a chain was under way.
pub fn finish(host: &Host) -> Result<Option<RebootReport>> {
    let Some(state) = ResumeState::load(host)? else {
        return Ok(None);
    };
    disable(host)?;
    Ok(Some(RebootReport {
        action: RebootAction::Finished,
        reboots: state.reboots,
        max_reboots: state.args.max_reboots,
        message: format!(
            "converged after {} reboot(s); {UNIT} disabled and removed",
            state.reboots
        ),
    }))
}

fn install_unit(host: &Host) -> Result<()> {
    if host.exists(PACKAGED_UNIT) {
        return Ok(());
    }
    if host.read_opt(LOCAL_UNIT)?.as_deref() != Some(UNIT_TEXT) {
        host.write_atomic(LOCAL_UNIT, UNIT_TEXT.as_bytes(), 0o644)?;
    }
    Ok(())
}

fn disable(host: &Host) -> Result<()> {
    let unit_present = host.exists(PACKAGED_UNIT) || host.exists(LOCAL_UNIT);
    if unit_present {
        host.systemctl().args(["disable", UNIT]).run()?;
    }
    if host.read_opt(LOCAL_UNIT)?.as_deref() == Some(UNIT_TEXT) {
        host.remove_file(LOCAL_UNIT)?;
    }
    host.remove_file(RESUME_PATH)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments repeat the apply: with `--bundle` the bundle (an apply from a bundle has no
    /// profile of its own: `--profile` with nothing after it would be refused), every `--set`,
    /// the step selection.
    #[test]
    fn argv_repeats_the_apply() {
        let a = ResumeArgs {
            profile: "ol8-uek".into(),
            sets: vec!["driver.stream=580-open".into()],
            only: vec!["kernel".into(), "driver".into()],
            ..ResumeArgs::default()
        };
        assert_eq!(
            a.argv().join(" "),
            "apply --profile ol8-uek --set driver.stream=580-open --only kernel,driver"
        );
        let b = ResumeArgs {
            bundle: Some("/srv/gpu-bundle.tar".into()),
            skip: vec!["docker".into()],
            ..ResumeArgs::default()
        };
        assert_eq!(
            b.argv().join(" "),
            "apply --bundle /srv/gpu-bundle.tar --skip docker"
        );
    }
}
