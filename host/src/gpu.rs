//! NVIDIA GPU architectures from PCI device ids, for the choice of kernel module flavour.
//!
//! NVIDIA's open kernel modules drive Turing and newer GPUs only; the proprietary modules do not
//! drive Blackwell, nor the Grace Hopper / Grace Blackwell superchips (NVIDIA Driver Installation
//! Guide, "Kernel Modules"; NVIDIA blog "NVIDIA Transitions Fully Towards Open-Source GPU Kernel
//! Modules"). Which architecture a GPU is comes from its PCI device id (`/sys/bus/pci/devices/*/device`).
//!
//! Source of the table: the PCI ID Repository (`pci.ids`, vendor `10de`), whose device names
//! start with the chip (`GM204GL [Tesla M60]`, `GV100GL [Tesla V100 SXM2 16GB]`,
//! `GH100 [H200 SXM 141GB]`, `GB100 [B200]`). NVIDIA numbers GPU functions by chip in blocks, so
//! each architecture is a few id ranges; the ranges below cover every GPU function `pci.ids`
//! (2023-04, as Debian 12 ships it) lists for chips GK…AD (a test checks that against
//! `/usr/share/misc/pci.ids` when present), plus the newer ids named in [`PRODUCTS`]. An id
//! outside every range is "unknown", never guessed.

use std::fmt;

use serde::Serialize;

/// GPU architectures from Kepler on, oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Kepler,
    Maxwell,
    Pascal,
    Volta,
    Turing,
    Ampere,
    Ada,
    Hopper,
    Blackwell,
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::Kepler => "Kepler",
            Arch::Maxwell => "Maxwell",
            Arch::Pascal => "Pascal",
            Arch::Volta => "Volta",
            Arch::Turing => "Turing",
            Arch::Ampere => "Ampere",
            Arch::Ada => "Ada Lovelace",
            Arch::Hopper => "Hopper",
            Arch::Blackwell => "Blackwell",
        })
    }
}

/// Device id ranges (inclusive), first match wins. Chips per range from `pci.ids`.
/// A GPU function on PCI: its address and device id (`0000:19:00.0`, `2335`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciGpu {
    pub address: String,
    pub device_id: String,
}

pub const RANGES: &[(u16, u16, Arch)] = &[
    (0x0fc0, 0x0fff, Arch::Kepler),    // GK107
    (0x1000, 0x103f, Arch::Kepler),    // GK110, GK180, GK210 (Tesla K20, K40, K80)
    (0x1180, 0x11ff, Arch::Kepler),    // GK104, GK106
    (0x1280, 0x12bf, Arch::Kepler),    // GK208
    (0x15f0, 0x15ff, Arch::Pascal),    // GP100 (Tesla P100, Quadro GP100)
    (0x1720, 0x172f, Arch::Pascal),    // GP100
    (0x1340, 0x17ff, Arch::Maxwell),   // GM107, GM108, GM200, GM204, GM206
    (0x1b00, 0x1d7f, Arch::Pascal),    // GP102, GP104, GP106, GP107, GP108
    (0x1d80, 0x1dff, Arch::Volta),     // GV100 (Tesla V100, Titan V)
    (0x1e00, 0x1fff, Arch::Turing),    // TU102, TU104 (T4), TU106, TU117
    (0x2080, 0x20ff, Arch::Ampere),    // GA100 (A100, A30)
    (0x2180, 0x21ff, Arch::Turing),    // TU116
    (0x2200, 0x223f, Arch::Ampere),    // GA102 (A40, A10)
    (0x2300, 0x237f, Arch::Hopper),    // GH100 (H100, H200, H20, H800, GH200)
    (0x2400, 0x25ff, Arch::Ampere),    // GA103, GA104, GA106, GA107
    (0x2600, 0x28ff, Arch::Ada),       // AD102 (L40, L40S), AD103, AD104 (L4), AD106, AD107
    (0x2900, 0x29ff, Arch::Blackwell), // GB100 (B200, GB200), GB102 (B100)
    (0x2b00, 0x2fff, Arch::Blackwell), // GB10B, GB202 (RTX PRO 6000 Blackwell), GB203, GB205, GB206, GB207
    (0x3100, 0x31ff, Arch::Blackwell), // GB110 (B300, GB300)
];

