//! gpuhost's active GPU checks: work with known answers on every GPU at once, through the
//! driver's own `libcuda.so.1` and PTX embedded here, so a node needs nothing but NVIDIA's
//! driver (no CUDA toolkit, DCGM, CuPy or NCCL).
//!
//! Per GPU: HBM bandwidth (a copy kernel beside the driver's `cuMemcpyDtoD`), HBM integrity
//! (address-in-address and its inverse over 90% of the free memory), PCIe (pinned copies each
//! way, one GPU at a time), known-answer compute (FP32 and FP64 chains whose results are known
//! before they run, and rounding chains the host computes itself); across GPUs, a copy between
//! every ordered pair. The conditions beside each figure (clocks, temperature, power, clock
//! event reasons, the PCIe link) come from NVML, sampled while it ran.
//!
//! All of it runs in a child process, `gpuhost active-probe` ([`child_main`]), which prints one
//! [`ActiveReport`] as JSON: a hung kernel or a driver fault takes the child, never
//! `gpuhost status` or `gpuhost serve`. The child stops at its time limit or on SIGTERM/SIGINT,
//! frees every context and buffer on the way out and says so ([`ActiveReport::live_at_exit`]).
//! It never changes a GPU setting: no clocks, power limits, MIG, persistence or reset; a GPU
//! with compute processes on it is left alone unless forced.
//!
//! Judging the figures is gpuhost-health's (`verdict::active`), against the reference table in
//! gpuhost-nvidia (`perf`).

#![warn(unreachable_pub)]

mod checks;
mod driver;
pub mod model;
mod sample;

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use nvml_wrapper::Nvml;

pub use checks::{CHECKS_PTX, COMPUTE_PTX};
pub use model::*;

use checks::{ms_since, Gpu};
use driver::{attr, Cuda, LIVE};
use sample::Sampler;

/// A fault a test run injects, to prove the check catches it on the real GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// One word of HBM written wrong.
    Hbm,
    /// One FP32 / FP64 rate chain's result one ulp off.
    Fp32,
    Fp64,
    /// One FP32 / FP64 rounding chain's result one ulp off.
    Mix32,
    Mix64,
}

impl FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "hbm" => Fault::Hbm,
            "fp32" => Fault::Fp32,
            "fp64" => Fault::Fp64,
            "mix32" => Fault::Mix32,
            "mix64" => Fault::Mix64,
            _ => return Err(format!("{s}: one of hbm, fp32, fp64, mix32, mix64")),
        })
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Hbm => "hbm",
            Fault::Fp32 => "fp32",
            Fault::Fp64 => "fp64",
            Fault::Mix32 => "mix32",
            Fault::Mix64 => "mix64",
        }
    }
}

/// What the child is asked to do.
#[derive(Clone, Debug)]
pub struct ChildOptions {
    /// The time limit, s: past it nothing new starts, and what ran is reported.
    pub seconds: f64,
    /// Check GPUs that have compute processes on them too.
    pub force: bool,
    /// A test run's fault.
    pub fault: Option<Fault>,
    /// Copy GPU 0 to itself through the peer-to-peer path (tests on a one-GPU machine).
    pub p2p_self: bool,
}

/// The child's exit codes: 0 every GPU was checked (whatever the figures say), 3 stopped by
/// the time limit or a signal, 1 the driver could not be used at all. The report on stdout
/// says which in words.
pub const EXIT_DONE: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_STOPPED: i32 = 3;

/// `gpuhost active-probe`: run the checks, print the report as one line of JSON; the exit
/// code ([`EXIT_DONE`], …).
pub fn child_main(o: &ChildOptions) -> i32 {
    let report = run(o);
    match serde_json::to_string(&report) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("gpuhost active-probe: cannot write the report: {e}");
            return EXIT_FAILED;
        }
    }
    if report.stopped.is_some() {
        EXIT_STOPPED
    } else if report.error.is_some() {
        EXIT_FAILED
    } else {
        EXIT_DONE
    }
}

/// `gpuhost-active-probe [--seconds S] [--force] [--inject-fault F] [--p2p-self]`: parse the
/// arguments (2 for one refused, with the reason on stderr) and run [`child_main`].
pub fn main_with_args(args: impl IntoIterator<Item = String>) -> i32 {
    let mut o = ChildOptions {
        seconds: 15.0,
        force: false,
        fault: None,
        p2p_self: false,
    };
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let parsed: Result<(), String> = match a.as_str() {
            "--seconds" => args
                .next()
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                .map(|s| o.seconds = s)
                .ok_or_else(|| "--seconds: give seconds, more than 0 and at most 3600".to_string()),
            "--force" => {
                o.force = true;
                Ok(())
            }
            "--p2p-self" => {
                o.p2p_self = true;
                Ok(())
            }
            "--inject-fault" => args
                .next()
                .ok_or_else(|| "--inject-fault: which fault?".to_string())
                .and_then(|f| f.parse().map(|f| o.fault = Some(f))),
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = parsed {
            eprintln!("gpuhost-active-probe: {e}");
            return 2;
        }
    }
    child_main(&o)
}

