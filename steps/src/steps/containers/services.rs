//! `services`: `docker.service` and `containerd.service` enabled (read from the `.wants/` links
//! `systemctl enable` writes, so a converged host costs no process; enabled offline in an
//! install root through `systemctl --root`), docker running on a live host, and the owed docker restart
//! paid. The restart is owed in gpuhost's state (by `docker` and `daemon-json`, before their
//! change), so it survives a crash. In an install root it cannot happen: it is reported
//! deferred and, once the step is otherwise converged, handed over to the first boot (which
//! starts docker with the new packages and config) and cleared.

use anyhow::{anyhow, Result};

use super::RESTART_DOCKER;
use crate::error::hinted;
use crate::runner::{Action, Change, Check, Ctx, Step};
use crate::units::{self, UnitState};

pub struct Services;

/// Docker's post-install docs enable exactly these two.
pub const UNITS: [&str; 2] = ["docker.service", "containerd.service"];
const RESTART: &str = "systemctl restart docker.service";

impl Step for Services {
    fn id(&self) -> &'static str {
        "services"
    }

    fn summary(&self) -> &'static str {
        "docker and containerd enabled; docker restarted only when its packages or config changed"
    }

    fn check(&self, ctx: &mut Ctx<'_>) -> Result<Check> {
        let mut check = Check::default();
        let (mut missing, mut off) = (Vec::new(), Vec::new());
        for unit in UNITS {
            match units::state(ctx.host, unit)? {
                UnitState::Missing => missing.push(unit),
                UnitState::Disabled => off.push(unit),
                UnitState::Enabled | UnitState::Static => {}
            }
        }
        if !missing.is_empty() {
            if !ctx.dry_run {
                return Err(hinted(
                    format!("{} not on the host", missing.join(" and ")),
                    "install Docker CE first (the docker step)",
                ));
            }
            // A plan on a fresh host: the docker step has not installed the units yet.
            check.changes.push(Change::custom(
                format!("systemctl enable {}", UNITS.join(" ")),
                "once the docker step has installed them",
            ));
            return Ok(check);
        }
        if !off.is_empty() {
            check.changes.push(Change::custom(
                format!("systemctl enable {}", off.join(" ")),
                format!("{} not enabled at boot", off.join(", ")),
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
