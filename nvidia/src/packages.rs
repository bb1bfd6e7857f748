//! NVIDIA's package names, one table: the driver set per install set and flavour ([`SETS`]),
//! the package that brings the kernel module per packaging ([`KMODS`]), and the names around
//! them (the module, the stream kinds, the meta packages, the local repo packages, the
//! container toolkit). Every other crate asks here; none writes an NVIDIA package name
//! (`tests/architecture.rs` checks it). HGX extras (Fabric Manager, NSCQ, IMEX, nvlsm) keep
//! their own table, [`crate::hgx`].
//!
//! Keyed by what decides a name:
//! - the **branch** (a row's `since`/`until`);
//! - the **install set** (`driver.install`: `module`, `full`, `compute-only`);
//! - the **packaging**: module streams (EL8, EL9) or plain packages (EL10) decide whether the
//!   set's `nvidia-driver` comes through `dnf module` ([`module_spec`]); the kernel module
//!   comes from NVIDIA's DKMS package, NVIDIA's precompiled package for one RHEL kernel, or a
//!   package gpuhost built for one kernel ([`Kmod`]);
//! - the **arch**: kernel releases carry it (`.x86_64`, `.aarch64`); NVIDIA's precompiled names
//!   drop it, gpuhost's keep it ([`kmod_package`]).
//!
//! Sources:
//! - NVIDIA Driver Installation Guide (releases 535 to 620), "Red Hat Enterprise Linux" /
//!   "Oracle Linux": `dnf module install nvidia-driver:<stream>/<profile>` (EL8, EL9); from R560
//!   "Open Kernel Modules" `dnf install nvidia-open`, "Proprietary Kernel Modules"
//!   `dnf install cuda-drivers`, and the compute-only (headless) set `nvidia-driver-cuda` with
//!   the kmod; EL10 the same package names without module streams.
//! - NVIDIA/yum-packaging-dkms-nvidia (branches `rhel8`, `rhel9`): `kmod-nvidia-open-dkms`
//!   (DKMS name `nvidia-open`) and `kmod-nvidia-latest-dkms` (DKMS name `nvidia`), both requiring
//!   `nvidia-kmod-common` at the driver's version.
//! - NVIDIA/yum-packaging-precompiled-kmod, `dnf-kmod-nvidia.spec`:
//!   `kmod-nvidia-<driver>-<kernel version>-<kernel release without dist>`, proprietary modules
//!   only, built for RHEL's kernels and matched exactly (#43: "only officially support RHEL
//!   kernels").
//! - rpmfusion's kmodtool and ublue-os/akmods: one package per kernel,
//!   `kmod-<name>-<uname -r>`, version the driver's: the name of the kmods gpuhost builds.
//! - NVIDIA Driver Installation Guide 620, "Proprietary Kernel Modules Removed": from R620 only
//!   the open flavour ships ([`crate::branches`]).
//! - NVIDIA Container Toolkit install guide ("Installing with Yum or Dnf"): repo
//!   `nvidia-container-toolkit`, packages `nvidia-container-toolkit`,
//!   `nvidia-container-toolkit-base`, `libnvidia-container-tools`, `libnvidia-container1`.
//!
//! **A branch newer than the table** is named as the newest row that covers it: each row's
//! `until` is the first branch it no longer serves, so a row without one (the open kmods, the
//! sets) serves every later branch, and one with one (the proprietary kmods, until R620) none.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A kernel module flavour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleFlavour {
    Open,
    Proprietary,
}

impl fmt::Display for ModuleFlavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModuleFlavour::Open => "open",
            ModuleFlavour::Proprietary => "proprietary",
        })
    }
}

/// The `nvidia-driver` module (EL8, EL9), and the set's main package of that name.
pub const DRIVER: &str = "nvidia-driver";

