//! `build-deps`: what DKMS needs to build the NVIDIA module — `dkms` (Oracle's developer EPEL),
//! `gcc`, `make`, `elfutils-libelf-devel`, `gcc-c++` for the open modules — and the kernel's
//! own compiler. UEK is built with a newer GCC than the system one (UEK7 on OL8: gcc 11 vs 8.5);
//! DKMS with the system gcc then fails (`unrecognized command line option
//! '-ftrivial-auto-var-init=zero'`). The kernel's compiler is read from
//! `CONFIG_CC_VERSION_TEXT` in the kernel's configuration — `/usr/src/kernels/<kver>/.config`
//! (headers), else the copy the kernel package itself ships (`/lib/modules/<kver>/config`,
//! `/boot/config-<kver>`), so that it is known before the headers are installed; when it is
//! newer than the system gcc, the matching `gcc-toolset-N-gcc` is installed and
//! `/etc/dkms/nvidia.conf` makes DKMS build with it. The override is written before the
//! package transaction, whose DKMS scriptlet reads it.

use anyhow::Result;

use super::StreamKind;
use crate::rpm::vercmp;
use crate::runner::{Change, Check, Ctx, FileWrite, Step, Work};

pub struct BuildDeps;

/// DKMS's per-module configuration, read after the module's own dkms.conf.
pub const DKMS_OVERRIDE: &str = "/etc/dkms/nvidia.conf";
/// The first line of an override gpuhost wrote.
const MARKER: &str = "# Written by gpuhost";

/// The compiler named by a kernel `.config`: `(text, gcc major)`; the major is `None` for a
/// compiler that is not GCC. `CONFIG_CC_VERSION_TEXT` first, else `CONFIG_GCC_VERSION`.
pub fn kernel_compiler(config: &str) -> Option<(String, Option<u32>)> {
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

/// The GCC major version of a gcc package version (`8.5.0` → 8).
fn major_of(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// The system gcc of an Oracle Linux release, for when gcc is not installed yet.
fn system_gcc_major(os_major: u32) -> u32 {
    match os_major {
        8 => 8,
        _ => 11,
    }
}

/// The compiler path of `gcc-toolset-N`.
pub fn toolset_gcc(n: u32) -> String {
    format!("/opt/rh/gcc-toolset-{n}/root/usr/bin/gcc")
}

/// The content of `/etc/dkms/nvidia.conf` that builds with `gcc-toolset-N`.
pub fn override_text(n: u32, why: &str) -> String {
    // `why` comes from the kernel's .config: one comment line, whatever it holds.
    let why: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!(
        "{MARKER}: build the NVIDIA module with the compiler that built the kernel\n\
         # ({why}).\n\
         MAKE[0]=\"'make' -j$(nproc) NV_EXCLUDE_BUILD_MODULES='' KERNEL_UNAME=${{kernelver}} IGNORE_CC_MISMATCH='' CC={} modules\"\n",
        toolset_gcc(n)
    )
}

/// What the step wants, worked out from the profile and the files of the served kernels.
struct Wanted {
    packages: Vec<String>,
    /// `(toolset major, why)` when a served kernel needs a newer GCC than the system one.
    toolset: Option<(u32, String)>,
    notes: Vec<String>,
}

fn wanted(ctx: &Ctx<'_>, system_major: u32) -> Wanted {
    let mut packages: Vec<String> = ["dkms", "gcc", "make", "elfutils-libelf-devel"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if StreamKind::of(&ctx.profile.driver.stream) == StreamKind::Open {
        packages.push("gcc-c++".to_string());
    }
    let mut notes = Vec::new();
    let mut toolset: Option<(u32, String)> = None;
    for kver in ctx.facts.kernels_to_serve() {
        let config = [
            format!("/usr/src/kernels/{kver}/.config"),
            format!("/lib/modules/{kver}/config"),
            format!("/boot/config-{kver}"),
        ]
        .iter()
        .find_map(|p| ctx.host.read_opt(p).ok().flatten());
        let Some(config) = config else {
            notes.push(format!(
                "the compiler of {kver} is read from its configuration once its headers are installed"
            ));
            continue;
        };
        match kernel_compiler(&config) {
            Some((text, Some(major))) if major > system_major => {
                if toolset.as_ref().is_none_or(|(n, _)| major > *n) {
                    toolset = Some((major, format!("{kver} was built by {text}")));
                }
            }
            Some((_, Some(_))) => {}
            Some((text, None)) => notes.push(format!(
                "{kver} was built by {text}, not GCC: no compiler override"
            )),
            None => notes.push(format!("{kver}: its .config names no compiler")),
        }
    }
    if let Some((n, _)) = &toolset {
        packages.push(format!("gcc-toolset-{n}-gcc"));
    }
    Wanted {
        packages,
        toolset,
        notes,
    }
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

    fn not_applicable(&self, ctx: &Ctx<'_>) -> Option<String> {
        super::not_applicable(ctx).or_else(|| {
            (StreamKind::of(&ctx.profile.driver.stream) == StreamKind::Precompiled).then(|| {
                format!(
                    "nvidia-driver:{} is a precompiled stream: nothing is built on this host",
                    ctx.profile.driver.stream
                )
            })
        })
    }

    fn check(&self, ctx: &Ctx<'_>) -> Result<Check> {
        let system_major = Self::system_major(ctx)?;
        let w = wanted(ctx, system_major);
        let mut check = Check {
            notes: w.notes.clone(),
            ..Check::default()
        };
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
            check.changes.push(Change::install(missing, why));
        }
        let current = ctx.host.read_opt(DKMS_OVERRIDE)?;
        match &w.toolset {
            Some((n, why)) => {
                let text = override_text(*n, why);
                if current.as_deref() != Some(text.as_str()) {
                    let was = if current.is_some() {
                        "has other content"
                    } else {
                        "absent"
                    };
                    check.changes.push(Change::new(
                        Work::Configure(FileWrite::new(DKMS_OVERRIDE, text, 0o644)),
                        format!(
                            "CC={}: {why}, the system gcc is {system_major}; the file is {was}",
                            toolset_gcc(*n)
                        ),
                    ));
                } else {
                    check.notes.push(format!(
                        "{DKMS_OVERRIDE} builds with gcc-toolset-{n} ({why})"
                    ));
                }
            }
            None => {
                if current.as_deref().is_some_and(|t| t.starts_with(MARKER)) {
                    check.changes.push(Change::new(
                        Work::Unconfigure(DKMS_OVERRIDE.to_string()),
                        format!("no served kernel needs a compiler newer than the system gcc {system_major}"),
                    ));
                }
            }
        }
        if check.changes.is_empty() {
            check
                .notes
                .insert(0, format!("installed: {}", w.packages.join(", ")));
        }
        Ok(check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

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
        let got = kernel_compiler(config);
        assert!(got.is_some(), "{config}");
        assert_eq!(got.and_then(|(_, m)| m), major);
    }

    #[test]
    fn a_config_without_compiler_says_so() {
        assert_eq!(kernel_compiler("CONFIG_MODULES=y\n"), None);
    }

    #[test]
    fn the_override_names_the_toolset_compiler() {
        let t = override_text(11, "x");
        let evil = override_text(11, "gcc\nMAKE[0]=\"rm -rf /\"\r");
        assert_eq!(evil.lines().count(), t.lines().count(), "{evil}");
        assert!(t.contains("CC=/opt/rh/gcc-toolset-11/root/usr/bin/gcc modules\""));
        assert!(t.starts_with(MARKER));
    }
}