/// The run's limits, seen by every GPU's thread.
pub(crate) struct Run {
    deadline: Instant,
    signal: Arc<AtomicUsize>,
    pub(crate) fault: Option<Fault>,
    /// `$GPUHOST_ACTIVE_PTX_DIR`: load the kernels from this folder instead of the embedded
    /// ones (benchmarks of kernel variants on the real GPU; the report says so).
    pub(crate) ptx_dir: Option<String>,
}

/// The run was told to stop (its words: `SIGTERM`, `time limit`).
#[derive(Debug)]
pub(crate) struct Stopped(pub(crate) String);

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped: {}", self.0)
    }
}

impl std::error::Error for Stopped {}

impl Run {
    /// Err([`Stopped`]) once a signal came or the time limit passed.
    pub(crate) fn go_on(&self) -> Result<()> {
        match self.signal.load(Ordering::Relaxed) {
            0 => {}
            s if s == signal_hook::consts::SIGINT as usize => {
                return Err(Stopped("SIGINT".into()).into())
            }
            _ => return Err(Stopped("SIGTERM".into()).into()),
        }
        if Instant::now() >= self.deadline {
            return Err(Stopped("time limit".into()).into());
        }
        Ok(())
    }
}

/// The driver's `0000:3B:00.0` in NVML's form, `00000000:3B:00.0`.
pub fn nvml_bus_id(id: &str) -> String {
    match id.split_once(':') {
        Some((domain, rest)) => format!(
            "{:0>8}:{}",
            domain.to_ascii_uppercase(),
            rest.to_ascii_uppercase()
        ),
        None => id.to_ascii_uppercase(),
    }
}

fn run(o: &ChildOptions) -> ActiveReport {
    let began = Instant::now();
    let signal = Arc::new(AtomicUsize::new(0));
    for s in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let _ = signal_hook::flag::register_usize(s, signal.clone(), s as usize);
    }
    let run = Run {
        deadline: began + Duration::from_secs_f64(o.seconds.max(0.0)),
        signal,
        fault: o.fault,
        ptx_dir: std::env::var("GPUHOST_ACTIVE_PTX_DIR")
            .ok()
            .filter(|d| !d.is_empty()),
    };
    let mut report = ActiveReport {
        schema: SCHEMA,
        started_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        limit_s: o.seconds,
        injected: o
            .fault
            .map(|f| f.name().to_string())
            .or_else(|| run.ptx_dir.as_ref().map(|d| format!("kernels from {d}"))),
        ..ActiveReport::default()
    };
    let nvml = Nvml::init().ok().map(Arc::new);
    report.driver_version = nvml.as_ref().and_then(|n| n.sys_driver_version().ok());
    if let Err(e) = checks_all(o, &run, nvml, &mut report) {
        match e.downcast_ref::<Stopped>() {
            Some(s) => report.stopped = Some(s.0.clone()),
            None => report.error = Some(format!("{e:#}")),
        }
    }
    if report.stopped.is_none() {
        // A GPU's thread that saw the stop recorded it as its reason.
        if let Err(e) = run.go_on() {
            if let Some(s) = e.downcast_ref::<Stopped>() {
                if report.gpus.iter().any(|g| g.skipped == Some(Skip::Stopped)) {
                    report.stopped = Some(s.0.clone());
                }
            }
        }
    }
    report.live_at_exit = LIVE.load(Ordering::SeqCst);
    report.peak_rss_kib = peak_rss_kib();
    report.wall_ms = ms_since(began);
    report
}

/// One GPU as CUDA and NVML see it, before any check.
struct Found {
    device: driver::CuDevice,
    gpu: GpuActive,
}

