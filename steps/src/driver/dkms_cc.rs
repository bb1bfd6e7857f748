//! The compiler DKMS builds with, for every DKMS module of a UEK kernel.
//!
//! UEK is built with a newer GCC than the system one (UEK7 on OL8: gcc 11 vs 8.5; UEK8 on OL9:
//! gcc 14 vs 11.5). NVIDIA's Driver Installation Guide (Oracle Linux page) says the kernel's
//! compiler "must be configured to build all the DKMS modules that need to be used with the UEK
//! kernel" — nvidia, nvidia-open, GPUDirect Storage, OFED — not one of them. What DKMS reads for
//! that (read in the dkms script itself, dkms-project/dkms):
//!
//! - dkms ≥ 3.3.0: `build_environment` in `/etc/dkms/framework.conf` or
//!   `/etc/dkms/framework.conf.d/*.conf` names a file that `do_build` sources before building
//!   *any* module, with `$kernelver` set (commit 5548089 "Add build_environment"; its man page's
//!   example is exactly `build_environment="/opt/rh/gcc-toolset-11/enable"` for UEK on Oracle
//!   Linux). gpuhost writes a drop-in naming a small script that enables the kernel's
//!   `gcc-toolset-N` for UEK kernel releases only, so RHCK builds keep the system gcc.
//! - dkms 3.0 – 3.2: framework.conf accepts only the tree, signing and a few other variables
//!   (`dkms_framework_nonsigning_variables`), sourced in a subshell: no compiler setting reaches
//!   a build. The only per-build hook is `/etc/dkms/<module>.conf`, sourced after the module's
//!   own `dkms.conf` with `$kernelver` set. gpuhost writes one for every module DKMS has sources
//!   for (`/usr/src/<module>-<version>/dkms.conf`), appending `CC=<toolset gcc>` to `MAKE[0]`
//!   for UEK kernel releases only; a module added later gets its file on the next apply.
//!
//! Everything here is pure text and version logic; the `build-deps` step writes the files.

use serde::Serialize;

/// First dkms release with `build_environment`.
pub(crate) const BUILD_ENVIRONMENT_SINCE: &str = "3.3.0";
/// The framework drop-in gpuhost writes (dkms ≥ 3.3).
pub(crate) const FRAMEWORK_DROPIN: &str = "/etc/dkms/framework.conf.d/gpuhost-uek-compiler.conf";
/// The script it names.
pub(crate) const ENV_SCRIPT: &str = "/etc/dkms/gpuhost-uek-compiler.sh";
/// The first line of every file gpuhost writes here.
pub(crate) const MARKER: &str = "# Written by gpuhost (build-deps)";

/// A shell `case` pattern for the kernel releases of one UEK series:
/// `6.12.0-100.28.2.2.el9uek.x86_64` → `6.12.0-*.el9uek.*` (later updates of the series are
/// built by the same compiler, and DKMS builds them when they are installed).
pub(crate) fn uek_series_pattern(kver: &str) -> Option<String> {
    let (version, rest) = kver.split_once('-')?;
    let dist = rest.split('.').find(|p| p.ends_with("uek"))?;
    Some(format!("{version}-*.{dist}.*"))
}

/// The `gcc-toolset-N` compiler of a kernel series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Toolset {
    /// `case` pattern of the kernel releases ([`uek_series_pattern`]).
    pub pattern: String,
    pub major: u32,
    /// `6.12.0-….el9uek.x86_64 was built by gcc (GCC) 14.2.1 …`
    pub why: String,
}

impl Toolset {
    pub(crate) fn gcc(&self) -> String {
        format!("/opt/rh/gcc-toolset-{}/root/usr/bin/gcc", self.major)
    }

    pub(crate) fn enable(&self) -> String {
        format!("/opt/rh/gcc-toolset-{}/enable", self.major)
    }

    /// The package that brings the compiler (and, through `-runtime`, its `enable` script).
    pub(crate) fn package(&self) -> String {
        format!("gcc-toolset-{}-gcc", self.major)
    }
}

