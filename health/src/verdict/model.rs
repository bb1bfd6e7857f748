//! The verdicts' model: a [`Check`] and its [`Severity`], the GPU it is about ([`GpuRef`]),
//! and the worst of a report ([`overall`]). What the node should have is `crate::expect`'s.

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
