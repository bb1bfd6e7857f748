//! Will this CUDA, this requirement, this image run on this driver? One set of rules, used by
//! `gpuhost compat`, the `container-smoke` step, `gpuhost status` and `plan`.
//!
//! Three layers decide whether a CUDA container runs:
//! 1. **The container runtime's check** ([`dsl`], [`require`]): the image's `NVIDIA_REQUIRE_*`
//!    variables, evaluated by libnvidia-container against the driver and each GPU. A failure
//!    stops the container before it starts ("requirement error: unsatisfied condition: …").
//! 2. **CUDA's own compatibility rules** ([`table`]): the driver a CUDA release needs
//!    natively; minor-version compatibility within a major (11.x, 12.x, 13.x), with its limits;
//!    forward compatibility through `cuda-compat-<M>-<m>` on data center GPUs and the driver
//!    branches NVIDIA lists; the GPU architectures a CUDA major still builds for.
//! 3. **The GPU** ([`gpu`]): its brand, as NVML reports it and as the runtime names it, and
//!    whether forward compatibility is available on it.
//!
//! Reading an image's environment is in [`image`]; what an image ships that the host also
//! provides, in [`components`]. Sources are cited in each module.

pub mod components;
pub mod dsl;
pub mod gpu;
pub mod image;
pub mod require;
pub mod table;
pub mod version;

use anyhow::Result;
use serde::Serialize;

pub use components::PrefixLink;
use dsl::{DeviceFacts, DriverFacts};
use gpu::{ForwardCompat, Gpu};
pub use version::{CudaVersion, DriverVersion};

/// The answer to "will it run?".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Runs,
    DoesNotRun,
    /// It depends on something gpuhost does not know (the GPU's brand): the answer says what.
    Depends,
}

impl Verdict {
    /// `gpuhost compat`'s exit code: 0 runs, 1 does not run (or cannot be said to run).
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Runs => 0,
            Verdict::DoesNotRun | Verdict::Depends => 1,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Verdict::Runs => "runs",
            Verdict::DoesNotRun => "does not run",
            Verdict::Depends => "depends",
        }
    }
}

/// Where the driver version came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriverSource {
    /// `--driver`
    Flag,
    /// The profile's local repo package file name: the host the profile builds.
    Profile,
    /// NVML (`nvmlSystemGetDriverVersion`) on the live host.
    Nvml,
    /// `/proc/driver/nvidia/version`: the loaded kernel module.
    ProcVersion,
    /// The installed `nvidia-driver` package.
    Rpm,
}

/// A host as the compatibility rules see it: its driver (and where that came from), the CUDA
/// the driver serves natively, its GPUs and its container runtime's `disable-require` — what
/// gpuhost knows of the live host, or of the host a profile builds.
#[derive(Clone, Debug, Serialize)]
pub struct DriverHost {
    pub driver: String,
    pub driver_source: DriverSource,
    /// In words: `NVML`, `/proc/driver/nvidia/version`, `profile ol8-uek (cuda-repo-…rpm)`.
    pub driver_from: String,
    /// The newest CUDA `major.minor` the driver runs natively (nvidia-smi's "CUDA Version").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_from: Option<String>,
    pub gpus: Vec<Gpu>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_from: Option<String>,
    /// `disable-require = true` in the host's container runtime config.
    pub disable_require: bool,
    /// How the facts were gathered (sources tried and why they gave nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    #[serde(skip)]
    version: DriverVersion,
}

impl DriverHost {
    /// A host running driver `driver`; its native CUDA comes from NVIDIA's table until
    /// [`DriverHost::with_nvml_cuda`] sets NVML's answer.
    pub fn new(driver: &str, source: DriverSource, from: impl Into<String>) -> Result<DriverHost> {
        let version = DriverVersion::parse(driver).ok_or_else(|| {
            gpuhost_host::invalid!(
                "driver version {driver:?} (from {}): not a version like 535.104.05",
                describe_source(source)
            )
        })?;
        let cuda = table::newest_native(&version).map(|(a, b)| format!("{a}.{b}"));
        Ok(DriverHost {
            driver: version.to_string(),
            driver_source: source,
            driver_from: from.into(),
            cuda_from: cuda
                .as_ref()
                .map(|_| "NVIDIA's CUDA/driver table for this driver".to_string()),
            cuda,
            gpus: Vec::new(),
            gpus_from: None,
            disable_require: false,
            notes: Vec::new(),
            version,
        })
    }

    /// NVML's `nvmlSystemGetCudaDriverVersion` (e.g. 13000), read as libnvidia-container reads
    /// it: `major = v / 1000`, `minor = v % 100 / 10` (`src/driver.c`).
    pub fn with_nvml_cuda(mut self, v: i32) -> DriverHost {
        if v > 0 {
            self.cuda = Some(format!("{}.{}", v / 1000, v % 100 / 10));
            self.cuda_from = Some("NVML (nvmlSystemGetCudaDriverVersion)".into());
        }
        self
    }

    pub fn version(&self) -> &DriverVersion {
        &self.version
    }

    fn native(&self) -> Option<(u32, u32)> {
        let (a, b) = self.cuda.as_deref()?.split_once('.')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    }

