//! The one subprocess wrapper.
//!
//! Every external command gpuhost runs goes through [`Cmd`]: an argv vector (never a shell
//! string), stdin from /dev/null, stdout and stderr captured, a timeout, the command line logged
//! at debug level, and — on failure — an error that holds the command and the tail of stderr.
//! Each run is also recorded, so that the report can say which commands a step ran and the
//! benchmark can count child processes.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

/// Default timeout: long enough for a dnf transaction or a DKMS build on a slow node.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How often a wait looks for SIGTERM/SIGINT (and for the progress tick).
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// How many lines of stderr an error keeps.
const STDERR_TAIL_LINES: usize = 12;

/// A command that could not be started at all (not installed, not executable): the program
/// never ran. Matched by type through the error chain ([`spawn_failed`]).
#[derive(Debug)]
pub(crate) struct SpawnFailed {
    /// The command line.
    pub command: String,
    pub source: std::io::Error,
    /// For a program not found: what to check.
    pub hint: Option<String>,
}

impl std::fmt::Display for SpawnFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot run `{}`: {}", self.command, self.source)?;
        match &self.hint {
            Some(h) => write!(f, "; {h}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for SpawnFailed {}

/// True when `e` (or an error it wraps) is a command that could not be started.
pub fn spawn_failed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<SpawnFailed>())
}

/// One external command, built up before it runs.
#[derive(Clone, Debug)]
pub struct Cmd {
    program: String,
    args: Vec<OsString>,
    env: Vec<(String, OsString)>,
    /// Variables of gpuhost's environment the command does not inherit.
    env_removed: Vec<String>,
    timeout: Duration,
    /// Keep stdout as bytes ([`CmdOutput::stdout_bytes`]) instead of text.
    binary: bool,
    /// Read stdin from this file (else /dev/null).
    stdin_file: Option<PathBuf>,
    /// Write stdout to this file (else captured).
    stdout_file: Option<PathBuf>,
    /// Write stdout to this open file (created by gpuhost, never reopened by path).
    stdout_fd: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// Run in this directory (else gpuhost's own).
    dir: Option<PathBuf>,
    /// Start from an empty environment (only [`Cmd::env`]'s variables).
    env_clear: bool,
    /// On a signal to gpuhost, or past the timeout, kill the command's whole process group
    /// at once instead of letting it finish ([`Cmd::kill_group_on_signal`]).
    kill_group: bool,
}

/// What a finished command left behind.
#[derive(Clone, Debug)]
pub struct CmdOutput {
    /// Exit code; `None` when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    /// stdout as bytes, for commands built with [`Cmd::binary_stdout`] (then `stdout` is empty).
    pub stdout_bytes: Vec<u8>,
    pub stderr: String,
    pub duration: Duration,
}

impl CmdOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// A record of a command that ran, for reports.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CmdRecord {
    pub argv: Vec<String>,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
}

static RECORDS: Mutex<Vec<CmdRecord>> = Mutex::new(Vec::new());

