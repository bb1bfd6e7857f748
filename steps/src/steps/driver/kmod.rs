//! `kernel-module`: "installed" is not "built". The NVIDIA module must exist for the target
//! kernel and for the default boot kernel (the next boot runs it): for DKMS streams in DKMS's
//! tree for the driver's version (`/var/lib/dkms/nvidia/<ver>/<kver>/<arch>/module/`), for
//! precompiled streams in `/lib/modules/<kver>/extra/`. DKMS failures do not fail the RPM
//! scriptlet, so a missing module is rebuilt once (`dnf reinstall` of the kmod package runs
//! the DKMS build again) and, if still missing, is a failure that shows the tail of `make.log`.
//! On a live host the loaded module must be the driver's version.

use anyhow::Result;

use super::module::precompiled_kmod;
use super::{driver_version, host_arch, StreamKind};
use crate::cmd::tail_lines;
use crate::error::hinted;
use crate::runner::{Change, Check, Ctx, Step, Work};

pub struct KernelModule;

/// Lines of make.log an error shows.
const LOG_LINES: usize = 6;

fn has_ko(ctx: &Ctx<'_>, dir: &str) -> bool {
    ctx.host
        .files_with_prefix(dir, "nvidia.ko")
        .into_iter()
        .any(|f| f == "nvidia.ko" || f.starts_with("nvidia.ko."))
}

/// True when the module for `kver` is there.
fn built(ctx: &Ctx<'_>, kind: StreamKind, drv: &str, kver: &str) -> bool {
    match kind {
        StreamKind::Precompiled => has_ko(ctx, &format!("/lib/modules/{kver}/extra")),
        StreamKind::Dkms | StreamKind::Open => has_ko(
            ctx,
            &format!("/var/lib/dkms/nvidia/{drv}/{kver}/{}/module", host_arch()),
        ),
    }
}

/// The tail of DKMS's make.log for `kver` (its own log, else the last build's).
fn make_log(ctx: &Ctx<'_>, drv: &str, kver: &str) -> Option<(String, String)> {
    [
        format!(
            "/var/lib/dkms/nvidia/{drv}/{kver}/{}/log/make.log",
            host_arch()
        ),
        format!("/var/lib/dkms/nvidia/{drv}/build/make.log"),
    ]
    .into_iter()
    .find_map(|p| {
        let text = ctx.host.read_opt(&p).ok().flatten()?;
        Some((p, tail_lines(&text, LOG_LINES)))
    })
}

