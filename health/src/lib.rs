//! `gpuhost status`: node health through NVML, sysfs, the kernel log and services, with
//! Nagios exit codes (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN: the worst check wins, ranked
//! OK < WARNING < UNKNOWN < CRITICAL so that a CRITICAL finding is never hidden).
//!
//! The pieces:
//! - [`host`], [`kmsg`]: driver-free collection (sysfs, /proc, daemon.json, systemctl, the
//!   kernel log), relative to a root that tests point at a crafted tree;
//! - [`nvml`]: the NVML probe, run in a child process by [`probe`] under a deadline;
//! - [`snapshot`]: what was collected, as serialisable data;
//! - [`verdict`]: pure functions from a snapshot to checks;
//! - [`output`]: table, JSON and Prometheus renderings.
//!
//! The JSON report (`--format json`) is documented in `health/README.md`.

pub mod boot_cache;
pub mod coprobe;
pub mod counters;
pub mod cuda;
pub mod fleet;
mod helper_log;
pub mod host;
pub mod kmsg;
pub mod nvml;
pub mod output;
pub mod probe;
pub mod served;
pub mod slurm;
pub mod snapshot;
pub mod sweep_profile;
pub mod verdict;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use gpuhost_host::host::Host;
use gpuhost_profile::Profile;
use snapshot::{
    FabricManagerVersion, NvmlProbe, PciKind, ProbeStatus, Services, Snapshot, SNAPSHOT_SCHEMA,
};
use verdict::{Expect, Severity};

/// What `gpuhost status` prints on stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StatusFormat {
    /// One row per check, for people.
    #[default]
    Table,
    /// The whole report, for programs.
    Json,
    /// Prometheus text exposition (node_exporter's textfile collector).
    Prometheus,
    /// Kubernetes node-problem-detector's custom-plugin protocol.
    Npd,
}

/// What `gpuhost status` is asked to do (the command line's `gpuhost status` options, as the
/// agent parsed them). `Default` is for code that builds them: it is not the command line's
/// defaults.
#[derive(Debug, Clone, Default)]
pub struct StatusOptions {
    /// Output format on stdout.
    pub format: StatusFormat,
    /// Also write the Prometheus text to this file, atomically.
    pub textfile: Option<PathBuf>,
    /// GPUs this node must have (overrides the profile's `status.expect_gpus`).
    pub expect_gpus: Option<u32>,
    /// A profile (built-in name or .toml path) giving the expected GPU count and driver version.
    pub profile: Option<String>,
    /// Deadline for the NVML probe; with `wait_healthy`, the whole wait.
    pub timeout: Duration,
    /// Look again and again, this long apart, until the node is healthy (OK or WARNING) or
    /// `timeout` has passed (`--wait-healthy --poll SECONDS`); None: look once.
    pub wait_healthy: Option<Duration>,
    /// Slurm HealthCheckProgram mode: drain on CRITICAL, resume what gpuhost drained.
    pub slurm: bool,
    /// With `slurm`: the Slurm node name.
    pub slurm_node: Option<String>,
    /// The NVML probe child answers the `nvml` part of this saved snapshot instead of asking
    /// NVML (tests, benchmarks).
    pub nvml_fixture: Option<PathBuf>,
    /// The one-shot NVML probe as a program (`gpuhost nvml-probe …`, the fixture included),
    /// run where neither the helper nor a fork can be.
    pub probe_program: Vec<OsString>,
    /// Probe here even when a `gpuhost serve` answers on this node's socket.
    pub fresh: bool,
    /// Print the collected snapshot as JSON instead of a report.
    pub dump_snapshot: bool,
    /// Judge a snapshot saved by `dump_snapshot` instead of collecting one.
    pub from_snapshot: Option<PathBuf>,
    /// Read sysfs, /proc, /dev/kmsg and /etc under this root (tests).
    pub root: PathBuf,
}

/// Run `gpuhost status`; returns the Nagios exit code (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).
pub fn run(args: &StatusOptions) -> i32 {
    match status(args) {
        Ok(code) => code,
        Err(e) => unknown(args.format, &format!("{e:#}")),
    }
}

/// A run that could not judge the node (`error`: why, a bad argument or the whole error
/// chain): `error` on stderr, and one UNKNOWN line for the monitor on stdout (in the formats a
/// monitor reads a line of); the exit code of UNKNOWN in `format`.
pub fn unknown(format: StatusFormat, error: &str) -> i32 {
    eprintln!("gpuhost status: {error}");
    unknown_line(format, error)
}