    /// The driver and its CUDA as the runtime sees them.
    pub(crate) fn driver_facts(&self) -> DriverFacts {
        DriverFacts {
            nvrm_version: Some(self.driver.clone()),
            cuda_version: self.cuda.clone(),
        }
    }

    /// Forward compatibility on this host's GPUs: supported only when every GPU supports it.
    fn forward_compat(&self) -> ForwardCompat {
        if self.gpus.is_empty() {
            return ForwardCompat::Unknown;
        }
        let each: Vec<ForwardCompat> = self.gpus.iter().map(Gpu::forward_compat).collect();
        if each.contains(&ForwardCompat::NotSupported) {
            ForwardCompat::NotSupported
        } else if each.iter().all(|f| *f == ForwardCompat::Supported) {
            ForwardCompat::Supported
        } else {
            ForwardCompat::Unknown
        }
    }

    /// The same host with every GPU of runtime brand `brand` (one GPU when none is known).
    pub(crate) fn with_brand(&self, brand: &str) -> DriverHost {
        let mut h = self.clone();
        if h.gpus.is_empty() {
            h.gpus.push(Gpu {
                index: 0,
                ..Gpu::default()
            });
        }
        for g in &mut h.gpus {
            g.brand = Some(brand.to_string());
            g.nvml_brand = None;
        }
        h
    }

    /// `driver 535.104.05 (NVML)`.
    pub fn describe(&self) -> String {
        format!("driver {} ({})", self.driver, self.driver_from)
    }
}

fn describe_source(s: DriverSource) -> &'static str {
    match s {
        DriverSource::Flag => "--driver",
        DriverSource::Profile => "the profile",
        DriverSource::Nvml => "NVML",
        DriverSource::ProcVersion => "/proc/driver/nvidia/version",
        DriverSource::Rpm => "the nvidia-driver package",
    }
}

/// Which CUDA versions a driver serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Serves {
    pub driver: String,
    /// The newest CUDA `major.minor` it runs natively.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native: Option<String>,
    /// The CUDA major it serves through minor-version compatibility (`12.x`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minor_version: Option<String>,
    /// CUDA releases beyond those that `cuda-compat-<M>-<m>` brings to this driver branch on
    /// data center GPUs.
    pub forward_compat: Vec<String>,
}

impl Serves {
    /// `driver 535.104.05 serves ` + [`Serves::range`].
    pub fn describe(&self) -> String {
        format!("driver {} serves {}", self.driver, self.range())
    }

    /// `CUDA ≤ 12.2 natively, the rest of 12.x through minor-version compatibility, 13.0 with
    /// cuda-compat on data center GPUs`.
    pub fn range(&self) -> String {
        let mut parts = Vec::new();
        match &self.native {
            Some(n) => parts.push(format!("CUDA ≤ {n} natively")),
            None => parts.push("no CUDA release in NVIDIA's table natively".to_string()),
        }
        if let Some(m) = &self.minor_version {
            parts.push(format!(
                "the rest of {m} through minor-version compatibility"
            ));
        }
        if !self.forward_compat.is_empty() {
            parts.push(format!(
                "{} with cuda-compat on data center GPUs",
                ranges(&self.forward_compat)
            ));
        }
        parts.join(", ")
    }
}

