//! DCGM level 1's software checks that are not per GPU: the device nodes CUDA opens, the CUDA
//! driver API (libcuda.so.1 loads, `cuInit` succeeds), and one VBIOS, InfoROM image and
//! driver across the GPUs of one model. (Per GPU: the InfoROM and GSP firmware checks in
//! [`super::gpu`]; persistence mode, page retirement and row remapping were there already.)

use std::collections::BTreeMap;

use super::model::Severity;
use super::out::{advise, cuda_major_minor, na, ok, Out, Verdict};
use crate::cuda::cu_result;
use crate::expect::Expect;
use crate::snapshot::{DevNode, NextBoot, ProbeStatus, SecureBootState, Snapshot};

/// NVIDIA's default mode for its device nodes (`NVreg_DeviceFileMode`).
const DEFAULT_MODE: u32 = 0o666;

/// `driver.dev_nodes`: `/dev/nvidiactl` and `/dev/nvidia<minor>` of every GPU NVML sees exist as
/// character devices the running user can open read-write.
pub(super) fn dev_nodes(out: &mut Out, s: &Snapshot, have_gpus: bool) {
    let h = &s.host;
    let v = if !have_gpus && h.kernel_module_version.is_none() {
        na("no NVIDIA GPU, no driver")
    } else if let Some(e) = &h.dev_error {
        advise(Severity::Unknown, e.clone(), "run where /dev can be listed")
    } else if let Some(nodes) = &h.dev_nodes {
        nodes_verdict(s, nodes)
    } else {
        na("device nodes not collected in this snapshot")
    };
    out.say("driver.dev_nodes", "driver", None, v);
}

/// The device nodes listed: CRITICAL when one CUDA opens is missing, a WARNING when this user
/// cannot open them read-write.
fn nodes_verdict(s: &Snapshot, nodes: &[DevNode]) -> Verdict {
    let mut want: Vec<String> = vec!["/dev/nvidiactl".into()];
    let minors: Vec<u32> = s
        .nvml
        .gpus
        .iter()
        .filter_map(|g| g.minor_number.value().copied())
        .collect();
    want.extend(minors.iter().map(|m| format!("/dev/nvidia{m}")));
    let node = |p: &str| nodes.iter().find(|n| n.path == p);
    let missing: Vec<&str> = want
        .iter()
        .map(String::as_str)
        .filter(|p| node(p).is_none_or(|n| !n.char_device))
        .collect();
    let no_gpu_node = minors.is_empty()
        && !nodes.iter().any(|n| {
            n.char_device
                && n.path
                    .trim_start_matches("/dev/nvidia")
                    .parse::<u32>()
                    .is_ok()
        });
    let uid = s.host.uid;
    let denied: Vec<String> = nodes
        .iter()
        .filter(|n| n.char_device && uid != 0)
        .filter(|n| {
            let rw = |bits: u32| bits & 0o6 == 0o6;
            !(rw(n.mode) || (n.uid == uid && rw(n.mode >> 6)))
        })
        .map(|n| format!("{} {:o} {}:{}", n.path, n.mode, n.uid, n.gid))
        .collect();
    let value = nodes_value(nodes);
    if !missing.is_empty() || no_gpu_node {
        let what = if missing.is_empty() {
            "no /dev/nvidia<N>".to_string()
        } else {
            format!("missing: {}", missing.join(", "))
        };
        advise(
            Severity::Critical,
            format!("{what}; {value}"),
            "CUDA cannot open the GPU: load the driver and let it create the nodes (`nvidia-modprobe -c 0 -u`, or start nvidia-persistenced)",
        )
    } else if !denied.is_empty() {
        advise(
            Severity::Warning,
            format!(
                "no read-write access for uid {uid} (unless by group): {}; {value}",
                denied.join(", ")
            ),
            "CUDA jobs of this user cannot open the GPU: check NVreg_DeviceFileUID/GID/Mode in the nvidia module options, or run in the owning group",
        )
    } else {
        ok(value)
    }
}

