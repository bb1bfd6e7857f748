//! Driver-free facts: NVIDIA devices on PCI (sysfs), config space, PCIe link and AER counters,
//! /proc/driver/nvidia/version, loaded modules, libnvidia-ml's version, Docker's daemon.json,
//! and systemd unit states.
//!
//! Every path is read through the library's [`Host`] (the live system, or an install root that
//! tests point at a crafted tree), and NVIDIA functions are found by the library's PCI walker
//! ([`gpuhost_host::facts::nvidia_functions`], the same as `gpuhost facts`). Nothing here
//! touches the NVIDIA driver: a hung driver cannot hang these reads.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use gpuhost_host::cmd::Cmd;
use gpuhost_host::facts::{nvidia_functions, NvidiaFunction, NvidiaPciFunction};
use gpuhost_host::host::Host;
use gpuhost_host::rootfs::Kind;
use gpuhost_nvidia::hgx::FABRIC_MANAGER_PACKAGES;

use crate::snapshot::{
    AerCounters, DaemonJson, DevNode, FabricManagerVersion, HostSnapshot, ImexDomain, ImexNode,
    KernelModule, ModuleSignature, NextBoot, NvmlLibrary, PciDevice, PciKind, SecureBootState,
    Services,
};

/// Directories where libnvidia-ml.so.1 lives on the distributions gpuhost meets.
const LIB_DIRS: &[&str] = &[
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib",
    "lib64",
    "usr/local/nvidia/lib64",
];

/// A text file on the host, trimmed; None when absent or unreadable.
fn read_trim(host: &Host, p: impl AsRef<Path>) -> Option<String> {
    host.read_opt(p)
        .ok()
        .flatten()
        .map(|s| s.trim().to_string())
}

/// Collect the host part of the snapshot on `host` (the live system, or an install root).
pub fn collect(host: &Host) -> HostSnapshot {
    let mut snap = HostSnapshot::default();
    match nvidia_functions(host) {
        Ok(fs) => snap.pci = fs.into_iter().map(|f| pci_device(host, f)).collect(),
        Err(e) => {
            snap.pci_error = Some(format!(
                "cannot list {}: {e}",
                host.path("/sys/bus/pci/devices").display()
            ))
        }
    }
    snap.proc_driver_version = read_trim(host, "/proc/driver/nvidia/version")
        .and_then(|s| s.lines().next().map(|l| l.trim().to_string()));
    snap.kernel_module_version = snap
        .proc_driver_version
        .as_deref()
        .and_then(parse_proc_version);
    snap.nvidia_module_loaded = host.exists("/sys/module/nvidia");
    snap.nouveau_loaded = host.exists("/sys/module/nouveau");
    snap.nvml_library = find_nvml_library(host);
    snap.docker_daemon_json = daemon_json(host, "/etc/docker/daemon.json");
    match dev_nodes(host) {
        Ok(n) => snap.dev_nodes = Some(n),
        Err(e) => snap.dev_error = Some(e),
    }
    snap.uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    snap.boot_id = read_trim(host, "/proc/sys/kernel/random/boot_id");
    snap.docker_installed = Some(host.exists("/usr/bin/dockerd"));
    snap.next_boot = Some(next_boot(host));
    let kernel = snap
        .next_boot
        .as_ref()
        .and_then(|nb| nb.kernel.clone().or_else(|| nb.running.clone()));
    snap.secure_boot = Some(secure_boot(host, kernel));
    snap
}

