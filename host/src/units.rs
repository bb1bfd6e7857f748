//! systemd units as the host has them: whether a unit is enabled is read from the files
//! `systemctl enable` writes (the `.wants/` links of its `[Install]` targets), so a converged
//! host costs no child process; whether it runs, from `systemctl is-active`.

use anyhow::Result;

use crate::host::Host;

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
pub(crate) fn install_targets(text: &str) -> (Vec<String>, Vec<String>) {
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
        host.kind_nofollow(format!("/etc/systemd/system/{target}.{kind}/{unit}"))
            .is_some()
    };
    let enabled =
        wanted.iter().all(|t| linked(t, "wants")) && required.iter().all(|t| linked(t, "requires"));
    Ok(if enabled {
        UnitState::Enabled
    } else {
        UnitState::Disabled
    })
}

/// The units' active states as systemd reports them (`active`, `inactive`, `failed`, …), one
/// `systemctl is-active` for all of them: the one way gpuhost reads whether units run. Live
/// hosts only (an install root runs nothing). `is-active` exits non-zero when any unit is not
/// active; its lines still say each state, so the exit status is not an error here.
pub fn active_states(host: &Host, units: &[&str]) -> Result<Vec<String>> {
    let out = host.systemctl().arg("is-active").args(units).output()?;
    parse_active_states(&out.stdout, units.len()).ok_or_else(|| {
        anyhow::anyhow!(
            "systemctl is-active {} gave no state per unit: {}",
            units.join(" "),
            crate::cmd::tail_lines(&out.stderr, 2)
        )
    })
}

/// One state per unit from `systemctl is-active U1 U2 …`; `None` when the lines do not match.
pub fn parse_active_states(stdout: &str, units: usize) -> Option<Vec<String>> {
    let states: Vec<String> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    (states.len() == units).then_some(states)
}

/// One unit's active state (see [`active_states`]).
pub fn active_state(host: &Host, unit: &str) -> Result<String> {
    active_states(host, &[unit])?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("systemctl is-active {unit} gave no state"))
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
    fn one_state_per_unit_or_none() {
        assert_eq!(
            parse_active_states("active\ninactive\nfailed\n", 3),
            Some(vec!["active".into(), "inactive".into(), "failed".into()])
        );
        assert_eq!(parse_active_states("active\n", 3), None);
        assert_eq!(parse_active_states("", 1), None);
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
