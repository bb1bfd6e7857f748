//! XID and SXid events from the kernel log, judged with NVIDIA's Xid catalog
//! ([`super::xid_catalog`]).
//!
//! Each XID found for a GPU is named (mnemonic) and given the catalog's immediate action; the
//! verdict follows that resolution bucket (IGNORE OK; RESTART_APP, CHECK_UVM WARNING;
//! RESET_GPU, RESTART_BM, CONTACT_SUPPORT and the other recovery buckets CRITICAL). XIDs
//! 144–150 are decoded with the catalog's sub-code table, XID 154 by the recovery action it
//! names. Only XIDs of the GPU's current initialisation count: the kernel log is this boot's,
//! and XIDs logged before the driver's last `NVRM: GPU at PCI:…` line for the GPU come from
//! before a reset (or a driver reload) and are listed, not judged again. Volta and older GPUs
//! are outside the catalog: NVIDIA's older Xid page names them, and DCGM's health-watch XIDs
//! are CRITICAL there, application faults OK, the rest a WARNING.

use super::model::{GpuRef, GpuXids, Severity};
use super::out::{key, nvml_bus_id, Out};
use super::xid_catalog::{self as catalog, XidEntry};
use crate::kmsg::normalise_pci;
use crate::snapshot::{GpuSnapshot, PciDevice, PciKind, Snapshot, SxidEvent, XidEvent};

/// Volta and older: XIDs that DCGM's health watches treat as failures.
const OLDER_CRITICAL: &[u32] = &[48, 74, 79, 94, 95, 119, 120, 140];
/// Volta and older: XIDs the older page attributes to applications.
const OLDER_APPLICATION: &[u32] = &[13, 31, 43, 45, 68, 69];

/// Which of the catalog's "Applies to" columns a GPU falls under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generation {
    /// Ampere (and Ada): the A100 column.
    A100,
    /// Hopper: the H100 column.
    H100,
    /// Blackwell: B100.
    B100,
    /// Grace Blackwell: GB200.
    Gb200,
    /// Volta and older (and Turing): the older Xid page.
    Older,
    /// Not known (NVML did not say): the catalog, without applicability.
    Unknown,
}

impl Generation {
    /// From NVML's architecture (`Hopper`) and the GPU's name (`NVIDIA GB200`).
    pub fn of(architecture: Option<&str>, name: Option<&str>) -> Generation {
        let grace = name.is_some_and(|n| n.contains("GB200") || n.contains("GB300"));
        match architecture.unwrap_or("") {
            "Ampere" | "Ada" => Generation::A100,
            "Hopper" => Generation::H100,
            "Blackwell" if grace => Generation::Gb200,
            "Blackwell" => Generation::B100,
            "Kepler" | "Maxwell" | "Pascal" | "Volta" | "Turing" => Generation::Older,
            _ => Generation::Unknown,
        }
    }

    fn column(self) -> Option<(usize, &'static str)> {
        match self {
            Generation::A100 => Some((0, "A100")),
            Generation::H100 => Some((1, "H100")),
            Generation::B100 => Some((2, "B100")),
            Generation::Gb200 => Some((3, "GB200")),
            Generation::Older | Generation::Unknown => None,
        }
    }
}

/// A resolution bucket's verdict and what it asks for.
fn bucket(b: &str) -> (Severity, &'static str) {
    match b {
        "IGNORE" => (Severity::Ok, "no action required"),
        "RESTART_APP" => (Severity::Warning, "restart the application"),
        "CHECK_UVM" => (
            Severity::Warning,
            "reset the GPU if UVM or vGPU is in use, else no action",
        ),
        "RESET_GPU" => (Severity::Critical, "reset the GPU"),
        "RESTART_BM" => (Severity::Critical, "restart the machine"),
        "RESTART_VM" => (Severity::Critical, "restart the VM that owns the GPU"),
        "CONTACT_SUPPORT" => (Severity::Critical, "contact support"),
        "CHECK_MECHANICALS" => (
            Severity::Critical,
            "check the GPU's seating and its power connections",
        ),
        "UPDATE_SWFW" => (Severity::Critical, "update firmware and software"),
        "WORKFLOW_XID_48" => (
            Severity::Critical,
            "reset the GPU (drain and reset when XID 63/64 came with it); run field diagnostics if the SRAM threshold flag is set",
        ),
        "WORKFLOW_NVLINK_ERR" => (
            Severity::Critical,
            "reset the GPU or reboot: only that clears it; decode the NVLink error registers in the message",
        ),
        "" => (
            Severity::Warning,
            "NVIDIA's catalog gives no resolution bucket for it yet",
        ),
        _ => (Severity::Warning, "see NVIDIA's Xid catalog"),
    }
}

