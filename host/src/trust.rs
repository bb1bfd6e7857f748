//! The rule for gpuhost's own records under `/var/lib/gpuhost` (the journal, `last-apply.json`,
//! the built-by records): a record decides something (which driver a rollback installs, which
//! packages a move to prebuilt kmods removes) only when it is root's, writable by no one else,
//! and no link — sshd's StrictModes being the model. One rule, read by every such decision.

use anyhow::Result;

use crate::host::Host;
use crate::invalid;
use crate::rootfs::Kind;

/// gpuhost's state folder in the root.
pub const STATE_DIR: &str = "/var/lib/gpuhost";

/// Why `path` (in the root) is not to be trusted, when it is not: a link (its target said), not
/// root's (its uid said), or writable by group or others (its mode said). `None` when it is
/// trusted, or not there (left to the reader).
pub fn untrusted(host: &Host, path: &str) -> Option<String> {
    match host.kind_nofollow(path) {
        None => return None,
        Some(Kind::Symlink) => {
            let target = host
                .read_link(path)
                .map_or_else(|e| format!("{e:#}"), |t| t.display().to_string());
            return Some(format!("{path} is a link ({target})"));
        }
        Some(_) => {}
    }
    let (uid, mode) = host.owner_mode(path)?;
    if uid != 0 {
        return Some(format!("{path} is owned by uid {uid}, not root"));
    }
    if mode & 0o022 != 0 {
        return Some(format!("{path} is writable by others (mode {mode:o})"));
    }
    None
}

/// Before any change (issue 53, item 5): gpuhost's state folder must lie inside the root. A
/// `/var/lib/gpuhost` linked out of it would take gpuhost's lock, journal and records from the
/// build host: bad input (exit 2), naming the link.
pub fn state_dir_inside(host: &Host) -> Result<()> {
    if host.is_live() {
        return Ok(());
    }
    match host.escaping_link(STATE_DIR)? {
        None => Ok(()),
        Some((link, target, _)) => Err(invalid!(
            "{} is a link to {}, outside the install root: gpuhost keeps its lock, journal and records in {STATE_DIR} of the root only; make it a folder of the root",
            host.path(&link).display(),
            target.display()
        )),
    }
}

/// [`untrusted`] for `path` and every folder from [`STATE_DIR`] down to it: the first reason,
/// if any.
pub fn untrusted_under_state(host: &Host, path: &str) -> Option<String> {
    let rest = path.strip_prefix(STATE_DIR)?;
    let mut at = STATE_DIR.to_string();
    if let Some(why) = untrusted(host, &at) {
        return Some(why);
    }
    for part in rest.split('/').filter(|p| !p.is_empty()) {
        at = format!("{at}/{part}");
        if let Some(why) = untrusted(host, &at) {
            return Some(why);
        }
    }
    None
}

/// `path` as a record gpuhost decides by: bad input (exit 2) naming the path and its owner,
/// mode or link, with what to do, when it is not [`untrusted`]-free. `what` says who trusts it
/// (`rollback trusts only root's journal`).
pub fn require(host: &Host, path: &str, what: &str) -> Result<()> {
    let Some(why) = untrusted(host, path) else {
        return Ok(());
    };
    let fix = if why.contains(" is a link ") {
        "gpuhost's state must be the root's own; move it aside and run gpuhost apply again"
            .to_string()
    } else if why.contains("not root") {
        format!("{what}; chown root {path} after checking it, or move it aside")
    } else {
        format!("{what}, which no other user may write; chmod go-w {path} after checking it")
    };
    Err(invalid!("{why}: {fix}"))
}

/// Warn of `msg` once per run: a record is read by several checks of one run, and one
/// warning of it is enough.
pub fn warn_once(msg: String) {
    static SAID: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    if let Ok(mut said) = SAID.lock() {
        if !said.insert(msg.clone()) {
            return;
        }
    }
    tracing::warn!("{msg}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_record_is_trusted_only_as_roots_own_file() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        let rec = format!("{STATE_DIR}/built-by/build-deps");
        host.write_atomic(&rec, b"dkms\n", 0o644)?;
        let real = host.real_path(&rec)?;
        // The tests run as root (rpm's roots need it); another owner is set by chown.
        assert_eq!(untrusted_under_state(&host, &rec), None);
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o666))?;
        let why = untrusted_under_state(&host, &rec).unwrap_or_default();
        assert!(why.contains("mode 666"), "{why}");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o644))?;
        std::os::unix::fs::chown(&real, Some(1000), None)?;
        let why = untrusted_under_state(&host, &rec).unwrap_or_default();
        assert!(why.contains("uid 1000"), "{why}");
        std::fs::remove_file(&real)?;
        std::os::unix::fs::symlink("/etc/passwd", &real)?;
        let why = untrusted_under_state(&host, &rec).unwrap_or_default();
        assert!(why.contains("is a link (/etc/passwd)"), "{why}");
        assert!(require(&host, &rec, "x").is_err());
        // A folder on the way that others may write.
        std::fs::remove_file(&real)?;
        let folder = host.real_path(format!("{STATE_DIR}/built-by"))?;
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777))?;
        let why = untrusted_under_state(&host, &rec).unwrap_or_default();
        assert!(why.contains("built-by is writable by others"), "{why}");
        Ok(())
    }
}
