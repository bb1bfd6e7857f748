//! "Is the NVIDIA module there for kernel K?" answered the way the next boot answers it: the
//! file `modprobe nvidia` would load for K, and the `version` in that file's modinfo.
//!
//! modprobe loads what `/lib/modules/<K>/modules.dep` lists for a module name; depmod writes
//! one entry per name, choosing between copies by its search order (RHEL's
//! `/etc/depmod.d/dist.conf`: `updates extra built-in weak-updates`). So the answer holds
//! however the module got there: DKMS of either name (`nvidia` for the proprietary flavour,
//! `nvidia-open` for the open one: both install to `extra/`), NVIDIA's precompiled kmod
//! packages (`extra/drivers/video/nvidia/`), a kABI `weak-updates/` link, or an old
//! `kernel/drivers/video/` copy. DKMS's own tree (`/var/lib/dkms`) is for diagnostics only.
//! A `.ko` on disk that `modules.dep` does not list is reported as such: depmod has not run.

use anyhow::Result;
use serde::Serialize;

use crate::cmd::Cmd;
use crate::host::Host;

/// Module file suffixes modprobe knows.
const SUFFIXES: &[&str] = &[".ko", ".ko.xz", ".ko.zst", ".ko.gz"];

/// The directories under `/lib/modules/<K>/` where an out-of-tree NVIDIA module lives, in
/// depmod's RHEL search order (then the in-tree video drivers).
pub(crate) const SEARCH_DIRS: &[&str] =
    &["updates", "extra", "weak-updates", "kernel/drivers/video"];

/// The module name of a module file path: `extra/nvidia-uvm.ko.xz` → `nvidia_uvm`
/// (modprobe treats `-` and `_` alike).
pub(crate) fn module_name_of(path: &str) -> Option<String> {
    let base = path.rsplit('/').next()?;
    let stem = SUFFIXES.iter().find_map(|s| base.strip_suffix(s))?;
    Some(stem.replace('-', "_"))
}

/// The file `modules.dep` lists for `module` (a path relative to `/lib/modules/<K>/`).
pub(crate) fn dep_entry(modules_dep: &str, module: &str) -> Option<String> {
    let want = module.replace('-', "_");
    modules_dep.lines().find_map(|line| {
        let (path, _deps) = line.split_once(':')?;
        let path = path.trim();
        (module_name_of(path).as_deref() == Some(want.as_str())).then(|| path.to_string())
    })
}

/// Where under `/lib/modules/<K>/` a module file lives: `extra`, `updates`, `weak-updates`,
/// `kernel/drivers/video`, or `other`.
pub(crate) fn location_of(rel_path: &str) -> &'static str {
    SEARCH_DIRS
        .iter()
        .find(|d| rel_path.starts_with(&format!("{d}/")))
        .copied()
        .unwrap_or("other")
}

/// The NVIDIA module for one kernel, as the next boot would find it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ModuleState {
    /// modprobe would load `path` (relative to `/lib/modules/<K>/`), whose modinfo `version` is
    /// `version` (`None` when modinfo shows none).
    Loadable {
        path: String,
        location: &'static str,
        version: Option<String>,
    },
    /// Module files exist but `modules.dep` lists none: depmod has not run for this kernel.
    NotInDepmod { files: Vec<String> },
    /// No module file anywhere modprobe looks.
    Absent,
}

impl ModuleState {
    /// True when modprobe would load a module of exactly `driver`'s version.
    pub fn is_version(&self, driver: &str) -> bool {
        matches!(self, ModuleState::Loadable { version: Some(v), .. } if v == driver)
    }

    /// One line: `extra/nvidia.ko.xz, version 580.82.07`.
    pub fn describe(&self) -> String {
        match self {
            ModuleState::Loadable { path, version, .. } => format!(
                "{path}, version {}",
                version.as_deref().unwrap_or("(none in modinfo)")
            ),
            ModuleState::NotInDepmod { files } => format!(
                "{} on disk but not in modules.dep (depmod has not run)",
                files.join(", ")
            ),
            ModuleState::Absent => "no module".to_string(),
        }
    }
}

