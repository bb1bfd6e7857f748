//! What the node should have ([`Expect`], its [`Thresholds`] and [`MinFree`] floors): a
//! profile's `[status]` keys and `--expect-gpus`.

use gpuhost_profile::Profile;
use serde::{Deserialize, Serialize};

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
    /// ECC, PCIe and NVLink thresholds (profile `status.*`, else the defaults).
    #[serde(default)]
    pub thresholds: Thresholds,
    /// Free-space floors (GiB) under which `host.space.*` warns (profile `status.min_free_*_gib`).
    #[serde(default)]
    pub min_free_gib: MinFree,
}

/// Free-space floors in GiB for `/`, `/var`, Docker's data-root and /var/lib/dkms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MinFree {
    pub root: f64,
    pub var: f64,
    pub docker: f64,
    pub dkms: f64,
}

impl Default for MinFree {
    fn default() -> Self {
        MinFree {
            root: 2.0,
            var: 2.0,
            docker: 10.0,
            dkms: 1.0,
        }
    }
}

/// Thresholds of the counter checks, named in their messages; the defaults are Azure's AzNHC
/// (`customTests/azure_gpu_ecc.nhc`, `check_gpu_ecc 20000000 10000` in its H100/H200 configs)
/// and DCGM's health watches (`dcgm_gpu_hardware_limits.h`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub ecc_sram_correctable_max: u64,
    pub ecc_sram_uncorrectable_max: u64,
    pub ecc_dram_max: u64,
    pub pcie_replays_per_minute_max: f64,
    pub nvlink_crc_errors_per_second_max: f64,
    pub nvlink_replay_recovery_per_minute_max: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            ecc_sram_correctable_max: 10_000,
            ecc_sram_uncorrectable_max: 0,
            ecc_dram_max: 20_000_000,
            pcie_replays_per_minute_max: 8.0,
            nvlink_crc_errors_per_second_max: 100.0,
            nvlink_replay_recovery_per_minute_max: 0.0,
        }
    }
}

impl MinFree {
    /// The defaults with the profile's `status.min_free_*_gib` keys over them.
    pub(crate) fn from_profile(st: &gpuhost_profile::StatusSpec) -> MinFree {
        let d = MinFree::default();
        MinFree {
            root: st.min_free_root_gib.unwrap_or(d.root),
            var: st.min_free_var_gib.unwrap_or(d.var),
            docker: st.min_free_docker_gib.unwrap_or(d.docker),
            dkms: st.min_free_dkms_gib.unwrap_or(d.dkms),
        }
    }
}

impl Thresholds {
    /// The defaults with the profile's `status.*` keys over them.
    pub(crate) fn from_profile(st: &gpuhost_profile::StatusSpec) -> Thresholds {
        let d = Thresholds::default();
        Thresholds {
            ecc_sram_correctable_max: st
                .ecc_sram_correctable_max
                .unwrap_or(d.ecc_sram_correctable_max),
            ecc_sram_uncorrectable_max: st
                .ecc_sram_uncorrectable_max
                .unwrap_or(d.ecc_sram_uncorrectable_max),
            ecc_dram_max: st.ecc_dram_max.unwrap_or(d.ecc_dram_max),
            pcie_replays_per_minute_max: st
                .pcie_replays_per_minute_max
                .unwrap_or(d.pcie_replays_per_minute_max),
            nvlink_crc_errors_per_second_max: st
                .nvlink_crc_errors_per_second_max
                .unwrap_or(d.nvlink_crc_errors_per_second_max),
            nvlink_replay_recovery_per_minute_max: st
                .nvlink_replay_recovery_per_minute_max
                .unwrap_or(d.nvlink_replay_recovery_per_minute_max),
        }
    }
}

/// The driver version a local repo RPM's file name carries, for either of NVIDIA's kinds:
/// `cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm` → `535.104.05`,
/// `nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm` → `570.124.06`.
pub fn driver_version_from_rpm(file_name: &str) -> Option<String> {
    gpuhost_nvidia::localrepo::LocalRepoFile::parse(file_name).map(|f| f.driver)
}

/// What the node should have, from a profile name or path and an `--expect-gpus` count:
/// `--expect-gpus` over the profile's `status.expect_gpus`; the driver version from the
/// profile's `status.expect_driver_version`, else its local repo RPM name;
/// `status.require_docker` and `status.require_fabric_manager`; the thresholds and free-space
/// floors. A profile that cannot be read is `Expect::profile_error`.
pub fn expectations_for(profile: Option<&str>, expect_gpus: Option<u32>) -> Expect {
    let mut e = Expect::default();
    if let Some(name) = profile {
        match Profile::resolve(name, &[]) {
            Ok(p) => {
                if let Some(n) = p.status.expect_gpus {
                    e.gpus = Some(n);
                    e.gpus_source = Some(format!("profile {name}"));
                }
                if let Some(v) = &p.status.expect_driver_version {
                    e.driver_version = Some(v.trim().to_string());
                    e.driver_source =
                        Some(format!("profile {name} (status.expect_driver_version)"));
                } else if let Some(rpm) = &p.driver.local_repo_rpm {
                    let file = rpm.file_name().map(|f| f.to_string_lossy().to_string());
                    if let Some(v) = file.as_deref().and_then(driver_version_from_rpm) {
                        e.driver_version = Some(v);
                        e.driver_source = Some(format!("profile {name}"));
                    }
                }
                e.require_docker = p.status.require_docker;
                e.require_fabric_manager = p.status.require_fabric_manager;
                e.thresholds = Thresholds::from_profile(&p.status);
                e.min_free_gib = MinFree::from_profile(&p.status);
            }
            Err(err) => e.profile_error = Some(format!("{err:#}")),
        }
    }
    if let Some(n) = expect_gpus {
        e.gpus = Some(n);
        e.gpus_source = Some("--expect-gpus".into());
    }
    e
}
