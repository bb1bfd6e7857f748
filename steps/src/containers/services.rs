//! `services`: `docker.service` and `containerd.service` enabled (read from the `.wants/` links
//! `systemctl enable` writes, so a converged host costs no process; enabled offline in an
//! install root through `systemctl --root`), docker running on a live host, and the owed docker restart
//! paid. The restart is owed in gpuhost's state (by `docker` and `daemon-json`, before their
//! change), so it survives a crash. In an install root it cannot happen: it is reported
//! deferred and, once the step is otherwise converged, handed over to the first boot (which
//! starts docker with the new packages and config) and cleared.

use anyhow::Result;

use crate::step::{Change, Check, Ctx, Step, Work};
use gpuhost_host::units::{self, UnitState};

/// The state key of the owed docker restart.
pub(crate) const RESTART_DOCKER: &str = "restart:docker.service";

/// The owed docker restart, recorded before a change that makes it owed.
pub(crate) fn docker_restart(reason: &str) -> crate::step::Owed {
    crate::step::Owed {
        key: RESTART_DOCKER,
        reason: reason.to_string(),
    }
}

pub(crate) struct Services;

/// Docker's post-install docs enable exactly these two.
pub(crate) const UNITS: [&str; 2] = ["docker.service", "containerd.service"];
const RESTART: &str = "systemctl restart docker.service";

fn enable(units: &[&str]) -> Work {
    Work::EnableUnits {
        units: units.iter().map(|u| u.to_string()).collect(),
        package: "docker-ce".to_string(),
    }
}

fn restart() -> Work {
    Work::RestartUnit {
        unit: "docker.service".to_string(),
        settles: RESTART_DOCKER,
    }
}

impl Step for Services {
    fn id(&self) -> &'static str {
        "services"
    }

    fn summary(&self) -> &'static str {
        "docker and containerd enabled; docker restarted only when its packages or config changed"
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
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
            // A fresh host: the docker step's transaction brings them (enabling them fails,
            // naming docker-ce, if it did not).
            check.changes.push(Change::new(
                enable(&UNITS),
                format!(
                    "{} not on the host yet: once the docker step has installed them",
                    missing.join(" and ")
                ),
            ));
            return Ok(check);
        }
        if !off.is_empty() {
            check.changes.push(Change::new(
                enable(&off),
                format!("{} not enabled at boot", off.join(", ")),
            ));
        }
        let owed = ctx.state.pending.get(RESTART_DOCKER).cloned();
        if ctx.host.is_live() {
            let state = gpuhost_host::units::active_state(ctx.host, "docker.service")?;
            match (&owed, state == "active") {
                (Some(why), _) => check
                    .changes
                    .push(Change::new(restart(), format!("owed: {why}"))),
                (None, false) => check.changes.push(Change::new(
                    restart(),
                    format!("docker.service is {state}, not running"),
                )),
                (None, true) => {}
            }
        } else if let Some(why) = &owed {
            check.deferred.push(format!(
                "{RESTART} (owed: {why}); in an install root the first boot starts docker with it"
            ));
            if check.changes.is_empty() {
                // Reported; the root's first boot starts docker with the new packages and config.
                check.settles.push(RESTART_DOCKER);
            }
        }
        if check.changes.is_empty() {
            check.notes.push(format!("{} enabled", UNITS.join(", ")));
        }
        Ok(check)
    }
}