fn checks_all(
    o: &ChildOptions,
    run: &Run,
    nvml: Option<Arc<Nvml>>,
    report: &mut ActiveReport,
) -> Result<()> {
    let (cuda, version) = Cuda::init()?;
    report.cuda_driver_version = Some(version);
    let n = cuda.device_count()?;
    let mut found = Vec::new();
    for ordinal in 0..n {
        let device = cuda.device(ordinal)?;
        let bus = cuda.pci_bus_id(device)?;
        let mut gpu = GpuActive {
            cuda_ordinal: ordinal,
            name: cuda.name(device)?,
            sms: cuda.attribute(device, attr::MULTIPROCESSOR_COUNT)? as u32,
            compute_capability: format!(
                "{}.{}",
                cuda.attribute(device, attr::COMPUTE_CAPABILITY_MAJOR)?,
                cuda.attribute(device, attr::COMPUTE_CAPABILITY_MINOR)?
            ),
            setting: sample::setting(nvml.as_deref(), &bus),
            pci_bus_id: bus,
            ..GpuActive::default()
        };
        if cuda.attribute(device, attr::UNIFIED_ADDRESSING)? == 0 {
            gpu.reason = Some("the GPU has no unified addressing; the checks need it".into());
        }
        describe(nvml.as_deref(), &mut gpu, o.force);
        found.push(Found { device, gpu });
    }
    // GPUs NVML sees that CUDA does not: MIG-enabled ones (CUDA lists their instances only when
    // named), or hidden from CUDA.
    if let Some(nv) = nvml.as_deref() {
        for i in 0..nv.device_count().unwrap_or(0) {
            let Ok(d) = nv.device_by_index(i) else {
                continue;
            };
            let Ok(pci) = d.pci_info() else { continue };
            let bus = nvml_bus_id(&pci.bus_id);
            if found.iter().any(|f| f.gpu.pci_bus_id == bus) {
                continue;
            }
            let mut gpu = GpuActive {
                cuda_ordinal: -1,
                name: d.name().unwrap_or_default(),
                setting: sample::setting(Some(nv), &bus),
                pci_bus_id: bus,
                ..GpuActive::default()
            };
            describe(Some(nv), &mut gpu, o.force);
            if gpu.skipped.is_none() {
                gpu.reason = Some(
                    "NVML lists this GPU but CUDA does not: the checks could not reach it".into(),
                );
            }
            found.push(Found { device: -1, gpu });
        }
    }
    if found.is_empty() {
        anyhow::bail!("no GPU: CUDA and NVML list none");
    }
    let sampler = Sampler::start(
        nvml.clone(),
        found.iter().map(|f| f.gpu.pci_bus_id.clone()).collect(),
    );
    let pcie_turn = Mutex::new(());
    std::thread::scope(|s| {
        for f in found.iter_mut() {
            if f.device < 0 || f.gpu.skipped.is_some() || f.gpu.reason.is_some() {
                continue;
            }
            let (cuda, sampler, pcie_turn) = (&cuda, &sampler, &pcie_turn);
            s.spawn(move || check_one(cuda, run, f, sampler, pcie_turn));
        }
    });
    let checked: Vec<(driver::CuDevice, String)> = found
        .iter()
        .filter(|f| f.device >= 0 && f.gpu.skipped.is_none() && f.gpu.reason.is_none())
        .map(|f| (f.device, f.gpu.pci_bus_id.clone()))
        .collect();
    report.gpus = found.into_iter().map(|f| f.gpu).collect();
    let pairs: Vec<(usize, usize)> = match (checked.len(), o.p2p_self) {
        (1, true) => vec![(0, 0)],
        (n, _) => (0..n)
            .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
            .collect(),
    };
    if !pairs.is_empty() {
        report.p2p = peer_copies(&cuda, run, &checked, &pairs)?;
    }
    sampler.finish();
    Ok(())
}

/// NVML's view of a GPU: identity, and whether it may be touched (no compute process on it
/// unless forced; MIG disabled).
fn describe(nvml: Option<&Nvml>, gpu: &mut GpuActive, force: bool) {
    let Some(d) = nvml.and_then(|n| n.device_by_pci_bus_id(gpu.pci_bus_id.as_str()).ok()) else {
        return;
    };
    gpu.uuid = d.uuid().ok();
    gpu.pci_device_id = d.pci_info().ok().map(|p| (p.pci_device_id >> 16) as u16);
    if d.mig_mode().map(|m| m.current == 1).unwrap_or(false) {
        gpu.skipped = Some(Skip::Mig);
        gpu.reason = Some("MIG mode is enabled: the whole-GPU checks do not apply (n/a)".into());
        return;
    }
    if let Ok(procs) = d.running_compute_processes() {
        let me = std::process::id();
        let pids: Vec<String> = procs
            .iter()
            .filter(|p| p.pid != me)
            .map(|p| p.pid.to_string())
            .collect();
        if !pids.is_empty() && !force {
            gpu.skipped = Some(Skip::Busy);
            gpu.reason = Some(format!(
                "{} compute process(es) run on it (pid {}): not touched; --force checks it anyway",
                pids.len(),
                pids.join(", ")
            ));
        }
    }
}

