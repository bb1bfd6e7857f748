//! Running the NVML probe in a child process under a deadline.
//!
//! A GPU that fell off the bus, or a wedged driver, can block NVML calls for minutes, in an
//! uninterruptible sleep that no signal ends. So the probe runs in a child process
//! (`gpuhost nvml-probe`, which prints an [`NvmlProbe`] as JSON). When it does not
//! answer within the deadline, the parent reports "driver unresponsive", sends it SIGKILL
//! (delivered once the driver lets go), does not wait for it, and records its pid and start
//! time in `<run dir>/nvml-probe.pid`. A later run that finds that process still alive reports
//! the same without starting another probe, so stuck probes never pile up (a cron job or a
//! textfile timer would otherwise add one per minute).
//!
//! The one-shot probe is the helper program `gpuhost-nvml-probe` ([`helper`], [`exec`]): a
//! small executable (about 0.7 MB, built for size) installed beside `gpuhost`, or in
//! `<prefix>/libexec/gpuhost/` (the RPM: `/usr/libexec/gpuhost/gpuhost-nvml-probe`). NVML's
//! own state is about 21 MiB in any client; what a client adds on top is its own code pages
//! (the kernel maps 64 KiB around each page a program runs). A forked copy of the 10 MB
//! `gpuhost` ran its probe code spread over that binary and peaked at 24.4 MiB, above
//! `nvidia-smi -q` (22 712 KiB); the helper peaks at about 22 350 KiB
//! (`bench/RESULTS-status.md`).
//! Where the helper is missing (a `gpuhost` binary copied alone) or cannot start, the probe
//! is a forked copy of `gpuhost status` ([`fork`]): no exec, none of its pages but those the
//! probe touches. Either way the probe gets /dev/null for stdin, a pipe for its answer and
//! one for its stderr, and no other descriptor of the parent's, so that one stuck in the
//! driver holds nothing of the caller's; once its answer is written it closes both pipes and
//! the caller does not wait for its exit. Where a fork cannot be made (or the process runs
//! more than one thread), the probe is the program `gpuhost nvml-probe`, run
//! through `gpuhost_host::cmd::Cmd::spawn`, the subprocess wrapper's background mode, which
//! kills a command past its deadline without waiting for it.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpuhost_host::cmd::{Cmd, Spawned, Waited};

use crate::snapshot::{NvmlProbe, ProbeStatus};

/// File recording a stuck probe: `<pid> <start time in clock ticks>`.
pub(crate) const PID_FILE: &str = "nvml-probe.pid";

/// The run directory, where the pid file and the other records live: `$GPUHOST_RUN_DIR`,
/// else `/run/gpuhost` as root (where it can be made), else `$XDG_RUNTIME_DIR/gpuhost`, else
/// `/tmp/gpuhost-<uid>`. Made when missing (`/run/gpuhost` 0755, for `gpuhost serve`'s
/// socket; the others 0700), whatever the umask. A link, or a directory another user owns,
/// is refused: its records could make a healthy node CRITICAL or hang the caller. One of
/// gpuhost's own naming that others may write in is narrowed (`/tmp/gpuhost-<uid>` and
/// `$XDG_RUNTIME_DIR/gpuhost` to 0700, `/run/gpuhost` to no write but its owner's);
/// `$GPUHOST_RUN_DIR`, the operator's choice, may be root's too and keeps its mode.
pub fn run_dir() -> anyhow::Result<PathBuf> {
    let me = rustix::process::geteuid().as_raw();
    if let Some(d) = std::env::var_os("GPUHOST_RUN_DIR") {
        return own_dir(&PathBuf::from(d), 0o700, None, me);
    }
    let run = Path::new("/run/gpuhost");
    if me == 0 {
        match own_dir(run, 0o755, Some(0o022), me) {
            Ok(d) => return Ok(d),
            // One that is there and refused stays refused; one that cannot be made (a
            // read-only /run) leaves root the directories below, checked the same way.
            Err(e) if run.symlink_metadata().is_ok() => return Err(e),
            Err(e) => tracing::debug!("{e:#}: using the next run directory"),
        }
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        return own_dir(&PathBuf::from(x).join("gpuhost"), 0o700, Some(0o077), me);
    }
    own_dir(
        &PathBuf::from(format!("/tmp/gpuhost-{me}")),
        0o700,
        Some(0o077),
        me,
    )
}

