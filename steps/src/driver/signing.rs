//! Module signing for Secure Boot (see [`gpuhost_host::secureboot`]).
//!
//! - **Before anything changes** ([`check_secure_boot`], from `apply`/`plan`'s preparation): with Secure
//!   Boot on and a DKMS stream, the profile must name a key and certificate
//!   (`secure_boot.key`, `secure_boot.cert`), the key must be private to root, the certificate a
//!   DER X.509 one, and `mokutil --test-key` must find it enrolled or pending; otherwise exit 2
//!   with how to create and enroll one. Precompiled streams need no key of ours: NVIDIA signed
//!   them, and the kernel-module step checks NVIDIA's certificate is enrolled.
//! - **`build-deps`** writes `/etc/dkms/framework.conf.d/gpuhost-secure-boot.conf` naming the
//!   key and certificate (`mok_signing_key`, `mok_certificate`: dkms 3.x `prepare_signing`, which
//!   signs every module it builds with `/lib/modules/<kver>/build/scripts/sign-file` from the
//!   kernel's devel package), before the driver's transaction builds anything.
//! - **`kernel-module`** reads the appended signature of every NVIDIA module modprobe would load
//!   for each served kernel ([`problems`]): signed by the profile's certificate (DKMS), or by a
//!   certificate enrolled or pending in the firmware (precompiled); a DKMS module that is not is
//!   rebuilt (`dkms build --force`), and one still unsigned fails the step.

use anyhow::Result;

use crate::run::DriverPlan;
use gpuhost_host::facts::{Facts, SecureBoot};
use gpuhost_host::host::Host;
use gpuhost_host::invalid;
use gpuhost_host::secureboot::{self, Cert, Keys, TestKey, Trust};
use gpuhost_profile::Profile;
use gpuhost_profile::StreamKind;

/// The DKMS framework drop-in gpuhost writes.
pub const DROPIN: &str = "/etc/dkms/framework.conf.d/gpuhost-secure-boot.conf";
/// Its first line.
pub const MARKER: &str = "# Written by gpuhost (secure_boot)";

pub use gpuhost_host::kmods::NVIDIA_MODULES;

/// The drop-in's text.
pub fn dropin(key: &str, cert: &str) -> String {
    format!(
        "{MARKER}: DKMS signs the modules it builds with this Machine Owner Key.\nmok_signing_key=\"{key}\"\nmok_certificate=\"{cert}\"\n"
    )
}

/// True when Secure Boot is on.
pub fn enabled(facts: &Facts) -> bool {
    facts.secure_boot == SecureBoot::Enabled
}

/// Refuse (exit 2) before anything changes when the DKMS-built modules could not load under
/// Secure Boot, or when the profile's key is unusable. The one `mokutil --test-key` of a run;
/// a pending enrollment comes back as a warning for the report.
pub fn check_secure_boot(
    host: &Host,
    profile: &Profile,
    facts: &Facts,
    plan: Option<&DriverPlan>,
) -> Result<Option<String>> {
    let Some(plan) = plan else {
        return Ok(None);
    };
    if let Some(kmods) = &plan.kmods {
        let said = prebuilt_enrolled(host, facts, kmods)?;
        prebuilt_signed(facts, plan, kmods)?;
        return Ok(said);
    }
    if plan.kind() == StreamKind::Precompiled {
        return Ok(None);
    }
    let on = enabled(facts);
    let Some((key, cert)) = profile.secure_boot.pair() else {
        if on {
            return Err(invalid!(
                "Secure Boot is on and profile {} names no module signing key: the kernel would refuse the nvidia modules DKMS builds (nvidia-driver:{}), so nothing was installed; create and enroll one: {}",
                profile.name,
                plan.stream(),
                secureboot::key_howto(secureboot::DEFAULT_KEY, secureboot::DEFAULT_CERT)
            ));
        }
        return Ok(None);
    };
    let howto = secureboot::key_howto(key, cert);
    let Some(mode) = host.mode(key) else {
        return Err(invalid!(
            "secure_boot.key {key}: no such file; create and enroll a key: {howto}"
        ));
    };
    if mode & 0o077 != 0 {
        return Err(invalid!(
            "secure_boot.key {key} is readable by others (mode {:o}): a module signing key must be private; run `chmod 600 {key}`",
            mode & 0o7777
        ));
    }
    if !host.exists(cert) {
        return Err(invalid!(
            "secure_boot.cert {cert}: no such file; create and enroll a key: {howto}"
        ));
    }
    let c = Cert::load(host, cert).map_err(|e| invalid!("secure_boot.cert {e:#}"))?;
    if !on {
        return Ok(None);
    }
    match secureboot::test_key(host, cert) {
        Ok(TestKey::Enrolled) => Ok(None),
        Ok(TestKey::Pending) => Ok(Some(format!(
            "Secure Boot: the enrollment of {cert} ({c}) is pending: the NVIDIA modules are signed with it, but load only after someone confirms it in MokManager at the console during the next boot"
        ))),
        Ok(TestKey::NotEnrolled) => Err(invalid!(
            "Secure Boot is on and secure_boot.cert {cert} ({c}) is not enrolled, so nothing was installed: run `mokutil --import {cert}`, reboot and confirm it in MokManager at the console, then apply again"
        )),
        Err(e) => Err(invalid!(
            "Secure Boot is on and mokutil cannot say whether {cert} is enrolled: {e:#}; install mokutil (dnf install mokutil) and apply again"
        )),
    }
}

