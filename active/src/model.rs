//! What the active checks measured: the report the child prints as one line of JSON, and that
//! `gpuhost status` judges (gpuhost-health `verdict::active`), keeps and serves. Figures only:
//! no verdict is taken here, so a report captured on a real GPU is a fixture for the judge.

use serde::{Deserialize, Serialize};

/// The report's schema version.
pub const SCHEMA: u32 = 1;

/// One run of the active checks over every GPU of the node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ActiveReport {
    pub schema: u32,
    /// Unix time the run started, s.
    pub started_at: u64,
    /// Wall time of the whole run in the child, ms (driver load and context creation included).
    pub wall_ms: f64,
    /// The time limit the run was given, s.
    pub limit_s: f64,
    /// `cuDriverGetVersion` (12080 for CUDA 12.8).
    pub cuda_driver_version: Option<i32>,
    /// NVML's driver version (`580.95.05`).
    pub driver_version: Option<String>,
    /// Why no GPU could be checked at all (no libcuda, cuInit failed, no GPU).
    pub error: Option<String>,
    /// The run was cut short: `SIGTERM`, `SIGINT` or `time limit`; what had not finished is
    /// absent from the GPUs' figures.
    pub stopped: Option<String>,
    /// Contexts, device and pinned buffers, streams, events and modules still held when the
    /// report was written: 0 (everything freed, on every path).
    pub live_at_exit: i64,
    /// The child's peak resident memory, KiB.
    pub peak_rss_kib: Option<u64>,
    /// A test run's injected fault (`hbm`, `fp32`, …): the figures are meant to fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<String>,
    pub gpus: Vec<GpuActive>,
    /// Copies between every ordered pair of GPUs (none on a one-GPU node, unless a test asked
    /// for the GPU to itself).
    #[serde(default)]
    pub p2p: Vec<PeerCopy>,
}

/// Why a GPU was not touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Skip {
    /// Compute processes run on it (and no `--force`).
    Busy,
    /// MIG mode is enabled: the whole-GPU checks do not apply.
    Mig,
    /// The time limit or a signal came before its turn.
    Stopped,
}

/// One GPU's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuActive {
    /// CUDA's ordinal (not always NVML's index).
    pub cuda_ordinal: i32,
    /// NVML form: `00000000:3B:00.0`.
    pub pci_bus_id: String,
    pub name: String,
    /// PCI device ID (0x2335 for H200 SXM), from NVML: the key of the reference table.
    pub pci_device_id: Option<u16>,
    pub uuid: Option<String>,
    pub sms: u32,
    pub compute_capability: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Skip>,
    /// Why it was skipped, or why a check could not run (not a verdict on the GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What does not change during the run.
    pub setting: Setting,
    /// The GPU's NUMA node (sysfs), which its thread and pinned host memory were bound to;
    /// None where the kernel gives none (one node, or not said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    pub hbm: Option<HbmBandwidth>,
    pub integrity: Option<HbmIntegrity>,
    pub pcie: Option<Pcie>,
    #[serde(default)]
    pub compute: Vec<Compute>,
    /// This GPU's time in the run, ms.
    pub ms: f64,
}

/// The GPU's settings during the run (read, never changed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    pub ecc_enabled: Option<bool>,
    pub power_limit_mw: Option<u32>,
    pub pcie_gen_max: Option<u32>,
    pub pcie_width_max: Option<u32>,
    pub persistence_mode: Option<bool>,
}

/// What NVML read while a figure was measured (sampled every 10 ms): the conditions that make
/// figures comparable across a fleet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    pub samples: u32,
    /// Median over the window.
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    /// Highest over the window.
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    /// Every clock event reason seen in the window (NVML's bits, OR-ed).
    pub clock_event_reasons: Option<u64>,
    /// The PCIe link at its best over the window (it idles at a lower generation).
    pub pcie_gen: Option<u32>,
    pub pcie_width: Option<u32>,
}

/// HBM bandwidth: gpuhost's copy kernel against the driver's `cuMemcpyDtoD`, same buffers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HbmBandwidth {
    /// Each buffer's size.
    pub buffer_bytes: u64,
    pub iterations: u32,
    /// Best of the timed iterations, counting bytes read and written, GB/s (10^9).
    pub kernel_gbps: f64,
    pub dtod_gbps: f64,
    pub ms: f64,
    pub conditions: Conditions,
}

/// HBM integrity: address-in-address and its inverse over most of the free memory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HbmIntegrity {
    /// Free memory when the check began (after gpuhost's own context).
    pub free_bytes: u64,
    pub tested_bytes: u64,
    pub patterns: Vec<String>,
    /// Words that read back wrong, all patterns together.
    pub errors: u64,
    /// The lowest device address that read back wrong.
    pub first_bad_address: Option<u64>,
    /// Bytes written and read per second, GB/s.
    pub gbps: f64,
    pub ms: f64,
    pub conditions: Conditions,
}

/// Pinned host ↔ device copies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pcie {
    pub bytes: u64,
    /// Median of the timed copies, GB/s.
    pub h2d_gbps: f64,
    pub d2h_gbps: f64,
    pub h2d_samples: Vec<f64>,
    pub d2h_samples: Vec<f64>,
    pub ms: f64,
    pub conditions: Conditions,
}

/// A known-answer compute kernel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Compute {
    /// `fma32`, `fma64` (exact integer chains: rate and answer), `mix32`, `mix64` (rounding
    /// chains checked against the host's own fused multiply-add).
    pub kernel: String,
    /// `fp32` or `fp64`.
    pub precision: String,
    pub threads: u64,
    pub iterations: u32,
    /// Results compared, and how many differed from the known answer.
    pub results: u64,
    pub mismatches: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_mismatch: Option<Mismatch>,
    /// Floating-point operations per second, 10^12 (the rate kernels only).
    pub tflops: Option<f64>,
    pub ms: f64,
    pub conditions: Conditions,
}

/// The first result that was not the known answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    /// Index of the result (thread, and chain for the rate kernels: chain * threads + thread).
    pub index: u64,
    /// The bits expected and read, as hex.
    pub expected: String,
    pub got: String,
}

/// Copies from one GPU to another.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerCopy {
    pub from: String,
    pub to: String,
    /// The GPUs reach each other directly (`cuDeviceCanAccessPeer`): NVLink or PCIe peer to
    /// peer; else the driver copies through host memory.
    pub peer_access: bool,
    pub bytes: u64,
    /// Median, GB/s.
    pub gbps: f64,
    pub ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
