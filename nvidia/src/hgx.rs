//! What an HGX (NVSwitch) system needs beyond the driver, and under which package names.
//!
//! From NVIDIA's GPU Operator driver container (NVIDIA/gpu-driver-container, `rhel8/install.sh`
//! and `rhel9/install.sh`, commit 091f60d "version pin nvidia extra packages to avoid unintended
//! upgrades", and `rhel9/nvidia-driver` for the run-time checks):
//! - Fabric Manager at exactly the driver version, version-locked: `nvidia-fabricmanager` from
//!   R580, `nvidia-fabric-manager` before;
//! - NSCQ (the NVSwitch configuration and query library DCGM uses) at the driver version,
//!   locked: `libnvidia-nscq` from R580, `libnvidia-nscq-<branch>` before;
//! - on NVLink-5 systems (HGX B200, GB200 NVL): `nvlsm` (the NVLink subnet manager) and
//!   `infiniband-diags` (R550 and later); Fabric Manager starts only once `mlx5_core` and
//!   `ib_umad` are loaded (`_ensure_nvlink5_prerequisites`). An NVLink-5 system is one whose
//!   InfiniBand devices include an NVSwitch management port: `/sys/class/infiniband/*/device/vpd`
//!   contains `SW_MNG` (`_assert_nvlink5_system`) — its NVSwitches are not NVIDIA PCI functions;
//! - IMEX (memory export across nodes, for multi-node NVLink) when asked, at the driver version,
//!   locked: `nvidia-imex` from R580, `nvidia-imex-<branch>` in R550–R579, none before.
//!   oracle-quickstart/oci-hpc-images (`roles/nvidia_driver`) installs the same set for its
//!   open-module GB200/B200 images: `nvidia-imex-<ver>`, `libnvidia-nscq-<ver>`, `nvlsm`.
//!
//! [`extras`] is pure: the system's shape and the driver in, the packages out.

use serde::Serialize;

use gpuhost_host::invalid;

/// One package an HGX system needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Extra {
    /// rpm package name: `libnvidia-nscq`.
    pub name: String,
    /// The version it must have (the driver's), or `None` for any (then locked at what is
    /// installed, or not locked at all: see `lock`).
    pub version: Option<String>,
    /// Version-locked against `dnf update`, like Fabric Manager.
    pub lock: bool,
    pub why: &'static str,
}

impl Extra {
    /// `dnf install` argument: `libnvidia-nscq-580.82.07` or `nvlsm`.
    pub fn spec(&self) -> String {
        match &self.version {
            Some(v) => format!("{}-{v}", self.name),
            None => self.name.clone(),
        }
    }
}

pub use gpuhost_host::facts::{vpd_marks_nvswitch, Topology};

/// Fabric Manager's package names: from the 580 branch, and before it.
pub const FABRIC_MANAGER_PACKAGES: [&str; 2] = ["nvidia-fabricmanager", "nvidia-fabric-manager"];

/// The Fabric Manager package of a driver version (`gpuhost status` judges with it too).
pub fn fabric_manager_package_of(driver: &str) -> &'static str {
    fabric_manager_package(crate::localrepo::branch_of(driver))
}

/// Fabric Manager's package name for a driver branch.
pub fn fabric_manager_package(branch: u32) -> &'static str {
    if branch >= 580 {
        "nvidia-fabricmanager"
    } else {
        "nvidia-fabric-manager"
    }
}

/// True for an IMEX package of any branch (`nvidia-imex`, `nvidia-imex-550`).
pub fn is_imex(name: &str) -> bool {
    name == "nvidia-imex" || name.starts_with("nvidia-imex-")
}

/// True for a name gpuhost locks for some driver: Fabric Manager under either name, NSCQ and
/// IMEX (branch-suffixed before R580), the NVLink subnet manager.
pub fn is_locked_extra(name: &str) -> bool {
    FABRIC_MANAGER_PACKAGES.contains(&name)
        || name == "libnvidia-nscq"
        || name.starts_with("libnvidia-nscq-")
        || is_imex(name)
        || name == "nvlsm"
}

/// Modules NVLink-5 systems must load at boot for Fabric Manager (`/etc/modules-load.d/`).
pub const NVLINK5_MODULES: &[&str] = &["ib_umad"];

