//! The NVML probe: initialise NVML, read every GPU, return plain data.
//!
//! This runs in a child process (`gpuhost nvml-probe`, see [`crate::probe`]): a GPU
//! that fell off the bus can block NVML calls for minutes, and a thread stuck in the driver
//! cannot be killed. Calls that the crate does not wrap (remapped rows, fabric info) go
//! through `nvml.lib()` with the device's own handle, never a null one.

pub(crate) mod calls;
pub(crate) mod raw;

use std::collections::BTreeMap;
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

use crate::boot_cache::{self, SystemFixed};
use crate::snapshot::{
    C2c, C2cLink, EccCounts, EccMode, Fabric, GpuSnapshot, GspFirmware, InfoRom, MigMode, NvLink,
    NvmlProbe, ProbeStatus, Reading, RemappedRows, SramEcc,
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

/// Initialise NVML and read every device, once (the one-shot probe, a process that exits
/// right after). Never panics; errors become data.
///
/// NVML is left initialised: `nvmlShutdown` took 4.1–4.6 ms on an H200 (its objects freed one
/// by one), while the process's exit releases them with its file descriptors anyway.
/// `GPUHOST_PROBE_SHUTDOWN=1` shuts it down first (to measure what that costs).
pub(crate) fn probe() -> NvmlProbe {
    let start = Instant::now();
    match init(start) {
        Ok(nvml) => {
            let mut s = Session::new(nvml);
            let p = s.sweep(start);
            if std::env::var_os("GPUHOST_PROBE_SHUTDOWN").is_some_and(|v| v == "1") {
                drop(s);
            } else {
                std::mem::forget(s);
            }
            p
        }
        Err(failed) => *failed,
    }
}

/// `GPUHOST_PROBE_NO_CUDA=1` leaves the CUDA check out (to measure what it costs).
fn no_cuda() -> bool {
    std::env::var_os("GPUHOST_PROBE_NO_CUDA").is_some_and(|v| v == "1")
}

/// `GPUHOST_PROBE_REREAD=1`: read every field at every sweep, the fixed ones too (to measure
/// what keeping them saves).
fn reread() -> bool {
    std::env::var_os("GPUHOST_PROBE_REREAD").is_some_and(|v| v == "1")
}

/// Initialise NVML; a failure is the probe's answer (classified: no library, driver not
/// loaded, version mismatch, …). `gpuhost serve`'s probe keeps the handle between sweeps.
pub(crate) fn init(start: Instant) -> Result<Nvml, Box<NvmlProbe>> {
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
            // The library's own words, not nvml-wrapper's ("a libloading error occurred").
            let error = match &e {
                NvmlError::LibloadingError(le) => format!("NVML library not found ({le})"),
                other => format!("{other}"),
            };
            Err(Box::new(NvmlProbe {
                status,
                error: Some(error),
                duration_ms: Some(ms(start)),
                ..NvmlProbe::default()
            }))
        }
    }
}

/// What cannot change while NVML stays initialised, kept per probe: the driver's versions
/// ([`SystemFixed`]) and each GPU's [`GpuFixed`] fields. While a process holds NVML open the
/// nvidia module cannot be unloaded (it is in use), so a new driver, a reflashed VBIOS or a
/// changed GSP setting all need a new probe — which reads them afresh, or takes them from the
/// boot cache ([`boot_cache`]: kept in the run dir for this boot, driver and GPU UUID).
/// `gpuhost serve`'s probe child keeps one `Session` for its life; a one-shot probe makes one
/// for its single sweep, and reads only what can change when the boot cache has the rest.
pub(crate) struct Session {
    nvml: Nvml,
    system: Option<SystemFixed>,
    fixed: KeptFixed,
    boot: boot_cache::Store,
    cuda: crate::cuda::Memo,
    /// Record each call's wall time ([`Session::timings`]); `gpuhost sweep-profile`.
    pub(crate) profile: bool,
    timings: Vec<Timings>,
}

impl Session {
    /// A session over an initialised NVML, with what the boot cache keeps for the running
    /// system (nothing under `GPUHOST_PROBE_REREAD=1`).
    pub(crate) fn new(nvml: Nvml) -> Session {
        let key = if reread() {
            None
        } else {
            boot_cache::Key::live()
        };
        Session {
            nvml,
            system: None,
            fixed: KeptFixed::default(),
            boot: boot_cache::Store::load(crate::probe::run_dir().ok().as_deref(), key),
            cuda: crate::cuda::Memo::default(),
            profile: false,
            timings: Vec::new(),
        }
    }

