//! The node's checks, in the order of the report: PCI, the driver, NVML, the GPU count,
//! services and Fabric Manager here; the GPUs' ([`super::gpu`]), the software's
//! ([`super::software`]), the XIDs ([`super::xid`]) and free space ([`super::space`]) called in
//! between.

use gpuhost_nvidia::hgx::fabric_manager_package_of as fabric_manager_package;

use super::gpu::GpuCtx;
use super::model::{GpuRef, Judgement, Severity};
use super::out::{advise, cuda_major_minor, key, na, nvml_bus_id, ok, Out, Verdict};
use super::{active, gpu, software, space, xid};
use crate::expect::Expect;
use crate::snapshot::{
    DaemonJson, FabricManagerVersion, GpuSnapshot, ImexDomain, PciDevice, PciKind, ProbeStatus,
    Reading, Snapshot,
};

/// All checks for a snapshot, and what the judging counted for the renderers.
pub fn judge(s: &Snapshot, expect: &Expect) -> Judgement {
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
    out.say(
        "pci.devices",
        "pci",
        None,
        pci_devices(s, pci_gpus.len(), host_gpus, switches),
    );
    for d in &s.host.pci {
        let r = pci_ref(d);
        pci_checks(&mut out, d, &r);
    }

    // The driver, without NVML.
    let have_gpus = !pci_gpus.is_empty();
    module_and_nouveau(&mut out, s, have_gpus);
    software::next_boot(&mut out, s, expect, have_gpus);
    software::secure_boot(&mut out, s);
    nvml_init(&mut out, s, have_gpus);
    if nvml_ok {
        driver_checks(&mut out, s, expect);
    }
    software::dev_nodes(&mut out, s, have_gpus);
    software::cuda_init(&mut out, s, have_gpus);
    let missing = not_seen_by_nvml(&pci_gpus, &gpu_refs);
    gpu_count(&mut out, s, expect, host_gpus, nvml_ok, &missing);
    services(&mut out, s, switches, expect);
    let xids = xid::xids(
        &mut out,
        s,
        &gpu_refs,
        &pci_gpus.iter().map(|d| pci_ref(d)).collect::<Vec<_>>(),
    );

    if nvml_ok {
        per_gpu(&mut out, s, expect, &gpu_refs, switches);
        software::consistency(&mut out, s);
    }
    space::checks(&mut out, s, expect);
    let mut active = Vec::new();
    active::checks(&mut out, s, &gpu_refs, &mut active);
    Judgement {
        checks: out.checks,
        xids,
        active,
    }
}

/// The GPUs on PCI (not given to VMs) that NVML does not see, by NVML bus id.
fn not_seen_by_nvml(pci_gpus: &[&PciDevice], gpu_refs: &[GpuRef]) -> Vec<String> {
    pci_gpus
        .iter()
        .filter(|d| d.driver.as_deref() != Some("vfio-pci"))
        .filter(|d| {
            let k = key(&d.address);
            !gpu_refs.iter().any(|g| key(&g.pci_bus_id) == k)
        })
        .map(|d| nvml_bus_id(&d.address))
        .collect()
}

/// `pci.devices`: the NVIDIA GPUs (and how many are bound to vfio-pci) and NVSwitches on PCI.
fn pci_devices(s: &Snapshot, pci_gpus: usize, host_gpus: usize, switches: usize) -> Verdict {
    match &s.host.pci_error {
        Some(e) => advise(
            Severity::Unknown,
            e.clone(),
            "run as a user who can read /sys/bus/pci",
        ),
        None => ok(format!(
            "{pci_gpus} NVIDIA GPU(s){}, {switches} NVSwitch(es) on PCI",
            if host_gpus != pci_gpus {
                format!(" ({} bound to vfio-pci)", pci_gpus - host_gpus)
            } else {
                String::new()
            }
        )),
    }
}

/// `driver.module` (the kernel module is loaded where there are GPUs) and `driver.nouveau`
/// (nouveau holds none of them).
fn module_and_nouveau(out: &mut Out, s: &Snapshot, have_gpus: bool) {
    let module = match (&s.host.kernel_module_version, have_gpus) {
        (Some(v), _) => ok(format!("kernel module {v} loaded")),
        (None, true) => advise(
            Severity::Critical,
            "nvidia kernel module not loaded (/proc/driver/nvidia/version absent)",
            "load it (`modprobe nvidia`; see `journalctl -k` for why it failed) or run `gpuhost apply`",
        ),
        (None, false) => na("no NVIDIA GPU on PCI, no kernel module"),
    };
    out.say("driver.module", "driver", None, module);
    let nouveau = match (s.host.nouveau_loaded, have_gpus) {
        (true, true) => advise(
            Severity::Critical,
            "nouveau is loaded and holds NVIDIA GPUs",
            "blacklist nouveau (`gpuhost apply` does), rebuild the initramfs and reboot",
        ),
        (true, false) => ok("nouveau loaded, no NVIDIA GPU"),
        (false, _) => ok("nouveau not loaded"),
    };
    out.say("driver.nouveau", "driver", None, nouveau);
}

