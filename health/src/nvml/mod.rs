//! The NVML probe: initialise NVML, read every GPU, return plain data.
//!
//! This runs in a child process (`gpuhost status --nvml-probe`, see [`crate::probe`]): a GPU
//! that fell off the bus can block NVML calls for minutes, and a thread stuck in the driver
//! cannot be killed. Calls that the crate does not wrap (remapped rows, fabric info) go
//! through `nvml.lib()` with the device's own handle, never a null one.

pub mod calls;
pub mod raw;

use std::time::Instant;

use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, NvmlLib};

use crate::snapshot::{
    EccCounts, EccMode, Fabric, GpuSnapshot, GspFirmware, InfoRom, MigMode, NvLink, NvmlProbe,
    ProbeStatus, Reading, RemappedRows, SramEcc,
};

/// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`.
const FI_GPU_RECOVERY_ACTION: u32 = 230;
/// `NVML_FI_DEV_NVLINK_LINK_COUNT`.
pub(crate) const FI_NVLINK_LINK_COUNT: u32 = 91;
/// `NVML_NVLINK_MAX_LINKS`.
pub(crate) const NVLINK_MAX_LINKS: u32 = 18;

fn reading<T>(r: Result<T, NvmlError>) -> Reading<T> {
    match r {
        Ok(v) => Reading::Value(v),
        Err(NvmlError::NotSupported) => Reading::NotSupported,
        Err(e) => Reading::Error(error_kind(&e)),
    }
}

/// NVML's error as a short name (`NoPermission`, `GpuLost`, …).
pub(crate) fn error_kind(e: &NvmlError) -> String {
    let dbg = format!("{e:?}");
    match dbg.find('(') {
        Some(i) if !matches!(e, NvmlError::FailedToLoadSymbol(_)) => dbg[..i].to_string(),
        _ => dbg,
    }
}

/// Initialise NVML and read every device. Never panics; errors become data.
pub fn probe() -> NvmlProbe {
    let start = Instant::now();
    match init(start) {
        Ok(nvml) => read(&nvml, start),
        Err(failed) => *failed,
    }
}

/// `GPUHOST_PROBE_NO_CUDA=1` leaves the CUDA check out (to measure what it costs).
fn no_cuda() -> bool {
    std::env::var_os("GPUHOST_PROBE_NO_CUDA").is_some_and(|v| v == "1")
}

/// Initialise NVML; a failure is the probe's answer (classified: no library, driver not
/// loaded, version mismatch, …). `gpuhost serve`'s probe keeps the handle between sweeps.
pub fn init(start: Instant) -> Result<Nvml, Box<NvmlProbe>> {
    match Nvml::init() {
        Ok(n) => Ok(n),
        Err(e) => {
            let status = match &e {
                NvmlError::LibloadingError(_) => ProbeStatus::NoLibrary,
                NvmlError::DriverNotLoaded => ProbeStatus::DriverNotLoaded,
                NvmlError::LibRmVersionMismatch => ProbeStatus::VersionMismatch,
                NvmlError::NoPermission => ProbeStatus::NoPermission,
                _ => ProbeStatus::InitError,
            };
            Err(Box::new(NvmlProbe {
                status,
                error: Some(format!("{e}")),
                duration_ms: Some(ms(start)),
                ..NvmlProbe::default()
            }))
        }
    }
}

/// Read the driver's versions and every device through an initialised NVML, while another
/// thread loads libcuda and runs `cuInit` ([`crate::cuda`], its success kept between runs).
pub fn read(nvml: &Nvml, start: Instant) -> NvmlProbe {
    let cuda = (!no_cuda()).then(|| {
        std::thread::Builder::new()
            .name("cuda-init".into())
            .spawn(|| crate::cuda::check_cached(&crate::probe::run_dir()))
    });
    let mut p = NvmlProbe {
        status: ProbeStatus::Ok,
        driver_version: nvml.sys_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
        ..NvmlProbe::default()
    };
    match nvml.device_count() {
        Ok(n) => {
            p.device_count = Some(n);
            let t = Instant::now();
            let kept = inforom_cache::load(&crate::probe::run_dir());
            p.gpus = sweep(nvml, n, sequential(), &kept);
            inforom_cache::store(&crate::probe::run_dir(), kept, &p.gpus);
            p.sweep_wall_ms = Some(ms(t));
        }
        Err(e) => p.error = Some(format!("device count: {e}")),
    }
    p.cuda = match cuda {
        Some(Ok(h)) => Some(h.join().unwrap_or_else(|_| crate::snapshot::CudaCheck {
            error: Some("the CUDA check panicked".into()),
            ..Default::default()
        })),
        Some(Err(_)) => Some(crate::cuda::check_cached(&crate::probe::run_dir())),
        None => None,
    };
    p.duration_ms = Some(ms(start));
    p
}

