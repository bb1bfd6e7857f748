//! The NVML probe: initialise NVML, read every GPU, return plain data.
//!
//! This runs in a child process (`gpuhost status --nvml-probe`, see [`crate::probe`]): a GPU
//! that fell off the bus can block NVML calls for minutes, and a thread stuck in the driver
//! cannot be killed. Calls that the crate does not wrap (remapped rows, fabric info) go
//! through `nvml.lib()` with the device's own handle, never a null one.

use std::time::Instant;

use serde::Serialize;

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
/// `NVML_FI_DEV_NVLINK_LINK_COUNT`.
const FI_NVLINK_LINK_COUNT: u32 = 91;
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
            let t = Instant::now();
            p.gpus = sweep(&nvml, n, sequential());
            p.sweep_wall_ms = Some(ms(t));
        }
        Err(e) => p.error = Some(format!("device count: {e}")),
    }
    p.duration_ms = Some(ms(start));
    p
}

/// `GPUHOST_PROBE_SEQUENTIAL=1` sweeps the GPUs one after another (to measure what the
/// concurrent sweep saves on a many-GPU host).
fn sequential() -> bool {
    std::env::var_os("GPUHOST_PROBE_SEQUENTIAL").is_some_and(|v| v == "1")
}

/// Read one GPU by index: its handle, then every reading.
fn sweep_one(nvml: &Nvml, i: u32) -> GpuSnapshot {
    let t = Instant::now();
    match nvml.device_by_index(i) {
        Ok(d) => gpu(nvml, &d, i, t),
        Err(e) => lost_gpu(i, &e, t),
    }
}

