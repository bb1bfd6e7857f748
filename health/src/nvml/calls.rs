//! `gpuhost nvml-calls`: every raw NVML call the probe depends on (and the NVLink and
//! fabric calls it tries), with NVML's raw return code per GPU, as JSON. It is the evidence of
//! what a machine supports (NOT_SUPPORTED reads n/a) and the source of test fixtures.

use serde::Serialize;

use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlDevice_t, NvmlLib};

use super::raw::{self, Raw, RawErr};
use super::{error_kind, FI_NVLINK_LINK_COUNT, NVLINK_MAX_LINKS};

/// One raw NVML call and what it returned.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Call {
    /// `nvmlDeviceGetNvLinkState(link 0)`.
    pub(crate) call: String,
    /// NVML's return code (0 success, 3 NOT_SUPPORTED, 2 INVALID_ARGUMENT, …); None where the
    /// symbol is missing or nvml-wrapper made the call and gives only the error's name.
    pub(crate) rc: Option<u32>,
    /// Its name: `Success`, `NotSupported`, `InvalidArg`, `FailedToLoadSymbol`, ….
    pub(crate) result: String,
    /// What came back on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<String>,
    /// How long the call took, µs (what it would add to the probe's sweep).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) us: Option<f64>,
}

/// Make a call and record how long it took.
fn timed(make: impl FnOnce() -> Call) -> Call {
    let t = std::time::Instant::now();
    let mut c = make();
    c.us = Some((t.elapsed().as_secs_f64() * 1e7).round() / 10.0);
    c
}

/// Every call for one GPU.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct GpuCalls {
    pub(crate) index: u32,
    pub(crate) uuid: Option<String>,
    pub(crate) pci_bus_id: Option<String>,
    pub(crate) calls: Vec<Call>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CallsReport {
    pub(crate) init: String,
    pub(crate) driver_version: Option<String>,
    pub(crate) device_count: Option<u32>,
    /// libcuda.so.1 and `cuInit(0)`, as the probe runs them (uncached).
    pub(crate) cuda: crate::snapshot::CudaCheck,
    pub(crate) gpus: Vec<GpuCalls>,
}

/// A raw answer as a [`Call`]: its return code and its name, and the value on success.
pub(crate) fn call<T>(name: String, r: Raw<T>, show: impl FnOnce(T) -> String) -> Call {
    let (rc, result, value) = match r {
        Ok(v) => (Some(0), "Success".to_string(), Some(show(v))),
        Err(RawErr::Missing) => (None, "FailedToLoadSymbol".to_string(), None),
        Err(RawErr::Rc(rc)) => (
            Some(rc),
            match nvml_wrapper::error::nvml_try(rc) {
                Ok(()) => "Success".to_string(),
                Err(e) => error_kind(&e),
            },
            None,
        ),
    };
    Call {
        call: name,
        rc,
        result,
        value,
        us: None,
    }
}

/// One per-link NVLink call: how to make it.
struct LinkCall {
    make: fn(&NvmlLib, nvmlDevice_t, u32) -> Call,
}

/// `nvmlDeviceGetNvLinkErrorCounter`'s counters, as NVML numbers them.
const NVLINK_COUNTERS: &[(u32, &str)] = &[
    (0, "DL_REPLAY"),
    (1, "DL_RECOVERY"),
    (2, "DL_CRC_FLIT"),
    (3, "DL_CRC_DATA"),
    (4, "DL_ECC_DATA"),
];

