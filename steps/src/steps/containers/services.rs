//! `services`: `docker.service` and `containerd.service` enabled (offline in an install root
//! through `systemctl --root`), docker running on a live host, and the owed docker restart
//! paid. The restart is owed in gpuhost's state (by `docker` and `daemon-json`, before their
//! change), so it survives a crash. In an install root it cannot happen: it is reported
//! deferred and, once the step is otherwise converged, handed over to the first boot (which
//! starts docker with the new packages and config) and cleared.

use anyhow::{anyhow, Result};

use super::RESTART_DOCKER;
use crate::error::hinted;
use crate::runner::{Action, Change, Check, Ctx, Step};

pub struct Services;

/// Docker's post-install docs enable exactly these two.
pub const UNITS: [&str; 2] = ["docker.service", "containerd.service"];
const RESTART: &str = "systemctl restart docker.service";

/// `systemctl is-enabled` output (one state per unit, in order) as `(unit, state)`.
pub fn parse_is_enabled<'a>(units: &[&'a str], stdout: &str) -> Option<Vec<(&'a str, String)>> {
    let states: Vec<&str> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if states.len() != units.len() {
        return None;
    }
    Some(
        units
            .iter()
            .zip(states)
            .map(|(u, s)| (*u, s.to_string()))
            .collect(),
    )
}

/// Unit-file states that count as "will start at boot" (or cannot be enabled by design).
fn is_on(state: &str) -> bool {
    matches!(
        state,
        "enabled" | "enabled-runtime" | "static" | "alias" | "indirect" | "generated"
    )
}

impl Step for Services {
    fn id(&self) -> &'static str {
        "services"
    }

    fn summary(&self) -> &'static str {
        "docker and containerd enabled; docker restarted only when its packages or config changed"
    }

    fn check(&self, ctx: &mut Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let installed = |u: &str| {
            ["/usr/lib/systemd/system", "/etc/systemd/system"]
                .iter()
                .any(|d| ctx.host.path(format!("{d}/{u}")).exists())
        };
        if ctx.dry_run && !UNITS.iter().all(|u| installed(u)) {
            // A plan on a fresh host: the docker step has not installed the units yet.
            check.changes.push(Change::custom(
                format!("systemctl enable {}", UNITS.join(" ")),
                "once the docker step has installed them",
            ));
            return Ok(check);
        }
        let cmd = ctx.host.systemctl().arg("is-enabled").args(UNITS);
        let out = cmd.output()?;
        let Some(states) = parse_is_enabled(&UNITS, &out.stdout) else {
            return Err(hinted(
                format!(
                    "cannot tell whether {} are enabled: {}",
                    UNITS.join(" and "),
                    cmd.failure(&out)
                ),
                "install Docker CE first (the docker step)",
            ));
        };
        let off: Vec<String> = states
            .iter()
            .filter(|(_, s)| !is_on(s))
            .map(|(u, _)| (*u).to_string())
            .collect();
        if !off.is_empty() {
            check.changes.push(Change::custom(
                format!("systemctl enable {}", off.join(" ")),
                format!(
                    "{} at boot",
                    states
                        .iter()
                        .filter(|(_, s)| !is_on(s))
                        .map(|(u, s)| format!("{u} is {s}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let owed = ctx.state.pending.get(RESTART_DOCKER).cloned();
        if ctx.host.is_live() {
            let active = ctx
                .host
                .systemctl()
                .args(["is-active", "docker.service"])
                .output()?;
            let state = active.stdout.trim().to_string();
            match (&owed, state == "active") {
                (Some(why), _) => check
                    .changes
                    .push(Change::custom(RESTART, format!("owed: {why}"))),
                (None, false) => check.changes.push(Change::custom(
                    RESTART,
                    format!("docker.service is {state}, not running"),
                )),
                (None, true) => {}
            }
        } else if let Some(why) = &owed {
            check.deferred.push(format!(
                "{RESTART} (owed: {why}); in an install root the first boot starts docker with it"
            ));
            if check.changes.is_empty() && !ctx.dry_run {
                // Reported; the root's first boot starts docker with the new packages and config.
                ctx.state.settle(ctx.host, RESTART_DOCKER)?;
            }
        }
        if check.changes.is_empty() {
            check.notes.push(format!("{} enabled", UNITS.join(", ")));
        }
        Ok(check)
    }

    fn apply(&self, ctx: &mut Ctx<'_>, changes: &[Change]) -> Result<()> {
        for c in changes {
            match &c.action {
                Action::Custom(w) if w.starts_with("systemctl enable ") => {
                    let units: Vec<&str> =
                        w["systemctl enable ".len()..].split_whitespace().collect();
                    ctx.host.systemctl().arg("enable").args(units).run()?;
                }
                Action::Custom(w) if w == RESTART => {
                    ctx.host
                        .systemctl()
                        .args(["restart", "docker.service"])
                        .run()?;
                    ctx.state.settle(ctx.host, RESTART_DOCKER)?;
                }
                other => return Err(anyhow!("step services cannot {other}: unknown action")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_is_enabled_in_unit_order() {
        let got = parse_is_enabled(&UNITS, "disabled\nenabled\n");
        assert_eq!(
            got,
            Some(vec![
                ("docker.service", "disabled".to_string()),
                ("containerd.service", "enabled".to_string())
            ])
        );
        // systemctl stops at a missing unit: too few lines is "cannot tell", not "disabled".
        assert_eq!(parse_is_enabled(&UNITS, ""), None);
    }
}
