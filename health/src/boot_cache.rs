//! What cannot change within a boot, kept in the run directory for the next NVML probes.
//!
//! A one-shot `gpuhost status` is a new process each time, and most of its NVML probe's first
//! sweep used to read what the next run would read again unchanged: each GPU's identity and
//! board limits ([`GpuFixed`]: name, PCI bus id, brand, architecture, compute capability,
//! minor number, VBIOS, GSP firmware, temperature thresholds, default power limit, maximum
//! PCIe link), the driver's versions, the InfoROM validation (70 ms per GPU on an H200) and the
//! cuInit result (200–270 ms). They are kept in `<run dir>/boot-cache.json`, keyed by:
//!
//! - the boot: `/proc/sys/kernel/random/boot_id`;
//! - the loaded driver: the first line of `/proc/driver/nvidia/version` (version and build)
//!   and the inode and time of `/sys/module/nvidia`, which a module reload renews (a new driver, a
//!   changed GSP setting or a reflashed VBIOS all come with one);
//! - each GPU's UUID, which every run reads: a swapped GPU has no entry and is read whole.
//!
//! A key that differs drops the whole file's contents; a GPU whose UUID has no entry is read
//! in full and added. Every reading that can change (temperatures, ECC counts and mode,
//! remapped rows, clocks events, power, memory used, the current PCIe link, persistence, MIG,
//! NVLink, fabric, PCIe replays, the recovery action) is read at every run. An InfoROM
//! validation is reused for [`INFOROM_MAX_AGE_S`] (the InfoROM is written while the driver
//! runs: the validation is repeated hourly); a corrupt one is never kept, nor a failed cuInit.
//!
//! The file is trusted only when it is a regular file (not a link, opened without blocking)
//! owned by this user that nobody else can write, of at most [`crate::probe::KEPT_MAX_BYTES`],
//! parses, and has this [`SCHEMA`] (`gpuhost_host::fsutil::read_own_file`); anything else (a
//! corrupt or foreign file, a FIFO) is ignored with a debug message and replaced at the next
//! store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use gpuhost_host::host::Host;

use crate::snapshot::{CudaCheck, GpuSnapshot, GspFirmware, InfoRom, NvmlProbe, Reading};

/// The cache file in the run directory.
pub(crate) const FILE: &str = "boot-cache.json";
/// Layout version of the file; another one is ignored.
pub(crate) const SCHEMA: u32 = 1;
/// A kept InfoROM validation is reused this long (s).
pub(crate) const INFOROM_MAX_AGE_S: u64 = 3600;

/// What the kept answers depend on, besides each GPU's UUID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Key {
    pub(crate) boot_id: String,
    /// First line of `/proc/driver/nvidia/version`.
    pub(crate) driver: String,
    /// Inode of `/sys/module/nvidia` (renewed when the module is reloaded).
    pub(crate) module_inode: Option<u64>,
    /// Its modification time (s, ns): sysfs gives a reloaded module's directory its load time,
    /// so a reload is seen even where a filesystem hands the freed inode number out again.
    #[serde(default)]
    pub(crate) module_time: Option<(i64, i64)>,
}

impl Key {
    /// The key of `host` now; None (nothing is kept) without a boot id or a loaded driver.
    pub(crate) fn read(host: &Host) -> Option<Key> {
        let text = |p: &str| host.read_opt(p).ok().flatten();
        let boot_id = text("/proc/sys/kernel/random/boot_id")?.trim().to_string();
        let driver = text("/proc/driver/nvidia/version")?
            .lines()
            .next()?
            .trim()
            .to_string();
        if boot_id.is_empty() || driver.is_empty() {
            return None;
        }
        let stamp = host.stamp("/sys/module/nvidia");
        Some(Key {
            boot_id,
            driver,
            module_inode: stamp.as_ref().map(|s| s.3),
            module_time: stamp.as_ref().map(|s| (s.1, s.2)),
        })
    }

    /// The key of the running system (what the real NVML answers about).
    pub(crate) fn live() -> Option<Key> {
        Host::new(Path::new("/")).ok().and_then(|h| Key::read(&h))
    }
}

/// The driver's versions as NVML gives them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SystemFixed {
    pub(crate) driver_version: Option<String>,
    pub(crate) nvml_version: Option<String>,
    pub(crate) cuda_driver_version: Option<i32>,
}

/// One GPU's kept answers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct GpuEntry {
    pub(crate) fixed: GpuFixed,
    /// The last valid InfoROM validation (with its time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) inforom: Option<InfoRom>,
}