/// One XID as judged: severity, its label, the immediate action and what to do.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct XidVerdict {
    pub(crate) severity: Severity,
    /// `XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS`
    pub(crate) label: String,
    /// The catalog's immediate action (`RESTART_BM`), or what stands for it.
    pub(crate) immediate: String,
    /// What that means, and the investigatory action if it recurs.
    pub(crate) todo: String,
}

/// What judging one XID needs to know beside the event.
pub(crate) struct XidContext<'a> {
    pub(crate) generation: Generation,
    /// The driver's branch (575 for 575.57.08), for the 144–150 decode; None unknown.
    pub(crate) driver_branch: Option<u32>,
    /// The other XIDs of the same GPU in the same initialisation.
    pub(crate) others: &'a [&'a XidEvent],
    /// NVSwitches are on PCI (Fabric Manager matters).
    pub(crate) nvswitch: bool,
}

/// Judge one XID.
pub(crate) fn judge(e: &XidEvent, cx: &XidContext<'_>) -> XidVerdict {
    let Some(entry) = catalog::entry(e.xid) else {
        return XidVerdict {
            severity: Severity::Warning,
            label: format!("XID {}", e.xid),
            immediate: "not in the catalog".into(),
            todo: "not in NVIDIA's Xid catalog (codes 1–172): see the driver's release notes"
                .into(),
        };
    };
    let label = format!("XID {} {}", e.xid, first_mnemonic(entry));
    if cx.generation == Generation::Older {
        return older(e, entry, label);
    }
    let (severity, immediate, meaning) = match entry.immediate {
        "WORKFLOW_NVLINK5_ERR" => nvlink5(e, cx),
        "XID_154" => recovery_action_changed(e),
        "XID_154_EVAL" => xid_154_eval(cx),
        "WORKFLOW_XID_45" => xid_45(cx),
        b => {
            let (sev, what) = bucket(b);
            let shown = if b.is_empty() { "none" } else { b };
            (sev, shown.to_string(), what.to_string())
        }
    };
    let mut todo = meaning;
    if !entry.note.is_empty() {
        todo.push_str(&format!(" ({})", entry.note));
    }
    if !entry.investigatory.is_empty()
        && !entry.investigatory.starts_with("N/A")
        && entry.investigatory != entry.immediate
    {
        todo.push_str(&format!("; if it recurs: {}", entry.investigatory));
    }
    if let Some((col, gen)) = cx.generation.column() {
        if !entry.applies[col] {
            todo.push_str(&format!(
                "; NVIDIA's catalog does not list it for {gen}: report it"
            ));
        }
    }
    XidVerdict {
        severity,
        label,
        immediate,
        todo,
    }
}

/// XID 13's catalog mnemonic names two; show the first.
fn first_mnemonic(e: &XidEntry) -> &'static str {
    e.mnemonic.split(" / ").next().unwrap_or(e.mnemonic)
}

/// Volta and older: the older page's name, DCGM's health-watch XIDs CRITICAL.
fn older(e: &XidEvent, entry: &XidEntry, label: String) -> XidVerdict {
    let what = catalog::older(e.xid).unwrap_or(entry.description);
    let severity = if OLDER_CRITICAL.contains(&e.xid) {
        Severity::Critical
    } else if OLDER_APPLICATION.contains(&e.xid) {
        Severity::Ok
    } else {
        Severity::Warning
    };
    XidVerdict {
        severity,
        label,
        immediate: "older GPU: no catalog action".into(),
        todo: format!(
            "{what} (NVIDIA's older Xid page; the Xid catalog covers Ampere and newer){}",
            if severity == Severity::Critical {
                ": drain the node, reset the GPU or reboot"
            } else {
                ""
            }
        ),
    }
}