/// Every command of this process is [`Cmd::kill_group_on_signal`]'s: set by a command whose
/// children must all end with it (`gpuhost kmod build`), never by `apply`, whose package
/// transactions are let finish.
static KILL_ALL_ON_SIGNAL: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// From now on, a signal to gpuhost kills the process group of whatever command runs, at once
/// ([`Cmd::kill_group_on_signal`] for every command).
pub fn end_every_command_on_signal() {
    KILL_ALL_ON_SIGNAL.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Take (and clear) the records of the commands run since the last call.
pub fn take_records() -> Vec<CmdRecord> {
    match RECORDS.lock() {
        Ok(mut r) => std::mem::take(&mut *r),
        Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
    }
}

fn record(rec: CmdRecord) {
    match RECORDS.lock() {
        Ok(mut r) => r.push(rec),
        Err(poisoned) => poisoned.into_inner().push(rec),
    }
}

impl Cmd {
    pub fn new(program: impl Into<String>) -> Self {
        Cmd {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            binary: false,
            stdin_file: None,
            stdout_file: None,
            stdout_fd: None,
            env_removed: Vec::new(),
            dir: None,
            env_clear: false,
            kill_group: false,
        }
    }

    /// Pass the command none of gpuhost's environment: only what [`Cmd::env`] sets.
    pub fn env_clear(mut self) -> Self {
        self.env_clear = true;
        self
    }

    /// End the command with gpuhost: at the first SIGTERM or SIGINT gpuhost gets while it
    /// runs (not the second, as for a package transaction, which is let finish), and past its
    /// timeout, its whole process group is killed (SIGKILL) and reaped, then the wait stops
    /// with [`crate::interrupt::Interrupted`]. For work that is worth nothing half done and
    /// must not outlive gpuhost: `gpuhost kmod build`'s compile.
    pub fn kill_group_on_signal(mut self) -> Self {
        self.kill_group = true;
        self
    }

    /// Whether a signal (or the timeout) kills this command's process group at once.
    fn kills_group(&self) -> bool {
        self.kill_group || KILL_ALL_ON_SIGNAL.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Read stdin from `path` (a payload piped through a tool: `cpio -i < archive`).
    pub fn stdin_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdin_file = Some(path.into());
        self
    }

    /// Write stdout to `path` (created or truncated) instead of capturing it: for output too
    /// large to hold in memory (`rpm2cpio` of a local repo package).
    pub fn stdout_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdout_file = Some(path.into());
        self
    }

    /// Write stdout to this file, already open: a file gpuhost created itself (`O_EXCL`,
    /// `O_NOFOLLOW`) is written without being opened again by its path.
    pub fn stdout_to(mut self, file: impl Into<std::os::fd::OwnedFd>) -> Self {
        self.stdout_fd = Some(std::sync::Arc::new(file.into()));
        self
    }

    /// Run in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Keep stdout as bytes (decompressed files and the like).
    pub fn binary_stdout(mut self) -> Self {
        self.binary = true;
        self
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    /// The same command without any argument equal to `a` (`dnf` without `--quiet`, when its
    /// transaction table is to be read).
    pub fn without_arg(mut self, a: &str) -> Self {
        self.args.retain(|x| x != a);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: impl Into<String>, val: impl Into<OsString>) -> Self {
        self.env.push((key.into(), val.into()));
        self
    }

    /// Do not pass gpuhost's `key` on (a host path that means nothing inside an install root).
    pub fn env_remove(mut self, key: impl Into<String>) -> Self {
        self.env_removed.push(key.into());
        self
    }

    /// The value this command's environment gives `key`, when it sets one.
    pub fn env_value(&self, key: &str) -> Option<&std::ffi::OsStr> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_os_str())
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    pub fn program(&self) -> &str {
        &self.program
    }

    /// The command line, for logs and error messages.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.clone())
            .chain(self.args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect()
    }

    /// Run to completion and return whatever it produced, whatever its exit status.
    /// Fails only when the command cannot be started or runs past its timeout.
    pub fn output(&self) -> Result<CmdOutput> {
        let argv = self.argv();
        tracing::debug!(command = %Display(&argv), "running");
        if let Some(sig) = crate::interrupt::received() {
            return Err(anyhow::Error::new(crate::interrupt::Interrupted(format!(
                "interrupted by {}: `{}` was not started",
                crate::interrupt::name(sig),
                Display(&argv)
            ))));
        }
        let start = Instant::now();
        let handle = self.start(&argv)?;
        let Some(out) = self.wait(&handle, &argv, start)? else {
            if self.kills_group() {
                kill_group(&handle);
            }
            let _ = handle.kill();
            record(CmdRecord {
                argv: argv.clone(),
                exit_code: None,
                duration_ms: millis(start.elapsed()),
            });
            return Err(anyhow!(
                "`{}` did not finish within {} s and was killed",
                Display(&argv),
                self.timeout.as_secs()
            ));
        };
        let (stdout, stdout_bytes) = if self.binary {
            (String::new(), out.stdout.clone())
        } else {
            (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                Vec::new(),
            )
        };
        let output = CmdOutput {
            code: out.status.code(),
            stdout,
            stdout_bytes,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            duration: start.elapsed(),
        };
        record(CmdRecord {
            argv,
            exit_code: output.code,
            duration_ms: millis(output.duration),
        });
        Ok(output)
    }

    /// Start the command: stdin from /dev/null, output captured, in its own process group. A
    /// command that cannot be started is a [`SpawnFailed`].
    fn start(&self, argv: &[String]) -> Result<duct::Handle> {
        let mut expr = duct::cmd(&self.program, &self.args);
        expr = match &self.stdin_file {
            Some(p) => expr.stdin_path(p),
            None => expr.stdin_null(),
        };
        expr = match (&self.stdout_fd, &self.stdout_file) {
            (Some(f), _) => expr.stdout_file(
                f.try_clone()
                    .with_context(|| format!("`{}`: its output file", Display(argv)))?,
            ),
            (None, Some(p)) => expr.stdout_path(p),
            (None, None) => expr.stdout_capture(),
        };
        if let Some(d) = &self.dir {
            expr = expr.dir(d);
        }
        let mut expr = expr
            .stderr_capture()
            .unchecked()
            // Its own process group: a terminal's Ctrl-C reaches gpuhost, which lets a running
            // package transaction finish, and not the transaction itself.
            .before_spawn(|c| {
                std::os::unix::process::CommandExt::process_group(c, 0);
                Ok(())
            });
        if self.env_clear {
            expr = expr.full_env(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        for k in &self.env_removed {
            expr = expr.env_remove(k);
        }
        for (k, v) in &self.env {
            expr = expr.env(k, v);
        }
        expr.start().map_err(|e| self.spawn_failed(argv, e))
    }

    /// A command that could not be started, as a [`SpawnFailed`] (with a hint when the
    /// program is not found).
    fn spawn_failed(&self, argv: &[String], e: std::io::Error) -> anyhow::Error {
        let hint = (e.kind() == std::io::ErrorKind::NotFound)
            .then(|| format!("is `{}` installed and on PATH?", self.program));
        anyhow::Error::new(SpawnFailed {
            command: Display(argv).to_string(),
            source: e,
            hint,
        })
    }

    /// Start the command with `stdin`, its stdout and stderr piped to us, for the modes that
    /// read it as it runs ([`Cmd::spawn`], [`Cmd::coprocess`]).
    fn piped(&self, argv: &[String], stdin: std::process::Stdio) -> Result<std::process::Child> {
        use std::process::{Command, Stdio};
        let mut command = Command::new(&self.program);
        if self.env_clear {
            command.env_clear();
        }
        for k in &self.env_removed {
            command.env_remove(k);
        }
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.spawn_failed(argv, e))
    }

    /// Wait for the command until its timeout (None: it ran past it), in short slices that
    /// notice signals and tick the progress line. A first signal is said and waited out; a
    /// second stops the wait with [`crate::interrupt::Interrupted`].
    fn wait<'h>(
        &self,
        handle: &'h duct::Handle,
        argv: &[String],
        start: Instant,
    ) -> Result<Option<&'h std::process::Output>> {
        let deadline = start + self.timeout;
        let mut last_tick = start;
        let mut told = 0;
        loop {
            let now = Instant::now();
            // Short slices: a signal is noticed within a tenth of a second.
            let slice = SIGNAL_POLL.min(deadline.saturating_duration_since(now));
            let w = handle
                .wait_timeout(slice)
                .with_context(|| format!("waiting for `{}`", Display(argv)))?;
            if w.is_some() || Instant::now() >= deadline {
                return Ok(w);
            }
            let signals = crate::interrupt::count();
            if signals > told && self.kills_group() {
                return Err(killed_on_signal(handle, argv, start));
            }
            if signals > told {
                told = signals;
                signalled(handle, argv, start, signals)?;
            }
            if let Some(every) = crate::progress::tick_every() {
                if last_tick.elapsed() >= every {
                    last_tick = Instant::now();
                    crate::progress::tick(&crate::progress::summarize(argv), start.elapsed());
                }
            }
        }
    }

    /// Run and require exit status 0; the error holds the command and the tail of stderr.
    pub fn run(&self) -> Result<CmdOutput> {
        let out = self.output()?;
        if out.success() {
            Ok(out)
        } else {
            Err(self.failure(&out))
        }
    }

    /// The error for a command that exited unsuccessfully.
    pub fn failure(&self, out: &CmdOutput) -> anyhow::Error {
        anyhow::Error::new(Failed {
            command: Display(&self.argv()).to_string(),
            code: out.code,
            stdout: out.stdout.clone(),
            stderr: out.stderr.clone(),
        })
    }
}

