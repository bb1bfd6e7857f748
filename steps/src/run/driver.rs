//! The driver a run manages ([`DriverPlan`]), worked out once in apply's preparation, before
//! any step, and handed to [`crate::step::Ctx`]: NVIDIA's local repo package named by the
//! profile, what its file name says, the kernel module flavour and stream for the GPUs on PCI,
//! and the package set. What cannot work is refused here (exit 2), before anything changes.

use std::path::PathBuf;

use anyhow::Result;

use gpuhost_host::facts::Facts;
use gpuhost_host::invalid;
use gpuhost_host::platform::DriverPackaging;
use gpuhost_nvidia::flavour::{self, Choice, ModuleFlavour};
use gpuhost_nvidia::localrepo::LocalRepoFile;
use gpuhost_nvidia::support::{self, Unchecked};
use gpuhost_profile::{InstallSet, Profile, StreamKind, SPLIT_PACKAGES_SINCE};

use super::kmods::PrebuiltKmods;

/// The driver a run manages, worked out before any step: the local repo package, the flavour
/// and stream for the GPUs, and the package set.
#[derive(Clone, Debug)]
pub struct DriverPlan {
    /// The local repo package's path on the host.
    pub path: PathBuf,
    /// What its file name says.
    pub repo: LocalRepoFile,
    /// The kernel module flavour, the stream, and why (one line, for `plan`).
    pub choice: Choice,
    pub install: InstallSet,
    /// How NVIDIA packages the driver for the host's release: module streams (EL8, EL9) or
    /// plain packages held with versionlock (EL10).
    pub packaging: DriverPackaging,
    /// GPUs on PCI whose device id gpuhost's table lacks: whether the branch drives them was
    /// not checked (a warning in the report).
    pub unchecked: Vec<Unchecked>,
    /// A branch newer than gpuhost's branch table: the rule it was checked by (a warning).
    pub newer_branch: Option<String>,
    /// IMEX wanted, and why (the profile's `driver.imex`, or the GPUs on PCI).
    pub imex: ImexChoice,
    /// The prebuilt kmods the node installs instead of NVIDIA's DKMS package
    /// (`driver.kmod_repo`); `None`: the stream's kmod (DKMS, or NVIDIA's precompiled).
    pub kmods: Option<PrebuiltKmods>,
    /// `driver.keep_local_repo`: NVIDIA's package installed (`true`), or its driver set kept
    /// in gpuhost's cache ([`crate::transaction::cache`]).
    pub keep_local_repo: bool,
}

impl DriverPlan {
    /// The package's version as the cache names it: its file name's, or its driver's (a
    /// driver-only file name may give none).
    pub fn cache_version(&self) -> String {
        crate::transaction::cache::version_of(&self.repo)
    }

    /// The `nvidia-driver` stream to install.
    pub fn stream(&self) -> &str {
        &self.choice.stream
    }

    pub fn kind(&self) -> StreamKind {
        StreamKind::of(&self.choice.stream)
    }

    /// True when NVIDIA's packages for the host's release are module streams.
    pub fn modular(&self) -> bool {
        self.packaging == DriverPackaging::Modular
    }

    /// What the plan found worth a look without stopping, one line each.
    pub fn warnings(&self) -> Vec<String> {
        self.unchecked
            .iter()
            .map(ToString::to_string)
            .chain(self.newer_branch.clone())
            .collect()
    }
}

/// Work out the driver of a run; `Ok(None)` when the profile names no driver. Bad input (an
/// unrecognised file name, a flavour or a branch that cannot drive the GPUs, a package set the
/// driver does not have) is refused here, before anything changes.
pub fn resolve(profile: &Profile, facts: &Facts) -> Result<Option<DriverPlan>> {
    let spec = &profile.driver;
    if !spec.manage {
        return Ok(None);
    }
    let Some(path) = &spec.local_repo_rpm else {
        return Ok(None);
    };
    // NVIDIA's precompiled kmods are RHEL's: none serves an Oracle Linux kernel.
    flavour::refuse_precompiled(spec.stream.as_deref(), facts.target_kernel.as_deref())?;
    let repo = LocalRepoFile::of_path(path)?;
    let file = path.file_name().unwrap_or_default().to_string_lossy();
    let packaging = gpuhost_host::platform::release(profile.os.major)
        .map_or(DriverPackaging::Modular, |r| r.packaging);
    let choice = flavour::choose(
        spec.flavour,
        spec.stream.as_deref(),
        &facts.pci_gpus(),
        repo.branch(),
        packaging == DriverPackaging::Modular,
    )?;
    let branch = repo.branch();
    // A branch is accepted only if it drives every GPU on PCI (NVIDIA's lists, `support`).
    let unchecked = support::check(
        &facts.pci_gpus(),
        choice.flavour,
        branch,
        &format!("driver {} of {file}", repo.driver),
    )?;
    if branch < SPLIT_PACKAGES_SINCE {
        let needs = match (spec.install, choice.flavour) {
            (InstallSet::ComputeOnly, _) => Some("NVIDIA's compute-only packaging"),
            (InstallSet::Full, ModuleFlavour::Open) => Some("the nvidia-open package"),
            _ => None,
        };
        if let Some(what) = needs {
            return Err(invalid!(
                "driver.install = \"{}\" needs {what}, which starts with driver R{SPLIT_PACKAGES_SINCE}, but {file} carries driver {}; set driver.install = \"module\" or use a newer driver",
                spec.install,
                repo.driver
            ));
        }
    }
    let kmods = prebuilt(profile, facts, &repo, &choice)?;
    let imex = imex_choice(spec.imex, &facts.gpus);
    if imex.on {
        // Refuses a driver without IMEX.
        gpuhost_nvidia::hgx::extras(gpuhost_nvidia::hgx::Topology::default(), &repo.driver, true)?;
    }
    Ok(Some(DriverPlan {
        path: path.clone(),
        repo,
        choice,
        install: spec.install,
        packaging,
        unchecked,
        newer_branch: gpuhost_nvidia::branches::newer_than_table(branch),
        imex,
        kmods,
        keep_local_repo: spec.keep_local_repo,
    }))
}

