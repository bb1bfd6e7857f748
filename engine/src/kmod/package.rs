//! One RPM per (driver, kernel), and the repo that carries them.
//!
//! The RPM follows the EL kmod conventions (rpmfusion's kmodtool, ublue-os/akmods; NVIDIA's own
//! precompiled `dnf-kmod-nvidia.spec` for what its userspace needs):
//! - named `kmod-nvidia-open-<uname -r>` ([`gpuhost_nvidia::packages::kmod_package`]), at the
//!   driver's epoch and version, for the kernel's arch;
//! - the modules under `/lib/modules/<kver>/extra/`;
//! - `Requires: kernel-uname-r = <kver>` (exactly that kernel) and `nvidia-kmod-common =
//!   <epoch>:<driver>`;
//! - `Provides: nvidia-kmod = <epoch>:<driver>` (what `nvidia-kmod-common` requires of a kmod)
//!   (one package per kernel by its name; a new driver's is an upgrade of it, not a second
//!   install: not `installonlypkg`, which NVIDIA's precompiled kmods need only because their
//!   names carry the driver version);
//! - `Conflicts:` NVIDIA's DKMS kmods (both build the same modules);
//! - `depmod -a <kver>` after install and removal.
//!
//! The repo: `<arch>/<rpm>`, `repodata/` (createrepo_c), the fleet certificate and the
//! manifest ([`gpuhost_host::kmodrepo`]), each RPM's SHA-256 in it. A build adds to a repo.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use gpuhost_host::cmd::Cmd;
use gpuhost_host::fsutil::{sha256_file, sha256_hex};
use gpuhost_host::kmodrepo::{self, KmodEntry, KmodManifest, CERT, MANIFEST};
use gpuhost_nvidia::packages::{self, Kmod, ModuleFlavour};

use super::model::{Built, BuiltKmod, Info};

/// The spec of one kernel's RPM, its modules copied from `modules` (paths on this machine).
pub(super) fn spec(info: &Info, name: &str, modules: &[PathBuf]) -> String {
    let Info {
        driver,
        epoch,
        flavour,
        kernel,
        ..
    } = info;
    let dest = format!("/lib/modules/{kernel}/extra");
    let conflicts: Vec<&str> = packages::dkms_kmods().collect();
    let install: String = modules
        .iter()
        .map(|m| format!("install -m 0644 '{}' %{{buildroot}}{dest}/\n", m.display()))
        .collect();
    let files: String = modules
        .iter()
        .filter_map(|m| m.file_name())
        .map(|f| format!("{dest}/{}\n", f.to_string_lossy()))
        .collect();
    format!(
        "Name: {name}\n\
         Version: {driver}\n\
         Release: 1\n\
         Epoch: {epoch}\n\
         Summary: NVIDIA {flavour} kernel modules {driver} for kernel {kernel}, signed for the fleet\n\
         License: {license}\n\
         AutoReqProv: no\n\
         Requires: kernel-uname-r = {kernel}\n\
         Requires: {common} = {epoch}:{driver}\n\
         Requires(post): kmod\n\
         Requires(postun): kmod\n\
         Provides: nvidia-kmod = {epoch}:{driver}\n\
         Conflicts: {conflicts}\n\
         %define _build_id_links none\n\
         %global debug_package %{{nil}}\n\
         %global __os_install_post %{{nil}}\n\
         %description\n\
         NVIDIA's {flavour} kernel modules of driver {driver}, built by gpuhost on a build host for\n\
         kernel {kernel} and signed there with the fleet's key: nodes install them and compile nothing.\n\
         %install\n\
         mkdir -p %{{buildroot}}{dest}\n\
         {install}\
         %post\n\
         {post}\
         %postun\n\
         {postun}\
         %files\n\
         {files}",
        license = match flavour {
            ModuleFlavour::Open => "MIT or GPLv2",
            ModuleFlavour::Proprietary => "NVIDIA License",
        },
        common = packages::KMOD_COMMON,
        post = kmodrepo::post_script(kernel, &file_names(modules)),
        postun = kmodrepo::postun_script(kernel),
        conflicts = conflicts.join(", "),
    )
}

/// The modules' file names (`nvidia.ko`), as the manifest lists them.
fn file_names(modules: &[PathBuf]) -> Vec<String> {
    modules
        .iter()
        .filter_map(|m| m.file_name().map(|f| f.to_string_lossy().into_owned()))
        .collect()
}

/// Build one kernel's RPM in `built.rpm_dir`: its manifest entry (the file relative to the repo:
/// `<arch>/<file>`) and the report's line.
pub(super) fn rpm(info: &Info, built: &Built) -> Result<(KmodEntry, BuiltKmod)> {
    let name = packages::kmod_package(Kmod::Built, info.flavour, &info.driver, &info.kernel)
        .with_context(|| format!("no {} kmod of driver {}", info.flavour, info.driver))?;
    let top = &built.rpm_dir;
    spec_safe(info, top, &built.modules)?;
    std::fs::create_dir_all(top).with_context(|| format!("creating {}", top.display()))?;
    let spec_path = top.join(format!("{name}.spec"));
    std::fs::write(&spec_path, spec(info, &name, &built.modules))
        .with_context(|| format!("writing {}", spec_path.display()))?;
    Cmd::new("rpmbuild")
        .args(["-bb", "--quiet", "--target", info.arch, "--define"])
        .arg(format!("_topdir {}", top.display()))
        .arg(&spec_path)
        .run()
        .with_context(|| format!("packaging {name} (rpmbuild)"))?;
    let file = format!("{name}-{}-1.{}.rpm", info.driver, info.arch);
    let path = top.join("RPMS").join(info.arch).join(&file);
    let sha256 = sha256_file(&path)?;
    let modules = file_names(&built.modules);
    let entry = KmodEntry {
        driver: info.driver.clone(),
        epoch: info.epoch,
        flavour: info.flavour.to_string(),
        kernel: info.kernel.clone(),
        arch: info.arch.to_string(),
        package: name.clone(),
        file: format!("{}/{file}", info.arch),
        sha256: sha256.clone(),
        modules: modules.clone(),
    };
    let report = BuiltKmod {
        kernel: info.kernel.clone(),
        package: name,
        file: entry.file.clone(),
        sha256,
        modules,
        compiler: built.compiler.clone(),
        build_seconds: built.seconds,
        cpu_seconds: built.cpu_seconds,
    };
    Ok((entry, report))
}

