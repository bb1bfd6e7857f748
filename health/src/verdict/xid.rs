//! XID events from the kernel log, mapped to GPUs.

use super::{key, GpuRef, Out, Severity};
use crate::kmsg::{APPLICATION_XIDS, CRITICAL_XIDS};
use crate::snapshot::{Snapshot, XidEvent};

/// Severity of one XID.
pub fn xid_severity(xid: u32) -> Severity {
    if CRITICAL_XIDS.contains(&xid) {
        Severity::Critical
    } else if APPLICATION_XIDS.contains(&xid) {
        Severity::Ok
    } else {
        Severity::Warning
    }
}

fn xid_summary(evs: &[&XidEvent]) -> (Severity, String) {
    let sev = evs
        .iter()
        .map(|e| xid_severity(e.xid))
        .max()
        .unwrap_or(Severity::Ok);
    let mut list: Vec<String> = Vec::new();
    for e in evs {
        let t = e
            .uptime_s
            .map(|u| format!(" at {u:.0} s"))
            .unwrap_or_default();
        list.push(format!("XID {}{t}", e.xid));
    }
    if list.len() > 5 {
        let more = list.len() - 5;
        list.truncate(5);
        list.push(format!("and {more} more"));
    }
    (
        sev,
        format!("{} since boot: {}", evs.len(), list.join(", ")),
    )
}

fn xid_hint(sev: Severity, evs: &[&XidEvent]) -> Option<String> {
    let worst = evs
        .iter()
        .map(|e| e.xid)
        .find(|x| CRITICAL_XIDS.contains(x));
    match (sev, worst) {
        (Severity::Critical, Some(79)) => Some("XID 79: the GPU fell off the bus: drain and reboot; reseat / RMA if it recurs".into()),
        (Severity::Critical, Some(x)) => Some(format!("XID {x}: drain the node, reset the GPU (`nvidia-smi -r`) or reboot; run field diagnostics if it recurs")),
        _ => Some("look up the XID in NVIDIA's XID catalogue; watch whether it recurs".into()),
    }
}

pub(super) fn xids(out: &mut Out, s: &Snapshot, gpu_refs: &[GpuRef], pci_refs: &[GpuRef]) {
    let log = &s.kernel_log;
    match (&log.source, &log.error) {
        (Some(src), _) => out.push(
            "xid.log",
            "xid",
            None,
            Severity::Ok,
            format!("{src} read: {} XID event(s) since boot", log.xids.len()),
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
        return;
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
    for r in &refs {
        let k = key(&r.pci_bus_id);
        let evs: Vec<&XidEvent> = log.xids.iter().filter(|e| e.pci == k).collect();
        if evs.is_empty() {
            out.push(
                "gpu.xid",
                "xid",
                Some(r),
                Severity::Ok,
                "no XID since boot",
                None,
            );
        } else {
            let (sev, value) = xid_summary(&evs);
            out.push("gpu.xid", "xid", Some(r), sev, value, xid_hint(sev, &evs));
        }
    }
    let unmapped: Vec<&XidEvent> = log
        .xids
        .iter()
        .filter(|e| !refs.iter().any(|r| key(&r.pci_bus_id) == e.pci))
        .collect();
    if !unmapped.is_empty() {
        let (sev, value) = xid_summary(&unmapped);
        let addrs: Vec<&str> = unmapped.iter().map(|e| e.pci.as_str()).collect();
        out.push(
            "xid.unmapped",
            "xid",
            None,
            sev,
            format!("{value} (PCI {} not seen now)", addrs.join(", ")),
            xid_hint(sev, &unmapped),
        );
    }
}
