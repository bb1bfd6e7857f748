//! Reboots as a state. When a run ends needing a reboot and `--reboot` was given, gpuhost
//! records where it stands (`/var/lib/gpuhost/resume.json`), enables the oneshot
//! `gpuhost-resume.service` (which runs `gpuhost resume`, the same apply, after boot) and
//! reboots. Once the host converges, the unit is disabled and the state removed. A loop guard
//! stops after a bounded number of reboots and says why. In an install root nothing reboots:
//! the resume unit is left enabled for the first boot.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use gpuhost_host::cmd::Cmd;
use gpuhost_host::fsutil;
use gpuhost_host::host::Host;
use gpuhost_profile::{RebootSpec, RebootVia};

pub use crate::recorded::{ResumeArgs, DEFAULT_MAX_REBOOTS};

pub const RESUME_PATH: &str = "/var/lib/gpuhost/resume.json";
pub const UNIT: &str = "gpuhost-resume.service";
/// The unit as the RPM ships it; written to /etc when the package's copy is absent.
pub(crate) const UNIT_TEXT: &str = include_str!("../../packaging/gpuhost-resume.service");
const PACKAGED_UNIT: &str = "/usr/lib/systemd/system/gpuhost-resume.service";
const LOCAL_UNIT: &str = "/etc/systemd/system/gpuhost-resume.service";

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
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
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
    /// Slurm was asked to reboot the node once its jobs have ended; the resume unit is enabled.
    SlurmScheduled,
}

/// What happened about a reboot, for the report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RebootReport {
    pub action: RebootAction,
    pub reboots: u32,
    pub max_reboots: u32,
    pub message: String,
}

/// The run ended needing a reboot and `--reboot` was given: record the state and enable the
/// resume unit; the caller reboots with [`reboot_now`] once the report is out.
pub fn schedule(
    host: &Host,
    args: &ResumeArgs,
    reasons: &[String],
    spec: &RebootSpec,
) -> Result<RebootReport> {
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
    let via = args.reboot_via.unwrap_or(spec.via);
    let slurm = via == RebootVia::Slurm && (host.is_live() || root_stands_for_node());
    let next = ResumeState {
        reboots: if slurm { reboots + 1 } else { next.reboots },
        ..next
    };
    next.save(host)?;
    host.systemctl().args(["enable", UNIT]).run()?;
    if slurm {
        let node = slurm_node(host, spec)?;
        let reason = slurm_reason(reasons);
        Cmd::new("scontrol")
            .args(["reboot", "ASAP", "nextstate=DOWN"])
            .arg(format!("reason={reason}"))
            .arg(&node)
            .timeout(std::time::Duration::from_secs(30))
            .run()?;
        return Ok(RebootReport {
            action: RebootAction::SlurmScheduled,
            reboots: next.reboots,
            max_reboots: max,
            message: format!(
                "Slurm reboots {node} once its jobs have ended (scontrol reboot ASAP nextstate=DOWN, reason \"{reason}\"); {UNIT} resumes the apply after the boot, and the node stays down until gpuhost status --slurm finds it healthy"
            ),
        });
    }
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

/// Test builds only (`failpoints`): `GPUHOST_TEST_ROOT_IS_SLURM_NODE=1` lets an install root
/// stand for a live Slurm node when a reboot is scheduled through Slurm (nothing else is live).
fn root_stands_for_node() -> bool {
    cfg!(feature = "failpoints")
        && std::env::var("GPUHOST_TEST_ROOT_IS_SLURM_NODE").is_ok_and(|v| v == "1")
}

/// The Slurm reason of a reboot gpuhost asks for: `gpuhost: reboot to finish <why>`, without
/// quotes or control characters, at most 160 characters.
pub fn slurm_reason(reasons: &[String]) -> String {
    let text = format!("gpuhost: reboot to finish {}", reasons.join("; "));
    let clean: String = text
        .chars()
        .map(|c| if c == '"' || c.is_control() { ' ' } else { c })
        .collect();
    clean.chars().take(160).collect()
}

/// This host's Slurm node name: the profile's `reboot.slurm_node`, else `$SLURMD_NODENAME`,
/// else the node whose NodeHostname is this host's short name (what slurmd registers as, when
/// slurm.conf names nodes apart from their hosts), else the short host name.
fn slurm_node(host: &Host, spec: &RebootSpec) -> Result<String> {
    if let Some(n) = spec.slurm_node.as_deref().filter(|n| !n.is_empty()) {
        return Ok(n.to_string());
    }
    if let Ok(n) = std::env::var("SLURMD_NODENAME") {
        if !n.is_empty() {
            return Ok(n);
        }
    }
    let name = host
        .read_opt("/proc/sys/kernel/hostname")?
        .ok_or_else(|| anyhow::anyhow!("cannot read the host name; set reboot.slurm_node"))?;
    let short = name
        .trim()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string();
    if short.is_empty() {
        return Err(anyhow::anyhow!(
            "the host has no name; set reboot.slurm_node"
        ));
    }
    let nodes = Cmd::new("scontrol")
        .args(["show", "node", "--oneliner"])
        .timeout(std::time::Duration::from_secs(15))
        .run()?;
    Ok(node_of_host(&nodes.stdout, &short).unwrap_or(short))
}

/// The NodeName whose NodeHostname is `host`, in `scontrol show node --oneliner`.
fn node_of_host(scontrol: &str, host: &str) -> Option<String> {
    scontrol.lines().find_map(|l| {
        let field = |k: &str| l.split_whitespace().find_map(|f| f.strip_prefix(k));
        (field("NodeHostname=") == Some(host)).then(|| field("NodeName=").map(str::to_string))?
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
    fn slurm_reason_names_gpuhost_and_why_in_one_clean_line() {
        let r = slurm_reason(&["nouveau: \"nouveau\" is loaded\nnow".into()]);
        assert_eq!(
            r,
            "gpuhost: reboot to finish nouveau:  nouveau  is loaded now"
        );
        assert!(slurm_reason(&["x".repeat(400)]).chars().count() == 160);
    }

    #[test]
    fn the_node_of_this_host_is_found_by_its_node_hostname() {
        let out = "NodeName=gpu-a17 Arch=x86_64 NodeHostname=hpc-node-17 NodeAddr=10.0.0.17 State=IDLE\nNodeName=gpu-a18 NodeHostname=hpc-node-18 State=IDLE\n";
        assert_eq!(node_of_host(out, "hpc-node-18").as_deref(), Some("gpu-a18"));
        assert_eq!(node_of_host(out, "elsewhere"), None);
    }

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