/// Data centre products by device id, for messages and for the superchips (Grace Hopper, Grace
/// Blackwell), which the proprietary modules do not drive whatever their GPU's architecture.
/// Names as `pci.ids` gives them (newer ids from newer `pci.ids` snapshots quoted by public
/// projects: H200 `2335`/`233b`, H20 `2329`, GH200 `2342`, B200 `2901`, B100 `29bc`,
/// GB200 `2941`, GB300 `31c2`/`31c3`).
pub const PRODUCTS: &[(u16, &str, bool)] = &[
    // (device id, product, Grace superchip)
    (0x1023, "Tesla K40m", false),
    (0x102d, "Tesla K80", false),
    (0x13f2, "Tesla M60", false),
    (0x17fd, "Tesla M40", false),
    (0x15f7, "Tesla P100 PCIe 12GB", false),
    (0x15f8, "Tesla P100 PCIe 16GB", false),
    (0x15f9, "Tesla P100 SXM2 16GB", false),
    (0x1b38, "Tesla P40", false),
    (0x1bb3, "Tesla P4", false),
    (0x1db1, "Tesla V100 SXM2 16GB", false),
    (0x1db4, "Tesla V100 PCIe 16GB", false),
    (0x1db5, "Tesla V100 SXM2 32GB", false),
    (0x1db6, "Tesla V100 PCIe 32GB", false),
    (0x1df6, "Tesla V100S PCIe 32GB", false),
    (0x1eb8, "Tesla T4", false),
    (0x20b0, "A100 SXM4 40GB", false),
    (0x20b2, "A100 SXM4 80GB", false),
    (0x20b5, "A100 PCIe 80GB", false),
    (0x20b7, "A30 PCIe", false),
    (0x2235, "A40", false),
    (0x2236, "A10", false),
    (0x2237, "A10G", false),
    (0x26b5, "L40", false),
    (0x26b9, "L40S", false),
    (0x27b8, "L4", false),
    (0x2321, "H100 NVL", false),
    (0x2322, "H800 PCIe", false),
    (0x2324, "H800", false),
    (0x2329, "H20", false),
    (0x2330, "H100 SXM5 80GB", false),
    (0x2331, "H100 PCIe", false),
    (0x2335, "H200 SXM 141GB", false),
    (0x233b, "H200 NVL", false),
    (0x2342, "GH200 480GB", true),
    // NVIDIA/open-gpu-kernel-modules README.md @565.57.01: "NVIDIA GH200 144G HBM3e".
    (0x2348, "GH200 144G HBM3e", true),
    (0x2901, "B200", false),
    (0x29bc, "B100", false),
    (0x2941, "GB200", true),
    (0x31c2, "GB300", true),
    (0x31c3, "GB300", true),
];

/// What gpuhost knows of one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuKind {
    pub arch: Arch,
    /// The product, when the id is in [`PRODUCTS`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<&'static str>,
    /// A Grace superchip (GH200, GB200, GB300): open modules only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub grace: bool,
}

impl GpuKind {
    /// NVIDIA's open kernel modules drive it (Turing and newer).
    pub fn open_supported(&self) -> bool {
        self.arch >= Arch::Turing
    }

    /// NVIDIA's proprietary kernel modules drive it (not Blackwell, not a Grace superchip).
    pub fn proprietary_supported(&self) -> bool {
        self.arch < Arch::Blackwell && !self.grace
    }

    /// `H200 SXM 141GB (Hopper)`, or `Hopper GPU` without a product name.
    pub fn describe(&self) -> String {
        match (self.product, self.grace) {
            (Some(p), true) => format!("{p} (Grace {} superchip)", self.arch),
            (Some(p), false) => format!("{p} ({})", self.arch),
            (None, _) => format!("{} GPU", self.arch),
        }
    }
}

/// The architecture (and product) of an NVIDIA GPU function by PCI device id; `None` when the
/// id is in no known range.
pub fn kind_of(device_id: u16) -> Option<GpuKind> {
    let arch = RANGES
        .iter()
        .find(|(lo, hi, _)| (*lo..=*hi).contains(&device_id))
        .map(|(_, _, a)| *a)?;
    let product = PRODUCTS.iter().find(|(id, _, _)| *id == device_id);
    Some(GpuKind {
        arch,
        product: product.map(|(_, p, _)| *p),
        grace: product.is_some_and(|(_, _, g)| *g),
    })
}