/// Read every GPU, one thread per GPU (NVML is thread-safe; a GPU's ~30 calls wait on the
/// driver, not the CPU), in index order. One GPU (or `sequential`) is read on this thread:
/// no thread to start.
fn sweep(nvml: &Nvml, n: u32, sequential: bool) -> Vec<GpuSnapshot> {
    if n <= 1 || sequential {
        return (0..n).map(|i| sweep_one(nvml, i)).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let t = Instant::now();
                let h = std::thread::Builder::new()
                    .name(format!("nvml-gpu{i}"))
                    .spawn_scoped(s, move || sweep_one(nvml, i));
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
                Err(_) => sweep_one(nvml, i),
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

/// One raw NVML call and what it returned.
#[derive(Clone, Debug, Serialize)]
pub struct Call {
    /// `nvmlDeviceGetNvLinkState(link 0)`.
    pub call: String,
    /// NVML's return code (0 success, 3 NOT_SUPPORTED, 2 INVALID_ARGUMENT, …); None where
    /// nvml-wrapper made the call and gives only the error's name.
    pub rc: Option<u32>,
    /// Its name: `Success`, `NotSupported`, `InvalidArg`, ….
    pub result: String,
    /// What came back on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Every NVLink and fabric call for one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct GpuCalls {
    pub index: u32,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub calls: Vec<Call>,
}

/// `gpuhost status --nvml-calls`: the raw return codes of the NVLink and fabric calls.
#[derive(Clone, Debug, Serialize)]
pub struct CallsReport {
    pub init: String,
    pub driver_version: Option<String>,
    pub device_count: Option<u32>,
    pub gpus: Vec<GpuCalls>,
}

fn call(name: String, rc: u32, value: impl FnOnce() -> String) -> Call {
    let (result, value) = match nvml_wrapper::error::nvml_try(rc) {
        Ok(()) => ("Success".to_string(), Some(value())),
        Err(e) => (error_kind(&e), None),
    };
    Call {
        call: name,
        rc: Some(rc),
        result,
        value,
    }
}

fn c_str(bytes: &[std::os::raw::c_char]) -> String {
    let b: Vec<u8> = bytes
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// Call each NVLink function for links 0..18 and the fabric functions (v3, v2, v1) on every
/// GPU, recording NVML's raw return codes: what a machine supports, for the record.
pub fn link_fabric_calls() -> CallsReport {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            return CallsReport {
                init: error_kind(&e),
                driver_version: None,
                device_count: None,
                gpus: Vec::new(),
            }
        }
    };
    let mut r = CallsReport {
        init: "Success".into(),
        driver_version: nvml.sys_driver_version().ok(),
        device_count: nvml.device_count().ok(),
        gpus: Vec::new(),
    };
    for i in 0..r.device_count.unwrap_or(0) {
        match nvml.device_by_index(i) {
            Ok(d) => r.gpus.push(GpuCalls {
                index: i,
                uuid: d.uuid().ok(),
                pci_bus_id: d.pci_info().ok().map(|p| p.bus_id),
                calls: device_calls(&nvml, &d),
            }),
            Err(e) => r.gpus.push(GpuCalls {
                index: i,
                uuid: None,
                pci_bus_id: None,
                calls: vec![Call {
                    call: "nvmlDeviceGetHandleByIndex".into(),
                    rc: None,
                    result: error_kind(&e),
                    value: None,
                }],
            }),
        }
    }
    r
}

fn device_calls(nvml: &Nvml, d: &Device<'_>) -> Vec<Call> {
    let lib = nvml.lib();
    let mut out = Vec::new();
    let missing = |name: &str| Call {
        call: name.to_string(),
        rc: None,
        result: "FailedToLoadSymbol".into(),
        value: None,
    };
    match d.field_values_for(&[FieldId(FI_NVLINK_LINK_COUNT)]) {
        Ok(v) => {
            let (result, value) = match v.into_iter().next() {
                Some(Ok(s)) => match s.value {
                    Ok(v) => ("Success".to_string(), Some(format!("{v:?}"))),
                    Err(e) => (error_kind(&e), None),
                },
                Some(Err(e)) => (error_kind(&e), None),
                None => ("NoValue".to_string(), None),
            };
            out.push(Call {
                call: "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_LINK_COUNT)".into(),
                rc: value.is_some().then_some(0),
                result,
                value,
            });
        }
        Err(e) => out.push(Call {
            call: "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_LINK_COUNT)".into(),
            rc: None,
            result: error_kind(&e),
            value: None,
        }),
    }
    // SAFETY (every call below): the handle comes from a live `Device` of this `Nvml` (never
    // null); out pointers point at locals that outlive the call.
    let h = unsafe { d.handle() };
    for l in 0..NVLINK_MAX_LINKS {
        match lib.nvmlDeviceGetNvLinkState.as_ref() {
            Ok(f) => {
                let mut st = 0u32;
                let rc = unsafe { f(h, l, &mut st) };
                out.push(call(
                    format!("nvmlDeviceGetNvLinkState(link {l})"),
                    rc,
                    || if st == 1 { "active" } else { "inactive" }.into(),
                ));
            }
            Err(_) => out.push(missing("nvmlDeviceGetNvLinkState")),
        }
        match lib.nvmlDeviceGetNvLinkVersion.as_ref() {
            Ok(f) => {
                let mut v = 0u32;
                let rc = unsafe { f(h, l, &mut v) };
                out.push(call(
                    format!("nvmlDeviceGetNvLinkVersion(link {l})"),
                    rc,
                    || v.to_string(),
                ));
            }
            Err(_) => out.push(missing("nvmlDeviceGetNvLinkVersion")),
        }
        match lib.nvmlDeviceGetNvLinkRemotePciInfo_v2.as_ref() {
            Ok(f) => {
                let mut pci = nvml_wrapper_sys::bindings::nvmlPciInfo_t {
                    busIdLegacy: [0; 16],
                    domain: 0,
                    bus: 0,
                    device: 0,
                    pciDeviceId: 0,
                    pciSubSystemId: 0,
                    busId: [0; 32],
                };
                let rc = unsafe { f(h, l, &mut pci) };
                out.push(call(
                    format!("nvmlDeviceGetNvLinkRemotePciInfo_v2(link {l})"),
                    rc,
                    || format!("{} device 0x{:08x}", c_str(&pci.busId), pci.pciDeviceId),
                ));
            }
            Err(_) => out.push(missing("nvmlDeviceGetNvLinkRemotePciInfo_v2")),
        }
        match lib.nvmlDeviceGetNvLinkRemoteDeviceType.as_ref() {
            Ok(f) => {
                let mut t = 0u32;
                let rc = unsafe { f(h, l, &mut t) };
                out.push(call(
                    format!("nvmlDeviceGetNvLinkRemoteDeviceType(link {l})"),
                    rc,
                    || match t {
                        0 => "gpu".into(),
                        1 => "ibmnpu".into(),
                        2 => "switch".into(),
                        x => format!("type {x}"),
                    },
                ));
            }
            Err(_) => out.push(missing("nvmlDeviceGetNvLinkRemoteDeviceType")),
        }
        for (counter, name) in [
            (0u32, "DL_REPLAY"),
            (1, "DL_RECOVERY"),
            (2, "DL_CRC_FLIT"),
            (3, "DL_CRC_DATA"),
            (4, "DL_ECC_DATA"),
        ] {
            match lib.nvmlDeviceGetNvLinkErrorCounter.as_ref() {
                Ok(f) => {
                    let mut v = 0u64;
                    let rc = unsafe { f(h, l, counter, &mut v) };
                    out.push(call(
                        format!("nvmlDeviceGetNvLinkErrorCounter(link {l}, {name})"),
                        rc,
                        || v.to_string(),
                    ));
                }
                Err(_) => out.push(missing("nvmlDeviceGetNvLinkErrorCounter")),
            }
        }
    }
    match lib.nvmlDeviceGetGpuFabricInfoV.as_ref() {
        Ok(f) => {
            for (ver, size) in [
                (3u32, std::mem::size_of::<nvmlGpuFabricInfo_v3_t>()),
                (2, std::mem::size_of::<nvmlGpuFabricInfo_v2_t>()),
            ] {
                let mut info = nvmlGpuFabricInfo_v3_t {
                    version: u32::try_from(size).unwrap_or(0) | (ver << 24),
                    clusterUuid: [0; 16],
                    status: 0,
                    cliqueId: 0,
                    state: 0,
                    healthMask: 0,
                    healthSummary: 0,
                };
                let rc = unsafe { f(h, &mut info) };
                out.push(call(
                    format!("nvmlDeviceGetGpuFabricInfoV(v{ver})"),
                    rc,
                    || {
                        format!(
                            "state {} status {} clique {} health_mask 0x{:x} cluster {}",
                            info.state,
                            info.status,
                            info.cliqueId,
                            info.healthMask,
                            info.clusterUuid
                                .iter()
                                .map(|b| format!("{b:02x}"))
                                .collect::<String>()
                        )
                    },
                ));
            }
        }
        Err(_) => out.push(missing("nvmlDeviceGetGpuFabricInfoV")),
    }
    match lib.nvmlDeviceGetGpuFabricInfo.as_ref() {
        Ok(f) => {
            let mut info = nvml_wrapper_sys::bindings::nvmlGpuFabricInfo_t {
                clusterUuid: [0; 16],
                status: 0,
                cliqueId: 0,
                state: 0,
            };
            let rc = unsafe { f(h, &mut info) };
            out.push(call("nvmlDeviceGetGpuFabricInfo".into(), rc, || {
                format!(
                    "state {} status {} clique {}",
                    info.state, info.status, info.cliqueId
                )
            }));
        }
        Err(_) => out.push(missing("nvmlDeviceGetGpuFabricInfo")),
    }
    out
}
