//! The kernel guard: the next boot must not lose the GPUs.
//!
//! A `dnf update` that brings a new kernel makes it the default boot entry (`UPDATEDEFAULT=yes`
//! in `/etc/sysconfig/kernel`). When `apply` cannot give that kernel the NVIDIA module (its
//! headers are in no repo, the DKMS build fails), the guard keeps the default boot entry on the
//! newest kernel that has the module of the driver installed, records why in
//! `/var/lib/gpuhost/kernel-guard.json` (which `gpuhost status` reports as CRITICAL with the
//! command that fixes it), and, once a later apply has built the module for the held-back
//! kernel, makes that kernel the default again and clears the record. A profile opts out with
//! `kernel.guard = false`.
//!
//! The guard judges what the host has, never what a run asked for: the driver is the one rpm
//! holds (the installed versions of `nvidia-kmod-common`), so a refused or failed run that left
//! the old driver in place is judged by the old driver's modules, and a host with no NVIDIA
//! driver at all has nothing to guard.
//!
//! The default is changed the way EL does it: `grubby --set-default /boot/vmlinuz-<kver>` on a
//! live host (grubby writes `saved_entry` through `grub2-editenv`, wherever the grubenv really
//! lives, e.g. on the ESP); in an install root, where grubby cannot run, the same `saved_entry`
//! is written into the root's `/boot/grub2/grubenv` (a 1024-byte block, as grub2-editenv keeps
//! it). [`gpuhost_host::kernel::default_boot`] reads it back the same way in both.

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use gpuhost_host::cmd::Cmd;
use gpuhost_host::host::Host;
use gpuhost_host::kernel::{bls_kernel, Flavour, BLS_DIR, GRUBENV};
use gpuhost_host::kmods;

use gpuhost_host::guard_record::save;
pub use gpuhost_host::guard_record::{has_module, load, Record, GUARD_PATH};
/// grub2-editenv's environment block size.
const GRUBENV_SIZE: usize = 1024;

/// What the guard did after an apply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Decision {
    /// The default boot kernel has the module: nothing to guard.
    Fine,
    /// The default boot entry was moved back from `kernel` to `kept`, for `reason`; `fix` is the
    /// command recorded to build `kernel`'s module and make it the default again.
    Kept {
        kernel: String,
        kept: String,
        reason: String,
        fix: String,
    },
    /// The held-back kernel now has its module: it is the default again.
    Restored { kernel: String },
    /// The default kernel has no module and no installed kernel of its flavour has one either:
    /// nothing to fall back to.
    NoFallback { kernel: String },
    /// The guard could not do its work (the boot loader or its record could not be read or
    /// written): `error` says what, and what to do.
    Failed { error: String },
}

impl Decision {
    /// The next boot is not known to keep the GPUs: a new default kernel was kept back, has
    /// nothing to fall back to, or the guard itself failed.
    pub fn is_trouble(&self) -> bool {
        matches!(
            self,
            Decision::Kept { .. } | Decision::NoFallback { .. } | Decision::Failed { .. }
        )
    }
}

/// The inputs of a guard decision.
pub(crate) struct Guard<'a> {
    pub host: &'a Host,
    /// The driver versions whose modules the host has ([`gpuhost_nvidia::packages::KMOD_COMMON`]
    /// as rpm lists it after the steps; two while an interrupted swap left both): a kernel has
    /// the module when modprobe would load an `nvidia` module of one of them.
    pub drivers: &'a [String],
    pub flavour: Flavour,
    pub installed: &'a [String],
    pub default_boot: Option<&'a str>,
    /// The kernel the apply served as its target (the running one on a live host).
    pub target: Option<&'a str>,
    /// Why the apply could not build the module (the failed step and its reason), if it failed.
    pub failure: Option<String>,
    /// The command line a fix repeats (`gpuhost apply --profile ol8-uek`).
    pub apply_command: String,
}