/// `GPUHOST_PROBE_SEQUENTIAL=1` sweeps the GPUs one after another (to measure what the
/// concurrent sweep saves on a many-GPU host).
fn sequential() -> bool {
    std::env::var_os("GPUHOST_PROBE_SEQUENTIAL").is_some_and(|v| v == "1")
}

/// Read one GPU by index: its handle, then every reading.
fn sweep_one(nvml: &Nvml, i: u32, kept: &inforom_cache::Kept) -> GpuSnapshot {
    let t = Instant::now();
    match nvml.device_by_index(i) {
        Ok(d) => gpu(nvml, &d, i, t, kept),
        Err(e) => lost_gpu(i, &e, t),
    }
}

/// Read every GPU, one thread per GPU (NVML is thread-safe; a GPU's ~30 calls wait on the
/// driver, not the CPU), in index order. One GPU (or `sequential`) is read on this thread:
/// no thread to start.
fn sweep(nvml: &Nvml, n: u32, sequential: bool, kept: &inforom_cache::Kept) -> Vec<GpuSnapshot> {
    if n <= 1 || sequential {
        return (0..n).map(|i| sweep_one(nvml, i, kept)).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let t = Instant::now();
                let h = std::thread::Builder::new()
                    .name(format!("nvml-gpu{i}"))
                    .spawn_scoped(s, move || sweep_one(nvml, i, kept));
                (i, t, h)
            })
            .collect();
        handles
            .into_iter()
            .map(|(i, t, h)| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| lost_gpu_kind(i, "ProbeThreadPanicked", t)),
                // No thread to be had: read it here instead.
                Err(_) => sweep_one(nvml, i, kept),
            })
            .collect()
    })
}

fn ms(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1e5).round() / 100.0
}

/// A device whose handle could not be had (e.g. GpuLost): every field carries the error.
fn lost_gpu(index: u32, e: &NvmlError, t: Instant) -> GpuSnapshot {
    lost_gpu_kind(index, &error_kind(e), t)
}

/// A device with every field carrying the error `k`.
fn lost_gpu_kind(index: u32, k: &str, t: Instant) -> GpuSnapshot {
    let k = k.to_string();
    fn err<T>(k: &str) -> Reading<T> {
        Reading::Error(k.to_string())
    }
    GpuSnapshot {
        index,
        name: err(&k),
        uuid: err(&k),
        pci_bus_id: err(&k),
        brand: err(&k),
        compute_capability: err(&k),
        ecc_mode: err(&k),
        ecc_volatile_uncorrected: err(&k),
        ecc_aggregate_uncorrected: err(&k),
        ecc_volatile_corrected: err(&k),
        retired_pages_pending: err(&k),
        remapped_rows: err(&k),
        recovery_action: err(&k),
        temperature_c: err(&k),
        temperature_slowdown_c: err(&k),
        temperature_shutdown_c: err(&k),
        clock_event_reasons: err(&k),
        power_usage_mw: err(&k),
        power_limit_enforced_mw: err(&k),
        power_limit_default_mw: err(&k),
        memory_total_bytes: err(&k),
        memory_used_bytes: err(&k),
        pcie_gen_current: err(&k),
        pcie_gen_max: err(&k),
        pcie_width_current: err(&k),
        pcie_width_max: err(&k),
        persistence_mode: err(&k),
        mig_mode: err(&k),
        nvlinks: err(&k),
        fabric: err(&k),
        architecture: err(&k),
        minor_number: err(&k),
        pcie_replay_counter: err(&k),
        ecc_aggregate_corrected: err(&k),
        ecc_dram: err(&k),
        ecc_sram: err(&k),
        inforom: err(&k),
        vbios_version: err(&k),
        gsp_firmware: err(&k),
        sweep_ms: ms(t),
    }
}