/// A run that could not judge the node still answers UNKNOWN on stdout where a monitor reads
/// one line (the table's first line, node-problem-detector's line; a JSON or Prometheus
/// reader gets nothing rather than a broken document); the exit code of UNKNOWN in that format.
fn unknown_line(format: StatusFormat, error: &str) -> i32 {
    match format {
        StatusFormat::Table => {
            println!("gpuhost status UNKNOWN: {error}");
            Severity::Unknown.exit_code()
        }
        StatusFormat::Npd => {
            println!(
                "{}",
                fleet::truncate(&format!("UNKNOWN {error}"), fleet::NPD_MAX_OUTPUT)
            );
            2
        }
        StatusFormat::Json | StatusFormat::Prometheus => Severity::Unknown.exit_code(),
    }
}

/// `gpuhost sweep-profile N`: time `n` sweeps of the node under `root` part by part, judged
/// with `profile` and `expect_gpus`, and print that as pretty JSON; 0, or 3.
pub fn sweep_profile(
    root: &Path,
    profile: Option<&str>,
    expect_gpus: Option<u32>,
    n: usize,
) -> i32 {
    let host = match Host::new(root) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("gpuhost sweep-profile: {e:#}");
            return 3;
        }
    };
    let expect = expectations_for(profile, expect_gpus);
    print_pretty("the profile", &sweep_profile::run(&host, &expect, n))
}

/// `gpuhost nvml-calls`: every NVLink and fabric NVML call's raw return code, per GPU, as
/// pretty JSON; 0, or 3.
pub fn nvml_calls() -> i32 {
    print_pretty("the NVML calls", &nvml::calls::report())
}

/// `gpuhost nvml-serve`: be `gpuhost serve`'s long-lived NVML probe ([`coprobe::serve_child`]).
pub fn serve_probe(fixture: Option<&Path>) -> i32 {
    coprobe::serve_child(fixture)
}

/// An internal report (`sweep-profile`, `nvml-calls`) as pretty JSON on stdout: 0, or 3
/// when `what` cannot be serialised.
fn print_pretty(what: &str, v: &impl serde::Serialize) -> i32 {
    match serde_json::to_string_pretty(v) {
        Ok(s) => {
            println!("{s}");
            0
        }
        Err(e) => {
            eprintln!("cannot serialise {what}: {e}");
            3
        }
    }
}

/// The probe child: NVML (or, with `fixture`, a saved snapshot's NVML part, through the boot
/// cache of `root`) → JSON on stdout. `GPUHOST_PROBE_DELAY_MS` makes it sleep first, to stand
/// for a hung driver in tests and drills.
pub fn run_probe(fixture: Option<&Path>, root: &Path) -> i32 {
    let mut p = probe_answer(fixture.map(|f| (f, root)));
    p.peak_rss_kib = probe::peak_rss_kib();
    match serde_json::to_string(&p) {
        Ok(s) => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{s}").and_then(|()| out.flush()) {
                Ok(()) => 0,
                Err(_) => 1,
            }
        }
        Err(e) => {
            eprintln!("cannot serialise the NVML answer: {e}");
            1
        }
    }
}

/// The one-shot probe's work (after `GPUHOST_PROBE_DELAY_MS`, a hung-driver drill): NVML, or
/// a saved snapshot's NVML part through the boot cache of a root.
fn probe_answer(fixture: Option<(&Path, &Path)>) -> NvmlProbe {
    drill_delay();
    match fixture {
        Some((f, root)) => fixture_probe(f, root),
        None => nvml::probe(),
    }
}