/// XID 154: `GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)`.
fn recovery_action_changed(e: &XidEvent) -> (Severity, String, String) {
    let to = e.message.split(" to 0x").nth(1).and_then(|t| {
        let hex: String = t.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        u32::from_str_radix(&hex, 16).ok()
    });
    let (sev, what) = match to {
        Some(0) => (Severity::Ok, "recovery action back to none"),
        Some(1) => (Severity::Critical, "GPU reset required"),
        Some(2) => (Severity::Critical, "node reboot required"),
        Some(3) => (Severity::Warning, "drain peer-to-peer traffic"),
        Some(4) => (Severity::Critical, "drain and reset"),
        _ => (
            Severity::Warning,
            "recovery action not readable in the message",
        ),
    };
    (
        sev,
        "XID_154".into(),
        format!("follow the recovery action it names: {what}"),
    )
}

/// `XID_154_EVAL`: take XID 154's action when one came with it, else restart the application.
fn xid_154_eval(cx: &XidContext<'_>) -> (Severity, String, String) {
    match cx.others.iter().rev().find(|o| o.xid == 154) {
        Some(x) => {
            let (sev, _, what) = recovery_action_changed(x);
            (sev, "XID_154_EVAL".into(), format!("with XID 154: {what}"))
        }
        None => (
            Severity::Warning,
            "XID_154_EVAL".into(),
            "no XID 154 with it: restart the application".into(),
        ),
    }
}

/// `WORKFLOW_XID_45`: alone, restart Fabric Manager (NVSwitch systems); with other XIDs,
/// follow those.
fn xid_45(cx: &XidContext<'_>) -> (Severity, String, String) {
    let solo = cx.others.iter().all(|o| o.xid == 45);
    match (solo, cx.nvswitch) {
        (true, true) => (
            Severity::Warning,
            "WORKFLOW_XID_45".into(),
            "alone: restart nvidia-fabricmanager".into(),
        ),
        (true, false) => (
            Severity::Ok,
            "WORKFLOW_XID_45".into(),
            "an application was torn down (Ctrl-C, kill, a reset); no action".into(),
        ),
        (false, _) => (
            Severity::Ok,
            "WORKFLOW_XID_45".into(),
            "follow the other XIDs' guidance".into(),
        ),
    }
}

/// The fields of an NVLink5 XID (144–150):
/// `149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 …)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nvlink5 {
    pub unit: String,
    pub fatal: Option<bool>,
    pub link: Option<u32>,
    pub intr_info: u32,
    pub error_status: Option<u32>,
}

/// Parse the NVLink5 fields of an XID 144–150 message.
pub fn parse_nvlink5(message: &str) -> Option<Nvlink5> {
    let after = message.split_once("): ")?.1;
    let (_, rest) = after.split_once(',')?;
    let (head, regs) = rest.split_once('(')?;
    let words: Vec<&str> = head
        .split_whitespace()
        .filter(|w| !w.starts_with("pid=") && !w.starts_with("name="))
        .collect();
    let unit = words.first()?.trim_end_matches(',').to_string();
    let fatal = words.iter().find_map(|w| match *w {
        "Fatal" => Some(true),
        "Nonfatal" | "Non-fatal" => Some(false),
        _ => None,
    });
    let link = words
        .iter()
        .position(|w| *w == "Link")
        .and_then(|i| words.get(i + 1))
        .and_then(|n| n.parse().ok());
    let hex = |w: &str| u32::from_str_radix(w.trim_start_matches("0x"), 16).ok();
    let mut regs = regs.trim_end_matches(')').split_whitespace();
    let intr_info = regs.next().and_then(hex)?;
    let error_status = regs.next().and_then(hex);
    Some(Nvlink5 {
        unit,
        fatal,
        link,
        intr_info,
        error_status,
    })
}

