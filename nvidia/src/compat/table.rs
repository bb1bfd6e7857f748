//! NVIDIA's published CUDA ↔ driver facts, as data.
//!
//! Sources (read 2026-12; re-check when NVIDIA ships a release):
//! - [`RELEASES`]: CUDA Toolkit Release Notes, table "CUDA Toolkit and Corresponding Driver
//!   Versions" (<https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html>), Linux
//!   x86_64 column ("Toolkit Driver Version"), cross-checked against the copy in Meson's CUDA
//!   module (`mesonbuild/modules/cuda.py`, `_DRIVER_TABLE_VERSION`) and against the driver
//!   version in NVIDIA's local repo and runfile names (`cuda-repo-rhel8-12-2-local-12.2.2_535.104.05`,
//!   `cuda_12.9.1_575.57.08_linux.run`).
//! - [`minor_version_floor`]: CUDA Compatibility guide, "Minor Version Compatibility", table
//!   "CUDA Toolkit 11.x, 12.x, and 13.x Minimum and Maximum Required Driver Versions"
//!   (<https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html>):
//!   13.x ≥ 580, 12.x ≥ 525 (release notes: 525.60.13), 11.x ≥ 450 (release notes: 450.80.02,
//!   "CUDA 11.0 was released with an earlier driver version, but by upgrading to 450.80.02 …
//!   minor version compatibility is possible across the CUDA 11.x family"). Its limits: a
//!   driver older than the toolkit's own cannot JIT-compile PTX the newer toolkit produced
//!   (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`), and APIs that need the newer driver return
//!   `cudaErrorCallRequiresNewerDriver`.
//! - [`forward_compat_branches`]: which driver branches a `cuda-compat-<M>-<m>` package supports,
//!   as NVIDIA's own CUDA images declare it: the `brand=…,driver>=B,driver<B+1` terms of
//!   `NVIDIA_REQUIRE_CUDA` in gitlab.com/nvidia/container-images/cuda `dist/<ver>/*/base/Dockerfile`
//!   (amd64 stage; GitHub mirror pranavmishra90/nvidia-container-images-cuda @60a1c892).
//!   Forward compatibility itself: CUDA Compatibility guide, "Forward Compatibility" — data
//!   center GPUs (and select NGC Server Ready RTX SKUs, Jetson) only.
//! - [`arch_floor`]: CUDA release notes, "Deprecated or Dropped Architectures": 11.0 dropped
//!   compute capability 3.0/3.2, 12.0 dropped Kepler 3.5/3.7, 13.0 dropped Maxwell, Pascal and
//!   Volta (below 7.5); cross-checked with Meson's `_MICROISA_RANGES_DEF`.

use super::version::{CudaVersion, DriverVersion};

/// `(CUDA release, minimum Linux x86_64 driver)`, newest first. The driver is the one that
/// release ships; older drivers run it only through compatibility.
pub const RELEASES: &[(&str, &str)] = &[
    ("13.3.1", "610.43.02"),
    ("13.3.0", "610.43.02"),
    ("13.2.1", "595.58.03"),
    ("13.2.0", "595.45.04"),
    ("13.1.1", "590.48.01"),
    ("13.1.0", "590.44.01"),
    ("13.0.2", "580.95.05"),
    ("13.0.1", "580.82.07"),
    ("13.0.0", "580.65.06"),
    ("12.9.1", "575.57.08"),
    ("12.9.0", "575.51.03"),
    ("12.8.1", "570.124.06"),
    ("12.8.0", "570.26"),
    ("12.6.3", "560.35.05"),
    ("12.6.2", "560.35.03"),
    ("12.6.1", "560.35.03"),
    ("12.6.0", "560.28.03"),
    ("12.5.1", "555.42.06"),
    ("12.5.0", "555.42.02"),
    ("12.4.1", "550.54.15"),
    ("12.4.0", "550.54.14"),
    ("12.3.1", "545.23.08"),
    ("12.3.0", "545.23.06"),
    ("12.2.2", "535.104.05"),
    ("12.2.1", "535.86.09"),
    ("12.2.0", "535.54.03"),
    ("12.1.1", "530.30.02"),
    ("12.1.0", "530.30.02"),
    ("12.0.1", "525.85.11"),
    ("12.0.0", "525.60.13"),
    ("11.8.0", "520.61.05"),
    ("11.7.1", "515.48.07"),
    ("11.7.0", "515.43.04"),
    ("11.6.2", "510.47.03"),
    ("11.6.1", "510.47.03"),
    ("11.6.0", "510.39.01"),
    ("11.5.2", "495.29.05"),
    ("11.5.1", "495.29.05"),
    ("11.5.0", "495.29.05"),
    ("11.4.4", "470.82.01"),
    ("11.4.3", "470.82.01"),
    ("11.4.2", "470.57.02"),
    ("11.4.1", "470.57.02"),
    ("11.4.0", "470.42.01"),
    ("11.3.1", "465.19.01"),
    ("11.3.0", "465.19.01"),
    ("11.2.2", "460.32.03"),
    ("11.2.1", "460.32.03"),
    ("11.2.0", "460.27.03"),
    ("11.1.1", "455.32"),
    ("11.1.0", "455.23"),
    ("11.0.3", "450.51.06"),
    ("11.0.2", "450.51.05"),
    ("11.0.1", "450.36.06"),
    ("10.2.89", "440.33"),
    ("10.1.105", "418.39"),
    ("10.0.130", "410.48"),
    ("9.2.148", "396.37"),
    ("9.2.88", "396.26"),
    ("9.1.85", "390.46"),
    ("9.0.76", "384.81"),
];

/// One row of [`RELEASES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub cuda: &'static str,
    pub driver: &'static str,
}