/// `GPUHOST_PROBE_DELAY_MS`: the probe sleeps first, standing for a hung driver (tests, drills).
fn drill_delay() {
    if let Some(ms) = std::env::var("GPUHOST_PROBE_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// A one-shot probe answered from a saved snapshot's NVML part: each GPU's fixed fields and
/// InfoROM validation from the boot cache of `root` when it has them for that GPU's UUID
/// (what the NVML probe does not ask again), the rest from the file.
fn fixture_probe(path: &Path, root: &Path) -> NvmlProbe {
    let start = std::time::Instant::now();
    let mut p = match coprobe::load_fixture(path) {
        Ok(p) => p,
        Err(e) => {
            return NvmlProbe {
                status: ProbeStatus::ProbeFailed,
                error: Some(format!("{e:#}")),
                ..NvmlProbe::default()
            }
        }
    };
    let key = Host::new(root).ok().and_then(|h| boot_cache::Key::read(&h));
    let mut store = boot_cache::Store::load(probe::run_dir().ok().as_deref(), key);
    store.apply_or_keep(&mut p);
    p.duration_ms = Some((start.elapsed().as_secs_f64() * 1e5).round() / 100.0);
    p
}

fn status(args: &StatusOptions) -> Result<i32> {
    if let Some(path) = args.textfile.as_deref() {
        check_textfile(path)?;
    }
    let timeout = args.timeout;
    if let Some(every) = args.wait_healthy {
        probe::run_dir()?;
        return Ok(wait_healthy(args, &checked_expectations(args)?, every));
    }
    // A running `gpuhost serve` has a fresh sweep: ask it first. A report it renders is
    // printed as it is (it judged with this profile name and GPU count).
    let served = match asked_server(args, &request(args)) {
        Some(served::Served::Report { code, text }) => {
            use std::io::Write;
            let _ = std::io::stdout().lock().write_all(&text);
            return Ok(code);
        }
        Some(served::Served::Snapshot(s)) => Some(*s),
        None => None,
    };
    let expect = checked_expectations(args)?;
    let snapshot = match served {
        Some(s) => s,
        None => {
            // The records of earlier runs (a stuck probe, the counters' baseline) are trusted
            // only in a run directory of the caller's own: refused before any is read.
            probe::run_dir()?;
            snapshot_once(args, &expect, timeout, false)?
        }
    };
    if args.dump_snapshot {
        println!("{}", serde_json::to_string_pretty(&snapshot)?);
        return Ok(0);
    }
    let checks = verdict::evaluate(&snapshot, &expect);
    Ok(report(args, &snapshot, &expect, &checks))
}

/// `--textfile PATH` must be a regular file in an existing directory, or not yet there: the
/// text is written beside it and renamed over it, which would turn a device node or a link
/// (`/dev/stdout`, `/proc/self/fd/1`, a FIFO) into a regular file for the whole host.
fn check_textfile(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if d.as_os_str().is_empty() => Path::new("."),
        Some(d) => d,
        None => Path::new("/"),
    };
    if !dir.is_dir() {
        anyhow::bail!(
            "--textfile: the directory {} does not exist; create it (node_exporter's textfile collector directory) or give another path",
            dir.display()
        );
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => anyhow::bail!(
            "--textfile {} is {}, not a regular file; nothing was written: give a file in node_exporter's textfile collector directory",
            path.display(),
            gpuhost_host::fsutil::kind_of(m.file_type())
        ),
        _ => Ok(()),
    }
}

/// [`expectations`], or the error of a profile that cannot be read: a mistake to report, not
/// a check to skip quietly.
fn checked_expectations(args: &StatusOptions) -> Result<Expect> {
    let expect = expectations(args);
    if let (Some(name), Some(err)) = (&args.profile, &expect.profile_error) {
        anyhow::bail!("--profile {name}: {err}");
    }
    Ok(expect)
}

/// What to ask a running `gpuhost serve`: the rendered report when nothing but the report is
/// wanted (no `--textfile`, `--slurm` or `--dump-snapshot`; a built-in profile name if any),
/// else the snapshot.
fn request(args: &StatusOptions) -> served::Request {
    let simple = args.profile.as_deref().is_none_or(served::simple_profile);
    if args.textfile.is_some() || args.slurm || args.dump_snapshot || !simple {
        return served::Request::Snapshot;
    }
    served::Request::Report {
        format: args.format,
        profile: args.profile.clone(),
        expect_gpus: args.expect_gpus,
    }
}

/// The answer of a `gpuhost serve` reading this root, unless told not to ask (`--fresh`), or a
/// file stands for NVML or the snapshot.
fn asked_server(args: &StatusOptions, request: &served::Request) -> Option<served::Served> {
    if args.fresh || args.nvml_fixture.is_some() || args.from_snapshot.is_some() {
        return None;
    }
    let root = args.root.canonicalize().ok()?;
    served::ask(&root, request)
}

/// One snapshot: read from `--from-snapshot` (each time: a test may rewrite it), or asked of a
/// running `gpuhost serve` (when `ask_server`), or collected.
fn snapshot_once(
    args: &StatusOptions,
    expect: &Expect,
    timeout: Duration,
    ask_server: bool,
) -> Result<Snapshot> {
    if let Some(f) = &args.from_snapshot {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        return serde_json::from_str::<Snapshot>(&text)
            .with_context(|| format!("parsing {}", f.display()));
    }
    if ask_server {
        if let Some(served::Served::Snapshot(s)) = asked_server(args, &served::Request::Snapshot) {
            return Ok(*s);
        }
    }
    let host = Host::new(&args.root)?;
    Ok(collect_with(
        &host,
        timeout,
        expect,
        args.nvml_fixture.as_deref(),
        &args.probe_program,
    ))
}

/// Print the report in the asked format (and the textfile, and Slurm's action); the exit code.
fn report(
    args: &StatusOptions,
    snapshot: &Snapshot,
    expect: &Expect,
    checks: &[verdict::Check],
) -> i32 {
    let verdict = verdict::overall(checks);
    let (mut code, text) = render(args.format, snapshot, expect, checks);
    print!("{text}");
    if let Some(path) = &args.textfile {
        let text = output::prometheus(snapshot, checks);
        if let Err(e) = gpuhost_host::fsutil::write_atomic(path, text.as_bytes(), 0o644) {
            eprintln!("gpuhost status: cannot write the textfile: {e:#}");
            if args.format != StatusFormat::Npd {
                code = code.max(Severity::Unknown.exit_code());
            }
        }
    }
    if args.slurm {
        let done = slurm::node_name(args.slurm_node.as_deref())
            .and_then(|node| slurm::act(&node, verdict, checks).map(|a| a.describe(&node)));
        match done {
            Ok(line) => println!("gpuhost slurm: {line}"),
            Err(e) => {
                eprintln!("gpuhost status --slurm: {e:#}");
                code = code.max(Severity::Unknown.exit_code());
            }
        }
    }
    code
}

/// The report in `format` as `gpuhost status` prints it, and its exit code (before
/// `--textfile` and `--slurm`): the one-shot run and `gpuhost serve`'s socket both render
/// with this.
pub fn render(
    format: StatusFormat,
    snapshot: &Snapshot,
    expect: &Expect,
    checks: &[verdict::Check],
) -> (i32, String) {
    let code = verdict::overall(checks).exit_code();
    match format {
        StatusFormat::Json => (
            code,
            format!("{}\n", output::json(snapshot, expect, checks)),
        ),
        StatusFormat::Prometheus => (code, output::prometheus(snapshot, checks)),
        StatusFormat::Npd => {
            let (c, line) = fleet::npd(checks);
            (c, format!("{line}\n"))
        }
        StatusFormat::Table => (code, output::table(checks)),
    }
}

/// `--wait-healthy`: look, `every` apart, until healthy or `--timeout`; 0 healthy, 2 not in
/// time.
fn wait_healthy(args: &StatusOptions, expect: &Expect, every: Duration) -> i32 {
    let w = fleet::wait_healthy(args.timeout, every, |t| {
        match snapshot_once(args, expect, t, true) {
            Ok(snap) => {
                let checks = verdict::evaluate(&snap, expect);
                let sev = verdict::overall(&checks);
                (sev, fleet::one_line(&checks), Some((snap, checks)))
            }
            Err(e) => (Severity::Unknown, format!("UNKNOWN: {e:#}"), None),
        }
    });
    if let Some((snap, checks)) = &w.last {
        let _ = report(args, snap, expect, checks);
    }
    if w.healthy {
        0
    } else {
        2
    }
}

/// What the node should have: `--expect-gpus` over the profile's `status.expect_gpus`; the
/// driver version from the profile's `status.expect_driver_version`, else its local repo RPM
/// name; `status.require_docker` and `status.require_fabric_manager`.
pub fn expectations(args: &StatusOptions) -> Expect {
    expectations_for(args.profile.as_deref(), args.expect_gpus)
}

/// [`expectations`] from a profile name or path and an `--expect-gpus` count.
pub fn expectations_for(profile: Option<&str>, expect_gpus: Option<u32>) -> Expect {
    let mut e = Expect::default();
    if let Some(name) = profile {
        match Profile::resolve(name, &[]) {
            Ok(p) => {
                if let Some(n) = p.status.expect_gpus {
                    e.gpus = Some(n);
                    e.gpus_source = Some(format!("profile {name}"));
                }
                if let Some(v) = &p.status.expect_driver_version {
                    e.driver_version = Some(v.trim().to_string());
                    e.driver_source =
                        Some(format!("profile {name} (status.expect_driver_version)"));
                } else if let Some(rpm) = &p.driver.local_repo_rpm {
                    let file = rpm.file_name().map(|f| f.to_string_lossy().to_string());
                    if let Some(v) = file.as_deref().and_then(verdict::driver_version_from_rpm) {
                        e.driver_version = Some(v);
                        e.driver_source = Some(format!("profile {name}"));
                    }
                }
                e.require_docker = p.status.require_docker;
                e.require_fabric_manager = p.status.require_fabric_manager;
                e.thresholds = verdict::Thresholds::from_profile(&p.status);
                e.min_free_gib = verdict::MinFree::from_profile(&p.status);
            }
            Err(err) => e.profile_error = Some(format!("{err:#}")),
        }
    }
    if let Some(n) = expect_gpus {
        e.gpus = Some(n);
        e.gpus_source = Some("--expect-gpus".into());
    }
    e
}

/// Collect a snapshot: the NVML probe runs in a child process while the driver-free reads
/// happen here. Fabric Manager's version is asked (rpm) only where NVSwitches are on PCI or
/// `expect` requires Fabric Manager, beside the `systemctl` call.
/// `program` is the probe as a program (`gpuhost nvml-probe`), run where neither the helper
/// nor a fork can be.
pub fn collect(host: &Host, timeout: Duration, expect: &Expect, program: &[OsString]) -> Snapshot {
    collect_with(host, timeout, expect, None, program)
}

/// [`collect`] with the probe answering from a saved snapshot (`--nvml-fixture`).
fn collect_with(
    host: &Host,
    timeout: Duration,
    expect: &Expect,
    fixture: Option<&Path>,
    program: &[OsString],
) -> Snapshot {
    // Started first, while this process has one thread: the probe is a forked copy of it.
    let running = start_one_shot(timeout, fixture.map(|f| (f, host.root())), program);
    collect_around(host, expect, None, move || match running {
        Ok(r) => r.finish(),
        Err(p) => *p,
    })
}

/// Start the one-shot NVML probe: the helper `gpuhost-nvml-probe` ([`probe::exec`]), else a
/// forked copy of this process ([`probe::fork`]; `program`, `gpuhost nvml-probe`, where no
/// fork can be made), all under a deadline; with a fixture (and the root whose boot cache it
/// goes through), answered from that file.
fn start_one_shot(
    timeout: Duration,
    fixture: Option<(&Path, &Path)>,
    program: &[OsString],
) -> Result<probe::Running, Box<NvmlProbe>> {
    let run_dir = probe::run_dir().map_err(|e| {
        Box::new(NvmlProbe {
            status: ProbeStatus::ProbeFailed,
            error: Some(format!("{e:#}")),
            ..NvmlProbe::default()
        })
    })?;
    // The helper asks NVML only: a fixture is answered by a forked copy (the helper's code
    // stays what a live probe runs, and small).
    if let Some(helper) = probe::helper().filter(|_| fixture.is_none()) {
        match probe::exec(&helper, &[], timeout, &run_dir) {
            Err(p) if p.status != ProbeStatus::StuckEarlier => tracing::debug!(
                "the NVML probe helper {} did not start ({}): forking the probe instead",
                helper.display(),
                p.error.as_deref().unwrap_or("")
            ),
            started => return started,
        }
    }
    let fixture = fixture.map(|(f, r)| (f.to_path_buf(), r.to_path_buf()));
    let work = move || probe_line(fixture.as_ref().map(|(f, r)| (f.as_path(), r.as_path())));
    probe::fork(work, program, timeout, &run_dir)
}

/// The probe's answer as one line of JSON, its peak RSS in it (empty when it cannot be
/// serialised: the caller reports no readable answer).
fn probe_line(fixture: Option<(&Path, &Path)>) -> String {
    answer_line(probe_answer(fixture))
}

/// `p` as one line of JSON, with this process's peak RSS.
fn answer_line(mut p: NvmlProbe) -> String {
    p.peak_rss_kib = probe::peak_rss_kib();
    serde_json::to_string(&p).unwrap_or_default()
}

/// The NVML probe helper, `gpuhost-nvml-probe` (no arguments), run by `gpuhost status`
/// ([`probe::exec`]): its answer on stdout, then it leaves without waiting for NVML's
/// release. Exit 2 with a one-line error on any argument.
pub fn helper_main() -> i32 {
    probe::close_inherited(None);
    helper_log::init();
    if let Some(a) = std::env::args_os().nth(1) {
        eprintln!(
            "{}: cannot take {}: this helper takes no arguments; `gpuhost status` runs it",
            probe::HELPER,
            a.to_string_lossy()
        );
        return 2;
    }
    drill_delay();
    let out = answer_line(nvml::probe());
    // SAFETY: fd 1 is this process's stdout, owned by nothing else here; the File closes it.
    let stdout = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(1) };
    probe::answer_and_leave(&out, stdout)
}