const LINK_CALLS: &[LinkCall] = &[
    LinkCall {
        make: |lib, h, l| {
            call(
                format!("nvmlDeviceGetNvLinkState(link {l})"),
                raw::nvlink_state(lib, h, l),
                |a| if a { "active" } else { "inactive" }.into(),
            )
        },
    },
    LinkCall {
        make: |lib, h, l| {
            call(
                format!("nvmlDeviceGetNvLinkVersion(link {l})"),
                raw::nvlink_version(lib, h, l),
                |v| v.to_string(),
            )
        },
    },
    LinkCall {
        make: |lib, h, l| {
            call(
                format!("nvmlDeviceGetNvLinkRemotePciInfo_v2(link {l})"),
                raw::nvlink_remote_pci(lib, h, l),
                |v| v,
            )
        },
    },
    LinkCall {
        make: |lib, h, l| {
            call(
                format!("nvmlDeviceGetNvLinkRemoteDeviceType(link {l})"),
                raw::nvlink_remote_type(lib, h, l),
                |t| match t {
                    0 => "gpu".into(),
                    1 => "ibmnpu".into(),
                    2 => "switch".into(),
                    x => format!("type {x}"),
                },
            )
        },
    },
];

/// `nvmlDeviceGetMemoryErrorCounter`'s locations, as NVML numbers them.
const MEMORY_LOCATIONS: &[(u32, &str)] = &[
    (0, "L1_CACHE"),
    (1, "L2_CACHE"),
    (2, "DEVICE_MEMORY"),
    (3, "REGISTER_FILE"),
    (4, "TEXTURE_MEMORY"),
    (5, "TEXTURE_SHM"),
    (6, "CBU"),
    (7, "SRAM"),
];

/// One per-device call.
type DeviceCall = fn(&NvmlLib, nvmlDevice_t) -> Call;

/// The per-device calls the probe's health readings rest on, beside NVLink and fabric.
const DEVICE_CALLS: &[DeviceCall] = &[
    |lib, h| {
        call(
            "nvmlDeviceGetPcieReplayCounter".into(),
            raw::pcie_replay_counter(lib, h),
            |v| v.to_string(),
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceValidateInforom".into(),
            raw::validate_inforom(lib, h),
            |()| "valid".into(),
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetInforomImageVersion".into(),
            raw::inforom_image_version(lib, h),
            |v| v,
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetVbiosVersion".into(),
            raw::vbios_version(lib, h),
            |v| v,
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetGspFirmwareMode".into(),
            raw::gsp_firmware_mode(lib, h),
            |(on, default)| format!("enabled {on} default {default}"),
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetGspFirmwareVersion".into(),
            raw::gsp_firmware_version(lib, h),
            |v| v,
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetSramEccErrorStatus(v1)".into(),
            raw::sram_ecc_status(lib, h),
            |s| {
                format!(
                    "volatile cor {} unc parity {} unc secded {}; aggregate cor {} unc parity {} unc secded {}; threshold exceeded {}",
                    s.volatileCor,
                    s.volatileUncParity,
                    s.volatileUncSecDed,
                    s.aggregateCor,
                    s.aggregateUncParity,
                    s.aggregateUncSecDed,
                    s.bThresholdExceeded
                )
            },
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetRemappedRows".into(),
            raw::remapped_rows(lib, h),
            |(c, u, p, f)| format!("correctable {c} uncorrectable {u} pending {p} failure {f}"),
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetGpuFabricInfoV(v3)".into(),
            raw::fabric_info_v(lib, h, 3),
            |i| fabric_value(&i, true),
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetGpuFabricInfoV(v2)".into(),
            raw::fabric_info_v(lib, h, 2),
            |i| fabric_value(&i, true),
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetC2cModeInfoV".into(),
            raw::c2c_mode(lib, h),
            |on| format!("isC2cEnabled {}", u8::from(on)),
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetFieldValues(C2C_LINK_COUNT)".into(),
            raw::field_values(lib, h, &[(170, 0)]).and_then(|v| {
                v.into_iter()
                    .next()
                    .unwrap_or(Err(raw::RawErr::Rc(raw::RC_UNKNOWN)))
            }),
            |n| n.to_string(),
        )
    },
    |lib, h| {
        call(
            "nvmlDeviceGetGpuFabricInfo".into(),
            raw::fabric_info_v1(lib, h),
            |(state, status, clique)| format!("state {state} status {status} clique {clique}"),
        )
    },
];