/// The minimum driver for a CUDA version: the newest row of its `major.minor` at or below it
/// (`12.4` → 12.4.0's 550.54.14; `12.4.1` → 550.54.15; `12.4.7` → 12.4.1's). `None` when the
/// table has no release of that `major.minor`.
pub(crate) fn native_minimum(cuda: &CudaVersion) -> Option<Row> {
    RELEASES
        .iter()
        .filter_map(|(c, d)| Some((CudaVersion::parse(c)?, *c, *d)))
        .filter(|(v, _, _)| v.major == cuda.major && v.minor == cuda.minor && v <= cuda)
        .max_by(|a, b| a.0.cmp(&b.0))
        .or_else(|| {
            // A `major.minor` given without patch that the table lists only with a patch
            // (10.2 → 10.2.89): its oldest row.
            RELEASES
                .iter()
                .filter_map(|(c, d)| Some((CudaVersion::parse(c)?, *c, *d)))
                .filter(|(v, _, _)| v.major == cuda.major && v.minor == cuda.minor)
                .min_by(|a, b| a.0.cmp(&b.0))
        })
        .map(|(_, c, d)| Row { cuda: c, driver: d })
}

/// The newest CUDA `major.minor` a driver runs natively, by the table: what
/// `nvmlSystemGetCudaDriverVersion` reports (nvidia-smi's "CUDA Version"), derived without
/// asking NVML. `None` below the table.
pub(crate) fn newest_native(driver: &DriverVersion) -> Option<(u32, u32)> {
    RELEASES
        .iter()
        .filter_map(|(c, d)| Some((CudaVersion::parse(c)?, DriverVersion::parse(d)?)))
        .filter(|(_, d)| d <= driver)
        .map(|(c, _)| (c.major, c.minor))
        .max()
}

/// The minimum driver for minor-version compatibility within a CUDA major.
pub fn minor_version_floor(major: u32) -> Option<&'static str> {
    match major {
        11 => Some("450.80.02"),
        12 => Some("525.60.13"),
        13 => Some("580"),
        _ => None,
    }
}

/// The driver branches `cuda-compat-<major>-<minor>` supports (see the module doc): the
/// branches the newest image of that release in NVIDIA's current `dist/` accepts through its
/// brand terms (11.0–11.3 from `dist/end-of-life/`). `None` when NVIDIA's images for that
/// release are not in this table.
pub fn forward_compat_branches(major: u32, minor: u32) -> Option<&'static [u32]> {
    match (major, minor) {
        (11, 0) => Some(&[418]),
        (11, 1 | 2) => Some(&[418, 450]),
        (11, 3) => Some(&[418]),
        (11, 4) => Some(&[]),
        (11, 5..=8) | (12, 0) => Some(&[470]),
        (12, 1 | 2) => Some(&[470, 525]),
        (12, 3 | 4) => Some(&[470, 525, 535]),
        (12, 5 | 6) => Some(&[470, 535, 550]),
        (12, 8) => Some(&[470, 535, 550, 560, 565]),
        (12, 9) => Some(&[535, 550, 560, 565, 570]),
        (13, 0) => Some(&[535, 550, 565, 570, 575]),
        _ => None,
    }
}

/// The lowest compute capability a CUDA major still builds for.
pub fn arch_floor(major: u32) -> Option<(u32, u32)> {
    match major {
        11 => Some((3, 5)),
        12 => Some((5, 0)),
        13 => Some((7, 5)),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn cuda(s: &str) -> CudaVersion {
        CudaVersion::parse(s).unwrap_or_else(|| CudaVersion::new(0, 0, 0))
    }

    fn driver(s: &str) -> DriverVersion {
        DriverVersion::parse(s).unwrap_or_default()
    }

    #[test]
    fn the_table_is_well_formed_and_ordered() {
        let mut prev: Option<(CudaVersion, DriverVersion)> = None;
        for (c, d) in RELEASES {
            let (c, d) = (CudaVersion::parse(c), DriverVersion::parse(d));
            assert!(c.is_some() && d.is_some());
            let (c, d) = (c.unwrap_or_else(|| cuda("0.0")), d.unwrap_or_default());
            if let Some((pc, pd)) = &prev {
                assert!(c < *pc, "{c} after {pc}");
                assert!(d <= *pd, "{d} after {pd}");
            }
            prev = Some((c, d));
        }
    }

    #[test]
    fn minimum_drivers_from_the_release_notes() {
        let min = |s: &str| native_minimum(&cuda(s)).map(|r| r.driver);
        assert_eq!(min("12.4"), Some("550.54.14"));
        assert_eq!(min("12.4.1"), Some("550.54.15"));
        assert_eq!(min("12.4.9"), Some("550.54.15"));
        assert_eq!(min("12.2.2"), Some("535.104.05"));
        assert_eq!(min("11.4.1"), Some("470.57.02"));
        assert_eq!(min("12.0"), Some("525.60.13"));
        assert_eq!(min("10.2"), Some("440.33"));
        assert_eq!(min("13.0"), Some("580.65.06"));
        assert_eq!(min("12.7"), None);
        assert_eq!(min("14.0"), None);
    }

    #[test]
    fn what_nvidia_smi_would_show_for_a_driver() {
        let newest = |s: &str| newest_native(&driver(s));
        // The H200 capture: 580.159.04 shows "CUDA Version: 13.0".
        assert_eq!(newest("580.159.04"), Some((13, 0)));
        assert_eq!(newest("535.104.05"), Some((12, 2)));
        assert_eq!(newest("535.54.03"), Some((12, 2)));
        assert_eq!(newest("550.54.15"), Some((12, 4)));
        assert_eq!(newest("470.57.02"), Some((11, 4)));
        assert_eq!(newest("525.85.12"), Some((12, 0)));
        assert_eq!(newest("384.0"), None);
    }
}