/// The nodes there are, with `/dev/nvidia-uvm`'s absence and modes other than NVIDIA's default
/// said.
fn nodes_value(nodes: &[DevNode]) -> String {
    let odd_modes: Vec<String> = nodes
        .iter()
        .filter(|n| n.char_device && n.mode != DEFAULT_MODE)
        .map(|n| format!("{} {:o}", n.path, n.mode))
        .collect();
    let uvm = nodes.iter().any(|n| n.path == "/dev/nvidia-uvm");
    let listed: Vec<&str> = nodes.iter().map(|n| n.path.as_str()).collect();
    let mut value = if listed.is_empty() {
        "no /dev/nvidia* nodes".to_string()
    } else {
        listed.join(", ")
    };
    if !uvm {
        value.push_str(
            "; /dev/nvidia-uvm not created yet (nvidia-modprobe makes it on the first CUDA use)",
        );
    }
    if !odd_modes.is_empty() {
        value.push_str(&format!(
            "; mode other than NVIDIA's default 0666: {}",
            odd_modes.join(", ")
        ));
    }
    value
}

/// `cuda.init`: libcuda.so.1 loads and `cuInit(0)` succeeds in the probe.
pub(super) fn cuda_init(out: &mut Out, s: &Snapshot, have_gpus: bool) {
    const ID: &str = "cuda.init";
    let Some(c) = &s.nvml.cuda else {
        if s.nvml.status == ProbeStatus::Ok {
            out.push(
                ID,
                "software",
                None,
                Severity::NotApplicable,
                "CUDA check not run",
                None,
            );
        }
        return;
    };
    let driver = c
        .driver_version
        .map(cuda_major_minor)
        .map(|(major, minor)| format!(" (CUDA driver API {major}.{minor})"))
        .unwrap_or_default();
    let (sev, value, hint) = match (c.loaded, c.init_rc) {
        (true, Some(0)) => (
            Severity::Ok,
            if c.cached {
                format!("libcuda.so.1 loads, cuInit succeeded{driver} (kept from an earlier run: same boot, driver and device nodes)")
            } else {
                format!(
                    "libcuda.so.1 loads, cuInit succeeded{driver} in {:.0} ms",
                    c.init_ms.unwrap_or(0.0)
                )
            },
            None,
        ),
        (false, _) => (
            if have_gpus { Severity::Critical } else { Severity::NotApplicable },
            c.error.clone().unwrap_or_else(|| "libcuda.so.1 not loadable".into()),
            Some("install the driver's CUDA library (libcuda.so.1 comes with the NVIDIA driver; `gpuhost apply`) and run ldconfig".into()),
        ),
        (true, rc) => {
            let rc = rc.unwrap_or(-1);
            let hint = match rc {
                100 => "CUDA sees no device: check CUDA_VISIBLE_DEVICES, the device nodes above and the cgroup's device access",
                802 => "system not ready: on NVSwitch systems nvidia-fabricmanager must run and the fabric must register",
                803 | 804 => "the CUDA driver library does not match the kernel module: reboot or reload the driver",
                _ => "see the kernel log (XIDs) and `nvidia-smi`; reset the GPU or reboot if it persists",
            };
            (
                Severity::Critical,
                format!("cuInit(0) failed: {rc} {}{driver}", cu_result(rc)),
                Some(hint.into()),
            )
        }
    };
    out.push(ID, "software", None, sev, value, hint);
}

