//! `kernel-module`: "installed" is not "built". For the target kernel and the default boot kernel
//! (the next boot runs it), the `nvidia` module that modprobe would load (`modules.dep` under
//! `/lib/modules/<kver>/`: `extra/`, `updates/`, `weak-updates/`, `kernel/drivers/video/`) must
//! carry the driver's version in its modinfo — however it got there (see [`gpuhost_host::kmods`]).
//! NVIDIA's DKMS packages register as `nvidia` (proprietary, `kmod-nvidia-latest-dkms`) or
//! `nvidia-open` (open, `kmod-nvidia-open-dkms`; NVIDIA/yum-packaging-dkms-nvidia
//! `dkms-open-nvidia.spec`), and their `%post` builds for the *running* kernel only, ignoring
//! failures (`|| :`). So a missing module of a DKMS stream is built with `dkms install -m <name>
//! -v <ver> -k <kver>` for each kernel that lacks it (in an install root: chrooted); if it is
//! still missing, the step fails with the tail of that build's `make.log`
//! (`/var/lib/dkms/<name>/<ver>/…`). DKMS's tree is for diagnostics only. On a live host the
//! loaded module must be the driver's version.

use anyhow::Result;

use super::module::precompiled_kmod;
use super::signing::{self, Signer};
use super::{driver_version, host_arch, StreamKind};
use crate::step::{Change, Check, Ctx, Step, Work};
use gpuhost_host::cmd::tail_lines;
use gpuhost_host::error::hinted;
use gpuhost_host::kmods;

pub(crate) struct KernelModule;

/// Lines of make.log an error shows.
const LOG_LINES: usize = 6;

/// What modprobe would load as `nvidia` for `kver`.
fn module_state(ctx: &Ctx<'_>, kver: &str) -> kmods::ModuleState {
    kmods::state(ctx.host, kver, "nvidia").unwrap_or(kmods::ModuleState::Absent)
}

/// True when modprobe would load the driver's `nvidia` module for `kver`.
fn built(ctx: &Ctx<'_>, drv: &str, kver: &str) -> bool {
    module_state(ctx, kver).is_version(drv)
}