/// Every GPU's own checks, its counters judged against the baseline kept from the last run.
fn per_gpu(out: &mut Out, s: &Snapshot, expect: &Expect, gpu_refs: &[GpuRef], switches: usize) {
    let secs = s
        .previous
        .as_ref()
        .map(|p| s.collected_at_ms.saturating_sub(p.at_ms) as f64 / 1000.0)
        .unwrap_or(0.0);
    for (g, r) in s.nvml.gpus.iter().zip(gpu_refs) {
        let before = s.previous.as_ref().and_then(|p| {
            g.uuid
                .value()
                .and_then(|u| p.gpus.get(u))
                .map(|c| (c, secs))
        });
        let ctx = GpuCtx {
            g,
            nvswitch: switches > 0,
            t: &expect.thresholds,
            before,
        };
        gpu::gpu_checks(out, &ctx, r);
    }
}

fn gpu_ref(g: &GpuSnapshot) -> GpuRef {
    GpuRef {
        index: Some(g.index),
        uuid: g.uuid.value().cloned(),
        pci_bus_id: g.pci_bus_id.value().cloned().unwrap_or_default(),
    }
}

/// `pci.config`, `pci.link` and `pci.aer` of one device on PCI.
fn pci_checks(out: &mut Out, d: &PciDevice, r: &GpuRef) {
    out.say("pci.config", "pci", Some(r), pci_config(d));
    out.say("pci.link", "pci", Some(r), pci_link(d));
    out.say("pci.aer", "pci", Some(r), pci_aer(d));
}

/// The device answers config space reads (all-ones: it fell off the bus).
fn pci_config(d: &PciDevice) -> Verdict {
    let what = match d.kind {
        PciKind::Gpu => "GPU",
        PciKind::NvSwitch => "NVSwitch",
    };
    if d.fell_off() {
        advise(
            Severity::Critical,
            format!("{what} {} fell off the bus: config space reads all-ones", d.address),
            "drain the node; look for XID 79 in the kernel log; reboot (a GPU reset rarely brings it back); reseat or RMA if it recurs",
        )
    } else if let Some(head) = &d.config_head {
        ok(format!("{what} {} answers ({head})", d.address))
    } else {
        advise(
            Severity::Unknown,
            format!(
                "cannot read config space: {}",
                d.config_error.as_deref().unwrap_or("unknown error")
            ),
            "run as root",
        )
    }
}

/// The link trained at its full width.
fn pci_link(d: &PciDevice) -> Verdict {
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
                advise(
                    Severity::Warning,
                    format!("link trained narrower than it can: {value}"),
                    "reseat the card or riser; check the slot; compare `lspci -vv` LnkSta/LnkCap",
                )
            } else {
                ok(value)
            }
        }
        _ => na("link attributes not in sysfs"),
    }
}