/// The file's contents.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct File {
    schema: u32,
    key: Key,
    #[serde(default)]
    system: Option<SystemFixed>,
    /// By GPU UUID.
    #[serde(default)]
    gpus: BTreeMap<String, GpuEntry>,
    /// A cuInit success with what it depends on (the device nodes among them).
    #[serde(default)]
    cuda: Option<(crate::cuda::Key, CudaCheck)>,
}

/// The kept answers of this boot and driver, loaded from the run directory and stored back
/// when a sweep added to them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Store {
    dir: Option<PathBuf>,
    key: Option<Key>,
    system: Option<SystemFixed>,
    gpus: BTreeMap<String, GpuEntry>,
    cuda: Option<(crate::cuda::Key, CudaCheck)>,
    dirty: bool,
}

impl Store {
    /// What `run_dir` keeps for `key` (nothing when `key` is None: nothing is kept then).
    /// (None: the run directory was refused; nothing is kept then either.)
    pub(crate) fn load(run_dir: Option<&Path>, key: Option<Key>) -> Store {
        let mut s = Store {
            dir: run_dir.map(Path::to_path_buf),
            key,
            ..Store::default()
        };
        let (Some(key), Some(run_dir)) = (s.key.clone(), run_dir) else {
            tracing::debug!(
                "boot cache not used: no boot id, no loaded NVIDIA driver or no run directory"
            );
            return s;
        };
        let path = run_dir.join(FILE);
        // No link, no FIFO, this user's and writable by no one else, small.
        let f = match gpuhost_host::fsutil::read_own_file(&path, crate::probe::KEPT_MAX_BYTES)
            .map_err(|e| (e.kind(), e.to_string()))
            .and_then(|t| {
                serde_json::from_slice::<File>(&t)
                    .map_err(|e| (std::io::ErrorKind::InvalidData, format!("unreadable ({e})")))
            }) {
            Ok(f) => f,
            Err((std::io::ErrorKind::NotFound, _)) => return s,
            Err((_, e)) => {
                tracing::debug!("boot cache {} ignored: {e}", path.display());
                return s;
            }
        };
        if f.schema != SCHEMA {
            tracing::debug!(
                "boot cache {} ignored: schema {} (this gpuhost writes {SCHEMA})",
                path.display(),
                f.schema
            );
        } else if f.key != key {
            tracing::debug!(
                "boot cache {} is for another boot or driver: read afresh",
                path.display()
            );
        } else {
            s.system = f.system;
            s.gpus = f.gpus;
            s.cuda = f.cuda;
        }
        s
    }

    /// The kept driver versions.
    pub(crate) fn system(&self) -> Option<&SystemFixed> {
        self.system.as_ref()
    }

    /// The fixed fields kept for the GPU with this UUID.
    pub(crate) fn gpu(&self, uuid: &str) -> Option<&GpuFixed> {
        self.gpus
            .get(uuid)
            .map(|e| &e.fixed)
            .filter(|f| **f != GpuFixed::default())
    }

    /// A valid InfoROM validation of this GPU less than [`INFOROM_MAX_AGE_S`] old.
    pub(crate) fn inforom(&self, uuid: &str) -> Option<InfoRom> {
        let now = gpuhost_host::fsutil::unix_now();
        self.gpus
            .get(uuid)
            .and_then(|e| e.inforom.as_ref())
            .filter(|i| {
                i.valid
                    && i.checked_at
                        .is_some_and(|t| now.saturating_sub(t) < INFOROM_MAX_AGE_S)
            })
            .map(|i| InfoRom {
                cached: true,
                ..i.clone()
            })
    }

    /// The kept cuInit success, if the device nodes it depends on are the same (`now`).
    pub(crate) fn cuda(&self, now: &crate::cuda::Key) -> Option<CudaCheck> {
        match &self.cuda {
            Some((k, c)) if k == now && c.init_rc == Some(0) => Some(CudaCheck {
                cached: true,
                init_ms: Some(0.0),
                ..c.clone()
            }),
            _ => None,
        }
    }

    /// Keep the driver versions (once they answered).
    pub(crate) fn keep_system(&mut self, s: &SystemFixed) {
        if self.system.as_ref() != Some(s) && s.driver_version.is_some() {
            self.system = Some(s.clone());
            self.dirty = true;
        }
    }