/// The package every NVIDIA kernel-module flavour requires at its driver's exact version (DKMS,
/// open DKMS and the precompiled kmods alike: NVIDIA's yum-packaging-nvidia-kmod-common, and
/// the kmod specs' `Requires: nvidia-kmod-common = %{epoch}:%{version}`): the installed
/// versions of it are the drivers whose modules the host has, whatever a run asked for.
pub const KMOD_COMMON: &str = "nvidia-kmod-common";

/// Every kmod package's name starts so: NVIDIA's DKMS and precompiled ones, and gpuhost's.
pub const KMOD_PREFIX: &str = "kmod-nvidia";

/// The first branch with NVIDIA's split packaging: the `nvidia-open` and `cuda-drivers` meta
/// packages (`full`) and the compute-only set.
pub const SPLIT_PACKAGES_SINCE: u32 = 560;

/// Which of NVIDIA's package sets the `driver` step installs (`driver.install`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum InstallSet {
    // `dnf module install nvidia-driver:<stream>/<profile>` (profile `default`, or `fm` with
    // NVSwitches), plus the stream's kmod package.
    #[default]
    Module,
    // NVIDIA's instructions from R560: `dnf module enable nvidia-driver:<stream>`, then
    // `dnf install nvidia-open` (open modules) or `cuda-drivers` (proprietary).
    Full,
    // A headless compute node (R560 and later): `dnf module enable nvidia-driver:<stream>`,
    // then `dnf install nvidia-driver-cuda` and the kmod package, without the desktop parts.
    ComputeOnly,
}

impl std::fmt::Display for InstallSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InstallSet::Module => "module",
            InstallSet::Full => "full",
            InstallSet::ComputeOnly => "compute-only",
        })
    }
}

/// One install set's packages besides the kmod, all at the driver's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetRow {
    pub set: InstallSet,
    /// The flavour the row is for; `None`: both.
    pub flavour: Option<ModuleFlavour>,
    pub packages: &'static [&'static str],
    /// The first branch that has it.
    pub since: u32,
    pub source: &'static str,
}

const GUIDE: &str = "NVIDIA Driver Installation Guide, Red Hat Enterprise Linux / Oracle Linux";

/// The install sets, one row per set and flavour.
pub const SETS: &[SetRow] = &[
    SetRow {
        set: InstallSet::Module,
        flavour: None,
        packages: &[DRIVER],
        since: 0,
        source: "NVIDIA Driver Installation Guide, \"Modularity\": dnf module install nvidia-driver:<stream>/<profile>",
    },
    SetRow {
        set: InstallSet::Full,
        flavour: Some(ModuleFlavour::Open),
        packages: &[DRIVER, "nvidia-open"],
        since: SPLIT_PACKAGES_SINCE,
        source: GUIDE,
    },
    SetRow {
        set: InstallSet::Full,
        flavour: Some(ModuleFlavour::Proprietary),
        packages: &[DRIVER, "cuda-drivers"],
        since: SPLIT_PACKAGES_SINCE,
        source: GUIDE,
    },
    SetRow {
        set: InstallSet::ComputeOnly,
        flavour: None,
        packages: &["nvidia-driver-cuda"],
        since: SPLIT_PACKAGES_SINCE,
        source: "NVIDIA Driver Installation Guide, \"Compute-only (Headless) and Desktop-only (no Compute) Installation\"",
    },
];

/// The set's packages besides the kmods for a flavour: `nvidia-driver` (module, full), the
/// flavour's meta package (full), `nvidia-driver-cuda` (compute-only). Whether the branch has
/// the set at all is [`SetRow::since`]'s (the profile refuses older branches).
pub fn set_packages(set: InstallSet, flavour: ModuleFlavour) -> &'static [&'static str] {
    SETS.iter()
        .find(|r| r.set == set && r.flavour.is_none_or(|f| f == flavour))
        .map_or(&[], |r| r.packages)
}

/// NVIDIA's meta package of a flavour (the `full` set): `nvidia-open` (it requires the open
/// kmod) or `cuda-drivers`.
pub fn meta_package(flavour: ModuleFlavour) -> &'static str {
    set_packages(InstallSet::Full, flavour)
        .iter()
        .copied()
        .find(|p| *p != DRIVER)
        .unwrap_or(DRIVER)
}

