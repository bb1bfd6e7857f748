//! `gpuhost status`: ask a running `gpuhost serve`, else collect; judge; render; and do what
//! the options ask beside the report (`--textfile`, `--slurm`, `--wait-healthy`).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use gpuhost_host::host::Host;

use super::options::StatusOptions;
use super::{gate, slurm};
use crate::collect::{collect, OneShot};
use crate::expect::{expectations_for, Expect};
use crate::render::{render, unknown_line, StatusFormat};
use crate::snapshot::Snapshot;
use crate::verdict::{self, Severity};
use crate::{active, output, probe, served, summary};

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
    let mut snapshot = match served {
        Some(s) => s,
        None => {
            // The records of earlier runs (a stuck probe, the counters' baseline) are trusted
            // only in a run directory of the caller's own: refused before any is read.
            probe::run_dir()?;
            snapshot_once(args, &expect, timeout, false)?
        }
    };
    if let Some(o) = &args.active {
        snapshot.active = Some(active::run(o, probe::run_dir().ok().as_deref()));
    }
    if args.dump_snapshot {
        println!("{}", serde_json::to_string_pretty(&snapshot)?);
        return Ok(0);
    }
    let judged = verdict::judge(&snapshot, &expect);
    Ok(report(args, &snapshot, &expect, &judged))
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
    let expect = expectations_for(args.profile.as_deref(), args.expect_gpus);
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
    if args.textfile.is_some()
        || args.slurm
        || args.dump_snapshot
        || args.active.is_some()
        || !simple
    {
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
    let probe = OneShot {
        timeout,
        program: &args.probe_program,
        fixture: args.nvml_fixture.as_deref(),
    };
    Ok(collect(&host, expect, &probe))
}

/// Print the report in the asked format (and the textfile, and Slurm's action); the exit code.
fn report(
    args: &StatusOptions,
    snapshot: &Snapshot,
    expect: &Expect,
    judged: &verdict::Judgement,
) -> i32 {
    let checks = &judged.checks;
    let verdict = verdict::overall(checks);
    let (mut code, text) = render(args.format, snapshot, expect, judged);
    print!("{text}");
    if let Some(path) = &args.textfile {
        let text = output::prometheus(snapshot, judged);
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

/// `--wait-healthy`: look, `every` apart, until healthy or `--timeout`; 0 healthy, 2 not in
/// time.
fn wait_healthy(args: &StatusOptions, expect: &Expect, every: Duration) -> i32 {
    let w = gate::wait_healthy(args.timeout, every, |t| {
        match snapshot_once(args, expect, t, true) {
            Ok(snap) => {
                let judged = verdict::judge(&snap, expect);
                let sev = verdict::overall(&judged.checks);
                (sev, summary::one_line(&judged.checks), Some((snap, judged)))
            }
            Err(e) => (Severity::Unknown, format!("UNKNOWN: {e:#}"), None),
        }
    });
    let mut healthy = w.healthy;
    let mut last = w.last;
    // Healthy by the counters: now the work, once, and its verdict decides.
    if let (true, Some(o), Some((snap, _))) = (healthy, &args.active, last.as_mut()) {
        eprintln!("gpuhost status: healthy by the passive checks; running the active checks");
        snap.active = Some(active::run(o, probe::run_dir().ok().as_deref()));
        let judged = verdict::judge(snap, expect);
        healthy = verdict::overall(&judged.checks) <= Severity::Warning;
        if let Some(l) = last.as_mut() {
            l.1 = judged;
        }
    }
    if let Some((snap, judged)) = &last {
        let _ = report(args, snap, expect, judged);
    }
    if healthy {
        0
    } else {
        2
    }
}