fn gpu(
    nvml: &Nvml,
    d: &Device<'_>,
    index: u32,
    t: Instant,
    kept: &inforom_cache::Kept,
) -> GpuSnapshot {
    let (lib, h) = (nvml.lib(), raw::handle(d));
    let uuid = reading(d.uuid());
    let mem = d.memory_info();
    let (memory_total_bytes, memory_used_bytes) = match mem {
        Ok(m) => (Reading::Value(m.total), Reading::Value(m.used)),
        Err(e) => {
            let r = reading::<u64>(Err(e));
            (r.clone(), r)
        }
    };
    GpuSnapshot {
        index,
        name: reading(d.name()),
        pci_bus_id: reading(d.pci_info().map(|p| p.bus_id)),
        brand: reading(d.brand().map(|b| b.as_c())),
        compute_capability: reading(
            d.cuda_compute_capability()
                .map(|c| format!("{}.{}", c.major, c.minor)),
        ),
        ecc_mode: reading(d.is_ecc_enabled().map(|m| EccMode {
            current: m.currently_enabled,
            pending: m.pending_enabled,
        })),
        ecc_volatile_uncorrected: reading(
            d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        ),
        ecc_aggregate_uncorrected: reading(
            d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate),
        ),
        ecc_volatile_corrected: reading(
            d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
        ),
        retired_pages_pending: reading(d.are_pages_pending_retired()),
        remapped_rows: remapped_rows(nvml, d),
        recovery_action: recovery_action(d),
        temperature_c: reading(d.temperature(TemperatureSensor::Gpu)),
        temperature_slowdown_c: reading(d.temperature_threshold(TemperatureThreshold::Slowdown)),
        temperature_shutdown_c: reading(d.temperature_threshold(TemperatureThreshold::Shutdown)),
        clock_event_reasons: reading(d.current_throttle_reasons().map(|r| r.bits())),
        power_usage_mw: reading(d.power_usage()),
        power_limit_enforced_mw: reading(d.enforced_power_limit()),
        power_limit_default_mw: reading(d.power_management_limit_default()),
        memory_total_bytes,
        memory_used_bytes,
        pcie_gen_current: reading(d.current_pcie_link_gen()),
        pcie_gen_max: reading(d.max_pcie_link_gen()),
        pcie_width_current: reading(d.current_pcie_link_width()),
        pcie_width_max: reading(d.max_pcie_link_width()),
        persistence_mode: reading(d.is_in_persistent_mode()),
        mig_mode: reading(d.mig_mode().map(|m| MigMode {
            current: m.current,
            pending: m.pending,
        })),
        nvlinks: nvlinks(d),
        fabric: fabric(nvml, d),
        architecture: reading(d.architecture().map(|a| format!("{a:?}"))),
        minor_number: reading(d.minor_number()),
        pcie_replay_counter: raw_reading(raw::pcie_replay_counter(lib, h)),
        ecc_aggregate_corrected: reading(
            d.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate),
        ),
        ecc_dram: ecc_dram(lib, h),
        ecc_sram: ecc_sram(lib, h),
        inforom: match uuid.value().and_then(|u| kept.fresh(u)) {
            Some(i) => Reading::Value(i),
            None => inforom(lib, h),
        },
        vbios_version: raw_reading(raw::vbios_version(lib, h)),
        gsp_firmware: raw_reading(raw::gsp_firmware_mode(lib, h)).map(|(enabled, default)| {
            GspFirmware {
                enabled,
                default_enabled: default,
                version: raw::gsp_firmware_version(lib, h).ok(),
            }
        }),
        uuid,
        sweep_ms: ms(t),
    }
}

/// `NVML_MEMORY_LOCATION_SRAM`.
const LOCATION_SRAM: u32 = 7;

/// SRAM ECC: the four counters through `nvmlDeviceGetMemoryErrorCounter` (µs each); only when
/// one is not zero `nvmlDeviceGetSramEccErrorStatus` (3 ms on an H200) for NVIDIA's threshold
/// flag, which cannot be set without errors. Where the counters are not supported, the status
/// call alone.
fn ecc_sram(lib: &NvmlLib, h: nvmlDevice_t) -> Reading<SramEcc> {
    let get = |error, counter| raw::memory_error_counter(lib, h, error, counter, LOCATION_SRAM);
    let status = || {
        raw_reading(raw::sram_ecc_status(lib, h)).map(|s| SramEcc {
            volatile_corrected: s.volatileCor,
            volatile_uncorrected: s.volatileUncParity + s.volatileUncSecDed,
            aggregate_corrected: s.aggregateCor,
            aggregate_uncorrected: s.aggregateUncParity + s.aggregateUncSecDed,
            threshold_exceeded: s.bThresholdExceeded != 0,
        })
    };
    match (get(0, 0), get(1, 0), get(0, 1), get(1, 1)) {
        (Ok(0), Ok(0), Ok(0), Ok(0)) => Reading::Value(SramEcc::default()),
        _ => status(),
    }
}