/// The prebuilt kmods of `driver.kmod_repo`, checked for every served kernel; refused with a
/// precompiled stream (whose kmods are NVIDIA's) and with NVIDIA's `nvidia-open` meta package
/// (the `full` set of the open flavour), which requires NVIDIA's DKMS kmod by name.
fn prebuilt(
    profile: &Profile,
    facts: &Facts,
    repo: &LocalRepoFile,
    choice: &Choice,
) -> Result<Option<PrebuiltKmods>> {
    let spec = &profile.driver;
    let Some(dir) = &spec.kmod_repo else {
        return Ok(None);
    };
    // (A precompiled stream never gets here: `resolve` refused it on Oracle Linux first.)
    if spec.install == InstallSet::Full && choice.flavour == ModuleFlavour::Open {
        return Err(invalid!(
            "driver.install = \"full\" installs NVIDIA's {}, which requires its DKMS kmod ({}); with driver.kmod_repo set driver.install = \"{}\"",
            gpuhost_nvidia::packages::meta_package(ModuleFlavour::Open),
            StreamKind::Open.dkms_package().unwrap_or_default(),
            if gpuhost_host::platform::release(profile.os.major).is_none_or(|r| r.modular()) {
                "module\" or \"compute-only"
            } else {
                "compute-only"
            }
        ));
    }
    let path = spec.local_repo_rpm.clone().unwrap_or_default();
    PrebuiltKmods::read(
        dir,
        &repo.driver,
        choice.flavour,
        &facts.kernels_to_serve(),
        &path,
    )
    .map(Some)
}

/// IMEX wanted or not, and why (for `plan`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImexChoice {
    pub on: bool,
    pub why: String,
}

/// Whether IMEX is wanted, and why. Unset in the profile: on for a Grace Blackwell superchip
/// (GB200, GB300) on PCI — an NVL72 compute tray, whose GPUs share memory across trays over
/// NVLink through the IMEX daemon (NVIDIA IMEX guide; NVIDIA's GB200 node images and the
/// clouds' run `nvidia-imex.service` and no Fabric Manager there, which runs on the NVLink
/// switch trays) — off otherwise (a GH200 is one node: neither).
fn imex_choice(setting: Option<bool>, gpus: &[gpuhost_host::facts::PciDevice]) -> ImexChoice {
    if let Some(on) = setting {
        return ImexChoice {
            on,
            why: format!("driver.imex = {on}"),
        };
    }
    let tray = gpus.iter().find_map(|g| {
        g.kind
            .as_ref()
            .filter(|k| k.grace && k.arch == gpuhost_host::gpu::Arch::Blackwell)
            .map(|k| format!("{} at {}", k.describe(), g.address))
    });
    match tray {
        Some(gpu) => ImexChoice {
            on: true,
            why: format!("{gpu}: an NVL72 compute tray runs IMEX for multi-node NVLink (set driver.imex = false to leave it out)"),
        },
        None => ImexChoice {
            on: false,
            why: "no Grace Blackwell superchip on PCI: IMEX only when driver.imex = true"
                .to_string(),
        },
    }
}

/// What a profile says about the driver before anything runs: `Err` (invalid input) when it
/// manages the driver but names no package and `selected` (the driver steps that will run) is
/// not empty.
pub fn require_package(profile: &Profile, selected: &[&str]) -> Result<()> {
    let d = &profile.driver;
    if !d.manage || d.local_repo_rpm.is_some() || selected.is_empty() {
        return Ok(());
    }
    Err(gpuhost_host::invalid!(
        "profile {} manages the NVIDIA driver but names no driver package: set driver.local_repo_rpm to NVIDIA's local repo RPM (--set driver.local_repo_rpm=/path/to/nvidia-driver-local-repo-rhel{}-<driver>-1.0-1.x86_64.rpm or a cuda-repo-rhel{}-…-local-….rpm), or driver.manage = false to provision without the driver",
        profile.name,
        profile.os.major,
        profile.os.major
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhost_host::facts::PciDevice;

    fn facts_with(device: &str) -> Vec<PciDevice> {
        vec![PciDevice {
            address: "0000:01:00.0".to_string(),
            device_id: device.to_string(),
            class: "0x030200".to_string(),
            kind: gpuhost_host::gpu::kind_of_hex(device),
        }]
    }

    #[test]
    fn imex_is_on_for_grace_blackwell_trays_only_unless_the_profile_says() {
        let gb200 = facts_with("2941");
        let ImexChoice { on, why } = imex_choice(None, &gb200);
        assert!(
            on && why.contains("GB200") && why.contains("NVL72"),
            "{why}"
        );
        assert!(!imex_choice(Some(false), &gb200).on, "the profile decides");
        assert!(!imex_choice(None, &facts_with("2342")).on, "GH200: no IMEX");
        assert!(!imex_choice(None, &facts_with("2335")).on, "H200: no IMEX");
        assert!(imex_choice(Some(true), &facts_with("2335")).on);
    }
}
