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

/// A kernel's build configuration (`.config`), from its devel tree, its modules directory or
/// `/boot`; `None` when none of them is there.
pub fn config_of(host: &Host, kver: &str) -> Option<String> {
    [
        format!("/usr/src/kernels/{kver}/.config"),
        format!("/lib/modules/{kver}/config"),
        format!("/boot/config-{kver}"),
    ]
    .iter()
    .find_map(|p| host.read_opt(p).ok().flatten())
}

/// The compiler named by a kernel `.config`: `(text, gcc major)`; the major is `None` for a
/// compiler that is not GCC. `CONFIG_CC_VERSION_TEXT` first, else `CONFIG_GCC_VERSION`.
pub fn compiler(config: &str) -> Option<(String, Option<u32>)> {
    let value = |key: &str| {
        config.lines().find_map(|l| {
            l.trim()
                .strip_prefix(key)
                .and_then(|r| r.strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_string())
        })
    };
    if let Some(text) = value("CONFIG_CC_VERSION_TEXT") {
        let major = text
            .starts_with("gcc")
            .then(|| {
                text.split_whitespace()
                    .find(|w| w.contains('.') && w.split('.').all(|p| p.parse::<u32>().is_ok()))
                    .and_then(|w| w.split('.').next()?.parse().ok())
            })
            .flatten();
        return Some((text, major));
    }
    let num: u32 = value("CONFIG_GCC_VERSION")?.parse().ok()?;
    (num > 0).then(|| (format!("gcc {num}"), Some(num / 10_000)))
}

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

/// The 64k-page build of a kernel release: Oracle's UEK 64k (`kernel-uek64k`, aarch64 only)
/// names it `<version>-<release>.<arch>.64k` (kernel-uek.spec: `KernelVer=%{version}-%{release}.
/// %{_target_cpu}${Flavour:+.${Flavour}}`), with a dot where RHEL's `kernel-64k` writes `+64k`.
/// Returns the release without that suffix (`….el9uek.aarch64`), the one its packages carry.
pub fn uek64k_base(kver: &str) -> Option<&str> {
    kver.strip_suffix(".64k").filter(|k| k.contains("uek"))
}

/// A header package that exactly matches one kernel, from a profile's `devel_packages`
/// template (`kernel-uek-devel-{kver}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevelPackage {
    /// The rpm name (`kernel-uek-devel`; `kernel-uek64k-devel` for a UEK 64k kernel).
    pub name: String,
    /// What dnf installs: the exact package (`kernel-uek-devel-6.12.0-103.40.4.3.el10uek.aarch64`).
    pub spec: String,
    /// The kernel release an installed package of `name` must carry (its version-release, with
    /// or without its arch): the kernel's, without a 64k suffix.
    pub kver: String,
}

impl DevelPackage {
    /// `tmpl` with `{kver}` put in. A UEK 64k kernel's headers are its own variant's package:
    /// `kernel-uek64k-devel-<version>-<release>.<arch>` (the UEK spec's `kernel%{variant}64k-devel`
    /// subpackage), not `kernel-uek-devel-<…>.64k`, which names no package.
    pub fn for_kernel(tmpl: &str, kver: &str) -> DevelPackage {
        let name_of = |t: &str| {
            t.strip_suffix("-{kver}")
                .map(str::to_string)
                .unwrap_or_else(|| t.to_string())
        };
        if let Some(base) = uek64k_base(kver) {
            if let Some(rest) = tmpl.strip_prefix("kernel-uek-") {
                let t = format!("kernel-uek64k-{rest}");
                return DevelPackage {
                    name: name_of(&t),
                    spec: t.replace("{kver}", base),
                    kver: base.to_string(),
                };
            }
        }
        DevelPackage {
            name: name_of(tmpl),
            spec: tmpl.replace("{kver}", kver),
            kver: kver.to_string(),
        }
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
    #[case("6.12.0-103.40.4.3.el10uek.aarch64.64k", Flavour::Uek)]
    #[case("5.15.0-306.177.4.1.el9uek.aarch64", Flavour::Uek)]
    fn flavour_from_release(#[case] kver: &str, #[case] want: Flavour) {
        assert_eq!(Flavour::of(kver), want);
    }

    #[rstest]
    #[case(
        "kernel-uek-devel-{kver}",
        "6.12.0-103.40.4.3.el10uek.aarch64.64k",
        "kernel-uek64k-devel",
        "kernel-uek64k-devel-6.12.0-103.40.4.3.el10uek.aarch64"
    )]
    #[case(
        "kernel-uek-devel-{kver}",
        "6.12.0-103.40.4.3.el10uek.aarch64",
        "kernel-uek-devel",
        "kernel-uek-devel-6.12.0-103.40.4.3.el10uek.aarch64"
    )]
    #[case(
        "kernel-uek-devel-{kver}",
        "5.15.0-206.153.7.el9uek.x86_64",
        "kernel-uek-devel",
        "kernel-uek-devel-5.15.0-206.153.7.el9uek.x86_64"
    )]
    #[case(
        "kernel-devel-matched-{kver}",
        "5.14.0-427.13.1.el9_4.x86_64",
        "kernel-devel-matched",
        "kernel-devel-matched-5.14.0-427.13.1.el9_4.x86_64"
    )]
    fn headers_match_the_kernel_64k_builds_their_own(
        #[case] tmpl: &str,
        #[case] kver: &str,
        #[case] name: &str,
        #[case] spec: &str,
    ) {
        let d = DevelPackage::for_kernel(tmpl, kver);
        assert_eq!((d.name.as_str(), d.spec.as_str()), (name, spec));
        assert_eq!(d.kver, kver.strip_suffix(".64k").unwrap_or(kver));
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

    #[rstest]
    #[case(
        "CONFIG_CC_VERSION_TEXT=\"gcc (GCC) 11.2.1 20220127 (Red Hat 11.2.1-9.0.1)\"\nCONFIG_GCC_VERSION=110201\n",
        Some(11)
    )]
    #[case(
        "CONFIG_CC_VERSION_TEXT=\"gcc (GCC) 8.5.0 20210514 (Red Hat 8.5.0-22.0.1)\"\n",
        Some(8)
    )]
    #[case(
        "CONFIG_CC_VERSION_TEXT=\"gcc (GCC) 14.2.1 20250110 (Red Hat 14.2.1-7)\"\n",
        Some(14)
    )]
    #[case("CONFIG_CC_IS_GCC=y\nCONFIG_GCC_VERSION=80500\n", Some(8))]
    #[case(
        "CONFIG_CC_VERSION_TEXT=\"clang version 17.0.6 (Red Hat 17.0.6-1)\"\n",
        None
    )]
    fn reads_the_kernels_compiler(#[case] config: &str, #[case] major: Option<u32>) {
        let got = compiler(config);
        assert!(got.is_some(), "{config}");
        assert_eq!(got.and_then(|(_, m)| m), major);
    }

    #[test]
    fn a_config_without_compiler_says_so() {
        assert_eq!(compiler("CONFIG_MODULES=y\n"), None);
    }
}
