//! `build-deps`: what DKMS needs to build the NVIDIA module — `dkms` (Oracle's developer EPEL),
//! `gcc`, `make`, `elfutils-libelf-devel`, `gcc-c++` for the open modules — and the kernel's
//! own compiler. UEK is built with a newer GCC than the system one (UEK7 on OL8: gcc 11 vs 8.5);
//! DKMS with the system gcc then fails (`unrecognized command line option
//! '-ftrivial-auto-var-init=zero'`). The kernel's compiler is read from
//! `CONFIG_CC_VERSION_TEXT` in the kernel's configuration — `/usr/src/kernels/<kver>/.config`
//! (headers), else the copy the kernel package itself ships (`/lib/modules/<kver>/config`,
//! `/boot/config-<kver>`), so that it is known before the headers are installed; when it is
//! newer than the system gcc, the matching `gcc-toolset-N-gcc` is installed and DKMS is told to
//! build *every* module of that kernel series with it (NVIDIA's Oracle Linux page), RHCK
//! keeping the system gcc: a `framework.conf.d` drop-in naming an environment script (dkms >=
//! 3.3) and `/etc/dkms/<module>.conf` for `nvidia`, `nvidia-open` and every module with sources
//! in `/usr/src` (older dkms); see [`crate::driver::dkms_cc`]. With `secure_boot.key`/`cert` in the
//! profile, a framework drop-in names the key DKMS signs with ([`super::signing`]). They are
//! written before the package transaction.

use anyhow::Result;

use super::signing;
use crate::step::{Change, Check, Ctx, FileWrite, Step, Work};
use gpuhost_host::rpm::vercmp;
use gpuhost_profile::StreamKind;

pub(crate) struct BuildDeps;

/// The first line of an override gpuhost wrote.
const MARKER: &str = "# Written by gpuhost";

