//! NVML calls that nvml-wrapper does not wrap (or whose raw return code we want), each a small
//! safe function over `nvml.lib()` and a live device handle. The probe turns their answers into
//! readings; `gpuhost nvml-calls` prints their raw return codes as evidence of what a
//! machine supports. Never called with a null handle: libnvidia-ml segfaults on one.

use std::os::raw::c_char;

use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{
    nvmlC2cModeInfo_v1_t, nvmlDevice_t, nvmlEccSramErrorStatus_t, nvmlFieldValue_t,
    nvmlGpuFabricInfo_t, nvmlGpuFabricInfo_v2_t, nvmlGpuFabricInfo_v3_t, nvmlPciInfo_t,
    nvmlValue_t, NvmlLib, NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE,
    NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE,
};

/// Why a raw call gave no value: the symbol is not in this libnvidia-ml, or NVML's return code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawErr {
    Missing,
    Rc(u32),
}

pub(crate) type Raw<T> = Result<T, RawErr>;

/// `NVML_ERROR_CORRUPTED_INFOROM`.
pub(crate) const RC_CORRUPTED_INFOROM: u32 = 14;
/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`.
pub(crate) const RC_VERSION_MISMATCH: u32 = 25;

fn ok<T>(rc: u32, v: impl FnOnce() -> T) -> Raw<T> {
    if rc == 0 {
        Ok(v())
    } else {
        Err(RawErr::Rc(rc))
    }
}

/// A NUL-terminated C string from a buffer NVML filled.
pub(crate) fn c_str(bytes: &[c_char]) -> String {
    let b: Vec<u8> = bytes
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// The raw handle of a device of this `Nvml`: live, never null.
pub(crate) fn handle(d: &Device<'_>) -> nvmlDevice_t {
    // SAFETY: the handle comes from a live `Device`; it is only passed back to the library
    // that made it while that device (and so the `Nvml`) is borrowed.
    unsafe { d.handle() }
}

// SAFETY (every `unsafe` call below): `h` is a live device handle from `handle()`; every out
// pointer points at a local that outlives the call, sized as the library expects.

pub(crate) fn nvlink_state(lib: &NvmlLib, h: nvmlDevice_t, link: u32) -> Raw<bool> {
    let f = lib
        .nvmlDeviceGetNvLinkState
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut st = 0u32;
    let rc = unsafe { f(h, link, &mut st) };
    ok(rc, || st == 1)
}

pub(crate) fn nvlink_version(lib: &NvmlLib, h: nvmlDevice_t, link: u32) -> Raw<u32> {
    let f = lib
        .nvmlDeviceGetNvLinkVersion
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut v = 0u32;
    let rc = unsafe { f(h, link, &mut v) };
    ok(rc, || v)
}

pub(crate) fn nvlink_remote_pci(lib: &NvmlLib, h: nvmlDevice_t, link: u32) -> Raw<String> {
    let f = lib
        .nvmlDeviceGetNvLinkRemotePciInfo_v2
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut pci = nvmlPciInfo_t {
        busIdLegacy: [0; 16],
        domain: 0,
        bus: 0,
        device: 0,
        pciDeviceId: 0,
        pciSubSystemId: 0,
        busId: [0; 32],
    };
    let rc = unsafe { f(h, link, &mut pci) };
    ok(rc, || {
        format!("{} device 0x{:08x}", c_str(&pci.busId), pci.pciDeviceId)
    })
}

pub(crate) fn nvlink_remote_type(lib: &NvmlLib, h: nvmlDevice_t, link: u32) -> Raw<u32> {
    let f = lib
        .nvmlDeviceGetNvLinkRemoteDeviceType
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut t = 0u32;
    let rc = unsafe { f(h, link, &mut t) };
    ok(rc, || t)
}

pub(crate) fn nvlink_error_counter(
    lib: &NvmlLib,
    h: nvmlDevice_t,
    link: u32,
    counter: u32,
) -> Raw<u64> {
    let f = lib
        .nvmlDeviceGetNvLinkErrorCounter
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut v = 0u64;
    let rc = unsafe { f(h, link, counter, &mut v) };
    ok(rc, || v)
}

/// `nvmlDeviceGetGpuFabricInfoV` with the struct version `ver` (3 has the health mask; 2 is
/// its prefix). The answer is always laid out as v3.
pub(crate) fn fabric_info_v(
    lib: &NvmlLib,
    h: nvmlDevice_t,
    ver: u32,
) -> Raw<nvmlGpuFabricInfo_v3_t> {
    let f = lib
        .nvmlDeviceGetGpuFabricInfoV
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let size = if ver >= 3 {
        std::mem::size_of::<nvmlGpuFabricInfo_v3_t>()
    } else {
        std::mem::size_of::<nvmlGpuFabricInfo_v2_t>()
    };
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
    ok(rc, || info)
}

/// `nvmlDeviceGetC2cModeInfoV`: whether the GPU's chip-to-chip link (NVLink-C2C, the Grace
/// CPU's coherent link on a GH200/GB200/GB300 superchip) is enabled. Its v1 struct carries no
/// version field (nvml.h: `typedef struct { unsigned int isC2cEnabled; } nvmlC2cModeInfo_v1_t`).
/// NOT_SUPPORTED on a GPU without C2C (an H200 on PCIe).
pub(crate) fn c2c_mode(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<bool> {
    let f = lib
        .nvmlDeviceGetC2cModeInfoV
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut info = nvmlC2cModeInfo_v1_t { isC2cEnabled: 0 };
    let rc = unsafe { f(h, &mut info) };
    ok(rc, || info.isC2cEnabled != 0)
}

/// `nvmlDeviceGetFieldValues` for `(field id, scope id)` pairs (the scope is the link of a
/// per-link field), each with its own return code; the value as an integer whatever its type.
pub(crate) fn field_values(
    lib: &NvmlLib,
    h: nvmlDevice_t,
    ids: &[(u32, u32)],
) -> Raw<Vec<Raw<u64>>> {
    let f = lib
        .nvmlDeviceGetFieldValues
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut values: Vec<nvmlFieldValue_t> = ids
        .iter()
        .map(|&(field, scope)| nvmlFieldValue_t {
            fieldId: field,
            scopeId: scope,
            timestamp: 0,
            latencyUsec: 0,
            valueType: 0,
            nvmlReturn: 0,
            value: nvmlValue_t { ullVal: 0 },
        })
        .collect();
    let count = i32::try_from(values.len()).map_err(|_| RawErr::Rc(2))?;
    let rc = unsafe { f(h, count, values.as_mut_ptr()) };
    ok(rc, || values.iter().map(field_value).collect())
}

/// One field's answer as an integer (NVML's `nvmlValueType_t` says which union member it set).
fn field_value(v: &nvmlFieldValue_t) -> Raw<u64> {
    if v.nvmlReturn != 0 {
        return Err(RawErr::Rc(v.nvmlReturn));
    }
    // SAFETY: NVML set the union member named by valueType.
    let x = unsafe {
        match v.valueType {
            0 => v.value.dVal as u64,
            1 => u64::from(v.value.uiVal),
            2 => v.value.ulVal,
            3 => v.value.ullVal,
            4 => u64::try_from(v.value.sllVal).unwrap_or(0),
            5 => u64::try_from(v.value.siVal).unwrap_or(0),
            6 => u64::from(v.value.usVal),
            _ => return Err(RawErr::Rc(RC_UNKNOWN)),
        }
    };
    Ok(x)
}

/// `NVML_ERROR_UNKNOWN`.
pub(crate) const RC_UNKNOWN: u32 = 999;

/// `nvmlDeviceGetGpuFabricInfo` (v1): state, status, clique.
pub(crate) fn fabric_info_v1(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<(u8, u32, u32)> {
    let f = lib
        .nvmlDeviceGetGpuFabricInfo
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut info = nvmlGpuFabricInfo_t {
        clusterUuid: [0; 16],
        status: 0,
        cliqueId: 0,
        state: 0,
    };
    let rc = unsafe { f(h, &mut info) };
    ok(rc, || (info.state, info.status, info.cliqueId))
}

/// `nvmlDeviceGetRemappedRows`: (correctable, uncorrectable, pending, failure).
pub(crate) fn remapped_rows(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<(u32, u32, bool, bool)> {
    let f = lib
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    let rc = unsafe { f(h, &mut corr, &mut unc, &mut pending, &mut failure) };
    ok(rc, || (corr, unc, pending != 0, failure != 0))
}

/// `nvmlDeviceGetPcieReplayCounter`: PCIe replays since the driver loaded.
pub(crate) fn pcie_replay_counter(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<u32> {
    let f = lib
        .nvmlDeviceGetPcieReplayCounter
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut v = 0u32;
    let rc = unsafe { f(h, &mut v) };
    ok(rc, || v)
}

/// `nvmlDeviceValidateInforom`: SUCCESS (valid) or `NVML_ERROR_CORRUPTED_INFOROM`.
pub(crate) fn validate_inforom(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<()> {
    let f = lib
        .nvmlDeviceValidateInforom
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let rc = unsafe { f(h) };
    ok(rc, || ())
}

/// `nvmlDeviceGetInforomImageVersion`.
pub(crate) fn inforom_image_version(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<String> {
    let f = lib
        .nvmlDeviceGetInforomImageVersion
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut buf = [0 as c_char; NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE as usize];
    let rc = unsafe { f(h, buf.as_mut_ptr(), NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE) };
    ok(rc, || c_str(&buf))
}

/// `nvmlDeviceGetVbiosVersion`.
pub(crate) fn vbios_version(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<String> {
    let f = lib
        .nvmlDeviceGetVbiosVersion
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut buf = [0 as c_char; NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE as usize];
    let rc = unsafe { f(h, buf.as_mut_ptr(), NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE) };
    ok(rc, || c_str(&buf))
}

/// `nvmlDeviceGetGspFirmwareMode`: (enabled, enabled by default).
pub(crate) fn gsp_firmware_mode(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<(bool, bool)> {
    let f = lib
        .nvmlDeviceGetGspFirmwareMode
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let (mut enabled, mut default) = (0u32, 0u32);
    let rc = unsafe { f(h, &mut enabled, &mut default) };
    ok(rc, || (enabled != 0, default != 0))
}

/// `nvmlDeviceGetGspFirmwareVersion`.
pub(crate) fn gsp_firmware_version(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<String> {
    let f = lib
        .nvmlDeviceGetGspFirmwareVersion
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut buf = [0 as c_char; NVML_GSP_FIRMWARE_VERSION_BUF_SIZE as usize];
    let rc = unsafe { f(h, buf.as_mut_ptr()) };
    ok(rc, || c_str(&buf))
}

/// `nvmlDeviceGetSramEccErrorStatus` (v1): SRAM ECC counts and the SRAM threshold flag.
pub(crate) fn sram_ecc_status(lib: &NvmlLib, h: nvmlDevice_t) -> Raw<nvmlEccSramErrorStatus_t> {
    let f = lib
        .nvmlDeviceGetSramEccErrorStatus
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut st = nvmlEccSramErrorStatus_t {
        version: u32::try_from(std::mem::size_of::<nvmlEccSramErrorStatus_t>()).unwrap_or(0)
            | (1 << 24),
        aggregateUncParity: 0,
        aggregateUncSecDed: 0,
        aggregateCor: 0,
        volatileUncParity: 0,
        volatileUncSecDed: 0,
        volatileCor: 0,
        aggregateUncBucketL2: 0,
        aggregateUncBucketSm: 0,
        aggregateUncBucketPcie: 0,
        aggregateUncBucketMcu: 0,
        aggregateUncBucketOther: 0,
        bThresholdExceeded: 0,
    };
    let rc = unsafe { f(h, &mut st) };
    ok(rc, || st)
}

/// `nvmlDeviceGetMemoryErrorCounter(error, counter, location)`: error 0 corrected,
/// 1 uncorrected; counter 0 volatile, 1 aggregate; location 2 device memory (DRAM), 7 SRAM, ….
pub(crate) fn memory_error_counter(
    lib: &NvmlLib,
    h: nvmlDevice_t,
    error: u32,
    counter: u32,
    location: u32,
) -> Raw<u64> {
    let f = lib
        .nvmlDeviceGetMemoryErrorCounter
        .as_ref()
        .map_err(|_| RawErr::Missing)?;
    let mut v = 0u64;
    let rc = unsafe { f(h, error, counter, location, &mut v) };
    ok(rc, || v)
}
