//! NVIDIA's `dkms.conf`, as its DKMS packages ship it (NVIDIA/yum-packaging-dkms-nvidia,
//! `dkms-nvidia.conf`; the open flavour's spec copies it): the make command line
//! (`MAKE[0]="'make' -j2 module SYSSRC=${kernel_source_dir} …"`) and the modules it builds
//! (`BUILT_MODULE_NAME[i]`, `BUILT_MODULE_LOCATION[i]`). The build host runs NVIDIA's own
//! command line, with every CPU instead of NVIDIA's `-j2`.
//!
//! Each value is checked before it reaches a path, a make argument or the RPM's spec: the
//! program is `make`, a module name is a name (`[A-Za-z0-9_-]`: `nvidia%(touch …)` would run a
//! command when rpmbuild expands the spec), a location a relative path of plain names that
//! stays inside the build folder (`../../../opt/site` would have a site file stripped and
//! signed in place).

use anyhow::Result;

use gpuhost_host::invalid;

/// What a `dkms.conf` says of the build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DkmsConf {
    /// `MAKE[0]`, split into words (`make`, `-j2`, `module`, `SYSSRC=${kernel_source_dir}`, …).
    pub(crate) make: Vec<String>,
    /// Each built module: its name and the folder it is built in (relative to the source).
    pub(crate) modules: Vec<(String, String)>,
}

impl DkmsConf {
    pub(crate) fn parse(text: &str, path: &str) -> Result<DkmsConf> {
        let mut make = None;
        let mut names: Vec<(usize, String)> = Vec::new();
        let mut locations: Vec<(usize, String)> = Vec::new();
        for line in text.lines().map(str::trim) {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            if key == "MAKE[0]" || key == "MAKE" {
                make =
                    Some(shlex::split(value).ok_or_else(|| {
                        invalid!("{path}: MAKE[0] is not a command line: {value}")
                    })?);
            } else if let Some(i) = index_of(key, "BUILT_MODULE_NAME") {
                names.push((i, module_name(value, path)?));
            } else if let Some(i) = index_of(key, "BUILT_MODULE_LOCATION") {
                locations.push((i, location(value, path)?));
            }
        }
        let make = make
            .filter(|m| !m.is_empty())
            .ok_or_else(|| invalid!("{path} has no MAKE[0]: not NVIDIA's DKMS source"))?;
        if make[0] != "make" {
            return Err(invalid!(
                "{path}: MAKE[0] runs {:?}, not make, so nothing was compiled: not NVIDIA's DKMS source",
                make[0]
            ));
        }
        if names.is_empty() {
            return Err(invalid!(
                "{path} names no BUILT_MODULE_NAME: not NVIDIA's DKMS source"
            ));
        }
        names.sort();
        let modules = names
            .into_iter()
            .map(|(i, n)| {
                let at = locations
                    .iter()
                    .find(|(j, _)| *j == i)
                    .map(|(_, l)| l.clone())
                    .unwrap_or_default();
                (n, at)
            })
            .collect();
        Ok(DkmsConf { make, modules })
    }

    /// The make command line for one kernel: DKMS's variables filled in (`kernelver`,
    /// `kernel_source_dir`, `dkms_tree`'s are not used by NVIDIA's), `-jN` set to `jobs`
    /// (added when NVIDIA's line has none), and `CC=` when the kernel needs another compiler.
    pub(crate) fn make_for(
        &self,
        kver: &str,
        source_dir: &str,
        jobs: usize,
        cc: Option<&str>,
    ) -> Vec<String> {
        let fill = |w: &str| {
            w.replace("${kernelver}", kver)
                .replace("$kernelver", kver)
                .replace("${kernel_source_dir}", source_dir)
                .replace("$kernel_source_dir", source_dir)
        };
        let mut out: Vec<String> = Vec::new();
        let mut jobs_set = false;
        for w in &self.make {
            if w.starts_with("-j") && w[2..].chars().all(|c| c.is_ascii_digit()) {
                out.push(format!("-j{jobs}"));
                jobs_set = true;
            } else {
                out.push(fill(w));
            }
        }
        if !jobs_set {
            out.insert(1.min(out.len()), format!("-j{jobs}"));
        }
        if let Some(cc) = cc {
            out.push(format!("CC={cc}"));
        }
        out
    }
}

/// A `BUILT_MODULE_NAME`: a module's name, nothing a path, a shell or rpm's macros read.
fn module_name(value: &str, path: &str) -> Result<String> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        return Ok(value.to_string());
    }
    Err(invalid!(
        "{path}: BUILT_MODULE_NAME {value:?} is not a module name (letters, digits, _ and - only), so nothing was compiled: not NVIDIA's DKMS source"
    ))
}

/// A `BUILT_MODULE_LOCATION`: a folder of the source, relative (a trailing `/` as NVIDIA's
/// `kernel-open/`), each part a plain name (no `..`, `.` or empty part, no leading `/`).
fn location(value: &str, path: &str) -> Result<String> {
    let rel = value.trim_end_matches('/');
    let part_ok = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
    };
    if rel.is_empty() || (!value.starts_with('/') && rel.split('/').all(part_ok)) {
        return Ok(rel.to_string());
    }
    Err(invalid!(
        "{path}: BUILT_MODULE_LOCATION {value:?} is not a folder inside the source (a relative path without '..'), so nothing was compiled: not NVIDIA's DKMS source"
    ))
}