/// `why` comes from a kernel's .config: one comment line, whatever it holds.
fn comment(why: &str) -> String {
    why.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `/etc/dkms/framework.conf.d/gpuhost-uek-compiler.conf` (dkms ≥ 3.3).
pub(crate) fn framework_dropin() -> String {
    format!(
        "{MARKER}: DKMS sources {ENV_SCRIPT} before building any module (dkms >= {BUILD_ENVIRONMENT_SINCE}).\n\
         build_environment=\"{ENV_SCRIPT}\"\n"
    )
}

/// The script `build_environment` names: the toolset of the kernel being built for, UEK only.
pub(crate) fn env_script(toolsets: &[Toolset]) -> String {
    let mut s = format!(
        "{MARKER}.\n\
         # Sourced by DKMS before it builds any module for $kernelver: UEK kernels are built with\n\
         # another GCC than the system one, and every DKMS module for them must be built with it\n\
         # (NVIDIA Driver Installation Guide, Oracle Linux). Other kernels keep the system gcc.\n\
         case \"$kernelver\" in\n"
    );
    for t in toolsets {
        s.push_str(&format!(
            "  # {}\n  {}) . {} ;;\n",
            comment(&t.why),
            t.pattern,
            t.enable()
        ));
    }
    s.push_str("esac\n");
    s
}

/// `/etc/dkms/<module>.conf` (dkms < 3.3): `CC=` appended to the module's own `MAKE[0]`.
pub(crate) fn module_conf(module: &str, toolsets: &[Toolset]) -> String {
    let mut s = format!(
        "{MARKER}.\n\
         # DKMS sources this after {module}'s dkms.conf: UEK kernels are built with another GCC\n\
         # than the system one, and every DKMS module for them must be built with it (NVIDIA\n\
         # Driver Installation Guide, Oracle Linux). Other kernels keep the system gcc.\n\
         case \"$kernelver\" in\n"
    );
    for t in toolsets {
        s.push_str(&format!(
            "  # {}\n  {}) MAKE[0]=\"${{MAKE[0]}} CC={}\" ;;\n",
            comment(&t.why),
            t.pattern,
            t.gcc()
        ));
    }
    s.push_str("esac\n");
    s
}

/// The per-module file of `module`.
pub(crate) fn module_conf_path(module: &str) -> String {
    format!("/etc/dkms/{module}.conf")
}

/// The DKMS module name of a source directory `/usr/src/<module>-<version>` whose `dkms.conf`
/// says `PACKAGE_VERSION=<version>`: `nvidia-open-580.82.07` → `nvidia-open`. DKMS's own name
/// for the module is the directory's (`dkms add -m nvidia-open`), not dkms.conf's
/// `PACKAGE_NAME` (NVIDIA's open flavour keeps `PACKAGE_NAME="nvidia"`).
pub(crate) fn module_of_source_dir(dir_name: &str, package_version: &str) -> Option<String> {
    let name = dir_name.strip_suffix(package_version)?.strip_suffix('-')?;
    (!name.is_empty()).then(|| name.to_string())
}

/// `PACKAGE_VERSION` of a dkms.conf (`PACKAGE_VERSION="580.82.07"`).
pub(crate) fn package_version(dkms_conf: &str) -> Option<String> {
    dkms_conf.lines().find_map(|l| {
        let v = l.trim().strip_prefix("PACKAGE_VERSION=")?;
        let v = v.trim().trim_matches('"').trim_matches('\'');
        (!v.is_empty()).then(|| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn uek8() -> Toolset {
        Toolset {
            pattern: "6.12.0-*.el9uek.*".into(),
            major: 14,
            why: "6.12.0-100.28.2.2.el9uek.x86_64 was built by gcc (GCC) 14.2.1".into(),
        }
    }

    #[rstest]
    #[case("6.12.0-100.28.2.2.el9uek.x86_64", Some("6.12.0-*.el9uek.*"))]
    #[case("5.15.0-200.131.27.el8uek.x86_64", Some("5.15.0-*.el8uek.*"))]
    #[case("4.18.0-553.16.1.el8_10.x86_64", None)]
    fn series_patterns(#[case] kver: &str, #[case] pat: Option<&str>) {
        assert_eq!(uek_series_pattern(kver).as_deref(), pat);
    }

    #[test]
    fn the_env_script_enables_the_toolset_for_uek_only() {
        let s = env_script(&[uek8()]);
        assert!(s.starts_with(MARKER));
        assert!(s.contains("  6.12.0-*.el9uek.*) . /opt/rh/gcc-toolset-14/enable ;;\n"));
        assert!(s.ends_with("esac\n"));
        assert!(framework_dropin().contains(&format!("build_environment=\"{ENV_SCRIPT}\"")));
    }

    #[test]
    fn the_module_conf_appends_cc_to_the_modules_own_make() {
        let s = module_conf("nvidia-open", &[uek8()]);
        assert!(s.contains(
            "  6.12.0-*.el9uek.*) MAKE[0]=\"${MAKE[0]} CC=/opt/rh/gcc-toolset-14/root/usr/bin/gcc\" ;;\n"
        ));
        assert_eq!(
            module_conf_path("nvidia-open"),
            "/etc/dkms/nvidia-open.conf"
        );
    }

    #[test]
    fn a_kernel_config_cannot_inject_lines() {
        let mut evil = uek8();
        evil.why = "gcc\nMAKE[0]=\"rm -rf /\"\r".into();
        let good = module_conf("nvidia", &[uek8()]);
        let bad = module_conf("nvidia", &[evil.clone()]);
        assert_eq!(bad.lines().count(), good.lines().count(), "{bad}");
        assert_eq!(
            env_script(&[evil]).lines().count(),
            env_script(&[uek8()]).lines().count()
        );
    }

    #[rstest]
    #[case("nvidia-open-580.82.07", "580.82.07", Some("nvidia-open"))]
    #[case("nvidia-535.104.05", "535.104.05", Some("nvidia"))]
    #[case("nvidia-fs-2.20.5", "2.20.5", Some("nvidia-fs"))]
    #[case("kernels", "580.82.07", None)]
    fn dkms_module_names(#[case] dir: &str, #[case] ver: &str, #[case] name: Option<&str>) {
        assert_eq!(module_of_source_dir(dir, ver).as_deref(), name);
    }

    #[test]
    fn reads_package_version() {
        let conf = "PACKAGE_NAME=\"nvidia\"\nPACKAGE_VERSION=\"580.82.07\"\nAUTOINSTALL=\"yes\"\n";
        assert_eq!(package_version(conf).as_deref(), Some("580.82.07"));
        assert_eq!(package_version("PACKAGE_NAME=x\n"), None);
    }
}
