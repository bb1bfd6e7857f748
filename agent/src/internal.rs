//! gpuhost's hidden subcommands: what gpuhost runs as its own children (the NVML probes) and
//! the benchmarks' tools. None is for people: `--help`, the man pages and the completions
//! leave them out. They are defined and parsed here only, and the command lines that start a
//! probe child are built here too ([`nvml_probe_argv`], [`nvml_serve_argv`]): the health and
//! serve crates run what they are given.
//!
//! - `gpuhost nvml-probe [--nvml-fixture FILE] [--root DIR]`: the one-shot NVML probe, where
//!   `gpuhost status` can neither run the helper `gpuhost-nvml-probe` nor fork;
//! - `gpuhost nvml-serve [--nvml-fixture FILE]`: `gpuhost serve`'s long-lived NVML probe;
//! - `gpuhost nvml-calls`: every NVLink and fabric NVML call's raw return code, as JSON;
//! - `gpuhost sweep-profile N`: N sweeps timed part by part, as JSON.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::args::HealthRoot;

/// The hidden subcommands.
#[derive(Subcommand, Debug, Clone, PartialEq)]
pub(crate) enum Internal {
    /// Internal: be the one-shot NVML probe (print its answer as one line of JSON).
    #[command(hide = true)]
    NvmlProbe(NvmlProbeArgs),
    /// Internal: be `gpuhost serve`'s long-lived NVML probe (answer each `sweep` line on stdin
    /// with one JSON line; NVML stays initialised).
    #[command(hide = true)]
    NvmlServe(NvmlServeArgs),
    /// Internal: print every NVLink and fabric NVML call's raw return code, per GPU, as JSON
    /// (evidence for what a machine supports; see bench/MULTI-GPU.md).
    #[command(hide = true)]
    NvmlCalls,
    /// Internal: time N sweeps part by part (each NVML call, with the fixed fields kept and
    /// with every field read; the driver-free reads; the rendering) and print that as JSON
    /// (benchmarks: bench/serve-gpu-run.sh).
    #[command(hide = true)]
    SweepProfile(SweepProfileArgs),
    /// Internal: be the active checks' child (`gpuhost status --active`), where the helper
    /// `gpuhost-active-probe` is not installed: run work on every GPU, print the report as one
    /// line of JSON.
    #[command(hide = true)]
    ActiveProbe(ActiveProbeArgs),
}

/// `gpuhost active-probe` options.
#[derive(Args, Debug, Clone, PartialEq)]
pub(crate) struct ActiveProbeArgs {
    /// The time limit, s.
    #[arg(long, value_name = "SECONDS", default_value = "15")]
    pub seconds: f64,
    /// Check GPUs with compute processes on them too.
    #[arg(long)]
    pub force: bool,
    /// Inject a fault (hbm, fp32, fp64, mix32, mix64): a test run on a real GPU.
    #[arg(long, value_name = "FAULT")]
    pub inject_fault: Option<gpuhost_active::Fault>,
    /// Copy GPU 0 to itself through the peer-to-peer path (one-GPU machines).
    #[arg(long)]
    pub p2p_self: bool,
    /// Print this saved report instead of running the checks (tests: the child's pipe, time
    /// limit and signals without a GPU).
    #[arg(long, value_name = "FILE", value_parser = crate::args::fixture_file)]
    pub fixture: Option<PathBuf>,
    /// With --fixture: wait this long first, honouring SIGTERM like the real child (a child
    /// stopped by its limit), unless --fixture-hang, which ignores SIGTERM (a hung kernel).
    #[arg(long, value_name = "SECONDS", requires = "fixture")]
    pub fixture_sleep: Option<f64>,
    #[arg(long, requires = "fixture_sleep")]
    pub fixture_hang: bool,
}

/// `gpuhost nvml-probe` options.
#[derive(Args, Debug, Clone, PartialEq)]
pub(crate) struct NvmlProbeArgs {
    /// Answer the `nvml` part of this saved snapshot instead of asking NVML, through the boot
    /// cache of --root (tests, benchmarks).
    #[arg(long, value_name = "FILE", value_parser = crate::args::fixture_file)]
    pub nvml_fixture: Option<PathBuf>,
    /// With --nvml-fixture: the root whose boot cache the answer goes through.
    #[arg(
        long,
        value_name = "DIR",
        env = "GPUHOST_STATUS_ROOT",
        default_value = "/"
    )]
    pub root: PathBuf,
}

/// `gpuhost nvml-serve` options.
#[derive(Args, Debug, Clone, PartialEq)]
pub(crate) struct NvmlServeArgs {
    /// Answer the `nvml` part of this saved snapshot at each sweep instead of asking NVML.
    #[arg(long, value_name = "FILE", value_parser = crate::args::fixture_file)]
    pub nvml_fixture: Option<PathBuf>,
}