/// PCIe errors since boot (AER): fatal CRITICAL, non-fatal a WARNING.
fn pci_aer(d: &PciDevice) -> Verdict {
    match &d.aer {
        Some(a) if a.fatal > 0 => advise(
            Severity::Critical,
            format!("AER fatal {} non-fatal {} correctable {}", a.fatal, a.nonfatal, a.correctable),
            "fatal PCIe errors since boot: drain, check the kernel log, reseat / replace the riser or card",
        ),
        Some(a) if a.nonfatal > 0 => advise(
            Severity::Warning,
            format!("AER non-fatal {} correctable {}", a.nonfatal, a.correctable),
            "non-fatal PCIe errors since boot: watch the count; reseat if it grows",
        ),
        Some(a) => ok(format!("AER correctable {}", a.correctable)),
        None => na("no AER counters in sysfs"),
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
        Some(v) => {
            let (major, minor) = cuda_major_minor(v);
            out.push(
                "driver.cuda",
                "driver",
                None,
                Severity::Ok,
                // The same rules as `gpuhost compat` (gpuhost_nvidia::compat).
                match gpuhost_nvidia::compat::DriverVersion::parse(&got) {
                    Some(d) => format!(
                        "serves {}",
                        gpuhost_nvidia::compat::serves(
                            &d,
                            Some((major.unsigned_abs(), minor.unsigned_abs()))
                        )
                        .range()
                    ),
                    None => format!("supports CUDA up to {major}.{minor}"),
                },
                None,
            )
        }
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
            Some(if sv.no_systemd {
                "docker, nvidia-persistenced and nvidia-fabricmanager are systemd units: run `gpuhost status` on the host booted with systemd to check them".into()
            } else {
                "systemd's `systemctl` is needed to check docker, nvidia-persistenced, nvidia-fabricmanager".into()
            }),
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
    imex(out, s);
}

/// A Grace Blackwell superchip (GB200, GB300) on PCI: an NVL72 compute tray, which runs IMEX
/// for multi-node NVLink (what `apply` decides too: driver.imex unset).
fn grace_blackwell_on_pci(s: &Snapshot) -> Option<String> {
    s.host.pci.iter().find_map(|d| {
        gpuhost_host::gpu::kind_of_hex(&d.device_id)
            .filter(|k| k.grace && k.arch == gpuhost_host::gpu::Arch::Blackwell)
            .map(|k| format!("{} at {}", k.describe(), d.address))
    })
}

/// `services.imex` (nvidia-imex runs where it is wanted: on a Grace Blackwell NVL72 compute
/// tray, or wherever it is running) and `services.imex_domain` (`nvidia-imex-ctl -N`: the
/// domain is UP and every node READY).
fn imex(out: &mut Out, s: &Snapshot) {
    let sv = &s.services;
    let Some(state) = &sv.nvidia_imex else {
        // Unit states not read (`services.state` says so), or a snapshot from before.
        return;
    };
    let tray = grace_blackwell_on_pci(s);
    let verdict = match (&tray, state.as_str()) {
        (None, "active") => ok("nvidia-imex active"),
        (None, other) => na(format!(
            "no Grace Blackwell superchip on PCI (nvidia-imex {other})"
        )),
        (Some(gpu), "active") => ok(format!("nvidia-imex active ({gpu}: an NVL72 compute tray)")),
        (Some(gpu), other) => advise(
            Severity::Critical,
            format!("nvidia-imex {other} on {gpu} (an NVL72 compute tray)"),
            "multi-node NVLink memory sharing needs IMEX: list the domain's compute trays in /etc/nvidia-imex/nodes_config.cfg, then `systemctl enable --now nvidia-imex` (`gpuhost apply` installs and locks nvidia-imex at the driver's version)",
        ),
    };
    out.say("services.imex", "services", None, verdict);
    if let Some(d) = &sv.imex_domain {
        out.say("services.imex_domain", "services", None, imex_domain(d));
    }
}

/// The IMEX domain as `nvidia-imex-ctl -N` gave it.
fn imex_domain(d: &ImexDomain) -> Verdict {
    if let Some(e) = &d.error {
        return advise(
            Severity::Unknown,
            format!("IMEX domain not read: {e}"),
            "`nvidia-imex-ctl -N` needs the daemon's command service: IMEX_CMD_ENABLED=1 and IMEX_CMD_PORT in /etc/nvidia-imex/config.cfg, then `systemctl restart nvidia-imex`",
        );
    }
    let not_ready: Vec<String> = d
        .nodes
        .iter()
        .filter(|n| n.state != "READY")
        .map(|n| format!("#{} {} {}", n.index, n.address, n.state))
        .collect();
    let state = d.domain_state.as_deref().unwrap_or("not reported");
    let value = format!(
        "domain {state}, {}/{} node(s) READY",
        d.nodes.len() - not_ready.len(),
        d.nodes.len()
    );
    let check = "`nvidia-imex-ctl -N` on each tray; every tray's nodes_config.cfg must list the same addresses; /var/log/nvidia-imex.log";
    match (state, not_ready.is_empty()) {
        ("UP", true) => ok(value),
        ("UP", false) => advise(
            Severity::Warning,
            format!("{value}; not ready: {}", not_ready.join(", ")),
            check,
        ),
        _ => advise(
            Severity::Critical,
            if not_ready.is_empty() {
                value
            } else {
                format!("{value}; not ready: {}", not_ready.join(", "))
            },
            format!("CUDA cannot share memory across trays until the domain is UP: {check}"),
        ),
    }
}

fn docker(out: &mut Out, s: &Snapshot) {
    // Advice that fits the host: no GPU on PCI → nothing for the runtime to serve; no Docker →
    // no runtime to configure yet.
    let gpus = s.host.pci.iter().any(|d| d.kind == PciKind::Gpu);
    if !gpus && s.host.pci_error.is_none() {
        for (id, value) in [
            ("services.docker", "no NVIDIA GPU on PCI: Docker not judged"),
            ("services.nvidia_runtime", "nvidia runtime not needed"),
        ] {
            out.say(id, "containers", None, na(value));
        }
        return;
    }
    if s.host.docker_installed == Some(false) && !s.host.docker_daemon_json.present {
        out.say(
            "services.docker",
            "containers",
            None,
            advise(
                Severity::Warning,
                "Docker is not installed (no /usr/bin/dockerd): no GPU containers",
                "`gpuhost apply` installs Docker CE and the NVIDIA Container Toolkit with the nvidia runtime",
            ),
        );
        out.say(
            "services.nvidia_runtime",
            "containers",
            None,
            na("no Docker to configure"),
        );
        return;
    }
    if let Some(state) = &s.services.docker {
        let v = if state == "active" {
            ok("docker active")
        } else {
            advise(
                Severity::Warning,
                format!("docker {state}"),
                "`systemctl enable --now docker` (or `gpuhost apply`)",
            )
        };
        out.say("services.docker", "containers", None, v);
    }
    out.say(
        "services.nvidia_runtime",
        "containers",
        None,
        nvidia_runtime(&s.host.docker_daemon_json),
    );
}

/// `services.nvidia_runtime`: `/etc/docker/daemon.json` names the nvidia runtime.
fn nvidia_runtime(dj: &DaemonJson) -> Verdict {
    const CONFIGURE: &str = "`nvidia-ctk runtime configure --runtime=docker && systemctl restart docker` (or `gpuhost apply`)";
    if let Some(e) = &dj.error {
        advise(
            Severity::Warning,
            format!("/etc/docker/daemon.json: {e}"),
            "fix the file, then `nvidia-ctk runtime configure --runtime=docker`",
        )
    } else if dj.nvidia_runtime {
        ok(format!(
            "nvidia runtime configured{}",
            dj.default_runtime
                .as_deref()
                .map(|d| format!(" (default runtime {d})"))
                .unwrap_or_default()
        ))
    } else if dj.present {
        advise(
            Severity::Warning,
            "nvidia runtime not in /etc/docker/daemon.json",
            CONFIGURE,
        )
    } else {
        advise(
            Severity::Warning,
            "no /etc/docker/daemon.json: nvidia runtime not configured",
            CONFIGURE,
        )
    }
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
        out.say("services.fabricmanager", "services", None, na(value));
        return;
    }
    let driver = s
        .nvml
        .driver_version
        .clone()
        .or_else(|| s.host.kernel_module_version.clone());
    let pkg = fabric_manager_package(driver.as_deref().unwrap_or("0"));
    let unit = if state == "active" {
        ok(format!("nvidia-fabricmanager active {why}"))
    } else {
        advise(
            Severity::Critical,
            format!("nvidia-fabricmanager {state} {why}"),
            format!(
                "`systemctl enable --now nvidia-fabricmanager` ({pkg} of the driver's exact version; `gpuhost apply` installs and locks it); CUDA fails on NVSwitch systems until it runs and the fabric registers"
            ),
        )
    };
    out.say("services.fabricmanager", "services", None, unit);
    let Some(fm) = &sv.fabricmanager_version else {
        return; // not asked (a snapshot from before the question, or --root)
    };
    out.say(
        "services.fabricmanager_version",
        "services",
        None,
        fabric_manager_version(fm, driver.as_deref(), pkg),
    );
}