impl Guard<'_> {
    /// Decide, and carry it out: set the default boot entry, write or clear the record.
    pub(crate) fn settle(&self) -> Result<Decision> {
        let record = load(self.host)?;
        // A held-back kernel whose module now exists becomes the default again.
        if let Some(r) = &record {
            if self.installed.contains(&r.kernel) && has_module(self.host, &r.kernel, self.drivers)
            {
                set_default(self.host, &r.kernel)?;
                self.host.remove_file(GUARD_PATH)?;
                return Ok(Decision::Restored {
                    kernel: r.kernel.clone(),
                });
            }
            if !self.installed.contains(&r.kernel) {
                // The held-back kernel was removed: nothing left to fix.
                self.host.remove_file(GUARD_PATH)?;
            }
        }
        let Some(d) = self.default_boot else {
            return Ok(Decision::Fine);
        };
        if Flavour::of(d) != self.flavour || has_module(self.host, d, self.drivers) {
            return Ok(Decision::Fine);
        }
        // The newest kernel of the flavour with the module: the target first (it served).
        let fallback = self
            .target
            .filter(|t| *t != d && has_module(self.host, t, self.drivers))
            .map(str::to_string)
            .or_else(|| {
                self.installed
                    .iter()
                    .rev()
                    .filter(|k| k.as_str() != d && Flavour::of(k) == self.flavour)
                    .find(|k| has_module(self.host, k, self.drivers))
                    .cloned()
            });
        let Some(kept) = fallback else {
            return Ok(Decision::NoFallback {
                kernel: d.to_string(),
            });
        };
        set_default(self.host, &kept)?;
        let state = kmods::state(self.host, d, "nvidia")
            .map(|s| s.describe())
            .unwrap_or_else(|e| format!("{e:#}"));
        let driver = self.drivers.join(" or ");
        let reason = match &self.failure {
            Some(f) => format!("{f} (module for {d}: {state})"),
            None => format!("no NVIDIA {driver} module for {d}: {state}"),
        };
        let fix = format!("{} --kernel-release {d}", self.apply_command);
        save(
            self.host,
            &Record {
                kernel: d.to_string(),
                kept: kept.clone(),
                driver,
                reason: reason.clone(),
                fix: fix.clone(),
                at: gpuhost_host::fsutil::rfc3339(gpuhost_host::fsutil::unix_now()),
            },
        )?;
        Ok(Decision::Kept {
            kernel: d.to_string(),
            kept,
            reason,
            fix,
        })
    }
}

/// The BLS entry id (file stem under `/boot/loader/entries/`) that boots `kver`.
pub(crate) fn bls_entry(host: &Host, kver: &str) -> Result<Option<String>> {
    for name in host.list_dir(BLS_DIR).unwrap_or_default() {
        let Some(id) = name.strip_suffix(".conf") else {
            continue;
        };
        if let Some(text) = host.read_opt(format!("{BLS_DIR}/{name}"))? {
            if bls_kernel(&text).as_deref() == Some(kver) {
                return Ok(Some(id.to_string()));
            }
        }
    }
    Ok(None)
}

/// Make `kver` the default boot kernel.
pub(crate) fn set_default(host: &Host, kver: &str) -> Result<()> {
    if host.is_live() {
        Cmd::new("grubby")
            .arg("--set-default")
            .arg(format!("/boot/vmlinuz-{kver}"))
            .run()?;
        return Ok(());
    }
    let entry = match bls_entry(host, kver)? {
        Some(e) => e,
        None => future_entry(host, kver)?,
    };
    let old = host.read_opt(GRUBENV)?.unwrap_or_default();
    let new = grubenv_set(&old, "saved_entry", &entry)?;
    host.write_atomic(GRUBENV, new.as_bytes(), 0o644)
}

/// The entry id that boots `kver` in a root without its boot loader entry (an image whose
/// entries are written at its first boot): `<machine-id>-<kver>`, the id `kernel-install add`
/// gives the entry it writes, else `<kver>`. [`gpuhost_host::kernel::default_boot`] reads
/// either back as `kver` (an entry id naming an installed kernel).
fn future_entry(host: &Host, kver: &str) -> Result<String> {
    let mid = host.read_opt("/etc/machine-id")?.unwrap_or_default();
    let mid = mid.trim();
    Ok(
        if mid.is_empty() || !mid.chars().all(|c| c.is_ascii_hexdigit()) {
            kver.to_string()
        } else {
            format!("{mid}-{kver}")
        },
    )
}