/// The GCC major version of a gcc package version (`8.5.0` → 8).
fn major_of(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// The system gcc of an Oracle Linux release, for when gcc is not installed yet (the platform
/// table: 8 on OL8, 11 on OL9, 14 on OL10).
fn system_gcc_major(os_major: u32) -> u32 {
    gpuhost_host::platform::release(os_major).map_or(11, |r| r.system_gcc)
}

/// What the step wants, worked out from the profile and the files of the served kernels.
struct Wanted {
    packages: Vec<String>,
    /// `(toolset major, why)` when a served kernel needs a newer GCC than the system one.
    toolset: Option<(u32, String)>,
    /// Every served kernel series that needs a toolset, for DKMS's compiler configuration.
    toolsets: Vec<crate::driver::dkms_cc::Toolset>,
    notes: Vec<String>,
}

fn wanted(ctx: &Ctx<'_>, system_major: u32) -> Wanted {
    let mut packages: Vec<String> = ["dkms", "gcc", "make", "elfutils-libelf-devel"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if StreamKind::of(super::context::stream(ctx)) == StreamKind::Open {
        packages.push("gcc-c++".to_string());
    }
    let mut notes = Vec::new();
    let mut toolset: Option<(u32, String)> = None;
    let mut toolsets: Vec<crate::driver::dkms_cc::Toolset> = Vec::new();
    for kver in ctx.facts.kernels_to_serve() {
        let config = gpuhost_host::kernel::config_of(ctx.host, &kver);
        let Some(config) = config else {
            notes.push(format!(
                "the compiler of {kver} is read from its configuration once its headers are installed"
            ));
            continue;
        };
        match gpuhost_host::kernel::compiler(&config) {
            Some((text, Some(major))) if major > system_major => {
                if toolset.as_ref().is_none_or(|(n, _)| major > *n) {
                    toolset = Some((major, format!("{kver} was built by {text}")));
                }
                let pattern = crate::driver::dkms_cc::uek_series_pattern(&kver)
                    .unwrap_or_else(|| kver.clone());
                if !toolsets.iter().any(|t| t.pattern == pattern) {
                    toolsets.push(crate::driver::dkms_cc::Toolset {
                        pattern,
                        major,
                        why: format!("{kver} was built by {text}"),
                    });
                }
            }
            Some((_, Some(_))) => {}
            Some((text, None)) => notes.push(format!(
                "{kver} was built by {text}, not GCC: no compiler override"
            )),
            None => notes.push(format!("{kver}: its .config names no compiler")),
        }
    }
    for t in &toolsets {
        if !packages.contains(&t.package()) {
            packages.push(t.package());
        }
    }
    if let Some((n, _)) = &toolset {
        let p = format!("gcc-toolset-{n}-gcc");
        if !packages.contains(&p) {
            packages.push(p);
        }
    }
    Wanted {
        packages,
        toolset,
        toolsets,
        notes,
    }
}

/// DKMS modules with sources on the host (`/usr/src/<module>-<version>/dkms.conf`).
fn dkms_source_modules(ctx: &Ctx<'_>) -> Vec<String> {
    let Ok(names) = ctx.host.list_dir("/usr/src") else {
        return Vec::new();
    };
    names
        .into_iter()
        .filter_map(|dir| {
            let conf = ctx
                .host
                .read_opt(format!("/usr/src/{dir}/dkms.conf"))
                .ok()??;
            let v = crate::driver::dkms_cc::package_version(&conf)?;
            crate::driver::dkms_cc::module_of_source_dir(&dir, &v)
        })
        .collect()
}

impl BuildDeps {
    fn system_major(ctx: &Ctx<'_>) -> Result<u32> {
        let gcc = ctx.installed_one("gcc")?;
        Ok(gcc
            .iter()
            .map(|p| p.version.clone())
            .max_by(|a, b| vercmp(a, b))
            .and_then(|v| major_of(&v))
            .unwrap_or_else(|| system_gcc_major(ctx.profile.os.major)))
    }
}

impl Step for BuildDeps {
    fn id(&self) -> &'static str {
        "build-deps"
    }

    fn summary(&self) -> &'static str {
        "install DKMS and the compiler that built each served kernel"
    }

    fn rpm_names(&self, ctx: &Ctx<'_>) -> Vec<String> {
        // The system gcc is not known yet: ask about every toolset a served kernel could need.
        let mut names = wanted(ctx, system_gcc_major(ctx.profile.os.major)).packages;
        names.push("gcc".to_string());
        names
    }

    fn needs_driver_package(&self) -> bool {
        true
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::context::not_applicable(ctx)
            .or_else(|| {
                let plan = ctx.driver.as_ref()?;
                plan.kmods
                    .as_ref()
                    .map(crate::run::PrebuiltKmods::nothing_built)
            })
            .or_else(|| {
                (StreamKind::of(super::context::stream(ctx)) == StreamKind::Precompiled).then(
                    || {
                        format!(
                            "{} is a precompiled stream: nothing is built on this host",
                            gpuhost_nvidia::packages::module_spec(
                                super::context::stream(ctx),
                                None
                            )
                        )
                    },
                )
            })
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let system_major = Self::system_major(ctx)?;
        let w = wanted(ctx, system_major);
        let mut check = Check {
            notes: w.notes.clone(),
            ..Check::default()
        };
        missing_packages(ctx, &w, system_major, &mut check)?;
        let (modules, files) = compiler_files(ctx, &w, system_major, &mut check)?;
        signing_dropin(ctx, &mut check)?;
        unwanted_files(ctx, &modules, &files, system_major, &mut check)?;
        if check.changes.is_empty() {
            check
                .notes
                .insert(0, format!("installed: {}", w.packages.join(", ")));
        }
        Ok(check)
    }
}

/// The build packages DKMS needs (and the kernel's compiler when it is not the system one).
fn missing_packages(ctx: &Ctx<'_>, w: &Wanted, system_major: u32, check: &mut Check) -> Result<()> {
    let refs: Vec<&str> = w.packages.iter().map(String::as_str).collect();
    let installed = ctx.installed(&refs)?;
    let missing: Vec<String> = w
        .packages
        .iter()
        .filter(|p| installed.get(*p).is_none_or(Vec::is_empty))
        .cloned()
        .collect();
    if !missing.is_empty() {
        let why = match &w.toolset {
            Some((n, why)) if missing.contains(&format!("gcc-toolset-{n}-gcc")) => {
                format!("not installed; {why}, the system gcc is {system_major}")
            }
            _ => "not installed; DKMS needs them to build the NVIDIA module".to_string(),
        };
        let record = super::built_by::record(ctx, "build-deps", &missing)?;
        check.changes.push(Change::install(missing, why));
        check.changes.extend(record);
    }
    Ok(())
}

/// A file gpuhost writes: its path and content.
type PathText = (String, String);