/// Secure Boot and, when it is on, who signed the NVIDIA modules `kernel` would load
/// ([`gpuhost_host::secureboot`]; a module file is read once per process while it is unchanged).
pub(crate) fn secure_boot(host: &Host, kernel: Option<String>) -> SecureBootState {
    use gpuhost_host::facts::{secure_boot, SecureBoot};
    use gpuhost_host::secureboot::module_signatures;
    use gpuhost_host::secureboot::Keys;
    let mut st = SecureBootState {
        enabled: secure_boot(host) == SecureBoot::Enabled,
        ..SecureBootState::default()
    };
    if !st.enabled {
        return st;
    }
    let Some(k) = kernel else {
        return st;
    };
    let keys = match Keys::read(host) {
        Ok(keys) => keys,
        Err(e) => {
            st.error = Some(format!("cannot read the enrolled keys: {e:#}"));
            Keys::default()
        }
    };
    let sigs = match module_signatures(host, &k) {
        Ok(sigs) => sigs,
        Err(e) => {
            st.error = Some(format!("cannot read the NVIDIA modules of {k}: {e:#}"));
            Vec::new()
        }
    };
    for (path, sig) in sigs {
        let mut m = ModuleSignature {
            path,
            ..ModuleSignature::default()
        };
        match sig {
            Ok(Some(s)) => {
                m.signer = Some(s.signer.to_string());
                m.trust = Some(keys.trust(&s.signer));
            }
            Ok(None) => {}
            Err(e) => m.error = Some(format!("{e:#}")),
        }
        st.modules.push(m);
    }
    st.kernel = Some(k);
    st
}

/// The default boot kernel and the `nvidia` module modprobe would load for it
/// ([`gpuhost_host::kmods`], the same check as `apply`'s kernel-module step).
pub(crate) fn next_boot(host: &Host) -> NextBoot {
    use gpuhost_host::guard_record as bootguard;
    use gpuhost_host::kernel;
    use gpuhost_host::kmods;
    let mut nb = NextBoot::default();
    let installed = match kernel::installed(host) {
        Ok(k) => k,
        Err(e) => {
            nb.error = Some(format!("cannot list the installed kernels: {e:#}"));
            return nb;
        }
    };
    match bootguard::load(host) {
        Ok(g) => nb.guard = g,
        Err(e) => nb.error = Some(format!("{e:#}")),
    }
    if host.is_live() {
        nb.running = kernel::running().ok();
    }
    nb.kernel = match kernel::default_boot(host, &installed) {
        Ok(k) => k,
        Err(e) => {
            nb.error = Some(format!("cannot read the default boot kernel: {e:#}"));
            None
        }
    };
    let Some(k) = nb.kernel.clone() else {
        return nb;
    };
    match kmods::state(host, &k, "nvidia") {
        Ok(st) => {
            nb.module = st.describe();
            if let kmods::ModuleState::Loadable { version, .. } = st {
                nb.loadable = true;
                nb.module_version = version;
            }
        }
        Err(e) => nb.error = Some(format!("cannot read the nvidia module of {k}: {e:#}")),
    }
    nb.without_module = installed
        .iter()
        .filter(|o| **o != k)
        .filter(|o| {
            !matches!(
                kmods::state(host, o, "nvidia"),
                Ok(kmods::ModuleState::Loadable { .. })
            )
        })
        .cloned()
        .collect();
    let flavour = kernel::Flavour::of(&k);
    nb.others_with_module = installed
        .iter()
        .rev()
        .filter(|o| **o != k && kernel::Flavour::of(o) == flavour)
        .filter_map(|o| match kmods::state(host, o, "nvidia") {
            Ok(kmods::ModuleState::Loadable { version, .. }) => Some(KernelModule {
                kernel: o.clone(),
                version,
            }),
            _ => None,
        })
        .collect();
    nb
}