/// Prebuilt kmods (`driver.kmod_repo`) under Secure Boot: the fleet certificate the build host
/// signed them with (the repo's) must be enrolled, or its enrollment pending, before anything
/// changes. The node needs no key: nothing is signed here.
fn prebuilt_enrolled(
    host: &Host,
    facts: &Facts,
    kmods: &crate::run::PrebuiltKmods,
) -> Result<Option<String>> {
    if !enabled(facts) {
        return Ok(None);
    }
    let path = gpuhost_host::kmodrepo::KmodManifest::cert_path(&kmods.dir);
    let c = fleet_cert(kmods)?;
    let shown = path.display();
    match secureboot::test_key_file(host, &path) {
        Ok(TestKey::Enrolled) => Ok(None),
        Ok(TestKey::Pending) => Ok(Some(format!(
            "Secure Boot: the enrollment of the fleet certificate {shown} ({c}) is pending: the build host's kmods are signed with it, and load only after someone confirms it in MokManager at the console during the next boot"
        ))),
        Ok(TestKey::NotEnrolled) => Err(invalid!(
            "Secure Boot is on and the fleet certificate {shown} ({c}), which signs the kmods of {}, is not enrolled, so nothing was installed: run `mokutil --import {shown}`, reboot and confirm it in MokManager at the console, then apply again",
            kmods.dir.display()
        )),
        Err(e) => Err(invalid!(
            "Secure Boot is on and mokutil cannot say whether the fleet certificate {shown} is enrolled: {e:#}; install mokutil (dnf install mokutil) and apply again"
        )),
    }
}

/// Prebuilt kmods: every module of the kmod each served kernel gets is signed by the fleet
/// certificate, read out of its RPM (gpuhost's reader, into a private folder on this machine,
/// removed after) before anything changes. A kmod RPM rebuilt with an unsigned module, or one
/// signed by another key, and its manifest entry rewritten to match, is bad input (exit 2),
/// Secure Boot or not: under Secure Boot the kernel would refuse the module after the install;
/// without, it is still not what `gpuhost kmod build` makes (it signs every module), and the
/// kernel-module step would fail on it after the install (issue 53, item 4).
fn prebuilt_signed(
    facts: &Facts,
    plan: &DriverPlan,
    kmods: &crate::run::PrebuiltKmods,
) -> Result<()> {
    let cert = fleet_cert(kmods)?;
    for kver in facts.kernels_to_serve() {
        let Some(k) = kmods.find(&plan.repo.driver, plan.choice.flavour, &kver) else {
            continue;
        };
        let dir = gpuhost_host::fsutil::private_temp_dir("gpuhost-kmod-check")?;
        let result = kmod_signed(&k.file, &dir, &cert, enabled(facts));
        gpuhost_host::fsutil::remove_temp_dir(&dir);
        result?;
    }
    Ok(())
}