/// Every value the spec or rpmbuild's `_topdir` carries is plain: letters, digits and `._+~-`
/// (and `/` in paths), so that no `%` macro, quote or line of the spec comes from the build.
fn spec_safe(info: &Info, top: &Path, modules: &[PathBuf]) -> Result<()> {
    let plain = |s: &str, slash: bool| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+~-".contains(c) || (slash && c == '/'))
    };
    let mut bad: Vec<String> = [&info.driver, &info.kernel]
        .into_iter()
        .filter(|v| !plain(v, false))
        .map(|v| format!("{v:?}"))
        .collect();
    for p in modules.iter().map(|p| p.as_path()).chain([top]) {
        let t = p.to_string_lossy();
        if !plain(&t, true) {
            bad.push(format!("{t:?}"));
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    Err(gpuhost_host::invalid!(
        "{} cannot go into an RPM spec (letters, digits, '._+~-' and '/' only): give --root a plain path",
        bad.join(", ")
    ))
}

/// Put the RPMs (each entry with the rpmbuild folder it was made in) into the repo `out`
/// (made, or added to: its manifest read and checked first), with the fleet certificate, the
/// repo metadata and the manifest, written last. A repo signed by another key is refused.
pub(super) fn publish(
    out: &Path,
    cert_der: &[u8],
    entries: Vec<(KmodEntry, PathBuf)>,
) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let out = out
        .canonicalize()
        .with_context(|| format!("reading {}", out.display()))?;
    let cert_sha = sha256_hex(cert_der);
    let mut manifest = if out.join(MANIFEST).exists() {
        let m = KmodManifest::read_verified(&out)?;
        if m.cert_sha256 != cert_sha {
            return Err(gpuhost_host::invalid!(
                "{} holds kmods signed by another key (its {CERT}): give --out a new directory, or the key that repo was built with",
                out.display()
            ));
        }
        m
    } else {
        KmodManifest::new(cert_sha)
    };
    std::fs::write(out.join(CERT), cert_der)?;
    for (entry, dir) in entries {
        let file_name = entry.file.rsplit('/').next().unwrap_or(&entry.file);
        let from = dir.join("RPMS").join(&entry.arch).join(file_name);
        let to = out.join(&entry.file);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(&from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        manifest.put(entry);
    }
    // What a killed createrepo_c left (its temporary folder) would stop the next one; the
    // repo's lock is held.
    let _ = std::fs::remove_dir_all(out.join(".repodata"));
    Cmd::new("createrepo_c")
        .args(["--quiet", "--update"])
        .arg(&out)
        .run()
        .context("writing the kmod repo's metadata (createrepo_c)")?;
    let tmp = out.join(format!(".{MANIFEST}.tmp"));
    std::fs::write(&tmp, manifest.to_json()?)?;
    std::fs::rename(&tmp, out.join(MANIFEST))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_requires_exactly_its_kernel_and_the_drivers_common_package() {
        let k = "5.15.0-206.153.7.el9uek.x86_64";
        let info = Info {
            driver: "580.82.07".into(),
            epoch: 3,
            flavour: ModuleFlavour::Open,
            kernel: k.into(),
            arch: "x86_64",
        };
        let s = spec(
            &info,
            &format!("kmod-nvidia-open-{k}"),
            &[
                PathBuf::from("/b/nvidia.ko"),
                PathBuf::from("/b/nvidia-uvm.ko"),
            ],
        );
        for line in [
            format!("Name: kmod-nvidia-open-{k}\n"),
            "Version: 580.82.07\n".to_string(),
            "Epoch: 3\n".to_string(),
            format!("Requires: kernel-uname-r = {k}\n"),
            "Requires: nvidia-kmod-common = 3:580.82.07\n".to_string(),
            "Provides: nvidia-kmod = 3:580.82.07\n".to_string(),
            "Conflicts: kmod-nvidia-open-dkms, kmod-nvidia-latest-dkms\n".to_string(),
            format!("depmod -a {k} || :\n"),
            format!("for m in nvidia nvidia-uvm; do for z in xz zst gz; do rm -f /lib/modules/{k}/extra/$m.ko.$z; done; done\n"),
            format!("/lib/modules/{k}/extra/nvidia-uvm.ko\n"),
            format!("install -m 0644 '/b/nvidia.ko' %{{buildroot}}/lib/modules/{k}/extra/\n"),
        ] {
            assert!(s.contains(&line), "{line}in\n{s}");
        }
    }
}
