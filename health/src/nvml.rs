//! The NVML probe: initialise NVML, read every GPU, return plain data.
//!
//! This runs in a child process (`gpuhost status --nvml-probe`, see [`crate::probe`]): a GPU
//! that fell off the bus can block NVML calls for minutes, and a thread stuck in the driver
//! cannot be killed. Calls that the crate does not wrap (remapped rows, fabric info) go
//! through `nvml.lib()` with the device's own handle, never a null one.

use std::time::Instant;

use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlGpuFabricInfo_v2_t, nvmlGpuFabricInfo_v3_t,
    nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH as NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
};

use crate::snapshot::{
    EccMode, Fabric, GpuSnapshot, MigMode, NvLink, NvmlProbe, ProbeStatus, Reading, RemappedRows,
};

/// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`.
const FI_GPU_RECOVERY_ACTION: u32 = 230;
/// `NVML_NVLINK_MAX_LINKS`.
const NVLINK_MAX_LINKS: u32 = 18;

fn reading<T>(r: Result<T, NvmlError>) -> Reading<T> {
    match r {
        Ok(v) => Reading::Value(v),
        Err(NvmlError::NotSupported) => Reading::NotSupported,
        Err(e) => Reading::Error(error_kind(&e)),
    }
}

/// NVML's error as a short name (`NoPermission`, `GpuLost`, …).
fn error_kind(e: &NvmlError) -> String {
    let dbg = format!("{e:?}");
    match dbg.find('(') {
        Some(i) if !matches!(e, NvmlError::FailedToLoadSymbol(_)) => dbg[..i].to_string(),
        _ => dbg,
    }
}

/// Initialise NVML and read every device. Never panics; errors become data.
pub fn probe() -> NvmlProbe {
    let start = Instant::now();
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            let status = match &e {
                NvmlError::LibloadingError(_) => ProbeStatus::NoLibrary,
                NvmlError::DriverNotLoaded => ProbeStatus::DriverNotLoaded,
                NvmlError::LibRmVersionMismatch => ProbeStatus::VersionMismatch,
                NvmlError::NoPermission => ProbeStatus::NoPermission,
                _ => ProbeStatus::InitError,
            };
            return NvmlProbe {
                status,
                error: Some(format!("{e}")),
                duration_ms: Some(ms(start)),
                ..NvmlProbe::default()
            };
        }
    };
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
            for i in 0..n {
                let t = Instant::now();
                match nvml.device_by_index(i) {
                    Ok(d) => p.gpus.push(gpu(&nvml, &d, i, t)),
                    Err(e) => p.gpus.push(lost_gpu(i, &e, t)),
                }
            }
        }
        Err(e) => p.error = Some(format!("device count: {e}")),
    }
    p.duration_ms = Some(ms(start));
    p
}

fn ms(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1e5).round() / 100.0
}

/// A device whose handle could not be had (e.g. GpuLost): every field carries the error.
fn lost_gpu(index: u32, e: &NvmlError, t: Instant) -> GpuSnapshot {
    let k = error_kind(e);
    fn err<T>(k: &str) -> Reading<T> {
        Reading::Error(k.to_string())
    }
    GpuSnapshot {
        index,
        name: err(&k),
        uuid: err(&k),
        pci_bus_id: err(&k),
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
        sweep_ms: ms(t),
    }
}

fn gpu(nvml: &Nvml, d: &Device<'_>, index: u32, t: Instant) -> GpuSnapshot {
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
        uuid: reading(d.uuid()),
        pci_bus_id: reading(d.pci_info().map(|p| p.bus_id)),
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
        sweep_ms: ms(t),
    }
}

/// `nvmlDeviceGetRemappedRows` (not wrapped by the crate).
fn remapped_rows(nvml: &Nvml, d: &Device<'_>) -> Reading<RemappedRows> {
    let lib = nvml.lib();
    let Ok(sym) = lib.nvmlDeviceGetRemappedRows.as_ref() else {
        return Reading::Error("FailedToLoadSymbol".into());
    };
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the handle comes from a live `Device` of this `Nvml` (never null); the out
    // pointers point at locals that outlive the call.
    let rc = unsafe { sym(d.handle(), &mut corr, &mut unc, &mut pending, &mut failure) };
    match nvml_wrapper::error::nvml_try(rc) {
        Ok(()) => Reading::Value(RemappedRows {
            correctable: corr,
            uncorrectable: unc,
            pending: pending != 0,
            failure: failure != 0,
        }),
        Err(e) => reading(Err(e)),
    }
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
/// drivers; its layout is v3's prefix); n/a where unsupported.
fn fabric(nvml: &Nvml, d: &Device<'_>) -> Reading<Fabric> {
    let lib = nvml.lib();
    let Ok(sym) = lib.nvmlDeviceGetGpuFabricInfoV.as_ref() else {
        return Reading::NotSupported;
    };
    let v3 = std::mem::size_of::<nvmlGpuFabricInfo_v3_t>() | (3 << 24);
    let v2 = std::mem::size_of::<nvmlGpuFabricInfo_v2_t>() | (2 << 24);
    let mut rc = 0;
    let mut info = nvmlGpuFabricInfo_v3_t {
        version: 0,
        clusterUuid: [0; 16],
        status: 0,
        cliqueId: 0,
        state: 0,
        healthMask: 0,
        healthSummary: 0,
    };
    for version in [v3, v2] {
        info.version = u32::try_from(version).unwrap_or(0);
        // SAFETY: live device handle; `info` is a v3 struct on our stack, large enough for
        // either version, and the version field says which layout the library may fill.
        rc = unsafe { sym(d.handle(), &mut info) };
        if rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH {
            break;
        }
    }
    if let Err(e) = nvml_wrapper::error::nvml_try(rc) {
        return reading(Err(e));
    }
    if info.state == 0 {
        return Reading::NotSupported;
    }
    Reading::Value(Fabric {
        state: info.state,
        status: info.status,
        clique_id: info.cliqueId,
        cluster_uuid: info
            .clusterUuid
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        health_mask: info.healthMask,
    })
}
