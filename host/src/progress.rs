//! Progress on stderr while `apply` runs, for people and for logs.
//!
//! - On a terminal: one status line, rewritten in place, naming the step, the command it waits
//!   for and for how long; cleared when the step ends (the report follows on stdout).
//! - Not a terminal (cloud-init output, a pipe) or under systemd: plain lines — a line when a
//!   step starts changing something, a line every 30 s while a command runs, a line when the
//!   step ends — each saying which step and how long it has taken. No timestamps of their own
//!   (journald and cloud-init add them).
//! - Off: nothing (the default for library users and `plan`).

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off = 0,
    Terminal = 1,
    Plain = 2,
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Off as u8);
/// The terminal line's refresh interval in ms (tests shorten it).
static TERMINAL_MS: AtomicU64 = AtomicU64::new(1000);

struct Current {
    label: String,
    started: Instant,
    last_plain: Instant,
}

static CURRENT: Mutex<Option<Current>> = Mutex::new(None);

/// How often a plain "still running" line is written.
pub(crate) const PLAIN_EVERY: Duration = Duration::from_secs(30);
pub fn set_mode(m: Mode) {
    MODE.store(m as u8, Ordering::Relaxed);
}

/// How often the terminal line is refreshed (default 1 s).
pub fn set_terminal_every(d: Duration) {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(10);
    TERMINAL_MS.store(ms, Ordering::Relaxed);
}

pub fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::Terminal,
        2 => Mode::Plain,
        _ => Mode::Off,
    }
}

/// How often a waiting command should call [`tick`].
pub(crate) fn tick_every() -> Option<Duration> {
    match mode() {
        Mode::Off => None,
        Mode::Terminal => Some(Duration::from_millis(TERMINAL_MS.load(Ordering::Relaxed))),
        Mode::Plain => Some(PLAIN_EVERY),
    }
}

fn with_current(f: impl FnOnce(&mut Option<Current>)) {
    match CURRENT.lock() {
        Ok(mut c) => f(&mut c),
        Err(p) => f(&mut p.into_inner()),
    }
}

fn emit(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = match mode() {
        Mode::Terminal => write!(err, "\r\x1b[2K{line}"),
        Mode::Plain => writeln!(err, "gpuhost: {line}"),
        Mode::Off => Ok(()),
    };
    let _ = err.flush();
}

/// A step starts changing the host: `label` is e.g. `[3/15] kernel-headers`.
pub fn step_changing(label: &str, what: &str) {
    if mode() == Mode::Off {
        return;
    }
    with_current(|c| {
        *c = Some(Current {
            label: label.to_string(),
            started: Instant::now(),
            last_plain: Instant::now(),
        })
    });
    emit(&format!("{label}: {what}"));
}

/// A command has been running for `elapsed`; called by the subprocess wrapper while it waits.
pub fn tick(command: &str, elapsed: Duration) {
    if mode() == Mode::Off {
        return;
    }
    let mut line = None;
    with_current(|c| {
        let Some(cur) = c else { return };
        let step_secs = cur.started.elapsed().as_secs();
        let text = format!(
            "{}: {command} running for {} s (step: {step_secs} s)",
            cur.label,
            elapsed.as_secs()
        );
        if mode() == Mode::Plain {
            if cur.last_plain.elapsed() < PLAIN_EVERY {
                return;
            }
            cur.last_plain = Instant::now();
        }
        line = Some(text);
    });
    if let Some(l) = line {
        emit(&l);
    }
}

/// A step ended.
pub fn step_done(label: &str, outcome: &str, took: Duration) {
    match mode() {
        Mode::Off => {}
        Mode::Terminal => {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
        Mode::Plain => emit(&format!(
            "{label}: {outcome} in {:.1} s",
            took.as_secs_f64()
        )),
    }
    with_current(|c| *c = None);
}

/// A command line for a progress line: the program and its operands (options left out, so
/// `dnf -y --installroot=… install kernel-uek-devel-…` reads `dnf install kernel-uek-devel-…`),
/// cut to a readable length.
pub fn summarize(argv: &[String]) -> String {
    const MAX: usize = 72;
    let words: Vec<&str> = argv
        .iter()
        .enumerate()
        .filter(|(i, a)| *i == 0 || !a.starts_with('-'))
        .map(|(_, a)| a.rsplit('/').next().filter(|_| *a == argv[0]).unwrap_or(a))
        .collect();
    let line = words.join(" ");
    if line.chars().count() <= MAX {
        line
    } else {
        let cut: String = line.chars().take(MAX - 1).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_names_the_program_and_its_operands() {
        let argv: Vec<String> = [
            "/usr/bin/dnf",
            "-y",
            "--quiet",
            "--installroot=/tmp/root",
            "install",
            "kernel-uek-devel-5.15.0-204.147.6.2.el8uek.x86_64",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            summarize(&argv),
            "dnf install kernel-uek-devel-5.15.0-204.147.6.2.el8uek.x86_64"
        );
        let long: Vec<String> = std::iter::once("dnf".to_string())
            .chain((0..20).map(|i| format!("package-{i}")))
            .collect();
        let s = summarize(&long);
        assert_eq!(s.chars().count(), 72);
        assert!(s.ends_with('…'));
    }
}