/// DKMS's compiler for every module of the UEK kernels that need it (see dkms_cc): the files
/// wanted (in place, or the work that writes them). Returns the modules and the files.
fn compiler_files(
    ctx: &Ctx<'_>,
    w: &Wanted,
    system_major: u32,
    check: &mut Check,
) -> Result<(Vec<String>, Vec<PathText>)> {
    // dkms >= 3.3 reads the framework drop-in, older ones the per-module files.
    let mut modules: Vec<String> = gpuhost_nvidia::packages::dkms_names()
        .map(str::to_string)
        .collect();
    modules.extend(dkms_source_modules(ctx));
    modules.sort();
    modules.dedup();
    let mut files: Vec<(String, String)> = Vec::new();
    if !w.toolsets.is_empty() {
        files.push((
            crate::driver::dkms_cc::FRAMEWORK_DROPIN.into(),
            crate::driver::dkms_cc::framework_dropin(),
        ));
        files.push((
            crate::driver::dkms_cc::ENV_SCRIPT.into(),
            crate::driver::dkms_cc::env_script(&w.toolsets),
        ));
        for m in &modules {
            files.push((
                crate::driver::dkms_cc::module_conf_path(m),
                crate::driver::dkms_cc::module_conf(m, &w.toolsets),
            ));
        }
    }
    let why = w
        .toolsets
        .iter()
        .map(|t| format!("{}: gcc-toolset-{}", t.why, t.major))
        .collect::<Vec<_>>()
        .join("; ");
    let mut in_place = Vec::new();
    for (path, text) in &files {
        let current = ctx.host.read_opt(path)?;
        if current.as_deref() == Some(text.as_str()) {
            in_place.push(path.clone());
            continue;
        }
        let was = if current.is_some() {
            "has other content"
        } else {
            "absent"
        };
        check.changes.push(Change::new(
                Work::Configure(FileWrite::new(path.clone(), text.clone(), 0o644)),
                format!("DKMS builds every module for UEK with the kernel's compiler ({why}), the system gcc is {system_major}; the file is {was}"),
            ));
    }
    if !in_place.is_empty() {
        check.notes.push(format!(
            "DKMS compiler for UEK: {why} ({})",
            in_place.join(", ")
        ));
    }
    Ok((modules, files))
}

/// Secure Boot: the key DKMS signs every module it builds with (see signing).
fn signing_dropin(ctx: &Ctx<'_>, check: &mut Check) -> Result<()> {
    let signing_file = ctx.host.read_opt(signing::DROPIN)?;
    match ctx.profile.secure_boot.pair() {
        Some((key, cert)) => {
            let text = signing::dropin(key, cert);
            if signing_file.as_deref() == Some(text.as_str()) {
                check.notes.push(signing::cert_note(ctx.host, cert)?);
            } else {
                check.changes.push(Change::new(
                        Work::Configure(FileWrite::new(signing::DROPIN, text, 0o644)),
                        format!("DKMS signs the NVIDIA modules with secure_boot.key and {cert} (Secure Boot)"),
                    ));
            }
        }
        None if signing_file.is_some_and(|t| t.starts_with(signing::MARKER)) => {
            check.changes.push(Change::new(
                Work::Unconfigure(signing::DROPIN.into()),
                "the profile names no secure_boot key any more",
            ));
        }
        None => {}
    }
    Ok(())
}

/// gpuhost's own compiler files that are no longer wanted.
fn unwanted_files(
    ctx: &Ctx<'_>,
    modules: &[String],
    files: &[PathText],
    system_major: u32,
    check: &mut Check,
) -> Result<()> {
    let mut ours: Vec<String> = vec![
        crate::driver::dkms_cc::FRAMEWORK_DROPIN.into(),
        crate::driver::dkms_cc::ENV_SCRIPT.into(),
    ];
    ours.extend(
        modules
            .iter()
            .map(|m| crate::driver::dkms_cc::module_conf_path(m)),
    );
    for path in ours {
        if files.iter().any(|(p, _)| *p == path) {
            continue;
        }
        if ctx
            .host
            .read_opt(&path)?
            .is_some_and(|t| t.starts_with(MARKER))
        {
            check.changes.push(Change::new(
                Work::Unconfigure(path),
                format!(
                    "no served kernel needs a compiler newer than the system gcc {system_major}"
                ),
            ));
        }
    }
    Ok(())
}