/// `["12.0","12.1","12.2","12.4"]` → `12.0–12.2, 12.4`.
fn ranges(versions: &[String]) -> String {
    let parsed: Vec<(u32, u32)> = versions
        .iter()
        .filter_map(|v| {
            let (a, b) = v.split_once('.')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < parsed.len() {
        let start = parsed[i];
        let mut end = start;
        while i + 1 < parsed.len() && parsed[i + 1] == (end.0, end.1 + 1) {
            i += 1;
            end = parsed[i];
        }
        if start == end {
            out.push(format!("{}.{}", start.0, start.1));
        } else {
            out.push(format!("{}.{}–{}.{}", start.0, start.1, end.0, end.1));
        }
        i += 1;
    }
    out.join(", ")
}

/// What the driver `driver` (a version string) serves, by NVIDIA's table; `None` when it is
/// not a version.
pub fn serves_str(driver: &str) -> Option<Serves> {
    DriverVersion::parse(driver).map(|d| serves(&d, None))
}

/// What a driver serves. `native`: NVML's answer when known, else NVIDIA's table.
pub fn serves(driver: &DriverVersion, native: Option<(u32, u32)>) -> Serves {
    let native = native.or_else(|| table::newest_native(driver));
    let minor_major = (11..=13u32).rev().find(|m| {
        table::minor_version_floor(*m)
            .and_then(DriverVersion::parse)
            .is_some_and(|f| *driver >= f)
    });
    let mut forward = Vec::new();
    for major in 11..=13u32 {
        for minor in 0..=10u32 {
            let Some(branches) = table::forward_compat_branches(major, minor) else {
                continue;
            };
            let beyond_native = native.is_none_or(|n| (major, minor) > n);
            let beyond_minor = minor_major.is_none_or(|m| major > m);
            if branches.iter().any(|b| u64::from(*b) == driver.branch())
                && beyond_native
                && beyond_minor
            {
                forward.push(format!("{major}.{minor}"));
            }
        }
    }
    Serves {
        driver: driver.to_string(),
        native: native.map(|(a, b)| format!("{a}.{b}")),
        minor_version: minor_major.map(|m| format!("{m}.x")),
        forward_compat: forward,
    }
}

/// How a CUDA version runs on a driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The driver is at least the one the release ships.
    Native,
    /// Same major, driver at least the major's floor: runs with a limited feature set.
    MinorVersion,
    /// Only through `cuda-compat-<M>-<m>` (data center GPUs, listed driver branches).
    ForwardCompat,
    /// Not on this driver.
    Unsupported,
}

/// The answer for one CUDA version on a host.
#[derive(Clone, Debug, Serialize)]
pub struct CudaAnswer {
    pub cuda: String,
    pub mode: Mode,
    pub verdict: Verdict,
    pub summary: String,
    /// The release row the native minimum comes from (`12.4.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_release: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_minimum_driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minor_version_minimum_driver: Option<String>,
    pub compat_package: String,
    /// Driver branches the compat package supports (as NVIDIA's images declare).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compat_branches: Option<Vec<u32>>,
    pub details: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Where forward-compatibility libraries would come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompatLibs {
    /// A CUDA application on the host: they would have to be installed.
    Host,
    /// An image that ships them (NVIDIA's CUDA images install `cuda-compat-<M>-<m>`).
    InImage,
    /// An image that may or may not ship them.
    MaybeInImage,
}

fn branches_text(b: &[u32]) -> String {
    if b.is_empty() {
        "none".into()
    } else {
        b.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    }
}

/// What [`cuda_answer`] reads once of CUDA `cuda`, NVIDIA's table and the host, for each of
/// its cases.
struct CudaCase<'a> {
    cuda: CudaVersion,
    /// `12.4`
    mm: String,
    host: &'a DriverHost,
    /// The driver a minor-version compatible run needs.
    floor: Option<&'static str>,
    /// The driver branches `cuda-compat-<M>-<m>` supports.
    branches: Option<&'static [u32]>,
    /// The host's driver branch is among them.
    branch_listed: bool,
    /// `cuda-compat-12-4`
    pkg: String,
    /// `; it serves CUDA ≤ 12.2 natively`, or nothing.
    native_text: String,
    /// `driver ≥ 550.54.14 (CUDA 12.4.0 release notes)`.
    min_text: String,
}

/// One case's answer, before the GPU architectures are checked.
struct CudaJudged {
    mode: Mode,
    verdict: Verdict,
    summary: String,
    details: Vec<String>,
    hint: Option<String>,
}

impl CudaJudged {
    fn new(mode: Mode, verdict: Verdict, summary: String) -> CudaJudged {
        CudaJudged {
            mode,
            verdict,
            summary,
            details: Vec::new(),
            hint: None,
        }
    }
}

/// How CUDA `cuda` runs on `host`.
pub fn cuda_answer(cuda: CudaVersion, host: &DriverHost, libs: CompatLibs) -> CudaAnswer {
    let driver = host.version();
    let row = table::native_minimum(&cuda);
    let native_min = row.as_ref().and_then(|r| DriverVersion::parse(r.driver));
    let native = match &native_min {
        Some(min) => driver >= min,
        None => host.native().is_some_and(|n| n >= (cuda.major, cuda.minor)),
    };
    let floor = table::minor_version_floor(cuda.major);
    let minor = !native
        && floor
            .and_then(DriverVersion::parse)
            .is_some_and(|f| *driver >= f);
    let branches = table::forward_compat_branches(cuda.major, cuda.minor);
    let case = CudaCase {
        cuda,
        mm: cuda.major_minor(),
        host,
        floor,
        branches,
        branch_listed: branches.is_some_and(|b| b.iter().any(|x| u64::from(*x) == driver.branch())),
        pkg: cuda.compat_package(),
        native_text: host
            .cuda
            .as_deref()
            .map(|c| format!("; it serves CUDA ≤ {c} natively"))
            .unwrap_or_default(),
        min_text: match (&row, &native_min) {
            (Some(r), Some(m)) => format!("driver ≥ {m} (CUDA {} release notes)", r.cuda),
            _ => "a driver NVIDIA's table in gpuhost does not list".to_string(),
        },
    };
    let mut judged = if native {
        CudaJudged::new(
            Mode::Native,
            Verdict::Runs,
            format!(
                "CUDA {} runs natively on {}{}",
                case.mm,
                host.describe(),
                case.native_text
            ),
        )
    } else if minor {
        case.minor_version()
    } else if case.branch_listed {
        case.forward_compat(libs)
    } else {
        case.unsupported()
    };
    if let Some((summary, hint)) = case.too_old_gpus() {
        judged.verdict = Verdict::DoesNotRun;
        judged.summary = summary;
        judged.hint = Some(hint);
    }
    CudaAnswer {
        cuda: case.mm,
        mode: judged.mode,
        verdict: judged.verdict,
        summary: judged.summary,
        native_release: row.as_ref().map(|r| r.cuda.to_string()),
        native_minimum_driver: row.as_ref().map(|r| r.driver.to_string()),
        minor_version_minimum_driver: floor.map(str::to_string),
        compat_package: case.pkg,
        compat_branches: branches.map(<[u32]>::to_vec),
        details: judged.details,
        hint: judged.hint,
    }
}

impl CudaCase<'_> {
    /// Same major, driver at least the major's floor: it runs, with limits.
    fn minor_version(&self) -> CudaJudged {
        let CudaCase {
            cuda,
            mm,
            host,
            pkg,
            native_text,
            min_text,
            ..
        } = self;
        let mut j = CudaJudged::new(
            Mode::MinorVersion,
            Verdict::Runs,
            format!(
                "CUDA {mm} runs, with limits, on {} through minor-version compatibility{native_text}",
                host.describe()
            ),
        );
        j.details.push(format!(
            "minor-version compatibility: CUDA {}.x runs on drivers ≥ {}; native support needs {min_text}",
            cuda.major,
            self.floor.unwrap_or_default()
        ));
        j.details.push(format!(
            "limits: PTX that CUDA {mm} generates cannot be JIT-compiled by this driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), so the application must carry code (SASS) for this GPU; APIs newer than the driver return cudaErrorCallRequiresNewerDriver"
        ));
        if self.branch_listed {
            j.details.push(format!(
                "{pkg} lifts the limits on data center GPUs (its supported driver branches: {})",
                branches_text(self.branches.unwrap_or_default())
            ));
        }
        j
    }

    /// The driver's branch is one `cuda-compat` supports: it runs where the compat libraries
    /// are and the GPUs are data center GPUs.
    fn forward_compat(&self, libs: CompatLibs) -> CudaJudged {
        let CudaCase {
            mm,
            host,
            pkg,
            native_text,
            min_text,
            ..
        } = self;
        let on = host.describe();
        let (verdict, summary, hint) = match (libs, host.forward_compat()) {
            (_, ForwardCompat::NotSupported) => (
                Verdict::DoesNotRun,
                format!(
                    "CUDA {mm} does not run on {on}: it would need {pkg}, which works only on data center GPUs{native_text}"
                ),
                Some(format!(
                    "forward compatibility is not available on these GPUs: install {min_text}"
                )),
            ),
            (CompatLibs::Host, _) => (
                Verdict::DoesNotRun,
                format!("CUDA {mm} needs {pkg} on {on}{native_text}"),
                Some(format!(
                    "dnf install {pkg} (on a data center GPU) and run with LD_LIBRARY_PATH=/usr/local/cuda-{mm}/compat, or install {min_text}"
                )),
            ),
            (CompatLibs::InImage, ForwardCompat::Supported) => (
                Verdict::Runs,
                format!(
                    "CUDA {mm} runs on {on} through the image's {pkg} libraries (forward compatibility){native_text}"
                ),
                None,
            ),
            (CompatLibs::InImage, _) => (
                Verdict::Depends,
                format!(
                    "CUDA {mm} runs on {on} through the image's {pkg} libraries only if the GPUs are data center GPUs{native_text}"
                ),
                None,
            ),
            (CompatLibs::MaybeInImage, _) => (
                Verdict::Depends,
                format!(
                    "CUDA {mm} runs on {on} only through {pkg} inside the image, on data center GPUs{native_text}"
                ),
                Some(format!(
                    "build the image with {pkg} (NVIDIA's CUDA base images have it), or install {min_text}"
                )),
            ),
        };
        let mut j = CudaJudged::new(Mode::ForwardCompat, verdict, summary);
        j.details.push(format!(
            "forward compatibility: {pkg} supports driver branches {} on data center GPUs only (CUDA Compatibility guide)",
            branches_text(self.branches.unwrap_or_default())
        ));
        j.hint = hint;
        j
    }

    /// Not on this driver: what to install instead.
    fn unsupported(&self) -> CudaJudged {
        let CudaCase {
            cuda,
            mm,
            host,
            pkg,
            native_text,
            min_text,
            ..
        } = self;
        let mut j = CudaJudged::new(
            Mode::Unsupported,
            Verdict::DoesNotRun,
            format!("CUDA {mm} does not run on {}{native_text}", host.describe()),
        );
        if let Some(b) = self.branches {
            j.details.push(format!(
                "{pkg} does not support driver branch {} (it supports: {})",
                host.version().branch(),
                branches_text(b)
            ));
        }
        let floor_text = self
            .floor
            .map(|f| {
                format!(
                    ", or ≥ {f} for {}.x through minor-version compatibility",
                    cuda.major
                )
            })
            .unwrap_or_default();
        j.hint = Some(format!(
            "install {min_text}{floor_text}; or use a CUDA build ≤ {}",
            host.cuda.as_deref().unwrap_or("the driver's")
        ));
        j
    }

    /// A CUDA major builds for a range of GPU architectures only: the summary and hint when
    /// some of the host's GPUs are below it.
    fn too_old_gpus(&self) -> Option<(String, String)> {
        let CudaCase { cuda, mm, host, .. } = self;
        let (fa, fb) = table::arch_floor(cuda.major)?;
        let old: Vec<String> = host
            .gpus
            .iter()
            .filter(|g| {
                g.arch
                    .as_deref()
                    .and_then(|a| a.split_once('.'))
                    .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
                    .is_some_and(|cc| cc < (fa, fb))
            })
            .map(Gpu::label)
            .collect();
        if old.is_empty() {
            return None;
        }
        Some((
            format!(
                "CUDA {mm} does not run here: CUDA {}.x has no code for compute capability below {fa}.{fb} ({})",
                cuda.major,
                old.join("; ")
            ),
            format!(
                "use a CUDA {} build for these GPUs",
                if cuda.major > 11 {
                    format!("≤ {}.x", cuda.major - 1)
                } else {
                    "older".to_string()
                }
            ),
        ))
    }
}