/// `dir`, made with `mode` when missing (its parents as needed, 0700), else checked: a
/// directory, not a link, owned by `me`. One of gpuhost's own naming (`forbidden`: the bits
/// others must not have) has those bits taken away. One the operator named
/// (`$GPUHOST_RUN_DIR`, `forbidden` None) may be root's too, and its mode is left as it is (it
/// may be `/tmp`): the files in it are read only when they are the caller's own.
fn own_dir(dir: &Path, mode: u32, forbidden: Option<u32>, me: u32) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Some(parent) = dir.parent().filter(|p| !p.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(anyhow::anyhow!("cannot make {}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(dir)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.display()))?;
    let refused = |what: String| {
        anyhow::anyhow!(
            "the run directory {} is {what}; gpuhost keeps its probe records only in a directory of its own: remove it, or set XDG_RUNTIME_DIR (or GPUHOST_RUN_DIR) to a directory you own",
            dir.display()
        )
    };
    if !m.file_type().is_dir() {
        return Err(refused(
            gpuhost_host::fsutil::kind_of(m.file_type()).to_string(),
        ));
    }
    if m.uid() != me && (forbidden.is_some() || m.uid() != 0) {
        return Err(refused(format!(
            "owned by uid {}, not by uid {me}",
            m.uid()
        )));
    }
    let now = m.mode() & 0o7777;
    if let Some(forbidden) = forbidden.filter(|f| now & f != 0) {
        // Ours (made under a umask of 000, or by hand), and no one else can replace it.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(now & !forbidden))
            .map_err(|e| anyhow::anyhow!("cannot narrow the mode of {}: {e}", dir.display()))?;
    }
    Ok(dir.to_path_buf())
}

/// A probe that is running.
pub(crate) struct Running {
    child: Child,
    deadline: Instant,
    timeout: Duration,
    run_dir: PathBuf,
}

enum Child {
    /// `gpuhost nvml-probe`, through the subprocess wrapper.
    Spawned(Spawned),
    /// The helper program or a forked copy: its pid, its answer's pipe and its stderr's,
    /// read here.
    Direct {
        pid: libc::pid_t,
        answer: File,
        stderr: File,
        started: Instant,
    },
}

/// The record of an earlier run's probe still stuck, as this run's answer.
fn stuck_earlier(run_dir: &Path) -> Option<Box<NvmlProbe>> {
    stuck_probe(run_dir).map(|pid| {
        Box::new(NvmlProbe {
            status: ProbeStatus::StuckEarlier,
            error: Some(format!(
                "an NVML probe started by an earlier run (pid {pid}) is still stuck in the driver; no new probe was started"
            )),
            stuck_pid: Some(pid),
            ..NvmlProbe::default()
        })
    })
}

/// This process's peak resident memory so far (`getrusage`'s `ru_maxrss`), KiB.
pub(crate) fn peak_rss_kib() -> Option<u64> {
    // SAFETY: an all-zero rusage is a valid value of that plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF, with a pointer to a local that getrusage fills.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    u64::try_from(ru.ru_maxrss).ok()
}

/// How many threads this process runs (`/proc/self/stat`); None when unreadable.
fn threads() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &text[text.rfind(')')? + 1..];
    // After the command name: field 3 is the state, field 20 the thread count.
    after.split_whitespace().nth(17)?.parse().ok()
}

/// A pipe whose ends are closed on exec: (read, write).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Start the probe as a forked copy of this process, which runs `work` (its answer: one line
/// of JSON) and exits; `argv` (the program `gpuhost nvml-probe …`) is run instead
/// where no fork can be made or this process runs more than one thread (a lock another thread
/// holds at the fork would stay held in the copy). `Err` carries the finished result (an
/// earlier probe still stuck, or no probe could be started).
pub(crate) fn fork(
    work: impl FnOnce() -> String,
    argv: &[OsString],
    timeout: Duration,
    run_dir: &Path,
) -> Result<Running, Box<NvmlProbe>> {
    if let Some(p) = stuck_earlier(run_dir) {
        return Err(p);
    }
    if threads() != Some(1) {
        tracing::debug!("more than one thread: the NVML probe is started as a program");
        return start(argv, timeout, run_dir);
    }
    let pipes = pipe().and_then(|a| pipe().map(|e| (a, e)));
    let ((answer_r, answer_w), (err_r, err_w)) = match pipes {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!("no pipe for a forked NVML probe ({e}): started as a program");
            return start(argv, timeout, run_dir);
        }
    };
    let started = Instant::now();
    // SAFETY: this process runs one thread (checked above), so the copy holds no lock another
    // thread took; the copy only runs `work`, writes its answer and leaves with _exit, never
    // returning into the caller's code.
    match unsafe { libc::fork() } {
        -1 => {
            let e = std::io::Error::last_os_error();
            tracing::debug!("cannot fork the NVML probe ({e}): started as a program");
            start(argv, timeout, run_dir)
        }
        0 => {
            drop((answer_r, err_r));
            child_setup(&answer_w, &err_w);
            // The parent's freed heap goes back to the kernel: the copy's pages are only
            // what it shares and what the probe touches.
            // SAFETY: malloc_trim only releases free memory of this (one-threaded) copy.
            unsafe {
                libc::malloc_trim(0);
            }
            let out =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_default();
            answer_and_leave(&out, File::from(answer_w))
        }
        pid => Ok(Running {
            child: Child::Direct {
                pid,
                answer: File::from(answer_r),
                stderr: File::from(err_r),
                started,
            },
            deadline: started + timeout,
            timeout,
            run_dir: run_dir.to_path_buf(),
        }),
    }
}