/// `gpu.consistency`: one VBIOS and one InfoROM image per GPU model, and the kernel module's
/// driver version equal to NVML's.
pub(super) fn consistency(out: &mut Out, s: &Snapshot) {
    const ID: &str = "gpu.consistency";
    let mut by_model: BTreeMap<&str, Vec<&crate::snapshot::GpuSnapshot>> = BTreeMap::new();
    for g in &s.nvml.gpus {
        by_model
            .entry(g.name.value().map(String::as_str).unwrap_or("?"))
            .or_default()
            .push(g);
    }
    let mut problems: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (model, gpus) in &by_model {
        for (what, get) in [
            (
                "VBIOS",
                (|g: &crate::snapshot::GpuSnapshot| g.vbios_version.value().cloned())
                    as fn(&crate::snapshot::GpuSnapshot) -> Option<String>,
            ),
            ("InfoROM image", |g| {
                g.inforom.value().and_then(|i| i.image_version.clone())
            }),
        ] {
            let mut versions: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            for g in gpus {
                if let Some(v) = get(g) {
                    versions.entry(v).or_default().push(g.index);
                }
            }
            match versions.len() {
                0 => {}
                1 => seen.push(format!(
                    "{model} ×{}: {what} {}",
                    gpus.len(),
                    versions.keys().next().map(String::as_str).unwrap_or("")
                )),
                _ => problems.push(format!(
                    "{model}: {what} differs: {}",
                    versions
                        .iter()
                        .map(|(v, idx)| format!(
                            "{v} on GPU {}",
                            idx.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                        ))
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
            }
        }
    }
    if let (Some(k), Some(n)) = (&s.host.kernel_module_version, &s.nvml.driver_version) {
        if k != n {
            problems.push(format!("kernel module {k}, NVML driver {n}"));
        } else {
            seen.push(format!("driver {n}"));
        }
    }
    if problems.is_empty() {
        let value = if seen.is_empty() {
            "no VBIOS or InfoROM versions reported".to_string()
        } else {
            seen.join("; ")
        };
        out.push(ID, "software", None, Severity::Ok, value, None);
    } else {
        out.push(
            ID,
            "software",
            None,
            Severity::Warning,
            problems.join("; "),
            Some("GPUs of one model should run one VBIOS and InfoROM image (update with the vendor's firmware bundle), and the loaded module the installed driver (reboot)".into()),
        );
    }
}

/// `driver.next_boot`: the default boot kernel has an `nvidia` module of the loaded driver's
/// version (else of the profile's), as modprobe would find it; `driver.kernel_guard`: what the
/// kernel guard held back ([`gpuhost_engine::bootguard`]).
pub(super) fn next_boot(out: &mut Out, s: &Snapshot, expect: &Expect, have_gpus: bool) {
    let Some(nb) = &s.host.next_boot else {
        return;
    };
    if let Some(g) = &nb.guard {
        out.say(
            "driver.kernel_guard",
            "driver",
            None,
            advise(
                Severity::Critical,
                format!(
                    "default boot entry kept on {} because the new kernel {} has no NVIDIA {} module: {} (since {})",
                    g.kept, g.kernel, g.driver, g.reason, g.at
                ),
                format!(
                    "fix what the reason says, then run `{}`: it builds the module for {} and makes it the default again",
                    g.fix, g.kernel
                ),
            ),
        );
    }
    let v = if let Some(e) = &nb.error {
        advise(
            Severity::Unknown,
            e.clone(),
            "run as root, or check /boot and /lib/modules",
        )
    } else if let Some(k) = &nb.kernel {
        next_kernel_verdict(s, nb, k, expect, have_gpus)
    } else {
        na("no default boot kernel found (no EL boot loader entries and kernels)")
    };
    out.say("driver.next_boot", "driver", None, v);
    if nb.error.is_none() && nb.kernel.is_some() {
        let v = bootable_verdict(nb, expect, have_gpus);
        out.say("driver.bootable_kernels", "driver", None, v);
    }
}

/// `driver.bootable_kernels`: every installed kernel besides the default one has an `nvidia`
/// module modprobe would load; one without boots without the GPUs when picked from the boot
/// menu or fallen back to (WARNING: the default boot is `driver.next_boot`'s).
fn bootable_verdict(nb: &NextBoot, expect: &Expect, have_gpus: bool) -> Verdict {
    if nb.without_module.is_empty() {
        return ok(format!(
            "every installed kernel besides the default has an NVIDIA module ({} other{})",
            nb.others_with_module.len(),
            if nb.others_with_module.len() == 1 {
                ""
            } else {
                "s"
            }
        ));
    }
    if expect.driver_version.is_none() && !have_gpus && !nb.loadable {
        return na("no NVIDIA GPU, no driver");
    }
    let list = nb.without_module.join(", ");
    advise(
        Severity::Warning,
        format!(
            "{} installed kernel{} without an NVIDIA module: {list}; booting {} (from the boot menu, or as a fallback) starts without the GPUs",
            nb.without_module.len(),
            if nb.without_module.len() == 1 { "" } else { "s" },
            if nb.without_module.len() == 1 { "it" } else { "one" }
        ),
        format!(
            "give each its module (with a kmod repo: `gpuhost kmod build --kernel-release {}` on the build host, then `gpuhost apply`; with DKMS: `dkms autoinstall -k {}`), or remove the kernels the node does not boot",
            nb.without_module[0], nb.without_module[0]
        ),
    )
}

/// The default boot kernel `k`'s module: of the driver wanted, else CRITICAL (the next reboot
/// loses the GPUs) with the fix and a kernel to fall back on.
fn next_kernel_verdict(
    s: &Snapshot,
    nb: &NextBoot,
    k: &str,
    expect: &Expect,
    have_gpus: bool,
) -> Verdict {
    let want = s
        .host
        .kernel_module_version
        .as_ref()
        .or(expect.driver_version.as_ref());
    let good = match want {
        Some(v) => nb.loadable && nb.module_version.as_ref() == Some(v),
        None => nb.loadable,
    };
    if good {
        return ok(format!("default boot kernel {k}: {}", nb.module));
    }
    if want.is_none() && !have_gpus && nb.others_with_module.is_empty() {
        return na(format!(
            "default boot kernel {k}: {}; no NVIDIA GPU, no driver",
            nb.module
        ));
    }
    let of = want
        .map(|v| format!(", not driver {v}"))
        .unwrap_or_default();
    let fallback = nb
        .others_with_module
        .iter()
        .find(|o| want.is_none() || o.version.as_ref() == want)
        .map(|o| &o.kernel)
        .or(nb.running.as_ref().filter(|r| *r != k));
    let mut hint =
        format!("run `gpuhost apply` (it installs {k}'s headers and builds the module for it)");
    if let Some(f) = fallback {
        hint.push_str(&format!(
            ", or keep booting a kernel that has it: `grubby --set-default /boot/vmlinuz-{f}`"
        ));
    }
    advise(
        Severity::Critical,
        format!(
            "the next reboot loses the GPUs: the default boot kernel {k} has {}{of}",
            nb.module
        ),
        hint,
    )
}

/// `driver.secure_boot`: with Secure Boot on, the NVIDIA modules the next boot loads must carry
/// a signature by a key the firmware trusts (`MokListRT`, `db`); unsigned, or signed by a key
/// that is not enrolled (or only pending in `MokNew`, which needs a console at the next boot),
/// the kernel refuses them.
pub(super) fn secure_boot(out: &mut Out, s: &Snapshot) {
    let Some(sb) = &s.host.secure_boot else {
        return;
    };
    let v = if !sb.enabled {
        na("Secure Boot is off")
    } else if let Some(e) = &sb.error {
        advise(Severity::Unknown, e.clone(), "run as root")
    } else if let Some(k) = &sb.kernel {
        if sb.modules.is_empty() {
            na(format!(
                "Secure Boot is on; kernel {k} has no NVIDIA module to check"
            ))
        } else {
            signatures_verdict(sb, k)
        }
    } else {
        na("Secure Boot is on; no kernel to check")
    };
    out.say("driver.secure_boot", "driver", None, v);
}

/// Kernel `k`'s NVIDIA modules under Secure Boot: each signed by an enrolled key, else
/// CRITICAL with what to do for each kind of fault.
fn signatures_verdict(sb: &SecureBootState, k: &str) -> Verdict {
    use gpuhost_host::secureboot::Trust;
    let mut bad = Vec::new();
    let mut hints = Vec::new();
    for m in &sb.modules {
        match (&m.error, &m.signer, &m.trust) {
            (Some(e), _, _) => bad.push(format!("{}: {e}", m.path)),
            (None, None, _) => {
                bad.push(format!("{} is unsigned", m.path));
                hints.push("name a Machine Owner Key in the profile (secure_boot.key, secure_boot.cert) and run `gpuhost apply`: DKMS rebuilds and signs the modules".to_string());
            }
            (None, Some(who), Some(Trust::Pending { .. })) => {
                bad.push(format!(
                    "{} is signed by {who}, whose enrollment is only pending",
                    m.path
                ));
                hints.push("confirm the key in MokManager at the console during the next boot (shim asks once)".to_string());
            }
            (None, Some(who), Some(Trust::Unknown) | None) => {
                bad.push(format!(
                    "{} is signed by {who}, which is not enrolled",
                    m.path
                ));
                hints.push("enroll the signing certificate: `mokutil --import CERT.der`, reboot and confirm it in MokManager at the console".to_string());
            }
            (None, Some(_), Some(Trust::Enrolled { .. })) => {}
        }
    }
    if bad.is_empty() {
        let who = sb
            .modules
            .iter()
            .filter_map(|m| match &m.trust {
                Some(Trust::Enrolled { list, subject }) => Some(format!("{subject} ({list})")),
                _ => None,
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ");
        return ok(format!(
            "Secure Boot is on; the NVIDIA modules of {k} are signed by {who}"
        ));
    }
    hints.dedup();
    advise(
        Severity::Critical,
        format!(
            "Secure Boot is on and the kernel will refuse the NVIDIA modules of {k}: {}",
            bad.join("; ")
        ),
        hints.join("; "),
    )
}