/// A command that ran and failed: its exit status and everything it printed, so that a caller
/// can judge the tool's own words (dnf's "No such module") from the typed value. Shown as the
/// command and the last lines of stderr (or stdout when stderr is empty).
#[derive(Debug)]
pub struct Failed {
    pub command: String,
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Failed {
    /// Everything the command printed.
    pub fn output(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    /// The failed command in `e`'s chain, if `e` is (or wraps) one.
    pub fn of(e: &anyhow::Error) -> Option<&Failed> {
        e.chain().find_map(|c| c.downcast_ref::<Failed>())
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = match self.code {
            Some(c) => format!("exit status {c}"),
            None => "a signal".to_string(),
        };
        let tail = tail_lines(
            if self.stderr.trim().is_empty() {
                &self.stdout
            } else {
                &self.stderr
            },
            STDERR_TAIL_LINES,
        );
        if tail.is_empty() {
            write!(f, "`{}` failed with {status}", self.command)
        } else {
            write!(f, "`{}` failed with {status}: {tail}", self.command)
        }
    }
}

impl std::error::Error for Failed {}

/// A command started in the background by [`Cmd::spawn`].
#[derive(Debug)]
pub struct Spawned {
    argv: Vec<String>,
    child: std::process::Child,
    stdout: std::sync::mpsc::Receiver<String>,
    stderr: std::sync::mpsc::Receiver<String>,
    started: Instant,
}

/// How a background command ended.
#[derive(Debug)]
pub enum Waited {
    /// It exited (with any status) before the deadline.
    Done(CmdOutput),
    /// It did not exit by the deadline: it was sent SIGKILL and left behind, not waited for.
    Abandoned { pid: u32, elapsed: Duration },
}

impl Cmd {
    /// Start the command without waiting, for work that runs beside gpuhost's own (the NVML
    /// probe of `gpuhost status`). Unlike [`Cmd::output`], a command that misses its deadline
    /// is killed and *not waited for*: a process stuck in the kernel (a hung GPU driver)
    /// cannot be reaped, and gpuhost must not hang with it.
    pub fn spawn(&self) -> Result<Spawned> {
        use std::process::Stdio;
        let argv = self.argv();
        tracing::debug!(command = %Display(&argv), "starting in the background");
        let mut child = self.piped(&argv, Stdio::null())?;
        Ok(Spawned {
            stdout: drain(child.stdout.take()),
            stderr: drain(child.stderr.take()),
            argv,
            child,
            started: Instant::now(),
        })
    }
}

impl Cmd {
    /// Start the command with stdin from /dev/null and its stdout and stderr piped to the
    /// caller, who reads them and keeps the deadline itself (SIGKILL past it, not waited
    /// for): the NVML probe helper, whose answer is read as soon as its stdout closes and
    /// whose exit — the driver releasing NVML's objects — is not waited for.
    pub fn start_piped(&self) -> Result<std::process::Child> {
        let argv = self.argv();
        tracing::debug!(command = %Display(&argv), "starting; its pipes are read by the caller");
        self.piped(&argv, std::process::Stdio::null())
    }
}

/// Read a pipe to its end on a thread; the text arrives on the channel.
fn drain<R: std::io::Read + Send + 'static>(pipe: Option<R>) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(mut p) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = p.read_to_end(&mut buf);
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
    }
    rx
}