/// The other flavour's meta package, which a change to `flavour` erases when the host has it:
/// `nvidia-open` requires the open kmod (NVIDIA's EL10 switch to proprietary is
/// `dnf install --allowerasing cuda-drivers`, which erases it), and the `full` set carries one
/// meta package, the flavour's own. `None` when nothing is to go (an open set that is not
/// `full` keeps whatever `cuda-drivers` the host has).
pub fn meta_to_erase(flavour: ModuleFlavour, set: InstallSet) -> Option<&'static str> {
    match flavour {
        ModuleFlavour::Proprietary => Some(meta_package(ModuleFlavour::Open)),
        ModuleFlavour::Open if set == InstallSet::Full => {
            Some(meta_package(ModuleFlavour::Proprietary))
        }
        ModuleFlavour::Open => None,
    }
}

/// `nvidia-driver:<stream>`, or with a profile `nvidia-driver:<stream>/<profile>`.
pub fn module_spec(stream: &str, profile: Option<&str>) -> String {
    match profile {
        Some(p) => format!("{DRIVER}:{stream}/{p}"),
        None => format!("{DRIVER}:{stream}"),
    }
}

/// Where a stream's kernel module comes from, by its name: `open-dkms`, `<branch>-open` (open
/// DKMS), `latest-dkms`, `<branch>-dkms` (proprietary DKMS), `latest`, `<branch>` (NVIDIA's
/// precompiled kmods).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Precompiled,
    Dkms,
    Open,
}

impl StreamKind {
    pub fn of(stream: &str) -> StreamKind {
        if stream == "open-dkms" || stream.ends_with("-open") {
            StreamKind::Open
        } else if stream.ends_with("-dkms") {
            StreamKind::Dkms
        } else {
            StreamKind::Precompiled
        }
    }

    /// The kmod package that provides the module, for DKMS streams.
    pub fn dkms_package(self) -> Option<&'static str> {
        self.dkms_row().map(|r| r.name)
    }

    /// DKMS's name for the stream's module (`dkms add -m NAME`), for DKMS streams.
    pub fn dkms_name(self) -> Option<&'static str> {
        self.dkms_row().and_then(|r| r.dkms_name)
    }

    fn dkms_row(self) -> Option<&'static KmodRow> {
        let flavour = match self {
            StreamKind::Precompiled => return None,
            StreamKind::Dkms => ModuleFlavour::Proprietary,
            StreamKind::Open => ModuleFlavour::Open,
        };
        KMODS
            .iter()
            .find(|r| r.kmod == Kmod::Dkms && r.flavour == flavour)
    }
}

/// Where the kernel module comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kmod {
    /// NVIDIA's DKMS package: built on the node for every kernel.
    Dkms,
    /// NVIDIA's precompiled package for one RHEL kernel.
    NvidiaPrecompiled,
    /// A package gpuhost built on a build host for one kernel, signed there.
    Built,
}

/// How one packaging of one flavour names its kmod package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmodRow {
    pub kmod: Kmod,
    pub flavour: ModuleFlavour,
    /// The name, or for a per-kernel package its prefix (the kernel follows, [`kmod_package`]).
    pub name: &'static str,
    /// DKMS's name for the module the package adds (`dkms add -m NAME`).
    pub dkms_name: Option<&'static str>,
    /// The first branch it no longer serves.
    pub until: Option<u32>,
    pub source: &'static str,
}