fn fabric_value(i: &nvml_wrapper_sys::bindings::nvmlGpuFabricInfo_v3_t, mask: bool) -> String {
    let cluster: String = i.clusterUuid.iter().map(|b| format!("{b:02x}")).collect();
    if mask {
        format!(
            "state {} status {} clique {} health_mask 0x{:x} cluster {cluster}",
            i.state, i.status, i.cliqueId, i.healthMask
        )
    } else {
        format!(
            "state {} status {} clique {}",
            i.state, i.status, i.cliqueId
        )
    }
}

/// `NVML_FI_DEV_NVLINK_LINK_COUNT` through field values (nvml-wrapper gives the per-sample
/// error's name, not its code).
fn link_count(d: &Device<'_>) -> Call {
    let name = "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_LINK_COUNT)".to_string();
    let (result, value) = match d.field_values_for(&[FieldId(FI_NVLINK_LINK_COUNT)]) {
        Ok(v) => match v.into_iter().next() {
            Some(Ok(s)) => match s.value {
                Ok(SampleValue::U32(n)) => ("Success".to_string(), Some(n.to_string())),
                Ok(v) => ("Success".to_string(), Some(format!("{v:?}"))),
                Err(e) => (error_kind(&e), None),
            },
            Some(Err(e)) => (error_kind(&e), None),
            None => ("NoValue".to_string(), None),
        },
        Err(e) => (error_kind(&e), None),
    };
    Call {
        call: name,
        rc: value.is_some().then_some(0),
        result,
        value,
        us: None,
    }
}

/// Every call on one device.
fn device_calls(nvml: &Nvml, d: &Device<'_>) -> Vec<Call> {
    let lib = nvml.lib();
    let h = raw::handle(d);
    let mut out = vec![timed(|| link_count(d))];
    for l in 0..NVLINK_MAX_LINKS {
        out.extend(LINK_CALLS.iter().map(|c| timed(|| (c.make)(lib, h, l))));
        out.extend(NVLINK_COUNTERS.iter().map(|(counter, name)| {
            timed(|| {
                call(
                    format!("nvmlDeviceGetNvLinkErrorCounter(link {l}, {name})"),
                    raw::nvlink_error_counter(lib, h, l, *counter),
                    |v| v.to_string(),
                )
            })
        }));
    }
    out.extend(DEVICE_CALLS.iter().map(|c| timed(|| c(lib, h))));
    for (loc, loc_name) in MEMORY_LOCATIONS {
        for (error, e_name) in [(0, "CORRECTED"), (1, "UNCORRECTED")] {
            for (counter, c_name) in [(0, "VOLATILE"), (1, "AGGREGATE")] {
                out.push(timed(|| {
                    call(
                        format!("nvmlDeviceGetMemoryErrorCounter({e_name}, {c_name}, {loc_name})"),
                        raw::memory_error_counter(lib, h, error, counter, *loc),
                        |v| v.to_string(),
                    )
                }));
            }
        }
    }
    out
}

/// `gpuhost nvml-calls`.
pub(crate) fn report() -> CallsReport {
    let cuda = crate::cuda::check();
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            return CallsReport {
                init: error_kind(&e),
                driver_version: None,
                device_count: None,
                cuda,
                gpus: Vec::new(),
            }
        }
    };
    let mut r = CallsReport {
        init: "Success".into(),
        driver_version: nvml.sys_driver_version().ok(),
        device_count: nvml.device_count().ok(),
        cuda,
        gpus: Vec::new(),
    };
    for i in 0..r.device_count.unwrap_or(0) {
        r.gpus.push(match nvml.device_by_index(i) {
            Ok(d) => GpuCalls {
                index: i,
                uuid: d.uuid().ok(),
                pci_bus_id: d.pci_info().ok().map(|p| p.bus_id),
                calls: device_calls(&nvml, &d),
            },
            Err(e) => GpuCalls {
                index: i,
                uuid: None,
                pci_bus_id: None,
                calls: vec![Call {
                    call: "nvmlDeviceGetHandleByIndex".into(),
                    rc: None,
                    result: error_kind(&e),
                    value: None,
                    us: None,
                }],
            },
        });
    }
    r
}