/// Module files named `module` under the search directories of `/lib/modules/<K>/`
/// (recursively; relative paths, sorted).
fn files_on_disk(host: &Host, kver: &str, module: &str) -> Vec<String> {
    let base = format!("/lib/modules/{kver}");
    let want = module.replace('-', "_");
    let mut out = Vec::new();
    let mut stack: Vec<String> = SEARCH_DIRS.iter().map(|d| d.to_string()).collect();
    while let Some(rel) = stack.pop() {
        let Ok(names) = host.list_dir(format!("{base}/{rel}")) else {
            continue;
        };
        for name in names {
            let child = format!("{rel}/{name}");
            // is_dir follows links: weak-updates holds links to other kernels' modules.
            if host.is_dir(format!("{base}/{child}")) {
                stack.push(child);
            } else if module_name_of(&name).as_deref() == Some(want.as_str()) {
                out.push(child);
            }
        }
    }
    out.sort();
    out
}

/// The modinfo `version` of a module file (`modinfo -F version FILE`: kmod reads compressed
/// modules too, decompressing the whole file — an `nvidia.ko.xz` costs a noticeable fraction of
/// a second). `None` when the module carries no version. Remembered per file version (size,
/// mtime, inode) for the life of the process: one apply asks for the same kernels' modules in
/// several steps, and `gpuhost serve` on every sweep.
pub(crate) fn modinfo_version(host: &Host, kver: &str, rel_path: &str) -> Result<Option<String>> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Seen = HashMap<std::path::PathBuf, ((u64, i64, i64, u64), Option<String>)>;
    static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
    let path = format!("/lib/modules/{kver}/{rel_path}");
    let file = host.real_path(&path)?;
    let stamp = host.stamp(&path);
    if let Some(stamp) = stamp {
        let seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, v)) = seen.as_ref().and_then(|m| m.get(&file)) {
            if *s == stamp {
                return Ok(v.clone());
            }
        }
    }
    let out = Cmd::new("modinfo")
        .args(["-F", "version"])
        .arg(&file)
        .run()?;
    let version = parse_modinfo_field(&out.stdout);
    if let Some(stamp) = stamp {
        SEEN.lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(file, (stamp, version.clone()));
    }
    Ok(version)
}

/// The file `modprobe` would load as `module` for `kver` (relative to `/lib/modules/<kver>/`),
/// from `modules.dep` alone: no module file is read.
pub(crate) fn loadable_path(host: &Host, kver: &str, module: &str) -> Result<Option<String>> {
    let dep = host.read_opt(format!("/lib/modules/{kver}/modules.dep"))?;
    Ok(dep
        .as_deref()
        .and_then(|d| dep_entry(d, module))
        .filter(|p| host.exists(format!("/lib/modules/{kver}/{p}"))))
}