/// Every kmod packaging, per flavour.
pub const KMODS: &[KmodRow] = &[
    KmodRow {
        kmod: Kmod::Dkms,
        flavour: ModuleFlavour::Open,
        name: "kmod-nvidia-open-dkms",
        dkms_name: Some("nvidia-open"),
        until: None,
        source: "NVIDIA/yum-packaging-dkms-nvidia (rhel8, rhel9): dkms_name nvidia-open",
    },
    KmodRow {
        kmod: Kmod::Dkms,
        flavour: ModuleFlavour::Proprietary,
        name: "kmod-nvidia-latest-dkms",
        dkms_name: Some("nvidia"),
        until: Some(620),
        source: "NVIDIA/yum-packaging-dkms-nvidia (rhel8, rhel9): dkms_name nvidia; removed in R620 (Driver Installation Guide 620)",
    },
    KmodRow {
        kmod: Kmod::NvidiaPrecompiled,
        flavour: ModuleFlavour::Proprietary,
        name: "kmod-nvidia-",
        dkms_name: None,
        until: Some(620),
        source: "NVIDIA/yum-packaging-precompiled-kmod dnf-kmod-nvidia.spec: kmod-nvidia-<driver>-<kernel version>-<release without dist>, RHEL kernels only (#43)",
    },
    KmodRow {
        kmod: Kmod::Built,
        flavour: ModuleFlavour::Open,
        name: "kmod-nvidia-open-",
        dkms_name: None,
        until: None,
        source: "rpmfusion kmodtool, ublue-os/akmods: kmod-<name>-<uname -r>, version the driver's",
    },
    KmodRow {
        kmod: Kmod::Built,
        flavour: ModuleFlavour::Proprietary,
        name: "kmod-nvidia-proprietary-",
        dkms_name: None,
        until: Some(620),
        source: "rpmfusion kmodtool, ublue-os/akmods: kmod-<name>-<uname -r>, version the driver's",
    },
];

/// The row for a packaging and flavour that serves `branch` (a branch newer than the table: the
/// newest rows, by the module doc's rule); `None` when that packaging has no such kmod for the
/// branch (proprietary from R620, precompiled open modules ever).
pub fn kmod_row(kmod: Kmod, flavour: ModuleFlavour, branch: u32) -> Option<&'static KmodRow> {
    KMODS.iter().find(|r| {
        r.kmod == kmod && r.flavour == flavour && r.until.is_none_or(|until| branch < until)
    })
}

/// The kmod package of a packaging for one kernel release (`uname -r`, arch included):
/// - DKMS: one package for every kernel (`kmod-nvidia-open-dkms`);
/// - NVIDIA's precompiled: `kmod-nvidia-535.104.05-4.18.0-553.16.1` for
///   `4.18.0-553.16.1.el8_10.x86_64` (the driver, then the kernel without dist tag and arch);
/// - gpuhost's: `kmod-nvidia-open-5.15.0-200.131.27.el8uek.x86_64` (kmodtool's, arch kept: one
///   package per kernel and arch).
///
/// `None` when the packaging has no kmod of that flavour for the driver's branch.
pub fn kmod_package(
    kmod: Kmod,
    flavour: ModuleFlavour,
    driver: &str,
    kver: &str,
) -> Option<String> {
    let branch = crate::localrepo::branch_of(driver);
    let row = kmod_row(kmod, flavour, branch)?;
    Some(match kmod {
        Kmod::Dkms => row.name.to_string(),
        Kmod::NvidiaPrecompiled => format!("{}{driver}-{}", row.name, kernel_base(kver)),
        Kmod::Built => format!("{}{kver}", row.name),
    })
}

/// NVIDIA's precompiled kmod for a kernel: `kmod-nvidia-535.104.05-4.18.0-553.16.1` for
/// `4.18.0-553.16.1.el8_10.x86_64` ([`kmod_package`], proprietary, whatever the branch: the
/// name a precompiled stream asks for).
pub fn precompiled_kmod(driver: &str, kver: &str) -> String {
    format!("{KMOD_PREFIX}-{driver}-{}", kernel_base(kver))
}

/// A kernel release without its arch and dist tag: `4.18.0-553.16.1.el8_10.x86_64` →
/// `4.18.0-553.16.1`.
fn kernel_base(kver: &str) -> String {
    let k = ["x86_64", "aarch64"]
        .iter()
        .find_map(|a| kver.strip_suffix(&format!(".{a}")))
        .unwrap_or(kver);
    let (version, release) = k.split_once('-').unwrap_or((k, ""));
    let short = release.rsplit_once('.').map_or(release, |(r, _dist)| r);
    format!("{version}-{short}")
}

