//! A long-lived NVML probe: one child process that initialises NVML once and answers sweeps
//! over a pipe, for `gpuhost serve`.
//!
//! Why a child and not a thread: a hung driver blocks NVML calls in an uninterruptible sleep,
//! and NVML's own locks then block every later call too; a thread stuck there can never be
//! ended, and a server whose NVML is wedged can only be restarted. A child keeps both
//! properties we want: NVML stays initialised between sweeps (no 12–14 ms `nvmlInit` per
//! scrape, no re-enumeration), and a sweep that misses its deadline costs only that child. It
//! is then killed (SIGKILL, delivered once the driver lets go), recorded in the same pid file
//! as the one-shot probe ([`crate::probe::PID_FILE`]), and replaced — but only once it is gone,
//! so stuck probes never pile up. Until then every sweep answers at once with "driver
//! unresponsive".
//!
//! The protocol is one line each way: the parent writes `sweep`, the child answers an
//! [`NvmlProbe`] as one line of JSON (`gpuhost nvml-serve`). With `--nvml-fixture
//! FILE` the child answers the `nvml` part of a saved snapshot instead of asking NVML (tests
//! and benchmarks on machines without a GPU); the pipe, the deadline and the replacement are
//! the same.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpuhost_host::cmd::{Abandoned, Answer, Cmd, Coprocess};

use crate::snapshot::{NvmlProbe, ProbeStatus, Snapshot};
use crate::{nvml, probe};

/// The question the parent asks.
pub(crate) const SWEEP: &str = "sweep";

/// Test hook: while this file exists, the child hangs in its next sweep (stands for a driver
/// that stopped answering; the parent must kill and replace it).
pub(crate) const HANG_FILE_ENV: &str = "GPUHOST_PROBE_HANG_FILE";

/// The parent's side: starts, asks, and replaces the probe child.
pub struct CoProbe {
    argv: Vec<OsString>,
    timeout: Duration,
    run_dir: PathBuf,
    current: Option<Coprocess>,
    stuck: Option<Abandoned>,
    started: u64,
}

impl CoProbe {
    /// `argv` starts the child (`gpuhost nvml-serve …`); `timeout` bounds each sweep.
    pub fn new(argv: Vec<OsString>, timeout: Duration, run_dir: &Path) -> Self {
        CoProbe {
            argv,
            timeout,
            run_dir: run_dir.to_path_buf(),
            current: None,
            stuck: None,
            started: 0,
        }
    }

    /// One sweep, answered within the deadline whatever the driver does.
    pub fn sweep(&mut self) -> NvmlProbe {
        if let Some(a) = self.stuck.as_mut() {
            if !a.reaped() {
                return stuck_earlier(a.pid, "this server");
            }
            self.stuck = None;
        }
        // A one-shot `gpuhost status` probe (or our own, recorded) still stuck in the driver:
        // do not add another.
        if let Some(pid) = probe::stuck_probe(&self.run_dir) {
            return stuck_earlier(pid, "an earlier run");
        }
        if self.current.as_mut().is_some_and(Coprocess::exited) {
            self.current = None;
        }
        let child = match self.current.as_mut() {
            Some(c) => c,
            None => match self.start() {
                Ok(c) => self.current.insert(c),
                Err(p) => return *p,
            },
        };
        match child.ask(SWEEP, Instant::now() + self.timeout) {
            Answer::Line(line, took) => match serde_json::from_str::<NvmlProbe>(&line) {
                Ok(mut p) => {
                    p.duration_ms = Some(round_ms(took));
                    p
                }
                Err(e) => {
                    self.current = None;
                    failed(format!(
                        "the NVML probe answered something unreadable ({e})"
                    ))
                }
            },
            Answer::Gone { code, stderr } => {
                self.current = None;
                failed(format!(
                    "the NVML probe exited with {}: {}",
                    code.map_or_else(|| "a signal".to_string(), |c| format!("exit status {c}")),
                    if stderr.is_empty() {
                        "no message"
                    } else {
                        stderr.as_str()
                    }
                ))
            }
            Answer::Late(took) => {
                let Some(c) = self.current.take() else {
                    return failed("the NVML probe vanished".into());
                };
                let abandoned = c.abandon();
                let pid = abandoned.pid;
                if let Err(e) = probe::record_stuck(&self.run_dir, pid) {
                    tracing::warn!("cannot record the stuck NVML probe (pid {pid}): {e:#}");
                }
                tracing::warn!(
                    "the NVML probe (pid {pid}) missed its {:.1} s deadline: killed, to be replaced once it is gone",
                    self.timeout.as_secs_f64()
                );
                self.stuck = Some(abandoned);
                NvmlProbe {
                    status: ProbeStatus::Unresponsive,
                    error: Some(format!(
                        "the NVML probe (pid {pid}) did not answer within {:.1} s",
                        self.timeout.as_secs_f64()
                    )),
                    duration_ms: Some(round_ms(took)),
                    stuck_pid: Some(pid),
                    ..NvmlProbe::default()
                }
            }
        }
    }

