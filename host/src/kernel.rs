//! Kernel releases: flavour (UEK or RHCK), installed kernels, the default boot kernel.
//!
//! All of it is read from files (`/lib/modules`, `/boot/grub2/grubenv`, BLS entries,
//! `/etc/sysconfig/kernel`), so it works the same on a live host and in an install root and
//! costs no child process.

use std::fmt;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::rpm::vercmp;

/// Oracle Linux kernel flavours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// Unbreakable Enterprise Kernel (`…el8uek…`).
    Uek,
    /// Red Hat Compatible Kernel (`…el8_10…`).
    Rhck,
}

impl Flavour {
    pub fn of(kver: &str) -> Flavour {
        if kver.contains("uek") {
            Flavour::Uek
        } else {
            Flavour::Rhck
        }
    }

    /// The rpm package name of the kernel itself.
    pub fn kernel_package(self) -> &'static str {
        match self {
            Flavour::Uek => "kernel-uek",
            Flavour::Rhck => "kernel",
        }
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavour::Uek => "UEK",
            Flavour::Rhck => "RHCK",
        })
    }
}

/// Installed kernel releases (those with `/lib/modules/<kver>/vmlinuz`), oldest first.
pub fn installed(host: &Host) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for name in host.list_dir("/lib/modules")? {
        if host.exists(format!("/lib/modules/{name}/vmlinuz")) {
            out.push(name);
        }
    }
    out.sort_by(|a, b| vercmp(a, b));
    Ok(out)
}

/// The newest installed kernel of a flavour.
pub fn newest_of(kernels: &[String], flavour: Flavour) -> Option<&String> {
    kernels.iter().rev().find(|k| Flavour::of(k) == flavour)
}

/// grub2's environment block, where `saved_entry` names the default boot entry.
pub const GRUBENV: &str = "/boot/grub2/grubenv";
/// The Boot Loader Specification entries (`<machine-id>-<kver>.conf`).
pub const BLS_DIR: &str = "/boot/loader/entries";

/// The kernel the boot loader starts next: grubenv's `saved_entry` and its BLS entry, else the
/// newest installed kernel of `/etc/sysconfig/kernel`'s `DEFAULTKERNEL`.
pub fn default_boot(host: &Host, installed: &[String]) -> Result<Option<String>> {
    if let Some(env) = host.read_opt(GRUBENV)? {
        if let Some(entry) = env
            .lines()
            .find_map(|l| l.strip_prefix("saved_entry="))
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let bls = format!("{BLS_DIR}/{entry}.conf");
            if let Some(text) = host.read_opt(&bls)? {
                if let Some(k) = bls_kernel(&text) {
                    return Ok(Some(k));
                }
            }
            // Legacy grub: the saved entry may be a title that names the kernel.
            if let Some(k) = installed.iter().find(|k| entry.contains(k.as_str())) {
                return Ok(Some(k.clone()));
            }
        }
    }
    let flavour = host
        .read_opt("/etc/sysconfig/kernel")?
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.trim().strip_prefix("DEFAULTKERNEL="))
                .map(|v| v.trim().trim_matches('"').to_string())
        })
        .map(|pkg| {
            if pkg.contains("uek") {
                Flavour::Uek
            } else {
                Flavour::Rhck
            }
        });
    Ok(match flavour {
        Some(f) => newest_of(installed, f).cloned(),
        None => installed.last().cloned(),
    })
}

/// The kernel release a BLS entry boots (`linux /vmlinuz-<kver>`, or its `version` line).
pub fn bls_kernel(text: &str) -> Option<String> {
    let field = |key: &str| {
        text.lines().find_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix(key)?;
            rest.starts_with(char::is_whitespace)
                .then(|| rest.trim().to_string())
        })
    };
    if let Some(linux) = field("linux") {
        let file = linux.rsplit('/').next().unwrap_or(&linux);
        if let Some(k) = file.strip_prefix("vmlinuz-") {
            return Some(k.to_string());
        }
    }
    field("version")
}

/// The running kernel's release (live hosts only).
pub fn running() -> Result<String> {
    let s = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(|e| anyhow::anyhow!("reading /proc/sys/kernel/osrelease: {e}"))?;
    Ok(s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("5.15.0-200.131.27.el8uek.x86_64", Flavour::Uek)]
    #[case("5.4.17-2136.300.7.el8uek.x86_64", Flavour::Uek)]
    #[case("4.18.0-513.5.1.el8_9.x86_64", Flavour::Rhck)]
    #[case("5.14.0-427.13.1.el9_4.x86_64", Flavour::Rhck)]
    fn flavour_from_release(#[case] kver: &str, #[case] want: Flavour) {
        assert_eq!(Flavour::of(kver), want);
    }

    #[test]
    fn bls_entry_names_its_kernel() {
        let e = "title Oracle Linux Server (5.15.0-200.131.27.el8uek.x86_64) 8.10\nversion 5.15.0-200.131.27.el8uek.x86_64\nlinux /vmlinuz-5.15.0-200.131.27.el8uek.x86_64\ninitrd /initramfs-5.15.0-200.131.27.el8uek.x86_64.img $tuned_initrd\n";
        assert_eq!(
            bls_kernel(e).as_deref(),
            Some("5.15.0-200.131.27.el8uek.x86_64")
        );
    }

    #[test]
    fn default_boot_from_grubenv_and_bls() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let r = dir.path();
        std::fs::create_dir_all(r.join("boot/grub2"))?;
        std::fs::create_dir_all(r.join("boot/loader/entries"))?;
        std::fs::write(
            r.join("boot/grub2/grubenv"),
            "# GRUB Environment Block\nsaved_entry=abc-4.18.0-553.16.1.el8_10.x86_64\n",
        )?;
        std::fs::write(
            r.join("boot/loader/entries/abc-4.18.0-553.16.1.el8_10.x86_64.conf"),
            "linux /vmlinuz-4.18.0-553.16.1.el8_10.x86_64\n",
        )?;
        let host = Host::new(r)?;
        let kernels = vec!["5.15.0-200.131.27.el8uek.x86_64".to_string()];
        assert_eq!(
            default_boot(&host, &kernels)?.as_deref(),
            Some("4.18.0-553.16.1.el8_10.x86_64")
        );
        Ok(())
    }

    #[test]
    fn default_boot_falls_back_to_sysconfig_kernel() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("etc/sysconfig"))?;
        std::fs::write(
            dir.path().join("etc/sysconfig/kernel"),
            "UPDATEDEFAULT=yes\nDEFAULTKERNEL=kernel-uek\n",
        )?;
        let host = Host::new(dir.path())?;
        let kernels = vec![
            "4.18.0-553.16.1.el8_10.x86_64".to_string(),
            "5.15.0-200.131.27.el8uek.x86_64".to_string(),
            "5.15.0-204.147.6.2.el8uek.x86_64".to_string(),
        ];
        assert_eq!(
            default_boot(&host, &kernels)?.as_deref(),
            Some("5.15.0-204.147.6.2.el8uek.x86_64")
        );
        Ok(())
    }
}
