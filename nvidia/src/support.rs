//! Which driver branches drive which GPU: a branch is accepted only if it drives every GPU on
//! PCI, under the chosen kernel module flavour.
//!
//! Each architecture has a first branch (per flavour) and, once NVIDIA retired it, a last one;
//! chips that arrived after their architecture's first branch have a first branch of their own
//! ([`LATE`]). Where each number comes from:
//!
//! - **Open kernel modules, first branches**: the "Compatible GPUs" table of
//!   `README.md` in NVIDIA/open-gpu-kernel-modules at each release tag (read at every tag from
//!   515.43.04 to 595.45.04). A branch counts from the first of its releases whose table lists a
//!   device id; an earlier point release of the same branch may not list it (GH200 `2342`: first
//!   in 535.129.03). 515.43.04 has no table; 515.48.07 is the first that has one.
//! - **Retired architectures, last branches**: NVIDIA's "Unix Graphics Feature Deprecation
//!   Schedule" (NVIDIA developer forums): "The release 580 series will be the last to support
//!   GPUs based on the Maxwell, Pascal, and Volta architectures" — the forum post itself is not
//!   in the sources at hand; its sentence is quoted verbatim by Phoronix (reprinted at
//!   worldofsoftware.org/?p=686443) and hyper.ai. Kepler ends at R470: NVIDIA's data-centre
//!   driver roadmap ("Last Driver Support: R470" for Kepler 3.0 and 3.5), reproduced by
//!   wccftech.com ("NVIDIA To Retire Its Kepler GPU Architecture … With R470 Drivers") and
//!   tomshardware.com.
//! - **Proprietary kernel modules, first branches**: the supported-products appendix of each
//!   branch's driver README was not found in the sources at hand. The rows below use, for the
//!   proprietary flavour, the open table's first branch for Ada, Hopper and the [`LATE`] chips
//!   *(inferred: the open table is the README's list of GPUs the GSP-based modules drive, and
//!   both flavours ship in one release)*; Kepler to Turing and Ampere have no first branch here
//!   (each predates every branch gpuhost installs from a local repo).
//!
//! Not exceptions: Tesla T4 (`1eb8`) is missing from the open table until 575.51.02 and the
//! CMP 30HX/40HX/50HX (`2189`, `1f0b`, `1e09`) until 565.57.01, though the same README says the
//! modules "can be used on any Turing or later GPU" and these boards predate the open modules
//! (R515): an omission, not a later chip, so Turing's row decides for them.
//!
//! [`check`] is pure: the GPUs on PCI, the flavour and the branch in; a refusal (bad input, exit
//! 2) naming the GPU and the branches that drive it, or the GPUs gpuhost could not check.

use std::fmt;

use gpuhost_host::gpu::{kind_of_hex, Arch, GpuKind, PciGpu};
use gpuhost_host::invalid;

use crate::flavour::ModuleFlavour;

/// The branches that drive one architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub arch: Arch,
    /// First branch of the open modules; `None`: they never drive it.
    pub open_since: Option<u32>,
    /// First branch of the proprietary modules; `None`: no bound (older than any branch
    /// gpuhost installs), or the proprietary modules never drive it (Blackwell, see
    /// [`GpuKind::proprietary_supported`]).
    pub proprietary_since: Option<u32>,
    /// The last branch that drives it, once NVIDIA retired it.
    pub last: Option<u32>,
    /// Where the numbers come from.
    pub source: &'static str,
}

const OPEN_README: &str = "NVIDIA/open-gpu-kernel-modules README.md, \"Compatible GPUs\"";
const DEPRECATION: &str =
    "NVIDIA, Unix Graphics Feature Deprecation Schedule (R580 last for Maxwell, Pascal, Volta)";

