//! Verdicts: pure functions from a [`Snapshot`] (and what the node should have) to checks,
//! each with a Nagios severity, the value seen, and — when not OK — what to do.
//!
//! NOT_SUPPORTED is "n/a", never a warning. Thresholds follow DCGM's health watches and the
//! clouds' GPU health checks: any volatile uncorrectable ECC error, a row-remap failure, more
//! than 512 uncorrectable remapped rows, a recovery action other than none and the critical
//! XIDs are CRITICAL; a pending row remap (a GPU reset applies it) is a WARNING.

use serde::{Deserialize, Serialize};

use crate::kmsg::{normalise_pci, APPLICATION_XIDS, CRITICAL_XIDS};
use crate::snapshot::{
    reasons, Fabric, GpuSnapshot, NvLink, PciDevice, PciKind, ProbeStatus, Reading, Snapshot,
    XidEvent,
};

/// Rows past this many uncorrectable remaps mean the GPU should be replaced (Azure, OCI).
pub const MAX_UNCORRECTABLE_REMAPPED_ROWS: u32 = 512;
/// WARNING this many °C below the slowdown threshold.
pub const TEMP_MARGIN_C: u32 = 5;

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
}

/// The driver version a local repo RPM's file name carries:
/// `cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm` → `535.104.05`.
pub fn driver_version_from_rpm(file_name: &str) -> Option<String> {
    file_name.match_indices('_').find_map(|(i, _)| {
        let v = file_name[i + 1..].split('-').next()?;
        (v.contains('.') && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .then(|| v.to_string())
    })
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

struct Out {
    checks: Vec<Check>,
}

impl Out {
    fn push(
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
}

/// sysfs `0000:3b:00.0` → NVML `00000000:3B:00.0`.
pub fn nvml_bus_id(sysfs: &str) -> String {
    match sysfs.split_once(':') {
        Some((dom, rest)) => format!("0000{dom}:{}", rest.to_uppercase()),
        None => sysfs.to_uppercase(),
    }
}

fn key(addr: &str) -> String {
    normalise_pci(addr).unwrap_or_else(|| addr.to_lowercase())
}

/// All checks for a snapshot.
pub fn evaluate(s: &Snapshot, expect: &Expect) -> Vec<Check> {
    let mut out = Out { checks: Vec::new() };
    let nvml_ok = s.nvml.status == ProbeStatus::Ok;
    let gpu_refs: Vec<GpuRef> = s.nvml.gpus.iter().map(gpu_ref).collect();
    let pci_ref = |d: &PciDevice| -> GpuRef {
        let k = key(&d.address);
        gpu_refs
            .iter()
            .find(|g| key(&g.pci_bus_id) == k)
            .cloned()
            .unwrap_or_else(|| GpuRef {
                index: None,
                uuid: None,
                pci_bus_id: nvml_bus_id(&d.address),
            })
    };
    let pci_gpus: Vec<&PciDevice> = s
        .host
        .pci
        .iter()
        .filter(|d| d.kind == PciKind::Gpu)
        .collect();
    // GPUs given to VMs (vfio-pci) are not NVML's to see.
    let host_gpus = pci_gpus
        .iter()
        .filter(|d| d.driver.as_deref() != Some("vfio-pci"))
        .count();
    let switches = s
        .host
        .pci
        .iter()
        .filter(|d| d.kind == PciKind::NvSwitch)
        .count();

    // PCI, without the driver.
    match &s.host.pci_error {
        Some(e) => out.push(
            "pci.devices",
            "pci",
            None,
            Severity::Unknown,
            e.clone(),
            Some("run as a user who can read /sys/bus/pci".into()),
        ),
        None => out.push(
            "pci.devices",
            "pci",
            None,
            Severity::Ok,
            format!(
                "{} NVIDIA GPU(s){}, {switches} NVSwitch(es) on PCI",
                pci_gpus.len(),
                if host_gpus != pci_gpus.len() {
                    format!(" ({} bound to vfio-pci)", pci_gpus.len() - host_gpus)
                } else {
                    String::new()
                }
            ),
            None,
        ),
    }
    for d in &s.host.pci {
        let r = pci_ref(d);
        pci_checks(&mut out, d, &r);
    }

    // The driver, without NVML.
    let have_gpus = !pci_gpus.is_empty();
    match (&s.host.kernel_module_version, have_gpus) {
        (Some(v), _) => out.push("driver.module", "driver", None, Severity::Ok, format!("kernel module {v} loaded"), None),
        (None, true) => out.push(
            "driver.module",
            "driver",
            None,
            Severity::Critical,
            "nvidia kernel module not loaded (/proc/driver/nvidia/version absent)",
            Some("load it (`modprobe nvidia`; see `journalctl -k` for why it failed) or run `gpuhost apply`".into()),
        ),
        (None, false) => out.push("driver.module", "driver", None, Severity::NotApplicable, "no NVIDIA GPU on PCI, no kernel module", None),
    }
    match (s.host.nouveau_loaded, have_gpus) {
        (true, true) => out.push(
            "driver.nouveau",
            "driver",
            None,
            Severity::Critical,
            "nouveau is loaded and holds NVIDIA GPUs",
            Some(
                "blacklist nouveau (`gpuhost apply` does), rebuild the initramfs and reboot".into(),
            ),
        ),
        (true, false) => out.push(
            "driver.nouveau",
            "driver",
            None,
            Severity::Ok,
            "nouveau loaded, no NVIDIA GPU",
            None,
        ),
        (false, _) => out.push(
            "driver.nouveau",
            "driver",
            None,
            Severity::Ok,
            "nouveau not loaded",
            None,
        ),
    }

    nvml_init(&mut out, s, have_gpus);
    if nvml_ok {
        driver_checks(&mut out, s, expect);
    }
    let missing: Vec<String> = pci_gpus
        .iter()
        .filter(|d| d.driver.as_deref() != Some("vfio-pci"))
        .filter(|d| {
            let k = key(&d.address);
            !gpu_refs.iter().any(|g| key(&g.pci_bus_id) == k)
        })
        .map(|d| nvml_bus_id(&d.address))
        .collect();
    gpu_count(&mut out, s, expect, host_gpus, nvml_ok, &missing);
    services(&mut out, s, switches, expect);
    xids(
        &mut out,
        s,
        &gpu_refs,
        &pci_gpus.iter().map(|d| pci_ref(d)).collect::<Vec<_>>(),
    );

    if nvml_ok {
        for (g, r) in s.nvml.gpus.iter().zip(&gpu_refs) {
            gpu_checks(&mut out, g, r, switches > 0);
        }
    }
    out.checks
}

fn gpu_ref(g: &GpuSnapshot) -> GpuRef {
    GpuRef {
        index: Some(g.index),
        uuid: g.uuid.value().cloned(),
        pci_bus_id: g.pci_bus_id.value().cloned().unwrap_or_default(),
    }
}

fn pci_checks(out: &mut Out, d: &PciDevice, r: &GpuRef) {
    let what = match d.kind {
        PciKind::Gpu => "GPU",
        PciKind::NvSwitch => "NVSwitch",
    };
    if d.fell_off() {
        out.push(
            "pci.config",
            "pci",
            Some(r),
            Severity::Critical,
            format!("{what} {} fell off the bus: config space reads all-ones", d.address),
            Some("drain the node; look for XID 79 in the kernel log; reboot (a GPU reset rarely brings it back); reseat or RMA if it recurs".into()),
        );
    } else if let Some(head) = &d.config_head {
        out.push(
            "pci.config",
            "pci",
            Some(r),
            Severity::Ok,
            format!("{what} {} answers ({head})", d.address),
            None,
        );
    } else {
        out.push(
            "pci.config",
            "pci",
            Some(r),
            Severity::Unknown,
            format!(
                "cannot read config space: {}",
                d.config_error.as_deref().unwrap_or("unknown error")
            ),
            Some("run as root".into()),
        );
    }
    match (
        &d.current_link_speed,
        d.current_link_width,
        d.max_link_width,
    ) {
        (Some(speed), Some(w), Some(max_w)) if !d.fell_off() => {
            let value = format!(
                "{speed} x{w} (max {} x{max_w})",
                d.max_link_speed.as_deref().unwrap_or("?")
            );
            if w < max_w && w > 0 {
                out.push(
                    "pci.link",
                    "pci",
                    Some(r),
                    Severity::Warning,
                    format!("link trained narrower than it can: {value}"),
                    Some("reseat the card or riser; check the slot; compare `lspci -vv` LnkSta/LnkCap".into()),
                );
            } else {
                out.push("pci.link", "pci", Some(r), Severity::Ok, value, None);
            }
        }
        _ => out.push(
            "pci.link",
            "pci",
            Some(r),
            Severity::NotApplicable,
            "link attributes not in sysfs",
            None,
        ),
    }
    match &d.aer {
        Some(a) if a.fatal > 0 => out.push(
            "pci.aer",
            "pci",
            Some(r),
            Severity::Critical,
            format!("AER fatal {} non-fatal {} correctable {}", a.fatal, a.nonfatal, a.correctable),
            Some("fatal PCIe errors since boot: drain, check the kernel log, reseat / replace the riser or card".into()),
        ),
        Some(a) if a.nonfatal > 0 => out.push(
            "pci.aer",
            "pci",
            Some(r),
            Severity::Warning,
            format!("AER non-fatal {} correctable {}", a.nonfatal, a.correctable),
            Some("non-fatal PCIe errors since boot: watch the count; reseat if it grows".into()),
        ),
        Some(a) => out.push("pci.aer", "pci", Some(r), Severity::Ok, format!("AER correctable {}", a.correctable), None),
        None => out.push("pci.aer", "pci", Some(r), Severity::NotApplicable, "no AER counters in sysfs", None),
    }
}

fn nvml_init(out: &mut Out, s: &Snapshot, have_gpus: bool) {
    let p = &s.nvml;
    let err = p.error.clone().unwrap_or_default();
    let module = s.host.kernel_module_version.as_deref().unwrap_or("none");
    let library = s
        .host
        .nvml_library
        .as_ref()
        .and_then(|l| l.version.clone())
        .unwrap_or_else(|| "unknown".into());
    let (sev, value, hint): (Severity, String, Option<String>) = match p.status {
        ProbeStatus::Ok => (
            Severity::Ok,
            format!(
                "NVML {} answered in {:.0} ms",
                p.nvml_version.as_deref().unwrap_or("?"),
                p.duration_ms.unwrap_or(0.0)
            ),
            None,
        ),
        ProbeStatus::NoLibrary => (
            if have_gpus { Severity::Critical } else { Severity::Unknown },
            "no NVIDIA userspace library (libnvidia-ml.so.1 not found): NVML checks not run".into(),
            Some(if have_gpus {
                "install the NVIDIA driver (`gpuhost apply`)".into()
            } else {
                "this machine has no NVIDIA driver; only the driver-free checks ran".into()
            }),
        ),
        ProbeStatus::DriverNotLoaded => (
            Severity::Critical,
            "NVML: driver not loaded".into(),
            Some("load the kernel module (`modprobe nvidia`) or run `gpuhost apply`; see `journalctl -k`".into()),
        ),
        ProbeStatus::VersionMismatch => (
            Severity::Critical,
            format!("driver/library version mismatch: kernel module {module}, library {library}"),
            Some("reboot, or reload the modules (`rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`) with no GPU users".into()),
        ),
        ProbeStatus::NoPermission => (
            Severity::Unknown,
            format!("NVML: no permission ({err})"),
            Some("run as root or a user with access to /dev/nvidia*".into()),
        ),
        ProbeStatus::InitError => (
            Severity::Critical,
            format!("NVML init failed: {err}"),
            Some("see the kernel log (XIDs) and `nvidia-smi`; reboot if it persists".into()),
        ),
        ProbeStatus::Unresponsive | ProbeStatus::StuckEarlier => (
            Severity::Critical,
            format!("driver unresponsive: {err}"),
            Some("a GPU may have fallen off the bus (look for XID 79); drain the node and reboot".into()),
        ),
        ProbeStatus::ProbeFailed => (
            Severity::Unknown,
            format!("NVML probe failed: {err}"),
            Some("run `gpuhost status --log-level debug`; report the error".into()),
        ),
        ProbeStatus::NotRun => (Severity::Unknown, "NVML probe not run".into(), None),
    };
    out.push("nvml.init", "driver", None, sev, value, hint);
}

fn driver_checks(out: &mut Out, s: &Snapshot, expect: &Expect) {
    let got = s.nvml.driver_version.clone().unwrap_or_else(|| "?".into());
    match (&expect.driver_version, &expect.profile_error) {
        (_, Some(e)) => out.push(
            "driver.version",
            "driver",
            None,
            Severity::Unknown,
            format!("driver {got}; profile not loaded: {e}"),
            Some("fix --profile".into()),
        ),
        (Some(want), None) if *want == got => out.push(
            "driver.version",
            "driver",
            None,
            Severity::Ok,
            format!("driver {got} as expected"),
            None,
        ),
        (Some(want), None) => out.push(
            "driver.version",
            "driver",
            None,
            Severity::Warning,
            format!(
                "driver {got}, {} expects {want}",
                expect.driver_source.as_deref().unwrap_or("the profile")
            ),
            Some("run `gpuhost apply` with the profile, then reboot".into()),
        ),
        (None, None) => out.push(
            "driver.version",
            "driver",
            None,
            Severity::Ok,
            format!("driver {got} (no expected version: give --profile)"),
            None,
        ),
    }
    match s.nvml.cuda_driver_version {
        Some(v) => out.push(
            "driver.cuda",
            "driver",
            None,
            Severity::Ok,
            format!("supports CUDA up to {}.{}", v / 1000, (v % 1000) / 10),
            None,
        ),
        None => out.push(
            "driver.cuda",
            "driver",
            None,
            Severity::NotApplicable,
            "CUDA version not reported",
            None,
        ),
    }
}

fn gpu_count(
    out: &mut Out,
    s: &Snapshot,
    expect: &Expect,
    pci: usize,
    nvml_ok: bool,
    missing: &[String],
) {
    let nvml = if nvml_ok { s.nvml.device_count } else { None };
    let pci = u32::try_from(pci).unwrap_or(u32::MAX);
    let mut value = format!(
        "NVML {}, PCI {pci}",
        nvml.map(|n| n.to_string()).unwrap_or_else(|| "-".into())
    );
    if let Some(e) = expect.gpus {
        value.push_str(&format!(
            ", expected {e} ({})",
            expect.gpus_source.as_deref().unwrap_or("--expect-gpus")
        ));
    }
    if nvml.is_some_and(|n| n < pci) && !missing.is_empty() {
        value.push_str(&format!("; not seen by NVML: {}", missing.join(", ")));
    }
    let seen = nvml.unwrap_or(pci);
    let (sev, hint) = match (nvml, expect.gpus) {
        (Some(n), _) if n < pci => (
            Severity::Critical,
            Some("a GPU on PCI is not visible to the driver: look for XIDs and fallen-off devices above; reboot; RMA if it stays missing".into()),
        ),
        (_, Some(e)) if seen < e => (
            Severity::Critical,
            Some("fewer GPUs than this node must have: check PCI (`lspci -d 10de:`), the BIOS, risers; RMA".into()),
        ),
        (_, Some(e)) if seen > e => (
            Severity::Warning,
            Some("more GPUs than expected: fix --expect-gpus / the profile's status.expect_gpus".into()),
        ),
        (None, None) => (Severity::Ok, None),
        _ => (Severity::Ok, None),
    };
    out.push("gpu.count", "count", None, sev, value, hint);
}

fn services(out: &mut Out, s: &Snapshot, switches: usize, expect: &Expect) {
    let sv = &s.services;
    if let Some(e) = &sv.error {
        out.push(
            "services.state",
            "services",
            None,
            Severity::Unknown,
            format!("unit states not read: {e}"),
            Some("systemd's `systemctl` is needed to check docker, nvidia-persistenced, nvidia-fabricmanager".into()),
        );
    }
    if expect.require_docker == Some(false) {
        for id in ["services.docker", "services.nvidia_runtime"] {
            out.push(
                id,
                "containers",
                None,
                Severity::NotApplicable,
                "not required (profile status.require_docker = false)",
                None,
            );
        }
    } else {
        docker(out, s);
    }
    persistenced(out, s);
    fabric_manager(out, s, switches, expect);
}

fn docker(out: &mut Out, s: &Snapshot) {
    let sv = &s.services;
    if let Some(state) = &sv.docker {
        if state == "active" {
            out.push(
                "services.docker",
                "containers",
                None,
                Severity::Ok,
                "docker active",
                None,
            );
        } else {
            out.push(
                "services.docker",
                "containers",
                None,
                Severity::Warning,
                format!("docker {state}"),
                Some("`systemctl enable --now docker` (or `gpuhost apply`)".into()),
            );
        }
    }
    let dj = &s.host.docker_daemon_json;
    let (sev, value, hint) = if let Some(e) = &dj.error {
        (
            Severity::Warning,
            format!("/etc/docker/daemon.json: {e}"),
            Some("fix the file, then `nvidia-ctk runtime configure --runtime=docker`".to_string()),
        )
    } else if dj.nvidia_runtime {
        (
            Severity::Ok,
            format!(
                "nvidia runtime configured{}",
                dj.default_runtime
                    .as_deref()
                    .map(|d| format!(" (default runtime {d})"))
                    .unwrap_or_default()
            ),
            None,
        )
    } else if dj.present {
        (Severity::Warning, "nvidia runtime not in /etc/docker/daemon.json".into(), Some("`nvidia-ctk runtime configure --runtime=docker && systemctl restart docker` (or `gpuhost apply`)".into()))
    } else {
        (Severity::Warning, "no /etc/docker/daemon.json: nvidia runtime not configured".into(), Some("`nvidia-ctk runtime configure --runtime=docker && systemctl restart docker` (or `gpuhost apply`)".into()))
    };
    out.push(
        "services.nvidia_runtime",
        "containers",
        None,
        sev,
        value,
        hint,
    );
}

fn persistenced(out: &mut Out, s: &Snapshot) {
    let sv = &s.services;
    if let Some(state) = &sv.nvidia_persistenced {
        let all_persistent = !s.nvml.gpus.is_empty()
            && s.nvml
                .gpus
                .iter()
                .all(|g| g.persistence_mode == Reading::Value(true));
        if state == "active" {
            out.push(
                "services.persistenced",
                "services",
                None,
                Severity::Ok,
                "nvidia-persistenced active",
                None,
            );
        } else if all_persistent {
            out.push(
                "services.persistenced",
                "services",
                None,
                Severity::Ok,
                format!("nvidia-persistenced {state}; persistence mode is on for every GPU"),
                None,
            );
        } else if s.nvml.gpus.is_empty() {
            out.push(
                "services.persistenced",
                "services",
                None,
                Severity::NotApplicable,
                format!("nvidia-persistenced {state}; no GPU seen"),
                None,
            );
        } else {
            out.push(
                "services.persistenced",
                "services",
                None,
                Severity::Warning,
                format!("nvidia-persistenced {state}"),
                Some("`systemctl enable --now nvidia-persistenced`: without it the driver tears down between jobs and GPU state resets".into()),
            );
        }
    }
}

/// The Fabric Manager package of a driver branch: `nvidia-fabricmanager` from 580,
/// `nvidia-fabric-manager` before.
pub fn fabric_manager_package(driver: &str) -> &'static str {
    let branch: u32 = driver
        .split('.')
        .next()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0);
    if branch >= 580 {
        "nvidia-fabricmanager"
    } else {
        "nvidia-fabric-manager"
    }
}

/// `services.fabricmanager` (the unit runs) and `services.fabricmanager_version` (at the
/// driver's exact version), where Fabric Manager is required: by the profile, else when
/// NVSwitches are on PCI.
fn fabric_manager(out: &mut Out, s: &Snapshot, switches: usize, expect: &Expect) {
    let sv = &s.services;
    let required = expect.require_fabric_manager.unwrap_or(switches > 0);
    let why = match (expect.require_fabric_manager, switches) {
        (Some(true), 0) => "required by the profile".to_string(),
        (_, n) => format!("on a node with {n} NVSwitch(es)"),
    };
    let Some(state) = &sv.nvidia_fabricmanager else {
        // Unit states not read: `services.state` says so.
        return;
    };
    if !required {
        let value = if switches > 0 {
            format!("not required (profile status.require_fabric_manager = false; nvidia-fabricmanager {state})")
        } else {
            format!("no NVSwitch on PCI (nvidia-fabricmanager {state})")
        };
        out.push(
            "services.fabricmanager",
            "services",
            None,
            Severity::NotApplicable,
            value,
            None,
        );
        return;
    }
    let driver = s
        .nvml
        .driver_version
        .clone()
        .or_else(|| s.host.kernel_module_version.clone());
    let pkg = fabric_manager_package(driver.as_deref().unwrap_or("0"));
    if state == "active" {
        out.push(
            "services.fabricmanager",
            "services",
            None,
            Severity::Ok,
            format!("nvidia-fabricmanager active {why}"),
            None,
        );
    } else {
        out.push(
            "services.fabricmanager",
            "services",
            None,
            Severity::Critical,
            format!("nvidia-fabricmanager {state} {why}"),
            Some(format!(
                "`systemctl enable --now nvidia-fabricmanager` ({pkg} of the driver's exact version; `gpuhost apply` installs and locks it); CUDA fails on NVSwitch systems until it runs and the fabric registers"
            )),
        );
    }
    let Some(fm) = &sv.fabricmanager_version else {
        return; // not asked (a snapshot from before the question, or --root)
    };
    let (sev, value, hint) = match (&fm.error, &fm.version, &driver) {
        (Some(e), _, _) => (
            Severity::Unknown,
            format!("Fabric Manager version not read: {e}"),
            Some(format!("check `rpm -q {pkg}` against the driver's version")),
        ),
        (None, None, d) => (
            Severity::Critical,
            format!("Fabric Manager not installed ({pkg} not found)"),
            Some(match d {
                Some(d) => format!("install {pkg}-{d} (`gpuhost apply` does, and locks it)"),
                None => format!("install {pkg} of the driver's exact version (`gpuhost apply`)"),
            }),
        ),
        (None, Some(v), Some(d)) if v == d => (
            Severity::Ok,
            format!(
                "{} {v} = driver {d}",
                fm.package.as_deref().unwrap_or(pkg)
            ),
            None,
        ),
        (None, Some(v), Some(d)) => (
            Severity::Critical,
            format!(
                "{} {v}, driver {d}: Fabric Manager must be the driver's exact version",
                fm.package.as_deref().unwrap_or(pkg)
            ),
            Some(format!(
                "install {pkg}-{d} (`gpuhost apply` does, and locks it against `dnf update`), then `systemctl restart nvidia-fabricmanager`; another version leaves the fabric unregistered"
            )),
        ),
        (None, Some(v), None) => (
            Severity::Unknown,
            format!(
                "{} {v}; the driver's version is not known",
                fm.package.as_deref().unwrap_or(pkg)
            ),
            Some("see the driver checks above".into()),
        ),
    };
    out.push(
        "services.fabricmanager_version",
        "services",
        None,
        sev,
        value,
        hint,
    );
}

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

fn xids(out: &mut Out, s: &Snapshot, gpu_refs: &[GpuRef], pci_refs: &[GpuRef]) {
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

/// An NVML reading that failed: GpuLost is CRITICAL, anything else UNKNOWN.
fn reading_error(out: &mut Out, id: &str, group: &str, r: &GpuRef, e: &str) {
    if e == "GpuLost" {
        out.push(
            id,
            group,
            Some(r),
            Severity::Critical,
            "GPU lost (NVML: GPU is lost)",
            Some("drain the node and reboot; look for XID 79".into()),
        );
    } else if e == "NoPermission" {
        out.push(
            id,
            group,
            Some(r),
            Severity::Unknown,
            "NVML: no permission",
            Some("run as root".into()),
        );
    } else {
        out.push(
            id,
            group,
            Some(r),
            Severity::Unknown,
            format!("NVML error: {e}"),
            Some("see `nvidia-smi -q` and the kernel log".into()),
        );
    }
}

/// Push the verdict for one reading: n/a when unsupported, the error's verdict on error,
/// otherwise `f`'s (severity, value, hint).
fn judge<T>(
    out: &mut Out,
    id: &str,
    group: &str,
    r: &GpuRef,
    reading: &Reading<T>,
    f: impl FnOnce(&T) -> (Severity, String, Option<String>),
) {
    match reading {
        Reading::Value(v) => {
            let (sev, value, hint) = f(v);
            out.push(id, group, Some(r), sev, value, hint);
        }
        Reading::NotSupported => out.push(id, group, Some(r), Severity::NotApplicable, "n/a", None),
        Reading::Error(e) => reading_error(out, id, group, r, e),
    }
}

fn gpu_checks(out: &mut Out, g: &GpuSnapshot, r: &GpuRef, nvswitch: bool) {
    let reset = |i: u32| format!("drain GPU {i}, then reset it (`nvidia-smi -r -i {i}`) or reboot");
    judge(out, "gpu.ecc.mode", "ecc", r, &g.ecc_mode, |m| {
        match (m.current, m.pending) {
            (c, p) if c != p => (
                Severity::Warning,
                format!("ECC {} now, {} after reset", onoff(c), onoff(p)),
                Some(format!(
                    "the ECC change takes effect after a reset: {}",
                    reset(g.index)
                )),
            ),
            (false, _) => (
                Severity::Warning,
                "ECC disabled".into(),
                Some(format!(
                    "enable it (`nvidia-smi -i {} -e 1`) and reset the GPU",
                    g.index
                )),
            ),
            _ => (Severity::Ok, "ECC enabled".into(), None),
        }
    });
    judge(
        out,
        "gpu.ecc.volatile_uncorrected",
        "ecc",
        r,
        &g.ecc_volatile_uncorrected,
        |n| {
            if *n > 0 {
                (
                    Severity::Critical,
                    format!("{n} uncorrectable ECC error(s) since the driver loaded"),
                    Some(format!("{}; RMA if they recur", reset(g.index))),
                )
            } else {
                (Severity::Ok, "0 volatile uncorrectable".into(), None)
            }
        },
    );
    judge(
        out,
        "gpu.ecc.aggregate_uncorrected",
        "ecc",
        r,
        &g.ecc_aggregate_uncorrected,
        |n| {
            if *n > 0 {
                (
                    Severity::Warning,
                    format!("{n} uncorrectable ECC error(s) over the GPU's life"),
                    Some("watch row remapping; replace the GPU if the count keeps growing".into()),
                )
            } else {
                (Severity::Ok, "0 aggregate uncorrectable".into(), None)
            }
        },
    );
    judge(
        out,
        "gpu.retired_pages",
        "memory",
        r,
        &g.retired_pages_pending,
        |p| {
            if *p {
                (
                    Severity::Warning,
                    "page retirement pending".into(),
                    Some(format!(
                        "retirement takes effect after a reset: {}",
                        reset(g.index)
                    )),
                )
            } else {
                (Severity::Ok, "no page retirement pending".into(), None)
            }
        },
    );
    judge(
        out,
        "gpu.remap.failure",
        "memory",
        r,
        &g.remapped_rows,
        |m| {
            if m.failure {
                (
                    Severity::Critical,
                    "row remapping failed".into(),
                    Some("the GPU has no spare rows left: drain it and replace it (RMA)".into()),
                )
            } else {
                (Severity::Ok, "no remap failure".into(), None)
            }
        },
    );
    judge(
        out,
        "gpu.remap.pending",
        "memory",
        r,
        &g.remapped_rows,
        |m| {
            if m.pending {
                (
                    Severity::Warning,
                    "row remap pending".into(),
                    Some(format!(
                        "the remap takes effect after a reset: {}",
                        reset(g.index)
                    )),
                )
            } else {
                (Severity::Ok, "no remap pending".into(), None)
            }
        },
    );
    judge(
        out,
        "gpu.remap.uncorrectable",
        "memory",
        r,
        &g.remapped_rows,
        |m| {
            let v = format!(
                "{} uncorrectable, {} correctable rows remapped",
                m.uncorrectable, m.correctable
            );
            if m.uncorrectable > MAX_UNCORRECTABLE_REMAPPED_ROWS {
                (
                    Severity::Critical,
                    format!("{v} (> {MAX_UNCORRECTABLE_REMAPPED_ROWS})"),
                    Some("past the replacement threshold: drain the GPU and RMA it".into()),
                )
            } else {
                (Severity::Ok, v, None)
            }
        },
    );
    judge(
        out,
        "gpu.recovery_action",
        "recovery",
        r,
        &g.recovery_action,
        |a| match a {
            0 => (Severity::Ok, "none".into(), None),
            1 => (
                Severity::Critical,
                "driver asks for a GPU reset".into(),
                Some(reset(g.index)),
            ),
            2 => (
                Severity::Critical,
                "driver asks for a node reboot".into(),
                Some("drain the node and reboot".into()),
            ),
            3 => (
                Severity::Warning,
                "driver asks to drain peer-to-peer traffic".into(),
                Some("stop P2P/NVLink jobs on this GPU, then reset it".into()),
            ),
            4 => (
                Severity::Critical,
                "driver asks to drain and reset".into(),
                Some(reset(g.index)),
            ),
            x => (
                Severity::Warning,
                format!("recovery action {x}"),
                Some("see NVIDIA's documentation for nvmlDeviceGpuRecoveryAction".into()),
            ),
        },
    );
    let slow = g.temperature_slowdown_c.value().copied();
    judge(
        out,
        "gpu.temperature",
        "thermal",
        r,
        &g.temperature_c,
        |t| {
            let v = match slow {
                Some(s) => format!("{t} °C (slowdown {s} °C)"),
                None => format!("{t} °C"),
            };
            match slow {
                Some(s) if *t >= s => (
                    Severity::Critical,
                    v,
                    Some(
                        "the GPU is throttling for heat: check fans, airflow, inlet temperature"
                            .into(),
                    ),
                ),
                Some(s) if *t + TEMP_MARGIN_C >= s => (
                    Severity::Warning,
                    v,
                    Some("close to thermal slowdown: check airflow".into()),
                ),
                _ => (Severity::Ok, v, None),
            }
        },
    );
    judge(
        out,
        "gpu.clock_events",
        "thermal",
        r,
        &g.clock_event_reasons,
        |bits| {
            let mut bad = Vec::new();
            for (bit, name) in [
                (reasons::HW_SLOWDOWN, "HW slowdown"),
                (reasons::HW_THERMAL, "HW thermal slowdown"),
                (reasons::HW_POWER_BRAKE, "HW power brake"),
                (reasons::SW_THERMAL, "SW thermal slowdown"),
            ] {
                if bits & bit != 0 {
                    bad.push(name);
                }
            }
            if bad.is_empty() {
                let state = if bits & reasons::GPU_IDLE != 0 {
                    "idle"
                } else if bits & reasons::SW_POWER_CAP != 0 {
                    "power capped (normal under load)"
                } else {
                    "none"
                };
                (
                    Severity::Ok,
                    format!("clock events: {state} (0x{bits:x})"),
                    None,
                )
            } else {
                (
                    Severity::Warning,
                    format!("clocks held down: {} (0x{bits:x})", bad.join(", ")),
                    Some("check cooling, PSUs and the BMC's power-brake signal".into()),
                )
            }
        },
    );
    let default = g.power_limit_default_mw.value().copied();
    judge(
        out,
        "gpu.power_limit",
        "power",
        r,
        &g.power_limit_enforced_mw,
        |enf| match default {
            Some(d) if *enf < d => (
                Severity::Warning,
                format!("enforced {} W below default {} W", enf / 1000, d / 1000),
                Some(format!(
                    "if not intended: `nvidia-smi -i {} -pl {}`, and check the BMC's power capping",
                    g.index,
                    d / 1000
                )),
            ),
            Some(d) => (
                Severity::Ok,
                format!("enforced {} W (default {} W)", enf / 1000, d / 1000),
                None,
            ),
            None => (Severity::Ok, format!("enforced {} W", enf / 1000), None),
        },
    );
    pcie(out, g, r);
    judge(
        out,
        "gpu.persistence",
        "config",
        r,
        &g.persistence_mode,
        |p| {
            if *p {
                (Severity::Ok, "persistence mode on".into(), None)
            } else {
                (
                    Severity::Warning,
                    "persistence mode off".into(),
                    Some("`systemctl enable --now nvidia-persistenced`".into()),
                )
            }
        },
    );
    judge(out, "gpu.mig", "config", r, &g.mig_mode, |m| {
        if m.current != m.pending {
            (
                Severity::Warning,
                format!(
                    "MIG {} now, {} after reset",
                    onoff(m.current != 0),
                    onoff(m.pending != 0)
                ),
                Some(format!(
                    "the MIG change takes effect after a reset: {}",
                    reset(g.index)
                )),
            )
        } else {
            (Severity::Ok, format!("MIG {}", onoff(m.current != 0)), None)
        }
    });
    judge(out, "gpu.nvlink", "nvlink", r, &g.nvlinks, |links| {
        nvlink_verdict(links, g.index, nvswitch)
    });
    judge(out, "gpu.fabric", "fabric", r, &g.fabric, |f| {
        fabric_verdict(f, g.index)
    });
}

/// NVLink: every link up and error-free. A link down is CRITICAL on an NVSwitch (HGX) node,
/// where every link must be up, else a WARNING; nonzero replay, recovery or CRC counters are a
/// WARNING naming the links.
pub fn nvlink_verdict(
    links: &[NvLink],
    index: u32,
    nvswitch: bool,
) -> (Severity, String, Option<String>) {
    if links.is_empty() {
        return (Severity::NotApplicable, "no NVLink".into(), None);
    }
    let inactive: Vec<String> = links
        .iter()
        .filter(|l| !l.active)
        .map(|l| l.link.to_string())
        .collect();
    let sum = |f: fn(&NvLink) -> Option<u64>| -> u64 { links.iter().filter_map(f).sum() };
    let mut v = format!(
        "{}/{} links active; errors: replay {}, recovery {}, CRC flit {}, CRC data {}",
        links.len() - inactive.len(),
        links.len(),
        sum(|l| l.replay_errors),
        sum(|l| l.recovery_errors),
        sum(|l| l.crc_flit_errors),
        sum(|l| l.crc_data_errors)
    );
    let erring: Vec<String> = links
        .iter()
        .filter_map(|l| {
            let parts: Vec<String> = [
                ("replay", l.replay_errors),
                ("recovery", l.recovery_errors),
                ("CRC flit", l.crc_flit_errors),
                ("CRC data", l.crc_data_errors),
            ]
            .iter()
            .filter_map(|(k, n)| n.filter(|n| *n > 0).map(|n| format!("{k} {n}")))
            .collect();
            (!parts.is_empty()).then(|| format!("link {} {}", l.link, parts.join(" ")))
        })
        .collect();
    if !inactive.is_empty() {
        v.push_str(&format!("; down: link {}", inactive.join(",")));
    }
    if !erring.is_empty() {
        v.push_str(&format!("; {}", erring.join("; ")));
    }
    if !inactive.is_empty() {
        let (sev, hint) = if nvswitch {
            (
                Severity::Critical,
                format!(
                    "drain the node: on an NVSwitch system every link must be up, or the GPU loses NVLink bandwidth or drops out of the fabric; `nvidia-smi nvlink -s -i {index}`, then reset the GPU (`nvidia-smi -r -i {index}`) or reboot; if the link stays down, the baseboard or GPU needs service"
                ),
            )
        } else {
            (
                Severity::Warning,
                format!(
                    "check the NVLink bridge; `nvidia-smi nvlink -s -i {index}`; reset the GPU (`nvidia-smi -r -i {index}`)"
                ),
            )
        };
        (sev, v, Some(hint))
    } else if !erring.is_empty() {
        (
            Severity::Warning,
            v,
            Some(format!(
                "NVLink errors since the driver loaded: watch whether they grow (`nvidia-smi nvlink -e -i {index}`); run DCGM diagnostics and service the link if they keep rising"
            )),
        )
    } else {
        (Severity::Ok, v, None)
    }
}

/// One field of NVML's fabric health mask.
fn mask_field(mask: u32, shift: u32, width: u32) -> u32 {
    (mask >> shift) & width
}

/// Fabric registration (NVSwitch systems): state completed with status success is OK.
pub fn fabric_verdict(f: &Fabric, index: u32) -> (Severity, String, Option<String>) {
    const TRUE: u32 = 1;
    let degraded = mask_field(f.health_mask, 0, 0x3) == TRUE;
    let route_recovery = mask_field(f.health_mask, 2, 0x3) == TRUE;
    let route_unhealthy = mask_field(f.health_mask, 4, 0x3) == TRUE;
    let timeout_recovery = mask_field(f.health_mask, 6, 0x3) == TRUE;
    let config = match mask_field(f.health_mask, 8, 0xf) {
        2 => Some("incorrect system GUID"),
        3 => Some("incorrect chassis serial number"),
        4 => Some("no partition"),
        5 => Some("insufficient NVLinks"),
        _ => None,
    };
    let fm_log = "check nvidia-fabricmanager (`systemctl status nvidia-fabricmanager`, /var/log/fabricmanager.log): it must run at the driver's exact version";
    match f.state {
        3 if f.status != 0 => {
            let name = match nvml_wrapper::error::nvml_try(f.status) {
                Ok(()) => String::new(),
                Err(e) => format!(": {}", error_name(&e)),
            };
            (
                Severity::Critical,
                format!(
                    "fabric registration completed with a failure (NVML status {}{name})",
                    f.status
                ),
                Some(format!(
                    "{fm_log}; restart it, then reset GPU {index} (`nvidia-smi -r -i {index}`) or reboot"
                )),
            )
        }
        3 if route_unhealthy || config.is_some() => (
            Severity::Critical,
            format!(
                "fabric registered but {}",
                config.unwrap_or("its route is unhealthy")
            ),
            Some(format!("{fm_log}; see the NVSwitch links; drain and reboot")),
        ),
        3 if degraded || route_recovery || timeout_recovery => {
            let mut what = Vec::new();
            if degraded {
                what.push("bandwidth degraded");
            }
            if route_recovery {
                what.push("route recovery in progress");
            }
            if timeout_recovery {
                what.push("access-timeout recovery in progress");
            }
            (
                Severity::Warning,
                format!("fabric registered; {}", what.join(", ")),
                Some("check the NVSwitch links and the fabric manager's log".into()),
            )
        }
        3 => (
            Severity::Ok,
            format!(
                "fabric registered (state completed, status success, clique {})",
                f.clique_id
            ),
            None,
        ),
        1 => (
            Severity::Critical,
            "fabric registration not started".into(),
            Some(format!(
                "{fm_log}; start it (`systemctl enable --now nvidia-fabricmanager`); CUDA fails on this GPU until the fabric registers"
            )),
        ),
        2 => (
            Severity::Warning,
            "fabric registration in progress".into(),
            Some(format!(
                "normal for a minute after boot or a fabric manager start; if it stays, {fm_log}"
            )),
        ),
        x => (Severity::Unknown, format!("fabric state {x}"), None),
    }
}

/// NVML's error as a short name (`NotSupported`, `InsufficientResources`).
fn error_name(e: &nvml_wrapper::error::NvmlError) -> String {
    let dbg = format!("{e:?}");
    dbg.split('(').next().unwrap_or(&dbg).to_string()
}

fn pcie(out: &mut Out, g: &GpuSnapshot, r: &GpuRef) {
    let (cg, mg, cw, mw) = (
        &g.pcie_gen_current,
        &g.pcie_gen_max,
        &g.pcie_width_current,
        &g.pcie_width_max,
    );
    let idle = g
        .clock_event_reasons
        .value()
        .is_some_and(|b| b & reasons::GPU_IDLE != 0);
    match (cg, mg, cw, mw) {
        (Reading::Value(cg), Reading::Value(mg), Reading::Value(cw), Reading::Value(mw)) => {
            let v = format!("Gen{cg} x{cw} (max Gen{mg} x{mw})");
            if cw < mw {
                out.push(
                    "gpu.pcie",
                    "pcie",
                    Some(r),
                    Severity::Warning,
                    format!("link narrower than it can: {v}"),
                    Some("reseat the card or riser; check the slot".into()),
                );
            } else if cg < mg && !idle {
                out.push(
                    "gpu.pcie",
                    "pcie",
                    Some(r),
                    Severity::Warning,
                    format!("link below its generation under load: {v}"),
                    Some("check BIOS PCIe settings, risers, retimers".into()),
                );
            } else if cg < mg {
                out.push(
                    "gpu.pcie",
                    "pcie",
                    Some(r),
                    Severity::Ok,
                    format!("{v}; idle links downshift"),
                    None,
                );
            } else {
                out.push("gpu.pcie", "pcie", Some(r), Severity::Ok, v, None);
            }
        }
        (Reading::Error(e), ..) | (_, Reading::Error(e), ..) => {
            reading_error(out, "gpu.pcie", "pcie", r, e)
        }
        _ => out.push(
            "gpu.pcie",
            "pcie",
            Some(r),
            Severity::NotApplicable,
            "n/a",
            None,
        ),
    }
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}