fn check_one(cuda: &Cuda, run: &Run, f: &mut Found, sampler: &Sampler, pcie_turn: &Mutex<()>) {
    let began = Instant::now();
    let g = &mut f.gpu;
    let ctx = match cuda.context(f.device) {
        Ok(c) => c,
        Err(e) => {
            g.reason = Some(format!("no context: {e:#}"));
            return;
        }
    };
    let gpu = match Gpu::new(cuda, run, &ctx, g.pci_bus_id.clone(), g.sms, sampler) {
        Ok(x) => x,
        Err(e) => {
            g.reason = Some(format!("{e:#}"));
            return;
        }
    };
    let mut errors = Vec::new();
    let mut stopped = false;
    let mut note = |what: &str, e: anyhow::Error| {
        if e.downcast_ref::<Stopped>().is_some() {
            stopped = true;
        } else {
            errors.push(format!("{what}: {e:#}"));
        }
    };
    match gpu.hbm_bandwidth() {
        Ok(x) => g.hbm = Some(x),
        Err(e) => note("HBM bandwidth", e),
    }
    for r in [
        gpu.rate::<f32>(),
        gpu.rate::<f64>(),
        gpu.mix::<f32>(),
        gpu.mix::<f64>(),
    ] {
        match r {
            Ok(x) => g.compute.push(x),
            Err(e) => note("compute", e),
        }
    }
    match gpu.hbm_integrity() {
        Ok(x) => g.integrity = Some(x),
        Err(e) => note("HBM integrity", e),
    }
    match gpu.pcie(pcie_turn) {
        Ok(x) => g.pcie = Some(x),
        Err(e) => note("PCIe", e),
    }
    drop(gpu);
    drop(ctx);
    if stopped {
        g.skipped = Some(Skip::Stopped);
    }
    if !errors.is_empty() {
        g.reason = Some(errors.join("; "));
    }
    g.ms = ms_since(began);
}

/// Copies between GPUs: 256 MiB, median of 5 after one untimed, for each ordered pair.
fn peer_copies(
    cuda: &Cuda,
    run: &Run,
    gpus: &[(driver::CuDevice, String)],
    pairs: &[(usize, usize)],
) -> Result<Vec<PeerCopy>> {
    let bytes: u64 = 256 << 20;
    let ctxs = gpus
        .iter()
        .map(|(d, _)| cuda.context(*d))
        .collect::<Result<Vec<_>>>()?;
    let mut bufs = Vec::new();
    for c in &ctxs {
        c.make_current()?;
        bufs.push(cuda.alloc(bytes)?);
    }
    let mut out = Vec::new();
    for &(a, b) in pairs {
        run.go_on()?;
        let began = Instant::now();
        let mut p = PeerCopy {
            from: gpus[a].1.clone(),
            to: gpus[b].1.clone(),
            bytes,
            ..PeerCopy::default()
        };
        let measured = (|| -> Result<f64> {
            ctxs[a].make_current()?;
            p.peer_access = a == b || cuda.can_access_peer(gpus[a].0, gpus[b].0)?;
            if p.peer_access && a != b {
                cuda.enable_peer(&ctxs[b])?;
            }
            let s = cuda.stream()?;
            let (e0, e1) = (cuda.event()?, cuda.event()?);
            let mut v = Vec::new();
            for i in 0..6 {
                run.go_on()?;
                cuda.record(&e0, &s)?;
                cuda.peer_copy((&bufs[b], &ctxs[b]), (&bufs[a], &ctxs[a]), bytes, &s)?;
                cuda.record(&e1, &s)?;
                let ms = cuda.elapsed_ms(&e0, &e1)?;
                if i > 0 {
                    v.push(bytes as f64 / (ms / 1e3) / 1e9);
                }
            }
            v.sort_by(f64::total_cmp);
            Ok(v.get(v.len() / 2).copied().unwrap_or(0.0))
        })();
        match measured {
            Ok(g) => p.gbps = (g * 100.0).round() / 100.0,
            Err(e) if e.downcast_ref::<Stopped>().is_some() => return Err(e),
            Err(e) => p.error = Some(format!("{e:#}")),
        }
        p.ms = ms_since(began);
        out.push(p);
    }
    Ok(out)
}

/// This process's peak resident memory, KiB.
fn peak_rss_kib() -> Option<u64> {
    // SAFETY: an all-zero rusage is a valid value of that plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF, with a pointer to a local that getrusage fills.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    u64::try_from(ru.ru_maxrss).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_bus_id_takes_nvmls_form() {
        assert_eq!(nvml_bus_id("0000:3b:00.0"), "00000000:3B:00.0");
        assert_eq!(nvml_bus_id("00000000:3B:00.0"), "00000000:3B:00.0");
    }
}