/// `gpuhost sweep-profile` options.
#[derive(Args, Debug, Clone, PartialEq)]
pub(crate) struct SweepProfileArgs {
    /// How many sweeps (1 to 10,000: each one asks NVML for every field, and the answer is held
    /// in memory).
    #[arg(value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub sweeps: u32,
    /// GPUs this node must have.
    #[arg(long, value_name = "N")]
    pub expect_gpus: Option<u32>,
    /// A profile giving the expected GPU count and driver version.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    #[command(flatten)]
    pub root: HealthRoot,
}

/// Run a hidden subcommand; its exit code.
pub(crate) fn run(i: &Internal) -> i32 {
    match i {
        Internal::NvmlProbe(a) => {
            gpuhost_health::run_nvml_probe(a.nvml_fixture.as_deref(), &a.root)
        }
        Internal::NvmlServe(a) => gpuhost_health::run_nvml_serve(a.nvml_fixture.as_deref()),
        Internal::NvmlCalls => gpuhost_health::run_nvml_calls(),
        Internal::ActiveProbe(a) => active_probe(a),
        Internal::SweepProfile(a) => gpuhost_health::run_sweep_profile(
            &a.root.dir,
            a.profile.as_deref(),
            a.expect_gpus,
            a.sweeps as usize,
        ),
    }
}

/// `gpuhost active-probe`: the real child, or a saved report played back (tests).
fn active_probe(a: &ActiveProbeArgs) -> i32 {
    let Some(file) = &a.fixture else {
        return gpuhost_active::child_main(&gpuhost_active::ChildOptions {
            seconds: a.seconds,
            force: a.force,
            fault: a.inject_fault,
            p2p_self: a.p2p_self,
        });
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if !a.fixture_hang {
        let _ = signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone());
    } else {
        let _ = signal_hook::flag::register(
            signal_hook::consts::SIGTERM,
            std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
    }
    let until = std::time::Instant::now()
        + std::time::Duration::from_secs_f64(a.fixture_sleep.unwrap_or(0.0).max(0.0));
    while std::time::Instant::now() < until && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("gpuhost active-probe: {}: {e}", file.display());
            return gpuhost_active::EXIT_FAILED;
        }
    };
    let mut report: gpuhost_active::ActiveReport = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpuhost active-probe: {}: {e}", file.display());
            return gpuhost_active::EXIT_FAILED;
        }
    };
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        report.stopped = Some("SIGTERM".into());
    }
    match serde_json::to_string(&report) {
        Ok(l) => println!("{l}"),
        Err(_) => return gpuhost_active::EXIT_FAILED,
    }
    if report.stopped.is_some() {
        gpuhost_active::EXIT_STOPPED
    } else {
        gpuhost_active::EXIT_DONE
    }
}

/// The active checks' child: `gpuhost active-probe --fixture FILE` where a saved report stands
/// for the GPUs, else the helper `gpuhost-active-probe` installed beside gpuhost (or in
/// `../libexec/gpuhost/`; `$GPUHOST_ACTIVE_PROBE` names another), else `gpuhost active-probe`.
pub(crate) fn active_probe_argv(
    fixture: Option<&Path>,
    sleep: Option<f64>,
    hang: bool,
) -> Vec<OsString> {
    if let Some(f) = fixture {
        let mut argv = vec![
            this_program(),
            "active-probe".into(),
            "--fixture".into(),
            f.as_os_str().to_owned(),
        ];
        if let Some(s) = sleep {
            argv.extend(["--fixture-sleep".into(), s.to_string().into()]);
            if hang {
                argv.push("--fixture-hang".into());
            }
        }
        return argv;
    }
    match gpuhost_health::installed_helper("GPUHOST_ACTIVE_PROBE", "gpuhost-active-probe") {
        Some(p) => vec![p.into_os_string()],
        None => vec![this_program(), "active-probe".into()],
    }
}

/// This program, for a child to run (`/proc/self/exe` when the kernel does not say).
fn this_program() -> OsString {
    std::env::current_exe()
        .unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
        .into_os_string()
}

/// The one-shot NVML probe as a program: `gpuhost nvml-probe`, with a fixture (and the root
/// whose boot cache it goes through, else `$GPUHOST_STATUS_ROOT` or `/`) when one stands for
/// NVML.
pub(crate) fn nvml_probe_argv(fixture: Option<&Path>, root: Option<&Path>) -> Vec<OsString> {
    let mut argv = vec![this_program(), "nvml-probe".into()];
    if let Some(f) = fixture {
        argv.extend(["--nvml-fixture".into(), f.as_os_str().to_owned()]);
        if let Some(r) = root {
            argv.extend(["--root".into(), r.as_os_str().to_owned()]);
        }
    }
    argv
}

/// `gpuhost serve`'s long-lived NVML probe as a program: `gpuhost nvml-serve`, with the
/// fixture that stands for NVML if any.
pub(crate) fn nvml_serve_argv(fixture: Option<&Path>) -> std::io::Result<Vec<OsString>> {
    let mut argv = vec![
        std::env::current_exe()?.into_os_string(),
        "nvml-serve".into(),
    ];
    if let Some(f) = fixture {
        argv.extend(["--nvml-fixture".into(), f.as_os_str().to_owned()]);
    }
    Ok(argv)
}