/// Collect a snapshot whose NVML part comes from `nvml`, run on another thread while the
/// driver-free reads happen here (`gpuhost serve` passes its long-lived probe, and `kernel`:
/// the kernel log followed from one sweep to the next; None reads it whole).
pub fn collect_around<F>(
    host: &Host,
    expect: &Expect,
    kernel: Option<&mut kmsg::Follower>,
    nvml: F,
) -> Snapshot
where
    F: FnOnce() -> NvmlProbe + Send,
{
    std::thread::scope(|scope| {
        let probe = scope.spawn(nvml);
        let t = std::time::Instant::now();
        let (host_snap, services, kernel_log) = collect_host(host, expect, kernel);
        tracing::debug!(
            "driver-free reads (beside the NVML probe): {:.2} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        let nvml = probe.join().unwrap_or_else(|_| NvmlProbe {
            status: ProbeStatus::ProbeFailed,
            error: Some("the NVML probe thread panicked".into()),
            ..NvmlProbe::default()
        });
        let previous = probe::run_dir()
            .ok()
            .and_then(|d| counters::load(&d, host_snap.boot_id.as_deref()));
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let s = Snapshot {
            schema: SNAPSHOT_SCHEMA,
            collected_at: now_ms / 1000,
            host: host_snap,
            services,
            kernel_log,
            nvml,
            collected_at_ms: now_ms,
            previous,
            served_by: None,
        };
        keep_counters(&s);
        s
    })
}