/// `WORKFLOW_NVLINK5_ERR`: decode IntrInfo and the error status with the catalog's table.
fn nvlink5(e: &XidEvent, cx: &XidContext<'_>) -> (Severity, String, String) {
    let Some(f) = parse_nvlink5(&e.message) else {
        return (
            Severity::Warning,
            "WORKFLOW_NVLINK5_ERR".into(),
            "the message's NVLink registers could not be read: decode it with the catalog's XID 144-150 table".into(),
        );
    };
    let masks = |r: &catalog::Nvlink5Rule, v1: &'static str, v2: &'static str| {
        match cx.driver_branch {
            Some(b) if b >= 575 => vec![v2],
            Some(_) => vec![v1],
            None => vec![v2, v1],
        }
        .into_iter()
        .any(|m| catalog::mask_matches(m, f.intr_info))
            && (r.status.is_none()
                || r.status == f.error_status
                || (r.unit == "MSE Degraded" && f.error_status == Some(0)))
    };
    let rule = catalog::NVLINK5_DECODE
        .iter()
        .filter(|r| r.xid == e.xid)
        .find(|r| masks(r, r.v1, r.v2) || r.action2.is_some_and(|(v1, v2, _)| masks(r, v1, v2)));
    let link = f.link.map(|l| format!(" link {l}")).unwrap_or_default();
    match rule {
        Some(r) => {
            let action = match r.action2 {
                Some((v1, v2, a2)) if masks(r, v1, v2) => a2,
                _ => r.immediate,
            };
            let (sev, what, shown) = if action == "XID_154_EVAL" {
                let (s, _, w) = xid_154_eval(cx);
                (s, w, action)
            } else {
                let (s, w) = bucket(action);
                (s, w.to_string(), action)
            };
            (
                sev,
                shown.to_string(),
                format!(
                    "{} ({}){link}: {what}; if it recurs: {}",
                    r.unit, r.severity, r.investigatory
                ),
            )
        }
        None => {
            let (sev, what) = match f.fatal {
                Some(true) => (Severity::Critical, "reset the GPU"),
                _ => (Severity::Warning, "watch whether it recurs"),
            };
            (
                sev,
                "WORKFLOW_NVLINK5_ERR".into(),
                format!(
                    "{}{link} (IntrInfo 0x{:08x}) is not in the catalog's decode table; {} per the message: {what}",
                    f.unit,
                    f.intr_info,
                    match f.fatal {
                        Some(true) => "fatal",
                        Some(false) => "non-fatal",
                        None => "severity not stated",
                    }
                ),
            )
        }
    }
}

/// The GPU's XIDs split at its last initialisation: (this initialisation's, earlier ones).
fn current_and_earlier<'a>(
    s: &'a Snapshot,
    pci_key: &str,
) -> (Vec<&'a XidEvent>, Vec<&'a XidEvent>) {
    let last_init = s
        .kernel_log
        .gpu_inits
        .iter()
        .filter(|g| g.pci == pci_key)
        .map(|g| g.order)
        .max();
    s.kernel_log
        .xids
        .iter()
        .filter(|e| e.pci == pci_key)
        .partition(|e| last_init.is_none_or(|i| e.order > i))
}

/// Each XID of `evs` with its verdict, in the same order.
fn judged<'a>(evs: &[&'a XidEvent], cx: &XidContext<'_>) -> Vec<(&'a XidEvent, XidVerdict)> {
    evs.iter().map(|e| (*e, judge(e, cx))).collect()
}

/// The verdicts of a GPU's XIDs, grouped: worst first, then by code.
fn summary(judged: &[(&XidEvent, XidVerdict)]) -> (Severity, String, Option<String>) {
    let mut groups: Vec<(XidVerdict, usize, Option<f64>)> = Vec::new();
    for (e, v) in judged {
        match groups.iter_mut().find(|(g, _, _)| g == v) {
            Some(g) => {
                g.1 += 1;
                g.2 = e.uptime_s.or(g.2);
            }
            None => groups.push((v.clone(), 1, e.uptime_s)),
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.0.severity));
    let sev = groups
        .iter()
        .map(|g| g.0.severity)
        .max()
        .unwrap_or(Severity::Ok);
    let mut parts: Vec<String> = groups
        .iter()
        .map(|(v, n, last)| {
            let times = if *n > 1 {
                format!(" ×{n}")
            } else {
                String::new()
            };
            let at = last
                .map(|u| format!(" (last at {u:.0} s)"))
                .unwrap_or_default();
            format!("{}{times}{at}: {}", v.label, v.immediate)
        })
        .collect();
    if parts.len() > 5 {
        let more = parts.len() - 5;
        parts.truncate(5);
        parts.push(format!("and {more} more"));
    }
    let hint = groups
        .first()
        .filter(|g| g.0.severity > Severity::Ok)
        .map(|g| format!("{}: {}", g.0.label, g.0.todo));
    (sev, parts.join("; "), hint)
}