impl Spawned {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for the command until `deadline`; past it, kill it and leave it behind.
    pub fn wait_until(mut self, deadline: Instant) -> Waited {
        let left = deadline.saturating_duration_since(Instant::now());
        let stdout = self.stdout.recv_timeout(left);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(None) | Err(_) => break None,
            }
        };
        self.ended(stdout.ok(), status)
    }

    /// How the wait ended: with its answer and exit status, done (its stderr read); else
    /// killed and left behind. Either way recorded.
    fn ended(mut self, stdout: Option<String>, status: Option<std::process::ExitStatus>) -> Waited {
        let elapsed = self.started.elapsed();
        let (Some(stdout), Some(status)) = (stdout, status) else {
            let pid = self.child.id();
            let _ = self.child.kill();
            record(CmdRecord {
                argv: self.argv,
                exit_code: None,
                duration_ms: millis(elapsed),
            });
            return Waited::Abandoned { pid, elapsed };
        };
        let stderr = self
            .stderr
            .recv_timeout(Duration::from_millis(100))
            .unwrap_or_default();
        record(CmdRecord {
            argv: self.argv,
            exit_code: status.code(),
            duration_ms: millis(elapsed),
        });
        Waited::Done(CmdOutput {
            code: status.code(),
            stdout,
            stdout_bytes: Vec::new(),
            stderr,
            duration: elapsed,
        })
    }
}