/// Fabric Manager's package is installed at the driver's exact version.
fn fabric_manager_version(fm: &FabricManagerVersion, driver: Option<&str>, pkg: &str) -> Verdict {
    let package = fm.package.as_deref().unwrap_or(pkg);
    match (&fm.error, &fm.version, driver) {
        (Some(e), _, _) => advise(
            Severity::Unknown,
            format!("Fabric Manager version not read: {e}"),
            format!("check `rpm -q {pkg}` against the driver's version"),
        ),
        (None, None, d) => advise(
            Severity::Critical,
            format!("Fabric Manager not installed ({pkg} not found)"),
            match d {
                Some(d) => format!("install {pkg}-{d} (`gpuhost apply` does, and locks it)"),
                None => format!("install {pkg} of the driver's exact version (`gpuhost apply`)"),
            },
        ),
        (None, Some(v), Some(d)) if v == d => ok(format!("{package} {v} = driver {d}")),
        (None, Some(v), Some(d)) => advise(
            Severity::Critical,
            format!("{package} {v}, driver {d}: Fabric Manager must be the driver's exact version"),
            format!(
                "install {pkg}-{d} (`gpuhost apply` does, and locks it against `dnf update`), then `systemctl restart nvidia-fabricmanager`; another version leaves the fabric unregistered"
            ),
        ),
        (None, Some(v), None) => advise(
            Severity::Unknown,
            format!("{package} {v}; the driver's version is not known"),
            "see the driver checks above",
        ),
    }
}
