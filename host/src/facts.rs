//! What gpuhost sees on the host: OS, kernels, NVIDIA devices on PCI, Secure Boot, nouveau.
//!
//! Facts come from files only (os-release, /lib/modules, the boot loader, sysfs, efivars), all
//! read under the host's root, so `gpuhost facts` is fast and works in an install root, where
//! a test can lay down a fake sysfs.

use anyhow::Result;
use serde::Serialize;

use crate::gpu::GpuKind;
use crate::host::Host;
use crate::kernel::{self, Flavour};
use crate::osrelease::OsRelease;

/// PCI device IDs of NVSwitches (A100 generation, H100/H200 generation).
pub(crate) const NVSWITCH_DEVICE_IDS: &[u16] = &[0x1af1, 0x22a3];
pub(crate) const NVIDIA_VENDOR: u16 = 0x10de;

#[derive(Clone, Debug, Serialize)]
pub struct Facts {
    pub root: String,
    pub live: bool,
    pub os: Option<OsRelease>,
    /// The machine architecture: the machine's own, or in an install root its rpm database's
    /// (never the build machine's); none for a root without architecture-specific packages.
    pub arch: Option<String>,
    /// Set when an install root holds packages of two machine architectures: what they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mixed_arch: Option<String>,
    /// Set when gpuhost does not provision this OS: why, and what `apply` and `plan` would do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
    /// `uname -r` on a live host; none in an install root.
    pub running_kernel: Option<String>,
    /// The kernel gpuhost provisions for: the running one, `--kernel-release`, or (in a root)
    /// the newest installed kernel of the wanted flavour.
    pub target_kernel: Option<String>,
    pub target_flavour: Option<Flavour>,
    pub default_boot_kernel: Option<String>,
    /// The new kernel the kernel guard kept from the default boot (its record,
    /// `/var/lib/gpuhost/kernel-guard.json`), while it is installed: served too, so that the
    /// apply that can give it its module (its headers have reached the mirror) makes it the
    /// default again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_back_kernel: Option<String>,
    pub installed_kernels: Vec<String>,
    pub gpus: Vec<PciDevice>,
    pub nvswitches: Vec<PciDevice>,
    /// InfiniBand devices that are NVSwitch management ports (NVLink-5: HGX B200, GB200),
    /// whose NVSwitches are not NVIDIA PCI functions.
    pub nvlink5_switch_ports: Vec<String>,
    pub secure_boot: SecureBoot,
    pub nouveau_loaded: bool,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PciDevice {
    /// `0000:3b:00.0`
    pub address: String,
    pub device_id: String,
    pub class: String,
    /// GPUs only: the architecture (and product) by device id; `None` for an id gpuhost's
    /// table does not know (see [`crate::gpu`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<GpuKind>,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SecureBoot {
    Enabled,
    Disabled,
    /// No EFI variables: legacy BIOS boot, or an install root without them.
    NotEfi,
}

/// How the target kernel is chosen.
#[derive(Clone, Debug, Default)]
pub struct KernelChoice<'a> {
    /// `--kernel-release`
    pub release: Option<&'a str>,
    /// The profile's flavour, when a profile is in play.
    pub flavour: Option<Flavour>,
}