/// True for a kmod package of any packaging (NVIDIA's or gpuhost's).
pub fn is_kmod(name: &str) -> bool {
    name.starts_with(KMOD_PREFIX)
}

/// The name prefixes of the kmods gpuhost builds (`kmod-nvidia-open-`, followed by the kernel
/// release: [`kmod_package`] of [`Kmod::Built`]).
pub fn built_kmod_prefixes() -> impl Iterator<Item = &'static str> {
    KMODS
        .iter()
        .filter(|r| r.kmod == Kmod::Built)
        .map(|r| r.name)
}

/// NVIDIA's DKMS kmod packages, of both flavours.
pub fn dkms_kmods() -> impl Iterator<Item = &'static str> {
    KMODS
        .iter()
        .filter(|r| r.kmod == Kmod::Dkms)
        .map(|r| r.name)
}

/// DKMS's names for NVIDIA's modules, of both flavours (`nvidia-open`, `nvidia`).
pub fn dkms_names() -> impl Iterator<Item = &'static str> {
    KMODS.iter().filter_map(|r| r.dkms_name)
}

/// The prefix of the RPM files of the driver's own packages in a local repo's directory
/// (`nvidia-driver-580.82.07-1.el9.x86_64.rpm`): the driver version follows it.
pub const DRIVER_FILE_PREFIX: &str = "nvidia-driver-";

/// The persistence daemon's package (its unit has the same name, `.service`).
pub const PERSISTENCED: &str = "nvidia-persistenced";