/// `NVML_MEMORY_LOCATION_DEVICE_MEMORY`.
const LOCATION_DRAM: u32 = 2;

/// Device memory ECC counts through `nvmlDeviceGetMemoryErrorCounter`; n/a when NVML counts
/// none of the four, the first error when every one failed otherwise.
fn ecc_dram(lib: &NvmlLib, h: nvmlDevice_t) -> Reading<EccCounts> {
    let get = |error, counter| raw::memory_error_counter(lib, h, error, counter, LOCATION_DRAM);
    let all = [get(0, 0), get(1, 0), get(0, 1), get(1, 1)];
    if all.iter().all(Result::is_err) {
        return raw_reading(all[0].map(|_| EccCounts::default()));
    }
    let [vc, vu, ac, au] = all.map(Result::ok);
    Reading::Value(EccCounts {
        volatile_corrected: vc,
        volatile_uncorrected: vu,
        aggregate_corrected: ac,
        aggregate_uncorrected: au,
    })
}

/// `nvmlDeviceValidateInforom` (CORRUPTED_INFOROM reads as not valid) and the image version.
fn inforom(lib: &NvmlLib, h: nvmlDevice_t) -> Reading<InfoRom> {
    let valid = match raw::validate_inforom(lib, h) {
        Ok(()) => true,
        Err(raw::RawErr::Rc(raw::RC_CORRUPTED_INFOROM)) => false,
        Err(e) => return raw_reading(Err(e)),
    };
    Reading::Value(InfoRom {
        valid,
        image_version: raw::inforom_image_version(lib, h).ok(),
        checked_at: Some(gpuhost_steps::fsutil::unix_now()),
        cached: false,
    })
}

/// `nvmlDeviceValidateInforom` reads and checks the whole InfoROM: 70 ms on an H200, twice
/// the rest of a GPU's sweep. A valid answer is kept per GPU in `<run dir>/inforom.json` and
/// reused for [`inforom_cache::MAX_AGE_S`] within a boot; a corrupt one is never kept.
pub mod inforom_cache {
    use std::collections::BTreeMap;
    use std::path::Path;

    use serde::{Deserialize, Serialize};

    use crate::snapshot::{GpuSnapshot, InfoRom, Reading};

    pub const FILE: &str = "inforom.json";
    /// A kept validation is reused this long (s).
    pub const MAX_AGE_S: u64 = 3600;

    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    pub struct Kept {
        pub boot_id: Option<String>,
        /// By GPU UUID.
        pub gpus: BTreeMap<String, InfoRom>,
    }

    fn boot_id() -> Option<String> {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_string())
    }

    impl Kept {
        /// A valid result for `uuid` checked less than [`MAX_AGE_S`] ago.
        pub fn fresh(&self, uuid: &str) -> Option<InfoRom> {
            let now = gpuhost_steps::fsutil::unix_now();
            self.gpus
                .get(uuid)
                .filter(|i| {
                    i.valid
                        && i.checked_at
                            .is_some_and(|t| now.saturating_sub(t) < MAX_AGE_S)
                })
                .map(|i| InfoRom {
                    cached: true,
                    ..i.clone()
                })
        }
    }

    /// What an earlier run kept, if it is from this boot.
    pub fn load(run_dir: &Path) -> Kept {
        std::fs::read_to_string(run_dir.join(FILE))
            .ok()
            .and_then(|t| serde_json::from_str::<Kept>(&t).ok())
            .filter(|k| k.boot_id == boot_id())
            .unwrap_or_default()
    }

    /// Keep this sweep's fresh valid answers (best effort: the next run validates again).
    pub fn store(run_dir: &Path, mut kept: Kept, gpus: &[GpuSnapshot]) {
        let mut changed = false;
        for g in gpus {
            if let (Some(u), Reading::Value(i)) = (g.uuid.value(), &g.inforom) {
                if i.valid && !i.cached {
                    kept.gpus.insert(u.clone(), i.clone());
                    changed = true;
                }
            }
        }
        if !changed {
            return;
        }
        kept.boot_id = boot_id();
        if let Ok(text) = serde_json::to_string(&kept) {
            let _ = std::fs::create_dir_all(run_dir);
            let _ =
                gpuhost_steps::fsutil::write_atomic(&run_dir.join(FILE), text.as_bytes(), 0o644);
        }
    }
}