impl Facts {
    pub fn gather(host: &Host, choice: &KernelChoice<'_>) -> Result<Facts> {
        let os = host
            .read_opt("/etc/os-release")?
            .map(|t| OsRelease::parse(&t));
        let installed = kernel::installed(host)?;
        let running_kernel = if host.is_live() {
            Some(kernel::running()?)
        } else {
            None
        };
        let default_boot_kernel = kernel::default_boot(host, &installed)?;
        // A record that cannot be read is the guard's to report (it fails the apply with it).
        let held_back_kernel = crate::guard_record::load(host)
            .ok()
            .flatten()
            .map(|r| r.kernel)
            .filter(|k| installed.contains(k));
        let target_kernel = match (choice.release, &running_kernel) {
            (Some(k), _) => Some(k.to_string()),
            (None, Some(r)) => Some(r.clone()),
            (None, None) => match choice.flavour {
                Some(f) => kernel::newest_of(&installed, f).cloned(),
                None => default_boot_kernel.clone(),
            },
        };
        let (gpus, nvswitches) = nvidia_pci(host)?;
        let nvlink5_switch_ports = nvlink5_switch_ports(host);
        let unsupported = unsupported(os.as_ref(), host);
        let (arch, mixed_arch) = match crate::arch::of_host(host, &installed)? {
            crate::arch::Arch::One(a) => (Some(a), None),
            crate::arch::Arch::Unknown => (None, None),
            crate::arch::Arch::Mixed(seen) => {
                let list: Vec<String> = seen.iter().map(|(a, p)| format!("{a} ({p})")).collect();
                (
                    None,
                    Some(format!(
                        "install root {} holds packages of two machine architectures: {}; build one root per architecture",
                        host.root().display(),
                        list.join(" and ")
                    )),
                )
            }
        };
        Ok(Facts {
            arch,
            mixed_arch,
            root: host.root().display().to_string(),
            live: host.is_live(),
            // UEK and RHCK are Oracle Linux's kernels: another OS's kernel is neither.
            target_flavour: target_kernel
                .as_deref()
                .filter(|_| unsupported.is_none())
                .map(Flavour::of),
            os,
            unsupported,
            running_kernel,
            target_kernel,
            default_boot_kernel,
            held_back_kernel,
            installed_kernels: installed,
            gpus,
            nvswitches,
            nvlink5_switch_ports,
            secure_boot: secure_boot(host),
            nouveau_loaded: host.exists("/sys/module/nouveau"),
        })
    }

    /// The kernels that need headers and modules: the target, and the default boot kernel and
    /// the kernel the guard held back from it when they are other kernels of the same flavour
    /// (the next boot runs the one, and would run the other once it has its module).
    pub fn kernels_to_serve(&self) -> Vec<String> {
        let mut out: Vec<String> = self.target_kernel.iter().cloned().collect();
        let Some(t) = &self.target_kernel else {
            return out;
        };
        for k in [&self.default_boot_kernel, &self.held_back_kernel]
            .into_iter()
            .flatten()
        {
            if !out.contains(k) && Flavour::of(k) == Flavour::of(t) {
                out.push(k.clone());
            }
        }
        out
    }

    /// NVSwitches, on PCI or behind NVLink-5 management ports.
    pub fn topology(&self) -> Topology {
        Topology {
            pci_nvswitches: self.nvswitches.len(),
            nvlink5_switch_ports: self.nvlink5_switch_ports.len(),
        }
    }

    /// The GPUs as the flavour choice takes them.
    pub fn pci_gpus(&self) -> Vec<crate::gpu::PciGpu> {
        self.gpus
            .iter()
            .map(|g| crate::gpu::PciGpu {
                address: g.address.clone(),
                device_id: g.device_id.clone(),
            })
            .collect()
    }
}

/// InfiniBand devices whose VPD marks an NVSwitch management port (NVIDIA/gpu-driver-container
/// `_assert_nvlink5_system`: `/sys/class/infiniband/*/device/vpd` contains `SW_MNG`).
pub fn nvlink5_switch_ports(host: &Host) -> Vec<String> {
    let Ok(names) = host.list_dir("/sys/class/infiniband") else {
        return Vec::new();
    };
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|dev| {
            host.read_bytes_opt(format!("/sys/class/infiniband/{dev}/device/vpd"))
                .ok()
                .flatten()
                .is_some_and(|v| vpd_marks_nvswitch(&v))
        })
        .collect();
    out.sort();
    out
}

/// Why gpuhost does not provision this OS and what it would do, or `None` for a release of
/// [`crate::platform::RELEASES`].
fn unsupported(os: Option<&OsRelease>, host: &Host) -> Option<String> {
    let what = match os {
        None => "no /etc/os-release: not an Oracle Linux system".to_string(),
        Some(o) if !o.is_oracle_linux() => format!("{} is not Oracle Linux", o.pretty_name),
        Some(o) if o.major().and_then(crate::platform::release).is_some() => return None,
        Some(o) => format!("{} is not a supported release", o.pretty_name),
    };
    let next = if host.is_live() {
        "; to build an Oracle Linux image from this machine, point them at its install root with --root DIR"
    } else {
        ""
    };
    Some(format!(
        "{what}; gpuhost provisions {}: apply and plan stop here (exit 2) and change nothing; `gpuhost status` checks GPUs on any Linux{next}",
        crate::platform::supported_text()
    ))
}

/// What an NVIDIA PCI function is, for gpuhost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvidiaFunction {
    Gpu,
    NvSwitch,
}