    /// The NVML handle back (what was kept is dropped).
    pub(crate) fn into_nvml(self) -> Nvml {
        self.nvml
    }

    /// The call timings of the last sweep: the driver-wide calls', then each GPU's (empty
    /// unless [`Session::profile`]).
    pub(crate) fn timings(&self) -> &[Timings] {
        &self.timings
    }

    /// Read the driver's versions and every device, while another thread loads libcuda and
    /// runs `cuInit` when no success is kept ([`crate::cuda`]). Fields that cannot change
    /// while NVML stays initialised are read at the first sweep and kept (unless
    /// `GPUHOST_PROBE_REREAD=1`), or taken from the boot cache; every other one is read each
    /// time.
    pub(crate) fn sweep(&mut self, start: Instant) -> NvmlProbe {
        // None: no CUDA check; Some(Ok): a success kept; Some(Err(key)): check now, beside the
        // NVML sweep (cuInit takes hundreds of ms when no success is kept).
        let cuda = (!no_cuda()).then(|| match self.cuda.kept() {
            Ok(c) => Ok(c),
            Err(key) => match self.boot.cuda(&key) {
                Some(c) => {
                    self.cuda.remember(key, &c);
                    Ok(c)
                }
                None => Err(key),
            },
        });
        let cuda_thread = match &cuda {
            Some(Err(_)) => Some(
                std::thread::Builder::new()
                    .name("cuda-init".into())
                    .spawn(crate::cuda::check),
            ),
            _ => None,
        };
        if reread() {
            self.system = None;
            self.fixed = KeptFixed::default();
        }
        let mut sys_tm = Timings::new(self.profile);
        let nvml = &self.nvml;
        let boot = &mut self.boot;
        let system = self.system.get_or_insert_with(|| match boot.system() {
            Some(s) => s.clone(),
            None => {
                let s = SystemFixed {
                    driver_version: sys_tm.t("nvmlSystemGetDriverVersion", || {
                        nvml.sys_driver_version().ok()
                    }),
                    nvml_version: sys_tm
                        .t("nvmlSystemGetNVMLVersion", || nvml.sys_nvml_version().ok()),
                    cuda_driver_version: sys_tm.t("nvmlSystemGetCudaDriverVersion", || {
                        nvml.sys_cuda_driver_version().ok()
                    }),
                };
                boot.keep_system(&s);
                s
            }
        });
        let mut p = NvmlProbe {
            status: ProbeStatus::Ok,
            driver_version: system.driver_version.clone(),
            nvml_version: system.nvml_version.clone(),
            cuda_driver_version: system.cuda_driver_version,
            ..NvmlProbe::default()
        };
        self.timings.clear();
        match sys_tm.t("nvmlDeviceGetCount", || nvml.device_count()) {
            Ok(n) => {
                p.device_count = Some(n);
                let t = Instant::now();
                let read = sweep(nvml, n, sequential(), &self.boot, &self.fixed, self.profile);
                let (gpus, timings): (Vec<GpuSnapshot>, Vec<Timings>) = read.into_iter().unzip();
                p.gpus = gpus;
                self.timings = timings;
                p.sweep_wall_ms = Some(ms(t));
                for g in &p.gpus {
                    self.fixed.keep(g);
                    self.boot.keep_gpu(g);
                }
            }
            Err(e) => p.error = Some(format!("device count: {e}")),
        }
        self.timings.insert(0, sys_tm);
        p.cuda = match cuda {
            None => None,
            Some(Ok(kept)) => Some(kept),
            Some(Err(key)) => {
                let c = match cuda_thread {
                    Some(Ok(h)) => h.join().unwrap_or_else(|_| crate::snapshot::CudaCheck {
                        error: Some("the CUDA check panicked".into()),
                        ..Default::default()
                    }),
                    // No thread to be had: check here.
                    _ => crate::cuda::check(),
                };
                self.cuda.remember(key.clone(), &c);
                self.boot.keep_cuda(key, &c);
                Some(c)
            }
        };
        self.boot.save();
        p.duration_ms = Some(ms(start));
        p
    }
}