/// The runtime's verdict on a set of requirements.
#[derive(Clone, Debug, Serialize)]
pub struct RuntimeAnswer {
    /// `starts`, `refuses`, `depends` (on the GPU brand) or `not-checked`.
    pub result: &'static str,
    pub requirements: require::Requirements,
    /// Per requirement, for the GPUs the host has (or, GPUs unknown, for a GPU of brand
    /// `Unknown` — the brand of A100/H100/H200 in the runtime's eyes).
    pub checks: Vec<require::Checked>,
    /// GPUs unknown: the result for each brand the runtime can see.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_brand: Vec<BrandResult>,
    /// nvidia-container-cli's error, as docker prints it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The runtime's result for one candidate brand.
#[derive(Clone, Debug, Serialize)]
pub struct BrandResult {
    pub brand: &'static str,
    pub starts: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn first_error(checks: &[require::Checked]) -> Option<String> {
    checks
        .iter()
        .find_map(|c| c.message.as_ref())
        .map(|m| format!("requirement error: {m}"))
}

/// Evaluate requirements as the runtime would on `host`. GPUs of unknown brand (no NVML, no
/// `--brand`) are tried with every brand the runtime can see.
pub(crate) fn runtime_answer(reqs: require::Requirements, host: &DriverHost) -> RuntimeAnswer {
    if reqs.disabled_by.is_some() {
        return RuntimeAnswer {
            result: "not-checked",
            requirements: reqs,
            checks: Vec::new(),
            by_brand: Vec::new(),
            error: None,
        };
    }
    let drv = host.driver_facts();
    let devices = |brand: Option<&str>| -> Vec<DeviceFacts> {
        if host.gpus.is_empty() {
            return vec![DeviceFacts {
                brand: brand.map(str::to_string),
                arch: None,
            }];
        }
        host.gpus
            .iter()
            .map(|g| DeviceFacts {
                brand: g.brand.clone().or_else(|| brand.map(str::to_string)),
                arch: g.arch.clone(),
            })
            .collect()
    };
    let brand_known = !host.gpus.is_empty() && host.gpus.iter().all(|g| g.brand.is_some());
    if brand_known {
        let checks = require::check(&reqs, &drv, &devices(None));
        let error = first_error(&checks);
        return RuntimeAnswer {
            result: if error.is_none() { "starts" } else { "refuses" },
            requirements: reqs,
            checks,
            by_brand: Vec::new(),
            error,
        };
    }
    let by_brand: Vec<(BrandResult, Vec<require::Checked>)> = gpu::LIBNVC_BRANDS
        .iter()
        .map(|b| {
            let checks = require::check(&reqs, &drv, &devices(Some(b)));
            let error = first_error(&checks);
            (
                BrandResult {
                    brand: b,
                    starts: error.is_none(),
                    error,
                },
                checks,
            )
        })
        .collect();
    let all_start = by_brand.iter().all(|(r, _)| r.starts);
    let none_start = by_brand.iter().all(|(r, _)| !r.starts);
    let (shown, checks) = by_brand
        .iter()
        .find(|(r, _)| r.brand == "Unknown")
        .map(|(r, c)| (r.clone(), c.clone()))
        .unwrap_or_else(|| (by_brand[0].0.clone(), by_brand[0].1.clone()));
    RuntimeAnswer {
        result: if all_start {
            "starts"
        } else if none_start {
            "refuses"
        } else {
            "depends"
        },
        requirements: reqs,
        checks,
        by_brand: if all_start || none_start {
            Vec::new()
        } else {
            by_brand.into_iter().map(|(r, _)| r).collect()
        },
        error: if all_start { None } else { shown.error },
    }
}

/// The answer to `gpuhost compat --require`.
#[derive(Clone, Debug, Serialize)]
pub struct RequireAnswer {
    pub verdict: Verdict,
    pub summary: String,
    pub runtime: RuntimeAnswer,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// `gpuhost compat --require EXPR…`: each expression is one `NVIDIA_REQUIRE_*` variable.
pub fn require_answer(expressions: &[String], host: &DriverHost) -> RequireAnswer {
    let reqs = require::Requirements {
        disabled_by: host.disable_require.then(|| {
            "disable-require = true in /etc/nvidia-container-runtime/config.toml".to_string()
        }),
        list: expressions
            .iter()
            .enumerate()
            .map(|(i, e)| require::Requirement {
                source: format!("--require #{}", i + 1),
                expression: e.clone(),
            })
            .collect(),
    };
    let runtime = runtime_answer(reqs, host);
    let (verdict, summary, hint) = runtime_verdict(&runtime, host);
    RequireAnswer {
        verdict,
        summary,
        runtime,
        hint,
    }
}

fn brands_where(r: &RuntimeAnswer, starts: bool) -> String {
    r.by_brand
        .iter()
        .filter(|b| b.starts == starts)
        .map(|b| b.brand)
        .collect::<Vec<_>>()
        .join(", ")
}

fn runtime_verdict(r: &RuntimeAnswer, host: &DriverHost) -> (Verdict, String, Option<String>) {
    match r.result {
        "starts" => (
            Verdict::Runs,
            format!("the container runtime accepts it on {}", host.describe()),
            None,
        ),
        "not-checked" => (
            Verdict::Runs,
            format!(
                "the container runtime does not check requirements ({})",
                r.requirements.disabled_by.as_deref().unwrap_or("disabled")
            ),
            None,
        ),
        "depends" => (
            Verdict::Depends,
            format!(
                "the container runtime accepts it on {} only for GPUs of brand {} (as the runtime names brands; refused on {})",
                host.describe(),
                brands_where(r, true),
                brands_where(r, false)
            ),
            Some("give --brand (A100/H100/H200 are `unknown` to the runtime), or run on the host itself so NVML answers".into()),
        ),
        _ => (
            Verdict::DoesNotRun,
            format!(
                "the container runtime refuses it on {}: {}",
                host.describe(),
                r.error.as_deref().unwrap_or("requirement error")
            ),
            None,
        ),
    }
}

/// The answer to `gpuhost compat --image`.
#[derive(Clone, Debug, Serialize)]
pub struct ImageAnswer {
    pub verdict: Verdict,
    pub summary: String,
    pub image: ImageFacts,
    pub runtime: RuntimeAnswer,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<CudaAnswer>,
    pub components: Vec<components::Shipped>,
    pub details: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The image, less its environment.
#[derive(Clone, Debug, Serialize)]
pub struct ImageFacts {
    pub reference: String,
    pub source: image::Source,
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// The image is one of NVIDIA's CUDA images, which install `cuda-compat-<M>-<m>`.
    pub nvidia_cuda_image: bool,
}

/// `gpuhost compat --image`: the runtime's check, then CUDA's rules for the image's
/// `CUDA_VERSION`, then what the image ships that the profile also links on the host.
pub fn image_answer(
    img: &image::ImageConfig,
    host: &DriverHost,
    links: &[PrefixLink],
) -> ImageAnswer {
    let env = require::Env::parse(&img.env);
    let facts = image_facts(img, env.as_ref().ok());
    let shipped = env
        .as_ref()
        .map(|e| components::shipped(e, links))
        .unwrap_or_default();
    let mut details = image_details(img, &shipped);
    let collected = env.and_then(|e| require::collect(&e, host.disable_require));
    let reqs = match collected {
        Ok(r) => r,
        Err(msg) => return hook_fails(msg, facts, shipped, details),
    };
    let runtime = runtime_answer(reqs, host);
    let libs = if facts.nvidia_cuda_image {
        CompatLibs::InImage
    } else {
        CompatLibs::MaybeInImage
    };
    let cuda_v = facts.cuda_version.as_deref().and_then(|v| {
        CudaVersion::parse(v).or_else(|| {
            require::semver_major_minor(v).and_then(|(a, b)| {
                Some(CudaVersion::new(
                    u32::try_from(a).ok()?,
                    u32::try_from(b).ok()?,
                    0,
                ))
            })
        })
    });
    let cuda = cuda_v.map(|c| cuda_answer(c, host, libs));
    let (rv, rsummary, rhint) = runtime_verdict(&runtime, host);
    let (verdict, summary, hint) = match (rv, &cuda) {
        (Verdict::DoesNotRun, c) => (
            Verdict::DoesNotRun,
            rsummary,
            refused_hint(c.as_ref(), host),
        ),
        (Verdict::Depends, Some(c)) => by_brand(&runtime, c, cuda_v, host, libs, rhint),
        (Verdict::Depends, _) => (Verdict::Depends, rsummary, rhint),
        (_, Some(c)) => {
            details.insert(0, rsummary);
            let verdict = c.verdict;
            let summary = match verdict {
                Verdict::Runs => format!("it starts and {}", lowercase_first(&c.summary)),
                _ => format!("the container starts, but {}", lowercase_first(&c.summary)),
            };
            (verdict, summary, c.hint.clone())
        }
        (_, None) => {
            details.push(
                "the image declares no CUDA_VERSION: gpuhost cannot tell which CUDA it needs"
                    .into(),
            );
            (Verdict::Runs, rsummary, None)
        }
    };
    ImageAnswer {
        verdict,
        summary,
        image: facts,
        runtime,
        cuda,
        components: shipped,
        details,
        hint,
    }
}

/// The image's facts, less its environment; `env` when it parses.
fn image_facts(img: &image::ImageConfig, env: Option<&require::Env>) -> ImageFacts {
    ImageFacts {
        reference: img.reference.clone(),
        source: img.source,
        tags: img.tags.clone(),
        os: img.os.clone(),
        architecture: img.architecture.clone(),
        config_digest: img.config_digest.clone(),
        cuda_version: env.and_then(|e| e.get("CUDA_VERSION")).map(str::to_string),
        // NVIDIA's CUDA base images set NV_CUDA_CUDART_VERSION and install cuda-compat-<M>-<m>
        // (dist/*/base/Dockerfile); some also name it in NV_CUDA_COMPAT_PACKAGE.
        nvidia_cuda_image: env.is_some_and(|e| {
            e.get("NV_CUDA_CUDART_VERSION").is_some() || e.get("NV_CUDA_COMPAT_PACKAGE").is_some()
        }),
    }
}

/// What is worth saying of the image whatever the verdict: components with two owners (the
/// image and the profile's links on the host), and an image for another platform.
fn image_details(img: &image::ImageConfig, shipped: &[components::Shipped]) -> Vec<String> {
    let mut details = Vec::new();
    for s in shipped {
        if let Some(h) = &s.host {
            details.push(format!(
                "two owners of {}: the image ships {} ({}), and the profile links {} under {} on the host — mount {} into this image and the loader takes whichever comes first; keep one owner",
                s.component,
                s.version,
                s.variable,
                h.packages.join(", "),
                h.prefix,
                h.prefix
            ));
        }
    }
    if let (Some(a), Some(os)) = (&img.architecture, &img.os) {
        let want = image::host_oci_arch();
        if os != "linux" || a != want {
            details.push(format!(
                "the image is {os}/{a}; this machine is linux/{want}"
            ));
        }
    }
    details
}

/// The runtime hook cannot read the image's environment: the container does not start.
fn hook_fails(
    msg: String,
    facts: ImageFacts,
    shipped: Vec<components::Shipped>,
    details: Vec<String>,
) -> ImageAnswer {
    let runtime = RuntimeAnswer {
        result: "refuses",
        requirements: require::Requirements::default(),
        checks: Vec::new(),
        by_brand: Vec::new(),
        error: Some(msg.clone()),
    };
    ImageAnswer {
        verdict: Verdict::DoesNotRun,
        summary: format!(
            "the NVIDIA Container Runtime Hook fails on this image's environment: {msg}"
        ),
        image: facts,
        runtime,
        cuda: None,
        components: shipped,
        details,
        hint: Some("fix the image's environment".into()),
    }
}

/// The runtime refuses the image: what would make it start, from CUDA's answer.
fn refused_hint(c: Option<&CudaAnswer>, host: &DriverHost) -> Option<String> {
    match c {
        Some(c) if c.mode == Mode::MinorVersion => Some(format!(
            "CUDA {} applications do run on this driver through minor-version compatibility, but the runtime's check is stricter: `docker run -e NVIDIA_DISABLE_REQUIRE=1 …` starts it (with the limits of minor-version compatibility); or install driver ≥ {}",
            c.cuda,
            c.native_minimum_driver.as_deref().unwrap_or("the release's")
        )),
        Some(c) => c.hint.clone().or_else(|| {
            c.native_minimum_driver
                .as_ref()
                .map(|d| format!("install driver ≥ {d}, or use an image built for CUDA ≤ {}", host.cuda.as_deref().unwrap_or("the driver's")))
        }),
        None => None,
    }
}

/// The runtime's answer depends on the brand: CUDA judged for each brand it accepts.
fn by_brand(
    runtime: &RuntimeAnswer,
    c: &CudaAnswer,
    cuda_v: Option<CudaVersion>,
    host: &DriverHost,
    libs: CompatLibs,
    rhint: Option<String>,
) -> (Verdict, String, Option<String>) {
    let mut runs = Vec::new();
    let mut maybe = Vec::new();
    let mut not = Vec::new();
    for b in &runtime.by_brand {
        let v = match (b.starts, cuda_v) {
            (false, _) => Verdict::DoesNotRun,
            (true, Some(cv)) => cuda_answer(cv, &host.with_brand(b.brand), libs).verdict,
            (true, None) => Verdict::Depends,
        };
        match v {
            Verdict::Runs => runs.push(b.brand),
            Verdict::Depends => maybe.push(b.brand),
            Verdict::DoesNotRun => not.push(b.brand),
        }
    }
    if runs.is_empty() && maybe.is_empty() {
        return (Verdict::DoesNotRun, c.summary.clone(), c.hint.clone());
    }
    let mut summary = format!(
        "it depends on the GPU brand (as the runtime names brands) on {}:",
        host.describe()
    );
    if !runs.is_empty() {
        summary.push_str(&format!(" runs on {}", runs.join(", ")));
    }
    if !maybe.is_empty() {
        summary.push_str(&format!(
            "{} runs on {} only if it is a data center GPU",
            if runs.is_empty() { "" } else { ";" },
            maybe.join(", ")
        ));
    }
    if !not.is_empty() {
        summary.push_str(&format!("; does not run on {}", not.join(", ")));
    }
    (Verdict::Depends, summary, rhint)
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) if s.starts_with("CUDA") => f.to_string() + c.as_str(),
        Some(f) => f.to_lowercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn host(driver: &str) -> DriverHost {
        DriverHost::new(driver, DriverSource::Flag, "--driver").unwrap()
    }