/// The NVIDIA device nodes in the host's /dev: `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`,
/// `nvidia<N>` (metadata only: opening them would touch the driver).
fn dev_nodes(host: &Host) -> Result<Vec<DevNode>, String> {
    let names = host.list_dir("/dev").map_err(|e| format!("{e:#}"))?;
    let mut out: Vec<DevNode> = names
        .into_iter()
        .filter(|name| {
            matches!(
                name.as_str(),
                "nvidiactl" | "nvidia-uvm" | "nvidia-uvm-tools"
            ) || name
                .strip_prefix("nvidia")
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .filter_map(|name| {
            let rel = Path::new("/dev").join(&name);
            if host.kind_nofollow(&rel) == Some(Kind::Symlink) {
                // A link where the driver makes a node: not a device CUDA can use.
                return Some(DevNode {
                    path: format!("/dev/{name}"),
                    ..DevNode::default()
                });
            }
            // Owner and device type are not in the library's Kind: stat the node at the
            // path the root's resolver gives for it.
            let m = std::fs::symlink_metadata(host.real_path(&rel).ok()?).ok()?;
            Some(DevNode {
                path: format!("/dev/{name}"),
                char_device: m.file_type().is_char_device(),
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build …`
/// → `580.159.04`.
pub fn parse_proc_version(line: &str) -> Option<String> {
    line.split_whitespace()
        .find(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

fn find_nvml_library(host: &Host) -> Option<NvmlLibrary> {
    for dir in LIB_DIRS {
        let p = Path::new("/").join(dir).join("libnvidia-ml.so.1");
        if host.kind_nofollow(&p).is_some() {
            let version = host.read_link(&p).ok().and_then(|t| {
                t.file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .and_then(|n| n.strip_prefix("libnvidia-ml.so.").map(str::to_string))
                    .filter(|v| v != "1")
            });
            return Some(NvmlLibrary {
                path: format!("/{dir}/libnvidia-ml.so.1"),
                version,
            });
        }
    }
    None
}

/// One NVIDIA function the walker found, with what `status` reads beside it: the bound
/// driver, config space, PCIe link and AER counters (all read through the host, inside its
/// root).
fn pci_device(host: &Host, f: NvidiaPciFunction) -> PciDevice {
    let dir = Path::new("/sys/bus/pci/devices").join(&f.address);
    let path = dir.as_path();
    let read = |name: &str| read_trim(host, path.join(name));
    let (config_head, config_error) = match config_head(host, &path.join("config")) {
        Ok(h) => (Some(h), None),
        Err(e) => (None, Some(e)),
    };
    PciDevice {
        kind: match f.kind {
            NvidiaFunction::Gpu => PciKind::Gpu,
            NvidiaFunction::NvSwitch => PciKind::NvSwitch,
        },
        device_id: f.device,
        class: f.class,
        driver: host
            .read_link(path.join("driver"))
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_string_lossy().to_string())),
        config_head,
        config_error,
        current_link_speed: read("current_link_speed"),
        max_link_speed: read("max_link_speed"),
        current_link_width: read("current_link_width").and_then(|s| s.parse().ok()),
        max_link_width: read("max_link_width").and_then(|s| s.parse().ok()),
        aer: aer(host, path),
        address: f.address,
    }
}

/// The first four bytes of PCI config space (vendor and device id), hex. Only those four are
/// read: each byte of a sysfs `config` file is read from the device (24 ms for the whole
/// 4 KiB of one H200 in a VM, every sweep).
fn config_head(host: &Host, p: &Path) -> Result<String, String> {
    let bytes = host
        .read_head_opt(p, 4)
        .map_err(|e| format!("{e:#}"))?
        .ok_or_else(|| format!("{}: not found", host.path(p).display()))?;
    match bytes.get(..4) {
        Some(head) => Ok(head.iter().map(|b| format!("{b:02x}")).collect()),
        None => Err(format!("{}: shorter than 4 bytes", host.path(p).display())),
    }
}

fn aer(host: &Host, path: &Path) -> Option<AerCounters> {
    let total = |file: &str, key: &str| -> Option<u64> {
        let text = read_trim(host, path.join(file))?;
        text.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(key)).then(|| it.next().and_then(|v| v.parse().ok()))?
        })
    };
    let correctable = total("aer_dev_correctable", "TOTAL_ERR_COR");
    let nonfatal = total("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL");
    let fatal = total("aer_dev_fatal", "TOTAL_ERR_FATAL");
    if correctable.is_none() && nonfatal.is_none() && fatal.is_none() {
        return None;
    }
    Some(AerCounters {
        correctable: correctable.unwrap_or(0),
        nonfatal: nonfatal.unwrap_or(0),
        fatal: fatal.unwrap_or(0),
    })
}

/// Parse the host's daemon.json (`p`) for the NVIDIA runtime.
pub(crate) fn daemon_json(host: &Host, p: impl AsRef<Path>) -> DaemonJson {
    match host.read_opt(p) {
        Ok(Some(t)) => parse_daemon_json(&t),
        Ok(None) => DaemonJson::default(),
        Err(e) => DaemonJson {
            present: true,
            error: Some(format!("{e:#}")),
            ..DaemonJson::default()
        },
    }
}

pub(crate) fn parse_daemon_json(text: &str) -> DaemonJson {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => DaemonJson {
            present: true,
            error: None,
            nvidia_runtime: v.pointer("/runtimes/nvidia").is_some(),
            default_runtime: v
                .get("default-runtime")
                .and_then(|d| d.as_str())
                .map(str::to_string),
        },
        Err(e) => DaemonJson {
            present: true,
            error: Some(format!("not valid JSON: {e}")),
            ..DaemonJson::default()
        },
    }
}

/// Unit states through one `systemctl is-active` call.
pub(crate) fn services() -> Services {
    // sd_booted(3): systemd is PID 1 exactly when /run/systemd/system exists. Without it
    // systemctl is there but can answer nothing.
    if !std::path::Path::new("/run/systemd/system").is_dir() {
        return Services {
            error: Some(
                "systemd is not PID 1 on this host (no /run/systemd/system: a container, a chroot or another init)"
                    .into(),
            ),
            no_systemd: true,
            ..Services::default()
        };
    }
    let units = [
        "docker",
        "nvidia-persistenced",
        "nvidia-fabricmanager",
        "nvidia-imex",
    ];
    let out = Cmd::new("systemctl")
        .arg("is-active")
        .args(units)
        .timeout(Duration::from_secs(5))
        .output();
    match out {
        // is-active exits non-zero when any unit is not active; the lines still say each state.
        Ok(o) => parse_is_active(&o.stdout).unwrap_or_else(|| Services {
            error: Some(format!(
                "systemctl is-active gave no states: {}",
                gpuhost_host::cmd::tail_lines(&o.stderr, 2)
            )),
            ..Services::default()
        }),
        Err(e) => Services {
            error: Some(format!("{e:#}")),
            ..Services::default()
        },
    }
}

/// The installed Fabric Manager's version, from rpm (one query for both package names); where
/// there is no rpm, from `nv-fabricmanager --version`.
pub(crate) fn fabricmanager_version() -> FabricManagerVersion {
    let rpm = Cmd::new("rpm")
        .args(["-q", "--qf", "%{NAME} %{VERSION}\\n"])
        .args(FABRIC_MANAGER_PACKAGES)
        .timeout(Duration::from_secs(5))
        .output();
    match rpm {
        // rpm exits 1 when either name is not installed; the lines say which is.
        Ok(o) => parse_rpm_fabricmanager(&o.stdout),
        Err(rpm_err) => {
            match Cmd::new("nv-fabricmanager")
                .arg("--version")
                .timeout(Duration::from_secs(5))
                .output()
            {
                Ok(o) => match parse_fabricmanager_version(&o.stdout) {
                    Some(v) => FabricManagerVersion {
                        package: Some("nv-fabricmanager".into()),
                        version: Some(v),
                        error: None,
                    },
                    None => FabricManagerVersion {
                        error: Some(format!(
                            "no rpm ({rpm_err:#}); `nv-fabricmanager --version` gave no version"
                        )),
                        ..FabricManagerVersion::default()
                    },
                },
                Err(e) => FabricManagerVersion {
                    error: Some(format!(
                        "no rpm ({rpm_err:#}) and no nv-fabricmanager ({e:#})"
                    )),
                    ..FabricManagerVersion::default()
                },
            }
        }
    }
}

/// `rpm -q --qf '%{NAME} %{VERSION}\n' nvidia-fabricmanager nvidia-fabric-manager`:
/// `nvidia-fabricmanager 580.159.04` and `package nvidia-fabric-manager is not installed`.
pub(crate) fn parse_rpm_fabricmanager(stdout: &str) -> FabricManagerVersion {
    for line in stdout.lines() {
        let mut it = line.split_whitespace();
        if let (Some(name), Some(version), None) = (it.next(), it.next(), it.next()) {
            if FABRIC_MANAGER_PACKAGES.contains(&name) {
                return FabricManagerVersion {
                    package: Some(name.to_string()),
                    version: Some(version.to_string()),
                    error: None,
                };
            }
        }
    }
    FabricManagerVersion::default()
}

/// `Fabric Manager version is : 535.104.05` → `535.104.05`.
pub(crate) fn parse_fabricmanager_version(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .find(|l| l.to_lowercase().contains("version"))
        .and_then(|l| l.rsplit([':', ' ']).find(|w| !w.is_empty()))
        .filter(|v| v.contains('.') && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// Four lines of `systemctl is-active docker nvidia-persistenced nvidia-fabricmanager
/// nvidia-imex` (read by the library's [`gpuhost_host::units::parse_active_states`], as `apply`
/// reads them).
pub(crate) fn parse_is_active(stdout: &str) -> Option<Services> {
    let states = gpuhost_host::units::parse_active_states(stdout, 4)?;
    let [docker, persistenced, fabricmanager, imex] = <[String; 4]>::try_from(states).ok()?;
    Some(Services {
        error: None,
        docker: Some(docker),
        nvidia_persistenced: Some(persistenced),
        nvidia_fabricmanager: Some(fabricmanager),
        fabricmanager_version: None,
        no_systemd: false,
        nvidia_imex: Some(imex),
        imex_domain: None,
    })
}

/// The IMEX domain through `nvidia-imex-ctl -N` (it reads /etc/nvidia-imex/config.cfg and asks
/// the local daemon's command service, which `IMEX_CMD_ENABLED=1` turns on). Bounded: a daemon
/// that does not answer is an error, not a hang.
pub(crate) fn imex_domain() -> ImexDomain {
    match Cmd::new("nvidia-imex-ctl")
        .arg("-N")
        .timeout(Duration::from_secs(10))
        .output()
    {
        Ok(o) => {
            let d = parse_imex_domain(&o.stdout);
            if d.domain_state.is_none() && d.nodes.is_empty() {
                ImexDomain {
                    error: Some(format!(
                        "`nvidia-imex-ctl -N` gave no domain status: {}",
                        gpuhost_host::cmd::tail_lines(&format!("{}{}", o.stdout, o.stderr), 2)
                    )),
                    ..ImexDomain::default()
                }
            } else {
                d
            }
        }
        Err(e) => ImexDomain {
            error: Some(format!("{e:#}")),
            ..ImexDomain::default()
        },
    }
}

/// `nvidia-imex-ctl -N`'s text: `Node #0   - 10.136.206.48   - READY` lines and
/// `Domain State: UP` (the output NVIDIA's IMEX guide documents; sample in
/// tests/fixtures/status/README.md).
pub(crate) fn parse_imex_domain(stdout: &str) -> ImexDomain {
    let mut d = ImexDomain::default();
    for line in stdout.lines().map(str::trim) {
        if let Some(state) = line.strip_prefix("Domain State:") {
            d.domain_state = Some(state.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("Node #") {
            let parts: Vec<&str> = rest.split(" - ").map(str::trim).collect();
            if let [index, address, state] = parts.as_slice() {
                if let Ok(index) = index.parse() {
                    d.nodes.push(ImexNode {
                        index,
                        address: address.to_string(),
                        state: state.to_string(),
                    });
                }
            }
        }
    }
    d
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The output NVIDIA's IMEX guide documents for `nvidia-imex-ctl -N` (a one-node domain, as
    /// captured in a public Kubernetes DRA reproduction).
    const IMEX_CTL_N: &str = "READY\nConnectivity Table Legend:\nI - Invalid - Node wasn't reachable, no connection status available\nN - Never Connected\nR - Recovering - Connection was lost, but clean up has not yet been triggered.\nD - Disconnected - Connection was lost, and clean up has been triggreed.\nA - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.\nC - Connected - Ready for operation\n\n3/25/2025 10:39:43.659\nNodes:\nNode #0   - 10.136.206.48   - READY\n\n Nodes From\\To  0\n       0        C\nDomain State: UP\n";

    #[test]
    fn imex_domain_from_nvidia_imex_ctl() {
        let d = parse_imex_domain(IMEX_CTL_N);
        assert_eq!(d.domain_state.as_deref(), Some("UP"));
        assert_eq!(
            d.nodes,
            vec![ImexNode {
                index: 0,
                address: "10.136.206.48".into(),
                state: "READY".into()
            }]
        );
        let none = parse_imex_domain("connection refused\n");
        assert!(none.domain_state.is_none() && none.nodes.is_empty());
    }

    #[test]
    fn fabric_manager_version_from_rpm_or_the_binary() {
        let v = parse_rpm_fabricmanager(
            "nvidia-fabricmanager 580.159.04\npackage nvidia-fabric-manager is not installed\n",
        );
        assert_eq!(v.package.as_deref(), Some("nvidia-fabricmanager"));
        assert_eq!(v.version.as_deref(), Some("580.159.04"));
        let v = parse_rpm_fabricmanager(
            "package nvidia-fabricmanager is not installed\nnvidia-fabric-manager 535.104.05\n",
        );
        assert_eq!(v.package.as_deref(), Some("nvidia-fabric-manager"));
        assert_eq!(v.version.as_deref(), Some("535.104.05"));
        let none = parse_rpm_fabricmanager(
            "package nvidia-fabricmanager is not installed\npackage nvidia-fabric-manager is not installed\n",
        );
        assert_eq!(none, FabricManagerVersion::default());
        assert_eq!(
            parse_fabricmanager_version("Fabric Manager version is : 535.104.05\n").as_deref(),
            Some("535.104.05")
        );
        assert_eq!(
            parse_fabricmanager_version("usage: nv-fabricmanager\n"),
            None
        );
    }

    #[test]
    fn proc_version_parses() {
        let l = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Mar 19 22:48:55 UTC 2026";
        assert_eq!(parse_proc_version(l).as_deref(), Some("580.159.04"));
        let l = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023";
        assert_eq!(parse_proc_version(l).as_deref(), Some("535.104.05"));
    }

    #[test]
    fn daemon_json_finds_runtime() {
        let d = parse_daemon_json(
            r#"{"runtimes":{"nvidia":{"path":"nvidia-container-runtime","args":[]}},"default-runtime":"nvidia"}"#,
        );
        assert!(d.nvidia_runtime);
        assert_eq!(d.default_runtime.as_deref(), Some("nvidia"));
        let d = parse_daemon_json(r#"{"log-driver":"journald"}"#);
        assert!(d.present && !d.nvidia_runtime);
        assert!(parse_daemon_json("{").error.is_some());
    }

    #[test]
    fn is_active_lines() {
        let s = parse_is_active("active\ninactive\ninactive\nactive\n");
        assert_eq!(
            s.as_ref().and_then(|s| s.nvidia_persistenced.as_deref()),
            Some("inactive")
        );
        assert_eq!(
            s.as_ref().and_then(|s| s.nvidia_imex.as_deref()),
            Some("active")
        );
        assert!(parse_is_active("").is_none());
    }
}
