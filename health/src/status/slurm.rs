//! `gpuhost status --slurm`: Slurm's `HealthCheckProgram` conventions, as LBNL NHC keeps them.
//!
//! slurmd runs the program every `HealthCheckInterval` seconds; the program itself tells
//! slurmctld what to do with the node through `scontrol`:
//! - CRITICAL: drain the node with a reason naming the check, `gpuhost: <check> <gpu>: <what>`
//!   (running jobs finish; no new ones start). A node already drained by someone else keeps
//!   their reason: an admin's drain is never overwritten.
//! - OK or WARNING: resume the node only if gpuhost drained it (its reason starts with
//!   `gpuhost:`); a node drained by an admin stays drained.
//! - UNKNOWN (a check could not be made): change nothing.
//!
//! The node is `--slurm-node`, else `$SLURMD_NODENAME`, else the short host name (what
//! slurmd uses when slurm.conf names the node after its host).

use std::time::Duration;

use anyhow::{anyhow, Result};

use gpuhost_host::cmd::Cmd;

use crate::summary;
use crate::verdict::{Check, Severity};

/// Reasons gpuhost sets start with this; only such drains are gpuhost's to resume.
pub(crate) const REASON_PREFIX: &str = "gpuhost:";

/// Longest reason gpuhost sets (a reason is for people reading `sinfo -R`).
const REASON_MAX: usize = 160;

/// What Slurm says about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeState {
    /// `IDLE+DRAIN`, `MIXED`, `DOWN+DRAIN`, …
    pub(crate) state: String,
    /// The drain or down reason, without Slurm's `[user@time]` suffix.
    pub(crate) reason: Option<String>,
}

impl NodeState {
    pub(crate) fn drained(&self) -> bool {
        self.state
            .split('+')
            .any(|f| f == "DRAIN" || f == "DRAINED" || f == "DRAINING")
    }

    /// DOWN: after `scontrol reboot … nextstate=DOWN`, the node stays down until someone resumes it.
    pub(crate) fn down(&self) -> bool {
        self.state.split('+').any(|f| f == "DOWN")
    }

    /// Down because gpuhost asked Slurm for a reboot (`apply` with `reboot.via = "slurm"`): the
    /// health check decides when it goes back to work.
    pub(crate) fn down_by_gpuhost(&self) -> bool {
        self.down()
            && !self.drained()
            && self
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with(REASON_PREFIX))
    }

    pub(crate) fn drained_by_gpuhost(&self) -> bool {
        self.drained()
            && self
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with(REASON_PREFIX))
    }
}

/// Parse `scontrol show node NAME --oneliner`.
pub(crate) fn parse_node(text: &str) -> Option<NodeState> {
    let line = text.lines().find(|l| l.contains("NodeName="))?;
    let state = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("State="))?
        .to_string();
    // Reason=... runs to the end of the line (it may hold spaces), ending in " [user@time]".
    let reason = line.find(" Reason=").map(|i| {
        let r = line[i + " Reason=".len()..].trim();
        let r = match r.rfind(" [") {
            Some(j) if r.ends_with(']') => &r[..j],
            _ => r,
        };
        r.trim().to_string()
    });
    Some(NodeState {
        state,
        reason: reason.filter(|r| !r.is_empty() && r != "(null)"),
    })
}

/// The node this runs on, for Slurm.
pub(crate) fn node_name(flag: Option<&str>) -> Result<String> {
    if let Some(n) = flag {
        return Ok(n.to_string());
    }
    if let Ok(n) = std::env::var("SLURMD_NODENAME") {
        if !n.is_empty() {
            return Ok(n);
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|e| anyhow!("cannot read the host name ({e}); give --slurm-node NAME"))?;
    let short = host.trim().split('.').next().unwrap_or("").to_string();
    if short.is_empty() {
        return Err(anyhow!("the host has no name; give --slurm-node NAME"));
    }
    Ok(short)
}

/// The drain reason for a verdict: `gpuhost: <check> <where>: <what>`.
pub(crate) fn reason(checks: &[Check]) -> String {
    let text = match summary::worst(checks) {
        Some(c) => format!(
            "{REASON_PREFIX} {} {}: {}",
            c.id,
            summary::place(c),
            c.value
        ),
        None => format!("{REASON_PREFIX} unhealthy"),
    };
    // Slurm keeps the reason as given; quotes and newlines would only confuse readers.
    let clean: String = text
        .chars()
        .map(|c| if c == '"' || c.is_control() { ' ' } else { c })
        .collect();
    summary::truncate(&clean, REASON_MAX)
}

/// What gpuhost did (or did not do) to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    Drained(String),
    AlreadyDrained(String),
    LeftAdminDrain(String),
    Resumed,
    Nothing,
}

