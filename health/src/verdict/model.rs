//! The verdicts' model: a [`Check`] and its [`Severity`], the GPU it is about ([`GpuRef`]),
//! what the node should have ([`Expect`], [`Thresholds`], [`MinFree`]), and the worst of a
//! report ([`overall`]).

use serde::{Deserialize, Serialize};

/// A check's verdict. Ordered from best to worst: a CRITICAL finding is never hidden by a
/// check that could not run, and a check that could not run outranks a warning (what it
/// could not see may be worse).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Severity {
    /// Not applicable here (NOT_SUPPORTED, no such device): counts as OK.
    #[serde(rename = "N/A")]
    NotApplicable,
    #[serde(rename = "OK")]
    Ok,
    #[serde(rename = "WARNING")]
    Warning,
    #[serde(rename = "UNKNOWN")]
    Unknown,
    #[serde(rename = "CRITICAL")]
    Critical,
}

impl Severity {
    /// Nagios exit code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    pub fn exit_code(self) -> i32 {
        match self {
            Severity::NotApplicable | Severity::Ok => 0,
            Severity::Warning => 1,
            Severity::Critical => 2,
            Severity::Unknown => 3,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Severity::NotApplicable => "n/a",
            Severity::Ok => "OK",
            Severity::Warning => "WARNING",
            Severity::Unknown => "UNKNOWN",
            Severity::Critical => "CRITICAL",
        }
    }
}

/// Which GPU (or NVSwitch) a check is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRef {
    /// NVML index, when NVML knows the device.
    pub index: Option<u32>,
    pub uuid: Option<String>,
    /// NVML form, `00000000:3B:00.0`.
    pub pci_bus_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Stable id, e.g. `gpu.ecc.volatile_uncorrected`.
    pub id: String,
    /// Table group, e.g. `ecc`.
    pub group: String,
    pub gpu: Option<GpuRef>,
    pub severity: Severity,
    /// What was seen, for people.
    pub value: String,
    /// What to do, when not OK.
    pub hint: Option<String>,
}

/// What the node should have, from `--expect-gpus` and the profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Expect {
    pub gpus: Option<u32>,
    /// Where `gpus` came from (`--expect-gpus`, `profile ol8-uek`).
    pub gpus_source: Option<String>,
    pub driver_version: Option<String>,
    pub driver_source: Option<String>,
    /// The profile could not be loaded.
    pub profile_error: Option<String>,
    /// Docker and its nvidia runtime are checked; None means true (profile
    /// `status.require_docker`).
    #[serde(default)]
    pub require_docker: Option<bool>,
    /// nvidia-fabricmanager must run at the driver's version; None means "when NVSwitches are
    /// on PCI" (profile `status.require_fabric_manager`).
    #[serde(default)]
    pub require_fabric_manager: Option<bool>,
    /// ECC, PCIe and NVLink thresholds (profile `status.*`, else the defaults).
    #[serde(default)]
    pub thresholds: Thresholds,
    /// Free-space floors (GiB) under which `host.space.*` warns (profile `status.min_free_*_gib`).
    #[serde(default)]
    pub min_free_gib: MinFree,
}

/// Free-space floors in GiB for `/`, `/var`, Docker's data-root and /var/lib/dkms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MinFree {
    pub root: f64,
    pub var: f64,
    pub docker: f64,
    pub dkms: f64,
}

impl Default for MinFree {
    fn default() -> Self {
        MinFree {
            root: 2.0,
            var: 2.0,
            docker: 10.0,
            dkms: 1.0,
        }
    }
}

/// Thresholds of the counter checks, named in their messages; the defaults are Azure's AzNHC
/// (`customTests/azure_gpu_ecc.nhc`, `check_gpu_ecc 20000000 10000` in its H100/H200 configs)
/// and DCGM's health watches (`dcgm_gpu_hardware_limits.h`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub ecc_sram_correctable_max: u64,
    pub ecc_sram_uncorrectable_max: u64,
    pub ecc_dram_max: u64,
    pub pcie_replays_per_minute_max: f64,
    pub nvlink_crc_errors_per_second_max: f64,
    pub nvlink_replay_recovery_per_minute_max: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            ecc_sram_correctable_max: 10_000,
            ecc_sram_uncorrectable_max: 0,
            ecc_dram_max: 20_000_000,
            pcie_replays_per_minute_max: 8.0,
            nvlink_crc_errors_per_second_max: 100.0,
            nvlink_replay_recovery_per_minute_max: 0.0,
        }
    }
}

impl MinFree {
    /// The defaults with the profile's `status.min_free_*_gib` keys over them.
    pub(crate) fn from_profile(st: &gpuhost_profile::StatusSpec) -> MinFree {
        let d = MinFree::default();
        MinFree {
            root: st.min_free_root_gib.unwrap_or(d.root),
            var: st.min_free_var_gib.unwrap_or(d.var),
            docker: st.min_free_docker_gib.unwrap_or(d.docker),
            dkms: st.min_free_dkms_gib.unwrap_or(d.dkms),
        }
    }
}

impl Thresholds {
    /// The defaults with the profile's `status.*` keys over them.
    pub(crate) fn from_profile(st: &gpuhost_profile::StatusSpec) -> Thresholds {
        let d = Thresholds::default();
        Thresholds {
            ecc_sram_correctable_max: st
                .ecc_sram_correctable_max
                .unwrap_or(d.ecc_sram_correctable_max),
            ecc_sram_uncorrectable_max: st
                .ecc_sram_uncorrectable_max
                .unwrap_or(d.ecc_sram_uncorrectable_max),
            ecc_dram_max: st.ecc_dram_max.unwrap_or(d.ecc_dram_max),
            pcie_replays_per_minute_max: st
                .pcie_replays_per_minute_max
                .unwrap_or(d.pcie_replays_per_minute_max),
            nvlink_crc_errors_per_second_max: st
                .nvlink_crc_errors_per_second_max
                .unwrap_or(d.nvlink_crc_errors_per_second_max),
            nvlink_replay_recovery_per_minute_max: st
                .nvlink_replay_recovery_per_minute_max
                .unwrap_or(d.nvlink_replay_recovery_per_minute_max),
        }
    }
}

/// The driver version a local repo RPM's file name carries, for either of NVIDIA's kinds:
/// `cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm` → `535.104.05`,
/// `nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm` → `570.124.06`.
pub fn driver_version_from_rpm(file_name: &str) -> Option<String> {
    gpuhost_nvidia::localrepo::LocalRepoFile::parse(file_name).map(|f| f.driver)
}

/// The worst severity (N/A and OK count the same).
pub fn overall(checks: &[Check]) -> Severity {
    checks
        .iter()
        .map(|c| c.severity)
        .max()
        .map(|s| {
            if s == Severity::NotApplicable {
                Severity::Ok
            } else {
                s
            }
        })
        .unwrap_or(Severity::Ok)
}