/// The modules of the kmod RPM `rpm`, extracted under `dir`, each signed by `cert`.
fn kmod_signed(rpm: &std::path::Path, dir: &std::path::Path, cert: &Cert, on: bool) -> Result<()> {
    use gpuhost_host::rpmfile::{self, FileInfo, Want};
    let shown = rpm.display();
    let all = ["/".to_string()];
    let module = |f: &FileInfo| {
        f.is_file()
            && f.path.contains("/modules/")
            && [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
                .iter()
                .any(|e| f.path.ends_with(e))
    };
    let want = Want {
        allowed: &all,
        select: &module,
    };
    let (_, written) = rpmfile::extract(rpm, &want, dir)
        .map_err(|f| invalid!("the kmod {shown} cannot be read: {f}; nothing was installed"))?;
    if written.is_empty() {
        return Err(invalid!(
            "the kmod {shown} carries no kernel module; nothing was installed"
        ));
    }
    // What a wrong signature means: a refusal at load time under Secure Boot; without, a kmod
    // that gpuhost kmod build did not make as it is.
    let (lead, verdict) = if on {
        ("Secure Boot is on and ", "the kernel would refuse it")
    } else {
        (
            "",
            "gpuhost kmod build signs every module with the fleet key, so this is not a kmod it built",
        )
    };
    for w in &written {
        let m = &w.info.path;
        match secureboot::file_signature(&w.real) {
            Ok(Some(sig)) if cert.is(&sig.signer) => {}
            Ok(Some(sig)) => {
                return Err(invalid!(
                    "{lead}{m} in the kmod {shown} is signed by {}, not by the fleet certificate ({cert}): {verdict}, so nothing was installed; rebuild the kmod on the build host with the fleet key (gpuhost kmod build)",
                    sig.signer
                ))
            }
            Ok(None) => {
                return Err(invalid!(
                    "{lead}{m} in the kmod {shown} carries no signature: {verdict}, so nothing was installed; rebuild the kmod on the build host with the fleet key (gpuhost kmod build)"
                ))
            }
            Err(e) => {
                return Err(invalid!(
                    "{m} in the kmod {shown}: {e:#}; nothing was installed"
                ))
            }
        }
    }
    Ok(())
}

/// The certificate of a kmod repo (what every module of it is signed by).
pub fn fleet_cert(kmods: &crate::run::PrebuiltKmods) -> Result<Cert> {
    let path = gpuhost_host::kmodrepo::KmodManifest::cert_path(&kmods.dir);
    let der = std::fs::read(&path)
        .map_err(|e| invalid!("the kmod repo's certificate {}: {e}", path.display()))?;
    Cert::from_der(&der).map_err(|e| invalid!("{}: {e:#}", path.display()))
}

/// Whose signature the NVIDIA modules must carry.
pub enum Signer {
    /// DKMS builds: the profile's certificate.
    Profile(Cert),
    /// NVIDIA's precompiled kmods: any certificate the firmware trusts or will.
    Firmware(Keys),
}

pub use gpuhost_host::secureboot::module_signatures;

/// What is wrong with the signatures of the NVIDIA modules modprobe would load for `kver`
/// (one line each; empty when all are right).
pub fn problems(host: &Host, kver: &str, want: &Signer) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (path, sig) in module_signatures(host, kver)? {
        let problem = match (sig, want) {
            (Err(e), _) => Some(format!("{path}: {e:#}")),
            (Ok(None), _) => Some(format!("{path} is unsigned")),
            (Ok(Some(s)), Signer::Profile(c)) => {
                (!c.is(&s.signer)).then(|| format!("{path} is signed by {}, not {c}", s.signer))
            }
            (Ok(Some(s)), Signer::Firmware(keys)) => match keys.trust(&s.signer) {
                Trust::Unknown => Some(format!(
                    "{path} is signed by {}, which is not enrolled",
                    s.signer
                )),
                _ => None,
            },
        };
        out.extend(problem);
    }
    Ok(out)
}

/// [`problems`] as one readable clause: the modules that share a problem named together
/// (`5 modules (nvidia, nvidia-uvm, …) are signed by CN=…, not CN=…`), each problem once.
pub fn compact(problems: &[String]) -> String {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for p in problems {
        // `<path> is …`: the module's name and what is wrong with it.
        let (name, what) = match p.split_once(" is ") {
            Some((path, rest)) => (module_name(path), format!("is {rest}")),
            None => (String::new(), p.clone()),
        };
        match groups.iter_mut().find(|(w, _)| *w == what) {
            Some((_, names)) => names.push(name),
            None => groups.push((what, vec![name])),
        }
    }
    groups
        .into_iter()
        .map(|(what, names)| match names.as_slice() {
            [one] if one.is_empty() => what,
            [one] => format!("{one} {what}"),
            _ => format!(
                "{} modules ({}) {}",
                names.len(),
                names.join(", "),
                what.replacen("is ", "are ", 1)
            ),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `extra/nvidia-uvm.ko.xz` → `nvidia-uvm`.
fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.split(".ko").next().unwrap_or(base).to_string()
}

/// One line on the profile's certificate for a step's notes (whether the firmware has it was
/// asked once, by [`check_secure_boot`]).
pub fn cert_note(host: &Host, cert_path: &str) -> Result<String> {
    let c = Cert::load(host, cert_path)?;
    Ok(format!("DKMS signs with {c} ({cert_path})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_that_share_a_problem_are_named_together() {
        let p: Vec<String> = ["nvidia", "nvidia-modeset", "nvidia-uvm"]
            .iter()
            .map(|m| format!("extra/{m}.ko.xz is signed by CN=DKMS module signing key (serial 16), not CN=fleet"))
            .chain(["extra/nvidia-drm.ko.xz is unsigned".to_string()])
            .collect();
        assert_eq!(
            compact(&p),
            "3 modules (nvidia, nvidia-modeset, nvidia-uvm) are signed by CN=DKMS module signing key (serial 16), not CN=fleet; nvidia-drm is unsigned"
        );
        assert_eq!(compact(&p[3..]), "nvidia-drm is unsigned");
    }
}
