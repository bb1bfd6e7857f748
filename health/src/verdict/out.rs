//! What the judges share: the list they push checks into ([`Out`]), a verdict's shape
//! ([`Verdict`]) and its usual forms, and the PCI address forms they compare.

use super::model::{Check, GpuRef, Severity};
use crate::kmsg::normalise_pci;

/// A verdict: severity, the value seen (for people), and what to do when not OK.
pub(crate) type Verdict = (Severity, String, Option<String>);

pub(super) struct Out {
    pub(super) checks: Vec<Check>,
}

impl Out {
    pub(super) fn push(
        &mut self,
        id: &str,
        group: &str,
        gpu: Option<&GpuRef>,
        severity: Severity,
        value: impl Into<String>,
        hint: Option<String>,
    ) {
        self.checks.push(Check {
            id: id.to_string(),
            group: group.to_string(),
            gpu: gpu.cloned(),
            severity,
            value: value.into(),
            hint: if matches!(severity, Severity::Ok | Severity::NotApplicable) {
                None
            } else {
                hint
            },
        });
    }

    /// Push a check whose answer is one [`Verdict`].
    pub(super) fn say(&mut self, id: &str, group: &str, gpu: Option<&GpuRef>, verdict: Verdict) {
        let (severity, value, hint) = verdict;
        self.push(id, group, gpu, severity, value, hint);
    }
}

/// Not applicable here, with what was seen.
pub(super) fn na(value: impl Into<String>) -> Verdict {
    (Severity::NotApplicable, value.into(), None)
}

/// OK, with what was seen.
pub(super) fn ok(value: impl Into<String>) -> Verdict {
    (Severity::Ok, value.into(), None)
}

/// A finding of `severity`, with what was seen and what to do.
pub(super) fn advise(
    severity: Severity,
    value: impl Into<String>,
    hint: impl Into<String>,
) -> Verdict {
    (severity, value.into(), Some(hint.into()))
}

/// sysfs `0000:3b:00.0` → NVML `00000000:3B:00.0`.
pub(crate) fn nvml_bus_id(sysfs: &str) -> String {
    match sysfs.split_once(':') {
        Some((dom, rest)) => format!("0000{dom}:{}", rest.to_uppercase()),
        None => sysfs.to_uppercase(),
    }
}

pub(super) fn key(addr: &str) -> String {
    normalise_pci(addr).unwrap_or_else(|| addr.to_lowercase())
}

/// A CUDA driver version as NVML and `cuDriverGetVersion` give it (12040) as (major, minor):
/// (12, 4).
pub(super) fn cuda_major_minor(v: i32) -> (i32, i32) {
    (v / 1000, (v % 1000) / 10)
}