/// Wall times of one GPU's NVML calls in a sweep, µs, in call order, and how much each raised
/// the process's peak RSS, KiB (profiling only).
#[derive(Clone, Debug, Default)]
pub(crate) struct Timings {
    on: bool,
    pub(crate) calls: Vec<(&'static str, f64)>,
    pub(crate) peak_rss_growth: Vec<(&'static str, u64)>,
}

impl Timings {
    fn new(on: bool) -> Timings {
        Timings {
            on,
            ..Timings::default()
        }
    }

    /// Make the call `f`, recording its wall time under `name` (and the peak RSS it added)
    /// when profiling.
    fn t<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        if !self.on {
            return f();
        }
        let before = crate::probe::peak_rss_kib().unwrap_or(0);
        let t = Instant::now();
        let v = f();
        self.calls
            .push((name, (t.elapsed().as_secs_f64() * 1e7).round() / 10.0));
        let grew = crate::probe::peak_rss_kib()
            .unwrap_or(0)
            .saturating_sub(before);
        if grew > 0 {
            self.peak_rss_growth.push((name, grew));
        }
        v
    }
}

pub(crate) use crate::boot_cache::GpuFixed;

/// Each GPU's [`GpuFixed`] fields by NVML index (the order NVML enumerated at init, which does
/// not change while it stays initialised).
#[derive(Clone, Debug, Default)]
pub(crate) struct KeptFixed {
    gpus: BTreeMap<u32, GpuFixed>,
}

impl KeptFixed {
    /// The fixed fields kept for GPU `index`.
    pub(crate) fn get(&self, index: u32) -> Option<&GpuFixed> {
        self.gpus.get(&index)
    }

    /// Keep `g`'s fixed fields that answered and are not kept yet.
    pub(crate) fn keep(&mut self, g: &GpuSnapshot) {
        self.gpus.entry(g.index).or_default().keep(g);
    }

    /// Give `g` (a fresh reading of every field) the fixed fields kept for it, keeping those
    /// of its own that are not kept yet: what the fixture-fed probe does with each sweep's
    /// answer, as the NVML probe does with its calls.
    pub(crate) fn apply_or_keep(&mut self, g: &mut GpuSnapshot) {
        let f = self.gpus.entry(g.index).or_default();
        f.keep(g);
        f.apply(g);
    }
}

/// `GPUHOST_PROBE_SEQUENTIAL=1` sweeps the GPUs one after another (to measure what the
/// concurrent sweep saves on a many-GPU host).
fn sequential() -> bool {
    std::env::var_os("GPUHOST_PROBE_SEQUENTIAL").is_some_and(|v| v == "1")
}

/// Read one GPU by index: its handle, then every reading (the fixed ones only when none are
/// kept for it).
fn sweep_one(
    nvml: &Nvml,
    i: u32,
    boot: &boot_cache::Store,
    fixed: &KeptFixed,
    profile: bool,
) -> (GpuSnapshot, Timings) {
    let t = Instant::now();
    let mut tm = Timings::new(profile);
    let g = match tm.t("nvmlDeviceGetHandleByIndex", || nvml.device_by_index(i)) {
        Ok(d) => gpu(nvml, &d, i, t, boot, fixed.get(i), &mut tm),
        Err(e) => lost_gpu(i, &e, t),
    };
    (g, tm)
}

/// Read every GPU, one thread per GPU (NVML is thread-safe; a GPU's ~30 calls wait on the
/// driver, not the CPU), in index order. One GPU (or `sequential`) is read on this thread:
/// no thread to start.
fn sweep(
    nvml: &Nvml,
    n: u32,
    sequential: bool,
    boot: &boot_cache::Store,
    fixed: &KeptFixed,
    profile: bool,
) -> Vec<(GpuSnapshot, Timings)> {
    if n <= 1 || sequential {
        return (0..n)
            .map(|i| sweep_one(nvml, i, boot, fixed, profile))
            .collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let t = Instant::now();
                let h = std::thread::Builder::new()
                    .name(format!("nvml-gpu{i}"))
                    .spawn_scoped(s, move || sweep_one(nvml, i, boot, fixed, profile));
                (i, t, h)
            })
            .collect();
        handles
            .into_iter()
            .map(|(i, t, h)| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    (
                        lost_gpu_kind(i, "ProbeThreadPanicked", t),
                        Timings::default(),
                    )
                }),
                // No thread to be had: read it here instead.
                Err(_) => sweep_one(nvml, i, boot, fixed, profile),
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
pub(crate) fn lost_gpu_kind(index: u32, k: &str, t: Instant) -> GpuSnapshot {
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
        c2c: err(&k),
        architecture: err(&k),
        minor_number: err(&k),
        pcie_replay_counter: err(&k),
        ecc_aggregate_corrected: err(&k),
        ecc_dram: err(&k),
        ecc_sram: err(&k),
        inforom: err(&k),
        vbios_version: err(&k),
        gsp_firmware: err(&k),
        fixed_kept: false,
        sweep_ms: ms(t),
    }
}