/// NVIDIA Container Toolkit's repo id (its `.repo` file's) and its packages.
pub const CONTAINER_TOOLKIT_REPO: &str = "nvidia-container-toolkit";
pub const CONTAINER_TOOLKIT: &str = "nvidia-container-toolkit";
pub const CONTAINER_TOOLKIT_PACKAGES: &[&str] = &[
    CONTAINER_TOOLKIT,
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
];

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(InstallSet::Module, ModuleFlavour::Open, &["nvidia-driver"][..])]
    #[case(InstallSet::Full, ModuleFlavour::Open, &["nvidia-driver", "nvidia-open"][..])]
    #[case(InstallSet::Full, ModuleFlavour::Proprietary, &["nvidia-driver", "cuda-drivers"][..])]
    #[case(InstallSet::ComputeOnly, ModuleFlavour::Proprietary, &["nvidia-driver-cuda"][..])]
    fn sets(#[case] set: InstallSet, #[case] f: ModuleFlavour, #[case] want: &[&str]) {
        assert_eq!(set_packages(set, f), want);
    }

    #[test]
    fn every_row_cites_a_source_and_every_set_and_flavour_has_a_row() {
        assert!(SETS.iter().all(|r| !r.source.is_empty()));
        assert!(KMODS.iter().all(|r| !r.source.is_empty()));
        for set in [
            InstallSet::Module,
            InstallSet::Full,
            InstallSet::ComputeOnly,
        ] {
            for f in [ModuleFlavour::Open, ModuleFlavour::Proprietary] {
                assert!(!set_packages(set, f).is_empty(), "{set} {f}");
            }
        }
    }

    #[rstest]
    #[case(
        "open-dkms",
        StreamKind::Open,
        Some("kmod-nvidia-open-dkms"),
        Some("nvidia-open")
    )]
    #[case(
        "550-open",
        StreamKind::Open,
        Some("kmod-nvidia-open-dkms"),
        Some("nvidia-open")
    )]
    #[case(
        "latest-dkms",
        StreamKind::Dkms,
        Some("kmod-nvidia-latest-dkms"),
        Some("nvidia")
    )]
    #[case(
        "535-dkms",
        StreamKind::Dkms,
        Some("kmod-nvidia-latest-dkms"),
        Some("nvidia")
    )]
    #[case("535", StreamKind::Precompiled, None, None)]
    #[case("latest", StreamKind::Precompiled, None, None)]
    fn stream_kinds(
        #[case] stream: &str,
        #[case] kind: StreamKind,
        #[case] package: Option<&str>,
        #[case] dkms: Option<&str>,
    ) {
        assert_eq!(StreamKind::of(stream), kind);
        assert_eq!(kind.dkms_package(), package);
        assert_eq!(kind.dkms_name(), dkms);
    }

    #[rstest]
    #[case(
        Kmod::NvidiaPrecompiled,
        ModuleFlavour::Proprietary,
        "535.104.05",
        "4.18.0-553.16.1.el8_10.x86_64",
        Some("kmod-nvidia-535.104.05-4.18.0-553.16.1")
    )]
    // Oracle's RHCK keeps its `.0.1` in the name NVIDIA's rule gives: no RHEL kmod has it.
    #[case(
        Kmod::NvidiaPrecompiled,
        ModuleFlavour::Proprietary,
        "570.86.15",
        "4.18.0-513.5.1.0.1.el8_9.x86_64",
        Some("kmod-nvidia-570.86.15-4.18.0-513.5.1.0.1")
    )]
    #[case(
        Kmod::NvidiaPrecompiled,
        ModuleFlavour::Open,
        "570.86.15",
        "4.18.0-553.16.1.el8_10.x86_64",
        None
    )]
    #[case(
        Kmod::NvidiaPrecompiled,
        ModuleFlavour::Proprietary,
        "620.10.01",
        "4.18.0-553.16.1.el8_10.x86_64",
        None
    )]
    #[case(
        Kmod::Built,
        ModuleFlavour::Open,
        "595.45.04",
        "6.12.0-100.28.2.2.el10uek.aarch64",
        Some("kmod-nvidia-open-6.12.0-100.28.2.2.el10uek.aarch64")
    )]
    // A branch newer than the table: the newest rows (open only).
    #[case(
        Kmod::Built,
        ModuleFlavour::Proprietary,
        "630.1.1",
        "5.14.0-570.12.1.0.1.el9_6.x86_64",
        None
    )]
    #[case(
        Kmod::Dkms,
        ModuleFlavour::Open,
        "630.1.1",
        "5.14.0-570.12.1.0.1.el9_6.x86_64",
        Some("kmod-nvidia-open-dkms")
    )]
    fn kmod_names(
        #[case] kmod: Kmod,
        #[case] f: ModuleFlavour,
        #[case] driver: &str,
        #[case] kver: &str,
        #[case] want: Option<&str>,
    ) {
        assert_eq!(kmod_package(kmod, f, driver, kver).as_deref(), want);
    }

    #[test]
    fn the_precompiled_name_is_the_rule_for_any_branch() {
        assert_eq!(
            precompiled_kmod("535.104.05", "4.18.0-553.16.1.el8_10.x86_64"),
            "kmod-nvidia-535.104.05-4.18.0-553.16.1"
        );
        assert!(is_kmod(&precompiled_kmod("1.2.3", "5.14.0-1.el9.aarch64")));
    }

    #[test]
    fn meta_packages_and_what_a_change_erases() {
        assert_eq!(meta_package(ModuleFlavour::Open), "nvidia-open");
        assert_eq!(meta_package(ModuleFlavour::Proprietary), "cuda-drivers");
        assert_eq!(
            meta_to_erase(ModuleFlavour::Proprietary, InstallSet::Module),
            Some("nvidia-open")
        );
        assert_eq!(
            meta_to_erase(ModuleFlavour::Open, InstallSet::Full),
            Some("cuda-drivers")
        );
        assert_eq!(
            meta_to_erase(ModuleFlavour::Open, InstallSet::ComputeOnly),
            None
        );
        assert_eq!(
            module_spec("550-open", Some("fm")),
            "nvidia-driver:550-open/fm"
        );
        assert_eq!(module_spec("open-dkms", None), "nvidia-driver:open-dkms");
    }
}