    fn with_gpu(mut h: DriverHost, nvml_brand: u32, arch: &str) -> DriverHost {
        h.gpus.push(Gpu::from_nvml(
            h.gpus.len(),
            Some("GPU".into()),
            Some(nvml_brand),
            Some(arch.into()),
        ));
        h
    }

    fn ask(cuda: &str, h: &DriverHost) -> CudaAnswer {
        cuda_answer(CudaVersion::parse(cuda).unwrap(), h, CompatLibs::Host)
    }

    #[test]
    fn native_minor_forward_and_no() {
        let a = ask("12.2", &host("535.104.05"));
        assert_eq!((a.mode, a.verdict), (Mode::Native, Verdict::Runs));
        let a = ask("12.4", &host("535.104.05"));
        assert_eq!((a.mode, a.verdict), (Mode::MinorVersion, Verdict::Runs));
        assert_eq!(a.native_minimum_driver.as_deref(), Some("550.54.14"));
        assert_eq!(a.minor_version_minimum_driver.as_deref(), Some("525.60.13"));
        assert!(a
            .details
            .iter()
            .any(|d| d.contains("cuda-compat-12-4 lifts")));
        let a = ask("12.4", &host("470.256.02"));
        assert_eq!(
            (a.mode, a.verdict),
            (Mode::ForwardCompat, Verdict::DoesNotRun)
        );
        assert!(
            a.summary.contains("needs cuda-compat-12-4"),
            "{}",
            a.summary
        );
        let a = ask("13.0", &host("535.104.05"));
        assert_eq!(a.mode, Mode::ForwardCompat);
        let a = ask("13.0", &host("560.35.05"));
        assert_eq!(
            (a.mode, a.verdict),
            (Mode::Unsupported, Verdict::DoesNotRun)
        );
        assert!(a.hint.unwrap_or_default().contains("580.65.06"));
        let a = ask("12.4", &host("450.80.02"));
        assert_eq!(a.mode, Mode::Unsupported);
        let a = ask("11.8", &host("470.57.02"));
        assert_eq!(a.mode, Mode::MinorVersion);
        let a = ask("12.9", &host("580.159.04"));
        assert_eq!(a.mode, Mode::Native);
    }