fn gpu(
    nvml: &Nvml,
    d: &Device<'_>,
    index: u32,
    t: Instant,
    boot: &boot_cache::Store,
    fixed: Option<&GpuFixed>,
    tm: &mut Timings,
) -> GpuSnapshot {
    let (lib, h) = (nvml.lib(), raw::handle(d));
    // The UUID: kept by this probe, else read (it finds the GPU in the boot cache).
    let uuid: Reading<String> = match fixed.and_then(|f| f.uuid.clone()) {
        Some(u) => u,
        None => tm.t("nvmlDeviceGetUUID", || reading(d.uuid())),
    };
    let fixed = match fixed {
        Some(f) if *f != GpuFixed::default() => Some(f),
        _ => uuid.value().and_then(|u| boot.gpu(u)),
    };
    // The InfoROM validation is kept by UUID.
    let inforom = match uuid.value().and_then(|u| boot.inforom(u)) {
        Some(i) => Reading::Value(i),
        None => tm.t("nvmlDeviceValidateInforom + GetInforomImageVersion", || {
            inforom(lib, h)
        }),
    };
    // Every field an error until read.
    let mut g = lost_gpu_kind(index, "not read", t);
    read_fixed(&mut g, d, (lib, h), fixed, tm);
    read_health(&mut g, nvml, d, (lib, h), tm);
    read_state(&mut g, nvml, d, tm);
    g.uuid = uuid;
    g.inforom = inforom;
    g.fixed_kept = fixed.is_some_and(|f| *f != GpuFixed::default());
    g.sweep_ms = ms(t);
    g
}

/// What cannot change within a boot: kept for this GPU (the boot cache), else read.
fn read_fixed(
    g: &mut GpuSnapshot,
    d: &Device<'_>,
    (lib, h): (&NvmlLib, nvmlDevice_t),
    fixed: Option<&GpuFixed>,
    tm: &mut Timings,
) {
    // A fixed field is read only when none is kept for this GPU.
    macro_rules! fixed_field {
        ($field:ident, $name:literal, $e:expr) => {
            match fixed.and_then(|f| f.$field.clone()) {
                Some(kept) => kept,
                None => tm.t($name, || $e),
            }
        };
    }
    g.name = fixed_field!(name, "nvmlDeviceGetName", reading(d.name()));
    g.pci_bus_id = fixed_field!(
        pci_bus_id,
        "nvmlDeviceGetPciInfo",
        reading(d.pci_info().map(|p| p.bus_id))
    );
    g.brand = fixed_field!(
        brand,
        "nvmlDeviceGetBrand",
        reading(d.brand().map(|b| b.as_c()))
    );
    g.compute_capability = fixed_field!(
        compute_capability,
        "nvmlDeviceGetCudaComputeCapability",
        reading(
            d.cuda_compute_capability()
                .map(|c| format!("{}.{}", c.major, c.minor))
        )
    );
    g.temperature_slowdown_c = fixed_field!(
        temperature_slowdown_c,
        "nvmlDeviceGetTemperatureThreshold(SLOWDOWN)",
        reading(d.temperature_threshold(TemperatureThreshold::Slowdown))
    );
    g.temperature_shutdown_c = fixed_field!(
        temperature_shutdown_c,
        "nvmlDeviceGetTemperatureThreshold(SHUTDOWN)",
        reading(d.temperature_threshold(TemperatureThreshold::Shutdown))
    );
    g.power_limit_default_mw = fixed_field!(
        power_limit_default_mw,
        "nvmlDeviceGetPowerManagementDefaultLimit",
        reading(d.power_management_limit_default())
    );
    g.pcie_gen_max = fixed_field!(
        pcie_gen_max,
        "nvmlDeviceGetMaxPcieLinkGeneration",
        reading(d.max_pcie_link_gen())
    );
    g.pcie_width_max = fixed_field!(
        pcie_width_max,
        "nvmlDeviceGetMaxPcieLinkWidth",
        reading(d.max_pcie_link_width())
    );
    g.architecture = fixed_field!(
        architecture,
        "nvmlDeviceGetArchitecture",
        reading(d.architecture().map(|a| format!("{a:?}")))
    );
    g.minor_number = fixed_field!(
        minor_number,
        "nvmlDeviceGetMinorNumber",
        reading(d.minor_number())
    );
    g.vbios_version = fixed_field!(
        vbios_version,
        "nvmlDeviceGetVbiosVersion",
        raw_reading(raw::vbios_version(lib, h))
    );
    g.gsp_firmware = fixed_field!(
        gsp_firmware,
        "nvmlDeviceGetGspFirmwareMode/Version",
        raw_reading(raw::gsp_firmware_mode(lib, h)).map(|(enabled, default)| {
            GspFirmware {
                enabled,
                default_enabled: default,
                version: raw::gsp_firmware_version(lib, h).ok(),
            }
        })
    );
}