/// `i` of `NAME[i]`.
fn index_of(key: &str, name: &str) -> Option<usize> {
    key.strip_prefix(name)?
        .strip_prefix('[')?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVIDIA's dkms-nvidia.conf (yum-packaging-dkms-nvidia), as the open flavour ships it.
    const NVIDIA: &str = r#"PACKAGE_NAME="nvidia"
PACKAGE_VERSION="595.45.04"
AUTOINSTALL="yes"

MAKE[0]="'make' -j2 module SYSSRC=${kernel_source_dir} IGNORE_XEN_PRESENCE=1 IGNORE_PREEMPT_RT_PRESENCE=1 IGNORE_CC_MISMATCH=1"

BUILT_MODULE_NAME[0]="nvidia"
DEST_MODULE_LOCATION[0]="/kernel/drivers/video"

BUILT_MODULE_NAME[1]="nvidia-uvm"
DEST_MODULE_LOCATION[1]="/kernel/drivers/video"

BUILT_MODULE_NAME[2]="nvidia-modeset"
BUILT_MODULE_LOCATION[2]="kernel-open/"
"#;

    #[test]
    fn reads_nvidias_make_line_and_modules() -> Result<()> {
        let c = DkmsConf::parse(NVIDIA, "dkms.conf")?;
        assert_eq!(c.make[0], "make");
        assert_eq!(
            c.modules,
            [
                ("nvidia".to_string(), String::new()),
                ("nvidia-uvm".to_string(), String::new()),
                ("nvidia-modeset".to_string(), "kernel-open".to_string()),
            ]
        );
        let k = "5.15.0-206.153.7.el9uek.x86_64";
        let argv = c.make_for(
            k,
            &format!("/usr/src/kernels/{k}"),
            16,
            Some("/opt/rh/gcc-toolset-11/root/usr/bin/gcc"),
        );
        assert_eq!(
            argv,
            [
                "make",
                "-j16",
                "module",
                &format!("SYSSRC=/usr/src/kernels/{k}"),
                "IGNORE_XEN_PRESENCE=1",
                "IGNORE_PREEMPT_RT_PRESENCE=1",
                "IGNORE_CC_MISMATCH=1",
                "CC=/opt/rh/gcc-toolset-11/root/usr/bin/gcc",
            ]
        );
        Ok(())
    }

    #[test]
    fn the_upstream_template_gets_jobs_and_the_kernel() -> Result<()> {
        let c = DkmsConf::parse(
            "MAKE[0]=\"'make' KERNEL_UNAME=${kernelver} modules\"\nBUILT_MODULE_NAME[0]=\"nvidia\"\n",
            "dkms.conf",
        )?;
        assert_eq!(
            c.make_for("6.12.0-1.el10uek.aarch64", "/x", 4, None),
            [
                "make",
                "-j4",
                "KERNEL_UNAME=6.12.0-1.el10uek.aarch64",
                "modules"
            ]
        );
        Ok(())
    }

    #[test]
    fn names_and_locations_that_would_leave_the_build_are_bad_input() {
        for (line, needle) in [
            (
                "BUILT_MODULE_NAME[0]=\"nvidia%(touch /tmp/x)\"",
                "BUILT_MODULE_NAME",
            ),
            ("BUILT_MODULE_NAME[0]=\"../nvidia\"", "BUILT_MODULE_NAME"),
            ("BUILT_MODULE_NAME[0]=\"\"", "BUILT_MODULE_NAME"),
            (
                "BUILT_MODULE_LOCATION[0]=\"../../../opt/site\"",
                "BUILT_MODULE_LOCATION",
            ),
            (
                "BUILT_MODULE_LOCATION[0]=\"/opt/site\"",
                "BUILT_MODULE_LOCATION",
            ),
            (
                "BUILT_MODULE_LOCATION[0]=\"a/./b\"",
                "BUILT_MODULE_LOCATION",
            ),
            ("BUILT_MODULE_LOCATION[0]=\"a b\"", "BUILT_MODULE_LOCATION"),
            ("MAKE[0]=\"sh -c id\"", "MAKE[0]"),
        ] {
            let text =
                format!("MAKE[0]=\"'make' module\"\nBUILT_MODULE_NAME[0]=\"nvidia\"\n{line}\n");
            let e = DkmsConf::parse(&text, "dkms.conf").err();
            assert!(
                e.as_ref().is_some_and(gpuhost_host::error::is_invalid),
                "{line}: {e:?}"
            );
            assert!(format!("{e:?}").contains(needle), "{line}: {e:?}");
        }
        let c = DkmsConf::parse(
            "MAKE[0]=\"make\"\nBUILT_MODULE_NAME[0]=\"nvidia_drm\"\nBUILT_MODULE_LOCATION[0]=\"kernel-open/nvidia-drm/\"\n",
            "dkms.conf",
        );
        assert_eq!(
            c.ok().map(|c| c.modules),
            Some(vec![(
                "nvidia_drm".to_string(),
                "kernel-open/nvidia-drm".to_string()
            )])
        );
    }

    #[test]
    fn a_conf_without_make_or_modules_is_bad_input() {
        for text in ["BUILT_MODULE_NAME[0]=\"nvidia\"\n", "MAKE[0]=\"make\"\n"] {
            let e = DkmsConf::parse(text, "dkms.conf").err();
            assert!(
                e.as_ref().is_some_and(gpuhost_host::error::is_invalid),
                "{e:?}"
            );
        }
    }
}