    /// Keep `g`'s fixed fields that answered and its InfoROM validation when it is a fresh,
    /// valid one (by UUID; a GPU without one is not kept).
    pub(crate) fn keep_gpu(&mut self, g: &GpuSnapshot) {
        let Some(uuid) = g.uuid.value() else { return };
        let e = self.gpus.entry(uuid.clone()).or_default();
        let before = e.fixed.clone();
        e.fixed.keep(g);
        if e.fixed != before {
            self.dirty = true;
        }
        if let Reading::Value(i) = &g.inforom {
            if i.valid && !i.cached {
                e.inforom = Some(i.clone());
                self.dirty = true;
            }
        }
    }

    /// Keep a cuInit success for the device nodes it was made with.
    pub(crate) fn keep_cuda(&mut self, key: crate::cuda::Key, c: &CudaCheck) {
        if c.init_rc == Some(0) && !c.cached {
            let mut c = c.clone();
            c.cached = false;
            self.cuda = Some((key, c));
            self.dirty = true;
        }
    }

    /// Write what was added since the load (atomically; best effort: a run without the file
    /// only reads more).
    pub(crate) fn save(&mut self) {
        if !self.dirty {
            return;
        }
        let (Some(dir), Some(key)) = (&self.dir, &self.key) else {
            return;
        };
        let f = File {
            schema: SCHEMA,
            key: key.clone(),
            system: self.system.clone(),
            gpus: self.gpus.clone(),
            cuda: self.cuda.clone(),
        };
        let r = serde_json::to_vec(&f)
            .map_err(anyhow::Error::from)
            .and_then(|text| {
                std::fs::create_dir_all(dir)?;
                gpuhost_host::fsutil::write_atomic(&dir.join(FILE), &text, 0o644)
            });
        match r {
            Ok(()) => self.dirty = false,
            Err(e) => tracing::debug!("cannot keep the boot cache in {}: {e:#}", dir.display()),
        }
    }

    /// Give each GPU of `p` (every field as read) the fixed fields and InfoROM validation
    /// kept for its UUID, and keep what it adds: what the NVML probe does with its calls,
    /// for an answer that comes from a saved snapshot (`--nvml-fixture`, tests).
    pub(crate) fn apply_or_keep(&mut self, p: &mut NvmlProbe) {
        for g in &mut p.gpus {
            g.fixed_kept = false;
            let Some(uuid) = g.uuid.value().cloned() else {
                continue;
            };
            if let Some(f) = self.gpu(&uuid) {
                f.clone().apply(g);
            }
            if let Some(i) = self.inforom(&uuid) {
                g.inforom = Reading::Value(i);
            }
            self.keep_gpu(g);
        }
        self.save();
    }
}

/// A GPU's fields that cannot change while NVML stays initialised: identity (name, UUID, PCI
/// bus id, brand, architecture, compute capability, minor number), firmware (VBIOS, GSP mode
/// and version), and limits set by the board (temperature slowdown and shutdown thresholds,
/// default power limit, maximum PCIe generation and width). Everything that can change —
/// temperatures, ECC counters and mode, retired pages, remapped rows, clocks events, power,
/// memory used, the current PCIe link, persistence, MIG mode, NVLink, fabric, the PCIe replay
/// counter, the recovery action — is read at every sweep.
///
/// Each field is kept once it answered (a value, or NOT_SUPPORTED); one that failed (a GPU
/// lost, a call that timed out) is read again at the next sweep.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct GpuFixed {
    pub(crate) name: Option<Reading<String>>,
    pub(crate) uuid: Option<Reading<String>>,
    pub(crate) pci_bus_id: Option<Reading<String>>,
    pub(crate) brand: Option<Reading<u32>>,
    pub(crate) compute_capability: Option<Reading<String>>,
    pub(crate) temperature_slowdown_c: Option<Reading<u32>>,
    pub(crate) temperature_shutdown_c: Option<Reading<u32>>,
    pub(crate) power_limit_default_mw: Option<Reading<u32>>,
    pub(crate) pcie_gen_max: Option<Reading<u32>>,
    pub(crate) pcie_width_max: Option<Reading<u32>>,
    pub(crate) architecture: Option<Reading<String>>,
    pub(crate) minor_number: Option<Reading<u32>>,
    pub(crate) vbios_version: Option<Reading<String>>,
    pub(crate) gsp_firmware: Option<Reading<GspFirmware>>,
}

fn keep_one<T: Clone>(kept: &mut Option<Reading<T>>, r: &Reading<T>) {
    if kept.is_none() && !matches!(r, Reading::Error(_)) {
        *kept = Some(r.clone());
    }
}

