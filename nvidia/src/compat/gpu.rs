//! GPU brands: what NVML reports, what the container runtime calls it, and whether CUDA forward
//! compatibility is available on it.
//!
//! NVML's `nvmlBrandType_t` (nvml.h): 0 UNKNOWN, 1 QUADRO, 2 TESLA, 3 NVS, 4 GRID, 5 GEFORCE,
//! 6 TITAN, 7 NVIDIA_VAPPS, 8 NVIDIA_VPC, 9 NVIDIA_VCS, 10 NVIDIA_VWS, 11 NVIDIA_CLOUD_GAMING,
//! 12 QUADRO_RTX, 13 NVIDIA_RTX, 14 NVIDIA, 15 GEFORCE_RTX, 16 TITAN_RTX. libnvidia-container
//! names only the first six and calls every other brand `Unknown`
//! (`src/driver.c`, `driver_get_device_brand_1_svc`) — so an A100, H100 or H200, whose NVML
//! brand is NVIDIA (14; `nvidia-smi -q` shows "Product Brand: NVIDIA"), matches `brand=unknown`
//! in `NVIDIA_REQUIRE_CUDA`, never `brand=nvidia`.
//!
//! Forward compatibility (cuda-compat packages) works only on NVIDIA Data Center GPUs, select
//! NGC Server Ready RTX SKUs and Jetson (CUDA Compatibility guide, "Forward Compatibility").

use serde::Serialize;

/// NVML brand names, indexed by `nvmlBrandType_t`.
const NVML_BRANDS: [&str; 17] = [
    "UNKNOWN",
    "QUADRO",
    "TESLA",
    "NVS",
    "GRID",
    "GEFORCE",
    "TITAN",
    "NVIDIA_VAPPS",
    "NVIDIA_VPC",
    "NVIDIA_VCS",
    "NVIDIA_VWS",
    "NVIDIA_CLOUD_GAMING",
    "QUADRO_RTX",
    "NVIDIA_RTX",
    "NVIDIA",
    "GEFORCE_RTX",
    "TITAN_RTX",
];

/// NVML's name for a brand number (`NVIDIA` for 14).
pub(crate) fn nvml_brand_name(brand: u32) -> String {
    usize::try_from(brand)
        .ok()
        .and_then(|i| NVML_BRANDS.get(i))
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("brand {brand}"))
}

/// The brand as libnvidia-container names it, which is what `brand=` terms compare against.
pub fn libnvc_brand(brand: u32) -> &'static str {
    match brand {
        1 => "Quadro",
        2 => "Tesla",
        3 => "NVS",
        4 => "GRID",
        5 => "GeForce",
        6 => "TITAN",
        _ => "Unknown",
    }
}

/// Every brand name libnvidia-container can produce.
pub const LIBNVC_BRANDS: [&str; 7] = [
    "Quadro", "Tesla", "NVS", "GRID", "GeForce", "TITAN", "Unknown",
];

/// Whether CUDA forward compatibility is available on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardCompat {
    /// A data center GPU (NVML brand TESLA, NVIDIA, or a virtual compute/GRID brand).
    Supported,
    /// GeForce, TITAN, Quadro/NVS workstation parts: not supported (the guide's exception for
    /// "select NGC Server Ready SKUs of RTX cards" is not visible from NVML).
    NotSupported,
    /// Not known (no NVML brand; libnvidia-container's `Unknown` covers both data center and
    /// other parts).
    Unknown,
}

/// Forward compatibility by NVML brand number.
pub(crate) fn forward_compat_by_nvml(brand: u32) -> ForwardCompat {
    match brand {
        2 | 4 | 9 | 14 => ForwardCompat::Supported,
        1 | 3 | 5 | 6 | 10 | 11 | 12 | 13 | 15 | 16 => ForwardCompat::NotSupported,
        _ => ForwardCompat::Unknown,
    }
}

/// Forward compatibility by libnvidia-container's brand name (`--brand`).
pub(crate) fn forward_compat_by_libnvc(brand: &str) -> ForwardCompat {
    match brand.to_ascii_lowercase().as_str() {
        "tesla" | "grid" => ForwardCompat::Supported,
        "geforce" | "titan" | "quadro" | "nvs" => ForwardCompat::NotSupported,
        _ => ForwardCompat::Unknown,
    }
}

/// One GPU of the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Gpu {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// NVML's brand number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml_brand: Option<u32>,
    /// The brand as the container runtime sees it (`Unknown` for an H100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brand: Option<String>,
    /// Compute capability `major.minor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
}

impl Gpu {
    /// A GPU known by its NVML answers.
    pub fn from_nvml(
        index: usize,
        name: Option<String>,
        brand: Option<u32>,
        arch: Option<String>,
    ) -> Gpu {
        Gpu {
            index,
            name,
            nvml_brand: brand,
            brand: brand.map(|b| libnvc_brand(b).to_string()),
            arch,
        }
    }

    pub fn forward_compat(&self) -> ForwardCompat {
        match (self.nvml_brand, &self.brand) {
            (Some(b), _) => forward_compat_by_nvml(b),
            (None, Some(b)) => forward_compat_by_libnvc(b),
            (None, None) => ForwardCompat::Unknown,
        }
    }

    /// What the GPU is called in an answer: `GPU 0 (NVIDIA H200, brand NVIDIA)`.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = &self.name {
            parts.push(n.clone());
        }
        match (self.nvml_brand, &self.brand) {
            (Some(b), Some(l)) => parts.push(format!(
                "NVML brand {}, runtime brand {l}",
                nvml_brand_name(b)
            )),
            (None, Some(l)) => parts.push(format!("brand {l}")),
            _ => {}
        }
        if let Some(a) = &self.arch {
            parts.push(format!("compute capability {a}"));
        }
        if parts.is_empty() {
            format!("GPU {}", self.index)
        } else {
            format!("GPU {} ({})", self.index, parts.join(", "))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn data_center_gpus_are_unknown_to_the_runtime_but_forward_compatible() {
        // H200: NVML brand 14 (NVIDIA), as nvidia-smi -q shows "Product Brand: NVIDIA".
        assert_eq!(nvml_brand_name(14), "NVIDIA");
        assert_eq!(libnvc_brand(14), "Unknown");
        assert_eq!(forward_compat_by_nvml(14), ForwardCompat::Supported);
        assert_eq!(libnvc_brand(2), "Tesla");
        assert_eq!(libnvc_brand(6), "TITAN");
        assert_eq!(forward_compat_by_nvml(15), ForwardCompat::NotSupported);
        assert_eq!(forward_compat_by_libnvc("unknown"), ForwardCompat::Unknown);
        assert_eq!(forward_compat_by_libnvc("TESLA"), ForwardCompat::Supported);
        assert_eq!(nvml_brand_name(40), "brand 40");
        for b in 0..17 {
            assert!(LIBNVC_BRANDS.contains(&libnvc_brand(b)));
        }
    }
}