/// Per architecture, oldest first.
pub const ROWS: &[Row] = &[
    Row {
        arch: Arch::Kepler,
        open_since: None,
        proprietary_since: None,
        last: Some(470),
        source: "NVIDIA data-centre driver roadmap: Kepler's last driver R470 (as reproduced by wccftech.com, tomshardware.com)",
    },
    Row {
        arch: Arch::Maxwell,
        open_since: None,
        proprietary_since: None,
        last: Some(580),
        source: DEPRECATION,
    },
    Row {
        arch: Arch::Pascal,
        open_since: None,
        proprietary_since: None,
        last: Some(580),
        source: DEPRECATION,
    },
    Row {
        arch: Arch::Volta,
        open_since: None,
        proprietary_since: None,
        last: Some(580),
        source: DEPRECATION,
    },
    Row {
        // TITAN RTX 1e02, Quadro RTX, T1000 … in 515.48.07, the first tag with the table.
        arch: Arch::Turing,
        open_since: Some(515),
        proprietary_since: None,
        last: None,
        source: "NVIDIA/open-gpu-kernel-modules README.md @515.48.07 (1e02 TITAN RTX)",
    },
    Row {
        arch: Arch::Ampere,
        open_since: Some(515),
        proprietary_since: None,
        last: None,
        source: "NVIDIA/open-gpu-kernel-modules README.md @515.48.07 (20b0, 20b2 A100; 2236 A10)",
    },
    Row {
        // No Ada id in any 515 or 520 table.
        arch: Arch::Ada,
        open_since: Some(525),
        proprietary_since: Some(525),
        last: None,
        source: "NVIDIA/open-gpu-kernel-modules README.md @525.78.01 (2684 RTX 4090)",
    },
    Row {
        arch: Arch::Hopper,
        open_since: Some(520),
        proprietary_since: Some(520),
        last: None,
        source: "NVIDIA/open-gpu-kernel-modules README.md @520.56.06 (2331 H100 PCIe)",
    },
    Row {
        // No Blackwell id in any table before 570 (none in 535, 550, 560, 565).
        arch: Arch::Blackwell,
        open_since: Some(570),
        proprietary_since: None,
        last: None,
        source: "NVIDIA/open-gpu-kernel-modules README.md @570.86.15 (2901 B200)",
    },
];

/// A chip first listed after its architecture's first branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Late {
    pub device_id: u16,
    /// First branch whose table lists it.
    pub since: u32,
    /// The first release tag of that branch whose README lists it.
    pub listed_in: &'static str,
    /// The product as NVIDIA's table names it.
    pub name: &'static str,
}

