//! CUDA and driver version numbers.

use std::cmp::Ordering;
use std::fmt;

/// A CUDA version: `12.4` or `12.4.1` (a missing patch is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CudaVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl CudaVersion {
    pub fn new(major: u32, minor: u32, patch: u32) -> Self {
        CudaVersion {
            major,
            minor,
            patch,
        }
    }

    /// `12.4`, `12.4.1` (also `10.2.89`); `None` for anything else (`12`, `12.x`, `12.4.1.1`).
    pub fn parse(s: &str) -> Option<CudaVersion> {
        let parts: Vec<&str> = s.trim().split('.').collect();
        if !(2..=3).contains(&parts.len()) {
            return None;
        }
        let num = |p: &str| -> Option<u32> {
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse().ok())
                .flatten()
        };
        Some(CudaVersion {
            major: num(parts[0])?,
            minor: num(parts[1])?,
            patch: match parts.get(2) {
                Some(p) => num(p)?,
                None => 0,
            },
        })
    }

    /// `12.4`
    pub fn major_minor(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }

    /// `cuda-compat-12-4`
    pub fn compat_package(&self) -> String {
        format!("cuda-compat-{}-{}", self.major, self.minor)
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// An NVIDIA driver version: `535.104.05`, `570.26`, `580`. Compared numerically, component by
/// component; trailing zero components do not count (`580` = `580.0`).
#[derive(Clone, Debug, Default)]
pub struct DriverVersion {
    text: String,
    parts: Vec<u64>,
}

impl DriverVersion {
    /// Dot-separated numbers, at least one; `None` otherwise.
    pub fn parse(s: &str) -> Option<DriverVersion> {
        let s = s.trim();
        let parts = s
            .split('.')
            .map(|p| {
                (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| p.parse::<u64>().ok())
                    .flatten()
            })
            .collect::<Option<Vec<u64>>>()?;
        Some(DriverVersion {
            text: s.to_string(),
            parts,
        })
    }

    /// The branch: 535 for 535.104.05.
    pub fn branch(&self) -> u64 {
        self.parts.first().copied().unwrap_or(0)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn significant(&self) -> &[u64] {
        let n = self
            .parts
            .iter()
            .rposition(|p| *p != 0)
            .map_or(0, |i| i + 1);
        &self.parts[..n]
    }
}

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for DriverVersion {
    fn eq(&self, other: &Self) -> bool {
        self.significant() == other.significant()
    }
}

impl Eq for DriverVersion {}

impl PartialOrd for DriverVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DriverVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        self.significant().cmp(other.significant())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions() {
        assert_eq!(CudaVersion::parse("12.4"), Some(CudaVersion::new(12, 4, 0)));
        assert_eq!(
            CudaVersion::parse("10.2.89"),
            Some(CudaVersion::new(10, 2, 89))
        );
        for bad in ["12", "12.x", "12.4.1.1", "", "v12.4", "12..4", "-1.2"] {
            assert_eq!(CudaVersion::parse(bad), None, "{bad}");
        }
        assert!(CudaVersion::new(12, 10, 0) > CudaVersion::new(12, 9, 1));
        assert_eq!(
            CudaVersion::new(12, 4, 1).compat_package(),
            "cuda-compat-12-4"
        );
    }

    #[test]
    fn driver_versions_compare_numerically() {
        let v = |s: &str| DriverVersion::parse(s).unwrap_or_default();
        assert!(v("535.104.05") > v("535.54.03"));
        assert!(v("580") <= v("580.65.06"));
        assert_eq!(v("580"), v("580.0.0"));
        assert!(v("570.26") < v("570.124.06"));
        assert_eq!(v("535.104.05").branch(), 535);
        assert_eq!(v("535.104.05").to_string(), "535.104.05");
        assert!(DriverVersion::parse("535.x").is_none());
        assert!(DriverVersion::parse("").is_none());
    }
}