/// The packages beyond the driver and Fabric Manager: NSCQ on NVSwitch systems, the NVLink-5
/// subnet manager, IMEX when `imex` is asked for. Errors (bad input) when IMEX is asked for a
/// driver that has none.
pub fn extras(topology: Topology, driver: &str, imex: bool) -> anyhow::Result<Vec<Extra>> {
    let branch: u32 = driver
        .split('.')
        .next()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0);
    let mut out = Vec::new();
    if topology.has_nvswitches() {
        out.push(Extra {
            name: if branch >= 580 {
                "libnvidia-nscq".to_string()
            } else {
                format!("libnvidia-nscq-{branch}")
            },
            version: Some(driver.to_string()),
            lock: true,
            why: "NVSwitch system: NSCQ (NVSwitch configuration and query, used by DCGM) at the driver's version",
        });
    }
    if topology.is_nvlink5() && branch >= 550 {
        out.push(Extra {
            name: "nvlsm".to_string(),
            version: None,
            lock: true,
            why: "NVLink-5 system: the NVLink subnet manager Fabric Manager starts",
        });
        out.push(Extra {
            name: "infiniband-diags".to_string(),
            version: None,
            lock: false,
            why: "NVLink-5 system: InfiniBand diagnostics nvlsm uses (an Oracle Linux package, not locked)",
        });
    }
    if imex {
        let name = if branch >= 580 {
            "nvidia-imex".to_string()
        } else if branch >= 550 {
            format!("nvidia-imex-{branch}")
        } else {
            return Err(invalid!(
                "driver.imex = true, but driver {driver} has no IMEX (NVIDIA ships nvidia-imex from R550); set driver.imex = false or use a newer driver"
            ));
        };
        out.push(Extra {
            name,
            version: Some(driver.to_string()),
            lock: true,
            why: "driver.imex: IMEX at the driver's version",
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[Extra]) -> Vec<String> {
        v.iter().map(Extra::spec).collect()
    }

    #[test]
    fn hgx_h100_gets_nscq_of_its_branch() -> anyhow::Result<()> {
        let t = Topology {
            pci_nvswitches: 4,
            nvlink5_switch_ports: 0,
        };
        assert_eq!(
            names(&extras(t, "550.54.15", false)?),
            ["libnvidia-nscq-550-550.54.15"]
        );
        assert_eq!(
            names(&extras(t, "580.82.07", false)?),
            ["libnvidia-nscq-580.82.07"]
        );
        assert_eq!(fabric_manager_package(550), "nvidia-fabric-manager");
        assert_eq!(fabric_manager_package(580), "nvidia-fabricmanager");
        Ok(())
    }

    #[test]
    fn hgx_b200_gets_the_subnet_manager_too() -> anyhow::Result<()> {
        let t = Topology {
            pci_nvswitches: 0,
            nvlink5_switch_ports: 2,
        };
        let e = extras(t, "580.82.07", true)?;
        assert_eq!(
            names(&e),
            [
                "libnvidia-nscq-580.82.07",
                "nvlsm",
                "infiniband-diags",
                "nvidia-imex-580.82.07"
            ]
        );
        assert!(e
            .iter()
            .filter(|x| x.name != "infiniband-diags")
            .all(|x| x.lock));
        Ok(())
    }

    #[test]
    fn no_switches_no_extras_and_imex_needs_r550() -> anyhow::Result<()> {
        assert!(extras(Topology::default(), "580.82.07", false)?.is_empty());
        assert_eq!(
            names(&extras(Topology::default(), "570.124.06", true)?),
            ["nvidia-imex-570-570.124.06"]
        );
        let err = extras(Topology::default(), "535.104.05", true).err();
        assert!(
            err.as_ref().is_some_and(gpuhost_host::error::is_invalid),
            "{err:?}"
        );
        Ok(())
    }

    #[test]
    fn vpd_of_an_nvswitch_management_port() {
        assert!(vpd_marks_nvswitch(b"\x82\x10ConnectX-7 SW_MNG\x90\x00"));
        assert!(!vpd_marks_nvswitch(b"\x82\x10ConnectX-7 HCA\x90\x00"));
    }
}
