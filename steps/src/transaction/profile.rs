//! A module profile installed less the packages other packages replace: NVIDIA's `default` and
//! `fm` profiles with prebuilt kmods (`driver.kmod_repo`) instead of NVIDIA's DKMS kmod.
//!
//! NVIDIA's module metadata lists the DKMS kmod in every open and dkms stream's profiles
//! (NVIDIA/cuda-repo-management `genmodules.py`: `kmod-nvidia-open-dkms`, or
//! `kmod-nvidia-latest-dkms`), and a prebuilt kmod conflicts with it, as it must: `dnf install
//! @nvidia-driver:<stream>/default <kmod>` is dnf's `Problem: … conflicting requests`. Excluding
//! the kmod (`--exclude`) lets the profile install, but dnf then marks the profile installed,
//! and the next `dnf module switch-to` (NVIDIA's documented way to change streams, and a driver
//! change's) installs the new stream's profile, DKMS kmod included, erasing the prebuilt kmod
//! with `--allowerasing` (checked with the test world's dnf 4.14). So the stream is enabled and
//! the profile's packages are installed by name, less the replaced ones, in the same one
//! transaction: dnf holds the branch (`[e]`), marks no profile installed, and leaves the
//! prebuilt kmods alone on a stream switch. The profile's packages are dnf's own answer, `dnf
//! module info --profile`, read right before the transaction from the repos it will use.

use anyhow::Result;

use gpuhost_host::cmd::Cmd;
use gpuhost_host::error::hinted;

/// A profile's name and its packages.
type Profile = (String, Vec<String>);

/// The packages of `profile` in `dnf module info --profile` output (`Name : name:stream:
/// version:context:arch`, then `profile : package` and `        : package` lines), of the
/// newest module version listed; `None` when none lists that profile. Also the profiles it
/// has, for the message.
pub(crate) fn profile_packages(stdout: &str, profile: &str) -> (Option<Vec<String>>, Vec<String>) {
    // (version, its profiles and their packages) per module version listed
    let mut blocks: Vec<(u64, Vec<Profile>)> = Vec::new();
    let mut current = String::new();
    for line in stdout.lines() {
        let Some((key, value)) = line.split_once(" : ") else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if key == "Name" {
            let version = value
                .split(':')
                .nth(2)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            blocks.push((version, Vec::new()));
            current.clear();
            continue;
        }
        let Some((_, profiles)) = blocks.last_mut() else {
            continue;
        };
        if !key.is_empty() {
            current = key.to_string();
            profiles.push((current.clone(), Vec::new()));
        }
        if let Some((_, pkgs)) = profiles.last_mut() {
            if !value.is_empty() {
                pkgs.push(value.to_string());
            }
        }
    }
    blocks.sort_by_key(|(v, _)| *v);
    let Some((_, profiles)) = blocks.pop() else {
        return (None, Vec::new());
    };
    let names: Vec<String> = profiles.iter().map(|(p, _)| p.clone()).collect();
    let found = profiles
        .into_iter()
        .find(|(p, _)| p == profile)
        .map(|(_, pkgs)| pkgs);
    (found, names)
}

/// The packages of profile `spec` (`nvidia-driver:<stream>/<profile>`) as dnf reads the repos
/// of `dnf` (the transaction's own options given): `dnf module info --profile`. A stream or
/// profile the repos do not have is dnf's refusal, in its words, nothing changed (exit 2).
pub(crate) fn packages(dnf: Cmd, spec: &str) -> Result<Vec<String>> {
    use gpuhost_host::dnfout::{fault, problems, quoted, Fault};
    let (stream, profile) = spec.split_once('/').unwrap_or((spec, "default"));
    let cmd = dnf.args(["module", "info", "--profile", spec]);
    let got = cmd.output()?;
    if !got.success() {
        let said = problems(&format!("{}\n{}", got.stdout, got.stderr));
        if said.is_empty() || fault(&said) != Fault::Request {
            return Err(cmd.failure(&got));
        }
        return Err(gpuhost_host::error::as_invalid(hinted(
            format!(
                "dnf cannot read module {spec}: {}; nothing was changed",
                quoted(&said, 8)
            ),
            "set driver.stream to a stream of the local repo",
        )));
    }
    let (found, profiles) = profile_packages(&got.stdout, profile);
    found.ok_or_else(|| {
        gpuhost_host::error::as_invalid(hinted(
            format!(
                "module {stream} has no profile {profile} (its profiles: {}); nothing was changed",
                if profiles.is_empty() {
                    "none".to_string()
                } else {
                    profiles.join(", ")
                }
            ),
            "set driver.stream to a stream of the local repo that has the profile",
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dnf -q module info --profile nvidia-driver:open-dkms/default` (dnf 4.14) of the test
    /// world's R570 driver-only local repo, whose metadata follows NVIDIA's genmodules.py: dnf
    /// lists every profile whatever the spec names.
    const INFO: &str = "Name    : nvidia-driver:open-dkms:20250301000000:3b37a417db:x86_64\n\
default : cuda-drivers\n        : kmod-nvidia-open-dkms\n        : nvidia-driver\n        : nvidia-driver-cuda\n\
fm      : cuda-drivers\n        : kmod-nvidia-open-dkms\n        : libnvidia-nscq-570\n        : nvidia-fabric-manager\n\
ks      : kmod-nvidia-open-dkms\n        : nvidia-driver\n\
src     : nvidia-kmod-source\n";

    #[test]
    fn a_profiles_packages_are_read_from_dnfs_answer() {
        let (p, all) = profile_packages(INFO, "fm");
        assert_eq!(
            p.unwrap_or_default(),
            vec![
                "cuda-drivers",
                "kmod-nvidia-open-dkms",
                "libnvidia-nscq-570",
                "nvidia-fabric-manager"
            ]
        );
        assert_eq!(all, vec!["default", "fm", "ks", "src"]);
        assert_eq!(
            profile_packages(INFO, "src").0.unwrap_or_default(),
            vec!["nvidia-kmod-source"]
        );
        assert!(profile_packages(INFO, "nosuch").0.is_none());
        assert!(profile_packages("", "default").0.is_none());
        // Two versions of the stream (two repos): the newest is what dnf installs.
        let two = format!(
            "{}Name    : nvidia-driver:open-dkms:20990101000000:aaaa:x86_64\ndefault : nvidia-driver\n",
            INFO
        );
        assert_eq!(
            profile_packages(&two, "default").0.unwrap_or_default(),
            vec!["nvidia-driver"]
        );
    }
}
