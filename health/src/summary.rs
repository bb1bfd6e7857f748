//! The one line that names a verdict and the check behind it, in the shapes fleets consume:
//! Kubernetes node-problem-detector's custom-plugin protocol (`--format npd`), Slurm's drain
//! reason (`status::slurm`) and the provisioning gate's progress (`status::gate`).

use crate::verdict::{Check, Severity};

/// The check that decides the verdict: the first of the worst severity (None when every
/// check is OK or n/a).
pub(crate) fn worst(checks: &[Check]) -> Option<&Check> {
    let top = checks.iter().map(|c| c.severity).max()?;
    if top <= Severity::Ok {
        return None;
    }
    checks.iter().find(|c| c.severity == top)
}

/// `gpu3` or `host`: where a check was made.
pub(crate) fn place(c: &Check) -> String {
    match &c.gpu {
        Some(g) => match g.index {
            Some(i) => format!("gpu{i}"),
            None => format!("pci {}", g.pci_bus_id.to_lowercase()),
        },
        None => "host".into(),
    }
}

/// One line naming the verdict and the check behind it: `CRITICAL gpu3
/// gpu.ecc.volatile_uncorrected: 2 uncorrectable ECC error(s) since the driver loaded`.
pub(crate) fn one_line(checks: &[Check]) -> String {
    let verdict = crate::verdict::overall(checks);
    match worst(checks) {
        Some(c) => format!("{} {} {}: {}", verdict.label(), place(c), c.id, c.value),
        None => format!("{}: {} checks passed", verdict.label(), checks.len()),
    }
}

/// node-problem-detector's custom plugins answer with an exit code and at most
/// `max_output_length` bytes of stdout (80 by default).
pub(crate) const NPD_MAX_OUTPUT: usize = 80;

/// NPD's custom-plugin protocol: exit 0 OK, 1 a problem, 2 unknown, and a short message.
/// OK and WARNING are 0 (a WARNING does not make the node unfit: it is in the message);
/// CRITICAL is 1; UNKNOWN (a check that could not be made) is 2.
pub(crate) fn npd(checks: &[Check]) -> (i32, String) {
    let verdict = crate::verdict::overall(checks);
    let code = match verdict {
        Severity::Ok | Severity::NotApplicable | Severity::Warning => 0,
        Severity::Critical => 1,
        Severity::Unknown => 2,
    };
    (code, truncate(&one_line(checks), NPD_MAX_OUTPUT))
}

/// At most `max` bytes, cut at a character boundary, "…" marking a cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Whether a verdict lets the node take work: OK or WARNING (as `/healthz` says 200).
pub(crate) fn healthy(s: Severity) -> bool {
    matches!(
        s,
        Severity::Ok | Severity::NotApplicable | Severity::Warning
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::verdict::GpuRef;

    fn check(id: &str, sev: Severity, gpu: Option<u32>) -> Check {
        Check {
            id: id.into(),
            group: "g".into(),
            gpu: gpu.map(|i| GpuRef {
                index: Some(i),
                uuid: None,
                pci_bus_id: "00000000:3B:00.0".into(),
            }),
            severity: sev,
            value: format!("{id} value"),
            hint: None,
        }
    }

    #[test]
    fn npd_codes_follow_the_custom_plugin_protocol() {
        let ok = [
            check("a", Severity::Ok, None),
            check("b", Severity::NotApplicable, None),
        ];
        assert_eq!(npd(&ok), (0, "OK: 2 checks passed".into()));
        let warn = [
            check("a", Severity::Ok, None),
            check("w", Severity::Warning, Some(1)),
        ];
        assert_eq!(npd(&warn), (0, "WARNING gpu1 w: w value".into()));
        let crit = [
            check("u", Severity::Unknown, None),
            check("gpu.ecc.volatile_uncorrected", Severity::Critical, Some(3)),
        ];
        let (code, msg) = npd(&crit);
        assert_eq!(code, 1);
        assert!(
            msg.starts_with("CRITICAL gpu3 gpu.ecc.volatile_uncorrected: "),
            "{msg}"
        );
        assert!(msg.len() <= NPD_MAX_OUTPUT, "{msg}");
        assert_eq!(npd(&[check("u", Severity::Unknown, None)]).0, 2);
    }

    #[test]
    fn truncation_keeps_utf8_and_marks_the_cut() {
        assert_eq!(truncate("short", 80), "short");
        let long = "é".repeat(60);
        let t = truncate(&long, 80);
        assert!(t.len() <= 80 && t.ends_with('…'), "{t}");
    }
}
