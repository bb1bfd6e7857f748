//! The verdicts' model: a [`Check`] and its [`Severity`], the GPU it is about ([`GpuRef`]),
//! what the judge hands the renderers ([`Judgement`]: the checks and each GPU's XIDs as it
//! counted them, [`GpuXids`]), and the worst of a report ([`overall`]). What the node should
//! have is `crate::expect`'s.

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

/// What the judge found in a snapshot: the checks, in the report's order, and what it counted
/// while judging that a renderer exports beside them, so that no renderer judges again.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judgement {
    pub checks: Vec<Check>,
    /// The XIDs of each GPU NVML sees, when the kernel log was read (none when it was not, nor
    /// for a GPU without a PCI address to match its XIDs by).
    pub xids: Vec<GpuXids>,
    /// The active checks' figures, each with the floor and reference it was judged against
    /// (empty without `--active`).
    pub active: Vec<ActiveFigure>,
}

/// One GPU's XIDs since boot or its last reset, as the judge counted them: what the Prometheus
/// text exports (`gpuhost_gpu_xid_events`, `gpuhost_gpu_xid_action_events`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuXids {
    /// NVML's index of the GPU.
    pub index: u32,
    /// Its XIDs since boot or its last reset.
    pub events: usize,
    /// The same XIDs counted by the immediate action each was judged to ask for (`RESET_GPU`,
    /// `RESTART_BM`, …), sorted, so that an alert can pick those that want a reset or a reboot.
    pub actions: Vec<(String, usize)>,
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

/// One measured figure with what it was judged against, for the renderers.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveFigure {
    pub gpu: GpuRef,
    /// `hbm_copy`, `hbm_memcpy`, `hbm_integrity`, `pcie_h2d`, `pcie_d2h`, `fp32`, `fp64`, `p2p`.
    pub figure: &'static str,
    /// Bytes per second, or floating-point operations per second.
    pub value: f64,
    /// The floor it was judged against, same unit; None: not judged.
    pub floor: Option<f64>,
    /// The model's peak (or the link's rate), same unit.
    pub reference: Option<f64>,
    /// The peer, for `p2p`.
    pub peer: Option<String>,
    /// The PCI device ID, as `0x2335`.
    pub model: Option<String>,
    pub conditions: gpuhost_active::Conditions,
}