impl Spawned {
    /// Wait for the command like [`Spawned::wait_until`], but let it stop cleanly first: at
    /// `soft`, or as soon as `stop()` says so (the caller got SIGTERM), it is sent SIGTERM,
    /// once, and given `grace` more to finish and answer; past that it is killed and left
    /// behind. `gpuhost status --active`'s child frees what it holds on the GPUs on SIGTERM.
    pub fn wait_stoppable(
        mut self,
        soft: Instant,
        grace: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Waited {
        use rustix::process::{kill_process, Pid, Signal};
        let pid = Pid::from_raw(self.child.id() as i32);
        let mut hard: Option<Instant> = None;
        let term = |hard: &mut Option<Instant>| {
            if hard.is_none() {
                if let Some(p) = pid {
                    let _ = kill_process(p, Signal::TERM);
                }
                *hard = Some(Instant::now() + grace);
            }
        };
        let mut stdout = None;
        let mut status = None;
        loop {
            if stdout.is_none() {
                match self.stdout.recv_timeout(Duration::from_millis(20)) {
                    Ok(s) => stdout = Some(s),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        stdout = Some(String::new())
                    }
                }
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
            if stdout.is_some() {
                match self.child.try_wait() {
                    Ok(Some(s)) => {
                        status = Some(s);
                        break;
                    }
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            if stop() || now >= soft {
                term(&mut hard);
            }
            if hard.is_some_and(|h| now >= h) {
                break;
            }
        }
        self.ended(stdout, status)
    }
}

/// A long-lived command spoken to over its stdin and stdout, one line each way, started by
/// [`Cmd::coprocess`] (`gpuhost serve`'s NVML probe, which keeps NVML initialised between
/// sweeps). Like [`Cmd::spawn`], nothing here waits on the child past a deadline: a child that
/// does not answer in time is killed and left behind ([`Coprocess::abandon`]).
#[derive(Debug)]
pub struct Coprocess {
    argv: Vec<String>,
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: std::sync::Arc<Mutex<std::collections::VecDeque<String>>>,
    stderr_done: std::sync::mpsc::Receiver<()>,
}

/// What one question to a [`Coprocess`] got.
#[derive(Debug)]
pub enum Answer {
    /// One line (without its newline).
    Line(String, Duration),
    /// The child closed its stdout or exited: its exit status (None: a signal, or still
    /// running) and the tail of its stderr.
    Gone { code: Option<i32>, stderr: String },
    /// No line by the deadline; the child is still there (abandon it).
    Late(Duration),
}

/// Lines of a coprocess's stderr kept for errors.
const COPROCESS_STDERR_LINES: usize = 20;

impl Cmd {
    /// Start the command with piped stdin and stdout, for a question-and-answer exchange of
    /// lines; its stderr is logged at debug level and its tail kept for errors.
    pub fn coprocess(&self) -> Result<Coprocess> {
        use std::io::BufRead;
        use std::process::Stdio;
        let argv = self.argv();
        tracing::debug!(command = %Display(&argv), "starting a coprocess");
        let mut child = self.piped(&argv, Stdio::piped())?;
        let (tx, lines) = std::sync::mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = std::sync::Arc::new(Mutex::new(std::collections::VecDeque::new()));
        let (done, stderr_done) = std::sync::mpsc::channel();
        if let Some(err) = child.stderr.take() {
            let keep = std::sync::Arc::clone(&stderr);
            std::thread::spawn(move || {
                let _done = done;
                for line in std::io::BufReader::new(err).lines() {
                    let Ok(line) = line else { break };
                    tracing::debug!(target: "coprocess", "{line}");
                    let mut q = match keep.lock() {
                        Ok(q) => q,
                        Err(p) => p.into_inner(),
                    };
                    if q.len() == COPROCESS_STDERR_LINES {
                        q.pop_front();
                    }
                    q.push_back(line);
                }
            });
        }
        Ok(Coprocess {
            stdin: child.stdin.take(),
            argv,
            child,
            lines,
            stderr,
            stderr_done,
        })
    }
}

impl Coprocess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Write `question` (one line) and wait for one line of answer until `deadline`.
    pub fn ask(&mut self, question: &str, deadline: Instant) -> Answer {
        use std::io::Write;
        let start = Instant::now();
        // Answers to earlier questions that came after their deadline are stale: drop them.
        while self.lines.try_recv().is_ok() {}
        let sent = match self.stdin.as_mut() {
            Some(w) => w
                .write_all(question.as_bytes())
                .and_then(|()| w.write_all(b"\n"))
                .and_then(|()| w.flush())
                .is_ok(),
            None => false,
        };
        if !sent {
            return self.gone();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => Answer::Line(line, start.elapsed()),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Answer::Late(start.elapsed()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.gone(),
        }
    }

    fn gone(&mut self) -> Answer {
        // Give the child a moment to exit after closing its stdout, for its status.
        let until = Instant::now() + Duration::from_millis(200);
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.code(),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(2)),
                Ok(None) | Err(_) => break None,
            }
        };
        // Its stderr to the end, when it has one.
        let _ = self.stderr_done.recv_timeout(Duration::from_millis(100));
        Answer::Gone {
            code,
            stderr: self.stderr_tail(),
        }
    }

