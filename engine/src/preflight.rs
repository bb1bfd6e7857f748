//! What a run checks before it touches anything, shared by `apply` and `bundle`: the host is
//! the Oracle Linux release, architecture and kernel flavour the profile is for, a
//! `--kernel-release` is one, and the caller is root.

use anyhow::Result;

use gpuhost_host::facts::Facts;
use gpuhost_host::host::Host;
use gpuhost_host::invalid;
use gpuhost_host::kernel::Flavour;
use gpuhost_profile::Profile;

/// A kernel release as `uname -r` prints it: `5.15.0-204.147.6.2.el8uek.x86_64`.
pub(crate) fn check_kernel_release(k: &str) -> Result<()> {
    let ok = k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._+-~".contains(c))
        && !k.contains("..");
    if ok {
        Ok(())
    } else {
        Err(invalid!(
            "--kernel-release {k:?} is not a kernel release; give it as `uname -r` prints it, e.g. 5.15.0-204.147.6.2.el8uek.x86_64"
        ))
    }
}

/// The machine fits the profile: one architecture in the root, an RHCK profile only where
/// Oracle ships an RHCK for the architecture.
fn machine_fits(facts: &Facts, profile: &Profile, root: &str) -> Result<()> {
    if let Some(mixed) = &facts.mixed_arch {
        return Err(invalid!("{mixed}"));
    }
    let Some(arch) = facts.arch.as_deref() else {
        return Ok(());
    };
    if profile.kernel.flavour == Flavour::Rhck
        && !gpuhost_host::platform::has_rhck(profile.os.major, arch)
    {
        return Err(invalid!(
            "{root} is {arch}, and Oracle Linux {} ships no RHCK for {arch} (the UEK only); use --profile ol{}-uek",
            profile.os.major,
            profile.os.major
        ));
    }
    Ok(())
}

/// A Grace superchip (GH200, GB200, GB300) sits in an aarch64 node: on a host of another
/// architecture it is bad input (a root built for the wrong machine).
pub(crate) fn grace_fits(facts: &Facts, root: &str) -> Result<()> {
    let Some(arch) = facts.arch.as_deref().filter(|a| *a != "aarch64") else {
        return Ok(());
    };
    let grace = facts
        .gpus
        .iter()
        .find(|g| g.kind.as_ref().is_some_and(|k| k.grace));
    match grace {
        Some(g) => Err(invalid!(
            "{} [10de:{}] is a {}, whose nodes are aarch64, but {root} is {arch}; build the image for aarch64 (an aarch64 root, dnf --forcearch=aarch64)",
            g.address,
            g.device_id,
            g.kind.as_ref().map(|k| k.describe()).unwrap_or_default()
        )),
        None => Ok(()),
    }
}

/// The host runs the Oracle Linux release the profile is for.
fn os_fits(host: &Host, profile: &Profile, facts: &Facts) -> Result<()> {
    let root = host.root().display();
    let supported = gpuhost_host::platform::supported_text();
    // On the machine itself (not an install root): image builds go through --root.
    let image_hint = if host.is_live() {
        "; to build an Oracle Linux image from this machine, run gpuhost on its install root with --root DIR"
    } else {
        ""
    };
    let Some(os) = &facts.os else {
        return Err(invalid!(
            "{root} has no /etc/os-release: not an Oracle Linux system; gpuhost supports {supported}{image_hint}"
        ));
    };
    if !os.is_oracle_linux() {
        return Err(invalid!(
            "{root} runs {}, not Oracle Linux; gpuhost supports {supported}{image_hint}",
            os.pretty_name
        ));
    }
    let major = os.major();
    if major != Some(profile.os.major) {
        let suggestion = match major {
            Some(m) if gpuhost_host::platform::release(m).is_some() => format!(
                "; use --profile ol{m}-{}",
                flavour_suffix(profile.kernel.flavour)
            ),
            _ => format!("; gpuhost supports {supported}"),
        };
        return Err(invalid!(
            "{root} runs {} but profile {} is for Oracle Linux {}{suggestion}",
            os.pretty_name,
            profile.name,
            profile.os.major
        ));
    }
    Ok(())
}

/// The host must be the Oracle Linux release and kernel flavour the profile is for.
pub(crate) fn host_fits_profile(
    host: &Host,
    profile: &Profile,
    facts: &Facts,
    release_given: bool,
) -> Result<()> {
    let root = host.root().display();
    os_fits(host, profile, facts)?;
    machine_fits(facts, profile, &root.to_string())?;
    let want = profile.kernel.flavour;
    let other = match want {
        Flavour::Uek => Flavour::Rhck,
        Flavour::Rhck => Flavour::Uek,
    };
    let right_profile = format!("ol{}-{}", profile.os.major, flavour_suffix(other));
    match &facts.target_kernel {
        None => {
            let hint = if facts.installed_kernels.is_empty() {
                format!("install {} first", want.kernel_package())
            } else {
                format!(
                    "it has only {other} kernels ({}): use --profile {right_profile}, or install {}",
                    facts.installed_kernels.join(", "),
                    want.kernel_package()
                )
            };
            Err(invalid!("no {want} kernel is installed in {root}; {hint}"))
        }
        Some(k) if Flavour::of(k) != want => Err(invalid!(
            "kernel {k} is {other}, but profile {} is for {want}; use --profile {right_profile}",
            profile.name
        )),
        Some(k) if release_given && !host.exists(format!("/lib/modules/{k}/vmlinuz")) => {
            Err(invalid!(
                "--kernel-release {k}: no such kernel is installed in {root} (installed: {})",
                if facts.installed_kernels.is_empty() {
                    "none".to_string()
                } else {
                    facts.installed_kernels.join(", ")
                }
            ))
        }
        // The root's rpm database: where its OS keeps it, or refused (rpm and dnf are told).
        Some(_) => host.rpm_dbpath().map(drop),
    }
}

/// Effective uid 0, from /proc (no libc call needed).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn flavour_suffix(f: Flavour) -> &'static str {
    match f {
        Flavour::Uek => "uek",
        Flavour::Rhck => "rhck",
    }
}