/// `xid.log`, `gpu.xid` per GPU (NVML's and PCI's), `xid.unmapped`, and the SXid checks; the
/// XIDs of each GPU NVML sees, counted (none when the kernel log was not read).
pub(super) fn xids(
    out: &mut Out,
    s: &Snapshot,
    gpu_refs: &[GpuRef],
    pci_refs: &[GpuRef],
) -> Vec<GpuXids> {
    let log = &s.kernel_log;
    match (&log.source, &log.error) {
        (Some(src), _) => out.push(
            "xid.log",
            "xid",
            None,
            Severity::Ok,
            format!(
                "{src} read: {} XID and {} SXid event(s) this boot",
                log.xids.len(),
                log.sxids.len()
            ),
            None,
        ),
        (None, e) => out.push(
            "xid.log",
            "xid",
            None,
            Severity::Unknown,
            format!("kernel log not read: {}", e.as_deref().unwrap_or("unknown")),
            Some("run as root (or in group adm/systemd-journal) to see XID errors".into()),
        ),
    }
    if log.source.is_none() {
        return Vec::new();
    }
    let mut refs: Vec<&GpuRef> = gpu_refs.iter().collect();
    for r in pci_refs {
        if !refs
            .iter()
            .any(|g| key(&g.pci_bus_id) == key(&r.pci_bus_id))
        {
            refs.push(r);
        }
    }
    let (driver_branch, nvswitch) = branch_and_nvswitch(s);
    let counted: Vec<GpuXids> = refs
        .iter()
        .filter_map(|r| gpu_xids(out, s, r, driver_branch, nvswitch))
        .collect();
    let unmapped: Vec<&XidEvent> = log
        .xids
        .iter()
        .filter(|e| !refs.iter().any(|r| key(&r.pci_bus_id) == e.pci))
        .collect();
    if !unmapped.is_empty() {
        let cx = XidContext {
            generation: Generation::Unknown,
            driver_branch,
            others: &unmapped,
            nvswitch,
        };
        let (sev, value, hint) = summary(&judged(&unmapped, &cx));
        let mut addrs: Vec<&str> = unmapped.iter().map(|e| e.pci.as_str()).collect();
        addrs.dedup();
        out.push(
            "xid.unmapped",
            "xid",
            None,
            sev,
            format!("{value} (PCI {} not seen now)", addrs.join(", ")),
            hint,
        );
    }
    sxids(out, s);
    counted
}

/// What judging an XID needs of the host: the driver's branch and whether NVSwitches are on PCI.
fn branch_and_nvswitch(s: &Snapshot) -> (Option<u32>, bool) {
    let nvswitch = s.host.pci.iter().any(|d| d.kind == PciKind::NvSwitch);
    let driver_branch = s
        .nvml
        .driver_version
        .as_deref()
        .or(s.host.kernel_module_version.as_deref())
        .and_then(gpuhost_nvidia::compat::DriverVersion::parse)
        .and_then(|d| u32::try_from(d.branch()).ok());
    (driver_branch, nvswitch)
}

/// Judged XIDs counted by the immediate action each was judged to ask for (`RESET_GPU`,
/// `RESTART_BM`, …), sorted.
fn actions(judged: &[(&XidEvent, XidVerdict)]) -> Vec<(String, usize)> {
    let mut counted: Vec<(String, usize)> = Vec::new();
    for (_, v) in judged {
        match counted.iter_mut().find(|(a, _)| *a == v.immediate) {
            Some(c) => c.1 += 1,
            None => counted.push((v.immediate.clone(), 1)),
        }
    }
    counted.sort();
    counted
}