/// Keep this run's counters as the next runs' baseline when due ([`counters::store`]); a
/// failure only costs the next run its rates.
pub fn keep_counters(s: &Snapshot) {
    let now = counters::of(s, s.host.boot_id.clone());
    let stored = probe::run_dir().and_then(|d| counters::store(&d, s.previous.as_ref(), &now));
    if let Err(e) = stored {
        tracing::warn!("cannot keep the counters for rates: {e:#}");
    }
}

/// The driver-free part: sysfs and /proc, the kernel log, and (on the live system) services.
fn collect_host(
    host: &Host,
    expect: &Expect,
    kernel: Option<&mut kmsg::Follower>,
) -> (snapshot::HostSnapshot, Services, snapshot::KernelLog) {
    let live = host.is_live();
    let mut host_snap = host::collect(host);
    host_snap.system = Some(gpuhost_host::hostinfo::gather(host));
    let kernel_log = match kernel {
        Some(f) => f.collect(host),
        None => kmsg::collect(host),
    };
    let want_fm = match expect.require_fabric_manager {
        Some(r) => r,
        None => host_snap.pci.iter().any(|d| d.kind == PciKind::NvSwitch),
    };
    let services = if live {
        std::thread::scope(|s| {
            let fm = want_fm.then(|| s.spawn(host::fabricmanager_version));
            let mut sv = host::services();
            if sv.nvidia_imex.as_deref() == Some("active") {
                sv.imex_domain = Some(host::imex_domain());
            }
            sv.fabricmanager_version = fm.map(|h| {
                h.join().unwrap_or_else(|_| FabricManagerVersion {
                    error: Some("the rpm query failed".into()),
                    ..FabricManagerVersion::default()
                })
            });
            sv
        })
    } else {
        Services {
            error: Some(format!(
                "not checked under --root {}",
                host.root().display()
            )),
            ..Services::default()
        }
    };
    (host_snap, services, kernel_log)
}