    #[test]
    fn forward_compat_only_on_data_center_gpus() {
        let h100 = with_gpu(host("535.104.05"), 14, "9.0");
        let geforce = with_gpu(host("535.104.05"), 15, "8.9");
        let c = CudaVersion::parse("13.0").unwrap();
        assert_eq!(
            cuda_answer(c, &h100, CompatLibs::InImage).verdict,
            Verdict::Runs
        );
        assert_eq!(
            cuda_answer(c, &geforce, CompatLibs::InImage).verdict,
            Verdict::DoesNotRun
        );
        assert_eq!(
            cuda_answer(c, &host("535.104.05"), CompatLibs::InImage).verdict,
            Verdict::Depends
        );
    }

    #[test]
    fn cuda_13_has_no_code_for_volta() {
        let v100 = with_gpu(host("580.95.05"), 2, "7.0");
        let a = ask("13.0", &v100);
        assert_eq!(a.verdict, Verdict::DoesNotRun);
        assert!(a.summary.contains("below 7.5"), "{}", a.summary);
        assert_eq!(ask("12.8", &v100).verdict, Verdict::Runs);
    }

    #[test]
    fn what_drivers_serve() {
        let d = |s: &str| DriverVersion::parse(s).unwrap();
        let s = serves(&d("535.104.05"), None);
        assert_eq!(s.native.as_deref(), Some("12.2"));
        assert_eq!(s.minor_version.as_deref(), Some("12.x"));
        assert_eq!(s.forward_compat, vec!["13.0"]);
        assert_eq!(
            s.describe(),
            "driver 535.104.05 serves CUDA ≤ 12.2 natively, the rest of 12.x through minor-version compatibility, 13.0 with cuda-compat on data center GPUs"
        );
        let s = serves(&d("470.57.02"), None);
        assert_eq!(ranges(&s.forward_compat), "12.0–12.6, 12.8");
        let s = serves(&d("580.159.04"), Some((13, 0)));
        assert!(s.forward_compat.is_empty());
        assert_eq!(s.minor_version.as_deref(), Some("13.x"));
    }

    #[test]
    fn nvml_cuda_is_read_as_libnvidia_container_reads_it() {
        let h = host("580.159.04").with_nvml_cuda(13000);
        assert_eq!(h.cuda.as_deref(), Some("13.0"));
        let h = host("535.104.05").with_nvml_cuda(12020);
        assert_eq!(h.cuda.as_deref(), Some("12.2"));
        assert!(DriverHost::new("latest", DriverSource::Flag, "--driver").is_err());
    }

    #[test]
    fn unknown_brands_make_a_depends() {
        let reqs = require::Requirements {
            disabled_by: None,
            list: vec![require::Requirement {
                source: "NVIDIA_REQUIRE_CUDA".into(),
                expression: "cuda>=12.4 brand=tesla,driver>=535,driver<536".into(),
            }],
        };
        let r = runtime_answer(reqs.clone(), &host("535.104.05"));
        assert_eq!(r.result, "depends");
        assert_eq!(
            r.by_brand
                .iter()
                .filter(|b| b.starts)
                .map(|b| b.brand)
                .collect::<Vec<_>>(),
            vec!["Tesla"]
        );
        let r = runtime_answer(reqs, &with_gpu(host("535.104.05"), 2, "7.0"));
        assert_eq!(r.result, "starts");
    }
}