fn apply_one<T: Clone>(kept: &Option<Reading<T>>, r: &mut Reading<T>) {
    if let Some(k) = kept {
        *r = k.clone();
    }
}

impl GpuFixed {
    /// Keep `g`'s fixed fields that answered and are not kept yet.
    pub(crate) fn keep(&mut self, g: &GpuSnapshot) {
        keep_one(&mut self.name, &g.name);
        keep_one(&mut self.uuid, &g.uuid);
        keep_one(&mut self.pci_bus_id, &g.pci_bus_id);
        keep_one(&mut self.brand, &g.brand);
        keep_one(&mut self.compute_capability, &g.compute_capability);
        keep_one(&mut self.temperature_slowdown_c, &g.temperature_slowdown_c);
        keep_one(&mut self.temperature_shutdown_c, &g.temperature_shutdown_c);
        keep_one(&mut self.power_limit_default_mw, &g.power_limit_default_mw);
        keep_one(&mut self.pcie_gen_max, &g.pcie_gen_max);
        keep_one(&mut self.pcie_width_max, &g.pcie_width_max);
        keep_one(&mut self.architecture, &g.architecture);
        keep_one(&mut self.minor_number, &g.minor_number);
        keep_one(&mut self.vbios_version, &g.vbios_version);
        keep_one(&mut self.gsp_firmware, &g.gsp_firmware);
    }

