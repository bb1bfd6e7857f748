//! Running the active checks (`gpuhost status --active`) in their child process, and keeping
//! the last result for `gpuhost serve`.
//!
//! The child (`gpuhost-active-probe`, or `gpuhost active-probe` where the helper is not
//! installed) does the CUDA work and prints its report; a hung kernel or a driver fault takes
//! the child, never gpuhost. It is given the time limit and stops itself there; 2 s past it,
//! or as soon as `gpuhost status` itself gets SIGTERM or SIGINT, it is sent SIGTERM (it frees
//! every context and pinned buffer and reports what it finished); 3 s after that it is killed
//! and left behind (a process stuck in the driver cannot be reaped). `CUDA_VISIBLE_DEVICES`
//! is taken from its environment: the node's checks cover every GPU.
//!
//! The last result is kept in the run directory (`active-last.json`, the caller's own, like
//! the other records) with when it ended, for `gpuhost serve` to show with its age: serve never
//! runs GPU work itself (it would disturb the jobs).

use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpuhost_host::cmd::{Cmd, Waited};

use crate::snapshot::ActiveRun;

/// The kept result's file in the run directory.
pub(crate) const LAST_FILE: &str = "active-last.json";
/// How long past its limit the child may take to answer before SIGTERM, and after it before
/// SIGKILL.
const LATE: Duration = Duration::from_secs(2);
const GRACE: Duration = Duration::from_secs(3);

/// How to run the active checks.
#[derive(Debug, Clone, Default)]
pub struct ActiveOptions {
    /// The child program and its first arguments (`gpuhost-active-probe`, or `gpuhost
    /// active-probe`).
    pub program: Vec<OsString>,
    /// The time limit, s.
    pub seconds: f64,
    /// Check GPUs that have compute processes on them too.
    pub force: bool,
    /// A test's fault to inject (`hbm`, `fp32`, …).
    pub inject_fault: Option<String>,
    /// Copy GPU 0 to itself through the peer path (tests on a one-GPU machine).
    pub p2p_self: bool,
}

/// Run the child and wait for its report (see the module doc); the report kept for serve.
pub(crate) fn run(o: &ActiveOptions, run_dir: Option<&Path>) -> ActiveRun {
    let began = Instant::now();
    let mut out = ActiveRun::default();
    let Some((program, first)) = o.program.split_first() else {
        out.error = Some("no program for the active checks".into());
        return out;
    };
    let mut cmd = Cmd::new(program.to_string_lossy())
        .args(first.iter().cloned())
        .args(["--seconds".into(), OsString::from(o.seconds.to_string())])
        .env_remove("CUDA_VISIBLE_DEVICES");
    if o.force {
        cmd = cmd.arg("--force");
    }
    if o.p2p_self {
        cmd = cmd.arg("--p2p-self");
    }
    if let Some(f) = &o.inject_fault {
        cmd = cmd.args(["--inject-fault".into(), OsString::from(f)]);
    }
    // SIGTERM and SIGINT to gpuhost stop the child cleanly; the handlers go with this run.
    let signal = Arc::new(AtomicUsize::new(0));
    let ids: Vec<_> = [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT]
        .into_iter()
        .filter_map(|s| signal_hook::flag::register_usize(s, signal.clone(), s as usize).ok())
        .collect();
    let soft = began + Duration::from_secs_f64(o.seconds) + LATE;
    let waited = cmd
        .spawn()
        .map(|child| child.wait_stoppable(soft, GRACE, &|| signal.load(Ordering::Relaxed) != 0));
    for id in ids {
        signal_hook::low_level::unregister(id);
    }
    match waited {
        Err(e) => out.error = Some(format!("the active checks' child could not start: {e:#}")),
        Ok(Waited::Abandoned { pid, elapsed }) => {
            out.error = Some(format!(
                "the active checks' child (pid {pid}) gave no report within {:.1} s of a {} s limit and was killed: a kernel or the driver hung",
                elapsed.as_secs_f64(),
                o.seconds
            ))
        }
        Ok(Waited::Done(done)) => {
            out.exit_code = done.code;
            match done.stdout.lines().rev().find(|l| l.starts_with('{')) {
                Some(line) => match serde_json::from_str(line) {
                    Ok(r) => out.report = Some(r),
                    Err(e) => out.error = Some(format!("the active checks' report cannot be read: {e}")),
                },
                None => {
                    out.error = Some(format!(
                        "the active checks' child exited {} with no report: {}",
                        done.code.map_or("on a signal".to_string(), |c| c.to_string()),
                        gpuhost_host::cmd::tail_lines(&done.stderr, 3).trim()
                    ))
                }
            }
        }
    }
    out.wall_ms = (began.elapsed().as_secs_f64() * 1e5).round() / 100.0;
    out.finished_at = now_s();
    if let (Some(dir), Some(_)) = (run_dir, &out.report) {
        if let Err(e) = crate::probe::store_kept(dir, LAST_FILE, &out) {
            tracing::debug!("the active result is not kept: {e:#}");
        }
    }
    out
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The last result `gpuhost status --active` kept in this user's run directory, with its
/// age (what `gpuhost serve` shows).
pub fn last_active() -> Option<ActiveRun> {
    kept(&crate::probe::run_dir().ok()?)
}

/// The last result kept in `run_dir`, with its age.
pub(crate) fn kept(run_dir: &Path) -> Option<ActiveRun> {
    let mut r: ActiveRun = crate::probe::load_kept(run_dir, LAST_FILE)?;
    r.age_s = Some(now_s().saturating_sub(r.finished_at));
    Some(r)
}
