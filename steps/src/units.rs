//! systemd units gpuhost manages (persistenced, Fabric Manager, docker, containerd): enabled,
//! and started on a live host. Whether a unit is enabled is read from the files `systemctl enable` writes (the
//! `.wants/` links of its `[Install]` targets), so a converged host costs no child process.

use anyhow::Result;

use crate::host::Host;
use crate::runner::{Change, Check};

/// Where unit files live, in the order systemd reads them.
const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// What the unit's state is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitState {
    /// No unit file.
    Missing,
    /// The unit has no `[Install]` targets: nothing to enable.
    Static,
    Enabled,
    Disabled,
}

/// `(WantedBy targets, RequiredBy targets)` of a unit file's `[Install]` section.
pub fn install_targets(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut wanted, mut required) = (Vec::new(), Vec::new());
    let mut in_install = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_install = line == "[Install]";
            continue;
        }
        if !in_install {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let targets = v.split_whitespace().map(str::to_string);
            match k.trim() {
                "WantedBy" => wanted.extend(targets),
                "RequiredBy" => required.extend(targets),
                _ => {}
            }
        }
    }
    (wanted, required)
}

pub fn state(host: &Host, unit: &str) -> Result<UnitState> {
    let mut text = None;
    for d in UNIT_DIRS {
        if let Some(t) = host.read_opt(format!("{d}/{unit}"))? {
            text = Some(t);
            break;
        }
    }
    let Some(text) = text else {
        return Ok(UnitState::Missing);
    };
    let (wanted, required) = install_targets(&text);
    if wanted.is_empty() && required.is_empty() {
        return Ok(UnitState::Static);
    }
    let linked = |target: &str, kind: &str| {
        host.path(format!("/etc/systemd/system/{target}.{kind}/{unit}"))
            .symlink_metadata()
            .is_ok()
    };
    let enabled =
        wanted.iter().all(|t| linked(t, "wants")) && required.iter().all(|t| linked(t, "requires"));
    Ok(if enabled {
        UnitState::Enabled
    } else {
        UnitState::Disabled
    })
}

/// Add to `check` what it takes for `unit` (shipped by `package`) to be enabled, and started
/// on a live host. `missing_ok`: the unit comes with a package a change of this run installs.
pub fn check_enabled(
    host: &Host,
    check: &mut Check,
    unit: &str,
    package: &str,
    missing_ok: bool,
) -> Result<()> {
    match state(host, unit)? {
        UnitState::Missing if missing_ok => check.changes.push(Change::custom(
            format!("enable {unit}"),
            format!("comes with {package}, not installed yet"),
        )),
        UnitState::Missing => {
            return Err(crate::error::hinted(
                format!("{unit} is not on the host although {package} is installed"),
                format!("reinstall {package} (dnf reinstall {package})"),
            ))
        }
        UnitState::Disabled => check
            .changes
            .push(Change::custom(format!("enable {unit}"), "not enabled")),
        UnitState::Enabled | UnitState::Static => {
            if host.is_live() {
                let active = host
                    .systemctl()
                    .args(["is-active", "--quiet", unit])
                    .output()?
                    .success();
                if !active {
                    check.changes.push(Change::custom(
                        format!("start {unit}"),
                        "enabled, not running",
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

/// Carry out an `enable <unit>` or `start <unit>` change.
pub fn apply_change(host: &Host, what: &str) -> Result<bool> {
    if let Some(unit) = what.strip_prefix("enable ") {
        let mut cmd = host.systemctl().arg("enable");
        if host.is_live() {
            cmd = cmd.arg("--now");
        }
        cmd.arg(unit).run()?;
        return Ok(true);
    }
    if let Some(unit) = what.strip_prefix("start ") {
        host.systemctl().args(["start", unit]).run()?;
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_install_targets() {
        let unit = "[Unit]\nDescription=x\nWantedBy=not-this.target\n\n[Service]\nExecStart=/bin/x\n\n[Install]\nWantedBy=multi-user.target graphical.target\nRequiredBy=y.service\n";
        let (w, r) = install_targets(unit);
        assert_eq!(w, vec!["multi-user.target", "graphical.target"]);
        assert_eq!(r, vec!["y.service"]);
        assert_eq!(
            install_targets("[Service]\nExecStart=/x\n"),
            (vec![], vec![])
        );
    }

    #[test]
    fn enabled_means_linked_from_every_target() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        assert_eq!(state(&host, "a.service")?, UnitState::Missing);
        let lib = dir.path().join("usr/lib/systemd/system");
        std::fs::create_dir_all(&lib)?;
        std::fs::write(
            lib.join("a.service"),
            "[Service]\nExecStart=/a\n[Install]\nWantedBy=multi-user.target\n",
        )?;
        assert_eq!(state(&host, "a.service")?, UnitState::Disabled);
        let wants = dir
            .path()
            .join("etc/systemd/system/multi-user.target.wants");
        std::fs::create_dir_all(&wants)?;
        std::os::unix::fs::symlink("/usr/lib/systemd/system/a.service", wants.join("a.service"))?;
        assert_eq!(state(&host, "a.service")?, UnitState::Enabled);
        Ok(())
    }
}