    /// The last lines of the child's stderr, joined with " | ".
    pub(crate) fn stderr_tail(&self) -> String {
        let q = match self.stderr.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        let text: Vec<&str> = q.iter().map(String::as_str).collect();
        tail_lines(&text.join("\n"), 5)
    }

    /// Whether the child has exited (reaping it if so).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Kill the child (SIGKILL, delivered once the kernel lets go of it) without waiting for
    /// it. The returned handle reaps it later ([`Abandoned::reaped`]).
    pub fn abandon(mut self) -> Abandoned {
        let pid = self.child.id();
        let _ = self.child.kill();
        drop(self.stdin.take());
        record(CmdRecord {
            argv: self.argv.clone(),
            exit_code: None,
            duration_ms: 0,
        });
        Abandoned { pid, inner: self }
    }
}

impl Drop for Coprocess {
    fn drop(&mut self) {
        // Closing stdin asks a well-behaved child to exit; one still running is killed.
        drop(self.stdin.take());
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.try_wait();
        }
    }
}

/// A killed coprocess that may still be stuck in the kernel.
#[derive(Debug)]
pub struct Abandoned {
    pub pid: u32,
    inner: Coprocess,
}

impl Abandoned {
    /// True once the process has ended (and is reaped): a new one may be started.
    pub fn reaped(&mut self) -> bool {
        self.inner.exited()
    }
}

/// A signal arrived while `argv` runs: the first is said (the command is let finish), the
/// second stops the wait, leaving the command running.
fn signalled(handle: &duct::Handle, argv: &[String], start: Instant, signals: usize) -> Result<()> {
    let sig = crate::interrupt::received().unwrap_or(0);
    let pid = handle.pids().first().copied().unwrap_or(0);
    if signals == 1 {
        eprintln!(
            "gpuhost: {} received: letting `{}` (pid {pid}) finish, then stopping; send it again to stop waiting (the apply lock stays held while it runs)",
            crate::interrupt::name(sig),
            crate::progress::summarize(argv)
        );
        return Ok(());
    }
    record(CmdRecord {
        argv: argv.to_vec(),
        exit_code: None,
        duration_ms: millis(start.elapsed()),
    });
    Err(anyhow::Error::new(crate::interrupt::Interrupted(format!(
        "interrupted by a second {}: stopped waiting for `{}` (pid {pid}), which runs on and holds the apply lock until it ends",
        crate::interrupt::name(sig),
        Display(argv)
    ))))
}