/// `gpu.xid` of one GPU: the XIDs of its current initialisation judged, the earlier ones
/// listed; for a GPU NVML sees (with a PCI address), those XIDs counted.
fn gpu_xids(
    out: &mut Out,
    s: &Snapshot,
    r: &GpuRef,
    driver_branch: Option<u32>,
    nvswitch: bool,
) -> Option<GpuXids> {
    let k = key(&r.pci_bus_id);
    let gpu = s.nvml.gpus.iter().find(|g| r.index == Some(g.index));
    let (now, earlier) = current_and_earlier(s, &k);
    let cx = XidContext {
        generation: generation(gpu),
        driver_branch,
        others: &now,
        nvswitch,
    };
    let judged = judged(&now, &cx);
    let before = if earlier.is_empty() {
        String::new()
    } else {
        let codes: Vec<String> = earlier.iter().map(|e| e.xid.to_string()).collect();
        format!(
            "; {} earlier XID(s) before the GPU's last reset not counted (XID {})",
            earlier.len(),
            codes.join(", ")
        )
    };
    if now.is_empty() {
        out.push(
            "gpu.xid",
            "xid",
            Some(r),
            Severity::Ok,
            format!("no XID since boot or the last GPU reset{before}"),
            None,
        );
    } else {
        let (sev, value, hint) = summary(&judged);
        out.push(
            "gpu.xid",
            "xid",
            Some(r),
            sev,
            format!("{value}{before}"),
            hint,
        );
    }
    // Counted for a GPU NVML sees, whose PCI address its XIDs are matched by.
    let index = r.index.filter(|_| normalise_pci(&r.pci_bus_id).is_some())?;
    Some(GpuXids {
        index,
        events: now.len(),
        actions: actions(&judged),
    })
}

fn generation(g: Option<&GpuSnapshot>) -> Generation {
    match g {
        Some(g) => Generation::of(
            g.architecture.value().map(String::as_str),
            g.name.value().map(String::as_str),
        ),
        None => Generation::Unknown,
    }
}

/// SXids per NVSwitch: fatal CRITICAL, non-fatal listed (NVIDIA: no action), unmapped apart.
fn sxids(out: &mut Out, s: &Snapshot) {
    let switches: Vec<&PciDevice> = s
        .host
        .pci
        .iter()
        .filter(|d| d.kind == PciKind::NvSwitch)
        .collect();
    for sw in &switches {
        let k = key(&sw.address);
        let evs: Vec<&SxidEvent> = s
            .kernel_log
            .sxids
            .iter()
            .filter(|e| key(&e.pci) == k)
            .collect();
        let r = GpuRef {
            index: None,
            uuid: None,
            pci_bus_id: nvml_bus_id(&sw.address),
        };
        let (sev, value, hint) = sxid_summary(&evs);
        out.push("nvswitch.sxid", "xid", Some(&r), sev, value, hint);
    }
    let unmapped: Vec<&SxidEvent> = s
        .kernel_log
        .sxids
        .iter()
        .filter(|e| !switches.iter().any(|sw| key(&sw.address) == key(&e.pci)))
        .collect();
    if !unmapped.is_empty() {
        let (sev, value, hint) = sxid_summary(&unmapped);
        out.push(
            "sxid.unmapped",
            "xid",
            None,
            sev,
            format!("{value} (NVSwitch not on PCI now)"),
            hint,
        );
    }
}

fn sxid_summary(evs: &[&SxidEvent]) -> (Severity, String, Option<String>) {
    if evs.is_empty() {
        return (Severity::Ok, "no SXid this boot".into(), None);
    }
    let fatal: Vec<&&SxidEvent> = evs.iter().filter(|e| e.fatal == Some(true)).collect();
    let unknown = evs.iter().filter(|e| e.fatal.is_none()).count();
    let nonfatal = evs.len() - fatal.len() - unknown;
    let list = |es: &[&&SxidEvent]| -> String {
        let mut v: Vec<String> = es
            .iter()
            .map(|e| match e.link {
                Some(l) => format!("SXid {} link {l}", e.sxid),
                None => format!("SXid {}", e.sxid),
            })
            .collect();
        v.dedup();
        v.truncate(5);
        v.join(", ")
    };
    let value = format!(
        "{} fatal{}, {nonfatal} non-fatal, {unknown} without a severity",
        fatal.len(),
        if fatal.is_empty() {
            String::new()
        } else {
            format!(" ({})", list(&fatal))
        }
    );
    if !fatal.is_empty() {
        (
            Severity::Critical,
            value,
            Some("fatal SXid: the NVSwitch's links or the whole switch stopped; stop the CUDA jobs, reset the GPUs and NVSwitches (or reboot), and check nvidia-fabricmanager's log (Fabric Manager User Guide, SXid errors)".into()),
        )
    } else if unknown > 0 {
        (
            Severity::Warning,
            value,
            Some("SXids whose message states no severity: look them up in the Fabric Manager User Guide".into()),
        )
    } else {
        (
            Severity::Ok,
            format!("{value} (non-fatal: no action)"),
            None,
        )
    }
}