fn hex(text: &str) -> Option<u32> {
    u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

/// Classify a PCI function from its sysfs `vendor`, `device` and `class` files (`0x10de`,
/// `0x2335`, `0x030200`): a GPU (VGA or 3D controller), an NVSwitch (a known device id or a
/// bridge of class 0x0680), or `None` (another vendor, or NVIDIA's audio/USB functions).
/// `gpuhost facts` and `gpuhost status` both count with it.
pub fn classify(vendor: &str, device: &str, class: &str) -> Option<NvidiaFunction> {
    if hex(vendor) != Some(u32::from(NVIDIA_VENDOR)) {
        return None;
    }
    let device = hex(device).unwrap_or(0);
    let class = hex(class).unwrap_or(0);
    if NVSWITCH_DEVICE_IDS
        .iter()
        .any(|id| u32::from(*id) == device)
        || class >> 8 == 0x0680
    {
        Some(NvidiaFunction::NvSwitch)
    } else if matches!(class >> 8, 0x0300 | 0x0302) {
        Some(NvidiaFunction::Gpu)
    } else {
        None
    }
}

/// One NVIDIA GPU or NVSwitch function in sysfs, as the walker found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvidiaPciFunction {
    /// `0000:3b:00.0`
    pub address: String,
    /// Its sysfs directory (under the host's root), for readers that want more of it.
    pub path: std::path::PathBuf,
    pub kind: NvidiaFunction,
    /// sysfs `device` and `class`, trimmed (`0x2335`, `0x030200`).
    pub device: String,
    pub class: String,
}

/// The PCI walker: every NVIDIA GPU and NVSwitch function in the host's
/// `/sys/bus/pci/devices`, classified by [`classify`], in address order. `gpuhost facts` and
/// `gpuhost status` both walk with it; an unreadable directory is an error.
pub fn nvidia_functions(host: &Host) -> std::io::Result<Vec<NvidiaPciFunction>> {
    let dir = std::path::Path::new("/sys/bus/pci/devices");
    let mut out = Vec::new();
    let names = host
        .list_dir(dir)
        .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    if names.is_empty() && !host.is_dir(dir) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} does not exist", host.path(dir).display()),
        ));
    }
    for name in names {
        let rel = dir.join(&name);
        let read = |f: &str| {
            host.read_opt(rel.join(f))
                .ok()
                .flatten()
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let (vendor, device, class) = (read("vendor"), read("device"), read("class"));
        let Some(kind) = classify(&vendor, &device, &class) else {
            continue;
        };
        out.push(NvidiaPciFunction {
            path: host.path(&rel),
            address: name,
            kind,
            device,
            class,
        });
    }
    out.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(out)
}

/// NVIDIA GPUs (display/3D controllers) and NVSwitches on PCI, from sysfs (none when the bus
/// cannot be listed).
pub(crate) fn nvidia_pci(host: &Host) -> Result<(Vec<PciDevice>, Vec<PciDevice>)> {
    let (mut gpus, mut switches) = (Vec::new(), Vec::new());
    for f in nvidia_functions(host).unwrap_or_default() {
        let id = hex(&f.device).unwrap_or(0);
        let dev = PciDevice {
            address: f.address,
            device_id: format!("{id:04x}"),
            class: format!("{:06x}", hex(&f.class).unwrap_or(0)),
            kind: match f.kind {
                NvidiaFunction::Gpu => u16::try_from(id).ok().and_then(crate::gpu::kind_of),
                NvidiaFunction::NvSwitch => None,
            },
        };
        match f.kind {
            NvidiaFunction::Gpu => gpus.push(dev),
            NvidiaFunction::NvSwitch => switches.push(dev),
        }
    }
    Ok((gpus, switches))
}

const SECURE_BOOT_VAR: &str =
    "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// The `SecureBoot` EFI variable of the host.
pub fn secure_boot(host: &Host) -> SecureBoot {
    match host.read_bytes_opt(SECURE_BOOT_VAR) {
        // 4 bytes of attributes, then the value.
        Ok(Some(b)) if b.get(4) == Some(&1) => SecureBoot::Enabled,
        Ok(Some(_)) => SecureBoot::Disabled,
        _ if host.exists("/sys/firmware/efi") => SecureBoot::Disabled,
        _ => SecureBoot::NotEfi,
    }
}