/// `nvmlDeviceGetRemappedRows` (not wrapped by the crate).
fn remapped_rows(nvml: &Nvml, d: &Device<'_>) -> Reading<RemappedRows> {
    raw_reading(raw::remapped_rows(nvml.lib(), raw::handle(d))).map(
        |(correctable, uncorrectable, pending, failure)| RemappedRows {
            correctable,
            uncorrectable,
            pending,
            failure,
        },
    )
}

/// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` through field values.
fn recovery_action(d: &Device<'_>) -> Reading<u32> {
    match d.field_values_for(&[FieldId(FI_GPU_RECOVERY_ACTION)]) {
        Ok(v) => match v.into_iter().next() {
            Some(Ok(sample)) => match sample.value {
                Ok(SampleValue::U32(x)) => Reading::Value(x),
                Ok(SampleValue::U64(x)) => Reading::Value(u32::try_from(x).unwrap_or(u32::MAX)),
                Ok(SampleValue::I64(x)) => Reading::Value(u32::try_from(x).unwrap_or(u32::MAX)),
                Ok(SampleValue::F64(_)) => Reading::Error("UnexpectedType".into()),
                Err(e) => reading(Err(e)),
            },
            Some(Err(e)) => reading(Err(e)),
            None => Reading::Error("NoValue".into()),
        },
        Err(e) => reading(Err(e)),
    }
}

/// Link state and error counters of each NVLink that answers.
fn nvlinks(d: &Device<'_>) -> Reading<Vec<NvLink>> {
    let mut links = Vec::new();
    for l in 0..NVLINK_MAX_LINKS {
        let w = d.link_wrapper_for(l);
        match w.is_active() {
            Ok(active) => {
                let c = |k| w.error_counter(k).ok();
                links.push(NvLink {
                    link: l,
                    active,
                    replay_errors: c(ErrorCounter::DlReplay),
                    recovery_errors: c(ErrorCounter::DlRecovery),
                    crc_flit_errors: c(ErrorCounter::DlCrcFlit),
                    crc_data_errors: c(ErrorCounter::DlCrcData),
                });
            }
            Err(NvmlError::NotSupported) | Err(NvmlError::InvalidArg) if l == 0 => {
                return Reading::NotSupported
            }
            Err(NvmlError::NotSupported) | Err(NvmlError::InvalidArg) => break,
            Err(e) if l == 0 => return reading(Err(e)),
            Err(_) => break,
        }
    }
    Reading::Value(links)
}

/// `nvmlDeviceGetGpuFabricInfoV`: version 3 (with the health mask), else version 2 (older
/// drivers; its layout is v3's prefix); n/a where unsupported (or state NOT_SUPPORTED).
fn fabric(nvml: &Nvml, d: &Device<'_>) -> Reading<Fabric> {
    let (lib, h) = (nvml.lib(), raw::handle(d));
    let answer = match raw::fabric_info_v(lib, h, 3) {
        Err(raw::RawErr::Rc(raw::RC_VERSION_MISMATCH)) => raw::fabric_info_v(lib, h, 2),
        other => other,
    };
    match answer {
        Err(raw::RawErr::Missing) => Reading::NotSupported,
        Ok(info) if info.state == 0 => Reading::NotSupported,
        other => raw_reading(other).map(|info| Fabric {
            state: info.state,
            status: info.status,
            clique_id: info.cliqueId,
            cluster_uuid: info
                .clusterUuid
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            health_mask: info.healthMask,
        }),
    }
}

/// A raw call's answer as a reading: NOT_SUPPORTED is n/a, a missing symbol an error.
fn raw_reading<T>(r: raw::Raw<T>) -> Reading<T> {
    match r {
        Ok(v) => Reading::Value(v),
        Err(raw::RawErr::Missing) => Reading::Error("FailedToLoadSymbol".into()),
        Err(raw::RawErr::Rc(rc)) => match nvml_wrapper::error::nvml_try(rc) {
            Ok(()) => Reading::Error(format!("rc {rc}")),
            Err(e) => reading(Err(e)),
        },
    }
}