/// Every device id of the open modules' table (up to 595.45.04) whose first branch is later
/// than its architecture's (Turing's omissions aside, see the module doc). Source of each row:
/// NVIDIA/open-gpu-kernel-modules `README.md` at tag `listed_in`.
pub const LATE: &[Late] = &[
    Late {
        device_id: 0x20bd,
        since: 535,
        listed_in: "535.104.05",
        name: "NVIDIA A800-SXM4-40GB",
    },
    Late {
        device_id: 0x20fd,
        since: 535,
        listed_in: "535.154.05",
        name: "NVIDIA AX800",
    },
    Late {
        device_id: 0x230e,
        since: 580,
        listed_in: "580.82.07",
        name: "NVIDIA H20 NVL16",
    },
    Late {
        device_id: 0x2321,
        since: 535,
        listed_in: "535.104.05",
        name: "NVIDIA H100 NVL",
    },
    Late {
        device_id: 0x2322,
        since: 525,
        listed_in: "525.105.17",
        name: "NVIDIA H800 PCIe",
    },
    Late {
        device_id: 0x2324,
        since: 525,
        listed_in: "525.105.17",
        name: "NVIDIA H800",
    },
    Late {
        device_id: 0x2329,
        since: 535,
        listed_in: "535.43.25",
        name: "NVIDIA H20",
    },
    Late {
        device_id: 0x232c,
        since: 535,
        listed_in: "535.216.03",
        name: "NVIDIA H20-3e",
    },
    Late {
        device_id: 0x2330,
        since: 525,
        listed_in: "525.85.05",
        name: "NVIDIA H100 80GB HBM3",
    },
    Late {
        device_id: 0x2335,
        since: 550,
        listed_in: "550.90.07",
        name: "NVIDIA H200",
    },
    Late {
        device_id: 0x2336,
        since: 525,
        listed_in: "525.85.05",
        name: "NVIDIA H100 80GB HBM2e",
    },
    Late {
        device_id: 0x2339,
        since: 525,
        listed_in: "525.105.17",
        name: "NVIDIA H100",
    },
    Late {
        device_id: 0x233a,
        since: 535,
        listed_in: "535.104.05",
        name: "NVIDIA H800 NVL",
    },
    Late {
        device_id: 0x233b,
        since: 565,
        listed_in: "565.57.01",
        name: "NVIDIA H200 NVL",
    },
    Late {
        device_id: 0x2342,
        since: 535,
        listed_in: "535.129.03",
        name: "GH200 120GB",
    },
    Late {
        device_id: 0x2348,
        since: 565,
        listed_in: "565.57.01",
        name: "NVIDIA GH200 144G HBM3e",
    },
    Late {
        device_id: 0x24c7,
        since: 525,
        listed_in: "525.116.03",
        name: "NVIDIA GeForce RTX 3060",
    },
    Late {
        device_id: 0x2584,
        since: 535,
        listed_in: "535.43.28",
        name: "NVIDIA GeForce RTX 3050",
    },
    Late {
        device_id: 0x25b0,
        since: 550,
        listed_in: "550.76",
        name: "NVIDIA RTX A1000",
    },
    Late {
        device_id: 0x25b2,
        since: 550,
        listed_in: "550.76",
        name: "NVIDIA RTX A400",
    },
    Late {
        device_id: 0x25bc,
        since: 525,
        listed_in: "525.116.03",
        name: "NVIDIA RTX A1000 6GB Laptop GPU",
    },
    Late {
        device_id: 0x25bd,
        since: 525,
        listed_in: "525.116.03",
        name: "NVIDIA RTX A500 Laptop GPU",
    },
    Late {
        device_id: 0x2685,
        since: 535,
        listed_in: "535.154.05",
        name: "NVIDIA GeForce RTX 4090 D",
    },
    Late {
        device_id: 0x2689,
        since: 555,
        listed_in: "555.42.02",
        name: "NVIDIA GeForce RTX 4070 Ti SUPER",
    },
    Late {
        device_id: 0x26b2,
        since: 535,
        listed_in: "535.98",
        name: "NVIDIA RTX 5000 Ada Generation",
    },
    Late {
        device_id: 0x26b3,
        since: 535,
        listed_in: "535.146.02",
        name: "NVIDIA RTX 5880 Ada Generation",
    },
    Late {
        device_id: 0x26b9,
        since: 535,
        listed_in: "535.104.05",
        name: "NVIDIA L40S",
    },
    Late {
        device_id: 0x26ba,
        since: 535,
        listed_in: "535.154.05",
        name: "NVIDIA L20",
    },
    Late {
        device_id: 0x2702,
        since: 550,
        listed_in: "550.54.14",
        name: "NVIDIA GeForce RTX 4080 SUPER",
    },
    Late {
        device_id: 0x2705,
        since: 550,
        listed_in: "550.40.07",
        name: "NVIDIA GeForce RTX 4070 Ti SUPER",
    },
    Late {
        device_id: 0x2709,
        since: 550,
        listed_in: "550.67",
        name: "NVIDIA GeForce RTX 4070",
    },
    Late {
        device_id: 0x2783,
        since: 550,
        listed_in: "550.40.07",
        name: "NVIDIA GeForce RTX 4070 SUPER",
    },
    Late {
        device_id: 0x2788,
        since: 550,
        listed_in: "550.67",
        name: "NVIDIA GeForce RTX 4060 Ti",
    },
    Late {
        device_id: 0x27b1,
        since: 535,
        listed_in: "535.113.01",
        name: "NVIDIA RTX 4500 Ada Generation",
    },
    Late {
        device_id: 0x27b2,
        since: 535,
        listed_in: "535.98",
        name: "NVIDIA RTX 4000 Ada Generation",
    },
    Late {
        device_id: 0x27b6,
        since: 535,
        listed_in: "535.154.05",
        name: "NVIDIA L2",
    },
    Late {
        device_id: 0x27fb,
        since: 535,
        listed_in: "535.104.05",
        name: "NVIDIA RTX 3500 Ada Generation Embedded GPU",
    },
    Late {
        device_id: 0x2808,
        since: 550,
        listed_in: "550.67",
        name: "NVIDIA GeForce RTX 4060",
    },
    Late {
        device_id: 0x2822,
        since: 550,
        listed_in: "550.107.02",
        name: "NVIDIA GeForce RTX 3050 A Laptop GPU",
    },
    Late {
        device_id: 0x28a3,
        since: 550,
        listed_in: "550.142",
        name: "NVIDIA GeForce RTX 3050 A Laptop GPU",
    },
    Late {
        device_id: 0x28b0,
        since: 550,
        listed_in: "550.54.14",
        name: "NVIDIA RTX 2000 Ada Generation",
    },
    Late {
        device_id: 0x28b9,
        since: 535,
        listed_in: "535.171.04",
        name: "NVIDIA RTX 1000 Ada Generation Laptop GPU",
    },
    Late {
        device_id: 0x28ba,
        since: 535,
        listed_in: "535.183.01",
        name: "NVIDIA RTX 500 Ada Generation Laptop GPU",
    },
    Late {
        device_id: 0x28bb,
        since: 535,
        listed_in: "535.171.04",
        name: "NVIDIA RTX 500 Ada Generation Laptop GPU",
    },
    Late {
        device_id: 0x28e3,
        since: 550,
        listed_in: "550.163.01",
        name: "NVIDIA GeForce RTX 3050 A Laptop GPU",
    },
    Late {
        device_id: 0x29bb,
        since: 580,
        listed_in: "580.82.07",
        name: "NVIDIA DRIVE P2021",
    },
    Late {
        device_id: 0x2b8c,
        since: 580,
        listed_in: "580.76.05",
        name: "NVIDIA GeForce RTX 5090 D V2",
    },
    Late {
        device_id: 0x2bb2,
        since: 580,
        listed_in: "580.95.05",
        name: "NVIDIA RTX PRO 6000D Blackwell Workstation Edition",
    },
    Late {
        device_id: 0x2bb5,
        since: 575,
        listed_in: "575.57.08",
        name: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    },
    Late {
        device_id: 0x2bb9,
        since: 580,
        listed_in: "580.82.07",
        name: "NVIDIA RTX 6000D",
    },
    Late {
        device_id: 0x2bbc,
        since: 580,
        listed_in: "580.95.05",
        name: "NVIDIA RTX PRO 6000D Blackwell Max-Q Workstation Edition",
    },
    Late {
        device_id: 0x2c3a,
        since: 580,
        listed_in: "580.142",
        name: "NVIDIA RTX PRO 4500 Blackwell Server Edition",
    },
    Late {
        device_id: 0x2c77,
        since: 580,
        listed_in: "580.105.08",
        name: "NVIDIA RTX PRO 5000 Blackwell Embedded GPU",
    },
    Late {
        device_id: 0x2d83,
        since: 575,
        listed_in: "575.64.03",
        name: "NVIDIA GeForce RTX 5050",
    },
    Late {
        device_id: 0x2e12,
        since: 580,
        listed_in: "580.119.02",
        name: "NVIDIA GB10",
    },
    Late {
        device_id: 0x3182,
        since: 580,
        listed_in: "580.82.07",
        name: "NVIDIA B300 SXM6 AC",
    },
    Late {
        device_id: 0x31c2,
        since: 580,
        listed_in: "580.82.07",
        name: "NVIDIA GB300",
    },
];