    fn start(&mut self) -> Result<Coprocess, Box<NvmlProbe>> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err(Box::new(failed("empty probe command".into())));
        };
        let c = Cmd::new(program.to_string_lossy())
            .args(args)
            .coprocess()
            .map_err(|e| Box::new(failed(format!("cannot start the NVML probe: {e:#}"))))?;
        self.started += 1;
        tracing::info!("NVML probe started (pid {})", c.pid());
        Ok(c)
    }
}

fn stuck_earlier(pid: u32, by: &str) -> NvmlProbe {
    NvmlProbe {
        status: ProbeStatus::StuckEarlier,
        error: Some(format!(
            "an NVML probe started by {by} (pid {pid}) is still stuck in the driver; no new probe was started"
        )),
        stuck_pid: Some(pid),
        ..NvmlProbe::default()
    }
}

fn failed(msg: String) -> NvmlProbe {
    NvmlProbe {
        status: ProbeStatus::ProbeFailed,
        error: Some(msg),
        ..NvmlProbe::default()
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// The child's side (`gpuhost nvml-serve [--nvml-fixture FILE]`): answer each
/// `sweep` line on stdin with one JSON line on stdout, until stdin closes. NVML is initialised
/// at the first sweep and kept, with what cannot change while it is (`nvml::Session`: each
/// GPU's name, UUID, VBIOS, … read once; everything that can change read at every sweep); a
/// failed init is tried again at the next sweep (a driver loaded later is then found).
///
/// With a fixture, each sweep reads the file again (it stands for asking the driver: a test
/// may rewrite it) and keeps each GPU's fixed fields from the first answer, as the NVML probe
/// does.
pub fn serve_child(fixture: Option<&Path>) -> i32 {
    if let Some(Err(e)) = fixture.map(load_fixture) {
        eprintln!("gpuhost nvml-serve: {e:#}");
        return 2;
    }
    let delay = std::env::var("GPUHOST_PROBE_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    let hang_file = std::env::var_os(HANG_FILE_ENV).map(PathBuf::from);
    let mut session: Option<nvml::Session> = None;
    let mut kept = nvml::KeptFixed::default();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() != SWEEP {
            eprintln!("gpuhost nvml-serve: unknown request {line:?}");
            continue;
        }
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        if hang_file.as_deref().is_some_and(Path::exists) {
            std::thread::sleep(Duration::from_secs(3600));
        }
        let start = Instant::now();
        let answer = match fixture {
            Some(f) => fixture_sweep(f, &mut kept, start),
            None => match session.as_mut() {
                Some(s) => s.sweep(start),
                None => match nvml::init(start) {
                    Ok(n) => session.insert(nvml::Session::new(n)).sweep(start),
                    Err(failed) => *failed,
                },
            },
        };
        let text = match serde_json::to_string(&answer) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("cannot serialise the NVML answer: {e}");
                return 1;
            }
        };
        if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    0
}

/// One fixture-fed sweep: the file's answer, each GPU with the fixed fields kept from the
/// first one.
fn fixture_sweep(path: &Path, kept: &mut nvml::KeptFixed, start: Instant) -> NvmlProbe {
    match load_fixture(path) {
        Ok(mut p) => {
            for g in &mut p.gpus {
                kept.apply_or_keep(g);
            }
            p.duration_ms = Some(round_ms(start.elapsed()));
            p
        }
        Err(e) => failed(format!("{e:#}")),
    }
}

/// The `nvml` part of a snapshot saved by `gpuhost status --dump-snapshot`.
pub(crate) fn load_fixture(path: &Path) -> anyhow::Result<NvmlProbe> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let snap: Snapshot =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(snap.nvml)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    impl CoProbe {
        /// How many probe children were started so far (1 while NVML stays initialised).
        fn children_started(&self) -> u64 {
            self.started
        }

        /// The pid of the child that answers now, if one runs.
        fn pid(&self) -> Option<u32> {
            self.current.as_ref().map(Coprocess::pid)
        }
    }

    /// A probe child written in sh: answers each line with the next line of `answers`
    /// (a file), or hangs while `hang` exists.
    fn sh_child(dir: &Path, answers: &str) -> Vec<OsString> {
        let f = dir.join("answers");
        std::fs::write(&f, answers).unwrap();
        let hang = dir.join("hang");
        let script = format!(
            "exec 3<{f}; while read q; do [ -e {hang} ] && exec sleep 3600; read -r a <&3 || exit 7; echo \"$a\"; done",
            f = f.display(),
            hang = hang.display()
        );
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    const OK: &str = r#"{"status":"ok","duration_ms":null,"driver_version":"580.159.04","nvml_version":null,"cuda_driver_version":null,"device_count":0,"gpus":[]}"#;

    #[test]
    fn one_child_answers_every_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = CoProbe::new(
            sh_child(dir.path(), &format!("{OK}\n{OK}\n{OK}\n")),
            Duration::from_secs(5),
            dir.path(),
        );
        for _ in 0..3 {
            let a = p.sweep();
            assert_eq!(a.status, ProbeStatus::Ok, "{a:?}");
            assert_eq!(a.driver_version.as_deref(), Some("580.159.04"));
            assert!(a.duration_ms.is_some());
        }
        assert_eq!(p.children_started(), 1);
    }

    #[test]
    fn a_late_child_is_killed_reported_and_replaced_once_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = CoProbe::new(
            sh_child(dir.path(), &format!("{OK}\n{OK}\n")),
            Duration::from_millis(300),
            dir.path(),
        );
        assert_eq!(p.sweep().status, ProbeStatus::Ok);
        let first = p.pid().unwrap();
        std::fs::write(dir.path().join("hang"), "").unwrap();
        let t = Instant::now();
        let a = p.sweep();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert_eq!(a.status, ProbeStatus::Unresponsive, "{a:?}");
        assert_eq!(a.stuck_pid, Some(first));
        let rec = std::fs::read_to_string(dir.path().join(probe::PID_FILE)).unwrap();
        assert!(rec.starts_with(&format!("{first} ")), "{rec}");
        std::fs::remove_file(dir.path().join("hang")).unwrap();
        // `sleep` dies of SIGKILL at once (a process in the driver would not): the next sweep
        // finds it gone, forgets the record and starts a new child.
        let mut next = p.sweep();
        for _ in 0..50 {
            if next.status == ProbeStatus::Ok {
                break;
            }
            assert_eq!(next.status, ProbeStatus::StuckEarlier, "{next:?}");
            std::thread::sleep(Duration::from_millis(20));
            next = p.sweep();
        }
        assert_eq!(next.status, ProbeStatus::Ok, "{next:?}");
        assert_eq!(p.children_started(), 2);
        assert_ne!(p.pid(), Some(first));
        assert!(!dir.path().join(probe::PID_FILE).exists());
    }

    #[test]
    fn a_child_still_stuck_blocks_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        // Stands for a probe stuck in the driver: alive, recorded, and not ours to kill.
        let mut stuck = crate::probe::tests::stuck_gpuhost(dir.path());
        probe::record_stuck(dir.path(), stuck.id()).unwrap();
        let mut p = CoProbe::new(
            sh_child(dir.path(), &format!("{OK}\n")),
            Duration::from_secs(5),
            dir.path(),
        );
        let a = p.sweep();
        assert_eq!(a.status, ProbeStatus::StuckEarlier);
        assert_eq!(p.children_started(), 0);
        stuck.kill().unwrap();
        stuck.wait().unwrap();
        assert_eq!(p.sweep().status, ProbeStatus::Ok);
    }

    #[test]
    fn a_dying_child_is_reported_with_its_stderr_and_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            "read q; echo 'libnvidia-ml exploded' >&2; exit 9".into(),
        ];
        let mut p = CoProbe::new(argv, Duration::from_secs(5), dir.path());
        let a = p.sweep();
        assert_eq!(a.status, ProbeStatus::ProbeFailed);
        let e = a.error.unwrap();
        assert!(e.contains("exit status 9") && e.contains("exploded"), "{e}");
        let _ = p.sweep();
        assert_eq!(p.children_started(), 2);
    }
}