/// [`kind_of`] for a device id as sysfs or `facts` write it (`0x2335`, `2335`).
pub fn kind_of_hex(device_id: &str) -> Option<GpuKind> {
    let t = device_id.trim();
    let t = t.strip_prefix("0x").unwrap_or(t);
    u16::from_str_radix(t, 16).ok().and_then(kind_of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(0x102d, Arch::Kepler)] // Tesla K80
    #[case(0x1023, Arch::Kepler)] // Tesla K40m
    #[case(0x0fc6, Arch::Kepler)] // GK107
    #[case(0x12ba, Arch::Kepler)] // GK208
    #[case(0x13f2, Arch::Maxwell)] // Tesla M60
    #[case(0x17fd, Arch::Maxwell)] // Tesla M40
    #[case(0x15f8, Arch::Pascal)] // Tesla P100
    #[case(0x1b38, Arch::Pascal)] // Tesla P40
    #[case(0x1db5, Arch::Volta)] // V100 SXM2 32GB
    #[case(0x1eb8, Arch::Turing)] // T4
    #[case(0x2182, Arch::Turing)] // TU116
    #[case(0x20b2, Arch::Ampere)] // A100 80GB
    #[case(0x2236, Arch::Ampere)] // A10
    #[case(0x25b6, Arch::Ampere)] // GA107 (A16/A2)
    #[case(0x26b9, Arch::Ada)] // L40S
    #[case(0x27b8, Arch::Ada)] // L4
    #[case(0x2330, Arch::Hopper)] // H100 SXM5
    #[case(0x2335, Arch::Hopper)] // H200 SXM
    #[case(0x2329, Arch::Hopper)] // H20
    #[case(0x2342, Arch::Hopper)] // GH200
    #[case(0x2901, Arch::Blackwell)] // B200
    #[case(0x2941, Arch::Blackwell)] // GB200
    #[case(0x2bb5, Arch::Blackwell)] // GB202 (RTX PRO 6000)
    #[case(0x31c2, Arch::Blackwell)] // GB300
    fn architectures(#[case] id: u16, #[case] arch: Arch) {
        assert_eq!(kind_of(id).map(|k| k.arch), Some(arch), "{id:04x}");
    }

    #[test]
    fn unknown_ids_are_not_guessed() {
        assert_eq!(kind_of(0x1040), None); // GF119 (Fermi): older than any table row
        assert_eq!(kind_of(0xffff), None);
        assert_eq!(kind_of_hex("zz"), None);
    }

    fn kind(id: u16) -> anyhow::Result<GpuKind> {
        kind_of(id).ok_or_else(|| anyhow::anyhow!("{id:04x} unknown"))
    }

    #[test]
    fn which_modules_drive_what() -> anyhow::Result<()> {
        let v100 = kind(0x1db5)?;
        assert!(!v100.open_supported() && v100.proprietary_supported());
        let h100 = kind(0x2330)?;
        assert!(h100.open_supported() && h100.proprietary_supported());
        let gh200 = kind(0x2342)?;
        assert!(gh200.open_supported() && !gh200.proprietary_supported());
        assert_eq!(gh200.describe(), "GH200 480GB (Grace Hopper superchip)");
        let b200 = kind_of_hex("0x2901").ok_or_else(|| anyhow::anyhow!("b200"))?;
        assert!(b200.open_supported() && !b200.proprietary_supported());
        assert_eq!(b200.describe(), "B200 (Blackwell)");
        assert_eq!(kind(0x1e02)?.describe(), "Turing GPU");
        Ok(())
    }

    /// Every GPU function of chips GK…AD in the system's `pci.ids` falls in its chip's
    /// architecture (the table's source, checked against the real file).
    #[test]
    fn table_agrees_with_the_pci_id_repository() {
        let Ok(text) = std::fs::read_to_string("/usr/share/misc/pci.ids") else {
            eprintln!("no /usr/share/misc/pci.ids here (Debian: apt-get install pci.ids)");
            return;
        };
        let chips: &[(&str, Arch)] = &[
            ("GK", Arch::Kepler),
            ("GM", Arch::Maxwell),
            ("GP", Arch::Pascal),
            ("GV", Arch::Volta),
            ("TU", Arch::Turing),
            ("GA", Arch::Ampere),
            ("AD", Arch::Ada),
            ("GH", Arch::Hopper),
            ("GB", Arch::Blackwell),
        ];
        let mut in_nvidia = false;
        let mut checked = 0;
        for line in text.lines() {
            if !line.starts_with('\t') && !line.starts_with('#') && !line.is_empty() {
                in_nvidia = line.starts_with("10de ");
                continue;
            }
            let Some(dev) = line.strip_prefix('\t') else {
                continue;
            };
            if !in_nvidia || dev.starts_with('\t') {
                continue;
            }
            let Some((id, name)) = dev.split_once("  ") else {
                continue;
            };
            // GPU functions only: not the HDMI audio, USB, UCSI functions or NVSwitches.
            if [
                "Audio",
                "USB",
                "UCSI",
                "NVSwitch",
                "Controller",
                "Bridge",
                "Serial",
            ]
            .iter()
            .any(|w| name.contains(w))
            {
                continue;
            }
            let Some(&(_, arch)) = chips.iter().find(|(p, _)| {
                name.starts_with(p) && name[2..].starts_with(|c: char| c.is_ascii_digit())
            }) else {
                continue;
            };
            let Ok(id) = u16::from_str_radix(id, 16) else {
                continue;
            };
            assert_eq!(kind_of(id).map(|k| k.arch), Some(arch), "{id:04x} {name}");
            checked += 1;
        }
        assert!(checked > 300, "only {checked} NVIDIA GPU ids checked");
    }
}