/// The branches that drive a GPU under a flavour: `since..=last`, each end open when `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branches {
    pub since: Option<u32>,
    pub last: Option<u32>,
    /// Where `since` comes from.
    pub since_source: String,
    /// Where `last` comes from.
    pub last_source: &'static str,
}

impl Branches {
    pub fn drives(&self, branch: u32) -> bool {
        self.since.is_none_or(|s| branch >= s) && self.last.is_none_or(|l| branch <= l)
    }
}

impl fmt::Display for Branches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.since, self.last) {
            (Some(s), Some(l)) => write!(f, "R{s} to R{l}"),
            (Some(s), None) => write!(f, "R{s} and newer"),
            (None, Some(l)) => write!(f, "R{l} and older"),
            (None, None) => f.write_str("every branch"),
        }
    }
}

/// The row of an architecture.
pub fn row(arch: Arch) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.arch == arch)
}

/// The branches of `flavour` that drive the GPU with this device id and kind. `None` when the
/// flavour never drives it (that refusal is [`crate::flavour::choose`]'s).
pub fn branches(device_id: u16, kind: &GpuKind, flavour: ModuleFlavour) -> Option<Branches> {
    let row = row(kind.arch)?;
    let (since, since_source) = match flavour {
        ModuleFlavour::Open => {
            if !kind.open_supported() {
                return None;
            }
            (row.open_since, row.source)
        }
        ModuleFlavour::Proprietary => {
            if !kind.proprietary_supported() {
                return None;
            }
            (row.proprietary_since, row.source)
        }
    };
    let (since, since_source) = match LATE.iter().find(|l| l.device_id == device_id) {
        Some(l) => (Some(l.since), format!("{OPEN_README} @{}", l.listed_in)),
        None => (since, since_source.to_string()),
    };
    Some(Branches {
        since,
        last: row.last,
        since_source,
        last_source: row.source,
    })
}

