//! The work that makes a systemd unit gpuhost manages (persistenced, Fabric Manager) enabled,
//! and started on a live host. Reading a unit's state is host access
//! ([`gpuhost_host::units`]).

use anyhow::Result;

use gpuhost_host::host::Host;
use gpuhost_host::units::{active_state, state, UnitState};

use crate::step::Check;
use crate::work::{Change, Work};

/// Add to `check` what it takes for `unit` (shipped by `package`) to be enabled, and started
/// on a live host. When the unit is not on the host yet and `package` is not installed, the
/// enable waits for the transaction that installs it; with the package installed, a missing
/// unit is an error.
pub(crate) fn check_enabled(
    host: &Host,
    check: &mut Check,
    unit: &str,
    package: &str,
    package_installed: bool,
) -> Result<()> {
    let enable = |reason: &str| {
        Change::new(
            Work::EnableUnits {
                units: vec![unit.to_string()],
                package: package.to_string(),
            },
            reason,
        )
    };
    match state(host, unit)? {
        UnitState::Missing if !package_installed => check
            .changes
            .push(enable(&format!("comes with {package}, not installed yet"))),
        UnitState::Missing => {
            return Err(gpuhost_host::error::hinted(
                format!("{unit} is not on the host although {package} is installed"),
                format!("reinstall {package} (dnf reinstall {package})"),
            ))
        }
        UnitState::Disabled => check.changes.push(enable("not enabled")),
        UnitState::Enabled | UnitState::Static => {
            if host.is_live() {
                let state = active_state(host, unit)?;
                if state != "active" {
                    check.changes.push(Change::new(
                        Work::StartUnit(unit.to_string()),
                        format!("enabled, {state}"),
                    ));
                    return Ok(());
                }
                check.notes.push(format!("{unit} enabled and running"));
            } else {
                check.notes.push(format!("{unit} enabled (starts at boot)"));
            }
        }
    }
    Ok(())
}