/// ECC, retired pages, remapped rows, the recovery action and the PCIe replay counter.
fn read_health(
    g: &mut GpuSnapshot,
    nvml: &Nvml,
    d: &Device<'_>,
    (lib, h): (&NvmlLib, nvmlDevice_t),
    tm: &mut Timings,
) {
    g.ecc_mode = tm.t("nvmlDeviceGetEccMode", || {
        reading(d.is_ecc_enabled().map(|m| EccMode {
            current: m.currently_enabled,
            pending: m.pending_enabled,
        }))
    });
    g.ecc_volatile_uncorrected = tm.t("nvmlDeviceGetTotalEccErrors(UNC, VOL)", || {
        reading(d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile))
    });
    g.ecc_aggregate_uncorrected = tm.t("nvmlDeviceGetTotalEccErrors(UNC, AGG)", || {
        reading(d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate))
    });
    g.ecc_volatile_corrected = tm.t("nvmlDeviceGetTotalEccErrors(COR, VOL)", || {
        reading(d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile))
    });
    g.retired_pages_pending = tm.t("nvmlDeviceGetRetiredPagesPendingStatus", || {
        reading(d.are_pages_pending_retired())
    });
    g.remapped_rows = tm.t("nvmlDeviceGetRemappedRows", || remapped_rows(nvml, d));
    g.recovery_action = tm.t("nvmlDeviceGetFieldValues(RECOVERY_ACTION)", || {
        recovery_action(d)
    });
    g.pcie_replay_counter = tm.t("nvmlDeviceGetPcieReplayCounter", || {
        raw_reading(raw::pcie_replay_counter(lib, h))
    });
    g.ecc_aggregate_corrected = tm.t("nvmlDeviceGetTotalEccErrors(COR, AGG)", || {
        reading(d.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate))
    });
    g.ecc_dram = tm.t("nvmlDeviceGetMemoryErrorCounter(DRAM) x4", || {
        ecc_dram(lib, h)
    });
    g.ecc_sram = tm.t(
        "nvmlDeviceGetMemoryErrorCounter(SRAM) x4 [+SramEccErrorStatus]",
        || ecc_sram(lib, h),
    );
}