/// A GPU on PCI whose device id is in no row of gpuhost's table: whether the branch drives it
/// was not checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unchecked {
    pub gpu: PciGpu,
    pub branch: u32,
}

impl fmt::Display for Unchecked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GPU 10de:{} at {} is not in gpuhost's GPU table: whether driver branch R{} drives it was not checked; see the supported GPUs in that driver's README",
            self.gpu.device_id, self.gpu.address, self.branch
        )
    }
}

/// Refuse a branch that does not drive every GPU on PCI under `flavour` (invalid input: exit
/// 2), naming the GPU, the branches that drive it and what to use; `what` names the driver
/// (`driver 535.104.05 of cuda-repo-….rpm`). `branch` 0 (not known) checks nothing. Returns
/// the GPUs that could not be checked.
pub fn check(
    gpus: &[PciGpu],
    flavour: ModuleFlavour,
    branch: u32,
    what: &str,
) -> anyhow::Result<Vec<Unchecked>> {
    let mut unchecked = Vec::new();
    for g in gpus {
        let Some(kind) = kind_of_hex(&g.device_id) else {
            unchecked.push(Unchecked {
                gpu: g.clone(),
                branch,
            });
            continue;
        };
        if branch == 0 {
            continue;
        }
        let id = u16::from_str_radix(g.device_id.trim().trim_start_matches("0x"), 16)
            .unwrap_or_default();
        let Some(b) = branches(id, &kind, flavour) else {
            continue;
        };
        if b.drives(branch) {
            continue;
        }
        let (to_use, source) = match b.last {
            Some(l) if branch > l => (format!("≤ {l}"), b.last_source),
            _ => (
                format!("≥ {}", b.since.unwrap_or_default()),
                b.since_source.as_str(),
            ),
        };
        return Err(invalid!(
            "{} [10de:{}] {} is not driven by {what} (branch R{branch}): NVIDIA's {flavour} kernel modules drive it in branches {b} ({source}); use a local repo of driver branch {to_use}",
            g.address,
            g.device_id,
            kind.describe(),
        ));
    }
    Ok(unchecked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhost_host::error::is_invalid;
    use rstest::rstest;

    fn gpu(id: &str) -> Vec<PciGpu> {
        vec![PciGpu {
            address: "0000:19:00.0".to_string(),
            device_id: id.to_string(),
        }]
    }

    const OPEN: ModuleFlavour = ModuleFlavour::Open;
    const PROP: ModuleFlavour = ModuleFlavour::Proprietary;

    #[rstest]
    // Blackwell starts at R570 (B200, GB200, RTX 5090 in 570.86.x/570.124.04).
    #[case("2901", OPEN, 565, false)]
    #[case("2901", OPEN, 570, true)]
    #[case("2941", OPEN, 570, true)]
    #[case("2b85", OPEN, 570, true)]
    #[case("2901", OPEN, 535, false)]
    // Later Blackwell chips: RTX PRO 6000 Server from 575, GB300 from 580.
    #[case("2bb5", OPEN, 570, false)]
    #[case("2bb5", OPEN, 575, true)]
    #[case("31c2", OPEN, 575, false)]
    #[case("31c2", OPEN, 580, true)]
    // Hopper: H100 SXM from 525, H200 from 550, H200 NVL from 565, GH200 from 535.
    #[case("2330", OPEN, 520, false)]
    #[case("2330", OPEN, 525, true)]
    #[case("2330", OPEN, 535, true)]
    #[case("2331", OPEN, 520, true)]
    #[case("2335", OPEN, 545, false)]
    #[case("2335", OPEN, 535, false)]
    #[case("2335", OPEN, 550, true)]
    #[case("2335", OPEN, 570, true)]
    #[case("2335", OPEN, 580, true)]
    #[case("2335", PROP, 535, false)]
    #[case("233b", OPEN, 560, false)]
    #[case("233b", OPEN, 565, true)]
    #[case("2342", OPEN, 530, false)]
    #[case("2342", OPEN, 535, true)]
    // Ada from 525; L40S from 535.
    #[case("2684", OPEN, 520, false)]
    #[case("2684", OPEN, 525, true)]
    #[case("26b9", OPEN, 530, false)]
    #[case("26b9", OPEN, 535, true)]
    // Turing and Ampere from the first table (515); T4 is Turing's, not a late chip.
    #[case("1eb8", OPEN, 515, true)]
    #[case("1eb8", OPEN, 535, true)]
    #[case("20b2", OPEN, 515, true)]
    #[case("20b2", PROP, 470, true)]
    // Kepler ends at R470.
    #[case("102d", PROP, 470, true)]
    #[case("102d", PROP, 495, false)]
    #[case("102d", PROP, 570, false)]
    #[case("102d", PROP, 580, false)]
    // Maxwell, Pascal, Volta end at R580.
    #[case("13f2", PROP, 580, true)]
    #[case("15f8", PROP, 580, true)]
    #[case("1db5", PROP, 535, true)]
    #[case("1db5", PROP, 580, true)]
    #[case("1db5", PROP, 590, false)]
    #[case("1b38", PROP, 595, false)]
    fn boundaries(
        #[case] id: &str,
        #[case] flavour: ModuleFlavour,
        #[case] branch: u32,
        #[case] driven: bool,
    ) {
        let r = check(&gpu(id), flavour, branch, "driver x");
        assert_eq!(r.is_ok(), driven, "{id} R{branch} {flavour}: {r:?}");
        if let Err(e) = r {
            assert!(is_invalid(&e), "{e:#}");
        }
    }

    #[test]
    fn a_refusal_names_the_gpu_the_branches_and_what_to_use() {
        let e = check(
            &gpu("2901"),
            OPEN,
            535,
            "driver 535.104.05 of cuda-repo-x.rpm",
        )
        .err();
        let text = e.map(|e| format!("{e:#}")).unwrap_or_default();
        for n in [
            "0000:19:00.0 [10de:2901] B200 (Blackwell)",
            "driver 535.104.05 of cuda-repo-x.rpm (branch R535)",
            "branches R570 and newer",
            "README.md @570.86.15",
            "use a local repo of driver branch ≥ 570",
        ] {
            assert!(text.contains(n), "{n} not in {text}");
        }
        let e = check(&gpu("102d"), PROP, 570, "driver 570.124.06").err();
        let text = e.map(|e| format!("{e:#}")).unwrap_or_default();
        for n in [
            "Tesla K80 (Kepler)",
            "branches R470 and older",
            "use a local repo of driver branch ≤ 470",
        ] {
            assert!(text.contains(n), "{n} not in {text}");
        }
        let e = check(&gpu("2335"), OPEN, 535, "driver 535.104.05").err();
        let text = e.map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(
            text.contains("README.md, \"Compatible GPUs\" @550.90.07"),
            "{text}"
        );
        assert!(text.contains("≥ 550"), "{text}");
    }

    #[test]
    fn unknown_ids_are_named_not_refused() -> anyhow::Result<()> {
        let u = check(&gpu("3400"), OPEN, 580, "driver 580.82.07")?;
        assert_eq!(u.len(), 1);
        let text = u[0].to_string();
        assert!(text.contains("10de:3400 at 0000:19:00.0"), "{text}");
        assert!(text.contains("R580"), "{text}");
        Ok(())
    }

    #[test]
    fn an_unknown_branch_checks_nothing() -> anyhow::Result<()> {
        assert!(check(&gpu("2901"), OPEN, 0, "driver ?")?.is_empty());
        Ok(())
    }

    /// The table is consistent: each late chip is of a known architecture and later than its
    /// row, ids are unique, and every row's ends are in order.
    #[test]
    fn the_table_is_consistent() {
        for l in LATE {
            let k = gpuhost_host::gpu::kind_of(l.device_id);
            let r = k.as_ref().and_then(|k| row(k.arch));
            let since = r.and_then(|r| r.open_since).unwrap_or(u32::MAX);
            assert!(l.since > since, "{:04x} {}", l.device_id, l.name);
            assert!(l.listed_in.starts_with(&l.since.to_string()), "{l:?}");
            assert_eq!(
                LATE.iter().filter(|m| m.device_id == l.device_id).count(),
                1
            );
        }
        for r in ROWS {
            if let (Some(s), Some(l)) = (r.open_since.or(r.proprietary_since), r.last) {
                assert!(s <= l, "{r:?}");
            }
        }
        let archs: Vec<Arch> = ROWS.iter().map(|r| r.arch).collect();
        assert!(archs.windows(2).all(|w| w[0] < w[1]), "{archs:?}");
        assert_eq!(archs.len(), 9, "one row per architecture");
    }
}