/// The tail of DKMS's make.log for `kver` (dkms ≥ 3.1 keeps one per kernel; 3.0 keeps the last
/// build's in `build/`).
fn make_log(ctx: &Ctx<'_>, kind: StreamKind, drv: &str, kver: &str) -> Option<(String, String)> {
    let name = kind.dkms_name()?;
    [
        format!(
            "/var/lib/dkms/{name}/{drv}/{kver}/{}/log/make.log",
            host_arch(ctx)
        ),
        format!("/var/lib/dkms/{name}/{drv}/build/make.log"),
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

/// Whose signature the modules must carry: the profile's certificate for DKMS builds when it
/// names one; with Secure Boot on, for NVIDIA's precompiled kmods, a certificate the firmware
/// trusts. `None`: nothing to check (Secure Boot off and no key, or a DKMS stream without key,
/// which `apply` refused earlier when Secure Boot is on).
fn expected_signer(ctx: &Ctx<'_>, kind: StreamKind) -> Result<Option<Signer>> {
    // Prebuilt kmods: the fleet certificate their repo carries, Secure Boot or not.
    if let Some(kmods) = ctx.driver.as_ref().and_then(|p| p.kmods.as_ref()) {
        return Ok(Some(Signer::Profile(signing::fleet_cert(kmods)?)));
    }
    Ok(match (kind, ctx.profile.secure_boot.pair()) {
        (StreamKind::Precompiled, _) if signing::enabled(ctx.facts) => Some(Signer::Firmware(
            gpuhost_host::secureboot::Keys::read(ctx.host)?,
        )),
        (StreamKind::Precompiled, _) | (_, None) => None,
        (_, Some((_, cert))) => Some(Signer::Profile(gpuhost_host::secureboot::Cert::load(
            ctx.host, cert,
        )?)),
    })
}

impl KernelModule {
    fn missing(ctx: &Ctx<'_>, drv: &str) -> Vec<String> {
        ctx.facts
            .kernels_to_serve()
            .into_iter()
            .filter(|k| !built(ctx, drv, k))
            .collect()
    }

    fn failure(ctx: &Ctx<'_>, kind: StreamKind, drv: &str, missing: &[String]) -> anyhow::Error {
        let kver = missing.first().map(String::as_str).unwrap_or_default();
        let all = missing
            .iter()
            .map(|k| {
                format!(
                    "{k} ({}; {})",
                    role(ctx, k),
                    module_state(ctx, k).describe()
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        match (kind, make_log(ctx, kind, drv, kver)) {
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

impl KernelModule {
    /// A precompiled stream: each served kernel without a module gets NVIDIA's kmod for it; a
    /// kmod installed and still no module is a failure.
    fn precompiled_missing(
        ctx: &Ctx<'_>,
        drv: &str,
        missing: &[String],
        check: &mut Check,
    ) -> Result<()> {
        for kver in missing {
            let pkg = precompiled_kmod(drv, kver);
            if !ctx.installed_one(&pkg)?.is_empty() {
                return Err(Self::failure(ctx, StreamKind::Precompiled, drv, missing));
            }
            check.changes.push(Change::install(
                vec![pkg],
                format!("no module for the {} kernel", role(ctx, kver)),
            ));
        }
        Ok(())
    }

    /// Prebuilt kmods (`driver.kmod_repo`): each served kernel without a module gets its kmod
    /// from the repo, by file; a kmod installed and still no module is a failure.
    fn prebuilt_missing(
        ctx: &Ctx<'_>,
        drv: &str,
        missing: &[String],
        prebuilt: &[crate::run::PrebuiltKmod],
        check: &mut Check,
    ) -> Result<()> {
        let plan = super::context::plan(ctx)?;
        if let Some(e) = plan.kmods.as_ref().and_then(|k| {
            k.no_kmod(drv, plan.choice.flavour, false)
                .filter(|_| k.missing.iter().any(|m| missing.contains(m)))
        }) {
            return Err(e);
        }
        for kver in missing {
            let Some(k) = prebuilt.iter().find(|k| &k.kernel == kver) else {
                continue;
            };
            if ctx
                .installed_one(&k.package)?
                .iter()
                .any(|p| p.version == drv)
            {
                return Err(hinted(
                    format!(
                        "the build host's kmod {} {drv} is installed, but modprobe finds no NVIDIA {drv} module for the {} kernel {kver} ({})",
                        k.package,
                        role(ctx, kver),
                        module_state(ctx, kver).describe()
                    ),
                    format!(
                        "reinstall it (dnf reinstall {}), or check /lib/modules/{kver}/extra and run depmod -a {kver}",
                        k.file.display()
                    ),
                ));
            }
            check.changes.push(Change::install(
                vec![k.file.display().to_string()],
                format!(
                    "no module for the {} kernel: the build host's kmod {} (nothing is compiled here)",
                    role(ctx, kver),
                    k.package
                ),
            ));
        }
        Ok(())
    }

    /// Prebuilt kmods (`driver.kmod_repo`) that come in this run with the rest of the driver's
    /// packages, not by this step: the served kernels whose kmod is not installed at the
    /// driver's version while their module is there (a module DKMS built, which the kmod
    /// replaces in the driver step's transaction), or while driver-repo first swaps or repairs
    /// the driver (its one transaction brings the new kmods). Each is a note, no change: the
    /// step is checked again once the transaction has run, and a module missing then fails.
    fn incoming(
        ctx: &Ctx<'_>,
        drv: &str,
        missing: &[String],
        prebuilt: &[crate::run::PrebuiltKmod],
        check: &mut Check,
    ) -> Result<Vec<String>> {
        let swap = super::installed::transition(ctx)?.driver_repo_first();
        let mut out = Vec::new();
        for k in prebuilt {
            let installed = ctx
                .installed_one(&k.package)?
                .iter()
                .any(|p| p.version == drv);
            if installed || (missing.contains(&k.kernel) && !swap) {
                continue;
            }
            check.notes.push(if swap {
                format!(
                    "the {} kernel {}: the build host's kmod {} comes with driver-repo's one transaction (nothing is compiled here)",
                    role(ctx, &k.kernel),
                    k.kernel,
                    k.package
                )
            } else {
                format!(
                    "the {} kernel {}: the build host's kmod {} replaces the module there ({}) in the driver step's transaction (nothing is compiled here)",
                    role(ctx, &k.kernel),
                    k.kernel,
                    k.package,
                    module_state(ctx, &k.kernel).describe()
                )
            });
            out.push(k.kernel.clone());
        }
        Ok(out)
    }

    /// A DKMS stream: DKMS builds the module for the served kernels that lack it.
    fn dkms_missing(
        ctx: &Ctx<'_>,
        kind: StreamKind,
        drv: &str,
        missing: &[String],
        check: &mut Check,
    ) -> Result<()> {
        let (Some(module), Some(package)) = (kind.dkms_name(), kind.dkms_package()) else {
            return Ok(());
        };
        let kmod_installed = ctx.installed_one(package)?.iter().any(|p| p.version == drv);
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
            format!("no NVIDIA {drv} module yet: the driver step installs {package}; DKMS ({module}) builds it for each served kernel")
        };
        check.changes.push(Change::new(
            Work::Rebuild {
                module: module.to_string(),
                version: drv.to_string(),
                kernels: missing.to_vec(),
                resign: false,
            },
            why,
        ));
        Ok(())
    }

    /// Under Secure Boot: every module the kernels have is signed by the key that will be
    /// trusted; DKMS signs again what is not, a precompiled module needs NVIDIA's key enrolled.
    fn signatures(
        ctx: &Ctx<'_>,
        kind: StreamKind,
        drv: &str,
        have: &[&String],
        signer: &Signer,
        check: &mut Check,
    ) -> Result<()> {
        if have.is_empty() {
            return Ok(());
        }
        let mut unsigned = Vec::new();
        let mut why = Vec::new();
        for k in have {
            let p = signing::problems(ctx.host, k, signer)?;
            if p.is_empty() {
                continue;
            }
            why.push(format!("{k}: {}", signing::compact(&p)));
            unsigned.push((*k).clone());
        }
        // What a wrong signature means: a refusal at load time only under Secure Boot.
        let verdict = if signing::enabled(ctx.facts) {
            "Secure Boot would refuse the module"
        } else {
            "the module is not signed as the profile says"
        };
        match (kind.dkms_name(), unsigned.is_empty()) {
            (_, true) => check.notes.push(match signer {
                Signer::Profile(c) => format!("modules signed by {c}"),
                Signer::Firmware(_) => "modules signed by an enrolled key".to_string(),
            }),
            // The build host's kmod installed, its module signed otherwise: DKMS cannot help.
            (_, false) if super::set::prebuilt(ctx).is_some() => {
                return Err(hinted(
                    format!(
                        "{verdict}: {}; the build host's kmods sign with the fleet certificate",
                        why.join("; ")
                    ),
                    "reinstall the kmod from the kmod repo (dnf reinstall <its file>), or check that driver.kmod_repo is the repo whose certificate the node trusts",
                ))
            }
            (Some(module), false) => check.changes.push(Change::new(
                Work::Rebuild {
                    module: module.to_string(),
                    version: drv.to_string(),
                    kernels: unsigned,
                    resign: true,
                },
                format!("{verdict}: {}", why.join("; ")),
            )),
            (None, false) => {
                return Err(hinted(
                    format!("Secure Boot is on and NVIDIA's precompiled module will not load: {}", why.join("; ")),
                    format!("enroll the certificate NVIDIA signs its precompiled kmods with: {}; `mokutil --import NVIDIA2019-public_key.der`, reboot and confirm it in MokManager at the console", gpuhost_host::secureboot::NVIDIA_PRECOMPILED_CERT),
                ))
            }
        }
        Ok(())
    }

    /// On a live host: the loaded module is the driver's, or a reboot is owed, or it is loaded.
    fn loaded(ctx: &Ctx<'_>, drv: &str, missing: &[String], check: &mut Check) -> Result<()> {
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
        Ok(())
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

    fn needs_driver_package(&self) -> bool {
        true
    }

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::not_applicable(ctx)
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let drv = driver_version(ctx)?.driver;
        let kind = StreamKind::of(super::stream(ctx));
        let mut check = Check::default();
        let mut missing = Self::missing(ctx, &drv);
        // Prebuilt kmods the driver's transaction brings in this run: their kernels' modules
        // are the kmods' once it has run, whatever is there now.
        let mut incoming = Vec::new();
        if let Some(prebuilt) = super::set::prebuilt(ctx) {
            incoming = Self::incoming(ctx, &drv, &missing, &prebuilt, &mut check)?;
            missing.retain(|k| !incoming.contains(k));
            Self::prebuilt_missing(ctx, &drv, &missing, &prebuilt, &mut check)?;
        } else if kind == StreamKind::Precompiled {
            Self::precompiled_missing(ctx, &drv, &missing, &mut check)?;
        } else if !missing.is_empty() {
            Self::dkms_missing(ctx, kind, &drv, &missing, &mut check)?;
        }
        let served = ctx.facts.kernels_to_serve();
        let have: Vec<&String> = served
            .iter()
            .filter(|k| !missing.contains(k) && !incoming.contains(k))
            .collect();
        if let Some(signer) = expected_signer(ctx, kind)? {
            Self::signatures(ctx, kind, &drv, &have, &signer, &mut check)?;
        }
        if !have.is_empty() {
            check.notes.push(format!(
                "NVIDIA {drv} module for {}",
                have.iter()
                    .map(|k| format!(
                        "{k} ({}: {})",
                        role(ctx, k),
                        module_state(ctx, k).describe()
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if ctx.host.is_live() {
            Self::loaded(ctx, &drv, &missing, &mut check)?;
        }
        Ok(check)
    }

    /// Each kernel's build is judged by its result, one kernel at a time, so that a failure
    /// shows that build's `make.log` (DKMS 3.0 keeps only the last build's).
    fn apply(&self, ctx: &mut Ctx<'_>, work: &Work) -> Result<()> {
        if let Work::Rebuild {
            module,
            version,
            kernels,
            resign,
        } = work
        {
            let kind = StreamKind::of(super::stream(ctx));
            let package = kind.dkms_package().unwrap_or_default();
            if ctx.installed_one(package)?.is_empty() {
                // Nothing to build: the driver's transaction did not install it.
                return Err(Self::failure(
                    ctx,
                    kind,
                    version,
                    &Self::missing(ctx, version),
                ));
            }
            let signer = expected_signer(ctx, kind)?;
            for kver in kernels {
                let mut said = String::new();
                let mut setup_failed = None;
                if !resign {
                    crate::work::forget_stale_dkms_build(ctx.host, module, version, kver)?;
                }
                for cmd in crate::work::dkms_rebuild(ctx.host, module, version, kver, *resign) {
                    // Judged by the module modprobe would load, not by dkms's exit status.
                    let out = cmd.output()?;
                    said.push_str(&out.stdout);
                    // The chroot around dkms could not be set up (no /proc to mount, …): dkms
                    // never ran, and that is the error to name, not the headers.
                    if !out.success() && out.stderr.contains("unshare:") {
                        setup_failed.get_or_insert_with(|| cmd.failure(&out));
                    }
                }
                if !built(ctx, version, kver) {
                    if let Some(e) = setup_failed {
                        return Err(hinted(
                            format!("no NVIDIA {version} module for kernel {kver}: DKMS could not run in the root: {e:#}"),
                            "give the root a /proc directory (image builders bind-mount /dev and /proc), then apply again",
                        ));
                    }
                    return Err(Self::failure(
                        ctx,
                        kind,
                        version,
                        std::slice::from_ref(kver),
                    ));
                }
                if let Some(s) = &signer {
                    let p = signing::problems(ctx.host, kver, s)?;
                    if !p.is_empty() {
                        // What dkms said about signing ("Binary … sign-file not found, modules
                        // won't be signed", the key it used).
                        let dkms_said: Vec<&str> = said
                            .lines()
                            .map(str::trim)
                            .filter(|l| l.to_lowercase().contains("sign"))
                            .collect();
                        return Err(hinted(
                            format!(
                                "DKMS built the NVIDIA {version} module for {kver} but did not sign it right: {}; dkms said: {}",
                                p.join(", "),
                                if dkms_said.is_empty() { "nothing about signing".to_string() } else { dkms_said.join(" / ") }
                            ),
                            format!("DKMS 3.x signs with /lib/modules/{kver}/build/scripts/sign-file (from the kernel's devel package) and the key named in {}", signing::DROPIN),
                        ));
                    }
                }
            }
            return Ok(());
        }
        crate::work::carry_out(ctx.host, work)
    }
}