/// The shape of the system, from `facts`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// NVSwitches on PCI (A100/H100 generation HGX: `10de:1af1`, `10de:22a3`).
    pub pci_nvswitches: usize,
    /// NVSwitch management ports among the InfiniBand devices (NVLink-5: HGX B200, GB200).
    pub nvlink5_switch_ports: usize,
}

impl Topology {
    pub fn has_nvswitches(&self) -> bool {
        self.pci_nvswitches > 0 || self.nvlink5_switch_ports > 0
    }

    pub fn is_nvlink5(&self) -> bool {
        self.nvlink5_switch_ports > 0
    }
}

/// True when an InfiniBand device's VPD marks it as an NVSwitch management port.
pub fn vpd_marks_nvswitch(vpd: &[u8]) -> bool {
    vpd.windows(6).any(|w| w == b"SW_MNG")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pci(
        root: &std::path::Path,
        bdf: &str,
        vendor: &str,
        device: &str,
        class: &str,
    ) -> Result<()> {
        let d = root.join("sys/bus/pci/devices").join(bdf);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("vendor"), format!("{vendor}\n"))?;
        std::fs::write(d.join("device"), format!("{device}\n"))?;
        std::fs::write(d.join("class"), format!("{class}\n"))?;
        Ok(())
    }

    #[test]
    fn finds_gpus_and_nvswitches_in_sysfs() -> Result<()> {
        let dir = tempfile::tempdir()?;
        pci(dir.path(), "0000:19:00.0", "0x10de", "0x2335", "0x030200")?;
        pci(dir.path(), "0000:05:00.0", "0x10de", "0x22a3", "0x068000")?;
        pci(dir.path(), "0000:00:1f.0", "0x8086", "0x1234", "0x060100")?;
        pci(dir.path(), "0000:19:00.1", "0x10de", "0x22ba", "0x040300")?;
        let host = Host::new(dir.path())?;
        let (gpus, switches) = nvidia_pci(&host)?;
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].device_id, "2335");
        assert_eq!(
            gpus[0].kind.as_ref().map(|k| k.describe()),
            Some("H200 SXM 141GB (Hopper)".to_string())
        );
        assert_eq!(switches[0].kind, None);
        assert_eq!(switches.len(), 1);
        assert_eq!(switches[0].address, "0000:05:00.0");
        Ok(())
    }

    #[test]
    fn classifies_nvidia_functions() {
        use NvidiaFunction::*;
        assert_eq!(classify("0x10de\n", "0x2335\n", "0x030200\n"), Some(Gpu));
        assert_eq!(classify("0x10de", "0x2330", "0x030000"), Some(Gpu));
        assert_eq!(classify("0x10de", "0x22a3", "0x068000"), Some(NvSwitch));
        assert_eq!(classify("0x10de", "0x1af1", "0x000000"), Some(NvSwitch));
        assert_eq!(classify("0x10de", "0x22ba", "0x040300"), None);
        assert_eq!(classify("0x8086", "0x2335", "0x030200"), None);
    }

    #[test]
    fn nvlink5_switch_ports_from_infiniband_vpd() -> Result<()> {
        let dir = tempfile::tempdir()?;
        for (dev, vpd) in [("mlx5_0", &b"CX7 HCA"[..]), ("mlx5_4", &b"CX7 SW_MNG"[..])] {
            let d = dir
                .path()
                .join("sys/class/infiniband")
                .join(dev)
                .join("device");
            std::fs::create_dir_all(&d)?;
            std::fs::write(d.join("vpd"), vpd)?;
        }
        let host = Host::new(dir.path())?;
        assert_eq!(nvlink5_switch_ports(&host), vec!["mlx5_4".to_string()]);
        Ok(())
    }

    #[test]
    fn secure_boot_reads_the_efi_variable() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let host = Host::new(dir.path())?;
        assert_eq!(secure_boot(&host), SecureBoot::NotEfi);
        let var = host.path(SECURE_BOOT_VAR);
        if let Some(parent) = var.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&var, [6, 0, 0, 0, 1])?;
        assert_eq!(secure_boot(&host), SecureBoot::Enabled);
        std::fs::write(&var, [6, 0, 0, 0, 0])?;
        assert_eq!(secure_boot(&host), SecureBoot::Disabled);
        Ok(())
    }
}