    /// Put the kept fields into `g`, and mark it so when there were any.
    pub(crate) fn apply(&self, g: &mut GpuSnapshot) {
        apply_one(&self.name, &mut g.name);
        apply_one(&self.uuid, &mut g.uuid);
        apply_one(&self.pci_bus_id, &mut g.pci_bus_id);
        apply_one(&self.brand, &mut g.brand);
        apply_one(&self.compute_capability, &mut g.compute_capability);
        apply_one(&self.temperature_slowdown_c, &mut g.temperature_slowdown_c);
        apply_one(&self.temperature_shutdown_c, &mut g.temperature_shutdown_c);
        apply_one(&self.power_limit_default_mw, &mut g.power_limit_default_mw);
        apply_one(&self.pcie_gen_max, &mut g.pcie_gen_max);
        apply_one(&self.pcie_width_max, &mut g.pcie_width_max);
        apply_one(&self.architecture, &mut g.architecture);
        apply_one(&self.minor_number, &mut g.minor_number);
        apply_one(&self.vbios_version, &mut g.vbios_version);
        apply_one(&self.gsp_firmware, &mut g.gsp_firmware);
        g.fixed_kept = *self != GpuFixed::default();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn key(boot: &str, driver: &str) -> Option<Key> {
        Some(Key {
            boot_id: boot.into(),
            driver: driver.into(),
            module_inode: Some(7),
            module_time: None,
        })
    }

    fn gpu(uuid: &str, vbios: &str) -> GpuSnapshot {
        let mut g = crate::nvml::lost_gpu_kind(0, "Test", std::time::Instant::now());
        g.uuid = Reading::Value(uuid.into());
        g.name = Reading::Value("NVIDIA H200".into());
        g.vbios_version = Reading::Value(vbios.into());
        g.inforom = Reading::Value(checked(true, 0));
        g
    }

    fn checked(valid: bool, secs_ago: u64) -> InfoRom {
        InfoRom {
            valid,
            image_version: Some("G520.0282.02.02".into()),
            checked_at: Some(gpuhost_host::fsutil::unix_now() - secs_ago),
            cached: false,
        }
    }

    fn stored(dir: &Path, k: Option<Key>, g: &GpuSnapshot) {
        let mut s = Store::load(Some(dir), k);
        s.keep_gpu(g);
        s.save();
    }

    #[test]
    fn kept_fields_are_found_by_uuid_under_the_same_key_only() {
        let dir = tempfile::tempdir().unwrap();
        stored(dir.path(), key("b1", "d1"), &gpu("GPU-a", "96.00"));
        let s = Store::load(Some(dir.path()), key("b1", "d1"));
        let f = s.gpu("GPU-a").unwrap();
        assert_eq!(f.vbios_version, Some(Reading::Value("96.00".into())));
        assert!(s.inforom("GPU-a").unwrap().cached);
        // A swapped GPU: no entry for its UUID.
        assert!(s.gpu("GPU-b").is_none());
        // A new boot, a new driver, a reloaded module: nothing.
        assert!(Store::load(Some(dir.path()), key("b2", "d1"))
            .gpu("GPU-a")
            .is_none());
        assert!(Store::load(Some(dir.path()), key("b1", "d2"))
            .gpu("GPU-a")
            .is_none());
        let mut reloaded = key("b1", "d1");
        if let Some(k) = reloaded.as_mut() {
            k.module_inode = Some(8);
        }
        assert!(Store::load(Some(dir.path()), reloaded)
            .gpu("GPU-a")
            .is_none());
        // No key (no driver loaded): nothing is kept or stored.
        let mut none = Store::load(Some(dir.path()), None);
        assert!(none.gpu("GPU-a").is_none());
        none.keep_gpu(&gpu("GPU-c", "x"));
        none.save();
        assert!(Store::load(Some(dir.path()), key("b1", "d1"))
            .gpu("GPU-c")
            .is_none());
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_ignored_and_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        std::fs::write(&path, "{ not json").unwrap();
        assert!(Store::load(Some(dir.path()), key("b", "d"))
            .gpu("GPU-a")
            .is_none());
        // Replaced at the next store.
        stored(dir.path(), key("b", "d"), &gpu("GPU-a", "1"));
        assert!(Store::load(Some(dir.path()), key("b", "d"))
            .gpu("GPU-a")
            .is_some());
        // Writable by others: never trusted.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(Store::load(Some(dir.path()), key("b", "d"))
            .gpu("GPU-a")
            .is_none());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Another schema.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"schema\":1", "\"schema\":99")).unwrap();
        assert!(Store::load(Some(dir.path()), key("b", "d"))
            .gpu("GPU-a")
            .is_none());
        // A symlink to a file is not the file.
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, text).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(Store::load(Some(dir.path()), key("b", "d"))
            .gpu("GPU-a")
            .is_none());
    }

    #[test]
    fn a_valid_inforom_validation_is_kept_for_an_hour_a_corrupt_one_never() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::load(Some(dir.path()), key("b", "d"));
        let mut bad = gpu("GPU-bad", "1");
        bad.inforom = Reading::Value(checked(false, 0));
        let mut old = gpu("GPU-old", "1");
        old.inforom = Reading::Value(checked(true, INFOROM_MAX_AGE_S));
        s.keep_gpu(&bad);
        s.keep_gpu(&old);
        s.keep_gpu(&gpu("GPU-new", "1"));
        s.save();
        let s = Store::load(Some(dir.path()), key("b", "d"));
        assert!(s.inforom("GPU-new").is_some());
        assert_eq!(s.inforom("GPU-old"), None, "an hour old");
        assert_eq!(s.inforom("GPU-bad"), None, "corrupt");
        // Its fixed fields are kept all the same.
        assert!(s.gpu("GPU-bad").is_some());
    }

    #[test]
    fn only_a_cuinit_success_is_kept_for_the_same_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = crate::cuda::key();
        let ok = CudaCheck {
            loaded: true,
            init_rc: Some(0),
            driver_version: Some(13000),
            init_ms: Some(250.0),
            ..CudaCheck::default()
        };
        let mut s = Store::load(Some(dir.path()), key("b", "d"));
        s.keep_cuda(
            nodes.clone(),
            &CudaCheck {
                init_rc: Some(100),
                ..ok.clone()
            },
        );
        assert!(s.cuda(&nodes).is_none(), "a failure was kept");
        s.keep_cuda(nodes.clone(), &ok);
        s.save();
        let s = Store::load(Some(dir.path()), key("b", "d"));
        let c = s.cuda(&nodes).unwrap();
        assert!(c.cached);
        assert_eq!((c.init_rc, c.init_ms), (Some(0), Some(0.0)));
        let mut other = nodes.clone();
        other.nodes.push(("/dev/nvidia-uvm".into(), 1, 2));
        assert!(s.cuda(&other).is_none(), "recreated device nodes");
    }

    #[test]
    fn nothing_new_is_not_written_again() {
        let dir = tempfile::tempdir().unwrap();
        stored(dir.path(), key("b", "d"), &gpu("GPU-a", "1"));
        let mut s = Store::load(Some(dir.path()), key("b", "d"));
        let mut again = gpu("GPU-a", "1");
        again.inforom = Reading::Value(s.inforom("GPU-a").unwrap());
        s.keep_gpu(&again);
        assert!(!s.dirty, "nothing new");
        s.keep_gpu(&gpu("GPU-b", "1"));
        assert!(s.dirty, "a new GPU");
    }
}