/// `text` (a grubenv block) with `key=value` set, padded with `#` to 1024 bytes as
/// grub2-editenv writes it.
pub(crate) fn grubenv_set(text: &str, key: &str, value: &str) -> Result<String> {
    let mut lines: Vec<String> = vec!["# GRUB Environment Block".to_string()];
    let mut done = false;
    for l in text.lines() {
        let l = l.trim_end_matches('#');
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.split_once('=').map(|(k, _)| k) == Some(key) {
            lines.push(format!("{key}={value}"));
            done = true;
        } else {
            lines.push(l.to_string());
        }
    }
    if !done {
        lines.push(format!("{key}={value}"));
    }
    let mut out = lines.join("\n");
    out.push('\n');
    if out.len() > GRUBENV_SIZE {
        return Err(anyhow!(
            "the grub environment block would exceed {GRUBENV_SIZE} bytes"
        ));
    }
    out.push_str(&"#".repeat(GRUBENV_SIZE - out.len()));
    Ok(out)
}

/// The last apply that converged (profile, `--set`s, step selection): what the kernel trigger
/// (`gpuhost kernel-added`, run by gpuhost-kernel@KVER.service) repeats for a new kernel.
pub const LAST_APPLY_PATH: &str = "/var/lib/gpuhost/last-apply.json";

pub(crate) fn save_last_apply(host: &Host, args: &crate::recorded::ResumeArgs) -> Result<()> {
    host.write_json(LAST_APPLY_PATH, args, 0o644)
}

pub fn load_last_apply(host: &Host) -> Result<Option<crate::recorded::ResumeArgs>> {
    host.read_json_opt(
        LAST_APPLY_PATH,
        "run gpuhost apply --profile P once to rewrite it",
    )
}

/// rpm's transaction lock (`%_rpmlock_path`, `%{_dbpath}/.rpm.lock`): rpm holds a write
/// `fcntl` lock on it for the whole transaction, kernel scriptlets (`kernel-install add`)
/// included.
pub(crate) const RPM_LOCK: &str = "/var/lib/rpm/.rpm.lock";

/// Wait until no rpm transaction runs (a shared `fcntl` lock on rpm's lock file can be taken),
/// polling every `poll`, for at most `timeout`. Returns how long it waited.
pub fn wait_for_rpm(
    host: &Host,
    timeout: std::time::Duration,
    poll: std::time::Duration,
) -> Result<std::time::Duration> {
    let start = std::time::Instant::now();
    let path = host.path(RPM_LOCK);
    if !host.exists(RPM_LOCK) {
        // No lock file: rpm has never run a transaction here.
        return Ok(start.elapsed());
    }
    let file = host.open_rw_create(RPM_LOCK, 0o644)?;
    loop {
        match rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
            Ok(()) => {
                rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::Unlock)
                    .map_err(|e| anyhow!("cannot unlock {}: {e}", path.display()))?;
                return Ok(start.elapsed());
            }
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::ACCESS => {
                if start.elapsed() >= timeout {
                    return Err(gpuhost_host::error::hinted(
                        format!(
                            "an rpm transaction still holds {} after {} s",
                            path.display(),
                            timeout.as_secs()
                        ),
                        "let the running dnf finish, then run gpuhost kernel-added again",
                    ));
                }
                std::thread::sleep(poll);
            }
            Err(e) => return Err(anyhow!("cannot lock {}: {e}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grubenv_keeps_other_keys_and_its_size() -> Result<()> {
        let old = format!(
            "# GRUB Environment Block\nsaved_entry=abc-1\nkernelopts=root=/dev/sda1 ro\n{}",
            "#".repeat(900)
        );
        let new = grubenv_set(&old, "saved_entry", "abc-2")?;
        assert_eq!(new.len(), 1024);
        assert!(new.contains("\nsaved_entry=abc-2\n"));
        assert!(new.contains("\nkernelopts=root=/dev/sda1 ro\n"));
        assert!(!new.contains("abc-1"));
        let fresh = grubenv_set("", "saved_entry", "x")?;
        assert!(fresh.starts_with("# GRUB Environment Block\nsaved_entry=x\n#"));
        assert!(grubenv_set("", "k", &"v".repeat(1100)).is_err());
        Ok(())
    }
}