fn role(ctx: &Ctx<'_>, kver: &str) -> &'static str {
    if ctx.facts.target_kernel.as_deref() == Some(kver) {
        "target"
    } else {
        "default boot"
    }
}

impl KernelModule {
    fn missing(ctx: &Ctx<'_>, kind: StreamKind, drv: &str) -> Vec<String> {
        ctx.facts
            .kernels_to_serve()
            .into_iter()
            .filter(|k| !built(ctx, kind, drv, k))
            .collect()
    }

    fn failure(ctx: &Ctx<'_>, kind: StreamKind, drv: &str, missing: &[String]) -> anyhow::Error {
        let kver = missing.first().map(String::as_str).unwrap_or_default();
        let all = missing
            .iter()
            .map(|k| format!("{k} ({})", role(ctx, k)))
            .collect::<Vec<_>>()
            .join(", ");
        match (kind, make_log(ctx, drv, kver)) {
            (StreamKind::Precompiled, _) => hinted(
                format!("no NVIDIA {drv} module for kernel {all}: the precompiled stream has none for it"),
                "use a DKMS stream (latest-dkms), or boot a kernel NVIDIA built modules for",
            ),
            (_, Some((path, tail))) => hinted(
                format!("no NVIDIA {drv} module for kernel {all}: the DKMS build failed; {path}: {tail}"),
                "fix what make.log shows (headers, compiler: see build-deps), then apply again",
            ),
            (_, None) => hinted(
                format!("no NVIDIA {drv} module for kernel {all}, and DKMS left no make.log"),
                "check that the kernel headers are installed and run `dkms autoinstall`",
            ),
        }
    }
}

impl Step for KernelModule {
    fn id(&self) -> &'static str {
        "kernel-module"
    }

    fn summary(&self) -> &'static str {
        "check the NVIDIA module is built for the target and the default boot kernel"
    }

    fn rpm_names(&self, ctx: &Ctx<'_>) -> Vec<String> {
        driver_version(ctx)
            .map(|n| super::module::kmod_packages(ctx, &n.driver))
            .unwrap_or_default()
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::not_applicable(ctx)
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let drv = driver_version(ctx)?.driver;
        let kind = StreamKind::of(&ctx.profile.driver.stream);
        let mut check = Check::default();
        let missing = Self::missing(ctx, kind, &drv);
        let kmod_installed = match kind.dkms_package() {
            Some(k) => ctx.installed_one(k)?.iter().any(|p| p.version == drv),
            None => false,
        };
        for kver in &missing {
            let role = role(ctx, kver);
            if kind == StreamKind::Precompiled {
                let pkg = precompiled_kmod(&drv, kver);
                if ctx.installed_one(&pkg)?.is_empty() {
                    check.changes.push(Change::install(
                        vec![pkg],
                        format!("no module for the {role} kernel"),
                    ));
                    continue;
                }
                return Err(Self::failure(ctx, kind, &drv, &missing));
            }
        }
        if kind != StreamKind::Precompiled && !missing.is_empty() {
            let package = kind.dkms_package().unwrap_or_default().to_string();
            let why = if kmod_installed {
                format!(
                    "no NVIDIA {drv} module for the {} kernel",
                    missing
                        .iter()
                        .map(|k| role(ctx, k))
                        .collect::<Vec<_>>()
                        .join(" and ")
                )
            } else {
                format!("no NVIDIA {drv} module yet: the driver step installs {package}, whose DKMS build makes it; built again only if that did not")
            };
            check.changes.push(Change::new(
                Work::Rebuild {
                    package,
                    kernels: missing.clone(),
                },
                why,
            ));
        }
        let served = ctx.facts.kernels_to_serve();
        let have: Vec<&String> = served.iter().filter(|k| !missing.contains(k)).collect();
        if !have.is_empty() {
            check.notes.push(format!(
                "NVIDIA {drv} module built for {}",
                have.iter()
                    .map(|k| format!("{k} ({})", role(ctx, k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if ctx.host.is_live() {
            match ctx.host.read_opt("/sys/module/nvidia/version")? {
                Some(v) if v.trim() == drv => check.notes.push(format!("loaded: {drv}")),
                Some(v) => {
                    check.reboot = Some(format!(
                        "the loaded NVIDIA module is {}, the installed driver {drv}: reboot (or unload and reload the nvidia modules)",
                        v.trim()
                    ))
                }
                None if ctx.facts.nouveau_loaded => {
                    check.notes.push("not loaded: nouveau holds the GPUs until a reboot".into())
                }
                None if missing.is_empty() && !ctx.facts.gpus.is_empty() => {
                    check.changes.push(Change::new(
                        Work::Run(vec!["modprobe".into(), "nvidia".into()]),
                        "the module is not loaded",
                    ))
                }
                None => {}
            }
        }
        Ok(check)
    }

    /// A rebuild is judged by its result: DKMS failures do not fail the RPM scriptlet, so a
    /// module still missing afterwards fails the step with the tail of `make.log`.
    fn apply(&self, ctx: &mut Ctx<'_>, work: &Work) -> Result<()> {
        if let Work::Rebuild { package, .. } = work {
            let drv = driver_version(ctx)?.driver;
            let kind = StreamKind::of(&ctx.profile.driver.stream);
            if ctx.installed_one(package)?.is_empty() {
                // Nothing to rebuild: the driver's transaction did not install it.
                return Err(Self::failure(
                    ctx,
                    kind,
                    &drv,
                    &Self::missing(ctx, kind, &drv),
                ));
            }
            crate::work::carry_out(ctx.host, work)?;
            let missing = Self::missing(ctx, kind, &drv);
            if !missing.is_empty() {
                return Err(Self::failure(ctx, kind, &drv, &missing));
            }
            return Ok(());
        }
        crate::work::carry_out(ctx.host, work)
    }
}