/// `modinfo -F <field>` prints the value (or nothing).
pub(crate) fn parse_modinfo_field(stdout: &str) -> Option<String> {
    let v = stdout.lines().next()?.trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// What modprobe would load as `module` for kernel `kver` on `host`.
pub fn state(host: &Host, kver: &str, module: &str) -> Result<ModuleState> {
    if let Some(path) = loadable_path(host, kver, module)? {
        let version = modinfo_version(host, kver, &path)?;
        return Ok(ModuleState::Loadable {
            location: location_of(&path),
            path,
            version,
        });
    }
    let files = files_on_disk(host, kver, module);
    if files.is_empty() {
        Ok(ModuleState::Absent)
    } else {
        Ok(ModuleState::NotInDepmod { files })
    }
}

/// The modules NVIDIA's DKMS packages build (`BUILT_MODULE_NAME[0..4]` of their dkms.conf).
pub const NVIDIA_MODULES: &[&str] = &[
    "nvidia",
    "nvidia-modeset",
    "nvidia-drm",
    "nvidia-uvm",
    "nvidia-peermem",
];

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// `modules.dep` as depmod writes it on OL8 after DKMS installed the open flavour.
    const DEP: &str = "kernel/arch/x86/crypto/aesni-intel.ko.xz: kernel/crypto/crypto_simd.ko.xz\n\
kernel/drivers/gpu/drm/drm.ko.xz:\n\
extra/nvidia.ko.xz:\n\
extra/nvidia-modeset.ko.xz: extra/nvidia.ko.xz\n\
extra/nvidia-drm.ko.xz: extra/nvidia-modeset.ko.xz extra/nvidia.ko.xz kernel/drivers/gpu/drm/drm.ko.xz\n\
extra/nvidia-uvm.ko.xz: extra/nvidia.ko.xz\n\
extra/nvidia-peermem.ko.xz: extra/nvidia.ko.xz\n";

    #[rstest]
    #[case("nvidia", Some("extra/nvidia.ko.xz"))]
    #[case("nvidia-uvm", Some("extra/nvidia-uvm.ko.xz"))]
    #[case("nvidia_drm", Some("extra/nvidia-drm.ko.xz"))]
    #[case("nouveau", None)]
    fn finds_the_module_modprobe_would_load(#[case] module: &str, #[case] path: Option<&str>) {
        assert_eq!(dep_entry(DEP, module).as_deref(), path);
    }

    #[rstest]
    #[case("extra/nvidia.ko.xz", "extra")]
    #[case("extra/drivers/video/nvidia/nvidia.ko", "extra")]
    #[case("weak-updates/nvidia/nvidia.ko.xz", "weak-updates")]
    #[case("updates/dkms/nvidia.ko.zst", "updates")]
    #[case("kernel/drivers/video/nvidia.ko", "kernel/drivers/video")]
    #[case("kernel/drivers/gpu/drm/nouveau/nouveau.ko.xz", "other")]
    fn locations(#[case] path: &str, #[case] loc: &str) {
        assert_eq!(location_of(path), loc);
    }

    #[rstest]
    #[case("extra/nvidia.ko.xz", Some("nvidia"))]
    #[case("nvidia-modeset.ko", Some("nvidia_modeset"))]
    #[case("extra/nvidia.ko.zst", Some("nvidia"))]
    #[case("extra/nvidia.o", None)]
    fn module_names(#[case] path: &str, #[case] name: Option<&str>) {
        assert_eq!(module_name_of(path).as_deref(), name);
    }

    #[test]
    fn modinfo_output() {
        assert_eq!(
            parse_modinfo_field("580.82.07\n").as_deref(),
            Some("580.82.07")
        );
        assert_eq!(parse_modinfo_field(""), None);
    }

    #[test]
    fn files_without_depmod_are_reported_as_such() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let k = "5.15.0-206.153.7.el9uek.x86_64";
        let extra = dir
            .path()
            .join(format!("lib/modules/{k}/extra/drivers/video/nvidia"));
        std::fs::create_dir_all(&extra)?;
        std::fs::write(extra.join("nvidia.ko"), b"not really")?;
        std::fs::write(extra.join("nvidia-uvm.ko"), b"not really")?;
        let host = Host::new(dir.path())?;
        assert_eq!(
            state(&host, k, "nvidia")?,
            ModuleState::NotInDepmod {
                files: vec!["extra/drivers/video/nvidia/nvidia.ko".into()]
            }
        );
        assert_eq!(
            state(&host, "6.12.0-1.el9uek.x86_64", "nvidia")?,
            ModuleState::Absent
        );
        Ok(())
    }

    #[test]
    fn states_say_what_they_are() {
        let s = ModuleState::Loadable {
            path: "extra/nvidia.ko.xz".into(),
            location: "extra",
            version: Some("580.82.07".into()),
        };
        assert!(s.is_version("580.82.07") && !s.is_version("570.124.06"));
        assert_eq!(s.describe(), "extra/nvidia.ko.xz, version 580.82.07");
        assert!(!ModuleState::Absent.is_version("580.82.07"));
    }
}