/// In the forked copy: stdin and stdout from/to /dev/null, stderr into its pipe, and every
/// other descriptor of the parent's closed but the answer's pipe.
fn child_setup(answer: &OwnedFd, err: &OwnedFd) {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        // SAFETY: dup2 onto the standard descriptors of this (one-threaded) copy.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    // SAFETY: as above.
    unsafe {
        libc::dup2(err.as_raw_fd(), 2);
    }
    close_inherited(Some(answer.as_raw_fd()));
}

/// Close every descriptor above stderr but `keep`: a probe stuck in the driver holds nothing
/// of its caller's (the helper inherits what its caller's caller left open).
pub(crate) fn close_inherited(keep: Option<RawFd>) {
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    for fd in fds {
        if fd > 2 && Some(fd) != keep {
            // SAFETY: closing descriptors this process inherited and does not use (the one
            // the directory listing used is already closed: EBADF, harmless).
            unsafe {
                libc::close(fd);
            }
        }
    }
}

/// The probe's last act, in the helper and in a forked copy: write the answer (one line of
/// JSON) on `answer`, close stderr, then the answer — the caller has the whole answer now and
/// need not wait for the exit, where the driver releases NVML's objects (about 5 ms on an
/// H200) — and leave with `_exit`: no destructor, atexit handler or buffered output runs
/// (in a forked copy: none of the parent's runs twice). 0 when the answer was written.
pub(crate) fn answer_and_leave(out: &str, mut answer: File) -> ! {
    let ok = !out.is_empty() && answer.write_all(out.as_bytes()).is_ok();
    // SAFETY: closes this process's stderr; nothing writes to it after this.
    unsafe {
        libc::close(2);
    }
    drop(answer);
    // `GPUHOST_PROBE_EXIT_DELAY_MS` stands for a slow release of NVML's objects at the exit
    // (tests, drills, bench/rss-anatomy-gpu-run.sh): the caller must not wait for it.
    if let Some(ms) = std::env::var("GPUHOST_PROBE_EXIT_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    // SAFETY: leaves at once, as said above.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

/// The NVML probe helper's file name.
pub(crate) const HELPER: &str = "gpuhost-nvml-probe";

/// The NVML probe helper: `$GPUHOST_NVML_PROBE` when set (empty: none, the probe is forked),
/// else `gpuhost-nvml-probe` beside this executable (cargo's target directory, a tarball),
/// else in `../libexec/gpuhost/` from it (the RPM). None: not found.
pub(crate) fn helper() -> Option<PathBuf> {
    installed_helper("GPUHOST_NVML_PROBE", HELPER)
}

/// A helper program of gpuhost's: `$<env>` when set (empty: none), else `name` beside this
/// program or in `../libexec/gpuhost/`, when it is an executable file.
pub fn installed_helper(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return (!p.is_empty()).then(|| PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(name), dir.join("../libexec/gpuhost").join(name)]
        .into_iter()
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Start the NVML probe helper `program` with `args` unless a probe from an earlier run is
/// still stuck: its stdout is its answer, read like a forked copy's. `Err` carries the
/// finished result (stuck earlier, or the helper could not be started).
pub(crate) fn exec(
    program: &Path,
    args: &[OsString],
    timeout: Duration,
    run_dir: &Path,
) -> Result<Running, Box<NvmlProbe>> {
    if let Some(p) = stuck_earlier(run_dir) {
        return Err(p);
    }
    let started = Instant::now();
    let mut cmd = Cmd::new(program.to_string_lossy()).args(args);
    if let Some(level) = crate::helper_log::caller_level() {
        cmd = cmd.env(crate::helper_log::ENV, level);
    }
    let mut child = cmd
        .start_piped()
        .map_err(|e| Box::new(failed(format!("cannot start the NVML probe: {e:#}"))))?;
    let pid = libc::pid_t::try_from(child.id()).unwrap_or(0);
    let (Some(answer), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(Box::new(failed("the NVML probe has no pipes".into())));
    };
    // The std handle is dropped without a wait: finish_direct reaps the pid itself (or
    // leaves it to a later probe, or to init).
    drop(child);
    Ok(Running {
        child: Child::Direct {
            pid,
            answer: File::from(OwnedFd::from(answer)),
            stderr: File::from(OwnedFd::from(stderr)),
            started,
        },
        deadline: started + timeout,
        timeout,
        run_dir: run_dir.to_path_buf(),
    })
}

/// Start the probe `argv` unless a probe from an earlier run is still stuck. `Err` carries
/// the finished result (stuck earlier, or could not start).
pub(crate) fn start(
    argv: &[OsString],
    timeout: Duration,
    run_dir: &Path,
) -> Result<Running, Box<NvmlProbe>> {
    if let Some(p) = stuck_earlier(run_dir) {
        return Err(p);
    }
    let Some((program, args)) = argv.split_first() else {
        return Err(Box::new(failed("empty probe command".into())));
    };
    let started = Instant::now();
    let spawned = Cmd::new(program.to_string_lossy())
        .args(args)
        .spawn()
        .map_err(|e| Box::new(failed(format!("cannot start the NVML probe: {e:#}"))))?;
    Ok(Running {
        child: Child::Spawned(spawned),
        deadline: started + timeout,
        timeout,
        run_dir: run_dir.to_path_buf(),
    })
}

/// The one-shot NVML probe `program` run once under `timeout` (`gpuhost compat`'s question to
/// NVML: the driver, its CUDA version, the GPUs), unless one from an earlier run is still
/// stuck. Err: the run directory, where a stuck probe is recorded, is refused.
pub fn probe_once(program: &[OsString], timeout: Duration) -> anyhow::Result<NvmlProbe> {
    let run_dir = run_dir()?;
    Ok(match start(program, timeout, &run_dir) {
        Ok(r) => r.finish(),
        Err(p) => *p,
    })
}

fn failed(msg: String) -> NvmlProbe {
    NvmlProbe {
        status: ProbeStatus::ProbeFailed,
        error: Some(msg),
        ..NvmlProbe::default()
    }
}

impl Running {
    /// Wait for the probe's answer until the deadline.
    pub(crate) fn finish(self) -> NvmlProbe {
        let spawned = match self.child {
            Child::Spawned(s) => s,
            Child::Direct {
                pid,
                answer,
                stderr,
                started,
            } => {
                return finish_direct(
                    pid,
                    answer,
                    stderr,
                    started,
                    self.deadline,
                    self.timeout,
                    &self.run_dir,
                )
            }
        };
        let out = match spawned.wait_until(self.deadline) {
            Waited::Done(out) => out,
            Waited::Abandoned { pid, elapsed } => {
                return abandoned(&self.run_dir, pid, elapsed, self.timeout)
            }
        };
        let mut probe = match serde_json::from_str::<NvmlProbe>(out.stdout.trim()) {
            Ok(p) => p,
            Err(e) => failed(format!(
                "the NVML probe exited with {} without a readable answer ({e}): {}",
                out.code
                    .map_or_else(|| "a signal".to_string(), |c| format!("exit status {c}")),
                gpuhost_host::cmd::tail_lines(&out.stderr, 5).trim()
            )),
        };
        probe.duration_ms = Some(round_ms(out.duration));
        probe
    }
}

/// Wait for the helper or a forked probe: its answer to the end, by the deadline (its exit is
/// waited for only when no readable answer came); past it, SIGKILL, recorded, not waited
/// for. Its stderr is passed on to ours.
fn finish_direct(
    pid: libc::pid_t,
    answer: File,
    stderr: File,
    started: Instant,
    deadline: Instant,
    timeout: Duration,
    run_dir: &Path,
) -> NvmlProbe {
    let give_up = || {
        // SAFETY: kill takes a pid and a signal; the pid is our own child, not yet reaped.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        abandoned(
            run_dir,
            u32::try_from(pid).unwrap_or(0),
            started.elapsed(),
            timeout,
        )
    };
    let Some((buf, err)) = read_answer(answer, stderr, deadline) else {
        return give_up();
    };
    let err = String::from_utf8_lossy(&err);
    if !err.is_empty() {
        eprint!("{err}");
    }
    let text = String::from_utf8_lossy(&buf);
    let answer = serde_json::from_str::<NvmlProbe>(text.trim());
    reap_left();
    // A readable answer is all this run needs: the copy's exit (NVML's objects released by
    // the driver) is not waited for; it is reaped by a later probe of this process or, once
    // this process has left, by init. Without one, its exit status says what happened.
    let Some(status) = exit_unless_answered(pid, answer.is_ok(), deadline) else {
        return give_up();
    };
    let mut probe = match answer {
        Ok(p) => p,
        Err(e) => failed(format!(
            "the NVML probe (pid {pid}) ended with {} without a readable answer ({e}): {}",
            if libc::WIFSIGNALED(status) {
                format!("signal {}", libc::WTERMSIG(status))
            } else {
                format!("exit status {}", libc::WEXITSTATUS(status))
            },
            gpuhost_host::cmd::tail_lines(&err, 5).trim()
        )),
    };
    probe.duration_ms = Some(round_ms(started.elapsed()));
    probe
}

/// The probe's answer to its end and its stderr (to its end too, by the deadline), or `None`
/// when the deadline passed before the answer ended.
fn read_answer(
    mut answer: File,
    mut stderr: File,
    deadline: Instant,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(8 * 1024);
    let mut err = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut err_open = true;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        // Its stderr is read as it comes, so that a chatty probe never fills that pipe.
        let mut p = [
            libc::pollfd {
                fd: answer.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if err_open { stderr.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: two pollfds, for descriptors we own (or -1, ignored).
        let n = unsafe { libc::poll(p.as_mut_ptr(), 2, ms) };
        if n <= 0 {
            continue;
        }
        if p[1].revents != 0 {
            match stderr.read(&mut chunk) {
                Ok(0) | Err(_) => err_open = false,
                Ok(k) => err.extend_from_slice(&chunk[..k]),
            }
        }
        if p[0].revents != 0 {
            match answer.read(&mut chunk) {
                Ok(0) => break,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    // The answer is complete (the copy closed its stderr before it). Its stderr, to its end.
    if err_open {
        let _ = read_until(&mut stderr, &mut err, deadline);
    }
    Some((buf, err))
}

/// The probe's wait status once it has exited; with an answer in hand, a probe still leaving
/// is left to be reaped later (status 0). `None`: no answer and still running at the deadline.
fn exit_unless_answered(
    pid: libc::pid_t,
    answered: bool,
    deadline: Instant,
) -> Option<libc::c_int> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waitpid on our own child, with an out pointer to a local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid || r < 0 {
            return Some(status);
        }
        if answered {
            left_behind(pid);
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Read `from` to its end, or until the deadline (a descendant of the copy could hold it).
fn read_until(from: &mut File, into: &mut Vec<u8>, deadline: Instant) -> std::io::Result<()> {
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        let mut p = libc::pollfd {
            fd: from.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, for a descriptor we own.
        if ms == 0 || unsafe { libc::poll(&mut p, 1, ms) } <= 0 {
            return Ok(());
        }
        match from.read(&mut chunk)? {
            0 => return Ok(()),
            k => into.extend_from_slice(&chunk[..k]),
        }
    }
}

/// Probes (the helper, forked copies) that answered and were still leaving: reaped at the next
/// probe of this process (`status --wait-healthy` runs one per round:
/// `tests/status.rs::a_long_wait_healthy_reaps_the_probes_it_left_leaving`), or by init once
/// it has left.
static LEFT: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

fn left_behind(pid: libc::pid_t) {
    if let Ok(mut l) = LEFT.lock() {
        l.push(pid);
    }
}

/// Reap the probes left leaving that have gone since.
fn reap_left() {
    if let Ok(mut l) = LEFT.lock() {
        l.retain(|&pid| {
            let mut status: libc::c_int = 0;
            // SAFETY: waitpid on our own child, with an out pointer to a local.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            r == 0
        });
    }
}

/// The deadline passed: the probe was killed (delivered when the driver lets go) and left
/// behind; record it so that later runs do not pile another one on top.
fn abandoned(run_dir: &Path, pid: u32, elapsed: Duration, timeout: Duration) -> NvmlProbe {
    if let Err(e) = record_stuck(run_dir, pid) {
        tracing::warn!("cannot record the stuck NVML probe (pid {pid}): {e:#}");
    }
    NvmlProbe {
        status: ProbeStatus::Unresponsive,
        error: Some(format!(
            "the NVML probe (pid {pid}) did not answer within {:.1} s",
            timeout.as_secs_f64()
        )),
        duration_ms: Some(round_ms(elapsed)),
        stuck_pid: Some(pid),
        ..NvmlProbe::default()
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// A JSON file an earlier run kept in `run_dir` (the counters' baseline, the InfoROM
/// validations, the CUDA check); None when it is absent or unreadable: the caller starts
/// afresh.
pub(crate) fn load_kept<T: serde::de::DeserializeOwned>(run_dir: &Path, file: &str) -> Option<T> {
    let path = run_dir.join(file);
    match gpuhost_host::fsutil::read_own_file(&path, KEPT_MAX_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes).ok(),
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!("{} ignored: {e}", path.display());
            }
            None
        }
    }
}

/// The most a file of the run directory may hold (the largest, the boot cache of an 8-GPU
/// node, is about 20 KiB): a bigger one is not gpuhost's.
pub(crate) const KEPT_MAX_BYTES: u64 = 1 << 20;

/// Keep `v` as `file` in `run_dir` for the next runs (atomically; the directory is created).
pub(crate) fn store_kept<T: serde::Serialize>(
    run_dir: &Path,
    file: &str,
    v: &T,
) -> anyhow::Result<()> {
    let text = serde_json::to_string(v)?;
    gpuhost_host::fsutil::write_atomic(&run_dir.join(file), text.as_bytes(), 0o644)
}

/// This boot's id (`/proc/sys/kernel/random/boot_id` of the system the probe runs on): what
/// is kept in the run directory belongs to one boot.
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Record `pid` as a stuck probe in `run_dir`.
pub(crate) fn record_stuck(run_dir: &Path, pid: u32) -> anyhow::Result<()> {
    // Without its start time a pid says nothing (pids are reused): no record then.
    let Some(start) = start_time(pid) else {
        return Err(anyhow::anyhow!("/proc/{pid}/stat gives no start time"));
    };
    gpuhost_host::fsutil::write_atomic(
        &run_dir.join(PID_FILE),
        format!("{pid} {start}\n").as_bytes(),
        0o644,
    )
}

/// The pid of a recorded probe that is still alive (same pid and start time as /proc gives
/// them, not a zombie) and is a gpuhost probe of this user's; a stale, malformed or
/// zero-time record, or one naming another program, is removed. The record is read as the
/// run directory's other files are: no link, no FIFO, this user's, small.
pub(crate) fn stuck_probe(run_dir: &Path) -> Option<u32> {
    let file = run_dir.join(PID_FILE);
    let text = match gpuhost_host::fsutil::read_own_file(&file, KEPT_MAX_BYTES) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::debug!("{} ignored: {e}", file.display());
            String::new()
        }
    };
    let mut it = text.split_whitespace();
    let pid: Option<u32> = it.next().and_then(|p| p.parse().ok());
    let start: Option<u64> = it.next().and_then(|s| s.parse().ok());
    if let (Some(pid), Some(start)) = (pid, start) {
        if let Some((state, now_start)) = proc_stat(pid) {
            // A pid is the recorded probe only with the start time /proc gives it: a zero (or
            // any other time) is another process that got the pid, or a forged record.
            if !matches!(state, 'Z' | 'X') && start != 0 && start == now_start && is_probe(pid) {
                return Some(pid);
            }
        }
    }
    let _ = std::fs::remove_file(&file);
    None
}

/// Whether process `pid` is a gpuhost probe of this user's: its program (`/proc/PID/exe`) is
/// `gpuhost` (a forked copy, or `gpuhost nvml-probe`) or the helper
/// `gpuhost-nvml-probe`, and it runs as this user. pid 1, a shell, another user's process are
/// not probes, whatever a record says.
fn is_probe(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let ours = std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == me);
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    // A binary replaced by an upgrade reads `gpuhost (deleted)`.
    let name = name.as_deref().map(|n| n.trim_end_matches(" (deleted)"));
    ours && matches!(name, Some("gpuhost" | "gpuhost-nvml-probe"))
}

fn start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, s)| s)
}

/// (state, start time) from /proc/<pid>/stat.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state); start time is field 22.
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub(crate) mod tests {
    use super::*;

    fn argv(cmd: &str) -> Vec<OsString> {
        vec!["/bin/sh".into(), "-c".into(), cmd.into()]
    }

    /// The operator's `$GPUHOST_RUN_DIR` keeps its mode (it may be `/tmp`, 1777: narrowing it
    /// would lock every other user out of it); one of gpuhost's own naming is narrowed; a link
    /// is refused.
    #[test]
    fn only_gpuhosts_own_run_directories_are_narrowed() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let me = rustix::process::geteuid().as_raw();
        let mode = |d: &Path| std::fs::metadata(d).unwrap().permissions().mode() & 0o7777;
        let shared = t.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        own_dir(&shared, 0o700, None, me).unwrap();
        assert_eq!(mode(&shared), 0o1777);
        own_dir(&shared, 0o700, Some(0o077), me).unwrap();
        assert_eq!(mode(&shared), 0o1700);
        let made = t.path().join("a/b/gpuhost-1");
        own_dir(&made, 0o700, Some(0o077), me).unwrap();
        assert_eq!(mode(&made), 0o700);
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&made, &link).unwrap();
        assert!(own_dir(&link, 0o700, None, me).is_err());
    }

    /// Stands for a probe stuck in the driver: a process of this user's whose program is named
    /// `gpuhost` (a copy of `sleep`, in `dir`), alive for 30 s and ours to end.
    pub(crate) fn stuck_gpuhost(dir: &Path) -> std::process::Child {
        let exe = dir.join("gpuhost");
        std::fs::copy("/bin/sleep", &exe).unwrap();
        // Another test thread's fork may still hold the copy open for writing for a moment
        // (ETXTBSY): try again briefly.
        for _ in 0..50 {
            match std::process::Command::new(&exe).arg("30").spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other.unwrap(),
            }
        }
        std::process::Command::new(exe).arg("30").spawn().unwrap()
    }

    #[test]
    fn a_record_matches_only_by_pid_and_start_time() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(PID_FILE);
        // pid 1 is alive, but "0" is no start time: never a match, and the record goes.
        std::fs::write(&file, "1 0\n").unwrap();
        assert_eq!(stuck_probe(dir.path()), None);
        assert!(!file.exists(), "a zero-time record is removed");
        // Our own pid with another start time: a reused pid, not the probe.
        let me = std::process::id();
        let start = start_time(me).unwrap();
        std::fs::write(&file, format!("{me} {}\n", start + 1)).unwrap();
        assert_eq!(stuck_probe(dir.path()), None);
        // Our own pid with its start time, but this test is no gpuhost probe: no match.
        record_stuck(dir.path(), me).unwrap();
        assert_eq!(stuck_probe(dir.path()), None);
        // A gpuhost process of ours with its start time: a match.
        let mut probe = stuck_gpuhost(dir.path());
        record_stuck(dir.path(), probe.id()).unwrap();
        assert_eq!(stuck_probe(dir.path()), Some(probe.id()));
        probe.kill().unwrap();
        probe.wait().unwrap();
    }

    #[test]
    fn answer_within_deadline_is_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let r = start(
            &argv(r#"echo '{"status":"no_library","error":"x","duration_ms":null,"driver_version":null,"nvml_version":null,"cuda_driver_version":null,"device_count":null,"gpus":[]}'"#),
            Duration::from_secs(10),
            dir.path(),
        )
        .map_err(|p| p.error)
        .unwrap();
        let p = r.finish();
        assert_eq!(p.status, ProbeStatus::NoLibrary);
        assert!(!dir.path().join(PID_FILE).exists());
    }

    #[test]
    fn hung_probe_is_unresponsive_and_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let r = start(
            &argv("exec sleep 30"),
            Duration::from_millis(300),
            dir.path(),
        )
        .map_err(|p| p.error)
        .unwrap();
        let p = r.finish();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "waited for the stuck probe"
        );
        assert_eq!(p.status, ProbeStatus::Unresponsive);
        let pid = p.stuck_pid.unwrap();
        let rec = std::fs::read_to_string(dir.path().join(PID_FILE)).unwrap();
        assert!(rec.starts_with(&format!("{pid} ")), "{rec}");
    }

    #[test]
    fn a_live_stuck_probe_blocks_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut stuck = stuck_gpuhost(dir.path());
        record_stuck(dir.path(), stuck.id()).unwrap();
        let marker = dir.path().join("new-probe-ran");
        let r = start(
            &argv(&format!("touch {}", marker.display())),
            Duration::from_secs(5),
            dir.path(),
        );
        let p = match r {
            Err(p) => *p,
            Ok(run) => {
                let _ = run.finish();
                panic!("a new probe was started");
            }
        };
        assert_eq!(p.status, ProbeStatus::StuckEarlier);
        assert_eq!(p.stuck_pid, Some(stuck.id()));
        assert!(!marker.exists());
        stuck.kill().unwrap();
        stuck.wait().unwrap();
        // Once it is gone, the record is stale: removed, and a probe starts again.
        assert_eq!(stuck_probe(dir.path()), None);
        assert!(!dir.path().join(PID_FILE).exists());
    }

    #[test]
    fn crashing_probe_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let r = start(
            &argv("echo boom >&2; exit 101"),
            Duration::from_secs(5),
            dir.path(),
        )
        .map_err(|p| p.error)
        .unwrap();
        let p = r.finish();
        assert_eq!(p.status, ProbeStatus::ProbeFailed);
        assert!(p.error.unwrap().contains("boom"));
    }
}