impl Action {
    pub(crate) fn describe(&self, node: &str) -> String {
        match self {
            Action::Drained(r) => format!("drained {node}: {r}"),
            Action::AlreadyDrained(r) => format!("{node} stays drained by gpuhost: {r}"),
            Action::LeftAdminDrain(r) => {
                format!("{node} was drained by someone else ({r}); left alone")
            }
            Action::Resumed => format!("resumed {node}: gpuhost had drained it and it is healthy"),
            Action::Nothing => format!("{node}: nothing to do"),
        }
    }
}

/// Decide, from the verdict and the node's state, what to do.
pub(crate) fn decide(verdict: Severity, checks: &[Check], node: &NodeState) -> Action {
    let r = node.reason.clone().unwrap_or_default();
    match verdict {
        Severity::Critical if node.drained_by_gpuhost() => Action::AlreadyDrained(r),
        // Back from gpuhost's reboot, unhealthy: it stays out, its reason now the check's.
        Severity::Critical if node.down_by_gpuhost() => Action::Drained(reason(checks)),
        Severity::Critical if node.drained() => Action::LeftAdminDrain(r),
        Severity::Critical => Action::Drained(reason(checks)),
        s if summary::healthy(s) && (node.drained_by_gpuhost() || node.down_by_gpuhost()) => {
            Action::Resumed
        }
        s if summary::healthy(s) && node.drained() => Action::LeftAdminDrain(r),
        _ => Action::Nothing,
    }
}

fn scontrol(args: &[&str]) -> Result<String> {
    let out = Cmd::new("scontrol")
        .args(args)
        .timeout(Duration::from_secs(15))
        .run()?;
    Ok(out.stdout)
}

/// Read the node's state, decide, and act through `scontrol`.
pub(crate) fn act(node: &str, verdict: Severity, checks: &[Check]) -> Result<Action> {
    let text = scontrol(&["show", "node", node, "--oneliner"])?;
    let state = parse_node(&text).ok_or_else(|| {
        anyhow!("scontrol show node {node}: no state in its answer; is {node} the Slurm node name? (--slurm-node)")
    })?;
    let action = decide(verdict, checks, &state);
    let nodename = format!("nodename={node}");
    match &action {
        Action::Drained(r) => {
            let reason = format!("reason={r}");
            scontrol(&["update", &nodename, "state=drain", &reason])?;
        }
        Action::Resumed => {
            scontrol(&["update", &nodename, "state=resume"])?;
        }
        _ => {}
    }
    Ok(action)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    // Captured from Debian's slurmctld 22.05.8 (one-node test cluster).
    const DRAINED: &str = "NodeName=gpunode1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-12-03T07:25:46 SlurmdStartTime=2026-12-03T08:14:42 LastBusyTime=2026-12-03T08:14:42 CfgTRES=cpu=1,mem=100M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=gpuhost: gpu.ecc: 2 errors [root@2026-12-03T08:14:48]\n";
    const IDLE: &str = "NodeName=gpunode1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 State=IDLE ThreadsPerCore=1 ExtSensorsTemp=n/s\n";

    #[test]
    fn parses_state_and_reason() {
        let s = parse_node(DRAINED).unwrap();
        assert_eq!(s.state, "IDLE+DRAIN");
        assert_eq!(s.reason.as_deref(), Some("gpuhost: gpu.ecc: 2 errors"));
        assert!(s.drained_by_gpuhost());
        let s = parse_node(IDLE).unwrap();
        assert_eq!((s.state.as_str(), s.reason), ("IDLE", None));
        assert!(parse_node("slurm_load_node error: Invalid node name specified").is_none());
    }

    #[test]
    fn decisions_follow_nhc() {
        let gpuhost = NodeState {
            state: "IDLE+DRAIN".into(),
            reason: Some("gpuhost: x".into()),
        };
        let admin = NodeState {
            state: "MIXED+DRAIN".into(),
            reason: Some("disk swap".into()),
        };
        let idle = NodeState {
            state: "IDLE".into(),
            reason: None,
        };
        assert!(matches!(
            decide(Severity::Critical, &[], &idle),
            Action::Drained(_)
        ));
        assert!(matches!(
            decide(Severity::Critical, &[], &admin),
            Action::LeftAdminDrain(_)
        ));
        assert!(matches!(
            decide(Severity::Critical, &[], &gpuhost),
            Action::AlreadyDrained(_)
        ));
        assert_eq!(decide(Severity::Ok, &[], &gpuhost), Action::Resumed);
        assert_eq!(decide(Severity::Warning, &[], &gpuhost), Action::Resumed);
        assert!(matches!(
            decide(Severity::Ok, &[], &admin),
            Action::LeftAdminDrain(_)
        ));
        assert_eq!(decide(Severity::Ok, &[], &idle), Action::Nothing);
        assert_eq!(decide(Severity::Unknown, &[], &gpuhost), Action::Nothing);
    }
}