/// SIGKILL to the command's process group (it leads one: [`Cmd::start`]), then reap it.
fn kill_group(handle: &duct::Handle) {
    use rustix::process::{kill_process_group, Pid, Signal};
    for pid in handle.pids() {
        if let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
            let _ = kill_process_group(p, Signal::KILL);
        }
    }
    let _ = handle.kill();
    let _ = handle.wait_timeout(Duration::from_secs(5));
}

/// A signal arrived while a [`Cmd::kill_group_on_signal`] command runs: its process group is
/// killed and reaped, and the wait ends as an interruption.
fn killed_on_signal(handle: &duct::Handle, argv: &[String], start: Instant) -> anyhow::Error {
    let sig = crate::interrupt::received().unwrap_or(0);
    kill_group(handle);
    record(CmdRecord {
        argv: argv.to_vec(),
        exit_code: None,
        duration_ms: millis(start.elapsed()),
    });
    anyhow::Error::new(crate::interrupt::Interrupted(format!(
        "interrupted by {}: `{}` and every process it started were killed",
        crate::interrupt::name(sig),
        crate::progress::summarize(argv)
    )))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The last `n` non-empty lines of `text`, joined with " | " so the error stays one line.
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join(" | ")
}

/// Displays an argv the way a user could paste it into a shell.
pub struct Display<'a>(pub &'a [String]);

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c));
            if plain {
                f.write_str(a)?;
            } else {
                write!(f, "'{}'", a.replace('\'', r"'\''"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_stdout_and_exit_code() -> Result<()> {
        let out = Cmd::new("sh")
            .args(["-c", "echo hi; echo oops >&2; exit 3"])
            .output()?;
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, "hi\n");
        let err = Cmd::new("sh")
            .args(["-c", "echo hi; echo oops >&2; exit 3"])
            .run()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("exit status 3") && err.contains("oops"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn timeout_kills_the_child() {
        let start = Instant::now();
        let err = Cmd::new("sleep")
            .arg("5")
            .timeout(Duration::from_millis(200))
            .run()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("did not finish"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_background_command_past_its_deadline_is_abandoned_not_awaited() -> Result<()> {
        let start = Instant::now();
        let spawned = Cmd::new("sleep").arg("5").spawn()?;
        let pid = spawned.pid();
        match spawned.wait_until(Instant::now() + Duration::from_millis(200)) {
            Waited::Abandoned { pid: p, .. } => assert_eq!(p, pid),
            Waited::Done(o) => return Err(anyhow!("finished early: {o:?}")),
        }
        assert!(start.elapsed() < Duration::from_secs(2));
        let done = Cmd::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 4"])
            .spawn()?;
        match done.wait_until(Instant::now() + Duration::from_secs(5)) {
            Waited::Done(o) => {
                assert_eq!(
                    (o.code, o.stdout.as_str(), o.stderr.as_str()),
                    (Some(4), "out\n", "err\n")
                )
            }
            Waited::Abandoned { .. } => return Err(anyhow!("abandoned")),
        }
        Ok(())
    }

    #[test]
    fn a_cleared_environment_holds_only_what_the_command_sets() -> Result<()> {
        let out = Cmd::new("/usr/bin/env")
            .env_clear()
            .env("GPUHOST_ONLY", "this")
            .run()?;
        assert_eq!(out.stdout, "GPUHOST_ONLY=this\n");
        Ok(())
    }

    #[test]
    fn missing_program_names_it() {
        let err = Cmd::new("gpuhost-no-such-program")
            .run()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("gpuhost-no-such-program"), "{err}");
    }

    #[test]
    fn display_quotes_what_a_shell_would_split() {
        let argv = vec!["dnf".to_string(), "a b".to_string(), "it's".to_string()];
        assert_eq!(Display(&argv).to_string(), r"dnf 'a b' 'it'\''s'");
    }
}