/// Temperature, clocks, power, memory, the PCIe link, persistence, MIG, NVLink and fabric.
fn read_state(g: &mut GpuSnapshot, nvml: &Nvml, d: &Device<'_>, tm: &mut Timings) {
    let mem = tm.t("nvmlDeviceGetMemoryInfo", || d.memory_info());
    let (memory_total_bytes, memory_used_bytes) = match mem {
        Ok(m) => (Reading::Value(m.total), Reading::Value(m.used)),
        Err(e) => {
            let r = reading::<u64>(Err(e));
            (r.clone(), r)
        }
    };
    g.memory_total_bytes = memory_total_bytes;
    g.memory_used_bytes = memory_used_bytes;
    g.temperature_c = tm.t("nvmlDeviceGetTemperature", || {
        reading(d.temperature(TemperatureSensor::Gpu))
    });
    g.clock_event_reasons = tm.t("nvmlDeviceGetCurrentClocksEventReasons", || {
        reading(d.current_throttle_reasons().map(|r| r.bits()))
    });
    g.power_usage_mw = tm.t("nvmlDeviceGetPowerUsage", || reading(d.power_usage()));
    g.power_limit_enforced_mw = tm.t("nvmlDeviceGetEnforcedPowerLimit", || {
        reading(d.enforced_power_limit())
    });
    g.pcie_gen_current = tm.t("nvmlDeviceGetCurrPcieLinkGeneration", || {
        reading(d.current_pcie_link_gen())
    });
    g.pcie_width_current = tm.t("nvmlDeviceGetCurrPcieLinkWidth", || {
        reading(d.current_pcie_link_width())
    });
    g.persistence_mode = tm.t("nvmlDeviceGetPersistenceMode", || {
        reading(d.is_in_persistent_mode())
    });
    g.mig_mode = tm.t("nvmlDeviceGetMigMode", || {
        reading(d.mig_mode().map(|m| MigMode {
            current: m.current,
            pending: m.pending,
        }))
    });
    g.nvlinks = tm.t("nvmlDeviceGetNvLinkState/ErrorCounter", || nvlinks(d));
    g.fabric = tm.t("nvmlDeviceGetGpuFabricInfoV", || fabric(nvml, d));
    g.c2c = tm.t("nvmlDeviceGetC2cModeInfoV/FieldValues(C2C)", || {
        c2c(nvml, d)
    });
}

/// NVML's C2C field ids (nvml.h): link count, per-link status (1 active), per-link MB/s.
const FI_C2C_LINK_COUNT: u32 = 170;
const FI_C2C_LINK_GET_STATUS: u32 = 171;
const FI_C2C_LINK_GET_MAX_BW: u32 = 172;

/// NVLink-C2C: `nvmlDeviceGetC2cModeInfoV`, then, when enabled, the link count and each link's
/// status and bandwidth in one `nvmlDeviceGetFieldValues` (scope = link). n/a where NVML does
/// not support it (a GPU without a Grace CPU) or this libnvidia-ml has no such call.
fn c2c(nvml: &Nvml, d: &Device<'_>) -> Reading<C2c> {
    let (lib, h) = (nvml.lib(), raw::handle(d));
    let enabled = match raw::c2c_mode(lib, h) {
        Err(raw::RawErr::Missing) => return Reading::NotSupported,
        other => match raw_reading(other) {
            Reading::Value(on) => on,
            Reading::NotSupported => return Reading::NotSupported,
            Reading::Error(e) => return Reading::Error(e),
        },
    };
    if !enabled {
        return Reading::Value(C2c::default());
    }
    let count = match raw::field_values(lib, h, &[(FI_C2C_LINK_COUNT, 0)]) {
        Ok(v) => v.into_iter().next().and_then(Result::ok).unwrap_or(0),
        Err(_) => 0,
    };
    let count = u32::try_from(count).unwrap_or(0).min(NVLINK_MAX_LINKS);
    let ids: Vec<(u32, u32)> = (0..count)
        .flat_map(|l| [(FI_C2C_LINK_GET_STATUS, l), (FI_C2C_LINK_GET_MAX_BW, l)])
        .collect();
    let values = if ids.is_empty() {
        Vec::new()
    } else {
        raw::field_values(lib, h, &ids).unwrap_or_default()
    };
    let links = (0..count)
        .map(|l| {
            let at = |i: usize| values.get(i).and_then(|v| v.ok());
            let i = usize::try_from(l).unwrap_or(0) * 2;
            C2cLink {
                link: l,
                active: at(i) == Some(1),
                max_bandwidth_mbps: at(i + 1),
            }
        })
        .collect();
    Reading::Value(C2c {
        enabled: true,
        links,
    })
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
        checked_at: Some(gpuhost_host::fsutil::unix_now()),
        cached: false,
    })
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
    let (answer, v3) = match raw::fabric_info_v(lib, h, 3) {
        Err(raw::RawErr::Rc(raw::RC_VERSION_MISMATCH)) => (raw::fabric_info_v(lib, h, 2), false),
        other => (other, true),
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
            health_summary: v3.then_some(info.healthSummary),
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
