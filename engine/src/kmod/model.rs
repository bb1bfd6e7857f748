//! What the build hands the packaging, and what the report says of each kernel.

use std::path::PathBuf;

use serde::Serialize;

use gpuhost_nvidia::packages::ModuleFlavour;

/// What names one RPM.
pub(super) struct Info {
    pub(super) driver: String,
    pub(super) epoch: u32,
    pub(super) flavour: ModuleFlavour,
    pub(super) kernel: String,
    pub(super) arch: &'static str,
}

/// One kernel's modules, built and signed.
pub(super) struct Built {
    /// The signed modules, on this machine.
    pub(super) modules: Vec<PathBuf>,
    pub(super) compiler: String,
    pub(super) seconds: f64,
    pub(super) cpu_seconds: f64,
    /// Where rpmbuild works for this kernel (in the scratch folder).
    pub(super) rpm_dir: PathBuf,
}

/// One kernel's RPM.
#[derive(Clone, Debug, Serialize)]
pub struct BuiltKmod {
    pub kernel: String,
    pub package: String,
    pub file: String,
    pub sha256: String,
    pub modules: Vec<String>,
    /// The compiler make ran (the system gcc, or the kernel's gcc-toolset).
    pub compiler: String,
    /// make's wall time and the CPU time it used (user + system, its children included).
    pub build_seconds: f64,
    pub cpu_seconds: f64,
}
